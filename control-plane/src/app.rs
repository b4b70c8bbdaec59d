//! Composition root of the control plane: opens the store, binds the listener, writes
//! `<data-dir>/listen.addr`, and runs the gRPC services, the herder and the finalizer
//! under one cancellation tree.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use wharf::pb::v1::connector_admin_server::ConnectorAdminServer;
use wharf::pb::v1::executor_registry_server::ExecutorRegistryServer;
use wharf::task::{TaskKind, spawn};

use crate::auth::{AdminAuth, AuthSettings};
use crate::grpc::guard::GuardedAdmin;
use crate::grpc::leader_route::LeaderRoute;
use crate::grpc::registry::RegistryService;
use crate::reconcile::{Cluster, LeaseConfig, finalizer, run_herder};
use crate::store::etcd_election::{Election, Role};
use crate::store::seal::{KEY_FILE_NAME, KeyFate, Sealer, key_fate};
use crate::store::{EtcdOptions, EtcdStore, RedbStore, STORE_FILE_NAME, StateStore};

/// Default executor lease, in milliseconds.
pub const DEFAULT_LEASE_MS: u32 = 10_000;
/// Default executor heartbeat interval, in milliseconds.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u32 = 2_000;
/// Largest request the services decode, in bytes (our own, smaller limits answer
/// INVALID_ARGUMENT naming the field; this is the transport's last line).
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;
/// Default admin/registry listen address, `127.0.0.1:7000`.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 7000);
/// File (in the data dir) holding the bound address.
pub const LISTEN_ADDR_FILE: &str = "listen.addr";
/// File (in the data dir) holding the REST gateway's bound address.
pub const REST_ADDR_FILE: &str = "rest.addr";

/// Validated settings of one control-plane process.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to bind (port 0 picks one).
    pub listen: SocketAddr,
    /// Directory of the store, its key and `listen.addr`.
    pub data_dir: PathBuf,
    /// Lease and heartbeat settings handed to executors.
    pub lease: LeaseConfig,
    /// Admin authentication (token file, `--insecure`) and audit retention. With
    /// `tls` set, client certificates count as admin credentials too.
    pub auth: AuthSettings,
    /// Certificate, key and CA: TLS on the listener and every client (docs/security.md).
    /// A plaintext listener on a non-loopback address needs `auth.insecure`.
    pub tls: Option<wharf::tls::TlsFiles>,
    /// Address of the Kafka Connect REST gateway (HTTP/1.1), `None` for none (port 0
    /// picks one; the bound address is written to `<data-dir>/rest.addr`).
    pub rest_listen: Option<SocketAddr>,
    /// When the REST address is a default rather than asked for (`--dev`'s 8083): a
    /// failed bind is logged and the control plane runs without the gateway.
    pub rest_optional: bool,
    /// `--allow-separate-embedded-logs`: admit executors on embedded record logs beside
    /// each other (each keeps its own records; for tests of placement and lifecycle), see
    /// [`crate::plan::record_log`].
    pub separate_embedded_logs: bool,
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

/// Exit code of bad settings (as clap's usage errors), one that does not parse or one
/// out of range ([`StartError::exit_code`]).
pub const EXIT_BAD_SETTINGS: u8 = 2;

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
    /// Binding the REST gateway's listener (`--rest-listen`) failed.
    #[error("bind --rest-listen {addr}: {source}")]
    BindRest {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// The store failed to open.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The admin token file is missing or invalid.
    #[error(transparent)]
    AdminTokens(#[from] crate::auth::token::TokenFileError),
    /// Reflection descriptors did not decode (a build defect).
    #[error("server reflection: {0}")]
    Reflection(String),
    /// The TLS files did not load.
    #[error(transparent)]
    Tls(#[from] wharf::tls::TlsError),
    /// `store.key` is gone from a data dir whose store holds records sealed with it
    /// ([`crate::store::seal::KeyFate::RefuseMissing`]); nothing was written.
    #[error(
        "store.key is missing from {}, but {} holds records sealed with it: a new key would decrypt none of them, so none was made",
        dir.display(),
        store.display()
    )]
    StoreKeyMissing {
        /// The data dir.
        dir: PathBuf,
        /// The store file.
        store: PathBuf,
    },
}

impl StartError {
    /// The process's exit code for this error: [`EXIT_BAD_SETTINGS`] for
    /// a setting out of range (as for one that does not parse), 1 otherwise.
    pub fn exit_code(&self) -> std::process::ExitCode {
        match self {
            StartError::InvalidSetting { .. } => std::process::ExitCode::from(EXIT_BAD_SETTINGS),
            _ => std::process::ExitCode::FAILURE,
        }
    }

    /// What the operator can do about a start failure.
    pub fn hint(&self) -> Option<String> {
        match self {
            StartError::Bind { addr, source } if source.kind() == std::io::ErrorKind::AddrInUse => {
                Some(format!(
                    "{addr} is taken (another control plane?); stop it or pick another address with --listen or WHARF_LISTEN (port 0 picks a free one)"
                ))
            }
            StartError::BindRest { addr, .. } => Some(format!(
                "{addr} cannot be bound for the REST gateway; pick another address with --rest-listen or WHARF_REST_LISTEN (port 0 picks a free one), or turn it off with --rest-listen off"
            )),
            StartError::Bind { .. } => {
                Some("check that --listen names an address of this host".into())
            }
            StartError::DataDir { path, .. } => Some(format!(
                "check that {} is writable, or choose another --data-dir (or WHARF_DATA_DIR)",
                path.display()
            )),
            StartError::Store(crate::store::StoreError::Unavailable(m)) if m.starts_with("etcd") => Some(
                "check that --etcd-endpoints names reachable etcd client URLs and, for a secured etcd, that --etcd-cacert names the CA of its certificates, --etcd-cert/--etcd-key a certificate it accepts, and --etcd-user a user whose password is right (see docs/state.md, docs/security.md)".into(),
            ),
            StartError::Store(crate::store::StoreError::Corrupt { .. }) => Some(
                "a stored record does not decode or decrypt: every replica sharing a store needs the same store.key (docs/state.md)".into(),
            ),
            StartError::Store(_) => Some(
                "another control plane may be using this --data-dir (the store is locked while open); stop it or choose another --data-dir (or WHARF_DATA_DIR)".into(),
            ),
            StartError::InvalidSetting { .. } => Some("see --help and docs/configuration.md".into()),
            StartError::AdminTokens(_) => Some(
                "fix the --admin-tokens file (lines come from `wharf-control-plane token`), see docs/security.md".into(),
            ),
            StartError::Tls(_) => Some(
                "check --tls-cert/--tls-key/--tls-ca (make them with `wharf-control-plane certs`, see docs/security.md)".into(),
            ),
            StartError::StoreKeyMissing { dir, store } => Some(format!(
                "restore store.key into {} from a backup (every replica sharing a store needs the same key); to start over with an empty store instead, move {} away (docs/state.md)",
                dir.display(),
                store.display()
            )),
            _ => None,
        }
    }
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
            auth,
            tls,
            rest_listen,
            rest_optional,
            separate_embedded_logs,
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
        let insecure = auth.insecure;
        // Verified client certificates are admin credentials (their role is in the URI).
        let auth = AuthSettings {
            client_certs: auth.client_certs || tls.is_some(),
            ..auth
        };
        // Without any admin credentials every caller is an admin: loopback only, unless
        // the operator said --insecure.
        let open = auth.admin_tokens.is_none() && !auth.client_certs;
        let also_open = if open {
            "; no admin authentication is configured either (--admin-tokens FILE)"
        } else {
            ""
        };
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
                        "{listen} is not a loopback address and no TLS is configured{also_open}; set --tls-cert/--tls-key/--tls-ca (docs/security.md) or pass --insecure"
                    ),
                });
            }
        }
        // The REST gateway is the same admin API: the same rule, HTTPS with the same
        // certificate when TLS is configured.
        if let Some(rest) = &rest_listen {
            match wharf::tls::bind_decision(rest, tls.is_some(), insecure) {
                wharf::tls::BindDecision::Tls | wharf::tls::BindDecision::PlaintextLoopback => {}
                wharf::tls::BindDecision::PlaintextInsecure => warn!(
                    addr = %rest,
                    "--insecure: plaintext REST gateway on a non-loopback address; anyone who reaches it can act as an operator"
                ),
                wharf::tls::BindDecision::Refuse => {
                    return Err(StartError::InvalidSetting {
                        field: "--rest-listen",
                        reason: format!(
                            "{rest} is not a loopback address and no TLS is configured{also_open}; set --tls-cert/--tls-key/--tls-ca (docs/security.md) or pass --insecure"
                        ),
                    });
                }
            }
        }
        let listeners =
            std::iter::once(("--listen", listen)).chain(rest_listen.map(|a| ("--rest-listen", a)));
        for (field, addr) in listeners {
            if open && !addr.ip().is_loopback() && !insecure {
                return Err(StartError::InvalidSetting {
                    field,
                    reason: format!(
                        "{addr} is not a loopback address and no admin authentication is configured, so anyone who reaches it could delete connectors; configure --admin-tokens FILE or TLS client certificates (docs/security.md), listen on 127.0.0.1, or pass --insecure"
                    ),
                });
            }
        }
        if auth.audit_retention.max_entries == 0 {
            return Err(StartError::InvalidSetting {
                field: "--audit-max-entries",
                reason: "must be positive".into(),
            });
        }
        if auth.audit_retention.max_age_days == 0 {
            return Err(StartError::InvalidSetting {
                field: "--audit-max-age-days",
                reason: "must be positive".into(),
            });
        }
        Ok(Config {
            listen,
            data_dir,
            lease,
            auth,
            tls,
            rest_listen,
            rest_optional,
            separate_embedded_logs,
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
    auth: Arc<AdminAuth>,
    rest: Option<(TcpListener, SocketAddr)>,
    loggers: Arc<crate::rest::loggers::Loggers>,
    probe: Arc<crate::observe::ControlPlaneProbe>,
    separate_embedded_logs: bool,
}

/// Writes `addr` to `dir/file` atomically (a reader never sees half an address).
fn write_addr(dir: &std::path::Path, file: &str, addr: SocketAddr) -> Result<(), StartError> {
    let tmp = dir.join(format!("{file}.tmp"));
    std::fs::write(&tmp, addr.to_string())
        .and_then(|()| std::fs::rename(&tmp, dir.join(file)))
        .map_err(|source| StartError::DataDir {
            path: dir.to_owned(),
            source,
        })
}

/// Binds the admin API's listener at `addr` (`--listen`; port 0 picks a free one).
///
/// # Errors
/// [`StartError::Bind`], whose [`StartError::hint`] says what to do.
pub async fn bind_admin(addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })
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
        Self::build_on(config, store, None).await
    }

    /// As [`App::build_with_store`], serving the admin API on `listener` when given (bound
    /// by [`bind_admin`] before the process knew its span export's instance id, which is
    /// the bound address) instead of binding `config.listen` itself.
    ///
    /// # Errors
    /// As [`App::build_with_store`].
    pub async fn build_on(
        config: Config,
        store: StoreOptions,
        listener: Option<TcpListener>,
    ) -> Result<Self, StartError> {
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
        let auth = Arc::new(AdminAuth::new(&config.auth)?);
        if auth.credentials().is_open() {
            let exposed = std::iter::once(config.listen)
                .chain(config.rest_listen)
                .find(|a| !a.ip().is_loopback());
            if let Some(addr) = exposed {
                warn!(%addr, "--insecure: the admin API is open to anyone who reaches this address, with role admin; configure --admin-tokens (docs/security.md)");
            } else {
                info!(
                    "admin API without authentication (loopback only): every caller is principal `anonymous` with role admin"
                );
            }
        }
        let dir = config.data_dir.clone();
        std::fs::create_dir_all(&dir).map_err(|source| StartError::DataDir {
            path: dir.clone(),
            source,
        })?;
        // Embedded store only: an etcd store's records are not known before connecting.
        let store_file = dir.join(STORE_FILE_NAME);
        let holds_records = matches!(store, StoreOptions::Redb)
            && std::fs::metadata(&store_file).is_ok_and(|m| m.len() > 0);
        // Followed: a link to a key that is not there (an unmounted secret) is missing.
        let key_present = std::fs::metadata(dir.join(KEY_FILE_NAME)).is_ok();
        match key_fate(key_present, holds_records) {
            KeyFate::Load | KeyFate::Create => {}
            KeyFate::RefuseMissing => {
                return Err(StartError::StoreKeyMissing {
                    dir,
                    store: store_file,
                });
            }
        }
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
        let listener = match listener {
            Some(l) => l,
            None => bind_admin(config.listen).await?,
        };
        let local_addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;
        let rest = match config.rest_listen {
            None => None,
            Some(addr) => match TcpListener::bind(addr).await.and_then(|l| {
                let bound = l.local_addr()?;
                Ok((l, bound))
            }) {
                Ok((l, bound)) => {
                    write_addr(&dir, REST_ADDR_FILE, bound)?;
                    Some((l, bound))
                }
                Err(source) if config.rest_optional => {
                    warn!(%addr, error = %source, "REST gateway not started (its default address is taken); pass --rest-listen IP:PORT to choose another");
                    None
                }
                Err(source) => return Err(StartError::BindRest { addr, source }),
            },
        };
        write_addr(&dir, LISTEN_ADDR_FILE, local_addr)?;
        info!(addr = %local_addr, data_dir = %dir.display(), "control plane bound");
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut self_url = format!("{scheme}://{local_addr}");
        let rest_bound = rest.as_ref().map(|(_, a)| *a);
        let election = etcd.map(|(s, ttl, advertise)| {
            if let Some(a) = advertise {
                self_url = a;
            }
            let rest_url = rest_bound.and_then(|a| crate::rest::advertised_url(&self_url, a));
            Election::new(s, self_url.clone(), ttl).with_rest_url(rest_url)
        });
        let probe = Arc::new(crate::observe::ControlPlaneProbe::new(cluster.clone()));
        Ok(Self {
            probe,
            tls,
            listener,
            local_addr,
            cluster,
            election,
            self_url,
            auth,
            rest,
            loggers: Arc::new(crate::rest::loggers::Loggers::new("INFO", None)),
            separate_embedded_logs: config.separate_embedded_logs,
        })
    }

    /// The REST gateway's bound address, when `rest_listen` was set.
    pub fn rest_addr(&self) -> Option<SocketAddr> {
        self.rest.as_ref().map(|(_, a)| *a)
    }

    /// Lets `/admin/loggers` change the process's log filter: `apply` installs tracing
    /// directives; `start` is the filter the process started with (its `RUST_LOG`,
    /// [`wharf::telemetry::start_filter`]), which a change keeps but for the logger changed.
    pub fn set_log_control(&mut self, start: &str, apply: crate::rest::loggers::Apply) {
        self.loggers = Arc::new(crate::rest::loggers::Loggers::new(start, Some(apply)));
    }

    /// What the metrics listener shows of this control plane (state gauges and health;
    /// see [`crate::observe`]). The binary serves it with [`wharf::observability::serve`],
    /// beside an executor's probe in dev mode.
    pub fn probe(&self) -> Arc<dyn wharf::observability::Probe> {
        self.probe.clone()
    }

    /// Whether executor `id` may be given work now: live, reachable and verified at its
    /// advertised address, as placement and the plugins' own config checks require. Dev
    /// mode asks it of its in-process executor before creating the example.
    pub fn placeable(&self) -> impl Fn(&str) -> bool + Send + Sync + 'static {
        let cluster = self.cluster.clone();
        move |id| {
            cluster
                .executor_view()
                .is_ok_and(|view| view.placeable.contains(id))
        }
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
        let (role, rest_leader, election) = match self.election {
            Some(e) => {
                let role = e.subscribe();
                let rest_leader = e.subscribe_rest_leader();
                let task = spawn(TaskKind::Service, "election", e.run(cancel.child_token()));
                (role, Some(rest_leader), Some(task))
            }
            None => (tokio::sync::watch::channel(Role::Leader).1, None, None),
        };
        let loops = spawn(
            TaskKind::Service,
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
            ConnectorAdminServer::new(GuardedAdmin::new(self.cluster.clone(), self.auth.clone()))
                .max_decoding_message_size(MAX_REQUEST_BYTES),
            role.clone(),
            &self.self_url,
        )
        .with_tls(client_tls.clone());
        // A follower's REST gateway forwards to the leader's, as LeaderRoute does for gRPC.
        let rest_forward = rest_leader.map(|rest_leader| {
            crate::rest::LeaderForward::new(
                role.clone(),
                rest_leader,
                &self.self_url,
                client_tls.clone(),
            )
        });
        let registry = LeaderRoute::new(
            ExecutorRegistryServer::new(
                RegistryService::new(self.cluster.clone())
                    .with_tls(self.tls.is_some())
                    .with_separate_embedded_logs(self.separate_embedded_logs),
            )
            .max_decoding_message_size(MAX_REQUEST_BYTES),
            role,
            &self.self_url,
        )
        .with_tls(client_tls);
        let router = tonic::transport::Server::builder()
            // One span per RPC, named by its method, so that handler events carry it.
            .layer(wharf::trace::TraceLayer)
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
        // grpc.health.v1 follows the store: NOT_SERVING while it does not answer.
        let health = spawn(TaskKind::Service, "health", {
            let cluster = self.cluster.clone();
            let cell = self.probe.health_cell();
            wharf::observability::watch_health(
                "the store answers",
                std::time::Duration::from_millis(crate::observe::HEALTH_INTERVAL_MS),
                move || {
                    let (cluster, cell) = (cluster.clone(), cell.clone());
                    async move { crate::observe::check_store(&cluster, &cell).await }
                },
                reporter,
                &[
                    wharf::pb::v1::connector_admin_server::SERVICE_NAME,
                    wharf::pb::v1::executor_registry_server::SERVICE_NAME,
                ],
                cancel.child_token(),
            )
        });

        // The REST gateway: the same admin core, its own listener, the same shutdown.
        let rest = self.rest.map(|(listener, addr)| {
            let router = crate::rest::Gateway::new(
                crate::admin::Admin::new(self.cluster.clone()),
                crate::admin::guard::Guard::new(self.cluster.clone(), self.auth.clone()),
                self.loggers.clone(),
            )
            .with_leader_forward(rest_forward)
            .router();
            let stop = cancel.clone();
            let tls = self.tls.clone();
            wharf::task::spawn(wharf::task::TaskKind::Service, "rest-gateway", async move {
                let timeout = wharf::http::REQUEST_HEADER_TIMEOUT;
                if let Err(e) =
                    crate::rest::serve(listener, tls, router, timeout, stop.cancelled_owned()).await
                {
                    tracing::error!(%addr, error = %e, "REST gateway failed; the gRPC API still serves");
                }
            })
        });
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
        let _ = health.await;
        if let Some(r) = reloader {
            let _ = r.await;
        }
        if let Some(r) = rest {
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
        let herder = spawn(
            TaskKind::Service,
            "herder",
            run_herder(cluster.clone(), term.child_token()),
        );
        let fin = spawn(
            TaskKind::Service,
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
