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

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use hyper_util::rt::TokioIo;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_util::either::Either;
use tonic::codegen::http;
use tonic::transport::server::Connected;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::identity::{DEFAULT_TRUST_DOMAIN, Identity, IdentityError};

/// How often the certificate files are checked for changes, in milliseconds.
pub const RELOAD_POLL_INTERVAL_MS: u64 = 1_000;
/// Longest a TLS handshake may take on a listener, in milliseconds (a silent client must
/// not hold a task forever).
pub const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

/// Pause after a failed `accept` (EMFILE and the like) before the next, in milliseconds:
/// waiting instead of spinning lets descriptors free up.
const ACCEPT_RETRY_BACKOFF_MS: u64 = 100;
/// Accepted connections waiting for the server to take them.
const ACCEPT_BACKLOG: usize = 64;
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

// ---- server side ----

/// What a server knows of the caller of one connection (in each request's extensions;
/// read it with [`peer`]).
#[derive(Debug, Clone)]
pub struct PeerInfo {
    /// The caller's address.
    pub remote_addr: Option<std::net::SocketAddr>,
    /// Whether the connection is TLS.
    pub tls: bool,
    /// The client certificate chain (verified against the CA), when one was presented.
    pub certs: Option<Arc<Vec<CertificateDer<'static>>>>,
}

impl PeerInfo {
    /// The identity in the client certificate: `None` without one.
    ///
    /// # Errors
    /// The certificate names no valid identity.
    pub fn identity(&self) -> Result<Option<Identity>, IdentityError> {
        match self.certs.as_deref().and_then(|c| c.first()) {
            None => Ok(None),
            Some(leaf) => Identity::from_cert_der(leaf, DEFAULT_TRUST_DOMAIN).map(Some),
        }
    }
}

/// The connection info of the request (`None` when not served by [`serve_incoming`],
/// for example in-process tests).
pub fn peer(extensions: &tonic::Extensions) -> Option<&PeerInfo> {
    extensions.get::<PeerInfo>()
}

/// One accepted connection: plaintext or TLS.
pub struct ServerIo {
    inner: Either<TcpStream, tokio_rustls::server::TlsStream<TcpStream>>,
    info: PeerInfo,
}

impl ServerIo {
    /// What the server knows of the caller of this connection.
    pub fn peer_info(&self) -> &PeerInfo {
        &self.info
    }
}

impl Connected for ServerIo {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        self.info.clone()
    }
}

impl AsyncRead for ServerIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for ServerIo {
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
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The connections of `listener` for `serve_with_incoming`: TCP_NODELAY set (without it
/// a second small answer on a connection waits for the peer's delayed ACK, about 40 ms
/// on Linux) and, with `tls`, each handshake run concurrently with the current server
/// config (a failed one is logged with the peer's address and dropped). Ends when the
/// server drops the stream. For gRPC: TLS offers only `h2` in ALPN.
pub fn serve_incoming(
    listener: TcpListener,
    tls: Option<Arc<Tls>>,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<ServerIo>> {
    accept_loop(listener, tls, Tls::server_config)
}

/// [`serve_incoming`] for an HTTPS listener (the REST gateway): TLS offers `h2` and
/// `http/1.1` in ALPN ([`Tls::https_server_config`]).
pub fn serve_incoming_https(
    listener: TcpListener,
    tls: Option<Arc<Tls>>,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<ServerIo>> {
    accept_loop(listener, tls, Tls::https_server_config)
}

/// The loop of [`serve_incoming`]: each handshake with `config` of the current material.
fn accept_loop(
    listener: TcpListener,
    tls: Option<Arc<Tls>>,
    config: fn(&Tls) -> Arc<ServerConfig>,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<ServerIo>> {
    let (tx, rx) = tokio::sync::mpsc::channel(ACCEPT_BACKLOG);
    crate::task::spawn(crate::task::TaskKind::Service, "accept loop", async move {
        loop {
            let accepted = tokio::select! {
                () = tx.closed() => return,
                a = listener.accept() => a,
            };
            let (tcp, remote) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and the like: wait a little instead of spinning. Strangers
                    // holding connections open cause it, so one line a minute.
                    static ACCEPT_LOG: Mutex<crate::telemetry::Throttle> =
                        Mutex::new(crate::telemetry::Throttle::new());
                    let due = crate::telemetry::Throttle::note_shared(
                        &ACCEPT_LOG,
                        PEER_REFUSAL_LOG_INTERVAL,
                    );
                    if let Some(silenced) = due {
                        tracing::warn!(
                            error = %e,
                            failed_without_a_line_since_the_last = silenced,
                            "accept failed: new connections wait (too many open files: raise the process's open-files limit, or find who holds connections open; at most one such line a minute)"
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(ACCEPT_RETRY_BACKOFF_MS)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let Some(tls) = &tls else {
                let io = ServerIo {
                    inner: Either::Left(tcp),
                    info: PeerInfo {
                        remote_addr: Some(remote),
                        tls: false,
                        certs: None,
                    },
                };
                if tx.send(Ok(io)).await.is_err() {
                    return;
                }
                continue;
            };
            let acceptor = TlsAcceptor::from(config(tls));
            let tx = tx.clone();
            crate::task::spawn(
                crate::task::TaskKind::Detached,
                "tls handshake",
                async move {
                    if is_plaintext_client(&tcp).await {
                        refuse_plaintext(tcp, remote).await;
                        return;
                    }
                    let handshake = tokio::time::timeout(
                        Duration::from_millis(HANDSHAKE_TIMEOUT_MS),
                        acceptor.accept(tcp),
                    );
                    match handshake.await {
                        Ok(Ok(stream)) => {
                            let certs = stream
                                .get_ref()
                                .1
                                .peer_certificates()
                                .map(|c| Arc::new(c.to_vec()));
                            let io = ServerIo {
                                inner: Either::Right(stream),
                                info: PeerInfo {
                                    remote_addr: Some(remote),
                                    tls: true,
                                    certs,
                                },
                            };
                            let _ = tx.send(Ok(io)).await;
                        }
                        Ok(Err(e)) => {
                            if let Some(silenced) = peer_refused(PeerRefusal::HandshakeFailed) {
                                tracing::warn!(
                                    peer = %remote,
                                    error = %e,
                                    refused_without_a_line_since_the_last = silenced,
                                    "TLS handshake failed (a plaintext client must use https:// and the cluster CA; a client certificate must chain to --tls-ca; at most one such line a minute, all counted in wharf_peers_refused_total)"
                                );
                            }
                        }
                        Err(_) => {
                            if let Some(silenced) = peer_refused(PeerRefusal::HandshakeTimedOut) {
                                tracing::warn!(
                                    peer = %remote,
                                    refused_without_a_line_since_the_last = silenced,
                                    "TLS handshake timed out (at most one such line a minute, all counted in wharf_peers_refused_total)"
                                );
                            }
                        }
                    }
                },
            );
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// Counter: connections and calls refused before anything ran, for who the peer is or is
/// not, by `reason` ([`PeerRefusal::reason`]). Strangers cause these by the thousand a
/// second, so each reason is logged at most once per [`PEER_REFUSAL_LOG_INTERVAL`] and
/// counted here (docs/observability.md, docs/security.md).
pub const PEERS_REFUSED: &str = "wharf_peers_refused_total";

/// How often at most one reason of [`PEERS_REFUSED`] gets a WARN line: the first refusal
/// does, later ones once this has passed, with the number refused without a line since.
pub const PEER_REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Why a peer was refused before anything ran (the `reason` of [`PEERS_REFUSED`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRefusal {
    /// A plaintext client on a TLS listener.
    Plaintext,
    /// A TLS handshake that failed (no or a foreign client certificate, a bad hello).
    HandshakeFailed,
    /// A TLS handshake not done within its timeout.
    HandshakeTimedOut,
    /// No client certificate, or a verified one a service does not accept: an `Executor`
    /// call not from the control plane, a registry call not from the executor it names.
    Identity,
}

impl PeerRefusal {
    /// Every reason, in the order of their counters.
    pub const ALL: [Self; 4] = [
        Self::Plaintext,
        Self::HandshakeFailed,
        Self::HandshakeTimedOut,
        Self::Identity,
    ];

    /// Its `reason` label.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Plaintext => "plaintext",
            Self::HandshakeFailed => "handshake_failed",
            Self::HandshakeTimedOut => "handshake_timed_out",
            Self::Identity => "identity",
        }
    }

    fn index(self) -> usize {
        match self {
            Self::Plaintext => 0,
            Self::HandshakeFailed => 1,
            Self::HandshakeTimedOut => 2,
            Self::Identity => 3,
        }
    }
}

/// A reason's count and the throttle of its log lines.
struct RefusalCount {
    count: std::sync::atomic::AtomicU64,
    log: Mutex<crate::telemetry::Throttle>,
}

/// [`PEERS_REFUSED`] of this process, by [`PeerRefusal::index`].
static PEER_REFUSALS: [RefusalCount; 4] = [const {
    RefusalCount {
        count: std::sync::atomic::AtomicU64::new(0),
        log: Mutex::new(crate::telemetry::Throttle::new()),
    }
}; 4];

/// Counts a refusal for `reason` and says whether its WARN line is due: `Some(n)` (write
/// it, saying `n` were refused without a line since the previous one) or `None` (counted
/// only). The caller writes the line, with what it knows of the peer.
pub fn peer_refused(reason: PeerRefusal) -> Option<u64> {
    let entry = &PEER_REFUSALS[reason.index()];
    entry
        .count
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    crate::telemetry::Throttle::note_shared(&entry.log, PEER_REFUSAL_LOG_INTERVAL)
}

/// Adds [`PEERS_REFUSED`] to a metrics page, every reason from 0.
pub fn render_peer_refusals(out: &mut crate::observability::Exposition) {
    out.counter(
        PEERS_REFUSED,
        "Connections and calls refused before anything ran, for who the peer is, by reason (plaintext, handshake_failed, handshake_timed_out, identity).",
    );
    for reason in PeerRefusal::ALL {
        out.sample(
            PEERS_REFUSED,
            &[("reason", reason.reason())],
            PEER_REFUSALS[reason.index()]
                .count
                .load(std::sync::atomic::Ordering::Relaxed) as f64,
        );
    }
}

/// TLS record content type of a ClientHello (handshake).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;
/// A TLS fatal alert record (TLS 1.2 framing, `protocol_version`): what a plaintext
/// client of a TLS listener reads first, so that it can say the server speaks TLS.
const TLS_ALERT_PROTOCOL_VERSION: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46];
/// How long a refused plaintext client's bytes are drained before closing, in ms
/// (closing with unread bytes sends a reset, which can hide the alert from the client).
const PLAINTEXT_DRAIN_MS: u64 = 1_000;

/// Whether the first byte a client sent is not a TLS handshake record.
async fn is_plaintext_client(tcp: &TcpStream) -> bool {
    let mut first = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_millis(HANDSHAKE_TIMEOUT_MS), tcp.peek(&mut first)).await,
        Ok(Ok(1)) if first[0] != TLS_HANDSHAKE_RECORD
    )
}

/// The first bytes of the HTTP/2 client preface (RFC 9113, 3.4): what a plaintext gRPC
/// client (`grpcurl -plaintext`, a tonic `http://` channel) sends first.
const H2_PREFACE_START: &[u8] = b"PRI * HT";
/// How long a plaintext HTTP/2 client of a TLS listener is answered before the connection
/// closes, in ms: enough for a client's first calls, short for an unauthenticated peer.
const PLAINTEXT_H2_MS: u64 = 3_000;
/// Streams a plaintext HTTP/2 client may open at once (each gets the refusal).
const PLAINTEXT_H2_STREAMS: u32 = 8;

/// How a plaintext client of a TLS listener is answered, by the first bytes it sent
/// ([`plaintext_answer`]).
#[derive(Debug, PartialEq, Eq)]
enum PlaintextAnswer {
    /// An HTTP/1 request (`curl http://...`): a 400 it can show (for a TLS alert curl
    /// showed "Received HTTP/0.9 when not allowed").
    Http1,
    /// An HTTP/2 preface (`grpcurl -plaintext`, a gRPC `http://` channel): HTTP/2 in
    /// plaintext that answers every call with gRPC UNAVAILABLE and the fix (for a TLS
    /// alert grpcurl showed only "context deadline exceeded" after 10 s).
    Http2,
    /// Anything else: a TLS alert, which a TLS-aware client names.
    Alert,
}

/// What a plaintext client whose first bytes are `first` is answered.
fn plaintext_answer(first: &[u8]) -> PlaintextAnswer {
    const METHODS: [&[u8]; 7] = [
        b"GET ",
        b"POST ",
        b"PUT ",
        b"PATCH ",
        b"DELETE ",
        b"HEAD ",
        b"OPTIONS ",
    ];
    if METHODS.iter().any(|m| first.starts_with(m)) {
        PlaintextAnswer::Http1
    } else if first.starts_with(H2_PREFACE_START) {
        PlaintextAnswer::Http2
    } else {
        PlaintextAnswer::Alert
    }
}

/// The text a plaintext client of the TLS listener at `local` is told: who speaks TLS
/// and what to use instead (Wharf's flags, grpcurl's, curl's).
fn plaintext_refusal(local: Option<std::net::SocketAddr>) -> String {
    let port = local.map_or_else(|| "This port".to_owned(), |a| a.to_string());
    format!(
        "{port} speaks TLS and this client plaintext: use an https:// URL and the cluster's CA \
         (Wharf: --tls-ca/--tls-cert/--tls-key; grpcurl: -cacert/-cert/-key, not -plaintext; \
         curl: https:// with --cacert; docs/security.md)"
    )
}

/// The 400 an HTTP/1 client gets, with `text` as its body.
fn http1_refusal(text: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{text}\n",
        text.len() + 1
    )
    .into_bytes()
}

/// The answer to one call of a plaintext HTTP/2 client: gRPC UNAVAILABLE with `text` for
/// a gRPC call (`content-type: application/grpc...`), a 400 with `text` for anything else
/// (`curl --http2-prior-knowledge http://...`).
fn http2_refusal<B>(request: &http::Request<B>, text: &str) -> http::Response<axum::body::Body> {
    let grpc = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if grpc {
        tonic::Status::unavailable(text).into_http()
    } else {
        let mut answer = http::Response::new(axum::body::Body::from(format!("{text}\n")));
        *answer.status_mut() = http::StatusCode::BAD_REQUEST;
        answer.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain"),
        );
        answer
    }
}

/// Answers a plaintext client of a TLS listener ([`plaintext_answer`]) and closes; logged
/// with its address. What the client sent is drained first (closing with unread bytes
/// sends a reset, which can hide the answer).
async fn refuse_plaintext(mut tcp: TcpStream, remote: std::net::SocketAddr) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if let Some(silenced) = peer_refused(PeerRefusal::Plaintext) {
        tracing::warn!(
            peer = %remote,
            listener = %tcp.local_addr().map_or_else(|_| "-".to_owned(), |a| a.to_string()),
            refused_without_a_line_since_the_last = silenced,
            "plaintext client on a TLS listener refused (it must use https:// and the cluster CA; at most one such line a minute, all counted in wharf_peers_refused_total)"
        );
    }
    let mut first = [0u8; 8];
    let seen = tcp.peek(&mut first).await.unwrap_or(0);
    let text = plaintext_refusal(tcp.local_addr().ok());
    match plaintext_answer(&first[..seen]) {
        PlaintextAnswer::Http2 => {
            let service = hyper::service::service_fn(move |request: http::Request<_>| {
                let answer = http2_refusal(&request, &text);
                async move { Ok::<_, std::convert::Infallible>(answer) }
            });
            let mut builder =
                hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
            builder.max_concurrent_streams(PLAINTEXT_H2_STREAMS);
            let conn = builder.serve_connection(TokioIo::new(tcp), service);
            let _ = tokio::time::timeout(Duration::from_millis(PLAINTEXT_H2_MS), conn).await;
            return;
        }
        PlaintextAnswer::Http1 => {
            let _ = tcp.write_all(&http1_refusal(&text)).await;
        }
        PlaintextAnswer::Alert => {
            let _ = tcp.write_all(&TLS_ALERT_PROTOCOL_VERSION).await;
        }
    }
    let _ = tcp.shutdown().await;
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_millis(PLAINTEXT_DRAIN_MS), async {
        while matches!(tcp.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

// ---- client side ----

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

/// Whether `addr` is a loopback address (127.0.0.0/8, ::1): the only addresses a server
/// without TLS binds unless `--insecure` (see `docs/security.md`).
pub fn is_loopback(addr: &std::net::SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// What a server may do with its listen address and TLS setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindDecision {
    /// TLS on: any address.
    Tls,
    /// No TLS, loopback: fine (development, tests, the quickstart).
    PlaintextLoopback,
    /// No TLS, another address, `--insecure` given: start, with a warning.
    PlaintextInsecure,
    /// No TLS, another address, no `--insecure`: refuse to start.
    Refuse,
}

/// Secure by default: decides whether a server may bind `addr`.
pub fn bind_decision(addr: &std::net::SocketAddr, tls: bool, insecure: bool) -> BindDecision {
    match (tls, is_loopback(addr), insecure) {
        (true, _, _) => BindDecision::Tls,
        (false, true, _) => BindDecision::PlaintextLoopback,
        (false, false, true) => BindDecision::PlaintextInsecure,
        (false, false, false) => BindDecision::Refuse,
    }
}

/// The caller of a request served by [`serve_incoming`] (no connection info at all, as
/// with an in-process server, counts as plaintext).
pub fn caller(extensions: &tonic::Extensions) -> crate::identity::Caller {
    use crate::identity::Caller;
    match peer(extensions) {
        None => Caller::Plaintext,
        Some(p) if !p.tls => Caller::Plaintext,
        Some(p) => match p.identity() {
            Ok(None) => Caller::Anonymous,
            Ok(Some(id)) => Caller::Known(id),
            Err(e) => Caller::Invalid(e),
        },
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
    use super::*;

    #[test]
    fn a_plaintext_http1_request_gets_a_400() {
        assert_eq!(plaintext_answer(b"GET /con"), PlaintextAnswer::Http1);
        assert_eq!(plaintext_answer(b"DELETE /"), PlaintextAnswer::Http1);
        let text = plaintext_refusal(Some("127.0.0.1:7000".parse().expect("addr")));
        let answer = http1_refusal(&text);
        let answer = std::str::from_utf8(&answer).expect("text");
        assert!(
            answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{answer}"
        );
        let (head, body) = answer.split_once("\r\n\r\n").expect("head and body");
        assert_eq!(body, format!("{text}\n"));
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
    }

    #[test]
    fn every_peer_refusal_has_its_own_reason_and_slot() {
        let reasons: std::collections::BTreeSet<_> =
            PeerRefusal::ALL.iter().map(|r| r.reason()).collect();
        assert_eq!(reasons.len(), PeerRefusal::ALL.len());
        for (i, r) in PeerRefusal::ALL.iter().enumerate() {
            assert_eq!(r.index(), i, "{r:?}");
        }
        assert_eq!(PEER_REFUSALS.len(), PeerRefusal::ALL.len());
    }

    #[test]
    fn an_http2_preface_gets_plaintext_http2() {
        assert_eq!(plaintext_answer(b"PRI * HT"), PlaintextAnswer::Http2);
    }

    #[test]
    fn anything_else_gets_the_tls_alert() {
        assert_eq!(plaintext_answer(b""), PlaintextAnswer::Alert);
        assert_eq!(plaintext_answer(b"GETX"), PlaintextAnswer::Alert);
        assert_eq!(plaintext_answer(b"PRI * "), PlaintextAnswer::Alert);
    }

    #[test]
    fn the_refusal_names_the_port_and_each_clients_fix() {
        let text = plaintext_refusal(Some("127.0.0.1:7000".parse().expect("addr")));
        assert!(
            text.starts_with(
                "127.0.0.1:7000 speaks TLS and this client plaintext: use an https:// URL"
            ),
            "{text}"
        );
        for fix in ["--tls-ca", "grpcurl: -cacert", "not -plaintext", "--cacert"] {
            assert!(text.contains(fix), "{fix} in {text}");
        }
        assert!(plaintext_refusal(None).starts_with("This port speaks TLS"));
    }

    #[test]
    fn a_plaintext_grpc_call_gets_unavailable_and_anything_else_a_400() {
        let call = http::Request::builder()
            .header("content-type", "application/grpc+proto")
            .body(())
            .expect("request");
        let answer = http2_refusal(&call, "speaks TLS");
        assert_eq!(answer.status(), http::StatusCode::OK);
        assert_eq!(answer.headers()["grpc-status"], "14");
        assert_eq!(answer.headers()["grpc-message"], "speaks%20TLS");
        let page = http::Request::builder().body(()).expect("request");
        let answer = http2_refusal(&page, "speaks TLS");
        assert_eq!(answer.status(), http::StatusCode::BAD_REQUEST);
        assert_eq!(answer.headers()["content-type"], "text/plain");
    }

    #[test]
    fn bind_decision_covers_every_case() {
        let lo: std::net::SocketAddr = "127.0.0.1:7000".parse().expect("addr");
        let lo6: std::net::SocketAddr = "[::1]:7000".parse().expect("addr");
        let any: std::net::SocketAddr = "0.0.0.0:7000".parse().expect("addr");
        assert_eq!(bind_decision(&any, true, false), BindDecision::Tls);
        assert_eq!(
            bind_decision(&lo, false, false),
            BindDecision::PlaintextLoopback
        );
        assert_eq!(
            bind_decision(&lo6, false, false),
            BindDecision::PlaintextLoopback
        );
        assert_eq!(
            bind_decision(&any, false, true),
            BindDecision::PlaintextInsecure
        );
        assert_eq!(bind_decision(&any, false, false), BindDecision::Refuse);
    }

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
