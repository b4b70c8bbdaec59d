//! Kafka Connect beside Wharf (issue 19): the same workloads on Apache Kafka Connect 3.9.0
//! (distributed workers, on a tansu broker) and on Wharf, in the same run, each figure
//! reported as `Wharf / Kafka Connect`.
//!
//! Kafka Connect's figures include time its worker spent in JoinGroup, which tansu holds
//! for about 2 s per rebalance (with the 3 s session timeout used here) where an Apache
//! Kafka broker answers as soon as the group's members have all joined; so beside each
//! raw figure the JoinGroup wait inside its window (from the worker's log) and the
//! figure without it are reported.

pub mod connect;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use futures::StreamExt;
use serde_json::Value;
use wharf::pb::v1::{
    AlterOffsetsRequest, CreateConnectorRequest, DeleteConnectorRequest, GetConnectorStatusRequest,
    GetOffsetsRequest, SourceOffset, State, TargetState,
};

use self::connect::{Broker, PeerEnv, Worker, WorkerOptions, call, create_body};
use crate::procs::{Cluster, ClusterOptions};
use crate::stats::median;

/// Tasks of the deleted connector (as Wharf's deletion benchmark).
const DELETION_TASKS: u32 = 8;
/// Measured deletions on Kafka Connect (each costs about two rebalances).
const CONNECT_DELETIONS: usize = 10;
/// Measured deletions on Wharf.
const WHARF_DELETIONS: usize = 30;
/// Poll wait of the deleted connector's tasks, ms: Kafka Connect calls a source task's
/// `stop()` once the poll in progress returned, so this bounds how late it can run.
const DELETION_POLL_BLOCK_MS: u64 = 10;
/// Poll wait of the scale and rebalance steps' tasks, ms (thousands of idle tasks).
const IDLE_POLL_BLOCK_MS: u64 = 1_000;
/// Scale steps, connectors x 10 tasks.
pub const SCALE_SIZES: [usize; 2] = [100, 300];
/// Tasks per connector in the scale and rebalance steps.
const TASKS: u32 = 10;
/// Admin calls in flight while creating or deleting (as Wharf's scale benchmark).
const CONCURRENCY: usize = 32;
/// Connectors of the rebalance step (x 10 tasks, on two workers or executors).
const REBALANCE_CONNECTORS: usize = 10;
/// Kafka Connect's default `scheduled.rebalance.max.delay.ms`, and the short one.
const REBALANCE_DELAYS_MS: [u64; 2] = [3_000, 300_000];
/// Bound on each phase of a step, beyond what the step must wait anyway, seconds.
const PHASE_DEADLINE_S: u64 = 300;
/// Interval between status listings at scale, ms (as Wharf's scale benchmark).
const LIST_POLL_MS: u64 = 250;
/// Interval between status reads of one connector, ms.
const STATUS_POLL_MS: u64 = 5;
/// Interval between reads of a lifecycle file while waiting for stops, ms.
const FILE_POLL_MS: u64 = 2;
/// Settling time before reading RSS, ms.
const RSS_SETTLE_MS: u64 = 1_000;

/// The peer's deletion figures, milliseconds, one entry per measured deletion.
#[derive(Debug, Clone, Default)]
pub struct Deletion {
    /// `DELETE /connectors/NAME` until it answered.
    pub answer_ms: Vec<f64>,
    /// `DELETE` sent until the last task's `stop()` ran.
    pub stop_ms: Vec<f64>,
    /// JoinGroup wait of the worker inside the same window.
    pub join_ms: Vec<f64>,
    /// Wharf's DeleteConnector(wait) on 8 tasks, the same run.
    pub wharf: crate::deletion::DeletionResult,
}

/// One scale step on both.
#[derive(Debug, Clone, Default)]
pub struct Scale {
    /// Connectors (x 10 tasks).
    pub connectors: usize,
    /// Create all until all tasks RUNNING, s.
    pub create_s: f64,
    /// JoinGroup wait inside it, s.
    pub create_join_s: f64,
    /// Delete all until every DELETE answered, s.
    pub delete_answer_s: f64,
    /// Delete all until none is listed and every task's `stop()` ran, s.
    pub delete_s: f64,
    /// JoinGroup wait inside it, s.
    pub delete_join_s: f64,
    /// Calls sent again after a 409 (rebalance in progress) or 5xx.
    pub retries: u32,
    /// Why the delete phase did not finish within its deadline, with what was left.
    pub delete_unfinished: Option<String>,
    /// Worker RSS, all running / before creating, MiB.
    pub rss_mib: f64,
    /// Worker RSS before creating anything, MiB.
    pub rss_idle_mib: f64,
    /// Wharf's figures for the same step (control plane + 10 executors).
    pub wharf: Option<crate::scale::ScalePoint>,
}

/// One rebalance after a kill -9 on both.
#[derive(Debug, Clone, Default)]
pub struct Rebalance {
    /// `scheduled.rebalance.max.delay.ms`.
    pub delay_ms: u64,
    /// Tasks in all.
    pub tasks: usize,
    /// Tasks that were on the killed worker.
    pub lost: usize,
    /// kill -9 until every task RUNNING on the survivor, s.
    pub seconds: f64,
    /// The survivor's JoinGroup wait inside it, s.
    pub join_s: f64,
}

/// What each does with a connector's offsets when it is deleted and created again.
#[derive(Debug, Clone, Default)]
pub struct Offsets {
    /// Kafka Connect: `GET /connectors/NAME/offsets` after the PATCH, before the delete.
    pub connect_before: String,
    /// ... after the re-create under the same name.
    pub connect_after: String,
    /// What the re-created connector's task read at start (its offset, or `none`).
    pub connect_task_read: String,
    /// Wharf: GetOffsets after AlterOffsets, before the delete (partition => offset).
    pub wharf_before: String,
    /// ... after the re-create under the same name.
    pub wharf_after: String,
}

/// Everything the peer part measured, each workload's error kept as a note.
#[derive(Debug, Default)]
pub struct PeerResults {
    /// Why the peer did not run at all (its parts are missing).
    pub skipped: Option<String>,
    /// What ran.
    pub env: PeerEnv,
    /// Deletion on both.
    pub deletion: Option<Deletion>,
    /// Scale steps.
    pub scale: Vec<Scale>,
    /// Kafka Connect's rebalances, one per delay.
    pub rebalance: Vec<Rebalance>,
    /// Wharf's rebalance of the same shape (10 x 10 on 2 executors, one killed).
    pub wharf_rebalance: Option<crate::scale::Rebalance>,
    /// Offsets after delete and re-create.
    pub offsets: Option<Offsets>,
    /// Load average (1, 5, 15 min) before each workload, and at the end.
    pub loads: Vec<(String, String)>,
    /// Workloads that failed or were left out, and why.
    pub notes: Vec<String>,
    /// How long the part took, s.
    pub took_s: f64,
}

/// When a phase that starts now must be over.
fn phase_end() -> Instant {
    Instant::now() + Duration::from_secs(PHASE_DEADLINE_S)
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Runs every workload on both, Kafka Connect from `env`, Wharf from `bin_dir`, under
/// `root`. A workload that fails is a note; the others still run.
pub async fn run(bin_dir: &Path, root: &Path, env: PeerEnv) -> PeerResults {
    let started = Instant::now();
    let mut r = PeerResults {
        env,
        ..PeerResults::default()
    };
    let note = |r: &mut PeerResults, what: &str, e: anyhow::Error| {
        let n = format!("{what} did not finish: {e:#}");
        eprintln!("[bench] peer: {n}");
        r.notes.push(n);
    };

    r.loads.push(("deletion".into(), load()));
    eprintln!("[bench] peer 1/4: deletion, 8 tasks, then offsets after delete and re-create");
    match deletion(bin_dir, &root.join("deletion"), &r.env).await {
        Ok((d, o)) => {
            r.deletion = Some(d);
            r.offsets = Some(o);
        }
        Err(e) => note(&mut r, "the deletion (and offsets) run", e),
    }
    match wharf_offsets(bin_dir, &root.join("offsets-wharf")).await {
        Ok((before, after)) => {
            if let Some(o) = r.offsets.as_mut() {
                o.wharf_before = before;
                o.wharf_after = after;
            }
        }
        Err(e) => note(&mut r, "Wharf's offsets check", e),
    }

    let [short, long] = REBALANCE_DELAYS_MS;
    eprintln!("[bench] peer 2/4: rebalance, scheduled.rebalance.max.delay.ms={short}, and Wharf's");
    connect_rebalance(&mut r, root, short, &note).await;
    let step = crate::scale::Step {
        connectors: REBALANCE_CONNECTORS,
        executors: 2,
        kills: 1,
        restart: false,
    };
    let deadline = Duration::from_secs(PHASE_DEADLINE_S);
    match crate::scale::run_step(
        bin_dir,
        &root.join("rebalance-wharf"),
        step,
        deadline,
        deadline,
        false,
    )
    .await
    {
        Ok(p) => r.wharf_rebalance = p.rebalances.first().cloned(),
        Err(e) => note(&mut r, "Wharf's rebalance on 2 executors", e),
    }

    for n in SCALE_SIZES {
        r.loads.push((format!("scale {n} x 10"), load()));
        eprintln!("[bench] peer 3/4: scale {n} x 10");
        match scale(bin_dir, &root.join(format!("scale-{n}")), &r.env, n).await {
            Ok(s) => r.scale.push(s),
            Err(e) => note(&mut r, &format!("the scale step {n} x 10"), e),
        }
    }

    // Last: it waits five minutes by design.
    eprintln!("[bench] peer 4/4: rebalance with Kafka Connect's default delay, {long} ms");
    connect_rebalance(&mut r, root, long, &note).await;
    r.loads.push(("end".into(), load()));
    r.took_s = started.elapsed().as_secs_f64();
    r
}

/// Waits until `name`'s status on the worker shows it and `tasks` tasks RUNNING.
async fn wait_running(w: &Worker, name: &str, tasks: usize) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        let (code, body) =
            connect::http(&w.rest, "GET", &format!("/connectors/{name}/status"), None).await?;
        if code == 200 && connect::connector_running(&serde_json::from_str(&body)?, tasks) {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(PHASE_DEADLINE_S) {
            bail!("{name} not RUNNING after {PHASE_DEADLINE_S} s: {code} {body}");
        }
        tokio::time::sleep(Duration::from_millis(STATUS_POLL_MS)).await;
    }
}

/// Creates connector `body` (sent again on 409 until `deadline`) and checks the answer
/// is 201.
async fn create(w: &Worker, body: &Value, deadline: Instant) -> anyhow::Result<u32> {
    let (code, text, retries) = call(&w.rest, "POST", "/connectors", Some(body), deadline).await?;
    if code != 201 {
        bail!("POST /connectors {}: {code} {text}", body["name"]);
    }
    Ok(retries)
}

/// Deletes `name` (sent again on 409; a 404 after a retry means an earlier attempt went
/// through) and checks the answer; sent again until `deadline`.
async fn delete(w: &Worker, name: &str, deadline: Instant) -> anyhow::Result<u32> {
    let (code, text, retries) = call(
        &w.rest,
        "DELETE",
        &format!("/connectors/{name}"),
        None,
        deadline,
    )
    .await?;
    if !(code == 204 || code == 200 || (code == 404 && retries > 0)) {
        bail!("DELETE /connectors/{name}: {code} {text}");
    }
    Ok(retries)
}

/// Waits until `count` `event` lines are in the lifecycle file at `path`; returns them.
async fn wait_events(
    path: &Path,
    event: &str,
    count: usize,
    deadline: Duration,
) -> anyhow::Result<Vec<connect::LifeEvent>> {
    let start = Instant::now();
    loop {
        let e: Vec<_> = connect::read_events(path)
            .into_iter()
            .filter(|e| e.event == event)
            .collect();
        if e.len() >= count {
            return Ok(e);
        }
        if start.elapsed() > deadline {
            bail!(
                "only {} of {count} {event} lines in {} after {deadline:?}",
                e.len(),
                path.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(FILE_POLL_MS)).await;
    }
}

/// A broker and one Kafka Connect worker of group `group` under `root`, with Kafka's
/// default `scheduled.rebalance.max.delay.ms` (nothing departs in these workloads); both
/// stop when dropped, so the caller keeps the broker alive beside the worker.
async fn one_worker(env: &PeerEnv, root: &Path, group: &str) -> anyhow::Result<(Broker, Worker)> {
    let broker = Broker::start(env, &root.join("broker")).await?;
    let worker = Worker::start(
        env,
        &root.join("worker"),
        &WorkerOptions {
            broker: broker.addr.clone(),
            group: group.to_owned(),
            rebalance_delay_ms: 300_000,
        },
    )
    .await?;
    Ok((broker, worker))
}

/// Deletion on both (Kafka Connect: one worker; Wharf: the deletion benchmark's cluster of
/// 4 executors), then the offsets check on the same worker.
async fn deletion(
    bin_dir: &Path,
    root: &Path,
    env: &PeerEnv,
) -> anyhow::Result<(Deletion, Offsets)> {
    let (broker, w) = one_worker(env, root, "bench-deletion").await?;
    let mut d = Deletion::default();
    // One warm-up deletion first, as Wharf's benchmark warms up.
    for i in 0..=CONNECT_DELETIONS {
        let name = format!("del-{i}");
        let life = root.join(format!("{name}.lifecycle"));
        create(
            &w,
            &create_body(&name, DELETION_TASKS, &life, DELETION_POLL_BLOCK_MS, None),
            phase_end(),
        )
        .await?;
        wait_running(&w, &name, DELETION_TASKS as usize).await?;
        wait_events(
            &life,
            "task-start",
            DELETION_TASKS as usize,
            Duration::from_secs(30),
        )
        .await?;
        let t0 = now_micros();
        let t = Instant::now();
        delete(&w, &name, phase_end()).await?;
        let answer = t.elapsed().as_secs_f64() * 1000.0;
        let stops = wait_events(
            &life,
            "task-stop",
            DELETION_TASKS as usize,
            Duration::from_secs(PHASE_DEADLINE_S),
        )
        .await?;
        let last = stops.iter().map(|e| e.micros).max().unwrap_or(t0);
        let waits = connect::join_waits(&w.log());
        let join = connect::overlap_ms(&waits, t0 / 1000, last / 1000);
        if i > 0 {
            d.answer_ms.push(answer);
            d.stop_ms.push((last - t0) as f64 / 1000.0);
            d.join_ms.push(join);
        }
        eprintln!(
            "[bench] peer deletion {i}: DELETE answered {answer:.1} ms, last stop() {:.1} ms, JoinGroup {join:.0} ms",
            (last - t0) as f64 / 1000.0
        );
    }
    let offsets = connect_offsets(&w, root).await?;
    drop(w);
    drop(broker);
    eprintln!("[bench] peer deletion: Wharf, {WHARF_DELETIONS} runs");
    d.wharf = crate::deletion::run(bin_dir, &root.join("wharf"), WHARF_DELETIONS, false).await?;
    Ok((d, offsets))
}

/// Kafka Connect: a STOPPED connector's offsets altered (KIP-875), the connector deleted
/// and created again under the same name; what its offsets are then and what its task
/// reads at start.
async fn connect_offsets(w: &Worker, root: &Path) -> anyhow::Result<Offsets> {
    let name = "offsets-check";
    let path = format!("/connectors/{name}/offsets");
    let life1 = root.join("offsets-1.lifecycle");
    create(
        w,
        &create_body(name, 1, &life1, IDLE_POLL_BLOCK_MS, Some("STOPPED")),
        phase_end(),
    )
    .await?;
    // STOPPED: the connector is stopped and has no tasks.
    let start = Instant::now();
    loop {
        let (code, body) =
            connect::http(&w.rest, "GET", &format!("/connectors/{name}/status"), None).await?;
        let v: Value = serde_json::from_str(&body).unwrap_or_default();
        if code == 200
            && v.pointer("/connector/state").and_then(Value::as_str) == Some("STOPPED")
            && v.get("tasks")
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty)
        {
            break;
        }
        if start.elapsed() > Duration::from_secs(PHASE_DEADLINE_S) {
            bail!("{name} not STOPPED: {code} {body}");
        }
        tokio::time::sleep(Duration::from_millis(STATUS_POLL_MS)).await;
    }
    let alter = serde_json::json!({"offsets": [{"partition": {"task": 0}, "offset": {"n": 5}}]});
    let deadline = Instant::now() + Duration::from_secs(PHASE_DEADLINE_S);
    let (code, text, _) = call(&w.rest, "PATCH", &path, Some(&alter), deadline).await?;
    if code != 200 {
        bail!("PATCH {path}: {code} {text}");
    }
    let (_, before) = connect::http(&w.rest, "GET", &path, None).await?;
    delete(w, name, phase_end()).await?;
    let start = Instant::now();
    while connect::http(&w.rest, "GET", &format!("/connectors/{name}"), None)
        .await?
        .0
        != 404
    {
        if start.elapsed() > Duration::from_secs(PHASE_DEADLINE_S) {
            bail!("{name} still listed after its DELETE");
        }
        tokio::time::sleep(Duration::from_millis(STATUS_POLL_MS)).await;
    }
    let life2 = root.join("offsets-2.lifecycle");
    create(
        w,
        &create_body(name, 1, &life2, IDLE_POLL_BLOCK_MS, None),
        phase_end(),
    )
    .await?;
    let started = wait_events(
        &life2,
        "task-start",
        1,
        Duration::from_secs(PHASE_DEADLINE_S),
    )
    .await?;
    let (_, after) = connect::http(&w.rest, "GET", &path, None).await?;
    delete(w, name, phase_end()).await?;
    Ok(Offsets {
        connect_before: before,
        connect_after: after,
        connect_task_read: started[0].detail.clone(),
        ..Offsets::default()
    })
}

/// Wharf: the same check (a STOPPED `test-source` whose offsets are altered, deleted
/// with wait, created again under the same name); GetOffsets before and after, as
/// `partition => offset` lists.
async fn wharf_offsets(bin_dir: &Path, root: &Path) -> anyhow::Result<(String, String)> {
    let cluster = Cluster::start(bin_dir, &root.join("cluster"), &ClusterOptions::plain(1)).await?;
    let mut admin = cluster.admin.clone();
    let name = "offsets-check".to_string();
    let create = CreateConnectorRequest {
        name: name.clone(),
        config: crate::deletion::idle_source_config(&root.join("lifecycle.jsonl"), 1),
        initial_state: TargetState::Stopped as i32,
    };
    admin.create_connector(create.clone()).await?;
    let start = Instant::now();
    loop {
        let st = admin
            .get_connector_status(GetConnectorStatusRequest { name: name.clone() })
            .await?
            .into_inner()
            .status
            .context("status missing")?;
        let stopped = State::Stopped as i32;
        if st.connector.as_ref().is_some_and(|c| c.state == stopped)
            && st
                .tasks
                .iter()
                .all(|t| t.status.as_ref().is_some_and(|s| s.state == stopped))
        {
            break;
        }
        if start.elapsed() > Duration::from_secs(30) {
            bail!("Wharf {name} not STOPPED: {st:?}");
        }
        tokio::time::sleep(Duration::from_millis(STATUS_POLL_MS)).await;
    }
    admin
        .alter_offsets(AlterOffsetsRequest {
            name: name.clone(),
            offsets: vec![SourceOffset {
                partition: r#"{"task":0}"#.into(),
                offset: r#"{"n":5}"#.into(),
            }],
        })
        .await?;
    let before = wharf_offsets_text(&mut admin, &name).await?;
    let resp = admin
        .delete_connector(DeleteConnectorRequest {
            name: name.clone(),
            force: false,
            wait: true,
            wait_timeout_ms: 30_000,
            keep_resources: false,
            ..Default::default()
        })
        .await?
        .into_inner();
    if !resp.deleted {
        bail!("Wharf {name}: deletion did not finish: {:?}", resp.status);
    }
    admin.create_connector(create).await?;
    let after = wharf_offsets_text(&mut admin, &name).await?;
    Ok((before, after))
}

/// Wharf's GetOffsets of `name` as `partition => offset, ...`, `(none)` when empty.
async fn wharf_offsets_text(
    admin: &mut wharf::pb::v1::connector_admin_client::ConnectorAdminClient<
        tonic::transport::Channel,
    >,
    name: &str,
) -> anyhow::Result<String> {
    let o = admin
        .get_offsets(GetOffsetsRequest { name: name.into() })
        .await?
        .into_inner()
        .offsets;
    Ok(if o.is_empty() {
        "(none)".into()
    } else {
        o.iter()
            .map(|o| format!("{} => {}", o.partition, o.offset))
            .collect::<Vec<_>>()
            .join(", ")
    })
}

/// Lists `GET /connectors?expand=status` until `ok(listed, running)` holds; returns when.
async fn wait_listing(
    w: &Worker,
    on: Option<&str>,
    deadline: Duration,
    ok: impl Fn(usize, usize) -> bool,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    loop {
        let (code, body) = connect::http(&w.rest, "GET", "/connectors?expand=status", None).await?;
        let (listed, running) = if code == 200 {
            connect::running_tasks(&serde_json::from_str(&body)?, on)
        } else {
            (usize::MAX, 0)
        };
        if code == 200 && ok(listed, running) {
            return Ok(start.elapsed());
        }
        if start.elapsed() > deadline {
            bail!(
                "after {deadline:?}: {listed} connectors listed, {running} tasks RUNNING (HTTP {code})"
            );
        }
        tokio::time::sleep(Duration::from_millis(LIST_POLL_MS)).await;
    }
}

/// `n` connectors x 10 tasks on one Kafka Connect worker, then Wharf's scale step of
/// the same size (control plane and 10 executors, one run).
async fn scale(bin_dir: &Path, root: &Path, env: &PeerEnv, n: usize) -> anyhow::Result<Scale> {
    let (broker, w) = one_worker(env, root, &format!("bench-scale-{n}")).await?;
    tokio::time::sleep(Duration::from_millis(RSS_SETTLE_MS)).await;
    let rss_idle = w.proc.rss_kib();
    let life = root.join("scale.lifecycle");
    let total = n * TASKS as usize;
    let deadline = Duration::from_secs(PHASE_DEADLINE_S);

    let t0 = now_micros();
    let t = Instant::now();
    let end = phase_end();
    let retries: Vec<anyhow::Result<u32>> = futures::stream::iter(0..n)
        .map(|i| {
            let body = create_body(
                &format!("scale-{i:05}"),
                TASKS,
                &life,
                IDLE_POLL_BLOCK_MS,
                None,
            );
            let w = &w;
            async move { create(w, &body, end).await }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let posts_s = t.elapsed().as_secs_f64();
    let mut retried = 0;
    for x in retries {
        retried += x?;
    }
    wait_listing(
        &w,
        None,
        end.saturating_duration_since(Instant::now()),
        |listed, running| listed == n && running == total,
    )
    .await
    .with_context(|| {
        format!(
            "create phase ({PHASE_DEADLINE_S} s deadline) ended {:.0} s after the first POST, the last POST answered after {posts_s:.0} s",
            t.elapsed().as_secs_f64()
        )
    })?;
    let create_s = t.elapsed().as_secs_f64();
    let t1 = now_micros();
    tokio::time::sleep(Duration::from_millis(RSS_SETTLE_MS)).await;
    let rss = w.proc.rss_kib();

    let t2 = now_micros();
    let t = Instant::now();
    let end = phase_end();
    let retries: Vec<anyhow::Result<u32>> = futures::stream::iter(0..n)
        .map(|i| {
            let w = &w;
            async move { delete(w, &format!("scale-{i:05}"), end).await }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    // A delete phase past its deadline is a figure too: how much was left.
    let mut unfinished = retries
        .iter()
        .find_map(|x| x.as_ref().err().map(|e| format!("{e:#}")));
    retried += retries.iter().filter_map(|x| x.as_ref().ok()).sum::<u32>();
    let delete_answer_s = t.elapsed().as_secs_f64();
    if unfinished.is_none() {
        let left = end.saturating_duration_since(Instant::now());
        if let Err(e) = wait_listing(&w, None, left, |listed, _| listed == 0).await {
            unfinished = Some(format!("{e:#}"));
        } else if let Err(e) = wait_events(
            &life,
            "task-stop",
            total,
            end.saturating_duration_since(Instant::now()),
        )
        .await
        {
            unfinished = Some(format!("{e:#}"));
        }
    }
    let delete_s = t.elapsed().as_secs_f64();
    let delete_unfinished = unfinished.map(|e| {
        let stops = connect::read_events(&life)
            .iter()
            .filter(|e| e.event == "task-stop")
            .count();
        format!("not finished after {delete_s:.0} s ({stops} of {total} task stops ran): {e}")
    });
    let t3 = now_micros();
    let waits = connect::join_waits(&w.log());
    let mut s = Scale {
        connectors: n,
        create_s,
        create_join_s: connect::overlap_ms(&waits, t0 / 1000, t1 / 1000) / 1000.0,
        delete_answer_s,
        delete_s,
        delete_join_s: connect::overlap_ms(&waits, t2 / 1000, t3 / 1000) / 1000.0,
        retries: retried,
        delete_unfinished,
        rss_mib: rss as f64 / 1024.0,
        rss_idle_mib: rss_idle as f64 / 1024.0,
        wharf: None,
    };
    eprintln!("[bench] peer scale {n} x 10, Kafka Connect: {s:?}");
    drop(w);
    drop(broker);
    s.wharf = Some(
        crate::scale::run(
            bin_dir,
            &root.join("wharf"),
            n,
            0,
            deadline,
            deadline,
            false,
        )
        .await?,
    );
    eprintln!("[bench] peer scale {n} x 10, Wharf: {:?}", s.wharf);
    Ok(s)
}

/// Kafka Connect's rebalance with `scheduled.rebalance.max.delay.ms` = `delay_ms`, kept in
/// `r` (its load average first; a failure as a note).
async fn connect_rebalance(
    r: &mut PeerResults,
    root: &Path,
    delay_ms: u64,
    note: &dyn Fn(&mut PeerResults, &str, anyhow::Error),
) {
    r.loads
        .push((format!("rebalance, delay {delay_ms} ms"), load()));
    match rebalance(
        &root.join(format!("rebalance-{delay_ms}")),
        &r.env,
        delay_ms,
    )
    .await
    {
        Ok(x) => r.rebalance.push(x),
        Err(e) => note(r, &format!("the rebalance with delay {delay_ms} ms"), e),
    }
}

/// 10 connectors x 10 tasks on two Kafka Connect workers; kill -9 of the second, then
/// time until every task is RUNNING on the first.
async fn rebalance(root: &Path, env: &PeerEnv, delay_ms: u64) -> anyhow::Result<Rebalance> {
    let broker = Broker::start(env, &root.join("broker")).await?;
    let opts = WorkerOptions {
        broker: broker.addr.clone(),
        group: "bench-rebalance".into(),
        rebalance_delay_ms: delay_ms,
    };
    let w1 = Worker::start(env, &root.join("worker-1"), &opts).await?;
    let mut w2 = Worker::start(env, &root.join("worker-2"), &opts).await?;
    let life = root.join("rebalance.lifecycle");
    let total = REBALANCE_CONNECTORS * TASKS as usize;
    let deadline = Duration::from_secs(PHASE_DEADLINE_S);
    for i in 0..REBALANCE_CONNECTORS {
        create(
            &w1,
            &create_body(
                &format!("reb-{i:02}"),
                TASKS,
                &life,
                IDLE_POLL_BLOCK_MS,
                None,
            ),
            phase_end(),
        )
        .await?;
    }
    wait_listing(&w1, None, deadline, |l, r| {
        l == REBALANCE_CONNECTORS && r == total
    })
    .await?;
    let (code, body) = connect::http(&w1.rest, "GET", "/connectors?expand=status", None).await?;
    if code != 200 {
        bail!("listing: {code} {body}");
    }
    let (_, lost) = connect::running_tasks(&serde_json::from_str(&body)?, Some(&w2.id));
    if lost == 0 {
        bail!("no task ran on the second worker; nothing to rebalance");
    }
    let t0 = now_micros();
    let t = Instant::now();
    w2.proc.kill9();
    let wait = Duration::from_millis(delay_ms) + deadline;
    wait_listing(&w1, Some(&w1.id), wait, |_, r| r == total).await?;
    let seconds = t.elapsed().as_secs_f64();
    let waits = connect::join_waits(&w1.log());
    let join_s = connect::overlap_ms(&waits, t0 / 1000, now_micros() / 1000) / 1000.0;
    let x = Rebalance {
        delay_ms,
        tasks: total,
        lost,
        seconds,
        join_s,
    };
    eprintln!("[bench] peer rebalance: {x:?}");
    Ok(x)
}

/// `wharf / connect` as a ratio with 2 decimals, or `-` when either is missing or 0.
fn ratio(wharf: f64, connect: f64) -> String {
    if wharf > 0.0 && connect > 0.0 {
        format!("{:.3}", wharf / connect)
    } else {
        "-".into()
    }
}

/// The "Kafka Connect beside Wharf" section of BENCHMARKS.md.
pub fn render(r: &PeerResults) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## 5. Kafka Connect beside Wharf\n");
    if let Some(why) = &r.skipped {
        let _ = writeln!(s, "Not run: {why}\n");
        return s;
    }
    let _ = writeln!(
        s,
        "The same workloads on Apache Kafka Connect in the same run, each figure as `Wharf / Kafka Connect` (below 1: Wharf takes less). Kafka Connect {}, distributed workers (`ConnectDistributed`, {}; the JVM flags of `connect-distributed.sh`: -Xms256M -Xmx2G, G1), on a {} broker with memory storage, internal topics with one partition and replication factor 1, `session.timeout.ms={}` and `heartbeat.interval.ms=1000` (Wharf's scale cluster has a 3 s executor lease), `fetch.max.wait.ms=10`. The connector is the bench's own no-op source (`bench/peer/`): its tasks produce nothing and append a timestamped line when `start()` and `stop()` run. Load average (1, 5, 15 min) before each workload: {}. The peer part took {:.0} s.\n",
        r.env.connect_version,
        r.env.java_version,
        r.env.tansu_version,
        connect::SESSION_TIMEOUT_MS,
        r.loads
            .iter()
            .map(|(w, l)| format!("{w} {l}"))
            .collect::<Vec<_>>()
            .join("; "),
        r.took_s
    );
    let _ = writeln!(
        s,
        "tansu holds every JoinGroup for about 2 s (5 s with Kafka Connect's default 10 s session timeout) where an Apache Kafka broker answers once all members joined, and every Kafka Connect rebalance waits in it; so beside each Kafka Connect figure: the JoinGroup wait of its worker inside the same window (from `(Re-)joining group` to `Successfully joined group` in the worker's log) and the figure without it, the better guess of what Kafka Connect takes on Apache Kafka.\n"
    );

    if let Some(d) = &r.deletion {
        let stop = median(&d.stop_ms);
        let join = median(&d.join_ms);
        let without = median(
            &d.stop_ms
                .iter()
                .zip(&d.join_ms)
                .map(|(a, b)| a - b)
                .collect::<Vec<_>>(),
        );
        let wharf = d.wharf.p50();
        let _ = writeln!(s, "### Deletion, one connector with 8 tasks\n");
        let _ = writeln!(
            s,
            "Kafka Connect: one worker, `DELETE /connectors/NAME`, {} measured deletions after one warm-up, each of a fresh connector whose tasks all ran; until `DELETE` answered and until the last task's `stop()` ran (the task's poll waits at most {DELETION_POLL_BLOCK_MS} ms, and Kafka Connect calls `stop()` once it returned). Wharf: section 1's `DeleteConnector(wait=true)` on 8 tasks over 4 executors, {} measured deletions in this part; it answers once every task's stop(connector_deleted = true) ran. Medians, ms.\n",
            d.stop_ms.len(),
            d.wharf.runs
        );
        let _ = writeln!(
            s,
            "| figure | Wharf | Kafka Connect | Wharf / Kafka Connect |\n| --- | ---: | ---: | ---: |"
        );
        let _ = writeln!(
            s,
            "| until the last task's stop ran | {wharf:.2} | {stop:.2} | {} |",
            ratio(wharf, stop)
        );
        let _ = writeln!(
            s,
            "| - of it, Kafka Connect's JoinGroup wait | | {join:.2} | |"
        );
        let _ = writeln!(
            s,
            "| until the last stop ran, without the JoinGroup wait | {wharf:.2} | {without:.2} | {} |",
            ratio(wharf, without)
        );
        let _ = writeln!(
            s,
            "| until the delete call answered | {wharf:.2} | {:.2} | {} |\n",
            median(&d.answer_ms),
            ratio(wharf, median(&d.answer_ms))
        );
        let _ = writeln!(
            s,
            "Kafka Connect's `DELETE` answers once the tombstone is in the config topic; its tasks stop after the rebalance that follows. Runs (answer / last stop / JoinGroup, ms): {}\n",
            d.answer_ms
                .iter()
                .zip(&d.stop_ms)
                .zip(&d.join_ms)
                .map(|((a, b), c)| format!("{a:.1} / {b:.1} / {c:.0}"))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }

    if !r.scale.is_empty() {
        let _ = writeln!(s, "### Scale, N connectors x 10 tasks\n");
        let _ = writeln!(
            s,
            "Kafka Connect: one worker; create all ({CONCURRENCY} `POST /connectors` in flight, a 409 during a rebalance sent again after 50 ms) until `GET /connectors?expand=status` (every {LIST_POLL_MS} ms) shows every task RUNNING; delete all ({CONCURRENCY} in flight) until none is listed and every task's `stop()` ran (poll wait {IDLE_POLL_BLOCK_MS} ms, so a stop may come up to 1 s late). Worker RSS (VmRSS) 1 s after all RUNNING. Wharf: section 2's step at the same N, one run, control plane + 10 executor processes; its RSS is all 11 processes added up.\n"
        );
        let _ = writeln!(
            s,
            "| N | figure | Wharf | Kafka Connect | JoinGroup in it | Kafka Connect without JoinGroup | Wharf / Kafka Connect | same, without JoinGroup |\n| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        for x in &r.scale {
            let Some(w) = &x.wharf else { continue };
            let rows = [
                (
                    "create until all RUNNING, s",
                    w.create_s,
                    x.create_s,
                    x.create_join_s,
                ),
                (
                    "delete until gone and all stops ran, s",
                    w.delete_s,
                    x.delete_s,
                    x.delete_join_s,
                ),
            ];
            for (name, wv, cv, join) in rows {
                let _ = writeln!(
                    s,
                    "| {} | {name} | {wv:.2} | {cv:.2} | {join:.2} | {:.2} | {} | {} |",
                    x.connectors,
                    cv - join,
                    ratio(wv, cv),
                    ratio(wv, cv - join)
                );
            }
            let wharf_rss = w.cp_rss_mib + w.exec_rss_mib;
            let _ = writeln!(
                s,
                "| {} | RSS all running, MiB | {wharf_rss:.1} | {:.1} | | | {} | |",
                x.connectors,
                x.rss_mib,
                ratio(wharf_rss, x.rss_mib)
            );
        }
        for x in &r.scale {
            if let Some(why) = &x.delete_unfinished {
                let _ = writeln!(
                    s,
                    "\nKafka Connect's delete of {} x 10 (its row above is the time until the deadline): {why}",
                    x.connectors
                );
            }
        }
        let _ = writeln!(
            s,
            "\nKafka Connect's worker: idle RSS {}; all DELETEs answered after {}; calls sent again after a 409: {}. Wharf's control plane alone: {}.\n",
            joined(
                r.scale
                    .iter()
                    .map(|x| format!("{:.1} MiB before {} x 10", x.rss_idle_mib, x.connectors))
            ),
            joined(
                r.scale
                    .iter()
                    .map(|x| format!("{:.2} s ({} x 10)", x.delete_answer_s, x.connectors))
            ),
            joined(
                r.scale
                    .iter()
                    .map(|x| format!("{} ({} x 10)", x.retries, x.connectors))
            ),
            joined(
                r.scale
                    .iter()
                    .filter_map(|x| x.wharf.as_ref())
                    .map(|w| format!("{:.1} MiB at {} x 10", w.cp_rss_mib, w.connectors))
            )
        );
    }

    if !r.rebalance.is_empty() || r.wharf_rebalance.is_some() {
        let _ = writeln!(
            s,
            "### Rebalance after kill -9, 10 connectors x 10 tasks on two\n"
        );
        let _ = writeln!(
            s,
            "Kafka Connect: two workers, kill -9 of the second, until `GET /connectors?expand=status` (every {LIST_POLL_MS} ms) shows every task RUNNING on the survivor; Kafka Connect keeps a departed worker's tasks unassigned for `scheduled.rebalance.max.delay.ms` (KIP-415) after its session timed out. Wharf: the same 10 x 10 on two executors (lease {} ms), kill -9 of one, until every task RUNNING on the other.\n",
            crate::scale::LEASE_MS
        );
        let _ = writeln!(
            s,
            "| Kafka Connect's delay | Wharf s | Kafka Connect s | JoinGroup in it s | Kafka Connect without JoinGroup s | Wharf / Kafka Connect | same, without JoinGroup | tasks moved (Wharf / Kafka Connect) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
        );
        let w = r.wharf_rebalance.as_ref();
        let ws = w.map_or(0.0, |w| w.seconds);
        for x in &r.rebalance {
            let _ = writeln!(
                s,
                "| {} ms{} | {} | {:.2} | {:.2} | {:.2} | {} | {} | {} / {} of {} |",
                x.delay_ms,
                if x.delay_ms == 300_000 {
                    " (default)"
                } else {
                    ""
                },
                w.map_or("-".into(), |w| format!("{:.2}", w.seconds)),
                x.seconds,
                x.join_s,
                x.seconds - x.join_s,
                ratio(ws, x.seconds),
                ratio(ws, x.seconds - x.join_s),
                w.map_or("-".into(), |w| w.lost.to_string()),
                x.lost,
                x.tasks
            );
        }
        let _ = writeln!(s);
    }

    if let Some(o) = &r.offsets {
        let _ = writeln!(
            s,
            "### Offsets after delete and re-create under the same name\n"
        );
        let _ = writeln!(
            s,
            "A STOPPED connector (KIP-980 `initial_state`), its offset for partition `{{\"task\":0}}` set to `{{\"n\":5}}` (KIP-875), deleted, created again under the same name.\n"
        );
        let _ = writeln!(
            s,
            "- Kafka Connect keeps them: `GET .../offsets` before the delete `{}`, after the re-create `{}`; the new connector's task read `{}` at start.",
            o.connect_before, o.connect_after, o.connect_task_read
        );
        let _ = writeln!(
            s,
            "- Wharf drops them with the deletion (docs/contract.md, \"A clean slate\"; docs/lifecycle.md): GetOffsets before the delete `{}`, after the re-create `{}`.\n",
            o.wharf_before, o.wharf_after
        );
    }
    for n in &r.notes {
        let _ = writeln!(s, "- {n}");
    }
    if !r.notes.is_empty() {
        let _ = writeln!(s);
    }
    s
}

/// Where `scripts/peer-setup` put the env file, or why the peer cannot run.
pub fn env_from(path: Option<&PathBuf>) -> Result<PeerEnv, String> {
    let Some(p) = path else {
        return Err("no peer env file given (`--peer-env FILE`, written by scripts/peer-setup, which scripts/bench runs)".into());
    };
    PeerEnv::load(p).map_err(|e| format!("{e:#}"))
}

/// `parts` separated by ", ".
fn joined(parts: impl Iterator<Item = String>) -> String {
    parts.collect::<Vec<_>>().join(", ")
}
