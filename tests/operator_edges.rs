//! Small things an operator meets first, each with the real binary:
//!
//! - a restart of `wharf-dev` on the same data dir logs no WARN: its previous run's
//!   executor, known from the store at an address that is gone, is not a problem an
//!   operator must act on (the new run's executor registers under the same id);
//! - `wharf-bench --help` prints the usage and exits 0, and a wrong argument is one line
//!   and exit code 2, never a stack backtrace.
//!
//! Build first: `cargo build -p wharf-dev -p wharf-bench`.

use serde_json::json;
use wharf_harness::cluster::{CONVERGE, call_at};
use wharf_harness::{KeepOnFailure, Proc, wait_until};

/// Starts `wharf-dev` on `data` and waits until its executor is ALIVE at an epoch above
/// `after`; returns the process and that epoch.
async fn dev_alive(data: &std::path::Path, after: u64) -> (Proc, u64) {
    let mut dev = Proc::spawn(
        wharf_harness::bin("wharf-dev"),
        vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--rest-listen".into(),
            "off".into(),
            "--data-dir".into(),
            data.display().to_string(),
        ],
        data,
    );
    let addr = dev.listen_addr().await;
    let epoch = wait_until("the dev executor to be ALIVE", CONVERGE, || {
        let r = call_at(&addr, "wharf.v1.ConnectorAdmin/ListExecutors", &json!({}));
        let e = &r.body["executors"][0];
        let epoch: u64 = e["epoch"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let alive = e["state"] == "EXECUTOR_STATE_ALIVE" && epoch > after;
        async move { alive.then_some(epoch) }
    })
    .await;
    (dev, epoch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dev_mode_restart_logs_no_warning_about_the_previous_runs_executor() {
    let dir = KeepOnFailure::new();
    let data = dir.path().join("dev");
    let (mut first, epoch) = dev_alive(&data, 0).await;
    assert_eq!(
        first.terminate(CONVERGE).await,
        Some(0),
        "the first run stops cleanly"
    );
    let before = first.log().len();
    let (mut second, _) = dev_alive(&data, epoch).await;
    let log = second.log();
    let restart = log.get(before..).unwrap_or_default();
    let warnings: Vec<&str> = restart.lines().filter(|l| l.contains(" WARN ")).collect();
    assert!(
        warnings.is_empty(),
        "the restart logged warnings: {warnings:#?}"
    );
    assert_eq!(second.terminate(CONVERGE).await, Some(0));
}

#[test]
fn wharf_bench_help_prints_the_usage_and_a_wrong_argument_no_backtrace() {
    let bench = wharf_harness::bin("wharf-bench");
    let help = std::process::Command::new(&bench)
        .arg("--help")
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run wharf-bench --help");
    let (out, err) = (
        String::from_utf8_lossy(&help.stdout),
        String::from_utf8_lossy(&help.stderr),
    );
    assert_eq!(help.status.code(), Some(0), "{out}{err}");
    assert!(
        out.starts_with("usage: wharf-bench --bin-dir DIR --out FILE"),
        "{out}"
    );
    assert!(!err.contains("backtrace"), "{err}");

    let wrong = std::process::Command::new(&bench)
        .arg("--no-such-flag")
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run wharf-bench --no-such-flag");
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert_eq!(wrong.status.code(), Some(2), "{err}");
    assert!(
        err.contains("unknown argument \"--no-such-flag\"") && !err.contains("backtrace"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_mode_offers_the_config_providers_it_is_given() {
    let dir = KeepOnFailure::new();
    let data = dir.path().join("dev");
    let secrets = dir.path().join("secrets");
    std::fs::create_dir_all(&secrets).expect("secrets dir");
    // The file provider without its root: exit code 2 naming the flag.
    let out = std::process::Command::new(wharf_harness::bin("wharf-dev"))
        .args([
            "--data-dir",
            &data.display().to_string(),
            "--config-providers",
            "file",
        ])
        .output()
        .expect("run wharf-dev");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--config-provider-root"), "{err}");

    let mut dev = Proc::spawn(
        wharf_harness::bin("wharf-dev"),
        vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--rest-listen".into(),
            "off".into(),
            "--metrics-listen".into(),
            "off".into(),
            "--enable-test-plugins".into(),
            "--config-providers".into(),
            "file".into(),
            "--config-provider-root".into(),
            secrets.display().to_string(),
            "--data-dir".into(),
            data.display().to_string(),
        ],
        &data,
    );
    let addr = dev.listen_addr().await;
    wait_until("the dev executor to be ALIVE", CONVERGE, || async {
        let r = call_at(&addr, "wharf.v1.ConnectorAdmin/ListExecutors", &json!({}));
        (r.body["executors"][0]["state"] == "EXECUTOR_STATE_ALIVE").then_some(())
    })
    .await;
    let validate = |topic: &str| {
        call_at(
            &addr,
            "wharf.v1.ConnectorAdmin/ValidateConnectorConfig",
            &json!({ "config": {
                "connector.class": "test-source",
                "lifecycle.path": dir.path().join("lifecycle.jsonl").display().to_string(),
                "test.topic": topic,
            } }),
        )
    };
    let offered = validate("${file:topics.properties:topic}");
    assert_eq!(offered.code, 0, "{}", offered.err);
    assert_eq!(
        offered.body["errorCount"].as_u64().unwrap_or(0),
        0,
        "{}",
        offered.body
    );
    let not_offered = validate("${env:TOPIC}");
    assert_eq!(not_offered.code, 0, "{}", not_offered.err);
    assert!(
        not_offered
            .body
            .to_string()
            .contains("\\\"env\\\" is not configured"),
        "{}",
        not_offered.body
    );
    assert_eq!(dev.terminate(CONVERGE).await, Some(0));
}
