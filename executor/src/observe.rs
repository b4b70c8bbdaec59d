//! What an executor shows on its metrics listener (`--metrics-listen`) and in
//! `grpc.health.v1`: per-task record counts and the instances it hosts, rendered at
//! scrape time from the host (so a task's series are gone once its instance is), event
//! counters recorded where requests are refused and instances abandoned, and health that
//! follows the registration. Every name is listed with its meaning and unit in
//! `docs/observability.md`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use wharf::observability::{Exposition, Health, Probe};

use crate::host::{Host, HostError, InstanceState};
use crate::registry_client::{LeaseStanding, Registry};

/// Counter: requests refused because they were decided for another registration, lease,
/// generation or incarnation (fencing), by `reason`.
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

/// How often the health watch looks at the registration, in milliseconds (well below any
/// lease, so that a fence shows within this long).
pub const HEALTH_INTERVAL_MS: u64 = 200;

/// The `reason` label of a refusal counted in [`REQUESTS_REFUSED`], or `None` for an
/// error that is not a fencing refusal.
pub fn refusal_reason(e: &HostError) -> Option<&'static str> {
    match e {
        HostError::EpochMismatch { .. } => Some("epoch"),
        HostError::LeaseMayHaveExpired { .. } => Some("lease"),
        HostError::StaleGeneration { .. } => Some("stale_generation"),
        HostError::StaleIncarnation { .. } => Some("stale_incarnation"),
        HostError::NeverAssigned { .. } => Some("never_assigned"),
        HostError::InvalidArgument { .. }
        | HostError::UnknownPlugin(_)
        | HostError::GenerationStopped { .. }
        | HostError::PluginRuntime { .. }
        | HostError::NotHosted(_)
        | HostError::ShuttingDown
        | HostError::NotRunning { .. }
        | HostError::TaskConfigsFailed { .. } => None,
    }
}

/// Every `reason` of [`REQUESTS_REFUSED`].
const REFUSAL_REASONS: [&str; 5] = [
    "epoch",
    "lease",
    "stale_generation",
    "stale_incarnation",
    "never_assigned",
];

/// Counts `e` in [`REQUESTS_REFUSED`] when it is a fencing refusal.
pub fn refused(e: &HostError) {
    if let Some(reason) = refusal_reason(e) {
        metrics::counter!(REQUESTS_REFUSED, "reason" => reason).increment(1);
    }
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

    fn get(v: &AtomicU64) -> f64 {
        v.load(Ordering::Relaxed) as f64
    }
}

/// Key plus value bytes of a record.
pub fn record_bytes(key: Option<&Vec<u8>>, value: &[u8]) -> usize {
    key.map_or(0, Vec::len) + value.len()
}

/// Label value of a hosted instance's state in `wharf_executor_instance_count`.
pub fn instance_state_label(state: &InstanceState, abandoned: bool) -> &'static str {
    if abandoned {
        return "abandoned";
    }
    match state {
        InstanceState::Starting => "starting",
        InstanceState::Running => "running",
        InstanceState::Paused => "paused",
        InstanceState::Failed(_) => "failed",
        InstanceState::Stopping => "stopping",
        InstanceState::Stopped => "stopped",
    }
}

const INSTANCE_STATES: [&str; 7] = [
    "starting",
    "running",
    "paused",
    "failed",
    "stopping",
    "stopped",
    "abandoned",
];

/// An executor's health from its registration: serving only while its lease certainly
/// holds (the only time it may run a destructive stop); "starting" before the first
/// registration, "unhealthy" once fenced until it registered again.
pub fn executor_health(standing: LeaseStanding, registered_once: bool) -> Health {
    match (standing, registered_once) {
        (LeaseStanding::Held, _) => Health::Healthy,
        (LeaseStanding::Unregistered, false) => {
            Health::Starting("not registered with the control plane yet".into())
        }
        (LeaseStanding::Unregistered, true) => Health::Unhealthy(
            "fenced: no valid registration with the control plane; registering again".into(),
        ),
        (LeaseStanding::MayHaveExpired, _) => Health::Unhealthy(
            "the lease may have expired (no successful heartbeat in time); fencing".into(),
        ),
    }
}

/// One per-task counter family: name, help text, whether it is a source's, its value.
type RecordFamily = (&'static str, &'static str, bool, fn(&RecordStats) -> f64);

/// The `# HELP` line of each event metric (Prometheus shows it beside the series), from
/// the same meanings as docs/observability.md.
fn describe_events() {
    use metrics::{Unit, describe_counter, describe_histogram};
    describe_counter!(
        REQUESTS_REFUSED,
        "Requests refused because they were decided for another registration, lease, generation or incarnation (fencing), by reason."
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
}

/// The executor's probe: record counts and instances from the host, health from the
/// registry.
pub struct ExecutorProbe {
    host: Arc<Host>,
    registry: Arc<Registry>,
}

impl ExecutorProbe {
    /// A probe over `host` and its `registry` client.
    pub fn new(host: Arc<Host>, registry: Arc<Registry>) -> Self {
        Self { host, registry }
    }
}

impl Probe for ExecutorProbe {
    fn register_events(&self) {
        describe_events();
        for reason in REFUSAL_REASONS {
            metrics::counter!(REQUESTS_REFUSED, "reason" => reason).increment(0);
        }
        metrics::counter!(INSTANCES_ABANDONED).increment(0);
        metrics::counter!(PLUGIN_RUNTIMES_WRITTEN_OFF).increment(0);
        metrics::counter!(FENCES).increment(0);
    }

    fn health(&self) -> Health {
        executor_health(
            self.registry.lease_standing(),
            self.registry.registered_once(),
        )
    }

    fn render_state(&self, out: &mut Exposition) {
        let (connectors, tasks) = self.host.assignments();
        out.gauge(
            "wharf_executor_instance_count",
            "Connector instances and tasks hosted by this executor, by kind and state (abandoned: the stop timed out and the plugin call has not returned).",
        );
        for (kind, states) in [
            (
                "connector",
                connectors
                    .iter()
                    .map(|h| instance_state_label(&h.state, h.abandoned))
                    .collect::<Vec<_>>(),
            ),
            (
                "task",
                tasks
                    .iter()
                    .map(|h| instance_state_label(&h.state, h.abandoned))
                    .collect(),
            ),
        ] {
            for label in INSTANCE_STATES {
                let n = states.iter().filter(|s| **s == label).count();
                out.sample(
                    "wharf_executor_instance_count",
                    &[("kind", kind), ("state", label)],
                    n as f64,
                );
            }
        }
        out.gauge(
            "wharf_executor_registered",
            "1 while this executor holds a valid registration (its lease certainly runs), else 0.",
        );
        let held = self.registry.lease_standing() == LeaseStanding::Held;
        out.sample(
            "wharf_executor_registered",
            &[],
            if held { 1.0 } else { 0.0 },
        );

        let stats = self.host.task_stats();
        let families: [RecordFamily; 7] = [
            (
                "wharf_source_record_poll_total",
                "Records returned by a source task's poll (Kafka Connect's source-record-poll-total).",
                true,
                |s| RecordStats::get(&s.records),
            ),
            (
                "wharf_source_record_write_total",
                "Records of a source task appended to the record log (Kafka Connect's source-record-write-total).",
                true,
                |s| RecordStats::get(&s.written),
            ),
            (
                "wharf_source_record_commit_total",
                "Records of a source task whose offsets the control plane committed.",
                true,
                |s| RecordStats::get(&s.committed),
            ),
            (
                "wharf_source_record_bytes_total",
                "Key and value bytes of the records a source task polled.",
                true,
                |s| RecordStats::get(&s.bytes),
            ),
            (
                "wharf_sink_record_put_total",
                "Records handed to a sink task's put (Kafka Connect's sink-record-send-total).",
                false,
                |s| RecordStats::get(&s.records),
            ),
            (
                "wharf_sink_record_commit_total",
                "Records a sink task flushed, with the record log acknowledged.",
                false,
                |s| RecordStats::get(&s.committed),
            ),
            (
                "wharf_sink_record_bytes_total",
                "Key and value bytes of the records a sink task was handed in put.",
                false,
                |s| RecordStats::get(&s.bytes),
            ),
        ];
        for (name, help, source, value) in families {
            out.counter(name, help);
            for (key, is_source, s) in &stats {
                if *is_source == source {
                    let task = key.task.to_string();
                    out.sample(
                        name,
                        &[("connector", &key.connector), ("task", &task)],
                        value(s),
                    );
                }
            }
        }
    }
}

/// The executor's health now, from its registration: what
/// [`wharf::observability::watch_health`] checks every [`HEALTH_INTERVAL_MS`].
pub fn registry_health(registry: &Registry) -> Health {
    executor_health(registry.lease_standing(), registry.registered_once())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lease_is_healthy() {
        assert_eq!(executor_health(LeaseStanding::Held, true), Health::Healthy);
    }

    #[test]
    fn before_the_first_registration_the_executor_is_starting() {
        assert!(matches!(
            executor_health(LeaseStanding::Unregistered, false),
            Health::Starting(_)
        ));
    }

    #[test]
    fn a_fenced_executor_is_unhealthy_until_it_registered_again() {
        assert!(matches!(
            executor_health(LeaseStanding::Unregistered, true),
            Health::Unhealthy(m) if m.contains("fenced")
        ));
    }

    #[test]
    fn a_lease_that_may_have_expired_is_unhealthy() {
        for once in [false, true] {
            assert!(matches!(
                executor_health(LeaseStanding::MayHaveExpired, once),
                Health::Unhealthy(m) if m.contains("lease")
            ));
        }
    }

    #[test]
    fn fencing_refusals_are_counted_by_reason_and_other_errors_are_not() {
        let epoch = HostError::EpochMismatch {
            requested: 1,
            current: 2,
        };
        assert_eq!(refusal_reason(&epoch), Some("epoch"));
        let lease = HostError::LeaseMayHaveExpired {
            what: "x".into(),
            standing: "not registered",
        };
        assert_eq!(refusal_reason(&lease), Some("lease"));
        let stale = HostError::StaleGeneration {
            what: "x".into(),
            requested: 1,
            newest: 2,
        };
        assert_eq!(refusal_reason(&stale), Some("stale_generation"));
        let incarnation = HostError::StaleIncarnation {
            what: "x".into(),
            requested: "a".into(),
            hosted: "b".into(),
        };
        assert_eq!(refusal_reason(&incarnation), Some("stale_incarnation"));
        assert_eq!(refusal_reason(&HostError::ShuttingDown), None);
        assert_eq!(refusal_reason(&HostError::UnknownPlugin("p".into())), None);
    }

    #[test]
    fn instance_states_have_labels_and_abandoned_wins() {
        assert_eq!(
            instance_state_label(&InstanceState::Running, false),
            "running"
        );
        assert_eq!(
            instance_state_label(&InstanceState::Failed("x".into()), true),
            "abandoned"
        );
        for s in [
            InstanceState::Starting,
            InstanceState::Running,
            InstanceState::Paused,
            InstanceState::Failed(String::new()),
            InstanceState::Stopping,
            InstanceState::Stopped,
        ] {
            assert!(INSTANCE_STATES.contains(&instance_state_label(&s, false)));
        }
    }

    #[test]
    fn record_bytes_count_key_and_value() {
        assert_eq!(record_bytes(Some(&vec![1, 2]), &[3, 4, 5]), 5);
        assert_eq!(record_bytes(None, &[3]), 1);
    }
}
