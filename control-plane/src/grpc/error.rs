//! The one mapping of the admin core's [`ApiError`] to `tonic::Status`.

pub use crate::admin::error::ApiError;
use crate::auth::AuthError;
use crate::store::StoreError;

impl From<ApiError> for tonic::Status {
    fn from(e: ApiError) -> Self {
        let msg = e.to_string();
        match e {
            ApiError::InvalidArgument { .. } => tonic::Status::invalid_argument(msg),
            ApiError::ConnectorNotFound(_)
            | ApiError::PluginNotFound(_)
            | ApiError::TaskNotFound { .. } => tonic::Status::not_found(msg),
            ApiError::AlreadyExists(_) => tonic::Status::already_exists(msg),
            ApiError::StillDeleting(_)
            | ApiError::DeletionModeConflict { .. }
            | ApiError::WrongState { .. }
            | ApiError::FencedEpoch { .. }
            | ApiError::RecordLogMismatch { .. }
            | ApiError::PluginDefinitionConflict { .. }
            | ApiError::StaleGeneration { .. }
            | ApiError::ImmutableConfig { .. }
            | ApiError::ResourceHeld { .. }
            | ApiError::LedgerFenced { .. } => tonic::Status::failed_precondition(msg),
            ApiError::DeletionPending { .. } => tonic::Status::deadline_exceeded(msg),
            ApiError::Store(StoreError::Unavailable(_)) | ApiError::RecordLogUnavailable(_) => {
                tonic::Status::unavailable(msg)
            }
            ApiError::Store(StoreError::Corrupt { .. }) => tonic::Status::internal(msg),
            ApiError::Contended(_) => tonic::Status::aborted(msg),
            ApiError::Auth(AuthError::Unauthenticated(_)) => tonic::Status::unauthenticated(msg),
            ApiError::Auth(AuthError::NoAdminRole(_) | AuthError::Forbidden { .. }) => {
                tonic::Status::permission_denied(msg)
            }
        }
    }
}
