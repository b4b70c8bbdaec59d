//! Converters (Kafka Connect's `Converter` and `HeaderConverter`): how a record's key,
//! value and header bytes are read into Connect data and written back. The ones of
//! Apache Kafka 3.9 that Wharf implements, by class name, simple name or Wharf's short
//! alias (`Converter::parse`): `JsonConverter` (`json`), `StringConverter` (`string`),
//! `ByteArrayConverter` (`bytes`), and for headers `SimpleHeaderConverter` (`simple`).

pub mod json;
pub mod values;

use base64::Engine;
use wharf::sdk::data::{Data, Schema, SchemaType, Value};

pub use json::{DecimalFormat, JsonSettings};

/// `org.apache.kafka.connect.json.JsonConverter`.
pub const JSON_CONVERTER: &str = "org.apache.kafka.connect.json.JsonConverter";
/// `org.apache.kafka.connect.storage.StringConverter`.
pub const STRING_CONVERTER: &str = "org.apache.kafka.connect.storage.StringConverter";
/// `org.apache.kafka.connect.converters.ByteArrayConverter`.
pub const BYTE_ARRAY_CONVERTER: &str = "org.apache.kafka.connect.converters.ByteArrayConverter";
/// `org.apache.kafka.connect.storage.SimpleHeaderConverter`, Connect's default header
/// converter.
pub const SIMPLE_HEADER_CONVERTER: &str = "org.apache.kafka.connect.storage.SimpleHeaderConverter";

/// A configured converter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Converter {
    /// `ByteArrayConverter`: bytes as they are (an optional BYTES schema).
    ByteArray,
    /// `StringConverter` (UTF-8).
    String,
    /// `JsonConverter` with its settings.
    Json(JsonSettings),
    /// `SimpleHeaderConverter`: a header's text, its type inferred on reading (headers
    /// only).
    SimpleHeader,
}

/// Which converter a class name (or alias) names, before its settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConverterClass {
    /// `ByteArrayConverter`.
    ByteArray,
    /// `StringConverter`.
    String,
    /// `JsonConverter`.
    Json,
    /// `SimpleHeaderConverter`.
    SimpleHeader,
}

impl ConverterClass {
    /// The class `name` names: the full class name, the simple name or Wharf's alias.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name.trim() {
            JSON_CONVERTER | "JsonConverter" | "json" => ConverterClass::Json,
            STRING_CONVERTER | "StringConverter" | "string" => ConverterClass::String,
            BYTE_ARRAY_CONVERTER | "ByteArrayConverter" | "bytes" | "bytearray" => {
                ConverterClass::ByteArray
            }
            SIMPLE_HEADER_CONVERTER | "SimpleHeaderConverter" | "simple" => {
                ConverterClass::SimpleHeader
            }
            _ => return None,
        })
    }

    /// Connect's class name.
    pub fn class_name(self) -> &'static str {
        match self {
            ConverterClass::ByteArray => BYTE_ARRAY_CONVERTER,
            ConverterClass::String => STRING_CONVERTER,
            ConverterClass::Json => JSON_CONVERTER,
            ConverterClass::SimpleHeader => SIMPLE_HEADER_CONVERTER,
        }
    }
}

impl Converter {
    /// Connect's class name.
    pub fn class_name(&self) -> &'static str {
        match self {
            Converter::ByteArray => BYTE_ARRAY_CONVERTER,
            Converter::String => STRING_CONVERTER,
            Converter::Json(_) => JSON_CONVERTER,
            Converter::SimpleHeader => SIMPLE_HEADER_CONVERTER,
        }
    }

    /// Reads bytes (`None`: absent, a tombstone) into data (`toConnectData`).
    ///
    /// # Errors
    /// The converter's `DataException` text.
    pub fn to_data(&self, bytes: Option<&[u8]>) -> Result<Data, String> {
        match self {
            Converter::ByteArray => Ok(Data::new(
                Schema::new(SchemaType::Bytes).optional(),
                bytes.map_or(Value::Null, |b| Value::Bytes(b.to_vec())),
            )),
            Converter::String => Ok(Data::new(
                Schema::new(SchemaType::String).optional(),
                bytes.map_or(Value::Null, |b| {
                    Value::String(String::from_utf8_lossy(b).into_owned())
                }),
            )),
            Converter::Json(settings) => json::to_connect(settings, bytes),
            Converter::SimpleHeader => Ok(match bytes {
                None => Data::NULL,
                Some(b) => values::parse_string(&String::from_utf8_lossy(b)),
            }),
        }
    }

    /// Reads the bytes a source plugin gave (`None`: absent): as [`Converter::to_data`],
    /// except that `JsonConverter` with `schemas.enable` takes JSON without the envelope
    /// as the plugin's schemaless value ([`json::source_to_connect`]).
    ///
    /// # Errors
    /// The converter's `DataException` text.
    pub fn source_to_data(&self, bytes: Option<&[u8]>) -> Result<Data, String> {
        match self {
            Converter::Json(settings) => json::source_to_connect(settings, bytes),
            Converter::ByteArray | Converter::String | Converter::SimpleHeader => {
                self.to_data(bytes)
            }
        }
    }

    /// Writes data as bytes (`fromConnectData`); `None` for a null.
    ///
    /// # Errors
    /// The converter's `DataException` text (a value of a type it cannot write).
    pub fn from_data(&self, data: &Data) -> Result<Option<Vec<u8>>, String> {
        match self {
            Converter::ByteArray => {
                if let Some(s) = &data.schema
                    && s.kind != SchemaType::Bytes
                {
                    return Err(format!(
                        "Invalid schema type for ByteArrayConverter: {}",
                        s.kind.connect_name()
                    ));
                }
                match &data.value {
                    Value::Null => Ok(None),
                    Value::Bytes(b) => Ok(Some(b.clone())),
                    other => Err(format!(
                        "ByteArrayConverter is not compatible with objects of type class {}",
                        other.java_class()
                    )),
                }
            }
            Converter::String => Ok(match &data.value {
                Value::Null => None,
                v => Some(values::java_to_string(v).into_bytes()),
            }),
            Converter::Json(settings) => json::from_connect(settings, data),
            Converter::SimpleHeader => Ok(match &data.value {
                Value::Null => None,
                v => Some(values::convert_to_string(data.schema.as_ref(), v).into_bytes()),
            }),
        }
    }

    /// True when bytes read and written back come out as they went in, whatever they
    /// hold: the converter step can be skipped for a record nothing transforms.
    pub fn is_identity(&self) -> bool {
        matches!(self, Converter::ByteArray)
    }
}

/// Base64 text of `bytes` (standard alphabet, padded), as Java's `Base64.getEncoder()`.
pub fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_converter_is_found_by_class_simple_name_and_alias() {
        for (names, class) in [
            (
                [JSON_CONVERTER, "JsonConverter", "json"],
                ConverterClass::Json,
            ),
            (
                [STRING_CONVERTER, "StringConverter", "string"],
                ConverterClass::String,
            ),
            (
                [BYTE_ARRAY_CONVERTER, "ByteArrayConverter", "bytes"],
                ConverterClass::ByteArray,
            ),
            (
                [SIMPLE_HEADER_CONVERTER, "SimpleHeaderConverter", "simple"],
                ConverterClass::SimpleHeader,
            ),
        ] {
            for n in names {
                assert_eq!(ConverterClass::parse(n), Some(class), "{n}");
            }
        }
        assert_eq!(
            ConverterClass::parse("io.confluent.connect.avro.AvroConverter"),
            None
        );
    }

    #[test]
    fn byte_array_converter_passes_bytes_and_refuses_other_types() {
        let c = Converter::ByteArray;
        let data = c.to_data(Some(b"\x00\xffraw")).unwrap();
        assert_eq!(c.from_data(&data).unwrap(), Some(b"\x00\xffraw".to_vec()));
        assert_eq!(c.from_data(&c.to_data(None).unwrap()).unwrap(), None);
        let e = c.from_data(&Data::string("x")).unwrap_err();
        assert_eq!(e, "Invalid schema type for ByteArrayConverter: STRING");
        let e = c.from_data(&Data::schemaless(Value::Int64(1))).unwrap_err();
        assert!(e.starts_with("ByteArrayConverter is not compatible"), "{e}");
    }

    #[test]
    fn string_converter_reads_text_and_writes_any_value_as_its_text() {
        let c = Converter::String;
        assert_eq!(c.to_data(Some(b"hello")).unwrap(), Data::string("hello"));
        assert_eq!(
            c.from_data(&Data::schemaless(Value::Int64(42))).unwrap(),
            Some(b"42".to_vec())
        );
        assert_eq!(c.from_data(&Data::NULL).unwrap(), None);
    }

    #[test]
    fn simple_header_converter_infers_types_and_writes_text() {
        let c = Converter::SimpleHeader;
        let d = c.to_data(Some(b"42")).unwrap();
        assert_eq!(d.value, Value::Int8(42));
        assert_eq!(c.from_data(&d).unwrap(), Some(b"42".to_vec()));
        let d = c.to_data(Some(b"hello world")).unwrap();
        assert_eq!(d.value, Value::String("hello world".into()));
    }
}
