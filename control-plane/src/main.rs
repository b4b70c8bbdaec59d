//! `wharf-control-plane`: the composition root. See `wharf_control_plane::app`; the
//! settings are assembled in `config`. Dev mode (an in-process executor) is the separate
//! `wharf-dev` binary (`dev/`), so that this one links no data-plane code.

mod config;

use std::process::ExitCode;

use clap::Parser;
use wharf_control_plane::app::App;

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = config::Args::parse();
    match args.command.take() {
        Some(config::Command::Token { name, role }) => return mint(&name, role),
        Some(config::Command::Certs { what }) => {
            return match config::run_certs(what) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("wharf-control-plane certs: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        None => {}
    }
    let config::Settings {
        config,
        store,
        metrics_listen,
        log_format,
        otlp_endpoint,
    } = match args.build() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("wharf-control-plane: {e}\n(see --help and docs/configuration.md)");
            return ExitCode::from(2);
        }
    };
    // After the settings (they name the format); their errors go to stderr as text.
    let otlp = otlp_endpoint.map(|endpoint| wharf::telemetry::Otlp {
        endpoint,
        service: "wharf-control-plane",
        instance: config.listen.to_string(),
    });
    let telemetry = match wharf::telemetry::init_traced(log_format, otlp.as_ref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("wharf-control-plane: {e}\n(see --help and docs/configuration.md)");
            return ExitCode::from(2);
        }
    };
    let (log_control, telemetry) = telemetry.split();
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
    telemetry.shutdown().await;
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

/// `token`: prints the file line on stdout and the token on stderr (shown once).
fn mint(name: &str, role: wharf_control_plane::auth::Role) -> ExitCode {
    use wharf_control_plane::auth::token;
    if !token::valid_name(name) {
        eprintln!(
            "wharf-control-plane token: invalid --name {name:?}: use 1 to 128 of A-Z a-z 0-9 . _ @ -"
        );
        return ExitCode::from(2);
    }
    let t = token::mint_token();
    println!("{}", token::file_line(name, role, &t));
    eprintln!(
        "token for {name} (role {role}), shown only now; the line on stdout holds only its hash:\n{t}"
    );
    ExitCode::SUCCESS
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
