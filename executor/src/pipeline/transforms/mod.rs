//! The built-in transforms and predicates of Apache Kafka 3.9 (`connect-transforms`),
//! under Connect's class names (`org.apache.kafka.connect.transforms.MaskField$Value`,
//! or the simple name `MaskField$Value`), configured by the same keys, behaving as
//! Connect documents them (and as its sources read). [`build_transform`] and
//! [`build_predicate`] make one from its keys; an error names the key.

mod cast;
mod fields;
mod predicates;
mod record;

use std::collections::BTreeSet;

use wharf::sdk::data::{Data, Schema, Value};
use wharf::sdk::{ConfigMap, ConnectRecord, Predicate, TransformError, Transformation};

/// The package of Connect's built-in transforms.
pub const TRANSFORMS_PACKAGE: &str = "org.apache.kafka.connect.transforms";
/// The package of Connect's built-in predicates.
pub const PREDICATES_PACKAGE: &str = "org.apache.kafka.connect.transforms.predicates";

/// Built-in transforms by simple name (`$Key`/`$Value` variants listed apiece).
pub const BUILTIN_TRANSFORMS: &[&str] = &[
    "Cast$Key",
    "Cast$Value",
    "DropHeaders",
    "ExtractField$Key",
    "ExtractField$Value",
    "Filter",
    "Flatten$Key",
    "Flatten$Value",
    "HeaderFrom$Key",
    "HeaderFrom$Value",
    "HoistField$Key",
    "HoistField$Value",
    "InsertField$Key",
    "InsertField$Value",
    "InsertHeader",
    "MaskField$Key",
    "MaskField$Value",
    "RegexRouter",
    "ReplaceField$Key",
    "ReplaceField$Value",
    "SetSchemaMetadata$Key",
    "SetSchemaMetadata$Value",
    "TimestampConverter$Key",
    "TimestampConverter$Value",
    "TimestampRouter",
    "ValueToKey",
];

/// Built-in predicates by simple name.
pub const BUILTIN_PREDICATES: &[&str] = &["HasHeaderKey", "RecordIsTombstone", "TopicNameMatches"];

/// A key of a transform's config that is wrong, and why (Connect's `ConfigException`).
pub type KeyError = (String, String);

/// The simple name of a built-in transform that `class` names, if any.
pub fn builtin_transform_name(class: &str) -> Option<&'static str> {
    let simple = class
        .strip_prefix(TRANSFORMS_PACKAGE)
        .and_then(|s| s.strip_prefix('.'))
        .unwrap_or(class);
    BUILTIN_TRANSFORMS.iter().copied().find(|n| *n == simple)
}

/// The simple name of a built-in predicate that `class` names, if any.
pub fn builtin_predicate_name(class: &str) -> Option<&'static str> {
    let simple = class
        .strip_prefix(PREDICATES_PACKAGE)
        .and_then(|s| s.strip_prefix('.'))
        .unwrap_or(class);
    BUILTIN_PREDICATES.iter().copied().find(|n| *n == simple)
}

/// Makes the built-in transform `name` (from [`builtin_transform_name`]) from its keys.
///
/// # Errors
/// The first key that is missing or wrong, with Connect's message.
pub fn build_transform(
    name: &str,
    config: &ConfigMap,
) -> Result<Box<dyn Transformation>, KeyError> {
    let (base, side) = match name.split_once('$') {
        Some((b, "Key")) => (b, Side::Key),
        Some((b, _)) => (b, Side::Value),
        None => (name, Side::Value),
    };
    let c = Keys(config);
    Ok(match base {
        "Cast" => Box::new(cast::Cast::new(side, &c)?),
        "DropHeaders" => Box::new(record::DropHeaders::new(&c)?),
        "ExtractField" => Box::new(fields::ExtractField::new(side, &c)?),
        "Filter" => Box::new(record::Filter),
        "Flatten" => Box::new(fields::Flatten::new(side, &c)?),
        "HeaderFrom" => Box::new(fields::HeaderFrom::new(side, &c)?),
        "HoistField" => Box::new(fields::HoistField::new(side, &c)?),
        "InsertField" => Box::new(fields::InsertField::new(side, &c)?),
        "InsertHeader" => Box::new(record::InsertHeader::new(&c)?),
        "MaskField" => Box::new(fields::MaskField::new(side, &c)?),
        "RegexRouter" => Box::new(record::RegexRouter::new(&c)?),
        "ReplaceField" => Box::new(fields::ReplaceField::new(side, &c)?),
        "SetSchemaMetadata" => Box::new(fields::SetSchemaMetadata::new(side, &c)?),
        "TimestampConverter" => Box::new(record::TimestampConverter::new(side, &c)?),
        "TimestampRouter" => Box::new(record::TimestampRouter::new(&c)?),
        "ValueToKey" => Box::new(fields::ValueToKey::new(&c)?),
        other => return Err(("type".into(), format!("unknown transform {other}"))),
    })
}

/// Makes the built-in predicate `name` (from [`builtin_predicate_name`]) from its keys.
///
/// # Errors
/// The first key that is missing or wrong.
pub fn build_predicate(name: &str, config: &ConfigMap) -> Result<Box<dyn Predicate>, KeyError> {
    let c = Keys(config);
    Ok(match name {
        "HasHeaderKey" => Box::new(predicates::HasHeaderKey::new(&c)?),
        "RecordIsTombstone" => Box::new(predicates::RecordIsTombstone),
        "TopicNameMatches" => Box::new(predicates::TopicNameMatches::new(&c)?),
        other => return Err(("type".into(), format!("unknown predicate {other}"))),
    })
}

/// Whether a transform works on the record's key or its value (Connect's `$Key` and
/// `$Value` classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The key.
    Key,
    /// The value.
    Value,
}

impl Side {
    fn get(self, r: &ConnectRecord) -> &Data {
        match self {
            Side::Key => &r.key,
            Side::Value => &r.value,
        }
    }

    fn set(self, r: &mut ConnectRecord, data: Data) {
        match self {
            Side::Key => r.key = data,
            Side::Value => r.value = data,
        }
    }

    fn take(self, r: &mut ConnectRecord) -> Data {
        std::mem::replace(
            match self {
                Side::Key => &mut r.key,
                Side::Value => &mut r.value,
            },
            Data::NULL,
        )
    }
}

/// A transform's keys with Connect's `ConfigDef` parsing of each type.
pub(crate) struct Keys<'a>(&'a ConfigMap);

impl Keys<'_> {
    fn string(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn required(&self, key: &str) -> Result<&str, KeyError> {
        self.string(key).ok_or_else(|| {
            (
                key.to_owned(),
                format!("Missing required configuration \"{key}\" which has no default value."),
            )
        })
    }

    /// A LIST: comma-separated, trimmed; empty text is an empty list.
    fn list(&self, key: &str) -> Option<Vec<String>> {
        self.string(key).map(parse_list)
    }

    /// A required LIST that must not be empty (Connect's `NonEmptyListValidator`).
    fn non_empty_list(&self, key: &str) -> Result<Vec<String>, KeyError> {
        let list = parse_list(self.required(key)?);
        if list.is_empty() {
            return Err((key.to_owned(), "Empty list".into()));
        }
        Ok(list)
    }

    fn boolean(&self, key: &str, default: bool) -> Result<bool, KeyError> {
        match self.string(key).map(str::trim) {
            None => Ok(default),
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
            Some(_) => Err((
                key.to_owned(),
                "Expected value to be either true or false".into(),
            )),
        }
    }

    fn int(&self, key: &str) -> Result<Option<i32>, KeyError> {
        match self.string(key).map(str::trim) {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|_| (key.to_owned(), "Not a number of type INT".into())),
        }
    }
}

/// Connect's LIST parsing: split on commas, trim each, no empty text.
pub fn parse_list(text: &str) -> Vec<String> {
    let t = text.trim();
    if t.is_empty() {
        return Vec::new();
    }
    t.split(',').map(|s| s.trim().to_owned()).collect()
}

/// `Requirements.requireMap`: a schemaless value must be a map.
fn require_map<'a>(
    value: &'a Value,
    purpose: &str,
) -> Result<&'a Vec<(Value, Value)>, TransformError> {
    match value {
        Value::Map(m) => Ok(m),
        other => Err(TransformError::new(format!(
            "Only Map objects supported in absence of schema for [{purpose}], found: {}",
            other.java_class()
        ))),
    }
}

/// As [`require_map`], taking the map: a transform that owns the record's value changes
/// it in place rather than copying it.
fn into_map(value: Value, purpose: &str) -> Result<Vec<(Value, Value)>, TransformError> {
    match value {
        Value::Map(m) => Ok(m),
        other => Err(TransformError::new(format!(
            "Only Map objects supported in absence of schema for [{purpose}], found: {}",
            other.java_class()
        ))),
    }
}

/// `Requirements.requireStruct`: a value with a schema must be a struct.
fn require_struct<'a>(
    value: &'a Value,
    purpose: &str,
) -> Result<&'a Vec<(String, Value)>, TransformError> {
    match value {
        Value::Struct(s) => Ok(s),
        other => Err(TransformError::new(format!(
            "Only Struct objects supported for [{purpose}], found: {}",
            other.java_class()
        ))),
    }
}

/// A struct's field value as `Struct.get` reads it (a null with a default is the
/// default) or, with `replace_null_with_default` false, as `getWithoutDefault`.
fn field_value(
    values: &[(String, Value)],
    schema: &Schema,
    name: &str,
    replace_null_with_default: bool,
) -> Value {
    let v = values
        .iter()
        .find(|(n, _)| n == name)
        .map_or(Value::Null, |(_, v)| v.clone());
    if v.is_null()
        && replace_null_with_default
        && let Some(d) = schema.field(name).and_then(|f| f.schema.default.as_deref())
    {
        return d.clone();
    }
    v
}

/// The value of string key `name` of a schemaless map (null when absent).
fn map_get(map: &[(Value, Value)], name: &str) -> Value {
    map.iter()
        .find(|(k, _)| k.as_str() == Some(name))
        .map_or(Value::Null, |(_, v)| v.clone())
}

/// Sets string key `name` of a schemaless map (replacing, else appending).
fn map_put(map: &mut Vec<(Value, Value)>, name: &str, value: Value) {
    match map.iter_mut().find(|(k, _)| k.as_str() == Some(name)) {
        Some((_, v)) => *v = value,
        None => map.push((Value::String(name.to_owned()), value)),
    }
}

/// A set of names from a LIST.
fn name_set(list: Vec<String>) -> BTreeSet<String> {
    list.into_iter().collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_sdks_lists_name_exactly_the_built_in_transforms_and_predicates() {
        let simple = |list: &[&str], package: &str| -> Vec<String> {
            list.iter()
                .map(|c| {
                    c.strip_prefix(package)
                        .unwrap_or(c)
                        .trim_start_matches('.')
                        .to_owned()
                })
                .collect()
        };
        assert_eq!(
            simple(wharf::sdk::BUILTIN_TRANSFORMS, super::TRANSFORMS_PACKAGE),
            super::BUILTIN_TRANSFORMS
        );
        assert_eq!(
            simple(wharf::sdk::BUILTIN_PREDICATES, super::PREDICATES_PACKAGE),
            super::BUILTIN_PREDICATES
        );
        for c in wharf::sdk::BUILTIN_TRANSFORMS {
            assert!(super::builtin_transform_name(c).is_some(), "{c}");
        }
    }

    /// A value each required key of a built-in transform or predicate accepts.
    fn sample(key: &str) -> &'static str {
        match key {
            "spec" => "int32",
            "operation" => "copy",
            "target.type" => "unix",
            _ => "x",
        }
    }

    /// The SDK's definitions say which keys are required: with those set (and, for the
    /// two that need one of their optional keys, SetSchemaMetadata and InsertField, that
    /// key) each built-in is made; without any one of them it is refused naming that key.
    #[test]
    fn the_required_keys_of_each_definition_are_the_ones_the_builder_requires() {
        let classes = wharf::sdk::BUILTIN_TRANSFORMS
            .iter()
            .map(|c| (c, wharf::sdk::builtin_transform_config_def(c), true))
            .chain(
                wharf::sdk::BUILTIN_PREDICATES
                    .iter()
                    .map(|c| (c, wharf::sdk::builtin_predicate_config_def(c), false)),
            );
        for (class, def, is_transform) in classes {
            let def = def.expect("every built-in has a definition");
            let build = |config: &wharf::sdk::ConfigMap| -> Result<(), super::KeyError> {
                if is_transform {
                    let name = super::builtin_transform_name(class).expect("built in");
                    super::build_transform(name, config).map(drop)
                } else {
                    let name = super::builtin_predicate_name(class).expect("built in");
                    super::build_predicate(name, config).map(drop)
                }
            };
            let required: Vec<&str> = def
                .keys
                .iter()
                .filter(|k| k.required)
                .map(|k| k.name.as_str())
                .collect();
            let mut full: wharf::sdk::ConfigMap = required
                .iter()
                .map(|k| ((*k).to_owned(), sample(k).to_owned()))
                .collect();
            if class.contains("SetSchemaMetadata") {
                full.insert("schema.name".into(), "x".into());
            }
            if class.contains("InsertField") {
                full.insert("topic.field".into(), "x".into());
            }
            assert!(build(&full).is_ok(), "{class} with {full:?}");
            for key in &required {
                let mut missing = full.clone();
                missing.remove(*key);
                match build(&missing) {
                    Err((k, _)) => assert_eq!(k, *key, "{class}"),
                    Ok(()) => panic!("{class} made without {key}"),
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use wharf::sdk::ConnectRecord;
    use wharf::sdk::data::{Data, Field, Schema, SchemaType, Value};

    pub fn config(pairs: &[(&str, &str)]) -> wharf::sdk::ConfigMap {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    pub fn record(key: Data, value: Data) -> ConnectRecord {
        ConnectRecord {
            topic: "orders".into(),
            partition: Some(0),
            key,
            value,
            headers: Vec::new(),
            timestamp_ms: Some(1_704_067_200_000),
            offset: Some(42),
        }
    }

    pub fn map(pairs: &[(&str, Value)]) -> Value {
        Value::Map(
            pairs
                .iter()
                .map(|(k, v)| (Value::String((*k).to_owned()), v.clone()))
                .collect(),
        )
    }

    pub fn field(name: &str, schema: Schema) -> Field {
        Field {
            name: name.into(),
            schema,
        }
    }

    /// A struct schema `{id: int32, email: optional string, age: optional int32}`.
    pub fn person_schema() -> Schema {
        Schema::structure(vec![
            field("id", Schema::new(SchemaType::Int32)),
            field("email", Schema::new(SchemaType::String).optional()),
            field("age", Schema::new(SchemaType::Int32).optional()),
        ])
    }

    pub fn person(id: i32, email: &str) -> Data {
        Data::new(
            person_schema(),
            Value::Struct(vec![
                ("id".into(), Value::Int32(id)),
                ("email".into(), Value::String(email.into())),
                ("age".into(), Value::Int32(30)),
            ]),
        )
    }

    pub fn s(text: &str) -> Value {
        Value::String(text.into())
    }
}
