//! Admin authentication, roles and the audit trail, end to end: a real control plane
//! with an `--admin-tokens` file, a real executor, the typed admin client sending
//! `authorization: Bearer …` (what operators send), tokens minted by the real
//! `wharf-control-plane token` subcommand.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`, then
//! `cargo test --test admin_auth`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use wharf_harness::auth::{
    audit_summary as summary, call_with_token as call, connector_names,
    control_plane_with_tokens as control_plane, mint, mint_roles, row,
};
use wharf_harness::client::Dial;
use wharf_harness::cluster::{
    CONVERGE, INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED, UNAUTHENTICATED, wait_alive_at,
};
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::prometheus::{free_addr, http_get};
use wharf_harness::{KeepOnFailure, Proc, WAIT_DEADLINE, wait_until};

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
    wait_alive_at(addr, &Dial::bearer(token), n).await;
}

/// Asserts that `name` is listed, RUNNING with `tasks` RUNNING tasks and not deleting.
fn assert_untouched(addr: &str, token: &str, name: &str, tasks: usize) {
    assert_eq!(connector_names(addr, token), vec![name.to_owned()]);
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
    assert!(connector_names(&addr, &viewer.token).is_empty());
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
    assert!(connector_names(&addr, &viewer.token).is_empty());

    // One entry per mutating call of an identified caller, accepted or refused, with who
    // and how; reads are not recorded, nor are the two calls without valid credentials
    // (a stranger must not write to the store: see the test below).
    let entries = audit(&addr, &operator.token, name);
    assert_eq!(
        summary(&entries),
        vec![
            row("vera", "CreateConnector", "", "PERMISSION_DENIED"),
            row("otto", "CreateConnector", "", "OK"),
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
        entries[3]["message"]
            .as_str()
            .unwrap_or("")
            .contains("admin"),
        "{}",
        entries[3]
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

/// The value of the unlabelled counter `name` on the metrics page at `metrics`.
fn counter(metrics: &str, name: &str) -> f64 {
    let (code, page) = http_get(metrics, "/metrics");
    assert_eq!(code, 200, "{page}");
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} on the metrics page:\n{page}"))
}

/// Found by an adversarial review: every refused call was written to the trail with the
/// name as sent, so a caller without credentials could grow the store by megabytes a call
/// and, with retention, evict every real entry. Now such calls (none, a bad token, gRPC
/// and REST) write nothing: the store does not grow, the trail keeps its entries, the
/// counter counts them and the log has one line for the lot. An authenticated caller's
/// over-long name is refused and stored cut, with a marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_without_credentials_write_nothing_and_evict_nothing_from_a_small_trail() {
    const UNAUTHENTICATED_TOTAL: &str = "wharf_admin_calls_unauthenticated_total";
    let dir = KeepOnFailure::new();
    let [vera, otto, ada] = mint_roles();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        format!("{}\n{}\n{}\n", vera.line, otto.line, ada.line),
    )
    .unwrap();
    let metrics = free_addr("127.0.0.1");
    let mut cp = control_plane(
        dir.path(),
        &tokens,
        &[
            "--audit-max-entries",
            "20",
            "--metrics-listen",
            &metrics,
            "--rest-listen",
            "127.0.0.1:0",
        ],
    );
    let addr = cp.listen_addr().await;
    let rest = wharf_harness::rest::rest_addr(&dir.path().join("cp"));
    let victim = "victim";
    let huge = "z".repeat(1_000_000);

    // Three entries of identified callers about the victim.
    let r = call(
        &addr,
        Some(&vera.token),
        "DeleteConnector",
        &json!({ "name": victim }),
    );
    assert_eq!(r.code, PERMISSION_DENIED, "{}", r.err);
    let r = call(
        &addr,
        Some(&otto.token),
        "DeleteConnector",
        &json!({ "name": victim }),
    );
    assert_eq!(r.code, NOT_FOUND, "{}", r.err);
    let r = call(
        &addr,
        Some(&ada.token),
        "PauseConnector",
        &json!({ "name": victim }),
    );
    assert_eq!(r.code, NOT_FOUND, "{}", r.err);
    let before = audit(&addr, &ada.token, victim);
    assert_eq!(
        summary(&before),
        vec![
            row("vera", "DeleteConnector", "cleanup", "PERMISSION_DENIED"),
            row("otto", "DeleteConnector", "cleanup", "NOT_FOUND"),
            row("ada", "PauseConnector", "", "NOT_FOUND"),
        ]
    );

    // An admin's over-long name: INVALID_ARGUMENT without the name echoed, and an entry
    // whose connector is cut to the longest valid name plus a marker with the length.
    let r = call(
        &addr,
        Some(&ada.token),
        "DeleteConnector",
        &json!({ "name": huge, "force": true }),
    );
    assert_eq!(r.code, INVALID_ARGUMENT, "{:.300}", r.err);
    assert!(
        r.err.len() < 1_000,
        "the answer echoes the name: {:.300}",
        r.err
    );
    let all = call(
        &addr,
        Some(&ada.token),
        "ListAuditEntries",
        &json!({ "page_size": 1000 }),
    );
    assert_eq!(all.code, 0, "{}", all.err);
    let entries = all.body["entries"].as_array().cloned().unwrap_or_default();
    assert_eq!(entries.len(), 4, "{:?}", summary(&entries));
    let cut = &entries[3];
    assert_eq!(
        (&cut["principal"], &cut["outcome"]),
        (&json!("ada"), &json!("INVALID_ARGUMENT")),
        "{cut:.600}"
    );
    let connector = cut["connector"].as_str().unwrap_or("");
    let want = format!("{}...[cut, 1000000 bytes]", "z".repeat(200));
    assert!(
        connector == want,
        "connector {connector:.300} (a huge name is shown cut)"
    );
    assert!(
        cut["message"].as_str().unwrap_or("").len() < 1_100,
        "{cut:.600}"
    );
    assert_eq!(counter(&metrics, UNAUTHENTICATED_TOTAL), 0.0);

    // The flood: gRPC without credentials and with an unknown token, the huge name and a
    // valid one, then REST DELETEs without credentials over one connection (curl reuses
    // it across URLs), far more calls than the trail keeps.
    let store = dir.path().join("cp").join("state.redb");
    let size_before = std::fs::metadata(&store).expect("store").len();
    let mut calls = 0;
    for i in 0..20 {
        for (token, name) in [
            (None, huge.as_str()),
            (None, victim),
            (
                Some("wharf_not-a-real-token"),
                if i % 2 == 0 { victim } else { &huge },
            ),
        ] {
            let r = call(
                &addr,
                token,
                "DeleteConnector",
                &json!({ "name": name, "force": true }),
            );
            assert_eq!(r.code, UNAUTHENTICATED, "{:.300}", r.err);
            assert!(r.err.len() < 1_000, "{:.300}", r.err);
            calls += 1;
        }
    }
    let url = format!("http://{rest}/connectors/{victim}");
    let mut args = vec!["-sS", "-w", "%{http_code}\n", "-X", "DELETE"];
    for _ in 0..30 {
        // Each URL's body is discarded: only the status of each is printed.
        args.extend(["-o", "/dev/null", url.as_str()]);
    }
    let out = Command::new("curl").args(&args).output().expect("curl");
    let codes = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(codes.lines().filter(|c| *c == "401").count(), 30, "{codes}");
    calls += 30;

    // Nothing written: the store did not grow (each huge call was a megabyte before), the
    // trail holds the same entries, and it still answers.
    let size_after = std::fs::metadata(&store).expect("store").len();
    assert!(
        size_after <= size_before + 1024 * 1024,
        "the store grew from {size_before} to {size_after} bytes"
    );
    assert_eq!(audit(&addr, &ada.token, victim), before);
    let again = call(
        &addr,
        Some(&ada.token),
        "ListAuditEntries",
        &json!({ "page_size": 1000 }),
    );
    assert_eq!(again.code, 0, "{}", again.err);
    assert_eq!(again.body["entries"], all.body["entries"]);
    // Counted, one by one.
    assert_eq!(counter(&metrics, UNAUTHENTICATED_TOTAL), f64::from(calls));
    // Logged once for the lot (the next line is due a minute later), with the caller's
    // address and the name cut; nowhere is the huge name logged whole.
    let log = cp.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("no valid credentials"))
        .collect();
    assert!(
        (1..=2).contains(&lines.len()),
        "{} refusal lines: {lines:#?}",
        lines.len()
    );
    assert!(lines[0].contains("127.0.0.1"), "{}", lines[0]);
    assert!(lines[0].contains("DeleteConnector"), "{}", lines[0]);
    assert!(!log.contains(&"z".repeat(1_000)), "a huge name in the log");
    cp.terminate(WAIT_DEADLINE).await;
}

/// A viewer's token sends refused calls as fast as it can: the trail keeps 60 of them a
/// minute (`REFUSALS_RECORDED_PER_MINUTE`) and counts the rest, so that retention at
/// `--audit-max-entries` does not push everyone else's entries out (a review emptied a
/// trail of 50 with 61 refused calls of a viewer in 0.3 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewers_flood_of_refusals_evicts_nobody_elses_entries() {
    const NOT_RECORDED_TOTAL: &str = "wharf_admin_refusals_not_recorded_total";
    const FLOOD: usize = 150;
    const RECORDED: usize = 60;
    let dir = KeepOnFailure::new();
    let [vera, otto, ada] = mint_roles();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        format!("{}\n{}\n{}\n", vera.line, otto.line, ada.line),
    )
    .unwrap();
    let metrics = free_addr("127.0.0.1");
    let mut cp = control_plane(
        dir.path(),
        &tokens,
        &["--audit-max-entries", "100", "--metrics-listen", &metrics],
    );
    let addr = cp.listen_addr().await;
    let victim = "victim";
    for token in [&otto.token, &ada.token] {
        let r = call(
            &addr,
            Some(token),
            "PauseConnector",
            &json!({ "name": victim }),
        );
        assert_eq!(r.code, NOT_FOUND, "{}", r.err);
    }
    for _ in 0..FLOOD {
        let r = call(
            &addr,
            Some(&vera.token),
            "DeleteConnector",
            &json!({ "name": victim, "force": true }),
        );
        assert_eq!(r.code, PERMISSION_DENIED, "{}", r.err);
    }
    let trail = audit(&addr, &ada.token, victim);
    let rows = summary(&trail);
    assert_eq!(
        rows[..2],
        [
            row("otto", "PauseConnector", "", "NOT_FOUND"),
            row("ada", "PauseConnector", "", "NOT_FOUND"),
        ],
        "the others' entries are still there"
    );
    assert_eq!(rows.len(), 2 + RECORDED, "{rows:#?}");
    assert_eq!(
        counter(&metrics, NOT_RECORDED_TOTAL),
        (FLOOD - RECORDED) as f64
    );
    let lines = cp
        .log()
        .lines()
        .filter(|l| l.contains("refused admin calls of one caller this minute"))
        .count();
    assert_eq!(lines, 1, "one line for the minute");

    // An operator's refusals over the budget, then a call that is not a plain refusal:
    // recorded whatever the budget, and it says how many refusals were left out.
    // Its PauseConnector above was one; 64 more make 5 over the budget.
    for i in 0..RECORDED + 4 {
        let r = call(
            &addr,
            Some(&otto.token),
            "PauseConnector",
            &json!({ "name": format!("nope-{i}") }),
        );
        assert_eq!(r.code, NOT_FOUND, "{}", r.err);
    }
    let mut exec = executor(dir.path(), "exec-1", "127.0.0.2", &format!("http://{addr}"));
    exec.listen_addr().await;
    wait_alive(&addr, &ada.token, 1).await;
    let created = "made-after-the-flood";
    let lifecycle = dir.path().join("lifecycle.jsonl");
    let r = call(
        &addr,
        Some(&otto.token),
        "CreateConnector",
        &json!({ "name": created, "config": source_config(&lifecycle, 1) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let entry = audit(&addr, &ada.token, created);
    assert_eq!(
        summary(&entry),
        vec![row("otto", "CreateConnector", "", "OK")]
    );
    assert!(
        entry[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("[5 earlier refused calls of this caller not recorded")),
        "{entry:#?}"
    );
    drop(exec);
    cp.terminate(WAIT_DEADLINE).await;
}
