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
    let config::Settings { config, store } = match config::Args::parse().build() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("wharf-control-plane: {e}\n(see --help and docs/configuration.md)");
            return ExitCode::from(2);
        }
    };
    let result = match App::build_with_store(config, store).await {
        Ok(mut app) => {
            app.set_log_control("INFO", log_control);
            app.run(wharf::server::shutdown_signal()).await
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
