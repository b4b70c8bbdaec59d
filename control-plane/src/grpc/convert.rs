//! Conversions at the edge: wire requests into validated domain types (refusing bad input
//! with the field named), and records into redacted wire responses.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use prost::Message;
use wharf::ids::ConnectorName;
use wharf::pb::v1 as pb;
use wharf::sdk::{ConfigDef, ConfigMap, runtime_config_def};

use super::error::ApiError;
use crate::model::{
    AuditEntry, AuditQuery, CONNECTOR_CLASS, CleanupState, ConnectorRecord, ConnectorSpec,
    DEFAULT_AUDIT_PAGE_SIZE, DeletionRecord, ExecutorRecord, InstanceOf as Of, InstanceState,
    MAX_AUDIT_PAGE_SIZE, PluginKind, PluginRecord, TASKS_MAX, TargetState,
};

/// Most config entries a request may carry.
pub const MAX_CONFIG_ENTRIES: usize = 1024;
/// Longest config key, in bytes.
pub const MAX_CONFIG_KEY_BYTES: usize = 256;
/// Largest config value, in bytes.
pub const MAX_CONFIG_VALUE_BYTES: usize = 64 * 1024;
/// Largest config in total (keys and values), in bytes.
pub const MAX_CONFIG_TOTAL_BYTES: usize = 256 * 1024;
/// Most offsets one AlterOffsets may carry.
pub const MAX_OFFSETS_PER_REQUEST: usize = 10_000;
/// Largest partition or offset JSON, in bytes.
pub const MAX_OFFSET_JSON_BYTES: usize = 16 * 1024;

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> ApiError {
    ApiError::InvalidArgument {
        field: field.into(),
        reason: reason.into(),
    }
}

/// The `name` field of a request, checked against the naming rule of `wharf::ids`.
///
/// # Errors
/// INVALID_ARGUMENT naming `name` and the rule.
pub fn parse_name(name: &str) -> Result<ConnectorName, ApiError> {
    // Do not echo a huge or invisible name back; the rule says enough.
    ConnectorName::parse(name).map_err(|e| invalid("name", e.to_string()))
}

/// Checks the size limits of a config map.
///
/// # Errors
/// INVALID_ARGUMENT naming `config` or the oversized key.
pub fn check_config_size(config: &HashMap<String, String>) -> Result<(), ApiError> {
    if config.len() > MAX_CONFIG_ENTRIES {
        return Err(invalid(
            "config",
            format!(
                "has {} entries, at most {MAX_CONFIG_ENTRIES} are accepted",
                config.len()
            ),
        ));
    }
    let mut total = 0usize;
    for (k, v) in config {
        if k.len() > MAX_CONFIG_KEY_BYTES {
            return Err(invalid(
                "config",
                format!("a key is longer than {MAX_CONFIG_KEY_BYTES} bytes"),
            ));
        }
        if v.len() > MAX_CONFIG_VALUE_BYTES {
            return Err(invalid(
                format!("config[{k}]"),
                format!("value is longer than {MAX_CONFIG_VALUE_BYTES} bytes"),
            ));
        }
        total += k.len() + v.len();
    }
    if total > MAX_CONFIG_TOTAL_BYTES {
        return Err(invalid(
            "config",
            format!("is larger than {MAX_CONFIG_TOTAL_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// Whether `c` is drawn as nothing, or reorders or breaks the text around it: zero-width
/// characters and joiners, bidirectional controls, the soft hyphen, the line and
/// paragraph separators, the byte order mark. (Unicode's format and separator
/// characters that occur in practice; `char::is_control` covers none of them.)
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

/// Why `key` cannot be a config key, or `None` when it can. Keys are otherwise free
/// (plugins define their own), but an empty key names nothing, and a control or
/// invisible character or whitespace around a key makes it look like another key
/// (` tasks.max` or `tasks\u{200B}.max` is not `tasks.max`) while matching no definition.
pub fn config_key_problem(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        Some("the key is empty")
    } else if key.chars().any(char::is_control) {
        Some("the key has a control character")
    } else if key.chars().any(is_invisible) {
        Some("the key has an invisible character (zero-width, bidirectional or a separator)")
    } else if key.trim() != key {
        Some("the key has leading or trailing whitespace")
    } else {
        None
    }
}

/// The config field naming a key refused by [`config_key_problem`]: quoted, so that an
/// empty or invisible key shows (`config[""]`).
pub fn bad_key_field(key: &str) -> String {
    format!("config[{key:?}]")
}

/// The message for a key refused by [`config_key_problem`] (`why`), with the rule.
pub fn bad_key_reason(why: &str) -> String {
    format!(
        "{why}: config keys are names such as tasks.max, without control or invisible characters or surrounding whitespace"
    )
}

/// Refuses the first key (in sorted order, so the answer does not vary) that
/// [`config_key_problem`] refuses.
///
/// # Errors
/// INVALID_ARGUMENT naming the key as `config["<key>"]`.
pub fn check_config_keys<'a>(keys: impl Iterator<Item = &'a String>) -> Result<(), ApiError> {
    let first = keys
        .filter_map(|k| config_key_problem(k).map(|why| (k, why)))
        .min();
    match first {
        Some((k, why)) => Err(invalid(bad_key_field(k), bad_key_reason(why))),
        None => Ok(()),
    }
}

/// A name and config from a create or put request.
pub struct RawConnector<'a> {
    /// Requested name.
    pub name: &'a str,
    /// Requested config.
    pub config: &'a HashMap<String, String>,
}

impl TryFrom<RawConnector<'_>> for ConnectorSpec {
    type Error = ApiError;

    fn try_from(raw: RawConnector<'_>) -> Result<Self, ApiError> {
        let name = parse_name(raw.name)?;
        check_config_size(raw.config)?;
        check_config_keys(raw.config.keys())?;
        let plugin = raw
            .config
            .get(CONNECTOR_CLASS)
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                invalid(
                    format!("config[{CONNECTOR_CLASS}]"),
                    "missing required configuration: the plugin name",
                )
            })?;
        let tasks_max = match raw.config.get(TASKS_MAX) {
            None => NonZeroU32::MIN,
            Some(v) => parse_tasks_max(v)
                .map_err(|reason| invalid(format!("config[{TASKS_MAX}]"), reason))?,
        };
        Ok(ConnectorSpec {
            name,
            plugin,
            tasks_max,
            config: raw
                .config
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        })
    }
}

/// A plugin as registered executors advertised it.
#[derive(Debug, Clone)]
pub struct KnownPlugin {
    /// Wire form.
    pub info: pb::PluginInfo,
    /// Live executors offering it.
    pub live_on: Vec<String>,
}

/// The decoded plugin descriptors of each executor registration, so that a create or a
/// status does not decode every executor's descriptors again (a measurable share of the
/// control plane's time at scale; bench/NOTES.md). An entry is
/// used only while the registration's raw descriptors are byte for byte the ones it was
/// decoded from; entries of executors no longer registered are dropped.
#[derive(Debug, Default)]
pub struct PluginCache(Mutex<HashMap<Registration, Arc<Vec<Decoded>>>>);

/// An executor's registration: its id and epoch.
type Registration = (String, u64);

/// One plugin descriptor of a registration: its raw bytes and what they decode to
/// (`None`: they do not decode, and the plugin is left out).
#[derive(Debug)]
pub struct Decoded {
    raw: Vec<u8>,
    info: Option<pb::PluginInfo>,
}

impl PluginCache {
    /// The decoded descriptors of `e`, from the cache when its bytes are unchanged.
    fn of(&self, e: &ExecutorRecord) -> Arc<Vec<Decoded>> {
        let key = (e.id.clone(), e.epoch);
        let mut cache = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(d) = cache.get(&key)
            && d.len() == e.plugins.len()
            && d.iter().zip(&e.plugins).all(|(d, p)| d.raw == p.info)
        {
            return d.clone();
        }
        let decoded = Arc::new(
            e.plugins
                .iter()
                .map(|p| Decoded {
                    raw: p.info.clone(),
                    info: pb::PluginInfo::decode(p.info.as_slice()).ok(),
                })
                .collect::<Vec<_>>(),
        );
        cache.insert(key, decoded.clone());
        decoded
    }

    /// Forgets the registrations not in `executors`.
    fn keep_only(&self, executors: &[ExecutorRecord]) {
        let mut cache = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.len() > executors.len() {
            cache.retain(|(id, epoch), _| {
                executors.iter().any(|e| &e.id == id && e.epoch == *epoch)
            });
        }
    }
}

/// Plugins from registered executors, by name, decoded through `cache`. A plugin's wire
/// form is the one of the last live executor offering it, else of the first executor
/// that registered it.
pub fn known_plugins(
    executors: &[ExecutorRecord],
    live: &dyn Fn(&ExecutorRecord) -> bool,
    cache: &PluginCache,
) -> std::collections::BTreeMap<String, KnownPlugin> {
    cache.keep_only(executors);
    let decoded: Vec<(bool, Arc<Vec<Decoded>>)> =
        executors.iter().map(|e| (live(e), cache.of(e))).collect();
    // Which descriptor each plugin takes, by reference; cloned once at the end.
    let mut chosen: std::collections::BTreeMap<&str, (&pb::PluginInfo, Vec<String>)> =
        Default::default();
    for (e, (is_live, plugins)) in executors.iter().zip(&decoded) {
        for (p, d) in e.plugins.iter().zip(plugins.iter()) {
            let Some(info) = &d.info else {
                continue;
            };
            let entry = chosen.entry(p.name.as_str()).or_insert((info, Vec::new()));
            if *is_live {
                entry.0 = info;
                entry.1.push(e.id.clone());
            }
        }
    }
    chosen
        .into_iter()
        .map(|(name, (info, live_on))| {
            (
                name.to_owned(),
                KnownPlugin {
                    info: info.clone(),
                    live_on,
                },
            )
        })
        .collect()
}

/// `tasks.max` checked by the same rule as `ValidateConnectorConfig` (the SDK's
/// runtime definition: strict 32-bit integer, positive), so that the value stored and
/// handed to plugins is exactly the number the tasks are counted by.
fn parse_tasks_max(value: &str) -> Result<NonZeroU32, String> {
    let single: ConfigMap = [(TASKS_MAX.to_owned(), value.to_owned())]
        .into_iter()
        .collect();
    let error = runtime_config_def()
        .validate(&single)
        .into_iter()
        .filter(|v| v.name == TASKS_MAX)
        .flat_map(|v| v.errors)
        .next();
    if let Some(error) = error {
        return Err(error);
    }
    value
        .parse::<u32>()
        .ok()
        .and_then(NonZeroU32::new)
        .ok_or_else(|| "value must be a positive integer".to_owned())
}

/// The runtime's keys followed by the plugin's.
pub fn full_def(plugin: Option<&pb::PluginInfo>) -> ConfigDef {
    let def = runtime_config_def();
    match plugin {
        Some(p) => def.merged(&wharf::wire::config_def(&p.config_defs)),
        None => def,
    }
}

/// Validates a spec against the plugin's definition; the first error is returned.
///
/// # Errors
/// INVALID_ARGUMENT naming `config[key]`.
pub fn validate_spec(spec: &ConnectorSpec, def: &ConfigDef) -> Result<(), ApiError> {
    for v in def.validate(&spec.config) {
        // A config-provider reference's value is known only on the executor, which
        // checks it at the start; its syntax was checked before (`connect_keys`).
        if spec
            .config
            .get(&v.name)
            .is_some_and(|x| wharf::config_provider::has_reference(x))
        {
            continue;
        }
        if let Some(e) = v.errors.first() {
            return Err(invalid(format!("config[{}]", v.name), e.clone()));
        }
    }
    Ok(())
}

/// The custom transforms and predicates of a registration, as stored.
pub fn transform_records(
    transforms: &[pb::TransformPluginInfo],
) -> Vec<crate::model::TransformRecord> {
    transforms
        .iter()
        .map(|t| crate::model::TransformRecord {
            name: t.name.clone(),
            info: t.encode_to_vec(),
        })
        .collect()
}

/// The custom transforms and predicates of the live executors, by name, with the
/// executors that have each: the wire form of the last live executor having it (one that
/// does not decode is left out).
pub fn live_transforms(
    executors: &[ExecutorRecord],
    live: &dyn Fn(&ExecutorRecord) -> bool,
) -> Vec<pb::TransformPluginEntry> {
    let mut by_name: std::collections::BTreeMap<String, pb::TransformPluginEntry> =
        Default::default();
    for e in executors.iter().filter(|e| live(e)) {
        for t in &e.transforms {
            let Ok(info) = pb::TransformPluginInfo::decode(t.info.as_slice()) else {
                continue;
            };
            let entry = by_name.entry(t.name.clone()).or_default();
            entry.plugin = Some(info);
            entry.executor_ids.push(e.id.clone());
        }
    }
    by_name.into_values().collect()
}

/// Plugin records as stored from a registration.
pub fn plugin_records(plugins: &[pb::PluginInfo]) -> Vec<PluginRecord> {
    plugins
        .iter()
        .map(|p| PluginRecord {
            name: p.name.clone(),
            kind: match pb::PluginKind::try_from(p.kind) {
                Ok(pb::PluginKind::Source) => PluginKind::Source,
                Ok(pb::PluginKind::Sink) => PluginKind::Sink,
                Ok(pb::PluginKind::Unspecified) | Err(_) => PluginKind::Unknown,
            },
            info: p.encode_to_vec(),
        })
        .collect()
}

/// Wire target state.
pub fn target_to_pb(t: TargetState) -> pb::TargetState {
    match t {
        TargetState::Started => pb::TargetState::Started,
        TargetState::Paused => pb::TargetState::Paused,
        TargetState::Stopped => pb::TargetState::Stopped,
    }
}

fn kind_to_pb(plugin: Option<&pb::PluginInfo>) -> i32 {
    plugin.map_or(pb::PluginKind::Unspecified as i32, |p| p.kind)
}

/// The wire state reported for an instance recorded in `s` ([`InstanceState::reported`]).
fn state_to_pb(s: InstanceState, target: TargetState, of: Of) -> pb::State {
    match s.reported(target, of) {
        InstanceState::Unassigned => pb::State::Unassigned,
        InstanceState::Running => pb::State::Running,
        InstanceState::Paused => pb::State::Paused,
        InstanceState::Stopped => pb::State::Stopped,
        InstanceState::Failed => pb::State::Failed,
        InstanceState::Restarting => pb::State::Restarting,
    }
}

fn cleanup_to_pb(s: CleanupState) -> pb::CleanupState {
    match s {
        CleanupState::Pending => pb::CleanupState::Pending,
        CleanupState::Running => pb::CleanupState::Running,
        CleanupState::Done => pb::CleanupState::Done,
        CleanupState::Failed => pb::CleanupState::Failed,
        CleanupState::Skipped => pb::CleanupState::Skipped,
    }
}

/// Redacts secrets of `config` with `def` (plugin-marked secrets and secret-looking keys).
pub fn redact(def: &ConfigDef, config: &ConfigMap) -> HashMap<String, String> {
    def.redact(config).into_iter().collect()
}

/// The wire form of a connector, secrets redacted.
pub fn connector_info(rec: &ConnectorRecord, plugin: Option<&pb::PluginInfo>) -> pb::ConnectorInfo {
    connector_info_with(rec, plugin, &full_def(plugin))
}

/// [`connector_info`] with the plugin's [`full_def`] already made (a list makes it once
/// per plugin, not once per connector).
pub fn connector_info_with(
    rec: &ConnectorRecord,
    plugin: Option<&pb::PluginInfo>,
    def: &ConfigDef,
) -> pb::ConnectorInfo {
    pb::ConnectorInfo {
        name: rec.name.clone(),
        config: redact(def, &rec.config),
        target_state: target_to_pb(rec.target) as i32,
        kind: kind_to_pb(plugin),
        tasks: rec
            .task_configs
            .iter()
            .enumerate()
            .map(|(i, c)| pb::TaskInfo {
                task: i as u32,
                config: redact(def, c),
            })
            .collect(),
    }
}

/// The status of a connector; DELETING with cleanup progress when a deletion is pending.
pub fn connector_status(
    rec: &ConnectorRecord,
    deletion: Option<&DeletionRecord>,
    plugin: Option<&pb::PluginInfo>,
) -> pb::ConnectorStatus {
    let instance = |i: &crate::model::Instance, deleting: bool, of: Of| pb::InstanceStatus {
        state: if deleting {
            pb::State::Deleting
        } else {
            state_to_pb(i.state, rec.target, of)
        } as i32,
        executor_id: i.executor.clone().unwrap_or_default(),
        error: i.error.clone(),
        generation: i.generation,
    };
    let deleting = deletion.is_some() || rec.deleting;
    pb::ConnectorStatus {
        name: rec.name.clone(),
        kind: kind_to_pb(plugin),
        connector: Some(instance(&rec.connector, deleting, Of::Connector)),
        tasks: rec
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| pb::TaskStatus {
                task: i as u32,
                status: Some(instance(t, deleting, Of::Task)),
            })
            .collect(),
        deletion: deletion.map(|d| {
            let mut status = deletion_status(d);
            crate::plan::deletion_support::mark_status(&mut status, plugin);
            status
        }),
        target_state: target_to_pb(rec.target) as i32,
    }
}

/// The wire form of a deletion's progress: one step per task, then the connector's.
pub fn deletion_status(d: &crate::model::DeletionRecord) -> pb::DeletionStatus {
    pb::DeletionStatus {
        requested_at_ms: d.requested_at_ms,
        cleanup: d.mode == crate::model::DeletionMode::Cleanup,
        steps: d
            .steps
            .iter()
            .map(|s| pb::CleanupStep {
                task: s.task,
                state: cleanup_to_pb(s.state) as i32,
                executor_id: s.executor.clone(),
                attempts: s.attempts,
                last_error: s.last_error.clone(),
                rehosted: s.rehosted,
                connector_deleted: s.connector_deleted,
                generation: s.generation,
                abandoned: s.abandoned.clone(),
                exhausted: s.exhausted(),
                next_attempt_ms: match s.state {
                    crate::model::CleanupState::Failed | crate::model::CleanupState::Pending
                        if !s.exhausted() =>
                    {
                        s.next_attempt_ms
                    }
                    crate::model::CleanupState::Failed
                    | crate::model::CleanupState::Pending
                    | crate::model::CleanupState::Running
                    | crate::model::CleanupState::Done
                    | crate::model::CleanupState::Skipped => 0,
                },
                forced: s.forced,
                // Marked with the plugin's definition (plan::deletion_support).
                cleanup_not_supported: false,
            })
            .collect(),
    }
}

/// A ListAuditEntries request as a store query.
///
/// # Errors
/// INVALID_ARGUMENT naming `connector`, `since_ms`, `until_ms`, `page_size` or
/// `page_token`.
pub fn audit_query(req: pb::ListAuditEntriesRequest) -> Result<AuditQuery, ApiError> {
    let connector = if req.connector.is_empty() {
        None
    } else {
        ConnectorName::parse(&req.connector).map_err(|e| invalid("connector", e.to_string()))?;
        Some(req.connector)
    };
    if req.since_ms < 0 {
        return Err(invalid("since_ms", "must not be negative"));
    }
    let until_ms = match req.until_ms {
        0 => None,
        u if u <= req.since_ms => {
            return Err(invalid("until_ms", "must be after since_ms (0: no bound)"));
        }
        u => Some(u),
    };
    let limit = match req.page_size as usize {
        0 => DEFAULT_AUDIT_PAGE_SIZE,
        n if n > MAX_AUDIT_PAGE_SIZE => {
            return Err(invalid(
                "page_size",
                format!("at most {MAX_AUDIT_PAGE_SIZE}"),
            ));
        }
        n => n,
    };
    let after = if req.page_token.is_empty() {
        None
    } else {
        // An entry id: 20 digits, '-', 16 hex digits.
        let t = &req.page_token;
        let well_formed = t.len() == 37
            && t.as_bytes()[20] == b'-'
            && t[..20].bytes().all(|b| b.is_ascii_digit())
            && t[21..].bytes().all(|b| b.is_ascii_hexdigit());
        if !well_formed {
            return Err(invalid(
                "page_token",
                "is not a next_page_token of ListAuditEntries",
            ));
        }
        Some(req.page_token)
    };
    Ok(AuditQuery {
        connector,
        since_ms: req.since_ms,
        until_ms,
        after,
        limit,
    })
}

/// An audit entry on the wire.
pub fn audit_entry(e: AuditEntry) -> pb::AuditEntry {
    let AuditEntry {
        id,
        time_ms,
        principal,
        role,
        auth_method,
        rpc,
        connector,
        deletion_mode,
        outcome,
        message,
        forwarded_by,
    } = e;
    pb::AuditEntry {
        id,
        time_ms,
        principal,
        role,
        auth_method,
        rpc,
        connector,
        deletion_mode,
        outcome,
        message,
        forwarded_by,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn executor_with(
        id: &str,
        lost: bool,
        transforms: &[(&str, pb::TransformPluginKind)],
    ) -> ExecutorRecord {
        let infos: Vec<pb::TransformPluginInfo> = transforms
            .iter()
            .map(|(name, kind)| pb::TransformPluginInfo {
                name: (*name).to_owned(),
                version: "1".into(),
                kind: *kind as i32,
                config_defs: Vec::new(),
            })
            .collect();
        ExecutorRecord {
            id: id.into(),
            address: format!("http://{id}"),
            epoch: 1,
            plugins: Vec::new(),
            lost,
            record_log: String::new(),
            transforms: transform_records(&infos),
        }
    }

    #[test]
    fn custom_transforms_are_listed_by_name_with_the_live_executors_that_have_them() {
        use pb::TransformPluginKind::{Predicate, Transformation};
        let mut undecodable = executor_with("e4", false, &[]);
        undecodable.transforms.push(crate::model::TransformRecord {
            name: "broken".into(),
            info: vec![0xff, 0xff],
        });
        let execs = [
            executor_with(
                "e1",
                false,
                &[("b.Up", Transformation), ("a.Is", Predicate)],
            ),
            executor_with("e2", false, &[("b.Up", Transformation)]),
            executor_with("e3", true, &[("c.Gone", Transformation)]),
            undecodable,
        ];
        let listed = live_transforms(&execs, &|e| !e.lost);
        let names: Vec<(String, Vec<String>)> = listed
            .iter()
            .map(|t| {
                (
                    t.plugin
                        .as_ref()
                        .map(|p| p.name.clone())
                        .unwrap_or_default(),
                    t.executor_ids.clone(),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("a.Is".to_owned(), vec!["e1".to_owned()]),
                ("b.Up".to_owned(), vec!["e1".to_owned(), "e2".to_owned()]),
            ]
        );
        assert_eq!(
            listed[0].plugin.as_ref().map(|p| p.kind),
            Some(Predicate as i32)
        );
    }

    #[test]
    fn a_paused_connectors_running_connector_instance_is_paused() {
        let s = state_to_pb(InstanceState::Running, TargetState::Paused, Of::Connector);
        assert_eq!(s, pb::State::Paused);
    }

    #[test]
    fn a_task_still_running_after_a_pause_is_running_until_its_stop_ran() {
        let s = state_to_pb(InstanceState::Running, TargetState::Paused, Of::Task);
        assert_eq!(s, pb::State::Running);
        let s = state_to_pb(InstanceState::Paused, TargetState::Paused, Of::Task);
        assert_eq!(s, pb::State::Paused);
    }

    #[test]
    fn a_running_instance_of_a_started_connector_is_running() {
        for of in [Of::Connector, Of::Task] {
            let s = state_to_pb(InstanceState::Running, TargetState::Started, of);
            assert_eq!(s, pb::State::Running);
        }
    }

    fn raw(name: &str, pairs: &[(&str, &str)]) -> Result<ConnectorSpec, ApiError> {
        let config: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        ConnectorSpec::try_from(RawConnector {
            name,
            config: &config,
        })
    }

    fn field(e: ApiError) -> String {
        match e {
            ApiError::InvalidArgument { field, .. } => field,
            other => panic!("expected invalid argument, got {other}"),
        }
    }

    #[test]
    fn a_bad_name_is_refused_naming_the_name_field() {
        assert_eq!(
            field(raw("a/b", &[("connector.class", "p")]).unwrap_err()),
            "name"
        );
        assert_eq!(
            field(raw("", &[("connector.class", "p")]).unwrap_err()),
            "name"
        );
    }

    #[test]
    fn tasks_max_must_be_a_positive_integer() {
        for bad in [
            "0",
            "-1",
            "x",
            "1.5",
            "99999999999",
            " 3",
            "3 ",
            "+3",
            "03",
            "99999999999999999999",
        ] {
            let e = raw("c", &[("connector.class", "p"), ("tasks.max", bad)]).unwrap_err();
            assert_eq!(field(e), "config[tasks.max]", "{bad}");
        }
        assert_eq!(
            parse_tasks_max("99999999999999999999").unwrap_err(),
            "value is out of range (allowed: a 32-bit integer from -2147483648 to 2147483647, in plain digits with an optional leading '-')"
        );
        let e = raw("c", &[("connector.class", "p"), ("tasks.max", "03")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid config[tasks.max]: value is not an integer: write it without leading zeros (allowed: a 32-bit integer from -2147483648 to 2147483647, in plain digits with an optional leading '-')"
        );
        assert!(
            parse_tasks_max("0")
                .unwrap_err()
                .contains("must be a positive integer")
        );
        assert!(parse_tasks_max(" 3").unwrap_err().contains("spaces"));
        assert_eq!(parse_tasks_max("3").unwrap().get(), 3);
        assert_eq!(
            raw("c", &[("connector.class", "p")])
                .unwrap()
                .tasks_max
                .get(),
            1
        );
    }

    #[test]
    fn a_missing_connector_class_is_named() {
        assert_eq!(field(raw("c", &[]).unwrap_err()), "config[connector.class]");
    }

    #[test]
    fn an_empty_config_key_is_refused_naming_it_quoted() {
        let e = raw("c", &[("connector.class", "p"), ("", "v")]).unwrap_err();
        assert!(e.to_string().contains("the key is empty"), "{e}");
        assert_eq!(field(e), "config[\"\"]");
    }

    #[test]
    fn a_config_key_with_a_control_character_is_refused() {
        let e = raw("c", &[("connector.class", "p"), ("a\u{7}b", "v")]).unwrap_err();
        assert!(e.to_string().contains("control character"), "{e}");
        assert_eq!(field(e), "config[\"a\\u{7}b\"]");
    }

    #[test]
    fn a_config_key_with_surrounding_whitespace_is_refused() {
        for bad in [" tasks.max", "tasks.max ", " "] {
            let e = raw("c", &[("connector.class", "p"), (bad, "1")]).unwrap_err();
            assert!(e.to_string().contains("whitespace"), "{bad:?}: {e}");
            assert_eq!(field(e), format!("config[{bad:?}]"));
        }
    }

    #[test]
    fn a_config_key_with_an_invisible_character_is_refused() {
        for bad in [
            "tasks\u{200B}.max",
            "a\u{2028}b",
            "\u{202E}xam.sat",
            "\u{FEFF}topic",
            "a\u{AD}b",
        ] {
            let e = raw("c", &[("connector.class", "p"), (bad, "1")]).unwrap_err();
            assert!(
                e.to_string().contains("invisible character"),
                "{bad:?}: {e}"
            );
            assert_eq!(field(e), format!("config[{bad:?}]"));
        }
    }

    #[test]
    fn config_keys_with_inner_spaces_dots_or_any_letters_are_free() {
        for good in ["a b", "x.y-z_1", "clé", "ünïcödé.key"] {
            assert_eq!(config_key_problem(good), None, "{good:?}");
        }
    }

    #[test]
    fn of_several_bad_keys_the_first_in_sorted_order_is_named() {
        let keys = [" b".to_owned(), "".to_owned(), "a\n".to_owned()];
        let e = check_config_keys(keys.iter()).unwrap_err();
        assert_eq!(field(e), "config[\"\"]");
    }

    #[test]
    fn an_oversized_value_is_refused_naming_its_key() {
        let big = "x".repeat(MAX_CONFIG_VALUE_BYTES + 1);
        let e = raw("c", &[("connector.class", "p"), ("k", &big)]).unwrap_err();
        assert_eq!(field(e), "config[k]");
    }
}
