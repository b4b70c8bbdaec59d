//! KIP-558 active topics on the executor: which topics a task wrote to (source) or read
//! from (sink), reported to the control plane with the status reports. A topic is
//! reported when first used; used again, it is reported again once
//! [`ACTIVE_TOPIC_REPORT_INTERVAL`] passed since its last report (at the task loop's next
//! turn), so that a topic still in use comes back after an operator reset the
//! connector's set, as in Kafka Connect (where the next record re-adds it).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

/// Least time between two reports of one topic by one task.
pub const ACTIVE_TOPIC_REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// When each topic a task used was last reported, and which were used since.
#[derive(Debug, Default)]
pub(super) struct ActiveTopics {
    reported: HashMap<String, Instant>,
    /// Used since their last report, not reported yet (the interval had not passed).
    pending: HashSet<String>,
}

impl ActiveTopics {
    /// The topics to report at `now`: those of `used` and of the earlier uses still
    /// pending that were never reported or last reported at least
    /// [`ACTIVE_TOPIC_REPORT_INTERVAL`] ago; the others of `used` wait as pending. Pure
    /// but for the state it keeps; `used` may be empty (a loop's turn without records).
    pub(super) fn due<'a>(
        &mut self,
        used: impl IntoIterator<Item = &'a str>,
        now: Instant,
    ) -> Vec<String> {
        for topic in used {
            if !self.pending.contains(topic) {
                self.pending.insert(topic.to_owned());
            }
        }
        let reported = &self.reported;
        let mut due: Vec<String> = self
            .pending
            .iter()
            .filter(|t| {
                reported
                    .get(t.as_str())
                    .is_none_or(|at| now.duration_since(*at) >= ACTIVE_TOPIC_REPORT_INTERVAL)
            })
            .cloned()
            .collect();
        due.sort();
        for topic in &due {
            self.pending.remove(topic);
            self.reported.insert(topic.clone(), now);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topic_used_for_the_first_time_is_reported_once() {
        let mut a = ActiveTopics::default();
        let now = Instant::now();
        assert_eq!(a.due(["t", "t", "u"], now), ["t", "u"]);
        assert!(a.due(["t"], now).is_empty());
    }

    #[test]
    fn a_topic_used_again_is_reported_once_the_interval_passed() {
        let mut a = ActiveTopics::default();
        let now = Instant::now();
        a.due(["t"], now);
        let soon = now + ACTIVE_TOPIC_REPORT_INTERVAL / 2;
        assert!(a.due(["t"], soon).is_empty());
        let later = now + ACTIVE_TOPIC_REPORT_INTERVAL;
        assert_eq!(a.due([], later), ["t"], "the pending use is reported");
        assert!(a.due([], later + ACTIVE_TOPIC_REPORT_INTERVAL).is_empty());
    }

    #[test]
    fn a_topic_not_used_again_is_not_reported_again() {
        let mut a = ActiveTopics::default();
        let now = Instant::now();
        a.due(["t"], now);
        assert!(a.due([], now + ACTIVE_TOPIC_REPORT_INTERVAL * 3).is_empty());
    }
}
