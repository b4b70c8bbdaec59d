//! Benchmark 4: 100-byte records from `file-source` to `file-sink` through the record log
//! (embedded in one executor; JetStream across two executors), beside the raw rate of the
//! log itself in the same run (the embedded log in this process; a plain async-nats
//! publisher and pull consumer for JetStream).

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use futures::StreamExt;
use wharf::pb::v1::{
    CreateConnectorRequest, DeleteConnectorRequest, GetConnectorStatusRequest, State,
};
use wharf_executor::log::{EmbeddedLog, LogRecord, RecordLog, StartPosition};

use crate::procs::Cluster;
use crate::stats::{median, quantile};

/// Bytes per record line, newline included.
pub const RECORD_BYTES: usize = 100;
/// Records written before the source starts (the throughput phase).
const BULK_RECORDS: usize = 100_000;
/// Paced phase (latency): batches, records per batch and the gap between batches.
const PACED_BATCHES: usize = 60;
const PACED_BATCH_RECORDS: usize = 20;
const PACED_GAP_MS: u64 = 25;
/// Records per append in the raw runs: about what one file-source poll reads (64 KiB).
const RAW_APPEND_BATCH: usize = 640;
/// Records per fetch in the raw runs (the executor's default fetch bound).
const RAW_FETCH_RECORDS: usize = 500;
/// Fetch wait in the raw runs, milliseconds.
const RAW_FETCH_WAIT_MS: u64 = 100;
/// Sink placements tried before giving up on a split pipeline.
const PLACEMENT_ATTEMPTS: usize = 6;
/// Poll interval while waiting for a task to run, milliseconds.
const STATUS_POLL_MS: u64 = 10;
/// How often the sink file is read, milliseconds.
const TAIL_POLL_MS: u64 = 1;
/// Upper bound on one pipeline run, seconds.
const PIPELINE_DEADLINE_S: u64 = 120;

/// One pipeline run.
#[derive(Debug, Clone, Default)]
pub struct PipelineRun {
    /// Records per second, source created to last record in the sink file.
    pub rate: f64,
    /// End-to-end latencies of the paced records, milliseconds.
    pub latencies: Vec<f64>,
    /// Executors hosting the source task and the sink task.
    pub placement: (String, String),
    /// CPU time (user + system) the cluster's executor processes spent per record in the
    /// throughput phase, microseconds; `None` when not measured.
    pub cpu_us_per_record: Option<f64>,
}

/// The source's record pipeline in the chained runs: JSON converters without schemas on
/// key and value and three transforms (docs/pipeline.md), each record parsed, changed
/// three times and written back.
pub const CHAIN: &[(&str, &str)] = &[
    (
        "key.converter",
        "org.apache.kafka.connect.json.JsonConverter",
    ),
    ("key.converter.schemas.enable", "false"),
    (
        "value.converter",
        "org.apache.kafka.connect.json.JsonConverter",
    ),
    ("value.converter.schemas.enable", "false"),
    ("transforms", "mask,insert,rename"),
    (
        "transforms.mask.type",
        "org.apache.kafka.connect.transforms.MaskField$Value",
    ),
    ("transforms.mask.fields", "p"),
    (
        "transforms.insert.type",
        "org.apache.kafka.connect.transforms.InsertField$Value",
    ),
    ("transforms.insert.static.field", "src"),
    ("transforms.insert.static.value", "bench"),
    (
        "transforms.rename.type",
        "org.apache.kafka.connect.transforms.ReplaceField$Value",
    ),
    ("transforms.rename.renames", "p:pad"),
];

/// All runs of one backend.
#[derive(Debug, Clone, Default)]
pub struct BackendResult {
    /// Pipeline runs.
    pub runs: Vec<PipelineRun>,
    /// Pipeline runs with the source's [`CHAIN`] on (embedded only).
    pub chained: Vec<PipelineRun>,
    /// Raw rates of the log, one per run (records per second).
    pub raw: Vec<f64>,
}

impl BackendResult {
    /// Median pipeline rate.
    pub fn rate(&self) -> f64 {
        median(&self.runs.iter().map(|r| r.rate).collect::<Vec<_>>())
    }
    /// Median raw rate.
    pub fn raw_rate(&self) -> f64 {
        median(&self.raw)
    }
    /// Median over runs of the p99 latency.
    pub fn p99(&self) -> f64 {
        median(
            &self
                .runs
                .iter()
                .map(|r| quantile(&r.latencies, 0.99))
                .collect::<Vec<_>>(),
        )
    }
    /// Median over runs of the p50 latency.
    pub fn p50(&self) -> f64 {
        median(
            &self
                .runs
                .iter()
                .map(|r| quantile(&r.latencies, 0.5))
                .collect::<Vec<_>>(),
        )
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// One record line of exactly [`RECORD_BYTES`] bytes carrying its write time.
fn line(t_ns: u64) -> String {
    let head = format!("{{\"t\":{t_ns},\"p\":\"");
    let pad = RECORD_BYTES - head.len() - 3; // `"}` and the newline
    format!("{head}{}\"}}\n", "x".repeat(pad))
}

/// Appends `n` record lines carrying the current time to `path`.
pub(crate) fn append_lines(path: &Path, n: usize) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let mut buf = String::with_capacity(n * RECORD_BYTES);
    let t = now_ns();
    for _ in 0..n {
        buf.push_str(&line(t));
    }
    f.write_all(buf.as_bytes())?;
    Ok(())
}

/// Reads what was appended to a file since the last call, line by line.
struct Tail {
    path: std::path::PathBuf,
    pos: u64,
    partial: String,
}

impl Tail {
    /// New complete lines.
    fn read(&mut self) -> anyhow::Result<Vec<String>> {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return Ok(Vec::new());
        };
        f.seek(SeekFrom::Start(self.pos))?;
        let mut s = String::new();
        let n = f.read_to_string(&mut s)?;
        self.pos += n as u64;
        self.partial.push_str(&s);
        let mut out = Vec::new();
        while let Some(i) = self.partial.find('\n') {
            let l: String = self.partial.drain(..=i).collect();
            out.push(l);
        }
        Ok(out)
    }
}

/// Waits until the connector's first task is RUNNING and returns its executor.
async fn running_host(cluster: &Cluster, name: &str) -> anyhow::Result<String> {
    let t = Instant::now();
    loop {
        let st = cluster
            .admin
            .clone()
            .get_connector_status(GetConnectorStatusRequest { name: name.into() })
            .await?
            .into_inner()
            .status
            .context("status")?;
        if let Some(s) = st.tasks.first().and_then(|t| t.status.as_ref())
            && s.state == State::Running as i32
        {
            return Ok(s.executor_id.clone());
        }
        if t.elapsed() > Duration::from_secs(PIPELINE_DEADLINE_S) {
            bail!("{name}: task not RUNNING");
        }
        tokio::time::sleep(Duration::from_millis(STATUS_POLL_MS)).await;
    }
}

async fn delete_wait(cluster: &Cluster, name: &str) -> anyhow::Result<()> {
    cluster
        .admin
        .clone()
        .delete_connector(DeleteConnectorRequest {
            name: name.into(),
            force: false,
            wait: true,
            wait_timeout_ms: 30_000,
            keep_resources: false,
            ..Default::default()
        })
        .await?;
    Ok(())
}

fn config(pairs: &[(&str, String)]) -> std::collections::HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// How to start the second executor of a split pipeline.
pub struct Split<'a> {
    /// Directory of the binaries.
    pub bin_dir: &'a Path,
    /// The cluster's root dir.
    pub root: &'a Path,
    /// The cluster's options.
    pub opts: &'a crate::procs::ClusterOptions,
}

/// One file-source -> file-sink run on `cluster`. With `split`, the cluster has one executor when
/// the source starts, a second one joins, and the sink task must land on it (a sink that lands on the same one is deleted
/// and created again under a new name, before any record is written).
pub async fn pipeline(
    cluster: &mut Cluster,
    dir: &Path,
    tag: &str,
    split: Option<Split<'_>>,
    chain: bool,
) -> anyhow::Result<PipelineRun> {
    let cluster_ref: &Cluster = cluster;
    std::fs::create_dir_all(dir)?;
    let src = dir.join(format!("src-{tag}.jsonl"));
    let sink = dir.join(format!("sink-{tag}.jsonl"));
    let topic = format!("bench-{tag}");
    std::fs::File::create(&src)?;
    let mut admin = cluster.admin.clone();
    let src_name = format!("src-{tag}");
    let mut src_config = config(&[
        ("connector.class", "file-source".into()),
        ("tasks.max", "1".into()),
        ("file", src.display().to_string()),
        ("topic", topic.clone()),
    ]);
    if chain {
        src_config.extend(
            CHAIN
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
    }
    admin
        .create_connector(CreateConnectorRequest {
            name: src_name.clone(),
            config: src_config,
            initial_state: 0,
        })
        .await?;
    let src_host = running_host(cluster_ref, &src_name).await?;
    if let Some(sp) = &split {
        // The second executor joins only now, so that it is the least loaded one when the
        // sink is placed.
        cluster.add_executor(sp.bin_dir, sp.root, sp.opts).await?;
    }
    let cluster: &Cluster = cluster;
    let split = split.is_some();
    let mut sink_name = String::new();
    let mut sink_host = String::new();
    for attempt in 0..PLACEMENT_ATTEMPTS {
        sink_name = format!("sink-{tag}-{attempt}");
        admin
            .create_connector(CreateConnectorRequest {
                name: sink_name.clone(),
                config: config(&[
                    ("connector.class", "file-sink".into()),
                    ("tasks.max", "1".into()),
                    ("file", sink.display().to_string()),
                    ("topics", topic.clone()),
                ]),
                initial_state: 0,
            })
            .await?;
        sink_host = running_host(cluster, &sink_name).await?;
        if !split || sink_host != src_host {
            break;
        }
        delete_wait(cluster, &sink_name).await?;
    }
    if split && sink_host == src_host {
        bail!("{tag}: the sink kept landing on the source's executor {src_host}");
    }

    let pids: Vec<u32> = cluster.executors.iter().map(|(p, _)| p.pid()).collect();
    let (rate, latencies, cpu_us_per_record) = measure_files_cpu(&src, &sink, tag, &pids).await?;
    let placement = (src_host, sink_host);
    for name in [&src_name, &sink_name] {
        delete_wait(cluster, name).await?;
    }
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(&sink);
    Ok(PipelineRun {
        rate,
        latencies,
        placement,
        cpu_us_per_record,
    })
}

/// CPU time (user + system) of a process so far, in clock ticks; `None` when
/// `/proc/<pid>/stat` cannot be read (another OS, or the process ended).
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after `) `.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second of `/proc/<pid>/stat` (`getconf CLK_TCK`; 100 on Linux).
const CLK_TCK: f64 = 100.0;

fn cpu_ticks_sum(pids: &[u32]) -> Option<u64> {
    pids.iter().map(|p| cpu_ticks(*p)).sum()
}

/// Throughput and end-to-end latency of a running file -> file pipeline (Wharf's or
/// Kafka Connect's) that reads `src` and writes `sink`, both empty. A warm-up line first
/// (written, then awaited in the sink file), so that both ends are reading before the clock
/// runs; then [`BULK_RECORDS`] lines at once, rate = records / (first arrival -> last
/// one); then the paced phase, latency = read in the sink file - the time in the line.
pub async fn measure_files(src: &Path, sink: &Path, tag: &str) -> anyhow::Result<(f64, Vec<f64>)> {
    let (rate, latencies, _) = measure_files_cpu(src, sink, tag, &[]).await?;
    Ok((rate, latencies))
}

/// [`measure_files`], and the CPU time the processes `pids` spent per record in the
/// throughput phase (microseconds; `None` without pids).
pub async fn measure_files_cpu(
    src: &Path,
    sink: &Path,
    tag: &str,
    pids: &[u32],
) -> anyhow::Result<(f64, Vec<f64>, Option<f64>)> {
    let mut tail = Tail {
        path: sink.to_path_buf(),
        pos: 0,
        partial: String::new(),
    };
    append_lines(src, 1)?;
    let t0 = Instant::now();
    while tail.read()?.is_empty() {
        if t0.elapsed() > Duration::from_secs(PIPELINE_DEADLINE_S) {
            bail!("{tag}: the warm-up line did not arrive");
        }
        tokio::time::sleep(Duration::from_millis(TAIL_POLL_MS)).await;
    }

    // Throughput: all records written at once; rate from the first to the last arrival
    // (the source's idle poll wait before it sees the file is not the pipeline's rate).
    let cpu_before = if pids.is_empty() {
        None
    } else {
        cpu_ticks_sum(pids)
    };
    append_lines(src, BULK_RECORDS)?;
    let t0 = Instant::now();
    let mut first: Option<(Instant, usize)> = None;
    let mut seen = 0usize;
    while seen < BULK_RECORDS {
        let n = tail.read()?.len();
        seen += n;
        if n > 0 && first.is_none() {
            first = Some((Instant::now(), n));
        }
        if t0.elapsed() > Duration::from_secs(PIPELINE_DEADLINE_S) {
            bail!("{tag}: only {seen} of {BULK_RECORDS} records arrived");
        }
        tokio::time::sleep(Duration::from_millis(TAIL_POLL_MS)).await;
    }
    let cpu_us_per_record = cpu_before
        .zip(cpu_ticks_sum(pids))
        .map(|(a, b)| (b.saturating_sub(a)) as f64 / CLK_TCK * 1e6 / BULK_RECORDS as f64);
    let (t_first, n_first) = first.context("no record arrived")?;
    let rate = (BULK_RECORDS - n_first) as f64 / t_first.elapsed().as_secs_f64().max(1e-6);

    // Paced phase: records written with their time; latency = seen in the sink file - t.
    let writer = {
        let src = src.to_path_buf();
        tokio::spawn(async move {
            for _ in 0..PACED_BATCHES {
                append_lines(&src, PACED_BATCH_RECORDS)?;
                tokio::time::sleep(Duration::from_millis(PACED_GAP_MS)).await;
            }
            anyhow::Ok(())
        })
    };
    let total = PACED_BATCHES * PACED_BATCH_RECORDS;
    let mut latencies = Vec::with_capacity(total);
    let t = Instant::now();
    while latencies.len() < total {
        let lines = tail.read()?;
        let now = now_ns();
        for l in lines {
            let v: serde_json::Value = serde_json::from_str(&l)
                .with_context(|| format!("{tag}: a line in the sink file is not JSON: {l:?}"))?;
            let sent = v.get("t").and_then(serde_json::Value::as_u64).unwrap_or(0);
            latencies.push(now.saturating_sub(sent) as f64 / 1e6);
        }
        if t.elapsed() > Duration::from_secs(PIPELINE_DEADLINE_S) {
            bail!("{tag}: paced records did not arrive");
        }
        tokio::time::sleep(Duration::from_millis(TAIL_POLL_MS)).await;
    }
    writer.await??;
    Ok((rate, latencies, cpu_us_per_record))
}

fn raw_records() -> Vec<LogRecord> {
    let t = now_ns();
    (0..BULK_RECORDS)
        .map(|_| LogRecord {
            key: None,
            value: line(t).trim_end().as_bytes().to_vec(),
            headers: Vec::new(),
            timestamp_ms: None,
            partition: None,
        })
        .collect()
}

/// Raw embedded log: one appender and one consumer in this process, concurrently.
pub async fn raw_embedded(dir: &Path, tag: &str) -> anyhow::Result<f64> {
    let log = Arc::new(EmbeddedLog::open(dir.join(format!("raw-{tag}"))).await?);
    let topic = format!("raw-{tag}");
    let mut consumer = log
        .consumer("raw", std::slice::from_ref(&topic), StartPosition::Earliest)
        .await?;
    let records = raw_records();
    let t = Instant::now();
    let producer = {
        let log = log.clone();
        let topic = topic.clone();
        tokio::spawn(async move {
            for chunk in records.chunks(RAW_APPEND_BATCH) {
                log.append(&topic, chunk.to_vec()).await?;
            }
            anyhow::Ok(())
        })
    };
    let mut got = 0;
    while got < BULK_RECORDS {
        let batch = consumer
            .fetch(RAW_FETCH_RECORDS, Duration::from_millis(RAW_FETCH_WAIT_MS))
            .await?;
        got += batch.len();
        let tokens: Vec<_> = batch.into_iter().map(|d| d.ack).collect();
        consumer.ack(&tokens).await?;
        if t.elapsed() > Duration::from_secs(PIPELINE_DEADLINE_S) {
            bail!("raw embedded: only {got} records");
        }
    }
    producer.await??;
    Ok(BULK_RECORDS as f64 / t.elapsed().as_secs_f64())
}

/// Raw JetStream: a plain async-nats publisher (acks awaited per batch) and a durable
/// pull consumer with explicit acks, concurrently.
pub async fn raw_jetstream(url: &str, tag: &str) -> anyhow::Result<f64> {
    use async_nats::jetstream;
    let client = async_nats::connect(url).await?;
    let js = jetstream::new(client);
    let subject = format!("benchraw.{tag}");
    let stream = js
        .get_or_create_stream(jetstream::stream::Config {
            name: format!("BENCHRAW_{tag}"),
            subjects: vec![subject.clone()],
            ..Default::default()
        })
        .await
        .map_err(|e| anyhow::anyhow!("stream: {e}"))?;
    let consumer: jetstream::consumer::PullConsumer = stream
        .get_or_create_consumer(
            "raw",
            jetstream::consumer::pull::Config {
                durable_name: Some("raw".into()),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("consumer: {e}"))?;
    let records = raw_records();
    let t = Instant::now();
    let producer = {
        let js = js.clone();
        let subject = subject.clone();
        tokio::spawn(async move {
            for chunk in records.chunks(RAW_APPEND_BATCH) {
                let mut acks = Vec::with_capacity(chunk.len());
                for r in chunk {
                    acks.push(
                        js.publish(subject.clone(), r.value.clone().into())
                            .await
                            .map_err(|e| anyhow::anyhow!("publish: {e}"))?,
                    );
                }
                for a in futures::future::join_all(
                    acks.into_iter().map(std::future::IntoFuture::into_future),
                )
                .await
                {
                    a.map_err(|e| anyhow::anyhow!("publish ack: {e}"))?;
                }
            }
            anyhow::Ok(())
        })
    };
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| anyhow::anyhow!("messages: {e}"))?;
    let mut got = 0;
    while got < BULK_RECORDS {
        let m = tokio::time::timeout(Duration::from_secs(PIPELINE_DEADLINE_S), messages.next())
            .await
            .context("raw jetstream: no message")?
            .context("raw jetstream: stream ended")?
            .map_err(|e| anyhow::anyhow!("message: {e}"))?;
        m.ack().await.map_err(|e| anyhow::anyhow!("ack: {e}"))?;
        got += 1;
    }
    producer.await??;
    let rate = BULK_RECORDS as f64 / t.elapsed().as_secs_f64();
    let _ = js.delete_stream(format!("BENCHRAW_{tag}")).await;
    Ok(rate)
}

/// Raw Kafka: a plain rdkafka producer (idempotent, `acks=all`, as Wharf's; deliveries
/// awaited per batch of 640) and a plain consumer (partition 0 from its first record, an
/// async offset commit per 500 records), concurrently, on the same broker.
pub async fn raw_kafka(broker: &str, tag: &str) -> anyhow::Result<f64> {
    use rdkafka::ClientConfig;
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
    use rdkafka::producer::{FutureProducer, FutureRecord};
    use rdkafka::{Offset, TopicPartitionList};

    let topic = format!("raw-{tag}");
    let mut base = ClientConfig::new();
    base.set("bootstrap.servers", broker);
    let admin: AdminClient<DefaultClientContext> = base.create()?;
    for r in admin
        .create_topics(
            [&NewTopic::new(&topic, 1, TopicReplication::Fixed(-1))],
            &AdminOptions::new(),
        )
        .await?
    {
        r.map_err(|(t, e)| anyhow::anyhow!("create topic {t}: {e}"))?;
    }
    let producer: FutureProducer = base
        .clone()
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .create()?;
    let consumer: StreamConsumer = base
        .clone()
        .set("group.id", format!("raw-{tag}"))
        .set("enable.auto.commit", "false")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, Offset::Beginning)?;
    consumer.assign(&tpl)?;
    let records = raw_records();
    let t = Instant::now();
    let sender = {
        let topic = topic.clone();
        tokio::spawn(async move {
            for chunk in records.chunks(RAW_APPEND_BATCH) {
                let mut deliveries = Vec::with_capacity(chunk.len());
                for r in chunk {
                    let record: FutureRecord<'_, [u8], [u8]> =
                        FutureRecord::to(&topic).payload(r.value.as_slice());
                    deliveries.push(
                        producer
                            .send_result(record)
                            .map_err(|(e, _)| anyhow::anyhow!("produce: {e}"))?,
                    );
                }
                for d in deliveries {
                    d.await?.map_err(|(e, _)| anyhow::anyhow!("deliver: {e}"))?;
                }
            }
            anyhow::Ok(())
        })
    };
    let mut got = 0;
    while got < BULK_RECORDS {
        let m = tokio::time::timeout(Duration::from_secs(PIPELINE_DEADLINE_S), consumer.recv())
            .await
            .context("raw kafka: no record")??;
        got += 1;
        if got % RAW_FETCH_RECORDS == 0 || got == BULK_RECORDS {
            consumer.commit_message(&m, CommitMode::Async)?;
        }
    }
    sender.await??;
    Ok(BULK_RECORDS as f64 / t.elapsed().as_secs_f64())
}
