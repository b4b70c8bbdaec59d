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
/// How often the OpenTelemetry SDK's batch processor exports at most, by default
/// (`OTEL_BSP_SCHEDULE_DELAY`, 5,000 ms).
const EXPORT_INTERVAL: Duration = Duration::from_secs(5);
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
    /// CPU time (user + system) of the cluster's processes over the measured deletions,
    /// background work included, divided by the deletions (ms); 0 when not measured.
    pub cpu_per_deletion: f64,
    /// Spans the OTLP receiver got over the measured deletions, divided by them (what
    /// the processes export, background calls included; the SDK exports in batches, so
    /// the last few seconds' spans may fall outside); 0 without export.
    pub spans_per_deletion: f64,
    /// The spans counted in [`Self::spans_per_deletion`] by process, name and whether
    /// each was a trace's root (over all measured deletions, not divided).
    pub spans_by_name: crate::observe::SpanCounts,
    /// Per run: from CreateConnector's answer until a status poll saw every task RUNNING
    /// (the connector the run then deletes).
    pub to_running: Vec<f64>,
    /// GetConnectorStatus polls made while waiting for RUNNING, over all runs.
    pub polls: usize,
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

/// One iteration's measurements, milliseconds.
#[derive(Debug, Clone, Copy)]
struct Sample {
    delete: f64,
    /// From CreateConnector's answer until the status poll that saw every task RUNNING.
    running: f64,
    /// GetConnectorStatus calls of that wait.
    polls: usize,
    store: f64,
    admin: f64,
    fanout: f64,
    audit: f64,
}

impl DeletionResult {
    fn push(&mut self, s: Sample) {
        self.latencies.push(s.delete);
        self.to_running.push(s.running);
        self.polls += s.polls;
        self.store.push(s.store);
        self.admin_rtt.push(s.admin);
        self.fanout.push(s.fanout);
        self.audit.push(s.audit);
        self.floors.push(s.store + s.admin + s.fanout);
        self.runs += 1;
    }
}

/// A running cluster of benchmark 1 with its clients and its floor store, measuring one
/// deletion at a time ([`Bench::once`]).
struct Bench {
    /// The observability load (receiver and scraper) of an "on" cluster; stops on drop.
    load: Option<crate::observe::Load>,
    cluster: Cluster,
    admin: wharf::pb::v1::connector_admin_client::ConnectorAdminClient<tonic::transport::Channel>,
    health: HealthClient<tonic::transport::Channel>,
    execs: Vec<ExecutorClient<tonic::transport::Channel>>,
    store: RedbStore,
    lifecycle: std::path::PathBuf,
    /// Iterations so far (names the next connector).
    next: usize,
}

impl Bench {
    /// Starts a cluster under `root`. `mtls`: every process and the benchmark's own
    /// clients speak mutual TLS (the floor's admin round trip and StopTask fan-out too,
    /// over connections made once and reused). `observed`: every process has its metrics
    /// listener scraped once a second and exports its spans to an OTLP receiver (issue
    /// 16's "on" cluster).
    async fn start(
        bin_dir: &Path,
        root: &Path,
        mtls: bool,
        observed: bool,
    ) -> anyhow::Result<Self> {
        let load = crate::observe::Load::start_if(observed)?;
        let cluster = Cluster::start(
            bin_dir,
            &root.join("cluster"),
            &ClusterOptions {
                mtls,
                otlp_endpoint: load.as_ref().map(|l| l.endpoint.clone()),
                ..ClusterOptions::plain(EXECUTORS)
            },
        )
        .await?;
        if let Some(l) = &load {
            l.scrape(cluster.metrics.clone());
        }
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
        Ok(Self {
            load,
            admin: cluster.admin.clone(),
            health: HealthClient::new(cluster.cp_channel.clone()),
            cluster,
            execs,
            store,
            lifecycle: root.join("lifecycle.jsonl"),
            next: 0,
        })
    }

    /// Spans the receiver of an "on" cluster got so far (0 without one).
    fn spans(&self) -> u64 {
        self.load
            .as_ref()
            .map_or(0, |l| l.spans.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Waits until the processes of an "on" cluster have exported what they buffered:
    /// the SDK's batch processor sends every [`EXPORT_INTERVAL`] (or 512 spans), and the
    /// measured deletions take about 3 s, so counting right after them missed most of
    /// their spans. Nothing without a receiver.
    async fn spans_settled(&self) {
        if self.load.is_some() {
            tokio::time::sleep(EXPORT_INTERVAL + Duration::from_secs(1)).await;
        }
    }

    /// Spans the receiver of an "on" cluster got so far, by process and name.
    fn spans_by_name(&self) -> crate::observe::SpanCounts {
        self.load.as_ref().map_or_else(Default::default, |l| {
            l.by_name
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone()
        })
    }

    /// Creates a connector, waits until it runs, measures the floor, then deletes it
    /// (DeleteConnector(wait)), timed.
    async fn once(&mut self) -> anyhow::Result<Sample> {
        let i = self.next;
        self.next += 1;
        let name = format!("del-{i}");
        self.admin
            .create_connector(CreateConnectorRequest {
                name: name.clone(),
                config: idle_source_config(&self.lifecycle, TASKS),
                initial_state: 0,
            })
            .await?;
        let start = Instant::now();
        let mut polls = 0;
        loop {
            polls += 1;
            let st = self
                .admin
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
        let running = ms(start.elapsed());

        // Floor, in this run: store commits, admin round trip, StopTask fan-out.
        let store = store_commits(&self.store, i, &self.lifecycle)?;
        let audit = audit_commit(&self.store, i)?;
        let t = Instant::now();
        self.health
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await?;
        let admin = ms(t.elapsed());
        let t = Instant::now();
        let calls = (0..TASKS).map(|task| {
            let mut c = self.execs[task as usize % self.execs.len()].clone();
            async move {
                c.stop_task(StopTaskRequest {
                    task: Some(TaskId {
                        connector: "floor-probe".into(),
                        task,
                    }),
                    // `false`: a destructive stop from the bench (not the control
                    // plane) is refused for its missing deletion token before the
                    // lookup this probe times.
                    connector_deleted: false,
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
        let fanout = ms(t.elapsed());

        let t = Instant::now();
        let resp = self
            .admin
            .delete_connector(DeleteConnectorRequest {
                name: name.clone(),
                force: false,
                wait: true,
                wait_timeout_ms: DELETE_WAIT_TIMEOUT_MS,
                keep_resources: false,
                ..Default::default()
            })
            .await?
            .into_inner();
        let delete = ms(t.elapsed());
        if !resp.deleted {
            bail!("{name}: deletion did not finish: {:?}", resp.status);
        }
        Ok(Sample {
            delete,
            running,
            polls,
            store,
            admin,
            fanout,
            audit,
        })
    }
}

/// Runs benchmark 1 on one cluster (see [`Bench::start`] for `mtls`) with `runs` measured
/// deletions after [`WARMUP_RUNS`].
pub async fn run(
    bin_dir: &Path,
    root: &Path,
    runs: usize,
    mtls: bool,
) -> anyhow::Result<DeletionResult> {
    let mut b = Bench::start(bin_dir, root, mtls, false).await?;
    for _ in 0..WARMUP_RUNS {
        b.once().await?;
    }
    let mut out = DeletionResult::default();
    for _ in 0..runs {
        out.push(b.once().await?);
    }
    Ok(out)
}

/// Benchmark 1 with observability off and on (issue 16), fairly: both clusters run side
/// by side for the whole measurement and their deletions interleave, one on each in turn,
/// the first of each pair alternating (off-on, on-off, ...), so that load drift on the
/// shared machine falls on both alike. The "on" cluster's background work (scrapes,
/// export) runs during the "off" deletions too: what differs is the observability on the
/// path of the measured calls. `runs` measured deletions each, after [`WARMUP_RUNS`] each.
pub async fn run_paired(
    bin_dir: &Path,
    root: &Path,
    runs: usize,
) -> anyhow::Result<(DeletionResult, DeletionResult)> {
    let mut off = Bench::start(bin_dir, &root.join("off"), false, false).await?;
    let mut on = Bench::start(bin_dir, &root.join("on"), false, true).await?;
    for _ in 0..WARMUP_RUNS {
        off.once().await?;
        on.once().await?;
    }
    let (mut r_off, mut r_on) = (DeletionResult::default(), DeletionResult::default());
    // The warm-up's spans arrive with the next export: count from after it.
    on.spans_settled().await;
    let spans = on.spans();
    let by_name = on.spans_by_name();
    let cpu = (off.cluster.cpu_ms(), on.cluster.cpu_ms());
    for i in 0..runs {
        if i % 2 == 0 {
            r_off.push(off.once().await?);
            r_on.push(on.once().await?);
        } else {
            r_on.push(on.once().await?);
            r_off.push(off.once().await?);
        }
    }
    r_off.cpu_per_deletion = (off.cluster.cpu_ms() - cpu.0) / runs as f64;
    r_on.cpu_per_deletion = (on.cluster.cpu_ms() - cpu.1) / runs as f64;
    on.spans_settled().await;
    r_on.spans_per_deletion = (on.spans() - spans) as f64 / runs as f64;
    r_on.spans_by_name = crate::observe::span_counts_since(&by_name, &on.spans_by_name());
    Ok((r_off, r_on))
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
    let d = DeletionRecord::seal(
        &rec,
        Vec::new(),
        wharf_control_plane::model::DeletionMode::Cleanup,
        0,
    );
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
