//! One logging setup for every Wharf binary: events on stderr, filtered by `RUST_LOG`
//! (INFO by default, so that an operator sees what a process does), as human-readable
//! text (colours only on a terminal) or as one JSON object per line (`--log-format json`,
//! for log shippers; docs/observability.md); with `--otlp-endpoint`, spans are also
//! exported over OTLP/gRPC ([`init_traced`], [`crate::trace`]).

use std::io::IsTerminal;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// How log events are written (`--log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per event (the default).
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields` (the event's,
    /// with `message`), `span` (the innermost span's fields) and `spans` (every enclosing
    /// span, outermost first).
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    /// `text` or `json`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("{other:?} is not a log format; use text or json")),
        }
    }
}

/// Replaces the log filter at run time with tracing directives (`RUST_LOG`'s syntax, e.g.
/// `info,wharf_control_plane::reconcile=debug`); the error says why they do not parse.
pub type FilterReload = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// Where and as whom spans are exported (`--otlp-endpoint`).
#[derive(Debug, Clone)]
pub struct Otlp {
    /// OTLP/gRPC endpoint, for example `http://127.0.0.1:4317`.
    pub endpoint: String,
    /// `service.name` of this process (`wharf-control-plane`, `wharf-executor`).
    pub service: &'static str,
    /// `service.instance.id` (an executor's id; the control plane's `--advertise` URL or
    /// bound admin address).
    pub instance: String,
}

impl Otlp {
    /// The export settings of `service` when `endpoint` is given (`--otlp-endpoint`);
    /// `instance` is asked only then.
    pub fn when_given(
        endpoint: Option<&str>,
        service: &'static str,
        instance: impl FnOnce() -> String,
    ) -> Option<Otlp> {
        endpoint.map(|endpoint| Otlp {
            endpoint: endpoint.to_owned(),
            service,
            instance: instance(),
        })
    }
}

/// The installed logging and tracing: the filter's reload handle, and the span export.
pub struct Telemetry {
    /// Changes the log filter at run time.
    pub reload: FilterReload,
    /// The span export (empty without `--otlp-endpoint`).
    pub export: Export,
}

impl Telemetry {
    /// The reload handle and the export, to be kept apart.
    pub fn split(self) -> (FilterReload, Export) {
        (self.reload, self.export)
    }
}

/// The span exporter when `--otlp-endpoint` was given; flush it with
/// [`Export::shutdown`] before the process exits.
#[derive(Default)]
pub struct Export(Option<opentelemetry_sdk::trace::SdkTracerProvider>);

impl Export {
    /// Exports the spans still buffered, then stops the exporter (bounded by the SDK's
    /// export timeout); a no-op without export.
    pub async fn shutdown(self) {
        if let Some(p) = self.0 {
            // The SDK blocks while it flushes: not on a runtime worker.
            let _ = tokio::task::spawn_blocking(move || p.shutdown()).await;
        }
    }
}

/// Why span export could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("--otlp-endpoint {endpoint:?}: {reason}")]
pub struct OtlpError {
    /// The endpoint given.
    pub endpoint: String,
    /// Why it was refused.
    pub reason: String,
}

/// The OTLP/gRPC span pipeline: the SDK's batch processor (a thread of its own; a span
/// that ends costs a channel send), exporting through [`OnRuntime`] on the caller's tokio
/// runtime, and a resource naming this process. Call inside the runtime.
fn otlp_provider(otlp: &Otlp) -> Result<opentelemetry_sdk::trace::SdkTracerProvider, OtlpError> {
    use opentelemetry_otlp::WithExportConfig;
    let err = |reason: String| OtlpError {
        endpoint: otlp.endpoint.clone(),
        reason,
    };
    use opentelemetry_otlp::WithTonicConfig;
    let scheme = otlp
        .endpoint
        .split_once("://")
        .map(|(s, _)| s.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("http" | "https")) {
        return Err(err("not a URL; write it like http://127.0.0.1:4317".into()));
    }
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(otlp.endpoint.clone());
    if scheme.as_deref() == Some("https") {
        // A collector's certificate is checked against the system's roots (which
        // `SSL_CERT_FILE` or `SSL_CERT_DIR` replace, as for OpenSSL).
        builder =
            builder.with_tls_config(tonic::transport::ClientTlsConfig::new().with_native_roots());
    }
    // Built inside the export runtime, so that the client's connection (where each
    // batch is encoded and sent) is driven there too.
    let runtime = start_export_runtime().map_err(|e| err(format!("span export thread: {e}")))?;
    let exporter = {
        let _inside = runtime.enter();
        builder.build().map_err(|e| err(e.to_string()))?
    };
    let exporter = OnRuntime::new(WarnOnFailure::new(exporter, otlp.endpoint.clone()), runtime);
    let processor =
        Counted(opentelemetry_sdk::trace::BatchSpanProcessor::builder(exporter).build());
    SPAN_COUNTS
        .exporting
        .store(true, std::sync::atomic::Ordering::Relaxed);
    // The SDK's detectors come after this process's instance id, so that
    // `OTEL_RESOURCE_ATTRIBUTES` may name the instance (replicas that all listen on
    // 0.0.0.0:7000 need it); the service name is ours whatever the environment says.
    use opentelemetry_sdk::resource::{
        EnvResourceDetector, SdkProvidedResourceDetector, TelemetryResourceDetector,
    };
    let resource = opentelemetry_sdk::Resource::builder_empty()
        .with_attribute(opentelemetry::KeyValue::new(
            "service.instance.id",
            otlp.instance.clone(),
        ))
        .with_detectors(&[
            Box::new(SdkProvidedResourceDetector),
            Box::new(TelemetryResourceDetector),
            Box::new(EnvResourceDetector::new()),
        ])
        .with_service_name(otlp.service)
        .build();
    Ok(opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource)
        .build())
}

/// The nice value of the threads that export spans (Linux; 0 is the default, 19 the
/// lowest priority): on a host whose cores are all busy, the conversion, encoding and
/// sending of finished spans take what the work they describe (a deletion's stops, the
/// herder's passes) leaves, instead of an equal share; the SDK's queue holds finished
/// spans meanwhile (at most `OTEL_BSP_MAX_QUEUE_SIZE`; what a full queue drops is
/// counted). On an idle host it changes nothing. The metrics listener stays on the
/// process's runtime: its `/health` must answer while a page render waits on the store
/// (bench/NOTES.md, "Observability on vs off").
const EXPORT_NICE: i32 = 10;

/// Sets the calling thread's nice value to [`EXPORT_NICE`] (on Linux `setpriority`
/// with `PRIO_PROCESS` and 0 names the calling thread, not the process); elsewhere, or
/// when refused, the thread keeps its priority.
fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: setpriority only reads its integer arguments.
        let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, EXPORT_NICE) };
    }
}

/// Starts the runtime span export runs on: a current-thread tokio runtime on a thread of
/// its own (`wharf-otlp`) at [`EXPORT_NICE`], run until the process exits.
fn start_export_runtime() -> std::io::Result<tokio::runtime::Handle> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("wharf-otlp".into())
        .spawn(move || {
            lower_this_threads_priority();
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => {
                    let _ = tx.send(Ok(rt.handle().clone()));
                    rt.block_on(std::future::pending::<()>());
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            }
        })?;
    rx.recv()
        .map_err(|_| std::io::Error::other("the thread ended before its runtime ran"))?
}

/// Spans on their way to `--otlp-endpoint`, counted for the metrics page
/// ([`render_span_counts`]): the SDK's batch processor drops spans when its queue is full
/// without telling anyone, so an operator compares what ended with what left.
#[derive(Debug)]
struct SpanCounts {
    /// True once span export is set up (the counters are shown only then).
    exporting: std::sync::atomic::AtomicBool,
    /// Sampled spans that ended and were handed to the batch processor.
    ended: std::sync::atomic::AtomicU64,
    /// Spans in batches the endpoint accepted.
    exported: std::sync::atomic::AtomicU64,
    /// Spans in batches whose export failed (dropped).
    failed: std::sync::atomic::AtomicU64,
}

static SPAN_COUNTS: SpanCounts = SpanCounts {
    exporting: std::sync::atomic::AtomicBool::new(false),
    ended: std::sync::atomic::AtomicU64::new(0),
    exported: std::sync::atomic::AtomicU64::new(0),
    failed: std::sync::atomic::AtomicU64::new(0),
};

/// Counter: sampled spans that ended and were queued for export.
pub const SPANS_ENDED: &str = "wharf_trace_spans_ended_total";
/// Counter: spans in export batches, by `outcome` (`ok`: the endpoint accepted the batch;
/// `failed`: the export failed and the batch was dropped).
pub const SPANS_EXPORTED: &str = "wharf_trace_spans_exported_total";

/// Adds the span export counters to a metrics page, when span export is on: [`SPANS_ENDED`]
/// minus both outcomes of [`SPANS_EXPORTED`] is what waits in the queue (at most
/// `OTEL_BSP_MAX_QUEUE_SIZE`, 2,048 by default) plus what a full queue dropped.
pub fn render_span_counts(out: &mut crate::exposition::Exposition) {
    use std::sync::atomic::Ordering::Relaxed;
    if !SPAN_COUNTS.exporting.load(Relaxed) {
        return;
    }
    out.counter(
        SPANS_ENDED,
        "Sampled spans that ended and were queued for export to --otlp-endpoint.",
    )
    .sample(SPANS_ENDED, &[], SPAN_COUNTS.ended.load(Relaxed) as f64);
    out.counter(
        SPANS_EXPORTED,
        "Spans in export batches, by outcome (ok: accepted; failed: export failed, dropped).",
    )
    .sample(
        SPANS_EXPORTED,
        &[("outcome", "ok")],
        SPAN_COUNTS.exported.load(Relaxed) as f64,
    )
    .sample(
        SPANS_EXPORTED,
        &[("outcome", "failed")],
        SPAN_COUNTS.failed.load(Relaxed) as f64,
    );
}

/// A span processor that counts the sampled spans that end ([`SPAN_COUNTS`]) before
/// handing them to the SDK's batch processor (one relaxed atomic add per span).
#[derive(Debug)]
struct Counted<P>(P);

impl<P: opentelemetry_sdk::trace::SpanProcessor> opentelemetry_sdk::trace::SpanProcessor
    for Counted<P>
{
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.0.on_start(span, cx);
    }

    fn on_end(&self, span: opentelemetry_sdk::trace::SpanData) {
        if span.span_context.is_sampled() {
            SPAN_COUNTS
                .ended
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.0.on_end(span);
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(
        &self,
        timeout: std::time::Duration,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.0.set_resource(resource);
    }
}

/// How often at most a failing span export is logged: an unreachable collector fails
/// every batch (every few seconds), and one line a minute says so without flooding.
pub const EXPORT_WARN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// A span exporter that logs a warning naming the endpoint when an export fails, at most
/// once per [`EXPORT_WARN_INTERVAL`] (the SDK itself reports nothing without its
/// `internal-logs` feature, so an unreachable `--otlp-endpoint` would be silent).
#[derive(Debug)]
struct WarnOnFailure<E> {
    inner: E,
    endpoint: String,
    log: std::sync::Mutex<crate::throttle::Throttle>,
}

impl<E> WarnOnFailure<E> {
    fn new(inner: E, endpoint: String) -> Self {
        Self {
            inner,
            endpoint,
            log: std::sync::Mutex::default(),
        }
    }

    /// Logs `error` for a batch of `spans` unless a line was written recently.
    fn failed(&self, spans: usize, error: &opentelemetry_sdk::error::OTelSdkError) {
        let due = crate::throttle::Throttle::note_shared(&self.log, EXPORT_WARN_INTERVAL);
        if let Some(silenced) = due {
            tracing::warn!(
                endpoint = %self.endpoint,
                spans,
                failed_batches_not_logged = silenced,
                error = %error,
                "span export to --otlp-endpoint failed; spans dropped (next such line in {} s at the earliest)",
                EXPORT_WARN_INTERVAL.as_secs()
            );
        }
    }
}

impl<E: opentelemetry_sdk::trace::SpanExporter> opentelemetry_sdk::trace::SpanExporter
    for WarnOnFailure<E>
{
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        let outcome = match &result {
            Ok(()) => &SPAN_COUNTS.exported,
            Err(e) => {
                self.failed(spans, e);
                &SPAN_COUNTS.failed
            }
        };
        outcome.fetch_add(spans as u64, std::sync::atomic::Ordering::Relaxed);
        result
    }

    fn shutdown_with_timeout(
        &self,
        timeout: std::time::Duration,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// A span exporter whose exports run on a tokio runtime (the `wharf-otlp` thread's, see
/// [`start_export_runtime`]). The SDK's batch processor calls the exporter from a thread of
/// its own, where tonic's client finds no runtime; each batch is handed to the runtime
/// and awaited from there, and the calling thread is lowered to [`EXPORT_NICE`] too (it
/// gathers the batches). Why not the SDK's processor for
/// async runtimes: it wakes its task for every span that ends (about 70 per deletion),
/// work on the path of the calls that the thread-based one does once per batch
/// (bench/NOTES.md).
#[derive(Debug)]
struct OnRuntime<E> {
    inner: std::sync::Arc<E>,
    runtime: tokio::runtime::Handle,
}

impl<E> OnRuntime<E> {
    fn new(inner: E, runtime: tokio::runtime::Handle) -> Self {
        Self {
            inner: std::sync::Arc::new(inner),
            runtime,
        }
    }
}

impl<E: opentelemetry_sdk::trace::SpanExporter + 'static> opentelemetry_sdk::trace::SpanExporter
    for OnRuntime<E>
{
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        thread_local! {
            static LOWERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        }
        if !LOWERED.replace(true) {
            lower_this_threads_priority();
        }
        let inner = self.inner.clone();
        self.runtime
            .spawn(async move { inner.export(batch).await })
            .await
            .unwrap_or_else(|e| {
                Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                    format!("span export task ended: {e}"),
                ))
            })
    }

    fn shutdown_with_timeout(
        &self,
        timeout: std::time::Duration,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        // Called while the provider is built, before any export holds a clone.
        if let Some(inner) = std::sync::Arc::get_mut(&mut self.inner) {
            inner.set_resource(resource);
        }
    }
}

/// Notes what `filter` lets into the logs, for [`crate::trace::logs_show_info_spans`].
fn note_log_filter(filter: &tracing_subscriber::EnvFilter) {
    crate::trace::note_logs_show_info_spans(shows_info_spans(filter));
}

/// Whether `filter` may enable an INFO span anywhere (any directive at INFO or finer;
/// one it cannot bound counts as yes).
fn shows_info_spans(filter: &tracing_subscriber::EnvFilter) -> bool {
    filter
        .max_level_hint()
        .is_none_or(|max| max >= tracing::level_filters::LevelFilter::INFO)
}

/// The log filter a process starts with, as tracing directives: `RUST_LOG`, or `info`
/// when it is unset (the default directive of [`init_traced`]'s filter).
pub fn start_filter() -> String {
    std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned())
}

/// Installs the global `tracing` subscriber as text. Call once, first thing in `main`; a
/// second call (a subscriber is already set) changes nothing.
pub fn init() {
    let _ = init_with(LogFormat::Text);
}

/// Installs the global `tracing` subscriber in `format`, behind a reload handle so that
/// the filter can change at run time (Kafka Connect's `/admin/loggers`). A second call
/// changes nothing; its handle then changes nothing either.
pub fn init_with(format: LogFormat) -> FilterReload {
    // Without an endpoint nothing can fail.
    match init_traced(format, None) {
        Ok(t) => t.reload,
        Err(e) => Box::new(move |_: &str| Err(e.to_string())),
    }
}

/// As [`init_with`], and with `otlp` every span at INFO or above (whatever the log filter
/// says) is also exported over OTLP/gRPC (docs/observability.md, "Traces"); without it nothing is
/// exported and no trace context exists. Call inside the tokio runtime (the exporter
/// runs on it).
///
/// # Errors
/// [`OtlpError`] when the endpoint is not a URL or the exporter cannot be built; nothing
/// is installed then.
pub fn init_traced(format: LogFormat, otlp: Option<&Otlp>) -> Result<Telemetry, OtlpError> {
    let provider = otlp.map(otlp_provider).transpose()?;
    // Spans are made with the OpenTelemetry API (crate::trace::DirectSpan), not through
    // the tracing bridge, whatever RUST_LOG says. Warnings and errors inside an exported
    // span become its events.
    let otel = provider.as_ref().map(|p| {
        use opentelemetry::trace::TracerProvider as _;
        crate::trace::set_tracer(p.tracer("wharf"));
        crate::trace::span_events()
    });
    let filter = tracing_subscriber::EnvFilter::builder()
        .with_default_directive(tracing::Level::INFO.into())
        .from_env_lossy();
    note_log_filter(&filter);
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let registry = tracing_subscriber::registry().with(otel);
    let installed = {
        use tracing_subscriber::Layer as _;
        match format {
            LogFormat::Text => registry
                .with(
                    tracing_subscriber::fmt::layer()
                        .with_writer(std::io::stderr)
                        .with_ansi(std::io::stderr().is_terminal())
                        .with_filter(filter),
                )
                .try_init(),
            LogFormat::Json => registry
                .with(
                    tracing_subscriber::fmt::layer()
                        .json()
                        .with_current_span(true)
                        .with_span_list(true)
                        .with_writer(std::io::stderr)
                        .with_filter(filter),
                )
                .try_init(),
        }
    };
    let _ = installed;
    Ok(Telemetry {
        reload: Box::new(move |directives: &str| {
            let next =
                tracing_subscriber::EnvFilter::try_new(directives).map_err(|e| e.to_string())?;
            // Before the reload: a span made in between records its id once too often.
            note_log_filter(&next);
            handle.reload(next).map_err(|e| e.to_string())
        }),
        export: Export(provider),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_filter_shows_info_spans_when_any_directive_reaches_info() {
        let shows = |d: &str| shows_info_spans(&tracing_subscriber::EnvFilter::new(d));
        assert!(!shows("warn"));
        assert!(!shows("error,wharf=warn"));
        assert!(shows("info"));
        assert!(shows("warn,wharf_control_plane::reconcile::herder=info"));
        assert!(shows("debug"));
    }

    /// Records whether each export ran inside a tokio runtime.
    #[derive(Debug, Default)]
    struct Probe(std::sync::Mutex<Vec<(usize, bool)>>);

    impl opentelemetry_sdk::trace::SpanExporter for Probe {
        async fn export(
            &self,
            batch: Vec<opentelemetry_sdk::trace::SpanData>,
        ) -> opentelemetry_sdk::error::OTelSdkResult {
            let on_runtime = tokio::runtime::Handle::try_current().is_ok();
            self.0.lock().unwrap().push((batch.len(), on_runtime));
            Ok(())
        }
    }

    #[test]
    fn an_export_called_from_a_plain_thread_runs_on_the_runtime() {
        use opentelemetry_sdk::trace::SpanExporter as _;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .expect("runtime");
        let exporter = OnRuntime::new(Probe::default(), runtime.handle().clone());
        // What the SDK's batch processor does on its own thread.
        let result = std::thread::scope(|s| {
            s.spawn(|| futures::executor::block_on(exporter.export(Vec::new())))
                .join()
                .expect("export thread")
        });
        assert!(result.is_ok());
        assert_eq!(*exporter.inner.0.lock().unwrap(), vec![(0, true)]);
    }

    #[test]
    fn log_formats_parse_and_others_are_refused_by_name() {
        assert_eq!("text".parse::<LogFormat>(), Ok(LogFormat::Text));
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        let err = "yaml".parse::<LogFormat>().expect_err("not a format");
        assert!(err.contains("yaml"), "{err}");
    }
}
