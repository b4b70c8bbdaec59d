//! The embedded record log: one redb file, `<dir>/records.redb`, for the single-process
//! default (`--dev`).
//!
//! # Layout
//! - `records`: `(topic, position) -> encoded record` ([`super::codec`]); positions start
//!   at 0 and are dense per topic.
//! - `topic_heads`: `topic -> next position`.
//! - `consumer_floors`: `(consumer, topic) -> floor`: every position below the floor is
//!   acknowledged. Written when a consumer first reads a topic, so `Latest` is fixed then.
//! - `consumer_acks`: `(consumer, topic, position)` for acknowledgements above the floor
//!   (readers sharing a consumer acknowledge out of order); folded into the floor as soon
//!   as they are contiguous with it.
//!
//! # Guarantees
//! Every append and every acknowledgement is one redb write transaction committed with
//! [`redb::Durability::Immediate`] (fsync) before the call returns, so a crash (kill -9,
//! power loss) loses nothing acknowledged and a record acknowledged by a consumer is
//! never delivered to it again. Records delivered but not acknowledged are delivered again:
//! after a restart, and, within the process, when the reader holding them is dropped (or a
//! fetch is dropped midway), ahead of newer records. An append larger than
//! [`LogLimits::max_append_in_flight_records`] is several transactions: a crash in between
//! keeps a prefix (the caller commits source offsets only after `append` returned, so the
//! retry duplicates, never loses).
//!
//! # Why redb
//! One transaction appends the records, moves the topic head and, for acks, the consumer
//! floor, atomically and durably, with no recovery code of ours (segment files would need
//! torn-write detection and an index). The page cache is bounded ([`CACHE_BYTES`]), so a
//! growing log does not grow the process.
//!
//! # Sharing
//! Readers of one consumer name in this process share one in-memory cursor per topic; each
//! record is handed to one reader at a time. The log is single-process: redb locks the file
//! (a second process opening it gets [`LogError::Unavailable`]).
//!
//! # Caveats
//! No retention: records are kept until the data dir is removed.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::watch;

use super::{
    AckToken, ConsumerPosition, Delivered, LogConsumer, LogError, LogLimits, LogRecord,
    PositionChange, RecordLog, StartPosition, codec,
};

/// File name of the database inside the log directory.
pub const DB_FILE_NAME: &str = "records.redb";
/// redb page cache, in bytes (redb's default, 1 GiB, would let a growing log grow the
/// executor's memory by as much).
pub const CACHE_BYTES: usize = 64 * 1024 * 1024;

const RECORDS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("records");
const HEADS: TableDefinition<&str, u64> = TableDefinition::new("topic_heads");
const FLOORS: TableDefinition<(&str, &str), u64> = TableDefinition::new("consumer_floors");
const ACKS: TableDefinition<(&str, &str, u64), ()> = TableDefinition::new("consumer_acks");

/// The embedded backend. Cheap to clone; clones share the open database.
#[derive(Clone)]
pub struct EmbeddedLog {
    inner: Arc<Inner>,
}

struct Inner {
    db: Database,
    dir: PathBuf,
    limits: LogLimits,
    /// Next position per topic, as committed.
    heads: Mutex<HashMap<String, u64>>,
    /// Bumped after every append and every redelivery, to wake waiting readers.
    changed: watch::Sender<u64>,
    /// Shared state per consumer name.
    groups: Mutex<HashMap<String, Arc<Group>>>,
    next_reader_id: AtomicU64,
}

struct Group {
    name: String,
    /// Serialises persistence of this consumer (init, ack, delete) so a reader of a
    /// deleted consumer cannot write its rows back.
    io: tokio::sync::Mutex<()>,
    state: Mutex<GroupState>,
}

#[derive(Default)]
struct GroupState {
    deleted: bool,
    topics: HashMap<String, Cursor>,
}

#[derive(Default)]
struct Cursor {
    /// Lowest position never handed out in this process.
    next: u64,
    /// Acknowledged positions at or above `next` (loaded at start), skipped when handing out.
    acked_ahead: BTreeSet<u64>,
    /// Handed out to a reader that went away without acknowledging: handed out first.
    redeliver: BTreeSet<u64>,
    /// Position -> reader holding it.
    in_flight: HashMap<u64, u64>,
}

fn storage<E: std::error::Error + Send + Sync + 'static>(err: E) -> LogError {
    LogError::Storage(std::io::Error::other(err))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these locks leaves plain data behind, still consistent enough
    // to keep serving (the durable state is in redb).
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, LogError> + Send + 'static,
) -> Result<T, LogError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|err| LogError::Unavailable(format!("record log worker failed: {err}")))?
}

impl EmbeddedLog {
    /// Opens (creating when missing) the log in `dir` with default [`LogLimits`].
    ///
    /// Errors: [`LogError::Storage`] when the directory or file can't be created or read,
    /// [`LogError::Unavailable`] when another process holds the file.
    pub async fn open(dir: impl AsRef<Path>) -> Result<Self, LogError> {
        Self::open_with(dir, LogLimits::default()).await
    }

    /// Opens the log in `dir` with the given limits.
    pub async fn open_with(dir: impl AsRef<Path>, limits: LogLimits) -> Result<Self, LogError> {
        limits.validate()?;
        let dir = dir.as_ref().to_path_buf();
        let path = dir.clone();
        let (db, heads) = blocking(move || {
            std::fs::create_dir_all(&path).map_err(LogError::Storage)?;
            let db = Database::builder()
                .set_cache_size(CACHE_BYTES)
                .create(path.join(DB_FILE_NAME))
                .map_err(|err| match err {
                    redb::DatabaseError::DatabaseAlreadyOpen => LogError::Unavailable(format!(
                        "record log {} is open in another process",
                        path.display()
                    )),
                    other => storage(other),
                })?;
            let txn = db.begin_write().map_err(storage)?;
            let mut heads = HashMap::new();
            {
                // Create every table so readers never meet a missing one.
                txn.open_table(RECORDS).map_err(storage)?;
                txn.open_table(FLOORS).map_err(storage)?;
                txn.open_table(ACKS).map_err(storage)?;
                let table = txn.open_table(HEADS).map_err(storage)?;
                for row in table.iter().map_err(storage)? {
                    let (topic, head) = row.map_err(storage)?;
                    heads.insert(topic.value().to_string(), head.value());
                }
            }
            txn.commit().map_err(storage)?;
            Ok((db, heads))
        })
        .await?;
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                dir,
                limits,
                heads: Mutex::new(heads),
                changed: watch::Sender::new(0),
                groups: Mutex::new(HashMap::new()),
                next_reader_id: AtomicU64::new(1),
            }),
        })
    }

    /// The directory holding the log's file.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Next position of `topic` (= number of records appended to it).
    pub fn head(&self, topic: &str) -> u64 {
        lock(&self.inner.heads).get(topic).copied().unwrap_or(0)
    }

    fn group(&self, name: &str) -> Arc<Group> {
        lock(&self.inner.groups)
            .entry(name.to_string())
            .or_insert_with(|| {
                Arc::new(Group {
                    name: name.to_string(),
                    io: tokio::sync::Mutex::new(()),
                    state: Mutex::new(GroupState::default()),
                })
            })
            .clone()
    }
}

#[async_trait]
impl RecordLog for EmbeddedLog {
    async fn append(&self, topic: &str, records: Vec<LogRecord>) -> Result<Vec<u64>, LogError> {
        let mut positions = Vec::with_capacity(records.len());
        let chunk = self.inner.limits.max_append_in_flight_records;
        for batch in records.chunks(chunk) {
            let encoded: Vec<Vec<u8>> = batch.iter().map(codec::encode).collect();
            let inner = self.inner.clone();
            let topic_owned = topic.to_string();
            let (first, next) = blocking(move || {
                let txn = inner.db.begin_write().map_err(storage)?;
                let first;
                let next;
                {
                    let mut heads = txn.open_table(HEADS).map_err(storage)?;
                    first = heads
                        .get(topic_owned.as_str())
                        .map_err(storage)?
                        .map_or(0, |g| g.value());
                    let mut table = txn.open_table(RECORDS).map_err(storage)?;
                    let mut pos = first;
                    for bytes in &encoded {
                        table
                            .insert((topic_owned.as_str(), pos), bytes.as_slice())
                            .map_err(storage)?;
                        pos += 1;
                    }
                    next = pos;
                    heads.insert(topic_owned.as_str(), next).map_err(storage)?;
                }
                txn.commit().map_err(storage)?;
                Ok((first, next))
            })
            .await?;
            {
                let mut heads = lock(&self.inner.heads);
                let head = heads.entry(topic.to_string()).or_insert(0);
                // Concurrent appends commit in one order but may get here in another.
                *head = (*head).max(next);
            }
            self.inner.changed.send_modify(|n| *n = n.wrapping_add(1));
            positions.extend(first..next);
        }
        Ok(positions)
    }

    async fn consumer(
        &self,
        consumer: &str,
        topics: &[String],
        start: StartPosition,
    ) -> Result<Box<dyn LogConsumer>, LogError> {
        let group = self.group(consumer);
        let _io = group.io.lock().await;
        let missing: Vec<String> = {
            let state = lock(&group.state);
            if state.deleted {
                return Err(LogError::ConsumerDeleted(consumer.to_string()));
            }
            topics
                .iter()
                .filter(|t| !state.topics.contains_key(t.as_str()))
                .cloned()
                .collect()
        };
        let inner = self.inner.clone();
        let name = consumer.to_string();
        let loaded = blocking(move || {
            let txn = inner.db.begin_write().map_err(storage)?;
            let mut loaded = Vec::new();
            {
                let heads = txn.open_table(HEADS).map_err(storage)?;
                let mut floors = txn.open_table(FLOORS).map_err(storage)?;
                let acks = txn.open_table(ACKS).map_err(storage)?;
                for topic in missing {
                    let stored = floors
                        .get((name.as_str(), topic.as_str()))
                        .map_err(storage)?
                        .map(|g| g.value());
                    let floor = match stored {
                        Some(floor) => floor,
                        None => {
                            let floor = match start {
                                StartPosition::Earliest => 0,
                                StartPosition::Latest => heads
                                    .get(topic.as_str())
                                    .map_err(storage)?
                                    .map_or(0, |g| g.value()),
                            };
                            floors
                                .insert((name.as_str(), topic.as_str()), floor)
                                .map_err(storage)?;
                            floor
                        }
                    };
                    let mut acked_ahead = BTreeSet::new();
                    let from = (name.as_str(), topic.as_str(), floor);
                    let to = (name.as_str(), topic.as_str(), u64::MAX);
                    for row in acks.range(from..=to).map_err(storage)? {
                        let (key, _) = row.map_err(storage)?;
                        acked_ahead.insert(key.value().2);
                    }
                    loaded.push((
                        topic,
                        Cursor {
                            next: floor,
                            acked_ahead,
                            ..Cursor::default()
                        },
                    ));
                }
            }
            txn.commit().map_err(storage)?;
            Ok(loaded)
        })
        .await?;
        {
            let mut state = lock(&group.state);
            for (topic, cursor) in loaded {
                state.topics.entry(topic).or_insert(cursor);
            }
        }
        let id = self.inner.next_reader_id.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(EmbeddedConsumer {
            inner: self.inner.clone(),
            group: group.clone(),
            id,
            topics: topics.to_vec(),
            next_topic: 0,
        }))
    }

    async fn delete_consumer(&self, consumer: &str) -> Result<(), LogError> {
        let group = lock(&self.inner.groups).remove(consumer);
        let _io = match &group {
            Some(group) => {
                let io = group.io.lock().await;
                lock(&group.state).deleted = true;
                Some(io)
            }
            None => None,
        };
        let inner = self.inner.clone();
        let name = consumer.to_string();
        blocking(move || {
            let txn = inner.db.begin_write().map_err(storage)?;
            {
                let mut floors = txn.open_table(FLOORS).map_err(storage)?;
                floors
                    .retain(|(c, _), _| c != name.as_str())
                    .map_err(storage)?;
                let mut acks = txn.open_table(ACKS).map_err(storage)?;
                acks.retain(|(c, _, _), _| c != name.as_str())
                    .map_err(storage)?;
            }
            txn.commit().map_err(storage)
        })
        .await?;
        // Readers of the deleted consumer return what they held; nothing to redeliver.
        self.inner.changed.send_modify(|n| *n = n.wrapping_add(1));
        Ok(())
    }

    async fn consumer_positions(&self, consumer: &str) -> Result<Vec<ConsumerPosition>, LogError> {
        let inner = self.inner.clone();
        let name = consumer.to_string();
        blocking(move || {
            let txn = inner.db.begin_read().map_err(storage)?;
            let floors = txn.open_table(FLOORS).map_err(storage)?;
            let mut out = Vec::new();
            for row in floors.iter().map_err(storage)? {
                let (key, floor) = row.map_err(storage)?;
                let (c, topic) = key.value();
                if c == name {
                    out.push(ConsumerPosition {
                        topic: topic.to_owned(),
                        partition: 0,
                        next: floor.value(),
                    });
                }
            }
            out.sort_by(|a, b| a.topic.cmp(&b.topic));
            Ok(out)
        })
        .await
    }

    async fn set_consumer_positions(
        &self,
        consumer: &str,
        changes: &[PositionChange],
    ) -> Result<(), LogError> {
        super::single_partition(changes)?;
        // The cursors in memory are dropped: readers opened afterwards load the new floors.
        let group = lock(&self.inner.groups).remove(consumer);
        let _io = match &group {
            Some(group) => {
                let io = group.io.lock().await;
                lock(&group.state).deleted = true;
                Some(io)
            }
            None => None,
        };
        let inner = self.inner.clone();
        let name = consumer.to_string();
        let changes = changes.to_vec();
        blocking(move || {
            let txn = inner.db.begin_write().map_err(storage)?;
            {
                let heads = txn.open_table(HEADS).map_err(storage)?;
                let mut floors = txn.open_table(FLOORS).map_err(storage)?;
                let mut acks = txn.open_table(ACKS).map_err(storage)?;
                for c in &changes {
                    let head = heads
                        .get(c.topic.as_str())
                        .map_err(storage)?
                        .map_or(0, |g| g.value());
                    if let Some(next) = c.next
                        && next > head
                    {
                        return Err(LogError::InvalidConfig(format!(
                            "offset {next} of topic {:?} is beyond its end ({head} records)",
                            c.topic
                        )));
                    }
                    acks.retain(|(k, t, _), _| !(k == name.as_str() && t == c.topic.as_str()))
                        .map_err(storage)?;
                    match c.next {
                        Some(next) => {
                            floors
                                .insert((name.as_str(), c.topic.as_str()), next)
                                .map_err(storage)?;
                        }
                        None => {
                            floors
                                .remove((name.as_str(), c.topic.as_str()))
                                .map_err(storage)?;
                        }
                    }
                }
            }
            txn.commit().map_err(storage)
        })
        .await?;
        self.inner.changed.send_modify(|n| *n = n.wrapping_add(1));
        Ok(())
    }
}

/// One reader of an embedded consumer. Dropping it returns its unacknowledged records to
/// the consumer for another reader.
pub struct EmbeddedConsumer {
    inner: Arc<Inner>,
    group: Arc<Group>,
    id: u64,
    topics: Vec<String>,
    /// Index of the topic served first on the next fetch (round robin).
    next_topic: usize,
}

/// Positions claimed by a fetch still running; a fetch dropped midway (cancelled by a
/// `select!`) gives them back for redelivery instead of leaving them held.
struct Claim {
    inner: Arc<Inner>,
    group: Arc<Group>,
    reader: u64,
    positions: Vec<(String, u64)>,
}

impl Claim {
    /// Gives back `positions[from..]` and keeps the rest claimed (delivered).
    fn release_from(&mut self, from: usize) {
        let back = self.positions.split_off(from.min(self.positions.len()));
        if back.is_empty() {
            return;
        }
        {
            let mut state = lock(&self.group.state);
            for (topic, pos) in &back {
                if let Some(cursor) = state.topics.get_mut(topic)
                    && cursor.in_flight.get(pos) == Some(&self.reader)
                {
                    cursor.in_flight.remove(pos);
                    cursor.redeliver.insert(*pos);
                }
            }
        }
        self.inner.changed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.release_from(0);
    }
}

impl EmbeddedConsumer {
    /// Picks up to `max` positions for this reader, marking them in flight.
    fn claim(&mut self, max: usize) -> Result<Vec<(String, u64)>, LogError> {
        let heads = lock(&self.inner.heads).clone();
        let mut state = lock(&self.group.state);
        if state.deleted {
            return Err(LogError::ConsumerDeleted(self.group.name.clone()));
        }
        let mut claimed = Vec::new();
        let n = self.topics.len();
        for i in 0..n {
            if claimed.len() >= max {
                break;
            }
            let topic = &self.topics[(self.next_topic + i) % n];
            let head = heads.get(topic).copied().unwrap_or(0);
            let Some(cursor) = state.topics.get_mut(topic) else {
                continue;
            };
            while claimed.len() < max {
                let Some(pos) = cursor.redeliver.pop_first() else {
                    break;
                };
                cursor.in_flight.insert(pos, self.id);
                claimed.push((topic.clone(), pos));
            }
            while claimed.len() < max && cursor.next < head {
                let pos = cursor.next;
                cursor.next += 1;
                if cursor.acked_ahead.remove(&pos) {
                    continue;
                }
                cursor.in_flight.insert(pos, self.id);
                claimed.push((topic.clone(), pos));
            }
        }
        self.next_topic = (self.next_topic + 1) % n.max(1);
        Ok(claimed)
    }

    /// Records this reader holds unacknowledged.
    fn held(&self) -> usize {
        let state = lock(&self.group.state);
        state
            .topics
            .values()
            .map(|c| c.in_flight.values().filter(|r| **r == self.id).count())
            .sum()
    }
}

#[async_trait]
impl LogConsumer for EmbeddedConsumer {
    async fn fetch(&mut self, max: usize, wait: Duration) -> Result<Vec<Delivered>, LogError> {
        let limits = self.inner.limits;
        let deadline = tokio::time::Instant::now() + wait;
        let mut changed = self.inner.changed.subscribe();
        loop {
            changed.borrow_and_update();
            let room = limits.max_in_flight_records.saturating_sub(self.held());
            let max = max.clamp(1, limits.max_fetch_records).min(room);
            let claimed = if max == 0 {
                Vec::new()
            } else {
                self.claim(max)?
            };
            if !claimed.is_empty() {
                let mut claim = Claim {
                    inner: self.inner.clone(),
                    group: self.group.clone(),
                    reader: self.id,
                    positions: claimed.clone(),
                };
                let inner = self.inner.clone();
                let wanted = claimed;
                let max_bytes = limits.max_fetch_bytes;
                let read = blocking(move || {
                    let txn = inner.db.begin_read().map_err(storage)?;
                    let table = txn.open_table(RECORDS).map_err(storage)?;
                    let mut out = Vec::with_capacity(wanted.len());
                    let mut bytes = 0usize;
                    for (topic, pos) in wanted {
                        let guard = table
                            .get((topic.as_str(), pos))
                            .map_err(storage)?
                            .ok_or_else(|| {
                                LogError::Corrupt(format!("topic {topic} has no record at {pos}"))
                            })?;
                        let raw = guard.value();
                        if !out.is_empty() && bytes + raw.len() > max_bytes {
                            break;
                        }
                        bytes += raw.len();
                        out.push((topic, pos, codec::decode(raw)?));
                    }
                    Ok(out)
                })
                .await?;
                // Delivered: keep those claimed; give back what the byte bound left out.
                claim.release_from(read.len());
                claim.positions.clear();
                return Ok(read
                    .into_iter()
                    .map(|(topic, position, record)| Delivered {
                        record: record.into_sink_record(&topic, position),
                        ack: AckToken {
                            topic,
                            position,
                            handle: String::new(),
                        },
                    })
                    .collect());
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => continue,
                // Sender gone cannot happen while `inner` is alive; treat like a timeout.
                Ok(Err(_)) | Err(_) => return Ok(Vec::new()),
            }
        }
    }

    async fn ack(&mut self, tokens: &[AckToken]) -> Result<(), LogError> {
        if tokens.is_empty() {
            return Ok(());
        }
        let _io = self.group.io.lock().await;
        {
            let state = lock(&self.group.state);
            if state.deleted {
                return Err(LogError::ConsumerDeleted(self.group.name.clone()));
            }
            if let Some(t) = tokens
                .iter()
                .find(|t| !state.topics.contains_key(t.topic.as_str()))
            {
                return Err(LogError::InvalidConfig(format!(
                    "ack for topic {} which consumer {} does not read",
                    t.topic, self.group.name
                )));
            }
        }
        let inner = self.inner.clone();
        let name = self.group.name.clone();
        let acked: Vec<(String, u64)> = tokens
            .iter()
            .map(|t| (t.topic.clone(), t.position))
            .collect();
        blocking(move || {
            let txn = inner.db.begin_write().map_err(storage)?;
            {
                let mut floors = txn.open_table(FLOORS).map_err(storage)?;
                let mut acks = txn.open_table(ACKS).map_err(storage)?;
                let mut new_floors: HashMap<&str, u64> = HashMap::new();
                for (topic, pos) in &acked {
                    let floor = match new_floors.get(topic.as_str()) {
                        Some(f) => *f,
                        None => floors
                            .get((name.as_str(), topic.as_str()))
                            .map_err(storage)?
                            .map_or(0, |g| g.value()),
                    };
                    new_floors.insert(topic.as_str(), floor);
                    if *pos >= floor {
                        acks.insert((name.as_str(), topic.as_str(), *pos), ())
                            .map_err(storage)?;
                    }
                }
                for (topic, floor) in new_floors.iter_mut() {
                    while acks
                        .remove((name.as_str(), *topic, *floor))
                        .map_err(storage)?
                        .is_some()
                    {
                        *floor += 1;
                    }
                    floors
                        .insert((name.as_str(), *topic), *floor)
                        .map_err(storage)?;
                }
            }
            txn.commit().map_err(storage)
        })
        .await?;
        let mut state = lock(&self.group.state);
        for token in tokens {
            if let Some(cursor) = state.topics.get_mut(token.topic.as_str()) {
                cursor.in_flight.remove(&token.position);
                cursor.redeliver.remove(&token.position);
            }
        }
        Ok(())
    }
}

impl Drop for EmbeddedConsumer {
    fn drop(&mut self) {
        let mut returned = false;
        {
            let mut state = lock(&self.group.state);
            for cursor in state.topics.values_mut() {
                let mine: Vec<u64> = cursor
                    .in_flight
                    .iter()
                    .filter(|(_, reader)| **reader == self.id)
                    .map(|(pos, _)| *pos)
                    .collect();
                for pos in mine {
                    cursor.in_flight.remove(&pos);
                    cursor.redeliver.insert(pos);
                    returned = true;
                }
            }
        }
        if returned {
            self.inner.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}
