//! `wharf-executor`: hosts connectors and tasks for a Wharf control plane, offering the
//! built-in plugins. A custom executor is the same few lines with `.plugin(...)` added
//! (see `wharf_executor::Executor::builder` and docs/connector-guide.md).

use std::process::ExitCode;

fn main() -> ExitCode {
    wharf_executor::Executor::builder()
        .plugins_from(wharf_executor_stock::builtin_plugins)
        .adapt_plugins(wharf_connectors::debezium_postgres::adapt)
        .run_from_args()
}
