//! `wharf-control-plane`: the composition root. The settings are assembled in `config`;
//! what runs with them is [`wharf_control_plane::launch`]. Dev mode (an in-process
//! executor) is the separate `wharf-dev` binary (`dev/`), so that this one links no
//! data-plane code.

mod config;

use std::process::ExitCode;

use clap::Parser;
use wharf_control_plane::launch;

/// mimalloc rather than glibc's malloc. At 10,000 connectors x 10 tasks glibc kept about
/// two thirds of the control plane's 1.6 GiB after it was freed (bursts of record copies
/// and encodings across tokio's worker threads); mimalloc, set up by
/// [`return_freed_memory`], keeps far less at every size (bench/NOTES.md, "Scale"). Only
/// this binary: the library and the executor keep the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` of mimalloc 3 (`mi_option_e` in its `mimalloc.h`; the sys
/// crate names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Makes freed memory go back to the OS, unless an operator chose otherwise in the
/// environment (mimalloc reads `MIMALLOC_*` before `main`):
/// - at once, not after mimalloc 3's default 1 s (`MIMALLOC_PURGE_DELAY`): under a
///   steady stream of allocations the delay kept 127 MiB at 100 x 10 where glibc kept 43;
/// - in 4 KiB pages, not 2 MiB transparent huge pages (`MIMALLOC_ALLOW_THP`): with them
///   an idle control plane held 40 MiB instead of 18. mimalloc's own option takes effect
///   only when read at its start, so the process turns them off itself; the flag
///   applies to every page it faults in from then on (prctl(2)).
fn return_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one integer option. mimalloc does not make the write thread-safe,
        // so it runs before the runtime starts a thread (`main`).
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    }
    #[cfg(target_os = "linux")]
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: a prctl with integer arguments only; failure (an old kernel) leaves
        // huge pages allowed, which costs memory, not correctness.
        let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
}

fn main() -> ExitCode {
    return_freed_memory();
    run()
}

#[tokio::main]
async fn run() -> ExitCode {
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
