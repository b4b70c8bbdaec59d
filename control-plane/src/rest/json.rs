//! Kafka Connect 4.x REST JSON shapes, rendered from the admin core's views. Field
//! names and value spellings follow the Kafka Connect REST reference (see
//! `docs/rest.md`); Wharf's additions carry a `wharf_` prefix so that Connect clients,
//! which ignore fields they do not know, are not confused by them.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value, json};
use wharf::pb::v1 as pb;

/// The config key Kafka Connect keeps the connector's name under.
pub const NAME_KEY: &str = "name";

/// Connect's `type` of a connector or plugin: `source`, `sink` or `unknown`.
pub fn kind(kind: i32) -> &'static str {
    match pb::PluginKind::try_from(kind) {
        Ok(pb::PluginKind::Source) => "source",
        Ok(pb::PluginKind::Sink) => "sink",
        Ok(pb::PluginKind::Unspecified) | Err(_) => "unknown",
    }
}

/// Connect's state names; `DELETING` is Wharf's extension (a deletion's cleanup runs).
pub fn state(state: i32) -> &'static str {
    match pb::State::try_from(state) {
        Ok(pb::State::Running) => "RUNNING",
        Ok(pb::State::Paused) => "PAUSED",
        Ok(pb::State::Stopped) => "STOPPED",
        Ok(pb::State::Failed) => "FAILED",
        Ok(pb::State::Restarting) => "RESTARTING",
        Ok(pb::State::Deleting) => "DELETING",
        Ok(pb::State::Unassigned | pb::State::Unspecified) | Err(_) => "UNASSIGNED",
    }
}

fn cleanup_state(state: i32) -> &'static str {
    match pb::CleanupState::try_from(state) {
        Ok(pb::CleanupState::Pending) => "PENDING",
        Ok(pb::CleanupState::Running) => "RUNNING",
        Ok(pb::CleanupState::Done) => "DONE",
        Ok(pb::CleanupState::Failed) => "FAILED",
        Ok(pb::CleanupState::Skipped) => "SKIPPED",
        Ok(pb::CleanupState::Unspecified) | Err(_) => "UNKNOWN",
    }
}

/// A stored config as Connect shows it: with its `name` key.
pub fn config(name: &str, config: &HashMap<String, String>) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> =
        config.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    out.insert(NAME_KEY.to_owned(), name.to_owned());
    out
}

/// Whether Connect would show a connector's tasks: not while it is STOPPED (KIP-875: a
/// stopped connector has no tasks; Wharf keeps their records to restart them on resume),
/// unless a deletion runs (its steps name the tasks).
pub fn shows_tasks(target_state: i32, deleting: bool) -> bool {
    deleting || pb::TargetState::try_from(target_state) != Ok(pb::TargetState::Stopped)
}

/// Connect's ConnectorInfo: `{"name", "config", "tasks": [{"connector", "task"}], "type"}`
/// (`tasks` empty while STOPPED, [`shows_tasks`]).
pub fn connector_info(info: &pb::ConnectorInfo) -> Value {
    let tasks: Vec<Value> = if shows_tasks(info.target_state, false) {
        info.tasks
            .iter()
            .map(|t| task_id(&info.name, t.task))
            .collect()
    } else {
        Vec::new()
    };
    json!({
        "name": info.name,
        "config": config(&info.name, &info.config),
        "tasks": tasks,
        "type": kind(info.kind),
    })
}

fn task_id(name: &str, task: u32) -> Value {
    json!({ "connector": name, "task": task })
}

/// The key Connect's worker adds to every task config: the task's class. A Wharf plugin
/// has one task kind, named by the plugin: the value is the connector's `connector.class`.
pub const TASK_CLASS_KEY: &str = "task.class";

/// `GET /connectors/{name}/tasks`: `[{"id": {"connector", "task"}, "config"}]`, each
/// config with `task.class` ([`TASK_CLASS_KEY`]) and `name` (the connector's) as Connect
/// shows them when the plugin's task config has none; empty while STOPPED.
pub fn task_configs(info: &pb::ConnectorInfo) -> Value {
    if !shows_tasks(info.target_state, false) {
        return json!([]);
    }
    let class = info
        .config
        .get(crate::model::CONNECTOR_CLASS)
        .cloned()
        .unwrap_or_default();
    Value::Array(
        info.tasks
            .iter()
            .map(|t| {
                let mut config: BTreeMap<String, String> = t
                    .config
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                config
                    .entry(TASK_CLASS_KEY.to_owned())
                    .or_insert_with(|| class.clone());
                config
                    .entry(NAME_KEY.to_owned())
                    .or_insert_with(|| info.name.clone());
                json!({ "id": task_id(&info.name, t.task), "config": config })
            })
            .collect(),
    )
}

/// One instance's state: `{"state", "worker_id"}` and `"trace"` when it has an error.
fn instance(status: Option<&pb::InstanceStatus>) -> Map<String, Value> {
    let mut m = Map::new();
    let (st, worker, error) = match status {
        Some(s) => (s.state, s.executor_id.as_str(), s.error.as_str()),
        None => (pb::State::Unassigned as i32, "", ""),
    };
    m.insert("state".into(), json!(state(st)));
    m.insert("worker_id".into(), json!(worker));
    if !error.is_empty() {
        m.insert("trace".into(), json!(error));
    }
    m
}

/// A task's state: `{"id", "state", "worker_id", "trace"?}`.
pub fn task_state(t: &pb::TaskStatus) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), json!(t.task));
    m.extend(instance(t.status.as_ref()));
    Value::Object(m)
}

/// Connect's ConnectorStateInfo: `{"name", "connector", "tasks", "type"}`, plus
/// `wharf_deletion` (the cleanup steps) while a deletion runs.
pub fn connector_status(s: &pb::ConnectorStatus) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!(s.name));
    m.insert(
        "connector".into(),
        Value::Object(instance(s.connector.as_ref())),
    );
    let tasks = if shows_tasks(s.target_state, s.deletion.is_some()) {
        s.tasks.iter().map(task_state).collect()
    } else {
        Vec::new()
    };
    m.insert("tasks".into(), Value::Array(tasks));
    m.insert("type".into(), json!(kind(s.kind)));
    if let Some(d) = &s.deletion {
        m.insert("wharf_deletion".into(), deletion(d));
    }
    Value::Object(m)
}

/// A deletion's progress: `{"requested_at_ms", "cleanup", "steps": [...]}`, one step per
/// task (`"task": N`) and one for the connector instance (`"task": null`).
pub fn deletion(d: &pb::DeletionStatus) -> Value {
    json!({
        "requested_at_ms": d.requested_at_ms,
        "cleanup": d.cleanup,
        "steps": d.steps.iter().map(|s| json!({
            "task": s.task,
            "state": cleanup_state(s.state),
            "worker_id": s.executor_id,
            "attempts": s.attempts,
            "last_error": s.last_error,
            "rehosted": s.rehosted,
            "connector_deleted": s.connector_deleted,
            "generation": s.generation,
            "exhausted": s.exhausted,
            "next_attempt_ms": s.next_attempt_ms,
            "forced": s.forced,
            "cleanup_not_supported": s.cleanup_not_supported,
        })).collect::<Vec<_>>(),
    })
}

fn config_type(ty: i32) -> &'static str {
    match pb::ConfigType::try_from(ty) {
        Ok(pb::ConfigType::Int) => "INT",
        Ok(pb::ConfigType::Long) => "LONG",
        Ok(pb::ConfigType::Boolean) => "BOOLEAN",
        Ok(pb::ConfigType::List) => "LIST",
        Ok(pb::ConfigType::Password) => "PASSWORD",
        Ok(pb::ConfigType::Double) => "DOUBLE",
        Ok(pb::ConfigType::String | pb::ConfigType::Unspecified) | Err(_) => "STRING",
    }
}

fn importance(i: i32) -> &'static str {
    match pb::Importance::try_from(i) {
        Ok(pb::Importance::High) => "HIGH",
        Ok(pb::Importance::Medium) => "MEDIUM",
        Ok(pb::Importance::Low | pb::Importance::Unspecified) | Err(_) => "LOW",
    }
}

/// Group name of every key: Wharf's keys are not grouped.
pub const GROUP: &str = "Common";

/// Connect's ConfigKeyInfo (KIP-769 and config/validate's `definition`).
pub fn config_key(k: &pb::ConfigKeyDef, order: usize) -> Value {
    json!({
        "name": k.name,
        "type": config_type(k.r#type),
        "required": k.required,
        "default_value": k.default_value,
        "importance": importance(k.importance),
        "documentation": k.documentation,
        "group": GROUP,
        "order_in_group": order,
        "width": "NONE",
        "display_name": k.name,
        "dependents": [],
    })
}

/// Connect's ConfigInfos of config/validate: `{"name", "error_count", "groups",
/// "configs": [{"definition", "value": {"name", "value", "recommended_values",
/// "errors", "visible"}}]}` for the defined keys and for any undefined key with an
/// error (a key create would refuse, such as `""`: shown with a STRING definition that
/// says it is undefined, so that `error_count` matches the errors listed), plus
/// `wharf_warnings` (one per key that nobody defines) and `wharf_warning_count`.
pub fn validation(v: &pb::ValidateConnectorConfigResponse) -> Value {
    let mut configs = Vec::new();
    let mut warnings = Vec::new();
    for (order, c) in v.configs.iter().enumerate() {
        warnings.extend(c.warnings.iter().cloned());
        let undefined;
        let def = match &c.definition {
            Some(def) => def,
            None if !c.errors.is_empty() => {
                undefined = pb::ConfigKeyDef {
                    name: c.name.clone(),
                    documentation: "Not defined by the runtime or the plugin.".into(),
                    ..Default::default()
                };
                &undefined
            }
            None => continue,
        };
        let value = if c.value.is_empty() && def.default_value.is_none() {
            Value::Null
        } else {
            json!(c.value)
        };
        configs.push(json!({
            "definition": config_key(def, order),
            "value": {
                "name": c.name,
                "value": value,
                "recommended_values": def.allowed_values,
                "errors": c.errors,
                "visible": true,
            },
        }));
    }
    json!({
        "name": v.plugin,
        "error_count": v.error_count,
        "groups": [GROUP],
        "configs": configs,
        "wharf_warning_count": warnings.len(),
        "wharf_warnings": warnings,
    })
}

/// Connect's PluginInfo: `{"class", "type", "version"}`.
pub fn plugin(p: &pb::ConnectorPluginInfo) -> Value {
    let info = p.plugin.clone().unwrap_or_default();
    json!({
        "class": info.name,
        "type": kind(info.kind),
        "version": info.version,
        "wharf_executors": p.executor_ids,
    })
}

/// A custom transform or predicate as Connect's `PluginInfo` (`class`, `type`
/// `transformation` or `predicate`, `version`), with the executors that have it.
pub fn transform_plugin(p: &pb::TransformPluginEntry) -> Value {
    let info = p.plugin.clone().unwrap_or_default();
    let kind = match pb::TransformPluginKind::try_from(info.kind) {
        Ok(pb::TransformPluginKind::Transformation) => "transformation",
        Ok(pb::TransformPluginKind::Predicate) => "predicate",
        Ok(pb::TransformPluginKind::Unspecified) | Err(_) => "unknown",
    };
    json!({
        "class": info.name,
        "type": kind,
        "version": info.version,
        "wharf_executors": p.executor_ids,
    })
}

/// The converters, transforms and predicates built into every executor, as Connect's
/// `PluginInfo` (`class`, `type`, `version`) of `connectorsOnly=false`.
pub fn builtin_pipeline_plugins() -> Vec<Value> {
    let version = env!("CARGO_PKG_VERSION");
    [
        (wharf::sdk::BUILTIN_CONVERTERS, "converter"),
        (wharf::sdk::BUILTIN_HEADER_CONVERTERS, "header_converter"),
        (wharf::sdk::BUILTIN_TRANSFORMS, "transformation"),
        (wharf::sdk::BUILTIN_PREDICATES, "predicate"),
    ]
    .into_iter()
    .flat_map(|(classes, kind)| {
        classes
            .iter()
            .map(move |c| json!({ "class": c, "type": kind, "version": version }))
    })
    .collect()
}

/// Connect's offsets body: `{"offsets": [{"partition": {..}, "offset": {..}}]}`; stored
/// texts that are not JSON (never written by Wharf) are shown as strings.
pub fn offsets(offsets: &[pb::SourceOffset]) -> Value {
    let parse = |t: &str| serde_json::from_str::<Value>(t).unwrap_or_else(|_| json!(t));
    json!({
        "offsets": offsets.iter().map(|o| json!({
            "partition": parse(&o.partition),
            "offset": parse(&o.offset),
        })).collect::<Vec<_>>(),
    })
}

/// A ledger entry (Wharf's extension): `{"kind", "name", "locator": {"host", ...},
/// "origin", "owner": "connector" | "task-N", "state", "incarnation", "updated_at_ms"}`;
/// empty locator parts are left out.
pub fn resource_entry(e: &pb::ResourceEntry) -> Value {
    let r = e.resource.clone().unwrap_or_default();
    let l = r.locator.unwrap_or_default();
    let mut locator = Map::new();
    for (k, v) in [
        ("host", l.host),
        ("database", l.database),
        ("vhost", l.vhost),
        ("path", l.path),
    ] {
        if !v.is_empty() {
            locator.insert(k.to_owned(), Value::String(v));
        }
    }
    json!({
        "kind": r.kind,
        "name": r.name,
        "locator": locator,
        "origin": match pb::ResourceOrigin::try_from(r.origin) {
            Ok(pb::ResourceOrigin::Created) => "created",
            Ok(pb::ResourceOrigin::Adopted) => "adopted",
            Ok(pb::ResourceOrigin::Unspecified) | Err(_) => "unknown",
        },
        "owner": match e.task {
            Some(t) => format!("task-{t}"),
            None => "connector".to_owned(),
        },
        "state": e.state,
        "incarnation": e.incarnation,
        "updated_at_ms": e.updated_at_ms,
    })
}

/// An orphan (Wharf's extension): the entry's fields plus `"id"`, `"connector"`,
/// `"reason"`, `"orphaned_at_ms"`, `"purgeable"` and `"purge_error"`.
pub fn orphan(o: &pb::OrphanedResource) -> Value {
    let mut v = o
        .entry
        .as_ref()
        .map(resource_entry)
        .unwrap_or_else(|| json!({}));
    if let Value::Object(m) = &mut v {
        m.insert("id".into(), Value::String(o.id.clone()));
        m.insert("connector".into(), Value::String(o.connector.clone()));
        m.insert("reason".into(), Value::String(o.reason.clone()));
        m.insert("orphaned_at_ms".into(), json!(o.orphaned_at_ms));
        m.insert("purgeable".into(), Value::Bool(o.purgeable));
        m.insert("purge_error".into(), Value::String(o.purge_error.clone()));
    }
    v
}

/// A deletion plan (Wharf's extension, `DELETE ...?dryRun=true`): `{"steps": [{"owner",
/// "executor", "generation", "cleanup_only", "connector_deleted"}], "remove": [entry],
/// "keep": [entry], "offsets", "consumer_groups"}`.
pub fn deletion_plan(p: &pb::DeletionPlan) -> Value {
    json!({
        "steps": p.steps.iter().map(|s| json!({
            "owner": match s.task {
                Some(t) => format!("task-{t}"),
                None => "connector".to_owned(),
            },
            "executor": s.executor,
            "generation": s.generation,
            "cleanup_only": s.cleanup_only,
            "connector_deleted": s.connector_deleted,
            "cleanup_not_supported": s.cleanup_not_supported,
        })).collect::<Vec<_>>(),
        "remove": p.remove.iter().map(resource_entry).collect::<Vec<_>>(),
        "keep": p.keep.iter().map(resource_entry).collect::<Vec<_>>(),
        "offsets": p.offsets,
        "consumer_groups": p.consumer_groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, errors: &[&str], warnings: &[&str]) -> pb::ConfigValueInfo {
        pb::ConfigValueInfo {
            name: name.into(),
            value: "v".into(),
            errors: errors.iter().map(|e| (*e).to_owned()).collect(),
            warnings: warnings.iter().map(|w| (*w).to_owned()).collect(),
            definition: None,
        }
    }

    #[test]
    fn an_undefined_key_with_an_error_is_listed_so_the_error_count_adds_up() {
        let v = pb::ValidateConnectorConfigResponse {
            plugin: "p".into(),
            error_count: 1,
            configs: vec![entry("", &["the key is empty"], &[])],
            warning_count: 0,
        };
        let body = validation(&v);
        let configs = body["configs"].as_array().expect("configs");
        assert_eq!(configs.len(), 1, "{body}");
        assert_eq!(configs[0]["value"]["name"], "");
        assert_eq!(configs[0]["value"]["errors"], json!(["the key is empty"]));
        assert_eq!(configs[0]["definition"]["type"], "STRING");
    }

    #[test]
    fn an_undefined_key_without_an_error_is_only_a_warning() {
        let v = pb::ValidateConnectorConfigResponse {
            plugin: "p".into(),
            error_count: 0,
            configs: vec![entry("x", &[], &["unknown key \"x\""])],
            warning_count: 1,
        };
        let body = validation(&v);
        assert_eq!(body["configs"], json!([]), "{body}");
        assert_eq!(body["wharf_warning_count"], 1);
    }
}
