//! The executor's event counters and histograms, and the record counts of a task's work
//! loop: incremented where things happen (the host, the plugin runtime, the registry
//! client, the gRPC edge) and read by the metrics renderer (`observe.rs`) at scrape time.
//! A leaf: it knows nothing of the host or the runtimes, so everything below the renderer
//! may count without importing it. Every name is listed with its meaning and unit in
//! `docs/observability.md`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Counter: requests refused because they were decided for another registration, lease,
/// generation or incarnation (fencing), by `reason` (one of [`REFUSAL_REASONS`]).
pub const REQUESTS_REFUSED: &str = "wharf_executor_requests_refused_total";
/// Counter: instances abandoned (their stop overran its timeout).
pub const INSTANCES_ABANDONED: &str = "wharf_executor_instances_abandoned_total";
/// Counter: plugin runtimes written off because calls of abandoned instances held half of
/// their workers or more (`runtime.rs`, the write-off).
pub const PLUGIN_RUNTIMES_WRITTEN_OFF: &str = "wharf_executor_plugin_runtimes_written_off_total";
/// Counter: times this executor fenced itself (lease ran out or its epoch was refused).
pub const FENCES: &str = "wharf_executor_fences_total";
/// Histogram, seconds: one offset commit of a source task to the control plane.
pub const SOURCE_COMMIT_SECONDS: &str = "wharf_source_offset_commit_duration_seconds";
/// Histogram, seconds: one `put` of a sink task.
pub const SINK_PUT_SECONDS: &str = "wharf_sink_put_duration_seconds";
/// Histogram, seconds: one `flush` of a sink task.
pub const SINK_FLUSH_SECONDS: &str = "wharf_sink_flush_duration_seconds";

/// Counter: records that failed in a connector's pipeline (a converter, a transform, or
/// reported errant by a sink), by `stage` (Kafka Connect's stage name).
pub const RECORD_ERRORS: &str = "wharf_task_record_errors_total";
/// Counter: failing records skipped under `errors.tolerance=all`.
pub const RECORDS_SKIPPED: &str = "wharf_task_records_skipped_total";
/// Counter: records written to a sink's dead letter queue.
pub const DEAD_LETTER_RECORDS: &str = "wharf_task_deadletterqueue_records_total";

/// Counts a record that failed in `stage` (see [`RECORD_ERRORS`]).
pub fn record_error(stage: &'static str) {
    metrics::counter!(RECORD_ERRORS, "stage" => stage).increment(1);
}

/// Counts a skipped record (see [`RECORDS_SKIPPED`]).
pub fn record_skipped() {
    metrics::counter!(RECORDS_SKIPPED).increment(1);
}

/// Counts `n` records written to a dead letter queue (see [`DEAD_LETTER_RECORDS`]).
pub fn dead_letters(n: usize) {
    metrics::counter!(DEAD_LETTER_RECORDS).increment(n as u64);
}

/// Every `reason` label of [`REQUESTS_REFUSED`].
pub const REFUSAL_REASONS: [&str; 6] = [
    "epoch",
    "lease",
    "stale_generation",
    "stale_incarnation",
    "never_assigned",
    "deletion_token",
];

/// Counts one fencing refusal in [`REQUESTS_REFUSED`] under `reason` (one of
/// [`REFUSAL_REASONS`]).
pub fn refused(reason: &'static str) {
    metrics::counter!(REQUESTS_REFUSED, "reason" => reason).increment(1);
}

/// Records an abandoned instance (see [`INSTANCES_ABANDONED`]).
pub fn abandoned() {
    metrics::counter!(INSTANCES_ABANDONED).increment(1);
}

/// Records a plugin runtime's write-off (see [`PLUGIN_RUNTIMES_WRITTEN_OFF`]).
pub fn plugin_runtime_written_off() {
    metrics::counter!(PLUGIN_RUNTIMES_WRITTEN_OFF).increment(1);
}

/// Records a self-fence (see [`FENCES`]).
pub fn fenced() {
    metrics::counter!(FENCES).increment(1);
}

/// Records a duration since `started` in the histogram `name` ([`SOURCE_COMMIT_SECONDS`],
/// [`SINK_PUT_SECONDS`] or [`SINK_FLUSH_SECONDS`]).
pub fn took(name: &'static str, started: Instant) {
    metrics::histogram!(name).record(started.elapsed().as_secs_f64());
}

/// Describes every counter and histogram (the `# HELP` line Prometheus shows beside the
/// series, from the same meanings as docs/observability.md) and sets each counter to 0,
/// so that a counter shows before its first event.
pub fn register() {
    use metrics::{Unit, describe_counter, describe_histogram};
    describe_counter!(
        REQUESTS_REFUSED,
        "Requests refused because they were decided for another registration, lease, generation or incarnation (fencing), by reason."
    );
    describe_counter!(
        RECORD_ERRORS,
        "Records that failed in a connector's pipeline (converter, transform, or reported errant by a sink), by Kafka Connect's stage name."
    );
    describe_counter!(
        RECORDS_SKIPPED,
        "Failing records skipped under errors.tolerance=all."
    );
    describe_counter!(
        DEAD_LETTER_RECORDS,
        "Records written to a sink connector's dead letter queue."
    );
    describe_counter!(
        INSTANCES_ABANDONED,
        "Instances abandoned because their stop overran its timeout."
    );
    describe_counter!(
        PLUGIN_RUNTIMES_WRITTEN_OFF,
        "Plugin runtimes written off because abandoned calls held half of their workers or more."
    );
    describe_counter!(
        FENCES,
        "Times this executor fenced itself (lease ran out or its epoch was refused)."
    );
    describe_histogram!(
        SOURCE_COMMIT_SECONDS,
        Unit::Seconds,
        "Duration of one offset commit of a source task to the control plane."
    );
    describe_histogram!(
        SINK_PUT_SECONDS,
        Unit::Seconds,
        "Duration of one put of a sink task."
    );
    describe_histogram!(
        SINK_FLUSH_SECONDS,
        Unit::Seconds,
        "Duration of one flush of a sink task."
    );
    for reason in REFUSAL_REASONS {
        metrics::counter!(REQUESTS_REFUSED, "reason" => reason).increment(0);
    }
    metrics::counter!(INSTANCES_ABANDONED).increment(0);
    metrics::counter!(PLUGIN_RUNTIMES_WRITTEN_OFF).increment(0);
    metrics::counter!(FENCES).increment(0);
}

/// Record counts of one task instance, kept by its work loop. For a source: records
/// `poll` returned, appended to the log, and whose offsets the control plane committed;
/// for a sink: records `put`, and flushed with the log acknowledged. Bytes are key plus
/// value of the records polled (source) or put (sink).
#[derive(Debug, Default)]
pub struct RecordStats {
    /// Source: returned by `poll`. Sink: handed to `put`.
    pub records: AtomicU64,
    /// Source: appended to the record log. Sink: unused (0).
    pub written: AtomicU64,
    /// Source: offsets committed. Sink: flushed and acknowledged.
    pub committed: AtomicU64,
    /// Key and value bytes of `records`.
    pub bytes: AtomicU64,
}

impl RecordStats {
    /// Adds `n` records of `bytes` bytes to `records`/`bytes`.
    pub fn add_records(&self, n: usize, bytes: usize) {
        self.records.fetch_add(n as u64, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Adds `n` to `written`.
    pub fn add_written(&self, n: usize) {
        self.written.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Adds `n` to `committed`.
    pub fn add_committed(&self, n: u64) {
        self.committed.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds these counts into `sum`.
    pub fn add_into(&self, sum: &RecordStats) {
        for (from, to) in [
            (&self.records, &sum.records),
            (&self.written, &sum.written),
            (&self.committed, &sum.committed),
            (&self.bytes, &sum.bytes),
        ] {
            to.fetch_add(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// The value of one of the counts, as a metric sample.
    pub fn get(v: &AtomicU64) -> f64 {
        v.load(Ordering::Relaxed) as f64
    }
}

/// Key plus value bytes of a record.
pub fn record_bytes(key: Option<&Vec<u8>>, value: &[u8]) -> usize {
    key.map_or(0, Vec::len) + value.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_bytes_count_key_and_value() {
        assert_eq!(record_bytes(Some(&vec![1, 2]), &[3, 4, 5]), 5);
        assert_eq!(record_bytes(None, &[3]), 1);
    }

    #[test]
    fn counts_add_into_a_sum() {
        let (a, b, sum) = (
            RecordStats::default(),
            RecordStats::default(),
            RecordStats::default(),
        );
        a.add_records(2, 10);
        b.add_records(1, 5);
        b.add_written(1);
        b.add_committed(1);
        a.add_into(&sum);
        b.add_into(&sum);
        assert_eq!(RecordStats::get(&sum.records), 3.0);
        assert_eq!(RecordStats::get(&sum.bytes), 15.0);
        assert_eq!(RecordStats::get(&sum.written), 1.0);
        assert_eq!(RecordStats::get(&sum.committed), 1.0);
    }
}
