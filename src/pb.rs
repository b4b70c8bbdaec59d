//! The wire: types and services generated from `proto/wharf/v1`. Convert into domain
//! types at the gRPC edge; the herder and the task host do not use these directly.

/// Version 1 of the Wharf protocol (package `wharf.v1`).
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("wharf.v1");
}

/// Encoded `FileDescriptorSet` of every Wharf proto file, for server reflection and the
/// contract tests.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("wharf_descriptor");
