//! One NATS connection of the JetStream log.

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream;

/// Longest time between two checks of a connection's state while waiting on it (the
/// disconnect event normally ends the wait sooner).
const CONNECTION_CHECK_MS: u64 = 250;

/// One NATS connection of the log; it never reconnects (see the backend's "Connections").
pub(super) struct Conn {
    pub(super) client: async_nats::Client,
    pub(super) js: jetstream::Context,
    /// Becomes true when async-nats reports the connection lost.
    pub(super) lost: tokio::sync::watch::Receiver<bool>,
}

impl Conn {
    pub(super) fn alive(&self) -> bool {
        !*self.lost.borrow()
            && self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// Resolves once the connection is lost.
    pub(super) async fn lost(&self) {
        let mut lost = self.lost.clone();
        while self.alive() {
            // The state is polled too: an event may be dropped when the event queue is full.
            let check = Duration::from_millis(CONNECTION_CHECK_MS);
            if let Ok(Err(_)) = tokio::time::timeout(check, lost.changed()).await {
                tokio::time::sleep(check).await;
            }
        }
    }

    /// Runs `fut` for at most `limit`, and not past the loss of this connection (a lost
    /// connection's calls would otherwise wait for nothing). The error says which ended it.
    pub(super) async fn within<F: Future>(
        &self,
        limit: Duration,
        fut: F,
    ) -> Result<F::Output, String> {
        tokio::select! {
            r = tokio::time::timeout(limit, fut) => {
                r.map_err(|_| format!("no answer within {} ms", limit.as_millis()))
            }
            () = self.lost() => Err("connection to NATS lost".to_string()),
        }
    }
}
