//! Where executor work runs.
//!
//! Two kinds of runtime. The process runtime (`launcher::RUNTIME_WORKER_THREADS` workers)
//! runs the executor's own work: the gRPC service, the registry client's heartbeats and
//! reports, the stop bookkeeping and the tasks' work loops. The plugin runtime
//! ([`PluginPool`]: one multi-thread tokio runtime, `--plugin-threads` workers named
//! [`PLUGIN_THREAD_NAME`]) runs every plugin call of every instance: each call is a task
//! spawned there through the instance's [`PluginSlot`], and the work loop awaits its
//! handle. An idle instance holds no thread; a call holds a worker only while it runs
//! between two awaits.
//!
//! Why a pool: the plugin threads stay bounded whatever the number of instances (a thread
//! per instance would need 33,000 threads for 3,000 connectors x 10 tasks on 10
//! executors, more than a machine's `pid_max`; bench/NOTES.md), while plugin code still
//! never runs on the process runtime, so a plugin that blocks cannot starve the gRPC
//! service, the heartbeats or ListAssignments.
//!
//! What a blocking plugin costs its neighbours: a call that blocks its thread
//! (`std::thread::sleep`, synchronous I/O outside `spawn_blocking`) holds one worker for as
//! long as it blocks, and tokio's work stealing moves the other instances' calls to the
//! other workers. With N workers, N calls blocking at once hold every plugin call of the
//! runtime until one of them returns (the executor itself goes on). A call that awaits
//! (I/O, a timer, `spawn_blocking`) holds no worker while it waits. Caveat: a task that a
//! call wakes or spawns just before it blocks waits in that worker's LIFO slot, which
//! tokio does not let other workers steal, until the call returns.
//!
//! Abandoned calls and the write-off: when an instance's stop overran its timeout, the
//! instance is abandoned and [`PluginSlot::abandon`] cancels every call of it still
//! pending (a cancelled call is dropped at its next await). A call that ignores
//! cancellation because it blocks goes on holding its worker until it returns; the
//! instance is shown abandoned until then ([`PluginSlot::exited`]). Such calls add up: when
//! they hold half of the current runtime's workers or more ([`runtime_fate`]), the next
//! instance is placed on a fresh runtime (WARN log,
//! `wharf_executor_plugin_runtimes_written_off_total`) and the old one is retired: its
//! instances stay on it until they end (what a plugin registered there, sockets, timers,
//! the tasks it spawned, belongs to that runtime), and once none remains it is shut down
//! with `shutdown_background`, never waited for (a stuck worker ends when its call
//! returns). A write-off costs N more threads for as long as instances live on the old
//! runtime.

use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use tokio::task::{AbortHandle, JoinHandle};
use tracing::Instrument;

/// Name of every thread of a plugin runtime (shown by `top -H` and in panics).
pub const PLUGIN_THREAD_NAME: &str = "wharf-plugin";

/// Most threads a plugin runtime starts for the `spawn_blocking` calls of plugins (tokio's
/// default, named here so that the bound on an executor's threads is written down); an
/// idle one ends after 10 s.
pub const PLUGIN_MAX_BLOCKING_THREADS: usize = 512;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether a plugin runtime takes new instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// New instances are placed on it.
    Current,
    /// Written off: it only runs the instances placed on it before.
    Retired,
}

/// What [`runtime_fate`] knows of a plugin runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RuntimeLoad {
    /// Current or retired.
    pub role: Role,
    /// Its worker threads.
    pub workers: NonZeroUsize,
    /// Calls of abandoned instances still in flight on it (each may hold a worker).
    pub abandoned_calls: usize,
    /// Instances placed on it that have not ended (shut down with no call in flight).
    pub live_instances: usize,
}

/// What becomes of a plugin runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RuntimeFate {
    /// It goes on as it is.
    Keep,
    /// New instances go to a fresh runtime; this one is retired.
    WriteOff,
    /// Nothing runs on it any more: shut it down (without waiting for its threads).
    ShutDown,
}

/// The write-off rule: the current runtime is written off once calls of abandoned
/// instances hold half of its workers or more (the rest would soon be too few for the
/// live instances, and each further stuck call takes one more); a retired runtime is
/// shut down once none of its instances remains. The current runtime is never shut down.
pub(crate) fn runtime_fate(load: RuntimeLoad) -> RuntimeFate {
    let saturated = load.abandoned_calls.saturating_mul(2) >= load.workers.get();
    let empty = load.live_instances == 0;
    match (load.role, saturated, empty) {
        (Role::Current, false, false | true) => RuntimeFate::Keep,
        (Role::Current, true, false | true) => RuntimeFate::WriteOff,
        (Role::Retired, false | true, false) => RuntimeFate::Keep,
        (Role::Retired, false | true, true) => RuntimeFate::ShutDown,
    }
}

/// One multi-thread tokio runtime for plugin calls, with the counts [`runtime_fate`]
/// needs.
struct PluginRuntime {
    /// 1 for the executor's first plugin runtime, one more per write-off (for the logs).
    number: u64,
    workers: NonZeroUsize,
    handle: tokio::runtime::Handle,
    /// Taken when the runtime is shut down.
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    retired: AtomicBool,
    /// Slots placed here that have not ended.
    live_instances: AtomicUsize,
    /// Slots placed here that were abandoned; pruned once their calls returned.
    abandoned: Mutex<Vec<Weak<SlotCalls>>>,
}

impl PluginRuntime {
    /// Starts the runtime's `workers` threads.
    fn start(number: u64, workers: NonZeroUsize) -> std::io::Result<Arc<Self>> {
        // tokio panics when the OS refuses a worker thread: an error here, not a crash.
        let built = std::panic::catch_unwind(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers.get())
                .max_blocking_threads(PLUGIN_MAX_BLOCKING_THREADS)
                .thread_name(PLUGIN_THREAD_NAME)
                .enable_all()
                .build()
        });
        let runtime = match built {
            Ok(built) => built?,
            Err(panic) => {
                let text = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "the runtime builder panicked".to_owned());
                return Err(std::io::Error::other(text));
            }
        };
        Ok(Arc::new(Self {
            number,
            workers,
            handle: runtime.handle().clone(),
            runtime: Mutex::new(Some(runtime)),
            retired: AtomicBool::new(false),
            live_instances: AtomicUsize::new(0),
            abandoned: Mutex::new(Vec::new()),
        }))
    }

    /// Calls of abandoned instances still in flight here; forgets the instances whose
    /// calls all returned.
    fn abandoned_calls(&self) -> usize {
        let mut abandoned = lock(&self.abandoned);
        abandoned.retain(|slot| slot.upgrade().is_some_and(|s| s.in_flight() > 0));
        abandoned
            .iter()
            .filter_map(Weak::upgrade)
            .map(|s| s.in_flight())
            .sum()
    }

    fn load(&self) -> RuntimeLoad {
        RuntimeLoad {
            role: if self.retired.load(Ordering::SeqCst) {
                Role::Retired
            } else {
                Role::Current
            },
            workers: self.workers,
            abandoned_calls: self.abandoned_calls(),
            live_instances: self.live_instances.load(Ordering::SeqCst),
        }
    }

    /// Takes no new instances from now on; shut down at once when none is left.
    fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
        self.settle();
    }

    /// One of its instances ended.
    fn instance_ended(&self) {
        self.live_instances.fetch_sub(1, Ordering::SeqCst);
        self.settle();
    }

    /// Shuts the runtime down when [`runtime_fate`] says so.
    fn settle(&self) {
        match runtime_fate(self.load()) {
            RuntimeFate::ShutDown => {
                if let Some(runtime) = lock(&self.runtime).take() {
                    self.shut_down(runtime);
                }
            }
            // Only a retired runtime is ever shut down; a write-off is the pool's to make.
            RuntimeFate::Keep | RuntimeFate::WriteOff => {}
        }
    }

    /// Shuts `runtime` down without waiting for its workers (one may be stuck in an
    /// abandoned call). A retired runtime says so whichever way it went: its last instance
    /// ending, or its last slot dropped while an abandoned call still ran.
    fn shut_down(&self, runtime: tokio::runtime::Runtime) {
        if self.retired.load(Ordering::SeqCst) {
            tracing::info!(
                plugin_runtime = self.number,
                "retired plugin runtime shut down: none of its instances remains"
            );
        }
        runtime.shutdown_background();
    }

    /// True once shut down.
    #[cfg(test)]
    fn is_shut_down(&self) -> bool {
        lock(&self.runtime).is_none()
    }
}

impl Drop for PluginRuntime {
    fn drop(&mut self) {
        // Never a blocking drop: a worker may be stuck in an abandoned call.
        if let Some(runtime) = lock(&self.runtime).take() {
            self.shut_down(runtime);
        }
    }
}

/// The plugin runtime of an executor: a slot for each new instance, on the current
/// runtime, which is replaced by a fresh one when abandoned calls hold half of its
/// workers or more (see the module doc). Cheap to clone.
#[derive(Clone)]
pub(crate) struct PluginPool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    workers: NonZeroUsize,
    state: Mutex<PoolState>,
}

/// The runtime new instances go to, and how many were started.
struct PoolState {
    current: Arc<PluginRuntime>,
    /// Runtimes started so far (1 until the first write-off).
    started: u64,
}

impl PluginPool {
    /// Starts the first plugin runtime, with `workers` threads.
    ///
    /// # Errors
    /// The runtime could not be built (the OS refused a thread or an event queue).
    pub fn start(workers: NonZeroUsize) -> std::io::Result<Self> {
        let first = PluginRuntime::start(1, workers)?;
        Ok(Self {
            inner: Arc::new(PoolInner {
                workers,
                state: Mutex::new(PoolState {
                    current: first,
                    started: 1,
                }),
            }),
        })
    }

    /// A slot for a new instance, on the current runtime; first writes that runtime off
    /// when [`runtime_fate`] says so.
    ///
    /// # Errors
    /// The runtime had to be written off and a fresh one could not be started; the
    /// current one stays, and the next slot tries again.
    pub fn slot(&self) -> std::io::Result<PluginSlot> {
        let mut state = lock(&self.inner.state);
        let load = state.current.load();
        match runtime_fate(load) {
            RuntimeFate::Keep => {}
            RuntimeFate::WriteOff => {
                let number = state.started + 1;
                let fresh = PluginRuntime::start(number, self.inner.workers)?;
                state.started = number;
                let old = std::mem::replace(&mut state.current, fresh);
                tracing::warn!(
                    plugin_runtime = old.number,
                    workers = load.workers.get(),
                    abandoned_calls = load.abandoned_calls,
                    live_instances = load.live_instances,
                    fresh_plugin_runtime = number,
                    "calls of abandoned instances hold half of the plugin runtime's workers or more: \
                     it is written off, new instances run on a fresh one, and it shuts down once its instances ended"
                );
                crate::counters::plugin_runtime_written_off();
                old.retire();
            }
            // runtime_fate never shuts the current runtime down.
            RuntimeFate::ShutDown => {}
        }
        state.current.live_instances.fetch_add(1, Ordering::SeqCst);
        Ok(PluginSlot {
            calls: Arc::new(SlotCalls {
                runtime: state.current.clone(),
                in_flight: AtomicUsize::new(0),
                shut_down: AtomicBool::new(false),
                ended: AtomicBool::new(false),
                pending: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Runtimes started so far (1 until the first write-off).
    #[cfg(test)]
    fn runtimes_started(&self) -> u64 {
        lock(&self.inner.state).started
    }
}

/// What the calls of one slot share.
struct SlotCalls {
    /// The runtime the instance was placed on; all its calls run there.
    runtime: Arc<PluginRuntime>,
    /// Calls that began running and have not ended.
    in_flight: AtomicUsize,
    /// Set (under `pending`) by the first shut-down.
    shut_down: AtomicBool,
    /// Set once the runtime was told that this instance ended.
    ended: AtomicBool,
    /// Calls that may still be pending, cancelled at shut-down.
    pending: Mutex<Vec<AbortHandle>>,
}

impl SlotCalls {
    fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    fn shut_down(&self) {
        let pending = {
            let mut pending = lock(&self.pending);
            self.shut_down.store(true, Ordering::SeqCst);
            std::mem::take(&mut *pending)
        };
        for call in pending {
            call.abort();
        }
        if self.in_flight() == 0 {
            self.end();
        }
    }

    /// Tells the runtime, once, that the instance ended.
    fn end(&self) {
        if !self.ended.swap(true, Ordering::SeqCst) {
            self.runtime.instance_ended();
        }
    }
}

/// Counts one call in flight while it lives; the last one to end after the shut-down ends
/// the instance.
struct CallInFlight(Arc<SlotCalls>);

impl CallInFlight {
    fn enter(calls: Arc<SlotCalls>) -> Self {
        calls.in_flight.fetch_add(1, Ordering::SeqCst);
        Self(calls)
    }
}

impl Drop for CallInFlight {
    fn drop(&mut self) {
        let before = self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        if before == 1 && self.0.shut_down.load(Ordering::SeqCst) {
            self.0.end();
        }
    }
}

/// The plugin calls of one instance on the plugin runtime: spawns them, counts those in
/// flight, and cancels those still pending when the instance is shut down or abandoned,
/// so that nothing of an ended instance stays queued. Dropping it shuts it down.
pub(crate) struct PluginSlot {
    calls: Arc<SlotCalls>,
}

impl PluginSlot {
    /// Runs `fut` on the instance's plugin runtime. A panic inside comes back as the
    /// handle's `JoinError`, a cancellation (shut-down, abort) as a cancelled one. After
    /// the shut-down, `fut` never runs.
    pub fn spawn<F>(&self, name: &'static str, fut: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let calls = self.calls.clone();
        // Counted from its first poll: a call cancelled while queued never ran.
        let call = async move {
            let _in_flight = CallInFlight::enter(calls);
            fut.await
        };
        let handle = self
            .calls
            .runtime
            .handle
            .spawn(call.instrument(tracing::debug_span!("plugin", task = name)));
        let mut pending = lock(&self.calls.pending);
        if self.calls.shut_down.load(Ordering::SeqCst) {
            handle.abort();
        } else {
            pending.retain(|call| !call.is_finished());
            pending.push(handle.abort_handle());
        }
        handle
    }

    /// Cancels every call still pending; a call running in a blocked thread goes on until
    /// it returns, and the instance has ended once none is left ([`PluginSlot::exited`]).
    pub fn shut_down(&self) {
        self.calls.shut_down();
    }

    /// As [`PluginSlot::shut_down`], for an instance whose stop overran its timeout: its
    /// calls still in flight count against its runtime's workers (the write-off).
    pub fn abandon(&self) {
        lock(&self.calls.runtime.abandoned).push(Arc::downgrade(&self.calls));
        self.calls.shut_down();
    }

    /// True once shut down with no call in flight.
    pub fn exited(&self) -> bool {
        self.calls.shut_down.load(Ordering::SeqCst) && self.calls.in_flight() == 0
    }

    /// Calls that began running and have not ended.
    #[cfg(test)]
    fn calls_in_flight(&self) -> usize {
        self.calls.in_flight()
    }
}

impl Drop for PluginSlot {
    fn drop(&mut self) {
        self.calls.shut_down();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use tokio::sync::oneshot;

    use super::*;

    /// Longest a test waits for something that should happen at once.
    const WAIT: Duration = Duration::from_secs(5);

    fn workers(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).expect("non-zero")
    }

    fn load(role: Role, workers_n: usize, abandoned_calls: usize, live: usize) -> RuntimeLoad {
        RuntimeLoad {
            role,
            workers: workers(workers_n),
            abandoned_calls,
            live_instances: live,
        }
    }

    /// Spawns on `slot` a call that blocks its thread until `release` is dropped or sent
    /// to, and waits until it runs.
    async fn blocked_call(slot: &PluginSlot) -> (JoinHandle<()>, mpsc::Sender<()>) {
        let (release, released) = mpsc::channel::<()>();
        let (started_tx, started) = oneshot::channel();
        let handle = slot.spawn("block", async move {
            let _ = started_tx.send(());
            let _ = released.recv();
        });
        tokio::time::timeout(WAIT, started)
            .await
            .expect("the blocking call started")
            .expect("started");
        (handle, release)
    }

    async fn wait_for(what: &str, condition: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !condition() {
            assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[test]
    fn a_current_runtime_with_few_abandoned_calls_is_kept() {
        assert_eq!(
            runtime_fate(load(Role::Current, 32, 15, 100)),
            RuntimeFate::Keep
        );
        assert_eq!(
            runtime_fate(load(Role::Current, 32, 0, 0)),
            RuntimeFate::Keep
        );
    }

    #[test]
    fn a_current_runtime_is_written_off_when_abandoned_calls_hold_half_its_workers() {
        assert_eq!(
            runtime_fate(load(Role::Current, 32, 16, 100)),
            RuntimeFate::WriteOff
        );
        assert_eq!(
            runtime_fate(load(Role::Current, 32, 40, 100)),
            RuntimeFate::WriteOff
        );
    }

    #[test]
    fn half_of_an_odd_number_of_workers_is_rounded_up() {
        assert_eq!(
            runtime_fate(load(Role::Current, 5, 2, 9)),
            RuntimeFate::Keep
        );
        assert_eq!(
            runtime_fate(load(Role::Current, 5, 3, 9)),
            RuntimeFate::WriteOff
        );
        assert_eq!(
            runtime_fate(load(Role::Current, 1, 1, 1)),
            RuntimeFate::WriteOff
        );
    }

    #[test]
    fn a_current_runtime_is_never_shut_down_even_without_instances() {
        assert_eq!(
            runtime_fate(load(Role::Current, 4, 0, 0)),
            RuntimeFate::Keep
        );
        assert_eq!(
            runtime_fate(load(Role::Current, 4, 2, 0)),
            RuntimeFate::WriteOff
        );
    }

    #[test]
    fn a_retired_runtime_is_kept_while_an_instance_remains() {
        assert_eq!(
            runtime_fate(load(Role::Retired, 4, 0, 1)),
            RuntimeFate::Keep
        );
        assert_eq!(
            runtime_fate(load(Role::Retired, 4, 4, 3)),
            RuntimeFate::Keep
        );
    }

    #[test]
    fn a_retired_runtime_is_shut_down_once_no_instance_remains() {
        assert_eq!(
            runtime_fate(load(Role::Retired, 4, 0, 0)),
            RuntimeFate::ShutDown
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_blocked_call_does_not_hold_the_other_instances_on_the_pool() {
        let pool = PluginPool::start(workers(2)).expect("pool");
        let stuck = pool.slot().expect("slot");
        let (blocked, release) = blocked_call(&stuck).await;
        // More instances than workers, each with a few calls: the other worker runs them all.
        let others: Vec<PluginSlot> = (0..20).map(|_| pool.slot().expect("slot")).collect();
        for slot in &others {
            for _ in 0..3 {
                let call = slot.spawn("other", async {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    7
                });
                let out = tokio::time::timeout(WAIT, call).await;
                assert_eq!(
                    out.expect("not held by the blocked call").expect("joins"),
                    7
                );
            }
        }
        assert!(!blocked.is_finished());
        drop(release);
        blocked.await.expect("returns");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn shut_down_cancels_the_pending_calls_of_that_instance_only() {
        let pool = PluginPool::start(workers(2)).expect("pool");
        let (slot, other) = (pool.slot().expect("slot"), pool.slot().expect("slot"));
        let (dropped_tx, dropped) = oneshot::channel::<()>();
        let (started_tx, started) = oneshot::channel();
        let pending = slot.spawn("pending", async move {
            let _dropped = dropped_tx;
            let _ = started_tx.send(());
            std::future::pending::<()>().await;
        });
        started.await.expect("started");
        let others_call = other.spawn("other", async {
            tokio::time::sleep(Duration::from_millis(50)).await;
        });
        assert_eq!(slot.calls_in_flight(), 1);
        slot.shut_down();
        let joined = tokio::time::timeout(WAIT, pending)
            .await
            .expect("cancelled");
        assert!(joined.is_err_and(|e| e.is_cancelled()));
        // The cancelled future was dropped (its sender with it).
        assert!(dropped.await.is_err());
        wait_for("the instance to have exited", || slot.exited()).await;
        assert!(!other.exited());
        others_call.await.expect("the other instance's call ran on");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_call_spawned_after_shut_down_never_runs() {
        let pool = PluginPool::start(workers(1)).expect("pool");
        let slot = pool.slot().expect("slot");
        slot.shut_down();
        assert!(slot.exited(), "no call was in flight");
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        let call = slot.spawn("late", async move { flag.store(true, Ordering::SeqCst) });
        assert!(call.await.is_err_and(|e| e.is_cancelled()));
        assert!(!ran.load(Ordering::SeqCst));
        assert!(slot.exited());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_instance_exits_only_once_its_blocked_call_returned() {
        let pool = PluginPool::start(workers(2)).expect("pool");
        let slot = pool.slot().expect("slot");
        let (blocked, release) = blocked_call(&slot).await;
        assert_eq!(slot.calls_in_flight(), 1);
        slot.abandon();
        assert!(!slot.exited(), "still inside the blocking call");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            slot.calls_in_flight(),
            1,
            "a blocked call ignores cancellation"
        );
        release.send(()).expect("release");
        // Aborted while it ran: cancelled or not, its code ran to its end.
        let _ = blocked.await;
        wait_for("the instance to have exited", || slot.exited()).await;
        assert_eq!(slot.calls_in_flight(), 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_panic_comes_back_as_a_join_error() {
        let pool = PluginPool::start(workers(1)).expect("pool");
        let slot = pool.slot().expect("slot");
        let r = slot.spawn("panic", async { panic!("boom") }).await;
        assert!(r.is_err_and(|e| e.is_panic()));
        let after = slot.spawn("after", async { 1 }).await;
        assert_eq!(after.expect("the worker survived the panic"), 1);
        assert_eq!(slot.calls_in_flight(), 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn abandoned_calls_holding_half_the_workers_send_new_instances_to_a_fresh_runtime() {
        let pool = PluginPool::start(workers(2)).expect("pool");
        let survivor = pool.slot().expect("slot");
        let stuck = pool.slot().expect("slot");
        let (blocked, release) = blocked_call(&stuck).await;
        let old = stuck.calls.runtime.clone();

        let before = pool.slot().expect("slot");
        assert_eq!(
            pool.runtimes_started(),
            1,
            "a stuck call of a live instance is no write-off"
        );
        stuck.abandon();
        let fresh = pool.slot().expect("slot");
        assert_eq!(pool.runtimes_started(), 2);
        assert!(!Arc::ptr_eq(&fresh.calls.runtime, &old));
        assert!(Arc::ptr_eq(&before.calls.runtime, &old));
        let ran = fresh.spawn("fresh", async { 3 }).await;
        assert_eq!(ran.expect("runs on the fresh runtime"), 3);
        let next = pool.slot().expect("slot");
        assert_eq!(
            pool.runtimes_started(),
            2,
            "the fresh runtime has no abandoned call"
        );
        assert!(Arc::ptr_eq(&next.calls.runtime, &fresh.calls.runtime));

        // The retired runtime runs its instances on until the last one ended.
        let still = survivor.spawn("survivor", async { 4 }).await;
        assert_eq!(still.expect("the retired runtime still runs"), 4);
        survivor.shut_down();
        before.shut_down();
        assert!(!old.is_shut_down(), "the abandoned call is still in flight");
        drop(release);
        let _ = blocked.await;
        wait_for("the retired runtime to be shut down", || old.is_shut_down()).await;
        assert!(!fresh.calls.runtime.is_shut_down());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_abandoned_call_that_returned_no_longer_counts_toward_a_write_off() {
        let pool = PluginPool::start(workers(1)).expect("pool");
        let stuck = pool.slot().expect("slot");
        let (blocked, release) = blocked_call(&stuck).await;
        let old = stuck.calls.runtime.clone();
        stuck.abandon();
        drop(release);
        let _ = blocked.await;
        wait_for("the abandoned instance to have exited", || stuck.exited()).await;
        // Its call returned: nothing abandoned is in flight, no write-off.
        let _next = pool.slot().expect("slot");
        assert_eq!(pool.runtimes_started(), 1);
        assert!(
            !old.is_shut_down(),
            "the current runtime is never shut down"
        );
    }
}
