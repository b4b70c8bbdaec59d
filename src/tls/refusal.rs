//! Peers turned away before anything ran: the count and throttled log line of each
//! reason ([`peer_refused`], [`PEERS_REFUSED`]), and the answer a plaintext client of a TLS
//! listener gets (a 400, gRPC UNAVAILABLE or a TLS alert, each naming the fix).

use std::sync::Mutex;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tonic::codegen::http;

use super::HANDSHAKE_TIMEOUT_MS;
use crate::exposition::Exposition;
use crate::throttle::Throttle;

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
    log: Mutex<Throttle>,
}

/// [`PEERS_REFUSED`] of this process, by [`PeerRefusal::index`].
static PEER_REFUSALS: [RefusalCount; 4] = [const {
    RefusalCount {
        count: std::sync::atomic::AtomicU64::new(0),
        log: Mutex::new(Throttle::new()),
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
    Throttle::note_shared(&entry.log, PEER_REFUSAL_LOG_INTERVAL)
}

/// Adds [`PEERS_REFUSED`] to a metrics page, every reason from 0.
pub fn render_peer_refusals(out: &mut Exposition) {
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
pub(super) async fn is_plaintext_client(tcp: &TcpStream) -> bool {
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
pub(super) async fn refuse_plaintext(mut tcp: TcpStream, remote: std::net::SocketAddr) {
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
}
