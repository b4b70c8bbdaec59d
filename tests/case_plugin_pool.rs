//! The plugin runtime is a bounded pool (`--plugin-threads`, executor/src/runtime.rs), not a
//! thread per instance, and the executor's own work (gRPC, heartbeats) never waits for it. A real control plane and one
//! real executor in each test.
//!
//! - More plugin stops that block their thread and ignore cancellation than the pool has
//!   workers: the executor keeps answering and keeps its lease, the abandoned instances
//!   are shown until their calls return, the pool is written off, and a connector created
//!   after that runs (RUNNING, offsets committed) while the stuck calls still hold every
//!   worker of the old runtime, which is shut down once its last instance ended.
//! - An executor hosting 200 tasks runs them on a bounded number of threads.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wharf::pb::v1 as pb;
use wharf::pb::v1::executor_client::ExecutorClient;
use wharf_harness::cluster::{CONVERGE, TestCluster};
use wharf_harness::prometheus::{free_addr, http_get};
use wharf_harness::wait_until;

/// Plugin worker threads of the executor in the write-off test.
const PLUGIN_THREADS: usize = 4;
/// Tasks whose stop blocks: more than the pool has workers.
const STUCK_TASKS: u32 = 6;
/// How long each stuck stop holds its thread, in milliseconds: long enough for a new
/// connector to start and commit meanwhile.
const STOP_BLOCK_MS: u64 = 20_000;
/// Longest an executor or admin call may take meanwhile.
const CALL_BOUND: Duration = Duration::from_secs(2);
/// Name of the plugin runtime's threads (`runtime::PLUGIN_THREAD_NAME`).
const PLUGIN_THREAD_NAME: &str = "wharf-plugin";

/// Threads of process `pid` by name (`/proc/PID/task/*/comm`).
fn thread_names(pid: i32) -> std::collections::BTreeMap<String, usize> {
    let mut names = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc/PID/task") {
        let Ok(entry) = entry else { continue };
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        *names.entry(comm.trim().to_owned()).or_insert(0) += 1;
    }
    names
}

/// Threads of process `pid`: all of them, and those of the plugin runtime.
fn threads_of(pid: i32) -> (usize, usize) {
    let names = thread_names(pid);
    (
        names.values().sum(),
        names.get(PLUGIN_THREAD_NAME).copied().unwrap_or(0),
    )
}

/// A cluster whose one executor runs `plugin_threads` plugin workers and serves its
/// metrics at the returned address.
async fn cluster(plugin_threads: usize) -> (TestCluster, String) {
    let mut c = TestCluster::start(0).await;
    let metrics = free_addr("127.0.0.2");
    c.add_executor_with(
        0,
        vec![
            "--plugin-threads".into(),
            plugin_threads.to_string(),
            "--metrics-listen".into(),
            metrics.clone(),
        ],
    )
    .await;
    c.wait_alive(1).await;
    (c, metrics)
}

async fn executor_client(c: &TestCluster) -> ExecutorClient<tonic::transport::Channel> {
    let addr =
        std::fs::read_to_string(c.executors[0].data_dir.join("listen.addr")).expect("listen.addr");
    ExecutorClient::connect(format!("http://{}", addr.trim()))
        .await
        .expect("connect to the executor")
}

/// ListAssignments, which must answer within [`CALL_BOUND`].
async fn assignments(
    executor: &mut ExecutorClient<tonic::transport::Channel>,
) -> pb::ListAssignmentsResponse {
    let started = Instant::now();
    let r = executor
        .list_assignments(pb::ListAssignmentsRequest {})
        .await
        .expect("ListAssignments answers")
        .into_inner();
    assert!(
        started.elapsed() < CALL_BOUND,
        "ListAssignments took {:?}",
        started.elapsed()
    );
    r
}

fn create(c: &TestCluster, name: &str, config: Value) {
    let r = c.call("CreateConnector", json!({ "name": name, "config": config }));
    assert_eq!(r.code, 0, "create {name}: {}", r.err);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stops_stuck_on_every_plugin_worker_write_the_pool_off_and_new_connectors_run_on_a_fresh_one()
 {
    let (c, metrics) = cluster(PLUGIN_THREADS).await;
    let pid = c.executors[0].pid();
    let bystander = "bystander";
    create(&c, bystander, c.source_config(bystander, 1));
    c.wait_state(bystander, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;

    let stuck = "stuck";
    let mut config = c.source_config(stuck, STUCK_TASKS);
    config["test.tasks"] = json!(STUCK_TASKS.to_string());
    config["test.stop.block.ms"] = json!(STOP_BLOCK_MS.to_string());
    config["cleanup.timeout.ms"] = json!("500");
    // One attempt: a retry would start cleanup-only instances whose stops block again.
    config["cleanup.max.attempts"] = json!("1");
    config["cleanup.policy"] = json!("give-up");
    create(&c, stuck, config);
    c.wait_state(
        stuck,
        "STATE_RUNNING",
        "STATE_RUNNING",
        STUCK_TASKS as usize,
    )
    .await;
    let (epoch, state) = c.first_executor_epoch_and_state();
    assert_eq!(state, "EXECUTOR_STATE_ALIVE");
    let (_, plugin_threads) = threads_of(pid);
    assert_eq!(plugin_threads, PLUGIN_THREADS, "one plugin runtime");

    let mut executor = executor_client(&c).await;
    let r = c.call("DeleteConnector", json!({ "name": stuck }));
    assert_eq!(r.code, 0, "{}", r.err);
    // Every worker of the pool is held by a stuck stop. The other stops never got one
    // (cancelled while queued), but their instance may still be shown abandoned: a poll
    // cancelled at its await point is dropped only by a free worker, so it stays in flight
    // while all of them are held. So: at least one abandoned instance per worker, at most
    // every instance of the connector. The executor answers promptly all along.
    let shown = wait_until(
        "the stops stuck on every plugin worker to be shown abandoned",
        CONVERGE,
        || {
            let mut executor = executor.clone();
            async move {
                let r = assignments(&mut executor).await;
                let tasks = r.tasks.iter().filter(|t| t.abandoned).count();
                let connectors = r.connectors.iter().filter(|t| t.abandoned).count();
                (PLUGIN_THREADS..=STUCK_TASKS as usize + 1)
                    .contains(&(tasks + connectors))
                    .then_some(r)
            }
        },
    )
    .await;
    assert!(!shown.lease_expired);
    wait_until("the deletion to end", CONVERGE, || async {
        let r = c.call("GetConnectorStatus", json!({ "name": stuck }));
        (r.code != 0).then_some(())
    })
    .await;

    // A connector created now is the next instance: the pool is written off and it runs
    // on a fresh runtime while the stuck calls still hold every old worker.
    let fresh = "fresh";
    create(&c, fresh, c.source_config(fresh, 1));
    c.wait_state(fresh, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    wait_until("the new connector to commit offsets", CONVERGE, || async {
        c.committed_seq(fresh).map(|_| ())
    })
    .await;
    let r = assignments(&mut executor).await;
    assert!(
        r.abandoned > 0,
        "the new connector committed while the stuck calls still ran"
    );
    let (_, plugin_threads) = threads_of(pid);
    assert_eq!(
        plugin_threads,
        2 * PLUGIN_THREADS,
        "the old and the fresh runtime"
    );
    let page = http_get(&metrics, "/metrics").1;
    assert!(
        page.lines()
            .any(|l| l == "wharf_executor_plugin_runtimes_written_off_total 1"),
        "{page}"
    );
    assert!(
        c.executors[0].log().contains("it is written off"),
        "the write-off is logged"
    );
    assert_eq!(
        c.first_executor_epoch_and_state(),
        (epoch.clone(), "EXECUTOR_STATE_ALIVE".to_owned())
    );

    // Once the stuck calls returned, nothing is abandoned and the bystander, still on the
    // old runtime, goes on.
    wait_until(
        "the abandoned instances to go once their calls returned",
        Duration::from_millis(STOP_BLOCK_MS) + CONVERGE,
        || {
            let mut executor = executor.clone();
            async move { (assignments(&mut executor).await.abandoned == 0).then_some(()) }
        },
    )
    .await;
    let before = c.committed_seq(bystander).unwrap_or(0);
    wait_until("the bystander to commit more offsets", CONVERGE, || async {
        (c.committed_seq(bystander).unwrap_or(0) > before).then_some(())
    })
    .await;

    // Its last instance gone, the old runtime is shut down and its threads end.
    let r = c.call("DeleteConnector", json!({ "name": bystander }));
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until("the old runtime's threads to end", CONVERGE, || async {
        (threads_of(pid).1 == PLUGIN_THREADS).then_some(())
    })
    .await;
    // The line is written before the threads end, but reaches the captured log through a
    // pipe: wait for it rather than expect it at the moment the threads are gone.
    wait_until(
        "the old runtime's shutdown to be logged",
        CONVERGE,
        || async {
            c.executors[0]
                .log()
                .contains("retired plugin runtime shut down")
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        c.first_executor_epoch_and_state(),
        (epoch, "EXECUTOR_STATE_ALIVE".to_owned())
    );
}

/// Connectors of the thread-count test, and tasks of each.
const CONNECTORS: u32 = 20;
const TASKS_EACH: u32 = 10;
/// Plugin worker threads of the executor in the thread-count test.
const FEW_PLUGIN_THREADS: usize = 8;
/// Threads the executor may have besides its plugin workers: its own runtime's 4 workers
/// and at most 64 blocking threads (`launcher::RUNTIME_WORKER_THREADS`,
/// `RUNTIME_MAX_BLOCKING_THREADS`), the main thread and a few spare. One thread per
/// instance would be more than 220.
const OTHER_THREADS_BOUND: usize = 4 + 64 + 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_hosting_200_tasks_runs_them_on_a_bounded_number_of_threads() {
    let (c, _metrics) = cluster(FEW_PLUGIN_THREADS).await;
    let pid = c.executors[0].pid();
    for i in 0..CONNECTORS {
        let name = format!("many-{i}");
        let mut config = c.source_config(&name, TASKS_EACH);
        // A record a second per task keeps 200 tasks light on a small machine.
        config["test.poll.block.ms"] = json!("1000");
        create(&c, &name, config);
    }
    for i in 0..CONNECTORS {
        c.wait_state(
            &format!("many-{i}"),
            "STATE_RUNNING",
            "STATE_RUNNING",
            TASKS_EACH as usize,
        )
        .await;
    }
    let mut executor = executor_client(&c).await;
    let r = assignments(&mut executor).await;
    assert_eq!(r.tasks.len(), (CONNECTORS * TASKS_EACH) as usize);
    wait_until("the last connector to commit offsets", CONVERGE, || async {
        c.committed_seq(&format!("many-{}", CONNECTORS - 1))
            .map(|_| ())
    })
    .await;

    let (all, plugin) = threads_of(pid);
    assert_eq!(
        plugin, FEW_PLUGIN_THREADS,
        "{all} threads in all, {plugin} of them plugin workers"
    );
    assert!(
        all <= FEW_PLUGIN_THREADS + OTHER_THREADS_BOUND,
        "{all} threads for {} instances: {:?}",
        CONNECTORS * (TASKS_EACH + 1),
        thread_names(pid)
    );
}
