//! The resource-ledger checks (docs/resources.md): what a plugin creates is in its
//! ledger, declared before it was confirmed; `stop(false)` releases nothing; after the
//! deletion every created entry is released or found absent, and no adopted one is
//! released. The kit gives every instance a ledger per connector name
//! ([`wharf_sdk::MemoryLedger`]), as the control plane keeps one per connector.

use wharf_sdk::{EntryState, LedgerChange, LedgerEntry, Origin};

use super::{Kit, Running};
use crate::Probe;
use crate::report::{CheckFailed, CheckResult, fail, nothing_checked};

/// What a ledger check says of a plugin that records nothing.
fn records_nothing(check: &'static str, owned: &std::collections::BTreeSet<String>) -> String {
    let _ = check;
    format!(
        "the probe lists {owned:?} after start, but the plugin recorded nothing in its resource ledger: declare each resource with ctx.resources().intend(..) before creating it and confirm(..) after (docs/resources.md)"
    )
}

/// The first problem with the entries `start` left: a created entry not confirmed, or
/// one whose confirmation came without an intent before it. Pure.
pub(crate) fn start_problem(
    entries: &[LedgerEntry],
    changes: &[(wharf_sdk::ResourceOwner, wharf_sdk::Resource, LedgerChange)],
) -> Option<String> {
    for e in entries
        .iter()
        .filter(|e| e.resource.origin == Origin::Created)
    {
        if e.state != EntryState::Confirmed {
            return Some(format!(
                "{} ({}) is {} after start: confirm each resource once it exists",
                e.resource,
                e.owner,
                e.state.as_str()
            ));
        }
        let first = |c: LedgerChange| {
            changes
                .iter()
                .position(|(o, r, ch)| *o == e.owner && r.same_as(&e.resource) && *ch == c)
        };
        match (first(LedgerChange::Intent), first(LedgerChange::Confirm)) {
            (Some(i), Some(c)) if i < c => {}
            (Some(_) | None, _) => {
                return Some(format!(
                    "{} ({}) was confirmed without an intent recorded before it: record the intent before creating the resource, so that a crash in between leaves an entry to check",
                    e.resource, e.owner
                ));
            }
        }
    }
    None
}

/// The first release or absence among `changes` (what a `stop(false)` must not record).
/// Pure.
pub(crate) fn released_by_plain_stop(
    changes: &[(wharf_sdk::ResourceOwner, wharf_sdk::Resource, LedgerChange)],
) -> Option<String> {
    changes
        .iter()
        .find(|(_, _, c)| matches!(c, LedgerChange::Release | LedgerChange::Absent))
        .map(|(o, r, c)| format!("{} of {r} ({o})", c.as_str()))
}

/// The first problem with the entries a deletion left: a created entry neither released
/// nor found absent, or an adopted one released. Pure.
pub(crate) fn delete_problem(entries: &[LedgerEntry]) -> Option<String> {
    for e in entries {
        match (e.resource.origin, e.state.accounted()) {
            (Origin::Created, false) => {
                return Some(format!(
                    "{} ({}) is still {} after the deletion: release each resource the deletion removed (or mark it absent when it was gone already)",
                    e.resource,
                    e.owner,
                    e.state.as_str()
                ));
            }
            (Origin::Adopted, true) if e.state == EntryState::Released => {
                return Some(format!(
                    "{} ({}) is adopted and was released: a deletion never removes what the connector adopted",
                    e.resource, e.owner
                ));
            }
            (Origin::Created, true) | (Origin::Adopted, _) => {}
        }
    }
    None
}

/// Whether a start whose probe lists nothing owned is still checked: its ledger holds
/// entries and all are adopted (a plugin that provisions nothing of its own, only uses
/// what is there: `file-sink`'s output file). A probe that lists nothing beside created
/// entries, or beside an empty ledger, is a probe that misses them. Pure.
pub(crate) fn only_adopts(entries: &[LedgerEntry]) -> bool {
    !entries.is_empty() && entries.iter().all(|e| e.resource.origin == Origin::Adopted)
}

impl<P: Probe> Kit<P> {
    /// The start of a ledger check: [`Kit::provisioned`]'s, except that a plugin that only
    /// adopts may own nothing the probe lists ([`only_adopts`]).
    async fn ledger_provisioned(
        &self,
        check: &'static str,
        name: &str,
    ) -> Result<(Running, std::collections::BTreeSet<String>), CheckFailed> {
        let mut r = self
            .start(check, name, crate::FIRST_INCARNATION, self.tasks_max, false)
            .await?;
        let owned = self.owned(check, &r).await?;
        if owned.is_empty() && !only_adopts(&r.ledger.entries()) {
            self.delete_at_end(check, &mut r).await?;
            return Err(fail(
                check,
                format!("after start the probe lists nothing that {name} owns: check the probe"),
            ));
        }
        Ok((r, owned))
    }

    /// The ledger of `r` is empty while the probe lists `owned`: a failure under
    /// [`Kit::ledger_required`], else a skip; the connector is deleted first either way.
    async fn empty_ledger(
        &self,
        check: &'static str,
        r: &mut Running,
        owned: &std::collections::BTreeSet<String>,
    ) -> Result<bool, CheckFailed> {
        if !r.ledger.entries().is_empty() {
            return Ok(false);
        }
        self.delete_at_end(check, r).await?;
        let text = records_nothing(check, owned);
        Err(if self.ledger_required {
            fail(check, text)
        } else {
            nothing_checked(check, text)
        })
    }

    /// After start, every resource the plugin creates is in its ledger, confirmed, with
    /// its intent recorded before its confirmation.
    ///
    /// # Errors
    /// [`CheckFailed`] naming the entry.
    pub async fn ledger_declares_before_creating(&self) -> CheckResult {
        const CHECK: &str = "ledger_declares_before_creating";
        let name = self.name("ledger", "a");
        let (mut r, owned) = self.ledger_provisioned(CHECK, &name).await?;
        self.empty_ledger(CHECK, &mut r, &owned).await?;
        if let Some(problem) = start_problem(&r.ledger.entries(), &r.ledger.changes()) {
            self.delete_at_end(CHECK, &mut r).await?;
            return Err(fail(CHECK, problem));
        }
        self.delete_at_end(CHECK, &mut r).await
    }

    /// `stop(false)` on every task and the connector records no release or absence, and
    /// removes nothing the probe listed after the start (a replication slot still in
    /// `pg_replication_slots`, a queue still on the broker).
    ///
    /// # Errors
    /// [`CheckFailed`] naming the change, or what the probe no longer lists.
    pub async fn plain_stop_releases_nothing(&self) -> CheckResult {
        const CHECK: &str = "plain_stop_releases_nothing";
        let name = self.name("ledger", "b");
        let (mut r, owned) = self.ledger_provisioned(CHECK, &name).await?;
        self.empty_ledger(CHECK, &mut r, &owned).await?;
        let before = r.ledger.changes().len();
        self.stop(CHECK, &mut r, false).await?;
        let after = r.ledger.changes();
        // The ledger first: a plugin that releases on a plain stop is named for that.
        let problem = match released_by_plain_stop(&after[before.min(after.len())..]) {
            Some(change) => Some(format!(
                "stop(false) recorded {change}: only a deletion releases resources"
            )),
            None => self
                .expect_kept(
                    CHECK,
                    "stop(false) on every task and the connector",
                    &r,
                    &owned,
                )
                .await
                .err()
                .map(|e| e.message),
        };
        let mut cleanup = self
            .start(
                CHECK,
                &name,
                crate::FIRST_INCARNATION,
                self.tasks_max,
                false,
            )
            .await?;
        self.delete_at_end(CHECK, &mut cleanup).await?;
        match problem {
            Some(problem) => Err(fail(CHECK, problem)),
            None => Ok(()),
        }
    }

    /// After the deletion (`stop(true)` on every task, then the connector) no created
    /// entry is left unaccounted and no adopted one was released.
    ///
    /// # Errors
    /// [`CheckFailed`] naming the entry.
    pub async fn delete_releases_every_created_entry(&self) -> CheckResult {
        const CHECK: &str = "delete_releases_every_created_entry";
        let name = self.name("ledger", "c");
        let (mut r, owned) = self.ledger_provisioned(CHECK, &name).await?;
        self.empty_ledger(CHECK, &mut r, &owned).await?;
        self.delete(CHECK, &mut r).await?;
        match delete_problem(&r.ledger.entries()) {
            Some(problem) => Err(fail(CHECK, problem)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use wharf_sdk::{Locator, Resource, ResourceKind, ResourceOwner};

    use super::*;

    fn table() -> Resource {
        Resource::created(ResourceKind::Table, "t", Locator::default().path("/x"))
    }

    fn entry(r: Resource, state: EntryState) -> LedgerEntry {
        LedgerEntry {
            owner: ResourceOwner::Connector,
            resource: r,
            state,
        }
    }

    #[test]
    fn a_ledger_of_adopted_entries_only_needs_nothing_owned() {
        let adopted = table().with_origin(Origin::Adopted);
        assert!(only_adopts(&[entry(
            adopted.clone(),
            EntryState::Confirmed
        )]));
        assert!(!only_adopts(&[]), "an empty ledger");
        assert!(!only_adopts(&[
            entry(adopted, EntryState::Confirmed),
            entry(table(), EntryState::Confirmed)
        ]));
    }

    #[test]
    fn a_confirmation_without_an_intent_before_it_is_a_problem() {
        let c = ResourceOwner::Connector;
        let e = [entry(table(), EntryState::Confirmed)];
        assert!(start_problem(&e, &[(c, table(), LedgerChange::Confirm)]).is_some());
        assert!(
            start_problem(
                &e,
                &[
                    (c, table(), LedgerChange::Intent),
                    (c, table(), LedgerChange::Confirm)
                ]
            )
            .is_none()
        );
    }

    #[test]
    fn an_entry_left_intended_after_start_is_a_problem() {
        let e = [entry(table(), EntryState::Intended)];
        let text = start_problem(&e, &[]).unwrap();
        assert!(text.contains("intended"), "{text}");
    }

    #[test]
    fn a_release_under_a_plain_stop_is_named() {
        let c = ResourceOwner::Connector;
        assert!(released_by_plain_stop(&[(c, table(), LedgerChange::Confirm)]).is_none());
        let text = released_by_plain_stop(&[(c, table(), LedgerChange::Release)]).unwrap();
        assert!(text.starts_with("release of table t"), "{text}");
    }

    #[test]
    fn after_a_deletion_a_created_entry_must_be_accounted_and_an_adopted_one_kept() {
        assert!(delete_problem(&[entry(table(), EntryState::Released)]).is_none());
        assert!(delete_problem(&[entry(table(), EntryState::Absent)]).is_none());
        assert!(delete_problem(&[entry(table(), EntryState::Confirmed)]).is_some());
        let adopted = table().with_origin(Origin::Adopted);
        assert!(delete_problem(&[entry(adopted.clone(), EntryState::Confirmed)]).is_none());
        assert!(delete_problem(&[entry(adopted, EntryState::Released)]).is_some());
    }
}
