//! Transport security shared by the control plane and the executors: certificate, key
//! and CA loaded from PEM files (`--tls-cert`, `--tls-key`, `--tls-ca`), rustls with the
//! ring provider only (aws-lc-rs must stay out of the build: both providers compiled in
//! make rustls refuse to pick one), reloaded when the files change on disk.
//!
//! - Server side: [`serve_incoming`] accepts TCP connections and, with TLS, runs each
//!   handshake with the *current* server config, so a rotated certificate is used by the
//!   next connection and nothing restarts. Handlers read the caller with [`peer`].
//! - Client side: [`channel`] makes a lazy tonic `Channel` whose connector dials TCP and,
//!   for an `https://` URL, runs the handshake with the current client config. An
//!   `https://` URL without TLS material is refused ([`TlsError::HttpsWithoutTls`]); a TLS
//!   server reached over `http://` and a plaintext server reached over `https://` fail
//!   with an error that names the peer and says which side speaks what.
//!
//! Identities come from certificates: see [`crate::identity`] and `docs/security.md`.
//!
//! This module loads and reloads the material; `server` accepts connections,
//! `refusal` turns away and counts peers refused before anything ran, `client` dials.
//! Their public items are re-exported here, so callers name them `wharf::tls::...`.

mod client;
mod refusal;
mod server;

pub use client::{
    ClientTls, ServerIdentityError, Target, channel, channel_expecting, check_server_identity,
    check_url, error_chain,
};
pub use refusal::{
    PEER_REFUSAL_LOG_INTERVAL, PEERS_REFUSED, PeerRefusal, peer_refused, render_peer_refusals,
};
pub use server::{
    BindDecision, PeerInfo, ServerIo, bind_decision, caller, is_loopback, peer, serve_incoming,
    serve_incoming_https,
};

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::identity::{DEFAULT_TRUST_DOMAIN, Identity, IdentityError};

/// How often the certificate files are checked for changes, in milliseconds.
pub const RELOAD_POLL_INTERVAL_MS: u64 = 1_000;
/// Longest a TLS handshake may take on a listener, in milliseconds (a silent client must
/// not hold a task forever).
pub const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

/// ALPN id of HTTP/2 (gRPC).
const ALPN_H2: &[u8] = b"h2";
/// ALPN id of HTTP/1.1.
const ALPN_HTTP11: &[u8] = b"http/1.1";

/// The three PEM files of one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// This process's certificate chain (leaf first).
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The cluster CA: peers' certificates must chain to it.
    pub ca: PathBuf,
}

impl TlsFiles {
    /// All three files or none: `Ok(None)` when none is set.
    ///
    /// # Errors
    /// [`TlsError::Incomplete`] naming the missing flag when only some are set.
    pub fn from_parts(
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
        ca: Option<PathBuf>,
    ) -> Result<Option<Self>, TlsError> {
        match (cert, key, ca) {
            (None, None, None) => Ok(None),
            (Some(cert), Some(key), Some(ca)) => Ok(Some(Self { cert, key, ca })),
            (cert, key, _) => Err(TlsError::Incomplete(if cert.is_none() {
                "--tls-cert"
            } else if key.is_none() {
                "--tls-key"
            } else {
                "--tls-ca"
            })),
        }
    }
}

/// Why TLS could not be set up or a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Only some of `--tls-cert/--tls-key/--tls-ca` are set.
    #[error("TLS needs --tls-cert, --tls-key and --tls-ca together; {0} is missing")]
    Incomplete(&'static str),
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
    /// A file holds no usable PEM item.
    #[error("{path}: {reason}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// rustls refused the material (for example a key that does not match the certificate).
    #[error("TLS configuration: {0}")]
    Config(String),
    /// The own certificate names no valid identity.
    #[error("{path}: {source}")]
    Identity {
        /// The certificate file.
        path: PathBuf,
        /// Why.
        source: IdentityError,
    },
    /// The own certificate does not chain to the CA: every peer would refuse it in the
    /// handshake (BadSignature, UnknownIssuer).
    #[error(
        "--tls-cert {} is not signed by --tls-ca {}: {reason}; peers that trust this CA refuse it at every handshake (issue the certificate from this CA with `wharf-control-plane certs`, or name the CA that issued it)",
        cert.display(),
        ca.display()
    )]
    NotSignedByCa {
        /// The certificate file.
        cert: PathBuf,
        /// The CA file.
        ca: PathBuf,
        /// What the check found ([`check_signed_by`]).
        reason: String,
    },
    /// An `https://` URL but no TLS material: the process must not silently speak plaintext.
    #[error(
        "{url} is an https:// URL but no TLS is configured; set --tls-cert, --tls-key and --tls-ca"
    )]
    HttpsWithoutTls {
        /// The URL.
        url: String,
    },
    /// A URL that is neither `http://` nor `https://`, or does not parse.
    #[error("invalid URL {url:?}: {reason}")]
    BadUrl {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
}

/// One loaded generation of the material.
struct Material {
    server: Arc<ServerConfig>,
    /// `server` offering HTTP/1.1 as well, for HTTPS listeners ([`serve_incoming_https`]).
    https_server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    identity: Identity,
}

/// Modification time and length of the three files: a change of either means reload.
type Stamp = [(Option<SystemTime>, u64); 3];

/// The TLS material of one process, reloaded when its files change.
pub struct Tls {
    files: TlsFiles,
    current: RwLock<Arc<Material>>,
    /// Stamp of the loaded files, and of the last one that failed (warned once).
    stamps: Mutex<(Stamp, Option<Stamp>)>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

impl Tls {
    /// Loads the files.
    ///
    /// # Errors
    /// [`TlsError`] naming the file that is missing or wrong.
    pub fn load(files: TlsFiles) -> Result<Arc<Self>, TlsError> {
        let stamp = stamp(&files);
        let material = load_material(&files)?;
        Ok(Arc::new(Self {
            files,
            current: RwLock::new(Arc::new(material)),
            stamps: Mutex::new((stamp, None)),
        }))
    }

    /// The files this material comes from.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// The identity in this process's current certificate.
    pub fn identity(&self) -> Identity {
        self.material().identity.clone()
    }

    /// The current server config (client certificates optional, verified against the CA
    /// when presented; handlers decide what an anonymous caller may do).
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.material().server.clone()
    }

    /// The current server config of an HTTPS listener (the REST gateway): as
    /// [`Self::server_config`], but ALPN offers `http/1.1` besides `h2`.
    pub fn https_server_config(&self) -> Arc<ServerConfig> {
        self.material().https_server.clone()
    }

    /// The current client config (presents this process's certificate, trusts the CA).
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.material().client.clone()
    }

    fn material(&self) -> Arc<Material> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Reloads when a file changed since the last load. `Ok(true)`: reloaded.
    ///
    /// # Errors
    /// The new files do not load: the previous material stays in use.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let now = stamp(&self.files);
        let mut stamps = self
            .stamps
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if stamps.0 == now {
            return Ok(false);
        }
        match load_material(&self.files) {
            Ok(m) => {
                *self
                    .current
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(m);
                *stamps = (now, None);
                Ok(true)
            }
            Err(e) if stamps.1 == Some(now) => Err(TlsError::Config(format!("(again) {e}"))),
            Err(e) => {
                stamps.1 = Some(now);
                Err(e)
            }
        }
    }

    /// Checks the files every [`RELOAD_POLL_INTERVAL_MS`] until `cancel`; a change is
    /// used by the next connection. A change that does not load is logged once (WARN)
    /// and the previous certificate stays in use.
    pub fn spawn_reloader(
        self: &Arc<Self>,
        cancel: tokio_util::sync::CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let tls = self.clone();
        crate::task::spawn(crate::task::TaskKind::Service, "tls reloader", async move {
            let mut tick = tokio::time::interval(Duration::from_millis(RELOAD_POLL_INTERVAL_MS));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    _ = tick.tick() => {}
                }
                match tls.reload_if_changed() {
                    Ok(true) => tracing::info!(
                        cert = %tls.files.cert.display(),
                        identity = %tls.identity(),
                        "TLS certificate reloaded; new connections use it"
                    ),
                    Ok(false) => {}
                    Err(TlsError::Config(m)) if m.starts_with("(again)") => {}
                    Err(e) => tracing::warn!(
                        error = %e,
                        "changed TLS files do not load; the previous certificate stays in use"
                    ),
                }
            }
        })
    }
}

fn stamp(files: &TlsFiles) -> Stamp {
    let one = |p: &Path| std::fs::metadata(p).map_or((None, 0), |m| (m.modified().ok(), m.len()));
    [one(&files.cert), one(&files.key), one(&files.ca)]
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_owned(),
            reason: "no CERTIFICATE in the file".into(),
        });
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::Pem {
        path: path.to_owned(),
        reason: format!("no private key: {e}"),
    })
}

/// A root store holding the certificates of the CA file.
///
/// # Errors
/// [`TlsError`] for an unreadable file or a certificate rustls refuses as a root.
pub fn read_roots(ca: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(ca)? {
        roots.add(cert).map_err(|e| TlsError::Pem {
            path: ca.to_owned(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn config_error(e: impl std::fmt::Display) -> TlsError {
    TlsError::Config(e.to_string())
}

/// Checks that `chain` (leaf first, then intermediates, as in `--tls-cert`) chains to one
/// of `cas` (the certificates of `--tls-ca`) by signature: each certificate is signed by
/// the next of the chain or by a CA, until a CA signed one. Validity dates and usages are
/// left to the peers' verification; this catches a certificate and a CA that do not
/// belong together, which peers report only as BadSignature or UnknownIssuer.
///
/// # Errors
/// Why not, for the operator: a certificate that does not parse, or no CA signed it.
pub fn check_signed_by(
    chain: &[CertificateDer<'_>],
    cas: &[CertificateDer<'_>],
) -> Result<(), String> {
    fn parse<'a>(
        der: &'a CertificateDer<'_>,
    ) -> Result<x509_parser::certificate::X509Certificate<'a>, String> {
        x509_parser::parse_x509_certificate(der.as_ref())
            .map(|(_, c)| c)
            .map_err(|e| format!("a certificate does not parse: {e}"))
    }
    let chain = chain.iter().map(parse).collect::<Result<Vec<_>, _>>()?;
    let cas = cas.iter().map(parse).collect::<Result<Vec<_>, _>>()?;
    let Some(mut current) = chain.first() else {
        return Err("no certificate".into());
    };
    fn signs(
        issuer: &x509_parser::certificate::X509Certificate<'_>,
        cert: &x509_parser::certificate::X509Certificate<'_>,
    ) -> bool {
        cert.verify_signature(Some(issuer.public_key())).is_ok()
    }
    // Each step moves one certificate up the chain: at most chain.len() steps.
    for _ in 0..chain.len() {
        if cas.iter().any(|ca| signs(ca, current)) {
            return Ok(());
        }
        match chain[1..].iter().find(|next| signs(next, current)) {
            Some(next) => current = next,
            None => break,
        }
    }
    Err(format!(
        "no certificate of the CA file signed {} (issuer {})",
        chain[0].subject(),
        current.issuer()
    ))
}

fn load_material(files: &TlsFiles) -> Result<Material, TlsError> {
    let certs = read_certs(&files.cert)?;
    let key = read_key(&files.key)?;
    let roots = Arc::new(read_roots(&files.ca)?);
    // Refused here rather than by every peer, which says only BadSignature.
    check_signed_by(&certs, &read_certs(&files.ca)?).map_err(|reason| TlsError::NotSignedByCa {
        cert: files.cert.clone(),
        ca: files.ca.clone(),
        reason,
    })?;
    let identity = Identity::from_cert_der(&certs[0], DEFAULT_TRUST_DOMAIN).map_err(|source| {
        TlsError::Identity {
            path: files.cert.clone(),
            source,
        }
    })?;
    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
        .allow_unauthenticated()
        .build()
        .map_err(config_error)?;
    let mut server = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(config_error)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs.clone(), key.clone_key())
        .map_err(config_error)?;
    // gRPC needs HTTP/2: a client that cannot speak it is refused in the handshake.
    server.alpn_protocols = vec![ALPN_H2.to_vec()];
    // An HTTPS listener serves both: curl --http1.1 and Python requests offer only
    // http/1.1, and a server that offers no protocol in common fails their handshake.
    let mut https_server = server.clone();
    https_server.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()];
    let mut client = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(config_error)?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .map_err(config_error)?;
    client.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(Material {
        server: Arc::new(server),
        https_server: Arc::new(https_server),
        client: Arc::new(client),
        identity,
    })
}

/// A client config that trusts `ca` and presents `cert`/`key` when given (none: an
/// anonymous TLS client, as grpcurl with only `-cacert`). For tools and tests.
///
/// # Errors
/// [`TlsError`] naming the file.
pub fn client_config(
    ca: &Path,
    cert_and_key: Option<(&Path, &Path)>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(config_error)?
        .with_root_certificates(read_roots(ca)?);
    let mut config = match cert_and_key {
        Some((cert, key)) => builder
            .with_client_auth_cert(read_certs(cert)?, read_key(key)?)
            .map_err(config_error)?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA in `dir` and a control-plane certificate it issued: (cert, key, ca).
    fn issued(dir: &Path) -> TlsFiles {
        crate::certs::init_ca(dir).expect("ca");
        let i = crate::certs::issue(dir, &Identity::ControlPlane, &[]).expect("issue");
        TlsFiles {
            cert: i.cert,
            key: i.key,
            ca: dir.join(crate::certs::CA_CERT),
        }
    }

    /// Two CAs in two temp dirs (kept alive by the first value), each with a control-plane
    /// certificate it issued.
    fn two_cas() -> ([tempfile::TempDir; 2], TlsFiles, TlsFiles) {
        let dirs = [
            tempfile::tempdir().expect("a"),
            tempfile::tempdir().expect("b"),
        ];
        let (fa, fb) = (issued(dirs[0].path()), issued(dirs[1].path()));
        (dirs, fa, fb)
    }

    fn pem(path: &Path) -> Vec<CertificateDer<'static>> {
        read_certs(path).expect("pem")
    }

    #[test]
    fn a_certificate_issued_by_the_ca_is_signed_by_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = issued(dir.path());
        assert_eq!(check_signed_by(&pem(&f.cert), &pem(&f.ca)), Ok(()));
    }

    #[test]
    fn a_certificate_of_another_ca_is_not() {
        let (_dirs, fa, fb) = two_cas();
        let err = check_signed_by(&pem(&fa.cert), &pem(&fb.ca)).expect_err("other CA");
        assert!(
            err.contains("no certificate of the CA file signed"),
            "{err}"
        );
    }

    #[test]
    fn one_ca_of_several_in_the_file_is_enough() {
        let (_dirs, fa, fb) = two_cas();
        let both: Vec<_> = pem(&fb.ca).into_iter().chain(pem(&fa.ca)).collect();
        assert_eq!(check_signed_by(&pem(&fa.cert), &both), Ok(()));
    }

    #[test]
    fn an_intermediate_in_the_certificate_file_leads_to_the_ca() {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let root_key = KeyPair::generate().expect("key");
        let mut root = CertificateParams::new(Vec::<String>::new()).expect("params");
        root.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let root_cert = root.self_signed(&root_key).expect("root");
        let root_issuer = Issuer::new(root, root_key);
        let mid_key = KeyPair::generate().expect("key");
        let mut mid = CertificateParams::new(Vec::<String>::new()).expect("params");
        mid.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let mid_cert = mid.signed_by(&mid_key, &root_issuer).expect("intermediate");
        let mid_issuer = Issuer::new(mid, mid_key);
        let leaf_key = KeyPair::generate().expect("key");
        let leaf = CertificateParams::new(vec!["localhost".into()])
            .expect("params")
            .signed_by(&leaf_key, &mid_issuer)
            .expect("leaf");
        let ca = vec![root_cert.der().clone()];
        let chain = vec![leaf.der().clone(), mid_cert.der().clone()];
        assert_eq!(check_signed_by(&chain, &ca), Ok(()));
        assert!(check_signed_by(&chain[..1], &ca).is_err(), "without it");
    }

    #[test]
    fn a_pair_of_another_ca_does_not_load_nor_replace_the_loaded_one() {
        let (_dirs, fa, fb) = two_cas();
        let mixed = TlsFiles {
            ca: fb.ca.clone(),
            ..fa.clone()
        };
        let err = Tls::load(mixed).expect_err("refused");
        let msg = err.to_string();
        assert!(matches!(err, TlsError::NotSignedByCa { .. }), "{msg}");
        assert!(
            msg.contains(&format!(
                "--tls-cert {} is not signed by --tls-ca {}",
                fa.cert.display(),
                fb.ca.display()
            )),
            "{msg}"
        );
        // A reload of such a pair keeps the material in use.
        let tls = Tls::load(fa.clone()).expect("loads");
        let before = tls.server_config();
        std::fs::copy(&fb.ca, &fa.ca).expect("replace the CA");
        assert!(matches!(
            tls.reload_if_changed(),
            Err(TlsError::NotSignedByCa { .. })
        ));
        assert!(Arc::ptr_eq(&before, &tls.server_config()));
    }

    #[test]
    fn tls_files_are_all_or_nothing() {
        assert_eq!(TlsFiles::from_parts(None, None, None).ok(), Some(None));
        let err =
            TlsFiles::from_parts(Some("c".into()), None, Some("a".into())).expect_err("incomplete");
        assert!(err.to_string().contains("--tls-key"), "{err}");
    }
}
