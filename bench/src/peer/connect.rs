//! The Kafka Connect side of the peer benchmark: a tansu broker and Kafka Connect
//! distributed workers as real processes (killed on drop, [`Proc`]), a small HTTP/1.1
//! client for the worker's REST API, and the pure readers of what they write (status
//! JSON, the worker's log, the no-op connector's lifecycle file).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::procs::{Proc, free_port};

/// How long the broker or a worker may take to come up, milliseconds.
const START_DEADLINE_MS: u64 = 120_000;
/// Poll interval while a process comes up, milliseconds.
const START_POLL_MS: u64 = 50;
/// Bound on one HTTP exchange, milliseconds (Kafka Connect's own request timeout is 90 s).
const HTTP_TIMEOUT_MS: u64 = 100_000;
/// Back-off before a REST call answered 409 (rebalance in progress) or 5xx is sent again,
/// milliseconds.
const RETRY_BACKOFF_MS: u64 = 50;
/// The class of the bench's no-op source connector (bench/peer/).
pub const NOOP_CONNECTOR: &str = "wharf.bench.peer.NoopSourceConnector";

/// Where the peer's parts are: the env file `scripts/peer-setup` writes (`KEY=VALUE`).
#[derive(Debug, Clone, Default)]
pub struct PeerEnv {
    /// Java classpath: Kafka Connect 3.9.0's jars, Jetty 9.4.57, the no-op connector.
    pub classpath: String,
    /// The tansu binary.
    pub tansu: PathBuf,
    /// The java binary.
    pub java: PathBuf,
    /// What ran, for the report.
    pub connect_version: String,
    /// tansu's `--version` and where it came from.
    pub tansu_version: String,
    /// `java -version`'s first line.
    pub java_version: String,
    /// Kafka Connect 3.9's file connectors jar (FileStreamSource, FileStreamSink), added to
    /// the classpath of the workers that run them.
    pub file_jar: Option<PathBuf>,
    /// Classpath of Wharf's JVM plugin host (jvm-host/ compiled by scripts/peer-setup, and
    /// the Connect jars it runs on).
    pub host_classpath: Option<String>,
    /// What the JVM host runs on, for the report.
    pub host_version: String,
}

impl PeerEnv {
    /// Parses the env file's text; errors name the missing key.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let get = |k: &str| -> Option<String> {
            text.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('=').map(str::to_owned))
        };
        let need = |k: &str| get(k).with_context(|| format!("{k} missing from the peer env file"));
        Ok(Self {
            classpath: need("PEER_CLASSPATH")?,
            tansu: need("PEER_TANSU")?.into(),
            java: need("PEER_JAVA")?.into(),
            connect_version: get("PEER_CONNECT_VERSION").unwrap_or_default(),
            tansu_version: get("PEER_TANSU_VERSION").unwrap_or_default(),
            java_version: get("PEER_JAVA_VERSION").unwrap_or_default(),
            file_jar: get("PEER_FILE_JAR").map(PathBuf::from),
            host_classpath: get("PEER_HOST_CLASSPATH"),
            host_version: get("PEER_HOST_VERSION").unwrap_or_default(),
        })
    }

    /// Reads and parses `path`, checking that the binaries exist.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let env = Self::parse(
            &std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?,
        )?;
        for p in [&env.tansu, &env.java] {
            if !p.exists() {
                bail!(
                    "{} (named in {}) does not exist",
                    p.display(),
                    path.display()
                );
            }
        }
        Ok(env)
    }
}

/// Status code and body of one whole HTTP/1.1 response: the body delimited by
/// Content-Length, by chunked transfer coding, or by the end of the connection.
pub fn parse_response(raw: &[u8]) -> anyhow::Result<(u16, String)> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("HTTP response without an end of headers")?;
    let head = std::str::from_utf8(&raw[..split]).context("HTTP headers not UTF-8")?;
    let body = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .context("HTTP status line")?;
    let mut length = None;
    let mut chunked = false;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        if k == "content-length" {
            length = v.parse::<usize>().ok();
        } else if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
            chunked = true;
        }
    }
    let body = if chunked {
        dechunk(body)?
    } else if let Some(n) = length {
        body.get(..n)
            .context("HTTP body shorter than Content-Length")?
            .to_vec()
    } else {
        body.to_vec()
    };
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// The payload of a chunked body (RFC 9112 7.1; extensions and trailers ignored).
fn dechunk(mut b: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("chunk size line")?;
        let size_text = std::str::from_utf8(&b[..eol])?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .with_context(|| format!("chunk size {size_text:?}"))?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(b.get(..size).context("chunk shorter than its size")?);
        b = b.get(size + 2..).context("chunk without its CRLF")?;
    }
}

/// One HTTP/1.1 exchange with `addr` (`IP:PORT`) on a new connection (closed after it, so
/// the response ends with the connection; loopback connects cost tens of microseconds).
/// `body` is sent as JSON. Returns the status code and the body.
pub async fn http(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> anyhow::Result<(u16, String)> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        let body = body.map(Value::to_string).unwrap_or_default();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: application/json\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await?;
        parse_response(&raw)
    };
    tokio::time::timeout(Duration::from_millis(HTTP_TIMEOUT_MS), exchange)
        .await
        .with_context(|| format!("{method} {path}: no answer in {HTTP_TIMEOUT_MS} ms"))?
        .with_context(|| format!("{method} {path} to {addr}"))
}

/// A REST call that is sent again, after [`RETRY_BACKOFF_MS`], while the worker answers
/// 409 (Kafka Connect's answer during a rebalance) or 5xx, until `deadline`. Returns the
/// final status, body and how many times it was sent again. Any other status is final.
pub async fn call(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    deadline: Instant,
) -> anyhow::Result<(u16, String, u32)> {
    let mut retries = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let (status, text) = tokio::time::timeout(left, http(addr, method, path, body))
            .await
            .with_context(|| format!("{method} {path}: no answer before the phase's deadline"))??;
        if (status == 409 || status >= 500) && Instant::now() < deadline {
            retries += 1;
            tokio::time::sleep(Duration::from_millis(RETRY_BACKOFF_MS)).await;
            continue;
        }
        return Ok((status, text, retries));
    }
}

/// A tansu broker (memory storage) on a free loopback port.
pub struct Broker {
    _proc: Proc,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Broker {
    /// Starts it under `dir` and waits until it accepts connections.
    pub async fn start(env: &PeerEnv, dir: &Path) -> anyhow::Result<Self> {
        let port = free_port()?;
        let url = format!("tcp://127.0.0.1:{port}");
        let proc = Proc::spawn(
            &env.tansu,
            &[
                "broker".into(),
                "--listener-url".into(),
                url.clone(),
                "--advertised-listener-url".into(),
                url,
                "--storage-engine".into(),
                "memory://tansu/".into(),
            ],
            dir,
        )?;
        let addr = format!("127.0.0.1:{port}");
        let start = Instant::now();
        while tokio::net::TcpStream::connect(&addr).await.is_err() {
            if start.elapsed() > Duration::from_millis(START_DEADLINE_MS) {
                bail!(
                    "tansu on {addr} did not listen: {}",
                    std::fs::read_to_string(dir.join("process.log")).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(START_POLL_MS)).await;
        }
        Ok(Self { _proc: proc, addr })
    }
}

/// The settings of a worker that are not the same for every worker.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Broker `IP:PORT`.
    pub broker: String,
    /// Connect group (the cluster); also names the internal topics.
    pub group: String,
    /// `scheduled.rebalance.max.delay.ms` (KIP-415): how long the leader keeps a departed
    /// worker's tasks unassigned, waiting for it to come back. Kafka's default is 300000.
    pub rebalance_delay_ms: u64,
}

/// `session.timeout.ms` of the workers' group: 3 s, as Wharf's scale cluster's executor
/// lease (bench/src/scale.rs), where Kafka Connect's default is 10 s; tansu also holds each
/// JoinGroup for less with it (about 2 s instead of 5 s).
pub const SESSION_TIMEOUT_MS: u64 = 3_000;

/// The worker's `connect-distributed.properties` for REST port `rest_port`: JSON
/// converters without schemas, internal topics with one partition and replication
/// factor 1 (one broker), offsets flushed every second, plugins found through
/// ServiceLoader manifests only (KIP-898), and `fetch.max.wait.ms=10` for the worker's
/// own consumers and its tasks' (tansu answers a fetch only at the end of the wait).
pub fn worker_properties(o: &WorkerOptions, rest_port: u16) -> String {
    let g = &o.group;
    [
        format!("bootstrap.servers={}", o.broker),
        format!("group.id={g}"),
        "key.converter=org.apache.kafka.connect.json.JsonConverter".into(),
        "value.converter=org.apache.kafka.connect.json.JsonConverter".into(),
        "key.converter.schemas.enable=false".into(),
        "value.converter.schemas.enable=false".into(),
        format!("config.storage.topic={g}-configs"),
        format!("offset.storage.topic={g}-offsets"),
        format!("status.storage.topic={g}-status"),
        "config.storage.replication.factor=1".into(),
        "offset.storage.replication.factor=1".into(),
        "status.storage.replication.factor=1".into(),
        "offset.storage.partitions=1".into(),
        "status.storage.partitions=1".into(),
        "offset.flush.interval.ms=1000".into(),
        format!("listeners=http://127.0.0.1:{rest_port}"),
        "rest.advertised.host.name=127.0.0.1".into(),
        format!("rest.advertised.port={rest_port}"),
        "plugin.discovery=service_load".into(),
        format!("scheduled.rebalance.max.delay.ms={}", o.rebalance_delay_ms),
        format!("session.timeout.ms={SESSION_TIMEOUT_MS}"),
        "heartbeat.interval.ms=1000".into(),
        "fetch.max.wait.ms=10".into(),
        "consumer.fetch.max.wait.ms=10".into(),
    ]
    .join("\n")
        + "\n"
}

/// log4j2 config of a worker: warnings on stdout, plus the group membership (INFO of the
/// coordinator and the distributed herder), with Unix-millisecond timestamps for
/// [`join_waits`].
pub const LOG4J2_PROPERTIES: &str = "\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{UNIX_MILLIS} %p [%t] %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.coord.name = org.apache.kafka.clients.consumer.internals.AbstractCoordinator
logger.coord.level = INFO
logger.herder.name = org.apache.kafka.connect.runtime.distributed
logger.herder.level = INFO
";

/// The JVM flags of Kafka's `connect-distributed.sh` (its KAFKA_HEAP_OPTS and
/// KAFKA_JVM_PERFORMANCE_OPTS defaults), what a user who starts a worker gets.
pub const JVM_FLAGS: [&str; 7] = [
    "-Xms256M",
    "-Xmx2G",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
];

/// One Kafka Connect distributed worker (`ConnectDistributed`).
pub struct Worker {
    /// The JVM.
    pub proc: Proc,
    /// REST `IP:PORT`.
    pub rest: String,
    /// Its id in statuses (`worker_id`): the advertised `host:port`.
    pub id: String,
}

impl Worker {
    /// Starts a worker under `dir` and waits until its REST API says it is ready
    /// (`GET /health` 200, KIP-1017, or `GET /connectors` 200 where there is no such
    /// endpoint).
    pub async fn start(env: &PeerEnv, dir: &Path, o: &WorkerOptions) -> anyhow::Result<Self> {
        Self::start_with(env, dir, o, &[]).await
    }

    /// [`Worker::start`] with `extra` lines (`key=value`) after the worker's properties.
    pub async fn start_with(
        env: &PeerEnv,
        dir: &Path,
        o: &WorkerOptions,
        extra: &[String],
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let port = free_port()?;
        let props = dir.join("worker.properties");
        let mut text = worker_properties(o, port);
        for line in extra {
            text.push_str(line);
            text.push('\n');
        }
        std::fs::write(&props, text)?;
        let log4j = dir.join("log4j2.properties");
        std::fs::write(&log4j, LOG4J2_PROPERTIES)?;
        let mut args: Vec<String> = JVM_FLAGS.iter().map(|s| s.to_string()).collect();
        args.extend([
            format!("-Dlog4j2.configurationFile={}", log4j.display()),
            "-cp".into(),
            env.classpath.clone(),
            "org.apache.kafka.connect.cli.ConnectDistributed".into(),
            props.display().to_string(),
        ]);
        let mut proc = Proc::spawn(&env.java, &args, dir)?;
        let rest = format!("127.0.0.1:{port}");
        let start = Instant::now();
        loop {
            let ready = match http(&rest, "GET", "/health", None).await {
                Ok((200, _)) => true,
                Ok((404, _)) => {
                    matches!(http(&rest, "GET", "/connectors", None).await, Ok((200, _)))
                }
                _ => false,
            };
            if ready {
                break;
            }
            if proc.exited() || start.elapsed() > Duration::from_millis(START_DEADLINE_MS) {
                let log = std::fs::read_to_string(dir.join("process.log")).unwrap_or_default();
                let tail: String = log
                    .lines()
                    .rev()
                    .take(30)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                bail!("Kafka Connect worker on {rest} did not become ready; its log ends:\n{tail}");
            }
            tokio::time::sleep(Duration::from_millis(START_POLL_MS)).await;
        }
        Ok(Self {
            proc,
            id: rest.clone(),
            rest,
        })
    }

    /// The worker's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.proc.dir.join("process.log")).unwrap_or_default()
    }
}

/// Unix time now, milliseconds (the clock of the worker's log lines).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The JoinGroup waits in a worker's log, as (start, end) Unix milliseconds: from a
/// `(Re-)joining group` line (the JoinGroup about to be sent) to the next
/// `Successfully joined group` line (its answer). A second JoinGroup of the same
/// rebalance (MEMBER_ID_REQUIRED, KIP-394) falls inside the same wait. A wait without an
/// answer yet is left out.
pub fn join_waits(log: &str) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut open: Option<i64> = None;
    for line in log.lines() {
        let Some((ts, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(ts) = ts.parse::<i64>() else {
            continue;
        };
        if rest.contains("(Re-)joining group") {
            open.get_or_insert(ts);
        } else if rest.contains("Successfully joined group")
            && let Some(s) = open.take()
        {
            out.push((s, ts));
        }
    }
    out
}

/// Milliseconds of `waits` that fall within `[from_ms, to_ms]`.
pub fn overlap_ms(waits: &[(i64, i64)], from_ms: i64, to_ms: i64) -> f64 {
    waits
        .iter()
        .map(|&(s, e)| (e.min(to_ms) - s.max(from_ms)).max(0))
        .sum::<i64>() as f64
}

/// One line of the no-op connector's lifecycle file (bench/peer/.../StopLog.java).
#[derive(Debug, Clone, PartialEq)]
pub struct LifeEvent {
    /// Unix time, microseconds.
    pub micros: i64,
    /// connector-start, connector-stop, task-start, task-stop.
    pub event: String,
    /// Connector name.
    pub connector: String,
    /// Task index; -1 for the connector's own events.
    pub task: i32,
    /// For task-start, the offset the task read (JSON) or `none`; else `-`.
    pub detail: String,
}

/// The complete lines of a lifecycle file (a line still being written is skipped).
pub fn parse_events(text: &str) -> Vec<LifeEvent> {
    text.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .filter_map(|l| {
            let f: Vec<&str> = l.trim_end().split('\t').collect();
            Some(LifeEvent {
                micros: f.first()?.parse().ok()?,
                event: f.get(1)?.to_string(),
                connector: f.get(2)?.to_string(),
                task: f.get(3)?.parse().ok()?,
                detail: f.get(4)?.to_string(),
            })
        })
        .collect()
}

/// The events in the lifecycle file at `path` (none while it does not exist).
pub fn read_events(path: &Path) -> Vec<LifeEvent> {
    parse_events(&std::fs::read_to_string(path).unwrap_or_default())
}

/// From `GET /connectors?expand=status`: the connectors listed and the tasks RUNNING
/// (only those on `worker`, a `worker_id`, when given).
pub fn running_tasks(v: &Value, worker: Option<&str>) -> (usize, usize) {
    let Some(map) = v.as_object() else {
        return (0, 0);
    };
    let running = map
        .values()
        .flat_map(|c| {
            c.pointer("/status/tasks")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .filter(|t| t.get("state").and_then(Value::as_str) == Some("RUNNING"))
        .filter(|t| worker.is_none_or(|w| t.get("worker_id").and_then(Value::as_str) == Some(w)))
        .count();
    (map.len(), running)
}

/// True when one connector's status (`GET /connectors/NAME/status`) shows the connector
/// and `tasks` tasks RUNNING.
pub fn connector_running(v: &Value, tasks: usize) -> bool {
    let running = |x: &Value| x.get("state").and_then(Value::as_str) == Some("RUNNING");
    v.get("connector").is_some_and(running)
        && v.get("tasks")
            .and_then(Value::as_array)
            .is_some_and(|t| t.len() == tasks && t.iter().all(running))
}

/// The body of `POST /connectors` for a no-op connector `name` with `tasks` tasks writing
/// its lifecycle to `log`, each poll waiting `poll_block_ms`; `initial_state` (KIP-980)
/// when given.
pub fn create_body(
    name: &str,
    tasks: u32,
    log: &Path,
    poll_block_ms: u64,
    initial_state: Option<&str>,
) -> Value {
    let mut v = serde_json::json!({
        "name": name,
        "config": {
            "connector.class": NOOP_CONNECTOR,
            "tasks.max": tasks.to_string(),
            "stop.log": log.display().to_string(),
            "poll.block.ms": poll_block_ms.to_string(),
        }
    });
    if let Some(s) = initial_state {
        v["initial_state"] = Value::String(s.into());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_content_length_chunked_and_eof_bodies() {
        let r = b"HTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\n{}{}extra";
        assert_eq!(parse_response(r).unwrap(), (201, "{}{}".into()));
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n[1,\r\n2;x=y\r\n2]\r\n0\r\n\r\n";
        assert_eq!(parse_response(r).unwrap(), (200, "[1,2]".into()));
        let r = b"HTTP/1.1 204 No Content\r\nServer: x\r\n\r\n";
        assert_eq!(parse_response(r).unwrap(), (204, String::new()));
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
    }

    #[test]
    fn join_waits_run_from_joining_to_joined_and_overlap_clips_them() {
        let log = "\
1000 INFO [t] [Worker clientId=a] (Re-)joining group (c)
1100 INFO [t] [Worker clientId=a] Request joining group due to: need to re-join with the given member-id (c)
1101 INFO [t] [Worker clientId=a] (Re-)joining group (c)
3000 INFO [t] [Worker clientId=a] Successfully joined group with generation Generation{generationId=1} (c)
  at some.stack.Trace
5000 INFO [t] [Worker clientId=a] (Re-)joining group (c)
7500 INFO [t] [Worker clientId=a] Successfully joined group with generation Generation{generationId=2} (c)
9000 INFO [t] [Worker clientId=a] (Re-)joining group (c)
";
        let w = join_waits(log);
        assert_eq!(w, vec![(1000, 3000), (5000, 7500)]);
        assert_eq!(overlap_ms(&w, 0, 10_000), 4500.0);
        assert_eq!(overlap_ms(&w, 2000, 6000), 2000.0);
        assert_eq!(overlap_ms(&w, 3000, 5000), 0.0);
    }

    #[test]
    fn lifecycle_lines_parse_and_a_partial_line_is_skipped() {
        let t = "10\ttask-start\tc\t0\t{\"n\":5}\n20\ttask-stop\tc\t0\t-\n30\ttask-st";
        let e = parse_events(t);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].detail, "{\"n\":5}");
        assert_eq!(
            (e[1].micros, e[1].event.as_str(), e[1].task),
            (20, "task-stop", 0)
        );
    }

    #[test]
    fn running_tasks_counts_by_worker() {
        let v = serde_json::json!({
            "a": {"status": {"connector": {"state": "RUNNING"}, "tasks": [
                {"id": 0, "state": "RUNNING", "worker_id": "w1"},
                {"id": 1, "state": "UNASSIGNED", "worker_id": "w2"}]}},
            "b": {"status": {"tasks": [{"id": 0, "state": "RUNNING", "worker_id": "w2"}]}}
        });
        assert_eq!(running_tasks(&v, None), (2, 2));
        assert_eq!(running_tasks(&v, Some("w2")), (2, 1));
        let one = serde_json::json!({"connector": {"state": "RUNNING"},
            "tasks": [{"state": "RUNNING"}, {"state": "RUNNING"}]});
        assert!(connector_running(&one, 2));
        assert!(!connector_running(&one, 3));
    }

    #[test]
    fn env_file_parses_and_names_what_is_missing() {
        let e = PeerEnv::parse("PEER_CLASSPATH=a:b\nPEER_TANSU=/t\nPEER_JAVA=/j\n").unwrap();
        assert_eq!(e.classpath, "a:b");
        let err = PeerEnv::parse("PEER_TANSU=/t\n").unwrap_err().to_string();
        assert!(err.contains("PEER_CLASSPATH"), "{err}");
    }

    #[test]
    fn worker_properties_keep_the_measured_settings() {
        let p = worker_properties(
            &WorkerOptions {
                broker: "127.0.0.1:9".into(),
                group: "g".into(),
                rebalance_delay_ms: 3000,
            },
            8083,
        );
        for want in [
            "bootstrap.servers=127.0.0.1:9",
            "scheduled.rebalance.max.delay.ms=3000",
            "fetch.max.wait.ms=10",
            "rest.advertised.port=8083",
            "offset.storage.replication.factor=1",
        ] {
            assert!(p.lines().any(|l| l == want), "{want} missing:\n{p}");
        }
    }
}
