//! What an executor shows on its metrics listener (`--metrics-listen`) and in
//! `grpc.health.v1`: per-task record counts and the instances it hosts, rendered at
//! scrape time from the host (so a task's series are gone once its instance is), the event
//! counters of [`crate::counters`] (recorded where requests are refused and instances
//! abandoned), and health that follows the registration. It sits above the host and the
//! counters and reads them; nothing below imports it. Every name is listed with its meaning and unit in
//! `docs/observability.md`.

use std::sync::Arc;

use wharf::observability::{Exposition, Health, Probe};

use crate::counters::RecordStats;
use crate::host::{Host, InstanceState};
use crate::registry_client::{LeaseStanding, Registry};

/// How often the health watch looks at the registration, in milliseconds (well below any
/// lease, so that a fence shows within this long).
pub const HEALTH_INTERVAL_MS: u64 = 200;

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

/// `health` with the record log's `problem` (from its latest check) added: a healthy
/// registration over a log that does not answer is unhealthy, naming what is
/// unreachable. Pure.
pub fn with_log_problem(health: Health, problem: Option<&str>) -> Health {
    match (health, problem) {
        (health, None) => health,
        (Health::Healthy, Some(p)) => Health::Unhealthy(format!("record log: {p}")),
        (Health::Starting(why), Some(p)) => Health::Starting(format!("{why}; record log: {p}")),
        (Health::Unhealthy(why), Some(p)) => Health::Unhealthy(format!("{why}; record log: {p}")),
    }
}

/// One per-task counter family: name, help text, whether it is a source's, its value.
type RecordFamily = (&'static str, &'static str, bool, fn(&RecordStats) -> f64);

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
        crate::counters::register();
    }

    fn health(&self) -> Health {
        registry_health(&self.registry)
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

/// The executor's health now, from its registration and its record log's latest check:
/// what
/// [`wharf::observability::watch_health`] checks every [`HEALTH_INTERVAL_MS`].
pub fn registry_health(registry: &Registry) -> Health {
    with_log_problem(
        executor_health(registry.lease_standing(), registry.registered_once()),
        registry.log_problem().as_deref(),
    )
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
    fn a_log_without_a_problem_leaves_the_health_as_it_is() {
        assert_eq!(with_log_problem(Health::Healthy, None), Health::Healthy);
    }

    #[test]
    fn a_healthy_registration_over_a_log_that_does_not_answer_is_unhealthy() {
        assert_eq!(
            with_log_problem(Health::Healthy, Some("Kafka broker unreachable: a:1")),
            Health::Unhealthy("record log: Kafka broker unreachable: a:1".into())
        );
    }

    #[test]
    fn a_log_problem_is_added_to_a_starting_or_unhealthy_reason() {
        assert_eq!(
            with_log_problem(Health::Starting("s".into()), Some("p")),
            Health::Starting("s; record log: p".into())
        );
        assert_eq!(
            with_log_problem(Health::Unhealthy("u".into()), Some("p")),
            Health::Unhealthy("u; record log: p".into())
        );
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
}
