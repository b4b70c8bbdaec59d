//! The plugin's own config checks before a config is stored or reported valid: its
//! validators are code, which only an executor hosting the plugin has, so the admin core
//! asks one live executor (`Executor.ValidateConfig`, bounded by
//! [`VALIDATE_CALL_TIMEOUT_MS`]) as Kafka Connect runs `Connector#validate` on a worker.
//!
//! When no live executor offers the plugin, or the call fails, the checks did not run:
//! a validate says so in a warning on `connector.class`, and a create or config put is
//! accepted on the declarative checks alone (logged at WARN); the plugin's checks then
//! run when the connector starts, as before. The decisions are the pure functions
//! [`decide`], [`refusal`] and [`merge_into`]; [`ask`] only makes the call.

use tonic::Code;
use wharf::pb::v1 as pb;
use wharf::sdk::{ConfigDef, ConfigMap, REDACTED};

use super::ApiError;
use crate::model::CONNECTOR_CLASS;
use crate::reconcile::Cluster;
use crate::reconcile::client::{CallError, VALIDATE_CALL_TIMEOUT_MS};

/// What asking an executor to run the plugin's checks came to (the facts, before any
/// decision).
#[derive(Debug)]
pub enum Asked {
    /// No live, reachable, verified executor offers the plugin: nobody was asked.
    NoLiveExecutor,
    /// Executor `executor` ran the checks: `(key, messages)` for each key with an error.
    Answered {
        /// Id of the executor that answered.
        executor: String,
        /// Keys with errors, in the plugin definition's order.
        keys: Vec<(String, Vec<String>)>,
        /// The resources the plugin declared it would provision (`Err`: its text).
        declared: Result<Vec<wharf::sdk::Resource>, String>,
    },
    /// The call to `executor` failed.
    Failed {
        /// Id of the executor asked.
        executor: String,
        /// Why.
        error: CallError,
    },
    /// `executor` did not answer within [`VALIDATE_CALL_TIMEOUT_MS`].
    TimedOut {
        /// Id of the executor asked.
        executor: String,
    },
}

/// Whether the plugin's own checks ran, and what they found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginCheck {
    /// An executor ran them: `(key, messages)` for each key with an error (none: valid).
    Ran(Vec<(String, Vec<String>)>),
    /// They did not run; why, for the operator (names no config value).
    NotRun(String),
}

/// Decides what `asked` means for plugin `plugin`'s config.
pub fn decide(asked: Asked, plugin: &str) -> PluginCheck {
    match asked {
        Asked::NoLiveExecutor => {
            PluginCheck::NotRun(format!("no live executor offers plugin {plugin:?}"))
        }
        Asked::Answered { keys, .. } => PluginCheck::Ran(keys),
        Asked::Failed { executor, error } => PluginCheck::NotRun(match error.code() {
            Some(Code::NotFound) => format!(
                "executor {executor:?} no longer offers plugin {plugin:?} (its registration is out of date)"
            ),
            Some(Code::Unimplemented) => {
                format!("executor {executor:?} predates ValidateConfig (upgrade it)")
            }
            Some(_) | None => format!("asking executor {executor:?} failed: {error}"),
        }),
        Asked::TimedOut { executor } => PluginCheck::NotRun(format!(
            "executor {executor:?} did not answer within {VALIDATE_CALL_TIMEOUT_MS} ms"
        )),
    }
}

/// The refusal of a create or config put that `check` found errors in: INVALID_ARGUMENT
/// naming `config[<key>]` of the first key with an error, with its first message (the
/// shape of the declarative checks' refusals). `None` when the checks found nothing or
/// did not run.
pub fn refusal(check: &PluginCheck) -> Option<ApiError> {
    match check {
        PluginCheck::Ran(keys) => keys.iter().find_map(|(key, errors)| {
            errors.first().map(|e| ApiError::InvalidArgument {
                field: format!("config[{key}]"),
                reason: e.clone(),
            })
        }),
        PluginCheck::NotRun(_) => None,
    }
}

/// The warning on `connector.class` of a validate whose plugin checks did not run.
pub fn not_run_warning(why: &str) -> String {
    format!(
        "the plugin's own checks (its validators) did not run: {why}; only the checks above ran, and the plugin's run when the connector starts"
    )
}

/// Adds `check` to a validate's per-key results: each error the plugin's checks found
/// that the declarative checks did not report goes to its key's entry (a new entry,
/// value as in `redacted`, for a key the control plane does not know); a check that did
/// not run is a warning on `connector.class`. Counts are not updated here.
pub fn merge_into(
    configs: &mut Vec<pb::ConfigValueInfo>,
    check: &PluginCheck,
    redacted: &ConfigMap,
) {
    match check {
        PluginCheck::Ran(keys) => {
            for (key, errors) in keys {
                let at = match configs.iter().position(|c| &c.name == key) {
                    Some(i) => i,
                    None => {
                        configs.push(pb::ConfigValueInfo {
                            name: key.clone(),
                            value: redacted.get(key).cloned().unwrap_or_default(),
                            ..Default::default()
                        });
                        configs.len() - 1
                    }
                };
                let entry = &mut configs[at];
                for e in errors {
                    if !entry.errors.contains(e) {
                        entry.errors.push(e.clone());
                    }
                }
            }
        }
        PluginCheck::NotRun(why) => {
            if let Some(c) = configs.iter_mut().find(|c| c.name == CONNECTOR_CLASS) {
                c.warnings.push(not_run_warning(why));
            }
        }
    }
}

/// What a plugin's message shows instead of a quoted value it echoed.
pub const NOT_SHOWN: &str = "(not shown)";

/// `keys` with every value of a secret key (per `def`, or named like a secret) that a
/// message contains replaced by [`REDACTED`], and every other key's value the message
/// quotes (`"..."`, as `{value:?}` writes it) by [`NOT_SHOWN`]: messages name the rule,
/// never the value, because the answer goes to the operator, the audit trail and logs.
/// The executor already redacts secrets; a plugin's validator may still echo a value.
pub fn without_secrets(
    def: &ConfigDef,
    config: &ConfigMap,
    keys: Vec<(String, Vec<String>)>,
) -> Vec<(String, Vec<String>)> {
    keys.into_iter()
        .map(|(key, errors)| {
            let probe: ConfigMap = [(key.clone(), "x".to_owned())].into_iter().collect();
            let secret = def.redact(&probe).get(&key).is_some_and(|v| v == REDACTED);
            let given = config.get(&key).filter(|v| !v.is_empty());
            let errors = errors
                .into_iter()
                .map(|e| match given {
                    Some(v) if secret => e.replace(v.as_str(), REDACTED),
                    Some(v) => e.replace(&format!("{v:?}"), NOT_SHOWN),
                    None => e,
                })
                .collect();
            (key, errors)
        })
        .collect()
}

/// Asks the live executors offering `plugin` (live, reachable and verified: ones that
/// work could be placed on), one after the other, to run the plugin's checks on `config`
/// (whose secrets `def`, the plugin's full definition, names: see [`without_secrets`]),
/// all within [`VALIDATE_CALL_TIMEOUT_MS`]. A call that fails at once (an executor that
/// predates ValidateConfig, a refused connection) moves on to the next executor; one that
/// does not answer in time ends the asking (the bound is for the operator's call, not
/// per executor). Records nothing about the executors' reachability: an operator's call
/// is not the herder's evidence.
///
/// # Errors
/// Store errors reading the executors.
pub async fn ask(
    cluster: &Cluster,
    plugin: &str,
    def: &ConfigDef,
    config: &ConfigMap,
) -> Result<Asked, crate::store::StoreError> {
    let view = cluster.executor_view()?;
    let deadline =
        tokio::time::Instant::now() + std::time::Duration::from_millis(VALIDATE_CALL_TIMEOUT_MS);
    let mut last = Asked::NoLiveExecutor;
    for exec in view
        .placeable
        .iter()
        .filter_map(|id| view.all.get(id))
        .filter(|e| e.has_plugin(plugin))
    {
        let executor = exec.id.clone();
        let call = cluster.clients.validate_config_on(exec, plugin, config);
        last = match tokio::time::timeout_at(deadline, call).await {
            Ok(Ok(v)) => {
                let declared = if v.declared_error.is_empty() {
                    Ok(v.declared)
                } else {
                    Err(v.declared_error)
                };
                return Ok(Asked::Answered {
                    executor,
                    keys: without_secrets(def, config, v.keys),
                    declared,
                });
            }
            Ok(Err(error)) => Asked::Failed { executor, error },
            Err(_) => return Ok(Asked::TimedOut { executor }),
        };
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(pairs: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
        pairs
            .iter()
            .map(|(k, es)| {
                (
                    (*k).to_owned(),
                    es.iter().map(|e| (*e).to_owned()).collect(),
                )
            })
            .collect()
    }

    fn refused(code: Code) -> Asked {
        Asked::Failed {
            executor: "exec-1".into(),
            error: CallError::Refused {
                address: "http://127.0.0.2:1".into(),
                code,
                message: "m".into(),
            },
        }
    }

    fn not_run(asked: Asked) -> String {
        match decide(asked, "p") {
            PluginCheck::NotRun(why) => why,
            PluginCheck::Ran(k) => panic!("ran: {k:?}"),
        }
    }

    #[test]
    fn no_live_executor_means_the_checks_did_not_run() {
        assert!(not_run(Asked::NoLiveExecutor).contains("no live executor offers plugin \"p\""));
    }

    #[test]
    fn an_answer_carries_the_executors_errors() {
        let k = keys(&[("uri", &["must not hold credentials"])]);
        let asked = Asked::Answered {
            executor: "exec-1".into(),
            keys: k.clone(),
            declared: Ok(Vec::new()),
        };
        assert_eq!(decide(asked, "p"), PluginCheck::Ran(k));
    }

    #[test]
    fn an_executor_without_the_plugin_says_its_registration_is_stale() {
        assert!(not_run(refused(Code::NotFound)).contains("no longer offers plugin"));
    }

    #[test]
    fn an_old_executor_is_named_as_predating_the_call() {
        assert!(not_run(refused(Code::Unimplemented)).contains("predates ValidateConfig"));
    }

    #[test]
    fn another_refusal_or_no_answer_says_the_call_failed() {
        assert!(
            not_run(refused(Code::PermissionDenied)).contains("asking executor \"exec-1\" failed")
        );
        let unreachable = Asked::Failed {
            executor: "exec-1".into(),
            error: CallError::Unreachable {
                address: "http://127.0.0.2:1".into(),
                message: "connection refused".into(),
            },
        };
        assert!(not_run(unreachable).contains("connection refused"));
    }

    #[test]
    fn a_timeout_names_the_bound() {
        let why = not_run(Asked::TimedOut {
            executor: "exec-1".into(),
        });
        assert!(
            why.contains(&format!("{VALIDATE_CALL_TIMEOUT_MS} ms")),
            "{why}"
        );
    }

    #[test]
    fn errors_refuse_naming_the_first_key_with_one() {
        let check = PluginCheck::Ran(keys(&[("a", &[]), ("uri", &["bad", "worse"])]));
        let e = refusal(&check).expect("refused");
        assert!(
            matches!(&e, ApiError::InvalidArgument { field, reason } if field == "config[uri]" && reason == "bad"),
            "{e}"
        );
    }

    #[test]
    fn no_errors_or_no_checks_refuse_nothing() {
        assert!(refusal(&PluginCheck::Ran(Vec::new())).is_none());
        assert!(refusal(&PluginCheck::NotRun("why".into())).is_none());
    }

    fn entry(name: &str, errors: &[&str]) -> pb::ConfigValueInfo {
        pb::ConfigValueInfo {
            name: name.into(),
            errors: errors.iter().map(|e| (*e).to_owned()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn merged_errors_join_their_key_once() {
        let mut configs = vec![entry(CONNECTOR_CLASS, &[]), entry("uri", &["type error"])];
        let redacted: ConfigMap = [("extra".to_owned(), "v".to_owned())].into_iter().collect();
        let check = PluginCheck::Ran(keys(&[
            ("uri", &["type error", "must not hold credentials"]),
            ("extra", &["bad"]),
        ]));
        merge_into(&mut configs, &check, &redacted);
        assert_eq!(
            configs[1].errors,
            ["type error", "must not hold credentials"]
        );
        assert_eq!(configs[2].name, "extra");
        assert_eq!(configs[2].value, "v");
        assert_eq!(configs[2].errors, ["bad"]);
        assert!(configs[0].warnings.is_empty());
    }

    #[test]
    fn checks_that_did_not_run_are_a_warning_on_the_class() {
        let mut configs = vec![entry(CONNECTOR_CLASS, &[]), entry("uri", &[])];
        merge_into(
            &mut configs,
            &PluginCheck::NotRun("no live executor offers plugin \"p\"".into()),
            &ConfigMap::new(),
        );
        assert_eq!(configs[0].warnings.len(), 1);
        assert!(configs[0].warnings[0].contains("did not run: no live executor"));
        assert!(configs.iter().all(|c| c.errors.is_empty()));
    }

    #[test]
    fn a_secret_value_in_a_message_is_redacted_and_a_quoted_value_not_shown() {
        let def = wharf::sdk::runtime_config_def();
        let config: ConfigMap = [
            ("db.password".to_owned(), "S3cr3t".to_owned()),
            ("label".to_owned(), "shown".to_owned()),
        ]
        .into_iter()
        .collect();
        let out = without_secrets(
            &def,
            &config,
            keys(&[
                ("db.password", &["S3cr3t is weak"]),
                ("label", &["shown is odd", "value \"shown\" is odd"]),
            ]),
        );
        assert_eq!(out[0].1, [format!("{REDACTED} is weak")]);
        assert_eq!(
            out[1].1,
            [
                "shown is odd".to_owned(),
                format!("value {NOT_SHOWN} is odd")
            ]
        );
    }
}
