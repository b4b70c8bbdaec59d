//! Calls to executors' `Executor` service, with a channel cache per executor and a typed
//! error that separates "not reachable" (retry) from "refused" (act on the code).
//!
//! The herder and the finalizer call it with domain types ([`ConnectorStart`],
//! [`TaskStart`], [`StopCall`]) and get domain answers ([`Started`], [`Stopped`]); the
//! wire requests are built here and nowhere else.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tonic::transport::Channel;
use wharf::pb::v1 as pb;
use wharf::pb::v1::executor_client::ExecutorClient;
use wharf::sdk::ConfigMap;

use crate::model::{DeletionMode, ExecutorRecord};

/// How long connecting to an executor may take, in milliseconds.
pub const CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Upper bound on a start or ComputeTaskConfigs call, in milliseconds.
pub const START_CALL_TIMEOUT_MS: u64 = 15_000;
/// Time allowed on top of a stop's own timeout for the round trip, in milliseconds.
pub const STOP_CALL_SLACK_MS: u64 = 5_000;
/// Upper bound on the identity probe of a newly registered executor, in milliseconds
/// (the registration waits for it).
pub const PROBE_TIMEOUT_MS: u64 = 2_000;

/// Upper bound on a ValidateConfig call, in milliseconds. An operator's validate, create
/// or config put waits for it; past it the plugin's own checks are skipped (the answer
/// says so, and they still run at start), so a slow or stuck executor delays the
/// operator's call by at most this much rather than failing it.
pub const VALIDATE_CALL_TIMEOUT_MS: u64 = 5_000;
/// Bound on reading or moving a sink connector's offsets on an executor's record log, in
/// milliseconds (a JetStream log makes a few requests per topic).
pub const SINK_OFFSETS_CALL_TIMEOUT_MS: u64 = 15_000;

/// Why a call to an executor did not return a response.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Not reachable or too slow: the outcome is unknown; retry later.
    #[error("executor {address} unreachable: {message}")]
    Unreachable {
        /// Executor address.
        address: String,
        /// Transport or deadline message.
        message: String,
    },
    /// The executor answered with an error status.
    #[error("executor {address} refused with {code:?}: {message}")]
    Refused {
        /// Executor address.
        address: String,
        /// gRPC code (NOT_FOUND: not hosted there; FAILED_PRECONDITION: fenced).
        code: tonic::Code,
        /// Its message.
        message: String,
    },
}

impl CallError {
    /// The refusal code, if the executor answered.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            CallError::Unreachable { .. } => None,
            CallError::Refused { code, .. } => Some(*code),
        }
    }
}

/// Channel cache: one lazily connected channel per executor (id and address). Over
/// `https://` each channel requires the server's certificate to name the executor id it
/// was made for ([`wharf::tls::channel_expecting`]): a process that registered someone
/// else's address gets no call answered in its name.
#[derive(Default)]
pub struct ExecutorClients {
    channels: Mutex<HashMap<(String, String), Channel>>,
    /// TLS for `https://` executor addresses (set once at start).
    tls: std::sync::OnceLock<wharf::tls::ClientTls>,
    /// Each executor's deletion token, from its registration or its heartbeats: what a
    /// stop with `connector_deleted = true` carries ([`wharf::identity::DELETION_TOKEN_HEADER`]).
    /// Kept in memory only: after a restart the next heartbeat brings it back.
    deletion_tokens: Mutex<HashMap<String, String>>,
}

fn classify(address: &str, status: tonic::Status) -> CallError {
    match status.code() {
        tonic::Code::Unavailable
        | tonic::Code::DeadlineExceeded
        | tonic::Code::Cancelled
        | tonic::Code::Unknown => CallError::Unreachable {
            address: address.to_owned(),
            // The cause (a refused connection, a server identity mismatch) is in the
            // status's sources, not in its message.
            message: wharf::tls::error_chain(&status),
        },
        code => CallError::Refused {
            address: address.to_owned(),
            code,
            message: status.message().to_owned(),
        },
    }
}

impl ExecutorClients {
    /// Uses `tls` for every channel made from now on (called once, at start).
    pub fn use_tls(&self, tls: wharf::tls::ClientTls) {
        let _ = self.tls.set(tls);
    }

    /// Keeps `token` as executor `executor`'s deletion token (an empty one, from an older
    /// executor, changes nothing).
    pub fn set_deletion_token(&self, executor: &str, token: &str) {
        if token.is_empty() {
            return;
        }
        let mut map = self
            .deletion_tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.get(executor).is_none_or(|t| t != token) {
            map.insert(executor.to_owned(), token.to_owned());
        }
    }

    /// `r` with executor `exec`'s deletion token in its metadata, when the stop it carries
    /// has `connector_deleted = true`.
    ///
    /// # Errors
    /// [`CallError::Unreachable`] when that token is not known yet (a control plane that
    /// just started learns it from the executor's next heartbeat or registration): the
    /// executor would refuse the stop, so it is not sent, and the finalizer tries again
    /// without counting an attempt.
    fn with_deletion_token<T>(
        &self,
        mut r: tonic::Request<T>,
        exec: &ExecutorRecord,
        connector_deleted: bool,
    ) -> Result<tonic::Request<T>, CallError> {
        if !connector_deleted {
            return Ok(r);
        }
        let token = self
            .deletion_tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&exec.id)
            .cloned();
        match token.and_then(|t| tonic::metadata::MetadataValue::try_from(t).ok()) {
            Some(v) => {
                r.metadata_mut()
                    .insert(wharf::identity::DELETION_TOKEN_HEADER, v);
                Ok(r)
            }
            None => Err(CallError::Unreachable {
                address: exec.address.clone(),
                message: "its deletion token is not known yet (it comes with the executor's next heartbeat or registration)".to_owned(),
            }),
        }
    }

    fn client(&self, exec: &ExecutorRecord) -> Result<ExecutorClient<Channel>, CallError> {
        let address = exec.address.as_str();
        let key = (exec.id.clone(), exec.address.clone());
        let mut map = self
            .channels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(ch) = map.get(&key) {
            return Ok(ExecutorClient::new(ch.clone()));
        }
        let tls = self.tls.get().cloned().unwrap_or_default();
        let endpoint = wharf::tls::check_url(address, &tls)
            .map_err(|e| CallError::Unreachable {
                address: address.to_owned(),
                message: format!("bad address: {e}"),
            })?
            .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS));
        let ch = wharf::tls::channel_expecting(
            endpoint,
            tls,
            wharf::identity::Identity::Executor(exec.id.clone()),
        );
        map.insert(key, ch.clone());
        Ok(ExecutorClient::new(ch))
    }

    fn request<T>(msg: T, timeout_ms: u64) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        r.set_timeout(Duration::from_millis(timeout_ms));
        // The executor's span of this call joins the caller's trace (a no-op without export).
        wharf::trace::inject(r.metadata_mut());
        r
    }

    /// StartConnector.
    async fn start_connector(
        &self,
        exec: &ExecutorRecord,
        req: pb::StartConnectorRequest,
    ) -> Result<pb::StartConnectorResponse, CallError> {
        self.client(exec)?
            .start_connector(Self::request(req, START_CALL_TIMEOUT_MS))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| classify(&exec.address, s))
    }

    /// StopConnector, bounded by the request's timeout plus slack.
    async fn stop_connector(
        &self,
        exec: &ExecutorRecord,
        req: pb::ExecutorStopConnectorRequest,
    ) -> Result<pb::ExecutorStopConnectorResponse, CallError> {
        let t = stop_call_timeout_ms(req.timeout_ms);
        let deleted = req.connector_deleted;
        self.client(exec)?
            .stop_connector(self.with_deletion_token(Self::request(req, t), exec, deleted)?)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| classify(&exec.address, s))
    }

    /// ComputeTaskConfigs.
    async fn compute_task_configs(
        &self,
        exec: &ExecutorRecord,
        req: pb::ComputeTaskConfigsRequest,
    ) -> Result<pb::ComputeTaskConfigsResponse, CallError> {
        self.client(exec)?
            .compute_task_configs(Self::request(req, START_CALL_TIMEOUT_MS))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| classify(&exec.address, s))
    }

    /// StartTask.
    async fn start_task(
        &self,
        exec: &ExecutorRecord,
        req: pb::StartTaskRequest,
    ) -> Result<pb::StartTaskResponse, CallError> {
        self.client(exec)?
            .start_task(Self::request(req, START_CALL_TIMEOUT_MS))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| classify(&exec.address, s))
    }

    /// StopTask, bounded by the request's timeout plus slack.
    async fn stop_task(
        &self,
        exec: &ExecutorRecord,
        req: pb::StopTaskRequest,
    ) -> Result<pb::StopTaskResponse, CallError> {
        let t = stop_call_timeout_ms(req.timeout_ms);
        let deleted = req.connector_deleted;
        self.client(exec)?
            .stop_task(self.with_deletion_token(Self::request(req, t), exec, deleted)?)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| classify(&exec.address, s))
    }
}

/// The deadline of a stop call: the stop's own timeout (at least a start call's) plus
/// slack for the answer to travel.
fn stop_call_timeout_ms(stop_timeout_ms: u32) -> u64 {
    u64::from(stop_timeout_ms).max(START_CALL_TIMEOUT_MS) + STOP_CALL_SLACK_MS
}

/// A connector instance to start.
#[derive(Debug, Clone)]
pub struct ConnectorStart {
    /// Connector name.
    pub connector: String,
    /// Its complete config (secrets included).
    pub config: ConfigMap,
    /// Generation of the assignment.
    pub generation: u64,
    /// Start it paused (its tasks are kept stopped).
    pub paused: bool,
    /// Started only to run its cleanup (a deletion's re-hosted step).
    pub cleanup_only: bool,
    /// Incarnation of the connector.
    pub incarnation: String,
}

/// A task to start.
#[derive(Debug, Clone)]
pub struct TaskStart {
    /// Connector name.
    pub connector: String,
    /// Task index.
    pub task: u32,
    /// The connector's config.
    pub connector_config: ConfigMap,
    /// This task's config.
    pub task_config: ConfigMap,
    /// Generation of the assignment.
    pub generation: u64,
    /// Start it paused.
    pub paused: bool,
    /// Started only to run its cleanup.
    pub cleanup_only: bool,
    /// Committed source offsets, (partition JSON, offset JSON).
    pub offsets: Vec<(String, String)>,
    /// Incarnation of the connector.
    pub incarnation: String,
    /// The partitions a sink task reads (`plan::partitions`); `None` for a cleanup-only
    /// start, which reads nothing.
    pub partition_share: Option<crate::plan::partitions::PartitionShare>,
}

/// How an executor answered a start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// The instance runs (or is paused as asked).
    Running,
    /// The plugin's start failed; the instance stays on the executor, FAILED.
    Failed(String),
}

/// A stop of one instance (`task == None`: the connector instance).
#[derive(Debug, Clone)]
pub struct StopCall {
    /// Connector name.
    pub connector: String,
    /// Task index; `None` for the connector instance.
    pub task: Option<u32>,
    /// Generation of the instance to stop.
    pub generation: u64,
    /// The deletion this stop is part of, in its mode; `None` for every other stop (a
    /// pause, a restart, a move, a forced deletion's leftovers). Sent as the wire's
    /// `connector_deleted` (KIP-883): true only for a deletion that cleans up.
    pub deletion: Option<DeletionMode>,
    /// How long the plugin's stop may take, in ms (0: the executor's default).
    pub timeout_ms: u32,
    /// Incarnation the stop was decided for (the executor refuses another one's stop;
    /// empty skips the check).
    pub incarnation: String,
    /// The executor epoch the stop was decided under, when not the addressed record's
    /// current one: a stop retried after the executor registered again, which only a
    /// stop it already claimed answers (from its record); `None` sends the current one.
    pub executor_epoch: Option<u64>,
    /// A task's deletion stop: the topics it created through topic creation that the
    /// ledger still holds ([`crate::model::topics::created_topics_of`]).
    pub created_topics: Vec<String>,
}

impl StopCall {
    /// The wire's `connector_deleted` flag of this stop.
    pub fn connector_deleted(&self) -> bool {
        self.deletion.is_some_and(DeletionMode::connector_deleted)
    }
}

/// How the plugin's stop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// It returned without error.
    Stopped,
    /// It returned an error.
    Failed,
    /// It overran the timeout; the executor abandoned the instance.
    TimedOut,
}

/// How an executor answered a stop.
#[derive(Debug, Clone)]
pub struct Stopped {
    /// How the plugin's stop ended.
    pub outcome: StopOutcome,
    /// The flag the instance was actually stopped with (an earlier stop may have won).
    pub connector_deleted: bool,
    /// The plugin's error, if any.
    pub error: String,
    /// The stop timed out and the executor still holds the plugin's call (abandoned).
    pub abandoned: bool,
}

fn wire_config(c: &ConfigMap) -> std::collections::HashMap<String, String> {
    c.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn target(paused: bool) -> i32 {
    if paused {
        pb::TargetState::Paused as i32
    } else {
        pb::TargetState::Started as i32
    }
}

fn started(state: i32, error: String) -> Started {
    if state == pb::State::Failed as i32 {
        Started::Failed(error)
    } else {
        Started::Running
    }
}

fn stopped(outcome: i32, connector_deleted: bool, error: String, abandoned: bool) -> Stopped {
    let outcome = match pb::StopOutcome::try_from(outcome) {
        Ok(pb::StopOutcome::Stopped) => StopOutcome::Stopped,
        Ok(pb::StopOutcome::TimedOut) => StopOutcome::TimedOut,
        Ok(pb::StopOutcome::Failed | pb::StopOutcome::Unspecified) | Err(_) => StopOutcome::Failed,
    };
    Stopped {
        outcome,
        connector_deleted,
        error,
        abandoned,
    }
}

impl ExecutorClients {
    /// Starts a connector instance on `exec` (at its current epoch).
    ///
    /// # Errors
    /// [`CallError`]: unreachable, or refused (FAILED_PRECONDITION: another epoch).
    pub async fn start_connector_on(
        &self,
        exec: &ExecutorRecord,
        s: &ConnectorStart,
    ) -> Result<Started, CallError> {
        self.start_connector(
            exec,
            pb::StartConnectorRequest {
                connector: s.connector.clone(),
                config: wire_config(&s.config),
                generation: s.generation,
                target_state: target(s.paused),
                cleanup_only: s.cleanup_only,
                incarnation: s.incarnation.clone(),
                executor_epoch: exec.epoch,
            },
        )
        .await
        .map(|r| started(r.state, r.error))
    }

    /// Starts a task on `exec` (at its current epoch).
    ///
    /// # Errors
    /// As [`ExecutorClients::start_connector_on`].
    pub async fn start_task_on(
        &self,
        exec: &ExecutorRecord,
        s: &TaskStart,
    ) -> Result<Started, CallError> {
        self.start_task(
            exec,
            pb::StartTaskRequest {
                task: Some(pb::TaskId {
                    connector: s.connector.clone(),
                    task: s.task,
                }),
                connector_config: wire_config(&s.connector_config),
                task_config: wire_config(&s.task_config),
                generation: s.generation,
                target_state: target(s.paused),
                cleanup_only: s.cleanup_only,
                offsets: s
                    .offsets
                    .iter()
                    .map(|(partition, offset)| pb::SourceOffset {
                        partition: partition.clone(),
                        offset: offset.clone(),
                    })
                    .collect(),
                incarnation: s.incarnation.clone(),
                executor_epoch: exec.epoch,
                partition_share: s.partition_share.map(|share| pb::PartitionShare {
                    index: share.index,
                    count: share.count,
                }),
            },
        )
        .await
        .map(|r| started(r.state, r.error))
    }

    /// Stops one instance on `exec`.
    ///
    /// # Errors
    /// [`CallError`]: unreachable, or refused (NOT_FOUND: not hosted there;
    /// FAILED_PRECONDITION: a newer generation or epoch).
    pub async fn stop_on(&self, exec: &ExecutorRecord, s: &StopCall) -> Result<Stopped, CallError> {
        match s.task {
            Some(task) => self
                .stop_task(
                    exec,
                    pb::StopTaskRequest {
                        task: Some(pb::TaskId {
                            connector: s.connector.clone(),
                            task,
                        }),
                        connector_deleted: s.connector_deleted(),
                        generation: s.generation,
                        timeout_ms: s.timeout_ms,
                        incarnation: s.incarnation.clone(),
                        executor_epoch: s.executor_epoch.unwrap_or(exec.epoch),
                        created_topics: s.created_topics.clone(),
                    },
                )
                .await
                .map(|r| stopped(r.outcome, r.connector_deleted, r.error, r.abandoned)),
            None => self
                .stop_connector(
                    exec,
                    pb::ExecutorStopConnectorRequest {
                        connector: s.connector.clone(),
                        connector_deleted: s.connector_deleted(),
                        generation: s.generation,
                        timeout_ms: s.timeout_ms,
                        incarnation: s.incarnation.clone(),
                        executor_epoch: s.executor_epoch.unwrap_or(exec.epoch),
                    },
                )
                .await
                .map(|r| stopped(r.outcome, r.connector_deleted, r.error, r.abandoned)),
        }
    }

    /// Asks the process at `exec`'s address who it is (ListAssignments): over TLS the
    /// channel already refused a certificate that is not `exec`'s; in any case the answer
    /// must name `exec.id` (without TLS, another executor registered under this address
    /// answers with its own id). See docs/security.md, "The dialed identity".
    ///
    /// # Errors
    /// [`CallError`]; a process answering as another executor is refused with
    /// PERMISSION_DENIED naming both ids.
    pub async fn probe_on(&self, exec: &ExecutorRecord) -> Result<(), CallError> {
        let r = self
            .client(exec)?
            .list_assignments(Self::request(
                pb::ListAssignmentsRequest::default(),
                PROBE_TIMEOUT_MS,
            ))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| classify(&exec.address, s))?;
        if r.executor_id == exec.id {
            return Ok(());
        }
        Err(CallError::Refused {
            address: exec.address.clone(),
            code: tonic::Code::PermissionDenied,
            message: format!(
                "the process at {} answers as executor {:?}, not {:?}: the address registered for {:?} belongs to another executor",
                exec.address, r.executor_id, exec.id, exec.id
            ),
        })
    }

    /// Runs plugin `plugin`'s full config checks (validators included) on `config` at
    /// `exec`, bounded by [`VALIDATE_CALL_TIMEOUT_MS`] (then [`CallError::Unreachable`]
    /// with a DEADLINE_EXCEEDED message): `(key, messages)` for each key with an error,
    /// in the plugin definition's order; empty when the config is valid.
    ///
    /// # Errors
    /// [`CallError`]; NOT_FOUND when `exec` does not host `plugin`, UNIMPLEMENTED from an
    /// executor that predates ValidateConfig.
    pub async fn validate_config_on(
        &self,
        exec: &ExecutorRecord,
        plugin: &str,
        config: &ConfigMap,
    ) -> Result<Validated, CallError> {
        let req = pb::ValidateConfigRequest {
            plugin: plugin.to_owned(),
            config: wire_config(config),
        };
        self.client(exec)?
            .validate_config(Self::request(req, VALIDATE_CALL_TIMEOUT_MS))
            .await
            .map(|r| {
                let r = r.into_inner();
                Validated {
                    keys: r.keys.into_iter().map(|k| (k.name, k.errors)).collect(),
                    declared: r
                        .declared_resources
                        .iter()
                        .map(|d| wharf::wire::resource_from(d, wharf::sdk::Origin::Created))
                        .collect(),
                    declared_error: r.declared_resources_error,
                }
            })
            .map_err(|s| classify(&exec.address, s))
    }

    /// A sink connector's consumer positions on the record log `exec` uses (KIP-875).
    ///
    /// # Errors
    /// [`CallError`]; FAILED_PRECONDITION when that log cannot read them, UNIMPLEMENTED
    /// from an executor that predates GetSinkOffsets.
    pub async fn sink_offsets_on(
        &self,
        exec: &ExecutorRecord,
        connector: &str,
    ) -> Result<Vec<pb::SinkOffset>, CallError> {
        let req = pb::GetSinkOffsetsRequest {
            connector: connector.to_owned(),
        };
        self.client(exec)?
            .get_sink_offsets(Self::request(req, SINK_OFFSETS_CALL_TIMEOUT_MS))
            .await
            .map(|r| r.into_inner().offsets)
            .map_err(|s| classify(&exec.address, s))
    }

    /// Moves or resets a sink connector's consumer positions on `exec`'s record log.
    ///
    /// # Errors
    /// [`CallError`]; INVALID_ARGUMENT for a partition or offset the log lacks,
    /// FAILED_PRECONDITION when a task still runs there or the log cannot move them.
    pub async fn alter_sink_offsets_on(
        &self,
        exec: &ExecutorRecord,
        req: pb::AlterSinkOffsetsRequest,
    ) -> Result<(), CallError> {
        self.client(exec)?
            .alter_sink_offsets(Self::request(req, SINK_OFFSETS_CALL_TIMEOUT_MS))
            .await
            .map(|_| ())
            .map_err(|s| classify(&exec.address, s))
    }

    /// Asks the connector instance at `generation` on `exec` for at most `max_tasks`
    /// task configs.
    ///
    /// # Errors
    /// [`CallError`].
    pub async fn task_configs_on(
        &self,
        exec: &ExecutorRecord,
        connector: &str,
        max_tasks: u32,
        generation: u64,
    ) -> Result<Vec<ConfigMap>, CallError> {
        self.compute_task_configs(
            exec,
            pb::ComputeTaskConfigsRequest {
                connector: connector.to_owned(),
                max_tasks,
                generation,
            },
        )
        .await
        .map(|r| {
            r.task_configs
                .into_iter()
                .map(|t| t.config.into_iter().collect())
                .collect()
        })
    }
}

/// An executor's answer to ValidateConfig.
#[derive(Debug, Clone, Default)]
pub struct Validated {
    /// `(key, messages)` for each key with an error.
    pub keys: Vec<(String, Vec<String>)>,
    /// The resources the plugin declared it would provision (valid configs only).
    pub declared: Vec<wharf::sdk::Resource>,
    /// Why the plugin could not declare them; empty when it could.
    pub declared_error: String,
}
