//! The `SinkTaskContext` the JVM host gives a Kafka Connect sink task, end to end: a
//! real control plane and `wharf-executor --plugin-path` whose plugin location holds
//! Connect's FileStream jar and the test plugins (`jvm-host/test-plugins`, compiled here
//! with javac). A FileStreamSource writes lines to a topic; the test sink
//! (`wharf.test.ContextSink`) writes every record it is put to a file and uses its
//! context as its config asks.
//!
//! Needs Java and the Connect jars (`scripts/setup-services connect`, run by
//! `scripts/test`); fails naming what is missing. Build first:
//! `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, NOT_FOUND, TestCluster};
use wharf_harness::{jvm, wait_until};

const SOURCE: &str = "org.apache.kafka.connect.file.FileStreamSourceConnector";
const CONTEXT_SINK: &str = "wharf.test.ContextSink";

/// A cluster whose executor runs the plugin path of Connect's file connectors and the
/// test plugins, with `extra` executor flags.
async fn cluster(extra: &[String]) -> TestCluster {
    cluster_with(extra, None).await
}

/// As [`cluster`], the test plugins' location with the `jvm.options` text `options`.
async fn cluster_with(extra: &[String], options: Option<&str>) -> TestCluster {
    let mut c = TestCluster::start(0).await;
    let dir = c.dir.path().to_path_buf();
    let classpath = jvm::build_host(&dir.join("jvm-host"));
    let path = dir.join("plugins");
    jvm::link_jars(&path, &["connect-file-4.3.0.jar"]);
    jvm::test_plugin_jar(&dir, &path.join("wharf-test").join("wharf-test.jar"));
    if let Some(options) = options {
        std::fs::write(path.join("wharf-test").join("jvm.options"), options).unwrap();
    }
    let mut flags = vec![
        "--plugin-path".into(),
        path.display().to_string(),
        "--jvm-host-classpath".into(),
        classpath,
    ];
    flags.extend_from_slice(extra);
    c.add_executor_with(0, flags).await;
    c.wait_alive(1).await;
    c
}

/// Creates a FileStreamSource writing `lines` to topic `topic`.
fn source_lines(c: &TestCluster, topic: &str, lines: &[&str]) {
    let input = c.dir.path().join(format!("{topic}.in"));
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&input, text).unwrap();
    create(
        c,
        &format!("{topic}-source"),
        json!({ "connector.class": SOURCE, "tasks.max": "1", "file": input.display().to_string(), "topic": topic }),
    );
}

fn create(c: &TestCluster, name: &str, config: Value) {
    let r = c.call("CreateConnector", json!({ "name": name, "config": config }));
    assert_eq!(r.code, 0, "{name}: {}", r.err);
}

fn events(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits until `path` holds at least `n` lines; returns them.
async fn wait_lines(what: &str, path: &Path, n: usize) -> Vec<String> {
    let path: PathBuf = path.to_path_buf();
    wait_until(what, CONVERGE, || {
        let lines = events(&path);
        async move { (lines.len() >= n).then_some(lines) }
    })
    .await
}

async fn delete_and_wait(c: &TestCluster, name: &str) {
    let r = c.call("DeleteConnector", json!({ "name": name }));
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until(&format!("{name} deleted"), CONVERGE, || async {
        (c.call("GetConnector", json!({ "name": name })).code == NOT_FOUND).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_that_asks_offset_zero_gets_the_records_from_zero_again() {
    let c = cluster(&[]).await;
    source_lines(&c, "rewound", &["a", "b", "c", "d", "e"]);
    let out = c.dir.path().join("rewind.events");
    create(
        &c,
        "rewinder",
        json!({ "connector.class": CONTEXT_SINK, "tasks.max": "1", "topics": "rewound",
                "events.file": out.display().to_string(), "rewind.at": "2" }),
    );
    let lines = wait_lines("the records from 0 put again", &out, 10).await;
    assert_eq!(
        lines[1..],
        [
            "put 0 a",
            "put 1 b",
            "put 2 c",
            "rewind to 0",
            "put 0 a",
            "put 1 b",
            "put 2 c",
            "put 3 d",
            "put 4 e",
        ]
    );
    for name in ["rewinder", "rewound-source"] {
        delete_and_wait(&c, name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_partition_delivers_nothing_until_resumed_then_everything_in_order() {
    let c = cluster(&[]).await;
    source_lines(&c, "held", &["a", "b", "c", "d", "e"]);
    let out = c.dir.path().join("pause.events");
    create(
        &c,
        "pauser",
        json!({ "connector.class": CONTEXT_SINK, "tasks.max": "1", "topics": "held",
                "events.file": out.display().to_string(), "pause.flushes": "2" }),
    );
    let lines = wait_lines("the records put after the resume", &out, 8).await;
    assert_eq!(
        lines,
        [
            "metrics {connector=pauser, task=0}",
            "paused [held-0]",
            "resumed",
            "put 0 a",
            "put 1 b",
            "put 2 c",
            "put 3 d",
            "put 4 e",
        ]
    );
    for name in ["pauser", "held-source"] {
        delete_and_wait(&c, name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reported_record_reaches_the_dead_letter_queue_with_the_context_headers() {
    let c = cluster(&[]).await;
    source_lines(&c, "input", &["a", "b", "c"]);
    let out = c.dir.path().join("report.events");
    create(
        &c,
        "reporter",
        json!({ "connector.class": CONTEXT_SINK, "tasks.max": "1", "topics": "input",
                "events.file": out.display().to_string(), "report.at": "1",
                "errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dead",
                "errors.deadletterqueue.context.headers.enable": "true" }),
    );
    let lines = wait_lines("the records put or reported", &out, 4).await;
    assert_eq!(lines[1..], ["put 0 a", "reported 1", "put 2 c"]);
    // The dead letter queue, read by a sink that writes the headers it gets.
    let dead = c.dir.path().join("dead.events");
    create(
        &c,
        "dead-reader",
        json!({ "connector.class": "wharf.test.HeaderSink", "tasks.max": "1", "topics": "dead",
                "events.file": dead.display().to_string() }),
    );
    let headers = wait_lines("the dead letter queue's record", &dead, 10).await;
    for want in [
        "0 __connect.errors.topic=input (STRING, String)",
        "0 __connect.errors.offset=1 (INT8, Byte)",
        "0 __connect.errors.connector.name=reporter (STRING, String)",
        "0 __connect.errors.exception.message=java.lang.IllegalStateException: cannot write b (STRING, String)",
    ] {
        assert!(headers.iter().any(|h| h == want), "{want} in {headers:?}");
    }
    for name in ["reporter", "dead-reader", "input-source"] {
        delete_and_wait(&c, name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locations_jvm_options_reach_its_jvm() {
    let c = cluster_with(
        &[],
        Some("# the test plugins' JVM\n-Xmx96m\n-Dwharf.test.marker=from-jvm-options\n"),
    )
    .await;
    source_lines(&c, "jvm", &["a"]);
    let out = c.dir.path().join("jvm.events");
    create(
        &c,
        "jvm-reporter",
        json!({ "connector.class": CONTEXT_SINK, "tasks.max": "1", "topics": "jvm",
                "events.file": out.display().to_string(), "jvm.report": "true" }),
    );
    let lines = wait_lines("the JVM's report", &out, 2).await;
    let report = lines
        .iter()
        .find_map(|l| l.strip_prefix("jvm "))
        .unwrap_or_else(|| panic!("a jvm line in {lines:?}"));
    let (memory, marker) = report.split_once(' ').unwrap();
    assert_eq!(marker, "marker=from-jvm-options");
    let max: u64 = memory.strip_prefix("max.memory=").unwrap().parse().unwrap();
    assert!(
        max <= 96 * 1024 * 1024,
        "-Xmx96m bounds Runtime.maxMemory(): {max}"
    );
    for name in ["jvm-reporter", "jvm-source"] {
        delete_and_wait(&c, name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executors_header_converter_given_by_its_short_name_reaches_the_host() {
    // --header-converter json: the source's host writes headers with JsonConverter (with
    // schemas) where SimpleHeaderConverter would write plain text; the sink names its own
    // by a short name (string) and gets the bytes as they are in the log.
    let c = cluster(&["--header-converter".into(), "json".into()]).await;
    create(
        &c,
        "hdr-source",
        json!({ "connector.class": "wharf.test.HeaderSource", "tasks.max": "1", "topic": "hdr" }),
    );
    let out = c.dir.path().join("hdr.events");
    create(
        &c,
        "hdr-sink",
        json!({ "connector.class": "wharf.test.HeaderSink", "tasks.max": "1", "topics": "hdr",
                "events.file": out.display().to_string(), "header.converter": "string" }),
    );
    let lines = wait_lines("the headers read by the sink", &out, 2).await;
    assert_eq!(
        lines[..2],
        [
            r#"0 trace={"schema":{"type":"string","optional":false},"payload":"abc-123"} (STRING, String)"#,
            r#"0 attempt={"schema":{"type":"int32","optional":false},"payload":42} (STRING, String)"#,
        ]
    );
    for name in ["hdr-sink", "hdr-source"] {
        delete_and_wait(&c, name).await;
    }
}
