//! The source work loop of a task: poll → pipeline → append → commit. Three things overlap:
//! the next `poll` and the record pipeline on its records run while the records of the
//! previous one are appended, and an offset commit
//! (with the plugin's `commit` after it) runs while both go on. Offsets enter a commit
//! only after the log acknowledged their records (at least once); commits are coalesced
//! (the latest per source partition wins).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex as AsyncMutex;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use wharf::pb::v1 as pb;
use wharf::sdk::{SourceRecord, SourceTask};

use super::{STOP_DRAIN_TIMEOUT_MS, TaskInstance};
use crate::host::panic_text;
use crate::log::{LogRecord, TopicPrepared};
use wharf::task::{TaskKind, spawn};

/// Shortest time between the starts of two offset commits of one source task, in
/// milliseconds (Kafka Connect's `offset.flush.interval.ms`, 60 s there). Polls and appends
/// go on meanwhile; offsets the log acknowledged in between are coalesced (the latest per
/// source partition wins) into the next commit, so a busy task commits at most this often
/// and an idle one right after its records reached the log. A graceful stop commits at
/// once; after a crash at most this much more is polled again.
pub const OFFSET_COMMIT_INTERVAL_MS: u64 = 100;

/// Wait before retrying an offset commit the control plane refused or did not answer, in
/// milliseconds. A refusal for a fenced epoch also makes the executor heartbeat at once,
/// which stops the task (`registry_client`).
pub const OFFSET_COMMIT_RETRY_BACKOFF_MS: u64 = 500;

/// The plugin instance of a source task (see `PluginCell`).
pub(super) type SourceCell = Arc<AsyncMutex<Box<dyn SourceTask>>>;
/// The task's record pipeline, used by one spawned poll at a time.
type SharedPipeline = Arc<AsyncMutex<crate::pipeline::Pipeline>>;
/// A spawned `poll` with the record pipeline after it.
type PollHandle = JoinHandle<Polled>;

/// What a spawned poll hands the work loop.
enum Polled {
    /// The stop began before the poll ran or before its records went on.
    Stopped,
    /// The records to append (after the pipeline) and the offsets of every record polled.
    Records(Vec<SourceRecord>, PollOffsets),
    /// The poll or the pipeline failed: the task's failure text.
    Failed(String),
}

/// A plugin call's handle that cancels the call when dropped, so that cancelling the
/// spawned poll cancels the plugin's `poll` in it.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Why a source work loop ended.
enum SourceExit {
    /// The stop began: commit what the log acknowledged (bounded), then end.
    Stopped,
    /// The task failed: commit what the log acknowledged (bounded), then report it.
    Failed(String),
    /// The drain bound passed during the stop: end now.
    Abandoned,
}

/// Result of one offset commit (and the plugin's `commit` after it).
enum CommitOutcome {
    Committed,
    /// The control plane refused the commit or did not answer: these offsets are retried.
    Refused(BTreeMap<String, String>, String),
    /// The plugin's `commit` failed or panicked.
    PluginFailed(String),
}

/// Distinct source partitions of one poll that [`split_poll`] compares as values before
/// it goes by their encoding.
const FEW_PARTITIONS: usize = 32;

/// The offsets of one poll, taken out before its records go on.
#[derive(Debug, Default, PartialEq)]
struct PollOffsets {
    /// Source partition -> the offset of its last record in the poll (both as JSON text).
    offsets: BTreeMap<String, String>,
    /// Records the poll returned (for the commit count).
    records: u64,
}

/// Splits a poll into its records, to be appended, and its offsets, to be committed after
/// the log acknowledged the append: a step in between may drop or change records, and
/// the poll's offsets are committed all the same (the offset of a dropped record too).
///
/// Linear in the records: the first [`FEW_PARTITIONS`] partitions of a poll are compared
/// as values (cheaper than encoding them), any more are found by their encoding.
/// (Comparing every record with every partition seen grows with the square of a poll's
/// distinct partitions, on a worker of the executor's runtime.)
fn split_poll(records: Vec<SourceRecord>) -> (Vec<SourceRecord>, PollOffsets) {
    let mut offsets = BTreeMap::new();
    let mut few: Vec<&serde_json::Value> = Vec::new();
    let mut many = std::collections::HashSet::new();
    for r in records.iter().rev() {
        let partition = &r.source_partition;
        if few.contains(&partition) {
            continue;
        }
        if few.len() < FEW_PARTITIONS {
            few.push(partition);
            offsets.insert(partition.to_string(), r.source_offset.to_string());
            continue;
        }
        let encoded = partition.to_string();
        if many.insert(encoded.clone()) {
            offsets.insert(encoded, r.source_offset.to_string());
        }
    }
    let records_polled = records.len() as u64;
    (
        records,
        PollOffsets {
            offsets,
            records: records_polled,
        },
    )
}

/// Offset commits of a source task: at most one in flight, the rest coalesced.
struct SourceCommits {
    /// Source partition -> offset (both as JSON text) of records the log acknowledged and
    /// no commit took yet.
    pending: BTreeMap<String, String>,
    /// Records whose offsets are in `pending` (for the commit count).
    pending_records: u64,
    in_flight: Option<JoinHandle<CommitOutcome>>,
    /// Records whose offsets the commit in flight carries.
    in_flight_records: u64,
    /// Earliest start of the next commit.
    next_at: Instant,
}

impl SourceCommits {
    fn new() -> Self {
        Self {
            pending: BTreeMap::new(),
            pending_records: 0,
            in_flight: None,
            in_flight_records: 0,
            next_at: Instant::now(),
        }
    }

    /// Takes a poll's offsets, once the log acknowledged what was appended of its
    /// records; they replace older pending offsets of the same partitions.
    fn take(&mut self, poll: PollOffsets) {
        self.pending_records += poll.records;
        self.pending.extend(poll.offsets);
    }

    /// Puts back the offsets of a commit that did not land, unless newer ones are pending.
    fn restore(&mut self, offsets: BTreeMap<String, String>) {
        self.pending_records += std::mem::take(&mut self.in_flight_records);
        for (partition, offset) in offsets {
            self.pending.entry(partition).or_insert(offset);
        }
    }

    /// When the next commit should start: some time when offsets are pending and no
    /// commit is in flight, else never.
    fn due(&self) -> Option<Instant> {
        (self.in_flight.is_none() && !self.pending.is_empty()).then_some(self.next_at)
    }
}

/// The output of a spawned task, or never when there is none.
async fn join_some<T>(handle: &mut Option<JoinHandle<T>>) -> Result<T, tokio::task::JoinError> {
    match handle {
        Some(h) => h.await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `at`, or forever when `None`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Offsets as the control plane takes them.
fn to_wire(offsets: &BTreeMap<String, String>) -> Vec<pb::SourceOffset> {
    offsets
        .iter()
        .map(|(partition, offset)| pb::SourceOffset {
            partition: partition.clone(),
            offset: offset.clone(),
        })
        .collect()
}

impl TaskInstance {
    /// The source work loop. Three things overlap: the next `poll` runs while the records
    /// of the previous one are appended, and an offset commit (with the plugin's `commit`
    /// after it) runs while both go on. Offsets enter a commit only after the log
    /// acknowledged their records (at least once); commits are coalesced.
    pub(super) async fn source_loop(self: Arc<Self>, cell: SourceCell) {
        let mut poll = None;
        let mut commits = SourceCommits::new();
        let Some(pipeline) = super::lock(&self.pipeline).take() else {
            return self.fail("the record pipeline was already taken by a work loop".into());
        };
        let pipeline = Arc::new(AsyncMutex::new(pipeline));
        let exit = self
            .source_work(&cell, &mut poll, &mut commits, &pipeline)
            .await;
        if let Some(poll) = poll {
            // Cancel the pending poll before the stop runs (a cancel-safe poll is dropped
            // at its await point); what it returned would be polled again.
            poll.abort();
        }
        match exit {
            SourceExit::Stopped => {
                // Drained on stop (bounded): records in the log whose offsets were not
                // committed would be polled again by the next instance, a duplicate
                // without a crash. Not for a deletion: it removes the offsets (and the
                // control plane refuses commits meanwhile).
                let deleted = self.stop_began.get().is_some_and(|(_, deleted)| *deleted);
                if !deleted {
                    let deadline = self.stop_drain_deadline();
                    self.commit_remaining(&mut commits, deadline).await;
                }
            }
            SourceExit::Failed(error) => {
                let deadline = Instant::now() + Duration::from_millis(STOP_DRAIN_TIMEOUT_MS);
                self.commit_remaining(&mut commits, deadline).await;
                self.fail(error);
            }
            SourceExit::Abandoned => {}
        }
    }

    /// Spawns the next `poll` and, once it returned, the record pipeline on its records,
    /// so that the pipeline of one poll runs while the records of the previous one are
    /// appended (an append waits for the log's durable write; the pipeline is CPU work).
    /// The poll's offsets are taken before the pipeline: whatever a transform does to the
    /// records (drops or changes them), the poll's offsets are committed once the log
    /// acknowledged what was appended.
    fn spawn_poll(self: &Arc<Self>, cell: &SourceCell, pipeline: &SharedPipeline) -> PollHandle {
        let (p, cancel) = (cell.clone(), self.cancel.clone());
        let plugin_poll = AbortOnDrop(self.slot.spawn("source poll", async move {
            let mut g = p.lock_owned().await;
            if cancel.is_cancelled() {
                return Ok(None);
            }
            g.poll().await.map(Some).map_err(|e| e.to_string())
        }));
        let (me, pipeline) = (self.clone(), pipeline.clone());
        spawn(TaskKind::Awaited, "source poll and pipeline", async move {
            let mut plugin_poll = plugin_poll;
            let records = match (&mut plugin_poll.0).await {
                Ok(Ok(Some(records))) => records,
                Ok(Ok(None)) => return Polled::Stopped,
                Ok(Err(e)) => return Polled::Failed(format!("poll failed: {e}")),
                Err(join) => return Polled::Failed(panic_text(join)),
            };
            if records.is_empty() {
                return Polled::Records(records, PollOffsets::default());
            }
            me.stats.add_records(
                records.len(),
                records
                    .iter()
                    .map(|r| crate::counters::record_bytes(r.key.as_ref(), &r.value))
                    .sum(),
            );
            // Fenced: nothing polled after the stop began reaches the log.
            if me.cancel.is_cancelled() {
                return Polled::Stopped;
            }
            let (records, offsets) = split_poll(records);
            let mut pipeline = pipeline.lock().await;
            match me.source_pipeline(&mut pipeline, records).await {
                Ok(records) => Polled::Records(records, offsets),
                Err(e) => Polled::Failed(e),
            }
        })
    }

    async fn source_work(
        self: &Arc<Self>,
        cell: &SourceCell,
        poll: &mut Option<PollHandle>,
        commits: &mut SourceCommits,
        pipeline: &SharedPipeline,
    ) -> SourceExit {
        loop {
            if self.cancel.is_cancelled() {
                return SourceExit::Stopped;
            }
            if poll.is_none() {
                *poll = Some(self.spawn_poll(cell, pipeline));
            }
            let due = commits.due();
            if due.is_some_and(|at| at <= Instant::now()) {
                let offsets = std::mem::take(&mut commits.pending);
                commits.in_flight_records = std::mem::take(&mut commits.pending_records);
                commits.in_flight = Some(self.spawn_commit(cell, offsets, true));
                commits.next_at = Instant::now() + Duration::from_millis(OFFSET_COMMIT_INTERVAL_MS);
                continue;
            }
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => return SourceExit::Stopped,
                done = join_some(&mut commits.in_flight) => {
                    commits.in_flight = None;
                    match done.unwrap_or_else(|e| CommitOutcome::PluginFailed(panic_text(e))) {
                        CommitOutcome::Committed => {
                            self.stats.add_committed(std::mem::take(&mut commits.in_flight_records));
                        }
                        CommitOutcome::Refused(offsets, error) => {
                            tracing::warn!(connector = %self.key.connector, task = self.key.task, error = %error,
                                "offset commit failed; kept for the next commit");
                            commits.restore(offsets);
                            commits.next_at =
                                Instant::now() + Duration::from_millis(OFFSET_COMMIT_RETRY_BACKOFF_MS);
                        }
                        CommitOutcome::PluginFailed(e) => {
                            // The offsets landed; the plugin's own commit failed.
                            self.stats.add_committed(std::mem::take(&mut commits.in_flight_records));
                            return SourceExit::Failed(format!("commit failed: {e}"));
                        }
                    }
                }
                () = sleep_until_some(due) => {}
                polled = join_some(poll) => {
                    *poll = None;
                    // A turn of the loop: topics used meanwhile are reported when due.
                    self.note_active_topics([]);
                    let (records, offsets) = match polled {
                        Ok(Polled::Records(records, offsets)) => (records, offsets),
                        Ok(Polled::Stopped) => continue,
                        Ok(Polled::Failed(e)) => return SourceExit::Failed(e),
                        Err(join) => return SourceExit::Failed(panic_text(join)),
                    };
                    if offsets.records == 0 {
                        continue;
                    }
                    // Fenced: nothing polled after the stop began reaches the log.
                    if self.cancel.is_cancelled() {
                        return SourceExit::Stopped;
                    }
                    // The next poll (and its pipeline) runs while these records are appended.
                    *poll = Some(self.spawn_poll(cell, pipeline));
                    if let Err(exit) = self.append_all(&records).await {
                        return exit;
                    }
                    self.stats.add_written(records.len());
                    commits.take(offsets);
                }
            }
        }
    }

    /// Appends `records` to their topics, retrying failures; records polled before the
    /// stop began are drained into the log, bounded by [`STOP_DRAIN_TIMEOUT_MS`].
    async fn append_all(&self, records: &[SourceRecord]) -> Result<(), SourceExit> {
        for (topic, batch) in by_topic(records) {
            self.prepare_topic(&topic).await?;
            loop {
                let appended = tokio::select! {
                    biased;
                    () = self.drain_deadline() => return Err(SourceExit::Abandoned),
                    r = self.log.append(&topic, batch.clone()) => r,
                };
                match appended {
                    Ok(_) => {
                        self.note_active_topics([topic.as_str()]);
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(connector = %self.key.connector, task = self.key.task, topic = %topic,
                            error = %e, "append to the record log failed; retrying");
                        if !self.backoff().await {
                            return Err(SourceExit::Stopped);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Before the first append to `topic`: when the connector has topic creation rules,
    /// asks the log to create the topic with its group's settings (an existing topic is
    /// used as it is), retrying failures like an append.
    async fn prepare_topic(&self, topic: &str) -> Result<(), SourceExit> {
        let Some(rules) = &self.topic_creation else {
            return Ok(());
        };
        if super::lock(&self.topics_prepared).contains(topic) {
            return Ok(());
        }
        let settings = rules.settings_for(topic);
        loop {
            let prepared = tokio::select! {
                biased;
                () = self.drain_deadline() => return Err(SourceExit::Abandoned),
                r = self.prepare_topic_once(topic, settings) => r,
            };
            match prepared {
                Ok(()) => {
                    super::lock(&self.topics_prepared).insert(topic.to_owned());
                    return Ok(());
                }
                Err(e) => {
                    tracing::warn!(connector = %self.key.connector, task = self.key.task, topic = %topic,
                        error = %e, "creating the topic failed; retrying");
                    if !self.backoff().await {
                        return Err(SourceExit::Stopped);
                    }
                }
            }
        }
    }

    /// One attempt at [`TaskInstance::prepare_topic`], with the ledger: a topic the log
    /// is about to create is recorded (intent) before and confirmed after, as a created
    /// topic of this task; a topic that exists is never recorded as created (one that
    /// appeared between the check and the create is recorded as adopted).
    async fn prepare_topic_once(
        &self,
        topic: &str,
        settings: &wharf::topic_creation::TopicSettings,
    ) -> Result<(), String> {
        let log = &self.log;
        let entry = match self.created_topic(topic) {
            Some(entry)
                if log
                    .will_create_topic(topic)
                    .await
                    .map_err(|e| e.to_string())? =>
            {
                Some(entry)
            }
            Some(_) | None => None,
        };
        let resources = self.runtime_resources();
        if let Some(entry) = &entry {
            resources.intend(entry).await.map_err(|e| e.to_string())?;
        }
        let prepared = log
            .prepare_topic(topic, settings)
            .await
            .map_err(|e| e.to_string())?;
        if let Some(entry) = entry {
            match prepared {
                TopicPrepared::Created => {
                    resources.confirm(&entry).await.map_err(|e| e.to_string())?;
                }
                TopicPrepared::Existed | TopicPrepared::NotCreated => {
                    let found = entry.with_origin(wharf::sdk::Origin::Adopted);
                    resources.intend(&found).await.map_err(|e| e.to_string())?;
                    resources.confirm(&found).await.map_err(|e| e.to_string())?;
                }
            }
        }
        Ok(())
    }

    /// Commits `offsets` to the control plane and, when that landed and `plugin_commit`,
    /// runs the plugin's `commit` (skipped once the stop began).
    fn spawn_commit(
        self: &Arc<Self>,
        cell: &SourceCell,
        offsets: BTreeMap<String, String>,
        plugin_commit: bool,
    ) -> JoinHandle<CommitOutcome> {
        let (me, cell) = (self.clone(), cell.clone());
        spawn(TaskKind::Awaited, "source offset commit", async move {
            let wire = to_wire(&offsets);
            let started = std::time::Instant::now();
            let landed = me
                .shared
                .registry
                .commit_offsets(&me.key, me.life.generation, wire)
                .await;
            crate::counters::took(crate::counters::SOURCE_COMMIT_SECONDS, started);
            if let Err(e) = landed {
                return CommitOutcome::Refused(offsets, e.to_string());
            }
            if !plugin_commit {
                return CommitOutcome::Committed;
            }
            let p = cell.clone();
            let cancel = me.cancel.clone();
            let committed = me
                .slot
                .spawn("source commit", async move {
                    let mut g = p.lock_owned().await;
                    if cancel.is_cancelled() {
                        return Ok(());
                    }
                    g.commit().await.map_err(|e| e.to_string())
                })
                .await
                .unwrap_or_else(|e| Err(panic_text(e)));
            match committed {
                Ok(()) => CommitOutcome::Committed,
                Err(e) => CommitOutcome::PluginFailed(e),
            }
        })
    }

    /// Waits for the commit in flight and commits what is still pending, both by
    /// `deadline`; the plugin's `commit` is not called.
    async fn commit_remaining(self: &Arc<Self>, commits: &mut SourceCommits, deadline: Instant) {
        if let Some(in_flight) = commits.in_flight.take() {
            match tokio::time::timeout_at(deadline, in_flight).await {
                Err(_) => return,
                Ok(Ok(CommitOutcome::Refused(offsets, _))) => commits.restore(offsets),
                Ok(Ok(CommitOutcome::Committed | CommitOutcome::PluginFailed(_))) => {
                    self.stats
                        .add_committed(std::mem::take(&mut commits.in_flight_records));
                }
                Ok(Err(_)) => {}
            }
        }
        if commits.pending.is_empty() {
            return;
        }
        let wire = to_wire(&std::mem::take(&mut commits.pending));
        let records = std::mem::take(&mut commits.pending_records);
        let committed = tokio::time::timeout_at(
            deadline,
            self.shared
                .registry
                .commit_offsets(&self.key, self.life.generation, wire),
        )
        .await;
        match committed {
            Ok(Ok(())) => self.stats.add_committed(records),
            Ok(Err(e)) => {
                tracing::warn!(connector = %self.key.connector, task = self.key.task, error = %e,
                    "offset commit at the end of the task failed; its records will be polled again");
            }
            Err(_) => {
                tracing::warn!(connector = %self.key.connector, task = self.key.task,
                    "offset commit at the end of the task did not finish in time; its records will be polled again");
            }
        }
    }
}

/// Records grouped by topic, in first-seen topic order, each group in poll order.
fn by_topic(records: &[SourceRecord]) -> Vec<(String, Vec<LogRecord>)> {
    let mut groups: Vec<(String, Vec<LogRecord>)> = Vec::new();
    for r in records {
        let record = LogRecord {
            key: r.key.clone(),
            value: r.value.clone(),
            headers: r.headers.clone(),
            timestamp_ms: r.timestamp_ms,
            partition: None,
        };
        match groups.iter_mut().find(|(t, _)| *t == r.topic) {
            Some((_, batch)) => batch.push(record),
            None => groups.push((r.topic.clone(), vec![record])),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn record(partition: serde_json::Value, position: u64) -> SourceRecord {
        SourceRecord {
            topic: "t".into(),
            key: None,
            value: Vec::new(),
            headers: Vec::new(),
            timestamp_ms: None,
            partition: None,
            source_partition: partition,
            source_offset: json!({ "position": position }),
            data: None,
        }
    }

    /// What the loop does with a poll whose records all reached the log.
    fn appended(commits: &mut SourceCommits, records: Vec<SourceRecord>) {
        commits.take(split_poll(records).1);
    }

    #[test]
    fn commits_keep_the_last_offset_of_each_partition() {
        let mut commits = SourceCommits::new();
        let (a, b) = (json!({ "file": "a" }), json!({ "file": "b" }));
        appended(
            &mut commits,
            vec![
                record(a.clone(), 1),
                record(b.clone(), 7),
                record(a.clone(), 2),
            ],
        );
        appended(&mut commits, vec![record(a.clone(), 3)]);
        let expected = BTreeMap::from([
            (a.to_string(), json!({ "position": 3 }).to_string()),
            (b.to_string(), json!({ "position": 7 }).to_string()),
        ]);
        assert_eq!(commits.pending, expected);
    }

    #[test]
    fn many_distinct_partitions_keep_each_ones_last_offset() {
        let mut commits = SourceCommits::new();
        let n = 20_000;
        // Each partition twice, interleaved: the later record of each must win.
        let records: Vec<_> = (0..2 * n)
            .map(|i| record(json!({ "file": i % n }), i))
            .collect();
        appended(&mut commits, records);
        assert_eq!(commits.pending.len(), n as usize);
        for p in [0, 1, n - 1] {
            assert_eq!(
                commits.pending.get(&json!({ "file": p }).to_string()),
                Some(&json!({ "position": p + n }).to_string())
            );
        }
    }

    #[test]
    fn a_refused_commit_does_not_overwrite_newer_offsets() {
        let mut commits = SourceCommits::new();
        let (a, b) = (json!({ "file": "a" }), json!({ "file": "b" }));
        appended(
            &mut commits,
            vec![record(a.clone(), 5), record(b.clone(), 5)],
        );
        let refused = std::mem::take(&mut commits.pending);
        appended(&mut commits, vec![record(a.clone(), 9)]);
        commits.restore(refused);
        assert_eq!(
            commits.pending.get(&a.to_string()),
            Some(&json!({ "position": 9 }).to_string())
        );
        assert_eq!(
            commits.pending.get(&b.to_string()),
            Some(&json!({ "position": 5 }).to_string())
        );
    }

    #[test]
    fn a_commit_is_due_only_with_pending_offsets_and_none_in_flight() {
        let mut commits = SourceCommits::new();
        assert_eq!(commits.due(), None);
        appended(&mut commits, vec![record(json!({ "file": "a" }), 1)]);
        assert_eq!(commits.due(), Some(commits.next_at));
    }

    #[tokio::test]
    async fn no_second_commit_starts_while_one_is_in_flight() {
        let mut commits = SourceCommits::new();
        appended(&mut commits, vec![record(json!({ "file": "a" }), 1)]);
        commits.in_flight = Some(tokio::spawn(async { CommitOutcome::Committed }));
        assert_eq!(commits.due(), None);
    }

    #[test]
    fn records_dropped_between_poll_and_append_still_have_their_offsets_committed() {
        let mut commits = SourceCommits::new();
        let (a, b) = (json!({ "file": "a" }), json!({ "file": "b" }));
        let (mut records, offsets) = split_poll(vec![
            record(a.clone(), 1),
            record(b.clone(), 7),
            record(a.clone(), 2),
        ]);
        // A filter between poll and append drops the last record of each partition.
        records.retain(|r| r.source_offset != json!({ "position": 2 }) && r.source_partition != b);
        let left: usize = by_topic(&records)
            .iter()
            .map(|(_, batch)| batch.len())
            .sum();
        assert_eq!(left, 1, "one record left to append");
        commits.take(offsets);
        assert_eq!(
            commits.pending,
            BTreeMap::from([
                (a.to_string(), json!({ "position": 2 }).to_string()),
                (b.to_string(), json!({ "position": 7 }).to_string()),
            ]),
            "the poll's last offsets, dropped records' included"
        );
        assert_eq!(
            commits.pending_records, 3,
            "every polled record is committed"
        );
    }

    #[test]
    fn a_poll_whose_records_are_all_dropped_still_commits_its_offsets() {
        let mut commits = SourceCommits::new();
        let a = json!({ "file": "a" });
        let (mut records, offsets) = split_poll(vec![record(a.clone(), 4)]);
        records.clear();
        assert!(by_topic(&records).is_empty(), "nothing to append");
        commits.take(offsets);
        assert_eq!(
            commits.pending.get(&a.to_string()),
            Some(&json!({ "position": 4 }).to_string())
        );
        assert!(commits.due().is_some(), "a commit follows");
    }

    #[test]
    fn splitting_a_poll_keeps_its_records_as_they_were() {
        let polled = vec![
            record(json!({ "file": "a" }), 1),
            record(json!({ "file": "b" }), 2),
        ];
        let (records, offsets) = split_poll(polled.clone());
        assert_eq!(records, polled);
        assert_eq!(offsets.records, 2);
        assert_eq!(offsets.offsets.len(), 2);
    }

    #[test]
    fn an_empty_poll_has_no_offsets() {
        assert_eq!(split_poll(Vec::new()), (Vec::new(), PollOffsets::default()));
    }
}
