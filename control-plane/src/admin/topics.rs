//! KIP-558 active topics: `GetConnectorTopics` / `GET /connectors/{name}/topics` and
//! `ResetConnectorTopics` / `PUT /connectors/{name}/topics/reset` (docs/kafka.md).

use tracing::info;

use super::{Admin, ApiError, ApiResult};

impl Admin {
    /// GetConnectorTopics: the connector's active topics, sorted.
    ///
    /// # Errors
    /// NOT_FOUND; store errors.
    pub fn topics(&self, name: &str) -> ApiResult<Vec<String>> {
        Ok(self.existing(name)?.active_topics.into_iter().collect())
    }

    /// The Kafka cluster id of the record log, when the executors use Kafka and one
    /// reported it (`GET /`'s `kafka_cluster_id`).
    pub fn kafka_cluster_id(&self) -> Option<String> {
        self.cluster.kafka_cluster_id()
    }

    /// ResetConnectorTopics: empties the connector's active topics; the topics its tasks
    /// still use come back as they report them again.
    ///
    /// # Errors
    /// NOT_FOUND; FAILED_PRECONDITION while it is being deleted; store errors.
    pub async fn reset_topics(&self, name: &str) -> ApiResult<()> {
        let rec = self.existing(name)?;
        if rec.deleting {
            return Err(ApiError::StillDeleting(name.to_owned()));
        }
        let mut refused = false;
        self.cluster
            .record_connector_batched(name, |r| {
                if r.deleting {
                    refused = true;
                    return None;
                }
                if r.active_topics.is_empty() {
                    return None;
                }
                r.active_topics.clear();
                Some(((), false))
            })
            .await?;
        if refused {
            return Err(ApiError::StillDeleting(name.to_owned()));
        }
        info!(connector = %name, "active topics reset");
        Ok(())
    }
}
