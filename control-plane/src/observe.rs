//! What the control plane shows on its metrics listener (`--metrics-listen`) and in
//! `grpc.health.v1`: state gauges rendered from the store at scrape time, event metrics
//! recorded where the herder and the finalizer act, and a health watch over the store.
//! Every name is listed with its meaning and unit in `docs/observability.md`.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use wharf::observability::{Exposition, Health, Probe};

use crate::model::{CleanupState, InstanceOf, InstanceState};
use crate::plan::unit::Host;
use crate::reconcile::Cluster;

/// Counter: cleanup attempts by `outcome` (`done`, `skipped` for a deletion that keeps
/// resources, `rehost`, `failed`, `given_up`, `exhausted`).
pub const CLEANUP_ATTEMPTS: &str = "wharf_cleanup_attempts_total";
/// Histogram, seconds: how long one cleanup stop took on its executor, by `outcome`.
pub const CLEANUP_STEP_SECONDS: &str = "wharf_cleanup_step_duration_seconds";
/// Counter: cleanup steps moved to another executor (their host was lost).
pub const CLEANUP_REHOSTED: &str = "wharf_cleanup_rehosted_total";
/// Counter: steps given up by `cleanup.policy = give-up`: resources that may have leaked.
pub const CLEANUP_LEAKS: &str = "wharf_cleanup_given_up_total";
/// Counter: deletions finished, by `mode` (`cleanup`, `keep_resources`, `forced`).
pub const DELETIONS_FINISHED: &str = "wharf_deletions_finished_total";
/// Counter: executor leases that expired (the executor was marked lost).
pub const LEASE_EXPIRIES: &str = "wharf_executor_lease_expiries_total";
/// Counter: admin calls (gRPC or REST, reads included) refused because the caller
/// presented no valid credentials: none, an unknown or revoked bearer token, a malformed
/// `authorization` header. Not in the audit trail (`crate::auth::audit::in_trail`).
pub const ADMIN_CALLS_UNAUTHENTICATED: &str = "wharf_admin_calls_unauthenticated_total";
/// Counter: refused admin calls of identified callers over the audit trail's per-caller
/// budget, not written to it (`crate::auth::audit::REFUSALS_RECORDED_PER_MINUTE`).
pub const ADMIN_REFUSALS_NOT_RECORDED: &str = "wharf_admin_refusals_not_recorded_total";
/// Histogram, seconds: one herder pass.
pub const HERDER_PASS_SECONDS: &str = "wharf_herder_pass_duration_seconds";
/// Gauge, seconds: from the herder's start (process start or a won leadership term)
/// until it caught up ([`crate::reconcile::herder::CatchUp::Done`]); absent before.
pub const HERDER_CATCH_UP_SECONDS: &str = "wharf_herder_catch_up_seconds";
/// Histogram, seconds: one finalizer pass (reading the deletions, dispatching rounds).
pub const FINALIZER_PASS_SECONDS: &str = "wharf_finalizer_pass_duration_seconds";
/// Histogram, seconds: one store commit (a group commit counts once).
pub const STORE_COMMIT_SECONDS: &str = "wharf_store_commit_duration_seconds";
/// Histogram, writes: how many writes one store commit carried.
pub const STORE_COMMIT_BATCH: &str = "wharf_store_commit_batch_size";

/// How often the health watch asks the store, in milliseconds.
pub const HEALTH_INTERVAL_MS: u64 = 1_000;
/// How long one health read of the store may take before the store counts as unreachable,
/// in milliseconds (below the etcd store's own 5 s call bound, so that a stopped etcd
/// shows within about this long).
pub const HEALTH_TIMEOUT_MS: u64 = 2_000;

/// The `# HELP` line of each event metric (Prometheus shows it beside the series), from
/// the same meanings as docs/observability.md.
fn describe_events() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        CLEANUP_ATTEMPTS,
        "Cleanup attempts (stop with connector_deleted) by outcome."
    );
    describe_histogram!(
        CLEANUP_STEP_SECONDS,
        Unit::Seconds,
        "How long one cleanup stop took on its executor, by outcome."
    );
    describe_counter!(
        CLEANUP_REHOSTED,
        "Cleanup steps moved to another executor because their host was lost."
    );
    describe_counter!(
        CLEANUP_LEAKS,
        "Cleanup steps given up by cleanup.policy=give-up: external resources that may have leaked."
    );
    describe_counter!(
        DELETIONS_FINISHED,
        "Deletions finished, by mode (cleanup, keep_resources, forced)."
    );
    describe_counter!(
        LEASE_EXPIRIES,
        "Executor leases that expired (the executor was marked lost)."
    );
    describe_counter!(
        ADMIN_CALLS_UNAUTHENTICATED,
        "Admin calls (gRPC or REST) refused because the caller presented no valid credentials; not in the audit trail."
    );
    describe_counter!(
        ADMIN_REFUSALS_NOT_RECORDED,
        "Refused admin calls of identified callers not written to the audit trail: over the per-caller budget of refusals a minute."
    );
    describe_histogram!(
        HERDER_PASS_SECONDS,
        Unit::Seconds,
        "Duration of one herder pass."
    );
    describe_gauge!(
        HERDER_CATCH_UP_SECONDS,
        Unit::Seconds,
        "Time from the herder's start (process start or won leadership) until it caught up."
    );
    describe_histogram!(
        FINALIZER_PASS_SECONDS,
        Unit::Seconds,
        "Duration of one finalizer pass (reading deletions, dispatching rounds)."
    );
    describe_histogram!(
        STORE_COMMIT_SECONDS,
        Unit::Seconds,
        "Duration of one store commit (a group commit counts once)."
    );
    describe_histogram!(STORE_COMMIT_BATCH, "Writes carried by one store commit.");
}

/// Records how one cleanup attempt ended (see [`CLEANUP_ATTEMPTS`]).
pub fn cleanup_attempt(outcome: &'static str) {
    metrics::counter!(CLEANUP_ATTEMPTS, "outcome" => outcome).increment(1);
    match outcome {
        "rehost" => metrics::counter!(CLEANUP_REHOSTED).increment(1),
        "given_up" => metrics::counter!(CLEANUP_LEAKS).increment(1),
        _ => {}
    }
}

/// Records the duration of one cleanup stop (see [`CLEANUP_STEP_SECONDS`]).
pub fn cleanup_step_duration(outcome: &'static str, took: Duration) {
    metrics::histogram!(CLEANUP_STEP_SECONDS, "outcome" => outcome).record(took.as_secs_f64());
}

/// Records a finished deletion (see [`DELETIONS_FINISHED`]).
pub fn deletion_finished(mode: &'static str) {
    metrics::counter!(DELETIONS_FINISHED, "mode" => mode).increment(1);
}

/// Records an expired lease (see [`LEASE_EXPIRIES`]).
pub fn lease_expired() {
    metrics::counter!(LEASE_EXPIRIES).increment(1);
}

/// Records an admin call refused for want of valid credentials (see
/// [`ADMIN_CALLS_UNAUTHENTICATED`]).
pub fn admin_call_unauthenticated() {
    metrics::counter!(ADMIN_CALLS_UNAUTHENTICATED).increment(1);
}

/// Records a refusal left out of the audit trail (see [`ADMIN_REFUSALS_NOT_RECORDED`]).
pub fn admin_refusal_not_recorded() {
    metrics::counter!(ADMIN_REFUSALS_NOT_RECORDED).increment(1);
}

/// Records one pass of a loop: `name` is [`HERDER_PASS_SECONDS`] or
/// [`FINALIZER_PASS_SECONDS`].
pub fn pass(name: &'static str, started: Instant) {
    metrics::histogram!(name).record(started.elapsed().as_secs_f64());
}

/// Records how long the herder took to catch up (see [`HERDER_CATCH_UP_SECONDS`]).
pub fn herder_caught_up(took: Duration) {
    metrics::gauge!(HERDER_CATCH_UP_SECONDS).set(took.as_secs_f64());
}

/// Records one store commit of `writes` writes (see [`STORE_COMMIT_SECONDS`]).
pub fn store_commit(started: Instant, writes: usize) {
    metrics::histogram!(STORE_COMMIT_SECONDS).record(started.elapsed().as_secs_f64());
    metrics::histogram!(STORE_COMMIT_BATCH).record(writes as f64);
}

/// The instance states in the order the gauges list them, with their label values
/// (Kafka Connect's status words, lower case as Prometheus labels are).
const INSTANCE_STATES: [(InstanceState, &str); 6] = [
    (InstanceState::Running, "running"),
    (InstanceState::Paused, "paused"),
    (InstanceState::Stopped, "stopped"),
    (InstanceState::Failed, "failed"),
    (InstanceState::Unassigned, "unassigned"),
    (InstanceState::Restarting, "restarting"),
];

fn state_index(s: InstanceState) -> usize {
    match s {
        InstanceState::Running => 0,
        InstanceState::Paused => 1,
        InstanceState::Stopped => 2,
        InstanceState::Failed => 3,
        InstanceState::Unassigned => 4,
        InstanceState::Restarting => 5,
    }
}

/// Label value of a cleanup step's state.
pub fn cleanup_state_label(s: CleanupState) -> &'static str {
    match s {
        CleanupState::Pending => "pending",
        CleanupState::Running => "running",
        CleanupState::Done => "done",
        CleanupState::Failed => "failed",
        CleanupState::Skipped => "skipped",
    }
}

const CLEANUP_STATES: [CleanupState; 5] = [
    CleanupState::Pending,
    CleanupState::Running,
    CleanupState::Done,
    CleanupState::Failed,
    CleanupState::Skipped,
];

/// The label of an executor's state in `wharf_executor_count`: `live`, `unreachable` (live,
/// but its advertised address does not answer, so no work is placed there),
/// `unresponsive` (holds its lease, missed heartbeats) or `lost`.
pub fn executor_state_label(host: Host, placeable: bool) -> &'static str {
    match (host, placeable) {
        (Host::Live, true) => "live",
        (Host::Live, false) => "unreachable",
        (Host::Unresponsive, _) => "unresponsive",
        (Host::Lost, _) => "lost",
    }
}

const EXECUTOR_STATES: [&str; 4] = ["live", "unreachable", "unresponsive", "lost"];

/// The control plane's probe: state gauges from the store, health from [`watch_health`](wharf::observability::watch_health).
pub struct ControlPlaneProbe {
    cluster: Arc<Cluster>,
    health: Arc<Mutex<Health>>,
}

impl ControlPlaneProbe {
    /// A probe over `cluster`, starting as "starting" until [`watch_health`](wharf::observability::watch_health) ran once.
    pub fn new(cluster: Arc<Cluster>) -> Self {
        Self {
            cluster,
            health: Arc::new(Mutex::new(Health::Starting(
                "the store has not been checked yet".into(),
            ))),
        }
    }

    /// The health cell [`watch_health`](wharf::observability::watch_health) writes.
    pub fn health_cell(&self) -> Arc<Mutex<Health>> {
        self.health.clone()
    }
}

impl Probe for ControlPlaneProbe {
    fn register_events(&self) {
        describe_events();
        for outcome in [
            "done",
            "skipped",
            "rehost",
            "failed",
            "exhausted",
            "given_up",
        ] {
            metrics::counter!(CLEANUP_ATTEMPTS, "outcome" => outcome).increment(0);
        }
        for mode in ["cleanup", "keep_resources", "forced"] {
            metrics::counter!(DELETIONS_FINISHED, "mode" => mode).increment(0);
        }
        metrics::counter!(CLEANUP_REHOSTED).increment(0);
        metrics::counter!(CLEANUP_LEAKS).increment(0);
        metrics::counter!(LEASE_EXPIRIES).increment(0);
        metrics::counter!(ADMIN_CALLS_UNAUTHENTICATED).increment(0);
        metrics::counter!(ADMIN_REFUSALS_NOT_RECORDED).increment(0);
    }

    fn health(&self) -> Health {
        self.health
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn render_state(&self, out: &mut Exposition) {
        // A store that does not answer shows as unhealthy; its gauges are left out rather
        // than shown as zeros.
        let Ok(connectors) = self.cluster.store.connectors_shared() else {
            return;
        };
        let mut by_connector_state = [0u64; 6];
        let mut by_task_state = [0u64; 6];
        out.gauge(
            "wharf_connector_task_count",
            "Tasks of one connector by state (Kafka Connect's connector-running-task-count and its siblings).",
        );
        for c in connectors.iter().filter(|c| !c.deleting) {
            // What the status API reports, so that a paused connector counts as paused.
            by_connector_state
                [state_index(c.connector.state.reported(c.target, InstanceOf::Connector))] += 1;
            let mut own = [0u64; 6];
            for t in &c.tasks {
                own[state_index(t.state.reported(c.target, InstanceOf::Task))] += 1;
            }
            for ((_, label), n) in INSTANCE_STATES.iter().zip(own) {
                out.sample(
                    "wharf_connector_task_count",
                    &[("connector", &c.name), ("state", label)],
                    n as f64,
                );
            }
            for (i, n) in own.iter().enumerate() {
                by_task_state[i] += n;
            }
        }
        out.gauge(
            "wharf_connector_count",
            "Connectors (not being deleted) by the state of their connector instance.",
        );
        for ((_, label), n) in INSTANCE_STATES.iter().zip(by_connector_state) {
            out.sample("wharf_connector_count", &[("state", label)], n as f64);
        }
        out.gauge(
            "wharf_task_count",
            "Tasks of connectors not being deleted, by state.",
        );
        for ((_, label), n) in INSTANCE_STATES.iter().zip(by_task_state) {
            out.sample("wharf_task_count", &[("state", label)], n as f64);
        }

        // The resource ledgers, every connector's (deleting ones too: what their
        // cleanup has yet to remove), by kind and state.
        let mut resources: std::collections::BTreeMap<(String, &'static str), u64> =
            std::collections::BTreeMap::new();
        for c in &connectors {
            for e in &c.resources {
                *resources
                    .entry((e.resource.kind.as_str().to_owned(), e.state.as_str()))
                    .or_default() += 1;
            }
        }
        out.gauge(
            "wharf_resources",
            "Entries of the connectors' resource ledgers by kind and state (intended, confirmed, released, absent).",
        );
        for ((kind, state), n) in &resources {
            out.sample(
                "wharf_resources",
                &[("kind", kind), ("state", state)],
                *n as f64,
            );
        }
        if let Ok(orphans) = self.cluster.store.orphans() {
            let mut by_kind: std::collections::BTreeMap<String, u64> = Default::default();
            for o in &orphans {
                *by_kind
                    .entry(o.entry.resource.kind.as_str().to_owned())
                    .or_default() += 1;
            }
            out.gauge(
                "wharf_orphaned_resources",
                "Resources that a forced, given-up or keep_resources deletion left behind (ListOrphanedResources), by kind.",
            );
            for (kind, n) in &by_kind {
                out.sample("wharf_orphaned_resources", &[("kind", kind)], *n as f64);
            }
        }

        if let Ok(deletions) = self.cluster.store.deletions() {
            let now = crate::reconcile::now_ms();
            out.gauge(
                "wharf_deletions_in_progress",
                "Deletions recorded and not finished.",
            );
            out.sample("wharf_deletions_in_progress", &[], deletions.len() as f64);
            out.gauge(
                "wharf_deletion_age_seconds",
                "Seconds since a deletion in progress was requested.",
            );
            for d in &deletions {
                let age = (now - d.requested_at_ms).max(0) as f64 / 1000.0;
                out.sample("wharf_deletion_age_seconds", &[("connector", &d.name)], age);
            }
            out.gauge(
                "wharf_deletion_cleanup_steps",
                "Cleanup steps of a deletion in progress, by state.",
            );
            for d in &deletions {
                for state in CLEANUP_STATES {
                    let n = d.steps.iter().filter(|s| s.state == state).count();
                    out.sample(
                        "wharf_deletion_cleanup_steps",
                        &[
                            ("connector", &d.name),
                            ("state", cleanup_state_label(state)),
                        ],
                        n as f64,
                    );
                }
            }
            out.gauge(
                "wharf_cleanup_step_attempts",
                "Attempts so far of each cleanup step not yet final, with the executor it runs on: where a deletion is stuck.",
            );
            for d in &deletions {
                for s in d.steps.iter().filter(|s| !s.state.is_final()) {
                    let task = s
                        .task
                        .map_or_else(|| "connector".to_owned(), |t| t.to_string());
                    out.sample(
                        "wharf_cleanup_step_attempts",
                        &[
                            ("connector", &d.name),
                            ("task", &task),
                            ("executor", &s.executor),
                            ("state", cleanup_state_label(s.state)),
                        ],
                        f64::from(s.attempts),
                    );
                }
            }
        }

        if let Ok(view) = self.cluster.executor_view() {
            let mut counts = [0u64; 4];
            for id in view.all.keys() {
                let host = view.health.get(id).copied().unwrap_or(Host::Lost);
                let label = executor_state_label(host, view.placeable.contains(id));
                if let Some(i) = EXECUTOR_STATES.iter().position(|l| *l == label) {
                    counts[i] += 1;
                }
            }
            out.gauge("wharf_executor_count", "Registered executors by state.");
            for (label, n) in EXECUTOR_STATES.iter().zip(counts) {
                out.sample("wharf_executor_count", &[("state", label)], n as f64);
            }
        }
    }
}

/// The health decision: what one store check means.
pub fn health_of(check: Result<Result<(), String>, ()>) -> Health {
    match check {
        Ok(Ok(())) => Health::Healthy,
        Ok(Err(e)) => Health::Unhealthy(format!("the store does not answer: {e}")),
        Err(()) => Health::Unhealthy(format!(
            "the store did not answer within {HEALTH_TIMEOUT_MS} ms"
        )),
    }
}

/// Asks the store once whether it answers (within [`HEALTH_TIMEOUT_MS`]) and writes the
/// result into `cell`, for [`wharf::observability::watch_health`] to run every
/// [`HEALTH_INTERVAL_MS`].
pub async fn check_store(cluster: &Cluster, cell: &Mutex<Health>) -> Health {
    let store = cluster.store.clone();
    // The store is synchronous (an etcd read blocks on its own runtime).
    let read = tokio::task::spawn_blocking(move || store.executors().map(|_| ()));
    let check = match tokio::time::timeout(Duration::from_millis(HEALTH_TIMEOUT_MS), read).await {
        Ok(Ok(r)) => Ok(r.map_err(|e| e.to_string())),
        Ok(Err(join)) => Ok(Err(join.to_string())),
        Err(_) => Err(()),
    };
    let health = health_of(check);
    *cell.lock().unwrap_or_else(PoisonError::into_inner) = health.clone();
    health
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_that_answers_is_healthy() {
        assert_eq!(health_of(Ok(Ok(()))), Health::Healthy);
    }

    #[test]
    fn a_store_error_is_unhealthy_with_its_reason() {
        let h = health_of(Ok(Err("etcd: connection refused".into())));
        assert!(
            matches!(&h, Health::Unhealthy(m) if m.contains("connection refused")),
            "{h:?}"
        );
    }

    #[test]
    fn a_store_that_hangs_is_unhealthy() {
        let h = health_of(Err(()));
        assert!(
            matches!(&h, Health::Unhealthy(m) if m.contains("within")),
            "{h:?}"
        );
    }

    #[test]
    fn executor_states_cover_every_host() {
        assert_eq!(executor_state_label(Host::Live, true), "live");
        assert_eq!(executor_state_label(Host::Live, false), "unreachable");
        assert_eq!(
            executor_state_label(Host::Unresponsive, true),
            "unresponsive"
        );
        assert_eq!(
            executor_state_label(Host::Unresponsive, false),
            "unresponsive"
        );
        assert_eq!(executor_state_label(Host::Lost, true), "lost");
        assert_eq!(executor_state_label(Host::Lost, false), "lost");
    }

    #[test]
    fn instance_states_are_listed_in_index_order() {
        for (i, (s, _)) in INSTANCE_STATES.iter().enumerate() {
            assert_eq!(state_index(*s), i);
        }
    }
}
