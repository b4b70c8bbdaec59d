//! `wharf-testkit`: a conformance kit that drives a connector plugin through the
//! lifecycle contract of KIP-883/KIP-901 (docs/contract.md) against the author's real
//! external system, the way an executor does (tasks stopped before the connector
//! instance, a stop only after its start returned).
//!
//! The author supplies the [`Plugin`](wharf_sdk::Plugin), a config per connector name
//! and a [`Probe`] that lists the external resources a connector owns (and those the
//! user made). Each rule is one method of [`Kit`] returning `Result<(), CheckFailed>`,
//! so that every rule is its own ordinary test:
//!
//! ```no_run
//! # async fn demo(kit: wharf_testkit::Kit<impl wharf_testkit::Probe>) {
//! // #[tokio::test] async fn plain_stops_keep_resources() {
//!     kit.plain_stops_keep_resources().await.unwrap();
//! // }
//! # }
//! ```
//!
//! Every check uses fresh connector names (`<prefix>-<check>-a`, `-b`), and leaves
//! nothing behind when the plugin is right. Connectors run as [`FIRST_INCARNATION`];
//! the two checks on ownership ([`Kit::late_cleanup_leaves_a_re_created_connector`],
//! [`Kit::start_refuses_what_another_incarnation_kept`]) also create one again under the
//! same name as [`SECOND_INCARNATION`].

mod bounds;
mod kit;
mod probe;
mod report;

use std::sync::Arc;

use wharf_sdk::ConfigMap;

pub use bounds::Bounds;
pub use kit::{Kit, retry_backoff};
pub use probe::Probe;
pub use report::{CHECKS, CheckFailed, CheckResult, Report, Skipped};

/// Default bound on a plugin call other than a stop (`start`, `task_configs`, `put`,
/// `flush`), in seconds; [`Kit::call_timeout`] sets another.
pub const CALL_TIMEOUT_SECS: u64 = 30;

/// Default bound on a plain `stop_with(false)`, in milliseconds: the executor's default
/// graceful stop timeout (`--graceful-timeout-ms`), after which it abandons the instance
/// on a restart, a pause, a reconfiguration or a shutdown; both read
/// [`wharf_sdk::DEFAULT_STOP_TIMEOUT_MS`]. [`Kit::stop_timeout`] sets another.
pub const STOP_TIMEOUT_MS: u64 = wharf_sdk::DEFAULT_STOP_TIMEOUT_MS;

/// Default bound on a `stop_with(true)`, in milliseconds: the runtime's default
/// `cleanup.timeout.ms` ([`wharf_sdk::DEFAULT_CLEANUP_TIMEOUT_MS`]), after which the
/// attempt counts as failed and the instance is abandoned. [`Kit::cleanup_timeout`] sets
/// another (a connector may set `cleanup.timeout.ms` up to 24 h).
pub const CLEANUP_TIMEOUT_MS: u64 = wharf_sdk::DEFAULT_CLEANUP_TIMEOUT_MS as u64;

/// Name of the kit's plugin runtime threads (shown in a plugin's panic message).
pub const PLUGIN_THREAD_NAME: &str = "wharf-testkit-plugin";

/// Incarnation id of the first connector of a name in every check.
pub const FIRST_INCARNATION: &str = "incarnation-1";

/// Incarnation id of the connector created again under the same name after the first
/// one was deleted (a new incarnation, docs/lifecycle.md "Deletion").
pub const SECOND_INCARNATION: &str = "incarnation-2";

/// Executor id the kit's contexts carry.
pub const KIT_EXECUTOR_ID: &str = "wharf-testkit";

/// Records each sink task gets in [`Kit::sink_acknowledges_only_flushed_records`].
pub const RECORDS_PER_TASK: u64 = 20;

/// A config for each connector name (names differ per check, so configured resource
/// names can follow them).
pub type ConfigFor = Arc<dyn Fn(&str) -> ConfigMap + Send + Sync>;
