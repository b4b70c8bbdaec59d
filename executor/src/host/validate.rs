//! ValidateConfig: a plugin's full config checks (the runtime's keys and the plugin's,
//! validators included) on a config, answered as key names and messages only. The
//! control plane has the plugin's key definitions but not its validators (code), so it
//! asks an executor hosting the plugin before it stores a config (docs/connector-guide.md,
//! section 2).

use wharf::sdk::{ConfigDef, ConfigMap, REDACTED};

/// The errors of `config` under `def`, one entry per key with at least one error, in
/// `def`'s order: `(key, messages)`. A message of a secret key (marked secret, or named
/// like one) that contains the key's value has the value replaced by [`REDACTED`]: a
/// plugin's validator may echo what it was given, and the answer must never carry a
/// secret.
pub fn key_errors(def: &ConfigDef, config: &ConfigMap) -> Vec<(String, Vec<String>)> {
    def.validate(config)
        .into_iter()
        .filter(|v| !v.errors.is_empty())
        .map(|v| {
            let secret_value = config
                .get(&v.name)
                .filter(|value| !value.is_empty() && is_secret(def, &v.name));
            let errors = v
                .errors
                .into_iter()
                .map(|e| match secret_value {
                    Some(value) => e.replace(value.as_str(), REDACTED),
                    None => e,
                })
                .collect();
            (v.name, errors)
        })
        .collect()
}

/// What is wrong with a sink's `topics` (`None`: the key is absent): missing or naming
/// no topic, as Kafka Connect refuses a sink connector without `topics` or
/// `topics.regex` (Wharf has no `topics.regex`), or naming a topic twice
/// ([`duplicate_topic`]). `None` when it names each of its topics once. Pure.
pub fn sink_topics_problem(topics: Option<&str>) -> Option<String> {
    match topics {
        None => {
            Some("missing: a sink connector must name the topics it reads (comma-separated)".into())
        }
        Some(t) if t.split(',').all(|x| x.trim().is_empty()) => Some(
            "names no topic: a sink connector must name the topics it reads (comma-separated)"
                .into(),
        ),
        Some(t) => duplicate_topic(t),
    }
}

/// What is wrong with a sink's `topics` list: a topic named twice, as Kafka Connect
/// 4.x refuses it (`SinkConnectorConfig` defines `topics` with
/// `ConfigDef.ValidList.anyNonDuplicateValues`, connect-runtime 4.3.0); the message
/// names the first repeated topic. `None` when every name is there once. Pure.
pub fn duplicate_topic(topics: &str) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    topics
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .find(|t| !seen.insert(*t))
        .map(|t| {
            format!(
                "values must not be duplicated: topic {t:?} is listed more than once; name each topic once"
            )
        })
}

/// `errors` of a config whose values may hold config-provider references: a key whose
/// value has one is checked by `check` (is its provider configured here, does its path
/// lie under the root) instead of the validators, which would judge the reference's
/// text; its value is only known, and the validators' turn comes, at the start.
pub fn with_references(
    errors: Vec<(String, Vec<String>)>,
    config: &ConfigMap,
    check: impl Fn(&str) -> Vec<String>,
) -> Vec<(String, Vec<String>)> {
    let referenced = |k: &str| {
        config
            .get(k)
            .is_some_and(|v| wharf::config_provider::has_reference(v))
    };
    let mut out: Vec<_> = errors.into_iter().filter(|(k, _)| !referenced(k)).collect();
    let mut keys: Vec<&String> = config.keys().filter(|k| referenced(k)).collect();
    keys.sort();
    for key in keys {
        let problems = check(&config[key]);
        if !problems.is_empty() {
            out.push((key.clone(), problems));
        }
    }
    out
}

/// Adds the errors a plugin's own check (an out-of-process plugin's `validate`) found to
/// `errors` (from [`key_errors`]): a key already there gets the new messages after its
/// own, a new key is added at the end; a message of a secret key has its value replaced
/// by [`REDACTED`], as in [`key_errors`]. Pure.
pub fn merge_plugin_errors(
    def: &ConfigDef,
    config: &ConfigMap,
    mut errors: Vec<(String, Vec<String>)>,
    found: Vec<(String, Vec<String>)>,
) -> Vec<(String, Vec<String>)> {
    for (key, messages) in found {
        if messages.is_empty() {
            continue;
        }
        let secret_value = config
            .get(&key)
            .filter(|value| !value.is_empty() && is_secret(def, &key));
        let messages: Vec<String> = messages
            .into_iter()
            .map(|m| match secret_value {
                Some(value) => m.replace(value.as_str(), REDACTED),
                None => m,
            })
            .collect();
        match errors.iter_mut().find(|(k, _)| *k == key) {
            Some((_, existing)) => existing.extend(messages),
            None => errors.push((key, messages)),
        }
    }
    errors
}

/// True when `def` redacts `key` (marked secret, or named like a secret).
fn is_secret(def: &ConfigDef, key: &str) -> bool {
    let probe: ConfigMap = [(key.to_owned(), "x".to_owned())].into_iter().collect();
    def.redact(&probe).get(key).is_some_and(|v| v == REDACTED)
}

#[cfg(test)]
mod tests {
    use wharf::sdk::{ConfigKey, ConfigType, Importance};

    use super::*;

    #[test]
    fn a_topic_named_twice_is_named() {
        let why = duplicate_topic("a, b,a").unwrap_or_default();
        assert!(why.contains("\"a\""), "{why}");
        assert!(why.contains("duplicated"), "{why}");
    }

    #[test]
    fn a_sink_without_topics_or_with_none_named_is_told_so() {
        assert!(sink_topics_problem(None).is_some_and(|w| w.starts_with("missing")));
        assert!(sink_topics_problem(Some(" , ")).is_some_and(|w| w.starts_with("names no topic")));
        assert!(sink_topics_problem(Some("a,a")).is_some_and(|w| w.contains("duplicated")));
        assert_eq!(sink_topics_problem(Some("a,b")), None);
    }

    #[test]
    fn distinct_topics_pass() {
        assert_eq!(duplicate_topic("a,b,c"), None);
        assert_eq!(duplicate_topic("a"), None);
        assert_eq!(duplicate_topic("a,,b"), None);
    }

    fn config(pairs: &[(&str, &str)]) -> ConfigMap {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn echoing(value: &str) -> Result<(), String> {
        Err(format!("value {value} is refused"))
    }

    fn def() -> ConfigDef {
        ConfigDef::new()
            .define(
                ConfigKey::new("a", ConfigType::String, Importance::High, "a").validator(echoing),
            )
            .define(
                ConfigKey::new("uri", ConfigType::String, Importance::High, "uri")
                    .secret()
                    .validator(echoing),
            )
            .define(ConfigKey::new(
                "fine",
                ConfigType::String,
                Importance::Low,
                "fine",
            ))
    }

    #[test]
    fn only_keys_with_errors_are_answered_in_definition_order() {
        let errors = key_errors(&def(), &config(&[("uri", "u"), ("a", "x"), ("fine", "y")]));
        let keys: Vec<&str> = errors.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a", "uri"]);
    }

    #[test]
    fn a_validator_message_never_carries_a_secret_value() {
        let errors = key_errors(&def(), &config(&[("uri", "amqp://u:S3cr3t@h")]));
        let (_, messages) = &errors[0];
        assert_eq!(messages, &[format!("value {REDACTED} is refused")]);
    }

    #[test]
    fn a_plain_key_message_is_kept_as_the_validator_wrote_it() {
        let errors = key_errors(&def(), &config(&[("a", "shown")]));
        assert_eq!(errors[0].1, ["value shown is refused"]);
    }

    #[test]
    fn a_plugins_own_errors_join_the_definitions_and_hide_secrets() {
        let cfg = config(&[("uri", "amqp://u:S3cr3t@h"), ("a", "x")]);
        let errors = merge_plugin_errors(
            &def(),
            &cfg,
            key_errors(&def(), &cfg),
            vec![
                ("a".to_owned(), vec!["unreachable".to_owned()]),
                (
                    "uri".to_owned(),
                    vec!["amqp://u:S3cr3t@h refused the login".to_owned()],
                ),
                ("new".to_owned(), vec!["missing".to_owned()]),
                ("empty".to_owned(), Vec::new()),
            ],
        );
        let keys: Vec<&str> = errors.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a", "uri", "new"]);
        assert_eq!(errors[0].1, ["value x is refused", "unreachable"]);
        assert_eq!(errors[1].1[1], format!("{REDACTED} refused the login"));
    }

    #[test]
    fn a_valid_config_has_no_errors() {
        assert!(key_errors(&def(), &config(&[("fine", "y")])).is_empty());
    }

    #[test]
    fn a_referenced_value_is_checked_by_its_provider_not_by_the_validators() {
        let c = config(&[
            ("a", "${file:x:y}"),
            ("uri", "amqp://secret"),
            ("fine", "${env:V}"),
        ]);
        let errors = with_references(key_errors(&def(), &c), &c, |v| {
            if v.starts_with("${file") {
                vec!["not configured".to_owned()]
            } else {
                Vec::new()
            }
        });
        assert_eq!(
            errors,
            [
                (
                    "uri".to_owned(),
                    vec![format!("value {REDACTED} is refused")]
                ),
                ("a".to_owned(), vec!["not configured".to_owned()]),
            ]
        );
    }
}
