//! What every Wharf gRPC server serves besides its own service: server reflection (v1 and
//! v1alpha, since grpcurl 1.8 speaks only v1alpha) and `grpc.health.v1`, plus the shutdown
//! signal both binaries stop on.

use tonic::transport::server::Router;
use tonic_health::server::HealthReporter;

/// Adds server reflection (v1 and v1alpha, over Wharf's and the health service's
/// descriptors) and `grpc.health.v1.Health` to `router`; returns the health reporter so
/// that the binary can mark its own service serving.
///
/// # Errors
/// When a descriptor set does not decode (a build defect).
pub fn add_common_services(
    router: Router,
) -> Result<(Router, HealthReporter), tonic_reflection::server::Error> {
    // The builder is not Clone: one per protocol version.
    let builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let (reporter, health) = tonic_health::server::health_reporter();
    let router = router
        .add_service(builder().build_v1()?)
        .add_service(builder().build_v1alpha()?)
        .add_service(health);
    Ok((router, reporter))
}

/// Resolves on SIGTERM or Ctrl-C (SIGINT).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
