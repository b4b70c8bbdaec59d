//! Whether calls reach an executor: what a call's outcome says about its executor, and
//! the backoff before the next call to one that did not answer. Pure.

use std::time::Duration;

/// First delay before calling an unreachable executor again, in milliseconds (doubles
/// per consecutive failure, jittered).
pub const REACH_BACKOFF_BASE_MS: u64 = 200;
/// Longest delay between calls to an unreachable executor, in milliseconds.
pub const REACH_BACKOFF_MAX_MS: u64 = 10_000;
/// Consecutive unreachable calls after which ListExecutors reports the executor
/// unreachable and no new work is placed on it.
pub const UNREACHABLE_AFTER_FAILURES: u32 = 3;

/// Delay before the next call after `failures` consecutive unreachable calls: doubling
/// from [`REACH_BACKOFF_BASE_MS`] up to [`REACH_BACKOFF_MAX_MS`], with "equal jitter"
/// (half fixed, half random) so that many units do not retry in step.
pub fn reach_backoff(failures: u32, random: f64) -> Duration {
    let full = REACH_BACKOFF_BASE_MS
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(REACH_BACKOFF_MAX_MS);
    let half = full / 2;
    Duration::from_millis(half + (half as f64 * random.clamp(0.0, 1.0)) as u64)
}

/// Which executor call a result comes from: a refusal means different things for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// StartConnector or StartTask.
    Start,
    /// StopConnector or StopTask.
    Stop,
    /// ComputeTaskConfigs.
    TaskConfigs,
    /// The identity probe of an executor not yet verified
    /// ([`crate::reconcile::Cluster::verify`]).
    Probe,
}

/// How a call failed, as far as its executor's reachability goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallFailure {
    /// No answer: unreachable, a timeout, a server whose certificate is someone else's.
    NoAnswer,
    /// The executor answered with this error status.
    Refused(tonic::Code),
}

/// What a call's result says about the executor, for its backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReachVerdict {
    /// It answered as an executor doing its work does: the backoff ends.
    Answered,
    /// The call failed in a way that the same call made again at once would too: the
    /// next calls to this executor wait ([`reach_backoff`]), and after
    /// [`UNREACHABLE_AFTER_FAILURES`] in a row it is shown unreachable.
    Failed,
}

/// Decides whether a call's outcome (`None`: a response) counts against its executor.
///
/// Failed: no answer; a start or task-config call refused with FAILED_PRECONDITION or
/// NOT_FOUND (the executor is at another epoch, fenced, or not hosting the instance: the
/// start was not taken, and retrying it on every pass would call it in a hot loop); any
/// call refused with UNAUTHENTICATED or PERMISSION_DENIED (the executor does not accept
/// this control plane); a probe refused for any reason (it did not show the executor is
/// there). Answered: a response, a stop's FAILED_PRECONDITION or NOT_FOUND (no instance
/// of that generation is there, which is what the stop wanted), and any other refusal
/// (the plugin's or the request's problem, recorded on the instance, not the executor's).
pub fn reach_verdict(kind: CallKind, failure: Option<CallFailure>) -> ReachVerdict {
    use tonic::Code;
    let Some(failure) = failure else {
        return ReachVerdict::Answered;
    };
    let code = match failure {
        CallFailure::NoAnswer => None,
        CallFailure::Refused(code) => Some(code),
    };
    match (kind, code) {
        (_, None) | (CallKind::Probe, Some(_)) => ReachVerdict::Failed,
        (_, Some(Code::Unauthenticated | Code::PermissionDenied)) => ReachVerdict::Failed,
        (
            CallKind::Start | CallKind::TaskConfigs,
            Some(Code::FailedPrecondition | Code::NotFound),
        ) => ReachVerdict::Failed,
        (CallKind::Stop, Some(Code::FailedPrecondition | Code::NotFound)) => ReachVerdict::Answered,
        (_, Some(_)) => ReachVerdict::Answered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn refused(code: Code) -> Option<CallFailure> {
        Some(CallFailure::Refused(code))
    }

    fn unreachable() -> Option<CallFailure> {
        Some(CallFailure::NoAnswer)
    }

    const KINDS: [CallKind; 4] = [
        CallKind::Start,
        CallKind::Stop,
        CallKind::TaskConfigs,
        CallKind::Probe,
    ];

    #[test]
    fn a_probe_refused_for_any_reason_fails() {
        for code in [
            Code::PermissionDenied,
            Code::NotFound,
            Code::FailedPrecondition,
            Code::InvalidArgument,
            Code::Internal,
        ] {
            assert_eq!(
                reach_verdict(CallKind::Probe, refused(code)),
                ReachVerdict::Failed,
                "{code:?}"
            );
        }
    }

    #[test]
    fn a_response_is_an_answer_for_every_kind() {
        for kind in KINDS {
            assert_eq!(
                reach_verdict(kind, None),
                ReachVerdict::Answered,
                "{kind:?}"
            );
        }
    }

    #[test]
    fn no_answer_fails_for_every_kind() {
        for kind in KINDS {
            assert_eq!(
                reach_verdict(kind, unreachable()),
                ReachVerdict::Failed,
                "{kind:?}"
            );
        }
    }

    #[test]
    fn an_executor_that_does_not_accept_the_control_plane_fails_every_kind() {
        for kind in KINDS {
            for code in [Code::Unauthenticated, Code::PermissionDenied] {
                assert_eq!(
                    reach_verdict(kind, refused(code)),
                    ReachVerdict::Failed,
                    "{kind:?} {code:?}"
                );
            }
        }
    }

    #[test]
    fn a_start_or_task_config_call_not_taken_fails() {
        for kind in [CallKind::Start, CallKind::TaskConfigs] {
            for code in [Code::FailedPrecondition, Code::NotFound] {
                assert_eq!(
                    reach_verdict(kind, refused(code)),
                    ReachVerdict::Failed,
                    "{kind:?} {code:?}"
                );
            }
        }
    }

    #[test]
    fn a_stop_finding_nothing_of_its_generation_is_an_answer() {
        for code in [Code::FailedPrecondition, Code::NotFound] {
            assert_eq!(
                reach_verdict(CallKind::Stop, refused(code)),
                ReachVerdict::Answered,
                "{code:?}"
            );
        }
    }

    #[test]
    fn other_refusals_are_answers() {
        for kind in [CallKind::Start, CallKind::Stop, CallKind::TaskConfigs] {
            for code in [Code::InvalidArgument, Code::Internal, Code::AlreadyExists] {
                assert_eq!(
                    reach_verdict(kind, refused(code)),
                    ReachVerdict::Answered,
                    "{kind:?} {code:?}"
                );
            }
        }
    }

    #[test]
    fn the_backoff_doubles_with_jitter_up_to_its_cap() {
        let ms = |failures, random| reach_backoff(failures, random).as_millis() as u64;
        // Half fixed, half random.
        assert_eq!(ms(1, 0.0), REACH_BACKOFF_BASE_MS / 2);
        assert_eq!(ms(1, 1.0), REACH_BACKOFF_BASE_MS);
        assert_eq!(ms(2, 1.0), REACH_BACKOFF_BASE_MS * 2);
        assert_eq!(ms(3, 1.0), REACH_BACKOFF_BASE_MS * 4);
        // Capped, however many failures.
        assert_eq!(ms(40, 1.0), REACH_BACKOFF_MAX_MS);
        assert_eq!(ms(u32::MAX, 0.0), REACH_BACKOFF_MAX_MS / 2);
        // Random values outside [0, 1] are clamped.
        assert_eq!(ms(1, 7.0), REACH_BACKOFF_BASE_MS);
        assert_eq!(ms(1, -3.0), REACH_BACKOFF_BASE_MS / 2);
    }
}
