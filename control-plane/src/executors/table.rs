//! The executor table: one entry per executor id with everything this process knows
//! about it, changed only through `&mut self` and with the time passed in, so that every
//! rule here is tested without a clock, a store or a runtime.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use super::lease::{HeartbeatMeaning, Lease, LeaseConfig, health, heartbeat_meaning, superseded};
use super::reach::{UNREACHABLE_AFTER_FAILURES, reach_backoff};
use super::view::ExecutorView;
use crate::model::ExecutorRecord;
use crate::plan::hosted::InstanceKey;
use crate::plan::unit::Host;

/// Everything known about one executor id. An entry with nothing in it is removed.
#[derive(Debug, Default)]
struct Entry {
    /// Its lease at one epoch.
    lease: Option<Lease>,
    /// The newest epoch the store gave it in a registration this process handled, from
    /// the moment the store wrote it (before its probe and its grant).
    registered: Option<u64>,
    /// Calls that did not reach it, while any did.
    reach: Option<Reach>,
    /// The epoch whose advertised address was found to answer as this executor: only
    /// that epoch takes new work.
    verified_epoch: Option<u64>,
    /// Its identity probe runs.
    probing: bool,
    /// A status correction from its heartbeat runs.
    correcting: bool,
    /// Its last heartbeat that reported what it hosts, as judged.
    hosted: Option<HostedReport>,
    /// The epoch it was lost at and since when this process saw it lost.
    lost_since: Option<(u64, Instant)>,
}

impl Entry {
    fn is_empty(&self) -> bool {
        let Entry {
            lease,
            registered,
            reach,
            verified_epoch,
            probing,
            correcting,
            hosted,
            lost_since,
        } = self;
        lease.is_none()
            && registered.is_none()
            && reach.is_none()
            && verified_epoch.is_none()
            && !probing
            && !correcting
            && hosted.is_none()
            && lost_since.is_none()
    }
}

/// An executor's last heartbeat that reported what it hosts.
#[derive(Debug, Clone)]
struct HostedReport {
    /// The epoch it came from.
    epoch: u64,
    /// When it was judged.
    at: Instant,
    /// Instances recorded RUNNING there that it did not list.
    missing: BTreeSet<InstanceKey>,
}

/// Calls to one executor that did not reach it, for backoff and reporting.
#[derive(Debug, Clone)]
struct Reach {
    /// Consecutive calls that did not reach it.
    failures: u32,
    /// No call before this.
    next_try: Instant,
    /// Error of the last one.
    last_error: String,
}

/// How a heartbeat went for the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    /// The lease was renewed; `was_silent`: the executor had been silent long enough to
    /// count as unresponsive, and answers again.
    Renewed {
        /// It had been unresponsive.
        was_silent: bool,
    },
    /// This process holds no lease for it at all: the store decides (adoption).
    NoLease,
    /// Its epoch is fenced here.
    Fenced,
}

/// How an adoption went once the store said the epoch is registered and not lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adoption {
    /// The lease was granted now.
    Adopted,
    /// A newer epoch registered here meanwhile ([`superseded`]): nothing granted.
    Superseded,
    /// A lease was granted meanwhile (the term's grants, a registration): kept, and
    /// `at_epoch` says whether it is at the caller's epoch.
    HeldAlready {
        /// The lease granted meanwhile is at the caller's epoch.
        at_epoch: bool,
    },
}

/// Every executor this process knows of, by id.
#[derive(Debug, Default)]
pub struct ExecutorTable {
    entries: HashMap<String, Entry>,
}

impl ExecutorTable {
    fn entry(&mut self, id: &str) -> &mut Entry {
        self.entries.entry(id.to_owned()).or_default()
    }

    /// Removes `id`'s entry once nothing is left in it.
    fn tidy(&mut self, id: &str) {
        if self.entries.get(id).is_some_and(Entry::is_empty) {
            self.entries.remove(id);
        }
    }

    fn lease(&self, id: &str) -> Option<&Lease> {
        self.entries.get(id).and_then(|e| e.lease.as_ref())
    }

    /// Gives `id` the lease `lease`, replacing any other, unless its epoch is superseded
    /// ([`superseded`]: a newer one holds the lease or registered here); false then, and
    /// nothing changes.
    pub fn grant(&mut self, id: &str, lease: Lease) -> bool {
        let entry = self.entry(id);
        if superseded(entry.lease.as_ref(), entry.registered, lease.epoch) {
            self.tidy(id);
            return false;
        }
        entry.lease = Some(lease);
        true
    }

    /// Notes that the store registered `id` at `epoch`, before its probe and its grant:
    /// from now on an older epoch is fenced (it holds no lease, its heartbeats are
    /// refused) and granted nothing. A lease held at an older epoch stays until the
    /// grant replaces it or it runs out, so that `id` still holds a lease at some epoch
    /// meanwhile ([`ExecutorTable::holds_any`]).
    pub fn registered(&mut self, id: &str, epoch: u64) {
        let entry = self.entry(id);
        entry.registered = entry.registered.max(Some(epoch));
    }

    /// A heartbeat from `id` at `epoch` at `now` ([`heartbeat_meaning`]); a renewal runs
    /// the lease one length from `now` and notes `heartbeat_ms` (Unix ms).
    pub fn heartbeat(
        &mut self,
        id: &str,
        epoch: u64,
        now: Instant,
        config: LeaseConfig,
        heartbeat_ms: i64,
    ) -> Heartbeat {
        let registered = self.entries.get(id).and_then(|e| e.registered);
        match heartbeat_meaning(self.lease(id), registered, epoch, now) {
            HeartbeatMeaning::AskStore => Heartbeat::NoLease,
            HeartbeatMeaning::Fenced => Heartbeat::Fenced,
            HeartbeatMeaning::Renew => {
                let Some(l) = self.entry(id).lease.as_mut() else {
                    return Heartbeat::NoLease;
                };
                let was_silent = now.duration_since(l.last_seen) >= config.unresponsive_after();
                *l = Lease::from(now, config, epoch, heartbeat_ms);
                Heartbeat::Renewed { was_silent }
            }
        }
    }

    /// True when this process holds any lease for `id`, current or not.
    pub fn has_lease(&self, id: &str) -> bool {
        self.lease(id).is_some()
    }

    /// Grants `lease` to `id` unless a lease was granted meanwhile, which is kept, or a
    /// newer epoch registered here.
    pub fn adopt(&mut self, id: &str, lease: Lease) -> Adoption {
        let epoch = lease.epoch;
        let entry = self.entry(id);
        match &entry.lease {
            Some(held) => Adoption::HeldAlready {
                at_epoch: held.epoch == epoch,
            },
            None if superseded(None, entry.registered, epoch) => {
                self.tidy(id);
                Adoption::Superseded
            }
            None => {
                entry.lease = Some(lease);
                Adoption::Adopted
            }
        }
    }

    /// True when `id` holds a current lease at `epoch` and no newer epoch registered.
    pub fn holds(&self, id: &str, epoch: u64, now: Instant) -> bool {
        let registered = self.entries.get(id).and_then(|e| e.registered);
        self.lease(id)
            .is_some_and(|l| l.holds(epoch, now) && !superseded(Some(l), registered, epoch))
    }

    /// True when `id` holds a current lease at any epoch.
    pub fn holds_any(&self, id: &str, now: Instant) -> bool {
        self.lease(id).is_some_and(|l| !l.expired(now))
    }

    /// Last heartbeat of `id`, Unix ms (0 when none since this process started).
    pub fn last_heartbeat_ms(&self, id: &str) -> i64 {
        self.lease(id).map_or(0, |l| l.last_heartbeat_ms)
    }

    /// Executors (id, epoch) whose lease ran out at `now`.
    pub fn expired(&self, now: Instant) -> Vec<(String, u64)> {
        self.entries
            .iter()
            .filter_map(|(id, e)| e.lease.as_ref().map(|l| (id, l)))
            .filter(|(_, l)| l.expired(now))
            .map(|(id, l)| (id.clone(), l.epoch))
            .collect()
    }

    /// Drops `id`'s lease if it is still at `epoch` (a new registration keeps its own).
    pub fn drop_lease(&mut self, id: &str, epoch: u64) {
        if let Some(e) = self.entries.get_mut(id)
            && e.lease.as_ref().is_some_and(|l| l.epoch == epoch)
        {
            e.lease = None;
            self.tidy(id);
        }
    }

    /// Notes which executors (id, epoch) the store has lost now and returns those lost
    /// for at least `keep` at `now`: time to forget them. An executor no longer lost at
    /// the same epoch starts over.
    pub fn long_lost(
        &mut self,
        lost: &[(String, u64)],
        now: Instant,
        keep: Duration,
    ) -> Vec<(String, u64)> {
        let is_lost = |id: &str, epoch: u64| lost.iter().any(|(i, e)| i == id && *e == epoch);
        let mut emptied = Vec::new();
        for (id, e) in &mut self.entries {
            if e.lost_since.is_some_and(|(epoch, _)| !is_lost(id, epoch)) {
                e.lost_since = None;
                emptied.push(id.clone());
            }
        }
        for id in emptied {
            self.tidy(&id);
        }
        for (id, epoch) in lost {
            self.entry(id).lost_since.get_or_insert((*epoch, now));
        }
        self.entries
            .iter()
            .filter_map(|(id, e)| e.lost_since.map(|s| (id, s)))
            .filter(|(_, (_, at))| now.duration_since(*at) >= keep)
            .map(|(id, (epoch, _))| (id.clone(), epoch))
            .collect()
    }

    /// A snapshot of every registered executor (`all`, from the store) and how it is doing
    /// at `now` ([`health`]); placeable are the live ones that are reachable and verified
    /// at their epoch.
    pub fn view(
        &self,
        all: BTreeMap<String, ExecutorRecord>,
        now: Instant,
        silent_after: Duration,
    ) -> ExecutorView {
        let health: BTreeMap<String, Host> = all
            .iter()
            .map(|(id, e)| (id.clone(), health(e, self.lease(id), now, silent_after)))
            .collect();
        let placeable = all
            .values()
            .filter(|e| {
                health.get(&e.id) == Some(&Host::Live)
                    && !self.unreachable(&e.id)
                    && self.is_verified(&e.id, e.epoch)
            })
            .map(|e| e.id.clone())
            .collect();
        ExecutorView {
            all,
            health,
            placeable,
        }
    }

    /// Records a call to `id` that did not reach it at `now`; later calls wait for the
    /// backoff (`random` in [0, 1] jitters it). True when this failure makes it
    /// unreachable.
    pub fn reach_failed(&mut self, id: &str, error: &str, now: Instant, random: f64) -> bool {
        let r = self.entry(id).reach.get_or_insert(Reach {
            failures: 0,
            next_try: now,
            last_error: String::new(),
        });
        r.failures = r.failures.saturating_add(1);
        r.next_try = now + reach_backoff(r.failures, random);
        r.last_error = error.to_owned();
        r.failures == UNREACHABLE_AFTER_FAILURES
    }

    /// Records an answer from `id`: its backoff ends. True when it was unreachable.
    pub fn reach_ok(&mut self, id: &str) -> bool {
        let was = self
            .entries
            .get_mut(id)
            .and_then(|e| e.reach.take())
            .is_some_and(|r| r.failures >= UNREACHABLE_AFTER_FAILURES);
        self.tidy(id);
        was
    }

    fn reach(&self, id: &str) -> Option<&Reach> {
        self.entries.get(id).and_then(|e| e.reach.as_ref())
    }

    /// True while calls to `id` wait for their backoff at `now`.
    pub fn reach_blocked(&self, id: &str, now: Instant) -> bool {
        self.reach(id).is_some_and(|r| r.next_try > now)
    }

    /// True after [`UNREACHABLE_AFTER_FAILURES`] consecutive calls did not reach `id`.
    pub fn unreachable(&self, id: &str) -> bool {
        self.reach(id)
            .is_some_and(|r| r.failures >= UNREACHABLE_AFTER_FAILURES)
    }

    /// The last error of an unreachable executor (empty when it is not).
    pub fn unreachable_error(&self, id: &str) -> String {
        self.reach(id)
            .filter(|r| r.failures >= UNREACHABLE_AFTER_FAILURES)
            .map(|r| r.last_error.clone())
            .unwrap_or_default()
    }

    /// True once `id` at `epoch` was found at its advertised address.
    pub fn is_verified(&self, id: &str, epoch: u64) -> bool {
        self.entries
            .get(id)
            .is_some_and(|e| e.verified_epoch == Some(epoch))
    }

    /// Notes that `id` at `epoch` answered at its advertised address as itself.
    pub fn set_verified(&mut self, id: &str, epoch: u64) {
        self.entry(id).verified_epoch = Some(epoch);
    }

    /// True (and marked probing) when `id` at `epoch` still needs its identity probe,
    /// none runs, and its backoff allows one at `now`.
    pub fn begin_probe(&mut self, id: &str, epoch: u64, now: Instant) -> bool {
        if self.is_verified(id, epoch) || self.reach_blocked(id, now) {
            return false;
        }
        !std::mem::replace(&mut self.entry(id).probing, true)
    }

    /// Ends a probe begun by [`ExecutorTable::begin_probe`].
    pub fn end_probe(&mut self, id: &str) {
        if let Some(e) = self.entries.get_mut(id) {
            e.probing = false;
        }
        self.tidy(id);
    }

    /// True (and marked correcting) when no status correction of `id` runs.
    pub fn begin_correction(&mut self, id: &str) -> bool {
        !std::mem::replace(&mut self.entry(id).correcting, true)
    }

    /// Ends a correction begun by [`ExecutorTable::begin_correction`].
    pub fn end_correction(&mut self, id: &str) {
        if let Some(e) = self.entries.get_mut(id) {
            e.correcting = false;
        }
        self.tidy(id);
    }

    /// Notes what `id`'s heartbeat at `epoch` did not list (`missing`), judged at `now`,
    /// and returns what its previous heartbeat at the same epoch did not list.
    pub fn record_hosted(
        &mut self,
        id: &str,
        epoch: u64,
        now: Instant,
        missing: BTreeSet<InstanceKey>,
    ) -> BTreeSet<InstanceKey> {
        self.entry(id)
            .hosted
            .replace(HostedReport {
                epoch,
                at: now,
                missing,
            })
            .filter(|p| p.epoch == epoch)
            .map(|p| p.missing)
            .unwrap_or_default()
    }

    /// True when `id`'s last heartbeat at `epoch`, judged at or after `since`, listed
    /// every instance recorded RUNNING on it.
    pub fn hosted_confirmed(&self, id: &str, epoch: u64, since: Instant) -> bool {
        self.entries
            .get(id)
            .and_then(|e| e.hosted.as_ref())
            .is_some_and(|r| r.epoch == epoch && r.at >= since && r.missing.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: LeaseConfig = LeaseConfig {
        lease_ms: 10_000,
        heartbeat_interval_ms: 1_000,
    };

    fn record(id: &str, epoch: u64) -> ExecutorRecord {
        ExecutorRecord {
            id: id.into(),
            address: "http://127.0.0.2:1".into(),
            epoch,
            plugins: Vec::new(),
            lost: false,
            record_log: String::new(),
            transforms: Vec::new(),
        }
    }

    fn leased(now: Instant, id: &str, epoch: u64) -> ExecutorTable {
        let mut t = ExecutorTable::default();
        t.grant(id, Lease::from(now, CONFIG, epoch, 0));
        t
    }

    #[test]
    fn a_heartbeat_renews_the_lease_one_length_from_now() {
        let now = Instant::now();
        let mut t = leased(now, "e1", 2);
        let later = now + Duration::from_millis(9_000);
        assert_eq!(
            t.heartbeat("e1", 2, later, CONFIG, 42),
            Heartbeat::Renewed { was_silent: true }
        );
        assert!(t.holds("e1", 2, later + Duration::from_millis(9_999)));
        assert_eq!(t.last_heartbeat_ms("e1"), 42);
    }

    #[test]
    fn a_heartbeat_on_time_was_not_silent() {
        let now = Instant::now();
        let mut t = leased(now, "e1", 2);
        assert_eq!(
            t.heartbeat("e1", 2, now + Duration::from_millis(1_000), CONFIG, 1),
            Heartbeat::Renewed { was_silent: false }
        );
    }

    #[test]
    fn a_heartbeat_at_a_fenced_epoch_changes_nothing() {
        let now = Instant::now();
        let mut t = leased(now, "e1", 2);
        assert_eq!(t.heartbeat("e1", 1, now, CONFIG, 5), Heartbeat::Fenced);
        assert_eq!(t.last_heartbeat_ms("e1"), 0);
        assert_eq!(
            t.heartbeat("e9", 1, now, CONFIG, 5),
            Heartbeat::NoLease,
            "unknown here"
        );
    }

    #[test]
    fn an_adoption_keeps_a_lease_granted_meanwhile() {
        let now = Instant::now();
        let mut t = ExecutorTable::default();
        assert_eq!(
            t.adopt("e1", Lease::from(now, CONFIG, 2, 0)),
            Adoption::Adopted
        );
        assert!(t.holds("e1", 2, now));
        assert_eq!(
            t.adopt("e1", Lease::from(now, CONFIG, 2, 0)),
            Adoption::HeldAlready { at_epoch: true }
        );
        assert_eq!(
            t.adopt("e1", Lease::from(now, CONFIG, 3, 0)),
            Adoption::HeldAlready { at_epoch: false }
        );
        assert!(t.holds("e1", 2, now));
    }

    #[test]
    fn a_grant_at_an_epoch_older_than_the_lease_held_changes_nothing() {
        let now = Instant::now();
        let mut t = leased(now, "e1", 5);
        assert!(!t.grant("e1", Lease::from(now, CONFIG, 4, 0)));
        assert!(t.holds("e1", 5, now));
        assert!(t.grant("e1", Lease::from(now, CONFIG, 6, 0)), "a newer one");
        assert!(t.holds("e1", 6, now));
    }

    #[test]
    fn a_registration_fences_older_epochs_before_its_grant() {
        let now = Instant::now();
        let mut t = leased(now, "e1", 4);
        // Epoch 7 is in the store; its probe still runs.
        t.registered("e1", 7);
        assert!(!t.holds("e1", 4, now), "4 is fenced");
        assert!(t.holds_any("e1", now), "its lease stays until the grant");
        assert_eq!(t.heartbeat("e1", 4, now, CONFIG, 1), Heartbeat::Fenced);
        // The registration of 4, whose probe ended last, is granted nothing.
        assert!(!t.grant("e1", Lease::from(now, CONFIG, 4, 0)));
        assert!(t.grant("e1", Lease::from(now, CONFIG, 7, 0)));
        assert!(t.holds("e1", 7, now));
        assert_eq!(
            t.heartbeat("e1", 7, now, CONFIG, 2),
            Heartbeat::Renewed { was_silent: false }
        );
    }

    #[test]
    fn no_lease_is_adopted_at_an_epoch_older_than_the_newest_registered() {
        let now = Instant::now();
        let mut t = ExecutorTable::default();
        t.registered("e1", 7);
        assert_eq!(
            t.adopt("e1", Lease::from(now, CONFIG, 4, 0)),
            Adoption::Superseded
        );
        assert!(!t.has_lease("e1"));
        assert_eq!(
            t.adopt("e1", Lease::from(now, CONFIG, 7, 0)),
            Adoption::Adopted
        );
    }

    #[test]
    fn registrations_noted_out_of_order_keep_the_newest() {
        let now = Instant::now();
        let mut t = ExecutorTable::default();
        t.registered("e1", 7);
        t.registered("e1", 4);
        assert!(!t.grant("e1", Lease::from(now, CONFIG, 4, 0)));
        assert!(t.grant("e1", Lease::from(now, CONFIG, 7, 0)));
        t.registered("e1", 7);
        assert!(
            t.holds("e1", 7, now),
            "its own registration keeps the lease"
        );
    }

    #[test]
    fn an_expired_lease_is_dropped_only_at_its_epoch() {
        let now = Instant::now();
        let mut t = leased(now, "e1", 2);
        let later = now + CONFIG.length();
        assert_eq!(t.expired(now), Vec::new());
        assert_eq!(t.expired(later), vec![("e1".to_owned(), 2)]);
        assert!(t.has_lease("e1"), "kept until the store marked it lost");
        assert!(!t.holds_any("e1", later));
        // Registered again meanwhile: the new lease stays.
        t.grant("e1", Lease::from(later, CONFIG, 3, 0));
        t.drop_lease("e1", 2);
        assert!(t.holds("e1", 3, later));
        t.drop_lease("e1", 3);
        assert!(!t.has_lease("e1"));
        assert!(t.entries.is_empty(), "an empty entry is removed");
    }

    #[test]
    fn a_lost_executor_is_forgotten_after_staying_lost_at_the_same_epoch() {
        let now = Instant::now();
        let keep = CONFIG.forget_lost_after();
        let mut t = ExecutorTable::default();
        let lost = vec![("e1".to_owned(), 2)];
        assert!(t.long_lost(&lost, now, keep).is_empty());
        assert_eq!(t.long_lost(&lost, now + keep, keep), lost);
        // Lost again at another epoch: the clock starts over.
        let again = vec![("e1".to_owned(), 3)];
        assert!(t.long_lost(&again, now + keep, keep).is_empty());
        // No longer lost: forgotten here too.
        assert!(t.long_lost(&[], now + keep * 3, keep).is_empty());
        assert!(t.entries.is_empty());
    }

    #[test]
    fn the_view_places_work_only_on_live_reachable_verified_executors() {
        let now = Instant::now();
        let mut t = ExecutorTable::default();
        for id in ["live", "unverified", "unreachable", "silent"] {
            t.grant(id, Lease::from(now, CONFIG, 1, 0));
        }
        t.grant(
            "silent",
            Lease::from(now - CONFIG.unresponsive_after(), CONFIG, 1, 0),
        );
        for id in ["live", "unreachable", "silent"] {
            t.set_verified(id, 1);
        }
        for _ in 0..UNREACHABLE_AFTER_FAILURES {
            t.reach_failed("unreachable", "no route", now, 0.0);
        }
        let all = ["live", "unverified", "unreachable", "silent", "unleased"]
            .into_iter()
            .map(|id| (id.to_owned(), record(id, 1)))
            .collect();
        let view = t.view(all, now, CONFIG.unresponsive_after());
        assert_eq!(
            view.placeable
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            ["live"]
        );
        assert_eq!(view.health["unverified"], Host::Live);
        assert_eq!(view.health["unreachable"], Host::Live);
        assert_eq!(view.health["silent"], Host::Unresponsive);
        assert_eq!(view.health["unleased"], Host::Lost);
    }

    #[test]
    fn an_executor_is_unreachable_after_consecutive_failures_until_it_answers() {
        let now = Instant::now();
        let mut t = ExecutorTable::default();
        assert!(!t.reach_failed("e1", "a", now, 0.0));
        assert!(!t.reach_failed("e1", "b", now, 0.0));
        assert!(!t.unreachable("e1"));
        assert_eq!(t.unreachable_error("e1"), "");
        assert!(t.reach_failed("e1", "c", now, 0.0), "the third makes it");
        assert!(t.unreachable("e1"));
        assert_eq!(t.unreachable_error("e1"), "c");
        assert!(t.reach_blocked("e1", now));
        assert!(!t.reach_blocked("e1", now + Duration::from_secs(60)));
        assert!(t.reach_ok("e1"));
        assert!(!t.reach_ok("e1"), "once");
        assert!(!t.reach_blocked("e1", now));
    }

    #[test]
    fn one_probe_at_a_time_and_none_once_verified_or_in_backoff() {
        let now = Instant::now();
        let mut t = ExecutorTable::default();
        assert!(t.begin_probe("e1", 1, now));
        assert!(!t.begin_probe("e1", 1, now), "one at a time");
        t.end_probe("e1");
        t.reach_failed("e1", "no", now, 0.0);
        assert!(!t.begin_probe("e1", 1, now), "in backoff");
        t.reach_ok("e1");
        t.set_verified("e1", 1);
        assert!(!t.begin_probe("e1", 1, now), "verified");
        assert!(t.begin_probe("e1", 2, now), "a new epoch is probed again");
    }

    #[test]
    fn one_status_correction_per_executor_at_a_time() {
        let mut t = ExecutorTable::default();
        assert!(t.begin_correction("e1"));
        assert!(!t.begin_correction("e1"));
        assert!(t.begin_correction("e2"));
        t.end_correction("e1");
        assert!(t.begin_correction("e1"));
    }

    #[test]
    fn a_hosted_report_compares_with_the_previous_one_at_the_same_epoch_only() {
        let now = Instant::now();
        let key: InstanceKey = ("c".into(), Some(0), 4);
        let mut t = ExecutorTable::default();
        let one = BTreeSet::from([key.clone()]);
        assert!(t.record_hosted("e1", 1, now, one.clone()).is_empty());
        assert_eq!(t.record_hosted("e1", 1, now, one.clone()), one);
        assert!(
            t.record_hosted("e1", 2, now, one.clone()).is_empty(),
            "another epoch"
        );
        assert!(!t.hosted_confirmed("e1", 2, now), "it missed one");
        t.record_hosted("e1", 2, now, BTreeSet::new());
        assert!(t.hosted_confirmed("e1", 2, now));
        assert!(!t.hosted_confirmed("e1", 1, now), "at its epoch only");
        assert!(
            !t.hosted_confirmed("e1", 2, now + Duration::from_millis(1)),
            "judged before since"
        );
    }
}
