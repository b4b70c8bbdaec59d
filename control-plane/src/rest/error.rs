//! The one mapping of REST failures to Kafka Connect's HTTP status and error body
//! `{"error_code": <status>, "message": "..."}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::admin::ApiError;
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
    /// Not authenticated (no or a bad credential).
    #[error("{0}")]
    Unauthenticated(String),
    /// Authenticated, but the role may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// A logger level change is not possible in this process.
    #[error("{0}")]
    LoggersUnavailable(String),
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
                | ApiError::Contended(_)
                | ApiError::FencedEpoch { .. }
                | ApiError::StaleGeneration { .. } => StatusCode::CONFLICT,
                ApiError::DeletionPending { .. } => StatusCode::GATEWAY_TIMEOUT,
                ApiError::Store(StoreError::Unavailable(_)) => StatusCode::SERVICE_UNAVAILABLE,
                ApiError::Store(StoreError::Corrupt { .. }) => StatusCode::INTERNAL_SERVER_ERROR,
            },
            RestError::BadRequest(_) => StatusCode::BAD_REQUEST,
            RestError::NoRoute => StatusCode::NOT_FOUND,
            RestError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            RestError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            RestError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            RestError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            RestError::Forbidden(_) => StatusCode::FORBIDDEN,
            RestError::LoggersUnavailable(_) => StatusCode::NOT_IMPLEMENTED,
        }
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = json!({ "error_code": status.as_u16(), "message": self.to_string() });
        (status, axum::Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
