//! How Wharf's HTTP listeners (the metrics listener, the Kafka Connect REST gateway) serve
//! an axum `Router`: HTTP/1.1 and HTTP/2 over each accepted connection, as `axum::serve`
//! does, plus the timeouts `axum::serve` cannot be given. Without them a client that
//! connects and sends nothing, trickles its headers or leaves a keep-alive connection idle
//! holds a file descriptor for ever, and enough of them (a few hundred under a usual
//! `ulimit -n`) stop the whole process from accepting connections, gRPC ones included.
//!
//! - HTTP/1: hyper's header read timeout ([`REQUEST_HEADER_TIMEOUT`]), which runs from the
//!   connection's start and again from the end of each response, so it bounds a slow
//!   request and an idle keep-alive connection alike.
//! - Before the protocol is known (the first bytes) and over HTTP/2, where hyper has no
//!   such timeout: a connection with no request in progress (a response body still being
//!   sent counts as one) for the same time is shut down gracefully (HTTP/2: GOAWAY), and
//!   dropped if it has not closed within that time again.
//!
//! A TLS listener's handshake has its own bound ([`crate::tls::HANDSHAKE_TIMEOUT_MS`]),
//! before the connection reaches this module.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::serve::Listener;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use crate::task::{TaskKind, spawn};

/// How long an HTTP connection may go without a request: a request's headers must have
/// arrived within this time of the connection's start (after its TLS handshake) or of the
/// previous response, else the connection is closed; an HTTP/2 connection with no stream
/// open for this long is closed too. A real client (curl, Prometheus, a Connect tool)
/// sends its headers at once, so this only ends stalled and idle connections, which would
/// otherwise hold a file descriptor each for ever. 20 s: as long as a silent client is
/// kept on a TLS port before its handshake is given up (10 s to its first byte, 10 s for
/// the handshake, [`crate::tls::HANDSHAKE_TIMEOUT_MS`]), and longer than a usual 15 s
/// Prometheus scrape interval, so that a scraper keeps its connection between scrapes.
pub const REQUEST_HEADER_TIMEOUT: Duration = Duration::from_secs(20);

/// Serves `router` on the connections of `listener` until `shutdown` resolves, then stops
/// accepting, shuts every connection down gracefully (requests in progress finish) and
/// returns once they all closed. Each request carries `ConnectInfo(connect_info(io,
/// addr))` of its connection in its extensions, as with axum's
/// `into_make_service_with_connect_info`. `timeout` is [`REQUEST_HEADER_TIMEOUT`] outside
/// tests.
pub async fn serve<L, C>(
    mut listener: L,
    router: Router,
    connect_info: impl Fn(&L::Io, &L::Addr) -> C,
    timeout: Duration,
    shutdown: impl Future<Output = ()>,
) where
    L: Listener,
    C: Clone + Send + Sync + 'static,
{
    let stop = CancellationToken::new();
    // Every connection task holds a receiver; `closed()` resolves when all are gone.
    let (open_tx, open_rx) = tokio::sync::watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let (io, addr) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let info = connect_info(&io, &addr);
        let (stop, open) = (stop.clone(), open_rx.clone());
        let router = router.clone();
        spawn(TaskKind::Detached, "http connection", async move {
            serve_connection(io, router, info, timeout, stop).await;
            drop(open);
        });
    }
    drop(listener);
    stop.cancel();
    drop(open_rx);
    open_tx.closed().await;
}

/// Serves one connection until it closes, `stop` shuts it down, or it has been idle for
/// `timeout` (see the module's documentation).
async fn serve_connection<I, C>(
    io: I,
    router: Router,
    info: C,
    timeout: Duration,
    stop: CancellationToken,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    C: Clone + Send + Sync + 'static,
{
    let activity = Arc::new(Activity::new());
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |mut req: axum::http::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(info.clone()));
            let busy = Busy::begin(&activity);
            let answer = router.clone().oneshot(req);
            async move {
                let res = answer.await?;
                // The request stays in progress until its body is sent (or dropped).
                Ok::<_, std::convert::Infallible>(res.map(|inner| BusyBody { inner, _busy: busy }))
            }
        })
    };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(timeout);
    let mut conn = pin!(builder.serve_connection(TokioIo::new(io), service));
    // Set once the connection was told to close for idleness: the time it has to do so.
    let mut closing_by: Option<Instant> = None;
    let mut stopping = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "HTTP connection ended with an error");
                }
                return;
            }
            () = stop.cancelled(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
            () = activity.idle_for(timeout), if closing_by.is_none() => {
                closing_by = Some(Instant::now() + timeout);
                conn.as_mut().graceful_shutdown();
            }
            () = sleep_until_or_never(closing_by) => {
                if activity.in_progress() == 0 {
                    tracing::debug!("idle HTTP connection did not close in time; dropped");
                    return;
                }
                closing_by = Some(Instant::now() + timeout);
            }
        }
    }
}

async fn sleep_until_or_never(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// The requests in progress on one connection, and when the last one ended.
struct Activity(Mutex<(usize, Instant)>);

impl Activity {
    fn new() -> Self {
        Self(Mutex::new((0, Instant::now())))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, (usize, Instant)> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn in_progress(&self) -> usize {
        self.state().0
    }

    /// Resolves once no request has been in progress for `timeout`.
    async fn idle_for(&self, timeout: Duration) {
        loop {
            let (in_progress, since) = *self.state();
            let wake = if in_progress == 0 {
                since + timeout
            } else {
                Instant::now() + timeout
            };
            if in_progress == 0 && Instant::now() >= wake {
                return;
            }
            tokio::time::sleep_until(wake).await;
        }
    }
}

/// One request in progress on its connection, until dropped.
struct Busy(Arc<Activity>);

impl Busy {
    fn begin(activity: &Arc<Activity>) -> Self {
        activity.state().0 += 1;
        Self(activity.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.0 -= 1;
        state.1 = Instant::now();
    }
}

/// A response body that keeps its request in progress until it is sent or dropped.
struct BusyBody {
    inner: Body,
    _busy: Busy,
}

impl HttpBody for BusyBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
