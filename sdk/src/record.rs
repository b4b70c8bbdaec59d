use serde::{Deserialize, Serialize};

use crate::data::RecordData;

/// A record produced by a source task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceRecord {
    /// Topic to append to.
    pub topic: String,
    /// Optional key bytes.
    pub key: Option<Vec<u8>>,
    /// Value bytes.
    pub value: Vec<u8>,
    /// Headers, in order; names may repeat.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Event time, Unix milliseconds, when the source knows it.
    pub timestamp_ms: Option<i64>,
    /// Source partition, a JSON object (for example `{"table":"public.orders"}`).
    pub source_partition: serde_json::Value,
    /// Position within the source partition, a JSON object (for example `{"id":42}`).
    /// Committed after the record log acknowledged the record.
    pub source_offset: serde_json::Value,
    /// A structured key and value instead of the bytes: when set, the connector's
    /// converters (`key.converter`, `value.converter`) write them and `key` and `value`
    /// are not used (docs/pipeline.md). `None` for a plugin that produces bytes.
    #[serde(skip)]
    pub data: Option<RecordData>,
}

/// A record delivered to a sink task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SinkRecord {
    /// Topic it was read from.
    pub topic: String,
    /// Optional key bytes.
    pub key: Option<Vec<u8>>,
    /// Value bytes.
    pub value: Vec<u8>,
    /// Headers, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Event time, Unix milliseconds, when known.
    pub timestamp_ms: Option<i64>,
    /// Position of the record in its topic, from 0 (or the backend's sequence number).
    pub offset: u64,
    /// The key and value as the connector's converters read them (after its transforms),
    /// when the connector configures converters or transforms; `key` and `value` are
    /// then the same written back by those converters. `None` when the record's bytes
    /// pass unchanged (docs/pipeline.md).
    #[serde(skip)]
    pub data: Option<RecordData>,
}
