//! What only the embedded log promises: one process per directory (a file lock), exact
//! fetch sizes, a reader told its consumer was deleted, nothing acknowledged lost across
//! kill -9 of the process, and bounded memory under a slow reader.

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use wharf_executor::log::{EmbeddedLog, LogError, LogLimits, LogRecord, RecordLog, StartPosition};

use crate::common::{
    DEADLINE, EMPTY_FETCH_WAIT, FETCH_WAIT, assert_nothing_more, read_and_ack, recs, topics,
};

/// Environment variable that turns [`child_process_for_kill_test`] into the appender.
const CHILD_DIR_ENV: &str = "WHARF_LOG_KILL_CHILD_DIR";

#[tokio::test]
async fn a_reader_of_a_deleted_consumer_is_told_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = EmbeddedLog::open(dir.path()).await.expect("open");
    log.append("t", recs("v", 0..5)).await.expect("append");
    let mut reader = log
        .consumer("wharf-sink-s", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    read_and_ack(reader.as_mut(), 5).await;
    assert_nothing_more(reader.as_mut()).await;

    log.delete_consumer("wharf-sink-s").await.expect("delete");
    assert!(matches!(
        reader.fetch(1, EMPTY_FETCH_WAIT).await,
        Err(LogError::ConsumerDeleted(_))
    ));
}

#[tokio::test]
async fn fetch_sizes_and_unacknowledged_records_per_reader_are_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let limits = LogLimits {
        max_fetch_records: 10,
        max_fetch_bytes: 1_000_000,
        max_in_flight_records: 25,
        max_append_in_flight_records: 7,
    };
    let log = EmbeddedLog::open_with(dir.path(), limits)
        .await
        .expect("open");
    let positions = log.append("t", recs("v", 0..100)).await.expect("append");
    assert_eq!(positions, (0..100).collect::<Vec<_>>());
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let mut held = Vec::new();
    for expected in [10, 10, 5] {
        let batch = reader.fetch(1_000, FETCH_WAIT).await.expect("fetch");
        assert_eq!(batch.len(), expected);
        held.extend(batch.into_iter().map(|d| d.ack));
    }
    assert_nothing_more(reader.as_mut()).await;
    reader.ack(&held[..5]).await.expect("ack");
    assert_eq!(
        reader.fetch(1_000, FETCH_WAIT).await.expect("fetch").len(),
        5
    );

    let small = LogLimits {
        max_fetch_bytes: 1,
        ..limits
    };
    drop(reader);
    drop(log);
    let log = EmbeddedLog::open_with(dir.path(), small)
        .await
        .expect("reopen");
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    assert_eq!(
        reader.fetch(1_000, FETCH_WAIT).await.expect("fetch").len(),
        1,
        "a byte bound below one record still delivers one"
    );
}

#[tokio::test]
async fn one_fetch_returns_every_record_available_within_the_bounds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = EmbeddedLog::open(dir.path()).await.expect("open");
    log.append("t", recs("a", 0..3)).await.expect("append");
    log.append("t", recs("a", 3..5)).await.expect("append");
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let batch = reader.fetch(100, FETCH_WAIT).await.expect("fetch");
    assert_eq!(batch.len(), 5);
}

#[tokio::test]
async fn a_second_open_of_one_dir_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _log = EmbeddedLog::open(dir.path()).await.expect("open");
    assert!(matches!(
        EmbeddedLog::open(dir.path()).await,
        Err(LogError::Unavailable(_))
    ));
}

/// Appends in a loop, printing `appended <head>` after each acknowledged append and
/// `acked <floor>` after acknowledging everything below `floor`. Only when started by
/// [`nothing_acknowledged_is_lost_or_duplicated_across_kill_9`]; otherwise returns at once.
#[tokio::test]
async fn child_process_for_kill_test() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else {
        return;
    };
    let log = EmbeddedLog::open(&dir).await.expect("open");
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let mut next = log.head("t");
    loop {
        log.append("t", recs("v", next..next + 50))
            .await
            .expect("append");
        next += 50;
        println!("appended {next}");
        let batch = reader.fetch(30, FETCH_WAIT).await.expect("fetch");
        let tokens: Vec<_> = batch.iter().map(|d| d.ack.clone()).collect();
        reader.ack(&tokens).await.expect("ack");
        if let Some(last) = tokens.last() {
            println!("acked {}", last.position + 1);
        }
    }
}

async fn run_child_until_killed(dir: &Path, min_appended: u64) -> (u64, u64) {
    let exe = std::env::current_exe().expect("test binary");
    let mut child = tokio::process::Command::new(exe)
        .args([
            "embedded::child_process_for_kill_test",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR_ENV, dir)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn child");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let (mut appended, mut acked) = (0u64, 0u64);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while appended < min_appended {
        let line = tokio::time::timeout_at(deadline, lines.next_line())
            .await
            .expect("child progress before the deadline")
            .expect("read child stdout")
            .expect("child exited early");
        if let Some(n) = line.strip_prefix("appended ") {
            appended = n.parse().expect("number");
        } else if let Some(n) = line.strip_prefix("acked ") {
            acked = n.parse().expect("number");
        }
    }
    // SIGKILL: no destructor, no flush runs in the child.
    child.start_kill().expect("kill -9");
    child.wait().await.expect("reap child");
    (appended, acked)
}

#[tokio::test]
async fn nothing_acknowledged_is_lost_or_duplicated_across_kill_9() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (appended, acked) = run_child_until_killed(dir.path(), 2_000).await;
    let (appended2, acked2) = run_child_until_killed(dir.path(), appended + 1_000).await;
    assert!(appended2 > appended && acked2 >= acked);

    let log = EmbeddedLog::open(dir.path()).await.expect("reopen");
    let head = log.head("t");
    assert!(
        head >= appended2,
        "every acknowledged append is there: head {head}, acknowledged {appended2}"
    );
    assert_eq!(head % 50, 0, "appends are all or nothing");

    // Every position holds exactly its own record: no loss, no duplicate.
    let mut reader = log
        .consumer("audit", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let all = read_and_ack(reader.as_mut(), head as usize).await;
    for (i, (_, offset, value)) in all.iter().enumerate() {
        assert_eq!(
            (*offset, value.as_str()),
            (i as u64, format!("v{i}").as_str())
        );
    }

    // The killed consumer resumes after what it acknowledged, nothing earlier.
    let mut resumed = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let batch = resumed.fetch(1_000, FETCH_WAIT).await.expect("fetch");
    let first = batch.first().map(|d| d.ack.position).expect("records left");
    assert!(
        first >= acked2,
        "acknowledged records are not delivered again: first {first}, acknowledged below {acked2}"
    );
}

/// Environment variable that turns [`child_process_for_memory_test`] into the workload.
const MEMORY_CHILD_DIR_ENV: &str = "WHARF_LOG_MEMORY_CHILD_DIR";
/// Appends made by the memory workload, of [`MEMORY_RECORDS_PER_APPEND`] records each.
const MEMORY_APPENDS: u64 = 200;
/// Records per append of the memory workload.
const MEMORY_RECORDS_PER_APPEND: u64 = 250;
/// Value size of the memory workload's records, in bytes (200 x 250 x 4 KiB = 200 MiB).
const MEMORY_VALUE_BYTES: usize = 4 * 1024;
/// Peak resident memory the workload may reach, in KiB.
const MEMORY_PEAK_LIMIT_KIB: u64 = 160 * 1024;

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A fast source and a slow reader (it fetches one batch per ten appends): prints
/// `peak_rss_kib <n>` and `read <n>` at the end. Only when started by
/// [`a_slow_reader_keeps_memory_bounded_while_the_log_grows`]; otherwise returns at once.
#[tokio::test]
async fn child_process_for_memory_test() {
    let Ok(dir) = std::env::var(MEMORY_CHILD_DIR_ENV) else {
        return;
    };
    let log = EmbeddedLog::open(&dir).await.expect("open");
    let mut reader = log
        .consumer("slow", &topics(&["big"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let mut read = 0usize;
    for i in 0..MEMORY_APPENDS {
        let batch: Vec<LogRecord> = (0..MEMORY_RECORDS_PER_APPEND)
            .map(|n| LogRecord {
                key: None,
                value: vec![(n % 251) as u8; MEMORY_VALUE_BYTES],
                headers: vec![],
                timestamp_ms: None,
                partition: None,
            })
            .collect();
        log.append("big", batch).await.expect("append");
        if i % 10 == 0 {
            let got = reader.fetch(500, FETCH_WAIT).await.expect("fetch");
            read += got.len();
            let tokens: Vec<_> = got.into_iter().map(|d| d.ack).collect();
            reader.ack(&tokens).await.expect("ack");
        }
    }
    println!("\nread {read}");
    println!("peak_rss_kib {}", peak_rss_kib());
}

#[tokio::test]
async fn a_slow_reader_keeps_memory_bounded_while_the_log_grows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    let out = tokio::process::Command::new(exe)
        .args([
            "embedded::child_process_for_memory_test",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(MEMORY_CHILD_DIR_ENV, dir.path())
        .output()
        .await
        .expect("run child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}");
    let value = |key: &str| -> u64 {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {stdout}"))
    };
    let (read, peak) = (value("read "), value("peak_rss_kib "));
    let appended_kib =
        MEMORY_APPENDS * MEMORY_RECORDS_PER_APPEND * MEMORY_VALUE_BYTES as u64 / 1024;
    eprintln!(
        "appended {appended_kib} KiB, the slow reader read {read} records, peak RSS {peak} KiB"
    );
    assert!(
        read < MEMORY_APPENDS * MEMORY_RECORDS_PER_APPEND / 2,
        "the reader is slow"
    );
    assert!(
        peak < MEMORY_PEAK_LIMIT_KIB,
        "peak RSS {peak} KiB while {appended_kib} KiB were appended"
    );
}
