//! Routing of the admin and registry services among control-plane replicas by the
//! [`Role`] the election publishes (`crate::store::etcd_election`): followers serve
//! reads of the store themselves (GetConnector, ListConnectors, GetConnectorStatus,
//! GetOffsets, ListAuditEntries); every other admin and registry call
//! is forwarded as is, the caller's credentials included, to the leader's URL (executors
//! and grpcurl may point at any replica), and the leader authenticates and authorizes it
//! as if called directly. Without a known leader the answer is UNAVAILABLE; a request
//! already forwarded once is never forwarded again (UNAVAILABLE naming the leader
//! instead), so replicas with a stale view cannot bounce it between them.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::watch;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::transport::Channel;

use crate::auth::{FORWARDED_PRINCIPAL_HEADER, forwarded_principal_value, peer_identity};
use crate::store::etcd_election::Role;

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
            .connect_timeout(Duration::from_millis(crate::store::ETCD_CONNECT_TIMEOUT_MS));
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
