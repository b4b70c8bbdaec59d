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
    wharf::telemetry::init();
    let settings = match config::Args::parse().build() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("wharf-dev: {e}\n(see --help and docs/configuration.md)");
            return ExitCode::from(2);
        }
    };
    match dev::run(settings, wharf::server::shutdown_signal()).await {
        Ok(()) => {
            tracing::info!("control plane stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("wharf-dev: {e}");
            if let Some(hint) = e.hint() {
                eprintln!("hint: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}
