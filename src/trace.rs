//! Traces across hosts (docs/observability.md, "Traces"): W3C Trace Context
//! (`traceparent`) in gRPC metadata from the control plane to executors and back, so
//! that one deletion is one trace from `DeleteConnector` to each plugin's `stop(true)` on
//! each host. Spans are `tracing` spans; with `--otlp-endpoint` they are exported over
//! OTLP (see [`crate::telemetry`]), and without it every function here is a no-op: no
//! trace context exists, nothing is injected.

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::codegen::http;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tracing_opentelemetry::OpenTelemetrySpanExt;

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
    /// The context of the current span.
    pub fn current() -> Self {
        Self(tracing::Span::current().context())
    }

    /// True when it names a trace (export is on and a span was current).
    pub fn is_valid(&self) -> bool {
        self.0.span().span_context().is_valid()
    }

    /// Makes `span` a child of this context (nothing when it is empty), and records its
    /// trace id in the span's `trace_id` field when it has one.
    pub fn adopt(&self, span: &tracing::Span) {
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
/// made), so that JSON log lines inside it carry the trace id.
pub fn record_trace_id(span: &tracing::Span) {
    if let Some(id) = TraceContext(span.context()).trace_id() {
        span.record("trace_id", id.as_str());
    }
}

/// The span of one incoming gRPC call, for tonic's `Server::trace_fn`: `rpc` with its
/// `method` (also its OpenTelemetry name), a child of the caller's span when the request
/// carries a `traceparent`, its trace id recorded.
pub fn rpc_span(req: &http::Request<()>) -> tracing::Span {
    let method = req.uri().path();
    let span = tracing::info_span!(
        "rpc",
        method = %method,
        otel.name = %method,
        otel.kind = "server",
        trace_id = tracing::field::Empty,
    );
    let parent = TraceContextPropagator::new().extract(&HeaderExtractor(req.headers()));
    TraceContext(parent).adopt(&span);
    span
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
