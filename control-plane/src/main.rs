//! `wharf-control-plane`: the composition root. The settings are assembled in `config`;
//! what runs with them is [`wharf_control_plane::launch`]. Dev mode (an in-process
//! executor) is the separate `wharf-dev` binary (`dev/`), so that this one links no
//! data-plane code.

mod config;

use std::process::ExitCode;

use clap::Parser;
use wharf_control_plane::launch;

/// mimalloc rather than glibc's malloc: at 10,000 connectors x 10 tasks glibc kept about
/// two thirds of the control plane's 1.6 GiB after it was freed; with mimalloc it stays
/// near 520 MiB, no slower (bench/NOTES.md, issue 19). Only this binary: the library
/// and the executor keep the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
