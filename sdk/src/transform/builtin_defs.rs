//! The config definitions of the built-in transforms and predicates: Kafka Connect 4.3's
//! key names, types, defaults and importance, restricted to what the executor's
//! implementation accepts (`field.syntax.version` is V1 only). The executor refuses any
//! other key under a built-in transform's alias, so these lists are also its allow-lists.

use crate::{ConfigDef, ConfigKey, ConfigType, Importance};

/// Package of the built-in transforms' class names.
const TRANSFORMS_PACKAGE: &str = "org.apache.kafka.connect.transforms.";
/// Package of the built-in predicates' class names.
const PREDICATES_PACKAGE: &str = "org.apache.kafka.connect.transforms.predicates.";

const REPLACE_NULL_WITH_DEFAULT: &str = "replace.null.with.default";

/// The keys of the built-in transform `class` (a name of [`BUILTIN_TRANSFORMS`](super::BUILTIN_TRANSFORMS),
/// `org.apache.kafka.connect.transforms.MaskField$Value`); `None` for any other name.
pub fn builtin_transform_config_def(class: &str) -> Option<ConfigDef> {
    if !super::BUILTIN_TRANSFORMS.contains(&class) {
        return None;
    }
    let simple = class.strip_prefix(TRANSFORMS_PACKAGE)?;
    let base = simple.split('$').next().unwrap_or(simple);
    transform_def(base)
}

/// The keys of the built-in predicate `class` (a name of [`BUILTIN_PREDICATES`](super::BUILTIN_PREDICATES));
/// `None` for any other name.
pub fn builtin_predicate_config_def(class: &str) -> Option<ConfigDef> {
    if !super::BUILTIN_PREDICATES.contains(&class) {
        return None;
    }
    predicate_def(class.strip_prefix(PREDICATES_PACKAGE)?)
}

/// The keys of a built-in transform by its name without package and `$Key`/`$Value`.
fn transform_def(base: &str) -> Option<ConfigDef> {
    use ConfigType::{Int, List, String};
    use Importance::{High, Low, Medium};
    let def = ConfigDef::new();
    Some(match base {
        "Cast" => def
            .define(
                ConfigKey::new("spec", List, High, "What to cast: one type for the whole key or value (int32), or field:type pairs (id:int64,price:float64).")
                    .required(),
            )
            .define(replace_null_with_default()),
        "DropHeaders" => def.define(
            ConfigKey::new("headers", List, High, "Names of the headers to remove.").required(),
        ),
        "ExtractField" => def
            .define(
                ConfigKey::new("field", String, Medium, "Name of the field whose value replaces the whole key or value.")
                    .required(),
            )
            .define(replace_null_with_default())
            .define(
                ConfigKey::new("field.syntax.version", String, High, "How field names are read; only V1 (a name is literal, dots included) is supported, V2's nested paths are refused.")
                    .default_value("V1")
                    .validator(field_syntax_v1),
            ),
        "Filter" => def,
        "Flatten" => def.define(
            ConfigKey::new("delimiter", String, Medium, "Text put between a nested field's parent name and its own name.")
                .default_value("."),
        ),
        "HeaderFrom" => def
            .define(
                ConfigKey::new("fields", List, High, "Fields to put into headers, in the order of headers.")
                    .required(),
            )
            .define(
                ConfigKey::new("headers", List, High, "Header names, one per field, in the same order.")
                    .required(),
            )
            .define(
                ConfigKey::new("operation", String, High, "move removes the fields from the record; copy keeps them.")
                    .required()
                    .one_of(&["move", "copy"]),
            )
            .define(replace_null_with_default()),
        "HoistField" => def.define(
            ConfigKey::new("field", String, Medium, "Name of the single field the whole key or value is wrapped into.")
                .required(),
        ),
        "InsertField" => def
            .define(insert_field("topic.field", "the record's topic"))
            .define(insert_field("partition.field", "the record's partition"))
            .define(insert_field("offset.field", "a sink record's offset"))
            .define(insert_field("timestamp.field", "the record's timestamp"))
            .define(insert_field("static.field", "static.value"))
            .define(ConfigKey::new(
                "static.value",
                String,
                Medium,
                "Text put into static.field.",
            ))
            .define(replace_null_with_default()),
        "InsertHeader" => def
            .define(
                ConfigKey::new("header", String, High, "Name of the header to add.").required(),
            )
            .define(
                ConfigKey::new("value.literal", String, High, "The header's value, read as SimpleHeaderConverter reads text (a number becomes an integer or float).")
                    .required(),
            ),
        "MaskField" => def
            .define(
                ConfigKey::new("fields", List, High, "Fields whose values are replaced.")
                    .required(),
            )
            .define(
                ConfigKey::new("replacement", String, Low, "Value put in place of each field, read as the field's type; unset, the type's empty value (0, false, empty text).")
                    .validator(non_empty),
            )
            .define(replace_null_with_default()),
        "RegexRouter" => def
            .define(
                ConfigKey::new("regex", String, High, "Regular expression the whole topic must match; look-around and back-references are refused.")
                    .required(),
            )
            .define(
                ConfigKey::new("replacement", String, High, "The new topic, where $1, $2, ... stand for the regex's groups.")
                    .required(),
            ),
        "ReplaceField" => def
            .define(
                ConfigKey::new("exclude", List, Medium, "Fields to drop; wins over include.")
                    .default_value(""),
            )
            .define(
                ConfigKey::new("include", List, Medium, "Fields to keep; empty keeps all.")
                    .default_value(""),
            )
            .define(
                ConfigKey::new("renames", List, Medium, "Renames as old:new pairs.")
                    .default_value(""),
            )
            .define(replace_null_with_default()),
        "SetSchemaMetadata" => def
            .define(ConfigKey::new(
                "schema.name",
                String,
                High,
                "Name given to the schema; set this or schema.version.",
            ))
            .define(ConfigKey::new(
                "schema.version",
                Int,
                High,
                "Version given to the schema; set this or schema.name.",
            ))
            .define(replace_null_with_default()),
        "TimestampConverter" => def
            .define(
                ConfigKey::new("field", String, High, "Field holding the timestamp; empty means the whole key or value.")
                    .default_value(""),
            )
            .define(
                ConfigKey::new("target.type", String, High, "What the timestamp becomes.")
                    .required()
                    .one_of(&["string", "unix", "Date", "Time", "Timestamp"]),
            )
            .define(
                ConfigKey::new("format", String, Medium, "SimpleDateFormat pattern (letters y M d H m s S Z X, in UTC) to read or write text; needed when target.type is string.")
                    .default_value(""),
            )
            .define(
                ConfigKey::new("unix.precision", String, Low, "Unit of a unix timestamp read or written.")
                    .default_value("milliseconds")
                    .one_of(&["nanoseconds", "microseconds", "milliseconds", "seconds"]),
            )
            .define(replace_null_with_default()),
        "TimestampRouter" => def
            .define(
                ConfigKey::new("topic.format", String, High, "The new topic; ${topic} and ${timestamp} are replaced.")
                    .default_value("${topic}-${timestamp}"),
            )
            .define(
                ConfigKey::new("timestamp.format", String, High, "SimpleDateFormat pattern of ${timestamp}, in UTC.")
                    .default_value("yyyyMMdd"),
            ),
        "ValueToKey" => def
            .define(
                ConfigKey::new("fields", List, High, "Value fields copied into the new key.")
                    .required(),
            )
            .define(replace_null_with_default()),
        _ => return None,
    })
}

/// The keys of a built-in predicate by its simple name.
fn predicate_def(simple: &str) -> Option<ConfigDef> {
    let def = ConfigDef::new();
    Some(match simple {
        "HasHeaderKey" => def.define(
            ConfigKey::new("name", ConfigType::String, Importance::Medium, "Header name a record must carry at least once.")
                .required()
                .validator(non_empty),
        ),
        "RecordIsTombstone" => def,
        "TopicNameMatches" => def.define(
            ConfigKey::new("pattern", ConfigType::String, Importance::Medium, "Regular expression the whole topic must match; look-around and back-references are refused.")
                .required()
                .validator(non_empty),
        ),
        _ => return None,
    })
}

fn replace_null_with_default() -> ConfigKey {
    ConfigKey::new(
        REPLACE_NULL_WITH_DEFAULT,
        ConfigType::Boolean,
        Importance::Medium,
        "Whether a null field that has a default in its schema is read as that default.",
    )
    .default_value("true")
}

fn insert_field(name: &str, what: &str) -> ConfigKey {
    ConfigKey::new(
        name,
        ConfigType::String,
        Importance::Medium,
        &format!(
            "Field to put {what} into; unset, none is added. A trailing ! makes it required, ? optional."
        ),
    )
}

fn non_empty(value: &str) -> Result<(), String> {
    if value.is_empty() {
        Err("value must not be empty".to_owned())
    } else {
        Ok(())
    }
}

fn field_syntax_v1(value: &str) -> Result<(), String> {
    match value.trim() {
        "V1" | "v1" => Ok(()),
        _ => Err("only V1 is supported (V2's nested field paths are not)".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BUILTIN_PREDICATES, BUILTIN_TRANSFORMS};

    #[test]
    fn every_built_in_transform_and_predicate_has_a_definition() {
        for class in BUILTIN_TRANSFORMS {
            assert!(builtin_transform_config_def(class).is_some(), "{class}");
            assert!(builtin_predicate_config_def(class).is_none(), "{class}");
        }
        for class in BUILTIN_PREDICATES {
            assert!(builtin_predicate_config_def(class).is_some(), "{class}");
            assert!(builtin_transform_config_def(class).is_none(), "{class}");
        }
    }

    #[test]
    fn names_that_are_not_built_in_have_no_definition() {
        for name in [
            "MaskField$Value",
            "org.apache.kafka.connect.transforms.MaskField",
            "org.apache.kafka.connect.transforms.MaskField$Other",
            "org.apache.kafka.connect.transforms.predicates.MaskField$Value",
            "com.example.Redact",
            "",
        ] {
            assert!(builtin_transform_config_def(name).is_none(), "{name}");
            assert!(builtin_predicate_config_def(name).is_none(), "{name}");
        }
    }

    #[test]
    fn key_and_value_variants_share_their_keys() {
        let names = |class: &str| -> Vec<std::string::String> {
            builtin_transform_config_def(class)
                .unwrap()
                .keys
                .into_iter()
                .map(|k| k.name)
                .collect()
        };
        for class in BUILTIN_TRANSFORMS.iter().filter(|c| c.ends_with("$Key")) {
            let value = class.replace("$Key", "$Value");
            assert_eq!(names(class), names(&value), "{class}");
        }
    }

    #[test]
    fn mask_field_lists_fields_required_and_replacement_optional() {
        let def =
            builtin_transform_config_def("org.apache.kafka.connect.transforms.MaskField$Value")
                .unwrap();
        let fields = def.key("fields").unwrap();
        assert!(fields.required && fields.ty == ConfigType::List);
        let replacement = def.key("replacement").unwrap();
        assert!(!replacement.required && replacement.default.is_none());
        assert_eq!(replacement.importance, Importance::Low);
    }

    #[test]
    fn only_field_syntax_v1_validates() {
        let def =
            builtin_transform_config_def("org.apache.kafka.connect.transforms.ExtractField$Key")
                .unwrap();
        let errors = |v: &str| {
            let config = [
                ("field".to_owned(), "id".to_owned()),
                ("field.syntax.version".to_owned(), v.to_owned()),
            ]
            .into_iter()
            .collect();
            def.validate(&config)
                .into_iter()
                .find(|c| c.name == "field.syntax.version")
                .unwrap()
                .errors
        };
        assert!(errors("V1").is_empty());
        assert!(errors("v1").is_empty());
        assert_eq!(errors("V2").len(), 1);
    }

    #[test]
    fn a_required_key_missing_is_reported_and_defaults_fill_the_rest() {
        let def = builtin_predicate_config_def(
            "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
        )
        .unwrap();
        assert!(def.has_errors(&Default::default()));
        let def =
            builtin_transform_config_def("org.apache.kafka.connect.transforms.TimestampRouter")
                .unwrap();
        assert!(!def.has_errors(&Default::default()));
    }
}
