//! Data plane through Kafka with real processes: a control plane and executors started with
//! `--record-log kafka://...` on a test-owned tansu broker (`wharf_harness::kafka`), checked
//! with a plain Kafka client (rdkafka) as any Kafka application would.
//!
//! - file-source -> Kafka -> file-sink on two executors: every line arrives (at least
//!   once) across kill -9 of the executor hosting the tasks; the sink's consumer group
//!   (`connect-<name>`) shows committed offsets to a plain client, and a plain consumer
//!   reads what Wharf wrote.
//! - A topic a plain producer wrote reaches a Wharf sink; deleting the sink deletes its
//!   group (a re-created sink starts from `auto.offset.reset`, earliest), `keep_resources`
//!   keeps it.
//! - Four sink tasks on eight partitions, a fifth added, an executor killed: every
//!   partition is read by one task instance at a time and no record is skipped.
//!
//! tansu 0.6.0 stands in for Apache Kafka (docs/kafka.md lists its deviations); nothing here
//! relies on one. Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, TestCluster};
use wharf_harness::kafka::TestKafka;
use wharf_harness::lines::{append_lines, first_arrivals, sink_numbers};
use wharf_harness::rdkafka::message::Message;
use wharf_harness::wait_until;

/// Lines written before the pipeline starts.
const FIRST_LINES: u64 = 2_000;
/// Lines appended before the kill, so that records are flowing when it happens.
const FLOWING_LINES: u64 = 20_000;

/// A control plane and `n` executors on a test-owned broker's Kafka log.
async fn kafka_cluster(n: usize) -> (TestCluster, TestKafka) {
    let mut c = TestCluster::start_with(0, Vec::new()).await;
    let kafka = TestKafka::start(&c.dir.path().join("kafka"));
    for i in 0..n {
        c.add_executor_with(i, vec!["--record-log".into(), kafka.record_log()])
            .await;
    }
    c.wait_alive(n).await;
    (c, kafka)
}

/// Index (into `c.executors`) of executor `exec-N`.
fn executor_index(host: &str) -> usize {
    host.strip_prefix("exec-")
        .and_then(|n| n.parse::<usize>().ok())
        .map(|n| n - 1)
        .unwrap_or_else(|| panic!("unexpected host {host:?}"))
}

/// Index of the executor hosting task 0 of `name`.
async fn task_host(c: &TestCluster, name: &str) -> usize {
    let s = c
        .wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    executor_index(&TestCluster::hosts(&s).pop().expect("one task"))
}

/// Waits until the sink's file holds every line below `total` at least once.
async fn all_lines_arrive(output: &Path, total: u64, what: &str) {
    wait_until(what, CONVERGE, || async {
        (first_arrivals(&sink_numbers(output)).len() as u64 >= total).then_some(())
    })
    .await;
    let got: BTreeSet<u64> = sink_numbers(output).into_iter().collect();
    assert_eq!(
        got,
        (0..total).collect::<BTreeSet<_>>(),
        "{what}: at least once, nothing skipped"
    );
}

/// Waits until group `group`'s committed offsets on `topic` equal what a plain consumer
/// reads of each partition (the sink acknowledged everything), and returns them.
async fn committed_everything(
    kafka: &TestKafka,
    group: &str,
    topic: &str,
    partitions: i32,
) -> BTreeMap<i32, i64> {
    let read = kafka.read_all(topic, partitions, 1, CONVERGE);
    let mut per_partition: BTreeMap<i32, i64> = BTreeMap::new();
    for m in &read {
        let next = per_partition.entry(m.partition()).or_insert(0);
        *next = (*next).max(m.offset() + 1);
    }
    wait_until(
        &format!("group {group} committed every record of {topic}"),
        CONVERGE,
        || async {
            let committed = kafka.committed(group, topic, partitions);
            (committed == per_partition).then_some(committed)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_cross_two_executors_through_kafka_at_least_once_across_kill_9() {
    let (mut c, kafka) = kafka_cluster(2).await;
    kafka.create_topic("lines", 4).await;
    let input = c.dir.path().join("in.jsonl");
    let output = c.dir.path().join("out.jsonl");
    append_lines(&input, 0..FIRST_LINES);
    let r = c.call(
        "CreateConnector",
        json!({ "name": "kafka-sink", "config": {
            "connector.class": "file-sink",
            "file": output.display().to_string(),
            "topics": "lines",
        }}),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let r = c.call(
        "CreateConnector",
        json!({ "name": "kafka-source", "config": {
            "connector.class": "file-source",
            "file": input.display().to_string(),
            "topic": "lines",
        }}),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    all_lines_arrive(&output, FIRST_LINES, "every first line in the sink's file").await;

    // A plain consumer reads what Wharf wrote: the lines, unkeyed (the file source sets no
    // key, so the partitioner spread them), no headers.
    let read = kafka.read_all("lines", 4, FIRST_LINES as usize, CONVERGE);
    let numbers: BTreeSet<u64> = read
        .iter()
        .map(|m| {
            assert!(m.key().is_none(), "no key");
            assert!(m.headers().is_none(), "no headers");
            let v: Value = serde_json::from_slice(m.payload().expect("value")).expect("JSON");
            v["n"].as_u64().expect("n")
        })
        .collect();
    assert_eq!(numbers, (0..FIRST_LINES).collect::<BTreeSet<_>>());
    let partitions: BTreeSet<i32> = read.iter().map(Message::partition).collect();
    assert!(
        partitions.len() > 1,
        "spread over partitions: {partitions:?}"
    );
    // The sink's position is its Connect-named group's committed offsets.
    let committed = committed_everything(&kafka, "connect-kafka-sink", "lines", 4).await;
    assert_eq!(
        committed.values().sum::<i64>(),
        read.len() as i64,
        "every record read was committed"
    );

    // kill -9 of the executor hosting the sink task while records flow.
    append_lines(&input, FIRST_LINES..FIRST_LINES + FLOWING_LINES);
    wait_until("new lines flowing into the sink", CONVERGE, || async {
        (first_arrivals(&sink_numbers(&output)).len() as u64 > FIRST_LINES).then_some(())
    })
    .await;
    let host = task_host(&c, "kafka-sink").await;
    c.executors[host].kill9();
    all_lines_arrive(
        &output,
        FIRST_LINES + FLOWING_LINES,
        "after kill -9 of the sink's executor",
    )
    .await;
    c.executors[host].restart();
    c.executors[host].listen_addr().await;
    committed_everything(&kafka, "connect-kafka-sink", "lines", 4).await;
}

/// A file-sink `name` reading `topics`, writing `output`.
fn file_sink(name: &str, topics: &str, output: &Path) -> Value {
    json!({ "name": name, "config": {
        "connector.class": "file-sink",
        "file": output.display().to_string(),
        "topics": topics,
    }})
}

/// Waits until connector `name` is gone (its deletion finished).
async fn deleted(c: &TestCluster, name: &str) {
    wait_until(&format!("{name} deleted"), CONVERGE, || async {
        (c.status(name).is_none()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_producers_topic_reaches_a_wharf_sink_and_deletion_removes_its_group() {
    let (c, kafka) = kafka_cluster(1).await;
    kafka.create_topic("plain", 3).await;
    let records: Vec<(Option<String>, String, Option<i32>)> = (0..30)
        .map(|n| (Some(format!("k{n}")), json!({ "n": n }).to_string(), None))
        .collect();
    kafka.produce("plain", &records).await;
    let group = "connect-plain-sink";

    let first = c.dir.path().join("first.jsonl");
    let r = c.call("CreateConnector", file_sink("plain-sink", "plain", &first));
    assert_eq!(r.code, 0, "{}", r.err);
    all_lines_arrive(&first, 30, "the plain producer's records").await;
    let committed = committed_everything(&kafka, group, "plain", 3).await;
    assert_eq!(committed.values().sum::<i64>(), 30);
    assert!(
        kafka.groups().contains(&group.to_string()),
        "ListGroups shows it"
    );

    // Deletion (cleanup): the group and its offsets are gone.
    let r = c.call("DeleteConnector", json!({ "name": "plain-sink" }));
    assert_eq!(r.code, 0, "{}", r.err);
    deleted(&c, "plain-sink").await;
    assert!(
        kafka.committed(group, "plain", 3).is_empty(),
        "OffsetFetch finds no committed offset"
    );
    assert!(
        !kafka.groups().contains(&group.to_string()),
        "ListGroups no longer lists {group}"
    );

    // Re-created under the same name: starts from auto.offset.reset (earliest).
    let second = c.dir.path().join("second.jsonl");
    let r = c.call("CreateConnector", file_sink("plain-sink", "plain", &second));
    assert_eq!(r.code, 0, "{}", r.err);
    all_lines_arrive(&second, 30, "every record again after the re-creation").await;
    committed_everything(&kafka, group, "plain", 3).await;

    // keep_resources keeps the group: a re-created sink resumes where it stopped.
    let r = c.call(
        "DeleteConnector",
        json!({ "name": "plain-sink", "keep_resources": true }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    deleted(&c, "plain-sink").await;
    assert_eq!(
        kafka.committed(group, "plain", 3).values().sum::<i64>(),
        30,
        "keep_resources kept the committed offsets"
    );
    // The ledger's record of it: an orphan kept by keep_resources.
    let r = c.call("ListOrphanedResources", json!({}));
    assert_eq!(r.code, 0, "{}", r.err);
    let kept = r.body["orphans"].as_array().cloned().unwrap_or_default();
    assert!(
        kept.iter().any(|o| o["connector"] == "plain-sink"
            && o["entry"]["resource"]["kind"] == "consumer_group"
            && o["entry"]["resource"]["name"] == group
            && o["reason"] == "keep_resources"),
        "the kept group is listed as an orphan: {kept:?}"
    );
    let third = c.dir.path().join("third.jsonl");
    let r = c.call("CreateConnector", file_sink("plain-sink", "plain", &third));
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state("plain-sink", "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    kafka
        .produce(
            "plain",
            &[(Some("k30".into()), json!({ "n": 30 }).to_string(), None)],
        )
        .await;
    wait_until("the new record in the resumed sink", CONVERGE, || async {
        (!sink_numbers(&third).is_empty()).then_some(())
    })
    .await;
    assert_eq!(
        sink_numbers(&third),
        [30],
        "the resumed sink read only what came after its committed offsets"
    );
}

/// One record a `test-sink` task was given (its `test.records.path` line).
#[derive(Debug)]
struct Put {
    instance: String,
    partition: u32,
    offset: u64,
}

fn puts(path: &Path) -> Vec<Put> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("record line");
            Put {
                instance: v["instance"].as_str().expect("instance").to_string(),
                partition: u32::try_from(v["partition"].as_u64().expect("partition"))
                    .expect("partition"),
                offset: v["offset"].as_u64().expect("offset"),
            }
        })
        .collect()
}

/// Records per partition each round produces.
const PER_PARTITION: u32 = 50;
/// Partitions of the wide topic.
const WIDE_PARTITIONS: i32 = 8;

/// Produces round `round`'s records: `PER_PARTITION` to each partition.
async fn produce_round(kafka: &TestKafka, round: u32) {
    let records: Vec<(Option<String>, String, Option<i32>)> = (0..WIDE_PARTITIONS)
        .flat_map(|p| {
            (0..PER_PARTITION).map(move |i| (None, format!("r{round}-p{p}-{i}"), Some(p)))
        })
        .collect();
    kafka.produce("wide", &records).await;
}

/// Waits until every partition's offsets below `rounds * PER_PARTITION` were given to a
/// task.
async fn every_offset_put(records: &Path, rounds: u32, what: &str) {
    let want = u64::from(rounds * PER_PARTITION);
    wait_until(what, CONVERGE, || async {
        let mut seen: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
        for put in puts(records) {
            seen.entry(put.partition).or_default().insert(put.offset);
        }
        let complete = (0..WIDE_PARTITIONS as u32).all(|p| {
            seen.get(&p)
                .is_some_and(|s| (0..want).all(|o| s.contains(&o)))
        });
        complete.then_some(())
    })
    .await;
}

/// Each partition's records were given to one task instance at a time: in the order of the
/// records file (appended by every instance, one write per put), once another instance
/// took a partition over, no earlier instance was given a record of it again.
fn one_instance_at_a_time(records: &Path) {
    let mut owners: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for put in puts(records) {
        let seq = owners.entry(put.partition).or_default();
        if seq.last() != Some(&put.instance) {
            assert!(
                !seq.contains(&put.instance),
                "partition {} went back to instance {} after {:?}",
                put.partition,
                put.instance,
                seq
            );
            seq.push(put.instance);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_sink_tasks_on_eight_partitions_each_read_by_one_task_at_a_time() {
    let (mut c, kafka) = kafka_cluster(2).await;
    kafka.create_topic("wide", WIDE_PARTITIONS).await;
    produce_round(&kafka, 0).await;
    let records = c.dir.path().join("records.jsonl");
    let config = |tasks: u32| {
        json!({
            "connector.class": "test-sink",
            "tasks.max": tasks.to_string(),
            "topics": "wide",
            "lifecycle.path": c.lifecycle_path("wide-sink").display().to_string(),
            "test.records.path": records.display().to_string(),
        })
    };
    let r = c.call(
        "CreateConnector",
        json!({ "name": "wide-sink", "config": config(4) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let s = c
        .wait_state("wide-sink", "STATE_RUNNING", "STATE_RUNNING", 4)
        .await;
    every_offset_put(&records, 1, "four tasks read every partition").await;
    let tasks_of_partition = |from: usize| {
        let mut by: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
        for put in puts(&records).into_iter().skip(from) {
            by.entry(put.partition).or_default().insert(put.instance);
        }
        by
    };
    assert!(
        tasks_of_partition(0).values().all(|i| i.len() == 1),
        "one instance per partition: {:?}",
        tasks_of_partition(0)
    );
    let instances: BTreeSet<String> = puts(&records).into_iter().map(|p| p.instance).collect();
    assert_eq!(instances.len(), 4, "every task got partitions");

    // A fifth task: every task restarts with its new share.
    let r = c.call(
        "PutConnectorConfig",
        json!({ "name": "wide-sink", "config": config(5) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let s = c
        .wait_state_newer("wide-sink", "STATE_RUNNING", "STATE_RUNNING", 5, &s)
        .await;
    produce_round(&kafka, 1).await;
    every_offset_put(&records, 2, "five tasks read every partition").await;

    // kill -9 of the executor hosting most tasks: they start on the other one.
    let hosts = TestCluster::hosts(&s);
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for h in &hosts {
        *count.entry(h.clone()).or_default() += 1;
    }
    let (busiest, _) = count.iter().max_by_key(|(_, n)| **n).expect("a host");
    let killed = executor_index(busiest);
    c.executors[killed].kill9();
    produce_round(&kafka, 2).await;
    wait_until("every task on the surviving executor", CONVERGE, || async {
        let s = c.status("wide-sink")?;
        let hosts = TestCluster::hosts(&s);
        let running = s["tasks"]
            .as_array()?
            .iter()
            .filter(|t| t["status"]["state"] == "STATE_RUNNING")
            .count();
        (running == 5 && hosts.len() == 5 && !hosts.contains(busiest)).then_some(())
    })
    .await;
    every_offset_put(&records, 3, "after the kill, every partition read").await;
    one_instance_at_a_time(&records);
    c.executors[killed].restart();
    c.executors[killed].listen_addr().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_creates_its_topic_with_its_topic_creation_settings() {
    let (c, kafka) = kafka_cluster(1).await;
    let input = c.dir.path().join("made.jsonl");
    append_lines(&input, 0..10);
    let source = |name: &str, partitions: &str| {
        json!({ "name": name, "config": {
            "connector.class": "file-source",
            "file": input.display().to_string(),
            "topic": "made",
            "topic.creation.default.partitions": partitions,
            "topic.creation.default.replication.factor": "-1",
        }})
    };
    // A wrong setting is refused naming the key; nothing is created.
    let r = c.call("CreateConnector", source("bad-source", "0"));
    assert_eq!(r.code, 3, "INVALID_ARGUMENT: {}", r.err);
    assert!(
        r.err.contains("topic.creation.default.partitions"),
        "{}",
        r.err
    );
    assert!(c.status("bad-source").is_none());

    let r = c.call("CreateConnector", source("made-source", "4"));
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until("the topic created with 4 partitions", CONVERGE, || async {
        (kafka.partitions("made") == 4).then_some(())
    })
    .await;
    let read = kafka.read_all("made", 4, 10, CONVERGE);
    assert_eq!(read.len(), 10, "every line in the created topic");
}
