//! Leader election among control-plane replicas sharing one etcd, and the routing of
//! requests that only the leader may serve.
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
//! Routing: followers serve reads of the store themselves (GetConnector, ListConnectors,
//! GetConnectorStatus, GetOffsets, ListAuditEntries); every other admin and registry call
//! is forwarded as is, the caller's credentials included, to the leader's URL (executors
//! and grpcurl may point at any replica), and the leader authenticates and authorizes it
//! as if called directly. Without a known leader the answer is UNAVAILABLE; a request
//! already forwarded once is never forwarded again (UNAVAILABLE naming the leader
//! instead), so replicas with a stale view cannot bounce it between them.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, EventType, PutOptions, Txn, TxnOp, TxnOpResponse, WatchStream,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::transport::Channel;
use tracing::{info, warn};

use super::etcd_store::{EtcdStore, Fence, LEADER_KEY, WriteFence};
use crate::auth::{FORWARDED_PRINCIPAL_HEADER, forwarded_principal_value, peer_identity};

/// Default TTL of the election lease, in seconds: about how long a killed leader holds
/// up the herder at most (followers watch the leader key and campaign once it is gone).
pub const DEFAULT_ELECTION_TTL_SECS: u32 = 10;
/// Pause after a failed election step (etcd unreachable), in milliseconds.
const ELECTION_RETRY_MS: u64 = 500;
/// Header marking a request forwarded by a follower.
pub const FORWARDED_HEADER: &str = "x-wharf-forwarded-by";
/// Methods a follower serves from the store itself; everything else goes to the leader.
const FOLLOWER_LOCAL_METHODS: &[&str] = &[
    "/wharf.v1.ConnectorAdmin/GetConnector",
    "/wharf.v1.ConnectorAdmin/ListConnectors",
    "/wharf.v1.ConnectorAdmin/GetConnectorStatus",
    "/wharf.v1.ConnectorAdmin/GetOffsets",
    "/wharf.v1.ConnectorAdmin/ListAuditEntries",
];

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
}

impl Election {
    /// An election for the replica reachable at `url`, sharing `store`'s etcd and prefix.
    pub fn new(store: Arc<EtcdStore>, url: String, ttl_secs: u32) -> Self {
        let (role, _) = watch::channel(Role::Follower { leader: None });
        store.set_write_fence(WriteFence::Follower);
        Self {
            client: store.client(),
            key: format!("{}{LEADER_KEY}", store.prefix()),
            store,
            url,
            ttl_secs: ttl_secs.max(1),
            role,
        }
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
            .and_then(vec![TxnOp::put(
                self.key.clone(),
                self.url.clone(),
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else(vec![TxnOp::get(self.key.clone(), None)]);
        let resp = self.client.kv_client().txn(txn).await?;
        if resp.succeeded() {
            let rev = resp.header().map_or(0, |h| h.revision());
            self.store.set_write_fence(WriteFence::Leader(Fence {
                leader_create_revision: rev,
            }));
            info!(url = %self.url, revision = rev, "elected leader");
            self.set_role(Role::Leader);
            return Ok(Some(rev));
        }
        let current = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().cloned(),
            _ => None,
        });
        match current {
            Some(kv) if Some(kv.create_revision()) == held && kv.lease() == lease => Ok(held),
            Some(kv) => {
                if held.is_some() {
                    warn!("election: the leader key is no longer ours; stepping down");
                    self.store.set_write_fence(WriteFence::Follower);
                }
                let leader = String::from_utf8_lossy(kv.value()).into_owned();
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

/// Routes a gRPC service's requests by role (see the module doc).
#[derive(Clone)]
pub struct LeaderRoute<S> {
    inner: S,
    role: watch::Receiver<Role>,
    self_url: Arc<str>,
    channel: Arc<Mutex<Option<(String, Channel)>>>,
    tls: wharf::tls::ClientTls,
}

impl<S> LeaderRoute<S> {
    /// Forwards over TLS (the leader's URL is `https://`) with this process's certificate.
    #[must_use]
    pub fn with_tls(mut self, tls: wharf::tls::ClientTls) -> Self {
        self.tls = tls;
        self
    }

    /// Wraps `inner`, following `role`.
    pub fn new(inner: S, role: watch::Receiver<Role>, self_url: &str) -> Self {
        Self {
            inner,
            role,
            self_url: self_url.into(),
            channel: Arc::new(Mutex::new(None)),
            tls: wharf::tls::ClientTls::None,
        }
    }

    fn channel_to(&self, url: &str) -> Result<Channel, tonic::Status> {
        let mut guard = self
            .channel
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((u, c)) = guard.as_ref()
            && u == url
        {
            return Ok(c.clone());
        }
        let endpoint = wharf::tls::check_url(url, &self.tls)
            .map_err(|e| tonic::Status::unavailable(format!("leader URL {url:?}: {e}")))?
            .connect_timeout(Duration::from_millis(
                super::etcd_store::ETCD_CONNECT_TIMEOUT_MS,
            ));
        let c = wharf::tls::channel(endpoint, self.tls.clone());
        *guard = Some((url.to_owned(), c.clone()));
        Ok(c)
    }
}

impl<S: NamedService> NamedService for LeaderRoute<S> {
    const NAME: &'static str = S::NAME;
}

type BoxFut = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<http::Response<Body>, std::convert::Infallible>>
            + Send,
    >,
>;

impl<S> tower::Service<http::Request<Body>> for LeaderRoute<S>
where
    S: tower::Service<
            http::Request<Body>,
            Response = http::Response<Body>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFut;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<Body>) -> Self::Future {
        let role = self.role.borrow().clone();
        let local = FOLLOWER_LOCAL_METHODS.contains(&req.uri().path());
        let leader = match role {
            Role::Leader => None,
            Role::Follower { .. } if local => None,
            Role::Follower { leader } => Some(leader),
        };
        let Some(leader) = leader else {
            let fut = self.inner.call(req);
            return Box::pin(fut);
        };
        let refuse = |msg: String| -> BoxFut {
            let resp = tonic::Status::unavailable(msg).into_http();
            Box::pin(async move { Ok(resp) })
        };
        let Some(leader) = leader else {
            return refuse(
                "this control plane is a follower and no leader is elected yet; retry".into(),
            );
        };
        if req.headers().contains_key(FORWARDED_HEADER) {
            return refuse(format!(
                "this control plane is not the leader; the leader is {leader}"
            ));
        }
        let channel = match self.channel_to(&leader) {
            Ok(c) => c,
            Err(s) => return refuse(s.message().to_owned()),
        };
        if let Ok(v) = http::HeaderValue::from_str(&self.self_url) {
            req.headers_mut().insert(FORWARDED_HEADER, v);
        }
        // The caller's identity travels with the call: a bearer token as the unchanged
        // `authorization` header (the leader checks it again against its token file); a
        // client certificate's principal in FORWARDED_PRINCIPAL_HEADER, which the leader
        // believes only from a peer with the control-plane certificate. What a client put
        // in that header itself is dropped. See docs/security.md.
        req.headers_mut().remove(FORWARDED_PRINCIPAL_HEADER);
        let peer = peer_identity(req.extensions().get::<wharf::tls::PeerInfo>());
        if let Some(v) = forwarded_principal_value(peer.as_ref())
            .and_then(|v| http::HeaderValue::from_str(&v).ok())
        {
            req.headers_mut().insert(FORWARDED_PRINCIPAL_HEADER, v);
        }
        // The leader sees this replica's certificate: the original caller's identity
        // travels in a header it believes only from a control-plane certificate.
        let original = match wharf::tls::caller(req.extensions()) {
            wharf::identity::Caller::Known(id) => {
                http::HeaderValue::from_str(&id.to_uri(wharf::identity::DEFAULT_TRUST_DOMAIN)).ok()
            }
            wharf::identity::Caller::Plaintext
            | wharf::identity::Caller::Anonymous
            | wharf::identity::Caller::Invalid(_) => None,
        };
        match original {
            Some(v) => {
                req.headers_mut()
                    .insert(wharf::identity::FORWARDED_IDENTITY_HEADER, v);
            }
            None => {
                req.headers_mut()
                    .remove(wharf::identity::FORWARDED_IDENTITY_HEADER);
            }
        }
        let mut channel = channel;
        Box::pin(async move {
            use tower::ServiceExt;
            match channel.ready().await {
                Ok(ch) => match ch.call(req).await {
                    Ok(resp) => Ok(resp),
                    Err(e) => Ok(tonic::Status::unavailable(format!(
                        "forwarding to the leader {leader} failed: {e}"
                    ))
                    .into_http()),
                },
                Err(e) => Ok(tonic::Status::unavailable(format!(
                    "the leader {leader} is unreachable: {e}"
                ))
                .into_http()),
            }
        })
    }
}
