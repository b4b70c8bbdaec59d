//! Data plane, one process: `file-source` -> embedded record log -> `file-sink` through a
//! real control plane and a real executor (embedded log in its data dir). Every line
//! arrives exactly once in order in the happy path; across kill -9 of the executor every
//! line arrives at least once, in order of first arrival, with nothing skipped.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`. The executor uses
//! the embedded log unless `WHARF_NATS_URL` is set in the environment.

use wharf_harness::lines::{append_lines, first_arrivals, sink_numbers};

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, TestCluster};
use wharf_harness::wait_until;

/// Lines written before the pipeline starts.
const FIRST_LINES: u64 = 1_000;
/// Lines appended while records flow, before the executor's kill -9.
const FLOWING_LINES: u64 = 20_000;
/// Lines appended while the executor is down.
const MORE_LINES: u64 = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_lines_reach_the_file_sink_once_in_order_and_at_least_once_across_kill_9() {
    let mut c = TestCluster::start(1).await;
    let input = c.dir.path().join("in.jsonl");
    let output = c.dir.path().join("out.jsonl");
    append_lines(&input, 0..FIRST_LINES);

    let r = c.call(
        "CreateConnector",
        json!({ "name": "dp-sink", "config": {
            "connector.class": "file-sink",
            "file": output.display().to_string(),
            "topics": "dp-topic",
        }}),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let r = c.call(
        "CreateConnector",
        json!({ "name": "dp-source", "config": {
            "connector.class": "file-source",
            "file": input.display().to_string(),
            "topic": "dp-topic",
        }}),
    );
    assert_eq!(r.code, 0, "{}", r.err);

    wait_until("every first line in the sink's file", CONVERGE, || async {
        (sink_numbers(&output).len() as u64 >= FIRST_LINES).then_some(())
    })
    .await;
    assert_eq!(
        sink_numbers(&output),
        (0..FIRST_LINES).collect::<Vec<_>>(),
        "happy path: every line exactly once, in order"
    );
    let input_len = std::fs::metadata(&input).expect("input").len();
    wait_until("the source offset is committed", CONVERGE, || async {
        let r = c.call("GetOffsets", json!({ "name": "dp-source" }));
        let offsets = r.body["offsets"].as_array().cloned().unwrap_or_default();
        offsets
            .iter()
            .any(|o| {
                serde_json::from_str::<Value>(o["offset"].as_str().unwrap_or("null"))
                    .map(|v| v["position"].as_u64() == Some(input_len))
                    .unwrap_or(false)
            })
            .then_some(())
    })
    .await;

    // kill -9 of the executor (source and sink tasks and the log in one process) while
    // records flow, more input while it is down, then the same executor on its data dir.
    append_lines(&input, FIRST_LINES..FIRST_LINES + FLOWING_LINES);
    wait_until("new lines flowing into the sink", CONVERGE, || async {
        (sink_numbers(&output).len() as u64 > FIRST_LINES).then_some(())
    })
    .await;
    c.executors[0].kill9();
    let at_kill = sink_numbers(&output).len();
    let total = FIRST_LINES + FLOWING_LINES + MORE_LINES;
    append_lines(&input, FIRST_LINES + FLOWING_LINES..total);
    c.executors[0].restart();
    c.executors[0].listen_addr().await;

    wait_until(
        "every line in the sink's file after the restart",
        CONVERGE,
        || async { (first_arrivals(&sink_numbers(&output)).len() as u64 >= total).then_some(()) },
    )
    .await;
    let numbers = sink_numbers(&output);
    assert_eq!(
        first_arrivals(&numbers),
        (0..total).collect::<Vec<_>>(),
        "at least once, in order of first arrival, nothing skipped"
    );
    eprintln!(
        "sink had {at_kill} lines at the kill; lines delivered again: {}",
        numbers.len() as u64 - total
    );
}

/// Lines of the memory test's input.
const BIG_LINES: u64 = 200_000;
/// Padding per line of the memory test, in bytes (about 200 MiB of input in all).
const BIG_PADDING_BYTES: usize = 1_000;
/// Peak resident memory the executor may reach in the memory test, in KiB (well below the
/// input's size: the records wait on disk, not in memory).
const EXECUTOR_PEAK_LIMIT_KIB: u64 = 192 * 1024;

/// Complete lines in a file (cheap: no parsing).
fn line_count(path: &Path) -> u64 {
    std::fs::read(path)
        .map(|b| b.iter().filter(|c| **c == b'\n').count() as u64)
        .unwrap_or(0)
}

fn peak_rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_that_does_not_keep_up_leaves_executor_memory_bounded_and_catches_up_later() {
    let c = TestCluster::start(1).await;
    let input = c.dir.path().join("big.jsonl");
    let output = c.dir.path().join("big-out.jsonl");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&input).expect("create"));
        let pad = "x".repeat(BIG_PADDING_BYTES);
        for n in 0..BIG_LINES {
            writeln!(f, "{}", json!({ "n": n, "pad": pad })).expect("write");
        }
        f.into_inner().expect("flush").sync_all().expect("sync");
    }
    let input_len = std::fs::metadata(&input).expect("input").len();

    // The sink exists but is paused: it takes nothing while the source pushes everything.
    let r = c.call(
        "CreateConnector",
        json!({ "name": "big-sink", "initial_state": "TARGET_STATE_PAUSED", "config": {
            "connector.class": "file-sink",
            "file": output.display().to_string(),
            "topics": "big",
        }}),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let r = c.call(
        "CreateConnector",
        json!({ "name": "big-source", "config": {
            "connector.class": "file-source",
            "file": input.display().to_string(),
            "topic": "big",
        }}),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until(
        "the whole input in the log (offsets committed to its end)",
        CONVERGE * 3,
        || async {
            let r = c.call("GetOffsets", json!({ "name": "big-source" }));
            let offsets = r.body["offsets"].as_array().cloned().unwrap_or_default();
            offsets
                .iter()
                .any(|o| {
                    serde_json::from_str::<Value>(o["offset"].as_str().unwrap_or("null"))
                        .map(|v| v["position"].as_u64() == Some(input_len))
                        .unwrap_or(false)
                })
                .then_some(())
        },
    )
    .await;
    assert_eq!(line_count(&output), 0, "the paused sink took nothing");
    let pid = c.executors[0].pid();
    let while_pushing = peak_rss_kib(pid);

    // Resumed, the sink catches up with everything, once and in order.
    let r = c.call("ResumeConnector", json!({ "name": "big-sink" }));
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until("the sink caught up", CONVERGE * 3, || async {
        (line_count(&output) >= BIG_LINES).then_some(())
    })
    .await;
    assert_eq!(sink_numbers(&output), (0..BIG_LINES).collect::<Vec<_>>());
    let after_catching_up = peak_rss_kib(pid);
    eprintln!(
        "input {} KiB; executor peak RSS {while_pushing} KiB while the sink was paused, \
         {after_catching_up} KiB after it caught up",
        input_len / 1024
    );
    assert!(
        after_catching_up < EXECUTOR_PEAK_LIMIT_KIB,
        "executor peak RSS {after_catching_up} KiB with {} KiB of records",
        input_len / 1024
    );
}
