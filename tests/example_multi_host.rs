//! `examples/multi-host/run.sh` passes: one control plane and three executor processes on
//! 127.0.0.1-4, a test-owned NATS JetStream (the script starts its own nats-server on a
//! free port) and the PostgreSQL at 127.0.0.1:5432 (scripts/setup-services; the script
//! creates and drops its own database); `postgres-audit` -> `file-sink` across executors;
//! the executor hosting task 0 is killed during the delete and the script checks that the
//! cleanup finished on another executor and left nothing in the catalog. Every process
//! runs with mutual TLS (certificates from `wharf-control-plane certs`), admin calls carry
//! a bearer token or the admin client certificate, and a call with neither is refused.
//! The Kafka flavour (`RECORD_LOG=kafka`) runs the same on a tansu broker the script
//! starts, and checks the sink's active topics and its consumer group in its ledger.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wharf_harness::KeepOnFailure;

/// Upper bound on the whole script, in seconds (it takes about 15 s; each of its waits is
/// bounded by STEP_TIMEOUT_S).
const SCRIPT_TIMEOUT_SECS: u64 = 240;
/// Bound on each wait inside the script, in seconds.
const STEP_TIMEOUT_SECS: u64 = 60;
/// How often the test looks whether the script exited, in milliseconds.
const EXIT_POLL_INTERVAL_MS: u64 = 100;

#[test]
fn multi_host_example_passes_its_own_checks() {
    run_example("nats", &[]);
}

#[test]
fn multi_host_example_on_kafka_passes_its_own_checks() {
    run_example(
        "kafka",
        &["through Kafka consumer group connect-mh-sink (in its resource ledger)"],
    );
}

/// Runs the script with `RECORD_LOG=record_log` and checks its output, which must also
/// hold each of `also`.
fn run_example(record_log: &str, also: &[&str]) {
    let dir = KeepOnFailure::new();
    let work = dir.path().join("work");
    let output = dir.path().join("run.out");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/multi-host/run.sh");
    let log = std::fs::File::create(&output).expect("output file");
    let mut child = Command::new("bash")
        .arg(&script)
        .env("WORK_DIR", &work)
        .env("WHARF_BIN_DIR", wharf_harness::bin_dir())
        .env("STEP_TIMEOUT_S", STEP_TIMEOUT_SECS.to_string())
        .env("RECORD_LOG", record_log)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("clone"))
        .stderr(log)
        .spawn()
        .expect("start examples/multi-host/run.sh");
    let deadline = Instant::now() + Duration::from_secs(SCRIPT_TIMEOUT_SECS);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the script") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            // SIGTERM: the script's trap stops the processes it started.
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(EXIT_POLL_INTERVAL_MS));
    };
    let text = std::fs::read_to_string(&output).unwrap_or_default();
    match status {
        Some(s) if s.success() => {
            assert!(
                text.contains("All checks passed."),
                "the script exited 0 without its final line:\n{text}"
            );
            assert!(
                text.contains("task 0's cleanup finished on"),
                "the script did not show where task 0's cleanup finished:\n{text}"
            );
            assert!(
                text.contains("without a token or client certificate: Unauthenticated")
                    && text.contains("every executor is reached over mutual TLS"),
                "the script did not show the cluster running with mutual TLS:\n{text}"
            );
            for line in also {
                assert!(
                    text.contains(line),
                    "the script did not show {line:?}:\n{text}"
                );
            }
        }
        Some(s) => panic!("examples/multi-host/run.sh failed ({s}):\n{text}"),
        None => {
            panic!("examples/multi-host/run.sh ran longer than {SCRIPT_TIMEOUT_SECS} s:\n{text}")
        }
    }
}
