//! One logging setup for every Wharf binary: human-readable events on stderr (colours
//! only on a terminal), filtered by `RUST_LOG`, INFO by default so that an operator sees
//! what a process does.

use std::io::IsTerminal;

/// Installs the global `tracing` subscriber. Call once, first thing in `main`; a second
/// call (a subscriber is already set) changes nothing.
pub fn init() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::builder()
                .with_default_directive(tracing::Level::INFO.into())
                .from_env_lossy(),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
