//! An operator watches executors through Prometheus too (docs/observability.md): a real
//! Prometheus scrapes a real `wharf-executor`'s metrics listener. Its record counters
//! match the records a file-sink wrote, and a connector's series are gone once it is
//! deleted; its health (`grpc.health.v1` and `/health`) says NOT_SERVING once it fenced
//! itself (its control plane frozen with SIGSTOP, so that its lease ran out) and SERVING
//! again after it registered. Every metric the Grafana dashboard
//! (`docs/grafana/wharf-dashboard.json`) queries is on a live page.

use std::io::Write as _;
use std::path::Path;

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, TestCluster};
use wharf_harness::prometheus::{TestPrometheus, free_addr, grpc_health, http_get, wait_value};
use wharf_harness::wait_until;

/// Lines the file-source reads.
const LINES: usize = 200;

fn lines_of(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// A cluster whose one executor serves its metrics listener at the returned address.
async fn cluster_with_executor_metrics(extra: &[&str]) -> (TestCluster, String) {
    let mut c = TestCluster::start(0).await;
    let metrics = free_addr("127.0.0.2");
    let mut args = vec!["--metrics-listen".to_owned(), metrics.clone()];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    c.add_executor_with(0, args).await;
    c.wait_alive(1).await;
    (c, metrics)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_record_counters_match_the_records_the_sink_wrote() {
    let (c, metrics) = cluster_with_executor_metrics(&["--log-format", "json"]).await;
    let prom = TestPrometheus::start(std::slice::from_ref(&metrics));
    wait_until("the executor healthy once registered", CONVERGE, || async {
        (http_get(&metrics, "/health").0 == 200).then_some(())
    })
    .await;

    let input = c.dir.path().join("in.jsonl");
    let output = c.dir.path().join("out.jsonl");
    let mut f = std::fs::File::create(&input).expect("input");
    for n in 0..LINES {
        writeln!(f, "{}", json!({ "n": n })).expect("write input");
    }
    f.sync_all().expect("sync");
    let value_bytes = std::fs::metadata(&input).expect("input").len() as usize - LINES;
    for (name, cfg) in [
        (
            "src",
            json!({ "connector.class": "file-source", "file": input.display().to_string(), "topic": "t" }),
        ),
        (
            "dst",
            json!({ "connector.class": "file-sink", "file": output.display().to_string(), "topics": "t" }),
        ),
    ] {
        let r = c.call("CreateConnector", json!({ "name": name, "config": cfg }));
        assert_eq!(r.code, 0, "create {name}: {}", r.err);
    }
    wait_until("the sink wrote every line", CONVERGE, || async {
        (lines_of(&output) == LINES).then_some(())
    })
    .await;

    // What the sink wrote, counted on both sides of the record log.
    let n = LINES as f64;
    wait_value(
        &prom,
        r#"wharf_source_record_poll_total{connector="src",task="0"}"#,
        n,
    )
    .await;
    wait_value(
        &prom,
        r#"wharf_source_record_write_total{connector="src"}"#,
        n,
    )
    .await;
    wait_value(
        &prom,
        r#"wharf_source_record_commit_total{connector="src"}"#,
        n,
    )
    .await;
    wait_value(
        &prom,
        r#"wharf_sink_record_put_total{connector="dst",task="0"}"#,
        n,
    )
    .await;
    wait_value(
        &prom,
        r#"wharf_sink_record_commit_total{connector="dst"}"#,
        n,
    )
    .await;
    let bytes = value_bytes as f64;
    wait_value(
        &prom,
        r#"wharf_source_record_bytes_total{connector="src"}"#,
        bytes,
    )
    .await;
    wait_value(
        &prom,
        r#"wharf_sink_record_bytes_total{connector="dst"}"#,
        bytes,
    )
    .await;
    wait_value(
        &prom,
        r#"wharf_executor_instance_count{kind="task",state="running"}"#,
        2.0,
    )
    .await;
    wait_value(&prom, "wharf_executor_registered", 1.0).await;
    assert!(
        prom.value("sum(wharf_sink_put_duration_seconds_count)")
            .is_some_and(|v| v >= 1.0),
        "put latency is recorded"
    );

    // Deleted: the source's series leave the page (and then Prometheus' answer).
    let r = c.call("DeleteConnector", json!({ "name": "src" }));
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until("src's series gone from /metrics", CONVERGE, || async {
        let (code, page) = http_get(&metrics, "/metrics");
        (code == 200 && !page.contains(r#"connector="src""#) && page.contains(r#"connector="dst""#))
            .then_some(())
    })
    .await;
    wait_until("src's series gone from Prometheus", CONVERGE, || async {
        prom.query(r#"wharf_source_record_poll_total{connector="src"}"#)
            .is_empty()
            .then_some(())
    })
    .await;

    // --log-format json: every line of the executor's log is one JSON object.
    let log = c.executors[0].log();
    assert!(log.contains("executor serving"), "{log}");
    for l in log.lines().filter(|l| !l.trim().is_empty()) {
        serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_health_is_not_serving_while_fenced_and_serving_after_it_registered_again() {
    let (mut c, metrics) = cluster_with_executor_metrics(&[]).await;
    let addr = c.executors[0].listen_addr().await;
    wait_until("SERVING once registered", CONVERGE, || async {
        (grpc_health(&addr) == "SERVING").then_some(())
    })
    .await;
    assert_eq!(http_get(&metrics, "/ready").0, 200);

    // Frozen control plane: heartbeats go unanswered, the lease runs out, the executor
    // fences itself.
    c.cp.freeze().await;
    wait_until("NOT_SERVING once fenced", CONVERGE, || async {
        (grpc_health(&addr) == "NOT_SERVING").then_some(())
    })
    .await;
    let (code, body) = http_get(&metrics, "/health");
    assert_eq!(code, 500, "KIP-1017's unhealthy: {body}");
    let health: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(health["status"], "unhealthy", "{health}");
    assert_eq!(http_get(&metrics, "/ready").0, 503);
    let (_, page) = http_get(&metrics, "/metrics");
    assert!(page.contains("wharf_executor_registered 0"), "{page}");
    assert!(page.contains("wharf_executor_fences_total 1"), "{page}");

    c.cp.thaw();
    wait_until("SERVING again after re-registering", CONVERGE, || async {
        (grpc_health(&addr) == "SERVING").then_some(())
    })
    .await;
    let (code, body) = http_get(&metrics, "/health");
    assert_eq!(code, 200, "{body}");
    assert!(
        c.executors[0]
            .log()
            .contains("registered with the control plane"),
        "the executor registered again"
    );
}

/// Metric names in the PromQL expressions of `docs/grafana/wharf-dashboard.json`.
fn dashboard_metric_names() -> std::collections::BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/grafana/wharf-dashboard.json");
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("the dashboard file"))
            .expect("the dashboard is JSON");
    let mut names = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("expr");
            let mut rest = expr;
            while let Some(at) = rest.find("wharf_") {
                let tail = &rest[at..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                names.insert(tail[..end].to_owned());
                rest = &tail[end..];
            }
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_queries_is_on_a_live_metrics_page() {
    let cp_metrics = free_addr("127.0.0.1");
    let mut c =
        TestCluster::start_with(0, vec!["--metrics-listen".into(), cp_metrics.clone()]).await;
    let metrics = free_addr("127.0.0.2");
    c.add_executor_with(0, vec!["--metrics-listen".into(), metrics.clone()])
        .await;
    c.wait_alive(1).await;

    // Records through a source and a sink, and one deletion with its cleanup.
    let input = c.dir.path().join("in.jsonl");
    let output = c.dir.path().join("out.jsonl");
    std::fs::write(&input, "{\"n\":1}\n{\"n\":2}\n").expect("input");
    for (name, cfg) in [
        (
            "src",
            json!({ "connector.class": "file-source", "file": input.display().to_string(), "topic": "t" }),
        ),
        (
            "dst",
            json!({ "connector.class": "file-sink", "file": output.display().to_string(), "topics": "t" }),
        ),
        ("gone", c.source_config("gone", 1)),
    ] {
        let r = c.call("CreateConnector", json!({ "name": name, "config": cfg }));
        assert_eq!(r.code, 0, "create {name}: {}", r.err);
    }
    wait_until("the sink wrote both lines", CONVERGE, || async {
        (lines_of(&output) == 2).then_some(())
    })
    .await;
    c.wait_state("gone", "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    assert_eq!(c.call("DeleteConnector", json!({ "name": "gone" })).code, 0);

    let names = dashboard_metric_names();
    assert!(names.len() > 20, "the dashboard queries {names:?}");
    // The last events of that run: the cleanup stop, the sink's flush, an offset commit.
    wait_until("the run's last events on the pages", CONVERGE, || async {
        let cp = http_get(&cp_metrics, "/metrics").1;
        let ex = http_get(&metrics, "/metrics").1;
        (cp.contains("wharf_cleanup_step_duration_seconds_bucket")
            && ex.contains("wharf_sink_flush_duration_seconds_bucket")
            && ex.contains("wharf_source_offset_commit_duration_seconds_bucket"))
        .then_some(())
    })
    .await;
    let page = format!(
        "{}\n{}",
        http_get(&cp_metrics, "/metrics").1,
        http_get(&metrics, "/metrics").1
    );
    let on_page = |name: &str| {
        page.lines().any(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with([' ', '{']))
                || l.starts_with(&format!("# TYPE {name} "))
        })
    };
    let missing: Vec<&String> = names.iter().filter(|n| !on_page(n)).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics no page shows: {missing:?}\n{page}"
    );
    // Every family says what it is: Prometheus and Grafana show the HELP text.
    let undescribed: Vec<&str> = page
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .filter(|name| {
            !page.lines().any(|l| {
                l.strip_prefix(&format!("# HELP {name} "))
                    .is_some_and(|h| !h.trim().is_empty())
            })
        })
        .collect();
    assert!(
        undescribed.is_empty(),
        "families without HELP: {undescribed:?}"
    );
}

/// A control plane whose `--metrics-listen` port is taken does not start: exit 1 with the
/// flag, the address and a hint on stderr, before it binds its admin port or writes
/// `listen.addr` (a script that reads that file must not find a dead address).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_whose_metrics_port_is_taken_does_not_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken_addr = taken.local_addr().expect("addr").to_string();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = std::process::Command::new(wharf_harness::bin("wharf-control-plane"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(["--metrics-listen", &taken_addr])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let status = wait_until("the control plane exits", CONVERGE, || {
        let s = child.try_wait().expect("try_wait");
        async move { s }
    })
    .await;
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {taken_addr} (--metrics-listen)"))
            && stderr.contains("hint:"),
        "{stderr}"
    );
    assert!(!stderr.contains("control plane bound"), "{stderr}");
    assert!(
        !dir.path().join("listen.addr").exists(),
        "listen.addr names a control plane that is not running"
    );
    drop(taken);
}
