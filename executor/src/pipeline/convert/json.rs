//! `org.apache.kafka.connect.json.JsonConverter` (Apache Kafka 3.9): Connect data to JSON
//! bytes and back, with the schema envelope (`{"schema":...,"payload":...}`,
//! `schemas.enable=true`, the default) or without it. The bytes written are the ones
//! Connect's converter writes for the same data and settings: fields in schema order,
//! the envelope's schema keys in Connect's order, numbers as Java prints them
//! (`1.0E7`), bytes as base64, strings escaped as Jackson escapes them.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use wharf::sdk::data::{Data, Decimal, Field, Logical, Schema, SchemaType, Value};

/// How a Decimal is written: base64 of its unscaled bytes (the default) or a number
/// (`decimal.format`, KIP-481).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecimalFormat {
    /// Base64 text of the unscaled two's complement bytes.
    Base64,
    /// A JSON number.
    Numeric,
}

/// The settings of one `JsonConverter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonSettings {
    /// `schemas.enable` (default true): write and expect the schema envelope.
    pub schemas_enable: bool,
    /// `decimal.format` (default BASE64).
    pub decimal_format: DecimalFormat,
    /// `replace.null.with.default` (default true): a null with a default is written as
    /// the default.
    pub replace_null_with_default: bool,
}

impl Default for JsonSettings {
    fn default() -> Self {
        Self {
            schemas_enable: true,
            decimal_format: DecimalFormat::Base64,
            replace_null_with_default: true,
        }
    }
}

/// Writes `data` as JSON bytes; `None` for a null without a schema (a tombstone).
///
/// # Errors
/// Connect's `DataException` texts: a required value that is null, a value that does
/// not fit its schema.
pub fn from_connect(settings: &JsonSettings, data: &Data) -> Result<Option<Vec<u8>>, String> {
    if data.schema.is_none() && data.value.is_null() {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(64);
    if settings.schemas_enable {
        out.extend_from_slice(b"{\"schema\":");
        match &data.schema {
            Some(s) => write_schema(&mut out, s, settings)?,
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"payload\":");
        write_value(&mut out, data.schema.as_ref(), &data.value, settings)?;
        out.push(b'}');
    } else {
        write_value(&mut out, data.schema.as_ref(), &data.value, settings)?;
    }
    Ok(Some(out))
}

/// Reads JSON bytes into Connect data; `None` bytes are `Data::NULL`.
///
/// # Errors
/// Connect's `DataException` texts: bytes that are not JSON, an envelope missing with
/// `schemas.enable`, a payload that does not fit its schema.
pub fn to_connect(settings: &JsonSettings, bytes: Option<&[u8]>) -> Result<Data, String> {
    read(settings, bytes, Envelope::Required)
}

/// Reads the JSON bytes a source plugin gave: as [`to_connect`], except that with
/// `schemas.enable` JSON that is not an envelope is the plugin's schemaless value (what
/// a Connect source gives as a value without a schema), so that it is written back in
/// the envelope with `"schema":null` as Connect's converter writes such a value.
///
/// # Errors
/// As [`to_connect`], but for a missing envelope.
pub fn source_to_connect(settings: &JsonSettings, bytes: Option<&[u8]>) -> Result<Data, String> {
    read(settings, bytes, Envelope::IfPresent)
}

/// Whether reading with `schemas.enable` requires the envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Envelope {
    /// Connect's rule for bytes from the log: an error without it.
    Required,
    /// A source plugin's bytes: without it, a schemaless value.
    IfPresent,
}

fn read(settings: &JsonSettings, bytes: Option<&[u8]>, envelope: Envelope) -> Result<Data, String> {
    let Some(bytes) = bytes else {
        return Ok(Data::NULL);
    };
    if !settings.schemas_enable {
        // Straight into Connect's value: no `serde_json::Value` tree to build and copy.
        return serde_json::from_slice::<Schemaless>(bytes)
            .map(|s| Data::schemaless(s.0))
            .map_err(|e| {
                format!(
                    "Converting byte[] to Kafka Connect data failed due to serialization error: {e}"
                )
            });
    }
    let json: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        format!("Converting byte[] to Kafka Connect data failed due to serialization error: {e}")
    })?;
    if settings.schemas_enable {
        let envelope = match (&json, envelope) {
            (serde_json::Value::Object(o), _)
                if o.len() == 2 && o.contains_key("schema") && o.contains_key("payload") =>
            {
                o
            }
            (_, Envelope::IfPresent) => return Ok(Data::schemaless(read_value(None, &json)?)),
            (_, Envelope::Required) => {
                return Err("JsonConverter with schemas.enable requires \"schema\" and \"payload\" fields and may not contain additional fields. If you are trying to deserialize plain JSON data, set schemas.enable=false in your converter configuration.".into());
            }
        };
        let schema = match &envelope["schema"] {
            serde_json::Value::Null => None,
            s => Some(read_schema(s)?),
        };
        let value = read_value(schema.as_ref(), &envelope["payload"])?;
        Ok(Data { schema, value })
    } else {
        Ok(Data::schemaless(read_value(None, &json)?))
    }
}

/// A schemaless value read straight from JSON text: what `read_value(None, ..)` gives
/// for the `serde_json::Value` of the same text (objects as maps with their keys sorted,
/// a repeated key's last value kept; integers as INT64, other numbers as FLOAT64).
struct Schemaless(Value);

impl<'de> serde::Deserialize<'de> for Schemaless {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SchemalessVisitor).map(Schemaless)
    }
}

struct SchemalessVisitor;

impl<'de> serde::de::Visitor<'de> for SchemalessVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Boolean(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Int64(n))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        // As `Number::as_i64`, then `as_f64`.
        Ok(i64::try_from(n).map_or(Value::Float64(n as f64), Value::Int64))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(Value::Float64(n))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(Schemaless(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        // One vector, sorted and deduplicated in place: the order and the values of a
        // `BTreeMap` of the keys, without its nodes.
        let mut entries = Vec::new();
        while let Some((k, Schemaless(v))) = map.next_entry::<String, Schemaless>()? {
            entries.push((Value::String(k), v));
        }
        Ok(Value::Map(sorted_last_wins(entries)))
    }
}

/// Entries with string keys sorted by key (byte order, as `String`'s `Ord`), a repeated
/// key keeping its last value in the place of its first: a `BTreeMap`'s `insert` order.
fn sorted_last_wins(mut entries: Vec<(Value, Value)>) -> Vec<(Value, Value)> {
    fn key(e: &(Value, Value)) -> &str {
        e.0.as_str().unwrap_or_default()
    }
    if entries.windows(2).all(|w| key(&w[0]) < key(&w[1])) {
        return entries;
    }
    // Stable: of equal keys the last one read stays the last one.
    entries.sort_by(|a, b| key(a).cmp(key(b)));
    entries.dedup_by(|later, kept| {
        let same = key(later) == key(kept);
        if same {
            std::mem::swap(&mut later.1, &mut kept.1);
        }
        same
    });
    entries
}

fn write_schema(out: &mut Vec<u8>, schema: &Schema, settings: &JsonSettings) -> Result<(), String> {
    write_schema_with_field(out, schema, None, settings)
}

/// A schema in Connect's envelope order: type, items | keys, values | fields, optional,
/// name, version, doc, parameters, default, then (for a struct's field) `field`.
fn write_schema_with_field(
    out: &mut Vec<u8>,
    schema: &Schema,
    field: Option<&str>,
    settings: &JsonSettings,
) -> Result<(), String> {
    out.extend_from_slice(b"{\"type\":");
    write_str(out, schema.kind.json_name());
    match schema.kind {
        SchemaType::Array => {
            out.extend_from_slice(b",\"items\":");
            let items = schema
                .value_schema
                .as_deref()
                .ok_or("Array schema did not specify the element type")?;
            write_schema(out, items, settings)?;
        }
        SchemaType::Map => {
            out.extend_from_slice(b",\"keys\":");
            write_schema(
                out,
                schema
                    .key_schema
                    .as_deref()
                    .ok_or("Map schema did not specify the key type")?,
                settings,
            )?;
            out.extend_from_slice(b",\"values\":");
            write_schema(
                out,
                schema
                    .value_schema
                    .as_deref()
                    .ok_or("Map schema did not specify the value type")?,
                settings,
            )?;
        }
        SchemaType::Struct => {
            out.extend_from_slice(b",\"fields\":[");
            for (i, f) in schema.fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_schema_with_field(out, &f.schema, Some(&f.name), settings)?;
            }
            out.push(b']');
        }
        _ => {}
    }
    out.extend_from_slice(b",\"optional\":");
    out.extend_from_slice(if schema.optional { b"true" } else { b"false" });
    if let Some(name) = &schema.name {
        out.extend_from_slice(b",\"name\":");
        write_str(out, name);
    }
    if let Some(v) = schema.version {
        out.extend_from_slice(b",\"version\":");
        out.extend_from_slice(v.to_string().as_bytes());
    }
    if let Some(doc) = &schema.doc {
        out.extend_from_slice(b",\"doc\":");
        write_str(out, doc);
    }
    if !schema.parameters.is_empty() {
        out.extend_from_slice(b",\"parameters\":{");
        for (i, (k, v)) in schema.parameters.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_str(out, k);
            out.push(b':');
            write_str(out, v);
        }
        out.push(b'}');
    }
    if let Some(default) = &schema.default {
        out.extend_from_slice(b",\"default\":");
        write_value(out, Some(schema), default, settings)?;
    }
    if let Some(name) = field {
        out.extend_from_slice(b",\"field\":");
        write_str(out, name);
    }
    out.push(b'}');
    Ok(())
}

/// One value as `JsonConverter.convertToJson` writes it.
pub fn write_value(
    out: &mut Vec<u8>,
    schema: Option<&Schema>,
    value: &Value,
    settings: &JsonSettings,
) -> Result<(), String> {
    if value.is_null() {
        match schema {
            None => {
                out.extend_from_slice(b"null");
                return Ok(());
            }
            Some(s) => {
                if let Some(d) = s
                    .default
                    .as_deref()
                    .filter(|_| settings.replace_null_with_default)
                {
                    return write_value(out, Some(s), d, settings);
                }
                if s.optional {
                    out.extend_from_slice(b"null");
                    return Ok(());
                }
                return Err(
                    "Conversion error: null value for field that is required and has no default value"
                        .into(),
                );
            }
        }
    }
    if let Some(logical) = schema.and_then(Schema::logical) {
        return write_logical(out, logical, value, settings);
    }
    let kind = match schema {
        Some(s) => s.kind,
        None => value.inferred_type().ok_or("null")?,
    };
    let mismatch = || {
        format!(
            "Invalid type for {}: class {}",
            schema.map_or("unknown schema", |s| s.kind.connect_name()),
            value.java_class()
        )
    };
    match (kind, value) {
        (SchemaType::Int8, Value::Int8(n)) => write_int(out, i64::from(*n)),
        (SchemaType::Int16, Value::Int16(n)) => write_int(out, i64::from(*n)),
        (SchemaType::Int32, Value::Int32(n)) => write_int(out, i64::from(*n)),
        (SchemaType::Int64, Value::Int64(n)) => write_int(out, *n),
        (SchemaType::Float32, Value::Float32(f)) => write_f32(out, *f),
        (SchemaType::Float64, Value::Float64(f)) => write_f64(out, *f),
        (SchemaType::Boolean, Value::Boolean(b)) => {
            out.extend_from_slice(if *b { b"true" } else { b"false" });
        }
        (SchemaType::String, Value::String(s)) => write_str(out, s),
        (SchemaType::Bytes, Value::Bytes(b)) => write_str(out, &BASE64.encode(b)),
        (SchemaType::Array, Value::Array(items)) => {
            let element = schema.and_then(|s| s.value_schema.as_deref());
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, element, item, settings)?;
            }
            out.push(b']');
        }
        (SchemaType::Map, Value::Map(entries)) => {
            let (ks, vs) = match schema {
                Some(s) => (s.key_schema.as_deref(), s.value_schema.as_deref()),
                None => (None, None),
            };
            let object_mode = match ks {
                Some(k) => k.kind == SchemaType::String,
                None => entries.iter().all(|(k, _)| matches!(k, Value::String(_))),
            };
            if object_mode {
                out.push(b'{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    match k {
                        Value::String(s) => write_str(out, s),
                        other => {
                            let mut text = Vec::new();
                            write_value(&mut text, ks, other, settings)?;
                            write_str(out, &String::from_utf8_lossy(&text));
                        }
                    }
                    out.push(b':');
                    write_value(out, vs, v, settings)?;
                }
                out.push(b'}');
            } else {
                out.push(b'[');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.push(b'[');
                    write_value(out, ks, k, settings)?;
                    out.push(b',');
                    write_value(out, vs, v, settings)?;
                    out.push(b']');
                }
                out.push(b']');
            }
        }
        (SchemaType::Struct, Value::Struct(values)) => {
            let Some(s) = schema else {
                return Err(format!(
                    "Java class {} does not have corresponding schema type.",
                    value.java_class()
                ));
            };
            out.push(b'{');
            for (i, f) in s.fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, &f.name);
                out.push(b':');
                let v = values
                    .iter()
                    .find(|(n, _)| *n == f.name)
                    .map_or(&Value::Null, |(_, v)| v);
                write_value(out, Some(&f.schema), v, settings)?;
            }
            out.push(b'}');
        }
        _ => return Err(mismatch()),
    }
    Ok(())
}

fn write_logical(
    out: &mut Vec<u8>,
    logical: Logical,
    value: &Value,
    settings: &JsonSettings,
) -> Result<(), String> {
    match (logical, value) {
        (Logical::Decimal(_), Value::Decimal(d)) => match settings.decimal_format {
            DecimalFormat::Base64 => write_str(out, &BASE64.encode(&d.unscaled)),
            DecimalFormat::Numeric => out.extend_from_slice(d.to_string().as_bytes()),
        },
        (Logical::Date, Value::Date(n) | Value::Int32(n))
        | (Logical::Time, Value::Time(n) | Value::Int32(n)) => {
            out.extend_from_slice(n.to_string().as_bytes());
        }
        (Logical::Timestamp, Value::Timestamp(n) | Value::Int64(n)) => {
            out.extend_from_slice(n.to_string().as_bytes());
        }
        (Logical::Decimal(_), v) => {
            return Err(format!(
                "Invalid type for Decimal, expected BigDecimal but was class {}",
                v.java_class()
            ));
        }
        (Logical::Date, v) => {
            return Err(format!(
                "Invalid type for Date, expected Date but was class {}",
                v.java_class()
            ));
        }
        (Logical::Time, v) => {
            return Err(format!(
                "Invalid type for Time, expected Date but was class {}",
                v.java_class()
            ));
        }
        (Logical::Timestamp, v) => {
            return Err(format!(
                "Invalid type for Timestamp, expected Date but was class {}",
                v.java_class()
            ));
        }
    }
    Ok(())
}

/// An integer's decimal digits, written without an intermediate `String` or the
/// formatting machinery.
fn write_int(out: &mut Vec<u8>, n: i64) {
    // Digits from the last; 20 bytes hold `i64::MIN`'s sign and 19 digits.
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut rest = n.unsigned_abs();
    loop {
        i -= 1;
        // `rest % 10` is below 10: the cast keeps it.
        buf[i] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if n < 0 {
        i -= 1;
        buf[i] = b'-';
    }
    out.extend_from_slice(&buf[i..]);
}

/// A JSON string as Jackson writes it: `"` and `\` escaped, the control characters as
/// `\b \t \n \f \r` or `\u00XX` (upper-case hex), everything else as is.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            0x08 => Some(b"\\b"),
            0x09 => Some(b"\\t"),
            0x0a => Some(b"\\n"),
            0x0c => Some(b"\\f"),
            0x0d => Some(b"\\r"),
            0..=0x1f => None,
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        match escape {
            Some(e) => out.extend_from_slice(e),
            None => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]),
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// A double as Java's `Double.toString` prints it (Jackson writes doubles so): the
/// shortest digits that read back the same, plain between 10^-3 and 10^7 (`100.0`),
/// scientific outside (`1.0E7`, `1.5E-4`); non-finite values as quoted text.
pub fn write_f64(out: &mut Vec<u8>, f: f64) {
    if !f.is_finite() {
        write_str(out, &java_non_finite(f.is_nan(), f > 0.0));
        return;
    }
    out.extend_from_slice(
        java_float_text(&format!("{f:e}"), f == 0.0, f.is_sign_negative(), f.abs()).as_bytes(),
    );
}

/// A float as Java's `Float.toString` prints it (see [`write_f64`]).
pub fn write_f32(out: &mut Vec<u8>, f: f32) {
    if !f.is_finite() {
        write_str(out, &java_non_finite(f.is_nan(), f > 0.0));
        return;
    }
    out.extend_from_slice(
        java_float_text(
            &format!("{f:e}"),
            f == 0.0,
            f.is_sign_negative(),
            f64::from(f.abs()),
        )
        .as_bytes(),
    );
}

fn java_non_finite(nan: bool, positive: bool) -> String {
    match (nan, positive) {
        (true, _) => "NaN".into(),
        (false, true) => "Infinity".into(),
        (false, false) => "-Infinity".into(),
    }
}

/// Java's float text from Rust's shortest scientific form (`1.5e7`).
fn java_float_text(sci: &str, zero: bool, negative: bool, abs: f64) -> String {
    let sign = if negative { "-" } else { "" };
    if zero {
        return format!("{sign}0.0");
    }
    let sci = sci.trim_start_matches('-');
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if (1e-3..1e7).contains(&abs) {
        // Plain: the point after exp+1 digits.
        let point = exp + 1;
        if point <= 0 {
            let zeros = "0".repeat(usize::try_from(-point).unwrap_or(0));
            return format!("{sign}0.{zeros}{digits}");
        }
        let point = usize::try_from(point).unwrap_or(0);
        if digits.len() <= point {
            let zeros = "0".repeat(point - digits.len());
            format!("{sign}{digits}{zeros}.0")
        } else {
            format!("{sign}{}.{}", &digits[..point], &digits[point..])
        }
    } else {
        let (first, rest) = digits.split_at(1);
        let rest = if rest.is_empty() { "0" } else { rest };
        format!("{sign}{first}.{rest}E{exp}")
    }
}

/// Reads an envelope's schema (`JsonConverter.asConnectSchema`).
fn read_schema(json: &serde_json::Value) -> Result<Schema, String> {
    let o = json.as_object().ok_or("Schema must be an object")?;
    let kind_name = o
        .get("type")
        .and_then(serde_json::Value::as_str)
        .ok_or("Schema must contain 'type' field")?;
    let kind = SchemaType::from_json_name(kind_name)
        .ok_or_else(|| format!("Unknown schema type: {kind_name}"))?;
    let mut schema = Schema::new(kind);
    match kind {
        SchemaType::Array => {
            let items = o
                .get("items")
                .filter(|v| !v.is_null())
                .ok_or("Array schema did not specify the element type")?;
            schema.value_schema = Some(Box::new(read_schema(items)?));
        }
        SchemaType::Map => {
            let keys = o
                .get("keys")
                .filter(|v| !v.is_null())
                .ok_or("Map schema did not specify the key type")?;
            let values = o
                .get("values")
                .filter(|v| !v.is_null())
                .ok_or("Map schema did not specify the value type")?;
            schema.key_schema = Some(Box::new(read_schema(keys)?));
            schema.value_schema = Some(Box::new(read_schema(values)?));
        }
        SchemaType::Struct => {
            let fields = o
                .get("fields")
                .and_then(serde_json::Value::as_array)
                .ok_or("Struct schema's \"fields\" argument is not an array.")?;
            for f in fields {
                let name = f
                    .get("field")
                    .and_then(serde_json::Value::as_str)
                    .ok_or("Struct schema's field name not specified properly")?;
                schema.fields.push(Field {
                    name: name.to_owned(),
                    schema: read_schema(f)?,
                });
            }
        }
        _ => {}
    }
    schema.optional = o
        .get("optional")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    schema.name = o
        .get("name")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned);
    schema.version = o
        .get("version")
        .and_then(serde_json::Value::as_i64)
        .and_then(|v| i32::try_from(v).ok());
    schema.doc = o
        .get("doc")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned);
    if let Some(params) = o.get("parameters").filter(|p| !p.is_null()) {
        let params = params
            .as_object()
            .ok_or("Schema parameters must be an object")?;
        for (k, v) in params {
            let v = v
                .as_str()
                .ok_or("Schema parameters must have string values.")?;
            schema.parameters.push((k.clone(), v.to_owned()));
        }
    }
    if let Some(default) = o.get("default").filter(|d| !d.is_null()) {
        let value = read_value(Some(&schema), default)?;
        schema.default = Some(Box::new(value));
    }
    Ok(schema)
}

/// Reads one JSON value under `schema` (`JsonConverter.convertToConnect`).
pub fn read_value(schema: Option<&Schema>, json: &serde_json::Value) -> Result<Value, String> {
    use serde_json::Value as J;
    let Some(schema) = schema else {
        return Ok(match json {
            J::Null => Value::Null,
            J::Bool(b) => Value::Boolean(*b),
            J::Number(n) => match n.as_i64() {
                Some(i) => Value::Int64(i),
                None => Value::Float64(n.as_f64().unwrap_or(f64::NAN)),
            },
            J::String(s) => Value::String(s.clone()),
            J::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|i| read_value(None, i))
                    .collect::<Result<_, _>>()?,
            ),
            J::Object(o) => Value::Map(
                o.iter()
                    .map(|(k, v)| Ok((Value::String(k.clone()), read_value(None, v)?)))
                    .collect::<Result<_, String>>()?,
            ),
        });
    };
    if json.is_null() {
        if let Some(d) = &schema.default {
            return Ok((**d).clone());
        }
        if schema.optional {
            return Ok(Value::Null);
        }
        return Err(format!(
            "Invalid null value for required {} field",
            schema.kind.connect_name()
        ));
    }
    if let Some(logical) = schema.logical() {
        return read_logical(logical, json);
    }
    let wrong = || {
        format!(
            "Invalid value for {} field: found JSON {}",
            schema.kind.connect_name(),
            json_kind(json)
        )
    };
    let int = || json.as_i64().ok_or_else(wrong);
    Ok(match schema.kind {
        // Java's narrowing casts, as Connect's `(byte) value.intValue()`.
        SchemaType::Int8 => Value::Int8(int()? as i8),
        SchemaType::Int16 => Value::Int16(int()? as i16),
        SchemaType::Int32 => Value::Int32(int()? as i32),
        SchemaType::Int64 => Value::Int64(int()?),
        SchemaType::Float32 => Value::Float32(json.as_f64().ok_or_else(wrong)? as f32),
        SchemaType::Float64 => Value::Float64(json.as_f64().ok_or_else(wrong)?),
        SchemaType::Boolean => Value::Boolean(json.as_bool().ok_or_else(wrong)?),
        SchemaType::String => Value::String(json.as_str().ok_or_else(wrong)?.to_owned()),
        SchemaType::Bytes => Value::Bytes(
            BASE64
                .decode(json.as_str().ok_or_else(wrong)?)
                .map_err(|_| "Invalid bytes field".to_owned())?,
        ),
        SchemaType::Array => {
            let element = schema
                .value_schema
                .as_deref()
                .ok_or("Array schema did not specify the element type")?;
            Value::Array(
                json.as_array()
                    .ok_or_else(wrong)?
                    .iter()
                    .map(|i| read_value(Some(element), i))
                    .collect::<Result<_, _>>()?,
            )
        }
        SchemaType::Map => {
            let ks = schema
                .key_schema
                .as_deref()
                .ok_or("Map schema did not specify the key type")?;
            let vs = schema
                .value_schema
                .as_deref()
                .ok_or("Map schema did not specify the value type")?;
            if ks.kind == SchemaType::String {
                let o = json.as_object().ok_or_else(|| {
                    format!(
                        "Maps with string fields should be encoded as JSON objects, but found {}",
                        json_kind(json)
                    )
                })?;
                Value::Map(
                    o.iter()
                        .map(|(k, v)| Ok((Value::String(k.clone()), read_value(Some(vs), v)?)))
                        .collect::<Result<_, String>>()?,
                )
            } else {
                let items = json.as_array().ok_or_else(|| {
                    format!(
                        "Maps with non-string fields should be encoded as JSON array of tuples, but found {}",
                        json_kind(json)
                    )
                })?;
                let mut entries = Vec::with_capacity(items.len());
                for entry in items {
                    let pair = entry.as_array().ok_or_else(|| {
                        format!(
                            "Found invalid map entry instead of array tuple: {}",
                            json_kind(entry)
                        )
                    })?;
                    if pair.len() != 2 {
                        return Err(format!(
                            "Found invalid map entry, expected length 2 but found :{}",
                            pair.len()
                        ));
                    }
                    entries.push((
                        read_value(Some(ks), &pair[0])?,
                        read_value(Some(vs), &pair[1])?,
                    ));
                }
                Value::Map(entries)
            }
        }
        SchemaType::Struct => {
            let o = json.as_object().ok_or_else(|| {
                format!(
                    "Structs should be encoded as JSON objects, but found {}",
                    json_kind(json)
                )
            })?;
            let mut values = Vec::with_capacity(schema.fields.len());
            for f in &schema.fields {
                let v = o.get(&f.name).unwrap_or(&serde_json::Value::Null);
                values.push((f.name.clone(), read_value(Some(&f.schema), v)?));
            }
            Value::Struct(values)
        }
    })
}

fn read_logical(logical: Logical, json: &serde_json::Value) -> Result<Value, String> {
    match logical {
        Logical::Decimal(scale) => {
            if let Some(text) = json.as_str() {
                let unscaled = BASE64
                    .decode(text)
                    .map_err(|_| "Invalid bytes for Decimal field".to_owned())?;
                return Ok(Value::Decimal(Decimal { unscaled, scale }));
            }
            if json.is_number() {
                let text = json.to_string();
                let d = Decimal::parse(&text)
                    .ok_or_else(|| format!("Invalid numeric value for Decimal: {text}"))?;
                return Ok(Value::Decimal(rescale(&d, scale)));
            }
            Err(format!(
                "Invalid type for Decimal, underlying representation should be numeric or bytes but was {}",
                json_kind(json)
            ))
        }
        Logical::Date => json
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .map(Value::Date)
            .ok_or_else(|| {
                format!(
                    "Invalid type for Date, underlying representation should be integer but was {}",
                    json_kind(json)
                )
            }),
        Logical::Time => json
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .map(Value::Time)
            .ok_or_else(|| {
                format!(
                    "Invalid type for Time, underlying representation should be integer but was {}",
                    json_kind(json)
                )
            }),
        Logical::Timestamp => json.as_i64().map(Value::Timestamp).ok_or_else(|| {
            format!(
                "Invalid type for Timestamp, underlying representation should be integral but was {}",
                json_kind(json)
            )
        }),
    }
}

/// `d` at `scale` (more digits pad with zeros; fewer truncate, as far as it fits).
fn rescale(d: &Decimal, scale: i32) -> Decimal {
    let Some(mut n) = d.unscaled_i128() else {
        return d.clone();
    };
    let mut s = d.scale;
    while s < scale {
        n = n.saturating_mul(10);
        s += 1;
    }
    while s > scale {
        n /= 10;
        s -= 1;
    }
    Decimal::from_i128(n, scale)
}

/// Jackson's node type name of a JSON value.
fn json_kind(json: &serde_json::Value) -> &'static str {
    match json {
        serde_json::Value::Null => "NULL",
        serde_json::Value::Bool(_) => "BOOLEAN",
        serde_json::Value::Number(_) => "NUMBER",
        serde_json::Value::String(_) => "STRING",
        serde_json::Value::Array(_) => "ARRAY",
        serde_json::Value::Object(_) => "OBJECT",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain() -> JsonSettings {
        JsonSettings {
            schemas_enable: false,
            ..JsonSettings::default()
        }
    }

    #[test]
    fn schemaless_json_is_read_straight_as_through_a_json_tree() {
        for input in [
            r#"{"b":1,"a":[true,null,1.5,"x\u00e9"],"b":{"z":-3,"y":18446744073709551615}}"#,
            r#"[1e3, -0, 12, "s", {}]"#,
            "\"only a string\"",
            "null",
            "9223372036854775807",
            r#"{"a":1,"b":2,"c":3}"#,
            r#"{"k":1,"a":0,"k":2,"é":4,"k":3,"Z":5,"":6}"#,
            r#"{"x":{"q":1,"q":[2]},"x":{"p":0,"p":1}}"#,
        ] {
            let direct = to_connect(&plain(), Some(input.as_bytes())).unwrap();
            let tree: serde_json::Value = serde_json::from_str(input).unwrap();
            let through = Data::schemaless(read_value(None, &tree).unwrap());
            assert_eq!(direct, through, "{input}");
        }
        let e = to_connect(&plain(), Some(b"{not json")).unwrap_err();
        assert!(e.contains("serialization error"), "{e}");
    }

    #[test]
    fn integers_are_written_as_their_decimal_digits() {
        for n in [
            0,
            7,
            -7,
            10,
            -10,
            1_700_000_000_000_000_000,
            i64::MAX,
            i64::MIN,
        ] {
            let mut out = Vec::new();
            write_int(&mut out, n);
            assert_eq!(String::from_utf8(out).unwrap(), n.to_string());
        }
    }

    fn text(settings: &JsonSettings, data: &Data) -> String {
        String::from_utf8(from_connect(settings, data).unwrap().unwrap()).unwrap()
    }

    fn person() -> Schema {
        Schema::structure(vec![
            Field {
                name: "id".into(),
                schema: Schema::new(SchemaType::Int32),
            },
            Field {
                name: "email".into(),
                schema: Schema::new(SchemaType::String).optional(),
            },
        ])
        .named("person")
    }

    #[test]
    fn a_struct_with_schemas_enabled_is_written_in_connects_envelope_order() {
        let data = Data::new(
            person(),
            Value::Struct(vec![
                ("id".into(), Value::Int32(7)),
                ("email".into(), Value::String("a@b".into())),
            ]),
        );
        assert_eq!(
            text(&JsonSettings::default(), &data),
            r#"{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"field":"email"}],"optional":false,"name":"person"},"payload":{"id":7,"email":"a@b"}}"#
        );
    }

    #[test]
    fn the_envelope_reads_back_to_the_same_data() {
        let data = Data::new(
            person(),
            Value::Struct(vec![
                ("id".into(), Value::Int32(7)),
                ("email".into(), Value::Null),
            ]),
        );
        let bytes = from_connect(&JsonSettings::default(), &data)
            .unwrap()
            .unwrap();
        assert_eq!(
            to_connect(&JsonSettings::default(), Some(&bytes)).unwrap(),
            data
        );
    }

    #[test]
    fn schemaless_json_reads_objects_as_maps_and_integers_as_int64() {
        let data = to_connect(
            &plain(),
            Some(br#"{"a":1,"b":1.5,"c":[true,null],"d":"x"}"#),
        )
        .unwrap();
        assert_eq!(data.schema, None);
        assert_eq!(data.value.get("a"), Some(&Value::Int64(1)));
        assert_eq!(data.value.get("b"), Some(&Value::Float64(1.5)));
        assert_eq!(
            text(&plain(), &data),
            r#"{"a":1,"b":1.5,"c":[true,null],"d":"x"}"#
        );
    }

    #[test]
    fn schemas_enable_refuses_plain_json_with_connects_message() {
        let e = to_connect(&JsonSettings::default(), Some(br#"{"a":1}"#)).unwrap_err();
        assert!(
            e.starts_with("JsonConverter with schemas.enable requires \"schema\" and \"payload\""),
            "{e}"
        );
    }

    #[test]
    fn bytes_that_are_not_json_fail_with_the_serialization_error() {
        let e = to_connect(&plain(), Some(b"not json")).unwrap_err();
        assert!(
            e.starts_with("Converting byte[] to Kafka Connect data failed"),
            "{e}"
        );
    }

    #[test]
    fn a_null_without_a_schema_is_a_tombstone_and_null_bytes_read_as_null() {
        assert_eq!(
            from_connect(&JsonSettings::default(), &Data::NULL).unwrap(),
            None
        );
        assert_eq!(
            to_connect(&JsonSettings::default(), None).unwrap(),
            Data::NULL
        );
    }

    #[test]
    fn a_required_null_without_default_is_refused() {
        let data = Data::new(Schema::new(SchemaType::Int32), Value::Null);
        let e = from_connect(&plain(), &data).unwrap_err();
        assert_eq!(
            e,
            "Conversion error: null value for field that is required and has no default value"
        );
    }

    #[test]
    fn doubles_print_as_java_prints_them() {
        let cases = [
            (1.0, "1.0"),
            (100.0, "100.0"),
            (1.5, "1.5"),
            (0.001, "0.001"),
            (0.0001, "1.0E-4"),
            (1e7, "1.0E7"),
            (12345678.9, "1.23456789E7"),
            (-2.5e-5, "-2.5E-5"),
            (0.0, "0.0"),
            (9999999.0, "9999999.0"),
        ];
        for (f, want) in cases {
            let mut out = Vec::new();
            write_f64(&mut out, f);
            assert_eq!(String::from_utf8(out).unwrap(), want, "{f}");
        }
    }

    #[test]
    fn strings_are_escaped_as_jackson_escapes_them() {
        let mut out = Vec::new();
        write_str(&mut out, "a\"b\\c\n\u{1}é/");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\"a\\\"b\\\\c\\n\\u0001é/\""
        );
    }

    #[test]
    fn logical_types_are_written_as_their_numbers_and_decimals_as_base64() {
        let schema = Schema::structure(vec![
            Field {
                name: "d".into(),
                schema: Schema::date(),
            },
            Field {
                name: "ts".into(),
                schema: Schema::timestamp(),
            },
            Field {
                name: "amount".into(),
                schema: Schema::decimal(2),
            },
        ]);
        let data = Data::new(
            schema,
            Value::Struct(vec![
                ("d".into(), Value::Date(19000)),
                ("ts".into(), Value::Timestamp(1_700_000_000_000)),
                ("amount".into(), Value::Decimal(Decimal::from_i128(1250, 2))),
            ]),
        );
        assert_eq!(
            text(&plain(), &data),
            r#"{"d":19000,"ts":1700000000000,"amount":"BOI="}"#
        );
        let numeric = JsonSettings {
            decimal_format: DecimalFormat::Numeric,
            ..plain()
        };
        assert_eq!(
            text(&numeric, &data),
            r#"{"d":19000,"ts":1700000000000,"amount":12.50}"#
        );
    }

    #[test]
    fn a_map_with_non_string_keys_is_an_array_of_pairs() {
        let schema = Schema::map(
            Schema::new(SchemaType::Int32),
            Schema::new(SchemaType::String),
        );
        let data = Data::new(
            schema,
            Value::Map(vec![(Value::Int32(1), Value::String("a".into()))]),
        );
        let bytes = text(&plain(), &data);
        assert_eq!(bytes, r#"[[1,"a"]]"#);
    }
}
