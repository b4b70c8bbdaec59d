//! Persistence of the herder state behind [`StateStore`]. The herder, the finalizer and
//! the gRPC services only use the trait, so a second backend (etcd: compare on
//! `mod_revision` in a transaction) can be added without touching them.
//!
//! Every record carries a revision; writers that raced with another writer use the
//! conditional methods (`put_connector` with the revision they read, `finish_deletion`
//! with the deletion's revision) and reload on a conflict rather than guess.

pub mod etcd_election;
mod etcd_store;
mod redb_store;
pub mod seal;

pub use etcd_store::{
    DEFAULT_ETCD_PREFIX, ETCD_CONNECT_TIMEOUT_MS, EtcdOptions, EtcdStore, EtcdTls, EtcdUser, Fence,
    Password, WriteFence,
};
pub use redb_store::RedbStore;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::model::{
    AuditEntry, AuditPage, AuditQuery, AuditRetention, ConnectorRecord, DeletionRecord,
    ExecutorRecord, PluginRecord, resources::OrphanRecord,
};

/// File name of the embedded store inside `--data-dir`.
pub const STORE_FILE_NAME: &str = "state.redb";

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend failed (I/O, corruption, a lost connection); whether a write landed is
    /// unknown, so callers reload.
    #[error("state store unavailable: {0}")]
    Unavailable(String),
    /// A stored record does not decode (written by an incompatible version).
    #[error("state store record {key} does not decode: {reason}")]
    Corrupt {
        /// Table and key.
        key: String,
        /// Decoder message.
        reason: String,
    },
}

/// Result of [`StateStore::create_connector`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateOutcome {
    /// Stored.
    Created,
    /// A connector with that name exists.
    AlreadyExists,
    /// A connector with that name is still being deleted.
    StillDeleting,
}

/// A write that resolves once it is durable; see [`StateStore::put_connector_batched`].
pub type StoreFuture<T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'static>>;

/// The herder's persistent state. All methods are atomic; none blocks for long.
///
/// The `*_batched` and `*_shared` methods are for callers that handle many connectors at
/// once (the herder, the finalizer); their defaults call the plain methods, so a backend
/// only overrides them when it can do better (the redb store: a group commit, and records
/// kept decoded in memory).
pub trait StateStore: Send + Sync + 'static {
    /// One connector, with its revision.
    fn connector(&self, name: &str) -> Result<Option<ConnectorRecord>, StoreError>;
    /// Every connector (deleting ones included), sorted by name.
    fn connectors(&self) -> Result<Vec<ConnectorRecord>, StoreError>;
    /// As [`StateStore::connector`], shared instead of copied (for read-only use).
    fn connector_shared(&self, name: &str) -> Result<Option<Arc<ConnectorRecord>>, StoreError> {
        Ok(self.connector(name)?.map(Arc::new))
    }
    /// As [`StateStore::connectors`], shared instead of copied (for read-only use).
    fn connectors_shared(&self) -> Result<Vec<Arc<ConnectorRecord>>, StoreError> {
        Ok(self.connectors()?.into_iter().map(Arc::new).collect())
    }
    /// The connectors named in `names` that exist, shared (for read-only use), in no
    /// particular order. The default reads every connector and keeps the named ones; a
    /// backend that holds its records in memory looks each name up, so that a herder pass
    /// over a few changed connectors does not walk the cluster (bench/NOTES.md, "Scale").
    fn connectors_named(
        &self,
        names: &std::collections::HashSet<String>,
    ) -> Result<Vec<Arc<ConnectorRecord>>, StoreError> {
        Ok(self
            .connectors_shared()?
            .into_iter()
            .filter(|c| names.contains(&c.name))
            .collect())
    }
    /// Stores a new connector unless the name is taken or still deleting.
    fn create_connector(&self, rec: &ConnectorRecord) -> Result<CreateOutcome, StoreError>;
    /// Replaces a connector if its stored revision is still `rec.revision`; returns
    /// false on a conflict (or when it no longer exists).
    fn put_connector(&self, rec: &ConnectorRecord) -> Result<bool, StoreError>;
    /// As [`StateStore::put_connector`], but the caller does not block: the backend may
    /// commit this write together with other callers' writes (each still conditional on
    /// its own revision, in the order they were made), and the future resolves once the
    /// write is durable. The default writes at once.
    fn put_connector_batched(&self, rec: ConnectorRecord) -> StoreFuture<bool> {
        let r = self.put_connector(&rec);
        Box::pin(std::future::ready(r))
    }

    /// Records a deletion and marks the connector deleting, if the connector's revision is
    /// still `rec.revision` and no deletion is recorded; false otherwise.
    fn start_deletion(
        &self,
        rec: &ConnectorRecord,
        deletion: &DeletionRecord,
    ) -> Result<bool, StoreError>;
    /// One pending deletion.
    fn deletion(&self, name: &str) -> Result<Option<DeletionRecord>, StoreError>;
    /// Every pending deletion.
    fn deletions(&self) -> Result<Vec<DeletionRecord>, StoreError>;
    /// The deletions `keep` accepts, copied; the others are not copied. The finalizer's
    /// pass looks at every deletion and acts on few (most have a round in flight): at
    /// 10,000 deletions in progress, copying all of them on every pass was a fifth of the
    /// control plane (bench/NOTES.md, "Scale"). The default reads every one.
    ///
    /// # Errors
    /// As [`StateStore::deletions`].
    fn deletions_where(
        &self,
        keep: &dyn Fn(&DeletionRecord) -> bool,
    ) -> Result<Vec<DeletionRecord>, StoreError> {
        Ok(self.deletions()?.into_iter().filter(|d| keep(d)).collect())
    }
    /// Replaces a deletion if its stored revision is still `d.revision`.
    fn put_deletion(&self, d: &DeletionRecord) -> Result<bool, StoreError>;
    /// As [`StateStore::put_deletion`], committed with other callers' writes when the
    /// backend can (see [`StateStore::put_connector_batched`]).
    fn put_deletion_batched(&self, d: DeletionRecord) -> StoreFuture<bool> {
        let r = self.put_deletion(&d);
        Box::pin(std::future::ready(r))
    }
    /// Removes the deletion record, the connector (config, task configs, assignments,
    /// status) and its offsets in one write, only if the deletion's revision is still
    /// `revision`. False on a conflict.
    fn finish_deletion(&self, name: &str, revision: u64) -> Result<bool, StoreError>;
    /// As [`StateStore::finish_deletion`], committed with other callers' writes when the
    /// backend can (see [`StateStore::put_connector_batched`]).
    fn finish_deletion_batched(&self, name: &str, revision: u64) -> StoreFuture<bool> {
        let r = self.finish_deletion(name, revision);
        Box::pin(std::future::ready(r))
    }

    /// Registers an executor: a new epoch (greater than every epoch handed out before, to
    /// any executor), fencing every older one. Returns the stored record.
    fn register_executor(
        &self,
        id: &str,
        address: &str,
        plugins: Vec<PluginRecord>,
    ) -> Result<ExecutorRecord, StoreError> {
        self.register_executor_with_log(id, address, plugins, "")
    }
    /// As [`StateStore::register_executor`], keeping `record_log` (the identity of the
    /// executor's record log) in the record.
    fn register_executor_with_log(
        &self,
        id: &str,
        address: &str,
        plugins: Vec<PluginRecord>,
        record_log: &str,
    ) -> Result<ExecutorRecord, StoreError> {
        self.register_executor_with_transforms(id, address, plugins, Vec::new(), record_log)
    }
    /// As [`StateStore::register_executor_with_log`], keeping the executor's custom
    /// transforms and predicates in the record too.
    fn register_executor_with_transforms(
        &self,
        id: &str,
        address: &str,
        plugins: Vec<PluginRecord>,
        transforms: Vec<crate::model::TransformRecord>,
        record_log: &str,
    ) -> Result<ExecutorRecord, StoreError>;
    /// One executor.
    fn executor(&self, id: &str) -> Result<Option<ExecutorRecord>, StoreError>;
    /// Every executor, sorted by id.
    fn executors(&self) -> Result<Vec<ExecutorRecord>, StoreError>;
    /// Marks an executor lost if its epoch is still `epoch`.
    fn mark_executor_lost(&self, id: &str, epoch: u64) -> Result<bool, StoreError>;
    /// Removes an executor that is marked lost, if its epoch is still `epoch` (one that
    /// registered again meanwhile is kept). False when nothing was removed.
    fn forget_executor(&self, id: &str, epoch: u64) -> Result<bool, StoreError>;

    /// Committed source offsets of a connector: (partition JSON, offset JSON), sorted.
    fn offsets(&self, connector: &str) -> Result<Vec<(String, String)>, StoreError>;
    /// Writes offsets; an empty offset removes that partition.
    fn put_offsets(&self, connector: &str, offsets: &[(String, String)]) -> Result<(), StoreError>;
    /// Removes every offset of a connector.
    fn reset_offsets(&self, connector: &str) -> Result<(), StoreError>;

    /// Appends one audit entry (its id is unique) and, in the same write, removes the
    /// entries `retention` no longer keeps: older than its age at `now_ms`, then the
    /// oldest beyond its count.
    fn append_audit(
        &self,
        entry: &AuditEntry,
        retention: &AuditRetention,
        now_ms: i64,
    ) -> Result<(), StoreError>;
    /// One page of the audit trail, oldest first (see [`AuditQuery`]).
    fn audit_entries(&self, query: &AuditQuery) -> Result<AuditPage, StoreError>;

    /// Every orphaned resource (docs/resources.md), oldest first.
    fn orphans(&self) -> Result<Vec<OrphanRecord>, StoreError>;
    /// Stores orphans (an orphan with the same id is replaced: a finished deletion that
    /// is written again leaves them once).
    fn put_orphans(&self, orphans: &[OrphanRecord]) -> Result<(), StoreError>;
    /// Removes the orphans with these ids (an id not stored is ignored).
    fn remove_orphans(&self, ids: &[String]) -> Result<(), StoreError>;
    /// Takes a generation above every one a connector or a finished deletion used, for
    /// an instance outside any connector (a purge's cleanup-only instance): raises the
    /// generation floor past it, so a connector created later starts above it and its
    /// starts are not refused as stale by the executor that ran the purge.
    fn reserve_generation(&self) -> Result<u64, StoreError>;
}

/// Runs `wait` (a synchronous wait for the store: a redb batch's commit, an etcd call
/// bounded by [`etcd_store::ETCD_CALL_TIMEOUT_MS`], a scan of the audit trail) so that a caller on a worker of a multi-threaded
/// tokio runtime (a gRPC handler, a metrics page render) does not hold that worker: its
/// other tasks move to another thread meanwhile (`block_in_place`). Elsewhere (a plain
/// thread, a current-thread runtime) it simply waits. Without it, two calls that wait on
/// a frozen etcd held both workers of a 2-core host for 5 s, `/health` and every gRPC
/// call with them.
pub(crate) fn wait_off_worker<T>(wait: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        Ok(_) | Err(_) => wait(),
    }
}
