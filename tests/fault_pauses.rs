//! Pauses of any part of a cluster, with real processes: SIGSTOP of the control plane, of
//! an executor or of the control plane's etcd for about a lease (half a lease to two),
//! then SIGCONT. After each, within a few leases, every executor and
//! the control plane agree on one epoch (the control plane's ListExecutors against each
//! executor's own ListAssignments), every executor is ALIVE, every task of the connectors
//! runs again, and the line appended during the pause and one appended after it reach
//! the file sink, with every line before them (docs/contract.md, "Executor
//! self-fencing").
//!
//! The executors share the loopback NATS JetStream as their record log, so that the
//! file-source and the file-sink may land on different executors.
//!
//! The randomized cases print their seed; `WHARF_PAUSE_SEED=<seed>` replays one. The
//! second runs the control plane on a test-owned etcd (free ports, its own data dir: the
//! shared etcd on 2379 is never paused) and pauses etcd too: past two thirds of the
//! election TTL the lone replica steps down, and after SIGCONT it leads again once it sat
//! out one TTL (docs/state.md, "Leader election"); the executors, fenced meanwhile or
//! not, must end at one agreed epoch. The third runs two replicas on a test-owned etcd
//! (the executors given both URLs) and pauses either replica too: a paused leader is
//! replaced, and once resumed it steps down. On etcd, agreement also needs a replica to
//! lead: the leader key in etcd is the one its last election created.
//!
//! Needs the `etcd` binary (Debian `etcd-server`, see scripts/setup-services). Build
//! first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wharf_harness::cluster::{TestCluster, call_at};
use wharf_harness::etcd::TestEtcd;
use wharf_harness::lines::{append_lines, sink_numbers};
use wharf_harness::rng::Rng;
use wharf_harness::{KeepOnFailure, Proc, wait_until};

/// Lease the control plane grants, in milliseconds. Longer than an executor's registry
/// call bound (5 s) and its retry, so that a pause of two leases holds one registration
/// the executor gave up on and another still pending when the control plane resumes:
/// the sequence that left executors LOST at an epoch they never heard of.
const LEASE_MS: u32 = 8_000;
/// Heartbeat interval, in milliseconds.
const HEARTBEAT_MS: u32 = 1_000;
/// How long the cluster has to agree again after a pause ends: a few leases.
const AGREE_WITHIN: Duration = Duration::from_millis(3 * LEASE_MS as u64);
/// The least time the lines get to reach the sink once the cluster agrees, even when it
/// agreed at the end of [`AGREE_WITHIN`]: a source or sink task started again at that
/// moment first opens its file and binds its consumer (on a loaded machine, seconds).
const DELIVER_AFTER_AGREEMENT: Duration = Duration::from_millis(LEASE_MS as u64);
/// The shared record log (the loopback NATS JetStream of the test machine).
const NATS_URL: &str = "nats://127.0.0.1:4222";
/// Executors in each cluster.
const EXECUTORS: usize = 3;
/// Tasks of the test-source connector (spread over the executors).
const SOURCE_TASKS: usize = 3;
/// Election TTL of the control plane on etcd, in seconds: a failover (the TTL plus a
/// second) fits in [`LEASE_MS`] as docs/state.md asks, so an etcd pause shorter than the
/// lease minus the TTL and the sit-out fences no executor, and a longer one fences them.
const ELECTION_TTL_SECS: u32 = 3;

/// A control plane and `n` executors on the shared JetStream log, with [`LEASE_MS`] and
/// [`HEARTBEAT_MS`]; the control plane's store is redb, or what `store_flags` choose.
async fn start(n: usize, store_flags: Vec<String>) -> TestCluster {
    let dir = KeepOnFailure::new();
    let cp_dir = dir.path().join("cp");
    let port = wharf_harness::audit::free_port();
    let mut cp = Proc::spawn(
        wharf_harness::bin("wharf-control-plane"),
        vec![
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--data-dir".into(),
            cp_dir.display().to_string(),
            "--lease-ms".into(),
            LEASE_MS.to_string(),
            "--heartbeat-interval-ms".into(),
            HEARTBEAT_MS.to_string(),
        ]
        .into_iter()
        .chain(store_flags)
        .collect(),
        &cp_dir,
    );
    let addr = cp.listen_addr().await;
    let mut c = TestCluster {
        dir,
        cp,
        addr,
        executors: Vec::new(),
        tls: None,
    };
    for i in 0..n {
        c.add_executor_with(i, vec!["--nats-url".into(), NATS_URL.into()])
            .await;
    }
    c.wait_alive(n).await;
    c
}

/// A name unique to this run (the JetStream log outlives the test).
fn unique(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("pause-{what}-{}-{nanos}", std::process::id())
}

/// The pipeline every case checks: a file-source into a file-sink and a test-source of
/// [`SOURCE_TASKS`] tasks.
struct Pipeline {
    input: std::path::PathBuf,
    output: std::path::PathBuf,
    names: [String; 3],
    /// Lines appended so far (`{"n": 0..next}`).
    next: u64,
}

impl Pipeline {
    async fn create(c: &TestCluster) -> Self {
        let topic = unique("topic");
        let input = c.dir.path().join("in.jsonl");
        let output = c.dir.path().join("out.jsonl");
        append_lines(&input, 0..1);
        let names = ["sink".to_owned(), "source".to_owned(), "ticks".to_owned()];
        let configs = [
            json!({
                "connector.class": "file-sink",
                "file": output.display().to_string(),
                "topics": topic,
            }),
            json!({
                "connector.class": "file-source",
                "file": input.display().to_string(),
                "topic": topic,
            }),
            c.source_config(&names[2], SOURCE_TASKS as u32),
        ];
        for (name, config) in names.iter().zip(configs) {
            let r = c.call("CreateConnector", json!({ "name": name, "config": config }));
            assert_eq!(r.code, 0, "create {name}: {}", r.err);
        }
        let p = Self {
            input,
            output,
            names,
            next: 1,
        };
        p.delivered(0, Duration::from_secs(40)).await;
        p
    }

    /// Appends the next line (not waiting for it).
    fn append(&mut self) {
        append_lines(&self.input, self.next..self.next + 1);
        self.next += 1;
    }

    /// Appends the next line and waits until the sink wrote it and every line before
    /// it: no record appended so far, during a pause included, is lost.
    async fn append_and_deliver(&mut self, within: Duration) {
        self.append();
        let all = self.next;
        wait_until(
            &format!("lines 0..{all} in the sink's file"),
            within,
            || async {
                let written = sink_numbers(&self.output);
                (0..all).all(|n| written.contains(&n)).then_some(())
            },
        )
        .await;
    }

    async fn delivered(&self, n: u64, within: Duration) {
        wait_until(&format!("line {n} in the sink's file"), within, || async {
            sink_numbers(&self.output).contains(&n).then_some(())
        })
        .await;
    }
}

/// The epoch of each executor as the control plane lists it, with its state.
fn listed(c: &TestCluster) -> Option<Vec<(String, u64, String, String)>> {
    let r = c.call("ListExecutors", json!({}));
    if r.code != 0 {
        return None;
    }
    let list = r.body["executors"].as_array()?;
    Some(
        list.iter()
            .map(|e| {
                (
                    e["id"].as_str().unwrap_or_default().to_owned(),
                    epoch_of(&e["epoch"]),
                    e["state"].as_str().unwrap_or_default().to_owned(),
                    e["address"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect(),
    )
}

fn epoch_of(v: &Value) -> u64 {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .or(v.as_u64())
        .unwrap_or(0)
}

/// The epoch executor at `address` believes it holds (0: not registered).
fn own_epoch(address: &str) -> Option<u64> {
    let bare = address
        .trim_start_matches("http://")
        .trim_start_matches("https://");
    let r = call_at(bare, "wharf.v1.Executor/ListAssignments", &json!({}));
    (r.code == 0).then(|| epoch_of(&r.body["epoch"]))
}

/// What disagrees now, or `None` when every executor is ALIVE at the epoch it holds
/// itself and every instance of `pipeline` runs.
fn disagreement(c: &TestCluster, n: usize, pipeline: &Pipeline) -> Option<String> {
    let Some(executors) = listed(c) else {
        return Some("ListExecutors failed".into());
    };
    let mut alive = 0;
    let mut seen = Vec::new();
    for (id, epoch, state, address) in &executors {
        let own = own_epoch(address);
        seen.push(format!("{id}: listed {state} at {epoch}, holds {own:?}"));
        if state == "EXECUTOR_STATE_ALIVE" && own == Some(*epoch) {
            alive += 1;
        }
    }
    if alive != n {
        return Some(seen.join("; "));
    }
    for name in &pipeline.names {
        let Some(s) = c.status(name) else {
            return Some(format!("{name}: no status"));
        };
        let tasks = s["tasks"].as_array().cloned().unwrap_or_default();
        let running = s["connector"]["state"] == "STATE_RUNNING"
            && !tasks.is_empty()
            && tasks
                .iter()
                .all(|t| t["status"]["state"] == "STATE_RUNNING");
        if !running {
            return Some(format!("{name}: {s}"));
        }
    }
    None
}

/// The key prefix of the control plane on etcd (the default).
const ETCD_PREFIX: &str = "/wharf/";

/// The test-owned etcd of a cluster on etcd, and its second control-plane replica if it
/// has one (the first is [`TestCluster::cp`]).
struct Replicas {
    etcd: TestEtcd,
    second: Option<Proc>,
}

/// The revision of the last "elected leader" line of a replica's log.
fn last_elected(log: &str) -> Option<i64> {
    log.lines()
        .rev()
        .find(|l| l.contains("elected leader"))
        .and_then(|l| l.split("revision=").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|r| r.parse::<i64>().ok())
}

/// Why no replica leads now, or `None` when one does: the leader key in etcd is the one
/// a replica's last election created (the revision its "elected leader" line names). A
/// replica resumed after its election lease expired still acts as leader until its
/// renewal fails; an agreement with the executors then holds only until it steps down,
/// so it does not count.
async fn not_leading(c: &TestCluster, replicas: &Replicas) -> Option<String> {
    let mut elected = vec![last_elected(&c.cp_log())];
    elected.extend(replicas.second.iter().map(|p| last_elected(&p.log())));
    let key = replicas.etcd.leader_revision(ETCD_PREFIX).await;
    if key.is_some() && elected.contains(&key) {
        return None;
    }
    Some(format!(
        "no replica leads: their last elections at revisions {elected:?}, the leader key \
         in etcd at {key:?}"
    ))
}

/// Waits until the cluster agrees again ([`disagreement`]) and a line appended now is
/// delivered, both within [`AGREE_WITHIN`] of `resumed` (the delivery at least
/// [`DELIVER_AFTER_AGREEMENT`] after the agreement); on etcd a replica must also lead
/// ([`not_leading`]). Panics with what disagreed.
async fn agrees_again(
    c: &TestCluster,
    etcd: Option<&Replicas>,
    pipeline: &mut Pipeline,
    resumed: Instant,
    what: &str,
) {
    let mut last = String::new();
    while resumed.elapsed() < AGREE_WITHIN {
        let leading = match etcd {
            Some(replicas) => not_leading(c, replicas).await,
            None => None,
        };
        match leading.or_else(|| disagreement(c, EXECUTORS, pipeline)) {
            None => {
                let left = AGREE_WITHIN.saturating_sub(resumed.elapsed());
                pipeline
                    .append_and_deliver(left.max(DELIVER_AFTER_AGREEMENT))
                    .await;
                println!("{what}: agreed again after {:?}", resumed.elapsed());
                return;
            }
            Some(d) => last = d,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{what}: no agreement within {AGREE_WITHIN:?} after the pause; last seen: {last}\n\
         control plane log tail:\n{}",
        tail(&c.cp_log(), 40)
    );
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Who is paused.
#[derive(Debug, Clone, Copy)]
enum Target {
    ControlPlane,
    Executor(usize),
    /// The control plane's (test-owned) etcd.
    Etcd,
    /// The second control-plane replica on etcd ([`Replicas::second`]), whichever leads.
    SecondReplica,
}

/// Holds `target` stopped for `length` (the fault itself), appending a line to the
/// pipeline's input halfway, then resumes it; returns when it was resumed. `etcd`: the
/// cluster's etcd, for [`Target::Etcd`].
async fn pause(
    c: &TestCluster,
    etcd: Option<&Replicas>,
    pipeline: &mut Pipeline,
    target: Target,
    length: Duration,
) -> Instant {
    let on_etcd = || etcd.expect("a cluster on etcd");
    let second = || on_etcd().second.as_ref().expect("a second replica");
    match target {
        Target::ControlPlane => c.cp.freeze().await,
        Target::Executor(i) => c.executors[i].freeze().await,
        Target::Etcd => on_etcd().etcd.freeze().await,
        Target::SecondReplica => second().freeze().await,
    }
    tokio::time::sleep(length / 2).await;
    pipeline.append();
    tokio::time::sleep(length - length / 2).await;
    match target {
        Target::ControlPlane => c.cp.thaw(),
        Target::Executor(i) => c.executors[i].thaw(),
        Target::Etcd => on_etcd().etcd.thaw(),
        Target::SecondReplica => second().thaw(),
    }
    Instant::now()
}

/// A pause length: half a lease to two leases.
fn random_length(rng: &mut Rng) -> Duration {
    let half = u64::from(LEASE_MS) / 2;
    Duration::from_millis(half + rng.below(3 * half + 1))
}

/// Shortest etcd pause, in milliseconds: a third of the election TTL, within which the
/// leader keeps leading (it steps down between a third and two thirds of the TTL into a
/// stall, docs/state.md).
const SHORTEST_ETCD_PAUSE_MS: u64 = ELECTION_TTL_SECS as u64 * 1_000 / 3;

/// A pause length for `target` on the etcd cluster: as [`random_length`], except that an
/// etcd pause starts at [`SHORTEST_ETCD_PAUSE_MS`], so that stalls the leader rides out,
/// stalls it steps down in but no executor's lease runs out, and stalls that fence the
/// executors are all drawn.
fn random_length_on_etcd(rng: &mut Rng, target: Target) -> Duration {
    match target {
        Target::Etcd => {
            let longest = 2 * u64::from(LEASE_MS);
            let span = longest - SHORTEST_ETCD_PAUSE_MS;
            Duration::from_millis(SHORTEST_ETCD_PAUSE_MS + rng.below(span + 1))
        }
        Target::ControlPlane | Target::SecondReplica | Target::Executor(_) => random_length(rng),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_paused_past_the_lease_and_its_executors_agree_again() {
    let c = start(EXECUTORS, Vec::new()).await;
    let mut pipeline = Pipeline::create(&c).await;
    agrees_again(&c, None, &mut pipeline, Instant::now(), "before any pause").await;
    let length = Duration::from_millis(u64::from(LEASE_MS) * 2);
    let resumed = pause(&c, None, &mut pipeline, Target::ControlPlane, length).await;
    agrees_again(
        &c,
        None,
        &mut pipeline,
        resumed,
        "control plane paused 2 leases",
    )
    .await;
    let log = c.cp_log();
    println!(
        "control plane: {} registrations after the pause, {} superseded while probed",
        log.matches("executor registered")
            .count()
            .saturating_sub(EXECUTORS),
        log.matches("registration superseded").count()
    );
}

/// Pauses in the randomized case.
const RANDOM_PAUSES: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_pauses_of_either_side_leave_one_agreed_epoch_after_each() {
    let (mut rng, seed) = Rng::from_env("WHARF_PAUSE_SEED");
    println!("pause sequence seed: {seed} (replay with WHARF_PAUSE_SEED={seed})");
    let c = start(EXECUTORS, Vec::new()).await;
    let mut pipeline = Pipeline::create(&c).await;
    agrees_again(&c, None, &mut pipeline, Instant::now(), "before any pause").await;
    for i in 0..RANDOM_PAUSES {
        let target = match rng.below(EXECUTORS as u64 + 1) {
            0 => Target::ControlPlane,
            e => Target::Executor(e as usize - 1),
        };
        let length = random_length(&mut rng);
        let what = format!("pause {i} (seed {seed}): {target:?} for {length:?}");
        println!("{what}");
        let resumed = pause(&c, None, &mut pipeline, target, length).await;
        agrees_again(&c, None, &mut pipeline, resumed, &what).await;
    }
}

/// A control plane on a test-owned etcd: each run pauses etcd, the control plane and
/// one executor, once each, in a random order and for random lengths, so that every
/// kind of pause is seen in every run (the order and lengths vary; etcd's from a third of
/// the election TTL, [`random_length_on_etcd`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_pauses_of_etcd_the_control_plane_or_an_executor_leave_one_agreed_epoch_after_each()
{
    let (mut rng, seed) = Rng::from_env("WHARF_PAUSE_SEED");
    println!("pause sequence seed: {seed} (replay with WHARF_PAUSE_SEED={seed})");
    let etcd = TestEtcd::start();
    let c = start(EXECUTORS, etcd.store_flags(ELECTION_TTL_SECS)).await;
    let replicas = Replicas { etcd, second: None };
    let etcd = Some(&replicas);
    let mut pipeline = Pipeline::create(&c).await;
    agrees_again(&c, etcd, &mut pipeline, Instant::now(), "before any pause").await;
    let mut targets = vec![
        Target::Etcd,
        Target::ControlPlane,
        Target::Executor(rng.below(EXECUTORS as u64) as usize),
    ];
    // Fisher-Yates, from the seed.
    for i in (1..targets.len()).rev() {
        targets.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for (i, target) in targets.into_iter().enumerate() {
        let length = random_length_on_etcd(&mut rng, target);
        let what = format!("pause {i} (seed {seed}, etcd store): {target:?} for {length:?}");
        println!("{what}");
        let resumed = pause(&c, etcd, &mut pipeline, target, length).await;
        agrees_again(&c, etcd, &mut pipeline, resumed, &what).await;
    }
}

/// Two control-plane replicas on a test-owned etcd, the executors given both URLs: each
/// run pauses etcd, each replica and one executor, once each, in a random order and for
/// random lengths. A paused leader is replaced by the other replica; once resumed it
/// must step down without disturbing the executors' agreement with the new leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_pauses_of_two_replicas_etcd_or_an_executor_leave_one_agreed_epoch_after_each() {
    let (mut rng, seed) = Rng::from_env("WHARF_PAUSE_SEED");
    println!("pause sequence seed: {seed} (replay with WHARF_PAUSE_SEED={seed})");
    let (c, replicas) = start_replicated(EXECUTORS).await;
    let etcd = Some(&replicas);
    let mut pipeline = Pipeline::create(&c).await;
    agrees_again(&c, etcd, &mut pipeline, Instant::now(), "before any pause").await;
    let mut targets = vec![
        Target::Etcd,
        Target::ControlPlane,
        Target::SecondReplica,
        Target::Executor(rng.below(EXECUTORS as u64) as usize),
    ];
    for i in (1..targets.len()).rev() {
        targets.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for (i, target) in targets.into_iter().enumerate() {
        let length = random_length_on_etcd(&mut rng, target);
        let what = format!("pause {i} (seed {seed}, two replicas): {target:?} for {length:?}");
        println!("{what}");
        let resumed = pause(&c, etcd, &mut pipeline, target, length).await;
        agrees_again(&c, etcd, &mut pipeline, resumed, &what).await;
    }
}

/// Two control-plane replicas on a test-owned etcd (the first is the cluster's `cp`, the
/// address admin calls go to: a follower forwards them) and `n` executors given both
/// URLs, on the shared JetStream log, with [`LEASE_MS`] and [`ELECTION_TTL_SECS`].
async fn start_replicated(n: usize) -> (TestCluster, Replicas) {
    let etcd = TestEtcd::start();
    let dir = KeepOnFailure::new();
    let key: [u8; 32] = rand::random();
    let replica = |name: &str| {
        wharf_harness::etcd::control_plane_replica_with_ttl(
            dir.path(),
            name,
            &etcd.endpoint,
            ETCD_PREFIX,
            &key,
            LEASE_MS,
            ELECTION_TTL_SECS,
            &[],
        )
    };
    let mut a = replica("cp-a");
    let addr = a.listen_addr().await;
    let mut b = replica("cp-b");
    let b_addr = b.listen_addr().await;
    let urls = format!("http://{addr},http://{b_addr}");
    let mut executors = Vec::new();
    for i in 0..n {
        let id = format!("exec-{}", i + 1);
        let d = dir.path().join(&id);
        let args = vec![
            "--listen".into(),
            format!("127.0.0.{}:0", i + 2),
            "--control-plane".into(),
            urls.clone(),
            "--data-dir".into(),
            d.display().to_string(),
            "--executor-id".into(),
            id,
            "--graceful-timeout-ms".into(),
            "3000".into(),
            "--nats-url".into(),
            NATS_URL.into(),
        ];
        let mut p = Proc::spawn(wharf_harness::bin("wharf-executor"), args, &d);
        p.listen_addr().await;
        executors.push(p);
    }
    let c = TestCluster {
        dir,
        cp: a,
        addr,
        executors,
        tls: None,
    };
    c.wait_alive(n).await;
    (
        c,
        Replicas {
            etcd,
            second: Some(b),
        },
    )
}
