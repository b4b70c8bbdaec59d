//! Admin authentication, roles and the audit trail, end to end: a real control plane
//! with an `--admin-tokens` file, a real executor, real grpcurl with
//! `-H 'authorization: Bearer …'` (as operators call it), tokens minted by the real
//! `wharf-control-plane token` subcommand.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor`, then
//! `cargo test --test admin_auth`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use wharf_harness::cluster::{
    CONVERGE, Call, GRPCURL_STATUS_BASE, TEST_HEARTBEAT_INTERVAL_MS, TEST_LEASE_MS,
};
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::{KeepOnFailure, Proc, WAIT_DEADLINE, wait_until};

/// gRPC PERMISSION_DENIED.
const PERMISSION_DENIED: i32 = 7;
/// gRPC UNAUTHENTICATED.
const UNAUTHENTICATED: i32 = 16;

/// A token and its file line, from `wharf-control-plane token`.
struct Minted {
    token: String,
    line: String,
}

/// Runs `wharf-control-plane token --name NAME --role ROLE`: the line on stdout, the
/// token as the last line of stderr.
fn mint(name: &str, role: &str) -> Minted {
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
    let token = err.lines().last().expect("token line").trim().to_owned();
    assert!(token.starts_with("wharf_"), "{err}");
    assert!(
        !line.contains(&token),
        "the file line must not hold the token: {line}"
    );
    Minted { token, line }
}

/// grpcurl `method` on `addr`, with `authorization: Bearer <token>` when given.
fn call(addr: &str, token: Option<&str>, method: &str, body: &Value) -> Call {
    let mut args = vec![
        "-plaintext".to_owned(),
        "-emit-defaults".to_owned(),
        "-max-time".to_owned(),
        "60".to_owned(),
    ];
    if let Some(t) = token {
        args.push("-H".into());
        args.push(format!("authorization: Bearer {t}"));
    }
    args.extend([
        "-d".into(),
        body.to_string(),
        addr.to_owned(),
        format!("wharf.v1.ConnectorAdmin/{method}"),
    ]);
    let program = std::env::var("GRPCURL").unwrap_or_else(|_| "grpcurl".to_owned());
    let out = Command::new(program)
        .args(&args)
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

fn control_plane(dir: &Path, tokens: &Path, extra: &[&str]) -> Proc {
    let d = dir.join("cp");
    let mut args: Vec<String> = vec![
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--data-dir".into(),
        d.display().to_string(),
        "--lease-ms".into(),
        TEST_LEASE_MS.to_string(),
        "--heartbeat-interval-ms".into(),
        TEST_HEARTBEAT_INTERVAL_MS.to_string(),
        "--admin-tokens".into(),
        tokens.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    Proc::spawn(wharf_harness::bin("wharf-control-plane"), args, &d)
}

fn executor(dir: &Path, id: &str, ip: &str, control_planes: &str) -> Proc {
    let d = dir.join(id);
    Proc::spawn(
        wharf_harness::bin("wharf-executor"),
        vec![
            "--listen".into(),
            format!("{ip}:0"),
            "--control-plane".into(),
            control_planes.to_owned(),
            "--data-dir".into(),
            d.display().to_string(),
            "--executor-id".into(),
            id.into(),
        ],
        &d,
    )
}

async fn wait_alive(addr: &str, token: &str, n: usize) {
    wait_until(&format!("{n} executors alive"), CONVERGE, || async {
        let r = call(addr, Some(token), "ListExecutors", &json!({}));
        let alive = r.body["executors"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|e| e["state"] == "EXECUTOR_STATE_ALIVE")
                    .count()
            })
            .unwrap_or(0);
        (alive == n).then_some(())
    })
    .await;
}

fn listed(addr: &str, token: &str) -> Vec<String> {
    let r = call(addr, Some(token), "ListConnectors", &json!({}));
    assert_eq!(r.code, 0, "{}", r.err);
    r.body["connectors"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| c["name"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Asserts that `name` is listed, RUNNING with `tasks` RUNNING tasks and not deleting.
fn assert_untouched(addr: &str, token: &str, name: &str, tasks: usize) {
    assert_eq!(listed(addr, token), vec![name.to_owned()]);
    let r = call(
        addr,
        Some(token),
        "GetConnectorStatus",
        &json!({ "name": name }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let s = &r.body["status"];
    assert_eq!(s["connector"]["state"], "STATE_RUNNING", "{s}");
    assert!(s["deletion"].is_null(), "no deletion recorded: {s}");
    let ts = s["tasks"].as_array().cloned().unwrap_or_default();
    assert_eq!(ts.len(), tasks, "{s}");
    assert!(
        ts.iter().all(|t| t["status"]["state"] == "STATE_RUNNING"),
        "{s}"
    );
}

fn audit(addr: &str, token: &str, connector: &str) -> Vec<Value> {
    let r = call(
        addr,
        Some(token),
        "ListAuditEntries",
        &json!({ "connector": connector, "page_size": 1000 }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    r.body["entries"].as_array().cloned().unwrap_or_default()
}

/// (principal, rpc, deletion_mode, outcome) of each entry.
fn summary(entries: &[Value]) -> Vec<(String, String, String, String)> {
    entries
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or("").to_owned();
            (s("principal"), s("rpc"), s("deletionMode"), s("outcome"))
        })
        .collect()
}

fn row(p: &str, rpc: &str, mode: &str, outcome: &str) -> (String, String, String, String) {
    (p.into(), rpc.into(), mode.into(), outcome.into())
}

fn source_config(lifecycle: &Path, tasks: u32) -> Value {
    json!({
        "connector.class": "test-source",
        "tasks.max": tasks.to_string(),
        "lifecycle.path": lifecycle.display().to_string(),
        "test.poll.block.ms": "50",
    })
}

/// Keys of a redb table of the stopped control plane's store.
fn store_keys(store: &Path, table: &str) -> Vec<String> {
    use wharf_harness::redb::{ReadableDatabase, ReadableTable, TableDefinition};
    let def: TableDefinition<&str, &[u8]> = TableDefinition::new(table);
    let db =
        wharf_harness::redb::Database::open(store).expect("open the stopped control plane's store");
    let tx = db.begin_read().expect("read tx");
    let t = tx.open_table(def).expect("table");
    t.iter()
        .expect("iter")
        .map(|e| e.expect("entry").0.value().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_may_delete_only_as_the_rules_allow_and_the_audit_trail_names_every_caller() {
    let dir = KeepOnFailure::new();
    let (viewer, operator, admin) = (
        mint("vera", "viewer"),
        mint("otto", "operator"),
        mint("ada", "admin"),
    );
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        format!("{}\n{}\n{}\n", viewer.line, operator.line, admin.line),
    )
    .unwrap();
    let mut cp = control_plane(dir.path(), &tokens, &[]);
    let addr = cp.listen_addr().await;
    let mut exec = executor(dir.path(), "exec-1", "127.0.0.2", &format!("http://{addr}"));
    exec.listen_addr().await;
    wait_alive(&addr, &viewer.token, 1).await;

    // Reads need a credential too.
    let r = call(&addr, None, "ListConnectors", &json!({}));
    assert_eq!(r.code, UNAUTHENTICATED, "{}", r.err);

    let name = "guarded";
    let lifecycle = dir.path().join("lifecycle.jsonl");
    let config = source_config(&lifecycle, 2);
    let r = call(
        &addr,
        Some(&viewer.token),
        "CreateConnector",
        &json!({ "name": name, "config": config }),
    );
    assert_eq!(
        r.code, PERMISSION_DENIED,
        "a viewer may not create: {}",
        r.err
    );
    assert!(listed(&addr, &viewer.token).is_empty());
    let r = call(
        &addr,
        Some(&operator.token),
        "CreateConnector",
        &json!({ "name": name, "config": config }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until("guarded RUNNING with 2 tasks", CONVERGE, || async {
        let r = call(
            &addr,
            Some(&viewer.token),
            "GetConnectorStatus",
            &json!({ "name": name }),
        );
        let s = &r.body["status"];
        let ts = s["tasks"].as_array().cloned().unwrap_or_default();
        (s["connector"]["state"] == "STATE_RUNNING"
            && ts.len() == 2
            && ts.iter().all(|t| t["status"]["state"] == "STATE_RUNNING"))
        .then_some(())
    })
    .await;

    // No credentials, an unknown token: UNAUTHENTICATED, nothing changes.
    let delete = json!({ "name": name, "force": true });
    let r = call(&addr, None, "DeleteConnector", &delete);
    assert_eq!(r.code, UNAUTHENTICATED, "{}", r.err);
    assert_untouched(&addr, &viewer.token, name, 2);
    let r = call(
        &addr,
        Some("wharf_not-a-real-token"),
        "DeleteConnector",
        &delete,
    );
    assert_eq!(r.code, UNAUTHENTICATED, "{}", r.err);
    assert_untouched(&addr, &viewer.token, name, 2);
    // A viewer deleting, even with cleanup: PERMISSION_DENIED.
    let r = call(
        &addr,
        Some(&viewer.token),
        "DeleteConnector",
        &json!({ "name": name }),
    );
    assert_eq!(r.code, PERMISSION_DENIED, "{}", r.err);
    assert!(r.err.contains("vera"), "names the principal: {}", r.err);
    assert_untouched(&addr, &viewer.token, name, 2);
    // An operator forcing, or keeping resources: PERMISSION_DENIED (admin only).
    let r = call(&addr, Some(&operator.token), "DeleteConnector", &delete);
    assert_eq!(r.code, PERMISSION_DENIED, "{}", r.err);
    assert!(
        r.err.contains("force") && r.err.contains("admin"),
        "{}",
        r.err
    );
    assert_untouched(&addr, &viewer.token, name, 2);
    let r = call(
        &addr,
        Some(&operator.token),
        "DeleteConnector",
        &json!({ "name": name, "keep_resources": true }),
    );
    assert_eq!(r.code, PERMISSION_DENIED, "{}", r.err);
    assert_untouched(&addr, &viewer.token, name, 2);
    // Nothing was stopped, let alone cleaned up.
    let l = Lifecycle::read(&lifecycle);
    for task in [None, Some(0), Some(1)] {
        assert!(
            l.stops(name, task).is_empty(),
            "{task:?}: {:?}",
            l.stops(name, task)
        );
    }

    // An admin forcing: OK, and the connector is gone.
    let r = call(
        &addr,
        Some(&admin.token),
        "DeleteConnector",
        &json!({ "name": name, "force": true, "wait": true }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.body["deleted"], true, "{}", r.body);
    assert!(listed(&addr, &viewer.token).is_empty());

    // One entry per mutating call, accepted or refused, with who and how; reads are not
    // recorded.
    let entries = audit(&addr, &operator.token, name);
    assert_eq!(
        summary(&entries),
        vec![
            row("vera", "CreateConnector", "", "PERMISSION_DENIED"),
            row("otto", "CreateConnector", "", "OK"),
            row("-", "DeleteConnector", "force", "UNAUTHENTICATED"),
            row("-", "DeleteConnector", "force", "UNAUTHENTICATED"),
            row("vera", "DeleteConnector", "cleanup", "PERMISSION_DENIED"),
            row("otto", "DeleteConnector", "force", "PERMISSION_DENIED"),
            row(
                "otto",
                "DeleteConnector",
                "keep_resources",
                "PERMISSION_DENIED"
            ),
            row("ada", "DeleteConnector", "force", "OK"),
        ],
        "{entries:#?}"
    );
    let last = entries.last().unwrap();
    assert_eq!(last["role"], "admin");
    assert_eq!(last["authMethod"], "token");
    assert!(
        last["timeMs"]
            .as_str()
            .and_then(|t| t.parse::<i64>().ok())
            .unwrap_or(0)
            > 0,
        "{last}"
    );
    assert!(
        entries[5]["message"]
            .as_str()
            .unwrap_or("")
            .contains("admin"),
        "{}",
        entries[5]
    );
    // Each entry is also a structured log event.
    assert!(cp.log().contains("wharf::audit"), "audit log events");
    // Paging: two at a time, the same entries in the same order.
    let mut paged = Vec::new();
    let mut token = String::new();
    loop {
        let r = call(
            &addr,
            Some(&admin.token),
            "ListAuditEntries",
            &json!({ "connector": name, "page_size": 2, "page_token": token }),
        );
        assert_eq!(r.code, 0, "{}", r.err);
        paged.extend(r.body["entries"].as_array().cloned().unwrap_or_default());
        token = r.body["nextPageToken"].as_str().unwrap_or("").to_owned();
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(paged, entries);
    // A time range that ends before the first entry holds nothing.
    let first_ms: i64 = entries[0]["timeMs"].as_str().unwrap().parse().unwrap();
    let r = call(
        &addr,
        Some(&admin.token),
        "ListAuditEntries",
        &json!({ "since_ms": 1, "until_ms": first_ms }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.body["entries"], json!([]), "{}", r.body);
    // The viewer may not read the trail.
    let r = call(&addr, Some(&viewer.token), "ListAuditEntries", &json!({}));
    assert_eq!(r.code, PERMISSION_DENIED, "{}", r.err);

    // The store holds no trace of the connector, and the trail durably.
    let store: PathBuf = dir.path().join("cp").join("state.redb");
    exec.terminate(WAIT_DEADLINE).await;
    cp.terminate(WAIT_DEADLINE).await;
    assert!(!store_keys(&store, "connectors").contains(&name.to_owned()));
    assert!(!store_keys(&store, "deletions").contains(&name.to_owned()));
    assert_eq!(store_keys(&store, "audit").len(), entries.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_added_to_the_file_works_without_a_restart_and_a_removed_one_is_refused() {
    let dir = KeepOnFailure::new();
    let admin = mint("ada", "admin");
    let late = mint("lou", "operator");
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(&tokens, format!("{}\n", admin.line)).unwrap();
    let mut cp = control_plane(dir.path(), &tokens, &[]);
    let addr = cp.listen_addr().await;

    let pid = cp.pid();
    let r = call(&addr, Some(&late.token), "ListConnectors", &json!({}));
    assert_eq!(r.code, UNAUTHENTICATED, "not in the file yet: {}", r.err);
    std::fs::write(&tokens, format!("{}\n{}\n", admin.line, late.line)).unwrap();
    let r = call(&addr, Some(&late.token), "ListConnectors", &json!({}));
    assert_eq!(r.code, 0, "added to the file: {}", r.err);
    std::fs::write(&tokens, format!("{}\n", admin.line)).unwrap();
    let r = call(&addr, Some(&late.token), "ListConnectors", &json!({}));
    assert_eq!(r.code, UNAUTHENTICATED, "removed from the file: {}", r.err);
    let r = call(&addr, Some(&admin.token), "ListConnectors", &json!({}));
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(cp.pid(), pid, "no restart");
    assert!(cp.log().contains("admin tokens reloaded"), "{}", cp.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_loopback_listen_without_admin_authentication_refuses_to_start() {
    let dir = KeepOnFailure::new();
    let d = dir.path().join("cp");
    // 0.0.0.0 is refused before anything is bound.
    let out = Command::new(wharf_harness::bin("wharf-control-plane"))
        .args(["--listen", "0.0.0.0:0", "--data-dir"])
        .arg(&d)
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--admin-tokens") && err.contains("--insecure"),
        "says how to fix it: {err}"
    );
    assert!(!d.join("listen.addr").exists());
    // A missing token file is a start error naming it.
    let out = Command::new(wharf_harness::bin("wharf-control-plane"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&d)
        .arg("--admin-tokens")
        .arg(dir.path().join("nope.toml"))
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope.toml"));
}
