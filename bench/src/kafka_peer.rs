//! Kafka Connect beside Wharf on the same Kafka-protocol broker (issues 43 and 42), in the
//! same run as the Kafka data-plane rows:
//!
//! - **File pipeline**: Kafka Connect's FileStreamSource -> Kafka -> FileStreamSink on a
//!   Kafka Connect 3.9 distributed worker, measured exactly as Wharf's file-source ->
//!   Kafka -> file-sink ([`crate::dataplane::measure_files`]: throughput of a bulk write,
//!   end-to-end latency of paced lines).
//! - **FileStreamSource in a JVM**: the same Connect connector class run by Wharf's JVM
//!   plugin host (jvm-host/, `--plugin-processes`, Wharf's record log on the broker) and
//!   by a Kafka Connect worker: records/s into the topic (its end offset, read from the
//!   broker), time from the create call to the first record in the topic, and the peak
//!   resident memory (VmHWM) of each JVM, both started with the same JVM flags.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use wharf::pb::v1::{CreateConnectorRequest, DeleteConnectorRequest};

use crate::dataplane::{self, PipelineRun};
use crate::peer::connect::{
    self, PeerEnv, Worker, WorkerOptions, call, connector_running, join_waits, overlap_ms,
};
use crate::procs::{Cluster, ClusterOptions};

/// Kafka Connect's file connectors.
pub const FILE_SOURCE: &str = "org.apache.kafka.connect.file.FileStreamSourceConnector";
pub const FILE_SINK: &str = "org.apache.kafka.connect.file.FileStreamSinkConnector";
/// Lines in the file a source run reads (100 bytes each, as the data-plane records).
pub const SOURCE_RECORDS: usize = 100_000;
/// Bound on one run's phases, seconds.
const DEADLINE_S: u64 = 120;
/// Interval between reads of the topic's end offset, milliseconds.
const WATERMARK_POLL_MS: u64 = 2;
/// Interval between status reads, milliseconds.
const STATUS_POLL_MS: u64 = 10;

/// Worker settings of these workloads beyond the peer's (`connect::worker_properties`):
/// the sink's consumer joins its group with a 3 s session timeout (tansu holds a
/// JoinGroup about half of it; the Java client's default 45 s would hold it 23 s), and a
/// sink's offsets are committed every second (`offset.flush.interval.ms`, already set).
pub const FILE_WORKER_PROPS: [&str; 2] = [
    "consumer.session.timeout.ms=3000",
    "consumer.heartbeat.interval.ms=1000",
];

/// One FileStreamSource run: records/s into the topic and the time to its first record.
#[derive(Debug, Clone, Default)]
pub struct SourceRun {
    /// Records per second, first record in the topic -> last one.
    pub rate: f64,
    /// Create call -> first record in the topic, ms.
    pub first_ms: f64,
    /// Kafka Connect only: its worker's JoinGroup wait inside `first_ms`, ms.
    pub join_ms: f64,
    /// Records in the topic at the end ([`SOURCE_RECORDS`] unless it stalled).
    pub records: usize,
}

/// FileStreamSource through Wharf's JVM host and in Kafka Connect.
#[derive(Debug, Clone, Default)]
pub struct Jvm {
    /// Runs through Wharf's JVM host.
    pub wharf: Vec<SourceRun>,
    /// Runs in Kafka Connect.
    pub connect: Vec<SourceRun>,
    /// Peak RSS (VmHWM) of Wharf's JVM host after its runs, MiB.
    pub wharf_hwm_mib: f64,
    /// Peak RSS (VmHWM) of the Kafka Connect worker after its runs, MiB.
    pub connect_hwm_mib: f64,
    /// RSS of each right after start (idle), MiB.
    pub wharf_idle_mib: f64,
    /// RSS of the worker once ready (idle), MiB.
    pub connect_idle_mib: f64,
}

/// Everything measured here; a workload that failed or could not run is a note.
#[derive(Debug, Clone, Default)]
pub struct KafkaPeer {
    /// Kafka Connect's FileStreamSource -> Kafka -> FileStreamSink runs.
    pub files: Vec<PipelineRun>,
    /// FileStreamSource in Wharf's JVM host and in Kafka Connect.
    pub jvm: Option<Jvm>,
    /// What did not run or failed, and why.
    pub notes: Vec<String>,
    /// Kafka Connect's version (from the peer env).
    pub connect_version: String,
    /// The JVM host's Connect jars (from the peer env).
    pub host_version: String,
}

/// Runs both workloads against `broker`, `runs` runs each. Never fails: what cannot run
/// is a note.
pub async fn run(
    bin_dir: &Path,
    root: &Path,
    broker: &str,
    env: Result<PeerEnv, String>,
    runs: usize,
) -> KafkaPeer {
    let env = match env {
        Ok(e) => e,
        Err(why) => {
            return KafkaPeer {
                notes: vec![format!("Kafka Connect not run: {why}")],
                ..KafkaPeer::default()
            };
        }
    };
    let mut out = KafkaPeer {
        connect_version: env.connect_version.clone(),
        host_version: env.host_version.clone(),
        ..KafkaPeer::default()
    };
    match connect_files(&env, broker, &root.join("connect-files"), runs).await {
        Ok(r) => out.files = r,
        Err(e) => out.notes.push(format!(
            "Kafka Connect's FileStreamSource -> FileStreamSink did not finish: {e:#}"
        )),
    }
    match jvm(bin_dir, &env, broker, &root.join("jvm"), runs).await {
        Ok(j) => out.jvm = Some(j),
        Err(e) => out.notes.push(format!(
            "FileStreamSource in Wharf's JVM host and Kafka Connect did not finish: {e:#}"
        )),
    }
    for n in &out.notes {
        eprintln!("[bench] kafka peer: {n}");
    }
    out
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(DEADLINE_S)
}

/// A worker with the file connectors on its classpath and [`FILE_WORKER_PROPS`].
async fn file_worker(
    env: &PeerEnv,
    broker: &str,
    dir: &Path,
    group: &str,
) -> anyhow::Result<Worker> {
    let jar = env
        .file_jar
        .as_ref()
        .context("PEER_FILE_JAR missing from the peer env file (rerun scripts/peer-setup)")?;
    let env = PeerEnv {
        classpath: format!("{}:{}", env.classpath, jar.display()),
        ..env.clone()
    };
    let o = WorkerOptions {
        broker: broker.to_owned(),
        group: group.to_owned(),
        rebalance_delay_ms: 3_000,
    };
    let extra: Vec<String> = FILE_WORKER_PROPS.iter().map(|s| (*s).to_owned()).collect();
    Worker::start_with(&env, dir, &o, &extra).await
}

/// Creates `name` on `worker` and waits until it and its one task are RUNNING.
async fn create_running(worker: &Worker, name: &str, config: Value) -> anyhow::Result<()> {
    let body = json!({ "name": name, "config": config });
    let (status, text, _) =
        call(&worker.rest, "POST", "/connectors", Some(&body), deadline()).await?;
    if status != 201 {
        bail!("POST /connectors {name}: {status} {text}");
    }
    let end = deadline();
    loop {
        let (status, text, _) = call(
            &worker.rest,
            "GET",
            &format!("/connectors/{name}/status"),
            None,
            end,
        )
        .await?;
        if status == 200
            && serde_json::from_str::<Value>(&text).is_ok_and(|v| connector_running(&v, 1))
        {
            return Ok(());
        }
        if Instant::now() > end {
            bail!("{name} not RUNNING on Kafka Connect: {text}");
        }
        tokio::time::sleep(Duration::from_millis(STATUS_POLL_MS)).await;
    }
}

async fn delete(worker: &Worker, name: &str) -> anyhow::Result<()> {
    let (status, text, _) = call(
        &worker.rest,
        "DELETE",
        &format!("/connectors/{name}"),
        None,
        deadline(),
    )
    .await?;
    if status != 204 && status != 200 {
        bail!("DELETE /connectors/{name}: {status} {text}");
    }
    Ok(())
}

/// Creates `topic` with one partition (Wharf's default for a topic it creates).
async fn create_topic(broker: &str, topic: &str) -> anyhow::Result<()> {
    use rdkafka::ClientConfig;
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .create()?;
    for r in admin
        .create_topics(
            [&NewTopic::new(topic, 1, TopicReplication::Fixed(-1))],
            &AdminOptions::new(),
        )
        .await?
    {
        r.map_err(|(t, e)| anyhow::anyhow!("create topic {t}: {e}"))?;
    }
    Ok(())
}

/// FileStreamSource -> Kafka -> FileStreamSink on one Kafka Connect worker.
async fn connect_files(
    env: &PeerEnv,
    broker: &str,
    dir: &Path,
    runs: usize,
) -> anyhow::Result<Vec<PipelineRun>> {
    let worker = file_worker(env, broker, &dir.join("worker"), "bench-files").await?;
    let files = dir.join("files");
    std::fs::create_dir_all(&files)?;
    let mut out = Vec::new();
    for r in 0..runs {
        let tag = format!("cf{r}");
        let (src, sink) = (
            files.join(format!("src-{tag}.jsonl")),
            files.join(format!("sink-{tag}.jsonl")),
        );
        std::fs::File::create(&src)?;
        std::fs::File::create(&sink)?;
        let topic = format!("connect-files-{r}");
        create_topic(broker, &topic).await?;
        let (src_name, sink_name) = (format!("fs-src-{r}"), format!("fs-sink-{r}"));
        create_running(
            &worker,
            &src_name,
            json!({ "connector.class": FILE_SOURCE, "tasks.max": "1",
                    "file": src.display().to_string(), "topic": topic }),
        )
        .await?;
        create_running(
            &worker,
            &sink_name,
            json!({ "connector.class": FILE_SINK, "tasks.max": "1",
                    "file": sink.display().to_string(), "topics": topic }),
        )
        .await?;
        let (rate, latencies) = dataplane::measure_files(&src, &sink, &tag).await?;
        eprintln!(
            "[bench] kafka connect files run {r}: {rate:.0}/s p50 {:.1} ms p99 {:.1} ms",
            crate::stats::quantile(&latencies, 0.5),
            crate::stats::quantile(&latencies, 0.99)
        );
        out.push(PipelineRun {
            rate,
            latencies,
            placement: (worker.id.clone(), worker.id.clone()),
            cpu_us_per_record: None,
        });
        delete(&worker, &src_name).await?;
        delete(&worker, &sink_name).await?;
    }
    Ok(out)
}

/// How long a topic's end offset may stay the same, once records came, before a source run
/// counts as finished short of its records (seen once on Kafka Connect: 99,970 of 100,000
/// records in the topic after 120 s), seconds.
const STALL_S: u64 = 5;

/// Waits, from `t0`, until `topic` holds a first record and then `n` records (or its end
/// offset stayed the same for [`STALL_S`]), reading its end offset every
/// [`WATERMARK_POLL_MS`]. Returns (t0 -> first record, records seen then, t0 -> the last
/// record seen, records seen in all).
fn watch_topic(
    broker: &str,
    topic: &str,
    n: usize,
    t0: Instant,
) -> anyhow::Result<(Duration, usize, Duration, usize)> {
    use rdkafka::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .create()?;
    let mut first: Option<(Duration, usize)> = None;
    let mut last = (Duration::ZERO, 0usize);
    loop {
        let (_, high) = c.fetch_watermarks(topic, 0, Duration::from_secs(10))?;
        let high = usize::try_from(high).unwrap_or(0);
        if high > 0 && first.is_none() {
            first = Some((t0.elapsed(), high));
        }
        if high != last.1 {
            last = (t0.elapsed(), high);
        }
        if let Some((f, at)) = first {
            let stalled = t0.elapsed() - last.0 > Duration::from_secs(STALL_S);
            if high >= n || stalled {
                return Ok((f, at, last.0, high));
            }
        }
        if t0.elapsed() > Duration::from_secs(DEADLINE_S) {
            bail!("{topic}: {high} of {n} records after {DEADLINE_S} s");
        }
        std::thread::sleep(Duration::from_millis(WATERMARK_POLL_MS));
    }
}

/// Rate and time to first record from [`watch_topic`]'s figures.
fn source_run(first: Duration, at_first: usize, last: Duration, n: usize) -> SourceRun {
    let span = (last - first).as_secs_f64().max(1e-6);
    SourceRun {
        rate: (n - at_first.min(n)) as f64 / span,
        first_ms: first.as_secs_f64() * 1e3,
        join_ms: 0.0,
        records: n,
    }
}

/// A source file of [`SOURCE_RECORDS`] lines.
fn source_file(dir: &Path, tag: &str) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let p = dir.join(format!("src-{tag}.jsonl"));
    std::fs::File::create(&p)?;
    dataplane::append_lines(&p, SOURCE_RECORDS)?;
    Ok(p)
}

/// Peak and current resident memory of `pid` (VmHWM, VmRSS), MiB.
fn mem_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// The children of `parent` whose command is `java`.
fn java_children(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // `pid (comm) state ppid ...`
            let Some((comm, rest)) = stat.split_once(" (").and_then(|(_, r)| r.rsplit_once(") "))
            else {
                return false;
            };
            comm == "java"
                && rest
                    .split_whitespace()
                    .nth(1)
                    .and_then(|p| p.parse::<u32>().ok())
                    == Some(parent)
        })
        .collect()
}

/// FileStreamSource through Wharf's JVM host and in Kafka Connect, `runs` each.
async fn jvm(
    bin_dir: &Path,
    env: &PeerEnv,
    broker: &str,
    dir: &Path,
    runs: usize,
) -> anyhow::Result<Jvm> {
    let host_cp = env
        .host_classpath
        .as_ref()
        .context("PEER_HOST_CLASSPATH missing from the peer env file (scripts/peer-setup could not compile jvm-host/)")?;
    let mut out = Jvm::default();

    // Kafka Connect: a worker of its own, so that its peak memory is this workload's.
    let worker = file_worker(env, broker, &dir.join("connect-worker"), "bench-jvm").await?;
    out.connect_idle_mib = mem_mib(worker.proc.pid()).1;
    for r in 0..runs {
        let topic = format!("jvm-connect-{r}");
        create_topic(broker, &topic).await?;
        let src = source_file(&dir.join("files"), &format!("c{r}"))?;
        let name = format!("jvm-src-{r}");
        let body = json!({ "name": name, "config": source_config(&src, &topic, true) });
        let t0 = Instant::now();
        let from_ms = connect::now_ms();
        let (status, text, _) =
            call(&worker.rest, "POST", "/connectors", Some(&body), deadline()).await?;
        if status != 201 {
            bail!("POST /connectors {name}: {status} {text}");
        }
        let (b, t) = (broker.to_owned(), topic.clone());
        let (first, at, last, got) =
            tokio::task::spawn_blocking(move || watch_topic(&b, &t, SOURCE_RECORDS, t0)).await??;
        let mut run = source_run(first, at, last, got);
        let waits = join_waits(&worker.log());
        run.join_ms = overlap_ms(&waits, from_ms, from_ms + run.first_ms as i64);
        eprintln!(
            "[bench] FileStreamSource in Kafka Connect run {r}: {:.0}/s, first record {:.0} ms (JoinGroup {:.0} ms)",
            run.rate, run.first_ms, run.join_ms
        );
        out.connect.push(run);
        delete(&worker, &name).await?;
    }
    out.connect_hwm_mib = mem_mib(worker.proc.pid()).0;
    drop(worker);

    // Wharf: one executor whose --plugin-processes runs the JVM host with the same flags.
    let spec = dir.join("plugin-processes.toml");
    let mut args: Vec<String> = connect::JVM_FLAGS.iter().map(|s| (*s).to_owned()).collect();
    args.extend([
        "-cp".into(),
        host_cp.clone(),
        "wharf.host.PluginHost".into(),
        FILE_SOURCE.into(),
    ]);
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        &spec,
        format!(
            "[[process]]\nname = \"connect-file\"\ncommand = {:?}\nargs = {}\ndescribe_timeout_ms = 60000\n",
            env.java.display().to_string(),
            serde_json::to_string(&args)?
        ),
    )?;
    let opts = ClusterOptions {
        record_log: Some(format!("kafka://{broker}")),
        executor_args: vec!["--plugin-processes".into(), spec.display().to_string()],
        ..ClusterOptions::plain(1)
    };
    let cluster = Cluster::start(bin_dir, &dir.join("wharf"), &opts).await?;
    let exec_pid = cluster.executors[0].0.pid();
    let host = *java_children(exec_pid)
        .first()
        .context("no JVM host process under the executor")?;
    out.wharf_idle_mib = mem_mib(host).1;
    for r in 0..runs {
        let topic = format!("jvm-wharf-{r}");
        create_topic(broker, &topic).await?;
        let src = source_file(&dir.join("files"), &format!("w{r}"))?;
        let name = format!("jvm-src-{r}");
        let config = source_config(&src, &topic, false)
            .as_object()
            .context("config")?
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
            .collect();
        let t0 = Instant::now();
        cluster
            .admin
            .clone()
            .create_connector(CreateConnectorRequest {
                name: name.clone(),
                config,
                initial_state: 0,
            })
            .await?;
        let (b, t) = (broker.to_owned(), topic.clone());
        let (first, at, last, got) =
            tokio::task::spawn_blocking(move || watch_topic(&b, &t, SOURCE_RECORDS, t0)).await??;
        let run = source_run(first, at, last, got);
        eprintln!(
            "[bench] FileStreamSource in Wharf's JVM host run {r}: {:.0}/s, first record {:.0} ms",
            run.rate, run.first_ms
        );
        out.wharf.push(run);
        cluster
            .admin
            .clone()
            .delete_connector(DeleteConnectorRequest {
                name,
                wait: true,
                wait_timeout_ms: 30_000,
                ..Default::default()
            })
            .await?;
    }
    // The same JVM took every run (a new one would have restarted the peak).
    let now = java_children(exec_pid);
    if now.first() != Some(&host) {
        bail!("the JVM host process changed during the runs ({host} -> {now:?})");
    }
    out.wharf_hwm_mib = mem_mib(host).0;
    Ok(out)
}

/// FileStreamSource's config: `file` into `topic`, one task. Wharf's JVM host converts
/// keys and values with Connect's JsonConverter with schemas (docs/kafka-connect-connectors.md);
/// on Kafka Connect (`connect`) the connector is given the same converters, so that both
/// write the same bytes.
fn source_config(file: &Path, topic: &str, connect: bool) -> Value {
    let mut v = json!({
        "connector.class": FILE_SOURCE,
        "tasks.max": "1",
        "file": file.display().to_string(),
        "topic": topic,
    });
    if connect {
        for (k, x) in [
            (
                "key.converter",
                "org.apache.kafka.connect.json.JsonConverter",
            ),
            (
                "value.converter",
                "org.apache.kafka.connect.json.JsonConverter",
            ),
            ("key.converter.schemas.enable", "true"),
            ("value.converter.schemas.enable", "true"),
        ] {
            v[k] = Value::String(x.into());
        }
    }
    v
}

/// The Kafka subsection of the data-plane section: Wharf's pipeline beside the raw client
/// (`k`) and Kafka Connect's (`peer`), then FileStreamSource in both JVMs.
pub fn render(
    k: &crate::dataplane::BackendResult,
    tuned: Option<&crate::dataplane::BackendResult>,
    peer: Option<&KafkaPeer>,
) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let options = std::env::var("WHARF_BENCH_KAFKA_OPTIONS").unwrap_or_default();
    let raw = k.raw_rate();
    let ratio = k.rate() / raw;
    let _ = writeln!(
        s,
        "### Through Kafka\n\nThe same pipeline with `--record-log kafka://BROKER{options}` on a tansu 0.6.0 broker (in-memory storage; a Kafka-protocol stand-in, not Apache Kafka: docs/kafka.md), source and sink tasks on two executors: once with Wharf's default client settings (librdkafka's `fetch.wait.max.ms`, 500 ms, as the Java consumer's `fetch.max.wait.ms`), once with `{}` (the executors' `--record-log` passthrough), the fetch wait Kafka Connect's workers get here, because tansu does not answer a waiting fetch when records arrive, where Apache Kafka answers it as soon as a record is there (bench/NOTES.md). Raw rate in the same run: a plain rdkafka producer (idempotent, `acks=all`, deliveries awaited per batch of 640) and a plain consumer (partition 0, an offset commit per 500 records) concurrently on the same broker. Kafka Connect in the same run, on the same broker: FileStreamSource -> Kafka -> FileStreamSink (connect-file 3.9.0) on one distributed worker (`connect-distributed.sh`'s JVM flags; JsonConverter without schemas; `consumer.fetch.max.wait.ms=10`, `consumer.session.timeout.ms=3000`, `offset.flush.interval.ms=1000`), measured the same way (one warm-up line awaited in the sink file first, then the bulk write, then the paced lines). Topics of one partition. Median of the runs.\n",
        crate::KAFKA_FETCH_WAIT_OPTION.trim_start_matches('?')
    );
    let _ = writeln!(
        s,
        "| pipeline | rec/s | / raw rdkafka | e2e p50 ms | e2e p99 ms | target |\n| --- | ---: | ---: | ---: | ---: | --- |"
    );
    let _ = writeln!(
        s,
        "| raw rdkafka producer + consumer | {raw:.0} | 1.00x | | | |"
    );
    let _ = writeln!(
        s,
        "| Wharf: file-source -> Kafka -> file-sink, two executors, default settings | {:.0} | {ratio:.2}x | {:.1} | {:.1} | >= 0.8x raw: {} |",
        k.rate(),
        k.p50(),
        k.p99(),
        crate::met(ratio >= 0.8)
    );
    // The row compared with Kafka Connect: the one with the same fetch wait.
    let wharf = match tuned.filter(|t| !t.runs.is_empty()) {
        Some(t) => {
            let ratio = t.rate() / raw;
            let _ = writeln!(
                s,
                "| Wharf: the same, `{}` | {:.0} | {ratio:.2}x | {:.1} | {:.1} | >= 0.8x raw: {} |",
                crate::KAFKA_FETCH_WAIT_OPTION.trim_start_matches('?'),
                t.rate(),
                t.p50(),
                t.p99(),
                crate::met(ratio >= 0.8)
            );
            t
        }
        None => k,
    };
    let files = peer.map(|p| crate::dataplane::BackendResult {
        runs: p.files.clone(),
        ..Default::default()
    });
    match files.as_ref().filter(|f| !f.runs.is_empty()) {
        Some(f) => {
            let _ = writeln!(
                s,
                "| Kafka Connect: FileStreamSource -> Kafka -> FileStreamSink, one worker | {:.0} | {:.2}x | {:.1} | {:.1} | |",
                f.rate(),
                f.rate() / raw,
                f.p50(),
                f.p99()
            );
            let ahead = wharf.rate() > f.rate();
            let _ = writeln!(
                s,
                "\nWharf (same fetch wait) / Kafka Connect: {:.2}x the records/s, {:.2}x the p50 latency, {:.2}x the p99. Target: Wharf ahead: {}. With Wharf's default settings: {:.2}x the records/s, {:.2}x the p50, {:.2}x the p99.",
                wharf.rate() / f.rate(),
                wharf.p50() / f.p50(),
                wharf.p99() / f.p99(),
                crate::met(ahead),
                k.rate() / f.rate(),
                k.p50() / f.p50(),
                k.p99() / f.p99()
            );
        }
        None => {
            let _ = writeln!(
                s,
                "| Kafka Connect: FileStreamSource -> Kafka -> FileStreamSink | not run | | | | |"
            );
        }
    }
    let runs = |rs: &[PipelineRun]| {
        rs.iter()
            .map(|r| {
                format!(
                    "{:.0}/s p50 {:.1} p99 {:.1}",
                    r.rate,
                    crate::stats::quantile(&r.latencies, 0.5),
                    crate::stats::quantile(&r.latencies, 0.99)
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let _ = writeln!(
        s,
        "\nRuns: raw {}; Wharf, default settings {}; Wharf, fetch wait 10 ms {}{}",
        k.raw
            .iter()
            .map(|r| format!("{r:.0}/s"))
            .collect::<Vec<_>>()
            .join(", "),
        runs(&k.runs),
        tuned.map(|t| runs(&t.runs)).unwrap_or_default(),
        files
            .as_ref()
            .map(|f| format!("; Kafka Connect {}", runs(&f.runs)))
            .unwrap_or_default()
    );
    let Some(p) = peer else {
        return s;
    };
    if let Some(j) = &p.jvm {
        let med = |v: &[SourceRun], f: fn(&SourceRun) -> f64| {
            crate::stats::median(&v.iter().map(f).collect::<Vec<_>>())
        };
        let (wr, cr) = (med(&j.wharf, |r| r.rate), med(&j.connect, |r| r.rate));
        let (wf, cf) = (
            med(&j.wharf, |r| r.first_ms),
            med(&j.connect, |r| r.first_ms),
        );
        let cj = med(&j.connect, |r| r.join_ms);
        let _ = writeln!(
            s,
            "\n### FileStreamSource in Wharf's JVM host and in Kafka Connect\n\nThe same connector class, `FileStreamSourceConnector`, one task, reading a file of {SOURCE_RECORDS} lines of 100 bytes written before the create call, into a topic of one partition on the same tansu broker: through Wharf's JVM plugin host (jvm-host/, Connect {}; one executor with `--plugin-processes` and `--record-log kafka://`) and in a Kafka Connect worker of its own (Connect {}). Both JVMs run with `connect-distributed.sh`'s flags (-Xms256M -Xmx2G, G1), both write keys and values with JsonConverter with schemas (the same bytes). rec/s = records from the first in the topic to the last (the topic's end offset, read every {WATERMARK_POLL_MS} ms); first record = create call until the topic holds one (on Kafka Connect it includes the rebalance the new connector starts, which tansu holds in JoinGroup: given beside it); memory = the JVM's peak resident set (VmHWM) after its runs, and its RSS idle after start. Median of the runs.\n",
            p.host_version, p.connect_version
        );
        let _ = writeln!(
            s,
            "| figure | Wharf's JVM host | Kafka Connect | Wharf / Kafka Connect |\n| --- | ---: | ---: | ---: |\n| FileStreamSource rec/s into the topic | {wr:.0} | {cr:.0} | {:.2}x |\n| create until the first record is in the topic, ms | {wf:.0} | {cf:.0} | {:.3} |\n| - of it, Kafka Connect's JoinGroup wait, ms | | {cj:.0} | |\n| first record without the JoinGroup wait, ms | {wf:.0} | {:.0} | {:.3} |\n| peak RSS of the JVM (VmHWM), MiB | {:.1} | {:.1} | {:.2}x |\n| RSS of the JVM idle after start, MiB | {:.1} | {:.1} | {:.2}x |",
            wr / cr,
            wf / cf,
            cf - cj,
            wf / (cf - cj).max(1e-9),
            j.wharf_hwm_mib,
            j.connect_hwm_mib,
            j.wharf_hwm_mib / j.connect_hwm_mib,
            j.wharf_idle_mib,
            j.connect_idle_mib,
            j.wharf_idle_mib / j.connect_idle_mib
        );
        let list = |v: &[SourceRun]| {
            v.iter()
                .map(|r| {
                    format!(
                        "{:.0}/s first {:.0} ms{}",
                        r.rate,
                        r.first_ms,
                        if r.records < SOURCE_RECORDS {
                            format!(
                                " ({} of {SOURCE_RECORDS} records: the topic stopped growing)",
                                r.records
                            )
                        } else {
                            String::new()
                        }
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        let _ = writeln!(
            s,
            "\nRuns: Wharf's JVM host {}; Kafka Connect {}. Wharf's JVM host is one JVM for the executor's plugin process (it hosts the connector; the executor, a separate process, writes to Kafka); Kafka Connect's worker is one JVM for the whole runtime (REST, herder, producer, connector).",
            list(&j.wharf),
            list(&j.connect)
        );
    }
    for n in &p.notes {
        let _ = writeln!(s, "\n{n}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_run_counts_from_its_first_record() {
        let r = source_run(
            Duration::from_millis(500),
            1_000,
            Duration::from_millis(1_500),
            101_000,
        );
        assert!((r.rate - 100_000.0).abs() < 1.0, "{r:?}");
        assert!((r.first_ms - 500.0).abs() < 1e-9);
    }
}
