//! The wire: types and services generated from `proto/wharf/v1`. Convert into domain
//! types at the gRPC edge; the herder and the task host do not use these directly.

/// Version 1 of the Wharf protocol (package `wharf.v1`). The doc comments come from the
/// proto files, written for proto readers: rustdoc's HTML and link lints do not apply.
#[allow(clippy::all, missing_docs)]
#[allow(
    rustdoc::invalid_html_tags,
    rustdoc::broken_intra_doc_links,
    rustdoc::bare_urls,
    rustdoc::invalid_rust_codeblocks
)]
pub mod v1 {
    tonic::include_proto!("wharf.v1");
}

/// Encoded `FileDescriptorSet` of every Wharf proto file, for server reflection and the
/// contract tests.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("wharf_descriptor");
