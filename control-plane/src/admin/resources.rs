//! The resource ledger in the admin API (docs/resources.md): a connector's ledger
//! (`GetConnectorResources`), the orphans a deletion left (`ListOrphanedResources`) and
//! their adoption by another connector (`AdoptOrphanedResources`), the second-claim check
//! shared by create, config put and the executors' intents, and a deletion's plan
//! (`DeleteConnector { dry_run }`).

use std::sync::Arc;

use tracing::info;
use wharf::pb::v1 as pb;

use super::{Admin, ApiError, ApiResult};
use crate::model::resources::{
    EntryState, Holder, LedgerEntry, Origin, OrphanRecord, Resource, ResourceKind, ResourceOwner,
    claim_refusal, holder_of,
};
use crate::model::{ConnectorRecord, DeletionMode};
use crate::reconcile::now_ms;

/// Most orphans one AdoptOrphanedResources or PurgeOrphanedResources call names.
pub const MAX_ADOPT_IDS: usize = 1024;

/// Most bytes of a purge's error kept on an orphan.
const MAX_PURGE_ERROR_BYTES: usize = 2048;

/// The refusal text when one of `wanted` (what connector `connector` would provision or
/// is about to) is held by another connector of `all` (its own record is left out);
/// `None` when nobody else holds any.
pub fn second_claim(
    connector: &str,
    wanted: &[Resource],
    all: &[Arc<ConnectorRecord>],
) -> Option<String> {
    let others: Vec<Holder<'_>> = all
        .iter()
        .filter(|r| r.name != connector)
        .map(|r| Holder {
            connector: &r.name,
            deleting: r.deleting,
            declared: &r.declared,
            ledger: &r.resources,
        })
        .collect();
    holder_of(wanted, &others).map(|(r, h)| claim_refusal(r, &h))
}

/// Why a purge of `groups` (every orphan of each owner whose cleanup would run) must not
/// run: the first orphan whose resource a live connector of `all` declared or keeps in
/// its ledger (created or adopted, not yet released), named with that connector. A
/// purge's `stop(true)` removes what the owner created, so it would remove the resource
/// under the connector now using it. `None` when no live connector holds any. Pure.
pub fn purge_blocker(
    groups: &[Vec<&OrphanRecord>],
    all: &[Arc<ConnectorRecord>],
) -> Option<String> {
    groups.iter().flatten().find_map(|o| {
        let r = &o.entry.resource;
        all.iter()
            .find(|c| {
                c.declared.iter().any(|d| d.same_as(r))
                    || c.resources
                        .iter()
                        .any(|e| e.resource.same_as(r) && !e.state.accounted())
            })
            .map(|c| {
                format!(
                    "orphan {:?} ({r}) is in use by connector {:?}: a purge would remove it under that connector; adopt the orphan into {:?} instead, or delete that connector first",
                    o.id, c.name, c.name
                )
            })
    })
}

/// The wire form of a ledger entry.
pub fn entry_wire(e: &LedgerEntry) -> pb::ResourceEntry {
    pb::ResourceEntry {
        resource: Some(wharf::wire::resource(&e.resource)),
        task: match e.owner {
            ResourceOwner::Connector => None,
            ResourceOwner::Task(t) => Some(t),
        },
        state: e.state.as_str().to_owned(),
        incarnation: e.incarnation.clone(),
        updated_at_ms: e.updated_at_ms,
    }
}

/// The wire form of an orphan (never its cleanup context: that holds the config).
pub fn orphan_wire(o: &OrphanRecord) -> pb::OrphanedResource {
    pb::OrphanedResource {
        id: o.id.clone(),
        connector: o.connector.clone(),
        entry: Some(entry_wire(&o.entry)),
        reason: o.reason.as_str().to_owned(),
        orphaned_at_ms: o.orphaned_at_ms,
        purge_error: o.purge_error.clone(),
        purgeable: o.cleanup.is_some(),
    }
}

/// The orphans `ids` names, in order, or the error naming the first id that is none
/// (`ids[i]`) or a list of the wrong size. Pure.
fn chosen_orphans<'a>(
    ids: &[String],
    orphans: &'a [OrphanRecord],
) -> ApiResult<Vec<&'a OrphanRecord>> {
    if ids.is_empty() || ids.len() > MAX_ADOPT_IDS {
        return Err(ApiError::InvalidArgument {
            field: "ids".into(),
            reason: format!("must list 1 to {MAX_ADOPT_IDS} orphan ids"),
        });
    }
    ids.iter()
        .enumerate()
        .map(|(i, id)| {
            orphans
                .iter()
                .find(|o| &o.id == id)
                .ok_or_else(|| ApiError::InvalidArgument {
                    field: format!("ids[{i}]"),
                    reason: format!("{id:?} is not an orphaned resource"),
                })
        })
        .collect()
}

/// The plan of deleting `rec` in `mode` (with `offsets` committed source partitions):
/// one stop per task then the connector instance, each on its host at its generation,
/// or cleanup-only on a live executor when it has none (`live` says whether an executor
/// holds a lease); the created entries not yet removed are removed (kept under
/// `keep_resources`), adopted ones kept; a sink's log consumer is named as the cluster's
/// record log names it (`record_log`: an executor's canonical log, empty when unknown).
/// Pure.
pub fn deletion_plan(
    rec: &ConnectorRecord,
    mode: DeletionMode,
    offsets: usize,
    is_sink: bool,
    record_log: &str,
    live: &dyn Fn(&str) -> bool,
) -> pb::DeletionPlan {
    let step = |task: Option<u32>, i: &crate::model::Instance| {
        let host = i
            .executor
            .as_deref()
            .filter(|e| i.state.has_live_instance() && live(e));
        pb::DeletionPlanStep {
            task,
            executor: host.unwrap_or_default().to_owned(),
            generation: i.generation,
            cleanup_only: host.is_none(),
            connector_deleted: mode.connector_deleted(),
            // Marked with the plugin's definition (plan::deletion_support).
            cleanup_not_supported: false,
        }
    };
    let mut steps: Vec<pb::DeletionPlanStep> = rec
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| step(Some(i as u32), t))
        .collect();
    steps.push(step(None, &rec.connector));
    let mut remove = Vec::new();
    let mut keep = Vec::new();
    // Created topics go with the connector only when its config says so (docs/kafka.md).
    let deletes_topics = rec
        .config
        .get(wharf::sdk::CLEANUP_DELETE_CREATED_TOPICS)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    for e in &rec.resources {
        let kept_topic = e.resource.kind == ResourceKind::Topic && !deletes_topics;
        match (e.resource.origin, e.state.accounted(), mode) {
            // Already gone: neither removed nor kept.
            (Origin::Created, true, _) => {}
            (Origin::Created, false, DeletionMode::Cleanup) if !kept_topic => {
                remove.push(entry_wire(e))
            }
            (Origin::Created, false, DeletionMode::Cleanup | DeletionMode::KeepResources)
            | (Origin::Adopted, _, _) => {
                keep.push(entry_wire(e));
            }
        }
    }
    pb::DeletionPlan {
        steps,
        remove,
        keep,
        offsets: u32::try_from(offsets).unwrap_or(u32::MAX),
        consumer_groups: if is_sink {
            vec![sink_consumer_name(record_log, &rec.name)]
        } else {
            Vec::new()
        },
    }
}

/// The name a sink connector's position goes by on `record_log`: Kafka Connect's
/// consumer group `connect-<name>` on Kafka, the log consumer `wharf-sink-<name>` on the
/// embedded and JetStream logs (the executor's `RecordLog::sink_consumer_name`). Pure.
fn sink_consumer_name(record_log: &str, connector: &str) -> String {
    if record_log.starts_with("kafka://") {
        format!("connect-{connector}")
    } else {
        format!("wharf-sink-{connector}")
    }
}

impl Admin {
    /// GetConnectorResources / `GET /connectors/{name}/resources`: the ledger.
    ///
    /// # Errors
    /// NOT_FOUND; store errors.
    pub fn resources(&self, name: &str) -> ApiResult<Vec<pb::ResourceEntry>> {
        let rec = self.existing(name)?;
        Ok(rec.resources.iter().map(entry_wire).collect())
    }

    /// ListOrphanedResources / `GET /resources/orphaned`.
    ///
    /// # Errors
    /// Store errors.
    pub fn orphans(&self) -> ApiResult<Vec<pb::OrphanedResource>> {
        Ok(self
            .cluster
            .store
            .orphans()?
            .iter()
            .map(orphan_wire)
            .collect())
    }

    /// AdoptOrphanedResources / `POST /resources/orphaned/adopt`: moves the orphans
    /// `ids` into `connector`'s ledger as adopted entries of its connector instance (it
    /// will never remove them), then forgets them as orphans.
    ///
    /// # Errors
    /// INVALID_ARGUMENT for no ids, too many, or an id that is not an orphan (nothing is
    /// moved); NOT_FOUND; FAILED_PRECONDITION while the connector is being deleted.
    pub fn adopt_orphans(
        &self,
        ids: &[String],
        connector: &str,
    ) -> ApiResult<Vec<pb::ResourceEntry>> {
        let orphans = self.cluster.store.orphans()?;
        let chosen: Vec<OrphanRecord> = chosen_orphans(ids, &orphans)?
            .into_iter()
            .cloned()
            .collect();
        let rec = self.existing(connector)?;
        if rec.deleting {
            return Err(ApiError::StillDeleting(connector.to_owned()));
        }
        if let Some(o) = chosen
            .iter()
            .find(|o| self.cluster.purges.running(&o.connector))
        {
            return Err(ApiError::WrongState {
                name: o.connector.clone(),
                reason: "has a purge of its orphaned resources running; adopt them once it ended"
                    .into(),
            });
        }
        let now = now_ms();
        let changed =
            self.cluster.modify_connector(connector, |r| {
                if r.deleting {
                    return None;
                }
                for o in &chosen {
                    let resource = o.entry.resource.clone().with_origin(Origin::Adopted);
                    if !r.resources.iter().any(|e| {
                        e.owner == ResourceOwner::Connector && e.resource.same_as(&resource)
                    }) {
                        r.resources.push(LedgerEntry {
                            resource,
                            owner: ResourceOwner::Connector,
                            state: match o.entry.state {
                                EntryState::Intended => EntryState::Intended,
                                EntryState::Confirmed
                                | EntryState::Released
                                | EntryState::Absent => EntryState::Confirmed,
                            },
                            incarnation: r.incarnation.clone(),
                            updated_at_ms: now,
                        });
                    }
                }
                Some(())
            })?;
        if changed.is_none() {
            return Err(ApiError::StillDeleting(connector.to_owned()));
        }
        let ids: Vec<String> = chosen.iter().map(|o| o.id.clone()).collect();
        self.cluster.store.remove_orphans(&ids)?;
        info!(connector = %connector, orphans = ids.len(), "orphaned resources adopted");
        self.resources(connector)
    }

    /// PurgeOrphanedResources / `POST /resources/orphaned/purge`: runs the cleanup of
    /// the owners of the orphans `ids` (one cleanup-only instance per connector
    /// incarnation and instance, stopped with `connector_deleted = true`; tasks first)
    /// and forgets every orphan of those owners that the plugin released or found
    /// absent. The others stay listed with the error. Returns the purged ids and the
    /// orphans of those owners still listed.
    ///
    /// # Errors
    /// INVALID_ARGUMENT for no ids, too many, an id that is not an orphan, or one left
    /// before orphans kept their cleanup context (nothing runs); FAILED_PRECONDITION
    /// when a connector of an orphan's name exists again or is still being deleted (its
    /// instances and the purge's would share a name on the executors); store errors.
    pub async fn purge_orphans(
        &self,
        ids: &[String],
    ) -> ApiResult<(Vec<String>, Vec<pb::OrphanedResource>)> {
        let cluster = &self.cluster;
        let orphans = cluster.store.orphans()?;
        let chosen = chosen_orphans(ids, &orphans)?;
        for (i, o) in chosen.iter().enumerate() {
            if o.cleanup.is_none() {
                return Err(ApiError::InvalidArgument {
                    field: format!("ids[{i}]"),
                    reason: format!(
                        "{:?} was left before orphans kept their cleanup context: remove it by hand at its locator, or adopt it",
                        o.id
                    ),
                });
            }
        }
        let mut names: Vec<&str> = chosen.iter().map(|o| o.connector.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        for name in &names {
            if cluster.store.connector(name)?.is_some() || cluster.deletions.in_flight(name) {
                return Err(ApiError::WrongState {
                    name: (*name).to_owned(),
                    reason: "exists again (or is still being deleted): a purge would run its cleanup under the same name; delete it first, or adopt the orphans into it".into(),
                });
            }
        }
        let groups = crate::model::resources::purge_groups(&chosen, &orphans);
        if let Some(reason) = purge_blocker(&groups, &cluster.store.connectors_shared()?) {
            return Err(ApiError::WrongState {
                name: groups[0][0].connector.clone(),
                reason,
            });
        }
        let mut purged = Vec::new();
        let mut remaining = Vec::new();
        for group in groups {
            let name = group[0].connector.clone();
            // A create of this name waits until the purge ended (as after a forced
            // deletion whose stop is in flight).
            cluster.deletions.set_in_flight(&name, true);
            let outcomes = self.purge_group(&name, &group).await;
            cluster.deletions.set_in_flight(&name, false);
            let outcomes = outcomes?;
            let mut gone = Vec::new();
            let mut left = Vec::new();
            for (o, outcome) in group.iter().zip(outcomes) {
                match outcome {
                    Ok(()) => gone.push(o.id.clone()),
                    Err(error) => {
                        let mut o = (*o).clone();
                        o.purge_error =
                            crate::model::text::bounded(&error, MAX_PURGE_ERROR_BYTES).into_owned();
                        left.push(o);
                    }
                }
            }
            cluster.store.put_orphans(&left)?;
            cluster.store.remove_orphans(&gone)?;
            remaining.extend(left.iter().map(orphan_wire));
            purged.extend(gone);
        }
        info!(
            purged = purged.len(),
            remaining = remaining.len(),
            "orphaned resources purged"
        );
        Ok((purged, remaining))
    }

    /// Runs the purge of one owner's orphans `group` of connector `name`, unless a
    /// connector of that name was created meanwhile.
    async fn purge_group(
        &self,
        name: &str,
        group: &[&OrphanRecord],
    ) -> ApiResult<Vec<Result<(), String>>> {
        if self.cluster.store.connector(name)?.is_some() {
            let why = "a connector of this name was created meanwhile; purge not run".to_owned();
            return Ok(group.iter().map(|_| Err(why.clone())).collect());
        }
        Ok(crate::reconcile::finalizer::purge_owner(&self.cluster, group).await?)
    }

    /// The plan of deleting `name` in `mode` (`DeleteConnector { dry_run }`); changes
    /// nothing.
    ///
    /// # Errors
    /// NOT_FOUND; FAILED_PRECONDITION while it is being deleted already; store errors.
    pub fn deletion_plan(&self, name: &str, mode: DeletionMode) -> ApiResult<pb::DeletionPlan> {
        let rec = self.existing(name)?;
        if rec.deleting {
            return Err(ApiError::StillDeleting(name.to_owned()));
        }
        let offsets = self.cluster.store.offsets(name)?.len();
        let plugins = self.plugins()?;
        let plugin = plugins.get(&rec.plugin).map(|p| &p.info);
        let is_sink = plugin.is_some_and(|p| p.kind == pb::PluginKind::Sink as i32);
        let cluster = &self.cluster;
        let execs = cluster.store.executors()?;
        let live = |id: &str| {
            execs
                .iter()
                .any(|e| e.id == id && !e.lost && cluster.holds_lease(&e.id, e.epoch))
        };
        // Every live executor of a cluster uses the same log (plan/record_log.rs).
        let record_log = execs
            .iter()
            .find(|e| live(&e.id) && !e.record_log.is_empty())
            .map_or("", |e| e.record_log.as_str());
        let mut plan = deletion_plan(&rec, mode, offsets, is_sink, record_log, &live);
        crate::plan::deletion_support::mark_plan(&mut plan, plugin);
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::model::resources::{Locator, ResourceKind};
    use crate::model::{ConnectorSpec, Instance, InstanceState, TargetState};

    fn rec(name: &str) -> ConnectorRecord {
        ConnectorRecord::new(
            &ConnectorSpec {
                name: wharf::ids::ConnectorName::parse(name).unwrap(),
                plugin: "p".into(),
                tasks_max: NonZeroU32::new(1).unwrap(),
                config: Default::default(),
            },
            TargetState::Started,
        )
    }

    fn queue(name: &str) -> Resource {
        Resource::created(
            ResourceKind::Queue,
            name,
            Locator::default().host("h:5672").vhost("/"),
        )
    }

    fn entry(r: Resource, state: EntryState) -> LedgerEntry {
        LedgerEntry {
            resource: r,
            owner: ResourceOwner::Connector,
            state,
            incarnation: "i".into(),
            updated_at_ms: 0,
        }
    }

    #[test]
    fn a_second_claim_names_the_connector_that_holds_it() {
        let mut a = rec("first");
        a.declared = vec![queue("nc.shared.q")];
        let all = vec![Arc::new(a)];
        let why = second_claim("second", &[queue("nc.shared.q")], &all).unwrap();
        assert!(why.contains("queue nc.shared.q"), "{why}");
        assert!(why.contains("connector \"first\""), "{why}");
    }

    #[test]
    fn a_connector_does_not_conflict_with_itself() {
        let mut a = rec("first");
        a.declared = vec![queue("q")];
        assert!(second_claim("first", &[queue("q")], &[Arc::new(a)]).is_none());
    }

    #[test]
    fn the_plan_removes_created_entries_and_keeps_adopted_ones() {
        let mut r = rec("c");
        r.resources = vec![
            entry(queue("mine"), EntryState::Confirmed),
            entry(queue("gone"), EntryState::Released),
            entry(
                queue("users").with_origin(Origin::Adopted),
                EntryState::Confirmed,
            ),
        ];
        let p = deletion_plan(&r, DeletionMode::Cleanup, 2, true, "embedded:/d", &|_| true);
        let names = |v: &[pb::ResourceEntry]| -> Vec<String> {
            v.iter()
                .map(|e| e.resource.as_ref().unwrap().name.clone())
                .collect()
        };
        assert_eq!(names(&p.remove), ["mine"]);
        assert_eq!(names(&p.keep), ["users"]);
        assert_eq!(p.offsets, 2);
        assert_eq!(p.consumer_groups, ["wharf-sink-c"]);
        let on_kafka = deletion_plan(
            &r,
            DeletionMode::Cleanup,
            2,
            true,
            "kafka://k1:9092",
            &|_| true,
        );
        assert_eq!(on_kafka.consumer_groups, ["connect-c"]);
    }

    fn topic(name: &str) -> Resource {
        Resource::created(
            ResourceKind::Topic,
            name,
            Locator::default().host("k1:9092"),
        )
    }

    #[test]
    fn the_plan_keeps_a_created_topic_unless_the_config_deletes_created_topics() {
        let mut r = rec("c");
        r.resources = vec![entry(topic("t"), EntryState::Confirmed)];
        let p = deletion_plan(
            &r,
            DeletionMode::Cleanup,
            0,
            false,
            "kafka://k1:9092",
            &|_| true,
        );
        assert!(p.remove.is_empty());
        assert_eq!(p.keep.len(), 1);
        r.config
            .insert("cleanup.delete.created.topics".into(), "true".into());
        let p = deletion_plan(
            &r,
            DeletionMode::Cleanup,
            0,
            false,
            "kafka://k1:9092",
            &|_| true,
        );
        assert_eq!(p.remove.len(), 1);
        assert!(p.keep.is_empty());
    }

    fn orphan(id: &str, r: Resource) -> OrphanRecord {
        OrphanRecord {
            id: id.into(),
            connector: "gone".into(),
            entry: entry(r, EntryState::Confirmed),
            reason: crate::model::resources::OrphanReason::KeepResources,
            orphaned_at_ms: 0,
            cleanup: None,
            purge_error: String::new(),
        }
    }

    #[test]
    fn a_purge_is_blocked_by_a_live_connector_that_declared_the_resource() {
        let o = orphan("i-0", queue("q"));
        let mut live = rec("user");
        live.declared = vec![queue("q").with_origin(Origin::Adopted)];
        let why = purge_blocker(&[vec![&o]], &[Arc::new(live)]).unwrap();
        assert!(why.contains("connector \"user\""), "{why}");
        assert!(why.contains("i-0"), "{why}");
    }

    #[test]
    fn a_purge_is_blocked_by_a_live_connector_whose_ledger_adopted_the_resource() {
        let o = orphan("i-0", queue("q"));
        let mut live = rec("user");
        live.resources = vec![entry(
            queue("q").with_origin(Origin::Adopted),
            EntryState::Confirmed,
        )];
        assert!(purge_blocker(&[vec![&o]], &[Arc::new(live)]).is_some());
    }

    #[test]
    fn a_purge_runs_when_no_live_connector_holds_the_resource() {
        let o = orphan("i-0", queue("q"));
        let mut other = rec("other");
        other.declared = vec![queue("another")];
        other.resources = vec![entry(queue("q"), EntryState::Released)];
        assert!(purge_blocker(&[vec![&o]], &[Arc::new(other)]).is_none());
    }

    #[test]
    fn the_plan_under_keep_resources_keeps_everything_and_stops_with_false() {
        let mut r = rec("c");
        r.resources = vec![entry(queue("mine"), EntryState::Confirmed)];
        let p = deletion_plan(&r, DeletionMode::KeepResources, 0, false, "", &|_| true);
        assert!(p.remove.is_empty());
        assert_eq!(p.keep.len(), 1);
        assert!(p.steps.iter().all(|s| !s.connector_deleted));
        assert!(p.consumer_groups.is_empty());
    }

    #[test]
    fn a_running_instance_on_a_live_host_is_stopped_in_place_and_others_cleanup_only() {
        let mut r = rec("c");
        r.connector = Instance {
            executor: Some("e1".into()),
            epoch: 1,
            generation: 4,
            state: InstanceState::Running,
            error: String::new(),
            restart: false,
        };
        r.tasks = vec![Instance {
            executor: Some("e2".into()),
            ..r.connector.clone()
        }];
        let p = deletion_plan(&r, DeletionMode::Cleanup, 0, false, "", &|e| e == "e1");
        assert_eq!(p.steps.len(), 2);
        assert_eq!((p.steps[0].task, p.steps[0].cleanup_only), (Some(0), true));
        assert_eq!(
            (
                p.steps[1].task,
                p.steps[1].executor.as_str(),
                p.steps[1].cleanup_only
            ),
            (None, "e1", false)
        );
        assert_eq!(p.steps[1].generation, 4);
    }
}
