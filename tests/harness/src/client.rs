//! Typed tonic clients of the Wharf services for the suites (the suites drive the API
//! through the generated clients, not a grpcurl process): a channel over
//! plaintext or mutual TLS (`wharf::tls`, docs/security.md), an optional bearer token
//! (`--admin-tokens`, docs/security.md), and [`rpc`], the JSON-in, JSON-out call most
//! suites assert with.
//!
//! [`rpc`] takes the request as proto3 JSON, turns it into the generated request type
//! (by the descriptor set the server reflects, `wharf::pb::FILE_DESCRIPTOR_SET`), calls
//! the typed client, and gives the response back as proto3 JSON with every field
//! written out (an unset message field as `null`), so that a suite reads `body["status"]`
//! as an operator reads the documented JSON.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use prost::Message;
use prost_reflect::{
    DescriptorPool, DynamicMessage, MessageDescriptor, ReflectMessage, SerializeOptions,
};
use serde_json::Value;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Status};
use wharf::pb::v1 as pb;
use wharf::pb::v1::connector_admin_client::ConnectorAdminClient;
use wharf::pb::v1::executor_client::ExecutorClient;

/// Upper bound on one call, as the `-max-time 60` the suites ran grpcurl with.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Upper bound on making a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS side of a client: trust `ca`, present `cert`/`key` when given (none: an
/// anonymous TLS client).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientCert {
    /// CA certificate (PEM) the server's certificate must chain to.
    pub ca: PathBuf,
    /// (certificate, key) PEM files the client presents.
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// How a client reaches one server: TLS or plaintext, and the `authorization` header.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Dial {
    /// `None`: plaintext (`http://`).
    pub tls: Option<ClientCert>,
    /// The whole `authorization` header value sent with every call, e.g. `Bearer <token>`.
    pub authorization: Option<String>,
}

impl Dial {
    /// Plaintext, no header.
    pub fn plaintext() -> Self {
        Self::default()
    }

    /// Sends `authorization: Bearer <token>`.
    pub fn bearer(token: &str) -> Self {
        Self::plaintext().with_authorization(format!("Bearer {token}"))
    }

    /// Sends `authorization: <value>` as given (for malformed headers).
    pub fn with_authorization(mut self, value: impl Into<String>) -> Self {
        self.authorization = Some(value.into());
        self
    }

    /// Over TLS with `cert`.
    pub fn with_tls(mut self, cert: ClientCert) -> Self {
        self.tls = Some(cert);
        self
    }
}

/// Adds the `authorization` header of a [`Dial`] to every request.
#[derive(Clone, Default)]
pub struct Authorization(Option<AsciiMetadataValue>);

impl Interceptor for Authorization {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            request.metadata_mut().insert("authorization", v.clone());
        }
        Ok(request)
    }
}

/// A channel with the [`Dial`]'s header on every call.
pub type AuthChannel = InterceptedService<Channel, Authorization>;
/// The typed `wharf.v1.ConnectorAdmin` client the suites use.
pub type Admin = ConnectorAdminClient<AuthChannel>;
/// The typed `wharf.v1.Executor` client.
pub type Executor = ExecutorClient<AuthChannel>;
/// The typed `grpc.health.v1.Health` client.
pub type Health = tonic_health::pb::health_client::HealthClient<AuthChannel>;

/// A lazy channel to `addr` (`IP:PORT`, or an `http(s)://` URL as ListExecutors shows
/// it): TLS when `dial.tls`, with [`CONNECT_TIMEOUT`] and [`CALL_TIMEOUT`]. Must be made
/// inside a tokio runtime (the channel's worker runs there). Panics on a malformed
/// address or unreadable certificate files (a test bug).
pub fn channel(addr: &str, dial: &Dial) -> AuthChannel {
    let bare = addr
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let (url, tls) = match &dial.tls {
        Some(cert) => {
            let identity = cert
                .identity
                .as_ref()
                .map(|(c, k)| (c.as_path(), k.as_path()));
            let config = wharf::tls::client_config(&cert.ca, identity)
                .unwrap_or_else(|e| panic!("client TLS config {cert:?}: {e}"));
            (
                format!("https://{bare}"),
                wharf::tls::ClientTls::Fixed(config),
            )
        }
        None => (format!("http://{bare}"), wharf::tls::ClientTls::None),
    };
    let endpoint = wharf::tls::check_url(&url, &tls)
        .unwrap_or_else(|e| panic!("{url}: {e}"))
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(CALL_TIMEOUT);
    let header = dial.authorization.as_ref().map(|v| {
        MetadataValue::try_from(v.as_str()).unwrap_or_else(|e| panic!("header {v:?}: {e}"))
    });
    InterceptedService::new(wharf::tls::channel(endpoint, tls), Authorization(header))
}

/// `message` as a request sent in the caller's trace: with the W3C header
/// `traceparent: 00-<trace>-<span>-<flags>` (`flags` `01` sampled, `00` not).
pub fn in_trace<T>(message: T, trace: &str, span: &str, flags: &str) -> tonic::Request<T> {
    let mut req = tonic::Request::new(message);
    req.metadata_mut().insert(
        "traceparent",
        format!("00-{trace}-{span}-{flags}")
            .parse()
            .expect("traceparent"),
    );
    req
}

/// A typed admin client of the control plane at `addr` (see [`channel`]).
pub fn admin(addr: &str, dial: &Dial) -> Admin {
    ConnectorAdminClient::new(channel(addr, dial))
}

/// A typed client of the executor at `addr` (see [`channel`]).
pub fn executor(addr: &str, dial: &Dial) -> Executor {
    ExecutorClient::new(channel(addr, dial))
}

/// A typed health client of the server at `addr` (see [`channel`]).
pub fn health(addr: &str, dial: &Dial) -> Health {
    tonic_health::pb::health_client::HealthClient::new(channel(addr, dial))
}

/// (gRPC status code as a number, message) of a failed call, for assertions: the code
/// as `grpc-status` carries it (3 = INVALID_ARGUMENT, ...), the message as sent.
pub fn status_parts(status: &Status) -> (i32, String) {
    (status.code() as i32, status.message().to_owned())
}

/// Result of one [`rpc`].
#[derive(Debug)]
pub struct Call {
    /// gRPC status code (0 = OK).
    pub code: i32,
    /// The response as proto3 JSON, every field written out (`Null` on error).
    pub body: Value,
    /// On error `<Code>: <message>` (e.g. `InvalidArgument: config[name]: ...`); empty on OK.
    pub err: String,
}

impl Call {
    fn failed(status: &Status) -> Self {
        let (code, message) = status_parts(status);
        Self {
            code,
            body: Value::Null,
            err: format!("{:?}: {message}", status.code()),
        }
    }
}

/// The runtime [`rpc`] runs its calls on, so that it can be called (and block) from any
/// test, async or not, as the grpcurl process it replaced was.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("harness-rpc")
            .enable_all()
            .build()
            .expect("harness runtime")
    })
}

/// The Wharf descriptor set (what reflection serves).
fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(wharf::pb::FILE_DESCRIPTOR_SET).expect("wharf descriptor set")
    })
}

fn message(name: &str) -> MessageDescriptor {
    pool()
        .get_message_by_name(name)
        .unwrap_or_else(|| panic!("no message {name} in the wharf protos"))
}

/// Calls `method` (`package.Service/Method`: `wharf.v1.ConnectorAdmin/...`,
/// `wharf.v1.Executor/...`, `grpc.health.v1.Health/Check`) on `addr` with the typed
/// client, `body` being the request as proto3 JSON. Blocks until the answer.
/// A failed call is a [`Call`] with its code; a body that is not the request's JSON, an
/// unknown method, or a streaming one panics (a test bug).
pub fn rpc(addr: &str, dial: &Dial, method: &str, body: &Value) -> Call {
    let (service, name) = method
        .split_once('/')
        .unwrap_or_else(|| panic!("method {method:?}: want Service/Method"));
    let addr = addr.to_owned();
    let dial = dial.clone();
    let service = service.to_owned();
    let name = name.to_owned();
    let shown = body.to_string();
    let body = body.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    runtime().spawn(async move {
        // A new connection for each call, as each grpcurl run had: a restarted server is
        // reached again without relying on the reconnect of a long-lived channel.
        let channel = channel(&addr, &dial);
        let _ = tx.send(dispatch(channel, &service, &name, &body).await);
    });
    match rx.recv() {
        Ok(Ok(call)) => call,
        Ok(Err(bug)) => panic!("{method} {shown}: {bug}"),
        Err(_) => panic!("{method}: the call panicked"),
    }
}

/// The descriptor of method `service/name`.
fn method(service: &str, name: &str) -> Result<prost_reflect::MethodDescriptor, String> {
    let svc = pool()
        .get_service_by_name(service)
        .ok_or_else(|| format!("no service {service}"))?;
    svc.methods()
        .find(|m| m.name() == name)
        .ok_or_else(|| format!("no method {service}/{name}"))
}

/// Request JSON `body` of method `m` into the generated type `T`.
fn request<T: Message + Default>(
    m: &prost_reflect::MethodDescriptor,
    body: &Value,
) -> Result<T, String> {
    let dynamic = DynamicMessage::deserialize(m.input(), body.clone())
        .map_err(|e| format!("request JSON {body} for {}: {e}", m.input().full_name()))?;
    T::decode(dynamic.encode_to_vec().as_slice()).map_err(|e| e.to_string())
}

/// The typed response `msg` as proto3 JSON with every field written out.
fn response<T: Message>(msg: &T, full_name: &str) -> Value {
    let dynamic = DynamicMessage::decode(message(full_name), msg.encode_to_vec().as_slice())
        .expect("response decodes by its own descriptor");
    let mut json = dynamic
        .serialize_with_options(
            serde_json::value::Serializer,
            &SerializeOptions::new().skip_default_fields(false),
        )
        .expect("response as JSON");
    unset_as_absent(&dynamic, &mut json);
    json
}

/// An unset message field becomes `null` and an unset `optional` scalar is left out, as
/// proto3 JSON with unpopulated fields emitted writes them (and grpcurl showed them).
fn unset_as_absent(msg: &DynamicMessage, json: &mut Value) {
    let Value::Object(map) = json else { return };
    for field in msg.descriptor().fields() {
        let key = field.json_name().to_owned();
        if field.supports_presence() && !msg.has_field(&field) {
            if field.kind().as_message().is_some() {
                map.insert(key, Value::Null);
            } else {
                map.remove(&key);
            }
            continue;
        }
        let value = msg.get_field(&field);
        match (value.as_ref(), map.get_mut(&key)) {
            (prost_reflect::Value::Message(m), Some(j)) => unset_as_absent(m, j),
            (prost_reflect::Value::List(items), Some(Value::Array(js))) => {
                for (item, j) in items.iter().zip(js.iter_mut()) {
                    if let prost_reflect::Value::Message(m) = item {
                        unset_as_absent(m, j);
                    }
                }
            }
            (prost_reflect::Value::Map(entries), Some(Value::Object(js))) => {
                for (k, v) in entries {
                    if let (prost_reflect::Value::Message(m), Some(j)) =
                        (v, js.get_mut(&map_key(k)))
                    {
                        unset_as_absent(m, j);
                    }
                }
            }
            _ => {}
        }
    }
}

fn map_key(k: &prost_reflect::MapKey) -> String {
    use prost_reflect::MapKey;
    match k {
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
        MapKey::String(s) => s.clone(),
    }
}

/// One typed unary call of method `m` with request JSON `body`, `call` sending the
/// typed request: `Ok(Call)` for any answer, `Err` for a test bug.
async fn unary<Req, Resp, Fut>(
    m: &prost_reflect::MethodDescriptor,
    body: &Value,
    call: impl FnOnce(Req) -> Fut,
) -> Result<Call, String>
where
    Req: Message + Default,
    Resp: Message,
    Fut: std::future::Future<Output = Result<tonic::Response<Resp>, Status>>,
{
    let req: Req = request(m, body)?;
    Ok(match call(req).await {
        Ok(r) => Call {
            code: 0,
            body: response(&r.into_inner(), m.output().full_name()),
            err: String::new(),
        },
        Err(s) => Call::failed(&s),
    })
}

async fn dispatch(
    channel: AuthChannel,
    service: &str,
    name: &str,
    body: &Value,
) -> Result<Call, String> {
    match service {
        "wharf.v1.ConnectorAdmin" => admin_call(channel, name, body).await,
        "wharf.v1.Executor" => executor_call(channel, name, body).await,
        "grpc.health.v1.Health" if name == "Check" => Ok(health_check(channel, body).await),
        other => Err(format!("{other}/{name}: not a service the harness calls")),
    }
}

/// A unary call of `wharf.v1.ConnectorAdmin`.
async fn admin_call(channel: AuthChannel, name: &str, body: &Value) -> Result<Call, String> {
    let service = "wharf.v1.ConnectorAdmin";
    let mut c = ConnectorAdminClient::new(channel);
    let not_unary = || format!("{service}/{name}: not a unary method (WatchConnector: use watch)");
    let m = method(service, name).map_err(|_| not_unary())?;
    match name {
        "CreateConnector" => {
            unary(&m, body, |r: pb::CreateConnectorRequest| {
                c.create_connector(r)
            })
            .await
        }
        "PutConnectorConfig" => {
            unary(&m, body, |r: pb::PutConnectorConfigRequest| {
                c.put_connector_config(r)
            })
            .await
        }
        "GetConnector" => unary(&m, body, |r: pb::GetConnectorRequest| c.get_connector(r)).await,
        "ListConnectors" => {
            unary(&m, body, |r: pb::ListConnectorsRequest| {
                c.list_connectors(r)
            })
            .await
        }
        "GetConnectorStatus" => {
            unary(&m, body, |r: pb::GetConnectorStatusRequest| {
                c.get_connector_status(r)
            })
            .await
        }
        "ValidateConnectorConfig" => {
            unary(&m, body, |r: pb::ValidateConnectorConfigRequest| {
                c.validate_connector_config(r)
            })
            .await
        }
        "ListConnectorPlugins" => {
            unary(&m, body, |r: pb::ListConnectorPluginsRequest| {
                c.list_connector_plugins(r)
            })
            .await
        }
        "PauseConnector" => {
            unary(&m, body, |r: pb::PauseConnectorRequest| {
                c.pause_connector(r)
            })
            .await
        }
        "ResumeConnector" => {
            unary(&m, body, |r: pb::ResumeConnectorRequest| {
                c.resume_connector(r)
            })
            .await
        }
        "StopConnector" => unary(&m, body, |r: pb::StopConnectorRequest| c.stop_connector(r)).await,
        "RestartConnector" => {
            unary(&m, body, |r: pb::RestartConnectorRequest| {
                c.restart_connector(r)
            })
            .await
        }
        "RestartTask" => unary(&m, body, |r: pb::RestartTaskRequest| c.restart_task(r)).await,
        "DeleteConnector" => {
            unary(&m, body, |r: pb::DeleteConnectorRequest| {
                c.delete_connector(r)
            })
            .await
        }
        "RetryCleanup" => unary(&m, body, |r: pb::RetryCleanupRequest| c.retry_cleanup(r)).await,
        "GetOffsets" => unary(&m, body, |r: pb::GetOffsetsRequest| c.get_offsets(r)).await,
        "AlterOffsets" => unary(&m, body, |r: pb::AlterOffsetsRequest| c.alter_offsets(r)).await,
        "ResetOffsets" => unary(&m, body, |r: pb::ResetOffsetsRequest| c.reset_offsets(r)).await,
        "ListExecutors" => unary(&m, body, |r: pb::ListExecutorsRequest| c.list_executors(r)).await,
        "ListAuditEntries" => {
            unary(&m, body, |r: pb::ListAuditEntriesRequest| {
                c.list_audit_entries(r)
            })
            .await
        }
        "GetConnectorResources" => {
            unary(&m, body, |r: pb::GetConnectorResourcesRequest| {
                c.get_connector_resources(r)
            })
            .await
        }
        "ListOrphanedResources" => {
            unary(&m, body, |r: pb::ListOrphanedResourcesRequest| {
                c.list_orphaned_resources(r)
            })
            .await
        }
        "AdoptOrphanedResources" => {
            unary(&m, body, |r: pb::AdoptOrphanedResourcesRequest| {
                c.adopt_orphaned_resources(r)
            })
            .await
        }
        "PurgeOrphanedResources" => {
            unary(&m, body, |r: pb::PurgeOrphanedResourcesRequest| {
                c.purge_orphaned_resources(r)
            })
            .await
        }
        "GetConnectorTopics" => {
            unary(&m, body, |r: pb::GetConnectorTopicsRequest| {
                c.get_connector_topics(r)
            })
            .await
        }
        "ResetConnectorTopics" => {
            unary(&m, body, |r: pb::ResetConnectorTopicsRequest| {
                c.reset_connector_topics(r)
            })
            .await
        }
        _ => Err(not_unary()),
    }
}

/// A unary call of `wharf.v1.Executor`.
async fn executor_call(channel: AuthChannel, name: &str, body: &Value) -> Result<Call, String> {
    let service = "wharf.v1.Executor";
    let mut c = ExecutorClient::new(channel);
    let m = method(service, name).map_err(|_| format!("{service}/{name}: no such method"))?;
    match name {
        "StartConnector" => {
            unary(&m, body, |r: pb::StartConnectorRequest| {
                c.start_connector(r)
            })
            .await
        }
        "StopConnector" => {
            unary(&m, body, |r: pb::ExecutorStopConnectorRequest| {
                c.stop_connector(r)
            })
            .await
        }
        "ComputeTaskConfigs" => {
            unary(&m, body, |r: pb::ComputeTaskConfigsRequest| {
                c.compute_task_configs(r)
            })
            .await
        }
        "StartTask" => unary(&m, body, |r: pb::StartTaskRequest| c.start_task(r)).await,
        "StopTask" => unary(&m, body, |r: pb::StopTaskRequest| c.stop_task(r)).await,
        "ListAssignments" => {
            unary(&m, body, |r: pb::ListAssignmentsRequest| {
                c.list_assignments(r)
            })
            .await
        }
        "ValidateConfig" => {
            unary(&m, body, |r: pb::ValidateConfigRequest| {
                c.validate_config(r)
            })
            .await
        }
        other => Err(format!("{service}/{other}: no such method")),
    }
}

/// `grpc.health.v1.Health/Check`: not in the Wharf descriptor set, so its one field each
/// way by hand.
async fn health_check(channel: AuthChannel, body: &Value) -> Call {
    let service_name = body["service"].as_str().unwrap_or_default().to_owned();
    let mut c = tonic_health::pb::health_client::HealthClient::new(channel);
    let req = tonic_health::pb::HealthCheckRequest {
        service: service_name,
    };
    match c.check(req).await {
        Ok(r) => {
            let status = r.into_inner().status();
            Call {
                code: 0,
                body: serde_json::json!({ "status": status.as_str_name() }),
                err: String::new(),
            }
        }
        Err(s) => Call::failed(&s),
    }
}

/// A `WatchConnector` stream read in the background (see [`watch`]).
pub struct Watch {
    done: std::sync::mpsc::Receiver<Result<Vec<Value>, Call>>,
}

impl Watch {
    /// Waits (at most [`CALL_TIMEOUT`]) until the stream ends; every event as proto3 JSON
    /// (as [`rpc`] writes a response), or the failed call when it ended with an error.
    pub fn wait(self) -> Result<Vec<Value>, Call> {
        self.done
            .recv_timeout(CALL_TIMEOUT)
            .unwrap_or_else(|e| panic!("WatchConnector did not end within {CALL_TIMEOUT:?}: {e}"))
    }
}

/// Starts `wharf.v1.ConnectorAdmin/WatchConnector` with `body` (proto3 JSON of
/// `WatchConnectorRequest`) on `addr` and returns once the server answered the call (its
/// first event, the snapshot, is then on the way); the events are kept until the stream ends.
pub fn watch(addr: &str, dial: &Dial, body: &Value) -> Watch {
    let req: pb::WatchConnectorRequest = method("wharf.v1.ConnectorAdmin", "WatchConnector")
        .and_then(|m| request(&m, body))
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = addr.to_owned();
    let dial = dial.clone();
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (done_tx, done) = std::sync::mpsc::channel();
    runtime().spawn(async move {
        let mut c = ConnectorAdminClient::new(channel(&addr, &dial));
        let mut stream = match c.watch_connector(req).await {
            Ok(r) => r.into_inner(),
            Err(s) => {
                let _ = started_tx.send(());
                let _ = done_tx.send(Err(Call::failed(&s)));
                return;
            }
        };
        let _ = started_tx.send(());
        let mut events = Vec::new();
        let end = loop {
            match stream.message().await {
                Ok(Some(ev)) => events.push(response(&ev, "wharf.v1.WatchConnectorResponse")),
                Ok(None) => break Ok(events),
                Err(s) => break Err(Call::failed(&s)),
            }
        };
        let _ = done_tx.send(end);
    });
    started_rx
        .recv_timeout(CALL_TIMEOUT)
        .unwrap_or_else(|e| panic!("WatchConnector was not answered within {CALL_TIMEOUT:?}: {e}"));
    Watch { done }
}
