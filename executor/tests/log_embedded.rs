//! The embedded record log against real redb files: round trip, order, sharing, restart,
//! kill -9, consumer deletion and bounds.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use wharf_executor::log::{
    EmbeddedLog, LogConsumer, LogError, LogLimits, LogRecord, RecordLog, StartPosition,
};

/// Longest any single condition in these tests may take.
const DEADLINE: Duration = Duration::from_secs(20);
/// Wait used when a fetch is expected to return nothing.
const EMPTY_FETCH_WAIT: Duration = Duration::from_millis(200);
/// Wait used when a fetch is expected to return records.
const FETCH_WAIT: Duration = Duration::from_secs(5);
/// Environment variable that turns [`child_process_for_kill_test`] into the appender.
const CHILD_DIR_ENV: &str = "WHARF_LOG_KILL_CHILD_DIR";

fn rec(value: &str) -> LogRecord {
    LogRecord {
        key: Some(value.as_bytes().to_vec()),
        value: value.as_bytes().to_vec(),
        headers: vec![("h".into(), vec![0, 255])],
        timestamp_ms: Some(1_700_000_000_000),
    }
}

fn recs(prefix: &str, range: std::ops::Range<u64>) -> Vec<LogRecord> {
    range.map(|i| rec(&format!("{prefix}{i}"))).collect()
}

fn topics(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// Fetches and acknowledges until `n` records were read; returns (topic, offset, value).
async fn read_and_ack(reader: &mut dyn LogConsumer, n: usize) -> Vec<(String, u64, String)> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while out.len() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "read {} of {n}",
            out.len()
        );
        let batch = reader.fetch(1_000, FETCH_WAIT).await.expect("fetch");
        let tokens: Vec<_> = batch.iter().map(|d| d.ack.clone()).collect();
        for d in batch {
            out.push((
                d.record.topic.clone(),
                d.record.offset,
                String::from_utf8(d.record.value).expect("utf8"),
            ));
        }
        reader.ack(&tokens).await.expect("ack");
    }
    out
}

async fn assert_nothing_more(reader: &mut dyn LogConsumer) {
    let batch = reader.fetch(1_000, EMPTY_FETCH_WAIT).await.expect("fetch");
    let got: Vec<_> = batch.iter().map(|d| d.ack.position).collect();
    assert!(got.is_empty(), "expected no more records, got {got:?}");
}

#[tokio::test]
async fn appended_records_come_back_once_in_order_with_their_contents() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = EmbeddedLog::open(dir.path()).await.expect("open");
    assert_eq!(
        log.append("t", recs("a", 0..3)).await.expect("append"),
        vec![0, 1, 2]
    );
    assert_eq!(
        log.append("t", recs("a", 3..5)).await.expect("append"),
        vec![3, 4]
    );

    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let batch = reader.fetch(100, FETCH_WAIT).await.expect("fetch");
    assert_eq!(batch.len(), 5);
    for (i, d) in batch.iter().enumerate() {
        let expected = rec(&format!("a{i}"));
        assert_eq!(d.record.topic, "t");
        assert_eq!(d.record.offset, i as u64);
        assert_eq!(d.ack.position, i as u64);
        assert_eq!(d.record.value, expected.value);
        assert_eq!(d.record.key, expected.key);
        assert_eq!(d.record.headers, expected.headers);
        assert_eq!(d.record.timestamp_ms, expected.timestamp_ms);
    }
    let tokens: Vec<_> = batch.iter().map(|d| d.ack.clone()).collect();
    reader.ack(&tokens).await.expect("ack");
    assert_nothing_more(reader.as_mut()).await;
}

#[tokio::test]
async fn order_is_kept_per_topic_when_one_reader_reads_several() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = EmbeddedLog::open(dir.path()).await.expect("open");
    for i in 0..20u64 {
        log.append("x", recs("x", i * 5..i * 5 + 5))
            .await
            .expect("append x");
        log.append("y", recs("y", i * 3..i * 3 + 3))
            .await
            .expect("append y");
    }
    let mut reader = log
        .consumer("c", &topics(&["x", "y"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let got = read_and_ack(reader.as_mut(), 160).await;
    for (topic, prefix, n) in [("x", "x", 100u64), ("y", "y", 60u64)] {
        let seen: Vec<_> = got.iter().filter(|(t, _, _)| t == topic).collect();
        let expected: Vec<_> = (0..n).map(|i| (i, format!("{prefix}{i}"))).collect();
        let actual: Vec<_> = seen.iter().map(|(_, o, v)| (*o, v.clone())).collect();
        assert_eq!(actual, expected, "topic {topic} in order, once each");
    }
    assert_nothing_more(reader.as_mut()).await;
}

#[tokio::test]
async fn two_readers_of_one_consumer_share_the_records_without_duplicates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = EmbeddedLog::open(dir.path()).await.expect("open");
    log.append("t", recs("v", 0..1_000)).await.expect("append");
    let mut a = log
        .consumer("shared", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("a");
    let mut b = log
        .consumer("shared", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("b");

    // Interleaved, unacknowledged: b must not get what a holds.
    let first_a = a.fetch(10, FETCH_WAIT).await.expect("fetch a");
    let first_b = b.fetch(10, FETCH_WAIT).await.expect("fetch b");
    let pos = |v: &Vec<wharf_executor::log::Delivered>| -> BTreeSet<u64> {
        v.iter().map(|d| d.ack.position).collect()
    };
    assert_eq!(pos(&first_a), (0..10).collect());
    assert_eq!(pos(&first_b), (10..20).collect());
    a.ack(&first_a.iter().map(|d| d.ack.clone()).collect::<Vec<_>>())
        .await
        .expect("ack a");
    b.ack(&first_b.iter().map(|d| d.ack.clone()).collect::<Vec<_>>())
        .await
        .expect("ack b");

    // Then both concurrently until everything is read.
    let reader = |mut r: Box<dyn LogConsumer>| async move {
        let mut seen = Vec::new();
        loop {
            let batch = r.fetch(7, EMPTY_FETCH_WAIT).await.expect("fetch");
            if batch.is_empty() {
                return seen;
            }
            let tokens: Vec<_> = batch.iter().map(|d| d.ack.clone()).collect();
            seen.extend(tokens.iter().map(|t| t.position));
            r.ack(&tokens).await.expect("ack");
        }
    };
    let (sa, sb) = tokio::join!(tokio::spawn(reader(a)), tokio::spawn(reader(b)));
    let (sa, sb) = (sa.expect("reader a"), sb.expect("reader b"));
    let mut all: Vec<u64> = sa.iter().chain(sb.iter()).copied().collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (20..1_000).collect::<Vec<_>>(),
        "each record exactly once"
    );
}

#[tokio::test]
async fn records_of_a_dropped_reader_go_to_another_reader() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = EmbeddedLog::open(dir.path()).await.expect("open");
    log.append("t", recs("v", 0..10)).await.expect("append");
    let mut a = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("a");
    let held = a.fetch(4, FETCH_WAIT).await.expect("fetch");
    assert_eq!(held.len(), 4);
    let mut b = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("b");
    drop(a);
    let got = read_and_ack(b.as_mut(), 10).await;
    let mut offsets: Vec<u64> = got.iter().map(|(_, o, _)| *o).collect();
    offsets.sort_unstable();
    assert_eq!(offsets, (0..10).collect::<Vec<_>>());
    assert_nothing_more(b.as_mut()).await;
}

#[tokio::test]
async fn a_fetch_cancelled_midway_leaves_its_records_for_the_next_fetch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = EmbeddedLog::open(dir.path()).await.expect("open");
    log.append("t", recs("v", 0..10)).await.expect("append");
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    // A zero timeout polls the fetch once (it claims records and starts reading) and
    // then drops it, as a `select!` on a stop signal does.
    let first = tokio::time::timeout(Duration::ZERO, reader.fetch(10, FETCH_WAIT)).await;
    let mut seen: Vec<u64> = match first {
        Ok(batch) => batch
            .expect("fetch")
            .iter()
            .map(|d| d.ack.position)
            .collect(),
        Err(_elapsed) => Vec::new(),
    };
    let rest = 10 - seen.len();
    let got = read_and_ack(reader.as_mut(), rest).await;
    seen.extend(got.iter().map(|(_, o, _)| *o));
    seen.sort_unstable();
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_waiting_fetch_returns_as_soon_as_a_record_is_appended() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = EmbeddedLog::open(dir.path()).await.expect("open");
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let started = tokio::time::Instant::now();
    let fetch = tokio::spawn(async move { reader.fetch(10, DEADLINE).await });
    log.append("t", recs("v", 0..1)).await.expect("append");
    let batch = fetch.await.expect("join").expect("fetch");
    assert_eq!(batch.len(), 1);
    assert!(started.elapsed() < DEADLINE, "woken by the append");
}

#[tokio::test]
async fn after_a_restart_unacknowledged_records_come_again_and_acknowledged_never() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let log = EmbeddedLog::open(dir.path()).await.expect("open");
        log.append("t", recs("v", 0..10)).await.expect("append");
        let mut reader = log
            .consumer("c", &topics(&["t"]), StartPosition::Earliest)
            .await
            .expect("consumer");
        let batch = reader.fetch(10, FETCH_WAIT).await.expect("fetch");
        assert_eq!(batch.len(), 10);
        // Out of order, with gaps, as readers sharing a consumer do.
        let acked: Vec<_> = batch
            .iter()
            .filter(|d| [7, 0, 2, 1, 5].contains(&d.ack.position))
            .map(|d| d.ack.clone())
            .collect();
        reader.ack(&acked).await.expect("ack");
    }
    let log = EmbeddedLog::open(dir.path()).await.expect("reopen");
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let got = read_and_ack(reader.as_mut(), 5).await;
    let offsets: Vec<u64> = got.iter().map(|(_, o, _)| *o).collect();
    assert_eq!(offsets, vec![3, 4, 6, 8, 9]);
    assert_nothing_more(reader.as_mut()).await;
    assert_eq!(
        log.append("t", recs("v", 10..11)).await.expect("append"),
        vec![10],
        "positions continue after a restart"
    );
    drop(reader);
    drop(log);

    let log = EmbeddedLog::open(dir.path()).await.expect("reopen again");
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let got = read_and_ack(reader.as_mut(), 1).await;
    assert_eq!(got, vec![("t".to_string(), 10, "v10".to_string())]);
    assert_nothing_more(reader.as_mut()).await;
}

#[tokio::test]
async fn a_deleted_consumer_created_again_starts_from_its_configured_position() {
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
    drop(reader);
    log.delete_consumer("never-existed")
        .await
        .expect("missing is fine");

    let mut again = log
        .consumer("wharf-sink-s", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer again");
    let got = read_and_ack(again.as_mut(), 5).await;
    assert_eq!(
        got.iter().map(|(_, o, _)| *o).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    drop(again);

    // Survives a restart too: the old positions are gone from disk.
    log.delete_consumer("wharf-sink-s").await.expect("delete");
    drop(log);
    let log = EmbeddedLog::open(dir.path()).await.expect("reopen");
    let mut latest = log
        .consumer("wharf-sink-s", &topics(&["t"]), StartPosition::Latest)
        .await
        .expect("latest");
    assert_nothing_more(latest.as_mut()).await;
    log.append("t", recs("v", 5..6)).await.expect("append");
    let got = read_and_ack(latest.as_mut(), 1).await;
    assert_eq!(got, vec![("t".to_string(), 5, "v5".to_string())]);
}

#[tokio::test]
async fn a_latest_consumer_keeps_its_start_across_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let log = EmbeddedLog::open(dir.path()).await.expect("open");
        log.append("t", recs("old", 0..3)).await.expect("append");
        let mut reader = log
            .consumer("c", &topics(&["t"]), StartPosition::Latest)
            .await
            .expect("consumer");
        assert_nothing_more(reader.as_mut()).await;
        log.append("t", recs("new", 3..4)).await.expect("append");
    }
    let log = EmbeddedLog::open(dir.path()).await.expect("reopen");
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Latest)
        .await
        .expect("consumer");
    let got = read_and_ack(reader.as_mut(), 1).await;
    assert_eq!(got, vec![("t".to_string(), 3, "new3".to_string())]);
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
async fn zero_limits_and_a_second_open_of_one_dir_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = LogLimits {
        max_fetch_records: 0,
        ..LogLimits::default()
    };
    match EmbeddedLog::open_with(dir.path(), bad).await {
        Err(LogError::InvalidConfig(msg)) => assert!(msg.contains("max_fetch_records"), "{msg}"),
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("zero limit accepted"),
    }
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
            "child_process_for_kill_test",
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
            "child_process_for_memory_test",
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
