//! How each [`Write`] of a batch is applied inside its transaction: the check that it
//! still holds against what the batch has seen ([`View`]), the tables it changes, and the
//! overlay it leaves for the next write of the batch.

use std::sync::Arc;

use super::*;

/// What applying one write gives: its answer, and whether it changed anything.
pub(super) type Applied = Result<(Done, bool), StoreError>;

/// The generation floor: the highest generation a finished deletion used, so that a
/// connector created again under its name starts above it.
pub(super) fn generation_floor(
    meta: &redb::Table<'_, &'static str, u64>,
) -> Result<u64, StoreError> {
    Ok(meta
        .get(GENERATION_FLOOR_KEY)
        .map_err(unavailable)?
        .map(|v| v.value())
        .unwrap_or(0))
}

/// Removes every stored offset of `connector`.
pub(super) fn remove_offsets(
    offs: &mut redb::Table<'_, &'static str, &'static str>,
    connector: &str,
) -> Result<(), StoreError> {
    let start = offset_key(connector, "");
    let end = format!("{connector}\u{1}");
    offs.retain_in(start.as_str()..end.as_str(), |_, _| false)
        .map_err(unavailable)
}

/// Creates a connector unless its name is taken or still being deleted; its first
/// generation starts at the generation floor.
pub(super) fn create_connector(
    sealer: &Sealer,
    t: &mut Tables<'_>,
    view: &mut View<'_>,
    rec: ConnectorRecord,
) -> Applied {
    if view.deletion(&rec.name).is_some() {
        return Ok((Done::Created(CreateOutcome::StillDeleting), false));
    }
    if view.connector(&rec.name).is_some() {
        return Ok((Done::Created(CreateOutcome::AlreadyExists), false));
    }
    let rev = next_counter(&mut t.meta, REVISION_KEY)?;
    let floor = generation_floor(&t.meta)?;
    let mut rec = rec;
    rec.next_generation = rec.next_generation.max(floor);
    rec.revision = rev;
    let bytes = encode(sealer, rev, &rec)?;
    t.conns
        .insert(rec.name.as_str(), bytes.as_slice())
        .map_err(unavailable)?;
    view.overlay
        .connectors
        .insert(rec.name.clone(), Some(Arc::new(rec)));
    Ok((Done::Created(CreateOutcome::Created), true))
}

/// Replaces a connector record if it is still at the revision `rec` was read at.
pub(super) fn put_connector(
    sealer: &Sealer,
    t: &mut Tables<'_>,
    view: &mut View<'_>,
    mut rec: ConnectorRecord,
) -> Applied {
    if view.connector(&rec.name).map(|c| c.revision) != Some(rec.revision) {
        return Ok((Done::Applied(false), false));
    }
    let rev = next_counter(&mut t.meta, REVISION_KEY)?;
    rec.revision = rev;
    let bytes = encode(sealer, rev, &rec)?;
    t.conns
        .insert(rec.name.as_str(), bytes.as_slice())
        .map_err(unavailable)?;
    view.overlay
        .connectors
        .insert(rec.name.clone(), Some(Arc::new(rec)));
    Ok((Done::Applied(true), true))
}

/// Marks a connector deleting and stores its deletion record at one new revision, if the
/// connector is at the revision `rec` was read at and no deletion is pending.
pub(super) fn start_deletion(
    sealer: &Sealer,
    t: &mut Tables<'_>,
    view: &mut View<'_>,
    (rec, deletion): (ConnectorRecord, DeletionRecord),
) -> Applied {
    if view.connector(&rec.name).map(|c| c.revision) != Some(rec.revision)
        || view.deletion(&rec.name).is_some()
    {
        return Ok((Done::Applied(false), false));
    }
    let rev = next_counter(&mut t.meta, REVISION_KEY)?;
    let mut marked = rec;
    marked.deleting = true;
    marked.revision = rev;
    let mut deletion = deletion;
    deletion.revision = rev;
    let c = encode(sealer, rev, &marked)?;
    let d = encode(sealer, rev, &deletion)?;
    t.conns
        .insert(marked.name.as_str(), c.as_slice())
        .map_err(unavailable)?;
    t.dels
        .insert(marked.name.as_str(), d.as_slice())
        .map_err(unavailable)?;
    view.overlay
        .deletions
        .insert(marked.name.clone(), Some(deletion));
    view.overlay
        .connectors
        .insert(marked.name.clone(), Some(Arc::new(marked)));
    Ok((Done::Applied(true), true))
}

/// Replaces a deletion record if it is still at the revision `d` was read at.
pub(super) fn put_deletion(
    sealer: &Sealer,
    t: &mut Tables<'_>,
    view: &mut View<'_>,
    mut d: DeletionRecord,
) -> Applied {
    if view.deletion(&d.name).map(|s| s.revision) != Some(d.revision) {
        return Ok((Done::Applied(false), false));
    }
    let rev = next_counter(&mut t.meta, REVISION_KEY)?;
    d.revision = rev;
    let bytes = encode(sealer, rev, &d)?;
    t.dels
        .insert(d.name.as_str(), bytes.as_slice())
        .map_err(unavailable)?;
    view.overlay.deletions.insert(d.name.clone(), Some(d));
    Ok((Done::Applied(true), true))
}

/// Removes a finished deletion at `revision` with its connector and offsets, and raises
/// the generation floor to the generations it used.
pub(super) fn finish_deletion(
    t: &mut Tables<'_>,
    view: &mut View<'_>,
    name: String,
    revision: u64,
) -> Applied {
    let Some(used) = view
        .deletion(&name)
        .filter(|d| d.revision == revision)
        .map(|d| d.next_generation)
    else {
        return Ok((Done::Applied(false), false));
    };
    let floor = generation_floor(&t.meta)?;
    t.meta
        .insert(GENERATION_FLOOR_KEY, floor.max(used))
        .map_err(unavailable)?;
    t.dels.remove(name.as_str()).map_err(unavailable)?;
    t.conns.remove(name.as_str()).map_err(unavailable)?;
    remove_offsets(&mut t.offs, &name)?;
    view.overlay.deletions.insert(name.clone(), None);
    view.overlay.connectors.insert(name, None);
    Ok((Done::Applied(true), true))
}

/// Registers an executor under a new epoch.
pub(super) fn register_executor(
    sealer: &Sealer,
    t: &mut Tables<'_>,
    view: &mut View<'_>,
    (id, address, plugins, record_log): (String, String, Vec<PluginRecord>, String),
    transforms: Vec<crate::model::TransformRecord>,
) -> Applied {
    let epoch = next_counter(&mut t.meta, EPOCH_KEY)?;
    let rev = next_counter(&mut t.meta, REVISION_KEY)?;
    let rec = ExecutorRecord {
        id,
        address,
        epoch,
        plugins,
        lost: false,
        record_log,
        transforms,
    };
    let bytes = encode(sealer, rev, &rec)?;
    t.execs
        .insert(rec.id.as_str(), bytes.as_slice())
        .map_err(unavailable)?;
    view.overlay
        .executors
        .insert(rec.id.clone(), Some(rec.clone()));
    Ok((Done::Executor(rec), true))
}

/// Marks an executor lost if it is still registered at `epoch` and not lost yet.
pub(super) fn mark_executor_lost(
    sealer: &Sealer,
    t: &mut Tables<'_>,
    view: &mut View<'_>,
    id: String,
    epoch: u64,
) -> Applied {
    let Some(mut rec) = view
        .executor(&id)
        .filter(|e| e.epoch == epoch && !e.lost)
        .cloned()
    else {
        return Ok((Done::Applied(false), false));
    };
    rec.lost = true;
    let rev = next_counter(&mut t.meta, REVISION_KEY)?;
    let bytes = encode(sealer, rev, &rec)?;
    t.execs
        .insert(id.as_str(), bytes.as_slice())
        .map_err(unavailable)?;
    view.overlay.executors.insert(id, Some(rec));
    Ok((Done::Applied(true), true))
}

/// Forgets an executor that was marked lost at `epoch`.
pub(super) fn forget_executor(
    t: &mut Tables<'_>,
    view: &mut View<'_>,
    id: String,
    epoch: u64,
) -> Applied {
    if view
        .executor(&id)
        .is_none_or(|e| e.epoch != epoch || !e.lost)
    {
        return Ok((Done::Applied(false), false));
    }
    t.execs.remove(id.as_str()).map_err(unavailable)?;
    view.overlay.executors.insert(id, None);
    Ok((Done::Applied(true), true))
}

/// Stores a connector's offsets; an empty offset removes its partition's.
pub(super) fn put_offsets(
    t: &mut Tables<'_>,
    connector: &str,
    offsets: &[(String, String)],
) -> Applied {
    for (partition, offset) in offsets {
        let key = offset_key(connector, partition);
        if offset.is_empty() {
            t.offs.remove(key.as_str()).map_err(unavailable)?;
        } else {
            t.offs
                .insert(key.as_str(), offset.as_str())
                .map_err(unavailable)?;
        }
    }
    Ok((Done::Unit, !offsets.is_empty()))
}

/// Appends an audit entry, then drops what the retention no longer keeps (older than its
/// age, beyond its count).
pub(super) fn append_audit(
    sealer: &Sealer,
    t: &mut Tables<'_>,
    entry: &AuditEntry,
    retention: AuditRetention,
    now_ms: i64,
) -> Applied {
    let json = serde_json::to_vec(entry).map_err(unavailable)?;
    let sealed = sealer.seal(&json)?;
    t.audit
        .insert(entry.id.as_str(), sealed.as_slice())
        .map_err(unavailable)?;
    let cutoff = retention.cutoff_id(now_ms);
    t.audit
        .retain_in(..cutoff.as_str(), |_, _| false)
        .map_err(unavailable)?;
    let mut len = t.audit.len().map_err(unavailable)?;
    while len > retention.max_entries {
        t.audit.pop_first().map_err(unavailable)?;
        len -= 1;
    }
    Ok((Done::Unit, true))
}
