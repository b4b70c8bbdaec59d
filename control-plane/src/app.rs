//! Composition root of the control plane: opens the store, binds the listener, writes
//! `<data-dir>/listen.addr`, and runs the gRPC services, the herder and the finalizer
//! under one cancellation tree.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};
use wharf::pb::v1::connector_admin_server::ConnectorAdminServer;
use wharf::pb::v1::executor_registry_server::ExecutorRegistryServer;

use crate::grpc::admin::AdminService;
use crate::grpc::registry::RegistryService;
use crate::reconcile::{Cluster, LeaseConfig, finalizer, run_herder};
use crate::store::etcd_election::{Election, LeaderRoute, Role};
use crate::store::seal::Sealer;
use crate::store::{EtcdOptions, EtcdStore, RedbStore, STORE_FILE_NAME, StateStore};

/// Default executor lease, in milliseconds.
pub const DEFAULT_LEASE_MS: u32 = 10_000;
/// Default executor heartbeat interval, in milliseconds.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u32 = 2_000;
/// Largest request the services decode, in bytes (our own, smaller limits answer
/// INVALID_ARGUMENT naming the field; this is the transport's last line).
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;
/// File (in the data dir) holding the bound address.
pub const LISTEN_ADDR_FILE: &str = "listen.addr";

/// Validated settings of one control-plane process.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to bind (port 0 picks one).
    pub listen: SocketAddr,
    /// Directory of the store, its key and `listen.addr`.
    pub data_dir: PathBuf,
    /// Lease and heartbeat settings handed to executors.
    pub lease: LeaseConfig,
    /// Certificate, key and CA: TLS on the listener and every client (docs/security.md).
    pub tls: Option<wharf::tls::TlsFiles>,
    /// Allow a plaintext listener on a non-loopback address (warned at start).
    pub insecure: bool,
}

/// Which [`StateStore`] backend to use (`--store`).
#[derive(Debug, Clone, Default)]
pub enum StoreOptions {
    /// The embedded redb file in the data dir (one replica).
    #[default]
    Redb,
    /// etcd, shared by several replicas; one leads (see `docs/state.md`).
    Etcd {
        /// Endpoints and key prefix.
        etcd: EtcdOptions,
        /// TTL of the election lease, in seconds.
        election_ttl_secs: u32,
        /// URL other replicas forward to; default `http://<bound address>`.
        advertise: Option<String>,
    },
}

/// Why the control plane could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A setting is out of range.
    #[error("invalid setting {field}: {reason}")]
    InvalidSetting {
        /// Flag name.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The data dir or `listen.addr` could not be written.
    #[error("data dir {path}: {source}")]
    DataDir {
        /// Path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// Binding the listener failed.
    #[error("bind {addr}: {source}")]
    Bind {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// The store failed to open.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The in-process executor of `--dev` failed to start.
    #[error("dev executor: {0}")]
    DevExecutor(String),
    /// Reflection descriptors did not decode (a build defect).
    #[error("server reflection: {0}")]
    Reflection(String),
    /// The TLS files did not load.
    #[error(transparent)]
    Tls(#[from] wharf::tls::TlsError),
}

impl Config {
    /// Checks the settings; destructures so that a new field cannot be ignored.
    ///
    /// # Errors
    /// [`StartError::InvalidSetting`].
    pub fn build(self) -> Result<Self, StartError> {
        let Config {
            listen,
            data_dir,
            lease,
            tls,
            insecure,
        } = self;
        let LeaseConfig {
            lease_ms,
            heartbeat_interval_ms,
        } = lease;
        if lease_ms == 0 {
            return Err(StartError::InvalidSetting {
                field: "--lease-ms",
                reason: "must be positive".into(),
            });
        }
        if heartbeat_interval_ms == 0 || heartbeat_interval_ms >= lease_ms {
            return Err(StartError::InvalidSetting {
                field: "--heartbeat-interval-ms",
                reason: format!("must be positive and shorter than the lease ({lease_ms} ms)"),
            });
        }
        match wharf::tls::bind_decision(&listen, tls.is_some(), insecure) {
            wharf::tls::BindDecision::Tls | wharf::tls::BindDecision::PlaintextLoopback => {}
            wharf::tls::BindDecision::PlaintextInsecure => warn!(
                addr = %listen,
                "--insecure: plaintext listener on a non-loopback address; anyone who reaches it can act as an executor or an operator"
            ),
            wharf::tls::BindDecision::Refuse => {
                return Err(StartError::InvalidSetting {
                    field: "--listen",
                    reason: format!(
                        "{listen} is not a loopback address and no TLS is configured; set --tls-cert/--tls-key/--tls-ca (docs/security.md) or pass --insecure"
                    ),
                });
            }
        }
        Ok(Config {
            listen,
            data_dir,
            lease,
            tls,
            insecure,
        })
    }
}

/// A bound, not yet serving control plane.
pub struct App {
    tls: Option<Arc<wharf::tls::Tls>>,
    listener: TcpListener,
    local_addr: SocketAddr,
    cluster: Arc<Cluster>,
    election: Option<Election>,
    self_url: String,
}

impl App {
    /// Opens the store under the data dir, binds, and writes `listen.addr`.
    ///
    /// # Errors
    /// [`StartError`].
    pub async fn build(config: Config) -> Result<Self, StartError> {
        Self::build_with_store(config, StoreOptions::Redb).await
    }

    /// As [`App::build`], with the store backend chosen by `store`. With etcd the store
    /// key still comes from `<data-dir>/store.key`: every replica needs the same file.
    ///
    /// # Errors
    /// [`StartError`]; etcd not answering is [`StartError::Store`].
    pub async fn build_with_store(config: Config, store: StoreOptions) -> Result<Self, StartError> {
        let config = config.build()?;
        let tls = config.tls.clone().map(wharf::tls::Tls::load).transpose()?;
        if let Some(t) = &tls
            && t.identity() != wharf::identity::Identity::ControlPlane
        {
            return Err(StartError::InvalidSetting {
                field: "--tls-cert",
                reason: format!(
                    "names {}, not the control plane (spiffe://wharf/control-plane)",
                    t.identity()
                ),
            });
        }
        let dir = config.data_dir.clone();
        std::fs::create_dir_all(&dir).map_err(|source| StartError::DataDir {
            path: dir.clone(),
            source,
        })?;
        let sealer = Sealer::load_or_create(&dir)?;
        let (store, etcd): (Arc<dyn StateStore>, _) = match &store {
            StoreOptions::Redb => (
                Arc::new(RedbStore::open(&dir.join(STORE_FILE_NAME), sealer)?),
                None,
            ),
            StoreOptions::Etcd {
                etcd,
                election_ttl_secs,
                advertise,
            } => {
                let options = etcd.clone();
                // The store connects and blocks on its own runtime thread.
                let s = tokio::task::spawn_blocking(move || EtcdStore::connect(&options, sealer))
                    .await
                    .map_err(|e| crate::store::StoreError::Unavailable(e.to_string()))??;
                let s = Arc::new(s);
                (
                    s.clone() as Arc<dyn StateStore>,
                    Some((s, *election_ttl_secs, advertise.clone())),
                )
            }
        };
        let cluster = Cluster::new(store, config.lease)?;
        cluster
            .clients
            .use_tls(wharf::tls::ClientTls::from_option(tls.as_ref()));
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| StartError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let local_addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;
        let tmp = dir.join(format!("{LISTEN_ADDR_FILE}.tmp"));
        std::fs::write(&tmp, local_addr.to_string())
            .and_then(|()| std::fs::rename(&tmp, dir.join(LISTEN_ADDR_FILE)))
            .map_err(|source| StartError::DataDir {
                path: dir.clone(),
                source,
            })?;
        info!(addr = %local_addr, data_dir = %dir.display(), "control plane bound");
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut self_url = format!("{scheme}://{local_addr}");
        let election = etcd.map(|(s, ttl, advertise)| {
            if let Some(a) = advertise {
                self_url = a;
            }
            Election::new(s, self_url.clone(), ttl)
        });
        Ok(Self {
            tls,
            listener,
            local_addr,
            cluster,
            election,
            self_url,
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` resolves; then stops the loops and drains connections.
    ///
    /// # Errors
    /// When the server fails.
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), StartError> {
        let cancel = CancellationToken::new();
        // Without an election this replica always leads (the sender is dropped; the
        // receiver keeps the value).
        let elected = self.election.is_some();
        let (role, election) = match self.election {
            Some(e) => {
                let role = e.subscribe();
                let task = spawn_named("election", e.run(cancel.child_token()));
                (role, Some(task))
            }
            None => (tokio::sync::watch::channel(Role::Leader).1, None),
        };
        let loops = spawn_named(
            "leader-loops",
            run_loops_while_leader(
                self.cluster.clone(),
                role.clone(),
                elected,
                cancel.child_token(),
            ),
        );

        let client_tls = wharf::tls::ClientTls::from_option(self.tls.as_ref());
        let reloader = self
            .tls
            .as_ref()
            .map(|t| t.spawn_reloader(cancel.child_token()));
        let admin = LeaderRoute::new(
            ConnectorAdminServer::new(AdminService::new(self.cluster.clone()))
                .max_decoding_message_size(MAX_REQUEST_BYTES),
            role.clone(),
            &self.self_url,
        )
        .with_tls(client_tls.clone());
        let registry = LeaderRoute::new(
            ExecutorRegistryServer::new(
                RegistryService::new(self.cluster.clone()).with_tls(self.tls.is_some()),
            )
            .max_decoding_message_size(MAX_REQUEST_BYTES),
            role,
            &self.self_url,
        )
        .with_tls(client_tls);
        let router = tonic::transport::Server::builder()
            // One span per RPC, named by its method, so that handler events carry it.
            .trace_fn(|req| tracing::info_span!("rpc", method = %req.uri().path()))
            .add_service(admin)
            .add_service(registry);
        let (router, reporter) = wharf::server::add_common_services(
            router,
            &[
                wharf::pb::v1::connector_admin_server::SERVICE_NAME,
                wharf::pb::v1::executor_registry_server::SERVICE_NAME,
            ],
        )
        .map_err(|e| StartError::Reflection(e.to_string()))?;
        reporter
            .set_serving::<ConnectorAdminServer<AdminService>>()
            .await;
        reporter
            .set_serving::<ExecutorRegistryServer<RegistryService>>()
            .await;

        let stop = cancel.clone();
        let result = router
            // TCP_NODELAY (the builder's setting does not apply to an incoming stream):
            // without it a second small answer on a connection waits for the peer's
            // delayed ACK, about 40 ms on Linux.
            .serve_with_incoming_shutdown(
                wharf::tls::serve_incoming(self.listener, self.tls.clone()),
                async move {
                    shutdown.await;
                    stop.cancel();
                },
            )
            .await;
        cancel.cancel();
        let _ = loops.await;
        if let Some(r) = reloader {
            let _ = r.await;
        }
        if let Some(e) = election {
            let _ = e.await;
        }
        result.map_err(|e| StartError::Bind {
            addr: self.local_addr,
            source: std::io::Error::other(e),
        })
    }
}

/// Directory (inside the data dir) of the in-process executor of `--dev`.
pub const DEV_EXECUTOR_DIR: &str = "dev-executor";
/// Id of the in-process executor of `--dev`.
pub const DEV_EXECUTOR_ID: &str = "dev";

/// `--dev`: the control plane plus an in-process executor with the production built-in
/// plugins (and `test-source` / `test-sink` when `enable_test_plugins`), the embedded
/// store and the embedded record log, until `shutdown` resolves. At shutdown the
/// executor stops its instances with `connector_deleted = false` first, then the control
/// plane stops.
///
/// # Errors
/// [`StartError`].
pub async fn run_dev(
    config: Config,
    enable_test_plugins: bool,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let data_dir = config.data_dir.clone();
    let app = App::build(config).await?;
    let control_plane = format!("http://{}", app.local_addr());
    let (stop_cp, cp_stopped) = tokio::sync::oneshot::channel::<()>();
    let cp = tokio::spawn(app.run(async move {
        let _ = cp_stopped.await;
    }));
    let local = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let mut exec_config = wharf_executor::app::ExecutorConfig::new(
        local,
        control_plane,
        data_dir.join(DEV_EXECUTOR_DIR),
    );
    exec_config.executor_id = Some(DEV_EXECUTOR_ID.to_owned());
    if enable_test_plugins {
        exec_config.enable_test_plugins();
    }
    let executor = wharf_executor::app::ExecutorApp::start(exec_config)
        .await
        .map_err(|e| StartError::DevExecutor(e.to_string()))?;
    info!(executor = DEV_EXECUTOR_ID, addr = %executor.local_addr(), "dev executor started in process");
    shutdown.await;
    executor.shutdown().await;
    let _ = stop_cp.send(());
    match cp.await {
        Ok(result) => result,
        Err(e) => Err(StartError::DevExecutor(format!(
            "control plane task ended abnormally: {e}"
        ))),
    }
}

/// Spawns a named background task; it runs until its cancellation token fires. A panic
/// inside is logged at ERROR (the operator must act: that loop no longer runs).
pub fn spawn_named(
    name: &'static str,
    fut: impl std::future::Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let inner = tokio::spawn(fut);
        if let Err(e) = inner.await
            && e.is_panic()
        {
            error!(
                task = name,
                "background task panicked; restart the control plane"
            );
        }
    })
}

/// Runs the herder and the finalizer while `role` says this replica leads; stops them
/// (and waits for them) as soon as it does not. With an election, a new term first grants
/// every registered executor a fresh lease, as a restarted control plane does: their
/// heartbeats went to the previous leader.
async fn run_loops_while_leader(
    cluster: Arc<Cluster>,
    mut role: tokio::sync::watch::Receiver<Role>,
    elected: bool,
    cancel: CancellationToken,
) {
    loop {
        while *role.borrow_and_update() != Role::Leader {
            tokio::select! {
                () = cancel.cancelled() => return,
                r = role.changed() => if r.is_err() { return },
            }
        }
        match cluster.store.executors() {
            Ok(_) if !elected => {}
            Ok(execs) => {
                for e in execs.iter().filter(|e| !e.lost) {
                    cluster.grant_lease(&e.id, e.epoch);
                }
            }
            Err(e) => {
                warn!(error = %e, "new term: executors not readable; their leases start at their next heartbeat")
            }
        }
        info!("leading: herder and finalizer start");
        let term = cancel.child_token();
        let herder = spawn_named("herder", run_herder(cluster.clone(), term.child_token()));
        let fin = spawn_named(
            "finalizer",
            finalizer::run_finalizer(cluster.clone(), term.child_token()),
        );
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                r = role.changed() => {
                    if r.is_err() && *role.borrow() == Role::Leader {
                        // No election (or it ended while leading): lead until cancelled.
                        cancel.cancelled().await;
                        break;
                    }
                    if *role.borrow_and_update() != Role::Leader {
                        break;
                    }
                }
            }
        }
        term.cancel();
        let _ = herder.await;
        let _ = fin.await;
        if cancel.is_cancelled() {
            return;
        }
        warn!("no longer leading: herder and finalizer stopped");
    }
}
