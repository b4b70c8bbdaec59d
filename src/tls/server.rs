//! The server side: [`serve_incoming`] accepts TCP connections and runs each TLS
//! handshake with the current server config; [`peer`] and [`caller`] tell a handler who
//! called; [`bind_decision`] says whether a server may listen without TLS.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::ServerConfig;
use rustls_pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::either::Either;
use tonic::transport::server::Connected;

use super::refusal::{
    PEER_REFUSAL_LOG_INTERVAL, PeerRefusal, is_plaintext_client, peer_refused, refuse_plaintext,
};
use super::{HANDSHAKE_TIMEOUT_MS, Tls};
use crate::identity::{DEFAULT_TRUST_DOMAIN, Identity, IdentityError};
use crate::throttle::Throttle;

/// Pause after a failed `accept` (EMFILE and the like) before the next, in milliseconds:
/// waiting instead of spinning lets descriptors free up.
const ACCEPT_RETRY_BACKOFF_MS: u64 = 100;
/// Accepted connections waiting for the server to take them.
const ACCEPT_BACKLOG: usize = 64;

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
                    static ACCEPT_LOG: Mutex<Throttle> = Mutex::new(Throttle::new());
                    let due = Throttle::note_shared(&ACCEPT_LOG, PEER_REFUSAL_LOG_INTERVAL);
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
