//! `wharf.v1.ConnectorAdmin`: the operator's gRPC API, a thin adapter over the admin
//! core ([`crate::admin`]): wire requests in, domain calls, wire answers out; errors
//! become a `tonic::Status` in one place ([`super::error`]).

use std::sync::Arc;

use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use wharf::pb::v1 as pb;
use wharf::pb::v1::connector_admin_server::ConnectorAdmin;

use super::convert;
use super::error::ApiError;
use crate::admin::{Admin, DeleteOptions, RestartScope};
use crate::auth::Principal;
use crate::model::{DeletionMode, TargetState};
use crate::reconcile::{Cluster, now_ms};

pub use crate::admin::DEFAULT_DELETE_WAIT_MS;
/// Buffer of one WatchConnector stream, in events.
const WATCH_BUFFER: usize = 64;

/// The admin service.
pub struct AdminService {
    admin: Admin,
}

impl AdminService {
    /// A service over `cluster`.
    pub fn new(cluster: Arc<Cluster>) -> Self {
        Self {
            admin: Admin::new(cluster),
        }
    }
}

/// Wire initial state of a create: unset means STARTED.
fn initial_target(state: i32) -> Result<TargetState, ApiError> {
    match pb::TargetState::try_from(state) {
        Ok(pb::TargetState::Unspecified | pb::TargetState::Started) => Ok(TargetState::Started),
        Ok(pb::TargetState::Paused) => Ok(TargetState::Paused),
        Ok(pb::TargetState::Stopped) => Ok(TargetState::Stopped),
        Err(_) => Err(ApiError::InvalidArgument {
            field: "initial_state".into(),
            reason: format!("{state} is not a target state"),
        }),
    }
}

/// Who asked, as the guard admitted them (`grpc::guard` puts the principal in the
/// request's extensions). Without one (a call that did not pass the guard) the caller is
/// taken as a viewer, so that a missing guard never widens what a call may do.
fn caller<T>(request: &Request<T>) -> Principal {
    request
        .extensions()
        .get::<Principal>()
        .cloned()
        .unwrap_or_else(|| Principal {
            role: crate::auth::Role::Viewer,
            ..Principal::anonymous()
        })
}

#[tonic::async_trait]
impl ConnectorAdmin for AdminService {
    async fn create_connector(
        &self,
        request: Request<pb::CreateConnectorRequest>,
    ) -> Result<Response<pb::CreateConnectorResponse>, Status> {
        let caller = caller(&request);
        let req = request.into_inner();
        let target = initial_target(req.initial_state)?;
        let info = self
            .admin
            .create(&req.name, &req.config, target, &caller)
            .await?;
        Ok(Response::new(pb::CreateConnectorResponse {
            connector: Some(info),
        }))
    }

    async fn put_connector_config(
        &self,
        request: Request<pb::PutConnectorConfigRequest>,
    ) -> Result<Response<pb::PutConnectorConfigResponse>, Status> {
        let caller = caller(&request);
        let req = request.into_inner();
        let (info, created) = self
            .admin
            .put_config(&req.name, &req.config, &caller)
            .await?;
        Ok(Response::new(pb::PutConnectorConfigResponse {
            connector: Some(info),
            created,
        }))
    }

    async fn get_connector(
        &self,
        request: Request<pb::GetConnectorRequest>,
    ) -> Result<Response<pb::GetConnectorResponse>, Status> {
        let info = self.admin.connector(&request.into_inner().name)?;
        Ok(Response::new(pb::GetConnectorResponse {
            connector: Some(info),
        }))
    }

    async fn list_connectors(
        &self,
        request: Request<pb::ListConnectorsRequest>,
    ) -> Result<Response<pb::ListConnectorsResponse>, Status> {
        let req = request.into_inner();
        let connectors = self
            .admin
            .list(false, req.expand_status)?
            .into_iter()
            .map(|c| pb::ConnectorListEntry {
                name: c.name,
                status: c.status,
            })
            .collect();
        Ok(Response::new(pb::ListConnectorsResponse { connectors }))
    }

    async fn get_connector_status(
        &self,
        request: Request<pb::GetConnectorStatusRequest>,
    ) -> Result<Response<pb::GetConnectorStatusResponse>, Status> {
        let status = self.admin.status(&request.into_inner().name)?;
        Ok(Response::new(pb::GetConnectorStatusResponse {
            status: Some(status),
        }))
    }

    async fn validate_connector_config(
        &self,
        request: Request<pb::ValidateConnectorConfigRequest>,
    ) -> Result<Response<pb::ValidateConnectorConfigResponse>, Status> {
        Ok(Response::new(
            self.admin.validate(&request.into_inner().config).await?,
        ))
    }

    async fn list_connector_plugins(
        &self,
        _request: Request<pb::ListConnectorPluginsRequest>,
    ) -> Result<Response<pb::ListConnectorPluginsResponse>, Status> {
        Ok(Response::new(pb::ListConnectorPluginsResponse {
            plugins: self.admin.plugin_list()?,
            transforms: self.admin.transform_list()?,
        }))
    }

    async fn pause_connector(
        &self,
        request: Request<pb::PauseConnectorRequest>,
    ) -> Result<Response<pb::PauseConnectorResponse>, Status> {
        let status = self
            .admin
            .set_target(&request.into_inner().name, TargetState::Paused)?;
        Ok(Response::new(pb::PauseConnectorResponse {
            status: Some(status),
        }))
    }

    async fn resume_connector(
        &self,
        request: Request<pb::ResumeConnectorRequest>,
    ) -> Result<Response<pb::ResumeConnectorResponse>, Status> {
        let status = self
            .admin
            .set_target(&request.into_inner().name, TargetState::Started)?;
        Ok(Response::new(pb::ResumeConnectorResponse {
            status: Some(status),
        }))
    }

    async fn stop_connector(
        &self,
        request: Request<pb::StopConnectorRequest>,
    ) -> Result<Response<pb::StopConnectorResponse>, Status> {
        let status = self
            .admin
            .set_target(&request.into_inner().name, TargetState::Stopped)?;
        Ok(Response::new(pb::StopConnectorResponse {
            status: Some(status),
        }))
    }

    async fn restart_connector(
        &self,
        request: Request<pb::RestartConnectorRequest>,
    ) -> Result<Response<pb::RestartConnectorResponse>, Status> {
        let req = request.into_inner();
        let status = self.admin.restart(
            &req.name,
            RestartScope::Connector {
                include_tasks: req.include_tasks,
                only_failed: req.only_failed,
            },
        )?;
        Ok(Response::new(pb::RestartConnectorResponse {
            status: Some(status),
        }))
    }

    async fn restart_task(
        &self,
        request: Request<pb::RestartTaskRequest>,
    ) -> Result<Response<pb::RestartTaskResponse>, Status> {
        let req = request.into_inner();
        let status = self
            .admin
            .restart(&req.name, RestartScope::Task(req.task))?;
        Ok(Response::new(pb::RestartTaskResponse {
            status: Some(status),
        }))
    }

    async fn delete_connector(
        &self,
        request: Request<pb::DeleteConnectorRequest>,
    ) -> Result<Response<pb::DeleteConnectorResponse>, Status> {
        let req = request.into_inner();
        let opts = DeleteOptions {
            force: req.force,
            wait: req.wait,
            wait_timeout_ms: req.wait_timeout_ms,
            mode: DeletionMode::keeping_resources(req.keep_resources),
            dry_run: req.dry_run,
        };
        Ok(Response::new(self.admin.delete(&req.name, opts).await?))
    }

    async fn retry_cleanup(
        &self,
        request: Request<pb::RetryCleanupRequest>,
    ) -> Result<Response<pb::RetryCleanupResponse>, Status> {
        let status = self.admin.retry_cleanup(&request.into_inner().name)?;
        Ok(Response::new(pb::RetryCleanupResponse { status }))
    }

    async fn get_offsets(
        &self,
        request: Request<pb::GetOffsetsRequest>,
    ) -> Result<Response<pb::GetOffsetsResponse>, Status> {
        let offsets = self.admin.offsets(&request.into_inner().name).await?;
        Ok(Response::new(pb::GetOffsetsResponse { offsets }))
    }

    async fn alter_offsets(
        &self,
        request: Request<pb::AlterOffsetsRequest>,
    ) -> Result<Response<pb::AlterOffsetsResponse>, Status> {
        let req = request.into_inner();
        let n = self.admin.alter_offsets(&req.name, req.offsets).await?;
        Ok(Response::new(pb::AlterOffsetsResponse {
            message: format!("offsets of {n} partitions written"),
        }))
    }

    async fn reset_offsets(
        &self,
        request: Request<pb::ResetOffsetsRequest>,
    ) -> Result<Response<pb::ResetOffsetsResponse>, Status> {
        self.admin.reset_offsets(&request.into_inner().name).await?;
        Ok(Response::new(pb::ResetOffsetsResponse {
            message: "offsets removed".into(),
        }))
    }

    async fn list_executors(
        &self,
        _request: Request<pb::ListExecutorsRequest>,
    ) -> Result<Response<pb::ListExecutorsResponse>, Status> {
        Ok(Response::new(pb::ListExecutorsResponse {
            executors: self.admin.executors()?,
        }))
    }

    async fn list_audit_entries(
        &self,
        request: Request<pb::ListAuditEntriesRequest>,
    ) -> Result<Response<pb::ListAuditEntriesResponse>, Status> {
        let query = convert::audit_query(request.into_inner())?;
        let page = self.admin.audit_entries(&query)?;
        Ok(Response::new(pb::ListAuditEntriesResponse {
            entries: page.entries.into_iter().map(convert::audit_entry).collect(),
            next_page_token: page.next_after.unwrap_or_default(),
        }))
    }

    async fn get_connector_resources(
        &self,
        request: Request<pb::GetConnectorResourcesRequest>,
    ) -> Result<Response<pb::GetConnectorResourcesResponse>, Status> {
        let entries = self.admin.resources(&request.into_inner().name)?;
        Ok(Response::new(pb::GetConnectorResourcesResponse { entries }))
    }

    async fn list_orphaned_resources(
        &self,
        _request: Request<pb::ListOrphanedResourcesRequest>,
    ) -> Result<Response<pb::ListOrphanedResourcesResponse>, Status> {
        let orphans = self.admin.orphans()?;
        Ok(Response::new(pb::ListOrphanedResourcesResponse { orphans }))
    }

    async fn adopt_orphaned_resources(
        &self,
        request: Request<pb::AdoptOrphanedResourcesRequest>,
    ) -> Result<Response<pb::AdoptOrphanedResourcesResponse>, Status> {
        let req = request.into_inner();
        let entries = self.admin.adopt_orphans(&req.ids, &req.connector)?;
        Ok(Response::new(pb::AdoptOrphanedResourcesResponse {
            entries,
        }))
    }

    async fn purge_orphaned_resources(
        &self,
        request: Request<pb::PurgeOrphanedResourcesRequest>,
    ) -> Result<Response<pb::PurgeOrphanedResourcesResponse>, Status> {
        let req = request.into_inner();
        let (purged, remaining) = self.admin.purge_orphans(&req.ids).await?;
        Ok(Response::new(pb::PurgeOrphanedResourcesResponse {
            purged,
            remaining,
        }))
    }
    async fn get_connector_topics(
        &self,
        request: Request<pb::GetConnectorTopicsRequest>,
    ) -> Result<Response<pb::GetConnectorTopicsResponse>, Status> {
        let topics = self.admin.topics(&request.into_inner().name)?;
        Ok(Response::new(pb::GetConnectorTopicsResponse { topics }))
    }

    async fn reset_connector_topics(
        &self,
        request: Request<pb::ResetConnectorTopicsRequest>,
    ) -> Result<Response<pb::ResetConnectorTopicsResponse>, Status> {
        self.admin.reset_topics(&request.into_inner().name).await?;
        Ok(Response::new(pb::ResetConnectorTopicsResponse {}))
    }

    type WatchConnectorStream = ReceiverStream<Result<pb::WatchConnectorResponse, Status>>;

    async fn watch_connector(
        &self,
        request: Request<pb::WatchConnectorRequest>,
    ) -> Result<Response<Self::WatchConnectorStream>, Status> {
        let req = request.into_inner();
        let admin = self.admin.clone();
        let mut changes = admin.cluster().subscribe();
        let first = admin.status(&req.name)?;
        let (tx, rx) = tokio::sync::mpsc::channel(WATCH_BUFFER);
        let name = req.name;
        // Ends when the client goes away or the connector is gone; errors end the stream
        // with a status, never a panic.
        wharf::task::spawn(
            wharf::task::TaskKind::Detached,
            "watch connector",
            async move {
                let event = |t: pb::ConnectorEventType, s: Option<pb::ConnectorStatus>| {
                    pb::WatchConnectorResponse {
                        r#type: t as i32,
                        status: s,
                        time_ms: now_ms(),
                    }
                };
                if tx
                    .send(Ok(event(
                        pb::ConnectorEventType::Snapshot,
                        Some(first.clone()),
                    )))
                    .await
                    .is_err()
                {
                    return;
                }
                let mut last = first;
                loop {
                    tokio::select! {
                        () = tx.closed() => return,
                        r = changes.recv() => match r {
                            Ok(n) if n != name => continue,
                            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                        },
                    }
                    let current = match admin.cluster().store.connector(&name) {
                        Ok(Some(rec)) => admin.status_of(&rec),
                        Ok(None) => {
                            // The last status seen, with the deletion's steps as they ended.
                            let fin = admin.cluster().deletions.finished(&name).map(|d| {
                                let mut s = last.clone();
                                s.deletion = Some(convert::deletion_status(&d));
                                s
                            });
                            let _ = tx
                                .send(Ok(event(pb::ConnectorEventType::Deleted, fin)))
                                .await;
                            return;
                        }
                        Err(e) => Err(ApiError::from(e)),
                    };
                    match current {
                        Ok(s) if s != last => {
                            last = s.clone();
                            if tx
                                .send(Ok(event(pb::ConnectorEventType::StatusChanged, Some(s))))
                                .await
                                .is_err()
                            {
                                return;
                            }
                        }
                        Ok(_) => {}
                        Err(e) => {
                            let _ = tx.send(Err(e.into())).await;
                            return;
                        }
                    }
                }
            },
        );
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}
