//! A source connector's topic creation settings (KIP-158, Kafka Connect 2.6+): which
//! partitions, replication factor and topic configs a topic gets when the connector's
//! first record for it finds it absent. Read by the control plane (a config with a wrong
//! setting is refused, naming the key) and by the executor (the settings of each topic).
//!
//! The keys, as Kafka Connect reads them (`SourceConnectorConfig`, `TopicCreationConfig`):
//! - `topic.creation.default.partitions` and `topic.creation.default.replication.factor`
//!   turn creation on for the connector; both are required once any `topic.creation.*`
//!   key is set. Each is at least 1, or -1 for the brokers' default (KIP-464).
//! - `topic.creation.groups`: more groups, comma-separated, matched in that order before
//!   the default group. Group `G` takes `topic.creation.G.include` (required) and
//!   `topic.creation.G.exclude`: comma-separated regular expressions matched against the
//!   whole topic name; a topic excluded is not in the group. `topic.creation.G.partitions`
//!   and `.replication.factor` default to the default group's.
//! - Any other `topic.creation.G.<name>` is topic config `<name>` of the group's topics
//!   (`cleanup.policy`, `retention.ms`, ...); the default group's apply to every group.
//!
//! Stricter than Connect, so that nothing is silently ignored: a key of a group not listed
//! in `topic.creation.groups`, `include`/`exclude` on the default group, and the worker's
//! `topic.creation.enable` in a connector config are refused.

use std::collections::BTreeMap;

use regex::Regex;

/// The prefix of every topic creation key.
pub const PREFIX: &str = "topic.creation.";
/// `topic.creation.groups`.
pub const GROUPS: &str = "topic.creation.groups";
/// The group every topic belongs to when no other takes it.
pub const DEFAULT_GROUP: &str = "default";
/// The worker's switch (`topic.creation.enable`), not a connector key.
pub const ENABLE: &str = "topic.creation.enable";

/// What a created topic gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSettings {
    /// Partitions; -1 for the brokers' default.
    pub partitions: i32,
    /// Replication factor; -1 for the brokers' default.
    pub replication_factor: i32,
    /// Topic configs (`cleanup.policy`, `retention.ms`, ...).
    pub configs: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
struct Group {
    include: Vec<Regex>,
    exclude: Vec<Regex>,
    settings: TopicSettings,
}

/// A connector's topic creation rules: its groups in order, then the default group.
#[derive(Debug, Clone)]
pub struct TopicCreation {
    groups: Vec<Group>,
    default: TopicSettings,
}

/// A refused setting: (`config[<key>]`, why).
pub type Refusal = (String, String);

fn refuse(key: &str, why: impl Into<String>) -> Refusal {
    (format!("config[{key}]"), why.into())
}

/// A partition count or replication factor: at least 1, or -1.
fn count(config: &BTreeMap<String, String>, key: &str) -> Result<Option<i32>, Refusal> {
    let Some(raw) = config.get(key) else {
        return Ok(None);
    };
    match raw.trim().parse::<i32>() {
        Ok(n) if n >= 1 || n == -1 => Ok(Some(n)),
        _ => Err(refuse(
            key,
            "must be an integer of at least 1, or -1 for the brokers' default",
        )),
    }
}

fn patterns(config: &BTreeMap<String, String>, key: &str) -> Result<Vec<Regex>, Refusal> {
    config
        .get(key)
        .map(|raw| {
            raw.split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|p| {
                    Regex::new(&format!("^(?:{p})$"))
                        .map_err(|e| refuse(key, format!("{p:?} is not a regular expression: {e}")))
                })
                .collect()
        })
        .unwrap_or(Ok(Vec::new()))
}

impl TopicCreation {
    /// The rules of `config`, or `None` when it sets no `topic.creation.*` key (the
    /// connector's topics are created as the record log creates any absent topic).
    ///
    /// # Errors
    /// The first wrong key, as (`config[<key>]`, why).
    pub fn from_config(config: &BTreeMap<String, String>) -> Result<Option<Self>, Refusal> {
        if config.contains_key(ENABLE) {
            return Err(refuse(
                ENABLE,
                "a worker setting, not a connector's: the executor's record log says whether topics are created (docs/kafka.md)",
            ));
        }
        if !config.keys().any(|k| k.starts_with(PREFIX)) {
            return Ok(None);
        }
        let names: Vec<String> = config
            .get(GROUPS)
            .map(|g| {
                g.split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        if names.iter().any(|n| n == DEFAULT_GROUP) {
            return Err(refuse(
                GROUPS,
                "lists \"default\", which every connector has",
            ));
        }
        // Every key belongs to a known group.
        for key in config.keys().filter(|k| k.starts_with(PREFIX)) {
            if key == GROUPS {
                continue;
            }
            let rest = &key[PREFIX.len()..];
            let known = std::iter::once(DEFAULT_GROUP)
                .chain(names.iter().map(String::as_str))
                .any(|g| {
                    rest.strip_prefix(g)
                        .is_some_and(|r| r.starts_with('.') && r.len() > 1)
                });
            if !known {
                return Err(refuse(
                    key,
                    "belongs to no topic creation group: name the group in topic.creation.groups",
                ));
            }
        }
        let default = Self::settings(config, DEFAULT_GROUP, None)?;
        for key in ["include", "exclude"] {
            let key = format!("{PREFIX}{DEFAULT_GROUP}.{key}");
            if config.contains_key(&key) {
                return Err(refuse(&key, "the default group takes every topic"));
            }
        }
        let mut groups = Vec::new();
        for name in &names {
            let include_key = format!("{PREFIX}{name}.include");
            if !config.contains_key(&include_key) {
                return Err(refuse(&include_key, "is required for a listed group"));
            }
            groups.push(Group {
                include: patterns(config, &include_key)?,
                exclude: patterns(config, &format!("{PREFIX}{name}.exclude"))?,
                settings: Self::settings(config, name, Some(&default))?,
            });
        }
        Ok(Some(Self { groups, default }))
    }

    /// The settings of group `name`, falling back to `default`'s counts and configs.
    fn settings(
        config: &BTreeMap<String, String>,
        name: &str,
        default: Option<&TopicSettings>,
    ) -> Result<TopicSettings, Refusal> {
        let prefix = format!("{PREFIX}{name}.");
        let partitions_key = format!("{prefix}partitions");
        let replication_key = format!("{prefix}replication.factor");
        let partitions = count(config, &partitions_key)?;
        let replication = count(config, &replication_key)?;
        let (partitions, replication_factor) = match (default, partitions, replication) {
            (Some(d), p, r) => (p.unwrap_or(d.partitions), r.unwrap_or(d.replication_factor)),
            (None, Some(p), Some(r)) => (p, r),
            (None, None, _) => return Err(refuse(&partitions_key, "is required to create topics")),
            (None, Some(_), None) => {
                return Err(refuse(&replication_key, "is required to create topics"));
            }
        };
        let mut configs = default.map(|d| d.configs.clone()).unwrap_or_default();
        for (key, value) in config.range(prefix.clone()..) {
            let Some(topic_key) = key.strip_prefix(&prefix) else {
                break;
            };
            if !matches!(
                topic_key,
                "partitions" | "replication.factor" | "include" | "exclude"
            ) {
                configs.insert(topic_key.to_owned(), value.clone());
            }
        }
        Ok(TopicSettings {
            partitions,
            replication_factor,
            configs,
        })
    }

    /// What `topic` gets: the first listed group that includes it and does not exclude
    /// it, else the default group.
    pub fn settings_for(&self, topic: &str) -> &TopicSettings {
        self.groups
            .iter()
            .find(|g| {
                g.include.iter().any(|r| r.is_match(topic))
                    && !g.exclude.iter().any(|r| r.is_match(topic))
            })
            .map_or(&self.default, |g| &g.settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn refusal(pairs: &[(&str, &str)]) -> Refusal {
        TopicCreation::from_config(&config(pairs)).expect_err("refused")
    }

    const DEFAULTS: [(&str, &str); 2] = [
        ("topic.creation.default.partitions", "3"),
        ("topic.creation.default.replication.factor", "-1"),
    ];

    #[test]
    fn a_config_without_topic_creation_keys_has_no_rules() {
        assert!(
            TopicCreation::from_config(&config(&[("topic", "t")]))
                .expect("ok")
                .is_none()
        );
    }

    #[test]
    fn the_default_group_gives_every_topic_its_settings_and_configs() {
        let mut pairs = DEFAULTS.to_vec();
        pairs.push(("topic.creation.default.cleanup.policy", "compact"));
        let rules = TopicCreation::from_config(&config(&pairs))
            .expect("ok")
            .expect("rules");
        let s = rules.settings_for("anything");
        assert_eq!((s.partitions, s.replication_factor), (3, -1));
        assert_eq!(s.configs, config(&[("cleanup.policy", "compact")]));
    }

    #[test]
    fn a_listed_group_takes_the_topics_it_includes_and_does_not_exclude() {
        let mut pairs = DEFAULTS.to_vec();
        pairs.extend([
            ("topic.creation.groups", "orders, logs"),
            ("topic.creation.orders.include", "orders.*"),
            ("topic.creation.orders.exclude", "orders-test"),
            ("topic.creation.orders.partitions", "8"),
            ("topic.creation.orders.retention.ms", "60000"),
            ("topic.creation.logs.include", "logs,orders-test"),
            ("topic.creation.logs.replication.factor", "1"),
        ]);
        let rules = TopicCreation::from_config(&config(&pairs))
            .expect("ok")
            .expect("rules");
        let orders = rules.settings_for("orders-eu");
        assert_eq!((orders.partitions, orders.replication_factor), (8, -1));
        assert_eq!(orders.configs, config(&[("retention.ms", "60000")]));
        let test = rules.settings_for("orders-test");
        assert_eq!(
            (test.partitions, test.replication_factor),
            (3, 1),
            "excluded from orders, in logs"
        );
        assert_eq!(
            rules.settings_for("xorders").partitions,
            3,
            "the whole name must match"
        );
    }

    #[test]
    fn topic_creation_without_the_defaults_partitions_or_replication_is_refused() {
        let (field, why) = refusal(&[("topic.creation.default.replication.factor", "1")]);
        assert_eq!(field, "config[topic.creation.default.partitions]");
        assert!(why.contains("required"), "{why}");
        let (field, _) = refusal(&[("topic.creation.default.partitions", "1")]);
        assert_eq!(field, "config[topic.creation.default.replication.factor]");
    }

    #[test]
    fn a_count_below_one_other_than_minus_one_is_refused() {
        for bad in ["0", "-2", "x", ""] {
            let (field, why) = refusal(&[
                ("topic.creation.default.partitions", bad),
                ("topic.creation.default.replication.factor", "1"),
            ]);
            assert_eq!(field, "config[topic.creation.default.partitions]", "{bad}");
            assert!(why.contains("-1"), "{why}");
        }
    }

    #[test]
    fn a_key_of_an_unlisted_group_is_refused() {
        let mut pairs = DEFAULTS.to_vec();
        pairs.push(("topic.creation.orders.partitions", "8"));
        let (field, why) = refusal(&pairs);
        assert_eq!(field, "config[topic.creation.orders.partitions]");
        assert!(why.contains("topic.creation.groups"), "{why}");
    }

    #[test]
    fn a_listed_group_without_include_is_refused() {
        let mut pairs = DEFAULTS.to_vec();
        pairs.push(("topic.creation.groups", "orders"));
        let (field, _) = refusal(&pairs);
        assert_eq!(field, "config[topic.creation.orders.include]");
    }

    #[test]
    fn a_pattern_that_is_not_a_regular_expression_is_refused() {
        let mut pairs = DEFAULTS.to_vec();
        pairs.extend([
            ("topic.creation.groups", "g"),
            ("topic.creation.g.include", "a(b"),
        ]);
        let (field, why) = refusal(&pairs);
        assert_eq!(field, "config[topic.creation.g.include]");
        assert!(why.contains("a(b"), "{why}");
    }

    #[test]
    fn include_on_the_default_group_default_in_the_list_and_the_worker_switch_are_refused() {
        let mut pairs = DEFAULTS.to_vec();
        pairs.push(("topic.creation.default.include", "x"));
        assert_eq!(refusal(&pairs).0, "config[topic.creation.default.include]");
        let mut pairs = DEFAULTS.to_vec();
        pairs.push(("topic.creation.groups", "default"));
        assert_eq!(refusal(&pairs).0, "config[topic.creation.groups]");
        assert_eq!(
            refusal(&[("topic.creation.enable", "true")]).0,
            "config[topic.creation.enable]"
        );
    }
}
