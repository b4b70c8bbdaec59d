//! The transforms that work on a record's topic, headers or timestamps: Filter,
//! RegexRouter, TimestampRouter, DropHeaders, InsertHeader, TimestampConverter.

use std::collections::BTreeSet;

use wharf::sdk::data::{Data, HeaderValue, Logical, Schema, SchemaType, Value};
use wharf::sdk::{ConnectRecord, TransformError, Transformation};

use super::{KeyError, Keys, Side, field_value, map_get, map_put, name_set};
use crate::pipeline::convert::values::parse_string;
use crate::pipeline::timefmt::{DatePattern, MS_PER_DAY};

type Out = Result<Option<ConnectRecord>, TransformError>;

/// A Java regex as Rust's engine reads it, anchored for `Matcher.matches()`.
///
/// # Errors
/// A pattern the engine refuses (Java features such as look-around or back-references).
pub fn full_match_regex(pattern: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| format!("Invalid regex: {e}"))
}

/// Java's `Matcher.replaceFirst` replacement text (`$1`, `\$`) in Rust's syntax
/// (`${1}`, `$$`).
fn java_replacement(replacement: &str) -> String {
    let mut out = String::new();
    let mut chars = replacement.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(other) => out.push(other),
                None => {}
            },
            '$' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                if digits.is_empty() {
                    out.push_str("$$");
                } else {
                    out.push_str(&format!("${{{digits}}}"));
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// `Filter`: drops every record (used with a predicate).
pub struct Filter;

impl Transformation for Filter {
    fn apply(&mut self, _r: ConnectRecord) -> Out {
        Ok(None)
    }
}

/// `RegexRouter`: when `regex` matches the whole topic, the topic becomes `replacement`
/// (with `$1` group references).
pub struct RegexRouter {
    regex: regex::Regex,
    replacement: String,
}

impl RegexRouter {
    pub(super) fn new(c: &Keys<'_>) -> Result<Self, KeyError> {
        let regex = full_match_regex(c.required("regex")?).map_err(|e| ("regex".to_owned(), e))?;
        Ok(Self {
            regex,
            replacement: java_replacement(c.required("replacement")?),
        })
    }
}

impl Transformation for RegexRouter {
    fn apply(&mut self, mut r: ConnectRecord) -> Out {
        if self.regex.is_match(&r.topic) {
            r.topic = self
                .regex
                .replace(&r.topic, self.replacement.as_str())
                .into_owned();
        }
        Ok(Some(r))
    }
}

/// `TimestampRouter`: the topic becomes `topic.format` (`${topic}-${timestamp}`) with the
/// record's timestamp in `timestamp.format` (`yyyyMMdd`, UTC).
pub struct TimestampRouter {
    topic_format: String,
    pattern: DatePattern,
}

impl TimestampRouter {
    pub(super) fn new(c: &Keys<'_>) -> Result<Self, KeyError> {
        let pattern = DatePattern::parse(c.string("timestamp.format").unwrap_or("yyyyMMdd"))
            .map_err(|e| ("timestamp.format".to_owned(), e))?;
        Ok(Self {
            topic_format: c
                .string("topic.format")
                .unwrap_or("${topic}-${timestamp}")
                .to_owned(),
            pattern,
        })
    }
}

impl Transformation for TimestampRouter {
    fn apply(&mut self, mut r: ConnectRecord) -> Out {
        let Some(ts) = r.timestamp_ms else {
            return Err(TransformError::new(format!(
                "Timestamp missing on record: topic {}",
                r.topic
            )));
        };
        let stamped = self.topic_format.replace("${topic}", &r.topic);
        r.topic = stamped.replace("${timestamp}", &self.pattern.format(ts));
        Ok(Some(r))
    }
}

/// `DropHeaders`: removes every header named in `headers`.
pub struct DropHeaders {
    names: BTreeSet<String>,
}

impl DropHeaders {
    pub(super) fn new(c: &Keys<'_>) -> Result<Self, KeyError> {
        Ok(Self {
            names: name_set(c.non_empty_list("headers")?),
        })
    }
}

impl Transformation for DropHeaders {
    fn apply(&mut self, mut r: ConnectRecord) -> Out {
        r.headers.retain(|(k, _)| !self.names.contains(k));
        Ok(Some(r))
    }
}

/// `InsertHeader`: adds header `header` with `value.literal`, its type inferred as
/// Connect's `Values.parseString` does.
pub struct InsertHeader {
    name: String,
    value: Data,
}

impl InsertHeader {
    pub(super) fn new(c: &Keys<'_>) -> Result<Self, KeyError> {
        Ok(Self {
            name: c.required("header")?.to_owned(),
            value: parse_string(c.required("value.literal")?),
        })
    }
}

impl Transformation for InsertHeader {
    fn apply(&mut self, mut r: ConnectRecord) -> Out {
        r.headers
            .push((self.name.clone(), HeaderValue::Data(self.value.clone())));
        Ok(Some(r))
    }
}

/// The kinds of time `TimestampConverter` converts between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TimeKind {
    String,
    Unix,
    Date,
    Time,
    Timestamp,
}

/// `unix.precision`: the unit of a Unix time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Precision {
    Seconds,
    Milliseconds,
    Microseconds,
    Nanoseconds,
}

/// `TimestampConverter$Key` / `$Value`: converts the whole key or value (`field`
/// empty) or one field between `string` (per `format`), `unix` (per `unix.precision`),
/// `Date`, `Time` and `Timestamp`; `target.type` says which. In UTC.
pub struct TimestampConverter {
    side: Side,
    field: String,
    target: TimeKind,
    pattern: Option<DatePattern>,
    precision: Precision,
    replace_null_with_default: bool,
}

impl TimestampConverter {
    pub(super) fn new(side: Side, c: &Keys<'_>) -> Result<Self, KeyError> {
        let target = match c.required("target.type")? {
            "string" => TimeKind::String,
            "unix" => TimeKind::Unix,
            "Date" => TimeKind::Date,
            "Time" => TimeKind::Time,
            "Timestamp" => TimeKind::Timestamp,
            _ => {
                return Err((
                    "target.type".into(),
                    "String must be one of: string, unix, Date, Time, Timestamp".into(),
                ));
            }
        };
        let pattern = match c.string("format").filter(|f| !f.trim().is_empty()) {
            Some(f) => Some(DatePattern::parse(f).map_err(|e| ("format".to_owned(), e))?),
            None => None,
        };
        if target == TimeKind::String && pattern.is_none() {
            return Err((
                "format".into(),
                "TimestampConverter requires format option to be specified when using string timestamps".into(),
            ));
        }
        let precision = match c.string("unix.precision").unwrap_or("milliseconds") {
            "seconds" => Precision::Seconds,
            "milliseconds" => Precision::Milliseconds,
            "microseconds" => Precision::Microseconds,
            "nanoseconds" => Precision::Nanoseconds,
            _ => {
                return Err((
                    "unix.precision".into(),
                    "String must be one of: nanoseconds, microseconds, milliseconds, seconds"
                        .into(),
                ));
            }
        };
        Ok(Self {
            side,
            field: c.string("field").unwrap_or("").to_owned(),
            target,
            pattern,
            precision,
            replace_null_with_default: c.boolean("replace.null.with.default", true)?,
        })
    }

    /// The kind of `value` of `schema` (inferred from the value without a schema).
    fn kind_of(schema: Option<&Schema>, value: &Value) -> Result<TimeKind, TransformError> {
        let unsupported = || {
            TransformError::new(format!(
                "TimestampConverter does not support {} objects as timestamps",
                value.java_class()
            ))
        };
        match schema {
            Some(s) => match (s.logical(), s.kind) {
                (Some(Logical::Timestamp), _) => Ok(TimeKind::Timestamp),
                (Some(Logical::Date), _) => Ok(TimeKind::Date),
                (Some(Logical::Time), _) => Ok(TimeKind::Time),
                (_, SchemaType::String) => Ok(TimeKind::String),
                (_, SchemaType::Int64) => Ok(TimeKind::Unix),
                _ => Err(TransformError::new(format!(
                    "Schema {} does not correspond to a known timestamp type format",
                    s.kind.connect_name()
                ))),
            },
            None => match value {
                Value::Timestamp(_) | Value::Date(_) | Value::Time(_) => Ok(TimeKind::Timestamp),
                Value::Int64(_) => Ok(TimeKind::Unix),
                Value::String(_) => Ok(TimeKind::String),
                _ => Err(unsupported()),
            },
        }
    }

    fn to_ms(&self, kind: TimeKind, v: &Value) -> Result<i64, TransformError> {
        let wrong = || {
            TransformError::new(format!(
                "Expected a timestamp value but found {}",
                v.java_class()
            ))
        };
        Ok(match (kind, v) {
            (_, Value::Timestamp(t)) => *t,
            (_, Value::Date(d)) => i64::from(*d) * MS_PER_DAY,
            (_, Value::Time(t)) => i64::from(*t),
            (TimeKind::Unix, Value::Int64(n)) => match self.precision {
                Precision::Seconds => n.saturating_mul(1000),
                Precision::Milliseconds => *n,
                Precision::Microseconds => n / 1000,
                Precision::Nanoseconds => n / 1_000_000,
            },
            (TimeKind::String, Value::String(s)) => {
                let p = self.pattern.as_ref().ok_or_else(|| {
                    TransformError::new("TimestampConverter requires format option to be specified when using string timestamps")
                })?;
                p.parse_text(s).map_err(TransformError::new)?
            }
            _ => return Err(wrong()),
        })
    }

    fn target_value(&self, ms: i64) -> (SchemaType, Option<&'static str>, Value) {
        match self.target {
            TimeKind::Timestamp => (SchemaType::Int64, Some("ts"), Value::Timestamp(ms)),
            TimeKind::Date => (
                SchemaType::Int32,
                Some("date"),
                Value::Date(ms.div_euclid(MS_PER_DAY) as i32),
            ),
            TimeKind::Time => (
                SchemaType::Int32,
                Some("time"),
                Value::Time(ms.rem_euclid(MS_PER_DAY) as i32),
            ),
            TimeKind::Unix => (
                SchemaType::Int64,
                None,
                Value::Int64(match self.precision {
                    Precision::Seconds => ms.div_euclid(1000),
                    Precision::Milliseconds => ms,
                    Precision::Microseconds => ms.saturating_mul(1000),
                    Precision::Nanoseconds => ms.saturating_mul(1_000_000),
                }),
            ),
            TimeKind::String => (
                SchemaType::String,
                None,
                Value::String(
                    self.pattern
                        .as_ref()
                        .map_or_else(String::new, |p| p.format(ms)),
                ),
            ),
        }
    }

    fn target_schema(&self, optional: bool) -> Schema {
        let s = match self.target {
            TimeKind::Timestamp => Schema::timestamp(),
            TimeKind::Date => Schema::date(),
            TimeKind::Time => Schema::time(),
            TimeKind::Unix => Schema::new(SchemaType::Int64),
            TimeKind::String => Schema::new(SchemaType::String),
        };
        if optional { s.optional() } else { s }
    }

    fn convert(&self, schema: Option<&Schema>, v: &Value) -> Result<Value, TransformError> {
        if v.is_null() {
            return Ok(Value::Null);
        }
        let kind = Self::kind_of(schema, v)?;
        let ms = self.to_ms(kind, v)?;
        Ok(self.target_value(ms).2)
    }
}

impl Transformation for TimestampConverter {
    fn apply(&mut self, mut r: ConnectRecord) -> Out {
        let data = self.side.take(&mut r);
        let out = if self.field.is_empty() {
            let v = self.convert(data.schema.as_ref(), &data.value)?;
            match &data.schema {
                None => Data::schemaless(match (self.target, v) {
                    // Schemaless Date, Time and Timestamp are all java.util.Date.
                    (TimeKind::Date | TimeKind::Time, Value::Date(d)) => {
                        Value::Timestamp(i64::from(d) * MS_PER_DAY)
                    }
                    (TimeKind::Date | TimeKind::Time, Value::Time(t)) => {
                        Value::Timestamp(i64::from(t))
                    }
                    (_, v) => v,
                }),
                Some(s) => Data::new(self.target_schema(s.optional), v),
            }
        } else {
            match &data.schema {
                None => {
                    let map = super::require_map(&data.value, "converting timestamp formats")?;
                    let mut updated = map.clone();
                    let v = self.convert(None, &map_get(map, &self.field))?;
                    map_put(&mut updated, &self.field, v);
                    Data::schemaless(Value::Map(updated))
                }
                Some(schema) => {
                    let values =
                        super::require_struct(&data.value, "converting timestamp formats")?;
                    let mut ns = schema.struct_basics();
                    let mut updated = Vec::new();
                    for f in &schema.fields {
                        let v =
                            field_value(values, schema, &f.name, self.replace_null_with_default);
                        if f.name == self.field {
                            ns.fields.push(wharf::sdk::data::Field {
                                name: f.name.clone(),
                                schema: self.target_schema(f.schema.optional),
                            });
                            updated.push((f.name.clone(), self.convert(Some(&f.schema), &v)?));
                        } else {
                            ns.fields.push(f.clone());
                            updated.push((f.name.clone(), v));
                        }
                    }
                    Data::new(ns, Value::Struct(updated))
                }
            }
        };
        self.side.set(&mut r, out);
        Ok(Some(r))
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::{build_transform, builtin_transform_name};
    use super::*;

    fn apply(name: &str, cfg: &[(&str, &str)], r: ConnectRecord) -> Out {
        build_transform(builtin_transform_name(name).unwrap(), &config(cfg))
            .unwrap()
            .apply(r)
    }

    #[test]
    fn filter_drops_every_record() {
        assert_eq!(
            apply("Filter", &[], record(Data::NULL, Data::NULL)).unwrap(),
            None
        );
    }

    #[test]
    fn regex_router_rewrites_a_whole_match_with_group_references() {
        let out = apply(
            "RegexRouter",
            &[("regex", "(.*)ers"), ("replacement", "$1-v2")],
            record(Data::NULL, Data::NULL),
        )
        .unwrap()
        .unwrap();
        assert_eq!(out.topic, "ord-v2");
        let out = apply(
            "RegexRouter",
            &[("regex", "ord"), ("replacement", "x")],
            record(Data::NULL, Data::NULL),
        )
        .unwrap()
        .unwrap();
        assert_eq!(out.topic, "orders", "a partial match leaves the topic");
        assert!(
            build_transform(
                "RegexRouter",
                &config(&[("regex", "("), ("replacement", "x")])
            )
            .is_err()
        );
    }

    #[test]
    fn timestamp_router_stamps_the_topic_and_needs_a_timestamp() {
        let out = apply("TimestampRouter", &[], record(Data::NULL, Data::NULL))
            .unwrap()
            .unwrap();
        assert_eq!(out.topic, "orders-20240101");
        let mut r = record(Data::NULL, Data::NULL);
        r.timestamp_ms = None;
        assert!(
            apply("TimestampRouter", &[], r)
                .unwrap_err()
                .message
                .starts_with("Timestamp missing on record")
        );
    }

    #[test]
    fn drop_headers_removes_every_header_of_the_names() {
        let mut r = record(Data::NULL, Data::NULL);
        r.headers = vec![
            ("a".into(), HeaderValue::Bytes(b"1".to_vec())),
            ("b".into(), HeaderValue::Bytes(b"2".to_vec())),
            ("a".into(), HeaderValue::Bytes(b"3".to_vec())),
        ];
        let out = apply("DropHeaders", &[("headers", "a")], r)
            .unwrap()
            .unwrap();
        assert_eq!(
            out.headers,
            vec![("b".into(), HeaderValue::Bytes(b"2".to_vec()))]
        );
    }

    #[test]
    fn insert_header_adds_the_literal_with_its_inferred_type() {
        let out = apply(
            "InsertHeader",
            &[("header", "v"), ("value.literal", "42")],
            record(Data::NULL, Data::NULL),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            out.headers,
            vec![(
                "v".into(),
                HeaderValue::Data(Data::new(Schema::new(SchemaType::Int8), Value::Int8(42)))
            )]
        );
    }

    #[test]
    fn timestamp_converter_turns_a_unix_field_into_a_string_and_back() {
        let r = record(
            Data::NULL,
            Data::schemaless(map(&[("ts", Value::Int64(1_704_067_200_000))])),
        );
        let out = apply(
            "TimestampConverter$Value",
            &[
                ("field", "ts"),
                ("target.type", "string"),
                ("format", "yyyy-MM-dd"),
            ],
            r,
        )
        .unwrap()
        .unwrap();
        assert_eq!(out.value.value.get("ts"), Some(&s("2024-01-01")));
        let out = apply(
            "TimestampConverter$Value",
            &[
                ("field", "ts"),
                ("target.type", "unix"),
                ("format", "yyyy-MM-dd"),
                ("unix.precision", "seconds"),
            ],
            out,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            out.value.value.get("ts"),
            Some(&Value::Int64(1_704_067_200))
        );
    }

    #[test]
    fn timestamp_converter_gives_a_timestamp_schema_to_a_whole_value() {
        let r = record(
            Data::NULL,
            Data::new(Schema::new(SchemaType::Int64), Value::Int64(5)),
        );
        let out = apply(
            "TimestampConverter$Value",
            &[("target.type", "Timestamp")],
            r,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            out.value,
            Data::new(Schema::timestamp(), Value::Timestamp(5))
        );
        let e = build_transform(
            "TimestampConverter$Value",
            &config(&[("target.type", "string")]),
        )
        .err()
        .unwrap();
        assert_eq!(e.0, "format");
        let e = build_transform(
            "TimestampConverter$Value",
            &config(&[("target.type", "week")]),
        )
        .err()
        .unwrap();
        assert_eq!(e.0, "target.type");
    }
}
