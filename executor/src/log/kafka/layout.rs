//! How a [`LogRecord`] lies in a Kafka record: one to one, as Kafka Connect lays out a
//! source record after its converters. The key is the Kafka key (absent stays absent), the
//! value the Kafka value, each header a Kafka header in order (name and bytes), the
//! timestamp the record's CreateTime. No envelope of Wharf's own, so a plain Kafka client
//! reads what Wharf wrote and Wharf reads what a plain producer wrote.
//!
//! Where Kafka holds more than a [`LogRecord`] can: a null value (a tombstone) and a null
//! header value are read as empty bytes; a record written without a timestamp gets the
//! producer's clock (Kafka records always carry one), as Connect's producer does.

use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::FutureRecord;

use wharf::sdk::SinkRecord;

use super::super::{LogError, LogRecord};

/// The Kafka record of `record` for `topic`: in the record's partition when it names one,
/// else in the one the producer's partitioner picks.
///
/// # Errors
/// A partition above Kafka's largest (`i32::MAX`), naming it.
pub(super) fn to_kafka<'a>(
    topic: &'a str,
    record: &'a LogRecord,
) -> Result<FutureRecord<'a, [u8], [u8]>, LogError> {
    let mut out = FutureRecord::to(topic).payload(record.value.as_slice());
    if let Some(partition) = record.partition {
        let partition = i32::try_from(partition).map_err(|_| {
            LogError::InvalidConfig(format!(
                "partition {partition} of a record for topic {topic:?} is not a Kafka partition"
            ))
        })?;
        out = out.partition(partition);
    }
    if let Some(key) = &record.key {
        out = out.key(key.as_slice());
    }
    if let Some(ts) = record.timestamp_ms {
        out = out.timestamp(ts);
    }
    if !record.headers.is_empty() {
        let headers = record.headers.iter().fold(
            OwnedHeaders::new_with_capacity(record.headers.len()),
            |headers, (name, value)| {
                headers.insert(Header {
                    key: name,
                    value: Some(value),
                })
            },
        );
        out = out.headers(headers);
    }
    Ok(out)
}

/// The [`LogRecord`] a Kafka message holds (see the module doc for null values).
pub(super) fn from_kafka(message: &impl Message) -> LogRecord {
    let headers = message.headers().map_or_else(Vec::new, |headers| {
        headers
            .iter()
            .map(|h| {
                (
                    h.key.to_string(),
                    h.value.map(<[u8]>::to_vec).unwrap_or_default(),
                )
            })
            .collect()
    });
    LogRecord {
        key: message.key().map(<[u8]>::to_vec),
        value: message.payload().map(<[u8]>::to_vec).unwrap_or_default(),
        headers,
        timestamp_ms: message.timestamp().to_millis(),
        partition: None,
    }
}

/// Bytes of `record` counted against [`super::super::LogLimits::max_fetch_bytes`]: key,
/// value, header names and values.
pub(super) fn record_bytes(record: &SinkRecord) -> usize {
    record.key.as_ref().map_or(0, Vec::len)
        + record.value.len()
        + record
            .headers
            .iter()
            .map(|(n, v)| n.len() + v.len())
            .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use rdkafka::Timestamp;
    use rdkafka::message::OwnedMessage;

    use super::*;

    fn message(
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: Option<OwnedHeaders>,
        timestamp: Timestamp,
    ) -> OwnedMessage {
        OwnedMessage::new(
            value.map(<[u8]>::to_vec),
            key.map(<[u8]>::to_vec),
            "t".into(),
            timestamp,
            0,
            7,
            headers,
        )
    }

    #[test]
    fn key_value_headers_and_timestamp_map_one_to_one() {
        let record = LogRecord {
            key: Some(vec![0, 255]),
            value: b"v".to_vec(),
            headers: vec![("h".into(), vec![0, 13, 10]), ("h".into(), vec![])],
            timestamp_ms: Some(1_700_000_000_000),
            partition: None,
        };
        let out = to_kafka("t", &record).expect("record");
        assert_eq!(out.topic, "t");
        assert_eq!(out.key, Some(&[0u8, 255][..]));
        assert_eq!(out.payload, Some(&b"v"[..]));
        assert_eq!(out.timestamp, Some(1_700_000_000_000));
        assert_eq!(out.partition, None, "the partitioner picks it");
        let back = message(
            out.key,
            out.payload,
            out.headers.clone(),
            Timestamp::CreateTime(1_700_000_000_000),
        );
        assert_eq!(from_kafka(&back), record);
    }

    #[test]
    fn an_absent_key_and_no_headers_stay_absent() {
        let record = LogRecord {
            key: None,
            value: b"v".to_vec(),
            headers: vec![],
            timestamp_ms: None,
            partition: None,
        };
        let out = to_kafka("t", &record).expect("record");
        assert_eq!(out.key, None);
        assert!(out.headers.is_none());
        assert_eq!(out.timestamp, None, "the producer's clock stamps it");
    }

    #[test]
    fn a_tombstone_and_a_null_header_value_read_as_empty_bytes() {
        let headers = OwnedHeaders::new().insert(Header::<&[u8]> {
            key: "n",
            value: None,
        });
        let back = from_kafka(&message(
            Some(b"k"),
            None,
            Some(headers),
            Timestamp::LogAppendTime(5),
        ));
        assert_eq!(
            back,
            LogRecord {
                key: Some(b"k".to_vec()),
                value: vec![],
                headers: vec![("n".into(), vec![])],
                timestamp_ms: Some(5),
                partition: None,
            }
        );
    }

    #[test]
    fn a_record_naming_its_partition_goes_there_and_one_past_kafkas_range_is_refused() {
        let record = LogRecord {
            key: None,
            value: b"v".to_vec(),
            headers: vec![],
            timestamp_ms: None,
            partition: Some(3),
        };
        assert_eq!(to_kafka("t", &record).expect("record").partition, Some(3));
        let too_far = LogRecord {
            partition: Some(u32::MAX),
            ..record
        };
        match to_kafka("t", &too_far) {
            Err(LogError::InvalidConfig(msg)) => assert!(msg.contains("4294967295"), "{msg}"),
            other => panic!("{:?}", other.map(|r| r.partition)),
        }
    }

    #[test]
    fn a_message_without_a_timestamp_reads_as_none() {
        let back = from_kafka(&message(None, Some(b"v"), None, Timestamp::NotAvailable));
        assert_eq!(back.timestamp_ms, None);
    }

    #[test]
    fn record_bytes_count_key_value_and_headers() {
        let record = LogRecord {
            key: Some(vec![1, 2]),
            value: vec![3; 10],
            headers: vec![("ab".into(), vec![4; 3])],
            timestamp_ms: None,
            partition: None,
        };
        assert_eq!(
            record_bytes(&record.into_sink_record("t", 0)),
            2 + 10 + 2 + 3
        );
    }
}
