//! A connector's source offsets: read, altered and reset (KIP-875), only while nothing
//! runs.

use tracing::info;
use wharf::pb::v1 as pb;

use crate::grpc::convert::{self, MAX_OFFSET_JSON_BYTES, MAX_OFFSETS_PER_REQUEST};
use crate::model::{ConnectorRecord, InstanceState, TargetState};

use super::{Admin, ApiError, ApiResult};

impl Admin {
    /// GetOffsets: the source offsets, as JSON texts.
    ///
    /// # Errors
    /// NOT_FOUND.
    pub fn offsets(&self, name: &str) -> ApiResult<Vec<pb::SourceOffset>> {
        self.existing(name)?;
        Ok(self
            .cluster
            .store
            .offsets(name)?
            .into_iter()
            .map(|(partition, offset)| pb::SourceOffset { partition, offset })
            .collect())
    }

    /// AlterOffsets (KIP-875): writes offsets (an empty offset removes the partition's)
    /// of a STOPPED connector; answers how many were written.
    ///
    /// # Errors
    /// INVALID_ARGUMENT naming `offsets[i].partition|offset`; FAILED_PRECONDITION unless
    /// STOPPED.
    pub fn alter_offsets(&self, name: &str, offsets: Vec<pb::SourceOffset>) -> ApiResult<usize> {
        convert::parse_name(name)?;
        if offsets.len() > MAX_OFFSETS_PER_REQUEST {
            return Err(ApiError::InvalidArgument {
                field: "offsets".into(),
                reason: format!("more than {MAX_OFFSETS_PER_REQUEST} entries"),
            });
        }
        for (i, o) in offsets.iter().enumerate() {
            check_json_object(format!("offsets[{i}].partition"), &o.partition)?;
            if !o.offset.is_empty() {
                check_json_object(format!("offsets[{i}].offset"), &o.offset)?;
            }
        }
        let rec = self.existing(name)?;
        require_stopped(&rec)?;
        let pairs: Vec<(String, String)> = offsets
            .into_iter()
            .map(|o| (o.partition, o.offset))
            .collect();
        self.cluster.store.put_offsets(name, &pairs)?;
        info!(connector = %name, partitions = pairs.len(), "offsets altered");
        Ok(pairs.len())
    }

    /// ResetOffsets (KIP-875): removes every offset of a STOPPED connector.
    ///
    /// # Errors
    /// NOT_FOUND; FAILED_PRECONDITION unless STOPPED.
    pub fn reset_offsets(&self, name: &str) -> ApiResult<()> {
        let rec = self.existing(name)?;
        require_stopped(&rec)?;
        self.cluster.store.reset_offsets(name)?;
        info!(connector = %name, "offsets reset");
        Ok(())
    }
}

/// KIP-875: offsets may change only while nothing runs.
fn require_stopped(rec: &ConnectorRecord) -> ApiResult<()> {
    if rec.deleting {
        return Err(ApiError::StillDeleting(rec.name.clone()));
    }
    let all_stopped = rec.connector.state == InstanceState::Stopped
        && rec.tasks.iter().all(|t| t.state == InstanceState::Stopped);
    if rec.target != TargetState::Stopped || !all_stopped {
        return Err(ApiError::WrongState {
            name: rec.name.clone(),
            reason: "is not STOPPED: stop it (StopConnector) and wait for STOPPED before changing offsets".into(),
        });
    }
    Ok(())
}

fn check_json_object(field: String, text: &str) -> ApiResult<()> {
    if text.len() > MAX_OFFSET_JSON_BYTES {
        return Err(ApiError::InvalidArgument {
            field,
            reason: format!("is longer than {MAX_OFFSET_JSON_BYTES} bytes"),
        });
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(_)) => Ok(()),
        _ => Err(ApiError::InvalidArgument {
            field,
            reason: "is not a JSON object".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::grpc::convert::RawConnector;
    use crate::model::ConnectorSpec;

    #[test]
    fn offsets_must_be_json_objects() {
        assert!(check_json_object("p".into(), "{\"a\":1}").is_ok());
        assert!(check_json_object("p".into(), "[1]").is_err());
        assert!(check_json_object("p".into(), "nope").is_err());
    }

    #[test]
    fn a_running_connector_refuses_offset_changes() {
        let spec = ConnectorSpec::try_from(RawConnector {
            name: "c",
            config: &HashMap::from([("connector.class".to_owned(), "p".to_owned())]),
        })
        .unwrap();
        let rec = ConnectorRecord::new(&spec, TargetState::Started);
        assert!(matches!(
            require_stopped(&rec),
            Err(ApiError::WrongState { .. })
        ));
    }
}
