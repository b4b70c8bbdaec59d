//! Config definitions, as Kafka Connect's `ConfigDef`: what keys a plugin takes, and the
//! per-key validation that `ValidateConnectorConfig` reports.

use crate::ConfigMap;

/// What a secret value is shown as, in every response and log line.
pub const REDACTED: &str = "[hidden]";

/// Type of a config value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    /// Free text.
    String,
    /// 32-bit signed integer.
    Int,
    /// 64-bit signed integer.
    Long,
    /// `true` or `false`.
    Boolean,
    /// Comma-separated list.
    List,
    /// Secret text (Kafka Connect's PASSWORD): always redacted.
    Password,
    /// 64-bit float.
    Double,
}

/// How much a key matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Importance {
    /// Most users must set or understand it.
    High,
    /// Often useful.
    Medium,
    /// Rarely changed.
    Low,
}

/// A check on one value; returns the error text for the operator, which names the rule
/// and never the value (it reaches answers, the audit trail and logs).
pub type Validator = fn(&str) -> Result<(), String>;

/// Definition of one config key.
#[derive(Debug, Clone)]
pub struct ConfigKey {
    /// Key name.
    pub name: String,
    /// Value type.
    pub ty: ConfigType,
    /// Default as text; `None` with `required` means the key must be set.
    pub default: Option<String>,
    /// Importance.
    pub importance: Importance,
    /// What it does, with units.
    pub documentation: String,
    /// Secret: redacted in responses and logs. Always true for [`ConfigType::Password`].
    pub secret: bool,
    /// Must be set.
    pub required: bool,
    /// When not empty, the only values accepted.
    pub allowed_values: Vec<String>,
    /// Extra check beyond the type.
    pub validator: Option<Validator>,
    /// Identifies the external system or the objects the plugin provisions there (a
    /// database, a file path): the control plane refuses a config change of it on an
    /// existing connector, because the deletion's cleanup would then look in the new
    /// place and orphan what was provisioned in the old one. Delete and create instead.
    pub immutable: bool,
    /// Must be set (to a value that is not blank) whenever another key has one of some
    /// values; travels to the control plane, which checks it at create and update.
    pub required_when: Option<RequiredWhen>,
}

/// A key's requirement on another key's value: the key must be set when `key`'s value
/// (given, or its default) is one of `values`. postgres-audit: `connection.sslrootcert`
/// when `connection.sslmode` is `verify-full`. A cross-key check the control plane can
/// run without the plugin's code, as Kafka Connect runs `Connector#validate` before it
/// stores a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequiredWhen {
    /// The key whose value decides.
    pub key: String,
    /// The values of `key` that make this key required.
    pub values: Vec<String>,
}

impl ConfigKey {
    /// A key of type `ty`, optional with no default.
    pub fn new(name: &str, ty: ConfigType, importance: Importance, documentation: &str) -> Self {
        Self {
            name: name.to_owned(),
            ty,
            default: None,
            importance,
            documentation: documentation.to_owned(),
            secret: ty == ConfigType::Password,
            required: false,
            allowed_values: Vec::new(),
            validator: None,
            immutable: false,
            required_when: None,
        }
    }

    /// Marks the key required.
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }

    /// Sets the default value.
    pub fn default_value(mut self, value: &str) -> Self {
        self.default = Some(value.to_owned());
        self
    }

    /// Marks the value secret.
    pub fn secret(mut self) -> Self {
        self.secret = true;
        self
    }

    /// Restricts the value to one of `values`.
    pub fn one_of(mut self, values: &[&str]) -> Self {
        self.allowed_values = values.iter().map(|v| (*v).to_owned()).collect();
        self
    }

    /// Marks the key immutable: it names where the plugin's external objects live, so a
    /// change on an existing connector is refused (see the `immutable` field).
    pub fn immutable(mut self) -> Self {
        self.immutable = true;
        self
    }

    /// Makes the key required whenever `key` has one of `values` (see [`RequiredWhen`]).
    pub fn required_when(mut self, key: &str, values: &[&str]) -> Self {
        self.required_when = Some(RequiredWhen {
            key: key.to_owned(),
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        });
        self
    }

    /// Adds a check beyond the type.
    pub fn validator(mut self, check: Validator) -> Self {
        self.validator = Some(check);
        self
    }

    fn check(&self, value: &str) -> Vec<String> {
        let mut errors = Vec::new();
        // Strict on purpose: the value is stored and handed to plugins as given, so " 3"
        // or "+3" must not pass here and be read differently elsewhere.
        let type_error = match self.ty {
            ConfigType::Int => integer_error(
                value,
                value.parse::<i32>().is_ok(),
                "32-bit",
                i32::MIN.into(),
                i32::MAX.into(),
            ),
            ConfigType::Long => integer_error(
                value,
                value.parse::<i64>().is_ok(),
                "64-bit",
                i64::MIN,
                i64::MAX,
            ),
            ConfigType::Double => match value.parse::<f64>() {
                _ if value.trim() != value => {
                    Some("is not a number: remove the spaces around it".to_owned())
                }
                _ if value.starts_with('+') => {
                    Some("is not a number: write it without '+'".to_owned())
                }
                Ok(x) if x.is_finite() => None,
                Ok(_) => Some("is not a finite number".to_owned()),
                Err(_) => Some("is not a number".to_owned()),
            },
            ConfigType::Boolean => match value {
                "true" | "false" => None,
                _ => Some("is not true or false".to_owned()),
            },
            // A required list that names nothing would pass here and fail only when the
            // task starts (a sink with `topics` " , " has no topic to read).
            ConfigType::List if self.required && list_is_empty(value) => Some(
                "names no entry: give at least one comma-separated entry that is not blank"
                    .to_owned(),
            ),
            ConfigType::String | ConfigType::List | ConfigType::Password => None,
        };
        // Messages name the rule, never the value: they reach the operator's answer, the
        // audit trail and logs, and a rejected value may hold what should not be there.
        if let Some(e) = type_error {
            errors.push(format!("value {e}"));
        }
        if !self.allowed_values.is_empty() && !self.allowed_values.iter().any(|a| a == value) {
            errors.push(format!(
                "value is not one of: {}",
                self.allowed_values.join(", ")
            ));
        }
        if errors.is_empty()
            && let Some(check) = self.validator
            && let Err(e) = check(value)
        {
            errors.push(e);
        }
        errors
    }
}

/// Result of validating one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigValue {
    /// Key name.
    pub name: String,
    /// Value given or defaulted, redacted when secret; `None` when unset with no default.
    pub value: Option<String>,
    /// What is wrong; empty when valid.
    pub errors: Vec<String>,
}

/// The set of keys a plugin (or the runtime) understands.
#[derive(Debug, Clone, Default)]
pub struct ConfigDef {
    /// Keys in documentation order.
    pub keys: Vec<ConfigKey>,
}

impl ConfigDef {
    /// An empty definition.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a key.
    pub fn define(mut self, key: ConfigKey) -> Self {
        self.keys.push(key);
        self
    }

    /// Adds every key of `other` after this one's.
    pub fn merged(mut self, other: &ConfigDef) -> Self {
        self.keys.extend(other.keys.iter().cloned());
        self
    }

    /// The key called `name`.
    pub fn key(&self, name: &str) -> Option<&ConfigKey> {
        self.keys.iter().find(|k| k.name == name)
    }

    /// Validates `config`: one entry per defined key, in definition order. Unknown keys
    /// are not reported (plugins may read keys of their own).
    pub fn validate(&self, config: &ConfigMap) -> Vec<ConfigValue> {
        self.keys
            .iter()
            .map(|key| {
                let given = config.get(&key.name);
                let mut errors = Vec::new();
                if let Some(why) = self.required_by(key, config)
                    && given.is_none_or(|v| v.trim().is_empty())
                {
                    errors.push(format!(
                        "missing configuration {:?}, required when {} is {why:?}",
                        key.name,
                        key.required_when.as_ref().map_or("", |r| r.key.as_str())
                    ));
                }
                let value = match given.or(key.default.as_ref()) {
                    Some(v) => {
                        if given.is_some() {
                            errors.extend(key.check(v));
                        }
                        Some(if key.secret {
                            REDACTED.to_owned()
                        } else {
                            v.clone()
                        })
                    }
                    None => {
                        if key.required {
                            errors.push(format!("missing required configuration {:?}", key.name));
                        }
                        None
                    }
                };
                ConfigValue {
                    name: key.name.clone(),
                    value,
                    errors,
                }
            })
            .collect()
    }

    /// The value of the other key that makes `key` required in `config` (given, or that
    /// key's default), when it does.
    fn required_by<'a>(&'a self, key: &ConfigKey, config: &'a ConfigMap) -> Option<&'a str> {
        let rule = key.required_when.as_ref()?;
        let value = config
            .get(&rule.key)
            .or_else(|| self.key(&rule.key).and_then(|k| k.default.as_ref()))?;
        rule.values
            .iter()
            .any(|v| v == value.trim())
            .then_some(value.as_str())
    }

    /// True when any value in `config` would be reported with an error.
    pub fn has_errors(&self, config: &ConfigMap) -> bool {
        self.validate(config).iter().any(|v| !v.errors.is_empty())
    }

    /// A copy of `config` with every secret value replaced by [`REDACTED`]. Keys whose
    /// names look secret (`password`, `passwd`, `pwd`, `secret`, `token`, `credential`,
    /// `private.key`, `api.key`, `access.key`, `jaas`, `passphrase`) are redacted too,
    /// even when the plugin forgot to mark them.
    pub fn redact(&self, config: &ConfigMap) -> ConfigMap {
        config
            .iter()
            .map(|(k, v)| {
                let secret = self.key(k).is_some_and(|key| key.secret) || looks_secret(k);
                (
                    k.clone(),
                    if secret {
                        REDACTED.to_owned()
                    } else {
                        v.clone()
                    },
                )
            })
            .collect()
    }
}

/// Key names that hold secrets by convention. Matched on the whole name with the
/// separators `.`, `_` and `-` removed, so `api.key`, `api_key` and `apikey` all match;
/// `key.converter` or `tasks.max` do not (no bare `key` or `auth` fragments).
const SECRET_NAME_FRAGMENTS: &[&str] = &[
    "password",
    "passwd",
    "pwd",
    "secret",
    "token",
    "credential",
    "privatekey",
    "apikey",
    "accesskey",
    "jaas",
    "passphrase",
];

fn looks_secret(key: &str) -> bool {
    let k: String = key
        .chars()
        .filter(|c| !matches!(c, '.' | '_' | '-'))
        .map(|c| c.to_ascii_lowercase())
        .collect();
    SECRET_NAME_FRAGMENTS.iter().any(|s| k.contains(s))
}

/// The type error of an integer value, `None` when it is one: written canonically (ASCII
/// digits with an optional leading `-`, no `+`, no spaces, no leading zeros, so that
/// "03" cannot be read as 3 here and as octal elsewhere) and within `min..=max`. Each
/// message says what is allowed.
fn integer_error(value: &str, fits: bool, bits: &str, min: i64, max: i64) -> Option<String> {
    let digits = value.strip_prefix('-').unwrap_or(value);
    let well_formed = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    let leading_zero = digits.len() > 1 && digits.starts_with('0');
    let allowed = format!(
        "allowed: a {bits} integer from {min} to {max}, in plain digits with an optional leading '-'"
    );
    if well_formed && fits && !leading_zero {
        None
    } else if value.trim() != value {
        Some(format!(
            "is not an integer: remove the spaces around it ({allowed})"
        ))
    } else if value.starts_with('+') {
        Some(format!(
            "is not an integer: write it without '+' ({allowed})"
        ))
    } else if well_formed && leading_zero {
        Some(format!(
            "is not an integer: write it without leading zeros ({allowed})"
        ))
    } else if well_formed {
        Some(format!("is out of range ({allowed})"))
    } else {
        Some(format!("is not an integer ({allowed})"))
    }
}

/// True when the comma-separated list `value` has no entry that is not blank: `""`,
/// `" "`, `","`, `" , "`.
fn list_is_empty(value: &str) -> bool {
    value.split(',').all(|entry| entry.trim().is_empty())
}

/// Only called once the type check passed, so `value` is a well-formed integer.
fn positive_int(value: &str) -> Result<(), String> {
    match value.parse::<i64>() {
        Ok(n) if n > 0 => Ok(()),
        Ok(_) => Err("value must be a positive integer".to_owned()),
        Err(_) => Err("value is not an integer".to_owned()),
    }
}

/// Bounds of [`CLEANUP_TIMEOUT_MS`], in milliseconds: below 100 ms no real cleanup (a
/// connection, a `DROP`) can finish, so every attempt would fail by construction; above
/// 24 h a stuck stop would hide for a day. Every value in range fits the `u32` the
/// runtime reads it into.
pub const CLEANUP_TIMEOUT_MS_RANGE: std::ops::RangeInclusive<i64> = 100..=86_400_000;

/// Only called once the type check passed, so `value` is a well-formed integer.
fn cleanup_timeout(value: &str) -> Result<(), String> {
    match value.parse::<i64>() {
        Ok(n) if CLEANUP_TIMEOUT_MS_RANGE.contains(&n) => Ok(()),
        _ => Err(format!(
            "value is out of range: allowed {} to {} milliseconds",
            CLEANUP_TIMEOUT_MS_RANGE.start(),
            CLEANUP_TIMEOUT_MS_RANGE.end()
        )),
    }
}

/// Config key naming the plugin that runs a connector (Kafka Connect's `connector.class`).
pub const CONNECTOR_CLASS: &str = "connector.class";
/// Config key bounding the number of a connector's tasks.
pub const TASKS_MAX: &str = "tasks.max";
/// Config key: how long one stop(connector_deleted = true) may take, in milliseconds.
pub const CLEANUP_TIMEOUT_MS: &str = "cleanup.timeout.ms";
/// Config key: attempts per cleanup step before it is reported as failed.
pub const CLEANUP_MAX_ATTEMPTS: &str = "cleanup.max.attempts";
/// Config key: `keep-trying` or `give-up` after `cleanup.max.attempts`.
pub const CLEANUP_POLICY: &str = "cleanup.policy";
/// Config key (`true` or `false`, default `false`): whether a deletion deletes the Kafka
/// topics the connector's tasks created through topic creation (KIP-158). Off, they are
/// kept (recorded as adopted in the ledger); a topic that existed before is never
/// deleted (docs/kafka.md).
pub const CLEANUP_DELETE_CREATED_TOPICS: &str = "cleanup.delete.created.topics";
/// Default of [`CLEANUP_TIMEOUT_MS`], in milliseconds.
pub const DEFAULT_CLEANUP_TIMEOUT_MS: u32 = 30_000;
/// Default of [`CLEANUP_MAX_ATTEMPTS`].
pub const DEFAULT_CLEANUP_MAX_ATTEMPTS: u32 = 5;
/// Default bound on a plain stop (`connector_deleted = false`: a restart, a pause, a
/// reconfiguration, a shutdown), in milliseconds: the executor's `--graceful-timeout-ms`
/// default, after which it abandons the instance, and the conformance kit's default
/// stop bound.
pub const DEFAULT_STOP_TIMEOUT_MS: u64 = 10_000;

/// The keys every connector takes, whatever its plugin: `connector.class`, `tasks.max`
/// and the runtime's cleanup settings (lifecycle contract, points 6 and 12).
pub fn runtime_config_def() -> ConfigDef {
    ConfigDef::new()
        .define(
            ConfigKey::new(CONNECTOR_CLASS, ConfigType::String, Importance::High, "Name of the plugin that runs this connector, as listed by ListConnectorPlugins.")
                .required(),
        )
        .define(
            ConfigKey::new(TASKS_MAX, ConfigType::Int, Importance::High, "Upper bound on the number of tasks; a positive integer.")
                .default_value("1")
                .validator(positive_int),
        )
        .define(
            ConfigKey::new(CLEANUP_TIMEOUT_MS, ConfigType::Long, Importance::Medium, "How long one stop(connector_deleted = true) may take, in milliseconds, before the attempt counts as failed; from 100 to 86400000 (24 h).")
                .default_value(&DEFAULT_CLEANUP_TIMEOUT_MS.to_string())
                .validator(cleanup_timeout),
        )
        .define(
            ConfigKey::new(CLEANUP_MAX_ATTEMPTS, ConfigType::Int, Importance::Medium, "Attempts per cleanup step before it is reported as failed (and, with cleanup.policy=give-up, left out with a leak report).")
                .default_value(&DEFAULT_CLEANUP_MAX_ATTEMPTS.to_string())
                .validator(positive_int),
        )
        .define(
            ConfigKey::new(CLEANUP_POLICY, ConfigType::String, Importance::Low, "After cleanup.max.attempts: keep-trying stays DELETING until retried or forced; give-up finishes the deletion and keeps a leak report.")
                .default_value("keep-trying")
                .one_of(&["keep-trying", "give-up"]),
        )
        .define(
            ConfigKey::new(CLEANUP_DELETE_CREATED_TOPICS, ConfigType::Boolean, Importance::Low, "Whether deleting the connector deletes the Kafka topics its tasks created through topic creation (topic.creation.*); a topic that existed before is never deleted.")
                .default_value("false"),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> ConfigMap {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn missing_required_key_and_bad_tasks_max_are_reported_by_name() {
        let def = runtime_config_def();
        let values = def.validate(&config(&[("tasks.max", "0")]));
        let errors = |n: &str| values.iter().find(|v| v.name == n).unwrap().errors.clone();
        assert_eq!(errors("connector.class").len(), 1);
        assert!(errors("tasks.max")[0].contains("positive integer"));
        assert!(errors("cleanup.timeout.ms").is_empty());
    }

    fn tls_def() -> ConfigDef {
        ConfigDef::new()
            .define(
                ConfigKey::new("mode", ConfigType::String, Importance::Low, "m")
                    .default_value("disable"),
            )
            .define(
                ConfigKey::new("root", ConfigType::String, Importance::Low, "r")
                    .required_when("mode", &["verify-full"]),
            )
    }

    fn root_errors(pairs: &[(&str, &str)]) -> Vec<String> {
        let values = tls_def().validate(&config(pairs));
        values
            .into_iter()
            .find(|v| v.name == "root")
            .unwrap()
            .errors
    }

    #[test]
    fn required_when_the_other_key_has_a_listed_value_and_this_one_is_missing() {
        let errors = root_errors(&[("mode", "verify-full")]);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].contains("\"root\"") && errors[0].contains("mode is \"verify-full\""),
            "{errors:?}"
        );
    }

    #[test]
    fn required_when_counts_a_blank_value_as_missing() {
        assert_eq!(
            root_errors(&[("mode", "verify-full"), ("root", "  ")]).len(),
            1
        );
    }

    #[test]
    fn required_when_is_met_by_a_value() {
        assert!(root_errors(&[("mode", "verify-full"), ("root", "/ca.pem")]).is_empty());
    }

    #[test]
    fn required_when_does_not_apply_for_other_values_or_the_default() {
        assert!(root_errors(&[("mode", "require")]).is_empty());
        assert!(root_errors(&[]).is_empty());
    }

    #[test]
    fn required_when_applies_when_the_deciding_value_is_the_default() {
        let def = ConfigDef::new()
            .define(
                ConfigKey::new("mode", ConfigType::String, Importance::Low, "m")
                    .default_value("verify-full"),
            )
            .define(
                ConfigKey::new("root", ConfigType::String, Importance::Low, "r")
                    .required_when("mode", &["verify-full"]),
            );
        let values = def.validate(&config(&[]));
        assert_eq!(values[1].errors.len(), 1, "{values:?}");
    }

    fn cleanup_timeout_errors(value: &str) -> Vec<String> {
        let values = runtime_config_def().validate(&config(&[(CLEANUP_TIMEOUT_MS, value)]));
        values
            .into_iter()
            .find(|v| v.name == CLEANUP_TIMEOUT_MS)
            .unwrap()
            .errors
    }

    #[test]
    fn a_cleanup_timeout_below_100_ms_or_above_a_day_is_refused_naming_the_range() {
        for v in ["1", "99", "86400001", "99999999999"] {
            let e = cleanup_timeout_errors(v);
            assert!(
                e.len() == 1 && e[0].contains("100 to 86400000"),
                "{v}: {e:?}"
            );
        }
    }

    #[test]
    fn a_cleanup_timeout_within_the_range_is_accepted() {
        for v in ["100", "30000", "86400000"] {
            assert!(cleanup_timeout_errors(v).is_empty(), "{v}");
        }
    }

    #[test]
    fn secrets_are_redacted_in_validation_and_copies() {
        let def = ConfigDef::new().define(ConfigKey::new(
            "connection.password",
            ConfigType::Password,
            Importance::High,
            "pw",
        ));
        let c = config(&[("connection.password", "s3cr3t-pa55"), ("api.token", "t0k")]);
        assert_eq!(def.validate(&c)[0].value.as_deref(), Some(REDACTED));
        let r = def.redact(&c);
        assert!(r.values().all(|v| v == REDACTED));
    }

    fn tasks_max_errors(value: &str) -> Vec<String> {
        let values = runtime_config_def().validate(&config(&[("tasks.max", value)]));
        values
            .into_iter()
            .find(|v| v.name == "tasks.max")
            .expect("tasks.max is defined")
            .errors
    }

    #[test]
    fn integers_are_parsed_strictly_with_precise_messages() {
        assert!(tasks_max_errors("2").is_empty());
        for (bad, says) in [
            (" 2", "remove the spaces"),
            ("2 ", "remove the spaces"),
            ("+2", "without '+'"),
            ("03", "without leading zeros"),
            ("-03", "without leading zeros"),
            ("00", "without leading zeros"),
            (
                "2.0",
                "is not an integer (allowed: a 32-bit integer from -2147483648 to 2147483647",
            ),
            ("", "is not an integer (allowed"),
            ("-", "is not an integer (allowed"),
            (
                "99999999999999999999",
                "is out of range (allowed: a 32-bit integer from -2147483648 to 2147483647",
            ),
            ("0", "must be a positive integer"),
            ("-3", "must be a positive integer"),
        ] {
            let errors = tasks_max_errors(bad);
            assert_eq!(errors.len(), 1, "{bad:?}: {errors:?}");
            assert!(errors[0].contains(says), "{bad:?}: {errors:?}");
        }
        let long =
            ConfigDef::new().define(ConfigKey::new("n", ConfigType::Long, Importance::Low, "n"));
        assert!(
            long.validate(&config(&[("n", "-9223372036854775808")]))[0]
                .errors
                .is_empty()
        );
        let too_big = long.validate(&config(&[("n", "9223372036854775808")]));
        assert!(too_big[0].errors[0].contains("is out of range (allowed: a 64-bit integer"));
    }

    fn list_def(required: bool) -> ConfigDef {
        let key = ConfigKey::new("topics", ConfigType::List, Importance::High, "t");
        ConfigDef::new().define(if required { key.required() } else { key })
    }

    #[test]
    fn a_required_list_that_names_no_entry_is_refused() {
        for blank in ["", " ", ",", " , ", ",,\t,"] {
            let errors = &list_def(true).validate(&config(&[("topics", blank)]))[0].errors;
            assert_eq!(errors.len(), 1, "{blank:?}: {errors:?}");
            assert!(
                errors[0].starts_with("value names no entry"),
                "{blank:?}: {errors:?}"
            );
        }
    }

    #[test]
    fn no_error_message_carries_the_value() {
        let marker = "MARKER password=s3cr3t";
        let def = runtime_config_def()
            .merged(&double_and_boolean_def())
            .define(ConfigKey::new("l", ConfigType::Long, Importance::Low, "l"));
        for key in [
            TASKS_MAX,
            CLEANUP_TIMEOUT_MS,
            CLEANUP_MAX_ATTEMPTS,
            CLEANUP_POLICY,
            "d",
            "b",
            "l",
        ] {
            for value in [
                marker.to_owned(),
                format!("5 {marker}"),
                format!("-{marker}"),
            ] {
                let values = def.validate(&config(&[(key, &value)]));
                let errors = &values.iter().find(|v| v.name == key).unwrap().errors;
                assert!(!errors.is_empty(), "{key}: {value:?}");
                assert!(
                    errors.iter().all(|e| !e.contains("MARKER")),
                    "{key}: {errors:?}"
                );
            }
        }
        for value in ["0", "-3"] {
            assert!(
                tasks_max_errors(value).iter().all(|e| !e.contains(value)),
                "{value}"
            );
        }
        assert!(
            cleanup_timeout_errors("99")
                .iter()
                .all(|e| !e.contains("99\""))
        );
    }

    #[test]
    fn a_required_list_with_one_entry_is_accepted() {
        for ok in ["a", "a,b", " , a ,", "a,"] {
            let values = list_def(true).validate(&config(&[("topics", ok)]));
            assert!(values[0].errors.is_empty(), "{ok:?}: {values:?}");
        }
    }

    #[test]
    fn an_optional_list_may_name_no_entry() {
        let values = list_def(false).validate(&config(&[("topics", "")]));
        assert!(values[0].errors.is_empty(), "{values:?}");
    }

    /// A Double key `d` and a Boolean key `b`.
    fn double_and_boolean_def() -> ConfigDef {
        ConfigDef::new()
            .define(ConfigKey::new(
                "d",
                ConfigType::Double,
                Importance::Low,
                "d",
            ))
            .define(ConfigKey::new(
                "b",
                ConfigType::Boolean,
                Importance::Low,
                "b",
            ))
    }

    #[test]
    fn doubles_and_booleans_are_parsed_strictly() {
        let def = double_and_boolean_def();
        let ok = def.validate(&config(&[("d", "-1.5e3"), ("b", "true")]));
        assert!(ok.iter().all(|v| v.errors.is_empty()), "{ok:?}");
        for (d, b) in [
            (" 1.5", "true "),
            ("+1.5", " false"),
            ("NaN", "yes"),
            ("inf", "TRUE"),
        ] {
            let bad = def.validate(&config(&[("d", d), ("b", b)]));
            assert!(
                bad.iter().all(|v| v.errors.len() == 1),
                "{d:?} {b:?}: {bad:?}"
            );
        }
    }

    #[test]
    fn secret_looking_names_are_redacted_and_ordinary_ones_are_not() {
        for secret in [
            "api.key",
            "apikey",
            "API_KEY",
            "connection.passwd",
            "db.pwd",
            "ssh.private.key",
            "sasl.jaas.config",
            "aws.secret.access.key",
            "s3.access.key.id",
            "ssl.key.password",
            "ssl.keystore.passphrase",
            "auth.token",
        ] {
            assert!(looks_secret(secret), "{secret} should look secret");
        }
        for plain in [
            "key.converter",
            "value.converter",
            "tasks.max",
            "topic",
            "connection.url",
            "key.ignore",
            "auth.method",
            "primary.key.fields",
        ] {
            assert!(!looks_secret(plain), "{plain} should not look secret");
        }
    }
}
