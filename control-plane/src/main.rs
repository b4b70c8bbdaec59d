//! `wharf-control-plane`: the composition root. The settings are assembled in `config`;
//! what runs with them is [`wharf_control_plane::launch`]. Dev mode (an in-process
//! executor) is the separate `wharf-dev` binary (`dev/`), so that this one links no
//! data-plane code.

mod config;

use std::process::ExitCode;

use clap::Parser;
use wharf_control_plane::launch;

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = config::Args::parse();
    if let Some(command) = args.command.take() {
        return config::run_command(command);
    }
    match args.build() {
        Ok(settings) => launch::run(settings).await,
        Err(e) => {
            eprintln!("wharf-control-plane: {e}\n(see --help and docs/configuration.md)");
            ExitCode::from(launch::EXIT_BAD_SETTINGS)
        }
    }
}
