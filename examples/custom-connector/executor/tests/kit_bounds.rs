//! The conformance kit bounds a plain stop as the executor does: the plugin crate's
//! checks (`plugin/tests/conformance.rs`) hold for the executor this crate builds.

#[test]
fn the_kits_stop_bound_is_the_executors_graceful_timeout() {
    assert_eq!(
        wharf_testkit::STOP_TIMEOUT_MS,
        wharf_executor::app::DEFAULT_GRACEFUL_TIMEOUT_MS
    );
}
