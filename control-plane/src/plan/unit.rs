//! The lifecycle decision of one unit (a connector instance or a task): what is wanted of
//! it, what its executor has of it, and how that executor is doing, in; one action out.
//! See `README.md` beside this file (section "unit decisions") and `docs/lifecycle.md`.
//!
//! The rule that the rest follows from: **every instance that
//! still exists on an executor, whatever its state, is stopped itself** (with `true` when
//! its connector was deleted and resources are not kept, else `false`); a cleanup-only
//! instance is started only for a unit that no executor hosts any more, and nothing is
//! sent to an executor that stopped answering heartbeats (its lease decides).

use crate::model::InstanceState;

/// What is wanted of the unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Target STARTED (and the connector instance of a PAUSED connector).
    Started,
    /// A task of a PAUSED connector: no instance runs, the unit stays assigned.
    Paused,
    /// Target STOPPED: no instance of the connector or its tasks remains anywhere.
    Stopped,
    /// Deleted, cleanup wanted: the instance gets its stop(`connector_deleted = true`).
    Deleted,
    /// Deleted with `keep_resources`: every stop passes false.
    DeletedKeepResources,
}

/// The unit's instance as its executor has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hosted {
    /// No instance exists (never started, stopped, or not reported by the host).
    Absent,
    /// A start was sent and not answered yet.
    Starting,
    /// It runs.
    Running,
    /// Its start or its work failed; the instance stays on the executor until stopped.
    Failed,
    /// A stop was sent and not answered yet.
    Stopping,
    /// Its stop timed out and the executor gave up on it; the plugin call still runs.
    Abandoned,
}

impl Hosted {
    /// How the herder's record of an instance reads, before any executor report.
    pub fn from_recorded(state: InstanceState) -> Self {
        match state {
            InstanceState::Unassigned | InstanceState::Paused | InstanceState::Stopped => {
                Hosted::Absent
            }
            InstanceState::Restarting => Hosted::Starting,
            InstanceState::Running => Hosted::Running,
            InstanceState::Failed => Hosted::Failed,
        }
    }
}

/// How the unit's executor is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    /// Holds its lease at the instance's epoch and heartbeats on time.
    Live,
    /// Still holds its lease but missed heartbeats (frozen, or a broken path): calls to
    /// it would wait for their timeout, so none is made; its lease decides.
    Unresponsive,
    /// Lease expired, a newer epoch registered, or no executor at all: every instance it
    /// had is fenced.
    Lost,
}

/// What to do with the unit now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing to do.
    Keep,
    /// Start an instance with a new generation on the executor the placement chose (a
    /// live, responsive one); an instance still hosted is stopped with false first.
    Start,
    /// Stop the hosted instance itself, at its generation, with this flag.
    Stop {
        /// The `connector_deleted` flag of the stop.
        connector_deleted: bool,
    },
    /// Nothing exists to stop: record the wanted state (paused, stopped) without a call.
    Record,
    /// A deletion's unit that no executor hosts: start a cleanup-only instance on a live
    /// executor with the plugin and stop it with true.
    CleanupOnly,
    /// A deletion's unit with nothing to stop (resources kept): the step is done.
    Done,
    /// A call is in flight or the host does not answer: look again later.
    Wait,
}

/// The one decision per unit. Exhaustive over (want, hosted, host), no `_` arm: a new
/// state makes the compiler point here. Every cell has a test named after it below.
pub fn decide(want: Want, hosted: Hosted, host: Host) -> Action {
    use Action::{CleanupOnly, Done, Keep, Record, Start, Stop, Wait};
    match (want, hosted, host) {
        // --- Started: keep what runs, replace what is gone, never touch a silent host.
        (Want::Started, Hosted::Absent, Host::Live | Host::Unresponsive | Host::Lost) => Start,
        (Want::Started, Hosted::Starting, Host::Live | Host::Unresponsive) => Wait,
        (Want::Started, Hosted::Starting, Host::Lost) => Start,
        (Want::Started, Hosted::Running, Host::Live | Host::Unresponsive) => Keep,
        (Want::Started, Hosted::Running, Host::Lost) => Start,
        // A failed instance waits for a restart (Kafka Connect: FAILED until restarted).
        (Want::Started, Hosted::Failed, Host::Live | Host::Unresponsive) => Keep,
        (Want::Started, Hosted::Failed, Host::Lost) => Start,
        (Want::Started, Hosted::Stopping, Host::Live | Host::Unresponsive) => Wait,
        (Want::Started, Hosted::Stopping, Host::Lost) => Start,
        // The abandoned instance is fenced by the new generation.
        (Want::Started, Hosted::Abandoned, Host::Live | Host::Lost) => Start,
        (Want::Started, Hosted::Abandoned, Host::Unresponsive) => Wait,

        // --- Paused and Stopped: whatever still exists is stopped with false.
        (
            Want::Paused | Want::Stopped,
            Hosted::Absent,
            Host::Live | Host::Unresponsive | Host::Lost,
        ) => Record,
        (
            Want::Paused | Want::Stopped,
            Hosted::Starting | Hosted::Running | Hosted::Failed,
            Host::Live,
        ) => Stop {
            connector_deleted: false,
        },
        (
            Want::Paused | Want::Stopped,
            Hosted::Starting | Hosted::Running | Hosted::Failed | Hosted::Stopping,
            Host::Unresponsive,
        ) => Wait,
        (Want::Paused | Want::Stopped, Hosted::Stopping, Host::Live) => Wait,
        (
            Want::Paused | Want::Stopped,
            Hosted::Starting | Hosted::Running | Hosted::Failed | Hosted::Stopping,
            Host::Lost,
        ) => Record,
        // Its stop(false) already ran out of time: nothing more to send.
        (
            Want::Paused | Want::Stopped,
            Hosted::Abandoned,
            Host::Live | Host::Unresponsive | Host::Lost,
        ) => Record,

        // --- Deleted: every instance that exists gets its own stop(true).
        (Want::Deleted, Hosted::Absent, Host::Live | Host::Unresponsive | Host::Lost) => {
            CleanupOnly
        }
        (
            Want::Deleted,
            Hosted::Starting | Hosted::Running | Hosted::Failed | Hosted::Stopping,
            Host::Live,
        ) => Stop {
            connector_deleted: true,
        },
        (
            Want::Deleted,
            Hosted::Starting
            | Hosted::Running
            | Hosted::Failed
            | Hosted::Stopping
            | Hosted::Abandoned,
            Host::Unresponsive,
        ) => Wait,
        (
            Want::Deleted,
            Hosted::Starting
            | Hosted::Running
            | Hosted::Failed
            | Hosted::Stopping
            | Hosted::Abandoned,
            Host::Lost,
        ) => CleanupOnly,
        // Its plugin call still runs and ignores its stop: a fresh instance cleans up.
        (Want::Deleted, Hosted::Abandoned, Host::Live) => CleanupOnly,

        // --- Deleted, resources kept: stop(false) what exists, nothing else to run.
        (
            Want::DeletedKeepResources,
            Hosted::Absent,
            Host::Live | Host::Unresponsive | Host::Lost,
        ) => Done,
        (
            Want::DeletedKeepResources,
            Hosted::Starting | Hosted::Running | Hosted::Failed | Hosted::Stopping,
            Host::Live,
        ) => Stop {
            connector_deleted: false,
        },
        (
            Want::DeletedKeepResources,
            Hosted::Starting | Hosted::Running | Hosted::Failed | Hosted::Stopping,
            Host::Unresponsive,
        ) => Wait,
        (
            Want::DeletedKeepResources,
            Hosted::Starting | Hosted::Running | Hosted::Failed | Hosted::Stopping,
            Host::Lost,
        ) => Done,
        (
            Want::DeletedKeepResources,
            Hosted::Abandoned,
            Host::Live | Host::Unresponsive | Host::Lost,
        ) => Done,
    }
}

#[cfg(test)]
mod tests {
    use super::Action::{CleanupOnly, Done, Keep, Record, Start, Stop, Wait};
    use super::*;

    const STOP_TRUE: Action = Stop {
        connector_deleted: true,
    };
    const STOP_FALSE: Action = Stop {
        connector_deleted: false,
    };

    /// One test per cell, named as a sentence.
    macro_rules! cells {
        ($($name:ident: $want:ident, $hosted:ident, $host:ident => $action:expr;)*) => {
            $(
                #[test]
                fn $name() {
                    assert_eq!(decide(Want::$want, Hosted::$hosted, Host::$host), $action);
                }
            )*

            /// The list above covers the table: every (want, hosted, host) exactly once.
            #[test]
            fn every_cell_of_the_table_has_its_own_test() {
                let named = [$((Want::$want, Hosted::$hosted, Host::$host)),*];
                let wants = [Want::Started, Want::Paused, Want::Stopped, Want::Deleted, Want::DeletedKeepResources];
                let hosted = [Hosted::Absent, Hosted::Starting, Hosted::Running, Hosted::Failed, Hosted::Stopping, Hosted::Abandoned];
                let hosts = [Host::Live, Host::Unresponsive, Host::Lost];
                for w in wants {
                    for h in hosted {
                        for e in hosts {
                            let n = named.iter().filter(|c| **c == (w, h, e)).count();
                            assert_eq!(n, 1, "cell ({w:?}, {h:?}, {e:?}) is named {n} times");
                        }
                    }
                }
            }
        };
    }

    cells! {
        // Started
        a_started_unit_with_no_instance_is_started_on_a_live_executor: Started, Absent, Live => Start;
        a_started_unit_with_no_instance_on_a_silent_executor_is_placed_elsewhere: Started, Absent, Unresponsive => Start;
        a_started_unit_whose_executor_is_lost_is_started_elsewhere: Started, Absent, Lost => Start;
        a_start_in_flight_on_a_live_executor_is_awaited: Started, Starting, Live => Wait;
        a_start_in_flight_on_a_silent_executor_waits_for_its_lease: Started, Starting, Unresponsive => Wait;
        a_start_sent_to_a_lost_executor_is_started_again_elsewhere: Started, Starting, Lost => Start;
        a_running_instance_on_a_live_executor_is_kept: Started, Running, Live => Keep;
        a_running_instance_on_a_silent_executor_is_kept_until_its_lease_decides: Started, Running, Unresponsive => Keep;
        a_running_instance_on_a_lost_executor_is_replaced_elsewhere: Started, Running, Lost => Start;
        a_failed_instance_on_a_live_executor_waits_for_a_restart: Started, Failed, Live => Keep;
        a_failed_instance_on_a_silent_executor_waits_for_a_restart: Started, Failed, Unresponsive => Keep;
        a_failed_instance_on_a_lost_executor_is_started_elsewhere: Started, Failed, Lost => Start;
        a_stop_in_flight_on_a_live_executor_is_awaited_before_a_start: Started, Stopping, Live => Wait;
        a_stop_in_flight_on_a_silent_executor_waits_for_its_lease: Started, Stopping, Unresponsive => Wait;
        a_unit_stopping_on_a_lost_executor_is_started_elsewhere: Started, Stopping, Lost => Start;
        an_abandoned_instance_on_a_live_executor_is_fenced_by_a_new_start: Started, Abandoned, Live => Start;
        an_abandoned_instance_on_a_silent_executor_waits_for_its_lease: Started, Abandoned, Unresponsive => Wait;
        an_abandoned_instance_on_a_lost_executor_is_started_elsewhere: Started, Abandoned, Lost => Start;
        // Paused
        a_paused_task_with_no_instance_is_recorded_paused: Paused, Absent, Live => Record;
        a_paused_task_with_no_instance_on_a_silent_executor_is_recorded_paused: Paused, Absent, Unresponsive => Record;
        a_paused_task_with_no_instance_on_a_lost_executor_is_recorded_paused: Paused, Absent, Lost => Record;
        a_paused_task_still_starting_is_stopped_with_false: Paused, Starting, Live => STOP_FALSE;
        a_paused_task_starting_on_a_silent_executor_waits: Paused, Starting, Unresponsive => Wait;
        a_paused_task_starting_on_a_lost_executor_is_recorded_paused: Paused, Starting, Lost => Record;
        a_paused_running_task_is_stopped_with_false: Paused, Running, Live => STOP_FALSE;
        a_paused_running_task_on_a_silent_executor_waits: Paused, Running, Unresponsive => Wait;
        a_paused_running_task_on_a_lost_executor_is_recorded_paused: Paused, Running, Lost => Record;
        a_paused_failed_task_is_stopped_with_false_too: Paused, Failed, Live => STOP_FALSE;
        a_paused_failed_task_on_a_silent_executor_waits: Paused, Failed, Unresponsive => Wait;
        a_paused_failed_task_on_a_lost_executor_is_recorded_paused: Paused, Failed, Lost => Record;
        a_paused_task_whose_stop_is_in_flight_is_awaited: Paused, Stopping, Live => Wait;
        a_paused_task_stopping_on_a_silent_executor_waits: Paused, Stopping, Unresponsive => Wait;
        a_paused_task_stopping_on_a_lost_executor_is_recorded_paused: Paused, Stopping, Lost => Record;
        a_paused_abandoned_task_is_recorded_paused: Paused, Abandoned, Live => Record;
        a_paused_abandoned_task_on_a_silent_executor_is_recorded_paused: Paused, Abandoned, Unresponsive => Record;
        a_paused_abandoned_task_on_a_lost_executor_is_recorded_paused: Paused, Abandoned, Lost => Record;
        // Stopped
        a_stopped_unit_with_no_instance_is_recorded_stopped: Stopped, Absent, Live => Record;
        a_stopped_unit_with_no_instance_on_a_silent_executor_is_recorded_stopped: Stopped, Absent, Unresponsive => Record;
        a_stopped_unit_with_no_instance_on_a_lost_executor_is_recorded_stopped: Stopped, Absent, Lost => Record;
        a_stopped_unit_still_starting_is_stopped_with_false: Stopped, Starting, Live => STOP_FALSE;
        a_stopped_unit_starting_on_a_silent_executor_waits: Stopped, Starting, Unresponsive => Wait;
        a_stopped_unit_starting_on_a_lost_executor_is_recorded_stopped: Stopped, Starting, Lost => Record;
        a_stopped_running_unit_is_stopped_with_false: Stopped, Running, Live => STOP_FALSE;
        a_stopped_running_unit_on_a_silent_executor_waits: Stopped, Running, Unresponsive => Wait;
        a_stopped_running_unit_on_a_lost_executor_is_recorded_stopped: Stopped, Running, Lost => Record;
        a_stopped_failed_instance_is_stopped_with_false_so_none_remains: Stopped, Failed, Live => STOP_FALSE;
        a_stopped_failed_instance_on_a_silent_executor_waits: Stopped, Failed, Unresponsive => Wait;
        a_stopped_failed_instance_on_a_lost_executor_is_recorded_stopped: Stopped, Failed, Lost => Record;
        a_stopped_unit_whose_stop_is_in_flight_is_awaited: Stopped, Stopping, Live => Wait;
        a_stopped_unit_stopping_on_a_silent_executor_waits: Stopped, Stopping, Unresponsive => Wait;
        a_stopped_unit_stopping_on_a_lost_executor_is_recorded_stopped: Stopped, Stopping, Lost => Record;
        a_stopped_abandoned_instance_is_recorded_stopped: Stopped, Abandoned, Live => Record;
        a_stopped_abandoned_instance_on_a_silent_executor_is_recorded_stopped: Stopped, Abandoned, Unresponsive => Record;
        a_stopped_abandoned_instance_on_a_lost_executor_is_recorded_stopped: Stopped, Abandoned, Lost => Record;
        // Deleted
        a_deleted_unit_that_no_live_executor_hosts_gets_a_cleanup_only_instance: Deleted, Absent, Live => CleanupOnly;
        a_deleted_unit_that_a_silent_executor_does_not_host_gets_a_cleanup_only_instance: Deleted, Absent, Unresponsive => CleanupOnly;
        a_deleted_unit_that_no_executor_hosts_gets_a_cleanup_only_instance: Deleted, Absent, Lost => CleanupOnly;
        a_deleted_unit_still_starting_is_stopped_with_true_itself: Deleted, Starting, Live => STOP_TRUE;
        a_deleted_unit_starting_on_a_silent_executor_waits_for_its_lease: Deleted, Starting, Unresponsive => Wait;
        a_deleted_unit_starting_on_a_lost_executor_gets_a_cleanup_only_instance: Deleted, Starting, Lost => CleanupOnly;
        a_deleted_running_instance_is_stopped_with_true: Deleted, Running, Live => STOP_TRUE;
        a_deleted_running_instance_on_a_silent_executor_waits_for_its_lease: Deleted, Running, Unresponsive => Wait;
        a_deleted_running_instance_on_a_lost_executor_gets_a_cleanup_only_instance: Deleted, Running, Lost => CleanupOnly;
        a_deleted_failed_instance_is_stopped_with_true_itself_not_replaced: Deleted, Failed, Live => STOP_TRUE;
        a_deleted_failed_instance_on_a_silent_executor_waits_for_its_lease: Deleted, Failed, Unresponsive => Wait;
        a_deleted_failed_instance_on_a_lost_executor_gets_a_cleanup_only_instance: Deleted, Failed, Lost => CleanupOnly;
        a_deleted_unit_whose_stop_is_in_flight_is_stopped_with_true: Deleted, Stopping, Live => STOP_TRUE;
        a_deleted_unit_stopping_on_a_silent_executor_waits_for_its_lease: Deleted, Stopping, Unresponsive => Wait;
        a_deleted_unit_stopping_on_a_lost_executor_gets_a_cleanup_only_instance: Deleted, Stopping, Lost => CleanupOnly;
        a_deleted_abandoned_instance_gets_a_cleanup_only_instance: Deleted, Abandoned, Live => CleanupOnly;
        a_deleted_abandoned_instance_on_a_silent_executor_waits_for_its_lease: Deleted, Abandoned, Unresponsive => Wait;
        a_deleted_abandoned_instance_on_a_lost_executor_gets_a_cleanup_only_instance: Deleted, Abandoned, Lost => CleanupOnly;
        // Deleted, resources kept
        a_kept_deletion_with_no_instance_is_done: DeletedKeepResources, Absent, Live => Done;
        a_kept_deletion_with_no_instance_on_a_silent_executor_is_done: DeletedKeepResources, Absent, Unresponsive => Done;
        a_kept_deletion_with_no_instance_on_a_lost_executor_is_done: DeletedKeepResources, Absent, Lost => Done;
        a_kept_deletion_still_starting_is_stopped_with_false: DeletedKeepResources, Starting, Live => STOP_FALSE;
        a_kept_deletion_starting_on_a_silent_executor_waits: DeletedKeepResources, Starting, Unresponsive => Wait;
        a_kept_deletion_starting_on_a_lost_executor_is_done: DeletedKeepResources, Starting, Lost => Done;
        a_kept_deletion_of_a_running_instance_stops_it_with_false: DeletedKeepResources, Running, Live => STOP_FALSE;
        a_kept_deletion_running_on_a_silent_executor_waits: DeletedKeepResources, Running, Unresponsive => Wait;
        a_kept_deletion_running_on_a_lost_executor_is_done: DeletedKeepResources, Running, Lost => Done;
        a_kept_deletion_of_a_failed_instance_stops_it_with_false: DeletedKeepResources, Failed, Live => STOP_FALSE;
        a_kept_deletion_failed_on_a_silent_executor_waits: DeletedKeepResources, Failed, Unresponsive => Wait;
        a_kept_deletion_failed_on_a_lost_executor_is_done: DeletedKeepResources, Failed, Lost => Done;
        a_kept_deletion_whose_stop_is_in_flight_stops_it_with_false: DeletedKeepResources, Stopping, Live => STOP_FALSE;
        a_kept_deletion_stopping_on_a_silent_executor_waits: DeletedKeepResources, Stopping, Unresponsive => Wait;
        a_kept_deletion_stopping_on_a_lost_executor_is_done: DeletedKeepResources, Stopping, Lost => Done;
        a_kept_deletion_of_an_abandoned_instance_is_done: DeletedKeepResources, Abandoned, Live => Done;
        a_kept_deletion_abandoned_on_a_silent_executor_is_done: DeletedKeepResources, Abandoned, Unresponsive => Done;
        a_kept_deletion_abandoned_on_a_lost_executor_is_done: DeletedKeepResources, Abandoned, Lost => Done;
    }

    #[test]
    fn a_recorded_failed_instance_reads_as_hosted_not_absent() {
        assert_eq!(Hosted::from_recorded(InstanceState::Failed), Hosted::Failed);
        assert_eq!(
            Hosted::from_recorded(InstanceState::Stopped),
            Hosted::Absent
        );
    }
}
