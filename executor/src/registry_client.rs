//! Client of the control plane's `ExecutorRegistry`: registration, heartbeats, status
//! reports, offset commits and reconfiguration requests.
//!
//! Lease and fencing (docs/contract.md, "Executor self-fencing"): the client knows its
//! lease from its last successful heartbeat (or the registration), measured from when
//! that call was *sent*, so a slow answer errs on the safe side. Once the lease may have
//! expired (no successful heartbeat in time, or a heartbeat answered FAILED_PRECONDITION
//! because the epoch was superseded or fenced) the client fences itself: the epoch is
//! cleared, a [`Fence`] is published for the app to stop every instance with
//! `connector_deleted = false`, and only once that is done does it register again. Until
//! then [`Registry::lease_standing`] says so, and the host refuses destructive stops.
//! A ReportStatus or CommitOffsets refused with FAILED_PRECONDITION (which can also mean
//! a stale task generation) triggers an immediate heartbeat, which decides.
//!
//! This module does not know the host: the app (`app.rs`) wires the published fences to
//! it, and the host asks the registry for the epoch and the lease.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Mutex as AsyncMutex, Notify, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use wharf::ids::TaskKey;
use wharf::pb::v1 as pb;
use wharf::pb::v1::executor_registry_client::ExecutorRegistryClient;

use wharf::task::{TaskKind, spawn};

/// Bound on one registry call, in milliseconds.
pub const REGISTRY_RPC_TIMEOUT_MS: u64 = 5_000;

/// Bound on connecting to the control plane, in milliseconds.
pub const REGISTRY_CONNECT_TIMEOUT_MS: u64 = 2_000;

/// Wait before retrying a failed registration or report, in milliseconds.
pub const REGISTRY_RETRY_BACKOFF_MS: u64 = 500;

/// Wait before retrying a registration the control plane refused for a setting of this
/// executor (FAILED_PRECONDITION: a record log that differs from the cluster's), in
/// milliseconds: the refusal stands until the cluster changes, so it is retried (and
/// logged) less often than a failure to reach the control plane.
pub const REGISTRY_REFUSED_BACKOFF_MS: u64 = 5_000;

/// How long to wait before retrying a registration that failed with `code`. Pure.
pub fn registration_backoff(code: tonic::Code) -> Duration {
    match code {
        tonic::Code::FailedPrecondition => Duration::from_millis(REGISTRY_REFUSED_BACKOFF_MS),
        _ => Duration::from_millis(REGISTRY_RETRY_BACKOFF_MS),
    }
}

/// Heartbeat interval used when the control plane does not give one, in milliseconds.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 1_000;

/// Shortest heartbeat interval accepted from the control plane, in milliseconds.
pub const MIN_HEARTBEAT_INTERVAL_MS: u64 = 20;

/// First wait before a heartbeat sent again after one failed, in milliseconds; it doubles
/// with each further failure up to the heartbeat interval.
pub const HEARTBEAT_RETRY_MIN_MS: u64 = 100;

/// Wait before the next heartbeat, in milliseconds: the interval after a success
/// (`failures` = 0); after a failure that did not refuse the epoch (the control plane
/// restarting, a connection reset) from [`HEARTBEAT_RETRY_MIN_MS`], doubling, at most the
/// interval, so that a short control-plane outage does not eat the lease: with a full
/// interval after a failure, a control plane restarted within half a 3 s lease still found
/// every executor fenced (bench/NOTES.md).
pub fn next_heartbeat_ms(interval_ms: u64, failures: u32) -> u64 {
    match failures {
        0 => interval_ms,
        n => HEARTBEAT_RETRY_MIN_MS
            .saturating_mul(1 << (n - 1).min(16))
            .min(interval_ms),
    }
}

/// Errors talking to the control plane.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The control-plane URL does not parse.
    #[error("invalid control-plane URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// No epoch yet (not registered, or re-registering after a fence).
    #[error("not registered with the control plane")]
    NotRegistered,
    /// The call failed or was refused.
    #[error("control plane call failed: {0}")]
    Call(#[source] tonic::Status),
}

/// Where this executor stands with its lease, as far as it can tell by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseStanding {
    /// Not registered (before the first registration, or fenced and registering again).
    Unregistered,
    /// Registered and the lease certainly still runs (or the control plane set none).
    Held,
    /// Registered, but the lease may have run out: the executor is about to fence itself.
    MayHaveExpired,
}

/// Decides the lease standing from the epoch (0 = none), the end of the lease known from
/// the last successful heartbeat (`None` when the control plane gave no lease) and `now`.
pub fn lease_standing(epoch: u64, valid_until: Option<Instant>, now: Instant) -> LeaseStanding {
    match (epoch, valid_until) {
        (0, _) => LeaseStanding::Unregistered,
        (_, None) => LeaseStanding::Held,
        (_, Some(until)) if now < until => LeaseStanding::Held,
        (_, Some(_)) => LeaseStanding::MayHaveExpired,
    }
}

/// End of a lease of `lease_ms` granted by an answer to a call sent at `sent`; `None` for
/// 0 (a control plane that states no lease).
pub fn lease_end(sent: Instant, lease_ms: u32) -> Option<Instant> {
    (lease_ms > 0).then(|| sent + Duration::from_millis(u64::from(lease_ms)))
}

/// Published when the executor fenced itself: whoever wires the host (app.rs) stops every
/// instance with `connector_deleted = false`, then answers on `done`; only then does the
/// client register again.
pub struct Fence {
    /// The epoch given up.
    pub epoch: u64,
    /// Why (the control plane's refusal, or the lease running out).
    pub reason: String,
    /// Answered once every instance was stopped.
    pub done: oneshot::Sender<()>,
}

enum Report {
    Task(pb::TaskStatusReport),
    Connector(pb::ConnectorStatusReport),
    Topics(pb::ActiveTopicsReport),
}

/// Registry client shared by the host and the background loops.
pub struct Registry {
    /// One client per control-plane URL, in the order given: replicas behind one etcd
    /// (every replica serves or forwards registry calls to the leader).
    clients: Vec<(String, ExecutorRegistryClient<Channel>)>,
    /// Index into `clients` of the replica in use; moves on when it is unreachable.
    current: AtomicUsize,
    executor_id: String,
    advertised: String,
    plugins: Vec<pb::PluginInfo>,
    /// The record log's identity, sent at registration (empty: not reported).
    record_log: String,
    /// The custom transforms and predicates, sent at registration.
    transforms: Vec<pb::TransformPluginInfo>,
    epoch: AtomicU64,
    /// The deletion token the control plane gave the current registration: what a stop
    /// with `connector_deleted = true` must carry ([`Registry::admits_deletion`]). Empty
    /// before the first registration, and from a control plane that gives none.
    deletion_token: Mutex<String>,
    /// End of the lease, from the last successful heartbeat or registration.
    lease_until: Mutex<Option<Instant>>,
    fences: mpsc::UnboundedSender<Fence>,
    fences_rx: Mutex<Option<mpsc::UnboundedReceiver<Fence>>>,
    /// Reports with the trace context they were made in (a stop's: the report continues
    /// the trace of the call that stopped the instance).
    reports: mpsc::UnboundedSender<(Report, wharf::trace::TraceContext)>,
    reports_rx: AsyncMutex<Option<mpsc::UnboundedReceiver<(Report, wharf::trace::TraceContext)>>>,
    /// Reports queued and not yet sent or dropped.
    unsent: AtomicUsize,
    /// Asks the heartbeat loop to beat now.
    beat_now: Notify,
    /// The executor's own runtime, set by [`Registry::run`]: requests a plugin makes from
    /// its own thread are sent from here, so that they outlive that thread.
    service: std::sync::OnceLock<tokio::runtime::Handle>,
    /// What the executor hosts, for the heartbeat; set by the app ([`Registry::report_hosted`]).
    hosted: std::sync::OnceLock<HostedSource>,
    /// Set by the first registration: tells "starting" from "fenced" in health.
    registered_once: std::sync::atomic::AtomicBool,
    /// The last check of the record log ([`Registry::set_log_check`]): its problem shows
    /// in health, its Kafka cluster id rides on the heartbeats.
    log_check: Mutex<crate::log::LogCheck>,
}

/// Lists what the executor hosts, on the wire (connector instances, tasks).
pub type HostedSource =
    Arc<dyn Fn() -> (Vec<pb::HostedConnector>, Vec<pb::HostedTask>) + Send + Sync>;

impl Registry {
    /// A client of the control plane at `urls`: one URL, or several separated by commas
    /// (replicas of one control plane on etcd). Calls go to one replica at a time; when
    /// it is unreachable (UNAVAILABLE, or no answer in time) the next call goes to the
    /// next URL, round the list. Connections are made lazily.
    ///
    /// # Errors
    /// [`RegistryError::InvalidUrl`] for an entry that does not parse, or an empty list.
    pub fn new(
        urls: &str,
        executor_id: String,
        advertised: String,
        plugins: Vec<pb::PluginInfo>,
    ) -> Result<Self, RegistryError> {
        Self::with_tls(
            urls,
            executor_id,
            advertised,
            plugins,
            wharf::tls::ClientTls::None,
        )
    }

    /// Reports `identity` ([`crate::log::LogConfig::identity`]) as this executor's record
    /// log at every registration; the control plane refuses a log that differs from the
    /// live executors' (the refusal is logged and the registration retried).
    #[must_use]
    pub fn with_record_log(mut self, identity: String) -> Self {
        self.record_log = identity;
        self
    }

    /// The custom transforms and predicates to register with the plugins.
    #[must_use]
    pub fn with_transforms(mut self, transforms: Vec<pb::TransformPluginInfo>) -> Self {
        self.transforms = transforms;
        self
    }

    /// As [`Registry::new`], speaking TLS to `https://` URLs with `tls` (an `https://`
    /// URL without TLS is [`RegistryError::InvalidUrl`]: never silently plaintext).
    ///
    /// # Errors
    /// As [`Registry::new`].
    pub fn with_tls(
        urls: &str,
        executor_id: String,
        advertised: String,
        plugins: Vec<pb::PluginInfo>,
        tls: wharf::tls::ClientTls,
    ) -> Result<Self, RegistryError> {
        let mut clients = Vec::new();
        for url in urls.split(',').map(str::trim).filter(|u| !u.is_empty()) {
            let endpoint = wharf::tls::check_url(url, &tls)
                .map_err(|e| RegistryError::InvalidUrl {
                    url: url.to_owned(),
                    reason: e.to_string(),
                })?
                .connect_timeout(Duration::from_millis(REGISTRY_CONNECT_TIMEOUT_MS))
                .timeout(Duration::from_millis(REGISTRY_RPC_TIMEOUT_MS));
            clients.push((
                url.to_owned(),
                ExecutorRegistryClient::new(wharf::tls::channel(endpoint, tls.clone())),
            ));
        }
        if clients.is_empty() {
            return Err(RegistryError::InvalidUrl {
                url: urls.to_owned(),
                reason: "no URL given".into(),
            });
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let (fences, fences_rx) = mpsc::unbounded_channel();
        Ok(Self {
            clients,
            current: AtomicUsize::new(0),
            executor_id,
            advertised,
            plugins,
            record_log: String::new(),
            transforms: Vec::new(),
            epoch: AtomicU64::new(0),
            deletion_token: Mutex::new(String::new()),
            lease_until: Mutex::new(None),
            fences,
            fences_rx: Mutex::new(Some(fences_rx)),
            reports: tx,
            reports_rx: AsyncMutex::new(Some(rx)),
            unsent: AtomicUsize::new(0),
            beat_now: Notify::new(),
            service: std::sync::OnceLock::new(),
            hosted: std::sync::OnceLock::new(),
            registered_once: std::sync::atomic::AtomicBool::new(false),
            log_check: Mutex::default(),
        })
    }

    /// Current epoch; 0 while not registered.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// True when a stop with `connector_deleted = true` carrying `given` may run: `given`
    /// is the deletion token of this executor's current registration (compared in
    /// constant time), or the control plane gave none (it predates deletion tokens).
    /// Before the first registration nothing is hosted, and nothing is admitted.
    pub fn admits_deletion(&self, given: &str) -> bool {
        if self.epoch() == 0 {
            return false;
        }
        let expected = lock(&self.deletion_token);
        expected.is_empty() || wharf::identity::token_matches(&expected, given)
    }

    /// Makes every heartbeat carry what `source` lists, so that the control plane corrects
    /// a status whose instance is gone from this executor; the first call wins.
    pub fn report_hosted(&self, source: HostedSource) {
        let _ = self.hosted.set(source);
    }

    /// Where this executor stands with its lease now.
    pub fn lease_standing(&self) -> LeaseStanding {
        lease_standing(self.epoch(), *lock(&self.lease_until), Instant::now())
    }

    /// Keeps the outcome of the latest record-log check; a change of its problem is
    /// logged (a WARN when the log stops answering, INFO when it answers again).
    pub fn set_log_check(&self, check: crate::log::LogCheck) {
        let mut last = lock(&self.log_check);
        match (&last.problem, &check.problem) {
            (None, Some(problem)) => {
                tracing::warn!(executor = %self.executor_id, problem = %problem, "the record log does not answer");
            }
            (Some(_), None) => {
                tracing::info!(executor = %self.executor_id, "the record log answers again");
            }
            (None, None) | (Some(_), Some(_)) => {}
        }
        *last = check;
    }

    /// Why the record log could not serve at its latest check; `None` when it answered.
    pub fn log_problem(&self) -> Option<String> {
        lock(&self.log_check).problem.clone()
    }

    /// True once this client registered at least once (it may have been fenced since).
    pub fn registered_once(&self) -> bool {
        self.registered_once.load(Ordering::SeqCst)
    }

    /// The fences this client publishes; `None` after the first call (one consumer).
    pub fn take_fences(&self) -> Option<mpsc::UnboundedReceiver<Fence>> {
        lock(&self.fences_rx).take()
    }

    /// Asks for a heartbeat now (for example when a destructive stop found the lease
    /// possibly expired: the heartbeat loop then fences at once).
    pub fn beat_now(&self) {
        self.beat_now.notify_one();
    }

    fn set_lease(&self, epoch: u64, until: Option<Instant>) {
        // Lease first: the epoch becomes visible only with a lease that belongs to it.
        *lock(&self.lease_until) = until;
        self.epoch.store(epoch, Ordering::SeqCst);
        self.registered_once.store(true, Ordering::SeqCst);
    }

    /// Gives up `epoch`: clears it, publishes a [`Fence`] and waits until the instances
    /// were stopped (or nobody wires fences, or `cancel` fired).
    async fn fence(&self, epoch: u64, reason: String, cancel: &CancellationToken) {
        tracing::warn!(executor = %self.executor_id, epoch, reason = %reason,
            "fencing myself: stopping every instance with connector_deleted=false, then registering again");
        crate::counters::fenced();
        self.epoch.store(0, Ordering::SeqCst);
        *lock(&self.lease_until) = None;
        let (done, stopped) = oneshot::channel();
        if self
            .fences
            .send(Fence {
                epoch,
                reason,
                done,
            })
            .is_ok()
        {
            tokio::select! {
                () = cancel.cancelled() => {}
                _ = stopped => {}
            }
        }
    }

    /// Queues a task state change for ReportStatus.
    pub fn report_task(&self, task: &TaskKey, generation: u64, state: pb::State, error: String) {
        self.queue(Report::Task(pb::TaskStatusReport {
            task: Some(pb::TaskId {
                connector: task.connector.clone(),
                task: task.task,
            }),
            generation,
            state: state as i32,
            error,
        }));
    }

    /// Queues a connector instance state change for ReportStatus.
    pub fn report_connector(
        &self,
        connector: &str,
        generation: u64,
        state: pb::State,
        error: String,
    ) {
        self.queue(Report::Connector(pb::ConnectorStatusReport {
            connector: connector.to_owned(),
            generation,
            state: state as i32,
            error,
        }));
    }

    /// Queues topics a task of `connector` used (KIP-558 active topics) for ReportStatus.
    pub fn report_active_topics(&self, connector: &str, topics: Vec<String>) {
        self.queue(Report::Topics(pb::ActiveTopicsReport {
            connector: connector.to_owned(),
            topics,
        }));
    }

    fn queue(&self, report: Report) {
        self.unsent.fetch_add(1, Ordering::SeqCst);
        if self
            .reports
            .send((report, wharf::trace::TraceContext::current()))
            .is_err()
        {
            self.unsent.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Commits a task's source offsets (after the record log acknowledged the records).
    ///
    /// # Errors
    /// NotRegistered, or the call's status.
    pub async fn commit_offsets(
        &self,
        task: &TaskKey,
        generation: u64,
        offsets: Vec<pb::SourceOffset>,
    ) -> Result<(), RegistryError> {
        let epoch = self.epoch();
        if epoch == 0 {
            return Err(RegistryError::NotRegistered);
        }
        let req = pb::CommitOffsetsRequest {
            executor_id: self.executor_id.clone(),
            epoch,
            task: Some(pb::TaskId {
                connector: task.connector.clone(),
                task: task.task,
            }),
            generation,
            offsets,
        };
        let (used, mut client) = self.client();
        match client.commit_offsets(req).await {
            Ok(_) => Ok(()),
            Err(status) => {
                self.note_failure(used, &status);
                if status.code() == tonic::Code::FailedPrecondition {
                    self.beat_now.notify_one();
                }
                Err(RegistryError::Call(status))
            }
        }
    }

    /// Records ledger changes of one instance (`task` `None`: the connector instance) at
    /// `generation`, for `incarnation`; returns once the control plane stored them. Runs
    /// on the service runtime even when called from a plugin's thread.
    ///
    /// # Errors
    /// NotRegistered, or the call's status (FAILED_PRECONDITION when another live
    /// connector holds the resource, or the instance is fenced).
    pub async fn record_resources(
        self: &Arc<Self>,
        connector: &str,
        task: Option<u32>,
        generation: u64,
        incarnation: &str,
        changes: Vec<pb::ResourceLedgerChange>,
    ) -> Result<(), RegistryError> {
        let epoch = self.epoch();
        if epoch == 0 {
            return Err(RegistryError::NotRegistered);
        }
        let req = pb::RecordResourcesRequest {
            executor_id: self.executor_id.clone(),
            epoch,
            connector: connector.to_owned(),
            task,
            generation,
            incarnation: incarnation.to_owned(),
            changes,
        };
        let me = self.clone();
        let call = async move {
            let (used, mut client) = me.client();
            match client.record_resources(req).await {
                Ok(_) => Ok(()),
                Err(status) => {
                    me.note_failure(used, &status);
                    Err(RegistryError::Call(status))
                }
            }
        };
        match self.service.get() {
            Some(rt) => rt.spawn(call).await.unwrap_or_else(|e| {
                Err(RegistryError::Call(tonic::Status::internal(e.to_string())))
            }),
            None => call.await,
        }
    }

    /// Asks the control plane to recompute the connector's task configs (fire and forget).
    pub fn request_task_reconfiguration(self: &Arc<Self>, connector: &str, generation: u64) {
        let Some(runtime) = self
            .service
            .get()
            .cloned()
            .or_else(|| tokio::runtime::Handle::try_current().ok())
        else {
            tracing::warn!(
                connector,
                "task reconfiguration asked outside the runtime; ignored"
            );
            return;
        };
        let me = self.clone();
        let connector = connector.to_owned();
        // On the service runtime even when asked from a plugin thread.
        let _entered = runtime.enter();
        spawn(
            TaskKind::Detached,
            "task reconfiguration request",
            async move {
                let req = pb::RequestTaskReconfigurationRequest {
                    executor_id: me.executor_id.clone(),
                    epoch: me.epoch(),
                    connector: connector.clone(),
                    generation,
                };
                let (used, mut client) = me.client();
                if let Err(e) = client.request_task_reconfiguration(req).await {
                    me.note_failure(used, &e);
                    tracing::warn!(connector = %connector, error = %e, "task reconfiguration request failed");
                }
            },
        );
    }

    /// Starts the registration/heartbeat loop and the report loop; both end when `cancel`
    /// fires. Fences are published to [`Registry::take_fences`].
    pub fn run(self: &Arc<Self>, cancel: CancellationToken) -> Vec<JoinHandle<()>> {
        let _ = self.service.set(tokio::runtime::Handle::current());
        vec![
            spawn(
                TaskKind::Service,
                "registration and heartbeats",
                self.clone().heartbeat_loop(cancel.clone()),
            ),
            spawn(
                TaskKind::Service,
                "status reports",
                self.clone().report_loop(cancel),
            ),
        ]
    }

    /// The client of the replica in use and its index.
    fn client(&self) -> (usize, ExecutorRegistryClient<Channel>) {
        let i = self.current.load(Ordering::SeqCst) % self.clients.len();
        (i, self.clients[i].1.clone())
    }

    /// After a failed call on replica `used`: moves on to the next URL when that replica
    /// did not answer (refusals such as FAILED_PRECONDITION are answers and stay put).
    fn note_failure(&self, used: usize, status: &tonic::Status) {
        let unreachable = matches!(
            status.code(),
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
        );
        if !unreachable || self.clients.len() < 2 {
            return;
        }
        let next = (used + 1) % self.clients.len();
        // Several calls fail together: only the first moves the index.
        if self
            .current
            .compare_exchange(used, next, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            tracing::warn!(from = %self.clients[used].0, to = %self.clients[next].0, error = %status.message(),
                "control plane unreachable; trying the next control-plane URL");
        }
    }

    /// Waits until every queued report was sent (or dropped), at most `within`.
    pub async fn drain_reports(&self, within: Duration) {
        let _ = tokio::time::timeout(within, async {
            while self.unsent.load(Ordering::SeqCst) > 0 {
                tokio::time::sleep(Duration::from_millis(MIN_HEARTBEAT_INTERVAL_MS)).await;
            }
        })
        .await;
    }

    async fn register(&self) -> Result<pb::RegisterExecutorResponse, tonic::Status> {
        let req = pb::RegisterExecutorRequest {
            executor_id: self.executor_id.clone(),
            advertised_address: self.advertised.clone(),
            plugins: self.plugins.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            record_log: self.record_log.clone(),
            transforms: self.transforms.clone(),
        };
        let (used, mut client) = self.client();
        client
            .register_executor(req)
            .await
            .map(tonic::Response::into_inner)
            .inspect_err(|e| self.note_failure(used, e))
    }

    async fn heartbeat_loop(self: Arc<Self>, cancel: CancellationToken) {
        loop {
            let (granted, sent) = loop {
                let sent = Instant::now();
                let attempt = tokio::select! {
                    () = cancel.cancelled() => return,
                    r = self.register() => r,
                };
                match attempt {
                    Ok(r) => {
                        lock(&self.deletion_token).clone_from(&r.deletion_token);
                        break (r, sent);
                    }
                    Err(e) => {
                        let wait = registration_backoff(e.code());
                        tracing::warn!(executor = %self.executor_id, error = %wharf::tls::error_chain(&e),
                            retry_in_ms = wait.as_millis() as u64, "registration failed; retrying");
                        tokio::select! {
                            () = cancel.cancelled() => return,
                            () = tokio::time::sleep(wait) => {}
                        }
                    }
                }
            };
            let epoch = granted.epoch;
            self.set_lease(epoch, lease_end(sent, granted.lease_ms));
            let interval = match u64::from(granted.heartbeat_interval_ms) {
                0 => DEFAULT_HEARTBEAT_INTERVAL_MS,
                ms => ms.max(MIN_HEARTBEAT_INTERVAL_MS),
            };
            tracing::info!(executor = %self.executor_id, epoch, lease_ms = granted.lease_ms,
                heartbeat_interval_ms = interval, "registered with the control plane");
            let mut failures = 0;
            let reason = loop {
                let until = *lock(&self.lease_until);
                let wait = next_heartbeat_ms(interval, failures);
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = sleep_until_some(until) => break "lease ran out without a successful heartbeat".to_owned(),
                    () = tokio::time::sleep(Duration::from_millis(wait)) => {}
                    () = self.beat_now.notified() => {}
                }
                // What it hosts rides along, so that the control plane corrects a status
                // whose instance is gone from this executor.
                let hosted = self.hosted.get().map(|source| source());
                let reports_hosted = hosted.is_some();
                let (connectors, tasks) = hosted.unwrap_or_default();
                let req = pb::HeartbeatRequest {
                    executor_id: self.executor_id.clone(),
                    epoch,
                    reports_hosted,
                    connectors,
                    tasks,
                    deletion_token: lock(&self.deletion_token).clone(),
                    record_log_cluster_id: lock(&self.log_check)
                        .cluster_id
                        .clone()
                        .unwrap_or_default(),
                };
                let (used, mut client) = self.client();
                let sent = Instant::now();
                // The answer counts only if it comes while the lease still runs.
                let answer = tokio::select! {
                    () = cancel.cancelled() => return,
                    () = sleep_until_some(until) => break "lease ran out while a heartbeat was pending".to_owned(),
                    r = client.heartbeat(req) => r,
                };
                match answer {
                    Ok(r) => {
                        let lease_ms = match r.into_inner().lease_ms {
                            0 => granted.lease_ms,
                            ms => ms,
                        };
                        *lock(&self.lease_until) = lease_end(sent, lease_ms);
                        failures = 0;
                    }
                    Err(status) if status.code() == tonic::Code::FailedPrecondition => {
                        break format!("heartbeat refused: {}", status.message());
                    }
                    Err(status) => {
                        self.note_failure(used, &status);
                        failures = failures.saturating_add(1);
                        tracing::warn!(executor = %self.executor_id, error = %status,
                            retry_in_ms = next_heartbeat_ms(interval, failures),
                            "heartbeat failed; tasks keep running while the lease lasts");
                    }
                }
            };
            self.fence(epoch, reason, &cancel).await;
        }
    }

    async fn report_loop(self: Arc<Self>, cancel: CancellationToken) {
        let Some(mut rx) = self.reports_rx.lock().await.take() else {
            return;
        };
        let backoff = Duration::from_millis(REGISTRY_RETRY_BACKOFF_MS);
        let mut pending: Vec<(Report, wharf::trace::TraceContext)> = Vec::new();
        loop {
            if pending.is_empty() {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    r = rx.recv() => match r {
                        Some(r) => pending.push(r),
                        None => return,
                    },
                }
            }
            while let Ok(r) = rx.try_recv() {
                pending.push(r);
            }
            let epoch = self.epoch();
            if epoch == 0 {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(backoff) => continue,
                }
            }
            let mut req = pb::ReportStatusRequest {
                executor_id: self.executor_id.clone(),
                epoch,
                ..Default::default()
            };
            for (r, _) in &pending {
                match r {
                    Report::Task(t) => req.tasks.push(t.clone()),
                    Report::Connector(c) => req.connectors.push(c.clone()),
                    Report::Topics(t) => req.active_topics.push(t.clone()),
                }
            }
            let n = pending.len();
            // In the trace of the first report that has one (a stop's), so that the
            // control plane's ReportStatus span joins it. Without one it is a periodic
            // call (its ReportStatus span is not exported either): DEBUG, no OTLP work.
            let exported = match pending.iter().find(|(_, cx)| cx.is_sampled()) {
                Some((_, cx)) => wharf::trace::DirectSpan::started(
                    cx,
                    wharf::trace::SpanBuilder::from_name("report status")
                        .with_attributes([wharf::trace::KeyValue::new("reports", n as i64)]),
                    tracing::info_span!(
                        "report status",
                        reports = n,
                        trace_id = tracing::field::Empty
                    ),
                ),
                None => wharf::trace::DirectSpan::untraced(tracing::debug_span!(
                    "report status",
                    reports = n
                )),
            };
            let mut request = tonic::Request::new(req);
            exported.context().inject(request.metadata_mut());
            let (used, mut client) = self.client();
            let result = exported.around(client.report_status(request)).await;
            if let Err(status) = &result {
                self.note_failure(used, status);
            }
            match result {
                Ok(_) => {}
                Err(status)
                    if matches!(
                        status.code(),
                        tonic::Code::Unavailable
                            | tonic::Code::DeadlineExceeded
                            | tonic::Code::Unknown
                            | tonic::Code::Cancelled
                    ) =>
                {
                    tracing::warn!(error = %status, "status report failed; retrying");
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(backoff) => continue,
                    }
                }
                Err(status) => {
                    if status.code() == tonic::Code::FailedPrecondition {
                        self.beat_now.notify_one();
                    }
                    tracing::warn!(error = %status, reports = n, "status reports refused; dropped");
                }
            }
            pending.clear();
            self.unsent.fetch_sub(n, Ordering::SeqCst);
        }
    }
}

/// Locks a std mutex, recovering from poisoning (every update is one field write).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Sleeps until `at`, or forever when `None`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_registration_is_retried_after_the_longer_wait() {
        assert_eq!(
            registration_backoff(tonic::Code::FailedPrecondition),
            Duration::from_millis(REGISTRY_REFUSED_BACKOFF_MS)
        );
    }

    #[test]
    fn an_unreachable_control_plane_is_retried_after_the_short_wait() {
        assert_eq!(
            registration_backoff(tonic::Code::Unavailable),
            Duration::from_millis(REGISTRY_RETRY_BACKOFF_MS)
        );
    }

    #[test]
    fn after_a_successful_heartbeat_the_next_comes_after_the_interval() {
        assert_eq!(next_heartbeat_ms(1_000, 0), 1_000);
    }

    #[test]
    fn after_a_failed_heartbeat_the_next_comes_soon_and_backs_off() {
        assert_eq!(next_heartbeat_ms(1_000, 1), HEARTBEAT_RETRY_MIN_MS);
        assert_eq!(next_heartbeat_ms(1_000, 2), 2 * HEARTBEAT_RETRY_MIN_MS);
        assert_eq!(next_heartbeat_ms(1_000, 3), 4 * HEARTBEAT_RETRY_MIN_MS);
    }

    #[test]
    fn retries_never_wait_longer_than_the_interval() {
        assert_eq!(next_heartbeat_ms(1_000, 5), 1_000);
        assert_eq!(next_heartbeat_ms(1_000, u32::MAX), 1_000);
        assert_eq!(next_heartbeat_ms(50, 1), 50);
    }

    #[test]
    fn without_an_epoch_the_executor_is_unregistered_whatever_the_lease() {
        let now = Instant::now();
        assert_eq!(lease_standing(0, None, now), LeaseStanding::Unregistered);
        assert_eq!(
            lease_standing(0, Some(now + Duration::from_secs(5)), now),
            LeaseStanding::Unregistered
        );
    }

    #[test]
    fn a_lease_that_still_runs_is_held() {
        let now = Instant::now();
        assert_eq!(
            lease_standing(7, Some(now + Duration::from_millis(1)), now),
            LeaseStanding::Held
        );
    }

    #[test]
    fn a_control_plane_without_leases_leaves_the_lease_held() {
        assert_eq!(lease_standing(7, None, Instant::now()), LeaseStanding::Held);
    }

    #[test]
    fn at_its_end_the_lease_may_have_expired() {
        let now = Instant::now();
        assert_eq!(
            lease_standing(7, Some(now), now),
            LeaseStanding::MayHaveExpired
        );
        assert_eq!(
            lease_standing(7, Some(now), now + Duration::from_millis(1)),
            LeaseStanding::MayHaveExpired
        );
    }

    #[test]
    fn the_lease_is_measured_from_when_the_call_was_sent() {
        let sent = Instant::now();
        assert_eq!(
            lease_end(sent, 2_000),
            Some(sent + Duration::from_millis(2_000))
        );
        assert_eq!(lease_end(sent, 0), None);
    }
}
