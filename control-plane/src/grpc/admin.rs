//! `wharf.v1.ConnectorAdmin`: the operator's API. Handlers validate at the edge, write
//! the store, wake the herder, and answer; they never call executors.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::info;
use wharf::pb::v1 as pb;
use wharf::pb::v1::connector_admin_server::ConnectorAdmin;

use super::convert::{
    self, KnownPlugin, MAX_OFFSET_JSON_BYTES, MAX_OFFSETS_PER_REQUEST, RawConnector,
};
use super::error::ApiError;
use crate::model::{
    ConnectorRecord, ConnectorSpec, DeletionRecord, InstanceEvent, InstanceState, TargetState,
};
use crate::plan::unit::Host;
use crate::reconcile::{Cluster, finalizer, now_ms};
use crate::store::CreateOutcome;

/// Wait bound of DeleteConnector with `wait = true` and no timeout, in milliseconds.
pub const DEFAULT_DELETE_WAIT_MS: u32 = 30_000;
/// Attempts to record a deletion while the connector keeps changing.
const DELETE_RECORD_ATTEMPTS: usize = 16;
/// Buffer of one WatchConnector stream, in events.
const WATCH_BUFFER: usize = 64;

/// The admin service.
pub struct AdminService {
    cluster: Arc<Cluster>,
}

impl AdminService {
    /// A service over `cluster`.
    pub fn new(cluster: Arc<Cluster>) -> Self {
        Self { cluster }
    }
}

type ApiResult<T> = Result<T, ApiError>;

fn plugins(cluster: &Cluster) -> ApiResult<BTreeMap<String, KnownPlugin>> {
    let execs = cluster.store.executors()?;
    Ok(convert::known_plugins(&execs, &|e| {
        !e.lost && cluster.holds_lease(&e.id, e.epoch)
    }))
}

fn existing(cluster: &Cluster, name: &str) -> ApiResult<ConnectorRecord> {
    cluster
        .store
        .connector(name)?
        .ok_or_else(|| ApiError::ConnectorNotFound(name.to_owned()))
}

fn status_of(cluster: &Cluster, rec: &ConnectorRecord) -> ApiResult<pb::ConnectorStatus> {
    let deletion = if rec.deleting {
        cluster.store.deletion(&rec.name)?
    } else {
        None
    };
    let plugins = plugins(cluster)?;
    Ok(convert::connector_status(
        rec,
        deletion.as_ref(),
        plugins.get(&rec.plugin).map(|p| &p.info),
    ))
}

fn info_of(cluster: &Cluster, rec: &ConnectorRecord) -> ApiResult<pb::ConnectorInfo> {
    let plugins = plugins(cluster)?;
    Ok(convert::connector_info(
        rec,
        plugins.get(&rec.plugin).map(|p| &p.info),
    ))
}

/// Validates a spec against the plugins registered executors offer.
fn checked_spec(
    cluster: &Cluster,
    name: &str,
    config: &std::collections::HashMap<String, String>,
) -> ApiResult<ConnectorSpec> {
    let spec = ConnectorSpec::try_from(RawConnector { name, config })?;
    let plugins = plugins(cluster)?;
    let Some(plugin) = plugins.get(&spec.plugin) else {
        return Err(ApiError::InvalidArgument {
            field: "config[connector.class]".into(),
            reason: format!(
                "unknown plugin {:?}: no registered executor offers it",
                spec.plugin
            ),
        });
    };
    convert::validate_spec(&spec, &convert::full_def(Some(&plugin.info)))?;
    Ok(spec)
}

/// Refuses a config change that would orphan what the current config provisioned: the
/// deletion's cleanup runs the connector's *current* plugin with its *current* config,
/// so a new `connector.class`, or a new value of a key the plugin marks immutable (the
/// database, the file), would make it clean up the wrong place. Values compared are the
/// effective ones (given, or the key's default).
///
/// # Errors
/// [`ApiError::ImmutableConfig`] (FAILED_PRECONDITION) naming `config[<key>]`.
fn check_immutable(
    name: &str,
    def: &wharf::sdk::ConfigDef,
    old: &wharf::sdk::ConfigMap,
    new: &wharf::sdk::ConfigMap,
) -> ApiResult<()> {
    let class = crate::model::CONNECTOR_CLASS;
    let shown = |key: &str, v: Option<&String>| -> String {
        match v {
            None => "unset".to_owned(),
            Some(v) => {
                let one: wharf::sdk::ConfigMap =
                    [(key.to_owned(), v.clone())].into_iter().collect();
                def.redact(&one)
                    .get(key)
                    .map_or_else(String::new, |v| format!("{v:?}"))
            }
        }
    };
    if old.get(class) != new.get(class) {
        return Err(ApiError::ImmutableConfig {
            name: name.to_owned(),
            field: format!("config[{class}]"),
            change: format!("{} -> {}", shown(class, old.get(class)), shown(class, new.get(class))),
            why: "the deletion's cleanup would run the new plugin and leave behind what the old one provisioned".into(),
        });
    }
    for key in def.keys.iter().filter(|k| k.immutable) {
        let effective =
            |c: &wharf::sdk::ConfigMap| c.get(&key.name).or(key.default.as_ref()).cloned();
        let (was, now) = (effective(old), effective(new));
        if was != now {
            return Err(ApiError::ImmutableConfig {
                name: name.to_owned(),
                field: format!("config[{}]", key.name),
                change: format!(
                    "{} -> {}",
                    shown(&key.name, was.as_ref()),
                    shown(&key.name, now.as_ref())
                ),
                why: format!(
                    "plugin {:?} marks it immutable (it names where the connector's external objects live), and the deletion's cleanup would look only in the new place",
                    old.get(class).map_or("", String::as_str)
                ),
            });
        }
    }
    Ok(())
}

/// The first unfinished cleanup step that has an error, for the DEADLINE_EXCEEDED answer
/// of a waiting delete: `"; first unfinished step: task 0 FAILED after 5 attempts: ..."`.
fn pending_detail(d: Option<&DeletionRecord>) -> String {
    let Some(step) = d.and_then(|d| {
        d.steps
            .iter()
            .find(|s| !s.state.is_final() && !s.last_error.is_empty())
    }) else {
        return String::new();
    };
    let which = match step.task {
        Some(t) => format!("task {t}"),
        None => "connector instance".to_owned(),
    };
    format!(
        "; first unfinished step: {which} {} after {} attempts: {}",
        format!("{:?}", step.state).to_uppercase(),
        step.attempts,
        step.last_error
    )
}

/// Sets the target state of a connector that is not being deleted.
fn set_target(
    cluster: &Cluster,
    name: &str,
    target: TargetState,
) -> ApiResult<pb::ConnectorStatus> {
    convert::parse_name(name)?;
    let rec = existing(cluster, name)?;
    if rec.deleting {
        return Err(ApiError::StillDeleting(name.to_owned()));
    }
    let mut refused = false;
    cluster.modify_connector(name, |r| {
        if r.deleting {
            refused = true;
            return None;
        }
        r.target = target;
        Some(())
    })?;
    if refused {
        return Err(ApiError::StillDeleting(name.to_owned()));
    }
    info!(connector = %name, ?target, "target state set");
    status_of(cluster, &existing(cluster, name)?)
}

fn offsets_pb(offsets: Vec<(String, String)>) -> Vec<pb::SourceOffset> {
    offsets
        .into_iter()
        .map(|(partition, offset)| pb::SourceOffset { partition, offset })
        .collect()
}

/// KIP-875: offsets may change only while nothing runs.
fn require_stopped(rec: &ConnectorRecord) -> ApiResult<()> {
    if rec.deleting {
        return Err(ApiError::StillDeleting(rec.name.clone()));
    }
    let all_stopped = rec.connector.state == InstanceState::Stopped
        && rec.tasks.iter().all(|t| t.state == InstanceState::Stopped);
    if rec.target != TargetState::Stopped || !all_stopped {
        return Err(ApiError::WrongState {
            name: rec.name.clone(),
            reason: "is not STOPPED: stop it (StopConnector) and wait for STOPPED before changing offsets".into(),
        });
    }
    Ok(())
}

fn check_json_object(field: String, text: &str) -> ApiResult<()> {
    if text.len() > MAX_OFFSET_JSON_BYTES {
        return Err(ApiError::InvalidArgument {
            field,
            reason: format!("is longer than {MAX_OFFSET_JSON_BYTES} bytes"),
        });
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(_)) => Ok(()),
        _ => Err(ApiError::InvalidArgument {
            field,
            reason: "is not a JSON object".into(),
        }),
    }
}

/// How long a forced DeleteConnector waits for the finalizer to carry the force out, in
/// milliseconds (it is woken at once; this bounds a stalled store).
const FORCE_WAIT_MS: u64 = 10_000;

/// Waits until connector `name` is gone from the store, at most until `deadline`.
async fn wait_gone(
    cluster: &Cluster,
    changes: &mut tokio::sync::broadcast::Receiver<String>,
    name: &str,
    deadline: tokio::time::Instant,
) -> ApiResult<()> {
    while cluster.store.connector(name)?.is_some() {
        match tokio::time::timeout_at(deadline, changes.recv()).await {
            Err(_) => break,
            Ok(Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => break,
        }
    }
    Ok(())
}

impl AdminService {
    async fn delete(
        &self,
        req: pb::DeleteConnectorRequest,
    ) -> ApiResult<pb::DeleteConnectorResponse> {
        let cluster = &self.cluster;
        convert::parse_name(&req.name)?;
        let mut changes = cluster.subscribe();
        let mut recorded = false;
        for _ in 0..DELETE_RECORD_ATTEMPTS {
            let rec = existing(cluster, &req.name)?;
            if rec.deleting {
                // Deleting again: run failed steps once more now, unless forcing, which
                // skips them (a retry started first would run one more cleanup).
                if !req.force {
                    finalizer::request_retry(cluster, &req.name)?;
                }
                recorded = true;
                break;
            }
            let offsets = cluster.store.offsets(&req.name)?;
            let d = DeletionRecord::seal(&rec, offsets, !req.keep_resources, now_ms());
            if cluster.store.start_deletion(&rec, &d)? {
                info!(connector = %req.name, generation_next = rec.next_generation,
                    cleanup = !req.keep_resources, "deletion recorded");
                cluster.changed(&req.name);
                recorded = true;
                break;
            }
        }
        if !recorded {
            return Err(ApiError::Contended(req.name));
        }
        let mut skipped_tasks = Vec::new();
        let mut connector_cleanup_skipped = false;
        if req.force && finalizer::request_force(cluster, &req.name)? {
            // The finalizer carries the force out on its next pass (at once: it was woken).
            let deadline = tokio::time::Instant::now() + Duration::from_millis(FORCE_WAIT_MS);
            wait_gone(cluster, &mut changes, &req.name, deadline).await?;
            if let Some(d) = cluster.finished_deletion(&req.name) {
                (skipped_tasks, connector_cleanup_skipped) = finalizer::forced_skips(&d);
            }
        }
        let rec = if req.wait {
            let ms = if req.wait_timeout_ms == 0 {
                DEFAULT_DELETE_WAIT_MS
            } else {
                req.wait_timeout_ms
            };
            let deadline = tokio::time::Instant::now() + Duration::from_millis(u64::from(ms));
            wait_gone(cluster, &mut changes, &req.name, deadline).await?;
            let rec = cluster.store.connector(&req.name)?;
            // An OK answer to a waiting delete means "gone": a script running
            // `DeleteConnector ... && next-step` must not go on while cleanup is pending.
            if rec.is_some() {
                return Err(ApiError::DeletionPending {
                    detail: pending_detail(cluster.store.deletion(&req.name)?.as_ref()),
                    name: req.name,
                    waited_ms: ms,
                });
            }
            rec
        } else {
            cluster.store.connector(&req.name)?
        };
        Ok(pb::DeleteConnectorResponse {
            deleted: rec.is_none(),
            status: match &rec {
                Some(r) => Some(status_of(cluster, r)?),
                None => None,
            },
            skipped_tasks,
            connector_cleanup_skipped,
        })
    }

    fn restart(
        &self,
        name: &str,
        task: Option<u32>,
        include_tasks: bool,
        only_failed: bool,
    ) -> ApiResult<pb::ConnectorStatus> {
        let cluster = &self.cluster;
        convert::parse_name(name)?;
        let rec = existing(cluster, name)?;
        if rec.deleting {
            return Err(ApiError::StillDeleting(name.to_owned()));
        }
        if rec.target == TargetState::Stopped {
            return Err(ApiError::WrongState {
                name: name.to_owned(),
                reason: "is STOPPED: resume it instead of restarting".into(),
            });
        }
        if let Some(t) = task
            && t as usize >= rec.tasks.len()
        {
            return Err(ApiError::InvalidArgument {
                field: "task".into(),
                reason: format!(
                    "connector has {} tasks; task {t} does not exist",
                    rec.tasks.len()
                ),
            });
        }
        let mut refused = false;
        cluster.modify_connector(name, |r| {
            if r.deleting {
                refused = true;
                return None;
            }
            let pick =
                |i: &crate::model::Instance| !only_failed || i.state == InstanceState::Failed;
            match task {
                Some(t) => {
                    let inst = r.tasks.get_mut(t as usize)?;
                    inst.restart = true;
                    inst.state = inst.state.on(InstanceEvent::RestartRequested);
                }
                None => {
                    if pick(&r.connector) {
                        r.connector.restart = true;
                        r.connector.state = r.connector.state.on(InstanceEvent::RestartRequested);
                    }
                    if include_tasks {
                        for t in &mut r.tasks {
                            if pick(t) {
                                t.restart = true;
                                t.state = t.state.on(InstanceEvent::RestartRequested);
                            }
                        }
                    }
                }
            }
            Some(())
        })?;
        if refused {
            return Err(ApiError::StillDeleting(name.to_owned()));
        }
        status_of(cluster, &existing(cluster, name)?)
    }
}

#[tonic::async_trait]
impl ConnectorAdmin for AdminService {
    async fn create_connector(
        &self,
        request: Request<pb::CreateConnectorRequest>,
    ) -> Result<Response<pb::CreateConnectorResponse>, Status> {
        let req = request.into_inner();
        let cluster = &self.cluster;
        let spec = checked_spec(cluster, &req.name, &req.config)?;
        let target = match pb::TargetState::try_from(req.initial_state) {
            Ok(pb::TargetState::Unspecified | pb::TargetState::Started) => TargetState::Started,
            Ok(pb::TargetState::Paused) => TargetState::Paused,
            Ok(pb::TargetState::Stopped) => TargetState::Stopped,
            Err(_) => {
                return Err(ApiError::InvalidArgument {
                    field: "initial_state".into(),
                    reason: format!("{} is not a target state", req.initial_state),
                }
                .into());
            }
        };
        let rec = ConnectorRecord::new(&spec, target);
        if cluster.cleanup_in_flight(&req.name) {
            // A forced deletion of this name still has a skipped cleanup stop in flight.
            return Err(ApiError::StillDeleting(req.name).into());
        }
        match cluster
            .store
            .create_connector(&rec)
            .map_err(ApiError::from)?
        {
            CreateOutcome::Created => {}
            CreateOutcome::AlreadyExists => return Err(ApiError::AlreadyExists(req.name).into()),
            CreateOutcome::StillDeleting => return Err(ApiError::StillDeleting(req.name).into()),
        }
        info!(connector = %req.name, plugin = %spec.plugin, tasks_max = spec.tasks_max.get(), ?target, "connector created");
        cluster.changed(&req.name);
        let rec = existing(cluster, &req.name)?;
        Ok(Response::new(pb::CreateConnectorResponse {
            connector: Some(info_of(cluster, &rec)?),
        }))
    }

    async fn put_connector_config(
        &self,
        request: Request<pb::PutConnectorConfigRequest>,
    ) -> Result<Response<pb::PutConnectorConfigResponse>, Status> {
        let req = request.into_inner();
        let cluster = &self.cluster;
        convert::parse_name(&req.name)?;
        // A new plugin is refused before the config is validated against it: that is the
        // more fundamental problem, and the new plugin's errors would only distract.
        if req.config.contains_key(crate::model::CONNECTOR_CLASS)
            && let Some(rec) = cluster.store.connector(&req.name).map_err(ApiError::from)?
            && !rec.deleting
        {
            let given: wharf::sdk::ConfigMap = req
                .config
                .iter()
                .filter(|(k, _)| k.as_str() == crate::model::CONNECTOR_CLASS)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let runtime = wharf::sdk::runtime_config_def();
            let old_class: wharf::sdk::ConfigMap = rec
                .config
                .iter()
                .filter(|(k, _)| k.as_str() == crate::model::CONNECTOR_CLASS)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            check_immutable(&req.name, &runtime, &old_class, &given)?;
        }
        let spec = checked_spec(cluster, &req.name, &req.config)?;
        for _ in 0..2 {
            match cluster.store.connector(&req.name).map_err(ApiError::from)? {
                None => {
                    if cluster.cleanup_in_flight(&req.name) {
                        return Err(ApiError::StillDeleting(req.name).into());
                    }
                    let rec = ConnectorRecord::new(&spec, TargetState::Started);
                    match cluster
                        .store
                        .create_connector(&rec)
                        .map_err(ApiError::from)?
                    {
                        CreateOutcome::Created => {
                            info!(connector = %req.name, plugin = %spec.plugin, "connector created by put");
                            cluster.changed(&req.name);
                            let rec = existing(cluster, &req.name)?;
                            return Ok(Response::new(pb::PutConnectorConfigResponse {
                                connector: Some(info_of(cluster, &rec)?),
                                created: true,
                            }));
                        }
                        CreateOutcome::StillDeleting => {
                            return Err(ApiError::StillDeleting(req.name).into());
                        }
                        CreateOutcome::AlreadyExists => continue,
                    }
                }
                Some(rec) if rec.deleting => return Err(ApiError::StillDeleting(req.name).into()),
                Some(rec) => {
                    let def =
                        convert::full_def(plugins(cluster)?.get(&rec.plugin).map(|p| &p.info));
                    check_immutable(&req.name, &def, &rec.config, &spec.config)?;
                    let mut refused = false;
                    let mut immutable = None;
                    cluster
                        .modify_connector(&req.name, |r| {
                            if r.deleting {
                                refused = true;
                                return None;
                            }
                            // Checked again on the record being written: a put may have
                            // landed since the read above.
                            if let Err(e) = check_immutable(&r.name, &def, &r.config, &spec.config)
                            {
                                immutable = Some(e);
                                return None;
                            }
                            if r.config != spec.config {
                                r.config = spec.config.clone();
                                r.plugin = spec.plugin.clone();
                                r.tasks_max = spec.tasks_max.get();
                                r.config_changed = true;
                                r.task_configs_stale = true;
                            }
                            Some(())
                        })
                        .map_err(ApiError::from)?;
                    if refused {
                        return Err(ApiError::StillDeleting(req.name).into());
                    }
                    if let Some(e) = immutable {
                        return Err(e.into());
                    }
                    info!(connector = %req.name, tasks_max = spec.tasks_max.get(), "connector config replaced");
                    let rec = existing(cluster, &req.name)?;
                    return Ok(Response::new(pb::PutConnectorConfigResponse {
                        connector: Some(info_of(cluster, &rec)?),
                        created: false,
                    }));
                }
            }
        }
        Err(ApiError::Contended(req.name).into())
    }

    async fn get_connector(
        &self,
        request: Request<pb::GetConnectorRequest>,
    ) -> Result<Response<pb::GetConnectorResponse>, Status> {
        let req = request.into_inner();
        convert::parse_name(&req.name)?;
        let rec = existing(&self.cluster, &req.name)?;
        Ok(Response::new(pb::GetConnectorResponse {
            connector: Some(info_of(&self.cluster, &rec)?),
        }))
    }

    async fn list_connectors(
        &self,
        request: Request<pb::ListConnectorsRequest>,
    ) -> Result<Response<pb::ListConnectorsResponse>, Status> {
        let req = request.into_inner();
        let cluster = &self.cluster;
        let mut out = Vec::new();
        for rec in cluster.store.connectors().map_err(ApiError::from)? {
            out.push(pb::ConnectorListEntry {
                status: if req.expand_status {
                    Some(status_of(cluster, &rec)?)
                } else {
                    None
                },
                name: rec.name,
            });
        }
        Ok(Response::new(pb::ListConnectorsResponse {
            connectors: out,
        }))
    }

    async fn get_connector_status(
        &self,
        request: Request<pb::GetConnectorStatusRequest>,
    ) -> Result<Response<pb::GetConnectorStatusResponse>, Status> {
        let req = request.into_inner();
        convert::parse_name(&req.name)?;
        let rec = existing(&self.cluster, &req.name)?;
        Ok(Response::new(pb::GetConnectorStatusResponse {
            status: Some(status_of(&self.cluster, &rec)?),
        }))
    }

    async fn validate_connector_config(
        &self,
        request: Request<pb::ValidateConnectorConfigRequest>,
    ) -> Result<Response<pb::ValidateConnectorConfigResponse>, Status> {
        let req = request.into_inner();
        convert::check_config_size(&req.config)?;
        let plugins = plugins(&self.cluster)?;
        let plugin_name = req
            .config
            .get(crate::model::CONNECTOR_CLASS)
            .cloned()
            .unwrap_or_default();
        let plugin = plugins.get(&plugin_name);
        let def = convert::full_def(plugin.map(|p| &p.info));
        let config: wharf::sdk::ConfigMap = req
            .config
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let key_defs: BTreeMap<String, pb::ConfigKeyDef> = def
            .keys
            .iter()
            .map(|k| (k.name.clone(), wharf::wire::config_key_def(k)))
            .collect();
        let mut configs: Vec<pb::ConfigValueInfo> = def
            .validate(&config)
            .into_iter()
            .map(|v| pb::ConfigValueInfo {
                definition: key_defs.get(&v.name).cloned(),
                name: v.name,
                value: v.value.unwrap_or_default(),
                errors: v.errors,
            })
            .collect();
        if !plugin_name.is_empty()
            && plugin.is_none()
            && let Some(c) = configs
                .iter_mut()
                .find(|c| c.name == crate::model::CONNECTOR_CLASS)
        {
            c.errors.push(format!(
                "unknown plugin {plugin_name:?}: no registered executor offers it"
            ));
        }
        let redacted = def.redact(&config);
        for (k, v) in &redacted {
            if def.key(k).is_none() {
                configs.push(pb::ConfigValueInfo {
                    name: k.clone(),
                    value: v.clone(),
                    errors: Vec::new(),
                    definition: None,
                });
            }
        }
        let error_count = configs.iter().map(|c| c.errors.len() as u32).sum();
        Ok(Response::new(pb::ValidateConnectorConfigResponse {
            plugin: plugin_name,
            error_count,
            configs,
        }))
    }

    async fn list_connector_plugins(
        &self,
        _request: Request<pb::ListConnectorPluginsRequest>,
    ) -> Result<Response<pb::ListConnectorPluginsResponse>, Status> {
        let plugins = plugins(&self.cluster)?
            .into_values()
            .filter(|p| !p.live_on.is_empty())
            .map(|p| pb::ConnectorPluginInfo {
                plugin: Some(p.info),
                executor_ids: p.live_on,
            })
            .collect();
        Ok(Response::new(pb::ListConnectorPluginsResponse { plugins }))
    }

    async fn pause_connector(
        &self,
        request: Request<pb::PauseConnectorRequest>,
    ) -> Result<Response<pb::PauseConnectorResponse>, Status> {
        let status = set_target(
            &self.cluster,
            &request.into_inner().name,
            TargetState::Paused,
        )?;
        Ok(Response::new(pb::PauseConnectorResponse {
            status: Some(status),
        }))
    }

    async fn resume_connector(
        &self,
        request: Request<pb::ResumeConnectorRequest>,
    ) -> Result<Response<pb::ResumeConnectorResponse>, Status> {
        let status = set_target(
            &self.cluster,
            &request.into_inner().name,
            TargetState::Started,
        )?;
        Ok(Response::new(pb::ResumeConnectorResponse {
            status: Some(status),
        }))
    }

    async fn stop_connector(
        &self,
        request: Request<pb::StopConnectorRequest>,
    ) -> Result<Response<pb::StopConnectorResponse>, Status> {
        let status = set_target(
            &self.cluster,
            &request.into_inner().name,
            TargetState::Stopped,
        )?;
        Ok(Response::new(pb::StopConnectorResponse {
            status: Some(status),
        }))
    }

    async fn restart_connector(
        &self,
        request: Request<pb::RestartConnectorRequest>,
    ) -> Result<Response<pb::RestartConnectorResponse>, Status> {
        let req = request.into_inner();
        let status = self.restart(&req.name, None, req.include_tasks, req.only_failed)?;
        Ok(Response::new(pb::RestartConnectorResponse {
            status: Some(status),
        }))
    }

    async fn restart_task(
        &self,
        request: Request<pb::RestartTaskRequest>,
    ) -> Result<Response<pb::RestartTaskResponse>, Status> {
        let req = request.into_inner();
        let status = self.restart(&req.name, Some(req.task), false, false)?;
        Ok(Response::new(pb::RestartTaskResponse {
            status: Some(status),
        }))
    }

    async fn delete_connector(
        &self,
        request: Request<pb::DeleteConnectorRequest>,
    ) -> Result<Response<pb::DeleteConnectorResponse>, Status> {
        Ok(Response::new(self.delete(request.into_inner()).await?))
    }

    async fn retry_cleanup(
        &self,
        request: Request<pb::RetryCleanupRequest>,
    ) -> Result<Response<pb::RetryCleanupResponse>, Status> {
        let req = request.into_inner();
        let cluster = &self.cluster;
        convert::parse_name(&req.name)?;
        let rec = existing(cluster, &req.name)?;
        if !rec.deleting || !finalizer::request_retry(cluster, &req.name).map_err(ApiError::from)? {
            return Err(ApiError::WrongState {
                name: req.name,
                reason: "is not being deleted".into(),
            }
            .into());
        }
        let status = match cluster.store.connector(&req.name).map_err(ApiError::from)? {
            Some(r) => Some(status_of(cluster, &r)?),
            None => None,
        };
        Ok(Response::new(pb::RetryCleanupResponse { status }))
    }

    async fn get_offsets(
        &self,
        request: Request<pb::GetOffsetsRequest>,
    ) -> Result<Response<pb::GetOffsetsResponse>, Status> {
        let req = request.into_inner();
        convert::parse_name(&req.name)?;
        existing(&self.cluster, &req.name)?;
        let offsets = self
            .cluster
            .store
            .offsets(&req.name)
            .map_err(ApiError::from)?;
        Ok(Response::new(pb::GetOffsetsResponse {
            offsets: offsets_pb(offsets),
        }))
    }

    async fn alter_offsets(
        &self,
        request: Request<pb::AlterOffsetsRequest>,
    ) -> Result<Response<pb::AlterOffsetsResponse>, Status> {
        let req = request.into_inner();
        convert::parse_name(&req.name)?;
        if req.offsets.len() > MAX_OFFSETS_PER_REQUEST {
            return Err(ApiError::InvalidArgument {
                field: "offsets".into(),
                reason: format!("more than {MAX_OFFSETS_PER_REQUEST} entries"),
            }
            .into());
        }
        for (i, o) in req.offsets.iter().enumerate() {
            check_json_object(format!("offsets[{i}].partition"), &o.partition)?;
            if !o.offset.is_empty() {
                check_json_object(format!("offsets[{i}].offset"), &o.offset)?;
            }
        }
        let rec = existing(&self.cluster, &req.name)?;
        require_stopped(&rec)?;
        let pairs: Vec<(String, String)> = req
            .offsets
            .into_iter()
            .map(|o| (o.partition, o.offset))
            .collect();
        self.cluster
            .store
            .put_offsets(&req.name, &pairs)
            .map_err(ApiError::from)?;
        info!(connector = %req.name, partitions = pairs.len(), "offsets altered");
        Ok(Response::new(pb::AlterOffsetsResponse {
            message: format!("offsets of {} partitions written", pairs.len()),
        }))
    }

    async fn reset_offsets(
        &self,
        request: Request<pb::ResetOffsetsRequest>,
    ) -> Result<Response<pb::ResetOffsetsResponse>, Status> {
        let req = request.into_inner();
        convert::parse_name(&req.name)?;
        let rec = existing(&self.cluster, &req.name)?;
        require_stopped(&rec)?;
        self.cluster
            .store
            .reset_offsets(&req.name)
            .map_err(ApiError::from)?;
        info!(connector = %req.name, "offsets reset");
        Ok(Response::new(pb::ResetOffsetsResponse {
            message: "offsets removed".into(),
        }))
    }

    async fn list_executors(
        &self,
        _request: Request<pb::ListExecutorsRequest>,
    ) -> Result<Response<pb::ListExecutorsResponse>, Status> {
        let cluster = &self.cluster;
        let connectors = cluster.store.connectors().map_err(ApiError::from)?;
        let view = cluster.executor_view().map_err(ApiError::from)?;
        let executors = view
            .all
            .values()
            .cloned()
            .map(|e| {
                let state = match view.health.get(&e.id) {
                    Some(Host::Live) => pb::ExecutorState::Alive,
                    Some(Host::Unresponsive) => pb::ExecutorState::Unresponsive,
                    Some(Host::Lost) | None => pb::ExecutorState::Lost,
                };
                let on = |i: &crate::model::Instance| {
                    i.executor.as_deref() == Some(e.id.as_str())
                        && i.epoch == e.epoch
                        && i.state.has_live_instance()
                };
                pb::ExecutorInfo {
                    address: e.address.clone(),
                    epoch: e.epoch,
                    state: state as i32,
                    unreachable_error: cluster.unreachable_error(&e.id),
                    plugins: e.plugins.iter().map(|p| p.name.clone()).collect(),
                    last_heartbeat_ms: cluster.last_heartbeat_ms(&e.id),
                    connectors: connectors.iter().filter(|c| on(&c.connector)).count() as u32,
                    tasks: connectors
                        .iter()
                        .map(|c| c.tasks.iter().filter(|t| on(t)).count() as u32)
                        .sum(),
                    id: e.id,
                }
            })
            .collect();
        Ok(Response::new(pb::ListExecutorsResponse { executors }))
    }

    type WatchConnectorStream = ReceiverStream<Result<pb::WatchConnectorResponse, Status>>;

    async fn watch_connector(
        &self,
        request: Request<pb::WatchConnectorRequest>,
    ) -> Result<Response<Self::WatchConnectorStream>, Status> {
        let req = request.into_inner();
        convert::parse_name(&req.name)?;
        let cluster = self.cluster.clone();
        let mut changes = cluster.subscribe();
        let rec = existing(&cluster, &req.name)?;
        let first = status_of(&cluster, &rec)?;
        let (tx, rx) = tokio::sync::mpsc::channel(WATCH_BUFFER);
        let name = req.name;
        // Ends when the client goes away or the connector is gone; errors end the stream
        // with a status, never a panic.
        wharf::task::spawn(
            wharf::task::TaskKind::Detached,
            "watch connector",
            async move {
                let event = |t: pb::ConnectorEventType, s: Option<pb::ConnectorStatus>| {
                    pb::WatchConnectorResponse {
                        r#type: t as i32,
                        status: s,
                        time_ms: now_ms(),
                    }
                };
                if tx
                    .send(Ok(event(
                        pb::ConnectorEventType::Snapshot,
                        Some(first.clone()),
                    )))
                    .await
                    .is_err()
                {
                    return;
                }
                let mut last = first;
                loop {
                    tokio::select! {
                        () = tx.closed() => return,
                        r = changes.recv() => match r {
                            Ok(n) if n != name => continue,
                            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                        },
                    }
                    let current = match cluster.store.connector(&name) {
                        Ok(Some(rec)) => status_of(&cluster, &rec),
                        Ok(None) => {
                            // The last status seen, with the deletion's steps as they ended.
                            let fin = cluster.finished_deletion(&name).map(|d| {
                                let mut s = last.clone();
                                s.deletion = Some(convert::deletion_status(&d));
                                s
                            });
                            let _ = tx
                                .send(Ok(event(pb::ConnectorEventType::Deleted, fin)))
                                .await;
                            return;
                        }
                        Err(e) => Err(ApiError::from(e)),
                    };
                    match current {
                        Ok(s) if s != last => {
                            last = s.clone();
                            if tx
                                .send(Ok(event(pb::ConnectorEventType::StatusChanged, Some(s))))
                                .await
                                .is_err()
                            {
                                return;
                            }
                        }
                        Ok(_) => {}
                        Err(e) => {
                            let _ = tx.send(Err(e.into())).await;
                            return;
                        }
                    }
                }
            },
        );
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_must_be_json_objects() {
        assert!(check_json_object("p".into(), "{\"a\":1}").is_ok());
        assert!(check_json_object("p".into(), "[1]").is_err());
        assert!(check_json_object("p".into(), "nope").is_err());
    }

    #[test]
    fn a_running_connector_refuses_offset_changes() {
        let spec = ConnectorSpec::try_from(RawConnector {
            name: "c",
            config: &[("connector.class".to_owned(), "p".to_owned())]
                .into_iter()
                .collect(),
        })
        .unwrap();
        let rec = ConnectorRecord::new(&spec, TargetState::Started);
        assert!(matches!(
            require_stopped(&rec),
            Err(ApiError::WrongState { .. })
        ));
    }
}
