//! `wharf-executor`: hosts connectors and tasks for a Wharf control plane.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use wharf_executor::app::{DEFAULT_GRACEFUL_TIMEOUT_MS, ExecutorApp, ExecutorConfig};

/// Wharf executor: runs connector instances and tasks assigned by the control plane and
/// stops them with connector_deleted=true only when their connector was deleted
/// (KIP-883/KIP-901). SIGTERM stops everything with connector_deleted=false and exits 0.
#[derive(Debug, Parser)]
#[command(name = "wharf-executor", version)]
struct Cli {
    /// Address to serve the Executor gRPC service on, IP:PORT (port 0 picks one; the
    /// bound address is written to <data-dir>/listen.addr).
    #[arg(long, env = "WHARF_LISTEN")]
    listen: SocketAddr,
    /// URL of the control plane's ExecutorRegistry, for example http://127.0.0.1:7000.
    #[arg(long, env = "WHARF_CONTROL_PLANE")]
    control_plane: String,
    /// Directory for executor.id, listen.addr and the embedded record log.
    #[arg(long, env = "WHARF_DATA_DIR")]
    data_dir: PathBuf,
    /// URL the control plane uses to reach this executor (default http://<bound address>).
    #[arg(long, env = "WHARF_ADVERTISE")]
    advertise: Option<String>,
    /// Executor id (default: generated once and kept in <data-dir>/executor.id).
    #[arg(long, env = "WHARF_EXECUTOR_ID")]
    executor_id: Option<String>,
    /// How long the stops at shutdown may take in all, in milliseconds; also the stop
    /// timeout used when a StopTask/StopConnector request says 0.
    #[arg(long, env = "WHARF_GRACEFUL_TIMEOUT_MS", default_value_t = DEFAULT_GRACEFUL_TIMEOUT_MS)]
    graceful_timeout_ms: u64,
    /// NATS URL for the JetStream record log (several hosts); without it records go to the
    /// embedded log under <data-dir>/log.
    #[arg(long, env = "WHARF_NATS_URL")]
    nats_url: Option<String>,
}

/// Runtime worker threads. More than the cores: a misbehaving plugin that blocks its
/// thread (and is abandoned at its stop timeout) must not starve the other tasks.
const RUNTIME_WORKER_THREADS: usize = 8;

/// How long exit waits for background work after the graceful stops, in milliseconds.
const RUNTIME_SHUTDOWN_TIMEOUT_MS: u64 = 500;

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(RUNTIME_WORKER_THREADS)
        .enable_all()
        .build()?;
    let result = runtime.block_on(run(cli));
    // An abandoned plugin may still hold a worker thread: do not wait for it to exit.
    runtime.shutdown_timeout(Duration::from_millis(RUNTIME_SHUTDOWN_TIMEOUT_MS));
    result
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let Cli {
        listen,
        control_plane,
        data_dir,
        advertise,
        executor_id,
        graceful_timeout_ms,
        nats_url,
    } = cli;
    let mut config = ExecutorConfig::new(listen, control_plane, data_dir);
    config.advertise = advertise;
    config.executor_id = executor_id;
    config.graceful_timeout = Duration::from_millis(graceful_timeout_ms);
    config.nats_url = nats_url;
    let running = ExecutorApp::start(config).await?;
    wharf::server::shutdown_signal().await;
    running.shutdown().await;
    Ok(())
}
