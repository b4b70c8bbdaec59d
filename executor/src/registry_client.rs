//! Client of the control plane's `ExecutorRegistry`: registration, heartbeats, status
//! reports, offset commits and reconfiguration requests.
//!
//! Fencing: a heartbeat answered FAILED_PRECONDITION means this epoch was superseded or
//! its lease expired; the executor then stops every instance with
//! `connector_deleted = false` and registers again. A ReportStatus or CommitOffsets
//! refused with FAILED_PRECONDITION (which can also mean a stale task generation)
//! triggers an immediate heartbeat, which decides. While the control plane is
//! unreachable the executor keeps its tasks running and retries.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Mutex as AsyncMutex, Notify, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use wharf::ids::TaskKey;
use wharf::pb::v1 as pb;
use wharf::pb::v1::executor_registry_client::ExecutorRegistryClient;

use crate::host::Host;
use wharf::task::{TaskKind, spawn};

/// Bound on one registry call, in milliseconds.
pub const REGISTRY_RPC_TIMEOUT_MS: u64 = 5_000;

/// Bound on connecting to the control plane, in milliseconds.
pub const REGISTRY_CONNECT_TIMEOUT_MS: u64 = 2_000;

/// Wait before retrying a failed registration or report, in milliseconds.
pub const REGISTRY_RETRY_BACKOFF_MS: u64 = 500;

/// Heartbeat interval used when the control plane does not give one, in milliseconds.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 1_000;

/// Shortest heartbeat interval accepted from the control plane, in milliseconds.
pub const MIN_HEARTBEAT_INTERVAL_MS: u64 = 20;

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

enum Report {
    Task(pb::TaskStatusReport),
    Connector(pb::ConnectorStatusReport),
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
    epoch: AtomicU64,
    reports: mpsc::UnboundedSender<Report>,
    reports_rx: AsyncMutex<Option<mpsc::UnboundedReceiver<Report>>>,
    /// Reports queued and not yet sent or dropped.
    unsent: AtomicUsize,
    /// Asks the heartbeat loop to beat now.
    beat_now: Notify,
}

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
        Ok(Self {
            clients,
            current: AtomicUsize::new(0),
            executor_id,
            advertised,
            plugins,
            epoch: AtomicU64::new(0),
            reports: tx,
            reports_rx: AsyncMutex::new(Some(rx)),
            unsent: AtomicUsize::new(0),
            beat_now: Notify::new(),
        })
    }

    /// Current epoch; 0 while not registered.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
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

    fn queue(&self, report: Report) {
        self.unsent.fetch_add(1, Ordering::SeqCst);
        if self.reports.send(report).is_err() {
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

    /// Asks the control plane to recompute the connector's task configs (fire and forget).
    pub fn request_task_reconfiguration(self: &Arc<Self>, connector: &str, generation: u64) {
        if tokio::runtime::Handle::try_current().is_err() {
            tracing::warn!(
                connector,
                "task reconfiguration asked outside the runtime; ignored"
            );
            return;
        }
        let me = self.clone();
        let connector = connector.to_owned();
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
    /// fires. On a fenced epoch every instance of `host` is stopped with `false`, each
    /// bounded by `fenced_stop_timeout`.
    pub fn run(
        self: &Arc<Self>,
        host: Arc<Host>,
        fenced_stop_timeout: Duration,
        cancel: CancellationToken,
    ) -> Vec<JoinHandle<()>> {
        vec![
            spawn(
                TaskKind::Service,
                "registration and heartbeats",
                self.clone()
                    .heartbeat_loop(host, fenced_stop_timeout, cancel.clone()),
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
        };
        let (used, mut client) = self.client();
        client
            .register_executor(req)
            .await
            .map(tonic::Response::into_inner)
            .inspect_err(|e| self.note_failure(used, e))
    }

    async fn heartbeat_loop(
        self: Arc<Self>,
        host: Arc<Host>,
        fenced_stop_timeout: Duration,
        cancel: CancellationToken,
    ) {
        let backoff = Duration::from_millis(REGISTRY_RETRY_BACKOFF_MS);
        loop {
            let granted = loop {
                let attempt = tokio::select! {
                    () = cancel.cancelled() => return,
                    r = self.register() => r,
                };
                match attempt {
                    Ok(r) => break r,
                    Err(e) => {
                        tracing::warn!(executor = %self.executor_id, error = %wharf::tls::error_chain(&e), "registration failed; retrying");
                        tokio::select! {
                            () = cancel.cancelled() => return,
                            () = tokio::time::sleep(backoff) => {}
                        }
                    }
                }
            };
            self.epoch.store(granted.epoch, Ordering::SeqCst);
            let interval = match u64::from(granted.heartbeat_interval_ms) {
                0 => DEFAULT_HEARTBEAT_INTERVAL_MS,
                ms => ms.max(MIN_HEARTBEAT_INTERVAL_MS),
            };
            tracing::info!(executor = %self.executor_id, epoch = granted.epoch, lease_ms = granted.lease_ms,
                heartbeat_interval_ms = interval, "registered with the control plane");
            loop {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(interval)) => {}
                    () = self.beat_now.notified() => {}
                }
                // What it hosts rides along, so that the control plane corrects a status
                // that lost its instance (issue 15, point 7).
                let (connectors, tasks) = crate::grpc::hosted_wire(&host);
                let req = pb::HeartbeatRequest {
                    executor_id: self.executor_id.clone(),
                    epoch: granted.epoch,
                    reports_hosted: true,
                    connectors,
                    tasks,
                };
                let (used, mut client) = self.client();
                match client.heartbeat(req).await {
                    Ok(_) => {}
                    Err(status) if status.code() == tonic::Code::FailedPrecondition => {
                        tracing::warn!(executor = %self.executor_id, epoch = granted.epoch, reason = %status.message(),
                            "epoch fenced: stopping every instance with connector_deleted=false, then registering again");
                        self.epoch.store(0, Ordering::SeqCst);
                        host.stop_all(fenced_stop_timeout).await;
                        break;
                    }
                    Err(status) => {
                        self.note_failure(used, &status);
                        tracing::warn!(executor = %self.executor_id, error = %status,
                            "heartbeat failed; tasks keep running");
                    }
                }
            }
        }
    }

    async fn report_loop(self: Arc<Self>, cancel: CancellationToken) {
        let Some(mut rx) = self.reports_rx.lock().await.take() else {
            return;
        };
        let backoff = Duration::from_millis(REGISTRY_RETRY_BACKOFF_MS);
        let mut pending: Vec<Report> = Vec::new();
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
            for r in &pending {
                match r {
                    Report::Task(t) => req.tasks.push(t.clone()),
                    Report::Connector(c) => req.connectors.push(c.clone()),
                }
            }
            let n = pending.len();
            let (used, mut client) = self.client();
            let result = client.report_status(req).await;
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
