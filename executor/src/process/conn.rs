//! One running plugin process and the protocol spoken with it: requests matched to their
//! answers by id, the plugin's own requests (offsets, reconfiguration, raised errors)
//! answered, and the process's death turned into one error text (exit status and the
//! tail of its stderr) that every waiting and later call of its instances returns.
//!
//! The process's pipes are served by plain threads (one each for stdin, stdout and
//! stderr), not by tasks of a tokio runtime: a call awaits only a channel, so it is
//! cancel-safe and holds no thread of the executor while the plugin works, and the
//! connection outlives any plugin runtime the executor may write off.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use prost::Message;
use wharf::pb::v1 as pb;

use super::frame;
use super::spec::{INHERITED_ENV, ProcessSpec};

pub(crate) use pb::plugin_to_runtime::Body as Answer;
pub(crate) use pb::runtime_to_plugin::Body as Ask;

/// Lines of a plugin process's stderr kept for the error of its instances when it dies.
pub const STDERR_TAIL_LINES: usize = 20;

/// Longest stderr line kept, in bytes; longer ones are cut.
pub const STDERR_LINE_MAX_BYTES: usize = 1024;

/// How long a process that closed its stdout may take to exit before it is killed, in
/// milliseconds.
pub const EXIT_WAIT_MS: u64 = 2_000;

/// How long the stderr reader may take to reach the end of a dead process's stderr, in
/// milliseconds (a child of the plugin may keep it open).
pub const STDERR_DRAIN_WAIT_MS: u64 = 500;

/// How often a process that closed its stdout is checked for its exit, in milliseconds.
const EXIT_POLL_MS: u64 = 10;

/// Receives the answer of one request: the plugin's answer, or the text saying why none
/// will come.
type Reply = Box<dyn FnOnce(Result<Answer, String>) + Send>;

/// Records one ledger change of an instance (the plugin's `record_resources`) and calls
/// the reply with the outcome once it is stored; must not block (the stdout reader calls
/// it).
pub(crate) type RecordLedger = Arc<
    dyn Fn(pb::PluginRecordResources, Box<dyn FnOnce(Result<(), String>) + Send>) + Send + Sync,
>;

/// What the connection keeps of an instance living in the process.
pub(crate) struct Hooks {
    /// Called when the plugin asks for a task reconfiguration (connector instances).
    pub reconfigure: Option<Arc<dyn Fn() + Send + Sync>>,
    /// The committed offsets the task was started with, by canonical partition text,
    /// for the plugin's `read_offsets`.
    pub offsets: BTreeMap<String, serde_json::Value>,
    /// An error the plugin raised outside a call, returned by the instance's next call.
    pub raised: Option<String>,
    /// Fails the instance at once with an error raised outside a call, or the process's
    /// death (connector instances: `ConnectorContext::raise_error`); without it the
    /// error waits in `raised` for the next call.
    pub raise: Option<Arc<dyn Fn(String) + Send + Sync>>,
    /// Records the instance's resource-ledger changes (`record_resources`); without it
    /// they are refused.
    pub ledger: Option<RecordLedger>,
    /// Moves a sink task's consumer positions (`sink_seek`); without it the request is
    /// dropped with a log line.
    pub seek: Option<wharf::sdk::SinkSeek>,
    /// Takes the records a sink task reports as failed (`report_errant`); without it the
    /// report is dropped with a log line.
    pub errant: Option<wharf::sdk::ErrantRecordReporter>,
}

#[derive(Default)]
struct State {
    pending: HashMap<u64, Reply>,
    instances: HashMap<u64, Hooks>,
    /// Why the process is gone; set once.
    dead: Option<String>,
    /// Set when the reader saw the end: from then on only it may signal or reap the process.
    exiting: bool,
    /// An instance was abandoned in it: new instances go to a fresh process, and this one
    /// is killed once its last instance is gone.
    tainted: bool,
}

#[derive(Default)]
struct Tail {
    lines: VecDeque<String>,
    closed: bool,
}

/// A running plugin process.
pub(crate) struct Conn {
    process: String,
    pid: u32,
    to_plugin: Mutex<mpsc::Sender<Vec<u8>>>,
    state: Mutex<State>,
    next_request: AtomicU64,
    next_instance: AtomicU64,
    stderr: Arc<(Mutex<Tail>, Condvar)>,
}

impl Conn {
    /// Starts the process of `spec` in a process group of its own, with only
    /// [`INHERITED_ENV`] of the executor's environment and the spec's variables, and
    /// serves its pipes.
    ///
    /// # Errors
    /// The spawn's error (no such program, no permission, no such working directory).
    pub fn spawn(spec: &ProcessSpec) -> io::Result<Arc<Conn>> {
        let mut cmd = Command::new(&spec.command);
        cmd.args(&spec.args).env_clear();
        for key in INHERITED_ENV {
            if let Some(v) = std::env::var_os(key) {
                cmd.env(key, v);
            }
        }
        cmd.envs(&spec.env);
        if let Some(dir) = &spec.working_dir {
            cmd.current_dir(dir);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Its own group: a kill reaches what the plugin started (a JVM's launcher script).
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        if let Some(mb) = spec.max_memory_mb {
            let bytes = mb.saturating_mul(1024 * 1024);
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            // SAFETY: between fork and exec only setrlimit runs, which is
            // async-signal-safe and touches no memory of the parent.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                    if libc::setrlimit(libc::RLIMIT_AS, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::last_os_error())
                    }
                });
            }
        }
        let mut child = cmd.spawn()?;
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other("the child's pipes were not set up"));
        };
        let (tx, rx) = mpsc::channel::<Vec<u8>>();
        let conn = Arc::new(Conn {
            process: spec.name.clone(),
            pid: child.id(),
            to_plugin: Mutex::new(tx),
            state: Mutex::new(State::default()),
            next_request: AtomicU64::new(1),
            next_instance: AtomicU64::new(1),
            stderr: Arc::default(),
        });
        let tag = format!("wharf-plugin-{}", conn.pid);
        thread::Builder::new()
            .name(format!("{tag}-in"))
            .spawn(move || {
                for frame in rx {
                    if stdin
                        .write_all(&frame)
                        .and_then(|()| stdin.flush())
                        .is_err()
                    {
                        // The process is gone; its stdout's end reports it.
                        break;
                    }
                }
            })?;
        let tail = conn.stderr.clone();
        let (name, pid) = (conn.process.clone(), conn.pid);
        thread::Builder::new()
            .name(format!("{tag}-err"))
            .spawn(move || read_stderr(stderr, &tail, &name, pid))?;
        let reader = conn.clone();
        thread::Builder::new()
            .name(format!("{tag}-out"))
            .spawn(move || reader.read_stdout(stdout, child))?;
        tracing::info!(plugin_process = %conn.process, pid = conn.pid, "plugin process started");
        Ok(conn)
    }

    /// True while new instances may be placed in this process: alive and not tainted
    /// by an abandoned instance.
    pub fn usable(&self) -> bool {
        let st = self.lock();
        st.dead.is_none() && !st.exiting && !st.tainted
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding it leaves consistent maps: keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn send(&self, request_id: u64, body: Ask) {
        let msg = pb::RuntimeToPlugin {
            request_id,
            body: Some(body),
        };
        let frame = frame::encode(&msg.encode_to_vec());
        // A closed channel means the writer ended with the process: the reader reports it.
        let _ = self
            .to_plugin
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(frame);
    }

    /// Sends `body` as a request; `reply` gets its answer, or at once the death text.
    fn request(&self, body: Ask, reply: Reply) -> u64 {
        let id = self.next_request.fetch_add(1, Ordering::Relaxed);
        {
            let mut st = self.lock();
            if let Some(dead) = &st.dead {
                let text = dead.clone();
                drop(st);
                reply(Err(text));
                return id;
            }
            st.pending.insert(id, reply);
        }
        self.send(id, body);
        id
    }

    /// Sends `body` and waits for its answer. Cancel-safe: dropped before the answer
    /// came, it tells the plugin with a `cancel` and drops the answer when it comes.
    ///
    /// # Errors
    /// The process's death text when it died before answering.
    pub async fn call(&self, body: Ask) -> Result<Answer, String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let id = self.request(
            body,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        let mut guard = CancelOnDrop {
            conn: self,
            id,
            armed: true,
        };
        let answer = rx
            .await
            .unwrap_or_else(|_| Err(format!("plugin process {} dropped the call", self.process)));
        guard.armed = false;
        answer
    }

    /// As [`Conn::call`], blocking the calling thread for at most `timeout` (the describe
    /// at configuration time, before any runtime runs).
    ///
    /// # Errors
    /// The death text, or a timeout naming the bound.
    pub fn call_blocking(&self, body: Ask, timeout: Duration) -> Result<Answer, String> {
        let (tx, rx) = mpsc::sync_channel(1);
        let id = self.request(
            body,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        match rx.recv_timeout(timeout) {
            Ok(answer) => answer,
            Err(_) => {
                self.lock().pending.remove(&id);
                Err(format!(
                    "plugin process {} (pid {}) did not answer within {} ms",
                    self.process,
                    self.pid,
                    timeout.as_millis()
                ))
            }
        }
    }

    /// Registers an instance living in the process; its id names it in every call.
    ///
    /// # Errors
    /// The death text when the process is gone.
    pub fn add_instance(&self, hooks: Hooks) -> Result<u64, String> {
        let id = self.next_instance.fetch_add(1, Ordering::Relaxed);
        let mut st = self.lock();
        if let Some(dead) = &st.dead {
            return Err(dead.clone());
        }
        st.instances.insert(id, hooks);
        Ok(id)
    }

    /// Takes the error the plugin raised for instance `id` outside a call, if any.
    pub fn raised(&self, id: u64) -> Option<String> {
        self.lock()
            .instances
            .get_mut(&id)
            .and_then(|h| h.raised.take())
    }

    /// Forgets instance `id`. An `abandoned` one (its stop never completed) is released
    /// in the plugin and taints the process: no new instance goes there, and it is killed
    /// once its last instance is gone, which ends the abandoned work.
    pub fn remove_instance(&self, id: u64, abandoned: bool) {
        let kill = {
            let mut st = self.lock();
            st.instances.remove(&id);
            if abandoned && st.dead.is_none() {
                st.tainted = true;
            }
            st.tainted && st.instances.is_empty() && st.dead.is_none()
        };
        if abandoned {
            self.send(0, Ask::Release(pb::PluginRelease { instance_id: id }));
            tracing::warn!(plugin_process = %self.process, pid = self.pid, instance = id,
                "instance abandoned in its plugin process: the process takes no new instance and is killed once its other instances are gone");
        }
        if kill {
            tracing::warn!(plugin_process = %self.process, pid = self.pid,
                "killing the plugin process: its last instance is gone and an abandoned one may still be working");
            self.kill();
        }
    }

    /// Kills the process group with SIGKILL, unless the process is already exiting (then
    /// its reader owns the pid).
    pub fn kill(&self) {
        let st = self.lock();
        if st.exiting || st.dead.is_some() {
            return;
        }
        // Under the lock, before the reader could reap the pid: it cannot have been reused.
        kill_group(self.pid);
    }

    /// Answers what the plugin sent.
    fn dispatch(self: &Arc<Self>, msg: pb::PluginToRuntime) {
        let id = msg.request_id;
        let Some(body) = msg.body else {
            tracing::warn!(plugin_process = %self.process, request_id = id, "message without a body ignored");
            return;
        };
        match body {
            Answer::ReadOffsets(req) => {
                let offsets = {
                    let st = self.lock();
                    let known = st.instances.get(&req.instance_id).map(|h| &h.offsets);
                    read_offsets(known, &req.partitions)
                };
                self.send(id, Ask::ReadOffsets(offsets));
            }
            Answer::RequestTaskReconfiguration(req) => {
                let hook = self
                    .lock()
                    .instances
                    .get(&req.instance_id)
                    .and_then(|h| h.reconfigure.clone());
                if let Some(reconfigure) = hook {
                    reconfigure();
                }
            }
            Answer::RaiseError(req) => {
                let hook = match self.lock().instances.get_mut(&req.instance_id) {
                    Some(h) if h.raise.is_some() => h.raise.clone(),
                    Some(h) => {
                        h.raised = Some(req.message.clone());
                        None
                    }
                    None => None,
                };
                if let Some(raise) = hook {
                    raise(req.message);
                }
            }
            Answer::SinkSeek(req) => {
                let hook = self
                    .lock()
                    .instances
                    .get(&req.instance_id)
                    .and_then(|h| h.seek.clone());
                match hook {
                    Some(seek) => seek.seek(
                        req.offsets
                            .into_iter()
                            .map(|o| {
                                (
                                    wharf::sdk::TopicPartition::new(o.topic, o.partition),
                                    o.offset,
                                )
                            })
                            .collect(),
                    ),
                    None => {
                        tracing::warn!(plugin_process = %self.process, instance = req.instance_id,
                        "sink_seek from an instance that is not a sink task: ignored")
                    }
                }
            }
            Answer::ReportErrant(req) => {
                let hook = self
                    .lock()
                    .instances
                    .get(&req.instance_id)
                    .and_then(|h| h.errant.clone());
                match (hook, req.record) {
                    (Some(reporter), Some(r)) => {
                        let record = wharf::sdk::SinkRecord {
                            topic: r.topic,
                            partition: r.partition,
                            offset: r.offset,
                            key: r.key,
                            value: r.value,
                            headers: r.headers.into_iter().map(|h| (h.key, h.value)).collect(),
                            timestamp_ms: r.timestamp_ms,
                            data: None,
                        };
                        if let Err(e) = reporter.report(&record, &req.error) {
                            tracing::warn!(plugin_process = %self.process, instance = req.instance_id,
                                error = %e, "a record the sink task reported was refused");
                        }
                    }
                    (hook, _) => {
                        tracing::warn!(plugin_process = %self.process, instance = req.instance_id,
                        reporter = hook.is_some(), "report_errant without a record, or from an instance that is not a sink task: ignored")
                    }
                }
            }
            Answer::RecordResources(req) => {
                let hook = self
                    .lock()
                    .instances
                    .get(&req.instance_id)
                    .and_then(|h| h.ledger.clone());
                let conn = self.clone();
                let reply: Box<dyn FnOnce(Result<(), String>) + Send> = Box::new(move |r| {
                    let error = r.err().unwrap_or_default();
                    conn.send(
                        id,
                        Ask::RecordResources(pb::PluginRecordResourcesResult { error }),
                    );
                });
                match hook {
                    Some(record) => record(req, reply),
                    None => reply(Err(format!(
                        "no instance {} with a resource ledger in this process",
                        req.instance_id
                    ))),
                }
            }
            answer @ (Answer::Describe(_)
            | Answer::Error(_)
            | Answer::Ok(_)
            | Answer::TaskConfigs(_)
            | Answer::Validate(_)
            | Answer::Poll(_)) => {
                // No waiter: the call was cancelled or timed out; its answer is dropped.
                let reply = self.lock().pending.remove(&id);
                if let Some(reply) = reply {
                    reply(Ok(answer));
                }
            }
        }
    }

    /// The stdout reader: answers until the end, then reaps the process and fails every
    /// waiting and later call with the death text.
    fn read_stdout(self: Arc<Self>, mut out: ChildStdout, mut child: Child) {
        let broken = loop {
            match frame::read(&mut out) {
                Ok(Some(bytes)) => match pb::PluginToRuntime::decode(bytes.as_slice()) {
                    Ok(msg) => self.dispatch(msg),
                    Err(e) => {
                        break Some(format!("sent a frame that is not a PluginToRuntime ({e})"));
                    }
                },
                Ok(None) => break None,
                Err(e) => break Some(e.to_string()),
            }
        };
        self.lock().exiting = true;
        let status = match &broken {
            Some(_) => {
                kill_group(self.pid);
                child.wait()
            }
            None => wait_bounded(&mut child, self.pid),
        };
        let tail = self.stderr_tail();
        let text = death_text(&self.process, self.pid, broken.as_deref(), status, &tail);
        tracing::warn!(plugin_process = %self.process, pid = self.pid, error = %text, "plugin process gone");
        let (pending, raises): (Vec<Reply>, Vec<_>) = {
            let mut st = self.lock();
            st.dead = Some(text.clone());
            let raises = st
                .instances
                .values()
                .filter_map(|h| h.raise.clone())
                .collect();
            (st.pending.drain().map(|(_, r)| r).collect(), raises)
        };
        for reply in pending {
            reply(Err(text.clone()));
        }
        // Instances with no call in flight (a connector) fail now, not at their next call.
        for raise in raises {
            raise(text.clone());
        }
    }

    /// The last lines of stderr, once the reader reached its end (or after a bound).
    fn stderr_tail(&self) -> Vec<String> {
        let (lock, cv) = &*self.stderr;
        let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        let (tail, _) = cv
            .wait_timeout_while(guard, Duration::from_millis(STDERR_DRAIN_WAIT_MS), |t| {
                !t.closed
            })
            .unwrap_or_else(|e| e.into_inner());
        tail.lines.iter().cloned().collect()
    }
}

/// Tells the plugin that a call's answer is no longer awaited when the call is dropped.
struct CancelOnDrop<'a> {
    conn: &'a Conn,
    id: u64,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            let waiting = self.conn.lock().pending.remove(&self.id).is_some();
            if waiting {
                self.conn.send(
                    0,
                    Ask::Cancel(pb::PluginCancel {
                        cancelled_request_id: self.id,
                    }),
                );
            }
        }
    }
}

/// SIGKILL to the process group `pid` leads.
fn kill_group(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: killpg only sends a signal; an already empty group gives ESRCH.
        unsafe {
            libc::killpg(pid, libc::SIGKILL);
        }
    }
}

/// Waits up to [`EXIT_WAIT_MS`] for a process that closed its stdout, then kills it.
fn wait_bounded(child: &mut Child, pid: u32) -> io::Result<ExitStatus> {
    let deadline = Instant::now() + Duration::from_millis(EXIT_WAIT_MS);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            kill_group(pid);
            return child.wait();
        }
        thread::sleep(Duration::from_millis(EXIT_POLL_MS));
    }
}

/// The stderr reader: every line goes to the executor's log and the last
/// [`STDERR_TAIL_LINES`] are kept.
fn read_stderr(err: ChildStderr, tail: &(Mutex<Tail>, Condvar), process: &str, pid: u32) {
    let reader = BufReader::new(err.take(u64::MAX));
    for line in reader.split(b'\n') {
        let Ok(line) = line else { break };
        let mut text = String::from_utf8_lossy(&line).trim_end().to_owned();
        if text.len() > STDERR_LINE_MAX_BYTES {
            let mut cut = STDERR_LINE_MAX_BYTES;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push_str("...");
        }
        tracing::info!(plugin_process = %process, pid, "{text}");
        let mut t = tail.0.lock().unwrap_or_else(|e| e.into_inner());
        if t.lines.len() == STDERR_TAIL_LINES {
            t.lines.pop_front();
        }
        t.lines.push_back(text);
    }
    tail.0.lock().unwrap_or_else(|e| e.into_inner()).closed = true;
    tail.1.notify_all();
}

/// The committed offsets of `partitions` among `known` (none for an unknown instance),
/// partitions compared as JSON values. Pure.
fn read_offsets(
    known: Option<&BTreeMap<String, serde_json::Value>>,
    partitions: &[String],
) -> pb::PluginOffsets {
    let offsets = partitions
        .iter()
        .filter_map(|p| {
            let canonical = serde_json::from_str::<serde_json::Value>(p)
                .ok()?
                .to_string();
            let offset = known?.get(&canonical)?;
            Some(pb::SourceOffset {
                partition: p.clone(),
                offset: offset.to_string(),
            })
        })
        .collect();
    pb::PluginOffsets { offsets }
}

/// The error every call of a dead process's instances returns: which process, how it
/// ended, and its last stderr lines. Pure.
fn death_text(
    process: &str,
    pid: u32,
    broken: Option<&str>,
    status: io::Result<ExitStatus>,
    tail: &[String],
) -> String {
    let how = match status {
        Ok(s) => s.to_string(),
        Err(e) => format!("exit status unknown ({e})"),
    };
    let what = match broken {
        Some(why) => format!("broke the protocol: {why}; it was killed ({how})"),
        None => format!("exited ({how})"),
    };
    let tail = if tail.is_empty() {
        "stderr was empty".to_owned()
    } else {
        format!("last stderr lines:\n{}", tail.join("\n"))
    };
    format!("plugin process {process} (pid {pid}) {what}; {tail}")
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn a_death_names_the_process_its_status_and_stderr_tail() {
        let text = death_text(
            "py",
            42,
            None,
            Ok(ExitStatus::from_raw(9)),
            &["Traceback".to_owned(), "boom".to_owned()],
        );
        assert!(
            text.starts_with("plugin process py (pid 42) exited (signal: 9"),
            "{text}"
        );
        assert!(
            text.ends_with("last stderr lines:\nTraceback\nboom"),
            "{text}"
        );
        let text = death_text(
            "py",
            42,
            Some("frame too large"),
            Ok(ExitStatus::from_raw(3 << 8)),
            &[],
        );
        assert!(
            text.contains("broke the protocol: frame too large; it was killed (exit status: 3)"),
            "{text}"
        );
        assert!(text.ends_with("stderr was empty"), "{text}");
    }

    #[test]
    fn offsets_are_read_by_json_value_and_unknown_ones_are_left_out() {
        let known: BTreeMap<String, serde_json::Value> =
            [(r#"{"file":"a"}"#.to_owned(), serde_json::json!({"pos": 3}))].into();
        let got = read_offsets(
            Some(&known),
            &[
                r#"{ "file" : "a" }"#.to_owned(),
                r#"{"file":"b"}"#.to_owned(),
                "not json".to_owned(),
            ],
        );
        assert_eq!(got.offsets.len(), 1);
        assert_eq!(got.offsets[0].partition, r#"{ "file" : "a" }"#);
        assert_eq!(got.offsets[0].offset, r#"{"pos":3}"#);
        assert!(
            read_offsets(None, &[r#"{"file":"a"}"#.to_owned()])
                .offsets
                .is_empty()
        );
    }
}
