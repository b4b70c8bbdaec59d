//! Data plane across hosts: `file-source` on one executor -> NATS JetStream -> `file-sink`
//! on another, through a real control plane. Every line arrives exactly once in order in
//! the happy path, and at least once, in order of first arrival, with nothing skipped,
//! across kill -9 of the source task's executor, of the sink task's executor and of
//! nats-server (restarted with its store on its port).
//!
//! The nats-server is the test's own (`nats-server -js` on a free loopback port with a temp
//! store), so killing it disturbs nothing else. Build first:
//! `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use wharf_harness::lines::{append_lines, first_arrivals, sink_numbers};

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use wharf_harness::cluster::{CONVERGE, TEST_HEARTBEAT_INTERVAL_MS, TEST_LEASE_MS, TestCluster};
use wharf_harness::{KeepOnFailure, Proc, wait_until};

/// Lines written before the pipeline starts.
const FIRST_LINES: u64 = 2_000;
/// Lines appended before each kill, so that records are flowing when it happens.
const FLOWING_LINES: u64 = 20_000;
/// nats-server binary (Debian package path).
const NATS_SERVER_BIN: &str = "/usr/sbin/nats-server";
/// Upper bound on a wait for nats-server to be ready.
const NATS_READY: Duration = Duration::from_secs(20);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// How many times the test's nats-server said it was ready (its log is appended to).
fn ready_count(nats: &Proc) -> usize {
    nats.log().matches("Server is ready").count()
}

/// Waits until the nats-server said it was ready more than `before` times.
async fn nats_ready(nats: &Proc, before: usize) {
    wait_until("nats-server ready", NATS_READY, || async {
        (ready_count(nats) > before).then_some(())
    })
    .await;
}

/// A control plane and three executors using the JetStream log at `nats_url`.
async fn cluster(dir: KeepOnFailure, nats_url: &str) -> TestCluster {
    let cp_dir = dir.path().join("cp");
    let mut cp = Proc::spawn(
        wharf_harness::bin("wharf-control-plane"),
        vec![
            "--listen".into(),
            format!("127.0.0.1:{}", free_port()),
            "--data-dir".into(),
            cp_dir.display().to_string(),
            "--lease-ms".into(),
            TEST_LEASE_MS.to_string(),
            "--heartbeat-interval-ms".into(),
            TEST_HEARTBEAT_INTERVAL_MS.to_string(),
        ],
        &cp_dir,
    );
    let addr = cp.listen_addr().await;
    let mut executors = Vec::new();
    for i in 0..3 {
        let d = dir.path().join(format!("exec-{}", i + 1));
        let mut p = Proc::spawn(
            wharf_harness::bin("wharf-executor"),
            vec![
                "--listen".into(),
                format!("127.0.0.{}:0", i + 2),
                "--control-plane".into(),
                format!("http://{addr}"),
                "--data-dir".into(),
                d.display().to_string(),
                "--executor-id".into(),
                format!("exec-{}", i + 1),
                "--graceful-timeout-ms".into(),
                "3000".into(),
                "--nats-url".into(),
                nats_url.to_string(),
            ],
            &d,
        );
        p.listen_addr().await;
        executors.push(p);
    }
    let c = TestCluster {
        dir,
        cp,
        addr,
        executors,
        tls: None,
    };
    c.wait_alive(3).await;
    c
}

/// Index (into `c.executors`) of the executor hosting task 0 of `name`.
async fn task_host(c: &TestCluster, name: &str) -> usize {
    let s = c
        .wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    let host = TestCluster::hosts(&s).pop().expect("one task");
    host.strip_prefix("exec-")
        .and_then(|n| n.parse::<usize>().ok())
        .map(|n| n - 1)
        .unwrap_or_else(|| panic!("unexpected host {host:?}: {s}"))
}

/// Waits until the sink holds every line below `total` at least once, then checks the
/// order of first arrival.
async fn all_lines_arrive(output: &Path, total: u64, what: &str) {
    wait_until(what, CONVERGE, || async {
        (first_arrivals(&sink_numbers(output)).len() as u64 >= total).then_some(())
    })
    .await;
    assert_eq!(
        first_arrivals(&sink_numbers(output)),
        (0..total).collect::<Vec<_>>(),
        "{what}: at least once, in order of first arrival, nothing skipped"
    );
}

/// Appends more lines and waits until some of them reached the sink.
async fn lines_flowing(input: &Path, output: &Path, from: u64) -> u64 {
    append_lines(input, from..from + FLOWING_LINES);
    wait_until("new lines flowing into the sink", CONVERGE, || async {
        (first_arrivals(&sink_numbers(output)).len() as u64 > from).then_some(())
    })
    .await;
    from + FLOWING_LINES
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_cross_executors_through_jetstream_once_and_survive_kill_9_of_each_part() {
    let dir = KeepOnFailure::new();
    let (mut nats, url) = own_nats(&dir.path().join("nats")).await;
    let mut c = cluster(dir, &url).await;
    let input = c.dir.path().join("in.jsonl");
    let output = c.dir.path().join("out.jsonl");
    append_lines(&input, 0..FIRST_LINES);

    // Sink first, then source: with three executors the planner spreads the four units so
    // that the two tasks land on different executors (checked below).
    let r = c.call(
        "CreateConnector",
        json!({ "name": "js-sink", "config": {
            "connector.class": "file-sink",
            "file": output.display().to_string(),
            "topics": "js-topic",
        }}),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let r = c.call(
        "CreateConnector",
        json!({ "name": "js-source", "config": {
            "connector.class": "file-source",
            "file": input.display().to_string(),
            "topic": "js-topic",
        }}),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let source_host = task_host(&c, "js-source").await;
    let sink_host = task_host(&c, "js-sink").await;
    assert_ne!(
        source_host, sink_host,
        "source and sink tasks run on different executors"
    );

    wait_until("every first line in the sink's file", CONVERGE, || async {
        (sink_numbers(&output).len() as u64 >= FIRST_LINES).then_some(())
    })
    .await;
    assert_eq!(
        sink_numbers(&output),
        (0..FIRST_LINES).collect::<Vec<_>>(),
        "happy path: every line exactly once, in order"
    );

    // kill -9 of the source task's executor while records flow.
    let total = lines_flowing(&input, &output, FIRST_LINES).await;
    let host = task_host(&c, "js-source").await;
    c.executors[host].kill9();
    c.executors[host].restart();
    c.executors[host].listen_addr().await;
    all_lines_arrive(&output, total, "after kill -9 of the source's executor").await;

    // kill -9 of the sink task's executor while records flow.
    let total = lines_flowing(&input, &output, total).await;
    let host = task_host(&c, "js-sink").await;
    c.executors[host].kill9();
    c.executors[host].restart();
    c.executors[host].listen_addr().await;
    all_lines_arrive(&output, total, "after kill -9 of the sink's executor").await;

    // kill -9 of nats-server while records flow; restarted with its store on its port.
    let total = lines_flowing(&input, &output, total).await;
    let before = ready_count(&nats);
    nats.restart();
    nats_ready(&nats, before).await;
    all_lines_arrive(&output, total, "after kill -9 of nats-server").await;

    let numbers = sink_numbers(&output);
    eprintln!(
        "{} lines, {} delivered again across the three kills",
        total,
        numbers.len() as u64 - total
    );
}

/// Starts the test's own nats-server in `dir` and returns it with its URL.
async fn own_nats(dir: &Path) -> (Proc, String) {
    let port = free_port();
    let nats = Proc::spawn(
        NATS_SERVER_BIN.into(),
        vec![
            "-a".into(),
            "127.0.0.1".into(),
            "-p".into(),
            port.to_string(),
            "-js".into(),
            "-sd".into(),
            dir.join("store").display().to_string(),
        ],
        dir,
    );
    nats_ready(&nats, 0).await;
    (nats, format!("nats://127.0.0.1:{port}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connectors_created_again_under_deleted_names_start_from_scratch_on_jetstream() {
    let dir = KeepOnFailure::new();
    let (_nats, url) = own_nats(&dir.path().join("nats")).await;
    let c = cluster(dir, &url).await;
    let input = c.dir.path().join("lines.jsonl");
    append_lines(&input, 0..FIRST_LINES);
    let view = |file: &Path| {
        json!({
            "connector.class": "file-sink",
            "file": file.display().to_string(),
            "topics": "t",
        })
    };
    let source = json!({
        "connector.class": "file-source",
        "file": input.display().to_string(),
        "topic": "t",
    });
    let first_view = c.dir.path().join("view-1.jsonl");
    for (name, config) in [("view", view(&first_view)), ("lines", source.clone())] {
        let r = c.call("CreateConnector", json!({ "name": name, "config": config }));
        assert_eq!(r.code, 0, "{}", r.err);
    }
    wait_until("the file in the topic", CONVERGE, || async {
        (sink_numbers(&first_view).len() as u64 >= FIRST_LINES).then_some(())
    })
    .await;

    // The source again: it reads the file from its first line (its offsets went with it).
    delete_and_wait(&c, "lines").await;
    let r = c.call(
        "CreateConnector",
        json!({ "name": "lines", "config": source }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let twice: Vec<u64> = (0..FIRST_LINES).chain(0..FIRST_LINES).collect();
    wait_until("the file twice in the topic", CONVERGE, || async {
        (sink_numbers(&first_view).len() >= twice.len()).then_some(())
    })
    .await;
    assert_eq!(sink_numbers(&first_view), twice);

    // The sink again: its durable consumer went with it, so it reads the stream from the
    // start.
    delete_and_wait(&c, "view").await;
    let second_view = c.dir.path().join("view-2.jsonl");
    let r = c.call(
        "CreateConnector",
        json!({ "name": "view", "config": view(&second_view) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until("the new sink read the whole topic", CONVERGE, || async {
        (sink_numbers(&second_view).len() >= twice.len()).then_some(())
    })
    .await;
    assert_eq!(sink_numbers(&second_view), twice);
}

async fn delete_and_wait(c: &TestCluster, name: &str) {
    let r = c.call("DeleteConnector", json!({ "name": name }));
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until(&format!("{name} to be deleted"), CONVERGE, || async {
        (c.call("GetConnectorStatus", json!({ "name": name })).code
            == wharf_harness::cluster::NOT_FOUND)
            .then_some(())
    })
    .await;
}
