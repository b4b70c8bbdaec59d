//! Admin authorization across replicas: two control planes on one (test-owned) etcd
//! share a token file; calls made to the follower are forwarded to the leader with the
//! caller's bearer token, and the leader applies the same rules to them: an operator's
//! create and pause go through, a viewer's delete and an operator's forced delete are
//! refused, and the audit trail (read on either replica) names the original caller and
//! the follower that forwarded the call.
//!
//! Needs the `etcd` binary (Debian `etcd-server`, scripts/setup-services).
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`, then
//! `cargo test --test admin_auth_etcd`.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use wharf_harness::auth::{call_with_token as call, mint_roles};
use wharf_harness::cluster::{CONVERGE, PERMISSION_DENIED, TEST_LEASE_MS, UNAUTHENTICATED};
use wharf_harness::etcd::control_plane_replica;
use wharf_harness::{KeepOnFailure, Proc, wait_until};
/// Bound on the leader election after a start.
const ELECTION_DEADLINE: Duration = Duration::from_secs(20);

fn replica(dir: &Path, name: &str, etcd: &str, key: &[u8], tokens: &Path) -> Proc {
    let tokens = vec!["--admin-tokens".to_owned(), tokens.display().to_string()];
    control_plane_replica(dir, name, etcd, "/authz/", key, TEST_LEASE_MS, &tokens)
}

fn entries(addr: &str, token: &str, connector: &str) -> Vec<Value> {
    let r = call(
        addr,
        Some(token),
        "ListAuditEntries",
        &json!({ "connector": connector }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    r.body["entries"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_to_the_follower_is_authorized_by_the_same_rules_and_audited_under_its_caller() {
    let etcd = wharf_harness::etcd::TestEtcd::start();
    let dir = KeepOnFailure::new();
    let key: [u8; 32] = rand::random();
    let minted = mint_roles();
    let [viewer, operator, admin] = minted.clone().map(|m| m.token);
    let [viewer_line, operator_line, admin_line] = minted.map(|m| m.line);
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        format!("{viewer_line}\n{operator_line}\n{admin_line}\n"),
    )
    .unwrap();

    let mut a = replica(dir.path(), "cp-a", &etcd.endpoint, &key, &tokens);
    let a_addr = a.listen_addr().await;
    wait_until("replica a to lead", ELECTION_DEADLINE, || async {
        a.log()
            .contains("leading: herder and finalizer start")
            .then_some(())
    })
    .await;
    let mut b = replica(dir.path(), "cp-b", &etcd.endpoint, &key, &tokens);
    let b_addr = b.listen_addr().await;
    let ed = dir.path().join("exec-1");
    let mut exec = Proc::spawn(
        wharf_harness::bin("wharf-executor"),
        vec![
            "--listen".into(),
            "127.0.0.2:0".into(),
            "--control-plane".into(),
            format!("http://{a_addr}"),
            "--data-dir".into(),
            ed.display().to_string(),
            "--executor-id".into(),
            "exec-1".into(),
        ],
        &ed,
    );
    exec.listen_addr().await;
    // Through the follower (forwarded to the leader): a viewer sees the executor.
    wait_until(
        "the executor alive, seen through the follower",
        CONVERGE,
        || async {
            let r = call(&b_addr, Some(&viewer), "ListExecutors", &json!({}));
            let es = r.body["executors"].as_array().cloned().unwrap_or_default();
            (es.len() == 1 && es[0]["state"] == "EXECUTOR_STATE_ALIVE").then_some(())
        },
    )
    .await;

    let name = "replicated";
    let config = json!({
        "connector.class": "test-source",
        "tasks.max": "1",
        "lifecycle.path": dir.path().join("lifecycle.jsonl").display().to_string(),
        "test.poll.block.ms": "50",
    });
    // Without credentials, the follower's read and the forwarded write are refused alike.
    let r = call(&b_addr, None, "ListConnectors", &json!({}));
    assert_eq!(r.code, UNAUTHENTICATED, "{}", r.err);
    let r = call(
        &b_addr,
        None,
        "CreateConnector",
        &json!({ "name": name, "config": config }),
    );
    assert_eq!(r.code, UNAUTHENTICATED, "{}", r.err);
    let r = call(
        &b_addr,
        Some(&viewer),
        "CreateConnector",
        &json!({ "name": name, "config": config }),
    );
    assert_eq!(r.code, PERMISSION_DENIED, "{}", r.err);
    let r = call(
        &b_addr,
        Some(&operator),
        "CreateConnector",
        &json!({ "name": name, "config": config }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until("the connector RUNNING", CONVERGE, || async {
        let r = call(
            &b_addr,
            Some(&viewer),
            "GetConnectorStatus",
            &json!({ "name": name }),
        );
        (r.body["status"]["connector"]["state"] == "STATE_RUNNING").then_some(())
    })
    .await;
    let r = call(
        &b_addr,
        Some(&viewer),
        "DeleteConnector",
        &json!({ "name": name }),
    );
    assert_eq!(r.code, PERMISSION_DENIED, "{}", r.err);
    let r = call(
        &b_addr,
        Some(&operator),
        "DeleteConnector",
        &json!({ "name": name, "force": true }),
    );
    assert_eq!(r.code, PERMISSION_DENIED, "{}", r.err);
    let status = call(
        &a_addr,
        Some(&viewer),
        "GetConnectorStatus",
        &json!({ "name": name }),
    );
    assert_eq!(status.code, 0, "{}", status.err);
    assert!(
        status.body["status"]["deletion"].is_null(),
        "{}",
        status.body
    );
    let r = call(
        &b_addr,
        Some(&operator),
        "PauseConnector",
        &json!({ "name": name }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let r = call(
        &a_addr,
        Some(&viewer),
        "GetConnector",
        &json!({ "name": name }),
    );
    assert_eq!(
        r.body["connector"]["targetState"], "TARGET_STATE_PAUSED",
        "{}",
        r.body
    );

    // The leader recorded each forwarded call under its caller, with the follower's URL.
    let b_url = format!("http://{b_addr}");
    let want = [
        ("vera", "CreateConnector", "", "PERMISSION_DENIED"),
        ("otto", "CreateConnector", "", "OK"),
        ("vera", "DeleteConnector", "cleanup", "PERMISSION_DENIED"),
        ("otto", "DeleteConnector", "force", "PERMISSION_DENIED"),
        ("otto", "PauseConnector", "", "OK"),
    ];
    for addr in [&a_addr, &b_addr] {
        let got = entries(addr, &admin, name);
        let summary: Vec<(&str, &str, &str, &str)> = got
            .iter()
            .map(|e| {
                (
                    e["principal"].as_str().unwrap_or(""),
                    e["rpc"].as_str().unwrap_or(""),
                    e["deletionMode"].as_str().unwrap_or(""),
                    e["outcome"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(summary, want, "read on {addr}: {got:#?}");
        assert!(
            got.iter().all(|e| e["forwardedBy"] == b_url.as_str()),
            "every call went through the follower: {got:#?}"
        );
    }
    assert!(
        a.log().contains("wharf::audit"),
        "the leader logged the audit events"
    );
    drop(exec);
    drop(b);
    drop(a);
}
