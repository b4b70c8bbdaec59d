//! Calls to executors' `Executor` service, with a channel cache per address and a typed
//! error that separates "not reachable" (retry) from "refused" (act on the code).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};
use wharf::pb::v1 as pb;
use wharf::pb::v1::executor_client::ExecutorClient;

/// How long connecting to an executor may take, in milliseconds.
pub const CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Upper bound on a start or ComputeTaskConfigs call, in milliseconds.
pub const START_CALL_TIMEOUT_MS: u64 = 15_000;
/// Time allowed on top of a stop's own timeout for the round trip, in milliseconds.
pub const STOP_CALL_SLACK_MS: u64 = 5_000;

/// Why a call to an executor did not return a response.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Not reachable or too slow: the outcome is unknown; retry later.
    #[error("executor {address} unreachable: {message}")]
    Unreachable {
        /// Executor address.
        address: String,
        /// Transport or deadline message.
        message: String,
    },
    /// The executor answered with an error status.
    #[error("executor {address} refused with {code:?}: {message}")]
    Refused {
        /// Executor address.
        address: String,
        /// gRPC code (NOT_FOUND: not hosted there; FAILED_PRECONDITION: fenced).
        code: tonic::Code,
        /// Its message.
        message: String,
    },
}

impl CallError {
    /// The refusal code, if the executor answered.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            CallError::Unreachable { .. } => None,
            CallError::Refused { code, .. } => Some(*code),
        }
    }
}

/// Channel cache: one lazily connected channel per executor address.
#[derive(Default)]
pub struct ExecutorClients {
    channels: Mutex<HashMap<String, Channel>>,
}

fn classify(address: &str, status: tonic::Status) -> CallError {
    match status.code() {
        tonic::Code::Unavailable
        | tonic::Code::DeadlineExceeded
        | tonic::Code::Cancelled
        | tonic::Code::Unknown => CallError::Unreachable {
            address: address.to_owned(),
            message: status.message().to_owned(),
        },
        code => CallError::Refused {
            address: address.to_owned(),
            code,
            message: status.message().to_owned(),
        },
    }
}

impl ExecutorClients {
    fn client(&self, address: &str) -> Result<ExecutorClient<Channel>, CallError> {
        let mut map = self
            .channels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(ch) = map.get(address) {
            return Ok(ExecutorClient::new(ch.clone()));
        }
        let ch = Endpoint::from_shared(address.to_owned())
            .map_err(|e| CallError::Unreachable {
                address: address.to_owned(),
                message: format!("bad address: {e}"),
            })?
            .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
            .connect_lazy();
        map.insert(address.to_owned(), ch.clone());
        Ok(ExecutorClient::new(ch))
    }

    fn request<T>(msg: T, timeout_ms: u64) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        r.set_timeout(Duration::from_millis(timeout_ms));
        r
    }

    /// StartConnector.
    pub async fn start_connector(
        &self,
        address: &str,
        req: pb::StartConnectorRequest,
    ) -> Result<pb::StartConnectorResponse, CallError> {
        self.client(address)?
            .start_connector(Self::request(req, START_CALL_TIMEOUT_MS))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| classify(address, s))
    }

    /// StopConnector, bounded by the request's timeout plus slack.
    pub async fn stop_connector(
        &self,
        address: &str,
        req: pb::ExecutorStopConnectorRequest,
    ) -> Result<pb::ExecutorStopConnectorResponse, CallError> {
        let t = u64::from(req.timeout_ms).max(START_CALL_TIMEOUT_MS) + STOP_CALL_SLACK_MS;
        self.client(address)?
            .stop_connector(Self::request(req, t))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| classify(address, s))
    }

    /// ComputeTaskConfigs.
    pub async fn compute_task_configs(
        &self,
        address: &str,
        req: pb::ComputeTaskConfigsRequest,
    ) -> Result<pb::ComputeTaskConfigsResponse, CallError> {
        self.client(address)?
            .compute_task_configs(Self::request(req, START_CALL_TIMEOUT_MS))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| classify(address, s))
    }

    /// StartTask.
    pub async fn start_task(
        &self,
        address: &str,
        req: pb::StartTaskRequest,
    ) -> Result<pb::StartTaskResponse, CallError> {
        self.client(address)?
            .start_task(Self::request(req, START_CALL_TIMEOUT_MS))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| classify(address, s))
    }

    /// StopTask, bounded by the request's timeout plus slack.
    pub async fn stop_task(
        &self,
        address: &str,
        req: pb::StopTaskRequest,
    ) -> Result<pb::StopTaskResponse, CallError> {
        let t = u64::from(req.timeout_ms).max(START_CALL_TIMEOUT_MS) + STOP_CALL_SLACK_MS;
        self.client(address)?
            .stop_task(Self::request(req, t))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| classify(address, s))
    }
}
