//! Builds and runs an executor: binds its listener, writes `<data-dir>/listen.addr`,
//! registers with the control plane and serves the `Executor` service until shut down.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use wharf::pb::v1::executor_server::ExecutorServer;
use wharf::sdk::Plugin;

use crate::grpc::ExecutorService;
use crate::host::{Host, StopCause};
use crate::log::{LogConfig, LogError};
use crate::registry_client::{Fence, Registry, RegistryError};
use wharf::task::{TaskKind, spawn};

/// Default bound on the stops run at shutdown (SIGTERM), in milliseconds: the SDK's
/// bound on a plain stop, which the conformance kit reads too.
pub const DEFAULT_GRACEFUL_TIMEOUT_MS: u64 = wharf::sdk::DEFAULT_STOP_TIMEOUT_MS;

/// Default worker threads of the plugin runtime (`--plugin-threads`): how many plugin
/// calls run at the same moment; a plugin call that blocks its thread holds one of them.
pub const DEFAULT_PLUGIN_THREADS: NonZeroUsize = NonZeroUsize::new(32).expect("32 is not 0");

/// Most worker threads `--plugin-threads` accepts.
pub const MAX_PLUGIN_THREADS: usize = 1_024;

/// How long shutdown waits for the last status reports to reach the control plane, in
/// milliseconds.
pub const REPORT_DRAIN_TIMEOUT_MS: u64 = 1_000;

/// File in the data dir holding the executor id generated on first start.
pub const EXECUTOR_ID_FILE: &str = "executor.id";

/// File in the data dir holding the bound address (`IP:PORT`).
pub const LISTEN_ADDR_FILE: &str = "listen.addr";

/// Everything an executor needs to start.
#[derive(Clone)]
pub struct ExecutorConfig {
    /// Address to bind (port 0 picks a free one; see [`RunningExecutor::local_addr`]).
    pub listen: SocketAddr,
    /// URL of the control plane's `ExecutorRegistry`, for example `http://127.0.0.1:7000`.
    pub control_plane: String,
    /// Data dir: `executor.id`, `listen.addr`, the embedded record log.
    pub data_dir: PathBuf,
    /// URL the control plane uses to reach this executor; default `http://<bound address>`.
    pub advertise: Option<String>,
    /// Executor id; default the one kept in `<data-dir>/executor.id` (generated once).
    pub executor_id: Option<String>,
    /// Bound on stopping everything at shutdown; also the default stop timeout.
    pub graceful_timeout: Duration,
    /// Worker threads of the plugin runtime, which runs the plugin calls of every instance
    /// (docs/architecture.md, "Connector SDK").
    pub plugin_threads: NonZeroUsize,
    /// The record log and its backend's settings (`--record-log`); [`ExecutorConfig::new`]
    /// sets the embedded log in `<data_dir>/log` (set it again after changing `data_dir`).
    pub record_log: LogConfig,
    /// Plugins this executor runs.
    pub plugins: Vec<Plugin>,
    /// Custom transforms and predicates connector configs may name beside the built-in
    /// ones (docs/pipeline.md).
    pub transforms: Vec<wharf::sdk::TransformPlugin>,
    /// The converters of a connector that names none (`--key-converter`,
    /// `--value-converter`, `--header-converter`, `--converter-option`; Kafka Connect's
    /// worker `key.converter` and the rest): `ByteArrayConverter` for keys and values and
    /// `SimpleHeaderConverter` for headers by default.
    pub converter_defaults: crate::pipeline::ConverterDefaults,
    /// The plugin processes (`--plugin-processes`) behind the out-of-process plugins among
    /// `plugins`, whose own config checks join ValidateConfig.
    pub plugin_processes: Vec<std::sync::Arc<crate::process::PluginProcess>>,
    /// Plugins whose connector deletion the executor cleans up on the plugin's behalf
    /// (a [`crate::PluginAdapter`] made them deletion-aware, as Debezium's
    /// PostgreSQL connector in the stock executor): advertised as deletion-aware
    /// connectors whatever their class says.
    pub cleaned_by_executor: Vec<String>,
    /// The file plugins' root (`--file-root`), canonical; `None`: no file plugins. The
    /// plugins carry it themselves; this copy is for the start log line.
    pub file_root: Option<PathBuf>,
    /// The config providers that resolve references in connector configs
    /// (`--config-providers`); none by default.
    pub config_providers: crate::providers::ConfigProviders,
    /// Certificate, key and CA: the Executor service speaks TLS and accepts only the
    /// control plane's certificate; the registry client presents this certificate
    /// (docs/security.md).
    pub tls: Option<wharf::tls::TlsFiles>,
    /// Allow a plaintext listener on a non-loopback address (warned at start).
    pub insecure: bool,
    /// Address of the metrics listener (`/metrics`, `/health`, `/ready`; port 0 picks
    /// one, see [`RunningExecutor::metrics_addr`]); `None` for none.
    pub metrics_listen: Option<SocketAddr>,
    /// How the `wharf-executor` binary writes its logs; read by the launcher before the
    /// executor starts (an in-process executor logs through its host's subscriber).
    pub log_format: wharf::telemetry::LogFormat,
    /// OTLP/gRPC endpoint the `wharf-executor` binary exports spans to; read by the
    /// launcher, like `log_format`.
    pub otlp_endpoint: Option<String>,
}

impl ExecutorConfig {
    /// A config with no plugins (set [`ExecutorConfig::plugins`]), the embedded log and
    /// the default timeout.
    pub fn new(
        listen: SocketAddr,
        control_plane: impl Into<String>,
        data_dir: impl Into<PathBuf>,
    ) -> Self {
        let data_dir = data_dir.into();
        Self {
            listen,
            control_plane: control_plane.into(),
            record_log: LogConfig::embedded(&data_dir),
            data_dir,
            advertise: None,
            executor_id: None,
            graceful_timeout: Duration::from_millis(DEFAULT_GRACEFUL_TIMEOUT_MS),
            plugin_threads: DEFAULT_PLUGIN_THREADS,
            plugins: Vec::new(),
            transforms: Vec::new(),
            converter_defaults: crate::pipeline::ConverterDefaults::default(),
            plugin_processes: Vec::new(),
            cleaned_by_executor: Vec::new(),
            file_root: None,
            config_providers: crate::providers::ConfigProviders::none(),
            tls: None,
            insecure: false,
            metrics_listen: None,
            log_format: wharf::telemetry::LogFormat::Text,
            otlp_endpoint: None,
        }
    }
}

/// Why an executor could not start.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The data dir or one of its files could not be used.
    #[error("data dir {path}: {source}")]
    DataDir {
        /// The path involved.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The record log could not be opened.
    #[error("cannot open the record log")]
    RecordLog(#[source] LogError),
    /// The control-plane client could not be built.
    #[error("control plane client")]
    Registry(#[source] RegistryError),
    /// Server reflection could not be set up (a build defect).
    #[error("server reflection: {0}")]
    Reflection(String),
    /// The TLS files did not load, or do not fit this executor.
    #[error("TLS: {0}")]
    Tls(String),
    /// The metrics listener's address could not be bound.
    #[error("cannot listen on {addr} (--metrics-listen)")]
    MetricsBind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The plugin runtime could not be started.
    #[error("cannot start the plugin runtime with {threads} threads")]
    PluginRuntime {
        /// Its worker threads (`--plugin-threads`).
        threads: usize,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The executor id (given, the certificate's, or the one kept in the data dir)
    /// breaks the rule of [`wharf::ids::check_executor_id`].
    #[error("executor id {id:?} from {from} {reason}")]
    BadExecutorId {
        /// The id.
        id: String,
        /// Where it came from: `--executor-id`, the certificate, or the kept file.
        from: String,
        /// The broken part of the rule.
        reason: wharf::ids::InvalidExecutorId,
    },
    /// Another process holds the data dir (see [`crate::data_dir`]).
    #[error(transparent)]
    DataDirLocked(#[from] crate::data_dir::DirLockError),
    /// A non-loopback plaintext listener without `--insecure`.
    #[error(
        "{0} is not a loopback address and no TLS is configured; set --tls-cert/--tls-key/--tls-ca (docs/security.md) or pass --insecure"
    )]
    Insecure(SocketAddr),
}

impl AppError {
    /// The process's exit code for this error: 2 (as for a setting that does not parse,
    /// and as the control plane's) for settings that cannot run together, such as a
    /// plaintext non-loopback listener without `--insecure`; 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            AppError::Insecure(_) => crate::launcher::EXIT_BAD_CONFIG,
            _ => 1,
        }
    }

    /// What the operator can do about a start failure.
    pub fn hint(&self) -> Option<String> {
        match self {
            AppError::Bind { addr, source } if source.kind() == std::io::ErrorKind::AddrInUse => {
                Some(format!(
                    "{addr} is taken (another executor?); pick another --listen (port 0 picks a free one)"
                ))
            }
            AppError::Bind { .. } => Some("check that --listen names an address of this host".into()),
            AppError::MetricsBind { addr, .. } => Some(format!(
                "pick another --metrics-listen than {addr} (port 0 picks a free one), or turn it off with --metrics-listen off"
            )),
            AppError::DataDir { path, .. } => Some(format!(
                "check that {} is writable and not used by another executor, or choose another --data-dir",
                path.display()
            )),
            AppError::DataDirLocked(crate::data_dir::DirLockError::Held { .. }) => Some(
                "another executor runs on this --data-dir: stop it, or give this one its own --data-dir".into(),
            ),
            AppError::RecordLog(_) => Some(
                "with the embedded log (--record-log embedded, the default): another executor may be using this --data-dir (stop it or choose another); with --record-log nats://... (or --nats-url): check that NATS runs with JetStream enabled (nats-server -js) at that URL".into(),
            ),
            AppError::Registry(_) => Some(
                "check --control-plane: a URL like http://127.0.0.1:7000 (https:// needs --tls-cert/--tls-key/--tls-ca)".into(),
            ),
            AppError::PluginRuntime { .. } => Some(
                "lower --plugin-threads, or raise this host's limits on threads (ulimit -u, /proc/sys/kernel/threads-max, pid_max)".into(),
            ),
            AppError::BadExecutorId { .. } => Some(
                "give a valid --executor-id (a kept <data-dir>/executor.id may also be removed: a new id is then generated, and the executor registers as a new one)".into(),
            ),
            AppError::Tls(_) | AppError::Insecure(_) => Some(
                "see docs/security.md (make certificates with `wharf-control-plane certs`)".into(),
            ),
            _ => None,
        }
    }
}

/// Starts executors.
pub struct ExecutorApp;

impl ExecutorApp {
    /// Binds, writes `listen.addr`, opens the record log, starts serving and registering.
    ///
    /// # Errors
    /// [`AppError`] naming the step that failed.
    pub async fn start(config: ExecutorConfig) -> Result<RunningExecutor, AppError> {
        let ExecutorConfig {
            listen,
            control_plane,
            data_dir,
            advertise,
            executor_id,
            graceful_timeout,
            plugin_threads,
            record_log,
            plugins,
            transforms,
            converter_defaults,
            plugin_processes,
            cleaned_by_executor,
            file_root,
            config_providers,
            tls,
            insecure,
            metrics_listen,
            log_format: _,
            otlp_endpoint: _,
        } = config;
        let tls = listener_tls(listen, tls, insecure)?;
        let cert_id = certificate_executor_id(tls.as_ref())?;
        std::fs::create_dir_all(&data_dir).map_err(|source| AppError::DataDir {
            path: data_dir.clone(),
            source,
        })?;
        let executor_id = resolve_executor_id(executor_id, cert_id, &data_dir)?;
        let dir_lock = crate::data_dir::DirLock::acquire(&data_dir, &executor_id)?;
        let (listener, local_addr) =
            wharf::observability::bind(listen)
                .await
                .map_err(|source| AppError::Bind {
                    addr: listen,
                    source,
                })?;
        let metrics = match metrics_listen {
            None => None,
            Some(addr) => Some(
                wharf::observability::bind(addr)
                    .await
                    .map_err(|source| AppError::MetricsBind { addr, source })?,
            ),
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let advertised = advertise.map_or_else(
            || default_advertise(local_addr, scheme),
            |a| with_scheme(&a, scheme),
        );
        let log = crate::log::open(&record_log)
            .await
            .map_err(AppError::RecordLog)?;
        let checked_log = log.clone();
        let plugin_infos = plugins
            .iter()
            .map(|p| {
                crate::process::plugin_path::advertised_info(
                    p,
                    &plugin_processes,
                    cleaned_by_executor.contains(&p.name),
                )
            })
            .collect();
        let registry = Arc::new(
            Registry::with_tls(
                &control_plane,
                executor_id.clone(),
                advertised.clone(),
                plugin_infos,
                wharf::tls::ClientTls::from_option(tls.as_ref()),
            )
            .map_err(AppError::Registry)?
            .with_record_log(record_log.identity())
            .with_transforms(
                transforms
                    .iter()
                    .map(wharf::wire::transform_plugin_info)
                    .collect(),
            ),
        );
        let host = Arc::new(
            Host::new(
                executor_id.clone(),
                plugins,
                registry.clone(),
                log,
                graceful_timeout,
                plugin_threads,
            )
            .map(|host| host.with_plugin_processes(plugin_processes))
            .map_err(|source| AppError::PluginRuntime {
                threads: plugin_threads.get(),
                source,
            })?
            .with_config_providers(config_providers.clone())
            .with_transforms(transforms)
            .with_converter_defaults(converter_defaults.clone()),
        );
        let (router, health) = executor_router(host.clone())?;
        write_listen_addr(&data_dir, local_addr)?;
        let cancel = CancellationToken::new();
        let probe = Arc::new(crate::observe::ExecutorProbe::new(
            host.clone(),
            registry.clone(),
        ));
        let metrics_addr = metrics.as_ref().map(|(_, bound)| *bound);
        let mut loops = vec![
            spawn_health_loop(&registry, health, &cancel),
            spawn_log_check_loop(checked_log, &registry, &cancel),
        ];
        loops.extend(metrics.map(|bound| {
            wharf::observability::spawn_serve(
                TaskKind::Service,
                bound,
                vec![probe.clone()],
                cancel.child_token().cancelled_owned(),
            )
        }));
        loops.extend(tls.as_ref().map(|t| t.spawn_reloader(cancel.child_token())));
        let server = spawn_server(router, listener, tls, cancel.child_token());
        let hosted = host.clone();
        registry.report_hosted(Arc::new(move || crate::grpc::hosted_wire(&hosted)));
        if let Some(fences) = registry.take_fences() {
            loops.push(spawn(
                TaskKind::Service,
                "self-fencing",
                carry_out_fences(fences, host.clone(), graceful_timeout, cancel.child_token()),
            ));
        }
        loops.extend(registry.run(cancel.child_token()));
        tracing::info!(executor = %executor_id, listen = %local_addr, advertised = %advertised, control_plane = %control_plane,
            record_log = %record_log, plugin_threads = plugin_threads.get(),
            file_root = %file_root.as_deref().map_or_else(|| "none (no file plugins)".into(), |p| p.display().to_string()),
            config_providers = %config_providers.describe(),
            default_converters = %converter_defaults.describe(),
            "executor serving");
        Ok(RunningExecutor {
            local_addr,
            metrics_addr,
            probe,
            executor_id,
            host,
            registry,
            graceful_timeout,
            cancel,
            server,
            loops,
            _dir_lock: dir_lock,
        })
    }
}

/// The TLS of the Executor listener on `listen`, loaded; refuses a plaintext listener on
/// a non-loopback address without `insecure` (and warns with it).
///
/// # Errors
/// [`AppError::Insecure`], or [`AppError::Tls`] when the files do not load.
fn listener_tls(
    listen: SocketAddr,
    tls: Option<wharf::tls::TlsFiles>,
    insecure: bool,
) -> Result<Option<Arc<wharf::tls::Tls>>, AppError> {
    match wharf::tls::bind_decision(&listen, tls.is_some(), insecure) {
        wharf::tls::BindDecision::Tls | wharf::tls::BindDecision::PlaintextLoopback => {}
        wharf::tls::BindDecision::PlaintextInsecure => tracing::warn!(
            addr = %listen,
            "--insecure: plaintext listener on a non-loopback address; anyone who reaches it can stop this executor's work"
        ),
        wharf::tls::BindDecision::Refuse => return Err(AppError::Insecure(listen)),
    }
    tls.map(wharf::tls::Tls::load)
        .transpose()
        .map_err(|e| AppError::Tls(e.to_string()))
}

/// The executor id the certificate names, if TLS is on.
///
/// # Errors
/// [`AppError::Tls`] when the certificate names something other than an executor.
fn certificate_executor_id(tls: Option<&Arc<wharf::tls::Tls>>) -> Result<Option<String>, AppError> {
    match tls.map(|t| t.identity()) {
        None => Ok(None),
        Some(wharf::identity::Identity::Executor(id)) => Ok(Some(id)),
        Some(other) => Err(AppError::Tls(format!(
            "--tls-cert names {other}, not an executor (spiffe://wharf/executor/<id>)"
        ))),
    }
}

/// The gRPC router: the Executor service (only the control plane may call it), with
/// reflection and health beside it.
///
/// # Errors
/// [`AppError::Reflection`] (a build defect).
fn executor_router(
    host: Arc<Host>,
) -> Result<
    (
        tonic::transport::server::Router,
        tonic_health::server::HealthReporter,
    ),
    AppError,
> {
    // Each handler makes its call's spans, exported and for the log lines
    // (wharf::trace::DirectSpan::server).
    let router = tonic::transport::Server::builder().add_service(ExecutorServer::with_interceptor(
        ExecutorService::new(host),
        crate::peer_auth::only_control_plane,
    ));
    wharf::server::add_common_services(router, &[wharf::pb::v1::executor_server::SERVICE_NAME])
        .map_err(|e| AppError::Reflection(e.to_string()))
}

/// grpc.health.v1 follows the registration: NOT_SERVING until registered, and while
/// fenced (docs/observability.md, "Health").
fn spawn_health_loop(
    registry: &Arc<Registry>,
    health: tonic_health::server::HealthReporter,
    cancel: &CancellationToken,
) -> JoinHandle<()> {
    let registry = registry.clone();
    spawn(
        TaskKind::Service,
        "health",
        wharf::observability::watch_health(
            "registered",
            Duration::from_millis(crate::observe::HEALTH_INTERVAL_MS),
            move || std::future::ready(crate::observe::registry_health(&registry)),
            health,
            &[wharf::pb::v1::executor_server::SERVICE_NAME],
            cancel.child_token(),
        ),
    )
}

/// Checks the record log every [`crate::log::LOG_CHECK_INTERVAL_MS`] and keeps the
/// outcome in the registry: health names a log that does not answer (a Kafka broker
/// that is unreachable), and the heartbeats carry the Kafka cluster id.
fn spawn_log_check_loop(
    log: Arc<dyn crate::log::RecordLog>,
    registry: &Arc<Registry>,
    cancel: &CancellationToken,
) -> JoinHandle<()> {
    let registry = registry.clone();
    let cancel = cancel.child_token();
    spawn(TaskKind::Service, "record log check", async move {
        let interval = Duration::from_millis(crate::log::LOG_CHECK_INTERVAL_MS);
        loop {
            let check = tokio::select! {
                () = cancel.cancelled() => return,
                c = log.check() => c,
            };
            registry.set_log_check(check);
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(interval) => {}
            }
        }
    })
}

/// Serves `router` on `listener` until `cancel`.
fn spawn_server(
    router: tonic::transport::server::Router,
    listener: tokio::net::TcpListener,
    tls: Option<Arc<wharf::tls::Tls>>,
    cancel: CancellationToken,
) -> JoinHandle<()> {
    spawn(TaskKind::Service, "executor grpc server", async move {
        // TCP_NODELAY: without it a second small answer on a connection waits for the
        // peer's delayed ACK (about 40 ms on Linux), which each StopTask answer of a
        // fan-out would pay.
        let incoming = wharf::tls::serve_incoming(listener, tls);
        if let Err(e) = router
            .serve_with_incoming_shutdown(incoming, cancel.cancelled_owned())
            .await
        {
            tracing::error!(error = %e, "executor gRPC server failed");
        }
    })
}

/// A started executor.
pub struct RunningExecutor {
    local_addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    probe: Arc<crate::observe::ExecutorProbe>,
    executor_id: String,
    host: Arc<Host>,
    registry: Arc<Registry>,
    graceful_timeout: Duration,
    cancel: CancellationToken,
    server: JoinHandle<()>,
    loops: Vec<JoinHandle<()>>,
    /// Held until this value is dropped (after shutdown).
    _dir_lock: crate::data_dir::DirLock,
}

impl RunningExecutor {
    /// The address the gRPC server bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// This executor's id.
    pub fn executor_id(&self) -> &str {
        &self.executor_id
    }

    /// The address the metrics listener bound, when `metrics_listen` was set.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// What this executor shows on a metrics listener (record counts, instances, health
    /// from its registration); dev mode serves it beside the control plane's.
    pub fn probe(&self) -> Arc<dyn wharf::observability::Probe> {
        self.probe.clone()
    }

    /// Graceful shutdown: stops every instance with `connector_deleted = false` within the
    /// graceful timeout, sends the last status reports, then stops serving.
    pub async fn shutdown(self) {
        tracing::info!(executor = %self.executor_id, graceful_timeout_ms = self.graceful_timeout.as_millis() as u64,
            "shutting down: stopping every instance with connector_deleted=false");
        self.host.close();
        self.host
            .stop_all(StopCause::Shutdown, self.graceful_timeout)
            .await;
        self.registry
            .drain_reports(Duration::from_millis(REPORT_DRAIN_TIMEOUT_MS))
            .await;
        self.cancel.cancel();
        let _ = self.server.await;
        for l in self.loops {
            let _ = l.await;
        }
        tracing::info!(executor = %self.executor_id, "executor stopped");
    }
}

/// Wires the registry client's fences to the host: every instance is stopped with
/// `connector_deleted = false` (each bounded by `stop_timeout`) before the client
/// registers again (docs/contract.md, "Executor self-fencing").
async fn carry_out_fences(
    mut fences: tokio::sync::mpsc::UnboundedReceiver<Fence>,
    host: Arc<Host>,
    stop_timeout: Duration,
    cancel: CancellationToken,
) {
    loop {
        let fence = tokio::select! {
            () = cancel.cancelled() => return,
            f = fences.recv() => match f {
                Some(f) => f,
                None => return,
            },
        };
        tracing::warn!(executor = %host.executor_id(), epoch = fence.epoch, reason = %fence.reason,
            "fenced: stopping every instance with connector_deleted=false");
        host.stop_all(StopCause::Fenced, stop_timeout).await;
        let _ = fence.done.send(());
    }
}

fn with_scheme(addr: &str, scheme: &str) -> String {
    if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("{scheme}://{addr}")
    }
}

fn default_advertise(local: SocketAddr, scheme: &str) -> String {
    let ip = if local.ip().is_unspecified() {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        local.ip()
    };
    format!("{scheme}://{}", SocketAddr::new(ip, local.port()))
}

/// The id `config` will register with, as [`ExecutorApp`]'s start decides it:
/// `--executor-id`, else the certificate's, else the one kept in `<data-dir>/executor.id`
/// (made now on a first start, as the start would). For the trace resource
/// (`service.instance.id`), set up before the app starts; `None` when it cannot be read
/// (the start then says why).
pub(crate) fn planned_executor_id(config: &ExecutorConfig) -> Option<String> {
    // The certificate is read only when no id was given (it then decides).
    let cert_id = match (&config.executor_id, &config.tls) {
        (None, Some(files)) => match wharf::tls::Tls::load(files.clone()).ok()?.identity() {
            wharf::identity::Identity::Executor(id) => Some(id),
            _ => return None,
        },
        _ => None,
    };
    // The start makes the directory as well.
    std::fs::create_dir_all(&config.data_dir).ok()?;
    resolve_executor_id(config.executor_id.clone(), cert_id, &config.data_dir).ok()
}

/// The id of an executor given `--executor-id` (`given`) and its certificate's executor
/// id (`cert`): the certificate's, which is what the control plane checks; else the
/// given one; else the one kept in the existing directory `data_dir` (made on a first
/// start).
///
/// # Errors
/// [`AppError::Tls`] when both are set and differ; [`AppError::DataDir`] when the kept
/// id cannot be read or written.
fn resolve_executor_id(
    given: Option<String>,
    cert: Option<String>,
    data_dir: &Path,
) -> Result<String, AppError> {
    let (id, from) = match (given, cert) {
        (Some(id), Some(cert)) if id != cert => {
            return Err(AppError::Tls(format!(
                "--executor-id {id:?} but the certificate is executor {cert:?}"
            )));
        }
        (Some(id), _) => (id, "--executor-id".to_owned()),
        (None, Some(id)) => (id, "the --tls-cert certificate".to_owned()),
        (None, None) => (
            stored_executor_id(data_dir)?,
            data_dir.join(EXECUTOR_ID_FILE).display().to_string(),
        ),
    };
    // Checked here as well as in the settings: an embedding program may set the id
    // directly, and a kept file or a certificate may predate the rule. The control plane
    // would refuse the registration, over and over.
    match wharf::ids::check_executor_id(&id) {
        Ok(()) => Ok(id),
        Err(reason) => Err(AppError::BadExecutorId { id, from, reason }),
    }
}

/// The id kept in `<data-dir>/executor.id`, generated on first start.
fn stored_executor_id(data_dir: &Path) -> Result<String, AppError> {
    let path = data_dir.join(EXECUTOR_ID_FILE);
    match std::fs::read_to_string(&path) {
        // Kept as written (surrounding whitespace, a trailing newline, ignored); an empty
        // file is a bad id like any other, not a reason to become another executor.
        Ok(id) => return Ok(id.trim().to_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(AppError::DataDir { path, source }),
    }
    let id = format!("executor-{}", uuid::Uuid::new_v4());
    write_atomically(&path, &id)?;
    Ok(id)
}

/// Writes `IP:PORT` to `<data-dir>/listen.addr` (temp file, then rename).
fn write_listen_addr(data_dir: &Path, addr: SocketAddr) -> Result<(), AppError> {
    write_atomically(&data_dir.join(LISTEN_ADDR_FILE), &addr.to_string())
}

fn write_atomically(path: &Path, text: &str) -> Result<(), AppError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|source| AppError::DataDir {
            path: path.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plaintext_non_loopback_listener_exits_with_the_bad_settings_code() {
        let e =
            listener_tls("0.0.0.0:7070".parse().expect("addr"), None, false).expect_err("refused");
        assert!(matches!(e, AppError::Insecure(_)), "{e}");
        assert_eq!(e.exit_code(), crate::launcher::EXIT_BAD_CONFIG);
        assert!(e.to_string().contains("--insecure"), "{e}");
    }

    #[test]
    fn a_plaintext_listener_is_allowed_on_loopback_or_with_insecure() {
        assert!(listener_tls("127.0.0.1:7070".parse().expect("addr"), None, false).is_ok());
        assert!(listener_tls("[::1]:7070".parse().expect("addr"), None, false).is_ok());
        assert!(listener_tls("0.0.0.0:7070".parse().expect("addr"), None, true).is_ok());
    }

    #[test]
    fn other_start_failures_exit_with_1() {
        let e = AppError::Reflection("x".into());
        assert_eq!(e.exit_code(), 1);
    }

    #[test]
    fn the_planned_id_is_the_given_one_else_the_one_kept_in_the_data_dir() {
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("data");
        let mut config = ExecutorConfig::new(
            "127.0.0.1:0".parse().expect("addr"),
            "http://127.0.0.1:7000",
            &data,
        );
        config.executor_id = Some("exec-7".into());
        assert_eq!(planned_executor_id(&config).as_deref(), Some("exec-7"));
        // Without one: made on the first start (the data dir too), the same afterwards,
        // and what the start itself reads.
        config.executor_id = None;
        let first = planned_executor_id(&config).expect("an id");
        assert!(first.starts_with("executor-"), "{first}");
        assert_eq!(planned_executor_id(&config), Some(first.clone()));
        assert_eq!(stored_executor_id(&data).expect("kept"), first);
    }

    #[test]
    fn a_certificates_id_wins_and_must_match_a_given_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cert = || Some("exec-cert".to_owned());
        assert_eq!(
            resolve_executor_id(None, cert(), dir.path()).expect("the certificate's"),
            "exec-cert"
        );
        assert_eq!(
            resolve_executor_id(Some("exec-cert".into()), cert(), dir.path()).expect("equal"),
            "exec-cert"
        );
        let err = resolve_executor_id(Some("exec-other".into()), cert(), dir.path())
            .expect_err("they differ");
        assert!(err.to_string().contains("exec-other"), "{err}");
        // Neither made an id file.
        assert!(!dir.path().join(EXECUTOR_ID_FILE).exists());
    }

    #[test]
    fn a_valid_id_kept_from_before_is_used_again() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join(EXECUTOR_ID_FILE), "exec-kept\n").expect("write");
        assert_eq!(
            resolve_executor_id(None, None, dir.path()).expect("kept"),
            "exec-kept"
        );
    }

    #[test]
    fn a_kept_id_breaking_the_rule_is_refused_naming_its_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join(EXECUTOR_ID_FILE);
        std::fs::write(&file, "bad id/x").expect("write");
        let err = resolve_executor_id(None, None, dir.path()).expect_err("bad kept id");
        let text = err.to_string();
        assert!(
            matches!(err, AppError::BadExecutorId { .. })
                && text.contains("\"bad id/x\"")
                && text.contains(&file.display().to_string())
                && text.contains("A-Z a-z 0-9 . _ -"),
            "{text}"
        );
    }

    #[test]
    fn a_given_or_certificate_id_breaking_the_rule_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        for (given, cert) in [
            (Some("a b".to_owned()), None),
            (None, Some("a:b".to_owned())),
        ] {
            let err = resolve_executor_id(given, cert, dir.path()).expect_err("bad id");
            assert!(matches!(err, AppError::BadExecutorId { .. }), "{err}");
        }
        assert!(!dir.path().join(EXECUTOR_ID_FILE).exists());
    }
}
