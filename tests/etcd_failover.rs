//! Two control planes on one (test-owned) etcd: one is elected leader; a connector
//! created through it runs on a real executor; the leader is killed (kill -9) in the
//! middle of a deletion; the other replica takes over and completes the deletion, and
//! the lifecycle file shows exactly one stop(true) per task and for the connector.
//! The executor is given both replicas' URLs, the leader's first: it must move to the
//! survivor on its own for the new leader to see it alive and finish the cleanup.
//! Run twice: with an executor lease longer than the failover, and with one shorter than
//! it, where every executor fences itself during the failover (stops everything with
//! `false`, registers again) and the retried stop(true) is answered from the executor's
//! record of the completed stop instead of running the cleanup again
//! (docs/contract.md, "Executor self-fencing").
//! The first run also exports spans: the deletion's trace goes on through the new leader
//! (its context is kept in the deletion's record in etcd, docs/observability.md), so the
//! survivor's rounds and the stops they send are in the trace of the `DeleteConnector`
//! call the dead leader answered.
//!
//! Needs the `etcd` binary (Debian `etcd-server`, see scripts/setup-services). Build
//! first: `cargo build -p wharf-control-plane -p wharf-executor-stock`, then
//! `cargo test -p wharf --test etcd_failover`.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, NOT_FOUND, call_at, dial_for};
use wharf_harness::etcd::{TEST_ELECTION_TTL_SECS, control_plane_replica_with_ttl};
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::otlp::{ReceivedSpan, TestOtlp};
use wharf_harness::{KeepOnFailure, Proc, wait_until};

/// Executor lease, in milliseconds, longer than a leader failover (the election TTL and
/// the new term): the executors keep their epoch through it.
const LONG_EXECUTOR_LEASE_MS: u32 = 8_000;
/// Executor lease, in milliseconds, shorter than a leader failover: every executor fences
/// itself during it and registers again. A stop(true) whose answer died with the old
/// leader must then be answered from the executor's record (before this was so, it ran a
/// second time in a cleanup-only instance).
const SHORT_EXECUTOR_LEASE_MS: u32 = 2_000;
/// Election TTL of the replicas, in seconds, beside [`SHORT_EXECUTOR_LEASE_MS`]: a new
/// leader takes over at the earliest two thirds of it after the kill (4 s), twice the
/// executor lease, so the executor has always fenced itself by then. With the shortest
/// TTL (2 s) the two raced, and a quick takeover left nothing to fence (round 7 of a
/// 20-round run).
const SHORT_VARIANT_ELECTION_TTL_SECS: u32 = 6;
/// How long each test task's stop(true) takes, in ms: the leader dies during it.
const STOP_DELAY_MS: &str = "1500";
/// gRPC status code UNAVAILABLE, as `Call::code` reports it.
const UNAVAILABLE: i32 = 14;
/// Bound on the leader election after a start or a kill.
const ELECTION_DEADLINE: Duration = Duration::from_secs(20);

/// The operator's trace the traced run's `DeleteConnector` is called in (W3C ids, hex).
const OPERATOR_TRACE: &str = "7ae0e9a56015fec5aadfa328ae398117";
/// The operator's span, the parent of that call's span.
const OPERATOR_SPAN: &str = "01f067aa0ba902b8";

/// A replica with executor lease `lease_ms`; the election TTL is set apart from it (see
/// [`SHORT_VARIANT_ELECTION_TTL_SECS`]); `extra` flags after the harness's.
fn replica(
    dir: &Path,
    name: &str,
    etcd: &str,
    key: &[u8],
    lease_ms: u32,
    extra: &[String],
) -> Proc {
    let ttl = if lease_ms < LONG_EXECUTOR_LEASE_MS {
        SHORT_VARIANT_ELECTION_TTL_SECS
    } else {
        TEST_ELECTION_TTL_SECS
    };
    control_plane_replica_with_ttl(dir, name, etcd, "/failover/", key, lease_ms, ttl, extra)
}

fn admin(addr: &str, method: &str, body: Value) -> wharf_harness::cluster::Call {
    call_at(addr, &format!("wharf.v1.ConnectorAdmin/{method}"), &body)
}

async fn wait_leader(p: &Proc) {
    wait_until(
        "a replica to be elected leader",
        ELECTION_DEADLINE,
        || async {
            p.log()
                .contains("leading: herder and finalizer start")
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_surviving_replica_takes_over_and_completes_a_pending_deletion_in_its_trace() {
    let otlp = wharf_harness::otlp::TestOtlp::start().await;
    takes_over_a_pending_deletion(LONG_EXECUTOR_LEASE_MS, Some(&otlp)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_executor_lease_shorter_than_the_failover_each_stop_true_still_runs_once() {
    takes_over_a_pending_deletion(SHORT_EXECUTOR_LEASE_MS, None).await;
}

/// A leader that stops (SIGTERM: a rolling restart) resigns, and the follower takes
/// over at once: it watches the leader key, rather than finding it gone at its next
/// campaign (every third of the TTL: 20 s here). Before, the executors of a rolling
/// restart waited that long for a leader (9.1 s at TTL 30 in an operator's test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_takes_over_as_soon_as_the_leader_resigns() {
    const TTL_SECS: u32 = 60;
    /// Well inside the follower's campaign interval (a third of the TTL).
    const TAKEOVER: Duration = Duration::from_secs(TTL_SECS as u64 / 6);
    let etcd = wharf_harness::etcd::TestEtcd::start();
    let dir = KeepOnFailure::new();
    let key: [u8; 32] = rand::random();
    let replica = |name: &str| {
        control_plane_replica_with_ttl(
            dir.path(),
            name,
            &etcd.endpoint,
            "/resign/",
            &key,
            LONG_EXECUTOR_LEASE_MS,
            TTL_SECS,
            &[],
        )
    };
    let mut a = replica("cp-a");
    a.listen_addr().await;
    wait_leader(&a).await;
    let mut b = replica("cp-b");
    b.listen_addr().await;
    // b campaigned once and follows a: its next campaign is a third of the TTL away.
    wait_until("cp-b follows cp-a", ELECTION_DEADLINE, || async {
        b.log()
            .lines()
            .any(|l| l.contains("control-plane role changed") && l.contains("Some("))
            .then_some(())
    })
    .await;

    assert_eq!(
        a.terminate(ELECTION_DEADLINE).await,
        Some(0),
        "cp-a stops cleanly"
    );
    wait_until("cp-b leads", TAKEOVER, || async {
        b.log()
            .contains("leading: herder and finalizer start")
            .then_some(())
    })
    .await;
}

/// The scenario of this file with executor leases of `lease_ms`; with `otlp`, every
/// process exports its spans there and the deletion's trace is checked.
async fn takes_over_a_pending_deletion(lease_ms: u32, otlp: Option<&TestOtlp>) {
    let etcd = wharf_harness::etcd::TestEtcd::start();
    let dir = KeepOnFailure::new();
    let key: [u8; 32] = rand::random();
    let export: Vec<String> = otlp
        .map(|o| vec!["--otlp-endpoint".to_owned(), o.endpoint.clone()])
        .unwrap_or_default();

    let mut a = replica(dir.path(), "cp-a", &etcd.endpoint, &key, lease_ms, &export);
    let a_addr = a.listen_addr().await;
    wait_leader(&a).await;
    let mut b = replica(dir.path(), "cp-b", &etcd.endpoint, &key, lease_ms, &export);
    let b_addr = b.listen_addr().await;

    // exec-1 knows both replicas and talks to the first (the leader) until it stops
    // answering; exec-2 knows only the follower, which forwards its registry calls to
    // the leader.
    let executor = |id: &str, ip: &str, urls: String| {
        let ed = dir.path().join(id);
        let mut args = vec![
            "--listen".into(),
            format!("{ip}:0"),
            "--control-plane".into(),
            urls,
            "--data-dir".into(),
            ed.display().to_string(),
            "--executor-id".into(),
            id.into(),
        ];
        args.extend(export.iter().cloned());
        Proc::spawn(wharf_harness::bin("wharf-executor"), args, &ed)
    };
    let mut exec = executor(
        "exec-1",
        "127.0.0.2",
        format!("http://{a_addr},http://{b_addr}"),
    );
    let mut exec2 = executor("exec-2", "127.0.0.3", format!("http://{b_addr}"));
    exec.listen_addr().await;
    exec2.listen_addr().await;
    wait_until(
        "both executors to be alive on the leader",
        CONVERGE,
        || async {
            let r = admin(&a_addr, "ListExecutors", json!({}));
            let es = r.body["executors"].as_array().cloned().unwrap_or_default();
            (es.len() == 2 && es.iter().all(|e| e["state"] == "EXECUTOR_STATE_ALIVE")).then_some(())
        },
    )
    .await;

    let name = "replicated";
    let lifecycle = dir.path().join("lifecycle-replicated.jsonl");
    let cfg = json!({
        "connector.class": "test-source",
        "tasks.max": "2",
        "lifecycle.path": lifecycle.display().to_string(),
        "test.poll.block.ms": "50",
        "test.stop.delay.ms": STOP_DELAY_MS,
    });
    let r = admin(
        &a_addr,
        "CreateConnector",
        json!({ "name": name, "config": cfg }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    // The follower serves the read from the shared store.
    wait_until(
        "both tasks RUNNING, read on the follower",
        CONVERGE,
        || async {
            let r = admin(&b_addr, "GetConnectorStatus", json!({ "name": name }));
            let ts = r.body["status"]["tasks"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            (r.code == 0
                && r.body["status"]["connector"]["state"] == "STATE_RUNNING"
                && ts.len() == 2
                && ts.iter().all(|t| t["status"]["state"] == "STATE_RUNNING"))
            .then_some(())
        },
    )
    .await;

    // A write sent to the follower is forwarded to the leader.
    let other = json!({
        "connector.class": "test-source",
        "tasks.max": "1",
        "lifecycle.path": dir.path().join("lifecycle-other.jsonl").display().to_string(),
    });
    // The follower learns the leader from etcd a moment after it started: until then it
    // answers UNAVAILABLE ("no leader is elected yet; retry"), as a client must expect.
    let r = wait_until(
        "the follower to forward a create",
        ELECTION_DEADLINE,
        || {
            let r = admin(
                &b_addr,
                "CreateConnector",
                json!({ "name": "via-follower", "config": other }),
            );
            async move { (r.code != UNAVAILABLE).then_some(r) }
        },
    )
    .await;
    assert_eq!(r.code, 0, "{}", r.err);
    let r = admin(&a_addr, "GetConnector", json!({ "name": "via-follower" }));
    assert_eq!(
        r.code, 0,
        "created through the follower, stored by the leader: {}",
        r.err
    );

    // The operator's tool calls in a trace of its own (a sampled traceparent).
    let mut client = wharf_harness::client::admin(&a_addr, &dial_for(&a_addr));
    let req = wharf_harness::client::in_trace(
        wharf::pb::v1::DeleteConnectorRequest {
            name: name.into(),
            ..Default::default()
        },
        OPERATOR_TRACE,
        OPERATOR_SPAN,
        "01",
    );
    client.delete_connector(req).await.expect("DeleteConnector");
    wait_until("a stop(true) to have begun", CONVERGE, || async {
        Lifecycle::read(&lifecycle)
            .a_stop_true_began()
            .then_some(())
    })
    .await;
    a.kill9();

    wait_leader(&b).await;
    let s = admin(&b_addr, "GetConnectorStatus", json!({ "name": name }));
    assert!(
        s.code == NOT_FOUND || s.body["status"]["connector"]["state"] == "STATE_DELETING",
        "{s:?}"
    );
    wait_until(
        "the new leader to finish the deletion",
        CONVERGE,
        || async {
            (admin(&b_addr, "GetConnectorStatus", json!({ "name": name })).code == NOT_FOUND)
                .then_some(())
        },
    )
    .await;

    assert!(
        exec.log().contains("trying the next control-plane URL"),
        "the executor moved to the surviving replica: {}",
        exec.log()
    );
    if lease_ms < LONG_EXECUTOR_LEASE_MS {
        // The case this variant is for: the executor gave up its epoch during the
        // failover, so the retried stop named an epoch it no longer holds.
        assert!(
            exec.log().contains("fencing myself"),
            "exec-1 fenced itself during the failover: {}",
            exec.log()
        );
    }

    let lc = Lifecycle::read(&lifecycle);
    for unit in [Some(0), Some(1), None] {
        let deleted = lc.cleanups(name, unit);
        assert_eq!(
            deleted.len(),
            1,
            "{unit:?}: exactly one stop(true): {deleted:?}"
        );
        assert!(
            deleted[0].ok,
            "{unit:?}: the stop(true) completed: {deleted:?}"
        );
    }
    if let Some(otlp) = otlp {
        survivor_continues_the_trace(otlp, name, &b_addr).await;
    }

    // The name is free again, created through the new leader.
    let r = admin(
        &b_addr,
        "CreateConnector",
        json!({ "name": name, "config": cfg }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
}

/// The traced run's outcome: the surviving replica at `b_addr` ran deletion rounds of
/// `name`, each in the operator's trace (none a root of a trace of its own), and the
/// stops they sent to the executor are under them, in that trace.
async fn survivor_continues_the_trace(otlp: &TestOtlp, name: &str, b_addr: &str) {
    let rounds = || -> Vec<ReceivedSpan> {
        otlp.spans()
            .into_iter()
            .filter(|s| {
                s.name == "deletion round"
                    && s.attributes.get("connector").map(String::as_str) == Some(name)
            })
            .collect()
    };
    // A replica without --advertise is named by its bound address.
    let on_b = |s: &ReceivedSpan| s.instance == b_addr;
    let stops = wait_until(
        "the survivor's rounds and their stops",
        CONVERGE,
        || async {
            let survivors: BTreeSet<String> = rounds()
                .into_iter()
                .filter(on_b)
                .map(|r| r.span_id)
                .collect();
            let stops: Vec<ReceivedSpan> = otlp
                .spans()
                .into_iter()
                .filter(|s| survivors.contains(&s.parent_span_id))
                .filter(|s| s.name.ends_with("/StopTask") || s.name.ends_with("/StopConnector"))
                .collect();
            (!stops.is_empty()).then_some(stops)
        },
    )
    .await;
    for r in rounds() {
        assert_eq!(
            r.trace_id, OPERATOR_TRACE,
            "every round, before and after the failover, in the operator's trace: {r:#?}"
        );
        assert!(!r.parent_span_id.is_empty(), "a round is no root: {r:#?}");
    }
    for s in &stops {
        assert_eq!(s.trace_id, OPERATOR_TRACE, "{s:#?}");
        assert_eq!(s.service, "wharf-executor", "{s:#?}");
    }
}
