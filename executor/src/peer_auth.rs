//! Who may call the `Executor` service: only the control plane's certificate
//! (`spiffe://wharf/control-plane`) when the listener speaks TLS; see
//! `docs/security.md`. One interceptor for every RPC, so that a refused call runs nothing.

use tonic::{Request, Status};

/// Interceptor of the `Executor` service: UNAUTHENTICATED without a client certificate,
/// PERMISSION_DENIED for any identity but the control plane's (counted in
/// [`wharf::tls::PEERS_REFUSED`], logged at WARN at most once a minute). A
/// plaintext listener (loopback or `--insecure`) checks nothing.
///
/// # Errors
/// The refusal status.
pub fn only_control_plane(request: Request<()>) -> Result<Request<()>, Status> {
    let caller = wharf::tls::caller(request.extensions());
    match wharf::identity::authorize_control_plane(&caller) {
        Ok(()) => Ok(request),
        Err(e) => {
            let peer = wharf::tls::peer(request.extensions()).and_then(|p| p.remote_addr);
            // Strangers can send these by the thousand: one line a minute, all counted.
            if let Some(silenced) = wharf::tls::peer_refused(wharf::tls::PeerRefusal::Identity) {
                tracing::warn!(
                    peer = ?peer,
                    error = %e,
                    refused_without_a_line_since_the_last = silenced,
                    "Executor call refused: not the control plane (at most one such line a minute, all counted in wharf_peers_refused_total)"
                );
            }
            Err(Status::from(e))
        }
    }
}
