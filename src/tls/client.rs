//! The client side: [`check_url`] checks a URL against the TLS setting, [`channel`] makes
//! a lazy tonic `Channel` whose connector dials TCP and, for an `https://` URL, runs the
//! handshake with the current client config and checks the server's identity.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_util::either::Either;
use tonic::transport::{Channel, Endpoint, Uri};

use super::{Tls, TlsError};
use crate::identity::{DEFAULT_TRUST_DOMAIN, Identity, IdentityError};

/// Where a client connector takes its config from at each new connection.
#[derive(Clone, Default)]
pub enum ClientTls {
    /// No TLS: only `http://` URLs.
    #[default]
    None,
    /// The process's reloading material.
    Reloading(Arc<Tls>),
    /// A fixed config (tools and tests).
    Fixed(Arc<ClientConfig>),
}

impl ClientTls {
    /// From the optional material of a process.
    pub fn from_option(tls: Option<&Arc<Tls>>) -> Self {
        match tls {
            Some(t) => ClientTls::Reloading(t.clone()),
            None => ClientTls::None,
        }
    }

    fn config(&self) -> Option<Arc<ClientConfig>> {
        match self {
            ClientTls::None => None,
            ClientTls::Reloading(t) => Some(t.client_config()),
            ClientTls::Fixed(c) => Some(c.clone()),
        }
    }
}

/// Where a client connects, as [`check_url`] checked it: the endpoint tonic dials and
/// whether the connection speaks TLS (the URL was `https://`).
///
/// Wharf runs the TLS handshake in its own connector (per-connection config, so rotated
/// certificates are used). tonic compiled with one of its TLS features (etcd-client's
/// `tls-ring` turns one on) refuses an `https://` endpoint that has no tonic TLS config
/// ("Connecting to HTTPS without TLS enabled"), so the endpoint of an `https://` URL is
/// `http://host:port` with the request origin kept `https://host:port`, and the
/// connector does TLS because this target says so, not because of anything in the URI.
#[derive(Debug, Clone)]
pub struct Target {
    endpoint: Endpoint,
    https: bool,
}

impl Target {
    /// The endpoint tonic dials (`http://host:port` for an `https://` URL; its origin is
    /// the URL's).
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Whether the connection speaks TLS: the URL was `https://`.
    pub fn is_https(&self) -> bool {
        self.https
    }

    /// As [`Endpoint::connect_timeout`].
    #[must_use]
    pub fn connect_timeout(self, timeout: std::time::Duration) -> Self {
        Self {
            endpoint: self.endpoint.connect_timeout(timeout),
            ..self
        }
    }

    /// As [`Endpoint::timeout`]: the bound on each request.
    #[must_use]
    pub fn timeout(self, timeout: std::time::Duration) -> Self {
        Self {
            endpoint: self.endpoint.timeout(timeout),
            ..self
        }
    }
}

fn bad_url(url: &str, e: impl std::fmt::Display) -> TlsError {
    TlsError::BadUrl {
        url: url.to_owned(),
        reason: e.to_string(),
    }
}

/// Checks `url` against the TLS setting: `http://` or `https://`, and `https://` only
/// with TLS material. The [`Target`] carries which it is to [`channel`].
///
/// # Errors
/// [`TlsError::BadUrl`], [`TlsError::HttpsWithoutTls`].
pub fn check_url(url: &str, tls: &ClientTls) -> Result<Target, TlsError> {
    let endpoint = Endpoint::from_shared(url.to_owned()).map_err(|e| bad_url(url, e))?;
    match (endpoint.uri().scheme_str(), tls) {
        (Some("http"), _) => Ok(Target {
            endpoint,
            https: false,
        }),
        (Some("https"), ClientTls::None) => Err(TlsError::HttpsWithoutTls {
            url: url.to_owned(),
        }),
        (Some("https"), ClientTls::Reloading(_) | ClientTls::Fixed(_)) => {
            let origin = endpoint.uri().clone();
            let authority = origin
                .authority()
                .ok_or_else(|| bad_url(url, "no host"))?
                .as_str()
                .to_owned();
            Ok(Target {
                endpoint: Endpoint::from_shared(format!("http://{authority}"))
                    .map_err(|e| bad_url(url, e))?
                    .origin(origin),
                https: true,
            })
        }
        (other, _) => Err(TlsError::BadUrl {
            url: url.to_owned(),
            reason: format!(
                "scheme {:?}: use http:// or https://",
                other.unwrap_or_default()
            ),
        }),
    }
}

/// A lazy channel to `target` (made by [`check_url`], with its timeouts set): TLS for
/// `https://`, plaintext for `http://`. Connections are made on first use and reused.
pub fn channel(target: Target, tls: ClientTls) -> Channel {
    target.endpoint.connect_with_connector_lazy(Connector {
        tls,
        https: target.https,
        expect: None,
    })
}

/// As [`channel`], and over `https://` the server's certificate must name `expect`
/// (checked at every handshake, after the CA and host name checks): the control plane
/// dials an executor by the address it registered, and a certificate holder registering
/// another executor's address must not get that executor's calls answered in its name
/// (`docs/security.md`, "The dialed identity"). A mismatch fails the connection with a
/// [`ServerIdentityError`] naming both identities. Plaintext (`http://`) checks nothing.
pub fn channel_expecting(target: Target, tls: ClientTls, expect: Identity) -> Channel {
    target.endpoint.connect_with_connector_lazy(Connector {
        tls,
        https: target.https,
        expect: Some(expect),
    })
}

/// Why the server a client dialed is not the one it meant to call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServerIdentityError {
    /// The server presented no certificate (cannot happen with TLS 1.2/1.3 servers; kept
    /// so that every case has an answer).
    #[error("{peer} presented no certificate; expected {expected}")]
    NoCertificate {
        /// `host:port` dialed.
        peer: String,
        /// The identity the client meant to call.
        expected: String,
    },
    /// The server's certificate names no Wharf identity.
    #[error(
        "{peer} presented a certificate naming no Wharf identity ({reason}); expected {expected}"
    )]
    NoIdentity {
        /// `host:port` dialed.
        peer: String,
        /// The identity the client meant to call.
        expected: String,
        /// Why the certificate names none.
        reason: String,
    },
    /// The server is someone else.
    #[error(
        "{peer} presented the certificate of {presented}, not of {expected}: the address registered for {expected} belongs to another process"
    )]
    Mismatch {
        /// `host:port` dialed.
        peer: String,
        /// The identity the client meant to call.
        expected: String,
        /// The identity in the server's certificate.
        presented: String,
    },
}

/// Decides whether the identity in a server's leaf certificate (`None`: no certificate)
/// is the one the client meant to call.
///
/// # Errors
/// [`ServerIdentityError`] naming the peer and both identities.
pub fn check_server_identity(
    peer: &str,
    expected: &Identity,
    presented: Option<Result<Identity, IdentityError>>,
) -> Result<(), ServerIdentityError> {
    match presented {
        Some(Ok(got)) if &got == expected => Ok(()),
        Some(Ok(got)) => Err(ServerIdentityError::Mismatch {
            peer: peer.to_owned(),
            expected: expected.to_string(),
            presented: got.to_string(),
        }),
        Some(Err(e)) => Err(ServerIdentityError::NoIdentity {
            peer: peer.to_owned(),
            expected: expected.to_string(),
            reason: e.to_string(),
        }),
        None => Err(ServerIdentityError::NoCertificate {
            peer: peer.to_owned(),
            expected: expected.to_string(),
        }),
    }
}

/// tonic connector: TCP, then TLS when the [`Target`] was `https://` (config taken per
/// connection, so a rotated certificate is presented by the next connection), then the
/// server identity check when there is one to make.
#[derive(Clone)]
struct Connector {
    tls: ClientTls,
    /// From [`Target::is_https`]: the caller asked for TLS.
    https: bool,
    expect: Option<Identity>,
}

type ClientIo = TokioIo<Either<SniffPlain, tokio_rustls::client::TlsStream<TcpStream>>>;

impl tower::Service<Uri> for Connector {
    type Response = ClientIo;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<ClientIo>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let tls = self.tls.config();
        let expect = self.expect.clone();
        let https = self.https;
        Box::pin(async move {
            let host = uri
                .host()
                .ok_or_else(|| io::Error::other(format!("{uri}: no host")))?
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
            let peer = format!("{host}:{port}");
            let tcp = TcpStream::connect((host.as_str(), port))
                .await
                .map_err(|e| io::Error::new(e.kind(), format!("connect to {peer}: {e}")))?;
            let _ = tcp.set_nodelay(true);
            if !https {
                return Ok(TokioIo::new(Either::Left(SniffPlain {
                    inner: tcp,
                    peer,
                    seen: false,
                })));
            }
            let config = tls.ok_or_else(|| {
                io::Error::other(format!("https://{peer} but no TLS is configured"))
            })?;
            let name = ServerName::try_from(host.clone())
                .map_err(|e| io::Error::other(format!("{host}: not a server name: {e}")))?;
            let stream = TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!(
                            "TLS handshake with {peer} failed: {e} (if {peer} is a plaintext server, use http://; otherwise check that its certificate chains to --tls-ca and names {host})"
                        ),
                    )
                })?;
            if let Some(expected) = &expect {
                let presented = stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .map(|leaf| Identity::from_cert_der(leaf, DEFAULT_TRUST_DOMAIN));
                check_server_identity(&peer, expected, presented)
                    .map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, e))?;
            }
            Ok(TokioIo::new(Either::Right(stream)))
        })
    }
}

/// A plaintext client stream that recognises a TLS server by its first byte (a TLS
/// record's content type is 0x14..=0x17; an HTTP/2 server starts with a SETTINGS frame
/// whose first length byte is 0), so that the error names the peer and the fix.
struct SniffPlain {
    inner: TcpStream,
    peer: String,
    seen: bool,
}

impl AsyncRead for SniffPlain {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) if !this.seen => {
                let new = &buf.filled()[before..];
                match new.first() {
                    Some(0x14..=0x17) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{} speaks TLS and this client plaintext: use an https:// URL and --tls-ca/--tls-cert/--tls-key",
                            this.peer
                        ),
                    ))),
                    Some(_) => {
                        this.seen = true;
                        Poll::Ready(Ok(()))
                    }
                    None => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        format!(
                            "{} closed the connection before answering (does it require TLS? then use an https:// URL)",
                            this.peer
                        ),
                    ))),
                }
            }
            Poll::Ready(Err(e)) if !this.seen => Poll::Ready(Err(io::Error::new(
                e.kind(),
                format!(
                    "{} dropped the connection before answering: {e} (does it require TLS? then use an https:// URL)",
                    this.peer
                ),
            ))),
            other => other,
        }
    }
}

impl AsyncWrite for SniffPlain {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// `e` and its sources, `: `-separated (a transport error's cause, for example a TLS
/// handshake failure naming the peer, is in a source, not in the top message).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use rustls::RootCertStore;

    use super::super::provider;
    use super::*;

    #[test]
    fn server_identity_check_covers_every_case() {
        let exec = |id: &str| Identity::Executor(id.into());
        let peer = "127.0.0.2:7000";
        assert_eq!(
            check_server_identity(peer, &exec("exec-1"), Some(Ok(exec("exec-1")))),
            Ok(())
        );
        let err = check_server_identity(peer, &exec("exec-2"), Some(Ok(exec("exec-1"))))
            .expect_err("someone else");
        let text = err.to_string();
        assert!(
            matches!(err, ServerIdentityError::Mismatch { .. }),
            "{text}"
        );
        assert!(
            text.contains("spiffe://wharf/executor/exec-1")
                && text.contains("spiffe://wharf/executor/exec-2")
                && text.contains(peer),
            "{text}"
        );
        let err = check_server_identity(peer, &exec("exec-2"), Some(Ok(Identity::ControlPlane)))
            .expect_err("a control plane is no executor");
        assert!(matches!(err, ServerIdentityError::Mismatch { .. }), "{err}");
        let err = check_server_identity(peer, &exec("exec-2"), Some(Err(IdentityError::NoUri)))
            .expect_err("no identity");
        assert!(
            matches!(err, ServerIdentityError::NoIdentity { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("exec-2"), "{err}");
        let err = check_server_identity(peer, &exec("exec-2"), None).expect_err("no certificate");
        assert!(
            matches!(err, ServerIdentityError::NoCertificate { .. }),
            "{err}"
        );
    }

    #[test]
    fn https_needs_tls_and_other_schemes_are_refused() {
        assert!(check_url("http://127.0.0.1:1", &ClientTls::None).is_ok());
        let err = check_url("https://127.0.0.1:1", &ClientTls::None).expect_err("https");
        assert!(matches!(err, TlsError::HttpsWithoutTls { .. }), "{err}");
        let err = check_url("ftp://127.0.0.1:1", &ClientTls::None).expect_err("ftp");
        assert!(matches!(err, TlsError::BadUrl { .. }), "{err}");
    }

    #[test]
    fn an_https_url_is_dialled_as_http_with_its_origin_and_the_target_says_tls() {
        let config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth();
        let tls = ClientTls::Fixed(Arc::new(config));
        let t = check_url("https://10.0.0.1:7000", &tls).expect("https with TLS");
        assert!(t.is_https());
        let e = t.endpoint();
        assert_eq!(e.uri().scheme_str(), Some("http"));
        assert_eq!(
            e.uri().authority().map(|a| a.as_str()),
            Some("10.0.0.1:7000")
        );
        assert_eq!(e.uri().path(), "/", "no marker path");
        let plain = check_url("http://10.0.0.1:7000", &tls).expect("http");
        assert!(!plain.is_https());
        assert_eq!(plain.endpoint().uri().path(), "/");
    }
}
