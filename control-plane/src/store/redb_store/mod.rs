//! The embedded backend: one redb file under `--data-dir`. redb commits are durable
//! (fsync, copy-on-write B-trees), so a kill -9 loses nothing that was acknowledged.
//!
//! Layout: tables `connectors`, `deletions`, `executors` (key: name or id, value: JSON of
//! a [`Stored`] envelope with the record's revision), `offsets` (key: `connector\0partition`,
//! value: offset JSON; `\0` cannot occur in a connector name), `meta` (counters).
//!
//! Secrets: connector configs (and sealed deletion contexts) hold secret values. They are
//! encrypted with ChaCha20-Poly1305 under a key kept in `<data-dir>/store.key` (mode 0600)
//! before they reach the file, see [`crate::store::seal`].
//!
//! # Cache and group commit
//! The control plane is the only writer of its file (redb locks it), so the decoded
//! connector, deletion and executor records are kept in memory: loaded once by
//! [`RedbStore::open`], then updated after each commit. Reads return clones (or shared
//! `Arc`s) of the cache and never decrypt or parse.
//!
//! Every write goes to one writer thread. It takes all writes queued at that moment, applies
//! them in order to one write transaction (each conditional check sees the writes before it,
//! exactly as if they had been committed one by one), commits once (one fdatasync for the
//! batch), updates the cache, and only then answers each caller. A write is therefore
//! acknowledged only once durable, and many concurrent writers (the herder's connectors,
//! status reports) share one commit. A failed commit fails every write of its batch with
//! [`StoreError::Unavailable`] (whether it landed is unknown) and reloads the cache from
//! the file.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, RwLock};

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::{CreateOutcome, StateStore, StoreError, StoreFuture};
use crate::model::{
    AuditEntry, AuditPage, AuditQuery, AuditRetention, ConnectorRecord, DeletionRecord,
    ExecutorRecord, PluginRecord, resources::OrphanRecord,
};
use crate::store::seal::Sealer;

mod apply;

use apply::Applied;

const CONNECTORS: TableDefinition<&str, &[u8]> = TableDefinition::new("connectors");
const DELETIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("deletions");
const EXECUTORS: TableDefinition<&str, &[u8]> = TableDefinition::new("executors");
const OFFSETS: TableDefinition<&str, &str> = TableDefinition::new("offsets");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// The audit trail: key [`AuditEntry::id`] (sorts by time), value: sealed JSON.
const AUDIT: TableDefinition<&str, &[u8]> = TableDefinition::new("audit");
/// Orphaned resources: key [`OrphanRecord::id`], value: sealed JSON.
const ORPHANS: TableDefinition<&str, &[u8]> = TableDefinition::new("orphans");

const REVISION_KEY: &str = "revision";
const EPOCH_KEY: &str = "epoch";
/// Lowest generation a new connector starts at: above every generation handed out to an
/// earlier connector of any name, so that executors, which refuse generations older than
/// the newest they saw for a connector name, accept a re-created connector.
const GENERATION_FLOOR_KEY: &str = "generation_floor";

/// Most writes committed in one transaction: bounds how long one commit (and so the
/// answer to the first write of the batch) can take.
const MAX_BATCH: usize = 1024;

/// Bytes of redb's page cache, 64 MiB. Reads never go to the file (the cache above holds
/// every decoded record), so redb's cache only serves the pages a commit rewrites; its
/// default of 1 GiB let the control plane grow to 1.62 GiB at 10,000 x 10 (bench/NOTES.md,
/// "Scale").
const PAGE_CACHE_BYTES: usize = 64 * 1024 * 1024;

#[derive(Serialize, Deserialize)]
struct Stored<T> {
    rev: u64,
    value: T,
}

/// The decoded records, as committed.
#[derive(Default)]
struct Cache {
    connectors: BTreeMap<String, Arc<ConnectorRecord>>,
    deletions: BTreeMap<String, DeletionRecord>,
    executors: BTreeMap<String, ExecutorRecord>,
    /// A commit failed: what the file holds is unknown until the cache is reloaded.
    stale: bool,
}

/// State shared by the store handle and its writer thread.
struct Shared {
    db: Database,
    sealer: Sealer,
    cache: RwLock<Cache>,
}

/// One write, as queued for the writer thread.
enum Write {
    CreateConnector(ConnectorRecord),
    PutConnector(ConnectorRecord),
    StartDeletion(Box<(ConnectorRecord, DeletionRecord)>),
    PutDeletion(DeletionRecord),
    FinishDeletion {
        name: String,
        revision: u64,
    },
    RegisterExecutor {
        id: String,
        address: String,
        plugins: Vec<PluginRecord>,
        transforms: Vec<crate::model::TransformRecord>,
        record_log: String,
    },
    MarkExecutorLost {
        id: String,
        epoch: u64,
    },
    ForgetExecutor {
        id: String,
        epoch: u64,
    },
    PutOffsets {
        connector: String,
        offsets: Vec<(String, String)>,
    },
    ResetOffsets {
        connector: String,
    },
    AppendAudit {
        entry: Box<AuditEntry>,
        retention: AuditRetention,
        now_ms: i64,
    },
    PutOrphans(Vec<OrphanRecord>),
    RemoveOrphans(Vec<String>),
    ReserveGeneration,
}

/// What a write returns.
enum Done {
    Created(CreateOutcome),
    Applied(bool),
    Executor(ExecutorRecord),
    Generation(u64),
    Unit,
}

type Answer = Result<Done, StoreError>;

/// Where the writer sends the answer: a blocked synchronous caller or a future.
enum Reply {
    Blocking(mpsc::SyncSender<Answer>),
    Future(oneshot::Sender<Answer>),
}

impl Reply {
    fn send(self, a: Answer) {
        // The caller may have gone away (a dropped future); nothing to tell then.
        match self {
            Reply::Blocking(tx) => {
                let _ = tx.send(a);
            }
            Reply::Future(tx) => {
                let _ = tx.send(a);
            }
        }
    }
}

struct Op {
    write: Write,
    reply: Reply,
}

/// The redb-backed [`StateStore`].
pub struct RedbStore {
    shared: Arc<Shared>,
    writer: Mutex<Option<mpsc::Sender<Op>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

fn writer_gone() -> StoreError {
    StoreError::Unavailable("the store writer thread stopped".into())
}

fn decode<T: DeserializeOwned>(
    sealer: &Sealer,
    key: &str,
    bytes: &[u8],
) -> Result<(u64, T), StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        key: key.to_owned(),
        reason,
    };
    let json = sealer.open(bytes).map_err(|e| corrupt(e.to_string()))?;
    let s: Stored<T> = serde_json::from_slice(&json).map_err(|e| corrupt(e.to_string()))?;
    Ok((s.rev, s.value))
}

fn encode<T: Serialize>(sealer: &Sealer, rev: u64, value: &T) -> Result<Vec<u8>, StoreError> {
    let json = serde_json::to_vec(&Stored { rev, value }).map_err(unavailable)?;
    sealer.seal(&json)
}

fn read_all<T: DeserializeOwned>(
    db: &Database,
    sealer: &Sealer,
    table: TableDefinition<&str, &[u8]>,
) -> Result<Vec<(u64, T)>, StoreError> {
    let tx = db.begin_read().map_err(unavailable)?;
    let t = tx.open_table(table).map_err(unavailable)?;
    let mut out = Vec::new();
    for entry in t.iter().map_err(unavailable)? {
        let (k, v) = entry.map_err(unavailable)?;
        out.push(decode(sealer, k.value(), v.value())?);
    }
    Ok(out)
}

/// Decodes every record of the file.
fn load(db: &Database, sealer: &Sealer) -> Result<Cache, StoreError> {
    let mut cache = Cache::default();
    for (rev, mut r) in read_all::<ConnectorRecord>(db, sealer, CONNECTORS)? {
        r.revision = rev;
        cache.connectors.insert(r.name.clone(), Arc::new(r));
    }
    for (rev, mut d) in read_all::<DeletionRecord>(db, sealer, DELETIONS)? {
        d.revision = rev;
        cache.deletions.insert(d.name.clone(), d);
    }
    for (_, e) in read_all::<ExecutorRecord>(db, sealer, EXECUTORS)? {
        cache.executors.insert(e.id.clone(), e);
    }
    Ok(cache)
}

fn next_counter(meta: &mut redb::Table<'_, &str, u64>, key: &str) -> Result<u64, StoreError> {
    let current = meta
        .get(key)
        .map_err(unavailable)?
        .map(|v| v.value())
        .unwrap_or(0);
    let next = current + 1;
    meta.insert(key, next).map_err(unavailable)?;
    Ok(next)
}

fn offset_key(connector: &str, partition: &str) -> String {
    format!("{connector}\0{partition}")
}

/// Changes of one batch, not yet committed: `None` removes the record.
#[derive(Default)]
struct Overlay {
    connectors: HashMap<String, Option<Arc<ConnectorRecord>>>,
    deletions: HashMap<String, Option<DeletionRecord>>,
    executors: HashMap<String, Option<ExecutorRecord>>,
}

/// The committed cache with the batch's changes on top.
struct View<'a> {
    cache: &'a Cache,
    overlay: Overlay,
}

impl View<'_> {
    fn connector(&self, name: &str) -> Option<&ConnectorRecord> {
        match self.overlay.connectors.get(name) {
            Some(v) => v.as_deref(),
            None => self.cache.connectors.get(name).map(Arc::as_ref),
        }
    }

    fn deletion(&self, name: &str) -> Option<&DeletionRecord> {
        match self.overlay.deletions.get(name) {
            Some(v) => v.as_ref(),
            None => self.cache.deletions.get(name),
        }
    }

    fn executor(&self, id: &str) -> Option<&ExecutorRecord> {
        match self.overlay.executors.get(id) {
            Some(v) => v.as_ref(),
            None => self.cache.executors.get(id),
        }
    }
}

/// The tables of one write transaction.
struct Tables<'t> {
    conns: redb::Table<'t, &'static str, &'static [u8]>,
    dels: redb::Table<'t, &'static str, &'static [u8]>,
    execs: redb::Table<'t, &'static str, &'static [u8]>,
    offs: redb::Table<'t, &'static str, &'static str>,
    meta: redb::Table<'t, &'static str, u64>,
    audit: redb::Table<'t, &'static str, &'static [u8]>,
    orphans: redb::Table<'t, &'static str, &'static [u8]>,
}

impl Shared {
    /// Reloads the cache from the file if a failed commit left it in doubt. The load runs
    /// under the write lock, so that no batch or other reload interleaves with it.
    fn reload_if_stale(&self) -> Result<(), StoreError> {
        let mut cache = self.cache_mut();
        if cache.stale {
            *cache = load(&self.db, &self.sealer)?;
        }
        Ok(())
    }

    fn cache(&self) -> std::sync::RwLockReadGuard<'_, Cache> {
        self.cache
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn cache_mut(&self) -> std::sync::RwLockWriteGuard<'_, Cache> {
        self.cache
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The cache for reading, reloaded first if a failed commit left it in doubt.
    fn fresh_cache(&self) -> Result<std::sync::RwLockReadGuard<'_, Cache>, StoreError> {
        if self.cache().stale {
            self.reload_if_stale()?;
        }
        Ok(self.cache())
    }

    /// The writer thread: batches of queued writes, one transaction each.
    fn run_writer(&self, rx: &mpsc::Receiver<Op>) {
        while let Ok(first) = rx.recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(op) => batch.push(op),
                    Err(_) => break,
                }
            }
            self.commit_batch(batch);
        }
    }

    fn commit_batch(&self, batch: Vec<Op>) {
        if let Err(e) = self.reload_if_stale() {
            for op in batch {
                op.reply.send(Err(StoreError::Unavailable(e.to_string())));
            }
            return;
        }
        let (writes, replies): (Vec<Write>, Vec<Reply>) =
            batch.into_iter().map(|op| (op.write, op.reply)).unzip();
        let started = std::time::Instant::now();
        let count = writes.len();
        let applied = self.apply(writes);
        crate::observe::store_commit(started, count);
        match applied {
            Ok((answers, overlay)) => {
                {
                    let mut cache = self.cache_mut();
                    for (k, v) in overlay.connectors {
                        match v {
                            Some(r) => cache.connectors.insert(k, r),
                            None => cache.connectors.remove(&k),
                        };
                    }
                    for (k, v) in overlay.deletions {
                        match v {
                            Some(d) => cache.deletions.insert(k, d),
                            None => cache.deletions.remove(&k),
                        };
                    }
                    for (k, v) in overlay.executors {
                        match v {
                            Some(e) => cache.executors.insert(k, e),
                            None => cache.executors.remove(&k),
                        };
                    }
                }
                for (reply, answer) in replies.into_iter().zip(answers) {
                    reply.send(answer);
                }
            }
            Err((e, in_doubt)) => {
                if in_doubt {
                    self.cache_mut().stale = true;
                    // Reload now; if it fails, the next read or batch tries again.
                    let _ = self.reload_if_stale();
                }
                for reply in replies {
                    reply.send(Err(StoreError::Unavailable(e.to_string())));
                }
            }
        }
    }

    /// Applies `writes` in order in one transaction and commits it. On error, the bool
    /// tells whether the commit itself failed (the file may or may not hold the batch).
    #[allow(clippy::type_complexity)]
    fn apply(&self, writes: Vec<Write>) -> Result<(Vec<Answer>, Overlay), (StoreError, bool)> {
        let tx = self.db.begin_write().map_err(|e| (unavailable(e), false))?;
        let cache = self.cache();
        let mut view = View {
            cache: &cache,
            overlay: Overlay::default(),
        };
        let mut answers = Vec::with_capacity(writes.len());
        let mut wrote = false;
        {
            let mut t = open_tables(&tx).map_err(|e| (e, false))?;
            for w in writes {
                let (answer, w_wrote) = self
                    .apply_one(&mut t, &mut view, w)
                    .map_err(|e| (e, false))?;
                wrote |= w_wrote;
                answers.push(Ok(answer));
            }
        }
        let overlay = view.overlay;
        drop(cache);
        if wrote {
            tx.commit().map_err(|e| (unavailable(e), true))?;
        } else {
            tx.abort().map_err(|e| (unavailable(e), false))?;
        }
        Ok((answers, overlay))
    }

    /// One write; returns its answer and whether it changed anything.
    fn apply_one(&self, t: &mut Tables<'_>, view: &mut View<'_>, w: Write) -> Applied {
        let sealer = &self.sealer;
        match w {
            Write::CreateConnector(rec) => apply::create_connector(sealer, t, view, rec),
            Write::PutConnector(rec) => apply::put_connector(sealer, t, view, rec),
            Write::StartDeletion(pair) => apply::start_deletion(sealer, t, view, *pair),
            Write::PutDeletion(d) => apply::put_deletion(sealer, t, view, d),
            Write::FinishDeletion { name, revision } => {
                apply::finish_deletion(t, view, name, revision)
            }
            Write::RegisterExecutor {
                id,
                address,
                plugins,
                transforms,
                record_log,
            } => apply::register_executor(
                sealer,
                t,
                view,
                (id, address, plugins, record_log),
                transforms,
            ),
            Write::MarkExecutorLost { id, epoch } => {
                apply::mark_executor_lost(sealer, t, view, id, epoch)
            }
            Write::ForgetExecutor { id, epoch } => apply::forget_executor(t, view, id, epoch),
            Write::PutOffsets { connector, offsets } => apply::put_offsets(t, &connector, &offsets),
            Write::ResetOffsets { connector } => {
                apply::remove_offsets(&mut t.offs, &connector)?;
                Ok((Done::Unit, true))
            }
            Write::AppendAudit {
                entry,
                retention,
                now_ms,
            } => apply::append_audit(sealer, t, &entry, retention, now_ms),
            Write::PutOrphans(orphans) => {
                for o in &orphans {
                    let json = serde_json::to_vec(o).map_err(unavailable)?;
                    let sealed = sealer.seal(&json)?;
                    t.orphans
                        .insert(o.id.as_str(), sealed.as_slice())
                        .map_err(unavailable)?;
                }
                Ok((Done::Unit, !orphans.is_empty()))
            }
            Write::RemoveOrphans(ids) => {
                let mut removed = false;
                for id in &ids {
                    removed |= t
                        .orphans
                        .remove(id.as_str())
                        .map_err(unavailable)?
                        .is_some();
                }
                Ok((Done::Unit, removed))
            }
            Write::ReserveGeneration => {
                // The floor is the next generation a new connector (or a purge) may use.
                let g = apply::generation_floor(&t.meta)?.max(1);
                t.meta
                    .insert(GENERATION_FLOOR_KEY, g + 1)
                    .map_err(unavailable)?;
                Ok((Done::Generation(g), true))
            }
        }
    }
}

fn open_tables(tx: &redb::WriteTransaction) -> Result<Tables<'_>, StoreError> {
    Ok(Tables {
        conns: tx.open_table(CONNECTORS).map_err(unavailable)?,
        dels: tx.open_table(DELETIONS).map_err(unavailable)?,
        execs: tx.open_table(EXECUTORS).map_err(unavailable)?,
        offs: tx.open_table(OFFSETS).map_err(unavailable)?,
        meta: tx.open_table(META).map_err(unavailable)?,
        audit: tx.open_table(AUDIT).map_err(unavailable)?,
        orphans: tx.open_table(ORPHANS).map_err(unavailable)?,
    })
}

impl RedbStore {
    /// Opens (or creates) the store file `path`, decodes every record into the cache and
    /// starts the writer thread; `sealer` protects secret-bearing records.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the file cannot be opened or is locked by another
    /// process; [`StoreError::Corrupt`] when a record does not decode (another key, or
    /// written by an incompatible version).
    pub fn open(path: &Path, sealer: Sealer) -> Result<Self, StoreError> {
        let db = redb::Builder::new()
            .set_cache_size(PAGE_CACHE_BYTES)
            .create(path)
            .map_err(unavailable)?;
        let tx = db.begin_write().map_err(unavailable)?;
        {
            open_tables(&tx)?;
        }
        tx.commit().map_err(unavailable)?;
        let cache = load(&db, &sealer)?;
        let shared = Arc::new(Shared {
            db,
            sealer,
            cache: RwLock::new(cache),
        });
        let (tx, rx) = mpsc::channel::<Op>();
        let writer = shared.clone();
        let thread = std::thread::Builder::new()
            .name("redb-writer".into())
            .spawn(move || writer.run_writer(&rx))
            .map_err(unavailable)?;
        Ok(Self {
            shared,
            writer: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    fn submit(&self, write: Write, reply: Reply) -> Result<(), StoreError> {
        let guard = self
            .writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let sender = guard.as_ref().ok_or_else(writer_gone)?;
        sender.send(Op { write, reply }).map_err(|_| writer_gone())
    }

    /// Queues `write` and blocks until it is committed (or failed).
    fn write(&self, write: Write) -> Answer {
        let (tx, rx) = mpsc::sync_channel(1);
        self.submit(write, Reply::Blocking(tx))?;
        // A caller on a tokio worker (a gRPC handler) waits for a whole batch; the
        // herder's writes queued in the same batch must not be held up behind it.
        super::wait_off_worker(|| rx.recv().map_err(|_| writer_gone())?)
    }

    /// Queues `write`; the future resolves once it is committed (or failed).
    fn write_later(&self, write: Write) -> impl Future<Output = Answer> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        let queued = self.submit(write, Reply::Future(tx));
        async move {
            queued?;
            rx.await.map_err(|_| writer_gone())?
        }
    }
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        // Closing the queue ends the writer after the writes already queued; joining it
        // releases the file before the handle is gone (a reopen in the same process).
        self.writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(t) = self
            .thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            let _ = t.join();
        }
    }
}

fn expect_bool(a: Answer) -> Result<bool, StoreError> {
    match a? {
        Done::Applied(b) => Ok(b),
        Done::Created(_) | Done::Executor(_) | Done::Generation(_) | Done::Unit => {
            Err(unexpected())
        }
    }
}

fn expect_unit(a: Answer) -> Result<(), StoreError> {
    match a? {
        Done::Unit => Ok(()),
        Done::Created(_) | Done::Executor(_) | Done::Applied(_) | Done::Generation(_) => {
            Err(unexpected())
        }
    }
}

fn unexpected() -> StoreError {
    StoreError::Unavailable("the store writer answered with the wrong kind of result".into())
}

impl StateStore for RedbStore {
    fn connector(&self, name: &str) -> Result<Option<ConnectorRecord>, StoreError> {
        Ok(self
            .shared
            .fresh_cache()?
            .connectors
            .get(name)
            .map(|r| ConnectorRecord::clone(r)))
    }

    fn connector_shared(&self, name: &str) -> Result<Option<Arc<ConnectorRecord>>, StoreError> {
        Ok(self.shared.fresh_cache()?.connectors.get(name).cloned())
    }

    fn connectors(&self) -> Result<Vec<ConnectorRecord>, StoreError> {
        Ok(self
            .shared
            .fresh_cache()?
            .connectors
            .values()
            .map(|r| ConnectorRecord::clone(r))
            .collect())
    }

    fn connectors_shared(&self) -> Result<Vec<Arc<ConnectorRecord>>, StoreError> {
        Ok(self
            .shared
            .fresh_cache()?
            .connectors
            .values()
            .cloned()
            .collect())
    }

    fn connectors_named(
        &self,
        names: &std::collections::HashSet<String>,
    ) -> Result<Vec<Arc<ConnectorRecord>>, StoreError> {
        let cache = self.shared.fresh_cache()?;
        Ok(names
            .iter()
            .filter_map(|n| cache.connectors.get(n).cloned())
            .collect())
    }

    fn create_connector(&self, rec: &ConnectorRecord) -> Result<CreateOutcome, StoreError> {
        match self.write(Write::CreateConnector(rec.clone()))? {
            Done::Created(o) => Ok(o),
            Done::Applied(_) | Done::Executor(_) | Done::Generation(_) | Done::Unit => {
                Err(unexpected())
            }
        }
    }

    fn put_connector(&self, rec: &ConnectorRecord) -> Result<bool, StoreError> {
        expect_bool(self.write(Write::PutConnector(rec.clone())))
    }

    fn put_connector_batched(&self, rec: ConnectorRecord) -> StoreFuture<bool> {
        let done = self.write_later(Write::PutConnector(rec));
        Box::pin(async move { expect_bool(done.await) })
    }

    fn start_deletion(
        &self,
        rec: &ConnectorRecord,
        deletion: &DeletionRecord,
    ) -> Result<bool, StoreError> {
        expect_bool(self.write(Write::StartDeletion(Box::new((
            rec.clone(),
            deletion.clone(),
        )))))
    }

    fn deletion(&self, name: &str) -> Result<Option<DeletionRecord>, StoreError> {
        Ok(self.shared.fresh_cache()?.deletions.get(name).cloned())
    }

    fn deletions(&self) -> Result<Vec<DeletionRecord>, StoreError> {
        Ok(self
            .shared
            .fresh_cache()?
            .deletions
            .values()
            .cloned()
            .collect())
    }

    fn deletions_where(
        &self,
        keep: &dyn Fn(&DeletionRecord) -> bool,
    ) -> Result<Vec<DeletionRecord>, StoreError> {
        Ok(self
            .shared
            .fresh_cache()?
            .deletions
            .values()
            .filter(|d| keep(d))
            .cloned()
            .collect())
    }

    fn put_deletion(&self, d: &DeletionRecord) -> Result<bool, StoreError> {
        expect_bool(self.write(Write::PutDeletion(d.clone())))
    }

    fn put_deletion_batched(&self, d: DeletionRecord) -> StoreFuture<bool> {
        let done = self.write_later(Write::PutDeletion(d));
        Box::pin(async move { expect_bool(done.await) })
    }

    fn finish_deletion(&self, name: &str, revision: u64) -> Result<bool, StoreError> {
        expect_bool(self.write(Write::FinishDeletion {
            name: name.to_owned(),
            revision,
        }))
    }

    fn finish_deletion_batched(&self, name: &str, revision: u64) -> StoreFuture<bool> {
        let done = self.write_later(Write::FinishDeletion {
            name: name.to_owned(),
            revision,
        });
        Box::pin(async move { expect_bool(done.await) })
    }

    fn register_executor_with_transforms(
        &self,
        id: &str,
        address: &str,
        plugins: Vec<PluginRecord>,
        transforms: Vec<crate::model::TransformRecord>,
        record_log: &str,
    ) -> Result<ExecutorRecord, StoreError> {
        match self.write(Write::RegisterExecutor {
            id: id.to_owned(),
            address: address.to_owned(),
            plugins,
            transforms,
            record_log: record_log.to_owned(),
        })? {
            Done::Executor(e) => Ok(e),
            Done::Applied(_) | Done::Created(_) | Done::Generation(_) | Done::Unit => {
                Err(unexpected())
            }
        }
    }

    fn executor(&self, id: &str) -> Result<Option<ExecutorRecord>, StoreError> {
        Ok(self.shared.fresh_cache()?.executors.get(id).cloned())
    }

    fn executors(&self) -> Result<Vec<ExecutorRecord>, StoreError> {
        Ok(self
            .shared
            .fresh_cache()?
            .executors
            .values()
            .cloned()
            .collect())
    }

    fn mark_executor_lost(&self, id: &str, epoch: u64) -> Result<bool, StoreError> {
        expect_bool(self.write(Write::MarkExecutorLost {
            id: id.to_owned(),
            epoch,
        }))
    }

    fn forget_executor(&self, id: &str, epoch: u64) -> Result<bool, StoreError> {
        expect_bool(self.write(Write::ForgetExecutor {
            id: id.to_owned(),
            epoch,
        }))
    }

    fn offsets(&self, connector: &str) -> Result<Vec<(String, String)>, StoreError> {
        let tx = self.shared.db.begin_read().map_err(unavailable)?;
        let t = tx.open_table(OFFSETS).map_err(unavailable)?;
        let start = offset_key(connector, "");
        let end = format!("{connector}\u{1}");
        let mut out = Vec::new();
        for entry in t.range(start.as_str()..end.as_str()).map_err(unavailable)? {
            let (k, v) = entry.map_err(unavailable)?;
            let partition = k.value().get(start.len()..).unwrap_or_default().to_owned();
            out.push((partition, v.value().to_owned()));
        }
        Ok(out)
    }

    fn put_offsets(&self, connector: &str, offsets: &[(String, String)]) -> Result<(), StoreError> {
        expect_unit(self.write(Write::PutOffsets {
            connector: connector.to_owned(),
            offsets: offsets.to_vec(),
        }))
    }

    fn reset_offsets(&self, connector: &str) -> Result<(), StoreError> {
        expect_unit(self.write(Write::ResetOffsets {
            connector: connector.to_owned(),
        }))
    }

    fn append_audit(
        &self,
        entry: &AuditEntry,
        retention: &AuditRetention,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        expect_unit(self.write(Write::AppendAudit {
            entry: Box::new(entry.clone()),
            retention: *retention,
            now_ms,
        }))
    }

    fn orphans(&self) -> Result<Vec<OrphanRecord>, StoreError> {
        let tx = self.shared.db.begin_read().map_err(unavailable)?;
        let t = tx.open_table(ORPHANS).map_err(unavailable)?;
        let mut out = Vec::new();
        for item in t.iter().map_err(unavailable)? {
            let (k, v) = item.map_err(unavailable)?;
            let corrupt = |reason: String| StoreError::Corrupt {
                key: format!("orphans/{}", k.value()),
                reason,
            };
            let json = self
                .shared
                .sealer
                .open(v.value())
                .map_err(|e| corrupt(e.to_string()))?;
            out.push(
                serde_json::from_slice::<OrphanRecord>(&json)
                    .map_err(|e| corrupt(e.to_string()))?,
            );
        }
        out.sort_by(|a, b| (a.orphaned_at_ms, &a.id).cmp(&(b.orphaned_at_ms, &b.id)));
        Ok(out)
    }

    fn put_orphans(&self, orphans: &[OrphanRecord]) -> Result<(), StoreError> {
        expect_unit(self.write(Write::PutOrphans(orphans.to_vec())))
    }

    fn remove_orphans(&self, ids: &[String]) -> Result<(), StoreError> {
        expect_unit(self.write(Write::RemoveOrphans(ids.to_vec())))
    }

    fn reserve_generation(&self) -> Result<u64, StoreError> {
        match self.write(Write::ReserveGeneration)? {
            Done::Generation(g) => Ok(g),
            Done::Applied(_) | Done::Created(_) | Done::Executor(_) | Done::Unit => {
                Err(unexpected())
            }
        }
    }

    fn audit_entries(&self, query: &AuditQuery) -> Result<AuditPage, StoreError> {
        let tx = self.shared.db.begin_read().map_err(unavailable)?;
        let t = tx.open_table(AUDIT).map_err(unavailable)?;
        let (start, end) = query.range();
        let mut page = AuditPage::default();
        if start >= end {
            return Ok(page);
        }
        for item in t.range(start.as_str()..end.as_str()).map_err(unavailable)? {
            let (k, v) = item.map_err(unavailable)?;
            let json = self
                .shared
                .sealer
                .open(v.value())
                .map_err(|e| StoreError::Corrupt {
                    key: format!("audit/{}", k.value()),
                    reason: e.to_string(),
                })?;
            let e: AuditEntry = serde_json::from_slice(&json).map_err(|e| StoreError::Corrupt {
                key: format!("audit/{}", k.value()),
                reason: e.to_string(),
            })?;
            if !query.matches(&e) {
                continue;
            }
            if page.entries.len() == query.limit {
                page.next_after = page.entries.last().map(|e| e.id.clone());
                break;
            }
            page.entries.push(e);
        }
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ConnectorSpec, TargetState};
    use std::num::NonZeroU32;
    use wharf::ids::ConnectorName;

    fn store(dir: &Path) -> RedbStore {
        let sealer = Sealer::load_or_create(dir).unwrap();
        RedbStore::open(&dir.join("s.redb"), sealer).unwrap()
    }

    fn rec(name: &str) -> ConnectorRecord {
        let mut config = wharf::sdk::ConfigMap::new();
        config.insert("connection.password".into(), "s3cr3t-pa55".into());
        ConnectorRecord::new(
            &ConnectorSpec {
                name: ConnectorName::parse(name).unwrap(),
                plugin: "p".into(),
                tasks_max: NonZeroU32::new(1).unwrap(),
                config,
            },
            TargetState::Started,
        )
    }

    #[test]
    fn a_finished_deletion_removes_connector_and_offsets_but_only_on_its_revision() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        assert_eq!(
            s.create_connector(&rec("a")).unwrap(),
            CreateOutcome::Created
        );
        assert_eq!(
            s.create_connector(&rec("a")).unwrap(),
            CreateOutcome::AlreadyExists
        );
        s.put_offsets("a", &[("{\"p\":1}".into(), "{\"o\":2}".into())])
            .unwrap();
        s.put_offsets("ab", &[("{\"p\":1}".into(), "{\"o\":3}".into())])
            .unwrap();
        let r = s.connector("a").unwrap().unwrap();
        let d = DeletionRecord::seal(
            &r,
            s.offsets("a").unwrap(),
            crate::model::DeletionMode::Cleanup,
            0,
        );
        assert!(s.start_deletion(&r, &d).unwrap());
        assert_eq!(
            s.create_connector(&rec("a")).unwrap(),
            CreateOutcome::StillDeleting
        );
        let d = s.deletion("a").unwrap().unwrap();
        assert!(!s.finish_deletion("a", d.revision + 100).unwrap());
        let used = d.next_generation;
        assert!(s.finish_deletion("a", d.revision).unwrap());
        assert!(s.connector("a").unwrap().is_none());
        s.create_connector(&rec("a")).unwrap();
        assert!(s.connector("a").unwrap().unwrap().next_generation >= used);
        assert!(s.offsets("a").unwrap().is_empty());
        assert_eq!(s.offsets("ab").unwrap().len(), 1);
    }

    #[test]
    fn a_reserved_generation_is_below_every_later_connectors() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let g1 = s.reserve_generation().unwrap();
        let g2 = s.reserve_generation().unwrap();
        assert!(g1 >= 1 && g2 > g1, "{g1} {g2}");
        s.create_connector(&rec("a")).unwrap();
        assert!(s.connector("a").unwrap().unwrap().next_generation > g2);
    }

    #[test]
    fn a_stale_revision_does_not_overwrite_a_connector() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        s.create_connector(&rec("a")).unwrap();
        let r1 = s.connector("a").unwrap().unwrap();
        assert!(s.put_connector(&r1).unwrap());
        assert!(!s.put_connector(&r1).unwrap());
    }

    #[test]
    fn secrets_do_not_reach_the_store_file_in_clear_text() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = store(dir.path());
            s.create_connector(&rec("a")).unwrap();
        }
        let bytes = std::fs::read(dir.path().join("s.redb")).unwrap();
        let needle = b"s3cr3t-pa55";
        assert!(!bytes.windows(needle.len()).any(|w| w == needle));
        let s = store(dir.path());
        let r = s.connector("a").unwrap().unwrap();
        assert_eq!(r.config["connection.password"], "s3cr3t-pa55");
    }

    #[test]
    fn epochs_grow_across_executors_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let e1 = store(dir.path())
            .register_executor("x", "http://a", vec![])
            .unwrap();
        let e2 = store(dir.path())
            .register_executor("y", "http://b", vec![])
            .unwrap();
        assert!(e2.epoch > e1.epoch);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_batched_writes_keep_revision_semantics_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let names: Vec<String> = (0..50).map(|i| format!("c{i:02}")).collect();
        {
            let s = store(dir.path());
            for n in &names {
                s.create_connector(&rec(n)).unwrap();
            }
            // Two writers per record, both from the same revision, queued together: one
            // wins, the other sees the conflict, as with one commit each.
            let mut futs = Vec::new();
            for n in &names {
                let r = s.connector(n).unwrap().unwrap();
                let mut a = r.clone();
                a.tasks_max = 7;
                let mut b = r;
                b.tasks_max = 9;
                futs.push(s.put_connector_batched(a));
                futs.push(s.put_connector_batched(b));
            }
            let results = futures::future::join_all(futs).await;
            for pair in results.chunks(2) {
                assert_eq!(
                    pair.iter()
                        .map(|r| *r.as_ref().unwrap())
                        .collect::<Vec<_>>(),
                    [true, false]
                );
            }
            for n in &names {
                assert_eq!(s.connector(n).unwrap().unwrap().tasks_max, 7);
            }
        }
        // The cache is what the file holds: a reopen reads the same records and revisions.
        let s = store(dir.path());
        let all = s.connectors().unwrap();
        assert_eq!(all.len(), names.len());
        for r in &all {
            assert_eq!(r.tasks_max, 7);
            let mut again = r.clone();
            again.tasks_max = 8;
            assert!(
                s.put_connector(&again).unwrap(),
                "revision survives a reopen"
            );
        }
    }
}
