//! The resource ledger as the control plane keeps it: one list of entries per connector,
//! stored in its [`ConnectorRecord`](super::ConnectorRecord) (so both store backends
//! keep it, it survives a failover and it is there while the connector is deleted), and
//! the orphans a deletion left behind, kept apart after the connector is gone
//! (docs/resources.md). The decisions are the pure functions below: how a change
//! applies, who holds a resource, which entries a finished stop left unaccounted and
//! which become orphans.

use serde::{Deserialize, Serialize};
pub use wharf::sdk::{
    EntryState, LedgerChange, Locator, Origin, Resource, ResourceKind, ResourceOwner,
};

/// Most entries one connector's ledger holds: a plugin that declares more is refused,
/// so that one connector cannot make every status read carry megabytes.
pub const MAX_LEDGER_ENTRIES: usize = 4096;

/// Most bytes of a resource's name or of one locator part.
pub const MAX_RESOURCE_TEXT_BYTES: usize = 1024;

/// Most bytes of an [`ResourceKind::Other`] name.
pub const MAX_KIND_BYTES: usize = 64;

/// One entry of a connector's ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// The resource (kind, name, locator, origin).
    pub resource: Resource,
    /// The instance whose deletion-aware stop removes it.
    pub owner: ResourceOwner,
    /// Where it stands.
    pub state: EntryState,
    /// Incarnation of the connector that recorded it.
    pub incarnation: String,
    /// When it last changed, Unix milliseconds.
    pub updated_at_ms: i64,
}

/// Why an entry outlived its connector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OrphanReason {
    /// The operator forced the deletion.
    Force,
    /// `cleanup.policy = give-up` ran out of attempts.
    GiveUp,
    /// The operator deleted with `keep_resources`.
    KeepResources,
}

impl OrphanReason {
    /// `force`, `give-up`, `keep_resources`.
    pub fn as_str(self) -> &'static str {
        match self {
            OrphanReason::Force => "force",
            OrphanReason::GiveUp => "give-up",
            OrphanReason::KeepResources => "keep_resources",
        }
    }
}

/// What a purge needs to run an orphan's cleanup again: the owner instance's config as
/// the deletion had it sealed (secrets included: an orphan is stored sealed like a
/// deletion, and this never leaves the control plane but in a cleanup-only start).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrphanCleanup {
    /// The plugin.
    pub plugin: String,
    /// The connector's last config.
    pub config: wharf::sdk::ConfigMap,
    /// The owner task's config (empty for the connector instance).
    #[serde(default, skip_serializing_if = "wharf::sdk::ConfigMap::is_empty")]
    pub task_config: wharf::sdk::ConfigMap,
    /// `cleanup.timeout.ms` of the connector.
    pub cleanup_timeout_ms: u32,
}

impl std::fmt::Debug for OrphanCleanup {
    /// The plugin and the timeout only: the config may hold secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrphanCleanup")
            .field("plugin", &self.plugin)
            .field("cleanup_timeout_ms", &self.cleanup_timeout_ms)
            .finish_non_exhaustive()
    }
}

/// A ledger entry that a deletion left behind; kept until an admin adopts or purges it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrphanRecord {
    /// `<incarnation>-<index>`: the same when a finished deletion is written again.
    pub id: String,
    /// The connector whose ledger held it.
    pub connector: String,
    /// The entry as it was when the deletion finished.
    pub entry: LedgerEntry,
    /// Why it was left.
    pub reason: OrphanReason,
    /// When the deletion finished, Unix milliseconds.
    pub orphaned_at_ms: i64,
    /// How to run its owner's cleanup again (PurgeOrphanedResources); `None` for an
    /// orphan stored before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup: Option<OrphanCleanup>,
    /// Why the last purge did not remove it; empty when none failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub purge_error: String,
}

impl OrphanRecord {
    /// The instance whose cleanup removes it: its connector, the incarnation that
    /// recorded it, and the owner.
    pub fn owner_key(&self) -> (&str, &str, ResourceOwner) {
        (&self.connector, &self.entry.incarnation, self.entry.owner)
    }
}

/// Why a ledger change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LedgerRefusal {
    /// A change names a resource badly (`field` is the request's field).
    #[error("{field} {reason}")]
    Invalid {
        /// The field, as `changes[i].resource.name`.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// The ledger would hold more than [`MAX_LEDGER_ENTRIES`].
    #[error(
        "the ledger of connector {connector} would hold more than {MAX_LEDGER_ENTRIES} entries"
    )]
    Full {
        /// Connector.
        connector: String,
    },
}

/// Checks one resource of change `i`: a kind name of `[a-z0-9_]`, a name, and bounded
/// texts without control characters; a host that carries credentials (`user@host`) or a
/// URL is refused, as the locator must never hold a secret. Pure.
pub fn check_resource(i: usize, r: &Resource) -> Result<(), LedgerRefusal> {
    let invalid = |field: &str, reason: &str| LedgerRefusal::Invalid {
        field: format!("changes[{i}].resource.{field}"),
        reason: reason.to_owned(),
    };
    let kind = r.kind.as_str();
    if kind.is_empty()
        || kind.len() > MAX_KIND_BYTES
        || !kind
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(invalid("kind", "must be 1 to 64 characters of [a-z0-9_]"));
    }
    if r.name.is_empty() {
        return Err(invalid("name", "is required"));
    }
    for (field, text) in [
        ("name", &r.name),
        ("locator.host", &r.locator.host),
        ("locator.database", &r.locator.database),
        ("locator.vhost", &r.locator.vhost),
        ("locator.path", &r.locator.path),
    ] {
        if text.len() > MAX_RESOURCE_TEXT_BYTES {
            return Err(invalid(field, "is longer than 1024 bytes"));
        }
        if text.chars().any(char::is_control) {
            return Err(invalid(field, "holds a control character"));
        }
    }
    if r.locator.host.contains('@') || r.locator.host.contains("://") {
        return Err(invalid(
            "locator.host",
            "must be host:port only (no user, password or scheme: a locator never holds a secret)",
        ));
    }
    Ok(())
}

/// Applies `changes` (in order) made by `owner` of incarnation `incarnation` to `ledger`
/// at `now_ms`: an entry per (owner, resource), updated in place, added at the end when
/// new. Returns whether anything changed; refuses the whole batch (nothing applied) on
/// a bad resource or a full ledger. Pure.
pub fn apply_changes(
    connector: &str,
    ledger: &mut Vec<LedgerEntry>,
    owner: ResourceOwner,
    incarnation: &str,
    changes: &[(Resource, LedgerChange)],
    now_ms: i64,
) -> Result<bool, LedgerRefusal> {
    for (i, (r, _)) in changes.iter().enumerate() {
        check_resource(i, r)?;
    }
    let mut next = ledger.clone();
    let mut changed = false;
    for (r, change) in changes {
        match next
            .iter_mut()
            .find(|e| e.owner == owner && e.resource.same_as(r))
        {
            Some(e) => {
                let state = e.state.after(*change);
                let origin = match change {
                    LedgerChange::Intent => r.origin,
                    LedgerChange::Confirm | LedgerChange::Release | LedgerChange::Absent => {
                        e.resource.origin
                    }
                };
                if state != e.state || origin != e.resource.origin || e.incarnation != incarnation {
                    e.state = state;
                    e.resource.origin = origin;
                    e.incarnation = incarnation.to_owned();
                    e.updated_at_ms = now_ms;
                    changed = true;
                }
            }
            None => {
                if next.len() >= MAX_LEDGER_ENTRIES {
                    return Err(LedgerRefusal::Full {
                        connector: connector.to_owned(),
                    });
                }
                next.push(LedgerEntry {
                    resource: r.clone(),
                    owner,
                    state: EntryState::first(*change),
                    incarnation: incarnation.to_owned(),
                    updated_at_ms: now_ms,
                });
                changed = true;
            }
        }
    }
    *ledger = next;
    Ok(changed)
}

/// What another connector holds, for [`holder_of`].
#[derive(Debug, Clone, Copy)]
pub struct Holder<'a> {
    /// Its name.
    pub connector: &'a str,
    /// True while it is being deleted.
    pub deleting: bool,
    /// What it declared it would provision (at create or config change).
    pub declared: &'a [Resource],
    /// Its ledger.
    pub ledger: &'a [LedgerEntry],
}

impl Holder<'_> {
    /// True when it holds `r`: declared it, or created it and has not removed it.
    pub fn holds(&self, r: &Resource) -> bool {
        self.declared.iter().any(|d| d.same_as(r))
            || self.ledger.iter().any(|e| {
                e.resource.same_as(r)
                    && e.resource.origin == Origin::Created
                    && !e.state.accounted()
            })
    }
}

/// The first of `wanted` that one of `others` holds, with that holder (a connector
/// never conflicts with itself: the caller leaves it out). Adopted entries that a holder
/// did not declare (a watched table several audit connectors read) hold nothing. Pure.
pub fn holder_of<'a, 'r>(
    wanted: &'r [Resource],
    others: &[Holder<'a>],
) -> Option<(&'r Resource, Holder<'a>)> {
    wanted
        .iter()
        .find_map(|r| others.iter().find(|h| h.holds(r)).map(|h| (r, *h)))
}

/// The refusal text of a second claim: names the resource and the connector holding it.
pub fn claim_refusal(r: &Resource, holder: &Holder<'_>) -> String {
    format!(
        "{r} is held by connector {:?}{}: a resource belongs to one connector at a time (delete that connector first, or configure another name)",
        holder.connector,
        if holder.deleting {
            " (being deleted)"
        } else {
            ""
        }
    )
}

/// The entries of `ledger` that `owner`'s deletion-aware stop should have removed and
/// did not account for: created by `incarnation`, neither released nor found absent.
/// Pure.
pub fn unaccounted<'a>(
    ledger: &'a [LedgerEntry],
    owner: ResourceOwner,
    incarnation: &str,
) -> Vec<&'a LedgerEntry> {
    ledger
        .iter()
        .filter(|e| {
            e.owner == owner
                && e.incarnation == incarnation
                && e.resource.origin == Origin::Created
                && !e.state.accounted()
        })
        .collect()
}

/// The error of a step whose stop(true) succeeded with `left` unaccounted:
/// `stop(true) returned but 4 ledger entries are unaccounted: table wharf_audit (path=/x.db),
/// 3 triggers (path=/x.db)`. Entries of one kind and locator are counted together. Pure.
pub fn unaccounted_error(left: &[&LedgerEntry]) -> String {
    let mut groups: Vec<(&ResourceKind, &Locator, Vec<&str>)> = Vec::new();
    for e in left {
        match groups
            .iter_mut()
            .find(|(k, l, _)| *k == &e.resource.kind && *l == &e.resource.locator)
        {
            Some(g) => g.2.push(&e.resource.name),
            None => groups.push((
                &e.resource.kind,
                &e.resource.locator,
                vec![&e.resource.name],
            )),
        }
    }
    let parts: Vec<String> = groups
        .iter()
        .map(|(kind, locator, names)| match names.as_slice() {
            [one] => format!("{kind} {one} ({locator})"),
            many => format!("{} {kind}s {} ({locator})", many.len(), many.join(", ")),
        })
        .collect();
    format!(
        "stop(true) returned but {} created ledger entr{} neither released nor found absent: {}",
        left.len(),
        if left.len() == 1 { "y is" } else { "ies are" },
        parts.join("; ")
    )
}

/// The entries that outlive a deletion of `incarnation` finished without their cleanup:
/// created ones neither released nor found absent, as orphans, each with what a purge
/// needs to run its owner's cleanup again (`sealed`, the deletion's context). Pure.
pub fn orphans_of(
    connector: &str,
    ledger: &[LedgerEntry],
    sealed: &super::SealedContext,
    reason: OrphanReason,
    now_ms: i64,
) -> Vec<OrphanRecord> {
    let incarnation = &sealed.incarnation;
    ledger
        .iter()
        .enumerate()
        .filter(|(_, e)| e.resource.origin == Origin::Created && !e.state.accounted())
        .map(|(i, e)| OrphanRecord {
            id: format!("{incarnation}-{i}"),
            connector: connector.to_owned(),
            entry: e.clone(),
            reason,
            orphaned_at_ms: now_ms,
            cleanup: Some(OrphanCleanup {
                plugin: sealed.plugin.clone(),
                config: sealed.config.clone(),
                task_config: match e.owner {
                    ResourceOwner::Connector => wharf::sdk::ConfigMap::new(),
                    ResourceOwner::Task(t) => sealed
                        .task_configs
                        .get(t as usize)
                        .cloned()
                        .unwrap_or_default(),
                },
                cleanup_timeout_ms: sealed.cleanup_timeout_ms,
            }),
            purge_error: String::new(),
        })
        .collect()
}

/// The owners whose cleanup a purge of `chosen` runs, one per (connector, incarnation,
/// owner), tasks before the connector instance (as a deletion runs them), each with
/// every stored orphan of that owner (`all`: the chosen ones and the others its stop
/// cleans as well). Pure.
pub fn purge_groups<'a>(
    chosen: &[&'a OrphanRecord],
    all: &'a [OrphanRecord],
) -> Vec<Vec<&'a OrphanRecord>> {
    let mut keys: Vec<(&str, &str, ResourceOwner)> = Vec::new();
    for o in chosen {
        if !keys.contains(&o.owner_key()) {
            keys.push(o.owner_key());
        }
    }
    // Tasks first, then connector instances; otherwise in the order asked.
    keys.sort_by_key(|(_, _, owner)| match owner {
        ResourceOwner::Task(_) => 0,
        ResourceOwner::Connector => 1,
    });
    keys.into_iter()
        .map(|k| all.iter().filter(|o| o.owner_key() == k).collect())
        .collect()
}

/// What a purge's stop did to one orphan: `Ok` when `ledger` (the entries the purge's
/// instance released or found absent, starting from the orphans) accounts for it, else
/// the reason it stays listed (`stop_error`: the stop itself failed). Pure.
pub fn purge_outcome(
    orphan: &OrphanRecord,
    ledger: &[LedgerEntry],
    stop_error: Option<&str>,
) -> Result<(), String> {
    let accounted = ledger.iter().any(|e| {
        e.owner == orphan.entry.owner
            && e.resource.same_as(&orphan.entry.resource)
            && e.state.accounted()
    });
    match (accounted, stop_error) {
        (true, _) => Ok(()),
        (false, Some(error)) => Err(error.to_owned()),
        (false, None) => Err(format!(
            "stop(true) returned but the plugin neither released nor found absent {}",
            orphan.entry.resource
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(name: &str) -> Resource {
        Resource::created(
            ResourceKind::Queue,
            name,
            Locator::default().host("127.0.0.1:5672").vhost("/"),
        )
    }

    fn entry(r: Resource, owner: ResourceOwner, state: EntryState) -> LedgerEntry {
        LedgerEntry {
            resource: r,
            owner,
            state,
            incarnation: "i1".into(),
            updated_at_ms: 0,
        }
    }

    #[test]
    fn an_intent_then_a_confirmation_make_one_confirmed_entry() {
        let mut l = Vec::new();
        let q = queue("q");
        let c = ResourceOwner::Connector;
        assert!(
            apply_changes(
                "c",
                &mut l,
                c,
                "i1",
                &[(q.clone(), LedgerChange::Intent)],
                1
            )
            .unwrap()
        );
        assert!(
            apply_changes(
                "c",
                &mut l,
                c,
                "i1",
                &[(q.clone(), LedgerChange::Confirm)],
                2
            )
            .unwrap()
        );
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].state, EntryState::Confirmed);
        assert_eq!(l[0].updated_at_ms, 2);
    }

    #[test]
    fn a_repeated_change_changes_nothing() {
        let mut l = Vec::new();
        let c = ResourceOwner::Connector;
        let ch = [(queue("q"), LedgerChange::Confirm)];
        assert!(apply_changes("c", &mut l, c, "i1", &ch, 1).unwrap());
        assert!(!apply_changes("c", &mut l, c, "i1", &ch, 2).unwrap());
    }

    #[test]
    fn the_same_resource_of_two_owners_is_two_entries() {
        let mut l = Vec::new();
        let ch = [(queue("q"), LedgerChange::Intent)];
        apply_changes("c", &mut l, ResourceOwner::Connector, "i1", &ch, 1).unwrap();
        apply_changes("c", &mut l, ResourceOwner::Task(0), "i1", &ch, 1).unwrap();
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn a_bad_resource_refuses_the_whole_batch_naming_the_field() {
        let mut l = Vec::new();
        let mut bad = queue("q");
        bad.locator.host = "guest:pa55w0rd@127.0.0.1:5672".into();
        let e = apply_changes(
            "c",
            &mut l,
            ResourceOwner::Connector,
            "i1",
            &[
                (queue("ok"), LedgerChange::Intent),
                (bad, LedgerChange::Intent),
            ],
            1,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("changes[1].resource.locator.host"),
            "{e}"
        );
        assert!(!e.to_string().contains("pa55w0rd"), "{e}");
        assert!(l.is_empty());
    }

    #[test]
    fn an_empty_name_and_a_bad_kind_are_refused() {
        let mut r = queue("");
        assert!(check_resource(0, &r).is_err());
        r.name = "q".into();
        r.kind = ResourceKind::Other("Bad Kind".into());
        assert!(
            check_resource(0, &r)
                .unwrap_err()
                .to_string()
                .contains("kind")
        );
    }

    #[test]
    fn a_full_ledger_refuses_a_new_entry() {
        let mut l: Vec<LedgerEntry> = (0..MAX_LEDGER_ENTRIES)
            .map(|i| {
                entry(
                    queue(&format!("q{i}")),
                    ResourceOwner::Connector,
                    EntryState::Confirmed,
                )
            })
            .collect();
        let e = apply_changes(
            "c",
            &mut l,
            ResourceOwner::Connector,
            "i1",
            &[(queue("one-more"), LedgerChange::Intent)],
            1,
        )
        .unwrap_err();
        assert!(matches!(e, LedgerRefusal::Full { .. }));
    }

    #[test]
    fn a_declared_resource_is_held_by_its_declarer() {
        let declared = [queue("q")];
        let h = Holder {
            connector: "a",
            deleting: false,
            declared: &declared,
            ledger: &[],
        };
        let wanted = [queue("q")];
        let (r, who) = holder_of(&wanted, &[h]).unwrap();
        assert_eq!((r.name.as_str(), who.connector), ("q", "a"));
        assert!(claim_refusal(r, &who).contains("connector \"a\""));
    }

    #[test]
    fn a_created_entry_not_yet_removed_is_held_and_a_released_one_is_not() {
        let ledger = [entry(
            queue("q"),
            ResourceOwner::Connector,
            EntryState::Intended,
        )];
        let h = Holder {
            connector: "a",
            deleting: true,
            declared: &[],
            ledger: &ledger,
        };
        assert!(h.holds(&queue("q")));
        let ledger = [entry(
            queue("q"),
            ResourceOwner::Connector,
            EntryState::Released,
        )];
        let h = Holder {
            ledger: &ledger,
            ..h
        };
        assert!(!h.holds(&queue("q")));
    }

    #[test]
    fn an_adopted_entry_not_declared_holds_nothing() {
        let ledger = [entry(
            queue("q").with_origin(Origin::Adopted),
            ResourceOwner::Connector,
            EntryState::Confirmed,
        )];
        let h = Holder {
            connector: "a",
            deleting: false,
            declared: &[],
            ledger: &ledger,
        };
        assert!(holder_of(&[queue("q")], &[h]).is_none());
    }

    #[test]
    fn the_same_name_elsewhere_is_another_resource() {
        let declared = [queue("q")];
        let h = Holder {
            connector: "a",
            deleting: false,
            declared: &declared,
            ledger: &[],
        };
        let mut other = queue("q");
        other.locator.vhost = "prod".into();
        assert!(holder_of(&[other], &[h]).is_none());
    }

    #[test]
    fn unaccounted_entries_are_the_owners_created_ones_not_released_or_absent() {
        let mut trig = queue("t1");
        trig.kind = ResourceKind::Trigger;
        let ledger = vec![
            entry(queue("a"), ResourceOwner::Connector, EntryState::Confirmed),
            entry(queue("b"), ResourceOwner::Connector, EntryState::Released),
            entry(queue("c"), ResourceOwner::Connector, EntryState::Absent),
            entry(
                queue("d").with_origin(Origin::Adopted),
                ResourceOwner::Connector,
                EntryState::Confirmed,
            ),
            entry(queue("e"), ResourceOwner::Task(0), EntryState::Confirmed),
            entry(trig, ResourceOwner::Connector, EntryState::Intended),
        ];
        let left = unaccounted(&ledger, ResourceOwner::Connector, "i1");
        let names: Vec<&str> = left.iter().map(|e| e.resource.name.as_str()).collect();
        assert_eq!(names, ["a", "t1"]);
        assert!(unaccounted(&ledger, ResourceOwner::Connector, "i0").is_empty());
    }

    #[test]
    fn the_unaccounted_error_counts_entries_of_one_kind_and_place_together() {
        let t = |n: &str| {
            let mut r = queue(n);
            r.kind = ResourceKind::Trigger;
            r.locator = Locator::default().path("/x.db");
            entry(r, ResourceOwner::Connector, EntryState::Confirmed)
        };
        let (a, b, c) = (t("t1"), t("t2"), t("t3"));
        let mut table = queue("wharf_audit");
        table.kind = ResourceKind::Table;
        table.locator = Locator::default().path("/x.db");
        let table = entry(table, ResourceOwner::Connector, EntryState::Confirmed);
        let text = unaccounted_error(&[&table, &a, &b, &c]);
        assert_eq!(
            text,
            "stop(true) returned but 4 created ledger entries are neither released nor found absent: table wharf_audit (path=/x.db); 3 triggers t1, t2, t3 (path=/x.db)"
        );
    }

    #[test]
    fn orphans_are_the_created_entries_left_with_stable_ids() {
        let ledger = vec![
            entry(queue("a"), ResourceOwner::Connector, EntryState::Confirmed),
            entry(queue("b"), ResourceOwner::Connector, EntryState::Released),
            entry(
                queue("d").with_origin(Origin::Adopted),
                ResourceOwner::Connector,
                EntryState::Confirmed,
            ),
        ];
        let o = orphans_of("c", &ledger, &sealed(), OrphanReason::Force, 7);
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].id, "i1-0");
        assert_eq!(o[0].entry.resource.name, "a");
        assert_eq!(o[0].reason.as_str(), "force");
        let cleanup = o[0].cleanup.as_ref().unwrap();
        assert_eq!(cleanup.plugin, "p");
        assert!(cleanup.task_config.is_empty(), "owned by the connector");
    }

    fn sealed() -> crate::model::SealedContext {
        crate::model::SealedContext {
            config: [("password".to_owned(), "s3cret".to_owned())]
                .into_iter()
                .collect(),
            plugin: "p".into(),
            incarnation: "i1".into(),
            task_configs: vec![[("t".to_owned(), "0".to_owned())].into_iter().collect()],
            task_hosts: Vec::new(),
            connector_host: crate::model::Instance::unassigned(),
            offsets: Vec::new(),
            cleanup_timeout_ms: 5000,
            cleanup_max_attempts: 1,
            gives_up: false,
            resources: Vec::new(),
        }
    }

    fn orphan(id: &str, r: Resource, owner: ResourceOwner) -> OrphanRecord {
        let mut o = orphans_of(
            "c",
            &[entry(r, owner, EntryState::Confirmed)],
            &sealed(),
            OrphanReason::Force,
            1,
        )
        .remove(0);
        o.id = id.into();
        o
    }

    #[test]
    fn a_task_orphan_carries_its_tasks_config_and_the_debug_form_no_secret() {
        let o = orphan("x", queue("q"), ResourceOwner::Task(0));
        let cleanup = o.cleanup.as_ref().unwrap();
        assert_eq!(cleanup.task_config.get("t").map(String::as_str), Some("0"));
        assert!(!format!("{o:?}").contains("s3cret"));
    }

    #[test]
    fn a_purge_runs_one_cleanup_per_owner_tasks_first_with_every_orphan_of_that_owner() {
        let all = vec![
            orphan("c1", queue("a"), ResourceOwner::Connector),
            orphan("t1", queue("b"), ResourceOwner::Task(0)),
            orphan("c2", queue("c"), ResourceOwner::Connector),
        ];
        let groups = purge_groups(&[&all[0], &all[1]], &all);
        let ids: Vec<Vec<&str>> = groups
            .iter()
            .map(|g| g.iter().map(|o| o.id.as_str()).collect())
            .collect();
        assert_eq!(ids, [vec!["t1"], vec!["c1", "c2"]]);
    }

    #[test]
    fn another_incarnations_orphans_are_another_owner() {
        let mut other = orphan("old", queue("a"), ResourceOwner::Connector);
        other.entry.incarnation = "i0".into();
        let all = vec![orphan("new", queue("a"), ResourceOwner::Connector), other];
        assert_eq!(purge_groups(&[&all[0]], &all).len(), 1);
        assert_eq!(purge_groups(&[&all[0]], &all)[0].len(), 1);
    }

    #[test]
    fn a_purged_orphan_is_one_the_plugin_released_or_found_absent() {
        let o = orphan("x", queue("a"), ResourceOwner::Connector);
        let mut l = vec![o.entry.clone()];
        assert!(purge_outcome(&o, &l, None).unwrap_err().contains("queue a"));
        l[0].state = EntryState::Absent;
        assert_eq!(purge_outcome(&o, &l, None), Ok(()));
        l[0].state = EntryState::Released;
        assert_eq!(
            purge_outcome(&o, &l, Some("boom")),
            Ok(()),
            "released before it failed"
        );
    }

    #[test]
    fn a_failed_purge_stop_leaves_the_orphan_with_the_stops_error() {
        let o = orphan("x", queue("a"), ResourceOwner::Connector);
        assert_eq!(
            purge_outcome(
                &o,
                std::slice::from_ref(&o.entry),
                Some("no live executor offers plugin p")
            ),
            Err("no live executor offers plugin p".to_owned())
        );
    }
}
