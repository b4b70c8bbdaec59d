//! Leases and what they say: pure decisions over a lease, an epoch and the time, with a
//! unit test per case.

use std::time::{Duration, Instant};

use crate::model::ExecutorRecord;
use crate::plan::unit::Host;

/// Heartbeat intervals without a heartbeat after which a leased executor counts as
/// unresponsive: nothing new is placed on it and no call is sent to it.
pub const UNRESPONSIVE_AFTER_HEARTBEATS: u32 = 3;

/// Leases an executor stays LOST (listed by ListExecutors) before it is forgotten.
pub const LOST_EXECUTOR_EXPIRY_LEASES: u32 = 5;

/// Lease settings handed to executors.
#[derive(Debug, Clone, Copy)]
pub struct LeaseConfig {
    /// Lease length, in milliseconds.
    pub lease_ms: u32,
    /// Heartbeat interval, in milliseconds.
    pub heartbeat_interval_ms: u32,
}

impl LeaseConfig {
    /// The lease length.
    pub fn length(&self) -> Duration {
        Duration::from_millis(u64::from(self.lease_ms))
    }

    /// Time without a heartbeat after which a leased executor is unresponsive.
    pub fn unresponsive_after(&self) -> Duration {
        Duration::from_millis(
            u64::from(self.heartbeat_interval_ms) * u64::from(UNRESPONSIVE_AFTER_HEARTBEATS),
        )
    }

    /// How long a lost executor stays listed before it is forgotten.
    pub fn forget_lost_after(&self) -> Duration {
        self.length() * LOST_EXECUTOR_EXPIRY_LEASES
    }
}

/// Lease of one registered executor epoch, kept in memory: after a control-plane restart
/// every registered executor gets a fresh lease (it cannot have heartbeated to us).
#[derive(Debug, Clone)]
pub struct Lease {
    /// Epoch the lease is for.
    pub epoch: u64,
    /// When it runs out.
    pub expires: Instant,
    /// Last heartbeat, Unix ms (0 when none since this process started).
    pub last_heartbeat_ms: i64,
    /// Last sign of life: the grant, or the last heartbeat.
    pub last_seen: Instant,
}

impl Lease {
    /// A lease at `epoch` that runs one lease length from `now`, heard from at `now`
    /// (`heartbeat_ms`: the Unix time of that sign of life, 0 for none).
    pub fn from(now: Instant, config: LeaseConfig, epoch: u64, heartbeat_ms: i64) -> Self {
        Self {
            epoch,
            expires: now + config.length(),
            last_heartbeat_ms: heartbeat_ms,
            last_seen: now,
        }
    }

    /// True once the lease ran out at `now`.
    pub fn expired(&self, now: Instant) -> bool {
        self.expires <= now
    }

    /// True while the lease is current at `epoch`.
    pub fn holds(&self, epoch: u64, now: Instant) -> bool {
        self.epoch == epoch && !self.expired(now)
    }
}

/// What a heartbeat (or any call that names an epoch) at `epoch` means for the lease held
/// for its executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatMeaning {
    /// The lease at that epoch is current: renewed.
    Renew,
    /// This process holds no lease for the executor at all (a new leader before the
    /// term's grants): the store decides whether the lease is adopted ([`adoptable`]).
    AskStore,
    /// The lease is at another epoch or ran out: the epoch is fenced.
    Fenced,
}

/// True when `epoch` of an executor is superseded: a newer epoch of it holds the lease
/// here (`held`) or was registered here (`registered`: the newest epoch the store gave it
/// in a registration this process handled), even if that registration's lease is not
/// granted yet. A superseded epoch is never granted a lease, and its calls are fenced:
/// registrations that finish out of order (queued while this process was paused, each
/// waiting on its identity probe) leave the lease at the newest. Pure.
pub fn superseded(held: Option<&Lease>, registered: Option<u64>, epoch: u64) -> bool {
    held.map(|l| l.epoch)
        .max(registered)
        .is_some_and(|newest| epoch < newest)
}

/// Decides what a heartbeat at `epoch` means, given the lease held for its executor and
/// the newest epoch registered for it here ([`superseded`]). An executor whose lease ran
/// out keeps its entry until the store marks it lost, so it is fenced, never adopted
/// back. Pure.
pub fn heartbeat_meaning(
    held: Option<&Lease>,
    registered: Option<u64>,
    epoch: u64,
    now: Instant,
) -> HeartbeatMeaning {
    match held {
        _ if superseded(held, registered, epoch) => HeartbeatMeaning::Fenced,
        None => HeartbeatMeaning::AskStore,
        Some(l) if l.holds(epoch, now) => HeartbeatMeaning::Renew,
        Some(_) => HeartbeatMeaning::Fenced,
    }
}

/// True when an executor holding no lease here may be granted one at `epoch`: the store
/// has it registered at that epoch and not lost (`stored`: its record, `None` when it is
/// unknown or the store did not answer). Pure.
pub fn adoptable(stored: Option<&ExecutorRecord>, epoch: u64) -> bool {
    stored.is_some_and(|e| e.epoch == epoch && !e.lost)
}

/// How executor `record` is doing, given its lease here: lost when it is marked lost or
/// holds no lease at its epoch; unresponsive when the lease ran out but the store has not
/// marked it lost yet (its instances may still run until it fences itself) or it has been
/// silent for `silent_after`; live otherwise. Pure.
pub fn health(
    record: &ExecutorRecord,
    lease: Option<&Lease>,
    now: Instant,
    silent_after: Duration,
) -> Host {
    match lease.filter(|l| l.epoch == record.epoch) {
        _ if record.lost => Host::Lost,
        None => Host::Lost,
        Some(l) if l.expired(now) => Host::Unresponsive,
        Some(l) if now.duration_since(l.last_seen) >= silent_after => Host::Unresponsive,
        Some(_) => Host::Live,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: LeaseConfig = LeaseConfig {
        lease_ms: 10_000,
        heartbeat_interval_ms: 1_000,
    };

    fn record(epoch: u64, lost: bool) -> ExecutorRecord {
        ExecutorRecord {
            id: "e1".into(),
            address: "http://127.0.0.2:1".into(),
            epoch,
            plugins: Vec::new(),
            lost,
            record_log: String::new(),
            transforms: Vec::new(),
        }
    }

    #[test]
    fn a_lease_runs_one_length_from_its_grant() {
        let now = Instant::now();
        let l = Lease::from(now, CONFIG, 3, 0);
        assert!(l.holds(3, now + Duration::from_millis(9_999)));
        assert!(!l.expired(now + Duration::from_millis(9_999)));
        assert!(l.expired(now + Duration::from_millis(10_000)));
        assert!(!l.holds(3, now + Duration::from_millis(10_000)));
    }

    #[test]
    fn a_lease_holds_only_at_its_epoch() {
        let now = Instant::now();
        let l = Lease::from(now, CONFIG, 3, 0);
        assert!(!l.holds(2, now));
        assert!(!l.holds(4, now));
    }

    #[test]
    fn a_heartbeat_at_the_current_leased_epoch_renews() {
        let now = Instant::now();
        let l = Lease::from(now, CONFIG, 3, 0);
        assert_eq!(
            heartbeat_meaning(Some(&l), None, 3, now),
            HeartbeatMeaning::Renew
        );
    }

    #[test]
    fn a_heartbeat_without_any_lease_here_asks_the_store() {
        assert_eq!(
            heartbeat_meaning(None, None, 3, Instant::now()),
            HeartbeatMeaning::AskStore
        );
    }

    #[test]
    fn a_heartbeat_at_another_epoch_is_fenced() {
        let now = Instant::now();
        let l = Lease::from(now, CONFIG, 3, 0);
        assert_eq!(
            heartbeat_meaning(Some(&l), None, 2, now),
            HeartbeatMeaning::Fenced
        );
    }

    #[test]
    fn a_heartbeat_after_the_lease_ran_out_is_fenced_not_adopted() {
        let now = Instant::now();
        let l = Lease::from(now, CONFIG, 3, 0);
        assert_eq!(
            heartbeat_meaning(Some(&l), None, 3, now + CONFIG.length()),
            HeartbeatMeaning::Fenced
        );
    }

    #[test]
    fn an_epoch_older_than_the_leased_one_is_superseded() {
        let l = Lease::from(Instant::now(), CONFIG, 5, 0);
        assert!(superseded(Some(&l), None, 4));
        assert!(!superseded(Some(&l), None, 5), "the leased epoch");
        assert!(!superseded(Some(&l), None, 6), "a newer registration");
    }

    #[test]
    fn an_epoch_older_than_the_newest_registered_is_superseded_before_its_grant() {
        let l = Lease::from(Instant::now(), CONFIG, 4, 0);
        assert!(
            superseded(Some(&l), Some(7), 4),
            "registered at 7, not granted yet"
        );
        assert!(superseded(None, Some(7), 6));
        assert!(!superseded(None, Some(7), 7));
        assert!(!superseded(None, None, 1), "nothing known here");
    }

    #[test]
    fn a_heartbeat_at_an_epoch_superseded_by_a_registration_is_fenced_without_the_store() {
        let now = Instant::now();
        let l = Lease::from(now, CONFIG, 4, 0);
        assert_eq!(
            heartbeat_meaning(Some(&l), Some(7), 4, now),
            HeartbeatMeaning::Fenced,
            "its lease still runs, but a newer epoch registered"
        );
        assert_eq!(
            heartbeat_meaning(None, Some(7), 4, now),
            HeartbeatMeaning::Fenced,
            "no lease here: fenced, not adopted"
        );
        assert_eq!(
            heartbeat_meaning(None, Some(7), 7, now),
            HeartbeatMeaning::AskStore
        );
    }

    #[test]
    fn a_lease_is_adoptable_only_at_the_stored_epoch_of_an_executor_not_lost() {
        assert!(adoptable(Some(&record(3, false)), 3));
        assert!(!adoptable(Some(&record(3, false)), 4), "another epoch");
        assert!(!adoptable(Some(&record(3, true)), 3), "lost");
        assert!(!adoptable(None, 3), "not registered, or no answer");
    }

    #[test]
    fn an_executor_marked_lost_is_lost_whatever_its_lease() {
        let now = Instant::now();
        let l = Lease::from(now, CONFIG, 3, 0);
        let silent = CONFIG.unresponsive_after();
        assert_eq!(health(&record(3, true), Some(&l), now, silent), Host::Lost);
    }

    #[test]
    fn an_executor_without_a_lease_at_its_epoch_is_lost() {
        let now = Instant::now();
        let l = Lease::from(now, CONFIG, 2, 0);
        let silent = CONFIG.unresponsive_after();
        assert_eq!(health(&record(3, false), None, now, silent), Host::Lost);
        assert_eq!(health(&record(3, false), Some(&l), now, silent), Host::Lost);
    }

    #[test]
    fn an_executor_whose_lease_ran_out_but_not_marked_lost_is_unresponsive() {
        let now = Instant::now();
        let l = Lease::from(now, CONFIG, 3, 0);
        let later = now + CONFIG.length();
        let silent = CONFIG.length() * 2;
        assert_eq!(
            health(&record(3, false), Some(&l), later, silent),
            Host::Unresponsive
        );
    }

    #[test]
    fn an_executor_silent_for_three_heartbeats_is_unresponsive() {
        let now = Instant::now();
        let l = Lease::from(now, CONFIG, 3, 0);
        let silent = CONFIG.unresponsive_after();
        assert_eq!(
            health(&record(3, false), Some(&l), now + silent, silent),
            Host::Unresponsive
        );
        assert_eq!(
            health(
                &record(3, false),
                Some(&l),
                now + silent - Duration::from_millis(1),
                silent
            ),
            Host::Live
        );
    }

    #[test]
    fn the_lease_settings_derive_the_silence_and_forgetting_times() {
        assert_eq!(CONFIG.unresponsive_after(), Duration::from_millis(3_000));
        assert_eq!(CONFIG.forget_lost_after(), Duration::from_millis(50_000));
    }
}
