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
    /// `service.instance.id` (an executor's id; the control plane's listen address).
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
#[error("--otlp-endpoint {endpoint}: {reason}")]
pub struct OtlpError {
    /// The endpoint given.
    pub endpoint: String,
    /// Why it was refused.
    pub reason: String,
}

/// The OTLP/gRPC span pipeline: a batch processor on the tokio runtime (the tonic
/// exporter needs one; the SDK's default processor exports from a plain thread) and a
/// resource naming this process.
fn otlp_provider(otlp: &Otlp) -> Result<opentelemetry_sdk::trace::SdkTracerProvider, OtlpError> {
    use opentelemetry_otlp::WithExportConfig;
    let err = |reason: String| OtlpError {
        endpoint: otlp.endpoint.clone(),
        reason,
    };
    if !(otlp.endpoint.starts_with("http://") || otlp.endpoint.starts_with("https://")) {
        return Err(err("not a URL; write it like http://127.0.0.1:4317".into()));
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(otlp.endpoint.clone())
        .build()
        .map_err(|e| err(e.to_string()))?;
    let processor =
        opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
            exporter,
            opentelemetry_sdk::runtime::Tokio,
        )
        .build();
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(otlp.service)
        .with_attribute(opentelemetry::KeyValue::new(
            "service.instance.id",
            otlp.instance.clone(),
        ))
        .build();
    Ok(opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource)
        .build())
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
    // Spans are exported at INFO whatever RUST_LOG says: the log filter is the log
    // layer's own, so that quiet logs (RUST_LOG=warn) still leave whole traces.
    let otel = provider.as_ref().map(|p| {
        use opentelemetry::trace::TracerProvider as _;
        use tracing_subscriber::Layer as _;
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("wharf"))
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO)
    });
    let filter = tracing_subscriber::EnvFilter::builder()
        .with_default_directive(tracing::Level::INFO.into())
        .from_env_lossy();
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
            handle.reload(next).map_err(|e| e.to_string())
        }),
        export: Export(provider),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_formats_parse_and_others_are_refused_by_name() {
        assert_eq!("text".parse::<LogFormat>(), Ok(LogFormat::Text));
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        let err = "yaml".parse::<LogFormat>().expect_err("not a format");
        assert!(err.contains("yaml"), "{err}");
    }
}
