//! What a check returns and what [`Kit::all`](crate::Kit::all) reports: the checks in
//! their order, a failure, a skip.

use wharf_sdk::PluginKind;

/// A check that did not hold: which one, and what was seen.
#[derive(thiserror::Error)]
#[error("[{check}] {message}")]
pub struct CheckFailed {
    /// The check's name (its method name).
    pub check: &'static str,
    /// What went wrong, with what was expected and seen.
    pub message: String,
    /// True when the check could not check anything because the probe lacks what it
    /// needs (no `Probe::pre_existing` resource, a `Probe::remove` that removes nothing):
    /// the message says what to implement. Called alone, such a check fails;
    /// [`Kit::all`](crate::Kit::all) reports it as skipped in its [`Report`].
    pub checked_nothing: bool,
}

/// A check [`Kit::all`](crate::Kit::all) skipped because it could not check anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The check's name.
    pub check: &'static str,
    /// Why, and what to implement in the probe for it to check something.
    pub reason: String,
}

/// What [`Kit::all`](crate::Kit::all) ran: the checks that passed and those skipped, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Checks that passed.
    pub passed: Vec<&'static str>,
    /// Checks that checked nothing (see [`CheckFailed::checked_nothing`]).
    pub skipped: Vec<Skipped>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} checks passed", self.passed.len())?;
        if self.skipped.is_empty() {
            return Ok(());
        }
        write!(f, ", {} skipped:", self.skipped.len())?;
        for s in &self.skipped {
            write!(f, "\n  [{}] {}", s.check, s.reason)?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for CheckFailed {
    // `unwrap()` in a test prints Debug: make it the readable message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Result of one check.
pub type CheckResult = Result<(), CheckFailed>;

/// The check about deletion itself, which a failed tidy-up deletion points to.
pub(crate) const CLEANUP_CHECK: &str = "delete_removes_everything";

/// Every check, in the order [`Kit::all`](crate::Kit::all) runs them: the four about
/// cleanup first, so that a cleanup bug is reported by the check about it rather than by
/// the deletion that ends a check about plain stops or records (each check but those
/// ends with one).
pub const CHECKS: [&str; 14] = [
    CLEANUP_CHECK,
    "repeated_cleanup_is_a_no_op",
    "cleanup_without_start_succeeds",
    "cleanup_after_half_start_succeeds",
    "plain_stops_keep_resources",
    "lower_tasks_max_keeps_resources",
    "deleting_one_connector_leaves_another",
    "pre_existing_resources_survive",
    "late_cleanup_leaves_a_re_created_connector",
    "start_refuses_what_another_incarnation_kept",
    "ledger_declares_before_creating",
    "plain_stop_releases_nothing",
    "delete_releases_every_created_entry",
    "sink_acknowledges_only_flushed_records",
];

/// The checks of [`CHECKS`] that apply to a plugin of `kind`, in order. Pure.
pub(crate) fn checks_for(kind: PluginKind) -> impl Iterator<Item = &'static str> {
    CHECKS
        .into_iter()
        .filter(move |c| kind == PluginKind::Sink || *c != "sink_acknowledges_only_flushed_records")
}

/// A check that failed with `message`.
pub(crate) fn fail(check: &'static str, message: String) -> CheckFailed {
    CheckFailed {
        check,
        message,
        checked_nothing: false,
    }
}

/// A check that could not check anything: `message` says what to implement.
pub(crate) fn nothing_checked(check: &'static str, message: String) -> CheckFailed {
    CheckFailed {
        check,
        message,
        checked_nothing: true,
    }
}

/// Adds the outcome of `check` to `report`: a pass, a skip (it checked nothing), or the
/// failure that ends [`Kit::all`](crate::Kit::all). Pure.
pub(crate) fn record(
    report: &mut Report,
    check: &'static str,
    outcome: CheckResult,
) -> CheckResult {
    match outcome {
        Ok(()) => report.passed.push(check),
        Err(e) if e.checked_nothing => report.skipped.push(Skipped {
            check: e.check,
            reason: e.message,
        }),
        Err(e) => return Err(e),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cleanup_checks_run_first_and_the_sink_check_only_for_a_sink() {
        let source: Vec<_> = checks_for(PluginKind::Source).collect();
        let sink: Vec<_> = checks_for(PluginKind::Sink).collect();
        assert_eq!(&source[..4], &CHECKS[..4]);
        assert!(
            source[..4]
                .iter()
                .all(|c| c.contains("cleanup") || c.starts_with("delete_"))
        );
        assert!(!source.contains(&"sink_acknowledges_only_flushed_records"));
        assert_eq!(sink.len(), CHECKS.len());
        assert_eq!(source.len(), CHECKS.len() - 1);
    }

    #[test]
    fn all_records_passes_and_skips_and_stops_at_a_failure() {
        let mut report = Report::default();
        assert!(record(&mut report, "a", Ok(())).is_ok());
        let skip = nothing_checked("b", "checked nothing: implement X".to_owned());
        assert!(record(&mut report, "b", Err(skip)).is_ok());
        let failed = record(&mut report, "c", Err(fail("c", "removed y".to_owned())));
        assert_eq!(failed.unwrap_err().message, "removed y");
        assert_eq!(report.passed, ["a"]);
        assert_eq!(
            report.skipped,
            [Skipped {
                check: "b",
                reason: "checked nothing: implement X".to_owned()
            }]
        );
        assert_eq!(
            report.to_string(),
            "1 checks passed, 1 skipped:\n  [b] checked nothing: implement X"
        );
    }
}
