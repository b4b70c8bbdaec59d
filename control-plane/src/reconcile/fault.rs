//! Test-only crash points for the fault tests (`tests/fault_control_plane_crash.rs`).
//!
//! When the environment variable [`CRASH_AT_ENV`] names one of the points below, the
//! process aborts (as a kill -9 would end it: no cleanup, no flush beyond what the store
//! already committed) the first time the control plane reaches that point. Compiled in only
//! with the cargo feature `fault-injection` (the test harness enables it; a release build
//! of the control plane does not): without it a crash point is an empty function and the
//! variable is never read. This is the one place the variable is read.
//!
//! Points:
//! - `before_fanout`: a deletion is recorded and no cleanup stop has been sent yet;
//! - `mid_fanout`: one task's stop(true) completed while another task's is still in flight
//!   (nothing of the fan-out is recorded yet: the restarted control plane sends both again);
//! - `before_final_removal`: every step is final, the one write that removes the
//!   connector has not happened;
//! - `before_resource_confirm`: a plugin recorded its resource intents and created the
//!   resources; the first confirmation is received and not stored.

/// Environment variable naming the crash point (test-only).
pub const CRASH_AT_ENV: &str = "WHARF_FAULT_CRASH_AT";

/// Without the `fault-injection` feature: does nothing.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn crash_point(_point: &str) {}

/// Aborts the process when `point` is the configured crash point.
#[cfg(feature = "fault-injection")]
pub fn crash_point(point: &str) {
    use std::sync::OnceLock;
    static AT: OnceLock<Option<String>> = OnceLock::new();
    let at = AT.get_or_init(|| std::env::var(CRASH_AT_ENV).ok().filter(|s| !s.is_empty()));
    if at.as_deref() == Some(point) {
        eprintln!("{CRASH_AT_ENV}={point}: aborting at this crash point (test-only)");
        std::process::abort();
    }
}
