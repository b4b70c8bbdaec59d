//! The Kafka Connect REST gateway: an HTTP/1.1 listener (`--rest-listen`) with Kafka
//! Connect 4.x's routes, JSON shapes and status codes, a thin adapter over the admin core
//! ([`crate::admin`]) like the gRPC service: no rule lives here, only the translation of
//! requests and answers. Errors become Connect's `{"error_code", "message"}` body in one
//! place ([`error`]). Routes, the gRPC method behind each, and every remaining
//! difference from Kafka Connect: `docs/rest.md`.

mod access;
mod connectors;
mod delete;
pub mod error;
mod forward;
pub mod json;
pub mod loggers;
mod offsets;
mod plugins;
mod request;
mod resources;

pub use access::{RestAccess, known_params, rest_access};
pub use delete::CLEANUP_SKIPPED_HEADER;
pub use forward::{FORWARD_TIMEOUT_MS, LeaderForward, advertised_url, served_by_follower};
pub use request::{
    ALTER_OFFSETS_FIELDS, BODY_READ_TIMEOUT, CREATE_FIELDS, MAX_DRAIN_BYTES, OFFSET_ENTRY_FIELDS,
    SET_LOGGER_FIELDS, unknown_field,
};

use std::sync::Arc;

use axum::Router;
use axum::response::Response;
use axum::routing::{get, post, put};

use tokio::net::TcpListener;
use tracing::info;

use self::access::admit;
use self::connectors::{
    config, connector, create, health, list, patch_config, pause, put_config, restart,
    restart_task, resume, root, status, stop, task_status, tasks,
};
use self::delete::{delete, retry_cleanup};
use self::error::RestError;
use self::loggers::Loggers;
use self::loggers::{all_loggers, logger, set_logger};
use self::offsets::{alter_offsets, offsets, reset_offsets};
use self::plugins::{plugin_config, plugins, validate};
use self::resources::{adopt, orphaned, purge, reset_topics, resources, topics};
use crate::admin::Admin;
use crate::admin::guard::Guard;

/// Largest request body the gateway reads, in bytes (a config is at most 256 KiB, see
/// `grpc::convert`; offsets bodies are the larger ones).
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// The Kafka Connect REST API level this gateway answers as, in `GET /`.
pub const CONNECT_API_VERSION: &str = "4.0.0";
/// `kafka_cluster_id` in `GET /` when the record log is not Kafka (or no executor on
/// Kafka reported its cluster's id yet).
pub const CLUSTER_ID: &str = "wharf";

/// Shared state of the handlers.
#[derive(Clone)]
pub struct Gateway {
    admin: Admin,
    guard: Guard,
    loggers: Arc<Loggers>,
    /// On a replica of an elected cluster: where requests that need the leader go.
    forward: Option<LeaderForward>,
}

type RestResult = Result<Response, RestError>;

impl Gateway {
    /// A gateway over `admin`, callers checked by `guard` (the one the gRPC service
    /// uses); `loggers` changes log levels at run time.
    pub fn new(admin: Admin, guard: Guard, loggers: Arc<Loggers>) -> Self {
        Self {
            admin,
            guard,
            loggers,
            forward: None,
        }
    }

    /// With an election (`--store etcd`): while this replica follows, the routes it does
    /// not serve itself go to the leader's gateway ([`LeaderForward`]).
    #[must_use]
    pub fn with_leader_forward(mut self, forward: Option<LeaderForward>) -> Self {
        self.forward = forward;
        self
    }

    /// The routes. Unknown paths answer 404, known paths with another method 405, both
    /// with Connect's error body.
    pub fn router(self) -> Router {
        Router::new()
            .route("/", get(root))
            .route("/health", get(health))
            .route("/connectors", get(list).post(create))
            .route("/connectors/{name}", get(connector).delete(delete))
            .route(
                "/connectors/{name}/config",
                get(config).put(put_config).patch(patch_config),
            )
            .route("/connectors/{name}/status", get(status))
            .route("/connectors/{name}/tasks", get(tasks))
            .route("/connectors/{name}/tasks/{task}/status", get(task_status))
            .route(
                "/connectors/{name}/tasks/{task}/restart",
                post(restart_task),
            )
            .route("/connectors/{name}/pause", put(pause))
            .route("/connectors/{name}/resume", put(resume))
            .route("/connectors/{name}/stop", put(stop))
            .route("/connectors/{name}/restart", post(restart))
            .route("/connectors/{name}/cleanup/retry", post(retry_cleanup))
            .route(
                "/connectors/{name}/offsets",
                get(offsets).patch(alter_offsets).delete(reset_offsets),
            )
            .route("/connectors/{name}/resources", get(resources))
            .route("/connectors/{name}/topics", get(topics))
            .route("/connectors/{name}/topics/reset", put(reset_topics))
            .route("/resources/orphaned", get(orphaned))
            .route("/resources/orphaned/adopt", post(adopt))
            .route("/resources/orphaned/purge", post(purge))
            .route("/connector-plugins", get(plugins))
            .route("/connector-plugins/{class}/config", get(plugin_config))
            .route("/connector-plugins/{class}/config/validate", put(validate))
            .route("/admin/loggers", get(all_loggers))
            .route("/admin/loggers/{logger}", get(logger).put(set_logger))
            .fallback(|| async { RestError::NoRoute })
            .method_not_allowed_fallback(options_or_405)
            .route_layer(axum::middleware::from_fn_with_state(self.clone(), admit))
            // Outermost: a follower forwards before authenticating; the leader does that.
            .route_layer(axum::middleware::from_fn_with_state(
                self.clone(),
                forward::forward,
            ))
            .with_state(self)
    }
}

/// A known path with a method it does not serve: `OPTIONS` is answered 200 with an empty
/// body and the `Allow` header (axum adds it), as Connect's Jersey answers it; any other
/// method 405.
async fn options_or_405(method: axum::http::Method) -> Response {
    use axum::response::IntoResponse;
    if method == axum::http::Method::OPTIONS {
        return axum::http::StatusCode::OK.into_response();
    }
    RestError::MethodNotAllowed.into_response()
}

/// Serves `router` on `listener` (HTTP/1.1, and HTTP/2) until `shutdown` resolves: HTTPS
/// with the control plane's certificate when `tls` is set (the same rules as the gRPC
/// listener, docs/security.md, but ALPN offers `http/1.1` besides `h2`), plaintext
/// otherwise. A connection that sends no request for `timeout` is closed
/// ([`wharf::http::REQUEST_HEADER_TIMEOUT`] outside tests). Handlers can read the caller's
/// connection (address, client certificate) with `ConnectInfo<RestPeer>`.
///
/// # Errors
/// When the listener's address cannot be read.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<wharf::tls::Tls>>,
    router: Router,
    timeout: std::time::Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    info!(%addr, https = tls.is_some(), "Kafka Connect REST gateway listening");
    let incoming = RestIncoming {
        addr,
        connections: wharf::tls::serve_incoming_https(listener, tls),
    };
    wharf::http::serve(
        incoming,
        router,
        |io: &wharf::tls::ServerIo, _| RestPeer(io.peer_info().clone()),
        timeout,
        shutdown,
    )
    .await;
    Ok(())
}

/// The connections of the REST listener, TLS handshakes done by
/// [`wharf::tls::serve_incoming_https`].
struct RestIncoming {
    addr: std::net::SocketAddr,
    connections: tokio_stream::wrappers::ReceiverStream<std::io::Result<wharf::tls::ServerIo>>,
}

impl axum::serve::Listener for RestIncoming {
    type Io = wharf::tls::ServerIo;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        use tokio_stream::StreamExt;
        loop {
            match self.connections.next().await {
                Some(Ok(io)) => {
                    let remote = io.peer_info().remote_addr.unwrap_or(self.addr);
                    return (io, remote);
                }
                Some(Err(e)) => tracing::warn!(error = %e, "REST accept failed"),
                // The accept loop only ends when this stream is dropped.
                None => std::future::pending::<()>().await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

/// The caller of one REST connection: address, whether it is TLS, client certificate.
#[derive(Debug, Clone)]
pub struct RestPeer(pub wharf::tls::PeerInfo);
