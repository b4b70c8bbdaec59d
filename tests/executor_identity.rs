//! The control plane checks whom it dialed, and backs off from executors whose calls fail
//! (docs/security.md "The dialed identity", docs/lifecycle.md "Unreachable executors"),
//! with real processes and certificates made in the test.
//!
//! A process holding exec-2's certificate may register exec-2 (the registry checks that
//! much), but it can advertise any address. Registered with exec-1's address, the control
//! plane's calls for exec-2 reach exec-1: over mutual TLS the control plane sees exec-1's
//! certificate where it expected exec-2's, refuses the connection, and shows exec-2
//! unreachable with both identities named; nothing runs in exec-2's name and exec-1 keeps
//! its work at the same epoch. Without TLS (loopback only) the control plane's probe of
//! the address gets exec-1's own answer (its id), with the same outcome. Failed calls back
//! off per executor instead of being retried as fast as the herder loops.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wharf_harness::client::{ClientCert, Dial, rpc};
use wharf_harness::cluster::{CONVERGE, PERMISSION_DENIED, TestCluster};
use wharf_harness::fault::create_running;
use wharf_harness::{Proc, bin, wait_until};

/// Most failed calls toward a failing executor in [`WINDOW`]: with the backoff (200 ms
/// doubling to 10 s, jittered) a handful; without, the herder retries every pass
/// (hundreds to thousands).
const MAX_ATTEMPTS_IN_WINDOW: usize = 10;
/// Window over which attempts are counted.
const WINDOW: Duration = Duration::from_secs(3);

fn executor(c: &TestCluster, id: &str) -> Option<Value> {
    let r = c.call("ListExecutors", json!({}));
    r.body["executors"]
        .as_array()?
        .iter()
        .find(|e| e["id"] == id)
        .cloned()
}

/// Starts a process that holds exec-2's certificate (with mTLS) and registers as exec-2
/// with `advertise`, listening on 127.0.0.3.
async fn rogue(c: &TestCluster, advertise: &str) -> Proc {
    let d = c.dir.path().join("rogue");
    let mut args = vec![
        "--listen".into(),
        "127.0.0.3:0".into(),
        "--advertise".into(),
        advertise.to_owned(),
        "--control-plane".into(),
        c.cp_url(),
        "--data-dir".into(),
        d.display().to_string(),
        "--executor-id".into(),
        "exec-2".into(),
    ];
    args.extend(c.executor_tls_flags("exec-2", "127.0.0.3"));
    let mut p = Proc::spawn(bin("wharf-executor"), args, &d);
    let addr = p.listen_addr().await;
    c.register_executor_addr(&addr);
    p
}

/// (executor, generation) of the connector instance and every task, from a status body.
fn placements(status: &Value) -> Vec<(String, String, String)> {
    let one = |s: &Value| {
        (
            s["executorId"].as_str().unwrap_or_default().to_owned(),
            s["state"].as_str().unwrap_or_default().to_owned(),
            s["generation"].to_string(),
        )
    };
    std::iter::once(one(&status["connector"]))
        .chain(
            status["tasks"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| one(&t["status"])),
        )
        .collect()
}

/// What the executor serving at `addr` hosts: (connector, task or -1) pairs.
fn hosted(addr: &str) -> Vec<(String, i64)> {
    let r = wharf_harness::cluster::call_at(addr, "wharf.v1.Executor/ListAssignments", &json!({}));
    assert_eq!(r.code, 0, "ListAssignments on {addr}: {}", r.err);
    let mut out: Vec<(String, i64)> = r.body["connectors"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| (c["connector"].as_str().unwrap_or_default().to_owned(), -1))
        .collect();
    out.extend(r.body["tasks"].as_array().into_iter().flatten().map(|t| {
        (
            t["task"]["connector"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            t["task"]["task"].as_i64().unwrap_or_default(),
        )
    }));
    out.sort();
    out
}

/// Calls toward exec-2 that failed (starts not taken, identity probes), as the control
/// plane logged them, within [`WINDOW`] from now.
async fn attempts_in_window(c: &TestCluster) -> usize {
    let count = |log: &str| {
        log.lines()
            .filter(|l| {
                (l.contains("start not taken") || l.contains("executor probe failed"))
                    && l.contains("exec-2")
            })
            .count()
    };
    let before = count(&c.cp_log());
    let t0 = Instant::now();
    wait_until("the counting window to pass", WINDOW * 3, || async {
        (t0.elapsed() >= WINDOW).then_some(())
    })
    .await;
    count(&c.cp_log()) - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_with_another_executors_address_gets_nothing_run_and_is_shown_unreachable() {
    let c = TestCluster::start_mtls(1).await;
    let kept = "kept";
    let before = create_running(&c, kept, c.source_config(kept, 2), 2).await;
    let exec1 = executor(&c, "exec-1").expect("exec-1 listed");
    let exec1_addr = exec1["address"].as_str().expect("address").to_owned();
    assert!(exec1_addr.starts_with("https://"), "{exec1}");

    let mut rogue = rogue(&c, &exec1_addr).await;
    c.wait_alive(2).await;
    // New work, which the placement spreads over both executors.
    let fresh = "fresh";
    let r = c.call(
        "CreateConnector",
        json!({ "name": fresh, "config": c.source_config(fresh, 4) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);

    let shown = wait_until("exec-2 shown unreachable", CONVERGE, || async {
        executor(&c, "exec-2").filter(|e| e["unreachableError"] != "")
    })
    .await;
    let error = shown["unreachableError"].as_str().unwrap_or_default();
    assert!(
        error.contains("spiffe://wharf/executor/exec-1")
            && error.contains("spiffe://wharf/executor/exec-2"),
        "the error names both identities: {shown}"
    );
    assert!(
        c.cp_log().contains("spiffe://wharf/executor/exec-1"),
        "the mismatch is in the control plane's log"
    );
    // Not retried hot.
    let attempts = attempts_in_window(&c).await;
    assert!(
        attempts <= MAX_ATTEMPTS_IN_WINDOW,
        "{attempts} start attempts toward exec-2 in {WINDOW:?}"
    );

    // exec-1 kept its work, at the same epoch, and nothing runs in exec-2's name.
    let now = executor(&c, "exec-1").expect("exec-1 listed");
    assert_eq!(now["epoch"], exec1["epoch"], "{now}");
    assert_eq!(now["state"], "EXECUTOR_STATE_ALIVE", "{now}");
    let status = c.status(kept).expect("kept status");
    assert_eq!(placements(&status), placements(&before), "{status}");
    let fresh_status = c.status(fresh).expect("fresh status");
    for (exec, state, _) in placements(&fresh_status) {
        assert!(
            !(exec == "exec-2" && state == "STATE_RUNNING"),
            "a unit runs in exec-2's name: {fresh_status}"
        );
    }
    // exec-1 hosts only what the status places on it; the rogue's own listener nothing.
    let on_exec1: Vec<(String, i64)> = {
        let mut v = Vec::new();
        for (name, s) in [(kept, &status), (fresh, &fresh_status)] {
            if s["connector"]["executorId"] == "exec-1"
                && s["connector"]["state"] == "STATE_RUNNING"
            {
                v.push((name.to_owned(), -1));
            }
            for (i, t) in s["tasks"].as_array().into_iter().flatten().enumerate() {
                if t["status"]["executorId"] == "exec-1" && t["status"]["state"] == "STATE_RUNNING"
                {
                    v.push((name.to_owned(), i as i64));
                }
            }
        }
        v.sort();
        v
    };
    let exec1_hosts = hosted(&exec1_addr);
    for unit in &exec1_hosts {
        assert!(
            on_exec1.contains(unit),
            "exec-1 hosts {unit:?}, which the status does not place there: {exec1_hosts:?} vs {on_exec1:?}"
        );
    }
    let rogue_addr = rogue.listen_addr().await;
    assert_eq!(hosted(&rogue_addr), Vec::<(String, i64)>::new());
    drop(rogue);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tls_the_executors_own_answer_shows_a_borrowed_address_and_calls_back_off() {
    // Plaintext on loopback: no certificate to check, but the process at the address
    // answers the control plane's probe with its own id (exec-1), not exec-2.
    let c = TestCluster::start(1).await;
    let exec1 = executor(&c, "exec-1").expect("exec-1 listed");
    let exec1_addr = exec1["address"].as_str().expect("address").to_owned();
    let rogue = rogue(&c, &exec1_addr).await;
    c.wait_alive(2).await;
    let name = "spread";
    let r = c.call(
        "CreateConnector",
        json!({ "name": name, "config": c.source_config(name, 4) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let shown = wait_until("exec-2 shown unreachable", CONVERGE, || async {
        executor(&c, "exec-2").filter(|e| e["unreachableError"] != "")
    })
    .await;
    let error = shown["unreachableError"].as_str().unwrap_or_default();
    assert!(
        error.contains(r#"answers as executor "exec-1", not "exec-2""#),
        "{shown}"
    );
    let status = c.status(name).expect("status");
    for (exec, _, _) in placements(&status) {
        assert_ne!(exec, "exec-2", "a unit placed on exec-2: {status}");
    }
    let attempts = attempts_in_window(&c).await;
    assert!(
        attempts <= MAX_ATTEMPTS_IN_WINDOW,
        "{attempts} start attempts toward exec-2 in {WINDOW:?}"
    );
    let now = executor(&c, "exec-1").expect("exec-1 listed");
    assert_eq!(now["epoch"], exec1["epoch"], "{now}");
    drop(rogue);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_executor_certificate_is_named_in_the_audit_trail() {
    let c = TestCluster::start_mtls(1).await;
    let certs = c.tls.as_ref().expect("mTLS cluster");
    let (cert, key) = certs.leaf("executor-exec-1");
    let as_executor = Dial::plaintext().with_tls(ClientCert {
        ca: certs.ca(),
        identity: Some((cert, key)),
    });
    let r = rpc(
        &c.addr,
        &as_executor,
        "wharf.v1.ConnectorAdmin/CreateConnector",
        &json!({ "name": "by-executor", "config": { "connector.class": "test-source" } }),
    );
    assert_eq!(r.code, PERMISSION_DENIED, "{}", r.err);
    assert_eq!(c.status("by-executor"), None, "nothing was created");
    let r = c.call("ListAuditEntries", json!({ "connector": "by-executor" }));
    assert_eq!(r.code, 0, "{}", r.err);
    let entries = r.body["entries"].as_array().cloned().unwrap_or_default();
    assert_eq!(entries.len(), 1, "{}", r.body);
    let e = &entries[0];
    assert_eq!(e["principal"], "spiffe://wharf/executor/exec-1", "{e}");
    assert_eq!(e["authMethod"], "certificate", "{e}");
    assert_eq!(e["rpc"], "CreateConnector", "{e}");
    assert_eq!(e["outcome"], "PERMISSION_DENIED", "{e}");
}

/// Runs `wharf-executor` against `c` with `args` and `env` added to the usual settings
/// (data dir `data`); it must exit on its own within 20 s. Exit code and stderr.
async fn run_to_exit(
    c: &TestCluster,
    data: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (i32, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::process::Command::new(bin("wharf-executor"))
            .args(["--listen", "127.0.0.2:0", "--control-plane", &c.cp_url()])
            .arg("--data-dir")
            .arg(data)
            .args(args)
            .env_remove("WHARF_EXECUTOR_ID")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("the executor with {args:?} {env:?} is still running"))
    .expect("run wharf-executor");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_ids_follow_one_rule_at_start_at_registration_and_for_certificates() {
    let c = TestCluster::start(0).await;
    let listed = |c: &TestCluster| -> Vec<String> {
        let r = c.call("ListExecutors", json!({}));
        r.body["executors"]
            .as_array()
            .map(|es| {
                es.iter()
                    .filter_map(|e| e["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };

    // A bad --executor-id or WHARF_EXECUTOR_ID stops the start with exit code 2 (as
    // every bad setting), naming the setting, quoting the value and stating the rule;
    // nothing registers and no id is kept.
    for (i, (flag, env, shown)) in [
        (Some(""), None, "\"\""),
        (Some("bad id/ü"), None, "\"bad id/ü\""),
        (None, Some("a/b"), "\"a/b\""),
    ]
    .into_iter()
    .enumerate()
    {
        let data = c.dir.path().join(format!("bad-{i}"));
        let args: Vec<&str> = flag.map(|f| vec!["--executor-id", f]).unwrap_or_default();
        let env: Vec<(&str, &str)> = env
            .map(|v| vec![("WHARF_EXECUTOR_ID", v)])
            .unwrap_or_default();
        let (code, stderr) = run_to_exit(&c, &data, &args, &env).await;
        assert_eq!(code, 2, "{flag:?} {env:?}: {stderr}");
        assert!(
            stderr.contains("--executor-id")
                && stderr.contains("WHARF_EXECUTOR_ID")
                && stderr.contains(shown)
                && stderr.contains("executor ids are 1 to 200 bytes from A-Z a-z 0-9 . _ -"),
            "{flag:?} {env:?}: {stderr}"
        );
        assert!(!data.join("executor.id").exists(), "{flag:?} {env:?}");
    }
    assert_eq!(listed(&c), Vec::<String>::new());

    // An id kept in the data dir from before registers again when valid ...
    let kept = c.dir.path().join("kept");
    std::fs::create_dir_all(&kept).expect("data dir");
    std::fs::write(kept.join("executor.id"), "exec-kept\n").expect("kept id");
    let mut p = Proc::spawn(
        bin("wharf-executor"),
        vec![
            "--listen".into(),
            "127.0.0.2:0".into(),
            "--control-plane".into(),
            c.cp_url(),
            "--data-dir".into(),
            kept.display().to_string(),
        ],
        &kept,
    );
    p.listen_addr().await;
    wait_until("exec-kept registered", CONVERGE, || async {
        (listed(&c) == ["exec-kept"]).then_some(())
    })
    .await;
    drop(p);
    // ... and stops the start, naming its file, when it breaks the rule.
    let stale = c.dir.path().join("stale");
    std::fs::create_dir_all(&stale).expect("data dir");
    std::fs::write(stale.join("executor.id"), "old id/1").expect("kept id");
    let (code, stderr) = run_to_exit(&c, &stale, &[], &[]).await;
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains("\"old id/1\"")
            && stderr.contains(&stale.join("executor.id").display().to_string())
            && stderr.contains("A-Z a-z 0-9 . _ -"),
        "{stderr}"
    );

    // An emptied file too: the executor does not quietly become another one.
    std::fs::write(stale.join("executor.id"), "\n").expect("kept id");
    let (code, stderr) = run_to_exit(&c, &stale, &[], &[]).await;
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains(&stale.join("executor.id").display().to_string())
            && stderr.contains("is empty"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(stale.join("executor.id")).expect("kept id"),
        "\n",
        "the kept file is left as it was"
    );

    // The registry applies the same rule to a registration sent by other means.
    let mut registry =
        wharf::pb::v1::executor_registry_client::ExecutorRegistryClient::connect(c.cp_url())
            .await
            .expect("connect to the registry");
    for bad in ["", "bad id/ü"] {
        let e = registry
            .register_executor(wharf::pb::v1::RegisterExecutorRequest {
                executor_id: bad.into(),
                advertised_address: "http://127.0.0.2:1".into(),
                ..Default::default()
            })
            .await
            .expect_err(bad);
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad:?}: {e}");
        assert!(
            e.message().contains("executor_id")
                && e.message()
                    .contains("1 to 200 bytes from A-Z a-z 0-9 . _ -"),
            "{bad:?}: {e}"
        );
    }
    assert_eq!(listed(&c), ["exec-kept"]);

    // `certs executor --id` refuses by the same rule and writes nothing.
    let ca = c.dir.path().join("ca");
    let certs = |args: &[&str]| {
        std::process::Command::new(bin("wharf-control-plane"))
            .arg("certs")
            .args(args)
            .arg("--dir")
            .arg(&ca)
            .output()
            .expect("run certs")
    };
    assert!(certs(&["init"]).status.success());
    for bad in ["a/b", "bad-ü", ".."] {
        let out = certs(&["executor", "--id", bad]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}: {stderr}");
        assert!(
            stderr.contains(&format!("{bad:?}")) && stderr.contains("1 to 200 bytes"),
            "{bad}: {stderr}"
        );
    }
    assert!(certs(&["executor", "--id", "exec-ok"]).status.success());
}
