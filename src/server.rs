//! What every Wharf gRPC server serves besides its own service: server reflection (v1 and
//! v1alpha, since grpcurl 1.8 speaks only v1alpha) and `grpc.health.v1`, plus the shutdown
//! signal both binaries stop on.

use tonic::transport::server::Router;
use tonic_health::server::HealthReporter;

/// Adds server reflection (v1 and v1alpha, over Wharf's and the health service's
/// descriptors) and `grpc.health.v1.Health` to `router`; returns the health reporter so
/// that the binary can mark its own service serving. Reflection advertises only
/// `services` (fully qualified names of what this binary serves, e.g.
/// `wharf.v1.Executor`) plus health and reflection itself, so grpcurl `list` shows what
/// answers rather than every service in the descriptor set.
///
/// # Errors
/// When a descriptor set does not decode (a build defect).
pub fn add_common_services<L>(
    router: Router<L>,
    services: &[&str],
) -> Result<(Router<L>, HealthReporter), tonic_reflection::server::Error> {
    // The builder is not Clone: one per protocol version.
    let builder = || {
        services.iter().fold(
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(crate::pb::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
                .with_service_name(HEALTH_SERVICE),
            |b, name| b.with_service_name(*name),
        )
    };
    let (reporter, health) = tonic_health::server::health_reporter();
    let router = router
        .add_service(builder().build_v1()?)
        .add_service(builder().build_v1alpha()?)
        .add_service(health);
    Ok((router, reporter))
}

/// Fully qualified name of the gRPC health service.
const HEALTH_SERVICE: &str = "grpc.health.v1.Health";

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
