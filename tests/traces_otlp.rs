//! One deletion is one trace across hosts (docs/observability.md, "Traces"): a real
//! control plane and two real executors export over OTLP/gRPC to a receiver inside the
//! test (`wharf_harness::otlp`, on the `opentelemetry-proto` crate's `TraceService`). The
//! spans of a deletion share one trace id, from `DeleteConnector` on the control plane to
//! `StopTask` on each executor, each plugin's stop under its `StopTask`, parent links
//! intact, also on an executor that logs at DEBUG; the control plane's JSON log lines of
//! the call carry that trace id. Reads without a `traceparent` (a status poller,
//! heartbeats) export no span; a read with one is exported in its caller's trace. A call
//! that fails is a span with status error.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, NOT_FOUND, TestCluster};
use wharf_harness::fault::{create_running, gone};
use wharf_harness::otlp::{ReceivedSpan, TestOtlp};
use wharf_harness::wait_until;

const DELETE: &str = "/wharf.v1.ConnectorAdmin/DeleteConnector";
const STOP_TASK: &str = "/wharf.v1.Executor/StopTask";
const STOP_CONNECTOR: &str = "/wharf.v1.Executor/StopConnector";
const PLUGIN_STOP: &str = "plugin stop";
const LIST: &str = "/wharf.v1.ConnectorAdmin/ListConnectors";
const STATUS: &str = "/wharf.v1.ConnectorAdmin/GetConnectorStatus";
/// Polling and periodic calls: exported only in a caller's trace.
const READS: [&str; 5] = [
    LIST,
    STATUS,
    "/wharf.v1.ConnectorAdmin/ListExecutors",
    "/wharf.v1.ExecutorRegistry/Heartbeat",
    "/grpc.health.v1.Health/Check",
];
/// The trace and parent span a user's tracer sent with a read (sampled).
const USER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const USER_SPAN: &str = "00f067aa0ba902b7";
/// Reads of the burst, of each kind.
const BURST: usize = 25;

/// Tasks of the deleted connector, spread over both executors.
const TASKS: usize = 4;

/// The spans of the trace the DeleteConnector call started, once every StopTask of the
/// deletion and every plugin stop under them arrived.
fn deletion_trace(spans: &[ReceivedSpan]) -> Option<(String, Vec<ReceivedSpan>)> {
    let root = spans
        .iter()
        .find(|s| s.name == DELETE && s.service == "wharf-control-plane")?;
    let trace: Vec<ReceivedSpan> = spans
        .iter()
        .filter(|s| s.trace_id == root.trace_id)
        .cloned()
        .collect();
    let stops = trace.iter().filter(|s| s.name == STOP_TASK).count();
    let plugin_stops = trace
        .iter()
        .filter(|s| s.name == PLUGIN_STOP && s.service == "wharf-executor")
        .count();
    let connector_stop = trace.iter().any(|s| s.name == STOP_CONNECTOR);
    (stops >= TASKS && plugin_stops > TASKS && connector_stop)
        .then(|| (root.trace_id.clone(), trace))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_deletion_is_one_trace_across_two_executors() {
    let otlp = TestOtlp::start().await;
    let mut c = TestCluster::start_with(
        0,
        vec![
            "--otlp-endpoint".into(),
            otlp.endpoint.clone(),
            "--log-format".into(),
            "json".into(),
        ],
    )
    .await;
    // The second executor logs at DEBUG: spans that only the log writer sees (DEBUG ones)
    // must not cut the trace there either.
    for (i, log) in [(0, "info"), (1, "debug")] {
        c.add_executor_with_env(
            i,
            vec!["--otlp-endpoint".into(), otlp.endpoint.clone()],
            &[("RUST_LOG", log)],
        )
        .await;
    }
    c.wait_alive(2).await;

    let name = "traced";
    let r = c.call(
        "CreateConnector",
        json!({ "name": name, "config": c.source_config(name, TASKS as u32) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let status = c
        .wait_state(name, "STATE_RUNNING", "STATE_RUNNING", TASKS)
        .await;
    let hosts: BTreeSet<String> = TestCluster::hosts(&status).into_iter().collect();
    assert_eq!(hosts.len(), 2, "the tasks run on both executors: {status}");

    // A status poller's burst, without traceparent.
    for _ in 0..BURST {
        assert_eq!(
            c.call("GetConnectorStatus", json!({ "name": name })).code,
            0
        );
        assert_eq!(c.call("ListConnectors", json!({})).code, 0);
    }

    assert_eq!(c.call("DeleteConnector", json!({ "name": name })).code, 0);
    wait_until("the deletion finished", CONVERGE, || async {
        (c.call("GetConnectorStatus", json!({ "name": name })).code == NOT_FOUND).then_some(())
    })
    .await;

    let (trace_id, trace) = wait_until("the deletion's spans", CONVERGE, || async {
        deletion_trace(&otlp.spans())
    })
    .await;
    let by_id: HashMap<&str, &ReceivedSpan> =
        trace.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let parent = |s: &ReceivedSpan| by_id.get(s.parent_span_id.as_str()).copied();
    // The nearest ancestor named `name`, on the same host.
    let under = |s: &ReceivedSpan, name: &str| {
        let mut at = parent(s);
        while let Some(p) = at {
            if p.name == name {
                return (p.instance == s.instance).then_some(p);
            }
            at = parent(p);
        }
        None
    };

    // Every span but the root has its parent in the same trace.
    for s in &trace {
        if s.name == DELETE {
            continue;
        }
        assert!(
            parent(s).is_some(),
            "{} ({}) has a parent outside the trace: {s:?}",
            s.name,
            s.service
        );
    }
    // The StopTask calls ran on both executors, each under a control-plane span.
    let stop_hosts: BTreeSet<&str> = trace
        .iter()
        .filter(|s| s.name == STOP_TASK)
        .map(|s| {
            let p = parent(s).expect("parent");
            assert_eq!(p.service, "wharf-control-plane", "{s:?} under {p:?}");
            assert_eq!(s.service, "wharf-executor", "{s:?}");
            s.instance.as_str()
        })
        .collect();
    assert_eq!(
        stop_hosts,
        hosts.iter().map(String::as_str).collect(),
        "StopTask spans from both executors"
    );
    // Each plugin stop is exported once: by the executor's own span, never also as the
    // `tracing` span its log lines are in (that one would land under the same call). A
    // retried StopTask is a call of its own, whose replayed stop runs no plugin.
    for call in trace
        .iter()
        .filter(|s| s.name == STOP_TASK || s.name == STOP_CONNECTOR)
    {
        let stops = trace
            .iter()
            .filter(|s| s.name == PLUGIN_STOP && s.parent_span_id == call.span_id)
            .count();
        assert!(
            stops <= 1,
            "{stops} plugin stops under {call:?}: {trace:#?}"
        );
    }
    // Each task's plugin stop runs under its StopTask span, on the same executor, and
    // each StopTask holds one.
    let plugin_stops: Vec<&ReceivedSpan> = trace.iter().filter(|s| s.name == PLUGIN_STOP).collect();
    let mut stop_tasks: Vec<&str> = plugin_stops
        .iter()
        .filter_map(|s| under(s, STOP_TASK))
        .map(|p| p.span_id.as_str())
        .collect();
    stop_tasks.sort_unstable();
    stop_tasks.dedup();
    assert_eq!(stop_tasks.len(), TASKS, "{trace:#?}");
    assert!(
        plugin_stops
            .iter()
            .all(|s| s.attributes.get("connector_deleted").map(String::as_str) == Some("true")),
        "every plugin stop of a deletion runs with connector_deleted=true: {plugin_stops:#?}"
    );
    // The connector instance's stop comes after, in the same trace.
    assert!(
        plugin_stops
            .iter()
            .any(|s| under(s, STOP_CONNECTOR).is_some()),
        "{trace:#?}"
    );

    // The deletion's rounds name their connector.
    assert!(
        trace
            .iter()
            .filter(|s| s.name == "deletion round")
            .all(|s| s.attributes.get("connector").map(String::as_str) == Some(name)),
        "{trace:#?}"
    );
    // None of the deletion's calls failed.
    let failed: Vec<&ReceivedSpan> = trace.iter().filter(|s| s.error.is_some()).collect();
    assert!(failed.is_empty(), "{failed:#?}");

    // The control plane's JSON log lines of the call carry the trace id.
    let lines: Vec<Value> = c
        .cp_log()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["span"]["method"] == DELETE)
        .collect();
    assert!(!lines.is_empty(), "a log line inside DeleteConnector");
    for l in &lines {
        assert_eq!(l["span"]["trace_id"], trace_id.as_str(), "{l}");
    }

    // A call that fails (a deletion of a connector that does not exist) is a span with
    // status error and the gRPC code and message.
    assert_eq!(
        c.call("DeleteConnector", json!({ "name": "never-created" }))
            .code,
        NOT_FOUND
    );
    let refused = wait_until("the failed call's span", CONVERGE, || async {
        otlp.spans()
            .into_iter()
            .find(|s| s.name == DELETE && s.trace_id != trace_id && s.error.is_some())
    })
    .await;
    let error = refused.error.unwrap_or_default();
    assert!(
        error.starts_with("NotFound") && error.contains("never-created"),
        "{error}"
    );

    // A read with a sampled traceparent is exported, as a child of the caller's span.
    let mut admin = wharf_harness::client::admin(&c.addr, &c.dial());
    let req = wharf_harness::client::in_trace(
        wharf::pb::v1::ListConnectorsRequest::default(),
        USER_TRACE,
        USER_SPAN,
        "01",
    );
    admin
        .list_connectors(req)
        .await
        .expect("traced ListConnectors");
    let traced = wait_until("the traced read's span", CONVERGE, || async {
        otlp.spans()
            .into_iter()
            .find(|s| s.trace_id == USER_TRACE && s.name == LIST)
    })
    .await;
    assert_eq!(traced.parent_span_id, USER_SPAN, "{traced:?}");
    assert_eq!(traced.service, "wharf-control-plane", "{traced:?}");

    // The control plane exports its spans in the order they ended, so every read span
    // ended before the traced one arrived would have arrived with or before it.
    let spans = otlp.spans();
    let untraced: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| READS.contains(&s.name.as_str()) && s.trace_id != USER_TRACE)
        .collect();
    assert!(
        untraced.is_empty(),
        "reads without traceparent exported no span (burst of {BURST} status reads and {BURST} ListConnectors): {untraced:#?}"
    );
    // Nor did the executors' heartbeats or untraced status reports.
    let orphans: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.name == "report status" && s.parent_span_id.is_empty())
        .collect();
    assert!(orphans.is_empty(), "{orphans:#?}");
}

/// The trace an operator's tracer sent with a deletion and did not sample (flags `00`).
const UNSAMPLED_TRACE: &str = "5ce0e9a56015fec5aadfa328ae398115";
/// The sampled trace of the REST calls.
const REST_TRACE: &str = "6de0e9a56015fec5aadfa328ae398116";

/// Spans go over TLS to a collector at an `https://` endpoint (its certificate checked
/// against the roots `SSL_CERT_FILE` names); a deletion round with a failed cleanup step
/// has status error naming the step; a deletion whose caller sent an unsampled
/// `traceparent` exports nothing, not even its rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_steps_mark_their_round_and_an_unsampled_deletion_exports_nothing() {
    let certs = tempfile::tempdir().expect("temp dir");
    let ca = wharf_harness::test_ca::TestCa::new(certs.path());
    let otlp = TestOtlp::start_tls(&ca.issue("collector", &["localhost"])).await;
    assert!(otlp.endpoint.starts_with("https://"), "{}", otlp.endpoint);
    let roots = ca.cert.display().to_string();
    let export = vec!["--otlp-endpoint".to_owned(), otlp.endpoint.clone()];
    let mut cp_args = export.clone();
    cp_args.extend(["--rest-listen".to_owned(), "127.0.0.1:0".to_owned()]);
    let mut c = TestCluster::start_secured_with_env(
        0,
        cp_args,
        false,
        &[("SSL_CERT_FILE", roots.as_str())],
    )
    .await;
    c.add_executor_with_env(0, export, &[("SSL_CERT_FILE", roots.as_str())])
        .await;
    c.wait_alive(1).await;

    // The plugin's first stop(true) fails; the next round's succeeds.
    let flaky = "flaky-cleanup";
    let mut config = c.source_config(flaky, 1);
    config["test.stop.fail.times"] = json!("1");
    create_running(&c, flaky, config, 1).await;
    assert_eq!(c.call("DeleteConnector", json!({ "name": flaky })).code, 0);
    gone(&c, flaky).await;
    let rounds = |name: &str| -> Vec<ReceivedSpan> {
        otlp.spans()
            .into_iter()
            .filter(|s| {
                s.name == "deletion round"
                    && s.attributes.get("connector").map(String::as_str) == Some(name)
            })
            .collect()
    };
    let (failed, clean) = wait_until(
        "the flaky deletion's rounds, over TLS",
        CONVERGE,
        || async {
            let all = rounds(flaky);
            let failed: Vec<ReceivedSpan> =
                all.iter().filter(|s| s.error.is_some()).cloned().collect();
            let clean = all.iter().filter(|s| s.error.is_none()).count();
            (!failed.is_empty() && clean > 0).then_some((failed, clean))
        },
    )
    .await;
    assert_eq!(
        failed.len(),
        1,
        "one round failed: {failed:#?} ({clean} clean)"
    );
    let error = failed[0].error.clone().unwrap_or_default();
    assert!(
        error.starts_with("cleanup step of ") && error.contains("injected cleanup failure"),
        "{error}"
    );
    // The same trace as the DeleteConnector call that started it.
    let delete = otlp
        .spans()
        .into_iter()
        .find(|s| s.name == DELETE && s.trace_id == failed[0].trace_id);
    assert!(
        delete.is_some(),
        "the failed round is in its deletion's trace"
    );

    // A deletion whose caller did not sample it.
    let quiet = "quiet";
    create_running(&c, quiet, c.source_config(quiet, 2), 2).await;
    let mut admin = wharf_harness::client::admin(&c.addr, &c.dial());
    let req = wharf_harness::client::in_trace(
        wharf::pb::v1::DeleteConnectorRequest {
            name: quiet.into(),
            ..Default::default()
        },
        UNSAMPLED_TRACE,
        USER_SPAN,
        "00",
    );
    admin
        .delete_connector(req)
        .await
        .expect("the unsampled DeleteConnector");
    gone(&c, quiet).await;
    // A traced deletion after it: each process exports its spans in the order they
    // ended, so once this one's round (control plane) and a plugin stop of it (the
    // executor) arrived, any span of the quiet deletion would have too.
    let marker = "marker";
    create_running(&c, marker, c.source_config(marker, 1), 1).await;
    assert_eq!(c.call("DeleteConnector", json!({ "name": marker })).code, 0);
    wait_until(
        "the marker deletion's round and plugin stop",
        CONVERGE,
        || async {
            let round = rounds(marker).into_iter().next()?;
            otlp.spans()
                .into_iter()
                .any(|s| {
                    s.trace_id == round.trace_id
                        && s.service == "wharf-executor"
                        && s.name == PLUGIN_STOP
                })
                .then_some(())
        },
    )
    .await;
    assert!(rounds(quiet).is_empty(), "{:#?}", rounds(quiet));
    let leaked: Vec<ReceivedSpan> = otlp
        .spans()
        .into_iter()
        .filter(|s| s.trace_id == UNSAMPLED_TRACE)
        .collect();
    assert!(leaked.is_empty(), "{leaked:#?}");
    // REST calls in a sampled trace (curl, as an operator's script sends them): each
    // `rest` span carries the answer's status code; a 4xx is the caller's error, not a
    // failed span.
    let rest = std::fs::read_to_string(c.dir.path().join("cp").join("rest.addr"))
        .expect("rest.addr written");
    let curl = |method: &str, path: &str, body: Option<&str>| -> String {
        let mut cmd = std::process::Command::new("curl");
        cmd.args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", method])
            .args([
                "-H",
                &format!("traceparent: 00-{REST_TRACE}-{USER_SPAN}-01"),
            ])
            .arg(format!("http://{}{path}", rest.trim()));
        if let Some(b) = body {
            cmd.args(["-H", "Content-Type: application/json", "--data", b]);
        }
        let out = cmd.output().expect("run curl");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let listed = curl("GET", "/connectors", None);
    let refused = curl("PUT", "/connectors/quiet/config", Some("{\"tasks.max\": }"));
    let not_allowed = curl("PATCH", "/connectors", None);
    assert_eq!(not_allowed, "405");
    assert_eq!(listed, "200");
    assert!(
        refused.starts_with('4'),
        "bad JSON is the caller's error: {refused}"
    );
    let rest_spans = wait_until("the REST calls' spans", CONVERGE, || async {
        let spans: Vec<ReceivedSpan> = otlp
            .spans()
            .into_iter()
            .filter(|s| s.trace_id == REST_TRACE && s.name == "rest")
            .collect();
        (spans.len() == 3).then_some(spans)
    })
    .await;
    let mut codes: Vec<&str> = rest_spans
        .iter()
        .map(|s| {
            s.attributes
                .get("http.response.status_code")
                .map_or("", String::as_str)
        })
        .collect();
    codes.sort_unstable();
    let mut want = [listed.as_str(), refused.as_str(), not_allowed.as_str()];
    want.sort_unstable();
    assert_eq!(codes, want, "{rest_spans:#?}");
    assert!(
        rest_spans.iter().all(|s| s.error.is_none()),
        "{rest_spans:#?}"
    );

    // Its cleanup ran all the same: both tasks and the connector stopped with
    // connector_deleted = true.
    let deleted_stops = std::fs::read_to_string(c.lifecycle_path(quiet))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["call"] == "stopped" && e["connector_deleted"] == true && e["ok"] == true)
        .count();
    assert_eq!(deleted_stops, 3, "two tasks and the connector cleaned up");
}

/// Connectors deleted at once in [`concurrent_deletions_each_stay_in_their_own_trace`].
const CONCURRENT: usize = 60;

/// Many deletions at once (as a mass delete sends them) each stay one trace: every
/// deletion round is a child of its own `DeleteConnector` span, never the root of a trace
/// of its own. At 1,000 deletions in flight, one in six rounds used to start before the
/// call had kept its trace context for the finalizer (bench/NOTES.md, "Observability on vs off").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deletions_each_stay_in_their_own_trace() {
    let otlp = TestOtlp::start().await;
    let export = vec!["--otlp-endpoint".to_owned(), otlp.endpoint.clone()];
    let mut c = TestCluster::start_with(0, export.clone()).await;
    c.add_executor_with(0, export).await;
    c.wait_alive(1).await;

    let names: Vec<String> = (0..CONCURRENT).map(|i| format!("mass-{i:03}")).collect();
    let admin = c.admin();
    let created = futures::future::join_all(names.iter().map(|name| {
        let mut admin = admin.clone();
        let config: HashMap<String, String> =
            serde_json::from_value(c.source_config(name, 1)).expect("string config");
        async move {
            admin
                .create_connector(wharf::pb::v1::CreateConnectorRequest {
                    name: name.clone(),
                    config,
                    initial_state: 0,
                })
                .await
        }
    }))
    .await;
    assert!(created.iter().all(Result::is_ok), "{created:?}");
    for name in &names {
        c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
            .await;
    }

    let deleted = futures::future::join_all(names.iter().map(|name| {
        let mut admin = admin.clone();
        async move {
            admin
                .delete_connector(wharf::pb::v1::DeleteConnectorRequest {
                    name: name.clone(),
                    ..Default::default()
                })
                .await
        }
    }))
    .await;
    assert!(deleted.iter().all(Result::is_ok), "{deleted:?}");
    for name in &names {
        gone(&c, name).await;
    }

    // Every deletion's calls and rounds arrived (the receiver keeps what it got).
    let spans = wait_until("every deletion's spans", CONVERGE, || async {
        let spans = otlp.spans();
        let count = |n: &str| spans.iter().filter(|s| s.name == n).count();
        (count(DELETE) >= CONCURRENT
            && count("deletion round") >= CONCURRENT
            && count(STOP_TASK) >= CONCURRENT
            && count(STOP_CONNECTOR) >= CONCURRENT)
            .then_some(spans)
    })
    .await;
    let by_id: HashMap<&str, &ReceivedSpan> =
        spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let rounds: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.name == "deletion round")
        .collect();
    let strays: Vec<&&ReceivedSpan> = rounds
        .iter()
        .filter(|round| {
            !by_id
                .get(round.parent_span_id.as_str())
                .is_some_and(|p| p.name == DELETE && p.trace_id == round.trace_id)
        })
        .collect();
    assert!(
        strays.is_empty(),
        "{} of the rounds are not under their DeleteConnector span: {strays:#?}",
        strays.len()
    );
    // One trace per deletion: each connector's rounds are in one trace, and no two
    // connectors share one.
    let mut traces_of: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    for round in &rounds {
        traces_of
            .entry(round.attributes.get("connector").map_or("", String::as_str))
            .or_default()
            .insert(round.trace_id.as_str());
    }
    for name in &names {
        assert_eq!(
            traces_of.get(name.as_str()).map(BTreeSet::len),
            Some(1),
            "{name}: {traces_of:?}"
        );
    }
    let traces: BTreeSet<&str> = rounds.iter().map(|r| r.trace_id.as_str()).collect();
    assert_eq!(traces.len(), CONCURRENT, "{traces_of:?}");
}

/// A deletion's trace outlives its control plane: the `traceparent` of the
/// DeleteConnector call is kept in the deletion record, so the rounds that a control
/// plane restarted after a crash (kill -9) runs on the same store are children of that
/// call's span, in its trace, and so are their stops on the executor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_keeps_its_trace_across_a_control_plane_crash() {
    let otlp = TestOtlp::start().await;
    let export = vec!["--otlp-endpoint".to_owned(), otlp.endpoint.clone()];
    let mut c = TestCluster::start_with(0, export.clone()).await;
    c.add_executor_with(0, export).await;
    c.wait_alive(1).await;

    // Every stop(true) fails, and one attempt is all a step gets: the deletion waits for
    // the operator after its first round.
    let name = "crash-mid-deletion";
    let mut config = c.source_config(name, 1);
    config["test.stop.fail.times"] = json!("1000");
    config["cleanup.max.attempts"] = json!("1");
    create_running(&c, name, config, 1).await;
    assert_eq!(c.call("DeleteConnector", json!({ "name": name })).code, 0);
    let rounds = || -> Vec<ReceivedSpan> {
        otlp.spans()
            .into_iter()
            .filter(|s| {
                s.name == "deletion round"
                    && s.attributes.get("connector").map(String::as_str) == Some(name)
            })
            .collect()
    };
    // Before the crash, the call's span and its failed round have arrived (a kill -9
    // loses what the control plane has not exported yet).
    let delete = wait_until(
        "the DeleteConnector span and its failed round",
        CONVERGE,
        || async {
            let failed = rounds().into_iter().find(|r| r.error.is_some())?;
            otlp.spans()
                .into_iter()
                .find(|s| s.name == DELETE && s.span_id == failed.parent_span_id)
        },
    )
    .await;

    c.restart_control_plane().await;
    c.wait_alive(1).await;
    // The plugin's cleanup works from now on (the test plugin counts its failures in this
    // file); the operator asks for one more attempt.
    let mut failures = c.lifecycle_path(name).into_os_string();
    failures.push(format!(".stop-failures.{name}"));
    std::fs::write(&failures, "1000").expect("failure counter");
    assert_eq!(c.call("RetryCleanup", json!({ "name": name })).code, 0);
    gone(&c, name).await;

    let clean = wait_until("the restarted control plane's round", CONVERGE, || async {
        rounds().into_iter().find(|r| r.error.is_none())
    })
    .await;
    assert_eq!(clean.trace_id, delete.trace_id, "{clean:#?}\n{delete:#?}");
    assert_eq!(
        clean.parent_span_id, delete.span_id,
        "{clean:#?}\n{delete:#?}"
    );
    for r in rounds() {
        assert_eq!(
            r.trace_id, delete.trace_id,
            "every round in one trace: {r:#?}"
        );
    }
    // The stops on the executor (the task's and the connector instance's, after the
    // cleanup-only starts they need) are under the restarted control plane's rounds, in
    // that trace.
    let stops = wait_until("the rounds' stops", CONVERGE, || async {
        let clean: BTreeSet<String> = rounds()
            .into_iter()
            .filter(|r| r.error.is_none())
            .map(|r| r.span_id)
            .collect();
        let stops: Vec<ReceivedSpan> = otlp
            .spans()
            .into_iter()
            .filter(|s| clean.contains(&s.parent_span_id))
            .filter(|s| [STOP_TASK, STOP_CONNECTOR].contains(&s.name.as_str()))
            .collect();
        let named = |n: &str| stops.iter().any(|s| s.name == n);
        (named(STOP_TASK) && named(STOP_CONNECTOR)).then_some(stops)
    })
    .await;
    for s in &stops {
        assert_eq!(s.trace_id, delete.trace_id, "{s:#?}");
    }
}

/// The value of the sample `series` (name and labels, as printed) on a metrics page.
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// The metrics page counts the spans on their way out, so that spans the SDK's queue
/// dropped show as a gap: with a receiver that answers, every span that ended is exported
/// `ok` (as many as the receiver got); with an endpoint nobody listens on, they are
/// counted `failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_page_counts_exported_and_failed_spans() {
    use wharf_harness::prometheus::{free_addr, http_get};
    const ENDED: &str = "wharf_trace_spans_ended_total";
    const OK: &str = "wharf_trace_spans_exported_total{outcome=\"ok\"}";
    const FAILED: &str = "wharf_trace_spans_exported_total{outcome=\"failed\"}";
    let otlp = TestOtlp::start().await;
    let metrics = free_addr("127.0.0.1");
    let c = TestCluster::start_with(
        0,
        vec![
            "--otlp-endpoint".into(),
            otlp.endpoint.clone(),
            "--metrics-listen".into(),
            metrics.clone(),
        ],
    )
    .await;
    // Calls that change something are traced, whatever they answer.
    for i in 0..3 {
        let _ = c.call(
            "CreateConnector",
            json!({ "name": format!("counted-{i}"), "config": c.source_config("counted", 1) }),
        );
    }
    let (ended, ok) = wait_until(
        "every ended span exported and received",
        CONVERGE,
        || async {
            let page = http_get(&metrics, "/metrics").1;
            let (ended, ok) = (sample(&page, ENDED)?, sample(&page, OK)?);
            let received = otlp
                .spans()
                .iter()
                .filter(|s| s.service == "wharf-control-plane")
                .count() as f64;
            (ok >= 3.0 && ok == ended && ok == received).then_some((ended, ok))
        },
    )
    .await;
    let page = http_get(&metrics, "/metrics").1;
    assert_eq!(sample(&page, FAILED), Some(0.0), "{page}");
    assert!(ended >= ok);

    // Nobody listens there: the batch fails and its spans are counted as dropped.
    let nowhere = format!("http://{}", free_addr("127.0.0.1"));
    let metrics = free_addr("127.0.0.1");
    let c = TestCluster::start_with(
        0,
        vec![
            "--otlp-endpoint".into(),
            nowhere,
            "--metrics-listen".into(),
            metrics.clone(),
        ],
    )
    .await;
    let _ = c.call(
        "CreateConnector",
        json!({ "name": "lost", "config": c.source_config("lost", 1) }),
    );
    wait_until("the failed export counted", CONVERGE, || async {
        let page = http_get(&metrics, "/metrics").1;
        (sample(&page, FAILED)? >= 1.0 && sample(&page, OK)? == 0.0).then_some(())
    })
    .await;
}
