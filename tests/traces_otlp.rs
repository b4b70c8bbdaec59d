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
    let mut req = tonic::Request::new(wharf::pb::v1::ListConnectorsRequest::default());
    req.metadata_mut().insert(
        "traceparent",
        format!("00-{USER_TRACE}-{USER_SPAN}-01")
            .parse()
            .expect("traceparent"),
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
