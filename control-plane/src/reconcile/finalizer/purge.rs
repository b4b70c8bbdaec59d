//! A purge of orphaned resources (PurgeOrphanedResources, docs/resources.md): the cleanup
//! a forced, given-up or `keep_resources` deletion skipped, run on demand for one owner
//! (the connector instance or a task of a deleted connector's incarnation) the way a
//! deletion runs a re-hosted step: a cleanup-only instance with the config the deletion
//! sealed (kept, sealed, with each orphan), started on a live executor that offers the
//! plugin at a generation taken from the store's generation floor, then stopped with
//! `connector_deleted = true` ([`round::start_then_stop`]). What the plugin releases or
//! finds absent goes to the purge's ledger ([`crate::reconcile::purges`]); an orphan
//! is purged only when its entry is accounted for there.

use tracing::{info, warn};

use super::round;
use super::step::{self, Attempt};
use crate::model::resources::{OrphanRecord, ResourceOwner, purge_outcome};
use crate::model::{DeletionMode, DeletionRecord, Instance, SealedContext};
use crate::reconcile::cluster::{Cluster, HerderError};
use crate::reconcile::purges::PurgeRun;

/// Runs the cleanup of the owner of `group` (orphans of one connector incarnation and
/// instance, [`crate::model::resources::purge_groups`]) and says, per orphan in order,
/// whether it is gone (`Ok`) or why it stays listed.
///
/// # Errors
/// The store failed (reading the executors, reserving a generation).
pub async fn purge_owner(
    cluster: &Cluster,
    group: &[&OrphanRecord],
) -> Result<Vec<Result<(), String>>, HerderError> {
    let Some(first) = group.first() else {
        return Ok(Vec::new());
    };
    let all_fail = |why: String| -> Vec<Result<(), String>> {
        group.iter().map(|_| Err(why.clone())).collect()
    };
    let Some(cleanup) = &first.cleanup else {
        return Ok(all_fail(
            "left before orphans kept their cleanup context: remove it by hand at its locator, or adopt it".into(),
        ));
    };
    let (connector, incarnation, owner) = first.owner_key();
    let view = cluster.executor_view()?;
    let Some(exec) = step::cleanup_host(&view, &cleanup.plugin, None).cloned() else {
        return Ok(all_fail(format!(
            "no live executor offers plugin {}",
            cleanup.plugin
        )));
    };
    let generation = cluster.store.reserve_generation()?;
    let task = match owner {
        ResourceOwner::Connector => None,
        ResourceOwner::Task(t) => Some(t),
    };
    let mut task_configs = Vec::new();
    if let Some(t) = task {
        task_configs.resize(t as usize + 1, wharf::sdk::ConfigMap::new());
        task_configs[t as usize] = cleanup.task_config.clone();
    }
    // What a re-hosted cleanup step reads: the connector's name and sealed context.
    let d = DeletionRecord {
        name: connector.to_owned(),
        requested_at_ms: crate::reconcile::now_ms(),
        mode: DeletionMode::Cleanup,
        sealed: SealedContext {
            config: cleanup.config.clone(),
            plugin: cleanup.plugin.clone(),
            incarnation: incarnation.to_owned(),
            task_configs,
            task_hosts: Vec::new(),
            connector_host: Instance::unassigned(),
            offsets: Vec::new(),
            cleanup_timeout_ms: cleanup.cleanup_timeout_ms,
            cleanup_max_attempts: 1,
            gives_up: false,
            resources: Vec::new(),
        },
        steps: Vec::new(),
        next_generation: generation + 1,
        retry_requested: false,
        force_requested: false,
        traceparent: String::new(),
        revision: 0,
    };
    let run = PurgeRun {
        incarnation: incarnation.to_owned(),
        owner,
        executor: exec.id.clone(),
        generation,
        ledger: group.iter().map(|o| o.entry.clone()).collect(),
    };
    if !cluster.purges.begin(connector, run) {
        return Ok(all_fail(format!(
            "a purge of connector {connector:?} runs already"
        )));
    }
    info!(connector = %connector, incarnation = %incarnation, owner = %owner, executor = %exec.id,
        generation, orphans = group.len(), "purge: cleanup-only instance started for orphaned resources");
    let attempt = round::start_then_stop(cluster, &d, task, &exec, generation).await;
    let ledger = cluster
        .purges
        .end(connector)
        .map(|r| r.ledger)
        .unwrap_or_default();
    let stop_error = match &attempt {
        Attempt::Done { .. } => None,
        Attempt::Failed { error, .. } | Attempt::Wait { error } => Some(error.as_str()),
        Attempt::Rehost => Some("the cleanup-only instance was not found at its stop"),
    };
    let outcomes: Vec<Result<(), String>> = group
        .iter()
        .map(|o| purge_outcome(o, &ledger, stop_error))
        .collect();
    for (o, outcome) in group.iter().zip(&outcomes) {
        match outcome {
            Ok(()) => info!(connector = %connector, orphan = %o.id, kind = %o.entry.resource.kind,
                resource = %o.entry.resource.name, locator = %o.entry.resource.locator, "purge: orphaned resource removed"),
            Err(error) => {
                warn!(connector = %connector, orphan = %o.id, kind = %o.entry.resource.kind,
                resource = %o.entry.resource.name, locator = %o.entry.resource.locator, %error,
                "purge: orphaned resource still listed")
            }
        }
    }
    Ok(outcomes)
}
