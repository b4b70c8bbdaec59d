//! The task host's errors: one variant per refused request, mapped to gRPC statuses in
//! `grpc.rs`, and the reason a fencing refusal is counted under.

/// Errors of the task host, one variant per refused request; mapped to gRPC statuses in
/// `grpc.rs`.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A request field is missing or malformed.
    #[error("invalid {field}: {reason}")]
    InvalidArgument {
        /// The offending field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `connector.class` names a plugin this executor does not have.
    #[error("plugin {0:?} is not installed on this executor")]
    UnknownPlugin(String),
    /// The request's generation is older than the newest seen for the instance.
    #[error("stale generation {requested} for {what}: generation {newest} was already seen")]
    StaleGeneration {
        /// Which connector or task.
        what: String,
        /// Generation in the request.
        requested: u64,
        /// Newest generation seen.
        newest: u64,
    },
    /// The request addresses another registration epoch of this executor.
    #[error("executor epoch {requested} does not match the current epoch {current}")]
    EpochMismatch {
        /// Epoch in the request.
        requested: u64,
        /// This executor's current epoch.
        current: u64,
    },
    /// A start for a generation whose instance was already stopped.
    #[error("{what} generation {generation} was already stopped; start a new generation")]
    GenerationStopped {
        /// Which connector or task.
        what: String,
        /// The generation.
        generation: u64,
    },
    /// The request was decided for another incarnation of the connector than the one
    /// hosted (a late stop of a deleted connector reaching its successor).
    #[error(
        "stale incarnation {requested:?} for {what}: the hosted instance belongs to incarnation {hosted:?}"
    )]
    StaleIncarnation {
        /// Which connector or task.
        what: String,
        /// Incarnation in the request.
        requested: String,
        /// Incarnation of the hosted instance.
        hosted: String,
    },
    /// The executor's lease may have expired: it refuses destructive stops and starts and
    /// is fencing itself (its instances get `stop(false)`, then it registers again).
    #[error(
        "refused {what}: this executor's lease may have expired ({standing}); it is fencing itself and registers again"
    )]
    LeaseMayHaveExpired {
        /// What was refused.
        what: String,
        /// Where the executor stands (`not registered` or `lease may have expired`).
        standing: &'static str,
    },
    /// No plugin runtime could take the instance: the current one had to be written off
    /// (calls of abandoned instances hold half of its workers or more) and a fresh one
    /// could not be started (the OS refused its threads). Nothing ran.
    #[error("cannot run {what}: {reason}")]
    PluginRuntime {
        /// Which connector or task.
        what: String,
        /// The cause.
        reason: String,
    },
    /// A stop names a generation newer than any this executor was assigned for the
    /// instance, without the incarnation of the instance it hosts: a stop decided for
    /// someone else's assignment, or made up. Nothing runs: naming a generation never
    /// assigned here must not be enough to stop, or drop the resources of, a live connector.
    #[error(
        "{what} generation {requested} was never assigned to this executor (newest assigned: {newest}); refused, nothing ran"
    )]
    NeverAssigned {
        /// Which connector or task.
        what: String,
        /// Generation in the request.
        requested: u64,
        /// Newest generation this executor was assigned for it.
        newest: u64,
    },
    /// A stop with `connector_deleted = true` without the deletion token of this
    /// executor's registration: not from the control plane it registered with.
    #[error(
        "refused {what}: a stop with connector_deleted = true must come from the control plane this executor registered with (deletion token missing or wrong); nothing ran"
    )]
    NotFromControlPlane {
        /// Which connector or task.
        what: String,
    },
    /// The executor never hosted the instance (or not that generation).
    #[error("{0} is not hosted on this executor")]
    NotHosted(String),
    /// The instance exists but is not running (failed, stopping or stopped).
    #[error("{what} is not running (state {state})")]
    NotRunning {
        /// Which connector.
        what: String,
        /// Its state.
        state: String,
    },
    /// The executor is shutting down and starts nothing new.
    #[error("executor is shutting down")]
    ShuttingDown,
    /// The plugin's `task_configs` failed.
    #[error("task_configs of {connector} failed: {error}")]
    TaskConfigsFailed {
        /// Connector name.
        connector: String,
        /// The plugin's error text.
        error: String,
    },
}

impl HostError {
    /// The `reason` label under which this error is counted as a fencing refusal
    /// (`crate::counters::REFUSAL_REASONS`), or `None` for an error that is not one.
    pub fn refusal_reason(&self) -> Option<&'static str> {
        match self {
            HostError::EpochMismatch { .. } => Some("epoch"),
            HostError::LeaseMayHaveExpired { .. } => Some("lease"),
            HostError::StaleGeneration { .. } => Some("stale_generation"),
            HostError::StaleIncarnation { .. } => Some("stale_incarnation"),
            HostError::NeverAssigned { .. } => Some("never_assigned"),
            HostError::NotFromControlPlane { .. } => Some("deletion_token"),
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fencing_refusals_are_counted_by_reason_and_other_errors_are_not() {
        let epoch = HostError::EpochMismatch {
            requested: 1,
            current: 2,
        };
        assert_eq!(epoch.refusal_reason(), Some("epoch"));
        let lease = HostError::LeaseMayHaveExpired {
            what: "x".into(),
            standing: "not registered",
        };
        assert_eq!(lease.refusal_reason(), Some("lease"));
        let stale = HostError::StaleGeneration {
            what: "x".into(),
            requested: 1,
            newest: 2,
        };
        assert_eq!(stale.refusal_reason(), Some("stale_generation"));
        let incarnation = HostError::StaleIncarnation {
            what: "x".into(),
            requested: "a".into(),
            hosted: "b".into(),
        };
        assert_eq!(incarnation.refusal_reason(), Some("stale_incarnation"));
        let never = HostError::NeverAssigned {
            what: "x".into(),
            requested: 9,
            newest: 2,
        };
        assert_eq!(never.refusal_reason(), Some("never_assigned"));
        assert_eq!(HostError::ShuttingDown.refusal_reason(), None);
        assert_eq!(HostError::UnknownPlugin("p".into()).refusal_reason(), None);
    }

    #[test]
    fn every_refusal_reason_is_one_the_counter_registers() {
        for e in [
            HostError::EpochMismatch {
                requested: 1,
                current: 2,
            },
            HostError::LeaseMayHaveExpired {
                what: "x".into(),
                standing: "not registered",
            },
            HostError::StaleGeneration {
                what: "x".into(),
                requested: 1,
                newest: 2,
            },
            HostError::StaleIncarnation {
                what: "x".into(),
                requested: "a".into(),
                hosted: "b".into(),
            },
            HostError::NeverAssigned {
                what: "x".into(),
                requested: 9,
                newest: 2,
            },
            HostError::NotFromControlPlane { what: "x".into() },
        ] {
            let reason = e.refusal_reason().expect("a fencing refusal");
            assert!(
                crate::counters::REFUSAL_REASONS.contains(&reason),
                "{reason}"
            );
        }
    }
}
