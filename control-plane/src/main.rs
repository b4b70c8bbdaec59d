//! `wharf-control-plane`: the composition root. See `wharf_control_plane::app`; the
//! settings are assembled in `config`. Dev mode (an in-process executor) is the separate
//! `wharf-dev` binary (`dev/`), so that this one links no data-plane code.

mod config;

use std::process::ExitCode;

use clap::Parser;
use wharf_control_plane::app::App;

#[tokio::main]
async fn main() -> ExitCode {
    wharf::telemetry::init();
    let config::Settings { config, store } = match config::Args::parse().build() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("wharf-control-plane: {e}\n(see --help and docs/configuration.md)");
            return ExitCode::from(2);
        }
    };
    let result = match App::build_with_store(config, store).await {
        Ok(app) => app.run(wharf::server::shutdown_signal()).await,
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
