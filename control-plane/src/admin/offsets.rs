//! A connector's offsets (KIP-875): read, altered and reset, only while nothing runs. A
//! source's offsets live in the store; a sink's are its consumer positions on the record
//! log, which only executors reach: read and moved there through one live executor
//! (`Executor.GetSinkOffsets` / `AlterSinkOffsets`), shown in Kafka Connect's sink shape
//! (`{"kafka_topic", "kafka_partition"}` => `{"kafka_offset"}`). What a record log cannot
//! do is refused with its reason (FAILED_PRECONDITION), never answered as done.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use tracing::info;
use wharf::pb::v1 as pb;

use crate::grpc::convert::{self, MAX_OFFSET_JSON_BYTES, MAX_OFFSETS_PER_REQUEST};
use crate::model::{ConnectorRecord, InstanceState, TargetState};
use crate::reconcile::client::CallError;

use super::{Admin, ApiError, ApiResult};

/// Kafka Connect's partition key of a sink offset: the topic.
pub const KAFKA_TOPIC_KEY: &str = "kafka_topic";
/// Kafka Connect's partition key of a sink offset: the partition.
pub const KAFKA_PARTITION_KEY: &str = "kafka_partition";
/// Kafka Connect's offset key of a sink offset: the next record's offset.
pub const KAFKA_OFFSET_KEY: &str = "kafka_offset";

/// Where a connector's offsets live.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Holder {
    /// The store (a source).
    Store,
    /// The record log, asked through this live executor (a sink).
    Log(String),
}

impl Admin {
    /// Where `rec`'s offsets live: the store for a source, the record log (through a live
    /// executor, [`offsets_host`]) for a sink. A plugin no live executor offers leaves
    /// the kind unknown: its stored offsets when there are some (only sources have
    /// them), else UNAVAILABLE rather than an empty answer that may be false.
    fn holder(&self, rec: &ConnectorRecord) -> ApiResult<Holder> {
        let kind = self
            .plugins()?
            .get(&rec.plugin)
            .map(|p| pb::PluginKind::try_from(p.info.kind));
        match kind {
            Some(Ok(pb::PluginKind::Sink)) => {}
            Some(Ok(pb::PluginKind::Source)) => return Ok(Holder::Store),
            Some(Ok(pb::PluginKind::Unspecified) | Err(_)) | None => {
                if !self.cluster.store.offsets(&rec.name)?.is_empty() {
                    return Ok(Holder::Store);
                }
                return Err(ApiError::RecordLogUnavailable(format!(
                    "no live executor offers plugin {:?}, so whether connector {:?} is a sink (whose offsets live on the record log) is unknown; retry once one registers",
                    rec.plugin, rec.name
                )));
            }
        }
        let view = self.cluster.executor_view()?;
        let hosts: Vec<Option<String>> = rec
            .tasks
            .iter()
            .chain(std::iter::once(&rec.connector))
            .map(|i| i.executor.clone())
            .collect();
        match offsets_host(&hosts, &view.placeable) {
            Some(id) => Ok(Holder::Log(id)),
            None => Err(ApiError::RecordLogUnavailable(format!(
                "no live executor to reach the record log holding sink connector {:?}'s offsets",
                rec.name
            ))),
        }
    }

    fn executor(&self, id: &str) -> ApiResult<crate::model::ExecutorRecord> {
        let view = self.cluster.executor_view()?;
        view.all.get(id).cloned().ok_or_else(|| {
            ApiError::RecordLogUnavailable(format!("executor {id:?} is no longer registered"))
        })
    }

    /// GetOffsets: a source's offsets from the store, a sink's from the record log, as
    /// JSON texts.
    ///
    /// # Errors
    /// NOT_FOUND; FAILED_PRECONDITION when the record log cannot read a sink's;
    /// UNAVAILABLE when no executor reaches it.
    pub async fn offsets(&self, name: &str) -> ApiResult<Vec<pb::SourceOffset>> {
        let rec = self.existing(name)?;
        match self.holder(&rec)? {
            Holder::Store => Ok(self
                .cluster
                .store
                .offsets(name)?
                .into_iter()
                .map(|(partition, offset)| pb::SourceOffset { partition, offset })
                .collect()),
            Holder::Log(id) => {
                let exec = self.executor(&id)?;
                let got = self
                    .cluster
                    .clients
                    .sink_offsets_on(&exec, name)
                    .await
                    .map_err(|e| sink_call_error(name, &id, e))?;
                Ok(got.iter().map(sink_offset_json).collect())
            }
        }
    }

    /// AlterOffsets (KIP-875): writes offsets (an empty offset removes the partition's)
    /// of a STOPPED connector; answers how many were written. A sink's move its consumer
    /// on the record log.
    ///
    /// # Errors
    /// INVALID_ARGUMENT naming `offsets[i].partition|offset`; FAILED_PRECONDITION unless
    /// STOPPED, or when the record log cannot move a sink's; UNAVAILABLE when no executor
    /// reaches it.
    pub async fn alter_offsets(
        &self,
        name: &str,
        offsets: Vec<pb::SourceOffset>,
    ) -> ApiResult<usize> {
        convert::parse_name(name)?;
        if offsets.len() > MAX_OFFSETS_PER_REQUEST {
            return Err(ApiError::InvalidArgument {
                field: "offsets".into(),
                reason: format!("more than {MAX_OFFSETS_PER_REQUEST} entries"),
            });
        }
        for (i, o) in offsets.iter().enumerate() {
            check_json_object(format!("offsets[{i}].partition"), &o.partition)?;
            if !o.offset.is_empty() {
                check_json_object(format!("offsets[{i}].offset"), &o.offset)?;
            }
        }
        let rec = self.existing(name)?;
        require_stopped(&rec)?;
        if let Holder::Log(id) = self.holder(&rec)? {
            let changes = parse_sink_offsets(&offsets)?;
            let n = changes.len();
            let exec = self.executor(&id)?;
            self.cluster
                .clients
                .alter_sink_offsets_on(
                    &exec,
                    pb::AlterSinkOffsetsRequest {
                        connector: name.to_owned(),
                        offsets: changes,
                        reset_all: false,
                    },
                )
                .await
                .map_err(|e| sink_call_error(name, &id, e))?;
            info!(connector = %name, partitions = n, executor = %id, "sink offsets altered on the record log");
            return Ok(n);
        }
        let pairs: Vec<(String, String)> = offsets
            .into_iter()
            .map(|o| (o.partition, o.offset))
            .collect();
        self.cluster.store.put_offsets(name, &pairs)?;
        info!(connector = %name, partitions = pairs.len(), "offsets altered");
        Ok(pairs.len())
    }

    /// ResetOffsets (KIP-875): removes every offset of a STOPPED connector (a sink's
    /// consumer positions on the record log: it starts again as a new sink does).
    ///
    /// # Errors
    /// NOT_FOUND; FAILED_PRECONDITION unless STOPPED, or when the record log cannot reset
    /// a sink's; UNAVAILABLE when no executor reaches it.
    pub async fn reset_offsets(&self, name: &str) -> ApiResult<()> {
        let rec = self.existing(name)?;
        require_stopped(&rec)?;
        if let Holder::Log(id) = self.holder(&rec)? {
            let exec = self.executor(&id)?;
            self.cluster
                .clients
                .alter_sink_offsets_on(
                    &exec,
                    pb::AlterSinkOffsetsRequest {
                        connector: name.to_owned(),
                        offsets: Vec::new(),
                        reset_all: true,
                    },
                )
                .await
                .map_err(|e| sink_call_error(name, &id, e))?;
            info!(connector = %name, executor = %id, "sink offsets reset on the record log");
            return Ok(());
        }
        self.cluster.store.reset_offsets(name)?;
        info!(connector = %name, "offsets reset");
        Ok(())
    }
}

/// The executor to reach a sink's record log through: the first of `hosts` (where its
/// tasks, then its connector instance, ran last) that is placeable now, else the first
/// placeable executor (every executor of a cluster uses the same log). `None` without
/// any. Pure.
fn offsets_host(hosts: &[Option<String>], placeable: &BTreeSet<String>) -> Option<String> {
    hosts
        .iter()
        .flatten()
        .find(|h| placeable.contains(*h))
        .or_else(|| placeable.iter().next())
        .cloned()
}

/// One sink position as Kafka Connect shows it.
fn sink_offset_json(o: &pb::SinkOffset) -> pb::SourceOffset {
    pb::SourceOffset {
        partition: json!({ KAFKA_TOPIC_KEY: o.topic, KAFKA_PARTITION_KEY: o.partition })
            .to_string(),
        offset: match o.offset {
            Some(n) => json!({ KAFKA_OFFSET_KEY: n }).to_string(),
            None => String::new(),
        },
    }
}

/// A failed call to executor `id` about sink `name`'s offsets, as the admin error its
/// code means.
fn sink_call_error(name: &str, id: &str, e: CallError) -> ApiError {
    match (e.code(), &e) {
        (Some(tonic::Code::InvalidArgument), CallError::Refused { message, .. }) => {
            ApiError::InvalidArgument {
                field: "offsets".into(),
                reason: message.clone(),
            }
        }
        (Some(tonic::Code::FailedPrecondition), CallError::Refused { message, .. }) => {
            ApiError::WrongState {
                name: name.to_owned(),
                reason: format!("cannot have its sink offsets changed or read: {message}"),
            }
        }
        (Some(tonic::Code::Unimplemented), _) => ApiError::WrongState {
            name: name.to_owned(),
            reason: format!(
                "is a sink, and executor {id:?} predates reading and moving sink offsets (upgrade it)"
            ),
        },
        _ => ApiError::RecordLogUnavailable(format!(
            "reading or moving sink connector {name:?}'s offsets through executor {id:?} failed: {e}"
        )),
    }
}

/// A sink's offsets as given (JSON texts in Kafka Connect's sink shape) into positions:
/// `{"kafka_topic": <non-empty string>, "kafka_partition": <integer >= 0>}` and
/// `{"kafka_offset": <integer >= 0>}` or no offset (reset the partition). Any other key
/// is refused. Pure.
///
/// # Errors
/// INVALID_ARGUMENT naming `offsets[i].partition|offset[.<key>]`.
fn parse_sink_offsets(offsets: &[pb::SourceOffset]) -> ApiResult<Vec<pb::SinkOffset>> {
    let bad = |field: String, reason: &str| ApiError::InvalidArgument {
        field,
        reason: reason.to_owned(),
    };
    let object = |field: String, text: &str| -> ApiResult<serde_json::Map<String, Value>> {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(bad(field, "is not a JSON object")),
        }
    };
    let count = |field: String, v: Option<&Value>, what: &str| -> ApiResult<u64> {
        match v {
            Some(Value::Number(n)) => n
                .as_u64()
                .ok_or_else(|| bad(field, &format!("{what} must be a non-negative integer"))),
            Some(_) => Err(bad(
                field,
                &format!("{what} must be a non-negative integer"),
            )),
            None => Err(bad(field, "is missing (a sink offset names it)")),
        }
    };
    let only = |field: String, m: &serde_json::Map<String, Value>, keys: &[&str]| match m
        .keys()
        .find(|k| !keys.contains(&k.as_str()))
    {
        Some(k) => Err(bad(
            format!("{field}.{k}"),
            &format!(
                "is not a key of a sink offset (they are {})",
                keys.join(", ")
            ),
        )),
        None => Ok(()),
    };
    let mut out = Vec::with_capacity(offsets.len());
    for (i, o) in offsets.iter().enumerate() {
        let pf = format!("offsets[{i}].partition");
        let p = object(pf.clone(), &o.partition)?;
        only(pf.clone(), &p, &[KAFKA_TOPIC_KEY, KAFKA_PARTITION_KEY])?;
        let topic = match p.get(KAFKA_TOPIC_KEY) {
            Some(Value::String(t)) if !t.is_empty() => t.clone(),
            Some(_) => {
                return Err(bad(
                    format!("{pf}.{KAFKA_TOPIC_KEY}"),
                    "must be a non-empty string (a topic name)",
                ));
            }
            None => {
                return Err(bad(
                    format!("{pf}.{KAFKA_TOPIC_KEY}"),
                    "is missing (a sink offset names it)",
                ));
            }
        };
        let partition = count(
            format!("{pf}.{KAFKA_PARTITION_KEY}"),
            p.get(KAFKA_PARTITION_KEY),
            "a partition",
        )?;
        let partition = u32::try_from(partition).map_err(|_| {
            bad(
                format!("{pf}.{KAFKA_PARTITION_KEY}"),
                "a partition must be below 4294967296",
            )
        })?;
        let offset = if o.offset.is_empty() {
            None
        } else {
            let of = format!("offsets[{i}].offset");
            let m = object(of.clone(), &o.offset)?;
            only(of.clone(), &m, &[KAFKA_OFFSET_KEY])?;
            Some(count(
                format!("{of}.{KAFKA_OFFSET_KEY}"),
                m.get(KAFKA_OFFSET_KEY),
                "an offset",
            )?)
        };
        out.push(pb::SinkOffset {
            topic,
            partition,
            offset,
        });
    }
    Ok(out)
}

/// KIP-875: offsets may change only while nothing runs.
fn require_stopped(rec: &ConnectorRecord) -> ApiResult<()> {
    if rec.deleting {
        return Err(ApiError::StillDeleting(rec.name.clone()));
    }
    let all_stopped = rec.connector.state == InstanceState::Stopped
        && rec.tasks.iter().all(|t| t.state == InstanceState::Stopped);
    if rec.target != TargetState::Stopped || !all_stopped {
        return Err(ApiError::WrongState {
            name: rec.name.clone(),
            reason: "is not STOPPED: stop it (StopConnector) and wait for STOPPED before changing offsets".into(),
        });
    }
    Ok(())
}

fn check_json_object(field: String, text: &str) -> ApiResult<()> {
    if text.len() > MAX_OFFSET_JSON_BYTES {
        return Err(ApiError::InvalidArgument {
            field,
            reason: format!("is longer than {MAX_OFFSET_JSON_BYTES} bytes"),
        });
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(_)) => Ok(()),
        _ => Err(ApiError::InvalidArgument {
            field,
            reason: "is not a JSON object".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::grpc::convert::RawConnector;
    use crate::model::ConnectorSpec;

    #[test]
    fn offsets_must_be_json_objects() {
        assert!(check_json_object("p".into(), "{\"a\":1}").is_ok());
        assert!(check_json_object("p".into(), "[1]").is_err());
        assert!(check_json_object("p".into(), "nope").is_err());
    }

    fn entry(partition: &str, offset: &str) -> pb::SourceOffset {
        pb::SourceOffset {
            partition: partition.into(),
            offset: offset.into(),
        }
    }

    #[test]
    fn a_sink_offset_in_connects_shape_becomes_a_position() {
        let got = parse_sink_offsets(&[
            entry(
                r#"{"kafka_topic":"t","kafka_partition":0}"#,
                r#"{"kafka_offset":5}"#,
            ),
            entry(r#"{"kafka_topic":"u","kafka_partition":2}"#, ""),
        ])
        .unwrap();
        assert_eq!(
            got,
            vec![
                pb::SinkOffset {
                    topic: "t".into(),
                    partition: 0,
                    offset: Some(5)
                },
                pb::SinkOffset {
                    topic: "u".into(),
                    partition: 2,
                    offset: None
                },
            ]
        );
    }

    #[test]
    fn a_sink_offset_without_a_topic_or_with_a_negative_offset_names_the_field() {
        let e = parse_sink_offsets(&[entry(r#"{"kafka_partition":0}"#, "")]).unwrap_err();
        assert!(
            e.to_string().contains("offsets[0].partition.kafka_topic"),
            "{e}"
        );
        let e = parse_sink_offsets(&[entry(
            r#"{"kafka_topic":"t","kafka_partition":0}"#,
            r#"{"kafka_offset":-1}"#,
        )])
        .unwrap_err();
        assert!(
            e.to_string().contains("offsets[0].offset.kafka_offset"),
            "{e}"
        );
        let e = parse_sink_offsets(&[entry(r#"{"kafka_topic":"t","kafka_partition":"0"}"#, "")])
            .unwrap_err();
        assert!(e.to_string().contains("kafka_partition"), "{e}");
    }

    #[test]
    fn a_source_shaped_offset_on_a_sink_is_refused_naming_the_key() {
        let e = parse_sink_offsets(&[entry(r#"{"file":"x"}"#, r#"{"position":1}"#)]).unwrap_err();
        assert!(e.to_string().contains("offsets[0].partition.file"), "{e}");
    }

    #[test]
    fn the_offsets_host_is_where_the_sink_ran_when_it_is_live() {
        let live: BTreeSet<String> = ["a".to_owned(), "b".to_owned()].into();
        assert_eq!(
            offsets_host(&[None, Some("b".into())], &live).as_deref(),
            Some("b")
        );
        assert_eq!(
            offsets_host(&[Some("gone".into())], &live).as_deref(),
            Some("a")
        );
        assert_eq!(offsets_host(&[Some("a".into())], &BTreeSet::new()), None);
    }

    #[test]
    fn a_sink_position_is_shown_in_connects_sink_shape() {
        let o = sink_offset_json(&pb::SinkOffset {
            topic: "t".into(),
            partition: 0,
            offset: Some(7),
        });
        let p: Value = serde_json::from_str(&o.partition).unwrap();
        let v: Value = serde_json::from_str(&o.offset).unwrap();
        assert_eq!(p, json!({"kafka_topic": "t", "kafka_partition": 0}));
        assert_eq!(v, json!({"kafka_offset": 7}));
    }

    #[test]
    fn a_running_connector_refuses_offset_changes() {
        let spec = ConnectorSpec::try_from(RawConnector {
            name: "c",
            config: &HashMap::from([("connector.class".to_owned(), "p".to_owned())]),
        })
        .unwrap();
        let rec = ConnectorRecord::new(&spec, TargetState::Started);
        assert!(matches!(
            require_stopped(&rec),
            Err(ApiError::WrongState { .. })
        ));
    }
}
