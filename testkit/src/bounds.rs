//! How long each plugin call may take, and the kit's own runtime the calls run on (as an
//! executor runs plugin calls on a plugin runtime apart from its own work).

use std::time::Duration;

use crate::{CALL_TIMEOUT_SECS, CLEANUP_TIMEOUT_MS, PLUGIN_THREAD_NAME, STOP_TIMEOUT_MS};

/// Worker threads of the kit's plugin runtime. A call that blocks its thread holds one
/// until it returns; the kit's own timer runs elsewhere, so it still fires.
const PLUGIN_WORKERS: usize = 4;

/// How long each kind of plugin call may take before the check fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// `start`, `task_configs`, `put`, `flush` (default [`CALL_TIMEOUT_SECS`]).
    pub call: Duration,
    /// `stop_with(false)` (default [`STOP_TIMEOUT_MS`]).
    pub stop: Duration,
    /// `stop_with(true)` (default [`CLEANUP_TIMEOUT_MS`]).
    pub cleanup: Duration,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            call: Duration::from_secs(CALL_TIMEOUT_SECS),
            stop: Duration::from_millis(STOP_TIMEOUT_MS),
            cleanup: Duration::from_millis(CLEANUP_TIMEOUT_MS),
        }
    }
}

/// A plugin call, as far as its bound goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallKind {
    /// `start`, `task_configs`, `put`, `flush`.
    Other,
    /// `stop_with(connector_deleted)`.
    Stop { deleted: bool },
}

/// The bound on a call of `kind` under `bounds`, and which runtime setting it stands for
/// (the text a failure shows). Pure.
pub(crate) fn bound_of(kind: CallKind, bounds: &Bounds) -> (Duration, &'static str) {
    match kind {
        CallKind::Other => (
            bounds.call,
            "the kit's bound on a plugin call (Kit::call_timeout)",
        ),
        CallKind::Stop { deleted: false } => (
            bounds.stop,
            "the executor's graceful stop timeout (--graceful-timeout-ms, default 10000): past it the executor abandons the instance; Kit::stop_timeout sets another bound for a plugin that documents one",
        ),
        CallKind::Stop { deleted: true } => (
            bounds.cleanup,
            "the connector's cleanup.timeout.ms (default 30000): past it the cleanup attempt counts as failed and the instance is abandoned; Kit::cleanup_timeout sets another bound for a plugin that documents one",
        ),
    }
}

/// Why a check failed when call `what` overran `bound` (`setting`: what the bound stands
/// for). Pure.
pub(crate) fn overrun_text(what: &str, bound: Duration, setting: &str) -> String {
    format!(
        "{what} did not return within {} ms, {setting}; a call that blocks its thread (std::thread::sleep, synchronous I/O) must move that work to tokio::task::spawn_blocking",
        bound.as_millis()
    )
}

/// The kit's own multi-thread runtime where every plugin call runs, so that a call that
/// blocks its thread cannot stop the timer of the check (which runs on the caller's
/// runtime, often a current-thread one), as the executor runs plugin calls on a plugin
/// runtime apart from its own work. Started at the first call; shut down without waiting
/// when the kit is dropped (a blocked call may still hold a worker).
#[derive(Default)]
pub(crate) struct PluginRuntime(std::sync::OnceLock<Result<tokio::runtime::Runtime, String>>);

impl PluginRuntime {
    /// The runtime's handle, the runtime started at the first call.
    pub(crate) fn handle(&self) -> Result<&tokio::runtime::Handle, String> {
        self.0
            .get_or_init(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(PLUGIN_WORKERS)
                    .thread_name(PLUGIN_THREAD_NAME)
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map(tokio::runtime::Runtime::handle)
            .map_err(Clone::clone)
    }
}

impl Drop for PluginRuntime {
    fn drop(&mut self) {
        // Never a blocking drop: it would wait for a plugin call stuck in its thread, and
        // dropping a runtime inside the caller's async test panics.
        if let Some(Ok(rt)) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// The error text of a plugin call that panicked with `payload`, as the executor words
/// it (`plugin panicked: <message>`). Pure.
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-text panic payload".to_owned());
    format!("plugin panicked: {msg}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_kind_gets_its_own_bound_naming_the_runtime_setting() {
        let b = Bounds {
            call: Duration::from_secs(1),
            stop: Duration::from_secs(2),
            cleanup: Duration::from_secs(3),
        };
        let (d, why) = bound_of(CallKind::Other, &b);
        assert_eq!(d, Duration::from_secs(1));
        assert!(why.contains("Kit::call_timeout"), "{why}");
        let (d, why) = bound_of(CallKind::Stop { deleted: false }, &b);
        assert_eq!(d, Duration::from_secs(2));
        assert!(
            why.contains("--graceful-timeout-ms") && why.contains("Kit::stop_timeout"),
            "{why}"
        );
        let (d, why) = bound_of(CallKind::Stop { deleted: true }, &b);
        assert_eq!(d, Duration::from_secs(3));
        assert!(
            why.contains("cleanup.timeout.ms") && why.contains("Kit::cleanup_timeout"),
            "{why}"
        );
    }

    #[test]
    fn the_default_bounds_follow_the_runtime_defaults() {
        let b = Bounds::default();
        assert_eq!(b.stop, Duration::from_millis(10_000));
        assert_eq!(
            b.cleanup,
            Duration::from_millis(u64::from(wharf_sdk::DEFAULT_CLEANUP_TIMEOUT_MS))
        );
    }

    #[test]
    fn a_panic_reads_as_the_executor_reports_it() {
        assert_eq!(panic_text(&"boom"), "plugin panicked: boom");
        assert_eq!(panic_text(&format!("at {}", 3)), "plugin panicked: at 3");
        assert_eq!(
            panic_text(&7_u32),
            "plugin panicked: non-text panic payload"
        );
    }

    #[test]
    fn an_overrun_names_the_call_the_bound_and_the_remedy() {
        let t = overrun_text(
            "task c/0 stop(false)",
            Duration::from_millis(1500),
            "SETTING",
        );
        assert!(
            t.starts_with("task c/0 stop(false) did not return within 1500 ms, SETTING;")
                && t.contains("spawn_blocking"),
            "{t}"
        );
    }
}
