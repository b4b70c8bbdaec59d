//! `spool-executor`: a Wharf executor that offers the built-in plugins and `spool-sink`,
//! with every flag, `WHARF_*` variable and config-file key of `wharf-executor`.

use std::process::ExitCode;

fn main() -> ExitCode {
    wharf_executor::Executor::builder()
        .name("spool-executor")
        .plugins_from(wharf_executor_stock::builtin_plugins)
        .plugin(wharf_example_custom_connector::plugin())
        .run_from_args()
}
