//! Operators watch Wharf through Prometheus (docs/observability.md): a real Prometheus
//! server scrapes a real control plane's metrics listener, and the test asks it PromQL
//! over its HTTP API. Task counts follow create, pause and delete; a deletion in progress
//! shows up and its series are gone once it finished; forced deletions and give-up leaks
//! are counted. Health follows the store: NOT_SERVING while etcd is stopped, and `/health`
//! answers at once even while a page render waits on a frozen etcd.

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, NOT_FOUND, TestCluster};
use wharf_harness::etcd::TestEtcd;
use wharf_harness::prometheus::{TestPrometheus, free_addr, grpc_health, http_get, wait_value};
use wharf_harness::wait_until;

/// Waits until `promql` has no sample any more (the series left the scrape).
async fn wait_no_series(prom: &TestPrometheus, promql: &str) {
    wait_until(
        &format!("Prometheus: {promql} has no series"),
        CONVERGE,
        || async { prom.query(promql).is_empty().then_some(()) },
    )
    .await;
}

async fn gone(c: &TestCluster, name: &str) {
    wait_until(&format!("{name} deleted"), CONVERGE, || async {
        (c.call("GetConnectorStatus", json!({ "name": name })).code == NOT_FOUND).then_some(())
    })
    .await;
}

fn create(c: &TestCluster, name: &str, cfg: Value) {
    let r = c.call("CreateConnector", json!({ "name": name, "config": cfg }));
    assert_eq!(r.code, 0, "create {name}: {}", r.err);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_follows_tasks_deletions_forced_deletions_and_leaks() {
    let metrics = free_addr("127.0.0.1");
    let c = TestCluster::start_with(1, vec!["--metrics-listen".into(), metrics.clone()]).await;
    let prom = TestPrometheus::start(std::slice::from_ref(&metrics));

    let (code, body) = http_get(&metrics, "/health");
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("JSON")["status"],
        "healthy"
    );
    wait_value(&prom, r#"wharf_executor_count{state="live"}"#, 1.0).await;

    // Create: three RUNNING tasks, cluster-wide and for the connector.
    let name = "watched";
    let mut cfg = c.source_config(name, 3);
    // Each stop takes 2 s, so that the deletion is in progress over several scrapes.
    cfg["test.stop.delay.ms"] = json!("2000");
    create(&c, name, cfg);
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 3)
        .await;
    wait_value(
        &prom,
        r#"wharf_connector_task_count{connector="watched",state="running"}"#,
        3.0,
    )
    .await;
    wait_value(&prom, r#"wharf_task_count{state="running"}"#, 3.0).await;

    // Pause: the same tasks, now PAUSED.
    assert_eq!(c.call("PauseConnector", json!({ "name": name })).code, 0);
    c.wait_state(name, "STATE_PAUSED", "STATE_PAUSED", 3).await;
    wait_value(&prom, r#"wharf_task_count{state="paused"}"#, 3.0).await;
    wait_value(&prom, r#"wharf_task_count{state="running"}"#, 0.0).await;
    // The connector counts as paused, as its status says (its connector instance keeps
    // running while paused: the count follows the status, not the recorded instance).
    wait_value(&prom, r#"wharf_connector_count{state="paused"}"#, 1.0).await;
    wait_value(&prom, r#"wharf_connector_count{state="running"}"#, 0.0).await;

    // Delete: in progress (with its steps), then every series of it is gone.
    assert_eq!(c.call("DeleteConnector", json!({ "name": name })).code, 0);
    wait_value(&prom, "wharf_deletions_in_progress", 1.0).await;
    assert!(
        !prom
            .query(r#"wharf_deletion_cleanup_steps{connector="watched"}"#)
            .is_empty(),
        "the steps of the deletion in progress are shown"
    );
    gone(&c, name).await;
    wait_value(&prom, "wharf_deletions_in_progress", 0.0).await;
    wait_no_series(&prom, r#"{connector="watched"}"#).await;
    wait_value(
        &prom,
        r#"wharf_deletions_finished_total{mode="cleanup"}"#,
        1.0,
    )
    .await;
    wait_value(&prom, r#"wharf_task_count{state="paused"}"#, 0.0).await;
    // 3 task steps and the connector step, each done once.
    wait_value(
        &prom,
        r#"wharf_cleanup_attempts_total{outcome="done"}"#,
        4.0,
    )
    .await;

    // A cleanup that keeps failing, then forced: counted as forced.
    let stubborn = "stubborn";
    let mut cfg = c.source_config(stubborn, 1);
    cfg["test.stop.fail.times"] = json!("100");
    cfg["cleanup.max.attempts"] = json!("1");
    create(&c, stubborn, cfg);
    c.wait_state(stubborn, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    assert_eq!(
        c.call("DeleteConnector", json!({ "name": stubborn })).code,
        0
    );
    wait_value(
        &prom,
        r#"wharf_cleanup_step_attempts{connector="stubborn",task="0",state="failed"}"#,
        1.0,
    )
    .await;
    let r = c.call(
        "DeleteConnector",
        json!({ "name": stubborn, "force": true }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    gone(&c, stubborn).await;
    wait_value(
        &prom,
        r#"wharf_deletions_finished_total{mode="forced"}"#,
        1.0,
    )
    .await;
    wait_value(
        &prom,
        r#"wharf_cleanup_attempts_total{outcome="exhausted"}"#,
        1.0,
    )
    .await;

    // cleanup.policy = give-up: both steps (the task's and the connector instance's) are
    // given up, each counted as a possible leak.
    let leaky = "leaky";
    let mut cfg = c.source_config(leaky, 1);
    cfg["test.stop.fail.times"] = json!("100");
    cfg["cleanup.max.attempts"] = json!("1");
    cfg["cleanup.policy"] = json!("give-up");
    create(&c, leaky, cfg);
    c.wait_state(leaky, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    assert_eq!(c.call("DeleteConnector", json!({ "name": leaky })).code, 0);
    gone(&c, leaky).await;
    wait_value(&prom, "wharf_cleanup_given_up_total", 2.0).await;
    wait_no_series(&prom, r#"{connector=~"stubborn|leaky"}"#).await;

    // Pass and commit histograms are recorded.
    assert!(
        prom.value("wharf_herder_pass_duration_seconds_count")
            .is_some_and(|n| n > 0.0),
        "herder passes are timed"
    );
    assert!(
        prom.value("wharf_store_commit_duration_seconds_count")
            .is_some_and(|n| n > 0.0),
        "store commits are timed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_not_serving_while_etcd_is_stopped() {
    let mut etcd = TestEtcd::start();
    let metrics = free_addr("127.0.0.1");
    // Two runtime workers, as on a 2-core host, whatever this machine has: two stalled
    // page renders would then hold every worker (see the end of the test).
    let c = TestCluster::start_secured_with_env(
        1,
        [
            etcd.store_flags(2),
            vec!["--metrics-listen".into(), metrics.clone()],
        ]
        .concat(),
        false,
        &[("TOKIO_WORKER_THREADS", "2")],
    )
    .await;
    wait_until("SERVING with etcd up", CONVERGE, || async {
        (grpc_health(&c.addr) == "SERVING").then_some(())
    })
    .await;
    assert_eq!(http_get(&metrics, "/ready").0, 200);

    etcd.stop();
    wait_until("NOT_SERVING with etcd stopped", CONVERGE, || async {
        (grpc_health(&c.addr) == "NOT_SERVING").then_some(())
    })
    .await;
    let (code, body) = http_get(&metrics, "/health");
    assert_eq!(code, 500, "KIP-1017's unhealthy: {body}");
    let body: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(body["status"], "unhealthy", "{body}");
    assert_eq!(http_get(&metrics, "/ready").0, 503);

    etcd.start_again();
    wait_until("SERVING again with etcd back", CONVERGE, || async {
        (grpc_health(&c.addr) == "SERVING").then_some(())
    })
    .await;
    assert_eq!(http_get(&metrics, "/health").0, 200);

    // A page render reads the store; with etcd frozen (it accepts, never answers) a read
    // waits for the store's call timeout. Probes must not wait behind renders (they once
    // did: /health took 4.74 s, past any probe's 1 s timeout), also when two scrapers
    // (an HA pair of Prometheus servers) render at once on a control plane with two
    // runtime workers. Every /health and gRPC health check asked meanwhile answers within a
    // second.
    etcd.freeze().await;
    let renders: Vec<_> = (0..2)
        .map(|_| {
            let metrics = metrics.clone();
            std::thread::spawn(move || {
                let started = std::time::Instant::now();
                let code = http_get(&metrics, "/metrics").0;
                (code, started.elapsed())
            })
        })
        .collect();
    let mut asked_during_renders = 0;
    while renders.iter().any(|r| !r.is_finished()) {
        let asked = std::time::Instant::now();
        let (code, _) = http_get(&metrics, "/health");
        let took = asked.elapsed();
        assert!(
            took < std::time::Duration::from_secs(1),
            "/health took {took:?} while /metrics renders ran (answered {code})"
        );
        let asked = std::time::Instant::now();
        let serving = grpc_health(&c.addr);
        let took = asked.elapsed();
        assert!(
            took < std::time::Duration::from_secs(1),
            "grpc.health.v1 took {took:?} while /metrics renders ran (answered {serving:?})"
        );
        asked_during_renders += 1;
    }
    for r in renders {
        let (code, took) = r.join().expect("a render's curl");
        eprintln!("a /metrics render: {code} after {took:?}");
    }
    eprintln!("/health and gRPC health answered {asked_during_renders} times meanwhile");
    etcd.thaw();
    wait_until("SERVING again with etcd thawed", CONVERGE, || async {
        (grpc_health(&c.addr) == "SERVING").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_log_lines_parse_and_carry_the_rpc_span() {
    let c = TestCluster::start_with(1, vec!["--log-format".into(), "json".into()]).await;
    create(&c, "logged", c.source_config("logged", 1));
    let line = wait_until("the create's log line", CONVERGE, || async {
        c.cp_log()
            .lines()
            .find(|l| l.contains("connector created"))
            .map(str::to_owned)
    })
    .await;
    for l in c.cp_log().lines().filter(|l| !l.trim().is_empty()) {
        serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
    }
    let event: Value = serde_json::from_str(&line).expect("JSON");
    assert_eq!(event["level"], "INFO", "{event}");
    assert_eq!(event["fields"]["connector"], "logged", "{event}");
    assert_eq!(
        event["span"]["method"], "/wharf.v1.ConnectorAdmin/CreateConnector",
        "the event carries the RPC's span: {event}"
    );
}
