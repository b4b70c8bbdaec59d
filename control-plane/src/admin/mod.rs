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

pub mod connect_keys;
pub mod error;
pub mod guard;
pub mod plugin_check;
pub mod resources;

mod config;
mod deletion;
mod offsets;
mod topics;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tracing::info;
use wharf::pb::v1 as pb;

pub use self::error::ApiError;
use crate::grpc::convert::{self, KnownPlugin};
use crate::model::{ConnectorRecord, InstanceEvent, InstanceState, TargetState};
use crate::plan::unit::Host;
use crate::reconcile::Cluster;

pub use self::deletion::{DEFAULT_DELETE_WAIT_MS, DeleteOptions};

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
    /// for every connector (they are decoded from every executor record).
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

    /// GetConnector / `GET /connectors/{name}`.
    ///
    /// # Errors
    /// INVALID_ARGUMENT for a bad name; NOT_FOUND.
    pub fn connector(&self, name: &str) -> ApiResult<pb::ConnectorInfo> {
        self.info_of(&self.existing(name)?)
    }

    /// Every connector (DELETING ones too), sorted by name, with its info (secrets
    /// redacted) when `with_info` and its status when `with_status`: a listing of names
    /// redacts no config (redaction is costly at scale, and a status poller asks for
    /// none; bench/NOTES.md).
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
        // Each plugin's full definition once per call, not once per connector.
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

    /// The custom transforms and predicates of live executors, sorted by name, each with
    /// the executors that have it (`GET /connector-plugins?connectorsOnly=false`).
    ///
    /// # Errors
    /// Store errors.
    pub fn transform_list(&self) -> ApiResult<Vec<pb::TransformPluginEntry>> {
        let cluster = &self.cluster;
        let execs = cluster.store.executors()?;
        Ok(convert::live_transforms(&execs, &|e| {
            !e.lost && cluster.holds_lease(&e.id, e.epoch)
        }))
    }

    /// `GET /connector-plugins/{class}/config` (KIP-769): a connector plugin's keys after
    /// the runtime's; a transform's or predicate's own keys (as Connect answers for
    /// transformation and predicate plugins): a built-in one's from the SDK, a custom
    /// one's as a live executor registered it.
    ///
    /// # Errors
    /// NOT_FOUND when `class` is neither built in nor offered by a live executor.
    pub fn plugin_config(&self, class: &str) -> ApiResult<Vec<pb::ConfigKeyDef>> {
        let plugins = self.plugins()?;
        if let Some(p) = plugins.get(class).filter(|p| !p.live_on.is_empty()) {
            return Ok(convert::full_def(Some(&p.info))
                .keys
                .iter()
                .map(wharf::wire::config_key_def)
                .collect());
        }
        if let Some(def) = wharf::sdk::builtin_transform_config_def(class)
            .or_else(|| wharf::sdk::builtin_predicate_config_def(class))
        {
            return Ok(def.keys.iter().map(wharf::wire::config_key_def).collect());
        }
        self.transform_list()?
            .into_iter()
            .filter_map(|t| t.plugin)
            .find(|p| p.name == class)
            .map(|p| p.config_defs)
            .ok_or_else(|| ApiError::PluginNotFound(class.to_owned()))
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
                    record_log: e.record_log.clone(),
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

/// A connector's info, its plugin's definitions looked up in `plugins`.
fn info_with(rec: &ConnectorRecord, plugins: &BTreeMap<String, KnownPlugin>) -> pb::ConnectorInfo {
    convert::connector_info(rec, plugins.get(&rec.plugin).map(|p| &p.info))
}
