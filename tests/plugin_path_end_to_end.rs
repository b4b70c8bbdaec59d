//! `wharf-executor --plugin-path DIR` end to end: the connector classes found in a plugin
//! path (Kafka Connect's FileStream jar, and a jar of test plugins compiled here with
//! javac) are listed by `GET /connector-plugins` with their class names and versions, run
//! through Wharf, and a deletion of a plugin whose classes have no deletion-aware
//! `stop(boolean)` says in its steps that its cleanup is not supported by the plugin.
//!
//! Needs Java and the Connect jars (`scripts/setup-services connect`, run by
//! `scripts/test`); fails naming what is missing. Build first:
//! `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::path::Path;

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, NOT_FOUND, TestCluster};
use wharf_harness::rest::{Rest, start_with_rest};
use wharf_harness::{jvm, wait_until};

const SOURCE: &str = "org.apache.kafka.connect.file.FileStreamSourceConnector";
const SINK: &str = "org.apache.kafka.connect.file.FileStreamSinkConnector";
const PLAIN: &str = "wharf.test.PlainSource";
const AWARE: &str = "wharf.test.DeletionAwareSource";

/// A plugin path with Connect's file connectors (an uber jar) and the test plugins (a
/// directory of jars); an executor on it.
async fn cluster_on_a_plugin_path() -> (TestCluster, Rest) {
    let (mut c, rest) = start_with_rest(0, &[]).await;
    let dir = c.dir.path().to_path_buf();
    let classpath = jvm::build_host(&dir.join("jvm-host"));
    let path = dir.join("plugins");
    jvm::link_jars(&path, &["connect-file-4.3.0.jar"]);
    jvm::test_plugin_jar(&dir, &path.join("wharf-test").join("wharf-test.jar"));
    c.add_executor_with(
        0,
        vec![
            "--plugin-path".into(),
            path.display().to_string(),
            "--jvm-host-classpath".into(),
            classpath,
        ],
    )
    .await;
    c.wait_alive(1).await;
    (c, rest)
}

fn listed<'a>(plugins: &'a Value, class: &str) -> &'a Value {
    plugins
        .as_array()
        .expect("an array")
        .iter()
        .find(|p| p["class"] == class)
        .unwrap_or_else(|| panic!("{class} is listed: {plugins}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connectors_of_a_plugin_path_are_listed_and_run_through_wharf() {
    let (c, rest) = cluster_on_a_plugin_path().await;
    let a = rest.get("/connector-plugins").await;
    assert_eq!(a.status, 200);
    for (class, kind, version) in [
        (SOURCE, "source", "4.3.0"),
        (SINK, "sink", "4.3.0"),
        (PLAIN, "source", "1.0"),
        (AWARE, "source", "1.0"),
    ] {
        let p = listed(&a.body, class);
        assert_eq!(
            (p["type"].as_str(), p["version"].as_str()),
            (Some(kind), Some(version)),
            "{p}"
        );
    }
    // The Java connector's own ConfigDef is its config definition.
    let a = rest
        .get(&format!("/connector-plugins/{SOURCE}/config"))
        .await;
    assert_eq!(a.status, 200);
    assert!(
        a.body
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["name"] == "topic"),
        "{}",
        a.body
    );

    let dir = c.dir.path().to_path_buf();
    let input = dir.join("in.txt");
    let output = dir.join("out.txt");
    std::fs::write(&input, "alpha\nbeta\n").unwrap();
    for (name, config) in [
        (
            "fs-source",
            json!({ "connector.class": SOURCE, "tasks.max": "1", "file": input.display().to_string(), "topic": "lines" }),
        ),
        (
            "fs-sink",
            json!({ "connector.class": SINK, "tasks.max": "1", "file": output.display().to_string(), "topics": "lines" }),
        ),
    ] {
        let r = c.call("CreateConnector", json!({ "name": name, "config": config }));
        assert_eq!(r.code, 0, "{name}: {}", r.err);
    }
    let text = wait_until("the sink wrote alpha and beta", CONVERGE, || {
        let output = output.clone();
        async move {
            let text = std::fs::read_to_string(&output).unwrap_or_default();
            (text.lines().count() >= 2).then_some(text)
        }
    })
    .await;
    assert_eq!(text, "alpha\nbeta\n");
    for name in ["fs-source", "fs-sink"] {
        delete_and_wait(&c, name).await;
    }
}

async fn delete_and_wait(c: &TestCluster, name: &str) {
    let r = c.call("DeleteConnector", json!({ "name": name }));
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until(&format!("{name} deleted"), CONVERGE, || async {
        (c.call("GetConnector", json!({ "name": name })).code == NOT_FOUND).then_some(())
    })
    .await;
}

fn events(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The steps of a deletion plan or status (proto3 JSON), as `(owner,
/// cleanupNotSupported)`.
fn marked(steps: &Value) -> Vec<(String, bool)> {
    steps
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|s| {
            let owner = match s["task"].as_u64() {
                Some(t) => format!("task-{t}"),
                None => "connector".to_owned(),
            };
            (owner, s["cleanupNotSupported"] == true)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_says_cleanup_is_not_supported_by_a_plugin_without_a_deletion_aware_stop() {
    let (c, rest) = cluster_on_a_plugin_path().await;
    let dir = c.dir.path().to_path_buf();
    let gate = dir.join("gate");
    for (name, class) in [("plain", PLAIN), ("aware", AWARE)] {
        let config = json!({
            "connector.class": class,
            "tasks.max": "1",
            "events.file": dir.join(format!("{name}.events")).display().to_string(),
            "stop.gate.file": gate.display().to_string(),
        });
        let r = c.call("CreateConnector", json!({ "name": name, "config": config }));
        assert_eq!(r.code, 0, "{name}: {}", r.err);
        c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
            .await;
    }

    // The dry run says it before anything happens, for the task and the connector.
    let plan = c.call(
        "DeleteConnector",
        json!({ "name": "plain", "dry_run": true }),
    );
    assert_eq!(
        marked(&plan.body["plan"]["steps"]),
        [("task-0".to_owned(), true), ("connector".to_owned(), true)],
        "{}",
        plan.body
    );
    let plan = c.call(
        "DeleteConnector",
        json!({ "name": "aware", "dry_run": true }),
    );
    assert_eq!(
        marked(&plan.body["plan"]["steps"]),
        [
            ("task-0".to_owned(), false),
            ("connector".to_owned(), false)
        ],
        "{}",
        plan.body
    );
    // Keeping resources asks no cleanup of anyone.
    let plan = c.call(
        "DeleteConnector",
        json!({ "name": "plain", "dry_run": true, "keep_resources": true }),
    );
    assert!(
        marked(&plan.body["plan"]["steps"]).iter().all(|(_, m)| !m),
        "{}",
        plan.body
    );

    // The deletion itself: PlainSource's connector stop() waits for the gate, so the
    // deletion's steps can be read while it runs, over gRPC and REST.
    let r = c.call("DeleteConnector", json!({ "name": "plain" }));
    assert_eq!(r.code, 0, "{}", r.err);
    let steps = wait_until("the task's cleanup step done", CONVERGE, || async {
        let s = c.status("plain")?;
        let steps = s["deletion"]["steps"].clone();
        (steps[0]["state"] == "CLEANUP_STATE_DONE").then_some(steps)
    })
    .await;
    assert_eq!(
        marked(&steps),
        [("task-0".to_owned(), true), ("connector".to_owned(), true)],
        "{steps}"
    );
    assert_eq!(steps[0]["connectorDeleted"], true, "{steps}");
    let a = rest.get("/connectors/plain/status").await;
    let rest_steps = a.body["wharf_deletion"]["steps"].clone();
    assert_eq!(rest_steps[0]["cleanup_not_supported"], true, "{}", a.body);
    std::fs::write(&gate, b"").unwrap();
    wait_until("plain deleted", CONVERGE, || async {
        (c.call("GetConnector", json!({ "name": "plain" })).code == NOT_FOUND).then_some(())
    })
    .await;
    // What ran: the plain stops, never a stop(boolean).
    assert_eq!(
        events(&dir.join("plain.events")),
        [
            "connector start",
            "task start",
            "task stop()",
            "connector stop()"
        ]
    );

    delete_and_wait(&c, "aware").await;
    assert_eq!(
        events(&dir.join("aware.events")),
        [
            "connector start",
            "task start",
            "task stop(true)",
            "connector stop(true)"
        ]
    );
}
