//! The Cast transform (`Cast$Key` / `Cast$Value`): a whole key or value, or fields of a
//! struct or map, cast to another primitive type, as Connect's `Cast` does.

use wharf::sdk::data::{Data, Field, Logical, Schema, SchemaType, Value};
use wharf::sdk::{ConnectRecord, TransformError, Transformation};

use super::{KeyError, Keys, Side, field_value, require_map, require_struct};
use crate::pipeline::convert::values::java_to_string;

type Out = Result<Option<ConnectRecord>, TransformError>;

/// A type Cast casts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CastType {
    Int8,
    Int16,
    Int32,
    Int64,
    Float32,
    Float64,
    Boolean,
    String,
}

impl CastType {
    fn parse(name: &str) -> Option<Self> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "int8" => CastType::Int8,
            "int16" => CastType::Int16,
            "int32" => CastType::Int32,
            "int64" => CastType::Int64,
            "float32" => CastType::Float32,
            "float64" => CastType::Float64,
            "boolean" => CastType::Boolean,
            "string" => CastType::String,
            _ => return None,
        })
    }

    fn schema_type(self) -> SchemaType {
        match self {
            CastType::Int8 => SchemaType::Int8,
            CastType::Int16 => SchemaType::Int16,
            CastType::Int32 => SchemaType::Int32,
            CastType::Int64 => SchemaType::Int64,
            CastType::Float32 => SchemaType::Float32,
            CastType::Float64 => SchemaType::Float64,
            CastType::Boolean => SchemaType::Boolean,
            CastType::String => SchemaType::String,
        }
    }
}

/// `Cast$Key` / `$Value`: `spec` is one type for the whole key or value, or
/// `field:type,...`; types int8..int64, float32, float64, boolean, string.
pub struct Cast {
    side: Side,
    whole: Option<CastType>,
    fields: Vec<(String, CastType)>,
    replace_null_with_default: bool,
}

impl Cast {
    pub(super) fn new(side: Side, c: &Keys<'_>) -> Result<Self, KeyError> {
        let spec = c.non_empty_list("spec")?;
        let bad = |m: &str| {
            (
                "spec".to_owned(),
                format!("Invalid type found in casting spec: {m}"),
            )
        };
        let mut whole = None;
        let mut fields = Vec::new();
        for item in &spec {
            match item.split_once(':') {
                None if spec.len() == 1 => {
                    whole = Some(CastType::parse(item).ok_or_else(|| bad(item))?)
                }
                None => {
                    return Err((
                        "spec".into(),
                        format!(
                            "Cast transformations that specify a type to cast the entire value to may only specify a single cast in their spec: {item}"
                        ),
                    ));
                }
                Some((f, t)) => fields.push((
                    f.trim().to_owned(),
                    CastType::parse(t).ok_or_else(|| bad(t.trim()))?,
                )),
            }
        }
        Ok(Self {
            side,
            whole,
            fields,
            replace_null_with_default: c.boolean("replace.null.with.default", true)?,
        })
    }

    fn target(&self, field: &str) -> Option<CastType> {
        self.fields
            .iter()
            .find(|(f, _)| f == field)
            .map(|(_, t)| *t)
    }
}

fn cast(v: &Value, to: CastType) -> Result<Value, TransformError> {
    let unsupported = |v: &Value| {
        TransformError::new(format!(
            "Cast transformation does not support casting to/from {}",
            v.inferred_type().map_or("null", SchemaType::connect_name)
        ))
    };
    let as_f64 = |v: &Value| -> Result<f64, TransformError> {
        Ok(match v {
            Value::Int8(n) => f64::from(*n),
            Value::Int16(n) => f64::from(*n),
            Value::Int32(n) => f64::from(*n),
            Value::Int64(n) => *n as f64,
            Value::Float32(f) => f64::from(*f),
            Value::Float64(f) => *f,
            Value::Boolean(b) => f64::from(u8::from(*b)),
            Value::String(s) => s.trim().parse().map_err(|_| {
                TransformError::new(format!(
                    "Cast transformation failed to parse {s:?} as a number"
                ))
            })?,
            other => return Err(unsupported(other)),
        })
    };
    let as_i64 = |v: &Value| -> Result<i64, TransformError> {
        Ok(match v {
            Value::Int8(n) => i64::from(*n),
            Value::Int16(n) => i64::from(*n),
            Value::Int32(n) => i64::from(*n),
            Value::Int64(n) => *n,
            Value::Float32(f) => *f as i64,
            Value::Float64(f) => *f as i64,
            Value::Boolean(b) => i64::from(*b),
            Value::String(s) => s.trim().parse().map_err(|_| {
                TransformError::new(format!(
                    "Cast transformation failed to parse {s:?} as an integer"
                ))
            })?,
            other => return Err(unsupported(other)),
        })
    };
    if v.is_null() {
        return Ok(Value::Null);
    }
    if matches!(v, Value::Array(_) | Value::Map(_) | Value::Struct(_)) {
        return Err(unsupported(v));
    }
    // Java's narrowing casts (Number.byteValue(), ...).
    Ok(match to {
        CastType::Int8 => Value::Int8(as_i64(v)? as i8),
        CastType::Int16 => Value::Int16(as_i64(v)? as i16),
        CastType::Int32 => Value::Int32(as_i64(v)? as i32),
        CastType::Int64 => Value::Int64(as_i64(v)?),
        CastType::Float32 => Value::Float32(as_f64(v)? as f32),
        CastType::Float64 => Value::Float64(as_f64(v)?),
        CastType::Boolean => Value::Boolean(match v {
            Value::String(s) => s.trim().eq_ignore_ascii_case("true"),
            other => as_f64(other)? != 0.0,
        }),
        CastType::String => Value::String(java_to_string(v)),
    })
}

impl Transformation for Cast {
    fn apply(&mut self, mut r: ConnectRecord) -> Out {
        if self.side.get(&r).value.is_null() {
            return Ok(Some(r));
        }
        let data = self.side.take(&mut r);
        let out = match (self.whole, &data.schema) {
            (Some(t), schema) => {
                let v = cast(&data.value, t)?;
                match schema {
                    None => Data::schemaless(v),
                    Some(s) => {
                        let mut ns = Schema::new(t.schema_type());
                        ns.optional = s.optional;
                        Data::new(ns, v)
                    }
                }
            }
            (None, None) => {
                let map = require_map(&data.value, "cast types")?;
                let mut updated = map.clone();
                for (k, v) in &mut updated {
                    if let Some(t) = k.as_str().and_then(|k| self.target(k)) {
                        *v = cast(v, t)?;
                    }
                }
                Data::schemaless(Value::Map(updated))
            }
            (None, Some(schema)) => {
                let values = require_struct(&data.value, "cast types")?;
                let mut ns = schema.struct_basics();
                let mut updated = Vec::new();
                for f in &schema.fields {
                    let v = field_value(values, schema, &f.name, self.replace_null_with_default);
                    match self.target(&f.name) {
                        Some(t) => {
                            if !f.schema.kind.is_primitive()
                                || f.schema
                                    .logical()
                                    .is_some_and(|l| !matches!(l, Logical::Decimal(_)))
                                    && t != CastType::String
                            {
                                return Err(TransformError::new(format!(
                                    "Cast transformation does not support casting to/from {}",
                                    f.schema.kind.connect_name()
                                )));
                            }
                            let mut fs = Schema::new(t.schema_type());
                            fs.optional = f.schema.optional;
                            ns.fields.push(Field {
                                name: f.name.clone(),
                                schema: fs,
                            });
                            updated.push((f.name.clone(), cast(&v, t)?));
                        }
                        None => {
                            ns.fields.push(f.clone());
                            updated.push((f.name.clone(), v));
                        }
                    }
                }
                Data::new(ns, Value::Struct(updated))
            }
        };
        self.side.set(&mut r, out);
        Ok(Some(r))
    }
}
