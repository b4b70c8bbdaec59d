//! The observability load of the "on" runs: an OTLP/gRPC trace receiver that counts and
//! drops every export (what a collector costs the sender is the export itself), and a
//! scraper that fetches every metrics page once per [`SCRAPE_INTERVAL_MS`], as Prometheus
//! would.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// How often each metrics page is fetched, in milliseconds (a common scrape interval is
/// 15 s; once a second is a heavier load than a deployment's).
pub const SCRAPE_INTERVAL_MS: u64 = 1_000;

/// Spans received, by the sending process's `service.name`, the span's name, and
/// whether it is a trace's root (no parent).
pub type SpanCounts = std::collections::BTreeMap<(String, String, bool), u64>;

/// Counts the spans it receives (in all, and by process and name), then drops them.
struct Discard {
    spans: Arc<AtomicU64>,
    by_name: Arc<std::sync::Mutex<SpanCounts>>,
    /// `WHARF_BENCH_SPANS=FILE`: every span also written there, one a line (service,
    /// instance, name, trace id, span id, parent id, start and end in ns since the epoch,
    /// tab-separated), for timelines of a deletion's trace.
    dump: Option<std::sync::Mutex<std::io::BufWriter<std::fs::File>>>,
}

/// A resource's string attribute `key` (empty when missing).
fn resource_str(r: &opentelemetry_proto::tonic::trace::v1::ResourceSpans, key: &str) -> String {
    r.resource
        .iter()
        .flat_map(|r| &r.attributes)
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref())
        .and_then(|v| match &v.value {
            Some(Value::StringValue(s)) => Some(s.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tonic::async_trait]
impl TraceService for Discard {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = 0;
        let mut by_name = self
            .by_name
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut dump = self
            .dump
            .as_ref()
            .map(|d| d.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        for r in &request.get_ref().resource_spans {
            let service = resource_str(r, "service.name");
            let instance = resource_str(r, "service.instance.id");
            for span in r.scope_spans.iter().flat_map(|s| &s.spans) {
                if let Some(d) = dump.as_mut() {
                    use std::io::Write as _;
                    let _ = writeln!(
                        d,
                        "{service}\t{instance}\t{}\t{}\t{}\t{}\t{}\t{}",
                        span.name,
                        hex(&span.trace_id),
                        hex(&span.span_id),
                        hex(&span.parent_span_id),
                        span.start_time_unix_nano,
                        span.end_time_unix_nano
                    );
                }
                spans += 1;
                let root = span.parent_span_id.is_empty();
                *by_name
                    .entry((service.clone(), span.name.clone(), root))
                    .or_default() += 1;
            }
        }
        if let Some(d) = dump.as_mut() {
            use std::io::Write as _;
            let _ = d.flush();
        }
        self.spans.fetch_add(spans, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// A running receiver and scraper; both stop when dropped. They run on a thread and
/// runtime of their own, as a collector and Prometheus run in processes of their own:
/// their work shares the machine's two cores with the cluster, but does not wait in the
/// queue of the runtime whose calls the benchmark times.
pub struct Load {
    /// The receiver's endpoint, `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// Spans received so far.
    pub spans: Arc<AtomicU64>,
    /// Spans received so far by process, name and root-ness.
    pub by_name: Arc<std::sync::Mutex<SpanCounts>>,
    stop: CancellationToken,
    /// The observer's runtime (on its own thread until `stop`).
    runtime: tokio::runtime::Handle,
}

/// A current-thread runtime on a thread of its own that runs until `stop` is cancelled;
/// its handle.
fn observer_runtime(stop: CancellationToken) -> anyhow::Result<tokio::runtime::Handle> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name("bench-observer".into())
        .spawn(move || runtime.block_on(stop.cancelled_owned()))?;
    Ok(handle)
}

impl Load {
    /// The load of an "on" cluster when `observed`, none for an "off" one.
    pub fn start_if(observed: bool) -> anyhow::Result<Option<Self>> {
        Ok(if observed { Some(Self::start()?) } else { None })
    }

    /// Starts the trace receiver on a thread and runtime of its own (see [`Load`]).
    pub fn start() -> anyhow::Result<Self> {
        let stop = CancellationToken::new();
        // Until it is handed to the Load: an error below still ends the thread.
        let ends_thread = stop.clone().drop_guard();
        let runtime = observer_runtime(stop.clone())?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let listener = {
            // Registered with the observer's runtime, which serves it.
            let _in = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let endpoint = format!("http://{}", listener.local_addr()?);
        let until = stop.clone().cancelled_owned();
        let spans = Arc::new(AtomicU64::new(0));
        let by_name = Arc::new(std::sync::Mutex::new(SpanCounts::new()));
        let dump = match std::env::var("WHARF_BENCH_SPANS") {
            Ok(path) => Some(std::sync::Mutex::new(std::io::BufWriter::new(
                std::fs::File::create(path)?,
            ))),
            Err(_) => None,
        };
        let receiver = Discard {
            spans: spans.clone(),
            by_name: by_name.clone(),
            dump,
        };
        runtime.spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(receiver))
                .serve_with_incoming_shutdown(incoming, until)
                .await;
        });
        ends_thread.disarm();
        Ok(Self {
            endpoint,
            spans,
            by_name,
            stop,
            runtime,
        })
    }

    /// Scrapes `GET /metrics` of every `IP:PORT` in `targets` until dropped.
    pub fn scrape(&self, targets: Vec<String>) {
        let stop = self.stop.clone();
        self.runtime.spawn(async move {
            loop {
                for t in &targets {
                    let _ = scrape_once(t).await;
                }
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(SCRAPE_INTERVAL_MS)) => {}
                }
            }
        });
    }
}

/// What `after` counted beyond `before`, for each key that grew.
pub fn span_counts_since(before: &SpanCounts, after: &SpanCounts) -> SpanCounts {
    after
        .iter()
        .filter_map(|(k, n)| {
            let grew = n - before.get(k).copied().unwrap_or(0);
            (grew > 0).then(|| (k.clone(), grew))
        })
        .collect()
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One HTTP/1.1 GET of `/metrics`, the page read to its end.
async fn scrape_once(target: &str) -> std::io::Result<usize> {
    let mut s = tokio::net::TcpStream::connect(target).await?;
    s.write_all(
        format!("GET /metrics HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut page = Vec::new();
    s.read_to_end(&mut page).await?;
    Ok(page.len())
}
