//! Log lines about events that may come by the thousand (failed span exports, refused
//! callers, failed accepts), written at most once per interval ([`Throttle`]). A leaf:
//! whoever logs such events uses it without depending on the logging setup.

/// Whether a throttled log line is due at `now`: the first one is, later ones once
/// `interval` has passed since the last line (`last`).
pub fn line_due(
    last: Option<std::time::Instant>,
    now: std::time::Instant,
    interval: std::time::Duration,
) -> bool {
    match last {
        None => true,
        Some(t) => now.saturating_duration_since(t) >= interval,
    }
}

/// A warning written at most once per interval about events that may come by the
/// thousand (failed span exports, refused callers): the first event gets a line, later
/// ones one line per interval, which says how many went without one ([`line_due`]).
#[derive(Debug, Default)]
pub struct Throttle {
    /// When the last line was written.
    last: Option<std::time::Instant>,
    /// Events since then without a line.
    silenced: u64,
}

impl Throttle {
    /// [`Throttle::note`] at the current instant, on a throttle shared between threads
    /// (a `static` or a field behind `&self`); a poisoned lock is used as it is.
    pub fn note_shared(
        shared: &std::sync::Mutex<Self>,
        interval: std::time::Duration,
    ) -> Option<u64> {
        shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .note(std::time::Instant::now(), interval)
    }

    /// No line written yet (for a `static`).
    pub const fn new() -> Self {
        Self {
            last: None,
            silenced: 0,
        }
    }

    /// Notes an event at `now`: `Some(n)` when its line is due (write it, saying that `n`
    /// events went without one since the previous line), `None` when it only counts.
    pub fn note(&mut self, now: std::time::Instant, interval: std::time::Duration) -> Option<u64> {
        if line_due(self.last, now, interval) {
            self.last = Some(now);
            Some(std::mem::take(&mut self.silenced))
        } else {
            self.silenced += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An interval for the tests.
    const EXPORT_WARN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

    #[test]
    fn the_first_export_failure_is_logged() {
        assert!(line_due(
            None,
            std::time::Instant::now(),
            EXPORT_WARN_INTERVAL
        ));
    }

    #[test]
    fn a_failure_soon_after_a_logged_one_is_not_logged() {
        let t = std::time::Instant::now();
        assert!(!line_due(
            Some(t),
            t + EXPORT_WARN_INTERVAL / 2,
            EXPORT_WARN_INTERVAL
        ));
    }

    #[test]
    fn a_failure_an_interval_after_a_logged_one_is_logged() {
        let t = std::time::Instant::now();
        assert!(line_due(
            Some(t),
            t + EXPORT_WARN_INTERVAL,
            EXPORT_WARN_INTERVAL
        ));
    }

    #[test]
    fn a_throttle_says_how_many_events_went_without_a_line() {
        let t = std::time::Instant::now();
        let mut throttle = Throttle::default();
        assert_eq!(throttle.note(t, EXPORT_WARN_INTERVAL), Some(0));
        assert_eq!(throttle.note(t, EXPORT_WARN_INTERVAL), None);
        assert_eq!(throttle.note(t, EXPORT_WARN_INTERVAL), None);
        assert_eq!(
            throttle.note(t + EXPORT_WARN_INTERVAL, EXPORT_WARN_INTERVAL),
            Some(2)
        );
    }
}
