//! The executor of the custom-connector example; the binary `spool-executor` is
//! `src/main.rs`. This library holds only the connector guide: its code blocks compile
//! and run as doctests here, where the plugin, the conformance kit and the executor
//! library are all linked, as the guide's blocks need.

/// The connector guide (docs/connector-guide.md), here so that its code blocks compile
/// and run as doctests of this crate.
#[doc = include_str!("../../../../docs/connector-guide.md")]
pub mod guide {}
