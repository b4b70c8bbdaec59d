//! Benchmark 1: DeleteConnector(wait) of one connector with 8 tasks on 4 executors, beside
//! its floor measured in the same run: the two store commits a deletion needs (record it,
//! then remove everything) through the control plane's own `RedbStore`, one admin gRPC
//! round trip and one parallel StopTask fan-out to the 4 executors. Also the audit trail's
//! commit (issue 14), which every mutating admin call adds, on the same store.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use wharf::ids::ConnectorName;
use wharf::pb::v1::executor_client::ExecutorClient;
use wharf::pb::v1::{
    CreateConnectorRequest, DeleteConnectorRequest, GetConnectorStatusRequest, State,
    StopTaskRequest, TaskId,
};
use wharf_control_plane::model::{
    AuditEntry, AuditRetention, ConnectorRecord, ConnectorSpec, DeletionRecord, Instance,
    TargetState,
};
use wharf_control_plane::store::seal::Sealer;
use wharf_control_plane::store::{RedbStore, StateStore};

use crate::procs::{Cluster, ClusterOptions};
use crate::stats::{median, ms, quantile};

/// Tasks of the deleted connector.
const TASKS: u32 = 8;
/// Executor processes.
const EXECUTORS: usize = 4;
/// Deletions before the measured ones (connections and caches warm up).
const WARMUP_RUNS: usize = 3;
/// How long a poll of the test source blocks, in milliseconds: tasks stay idle.
pub const IDLE_POLL_BLOCK_MS: u64 = 3_600_000;
/// Poll interval while waiting for RUNNING, in milliseconds.
const RUNNING_POLL_MS: u64 = 2;
/// Upper bound on waiting for RUNNING, in milliseconds.
const RUNNING_DEADLINE_MS: u64 = 30_000;
/// Wait bound passed to DeleteConnector, in milliseconds.
const DELETE_WAIT_TIMEOUT_MS: u32 = 30_000;

/// What benchmark 1 measured (milliseconds).
#[derive(Debug, Clone, Default)]
pub struct DeletionResult {
    /// Measured deletions.
    pub runs: usize,
    /// DeleteConnector(wait) latencies.
    pub latencies: Vec<f64>,
    /// Floor per run (store + admin RTT + fan-out).
    pub floors: Vec<f64>,
    /// Store part of the floor per run.
    pub store: Vec<f64>,
    /// Admin round trip per run.
    pub admin_rtt: Vec<f64>,
    /// StopTask fan-out per run.
    pub fanout: Vec<f64>,
    /// The audit trail's commit per run (one more store commit of every mutating admin
    /// call, issue 14), on the same store; not part of the floor.
    pub audit: Vec<f64>,
}

impl DeletionResult {
    /// p50 of the latency over p50 of the floor.
    pub fn ratio(&self) -> f64 {
        median(&self.latencies) / median(&self.floors)
    }
    /// p50 latency.
    pub fn p50(&self) -> f64 {
        median(&self.latencies)
    }
    /// p99 latency.
    pub fn p99(&self) -> f64 {
        quantile(&self.latencies, 0.99)
    }
}

/// Config of an idle `test-source` with `tasks` tasks.
pub fn idle_source_config(
    lifecycle: &Path,
    tasks: u32,
) -> std::collections::HashMap<String, String> {
    [
        ("connector.class", "test-source".to_string()),
        ("tasks.max", tasks.to_string()),
        ("lifecycle.path", lifecycle.display().to_string()),
        ("test.poll.block.ms", IDLE_POLL_BLOCK_MS.to_string()),
        ("test.records.per.poll", "0".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// True when the connector instance and `tasks` tasks are RUNNING.
fn all_running(status: &wharf::pb::v1::ConnectorStatus, tasks: usize) -> bool {
    let running = State::Running as i32;
    status
        .connector
        .as_ref()
        .is_some_and(|c| c.state == running)
        && status.tasks.len() == tasks
        && status
            .tasks
            .iter()
            .all(|t| t.status.as_ref().is_some_and(|s| s.state == running))
}

/// Runs benchmark 1 with `runs` measured deletions. `mtls`: every process and the
/// benchmark's own clients speak mutual TLS (the floor's admin round trip and StopTask
/// fan-out too, over connections made once and reused). `observed`: every process has
/// its metrics listener scraped once a second and exports its spans to an OTLP receiver
/// (issue 16's "on" run).
pub async fn run(
    bin_dir: &Path,
    root: &Path,
    runs: usize,
    mtls: bool,
    observed: bool,
) -> anyhow::Result<DeletionResult> {
    let load = if observed {
        Some(crate::observe::Load::start().await?)
    } else {
        None
    };
    let cluster = Cluster::start(
        bin_dir,
        &root.join("cluster"),
        &ClusterOptions {
            executors: EXECUTORS,
            lease_ms: 10_000,
            heartbeat_ms: 1_000,
            nats_url: None,
            mtls,
            otlp_endpoint: load.as_ref().map(|l| l.endpoint.clone()),
        },
    )
    .await?;
    if let Some(l) = &load {
        l.scrape(cluster.metrics.clone());
    }
    let lifecycle = root.join("lifecycle.jsonl");
    let mut admin = cluster.admin.clone();
    let mut health = HealthClient::new(cluster.cp_channel.clone());
    let mut execs = Vec::new();
    for (_, addr) in &cluster.executors {
        // Only the control plane's certificate may call an executor.
        let tls = cluster.pki.as_ref().map(|p| (p, "control-plane"));
        execs.push(ExecutorClient::new(crate::procs::connect(addr, tls).await?));
    }
    let store_dir = root.join("floor-store");
    std::fs::create_dir_all(&store_dir)?;
    let store = RedbStore::open(
        &store_dir.join("state.redb"),
        Sealer::load_or_create(&store_dir)?,
    )?;

    let mut out = DeletionResult::default();
    for i in 0..(WARMUP_RUNS + runs) {
        let name = format!("del-{i}");
        admin
            .create_connector(CreateConnectorRequest {
                name: name.clone(),
                config: idle_source_config(&lifecycle, TASKS),
                initial_state: 0,
            })
            .await?;
        let start = Instant::now();
        loop {
            let st = admin
                .get_connector_status(GetConnectorStatusRequest { name: name.clone() })
                .await?
                .into_inner()
                .status
                .context("status missing")?;
            if all_running(&st, TASKS as usize) {
                break;
            }
            if start.elapsed() > Duration::from_millis(RUNNING_DEADLINE_MS) {
                bail!("{name} not RUNNING in time: {st:?}");
            }
            tokio::time::sleep(Duration::from_millis(RUNNING_POLL_MS)).await;
        }

        // Floor, in this run: store commits, admin round trip, StopTask fan-out.
        let store_ms = store_commits(&store, i, &lifecycle)?;
        let audit_ms = audit_commit(&store, i)?;
        let t = Instant::now();
        health
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await?;
        let admin_ms = ms(t.elapsed());
        let t = Instant::now();
        let calls = (0..TASKS).map(|task| {
            let mut c = execs[task as usize % execs.len()].clone();
            async move {
                c.stop_task(StopTaskRequest {
                    task: Some(TaskId {
                        connector: "floor-probe".into(),
                        task,
                    }),
                    connector_deleted: true,
                    generation: 1,
                    timeout_ms: 0,
                    ..Default::default()
                })
                .await
            }
        });
        for r in futures::future::join_all(calls).await {
            // NOT_FOUND is the expected answer: a full round trip through the service.
            if let Err(s) = r
                && s.code() != tonic::Code::NotFound
            {
                bail!("StopTask probe: {s}");
            }
        }
        let fanout_ms = ms(t.elapsed());

        let t = Instant::now();
        let resp = admin
            .delete_connector(DeleteConnectorRequest {
                name: name.clone(),
                force: false,
                wait: true,
                wait_timeout_ms: DELETE_WAIT_TIMEOUT_MS,
                keep_resources: false,
            })
            .await?
            .into_inner();
        let delete_ms = ms(t.elapsed());
        if !resp.deleted {
            bail!("{name}: deletion did not finish: {:?}", resp.status);
        }
        if i >= WARMUP_RUNS {
            out.latencies.push(delete_ms);
            out.store.push(store_ms);
            out.admin_rtt.push(admin_ms);
            out.fanout.push(fanout_ms);
            out.audit.push(audit_ms);
            out.floors.push(store_ms + admin_ms + fanout_ms);
        }
    }
    out.runs = runs;
    Ok(out)
}

/// Times the two commits of a deletion (record it sealed, then remove it all) on the
/// control plane's own store type, for a connector shaped like the benchmarked one.
fn store_commits(store: &RedbStore, i: usize, lifecycle: &Path) -> anyhow::Result<f64> {
    let name = format!("floor-{i}");
    let config: BTreeMap<String, String> =
        idle_source_config(lifecycle, TASKS).into_iter().collect();
    let spec = ConnectorSpec {
        name: ConnectorName::parse(&name).map_err(|e| anyhow::anyhow!("{e:?}"))?,
        plugin: "test-source".into(),
        tasks_max: NonZeroU32::new(TASKS).context("tasks")?,
        config: config.clone(),
    };
    let mut rec = ConnectorRecord::new(&spec, TargetState::Started);
    rec.task_configs = vec![config; TASKS as usize];
    rec.tasks = (0..TASKS)
        .map(|t| Instance {
            executor: Some(format!("exec-{}", t % EXECUTORS as u32 + 1)),
            generation: 1,
            ..Instance::unassigned()
        })
        .collect();
    store.create_connector(&rec)?;
    let rec = store.connector(&name)?.context("floor record")?;
    let d = DeletionRecord::seal(&rec, Vec::new(), true, 0);
    let t = Instant::now();
    if !store.start_deletion(&rec, &d)? {
        bail!("floor: start_deletion refused");
    }
    let first = t.elapsed();
    let rev = store.deletion(&name)?.context("floor deletion")?.revision;
    let t = Instant::now();
    if !store.finish_deletion(&name, rev)? {
        bail!("floor: finish_deletion refused");
    }
    Ok(ms(first + t.elapsed()))
}

/// Times the audit trail's commit of one DeleteConnector (an entry as the admin guard
/// writes it, with the default retention's pruning check) on the control plane's store.
fn audit_commit(store: &RedbStore, i: usize) -> anyhow::Result<f64> {
    let time_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let entry = AuditEntry {
        id: AuditEntry::id_for(time_ms, i as u64),
        time_ms,
        principal: "bench".into(),
        role: "operator".into(),
        auth_method: "token".into(),
        rpc: "DeleteConnector".into(),
        connector: format!("floor-{i}"),
        deletion_mode: "cleanup".into(),
        outcome: "OK".into(),
        message: String::new(),
        forwarded_by: String::new(),
    };
    let t = Instant::now();
    store.append_audit(&entry, &AuditRetention::default(), time_ms)?;
    Ok(ms(t.elapsed()))
}
