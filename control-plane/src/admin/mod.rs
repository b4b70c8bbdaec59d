//! The admin core: every rule of the operator's API in one place, over domain inputs
//! (names, config maps, target states, flags). Two thin adapters call it: the gRPC
//! `ConnectorAdmin` service (`grpc::admin`) and the Kafka Connect REST gateway (`rest`).
//! Each maps [`ApiError`] once (to `tonic::Status`, and to Kafka Connect's HTTP status
//! with its `{"error_code", "message"}` body). Answers are the redacted views of
//! `wharf.v1` (`ConnectorInfo`, `ConnectorStatus`, ...), which both adapters render.
//!
//! Both adapters put [`guard::Guard`] in front of it: authentication, roles and the audit
//! trail are decided once, here, for gRPC and REST alike.
//!
//! Handlers validate at the edge, write the store, wake the herder, and answer. They call
//! an executor for one thing only: the plugin's own config checks (its validators, which
//! are code the control plane does not link) before a config is reported valid or stored,
//! bounded and optional ([`plugin_check`]).

pub mod error;
pub mod guard;
pub mod plugin_check;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};
use wharf::pb::v1 as pb;
use wharf::sdk::REDACTED;

pub use self::error::ApiError;
use crate::auth::{AdminAction, AuthError, Principal};
use crate::grpc::convert::{
    self, KnownPlugin, MAX_OFFSET_JSON_BYTES, MAX_OFFSETS_PER_REQUEST, RawConnector,
};
use crate::model::{
    ConnectorRecord, ConnectorSpec, DeletionRecord, InstanceEvent, InstanceState, TargetState,
};
use crate::plan::unit::Host;
use crate::reconcile::{Cluster, finalizer, now_ms};
use crate::store::CreateOutcome;

/// Wait bound of a waiting delete with no timeout given, in milliseconds.
pub const DEFAULT_DELETE_WAIT_MS: u32 = 30_000;
/// Attempts to record a deletion while the connector keeps changing.
const DELETE_RECORD_ATTEMPTS: usize = 16;
/// How long a forced delete waits for the finalizer to carry the force out, in
/// milliseconds (it is woken at once; this bounds a stalled store).
const FORCE_WAIT_MS: u64 = 10_000;

/// Waits until connector `name` is gone from the store, at most until `deadline`.
async fn wait_gone(
    cluster: &Cluster,
    changes: &mut tokio::sync::broadcast::Receiver<String>,
    name: &str,
    deadline: tokio::time::Instant,
) -> Result<(), ApiError> {
    while cluster.store.connector(name)?.is_some() {
        match tokio::time::timeout_at(deadline, changes.recv()).await {
            Err(_) => break,
            Ok(Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => break,
        }
    }
    Ok(())
}

/// One connector of [`Admin::list`]: its name, and its info and status when asked for.
#[derive(Debug, Clone)]
pub struct ListedConnector {
    /// The connector's name.
    pub name: String,
    /// Its config and task configs, secrets redacted (`with_info`).
    pub info: Option<pb::ConnectorInfo>,
    /// Its status (`with_status`).
    pub status: Option<pb::ConnectorStatus>,
}

/// The admin core over one cluster; cheap to clone.
#[derive(Clone)]
pub struct Admin {
    cluster: Arc<Cluster>,
    /// Executors' plugin descriptors, decoded once per registration.
    plugins: Arc<convert::PluginCache>,
}

/// How a deletion is asked for (`DeleteConnector`, `DELETE /connectors/{name}`).
#[derive(Debug, Clone, Copy, Default)]
pub struct DeleteOptions {
    /// Skip the cleanup steps still pending (external resources may remain).
    pub force: bool,
    /// Answer only once the connector is gone (or fail with [`ApiError::DeletionPending`]).
    pub wait: bool,
    /// Wait bound in milliseconds; 0 means [`DEFAULT_DELETE_WAIT_MS`].
    pub wait_timeout_ms: u32,
    /// Stop with `connector_deleted = false`: keep what the plugin provisioned.
    pub keep_resources: bool,
}

/// What a restart covers (KIP-745).
#[derive(Debug, Clone, Copy)]
pub enum RestartScope {
    /// One task.
    Task(u32),
    /// The connector instance, and its tasks when `include_tasks`; only FAILED ones when
    /// `only_failed`.
    Connector {
        /// Restart the tasks too.
        include_tasks: bool,
        /// Only instances that are FAILED.
        only_failed: bool,
    },
}

type ApiResult<T> = Result<T, ApiError>;

impl Admin {
    /// The core over `cluster`.
    pub fn new(cluster: Arc<Cluster>) -> Self {
        Self {
            cluster,
            plugins: Arc::default(),
        }
    }

    /// The cluster (for the watch stream of the gRPC adapter).
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Plugins of registered executors, by name.
    fn plugins(&self) -> ApiResult<BTreeMap<String, KnownPlugin>> {
        let cluster = &self.cluster;
        let execs = cluster.store.executors()?;
        Ok(convert::known_plugins(
            &execs,
            &|e| !e.lost && cluster.holds_lease(&e.id, e.epoch),
            &self.plugins,
        ))
    }

    fn existing(&self, name: &str) -> ApiResult<ConnectorRecord> {
        convert::parse_name(name)?;
        self.cluster
            .store
            .connector(name)?
            .ok_or_else(|| ApiError::ConnectorNotFound(name.to_owned()))
    }

    /// The status of `rec`: DELETING with the cleanup steps while a deletion runs.
    ///
    /// # Errors
    /// Store errors.
    pub fn status_of(&self, rec: &ConnectorRecord) -> ApiResult<pb::ConnectorStatus> {
        self.status_with(rec, &self.plugins()?)
    }

    /// [`Admin::status_of`] with the known plugins already read: a list reads them once
    /// for every connector (they are decoded from every executor record, issue 19).
    fn status_with(
        &self,
        rec: &ConnectorRecord,
        plugins: &BTreeMap<String, KnownPlugin>,
    ) -> ApiResult<pb::ConnectorStatus> {
        let deletion = if rec.deleting {
            self.cluster.store.deletion(&rec.name)?
        } else {
            None
        };
        Ok(convert::connector_status(
            rec,
            deletion.as_ref(),
            plugins.get(&rec.plugin).map(|p| &p.info),
        ))
    }

    fn info_of(&self, rec: &ConnectorRecord) -> ApiResult<pb::ConnectorInfo> {
        Ok(info_with(rec, &self.plugins()?))
    }

    /// Validates a spec against the plugins registered executors offer.
    fn checked_spec(
        plugins: &BTreeMap<String, KnownPlugin>,
        name: &str,
        config: &HashMap<String, String>,
    ) -> ApiResult<ConnectorSpec> {
        let spec = ConnectorSpec::try_from(RawConnector { name, config })?;
        let Some(plugin) = plugins.get(&spec.plugin) else {
            return Err(ApiError::InvalidArgument {
                field: "config[connector.class]".into(),
                reason: unknown_plugin(&spec.plugin),
            });
        };
        convert::validate_spec(&spec, &convert::full_def(Some(&plugin.info)))?;
        Ok(spec)
    }

    /// Runs the plugin's own checks on `spec`'s config on a live executor offering the
    /// plugin ([`plugin_check`]); when none could run them, logs at WARN and accepts
    /// (the declarative checks passed; the plugin's run at start).
    ///
    /// # Errors
    /// INVALID_ARGUMENT naming `config[<key>]` of the first key the plugin's checks
    /// refuse; store errors.
    async fn plugin_accepts(
        &self,
        plugins: &BTreeMap<String, KnownPlugin>,
        name: &str,
        spec: &ConnectorSpec,
    ) -> ApiResult<()> {
        let def = convert::full_def(plugins.get(&spec.plugin).map(|p| &p.info));
        let asked = plugin_check::ask(&self.cluster, &spec.plugin, &def, &spec.config).await?;
        let check = plugin_check::decide(asked, &spec.plugin);
        if let plugin_check::PluginCheck::NotRun(why) = &check {
            warn!(connector = %name, plugin = %spec.plugin, reason = %why,
                "the plugin's own config checks did not run; config accepted on the declarative checks, the plugin checks it at start");
        }
        match plugin_check::refusal(&check) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The config to store for a create or put: a secret value given as the
    /// [`REDACTED`] placeholder (what GET answered) keeps the stored secret, so that
    /// GET config → PUT config never stores the literal placeholder. A placeholder with
    /// no stored secret behind it is refused.
    fn with_kept_secrets(
        plugins: &BTreeMap<String, KnownPlugin>,
        stored: Option<&ConnectorRecord>,
        config: &HashMap<String, String>,
    ) -> ApiResult<HashMap<String, String>> {
        let plugin = stored
            .map(|r| r.plugin.as_str())
            .or_else(|| {
                config
                    .get(crate::model::CONNECTOR_CLASS)
                    .map(String::as_str)
            })
            .and_then(|p| plugins.get(p.trim()))
            .map(|p| &p.info);
        let def = convert::full_def(plugin);
        kept_secrets(&def, stored.map(|r| &r.config), config)
    }

    /// CreateConnector / `POST /connectors`.
    ///
    /// The plugin's own checks run on a live executor offering it before anything is
    /// stored ([`plugin_check`]; when none can, the config is accepted on the declarative
    /// checks).
    ///
    /// # Errors
    /// INVALID_ARGUMENT naming the field (a plugin validator's refusal too);
    /// ALREADY_EXISTS; FAILED_PRECONDITION while a deletion of the name runs.
    pub async fn create(
        &self,
        name: &str,
        config: &HashMap<String, String>,
        target: TargetState,
        caller: &Principal,
    ) -> ApiResult<pb::ConnectorInfo> {
        let cluster = &self.cluster;
        convert::parse_name(name)?;
        // Decoded once per call (every executor's plugin descriptors; issue 19).
        let plugins = self.plugins()?;
        let config = Self::with_kept_secrets(&plugins, None, config)?;
        let spec = Self::checked_spec(&plugins, name, &config)?;
        check_cleanup_policy(caller, AdminAction::CreateConnector, false, &config)?;
        self.plugin_accepts(&plugins, name, &spec).await?;
        let rec = ConnectorRecord::new(&spec, target);
        if cluster.deletions.in_flight(name) {
            // A forced deletion of this name still has a skipped cleanup stop in flight.
            return Err(ApiError::StillDeleting(name.to_owned()));
        }
        match cluster.store.create_connector(&rec)? {
            CreateOutcome::Created => {}
            CreateOutcome::AlreadyExists => return Err(ApiError::AlreadyExists(name.to_owned())),
            CreateOutcome::StillDeleting => return Err(ApiError::StillDeleting(name.to_owned())),
        }
        info!(connector = %name, plugin = %spec.plugin, tasks_max = spec.tasks_max.get(), ?target, "connector created");
        cluster.changed(name);
        Ok(info_with(&self.existing(name)?, &plugins))
    }

    /// PutConnectorConfig / `PUT /connectors/{name}/config`: creates or replaces; the
    /// flag says which.
    ///
    /// # Errors
    /// As [`Admin::create`] (the plugin's own checks included); FAILED_PRECONDITION for an
    /// immutable key's change, and while the connector is being deleted (checked first:
    /// no other complaint about the config matters then).
    pub async fn put_config(
        &self,
        name: &str,
        config: &HashMap<String, String>,
        caller: &Principal,
    ) -> ApiResult<(pb::ConnectorInfo, bool)> {
        let cluster = &self.cluster;
        convert::parse_name(name)?;
        let stored = cluster.store.connector(name)?;
        if stored.as_ref().is_some_and(|r| r.deleting) {
            return Err(ApiError::StillDeleting(name.to_owned()));
        }
        // A new plugin is refused before the config is validated against it: that is the
        // more fundamental problem, and the new plugin's errors would only distract.
        if config.contains_key(crate::model::CONNECTOR_CLASS)
            && let Some(rec) = &stored
        {
            let only_class = |c: &wharf::sdk::ConfigMap| -> wharf::sdk::ConfigMap {
                c.iter()
                    .filter(|(k, _)| k.as_str() == crate::model::CONNECTOR_CLASS)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            };
            let given: wharf::sdk::ConfigMap =
                config.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            check_immutable(
                name,
                &wharf::sdk::runtime_config_def(),
                &only_class(&rec.config),
                &only_class(&given),
            )?;
        }
        let plugins = self.plugins()?;
        let config = Self::with_kept_secrets(&plugins, stored.as_ref(), config)?;
        let spec = Self::checked_spec(&plugins, name, &config)?;
        check_cleanup_policy(
            caller,
            AdminAction::PutConnectorConfig,
            stored
                .as_ref()
                .is_some_and(ConnectorRecord::cleanup_gives_up),
            &config,
        )?;
        self.plugin_accepts(&plugins, name, &spec).await?;
        for _ in 0..2 {
            match cluster.store.connector(name)? {
                None => {
                    if cluster.deletions.in_flight(name) {
                        return Err(ApiError::StillDeleting(name.to_owned()));
                    }
                    let rec = ConnectorRecord::new(&spec, TargetState::Started);
                    match cluster.store.create_connector(&rec)? {
                        CreateOutcome::Created => {
                            info!(connector = %name, plugin = %spec.plugin, "connector created by put");
                            cluster.changed(name);
                            return Ok((info_with(&self.existing(name)?, &plugins), true));
                        }
                        CreateOutcome::StillDeleting => {
                            return Err(ApiError::StillDeleting(name.to_owned()));
                        }
                        CreateOutcome::AlreadyExists => continue,
                    }
                }
                Some(rec) if rec.deleting => return Err(ApiError::StillDeleting(name.to_owned())),
                Some(rec) => {
                    let def = convert::full_def(plugins.get(&rec.plugin).map(|p| &p.info));
                    check_immutable(name, &def, &rec.config, &spec.config)?;
                    let mut refused = false;
                    let mut immutable = None;
                    cluster.modify_connector(name, |r| {
                        if r.deleting {
                            refused = true;
                            return None;
                        }
                        // Checked again on the record being written: a put may have
                        // landed since the read above.
                        if let Err(e) = check_immutable(&r.name, &def, &r.config, &spec.config) {
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
                    })?;
                    if refused {
                        return Err(ApiError::StillDeleting(name.to_owned()));
                    }
                    if let Some(e) = immutable {
                        return Err(e);
                    }
                    info!(connector = %name, tasks_max = spec.tasks_max.get(), "connector config replaced");
                    return Ok((info_with(&self.existing(name)?, &plugins), false));
                }
            }
        }
        Err(ApiError::Contended(name.to_owned()))
    }

    /// `PATCH /connectors/{name}/config` (KIP-477): merges `patch` into the stored config
    /// (a `None` value removes the key) and puts the result, by the rules of
    /// [`Admin::put_config`]. Secret values come back as the placeholder, which the put
    /// keeps as the stored secret.
    ///
    /// # Errors
    /// NOT_FOUND when the connector does not exist; as [`Admin::put_config`].
    pub async fn patch_config(
        &self,
        name: &str,
        patch: &BTreeMap<String, Option<String>>,
        caller: &Principal,
    ) -> ApiResult<pb::ConnectorInfo> {
        let rec = self.existing(name)?;
        if rec.deleting {
            return Err(ApiError::StillDeleting(name.to_owned()));
        }
        let mut config: HashMap<String, String> = rec.config.into_iter().collect();
        for (k, v) in patch {
            match v {
                Some(v) => config.insert(k.clone(), v.clone()),
                None => config.remove(k),
            };
        }
        Ok(self.put_config(name, &config, caller).await?.0)
    }

    /// GetConnector / `GET /connectors/{name}`.
    ///
    /// # Errors
    /// INVALID_ARGUMENT for a bad name; NOT_FOUND.
    pub fn connector(&self, name: &str) -> ApiResult<pb::ConnectorInfo> {
        self.info_of(&self.existing(name)?)
    }

    /// Every connector (DELETING ones too), sorted by name, with its info (secrets
    /// redacted) when `with_info` and its status when `with_status`: a listing of names
    /// redacts no config (issue 19: at 10,000 x 10 the redaction was a quarter of the
    /// control plane's time under a status poller that asked for none).
    ///
    /// # Errors
    /// Store errors.
    pub fn list(&self, with_info: bool, with_status: bool) -> ApiResult<Vec<ListedConnector>> {
        // A listing of names needs no plugin.
        let plugins = if with_info || with_status {
            self.plugins()?
        } else {
            BTreeMap::new()
        };
        // Each plugin's full definition once per call, not once per connector (issue 19).
        let mut defs: HashMap<String, wharf::sdk::ConfigDef> = HashMap::new();
        let mut out = Vec::new();
        for rec in self.cluster.store.connectors_shared()? {
            let status = if with_status {
                Some(self.status_with(&rec, &plugins)?)
            } else {
                None
            };
            let info = with_info.then(|| {
                let plugin = plugins.get(&rec.plugin).map(|p| &p.info);
                let def = defs
                    .entry(rec.plugin.clone())
                    .or_insert_with(|| convert::full_def(plugin));
                convert::connector_info_with(&rec, plugin, def)
            });
            out.push(ListedConnector {
                name: rec.name.clone(),
                info,
                status,
            });
        }
        Ok(out)
    }

    /// GetConnectorStatus / `GET /connectors/{name}/status`.
    ///
    /// # Errors
    /// INVALID_ARGUMENT for a bad name; NOT_FOUND.
    pub fn status(&self, name: &str) -> ApiResult<pb::ConnectorStatus> {
        self.status_of(&self.existing(name)?)
    }

    /// ValidateConnectorConfig / `PUT /connector-plugins/{class}/config/validate`: one
    /// entry per defined key (errors), then one per key nobody defines (a warning each).
    /// The plugin's own checks (validators) run on a live executor offering the plugin
    /// and their errors join their keys; when none could run them, a warning on
    /// `connector.class` says why ([`plugin_check`]).
    ///
    /// # Errors
    /// INVALID_ARGUMENT for an oversized config; store errors.
    pub async fn validate(
        &self,
        config: &HashMap<String, String>,
    ) -> ApiResult<pb::ValidateConnectorConfigResponse> {
        convert::check_config_size(config)?;
        let plugins = self.plugins()?;
        let plugin_name = config
            .get(crate::model::CONNECTOR_CLASS)
            .cloned()
            .unwrap_or_default();
        let plugin = plugins.get(&plugin_name);
        let def = convert::full_def(plugin.map(|p| &p.info));
        let config: wharf::sdk::ConfigMap =
            config.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
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
                warnings: Vec::new(),
            })
            .collect();
        if !plugin_name.is_empty()
            && plugin.is_none()
            && let Some(c) = configs
                .iter_mut()
                .find(|c| c.name == crate::model::CONNECTOR_CLASS)
        {
            c.errors.push(unknown_plugin(&plugin_name));
        }
        let redacted = def.redact(&config);
        for (k, v) in &redacted {
            if def.key(k).is_none() {
                // A key create would refuse is an error on that key, not only unknown.
                let (errors, warnings) = match convert::config_key_problem(k) {
                    Some(why) => (vec![convert::bad_key_reason(why)], Vec::new()),
                    None => (
                        Vec::new(),
                        vec![unknown_key_warning(&def, k, plugin.is_some())],
                    ),
                };
                configs.push(pb::ConfigValueInfo {
                    name: k.clone(),
                    value: v.clone(),
                    errors,
                    definition: None,
                    warnings,
                });
            }
        }
        // An unknown plugin is already the error; nobody could check for it.
        if plugin.is_some() {
            let asked = plugin_check::ask(&self.cluster, &plugin_name, &def, &config).await?;
            let check = plugin_check::decide(asked, &plugin_name);
            plugin_check::merge_into(&mut configs, &check, &redacted);
        }
        let error_count = configs.iter().map(|c| c.errors.len() as u32).sum();
        let warning_count = configs.iter().map(|c| c.warnings.len() as u32).sum();
        Ok(pb::ValidateConnectorConfigResponse {
            plugin: plugin_name,
            error_count,
            configs,
            warning_count,
        })
    }

    /// ListConnectorPlugins / `GET /connector-plugins`: plugins of live executors.
    ///
    /// # Errors
    /// Store errors.
    pub fn plugin_list(&self) -> ApiResult<Vec<pb::ConnectorPluginInfo>> {
        Ok(self
            .plugins()?
            .into_values()
            .filter(|p| !p.live_on.is_empty())
            .map(|p| pb::ConnectorPluginInfo {
                plugin: Some(p.info),
                executor_ids: p.live_on,
            })
            .collect())
    }

    /// `GET /connector-plugins/{class}/config` (KIP-769): the plugin's keys after the
    /// runtime's.
    ///
    /// # Errors
    /// NOT_FOUND when no live executor offers `class`.
    pub fn plugin_config(&self, class: &str) -> ApiResult<Vec<pb::ConfigKeyDef>> {
        let plugins = self.plugins()?;
        let Some(p) = plugins.get(class).filter(|p| !p.live_on.is_empty()) else {
            return Err(ApiError::PluginNotFound(class.to_owned()));
        };
        Ok(convert::full_def(Some(&p.info))
            .keys
            .iter()
            .map(wharf::wire::config_key_def)
            .collect())
    }

    /// Pause, resume (target STARTED) or stop a connector that is not being deleted.
    ///
    /// # Errors
    /// NOT_FOUND; FAILED_PRECONDITION while deleting.
    pub fn set_target(&self, name: &str, target: TargetState) -> ApiResult<pb::ConnectorStatus> {
        let cluster = &self.cluster;
        let rec = self.existing(name)?;
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
        self.status(name)
    }

    /// RestartConnector / RestartTask: marks the chosen instances RESTARTING.
    ///
    /// # Errors
    /// NOT_FOUND (connector or task); FAILED_PRECONDITION while deleting or STOPPED.
    pub fn restart(&self, name: &str, scope: RestartScope) -> ApiResult<pb::ConnectorStatus> {
        let cluster = &self.cluster;
        let rec = self.existing(name)?;
        if rec.deleting {
            return Err(ApiError::StillDeleting(name.to_owned()));
        }
        if rec.target == TargetState::Stopped {
            return Err(ApiError::WrongState {
                name: name.to_owned(),
                reason: "is STOPPED: resume it instead of restarting".into(),
            });
        }
        if let RestartScope::Task(t) = scope
            && t as usize >= rec.tasks.len()
        {
            return Err(ApiError::TaskNotFound {
                name: name.to_owned(),
                task: t,
            });
        }
        let mut refused = false;
        cluster.modify_connector(name, |r| {
            if r.deleting {
                refused = true;
                return None;
            }
            match scope {
                RestartScope::Task(t) => {
                    let inst = r.tasks.get_mut(t as usize)?;
                    inst.restart = true;
                    inst.state = inst.state.on(InstanceEvent::RestartRequested);
                }
                RestartScope::Connector {
                    include_tasks,
                    only_failed,
                } => {
                    let pick = |i: &crate::model::Instance| {
                        !only_failed || i.state == InstanceState::Failed
                    };
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
        self.status(name)
    }

    /// DeleteConnector / `DELETE /connectors/{name}`: records the deletion (the finalizer
    /// carries it out); deleting again retries failed steps now (unless forcing).
    ///
    /// # Errors
    /// NOT_FOUND; ABORTED when the record kept changing; DEADLINE_EXCEEDED
    /// ([`ApiError::DeletionPending`]) when `wait` and the deletion did not finish.
    pub async fn delete(
        &self,
        name: &str,
        opts: DeleteOptions,
    ) -> ApiResult<pb::DeleteConnectorResponse> {
        let cluster = &self.cluster;
        convert::parse_name(name)?;
        if !opts.wait && opts.wait_timeout_ms != 0 {
            // A bound on a wait nobody asked for: the caller meant to wait, most likely.
            return Err(ApiError::InvalidArgument {
                field: "wait_timeout_ms".into(),
                reason: format!(
                    "is {} but wait is false: a wait bound needs wait = true (nothing was deleted)",
                    opts.wait_timeout_ms
                ),
            });
        }
        let mut changes = cluster.subscribe();
        let mut recorded = false;
        for _ in 0..DELETE_RECORD_ATTEMPTS {
            let rec = self.existing(name)?;
            if rec.deleting {
                // Deleting again in the other mode would be answered OK while the first
                // mode goes on: refused, so that the answer and the audit trail say so.
                let in_progress = cluster.store.deletion(name)?;
                if let Some(reason) = in_progress
                    .as_ref()
                    .and_then(|d| redelete_conflict(d.cleanup, opts))
                {
                    return Err(ApiError::DeletionModeConflict {
                        name: name.to_owned(),
                        reason,
                    });
                }
                // Deleting again: run failed steps once more now, unless forcing, which
                // skips them (a retry started first would run one more cleanup).
                if !opts.force {
                    finalizer::request_retry(cluster, name)?;
                }
                recorded = true;
                break;
            }
            let offsets = cluster.store.offsets(name)?;
            let mut d = DeletionRecord::seal(&rec, offsets, !opts.keep_resources, now_ms());
            // In the record itself: every round continues this call's trace, the first
            // one included (a finalizer pass may see the record before this call goes
            // on), on whichever replica runs it. Deleting again keeps the first trace.
            d.traceparent = wharf::trace::TraceContext::current()
                .traceparent()
                .unwrap_or_default();
            if cluster.store.start_deletion(&rec, &d)? {
                info!(connector = %name, generation_next = rec.next_generation,
                    cleanup = !opts.keep_resources, "deletion recorded");
                cluster.changed(name);
                recorded = true;
                break;
            }
        }
        if !recorded {
            return Err(ApiError::Contended(name.to_owned()));
        }
        let mut skipped_tasks = Vec::new();
        let mut connector_cleanup_skipped = false;
        if opts.force && finalizer::request_force(cluster, name)? {
            // The finalizer carries the force out on its next pass (at once: it was woken).
            let deadline = tokio::time::Instant::now() + Duration::from_millis(FORCE_WAIT_MS);
            wait_gone(cluster, &mut changes, name, deadline).await?;
            if let Some(d) = cluster.deletions.finished(name) {
                (skipped_tasks, connector_cleanup_skipped) = finalizer::forced_skips(&d);
            }
        }
        let rec = if opts.wait {
            let ms = if opts.wait_timeout_ms == 0 {
                DEFAULT_DELETE_WAIT_MS
            } else {
                opts.wait_timeout_ms
            };
            let deadline = tokio::time::Instant::now() + Duration::from_millis(u64::from(ms));
            wait_gone(cluster, &mut changes, name, deadline).await?;
            let rec = cluster.store.connector(name)?;
            // An OK answer to a waiting delete means "gone": a script running
            // `DeleteConnector ... && next-step` must not go on while cleanup is pending.
            if rec.is_some() {
                return Err(ApiError::DeletionPending {
                    detail: pending_detail(cluster.store.deletion(name)?.as_ref()),
                    name: name.to_owned(),
                    waited_ms: ms,
                });
            }
            rec
        } else {
            cluster.store.connector(name)?
        };
        // A waiting delete that succeeded says what `cleanup.policy = give-up` left.
        let (given_up_tasks, connector_cleanup_given_up) = match cluster.deletions.finished(name) {
            Some(d) if opts.wait && rec.is_none() => finalizer::given_up_skips(&d),
            _ => (Vec::new(), false),
        };
        Ok(pb::DeleteConnectorResponse {
            deleted: rec.is_none(),
            status: match &rec {
                Some(r) => Some(self.status_of(r)?),
                None => None,
            },
            skipped_tasks,
            connector_cleanup_skipped,
            given_up_tasks,
            connector_cleanup_given_up,
        })
    }

    /// RetryCleanup / `POST /connectors/{name}/cleanup/retry`: runs failed cleanup steps
    /// now. The status is `None` when the deletion finished meanwhile.
    ///
    /// # Errors
    /// NOT_FOUND; FAILED_PRECONDITION when the connector is not being deleted.
    pub fn retry_cleanup(&self, name: &str) -> ApiResult<Option<pb::ConnectorStatus>> {
        let cluster = &self.cluster;
        let rec = self.existing(name)?;
        if !rec.deleting || !finalizer::request_retry(cluster, name)? {
            return Err(ApiError::WrongState {
                name: name.to_owned(),
                reason: "is not being deleted".into(),
            });
        }
        match cluster.store.connector(name)? {
            Some(r) => Ok(Some(self.status_of(&r)?)),
            None => Ok(None),
        }
    }

    /// GetOffsets: the source offsets, as JSON texts.
    ///
    /// # Errors
    /// NOT_FOUND.
    pub fn offsets(&self, name: &str) -> ApiResult<Vec<pb::SourceOffset>> {
        self.existing(name)?;
        Ok(self
            .cluster
            .store
            .offsets(name)?
            .into_iter()
            .map(|(partition, offset)| pb::SourceOffset { partition, offset })
            .collect())
    }

    /// AlterOffsets (KIP-875): writes offsets (an empty offset removes the partition's)
    /// of a STOPPED connector; answers how many were written.
    ///
    /// # Errors
    /// INVALID_ARGUMENT naming `offsets[i].partition|offset`; FAILED_PRECONDITION unless
    /// STOPPED.
    pub fn alter_offsets(&self, name: &str, offsets: Vec<pb::SourceOffset>) -> ApiResult<usize> {
        convert::parse_name(name)?;
        if offsets.len() > MAX_OFFSETS_PER_REQUEST {
            return Err(ApiError::InvalidArgument {
                field: "offsets".into(),
                reason: format!("more than {MAX_OFFSETS_PER_REQUEST} entries"),
            });
        }
        for (i, o) in offsets.iter().enumerate() {
            check_json_object(format!("offsets[{i}].partition"), &o.partition)?;
            if !o.offset.is_empty() {
                check_json_object(format!("offsets[{i}].offset"), &o.offset)?;
            }
        }
        let rec = self.existing(name)?;
        require_stopped(&rec)?;
        let pairs: Vec<(String, String)> = offsets
            .into_iter()
            .map(|o| (o.partition, o.offset))
            .collect();
        self.cluster.store.put_offsets(name, &pairs)?;
        info!(connector = %name, partitions = pairs.len(), "offsets altered");
        Ok(pairs.len())
    }

    /// ResetOffsets (KIP-875): removes every offset of a STOPPED connector.
    ///
    /// # Errors
    /// NOT_FOUND; FAILED_PRECONDITION unless STOPPED.
    pub fn reset_offsets(&self, name: &str) -> ApiResult<()> {
        let rec = self.existing(name)?;
        require_stopped(&rec)?;
        self.cluster.store.reset_offsets(name)?;
        info!(connector = %name, "offsets reset");
        Ok(())
    }

    /// ListAuditEntries: one page of the audit trail, oldest first.
    ///
    /// # Errors
    /// Store errors.
    pub fn audit_entries(
        &self,
        query: &crate::model::AuditQuery,
    ) -> ApiResult<crate::model::AuditPage> {
        // A filtered page may open and parse every entry in its range (up to the
        // trail's bound): not on a worker the other calls need.
        Ok(crate::store::wait_off_worker(|| {
            self.cluster.store.audit_entries(query)
        })?)
    }

    /// ListExecutors: every registered executor with what it hosts.
    ///
    /// # Errors
    /// Store errors.
    pub fn executors(&self) -> ApiResult<Vec<pb::ExecutorInfo>> {
        let cluster = &self.cluster;
        let connectors = cluster.store.connectors()?;
        let view = cluster.executor_view()?;
        Ok(view
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
            .collect())
    }
}

/// The warning for a config key that neither the runtime nor the plugin defines, naming
/// the defined key it most likely meant (one edit away, or the same without separators).
fn unknown_key_warning(def: &wharf::sdk::ConfigDef, key: &str, plugin_known: bool) -> String {
    let squash = |s: &str| -> String { s.chars().filter(|c| c.is_ascii_alphanumeric()).collect() };
    let near = def
        .keys
        .iter()
        .map(|k| k.name.as_str())
        .find(|k| squash(k) == squash(key) || edit_distance_is_one(k, key));
    let whose = if plugin_known {
        "the runtime nor the plugin"
    } else {
        "the runtime"
    };
    match near {
        Some(k) => format!(
            "unknown key {key:?}: neither {whose} defines it, so it is ignored; did you mean {k:?}?"
        ),
        None => format!(
            "unknown key {key:?}: neither {whose} defines it, so it is ignored unless the plugin reads it itself"
        ),
    }
}

/// True when `a` and `b` differ by exactly one inserted, removed or replaced character.
fn edit_distance_is_one(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let (short, long) = if a.len() <= b.len() {
        (&a, &b)
    } else {
        (&b, &a)
    };
    match long.len() - short.len() {
        0 => {
            short
                .iter()
                .zip(long.iter())
                .filter(|(x, y)| x != y)
                .count()
                == 1
        }
        1 => {
            let p = short
                .iter()
                .zip(long.iter())
                .take_while(|(x, y)| x == y)
                .count();
            short[p..] == long[p + 1..]
        }
        _ => false,
    }
}

/// `config` with each secret given as [`REDACTED`] replaced by the stored secret.
///
/// # Errors
/// INVALID_ARGUMENT naming `config[<key>]` when there is no stored secret to keep.
fn kept_secrets(
    def: &wharf::sdk::ConfigDef,
    stored: Option<&wharf::sdk::ConfigMap>,
    config: &HashMap<String, String>,
) -> ApiResult<HashMap<String, String>> {
    let mut out = config.clone();
    for (k, v) in config {
        if v != REDACTED {
            continue;
        }
        // Probed with a plain value: the given one is the placeholder itself.
        let probe: wharf::sdk::ConfigMap = [(k.clone(), "x".to_owned())].into_iter().collect();
        let secret = def.redact(&probe).get(k).is_some_and(|r| r == REDACTED);
        let kept = stored.and_then(|s| s.get(k));
        match (secret, kept) {
            (true, Some(old)) => {
                out.insert(k.clone(), old.clone());
            }
            (true, None) => {
                return Err(ApiError::InvalidArgument {
                    field: format!("config[{k}]"),
                    reason: format!(
                        "{REDACTED:?} is the placeholder responses show for a secret, and no secret is stored for this key: give the value itself"
                    ),
                });
            }
            // A non-secret key whose value happens to be the placeholder text.
            (false, _) => {}
        }
    }
    Ok(out)
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

/// The error for a `connector.class` no registered executor offers; for the built-in
/// file plugins, why an executor may not offer them.
fn unknown_plugin(plugin: &str) -> String {
    match plugin {
        "file-source" | "file-sink" => format!(
            "unknown plugin {plugin:?}: no registered executor offers it (executors offer the file plugins only when started with --file-root, the directory they may touch; see docs/configuration.md)"
        ),
        _ => format!("unknown plugin {plugin:?}: no registered executor offers it"),
    }
}

/// Refuses a config that turns `cleanup.policy` to `give-up` unless `caller` may
/// (`crate::auth::cleanup_policy_role`: the role of `force`); the refusal is
/// PERMISSION_DENIED naming the key, and audited by the guard like any refused call.
fn check_cleanup_policy(
    caller: &Principal,
    rpc: AdminAction,
    stored_gives_up: bool,
    config: &HashMap<String, String>,
) -> ApiResult<()> {
    let gives_up =
        crate::model::policy_gives_up(config.get(wharf::sdk::CLEANUP_POLICY).map(String::as_str));
    let needed = crate::auth::cleanup_policy_role(stored_gives_up, gives_up);
    if caller.role >= needed {
        return Ok(());
    }
    Err(ApiError::Auth(AuthError::Forbidden {
        principal: caller.to_string(),
        rpc: rpc.rpc(),
        detail: " setting config[cleanup.policy] to give-up (a deletion could then skip its cleanup, as force does)".into(),
        needed,
    }))
}

/// A connector's info, its plugin's definitions looked up in `plugins`.
fn info_with(rec: &ConnectorRecord, plugins: &BTreeMap<String, KnownPlugin>) -> pb::ConnectorInfo {
    convert::connector_info(rec, plugins.get(&rec.plugin).map(|p| &p.info))
}

/// Why deleting again with `opts` cannot go with a deletion in progress that
/// `recorded_cleanup` (its steps stop with `connector_deleted = true`, or false for
/// `keep_resources`), or `None` when it can: the same mode is a retry, and a force skips
/// what is pending whatever the mode (what it skipped stops with false).
fn redelete_conflict(recorded_cleanup: bool, opts: DeleteOptions) -> Option<String> {
    match (opts.force, recorded_cleanup, opts.keep_resources) {
        (true, _, _) | (false, true, false) | (false, false, true) => None,
        (false, true, true) => Some(
            "is already being deleted with cleanup (connector_deleted = true); keep_resources \
             cannot change a deletion in progress: wait for it to finish, or force it (force \
             skips the cleanup still pending)"
                .into(),
        ),
        (false, false, false) => Some(
            "is already being deleted with keep_resources (connector_deleted = false: its \
             resources are kept); a deletion that cleans up cannot change it: once the name \
             is free, create the connector again and delete it to clean up"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_unknown_file_plugin_names_the_file_root_and_others_do_not() {
        for p in ["file-source", "file-sink"] {
            assert!(super::unknown_plugin(p).contains("--file-root"), "{p}");
        }
        assert!(!super::unknown_plugin("my-plugin").contains("--file-root"));
    }

    use super::*;

    fn mode(force: bool, keep_resources: bool) -> DeleteOptions {
        DeleteOptions {
            force,
            keep_resources,
            ..DeleteOptions::default()
        }
    }

    #[test]
    fn deleting_again_in_the_same_mode_is_a_retry() {
        assert_eq!(redelete_conflict(true, mode(false, false)), None);
        assert_eq!(redelete_conflict(false, mode(false, true)), None);
    }

    #[test]
    fn keep_resources_over_a_cleanup_in_progress_is_refused() {
        let reason = redelete_conflict(true, mode(false, true)).expect("refused");
        assert!(reason.contains("being deleted with cleanup"), "{reason}");
        assert!(reason.contains("force"), "{reason}");
    }

    #[test]
    fn a_cleanup_over_a_keep_resources_deletion_is_refused() {
        let reason = redelete_conflict(false, mode(false, false)).expect("refused");
        assert!(
            reason.contains("being deleted with keep_resources"),
            "{reason}"
        );
    }

    #[test]
    fn a_force_goes_with_either_mode() {
        for recorded in [true, false] {
            for keep in [true, false] {
                assert_eq!(redelete_conflict(recorded, mode(true, keep)), None);
            }
        }
    }

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

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
            config: &map(&[("connector.class", "p")]),
        })
        .unwrap();
        let rec = ConnectorRecord::new(&spec, TargetState::Started);
        assert!(matches!(
            require_stopped(&rec),
            Err(ApiError::WrongState { .. })
        ));
    }

    #[test]
    fn a_placeholder_for_a_secret_keeps_the_stored_secret() {
        let def = wharf::sdk::runtime_config_def();
        let stored: wharf::sdk::ConfigMap = [("db.password".to_owned(), "s3cret".to_owned())]
            .into_iter()
            .collect();
        let given = map(&[("db.password", REDACTED), ("tasks.max", "2")]);
        let kept = kept_secrets(&def, Some(&stored), &given).unwrap();
        assert_eq!(kept["db.password"], "s3cret");
        assert_eq!(kept["tasks.max"], "2");
    }

    #[test]
    fn a_placeholder_with_no_stored_secret_is_refused_naming_the_key() {
        let def = wharf::sdk::runtime_config_def();
        let e = kept_secrets(&def, None, &map(&[("db.password", REDACTED)])).unwrap_err();
        assert!(
            matches!(&e, ApiError::InvalidArgument { field, .. } if field == "config[db.password]"),
            "{e}"
        );
    }

    #[test]
    fn the_placeholder_text_in_a_plain_key_is_stored_as_given() {
        let def = wharf::sdk::runtime_config_def();
        let kept = kept_secrets(&def, None, &map(&[("label", REDACTED)])).unwrap();
        assert_eq!(kept["label"], REDACTED);
    }

    #[test]
    fn an_unknown_key_warning_names_the_key_it_resembles() {
        let def = wharf::sdk::runtime_config_def();
        let w = unknown_key_warning(&def, "task.max", true);
        assert!(
            w.contains("\"task.max\"") && w.contains("did you mean \"tasks.max\""),
            "{w}"
        );
        let w = unknown_key_warning(&def, "tasks_max", true);
        assert!(w.contains("did you mean \"tasks.max\""), "{w}");
        let w = unknown_key_warning(&def, "colour", true);
        assert!(!w.contains("did you mean"), "{w}");
    }

    #[test]
    fn edit_distance_one_covers_insert_remove_and_replace() {
        assert!(edit_distance_is_one("tasks.max", "task.max"));
        assert!(edit_distance_is_one("task.max", "tasks.max"));
        assert!(edit_distance_is_one("tasks.max", "tasks.mux"));
        assert!(!edit_distance_is_one("tasks.max", "tasks.max"));
        assert!(!edit_distance_is_one("tasks.max", "t.max"));
    }
}
