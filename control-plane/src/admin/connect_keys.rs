//! Kafka Connect's connector-level runtime keys, and which of them Wharf implements: a
//! config that carries one Wharf does not implement (exactly-once support, a connector's
//! own offsets topic, ...) is refused naming the key, never stored and silently
//! ignored (converters, transforms, predicates and `errors.*` are implemented: an
//! executor checks their values, docs/pipeline.md); so is a value with a
//! config-provider reference (KIP-297) to a provider Wharf does not implement, or of a
//! shape its provider does not take ([`provider_refusal`]; references to `file`,
//! `directory` and `env` are stored as written and resolved by the executor that runs
//! the instance). A key the plugin itself defines is the plugin's and is never refused
//! here.
//!
//! The keys are those of Apache Kafka 3.9 and 4.x: the definitions of
//! `org.apache.kafka.connect.runtime.ConnectorConfig`, `SinkConnectorConfig` and
//! `SourceConnectorConfig`, as the Kafka documentation's "Kafka Connect Configs" page
//! lists them (its source and sink connector sections,
//! <https://kafka.apache.org/39/generated/connect_config.html>), plus the per-connector
//! client overrides (`producer.override.*`, `consumer.override.*`, `admin.override.*`,
//! KIP-458). docs/rest.md carries the same list.

use wharf::sdk::ConfigDef;

/// A Kafka Connect runtime key, by the feature it configures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectKey {
    /// `name`: the connector's name, which the REST gateway puts in the config.
    Name,
    /// `connector.class`.
    ConnectorClass,
    /// `tasks.max`.
    TasksMax,
    /// `topics`: a sink's topics (the executor subscribes the sink to them).
    SinkTopics,
    /// `topics.regex`: a sink's topics by pattern.
    SinkTopicsRegex,
    /// `tasks.max.enforce`.
    TasksMaxEnforce,
    /// `connector.plugin.version` (KIP-891).
    PluginVersion,
    /// `key.converter`, `value.converter`, `header.converter` and their options.
    Converter,
    /// `transforms` and `transforms.<alias>.*` (KIP-66).
    Transforms,
    /// `predicates` and `predicates.<alias>.*` (KIP-585).
    Predicates,
    /// `errors.tolerance` (KIP-298).
    ErrorTolerance,
    /// `errors.retry.timeout`, `errors.retry.delay.max.ms`.
    ErrorRetry,
    /// `errors.log.enable`, `errors.log.include.messages`.
    ErrorLog,
    /// `errors.deadletterqueue.*` (a sink's dead letter queue).
    DeadLetterQueue,
    /// `topic.creation.groups` and `topic.creation.*` (KIP-158).
    TopicCreation,
    /// `exactly.once.support` (KIP-618).
    ExactlyOnce,
    /// `transaction.boundary`, `transaction.boundary.interval.ms` (KIP-618).
    TransactionBoundary,
    /// `offsets.storage.topic`: a source's own offsets topic (KIP-618).
    OffsetsTopic,
    /// `producer.override.*`, `consumer.override.*`, `admin.override.*` (KIP-458).
    ClientOverride,
    /// `config.action.reload`.
    ConfigReload,
}

/// How a key is matched: the whole name, or every name that starts with the text.
#[derive(Debug, Clone, Copy)]
enum Pattern {
    Exact(&'static str),
    Prefix(&'static str),
}

/// Every Kafka Connect connector-level runtime key Wharf recognises, with its feature.
const CONNECT_KEYS: &[(Pattern, ConnectKey)] = &[
    (Pattern::Exact("name"), ConnectKey::Name),
    (
        Pattern::Exact("connector.class"),
        ConnectKey::ConnectorClass,
    ),
    (Pattern::Exact("tasks.max"), ConnectKey::TasksMax),
    (
        Pattern::Exact("tasks.max.enforce"),
        ConnectKey::TasksMaxEnforce,
    ),
    (Pattern::Exact("topics"), ConnectKey::SinkTopics),
    (Pattern::Exact("topics.regex"), ConnectKey::SinkTopicsRegex),
    (
        Pattern::Exact("connector.plugin.version"),
        ConnectKey::PluginVersion,
    ),
    (Pattern::Exact("key.converter"), ConnectKey::Converter),
    (Pattern::Prefix("key.converter."), ConnectKey::Converter),
    (Pattern::Exact("value.converter"), ConnectKey::Converter),
    (Pattern::Prefix("value.converter."), ConnectKey::Converter),
    (Pattern::Exact("header.converter"), ConnectKey::Converter),
    (Pattern::Prefix("header.converter."), ConnectKey::Converter),
    (Pattern::Exact("transforms"), ConnectKey::Transforms),
    (Pattern::Prefix("transforms."), ConnectKey::Transforms),
    (Pattern::Exact("predicates"), ConnectKey::Predicates),
    (Pattern::Prefix("predicates."), ConnectKey::Predicates),
    (
        Pattern::Exact("errors.tolerance"),
        ConnectKey::ErrorTolerance,
    ),
    (
        Pattern::Exact("errors.retry.timeout"),
        ConnectKey::ErrorRetry,
    ),
    (
        Pattern::Exact("errors.retry.delay.max.ms"),
        ConnectKey::ErrorRetry,
    ),
    (Pattern::Exact("errors.log.enable"), ConnectKey::ErrorLog),
    (
        Pattern::Exact("errors.log.include.messages"),
        ConnectKey::ErrorLog,
    ),
    (
        Pattern::Prefix("errors.deadletterqueue."),
        ConnectKey::DeadLetterQueue,
    ),
    (
        Pattern::Prefix("topic.creation."),
        ConnectKey::TopicCreation,
    ),
    (
        Pattern::Exact("exactly.once.support"),
        ConnectKey::ExactlyOnce,
    ),
    (
        Pattern::Exact("transaction.boundary"),
        ConnectKey::TransactionBoundary,
    ),
    (
        Pattern::Exact("transaction.boundary.interval.ms"),
        ConnectKey::TransactionBoundary,
    ),
    (
        Pattern::Exact("offsets.storage.topic"),
        ConnectKey::OffsetsTopic,
    ),
    (
        Pattern::Prefix("producer.override."),
        ConnectKey::ClientOverride,
    ),
    (
        Pattern::Prefix("consumer.override."),
        ConnectKey::ClientOverride,
    ),
    (
        Pattern::Prefix("admin.override."),
        ConnectKey::ClientOverride,
    ),
    (
        Pattern::Exact("config.action.reload"),
        ConnectKey::ConfigReload,
    ),
];

/// The Kafka Connect runtime feature `key` configures, `None` for a key Connect's runtime
/// does not define.
pub fn classify(key: &str) -> Option<ConnectKey> {
    CONNECT_KEYS
        .iter()
        .find(|(p, _)| match p {
            Pattern::Exact(name) => key == *name,
            Pattern::Prefix(prefix) => key.len() > prefix.len() && key.starts_with(prefix),
        })
        .map(|(_, k)| *k)
}

/// Whether Wharf implements a Connect runtime feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Wharf's runtime reads the key as Kafka Connect does.
    Implemented,
    /// Wharf does not: a config with the key is refused. `feature` names what Connect
    /// does with it, `instead` what the operator can do.
    NotImplemented {
        /// What the key configures in Kafka Connect.
        feature: &'static str,
        /// What to do instead.
        instead: &'static str,
    },
}

/// Whether Wharf implements `key`'s feature, and if not, what to do instead.
pub fn support(key: ConnectKey) -> Support {
    let not = |feature, instead| Support::NotImplemented { feature, instead };
    match key {
        ConnectKey::Name | ConnectKey::ConnectorClass | ConnectKey::TasksMax => {
            Support::Implemented
        }
        ConnectKey::SinkTopics => Support::Implemented,
        ConnectKey::SinkTopicsRegex => not(
            "subscribing a sink to topics by pattern (topics.regex)",
            "list the topics in topics instead",
        ),
        ConnectKey::TasksMaxEnforce => not(
            "tasks.max.enforce (Wharf always holds a connector to tasks.max)",
            "remove the key",
        ),
        ConnectKey::PluginVersion => not(
            "plugin versions (KIP-891)",
            "remove the key; an executor offers one version of each plugin",
        ),
        // The record pipeline (executor/src/pipeline/, docs/pipeline.md): the values are
        // checked by an executor (its ValidateConfig), each problem on its key.
        ConnectKey::Converter
        | ConnectKey::Transforms
        | ConnectKey::Predicates
        | ConnectKey::ErrorTolerance
        | ConnectKey::ErrorRetry
        | ConnectKey::ErrorLog
        | ConnectKey::DeadLetterQueue => Support::Implemented,
        ConnectKey::TopicCreation => Support::Implemented,
        ConnectKey::ExactlyOnce | ConnectKey::TransactionBoundary => not(
            "exactly-once source transactions",
            "remove the key; docs/lifecycle.md says what a source's offsets guarantee",
        ),
        ConnectKey::OffsetsTopic => not(
            "a connector's own offsets topic",
            "remove the key; a source's offsets live in the control plane's store",
        ),
        // Per-connector Kafka client overrides (KIP-458): an executor checks them against
        // its record log's policy (ValidateConfig; refused on a log that is not Kafka).
        ConnectKey::ClientOverride => Support::Implemented,
        ConnectKey::ConfigReload => not("config.action.reload", "remove the key"),
    }
}

/// Why `key` is refused in a config whose plugin's (and the runtime's) keys `def` holds:
/// a Kafka Connect runtime key Wharf does not implement that `def` does not define.
/// `None` when it is accepted (defined, implemented, or not a Connect key at all).
pub fn key_refusal(def: &ConfigDef, key: &str) -> Option<String> {
    if def.key(key).is_some() {
        return None;
    }
    match support(classify(key)?) {
        Support::Implemented => None,
        Support::NotImplemented { feature, instead } => Some(format!(
            "a Kafka Connect runtime key: Wharf does not implement Kafka Connect's {feature} yet; {instead} (docs/rest.md lists the Kafka Connect keys Wharf refuses)"
        )),
    }
}

/// True when `key` is a Kafka Connect runtime key Wharf implements (validate gives it no
/// "unknown key" warning: the runtime reads it).
pub fn implemented(key: &str) -> bool {
    classify(key).is_some_and(|k| support(k) == Support::Implemented)
}

/// True when `value` holds a config-provider reference in KIP-297 syntax,
/// `${provider:key}` or `${provider:path:key}` ([`wharf::config_provider::references`]).
pub fn has_provider_reference(value: &str) -> bool {
    wharf::config_provider::has_reference(value)
}

/// Why the config-provider references of `value` are refused: a provider Wharf does not
/// implement (named), or a reference its provider cannot take (no path, `..`). Names the
/// reference, never a value; `None` for a value without references or with good ones.
/// Whether the provider is configured, and the path under the root, are the executor's
/// to say (ValidateConfig, and the start).
pub fn provider_refusal(value: &str) -> Option<String> {
    wharf::config_provider::check_value(value).err().map(|e| {
        format!("{e} (config providers, KIP-297: docs/configuration.md, \"Config providers\")")
    })
}

/// Why a config-provider reference in the value of `key` is refused: a key of the
/// runtime (`connector.class`, `tasks.max`, `cleanup.*`) is read by the control plane,
/// which never resolves references. `None` for other keys and values without one.
pub fn runtime_key_reference_refusal(key: &str, value: &str) -> Option<String> {
    (has_provider_reference(value) && wharf::sdk::runtime_config_def().key(key).is_some()).then(|| {
        "a runtime key holds a config provider reference: the control plane reads this key itself and never resolves references; give the value itself".to_owned()
    })
}

/// Why the value of `key` in `config`, or the key itself, is refused: the first problem
/// of [`key_refusal`], [`runtime_key_reference_refusal`] and [`provider_refusal`]. Names
/// no value.
pub fn problem(def: &ConfigDef, key: &str, value: &str) -> Option<String> {
    key_refusal(def, key)
        .or_else(|| runtime_key_reference_refusal(key, value))
        .or_else(|| provider_refusal(value))
}

/// The first refused key of `config` in sorted order (so the answer does not vary), as
/// `(config[<key>], reason)`.
pub fn first_refused<'a>(
    def: &ConfigDef,
    config: impl Iterator<Item = (&'a String, &'a String)>,
) -> Option<(String, String)> {
    config
        .filter_map(|(k, v)| problem(def, k, v).map(|why| (k, why)))
        .min()
        .map(|(k, why)| (format!("config[{k}]"), why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wharf::sdk::{ConfigKey, ConfigType, Importance, runtime_config_def};

    fn refused(key: ConnectKey) -> bool {
        matches!(support(key), Support::NotImplemented { .. })
    }

    #[test]
    fn the_name_the_class_and_tasks_max_are_implemented() {
        for (k, c) in [
            ("name", ConnectKey::Name),
            ("connector.class", ConnectKey::ConnectorClass),
            ("tasks.max", ConnectKey::TasksMax),
        ] {
            assert_eq!(classify(k), Some(c));
            assert!(!refused(c), "{k}");
        }
    }

    #[test]
    fn a_sinks_topics_are_implemented_and_its_topics_regex_is_not() {
        assert_eq!(classify("topics"), Some(ConnectKey::SinkTopics));
        assert!(!refused(ConnectKey::SinkTopics));
        assert_eq!(classify("topics.regex"), Some(ConnectKey::SinkTopicsRegex));
        assert!(refused(ConnectKey::SinkTopicsRegex));
    }

    #[test]
    fn tasks_max_enforce_and_the_plugin_version_are_refused() {
        assert_eq!(
            classify("tasks.max.enforce"),
            Some(ConnectKey::TasksMaxEnforce)
        );
        assert_eq!(
            classify("connector.plugin.version"),
            Some(ConnectKey::PluginVersion)
        );
        assert!(refused(ConnectKey::TasksMaxEnforce));
        assert!(refused(ConnectKey::PluginVersion));
    }

    #[test]
    fn converters_and_their_options_are_implemented() {
        for k in [
            "key.converter",
            "value.converter",
            "header.converter",
            "value.converter.schemas.enable",
            "key.converter.plugin.version",
        ] {
            assert_eq!(classify(k), Some(ConnectKey::Converter), "{k}");
        }
        assert!(!refused(ConnectKey::Converter));
    }

    #[test]
    fn transforms_and_predicates_are_implemented() {
        for k in [
            "transforms",
            "transforms.mask.type",
            "transforms.mask.fields",
        ] {
            assert_eq!(classify(k), Some(ConnectKey::Transforms), "{k}");
        }
        for k in ["predicates", "predicates.p.type", "predicates.p.pattern"] {
            assert_eq!(classify(k), Some(ConnectKey::Predicates), "{k}");
        }
        assert!(!refused(ConnectKey::Transforms));
        assert!(!refused(ConnectKey::Predicates));
    }

    #[test]
    fn error_handling_and_the_dead_letter_queue_are_implemented() {
        assert_eq!(
            classify("errors.tolerance"),
            Some(ConnectKey::ErrorTolerance)
        );
        assert_eq!(
            classify("errors.retry.timeout"),
            Some(ConnectKey::ErrorRetry)
        );
        assert_eq!(
            classify("errors.retry.delay.max.ms"),
            Some(ConnectKey::ErrorRetry)
        );
        assert_eq!(classify("errors.log.enable"), Some(ConnectKey::ErrorLog));
        assert_eq!(
            classify("errors.log.include.messages"),
            Some(ConnectKey::ErrorLog)
        );
        for k in [
            "errors.deadletterqueue.topic.name",
            "errors.deadletterqueue.topic.replication.factor",
            "errors.deadletterqueue.context.headers.enable",
        ] {
            assert_eq!(classify(k), Some(ConnectKey::DeadLetterQueue), "{k}");
        }
        for c in [
            ConnectKey::ErrorTolerance,
            ConnectKey::ErrorRetry,
            ConnectKey::ErrorLog,
            ConnectKey::DeadLetterQueue,
        ] {
            assert!(!refused(c), "{c:?}");
        }
    }

    #[test]
    fn topic_creation_settings_are_implemented() {
        assert_eq!(
            classify("topic.creation.groups"),
            Some(ConnectKey::TopicCreation)
        );
        assert_eq!(
            classify("topic.creation.default.partitions"),
            Some(ConnectKey::TopicCreation)
        );
        assert_eq!(support(ConnectKey::TopicCreation), Support::Implemented);
    }

    #[test]
    fn exactly_once_and_offsets_topic_settings_are_refused() {
        assert_eq!(
            classify("exactly.once.support"),
            Some(ConnectKey::ExactlyOnce)
        );
        assert_eq!(
            classify("transaction.boundary"),
            Some(ConnectKey::TransactionBoundary)
        );
        assert_eq!(
            classify("transaction.boundary.interval.ms"),
            Some(ConnectKey::TransactionBoundary)
        );
        assert_eq!(
            classify("offsets.storage.topic"),
            Some(ConnectKey::OffsetsTopic)
        );
        for c in [
            ConnectKey::ExactlyOnce,
            ConnectKey::TransactionBoundary,
            ConnectKey::OffsetsTopic,
        ] {
            assert!(refused(c), "{c:?}");
        }
    }

    #[test]
    fn client_overrides_are_implemented_and_config_reload_is_refused() {
        for k in [
            "producer.override.linger.ms",
            "consumer.override.max.poll.records",
            "admin.override.request.timeout.ms",
        ] {
            assert_eq!(classify(k), Some(ConnectKey::ClientOverride), "{k}");
        }
        assert_eq!(
            classify("config.action.reload"),
            Some(ConnectKey::ConfigReload)
        );
        assert!(!refused(ConnectKey::ClientOverride));
        assert!(refused(ConnectKey::ConfigReload));
    }

    #[test]
    fn other_keys_and_bare_prefixes_are_not_connect_keys() {
        for k in [
            "my.own.setting",
            "transforms.",
            "producer.override.",
            "topic",
            "errors",
        ] {
            assert_eq!(classify(k), None, "{k}");
        }
    }

    #[test]
    fn a_key_the_plugin_defines_is_the_plugins_and_never_refused() {
        let def = runtime_config_def().define(ConfigKey::new(
            "exactly.once.support",
            ConfigType::String,
            Importance::Low,
            "the plugin's own",
        ));
        assert_eq!(key_refusal(&def, "exactly.once.support"), None);
        let why = key_refusal(&runtime_config_def(), "exactly.once.support").expect("refused");
        assert!(
            why.contains("Wharf does not implement Kafka Connect's exactly-once"),
            "{why}"
        );
        assert!(why.contains("remove the key"), "{why}");
        assert_eq!(key_refusal(&runtime_config_def(), "topics"), None);
        assert_eq!(key_refusal(&runtime_config_def(), "transforms"), None);
    }

    #[test]
    fn provider_references_are_found_in_kip_297_syntax_only() {
        for v in [
            "${file:/run/secrets/s.properties:topic}",
            "${env:PASSWORD}",
            "prefix-${directory:/run/secrets:db}-suffix",
            "${no colon} then ${file:a:b}",
        ] {
            assert!(has_provider_reference(v), "{v}");
        }
        for v in [
            "plain",
            "${no colon}",
            "$file:a:b",
            "${file:unclosed",
            "a}b${",
        ] {
            assert!(!has_provider_reference(v), "{v}");
        }
    }

    #[test]
    fn the_first_refused_key_in_sorted_order_is_named_and_no_value() {
        let def = runtime_config_def();
        let config: std::collections::BTreeMap<String, String> = [
            (
                "value.converter",
                "org.apache.kafka.connect.json.JsonConverter",
            ),
            ("test.topic", "${vault:/s:MARKER}"),
            ("exactly.once.support", "MARKER-required"),
            ("my.own.setting", "x"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let (field, why) = first_refused(&def, config.iter()).expect("refused");
        assert_eq!(field, "config[exactly.once.support]");
        assert!(!why.contains("MARKER"), "{why}");
        let only_provider = [("test.topic".to_owned(), "MARKER ${vault:/s:k}".to_owned())];
        let (field, why) =
            first_refused(&def, only_provider.iter().map(|(k, v)| (k, v))).expect("refused");
        assert_eq!(field, "config[test.topic]");
        assert!(
            !why.contains("MARKER") && why.contains("config provider \"vault\""),
            "{why}"
        );
    }

    #[test]
    fn references_to_the_providers_wharf_implements_are_accepted() {
        let def = runtime_config_def();
        for v in [
            "${file:db.properties:password}",
            "${directory:/run/secrets:db}",
            "${env:DB_PASSWORD}",
            "plain",
        ] {
            assert_eq!(problem(&def, "connection.password", v), None, "{v}");
        }
        let why = problem(&def, "connection.password", "${file:../x:k}").expect("refused");
        assert!(
            why.contains("${file:../x:k}") && why.contains(".."),
            "{why}"
        );
    }

    #[test]
    fn a_reference_in_a_key_the_control_plane_reads_is_refused() {
        let def = runtime_config_def();
        for key in ["tasks.max", "cleanup.policy", "cleanup.timeout.ms"] {
            let why = problem(&def, key, "${env:X}").expect("refused");
            assert!(why.contains("runtime key"), "{key}: {why}");
            assert_eq!(problem(&def, key, "plain"), None, "{key}");
        }
    }
}
