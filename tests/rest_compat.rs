//! The Kafka Connect REST gateway, as a Connect client sees it: the requests a Connect
//! client sends, answered with Kafka Connect 4.x's status codes and JSON shapes, checked
//! field by field (source: the Kafka Connect REST reference of Apache Kafka 4.0, see
//! docs/rest.md); Wharf's deletion extensions; bad input answered with Connect's error
//! body and nothing changed; and the same flow as an operator's curl + jq script
//! (tests/rest_curl.sh). Real control plane with `--rest-listen`, real executors.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, TestCluster};
use wharf_harness::rest::{Answer, Rest, start_with_rest};
use wharf_harness::wait_until;

/// A cluster whose control plane also serves REST on a free port.
async fn start(executors: usize) -> (TestCluster, Rest) {
    start_with_rest(executors, &[]).await
}

/// Asserts Connect's error body: `{"error_code": status, "message": non-empty}` and no
/// other field.
fn assert_error(a: &Answer, status: u16, says: &str) {
    assert_eq!(a.status, status, "{a:?}");
    let obj = a.body.as_object().expect("error body is an object");
    assert_eq!(
        obj.len(),
        2,
        "error body has exactly two fields: {}",
        a.body
    );
    assert_eq!(a.body["error_code"], status, "{}", a.body);
    let msg = a.body["message"].as_str().expect("message is a string");
    assert!(
        msg.contains(says),
        "message {msg:?} should contain {says:?}"
    );
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
    k.sort();
    k
}

/// Connect's status shape: `{"name", "connector": {"state", "worker_id"}, "tasks":
/// [{"id", "state", "worker_id"}], "type"}` (`trace` only with an error).
fn assert_status_shape(s: &Value, name: &str, tasks: usize) {
    assert_eq!(s["name"], name, "{s}");
    assert_eq!(s["type"], "source", "{s}");
    assert!(s["connector"]["state"].is_string(), "{s}");
    assert!(s["connector"]["worker_id"].is_string(), "{s}");
    let ts = s["tasks"].as_array().expect("tasks array");
    assert_eq!(ts.len(), tasks, "{s}");
    for (i, t) in ts.iter().enumerate() {
        assert_eq!(t["id"], i, "{s}");
        assert!(t["state"].is_string(), "{s}");
        assert!(t["worker_id"].is_string(), "{s}");
    }
}

/// Creates test-source connector `name` with `tasks` tasks over `POST /connectors` and
/// asserts the 201.
async fn create_source(c: &TestCluster, rest: &Rest, name: &str, tasks: u32) {
    let a = rest
        .json(
            "POST",
            "/connectors",
            &json!({ "name": name, "config": c.source_config(name, tasks) }),
        )
        .await;
    assert_eq!(a.status, 201, "{a:?}");
}

/// Creates connector `name` with config `cfg` over `POST /connectors` (201) and waits
/// until it and its `tasks` tasks run.
async fn create_running(rest: &Rest, name: &str, cfg: Value, tasks: usize) {
    let a = rest
        .json(
            "POST",
            "/connectors",
            &json!({ "name": name, "config": cfg }),
        )
        .await;
    assert_eq!(a.status, 201, "{a:?}");
    wait_connector_state(rest, name, "RUNNING", tasks).await;
}

async fn wait_connector_state(rest: &Rest, name: &str, state: &str, tasks: usize) -> Value {
    wait_until(
        &format!("{name}: connector and {tasks} tasks {state} over REST"),
        CONVERGE,
        || async {
            let a = rest.get(&format!("/connectors/{name}/status")).await;
            let s = a.body;
            let ts = s["tasks"].as_array().cloned().unwrap_or_default();
            (a.status == 200
                && s["connector"]["state"] == state
                && ts.len() == tasks
                && ts.iter().all(|t| t["state"] == state))
            .then_some(s)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_client_gets_connects_status_codes_and_json_shapes() {
    let (c, rest) = start(1).await;

    // GET / and KIP-1017's /health.
    let a = rest.get("/").await;
    assert_eq!(a.status, 200);
    for k in ["version", "commit", "kafka_cluster_id"] {
        assert!(a.body[k].is_string(), "{k}: {}", a.body);
    }
    assert!(a.body["version"].as_str().unwrap().starts_with("4."));
    let a = rest.get("/health").await;
    assert_eq!(a.status, 200);
    assert_eq!(a.body["status"], "healthy");
    assert!(a.body["message"].is_string());

    // Plugins: [{"class", "type", "version"}].
    let a = rest.get("/connector-plugins").await;
    assert_eq!(a.status, 200);
    let p = a
        .body
        .as_array()
        .expect("array")
        .iter()
        .find(|p| p["class"] == "test-source")
        .cloned()
        .expect("test-source offered");
    assert_eq!(p["type"], "source");
    assert!(p["version"].is_string());
    assert!(
        !a.body
            .as_array()
            .expect("array")
            .iter()
            .any(|p| p["type"] == "transformation"),
        "connectors only by default"
    );
    let a = rest.get("/connector-plugins?connectorsOnly=false").await;
    assert_eq!(a.status, 200);
    let listed = a.body.as_array().expect("array");
    for (class, kind) in [
        (
            "org.apache.kafka.connect.transforms.MaskField$Value",
            "transformation",
        ),
        (
            "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
            "predicate",
        ),
        ("org.apache.kafka.connect.json.JsonConverter", "converter"),
        (
            "org.apache.kafka.connect.storage.SimpleHeaderConverter",
            "header_converter",
        ),
    ] {
        assert!(
            listed
                .iter()
                .any(|p| p["class"] == class && p["type"] == kind),
            "{class} listed as {kind}: {}",
            a.body
        );
    }
    assert!(
        listed.iter().any(|p| p["class"] == "test-source"),
        "the connectors too"
    );
    // KIP-769: the plugin's keys as ConfigKeyInfo.
    let a = rest.get("/connector-plugins/test-source/config").await;
    assert_eq!(a.status, 200);
    let tasks_max = a
        .body
        .as_array()
        .expect("array")
        .iter()
        .find(|k| k["name"] == "tasks.max")
        .cloned()
        .expect("tasks.max listed");
    for (k, v) in [
        ("type", json!("INT")),
        ("required", json!(false)),
        ("default_value", json!("1")),
        ("importance", json!("HIGH")),
    ] {
        assert_eq!(tasks_max[k], v, "{k}: {tasks_max}");
    }
    for k in ["documentation", "group", "width", "display_name"] {
        assert!(tasks_max[k].is_string(), "{k}: {tasks_max}");
    }
    assert!(tasks_max["dependents"].is_array());
    assert!(tasks_max["order_in_group"].is_number());
    assert_error(
        &rest.get("/connector-plugins/no-such/config").await,
        404,
        "no-such",
    );

    // Validate a good and a bad config.
    let name = "rc";
    let mut cfg = c.source_config(name, 2);
    let a = rest
        .json(
            "PUT",
            "/connector-plugins/test-source/config/validate",
            &cfg,
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body["name"], "test-source");
    assert_eq!(a.body["error_count"], 0, "{}", a.body);
    assert!(a.body["groups"].is_array());
    let entry = a.body["configs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["value"]["name"] == "tasks.max")
        .cloned()
        .expect("tasks.max entry");
    assert_eq!(entry["definition"]["name"], "tasks.max");
    assert_eq!(entry["value"]["value"], "2");
    assert_eq!(entry["value"]["errors"], json!([]));
    assert_eq!(entry["value"]["visible"], true);
    assert!(entry["value"]["recommended_values"].is_array());
    let mut bad = cfg.clone();
    bad["tasks.max"] = json!("03");
    bad["task.max"] = json!("3");
    let a = rest
        .json(
            "PUT",
            "/connector-plugins/test-source/config/validate",
            &bad,
        )
        .await;
    assert_eq!(a.status, 200);
    assert_eq!(a.body["error_count"], 1, "{}", a.body);
    let errors = &a.body["configs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["value"]["name"] == "tasks.max")
        .unwrap()["value"]["errors"];
    assert!(
        errors[0].as_str().unwrap().contains("leading zeros"),
        "{errors}"
    );
    assert_eq!(a.body["wharf_warning_count"], 1, "{}", a.body);
    assert!(
        a.body["wharf_warnings"][0]
            .as_str()
            .unwrap()
            .contains("did you mean \"tasks.max\""),
        "{}",
        a.body
    );
    // A connector.class in the body that is not the path's plugin.
    let a = rest
        .json("PUT", "/connector-plugins/test-sink/config/validate", &cfg)
        .await;
    assert_error(&a, 400, "does not match");
    // An unknown class: the error is on connector.class; its other keys get no warning
    // (nothing says which keys an unknown plugin reads).
    let a = rest
        .json(
            "PUT",
            "/connector-plugins/NoSuchPlugin/config/validate",
            &json!({ "connector.class": "NoSuchPlugin", "file": "x", "tasks.max": "1" }),
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body["error_count"], 1, "{}", a.body);
    assert_eq!(a.body["wharf_warning_count"], 0, "{}", a.body);
    assert!(a.body.to_string().contains("unknown plugin"), "{}", a.body);

    // Create: 201, Location, ConnectorInfo. tasks.max as a JSON number, as Connect takes it.
    cfg["tasks.max"] = json!(2);
    cfg["db.password"] = json!("pa55-not-shown");
    let a = rest
        .json(
            "POST",
            "/connectors",
            &json!({ "name": name, "config": cfg }),
        )
        .await;
    assert_eq!(a.status, 201, "{a:?}");
    // Absolute, as Connect builds it from the request's URI.
    assert_eq!(
        a.headers.get("location").map(|v| v.to_str().unwrap()),
        Some(format!("http://{}/connectors/rc", rest.addr).as_str())
    );
    assert_eq!(keys(&a.body), ["config", "name", "tasks", "type"]);
    assert_eq!(a.body["name"], name);
    assert_eq!(a.body["type"], "source");
    assert_eq!(a.body["config"]["name"], name);
    assert_eq!(a.body["config"]["tasks.max"], "2");
    assert_eq!(a.body["config"]["db.password"], "[hidden]");
    // The same core behind both APIs: gRPC sees the connector REST created.
    let r = c.call("GetConnector", json!({ "name": name }));
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.body["connector"]["config"]["tasks.max"], "2");
    // 409 when the name exists.
    let a = rest
        .json(
            "POST",
            "/connectors",
            &json!({ "name": name, "config": cfg }),
        )
        .await;
    assert_error(&a, 409, "already exists");
    // tasks.max "03" is refused, naming the field and what is allowed.
    let mut zero = c.source_config("rc-zero", 1);
    zero["tasks.max"] = json!("03");
    let a = rest
        .json(
            "POST",
            "/connectors",
            &json!({ "name": "rc-zero", "config": zero }),
        )
        .await;
    assert_error(&a, 400, "config[tasks.max]");
    assert!(a.body["message"].as_str().unwrap().contains("allowed"));

    let s = wait_connector_state(&rest, name, "RUNNING", 2).await;
    assert_status_shape(&s, name, 2);
    assert!(s.get("wharf_deletion").is_none(), "{s}");

    // List: names; expand=status; expand=info; both.
    let a = rest.get("/connectors").await;
    assert_eq!(a.status, 200);
    assert_eq!(a.body, json!([name]));
    let a = rest.get("/connectors?expand=status").await;
    assert_eq!(keys(&a.body[name]), ["status"]);
    assert_status_shape(&a.body[name]["status"], name, 2);
    let a = rest.get("/connectors?expand=info").await;
    assert_eq!(keys(&a.body[name]), ["info"]);
    assert_eq!(a.body[name]["info"]["name"], name);
    let a = rest.get("/connectors?expand=status&expand=info").await;
    assert_eq!(keys(&a.body[name]), ["info", "status"]);

    // Get, config, tasks, task status.
    let a = rest.get("/connectors/rc").await;
    assert_eq!(a.status, 200);
    assert_eq!(
        a.body["tasks"],
        json!([{ "connector": name, "task": 0 }, { "connector": name, "task": 1 }])
    );
    let a = rest.get("/connectors/rc/config").await;
    assert_eq!(a.status, 200);
    assert_eq!(a.body["name"], name);
    assert_eq!(a.body["db.password"], "[hidden]");
    let read_back = a.body.clone();
    let a = rest.get("/connectors/rc/tasks").await;
    assert_eq!(a.status, 200);
    let ts = a.body.as_array().expect("array");
    assert_eq!(ts.len(), 2);
    assert_eq!(ts[1]["id"], json!({ "connector": name, "task": 1 }));
    assert!(ts[1]["config"].is_object());
    // As Connect's worker shows them: the task's class (the plugin) and the name.
    assert_eq!(ts[1]["config"]["task.class"], "test-source", "{}", a.body);
    assert_eq!(ts[1]["config"]["name"], name, "{}", a.body);
    let a = rest.get("/connectors/rc/tasks/1/status").await;
    assert_eq!(a.status, 200);
    assert_eq!(a.body["id"], 1);
    assert_eq!(a.body["state"], "RUNNING");
    assert!(a.body["worker_id"].is_string());
    assert_error(
        &rest.get("/connectors/rc/tasks/7/status").await,
        404,
        "task 7",
    );
    assert_error(&rest.get("/connectors/nope/status").await, 404, "not found");

    // GET config -> PUT config: 200 (updated), the secret is kept, not "[hidden]".
    let a = rest.json("PUT", "/connectors/rc/config", &read_back).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body["config"]["db.password"], "[hidden]");
    // The same round trip over gRPC: GetConnector -> PutConnectorConfig keeps the secret.
    let r = c.call("GetConnector", json!({ "name": name }));
    assert_eq!(r.body["connector"]["config"]["db.password"], "[hidden]");
    let r = c.call(
        "PutConnectorConfig",
        json!({ "name": name, "config": r.body["connector"]["config"] }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.body["created"], false, "{}", r.body);
    let mut never_grpc = r.body["connector"]["config"].clone();
    never_grpc["api.token"] = json!("[hidden]");
    let r = c.call(
        "PutConnectorConfig",
        json!({ "name": name, "config": never_grpc }),
    );
    assert_eq!(r.code, wharf_harness::cluster::INVALID_ARGUMENT, "{r:?}");
    assert!(r.err.contains("config[api.token]"), "{}", r.err);
    // The placeholder for a secret that was never stored is refused, naming the key.
    let mut never = read_back.clone();
    never["api.token"] = json!("[hidden]");
    let a = rest.json("PUT", "/connectors/rc/config", &never).await;
    assert_error(&a, 400, "config[api.token]");
    // A name in the config that is not the URL's.
    let mut other = read_back.clone();
    other["name"] = json!("someone-else");
    assert_error(
        &rest.json("PUT", "/connectors/rc/config", &other).await,
        400,
        "does not match",
    );
    // PUT of a new name creates: 201.
    let mut fresh = c.source_config("rc-put", 1);
    fresh["name"] = json!("rc-put");
    let a = rest.json("PUT", "/connectors/rc-put/config", &fresh).await;
    assert_eq!(a.status, 201, "{a:?}");
    assert_eq!(a.body["name"], "rc-put");
    // PATCH (KIP-477): merge, null removes a key.
    let a = rest
        .json(
            "PATCH",
            "/connectors/rc-put/config",
            &json!({ "test.records.per.poll": "2", "test.poll.block.ms": null }),
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body["config"]["test.records.per.poll"], "2");
    assert!(
        a.body["config"].get("test.poll.block.ms").is_none(),
        "{}",
        a.body
    );
    assert_error(
        &rest
            .json("PATCH", "/connectors/nope/config", &json!({ "a": "b" }))
            .await,
        404,
        "not found",
    );

    // Pause and resume: 202, no body.
    let a = rest.empty("PUT", "/connectors/rc/pause").await;
    assert_eq!((a.status, &a.body), (202, &Value::Null));
    wait_connector_state(&rest, name, "PAUSED", 2).await;
    let a = rest.empty("PUT", "/connectors/rc/resume").await;
    assert_eq!((a.status, &a.body), (202, &Value::Null));
    wait_connector_state(&rest, name, "RUNNING", 2).await;

    // Restart (KIP-745): no flags 204; with flags 202 and the status body.
    let a = rest.empty("POST", "/connectors/rc/restart").await;
    assert_eq!((a.status, &a.body), (204, &Value::Null));
    wait_connector_state(&rest, name, "RUNNING", 2).await;
    let a = rest
        .empty(
            "POST",
            "/connectors/rc/restart?includeTasks=true&onlyFailed=false",
        )
        .await;
    assert_eq!(a.status, 202, "{a:?}");
    assert_status_shape(&a.body, name, 2);
    assert_eq!(a.body["tasks"][0]["state"], "RESTARTING", "{}", a.body);
    wait_connector_state(&rest, name, "RUNNING", 2).await;
    let a = rest
        .empty(
            "POST",
            "/connectors/rc/restart?includeTasks=true&onlyFailed=true",
        )
        .await;
    assert_eq!(a.status, 202, "{a:?}");
    // Nothing FAILED: nothing restarts.
    assert_eq!(a.body["tasks"][0]["state"], "RUNNING", "{}", a.body);
    let a = rest.empty("POST", "/connectors/rc/tasks/0/restart").await;
    assert_eq!(a.status, 204, "{a:?}");
    assert_error(
        &rest.empty("POST", "/connectors/rc/tasks/9/restart").await,
        404,
        "task 9",
    );
    wait_connector_state(&rest, name, "RUNNING", 2).await;

    // Offsets (KIP-875): refused unless STOPPED.
    let a = rest
        .json(
            "PATCH",
            "/connectors/rc/offsets",
            &json!({ "offsets": [{ "partition": { "task": 0 }, "offset": { "seq": 1 } }] }),
        )
        .await;
    assert_error(&a, 400, "STOPPED");
    assert_error(
        &rest.empty("DELETE", "/connectors/rc/offsets").await,
        400,
        "STOPPED",
    );
    let a = rest.empty("PUT", "/connectors/rc/stop").await;
    assert_eq!((a.status, &a.body), (204, &Value::Null));
    // KIP-875: a STOPPED connector has no tasks, in its status, its tasks and its info.
    wait_connector_state(&rest, name, "STOPPED", 0).await;
    assert_eq!(rest.get("/connectors/rc/tasks").await.body, json!([]));
    assert_eq!(rest.get("/connectors/rc").await.body["tasks"], json!([]));
    assert_error(
        &rest.get("/connectors/rc/tasks/0/status").await,
        404,
        "task 0",
    );
    // A restart of a STOPPED connector is answered as Connect does (204) and restarts
    // nothing: it stays STOPPED until resumed.
    let a = rest.empty("POST", "/connectors/rc/restart").await;
    assert_eq!((a.status, &a.body), (204, &Value::Null));
    let a = rest
        .empty("POST", "/connectors/rc/restart?includeTasks=true")
        .await;
    assert_eq!(a.status, 202, "{a:?}");
    assert_eq!(a.body["connector"]["state"], "STOPPED", "{}", a.body);
    assert_eq!(a.body["tasks"], json!([]), "{}", a.body);
    assert_error(
        &rest.empty("POST", "/connectors/rc/tasks/0/restart").await,
        404,
        "task 0",
    );
    assert_eq!(
        rest.get("/connectors/rc/status").await.body["connector"]["state"],
        "STOPPED"
    );
    let a = rest.get("/connectors/rc/offsets").await;
    assert_eq!(a.status, 200);
    assert_eq!(keys(&a.body), ["offsets"]);
    for o in a.body["offsets"].as_array().unwrap() {
        assert!(o["partition"].is_object() && o["offset"].is_object(), "{o}");
    }
    let a = rest
        .json(
            "PATCH",
            "/connectors/rc/offsets",
            &json!({ "offsets": [{ "partition": { "task": 0 }, "offset": { "seq": 12345 } }] }),
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert!(a.body["message"].is_string());
    let a = rest.get("/connectors/rc/offsets").await;
    assert!(
        a.body["offsets"]
            .as_array()
            .unwrap()
            .contains(&json!({ "partition": { "task": 0 }, "offset": { "seq": 12345 } })),
        "{}",
        a.body
    );
    let a = rest.empty("DELETE", "/connectors/rc/offsets").await;
    assert_eq!(a.status, 200, "{a:?}");
    assert!(a.body["message"].is_string());
    let a = rest.get("/connectors/rc/offsets").await;
    assert_eq!(a.body, json!({ "offsets": [] }));

    // Delete: 204; the connector is gone (404) once its cleanup ran.
    let a = rest.empty("DELETE", "/connectors/rc").await;
    assert_eq!((a.status, &a.body), (204, &Value::Null));
    wait_until("rc gone over REST", CONVERGE, || async {
        (rest.get("/connectors/rc").await.status == 404).then_some(())
    })
    .await;
    assert_error(&rest.get("/connectors/rc").await, 404, "not found");
    assert_error(&rest.get("/connectors/rc/status").await, 404, "not found");
    assert_error(
        &rest.empty("DELETE", "/connectors/rc").await,
        404,
        "not found",
    );
    // The deletion was a real one: every task got its stop(connector_deleted = true).
    let lifecycle = std::fs::read_to_string(c.lifecycle_path(name)).unwrap_or_default();
    for task in [0, 1] {
        assert!(
            lifecycle.lines().any(|l| {
                let v: Value = serde_json::from_str(l).unwrap_or(Value::Null);
                v["task"] == task && v["connector_deleted"] == true && v["ok"] == true
            }),
            "task {task} got no completed stop(true):\n{lifecycle}"
        );
    }
    let a = rest.empty("DELETE", "/connectors/rc-put?wait=true").await;
    assert_eq!(a.status, 204, "{a:?}");
    assert_eq!(rest.get("/connectors/rc-put").await.status, 404);
}

/// The ConfigKeyInfo called `name` in a plugin config answer.
fn config_key<'a>(a: &'a Answer, name: &str) -> &'a Value {
    a.body
        .as_array()
        .unwrap_or_else(|| panic!("an array: {a:?}"))
        .iter()
        .find(|k| k["name"] == name)
        .unwrap_or_else(|| panic!("{name} listed: {}", a.body))
}

/// KIP-769 for transformation and predicate plugins: the built-in ones' keys as Connect's
/// classes define them, under the class name with `$` percent-encoded (as Connect clients
/// send it) or literal, and without the runtime's connector keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_built_in_transforms_or_predicates_config_lists_its_keys() {
    let (_c, rest) = start(1).await;

    for path in [
        "/connector-plugins/org.apache.kafka.connect.transforms.MaskField%24Value/config",
        "/connector-plugins/org.apache.kafka.connect.transforms.MaskField$Value/config",
    ] {
        let a = rest.get(path).await;
        assert_eq!(a.status, 200, "{path}: {a:?}");
        let names: Vec<&str> = a
            .body
            .as_array()
            .expect("an array")
            .iter()
            .filter_map(|k| k["name"].as_str())
            .collect();
        assert_eq!(
            names,
            ["fields", "replacement", "replace.null.with.default"],
            "{path}"
        );
        let fields = config_key(&a, "fields");
        for (k, v) in [
            ("type", json!("LIST")),
            ("required", json!(true)),
            ("default_value", Value::Null),
            ("importance", json!("HIGH")),
        ] {
            assert_eq!(fields[k], v, "{k}: {fields}");
        }
        let replacement = config_key(&a, "replacement");
        for (k, v) in [
            ("type", json!("STRING")),
            ("required", json!(false)),
            ("default_value", Value::Null),
            ("importance", json!("LOW")),
        ] {
            assert_eq!(replacement[k], v, "{k}: {replacement}");
        }
        for k in ["documentation", "group", "width", "display_name"] {
            assert!(replacement[k].is_string(), "{k}: {replacement}");
        }
        assert!(replacement["order_in_group"].is_number(), "{replacement}");
        assert_eq!(
            config_key(&a, "replace.null.with.default")["default_value"],
            "true"
        );
    }

    let a = rest
        .get("/connector-plugins/org.apache.kafka.connect.transforms.predicates.TopicNameMatches/config")
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body.as_array().map(Vec::len), Some(1), "{}", a.body);
    let pattern = config_key(&a, "pattern");
    assert_eq!(pattern["type"], "STRING", "{pattern}");
    assert_eq!(pattern["required"], true, "{pattern}");
    assert_eq!(pattern["importance"], "MEDIUM", "{pattern}");

    // A built-in without keys answers an empty list; a name that is not built in (the
    // simple name, a class of the wrong package) is 404.
    let a = rest
        .get("/connector-plugins/org.apache.kafka.connect.transforms.predicates.RecordIsTombstone/config")
        .await;
    assert_eq!((a.status, a.body.clone()), (200, json!([])), "{a:?}");
    for class in [
        "MaskField%24Value",
        "org.apache.kafka.connect.transforms.predicates.MaskField%24Value",
        "org.apache.kafka.connect.transforms.NoSuchTransform",
    ] {
        assert_error(
            &rest
                .get(&format!("/connector-plugins/{class}/config"))
                .await,
            404,
            "not found",
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_waiting_for_its_executor_shows_deleting_with_the_waiting_step_then_404() {
    let (mut c, rest) = start(1).await;
    let name = "waits";
    create_source(&c, &rest, name, 1).await;
    wait_connector_state(&rest, name, "RUNNING", 1).await;

    // The only executor goes away: the cleanup has nowhere to run.
    c.executors[0].kill9();
    wait_until("exec-1 LOST", CONVERGE, || async {
        let r = c.call("ListExecutors", json!({}));
        (r.body["executors"][0]["state"] == "EXECUTOR_STATE_LOST").then_some(())
    })
    .await;

    // A client that expects 204 gets it: the deletion is recorded.
    let a = rest.empty("DELETE", "/connectors/waits").await;
    assert_eq!((a.status, &a.body), (204, &Value::Null));
    // An operator polling GET sees DELETING with the waiting steps.
    let a = rest.get("/connectors/waits/status").await;
    assert_eq!(a.status, 200, "{a:?}");
    let s = &a.body;
    assert_status_shape(s, name, 1);
    assert_eq!(s["connector"]["state"], "DELETING", "{s}");
    assert_eq!(s["tasks"][0]["state"], "DELETING", "{s}");
    let d = &s["wharf_deletion"];
    assert_eq!(d["cleanup"], true, "{s}");
    assert!(d["requested_at_ms"].is_number(), "{s}");
    let steps = d["steps"].as_array().expect("steps");
    assert_eq!(
        steps.len(),
        2,
        "one per task, then the connector instance: {s}"
    );
    assert_eq!(steps[0]["task"], 0, "{s}");
    assert_eq!(steps[1]["task"], Value::Null, "{s}");
    for step in steps {
        assert!(
            ["PENDING", "RUNNING", "FAILED"].contains(&step["state"].as_str().unwrap()),
            "a waiting step: {s}"
        );
        assert_eq!(step["connector_deleted"], true, "{s}");
        for k in ["worker_id", "last_error"] {
            assert!(step[k].is_string(), "{k}: {s}");
        }
        assert!(step["attempts"].is_number(), "{s}");
    }
    // Listed while it lasts, and its name cannot be taken meanwhile (409).
    assert_eq!(rest.get("/connectors").await.body, json!([name]));
    let a = rest
        .json(
            "POST",
            "/connectors",
            &json!({ "name": name, "config": c.source_config(name, 1) }),
        )
        .await;
    assert_error(&a, 409, "being deleted");
    // A waiting DELETE that cannot finish says so (504) and changes nothing.
    let a = rest
        .empty("DELETE", "/connectors/waits?wait=true&waitTimeoutMs=500")
        .await;
    assert_error(&a, 504, "still in progress");
    // A retry now is accepted (202, the status).
    let a = rest.empty("POST", "/connectors/waits/cleanup/retry").await;
    assert_eq!(a.status, 202, "{a:?}");
    assert_eq!(a.body["connector"]["state"], "DELETING");

    // The executor comes back: the cleanup runs, then 404.
    c.add_executor(0).await;
    wait_until("waits gone over REST", CONVERGE, || async {
        (rest.get("/connectors/waits/status").await.status == 404).then_some(())
    })
    .await;
    let lifecycle = std::fs::read_to_string(c.lifecycle_path(name)).unwrap_or_default();
    assert!(
        lifecycle.lines().any(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or(Value::Null);
            v["task"] == 0 && v["connector_deleted"] == true && v["ok"] == true
        }),
        "task 0 got no completed stop(true):\n{lifecycle}"
    );
}

/// Method, path, body, content type, expected status, a part of the expected message.
type BadCase = (
    &'static str,
    &'static str,
    Option<Vec<u8>>,
    Option<&'static str>,
    u16,
    &'static str,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_connects_status_and_error_body_and_changes_nothing() {
    let (c, rest) = start(1).await;
    let name = "keep";
    create_source(&c, &rest, name, 1).await;
    wait_connector_state(&rest, name, "RUNNING", 1).await;
    let before = rest.get("/connectors?expand=info").await.body;
    let config_before = rest.get("/connectors/keep/config").await.body;

    let cases: Vec<BadCase> = vec![
        (
            "POST",
            "/connectors",
            Some(b"{\"name\": \"x\", \"config\": {".to_vec()),
            None,
            400,
            "not valid JSON",
        ),
        (
            "PUT",
            "/connectors/keep/config",
            Some(b"{\"tasks.max\": }".to_vec()),
            None,
            400,
            "not valid JSON",
        ),
        (
            "POST",
            "/connectors",
            Some(br#"{"name":"x","config":{"connector.class":"test-source"}}"#.to_vec()),
            Some("text/plain"),
            415,
            "415",
        ),
        (
            "PUT",
            "/connectors/keep/config",
            Some(br#"{"tasks.max":"2"}"#.to_vec()),
            Some("application/x-www-form-urlencoded"),
            415,
            "415",
        ),
        ("GET", "/no/such/route", None, None, 404, "404"),
        ("GET", "/connectors/keep/nonsense", None, None, 404, "404"),
        ("POST", "/connectors/keep", None, None, 405, "405"),
        // A name with '/' is another path: no route.
        ("GET", "/connectors/a/b", None, None, 404, "404"),
        (
            "PUT",
            "/connectors/a/b/config",
            Some(br#"{"connector.class":"test-source"}"#.to_vec()),
            None,
            404,
            "404",
        ),
        // Percent-encoded, it reaches the name rule.
        ("GET", "/connectors/a%2Fb", None, None, 400, "invalid name"),
        (
            "PUT",
            "/connectors/a%2Fb/config",
            Some(br#"{"connector.class":"test-source"}"#.to_vec()),
            None,
            400,
            "invalid name",
        ),
        (
            "POST",
            "/connectors",
            Some(br#"{"name":"a/b","config":{"connector.class":"test-source"}}"#.to_vec()),
            None,
            400,
            "invalid name",
        ),
        (
            "POST",
            "/connectors",
            Some(vec![b' '; 5 * 1024 * 1024]),
            None,
            413,
            "larger than",
        ),
        (
            "POST",
            "/connectors",
            Some(br#"{"name":"x"}"#.to_vec()),
            None,
            400,
            "no config",
        ),
        (
            "POST",
            "/connectors",
            Some(br#"{"name":"x","config":{"connector.class":["test-source"]}}"#.to_vec()),
            None,
            400,
            "config[connector.class]",
        ),
        (
            "POST",
            "/connectors/keep/restart?includeTasks=maybe",
            None,
            None,
            400,
            "includeTasks",
        ),
        // A parameter the route does not take: refused by name, not ignored (with
        // Kafka Connect this typo runs a plain delete).
        (
            "DELETE",
            "/connectors/keep?Force=true",
            None,
            None,
            400,
            "unknown query parameter \"Force\"",
        ),
        // A wait bound without wait=true would delete at once: refused, not ignored.
        (
            "DELETE",
            "/connectors/keep?waitTimeoutMs=5",
            None,
            None,
            400,
            "waitTimeoutMs=\"5\" needs wait=true",
        ),
        (
            "DELETE",
            "/connectors/keep?wait=false&waitTimeoutMs=5",
            None,
            None,
            400,
            "waitTimeoutMs=\"5\" needs wait=true",
        ),
        (
            "PUT",
            "/connectors/keep/pause?force=true",
            None,
            None,
            400,
            "unknown query parameter \"force\"",
        ),
        (
            "GET",
            "/connectors?expand=everything",
            None,
            None,
            400,
            "expand",
        ),
        (
            "GET",
            "/connectors/keep/tasks/x/status",
            None,
            None,
            400,
            "task id",
        ),
        (
            "PATCH",
            "/connectors/keep/offsets",
            Some(br#"{"offsets": "all"}"#.to_vec()),
            None,
            400,
            "offsets",
        ),
        (
            "PUT",
            "/admin/loggers/wharf_control_plane",
            Some(br#"{"level":"LOUD"}"#.to_vec()),
            None,
            404,
            "invalid log level",
        ),
        // An unknown top-level field is refused by name (as Connect's Jackson does), not
        // ignored: misspelt, initial_state would create a RUNNING connector.
        (
            "POST",
            "/connectors",
            Some(br#"{"name":"typo1","config":{"connector.class":"test-source"},"initialState":"PAUSED"}"#.to_vec()),
            None,
            400,
            "unknown field \"initialState\" in the body: the fields are name, config, initial_state; did you mean \"initial_state\"?",
        ),
        (
            "PATCH",
            "/connectors/keep/offsets",
            Some(br#"{"offsets":[],"reset":true}"#.to_vec()),
            None,
            400,
            "unknown field \"reset\"",
        ),
        (
            "PATCH",
            "/connectors/keep/offsets",
            Some(br#"{"offsets":[{"partition":{},"offset":{},"Offset":{}}]}"#.to_vec()),
            None,
            400,
            "unknown field \"Offset\" in offsets[0]",
        ),
        (
            "PUT",
            "/admin/loggers/wharf_control_plane",
            Some(br#"{"level":"DEBUG","scope":"cluster"}"#.to_vec()),
            None,
            400,
            "unknown field \"scope\"",
        ),
        // An empty config key names nothing: refused naming it, on every way in.
        (
            "POST",
            "/connectors",
            Some(br#"{"name":"x","config":{"connector.class":"test-source","":"v"}}"#.to_vec()),
            None,
            400,
            "invalid config[\"\"]: the key is empty",
        ),
        (
            "PUT",
            "/connectors/keep/config",
            Some(br#"{"connector.class":"test-source","":"v"}"#.to_vec()),
            None,
            400,
            "invalid config[\"\"]: the key is empty",
        ),
        (
            "PATCH",
            "/connectors/keep/config",
            Some(br#"{" tasks.max":"2"}"#.to_vec()),
            None,
            400,
            "invalid config[\" tasks.max\"]: the key has leading or trailing whitespace",
        ),
        // A body's name that is not the path's: one clean text for PUT and PATCH.
        (
            "PUT",
            "/connectors/keep/config",
            Some(br#"{"connector.class":"test-source","name":"other"}"#.to_vec()),
            None,
            400,
            "config[name] is \"other\", which does not match the connector name \"keep\" in the path",
        ),
        (
            "PATCH",
            "/connectors/keep/config",
            Some(br#"{"name":"other"}"#.to_vec()),
            None,
            400,
            "config[name] is \"other\", which does not match the connector name \"keep\" in the path",
        ),
        // A required list that names nothing: refused at create, not left to fail when
        // the task starts.
        (
            "POST",
            "/connectors",
            Some(br#"{"name":"notopic","config":{"connector.class":"file-sink","file":"out.jsonl","topics":" , "}}"#.to_vec()),
            None,
            400,
            "invalid config[topics]: value names no entry",
        ),
        (
            "PUT",
            "/connectors/notopic/config",
            Some(br#"{"connector.class":"file-sink","file":"out.jsonl","topics":""}"#.to_vec()),
            None,
            400,
            "invalid config[topics]: value names no entry",
        ),
    ];
    for (method, path, body, ct, status, says) in cases {
        let a = rest.send(method, path, body, ct).await;
        assert_error(&a, status, says);
        let a = rest.get("/connectors?expand=info").await;
        assert_eq!(a.body, before, "{method} {path} changed the connectors");
    }
    assert_eq!(
        rest.get("/connectors/keep/config").await.body,
        config_before
    );

    // Validate reports an empty key as an error on that key (200, as for every
    // validation), where create refuses it.
    let a = rest
        .json(
            "PUT",
            "/connector-plugins/test-source/config/validate",
            &json!({ "connector.class": "test-source", "": "v" }),
        )
        .await;
    assert_eq!(a.status, 200, "{:?}", a.body);
    let entry = a.body["configs"]
        .as_array()
        .and_then(|cs| cs.iter().find(|e| e["value"]["name"] == ""))
        .unwrap_or_else(|| panic!("no entry for the empty key: {}", a.body));
    let errors = entry["value"]["errors"].to_string();
    assert!(errors.contains("the key is empty"), "{entry}");
    assert!(a.body["error_count"].as_u64() >= Some(1), "{}", a.body);

    // ... and a required list that names nothing as an error on that list.
    let a = rest
        .json(
            "PUT",
            "/connector-plugins/file-sink/config/validate",
            &json!({ "connector.class": "file-sink", "file": "out.jsonl", "topics": "," }),
        )
        .await;
    assert_eq!(a.status, 200, "{:?}", a.body);
    let entry = a.body["configs"]
        .as_array()
        .and_then(|cs| cs.iter().find(|e| e["value"]["name"] == "topics"))
        .unwrap_or_else(|| panic!("no entry for topics: {}", a.body));
    assert!(
        entry["value"]["errors"]
            .to_string()
            .contains("names no entry"),
        "{entry}"
    );

    // PAUSED only with the field spelt right.
    let a = rest
        .json(
            "POST",
            "/connectors",
            &json!({ "name": "spelt", "config": c.source_config("spelt", 1), "initial_state": "PAUSED" }),
        )
        .await;
    assert_eq!(a.status, 201, "{:?}", a.body);
    // KIP-980, as Kafka Connect 3.9 does it: created PAUSED, the connector has no task
    // configs (no tasks) until it is resumed.
    wait_connector_state(&rest, "spelt", "PAUSED", 0).await;
    assert_eq!(rest.get("/connectors/spelt/tasks").await.body, json!([]));
    let a = rest.empty("PUT", "/connectors/spelt/resume").await;
    assert_eq!(a.status, 202, "{a:?}");
    wait_connector_state(&rest, "spelt", "RUNNING", 1).await;
}

/// A body cut short (Content-Length 100, ten bytes sent, then the client's side closed)
/// is a malformed request, 400 when the answer can still be written, and audited as
/// INVALID_ARGUMENT; only a body over the limit is 413. Nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_cut_short_is_a_bad_request_not_too_large() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (c, rest) = start(1).await;
    let mut stream = tokio::net::TcpStream::connect(&rest.addr)
        .await
        .expect("connect to the REST gateway");
    let head = format!(
        "POST /connectors HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"name\":\"",
        rest.addr
    );
    stream.write_all(head.as_bytes()).await.expect("send");
    stream.shutdown().await.expect("close the sending side");
    let mut answer = Vec::new();
    // The server may answer, or close without answering: the client is gone.
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 400"),
        "{answer}"
    );
    assert!(!answer.contains("larger than"), "{answer}");
    let entry = wait_until(
        "the refused create in the audit trail",
        CONVERGE,
        || async {
            let r = c.call("ListAuditEntries", json!({ "page_size": 1000 }));
            r.body["entries"]
                .as_array()
                .and_then(|es| es.iter().find(|e| e["rpc"] == "CreateConnector").cloned())
        },
    )
    .await;
    assert_eq!(entry["outcome"], "INVALID_ARGUMENT", "{entry}");
    assert!(
        entry["message"]
            .as_str()
            .unwrap_or_default()
            .contains("could not be read whole"),
        "{entry}"
    );
    assert_eq!(rest.get("/connectors").await.body, json!([]));
}

/// `/admin/loggers` starts from the process's `RUST_LOG` and a change keeps it for every
/// other logger (KIP-495): a control plane started at `warn` shows root WARN, and raising
/// one target to INFO brings that target's INFO lines and nobody else's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logger_changed_at_run_time_keeps_what_rust_log_set_for_the_others() {
    let (c, rest) = start_with_rest(1, &[("RUST_LOG", "warn")]).await;
    let a = rest.get("/admin/loggers").await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body["root"]["level"], "WARN", "{}", a.body);

    let a = rest
        .json(
            "PUT",
            "/admin/loggers/wharf_control_plane::admin",
            &json!({ "level": "INFO" }),
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    let name = "leveled";
    create_source(&c, &rest, name, 2).await;
    wait_until("the admin target's INFO line", CONVERGE, || async {
        c.cp_log().contains("connector created").then_some(())
    })
    .await;
    wait_connector_state(&rest, name, "RUNNING", 2).await;
    let log = c.cp_log();
    let others: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" INFO ") && !l.contains("wharf_control_plane::admin:"))
        .collect();
    assert!(
        others.is_empty(),
        "only the raised target logs at INFO; RUST_LOG=warn still holds for: {others:#?}"
    );

    // KIP-976's cluster scope: 204 without a body, as Connect answers it; the level is set.
    let a = rest
        .json(
            "PUT",
            "/admin/loggers/wharf_control_plane::plan?scope=cluster",
            &json!({ "level": "DEBUG" }),
        )
        .await;
    assert_eq!((a.status, &a.body), (204, &Value::Null), "{a:?}");
    let a = rest.get("/admin/loggers/wharf_control_plane::plan").await;
    assert_eq!(a.body["level"], "DEBUG", "{a:?}");
    // A logger with no level set: 404, as Connect answers a logger it does not know.
    assert_error(
        &rest.get("/admin/loggers/no.such.logger").await,
        404,
        "no level set",
    );
    // OPTIONS on a route: 200 with the methods it serves, as Connect's Jersey answers.
    let a = rest.empty("OPTIONS", "/connectors").await;
    assert_eq!((a.status, &a.body), (200, &Value::Null), "{a:?}");
    let allow = a
        .headers
        .get("allow")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    assert!(allow.contains("GET") && allow.contains("POST"), "{allow:?}");
}

/// tests/rest_curl.sh: the same flow as an operator's script, plain curl and jq.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_curl_and_jq_script_runs_the_connect_flow() {
    let (c, rest) = start(1).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/rest_curl.sh");
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new("bash")
            .arg(&script)
            .env("CONNECT_URL", format!("http://{}", rest.addr))
            .env(
                "LIFECYCLE_PATH",
                c.lifecycle_path("curl-demo").display().to_string(),
            )
            .output(),
    )
    .await
    .expect("the script finishes within 120 s")
    .expect("bash runs");
    assert!(
        out.status.success(),
        "rest_curl.sh failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_that_gave_up_its_cleanup_says_so_in_a_header() {
    let (c, rest) = start(1).await;
    let name = "rc-leaky";
    let mut cfg = c.source_config(name, 1);
    cfg["test.stop.fail.times"] = json!("100");
    cfg["cleanup.max.attempts"] = json!("1");
    cfg["cleanup.policy"] = json!("give-up");
    create_running(&rest, name, cfg, 1).await;
    let a = rest
        .send(
            "DELETE",
            &format!("/connectors/{name}?wait=true"),
            None,
            None,
        )
        .await;
    // Connect's 204, and the cleanup the policy gave up named beside it.
    assert_eq!(a.status, 204, "{a:?}");
    assert_eq!(
        a.headers
            .get("wharf-cleanup-skipped")
            .and_then(|v| v.to_str().ok()),
        Some("given up: task 0, connector"),
        "{a:?}"
    );
    assert_eq!(rest.get(&format!("/connectors/{name}")).await.status, 404);

    // Deleting again in the other mode while a slow cleanup runs: Connect's 409.
    let slow = "rc-slow";
    let mut cfg = c.source_config(slow, 1);
    cfg["test.stop.delay.ms"] = json!("2000");
    create_running(&rest, slow, cfg, 1).await;
    let path = format!("/connectors/{slow}");
    assert_eq!(rest.send("DELETE", &path, None, None).await.status, 204);
    let a = rest
        .send("DELETE", &format!("{path}?keepResources=true"), None, None)
        .await;
    assert_eq!(a.status, 409, "{a:?}");
    assert!(
        a.body["message"]
            .as_str()
            .is_some_and(|m| m.contains("already being deleted with cleanup")),
        "{a:?}"
    );
}
