//! The record pipeline of a connector (docs/pipeline.md): converters (Kafka Connect's
//! `key.converter`, `value.converter`, `header.converter`), transforms with predicates
//! (KIP-66, KIP-585) and error handling (`errors.*`, KIP-298/KIP-610), configured exactly
//! as in Kafka Connect and decided here in plain functions of one record; the task loops
//! (`host/task/`) call them and do the I/O (the dead letter queue's appends, the retry
//! waits).
//!
//! A source record's way: the plugin's structured data (or its bytes, read by the
//! converters when a transform needs the value) → transforms → converters write the
//! bytes the log stores. A sink record's way: the log's bytes → converters read them →
//! transforms → the plugin gets the bytes written back by the converters and the data.

pub mod config;
pub mod convert;
pub mod errors;
pub mod timefmt;
pub mod transforms;

use wharf::sdk::data::{Data, HeaderValue, RecordData};
use wharf::sdk::{
    ConfigMap, ConnectRecord, PluginKind, SinkRecord, SourceRecord, TransformError, TransformPlugin,
};

pub use config::{ConverterDefaults, KeyProblem};
use convert::Converter;
pub use errors::{ErrorPolicy, Stage, StageError, Tolerance};

/// A connector's pipeline for one task: its converters, its transforms (each with its
/// state) and its error policy.
pub struct Pipeline {
    parsed: config::Parsed,
}

/// The problems of a connector config's pipeline keys (empty: none), for validate.
pub fn validate(
    config: &ConfigMap,
    kind: PluginKind,
    defaults: &ConverterDefaults,
    custom: &[TransformPlugin],
) -> Vec<KeyProblem> {
    match config::parse(config, kind, defaults, custom) {
        Ok(_) => Vec::new(),
        Err(problems) => problems,
    }
}

/// The wire's empty value is a tombstone: Wharf's records carry no null value.
fn value_bytes(v: &[u8]) -> Option<&[u8]> {
    (!v.is_empty()).then_some(v)
}

impl Pipeline {
    /// Reads the pipeline of a connector config.
    ///
    /// # Errors
    /// Every problem, on its key.
    pub fn new(
        config: &ConfigMap,
        kind: PluginKind,
        defaults: &ConverterDefaults,
        custom: &[TransformPlugin],
    ) -> Result<Self, Vec<KeyProblem>> {
        Ok(Self {
            parsed: config::parse(config, kind, defaults, custom)?,
        })
    }

    /// The connector's error policy.
    pub fn errors(&self) -> &ErrorPolicy {
        &self.parsed.errors
    }

    /// True when records pass unchanged: no transform, and key and value converters
    /// that write back what they read (the default `ByteArrayConverter`). The task loops
    /// then skip the pipeline (and a source's structured data still needs converting).
    pub fn is_identity(&self) -> bool {
        self.parsed.steps.is_empty()
            && self.parsed.key.is_identity()
            && self.parsed.value.is_identity()
    }

    /// Applies the transforms in order, each where its predicate (negated or not) holds.
    fn transform(
        &mut self,
        mut record: ConnectRecord,
    ) -> Result<Option<ConnectRecord>, StageError> {
        let parsed = &mut self.parsed;
        for step in &mut parsed.steps {
            if let Some((i, negate)) = step.predicate
                && parsed.predicates[i].test(&record) == negate
            {
                continue;
            }
            match step.transform.apply(record) {
                Ok(Some(r)) => record = r,
                Ok(None) => return Ok(None),
                Err(TransformError { message, retriable }) => {
                    return Err(StageError {
                        stage: Stage::Transformation,
                        class: step.class.clone(),
                        message: format!("transform {}: {message}", step.alias),
                        retriable,
                    });
                }
            }
        }
        Ok(Some(record))
    }

    fn read(conv: &Converter, stage: Stage, bytes: Option<&[u8]>) -> Result<Data, StageError> {
        conv.to_data(bytes).map_err(|message| StageError {
            stage,
            class: conv.class_name().to_owned(),
            message,
            retriable: false,
        })
    }

    fn read_source(
        conv: &Converter,
        stage: Stage,
        bytes: Option<&[u8]>,
    ) -> Result<Data, StageError> {
        conv.source_to_data(bytes).map_err(|message| StageError {
            stage,
            class: conv.class_name().to_owned(),
            message,
            retriable: false,
        })
    }

    fn write(conv: &Converter, stage: Stage, data: &Data) -> Result<Option<Vec<u8>>, StageError> {
        conv.from_data(data).map_err(|message| StageError {
            stage,
            class: conv.class_name().to_owned(),
            message,
            retriable: false,
        })
    }

    fn write_headers(
        &self,
        headers: Vec<(String, HeaderValue)>,
    ) -> Result<Vec<(String, Vec<u8>)>, StageError> {
        headers
            .into_iter()
            .map(|(k, v)| match v {
                HeaderValue::Bytes(b) => Ok((k, b)),
                HeaderValue::Data(d) => Ok((
                    k,
                    Self::write(&self.parsed.header, Stage::HeaderConverter, &d)?
                        .unwrap_or_default(),
                )),
            })
            .collect()
    }

    /// One source record through the pipeline: `Ok(None)` when a transform dropped it.
    /// A plugin's bytes are read by the key and value converters
    /// ([`Converter::source_to_data`]) and written back by them, transforms or not, so
    /// that the bytes on the log are those Connect's converter writes; byte-array
    /// converters without transforms pass them unchanged.
    ///
    /// # Errors
    /// The stage that failed.
    pub fn source(&mut self, record: SourceRecord) -> Result<Option<SourceRecord>, StageError> {
        let SourceRecord {
            topic,
            key,
            value,
            headers,
            timestamp_ms,
            partition,
            source_partition,
            source_offset,
            data,
        } = record;
        let (key_data, value_data) = match data {
            Some(RecordData { key, value }) => (key, value),
            None if self.is_identity() => {
                return Ok(Some(SourceRecord {
                    topic,
                    key,
                    value,
                    headers,
                    timestamp_ms,
                    partition,
                    source_partition,
                    source_offset,
                    data: None,
                }));
            }
            None => (
                Self::read_source(&self.parsed.key, Stage::KeyConverter, key.as_deref())?,
                Self::read_source(
                    &self.parsed.value,
                    Stage::ValueConverter,
                    value_bytes(&value),
                )?,
            ),
        };
        let connect = ConnectRecord {
            topic,
            partition: partition.and_then(|p| i32::try_from(p).ok()),
            key: key_data,
            value: value_data,
            headers: headers
                .into_iter()
                .map(|(k, v)| (k, HeaderValue::Bytes(v)))
                .collect(),
            timestamp_ms,
            offset: None,
        };
        let Some(out) = self.transform(connect)? else {
            return Ok(None);
        };
        Ok(Some(SourceRecord {
            key: Self::write(&self.parsed.key, Stage::KeyConverter, &out.key)?,
            value: Self::write(&self.parsed.value, Stage::ValueConverter, &out.value)?
                .unwrap_or_default(),
            headers: self.write_headers(out.headers)?,
            topic: out.topic,
            timestamp_ms: out.timestamp_ms,
            partition: out.partition.and_then(|p| u32::try_from(p).ok()),
            source_partition,
            source_offset,
            data: None,
        }))
    }

    /// One sink record through the pipeline: `Ok(None)` when a transform dropped it. The
    /// result carries the data the converters read (after the transforms) and the bytes
    /// they write back (the original bytes when no transform ran).
    ///
    /// # Errors
    /// The stage that failed.
    pub fn sink(&mut self, record: SinkRecord) -> Result<Option<SinkRecord>, StageError> {
        let key = Self::read(&self.parsed.key, Stage::KeyConverter, record.key.as_deref())?;
        let value = Self::read(
            &self.parsed.value,
            Stage::ValueConverter,
            value_bytes(&record.value),
        )?;
        if self.parsed.steps.is_empty() {
            return Ok(Some(SinkRecord {
                data: Some(RecordData { key, value }),
                ..record
            }));
        }
        let offset = record.offset;
        let partition = record.partition;
        let connect = ConnectRecord {
            topic: record.topic,
            partition: i32::try_from(partition).ok(),
            key,
            value,
            headers: record
                .headers
                .into_iter()
                .map(|(k, v)| (k, HeaderValue::Bytes(v)))
                .collect(),
            timestamp_ms: record.timestamp_ms,
            offset: Some(offset),
        };
        let Some(out) = self.transform(connect)? else {
            return Ok(None);
        };
        Ok(Some(SinkRecord {
            key: Self::write(&self.parsed.key, Stage::KeyConverter, &out.key)?,
            value: Self::write(&self.parsed.value, Stage::ValueConverter, &out.value)?
                .unwrap_or_default(),
            headers: self.write_headers(out.headers)?,
            topic: out.topic,
            timestamp_ms: out.timestamp_ms,
            offset,
            // Where it was read from: its acknowledgement is that partition's.
            partition,
            data: Some(RecordData {
                key: out.key,
                value: out.value,
            }),
        }))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use wharf::sdk::data::Value;

    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> ConfigMap {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn pipeline(config: &ConfigMap, kind: PluginKind) -> Pipeline {
        match Pipeline::new(config, kind, &ConverterDefaults::default(), &[]) {
            Ok(p) => p,
            Err(problems) => panic!("refused: {problems:?}"),
        }
    }

    fn sink_record(value: &str) -> SinkRecord {
        SinkRecord {
            partition: 0,
            topic: "orders".into(),
            key: None,
            value: value.as_bytes().to_vec(),
            headers: Vec::new(),
            timestamp_ms: Some(1),
            offset: 3,
            data: None,
        }
    }

    /// The chain the end-to-end test runs: MaskField + ValueToKey + RegexRouter with a
    /// predicate, JSON without schemas.
    fn chain() -> ConfigMap {
        cfg(&[
            ("value.converter", "json"),
            ("value.converter.schemas.enable", "false"),
            ("key.converter", "json"),
            ("key.converter.schemas.enable", "false"),
            ("transforms", "mask,key,route"),
            (
                "transforms.mask.type",
                "org.apache.kafka.connect.transforms.MaskField$Value",
            ),
            ("transforms.mask.fields", "ssn"),
            (
                "transforms.key.type",
                "org.apache.kafka.connect.transforms.ValueToKey",
            ),
            ("transforms.key.fields", "id"),
            (
                "transforms.route.type",
                "org.apache.kafka.connect.transforms.RegexRouter",
            ),
            ("transforms.route.regex", "(.*)"),
            ("transforms.route.replacement", "$1-masked"),
            ("transforms.route.predicate", "orders"),
            ("predicates", "orders"),
            (
                "predicates.orders.type",
                "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
            ),
            ("predicates.orders.pattern", "orders"),
        ])
    }

    #[test]
    fn a_sink_record_goes_through_the_chain_and_is_written_back_as_json() {
        let mut p = pipeline(&chain(), PluginKind::Sink);
        let out = p
            .sink(sink_record(r#"{"id":7,"ssn":"123-45"}"#))
            .unwrap()
            .unwrap();
        assert_eq!(out.topic, "orders-masked");
        let value: serde_json::Value = serde_json::from_slice(&out.value).unwrap();
        assert_eq!(value, json!({"id": 7, "ssn": ""}));
        assert_eq!(out.key.as_deref(), Some(br#"{"id":7}"#.as_slice()));
        assert_eq!(
            out.data.unwrap().key.value.get("id"),
            Some(&Value::Int64(7))
        );
    }

    #[test]
    fn the_predicate_keeps_the_router_off_other_topics() {
        let mut p = pipeline(&chain(), PluginKind::Sink);
        let mut r = sink_record(r#"{"id":1,"ssn":"x"}"#);
        r.topic = "customers".into();
        assert_eq!(p.sink(r).unwrap().unwrap().topic, "customers");
    }

    #[test]
    fn bad_json_fails_in_the_value_converter_stage() {
        let mut p = pipeline(&chain(), PluginKind::Sink);
        let e = p.sink(sink_record("not json")).unwrap_err();
        assert_eq!(e.stage, Stage::ValueConverter);
        assert_eq!(e.class, convert::JSON_CONVERTER);
    }

    #[test]
    fn a_transform_error_names_the_stage_alias_and_class() {
        let mut p = pipeline(&chain(), PluginKind::Sink);
        let e = p.sink(sink_record("[1,2]")).unwrap_err();
        assert_eq!(e.stage, Stage::Transformation);
        assert!(
            e.message.starts_with("transform mask: Only Map objects"),
            "{}",
            e.message
        );
    }

    #[test]
    fn the_default_pipeline_passes_records_unchanged() {
        let mut p = pipeline(&ConfigMap::new(), PluginKind::Sink);
        assert!(p.is_identity());
        let r = sink_record("\u{1}raw");
        let out = p.sink(r.clone()).unwrap().unwrap();
        assert_eq!((out.key, out.value, out.topic), (r.key, r.value, r.topic));
    }

    #[test]
    fn a_source_records_structured_data_is_written_by_the_converters() {
        let config = cfg(&[(
            "value.converter",
            "org.apache.kafka.connect.json.JsonConverter",
        )]);
        let mut p = pipeline(&config, PluginKind::Source);
        let record = SourceRecord {
            partition: None,
            topic: "t".into(),
            key: None,
            value: Vec::new(),
            headers: Vec::new(),
            timestamp_ms: None,
            source_partition: json!({}),
            source_offset: json!({}),
            data: Some(RecordData {
                key: Data::NULL,
                value: Data::string("hi"),
            }),
        };
        let out = p.source(record).unwrap().unwrap();
        assert_eq!(
            out.value,
            br#"{"schema":{"type":"string","optional":true},"payload":"hi"}"#.to_vec()
        );
        assert_eq!(out.key, None);
    }

    /// A custom transform: upper-cases a string value; `fail=true` makes it fail
    /// retriably.
    struct Upper {
        fail: bool,
    }

    impl wharf::sdk::Transformation for Upper {
        fn apply(&mut self, mut r: ConnectRecord) -> Result<Option<ConnectRecord>, TransformError> {
            if self.fail {
                return Err(TransformError::retriable("upstream busy"));
            }
            if let Value::String(s) = &mut r.value.value {
                *s = s.to_uppercase();
            }
            Ok(Some(r))
        }
    }

    fn upper_plugin() -> TransformPlugin {
        TransformPlugin {
            name: "com.example.Upper".into(),
            version: "1".into(),
            config_def: wharf::sdk::ConfigDef::new(),
            kind: wharf::sdk::TransformKind::Transformation(std::sync::Arc::new(
                |c: &ConfigMap| {
                    Ok(Box::new(Upper {
                        fail: c.get("fail").is_some_and(|v| v == "true"),
                    })
                        as Box<dyn wharf::sdk::Transformation>)
                },
            )),
        }
    }

    #[test]
    fn a_custom_transform_is_found_by_its_name_and_applied() {
        let config = cfg(&[
            ("value.converter", "string"),
            ("transforms", "up"),
            ("transforms.up.type", "com.example.Upper"),
        ]);
        let Ok(mut p) = Pipeline::new(
            &config,
            PluginKind::Sink,
            &ConverterDefaults::default(),
            &[upper_plugin()],
        ) else {
            panic!("refused");
        };
        let out = p.sink(sink_record("abc")).unwrap().unwrap();
        assert_eq!(out.value, b"ABC".to_vec());
        let problems = validate(
            &config,
            PluginKind::Sink,
            &ConverterDefaults::default(),
            &[],
        );
        assert_eq!(
            problems[0].0, "transforms.up.type",
            "unknown without the plugin"
        );
    }

    #[test]
    fn a_custom_transforms_retriable_error_says_so() {
        let config = cfg(&[
            ("value.converter", "string"),
            ("transforms", "up"),
            ("transforms.up.type", "com.example.Upper"),
            ("transforms.up.fail", "true"),
        ]);
        let Ok(mut p) = Pipeline::new(
            &config,
            PluginKind::Sink,
            &ConverterDefaults::default(),
            &[upper_plugin()],
        ) else {
            panic!("refused");
        };
        let e = p.sink(sink_record("abc")).unwrap_err();
        assert!(e.retriable);
        assert_eq!(
            (e.stage, e.class.as_str()),
            (Stage::Transformation, "com.example.Upper")
        );
    }

    fn bytes_record(key: Option<&str>, value: &str) -> SourceRecord {
        SourceRecord {
            partition: None,
            topic: "t".into(),
            key: key.map(|k| k.as_bytes().to_vec()),
            value: value.as_bytes().to_vec(),
            headers: Vec::new(),
            timestamp_ms: None,
            source_partition: json!({}),
            source_offset: json!({}),
            data: None,
        }
    }

    #[test]
    fn a_source_value_is_wrapped_in_the_envelope_without_any_transform() {
        let config = cfg(&[("value.converter", "json")]);
        let mut p = pipeline(&config, PluginKind::Source);
        let out = p
            .source(bytes_record(None, r#"{ "b": 1, "a": [true] }"#))
            .unwrap()
            .unwrap();
        assert_eq!(
            String::from_utf8(out.value).unwrap(),
            r#"{"schema":null,"payload":{"a":[true],"b":1}}"#
        );
    }

    #[test]
    fn a_source_value_already_in_the_envelope_keeps_its_schema() {
        let config = cfg(&[("value.converter", "json")]);
        let mut p = pipeline(&config, PluginKind::Source);
        let written = r#"{"schema":{"type":"string","optional":false},"payload":"hi"}"#;
        let out = p.source(bytes_record(None, written)).unwrap().unwrap();
        assert_eq!(String::from_utf8(out.value).unwrap(), written);
    }

    #[test]
    fn a_source_key_and_value_are_rewritten_by_their_converters_without_transforms() {
        let config = cfg(&[
            ("key.converter", "json"),
            ("key.converter.schemas.enable", "false"),
            ("value.converter", "json"),
            ("value.converter.schemas.enable", "false"),
        ]);
        let mut p = pipeline(&config, PluginKind::Source);
        let out = p
            .source(bytes_record(Some(" 7 "), "{\"x\" : 1.50}"))
            .unwrap()
            .unwrap();
        assert_eq!(out.key.as_deref(), Some(b"7".as_slice()));
        assert_eq!(out.value, br#"{"x":1.5}"#.to_vec());
    }

    #[test]
    fn a_source_value_that_is_not_json_fails_in_the_value_converter_stage_without_transforms() {
        let config = cfg(&[("value.converter", "json")]);
        let mut p = pipeline(&config, PluginKind::Source);
        let e = p.source(bytes_record(None, "not json")).unwrap_err();
        assert_eq!(e.stage, Stage::ValueConverter);
    }

    #[test]
    fn byte_array_converters_without_transforms_pass_a_source_record_unchanged() {
        let mut p = pipeline(&ConfigMap::new(), PluginKind::Source);
        let out = p
            .source(bytes_record(Some("k"), "\u{1}raw"))
            .unwrap()
            .unwrap();
        assert_eq!(out.value, b"\x01raw".to_vec());
        assert_eq!(out.key.as_deref(), Some(b"k".as_slice()));
    }

    #[test]
    fn a_dropped_source_record_is_none() {
        let config = cfg(&[("transforms", "f"), ("transforms.f.type", "Filter")]);
        let mut p = pipeline(&config, PluginKind::Source);
        let record = SourceRecord {
            partition: None,
            topic: "t".into(),
            key: None,
            value: b"x".to_vec(),
            headers: Vec::new(),
            timestamp_ms: None,
            source_partition: json!({}),
            source_offset: json!({}),
            data: None,
        };
        assert_eq!(p.source(record).unwrap(), None);
    }
}
