//! Admin authorization across replicas: two control planes on one (test-owned) etcd
//! share a token file; calls made to the follower are forwarded to the leader with the
//! caller's bearer token, and the leader applies the same rules to them: an operator's
//! create and pause go through, a viewer's delete and an operator's forced delete are
//! refused, and the audit trail (read on either replica) names the original caller and
//! the follower that forwarded the call.
//!
//! Needs the `etcd` binary (Debian `etcd-server`, scripts/setup-services) and grpcurl.
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor`, then
//! `cargo test --test admin_auth_etcd`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use wharf_harness::cluster::{
    CONVERGE, Call, GRPCURL_STATUS_BASE, TEST_HEARTBEAT_INTERVAL_MS, TEST_LEASE_MS,
};
use wharf_harness::{KeepOnFailure, Proc, wait_until};

/// gRPC PERMISSION_DENIED.
const PERMISSION_DENIED: i32 = 7;
/// gRPC UNAUTHENTICATED.
const UNAUTHENTICATED: i32 = 16;
/// Election lease TTL of the test replicas, in seconds (etcd's shortest is 2).
const ELECTION_TTL_SECS: u32 = 2;
/// Bound on the leader election after a start.
const ELECTION_DEADLINE: Duration = Duration::from_secs(20);

/// (token, file line) from `wharf-control-plane token`.
fn mint(name: &str, role: &str) -> (String, String) {
    let out = Command::new(wharf_harness::bin("wharf-control-plane"))
        .args(["token", "--name", name, "--role", role])
        .output()
        .expect("run the token subcommand");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8(out.stdout)
        .expect("utf8")
        .trim()
        .to_owned();
    let err = String::from_utf8(out.stderr).expect("utf8");
    (err.lines().last().expect("token").trim().to_owned(), line)
}

/// grpcurl with `authorization: Bearer <token>` when given.
fn call(addr: &str, token: Option<&str>, method: &str, body: &Value) -> Call {
    let mut cmd = Command::new(std::env::var("GRPCURL").unwrap_or_else(|_| "grpcurl".into()));
    cmd.args(["-plaintext", "-emit-defaults", "-max-time", "60"]);
    if let Some(t) = token {
        cmd.arg("-H").arg(format!("authorization: Bearer {t}"));
    }
    let out = cmd
        .arg("-d")
        .arg(body.to_string())
        .arg(addr)
        .arg(format!("wharf.v1.ConnectorAdmin/{method}"))
        .output()
        .expect("grpcurl on PATH");
    let code = match out.status.code() {
        Some(0) => 0,
        Some(c) if c > GRPCURL_STATUS_BASE => c - GRPCURL_STATUS_BASE,
        other => panic!(
            "grpcurl failed to run ({other:?}): {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    };
    Call {
        code,
        body: if code == 0 {
            serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
        } else {
            Value::Null
        },
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn replica(dir: &Path, name: &str, etcd: &str, key: &[u8], tokens: &Path) -> Proc {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    // Every replica seals with the same key (docs/state.md).
    std::fs::write(d.join("store.key"), key).unwrap();
    Proc::spawn(
        wharf_harness::bin("wharf-control-plane"),
        vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--data-dir".into(),
            d.display().to_string(),
            "--lease-ms".into(),
            TEST_LEASE_MS.to_string(),
            "--heartbeat-interval-ms".into(),
            TEST_HEARTBEAT_INTERVAL_MS.to_string(),
            "--store".into(),
            "etcd".into(),
            "--etcd-endpoints".into(),
            etcd.into(),
            "--etcd-prefix".into(),
            "/authz/".into(),
            "--etcd-election-ttl-secs".into(),
            ELECTION_TTL_SECS.to_string(),
            "--admin-tokens".into(),
            tokens.display().to_string(),
        ],
        &d,
    )
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
    let (viewer, viewer_line) = mint("vera", "viewer");
    let (operator, operator_line) = mint("otto", "operator");
    let (admin, admin_line) = mint("ada", "admin");
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
        ("-", "CreateConnector", "", "UNAUTHENTICATED"),
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
