//! What a connector is on the Kafka record log beyond its records, with real processes on
//! a test-owned tansu broker, checked with a plain Kafka client (rdkafka):
//!
//! - KIP-558 active topics over REST, and `GET /`'s `kafka_cluster_id` (the broker's).
//! - The ledger: a sink's `connect-<name>` group and a source's topics created through
//!   topic creation are created resources; a topic that existed is never recorded as
//!   created. A created topic is deleted with its connector only under
//!   `cleanup.delete.created.topics=true`, a pre-existing one never; `force` leaves the
//!   group as an orphan, on the broker.
//! - KIP-458 client overrides: refused at create naming the key (policy, librdkafka), an
//!   allowed one runs; a dead letter queue topic Kafka refuses is refused at create.
//! - Broker health: an executor whose brokers are unreachable is NOT_SERVING, and its
//!   `/ready` names the broker.
//!
//! tansu 0.6.0 stands in for Apache Kafka (docs/kafka.md lists its deviations); nothing
//! here relies on one. Build first: `cargo build -p wharf-control-plane -p
//! wharf-executor-stock`.

use std::path::Path;

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, TestCluster};
use wharf_harness::kafka::TestKafka;
use wharf_harness::lines::{append_lines, sink_numbers};
use wharf_harness::prometheus::{free_addr, grpc_health, http_get};
use wharf_harness::rest::{Rest, rest_addr};
use wharf_harness::wait_until;

/// A control plane serving REST and `n` executors on a test-owned broker's Kafka log.
async fn kafka_cluster(n: usize) -> (TestCluster, TestKafka, Rest) {
    let mut c =
        TestCluster::start_with(0, vec!["--rest-listen".into(), "127.0.0.1:0".into()]).await;
    let kafka = TestKafka::start(&c.dir.path().join("kafka"));
    for i in 0..n {
        c.add_executor_with(i, vec!["--record-log".into(), kafka.record_log()])
            .await;
    }
    c.wait_alive(n).await;
    let rest = Rest {
        addr: rest_addr(&c.dir.path().join("cp")),
    };
    (c, kafka, rest)
}

/// `name`'s ledger as `(kind, name, origin, state)`.
fn ledger(c: &TestCluster, name: &str) -> Vec<(String, String, String, String)> {
    let r = c.call("GetConnectorResources", json!({ "name": name }));
    assert_eq!(r.code, 0, "{}", r.err);
    r.body["entries"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let r = &e["resource"];
            (
                r["kind"].as_str().unwrap_or_default().to_owned(),
                r["name"].as_str().unwrap_or_default().to_owned(),
                r["origin"].as_str().unwrap_or_default().to_owned(),
                e["state"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn entry(kind: &str, name: &str, origin: &str) -> (String, String, String, String) {
    (
        kind.into(),
        name.into(),
        format!("RESOURCE_ORIGIN_{}", origin.to_uppercase()),
        "confirmed".into(),
    )
}

/// The orphans as `(connector, kind, name, reason)`.
fn orphans(c: &TestCluster) -> Vec<(String, String, String, String)> {
    let r = c.call("ListOrphanedResources", json!({}));
    assert_eq!(r.code, 0, "{}", r.err);
    r.body["orphans"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|o| {
            let r = &o["entry"]["resource"];
            (
                o["connector"].as_str().unwrap_or_default().to_owned(),
                r["kind"].as_str().unwrap_or_default().to_owned(),
                r["name"].as_str().unwrap_or_default().to_owned(),
                o["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn file_source(input: &Path, topic: &str, extra: &[(&str, &str)]) -> Value {
    let mut config = json!({
        "connector.class": "file-source",
        "file": input.display().to_string(),
        "topic": topic,
        "topic.creation.default.partitions": "2",
        "topic.creation.default.replication.factor": "-1",
    });
    for (k, v) in extra {
        config[*k] = json!(v);
    }
    config
}

fn file_sink(output: &Path, topics: &str, extra: &[(&str, &str)]) -> Value {
    let mut config = json!({
        "connector.class": "file-sink",
        "file": output.display().to_string(),
        "topics": topics,
    });
    for (k, v) in extra {
        config[*k] = json!(v);
    }
    config
}

fn create(c: &TestCluster, name: &str, config: Value) {
    let r = c.call("CreateConnector", json!({ "name": name, "config": config }));
    assert_eq!(r.code, 0, "{name}: {}", r.err);
}

/// Waits until connector `name` is gone (its deletion finished).
async fn deleted(c: &TestCluster, name: &str) {
    wait_until(&format!("{name} deleted"), CONVERGE, || async {
        (c.status(name).is_none()).then_some(())
    })
    .await;
}

/// Waits until `name`'s ledger holds `want` (among others).
async fn ledger_holds(c: &TestCluster, name: &str, want: (String, String, String, String)) {
    wait_until(
        &format!("{name}'s ledger holds {want:?}"),
        CONVERGE,
        || async { ledger(c, name).contains(&want).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_topics_and_the_cluster_id_come_from_the_kafka_log() {
    let (c, kafka, rest) = kafka_cluster(1).await;
    let input = c.dir.path().join("in.jsonl");
    let output = c.dir.path().join("out.jsonl");
    append_lines(&input, 0..5);
    create(&c, "kt-source", file_source(&input, "kt-lines", &[]));
    create(&c, "kt-sink", file_sink(&output, "kt-lines", &[]));
    for name in ["kt-source", "kt-sink"] {
        let want = json!({ name: { "topics": ["kt-lines"] } });
        wait_until(&format!("{name}'s active topics"), CONVERGE, || async {
            let a = rest.get(&format!("/connectors/{name}/topics")).await;
            (a.body == want).then_some(())
        })
        .await;
    }
    let a = rest.empty("PUT", "/connectors/kt-sink/topics/reset").await;
    assert_eq!(a.status, 200, "{a:?}");
    let a = rest.get("/connectors/kt-sink/topics").await;
    assert_eq!(a.body, json!({ "kt-sink": { "topics": [] } }));

    let id = kafka.cluster_id().expect("the broker's cluster id");
    wait_until("GET / names the Kafka cluster", CONVERGE, || async {
        let a = rest.get("/").await;
        (a.body["kafka_cluster_id"] == json!(id)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_topics_and_the_sinks_group_are_resources_and_go_only_as_configured() {
    let (mut c, kafka, _rest) = kafka_cluster(1).await;
    kafka.create_topic("kr-there", 1).await;
    let input = c.dir.path().join("in.jsonl");
    append_lines(&input, 0..3);
    let delete = [("cleanup.delete.created.topics", "true")];

    // Sources: two create their topics (one under the opt-in key), two write to a topic
    // that existed (one under the key).
    create(&c, "kr-made", file_source(&input, "kr-made", &[]));
    create(
        &c,
        "kr-made-del",
        file_source(&input, "kr-made-del", &delete),
    );
    create(&c, "kr-there", file_source(&input, "kr-there", &[]));
    create(&c, "kr-there-del", file_source(&input, "kr-there", &delete));
    for (name, topic) in [("kr-made", "kr-made"), ("kr-made-del", "kr-made-del")] {
        ledger_holds(&c, name, entry("topic", topic, "created")).await;
        assert_eq!(
            kafka.partitions(topic),
            2,
            "{topic} created by topic creation"
        );
    }
    for name in ["kr-there", "kr-there-del"] {
        c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
            .await;
        wait_until(&format!("{name}'s lines in kr-there"), CONVERGE, || async {
            (kafka.read_all("kr-there", 1, 6, CONVERGE).len() >= 6).then_some(())
        })
        .await;
        assert!(
            ledger(&c, name)
                .iter()
                .all(|(kind, _, _, _)| kind != "topic"),
            "{name}: a topic that existed is never recorded: {:?}",
            ledger(&c, name)
        );
    }

    // The plans say what the deletions then do: a created topic is removed only under
    // the key.
    for (name, removed) in [("kr-made", false), ("kr-made-del", true)] {
        let r = c.call("DeleteConnector", json!({ "name": name, "dry_run": true }));
        assert_eq!(r.code, 0, "{name}: {}", r.err);
        let listed = |list: &str| {
            r.body["plan"][list]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .any(|e| e["resource"]["kind"] == "topic" && e["resource"]["name"] == name)
        };
        assert_eq!(
            (listed("remove"), listed("keep")),
            (removed, !removed),
            "{name}: {}",
            r.body
        );
    }

    // Deletion: only the created topic under the key goes; a pre-existing one never.
    for name in ["kr-made", "kr-made-del", "kr-there", "kr-there-del"] {
        let r = c.call("DeleteConnector", json!({ "name": name }));
        assert_eq!(r.code, 0, "{name}: {}", r.err);
        deleted(&c, name).await;
    }
    assert_eq!(kafka.partitions("kr-made"), 2, "kept without the key");
    assert_eq!(kafka.partitions("kr-made-del"), 0, "deleted under the key");
    assert_eq!(
        kafka.partitions("kr-there"),
        1,
        "a pre-existing topic stays"
    );

    // The sink's group: a created resource; force leaves it on the broker, as an orphan.
    let output = c.dir.path().join("out.jsonl");
    create(&c, "kr-sink", file_sink(&output, "kr-made", &[]));
    ledger_holds(
        &c,
        "kr-sink",
        entry("consumer_group", "connect-kr-sink", "created"),
    )
    .await;
    wait_until("the sink read the topic", CONVERGE, || async {
        (sink_numbers(&output).len() >= 3).then_some(())
    })
    .await;
    wait_until("the group on the broker", CONVERGE, || async {
        kafka
            .groups()
            .contains(&"connect-kr-sink".to_string())
            .then_some(())
    })
    .await;
    // Its executor is gone (kill -9), so no cleanup can run: force ends the deletion
    // (a force sent while the executor answers may race a cleanup that already ran).
    c.executors[0].kill9();
    let r = c.call(
        "DeleteConnector",
        json!({ "name": "kr-sink", "force": true }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    deleted(&c, "kr-sink").await;
    assert!(
        kafka.groups().contains(&"connect-kr-sink".to_string()),
        "force leaves the group"
    );
    assert!(
        orphans(&c).contains(&(
            "kr-sink".into(),
            "consumer_group".into(),
            "connect-kr-sink".into(),
            "force".into()
        )),
        "the group is listed as an orphan: {:?}",
        orphans(&c)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_overrides_and_topic_names_are_checked_at_create() {
    let (c, kafka, _rest) = kafka_cluster(1).await;
    kafka.create_topic("ko-in", 1).await;
    kafka
        .produce("ko-in", &[(None, json!({ "n": 0 }).to_string(), None)])
        .await;
    let output = c.dir.path().join("out.jsonl");
    for (key, value, why) in [
        (
            "consumer.override.enable.auto.commit",
            "true",
            "delivery guarantees",
        ),
        ("consumer.override.no.such.property", "1", "librdkafka"),
        (
            "errors.deadletterqueue.topic.name",
            "bad topic!",
            "not a Kafka topic name",
        ),
    ] {
        let mut extra = vec![(key, value)];
        if key.starts_with("errors.") {
            extra.push(("errors.tolerance", "all"));
        }
        let r = c.call(
            "CreateConnector",
            json!({ "name": "ko-sink", "config": file_sink(&output, "ko-in", &extra) }),
        );
        assert_eq!(r.code, 3, "{key}: INVALID_ARGUMENT: {}", r.err);
        assert!(
            r.err.contains(&format!("config[{key}]")) && r.err.contains(why),
            "{key}: {}",
            r.err
        );
        assert!(c.status("ko-sink").is_none(), "nothing stored");
    }
    create(
        &c,
        "ko-sink",
        file_sink(
            &output,
            "ko-in",
            &[("consumer.override.fetch.wait.max.ms", "50")],
        ),
    );
    wait_until("the overriding sink reads", CONVERGE, || async {
        (sink_numbers(&output) == [0]).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_whose_brokers_are_unreachable_is_not_serving_and_names_them() {
    let mut c = TestCluster::start_with(0, Vec::new()).await;
    // A broker that stops: healthy while it answers, then NOT_SERVING naming it.
    let kafka = TestKafka::start(&c.dir.path().join("kafka"));
    let broker = kafka.broker.clone();
    let metrics = free_addr("127.0.0.1");
    c.add_executor_with(
        0,
        vec![
            "--record-log".into(),
            kafka.record_log(),
            "--metrics-listen".into(),
            metrics.clone(),
        ],
    )
    .await;
    c.wait_alive(1).await;
    let addr = c.executors[0].listen_addr().await;
    wait_until("SERVING while the broker answers", CONVERGE, || async {
        (grpc_health(&addr) == "SERVING").then_some(())
    })
    .await;
    drop(kafka);
    wait_until("NOT_SERVING once the broker is gone", CONVERGE, || async {
        (grpc_health(&addr) == "NOT_SERVING").then_some(())
    })
    .await;
    let (status, body) = http_get(&metrics, "/ready");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains(&broker) && body.contains("unreachable"),
        "/ready names the broker: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_policy_none_every_client_override_is_refused_at_create() {
    let mut c = TestCluster::start_with(0, Vec::new()).await;
    let kafka = TestKafka::start(&c.dir.path().join("kafka"));
    let log = format!(
        "{}?connector.client.config.override.policy=None",
        kafka.record_log()
    );
    c.add_executor_with(0, vec!["--record-log".into(), log])
        .await;
    c.wait_alive(1).await;
    let output = c.dir.path().join("out.jsonl");
    let r = c.call(
        "CreateConnector",
        json!({ "name": "kn-sink", "config": file_sink(
            &output,
            "kn-in",
            &[("consumer.override.fetch.wait.max.ms", "50")],
        ) }),
    );
    assert_eq!(r.code, 3, "INVALID_ARGUMENT: {}", r.err);
    assert!(
        r.err
            .contains("config[consumer.override.fetch.wait.max.ms]")
            && r.err.contains("None"),
        "{}",
        r.err
    );
    assert!(c.status("kn-sink").is_none(), "nothing stored");
    create(&c, "kn-sink", file_sink(&output, "kn-in", &[]));
}

/// A record the sink's converter refuses goes to the dead letter queue naming the
/// partition it was read from (KIP-298's `__connect.errors.partition`), not partition 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_record_names_the_partition_it_came_from() {
    use wharf_harness::rdkafka::message::{Headers, Message};
    let (c, kafka, _rest) = kafka_cluster(1).await;
    kafka.create_topic("kd-in", 3).await;
    kafka
        .produce(
            "kd-in",
            &[
                (None, json!({ "n": 0 }).to_string(), Some(0)),
                (None, "not json".to_owned(), Some(2)),
            ],
        )
        .await;
    let output = c.dir.path().join("out.jsonl");
    create(
        &c,
        "kd-sink",
        file_sink(
            &output,
            "kd-in",
            &[
                (
                    "value.converter",
                    "org.apache.kafka.connect.json.JsonConverter",
                ),
                ("value.converter.schemas.enable", "false"),
                ("errors.tolerance", "all"),
                ("errors.deadletterqueue.topic.name", "kd-dlq"),
                ("errors.deadletterqueue.context.headers.enable", "true"),
            ],
        ),
    );
    let dead = wait_until(
        "the bad record on the dead letter queue",
        CONVERGE,
        || async {
            let partitions = kafka.partitions("kd-dlq");
            if partitions == 0 {
                return None;
            }
            let read = kafka.read_all(
                "kd-dlq",
                i32::try_from(partitions).unwrap_or(1),
                1,
                CONVERGE,
            );
            (!read.is_empty()).then_some(read)
        },
    )
    .await;
    assert_eq!(dead.len(), 1);
    let header = |name: &str| {
        dead[0].headers().and_then(|hs| {
            hs.iter()
                .find(|h| h.key == name)
                .and_then(|h| h.value.map(|v| String::from_utf8_lossy(v).into_owned()))
        })
    };
    assert_eq!(dead[0].payload(), Some(&b"not json"[..]));
    assert_eq!(header("__connect.errors.topic").as_deref(), Some("kd-in"));
    assert_eq!(header("__connect.errors.partition").as_deref(), Some("2"));
    assert_eq!(header("__connect.errors.offset").as_deref(), Some("0"));
}
