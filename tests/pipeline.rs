//! The record pipeline through real executors (docs/pipeline.md): a Kafka Connect
//! transform chain (MaskField + ValueToKey + RegexRouter with a TopicNameMatches
//! predicate, JsonConverter without schemas) on a source, seen by a plain sink; a sink
//! with `errors.tolerance=all` and a dead letter queue given 1,000 records of which 10
//! are not JSON: 990 delivered, 10 on the dead letter queue with Connect's context
//! headers, the task RUNNING; with `none` the task FAILED naming the converter stage; a
//! record the sink reports errant lands on the dead letter queue too; a bad transform
//! config is refused naming its key.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, INVALID_ARGUMENT, TestCluster};
use wharf_harness::wait_until;

/// Lines of the dead letter queue test, and how many of them are not JSON.
const RECORDS: usize = 1_000;
const BAD: usize = 10;

/// The JSON lines a `test-sink` wrote with `test.records.path`.
fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("input file");
    for l in lines {
        writeln!(f, "{l}").expect("write");
    }
}

/// A `test-sink` on `topics` writing what it gets to `out`, with `extra` keys.
fn sink(c: &TestCluster, name: &str, topics: &str, out: &Path, extra: &[(&str, &str)]) -> Value {
    let mut cfg = json!({
        "connector.class": "test-sink",
        "lifecycle.path": c.lifecycle_path(name).display().to_string(),
        "topics": topics,
        "test.records.path": out.display().to_string(),
    });
    for (k, v) in extra {
        cfg[*k] = json!(v);
    }
    cfg
}

fn create(c: &TestCluster, name: &str, config: Value) {
    let r = c.call("CreateConnector", json!({ "name": name, "config": config }));
    assert_eq!(r.code, 0, "{name}: {}", r.err);
}

fn header<'a>(record: &'a Value, name: &str) -> Option<&'a str> {
    record["headers"]
        .as_array()?
        .iter()
        .find(|h| h[0] == name)
        .and_then(|h| h[1].as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transform_chain_with_a_predicate_masks_rekeys_and_routes_a_sources_records() {
    let c = TestCluster::start(1).await;
    let input = c.dir.path().join("people.jsonl");
    let routed = c.dir.path().join("routed.jsonl");
    let other = c.dir.path().join("other.jsonl");
    let lines: Vec<String> = (0..20)
        .map(|i| {
            json!({ "id": i, "name": format!("p{i}"), "ssn": format!("123-45-{i:04}") }).to_string()
        })
        .collect();
    write_lines(&input, &lines);
    create(
        &c,
        "chain-sink",
        sink(&c, "chain-sink", "people-masked", &routed, &[]),
    );
    create(
        &c,
        "other-sink",
        sink(&c, "other-sink", "people", &other, &[]),
    );
    let chain = json!({
        "connector.class": "file-source",
        "file": input.display().to_string(),
        "topic": "people",
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "false",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "transforms": "mask,key,route",
        "transforms.mask.type": "org.apache.kafka.connect.transforms.MaskField$Value",
        "transforms.mask.fields": "ssn",
        "transforms.key.type": "org.apache.kafka.connect.transforms.ValueToKey",
        "transforms.key.fields": "id",
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": "(.*)",
        "transforms.route.replacement": "$1-masked",
        "transforms.route.predicate": "isPeople",
        "predicates": "isPeople",
        "predicates.isPeople.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
        "predicates.isPeople.pattern": "people",
    });
    create(&c, "chain-src", chain);
    wait_until("every record on the routed topic", CONVERGE, || async {
        (records(&routed).len() >= lines.len()).then_some(())
    })
    .await;
    let got = records(&routed);
    assert_eq!(got.len(), lines.len(), "each record once");
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r["topic"], "people-masked");
        let value: Value = serde_json::from_str(r["value"].as_str().unwrap()).unwrap();
        assert_eq!(
            value,
            json!({ "id": i, "name": format!("p{i}"), "ssn": "" }),
            "masked"
        );
        let key: Value = serde_json::from_str(r["key"].as_str().unwrap()).unwrap();
        assert_eq!(key, json!({ "id": i }), "the key is the value's id");
    }
    assert!(
        records(&other).is_empty(),
        "nothing stayed on the original topic"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_json_goes_to_the_dead_letter_queue_with_context_headers_and_the_task_keeps_running() {
    let c = TestCluster::start(1).await;
    let input = c.dir.path().join("in.jsonl");
    let out = c.dir.path().join("out.jsonl");
    let dlq = c.dir.path().join("dlq.jsonl");
    let strict_out = c.dir.path().join("strict.jsonl");
    let lines: Vec<String> = (0..RECORDS)
        .map(|i| {
            if i % (RECORDS / BAD) == 7 {
                format!("not json {i}")
            } else {
                json!({ "n": i }).to_string()
            }
        })
        .collect();
    write_lines(&input, &lines);
    create(
        &c,
        "dlq-src",
        json!({ "connector.class": "file-source", "file": input.display().to_string(), "topic": "dlq-in" }),
    );
    let json_sink = [
        (
            "value.converter",
            "org.apache.kafka.connect.json.JsonConverter",
        ),
        ("value.converter.schemas.enable", "false"),
    ];
    let mut tolerant = json_sink.to_vec();
    tolerant.extend([
        ("errors.tolerance", "all"),
        ("errors.log.enable", "true"),
        ("errors.deadletterqueue.topic.name", "dlq-out"),
        ("errors.deadletterqueue.context.headers.enable", "true"),
    ]);
    create(
        &c,
        "dlq-sink",
        sink(&c, "dlq-sink", "dlq-in", &out, &tolerant),
    );
    create(
        &c,
        "dlq-reader",
        sink(&c, "dlq-reader", "dlq-out", &dlq, &[]),
    );

    wait_until("990 delivered and 10 dead-lettered", CONVERGE, || async {
        (records(&out).len() >= RECORDS - BAD && records(&dlq).len() >= BAD).then_some(())
    })
    .await;
    let delivered = records(&out);
    assert_eq!(delivered.len(), RECORDS - BAD);
    assert!(
        delivered
            .iter()
            .all(|r| r["value"].as_str().unwrap().starts_with("{\"n\":"))
    );
    let dead = records(&dlq);
    assert_eq!(dead.len(), BAD, "{dead:?}");
    for d in &dead {
        let value = d["value"].as_str().unwrap();
        assert!(value.starts_with("not json"), "the original bytes: {value}");
        let offset: u64 = header(d, "__connect.errors.offset")
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            lines[offset as usize], value,
            "the offset names the original record"
        );
        assert_eq!(header(d, "__connect.errors.topic"), Some("dlq-in"));
        assert_eq!(header(d, "__connect.errors.partition"), Some("0"));
        assert_eq!(
            header(d, "__connect.errors.connector.name"),
            Some("dlq-sink")
        );
        assert_eq!(header(d, "__connect.errors.task.id"), Some("0"));
        assert_eq!(header(d, "__connect.errors.stage"), Some("VALUE_CONVERTER"));
        assert_eq!(
            header(d, "__connect.errors.class.name"),
            Some("org.apache.kafka.connect.json.JsonConverter")
        );
        assert_eq!(
            header(d, "__connect.errors.exception.class.name"),
            Some("org.apache.kafka.connect.errors.DataException")
        );
        assert!(
            header(d, "__connect.errors.exception.message")
                .is_some_and(|m| m.contains("serialization error"))
        );
    }
    let s = c
        .wait_state("dlq-sink", "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    assert_eq!(s["tasks"][0]["status"]["state"], "STATE_RUNNING");

    // The same records with errors.tolerance=none: the task fails naming the stage.
    create(
        &c,
        "strict-sink",
        sink(&c, "strict-sink", "dlq-in", &strict_out, &json_sink),
    );
    let failed = wait_until("the strict sink's task failed", CONVERGE, || async {
        let s = c.status("strict-sink")?;
        let t = s["tasks"][0]["status"].clone();
        (t["state"] == "STATE_FAILED").then_some(t)
    })
    .await;
    let error = failed["error"].as_str().unwrap_or_default();
    assert!(error.contains("VALUE_CONVERTER"), "{error}");
    assert!(
        error.contains("org.apache.kafka.connect.json.JsonConverter"),
        "{error}"
    );
    assert!(error.contains("Tolerance exceeded"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_the_sink_reports_errant_reaches_the_dead_letter_queue() {
    let c = TestCluster::start(1).await;
    let input = c.dir.path().join("in.jsonl");
    let out = c.dir.path().join("out.jsonl");
    let dlq = c.dir.path().join("dlq.jsonl");
    let lines: Vec<String> = (0..50)
        .map(|i| {
            if i == 13 {
                "reject me".to_owned()
            } else {
                format!("line {i}")
            }
        })
        .collect();
    write_lines(&input, &lines);
    create(
        &c,
        "er-src",
        json!({ "connector.class": "file-source", "file": input.display().to_string(), "topic": "er-in" }),
    );
    create(
        &c,
        "er-sink",
        sink(
            &c,
            "er-sink",
            "er-in",
            &out,
            &[
                ("test.report.errant.containing", "reject"),
                ("errors.tolerance", "all"),
                ("errors.deadletterqueue.topic.name", "er-dlq"),
                ("errors.deadletterqueue.context.headers.enable", "true"),
            ],
        ),
    );
    create(&c, "er-reader", sink(&c, "er-reader", "er-dlq", &dlq, &[]));
    wait_until("49 written and 1 dead-lettered", CONVERGE, || async {
        (records(&out).len() >= 49 && !records(&dlq).is_empty()).then_some(())
    })
    .await;
    let dead = records(&dlq);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["value"], "reject me");
    assert_eq!(header(&dead[0], "__connect.errors.stage"), Some("TASK_PUT"));
    assert_eq!(
        header(&dead[0], "__connect.errors.class.name"),
        Some("test-sink")
    );
    assert_eq!(records(&out).len(), 49);
}

/// Kafka Connect 4.x refuses a sink whose `topics` names a topic twice (connect-runtime
/// 4.3.0's `SinkConnectorConfig`), or that has none; Wharf accepted both (the first ran
/// and delivered nothing, the second failed at its start).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_naming_a_topic_twice_or_none_is_refused_and_nothing_is_stored() {
    let c = TestCluster::start(1).await;
    let cfg = sink(&c, "twice", "a, b,a", &c.dir.path().join("out.jsonl"), &[]);
    let r = c.call("CreateConnector", json!({ "name": "twice", "config": cfg }));
    assert_eq!(r.code, INVALID_ARGUMENT, "{}", r.err);
    assert!(r.err.contains("config[topics]"), "{}", r.err);
    assert!(r.err.contains("\"a\""), "names the topic: {}", r.err);
    assert!(c.status("twice").is_none(), "nothing stored");

    // Without topics: refused at create whatever the plugin's own definition says, as
    // Connect's runtime refuses a sink with neither topics nor topics.regex.
    let mut cfg = sink(&c, "none", "x", &c.dir.path().join("out.jsonl"), &[]);
    cfg.as_object_mut().map(|o| o.remove("topics"));
    let r = c.call("CreateConnector", json!({ "name": "none", "config": cfg }));
    assert_eq!(r.code, INVALID_ARGUMENT, "{}", r.err);
    assert!(r.err.contains("config[topics]"), "{}", r.err);
    assert!(c.status("none").is_none(), "nothing stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_transform_config_is_refused_naming_its_key_and_nothing_is_stored() {
    let c = TestCluster::start(1).await;
    let mut cfg = c.source_config("bad-chain", 1);
    cfg["transforms"] = json!("mask");
    cfg["transforms.mask.type"] = json!("org.apache.kafka.connect.transforms.MaskField$Value");
    let r = c.call(
        "CreateConnector",
        json!({ "name": "bad-chain", "config": cfg }),
    );
    assert_eq!(r.code, INVALID_ARGUMENT, "{}", r.err);
    assert!(
        r.err.contains("config[transforms.mask.fields]"),
        "{}",
        r.err
    );
    cfg["transforms.mask.fields"] = json!("ssn");
    cfg["value.converter"] = json!("io.confluent.connect.avro.AvroConverter");
    let r = c.call(
        "CreateConnector",
        json!({ "name": "bad-chain", "config": cfg }),
    );
    assert_eq!(r.code, INVALID_ARGUMENT, "{}", r.err);
    assert!(r.err.contains("config[value.converter]"), "{}", r.err);
    assert!(c.status("bad-chain").is_none(), "nothing stored");
    let r = c.call("ValidateConnectorConfig", json!({ "config": cfg }));
    assert_eq!(r.code, 0, "{}", r.err);
    let configs = r.body["configs"].as_array().cloned().unwrap_or_default();
    let entry = configs
        .iter()
        .find(|e| e["name"] == "value.converter")
        .unwrap_or_else(|| panic!("value.converter has an entry: {}", r.body));
    assert!(
        !entry["errors"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .is_empty(),
        "{entry}"
    );
    let entry = configs
        .iter()
        .find(|e| e["name"] == "transforms.mask.fields")
        .expect("an entry");
    assert!(
        entry["warnings"].as_array().is_none_or(Vec::is_empty),
        "an implemented key is not 'ignored': {entry}"
    );
    cfg["value.converter"] = json!("org.apache.kafka.connect.json.JsonConverter");
    let r = c.call(
        "CreateConnector",
        json!({ "name": "bad-chain", "config": cfg }),
    );
    assert_eq!(r.code, 0, "the fixed config is accepted: {}", r.err);
}

/// The executor's default converters (`--value-converter`, Kafka Connect's worker
/// `value.converter`) apply to a connector that names none, and a connector's own
/// converter overrides them; a source's converters write the log's bytes with no
/// transform configured: JsonConverter with `schemas.enable=true` (Connect's default)
/// wraps a plain JSON value in the envelope, as Connect's converter writes a schemaless
/// value, and without schemas it writes the compact JSON Connect writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_converters_apply_and_a_sources_converters_write_the_log_without_transforms() {
    let mut c = TestCluster::start(0).await;
    c.add_executor_with(
        0,
        vec![
            "--value-converter".into(),
            "org.apache.kafka.connect.json.JsonConverter".into(),
        ],
    )
    .await;
    c.wait_alive(1).await;
    let input = c.dir.path().join("in.jsonl");
    write_lines(
        &input,
        &[r#"{ "n" : 1 }"#.to_owned(), r#"{"n":2}"#.to_owned()],
    );

    // The executor's JsonConverter (schemas enabled), no transform: the envelope.
    let enveloped = c.dir.path().join("enveloped.jsonl");
    create(
        &c,
        "env-src",
        json!({ "connector.class": "file-source", "file": input.display().to_string(), "topic": "env" }),
    );
    create(&c, "env-sink", sink(&c, "env-sink", "env", &enveloped, &[]));
    // A connector's own converter overrides the default: the bytes as they are.
    let raw = c.dir.path().join("raw.jsonl");
    create(
        &c,
        "raw-src",
        json!({
            "connector.class": "file-source", "file": input.display().to_string(), "topic": "raw",
            "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        }),
    );
    create(
        &c,
        "raw-sink",
        sink(
            &c,
            "raw-sink",
            "raw",
            &raw,
            &[(
                "value.converter",
                "org.apache.kafka.connect.storage.StringConverter",
            )],
        ),
    );
    // Its own JsonConverter without schemas: the compact JSON Connect writes.
    let compact = c.dir.path().join("compact.jsonl");
    create(
        &c,
        "compact-src",
        json!({
            "connector.class": "file-source", "file": input.display().to_string(), "topic": "compact",
            "value.converter": "json", "value.converter.schemas.enable": "false",
        }),
    );
    create(
        &c,
        "compact-sink",
        sink(
            &c,
            "compact-sink",
            "compact",
            &compact,
            &[
                ("value.converter", "json"),
                ("value.converter.schemas.enable", "false"),
            ],
        ),
    );
    wait_until("both records through each pair", CONVERGE, || async {
        [&enveloped, &raw, &compact]
            .iter()
            .all(|p| records(p).len() >= 2)
            .then_some(())
    })
    .await;
    let values = |p: &Path| -> Vec<String> {
        records(p)
            .iter()
            .map(|r| r["value"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(
        values(&enveloped),
        [
            r#"{"schema":null,"payload":{"n":1}}"#,
            r#"{"schema":null,"payload":{"n":2}}"#
        ]
    );
    assert_eq!(values(&raw), [r#"{ "n" : 1 }"#, r#"{"n":2}"#]);
    assert_eq!(values(&compact), [r#"{"n":1}"#, r#"{"n":2}"#]);
    // A connector's converter option without its converter: refused, naming the key.
    let r = c.call(
        "CreateConnector",
        json!({ "name": "half", "config": {
            "connector.class": "file-source", "file": input.display().to_string(), "topic": "half",
            "value.converter.schemas.enable": "false",
        }}),
    );
    assert_eq!(r.code, INVALID_ARGUMENT, "{}", r.err);
    assert!(
        r.err.contains("config[value.converter.schemas.enable]"),
        "{}",
        r.err
    );
}
