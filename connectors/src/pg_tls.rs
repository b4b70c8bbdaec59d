//! TLS of postgres-audit's connections (`connection.sslmode`, `connection.sslrootcert`):
//! the subset of libpq's `sslmode` that a connector needs, on rustls with the ring
//! provider only (aws-lc-rs stays out of the build, see `docs/security.md`).
//!
//! | `sslmode` | `sslrootcert` | what is checked |
//! | --- | --- | --- |
//! | `disable` | ignored | nothing: plaintext |
//! | `require` | absent | the link is encrypted; the server's certificate is not checked (libpq's `require`) |
//! | `require` | a CA file | encrypted; the chain must lead to that CA, the host name is not checked (libpq's `require` with a root file, i.e. `verify-ca`) |
//! | `verify-full` | a CA file (required) | encrypted; chain to that CA and the certificate must name `connection.host` |
//!
//! The CA file is read at each connect, so a rotated file is used without a restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, SignatureScheme};

/// `connection.sslmode`: libpq's values that postgres-audit supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plaintext.
    Disable,
    /// TLS; the certificate is checked only against `sslrootcert` when one is given.
    Require,
    /// TLS; chain to `sslrootcert` and host name checked.
    VerifyFull,
}

impl SslMode {
    /// The accepted values, as written in a config.
    pub const NAMES: [&'static str; 3] = ["disable", "require", "verify-full"];

    /// Parses a config value.
    ///
    /// # Errors
    /// A message naming the accepted values.
    pub fn parse(value: &str) -> Result<SslMode, String> {
        match value.trim() {
            "disable" => Ok(SslMode::Disable),
            "require" => Ok(SslMode::Require),
            "verify-full" => Ok(SslMode::VerifyFull),
            _ => Err(format!("value is not one of {}", SslMode::NAMES.join(", "))),
        }
    }
}

/// What a connection does about TLS, decided from the two settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsPlan {
    /// No TLS.
    Plain,
    /// TLS, any certificate accepted (encryption against passive listeners only).
    EncryptOnly,
    /// TLS, the chain must lead to a CA of the file; any host name.
    VerifyChain(PathBuf),
    /// TLS, chain to a CA of the file and the host name.
    VerifyFull(PathBuf),
}

/// Why a plan could not be made or a TLS config built; `key` is the config key to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfigError {
    /// Offending config key.
    pub key: &'static str,
    /// What is wrong.
    pub reason: String,
}

/// Decides the plan. `verify-full` without a CA file is refused (there is no default
/// root file: a private CA is the usual case, and public roots are not trusted silently).
///
/// # Errors
/// [`TlsConfigError`] naming `root_key`.
pub fn plan(
    mode: SslMode,
    root: Option<PathBuf>,
    root_key: &'static str,
) -> Result<TlsPlan, TlsConfigError> {
    match (mode, root) {
        (SslMode::Disable, _) => Ok(TlsPlan::Plain),
        (SslMode::Require, None) => Ok(TlsPlan::EncryptOnly),
        (SslMode::Require, Some(ca)) => Ok(TlsPlan::VerifyChain(ca)),
        (SslMode::VerifyFull, Some(ca)) => Ok(TlsPlan::VerifyFull(ca)),
        (SslMode::VerifyFull, None) => Err(TlsConfigError {
            key: root_key,
            reason: "is required with sslmode verify-full (a PEM file of the CA that signed the server's certificate)".into(),
        }),
    }
}

/// Validator of `connection.sslrootcert`: an absolute path (the file lives on the
/// executor's host, whose working directory the operator does not know).
///
/// # Errors
/// A message when the path is relative.
pub fn root_path(value: &str) -> Result<(), String> {
    let v = value.trim();
    if v.is_empty() || Path::new(v).is_absolute() {
        Ok(())
    } else {
        Err("the path is not absolute".to_owned())
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The rustls client config of `plan`, `None` for [`TlsPlan::Plain`]. Reads the CA file.
///
/// # Errors
/// [`TlsConfigError`] naming `root_key` when the CA file cannot be read or used.
pub fn client_config(
    plan: &TlsPlan,
    root_key: &'static str,
) -> Result<Option<ClientConfig>, TlsConfigError> {
    let bad = |reason: String| TlsConfigError {
        key: root_key,
        reason,
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?;
    let webpki = |ca: &Path| {
        let roots = wharf::tls::read_roots(ca).map_err(|e| bad(e.to_string()))?;
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| bad(format!("{}: {e}", ca.display())))
    };
    let config = match plan {
        TlsPlan::Plain => return Ok(None),
        TlsPlan::EncryptOnly => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
            .with_no_client_auth(),
        TlsPlan::VerifyChain(ca) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly(webpki(ca)?)))
            .with_no_client_auth(),
        TlsPlan::VerifyFull(ca) => builder
            .with_webpki_verifier(webpki(ca)?)
            .with_no_client_auth(),
    };
    Ok(Some(config))
}

/// `require` without a root file: any certificate, but the handshake's signatures are
/// still checked (the server must hold the key of the certificate it shows).
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `require` with a root file (libpq's `verify-ca`): the chain is checked, a certificate
/// for another name is accepted.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// A hint added to a refused plaintext connection: PostgreSQL answers a client that
/// `pg_hba.conf` admits only over TLS with `28000` and "no encryption" in the message.
pub fn plaintext_refused_hint(plan: &TlsPlan, code: &str, message: &str) -> Option<&'static str> {
    match plan {
        TlsPlan::Plain if code == "28000" && message.contains("no encryption") => Some(
            "the server admits this client only over TLS: set connection.sslmode to verify-full (or require)",
        ),
        TlsPlan::Plain
        | TlsPlan::EncryptOnly
        | TlsPlan::VerifyChain(_)
        | TlsPlan::VerifyFull(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "connection.sslrootcert";

    #[test]
    fn sslmode_parses_the_three_values_and_names_them_on_error() {
        assert_eq!(SslMode::parse("disable"), Ok(SslMode::Disable));
        assert_eq!(SslMode::parse("require"), Ok(SslMode::Require));
        assert_eq!(SslMode::parse(" verify-full "), Ok(SslMode::VerifyFull));
        let err = SslMode::parse("verify-x").unwrap_err();
        assert!(
            !err.contains("verify-x") && err.contains("verify-full"),
            "{err}"
        );
    }

    #[test]
    fn disable_is_plain_whatever_the_root_file() {
        assert_eq!(plan(SslMode::Disable, None, KEY), Ok(TlsPlan::Plain));
        assert_eq!(
            plan(SslMode::Disable, Some("/ca.pem".into()), KEY),
            Ok(TlsPlan::Plain)
        );
    }

    #[test]
    fn require_without_a_root_file_only_encrypts() {
        assert_eq!(plan(SslMode::Require, None, KEY), Ok(TlsPlan::EncryptOnly));
    }

    #[test]
    fn require_with_a_root_file_checks_the_chain() {
        assert_eq!(
            plan(SslMode::Require, Some("/ca.pem".into()), KEY),
            Ok(TlsPlan::VerifyChain("/ca.pem".into()))
        );
    }

    #[test]
    fn verify_full_checks_chain_and_name() {
        assert_eq!(
            plan(SslMode::VerifyFull, Some("/ca.pem".into()), KEY),
            Ok(TlsPlan::VerifyFull("/ca.pem".into()))
        );
    }

    #[test]
    fn verify_full_without_a_root_file_names_the_key() {
        let err = plan(SslMode::VerifyFull, None, KEY).unwrap_err();
        assert_eq!(err.key, KEY);
        assert!(err.reason.contains("verify-full"), "{}", err.reason);
    }

    #[test]
    fn a_relative_root_path_is_refused() {
        assert!(root_path("/etc/ssl/ca.pem").is_ok());
        assert!(root_path("").is_ok());
        assert!(root_path("ca.pem").unwrap_err().contains("not absolute"));
    }

    #[test]
    fn an_unreadable_root_file_names_the_key_and_the_file() {
        let err =
            client_config(&TlsPlan::VerifyFull("/nonexistent/ca.pem".into()), KEY).unwrap_err();
        assert_eq!(err.key, KEY);
        assert!(err.reason.contains("/nonexistent/ca.pem"), "{}", err.reason);
    }

    #[test]
    fn plain_has_no_tls_config() {
        assert!(client_config(&TlsPlan::Plain, KEY).unwrap().is_none());
        assert!(client_config(&TlsPlan::EncryptOnly, KEY).unwrap().is_some());
    }

    #[test]
    fn a_plaintext_refusal_gets_the_sslmode_hint_only_in_plain_mode() {
        let msg = "no pg_hba.conf entry for host \"127.0.0.1\", user \"u\", database \"d\", no encryption";
        assert!(plaintext_refused_hint(&TlsPlan::Plain, "28000", msg).is_some());
        assert!(plaintext_refused_hint(&TlsPlan::Plain, "28P01", msg).is_none());
        assert!(plaintext_refused_hint(&TlsPlan::Plain, "28000", "password").is_none());
        assert!(plaintext_refused_hint(&TlsPlan::EncryptOnly, "28000", msg).is_none());
    }
}
