//! What the record-log tests share: records, reading helpers, the shared NATS server.

use std::time::Duration;

use futures::StreamExt;
use wharf_executor::log::{Delivered, LogConsumer, LogRecord};

/// Longest any single condition in these tests may take.
pub const DEADLINE: Duration = Duration::from_secs(30);
/// Wait used when a fetch is expected to return nothing.
pub const EMPTY_FETCH_WAIT: Duration = Duration::from_millis(300);
/// Wait used when a fetch is expected to return records.
pub const FETCH_WAIT: Duration = Duration::from_secs(5);
/// Default NATS URL of the machine's shared server.
const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";

/// The shared nats-server's URL: `WHARF_NATS_URL`, else [`DEFAULT_NATS_URL`].
pub fn nats_url() -> String {
    std::env::var("WHARF_NATS_URL").unwrap_or_else(|_| DEFAULT_NATS_URL.to_string())
}

/// A stream prefix no other test uses.
pub fn unique_prefix() -> String {
    format!("wt_{}", &uuid::Uuid::new_v4().simple().to_string()[..10])
}

/// Removes every stream of `prefix` from the server at `url`.
pub async fn remove_streams(url: &str, prefix: &str) {
    let client = async_nats::connect(url).await.expect("connect for cleanup");
    let js = async_nats::jetstream::new(client);
    let upper = format!("{}_T_", prefix.to_ascii_uppercase());
    let mut names = js.stream_names();
    let mut mine = Vec::new();
    while let Some(name) = names.next().await {
        let name = name.expect("list streams");
        if name.starts_with(&upper) {
            mine.push(name);
        }
    }
    for name in mine {
        js.delete_stream(&name).await.expect("delete stream");
    }
}

/// A record whose key and value are `value`, with a header of bytes NATS headers could
/// not carry.
pub fn rec(value: &str) -> LogRecord {
    LogRecord {
        key: Some(value.as_bytes().to_vec()),
        value: value.as_bytes().to_vec(),
        headers: vec![("h".into(), vec![0, 13, 10, 255])],
        timestamp_ms: Some(1_700_000_000_000),
        partition: None,
    }
}

/// `rec("{prefix}{i}")` for each `i` of `range`.
pub fn recs(prefix: &str, range: std::ops::Range<u64>) -> Vec<LogRecord> {
    range.map(|i| rec(&format!("{prefix}{i}"))).collect()
}

/// Topic names as a consumer takes them.
pub fn topics(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// The value of a delivered record as text.
pub fn value(d: &Delivered) -> String {
    String::from_utf8(d.record.value.clone()).expect("utf8")
}

/// Fetches and acknowledges until `n` records were read; returns (topic, offset, value).
pub async fn read_and_ack(reader: &mut dyn LogConsumer, n: usize) -> Vec<(String, u64, String)> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while out.len() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "read {} of {n}",
            out.len()
        );
        let batch = reader.fetch(1_000, FETCH_WAIT).await.expect("fetch");
        let tokens: Vec<_> = batch.iter().map(|d| d.ack.clone()).collect();
        for d in &batch {
            out.push((d.record.topic.clone(), d.record.offset, value(d)));
        }
        reader.ack(&tokens).await.expect("ack");
    }
    out
}

/// Fails when a fetch returns anything within [`EMPTY_FETCH_WAIT`].
pub async fn assert_nothing_more(reader: &mut dyn LogConsumer) {
    let batch = reader.fetch(1_000, EMPTY_FETCH_WAIT).await.expect("fetch");
    let got: Vec<_> = batch.iter().map(|d| d.ack.position).collect();
    assert!(got.is_empty(), "expected no more records, got {got:?}");
}

/// Fetches until `n` records are held (unacknowledged).
pub async fn fetch_held(reader: &mut dyn LogConsumer, n: usize) -> Vec<Delivered> {
    let mut held = Vec::new();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while held.len() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "held {} of {n}",
            held.len()
        );
        held.extend(
            reader
                .fetch(n - held.len(), FETCH_WAIT)
                .await
                .expect("fetch"),
        );
    }
    held
}
