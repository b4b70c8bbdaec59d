//! The embedded backend: one redb file under `--data-dir`. redb commits are durable
//! (fsync, copy-on-write B-trees), so a kill -9 loses nothing that was acknowledged.
//!
//! Layout: tables `connectors`, `deletions`, `executors` (key: name or id, value: JSON of
//! a [`Stored`] envelope with the record's revision), `offsets` (key: `connector\0partition`,
//! value: offset JSON; `\0` cannot occur in a connector name), `meta` (counters).
//!
//! Secrets: connector configs (and sealed deletion contexts) hold secret values. They are
//! encrypted with ChaCha20-Poly1305 under a key kept in `<data-dir>/store.key` (mode 0600)
//! before they reach the file, see [`crate::store::seal`].

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{CreateOutcome, StateStore, StoreError};
use crate::model::{ConnectorRecord, DeletionRecord, ExecutorRecord, PluginRecord};
use crate::store::seal::Sealer;

const CONNECTORS: TableDefinition<&str, &[u8]> = TableDefinition::new("connectors");
const DELETIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("deletions");
const EXECUTORS: TableDefinition<&str, &[u8]> = TableDefinition::new("executors");
const OFFSETS: TableDefinition<&str, &str> = TableDefinition::new("offsets");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

const REVISION_KEY: &str = "revision";
const EPOCH_KEY: &str = "epoch";
/// Lowest generation a new connector starts at: above every generation handed out to an
/// earlier connector of any name, so that executors, which refuse generations older than
/// the newest they saw for a connector name, accept a re-created connector.
const GENERATION_FLOOR_KEY: &str = "generation_floor";

#[derive(Serialize, Deserialize)]
struct Stored<T> {
    rev: u64,
    value: T,
}

/// The redb-backed [`StateStore`].
pub struct RedbStore {
    db: Database,
    sealer: Sealer,
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

impl RedbStore {
    /// Opens (or creates) the store file `path`; `sealer` protects secret-bearing records.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the file cannot be opened or is locked by another
    /// process.
    pub fn open(path: &Path, sealer: Sealer) -> Result<Self, StoreError> {
        let db = Database::create(path).map_err(unavailable)?;
        let tx = db.begin_write().map_err(unavailable)?;
        {
            tx.open_table(CONNECTORS).map_err(unavailable)?;
            tx.open_table(DELETIONS).map_err(unavailable)?;
            tx.open_table(EXECUTORS).map_err(unavailable)?;
            tx.open_table(OFFSETS).map_err(unavailable)?;
            tx.open_table(META).map_err(unavailable)?;
        }
        tx.commit().map_err(unavailable)?;
        Ok(Self { db, sealer })
    }

    fn encode<T: Serialize>(&self, rev: u64, value: &T) -> Result<Vec<u8>, StoreError> {
        let json = serde_json::to_vec(&Stored { rev, value }).map_err(unavailable)?;
        self.sealer.seal(&json)
    }

    fn decode<T: DeserializeOwned>(&self, key: &str, bytes: &[u8]) -> Result<(u64, T), StoreError> {
        let corrupt = |reason: String| StoreError::Corrupt {
            key: key.to_owned(),
            reason,
        };
        let json = self
            .sealer
            .open(bytes)
            .map_err(|e| corrupt(e.to_string()))?;
        let s: Stored<T> = serde_json::from_slice(&json).map_err(|e| corrupt(e.to_string()))?;
        Ok((s.rev, s.value))
    }

    fn read_one<T: DeserializeOwned>(
        &self,
        table: TableDefinition<&str, &[u8]>,
        key: &str,
    ) -> Result<Option<(u64, T)>, StoreError> {
        let tx = self.db.begin_read().map_err(unavailable)?;
        let t = tx.open_table(table).map_err(unavailable)?;
        match t.get(key).map_err(unavailable)? {
            Some(v) => Ok(Some(self.decode(key, v.value())?)),
            None => Ok(None),
        }
    }

    fn read_all<T: DeserializeOwned>(
        &self,
        table: TableDefinition<&str, &[u8]>,
    ) -> Result<Vec<(u64, T)>, StoreError> {
        let tx = self.db.begin_read().map_err(unavailable)?;
        let t = tx.open_table(table).map_err(unavailable)?;
        let mut out = Vec::new();
        for entry in t.iter().map_err(unavailable)? {
            let (k, v) = entry.map_err(unavailable)?;
            out.push(self.decode(k.value(), v.value())?);
        }
        Ok(out)
    }
}

fn next_counter(meta: &mut redb::Table<'_, &str, u64>, key: &str) -> Result<u64, StoreError> {
    let current = meta
        .get(key)
        .map_err(unavailable)?
        .map(|v| v.value())
        .unwrap_or(0);
    let next = current + 1;
    meta.insert(key, next).map_err(unavailable)?;
    Ok(next)
}

fn stored_rev(
    t: &redb::Table<'_, &str, &[u8]>,
    key: &str,
    sealer: &Sealer,
) -> Result<Option<u64>, StoreError> {
    match t.get(key).map_err(unavailable)? {
        Some(v) => {
            let json = sealer.open(v.value()).map_err(|e| StoreError::Corrupt {
                key: key.to_owned(),
                reason: e.to_string(),
            })?;
            #[derive(Deserialize)]
            struct Rev {
                rev: u64,
            }
            let r: Rev = serde_json::from_slice(&json).map_err(|e| StoreError::Corrupt {
                key: key.to_owned(),
                reason: e.to_string(),
            })?;
            Ok(Some(r.rev))
        }
        None => Ok(None),
    }
}

fn offset_key(connector: &str, partition: &str) -> String {
    format!("{connector}\0{partition}")
}

impl StateStore for RedbStore {
    fn connector(&self, name: &str) -> Result<Option<ConnectorRecord>, StoreError> {
        Ok(self
            .read_one::<ConnectorRecord>(CONNECTORS, name)?
            .map(|(rev, mut r)| {
                r.revision = rev;
                r
            }))
    }

    fn connectors(&self) -> Result<Vec<ConnectorRecord>, StoreError> {
        Ok(self
            .read_all::<ConnectorRecord>(CONNECTORS)?
            .into_iter()
            .map(|(rev, mut r)| {
                r.revision = rev;
                r
            })
            .collect())
    }

    fn create_connector(&self, rec: &ConnectorRecord) -> Result<CreateOutcome, StoreError> {
        let tx = self.db.begin_write().map_err(unavailable)?;
        let outcome = {
            let mut conns = tx.open_table(CONNECTORS).map_err(unavailable)?;
            let dels = tx.open_table(DELETIONS).map_err(unavailable)?;
            let mut meta = tx.open_table(META).map_err(unavailable)?;
            if dels.get(rec.name.as_str()).map_err(unavailable)?.is_some() {
                CreateOutcome::StillDeleting
            } else if conns.get(rec.name.as_str()).map_err(unavailable)?.is_some() {
                CreateOutcome::AlreadyExists
            } else {
                let rev = next_counter(&mut meta, REVISION_KEY)?;
                let floor = meta
                    .get(GENERATION_FLOOR_KEY)
                    .map_err(unavailable)?
                    .map(|v| v.value())
                    .unwrap_or(0);
                let mut rec = rec.clone();
                rec.next_generation = rec.next_generation.max(floor);
                let bytes = self.encode(rev, &rec)?;
                conns
                    .insert(rec.name.as_str(), bytes.as_slice())
                    .map_err(unavailable)?;
                CreateOutcome::Created
            }
        };
        if outcome == CreateOutcome::Created {
            tx.commit().map_err(unavailable)?;
        } else {
            tx.abort().map_err(unavailable)?;
        }
        Ok(outcome)
    }

    fn put_connector(&self, rec: &ConnectorRecord) -> Result<bool, StoreError> {
        let tx = self.db.begin_write().map_err(unavailable)?;
        let ok = {
            let mut conns = tx.open_table(CONNECTORS).map_err(unavailable)?;
            let mut meta = tx.open_table(META).map_err(unavailable)?;
            if stored_rev(&conns, &rec.name, &self.sealer)? != Some(rec.revision) {
                false
            } else {
                let rev = next_counter(&mut meta, REVISION_KEY)?;
                let bytes = self.encode(rev, rec)?;
                conns
                    .insert(rec.name.as_str(), bytes.as_slice())
                    .map_err(unavailable)?;
                true
            }
        };
        if ok {
            tx.commit().map_err(unavailable)?;
        } else {
            tx.abort().map_err(unavailable)?;
        }
        Ok(ok)
    }

    fn start_deletion(
        &self,
        rec: &ConnectorRecord,
        deletion: &DeletionRecord,
    ) -> Result<bool, StoreError> {
        let tx = self.db.begin_write().map_err(unavailable)?;
        let ok = {
            let mut conns = tx.open_table(CONNECTORS).map_err(unavailable)?;
            let mut dels = tx.open_table(DELETIONS).map_err(unavailable)?;
            let mut meta = tx.open_table(META).map_err(unavailable)?;
            if stored_rev(&conns, &rec.name, &self.sealer)? != Some(rec.revision)
                || dels.get(rec.name.as_str()).map_err(unavailable)?.is_some()
            {
                false
            } else {
                let rev = next_counter(&mut meta, REVISION_KEY)?;
                let mut marked = rec.clone();
                marked.deleting = true;
                let c = self.encode(rev, &marked)?;
                let d = self.encode(rev, deletion)?;
                conns
                    .insert(rec.name.as_str(), c.as_slice())
                    .map_err(unavailable)?;
                dels.insert(rec.name.as_str(), d.as_slice())
                    .map_err(unavailable)?;
                true
            }
        };
        if ok {
            tx.commit().map_err(unavailable)?;
        } else {
            tx.abort().map_err(unavailable)?;
        }
        Ok(ok)
    }

    fn deletion(&self, name: &str) -> Result<Option<DeletionRecord>, StoreError> {
        Ok(self
            .read_one::<DeletionRecord>(DELETIONS, name)?
            .map(|(rev, mut d)| {
                d.revision = rev;
                d
            }))
    }

    fn deletions(&self) -> Result<Vec<DeletionRecord>, StoreError> {
        Ok(self
            .read_all::<DeletionRecord>(DELETIONS)?
            .into_iter()
            .map(|(rev, mut d)| {
                d.revision = rev;
                d
            })
            .collect())
    }

    fn put_deletion(&self, d: &DeletionRecord) -> Result<bool, StoreError> {
        let tx = self.db.begin_write().map_err(unavailable)?;
        let ok = {
            let mut dels = tx.open_table(DELETIONS).map_err(unavailable)?;
            let mut meta = tx.open_table(META).map_err(unavailable)?;
            if stored_rev(&dels, &d.name, &self.sealer)? != Some(d.revision) {
                false
            } else {
                let rev = next_counter(&mut meta, REVISION_KEY)?;
                let bytes = self.encode(rev, d)?;
                dels.insert(d.name.as_str(), bytes.as_slice())
                    .map_err(unavailable)?;
                true
            }
        };
        if ok {
            tx.commit().map_err(unavailable)?;
        } else {
            tx.abort().map_err(unavailable)?;
        }
        Ok(ok)
    }

    fn finish_deletion(&self, name: &str, revision: u64) -> Result<bool, StoreError> {
        let tx = self.db.begin_write().map_err(unavailable)?;
        let ok = {
            let mut conns = tx.open_table(CONNECTORS).map_err(unavailable)?;
            let mut dels = tx.open_table(DELETIONS).map_err(unavailable)?;
            let mut offs = tx.open_table(OFFSETS).map_err(unavailable)?;
            let mut meta = tx.open_table(META).map_err(unavailable)?;
            let stored: Option<(u64, DeletionRecord)> = match dels.get(name).map_err(unavailable)? {
                Some(v) => Some(self.decode(name, v.value())?),
                None => None,
            };
            if stored.as_ref().map(|(rev, _)| *rev) != Some(revision) {
                false
            } else {
                let used = stored.map_or(0, |(_, d)| d.next_generation);
                let floor = meta
                    .get(GENERATION_FLOOR_KEY)
                    .map_err(unavailable)?
                    .map(|v| v.value())
                    .unwrap_or(0);
                meta.insert(GENERATION_FLOOR_KEY, floor.max(used))
                    .map_err(unavailable)?;
                dels.remove(name).map_err(unavailable)?;
                conns.remove(name).map_err(unavailable)?;
                let start = offset_key(name, "");
                let end = format!("{name}\u{1}");
                offs.retain_in(start.as_str()..end.as_str(), |_, _| false)
                    .map_err(unavailable)?;
                true
            }
        };
        if ok {
            tx.commit().map_err(unavailable)?;
        } else {
            tx.abort().map_err(unavailable)?;
        }
        Ok(ok)
    }

    fn register_executor(
        &self,
        id: &str,
        address: &str,
        plugins: Vec<PluginRecord>,
    ) -> Result<ExecutorRecord, StoreError> {
        let tx = self.db.begin_write().map_err(unavailable)?;
        let rec = {
            let mut execs = tx.open_table(EXECUTORS).map_err(unavailable)?;
            let mut meta = tx.open_table(META).map_err(unavailable)?;
            let epoch = next_counter(&mut meta, EPOCH_KEY)?;
            let rev = next_counter(&mut meta, REVISION_KEY)?;
            let rec = ExecutorRecord {
                id: id.to_owned(),
                address: address.to_owned(),
                epoch,
                plugins,
                lost: false,
            };
            let bytes = self.encode(rev, &rec)?;
            execs.insert(id, bytes.as_slice()).map_err(unavailable)?;
            rec
        };
        tx.commit().map_err(unavailable)?;
        Ok(rec)
    }

    fn executor(&self, id: &str) -> Result<Option<ExecutorRecord>, StoreError> {
        Ok(self
            .read_one::<ExecutorRecord>(EXECUTORS, id)?
            .map(|(_, r)| r))
    }

    fn executors(&self) -> Result<Vec<ExecutorRecord>, StoreError> {
        Ok(self
            .read_all::<ExecutorRecord>(EXECUTORS)?
            .into_iter()
            .map(|(_, r)| r)
            .collect())
    }

    fn mark_executor_lost(&self, id: &str, epoch: u64) -> Result<bool, StoreError> {
        let tx = self.db.begin_write().map_err(unavailable)?;
        let ok = {
            let mut execs = tx.open_table(EXECUTORS).map_err(unavailable)?;
            let mut meta = tx.open_table(META).map_err(unavailable)?;
            let current: Option<ExecutorRecord> = match execs.get(id).map_err(unavailable)? {
                Some(v) => Some(self.decode::<ExecutorRecord>(id, v.value())?.1),
                None => None,
            };
            match current {
                Some(mut rec) if rec.epoch == epoch && !rec.lost => {
                    rec.lost = true;
                    let rev = next_counter(&mut meta, REVISION_KEY)?;
                    let bytes = self.encode(rev, &rec)?;
                    execs.insert(id, bytes.as_slice()).map_err(unavailable)?;
                    true
                }
                Some(_) | None => false,
            }
        };
        if ok {
            tx.commit().map_err(unavailable)?;
        } else {
            tx.abort().map_err(unavailable)?;
        }
        Ok(ok)
    }

    fn offsets(&self, connector: &str) -> Result<Vec<(String, String)>, StoreError> {
        let tx = self.db.begin_read().map_err(unavailable)?;
        let t = tx.open_table(OFFSETS).map_err(unavailable)?;
        let start = offset_key(connector, "");
        let end = format!("{connector}\u{1}");
        let mut out = Vec::new();
        for entry in t.range(start.as_str()..end.as_str()).map_err(unavailable)? {
            let (k, v) = entry.map_err(unavailable)?;
            let partition = k.value().get(start.len()..).unwrap_or_default().to_owned();
            out.push((partition, v.value().to_owned()));
        }
        Ok(out)
    }

    fn put_offsets(&self, connector: &str, offsets: &[(String, String)]) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(unavailable)?;
        {
            let mut t = tx.open_table(OFFSETS).map_err(unavailable)?;
            for (partition, offset) in offsets {
                let key = offset_key(connector, partition);
                if offset.is_empty() {
                    t.remove(key.as_str()).map_err(unavailable)?;
                } else {
                    t.insert(key.as_str(), offset.as_str())
                        .map_err(unavailable)?;
                }
            }
        }
        tx.commit().map_err(unavailable)
    }

    fn reset_offsets(&self, connector: &str) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(unavailable)?;
        {
            let mut t = tx.open_table(OFFSETS).map_err(unavailable)?;
            let start = offset_key(connector, "");
            let end = format!("{connector}\u{1}");
            t.retain_in(start.as_str()..end.as_str(), |_, _| false)
                .map_err(unavailable)?;
        }
        tx.commit().map_err(unavailable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ConnectorSpec, TargetState};
    use std::num::NonZeroU32;
    use wharf::ids::ConnectorName;

    fn store(dir: &Path) -> RedbStore {
        let sealer = Sealer::load_or_create(dir).unwrap();
        RedbStore::open(&dir.join("s.redb"), sealer).unwrap()
    }

    fn rec(name: &str) -> ConnectorRecord {
        let mut config = wharf::sdk::ConfigMap::new();
        config.insert("connection.password".into(), "s3cr3t-pa55".into());
        ConnectorRecord::new(
            &ConnectorSpec {
                name: ConnectorName::parse(name).unwrap(),
                plugin: "p".into(),
                tasks_max: NonZeroU32::new(1).unwrap(),
                config,
            },
            TargetState::Started,
        )
    }

    #[test]
    fn a_finished_deletion_removes_connector_and_offsets_but_only_on_its_revision() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        assert_eq!(
            s.create_connector(&rec("a")).unwrap(),
            CreateOutcome::Created
        );
        assert_eq!(
            s.create_connector(&rec("a")).unwrap(),
            CreateOutcome::AlreadyExists
        );
        s.put_offsets("a", &[("{\"p\":1}".into(), "{\"o\":2}".into())])
            .unwrap();
        s.put_offsets("ab", &[("{\"p\":1}".into(), "{\"o\":3}".into())])
            .unwrap();
        let r = s.connector("a").unwrap().unwrap();
        let d = DeletionRecord::seal(&r, s.offsets("a").unwrap(), true, 0);
        assert!(s.start_deletion(&r, &d).unwrap());
        assert_eq!(
            s.create_connector(&rec("a")).unwrap(),
            CreateOutcome::StillDeleting
        );
        let d = s.deletion("a").unwrap().unwrap();
        assert!(!s.finish_deletion("a", d.revision + 100).unwrap());
        let used = d.next_generation;
        assert!(s.finish_deletion("a", d.revision).unwrap());
        assert!(s.connector("a").unwrap().is_none());
        s.create_connector(&rec("a")).unwrap();
        assert!(s.connector("a").unwrap().unwrap().next_generation >= used);
        assert!(s.offsets("a").unwrap().is_empty());
        assert_eq!(s.offsets("ab").unwrap().len(), 1);
    }

    #[test]
    fn a_stale_revision_does_not_overwrite_a_connector() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        s.create_connector(&rec("a")).unwrap();
        let r1 = s.connector("a").unwrap().unwrap();
        assert!(s.put_connector(&r1).unwrap());
        assert!(!s.put_connector(&r1).unwrap());
    }

    #[test]
    fn secrets_do_not_reach_the_store_file_in_clear_text() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = store(dir.path());
            s.create_connector(&rec("a")).unwrap();
        }
        let bytes = std::fs::read(dir.path().join("s.redb")).unwrap();
        let needle = b"s3cr3t-pa55";
        assert!(!bytes.windows(needle.len()).any(|w| w == needle));
        let s = store(dir.path());
        let r = s.connector("a").unwrap().unwrap();
        assert_eq!(r.config["connection.password"], "s3cr3t-pa55");
    }

    #[test]
    fn epochs_grow_across_executors_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let e1 = store(dir.path())
            .register_executor("x", "http://a", vec![])
            .unwrap();
        let e2 = store(dir.path())
            .register_executor("y", "http://b", vec![])
            .unwrap();
        assert!(e2.epoch > e1.epoch);
    }
}
