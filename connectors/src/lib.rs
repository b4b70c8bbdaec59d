//! Built-in connector plugins: `file-source` and `file-sink` for the quickstart, the audit
//! sources and `rabbitmq-sink` of the KIP's examples, and the
//! lifecycle-recording `test-source` / `test-sink` that tests use to assert the exact
//! sequence of calls (start, poll..., stop(true)) an instance received.

pub mod audit;
pub mod audit_names;
pub mod file;
pub mod pg_tls;
pub mod postgres_audit;
pub mod rabbitmq_sink;
pub mod sqlite_audit;
pub mod test_plugin;

use wharf::sdk::Plugin;

/// The production plugins built into Wharf, as an executor advertises them:
/// `postgres-audit`, `sqlite-audit`, `rabbitmq-sink`, and `file-source`, `file-sink` only when the
/// executor has a file root (`--file-root`; they touch nothing outside it).
pub fn builtin_plugins(file_root: Option<&file::FileRoot>) -> Vec<Plugin> {
    let mut plugins = Vec::new();
    if let Some(root) = file_root {
        plugins.push(file::source_plugin(root.clone()));
        plugins.push(file::sink_plugin(root.clone()));
    }
    // Audit sources (sqlite-audit, postgres-audit) are added here, one line each.
    plugins.push(postgres_audit::plugin());
    plugins.push(sqlite_audit::plugin());
    plugins.push(rabbitmq_sink::plugin());
    plugins
}

/// The fault-injecting `test-source` and `test-sink`; an executor offers them only when
/// started with `--enable-test-plugins` (they can fail, block and ignore cancellation on
/// purpose, so they must never be picked by mistake in production).
pub fn test_plugins() -> Vec<Plugin> {
    vec![test_plugin::source_plugin(), test_plugin::sink_plugin()]
}

/// Reads an optional config value parsed as `T`.
///
/// # Errors
/// A message naming `key` when the value does not parse.
pub(crate) fn parse_opt<T: std::str::FromStr>(
    config: &wharf::sdk::ConfigMap,
    key: &str,
) -> Result<Option<T>, String> {
    match config.get(key) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<T>()
            .map(Some)
            .map_err(|_| format!("config {key:?}: cannot parse {v:?}")),
    }
}

/// Reads a required config value.
///
/// # Errors
/// A message naming `key` when it is missing.
pub(crate) fn required<'a>(
    config: &'a wharf::sdk::ConfigMap,
    key: &str,
) -> Result<&'a str, String> {
    config
        .get(key)
        .map(String::as_str)
        .ok_or_else(|| format!("missing required configuration {key:?}"))
}
