//! `wharf-executor`: hosts connectors and tasks for a Wharf control plane. The settings
//! are assembled in `config`.

mod config;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use wharf_executor::app::{AppError, ExecutorApp, ExecutorConfig};

/// Runtime worker threads. More than the cores: a misbehaving plugin that blocks its
/// thread (and is abandoned at its stop timeout) must not starve the other tasks.
const RUNTIME_WORKER_THREADS: usize = 8;

/// How long exit waits for background work after the graceful stops, in milliseconds.
const RUNTIME_SHUTDOWN_TIMEOUT_MS: u64 = 500;

fn main() -> ExitCode {
    wharf::telemetry::init();
    let config = match config::Cli::parse().build() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("wharf-executor: {e}\n(see --help and docs/configuration.md)");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(RUNTIME_WORKER_THREADS)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("wharf-executor: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(config));
    // An abandoned plugin may still hold a worker thread: do not wait for it to exit.
    runtime.shutdown_timeout(Duration::from_millis(RUNTIME_SHUTDOWN_TIMEOUT_MS));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The error chain: each layer names its step, the last one the cause.
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                text.push_str(&format!(": {s}"));
                source = s.source();
            }
            eprintln!("wharf-executor: {text}");
            if let Some(hint) = e.hint() {
                eprintln!("hint: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}

async fn run(config: ExecutorConfig) -> Result<(), AppError> {
    let running = ExecutorApp::start(config).await?;
    wharf::server::shutdown_signal().await;
    running.shutdown().await;
    Ok(())
}
