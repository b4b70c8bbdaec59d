//! A follower's gateway forwards to the leader's, as Kafka Connect's workers forward REST
//! requests to their leader and as `grpc::leader_route` forwards gRPC calls: every route
//! whose answer needs the leader (writes, the plugins the live executors offer,
//! validation, offsets) is sent as it is, the caller's credentials included, to the REST
//! URL the leader published (`store::etcd_election::LEADER_REST_KEY`); the leader
//! authenticates, authorizes and audits it as if called directly. Reads of the store
//! (connectors, configs, tasks, statuses), `GET /`, `GET /health` and the loggers (a
//! process's own) are served by the follower itself ([`served_by_follower`]). Without a
//! known leader, or when the leader published no REST URL, the answer is 503 naming what
//! is missing; a request already forwarded once is never forwarded again (503 naming the
//! leader's REST URL), so replicas with a stale view cannot bounce it between them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use tokio::sync::watch;
use tonic::transport::Channel;

use super::Gateway;
use super::error::RestError;
use crate::auth::{FORWARDED_PRINCIPAL_HEADER, forwarded_principal_value, peer_identity};
use crate::grpc::leader_route::FORWARDED_HEADER;
use crate::store::etcd_election::Role;

/// Bound on one forwarded request, milliseconds: the leader's longest answer is a
/// `DELETE ?wait=true` (its `waitTimeoutMs`, 30 s by default), plus a margin.
pub const FORWARD_TIMEOUT_MS: u64 = 120_000;

/// Headers that belong to one connection (RFC 9110 7.6.1) or that HTTP/2 carries
/// otherwise: not sent on to the leader.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "host",
];

/// Whether a follower answers `method` on `route` (axum's matched path) itself: the
/// public routes, the loggers (each process has its own), and the reads of the store
/// that gRPC followers also serve (`grpc::leader_route`). Pure; a row per route in the
/// tests.
pub fn served_by_follower(method: &Method, route: &str) -> bool {
    match *method {
        Method::GET => matches!(
            route,
            "/" | "/health"
                | "/connectors"
                | "/connectors/{name}"
                | "/connectors/{name}/config"
                | "/connectors/{name}/tasks"
                | "/connectors/{name}/status"
                | "/connectors/{name}/tasks/{task}/status"
                | "/admin/loggers"
                | "/admin/loggers/{logger}"
        ),
        Method::PUT => route == "/admin/loggers/{logger}",
        // The methods a route serves are the same on every replica.
        Method::OPTIONS => true,
        _ => false,
    }
}

/// The URL this replica's REST gateway is reached at: the scheme and host of
/// `self_url` (the gRPC URL other replicas dial, `--advertise-url` when given) with the
/// gateway's bound port. `None` when `self_url` has no host.
pub fn advertised_url(self_url: &str, rest: std::net::SocketAddr) -> Option<String> {
    let uri: http::Uri = self_url.parse().ok()?;
    let scheme = uri.scheme_str().unwrap_or("http");
    let host = uri.host()?;
    Some(format!("{scheme}://{host}:{}", rest.port()))
}

/// What a follower does with a request it does not serve itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forward {
    /// Serve it here (this replica leads).
    Local,
    /// Send it to the leader's gateway at this URL.
    To(String),
    /// Answer 503 with this message.
    Refuse(String),
}

/// Decides where a request that needs the leader goes, from this replica's `role`, the
/// leader's published REST URL and whether the request was `already_forwarded`. Pure.
pub fn decide(role: &Role, rest_leader: Option<&str>, already_forwarded: bool) -> Forward {
    match (role, rest_leader) {
        (Role::Leader, _) => Forward::Local,
        (Role::Follower { leader: None }, _) => Forward::Refuse(
            "this control plane is a follower and no leader is elected yet; retry".into(),
        ),
        (
            Role::Follower {
                leader: Some(leader),
            },
            None,
        ) => Forward::Refuse(format!(
            "this control plane is a follower and the leader {leader} serves no REST gateway (start it with --rest-listen); send the request to the leader's gRPC API"
        )),
        (Role::Follower { .. }, Some(rest)) if already_forwarded => Forward::Refuse(format!(
            "this control plane is not the leader; the leader's REST gateway is {rest}"
        )),
        (Role::Follower { .. }, Some(rest)) => Forward::To(rest.to_owned()),
    }
}

/// The forwarding state of a follower's gateway.
#[derive(Clone)]
pub struct LeaderForward {
    role: watch::Receiver<Role>,
    rest_leader: watch::Receiver<Option<String>>,
    self_url: Arc<str>,
    tls: wharf::tls::ClientTls,
    channel: Arc<Mutex<Option<(String, Channel)>>>,
}

impl LeaderForward {
    /// Follows `role` and the leader's REST URL `rest_leader` (both published by the
    /// election); `self_url` names this replica in [`FORWARDED_HEADER`]; `tls` dials an
    /// `https://` leader with this process's certificate.
    pub fn new(
        role: watch::Receiver<Role>,
        rest_leader: watch::Receiver<Option<String>>,
        self_url: &str,
        tls: wharf::tls::ClientTls,
    ) -> Self {
        Self {
            role,
            rest_leader,
            self_url: self_url.into(),
            tls,
            channel: Arc::new(Mutex::new(None)),
        }
    }

    /// An HTTP/2 channel to the leader's gateway (which serves HTTP/2 beside HTTP/1.1),
    /// reused while the leader's URL stays the same.
    fn channel_to(&self, url: &str) -> Result<Channel, RestError> {
        let mut guard = self
            .channel
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((u, c)) = guard.as_ref()
            && u == url
        {
            return Ok(c.clone());
        }
        let target = wharf::tls::check_url(url, &self.tls)
            .map_err(|e| RestError::LeaderUnavailable(format!("leader REST URL {url:?}: {e}")))?
            .connect_timeout(Duration::from_millis(crate::store::ETCD_CONNECT_TIMEOUT_MS))
            .timeout(Duration::from_millis(FORWARD_TIMEOUT_MS));
        let c = wharf::tls::channel(target, self.tls.clone());
        *guard = Some((url.to_owned(), c.clone()));
        Ok(c)
    }

    async fn send(&self, url: &str, req: Request) -> Response {
        let channel = match self.channel_to(url) {
            Ok(c) => c,
            Err(e) => return e.into_response(),
        };
        let (mut parts, body) = req.into_parts();
        for h in HOP_BY_HOP {
            parts.headers.remove(*h);
        }
        if let Ok(v) = http::HeaderValue::from_str(&self.self_url) {
            parts.headers.insert(FORWARDED_HEADER, v);
        }
        // The caller's identity travels with the request as with gRPC: a bearer token as
        // the unchanged `authorization` header (the leader checks it again); a client
        // certificate's principal in FORWARDED_PRINCIPAL_HEADER, which the leader believes
        // only from a peer with the control-plane certificate. What a client put there
        // itself is dropped.
        parts.headers.remove(FORWARDED_PRINCIPAL_HEADER);
        let connection = parts
            .extensions
            .get::<axum::extract::ConnectInfo<super::RestPeer>>()
            .map(|c| &c.0.0);
        if let Some(v) = forwarded_principal_value(peer_identity(connection).as_ref())
            .and_then(|v| http::HeaderValue::from_str(&v).ok())
        {
            parts.headers.insert(FORWARDED_PRINCIPAL_HEADER, v);
        }
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", http::uri::PathAndQuery::as_str);
        let Ok(uri) = path.parse::<http::Uri>() else {
            return RestError::BadRequest(format!("path {path:?} cannot be forwarded"))
                .into_response();
        };
        let mut out = http::Request::new(tonic::body::Body::new(body));
        *out.method_mut() = parts.method;
        *out.uri_mut() = uri;
        *out.headers_mut() = parts.headers;
        use tower::ServiceExt;
        let answer = match channel.oneshot(out).await {
            Ok(r) => r,
            Err(e) => {
                return RestError::LeaderUnavailable(format!(
                    "forwarding to the leader's REST gateway {url} failed: {}",
                    wharf::tls::error_chain(&e)
                ))
                .into_response();
            }
        };
        let (mut parts, body) = answer.into_parts();
        for h in HOP_BY_HOP {
            parts.headers.remove(*h);
        }
        Response::from_parts(parts, axum::body::Body::new(body))
    }
}

/// In front of [`super::access::admit`]: on a follower, a route it does not serve itself
/// goes to the leader (see the module doc); everything else runs here.
pub(super) async fn forward(
    State(g): State<Gateway>,
    route: MatchedPath,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(f) = &g.forward else {
        return next.run(req).await;
    };
    if served_by_follower(req.method(), route.as_str()) {
        return next.run(req).await;
    }
    let role = f.role.borrow().clone();
    let rest_leader = f.rest_leader.borrow().clone();
    let already = req.headers().contains_key(FORWARDED_HEADER);
    match decide(&role, rest_leader.as_deref(), already) {
        Forward::Local => next.run(req).await,
        Forward::Refuse(msg) => RestError::LeaderUnavailable(msg).into_response(),
        Forward::To(url) => f.send(&url, req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_serves_store_reads_loggers_and_the_public_routes() {
        for r in [
            "/",
            "/health",
            "/connectors",
            "/connectors/{name}",
            "/connectors/{name}/config",
            "/connectors/{name}/tasks",
            "/connectors/{name}/status",
            "/connectors/{name}/tasks/{task}/status",
            "/admin/loggers",
            "/admin/loggers/{logger}",
        ] {
            assert!(served_by_follower(&Method::GET, r), "GET {r}");
        }
        assert!(served_by_follower(&Method::PUT, "/admin/loggers/{logger}"));
    }

    #[test]
    fn a_follower_forwards_writes_plugins_validation_and_offsets() {
        for (m, r) in [
            (Method::POST, "/connectors"),
            (Method::PUT, "/connectors/{name}/config"),
            (Method::PATCH, "/connectors/{name}/config"),
            (Method::DELETE, "/connectors/{name}"),
            (Method::PUT, "/connectors/{name}/pause"),
            (Method::PUT, "/connectors/{name}/resume"),
            (Method::PUT, "/connectors/{name}/stop"),
            (Method::POST, "/connectors/{name}/restart"),
            (Method::POST, "/connectors/{name}/tasks/{task}/restart"),
            (Method::POST, "/connectors/{name}/cleanup/retry"),
            (Method::GET, "/connectors/{name}/offsets"),
            (Method::PATCH, "/connectors/{name}/offsets"),
            (Method::DELETE, "/connectors/{name}/offsets"),
            (Method::GET, "/connector-plugins"),
            (Method::GET, "/connector-plugins/{class}/config"),
            (Method::PUT, "/connector-plugins/{class}/config/validate"),
        ] {
            assert!(!served_by_follower(&m, r), "{m} {r}");
        }
    }

    #[test]
    fn the_leader_serves_everything_itself() {
        assert_eq!(decide(&Role::Leader, None, false), Forward::Local);
        assert_eq!(
            decide(&Role::Leader, Some("http://x:1"), true),
            Forward::Local
        );
    }

    #[test]
    fn a_follower_forwards_to_the_published_rest_url() {
        let role = Role::Follower {
            leader: Some("http://10.0.0.1:7000".into()),
        };
        assert_eq!(
            decide(&role, Some("http://10.0.0.1:8083"), false),
            Forward::To("http://10.0.0.1:8083".into())
        );
    }

    #[test]
    fn a_forwarded_request_is_not_forwarded_again() {
        let role = Role::Follower {
            leader: Some("http://10.0.0.1:7000".into()),
        };
        match decide(&role, Some("http://10.0.0.1:8083"), true) {
            Forward::Refuse(m) => assert!(m.contains("http://10.0.0.1:8083"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn without_a_leader_or_its_rest_url_the_follower_says_which_is_missing() {
        match decide(&Role::Follower { leader: None }, None, false) {
            Forward::Refuse(m) => assert!(m.contains("no leader is elected"), "{m}"),
            other => panic!("{other:?}"),
        }
        let role = Role::Follower {
            leader: Some("http://10.0.0.1:7000".into()),
        };
        match decide(&role, None, false) {
            Forward::Refuse(m) => assert!(m.contains("serves no REST gateway"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_rest_url_takes_the_advertised_host_and_the_gateway_port() {
        let a: std::net::SocketAddr = "0.0.0.0:8083".parse().unwrap();
        assert_eq!(
            advertised_url("https://cp1.example:7000", a).as_deref(),
            Some("https://cp1.example:8083")
        );
        assert_eq!(
            advertised_url("http://127.0.0.1:7000", a).as_deref(),
            Some("http://127.0.0.1:8083")
        );
        assert_eq!(advertised_url("not a url", a), None);
    }
}
