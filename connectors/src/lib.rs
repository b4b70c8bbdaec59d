//! Built-in connector plugins, written on the SDK (`wharf-sdk`) like any third-party
//! plugin: `file-source` and `file-sink` for the quickstart, the audit sources
//! `sqlite-audit` and `postgres-audit` and the queue-provisioning `rabbitmq-sink` of the
//! KIP's examples, and the fault-injecting `test-source` / `test-sink`, which record every
//! lifecycle call (start, poll..., stop(true)) for the tests to assert and fail, block or
//! ignore cancellation on request.
//!
//! The stock `wharf-executor` binary (crate `wharf-executor-stock`) and `wharf-dev` offer
//! them; the executor library links none, so an author's executor offers them only when
//! it adds them.

pub mod audit;
pub mod audit_names;
pub mod debezium_postgres;
pub mod file;
pub mod pg_tls;
pub mod postgres_audit;
pub mod rabbitmq_sink;
pub mod sqlite_audit;
pub mod test_plugin;

use wharf_sdk::Plugin;

/// The production plugins built into Wharf, as an executor advertises them:
/// `postgres-audit`, `sqlite-audit`, `rabbitmq-sink`, and `file-source`, `file-sink` only when the
/// executor has a file root (`--file-root`; they touch nothing outside it).
pub fn builtin_plugins(file_root: Option<&file::FileRoot>) -> Vec<Plugin> {
    let mut plugins = Vec::new();
    if let Some(root) = file_root {
        plugins.push(file::source_plugin(root.clone()));
        plugins.push(file::sink_plugin(root.clone()));
    }
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
    config: &wharf_sdk::ConfigMap,
    key: &str,
) -> Result<Option<T>, String> {
    match config.get(key) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<T>()
            .map(Some)
            .map_err(|_| format!("config {key:?}: cannot parse the value")),
    }
}

/// Reads a required config value.
///
/// # Errors
/// A message naming `key` when it is missing.
pub(crate) fn required<'a>(config: &'a wharf_sdk::ConfigMap, key: &str) -> Result<&'a str, String> {
    config
        .get(key)
        .map(String::as_str)
        .ok_or_else(|| format!("missing required configuration {key:?}"))
}
