//! Traces across hosts (docs/observability.md, "Traces"): W3C Trace Context
//! (`traceparent`) in gRPC metadata from the control plane to executors and back, so
//! that one deletion is one trace from `DeleteConnector` to each plugin's `stop(true)` on
//! each host. Spans are `tracing` spans; with `--otlp-endpoint` they are exported over
//! OTLP (see [`crate::telemetry`]), and without it every function here is a no-op: no
//! trace context exists, nothing is injected.
//!
//! The executor's spans (its calls, each plugin's stop, its traced status reports) are
//! the exception: they are [`DirectSpan`]s, made with the OpenTelemetry API itself, and
//! their `tracing` spans only serve the log lines ([`LOG_ONLY_TARGET`]). A deletion makes
//! about 20 spans, 18 of them on executors, and through the `tracing` bridge each cost
//! 5 to 6 times as much as through the API (bench/NOTES.md, issue 16).

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::codegen::http;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The `target` of a `tracing` span made for log lines only: the OTLP layer never exports
/// it, because the same step is exported as a [`DirectSpan`].
pub const LOG_ONLY_TARGET: &str = "wharf::log_only";

/// An attribute of a [`DirectSpan`] (OpenTelemetry's key and value).
pub use opentelemetry::KeyValue;

/// The tracer of [`DirectSpan`]s, set when span export is set up (`--otlp-endpoint`).
static TRACER: std::sync::OnceLock<opentelemetry_sdk::trace::SdkTracer> =
    std::sync::OnceLock::new();

/// Installs the tracer [`DirectSpan`]s are made with (the first one stays).
pub(crate) fn set_tracer(tracer: opentelemetry_sdk::trace::SdkTracer) {
    let _ = TRACER.set(tracer);
}

/// A span made with the OpenTelemetry API rather than through `tracing`, for the spans on
/// an executor's stop path: the `tracing` bridge builds, visits, stores and converts each
/// span on the path of the call, which cost about 6 us per span there against about 1 us
/// this way (cold caches; bench/NOTES.md, issue 16). Empty (every method a no-op) without
/// export or outside a sampled trace. Ends at [`DirectSpan::around`]'s end, or when its
/// last context is dropped.
#[derive(Debug)]
pub struct DirectSpan {
    /// The exported span, in a context for its children; `None` when nothing is exported.
    cx: Option<opentelemetry::Context>,
    /// The `tracing` span of the log lines inside, entered by [`DirectSpan::around`] (a
    /// call's `rpc`; none for a child, whose caller makes its own).
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
    /// `trace_id` ([`LOG_ONLY_TARGET`]), INFO when the call is exported and DEBUG
    /// otherwise, as [`rpc_span`]; made here rather than in `Server::trace_fn`, so that
    /// `traceparent` is read once per call.
    pub fn server(method: &'static str, metadata: &MetadataMap) -> Self {
        let parent = parent_from_metadata(metadata);
        if !exported(CallKind::of_method(method), parent.is_sampled()) {
            return Self {
                cx: None,
                log: tracing::debug_span!(target: LOG_ONLY_TARGET, "rpc", method),
            };
        }
        let log = tracing::info_span!(
            target: LOG_ONLY_TARGET,
            "rpc",
            method,
            trace_id = tracing::field::Empty
        );
        let Some(tracer) = TRACER.get() else {
            return Self { cx: None, log };
        };
        let mut span = Self::start(
            tracer,
            &parent.0,
            opentelemetry::trace::SpanBuilder::from_name(method)
                .with_kind(opentelemetry::trace::SpanKind::Server)
                .with_attributes([KeyValue::new("method", method)]),
        );
        if crate::telemetry::logs_show_info_spans()
            && let Some(id) = span.context().trace_id()
        {
            log.record("trace_id", id.as_str());
        }
        span.log = log;
        span
    }

    /// Span `name` with `attributes`, a child of `parent` when that is a sampled trace's
    /// (empty otherwise: an untraced stop makes no trace of its own).
    pub fn child(
        parent: &TraceContext,
        name: &'static str,
        attributes: impl IntoIterator<Item = KeyValue>,
    ) -> Self {
        match TRACER.get() {
            Some(tracer) if parent.is_sampled() => Self::start(
                tracer,
                &parent.0,
                opentelemetry::trace::SpanBuilder::from_name(name).with_attributes(attributes),
            ),
            _ => Self::default(),
        }
    }

    fn start(
        tracer: &opentelemetry_sdk::trace::SdkTracer,
        parent: &opentelemetry::Context,
        builder: opentelemetry::trace::SpanBuilder,
    ) -> Self {
        Self {
            cx: Some(parent.with_span(builder.start_with_context(tracer, parent))),
            log: tracing::Span::none(),
        }
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
        use opentelemetry::context::FutureExt as _;
        use tracing::Instrument as _;
        let Some(cx) = self.cx else {
            return fut.instrument(self.log).await;
        };
        let result = fut.with_context(cx.clone()).instrument(self.log).await;
        let span = cx.span();
        if let Err(e) = &result {
            span.set_status(opentelemetry::trace::Status::error(e.to_string()));
        }
        span.end();
        result
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
        if let (Ok(k), Ok(v)) = (
            MetadataKey::from_bytes(key.as_bytes()),
            MetadataValue::try_from(value.as_str()),
        ) {
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
    /// The context of the current span: the current `tracing` span's, or else the
    /// current OpenTelemetry context's (a [`DirectSpan`]'s, inside its
    /// [`DirectSpan::around`]).
    pub fn current() -> Self {
        let from_tracing = tracing::Span::current().context();
        if from_tracing.span().span_context().is_valid() {
            Self(from_tracing)
        } else {
            Self(opentelemetry::Context::current())
        }
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

    /// Makes `span` a child of this context (nothing when it is empty), and records its
    /// trace id in the span's `trace_id` field when it has one. Nothing for a disabled
    /// span (an untraced read's at `RUST_LOG=info`).
    pub fn adopt(&self, span: &tracing::Span) {
        if span.is_disabled() {
            return;
        }
        if self.is_valid() {
            let _ = span.set_parent(self.0.clone());
        }
        record_trace_id(span);
    }

    /// Injects this context as `traceparent` into `metadata`.
    pub fn inject(&self, metadata: &mut MetadataMap) {
        if self.is_valid() {
            TraceContextPropagator::new().inject_context(&self.0, &mut MetadataInjector(metadata));
        }
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

/// Records `span`'s trace id in its `trace_id` field (declared empty where the span is
/// made), so that JSON log lines inside it carry the trace id. Nothing when the log
/// filter shows no INFO span ([`crate::telemetry::logs_show_info_spans`]): no log line
/// would carry the field, and the trace has the id already.
pub fn record_trace_id(span: &tracing::Span) {
    if span.is_disabled() || !crate::telemetry::logs_show_info_spans() {
        return;
    }
    if let Some(id) = TraceContext(span.context()).trace_id() {
        span.record("trace_id", id.as_str());
    }
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
                | "RetryCleanup" | "AlterOffsets" | "ResetOffsets",
            )
            | ("ExecutorRegistry", "RegisterExecutor" | "RequestTaskReconfiguration") => {
                CallKind::Change
            }
            (
                "Executor",
                "StartConnector" | "StopConnector" | "ComputeTaskConfigs" | "StartTask"
                | "StopTask",
            ) => CallKind::Delegated,
            (
                "ConnectorAdmin",
                "GetConnector" | "ListConnectors" | "GetConnectorStatus"
                | "ValidateConnectorConfig" | "ListConnectorPlugins" | "GetOffsets"
                | "ListExecutors" | "WatchConnector" | "ListAuditEntries",
            )
            | ("Executor", "ListAssignments")
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

/// The trace context a caller sent as `traceparent` in HTTP (or HTTP/2, gRPC) request
/// headers; empty when there is none or it does not parse.
pub fn parent_from_headers(headers: &http::HeaderMap) -> TraceContext {
    // Most calls carry none (pollers, heartbeats, an untraced herder's starts, every call
    // with export off): no propagator work for them.
    if !headers.contains_key(TRACEPARENT) {
        return TraceContext::default();
    }
    TraceContext(TraceContextPropagator::new().extract(&HeaderExtractor(headers)))
}

/// The span of one incoming gRPC call, for tonic's `Server::trace_fn`: `rpc` with its
/// `method` (also its OpenTelemetry name), a child of the caller's span when the request
/// carries a `traceparent`, its trace id recorded. INFO (exported) or DEBUG as
/// [`exported`] decides.
pub fn rpc_span(req: &http::Request<()>) -> tracing::Span {
    let method = req.uri().path();
    let parent = parent_from_headers(req.headers());
    // Two call sites: a span's level is fixed where it is made.
    let span = if exported(CallKind::of_method(method), parent.is_sampled()) {
        tracing::info_span!(
            "rpc",
            method = %method,
            otel.name = %method,
            otel.kind = "server",
            trace_id = tracing::field::Empty,
        )
    } else {
        tracing::debug_span!(
            "rpc",
            method = %method,
            otel.name = %method,
            otel.kind = "server",
            trace_id = tracing::field::Empty,
        )
    };
    parent.adopt(&span);
    span
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

    /// Installs a tracer that records every span as it ends (once per test binary; the
    /// only test that makes direct spans).
    fn recording_tracer() -> Ended {
        use opentelemetry::trace::TracerProvider as _;
        let ended = Ended::default();
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_span_processor(opentelemetry_sdk::trace::SimpleSpanProcessor::new(
                ended.clone(),
            ))
            .build();
        set_tracer(provider.tracer("test"));
        ended
    }

    const CALLER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
    const CALLER_SPAN: &str = "b7ad6b7169203331";

    fn traced_metadata(flags: &str) -> MetadataMap {
        let mut md = MetadataMap::new();
        md.insert(
            "traceparent",
            format!("00-{CALLER_TRACE}-{CALLER_SPAN}-{flags}")
                .parse()
                .unwrap(),
        );
        md
    }

    #[test]
    fn direct_spans_nest_under_the_caller_and_carry_the_outcome() {
        let ended = recording_tracer();
        let call = DirectSpan::server("/wharf.v1.Executor/StopTask", &traced_metadata("01"));
        // Not futures' block_on: the SDK's simple processor exports with it, and it does
        // not nest.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
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
        let spans = ended.0.lock().unwrap().clone();
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
        assert_eq!(ended.0.lock().unwrap().len(), 2);
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
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            http::HeaderValue::from_static(
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
        );
        let cx = TraceContextPropagator::new().extract(&HeaderExtractor(&headers));
        assert_eq!(
            TraceContext(cx).trace_id().as_deref(),
            Some("0af7651916cd43dd8448eb211c80319c")
        );
    }

    #[test]
    fn an_injected_context_is_a_traceparent_entry() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            http::HeaderValue::from_static(
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
        );
        let cx = TraceContext(TraceContextPropagator::new().extract(&HeaderExtractor(&headers)));
        let mut md = MetadataMap::new();
        cx.inject(&mut md);
        assert_eq!(
            md.get("traceparent").and_then(|v| v.to_str().ok()),
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
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
        assert_eq!(seen, 31, "every wharf.v1 method was checked");
    }

    #[test]
    fn an_unsampled_traceparent_is_not_a_sampled_parent() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            http::HeaderValue::from_static(
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
            ),
        );
        let cx = parent_from_headers(&headers);
        assert!(cx.is_valid());
        assert!(!cx.is_sampled());
        headers.insert(
            "traceparent",
            http::HeaderValue::from_static(
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
        );
        assert!(parent_from_headers(&headers).is_sampled());
        assert!(!parent_from_headers(&http::HeaderMap::new()).is_sampled());
    }

    #[test]
    fn headers_without_traceparent_have_no_parent() {
        let mut headers = http::HeaderMap::new();
        headers.insert("tracestate", http::HeaderValue::from_static("k=v"));
        assert!(!parent_from_headers(&headers).is_valid());
    }
}
