//! `wharf-control-plane`: the composition root. See `wharf_control_plane::app`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use wharf_control_plane::app::{self, App, Config};
use wharf_control_plane::reconcile::LeaseConfig;

/// Wharf control plane: stores connector configs and state, assigns connector instances
/// and tasks to executors, runs deletions to completion (stop with connector_deleted =
/// true on every task's executor), and serves the ConnectorAdmin and ExecutorRegistry
/// gRPC services (with reflection, so grpcurl works).
#[derive(Parser, Debug)]
#[command(name = "wharf-control-plane", version)]
struct Args {
    /// Address to listen on, IP:PORT (port 0 picks a free port; the bound address is
    /// written to <data-dir>/listen.addr).
    #[arg(long, env = "WHARF_LISTEN", default_value = "127.0.0.1:7000")]
    listen: SocketAddr,
    /// Directory for the embedded store (state.redb), its encryption key (store.key)
    /// and listen.addr. Created if missing.
    #[arg(long, env = "WHARF_DATA_DIR")]
    data_dir: PathBuf,
    /// Executor lease in milliseconds: an executor without a heartbeat for this long is
    /// marked lost and its work moves.
    #[arg(long, env = "WHARF_LEASE_MS", default_value_t = app::DEFAULT_LEASE_MS)]
    lease_ms: u32,
    /// Heartbeat interval handed to executors, in milliseconds (shorter than the lease).
    #[arg(long, env = "WHARF_HEARTBEAT_INTERVAL_MS", default_value_t = app::DEFAULT_HEARTBEAT_INTERVAL_MS)]
    heartbeat_interval_ms: u32,
    /// Development mode: also run an executor with the built-in plugins in this process
    /// (embedded store, embedded record log; nothing to install).
    #[arg(long)]
    dev: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let dev = args.dev;
    let config = Config {
        listen: args.listen,
        data_dir: args.data_dir,
        lease: LeaseConfig {
            lease_ms: args.lease_ms,
            heartbeat_interval_ms: args.heartbeat_interval_ms,
        },
    };
    if dev {
        app::run_dev(config, wharf::server::shutdown_signal()).await?;
    } else {
        App::build(config)
            .await?
            .run(wharf::server::shutdown_signal())
            .await?;
    }
    Ok(())
}
