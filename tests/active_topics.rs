//! KIP-558 active topics through the REST gateway, with real processes on the embedded
//! record log: `GET /connectors/{name}/topics` shows the topics a source wrote to and a
//! sink read from, `PUT /connectors/{name}/topics/reset` empties the set, and a topic
//! used again comes back (docs/kafka.md, "Active topics"). The Kafka log's run is in
//! `tests/kafka_connectors.rs`.

use serde_json::{Value, json};
use wharf_harness::cluster::CONVERGE;
use wharf_harness::lines::append_lines;
use wharf_harness::rest::{Rest, start_with_rest};
use wharf_harness::wait_until;

/// Waits until `GET /connectors/{name}/topics` answers `{"<name>": {"topics": want}}`.
async fn topics_become(rest: &Rest, name: &str, want: &[&str]) {
    let expected = json!({ name: { "topics": want } });
    wait_until(
        &format!("{name}'s active topics {want:?}"),
        CONVERGE,
        || async {
            let a = rest.get(&format!("/connectors/{name}/topics")).await;
            (a.status == 200 && a.body == expected).then_some(())
        },
    )
    .await;
}

fn create(name: &str, config: Value) -> Value {
    json!({ "name": name, "config": config })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_topics_show_what_tasks_used_and_a_reset_empties_them_until_used_again() {
    let (c, rest) = start_with_rest(1, &[]).await;
    let input = c.dir.path().join("in.jsonl");
    let output = c.dir.path().join("out.jsonl");
    append_lines(&input, 0..5);
    let a = rest
        .json(
            "POST",
            "/connectors",
            &create(
                "at-source",
                json!({
                    "connector.class": "file-source",
                    "file": input.display().to_string(),
                    "topic": "at-lines",
                }),
            ),
        )
        .await;
    assert_eq!(a.status, 201, "{a:?}");
    let a = rest
        .json(
            "POST",
            "/connectors",
            &create(
                "at-sink",
                json!({
                    "connector.class": "file-sink",
                    "file": output.display().to_string(),
                    "topics": "at-lines",
                }),
            ),
        )
        .await;
    assert_eq!(a.status, 201, "{a:?}");

    topics_become(&rest, "at-source", &["at-lines"]).await;
    topics_become(&rest, "at-sink", &["at-lines"]).await;

    // Connect's shapes: an unknown connector is 404 with its error body.
    let a = rest.get("/connectors/nobody/topics").await;
    assert_eq!(a.status, 404, "{a:?}");
    assert_eq!(a.body["error_code"], 404, "{a:?}");

    // Reset: 200 without a body, and the set is empty.
    let a = rest
        .empty("PUT", "/connectors/at-source/topics/reset")
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body, Value::Null);
    let a = rest.get("/connectors/at-source/topics").await;
    assert_eq!(a.body, json!({ "at-source": { "topics": [] } }));
    let a = rest.empty("PUT", "/connectors/nobody/topics/reset").await;
    assert_eq!(a.status, 404, "{a:?}");

    // The same over gRPC: GetConnectorTopics.
    let r = c.call("GetConnectorTopics", json!({ "name": "at-sink" }));
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.body["topics"], json!(["at-lines"]));

    // Used again: the topic comes back.
    append_lines(&input, 5..10);
    topics_become(&rest, "at-source", &["at-lines"]).await;
}
