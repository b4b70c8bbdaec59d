//! `wharf-executor`: hosts connectors and tasks for a Wharf control plane, offering the
//! built-in plugins. A custom executor is the same one line with `.plugin(...)` added
//! (see [`wharf_executor::Executor::builder`] and docs/connector-guide.md).

use std::process::ExitCode;

fn main() -> ExitCode {
    wharf_executor::Executor::builder().run_from_args()
}
