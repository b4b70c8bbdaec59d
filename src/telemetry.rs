//! One logging setup for every Wharf binary: events on stderr, filtered by `RUST_LOG`
//! (INFO by default, so that an operator sees what a process does), as human-readable
//! text (colours only on a terminal) or as one JSON object per line (`--log-format json`,
//! for log shippers; docs/observability.md).

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

/// Installs the global `tracing` subscriber as text. Call once, first thing in `main`; a
/// second call (a subscriber is already set) changes nothing.
pub fn init() {
    let _ = init_with(LogFormat::Text);
}

/// Installs the global `tracing` subscriber in `format`, behind a reload handle so that
/// the filter can change at run time (Kafka Connect's `/admin/loggers`). A second call
/// changes nothing; its handle then changes nothing either.
pub fn init_with(format: LogFormat) -> FilterReload {
    let filter = tracing_subscriber::EnvFilter::builder()
        .with_default_directive(tracing::Level::INFO.into())
        .from_env_lossy();
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let registry = tracing_subscriber::registry().with(filter);
    let installed = match format {
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::stderr().is_terminal()),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(true)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    let _ = installed;
    Box::new(move |directives: &str| {
        let next = tracing_subscriber::EnvFilter::try_new(directives).map_err(|e| e.to_string())?;
        handle.reload(next).map_err(|e| e.to_string())
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
