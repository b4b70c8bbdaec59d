//! The one way Wharf's production code spawns a tokio task: named (the name is in the
//! task's tracing span and in its panic report) and of a [`TaskKind`] that says what a
//! panic inside it and a cancellation of it mean.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use tokio::task::JoinHandle;
use tracing::Instrument;

/// What a spawned task is, which says what its panic and its cancellation mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    /// A loop of the process (the herder, the finalizer, the election, a server, the
    /// heartbeats). It runs until its cancellation token fires; its owner awaits the
    /// handle at shutdown. A panic means that loop no longer runs: it is logged at ERROR
    /// naming the task (the operator must restart the process), then reaches the handle.
    Service,
    /// Work whose handle the spawner awaits (a plugin call, a deletion step). A panic
    /// reaches the awaiting side as the handle's `JoinError` (`is_panic`), where the
    /// caller decides what it means (a plugin's: a FAILED state); nothing is logged here.
    /// Aborting the handle cancels it; dropping the handle lets it run on, detached.
    Awaited,
    /// Work nobody awaits (a watch stream, a database connection's driver). It ends on its
    /// own (the peer went away, the client was dropped). A panic is seen by no one else,
    /// so it is logged at WARN naming the task.
    Detached,
}

/// Spawns `fut` on the current tokio runtime as a task named `name` of kind `kind`.
///
/// # Panics
/// Outside a tokio runtime, as `tokio::spawn`.
pub fn spawn<F>(kind: TaskKind, name: &'static str, fut: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let fut = fut.instrument(tracing::debug_span!("task", task = name));
    match kind {
        TaskKind::Awaited => tokio::spawn(fut),
        TaskKind::Service | TaskKind::Detached => tokio::spawn(async move {
            match AssertUnwindSafe(fut).catch_unwind().await {
                Ok(out) => out,
                Err(panic) => {
                    report_panic(kind, name);
                    std::panic::resume_unwind(panic)
                }
            }
        }),
    }
}

/// Logs a panic of a task nobody else reports.
fn report_panic(kind: TaskKind, name: &'static str) {
    match kind {
        TaskKind::Service => tracing::error!(
            task = name,
            "background task panicked; it no longer runs: restart the process"
        ),
        TaskKind::Detached => tracing::warn!(task = name, "detached task panicked"),
        TaskKind::Awaited => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_kind_returns_the_output() {
        for kind in [TaskKind::Service, TaskKind::Awaited, TaskKind::Detached] {
            assert_eq!(spawn(kind, "t", async { 7 }).await.expect("joins"), 7);
        }
    }

    #[tokio::test]
    async fn a_panic_reaches_the_handle_for_every_kind() {
        for kind in [TaskKind::Service, TaskKind::Awaited, TaskKind::Detached] {
            let err = spawn(kind, "t", async { panic!("boom") })
                .await
                .expect_err("panicked");
            assert!(err.is_panic(), "{kind:?}: {err}");
        }
    }

    #[tokio::test]
    async fn aborting_the_handle_cancels_every_kind() {
        for kind in [TaskKind::Service, TaskKind::Awaited, TaskKind::Detached] {
            let h = spawn(kind, "t", std::future::pending::<()>());
            h.abort();
            assert!(h.await.expect_err("aborted").is_cancelled(), "{kind:?}");
        }
    }
}
