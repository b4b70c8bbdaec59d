//! The one mapping of REST failures to Kafka Connect's HTTP status and error body
//! `{"error_code": <status>, "message": "..."}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::admin::ApiError;
use crate::admin::guard::Outcome;
use crate::auth::AuthError;
use crate::auth::audit::code_name;
use crate::store::StoreError;

/// Why a REST request was refused.
#[derive(Debug, thiserror::Error)]
pub enum RestError {
    /// The admin core refused it.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The request itself is malformed (JSON, a query parameter, a path part).
    #[error("{0}")]
    BadRequest(String),
    /// No route matches the path.
    #[error("HTTP 404 Not Found")]
    NoRoute,
    /// The path exists, the method does not.
    #[error("HTTP 405 Method Not Allowed")]
    MethodNotAllowed,
    /// The body is not `application/json`.
    #[error("HTTP 415 Unsupported Media Type: send the body as application/json")]
    UnsupportedMediaType,
    /// The body is larger than the limit, in bytes.
    #[error("request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// The body did not arrive whole within this many seconds of the headers.
    #[error("request body not complete within {0} s of the request headers")]
    BodyTimeout(u64),
    /// A logger level change is not possible in this process.
    #[error("{0}")]
    LoggersUnavailable(String),
    /// Something a path or body names does not exist where Connect answers 404 for it (a
    /// log level, a logger with no level set); the message says what.
    #[error("{0}")]
    NotFound(String),
    /// This replica follows and the request needs the leader, which it cannot reach or
    /// does not know (the message says which, and the leader when known).
    #[error("{0}")]
    LeaderUnavailable(String),
}

impl RestError {
    /// The HTTP status, chosen as Kafka Connect would answer (see `docs/rest.md`).
    pub fn status(&self) -> StatusCode {
        match self {
            RestError::Api(e) => match e {
                ApiError::InvalidArgument { .. }
                | ApiError::WrongState { .. }
                | ApiError::ImmutableConfig { .. } => StatusCode::BAD_REQUEST,
                ApiError::ConnectorNotFound(_)
                | ApiError::PluginNotFound(_)
                | ApiError::TaskNotFound { .. } => StatusCode::NOT_FOUND,
                ApiError::AlreadyExists(_)
                | ApiError::StillDeleting(_)
                | ApiError::DeletionModeConflict { .. }
                | ApiError::Contended(_)
                | ApiError::FencedEpoch { .. }
                | ApiError::RecordLogMismatch { .. }
                | ApiError::PluginDefinitionConflict { .. }
                | ApiError::StaleGeneration { .. }
                | ApiError::ResourceHeld { .. }
                | ApiError::LedgerFenced { .. } => StatusCode::CONFLICT,
                ApiError::DeletionPending { .. } => StatusCode::GATEWAY_TIMEOUT,
                ApiError::Store(StoreError::Unavailable(_)) | ApiError::RecordLogUnavailable(_) => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
                ApiError::Store(StoreError::Corrupt { .. }) => StatusCode::INTERNAL_SERVER_ERROR,
                ApiError::Auth(AuthError::Unauthenticated(_)) => StatusCode::UNAUTHORIZED,
                ApiError::Auth(AuthError::NoAdminRole(_) | AuthError::Forbidden { .. }) => {
                    StatusCode::FORBIDDEN
                }
            },
            RestError::BadRequest(_) => StatusCode::BAD_REQUEST,
            RestError::NoRoute | RestError::NotFound(_) => StatusCode::NOT_FOUND,
            RestError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            RestError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            RestError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            RestError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            RestError::LoggersUnavailable(_) => StatusCode::NOT_IMPLEMENTED,
            RestError::LeaderUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// Attached to every error response, so that the admin guard records a REST call's
/// outcome in the audit trail with the same code names as a gRPC call.
#[derive(Debug, Clone)]
pub struct Refusal(pub Outcome);

impl RestError {
    /// The gRPC status code name the same refusal has over gRPC (the audit trail's
    /// outcome); the REST-only errors get the nearest code.
    fn code_name(self) -> &'static str {
        match self {
            RestError::Api(e) => code_name(tonic::Status::from(e).code()),
            RestError::BadRequest(_) | RestError::UnsupportedMediaType => "INVALID_ARGUMENT",
            RestError::NoRoute | RestError::NotFound(_) => "NOT_FOUND",
            RestError::MethodNotAllowed | RestError::LoggersUnavailable(_) => "UNIMPLEMENTED",
            RestError::PayloadTooLarge(_) => "RESOURCE_EXHAUSTED",
            RestError::BodyTimeout(_) => "DEADLINE_EXCEEDED",
            RestError::LeaderUnavailable(_) => "UNAVAILABLE",
        }
    }
}

/// Longest `message` of an error body, in bytes: a message quotes what the caller sent
/// (a field, a query value, a plugin or logger name), which is not echoed back whole.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 4096;

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message =
            crate::auth::audit::bounded(&self.to_string(), MAX_ERROR_MESSAGE_BYTES).into_owned();
        let body = json!({ "error_code": status.as_u16(), "message": &message });
        let code = self.code_name();
        let mut response = (status, axum::Json(body)).into_response();
        response
            .extensions_mut()
            .insert(Refusal(Outcome::refused(code, message)));
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_error_body_does_not_echo_a_huge_value_whole() {
        let huge = "f".repeat(1_000_000);
        let response = RestError::BadRequest(format!("unknown field {huge:?}")).into_response();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
        let message = v["message"].as_str().expect("message");
        assert!(
            message.len() < MAX_ERROR_MESSAGE_BYTES + 40,
            "{}",
            message.len()
        );
        assert!(
            message.ends_with("...[cut, 1000016 bytes]"),
            "{}",
            &message[4000..]
        );
    }

    #[test]
    fn the_core_errors_map_to_connects_status_codes() {
        let cases = [
            (
                ApiError::InvalidArgument {
                    field: "name".into(),
                    reason: "r".into(),
                },
                400,
            ),
            (ApiError::ConnectorNotFound("c".into()), 404),
            (ApiError::AlreadyExists("c".into()), 409),
            (ApiError::StillDeleting("c".into()), 409),
            (
                ApiError::DeletionModeConflict {
                    name: "c".into(),
                    reason: "r".into(),
                },
                409,
            ),
            (
                ApiError::WrongState {
                    name: "c".into(),
                    reason: "r".into(),
                },
                400,
            ),
        ];
        for (e, code) in cases {
            assert_eq!(RestError::Api(e).status().as_u16(), code);
        }
    }

    #[test]
    fn refusals_of_the_guard_are_401_and_403_in_connects_body_and_name_their_code() {
        let cases = [
            (
                ApiError::Auth(AuthError::Unauthenticated("no token".into())),
                401,
                "UNAUTHENTICATED",
            ),
            (
                ApiError::Auth(AuthError::Forbidden {
                    principal: "v (viewer, token)".into(),
                    rpc: "DeleteConnector",
                    detail: String::new(),
                    needed: crate::auth::Role::Operator,
                }),
                403,
                "PERMISSION_DENIED",
            ),
            (
                ApiError::Auth(AuthError::NoAdminRole("executor".into())),
                403,
                "PERMISSION_DENIED",
            ),
        ];
        for (e, status, code) in cases {
            let r = RestError::Api(e).into_response();
            assert_eq!(r.status().as_u16(), status);
            let refusal = r.extensions().get::<Refusal>().expect("outcome attached");
            assert_eq!(refusal.0.code, code);
        }
    }
}
