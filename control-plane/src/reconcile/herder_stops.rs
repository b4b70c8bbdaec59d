//! The stops with `false` this control plane's herder sent and the executor answered,
//! kept in memory for a while: a herder pass whose store write failed after its stop
//! (the store unavailable, leadership lost for a moment) leaves the instance recorded
//! RUNNING, and the heartbeat correction must not take the instance's absence for a stop
//! nobody asked for ([`super::hosted`]). Lost on a restart or a failover, where the
//! correction falls back to FAILED.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a sent stop is remembered: beyond the two heartbeats the correction waits
/// for, and beyond a store outage the herder's retried pass waits out.
pub const HERDER_STOP_MEMORY: Duration = Duration::from_secs(600);

/// An instance: connector, task (`None`: the connector instance), generation.
pub type StoppedKey = (String, Option<u32>, u64);

/// The stops sent, with when.
#[derive(Debug, Default)]
pub struct HerderStops {
    sent: Mutex<HashMap<StoppedKey, Instant>>,
}

impl HerderStops {
    /// Notes that the herder stopped `key` at `now`, and forgets stops older than
    /// [`HERDER_STOP_MEMORY`].
    pub fn note(&self, key: StoppedKey, now: Instant) {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        sent.retain(|_, at| now.saturating_duration_since(*at) < HERDER_STOP_MEMORY);
        sent.insert(key, now);
    }

    /// True when the herder stopped `key` within [`HERDER_STOP_MEMORY`] before `now`.
    pub fn stopped(&self, key: &StoppedKey, now: Instant) -> bool {
        let sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        sent.get(key)
            .is_some_and(|at| now.saturating_duration_since(*at) < HERDER_STOP_MEMORY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(task: Option<u32>, generation: u64) -> StoppedKey {
        ("c".to_owned(), task, generation)
    }

    #[test]
    fn a_noted_stop_is_known_for_its_generation_only() {
        let stops = HerderStops::default();
        let t0 = Instant::now();
        stops.note(key(Some(0), 4), t0);
        assert!(stops.stopped(&key(Some(0), 4), t0));
        assert!(!stops.stopped(&key(Some(0), 5), t0));
        assert!(!stops.stopped(&key(None, 4), t0));
    }

    #[test]
    fn a_stop_is_forgotten_after_the_memory() {
        let stops = HerderStops::default();
        let t0 = Instant::now();
        stops.note(key(Some(0), 4), t0);
        let later = t0 + HERDER_STOP_MEMORY;
        assert!(!stops.stopped(&key(Some(0), 4), later));
        stops.note(key(Some(1), 1), later);
        assert_eq!(stops.sent.lock().map(|s| s.len()).unwrap_or(0), 1, "pruned");
    }
}
