//! One record log per cluster: whether a registering executor's log fits the cluster.
//!
//! A source task appends to the record log of the executor it runs on and a sink task
//! reads the log of its own executor, so tasks of one cluster placed on executors whose
//! logs differ lose records for good (a sink never sees what went to the other log).
//! The control plane therefore admits an executor only when its log is the one the live
//! executors use.
//!
//! - **The cluster's log** is the log of the live executors (registered and not lost),
//!   as their stored records say, so it survives a control-plane restart. With none live
//!   any log is admitted and becomes the cluster's: an operator moves a cluster to another
//!   log by stopping every executor and starting them on the new one.
//! - **Identity**: the executor reports its log canonically (servers sorted, no
//!   credentials, see the executor's `LogConfig::identity`); equal strings are one log.
//! - **Embedded logs** (`embedded:DIR`) are one process's own files, so two of them are
//!   two logs even on one host: an executor on the embedded log is alone in its cluster.
//!   `--allow-separate-embedded-logs` (for tests of placement and lifecycle only) admits
//!   executors on embedded logs beside each other; each keeps its own records.
//! - An executor that reports no log (empty: an older one) is admitted and does not
//!   define the cluster's log.

/// Prefix of an embedded log's identity.
pub const EMBEDDED_PREFIX: &str = "embedded:";

/// A registering executor's log differs from a live executor's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogMismatch {
    /// The registering executor's log.
    pub log: String,
    /// A live executor whose log differs.
    pub live_executor: String,
    /// That executor's log: the cluster's.
    pub cluster_log: String,
}

impl std::fmt::Display for LogMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let embedded = [&self.log, &self.cluster_log]
            .iter()
            .any(|l| l.starts_with(EMBEDDED_PREFIX));
        write!(
            f,
            "record log {} differs from the cluster's record log {} (used by live executor {}); every executor of a cluster must use one record log (--record-log){}",
            self.log,
            self.cluster_log,
            self.live_executor,
            if embedded {
                ", and an embedded log is one executor's own, so an executor on it is alone in its cluster"
            } else {
                ""
            }
        )
    }
}

/// Whether `executor` may register with record log `log` beside the `live` executors
/// (id and log of each; `executor`'s own entry and those without a log are skipped).
/// Pure.
///
/// # Errors
/// [`LogMismatch`] naming the first live executor whose log differs.
pub fn admit(
    executor: &str,
    log: &str,
    live: &[(&str, &str)],
    allow_separate_embedded: bool,
) -> Result<(), LogMismatch> {
    if log.is_empty() {
        return Ok(());
    }
    let same = |other: &str| match (
        log.starts_with(EMBEDDED_PREFIX),
        other.starts_with(EMBEDDED_PREFIX),
    ) {
        (true, true) => allow_separate_embedded,
        (false, false) => log == other,
        (true, false) | (false, true) => false,
    };
    match live
        .iter()
        .find(|(id, other)| *id != executor && !other.is_empty() && !same(other))
    {
        None => Ok(()),
        Some((id, other)) => Err(LogMismatch {
            log: log.to_owned(),
            live_executor: (*id).to_owned(),
            cluster_log: (*other).to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NATS: &str = "nats://a:4222?prefix=wharf";
    const OTHER_NATS: &str = "nats://b:4222?prefix=wharf";

    #[test]
    fn the_first_executor_is_admitted_with_any_log() {
        assert_eq!(admit("e1", NATS, &[], false), Ok(()));
        assert_eq!(admit("e1", "embedded:/d/log", &[], false), Ok(()));
    }

    #[test]
    fn an_executor_on_the_live_executors_log_is_admitted() {
        assert_eq!(admit("e2", NATS, &[("e1", NATS)], false), Ok(()));
    }

    #[test]
    fn an_executor_on_another_log_is_refused_naming_both_logs() {
        let e = admit("e2", OTHER_NATS, &[("e1", NATS)], false).expect_err("refused");
        assert_eq!(
            e,
            LogMismatch {
                log: OTHER_NATS.into(),
                live_executor: "e1".into(),
                cluster_log: NATS.into(),
            }
        );
        let text = e.to_string();
        assert!(
            text.contains(OTHER_NATS) && text.contains(NATS) && text.contains("e1"),
            "{text}"
        );
    }

    #[test]
    fn embedded_beside_a_shared_log_is_refused_either_way() {
        assert!(admit("e2", "embedded:/d/log", &[("e1", NATS)], true).is_err());
        assert!(admit("e2", NATS, &[("e1", "embedded:/d/log")], true).is_err());
    }

    #[test]
    fn two_embedded_logs_are_two_logs_unless_allowed() {
        let live = [("e1", "embedded:/d1/log")];
        let e = admit("e2", "embedded:/d2/log", &live, false).expect_err("refused");
        assert!(e.to_string().contains("alone in its cluster"), "{e}");
        assert_eq!(admit("e2", "embedded:/d2/log", &live, true), Ok(()));
    }

    #[test]
    fn an_executor_registering_again_is_not_compared_with_itself() {
        assert_eq!(admit("e1", OTHER_NATS, &[("e1", NATS)], false), Ok(()));
    }

    #[test]
    fn executors_without_a_log_neither_refuse_nor_are_refused() {
        assert_eq!(admit("e2", NATS, &[("e1", "")], false), Ok(()));
        assert_eq!(admit("e2", "", &[("e1", NATS)], false), Ok(()));
    }
}
