//! Reading a connector config's pipeline keys, as Kafka Connect's `ConnectorConfig`
//! reads them: `key.converter`, `value.converter`, `header.converter` and their options,
//! `transforms` and `transforms.<alias>.*`, `predicates` and `predicates.<alias>.*`,
//! `errors.*`. Every problem is reported on its key (validate shows them all; a task
//! start fails on the first).

use std::collections::BTreeSet;

use wharf::sdk::{
    ConfigMap, PluginKind, Predicate, TransformKind, TransformPlugin, Transformation,
};

use super::convert::{Converter, ConverterClass, DecimalFormat, JsonSettings};
use super::errors::{ErrorPolicy, Tolerance};
use super::transforms::{self, parse_list};

/// A key that is wrong and why: `(key, message)`.
pub type KeyProblem = (String, String);

/// The converters an executor uses for a connector that names none: Kafka Connect's
/// worker-level `key.converter`, `value.converter`, `header.converter` and their options
/// (`value.converter.schemas.enable`, ...), set on the executor
/// (`--key-converter`, `--converter-option`, docs/configuration.md). Without them, Wharf
/// keeps records' bytes as they are (`ByteArrayConverter`) and headers as Connect does
/// (`SimpleHeaderConverter`).
///
/// As in Connect, a connector that sets `<which>.converter` gets that class with its own
/// `<which>.converter.*` options only; one that does not gets the executor's converter
/// with the executor's options (a connector's option without its class is refused, where
/// Connect would ignore it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConverterDefaults {
    /// Connect's worker keys: `<which>.converter` and `<which>.converter.<option>`.
    settings: ConfigMap,
}

/// The three converter keys, by the prefix their options go under.
pub const CONVERTER_KEYS: [&str; 3] = ["key.converter", "value.converter", "header.converter"];

impl ConverterDefaults {
    /// The defaults Connect's worker keys in `settings` name (`key.converter`,
    /// `key.converter.schemas.enable`, ...).
    ///
    /// # Errors
    /// Each problem on its key: a key that is not a converter's or its option, an
    /// unknown class, a bad option.
    pub fn parse(settings: ConfigMap) -> Result<Self, Vec<KeyProblem>> {
        let mut problems: Vec<KeyProblem> = settings
            .keys()
            .filter(|k| {
                !CONVERTER_KEYS
                    .iter()
                    .any(|c| *k == c || k.strip_prefix(c).is_some_and(|r| r.starts_with('.')))
            })
            .map(|k| {
                (
                    k.clone(),
                    "not a converter key: key.converter, value.converter, header.converter or an option under one of them".to_owned(),
                )
            })
            .collect();
        let builtin = Self::default();
        for which in ["key", "value", "header"] {
            converter(&settings, which, &builtin, &mut problems);
        }
        if problems.is_empty() {
            Ok(Self { settings })
        } else {
            problems.sort();
            Err(problems)
        }
    }

    /// `config` with the executor's converter settings for each converter it does not
    /// name (`<which>.converter` absent): the executor's class and options under it, as
    /// a Connect worker hands its converters to a connector that sets none. Settings the
    /// operator did not give are not added (the plugin keeps its own default).
    pub fn fill(&self, config: &ConfigMap) -> ConfigMap {
        let mut out = config.clone();
        for which in CONVERTER_KEYS {
            if config.contains_key(which) {
                continue;
            }
            for (k, v) in &self.settings {
                if k == which || k.strip_prefix(which).is_some_and(|r| r.starts_with('.')) {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
        out
    }

    /// The class of `which` (`key`, `value`, `header`) when a connector names none.
    fn class(&self, which: &str) -> ConverterClass {
        self.settings
            .get(&format!("{which}.converter"))
            .and_then(|c| ConverterClass::parse(c))
            .unwrap_or(match which {
                "header" => ConverterClass::SimpleHeader,
                _ => ConverterClass::ByteArray,
            })
    }

    /// The class names, for the executor's start log line: `key=..., value=..., header=...`.
    pub fn describe(&self) -> String {
        let mut out = ["key", "value", "header"]
            .map(|w| format!("{w}={}", self.class(w).class_name()))
            .join(", ");
        let options: Vec<String> = self
            .settings
            .iter()
            .filter(|(k, _)| !CONVERTER_KEYS.contains(&k.as_str()))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if !options.is_empty() {
            let mut options = options;
            options.sort();
            out.push_str(&format!(" ({})", options.join(", ")));
        }
        out
    }
}

/// One configured transform of the chain.
pub struct Step {
    /// Its alias in `transforms`.
    pub alias: String,
    /// Its class, as configured.
    pub class: String,
    /// The transform.
    pub transform: Box<dyn Transformation>,
    /// The index of its predicate in [`Parsed::predicates`] and whether it is negated.
    pub predicate: Option<(usize, bool)>,
}

/// A connector's pipeline, read from its config.
pub struct Parsed {
    /// Converter of keys.
    pub key: Converter,
    /// Converter of values.
    pub value: Converter,
    /// Converter of headers.
    pub header: Converter,
    /// The transforms, in order.
    pub steps: Vec<Step>,
    /// The predicates the transforms refer to.
    pub predicates: Vec<Box<dyn Predicate>>,
    /// `errors.*`.
    pub errors: ErrorPolicy,
}

/// The keys a built-in transform or predicate reads, from its definition in the SDK (any
/// other under its alias is refused rather than ignored); `def` is `None` only for a name
/// the SDK does not list, which `builtin_transform_name`/`builtin_predicate_name` never
/// give (a unit test holds the lists equal).
fn builtin_keys(def: Option<wharf::sdk::ConfigDef>) -> Vec<String> {
    def.map(|d| d.keys.into_iter().map(|k| k.name).collect())
        .unwrap_or_default()
}

/// The keys of `config` under `prefix`, without it.
fn under(config: &ConfigMap, prefix: &str) -> ConfigMap {
    config
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix(prefix)
                .map(|rest| (rest.to_owned(), v.clone()))
        })
        .collect()
}

fn parse_bool(key: &str, value: &str) -> Result<bool, KeyProblem> {
    match value.trim() {
        v if v.eq_ignore_ascii_case("true") => Ok(true),
        v if v.eq_ignore_ascii_case("false") => Ok(false),
        _ => Err((
            key.to_owned(),
            "Expected value to be either true or false".into(),
        )),
    }
}

/// Reads `<which>.converter` and its options (`<which>.converter.*`) from `config`, or,
/// when it does not name the class, the executor's from `defaults`.
fn converter(
    config: &ConfigMap,
    which: &str,
    defaults: &ConverterDefaults,
    problems: &mut Vec<KeyProblem>,
) -> Converter {
    let key = format!("{which}.converter");
    let default = defaults.class(which);
    let config = if config.contains_key(&key) {
        config
    } else {
        // Connect configures the worker's converter with the worker's options only: a
        // connector's option without its class would be ignored, so it is refused.
        for opt in config.keys().filter(|k| {
            k.strip_prefix(key.as_str())
                .is_some_and(|r| r.starts_with('.'))
        }) {
            problems.push((
                opt.clone(),
                format!(
                    "an option of {key}, which this config does not set: the executor's default converter ({}) keeps the executor's options, as Kafka Connect's worker converter does; set {key} too",
                    default.class_name()
                ),
            ));
        }
        &defaults.settings
    };
    let class = match config.get(&key) {
        None => default,
        Some(name) => match ConverterClass::parse(name) {
            Some(ConverterClass::SimpleHeader) if which != "header" => {
                problems.push((
                    key.clone(),
                    "SimpleHeaderConverter converts headers only".into(),
                ));
                default
            }
            Some(c) => c,
            None => {
                problems.push((
                    key.clone(),
                    format!(
                        "Class {name} could not be found: Wharf's converters are {}, {}, {} and {} (or their simple names, or json, string, bytes, simple)",
                        super::convert::JSON_CONVERTER,
                        super::convert::STRING_CONVERTER,
                        super::convert::BYTE_ARRAY_CONVERTER,
                        super::convert::SIMPLE_HEADER_CONVERTER
                    ),
                ));
                default
            }
        },
    };
    let options = under(config, &format!("{key}."));
    let mut json = JsonSettings::default();
    for (opt, value) in &options {
        let full = format!("{key}.{opt}");
        let allowed: &[&str] = match class {
            ConverterClass::Json => &[
                "schemas.enable",
                "schemas.cache.size",
                "decimal.format",
                "replace.null.with.default",
                "converter.type",
            ],
            ConverterClass::String => &["converter.encoding", "converter.type"],
            ConverterClass::ByteArray | ConverterClass::SimpleHeader => &["converter.type"],
        };
        if !allowed.contains(&opt.as_str()) {
            problems.push((
                full,
                format!(
                    "not an option of {} (its options: {})",
                    class.class_name(),
                    allowed.join(", ")
                ),
            ));
            continue;
        }
        let checked = match opt.as_str() {
            "schemas.enable" => parse_bool(&full, value).map(|b| json.schemas_enable = b),
            "replace.null.with.default" => {
                parse_bool(&full, value).map(|b| json.replace_null_with_default = b)
            }
            "decimal.format" => match value.trim().to_ascii_uppercase().as_str() {
                "BASE64" => {
                    json.decimal_format = DecimalFormat::Base64;
                    Ok(())
                }
                "NUMERIC" => {
                    json.decimal_format = DecimalFormat::Numeric;
                    Ok(())
                }
                _ => Err((
                    full.clone(),
                    "String must be one of (case insensitive): BASE64, NUMERIC".into(),
                )),
            },
            "schemas.cache.size" => value
                .trim()
                .parse::<u32>()
                .map(|_| ())
                .map_err(|_| (full.clone(), "Not a number of type INT".into())),
            "converter.encoding" => {
                match value.trim().to_ascii_uppercase().replace('_', "-").as_str() {
                    "UTF-8" | "UTF8" => Ok(()),
                    _ => Err((
                        full.clone(),
                        "Wharf's StringConverter writes UTF-8 only".into(),
                    )),
                }
            }
            "converter.type" => match value.trim() {
                "key" | "value" | "header" => Ok(()),
                _ => Err((
                    full.clone(),
                    "String must be one of: key, value, header".into(),
                )),
            },
            _ => Ok(()),
        };
        if let Err(p) = checked {
            problems.push(p);
        }
    }
    match class {
        ConverterClass::Json => Converter::Json(json),
        ConverterClass::String => Converter::String,
        ConverterClass::ByteArray => Converter::ByteArray,
        ConverterClass::SimpleHeader => Converter::SimpleHeader,
    }
}

/// Reads `errors.*`.
fn error_policy(
    config: &ConfigMap,
    kind: PluginKind,
    problems: &mut Vec<KeyProblem>,
) -> ErrorPolicy {
    let mut p = ErrorPolicy::default();
    for (key, value) in config.iter().filter(|(k, _)| k.starts_with("errors.")) {
        let v = value.trim();
        let checked: Result<(), KeyProblem> = match key.as_str() {
            "errors.tolerance" => match v.to_ascii_lowercase().as_str() {
                "none" => {
                    p.tolerance = Tolerance::None;
                    Ok(())
                },
                "all" => {
                    p.tolerance = Tolerance::All;
                    Ok(())
                },
                _ => Err((key.clone(), "String must be one of: none, all".into())),
            },
            "errors.retry.timeout" => match v.parse::<i64>() {
                Ok(n) if n >= -1 => {
                    p.retry_timeout_ms = n;
                    Ok(())
                },
                _ => Err((key.clone(), "must be a number of milliseconds, 0 (no retries) or -1 (retry without end)".into())),
            },
            "errors.retry.delay.max.ms" => match v.parse::<u64>() {
                Ok(n) if n >= 1 => {
                    p.retry_delay_max_ms = n;
                    Ok(())
                },
                _ => Err((key.clone(), "must be a positive number of milliseconds".into())),
            },
            "errors.log.enable" => parse_bool(key, v).map(|b| p.log = b),
            "errors.log.include.messages" => parse_bool(key, v).map(|b| p.log_messages = b),
            "errors.deadletterqueue.topic.name" | "errors.deadletterqueue.context.headers.enable"
                if kind == PluginKind::Source =>
            {
                Err((key.clone(), "Kafka Connect defines a dead letter queue for sink connectors only; remove the key (a source skips a failing record with errors.tolerance=all)".into()))
            }
            "errors.deadletterqueue.topic.name" => {
                p.dlq_topic = (!v.is_empty()).then(|| v.to_owned());
                Ok(())
            }
            "errors.deadletterqueue.context.headers.enable" => parse_bool(key, v).map(|b| p.dlq_context_headers = b),
            "errors.deadletterqueue.topic.replication.factor" => Err((
                key.clone(),
                "Wharf creates the dead letter queue topic as any topic of the record log, with the log's settings; remove the key".into(),
            )),
            _ => Err((key.clone(), "not a Kafka Connect errors.* key Wharf implements".into())),
        };
        if let Err(e) = checked {
            problems.push(e);
        }
    }
    if p.dlq_topic.is_some()
        && config.get("topics").is_some_and(|t| {
            parse_list(t)
                .iter()
                .any(|t| Some(t) == p.dlq_topic.as_ref())
        })
    {
        problems.push((
            "errors.deadletterqueue.topic.name".into(),
            "the dead letter queue topic must not be one of the connector's own topics".into(),
        ));
    }
    p
}

/// The alias-level keys the runtime reads itself; the rest go to the transform.
const ALIAS_KEYS: [&str; 3] = ["type", "predicate", "negate"];

/// Reads a connector's pipeline. `custom` are the executor's own transforms and
/// predicates; `defaults` its default converters.
///
/// # Errors
/// Every problem found, on its key, sorted by key.
pub fn parse(
    config: &ConfigMap,
    kind: PluginKind,
    defaults: &ConverterDefaults,
    custom: &[TransformPlugin],
) -> Result<Parsed, Vec<KeyProblem>> {
    let mut problems = Vec::new();
    let key = converter(config, "key", defaults, &mut problems);
    let value = converter(config, "value", defaults, &mut problems);
    let header = converter(config, "header", defaults, &mut problems);
    let errors = error_policy(config, kind, &mut problems);

    let predicate_aliases = aliases(config, "predicates", &mut problems);
    let mut predicates: Vec<Box<dyn Predicate>> = Vec::new();
    let mut built_predicates: Vec<String> = Vec::new();
    for alias in &predicate_aliases {
        let prefix = format!("predicates.{alias}.");
        let own = under(config, &prefix);
        let type_key = format!("{prefix}type");
        let Some(class) = own.get("type") else {
            problems.push((
                type_key,
                format!(
                    "Missing required configuration \"{prefix}type\" which has no default value."
                ),
            ));
            continue;
        };
        let made = if let Some(name) = transforms::builtin_predicate_name(class) {
            let keys = builtin_keys(wharf::sdk::builtin_predicate_config_def(&format!(
                "{}.{name}",
                transforms::PREDICATES_PACKAGE
            )));
            unknown_keys(&own, &prefix, &keys, &["type"], &mut problems);
            transforms::build_predicate(name, &without(&own, &["type"]))
        } else if let Some(TransformKind::Predicate(make)) =
            custom.iter().find(|c| c.name == *class).map(|c| &c.kind)
        {
            make(&without(&own, &["type"]))
        } else {
            problems.push((
                type_key,
                format!(
                    "Class {class} could not be found: not a predicate Wharf has (built-in: {})",
                    transforms::BUILTIN_PREDICATES.join(", ")
                ),
            ));
            continue;
        };
        match made {
            Ok(p) => {
                predicates.push(p);
                built_predicates.push(alias.clone());
            }
            Err((k, why)) => problems.push((format!("{prefix}{k}"), why)),
        }
    }

    let transform_aliases = aliases(config, "transforms", &mut problems);
    let mut steps = Vec::new();
    for alias in &transform_aliases {
        let prefix = format!("transforms.{alias}.");
        let own = under(config, &prefix);
        let type_key = format!("{prefix}type");
        let Some(class) = own.get("type").cloned() else {
            problems.push((
                type_key,
                format!(
                    "Missing required configuration \"{prefix}type\" which has no default value."
                ),
            ));
            continue;
        };
        let negate = match own.get("negate") {
            Some(v) => match parse_bool(&format!("{prefix}negate"), v) {
                Ok(b) => b,
                Err(p) => {
                    problems.push(p);
                    false
                }
            },
            None => false,
        };
        let predicate = match own.get("predicate") {
            None => None,
            Some(p) => match built_predicates.iter().position(|a| a == p.trim()) {
                Some(i) => Some((i, negate)),
                None => {
                    if !predicate_aliases.iter().any(|a| a == p.trim()) {
                        problems.push((
                            format!("{prefix}predicate"),
                            format!("Transformation is configured with a predicate alias {p:?} that is not defined in predicates"),
                        ));
                    }
                    continue;
                }
            },
        };
        let made = if let Some(name) = transforms::builtin_transform_name(&class) {
            let keys = builtin_keys(wharf::sdk::builtin_transform_config_def(&format!(
                "{}.{name}",
                transforms::TRANSFORMS_PACKAGE
            )));
            unknown_keys(&own, &prefix, &keys, &ALIAS_KEYS, &mut problems);
            transforms::build_transform(name, &without(&own, &ALIAS_KEYS))
        } else if let Some(TransformKind::Transformation(make)) =
            custom.iter().find(|c| c.name == class).map(|c| &c.kind)
        {
            make(&without(&own, &ALIAS_KEYS))
        } else {
            problems.push((type_key, format!("Class {class} could not be found: not a transform Wharf has (built-in, under org.apache.kafka.connect.transforms: {})", transforms::BUILTIN_TRANSFORMS.join(", "))));
            continue;
        };
        match made {
            Ok(transform) => steps.push(Step {
                alias: alias.clone(),
                class,
                transform,
                predicate,
            }),
            Err((k, why)) => problems.push((format!("{prefix}{k}"), why)),
        }
    }
    // A key under an alias the list does not name would be ignored: refused instead.
    for k in config.keys() {
        for (group, listed) in [
            ("transforms.", &transform_aliases),
            ("predicates.", &predicate_aliases),
        ] {
            if let Some(rest) = k.strip_prefix(group)
                && let Some((alias, _)) = rest.split_once('.')
                && !listed.iter().any(|a| a == alias)
            {
                problems.push((
                    k.clone(),
                    format!(
                        "configures alias {alias:?}, which {} does not list",
                        group.trim_end_matches('.')
                    ),
                ));
            }
        }
    }
    problems.sort();
    problems.dedup();
    if problems.is_empty() {
        Ok(Parsed {
            key,
            value,
            header,
            steps,
            predicates,
            errors,
        })
    } else {
        Err(problems)
    }
}

/// The aliases a `transforms` or `predicates` list names; a repeated one is a problem.
fn aliases(config: &ConfigMap, key: &str, problems: &mut Vec<KeyProblem>) -> Vec<String> {
    let list = config.get(key).map(|v| parse_list(v)).unwrap_or_default();
    let mut seen = BTreeSet::new();
    for a in &list {
        if a.is_empty() || !seen.insert(a.clone()) {
            problems.push((
                key.to_owned(),
                format!("Duplicate or empty alias provided: {a:?}"),
            ));
        }
    }
    list
}

fn without(own: &ConfigMap, keys: &[&str]) -> ConfigMap {
    own.iter()
        .filter(|(k, _)| !keys.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn unknown_keys(
    own: &ConfigMap,
    prefix: &str,
    allowed: &[String],
    runtime: &[&str],
    problems: &mut Vec<KeyProblem>,
) {
    for k in own.keys() {
        if !allowed.contains(k) && !runtime.contains(&k.as_str()) {
            problems.push((
                format!("{prefix}{k}"),
                format!(
                    "not a key of this transform or predicate (its keys: {})",
                    allowed.join(", ")
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> ConfigMap {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn problems(pairs: &[(&str, &str)], kind: PluginKind) -> Vec<KeyProblem> {
        match parse(&cfg(pairs), kind, &ConverterDefaults::default(), &[]) {
            Ok(_) => Vec::new(),
            Err(p) => p,
        }
    }

    fn keys(pairs: &[(&str, &str)]) -> Vec<String> {
        problems(pairs, PluginKind::Sink)
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    #[test]
    fn a_connect_pipeline_config_is_accepted() {
        let config = [
            (
                "key.converter",
                "org.apache.kafka.connect.storage.StringConverter",
            ),
            (
                "value.converter",
                "org.apache.kafka.connect.json.JsonConverter",
            ),
            ("value.converter.schemas.enable", "false"),
            ("transforms", "mask,route"),
            (
                "transforms.mask.type",
                "org.apache.kafka.connect.transforms.MaskField$Value",
            ),
            ("transforms.mask.fields", "ssn"),
            (
                "transforms.route.type",
                "org.apache.kafka.connect.transforms.RegexRouter",
            ),
            ("transforms.route.regex", "(.*)"),
            ("transforms.route.replacement", "$1-masked"),
            ("transforms.route.predicate", "isOrders"),
            ("transforms.route.negate", "true"),
            ("predicates", "isOrders"),
            (
                "predicates.isOrders.type",
                "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
            ),
            ("predicates.isOrders.pattern", "orders"),
            ("errors.tolerance", "all"),
            ("errors.log.enable", "true"),
            ("errors.deadletterqueue.topic.name", "dlq"),
            ("errors.deadletterqueue.context.headers.enable", "true"),
        ];
        let Ok(parsed) = parse(
            &cfg(&config),
            PluginKind::Sink,
            &ConverterDefaults::default(),
            &[],
        ) else {
            panic!("refused");
        };
        assert_eq!(parsed.steps.len(), 2);
        assert_eq!(parsed.steps[1].predicate, Some((0, true)));
        assert_eq!(parsed.errors.tolerance, Tolerance::All);
        assert_eq!(parsed.errors.dlq_topic.as_deref(), Some("dlq"));
        assert_eq!(
            parsed.value,
            Converter::Json(JsonSettings {
                schemas_enable: false,
                ..JsonSettings::default()
            })
        );
    }

    #[test]
    fn an_unknown_converter_and_a_bad_option_are_named_by_key() {
        assert_eq!(
            keys(&[
                ("value.converter", "io.confluent.connect.avro.AvroConverter"),
                ("key.converter.schemas.enable", "yes")
            ]),
            ["key.converter.schemas.enable", "value.converter"]
        );
    }

    #[test]
    fn a_transform_without_type_or_with_a_bad_key_is_named_by_key() {
        assert_eq!(keys(&[("transforms", "a")]), ["transforms.a.type"]);
        assert_eq!(
            keys(&[
                ("transforms", "a"),
                ("transforms.a.type", "MaskField$Value")
            ]),
            ["transforms.a.fields"]
        );
        assert_eq!(
            keys(&[
                ("transforms", "a"),
                ("transforms.a.type", "MaskField$Value"),
                ("transforms.a.fields", "x"),
                ("transforms.a.feilds", "y")
            ]),
            ["transforms.a.feilds"]
        );
        assert_eq!(
            keys(&[
                ("transforms", "a"),
                ("transforms.a.type", "com.example.Nope")
            ]),
            ["transforms.a.type"]
        );
    }

    #[test]
    fn an_undefined_predicate_and_an_unlisted_alias_are_refused() {
        assert_eq!(
            keys(&[
                ("transforms", "f"),
                ("transforms.f.type", "Filter"),
                ("transforms.f.predicate", "p")
            ]),
            ["transforms.f.predicate"]
        );
        assert_eq!(
            keys(&[("transforms.ghost.type", "Filter")]),
            ["transforms.ghost.type"]
        );
    }

    #[test]
    fn bad_error_settings_are_named_and_a_sources_dlq_is_refused() {
        assert_eq!(
            keys(&[
                ("errors.tolerance", "some"),
                ("errors.retry.timeout", "-5"),
                ("errors.log.enable", "yes")
            ]),
            [
                "errors.log.enable",
                "errors.retry.timeout",
                "errors.tolerance"
            ]
        );
        let p = problems(
            &[("errors.deadletterqueue.topic.name", "dlq")],
            PluginKind::Source,
        );
        assert_eq!(p[0].0, "errors.deadletterqueue.topic.name");
        assert!(
            keys(&[
                ("errors.retry.timeout", "-1"),
                ("errors.retry.delay.max.ms", "1000"),
                ("errors.log.include.messages", "true")
            ])
            .is_empty()
        );
    }

    #[test]
    fn the_dlq_topic_cannot_be_one_of_the_sinks_topics() {
        assert_eq!(
            keys(&[
                ("topics", "a,dlq"),
                ("errors.deadletterqueue.topic.name", "dlq")
            ]),
            ["errors.deadletterqueue.topic.name"]
        );
    }

    fn defaults(pairs: &[(&str, &str)]) -> ConverterDefaults {
        match ConverterDefaults::parse(cfg(pairs)) {
            Ok(d) => d,
            Err(p) => panic!("refused: {p:?}"),
        }
    }

    #[test]
    fn fill_adds_the_executors_converters_a_config_names_none_of() {
        let d = defaults(&[
            ("header.converter", "simple"),
            ("value.converter", "json"),
            ("value.converter.schemas.enable", "false"),
        ]);
        assert_eq!(
            d.fill(&cfg(&[("topics", "t")])),
            cfg(&[
                ("topics", "t"),
                ("header.converter", "simple"),
                ("value.converter", "json"),
                ("value.converter.schemas.enable", "false"),
            ])
        );
    }

    #[test]
    fn fill_keeps_a_converter_the_config_names_with_its_own_options_only() {
        let d = defaults(&[
            ("value.converter", "json"),
            ("value.converter.schemas.enable", "false"),
        ]);
        let own = cfg(&[("value.converter", "string")]);
        assert_eq!(d.fill(&own), own);
    }

    #[test]
    fn fill_adds_nothing_the_operator_did_not_set() {
        let own = cfg(&[("topics", "t")]);
        assert_eq!(ConverterDefaults::default().fill(&own), own);
    }

    #[test]
    fn the_executors_default_converter_and_its_options_apply_to_a_config_naming_none() {
        let d = defaults(&[
            ("value.converter", "json"),
            ("value.converter.schemas.enable", "false"),
        ]);
        let Ok(parsed) = parse(&ConfigMap::new(), PluginKind::Sink, &d, &[]) else {
            panic!("refused");
        };
        assert_eq!(
            parsed.value,
            Converter::Json(JsonSettings {
                schemas_enable: false,
                ..JsonSettings::default()
            })
        );
        assert_eq!(parsed.key, Converter::ByteArray);
        assert_eq!(parsed.header, Converter::SimpleHeader);
    }

    #[test]
    fn a_connectors_own_converter_overrides_the_default_with_its_own_options_only() {
        let d = defaults(&[
            ("value.converter", "json"),
            ("value.converter.schemas.enable", "false"),
        ]);
        let Ok(parsed) = parse(
            &cfg(&[("value.converter", "json")]),
            PluginKind::Sink,
            &d,
            &[],
        ) else {
            panic!("refused");
        };
        assert_eq!(parsed.value, Converter::Json(JsonSettings::default()));
        let Ok(parsed) = parse(
            &cfg(&[("value.converter", "string")]),
            PluginKind::Sink,
            &d,
            &[],
        ) else {
            panic!("refused");
        };
        assert_eq!(parsed.value, Converter::String);
    }

    #[test]
    fn a_connectors_option_without_its_converter_is_refused_naming_it() {
        let d = defaults(&[("value.converter", "json")]);
        let Err(p) = parse(
            &cfg(&[("value.converter.schemas.enable", "false")]),
            PluginKind::Sink,
            &d,
            &[],
        ) else {
            panic!("accepted");
        };
        assert_eq!(p[0].0, "value.converter.schemas.enable");
        assert!(p[0].1.contains("set value.converter too"), "{}", p[0].1);
    }

    #[test]
    fn bad_executor_defaults_are_refused_on_their_keys() {
        let Err(p) = ConverterDefaults::parse(cfg(&[
            ("value.converter", "avro"),
            ("key.converter", "json"),
            ("key.converter.schemas.enabled", "false"),
            ("converter.x", "1"),
        ])) else {
            panic!("accepted");
        };
        let keys: Vec<&str> = p.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "converter.x",
                "key.converter.schemas.enabled",
                "value.converter"
            ]
        );
        assert_eq!(
            defaults(&[]).describe(),
            format!(
                "key={}, value={}, header={}",
                super::super::convert::BYTE_ARRAY_CONVERTER,
                super::super::convert::BYTE_ARRAY_CONVERTER,
                super::super::convert::SIMPLE_HEADER_CONVERTER
            )
        );
    }
}
