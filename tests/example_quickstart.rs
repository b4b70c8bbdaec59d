//! The README's first command runs `wharf-dev --example` (through
//! `scripts/quickstart`): on a fresh data dir it creates the example database and the
//! `shop-audit` (sqlite-audit) -> `shop-sink` (file-sink) pair, prints the admin address
//! and the grpcurl commands to try, and a row inserted in the database shows up in the
//! sink file. Started again on the same data dir it creates nothing twice.
//!
//! Build first: `cargo build -p wharf-dev`.

use std::path::Path;
use std::time::Duration;

use wharf::pb::v1::GetConnectorStatusRequest;
use wharf::pb::v1::connector_admin_client::ConnectorAdminClient;
use wharf_harness::{KeepOnFailure, Proc, wait_until};

/// Upper bound on each wait, in seconds.
const CONVERGE_SECS: u64 = 30;

fn start(dir: &Path) -> Proc {
    Proc::spawn(
        wharf_harness::bin("wharf-dev"),
        vec![
            "--example".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--data-dir".into(),
            dir.display().to_string(),
        ],
        dir,
    )
}

async fn running_tasks(addr: &str, name: &str) -> Option<usize> {
    let mut client = ConnectorAdminClient::connect(format!("http://{addr}"))
        .await
        .ok()?;
    let status = client
        .get_connector_status(GetConnectorStatusRequest { name: name.into() })
        .await
        .ok()?
        .into_inner()
        .status?;
    let running = |s: &Option<wharf::pb::v1::InstanceStatus>| {
        s.as_ref()
            .is_some_and(|s| s.state == wharf::pb::v1::State::Running as i32)
    };
    if !running(&status.connector) {
        return None;
    }
    Some(status.tasks.iter().filter(|t| running(&t.status)).count())
}

#[tokio::test(flavor = "multi_thread")]
async fn dev_example_runs_the_main_job_and_prints_what_to_try() {
    let dir = KeepOnFailure::new();
    let data = dir.path().join("wharf");
    let mut cp = start(&data);
    let addr = cp.listen_addr().await;
    let deadline = Duration::from_secs(CONVERGE_SECS);
    wait_until("shop-audit and its 2 tasks to run", deadline, || {
        let addr = addr.clone();
        async move { running_tasks(&addr, "shop-audit").await.filter(|n| *n == 2) }
    })
    .await;
    wait_until("shop-sink and its task to run", deadline, || {
        let addr = addr.clone();
        async move { running_tasks(&addr, "shop-sink").await.filter(|n| *n == 1) }
    })
    .await;
    let log = data.join("process.log");
    let printed = wait_until("the next steps to be printed", deadline, || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        async move { text.contains("docs/quickstart.md").then_some(text) }
    })
    .await;
    // The grpcurl line an operator is told to type (the walkthrough's text, checked as such).
    assert!(
        printed.contains(&format!("listening on {addr}"))
            && printed.contains(&format!(
                "grpcurl -plaintext {addr} wharf.v1.ConnectorAdmin/ListConnectorPlugins"
            )),
        "the admin address and grpcurl commands are printed:\n{printed}"
    );
    assert!(
        !printed.contains('\u{1b}'),
        "no ANSI colour codes in a log that is not a terminal:\n{printed}"
    );

    let db = wharf_harness::rusqlite::Connection::open(data.join("example/shop.db"))
        .expect("example db");
    db.execute(
        "INSERT INTO customers (name, email) VALUES ('Ada', 'ada@example.com')",
        [],
    )
    .expect("insert");
    let sink = data.join("example/audit.jsonl");
    let line = wait_until("the insert to reach the sink file", deadline, || {
        let text = std::fs::read_to_string(&sink).unwrap_or_default();
        async move { text.lines().find(|l| l.contains("Ada")).map(str::to_owned) }
    })
    .await;
    let record: serde_json::Value = serde_json::from_str(&line).expect("JSON line");
    assert_eq!(record["operation"], "INSERT");
    assert_eq!(record["table"], "main.customers");

    // Again on the same data dir: the example exists, nothing is created twice.
    assert_eq!(
        cp.terminate(deadline).await,
        Some(0),
        "SIGTERM stops the dev control plane cleanly"
    );
    let first = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        first.contains("control plane stopped"),
        "the stop is logged:\n{first}"
    );
    let mut again = start(&data);
    let addr = again.listen_addr().await;
    wait_until("shop-audit to run again", deadline, || {
        let addr = addr.clone();
        async move { running_tasks(&addr, "shop-audit").await.filter(|n| *n == 2) }
    })
    .await;
    let text = wait_until("the second start to print its next steps", deadline, || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        async move { (text.matches("docs/quickstart.md").count() == 2).then_some(text) }
    })
    .await;
    assert!(
        text.contains("connector shop-audit already exists"),
        "the second start keeps the existing connectors:\n{text}"
    );
    assert!(
        text.contains("using the existing example database")
            && text.matches("creating the example SQLite database").count() == 1,
        "the second start says it uses the existing database:\n{text}"
    );
}

/// Issue 15, "smaller ones": stopped (Ctrl-C) while a deletion of the example connector
/// was still running, the quickstart used to say the connector "already exists, leaving
/// it", and a moment later it was gone. Now it says that a deletion is in progress,
/// waits for it, and creates the connector anew (or, when its executor finished the
/// cleanup while the example waited for it, creates it at once). The pending deletion is made as in
/// quickstart section 8: the control plane alone on the same data dir deletes
/// `shop-audit` while no executor runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_deletion_left_pending_by_the_last_run_is_said_so_waited_for_and_created_anew() {
    let dir = KeepOnFailure::new();
    let data = dir.path().join("wharf");
    let deadline = Duration::from_secs(CONVERGE_SECS);
    let mut dev = start(&data);
    let addr = dev.listen_addr().await;
    wait_until("shop-audit and its 2 tasks to run", deadline, || {
        let addr = addr.clone();
        async move { running_tasks(&addr, "shop-audit").await.filter(|n| *n == 2) }
    })
    .await;
    assert_eq!(dev.terminate(deadline).await, Some(0));

    let mut cp = Proc::spawn(
        wharf_harness::bin("wharf-control-plane"),
        vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--data-dir".into(),
            data.display().to_string(),
        ],
        &data,
    );
    let cp_addr = cp.listen_addr().await;
    let mut client = ConnectorAdminClient::connect(format!("http://{cp_addr}"))
        .await
        .expect("admin client");
    let deleting = client
        .delete_connector(wharf::pb::v1::DeleteConnectorRequest {
            name: "shop-audit".into(),
            ..Default::default()
        })
        .await
        .expect("delete shop-audit")
        .into_inner();
    assert!(
        deleting.status.is_some_and(|s| s.deletion.is_some()),
        "DELETING"
    );
    assert_eq!(cp.terminate(deadline).await, Some(0));

    let log = data.join("process.log");
    let before = std::fs::read_to_string(&log).unwrap_or_default().len();
    let mut again = start(&data);
    let addr = again.listen_addr().await;
    let text = wait_until("shop-audit created anew", deadline, || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let new = text.get(before..).unwrap_or_default().to_owned();
        async move { new.contains("created connector shop-audit").then_some(new) }
    })
    .await;
    // The example waits for its executor before it creates, and that executor may finish
    // the pending cleanup first: then the deletion is over before the example looks.
    let finished = text.find("deletion finished; connector removed connector=shop-audit");
    let created = text.find("created connector shop-audit");
    assert!(
        text.contains("connector shop-audit is being deleted")
            || finished.is_some_and(|f| created.is_some_and(|c| f < c)),
        "the deletion in progress is said, or had finished before the create:\n{text}"
    );
    assert!(
        !text.contains("connector shop-audit already exists"),
        "not \"already exists, leaving it\":\n{text}"
    );
    // Created once the in-process executor was placeable: its plugin checked the config.
    assert!(
        !text.contains("the plugin's own config checks did not run"),
        "created before the executor was placeable:\n{text}"
    );
    wait_until(
        "the new shop-audit and its 2 tasks to run",
        deadline,
        || {
            let addr = addr.clone();
            async move { running_tasks(&addr, "shop-audit").await.filter(|n| *n == 2) }
        },
    )
    .await;
}
