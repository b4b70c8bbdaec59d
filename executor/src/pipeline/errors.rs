//! Error handling of the record pipeline (KIP-298, KIP-610): the `errors.*` settings,
//! the stages a record fails in (Connect's `Stage` names), the retry schedule, and the
//! dead letter queue's record with Connect's context headers (`__connect.errors.*`).

use crate::log::LogRecord;

/// `errors.tolerance`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tolerance {
    /// A failing record fails the task (the default).
    None,
    /// A failing record is skipped (logged, sent to a sink's dead letter queue).
    All,
}

/// Where a record failed, by Connect's `Stage` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Reading or writing the key.
    KeyConverter,
    /// Reading or writing the value.
    ValueConverter,
    /// Reading or writing a header.
    HeaderConverter,
    /// A transform (or its predicate).
    Transformation,
    /// The sink task's `put` (an errant record it reported).
    TaskPut,
}

impl Stage {
    /// Connect's name of the stage (`VALUE_CONVERTER`, ...), which the status trace, the
    /// log and the `__connect.errors.stage` header carry.
    pub fn name(self) -> &'static str {
        match self {
            Stage::KeyConverter => "KEY_CONVERTER",
            Stage::ValueConverter => "VALUE_CONVERTER",
            Stage::HeaderConverter => "HEADER_CONVERTER",
            Stage::Transformation => "TRANSFORMATION",
            Stage::TaskPut => "TASK_PUT",
        }
    }
}

/// A record's failure in one stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageError {
    /// The stage.
    pub stage: Stage,
    /// The class that failed (`org.apache.kafka.connect.json.JsonConverter`, a
    /// transform's class, the plugin's name).
    pub class: String,
    /// What failed (no secrets: converters and transforms quote no config values).
    pub message: String,
    /// Whether trying again may succeed.
    pub retriable: bool,
}

impl std::fmt::Display for StageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stage {} ({}) failed: {}",
            self.stage.name(),
            self.class,
            self.message
        )
    }
}

/// Default of `errors.retry.delay.max.ms`, in milliseconds (Connect's).
pub const DEFAULT_RETRY_DELAY_MAX_MS: u64 = 60_000;

/// First wait before retrying a retriable failure, in milliseconds; each later wait
/// doubles, up to `errors.retry.delay.max.ms` (Connect's `RETRIES_DELAY_MIN_MS`).
pub const RETRY_DELAY_MIN_MS: u64 = 300;

/// A connector's `errors.*` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorPolicy {
    /// `errors.tolerance` (default none).
    pub tolerance: Tolerance,
    /// `errors.retry.timeout` in milliseconds: how long a retriable failure is retried;
    /// 0 (the default) never, -1 without end.
    pub retry_timeout_ms: i64,
    /// `errors.retry.delay.max.ms` (default 60,000).
    pub retry_delay_max_ms: u64,
    /// `errors.log.enable` (default false): log each failure.
    pub log: bool,
    /// `errors.log.include.messages` (default false): the log line carries the record's
    /// key, value and headers.
    pub log_messages: bool,
    /// `errors.deadletterqueue.topic.name` (sinks; empty: none).
    pub dlq_topic: Option<String>,
    /// `errors.deadletterqueue.context.headers.enable` (default false).
    pub dlq_context_headers: bool,
}

impl Default for ErrorPolicy {
    fn default() -> Self {
        Self {
            tolerance: Tolerance::None,
            retry_timeout_ms: 0,
            retry_delay_max_ms: DEFAULT_RETRY_DELAY_MAX_MS,
            log: false,
            log_messages: false,
            dlq_topic: None,
            dlq_context_headers: false,
        }
    }
}

impl ErrorPolicy {
    /// The wait before attempt `attempt` (1 for the first retry) of a retriable failure
    /// that began `elapsed_ms` ago, or `None` when the retry timeout is spent.
    pub fn retry_delay_ms(&self, attempt: u32, elapsed_ms: u64) -> Option<u64> {
        let delay = RETRY_DELAY_MIN_MS
            .saturating_mul(1_u64 << attempt.saturating_sub(1).min(20))
            .min(self.retry_delay_max_ms);
        match self.retry_timeout_ms {
            -1 => Some(delay),
            t if t <= 0 => None,
            t => {
                let left = (t as u64).checked_sub(elapsed_ms)?;
                (left > 0).then_some(delay.min(left))
            }
        }
    }
}

/// Prefix of Connect's dead letter queue context headers.
pub const HEADER_PREFIX: &str = "__connect.errors.";

/// What a dead letter queue record says about where its original came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrantContext<'a> {
    /// The original record's topic.
    pub topic: &'a str,
    /// Its partition (0 where the record log has one partition per topic).
    pub partition: i32,
    /// Its position in the topic.
    pub offset: u64,
    /// The connector.
    pub connector: &'a str,
    /// The task index.
    pub task: u32,
}

/// The Java exception class Connect would name for a failure of `stage`.
fn exception_class(stage: Stage) -> &'static str {
    match stage {
        Stage::KeyConverter
        | Stage::ValueConverter
        | Stage::HeaderConverter
        | Stage::Transformation => "org.apache.kafka.connect.errors.DataException",
        Stage::TaskPut => "org.apache.kafka.connect.errors.ConnectException",
    }
}

/// The dead letter queue's copy of a failed sink record: its original key, value and
/// headers (the bytes as consumed), with Connect's context headers after them when
/// `context_headers` (KIP-298: topic, partition, offset, connector name, task id,
/// stage, class, exception class, message and trace).
pub fn dlq_record(
    original: &LogRecord,
    ctx: &ErrantContext<'_>,
    error: &StageError,
    context_headers: bool,
) -> LogRecord {
    let mut record = original.clone();
    if context_headers {
        let exception = exception_class(error.stage);
        let h = |name: &str, value: String| (format!("{HEADER_PREFIX}{name}"), value.into_bytes());
        record.headers.extend([
            h("topic", ctx.topic.to_owned()),
            h("partition", ctx.partition.to_string()),
            h("offset", ctx.offset.to_string()),
            h("connector.name", ctx.connector.to_owned()),
            h("task.id", ctx.task.to_string()),
            h("stage", error.stage.name().to_owned()),
            h("class.name", error.class.clone()),
            h("exception.class.name", exception.to_owned()),
            h("exception.message", error.message.clone()),
            h(
                "exception.stacktrace",
                format!("{exception}: {}", error.message),
            ),
        ]);
    }
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(timeout: i64, max: u64) -> ErrorPolicy {
        ErrorPolicy {
            retry_timeout_ms: timeout,
            retry_delay_max_ms: max,
            ..ErrorPolicy::default()
        }
    }

    #[test]
    fn no_retry_timeout_means_no_retry() {
        assert_eq!(ErrorPolicy::default().retry_delay_ms(1, 0), None);
    }

    #[test]
    fn retries_back_off_doubling_up_to_the_max_delay_within_the_timeout() {
        let p = policy(10_000, 1_000);
        assert_eq!(p.retry_delay_ms(1, 0), Some(300));
        assert_eq!(p.retry_delay_ms(2, 300), Some(600));
        assert_eq!(p.retry_delay_ms(3, 900), Some(1_000));
        assert_eq!(
            p.retry_delay_ms(4, 9_900),
            Some(100),
            "never past the timeout"
        );
        assert_eq!(p.retry_delay_ms(5, 10_000), None);
    }

    #[test]
    fn a_timeout_of_minus_one_retries_without_end() {
        assert_eq!(
            policy(-1, 60_000).retry_delay_ms(40, u64::MAX),
            Some(60_000)
        );
    }

    #[test]
    fn the_dlq_record_keeps_the_original_and_adds_connects_context_headers() {
        let original = LogRecord {
            partition: None,
            key: Some(b"k".to_vec()),
            value: b"not json".to_vec(),
            headers: vec![("h".into(), b"v".to_vec())],
            timestamp_ms: Some(5),
        };
        let ctx = ErrantContext {
            topic: "in",
            partition: 0,
            offset: 9,
            connector: "c",
            task: 2,
        };
        let error = StageError {
            stage: Stage::ValueConverter,
            class: "org.apache.kafka.connect.json.JsonConverter".into(),
            message: "bad".into(),
            retriable: false,
        };
        let plain = dlq_record(&original, &ctx, &error, false);
        assert_eq!(plain, original);
        let with = dlq_record(&original, &ctx, &error, true);
        let header = |n: &str| {
            with.headers
                .iter()
                .find(|(k, _)| k == &format!("__connect.errors.{n}"))
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        };
        assert_eq!(header("topic").as_deref(), Some("in"));
        assert_eq!(header("offset").as_deref(), Some("9"));
        assert_eq!(header("task.id").as_deref(), Some("2"));
        assert_eq!(header("stage").as_deref(), Some("VALUE_CONVERTER"));
        assert_eq!(
            header("class.name").as_deref(),
            Some("org.apache.kafka.connect.json.JsonConverter")
        );
        assert_eq!(
            header("exception.class.name").as_deref(),
            Some("org.apache.kafka.connect.errors.DataException")
        );
        assert_eq!(header("exception.message").as_deref(), Some("bad"));
        assert_eq!(
            with.headers[0],
            ("h".into(), b"v".to_vec()),
            "the original headers first"
        );
    }
}
