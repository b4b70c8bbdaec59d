//! The transforms that work on the fields of a key or value: ExtractField,
//! Flatten, HeaderFrom, HoistField, InsertField, MaskField, ReplaceField,
//! SetSchemaMetadata, ValueToKey. Each works on a struct with its schema, or on a
//! schemaless map, as Connect's class of the same name does.

use std::collections::{BTreeMap, BTreeSet};

use wharf::sdk::data::{Data, Decimal, Field, HeaderValue, Schema, SchemaType, Value};
use wharf::sdk::{ConnectRecord, TransformError, Transformation};

use super::{
    KeyError, Keys, Side, field_value, into_map, map_get, map_put, name_set, require_map,
    require_struct,
};
use crate::pipeline::convert::values::java_to_string;

type Out = Result<Option<ConnectRecord>, TransformError>;

// ---------------------------------------------------------------- MaskField

/// `MaskField$Key` / `$Value`: `fields` replaced by their type's empty value (0, false,
/// "", an empty list or map, epoch, zero), or by `replacement` (numbers and strings
/// only).
pub struct MaskField {
    side: Side,
    fields: BTreeSet<String>,
    replacement: Option<String>,
    replace_null_with_default: bool,
}

impl MaskField {
    pub(super) fn new(side: Side, c: &Keys<'_>) -> Result<Self, KeyError> {
        let fields = name_set(c.non_empty_list("fields")?);
        let replacement = c.string("replacement").map(str::to_owned);
        if replacement.as_deref() == Some("") {
            return Err(("replacement".into(), "String must be non-empty".into()));
        }
        Ok(Self {
            side,
            fields,
            replacement,
            replace_null_with_default: c.boolean("replace.null.with.default", true)?,
        })
    }

    fn masked(&self, v: Value) -> Result<Value, TransformError> {
        if v.is_null() {
            return Ok(Value::Null);
        }
        match &self.replacement {
            None => mask_empty(&v),
            Some(r) => mask_with(&v, r),
        }
    }
}

fn mask_empty(v: &Value) -> Result<Value, TransformError> {
    Ok(match v {
        Value::Boolean(_) => Value::Boolean(false),
        Value::Int8(_) => Value::Int8(0),
        Value::Int16(_) => Value::Int16(0),
        Value::Int32(_) => Value::Int32(0),
        Value::Int64(_) => Value::Int64(0),
        Value::Float32(_) => Value::Float32(0.0),
        Value::Float64(_) => Value::Float64(0.0),
        Value::Decimal(d) => Value::Decimal(Decimal::zero(d.scale)),
        Value::Date(_) => Value::Date(0),
        Value::Time(_) => Value::Time(0),
        Value::Timestamp(_) => Value::Timestamp(0),
        Value::String(_) => Value::String(String::new()),
        Value::Array(_) => Value::Array(Vec::new()),
        Value::Map(_) => Value::Map(Vec::new()),
        other => {
            return Err(TransformError::new(format!(
                "Cannot mask value of type: class {}",
                other.java_class()
            )));
        }
    })
}

fn mask_with(v: &Value, r: &str) -> Result<Value, TransformError> {
    let number = || {
        TransformError::new(format!(
            "Unable to convert {r} (class java.lang.String) to number"
        ))
    };
    let t = r.trim();
    Ok(match v {
        Value::Int8(_) => Value::Int8(t.parse().map_err(|_| number())?),
        Value::Int16(_) => Value::Int16(t.parse().map_err(|_| number())?),
        Value::Int32(_) => Value::Int32(t.parse().map_err(|_| number())?),
        Value::Int64(_) => Value::Int64(t.parse().map_err(|_| number())?),
        Value::Float32(_) => Value::Float32(t.parse().map_err(|_| number())?),
        Value::Float64(_) => Value::Float64(t.parse().map_err(|_| number())?),
        Value::Decimal(_) => Value::Decimal(Decimal::parse(t).ok_or_else(number)?),
        Value::String(_) => Value::String(r.to_owned()),
        other => {
            return Err(TransformError::new(format!(
                "Cannot mask value of type class {} with custom replacement.",
                other.java_class()
            )));
        }
    })
}

impl Transformation for MaskField {
    fn apply(&mut self, mut r: ConnectRecord) -> Out {
        let Data { schema, value } = self.side.take(&mut r);
        let out = match schema {
            None => {
                let mut map = into_map(value, "mask fields")?;
                for f in &self.fields {
                    // The field's value is taken out and masked in its place (a missing
                    // one is a null, masked and added, as Connect does).
                    match map.iter_mut().find(|(k, _)| k.as_str() == Some(f.as_str())) {
                        Some((_, v)) => *v = self.masked(std::mem::replace(v, Value::Null))?,
                        None => map_put(&mut map, f, self.masked(Value::Null)?),
                    }
                }
                Data::schemaless(Value::Map(map))
            }
            Some(schema) => {
                let values = require_struct(&value, "mask fields")?;
                let mut updated = Vec::with_capacity(schema.fields.len());
                for f in &schema.fields {
                    let v = field_value(values, &schema, &f.name, self.replace_null_with_default);
                    let v = if self.fields.contains(&f.name) {
                        self.masked(v)?
                    } else {
                        v
                    };
                    updated.push((f.name.clone(), v));
                }
                Data::new(schema, Value::Struct(updated))
            }
        };
        self.side.set(&mut r, out);
        Ok(Some(r))
    }
}

// ---------------------------------------------------------------- ReplaceField

/// `ReplaceField$Key` / `$Value`: keep `include` (all when empty) minus `exclude`, then
/// rename per `renames` (`old:new`, ...).
pub struct ReplaceField {
    side: Side,
    exclude: BTreeSet<String>,
    include: BTreeSet<String>,
    renames: BTreeMap<String, String>,
    replace_null_with_default: bool,
}

impl ReplaceField {
    pub(super) fn new(side: Side, c: &Keys<'_>) -> Result<Self, KeyError> {
        let mut renames = BTreeMap::new();
        let list = c.list("renames").unwrap_or_default();
        for m in &list {
            let parts: Vec<&str> = m.split(':').collect();
            if parts.len() != 2 {
                return Err(("renames".into(), format!("Invalid rename mapping: {m}")));
            }
            renames.insert(parts[0].to_owned(), parts[1].to_owned());
        }
        Ok(Self {
            side,
            exclude: name_set(c.list("exclude").unwrap_or_default()),
            include: name_set(c.list("include").unwrap_or_default()),
            renames,
            replace_null_with_default: c.boolean("replace.null.with.default", true)?,
        })
    }

    fn keep(&self, name: &str) -> bool {
        !self.exclude.contains(name) && (self.include.is_empty() || self.include.contains(name))
    }

    fn renamed<'a>(&'a self, name: &'a str) -> &'a str {
        self.renames.get(name).map_or(name, String::as_str)
    }
}

impl Transformation for ReplaceField {
    fn apply(&mut self, mut r: ConnectRecord) -> Out {
        if self.side.get(&r).value.is_null() {
            return Ok(Some(r));
        }
        let Data { schema, value } = self.side.take(&mut r);
        let out = match &schema {
            None => {
                // In place: the map is the record's own.
                let mut updated = into_map(value, "field replacement")?;
                updated.retain(|(k, _)| k.as_str().is_some_and(|name| self.keep(name)));
                for (k, _) in &mut updated {
                    if let Some(new) = k.as_str().and_then(|name| self.renames.get(name)) {
                        *k = Value::String(new.clone());
                    }
                }
                Data::schemaless(Value::Map(updated))
            }
            Some(schema) => {
                let values = require_struct(&value, "field replacement")?;
                let mut new_schema = schema.struct_basics();
                let mut updated = Vec::new();
                for f in schema.fields.iter().filter(|f| self.keep(&f.name)) {
                    let name = self.renamed(&f.name).to_owned();
                    new_schema.fields.push(Field {
                        name: name.clone(),
                        schema: f.schema.clone(),
                    });
                    updated.push((
                        name,
                        field_value(values, schema, &f.name, self.replace_null_with_default),
                    ));
                }
                Data::new(new_schema, Value::Struct(updated))
            }
        };
        self.side.set(&mut r, out);
        Ok(Some(r))
    }
}

// ---------------------------------------------------------------- InsertField

/// A field name with `!` (required) or `?` (optional, the default) after it.
#[derive(Debug, Clone)]
struct Insertion {
    name: String,
    optional: bool,
}

fn insertion(spec: Option<&str>) -> Option<Insertion> {
    let spec = spec?;
    Some(if let Some(n) = spec.strip_suffix('?') {
        Insertion {
            name: n.to_owned(),
            optional: true,
        }
    } else if let Some(n) = spec.strip_suffix('!') {
        Insertion {
            name: n.to_owned(),
            optional: false,
        }
    } else {
        Insertion {
            name: spec.to_owned(),
            optional: true,
        }
    })
}

/// `InsertField$Key` / `$Value`: adds the topic, partition, offset (sinks only),
/// timestamp or a static value as fields. A null key or value passes unchanged.
pub struct InsertField {
    side: Side,
    topic: Option<Insertion>,
    partition: Option<Insertion>,
    offset: Option<Insertion>,
    timestamp: Option<Insertion>,
    static_field: Option<Insertion>,
    static_value: Option<String>,
    replace_null_with_default: bool,
}

impl InsertField {
    pub(super) fn new(side: Side, c: &Keys<'_>) -> Result<Self, KeyError> {
        let me = Self {
            side,
            topic: insertion(c.string("topic.field")),
            partition: insertion(c.string("partition.field")),
            offset: insertion(c.string("offset.field")),
            timestamp: insertion(c.string("timestamp.field")),
            static_field: insertion(c.string("static.field")),
            static_value: c.string("static.value").map(str::to_owned),
            replace_null_with_default: c.boolean("replace.null.with.default", true)?,
        };
        if me.topic.is_none()
            && me.partition.is_none()
            && me.offset.is_none()
            && me.timestamp.is_none()
            && me.static_field.is_none()
        {
            return Err(("topic.field".into(), "No field insertion configured".into()));
        }
        if let Some(f) = &me.static_field
            && me.static_value.is_none()
        {
            return Err((
                "static.value".into(),
                format!("No value specified for static field: {}", f.name),
            ));
        }
        Ok(me)
    }

    /// The (name, value, schema) of each insertion for `r` into a struct, in Connect's
    /// order.
    fn inserts(&self, r: &ConnectRecord) -> Result<Vec<(String, Value, Schema)>, TransformError> {
        let opt = |s: Schema, optional: bool| if optional { s.optional() } else { s };
        let mut out = Vec::new();
        if let Some(f) = &self.topic {
            out.push((
                f.name.clone(),
                Value::String(r.topic.clone()),
                opt(Schema::new(SchemaType::String), f.optional),
            ));
        }
        if let (Some(f), Some(p)) = (&self.partition, r.partition) {
            out.push((
                f.name.clone(),
                Value::Int32(p),
                opt(Schema::new(SchemaType::Int32), f.optional),
            ));
        }
        if let Some(f) = &self.offset {
            let offset = r.offset.ok_or_else(only_sink_records)?;
            out.push((
                f.name.clone(),
                Value::Int64(offset as i64),
                opt(Schema::new(SchemaType::Int64), f.optional),
            ));
        }
        if let (Some(f), Some(ts)) = (&self.timestamp, r.timestamp_ms) {
            out.push((
                f.name.clone(),
                Value::Timestamp(ts),
                opt(Schema::timestamp(), f.optional),
            ));
        }
        if let (Some(f), Some(v)) = (&self.static_field, &self.static_value) {
            out.push((
                f.name.clone(),
                Value::String(v.clone()),
                opt(Schema::new(SchemaType::String), f.optional),
            ));
        }
        Ok(out)
    }

    /// Puts the insertions for `r` into a schemaless map, in the order of
    /// [`InsertField::inserts`], without building their schemas.
    fn insert_schemaless(
        &self,
        r: &ConnectRecord,
        map: &mut Vec<(Value, Value)>,
    ) -> Result<(), TransformError> {
        if let Some(f) = &self.topic {
            map_put(map, &f.name, Value::String(r.topic.clone()));
        }
        if let (Some(f), Some(p)) = (&self.partition, r.partition) {
            map_put(map, &f.name, Value::Int32(p));
        }
        if let Some(f) = &self.offset {
            let offset = r.offset.ok_or_else(only_sink_records)?;
            map_put(map, &f.name, Value::Int64(offset as i64));
        }
        if let (Some(f), Some(ts)) = (&self.timestamp, r.timestamp_ms) {
            map_put(map, &f.name, Value::Int64(ts));
        }
        if let (Some(f), Some(v)) = (&self.static_field, &self.static_value) {
            map_put(map, &f.name, Value::String(v.clone()));
        }
        Ok(())
    }
}

/// InsertField's refusal of an offset field on a source record.
fn only_sink_records() -> TransformError {
    TransformError::new(
        "Only SinkRecord supported for [field insertion], found: org.apache.kafka.connect.source.SourceRecord",
    )
}

impl Transformation for InsertField {
    fn apply(&mut self, mut r: ConnectRecord) -> Out {
        if self.side.get(&r).value.is_null() {
            return Ok(Some(r));
        }
        let Data { schema, value } = self.side.take(&mut r);
        let out = match &schema {
            None => {
                let mut updated = into_map(value, "field insertion")?;
                self.insert_schemaless(&r, &mut updated)?;
                Data::schemaless(Value::Map(updated))
            }
            Some(schema) => {
                let values = require_struct(&value, "field insertion")?;
                let mut new_schema = schema.struct_basics();
                new_schema.fields = schema.fields.clone();
                let mut updated: Vec<(String, Value)> = schema
                    .fields
                    .iter()
                    .map(|f| {
                        (
                            f.name.clone(),
                            field_value(values, schema, &f.name, self.replace_null_with_default),
                        )
                    })
                    .collect();
                // The schema gets every configured field, the value only those this
                // record has (a partition or timestamp may be unknown).
                let declared = [
                    self.topic
                        .as_ref()
                        .map(|f| (f, Schema::new(SchemaType::String))),
                    self.partition
                        .as_ref()
                        .map(|f| (f, Schema::new(SchemaType::Int32))),
                    self.offset
                        .as_ref()
                        .map(|f| (f, Schema::new(SchemaType::Int64))),
                    self.timestamp.as_ref().map(|f| (f, Schema::timestamp())),
                    self.static_field
                        .as_ref()
                        .map(|f| (f, Schema::new(SchemaType::String))),
                ];
                for (f, s) in declared.into_iter().flatten() {
                    let s = if f.optional { s.optional() } else { s };
                    new_schema.fields.push(Field {
                        name: f.name.clone(),
                        schema: s,
                    });
                    updated.push((f.name.clone(), Value::Null));
                }
                for (name, v, _) in self.inserts(&r)? {
                    if let Some(slot) = updated.iter_mut().rev().find(|(n, _)| *n == name) {
                        slot.1 = v;
                    }
                }
                Data::new(new_schema, Value::Struct(updated))
            }
        };
        self.side.set(&mut r, out);
        Ok(Some(r))
    }
}

// ---------------------------------------------------------------- ValueToKey

/// `ValueToKey`: the key becomes a struct (or map) of the value's `fields`.
pub struct ValueToKey {
    fields: Vec<String>,
    replace_null_with_default: bool,
}

impl ValueToKey {
    pub(super) fn new(c: &Keys<'_>) -> Result<Self, KeyError> {
        Ok(Self {
            fields: c.non_empty_list("fields")?,
            replace_null_with_default: c.boolean("replace.null.with.default", true)?,
        })
    }
}

impl Transformation for ValueToKey {
    fn apply(&mut self, mut r: ConnectRecord) -> Out {
        r.key = match &r.value.schema {
            None => {
                let map = require_map(&r.value.value, "copying fields from value to key")?;
                Data::schemaless(Value::Map(
                    self.fields
                        .iter()
                        .map(|f| (Value::String(f.clone()), map_get(map, f)))
                        .collect(),
                ))
            }
            Some(schema) => {
                let values = require_struct(&r.value.value, "copying fields from value to key")?;
                let mut key_schema = Schema::new(SchemaType::Struct);
                let mut key = Vec::with_capacity(self.fields.len());
                for f in &self.fields {
                    let field = schema
                        .field(f)
                        .ok_or_else(|| TransformError::new(format!("Field does not exist: {f}")))?;
                    key_schema.fields.push(field.clone());
                    key.push((
                        f.clone(),
                        field_value(values, schema, f, self.replace_null_with_default),
                    ));
                }
                Data::new(key_schema, Value::Struct(key))
            }
        };
        Ok(Some(r))
    }
}

// ---------------------------------------------------------------- ExtractField

/// `ExtractField$Key` / `$Value`: the key or value becomes its field `field` (a null
/// passes unchanged). `field.syntax.version=V1` (the default): the name is literal.
pub struct ExtractField {
    side: Side,
    field: String,
    replace_null_with_default: bool,
}

impl ExtractField {
    pub(super) fn new(side: Side, c: &Keys<'_>) -> Result<Self, KeyError> {
        match c.string("field.syntax.version").map(str::trim) {
            None | Some("V1" | "v1") => {}
            Some("V2" | "v2") => {
                return Err((
                    "field.syntax.version".into(),
                    "Wharf implements field.syntax.version V1 only (nested paths of KIP-821 are not supported yet)".into(),
                ));
            }
            Some(_) => {
                return Err((
                    "field.syntax.version".into(),
                    "String must be one of: V1, V2".into(),
                ));
            }
        }
        Ok(Self {
            side,
            field: c.required("field")?.to_owned(),
            replace_null_with_default: c.boolean("replace.null.with.default", true)?,
        })
    }
}

impl Transformation for ExtractField {
    fn apply(&mut self, mut r: ConnectRecord) -> Out {
        let data = self.side.take(&mut r);
        let out = match &data.schema {
            None => match &data.value {
                Value::Null => Data::NULL,
                v => Data::schemaless(map_get(require_map(v, "field extraction")?, &self.field)),
            },
            Some(schema) => {
                let field = schema
                    .field(&self.field)
                    .ok_or_else(|| TransformError::new(format!("Unknown field: {}", self.field)))?;
                let value = match &data.value {
                    Value::Null => Value::Null,
                    v => field_value(
                        require_struct(v, "field extraction")?,
                        schema,
                        &self.field,
                        self.replace_null_with_default,
                    ),
                };
                Data::new(field.schema.clone(), value)
            }
        };
        self.side.set(&mut r, out);
        Ok(Some(r))
    }
}

// ---------------------------------------------------------------- HoistField

/// `HoistField$Key` / `$Value`: wraps the key or value in a struct (or map) of one field.
pub struct HoistField {
    side: Side,
    field: String,
}

impl HoistField {
    pub(super) fn new(side: Side, c: &Keys<'_>) -> Result<Self, KeyError> {
        Ok(Self {
            side,
            field: c.required("field")?.to_owned(),
        })
    }
}

impl Transformation for HoistField {
    fn apply(&mut self, mut r: ConnectRecord) -> Out {
        let data = self.side.take(&mut r);
        let out = match data.schema {
            None => Data::schemaless(Value::Map(vec![(
                Value::String(self.field.clone()),
                data.value,
            )])),
            Some(schema) => Data::new(
                Schema::structure(vec![Field {
                    name: self.field.clone(),
                    schema,
                }]),
                Value::Struct(vec![(self.field.clone(), data.value)]),
            ),
        };
        self.side.set(&mut r, out);
        Ok(Some(r))
    }
}

// ---------------------------------------------------------------- Flatten

/// `Flatten$Key` / `$Value`: nested structs (or maps) become fields named by their path
/// joined with `delimiter` (`.`); arrays stay as they are.
pub struct Flatten {
    side: Side,
    delimiter: String,
}

impl Flatten {
    pub(super) fn new(side: Side, c: &Keys<'_>) -> Result<Self, KeyError> {
        Ok(Self {
            side,
            delimiter: c.string("delimiter").unwrap_or(".").to_owned(),
        })
    }

    fn name(&self, prefix: &str, name: &str) -> String {
        if prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{prefix}{}{name}", self.delimiter)
        }
    }

    fn flatten_map(
        &self,
        map: &[(Value, Value)],
        prefix: &str,
        out: &mut Vec<(Value, Value)>,
    ) -> Result<(), TransformError> {
        for (k, v) in map {
            let key = match k {
                Value::String(s) => s.clone(),
                other => java_to_string(other),
            };
            let name = self.name(prefix, &key);
            match v {
                Value::Map(inner) => self.flatten_map(inner, &name, out)?,
                Value::Struct(_) => {
                    return Err(TransformError::new(format!(
                        "Flatten transformation does not support class org.apache.kafka.connect.data.Struct for record without schemas (for field {name})."
                    )));
                }
                other => out.push((Value::String(name), other.clone())),
            }
        }
        Ok(())
    }

    fn flatten_schema(
        &self,
        schema: &Schema,
        prefix: &str,
        optional: bool,
        out: &mut Schema,
    ) -> Result<(), TransformError> {
        for f in &schema.fields {
            let name = self.name(prefix, &f.name);
            let optional = optional || f.schema.optional;
            match f.schema.kind {
                SchemaType::Struct => self.flatten_schema(&f.schema, &name, optional, out)?,
                SchemaType::Map => {
                    return Err(TransformError::new(format!(
                        "Flatten transformation does not support MAP for record with schemas (for field {name})."
                    )));
                }
                _ => {
                    let mut s = f.schema.clone();
                    s.optional = optional;
                    out.fields.push(Field { name, schema: s });
                }
            }
        }
        Ok(())
    }

    fn flatten_struct(
        &self,
        schema: &Schema,
        values: Option<&[(String, Value)]>,
        prefix: &str,
        out: &mut Vec<(String, Value)>,
    ) {
        for f in &schema.fields {
            let name = self.name(prefix, &f.name);
            let v = values
                .and_then(|vs| vs.iter().find(|(n, _)| *n == f.name))
                .map_or(Value::Null, |(_, v)| v.clone());
            match (f.schema.kind, v) {
                (SchemaType::Struct, Value::Struct(inner)) => {
                    self.flatten_struct(&f.schema, Some(&inner), &name, out)
                }
                (SchemaType::Struct, _) => self.flatten_struct(&f.schema, None, &name, out),
                (_, v) => out.push((name, v)),
            }
        }
    }
}

impl Transformation for Flatten {
    fn apply(&mut self, mut r: ConnectRecord) -> Out {
        if self.side.get(&r).value.is_null() {
            return Ok(Some(r));
        }
        let data = self.side.take(&mut r);
        let out = match &data.schema {
            None => {
                let mut flat = Vec::new();
                self.flatten_map(require_map(&data.value, "flattening")?, "", &mut flat)?;
                Data::schemaless(Value::Map(flat))
            }
            Some(schema) => {
                let values = require_struct(&data.value, "flattening")?;
                let mut new_schema = schema.struct_basics();
                self.flatten_schema(schema, "", schema.optional, &mut new_schema)?;
                let mut flat = Vec::new();
                self.flatten_struct(schema, Some(values), "", &mut flat);
                Data::new(new_schema, Value::Struct(flat))
            }
        };
        self.side.set(&mut r, out);
        Ok(Some(r))
    }
}

// ---------------------------------------------------------------- SetSchemaMetadata

/// `SetSchemaMetadata$Key` / `$Value`: sets the schema's name and/or version.
pub struct SetSchemaMetadata {
    side: Side,
    name: Option<String>,
    version: Option<i32>,
}

impl SetSchemaMetadata {
    pub(super) fn new(side: Side, c: &Keys<'_>) -> Result<Self, KeyError> {
        let name = c.string("schema.name").map(str::to_owned);
        let version = c.int("schema.version")?;
        c.boolean("replace.null.with.default", true)?;
        if name.is_none() && version.is_none() {
            return Err((
                "schema.name".into(),
                "Neither schema name nor version configured".into(),
            ));
        }
        Ok(Self {
            side,
            name,
            version,
        })
    }
}

impl Transformation for SetSchemaMetadata {
    fn apply(&mut self, mut r: ConnectRecord) -> Out {
        let data = self.side.get(&r);
        if data.value.is_null() && data.schema.is_none() {
            return Ok(Some(r));
        }
        let Some(mut schema) = data.schema.clone() else {
            return Err(TransformError::new(
                "Schema required for [updating schema metadata]",
            ));
        };
        if let Some(n) = &self.name {
            schema.name = Some(n.clone());
        }
        if let Some(v) = self.version {
            schema.version = Some(v);
        }
        let value = self.side.take(&mut r).value;
        self.side.set(&mut r, Data::new(schema, value));
        Ok(Some(r))
    }
}

// ---------------------------------------------------------------- HeaderFrom

/// `HeaderFrom$Key` / `$Value`: copies or moves `fields` into headers `headers` (in the
/// same order), with the fields' schemas.
pub struct HeaderFrom {
    side: Side,
    fields: Vec<String>,
    headers: Vec<String>,
    moving: bool,
    replace_null_with_default: bool,
}

impl HeaderFrom {
    pub(super) fn new(side: Side, c: &Keys<'_>) -> Result<Self, KeyError> {
        let fields = c.non_empty_list("fields")?;
        let headers = c.non_empty_list("headers")?;
        let moving = match c.required("operation")? {
            "move" => true,
            "copy" => false,
            _ => {
                return Err((
                    "operation".into(),
                    "String must be one of: move, copy".into(),
                ));
            }
        };
        if fields.len() != headers.len() {
            return Err((
                "headers".into(),
                "'fields' config must have the same number of elements as 'headers' config.".into(),
            ));
        }
        Ok(Self {
            side,
            fields,
            headers,
            moving,
            replace_null_with_default: c.boolean("replace.null.with.default", true)?,
        })
    }
}

impl Transformation for HeaderFrom {
    fn apply(&mut self, mut r: ConnectRecord) -> Out {
        let purpose = if self.moving {
            "header move"
        } else {
            "header copy"
        };
        let data = self.side.take(&mut r);
        let out = match &data.schema {
            None => {
                let map = require_map(&data.value, purpose)?;
                let mut updated = map.clone();
                for (f, h) in self.fields.iter().zip(&self.headers) {
                    let v = map_get(map, f);
                    if self.moving {
                        updated.retain(|(k, _)| k.as_str() != Some(f.as_str()));
                    }
                    r.headers
                        .push((h.clone(), HeaderValue::Data(Data::schemaless(v))));
                }
                Data::schemaless(Value::Map(updated))
            }
            Some(schema) => {
                let values = require_struct(&data.value, purpose)?;
                for (f, h) in self.fields.iter().zip(&self.headers) {
                    let field = schema
                        .field(f)
                        .ok_or_else(|| TransformError::new(format!("Field does not exist: {f}")))?;
                    let v = field_value(values, schema, f, self.replace_null_with_default);
                    r.headers.push((
                        h.clone(),
                        HeaderValue::Data(Data::new(field.schema.clone(), v)),
                    ));
                }
                if self.moving {
                    let mut new_schema = schema.struct_basics();
                    let mut updated = Vec::new();
                    for f in schema
                        .fields
                        .iter()
                        .filter(|f| !self.fields.contains(&f.name))
                    {
                        new_schema.fields.push(f.clone());
                        updated.push((
                            f.name.clone(),
                            field_value(values, schema, &f.name, self.replace_null_with_default),
                        ));
                    }
                    Data::new(new_schema, Value::Struct(updated))
                } else {
                    data.clone()
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
        let name = builtin_transform_name(name).expect("built-in");
        build_transform(name, &config(cfg))
            .expect("configured")
            .apply(r)
    }

    fn build_err(name: &str, cfg: &[(&str, &str)]) -> (String, String) {
        match build_transform(name, &config(cfg)) {
            Ok(_) => panic!("{name} accepted {cfg:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn mask_field_masks_struct_fields_with_their_types_empty_value() {
        let r = record(Data::NULL, person(7, "a@b.c"));
        let out = apply(
            "org.apache.kafka.connect.transforms.MaskField$Value",
            &[("fields", "email,age")],
            r,
        )
        .unwrap()
        .unwrap();
        assert_eq!(out.value.value.get("email"), Some(&s("")));
        assert_eq!(out.value.value.get("age"), Some(&Value::Int32(0)));
        assert_eq!(out.value.value.get("id"), Some(&Value::Int32(7)));
        assert_eq!(out.value.schema, Some(person_schema()));
    }

    #[test]
    fn mask_field_with_a_replacement_replaces_strings_and_numbers() {
        let r = record(
            Data::NULL,
            Data::schemaless(map(&[("ssn", s("123")), ("n", Value::Int64(5))])),
        );
        let out = apply(
            "MaskField$Value",
            &[("fields", "ssn,n"), ("replacement", "9")],
            r,
        )
        .unwrap()
        .unwrap();
        assert_eq!(out.value.value.get("ssn"), Some(&s("9")));
        assert_eq!(out.value.value.get("n"), Some(&Value::Int64(9)));
    }

    #[test]
    fn mask_field_schemaless_adds_a_null_for_a_missing_field_as_connect_does() {
        let r = record(Data::NULL, Data::schemaless(map(&[("a", s("x"))])));
        let out = apply("MaskField$Value", &[("fields", "b")], r)
            .unwrap()
            .unwrap();
        assert_eq!(out.value.value.get("b"), Some(&Value::Null));
    }

    #[test]
    fn mask_field_refuses_a_non_numeric_replacement_for_a_number() {
        let r = record(Data::NULL, Data::schemaless(map(&[("n", Value::Int64(5))])));
        let e = apply(
            "MaskField$Value",
            &[("fields", "n"), ("replacement", "x")],
            r,
        )
        .unwrap_err();
        assert!(e.message.starts_with("Unable to convert x"), "{e}");
    }

    #[test]
    fn mask_field_requires_fields_and_a_map_without_schema() {
        assert_eq!(build_err("MaskField$Value", &[]).0, "fields");
        let r = record(Data::NULL, Data::schemaless(s("plain")));
        let e = apply("MaskField$Value", &[("fields", "a")], r).unwrap_err();
        assert_eq!(
            e.message,
            "Only Map objects supported in absence of schema for [mask fields], found: java.lang.String"
        );
    }

    #[test]
    fn value_to_key_makes_a_struct_key_of_the_fields_in_order() {
        let r = record(Data::NULL, person(7, "a@b.c"));
        let out = apply("ValueToKey", &[("fields", "id")], r)
            .unwrap()
            .unwrap();
        assert_eq!(
            out.key.value,
            Value::Struct(vec![("id".into(), Value::Int32(7))])
        );
        assert_eq!(
            out.key.schema.unwrap().fields,
            vec![field("id", Schema::new(SchemaType::Int32))]
        );
    }

    #[test]
    fn value_to_key_names_a_missing_field() {
        let r = record(Data::NULL, person(7, "a@b.c"));
        let e = apply("ValueToKey", &[("fields", "nope")], r).unwrap_err();
        assert_eq!(e.message, "Field does not exist: nope");
    }

    #[test]
    fn value_to_key_schemaless_makes_a_map_key() {
        let r = record(
            Data::NULL,
            Data::schemaless(map(&[("id", Value::Int64(1)), ("x", s("y"))])),
        );
        let out = apply("ValueToKey", &[("fields", "id")], r)
            .unwrap()
            .unwrap();
        assert_eq!(out.key, Data::schemaless(map(&[("id", Value::Int64(1))])));
    }

    #[test]
    fn replace_field_excludes_includes_and_renames() {
        let r = record(Data::NULL, person(7, "a@b.c"));
        let out = apply(
            "ReplaceField$Value",
            &[("exclude", "age"), ("renames", "email:mail")],
            r,
        )
        .unwrap()
        .unwrap();
        let names: Vec<_> = out
            .value
            .schema
            .unwrap()
            .fields
            .into_iter()
            .map(|f| f.name)
            .collect();
        assert_eq!(names, ["id", "mail"]);
        assert_eq!(out.value.value.get("mail"), Some(&s("a@b.c")));
        let r = record(
            Data::NULL,
            Data::schemaless(map(&[("a", s("1")), ("b", s("2"))])),
        );
        let out = apply("ReplaceField$Value", &[("include", "b")], r)
            .unwrap()
            .unwrap();
        assert_eq!(out.value.value, map(&[("b", s("2"))]));
        assert_eq!(
            build_err("ReplaceField$Value", &[("renames", "a")]),
            ("renames".into(), "Invalid rename mapping: a".into())
        );
    }

    #[test]
    fn insert_field_adds_topic_offset_and_static_fields() {
        let r = record(Data::NULL, person(7, "a@b.c"));
        let out = apply(
            "InsertField$Value",
            &[
                ("topic.field", "t!"),
                ("offset.field", "o"),
                ("static.field", "s"),
                ("static.value", "v"),
            ],
            r,
        )
        .unwrap()
        .unwrap();
        let schema = out.value.schema.unwrap();
        assert!(!schema.field("t").unwrap().schema.optional);
        assert!(schema.field("o").unwrap().schema.optional);
        assert_eq!(out.value.value.get("t"), Some(&s("orders")));
        assert_eq!(out.value.value.get("o"), Some(&Value::Int64(42)));
        assert_eq!(out.value.value.get("s"), Some(&s("v")));
    }

    #[test]
    fn insert_field_passes_a_tombstone_and_refuses_an_offset_on_a_source_record() {
        let r = record(Data::NULL, Data::NULL);
        let out = apply("InsertField$Value", &[("topic.field", "t")], r.clone())
            .unwrap()
            .unwrap();
        assert_eq!(out, r);
        let mut src = record(Data::NULL, Data::schemaless(map(&[])));
        src.offset = None;
        let e = apply("InsertField$Value", &[("offset.field", "o")], src).unwrap_err();
        assert!(e.message.starts_with("Only SinkRecord supported"), "{e}");
        assert_eq!(
            build_err("InsertField$Value", &[]).1,
            "No field insertion configured"
        );
        assert_eq!(
            build_err("InsertField$Value", &[("static.field", "s")]).0,
            "static.value"
        );
    }

    #[test]
    fn extract_field_takes_the_field_and_its_schema() {
        let r = record(person(7, "a@b.c"), Data::NULL);
        let out = apply("ExtractField$Key", &[("field", "id")], r)
            .unwrap()
            .unwrap();
        assert_eq!(
            out.key,
            Data::new(Schema::new(SchemaType::Int32), Value::Int32(7))
        );
        let r = record(person(7, "a@b.c"), Data::NULL);
        let e = apply("ExtractField$Key", &[("field", "zz")], r).unwrap_err();
        assert_eq!(e.message, "Unknown field: zz");
        let r = record(Data::NULL, Data::schemaless(map(&[("a", Value::Int64(1))])));
        let out = apply("ExtractField$Value", &[("field", "a")], r)
            .unwrap()
            .unwrap();
        assert_eq!(out.value, Data::schemaless(Value::Int64(1)));
    }

    #[test]
    fn hoist_field_wraps_the_value() {
        let r = record(Data::NULL, Data::string("x"));
        let out = apply("HoistField$Value", &[("field", "line")], r)
            .unwrap()
            .unwrap();
        assert_eq!(
            out.value.value,
            Value::Struct(vec![("line".into(), s("x"))])
        );
        let r = record(Data::NULL, Data::schemaless(Value::Int64(3)));
        let out = apply("HoistField$Value", &[("field", "n")], r)
            .unwrap()
            .unwrap();
        assert_eq!(out.value.value, map(&[("n", Value::Int64(3))]));
    }

    #[test]
    fn flatten_joins_nested_names_and_propagates_optional() {
        let inner =
            Schema::structure(vec![field("city", Schema::new(SchemaType::String))]).optional();
        let schema = Schema::structure(vec![
            field("id", Schema::new(SchemaType::Int32)),
            field("addr", inner),
        ]);
        let value = Value::Struct(vec![
            ("id".into(), Value::Int32(1)),
            (
                "addr".into(),
                Value::Struct(vec![("city".into(), s("Oslo"))]),
            ),
        ]);
        let out = apply(
            "Flatten$Value",
            &[("delimiter", "_")],
            record(Data::NULL, Data::new(schema, value)),
        )
        .unwrap()
        .unwrap();
        let schema = out.value.schema.unwrap();
        assert!(schema.field("addr_city").unwrap().schema.optional);
        assert_eq!(out.value.value.get("addr_city"), Some(&s("Oslo")));
        let r = record(
            Data::NULL,
            Data::schemaless(map(&[("a", map(&[("b", Value::Int64(1))]))])),
        );
        let out = apply("Flatten$Value", &[], r).unwrap().unwrap();
        assert_eq!(out.value.value, map(&[("a.b", Value::Int64(1))]));
    }

    #[test]
    fn set_schema_metadata_sets_name_and_version_and_needs_a_schema() {
        let out = apply(
            "SetSchemaMetadata$Value",
            &[("schema.name", "n"), ("schema.version", "3")],
            record(Data::NULL, person(1, "x")),
        )
        .unwrap()
        .unwrap();
        let schema = out.value.schema.unwrap();
        assert_eq!(
            (schema.name.as_deref(), schema.version),
            (Some("n"), Some(3))
        );
        let e = apply(
            "SetSchemaMetadata$Value",
            &[("schema.name", "n")],
            record(Data::NULL, Data::schemaless(Value::Int64(1))),
        )
        .unwrap_err();
        assert_eq!(e.message, "Schema required for [updating schema metadata]");
        assert_eq!(
            build_err("SetSchemaMetadata$Value", &[]).1,
            "Neither schema name nor version configured"
        );
    }

    #[test]
    fn header_from_moves_a_field_into_a_header_with_its_schema() {
        let out = apply(
            "HeaderFrom$Value",
            &[("fields", "email"), ("headers", "h"), ("operation", "move")],
            record(Data::NULL, person(1, "x")),
        )
        .unwrap()
        .unwrap();
        assert!(out.value.schema.unwrap().field("email").is_none());
        assert_eq!(
            out.headers,
            vec![(
                "h".into(),
                HeaderValue::Data(Data::new(
                    Schema::new(SchemaType::String).optional(),
                    s("x")
                ))
            )]
        );
        assert_eq!(
            build_err(
                "HeaderFrom$Value",
                &[("fields", "a,b"), ("headers", "h"), ("operation", "copy")]
            )
            .0,
            "headers"
        );
        assert_eq!(
            build_err(
                "HeaderFrom$Value",
                &[("fields", "a"), ("headers", "h"), ("operation", "steal")]
            )
            .0,
            "operation"
        );
    }

    #[test]
    fn cast_casts_fields_and_whole_values() {
        let out = apply(
            "Cast$Value",
            &[("spec", "id:string,age:float64")],
            record(Data::NULL, person(7, "x")),
        )
        .unwrap()
        .unwrap();
        assert_eq!(out.value.value.get("id"), Some(&s("7")));
        assert_eq!(out.value.value.get("age"), Some(&Value::Float64(30.0)));
        assert_eq!(
            out.value.schema.unwrap().field("id").unwrap().schema.kind,
            SchemaType::String
        );
        let out = apply(
            "Cast$Value",
            &[("spec", "int32")],
            record(Data::NULL, Data::string("12")),
        )
        .unwrap()
        .unwrap();
        assert_eq!(out.value.value, Value::Int32(12));
        assert_eq!(build_err("Cast$Value", &[("spec", "a:decimal")]).0, "spec");
    }
}
