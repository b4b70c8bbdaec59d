//! `spool-executor`: a Wharf executor that offers the built-in plugins and `spool-sink`,
//! with a custom transform and predicate, and every flag, `WHARF_*` variable and config-file
//! key of `wharf-executor`.

use std::process::ExitCode;

fn main() -> ExitCode {
    wharf_executor::Executor::builder()
        .name("spool-executor")
        .plugins_from(wharf_executor_stock::builtin_plugins)
        .plugin(wharf_example_custom_connector::plugin())
        // A custom transform and predicate, listed by the control plane and usable in
        // any connector config placed on this executor.
        .transform(wharf_example_custom_connector::upper_case_transform())
        .transform(wharf_example_custom_connector::value_contains_predicate())
        .run_from_args()
}
