//! Connect's `Values` helpers that headers use: `parseString` (the type of a header's
//! text, for `SimpleHeaderConverter` and `InsertHeader`'s `value.literal`) and
//! `convertToString` (a header value's text), plus Java's `toString` of a value (what
//! `StringConverter` writes).
//!
//! Differences from Connect: `parseString` infers booleans, integers (the smallest of
//! INT8..INT64), floats (FLOAT32 when exact, else FLOAT64) and strings; text that Connect
//! would read as an array, a map, a date or a timestamp stays a string here.

use wharf::sdk::data::{Data, Logical, Schema, SchemaType, Value};

use super::json::{write_f32, write_f64, write_str};
use crate::pipeline::timefmt;

/// The value `text` holds, its type inferred as `Values.parseString` does (see the module
/// doc for what is not inferred).
pub fn parse_string(text: &str) -> Data {
    let trimmed = text.trim();
    if trimmed.eq_ignore_ascii_case("true") || trimmed.eq_ignore_ascii_case("false") {
        return Data::new(
            Schema::new(SchemaType::Boolean),
            Value::Boolean(trimmed.eq_ignore_ascii_case("true")),
        );
    }
    if !trimmed.is_empty()
        && trimmed
            .chars()
            .all(|c| c.is_ascii_digit() || c == '-' || c == '+')
        && let Ok(n) = trimmed.parse::<i64>()
    {
        return if let Ok(v) = i8::try_from(n) {
            Data::new(Schema::new(SchemaType::Int8), Value::Int8(v))
        } else if let Ok(v) = i16::try_from(n) {
            Data::new(Schema::new(SchemaType::Int16), Value::Int16(v))
        } else if let Ok(v) = i32::try_from(n) {
            Data::new(Schema::new(SchemaType::Int32), Value::Int32(v))
        } else {
            Data::new(Schema::new(SchemaType::Int64), Value::Int64(n))
        };
    }
    let numeric = !trimmed.is_empty()
        && trimmed
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E'))
        && trimmed.chars().any(|c| c.is_ascii_digit());
    if numeric && let Ok(d) = trimmed.parse::<f64>() {
        let f = d as f32;
        return if f.is_finite() && f64::from(f) == d {
            Data::new(Schema::new(SchemaType::Float32), Value::Float32(f))
        } else {
            Data::new(Schema::new(SchemaType::Float64), Value::Float64(d))
        };
    }
    Data::new(
        Schema::new(SchemaType::String),
        Value::String(text.to_owned()),
    )
}

/// A value's text as `Values.convertToString` writes it: strings as they are, numbers
/// and booleans as Java prints them, bytes as base64, logical types in ISO 8601 (UTC),
/// arrays, maps and structs as JSON-like text.
pub fn convert_to_string(schema: Option<&Schema>, value: &Value) -> String {
    match (schema.and_then(Schema::logical), value) {
        (Some(Logical::Date), Value::Date(d) | Value::Int32(d)) => {
            return timefmt::format_iso_date(i64::from(*d) * timefmt::MS_PER_DAY);
        }
        (Some(Logical::Time), Value::Time(t) | Value::Int32(t)) => {
            return timefmt::format_iso_time(i64::from(*t));
        }
        (Some(Logical::Timestamp), Value::Timestamp(t) | Value::Int64(t)) => {
            return timefmt::format_iso_timestamp(*t);
        }
        _ => {}
    }
    let mut out = String::new();
    append(&mut out, value, false);
    out
}

fn append(out: &mut String, value: &Value, embedded: bool) {
    match value {
        Value::String(s) if embedded => {
            let mut b = Vec::new();
            write_str(&mut b, s);
            out.push_str(&String::from_utf8_lossy(&b));
        }
        Value::String(s) => out.push_str(s),
        Value::Bytes(b) => out.push_str(&super::base64(b)),
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                append(out, v, true);
            }
            out.push(']');
        }
        Value::Map(entries) => {
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                append(out, k, true);
                out.push(':');
                append(out, v, true);
            }
            out.push('}');
        }
        Value::Struct(fields) => {
            out.push('{');
            for (i, (k, v)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                append(out, &Value::String(k.clone()), true);
                out.push(':');
                append(out, v, true);
            }
            out.push('}');
        }
        other => out.push_str(&java_to_string(other)),
    }
}

/// Java's `String.valueOf` of the value Connect would hold (what `StringConverter`
/// writes): numbers and booleans as Java prints them, maps as `{k=v, ...}`, lists as
/// `[a, b]`, structs as `Struct{f=v,...}`, Dates as their ISO 8601 text (UTC).
pub fn java_to_string(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Int8(n) => n.to_string(),
        Value::Int16(n) => n.to_string(),
        Value::Int32(n) => n.to_string(),
        Value::Int64(n) => n.to_string(),
        Value::Float32(f) => {
            let mut b = Vec::new();
            write_f32(&mut b, *f);
            String::from_utf8_lossy(&b).trim_matches('"').to_owned()
        }
        Value::Float64(f) => {
            let mut b = Vec::new();
            write_f64(&mut b, *f);
            String::from_utf8_lossy(&b).trim_matches('"').to_owned()
        }
        Value::Boolean(b) => b.to_string(),
        Value::String(s) => s.clone(),
        Value::Bytes(b) => super::base64(b),
        Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(java_to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Map(entries) => format!(
            "{{{}}}",
            entries
                .iter()
                .map(|(k, v)| format!("{}={}", java_to_string(k), java_to_string(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Struct(fields) => format!(
            "Struct{{{}}}",
            fields
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("{k}={}", java_to_string(v)))
                .collect::<Vec<_>>()
                .join(",")
        ),
        Value::Decimal(d) => d.to_string(),
        Value::Date(d) => timefmt::format_iso_date(i64::from(*d) * timefmt::MS_PER_DAY),
        Value::Time(t) => timefmt::format_iso_time(i64::from(*t)),
        Value::Timestamp(t) => timefmt::format_iso_timestamp(*t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_string_infers_the_smallest_integer_type() {
        assert_eq!(parse_string("42").value, Value::Int8(42));
        assert_eq!(parse_string("300").value, Value::Int16(300));
        assert_eq!(parse_string("70000").value, Value::Int32(70000));
        assert_eq!(
            parse_string("5000000000").value,
            Value::Int64(5_000_000_000)
        );
    }

    #[test]
    fn parse_string_infers_booleans_floats_and_strings() {
        assert_eq!(parse_string("true").value, Value::Boolean(true));
        assert_eq!(parse_string("1.5").value, Value::Float32(1.5));
        assert_eq!(parse_string("0.1").value, Value::Float64(0.1));
        assert_eq!(parse_string("hello").value, Value::String("hello".into()));
        assert_eq!(parse_string("e").value, Value::String("e".into()));
    }

    #[test]
    fn convert_to_string_writes_text_numbers_and_iso_timestamps() {
        assert_eq!(convert_to_string(None, &Value::String("a b".into())), "a b");
        assert_eq!(convert_to_string(None, &Value::Int32(7)), "7");
        assert_eq!(
            convert_to_string(Some(&Schema::timestamp()), &Value::Timestamp(0)),
            "1970-01-01T00:00:00.000Z"
        );
        assert_eq!(
            convert_to_string(
                None,
                &Value::Array(vec![Value::Int32(1), Value::String("x".into())])
            ),
            "[1,\"x\"]"
        );
    }
}
