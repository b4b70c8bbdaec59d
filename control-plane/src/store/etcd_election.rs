//! Leader election among control-plane replicas sharing one etcd. The routing of
//! requests that only the leader may serve follows the [`Role`] it publishes
//! (`crate::grpc::leader_route`).
//!
//! Election: each replica grants itself an etcd lease (`--etcd-election-ttl-secs`) and
//! keeps it alive; it becomes leader by creating the key `<prefix>leader` (value: its
//! URL) on that lease in a `Txn` that requires the key to be absent. The leader's lease
//! going away (process killed, partition) deletes the key and another replica creates
//! it on its next try; a follower watches the key and tries as soon as it is deleted
//! (a leader that resigns revokes its lease), else every third of the TTL. The leader fences its store writes on the key's
//! `create_revision` ([`super::etcd_store::Fence`]) and steps down, stopping its loops,
//! as soon as it cannot confirm its lease within the TTL (minus a safety margin), so a
//! deposed leader neither writes nor calls executors once a successor may exist.
//!
//! A leader that serves the Kafka Connect REST gateway also writes its REST URL under
//! `<prefix>rest/leader` ([`LEADER_REST_KEY`]) in the same `Txn`, on the same lease;
//! followers read both keys in one `Txn` and publish the REST URL beside the [`Role`]
//! ([`Election::subscribe_rest_leader`]), so that their gateway forwards to it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, EventType, PutOptions, Txn, TxnOp, TxnOpResponse, WatchStream,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::etcd_store::{EtcdStore, Fence, LEADER_KEY, WriteFence};

/// Default TTL of the election lease, in seconds: about how long a killed leader holds
/// up the herder at most (followers watch the leader key and campaign once it is gone).
pub const DEFAULT_ELECTION_TTL_SECS: u32 = 10;
/// Pause after a failed election step (etcd unreachable), in milliseconds.
const ELECTION_RETRY_MS: u64 = 500;
/// Key (under the prefix) of the leader's REST gateway URL, `http(s)://host:port`; absent
/// when the leader serves no gateway.
pub const LEADER_REST_KEY: &str = "rest/leader";
/// This replica's role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Runs the herder and the finalizer.
    Leader,
    /// Serves reads; forwards the rest to `leader` (None: no leader known yet).
    Follower {
        /// URL of the leader, `http://ip:port`.
        leader: Option<String>,
    },
}

/// The election of one replica.
pub struct Election {
    client: Client,
    store: Arc<EtcdStore>,
    key: String,
    url: String,
    ttl_secs: u32,
    role: watch::Sender<Role>,
    rest_key: String,
    rest_url: Option<String>,
    rest_leader: watch::Sender<Option<String>>,
}

impl Election {
    /// An election for the replica reachable at `url`, sharing `store`'s etcd and prefix.
    pub fn new(store: Arc<EtcdStore>, url: String, ttl_secs: u32) -> Self {
        let (role, _) = watch::channel(Role::Follower { leader: None });
        store.set_write_fence(WriteFence::Follower);
        Self {
            client: store.client(),
            key: format!("{}{LEADER_KEY}", store.prefix()),
            rest_key: format!("{}{LEADER_REST_KEY}", store.prefix()),
            store,
            url,
            ttl_secs: ttl_secs.max(1),
            role,
            rest_url: None,
            rest_leader: watch::channel(None).0,
        }
    }

    /// This replica's REST gateway URL, written beside the leader key while it leads.
    #[must_use]
    pub fn with_rest_url(mut self, url: Option<String>) -> Self {
        self.rest_url = url;
        self
    }

    /// Follows the REST gateway URL of the leader this replica follows (`None`: no
    /// leader known, this replica leads, or the leader serves no gateway).
    pub fn subscribe_rest_leader(&self) -> watch::Receiver<Option<String>> {
        self.rest_leader.subscribe()
    }

    /// Follows role changes.
    pub fn subscribe(&self) -> watch::Receiver<Role> {
        self.role.subscribe()
    }

    fn set_role(&self, role: Role) {
        self.role.send_if_modified(|r| {
            if *r == role {
                return false;
            }
            info!(?role, "control-plane role changed");
            *r = role;
            true
        });
    }

    fn step_down(&self) {
        self.store.set_write_fence(WriteFence::Follower);
        self.set_role(Role::Follower { leader: None });
        self.set_rest_leader(None);
    }

    fn set_rest_leader(&self, url: Option<String>) {
        self.rest_leader.send_if_modified(|r| {
            if *r == url {
                return false;
            }
            *r = url;
            true
        });
    }

    /// Campaigns and holds leadership until `cancel` fires; then resigns (revokes its
    /// lease, so that another replica takes over at once).
    pub async fn run(self, cancel: CancellationToken) {
        let ttl = Duration::from_secs(u64::from(self.ttl_secs));
        // Renew three times per TTL; step down when no renewal confirmed for 2/3 of it.
        let tick = ttl / 3;
        let margin = ttl / 3;
        while !cancel.is_cancelled() {
            let lease = match self
                .client
                .clone()
                .lease_grant(i64::from(self.ttl_secs), None)
                .await
            {
                Ok(l) => l.id(),
                Err(e) => {
                    warn!(error = %e, "election: lease grant failed; retrying");
                    self.pause(&cancel, Duration::from_millis(ELECTION_RETRY_MS))
                        .await;
                    continue;
                }
            };
            let mut confirmed = Instant::now();
            let mut fence: Option<i64> = None;
            let keeper = self.client.clone().lease_keep_alive(lease).await;
            let Ok((mut keeper, mut stream)) = keeper else {
                self.pause(&cancel, Duration::from_millis(ELECTION_RETRY_MS))
                    .await;
                continue;
            };
            // Without it a follower would wait up to a third of the TTL after a leader
            // resigned (a rolling restart) or its lease expired (a killed leader).
            let mut leader_key = self.client.clone().watch(self.key.clone(), None).await.ok();
            loop {
                match self.campaign(lease, fence).await {
                    Ok(f) => fence = f,
                    Err(e) => warn!(error = %e, "election: campaign step failed"),
                }
                tokio::select! {
                    () = cancel.cancelled() => break,
                    () = tokio::time::sleep(tick) => {}
                    () = deleted(&mut leader_key), if fence.is_none() => {}
                }
                let sent = Instant::now();
                let renewed = tokio::time::timeout(tick, async {
                    keeper.keep_alive().await?;
                    stream.message().await
                })
                .await;
                match renewed {
                    Ok(Ok(Some(r))) if r.ttl() > 0 => confirmed = sent,
                    Ok(Ok(_)) => {
                        warn!("election: lease expired");
                        break;
                    }
                    Ok(Err(e)) => warn!(error = %e, "election: lease renewal failed"),
                    Err(_) => warn!("election: lease renewal timed out"),
                }
                if confirmed.elapsed() + margin >= ttl {
                    if fence.is_some() {
                        warn!("election: lease not confirmed in time; stepping down");
                    } else {
                        // A follower has nothing to step down from.
                        warn!("election: lease not confirmed in time; a new one is taken");
                    }
                    break;
                }
            }
            self.step_down();
            let _ = self.client.clone().lease_revoke(lease).await;
            if fence.is_some() {
                // A leader that just lost its lease likely has a problem (etcd latency,
                // a pause): sit out one TTL so that a healthy replica takes over rather
                // than this one winning again at once.
                self.pause(&cancel, ttl).await;
            }
        }
        self.step_down();
    }

    async fn pause(&self, cancel: &CancellationToken, d: Duration) {
        tokio::select! {
            () = cancel.cancelled() => {}
            () = tokio::time::sleep(d) => {}
        }
    }

    /// One try: create the leader key on `lease` if absent; otherwise learn who leads.
    /// Returns the fence held (Some while leader).
    async fn campaign(
        &self,
        lease: i64,
        held: Option<i64>,
    ) -> Result<Option<i64>, etcd_client::Error> {
        let txn = Txn::new()
            .when(vec![Compare::create_revision(
                self.key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then(vec![
                TxnOp::put(
                    self.key.clone(),
                    self.url.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                ),
                match &self.rest_url {
                    Some(rest) => TxnOp::put(
                        self.rest_key.clone(),
                        rest.clone(),
                        Some(PutOptions::new().with_lease(lease)),
                    ),
                    None => TxnOp::delete(self.rest_key.clone(), None),
                },
            ])
            .or_else(vec![
                TxnOp::get(self.key.clone(), None),
                TxnOp::get(self.rest_key.clone(), None),
            ]);
        let resp = self.client.kv_client().txn(txn).await?;
        if resp.succeeded() {
            let rev = resp.header().map_or(0, |h| h.revision());
            self.store.set_write_fence(WriteFence::Leader(Fence {
                leader_create_revision: rev,
            }));
            info!(url = %self.url, revision = rev, "elected leader");
            self.set_rest_leader(None);
            self.set_role(Role::Leader);
            return Ok(Some(rev));
        }
        let mut gets = resp.op_responses().into_iter().filter_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g.kvs().first().cloned()),
            _ => None,
        });
        let current = gets.next().flatten();
        let rest = gets
            .next()
            .flatten()
            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned());
        match current {
            Some(kv) if Some(kv.create_revision()) == held && kv.lease() == lease => Ok(held),
            Some(kv) => {
                if held.is_some() {
                    warn!("election: the leader key is no longer ours; stepping down");
                    self.store.set_write_fence(WriteFence::Follower);
                }
                let leader = String::from_utf8_lossy(kv.value()).into_owned();
                // The REST URL first: a gateway that sees the new role finds it.
                self.set_rest_leader(rest);
                self.set_role(Role::Follower {
                    leader: Some(leader),
                });
                Ok(None)
            }
            None => Ok(None), // deleted in between: next try
        }
    }
}

/// Resolves when `watch` (of the leader key) reports the key deleted. A watch that
/// ended or failed is dropped (`None`) and never resolves: the campaign interval still
/// runs.
async fn deleted(watch: &mut Option<WatchStream>) {
    let Some(stream) = watch.as_mut() else {
        return std::future::pending().await;
    };
    loop {
        match stream.message().await {
            Ok(Some(r))
                if r.events()
                    .iter()
                    .any(|e| e.event_type() == EventType::Delete) =>
            {
                return;
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    *watch = None;
    std::future::pending().await
}
