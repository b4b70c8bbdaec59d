//! `wharf-bench`: the benchmarks of issue 8 against real processes on loopback (a real
//! control plane, real executor processes, a test-owned nats-server), writing
//! `BENCHMARKS.md`. Run it through `scripts/bench`, which builds the release binaries first.
//!
//! Usage: see [`USAGE`].
//! Every figure is the median of several runs; every ratio compares two figures measured
//! in the same run of this program.

mod dataplane;
mod deletion;
mod kafka_peer;
mod observe;
mod peer;
mod procs;
mod scale;
mod stats;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::stats::{median, quantile};

/// Measured deletions in benchmark 1's mTLS run.
const DELETION_RUNS: usize = 30;
/// Measured deletions on each of the off and on clusters of benchmark 1 (interleaved).
const OBSERVED_DELETION_RUNS: usize = 400;
/// Runs per data-plane backend.
const DATAPLANE_RUNS: usize = 3;
/// Runs of the 1,000 x 10 scale step with observability off, and as many with it on
/// (the rebalance is one more run). Twenty pairs: a run's time on this shared 2-core VM
/// varies by about 9% (coefficient of variation), so that the on / off ratio of nine
/// pairs' medians moved by 0.02 to 0.05 between sets run minutes apart; with twenty its
/// 90% interval is about +-6% (printed beside it). A pair takes about 15 s.
const SCALE_RUNS: usize = 20;

/// The target scale step and the curve around it (connectors; 10 tasks each).
const SCALE_TARGET: usize = 1_000;
const SCALE_CURVE: [usize; 2] = [100, 300];
/// The steps above the target, each run [`LARGE_RUNS`] times for medians (issue 19); the
/// largest ([`LARGE_TARGET`]) restarts the control plane and kills one executor in each
/// run.
const LARGE_STEPS: [usize; 2] = [3_000, 10_000];
/// Runs of each of [`LARGE_STEPS`].
const LARGE_RUNS: usize = 3;
/// Issue 19's target step.
const LARGE_TARGET: usize = 10_000;
/// Issue 19's targets at [`LARGE_TARGET`]: create and delete, s; control-plane RSS, MiB;
/// cost per connector over the target step's; the restarted control plane serving
/// reads and caught up, s; a rebalance beyond the lease, s.
const LARGE_CREATE_S: f64 = 10.0;
const LARGE_DELETE_S: f64 = 10.0;
const LARGE_CP_RSS_MIB: f64 = 512.0;
const LARGE_PER_CONNECTOR_RATIO: f64 = 1.3;
const RESTART_READS_S: f64 = 2.0;
const RESTART_CAUGHT_UP_S: f64 = 10.0;
const REBALANCE_BEYOND_LEASE_S: f64 = 2.0;
/// Executors killed one after the other in the rebalance run (one measurement each).
const REBALANCE_KILLS: usize = 3;
/// How long the rebalance run waits for its connectors to be deleted after the kill, s.
const REBALANCE_DELETE_DEADLINE_S: f64 = 30.0;
/// Seconds to start and stop a 10-executor cluster, for the budget's predictions.
const SETUP_S: f64 = 5.0;
/// Default time budget of the whole run, seconds (the build comes on top; eleven more
/// 1,000 x 10 pairs take about 200 s more).
const DEFAULT_BUDGET_S: u64 = 1_250;

/// Command line.
const USAGE: &str = "usage: wharf-bench --bin-dir DIR --out FILE [--budget-s N] [--only deletion,dataplane,embedded,kafka,scale,peer] [--no-mtls] [--scale-once] [--scale-sizes N,N] [--peer-env FILE | --peer-missing REASON] [--keep]";

struct Args {
    bin_dir: PathBuf,
    out: PathBuf,
    budget: Duration,
    /// Sections to run (all when empty): deletion, dataplane, scale, peer; `embedded` runs the
    /// data plane's embedded rows alone.
    only: Vec<String>,
    /// The Kafka Connect peer's env file (written by scripts/peer-setup).
    peer_env: Option<PathBuf>,
    /// Why the Kafka Connect peer's parts are missing (scripts/bench passes what
    /// scripts/peer-setup said); the peer section then says so.
    peer_missing: Option<String>,
    /// Keep the temp dir (process logs) instead of removing it.
    keep: bool,
    /// Deletion: skip the mTLS run (only the observability off/on pairs), for repeated
    /// before/after comparisons of observability (issue 16).
    no_mtls: bool,
    /// Scale: only one run of the target step (no curve, no rebalance), for quick
    /// before/after comparisons while working on the control plane.
    scale_once: bool,
    /// Scale: one run at each of these sizes (connectors x 10), printed and not written
    /// to the output file, for profiling and before/after comparisons (issue 19).
    scale_sizes: Vec<usize>,
}

impl Args {
    fn wants(&self, section: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == section)
    }
}

/// The arguments, `None` for `--help`.
fn args() -> anyhow::Result<Option<Args>> {
    let mut bin_dir = None;
    let mut out = None;
    let mut budget = Duration::from_secs(DEFAULT_BUDGET_S);
    let mut only = Vec::new();
    let mut keep = false;
    let mut no_mtls = false;
    let mut scale_once = false;
    let mut scale_sizes = Vec::new();
    let mut peer_env = None;
    let mut peer_missing = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--bin-dir" => bin_dir = it.next().map(PathBuf::from),
            "--out" => out = it.next().map(PathBuf::from),
            "--budget-s" => {
                budget = Duration::from_secs(it.next().context("--budget-s N")?.parse()?)
            }
            "--only" => {
                only = it
                    .next()
                    .context("--only deletion,dataplane,embedded,kafka,scale,peer")?
                    .split(',')
                    .map(str::to_owned)
                    .collect()
            }
            "--help" | "-h" => return Ok(None),
            "--keep" => keep = true,
            "--no-mtls" => no_mtls = true,
            "--peer-env" => peer_env = it.next().map(PathBuf::from),
            "--peer-missing" => peer_missing = it.next(),
            "--scale-once" => scale_once = true,
            "--scale-sizes" => {
                for n in it.next().context("--scale-sizes N,N")?.split(',') {
                    scale_sizes.push(n.parse().context("--scale-sizes N,N")?);
                }
            }
            other => anyhow::bail!("unknown argument {other:?}; {USAGE}"),
        }
    }
    Ok(Some(Args {
        bin_dir: bin_dir.context("--bin-dir DIR is required")?,
        out: out.context("--out FILE is required")?,
        budget,
        only,
        peer_env,
        peer_missing,
        keep,
        no_mtls,
        scale_once,
        scale_sizes,
    }))
}

fn sh(cmd: &str) -> String {
    std::process::Command::new("sh")
        .args(["-c", cmd])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn met(ok: bool) -> &'static str {
    if ok { "**met**" } else { "**missed**" }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // A usage mistake is a message and exit code 2, never an error with a backtrace.
    let args = match args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return Ok(());
        }
        Err(e) => {
            eprintln!("wharf-bench: {e:#}");
            std::process::exit(2);
        }
    };
    let started = Instant::now();
    let tmp = tempfile::Builder::new().prefix("wharf-bench-").tempdir()?;
    let root = tmp.path().to_path_buf();
    let remaining = |started: Instant| args.budget.as_secs_f64() - started.elapsed().as_secs_f64();

    if !args.scale_sizes.is_empty() {
        let r = scale_sizes(&args, &root).await;
        if args.keep {
            eprintln!("[bench] process logs kept in {}", tmp.keep().display());
        }
        return r;
    }
    let mut r = Results {
        load_start: sh("cut -d' ' -f1 /proc/loadavg"),
        ..Results::default()
    };
    if args.wants("deletion") {
        eprintln!(
            "[bench] 1/4 deletion latency, observability off and on side by side, interleaved ({OBSERVED_DELETION_RUNS} runs each)"
        );
        let (del, on) = deletion::run_paired(
            &args.bin_dir,
            &root.join("deletion"),
            OBSERVED_DELETION_RUNS,
        )
        .await?;
        eprintln!(
            "[bench] deletion p50 {:.2} ms p99 {:.2} ms floor {:.2} ms ratio {:.2}x",
            del.p50(),
            del.p99(),
            median(&del.floors),
            del.ratio()
        );
        eprintln!(
            "[bench] observed deletion p50 {:.2} ms p99 {:.2} ms (p50 on/off {:.3}, p99 on/off {:.3})",
            on.p50(),
            on.p99(),
            on.p50() / del.p50(),
            on.p99() / del.p99()
        );
        eprintln!(
            "[bench] CPU per deletion (cluster processes, background included): off {:.2} ms, on {:.2} ms; spans exported per deletion {:.1}",
            del.cpu_per_deletion, on.cpu_per_deletion, on.spans_per_deletion
        );
        // Untraced calls on both clusters: what the on cluster costs besides the spans.
        eprintln!(
            "[bench] untraced round trips p50, off / on: health check {:.3} / {:.3} ms, StopTask fan-out {:.3} / {:.3} ms",
            median(&del.admin_rtt),
            median(&on.admin_rtt),
            median(&del.fanout),
            median(&on.fanout)
        );
        eprintln!(
            "[bench] create -> all RUNNING p50 off {:.2} ms, on {:.2} ms; status polls per run off {:.1}, on {:.1}",
            median(&del.to_running),
            median(&on.to_running),
            del.polls as f64 / del.runs as f64,
            on.polls as f64 / on.runs as f64
        );
        if let Ok(path) = std::env::var("WHARF_BENCH_RAW") {
            write_pairs(&path, &del, &on)?;
        }
        for ((service, name, root), n) in &on.spans_by_name {
            eprintln!(
                "[bench]   spans per deletion: {:6.2} {service} {name:?}{}",
                *n as f64 / on.runs as f64,
                if *root { " (root)" } else { "" }
            );
        }
        r.deletion = Some(del);
        if !args.no_mtls {
            eprintln!("[bench] 1c/4 deletion latency with mTLS ({DELETION_RUNS} runs)");
            let del = deletion::run(
                &args.bin_dir,
                &root.join("deletion-mtls"),
                DELETION_RUNS,
                true,
            )
            .await?;
            eprintln!(
                "[bench] deletion with mTLS p50 {:.2} ms p99 {:.2} ms floor {:.2} ms ratio {:.2}x",
                del.p50(),
                del.p99(),
                median(&del.floors),
                del.ratio()
            );
            r.deletion_mtls = Some(del);
        }
        r.deletion_observed = Some(on);
    }
    if args.only.iter().any(|s| s == "embedded") && !args.wants("dataplane") {
        eprintln!("[bench] data plane, embedded only, {DATAPLANE_RUNS} runs");
        r.embedded = Some(run_embedded(&args, &root).await?);
    }
    if args.wants("dataplane") {
        eprintln!("[bench] 4/4 data plane (embedded, JetStream), {DATAPLANE_RUNS} runs each");
        r.embedded = Some(run_embedded(&args, &root).await?);
        r.jetstream = Some(run_jetstream(&args, &root).await?);
    }
    if args.wants("dataplane") || args.wants("kafka") {
        eprintln!("[bench] data plane through Kafka (tansu), {DATAPLANE_RUNS} runs");
        let (k, tuned, peer) = run_kafka(&args, &root).await?;
        r.kafka = Some(k);
        r.kafka_tuned = Some(tuned);
        r.kafka_peer = Some(peer);
    }
    if args.wants("scale") {
        run_scale(&args, &root, started, &remaining, &mut r).await?;
    }
    if args.wants("peer") {
        let env = match &args.peer_missing {
            Some(why) => Err(why.clone()),
            None => peer::env_from(args.peer_env.as_ref()),
        };
        r.peer = Some(match env {
            Ok(env) => {
                eprintln!("[bench] 5/5 Kafka Connect beside Wharf");
                peer::run(&args.bin_dir, &root.join("peer"), env).await
            }
            Err(why) => {
                eprintln!("[bench] Kafka Connect beside Wharf skipped: {why}");
                peer::PeerResults {
                    skipped: Some(why),
                    ..peer::PeerResults::default()
                }
            }
        });
    }
    r.took = started.elapsed();

    std::fs::write(&args.out, render(&r))
        .with_context(|| format!("write {}", args.out.display()))?;
    eprintln!(
        "[bench] wrote {} after {:.0} s",
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    if args.keep {
        eprintln!("[bench] process logs kept in {}", tmp.keep().display());
    }
    Ok(())
}

/// Writes the interleaved deletions' latencies and their connectors' create -> RUNNING
/// times, one pair a line (the off one ran first in even pairs), for paired comparisons
/// across runs
/// (`WHARF_BENCH_RAW=FILE`, bench/NOTES.md).
fn write_pairs(
    path: &str,
    off: &deletion::DeletionResult,
    on: &deletion::DeletionResult,
) -> anyhow::Result<()> {
    let mut csv = String::from("i,off_ms,on_ms,off_running_ms,on_running_ms\n");
    for i in 0..off.runs.min(on.runs) {
        let _ = writeln!(
            csv,
            "{i},{:.4},{:.4},{:.4},{:.4}",
            off.latencies[i], on.latencies[i], off.to_running[i], on.to_running[i]
        );
    }
    std::fs::write(path, csv).with_context(|| format!("write {path}"))
}

/// Everything measured in one run.
#[derive(Default)]
struct Results {
    deletion: Option<deletion::DeletionResult>,
    /// The same benchmark with mutual TLS everywhere (issue 14).
    deletion_mtls: Option<deletion::DeletionResult>,
    /// The same deletion benchmark with metrics and trace export on.
    deletion_observed: Option<deletion::DeletionResult>,
    embedded: Option<dataplane::BackendResult>,
    jetstream: Option<dataplane::BackendResult>,
    /// File source -> Kafka (a tansu broker) -> file sink, beside raw rdkafka.
    kafka: Option<dataplane::BackendResult>,
    /// Kafka Connect's file pipeline and FileStreamSource in Wharf's JVM host and in Kafka
    /// Connect, on the same broker as `kafka`.
    kafka_peer: Option<kafka_peer::KafkaPeer>,
    /// `kafka` with [`KAFKA_FETCH_WAIT_OPTION`].
    kafka_tuned: Option<dataplane::BackendResult>,
    target: Vec<scale::ScalePoint>,
    /// The target step's runs with metrics scraped and spans exported (issue 16), each
    /// paired with the off run of the same index (the order alternates).
    target_observed: Vec<scale::ScalePoint>,
    curve: Vec<scale::ScalePoint>,
    /// Runs of [`LARGE_STEPS`], in the order they ran.
    large: Vec<scale::ScalePoint>,
    rebalance: Option<scale::ScalePoint>,
    curve_notes: Vec<String>,
    took: Duration,
    /// 1-minute load average when the run began.
    load_start: String,
    /// Kafka Connect beside Wharf (issue 19).
    peer: Option<peer::PeerResults>,
}

async fn run_embedded(
    args: &Args,
    root: &std::path::Path,
) -> anyhow::Result<dataplane::BackendResult> {
    let mut out = dataplane::BackendResult::default();
    let dir = root.join("dp-embedded");
    let mut cluster = procs::Cluster::start(
        &args.bin_dir,
        &dir.join("cluster"),
        &procs::ClusterOptions::plain(1),
    )
    .await?;
    for r in 0..DATAPLANE_RUNS {
        out.raw
            .push(dataplane::raw_embedded(&dir, &format!("e{r}")).await?);
        out.runs.push(
            dataplane::pipeline(
                &mut cluster,
                &dir.join("files"),
                &format!("e{r}"),
                None,
                false,
            )
            .await?,
        );
        out.chained.push(
            dataplane::pipeline(
                &mut cluster,
                &dir.join("files"),
                &format!("c{r}"),
                None,
                true,
            )
            .await?,
        );
        eprintln!(
            "[bench] embedded run {r}: raw {:.0}/s pipeline {:.0}/s, with JSON converters and 3 transforms {:.0}/s; executor CPU per record {:.2} us without, {:.2} us with",
            out.raw[r],
            out.runs[r].rate,
            out.chained[r].rate,
            out.runs[r].cpu_us_per_record.unwrap_or(f64::NAN),
            out.chained[r].cpu_us_per_record.unwrap_or(f64::NAN)
        );
    }
    Ok(out)
}

async fn run_jetstream(
    args: &Args,
    root: &std::path::Path,
) -> anyhow::Result<dataplane::BackendResult> {
    let mut out = dataplane::BackendResult::default();
    let dir = root.join("dp-jetstream");
    let nats = procs::NatsServer::start(&dir.join("nats")).await?;
    let opts = procs::ClusterOptions {
        nats_url: Some(nats.url.clone()),
        ..procs::ClusterOptions::plain(1)
    };
    for r in 0..DATAPLANE_RUNS {
        out.raw
            .push(dataplane::raw_jetstream(&nats.url, &format!("j{r}")).await?);
        // A fresh cluster per run: the source starts on exec-1, then exec-2 joins and
        // takes the sink.
        let croot = dir.join(format!("cluster-{r}"));
        let mut cluster = procs::Cluster::start(&args.bin_dir, &croot, &opts).await?;
        let split = dataplane::Split {
            bin_dir: &args.bin_dir,
            root: &croot,
            opts: &opts,
        };
        out.runs.push(
            dataplane::pipeline(
                &mut cluster,
                &dir.join("files"),
                &format!("j{r}"),
                Some(split),
                false,
            )
            .await?,
        );
        eprintln!(
            "[bench] jetstream run {r}: raw {:.0}/s pipeline {:.0}/s placement {:?}",
            out.raw[r], out.runs[r].rate, out.runs[r].placement
        );
    }
    Ok(out)
}

/// The `--record-log` of the Kafka runs: `kafka://BROKER`, plus `WHARF_BENCH_KAFKA_OPTIONS`
/// (`?consumer.fetch.wait.max.ms=...`, docs/kafka.md) when set, for before/after
/// comparisons of client settings (bench/NOTES.md).
fn kafka_record_log(broker: &str) -> String {
    let options = std::env::var("WHARF_BENCH_KAFKA_OPTIONS").unwrap_or_default();
    format!("kafka://{broker}{options}")
}

/// What the Kafka rows give Wharf's consumers beside the default: the fetch wait Kafka
/// Connect's workers get in this bench (`consumer.fetch.max.wait.ms=10`), since tansu
/// answers a fetch only when its wait ran out (bench/NOTES.md, docs/kafka.md).
pub const KAFKA_FETCH_WAIT_OPTION: &str = "?consumer.fetch.wait.max.ms=10";

/// Wharf's Kafka pipeline with its default client settings and with
/// [`KAFKA_FETCH_WAIT_OPTION`], beside the raw client, then Kafka Connect on the same
/// broker.
async fn run_kafka(
    args: &Args,
    root: &std::path::Path,
) -> anyhow::Result<(
    dataplane::BackendResult,
    dataplane::BackendResult,
    kafka_peer::KafkaPeer,
)> {
    let mut out = dataplane::BackendResult::default();
    let mut tuned = dataplane::BackendResult::default();
    let dir = root.join("dp-kafka");
    let kafka = procs::Tansu::start(&dir.join("tansu")).await?;
    let opts = procs::ClusterOptions {
        record_log: Some(kafka_record_log(&kafka.broker)),
        ..procs::ClusterOptions::plain(1)
    };
    let tuned_opts = procs::ClusterOptions {
        record_log: Some(format!("kafka://{}{KAFKA_FETCH_WAIT_OPTION}", kafka.broker)),
        ..procs::ClusterOptions::plain(1)
    };
    for r in 0..DATAPLANE_RUNS {
        out.raw
            .push(dataplane::raw_kafka(&kafka.broker, &format!("k{r}")).await?);
        // Alternating which goes first, so that neither always runs on a warmer broker.
        let mut order = [(false, &opts), (true, &tuned_opts)];
        if r % 2 == 1 {
            order.reverse();
        }
        for (is_tuned, opts) in order {
            let tag = format!("{}{r}", if is_tuned { "kt" } else { "k" });
            // As for JetStream: the source starts on exec-1, exec-2 joins and takes the sink.
            let croot = dir.join(format!("cluster-{tag}"));
            let mut cluster = procs::Cluster::start(&args.bin_dir, &croot, opts).await?;
            let split = dataplane::Split {
                bin_dir: &args.bin_dir,
                root: &croot,
                opts,
            };
            let run =
                dataplane::pipeline(&mut cluster, &dir.join("files"), &tag, Some(split), false)
                    .await?;
            eprintln!(
                "[bench] kafka run {r}{}: pipeline {:.0}/s p50 {:.1} ms p99 {:.1} ms placement {:?}",
                if is_tuned {
                    " with the fetch wait of Kafka Connect's workers"
                } else {
                    ""
                },
                run.rate,
                crate::stats::quantile(&run.latencies, 0.5),
                crate::stats::quantile(&run.latencies, 0.99),
                run.placement
            );
            if is_tuned {
                tuned.runs.push(run);
            } else {
                out.runs.push(run);
            }
        }
        eprintln!("[bench] kafka run {r}: raw {:.0}/s", out.raw[r]);
    }
    tuned.raw = out.raw.clone();
    if std::env::var("WHARF_BENCH_KAFKA_CONNECT").as_deref() == Ok("skip") {
        return Ok((out, tuned, kafka_peer::KafkaPeer::default()));
    }
    let env = match &args.peer_missing {
        Some(why) => Err(why.clone()),
        None => peer::env_from(args.peer_env.as_ref()),
    };
    eprintln!("[bench] Kafka Connect's file connectors and the JVM host on the same broker");
    let peer = kafka_peer::run(
        &args.bin_dir,
        &dir.join("peer"),
        &kafka.broker,
        env,
        DATAPLANE_RUNS,
    )
    .await;
    Ok((out, tuned, peer))
}

/// `--scale-sizes`: one run per size, each printed as one line; nothing is written.
async fn scale_sizes(args: &Args, root: &std::path::Path) -> anyhow::Result<()> {
    let budget = args.budget;
    for &n in &args.scale_sizes {
        let load = sh("cut -d' ' -f1-3 /proc/loadavg");
        // The target of issue 19 runs as in the full bench: a restart and one kill.
        let top = n == LARGE_TARGET;
        let step = scale::Step {
            connectors: n,
            executors: scale::EXECUTORS,
            kills: usize::from(top),
            restart: top,
        };
        let p = scale::run_step(
            &args.bin_dir,
            &root.join(format!("sizes-{n}")),
            step,
            budget,
            budget,
            false,
        )
        .await?;
        if let Some(x) = &p.restart {
            println!("scale {n} x 10: {x:?}");
        }
        for k in &p.rebalances {
            println!("scale {n} x 10: {k:?}");
        }
        println!(
            "scale {n} x 10: create {:.2} s, delete {:.2} s (left {}), control-plane RSS {:.0} MiB (idle {:.0}), load before {load}, after {}",
            p.create_s,
            p.delete_s,
            p.delete_left,
            p.cp_rss_mib,
            p.cp_rss_idle_mib,
            sh("cut -d' ' -f1-3 /proc/loadavg")
        );
    }
    Ok(())
}

async fn run_scale(
    args: &Args,
    root: &std::path::Path,
    started: Instant,
    remaining: &dyn Fn(Instant) -> f64,
    r: &mut Results,
) -> anyhow::Result<()> {
    if args.scale_once {
        eprintln!(
            "[bench] scale {SCALE_TARGET} x 10 (1 run off, 1 run with observability on, --scale-once)"
        );
        for observed in [false, true] {
            let left = remaining(started).max(20.0);
            let half = Duration::from_secs_f64(left / 4.0);
            let p = scale::run(
                &args.bin_dir,
                &root.join(format!("scale-{SCALE_TARGET}-once-{}", on_off(observed))),
                SCALE_TARGET,
                0,
                half,
                half,
                observed,
            )
            .await;
            record_target(r, observed, p, 0);
        }
        return Ok(());
    }
    // Smaller steps first, so that the curve and a rebalance exist even when the target
    // step does not fit the budget; then the target step, the rebalance, the larger steps.
    for n in SCALE_CURVE.into_iter().filter(|n| *n < SCALE_TARGET) {
        curve_step(args, root, started, remaining, r, n).await;
    }
    let deadline = |left: f64| Duration::from_secs_f64(left.max(10.0));
    // The rebalance before the target runs (it is one run, they are a median): at the
    // target size when it fits half the budget left, else at the largest smaller step.
    // Predicted from the largest smaller step, linearly (a lower bound).
    let left = remaining(started);
    let predicted = r
        .curve
        .iter()
        .max_by_key(|p| p.connectors)
        .map_or(f64::INFINITY, |p| {
            p.create_s * SCALE_TARGET as f64 / p.connectors as f64
                + SETUP_S
                + REBALANCE_DELETE_DEADLINE_S
                + 15.0 * (REBALANCE_KILLS as f64)
        });
    let base = if predicted < left / 2.0 {
        Some(SCALE_TARGET)
    } else {
        r.curve.iter().map(|p| p.connectors).max()
    };
    match base {
        Some(n) => {
            eprintln!("[bench] 3/4 rebalance: {n} x 10, {REBALANCE_KILLS} kills (1 run)");
            match scale::run(
                &args.bin_dir,
                &root.join("rebalance"),
                n,
                REBALANCE_KILLS,
                deadline(left / 2.0),
                Duration::from_secs_f64(REBALANCE_DELETE_DEADLINE_S),
                false,
            )
            .await
            {
                Ok(p) => {
                    eprintln!("[bench] {p:?}");
                    r.rebalance = Some(p);
                }
                Err(e) => {
                    r.curve_notes
                        .push(format!("the rebalance run did not finish: {e}"));
                    eprintln!(
                        "[bench] {}",
                        r.curve_notes.last().map_or("", String::as_str)
                    );
                }
            }
        }
        None => r
            .curve_notes
            .push("the rebalance run did not fit the time budget".into()),
    }
    eprintln!(
        "[bench] 2+3/4 scale {SCALE_TARGET} x 10 ({SCALE_RUNS} runs off, {SCALE_RUNS} with observability on, alternating)"
    );
    for i in 0..SCALE_RUNS {
        let left = remaining(started);
        let last = r
            .target
            .last()
            .map_or(0.0, |p| 2.0 * (p.create_s + p.delete_s + SETUP_S));
        if i > 0 && last > left {
            eprintln!("[bench] budget: stopping the {SCALE_TARGET} x 10 runs after {i}");
            r.curve_notes.push(format!(
                "only {i} runs of {SCALE_TARGET} x 10 fitted the time budget"
            ));
            break;
        }
        // Off then on, then on then off, ...: both medians see the same load drift, and
        // neither side always runs second, on a machine the last run left warm.
        let mut failed = false;
        let order = if i % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for observed in order {
            let p = scale::run(
                &args.bin_dir,
                &root.join(format!("scale-{SCALE_TARGET}-{i}-{}", on_off(observed))),
                SCALE_TARGET,
                0,
                deadline(left / 6.0),
                deadline(left / 6.0),
                observed,
            )
            .await;
            failed |= !record_target(r, observed, p, i);
        }
        if failed {
            break;
        }
    }
    for n in LARGE_STEPS {
        for i in 0..LARGE_RUNS {
            if !large_step(args, root, started, remaining, r, n, i).await {
                break;
            }
        }
    }
    Ok(())
}

/// Run `i` of the large step `n` x 10 (with a control-plane restart and one kill at
/// [`LARGE_TARGET`]), unless the prediction says it would not fit the budget left;
/// false when it did not run or did not finish.
async fn large_step(
    args: &Args,
    root: &std::path::Path,
    started: Instant,
    remaining: &dyn Fn(Instant) -> f64,
    r: &mut Results,
    n: usize,
    i: usize,
) -> bool {
    let left = remaining(started);
    let top = n == LARGE_TARGET;
    // Predicted from an earlier run of this size, else linearly from the largest step
    // below it (a lower bound: the cost per connector does not shrink with n).
    let measured = |p: &scale::ScalePoint| {
        p.create_s
            + p.delete_s
            + p.restart.as_ref().map_or(0.0, |x| x.stop_s + x.caught_up_s)
            + p.rebalances.iter().map(|x| x.seconds).sum::<f64>()
    };
    let same = r
        .large
        .iter()
        .filter(|p| p.connectors == n)
        .map(measured)
        .fold(0.0, f64::max);
    let below = r
        .large
        .iter()
        .chain(r.target.iter())
        .chain(r.curve.iter())
        .filter(|p| p.connectors < n)
        .max_by_key(|p| p.connectors)
        .map_or(f64::INFINITY, |p| {
            measured(p) * n as f64 / p.connectors as f64
        });
    let extra = if top { 20.0 } else { 0.0 };
    let predicted = if same > 0.0 { same } else { below + extra } + SETUP_S;
    if predicted > left {
        r.curve_notes.push(format!(
            "run {} of {n} x 10 not run: about {predicted:.0} s predicted, {:.0} s of the budget left",
            i + 1,
            left.max(0.0)
        ));
        eprintln!(
            "[bench] {}",
            r.curve_notes.last().map_or("", String::as_str)
        );
        return false;
    }
    eprintln!(
        "[bench] scale {n} x 10, run {} of {LARGE_RUNS}{}",
        i + 1,
        if top {
            " (with a control-plane restart and one kill -9)"
        } else {
            ""
        }
    );
    let deadline = Duration::from_secs_f64((left - SETUP_S).max(10.0) / 3.0);
    let step = scale::Step {
        connectors: n,
        executors: scale::EXECUTORS,
        kills: usize::from(top),
        restart: top,
    };
    match scale::run_step(
        &args.bin_dir,
        &root.join(format!("scale-{n}-{i}")),
        step,
        deadline,
        deadline,
        false,
    )
    .await
    {
        Ok(p) => {
            eprintln!("[bench] {p:?}");
            r.large.push(p);
            true
        }
        Err(e) => {
            r.curve_notes
                .push(format!("run {} of {n} x 10 did not finish: {e}", i + 1));
            eprintln!(
                "[bench] {}",
                r.curve_notes.last().map_or("", String::as_str)
            );
            false
        }
    }
}

/// The median of each figure over `runs` (all of one size; not empty).
fn median_point(runs: &[scale::ScalePoint]) -> scale::ScalePoint {
    let med = |f: fn(&scale::ScalePoint) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    scale::ScalePoint {
        connectors: runs[0].connectors,
        create_s: med(|p| p.create_s),
        delete_s: med(|p| p.delete_s),
        delete_left: runs.iter().map(|p| p.delete_left).max().unwrap_or(0),
        cp_rss_mib: med(|p| p.cp_rss_mib),
        cp_rss_idle_mib: med(|p| p.cp_rss_idle_mib),
        exec_kib_per_task: med(|p| p.exec_kib_per_task),
        exec_rss_mib: med(|p| p.exec_rss_mib),
        rebalances: Vec::new(),
        restart: None,
        cluster_cpu_ms: (med(|p| p.cluster_cpu_ms.0), med(|p| p.cluster_cpu_ms.1)),
        bench_delete_cpu_ms: med(|p| p.bench_delete_cpu_ms),
        cp_delete_cpu_ms: med(|p| p.cp_delete_cpu_ms),
    }
}

/// Issue 19's targets at [`LARGE_TARGET`] x 10: medians of its runs, each figure beside
/// its target, and every run.
fn large_section(large: &[scale::ScalePoint], target: &[scale::ScalePoint]) -> String {
    let mut s = String::new();
    let runs: Vec<&scale::ScalePoint> = large
        .iter()
        .filter(|p| p.connectors == LARGE_TARGET)
        .collect();
    let _ = writeln!(s, "### {LARGE_TARGET} x 10 (issue 19)\n");
    if runs.is_empty() {
        let _ = writeln!(
            s,
            "Not run within the budget (the notes under the curve say why).\n"
        );
        return s;
    }
    let med = |f: &dyn Fn(&scale::ScalePoint) -> f64| {
        median(&runs.iter().map(|p| f(p)).collect::<Vec<_>>())
    };
    let restarts: Vec<&scale::Restart> = runs.iter().filter_map(|p| p.restart.as_ref()).collect();
    let kills: Vec<&scale::Rebalance> = runs.iter().flat_map(|p| p.rebalances.iter()).collect();
    let _ = writeln!(
        s,
        "{} runs of {LARGE_TARGET} x 10 = {} tasks on {} executors (lease {} ms, heartbeat 1000 ms); in each, once every task ran: the control plane restarted on its store (SIGTERM, then started again on the same address; its herder logs when it caught up: every connector decided once and every live executor's heartbeat listed every instance recorded RUNNING on it), then one executor killed with kill -9, then everything deleted. Medians:\n",
        runs.len(),
        LARGE_TARGET * 10,
        scale::EXECUTORS,
        scale::LEASE_MS
    );
    let _ = writeln!(
        s,
        "| figure | value | target | |\n| --- | ---: | --- | --- |"
    );
    // One row: figure, value, target, whether it was met.
    let mut row = |figure: &str, value: String, target: String, ok: bool| {
        let _ = writeln!(s, "| {figure} | {value} | {target} | {} |", met(ok));
    };
    let create = med(&|p| p.create_s);
    row(
        "create all until all RUNNING",
        format!("{create:.2} s"),
        format!("<= {LARGE_CREATE_S:.0} s"),
        create <= LARGE_CREATE_S,
    );
    let delete = med(&|p| p.delete_s);
    let left = runs.iter().map(|p| p.delete_left).max().unwrap_or(0);
    row(
        "delete all until the store holds none",
        if left > 0 {
            format!("{delete:.2} s (up to {left} still listed at the deadline)")
        } else {
            format!("{delete:.2} s")
        },
        format!("<= {LARGE_DELETE_S:.0} s"),
        left == 0 && delete <= LARGE_DELETE_S,
    );
    if !target.is_empty() {
        let per = |p: &scale::ScalePoint| (p.create_s + p.delete_s) / p.connectors as f64;
        let small = median(&target.iter().map(per).collect::<Vec<_>>());
        let large = med(&per);
        let ratio = large / small;
        row(
            &format!("create + delete per connector, over {SCALE_TARGET} x 10's"),
            format!(
                "{ratio:.2}x ({:.2} ms / {:.2} ms)",
                large * 1000.0,
                small * 1000.0
            ),
            format!("<= {LARGE_PER_CONNECTOR_RATIO}x"),
            ratio <= LARGE_PER_CONNECTOR_RATIO,
        );
    }
    let cp = med(&|p| p.cp_rss_mib);
    row(
        "control-plane RSS, all running",
        format!("{cp:.1} MiB"),
        format!("<= {LARGE_CP_RSS_MIB:.0} MiB"),
        cp <= LARGE_CP_RSS_MIB,
    );
    let per_task = med(&|p| p.exec_kib_per_task);
    row(
        "executor RSS per idle task",
        format!("{per_task:.1} KiB"),
        "<= 64 KiB".into(),
        per_task <= 64.0,
    );
    if !restarts.is_empty() {
        let rm = |f: fn(&scale::Restart) -> f64| {
            median(&restarts.iter().map(|x| f(x)).collect::<Vec<_>>())
        };
        let reads = rm(|x| x.reads_s);
        row(
            "restart: started until every connector is listed with its status",
            format!("{reads:.2} s"),
            format!("<= {RESTART_READS_S:.0} s"),
            reads <= RESTART_READS_S,
        );
        let caught = rm(|x| x.caught_up_s);
        row(
            "restart: started until the herder caught up",
            format!("{caught:.2} s"),
            format!("<= {RESTART_CAUGHT_UP_S:.0} s"),
            caught <= RESTART_CAUGHT_UP_S,
        );
        // The worst run: tasks moved, or not RUNNING, after the restart.
        let total = LARGE_TARGET * 10;
        let worst = restarts
            .iter()
            .map(|x| x.moved.max(total.saturating_sub(x.running_after)))
            .max()
            .unwrap_or(0);
        row(
            "restart: tasks moved or not RUNNING after it (most of any run)",
            worst.to_string(),
            "0".into(),
            worst == 0,
        );
    }
    if !kills.is_empty() {
        let secs = median(&kills.iter().map(|k| k.seconds).collect::<Vec<_>>());
        let bound = f64::from(scale::LEASE_MS) / 1000.0 + REBALANCE_BEYOND_LEASE_S;
        row(
            "kill -9 of 1 of 10 executors until every lost task RUNNING elsewhere",
            format!("{secs:.2} s"),
            format!("<= lease + {REBALANCE_BEYOND_LEASE_S:.0} s = {bound:.1} s"),
            secs <= bound,
        );
        let moved = kills.iter().map(|k| k.moved_other).max().unwrap_or(0);
        row(
            "tasks of surviving executors that moved (most of any run)",
            moved.to_string(),
            "0".into(),
            moved == 0,
        );
    }
    let _ = writeln!(
        s,
        "\nRuns: {}\n",
        runs.iter()
            .map(|p| {
                let mut line = format!(
                    "create {:.2} s / delete {:.2} s / CP {:.1} MiB / {:.1} KiB per task",
                    p.create_s, p.delete_s, p.cp_rss_mib, p.exec_kib_per_task
                );
                if let Some(x) = &p.restart {
                    let _ = write!(
                        line,
                        " / restart: exit {:.2} s, reads {:.2} s, caught up {:.2} s, {} moved, {} RUNNING",
                        x.stop_s, x.reads_s, x.caught_up_s, x.moved, x.running_after
                    );
                }
                for k in &p.rebalances {
                    let _ = write!(
                        line,
                        " / kill -9: {:.2} s, {} lost, {} others moved",
                        k.seconds, k.lost, k.moved_other
                    );
                }
                line
            })
            .collect::<Vec<_>>()
            .join("; ")
    );
    s
}

/// "off" or "on".
fn on_off(observed: bool) -> &'static str {
    if observed { "on" } else { "off" }
}

/// Keeps run `i` of the target step (observability `observed`) in `r`, or notes why it
/// did not finish; false then.
fn record_target(
    r: &mut Results,
    observed: bool,
    p: anyhow::Result<scale::ScalePoint>,
    i: usize,
) -> bool {
    match p {
        Ok(p) => {
            eprintln!("[bench] observability {}: {p:?}", on_off(observed));
            if observed {
                r.target_observed.push(p);
            } else {
                r.target.push(p);
            }
            true
        }
        Err(e) => {
            r.curve_notes.push(format!(
                "run {} of {SCALE_TARGET} x 10 with observability {} did not finish: {e}",
                i + 1,
                on_off(observed)
            ));
            eprintln!(
                "[bench] {}",
                r.curve_notes.last().map_or("", String::as_str)
            );
            false
        }
    }
}

/// One run of `n` x 10 for the curve, unless the prediction says it would not fit.
async fn curve_step(
    args: &Args,
    root: &std::path::Path,
    started: Instant,
    remaining: &dyn Fn(Instant) -> f64,
    r: &mut Results,
    n: usize,
) {
    let deadline = |left: f64| Duration::from_secs_f64(left.max(10.0));
    let left = remaining(started);
    // Predict linearly from the nearest measured step below (the cost per connector
    // only grows with n), plus the setup of a cluster.
    let per_conn = r
        .curve
        .iter()
        .chain(r.target.iter())
        .filter(|p| p.connectors <= n)
        .max_by_key(|p| p.connectors)
        .map(|p| (p.create_s + p.delete_s) / p.connectors as f64)
        .unwrap_or(0.0);
    let predicted = per_conn * n as f64 + SETUP_S;
    if predicted > left || (per_conn == 0.0 && n != SCALE_CURVE[0]) {
        r.curve_notes.push(format!(
            "{n} x 10 not run: at least {predicted:.0} s predicted from the step below it (cost per connector grows with n), {:.0} s of the budget left",
            left.max(0.0)
        ));
        eprintln!(
            "[bench] {}",
            r.curve_notes.last().map_or("", String::as_str)
        );
        return;
    }
    eprintln!("[bench] scale {n} x 10 (1 run)");
    match scale::run(
        &args.bin_dir,
        &root.join(format!("scale-{n}")),
        n,
        0,
        deadline(left * 0.45),
        deadline(left * 0.45),
        false,
    )
    .await
    {
        Ok(p) => {
            eprintln!("[bench] {p:?}");
            r.curve.push(p);
        }
        Err(e) => {
            r.curve_notes
                .push(format!("{n} x 10 did not finish within the budget: {e}"));
            eprintln!(
                "[bench] {}",
                r.curve_notes.last().map_or("", String::as_str)
            );
        }
    }
}

/// The mTLS deletion figure beside the plaintext one: the mTLS run's p50 over its own
/// floor (measured over mTLS), and how much mTLS adds to the plaintext p50 (target: at
/// most 10 %, issue 14).
fn mtls_line(plain: &deletion::DeletionResult, tls: &deletion::DeletionResult) -> String {
    let added = (tls.p50() / plain.p50() - 1.0) * 100.0;
    format!(
        "deletion latency with mTLS, p50 / floor: {:.2}x (p50 {:.2} ms, plaintext {:.2} ms: {added:+.1} %, target at most +10 %: {})",
        tls.ratio(),
        tls.p50(),
        plain.p50(),
        met(added <= 10.0)
    )
}

/// The observability-on deletion figure beside the off one (issue 16: at most 5% slower).
fn observed_line(off: &deletion::DeletionResult, on: &deletion::DeletionResult) -> String {
    let p50 = on.p50() / off.p50();
    let interval = crate::stats::ratio_interval(&off.latencies, &on.latencies);
    format!(
        "Observability on vs off (issue 16), two clusters side by side in the same run, their deletions interleaved (off-on, on-off, ...): the on cluster has every process's `--metrics-listen` scraped once a second and `--otlp-endpoint` exporting every span to an OTLP receiver that drops them. The on cluster's background work (scrapes, span export) also runs while the off cluster deletes, so the latency ratio is what observability adds on the path of a deletion; the CPU figures at the end hold the rest. {} deletions each. Off: p50 {:.2} ms, p99 {:.2} ms. On: p50 {:.2} ms, p99 {:.2} ms. On / off: p50 {p50:.3} (90% confidence interval by bootstrap over the interleaved pairs of deletions, which treats them as independent: {:.3} to {:.3}), p99 {:.3}. Target: p50 at most 5% slower. Result: {}. CPU time (user + system) of each cluster's processes over the measured deletions, background included, per deletion: off {:.2} ms, on {:.2} ms; spans the receiver got per deletion (background calls included): {:.1}.",
        on.runs,
        off.p50(),
        off.p99(),
        on.p50(),
        on.p99(),
        interval.0,
        interval.1,
        on.p99() / off.p99(),
        met(p50 <= 1.05),
        off.cpu_per_deletion,
        on.cpu_per_deletion,
        on.spans_per_deletion
    )
}

/// Each run's create and delete, for the table's notes.
fn runs_text(runs: &[scale::ScalePoint]) -> String {
    runs.iter()
        .map(|p| format!("create {:.2} s / delete {:.2} s", p.create_s, p.delete_s))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The target scale step with observability on beside off (issue 16), medians of the
/// runs of each, alternating off and on in the same run of the benchmark.
fn scale_observed_table(off: &[scale::ScalePoint], on: &[scale::ScalePoint]) -> String {
    let med = |v: &[scale::ScalePoint], f: fn(&scale::ScalePoint) -> f64| {
        median(&v.iter().map(f).collect::<Vec<_>>())
    };
    let mut t = format!(
        "With observability on (issue 16): {} runs with every process's `--metrics-listen` scraped once a second and `--otlp-endpoint` exporting every span to an OTLP receiver that drops them, paired with as many off runs (off-on, on-off, ...), medians of each (target: at most 5% slower):\n\n| figure | off | on | on / off |\n| --- | ---: | ---: | ---: |\n",
        on.len()
    );
    type Figure = fn(&scale::ScalePoint) -> f64;
    let rows: [(&str, Figure, &str); 6] = [
        ("create all until all RUNNING", |p| p.create_s, "s"),
        ("delete all until cleaned up", |p| p.delete_s, "s"),
        ("control-plane RSS, all running", |p| p.cp_rss_mib, "MiB"),
        (
            "CPU time of the cluster's processes over the create",
            |p| p.cluster_cpu_ms.0 / 1000.0,
            "s",
        ),
        (
            "CPU time of the cluster's processes over the delete",
            |p| p.cluster_cpu_ms.1 / 1000.0,
            "s",
        ),
        (
            "CPU time of the benchmark process over the delete (admin client; receiver and scraper when on)",
            |p| p.bench_delete_cpu_ms / 1000.0,
            "s",
        ),
    ];
    for (name, f, unit) in rows {
        let (a, b) = (med(off, f), med(on, f));
        let _ = writeln!(
            t,
            "| {name} | {a:.2} {unit} | {b:.2} {unit} | {:.3} |",
            b / a
        );
    }
    let slower = med(on, |p| p.create_s + p.delete_s) / med(off, |p| p.create_s + p.delete_s);
    let interval = |f: fn(&scale::ScalePoint) -> f64| {
        let (lo, hi) = crate::stats::ratio_interval(
            &off.iter().map(f).collect::<Vec<_>>(),
            &on.iter().map(f).collect::<Vec<_>>(),
        );
        format!("{lo:.3} to {hi:.3}")
    };
    let _ = write!(
        t,
        "\nCreate + delete, on / off: {slower:.3}, {}. 90% confidence intervals of these ratios by bootstrap over the pairs: create + delete {}, create {}, delete {}. Runs off: {}. Runs on: {}",
        met(slower <= 1.05),
        interval(|p| p.create_s + p.delete_s),
        interval(|p| p.create_s),
        interval(|p| p.delete_s),
        runs_text(off),
        runs_text(on)
    );
    t
}

fn render(r: &Results) -> String {
    let target = &r.target[..];
    let curve = &r.curve[..];
    let curve_notes = &r.curve_notes[..];
    let took = r.took;
    let mut s = String::new();
    let profile = std::env::var("WHARF_BENCH_PROFILE").unwrap_or_else(|_| "release".into());
    let _ = writeln!(s, "# Benchmarks\n");
    let _ = writeln!(
        s,
        "Written by `scripts/bench` (crate `bench/`, binary `wharf-bench`) on {} from commit `{}`{}; the run took {:.0} s after the build. Do not edit by hand: the next run rewrites it.\n",
        sh("date -u '+%Y-%m-%d %H:%M UTC'"),
        sh("git rev-parse --short HEAD"),
        if sh("git status --porcelain --untracked-files=no").is_empty() {
            ""
        } else {
            " (with uncommitted changes in the tree)"
        },
        took.as_secs_f64()
    );
    match &r.deletion {
        Some(del) => {
            let _ = writeln!(s, "deletion latency, p50 / floor: {:.2}x\n", del.ratio());
        }
        None => {
            let _ = writeln!(
                s,
                "deletion latency, p50 / floor: not measured in this run\n"
            );
        }
    }
    if let (Some(plain), Some(tls)) = (&r.deletion, &r.deletion_mtls) {
        let _ = writeln!(s, "{}\n", mtls_line(plain, tls));
    }

    let _ = writeln!(s, "## Machine\n");
    let _ = writeln!(
        s,
        "- CPU: {} ({} cores online)",
        sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs"),
        sh("nproc")
    );
    let _ = writeln!(
        s,
        "- memory: {}",
        sh("grep MemTotal /proc/meminfo | tr -s ' '")
    );
    let _ = writeln!(
        s,
        "- kernel: {}; {}",
        sh("uname -sr"),
        sh("rustc --version")
    );
    let _ = writeln!(
        s,
        "- binaries: `{profile}` profile (optimized code is what a deployment runs; debug builds would measure the compiler's unoptimized output, not Wharf)"
    );
    let _ = writeln!(
        s,
        "- load average (1 min) at the start and the end of the run: {} / {}",
        r.load_start,
        sh("cut -d' ' -f1 /proc/loadavg")
    );
    let _ = writeln!(
        s,
        "- the machine is shared: other builds and tests may have run at the same time, which is why every comparison is a ratio measured in the same run\n"
    );

    let _ = writeln!(
        s,
        "## Reproduce\n\n```sh\nscripts/bench            # builds --release, runs everything (Wharf within --budget-s, default {DEFAULT_BUDGET_S} s; the Kafka Connect peer about 21 min more), rewrites BENCHMARKS.md\n```\n"
    );
    let _ = writeln!(
        s,
        "Everything runs as real processes on loopback under one temp dir: `wharf-control-plane` (redb store), `wharf-executor` processes on 127.0.0.2.., the built-in `test-source`/`file-source`/`file-sink` plugins, and for JetStream a `nats-server -js` that the run starts on a free port with a temp store (the machine's own NATS and PostgreSQL are not used). Processes log at `warn`.\n"
    );

    // 1. Deletion.
    let _ = writeln!(s, "## 1. Deletion latency\n");
    if let Some(del) = &r.deletion {
        let _ = writeln!(
            s,
            "One `test-source` connector with 8 idle tasks (a poll blocks; cleanup writes one lifecycle line) on 4 executors; `DeleteConnector(wait=true)` until the name is free. {} measured deletions after 3 warm-up ones, each on a fresh connector, interleaved one by one with those of a second cluster with observability on that runs beside it (below).\n",
            del.runs
        );
        let _ = writeln!(
            s,
            "The floor, measured in every iteration of the same run: the two store commits a deletion needs (`start_deletion` + `finish_deletion` on the control plane's own `RedbStore`, a record of the same shape, same disk), one gRPC round trip to the control plane (grpc.health.v1 Check) and one parallel fan-out of 8 `StopTask` calls to the 4 executors (answered NOT_FOUND: a full trip through the executor service).\n"
        );
        let _ = writeln!(s, "| figure | p50 ms | p99 ms |\n| --- | ---: | ---: |");
        let _ = writeln!(
            s,
            "| DeleteConnector(wait) | {:.2} | {:.2} |",
            del.p50(),
            del.p99()
        );
        let _ = writeln!(
            s,
            "| floor (sum) | {:.2} | {:.2} |",
            median(&del.floors),
            quantile(&del.floors, 0.99)
        );
        let _ = writeln!(
            s,
            "| - store commits (2) | {:.2} | {:.2} |",
            median(&del.store),
            quantile(&del.store, 0.99)
        );
        let _ = writeln!(
            s,
            "| - admin round trip | {:.2} | {:.2} |",
            median(&del.admin_rtt),
            quantile(&del.admin_rtt, 0.99)
        );
        let _ = writeln!(
            s,
            "| - StopTask fan-out (8 on 4) | {:.2} | {:.2} |",
            median(&del.fanout),
            quantile(&del.fanout, 0.99)
        );
        let _ = writeln!(
            s,
            "| audit trail commit (1 per mutating call; in DeleteConnector, not in the floor) | {:.2} | {:.2} |\n",
            median(&del.audit),
            quantile(&del.audit, 0.99)
        );
        let ratio = del.ratio();
        let _ = writeln!(
            s,
            "Target: p50 at most 2x the floor. Result: {ratio:.3}x, {}.\n",
            met(ratio <= 2.0)
        );
        if let Some(on) = &r.deletion_observed {
            let _ = writeln!(s, "{}\n", observed_line(del, on));
        }
    } else {
        let _ = writeln!(s, "Not run.\n");
    }

    // 2. Scale.
    let _ = writeln!(s, "## 2. Control-plane scale\n");
    let _ = writeln!(
        s,
        "N `test-source` connectors x 10 idle tasks on 10 executor processes. Create all (32 admin calls in flight) until every task is RUNNING (polled with `ListConnectors(expand_status)` every 250 ms, so figures are late by at most that); delete all (`DeleteConnector` without wait, 32 in flight) until `ListConnectors` is empty. RSS from /proc (VmRSS) after a 1 s settle; per task = growth of the 10 executors' RSS over their idle RSS, divided by the tasks (connector instances included).\n"
    );
    if !target.is_empty() {
        let med =
            |f: fn(&scale::ScalePoint) -> f64| median(&target.iter().map(f).collect::<Vec<_>>());
        let create = med(|p| p.create_s);
        let delete = med(|p| p.delete_s);
        let cp = med(|p| p.cp_rss_mib);
        let per_task = med(|p| p.exec_kib_per_task);
        let _ = writeln!(s, "{SCALE_TARGET} x 10, median of {} runs:\n", target.len());
        let _ = writeln!(
            s,
            "| figure | value | target | |\n| --- | ---: | --- | --- |"
        );
        let _ = writeln!(
            s,
            "| create all until all RUNNING | {create:.2} s | < 10 s | {} |",
            met(create < 10.0)
        );
        let unfinished = target.iter().map(|p| p.delete_left).max().unwrap_or(0);
        if unfinished > 0 {
            let _ = writeln!(
                s,
                "| delete all until cleaned up | not finished: up to {unfinished} of {SCALE_TARGET} still listed after {delete:.0} s | < 10 s | {} |",
                met(false)
            );
        } else {
            let _ = writeln!(
                s,
                "| delete all until cleaned up | {delete:.2} s | < 10 s | {} |",
                met(delete < 10.0)
            );
        }
        let _ = writeln!(
            s,
            "| control-plane RSS, all running | {cp:.1} MiB (idle {:.1}) | < 256 MiB | {} |",
            med(|p| p.cp_rss_idle_mib),
            met(cp < 256.0)
        );
        let _ = writeln!(
            s,
            "| executor RSS per idle task | {per_task:.1} KiB | < 64 KiB | {} |\n",
            met(per_task < 64.0)
        );
        let _ = writeln!(
            s,
            "Runs: {}\n",
            target
                .iter()
                .map(|p| format!(
                    "create {:.2} s / delete {:.2} s{} / CP {:.1} MiB / {:.1} KiB per task",
                    p.create_s,
                    p.delete_s,
                    if p.delete_left > 0 {
                        format!(" ({} still listed at the deadline)", p.delete_left)
                    } else {
                        String::new()
                    },
                    p.cp_rss_mib,
                    p.exec_kib_per_task
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
        if !r.target_observed.is_empty() {
            let _ = writeln!(s, "{}\n", scale_observed_table(target, &r.target_observed));
        }
    } else {
        let _ = writeln!(
            s,
            "The {SCALE_TARGET} x 10 step did not run within the budget.\n"
        );
    }
    let _ = writeln!(s, "{}", large_section(&r.large, target));
    let _ = writeln!(
        s,
        "### Curve (one run per size up to {}; {SCALE_TARGET} from the median above; {} medians of their runs)\n",
        SCALE_CURVE[SCALE_CURVE.len() - 1],
        LARGE_STEPS.map(|n| n.to_string()).join(" and ")
    );
    let _ = writeln!(
        s,
        "| connectors x 10 | tasks | create -> RUNNING s | delete -> clean s | CP RSS MiB | KiB per task |\n| ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let mut rows: Vec<scale::ScalePoint> = curve.to_vec();
    if !target.is_empty() {
        rows.push(median_point(target));
    }
    for n in LARGE_STEPS {
        let runs: Vec<scale::ScalePoint> = r
            .large
            .iter()
            .filter(|p| p.connectors == n)
            .cloned()
            .collect();
        if !runs.is_empty() {
            rows.push(median_point(&runs));
        }
    }
    rows.sort_by_key(|p| p.connectors);
    for p in &rows {
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {} | {:.1} | {:.1} |",
            p.connectors,
            p.connectors * 10,
            p.create_s,
            if p.delete_left > 0 {
                format!(
                    "not finished ({} left) after {:.0}",
                    p.delete_left, p.delete_s
                )
            } else {
                format!("{:.2}", p.delete_s)
            },
            p.cp_rss_mib,
            p.exec_kib_per_task
        );
    }
    for n in curve_notes {
        let _ = writeln!(s, "\n- {n}");
    }
    let _ = writeln!(s);

    // 3. Rebalance.
    let _ = writeln!(s, "## 3. Rebalance\n");
    match &r.rebalance {
        None => {
            let _ = writeln!(s, "Not measured in this run.\n");
        }
        Some(p) => {
            let reb = &p.rebalances;
            let secs = median(&reb.iter().map(|r| r.seconds).collect::<Vec<_>>());
            let lost = median(&reb.iter().map(|r| r.lost as f64).collect::<Vec<_>>());
            let moved = median(&reb.iter().map(|r| r.moved_other as f64).collect::<Vec<_>>());
            let _ = writeln!(
                s,
                "{} x 10 = {} tasks on 10 executors (lease {} ms, heartbeat 1000 ms). kill -9 of one executor, then time until every task is RUNNING on a surviving executor (polled every 250 ms); then the next executor is killed, {} times in all (10, 9, 8 executors before the kill). Median of the {} kills.\n",
                p.connectors,
                p.connectors * 10,
                scale::LEASE_MS,
                reb.len(),
                reb.len()
            );
            let _ = writeln!(s, "| figure | value |\n| --- | ---: |");
            let _ = writeln!(
                s,
                "| kill -9 until all RUNNING elsewhere | {secs:.2} s (the lease alone is {:.1} s of it) |",
                scale::LEASE_MS as f64 / 1000.0
            );
            let _ = writeln!(s, "| tasks that were on the killed executor | {lost:.0} |");
            let _ = writeln!(
                s,
                "| tasks of surviving executors that moved | {moved:.0} |\n"
            );
            let _ = writeln!(
                s,
                "Target: only the lost tasks move. Result: {}.\n",
                met(!reb.is_empty() && reb.iter().all(|r| r.moved_other == 0))
            );
            let _ = writeln!(
                s,
                "Kills: {}\n",
                reb.iter()
                    .map(|r| format!(
                        "{} executors: {:.2} s, {} lost, {} others moved",
                        r.executors_before, r.seconds, r.lost, r.moved_other
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            if p.delete_left > 0 {
                let _ = writeln!(
                    s,
                    "After the kills, deleting all {} connectors had not finished after {:.0} s: {} still listed (the same deletion without kills: section 2).\n",
                    p.connectors, p.delete_s, p.delete_left
                );
            } else {
                let _ = writeln!(
                    s,
                    "After the kills, deleting all {} connectors took {:.2} s.\n",
                    p.connectors, p.delete_s
                );
            }
        }
    }

    // 4. Data plane.
    let _ = writeln!(s, "## 4. Data plane\n");
    let _ = writeln!(
        s,
        "Records of {} bytes (one JSON line each, with its write time) from `file-source` to `file-sink`, one task each. Source and sink are created and RUNNING first (for JetStream on two different executors); throughput: {} records written to the source file at once, rate = records / (first record in the sink file -> last one), so the source's idle wait before it sees the file is not counted. Latency: then {} records written in batches of {} every {} ms; latency = time the bench process reads the line in the sink file - time in the record (the sink file is read every 1 ms). Raw rate in the same run: for embedded, the `EmbeddedLog` in the bench process, one appender (batches of 640, about one file-source poll) and one consumer (fetch 500, ack) concurrently; for JetStream, a plain async-nats publisher (batches of 640, acks awaited per batch) and a durable pull consumer with explicit acks on the same nats-server. Median of {DATAPLANE_RUNS} runs.\n",
        dataplane::RECORD_BYTES,
        100_000,
        1200,
        20,
        25
    );
    let _ = writeln!(
        s,
        "| backend | pipeline rec/s | raw log rec/s | pipeline / raw | e2e p50 ms | e2e p99 ms | target (>= 0.5x raw) |\n| --- | ---: | ---: | ---: | ---: | ---: | --- |"
    );
    for (name, b) in [
        ("embedded, one executor", &r.embedded),
        ("JetStream, two executors", &r.jetstream),
    ] {
        let Some(b) = b else {
            let _ = writeln!(s, "| {name} | not run | | | | | |");
            continue;
        };
        let ratio = b.rate() / b.raw_rate();
        let _ = writeln!(
            s,
            "| {name} | {:.0} | {:.0} | {:.2}x | {:.1} | {:.1} | {} |",
            b.rate(),
            b.raw_rate(),
            ratio,
            b.p50(),
            b.p99(),
            met(ratio >= 0.5)
        );
    }
    if let Some(b) = r.embedded.as_ref().filter(|b| !b.chained.is_empty()) {
        let chained = crate::stats::median(&b.chained.iter().map(|r| r.rate).collect::<Vec<_>>());
        let slower = 100.0 * (1.0 - chained / b.rate());
        let _ = writeln!(
            s,
            "\nWith the record pipeline on the source (docs/pipeline.md: JsonConverter without schemas on key and value, and MaskField, InsertField, ReplaceField), embedded, one executor, in the same runs: {chained:.0} rec/s against {:.0} rec/s without, {slower:.1} % slower (target: at most 15 % slower): {}.",
            b.rate(),
            met(slower <= 15.0)
        );
    }
    let _ = writeln!(
        s,
        "\nJetStream placement (source task host, sink task host) per run: {}\n",
        r.jetstream
            .iter()
            .flat_map(|j| j.runs.iter())
            .map(|r| format!("{} -> {}", r.placement.0, r.placement.1))
            .collect::<Vec<_>>()
            .join("; ")
    );
    if let Some(k) = &r.kafka {
        let _ = writeln!(
            s,
            "{}",
            kafka_peer::render(k, r.kafka_tuned.as_ref(), r.kafka_peer.as_ref())
        );
    }
    if let Some(p) = &r.peer {
        s.push_str(&peer::render(p));
    }
    let notes_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("NOTES.md");
    match std::fs::read_to_string(&notes_path) {
        Ok(notes) => {
            let _ = writeln!(s, "{}", notes.trim_end());
        }
        Err(e) => {
            let _ = writeln!(s, "(analysis notes missing: {}: {e})", notes_path.display());
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(connectors: usize, create_s: f64, delete_s: f64) -> scale::ScalePoint {
        scale::ScalePoint {
            connectors,
            create_s,
            delete_s,
            cp_rss_mib: 1619.5,
            exec_kib_per_task: 6.1,
            ..Default::default()
        }
    }

    #[test]
    fn the_issue_19_section_sets_each_figure_beside_its_target() {
        let mut large = point(LARGE_TARGET, 45.03, 47.46);
        large.restart = Some(scale::Restart {
            stop_s: 0.28,
            reads_s: 0.60,
            caught_up_s: 1.45,
            running_after: LARGE_TARGET * 10,
            moved: 0,
        });
        large.rebalances = vec![scale::Rebalance {
            lost: 10_000,
            moved_other: 0,
            seconds: 7.67,
            executors_before: 10,
        }];
        let s = large_section(&[large], &[point(SCALE_TARGET, 2.91, 2.49)]);
        for row in [
            "| create all until all RUNNING | 45.03 s | <= 10 s | **missed** |",
            "| delete all until the store holds none | 47.46 s | <= 10 s | **missed** |",
            "| create + delete per connector, over 1000 x 10's | 1.71x (9.25 ms / 5.40 ms) | <= 1.3x | **missed** |",
            "| control-plane RSS, all running | 1619.5 MiB | <= 512 MiB | **missed** |",
            "| executor RSS per idle task | 6.1 KiB | <= 64 KiB | **met** |",
            "| restart: started until every connector is listed with its status | 0.60 s | <= 2 s | **met** |",
            "| restart: started until the herder caught up | 1.45 s | <= 10 s | **met** |",
            "| restart: tasks moved or not RUNNING after it (most of any run) | 0 | 0 | **met** |",
            "| kill -9 of 1 of 10 executors until every lost task RUNNING elsewhere | 7.67 s | <= lease + 2 s = 5.0 s | **missed** |",
            "| tasks of surviving executors that moved (most of any run) | 0 | 0 | **met** |",
        ] {
            assert!(s.contains(row), "missing {row:?} in:\n{s}");
        }
    }

    #[test]
    fn a_restart_that_left_tasks_not_running_is_its_worst_run() {
        let mut large = point(LARGE_TARGET, 1.0, 1.0);
        large.restart = Some(scale::Restart {
            running_after: LARGE_TARGET * 10 - 3,
            moved: 1,
            ..Default::default()
        });
        let s = large_section(&[large], &[]);
        assert!(
            s.contains("| restart: tasks moved or not RUNNING after it (most of any run) | 3 | 0 | **missed** |"),
            "{s}"
        );
    }
}
