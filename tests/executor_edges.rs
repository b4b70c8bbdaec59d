//! An executor's edges with real processes: one process per data dir, one record log per
//! cluster, and no plaintext listener on a non-loopback address without `--insecure`.
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::time::Duration;

use wharf_harness::audit::start_nats;
use wharf_harness::cluster::TestCluster;
use wharf_harness::{Proc, wait_until};

/// Upper bound on a refused process's exit.
const EXIT_DEADLINE: Duration = Duration::from_secs(20);

/// Waits until `p` exits by itself; its exit code.
async fn exit_code(p: &mut Proc) -> Option<i32> {
    p.wait_exit(EXIT_DEADLINE).await
}

/// Flags of an executor on `listen` with data dir `data_dir`, registering with `c`.
fn executor_args(c: &TestCluster, listen: &str, data_dir: &std::path::Path) -> Vec<String> {
    vec![
        "--listen".into(),
        listen.into(),
        "--control-plane".into(),
        c.cp_url(),
        "--data-dir".into(),
        data_dir.display().to_string(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_executor_on_a_data_dir_in_use_exits_naming_the_holder() {
    let mut c = TestCluster::start(0).await;
    // The NATS log: the embedded one would refuse the second process by its own file lock.
    let nats = start_nats(c.dir.path()).await;
    c.add_executor_with(0, vec!["--nats-url".into(), nats.url.clone()])
        .await;
    c.wait_alive(1).await;
    let data_dir = c.dir.path().join("exec-1");
    let holder = c.executors[0].pid();
    let mut args = executor_args(&c, "127.0.0.3:0", &data_dir);
    args.extend(["--nats-url".into(), nats.url.clone()]);
    let mut second = Proc::spawn(
        wharf_harness::bin("wharf-executor"),
        args,
        &c.dir.path().join("second"),
    );
    let code = exit_code(&mut second).await;
    let log = second.log();
    assert!(matches!(code, Some(c) if c != 0), "{code:?}: {log}");
    assert!(
        log.contains(&format!("pid {holder}, executor exec-1"))
            && log.contains(&data_dir.display().to_string()),
        "{log}"
    );
    // The holder was not disturbed: still the one ALIVE executor, never fenced.
    c.wait_alive(1).await;
    assert!(
        !c.executors[0].log().contains("fenced"),
        "{}",
        c.executors[0].log()
    );
}

/// Ids of the executors the control plane lists (any state).
fn listed_executors(c: &TestCluster) -> Vec<String> {
    let r = c.call("ListExecutors", serde_json::json!({}));
    r.body["executors"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| e["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until `p`'s log holds `text`; the log.
async fn log_shows(p: &Proc, text: &str) -> String {
    wait_until(&format!("the log to say {text:?}"), EXIT_DEADLINE, || {
        let log = p.log();
        async move { log.contains(text).then_some(log) }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_on_another_record_log_is_refused_at_registration_naming_both_logs() {
    let mut c = TestCluster::start(0).await;
    let nats = start_nats(c.dir.path()).await;
    c.add_executor_with(0, vec!["--nats-url".into(), nats.url.clone()])
        .await;
    c.wait_alive(1).await;
    // exec-2 on its embedded log (the default).
    c.add_executor(1).await;
    let log = log_shows(&c.executors[1], "differs from the cluster's record log").await;
    let nats_identity = format!(
        "nats://{}?prefix=wharf",
        nats.url.trim_start_matches("nats://")
    );
    let embedded_identity = format!("embedded:{}", c.dir.path().join("exec-2/log").display());
    assert!(
        log.contains(&nats_identity)
            && log.contains(&embedded_identity)
            && log.contains("exec-1")
            && log.contains("registration failed; retrying"),
        "{log}"
    );
    assert!(
        c.cp_log().contains("registration refused: record log"),
        "{}",
        c.cp_log()
    );
    // Never listed, so never given work; it keeps retrying (the cluster's log may change).
    assert_eq!(listed_executors(&c), vec!["exec-1".to_owned()]);
    let listed = c.call("ListExecutors", serde_json::json!({}));
    assert_eq!(
        listed.body["executors"][0]["recordLog"],
        nats_identity.as_str()
    );
    assert!(c.executors[1].child.is_some());
    // The code a registration sent by other means gets: FAILED_PRECONDITION.
    let mut registry =
        wharf::pb::v1::executor_registry_client::ExecutorRegistryClient::connect(c.cp_url())
            .await
            .expect("connect to the registry");
    let e = registry
        .register_executor(wharf::pb::v1::RegisterExecutorRequest {
            executor_id: "exec-9".into(),
            advertised_address: "http://127.0.0.9:1".into(),
            record_log: "kafka://k1:9092".into(),
            ..Default::default()
        })
        .await
        .expect_err("another log");
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e}");
    assert!(
        e.message().contains("kafka://k1:9092") && e.message().contains(&nats_identity),
        "{e}"
    );
    // The cluster's log is kept in the store: a restarted control plane still refuses.
    let refusals = |c: &TestCluster| {
        c.cp_log()
            .matches("registration refused: record log")
            .count()
    };
    let before = refusals(&c);
    c.restart_control_plane().await;
    c.wait_alive(1).await;
    wait_until(
        "a refusal by the restarted control plane",
        EXIT_DEADLINE,
        || {
            let more = refusals(&c) > before;
            async move { more.then_some(()) }
        },
    )
    .await;
    assert_eq!(listed_executors(&c), vec!["exec-1".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_executors_on_their_own_embedded_logs_are_two_logs() {
    let mut c = TestCluster::start_secured_with_env(
        0,
        Vec::new(),
        false,
        &[("WHARF_ALLOW_SEPARATE_EMBEDDED_LOGS", "false")],
    )
    .await;
    c.add_executor(0).await;
    c.wait_alive(1).await;
    c.add_executor(1).await;
    let log = log_shows(&c.executors[1], "differs from the cluster's record log").await;
    assert!(
        log.contains("alone in its cluster")
            && log.contains(&format!(
                "embedded:{}",
                c.dir.path().join("exec-1/log").display()
            )),
        "{log}"
    );
    assert_eq!(listed_executors(&c), vec!["exec-1".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plaintext_executor_on_a_non_loopback_address_needs_insecure() {
    let c = TestCluster::start(0).await;
    let dir = c.dir.path().join("open");
    let mut refused = Proc::spawn(
        wharf_harness::bin("wharf-executor"),
        executor_args(&c, "0.0.0.0:0", &dir),
        &dir,
    );
    let code = exit_code(&mut refused).await;
    let log = refused.log();
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains("0.0.0.0:0 is not a loopback address") && log.contains("--insecure"),
        "{log}"
    );
    // With --insecure it starts, and says what that means.
    let mut args = executor_args(&c, "0.0.0.0:0", &dir);
    args.push("--insecure".into());
    let mut open = Proc::spawn(wharf_harness::bin("wharf-executor"), args, &dir);
    open.listen_addr().await;
    assert!(
        open.log()
            .contains("--insecure: plaintext listener on a non-loopback address"),
        "{}",
        open.log()
    );
    // On loopback no flag is needed.
    let lo = c.dir.path().join("loopback");
    let mut loopback = Proc::spawn(
        wharf_harness::bin("wharf-executor"),
        executor_args(&c, "127.0.0.4:0", &lo),
        &lo,
    );
    loopback.listen_addr().await;
}
