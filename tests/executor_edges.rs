//! An executor's edges with real processes: one process per data dir, one record log per
//! cluster, and no plaintext listener on a non-loopback address without `--insecure`.
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::time::Duration;

use wharf_harness::audit::start_nats;
use wharf_harness::cluster::TestCluster;
use wharf_harness::{Proc, wait_until};

/// Upper bound on a refused process's exit.
const EXIT_DEADLINE: Duration = Duration::from_secs(20);

/// Waits until `p` exits by itself; its exit code.
async fn exit_code(p: &mut Proc) -> Option<i32> {
    let mut child = p.child.take().expect("running");
    let status = wait_until("the process to exit by itself", EXIT_DEADLINE, || {
        let r = child.try_wait().ok().flatten();
        async move { r }
    })
    .await;
    status.code()
}

/// Flags of an executor on `listen` with data dir `data_dir`, registering with `c`.
fn executor_args(c: &TestCluster, listen: &str, data_dir: &std::path::Path) -> Vec<String> {
    vec![
        "--listen".into(),
        listen.into(),
        "--control-plane".into(),
        c.cp_url(),
        "--data-dir".into(),
        data_dir.display().to_string(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_executor_on_a_data_dir_in_use_exits_naming_the_holder() {
    let mut c = TestCluster::start(0).await;
    // The NATS log: the embedded one would refuse the second process by its own file lock.
    let nats = start_nats(c.dir.path()).await;
    c.add_executor_with(0, vec!["--nats-url".into(), nats.url.clone()])
        .await;
    c.wait_alive(1).await;
    let data_dir = c.dir.path().join("exec-1");
    let holder = c.executors[0].pid();
    let mut args = executor_args(&c, "127.0.0.3:0", &data_dir);
    args.extend(["--nats-url".into(), nats.url.clone()]);
    let mut second = Proc::spawn(
        wharf_harness::bin("wharf-executor"),
        args,
        &c.dir.path().join("second"),
    );
    let code = exit_code(&mut second).await;
    let log = second.log();
    assert!(matches!(code, Some(c) if c != 0), "{code:?}: {log}");
    assert!(
        log.contains(&format!("pid {holder}, executor exec-1"))
            && log.contains(&data_dir.display().to_string()),
        "{log}"
    );
    // The holder was not disturbed: still the one ALIVE executor, never fenced.
    c.wait_alive(1).await;
    assert!(
        !c.executors[0].log().contains("fenced"),
        "{}",
        c.executors[0].log()
    );
}
