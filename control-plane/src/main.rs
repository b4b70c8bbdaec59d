//! `wharf-control-plane`: the composition root. See `wharf_control_plane::app`; the
//! settings are assembled in `config`. Dev mode (an in-process executor) is the separate
//! `wharf-dev` binary (`dev/`), so that this one links no data-plane code.

mod config;

use std::process::ExitCode;

use clap::Parser;
use wharf_control_plane::app::App;

#[tokio::main]
async fn main() -> ExitCode {
    let log_control = init_tracing();
    let config::Settings {
        config,
        store,
        metrics_listen,
    } = match config::Args::parse().build() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("wharf-control-plane: {e}\n(see --help and docs/configuration.md)");
            return ExitCode::from(2);
        }
    };
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

/// The log filter: RUST_LOG when set, otherwise INFO (so that an operator sees what the
/// control plane does), behind a reload handle so that `PUT /admin/loggers/...` can
/// change it at run time.
fn init_tracing() -> wharf_control_plane::rest::loggers::Apply {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::builder()
        .with_default_directive(tracing::Level::INFO.into())
        .from_env_lossy();
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal()),
        )
        .init();
    Box::new(move |directives: &str| {
        let next = tracing_subscriber::EnvFilter::try_new(directives).map_err(|e| e.to_string())?;
        handle.reload(next).map_err(|e| e.to_string())
    })
}
