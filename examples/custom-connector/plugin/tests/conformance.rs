//! spool-sink passes the conformance kit against real directories: what an author runs
//! before deploying (docs/connector-guide.md, "Test it with the kit").

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use wharf_example_custom_connector::{keys, plugin, spool_dir};
use wharf_sdk::ConfigMap;
use wharf_testkit::{Kit, Probe};

/// A file the user keeps in the spool root: never to be removed.
const USER_FILE: &str = "README.txt";

/// Lists a connector's spool directory and the files in it, and the staging directory a
/// start that failed halfway leaves.
struct SpoolProbe {
    root: PathBuf,
}

#[async_trait]
impl Probe for SpoolProbe {
    async fn owned(&self, connector: &str, config: &ConfigMap) -> Result<BTreeSet<String>, String> {
        let dir = spool_dir(connector, config).map_err(|e| e.to_string())?;
        let mut out = BTreeSet::new();
        let staging = dir.with_extension("staging");
        if staging.exists() {
            out.insert(staging.display().to_string());
        }
        if dir.exists() {
            out.insert(dir.display().to_string());
            for entry in std::fs::read_dir(&dir).map_err(|e| e.to_string())? {
                out.insert(
                    entry
                        .map_err(|e| e.to_string())?
                        .path()
                        .display()
                        .to_string(),
                );
            }
        }
        Ok(out)
    }

    async fn pre_existing(&self, _config: &ConfigMap) -> Result<BTreeSet<String>, String> {
        let user = self.root.join(USER_FILE);
        Ok(user
            .exists()
            .then(|| user.display().to_string())
            .into_iter()
            .collect())
    }

    /// The record values in the task files (`task-<n>.jsonl`, one JSON line per record
    /// with its value as text).
    async fn delivered(
        &self,
        connector: &str,
        config: &ConfigMap,
    ) -> Result<Option<Vec<Vec<u8>>>, String> {
        let dir = spool_dir(connector, config).map_err(|e| e.to_string())?;
        let mut values = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.extension().is_none_or(|e| e != "jsonl") {
                continue;
            }
            let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
            for line in text.lines().filter(|l| !l.is_empty()) {
                let record: serde_json::Value =
                    serde_json::from_str(line).map_err(|e| format!("{}: {e}", path.display()))?;
                let value = record["value"]
                    .as_str()
                    .ok_or_else(|| format!("{}: a line without a text value", path.display()))?;
                values.push(value.as_bytes().to_vec());
            }
        }
        Ok(Some(values))
    }

    /// The half-made state spool-sink's start can leave: the spool directory never got
    /// its final name (the start failed before its rename), so it is still the staging
    /// directory. A file inside is refused (`Ok(false)`): the start writes the owner file
    /// before the rename, so no start leaves a spool directory without it.
    async fn remove(&self, resource: &str) -> Result<bool, String> {
        let path = Path::new(resource);
        if !path.is_dir() || path.extension().is_some_and(|e| e == "staging") {
            return Ok(false);
        }
        std::fs::rename(path, path.with_extension("staging")).map_err(|e| e.to_string())?;
        Ok(true)
    }
}

fn kit() -> (tempfile::TempDir, Kit<SpoolProbe>) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    std::fs::write(root.join(USER_FILE), "kept by the user").unwrap();
    let r = root.display().to_string();
    let kit = Kit::new(
        plugin(),
        move |_name| {
            [
                (keys::ROOT.to_owned(), r.clone()),
                (keys::TOPICS.to_owned(), "lines".to_owned()),
            ]
            .into()
        },
        SpoolProbe { root },
    )
    .ledger_required();
    (tmp, kit)
}

#[tokio::test]
async fn ledger_declares_before_creating() {
    kit().1.ledger_declares_before_creating().await.unwrap();
}

#[tokio::test]
async fn delete_releases_every_created_entry() {
    kit().1.delete_releases_every_created_entry().await.unwrap();
}

#[tokio::test]
async fn plain_stops_keep_resources() {
    kit().1.plain_stops_keep_resources().await.unwrap();
}

#[tokio::test]
async fn lower_tasks_max_keeps_resources() {
    kit().1.lower_tasks_max_keeps_resources().await.unwrap();
}

#[tokio::test]
async fn delete_removes_everything() {
    kit().1.delete_removes_everything().await.unwrap();
}

#[tokio::test]
async fn repeated_cleanup_is_a_no_op() {
    kit().1.repeated_cleanup_is_a_no_op().await.unwrap();
}

#[tokio::test]
async fn cleanup_without_start_succeeds() {
    kit().1.cleanup_without_start_succeeds().await.unwrap();
}

#[tokio::test]
async fn cleanup_after_half_start_succeeds() {
    kit().1.cleanup_after_half_start_succeeds().await.unwrap();
}

#[tokio::test]
async fn sink_acknowledges_only_flushed_records() {
    kit()
        .1
        .sink_acknowledges_only_flushed_records()
        .await
        .unwrap();
}

#[tokio::test]
async fn all_checks_pass_and_none_is_skipped() {
    let report = kit().1.all().await.unwrap();
    assert!(report.skipped.is_empty(), "{report}");
    assert_eq!(report.passed, wharf_testkit::CHECKS);
}

#[tokio::test]
async fn deleting_one_connector_leaves_another() {
    kit()
        .1
        .deleting_one_connector_leaves_another()
        .await
        .unwrap();
}

#[tokio::test]
async fn pre_existing_resources_survive() {
    kit().1.pre_existing_resources_survive().await.unwrap();
}

#[tokio::test]
async fn late_cleanup_leaves_a_re_created_connector() {
    kit()
        .1
        .late_cleanup_leaves_a_re_created_connector()
        .await
        .unwrap();
}

#[tokio::test]
async fn start_refuses_what_another_incarnation_kept() {
    kit()
        .1
        .start_refuses_what_another_incarnation_kept()
        .await
        .unwrap();
}
