//! Domain types of the control plane. Wire types (`wharf::pb`) are converted into these
//! once, at the gRPC edge ([`crate::grpc`]); the herder, the planner and the store see only
//! these.

mod audit;
pub mod resources;
pub mod text;
pub mod topics;

pub use audit::{
    AuditEntry, AuditPage, AuditQuery, AuditRetention, DEFAULT_AUDIT_MAX_AGE_DAYS,
    DEFAULT_AUDIT_MAX_ENTRIES, DEFAULT_AUDIT_PAGE_SIZE, MAX_AUDIT_PAGE_SIZE,
};

use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};
use wharf::ids::ConnectorName;
use wharf::sdk::ConfigMap;

// The runtime's config keys, defined once in the SDK (`wharf::sdk`).
pub use wharf::sdk::{
    CLEANUP_MAX_ATTEMPTS, CLEANUP_POLICY, CLEANUP_TIMEOUT_MS, CONNECTOR_CLASS,
    DEFAULT_CLEANUP_MAX_ATTEMPTS, DEFAULT_CLEANUP_TIMEOUT_MS, TASKS_MAX,
};

/// A connector config that passed validation at the edge: its name, plugin and
/// tasks.max are known to be well formed.
#[derive(Debug, Clone)]
pub struct ConnectorSpec {
    /// Validated name.
    pub name: ConnectorName,
    /// Plugin (`connector.class`).
    pub plugin: String,
    /// Upper bound on tasks (`tasks.max`), at least 1.
    pub tasks_max: NonZeroU32,
    /// The complete config as given (secrets included; never logged).
    pub config: ConfigMap,
}

/// What the operator asked a connector to be (Kafka Connect's target state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TargetState {
    /// Run the connector and its tasks.
    Started,
    /// Connector instance runs; task instances are stopped with `false` and stay assigned.
    Paused,
    /// Nothing runs; config and offsets are kept (KIP-875).
    Stopped,
}

/// Source or sink, as the plugin says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PluginKind {
    /// Produces records.
    Source,
    /// Consumes records.
    Sink,
    /// No registered executor told us yet.
    Unknown,
}

/// State of one connector instance or task, as the herder records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum InstanceState {
    /// Not placed on a live executor.
    Unassigned,
    /// Started and working.
    Running,
    /// Kept assigned but not running (target PAUSED).
    Paused,
    /// Not running at all (target STOPPED).
    Stopped,
    /// Start or work failed; waits for a restart.
    Failed,
    /// A restart was requested and is under way.
    Restarting,
}

/// Which instance a state is of, for [`InstanceState::reported`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceOf {
    /// The connector instance (KIP-883's `Connector`).
    Connector,
    /// One of its tasks.
    Task,
}

impl InstanceOf {
    /// The connector instance for `None`, task `Some(i)` otherwise.
    pub fn of_task<T>(task: Option<T>) -> Self {
        match task {
            Some(_) => InstanceOf::Task,
            None => InstanceOf::Connector,
        }
    }
}

/// Something that happens to an instance; the one input of [`InstanceState::on`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceEvent {
    /// The executor answered a start with RUNNING.
    Started,
    /// The executor answered a start with FAILED, or reported a failure.
    Failed,
    /// Stopped with `false` because the target is PAUSED.
    Paused,
    /// Stopped with `false` because the target is STOPPED.
    Stopped,
    /// Its executor was lost or it was moved away: no instance runs anywhere.
    Unassigned,
    /// The operator asked for a restart.
    RestartRequested,
}

impl InstanceState {
    /// The one transition function of an instance.
    pub fn on(self, event: InstanceEvent) -> InstanceState {
        match (self, event) {
            (_, InstanceEvent::Started) => InstanceState::Running,
            (_, InstanceEvent::Failed) => InstanceState::Failed,
            (_, InstanceEvent::Paused) => InstanceState::Paused,
            (_, InstanceEvent::Stopped) => InstanceState::Stopped,
            (_, InstanceEvent::Unassigned) => InstanceState::Unassigned,
            (
                InstanceState::Running
                | InstanceState::Failed
                | InstanceState::Restarting
                | InstanceState::Unassigned,
                InstanceEvent::RestartRequested,
            ) => InstanceState::Restarting,
            // Nothing runs to restart: a paused or stopped instance stays as it is.
            (
                state @ (InstanceState::Paused | InstanceState::Stopped),
                InstanceEvent::RestartRequested,
            ) => state,
        }
    }

    /// The state the status API and the metrics report for an instance recorded in this
    /// state, of a connector with target `target`: a paused connector keeps its connector
    /// instance running (reported PAUSED at once), while its tasks are stopped (PAUSED only
    /// once their stop ran: until then they still run, and are reported RUNNING, as Kafka
    /// Connect reports a task until its worker paused it). docs/lifecycle.md, "Pause".
    pub fn reported(self, target: TargetState, of: InstanceOf) -> InstanceState {
        match (self, target, of) {
            (InstanceState::Running, TargetState::Paused, InstanceOf::Connector) => {
                InstanceState::Paused
            }
            (InstanceState::Running, TargetState::Paused, InstanceOf::Task)
            | (InstanceState::Running, TargetState::Started | TargetState::Stopped, _)
            | (
                InstanceState::Unassigned
                | InstanceState::Paused
                | InstanceState::Stopped
                | InstanceState::Failed
                | InstanceState::Restarting,
                _,
                _,
            ) => self,
        }
    }

    /// Whether recording an instance in this state, of a connector with target
    /// `target`, gives the herder anything to do: a task confirmed RUNNING where the
    /// connector should run is where the herder wanted it, so the write needs no herder
    /// pass (otherwise each start answer and status report of a task would make the
    /// herder rebuild the units of its connector). Watchers and the finalizer are
    /// told of every write either way.
    pub fn herder_acts_on(self, target: TargetState, of: InstanceOf) -> bool {
        match (self, target, of) {
            (InstanceState::Running, TargetState::Started, InstanceOf::Task) => false,
            // A connector instance's start leads to task configs and task starts.
            (_, _, InstanceOf::Connector)
            // A paused or stopped connector's task that runs must be stopped.
            | (_, TargetState::Paused | TargetState::Stopped, InstanceOf::Task)
            | (
                InstanceState::Unassigned
                | InstanceState::Paused
                | InstanceState::Stopped
                | InstanceState::Failed
                | InstanceState::Restarting,
                TargetState::Started,
                InstanceOf::Task,
            ) => true,
        }
    }

    /// True when an instance of this state is believed to exist on its executor.
    pub fn has_live_instance(self) -> bool {
        match self {
            InstanceState::Running | InstanceState::Restarting => true,
            InstanceState::Unassigned
            | InstanceState::Paused
            | InstanceState::Stopped
            | InstanceState::Failed => false,
        }
    }
}

/// Most bytes of an error text from an executor (a status report's `error`, a start's or
/// a stop's answer) that the control plane stores, so that an executor cannot make every
/// status read (GetConnectorStatus, REST `trace`) carry megabytes: 16 KiB.
pub const MAX_REPORTED_ERROR_BYTES: usize = 16 * 1024;

/// `error` as it is stored: unchanged up to [`MAX_REPORTED_ERROR_BYTES`], otherwise its
/// start followed by `...[cut, N bytes]` (N the length sent), as
/// [`text::bounded`] cuts; at most the bound plus the marker (under 40
/// bytes). Pure.
pub fn reported_error(error: String) -> String {
    match text::bounded(&error, MAX_REPORTED_ERROR_BYTES) {
        std::borrow::Cow::Borrowed(_) => error,
        std::borrow::Cow::Owned(cut) => cut,
    }
}

/// Asserts that `error` is a [`reported_error`] cut of a text of `sent` bytes: within the
/// bound plus the marker, ending with `...[cut, SENT bytes]`. For tests.
#[cfg(test)]
pub(crate) fn assert_reported_cut(error: &str, sent: usize) {
    assert!(
        error.len() < MAX_REPORTED_ERROR_BYTES + 40
            && error.ends_with(&format!("...[cut, {sent} bytes]")),
        "{} bytes",
        error.len()
    );
}

/// Where one connector instance or task is placed and how it is doing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    /// Hosting executor; `None` when unassigned.
    pub executor: Option<String>,
    /// Epoch of that executor when the instance was started there.
    pub epoch: u64,
    /// Generation of the assignment (bumped on every start or move).
    pub generation: u64,
    /// Recorded state.
    pub state: InstanceState,
    /// Error text when FAILED.
    pub error: String,
    /// A restart was requested and not yet carried out.
    pub restart: bool,
}

impl Instance {
    /// A fresh, unassigned instance.
    pub fn unassigned() -> Self {
        Self {
            executor: None,
            epoch: 0,
            generation: 0,
            state: InstanceState::Unassigned,
            error: String::new(),
            restart: false,
        }
    }
}

/// Everything the store keeps about one connector.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnectorRecord {
    /// Name (validated when created).
    pub name: String,
    /// Changes on delete and re-create; given to plugins to tag resources.
    pub incarnation: String,
    /// Complete config, secrets included.
    pub config: ConfigMap,
    /// Plugin name.
    pub plugin: String,
    /// tasks.max.
    pub tasks_max: u32,
    /// Target state.
    pub target: TargetState,
    /// Next generation to hand out for this connector (connector instance and tasks share
    /// one counter, so generations only grow).
    pub next_generation: u64,
    /// The connector instance.
    pub connector: Instance,
    /// Task configs from the connector instance, by task index.
    pub task_configs: Vec<ConfigMap>,
    /// Tasks, by index; as long as `task_configs`.
    pub tasks: Vec<Instance>,
    /// Task configs must be recomputed (config changed or the connector asked).
    pub task_configs_stale: bool,
    /// The connector instance must be restarted with the current config.
    pub config_changed: bool,
    /// True once a deletion was recorded; the herder leaves it to the finalizer.
    pub deleting: bool,
    /// The resource ledger: what its instances declared they provisioned, in the order
    /// first recorded ([`resources`]). Kept while it is deleted; what a deletion leaves
    /// becomes orphans.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<resources::LedgerEntry>,
    /// What its plugin declared it would provision with the current config (from the
    /// executor's ValidateConfig at create or config change): a second connector's
    /// claim on one of these is refused even before this one started.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub declared: Vec<resources::Resource>,
    /// KIP-558 active topics: what its tasks wrote to or read from since it was created or
    /// the set was last reset (`topics::merge_active_topics`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub active_topics: std::collections::BTreeSet<String>,
    /// Store revision this copy was read at (set by the store).
    #[serde(skip)]
    pub revision: u64,
}

impl ConnectorRecord {
    /// A new connector as created by the operator.
    pub fn new(spec: &ConnectorSpec, target: TargetState) -> Self {
        Self {
            name: spec.name.as_str().to_owned(),
            incarnation: uuid::Uuid::new_v4().to_string(),
            config: spec.config.clone(),
            plugin: spec.plugin.clone(),
            tasks_max: spec.tasks_max.get(),
            target,
            next_generation: 1,
            connector: Instance::unassigned(),
            task_configs: Vec::new(),
            tasks: Vec::new(),
            task_configs_stale: true,
            config_changed: false,
            deleting: false,
            resources: Vec::new(),
            declared: Vec::new(),
            active_topics: std::collections::BTreeSet::new(),
            revision: 0,
        }
    }

    /// Hands out the next generation.
    pub fn take_generation(&mut self) -> u64 {
        let g = self.next_generation;
        self.next_generation += 1;
        g
    }

    /// `cleanup.timeout.ms` of this connector.
    pub fn cleanup_timeout_ms(&self) -> u32 {
        parse_positive(&self.config, CLEANUP_TIMEOUT_MS).unwrap_or(DEFAULT_CLEANUP_TIMEOUT_MS)
    }

    /// `cleanup.max.attempts` of this connector.
    pub fn cleanup_max_attempts(&self) -> u32 {
        parse_positive(&self.config, CLEANUP_MAX_ATTEMPTS).unwrap_or(DEFAULT_CLEANUP_MAX_ATTEMPTS)
    }

    /// True when `cleanup.policy` is `give-up`.
    pub fn cleanup_gives_up(&self) -> bool {
        policy_gives_up(self.config.get(CLEANUP_POLICY).map(String::as_str))
    }
}

/// True when a `cleanup.policy` value (`None`: unset, the default `keep-trying`) is
/// `give-up`.
pub fn policy_gives_up(policy: Option<&str>) -> bool {
    policy == Some("give-up")
}

/// Strict like the SDK's check of the key (digits only, no spaces, no '+'); a value
/// that is not falls back to the default.
fn parse_positive(config: &ConfigMap, key: &str) -> Option<u32> {
    config
        .get(key)
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|v| *v > 0)
}

/// Progress of one cleanup step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CleanupState {
    /// Not started yet.
    Pending,
    /// Sent, not confirmed.
    Running,
    /// The plugin's stop completed.
    Done,
    /// The last attempt failed (see attempts and last_error).
    Failed,
    /// Not run: forced, or given up by policy.
    Skipped,
}

impl CleanupState {
    /// True when nothing more will run for this step.
    pub fn is_final(self) -> bool {
        match self {
            CleanupState::Done | CleanupState::Skipped => true,
            CleanupState::Pending | CleanupState::Running | CleanupState::Failed => false,
        }
    }
}

/// One cleanup step of a deletion: a task, or (task `None`) the connector instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupStep {
    /// Task index; `None` for the connector instance.
    pub task: Option<u32>,
    /// Where it stands.
    pub state: CleanupState,
    /// Executor where the cleanup ran or runs.
    pub executor: String,
    /// Attempts that reached the plugin and failed or timed out, plus the successful one.
    pub attempts: u32,
    /// Error of the last failed attempt.
    pub last_error: String,
    /// True when it ran on a fresh cleanup-only instance.
    pub rehosted: bool,
    /// The flag the instance is stopped with.
    pub connector_deleted: bool,
    /// Generation of the instance the cleanup stops.
    pub generation: u64,
    /// Earliest next attempt, Unix milliseconds (backoff).
    pub next_attempt_ms: i64,
    /// Consecutive retries that waited for an executor (unreachable host, no live
    /// executor with the plugin) since the last real attempt; drives their backoff.
    #[serde(default)]
    pub waits: u32,
    /// Skipped because the operator forced the deletion.
    #[serde(default)]
    pub forced: bool,
    /// Instances of this step that an executor abandoned (their stop timed out and the
    /// plugin's call had not returned), as "generation G on EXECUTOR"; kept to the end.
    #[serde(default)]
    pub abandoned: Vec<String>,
}

impl CleanupStep {
    /// True when a failed step will not run again by itself: `cleanup.max.attempts` ran
    /// out (RetryCleanup or `force` decide); false while it waits for its next attempt.
    pub fn exhausted(&self) -> bool {
        self.state == CleanupState::Failed && self.next_attempt_ms == i64::MAX
    }
}

/// Everything a deferred or moved cleanup needs, kept until the deletion completes
/// (lifecycle contract point 11).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SealedContext {
    /// Last config, secrets included.
    pub config: ConfigMap,
    /// Plugin.
    pub plugin: String,
    /// Incarnation of the deleted connector.
    pub incarnation: String,
    /// Task configs by index.
    pub task_configs: Vec<ConfigMap>,
    /// Where each task was when the deletion was recorded.
    pub task_hosts: Vec<Instance>,
    /// Where the connector instance was.
    pub connector_host: Instance,
    /// Committed source offsets (partition, offset) at the time of the deletion.
    pub offsets: Vec<(String, String)>,
    /// `cleanup.timeout.ms`.
    pub cleanup_timeout_ms: u32,
    /// `cleanup.max.attempts`.
    pub cleanup_max_attempts: u32,
    /// `cleanup.policy = give-up`.
    pub gives_up: bool,
    /// The resource ledger when the deletion was recorded (the live one stays in the
    /// connector record, where the cleanup's releases go).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<resources::LedgerEntry>,
}

/// How a deletion treats what the connector provisioned outside (the operator's choice,
/// per delete): the one name of that choice from the admin request to the executor's stop.
/// The wire keeps its own names (`keep_resources` in the request, `connector_deleted` in
/// the stops, `cleanup` in the deletion's status), converted at the gRPC edge and in the
/// executor client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeletionMode {
    /// Every instance is stopped with `connector_deleted = true`: the plugins remove what
    /// they provisioned (the default).
    #[default]
    Cleanup,
    /// Every instance is stopped with `connector_deleted = false`: external resources stay.
    KeepResources,
}

impl DeletionMode {
    /// The mode a request's `keep_resources` flag asks for.
    pub fn keeping_resources(keep_resources: bool) -> Self {
        if keep_resources {
            DeletionMode::KeepResources
        } else {
            DeletionMode::Cleanup
        }
    }

    /// The `connector_deleted` flag the plugins' stops get under this mode.
    pub fn connector_deleted(self) -> bool {
        match self {
            DeletionMode::Cleanup => true,
            DeletionMode::KeepResources => false,
        }
    }

    /// Its name in logs, metrics and the audit trail: `cleanup`, `keep_resources`.
    pub fn label(self) -> &'static str {
        match self {
            DeletionMode::Cleanup => "cleanup",
            DeletionMode::KeepResources => "keep_resources",
        }
    }
}

/// The stored form of a [`DeletionMode`]: the boolean `cleanup` field that deletion
/// records have always had (true: [`DeletionMode::Cleanup`]), so that a record written by
/// an older control plane loads, and one written now loads on an older one.
mod cleanup_flag {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::DeletionMode;

    pub fn serialize<S: Serializer>(mode: &DeletionMode, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(mode.connector_deleted())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DeletionMode, D::Error> {
        Ok(DeletionMode::keeping_resources(!bool::deserialize(d)?))
    }
}

/// A deletion in progress; removed from the store only by a conditional write on its
/// revision once every step is final.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeletionRecord {
    /// Connector name.
    pub name: String,
    /// When the deletion was recorded, Unix milliseconds.
    pub requested_at_ms: i64,
    /// Whether the plugins clean up or keep their external resources (stored as the
    /// boolean `cleanup`).
    #[serde(rename = "cleanup", with = "cleanup_flag")]
    pub mode: DeletionMode,
    /// Sealed cleanup context.
    pub sealed: SealedContext,
    /// Steps: one per task in index order, then the connector instance.
    pub steps: Vec<CleanupStep>,
    /// Next generation for cleanup-only instances.
    pub next_generation: u64,
    /// The operator asked to run failed steps again now (RetryCleanup, a repeated
    /// delete); the finalizer carries it out and clears it.
    #[serde(default)]
    pub retry_requested: bool,
    /// The operator forced the deletion; the finalizer skips what is left and finishes.
    #[serde(default)]
    pub force_requested: bool,
    /// W3C `traceparent` of the call that recorded the deletion (its span and sampled
    /// flag; empty without trace export or for a record written before it was kept), so
    /// that every round continues that trace, also on another replica or after a
    /// restart (docs/observability.md, "Traces").
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub traceparent: String,
    /// Store revision this copy was read at (set by the store).
    #[serde(skip)]
    pub revision: u64,
}

impl DeletionRecord {
    /// Seals the context of `rec` and plans one step per task, then the connector.
    pub fn seal(
        rec: &ConnectorRecord,
        offsets: Vec<(String, String)>,
        mode: DeletionMode,
        now_ms: i64,
    ) -> Self {
        let step = |task: Option<u32>, host: &Instance| CleanupStep {
            task,
            state: CleanupState::Pending,
            executor: host.executor.clone().unwrap_or_default(),
            attempts: 0,
            last_error: String::new(),
            rehosted: false,
            connector_deleted: mode.connector_deleted(),
            generation: host.generation,
            next_attempt_ms: 0,
            waits: 0,
            abandoned: Vec::new(),
            forced: false,
        };
        let mut steps: Vec<CleanupStep> = rec
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| step(Some(i as u32), t))
            .collect();
        steps.push(step(None, &rec.connector));
        Self {
            name: rec.name.clone(),
            requested_at_ms: now_ms,
            mode,
            sealed: SealedContext {
                config: rec.config.clone(),
                plugin: rec.plugin.clone(),
                incarnation: rec.incarnation.clone(),
                task_configs: rec.task_configs.clone(),
                task_hosts: rec.tasks.clone(),
                connector_host: rec.connector.clone(),
                offsets,
                cleanup_timeout_ms: rec.cleanup_timeout_ms(),
                cleanup_max_attempts: rec.cleanup_max_attempts(),
                gives_up: rec.cleanup_gives_up(),
                resources: rec.resources.clone(),
            },
            steps,
            next_generation: rec.next_generation,
            retry_requested: false,
            force_requested: false,
            traceparent: String::new(),
            revision: 0,
        }
    }

    /// True when every step is done or skipped.
    pub fn is_complete(&self) -> bool {
        self.steps.iter().all(|s| s.state.is_final())
    }
}

/// One plugin as an executor advertised it, kept as its wire encoding so that the config
/// definition travels unchanged.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PluginRecord {
    /// Plugin name.
    pub name: String,
    /// Source or sink.
    pub kind: PluginKind,
    /// `wharf.v1.PluginInfo`, protobuf-encoded.
    pub info: Vec<u8>,
}

/// A custom transform or predicate as an executor advertised it, kept as its wire
/// encoding (`wharf.v1.TransformPluginInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransformRecord {
    /// Its name (what `transforms.<alias>.type` gives).
    pub name: String,
    /// `wharf.v1.TransformPluginInfo`, protobuf-encoded.
    pub info: Vec<u8>,
}

/// A registered executor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecutorRecord {
    /// Executor id.
    pub id: String,
    /// Address of its Executor service.
    pub address: String,
    /// Current epoch; every older one is fenced.
    pub epoch: u64,
    /// Its plugins.
    pub plugins: Vec<PluginRecord>,
    /// Set when its lease expired; cleared by a new registration.
    pub lost: bool,
    /// Identity of its record log as it registered it (`nats://...`, `kafka://...`,
    /// `embedded:DIR`); empty when it reported none (see [`crate::plan::record_log`]).
    #[serde(default)]
    pub record_log: String,
    /// Its custom transforms and predicates (none for an executor built without them, or
    /// registered by an older version).
    #[serde(default)]
    pub transforms: Vec<TransformRecord>,
}

impl ExecutorRecord {
    /// True when it offers `plugin`.
    pub fn has_plugin(&self, plugin: &str) -> bool {
        self.plugins.iter().any(|p| p.name == plugin)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_reported_error_within_the_bound_is_kept_whole() {
        let e = "x".repeat(MAX_REPORTED_ERROR_BYTES);
        assert_eq!(reported_error(e.clone()), e);
        assert_eq!(reported_error(String::new()), "");
    }

    #[test]
    fn a_reported_error_over_the_bound_keeps_its_start_and_says_how_long_it_was() {
        let e = format!("boom: {}", "y".repeat(3_000_000));
        let cut = reported_error(e.clone());
        assert!(
            cut.len() <= MAX_REPORTED_ERROR_BYTES + 40,
            "{} bytes",
            cut.len()
        );
        assert!(cut.starts_with("boom: yyy"), "{}", &cut[..20]);
        assert!(
            cut.ends_with(&format!("...[cut, {} bytes]", e.len())),
            "{}",
            &cut[cut.len() - 40..]
        );
    }

    #[test]
    fn a_reported_error_is_cut_on_a_char_boundary() {
        let cut = reported_error("é".repeat(MAX_REPORTED_ERROR_BYTES));
        assert!(
            cut.starts_with('é') && cut.contains("...[cut, "),
            "{}",
            &cut[..10]
        );
    }

    #[test]
    fn a_task_confirmed_running_under_target_started_needs_no_herder_pass() {
        assert!(!InstanceState::Running.herder_acts_on(TargetState::Started, InstanceOf::Task));
    }

    #[test]
    fn a_connector_instance_change_needs_a_herder_pass_whatever_its_state() {
        for s in [
            InstanceState::Running,
            InstanceState::Failed,
            InstanceState::Unassigned,
        ] {
            assert!(s.herder_acts_on(TargetState::Started, InstanceOf::Connector));
        }
    }

    #[test]
    fn a_task_of_a_paused_or_stopped_connector_needs_a_herder_pass() {
        for target in [TargetState::Paused, TargetState::Stopped] {
            assert!(InstanceState::Running.herder_acts_on(target, InstanceOf::Task));
            assert!(InstanceState::Paused.herder_acts_on(target, InstanceOf::Task));
        }
    }

    #[test]
    fn a_task_not_running_under_target_started_needs_a_herder_pass() {
        for s in [
            InstanceState::Unassigned,
            InstanceState::Paused,
            InstanceState::Stopped,
            InstanceState::Failed,
            InstanceState::Restarting,
        ] {
            assert!(
                s.herder_acts_on(TargetState::Started, InstanceOf::Task),
                "{s:?}"
            );
        }
    }

    use super::*;

    #[test]
    fn a_paused_instance_is_not_restarted_by_a_restart_request() {
        assert_eq!(
            InstanceState::Paused.on(InstanceEvent::RestartRequested),
            InstanceState::Paused
        );
        assert_eq!(
            InstanceState::Failed.on(InstanceEvent::RestartRequested),
            InstanceState::Restarting
        );
    }

    #[test]
    fn a_deletion_has_one_step_per_task_then_the_connector() {
        let spec = ConnectorSpec {
            name: ConnectorName::parse("c1").unwrap(),
            plugin: "test-source".into(),
            tasks_max: NonZeroU32::new(2).unwrap(),
            config: ConfigMap::new(),
        };
        let mut rec = ConnectorRecord::new(&spec, TargetState::Started);
        rec.tasks = vec![Instance::unassigned(), Instance::unassigned()];
        let d = DeletionRecord::seal(&rec, vec![], DeletionMode::Cleanup, 0);
        let tasks: Vec<_> = d.steps.iter().map(|s| s.task).collect();
        assert_eq!(tasks, vec![Some(0), Some(1), None]);
        assert!(!d.is_complete());
    }

    /// A deletion record as the stores hold it (JSON), in the shape written before the
    /// mode had a name of its own: `"cleanup": false` for a delete that keeps resources.
    fn stored_deletion(cleanup: bool) -> String {
        format!(
            r#"{{"name":"c1","requested_at_ms":5,"cleanup":{cleanup},
            "sealed":{{"config":{{}},"plugin":"p","incarnation":"i1","task_configs":[],
              "task_hosts":[],"connector_host":{{"executor":null,"epoch":0,"generation":0,
              "state":"Unassigned","error":"","restart":false}},"offsets":[],
              "cleanup_timeout_ms":1000,"cleanup_max_attempts":3,"gives_up":false}},
            "steps":[{{"task":null,"state":"Pending","executor":"","attempts":0,
              "last_error":"","rehosted":false,"connector_deleted":{cleanup},
              "generation":0,"next_attempt_ms":0}}],
            "next_generation":1,"retry_requested":false,"force_requested":false}}"#
        )
    }

    #[test]
    fn a_stored_deletion_that_keeps_resources_loads_as_keep_resources() {
        let d: DeletionRecord = serde_json::from_str(&stored_deletion(false)).unwrap();
        assert_eq!(d.mode, DeletionMode::KeepResources);
        let d: DeletionRecord = serde_json::from_str(&stored_deletion(true)).unwrap();
        assert_eq!(d.mode, DeletionMode::Cleanup);
    }

    #[test]
    fn a_deletion_is_stored_with_the_boolean_cleanup_field() {
        for (mode, cleanup) in [
            (DeletionMode::Cleanup, true),
            (DeletionMode::KeepResources, false),
        ] {
            let d: DeletionRecord = serde_json::from_str(&stored_deletion(true)).unwrap();
            let d = DeletionRecord { mode, ..d };
            let json: serde_json::Value = serde_json::to_value(&d).unwrap();
            assert_eq!(json["cleanup"], serde_json::Value::Bool(cleanup));
            assert!(json.get("mode").is_none());
        }
    }

    #[test]
    fn a_request_keeping_resources_is_the_keep_resources_mode_and_stops_with_false() {
        assert_eq!(
            DeletionMode::keeping_resources(true),
            DeletionMode::KeepResources
        );
        assert!(!DeletionMode::KeepResources.connector_deleted());
    }

    #[test]
    fn a_plain_request_is_the_cleanup_mode_and_stops_with_true() {
        assert_eq!(
            DeletionMode::keeping_resources(false),
            DeletionMode::Cleanup
        );
        assert!(DeletionMode::Cleanup.connector_deleted());
    }
}
