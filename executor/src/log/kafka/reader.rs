//! Reading a Kafka record log: a named consumer of one log handle, in one partition share
//! (or none), is one Kafka consumer (consumer group = the name) shared by that handle's
//! readers of it.
//!
//! Partitions are assigned by the log, not by the group's rebalance protocol: the
//! consumer takes the partitions of its topics that its share owns (every one without a
//! share; `incremental_assign`), looks for new ones every [`PARTITION_RECHECK_INTERVAL`],
//! and keeps its position in the group's committed offsets. A position comes from the group's committed
//! offset; without one, [`StartPosition::Earliest`] starts at the partition's first record
//! and [`StartPosition::Latest`] at its end, which is committed at once so that a restart
//! keeps that start. A topic absent when the consumer opened is looked for again every
//! [`TOPIC_RECHECK_INTERVAL`] while a reader waits; its partitions, created after the
//! consumer, are read from their first record.
//!
//! Readers of one handle share the records one by one: what the consumer received waits in
//! the group's buffer until a reader takes it, and the records a dropped reader held come
//! again to the next reader first. An acknowledgement commits, per partition, the offset
//! below which every received record was acknowledged (the contiguous acknowledged prefix);
//! records acknowledged above an unacknowledged one come again after a restart (at least
//! once).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::super::{
    AckToken, Delivered, LogConsumer, LogError, LogLimits, PartitionShare, StartPosition,
};
use super::{KafkaConfig, layout, unavailable};

/// How often a reader looks again for subscribed topics that did not exist yet.
pub const TOPIC_RECHECK_INTERVAL: Duration = Duration::from_millis(500);
/// How often a reader looks for partitions added to its topics (Kafka's consumer finds
/// them on its metadata refresh, `metadata.max.age.ms`, 5 minutes by default).
pub const PARTITION_RECHECK_INTERVAL: Duration = Duration::from_secs(2);

/// (topic, partition).
type PartitionKey = (String, i32);
/// (topic, partition, offset) of a held record.
type RecordKey = (String, i32, i64);

/// What one assignment round did: the partitions it assigned, the topics still absent.
struct Assigned {
    partitions: Vec<(PartitionKey, PartitionState)>,
    missing: Vec<String>,
}

/// One named consumer of one log handle: a Kafka consumer in the group of that name,
/// reading the partitions of its share (every partition without one).
pub(super) struct Group {
    name: String,
    consumer: StreamConsumer,
    /// The topics it reads.
    topics: Vec<String>,
    /// The partitions it reads; `None`: every partition of its topics.
    share: Option<PartitionShare>,
    /// Where a partition without a committed offset starts.
    start: StartPosition,
    /// Set when the log deleted the group while readers still used it.
    deleted: AtomicBool,
    limits: LogLimits,
    request_timeout: Duration,
    state: Mutex<GroupState>,
    /// Wakes waiting readers when records are put back or buffered by another reader.
    notify: Notify,
    /// Serializes offset commits, so that committed positions only grow.
    commit_lock: tokio::sync::Mutex<()>,
    /// Serializes partition assignment.
    assign_lock: Mutex<()>,
}

#[derive(Default)]
struct GroupState {
    /// Topics without partitions yet.
    missing: Vec<String>,
    /// When the topics' partitions are looked for next.
    next_check: Option<Instant>,
    partitions: HashMap<PartitionKey, PartitionState>,
    /// Records a dropped reader held, delivered before the buffer.
    returned: VecDeque<Delivered>,
    /// Records received from Kafka that no reader took yet.
    buffer: VecDeque<Delivered>,
}

/// What a group knows of one assigned partition.
#[derive(Debug, Default, PartialEq)]
struct PartitionState {
    /// Received and not yet acknowledged offsets.
    outstanding: BTreeSet<i64>,
    /// The offset after the last received record.
    next: Option<i64>,
    /// The group's committed offset (-1: none known).
    committed: i64,
}

impl PartitionState {
    /// The offset to commit now, if it is beyond the committed one: the lowest
    /// unacknowledged offset, or the next one when everything received was acknowledged.
    fn commit_position(&self) -> Option<i64> {
        let position = self.outstanding.first().copied().or(self.next)?;
        (position > self.committed).then_some(position)
    }
}

/// The partitions of `topic` (of `ids`) that a reader with `share` takes and does not
/// hold yet.
fn partitions_to_take(
    topic: &str,
    ids: impl IntoIterator<Item = i32>,
    share: Option<PartitionShare>,
    held: impl Fn(&str, i32) -> bool,
) -> Vec<i32> {
    ids.into_iter()
        .filter(|&p| {
            let ours = match (share, u32::try_from(p)) {
                (None, _) => true,
                (Some(share), Ok(p)) => share.owns(topic, p),
                (Some(_), Err(_)) => false,
            };
            ours && !held(topic, p)
        })
        .collect()
}

/// When the partitions are looked for next: soon while a topic is absent, else at the
/// slower pace that finds partitions added to a topic.
fn next_check_after(missing: &[String]) -> Duration {
    if missing.is_empty() {
        PARTITION_RECHECK_INTERVAL
    } else {
        TOPIC_RECHECK_INTERVAL
    }
}

impl Group {
    /// Creates the group's consumer and assigns the partitions of `topics` (in `share`)
    /// that exist.
    pub(super) async fn open(
        config: &KafkaConfig,
        name: &str,
        topics: &[String],
        start: StartPosition,
        share: Option<PartitionShare>,
    ) -> Result<Arc<Self>, LogError> {
        let consumer: StreamConsumer = config
            .client_config(super::settings::Role::Consumer)?
            .set("group.id", name)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("allow.auto.create.topics", "false")
            .create()
            .map_err(|e| unavailable("create Kafka consumer", e))?;
        let group = Arc::new(Self {
            name: name.to_string(),
            consumer,
            topics: topics.to_vec(),
            share,
            start,
            deleted: AtomicBool::new(false),
            limits: config.limits,
            request_timeout: Duration::from_millis(config.request_timeout_ms),
            state: Mutex::new(GroupState {
                missing: topics.to_vec(),
                ..GroupState::default()
            }),
            notify: Notify::new(),
            commit_lock: tokio::sync::Mutex::new(()),
            assign_lock: Mutex::new(()),
        });
        let assigning = group.clone();
        tokio::task::spawn_blocking(move || assigning.assign_new())
            .await
            .map_err(|e| unavailable("assign partitions", e))??;
        Ok(group)
    }

    /// Marks the group deleted: its readers' next fetch or ack fails with
    /// [`LogError::ConsumerDeleted`] instead of committing offsets to a group made again.
    pub(super) fn mark_deleted(&self) {
        self.deleted.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    fn check_not_deleted(&self) -> Result<(), LogError> {
        if self.deleted.load(Ordering::SeqCst) {
            Err(LogError::ConsumerDeleted(self.name.clone()))
        } else {
            Ok(())
        }
    }

    fn state(&self) -> MutexGuard<'_, GroupState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Assigns the partitions of its topics (in its share) that exist now and it does not
    /// read yet, at the group's committed offsets or its start position (blocking:
    /// metadata, offsets and commit requests). A partition that appeared after the first
    /// assignment (a topic created later, a partition added) starts at its first record.
    fn assign_new(&self) -> Result<(), LogError> {
        let _assigning = self
            .assign_lock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let first = self.state().partitions.is_empty() && self.state().next_check.is_none();
        let start = if first {
            self.start
        } else {
            StartPosition::Earliest
        };
        let result = self.assign(start);
        let mut state = self.state();
        match result {
            Ok(assigned) => {
                state.partitions.extend(assigned.partitions);
                state.next_check = Some(Instant::now() + next_check_after(&assigned.missing));
                state.missing = assigned.missing;
                Ok(())
            }
            Err(err) => {
                state.next_check = Some(Instant::now() + TOPIC_RECHECK_INTERVAL);
                Err(err)
            }
        }
    }

    fn assign(&self, start: StartPosition) -> Result<Assigned, LogError> {
        let timeout = self.request_timeout;
        let mut wanted = TopicPartitionList::new();
        let mut missing = Vec::new();
        for topic in &self.topics {
            let metadata = self
                .consumer
                .fetch_metadata(Some(topic), timeout)
                .map_err(|e| unavailable(&format!("metadata of topic {topic:?}"), e))?;
            match metadata.topics().first() {
                Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
                    let state = self.state();
                    let take = partitions_to_take(
                        topic,
                        t.partitions().iter().map(|p| p.id()),
                        self.share,
                        |topic, p| state.partitions.contains_key(&(topic.to_string(), p)),
                    );
                    for p in take {
                        wanted.add_partition(topic, p);
                    }
                }
                _ => missing.push(topic.clone()),
            }
        }
        if wanted.count() == 0 {
            return Ok(Assigned {
                partitions: Vec::new(),
                missing,
            });
        }
        let committed = self
            .consumer
            .committed_offsets(wanted, timeout)
            .map_err(|e| unavailable("committed offsets", e))?;
        let mut assignment = TopicPartitionList::new();
        let mut to_commit = TopicPartitionList::new();
        let mut partitions = Vec::new();
        for elem in committed.elements() {
            let (topic, partition) = (elem.topic(), elem.partition());
            let (offset, known) = match (elem.offset(), start) {
                (Offset::Offset(n), _) => (Offset::Offset(n), n),
                (_, StartPosition::Earliest) => (Offset::Beginning, -1),
                (_, StartPosition::Latest) => {
                    let (_, high) = self
                        .consumer
                        .fetch_watermarks(topic, partition, timeout)
                        .map_err(|e| unavailable("end offset", e))?;
                    add(&mut to_commit, topic, partition, Offset::Offset(high))?;
                    (Offset::Offset(high), high)
                }
            };
            add(&mut assignment, topic, partition, offset)?;
            let state = PartitionState {
                committed: known,
                ..PartitionState::default()
            };
            partitions.push(((topic.to_string(), partition), state));
        }
        if to_commit.count() > 0 {
            self.consumer
                .commit(&to_commit, CommitMode::Sync)
                .map_err(|e| unavailable("commit the start offsets", e))?;
        }
        self.consumer
            .incremental_assign(&assignment)
            .map_err(|e| unavailable("assign partitions", e))?;
        Ok(Assigned {
            partitions,
            missing,
        })
    }

    /// Moves what the consumer already received into the buffer, without waiting, until
    /// the buffer holds `want` records.
    fn drain(&self, want: usize) -> Result<(), LogError> {
        while self.state().buffer.len() < want {
            match self.consumer.recv().now_or_never() {
                Some(Ok(message)) => self.push(message.detach()),
                Some(Err(e)) => return Err(unavailable("receive from Kafka", e)),
                None => break,
            }
        }
        Ok(())
    }

    fn push(&self, message: OwnedMessage) {
        let (partition, offset) = (message.partition(), message.offset());
        let topic = message.topic().to_string();
        let record = layout::from_kafka(&message).into_sink_record_at(
            &topic,
            u32::try_from(partition).unwrap_or_default(),
            as_position(offset),
        );
        let ack = AckToken {
            topic: topic.clone(),
            position: as_position(offset),
            handle: partition.to_string(),
        };
        let mut state = self.state();
        let p = state.partitions.entry((topic, partition)).or_default();
        p.outstanding.insert(offset);
        p.next = Some(offset + 1);
        state.buffer.push_back(Delivered { record, ack });
    }

    /// Up to `max` records (and [`LogLimits::max_fetch_bytes`], at least one): put-back
    /// records first, then received ones.
    fn take(&self, max: usize) -> Vec<Delivered> {
        let mut state = self.state();
        let mut out = Vec::new();
        let mut bytes = 0;
        while out.len() < max {
            let state = &mut *state;
            let queue = if state.returned.is_empty() {
                &mut state.buffer
            } else {
                &mut state.returned
            };
            let Some(next) = queue.front() else { break };
            let size = layout::record_bytes(&next.record);
            if !out.is_empty() && bytes + size > self.limits.max_fetch_bytes {
                break;
            }
            bytes += size;
            out.extend(queue.pop_front());
        }
        out
    }

    /// When its topics' partitions are looked for next.
    fn recheck_due(&self) -> Instant {
        self.state().next_check.unwrap_or_else(Instant::now)
    }

    /// Looks for new partitions when that is due (see [`Group::assign_new`]).
    async fn recheck_if_due(self: &Arc<Self>) -> Result<(), LogError> {
        if self.recheck_due() > Instant::now() {
            return Ok(());
        }
        let group = self.clone();
        tokio::task::spawn_blocking(move || group.assign_new())
            .await
            .map_err(|e| unavailable("assign partitions", e))?
    }

    /// Takes `acked` off the outstanding records and commits the partitions whose
    /// acknowledged prefix grew.
    async fn commit(self: &Arc<Self>, acked: &[RecordKey]) -> Result<(), LogError> {
        {
            let mut state = self.state();
            for (topic, partition, offset) in acked {
                if let Some(p) = state.partitions.get_mut(&(topic.clone(), *partition)) {
                    p.outstanding.remove(offset);
                }
            }
        }
        let _committing = self.commit_lock.lock().await;
        let positions: Vec<(PartitionKey, i64)> = self
            .state()
            .partitions
            .iter()
            .filter_map(|(key, p)| p.commit_position().map(|pos| (key.clone(), pos)))
            .collect();
        if positions.is_empty() {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), position) in &positions {
            add(&mut tpl, topic, *partition, Offset::Offset(*position))?;
        }
        let group = self.clone();
        tokio::task::spawn_blocking(move || group.consumer.commit(&tpl, CommitMode::Sync))
            .await
            .map_err(|e| unavailable("commit offsets", e))?
            .map_err(|e| unavailable("commit offsets", e))?;
        let mut state = self.state();
        for (key, position) in positions {
            if let Some(p) = state.partitions.get_mut(&key) {
                p.committed = p.committed.max(position);
            }
        }
        Ok(())
    }
}

fn add(
    tpl: &mut TopicPartitionList,
    topic: &str,
    partition: i32,
    offset: Offset,
) -> Result<(), LogError> {
    tpl.add_partition_offset(topic, partition, offset)
        .map_err(|e| unavailable("partition list", e))
}

/// A Kafka offset as a record position (offsets of delivered records are never negative).
fn as_position(offset: i64) -> u64 {
    u64::try_from(offset).unwrap_or_default()
}

fn record_key(token: &AckToken) -> Option<RecordKey> {
    let partition = token.handle.parse().ok()?;
    let offset = i64::try_from(token.position).ok()?;
    Some((token.topic.clone(), partition, offset))
}

/// One reader of a named consumer of a Kafka log.
pub struct KafkaReader {
    group: Arc<Group>,
    /// Delivered, unacknowledged records, put back into the group when the reader drops.
    held: BTreeMap<RecordKey, Delivered>,
}

impl KafkaReader {
    pub(super) fn new(group: Arc<Group>) -> Self {
        Self {
            group,
            held: BTreeMap::new(),
        }
    }
}

#[async_trait]
impl LogConsumer for KafkaReader {
    async fn fetch(&mut self, max: usize, wait: Duration) -> Result<Vec<Delivered>, LogError> {
        let deadline = Instant::now() + wait;
        let limits = self.group.limits;
        let room = limits.max_in_flight_records.saturating_sub(self.held.len());
        let max = max.min(limits.max_fetch_records).min(room);
        if max == 0 {
            tokio::time::sleep_until(deadline).await;
            return Ok(Vec::new());
        }
        loop {
            self.group.check_not_deleted()?;
            self.group.recheck_if_due().await?;
            // Nothing awaits between receiving and returning: a fetch dropped midway
            // leaves what it received in the group's buffer.
            self.group.drain(max)?;
            let batch = self.group.take(max);
            if !batch.is_empty() {
                for d in &batch {
                    if let Some(key) = record_key(&d.ack) {
                        self.held.insert(key, d.clone());
                    }
                }
                return Ok(batch);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let until = self.group.recheck_due().min(deadline);
            let group = &self.group;
            tokio::select! {
                received = group.consumer.recv() => match received {
                    Ok(message) => {
                        let message = message.detach();
                        group.push(message);
                        group.notify.notify_waiters();
                    }
                    Err(e) => return Err(unavailable("receive from Kafka", e)),
                },
                () = group.notify.notified() => {}
                () = tokio::time::sleep_until(until) => {}
            }
        }
    }

    async fn ack(&mut self, tokens: &[AckToken]) -> Result<(), LogError> {
        self.group.check_not_deleted()?;
        let acked: Vec<RecordKey> = tokens
            .iter()
            .filter_map(record_key)
            .filter(|key| self.held.remove(key).is_some())
            .collect();
        if acked.is_empty() {
            return Ok(());
        }
        self.group.commit(&acked).await
    }
}

impl Drop for KafkaReader {
    fn drop(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.held);
        {
            let mut state = self.group.state();
            let mut returned: BTreeMap<RecordKey, Delivered> = state
                .returned
                .drain(..)
                .filter_map(|d| record_key(&d.ack).map(|k| (k, d)))
                .collect();
            returned.extend(held);
            state.returned = returned.into_values().collect();
        }
        self.group.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(outstanding: &[i64], next: Option<i64>, committed: i64) -> PartitionState {
        PartitionState {
            outstanding: outstanding.iter().copied().collect(),
            next,
            committed,
        }
    }

    #[test]
    fn the_commit_stops_at_the_lowest_unacknowledged_record() {
        assert_eq!(
            partition(&[3, 4, 6], Some(10), 0).commit_position(),
            Some(3)
        );
    }

    #[test]
    fn everything_acknowledged_commits_past_the_last_received_record() {
        assert_eq!(partition(&[], Some(10), 3).commit_position(), Some(10));
    }

    #[test]
    fn nothing_is_committed_that_is_not_beyond_the_committed_offset() {
        assert_eq!(partition(&[3], Some(10), 3).commit_position(), None);
        assert_eq!(partition(&[], Some(10), 10).commit_position(), None);
    }

    #[test]
    fn nothing_is_committed_before_a_record_was_received() {
        assert_eq!(partition(&[], None, -1).commit_position(), None);
    }

    #[test]
    fn a_reader_without_a_share_takes_every_partition_it_does_not_hold() {
        let take = partitions_to_take("t", 0..4, None, |_, p| p == 1);
        assert_eq!(take, [0, 2, 3]);
    }

    #[test]
    fn a_reader_in_a_share_takes_only_the_partitions_the_share_owns() {
        let share = PartitionShare::new(1, 2).expect("share");
        let take = partitions_to_take("t", 0..8, Some(share), |_, _| false);
        assert!(!take.is_empty());
        assert!(
            take.iter()
                .all(|p| share.owns("t", u32::try_from(*p).expect("p")))
        );
        let other = PartitionShare::new(0, 2).expect("share");
        let rest = partitions_to_take("t", 0..8, Some(other), |_, _| false);
        assert_eq!(take.len() + rest.len(), 8);
    }

    #[test]
    fn a_partition_added_later_is_taken_once_by_its_owner() {
        let share = PartitionShare::new(0, 1).expect("share");
        let held = [0, 1];
        let take = partitions_to_take("t", 0..3, Some(share), |_, p| held.contains(&p));
        assert_eq!(take, [2]);
    }

    #[test]
    fn a_negative_partition_id_is_never_taken_in_a_share() {
        let share = PartitionShare::new(0, 1).expect("share");
        assert!(partitions_to_take("t", [-1], Some(share), |_, _| false).is_empty());
    }

    #[test]
    fn an_absent_topic_is_looked_for_sooner_than_new_partitions() {
        assert_eq!(next_check_after(&["t".into()]), TOPIC_RECHECK_INTERVAL);
        assert_eq!(next_check_after(&[]), PARTITION_RECHECK_INTERVAL);
    }

    #[test]
    fn an_ack_token_names_its_partition_in_the_handle() {
        let token = AckToken {
            topic: "t".into(),
            position: 7,
            handle: "2".into(),
        };
        assert_eq!(record_key(&token), Some(("t".into(), 2, 7)));
        let foreign = AckToken {
            handle: "$JS.ACK.x".into(),
            ..token
        };
        assert_eq!(record_key(&foreign), None);
    }
}
