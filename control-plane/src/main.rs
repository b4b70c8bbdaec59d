//! `wharf-control-plane`: the composition root. See `wharf_control_plane::app`; the
//! settings are assembled in `config`.

mod config;
mod example;

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use wharf_control_plane::app::{self, App, LISTEN_ADDR_FILE, StartError};
use wharf_control_plane::store::StoreError;

/// How long `--dev` waits for the control plane to write its bound address, in ms.
const BIND_WAIT_TIMEOUT_MS: u64 = 30_000;
/// Pause between two looks at `listen.addr`, in milliseconds.
const BIND_POLL_INTERVAL_MS: u64 = 50;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            // RUST_LOG when set; otherwise INFO, so that an operator sees what it does.
            tracing_subscriber::EnvFilter::builder()
                .with_default_directive(tracing::Level::INFO.into())
                .from_env_lossy(),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let args = config::Args::parse();
    if let Some(config::Command::Certs { what }) = args.command {
        return match config::run_certs(what) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("wharf-control-plane certs: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let settings = match args.build() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("wharf-control-plane: {e}\n(see --help and docs/configuration.md)");
            return ExitCode::from(2);
        }
    };
    match run(settings).await {
        Ok(()) => {
            tracing::info!("control plane stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("wharf-control-plane: {e}");
            if let Some(hint) = hint(&e) {
                eprintln!("hint: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}

async fn run(settings: config::Settings) -> Result<(), StartError> {
    let config::Settings {
        config,
        dev,
        example,
        store,
        enable_test_plugins,
    } = settings;
    if !dev {
        return App::build_with_store(config, store)
            .await?
            .run(wharf::server::shutdown_signal())
            .await;
    }
    let data_dir = config.data_dir.clone();
    let paths = if example {
        if data_dir
            .join(example::EXAMPLE_DIR)
            .join(example::DATABASE_FILE)
            .exists()
        {
            example::say("wharf: using the existing example database (tables customers, orders)");
        } else {
            example::say("wharf: creating the example SQLite database (tables customers, orders)");
        }
        match example::create_database(&data_dir) {
            Ok(p) => Some(p),
            Err(e) => {
                return Err(StartError::DevExecutor(format!(
                    "{e} (delete {} to start over)",
                    data_dir.join(example::EXAMPLE_DIR).display()
                )));
            }
        }
    } else {
        None
    };
    // A stale address from an earlier run must not be mistaken for this one's.
    let addr_file = data_dir.join(LISTEN_ADDR_FILE);
    let _ = std::fs::remove_file(&addr_file);
    example::say(&format!(
        "wharf: starting the control plane in dev mode (embedded store, in-process executor, embedded record log) in {}",
        data_dir.display()
    ));
    let mut server = tokio::spawn(app::run_dev(
        config,
        enable_test_plugins,
        wharf::server::shutdown_signal(),
    ));
    let addr = tokio::select! {
        result = &mut server => return joined(result),
        addr = wait_for_addr(&addr_file) => addr,
    };
    let Some(addr) = addr else {
        server.abort();
        return Err(StartError::DevExecutor(format!(
            "the control plane did not write {} within {BIND_WAIT_TIMEOUT_MS} ms",
            addr_file.display()
        )));
    };
    if let Some(paths) = &paths {
        example::say(&format!(
            "wharf: creating connectors {} (sqlite-audit) -> {} (file-sink)",
            example::SOURCE_NAME,
            example::SINK_NAME
        ));
        tokio::select! {
            result = &mut server => return joined(result),
            created = example::create_connectors(addr, paths) => {
                if let Err(e) = created {
                    eprintln!("wharf-control-plane: {e}");
                    eprintln!("hint: the control plane keeps running; see its log above");
                }
            }
        }
    }
    example::print_next_steps(addr, &data_dir, paths.as_ref());
    joined(server.await)
}

fn joined(
    result: Result<Result<(), StartError>, tokio::task::JoinError>,
) -> Result<(), StartError> {
    match result {
        Ok(r) => r,
        Err(e) => Err(StartError::DevExecutor(format!(
            "control plane task ended abnormally: {e}"
        ))),
    }
}

/// Waits for `<data-dir>/listen.addr`; `None` after [`BIND_WAIT_TIMEOUT_MS`].
async fn wait_for_addr(file: &Path) -> Option<SocketAddr> {
    let deadline = Instant::now() + Duration::from_millis(BIND_WAIT_TIMEOUT_MS);
    while Instant::now() < deadline {
        if let Some(addr) = std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return Some(addr);
        }
        tokio::time::sleep(Duration::from_millis(BIND_POLL_INTERVAL_MS)).await;
    }
    None
}

/// What the operator can do about a start failure.
fn hint(e: &StartError) -> Option<String> {
    match e {
        StartError::Bind { addr, source } if source.kind() == std::io::ErrorKind::AddrInUse => {
            Some(format!(
                "{addr} is taken (another control plane?); stop it or pick another address with --listen or WHARF_LISTEN (port 0 picks a free one)"
            ))
        }
        StartError::Bind { .. } => {
            Some("check that --listen names an address of this host".into())
        }
        StartError::DataDir { path, .. } => Some(format!(
            "check that {} is writable, or choose another --data-dir (or WHARF_DATA_DIR)",
            path.display()
        )),
        StartError::Store(StoreError::Unavailable(m)) if m.starts_with("etcd") => Some(
            "check that --etcd-endpoints names reachable etcd client URLs (see docs/state.md)".into(),
        ),
        StartError::Store(StoreError::Corrupt { .. }) => Some(
            "a stored record does not decode or decrypt: every replica sharing a store needs the same store.key (docs/state.md)".into(),
        ),
        StartError::Store(_) => Some(
            "another control plane may be using this --data-dir (the store is locked while open); stop it or choose another --data-dir (or WHARF_DATA_DIR)".into(),
        ),
        StartError::InvalidSetting { .. } => Some("see --help and docs/configuration.md".into()),
        StartError::Tls(_) => Some(
            "check --tls-cert/--tls-key/--tls-ca (make them with `wharf-control-plane certs`, see docs/security.md)".into(),
        ),
        _ => None,
    }
}
