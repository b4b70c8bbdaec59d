//! The gRPC side of the admin guard: every `ConnectorAdmin` RPC names its
//! [`AdminAction`] and goes through [`Guard::guarded`] (`crate::admin::guard`, shared with
//! the REST gateway): authentication, role, then the handler; every mutating call of an
//! identified caller, accepted or refused, is in the audit trail. The trait impl below has one method per
//! RPC, so a new RPC does not compile until it names its action here.

use std::future::Future;
use std::sync::Arc;

use tonic::{Request, Response, Status};
use wharf::pb::v1 as pb;
use wharf::pb::v1::connector_admin_server::ConnectorAdmin;

use super::admin::AdminService;
use crate::admin::guard::{Caller, Guard, Outcome};
use crate::auth::audit::code_name;
use crate::auth::{AdminAction, AdminAuth, DeleteMode, peer_identity};
use crate::grpc::leader_route::FORWARDED_HEADER;
use crate::reconcile::Cluster;

/// [`AdminService`] behind the admin [`Guard`].
pub struct GuardedAdmin {
    inner: AdminService,
    guard: Guard,
}

impl GuardedAdmin {
    /// The admin service over `cluster`, checking callers with `auth`.
    pub fn new(cluster: Arc<Cluster>, auth: Arc<AdminAuth>) -> Self {
        Self {
            inner: AdminService::new(cluster.clone()),
            guard: Guard::new(cluster, auth),
        }
    }

    /// Runs `call` through the guard, with the caller read from the request.
    async fn guarded<T, R, Fut>(
        &self,
        mut request: Request<T>,
        action: AdminAction,
        connector: &str,
        call: impl FnOnce(Request<T>) -> Fut,
    ) -> Result<Response<R>, Status>
    where
        Fut: Future<Output = Result<Response<R>, Status>>,
    {
        let caller = Caller {
            forwarded_by: request
                .metadata()
                .get(FORWARDED_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned(),
            headers: request.metadata().clone().into_headers(),
            // From the verified client certificate, when the connection has one.
            peer: peer_identity(wharf::tls::peer(request.extensions())),
            remote_addr: wharf::tls::peer(request.extensions())
                .and_then(|p| p.remote_addr)
                .or_else(|| request.remote_addr()),
        };
        self.guard
            .guarded(
                caller,
                action,
                connector,
                // The handler may need who asked (a config that turns cleanup.policy
                // to give-up needs an admin: `crate::auth::cleanup_policy_role`).
                |principal| {
                    request.extensions_mut().insert(principal);
                    call(request)
                },
                |e| Err(Status::from(e)),
                |answer| match answer {
                    Ok(_) => Outcome::ok(),
                    Err(s) => Outcome::refused(code_name(s.code()), s.message().to_owned()),
                },
            )
            .await
    }
}

type Answer<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl ConnectorAdmin for GuardedAdmin {
    async fn create_connector(
        &self,
        request: Request<pb::CreateConnectorRequest>,
    ) -> Answer<pb::CreateConnectorResponse> {
        let name = request.get_ref().name.clone();
        self.guarded(request, AdminAction::CreateConnector, &name, |r| {
            self.inner.create_connector(r)
        })
        .await
    }

    async fn put_connector_config(
        &self,
        request: Request<pb::PutConnectorConfigRequest>,
    ) -> Answer<pb::PutConnectorConfigResponse> {
        let name = request.get_ref().name.clone();
        self.guarded(request, AdminAction::PutConnectorConfig, &name, |r| {
            self.inner.put_connector_config(r)
        })
        .await
    }

    async fn get_connector(
        &self,
        request: Request<pb::GetConnectorRequest>,
    ) -> Answer<pb::GetConnectorResponse> {
        let name = request.get_ref().name.clone();
        self.guarded(request, AdminAction::GetConnector, &name, |r| {
            self.inner.get_connector(r)
        })
        .await
    }

    async fn list_connectors(
        &self,
        request: Request<pb::ListConnectorsRequest>,
    ) -> Answer<pb::ListConnectorsResponse> {
        self.guarded(request, AdminAction::ListConnectors, "", |r| {
            self.inner.list_connectors(r)
        })
        .await
    }

    async fn get_connector_status(
        &self,
        request: Request<pb::GetConnectorStatusRequest>,
    ) -> Answer<pb::GetConnectorStatusResponse> {
        let name = request.get_ref().name.clone();
        self.guarded(request, AdminAction::GetConnectorStatus, &name, |r| {
            self.inner.get_connector_status(r)
        })
        .await
    }

    async fn validate_connector_config(
        &self,
        request: Request<pb::ValidateConnectorConfigRequest>,
    ) -> Answer<pb::ValidateConnectorConfigResponse> {
        self.guarded(request, AdminAction::ValidateConnectorConfig, "", |r| {
            self.inner.validate_connector_config(r)
        })
        .await
    }

    async fn list_connector_plugins(
        &self,
        request: Request<pb::ListConnectorPluginsRequest>,
    ) -> Answer<pb::ListConnectorPluginsResponse> {
        self.guarded(request, AdminAction::ListConnectorPlugins, "", |r| {
            self.inner.list_connector_plugins(r)
        })
        .await
    }

    async fn pause_connector(
        &self,
        request: Request<pb::PauseConnectorRequest>,
    ) -> Answer<pb::PauseConnectorResponse> {
        let name = request.get_ref().name.clone();
        self.guarded(request, AdminAction::PauseConnector, &name, |r| {
            self.inner.pause_connector(r)
        })
        .await
    }

    async fn resume_connector(
        &self,
        request: Request<pb::ResumeConnectorRequest>,
    ) -> Answer<pb::ResumeConnectorResponse> {
        let name = request.get_ref().name.clone();
        self.guarded(request, AdminAction::ResumeConnector, &name, |r| {
            self.inner.resume_connector(r)
        })
        .await
    }

    async fn stop_connector(
        &self,
        request: Request<pb::StopConnectorRequest>,
    ) -> Answer<pb::StopConnectorResponse> {
        let name = request.get_ref().name.clone();
        self.guarded(request, AdminAction::StopConnector, &name, |r| {
            self.inner.stop_connector(r)
        })
        .await
    }

    async fn restart_connector(
        &self,
        request: Request<pb::RestartConnectorRequest>,
    ) -> Answer<pb::RestartConnectorResponse> {
        let name = request.get_ref().name.clone();
        self.guarded(request, AdminAction::RestartConnector, &name, |r| {
            self.inner.restart_connector(r)
        })
        .await
    }

    async fn restart_task(
        &self,
        request: Request<pb::RestartTaskRequest>,
    ) -> Answer<pb::RestartTaskResponse> {
        let name = request.get_ref().name.clone();
        self.guarded(request, AdminAction::RestartTask, &name, |r| {
            self.inner.restart_task(r)
        })
        .await
    }

    async fn delete_connector(
        &self,
        request: Request<pb::DeleteConnectorRequest>,
    ) -> Answer<pb::DeleteConnectorResponse> {
        let req = request.get_ref();
        let name = req.name.clone();
        let mode = DeleteMode::of(req.force, req.keep_resources);
        self.guarded(request, AdminAction::DeleteConnector(mode), &name, |r| {
            self.inner.delete_connector(r)
        })
        .await
    }

    async fn get_connector_resources(
        &self,
        request: Request<pb::GetConnectorResourcesRequest>,
    ) -> Answer<pb::GetConnectorResourcesResponse> {
        let name = request.get_ref().name.clone();
        self.guarded(request, AdminAction::GetConnectorResources, &name, |r| {
            self.inner.get_connector_resources(r)
        })
        .await
    }

    async fn list_orphaned_resources(
        &self,
        request: Request<pb::ListOrphanedResourcesRequest>,
    ) -> Answer<pb::ListOrphanedResourcesResponse> {
        self.guarded(request, AdminAction::ListOrphanedResources, "", |r| {
            self.inner.list_orphaned_resources(r)
        })
        .await
    }

    async fn adopt_orphaned_resources(
        &self,
        request: Request<pb::AdoptOrphanedResourcesRequest>,
    ) -> Answer<pb::AdoptOrphanedResourcesResponse> {
        let name = request.get_ref().connector.clone();
        self.guarded(request, AdminAction::AdoptOrphanedResources, &name, |r| {
            self.inner.adopt_orphaned_resources(r)
        })
        .await
    }

    async fn purge_orphaned_resources(
        &self,
        request: Request<pb::PurgeOrphanedResourcesRequest>,
    ) -> Answer<pb::PurgeOrphanedResourcesResponse> {
        self.guarded(request, AdminAction::PurgeOrphanedResources, "", |r| {
            self.inner.purge_orphaned_resources(r)
        })
        .await
    }
    async fn get_connector_topics(
        &self,
        request: Request<pb::GetConnectorTopicsRequest>,
    ) -> Answer<pb::GetConnectorTopicsResponse> {
        let name = request.get_ref().name.clone();
        self.guarded(request, AdminAction::GetConnectorTopics, &name, |r| {
            self.inner.get_connector_topics(r)
        })
        .await
    }

    async fn reset_connector_topics(
        &self,
        request: Request<pb::ResetConnectorTopicsRequest>,
    ) -> Answer<pb::ResetConnectorTopicsResponse> {
        let name = request.get_ref().name.clone();
        self.guarded(request, AdminAction::ResetConnectorTopics, &name, |r| {
            self.inner.reset_connector_topics(r)
        })
        .await
    }

    async fn retry_cleanup(
        &self,
        request: Request<pb::RetryCleanupRequest>,
    ) -> Answer<pb::RetryCleanupResponse> {
        let name = request.get_ref().name.clone();
        self.guarded(request, AdminAction::RetryCleanup, &name, |r| {
            self.inner.retry_cleanup(r)
        })
        .await
    }

    async fn get_offsets(
        &self,
        request: Request<pb::GetOffsetsRequest>,
    ) -> Answer<pb::GetOffsetsResponse> {
        let name = request.get_ref().name.clone();
        self.guarded(request, AdminAction::GetOffsets, &name, |r| {
            self.inner.get_offsets(r)
        })
        .await
    }

    async fn alter_offsets(
        &self,
        request: Request<pb::AlterOffsetsRequest>,
    ) -> Answer<pb::AlterOffsetsResponse> {
        let name = request.get_ref().name.clone();
        self.guarded(request, AdminAction::AlterOffsets, &name, |r| {
            self.inner.alter_offsets(r)
        })
        .await
    }

    async fn reset_offsets(
        &self,
        request: Request<pb::ResetOffsetsRequest>,
    ) -> Answer<pb::ResetOffsetsResponse> {
        let name = request.get_ref().name.clone();
        self.guarded(request, AdminAction::ResetOffsets, &name, |r| {
            self.inner.reset_offsets(r)
        })
        .await
    }

    async fn list_executors(
        &self,
        request: Request<pb::ListExecutorsRequest>,
    ) -> Answer<pb::ListExecutorsResponse> {
        self.guarded(request, AdminAction::ListExecutors, "", |r| {
            self.inner.list_executors(r)
        })
        .await
    }

    type WatchConnectorStream = <AdminService as ConnectorAdmin>::WatchConnectorStream;

    async fn watch_connector(
        &self,
        request: Request<pb::WatchConnectorRequest>,
    ) -> Answer<Self::WatchConnectorStream> {
        let name = request.get_ref().name.clone();
        self.guarded(request, AdminAction::WatchConnector, &name, |r| {
            self.inner.watch_connector(r)
        })
        .await
    }

    async fn list_audit_entries(
        &self,
        request: Request<pb::ListAuditEntriesRequest>,
    ) -> Answer<pb::ListAuditEntriesResponse> {
        let name = request.get_ref().connector.clone();
        self.guarded(request, AdminAction::ListAuditEntries, &name, |r| {
            self.inner.list_audit_entries(r)
        })
        .await
    }
}
