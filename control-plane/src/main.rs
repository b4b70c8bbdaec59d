//! `wharf-control-plane`: the composition root. See `wharf_control_plane::app`; the
//! settings are assembled in `config`. Dev mode (an in-process executor) is the separate
//! `wharf-dev` binary (`dev/`), so that this one links no data-plane code.

mod config;

use std::process::ExitCode;

use clap::Parser;
use wharf_control_plane::app::App;

#[tokio::main]
async fn main() -> ExitCode {
    let config::Settings {
        config,
        store,
        metrics_listen,
        log_format,
    } = match config::Args::parse().build() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("wharf-control-plane: {e}\n(see --help and docs/configuration.md)");
            return ExitCode::from(2);
        }
    };
    // After the settings (they name the format); their errors go to stderr as text.
    let log_control = wharf::telemetry::init_with(log_format);
    let result = match App::build_with_store(config, store).await {
        Ok(mut app) => {
            app.set_log_control("INFO", log_control);
            match serve_metrics(metrics_listen, app.probe()).await {
                Ok(()) => app.run(wharf::server::shutdown_signal()).await,
                Err(e) => {
                    eprintln!("wharf-control-plane: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => {
            tracing::info!("control plane stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("wharf-control-plane: {e}");
            if let Some(hint) = e.hint() {
                eprintln!("hint: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Binds the metrics listener when asked for and serves it until the process exits
/// (it changes nothing, so it needs no orderly shutdown).
async fn serve_metrics(
    addr: Option<std::net::SocketAddr>,
    probe: std::sync::Arc<dyn wharf::observability::Probe>,
) -> Result<(), String> {
    let Some(addr) = addr else { return Ok(()) };
    let (listener, bound) = wharf::observability::bind(addr)
        .await
        .map_err(|e| format!("bind --metrics-listen {addr}: {e}"))?;
    tracing::info!(addr = %bound, "metrics listener bound (/metrics, /health, /ready)");
    wharf::task::spawn(
        wharf::task::TaskKind::Detached,
        "metrics listener",
        async move {
            if let Err(e) =
                wharf::observability::serve(listener, vec![probe], std::future::pending()).await
            {
                tracing::error!(addr = %bound, error = %e, "metrics listener failed");
            }
        },
    );
    Ok(())
}
