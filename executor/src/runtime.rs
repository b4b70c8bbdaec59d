//! Where executor work runs. The executor's own work (the gRPC service, the registry
//! client's heartbeats and reports, stop bookkeeping) runs on the process runtime; every
//! plugin instance runs its plugin calls and its work loop on a thread of its own
//! ([`PluginThread`]), the way a Kafka Connect worker gives each task its own thread.
//!
//! Why: a plugin that blocks its thread and ignores cancellation (issue 15, point 5) used
//! to hold a worker of the one shared runtime; a few of them and the executor stopped
//! answering, missed heartbeats and lost its lease. On its own thread such a plugin blocks
//! only itself: the instance is abandoned at its stop timeout and its thread ends when the
//! call finally returns.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// One OS thread running a current-thread tokio runtime, for the plugin calls and the
/// work loop of one instance. Futures spawned on it run only there; their handles can be
/// awaited (and aborted) from any runtime. Dropping or [`shut_down`](Self::shut_down)
/// lets the thread end as soon as the call it runs returns.
pub(crate) struct PluginThread {
    handle: tokio::runtime::Handle,
    shutdown: std::sync::Mutex<Option<oneshot::Sender<()>>>,
    exited: Arc<AtomicBool>,
}

impl PluginThread {
    /// Starts the thread, named `name` (shown by `top -H` and in panics).
    ///
    /// # Errors
    /// The OS refused a thread, or the runtime could not be built (text of the cause).
    pub fn start(name: String) -> Result<Self, String> {
        let (handle_tx, handle_rx) = std::sync::mpsc::sync_channel(1);
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
        let exited = Arc::new(AtomicBool::new(false));
        let on_exit = exited.clone();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = handle_tx.send(Err(e.to_string()));
                        on_exit.store(true, Ordering::SeqCst);
                        return;
                    }
                };
                let _ = handle_tx.send(Ok(runtime.handle().clone()));
                // Drives every future spawned here until shut down; a blocked plugin call
                // holds this loop (and only this one) until it returns.
                let _ = runtime.block_on(shutdown_rx);
                drop(runtime);
                on_exit.store(true, Ordering::SeqCst);
            })
            .map_err(|e| format!("cannot start a plugin thread: {e}"))?;
        let handle = handle_rx
            .recv()
            .map_err(|_| "the plugin thread ended before it started".to_owned())??;
        Ok(Self {
            handle,
            shutdown: std::sync::Mutex::new(Some(shutdown_tx)),
            exited,
        })
    }

    /// Runs `fut` on this thread. A panic inside comes back as the handle's `JoinError`.
    pub fn spawn<F>(&self, name: &'static str, fut: F) -> JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        use tracing::Instrument;
        self.handle
            .spawn(fut.instrument(tracing::debug_span!("plugin", task = name)))
    }

    /// Lets the thread end once the call it runs (if any) returned; what is still spawned
    /// on it is dropped then.
    pub fn shut_down(&self) {
        let tx = self
            .shutdown
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(tx) = tx {
            let _ = tx.send(());
        }
    }

    /// True once the thread ended (after [`shut_down`](Self::shut_down) and the return of
    /// the call it was running).
    pub fn exited(&self) -> bool {
        self.exited.load(Ordering::SeqCst)
    }
}

impl Drop for PluginThread {
    fn drop(&mut self) {
        self.shut_down();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_blocked_plugin_thread_does_not_hold_the_caller_and_ends_when_its_call_returns() {
        let thread = PluginThread::start("test plugin".into()).expect("thread");
        let (started_tx, started_rx) = oneshot::channel();
        let blocked = thread.spawn("block", async move {
            let _ = started_tx.send(());
            std::thread::sleep(Duration::from_millis(300));
        });
        started_rx.await.expect("started");
        // The caller's single-threaded runtime still runs while the plugin thread blocks.
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!blocked.is_finished());
        thread.shut_down();
        assert!(!thread.exited(), "still inside the blocking call");
        blocked.await.expect("returns");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !thread.exited() {
            assert!(tokio::time::Instant::now() < deadline, "thread did not end");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn a_panic_on_the_plugin_thread_comes_back_as_a_join_error() {
        let thread = PluginThread::start("test plugin".into()).expect("thread");
        let r = thread.spawn("panic", async { panic!("boom") }).await;
        assert!(r.is_err_and(|e| e.is_panic()));
    }
}
