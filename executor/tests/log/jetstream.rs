//! What only the JetStream log promises: a stream per topic whatever its name, a
//! replication factor the server cannot meet refused clearly, and nothing acknowledged
//! lost, first arrivals in order, across kill -9 of a test-owned nats-server.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::process::Stdio;
use std::time::Duration;

use wharf_executor::log::{
    JetStreamLog, JetStreamOptions, LogError, LogLimits, NatsConfig, RecordLog, StartPosition,
};

use crate::common::{
    DEADLINE, EMPTY_FETCH_WAIT, FETCH_WAIT, nats_url, read_and_ack, recs, remove_streams, topics,
    unique_prefix, value,
};

/// nats-server binary (Debian package path).
const NATS_SERVER_BIN: &str = "/usr/sbin/nats-server";

fn options(prefix: &str) -> JetStreamOptions {
    JetStreamOptions {
        prefix: prefix.to_string(),
        ..JetStreamOptions::default()
    }
}

/// The JetStream log at `url` with `options`.
async fn connect(url: &str, options: JetStreamOptions) -> JetStreamLog {
    JetStreamLog::connect(NatsConfig {
        options,
        ..NatsConfig::new([url])
    })
    .await
    .expect("connect")
}

#[tokio::test]
async fn odd_topic_names_get_their_own_streams() {
    let (url, prefix) = (nats_url(), unique_prefix());
    let log = connect(&url, options(&prefix)).await;
    // These would collide (or be invalid) if names were only cleaned of bad characters.
    let odd = ["orders.v1", "orders_v1", "a b/*>ü", &"long-".repeat(40)];
    for (i, topic) in odd.iter().enumerate() {
        log.append(topic, recs(&format!("{i}-"), 0..1))
            .await
            .expect("append odd topic");
    }
    let names: BTreeSet<String> = odd.iter().map(|t| log.stream_name(t)).collect();
    assert_eq!(names.len(), odd.len(), "one stream per topic");
    remove_streams(&url, &prefix).await;
}

#[tokio::test]
async fn new_streams_keep_what_the_retention_options_say_and_keep_all_by_default() {
    let (url, prefix) = (nats_url(), unique_prefix());
    let bounded = connect(
        &url,
        JetStreamOptions {
            max_age_s: 3_600,
            max_bytes: 1 << 20,
            ..options(&prefix)
        },
    )
    .await;
    bounded
        .append("bounded", recs("b", 0..1))
        .await
        .expect("append");
    let unbounded = connect(&url, options(&prefix)).await;
    unbounded
        .append("unbounded", recs("u", 0..1))
        .await
        .expect("append");
    let js = async_nats::jetstream::new(async_nats::connect(&url).await.expect("connect"));
    let config = |name: String| {
        let js = js.clone();
        async move {
            js.get_stream(&name)
                .await
                .expect("the topic's stream")
                .info()
                .await
                .expect("stream info")
                .config
                .clone()
        }
    };
    let b = config(bounded.stream_name("bounded")).await;
    assert_eq!(b.max_age, Duration::from_secs(3_600));
    assert_eq!(b.max_bytes, 1 << 20);
    let u = config(unbounded.stream_name("unbounded")).await;
    assert_eq!(u.max_age, Duration::ZERO, "kept for ever by default");
    assert_eq!(u.max_bytes, -1, "no byte bound by default");
    assert_eq!(u.num_replicas, 1, "one replica by default");
    remove_streams(&url, &prefix).await;
}

#[tokio::test]
async fn a_replication_factor_the_server_cannot_meet_is_refused_clearly() {
    let (url, prefix) = (nats_url(), unique_prefix());
    let opts = JetStreamOptions {
        replicas: 3,
        ..options(&prefix)
    };
    let log = connect(&url, opts).await;
    match log.append("t", recs("v", 0..1)).await {
        Err(LogError::Unavailable(msg)) => {
            assert!(msg.contains("create stream"), "{msg}");
        }
        other => panic!("a single server accepted replicas=3: {other:?}"),
    }
    let bad = NatsConfig {
        options: JetStreamOptions {
            replicas: 0,
            ..options(&prefix)
        },
        ..NatsConfig::new([url.as_str()])
    };
    match JetStreamLog::connect(bad).await {
        Err(LogError::InvalidConfig(msg)) => assert!(msg.contains("replicas"), "{msg}"),
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("replicas=0 accepted"),
    }
    remove_streams(&url, &prefix).await;
}

/// A nats-server owned by one test: its own port and store, killed on drop.
struct OwnedNats {
    child: Option<tokio::process::Child>,
    port: u16,
    store: tempfile::TempDir,
}

impl OwnedNats {
    async fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let store = tempfile::tempdir().expect("store dir");
        let mut nats = Self {
            child: None,
            port,
            store,
        };
        nats.spawn().await;
        nats
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    async fn spawn(&mut self) {
        let log_path = self.store.path().join("nats-server.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("nats-server log file");
        let child = tokio::process::Command::new(NATS_SERVER_BIN)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.store.path().join("store"))
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
        let url = self.url();
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            // Raw account info request: JetStream answers it once it is enabled.
            if let Ok(client) = async_nats::connect(&url).await
                && let Ok(reply) = client.request("$JS.API.INFO", "".into()).await
                && !String::from_utf8_lossy(&reply.payload).contains("\"error\"")
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the test-owned nats-server did not serve JetStream; its log:\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
            tokio::task::yield_now().await;
        }
    }

    async fn kill_9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.start_kill().expect("SIGKILL nats-server");
            child.wait().await.expect("reap nats-server");
        }
    }
}

#[tokio::test]
async fn nothing_acknowledged_is_lost_when_nats_server_is_killed_and_restarted() {
    let mut nats = OwnedNats::start().await;
    let opts = JetStreamOptions {
        request_timeout_ms: 2_000,
        ..options("wk")
    };
    let log = connect(&nats.url(), opts).await;
    let mut acked_appends = 0u64;
    for i in 0..20u64 {
        let positions = log
            .append("t", recs("v", i * 50..i * 50 + 50))
            .await
            .expect("append");
        assert_eq!(positions, (i * 50..i * 50 + 50).collect::<Vec<_>>());
        acked_appends = i * 50 + 50;
    }
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let consumed = read_and_ack(reader.as_mut(), 300).await;
    let acked_through = consumed.iter().map(|(_, o, _)| *o).max().expect("some") + 1;
    // The reader keeps records in hand, unacknowledged, through the SIGKILL.
    let held = reader.fetch(100, FETCH_WAIT).await.expect("fetch held");
    assert!(!held.is_empty());

    nats.kill_9().await;
    assert!(
        log.append("t", recs("lost?", 0..1)).await.is_err(),
        "no acknowledgement while the server is down"
    );
    nats.spawn().await;

    // The client reconnects by itself; appends succeed again.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let resumed_at = loop {
        match log.append("t", recs("after", 0..1)).await {
            Ok(p) => break p[0],
            Err(err) => assert!(
                tokio::time::Instant::now() < deadline,
                "appends are acknowledged again after the restart: {err}"
            ),
        }
    };
    assert!(
        resumed_at >= acked_appends,
        "positions continue after the restart"
    );

    // Every acknowledged record survived, in order, once.
    let mut audit = log
        .consumer("audit", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("audit consumer");
    let all = read_and_ack(audit.as_mut(), resumed_at as usize + 1).await;
    for (i, (_, offset, value)) in all.iter().take(acked_appends as usize).enumerate() {
        assert_eq!(
            (*offset, value.as_str()),
            (i as u64, format!("v{i}").as_str())
        );
    }

    // The same reader goes on with nothing missing, in order, without waiting for ack_wait
    // (the held records' acknowledgements fail; the reader rewinds to the ack floor).
    // nats-server 2.9 writes consumer ack state lazily, so records acknowledged just before
    // the SIGKILL may come again (at least once: duplicates only after a crash).
    let held_tokens: Vec<_> = held.iter().map(|d| d.ack.clone()).collect();
    let _ = reader.ack(&held_tokens).await;
    let mut offsets: Vec<u64> = Vec::new();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while offsets.last() != Some(&resumed_at) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the reader reached the end again: {offsets:?}"
        );
        // A call may fail once while the reader binds again after the outage.
        let Ok(batch) = reader.fetch(1_000, FETCH_WAIT).await else {
            continue;
        };
        let tokens: Vec<_> = batch.iter().map(|d| d.ack.clone()).collect();
        offsets.extend(tokens.iter().map(|t| t.position));
        reader.ack(&tokens).await.expect("ack after the restart");
    }
    let again = offsets.iter().filter(|o| **o < acked_through).count();
    eprintln!("records acknowledged before the SIGKILL and delivered again: {again}");
    let mut sorted = offsets.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, offsets, "in order");
    let first = offsets[0];
    assert_eq!(
        offsets,
        (first..=resumed_at).collect::<Vec<_>>(),
        "nothing skipped after the restart"
    );
    assert!(first <= acked_through);
    nats.kill_9().await;
}

/// Records one writer appends in this test, in appends of [`FLOW_APPEND`].
const FLOW_RECORDS: u64 = 8_000;
/// Records per append (and in flight at once) in the flowing test.
const FLOW_APPEND: u64 = 500;
/// Pause between retries of a failed append or fetch (pacing, not sequencing).
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Appends `v0..v{FLOW_RECORDS}` in order, each append retried until acknowledged (as a
/// source task does); returns how many appends failed.
async fn write_all(log: JetStreamLog) -> u64 {
    let mut failed = 0;
    for start in (0..FLOW_RECORDS).step_by(FLOW_APPEND as usize) {
        let batch = recs("v", start..(start + FLOW_APPEND).min(FLOW_RECORDS));
        while log.append("t", batch.clone()).await.is_err() {
            failed += 1;
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
    failed
}

#[tokio::test]
async fn first_arrivals_stay_in_order_across_kill_9_of_nats_server_while_records_flow() {
    let mut nats = OwnedNats::start().await;
    let opts = JetStreamOptions {
        request_timeout_ms: 2_000,
        limits: LogLimits {
            max_append_in_flight_records: FLOW_APPEND as usize,
            ..LogLimits::default()
        },
        ..options("wf")
    };
    // Writer and reader on their own connections, as on two executors.
    let writer = connect(&nats.url(), opts.clone()).await;
    let reader_log = connect(&nats.url(), opts).await;
    let mut reader = reader_log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let writing = tokio::spawn(write_all(writer));
    // The server is killed and restarted while the reader goes on calling.
    let some_arrived = std::sync::Arc::new(tokio::sync::Notify::new());
    let kill_signal = some_arrived.clone();
    let killing = tokio::spawn(async move {
        kill_signal.notified().await;
        nats.kill_9().await;
        nats.spawn().await;
        nats
    });

    // Reads (and acknowledges) until every record arrived and the server is back.
    let mut arrivals: Vec<u64> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut failed_calls = 0u64;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while (seen.len() as u64) < FLOW_RECORDS || !killing.is_finished() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {FLOW_RECORDS} records arrived",
            seen.len()
        );
        if seen.len() as u64 >= FLOW_RECORDS / 4 {
            some_arrived.notify_one();
        }
        let batch = match reader.fetch(500, EMPTY_FETCH_WAIT).await {
            Ok(batch) => batch,
            Err(_) => {
                failed_calls += 1;
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        };
        let tokens: Vec<_> = batch.iter().map(|d| d.ack.clone()).collect();
        for d in &batch {
            let n: u64 = value(d)[1..].parse().expect("number");
            arrivals.push(n);
            seen.insert(n);
        }
        if reader.ack(&tokens).await.is_err() {
            failed_calls += 1;
        }
    }
    let mut nats = killing.await.expect("kill and restart");
    let failed_appends = writing.await.expect("writer");
    let mut first = BTreeSet::new();
    let first_arrivals: Vec<u64> = arrivals
        .iter()
        .copied()
        .filter(|n| first.insert(*n))
        .collect();
    eprintln!(
        "{} arrivals for {FLOW_RECORDS} records; {failed_appends} appends and {failed_calls} reader calls failed",
        arrivals.len()
    );
    assert_eq!(
        first_arrivals,
        (0..FLOW_RECORDS).collect::<Vec<_>>(),
        "every record, first arrivals in order"
    );
    nats.kill_9().await;
}
