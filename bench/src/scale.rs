//! Benchmarks 2 and 3: N connectors x 10 idle tasks on 10 executor processes (create all
//! until all RUNNING, delete all until the store is empty, RSS), a control-plane restart
//! with everything running, and the rebalance after a kill -9 of one executor.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use futures::StreamExt;
use wharf::pb::v1::{CreateConnectorRequest, DeleteConnectorRequest, ListConnectorsRequest, State};

use crate::deletion::idle_source_config;
use crate::procs::{Cluster, ClusterOptions};

/// Tasks per connector.
pub const TASKS_PER_CONNECTOR: u32 = 10;
/// Executor processes.
pub const EXECUTORS: usize = 10;
/// Executor lease in the scale cluster, milliseconds (the rebalance waits at least this).
pub const LEASE_MS: u32 = 3_000;
/// Heartbeat interval in the scale cluster, milliseconds.
const HEARTBEAT_MS: u32 = 1_000;
/// Admin calls in flight while creating or deleting.
const ADMIN_CONCURRENCY: usize = 32;
/// Interval between status listings, milliseconds.
const LIST_POLL_MS: u64 = 250;
/// Interval between listings once a create or delete is nearly done ([`NEAR_END`]) at
/// [`FINE_POLL_MAX_CONNECTORS`] connectors or fewer, milliseconds. At 250 ms a 1,000 x 10
/// delete of about 1.5 s was measured in steps of a sixth of itself, more than the 5%
/// that the observability on / off pairs must resolve (bench/NOTES.md).
const FINE_POLL_MS: u64 = 20;
/// Up to this many connectors a listing is cheap enough (a few ms) to poll at
/// [`FINE_POLL_MS`]; above it, every [`LIST_POLL_MS`] as before.
const FINE_POLL_MAX_CONNECTORS: usize = 1_000;
/// The share of tasks RUNNING (create), or of connectors gone (delete), from which a
/// step polls at [`FINE_POLL_MS`].
const NEAR_END: f64 = 0.8;
/// Settling time before reading RSS, milliseconds.
const RSS_SETTLE_MS: u64 = 1_000;
/// Interval between reads while a restarted control plane comes up, milliseconds.
const RESTART_POLL_MS: u64 = 20;
/// How long a control plane may take to exit after SIGTERM, seconds.
const RESTART_STOP_DEADLINE_S: u64 = 30;
/// The restarted control plane's log filter: warnings, and the herder's INFO lines, one
/// of which says that it caught up.
const RESTART_LOG_FILTER: &str = "warn,wharf_control_plane::reconcile::herder=info";
/// The message of that line (`control-plane/src/reconcile/herder.rs`, `run_herder`).
const CAUGHT_UP_MESSAGE: &str = "herder caught up";

/// One control-plane restart on a store holding every connector (issue 19).
#[derive(Debug, Clone, Default)]
pub struct Restart {
    /// SIGTERM until the old process exited, seconds.
    pub stop_s: f64,
    /// The new process started until `ListConnectors(expand_status)` listed every
    /// connector with its status, seconds.
    pub reads_s: f64,
    /// The new process started until its herder logged that it caught up (every
    /// connector decided, every live executor's heartbeat listed every instance recorded
    /// RUNNING on it), seconds.
    pub caught_up_s: f64,
    /// Tasks RUNNING after it caught up, out of every task.
    pub running_after: usize,
    /// Tasks on another executor (or none) after it caught up than before the restart.
    pub moved: usize,
}

/// One rebalance measurement.
#[derive(Debug, Clone, Default)]
pub struct Rebalance {
    /// Tasks that were on the killed executor.
    pub lost: usize,
    /// Tasks of surviving executors that moved anyway.
    pub moved_other: usize,
    /// kill -9 until every task RUNNING elsewhere, seconds (includes the lease).
    pub seconds: f64,
    /// Live executors before the kill.
    pub executors_before: usize,
}

/// One scale step.
#[derive(Debug, Clone, Default)]
pub struct ScalePoint {
    /// Connectors.
    pub connectors: usize,
    /// Create all until all RUNNING, seconds.
    pub create_s: f64,
    /// Delete all until none is listed, seconds (until the deadline when some were left).
    pub delete_s: f64,
    /// Connectors still listed when the delete deadline passed (0: all deleted).
    pub delete_left: usize,
    /// Control-plane RSS with everything running, MiB.
    pub cp_rss_mib: f64,
    /// Control-plane RSS before creating anything, MiB.
    pub cp_rss_idle_mib: f64,
    /// Executor RSS growth per hosted task (connector instances included), KiB.
    pub exec_kib_per_task: f64,
    /// The executors' RSS added up, with everything running, MiB.
    pub exec_rss_mib: f64,
    /// Rebalances measured at this size, one per kill.
    pub rebalances: Vec<Rebalance>,
    /// The control-plane restart with everything running, when the step asked for one.
    pub restart: Option<Restart>,
    /// CPU time (user + system) of the cluster's processes over the create, and over the
    /// delete, ms (background included).
    pub cluster_cpu_ms: (f64, f64),
    /// CPU time of this benchmark process (its admin client, and the OTLP receiver and
    /// metrics scraper of an "on" run) over the delete, ms.
    pub bench_delete_cpu_ms: f64,
    /// CPU time of the control plane alone over the delete, ms (the executors' is
    /// `cluster_cpu_ms.1` minus it).
    pub cp_delete_cpu_ms: f64,
}

/// (connector, task) -> (state, executor) over every connector.
type Snapshot = HashMap<(String, u32), (i32, String)>;

async fn snapshot(cluster: &Cluster) -> anyhow::Result<(usize, Snapshot)> {
    let list = cluster
        .admin
        .clone()
        .list_connectors(ListConnectorsRequest {
            expand_status: true,
        })
        .await?
        .into_inner()
        .connectors;
    let mut out = HashMap::new();
    for c in &list {
        if let Some(st) = &c.status {
            for t in &st.tasks {
                if let Some(s) = &t.status {
                    out.insert((c.name.clone(), t.task), (s.state, s.executor_id.clone()));
                }
            }
        }
    }
    Ok((list.len(), out))
}

/// How long to wait before the next listing of a step of `n` connectors that is `done`
/// (0 to 1) of the way: [`FINE_POLL_MS`] near its end when listings are cheap, else
/// [`LIST_POLL_MS`].
fn poll_interval(n: usize, done: f64) -> Duration {
    Duration::from_millis(if n <= FINE_POLL_MAX_CONNECTORS && done >= NEAR_END {
        FINE_POLL_MS
    } else {
        LIST_POLL_MS
    })
}

fn running_count(s: &Snapshot, avoid: Option<&str>) -> usize {
    s.values()
        .filter(|(st, ex)| *st == State::Running as i32 && Some(ex.as_str()) != avoid)
        .count()
}

/// Runs one step with `n` connectors; after all run, kills `kills` executors one after
/// the other and measures each rebalance. `observed`: every process has its metrics
/// listener scraped once a second and exports its spans to an OTLP receiver (issue 16's
/// "on" run; [`crate::observe`]).
/// Gives up (error) when a phase takes longer than `phase_deadline`.
pub async fn run(
    bin_dir: &Path,
    root: &Path,
    n: usize,
    kills: usize,
    phase_deadline: Duration,
    delete_deadline: Duration,
    observed: bool,
) -> anyhow::Result<ScalePoint> {
    let step = Step {
        connectors: n,
        executors: EXECUTORS,
        kills,
        restart: false,
    };
    run_step(
        bin_dir,
        root,
        step,
        phase_deadline,
        delete_deadline,
        observed,
    )
    .await
}

/// The shape of one step: `connectors` x 10 tasks on `executors` processes, then `kills`
/// executors killed one after the other (the last ones first).
#[derive(Debug, Clone, Copy)]
pub struct Step {
    /// Connectors, 10 tasks each.
    pub connectors: usize,
    /// Executor processes.
    pub executors: usize,
    /// Executors killed with kill -9 after all run, one rebalance measured per kill.
    pub kills: usize,
    /// Restart the control plane once all run, before the kills ([`Restart`]).
    pub restart: bool,
}

/// [`run`] with any number of executors (the Kafka Connect peer's rebalance runs on two).
pub async fn run_step(
    bin_dir: &Path,
    root: &Path,
    step: Step,
    phase_deadline: Duration,
    delete_deadline: Duration,
    observed: bool,
) -> anyhow::Result<ScalePoint> {
    let Step {
        connectors: n,
        executors,
        kills,
        restart,
    } = step;
    let load = crate::observe::Load::start_if(observed)?;
    let cluster = Cluster::start(
        bin_dir,
        &root.join("cluster"),
        &ClusterOptions {
            executors,
            lease_ms: LEASE_MS,
            heartbeat_ms: HEARTBEAT_MS,
            nats_url: None,
            record_log: None,
            mtls: false,
            otlp_endpoint: load.as_ref().map(|l| l.endpoint.clone()),
            executor_args: Vec::new(),
        },
    )
    .await?;
    if let Some(l) = &load {
        l.scrape(cluster.metrics.clone());
    }
    let lifecycle = root.join("lifecycle.jsonl");
    tokio::time::sleep(Duration::from_millis(RSS_SETTLE_MS)).await;
    let cp_idle = cluster.cp.rss_kib();
    let exec_idle = cluster.executors_rss_kib();
    let total_tasks = n * TASKS_PER_CONNECTOR as usize;

    let cpu_before_create = cluster.cpu_ms();
    let t = Instant::now();
    let admin = cluster.admin.clone();
    let results: Vec<_> = futures::stream::iter(0..n)
        .map(|i| {
            let mut admin = admin.clone();
            let config = idle_source_config(&lifecycle, TASKS_PER_CONNECTOR);
            async move {
                admin
                    .create_connector(CreateConnectorRequest {
                        name: format!("scale-{i:05}"),
                        config,
                        initial_state: 0,
                    })
                    .await
            }
        })
        .buffer_unordered(ADMIN_CONCURRENCY)
        .collect()
        .await;
    if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
        bail!("create: {e}");
    }
    let snap = loop {
        let (_, s) = snapshot(&cluster).await?;
        if running_count(&s, None) == total_tasks {
            break s;
        }
        if t.elapsed() > phase_deadline {
            bail!(
                "{n} x 10: only {} of {total_tasks} tasks RUNNING after {phase_deadline:?}",
                running_count(&s, None)
            );
        }
        let done = running_count(&s, None) as f64 / total_tasks as f64;
        tokio::time::sleep(poll_interval(n, done)).await;
    };
    let create_s = t.elapsed().as_secs_f64();
    let create_cpu = cluster.cpu_ms() - cpu_before_create;
    tokio::time::sleep(Duration::from_millis(RSS_SETTLE_MS)).await;
    let cp_rss = cluster.cp.rss_kib();
    let exec_rss = cluster.executors_rss_kib();
    let mut cluster = cluster;
    let (restart, snap) = if restart {
        let (r, after) = restart_cp(&mut cluster, &snap, n, phase_deadline).await?;
        (Some(r), after)
    } else {
        (None, snap)
    };
    // Rebalances: kill -9 the last live executor, wait until every task RUNNING on the
    // others; `snap` follows the current placement.
    let mut rebalances = Vec::new();
    let mut snap = snap;
    let mut dead: Vec<String> = Vec::new();
    for k in 0..kills {
        let victim_idx = executors - 1 - k;
        let victim = format!("exec-{}", victim_idx + 1);
        let lost = snap.values().filter(|(_, ex)| *ex == victim).count();
        dead.push(victim.clone());
        let t = Instant::now();
        if let Some((p, _)) = cluster.executors.get_mut(victim_idx) {
            p.kill9();
        }
        let after = loop {
            let (_, s) = snapshot(&cluster).await?;
            let ok = s
                .values()
                .filter(|(st, ex)| *st == State::Running as i32 && !dead.contains(ex))
                .count();
            if ok == total_tasks {
                break s;
            }
            if t.elapsed() > phase_deadline {
                bail!("rebalance not done after {phase_deadline:?}");
            }
            tokio::time::sleep(Duration::from_millis(LIST_POLL_MS)).await;
        };
        let seconds = t.elapsed().as_secs_f64();
        let moved_other = snap
            .iter()
            .filter(|(k, (_, ex))| *ex != victim && after.get(*k).is_some_and(|(_, now)| now != ex))
            .count();
        rebalances.push(Rebalance {
            lost,
            moved_other,
            seconds,
            executors_before: executors - k,
        });
        snap = after;
    }

    perf_mark(&cluster, observed, "delete start");
    let cpu_before_delete = cluster.cpu_ms();
    let cp_before_delete = crate::procs::cpu_ms(cluster.cp.pid());
    let bench_before_delete = crate::procs::cpu_ms(std::process::id());
    let t = Instant::now();
    let results: Vec<_> = futures::stream::iter(0..n)
        .map(|i| {
            let mut admin = admin.clone();
            async move {
                admin
                    .delete_connector(DeleteConnectorRequest {
                        name: format!("scale-{i:05}"),
                        force: false,
                        wait: false,
                        wait_timeout_ms: 0,
                        keep_resources: false,
                        ..Default::default()
                    })
                    .await
            }
        })
        .buffer_unordered(ADMIN_CONCURRENCY)
        .collect()
        .await;
    if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
        bail!("delete: {e}");
    }
    let mut delete_left = 0;
    loop {
        let left = cluster
            .admin
            .clone()
            .list_connectors(ListConnectorsRequest {
                expand_status: false,
            })
            .await?
            .into_inner()
            .connectors
            .len();
        if left == 0 {
            break;
        }
        if t.elapsed() > delete_deadline {
            delete_left = left;
            break;
        }
        tokio::time::sleep(poll_interval(n, 1.0 - left as f64 / n as f64)).await;
    }
    let delete_s = t.elapsed().as_secs_f64();
    let delete_cpu = cluster.cpu_ms() - cpu_before_delete;
    perf_mark(&cluster, observed, "delete end");
    let cp_delete_cpu_ms = crate::procs::cpu_ms(cluster.cp.pid()) - cp_before_delete;
    let bench_delete_cpu_ms = crate::procs::cpu_ms(std::process::id()) - bench_before_delete;

    Ok(ScalePoint {
        connectors: n,
        create_s,
        delete_s,
        delete_left,
        cp_rss_mib: cp_rss as f64 / 1024.0,
        cp_rss_idle_mib: cp_idle as f64 / 1024.0,
        exec_kib_per_task: exec_rss.saturating_sub(exec_idle) as f64 / total_tasks as f64,
        exec_rss_mib: exec_rss as f64 / 1024.0,
        rebalances,
        restart,
        cluster_cpu_ms: (create_cpu, delete_cpu),
        bench_delete_cpu_ms,
        cp_delete_cpu_ms,
    })
}

/// With `WHARF_BENCH_PERF_MARKS` set, names the cluster's processes (by observability,
/// `on` or `off`) and the start or end of the delete phase on stderr, with the time on
/// `CLOCK_MONOTONIC` in seconds: the clock of `perf record -a -k CLOCK_MONOTONIC`, so that
/// `perf script --time START,END` keeps the delete phases only (bench/NOTES.md).
fn perf_mark(cluster: &Cluster, observed: bool, what: &str) {
    if std::env::var_os("WHARF_BENCH_PERF_MARKS").is_none() {
        return;
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let executors: Vec<String> = cluster
        .executors
        .iter()
        .map(|(p, _)| p.pid().to_string())
        .collect();
    eprintln!(
        "[bench] perf: {what} {}.{:09} observability {} control plane {} executors {}",
        ts.tv_sec,
        ts.tv_nsec,
        if observed { "on" } else { "off" },
        cluster.cp.pid(),
        executors.join(",")
    );
}

/// Restarts the control plane of a cluster where every task runs (`before`, `n`
/// connectors) and measures when it serves reads and when its herder caught up; returns
/// the placement after.
async fn restart_cp(
    cluster: &mut Cluster,
    before: &Snapshot,
    n: usize,
    deadline: Duration,
) -> anyhow::Result<(Restart, Snapshot)> {
    let (stopped, spawned) = cluster
        .restart_cp(
            Duration::from_secs(RESTART_STOP_DEADLINE_S),
            RESTART_LOG_FILTER,
        )
        .await?;
    let log = cluster.cp.dir.join("process.log");
    let poll = || tokio::time::sleep(Duration::from_millis(RESTART_POLL_MS));
    let reads = loop {
        let listed = cluster
            .admin
            .clone()
            .list_connectors(ListConnectorsRequest {
                expand_status: true,
            })
            .await;
        if listed.is_ok_and(|r| r.get_ref().connectors.len() == n) {
            break spawned.elapsed();
        }
        if spawned.elapsed() > deadline {
            bail!("the restarted control plane listed no {n} connectors within {deadline:?}");
        }
        poll().await;
    };
    let caught_up = loop {
        if std::fs::read_to_string(&log).is_ok_and(|l| l.contains(CAUGHT_UP_MESSAGE)) {
            break spawned.elapsed();
        }
        if spawned.elapsed() > deadline {
            bail!("the restarted control plane's herder did not catch up within {deadline:?}");
        }
        poll().await;
    };
    let (_, after) = snapshot(cluster).await?;
    let moved = before
        .iter()
        .filter(|(k, (_, ex))| after.get(*k).is_none_or(|(_, now)| now != ex))
        .count();
    let restart = Restart {
        stop_s: stopped.as_secs_f64(),
        reads_s: reads.as_secs_f64(),
        caught_up_s: caught_up.as_secs_f64(),
        running_after: running_count(&after, None),
        moved,
    };
    eprintln!("[bench] {restart:?}");
    Ok((restart, after))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_polls_finely_only_near_its_end_and_where_listings_are_cheap() {
        let coarse = Duration::from_millis(LIST_POLL_MS);
        let fine = Duration::from_millis(FINE_POLL_MS);
        assert_eq!(poll_interval(1_000, 0.5), coarse);
        assert_eq!(poll_interval(1_000, NEAR_END), fine);
        assert_eq!(poll_interval(100, 0.99), fine);
        assert_eq!(poll_interval(10_000, 0.99), coarse);
    }
}
