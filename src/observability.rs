//! The metrics listener of every Wharf binary (`--metrics-listen`): Prometheus text at
//! `GET /metrics`, health in Kafka Connect's KIP-1017 shape at `GET /health`, and
//! `GET /ready` for orchestrators. See `docs/observability.md` for every metric.
//!
//! Two kinds of series share one page:
//! - events (counters and histograms: cleanup attempts, pass durations, store commits) go
//!   through the `metrics` facade into one process-wide Prometheus recorder
//!   ([`recorder`]);
//! - state (how many tasks are RUNNING, which deletions are in progress) is rendered at
//!   scrape time from the process's current view by a [`Probe`], so a connector's series
//!   vanish the moment it is gone (Kafka's REST proxy kept reporting deleted connectors,
//!   confluentinc/kafka-rest#999) and costs nothing when nobody scrapes.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;

pub use crate::exposition::Exposition;

/// Bucket bounds of every histogram, in seconds: 1 ms to 60 s, about three per decade
/// (cleanup steps run from milliseconds to the plugin's stop timeout).
pub const HISTOGRAM_BUCKETS_SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Bucket bounds of the histograms of counts (names ending in [`COUNT_HISTOGRAM_SUFFIX`],
/// such as `wharf_store_commit_batch_size`): 1 to 10,000, 1-2-5 per decade. The seconds
/// buckets put every batch under 1 in no bucket and every one over 60 in `+Inf`.
pub const HISTOGRAM_BUCKETS_COUNT: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1_000.0, 2_000.0, 5_000.0, 10_000.0,
];

/// The name suffix of a histogram that counts things rather than timing them
/// ([`HISTOGRAM_BUCKETS_COUNT`]), as Prometheus names a size.
pub const COUNT_HISTOGRAM_SUFFIX: &str = "_size";

/// The process-wide Prometheus recorder, installed as the `metrics` facade's global
/// recorder on first use. One per process: dev mode's control plane and executor share
/// it (their series have distinct names). If another global recorder was installed first,
/// this handle renders nothing of the facade's events, and the probes' state still shows.
pub fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets(HISTOGRAM_BUCKETS_SECONDS)
            .expect("the bucket list is not empty")
            .set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Suffix(COUNT_HISTOGRAM_SUFFIX.into()),
                HISTOGRAM_BUCKETS_COUNT,
            )
            .expect("the bucket list is not empty")
            .build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("another metrics recorder is installed; /metrics shows state only");
        }
        handle
    })
}

/// Whether a process can do its job, as `GET /health` and `grpc.health.v1` say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Serving.
    Healthy,
    /// Not yet serving (still starting, or waiting for a registration); the text says why.
    Starting(String),
    /// Cannot serve (its store or its control plane is not reachable); the text says why.
    Unhealthy(String),
}

impl Health {
    /// KIP-1017's status word: `healthy`, `starting` or `unhealthy`.
    pub fn status(&self) -> &'static str {
        match self {
            Health::Healthy => "healthy",
            Health::Starting(_) => "starting",
            Health::Unhealthy(_) => "unhealthy",
        }
    }

    /// HTTP status of `GET /health`, as KIP-1017 (and the REST gateway's `/health`): 200
    /// healthy, 503 starting, 500 unhealthy. An orchestrator's probe fails on both.
    pub fn http_status(&self) -> StatusCode {
        match self {
            Health::Healthy => StatusCode::OK,
            Health::Starting(_) => StatusCode::SERVICE_UNAVAILABLE,
            Health::Unhealthy(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Why, for the JSON body.
    pub fn message(&self) -> &str {
        match self {
            Health::Healthy => "serving",
            Health::Starting(m) | Health::Unhealthy(m) => m,
        }
    }
}

/// What a binary shows on its metrics listener beside the recorder's events.
pub trait Probe: Send + Sync + 'static {
    /// Appends the state gauges, in Prometheus text format, to `out` (see [`Exposition`]).
    fn render_state(&self, out: &mut Exposition);
    /// The process's current health.
    fn health(&self) -> Health;
    /// Registers the event series this process records (counters at 0), so that they are
    /// on the page from the first scrape and `increase()` sees their first event. Called
    /// by [`serve`] once the recorder is installed.
    fn register_events(&self) {}
}

/// Several probes on one listener (dev mode: the control plane's and the executor's).
struct Probes(Vec<Arc<dyn Probe>>);

impl Probes {
    /// The worst of the probes' health: unhealthy over starting over healthy.
    fn health(&self) -> Health {
        let mut worst = Health::Healthy;
        for h in self.0.iter().map(|p| p.health()) {
            worst = match (&worst, h) {
                (Health::Unhealthy(_), _) => worst,
                (_, h @ Health::Unhealthy(_)) => h,
                (Health::Starting(_), _) => worst,
                (_, h) => h,
            };
        }
        worst
    }
}

/// The listener's routes over `probes`.
pub fn router(probes: Vec<Arc<dyn Probe>>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_page))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .with_state(Arc::new(Probes(probes)))
}

async fn metrics_page(State(p): State<Arc<Probes>>) -> Response {
    let mut state = Exposition::default();
    for probe in &p.0 {
        probe.render_state(&mut state);
    }
    crate::telemetry::render_span_counts(&mut state);
    crate::tls::render_peer_refusals(&mut state);
    let mut page = recorder().render();
    page.push_str(&state.into_text());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        page,
    )
        .into_response()
}

async fn health(State(p): State<Arc<Probes>>) -> Response {
    let h = p.health();
    (
        h.http_status(),
        axum::Json(serde_json::json!({ "status": h.status(), "message": h.message() })),
    )
        .into_response()
}

/// `GET /ready`: 200 `ready` when healthy, 503 with the reason otherwise.
async fn ready(State(p): State<Arc<Probes>>) -> Response {
    match p.health() {
        Health::Healthy => (StatusCode::OK, "ready\n".to_owned()).into_response(),
        h => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{}: {}\n", h.status(), h.message()),
        )
            .into_response(),
    }
}

/// Runs `check` every `interval` and sets `grpc.health.v1` of the server as a whole
/// (`""`) and of each of `services` to SERVING when it says [`Health::Healthy`] and
/// NOT_SERVING otherwise, at once and then whenever that flips (each flip is logged,
/// naming `what` serves). Returns when `cancel` fires. The one health loop of the
/// control plane (its store) and the executor (its registration); docs/observability.md.
pub async fn watch_health<C, Fut>(
    what: &'static str,
    interval: std::time::Duration,
    mut check: C,
    reporter: tonic_health::server::HealthReporter,
    services: &'static [&'static str],
    cancel: tokio_util::sync::CancellationToken,
) where
    C: FnMut() -> Fut + Send,
    Fut: std::future::Future<Output = Health> + Send,
{
    let mut serving: Option<bool> = None;
    loop {
        let health = check().await;
        let now_serving = health == Health::Healthy;
        if serving != Some(now_serving) {
            match &health {
                Health::Healthy => tracing::info!("{what}: serving"),
                Health::Starting(reason) => tracing::info!(%reason, "not serving"),
                Health::Unhealthy(reason) => tracing::warn!(%reason, "not serving"),
            }
            let status = if now_serving {
                tonic_health::ServingStatus::Serving
            } else {
                tonic_health::ServingStatus::NotServing
            };
            for service in std::iter::once(&"").chain(services) {
                reporter.set_service_status(*service, status).await;
            }
            serving = Some(now_serving);
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// Binds `addr` for the metrics listener (port 0 picks one).
///
/// # Errors
/// The bind error.
pub async fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind(addr).await?;
    let bound = l.local_addr()?;
    Ok((l, bound))
}

/// Serves the metrics listener on `listener` until `shutdown` resolves. Plain HTTP: the
/// page carries names, states and counts, never configs or secrets, and changes nothing.
/// A connection that sends no request for `timeout` is closed
/// ([`crate::http::REQUEST_HEADER_TIMEOUT`] outside tests).
pub async fn serve(
    listener: TcpListener,
    probes: Vec<Arc<dyn Probe>>,
    timeout: std::time::Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    // Installed before the first scrape so that events recorded meanwhile are kept.
    let _ = recorder();
    for probe in &probes {
        probe.register_events();
    }
    crate::http::serve(
        listener,
        router(probes),
        |_, addr: &SocketAddr| *addr,
        timeout,
        shutdown,
    )
    .await;
}

/// Serves the bound metrics listener `(listener, bound)` (from [`bind`]) over `probes`
/// in a task of `kind` until `shutdown` resolves. A failed accept (too many open files) is
/// logged and retried: the page changes nothing, and the process goes on without it.
pub fn spawn_serve(
    kind: crate::task::TaskKind,
    (listener, bound): (TcpListener, SocketAddr),
    probes: Vec<Arc<dyn Probe>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tracing::info!(addr = %bound, "metrics listener bound (/metrics, /health, /ready)");
    crate::task::spawn(
        kind,
        "metrics listener",
        serve(
            listener,
            probes,
            crate::http::REQUEST_HEADER_TIMEOUT,
            shutdown,
        ),
    )
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    #[test]
    fn a_size_histogram_gets_count_buckets_and_a_duration_seconds_buckets() {
        let _ = recorder();
        metrics::histogram!("wharf_test_batch_size").record(3.0);
        metrics::histogram!("wharf_test_duration_seconds").record(0.003);
        let page = recorder().render();
        let bucket = |series: &str, le: &str| {
            page.lines()
                .find(|l| l.starts_with(&format!("{series}_bucket{{le=\"{le}\"}}")))
                .and_then(|l| l.rsplit(' ').next())
                .map(str::to_owned)
        };
        // A batch of 3 writes falls in le=5 (not le=0.001 nor +Inf only).
        assert_eq!(
            bucket("wharf_test_batch_size", "2").as_deref(),
            Some("0"),
            "{page}"
        );
        assert_eq!(
            bucket("wharf_test_batch_size", "5").as_deref(),
            Some("1"),
            "{page}"
        );
        assert_eq!(
            bucket("wharf_test_batch_size", "10000").as_deref(),
            Some("1")
        );
        assert_eq!(bucket("wharf_test_batch_size", "0.001"), None, "{page}");
        assert_eq!(
            bucket("wharf_test_duration_seconds", "0.005").as_deref(),
            Some("1")
        );
        assert_eq!(bucket("wharf_test_duration_seconds", "1000"), None);
    }

    struct Fixed(Health);
    impl Probe for Fixed {
        fn render_state(&self, _: &mut Exposition) {}
        fn health(&self) -> Health {
            self.0.clone()
        }
    }

    fn worst(hs: &[Health]) -> Health {
        Probes(
            hs.iter()
                .map(|h| Arc::new(Fixed(h.clone())) as Arc<dyn Probe>)
                .collect(),
        )
        .health()
    }

    #[test]
    fn health_answers_kip_1017_status_codes() {
        assert_eq!(Health::Healthy.http_status(), StatusCode::OK);
        assert_eq!(
            Health::Starting("s".into()).http_status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            Health::Unhealthy("u".into()).http_status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }

    #[test]
    fn no_probe_is_healthy() {
        assert_eq!(worst(&[]), Health::Healthy);
    }

    #[test]
    fn unhealthy_wins_over_starting_and_healthy() {
        let u = Health::Unhealthy("store".into());
        let s = Health::Starting("registering".into());
        assert_eq!(worst(&[Health::Healthy, s.clone(), u.clone()]), u);
        assert_eq!(worst(&[u.clone(), s.clone()]), u);
    }

    /// The header timeout the listener tests serve with (the binaries use
    /// [`crate::http::REQUEST_HEADER_TIMEOUT`]).
    const TEST_TIMEOUT: Duration = Duration::from_secs(1);
    /// How long past [`TEST_TIMEOUT`] a test waits for the server to close.
    const CLOSE_MARGIN: Duration = Duration::from_secs(5);

    /// A metrics listener with no probe on a free loopback port, closing connections that
    /// send no request for [`TEST_TIMEOUT`].
    async fn metrics_listener() -> SocketAddr {
        let (listener, addr) = bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("bind");
        tokio::spawn(serve(
            listener,
            Vec::new(),
            TEST_TIMEOUT,
            std::future::pending(),
        ));
        addr
    }

    /// Reads until the server closes the connection and returns what it sent. Panics
    /// unless it closed no earlier than [`TEST_TIMEOUT`] after `since` and no later than
    /// [`CLOSE_MARGIN`] past that.
    async fn read_until_closed(tcp: &mut TcpStream, since: Instant) -> String {
        let mut got = Vec::new();
        let read = tokio::time::timeout_at(
            (since + TEST_TIMEOUT + CLOSE_MARGIN).into(),
            tcp.read_to_end(&mut got),
        )
        .await
        .expect("the server closes the connection within the timeout and a margin");
        match read {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("read: {e}"),
        }
        assert!(
            since.elapsed() >= TEST_TIMEOUT,
            "closed after {:?}, before the timeout",
            since.elapsed()
        );
        String::from_utf8_lossy(&got).into_owned()
    }

    #[tokio::test]
    async fn a_half_sent_request_is_closed_after_the_timeout_and_a_whole_one_is_answered() {
        let addr = metrics_listener().await;
        let opened = Instant::now();
        let mut slow = TcpStream::connect(addr).await.expect("connect");
        slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .await
            .expect("write");

        // Meanwhile a whole request on the same listener is answered.
        let mut whole = TcpStream::connect(addr).await.expect("connect");
        whole
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        let answer = read_to_close(&mut whole).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.contains("text/plain"), "{answer}");

        let answer = read_until_closed(&mut slow, opened).await;
        assert!(!answer.contains("200 OK"), "{answer}");
    }

    #[tokio::test]
    async fn a_connection_that_sends_nothing_is_closed_after_the_timeout() {
        let addr = metrics_listener().await;
        let opened = Instant::now();
        let mut silent = TcpStream::connect(addr).await.expect("connect");
        assert_eq!(read_until_closed(&mut silent, opened).await, "");
    }

    #[tokio::test]
    async fn an_idle_keep_alive_connection_is_closed_after_the_timeout() {
        let addr = metrics_listener().await;
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        // The server's clock starts when its answer is sent, which is after this and
        // before the client reads it (under load, possibly long before).
        let sent = Instant::now();
        tcp.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        // The answer (keep-alive), then nothing: closed a timeout after the answer.
        let mut head = [0u8; 15];
        tokio::time::timeout(CLOSE_MARGIN, tcp.read_exact(&mut head))
            .await
            .expect("answered at once")
            .expect("an answer");
        assert_eq!(&head, b"HTTP/1.1 200 OK");
        let rest = read_until_closed(&mut tcp, sent).await;
        assert!(rest.contains("healthy"), "{rest}");
    }

    #[tokio::test]
    async fn an_idle_http2_connection_is_answered_then_closed_after_the_timeout() {
        use hyper_util::rt::{TokioExecutor, TokioIo};
        let addr = metrics_listener().await;
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let handshake =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp));
        let (mut send, conn) = tokio::time::timeout(CLOSE_MARGIN, handshake)
            .await
            .expect("handshake at once")
            .expect("HTTP/2 handshake");
        let conn = tokio::spawn(conn);
        let request = axum::http::Request::get(format!("http://{addr}/health"))
            .body(axum::body::Body::empty())
            .expect("request");
        // The server's idle clock starts when its answer is sent: after this, and before
        // this task sees the body (under load, possibly long before).
        let sent = Instant::now();
        let res = tokio::time::timeout(CLOSE_MARGIN, send.send_request(request))
            .await
            .expect("answered at once")
            .expect("an answer");
        assert_eq!(res.status(), StatusCode::OK);
        let body = axum::body::to_bytes(axum::body::Body::new(res.into_body()), usize::MAX)
            .await
            .expect("body");
        assert!(String::from_utf8_lossy(&body).contains("healthy"));
        tokio::time::timeout_at((sent + TEST_TIMEOUT + CLOSE_MARGIN).into(), conn)
            .await
            .expect("the server closes the idle HTTP/2 connection")
            .expect("joins")
            .expect("a graceful close");
        assert!(sent.elapsed() >= TEST_TIMEOUT, "{:?}", sent.elapsed());
        drop(send);
    }

    /// Reads a `Connection: close` answer to its end.
    async fn read_to_close(tcp: &mut TcpStream) -> String {
        let mut got = Vec::new();
        tokio::time::timeout(CLOSE_MARGIN, tcp.read_to_end(&mut got))
            .await
            .expect("answered at once")
            .expect("read");
        String::from_utf8_lossy(&got).into_owned()
    }

    #[test]
    fn starting_wins_over_healthy() {
        let s = Health::Starting("registering".into());
        assert_eq!(worst(&[Health::Healthy, s.clone()]), s);
        assert_eq!(worst(&[s.clone(), Health::Healthy]), s);
    }
}
