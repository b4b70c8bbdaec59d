//! `wharf.v1.ExecutorRegistry`: registration with lease and epoch, heartbeats, status
//! reports, offset commits and task reconfiguration requests. Every call after
//! registration must come from the executor's current, leased epoch; anything else is
//! refused with FAILED_PRECONDITION so that the executor stops its instances (with
//! `false`) and registers again.

use std::collections::BTreeMap;
use std::sync::Arc;

use prost::Message;
use tonic::{Request, Response, Status};
use tracing::{info, warn};
use wharf::pb::v1 as pb;
use wharf::pb::v1::executor_registry_server::ExecutorRegistry;
use wharf::task::{TaskKind, spawn};

use super::convert;
use super::error::ApiError;
use crate::model::{InstanceEvent, InstanceOf, reported_error};
use crate::reconcile::Cluster;

/// The registry service.
pub struct RegistryService {
    cluster: Arc<Cluster>,
    /// The listener speaks TLS: executors' advertised addresses must be `https://`.
    tls: bool,
    /// `--allow-separate-embedded-logs` ([`crate::plan::record_log`]).
    separate_embedded_logs: bool,
    /// Held across a registration's record-log check and its store write, so that two
    /// executors on different logs registering at once cannot both be admitted.
    admitting: std::sync::Mutex<()>,
    /// Held across a ledger intent's claim check and its store write.
    claiming: tokio::sync::Mutex<()>,
}

impl RegistryService {
    /// A service over `cluster`.
    pub fn new(cluster: Arc<Cluster>) -> Self {
        Self {
            cluster,
            tls: false,
            separate_embedded_logs: false,
            admitting: std::sync::Mutex::new(()),
            claiming: tokio::sync::Mutex::new(()),
        }
    }

    /// Admits executors on embedded record logs beside each other
    /// (`--allow-separate-embedded-logs`).
    #[must_use]
    pub fn with_separate_embedded_logs(mut self, allow: bool) -> Self {
        self.separate_embedded_logs = allow;
        self
    }

    /// Checks `req`'s record log against the live executors' and stores the
    /// registration, both under [`RegistryService::admitting`].
    fn admit_and_register(
        &self,
        req: &pb::RegisterExecutorRequest,
    ) -> Result<crate::model::ExecutorRecord, ApiError> {
        let _admitting = self
            .admitting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let store = &self.cluster.store;
        let executors = store.executors().map_err(ApiError::from)?;
        let live: Vec<(&str, &str)> = executors
            .iter()
            .filter(|e| !e.lost)
            .map(|e| (e.id.as_str(), e.record_log.as_str()))
            .collect();
        crate::plan::record_log::admit(
            &req.executor_id,
            &req.record_log,
            &live,
            self.separate_embedded_logs,
        )
        .map_err(|mismatch| {
            warn!(executor = %req.executor_id, %mismatch, "registration refused: record log");
            ApiError::RecordLogMismatch {
                executor: req.executor_id.clone(),
                mismatch,
            }
        })?;
        let live_plugins: Vec<(&str, Vec<pb::PluginInfo>)> = executors
            .iter()
            .filter(|e| !e.lost)
            .map(|e| {
                let infos = e
                    .plugins
                    .iter()
                    .filter_map(|p| pb::PluginInfo::decode(p.info.as_slice()).ok())
                    .collect();
                (e.id.as_str(), infos)
            })
            .collect();
        crate::plan::plugin_defs::admit(
            &req.executor_id,
            &req.plugins,
            live_plugins.iter().map(|(id, p)| (*id, p.as_slice())),
        )
        .map_err(|conflict| {
            warn!(executor = %req.executor_id, %conflict, "registration refused: plugin definition");
            ApiError::PluginDefinitionConflict {
                executor: req.executor_id.clone(),
                conflict,
            }
        })?;
        store
            .register_executor_with_transforms(
                &req.executor_id,
                &req.advertised_address,
                convert::plugin_records(&req.plugins),
                convert::transform_records(&req.transforms),
                &req.record_log,
            )
            .map_err(ApiError::from)
    }

    /// The listener speaks TLS (advertised addresses must then be `https://`).
    #[must_use]
    pub fn with_tls(mut self, tls: bool) -> Self {
        self.tls = tls;
        self
    }

    /// Refuses a call naming executor `claimed` unless the caller's certificate is that
    /// executor's (or a replica forwards such a call): PERMISSION_DENIED, counted and
    /// logged at most once a minute ([`wharf::tls::PEERS_REFUSED`]), before anything is
    /// read or changed. See `docs/security.md`.
    fn check_identity<T>(request: &Request<T>, claimed: &str) -> Result<(), Status> {
        let caller = wharf::tls::caller(request.extensions());
        let forwarded = request
            .metadata()
            .get(wharf::identity::FORWARDED_IDENTITY_HEADER)
            .and_then(|v| v.to_str().ok());
        wharf::identity::authorize_executor(&caller, forwarded, claimed).map_err(|e| {
            let peer = wharf::tls::peer(request.extensions()).and_then(|p| p.remote_addr);
            // Strangers can send these by the thousand: one line a minute, all counted;
            // the id is theirs, so it is cut.
            if let Some(silenced) = wharf::tls::peer_refused(wharf::tls::PeerRefusal::Identity) {
                warn!(
                    executor = %crate::auth::audit::bounded_name(claimed),
                    peer = ?peer,
                    // The error quotes the claimed id too.
                    error = %crate::auth::audit::bounded(
                        &e.to_string(),
                        crate::auth::audit::MAX_AUDIT_MESSAGE_BYTES
                    ),
                    refused_without_a_line_since_the_last = silenced,
                    "registry call refused: identity (at most one such line a minute, all counted in wharf_peers_refused_total)"
                );
            }
            Status::from(e)
        })
    }

    fn check_epoch(&self, executor: &str, epoch: u64) -> Result<(), ApiError> {
        if self.cluster.holds_lease(executor, epoch) || self.cluster.adopt_lease(executor, epoch) {
            Ok(())
        } else {
            Err(ApiError::FencedEpoch {
                executor: executor.to_owned(),
                epoch,
            })
        }
    }
}

/// Whether an offset commit for one task is taken, for [`RegistryService::commit_offsets`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitAdmission {
    /// The caller hosts the task's current generation.
    Admit,
    /// No task with that index.
    NoSuchTask,
    /// An older generation than the current one (a zombie after a move: KIP-618's fencing
    /// of a task's previous generation).
    Stale {
        /// The current generation.
        current: u64,
    },
    /// The current or a never-assigned generation from an executor that does not host
    /// it: another executor's task (docs/security.md).
    NotAssigned,
}

/// Decides an offset commit from `executor` at `generation` for the task whose record
/// is `task`. Pure.
pub fn commit_admission(
    task: Option<&crate::model::Instance>,
    executor: &str,
    generation: u64,
) -> CommitAdmission {
    let Some(t) = task else {
        return CommitAdmission::NoSuchTask;
    };
    if generation < t.generation {
        return CommitAdmission::Stale {
            current: t.generation,
        };
    }
    match (
        generation == t.generation,
        t.executor.as_deref() == Some(executor),
    ) {
        (true, true) => CommitAdmission::Admit,
        (false, _) | (_, false) => CommitAdmission::NotAssigned,
    }
}

/// Whether a ledger change from `executor` at `generation` for instance `task` (`None`:
/// the connector instance) of incarnation `incarnation` is taken, for
/// [`RegistryService::record_resources`]: the caller must host that instance at that
/// generation, or, once the connector is being deleted, run that instance's cleanup step
/// (on its recorded host, or the cleanup-only instance's). `Err` says why not. Pure.
pub fn ledger_admission(
    rec: &crate::model::ConnectorRecord,
    deletion: Option<&crate::model::DeletionRecord>,
    executor: &str,
    task: Option<u32>,
    generation: u64,
    incarnation: &str,
) -> Result<(), String> {
    if rec.incarnation != incarnation {
        return Err(format!(
            "incarnation {incarnation} is not the connector's current one"
        ));
    }
    let hosts = |i: &crate::model::Instance| {
        i.generation == generation && i.executor.as_deref() == Some(executor)
    };
    let what = match task {
        Some(t) => format!("task {t}"),
        None => "the connector instance".to_owned(),
    };
    let admitted = match (rec.deleting, deletion) {
        (false, _) => match task {
            Some(t) => rec.tasks.get(t as usize).is_some_and(hosts),
            None => hosts(&rec.connector),
        },
        (true, Some(d)) => d.steps.iter().filter(|s| s.task == task).any(|s| {
            let (host, g) = if s.rehosted {
                (s.executor.clone(), s.generation)
            } else {
                let h = match task {
                    Some(t) => d.sealed.task_hosts.get(t as usize).cloned(),
                    None => Some(d.sealed.connector_host.clone()),
                };
                h.map(|h| (h.executor.unwrap_or_default(), h.generation))
                    .unwrap_or_default()
            };
            host == executor && g == generation
        }),
        (true, None) => false,
    };
    if admitted {
        Ok(())
    } else {
        Err(format!(
            "executor {executor} does not host {what} at generation {generation}"
        ))
    }
}

/// One reported state, for [`RegistryService::report_status`].
struct Reported {
    /// Task index; `None` for the connector instance.
    task: Option<u32>,
    generation: u64,
    event: InstanceEvent,
    error: String,
}

fn reported(state: i32) -> Option<InstanceEvent> {
    match pb::State::try_from(state).ok()? {
        pb::State::Running => Some(InstanceEvent::Started),
        pb::State::Failed => Some(InstanceEvent::Failed),
        pb::State::Unspecified
        | pb::State::Unassigned
        | pb::State::Paused
        | pb::State::Stopped
        | pb::State::Restarting
        | pb::State::Deleting => None,
    }
}

/// The states of a status report that the control plane records, grouped by connector
/// (each group applied in one read-modify-write in report order, the groups
/// concurrently: one report shares store commits instead of one commit per task). Each
/// error is cut by [`reported_error`] before it is stored. Pure.
fn report_groups(
    connectors: Vec<pb::ConnectorStatusReport>,
    tasks: Vec<pb::TaskStatusReport>,
) -> BTreeMap<String, Vec<Reported>> {
    let mut groups: BTreeMap<String, Vec<Reported>> = BTreeMap::new();
    for c in connectors {
        if let Some(event) = reported(c.state) {
            groups.entry(c.connector).or_default().push(Reported {
                task: None,
                generation: c.generation,
                event,
                error: reported_error(c.error),
            });
        }
    }
    for t in tasks {
        let Some(task) = t.task else { continue };
        if let Some(event) = reported(t.state) {
            groups.entry(task.connector).or_default().push(Reported {
                task: Some(task.task),
                generation: t.generation,
                event,
                error: reported_error(t.error),
            });
        }
    }
    groups
}

#[tonic::async_trait]
impl ExecutorRegistry for RegistryService {
    async fn register_executor(
        &self,
        request: Request<pb::RegisterExecutorRequest>,
    ) -> Result<Response<pb::RegisterExecutorResponse>, Status> {
        Self::check_identity(&request, &request.get_ref().executor_id)?;
        let req = request.into_inner();
        // The rule the executor applies at start and `certs executor --id` too.
        if let Err(e) = wharf::ids::check_executor_id(&req.executor_id) {
            return Err(ApiError::InvalidArgument {
                field: "executor_id".into(),
                reason: e.to_string(),
            }
            .into());
        }
        if self.tls && !req.advertised_address.starts_with("https://") {
            return Err(ApiError::InvalidArgument {
                field: "advertised_address".into(),
                reason: "must be an https:// URL: this control plane speaks TLS and calls executors over TLS".into(),
            }
            .into());
        }
        if tonic::transport::Endpoint::from_shared(req.advertised_address.clone()).is_err()
            || !req.advertised_address.starts_with("http")
        {
            return Err(ApiError::InvalidArgument {
                field: "advertised_address".into(),
                reason: "is not a URL like http://127.0.0.2:7070".into(),
            }
            .into());
        }
        let rec = self.admit_and_register(&req)?;
        // No await between the store write and this: older epochs are fenced even if the
        // caller gives up on this call now.
        self.cluster.registered(&rec.id, rec.epoch);
        // The probe comes before the lease, so that the executor is not listed ALIVE
        // before the control plane knows whether its address is its own (docs/security.md,
        // "The dialed identity"). A failed probe does not refuse the registration: the
        // executor is listed, unreachable with the reason, and probed again with backoff.
        // Both run apart from this call, so that a registration whose caller gave up (its
        // deadline passed while this process was paused) still ends granted or superseded.
        let cluster = self.cluster.clone();
        let probed = rec.clone();
        let (verified, granted) = spawn(TaskKind::Awaited, "registration", async move {
            let verified = cluster.verify(&probed, true).await;
            (verified, cluster.grant_lease(&probed.id, probed.epoch))
        })
        .await
        .map_err(|e| Status::internal(format!("registration failed: {e}")))?;
        if !granted {
            info!(executor = %rec.id, epoch = rec.epoch,
                "registration superseded by a newer one while its probe ran; refused, the executor registers again");
            return Err(ApiError::FencedEpoch {
                executor: rec.id,
                epoch: rec.epoch,
            }
            .into());
        }
        // Made per registration and known only to this control plane and the executor
        // (and the executors' heartbeats, to a control plane that did not make it).
        let deletion_token = new_deletion_token();
        self.cluster
            .clients
            .set_deletion_token(&rec.id, &deletion_token);
        info!(executor = %rec.id, epoch = rec.epoch, address = %rec.address, verified, record_log = %rec.record_log,
            plugins = %rec.plugins.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(","), "executor registered");
        Ok(Response::new(pb::RegisterExecutorResponse {
            epoch: rec.epoch,
            lease_ms: self.cluster.lease.lease_ms,
            heartbeat_interval_ms: self.cluster.lease.heartbeat_interval_ms,
            deletion_token,
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        Self::check_identity(&request, &request.get_ref().executor_id)?;
        let req = request.into_inner();
        if !self.cluster.renew_lease(&req.executor_id, req.epoch)
            && !self.cluster.adopt_lease(&req.executor_id, req.epoch)
        {
            warn!(executor = %req.executor_id, epoch = req.epoch, "heartbeat from fenced epoch refused");
            return Err(ApiError::FencedEpoch {
                executor: req.executor_id,
                epoch: req.epoch,
            }
            .into());
        }
        // A control plane that did not see the registration (a restart, a new leader)
        // learns the deletion token here.
        self.cluster
            .clients
            .set_deletion_token(&req.executor_id, &req.deletion_token);
        self.cluster
            .note_kafka_cluster_id(&req.record_log_cluster_id);
        if req.reports_hosted {
            let hosted =
                req.connectors
                    .into_iter()
                    .map(|c| (c.connector, None, c.generation))
                    .chain(req.tasks.into_iter().filter_map(|t| {
                        t.task.map(|id| (id.connector, Some(id.task), t.generation))
                    }))
                    .collect();
            // The lease is renewed already: answer now, correct apart.
            self.cluster
                .spawn_hosted_correction(req.executor_id, req.epoch, hosted);
        }
        Ok(Response::new(pb::HeartbeatResponse {
            lease_ms: self.cluster.lease.lease_ms,
        }))
    }

    async fn report_status(
        &self,
        request: Request<pb::ReportStatusRequest>,
    ) -> Result<Response<pb::ReportStatusResponse>, Status> {
        Self::check_identity(&request, &request.get_ref().executor_id)?;
        let req = request.into_inner();
        self.check_epoch(&req.executor_id, req.epoch)?;
        let id = req.executor_id.clone();
        let groups = report_groups(req.connectors, req.tasks);
        let updates = groups.iter().map(|(name, reports)| {
            let id = id.as_str();
            self.cluster.record_connector_batched(name, move |r| {
                if r.deleting {
                    return None;
                }
                let target = r.target;
                let mut any = false;
                let mut herder_acts = false;
                for rep in reports {
                    let cur = match rep.task {
                        Some(i) => match r.tasks.get_mut(i as usize) {
                            Some(t) => t,
                            None => continue,
                        },
                        None => &mut r.connector,
                    };
                    if cur.generation != rep.generation || cur.executor.as_deref() != Some(id) {
                        continue;
                    }
                    let next = cur.state.on(rep.event);
                    if next == cur.state && cur.error == rep.error {
                        continue;
                    }
                    cur.state = next;
                    cur.error = rep.error.clone();
                    any = true;
                    herder_acts |= next.herder_acts_on(target, InstanceOf::of_task(rep.task));
                }
                any.then_some(((), herder_acts))
            })
        });
        for result in futures::future::join_all(updates).await {
            result.map_err(ApiError::from)?;
        }
        // KIP-558 active topics: a write only when a connector's set grows.
        let topic_updates = req.active_topics.iter().map(|report| {
            self.cluster
                .record_connector_batched(&report.connector, move |r| {
                    let grew = !r.deleting
                        && crate::model::topics::merge_active_topics(
                            &mut r.active_topics,
                            &report.topics,
                        );
                    grew.then_some(((), false))
                })
        });
        for result in futures::future::join_all(topic_updates).await {
            result.map_err(ApiError::from)?;
        }
        Ok(Response::new(pb::ReportStatusResponse {}))
    }

    async fn commit_offsets(
        &self,
        request: Request<pb::CommitOffsetsRequest>,
    ) -> Result<Response<pb::CommitOffsetsResponse>, Status> {
        Self::check_identity(&request, &request.get_ref().executor_id)?;
        let req = request.into_inner();
        self.check_epoch(&req.executor_id, req.epoch)?;
        let task = req.task.ok_or_else(|| ApiError::InvalidArgument {
            field: "task".into(),
            reason: "is required".into(),
        })?;
        let rec = self
            .cluster
            .store
            .connector(&task.connector)
            .map_err(ApiError::from)?
            .ok_or_else(|| ApiError::ConnectorNotFound(task.connector.clone()))?;
        if rec.deleting {
            return Err(ApiError::StillDeleting(task.connector).into());
        }
        let what = format!("task {}-{}", task.connector, task.task);
        match commit_admission(
            rec.tasks.get(task.task as usize),
            &req.executor_id,
            req.generation,
        ) {
            CommitAdmission::Admit => {}
            CommitAdmission::NoSuchTask => {
                return Err(ApiError::InvalidArgument {
                    field: "task.task".into(),
                    reason: format!("{what} does not exist"),
                }
                .into());
            }
            CommitAdmission::Stale { current } => {
                return Err(ApiError::StaleGeneration {
                    what,
                    got: req.generation,
                    current,
                }
                .into());
            }
            CommitAdmission::NotAssigned => {
                warn!(executor = %req.executor_id, task = %what, generation = req.generation,
                    "offset commit refused: not this executor's assignment");
                return Err(Status::permission_denied(format!(
                    "{what} generation {} is not assigned to executor {}",
                    req.generation, req.executor_id
                )));
            }
        }
        for (i, o) in req.offsets.iter().enumerate() {
            for (field, text) in [("partition", &o.partition), ("offset", &o.offset)] {
                if let Err(e) = serde_json::from_str::<serde_json::Value>(text) {
                    return Err(ApiError::InvalidArgument {
                        field: format!("offsets[{i}].{field}"),
                        reason: format!("not JSON: {e}"),
                    }
                    .into());
                }
            }
        }
        let pairs: Vec<(String, String)> = req
            .offsets
            .into_iter()
            .map(|o| (o.partition, o.offset))
            .collect();
        self.cluster
            .store
            .put_offsets(&task.connector, &pairs)
            .map_err(ApiError::from)?;
        Ok(Response::new(pb::CommitOffsetsResponse {}))
    }

    async fn record_resources(
        &self,
        request: Request<pb::RecordResourcesRequest>,
    ) -> Result<Response<pb::RecordResourcesResponse>, Status> {
        Self::check_identity(&request, &request.get_ref().executor_id)?;
        let req = request.into_inner();
        self.check_epoch(&req.executor_id, req.epoch)?;
        let mut changes = Vec::with_capacity(req.changes.len());
        for (i, c) in req.changes.iter().enumerate() {
            let invalid = |field: &str, reason: &str| ApiError::InvalidArgument {
                field: format!("changes[{i}].{field}"),
                reason: reason.to_owned(),
            };
            let change = wharf::wire::ledger_change_from(c.change)
                .ok_or_else(|| invalid("change", "must be INTENT, CONFIRM, RELEASE or ABSENT"))?;
            let r = c
                .resource
                .as_ref()
                .ok_or_else(|| invalid("resource", "is required"))?;
            if change == wharf::sdk::LedgerChange::Intent
                && !matches!(
                    pb::ResourceOrigin::try_from(r.origin),
                    Ok(pb::ResourceOrigin::Created | pb::ResourceOrigin::Adopted)
                )
            {
                return Err(
                    invalid("resource.origin", "must be CREATED or ADOPTED on an intent").into(),
                );
            }
            changes.push((
                wharf::wire::resource_from(r, wharf::sdk::Origin::Created),
                change,
            ));
        }
        let owner = match req.task {
            Some(t) => wharf::sdk::ResourceOwner::Task(t),
            None => wharf::sdk::ResourceOwner::Connector,
        };
        let store = &self.cluster.store;
        // One claim decision at a time, so that two connectors' intents on one resource
        // cannot both pass the check before either is stored.
        let _claiming = self.claiming.lock().await;
        let Some(rec) = store.connector(&req.connector).map_err(ApiError::from)? else {
            // A purge's cleanup-only instance: its connector is gone from the store, its
            // releases go to the purge (docs/resources.md, "Orphans").
            let from = crate::reconcile::purges::Recorder {
                executor: &req.executor_id,
                task: req.task,
                generation: req.generation,
                incarnation: &req.incarnation,
            };
            return match self.cluster.purges.record(
                &req.connector,
                &from,
                &changes,
                crate::reconcile::now_ms(),
            ) {
                None => Err(ApiError::ConnectorNotFound(req.connector.clone()).into()),
                Some(Ok(())) => Ok(Response::new(pb::RecordResourcesResponse {})),
                Some(Err(reason)) => {
                    warn!(executor = %req.executor_id, connector = %req.connector, %reason, "purge ledger change refused");
                    Err(ApiError::LedgerFenced {
                        connector: req.connector.clone(),
                        reason,
                    }
                    .into())
                }
            };
        };
        let deletion = if rec.deleting {
            store.deletion(&req.connector).map_err(ApiError::from)?
        } else {
            None
        };
        ledger_admission(
            &rec,
            deletion.as_ref(),
            &req.executor_id,
            req.task,
            req.generation,
            &req.incarnation,
        )
        .map_err(|reason| {
            warn!(executor = %req.executor_id, connector = %req.connector, %reason, "resource ledger change refused");
            ApiError::LedgerFenced {
                connector: req.connector.clone(),
                reason,
            }
        })?;
        let intents: Vec<wharf::sdk::Resource> = changes
            .iter()
            .filter(|(_, c)| *c == wharf::sdk::LedgerChange::Intent)
            .map(|(r, _)| r.clone())
            .collect();
        if !intents.is_empty() {
            let others = store.connectors_shared().map_err(ApiError::from)?;
            if let Some(reason) =
                crate::admin::resources::second_claim(&req.connector, &intents, &others)
            {
                warn!(connector = %req.connector, %reason, "resource intent refused: second claim");
                return Err(ApiError::ResourceHeld {
                    connector: req.connector,
                    reason,
                }
                .into());
            }
        }
        if changes
            .iter()
            .any(|(_, c)| *c == wharf::sdk::LedgerChange::Confirm)
        {
            crate::reconcile::fault::crash_point("before_resource_confirm");
        }
        let now = crate::reconcile::now_ms();
        let (connector, incarnation) = (req.connector.clone(), req.incarnation.clone());
        let outcome = self
            .cluster
            .record_connector_batched(&req.connector, |r| {
                if r.incarnation != incarnation {
                    return Some((Err(format!("incarnation {incarnation} is gone")), false));
                }
                match crate::model::resources::apply_changes(
                    &connector,
                    &mut r.resources,
                    owner,
                    &incarnation,
                    &changes,
                    now,
                ) {
                    Ok(true) => Some((Ok(()), false)),
                    Ok(false) => None,
                    Err(e) => Some((Err(e.to_string()), false)),
                }
            })
            .await
            .map_err(ApiError::from)?;
        match outcome {
            Some(Err(reason)) => Err(ApiError::InvalidArgument {
                field: "changes".into(),
                reason,
            }
            .into()),
            Some(Ok(())) | None => Ok(Response::new(pb::RecordResourcesResponse {})),
        }
    }

    async fn request_task_reconfiguration(
        &self,
        request: Request<pb::RequestTaskReconfigurationRequest>,
    ) -> Result<Response<pb::RequestTaskReconfigurationResponse>, Status> {
        Self::check_identity(&request, &request.get_ref().executor_id)?;
        let req = request.into_inner();
        self.check_epoch(&req.executor_id, req.epoch)?;
        self.cluster
            .modify_connector(&req.connector, |r| {
                // Only the host of the current connector instance asks (a stranger's
                // request, or a stale instance's, changes nothing).
                if r.deleting
                    || r.connector.generation != req.generation
                    || r.connector.executor.as_deref() != Some(req.executor_id.as_str())
                {
                    return None;
                }
                r.task_configs_stale = true;
                Some(())
            })
            .map_err(ApiError::from)?;
        Ok(Response::new(pb::RequestTaskReconfigurationResponse {}))
    }
}

/// A fresh deletion token: 32 random bytes as hex (what a stop with
/// `connector_deleted = true` carries to the executor of this registration).
fn new_deletion_token() -> String {
    rand::random::<[u8; 32]>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Instance;

    fn hosted(executor: &str, generation: u64) -> Instance {
        Instance {
            executor: Some(executor.to_owned()),
            generation,
            ..Instance::unassigned()
        }
    }

    fn record(connector_host: &str, generation: u64) -> crate::model::ConnectorRecord {
        let spec = crate::model::ConnectorSpec {
            name: wharf::ids::ConnectorName::parse("c").unwrap(),
            plugin: "p".into(),
            tasks_max: std::num::NonZeroU32::new(1).unwrap(),
            config: Default::default(),
        };
        let mut r = crate::model::ConnectorRecord::new(&spec, crate::model::TargetState::Started);
        r.connector = hosted(connector_host, generation);
        r.tasks = vec![hosted("exec-2", generation + 1)];
        r
    }

    #[test]
    fn the_host_of_an_instance_at_its_generation_records_its_ledger() {
        let r = record("exec-1", 5);
        let inc = r.incarnation.clone();
        assert!(ledger_admission(&r, None, "exec-1", None, 5, &inc).is_ok());
        assert!(ledger_admission(&r, None, "exec-2", Some(0), 6, &inc).is_ok());
    }

    #[test]
    fn another_executor_or_generation_or_incarnation_is_refused() {
        let r = record("exec-1", 5);
        let inc = r.incarnation.clone();
        assert!(ledger_admission(&r, None, "exec-2", None, 5, &inc).is_err());
        assert!(ledger_admission(&r, None, "exec-1", None, 4, &inc).is_err());
        assert!(ledger_admission(&r, None, "exec-2", Some(1), 6, &inc).is_err());
        let e = ledger_admission(&r, None, "exec-1", None, 5, "older").unwrap_err();
        assert!(e.contains("incarnation"), "{e}");
    }

    #[test]
    fn during_a_deletion_the_cleanup_steps_instance_records_its_releases() {
        let mut r = record("exec-1", 5);
        let inc = r.incarnation.clone();
        let mut d =
            crate::model::DeletionRecord::seal(&r, vec![], crate::model::DeletionMode::Cleanup, 0);
        r.deleting = true;
        // On its recorded host, at the sealed generation.
        assert!(ledger_admission(&r, Some(&d), "exec-1", None, 5, &inc).is_ok());
        // Re-hosted: the cleanup-only instance, not the old host.
        d.steps[1].rehosted = true;
        d.steps[1].executor = "exec-3".into();
        d.steps[1].generation = 9;
        assert!(ledger_admission(&r, Some(&d), "exec-3", None, 9, &inc).is_ok());
        assert!(ledger_admission(&r, Some(&d), "exec-1", None, 5, &inc).is_err());
        assert!(ledger_admission(&r, None, "exec-3", None, 9, &inc).is_err());
    }

    #[test]
    fn a_reported_error_over_the_bound_is_cut_before_it_is_stored() {
        let huge = "e".repeat(3_000_000);
        let groups = report_groups(
            vec![pb::ConnectorStatusReport {
                connector: "c".into(),
                generation: 1,
                state: pb::State::Failed as i32,
                error: huge.clone(),
            }],
            vec![pb::TaskStatusReport {
                task: Some(pb::TaskId {
                    connector: "c".into(),
                    task: 0,
                }),
                generation: 1,
                state: pb::State::Failed as i32,
                error: huge,
            }],
        );
        let reports = &groups["c"];
        assert_eq!(reports.len(), 2);
        for r in reports {
            crate::model::assert_reported_cut(&r.error, 3_000_000);
        }
    }

    #[test]
    fn a_reported_error_within_the_bound_is_stored_whole() {
        let groups = report_groups(
            vec![pb::ConnectorStatusReport {
                connector: "c".into(),
                generation: 1,
                state: pb::State::Failed as i32,
                error: "boom".into(),
            }],
            Vec::new(),
        );
        assert_eq!(groups["c"][0].error, "boom");
    }

    #[test]
    fn the_host_of_the_current_generation_commits() {
        let t = hosted("exec-1", 10);
        assert_eq!(
            commit_admission(Some(&t), "exec-1", 10),
            CommitAdmission::Admit
        );
    }

    #[test]
    fn a_task_that_does_not_exist_is_refused() {
        assert_eq!(
            commit_admission(None, "exec-1", 1),
            CommitAdmission::NoSuchTask
        );
    }

    #[test]
    fn an_older_generation_is_stale_whoever_sends_it() {
        let t = hosted("exec-1", 10);
        for executor in ["exec-1", "exec-2"] {
            assert_eq!(
                commit_admission(Some(&t), executor, 9),
                CommitAdmission::Stale { current: 10 }
            );
        }
    }

    #[test]
    fn another_executor_cannot_commit_the_current_generation() {
        let t = hosted("exec-1", 10);
        assert_eq!(
            commit_admission(Some(&t), "exec-2", 10),
            CommitAdmission::NotAssigned
        );
    }

    #[test]
    fn a_generation_never_assigned_is_refused_even_from_the_host() {
        let t = hosted("exec-1", 10);
        assert_eq!(
            commit_admission(Some(&t), "exec-1", 11),
            CommitAdmission::NotAssigned
        );
        assert_eq!(
            commit_admission(Some(&t), "exec-2", 1000),
            CommitAdmission::NotAssigned
        );
    }

    #[test]
    fn an_unassigned_task_takes_no_commit() {
        let t = Instance::unassigned();
        assert_eq!(
            commit_admission(Some(&t), "exec-1", 0),
            CommitAdmission::NotAssigned
        );
    }
}
