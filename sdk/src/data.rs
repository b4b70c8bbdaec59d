//! Kafka Connect's data model in Rust: schemas ([`Schema`]) and values ([`Value`]), with
//! the logical types Decimal, Date, Time and Timestamp, as
//! `org.apache.kafka.connect.data` defines them (Apache Kafka 3.9). A plugin that works
//! with structured records produces and consumes [`Data`] (Connect's `SchemaAndValue`);
//! the connector's converters turn it into the bytes of the record log and back, and
//! transforms work on it (docs/pipeline.md).
//!
//! A schema is optional: `Data { schema: None, .. }` is Connect's schemaless data (what
//! `JsonConverter` with `schemas.enable=false` reads: maps with string keys, `Int64`
//! numbers, `Float64` fractions).

use std::collections::BTreeMap;

/// Name of the logical type Decimal: a [`SchemaType::Bytes`] schema whose value is the
/// unscaled integer in big-endian two's complement; the `scale` parameter holds the scale.
pub const DECIMAL_NAME: &str = "org.apache.kafka.connect.data.Decimal";
/// The parameter of a Decimal schema that holds its scale.
pub const DECIMAL_SCALE: &str = "scale";
/// Name of the logical type Date: an [`SchemaType::Int32`] schema, days since the Unix
/// epoch.
pub const DATE_NAME: &str = "org.apache.kafka.connect.data.Date";
/// Name of the logical type Time: an [`SchemaType::Int32`] schema, milliseconds since
/// midnight.
pub const TIME_NAME: &str = "org.apache.kafka.connect.data.Time";
/// Name of the logical type Timestamp: an [`SchemaType::Int64`] schema, milliseconds
/// since the Unix epoch.
pub const TIMESTAMP_NAME: &str = "org.apache.kafka.connect.data.Timestamp";

/// Connect's `Schema.Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchemaType {
    /// 8-bit signed integer.
    Int8,
    /// 16-bit signed integer.
    Int16,
    /// 32-bit signed integer.
    Int32,
    /// 64-bit signed integer.
    Int64,
    /// 32-bit IEEE 754 float.
    Float32,
    /// 64-bit IEEE 754 float.
    Float64,
    /// Boolean.
    Boolean,
    /// UTF-8 text.
    String,
    /// Bytes.
    Bytes,
    /// A list of values of one schema.
    Array,
    /// Keys of one schema to values of another.
    Map,
    /// Named fields, each of its own schema, in order.
    Struct,
}

impl SchemaType {
    /// The type's name in `JsonConverter`'s schema envelope (`int8`, ..., `float`,
    /// `double`, `boolean`, `string`, `bytes`, `array`, `map`, `struct`).
    pub fn json_name(self) -> &'static str {
        match self {
            SchemaType::Int8 => "int8",
            SchemaType::Int16 => "int16",
            SchemaType::Int32 => "int32",
            SchemaType::Int64 => "int64",
            SchemaType::Float32 => "float",
            SchemaType::Float64 => "double",
            SchemaType::Boolean => "boolean",
            SchemaType::String => "string",
            SchemaType::Bytes => "bytes",
            SchemaType::Array => "array",
            SchemaType::Map => "map",
            SchemaType::Struct => "struct",
        }
    }

    /// The type's name as Connect's enum spells it (`INT8`, ..., `STRUCT`), used in
    /// error messages.
    pub fn connect_name(self) -> &'static str {
        match self {
            SchemaType::Int8 => "INT8",
            SchemaType::Int16 => "INT16",
            SchemaType::Int32 => "INT32",
            SchemaType::Int64 => "INT64",
            SchemaType::Float32 => "FLOAT32",
            SchemaType::Float64 => "FLOAT64",
            SchemaType::Boolean => "BOOLEAN",
            SchemaType::String => "STRING",
            SchemaType::Bytes => "BYTES",
            SchemaType::Array => "ARRAY",
            SchemaType::Map => "MAP",
            SchemaType::Struct => "STRUCT",
        }
    }

    /// The type named `name` in `JsonConverter`'s schema envelope.
    pub fn from_json_name(name: &str) -> Option<Self> {
        Some(match name {
            "int8" => SchemaType::Int8,
            "int16" => SchemaType::Int16,
            "int32" => SchemaType::Int32,
            "int64" => SchemaType::Int64,
            "float" => SchemaType::Float32,
            "double" => SchemaType::Float64,
            "boolean" => SchemaType::Boolean,
            "string" => SchemaType::String,
            "bytes" => SchemaType::Bytes,
            "array" => SchemaType::Array,
            "map" => SchemaType::Map,
            "struct" => SchemaType::Struct,
            _ => return None,
        })
    }

    /// True for the types that hold one value (not array, map or struct).
    pub fn is_primitive(self) -> bool {
        !matches!(
            self,
            SchemaType::Array | SchemaType::Map | SchemaType::Struct
        )
    }
}

/// A Connect schema: a type, whether null is allowed, an optional default, and optional
/// name, version, doc and parameters; a struct's fields, an array's element schema
/// (`value_schema`), a map's key and value schemas.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    /// The type.
    pub kind: SchemaType,
    /// Whether the value may be null.
    pub optional: bool,
    /// The value a null stands for, when set.
    pub default: Option<Box<Value>>,
    /// Name (a logical type's name, or a record name).
    pub name: Option<String>,
    /// Version.
    pub version: Option<i32>,
    /// Documentation.
    pub doc: Option<String>,
    /// Parameters in insertion order (a Decimal's `scale`).
    pub parameters: Vec<(String, String)>,
    /// A struct's fields, in order.
    pub fields: Vec<Field>,
    /// A map's key schema.
    pub key_schema: Option<Box<Schema>>,
    /// An array's element schema, a map's value schema.
    pub value_schema: Option<Box<Schema>>,
}

/// A field of a struct schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The field's name.
    pub name: String,
    /// Its schema.
    pub schema: Schema,
}

impl Schema {
    /// A required schema of `kind` with nothing else set.
    pub fn new(kind: SchemaType) -> Self {
        Self {
            kind,
            optional: false,
            default: None,
            name: None,
            version: None,
            doc: None,
            parameters: Vec::new(),
            fields: Vec::new(),
            key_schema: None,
            value_schema: None,
        }
    }

    /// This schema, optional.
    #[must_use]
    pub fn optional(mut self) -> Self {
        self.optional = true;
        self
    }

    /// This schema, named `name`.
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// A required struct schema of `fields`.
    pub fn structure(fields: Vec<Field>) -> Self {
        let mut s = Self::new(SchemaType::Struct);
        s.fields = fields;
        s
    }

    /// A required array schema of `element`.
    pub fn array(element: Schema) -> Self {
        let mut s = Self::new(SchemaType::Array);
        s.value_schema = Some(Box::new(element));
        s
    }

    /// A required map schema from `key` to `value`.
    pub fn map(key: Schema, value: Schema) -> Self {
        let mut s = Self::new(SchemaType::Map);
        s.key_schema = Some(Box::new(key));
        s.value_schema = Some(Box::new(value));
        s
    }

    /// The logical type Decimal of `scale` (required).
    pub fn decimal(scale: i32) -> Self {
        let mut s = Self::new(SchemaType::Bytes).named(DECIMAL_NAME);
        s.version = Some(1);
        s.parameters = vec![(DECIMAL_SCALE.to_owned(), scale.to_string())];
        s
    }

    /// The logical type Date (required).
    pub fn date() -> Self {
        let mut s = Self::new(SchemaType::Int32).named(DATE_NAME);
        s.version = Some(1);
        s
    }

    /// The logical type Time (required).
    pub fn time() -> Self {
        let mut s = Self::new(SchemaType::Int32).named(TIME_NAME);
        s.version = Some(1);
        s
    }

    /// The logical type Timestamp (required).
    pub fn timestamp() -> Self {
        let mut s = Self::new(SchemaType::Int64).named(TIMESTAMP_NAME);
        s.version = Some(1);
        s
    }

    /// The field called `name` of a struct schema.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The parameter called `name`.
    pub fn parameter(&self, name: &str) -> Option<&str> {
        self.parameters
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The logical type this schema carries, by its name.
    pub fn logical(&self) -> Option<Logical> {
        match self.name.as_deref()? {
            DECIMAL_NAME => Some(Logical::Decimal(
                self.parameter(DECIMAL_SCALE)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0),
            )),
            DATE_NAME => Some(Logical::Date),
            TIME_NAME => Some(Logical::Time),
            TIMESTAMP_NAME => Some(Logical::Timestamp),
            _ => None,
        }
    }

    /// This schema with the basics (type, name, version, doc, parameters, optional) of
    /// `self` and no fields, default or element schemas: Connect's
    /// `SchemaUtil.copySchemaBasics` into a struct builder.
    pub fn struct_basics(&self) -> Self {
        let mut s = Self::new(SchemaType::Struct);
        s.name.clone_from(&self.name);
        s.version = self.version;
        s.doc.clone_from(&self.doc);
        s.parameters.clone_from(&self.parameters);
        s.optional = self.optional;
        s
    }
}

/// A logical type of Connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logical {
    /// Decimal of this scale.
    Decimal(i32),
    /// Date.
    Date,
    /// Time of day.
    Time,
    /// Timestamp.
    Timestamp,
}

/// A decimal number: `unscaled * 10^-scale`, the unscaled integer in big-endian two's
/// complement (as Connect's Decimal writes `BigInteger.toByteArray`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decimal {
    /// The unscaled integer, big-endian two's complement, at least one byte.
    pub unscaled: Vec<u8>,
    /// Digits after the decimal point.
    pub scale: i32,
}

impl Decimal {
    /// Zero at `scale`.
    pub fn zero(scale: i32) -> Self {
        Self {
            unscaled: vec![0],
            scale,
        }
    }

    /// The decimal of an `i128` unscaled value.
    pub fn from_i128(unscaled: i128, scale: i32) -> Self {
        let bytes = unscaled.to_be_bytes();
        // The shortest two's complement form, as BigInteger.toByteArray.
        let mut start = 0;
        while start < bytes.len() - 1 {
            let (b, next) = (bytes[start], bytes[start + 1]);
            if (b == 0 && next & 0x80 == 0) || (b == 0xff && next & 0x80 != 0) {
                start += 1;
            } else {
                break;
            }
        }
        Self {
            unscaled: bytes[start..].to_vec(),
            scale,
        }
    }

    /// The unscaled value when it fits an `i128`.
    pub fn unscaled_i128(&self) -> Option<i128> {
        if self.unscaled.is_empty() || self.unscaled.len() > 16 {
            return None;
        }
        let negative = self.unscaled[0] & 0x80 != 0;
        let mut buf = if negative { [0xff; 16] } else { [0; 16] };
        buf[16 - self.unscaled.len()..].copy_from_slice(&self.unscaled);
        Some(i128::from_be_bytes(buf))
    }

    /// Parses plain decimal text (`-12.50`, `3`, `1e3` is refused), as `new BigDecimal`
    /// for the forms without an exponent.
    pub fn parse(text: &str) -> Option<Self> {
        let t = text.trim();
        let (digits, scale) = match t.split_once('.') {
            Some((int, frac)) => (format!("{int}{frac}"), i32::try_from(frac.len()).ok()?),
            None => (t.to_owned(), 0),
        };
        let unscaled: i128 = digits.parse().ok()?;
        Some(Self::from_i128(unscaled, scale))
    }
}

impl std::fmt::Display for Decimal {
    /// Plain text, as `BigDecimal.toPlainString` (for values that fit 128 bits).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(n) = self.unscaled_i128() else {
            return write!(f, "<decimal of {} bytes>", self.unscaled.len());
        };
        if self.scale <= 0 {
            write!(f, "{n}")?;
            for _ in 0..(-self.scale) {
                write!(f, "0")?;
            }
            return Ok(());
        }
        let scale = self.scale as usize;
        let digits = n.unsigned_abs().to_string();
        let sign = if n < 0 { "-" } else { "" };
        if digits.len() > scale {
            let (int, frac) = digits.split_at(digits.len() - scale);
            write!(f, "{sign}{int}.{frac}")
        } else {
            write!(f, "{sign}0.{}{digits}", "0".repeat(scale - digits.len()))
        }
    }
}

/// A Connect value. A struct's fields are in its schema's order; a map keeps its entries
/// in order (schemaless maps from JSON have string keys).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Null.
    Null,
    /// INT8.
    Int8(i8),
    /// INT16.
    Int16(i16),
    /// INT32.
    Int32(i32),
    /// INT64.
    Int64(i64),
    /// FLOAT32.
    Float32(f32),
    /// FLOAT64.
    Float64(f64),
    /// BOOLEAN.
    Boolean(bool),
    /// STRING.
    String(String),
    /// BYTES.
    Bytes(Vec<u8>),
    /// ARRAY.
    Array(Vec<Value>),
    /// MAP, entries in order.
    Map(Vec<(Value, Value)>),
    /// STRUCT: `(field name, value)` in the schema's field order.
    Struct(Vec<(String, Value)>),
    /// The logical type Decimal.
    Decimal(Decimal),
    /// The logical type Date: days since the Unix epoch.
    Date(i32),
    /// The logical type Time: milliseconds since midnight.
    Time(i32),
    /// The logical type Timestamp: milliseconds since the Unix epoch.
    Timestamp(i64),
}

impl Value {
    /// True for [`Value::Null`].
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// A string value's text.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value of field or string map key `name` of a struct or map.
    pub fn get(&self, name: &str) -> Option<&Value> {
        match self {
            Value::Struct(fields) => fields.iter().find(|(n, _)| n == name).map(|(_, v)| v),
            Value::Map(entries) => entries
                .iter()
                .find(|(k, _)| k.as_str() == Some(name))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The Java class Connect would hold this value in, for error messages that quote it
    /// (`found: java.lang.String`).
    pub fn java_class(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Int8(_) => "java.lang.Byte",
            Value::Int16(_) => "java.lang.Short",
            Value::Int32(_) => "java.lang.Integer",
            Value::Int64(_) => "java.lang.Long",
            Value::Float32(_) => "java.lang.Float",
            Value::Float64(_) => "java.lang.Double",
            Value::Boolean(_) => "java.lang.Boolean",
            Value::String(_) => "java.lang.String",
            Value::Bytes(_) => "[B",
            Value::Array(_) => "java.util.ArrayList",
            Value::Map(_) => "java.util.HashMap",
            Value::Struct(_) => "org.apache.kafka.connect.data.Struct",
            Value::Decimal(_) => "java.math.BigDecimal",
            Value::Date(_) | Value::Time(_) | Value::Timestamp(_) => "java.util.Date",
        }
    }

    /// The schema type a schemaless value of this kind has (Connect's
    /// `ConnectSchema.schemaType` of its Java class); `None` for null.
    pub fn inferred_type(&self) -> Option<SchemaType> {
        Some(match self {
            Value::Null => return None,
            Value::Int8(_) => SchemaType::Int8,
            Value::Int16(_) => SchemaType::Int16,
            Value::Int32(_) | Value::Date(_) | Value::Time(_) => SchemaType::Int32,
            Value::Int64(_) | Value::Timestamp(_) => SchemaType::Int64,
            Value::Float32(_) => SchemaType::Float32,
            Value::Float64(_) => SchemaType::Float64,
            Value::Boolean(_) => SchemaType::Boolean,
            Value::String(_) => SchemaType::String,
            Value::Bytes(_) | Value::Decimal(_) => SchemaType::Bytes,
            Value::Array(_) => SchemaType::Array,
            Value::Map(_) => SchemaType::Map,
            Value::Struct(_) => SchemaType::Struct,
        })
    }
}

/// A value with its optional schema: Connect's `SchemaAndValue`.
#[derive(Debug, Clone, PartialEq)]
pub struct Data {
    /// The schema; `None` for schemaless data.
    pub schema: Option<Schema>,
    /// The value.
    pub value: Value,
}

impl Data {
    /// Null without a schema (a missing key, a tombstone's value).
    pub const NULL: Data = Data {
        schema: None,
        value: Value::Null,
    };

    /// `value` of `schema`.
    pub fn new(schema: Schema, value: Value) -> Self {
        Self {
            schema: Some(schema),
            value,
        }
    }

    /// `value` without a schema.
    pub fn schemaless(value: Value) -> Self {
        Self {
            schema: None,
            value,
        }
    }

    /// Bytes with an optional bytes schema, as `ByteArrayConverter` reads them.
    pub fn bytes(bytes: Vec<u8>) -> Self {
        Self::new(
            Schema::new(SchemaType::Bytes).optional(),
            Value::Bytes(bytes),
        )
    }

    /// Text with an optional string schema, as `StringConverter` reads it.
    pub fn string(text: impl Into<String>) -> Self {
        Self::new(
            Schema::new(SchemaType::String).optional(),
            Value::String(text.into()),
        )
    }
}

/// A header's value inside the pipeline: the bytes as the record carried them (not yet
/// read by the header converter: headers a transform does not touch pass unchanged), or
/// a value a transform set, which the header converter writes.
#[derive(Debug, Clone, PartialEq)]
pub enum HeaderValue {
    /// Bytes as the record carried them.
    Bytes(Vec<u8>),
    /// A value with its optional schema.
    Data(Data),
}

/// A structured key and value a source plugin produces instead of bytes, or a sink
/// plugin receives beside them: the connector's converters write it (source) or read it
/// (sink). Headers stay bytes on the records.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordData {
    /// The key (`Data::NULL` for none).
    pub key: Data,
    /// The value (`Data::NULL` for a tombstone).
    pub value: Data,
}

/// Parameters in insertion order, as a map (for callers that look several up).
pub fn parameter_map(schema: &Schema) -> BTreeMap<&str, &str> {
    schema
        .parameters
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decimal_keeps_the_shortest_twos_complement_form() {
        assert_eq!(Decimal::from_i128(0, 2).unscaled, vec![0]);
        assert_eq!(Decimal::from_i128(127, 0).unscaled, vec![0x7f]);
        assert_eq!(Decimal::from_i128(128, 0).unscaled, vec![0, 0x80]);
        assert_eq!(Decimal::from_i128(-1, 0).unscaled, vec![0xff]);
        assert_eq!(Decimal::from_i128(-129, 0).unscaled, vec![0xff, 0x7f]);
        assert_eq!(Decimal::from_i128(-129, 0).unscaled_i128(), Some(-129));
    }

    #[test]
    fn a_decimal_prints_as_plain_text() {
        assert_eq!(Decimal::from_i128(1250, 2).to_string(), "12.50");
        assert_eq!(Decimal::from_i128(-5, 3).to_string(), "-0.005");
        assert_eq!(Decimal::from_i128(7, 0).to_string(), "7");
        assert_eq!(Decimal::parse("-12.50"), Some(Decimal::from_i128(-1250, 2)));
    }

    #[test]
    fn logical_types_are_read_from_the_schema_name() {
        assert_eq!(Schema::decimal(3).logical(), Some(Logical::Decimal(3)));
        assert_eq!(Schema::timestamp().logical(), Some(Logical::Timestamp));
        assert_eq!(Schema::new(SchemaType::Int64).logical(), None);
    }
}
