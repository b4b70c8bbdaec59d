//! The `Executor` gRPC service: converts wire requests into host calls, validating at the
//! edge, and maps host errors to statuses in one place.

use std::collections::BTreeMap;
use std::sync::Arc;

use tonic::{Request, Response, Status};
use wharf::ids::{ConnectorName, TaskKey};
use wharf::pb::v1 as pb;
use wharf::trace::DirectSpan;

use crate::host::{
    Assignment, Host, HostError, InstanceState, StartConnector, StartTask, StopCause, StopOutcome,
    StopRequest, StopResult,
};
use crate::registry_client::LeaseStanding;

/// The `wharf.v1.Executor` service over a [`Host`].
pub struct ExecutorService {
    host: Arc<Host>,
}

impl ExecutorService {
    /// A service answering for `host`.
    pub fn new(host: Arc<Host>) -> Self {
        Self { host }
    }
}

impl From<HostError> for Status {
    fn from(e: HostError) -> Self {
        if let Some(reason) = e.refusal_reason() {
            crate::counters::refused(reason);
        }
        let msg = e.to_string();
        match e {
            HostError::InvalidArgument { .. } => Status::invalid_argument(msg),
            HostError::UnknownPlugin(_)
            | HostError::StaleGeneration { .. }
            | HostError::EpochMismatch { .. }
            | HostError::GenerationStopped { .. }
            | HostError::StaleIncarnation { .. }
            | HostError::NeverAssigned { .. }
            | HostError::LeaseMayHaveExpired { .. }
            | HostError::NotRunning { .. } => Status::failed_precondition(msg),
            HostError::PluginRuntime { .. } => Status::resource_exhausted(msg),
            HostError::NotFromControlPlane { .. } => Status::permission_denied(msg),
            HostError::NotHosted(_) => Status::not_found(msg),
            HostError::ShuttingDown => Status::unavailable(msg),
            HostError::TaskConfigsFailed { .. } => Status::internal(msg),
        }
    }
}

/// A record log's refusal as the status the control plane maps back (docs/rest.md): a
/// bad partition or offset INVALID_ARGUMENT, what the backend cannot do
/// FAILED_PRECONDITION, everything else UNAVAILABLE.
fn log_status(e: crate::log::LogError) -> Status {
    use crate::log::LogError;
    let msg = e.to_string();
    match e {
        LogError::InvalidConfig(reason) => Status::invalid_argument(reason),
        LogError::Unsupported(_) => Status::failed_precondition(msg),
        LogError::Unavailable(_)
        | LogError::Storage(_)
        | LogError::Corrupt(_)
        | LogError::ConsumerDeleted(_) => Status::unavailable(msg),
    }
}

fn invalid(field: &str, reason: impl Into<String>) -> HostError {
    HostError::InvalidArgument {
        field: field.to_owned(),
        reason: reason.into(),
    }
}

fn connector_name(name: &str, field: &str) -> Result<String, HostError> {
    ConnectorName::parse(name)
        .map(|n| n.as_str().to_owned())
        .map_err(|e| invalid(field, e.to_string()))
}

fn task_key(task: Option<pb::TaskId>) -> Result<TaskKey, HostError> {
    let task = task.ok_or_else(|| invalid("task", "missing"))?;
    Ok(TaskKey {
        connector: connector_name(&task.connector, "task.connector")?,
        task: task.task,
    })
}

/// True for PAUSED; STOPPED is refused (a stopped connector has no instances).
fn paused(target_state: i32) -> Result<bool, HostError> {
    match pb::TargetState::try_from(target_state) {
        Ok(pb::TargetState::Unspecified | pb::TargetState::Started) => Ok(false),
        Ok(pb::TargetState::Paused) => Ok(true),
        Ok(pb::TargetState::Stopped) => Err(invalid("target_state", "STOPPED is never started")),
        Err(_) => Err(invalid(
            "target_state",
            format!("unknown value {target_state}"),
        )),
    }
}

fn offsets(
    offsets: Vec<pb::SourceOffset>,
) -> Result<BTreeMap<String, serde_json::Value>, HostError> {
    offsets
        .into_iter()
        .enumerate()
        .map(|(i, o)| {
            let partition: serde_json::Value = serde_json::from_str(&o.partition).map_err(|e| {
                invalid(&format!("offsets[{i}].partition"), format!("not JSON: {e}"))
            })?;
            let offset: serde_json::Value = serde_json::from_str(&o.offset)
                .map_err(|e| invalid(&format!("offsets[{i}].offset"), format!("not JSON: {e}")))?;
            Ok((partition.to_string(), offset))
        })
        .collect()
}

/// The deletion token a stop request carries in its metadata (empty when none).
fn deletion_token(metadata: &tonic::metadata::MetadataMap) -> String {
    metadata
        .get(wharf::identity::DELETION_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// A sink task's partition share from the wire; absent stays `None`.
fn partition_share(
    share: Option<pb::PartitionShare>,
) -> Result<Option<crate::log::PartitionShare>, HostError> {
    share
        .map(|s| {
            crate::log::PartitionShare::new(s.index, s.count)
                .map_err(|_| invalid("partition_share", "index must be below count"))
        })
        .transpose()
}

fn wire_state(state: &InstanceState) -> (i32, String) {
    let (s, e) = state.to_wire();
    (s as i32, e)
}

fn stop_outcome(o: StopOutcome) -> pb::StopOutcome {
    match o {
        StopOutcome::Stopped => pb::StopOutcome::Stopped,
        StopOutcome::Failed => pb::StopOutcome::Failed,
        StopOutcome::TimedOut => pb::StopOutcome::TimedOut,
    }
}

fn elapsed_ms(r: &StopResult) -> u64 {
    u64::try_from(r.record.elapsed.as_millis()).unwrap_or(u64::MAX)
}

/// The validated assignment of a `StartConnectorRequest` or `StartTaskRequest` (same
/// fields).
fn assignment(
    generation: u64,
    target_state: i32,
    cleanup_only: bool,
    incarnation: String,
    executor_epoch: u64,
) -> Result<Assignment, HostError> {
    Ok(Assignment {
        generation,
        paused: paused(target_state)?,
        cleanup_only,
        incarnation,
        executor_epoch,
    })
}

/// The cause of a stop the control plane asks for, from the wire's `connector_deleted`:
/// true only for a deletion; everything else it stops (restart, reconfiguration, a move,
/// pause, STOPPED, a deletion keeping the resources) comes as false.
fn stop_cause(connector_deleted: bool) -> StopCause {
    if connector_deleted {
        StopCause::Deleted
    } else {
        StopCause::Requested
    }
}

/// The validated stop of a `StopTaskRequest` or `ExecutorStopConnectorRequest` (same
/// fields).
macro_rules! stop_request {
    ($r:expr, $token:expr) => {
        StopRequest {
            cause: stop_cause($r.connector_deleted),
            generation: $r.generation,
            timeout_ms: $r.timeout_ms,
            incarnation: $r.incarnation,
            executor_epoch: $r.executor_epoch,
            deletion_token: $token,
            created_topics: Vec::new(),
        }
    };
}

/// A `StopTaskResponse` or `ExecutorStopConnectorResponse` (same fields) from a stop's
/// answer.
macro_rules! stop_response {
    ($ty:path, $answer:expr) => {{
        let answer = $answer;
        let result = &answer.result;
        $ty {
            outcome: stop_outcome(result.record.outcome) as i32,
            connector_deleted: result.record.connector_deleted,
            replayed: result.replayed,
            error: result.record.error.clone().unwrap_or_default(),
            generation: result.record.generation,
            elapsed_ms: elapsed_ms(result),
            abandoned: answer.abandoned,
        }
    }};
}

// Each handler runs in the call's exported span (`DirectSpan::server`, named by the method
// path like the control plane's `rpc` spans) and makes none of its own: in a deletion's
// trace the control plane's `deletion round` above it and the plugin's `plugin stop`
// below it say the rest, and the log lines name what they are about. The span is made
// with the OpenTelemetry API, not through `tracing`: a deletion makes about 18 spans on
// executors, and the bridge costs about 6 us each on the path of the stops
// (bench/NOTES.md).
#[tonic::async_trait]
impl pb::executor_server::Executor for ExecutorService {
    async fn start_connector(
        &self,
        request: Request<pb::StartConnectorRequest>,
    ) -> Result<Response<pb::StartConnectorResponse>, Status> {
        let span = DirectSpan::server("/wharf.v1.Executor/StartConnector", request.metadata());
        span.around(async move {
            let r = request.into_inner();
            let req = StartConnector {
                connector: connector_name(&r.connector, "connector")?,
                config: r.config.into_iter().collect(),
                assignment: assignment(
                    r.generation,
                    r.target_state,
                    r.cleanup_only,
                    r.incarnation,
                    r.executor_epoch,
                )?,
            };
            let (state, error) = wire_state(&self.host.start_connector(req).await?);
            Ok(Response::new(pb::StartConnectorResponse { state, error }))
        })
        .await
    }

    async fn stop_connector(
        &self,
        request: Request<pb::ExecutorStopConnectorRequest>,
    ) -> Result<Response<pb::ExecutorStopConnectorResponse>, Status> {
        let span = DirectSpan::server("/wharf.v1.Executor/StopConnector", request.metadata());
        span.around(async move {
            let token = deletion_token(request.metadata());
            let r = request.into_inner();
            let name = connector_name(&r.connector, "connector")?;
            let req = stop_request!(r, token);
            let answer = self.host.stop_connector(&name, &req).await?;
            Ok(Response::new(stop_response!(
                pb::ExecutorStopConnectorResponse,
                answer
            )))
        })
        .await
    }

    async fn compute_task_configs(
        &self,
        request: Request<pb::ComputeTaskConfigsRequest>,
    ) -> Result<Response<pb::ComputeTaskConfigsResponse>, Status> {
        let span = DirectSpan::server("/wharf.v1.Executor/ComputeTaskConfigs", request.metadata());
        span.around(async move {
            let r = request.into_inner();
            let name = connector_name(&r.connector, "connector")?;
            let configs = self
                .host
                .task_configs(&name, r.max_tasks, r.generation)
                .await?;
            Ok(Response::new(pb::ComputeTaskConfigsResponse {
                task_configs: configs
                    .into_iter()
                    .map(|c| pb::TaskConfig {
                        config: c.into_iter().collect(),
                    })
                    .collect(),
            }))
        })
        .await
    }

    async fn start_task(
        &self,
        request: Request<pb::StartTaskRequest>,
    ) -> Result<Response<pb::StartTaskResponse>, Status> {
        let span = DirectSpan::server("/wharf.v1.Executor/StartTask", request.metadata());
        span.around(async move {
            let r = request.into_inner();
            let req = StartTask {
                task: task_key(r.task)?,
                connector_config: r.connector_config.into_iter().collect(),
                task_config: r.task_config.into_iter().collect(),
                offsets: offsets(r.offsets)?,
                assignment: assignment(
                    r.generation,
                    r.target_state,
                    r.cleanup_only,
                    r.incarnation,
                    r.executor_epoch,
                )?,
                partition_share: partition_share(r.partition_share)?,
            };
            let (state, error) = wire_state(&self.host.start_task(req).await?);
            Ok(Response::new(pb::StartTaskResponse { state, error }))
        })
        .await
    }

    async fn stop_task(
        &self,
        request: Request<pb::StopTaskRequest>,
    ) -> Result<Response<pb::StopTaskResponse>, Status> {
        let span = DirectSpan::server("/wharf.v1.Executor/StopTask", request.metadata());
        span.around(async move {
            let token = deletion_token(request.metadata());
            let mut r = request.into_inner();
            let task = task_key(r.task.take())?;
            let created_topics = std::mem::take(&mut r.created_topics);
            let req = StopRequest {
                created_topics,
                ..stop_request!(r, token)
            };
            let answer = self.host.stop_task(&task, &req).await?;
            Ok(Response::new(stop_response!(pb::StopTaskResponse, answer)))
        })
        .await
    }

    async fn validate_config(
        &self,
        request: Request<pb::ValidateConfigRequest>,
    ) -> Result<Response<pb::ValidateConfigResponse>, Status> {
        let span = DirectSpan::server("/wharf.v1.Executor/ValidateConfig", request.metadata());
        span.around(async move {
            let r = request.into_inner();
            let config: wharf::sdk::ConfigMap = r.config.into_iter().collect();
            let Some(checked) = self.host.validate_config(&r.plugin, config.clone()).await else {
                // Not a HostError: a start naming an unknown plugin is FAILED_PRECONDITION,
                // but here the plugin is the thing asked for.
                return Err(Status::not_found(format!(
                    "plugin {:?} is not installed on this executor",
                    r.plugin
                )));
            };
            let keys: Vec<pb::ConfigKeyErrors> = checked
                .map_err(|e| Status::internal(format!("plugin {:?}: {e}", r.plugin)))?
                .into_iter()
                .map(|(name, errors)| pb::ConfigKeyErrors { name, errors })
                .collect();
            // Declared from a valid config only: a plugin may assume its checks passed.
            let (declared_resources, declared_resources_error) = if keys.is_empty() {
                match self.host.declared_resources(&r.plugin, config).await {
                    Some(Ok(rs)) => (
                        rs.iter().map(wharf::wire::resource).collect(),
                        String::new(),
                    ),
                    Some(Err(e)) => (Vec::new(), e),
                    None => (Vec::new(), String::new()),
                }
            } else {
                (Vec::new(), String::new())
            };
            Ok(Response::new(pb::ValidateConfigResponse {
                keys,
                declared_resources,
                declared_resources_error,
            }))
        })
        .await
    }

    async fn get_sink_offsets(
        &self,
        request: Request<pb::GetSinkOffsetsRequest>,
    ) -> Result<Response<pb::GetSinkOffsetsResponse>, Status> {
        let span = DirectSpan::server("/wharf.v1.Executor/GetSinkOffsets", request.metadata());
        span.around(async move {
            let r = request.into_inner();
            let connector = connector_name(&r.connector, "connector")?;
            let (log, consumer) = self.host.sink_consumer(&connector);
            let offsets = log
                .consumer_positions(&consumer)
                .await
                .map_err(log_status)?
                .into_iter()
                .map(|p| pb::SinkOffset {
                    topic: p.topic,
                    partition: p.partition,
                    offset: Some(p.next),
                })
                .collect();
            Ok(Response::new(pb::GetSinkOffsetsResponse { offsets }))
        })
        .await
    }

    async fn alter_sink_offsets(
        &self,
        request: Request<pb::AlterSinkOffsetsRequest>,
    ) -> Result<Response<pb::AlterSinkOffsetsResponse>, Status> {
        let span = DirectSpan::server("/wharf.v1.Executor/AlterSinkOffsets", request.metadata());
        span.around(async move {
            let r = request.into_inner();
            let connector = connector_name(&r.connector, "connector")?;
            // KIP-875: only while the sink is STOPPED; the control plane checks that, and
            // this executor refuses while one of its tasks still reads here.
            if self.host.runs_tasks_of(&connector) {
                return Err(Status::failed_precondition(format!(
                    "a task of connector {connector:?} still runs on this executor; stop the connector first"
                )));
            }
            let (log, consumer) = self.host.sink_consumer(&connector);
            if r.reset_all {
                log.delete_consumer(&consumer).await.map_err(log_status)?;
            } else {
                let changes: Vec<crate::log::PositionChange> = r
                    .offsets
                    .into_iter()
                    .map(|o| crate::log::PositionChange {
                        topic: o.topic,
                        partition: o.partition,
                        next: o.offset,
                    })
                    .collect();
                log.set_consumer_positions(&consumer, &changes)
                    .await
                    .map_err(log_status)?;
            }
            tracing::info!(connector = %connector, reset_all = r.reset_all, "sink offsets altered");
            Ok(Response::new(pb::AlterSinkOffsetsResponse {}))
        })
        .await
    }

    async fn list_assignments(
        &self,
        request: Request<pb::ListAssignmentsRequest>,
    ) -> Result<Response<pb::ListAssignmentsResponse>, Status> {
        let span = DirectSpan::server("/wharf.v1.Executor/ListAssignments", request.metadata());
        span.around(async move {
            let (connectors, tasks) = hosted_wire(&self.host);
            let abandoned = connectors.iter().filter(|c| c.abandoned).count()
                + tasks.iter().filter(|t| t.abandoned).count();
            Ok(Response::new(pb::ListAssignmentsResponse {
                executor_id: self.host.executor_id().to_owned(),
                epoch: self.host.epoch(),
                abandoned: u32::try_from(abandoned).unwrap_or(u32::MAX),
                lease_expired: self.host.lease_standing() == LeaseStanding::MayHaveExpired,
                connectors,
                tasks,
            }))
        })
        .await
    }
}

/// What `host` hosts (instances not yet stopped, and abandoned ones until their plugin
/// call returns), on the wire: for ListAssignments and the heartbeat.
pub fn hosted_wire(host: &Host) -> (Vec<pb::HostedConnector>, Vec<pb::HostedTask>) {
    let (connectors, tasks) = host.assignments();
    (
        connectors
            .into_iter()
            .map(|c| pb::HostedConnector {
                connector: c.key,
                generation: c.generation,
                state: wire_state(&c.state).0,
                cleanup_only: c.cleanup_only,
                abandoned: c.abandoned,
                incarnation: c.incarnation,
            })
            .collect(),
        tasks
            .into_iter()
            .map(|t| pb::HostedTask {
                task: Some(pb::TaskId {
                    connector: t.key.connector,
                    task: t.key.task,
                }),
                generation: t.generation,
                state: wire_state(&t.state).0,
                cleanup_only: t.cleanup_only,
                abandoned: t.abandoned,
                incarnation: t.incarnation,
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_with_connector_deleted_is_a_deletion() {
        assert_eq!(stop_cause(true), StopCause::Deleted);
        assert!(stop_cause(true).connector_deleted());
    }

    #[test]
    fn a_stop_without_connector_deleted_is_a_requested_stop() {
        assert_eq!(stop_cause(false), StopCause::Requested);
        assert!(!stop_cause(false).connector_deleted());
    }
}
