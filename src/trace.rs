//! Traces across hosts (docs/observability.md, "Traces"): W3C Trace Context
//! (`traceparent`) in gRPC metadata from the control plane to executors and back, so
//! that one deletion is one trace from `DeleteConnector` to each plugin's `stop(true)` on
//! each host. With `--otlp-endpoint` the spans are exported over OTLP (see
//! [`crate::telemetry`]); without it every function here is a no-op: no trace context
//! exists, nothing is injected.
//!
//! Exported spans are [`DirectSpan`]s, made with the OpenTelemetry API itself; each has a
//! `tracing` span beside it for the log lines inside (with the span's `trace_id`). They
//! are not made through the `tracing-opentelemetry` bridge: a deletion makes about 20
//! spans on the path of its calls, and each cost 5 to 6 times as much through the bridge
//! (bench/NOTES.md, "Observability on vs off").

use std::borrow::Cow;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::codegen::http;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};

/// An attribute of a [`DirectSpan`] (OpenTelemetry's key and value).
pub use opentelemetry::KeyValue;

/// The description of a [`DirectSpan`] to start (OpenTelemetry's: name, kind, attributes).
pub use opentelemetry::trace::SpanBuilder;

/// The kind of a [`DirectSpan`] (server for an incoming call).
pub use opentelemetry::trace::SpanKind;

/// The tracer of [`DirectSpan`]s, set when span export is set up (`--otlp-endpoint`).
static TRACER: std::sync::OnceLock<opentelemetry_sdk::trace::SdkTracer> =
    std::sync::OnceLock::new();

/// Installs the tracer [`DirectSpan`]s are made with (the first one stays).
pub(crate) fn set_tracer(tracer: opentelemetry_sdk::trace::SdkTracer) {
    let _ = TRACER.set(tracer);
}

/// A span made with the OpenTelemetry API, with the `tracing` span of its log lines: the
/// `tracing-opentelemetry` bridge builds, visits, stores and converts each span on the
/// path of the call, which cost about 6 us per span there against about 1 us this way
/// (cold caches; bench/NOTES.md, "Observability on vs off"). Its exported half is empty (every method a
/// no-op) without export or outside a sampled trace. Ends at [`DirectSpan::around`]'s or
/// [`DirectSpan::run`]'s end, or when its last context is dropped.
#[derive(Debug)]
pub struct DirectSpan {
    /// The exported span, in a context for its children; `None` when nothing is exported.
    cx: Option<opentelemetry::Context>,
    /// The `tracing` span of the log lines inside, entered by [`DirectSpan::around`] (a
    /// call's `rpc`; none for a plain [`DirectSpan::child`], whose caller makes its own).
    log: tracing::Span,
}

impl Default for DirectSpan {
    fn default() -> Self {
        Self {
            cx: None,
            log: tracing::Span::none(),
        }
    }
}

impl DirectSpan {
    /// The span of an incoming gRPC call at `method` (`/wharf.v1.Service/Method`), a child
    /// of the caller's `traceparent`, when [`exported`] says so: named `method`, kind
    /// server, attribute `method`. Its log span is an `rpc` span with `method` and
    /// `trace_id`, INFO when the call is exported and DEBUG otherwise (a poller's reads
    /// stay out of INFO logs).
    pub fn server(method: &'static str, metadata: &MetadataMap) -> Self {
        Self::incoming(method, Some(method), metadata.as_ref())
    }

    /// [`DirectSpan::server`] for a path known only at run time, with the request's HTTP/2
    /// `headers` (the control plane's [`TraceLayer`]); the path is copied only for an
    /// exported span.
    pub fn server_at(method: &str, headers: &http::HeaderMap) -> Self {
        Self::incoming(method, None, headers)
    }

    /// The call's span; `name` is `method` when it is known statically (no copy).
    fn incoming(method: &str, name: Option<&'static str>, headers: &http::HeaderMap) -> Self {
        let parent = parent_from_headers(headers);
        if !exported(CallKind::of_method(method), parent.is_sampled()) {
            return Self {
                cx: None,
                log: tracing::debug_span!("rpc", method = %method),
            };
        }
        let log = tracing::info_span!("rpc", method = %method, trace_id = tracing::field::Empty);
        let name: Cow<'static, str> = name.map_or_else(|| method.to_owned().into(), Cow::Borrowed);
        Self::started(
            &parent,
            SpanBuilder::from_name(name.clone())
                .with_kind(SpanKind::Server)
                .with_attributes([KeyValue::new("method", name)]),
            log,
        )
    }

    /// Span `name` with `attributes`, a child of `parent` when that is a sampled trace's
    /// (empty otherwise: an untraced stop makes no trace of its own). No log span.
    pub fn child(
        parent: &TraceContext,
        name: &'static str,
        attributes: impl IntoIterator<Item = KeyValue>,
    ) -> Self {
        if !parent.is_sampled() {
            return Self::default();
        }
        Self::started(
            parent,
            SpanBuilder::from_name(name).with_attributes(attributes),
            tracing::Span::none(),
        )
    }

    /// The span `builder` describes beside its log span `log` (which gets the `trace_id`):
    /// a child of `parent`, or the root of a new trace when `parent` is empty; nothing is
    /// exported when `parent` is a trace its sender did not sample, or without export.
    ///
    /// An unsampled `parent` (W3C `traceparent` flags `00`: the caller decided not to
    /// trace) stays the context inside, so what the call causes keeps that decision: a
    /// deletion's rounds make no trace of their own, and its stops pass the flag on.
    pub fn started(
        parent: &TraceContext,
        builder: opentelemetry::trace::SpanBuilder,
        log: tracing::Span,
    ) -> Self {
        let Some(tracer) = TRACER.get() else {
            return Self { cx: None, log };
        };
        if parent.is_valid() && !parent.is_sampled() {
            return Self {
                cx: Some(parent.0.clone()),
                log,
            };
        }
        let cx = parent
            .0
            .with_span(builder.start_with_context(tracer, &parent.0));
        if !log.is_disabled() && logs_show_info_spans() {
            log.record(
                "trace_id",
                cx.span().span_context().trace_id().to_string().as_str(),
            );
        }
        Self { cx: Some(cx), log }
    }

    /// A span that exports nothing, with log span `log` (an untraced call's).
    pub fn untraced(log: tracing::Span) -> Self {
        Self { cx: None, log }
    }

    /// Its context, for children and for `traceparent` (empty when the span is).
    pub fn context(&self) -> TraceContext {
        TraceContext(self.cx.clone().unwrap_or_default())
    }

    /// Runs `fut` in this span's log span and with this span as the current
    /// OpenTelemetry context (so that [`TraceContext::current`] inside, and in tasks
    /// spawned with [`with_current_context`], names it), then ends the span, with status
    /// error and the error's text when `fut` failed.
    pub async fn around<T, E: std::fmt::Display>(
        self,
        fut: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        self.ended_by(fut, |r| r.as_ref().err().map(ToString::to_string))
            .await
    }

    /// As [`DirectSpan::around`] for a future that cannot fail.
    pub async fn run<T>(self, fut: impl Future<Output = T>) -> T {
        self.ended_by(fut, |_| None).await
    }

    /// Runs `fut` as [`DirectSpan::around`] does, then ends the span with status error
    /// and the text `failure` gives for the output, when it gives one.
    pub async fn ended_by<T>(
        self,
        fut: impl Future<Output = T>,
        failure: impl FnOnce(&T) -> Option<String>,
    ) -> T {
        self.ended_with(fut, |out| (failure(out), None)).await
    }

    /// As [`DirectSpan::ended_by`], where `outcome` also gives an attribute for the
    /// output (a REST answer's `http.response.status_code`), set before the span ends.
    pub async fn ended_with<T>(
        self,
        fut: impl Future<Output = T>,
        outcome: impl FnOnce(&T) -> (Option<String>, Option<KeyValue>),
    ) -> T {
        use opentelemetry::context::FutureExt as _;
        use tracing::Instrument as _;
        let Some(cx) = self.cx else {
            return fut.instrument(self.log).await;
        };
        let out = fut.with_context(cx.clone()).instrument(self.log).await;
        let span = cx.span();
        if span.is_recording() {
            let (failure, attribute) = outcome(&out);
            if let Some(e) = failure {
                span.set_status(opentelemetry::trace::Status::error(e));
            }
            if let Some(a) = attribute {
                span.set_attribute(a);
            }
        }
        span.end();
        out
    }
}

/// Marks the current exported span (the current OpenTelemetry context's, as inside
/// [`DirectSpan::around`]) as failed with `error`, for work that goes on after a part of
/// it failed (a deletion round with a failed step). A no-op outside an exported span.
pub fn fail_current(error: impl FnOnce() -> String) {
    let cx = opentelemetry::Context::current();
    let span = cx.span();
    if span.is_recording() {
        span.set_status(opentelemetry::trace::Status::error(error()));
    }
}

/// A tower layer that runs each incoming gRPC call of a server in its
/// [`DirectSpan::server_at`] (the control plane's; the executor makes its calls' spans in
/// its handlers). A call that fails (`grpc-status` other than 0 in the answer's headers,
/// as tonic sends a handler's error) ends its span with status error and the
/// `grpc-message`. A streaming call's span ends when its answer starts.
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceLayer;

impl<S> tower::Layer<S> for TraceLayer {
    type Service = Traced<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Traced(inner)
    }
}

/// The service [`TraceLayer`] makes.
#[derive(Debug, Clone)]
pub struct Traced<S>(S);

impl<S, B, R> tower::Service<http::Request<B>> for Traced<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: std::fmt::Display + Send + 'static,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = std::pin::Pin<
        Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let span = DirectSpan::server_at(req.uri().path(), req.headers());
        let call = self.0.call(req);
        Box::pin(span.ended_by(call, grpc_failure))
    }
}

/// The failure text of a gRPC answer: its `grpc-message` (or its code) when its headers
/// carry a `grpc-status` other than 0 (OK); `None` for a success or a streaming answer
/// whose status comes in its trailers.
fn grpc_failure<R, E: std::fmt::Display>(answer: &Result<http::Response<R>, E>) -> Option<String> {
    match answer {
        Ok(r) => tonic::Status::from_header_map(r.headers())
            .filter(|s| s.code() != tonic::Code::Ok)
            .map(|s| format!("{:?}: {}", s.code(), s.message())),
        Err(e) => Some(e.to_string()),
    }
}

/// `fut` with the current OpenTelemetry context attached at every poll, for a task spawned
/// inside a [`DirectSpan::around`] that must stay in its trace (a stop's, spawned by the
/// `StopTask` call): what `tracing`'s `in_current_span` does for `tracing` spans. Nothing
/// is attached when there is no trace.
pub fn with_current_context<F: Future>(
    fut: F,
) -> futures::future::Either<F, opentelemetry::context::WithContext<F>> {
    use opentelemetry::context::FutureExt as _;
    let cx = opentelemetry::Context::current();
    if cx.has_active_span() {
        futures::future::Either::Right(fut.with_context(cx))
    } else {
        futures::future::Either::Left(fut)
    }
}

/// The trace context a caller sent as `traceparent` in gRPC metadata; empty when there is
/// none or it does not parse.
pub fn parent_from_metadata(metadata: &MetadataMap) -> TraceContext {
    parent_from_headers(metadata.as_ref())
}

/// Writes W3C propagation fields into gRPC request metadata.
struct MetadataInjector<'a>(&'a mut MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        // The propagator writes `tracestate` even when it is empty, as it always is here
        // (no vendor writes one); W3C Trace Context (section 3.3) asks senders to avoid
        // empty ones, and leaving it out spares every traced call a header to encode,
        // decode and parse.
        if value.is_empty() && key == TRACESTATE {
            return;
        }
        if let (Ok(k), Ok(mut v)) = (
            MetadataKey::from_bytes(key.as_bytes()),
            MetadataValue::try_from(value.as_str()),
        ) {
            // Every call's value is new (its span id): HPACK would add each to both
            // ends' header tables only to evict the reused headers (content-type,
            // te, user-agent) sooner; sensitive values are sent as never-indexed literals.
            v.set_sensitive(true);
            self.0.insert(k, v);
        }
    }
}

/// Reads W3C propagation fields from HTTP/2 request headers.
struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// The trace context of a span, kept to continue its trace later from elsewhere (a
/// deletion's rounds in the finalizer, a status report sent by the report loop). Empty
/// when export is off.
#[derive(Debug, Clone, Default)]
pub struct TraceContext(opentelemetry::Context);

impl TraceContext {
    /// The current OpenTelemetry context: a [`DirectSpan`]'s inside its
    /// [`DirectSpan::around`] (or a task spawned [`with_current_context`]), empty outside
    /// one or without export.
    pub fn current() -> Self {
        Self(opentelemetry::Context::current())
    }

    /// True when it names a trace (export is on and a span was current).
    pub fn is_valid(&self) -> bool {
        self.0.span().span_context().is_valid()
    }

    /// True when it names a trace its sender sampled (the `01` flag of `traceparent`).
    pub fn is_sampled(&self) -> bool {
        let sc = self.0.span().span_context().clone();
        sc.is_valid() && sc.is_sampled()
    }

    /// Injects this context as `traceparent` into `metadata`.
    pub fn inject(&self, metadata: &mut MetadataMap) {
        if self.is_valid() {
            TraceContextPropagator::new().inject_context(&self.0, &mut MetadataInjector(metadata));
        }
    }

    /// Its W3C `traceparent` value (`00-<trace id>-<span id>-<flags>`, 55 characters),
    /// sampled or not, to be kept where a later process reads it ([`TraceContext::
    /// from_traceparent`]); `None` when it names no trace.
    pub fn traceparent(&self) -> Option<String> {
        let mut carrier = std::collections::HashMap::new();
        if self.is_valid() {
            TraceContextPropagator::new().inject_context(&self.0, &mut carrier);
        }
        carrier.remove(TRACEPARENT)
    }

    /// The context a `traceparent` value names (as kept by [`TraceContext::traceparent`],
    /// its sampled flag included); empty when `value` is empty or not a valid
    /// `traceparent`.
    pub fn from_traceparent(value: &str) -> Self {
        if value.is_empty() {
            return Self::default();
        }
        let carrier = std::collections::HashMap::from([(TRACEPARENT.to_owned(), value.to_owned())]);
        Self(TraceContextPropagator::new().extract(&carrier))
    }

    /// The trace id, 32 lowercase hex digits, when it names a trace.
    pub fn trace_id(&self) -> Option<String> {
        let sc = self.0.span().span_context().clone();
        sc.is_valid().then(|| sc.trace_id().to_string())
    }
}

/// Injects the current span's trace context as `traceparent` into an outgoing request's
/// metadata (a no-op without export).
pub fn inject(metadata: &mut MetadataMap) {
    TraceContext::current().inject(metadata);
}

/// What an incoming call does, which decides whether its span is exported (see
/// [`exported`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// It changes something an operator or an executor asked for (a connector, offsets,
    /// a registration): its span is worth a trace, started here when the caller sent
    /// none.
    Change,
    /// The control plane's own work on an executor (start, stop, task configs): a part
    /// of the control plane's trace (a deletion's cleanup step), never a trace of its
    /// own. Without a sampled `traceparent` it was sent by an untraced loop (a herder
    /// pass starting tasks) or by a probe, and a lone span of it tells nothing the logs
    /// do not.
    Delegated,
    /// It only reads, or is a periodic call (heartbeat, status report, offset commit),
    /// health or reflection: made by pollers and loops many times a second.
    Read,
}

impl CallKind {
    /// The kind of the call at gRPC path `method` (`/wharf.v1.Service/Method`). Every
    /// path outside `wharf.v1` (`grpc.health.v1`, reflection, an unknown path) reads.
    pub fn of_method(method: &str) -> Self {
        Self::of_wharf_method(method).unwrap_or(CallKind::Read)
    }

    /// The kind of a `wharf.v1` method; `None` for any other path.
    fn of_wharf_method(method: &str) -> Option<Self> {
        let (service, name) = method.strip_prefix("/wharf.v1.")?.split_once('/')?;
        let kind = match (service, name) {
            (
                "ConnectorAdmin",
                "CreateConnector" | "PutConnectorConfig" | "PauseConnector" | "ResumeConnector"
                | "StopConnector" | "RestartConnector" | "RestartTask" | "DeleteConnector"
                | "RetryCleanup" | "AlterOffsets" | "ResetOffsets" | "AdoptOrphanedResources"
                | "PurgeOrphanedResources" | "ResetConnectorTopics",
            )
            | (
                "ExecutorRegistry",
                "RegisterExecutor" | "RequestTaskReconfiguration" | "RecordResources",
            ) => {
                CallKind::Change
            }
            (
                "Executor",
                "StartConnector" | "StopConnector" | "ComputeTaskConfigs" | "StartTask"
                | "StopTask" | "GetSinkOffsets" | "AlterSinkOffsets",
            ) => CallKind::Delegated,
            (
                "ConnectorAdmin",
                "GetConnector" | "ListConnectors" | "GetConnectorStatus"
                | "ValidateConnectorConfig" | "ListConnectorPlugins" | "GetOffsets"
                | "ListExecutors" | "WatchConnector" | "ListAuditEntries"
                | "GetConnectorResources" | "ListOrphanedResources" | "GetConnectorTopics",
            )
            // ValidateConfig runs the plugin's checks and changes nothing.
            | ("Executor", "ListAssignments" | "ValidateConfig")
            // Periodic: every heartbeat interval, every status change, every offset
            // flush of every source task. A traced caller still keeps its trace.
            | ("ExecutorRegistry", "Heartbeat" | "ReportStatus" | "CommitOffsets") => {
                CallKind::Read
            }
            _ => return None,
        };
        Some(kind)
    }
}

/// Whether the span of a call of `kind` is exported: a call that changes something
/// always, any other only when its caller sent a sampled `traceparent`
/// (`sampled_parent`), so that whoever traces a read keeps their trace and a deletion's
/// stops stay in its trace. The others (a status poller, heartbeats, health checks, an
/// untraced herder pass's starts) get a DEBUG span: in debug logs, never exported, no
/// OTLP work (docs/observability.md, "Traces").
pub fn exported(kind: CallKind, sampled_parent: bool) -> bool {
    match (kind, sampled_parent) {
        (CallKind::Change, _) | (CallKind::Delegated | CallKind::Read, true) => true,
        (CallKind::Delegated | CallKind::Read, false) => false,
    }
}

/// The W3C Trace Context header (and gRPC metadata key).
const TRACEPARENT: &str = "traceparent";

/// The W3C Trace Context header of vendors' trace state (sent only when not empty).
const TRACESTATE: &str = "tracestate";

/// The trace context a caller sent as `traceparent` in HTTP (or HTTP/2, gRPC) request
/// headers; empty when there is none or it does not parse.
pub fn parent_from_headers(headers: &http::HeaderMap) -> TraceContext {
    // Most calls carry none (pollers, heartbeats, an untraced herder's starts, every call
    // with export off): no propagator work for them. The name is looked up as a
    // `HeaderName`: a `&str` is parsed and hashed anew on each lookup.
    static TRACEPARENT_NAME: http::HeaderName = http::HeaderName::from_static(TRACEPARENT);
    if !headers.contains_key(&TRACEPARENT_NAME) {
        return TraceContext::default();
    }
    TraceContext(TraceContextPropagator::new().extract(&HeaderExtractor(headers)))
}

/// A `tracing` layer that adds each event it sees (the caller filters: warnings and
/// errors) to the current OpenTelemetry span, when one is active (inside a
/// [`crate::trace::DirectSpan`]): its message as the event's name, its other fields as
/// attributes, and its level as `level`. So a trace shows where a deletion's step failed
/// without the logs.
struct SpanEvents;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for SpanEvents {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        use opentelemetry::trace::TraceContextExt as _;
        let cx = opentelemetry::Context::current();
        if !cx.has_active_span() {
            return;
        }
        let mut fields = EventFields::default();
        event.record(&mut fields);
        fields.attributes.push(opentelemetry::KeyValue::new(
            "level",
            event.metadata().level().as_str(),
        ));
        cx.span().add_event(fields.message, fields.attributes);
    }
}

/// The layer that copies warnings and errors into the current exported span
/// ([`SpanEvents`]).
pub(crate) fn span_events<S>() -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    SpanEvents.with_filter(tracing::level_filters::LevelFilter::WARN)
}

/// An event's fields as OpenTelemetry attributes, its `message` apart.
#[derive(Default)]
struct EventFields {
    message: String,
    attributes: Vec<opentelemetry::KeyValue>,
}

impl EventFields {
    fn keep(&mut self, field: &tracing::field::Field, value: String) {
        if field.name() == "message" {
            self.message = value;
        } else {
            self.attributes
                .push(opentelemetry::KeyValue::new(field.name(), value));
        }
    }
}

impl tracing::field::Visit for EventFields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.keep(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.keep(field, format!("{value:?}"));
    }
}

/// Whether the log filter lets any INFO span into the log lines (see
/// [`logs_show_info_spans`]); true until a filter is installed.
static LOGS_SHOW_INFO_SPANS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(true);

/// True when the installed log filter (`RUST_LOG`, or its reload) may show an INFO span
/// somewhere: a log line shows only the spans its filter enables (per-layer filtering),
/// so at `RUST_LOG=warn` no line carries an INFO span's fields, and recording its trace
/// id (an attribute again on the exported span) is work for nothing
/// ([`DirectSpan::started`]; bench/NOTES.md, "Observability on vs off").
pub fn logs_show_info_spans() -> bool {
    LOGS_SHOW_INFO_SPANS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Notes whether the installed log filter may show an INFO span (the logging setup calls
/// it whenever the filter changes).
pub(crate) fn note_logs_show_info_spans(shows: bool) {
    LOGS_SHOW_INFO_SPANS.store(shows, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spans a test's tracer ended, in order.
    #[derive(Debug, Clone, Default)]
    struct Ended(std::sync::Arc<std::sync::Mutex<Vec<opentelemetry_sdk::trace::SpanData>>>);

    impl opentelemetry_sdk::trace::SpanExporter for Ended {
        async fn export(
            &self,
            batch: Vec<opentelemetry_sdk::trace::SpanData>,
        ) -> opentelemetry_sdk::error::OTelSdkResult {
            self.0.lock().unwrap().extend(batch);
            Ok(())
        }
    }

    /// The tracer of this test binary, installed by the first test that asks: it records
    /// every span as it ends (each test reads the spans of its own trace).
    fn recording_tracer() -> &'static Ended {
        static ENDED: std::sync::OnceLock<Ended> = std::sync::OnceLock::new();
        ENDED.get_or_init(|| {
            use opentelemetry::trace::TracerProvider as _;
            let ended = Ended::default();
            let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
                .with_span_processor(opentelemetry_sdk::trace::SimpleSpanProcessor::new(
                    ended.clone(),
                ))
                .build();
            set_tracer(provider.tracer("test"));
            ended
        })
    }

    /// The spans of trace `trace_id` that ended, in order.
    fn ended_in(trace_id: &str) -> Vec<opentelemetry_sdk::trace::SpanData> {
        recording_tracer()
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.span_context.trace_id().to_string() == trace_id)
            .cloned()
            .collect()
    }

    /// A runtime for a test (not futures' block_on: the SDK's simple processor exports
    /// with it, and it does not nest).
    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    const CALLER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
    const CALLER_SPAN: &str = "b7ad6b7169203331";

    fn traced_metadata(flags: &str) -> MetadataMap {
        metadata_in(CALLER_TRACE, flags)
    }

    /// Metadata with a `traceparent` of `trace` (the caller's span [`CALLER_SPAN`]).
    fn metadata_in(trace: &str, flags: &str) -> MetadataMap {
        let mut md = MetadataMap::new();
        md.insert(
            "traceparent",
            format!("00-{trace}-{CALLER_SPAN}-{flags}").parse().unwrap(),
        );
        md
    }

    #[test]
    fn direct_spans_nest_under_the_caller_and_carry_the_outcome() {
        recording_tracer();
        let call = DirectSpan::server("/wharf.v1.Executor/StopTask", &traced_metadata("01"));
        let runtime = runtime();
        let result: Result<(), String> = runtime.block_on(call.around(async {
            // Inside the call, the current context is the call's span.
            let stop = DirectSpan::child(
                &TraceContext::current(),
                "plugin stop",
                [KeyValue::new("connector_deleted", true)],
            );
            stop.around(async { Err::<(), _>("table is locked".to_owned()) })
                .await
        }));
        assert!(result.is_err());
        let spans = ended_in(CALLER_TRACE);
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(names, ["plugin stop", "/wharf.v1.Executor/StopTask"]);
        let (stop, call) = (&spans[0], &spans[1]);
        assert_eq!(call.span_context.trace_id().to_string(), CALLER_TRACE);
        assert_eq!(call.parent_span_id.to_string(), CALLER_SPAN);
        assert_eq!(call.span_kind, opentelemetry::trace::SpanKind::Server);
        assert_eq!(stop.span_context.trace_id().to_string(), CALLER_TRACE);
        assert_eq!(stop.parent_span_id, call.span_context.span_id());
        assert_eq!(
            stop.status,
            opentelemetry::trace::Status::error("table is locked")
        );
        assert!(
            stop.attributes
                .contains(&KeyValue::new("connector_deleted", true))
        );
        // A call without a sampled caller is not exported (a poller's, an untraced
        // herder's), and neither is a stop inside it.
        let untraced = DirectSpan::server("/wharf.v1.Executor/StopTask", &traced_metadata("00"));
        assert!(!untraced.context().is_valid());
        let quiet = DirectSpan::child(&untraced.context(), "plugin stop", []);
        assert!(!quiet.context().is_valid());
        let none = DirectSpan::server("/wharf.v1.Executor/StopTask", &MetadataMap::new());
        assert!(!none.context().is_valid());
        assert_eq!(ended_in(CALLER_TRACE).len(), 2);
    }

    const UNSAMPLED_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

    #[test]
    fn a_change_the_caller_did_not_sample_exports_nothing_of_what_it_causes() {
        recording_tracer();
        let md = metadata_in(UNSAMPLED_TRACE, "00");
        let call = DirectSpan::server("/wharf.v1.ConnectorAdmin/DeleteConnector", &md);
        let runtime = runtime();
        let (kept, round_cx) = runtime.block_on(call.run(async {
            // What the call leaves for its rounds is the caller's unsampled context.
            let kept = TraceContext::current();
            let round = DirectSpan::started(
                &kept,
                SpanBuilder::from_name("deletion round"),
                tracing::Span::none(),
            );
            (kept.clone(), round.context())
        }));
        assert_eq!(kept.trace_id().as_deref(), Some(UNSAMPLED_TRACE));
        assert!(!kept.is_sampled());
        // A round in it starts no trace of its own, and what it sends says "not sampled".
        assert_eq!(round_cx.trace_id().as_deref(), Some(UNSAMPLED_TRACE));
        let mut out = MetadataMap::new();
        round_cx.inject(&mut out);
        assert!(
            out.get("traceparent")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.ends_with("-00")),
            "{out:?}"
        );
        assert!(ended_in(UNSAMPLED_TRACE).is_empty());
    }

    const FAILED_ROUND_TRACE: &str = "3bf92f3577b34da6a3ce929d0e0e4735";

    #[test]
    fn a_round_with_a_failed_step_ends_with_status_error() {
        recording_tracer();
        let md = metadata_in(FAILED_ROUND_TRACE, "01");
        let parent = parent_from_metadata(&md);
        let round = DirectSpan::started(
            &parent,
            SpanBuilder::from_name("deletion round"),
            tracing::Span::none(),
        );
        let runtime = runtime();
        let out: Result<bool, String> = runtime.block_on(round.around(async {
            fail_current(|| "task 2: table is locked".to_owned());
            Ok(true)
        }));
        assert_eq!(out, Ok(true));
        // Outside an exported span it is a no-op.
        fail_current(|| unreachable!("no span to mark"));
        let spans = ended_in(FAILED_ROUND_TRACE);
        assert_eq!(spans.len(), 1);
        assert_eq!(
            spans[0].status,
            opentelemetry::trace::Status::error("task 2: table is locked")
        );
    }

    const LAYER_TRACE: &str = "5bf92f3577b34da6a3ce929d0e0e4737";

    #[test]
    fn the_trace_layer_spans_each_call_and_marks_a_failed_one() {
        use tower::{Layer as _, Service as _, ServiceExt as _};
        recording_tracer();
        let answer = |status: &'static str| {
            tower::service_fn(move |_: http::Request<()>| async move {
                let mut r = http::Response::new(());
                r.headers_mut()
                    .insert("grpc-status", http::HeaderValue::from_static(status));
                r.headers_mut().insert(
                    "grpc-message",
                    http::HeaderValue::from_static("no%20such%20task"),
                );
                Ok::<_, std::convert::Infallible>(r)
            })
        };
        let request = |path: &str| {
            http::Request::builder()
                .uri(format!("http://cp{path}"))
                .header("traceparent", format!("00-{LAYER_TRACE}-{CALLER_SPAN}-01"))
                .body(())
                .unwrap()
        };
        let runtime = runtime();
        runtime.block_on(async {
            let mut failing = TraceLayer.layer(answer("5"));
            failing
                .ready()
                .await
                .unwrap()
                .call(request("/wharf.v1.ConnectorAdmin/GetConnector"))
                .await
                .unwrap();
            let mut fine = TraceLayer.layer(answer("0"));
            fine.ready()
                .await
                .unwrap()
                .call(request("/wharf.v1.ConnectorAdmin/DeleteConnector"))
                .await
                .unwrap();
        });
        let spans = ended_in(LAYER_TRACE);
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "/wharf.v1.ConnectorAdmin/GetConnector",
                "/wharf.v1.ConnectorAdmin/DeleteConnector"
            ]
        );
        assert!(
            spans
                .iter()
                .all(|s| s.parent_span_id.to_string() == CALLER_SPAN
                    && s.span_kind == opentelemetry::trace::SpanKind::Server)
        );
        assert_eq!(
            spans[0].status,
            opentelemetry::trace::Status::error("NotFound: no such task")
        );
        assert_eq!(spans[1].status, opentelemetry::trace::Status::Unset);
    }

    const EVENT_TRACE: &str = "6bf92f3577b34da6a3ce929d0e0e4738";

    #[test]
    fn a_warning_inside_an_exported_span_is_one_of_its_events() {
        use tracing_subscriber::layer::SubscriberExt as _;
        recording_tracer();
        let subscriber = tracing_subscriber::registry().with(span_events());
        let mut md = MetadataMap::new();
        md.insert(
            "traceparent",
            format!("00-{EVENT_TRACE}-{CALLER_SPAN}-01")
                .parse()
                .unwrap(),
        );
        tracing::subscriber::with_default(subscriber, || {
            let call = DirectSpan::server("/wharf.v1.Executor/StopTask", &md);
            runtime().block_on(call.run(async {
                tracing::info!("stopping");
                tracing::warn!(table = "audit_orders", "drop failed");
            }));
            // Outside any exported span: nowhere to go.
            tracing::warn!("after the call");
        });
        let spans = ended_in(EVENT_TRACE);
        assert_eq!(spans.len(), 1);
        let events: Vec<_> = spans[0].events.iter().collect();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].name, "drop failed");
        assert!(
            events[0]
                .attributes
                .contains(&KeyValue::new("table", "audit_orders"))
        );
        assert!(
            events[0]
                .attributes
                .contains(&KeyValue::new("level", "WARN"))
        );
    }

    #[test]
    fn a_traceparent_in_metadata_is_read_as_the_parent() {
        let cx = parent_from_metadata(&traced_metadata("01"));
        assert_eq!(cx.trace_id().as_deref(), Some(CALLER_TRACE));
        assert!(cx.is_sampled());
        assert!(!parent_from_metadata(&MetadataMap::new()).is_valid());
    }

    #[test]
    fn without_export_nothing_is_injected() {
        let mut md = MetadataMap::new();
        inject(&mut md);
        assert!(md.is_empty());
        assert!(!TraceContext::current().is_valid());
    }

    #[test]
    fn a_traceparent_header_is_read_as_the_parent() {
        let headers = with_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        let cx = TraceContextPropagator::new().extract(&HeaderExtractor(&headers));
        assert_eq!(
            TraceContext(cx).trace_id().as_deref(),
            Some("0af7651916cd43dd8448eb211c80319c")
        );
    }

    #[test]
    fn an_injected_context_is_a_traceparent_entry() {
        let headers = with_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        let cx = TraceContext(TraceContextPropagator::new().extract(&HeaderExtractor(&headers)));
        let mut md = MetadataMap::new();
        cx.inject(&mut md);
        assert_eq!(
            md.get("traceparent").and_then(|v| v.to_str().ok()),
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        );
        assert!(
            md.get(TRACESTATE).is_none(),
            "an empty tracestate is not sent"
        );
        assert_eq!(md.len(), 1);
    }

    /// Request headers carrying `traceparent` (and nothing else).
    fn with_traceparent(traceparent: &'static str) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        headers.insert(TRACEPARENT, http::HeaderValue::from_static(traceparent));
        headers
    }

    #[test]
    fn a_kept_traceparent_names_the_same_span_and_sampled_flag() {
        for tp in [
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        ] {
            let kept = TraceContext::from_traceparent(tp);
            assert!(kept.is_valid(), "{tp}");
            assert_eq!(kept.is_sampled(), tp.ends_with("-01"), "{tp}");
            assert_eq!(kept.traceparent().as_deref(), Some(tp));
            let from_headers = parent_from_headers(&with_traceparent(tp));
            assert_eq!(from_headers.traceparent().as_deref(), Some(tp));
        }
    }

    #[test]
    fn no_traceparent_is_kept_for_no_trace() {
        assert_eq!(TraceContext::default().traceparent(), None);
        for bad in [
            "",
            "not a traceparent",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        ] {
            let cx = TraceContext::from_traceparent(bad);
            assert!(!cx.is_valid(), "{bad:?}");
            assert_eq!(cx.traceparent(), None, "{bad:?}");
        }
    }

    #[test]
    fn a_tracestate_the_caller_sent_is_passed_on() {
        let mut headers =
            with_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        headers.insert(TRACESTATE, http::HeaderValue::from_static("vendor=v1"));
        let mut md = MetadataMap::new();
        parent_from_headers(&headers).inject(&mut md);
        assert_eq!(
            md.get(TRACESTATE).and_then(|v| v.to_str().ok()),
            Some("vendor=v1")
        );
    }

    #[test]
    fn a_change_is_exported_without_a_parent() {
        assert!(exported(CallKind::Change, false));
    }

    #[test]
    fn a_change_is_exported_with_a_parent() {
        assert!(exported(CallKind::Change, true));
    }

    #[test]
    fn a_read_without_a_parent_is_not_exported() {
        assert!(!exported(CallKind::Read, false));
    }

    #[test]
    fn a_read_with_a_sampled_parent_is_exported() {
        assert!(exported(CallKind::Read, true));
    }

    #[test]
    fn a_delegated_call_is_exported_only_in_a_callers_trace() {
        assert!(exported(CallKind::Delegated, true));
        assert!(!exported(CallKind::Delegated, false));
    }

    #[test]
    fn admin_changes_change_executor_calls_are_delegated_and_polling_calls_read() {
        for m in [
            "/wharf.v1.ConnectorAdmin/DeleteConnector",
            "/wharf.v1.ConnectorAdmin/CreateConnector",
            "/wharf.v1.ConnectorAdmin/AlterOffsets",
            "/wharf.v1.ExecutorRegistry/RegisterExecutor",
        ] {
            assert_eq!(CallKind::of_method(m), CallKind::Change, "{m}");
        }
        for m in [
            "/wharf.v1.Executor/StartTask",
            "/wharf.v1.Executor/StopTask",
            "/wharf.v1.Executor/StopConnector",
        ] {
            assert_eq!(CallKind::of_method(m), CallKind::Delegated, "{m}");
        }
        for m in [
            "/wharf.v1.ConnectorAdmin/GetConnectorStatus",
            "/wharf.v1.ConnectorAdmin/ListConnectors",
            "/wharf.v1.ConnectorAdmin/WatchConnector",
            "/wharf.v1.Executor/ListAssignments",
            "/wharf.v1.Executor/ValidateConfig",
            "/wharf.v1.ExecutorRegistry/Heartbeat",
            "/wharf.v1.ExecutorRegistry/ReportStatus",
            "/grpc.health.v1.Health/Check",
            "/grpc.health.v1.Health/Watch",
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            "/wharf.v1.Nope/Nope",
            "",
        ] {
            assert_eq!(CallKind::of_method(m), CallKind::Read, "{m}");
        }
    }

    #[test]
    fn every_wharf_method_in_the_protos_has_a_kind() {
        use prost::Message;
        let set = prost_types::FileDescriptorSet::decode(crate::pb::FILE_DESCRIPTOR_SET)
            .expect("descriptor set");
        let mut seen = 0;
        for file in &set.file {
            for service in &file.service {
                for m in &service.method {
                    let path = format!("/{}.{}/{}", file.package(), service.name(), m.name());
                    assert!(
                        CallKind::of_wharf_method(&path).is_some(),
                        "{path} is neither a change nor a read: classify it in CallKind"
                    );
                    seen += 1;
                }
            }
        }
        assert_eq!(seen, 41, "every wharf.v1 method was checked");
    }

    #[test]
    fn an_unsampled_traceparent_is_not_a_sampled_parent() {
        let cx = parent_from_headers(&with_traceparent(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        ));
        assert!(cx.is_valid());
        assert!(!cx.is_sampled());
        let sampled = with_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        assert!(parent_from_headers(&sampled).is_sampled());
        assert!(!parent_from_headers(&http::HeaderMap::new()).is_sampled());
    }

    #[test]
    fn headers_without_traceparent_have_no_parent() {
        let mut headers = http::HeaderMap::new();
        headers.insert("tracestate", http::HeaderValue::from_static("k=v"));
        assert!(!parent_from_headers(&headers).is_valid());
    }
}
