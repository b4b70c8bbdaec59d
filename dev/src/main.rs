//! `wharf-dev`: dev mode. Composes a control plane (`wharf_control_plane::app::App`) and
//! an executor (`wharf_executor::app::ExecutorApp`) in one process, on the embedded store
//! and the embedded record log, and with `--example` sets up the quickstart's example.
//! The production binaries link nothing of each other; only this one links both.

mod config;
mod dev;
mod example;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let settings = match config::Args::parse().build() {
        Ok(s) => s,
        Err(e) => return dev::bad_settings(&e),
    };
    dev::run_to_exit(settings, wharf::server::shutdown_signal()).await
}
