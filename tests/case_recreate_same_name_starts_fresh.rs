//! Operator scenario 03: a connector created
//! again under a deleted connector's name starts from scratch: no offsets before its first
//! commit, it reads its file from the first line again (the topic then holds 2,000
//! records), and no task config, status entry or generation of the old one shows up.
//!
//! The topic is observed through a `file-sink` reading it from the start (with the embedded
//! log the topic lives inside the executor process). The new connector is created STOPPED
//! (KIP-980) so that "no offsets before the first commit" is checked before any task can
//! commit, then resumed. Also: a deleted sink's log consumer is forgotten, so a sink created
//! again under its name reads the topic from the start.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use wharf_harness::lines::sink_numbers;

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, NOT_FOUND, TestCluster};
use wharf_harness::wait_until;

/// Lines of the source file.
const LINES: u64 = 1_000;

fn write_lines(path: &Path) {
    let mut f = std::fs::File::create(path).expect("create input");
    for n in 0..LINES {
        writeln!(f, "{}", json!({ "n": n })).expect("write input");
    }
    f.sync_all().expect("sync input");
}

fn source_config(input: &Path) -> Value {
    json!({
        "connector.class": "file-source",
        "file": input.display().to_string(),
        "topic": "t",
    })
}

fn sink_config(output: &Path) -> Value {
    json!({
        "connector.class": "file-sink",
        "file": output.display().to_string(),
        "topics": "t",
    })
}

/// Committed position of the source, when it committed one.
fn committed_position(c: &TestCluster, name: &str) -> Option<u64> {
    let r = c.call("GetOffsets", json!({ "name": name }));
    assert_eq!(r.code, 0, "{}", r.err);
    r.body["offsets"].as_array()?.iter().find_map(|o| {
        serde_json::from_str::<Value>(o["offset"].as_str()?).ok()?["position"].as_u64()
    })
}

async fn delete_and_wait(c: &TestCluster, name: &str) {
    let r = c.call("DeleteConnector", json!({ "name": name }));
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until(&format!("{name} to be deleted"), CONVERGE, || async {
        (c.call("GetConnectorStatus", json!({ "name": name })).code == NOT_FOUND).then_some(())
    })
    .await;
}

/// Highest generation in a status body (connector instance and tasks).
fn generations(status: &Value) -> Vec<u64> {
    let mut out = vec![];
    let as_u64 = |v: &Value| {
        v.as_u64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .unwrap_or(0)
    };
    out.push(as_u64(&status["connector"]["generation"]));
    for t in status["tasks"].as_array().into_iter().flatten() {
        out.push(as_u64(&t["status"]["generation"]));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connector_created_again_under_a_deleted_name_starts_from_scratch() {
    let c = TestCluster::start(1).await;
    let input = c.dir.path().join("lines.jsonl");
    let topic_view = c.dir.path().join("topic-t.jsonl");
    write_lines(&input);
    let input_len = std::fs::metadata(&input).expect("input").len();

    let r = c.call(
        "CreateConnector",
        json!({ "name": "topic-view", "config": sink_config(&topic_view) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let r = c.call(
        "CreateConnector",
        json!({ "name": "lines", "config": source_config(&input) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);

    // Setup: all 1,000 records in the topic and the offsets committed.
    wait_until("1,000 records in topic t", CONVERGE, || async {
        (sink_numbers(&topic_view).len() as u64 >= LINES).then_some(())
    })
    .await;
    wait_until("the offsets of lines committed", CONVERGE, || async {
        (committed_position(&c, "lines") == Some(input_len)).then_some(())
    })
    .await;
    let old_status = c.status("lines").expect("status of the old lines");
    let old_generations = generations(&old_status);

    delete_and_wait(&c, "lines").await;
    assert_eq!(
        c.call("GetOffsets", json!({ "name": "lines" })).code,
        NOT_FOUND,
        "a deleted connector has no offsets"
    );

    // Created again, STOPPED first: nothing of the old one shows up.
    let r = c.call(
        "CreateConnector",
        json!({ "name": "lines", "config": source_config(&input),
                "initial_state": "TARGET_STATE_STOPPED" }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(
        committed_position(&c, "lines"),
        None,
        "no offsets before the first commit"
    );
    let fresh = c.call("GetConnector", json!({ "name": "lines" }));
    assert_eq!(fresh.code, 0, "{}", fresh.err);
    let task_configs = fresh.body["connector"]["tasks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        task_configs.is_empty(),
        "no task config of the old connector: {}",
        fresh.body
    );
    let stopped = c
        .wait_state("lines", "STATE_STOPPED", "STATE_RUNNING", 0)
        .await;
    assert!(
        stopped["tasks"].as_array().is_none_or(Vec::is_empty),
        "no task status of the old connector: {stopped}"
    );

    let r = c.call("ResumeConnector", json!({ "name": "lines" }));
    assert_eq!(r.code, 0, "{}", r.err);
    let running = c
        .wait_state("lines", "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    let old_max = old_generations.iter().copied().max().unwrap_or(0);
    assert!(
        old_max > 0,
        "the old connector had generations: {old_status}"
    );
    for g in generations(&running) {
        assert!(
            g > old_max,
            "generation {g} of the new connector is above the old one's {old_generations:?}: {running}"
        );
    }

    // It reads the file from the first line again: the topic now holds 2,000 records.
    wait_until("2,000 records in topic t", CONVERGE, || async {
        (sink_numbers(&topic_view).len() as u64 >= 2 * LINES).then_some(())
    })
    .await;
    let numbers = sink_numbers(&topic_view);
    let expected: Vec<u64> = (0..LINES).chain(0..LINES).collect();
    assert_eq!(
        numbers, expected,
        "the file once, then once again from its first line"
    );
    wait_until(
        "the new lines committed the whole file",
        CONVERGE,
        || async { (committed_position(&c, "lines") == Some(input_len)).then_some(()) },
    )
    .await;

    // A sink created again under a deleted sink's name reads the topic from the start too
    // (its log consumer was deleted with it).
    delete_and_wait(&c, "topic-view").await;
    let again = c.dir.path().join("topic-t-again.jsonl");
    let r = c.call(
        "CreateConnector",
        json!({ "name": "topic-view", "config": sink_config(&again) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until("the new sink read all 2,000 records", CONVERGE, || async {
        (sink_numbers(&again).len() as u64 >= 2 * LINES).then_some(())
    })
    .await;
    assert_eq!(sink_numbers(&again), expected);
}
