//! Whether a stop may run, and on which instance: the fencing rules of a stop by
//! generation, incarnation and lease (docs/contract.md, "Executor self-fencing"), and
//! which instances ListAssignments shows. Pure functions of what the host holds.

use super::instance::{Instance, InstanceState};
use super::{HostError, Slot, StopRequest};
use crate::registry_client::LeaseStanding;
use std::sync::Arc;

/// Whether [`Host::assignments`] lists an instance: until its stop ended, and after that
/// while it is abandoned (its plugin call has not returned).
pub(super) fn listed(stop_claimed: bool, state: &InstanceState, abandoned: bool) -> bool {
    match state {
        _ if !stop_claimed || abandoned => true,
        InstanceState::Stopping => true,
        InstanceState::Starting
        | InstanceState::Running
        | InstanceState::Paused
        | InstanceState::Failed(_)
        | InstanceState::Stopped => false,
    }
}

/// Why a request is refused under `standing`, or `None` when it may go on. Destructive
/// stops and starts that address an epoch need a lease that certainly holds.
pub(super) fn lease_refusal(standing: LeaseStanding, what: &str) -> Option<HostError> {
    let standing = match standing {
        LeaseStanding::Held => return None,
        LeaseStanding::Unregistered => "not registered",
        LeaseStanding::MayHaveExpired => "lease may have expired",
    };
    Some(HostError::LeaseMayHaveExpired {
        what: what.to_owned(),
        standing,
    })
}

/// What a stop's admission needs to know of an instance: whether its stop was claimed
/// (it ran, or runs now) and the incarnation it belongs to.
pub(super) trait StopFacts {
    /// True once its stop was claimed.
    fn stop_claimed(&self) -> bool;
    /// The incarnation it belongs to.
    fn incarnation(&self) -> &str;
}

impl<I: Instance> StopFacts for I {
    fn stop_claimed(&self) -> bool {
        self.life().stop_claimed()
    }
    fn incarnation(&self) -> &str {
        Instance::incarnation(self)
    }
}

/// How a stop is admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StopAdmission {
    /// The instance's stop was already claimed: answer from its record (waiting for it
    /// if it still runs), before any staleness check; nothing runs again.
    Replay,
    /// Nothing to replay: every staleness check applies, then [`pick_for_stop`].
    Check,
}

/// The replay rule (docs/contract.md, "Executor self-fencing"): a stop of a generation
/// whose instance here already had its stop claimed is answered from that stop's record,
/// whatever epoch it names and wherever the lease stands, because answering what
/// happened runs nothing, while refusing it would make the control plane run the cleanup
/// a second time in a cleanup-only instance (a retried stop after a control-plane
/// failover, or after this executor fenced itself and registered again). A stop of
/// another incarnation never gets another connector's record. `at_generation` is the
/// instance of the stop's generation, if this executor has one.
pub(super) fn stop_admission(
    req: &StopRequest,
    at_generation: Option<&dyn StopFacts>,
) -> StopAdmission {
    match at_generation {
        None => StopAdmission::Check,
        Some(i) => match (
            i.stop_claimed(),
            incarnation_matches(&req.incarnation, i.incarnation()),
        ) {
            (true, true) => StopAdmission::Replay,
            (true, false) | (false, true | false) => StopAdmission::Check,
        },
    }
}

/// The instance a stop applies to, and whether it may run at all.
///
/// - A generation this executor was assigned: that generation's instance (a replay when
///   already stopped), if the stop names its incarnation or none.
/// - An older generation it was not assigned: stale.
/// - A newer generation: it was never assigned here, so the stop is refused unless it
///   names the incarnation of the instance still running. That one exception is the
///   control plane's record running ahead of this executor (a start it recorded whose
///   request never arrived); the record's stop must still reach the instance that runs
///   (docs/contract.md, "Executor self-fencing"). A stop without an incarnation, or with
///   another one, for a generation never assigned here runs nothing: otherwise any
///   caller could stop, or drop the resources of, a live connector by naming "current
///   generation + 1000".
///
/// `facts` says of an instance whether its stop was claimed, and its incarnation.
pub(super) fn pick_for_stop<'a, I: 'a>(
    slot: &'a Slot<I>,
    req: &StopRequest,
    what: &str,
    facts: impl Fn(&'a I) -> (bool, &'a str),
) -> Result<Arc<I>, HostError> {
    let generation = req.generation;
    if let Some(i) = slot.instances.get(&generation) {
        check_incarnation(&req.incarnation, facts(i).1, what)?;
        return Ok(i.clone());
    }
    if generation < slot.newest {
        return Err(HostError::StaleGeneration {
            what: what.to_owned(),
            requested: generation,
            newest: slot.newest,
        });
    }
    let running = slot.instances.values().rev().find(|i| !facts(i).0);
    match running {
        None => Err(HostError::NotHosted(format!(
            "{what} generation {generation}"
        ))),
        Some(i) if !req.incarnation.is_empty() && req.incarnation == facts(i).1 => Ok(i.clone()),
        Some(_) => Err(HostError::NeverAssigned {
            what: what.to_owned(),
            requested: generation,
            newest: slot.newest,
        }),
    }
}

/// Refuses a request decided for incarnation `requested` when the instance belongs to
/// `hosted` (either empty: not known, no check).
fn check_incarnation(requested: &str, hosted: &str, what: &str) -> Result<(), HostError> {
    if incarnation_matches(requested, hosted) {
        return Ok(());
    }
    Err(HostError::StaleIncarnation {
        what: what.to_owned(),
        requested: requested.to_owned(),
        hosted: hosted.to_owned(),
    })
}

/// True when a request for incarnation `requested` may address an instance of `hosted`
/// (either empty: not known, no check).
fn incarnation_matches(requested: &str, hosted: &str) -> bool {
    requested.is_empty() || hosted.is_empty() || requested == hosted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::StopCause;

    #[test]
    fn an_instance_is_listed_until_its_stop_ended() {
        let running = [
            InstanceState::Starting,
            InstanceState::Running,
            InstanceState::Paused,
            InstanceState::Failed("boom".into()),
        ];
        for s in &running {
            assert!(listed(false, s, false), "{s:?}");
        }
        // A stop under way (the plugin's call may still run): still listed.
        assert!(listed(true, &InstanceState::Stopping, false));
        // The stop ended: gone.
        assert!(!listed(true, &InstanceState::Stopped, false));
        assert!(!listed(
            true,
            &InstanceState::Failed("timed out".into()),
            false
        ));
    }

    #[test]
    fn an_abandoned_instance_is_listed_until_its_call_returned() {
        assert!(listed(
            true,
            &InstanceState::Failed("timed out".into()),
            true
        ));
    }

    /// Incarnation of every instance in [`slot`].
    const INC: &str = "inc-1";

    /// A slot whose instances are just "stop claimed" flags (incarnation [`INC`]), by
    /// generation.
    fn slot(instances: &[(u64, bool)]) -> Slot<(bool, &'static str)> {
        Slot {
            newest: instances.iter().map(|(g, _)| *g).max().unwrap_or(0),
            instances: instances
                .iter()
                .map(|(g, c)| (*g, Arc::new((*c, INC))))
                .collect(),
        }
    }

    /// The "stop claimed" flag of the instance picked for a stop of `generation` naming
    /// `incarnation`.
    fn pick_named(
        slot: &Slot<(bool, &'static str)>,
        generation: u64,
        incarnation: &str,
    ) -> Result<bool, HostError> {
        let req = StopRequest {
            cause: StopCause::Requested,
            generation,
            timeout_ms: 0,
            incarnation: incarnation.to_owned(),
            executor_epoch: 0,
            deletion_token: String::new(),
            created_topics: Vec::new(),
        };
        pick_for_stop(slot, &req, "task t-0", |i| (i.0, i.1)).map(|i| i.0)
    }

    fn pick(slot: &Slot<(bool, &'static str)>, generation: u64) -> Result<bool, HostError> {
        pick_named(slot, generation, INC)
    }

    impl StopFacts for (bool, &'static str) {
        fn stop_claimed(&self) -> bool {
            self.0
        }
        fn incarnation(&self) -> &str {
            self.1
        }
    }

    fn admission(claimed_here: Option<bool>, incarnation: &str) -> StopAdmission {
        let req = StopRequest {
            generation: 3,
            incarnation: incarnation.to_owned(),
            // Stale on purpose: a replay is decided before any epoch check.
            executor_epoch: 1,
            cause: StopCause::Deleted,
            timeout_ms: 0,
            deletion_token: String::new(),
            created_topics: Vec::new(),
        };
        let instance = claimed_here.map(|c| (c, INC));
        stop_admission(&req, instance.as_ref().map(|i| i as &dyn StopFacts))
    }

    #[test]
    fn a_stop_whose_generation_was_already_stopped_here_is_answered_from_the_record() {
        assert_eq!(admission(Some(true), INC), StopAdmission::Replay);
    }

    #[test]
    fn a_replay_without_an_incarnation_is_answered_from_the_record() {
        assert_eq!(admission(Some(true), ""), StopAdmission::Replay);
    }

    #[test]
    fn a_stop_of_another_incarnation_never_gets_the_record() {
        assert_eq!(admission(Some(true), "inc-0"), StopAdmission::Check);
    }

    #[test]
    fn a_first_stop_of_a_running_instance_passes_every_check() {
        assert_eq!(admission(Some(false), INC), StopAdmission::Check);
    }

    #[test]
    fn a_stop_of_a_generation_this_executor_has_no_instance_of_passes_every_check() {
        // The record is gone (this process never had it, or restarted): refused or
        // NOT_FOUND by the checks, and the control plane runs the cleanup again (at least
        // once).
        assert_eq!(admission(None, INC), StopAdmission::Check);
    }

    #[test]
    fn a_stop_of_another_incarnation_is_refused() {
        assert!(matches!(
            check_incarnation("old", "new", "task t-0"),
            Err(HostError::StaleIncarnation { .. })
        ));
    }

    #[test]
    fn a_stop_of_the_same_or_an_unknown_incarnation_goes_on() {
        assert!(check_incarnation("i", "i", "task t-0").is_ok());
        assert!(check_incarnation("", "i", "task t-0").is_ok());
        assert!(check_incarnation("i", "", "task t-0").is_ok());
    }

    #[test]
    fn only_a_lease_that_certainly_holds_lets_a_destructive_request_through() {
        assert!(lease_refusal(LeaseStanding::Held, "x").is_none());
        assert!(matches!(
            lease_refusal(LeaseStanding::MayHaveExpired, "x"),
            Some(HostError::LeaseMayHaveExpired {
                standing: "lease may have expired",
                ..
            })
        ));
        assert!(matches!(
            lease_refusal(LeaseStanding::Unregistered, "x"),
            Some(HostError::LeaseMayHaveExpired {
                standing: "not registered",
                ..
            })
        ));
    }

    #[test]
    fn a_stop_for_a_known_generation_gets_that_instance_even_when_already_stopped() {
        let s = slot(&[(1, true), (2, false)]);
        assert!(pick(&s, 1).unwrap(), "replays go to the stopped generation");
        assert!(!pick(&s, 2).unwrap());
    }

    #[test]
    fn a_stop_for_an_older_unknown_generation_is_stale() {
        let s = slot(&[(3, false)]);
        assert!(matches!(
            pick(&s, 2),
            Err(HostError::StaleGeneration { newest: 3, .. })
        ));
    }

    #[test]
    fn a_stop_for_a_newer_generation_with_the_running_incarnation_reaches_that_instance() {
        let s = slot(&[(3, false)]);
        assert!(!pick(&s, 4).unwrap());
        let all_stopped = slot(&[(3, true)]);
        assert!(matches!(
            pick(&all_stopped, 4),
            Err(HostError::NotHosted(_))
        ));
    }

    #[test]
    fn a_stop_for_a_generation_never_assigned_without_the_incarnation_is_refused() {
        let s = slot(&[(3, false)]);
        assert!(matches!(
            pick_named(&s, 1003, ""),
            Err(HostError::NeverAssigned {
                requested: 1003,
                newest: 3,
                ..
            })
        ));
    }

    #[test]
    fn a_stop_for_a_generation_never_assigned_with_another_incarnation_is_refused() {
        let s = slot(&[(3, false)]);
        assert!(matches!(
            pick_named(&s, 4, "inc-0"),
            Err(HostError::NeverAssigned { .. })
        ));
    }

    #[test]
    fn a_stop_for_an_assigned_generation_of_another_incarnation_is_refused() {
        let s = slot(&[(3, false)]);
        assert!(matches!(
            pick_named(&s, 3, "inc-0"),
            Err(HostError::StaleIncarnation { .. })
        ));
        assert!(!pick_named(&s, 3, "").unwrap(), "no incarnation: no check");
    }
}
