//! KIP-875 for sinks, as a Kafka Connect client sees it over REST: a sink's offsets are its
//! consumer positions on the record log. `file-source` -> record log -> `file-sink`
//! through a real control plane and a real executor, on the embedded log and on NATS
//! JetStream (a test-owned nats-server): `GET /connectors/{sink}/offsets` shows where the
//! sink is (`{"partition": {"kafka_topic", "kafka_partition"}, "offset": {"kafka_offset"}}`),
//! `PATCH` moves it and the resumed sink reads again from there (the records a plain
//! reader of the output file sees twice), `DELETE` resets it and the sink reads the topic
//! from its start; a running sink, a partition the topic lacks and an offset beyond the
//! end are refused with nothing changed. On the Kafka log (a test-owned tansu broker,
//! `scripts/setup-services tansu-path`) reading and moving them is refused with the
//! reason, never answered as done; a reset deletes the consumer group, as Connect's does.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`, then
//! `cargo test -p wharf --test rest_sink_offsets`.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, TestCluster};
use wharf_harness::lines::{append_lines, sink_numbers};
use wharf_harness::rest::{Rest, rest_addr};
use wharf_harness::{Proc, wait_until};

/// Lines the source writes to the topic.
const LINES: u64 = 5;
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
    wait_until("nats-server ready", NATS_READY, || async {
        nats.log().contains("Server is ready").then_some(())
    })
    .await;
    (nats, format!("nats://127.0.0.1:{port}"))
}

/// A control plane with the REST gateway and one executor started with `log_flags`.
async fn cluster(log_flags: Vec<String>) -> (TestCluster, Rest) {
    let mut c = TestCluster::start_secured_with_env(
        0,
        vec!["--rest-listen".into(), "127.0.0.1:0".into()],
        false,
        &[],
    )
    .await;
    c.add_executor_with(0, log_flags).await;
    c.wait_alive(1).await;
    let rest = Rest {
        addr: rest_addr(&c.dir.path().join("cp")),
    };
    (c, rest)
}

async fn wait_state(rest: &Rest, name: &str, state: &str) {
    wait_until(&format!("{name} {state}"), CONVERGE, || async {
        let s = rest.get(&format!("/connectors/{name}/status")).await.body;
        let tasks = s["tasks"].as_array().cloned().unwrap_or_default();
        (s["connector"]["state"] == state && tasks.iter().all(|t| t["state"] == state))
            .then_some(())
    })
    .await;
}

fn sink_offsets(topic: &str, offset: u64) -> Value {
    json!({ "offsets": [{
        "partition": { "kafka_topic": topic, "kafka_partition": 0 },
        "offset": { "kafka_offset": offset },
    }]})
}

async fn wait_lines(output: &Path, n: usize, what: &str) -> Vec<u64> {
    wait_until(what, CONVERGE, || async {
        let got = sink_numbers(output);
        (got.len() >= n).then_some(got)
    })
    .await
}

/// The whole scenario on the record log the executor's `log_flags` choose.
async fn sink_offsets_live_on_the_record_log(log_flags: Vec<String>) {
    let (c, rest) = cluster(log_flags).await;
    let input = c.dir.path().join("in.jsonl");
    let output = c.dir.path().join("out.jsonl");
    append_lines(&input, 0..LINES);
    let a = rest
        .json(
            "POST",
            "/connectors",
            &json!({ "name": "src", "config": {
                "connector.class": "file-source",
                "file": input.display().to_string(),
                "topic": "t",
            }}),
        )
        .await;
    assert_eq!(a.status, 201, "{a:?}");
    let a = rest
        .json(
            "POST",
            "/connectors",
            &json!({ "name": "snk", "config": {
                "connector.class": "file-sink",
                "file": output.display().to_string(),
                "topics": "t",
            }}),
        )
        .await;
    assert_eq!(a.status, 201, "{a:?}");
    let got = wait_lines(&output, LINES as usize, "every line in the sink's file").await;
    assert_eq!(got, (0..LINES).collect::<Vec<_>>());

    // The sink's position: after the last record it acknowledged (before: `[]`).
    let shown = wait_until("the sink's offsets at the end of t", CONVERGE, || async {
        let a = rest.get("/connectors/snk/offsets").await;
        (a.status == 200 && a.body == sink_offsets("t", LINES)).then_some(a.body)
    })
    .await;
    assert_eq!(shown, sink_offsets("t", LINES));

    // KIP-875: only a STOPPED connector's offsets change.
    let a = rest
        .json("PATCH", "/connectors/snk/offsets", &sink_offsets("t", 2))
        .await;
    assert_eq!(a.status, 400, "{a:?}");
    let a = rest.empty("PUT", "/connectors/snk/stop").await;
    assert_eq!(a.status, 204, "{a:?}");
    wait_state(&rest, "snk", "STOPPED").await;

    // Refused with nothing changed: a partition t does not have, an offset past its end,
    // a source-shaped partition.
    let a = rest
        .json(
            "PATCH",
            "/connectors/snk/offsets",
            &json!({ "offsets": [{
                "partition": { "kafka_topic": "t", "kafka_partition": 1 },
                "offset": { "kafka_offset": 0 },
            }]}),
        )
        .await;
    assert_eq!(a.status, 400, "{a:?}");
    assert!(
        a.body["message"]
            .as_str()
            .unwrap_or("")
            .contains("partition 1"),
        "{a:?}"
    );
    let a = rest
        .json("PATCH", "/connectors/snk/offsets", &sink_offsets("t", 99))
        .await;
    assert_eq!(a.status, 400, "{a:?}");
    assert!(
        a.body["message"]
            .as_str()
            .unwrap_or("")
            .contains("beyond its end"),
        "{a:?}"
    );
    let a = rest
        .json(
            "PATCH",
            "/connectors/snk/offsets",
            &json!({ "offsets": [{ "partition": { "file": "x" }, "offset": { "position": 1 } }] }),
        )
        .await;
    assert_eq!(a.status, 400, "{a:?}");
    assert!(
        a.body["message"]
            .as_str()
            .unwrap_or("")
            .contains("offsets[0].partition.file"),
        "{a:?}"
    );
    assert_eq!(
        rest.get("/connectors/snk/offsets").await.body,
        sink_offsets("t", LINES),
        "nothing changed"
    );

    // Moved back to record 2: the resumed sink reads 2, 3, 4 again.
    let a = rest
        .json("PATCH", "/connectors/snk/offsets", &sink_offsets("t", 2))
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert!(a.body["message"].is_string(), "{a:?}");
    assert_eq!(
        rest.get("/connectors/snk/offsets").await.body,
        sink_offsets("t", 2)
    );
    let a = rest.empty("PUT", "/connectors/snk/resume").await;
    assert_eq!(a.status, 202, "{a:?}");
    let got = wait_lines(&output, LINES as usize + 3, "records 2..4 read again").await;
    assert_eq!(got, vec![0, 1, 2, 3, 4, 2, 3, 4]);

    // Reset: the sink starts again from the start of t.
    let a = rest.empty("PUT", "/connectors/snk/stop").await;
    assert_eq!(a.status, 204, "{a:?}");
    wait_state(&rest, "snk", "STOPPED").await;
    let a = rest.empty("DELETE", "/connectors/snk/offsets").await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(
        rest.get("/connectors/snk/offsets").await.body,
        json!({ "offsets": [] })
    );
    let a = rest.empty("PUT", "/connectors/snk/resume").await;
    assert_eq!(a.status, 202, "{a:?}");
    let got = wait_lines(
        &output,
        2 * LINES as usize + 3,
        "t read again from its start",
    )
    .await;
    assert_eq!(got, vec![0, 1, 2, 3, 4, 2, 3, 4, 0, 1, 2, 3, 4]);

    // A source's offsets are still the store's, in the source's own shape.
    let a = rest.get("/connectors/src/offsets").await;
    assert_eq!(a.status, 200, "{a:?}");
    assert!(
        a.body["offsets"][0]["partition"]["file"].is_string(),
        "{}",
        a.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sinks_offsets_are_read_moved_and_reset_on_the_embedded_log() {
    sink_offsets_live_on_the_record_log(Vec::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sinks_offsets_are_read_moved_and_reset_on_jetstream() {
    let nats_dir = tempfile::tempdir().expect("temp dir");
    let (_nats, url) = own_nats(nats_dir.path()).await;
    sink_offsets_live_on_the_record_log(vec!["--record-log".into(), url]).await;
}

/// The tansu broker `scripts/setup-services` installs (or `WHARF_TANSU`).
fn tansu_bin() -> Option<std::path::PathBuf> {
    if let Ok(p) = std::env::var("WHARF_TANSU") {
        return Some(p.into());
    }
    let out = std::process::Command::new(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/setup-services"),
    )
    .arg("tansu-path")
    .output()
    .ok()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !path.is_empty()).then(|| path.into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sinks_offsets_on_the_kafka_log_are_refused_with_the_reason() {
    let Some(tansu) = tansu_bin() else {
        panic!("no tansu broker: run scripts/setup-services (or set WHARF_TANSU)");
    };
    let broker_dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let url = format!("tcp://127.0.0.1:{port}");
    let _broker = Proc::spawn(
        tansu,
        vec![
            "broker".into(),
            "--listener-url".into(),
            url.clone(),
            "--advertised-listener-url".into(),
            url,
            "--storage-engine".into(),
            "memory://tansu/".into(),
        ],
        broker_dir.path(),
    );
    wait_until("tansu listening", NATS_READY, || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    let (c, rest) = cluster(vec![
        "--record-log".into(),
        format!("kafka://127.0.0.1:{port}"),
    ])
    .await;
    let output = c.dir.path().join("out.jsonl");
    let a = rest
        .json(
            "POST",
            "/connectors",
            &json!({ "name": "snk", "initial_state": "STOPPED", "config": {
                "connector.class": "file-sink",
                "file": output.display().to_string(),
                "topics": "t",
            }}),
        )
        .await;
    assert_eq!(a.status, 201, "{a:?}");
    wait_state(&rest, "snk", "STOPPED").await;
    for (method, body) in [("GET", None), ("PATCH", Some(sink_offsets("t", 0)))] {
        let a = match &body {
            Some(b) => rest.json(method, "/connectors/snk/offsets", b).await,
            None => rest.empty(method, "/connectors/snk/offsets").await,
        };
        assert_eq!(a.status, 400, "{method}: {a:?}");
        let msg = a.body["message"].as_str().unwrap_or("");
        assert!(
            msg.contains("cannot") && msg.contains("snk"),
            "{method}: the reason, naming the consumer: {msg}"
        );
    }
    // A reset is what Kafka Connect does for it: the sink's consumer group is deleted.
    let a = rest.empty("DELETE", "/connectors/snk/offsets").await;
    assert_eq!(a.status, 200, "{a:?}");
}
