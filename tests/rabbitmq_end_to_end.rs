//! `rabbitmq-sink` through the whole system: a real control plane and executor with a
//! test-owned NATS JetStream record log, a `file-source` feeding the topic, and a
//! test-owned RabbitMQ node (wharf_harness::rabbitmq) that the test restarts mid-stream:
//!
//! - after create, the sink's durable queue exists on the broker;
//! - lines written before, during and after a broker restart all end up in the queue at
//!   least once, counted by a consumer at the end: nothing acknowledged is lost (the
//!   sink's flush waits for publisher confirms, and retries a lost connection);
//! - the sink task stays RUNNING through the restart;
//! - deleting the connector removes its queue and owner record from the broker; a second
//!   sink pointed at a queue the user declared beforehand leaves that queue at deletion.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use serde_json::json;
use wharf_harness::audit::Cluster;
use wharf_harness::cluster::CONVERGE;
use wharf_harness::lapin::options::{BasicAckOptions, BasicGetOptions, QueueDeclareOptions};
use wharf_harness::lapin::types::FieldTable;
use wharf_harness::rabbitmq::TestRabbit;
use wharf_harness::{KeepOnFailure, wait_until};

const SOURCE: &str = "rmq-lines";
const SINK: &str = "rmq-sink";
const USER_SINK: &str = "rmq-user-sink";
const TOPIC: &str = "rmq-lines";
/// The queue the sink declares (its default, from the connector name).
const QUEUE: &str = "wharf.rmq-sink";
/// A queue the user declared before creating `USER_SINK`.
const USER_QUEUE: &str = "users-own-queue";
/// Lines written in each of the three phases (before, during, after the outage).
const PER_PHASE: usize = 150;
/// Upper bound on the sink catching up after the broker came back.
const CATCH_UP: Duration = Duration::from_secs(40);

fn append_lines(file: &Path, from: usize, to: usize) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .unwrap();
    let text: String = (from..to).map(|i| format!("line-{i}\n")).collect();
    f.write_all(text.as_bytes()).unwrap();
    f.sync_all().unwrap();
}

/// Every message body in `queue`, read without consuming (the messages go back when the
/// channel closes).
async fn peek(rabbit: &TestRabbit, queue: &str) -> Option<Vec<String>> {
    let conn = rabbit.connect().await.ok()?;
    let ch = conn.create_channel().await.ok()?;
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: false })
        .await
        .ok()?
    {
        out.push(String::from_utf8_lossy(&m.delivery.data).into_owned());
    }
    let _ = conn.close(200, "peeked".into()).await;
    Some(out)
}

/// Consumes every message of `queue` (acknowledging each) and returns the bodies.
async fn consume_all(rabbit: &TestRabbit, queue: &str) -> Vec<String> {
    let conn = rabbit.connect().await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
    {
        out.push(String::from_utf8_lossy(&m.delivery.data).into_owned());
        m.delivery.ack(BasicAckOptions::default()).await.unwrap();
    }
    let _ = conn.close(200, "consumed".into()).await;
    out
}

fn missing(bodies: &[String], upto: usize) -> Vec<usize> {
    let have: BTreeSet<&str> = bodies.iter().map(String::as_str).collect();
    (0..upto)
        .filter(|i| !have.contains(format!("line-{i}").as_str()))
        .collect()
}

async fn wait_all_in_queue(rabbit: &TestRabbit, upto: usize, what: &str) {
    wait_until(what, CATCH_UP, || async {
        let bodies = peek(rabbit, QUEUE).await?;
        missing(&bodies, upto).is_empty().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_survive_a_broker_restart_and_deletion_removes_only_the_sinks_queue() {
    // The broker boots (a few seconds of Erlang) while the cluster starts.
    let rabbit_dir = KeepOnFailure::new();
    let mut rabbit = TestRabbit::spawn(rabbit_dir.path());
    let c = Cluster::start(1).await;
    let lines = c.dir.path().join("lines.txt");
    append_lines(&lines, 0, PER_PHASE);
    rabbit.wait_ready().await;

    // The user's own queue, declared before any connector exists.
    {
        let conn = rabbit.connect().await.unwrap();
        let ch = conn.create_channel().await.unwrap();
        ch.queue_declare(
            USER_QUEUE.into(),
            QueueDeclareOptions::durable(),
            FieldTable::default(),
        )
        .await
        .unwrap();
        let _ = conn.close(200, "done".into()).await;
    }

    c.call(
        "CreateConnector",
        json!({ "name": SOURCE, "config": {
            "connector.class": "file-source", "tasks.max": "1",
            "file": lines.display().to_string(), "topic": TOPIC,
        }}),
    );
    let sink_config = |extra: serde_json::Value| {
        let mut cfg = json!({
            "connector.class": "rabbitmq-sink", "tasks.max": "1",
            "topics": TOPIC, "rabbitmq.uri": rabbit.uri(),
            "retry.timeout.ms": "60000",
        });
        for (k, v) in extra.as_object().unwrap() {
            cfg[k] = v.clone();
        }
        cfg
    };
    c.call(
        "CreateConnector",
        json!({ "name": SINK, "config": sink_config(json!({})) }),
    );
    c.call(
        "CreateConnector",
        json!({ "name": USER_SINK, "config": sink_config(json!({ "queue": USER_QUEUE })) }),
    );
    for name in [SOURCE, SINK, USER_SINK] {
        c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1, None)
            .await;
    }
    assert!(
        rabbit.queue_exists(QUEUE).await.unwrap(),
        "the sink declared its queue"
    );

    // Phase 1: the broker is up.
    wait_all_in_queue(&rabbit, PER_PHASE, "the first lines in the queue").await;

    // Phase 2: lines written while the broker is down, then it comes back.
    rabbit.stop().await;
    append_lines(&lines, PER_PHASE, 2 * PER_PHASE);
    // The sink holds records it cannot get confirmed: the outage is mid-stream.
    wait_until(
        "the sink to retry the unreachable broker",
        CATCH_UP,
        || async {
            c.executors[0]
                .log()
                .contains("rabbitmq-sink reconnect failed")
                .then_some(())
        },
    )
    .await;
    rabbit.restart().await;
    // Phase 3: after the restart.
    append_lines(&lines, 2 * PER_PHASE, 3 * PER_PHASE);
    wait_all_in_queue(
        &rabbit,
        3 * PER_PHASE,
        "every line in the queue after the restart",
    )
    .await;
    let s = c.try_status(SINK).expect("sink status");
    assert_eq!(
        s["tasks"][0]["status"]["state"], "STATE_RUNNING",
        "the sink rode out the restart: {s}"
    );

    // A consumer at the end counts what the broker holds: every line at least once.
    let bodies = consume_all(&rabbit, QUEUE).await;
    assert!(
        missing(&bodies, 3 * PER_PHASE).is_empty(),
        "lost lines {:?} ({} messages)",
        missing(&bodies, 3 * PER_PHASE),
        bodies.len()
    );
    let user_bodies = peek(&rabbit, USER_QUEUE).await.unwrap();
    assert!(
        missing(&user_bodies, 3 * PER_PHASE).is_empty(),
        "the user's queue got every line too"
    );

    // Deletion: the sink's queue and owner record go, the user's queue stays.
    for name in [SINK, USER_SINK] {
        let r = c.call(
            "DeleteConnector",
            json!({ "name": name, "wait": true, "wait_timeout_ms": 30000 }),
        );
        assert_eq!(r["deleted"], true, "{r}");
    }
    assert!(
        !rabbit.queue_exists(QUEUE).await.unwrap(),
        "the deleted sink's queue is gone from the broker"
    );
    for owner in ["wharf.owner.rmq-sink", "wharf.owner.rmq-user-sink"] {
        assert!(
            !rabbit.queue_exists(owner).await.unwrap(),
            "owner record {owner} is gone"
        );
    }
    assert!(
        rabbit.queue_exists(USER_QUEUE).await.unwrap(),
        "the queue the user declared survives the deletion of the sink that used it"
    );
    assert_eq!(
        peek(&rabbit, USER_QUEUE).await.unwrap().len(),
        user_bodies.len(),
        "and keeps its messages"
    );
    c.call("DeleteConnector", json!({ "name": SOURCE, "wait": true }));
    wait_until("the source to be gone", CONVERGE, || async {
        c.try_status(SOURCE).is_none().then_some(())
    })
    .await;
}

/// A plugin reports a failure by returning an error from the call that found it (SDK
/// module docs, "Reporting a failure"): here the user deletes rabbitmq-sink's queue
/// behind its back, the broker returns the next records as unroutable, the sink's flush
/// fails with that text, and the admin API shows the task FAILED with it (the REST
/// gateway shows the same text as `trace`). Bad config is refused per field: at create
/// for what the advertised keys say, at start (FAILED) for what only the plugin checks.
/// Uses the shared broker on 5672.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_the_sink_reports_shows_in_the_status_and_bad_config_names_its_field() {
    let c = Cluster::start(1).await;
    let shared = SharedRabbit;
    let queue = format!("wharf-e2e-failure-{}", std::process::id());
    let lines = c.dir.path().join("lines.txt");
    append_lines(&lines, 0, 10);

    // Bad config. What the control plane can check from the advertised keys (types,
    // allowed values) is refused at create, naming the key; nothing is created.
    let bad = wharf_harness::cluster::call_at(
        &c.cp_addr,
        "wharf.v1.ConnectorAdmin/CreateConnector",
        &json!({ "name": "rmq-bad-type", "config": {
            "connector.class": "rabbitmq-sink", "topics": TOPIC, "exchange.type": "round-robin",
        }}),
    );
    assert_eq!(bad.code, 3, "INVALID_ARGUMENT: {}", bad.err);
    assert!(bad.err.contains("exchange.type"), "{}", bad.err);
    assert!(
        c.try_status("rmq-bad-type").is_none(),
        "nothing was created"
    );
    // What only the plugin can check (a reserved queue name, credentials in the URI)
    // its validator refuses at create too, on a live executor that offers it: the
    // error names the key and never echoes the password, nothing is stored and
    // nothing is declared.
    for (name, key, value) in [
        ("rmq-bad-queue", "queue", "amq.mine"),
        (
            "rmq-bad-uri",
            "rabbitmq.uri",
            "amqp://bob:s3cret@127.0.0.1:5672/%2f",
        ),
    ] {
        let bad = wharf_harness::cluster::call_at(
            &c.cp_addr,
            "wharf.v1.ConnectorAdmin/CreateConnector",
            &json!({ "name": name, "config": {
                "connector.class": "rabbitmq-sink", "topics": TOPIC, key: value,
            }}),
        );
        assert_eq!(bad.code, 3, "{name}: INVALID_ARGUMENT: {}", bad.err);
        assert!(
            bad.err.contains(&format!("config[{key}]")) && !bad.err.contains("s3cret"),
            "{name}: {}",
            bad.err
        );
        assert!(c.try_status(name).is_none(), "{name}: nothing was created");
        assert!(!shared.queue_exists(&format!("wharf.owner.{name}")).await);
    }

    c.call(
        "CreateConnector",
        json!({ "name": SOURCE, "config": {
            "connector.class": "file-source", "tasks.max": "1",
            "file": lines.display().to_string(), "topic": TOPIC,
        }}),
    );
    c.call(
        "CreateConnector",
        json!({ "name": SINK, "config": {
            "connector.class": "rabbitmq-sink", "tasks.max": "1",
            "topics": TOPIC, "queue": queue,
        }}),
    );
    c.wait_state(SINK, "STATE_RUNNING", "STATE_RUNNING", 1, None)
        .await;
    wait_until("the first lines in the queue", CATCH_UP, || async {
        (shared.message_count(&queue).await? >= 10).then_some(())
    })
    .await;

    shared.delete_queue(&queue).await;
    append_lines(&lines, 10, 20);
    let s = c
        .wait_state(SINK, "STATE_RUNNING", "STATE_FAILED", 1, None)
        .await;
    let error = s["tasks"][0]["status"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        error.contains("unroutable") && error.contains(&queue),
        "the status carries the sink's own error text: {s}"
    );

    let r = c.call(
        "DeleteConnector",
        json!({ "name": SINK, "wait": true, "wait_timeout_ms": 30000 }),
    );
    assert_eq!(r["deleted"], true, "{r}");
    assert!(!shared.queue_exists("wharf.owner.rmq-sink").await);
    c.call("DeleteConnector", json!({ "name": SOURCE, "wait": true }));
}

/// The shared broker of scripts/setup-services (127.0.0.1:5672, guest/guest).
struct SharedRabbit;

impl SharedRabbit {
    async fn channel(&self) -> wharf_harness::lapin::Channel {
        let conn = wharf_harness::lapin::Connection::connect(
            "amqp://guest:guest@127.0.0.1:5672/%2f",
            wharf_harness::lapin::ConnectionProperties::default(),
        )
        .await
        .expect("RabbitMQ on 127.0.0.1:5672 (scripts/setup-services)");
        conn.create_channel().await.unwrap()
    }

    async fn message_count(&self, queue: &str) -> Option<u32> {
        self.channel()
            .await
            .queue_declare(
                queue.into(),
                QueueDeclareOptions::default().passive(),
                FieldTable::default(),
            )
            .await
            .ok()
            .map(|q| q.message_count())
    }

    async fn queue_exists(&self, queue: &str) -> bool {
        self.message_count(queue).await.is_some()
    }

    async fn delete_queue(&self, queue: &str) {
        self.channel()
            .await
            .queue_delete(queue.into(), Default::default())
            .await
            .unwrap();
    }
}
