//! The resource ledger through the whole system (docs/resources.md): a real control plane
//! and executor (NATS JetStream record log), a test-owned RabbitMQ node and SQLite files.
//!
//! - two `rabbitmq-sink` connectors on one queue: the second is refused at create, naming
//!   the first, also when its URI spells the broker `LOCALHOST.` instead of `127.0.0.1`; a queue the user declared before is adopted, survives the deletion with its
//!   messages; the deletion plan (dry run) lists exactly the queues the deletion removes;
//! - a `sqlite-audit` connector whose database file was moved away: its deletion does not
//!   report success, the step names the audit table and the 3 triggers; forcing it leaves
//!   them as orphans with their path, and an admin moves them into another connector;
//! - dry run then deletion of a `sqlite-audit` connector: the plan's entries are exactly
//!   what leaves `sqlite_master`; the watched table (adopted) stays;
//! - the control plane killed with kill -9 after a connector recorded its resources: the
//!   ledger is there after the restart and the deletion removes the resources;
//! - a forced `sqlite-audit` deletion's orphans purged: a purge while the file is still
//!   away leaves them listed with the error; once it is back, the purge removes them from
//!   `sqlite_master` and from the list.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use wharf_harness::audit::Cluster;
use wharf_harness::cluster::call_at;
use wharf_harness::lapin::BasicProperties;
use wharf_harness::lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use wharf_harness::lapin::types::FieldTable;
use wharf_harness::rabbitmq::TestRabbit;
use wharf_harness::{KeepOnFailure, wait_until};

/// How long a failing cleanup step takes to show its error.
const STEP_FAILS: Duration = Duration::from_secs(30);

/// The resources of `name`'s ledger as `(kind, name, origin, state)`.
fn ledger(c: &Cluster, name: &str) -> Vec<(String, String, String, String)> {
    let r = c.call("GetConnectorResources", json!({ "name": name }));
    entries(&r["entries"])
}

fn entries(v: &Value) -> Vec<(String, String, String, String)> {
    v.as_array()
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

fn names_of(v: &Value) -> BTreeSet<String> {
    entries(v).into_iter().map(|(_, n, _, _)| n).collect()
}

/// Every table and trigger name in the SQLite file at `path`.
fn sqlite_objects(path: &Path) -> BTreeSet<String> {
    let conn = wharf_harness::rusqlite::Connection::open(path).unwrap();
    let mut st = conn
        .prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')")
        .unwrap();
    st.query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn sqlite_db(path: &Path) {
    let conn = wharf_harness::rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
        .unwrap();
}

fn sqlite_config(path: &Path, topic: &str) -> Value {
    json!({
        "connector.class": "sqlite-audit", "tasks.max": "1",
        "database.path": path.display().to_string(),
        "tables": "orders", "topic": topic, "poll.interval.ms": "50",
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sink_on_a_queue_is_refused_and_a_users_queue_outlives_the_sink_that_adopted_it() {
    let rabbit_dir = KeepOnFailure::new();
    let mut rabbit = TestRabbit::spawn(rabbit_dir.path());
    let c = Cluster::start(1).await;
    rabbit.wait_ready().await;
    const SHARED: &str = "nc.shared.q";
    const USERS: &str = "users.own.q";
    // The user's queue, with a message in it, before any connector exists.
    {
        let conn = rabbit.connect().await.unwrap();
        let ch = conn.create_channel().await.unwrap();
        ch.queue_declare(
            USERS.into(),
            QueueDeclareOptions::durable(),
            FieldTable::default(),
        )
        .await
        .unwrap();
        ch.basic_publish(
            "".into(),
            USERS.into(),
            BasicPublishOptions::default(),
            b"the user's message",
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .unwrap()
        .await
        .unwrap();
        let _ = conn.close(200, "done".into()).await;
    }
    let sink = |queue: &str| {
        json!({
            "connector.class": "rabbitmq-sink", "tasks.max": "1",
            "topics": "ledger-t", "rabbitmq.uri": rabbit.uri(), "queue": queue,
        })
    };
    c.call(
        "CreateConnector",
        json!({ "name": "first", "config": sink(SHARED) }),
    );
    c.call(
        "CreateConnector",
        json!({ "name": "users", "config": sink(USERS) }),
    );
    for name in ["first", "users"] {
        c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1, None)
            .await;
    }

    // The ledgers: what each sink made, and the user's queue adopted.
    let first = ledger(&c, "first");
    assert!(
        first.contains(&(
            "queue".into(),
            SHARED.into(),
            "RESOURCE_ORIGIN_CREATED".into(),
            "confirmed".into()
        )),
        "{first:?}"
    );
    assert!(
        first
            .iter()
            .any(|(k, n, _, _)| k == "queue" && n == "wharf.owner.first"),
        "{first:?}"
    );
    let users = ledger(&c, "users");
    assert!(
        users.contains(&(
            "queue".into(),
            USERS.into(),
            "RESOURCE_ORIGIN_ADOPTED".into(),
            "confirmed".into()
        )),
        "{users:?}"
    );

    // A second claim on either queue is refused at create, naming the holder; nothing of
    // the first changes.
    for (queue, holder) in [(SHARED, "first"), (USERS, "users")] {
        let r = call_at(
            &c.cp_addr,
            "wharf.v1.ConnectorAdmin/CreateConnector",
            &json!({ "name": "second", "config": sink(queue) }),
        );
        assert_eq!(r.code, 9, "FAILED_PRECONDITION: {}", r.err);
        assert!(
            r.err.contains(&format!("queue {queue}")) && r.err.contains(&format!("\"{holder}\"")),
            "{}",
            r.err
        );
        assert!(c.try_status("second").is_none(), "nothing stored");
    }
    // The same broker spelled `LOCALHOST.` instead of 127.0.0.1 is the same queue.
    let mut spelled = sink(SHARED);
    spelled["rabbitmq.uri"] = json!(rabbit.uri().replace("127.0.0.1", "LOCALHOST."));
    let r = call_at(
        &c.cp_addr,
        "wharf.v1.ConnectorAdmin/CreateConnector",
        &json!({ "name": "second", "config": spelled }),
    );
    assert_eq!(r.code, 9, "FAILED_PRECONDITION: {}", r.err);
    assert!(
        r.err.contains(&format!("queue {SHARED}")) && r.err.contains("\"first\""),
        "{}",
        r.err
    );
    assert!(c.try_status("second").is_none(), "nothing stored");
    assert_eq!(ledger(&c, "first"), first);

    // The plan of deleting "first", then the deletion: what the plan removes is what
    // leaves the broker.
    let plan = c.call(
        "DeleteConnector",
        json!({ "name": "first", "dry_run": true }),
    );
    assert_eq!(plan["deleted"], false, "{plan}");
    let remove = names_of(&plan["plan"]["remove"]);
    assert_eq!(
        remove,
        BTreeSet::from([SHARED.to_owned(), "wharf.owner.first".to_owned()]),
        "{plan}"
    );
    assert!(c.try_status("first").is_some(), "a dry run changes nothing");
    for q in &remove {
        assert!(rabbit.queue_exists(q).await.unwrap(), "{q} exists before");
    }
    let r = c.call(
        "DeleteConnector",
        json!({ "name": "first", "wait": true, "wait_timeout_ms": 30000 }),
    );
    assert_eq!(r["deleted"], true, "{r}");
    for q in &remove {
        assert!(!rabbit.queue_exists(q).await.unwrap(), "{q} was removed");
    }

    // The adopting sink's plan keeps the user's queue; after its deletion the queue is
    // there with its message.
    let plan = c.call(
        "DeleteConnector",
        json!({ "name": "users", "dry_run": true }),
    );
    assert_eq!(
        names_of(&plan["plan"]["keep"]),
        BTreeSet::from([USERS.to_owned()])
    );
    assert!(!names_of(&plan["plan"]["remove"]).contains(USERS));
    let r = c.call(
        "DeleteConnector",
        json!({ "name": "users", "wait": true, "wait_timeout_ms": 30000 }),
    );
    assert_eq!(r["deleted"], true, "{r}");
    assert!(rabbit.queue_exists(USERS).await.unwrap());
    let conn = rabbit.connect().await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    let q = ch
        .queue_declare(
            USERS.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(q.message_count(), 1, "the user's message is still there");
    let _ = conn.close(200, "done".into()).await;

    // With the first gone, the shared queue can be claimed again.
    c.call(
        "CreateConnector",
        json!({ "name": "second", "config": sink(SHARED) }),
    );
    c.wait_state("second", "STATE_RUNNING", "STATE_RUNNING", 1, None)
        .await;
    c.call(
        "DeleteConnector",
        json!({ "name": "second", "wait": true, "wait_timeout_ms": 30000 }),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_sqlite_file_fails_the_deletion_naming_what_is_left_and_force_leaves_orphans() {
    let c = Cluster::start(1).await;
    let db = c.dir.path().join("shop.db");
    sqlite_db(&db);
    c.call(
        "CreateConnector",
        json!({ "name": "audit", "config": sqlite_config(&db, "ledger-audit") }),
    );
    c.wait_state("audit", "STATE_RUNNING", "STATE_RUNNING", 1, None)
        .await;
    let l = ledger(&c, "audit");
    let created: Vec<_> = l
        .iter()
        .filter(|(_, _, o, _)| o == "RESOURCE_ORIGIN_CREATED")
        .collect();
    assert_eq!(created.len(), 4, "the audit table and 3 triggers: {l:?}");
    assert!(
        l.iter()
            .any(|(k, n, o, _)| k == "table" && n == "orders" && o == "RESOURCE_ORIGIN_ADOPTED"),
        "the watched table is adopted: {l:?}"
    );

    // The file moves away; the deletion runs and fails, naming what is unaccounted.
    let moved = c.dir.path().join("moved.db");
    std::fs::rename(&db, &moved).unwrap();
    c.call("DeleteConnector", json!({ "name": "audit" }));
    let error = wait_until(
        "the connector step to fail naming the ledger",
        STEP_FAILS,
        || async {
            let s = c.try_status("audit")?;
            s["deletion"]["steps"]
                .as_array()?
                .iter()
                .find(|st| st.get("task").is_none() && st["attempts"].as_u64() >= Some(1))
                .and_then(|st| st["lastError"].as_str().map(str::to_owned))
                .filter(|e| !e.is_empty())
        },
    )
    .await;
    assert!(
        error.contains("neither released nor found absent"),
        "{error}"
    );
    assert!(error.contains("table wharf_audit"), "{error}");
    assert!(error.contains("3 triggers"), "{error}");
    assert!(
        error.contains(&db.display().to_string()),
        "names the path: {error}"
    );
    assert!(c.try_status("audit").is_some(), "not reported deleted");
    // The moved file still holds them.
    let left = sqlite_objects(&moved);
    assert!(
        left.iter()
            .filter(|n| n.starts_with("wharf_audit_trg"))
            .count()
            == 3,
        "{left:?}"
    );

    // Forced: the deletion ends, and what it left is listed with its locator.
    let r = c.call("DeleteConnector", json!({ "name": "audit", "force": true }));
    assert_eq!(r["deleted"], true, "{r}");
    let orphans = c.call("ListOrphanedResources", json!({}));
    let list = orphans["orphans"].as_array().cloned().unwrap_or_default();
    let ours: Vec<&Value> = list.iter().filter(|o| o["connector"] == "audit").collect();
    assert_eq!(ours.len(), 4, "{orphans}");
    for o in &ours {
        assert_eq!(o["reason"], "force");
        assert_eq!(
            o["entry"]["resource"]["locator"]["path"],
            db.display().to_string()
        );
    }

    // An admin moves them into another connector, which then holds the record of them.
    std::fs::rename(&moved, &db).unwrap();
    c.call(
        "CreateConnector",
        json!({ "name": "heir", "config": sqlite_config(&db, "ledger-heir") }),
    );
    let ids: Vec<Value> = ours.iter().map(|o| o["id"].clone()).collect();
    let adopted = c.call(
        "AdoptOrphanedResources",
        json!({ "ids": ids, "connector": "heir" }),
    );
    let names = entries(&adopted["entries"]);
    assert!(
        names
            .iter()
            .filter(|(_, _, o, _)| o == "RESOURCE_ORIGIN_ADOPTED")
            .any(|(_, n, _, _)| n.starts_with("wharf_audit_trg")),
        "{adopted}"
    );
    let after = c.call("ListOrphanedResources", json!({}));
    assert!(
        !after["orphans"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .any(|o| o["connector"] == "audit"),
        "{after}"
    );
    c.call(
        "DeleteConnector",
        json!({ "name": "heir", "wait": true, "wait_timeout_ms": 30000 }),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_of_a_sqlite_deletion_lists_exactly_what_leaves_sqlite_master_and_survives_kill_9()
{
    let mut c = Cluster::start(1).await;
    let db = c.dir.path().join("plan.db");
    sqlite_db(&db);
    let before = sqlite_objects(&db);
    c.call(
        "CreateConnector",
        json!({ "name": "planned", "config": sqlite_config(&db, "ledger-plan") }),
    );
    c.wait_state("planned", "STATE_RUNNING", "STATE_RUNNING", 1, None)
        .await;
    let provisioned = sqlite_objects(&db);

    // kill -9 of the control plane: the ledger is in the store.
    let kept = ledger(&c, "planned");
    c.cp.kill9();
    let port: u16 = c.cp_addr.rsplit(':').next().unwrap().parse().unwrap();
    let cp_dir = c.dir.path().join("cp");
    c.cp = wharf_harness::Proc::spawn(
        wharf_harness::bin("wharf-control-plane"),
        wharf_harness::cluster::control_plane_args(port, &cp_dir),
        &cp_dir,
    );
    c.cp.listen_addr().await;
    c.wait_alive(1).await;
    assert_eq!(ledger(&c, "planned"), kept, "the ledger survived kill -9");
    c.wait_state("planned", "STATE_RUNNING", "STATE_RUNNING", 1, None)
        .await;

    let plan = c.call(
        "DeleteConnector",
        json!({ "name": "planned", "dry_run": true }),
    );
    let remove = names_of(&plan["plan"]["remove"]);
    let keep = names_of(&plan["plan"]["keep"]);
    assert_eq!(
        plan["plan"]["steps"].as_array().map(Vec::len),
        Some(2),
        "{plan}"
    );
    assert_eq!(
        sqlite_objects(&db),
        provisioned,
        "the dry run changed nothing"
    );
    let r = c.call(
        "DeleteConnector",
        json!({ "name": "planned", "wait": true, "wait_timeout_ms": 30000 }),
    );
    assert_eq!(r["deleted"], true, "{r}");
    let after = sqlite_objects(&db);
    let mut removed: BTreeSet<String> = provisioned.difference(&after).cloned().collect();
    // The owners table is shared by every audit connector of the file and dropped with
    // its last row: recorded as adopted (kept), it goes with the last connector
    // (docs/resources.md, "Known gaps").
    assert!(keep.contains("wharf_owners"), "{keep:?}");
    removed.remove("wharf_owners");
    assert_eq!(
        removed, remove,
        "the plan named exactly what the deletion removed"
    );
    assert_eq!(
        remove.len(),
        4,
        "the audit table and 3 triggers: {remove:?}"
    );
    assert!(
        keep.contains("orders") && after.contains("orders"),
        "{keep:?}"
    );
    assert_eq!(after, before, "nothing else changed");
}

/// The control plane dies (abort, as kill -9) between a plugin's intents and its first
/// confirmation: the audit table and its triggers exist, the ledger holds them as
/// intended after the restart, and the deletion removes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_killed_between_intent_and_confirmation_keeps_the_entries_and_the_deletion_removes_them()
 {
    use wharf_harness::fault::{CRASH_AT_ENV, start_cluster, wait_exit};
    let mut c = start_cluster(1, &[(CRASH_AT_ENV, "before_resource_confirm")]).await;
    let db = c.dir.path().join("crash.db");
    sqlite_db(&db);
    let before = sqlite_objects(&db);
    let r = c.call(
        "CreateConnector",
        json!({ "name": "crashed", "config": sqlite_config(&db, "ledger-crash") }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    wait_exit(&mut c.cp, "the control plane to abort at the confirmation").await;
    assert!(
        sqlite_objects(&db).len() > before.len(),
        "the plugin created its objects before confirming them"
    );
    c.restart_control_plane().await;
    c.wait_alive(1).await;
    let r = c.call("GetConnectorResources", json!({ "name": "crashed" }));
    assert_eq!(r.code, 0, "{}", r.err);
    let l = entries(&r.body["entries"]);
    let intended: Vec<_> = l
        .iter()
        .filter(|(_, _, o, s)| o == "RESOURCE_ORIGIN_CREATED" && s == "intended")
        .collect();
    assert_eq!(
        intended.len(),
        4,
        "the audit table and 3 triggers, intended: {l:?}"
    );
    let r = c.call(
        "DeleteConnector",
        json!({ "name": "crashed", "wait": true, "wait_timeout_ms": 60000 }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.body["deleted"], true, "{}", r.body);
    assert_eq!(
        sqlite_objects(&db),
        before,
        "the deletion removed what was only intended"
    );
}

/// The orphans of `connector` in ListOrphanedResources.
fn orphans_of(c: &Cluster, connector: &str) -> Vec<Value> {
    let orphans = c.call("ListOrphanedResources", json!({}));
    orphans["orphans"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|o| o["connector"] == connector)
        .collect()
}

/// A forced deletion leaves the audit table and its triggers as orphans; purging them
/// runs the connector instance's cleanup again (a cleanup-only instance with the sealed
/// config, stopped with `true`): while the file is away it releases nothing and the
/// orphans stay listed with the error; with the file back it removes them from
/// `sqlite_master` and the list is empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_deletions_orphans_are_purged_from_the_sqlite_file_and_leave_the_list() {
    let c = Cluster::start(1).await;
    let db = c.dir.path().join("purge.db");
    sqlite_db(&db);
    let before = sqlite_objects(&db);
    c.call(
        "CreateConnector",
        json!({ "name": "purged", "config": sqlite_config(&db, "ledger-purge") }),
    );
    c.wait_state("purged", "STATE_RUNNING", "STATE_RUNNING", 1, None)
        .await;
    let provisioned = sqlite_objects(&db);
    assert!(provisioned.len() > before.len(), "{provisioned:?}");

    // The file moves away, the deletion cannot clean, the operator forces it.
    let moved = c.dir.path().join("purge-away.db");
    std::fs::rename(&db, &moved).unwrap();
    c.call("DeleteConnector", json!({ "name": "purged" }));
    let r = c.call(
        "DeleteConnector",
        json!({ "name": "purged", "force": true }),
    );
    assert_eq!(r["deleted"], true, "{r}");
    let ours = orphans_of(&c, "purged");
    assert_eq!(ours.len(), 4, "the audit table and 3 triggers: {ours:?}");
    for o in &ours {
        assert_eq!(
            o["entry"]["resource"]["locator"]["path"],
            db.display().to_string(),
            "{o}"
        );
        assert_eq!(o["purgeable"], true, "{o}");
    }
    let ids: Vec<Value> = ours.iter().map(|o| o["id"].clone()).collect();

    // Purged while the file is still away: nothing is released, all stay, with the error.
    let r = c.call("PurgeOrphanedResources", json!({ "ids": ids }));
    assert!(r["purged"].as_array().is_none_or(Vec::is_empty), "{r}");
    let left = orphans_of(&c, "purged");
    assert_eq!(left.len(), 4, "{left:?}");
    for o in &left {
        let e = o["purgeError"].as_str().unwrap_or_default();
        assert!(e.contains("neither released nor found absent"), "{o}");
    }
    assert_eq!(sqlite_objects(&moved), provisioned, "nothing dropped");

    // The file is back: the purge removes the objects, and the orphans leave the list.
    std::fs::rename(&moved, &db).unwrap();
    let r = c.call("PurgeOrphanedResources", json!({ "ids": ids }));
    let purged: BTreeSet<String> = r["purged"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    assert_eq!(purged.len(), 4, "{r}");
    assert!(orphans_of(&c, "purged").is_empty());
    assert_eq!(
        sqlite_objects(&db),
        before,
        "the audit table, its triggers and the owners table are gone; the watched table stays"
    );

    // An id that is no longer an orphan is refused, naming it.
    let r = call_at(
        &c.cp_addr,
        "wharf.v1.ConnectorAdmin/PurgeOrphanedResources",
        &json!({ "ids": [ids[0]] }),
    );
    assert_eq!(r.code, 3, "INVALID_ARGUMENT: {}", r.err);
    assert!(r.err.contains("ids[0]"), "{}", r.err);

    // The name is free again, and a new connector of it starts above the purge's
    // generation (the executor refuses an older one).
    c.call(
        "CreateConnector",
        json!({ "name": "purged", "config": sqlite_config(&db, "ledger-purge-2") }),
    );
    c.wait_state("purged", "STATE_RUNNING", "STATE_RUNNING", 1, None)
        .await;
    c.call(
        "DeleteConnector",
        json!({ "name": "purged", "wait": true, "wait_timeout_ms": 30000 }),
    );
    assert_eq!(sqlite_objects(&db), before);
}

/// `cleanup.policy = give-up`: the moved file's deletion fails its one attempt, is given
/// up, finishes, and leaves the audit table and triggers as orphans with reason give-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_given_up_deletion_leaves_its_unaccounted_entries_as_orphans() {
    let c = Cluster::start(1).await;
    let db = c.dir.path().join("giveup.db");
    sqlite_db(&db);
    let mut config = sqlite_config(&db, "ledger-giveup");
    config["cleanup.policy"] = json!("give-up");
    config["cleanup.max.attempts"] = json!("1");
    c.call(
        "CreateConnector",
        json!({ "name": "given-up", "config": config }),
    );
    c.wait_state("given-up", "STATE_RUNNING", "STATE_RUNNING", 1, None)
        .await;
    std::fs::rename(&db, c.dir.path().join("elsewhere.db")).unwrap();
    let r = c.call(
        "DeleteConnector",
        json!({ "name": "given-up", "wait": true, "wait_timeout_ms": 60000 }),
    );
    assert_eq!(r["deleted"], true, "{r}");
    assert_eq!(r["connectorCleanupGivenUp"], true, "{r}");
    let orphans = c.call("ListOrphanedResources", json!({}));
    let ours: Vec<Value> = orphans["orphans"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|o| o["connector"] == "given-up")
        .collect();
    assert_eq!(ours.len(), 4, "{orphans}");
    assert!(ours.iter().all(|o| o["reason"] == "give-up"), "{orphans}");
}

/// The REST extensions: the ledger, the dry run, a second claim as 409, the orphan list
/// and a bad adopt as 400 naming the id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rest_gateway_serves_the_ledger_the_plan_and_refuses_a_second_claim() {
    let (c, rest) = wharf_harness::rest::start_with_rest(1, &[]).await;
    let db = c.dir.path().join("rest.db");
    sqlite_db(&db);
    let mut config = sqlite_config(&db, "ledger-rest");
    config["audit.table"] = json!("shared_audit");
    let a = rest
        .json(
            "POST",
            "/connectors",
            &json!({ "name": "rest-a", "config": config }),
        )
        .await;
    assert_eq!(a.status, 201, "{}", a.body);
    c.wait_state("rest-a", "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;

    let l = rest.get("/connectors/rest-a/resources").await;
    assert_eq!(l.status, 200, "{}", l.body);
    let audit = l.body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "shared_audit")
        .cloned()
        .unwrap_or_else(|| panic!("{}", l.body));
    assert_eq!(audit["kind"], "table");
    assert_eq!(audit["origin"], "created");
    assert_eq!(audit["owner"], "connector");
    assert_eq!(audit["state"], "confirmed");
    assert_eq!(audit["locator"]["path"], db.display().to_string());

    let b = rest
        .json(
            "POST",
            "/connectors",
            &json!({ "name": "rest-b", "config": config }),
        )
        .await;
    assert_eq!(b.status, 409, "{}", b.body);
    let message = b.body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("table shared_audit") && message.contains("\"rest-a\""),
        "{message}"
    );

    let plan = rest.empty("DELETE", "/connectors/rest-a?dryRun=true").await;
    assert_eq!(plan.status, 200, "{}", plan.body);
    assert_eq!(
        plan.body["remove"].as_array().map(Vec::len),
        Some(4),
        "{}",
        plan.body
    );
    assert_eq!(plan.body["steps"][1]["owner"], "connector", "{}", plan.body);
    assert_eq!(
        rest.get("/connectors/rest-a").await.status,
        200,
        "still there"
    );

    let orphans = rest.get("/resources/orphaned").await;
    assert_eq!(orphans.status, 200, "{}", orphans.body);
    assert!(orphans.body["orphans"].is_array(), "{}", orphans.body);
    let bad = rest
        .json(
            "POST",
            "/resources/orphaned/adopt",
            &json!({ "connector": "rest-a", "ids": ["no-such-orphan"] }),
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(
        bad.body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("ids[0]"),
        "{}",
        bad.body
    );
    let bad = rest
        .json(
            "POST",
            "/resources/orphaned/purge",
            &json!({ "ids": ["no-such-orphan"] }),
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(
        bad.body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("ids[0]"),
        "{}",
        bad.body
    );
    let gone = rest.empty("DELETE", "/connectors/rest-a?wait=true").await;
    assert_eq!(gone.status, 204, "{}", gone.body);
}

/// An orphan a live connector uses again is not purged: a purge's `stop(true)` would
/// remove it under that connector (here a queue that a keep_resources deletion left and a
/// new sink adopted, with its messages).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_of_an_orphan_another_connector_uses_is_refused_and_changes_nothing() {
    let rabbit_dir = KeepOnFailure::new();
    let mut rabbit = TestRabbit::spawn(rabbit_dir.path());
    let c = Cluster::start(1).await;
    rabbit.wait_ready().await;
    const QUEUE: &str = "kept.then.adopted.q";
    let sink = || {
        json!({
            "connector.class": "rabbitmq-sink", "tasks.max": "1",
            "topics": "ledger-purge-t", "rabbitmq.uri": rabbit.uri(), "queue": QUEUE,
        })
    };
    c.call(
        "CreateConnector",
        json!({ "name": "kept", "config": sink() }),
    );
    c.wait_state("kept", "STATE_RUNNING", "STATE_RUNNING", 1, None)
        .await;
    let r = c.call(
        "DeleteConnector",
        json!({ "name": "kept", "keep_resources": true, "wait": true, "wait_timeout_ms": 30000 }),
    );
    assert_eq!(r["deleted"], true, "{r}");
    let left = orphans_of(&c, "kept");
    let ids: Vec<Value> = left.iter().map(|o| o["id"].clone()).collect();
    assert!(
        left.iter().any(|o| o["entry"]["resource"]["name"] == QUEUE),
        "{left:?}"
    );
    assert!(rabbit.queue_exists(QUEUE).await.unwrap());

    // A new sink on the same queue adopts it and holds it.
    c.call(
        "CreateConnector",
        json!({ "name": "user", "config": sink() }),
    );
    c.wait_state("user", "STATE_RUNNING", "STATE_RUNNING", 1, None)
        .await;

    let r = call_at(
        &c.cp_addr,
        "wharf.v1.ConnectorAdmin/PurgeOrphanedResources",
        &json!({ "ids": ids }),
    );
    assert_eq!(r.code, 9, "FAILED_PRECONDITION: {}", r.err);
    assert!(
        r.err.contains("\"user\"") && r.err.contains(QUEUE),
        "names the connector using it: {}",
        r.err
    );
    assert!(rabbit.queue_exists(QUEUE).await.unwrap(), "the queue stays");
    assert_eq!(
        orphans_of(&c, "kept").len(),
        left.len(),
        "the orphans stay listed"
    );
    let s = c.try_status("user").expect("user exists");
    assert_eq!(s["connector"]["state"], "STATE_RUNNING", "{s}");
    c.call(
        "DeleteConnector",
        json!({ "name": "user", "wait": true, "wait_timeout_ms": 30000 }),
    );
}
