//! The etcd backend, for several control-plane replicas sharing one state.
//!
//! Layout under the prefix (default `/wharf/`): `connectors/<name>`, `deletions/<name>`,
//! `executors/<id>` (sealed JSON of the record), `offsets/<connector>\0<partition>`
//! (offset JSON, not sealed, as in the redb store), `meta/epoch` and
//! `meta/generation_floor` (decimal counters), `leader` (the elected replica's URL, on
//! its etcd lease; see [`super::etcd_election`]), `audit/<id>` (sealed JSON of an
//! [`AuditEntry`]; ids sort by time).
//!
//! Revisions: a record's revision is the etcd `mod_revision` of its key. Every
//! conditional write is one etcd `Txn` comparing `mod_revision` (and `version` for
//! absence), so the semantics match [`super::RedbStore`]: a stale writer gets `false` and
//! reloads. Counters are read, then written in a `Txn` that compares their
//! `mod_revision`, retried on a race.
//!
//! Fencing: once this replica is elected, every write also compares the
//! `create_revision` of the leader key with the one it created. A replica that lost its
//! lease (and so its leader key) can no longer write anything, even before it noticed.
//!
//! Secrets: values are sealed with the same [`Sealer`] as the redb store. All replicas
//! must hold the same `store.key` (see `docs/state.md`); etcd only ever sees ciphertext.
//!
//! The [`StateStore`] trait is synchronous; etcd's client is async. Calls run on a small
//! runtime owned by the store and the caller's thread waits for the answer, bounded by
//! [`ETCD_CALL_TIMEOUT_MS`] (like a redb commit waits for its fsync); a caller on a tokio
//! worker hands the worker's other tasks on meanwhile ([`super::wait_off_worker`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, KeyValue, PutOptions, Txn, TxnOp,
    TxnOpResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{CreateOutcome, StateStore, StoreError};
use crate::model::{
    AuditEntry, AuditPage, AuditQuery, AuditRetention, ConnectorRecord, DeletionRecord,
    ExecutorRecord, PluginRecord, resources::OrphanRecord,
};
use crate::store::seal::Sealer;

/// Default key prefix in etcd.
pub const DEFAULT_ETCD_PREFIX: &str = "/wharf/";
/// Bound on one store call (all its etcd round trips), in milliseconds.
pub const ETCD_CALL_TIMEOUT_MS: u64 = 5_000;
/// Bound on connecting to an etcd endpoint, in milliseconds.
pub const ETCD_CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Rounds of a read-then-compare write whose counter raced with another writer.
const CAS_ATTEMPTS: usize = 32;
/// etcd's default `--max-txn-ops`; larger offset batches are written in several txns.
const MAX_TXN_OPS: usize = 128;
/// Worker threads of the store's own runtime.
const STORE_RUNTIME_THREADS: usize = 1;

const EPOCH_KEY: &str = "meta/epoch";
/// Prefix (under the store prefix) of the audit trail.
const AUDIT_PREFIX: &str = "audit/";
/// Orphaned resources: `orphans/<id>`, sealed JSON of an [`OrphanRecord`].
const ORPHANS_PREFIX: &str = "orphans/";
/// Audit entries read per etcd range request while filling a page.
const AUDIT_SCAN_CHUNK: i64 = 512;
const GENERATION_FLOOR_KEY: &str = "meta/generation_floor";
/// Key (under the prefix) of the elected leader.
pub const LEADER_KEY: &str = "leader";

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("etcd: {e}"))
}

/// Where to find etcd and how to prove who we are to it.
#[derive(Debug, Clone, Default)]
pub struct EtcdOptions {
    /// Endpoints, `http://host:port` or, with [`EtcdOptions::tls`], `https://host:port`
    /// (the client balances over them).
    pub endpoints: Vec<String>,
    /// Key prefix; several Wharf clusters can share one etcd under different prefixes.
    pub prefix: String,
    /// TLS to etcd (`https://` endpoints); `None` for plaintext.
    pub tls: Option<EtcdTls>,
    /// etcd user authentication (`etcdctl auth enable`); `None` for none.
    pub user: Option<EtcdUser>,
}

/// TLS to etcd, as etcd's own `--cacert`, `--cert`, `--key` client flags. The files are
/// read when the store connects; a replaced file is used after a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTls {
    /// PEM file of the CA that signed etcd's server certificates.
    pub ca: PathBuf,
    /// PEM certificate and key this control plane presents (etcd's
    /// `--client-cert-auth`), when etcd asks for one.
    pub client: Option<(PathBuf, PathBuf)>,
}

/// An etcd user and its password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdUser {
    /// User name.
    pub name: String,
    /// Its password (never shown: Debug prints a placeholder).
    pub password: Password,
}

/// A password that never shows in Debug output or logs; read it with
/// [`Password::expose`] only where it is sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// Wraps a password.
    pub fn new(text: impl Into<String>) -> Password {
        Password(text.into())
    }

    /// The password itself, for the one call that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(wharf::sdk::REDACTED)
    }
}

/// `e` with its causes: tonic's transport error hides the TLS or connect failure in its
/// source.
fn etcd_error(e: etcd_client::Error) -> StoreError {
    StoreError::Unavailable(format!("etcd: {}", wharf::tls::error_chain(&e)))
}

/// The client options of `options`: timeouts, TLS (files read here) and the user.
///
/// # Errors
/// [`StoreError::Unavailable`] naming the file and its flag when a TLS file cannot be read.
fn connect_options(options: &EtcdOptions) -> Result<ConnectOptions, StoreError> {
    let mut opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(ETCD_CONNECT_TIMEOUT_MS))
        .with_timeout(Duration::from_millis(ETCD_CALL_TIMEOUT_MS));
    if let Some(tls) = &options.tls {
        let read = |path: &Path, flag: &str| {
            std::fs::read(path).map_err(|e| {
                StoreError::Unavailable(format!("etcd: {flag} {}: {e}", path.display()))
            })
        };
        let mut config = etcd_client::TlsOptions::new().ca_certificate(
            etcd_client::Certificate::from_pem(read(&tls.ca, "--etcd-cacert")?),
        );
        if let Some((cert, key)) = &tls.client {
            config = config.identity(etcd_client::Identity::from_pem(
                read(cert, "--etcd-cert")?,
                read(key, "--etcd-key")?,
            ));
        }
        opts = opts.with_tls(config);
    }
    if let Some(user) = &options.user {
        // etcd's simple tokens expire (--auth-token-ttl): get a new one instead of failing.
        opts = opts
            .with_user(user.name.clone(), user.password.expose())
            .with_auto_token_refresh(true);
    }
    Ok(opts)
}

/// The write fence held while this replica is the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    /// `create_revision` of the leader key this replica created.
    pub leader_create_revision: i64,
}

/// Which writes the store lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteFence {
    /// Every write (no election: one replica, or the contract tests).
    Open,
    /// None: this replica is a follower (its writes go to the leader).
    Follower,
    /// Writes while the leader key is still the one this replica created.
    Leader(Fence),
}

struct Inner {
    client: Client,
    prefix: String,
    sealer: Sealer,
    fence: Mutex<WriteFence>,
}

/// The etcd-backed [`StateStore`].
pub struct EtcdStore {
    inner: Arc<Inner>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which panics inside an async context.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl EtcdStore {
    /// Connects to etcd (lazily: a missing server shows on the first call, which
    /// `connect` makes to fail early).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when no endpoint is given or etcd does not answer.
    pub fn connect(options: &EtcdOptions, sealer: Sealer) -> Result<Self, StoreError> {
        if options.endpoints.is_empty() {
            return Err(StoreError::Unavailable(
                "etcd: no endpoint given (--etcd-endpoints)".into(),
            ));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(STORE_RUNTIME_THREADS)
            .thread_name("wharf-etcd-store")
            .enable_all()
            .build()
            .map_err(unavailable)?;
        let endpoints = options.endpoints.clone();
        let opts = connect_options(options)?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            // With a user, connect authenticates (a wrong password fails here).
            let _ = tx.send(Client::connect(endpoints, Some(opts)).await);
        });
        let client = rx.recv().map_err(unavailable)?.map_err(etcd_error)?;
        let mut prefix = options.prefix.clone();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        let store = Self {
            inner: Arc::new(Inner {
                client,
                prefix,
                sealer,
                fence: Mutex::new(WriteFence::Open),
            }),
            runtime: Some(runtime),
        };
        // Fail at start, not on the first request, when etcd is not there.
        store.run(|i| async move {
            i.kv()
                .get(i.key(EPOCH_KEY), None)
                .await
                .map_err(etcd_error)?;
            Ok(())
        })?;
        Ok(store)
    }

    /// The etcd client (shared with the election).
    pub fn client(&self) -> Client {
        self.inner.client.clone()
    }

    /// The key prefix, ending in `/`.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// Sets which writes go through (the election moves it between
    /// [`WriteFence::Follower`] and [`WriteFence::Leader`]).
    pub fn set_write_fence(&self, fence: WriteFence) {
        *self.inner.fence_guard() = fence;
    }

    fn run<T, F, Fut>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>) -> Fut,
        Fut: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let Some(rt) = self.runtime.as_ref() else {
            return Err(StoreError::Unavailable("etcd store closed".into()));
        };
        let fut = f(self.inner.clone());
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        rt.spawn(async move {
            let out = tokio::time::timeout(Duration::from_millis(ETCD_CALL_TIMEOUT_MS), fut)
                .await
                .unwrap_or_else(|_| {
                    Err(StoreError::Unavailable(format!(
                        "etcd: no answer within {ETCD_CALL_TIMEOUT_MS} ms"
                    )))
                });
            let _ = tx.send(out);
        });
        super::wait_off_worker(|| rx.recv())
            .map_err(|_| StoreError::Unavailable("etcd store runtime stopped".into()))?
    }
}

enum TxnResult {
    Done,
    /// A compare failed; the `or_else` answers.
    Failed(Vec<TxnOpResponse>),
}

impl Inner {
    fn kv(&self) -> etcd_client::KvClient {
        self.client.kv_client()
    }

    fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    fn fence_guard(&self) -> std::sync::MutexGuard<'_, WriteFence> {
        self.fence
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn conn_key(&self, name: &str) -> String {
        self.key(&format!("connectors/{name}"))
    }
    fn del_key(&self, name: &str) -> String {
        self.key(&format!("deletions/{name}"))
    }
    fn exec_key(&self, id: &str) -> String {
        self.key(&format!("executors/{id}"))
    }
    /// Prefix of one connector's offsets; `\0` cannot occur in a connector name.
    fn offsets_prefix(&self, connector: &str) -> String {
        self.key(&format!("offsets/{connector}\0"))
    }

    fn encode<T: Serialize>(&self, value: &T) -> Result<Vec<u8>, StoreError> {
        let json = serde_json::to_vec(value).map_err(unavailable)?;
        self.sealer.seal(&json)
    }

    fn decode<T: DeserializeOwned>(&self, kv: &KeyValue) -> Result<T, StoreError> {
        let corrupt = |reason: String| StoreError::Corrupt {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            reason,
        };
        let json = self
            .sealer
            .open(kv.value())
            .map_err(|e| corrupt(e.to_string()))?;
        serde_json::from_slice(&json).map_err(|e| corrupt(e.to_string()))
    }

    async fn get_one(&self, key: String) -> Result<Option<KeyValue>, StoreError> {
        let mut resp = self.kv().get(key, None).await.map_err(unavailable)?;
        Ok(resp.take_kvs().into_iter().next())
    }

    async fn get_prefix(&self, prefix: String) -> Result<Vec<KeyValue>, StoreError> {
        let mut resp = self
            .kv()
            .get(prefix, Some(GetOptions::new().with_prefix()))
            .await
            .map_err(unavailable)?;
        Ok(resp.take_kvs())
    }

    /// A counter's value and `mod_revision` (0, 0 when absent).
    async fn counter(&self, key: &str) -> Result<(u64, i64), StoreError> {
        match self.get_one(self.key(key)).await? {
            Some(kv) => {
                let v = std::str::from_utf8(kv.value())
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| StoreError::Corrupt {
                        key: key.to_owned(),
                        reason: "not a decimal counter".into(),
                    })?;
                Ok((v, kv.mod_revision()))
            }
            None => Ok((0, 0)),
        }
    }

    /// Runs `ops` if every compare holds and this replica still holds its fence.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] on a follower, when the leader key is no longer the one
    /// this leader created (leadership lost), or when etcd fails.
    async fn txn(
        &self,
        mut compares: Vec<Compare>,
        ops: Vec<TxnOp>,
        mut or_else: Vec<TxnOp>,
    ) -> Result<TxnResult, StoreError> {
        let fence = match *self.fence_guard() {
            WriteFence::Open => None,
            WriteFence::Follower => {
                return Err(StoreError::Unavailable(
                    "etcd: this control plane is a follower; writes go to the leader".into(),
                ));
            }
            WriteFence::Leader(f) => Some(f),
        };
        let leader_key = self.key(LEADER_KEY);
        if let Some(f) = fence {
            compares.push(Compare::create_revision(
                leader_key.clone(),
                CompareOp::Equal,
                f.leader_create_revision,
            ));
            or_else.push(TxnOp::get(leader_key, None));
        }
        let txn = Txn::new().when(compares).and_then(ops).or_else(or_else);
        let resp = self.kv().txn(txn).await.map_err(unavailable)?;
        if resp.succeeded() {
            return Ok(TxnResult::Done);
        }
        let mut answers = resp.op_responses();
        if let Some(f) = fence {
            let current = match answers.pop() {
                Some(TxnOpResponse::Get(g)) => g.kvs().first().map(KeyValue::create_revision),
                _ => None,
            };
            if current != Some(f.leader_create_revision) {
                return Err(StoreError::Unavailable(
                    "etcd: this control plane is no longer the leader; write refused".into(),
                ));
            }
        }
        Ok(TxnResult::Failed(answers))
    }
}

fn absent(key: &str) -> Compare {
    Compare::version(key, CompareOp::Equal, 0)
}

fn present_at(key: &str, revision: u64) -> Vec<Compare> {
    vec![
        Compare::version(key, CompareOp::Greater, 0),
        Compare::mod_revision(key, CompareOp::Equal, revision as i64),
    ]
}

fn found(r: Option<&TxnOpResponse>) -> bool {
    matches!(r, Some(TxnOpResponse::Get(g)) if !g.kvs().is_empty())
}

fn contended(what: &str) -> StoreError {
    StoreError::Unavailable(format!(
        "etcd: {what} kept changing under {CAS_ATTEMPTS} attempts"
    ))
}

impl StateStore for EtcdStore {
    fn connector(&self, name: &str) -> Result<Option<ConnectorRecord>, StoreError> {
        let name = name.to_owned();
        self.run(|i| async move {
            match i.get_one(i.conn_key(&name)).await? {
                Some(kv) => {
                    let mut r: ConnectorRecord = i.decode(&kv)?;
                    r.revision = kv.mod_revision() as u64;
                    Ok(Some(r))
                }
                None => Ok(None),
            }
        })
    }

    fn connectors(&self) -> Result<Vec<ConnectorRecord>, StoreError> {
        self.run(|i| async move {
            let kvs = i.get_prefix(i.key("connectors/")).await?;
            kvs.iter()
                .map(|kv| {
                    let mut r: ConnectorRecord = i.decode(kv)?;
                    r.revision = kv.mod_revision() as u64;
                    Ok(r)
                })
                .collect()
        })
    }

    fn create_connector(&self, rec: &ConnectorRecord) -> Result<CreateOutcome, StoreError> {
        let rec = rec.clone();
        self.run(|i| async move {
            let (ck, dk, fk) = (
                i.conn_key(&rec.name),
                i.del_key(&rec.name),
                i.key(GENERATION_FLOOR_KEY),
            );
            for _ in 0..CAS_ATTEMPTS {
                let (floor, floor_rev) = i.counter(GENERATION_FLOOR_KEY).await?;
                let mut rec = rec.clone();
                rec.next_generation = rec.next_generation.max(floor);
                let bytes = i.encode(&rec)?;
                let result = i
                    .txn(
                        vec![
                            absent(&dk),
                            absent(&ck),
                            Compare::mod_revision(fk.clone(), CompareOp::Equal, floor_rev),
                        ],
                        vec![TxnOp::put(ck.clone(), bytes, None)],
                        vec![TxnOp::get(dk.clone(), None), TxnOp::get(ck.clone(), None)],
                    )
                    .await?;
                match result {
                    TxnResult::Done => return Ok(CreateOutcome::Created),
                    TxnResult::Failed(a) if found(a.first()) => {
                        return Ok(CreateOutcome::StillDeleting);
                    }
                    TxnResult::Failed(a) if found(a.get(1)) => {
                        return Ok(CreateOutcome::AlreadyExists);
                    }
                    TxnResult::Failed(_) => {} // the floor moved; read it again
                }
            }
            Err(contended("the generation floor"))
        })
    }

    fn put_connector(&self, rec: &ConnectorRecord) -> Result<bool, StoreError> {
        let rec = rec.clone();
        self.run(|i| async move {
            let ck = i.conn_key(&rec.name);
            let bytes = i.encode(&rec)?;
            let r = i
                .txn(
                    present_at(&ck, rec.revision),
                    vec![TxnOp::put(ck.clone(), bytes, None)],
                    vec![],
                )
                .await?;
            Ok(matches!(r, TxnResult::Done))
        })
    }

    fn start_deletion(
        &self,
        rec: &ConnectorRecord,
        deletion: &DeletionRecord,
    ) -> Result<bool, StoreError> {
        let (rec, deletion) = (rec.clone(), deletion.clone());
        self.run(|i| async move {
            let (ck, dk) = (i.conn_key(&rec.name), i.del_key(&rec.name));
            let mut marked = rec.clone();
            marked.deleting = true;
            let mut compares = present_at(&ck, rec.revision);
            compares.push(absent(&dk));
            let r = i
                .txn(
                    compares,
                    vec![
                        TxnOp::put(ck.clone(), i.encode(&marked)?, None),
                        TxnOp::put(dk.clone(), i.encode(&deletion)?, None),
                    ],
                    vec![],
                )
                .await?;
            Ok(matches!(r, TxnResult::Done))
        })
    }

    fn deletion(&self, name: &str) -> Result<Option<DeletionRecord>, StoreError> {
        let name = name.to_owned();
        self.run(|i| async move {
            match i.get_one(i.del_key(&name)).await? {
                Some(kv) => {
                    let mut d: DeletionRecord = i.decode(&kv)?;
                    d.revision = kv.mod_revision() as u64;
                    Ok(Some(d))
                }
                None => Ok(None),
            }
        })
    }

    fn deletions(&self) -> Result<Vec<DeletionRecord>, StoreError> {
        self.run(|i| async move {
            let kvs = i.get_prefix(i.key("deletions/")).await?;
            kvs.iter()
                .map(|kv| {
                    let mut d: DeletionRecord = i.decode(kv)?;
                    d.revision = kv.mod_revision() as u64;
                    Ok(d)
                })
                .collect()
        })
    }

    fn put_deletion(&self, d: &DeletionRecord) -> Result<bool, StoreError> {
        let d = d.clone();
        self.run(|i| async move {
            let dk = i.del_key(&d.name);
            let r = i
                .txn(
                    present_at(&dk, d.revision),
                    vec![TxnOp::put(dk.clone(), i.encode(&d)?, None)],
                    vec![],
                )
                .await?;
            Ok(matches!(r, TxnResult::Done))
        })
    }

    fn finish_deletion(&self, name: &str, revision: u64) -> Result<bool, StoreError> {
        let name = name.to_owned();
        self.run(|i| async move {
            let (ck, dk, fk) = (
                i.conn_key(&name),
                i.del_key(&name),
                i.key(GENERATION_FLOOR_KEY),
            );
            for _ in 0..CAS_ATTEMPTS {
                let Some(kv) = i.get_one(dk.clone()).await? else {
                    return Ok(false);
                };
                if kv.mod_revision() as u64 != revision {
                    return Ok(false);
                }
                let d: DeletionRecord = i.decode(&kv)?;
                let (floor, floor_rev) = i.counter(GENERATION_FLOOR_KEY).await?;
                let mut compares = present_at(&dk, revision);
                compares.push(Compare::mod_revision(
                    fk.clone(),
                    CompareOp::Equal,
                    floor_rev,
                ));
                let ops = vec![
                    TxnOp::put(fk.clone(), floor.max(d.next_generation).to_string(), None),
                    TxnOp::delete(dk.clone(), None),
                    TxnOp::delete(ck.clone(), None),
                    TxnOp::delete(
                        i.offsets_prefix(&name),
                        Some(etcd_client::DeleteOptions::new().with_prefix()),
                    ),
                ];
                if let TxnResult::Done = i.txn(compares, ops, vec![]).await? {
                    return Ok(true);
                }
            }
            Err(contended("the generation floor"))
        })
    }

    fn register_executor_with_transforms(
        &self,
        id: &str,
        address: &str,
        plugins: Vec<PluginRecord>,
        transforms: Vec<crate::model::TransformRecord>,
        record_log: &str,
    ) -> Result<ExecutorRecord, StoreError> {
        let (id, address, record_log) = (id.to_owned(), address.to_owned(), record_log.to_owned());
        self.run(|i| async move {
            let ek = i.key(EPOCH_KEY);
            for _ in 0..CAS_ATTEMPTS {
                let (epoch, epoch_rev) = i.counter(EPOCH_KEY).await?;
                let rec = ExecutorRecord {
                    id: id.clone(),
                    address: address.clone(),
                    epoch: epoch + 1,
                    plugins: plugins.clone(),
                    lost: false,
                    record_log: record_log.clone(),
                    transforms: transforms.clone(),
                };
                let ops = vec![
                    TxnOp::put(ek.clone(), (epoch + 1).to_string(), None),
                    TxnOp::put(i.exec_key(&id), i.encode(&rec)?, None),
                ];
                let compares = vec![Compare::mod_revision(
                    ek.clone(),
                    CompareOp::Equal,
                    epoch_rev,
                )];
                if let TxnResult::Done = i.txn(compares, ops, vec![]).await? {
                    return Ok(rec);
                }
            }
            Err(contended("the epoch counter"))
        })
    }

    fn executor(&self, id: &str) -> Result<Option<ExecutorRecord>, StoreError> {
        let id = id.to_owned();
        self.run(|i| async move {
            match i.get_one(i.exec_key(&id)).await? {
                Some(kv) => Ok(Some(i.decode(&kv)?)),
                None => Ok(None),
            }
        })
    }

    fn executors(&self) -> Result<Vec<ExecutorRecord>, StoreError> {
        self.run(|i| async move {
            let kvs = i.get_prefix(i.key("executors/")).await?;
            kvs.iter().map(|kv| i.decode(kv)).collect()
        })
    }

    fn forget_executor(&self, id: &str, epoch: u64) -> Result<bool, StoreError> {
        let id = id.to_owned();
        self.run(|i| async move {
            let xk = i.exec_key(&id);
            let Some(kv) = i.get_one(xk.clone()).await? else {
                return Ok(false);
            };
            let rec: ExecutorRecord = i.decode(&kv)?;
            if rec.epoch != epoch || !rec.lost {
                return Ok(false);
            }
            let r = i
                .txn(
                    present_at(&xk, kv.mod_revision() as u64),
                    vec![TxnOp::delete(xk.clone(), None)],
                    vec![],
                )
                .await?;
            Ok(matches!(r, TxnResult::Done))
        })
    }

    fn mark_executor_lost(&self, id: &str, epoch: u64) -> Result<bool, StoreError> {
        let id = id.to_owned();
        self.run(|i| async move {
            let xk = i.exec_key(&id);
            for _ in 0..CAS_ATTEMPTS {
                let Some(kv) = i.get_one(xk.clone()).await? else {
                    return Ok(false);
                };
                let mut rec: ExecutorRecord = i.decode(&kv)?;
                if rec.epoch != epoch || rec.lost {
                    return Ok(false);
                }
                rec.lost = true;
                let r = i
                    .txn(
                        present_at(&xk, kv.mod_revision() as u64),
                        vec![TxnOp::put(xk.clone(), i.encode(&rec)?, None)],
                        vec![],
                    )
                    .await?;
                if let TxnResult::Done = r {
                    return Ok(true);
                }
            }
            Err(contended("the executor record"))
        })
    }

    fn offsets(&self, connector: &str) -> Result<Vec<(String, String)>, StoreError> {
        let connector = connector.to_owned();
        self.run(|i| async move {
            let prefix = i.offsets_prefix(&connector);
            let kvs = i.get_prefix(prefix.clone()).await?;
            Ok(kvs
                .iter()
                .map(|kv| {
                    let partition = kv
                        .key()
                        .get(prefix.len()..)
                        .map(|p| String::from_utf8_lossy(p).into_owned())
                        .unwrap_or_default();
                    (partition, String::from_utf8_lossy(kv.value()).into_owned())
                })
                .collect())
        })
    }

    fn put_offsets(&self, connector: &str, offsets: &[(String, String)]) -> Result<(), StoreError> {
        // etcd refuses a txn naming one key twice: the last write of a partition wins.
        let last: BTreeMap<String, String> = offsets.iter().cloned().collect();
        let connector = connector.to_owned();
        self.run(|i| async move {
            let prefix = i.offsets_prefix(&connector);
            let ops: Vec<TxnOp> = last
                .into_iter()
                .map(|(partition, offset)| {
                    let key = format!("{prefix}{partition}");
                    if offset.is_empty() {
                        TxnOp::delete(key, None)
                    } else {
                        TxnOp::put(key, offset, None::<PutOptions>)
                    }
                })
                .collect();
            for chunk in ops.chunks(MAX_TXN_OPS) {
                i.txn(vec![], chunk.to_vec(), vec![]).await?;
            }
            Ok(())
        })
    }

    fn reset_offsets(&self, connector: &str) -> Result<(), StoreError> {
        let connector = connector.to_owned();
        self.run(|i| async move {
            let op = TxnOp::delete(
                i.offsets_prefix(&connector),
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            );
            i.txn(vec![], vec![op], vec![]).await?;
            Ok(())
        })
    }

    fn append_audit(
        &self,
        entry: &AuditEntry,
        retention: &AuditRetention,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let entry = entry.clone();
        let retention = *retention;
        self.run(move |i| async move {
            let value = i.encode(&entry)?;
            let base = i.key(AUDIT_PREFIX);
            // Put and the age cut in one (fenced) txn.
            let ops = vec![
                TxnOp::put(format!("{base}{}", entry.id), value, None::<PutOptions>),
                TxnOp::delete(
                    base.clone(),
                    Some(
                        etcd_client::DeleteOptions::new()
                            .with_range(format!("{base}{}", retention.cutoff_id(now_ms))),
                    ),
                ),
            ];
            i.txn(vec![], ops, vec![]).await?;
            // The count cut: remove the oldest beyond the bound.
            let count = i
                .kv()
                .get(
                    base.clone(),
                    Some(GetOptions::new().with_prefix().with_count_only()),
                )
                .await
                .map_err(unavailable)?
                .count();
            let excess = u64::try_from(count)
                .unwrap_or(0)
                .saturating_sub(retention.max_entries);
            if excess > 0 {
                let oldest = i
                    .kv()
                    .get(
                        base.clone(),
                        Some(
                            GetOptions::new()
                                .with_prefix()
                                .with_keys_only()
                                .with_limit(i64::try_from(excess).unwrap_or(i64::MAX)),
                        ),
                    )
                    .await
                    .map_err(unavailable)?;
                if let Some(last) = oldest.kvs().last() {
                    let mut end = last.key().to_vec();
                    end.push(0);
                    let op = TxnOp::delete(
                        base.clone(),
                        Some(etcd_client::DeleteOptions::new().with_range(end)),
                    );
                    i.txn(vec![], vec![op], vec![]).await?;
                }
            }
            Ok(())
        })
    }

    fn audit_entries(&self, query: &AuditQuery) -> Result<AuditPage, StoreError> {
        let query = query.clone();
        self.run(move |i| async move {
            let base = i.key(AUDIT_PREFIX);
            let (start, end) = query.range();
            let mut page = AuditPage::default();
            if start >= end {
                return Ok(page);
            }
            let mut from = format!("{base}{start}").into_bytes();
            let to = format!("{base}{end}");
            loop {
                let resp = i
                    .kv()
                    .get(
                        from.clone(),
                        Some(
                            GetOptions::new()
                                .with_range(to.clone())
                                .with_limit(AUDIT_SCAN_CHUNK),
                        ),
                    )
                    .await
                    .map_err(unavailable)?;
                let kvs = resp.kvs();
                for kv in kvs {
                    let e: AuditEntry = i.decode(kv)?;
                    if !query.matches(&e) {
                        continue;
                    }
                    if page.entries.len() == query.limit {
                        page.next_after = page.entries.last().map(|e| e.id.clone());
                        return Ok(page);
                    }
                    page.entries.push(e);
                }
                match kvs.last() {
                    Some(last) if resp.more() => {
                        from = last.key().to_vec();
                        from.push(0);
                    }
                    _ => return Ok(page),
                }
            }
        })
    }

    fn orphans(&self) -> Result<Vec<OrphanRecord>, StoreError> {
        self.run(|i| async move {
            let kvs = i.get_prefix(i.key(ORPHANS_PREFIX)).await?;
            let mut out = kvs
                .iter()
                .map(|kv| i.decode::<OrphanRecord>(kv))
                .collect::<Result<Vec<_>, _>>()?;
            out.sort_by(|a, b| (a.orphaned_at_ms, &a.id).cmp(&(b.orphaned_at_ms, &b.id)));
            Ok(out)
        })
    }

    fn put_orphans(&self, orphans: &[OrphanRecord]) -> Result<(), StoreError> {
        let orphans = orphans.to_vec();
        self.run(|i| async move {
            let mut ops = Vec::with_capacity(orphans.len());
            for o in &orphans {
                let key = i.key(&format!("{ORPHANS_PREFIX}{}", o.id));
                ops.push(TxnOp::put(key, i.encode(o)?, None::<PutOptions>));
            }
            for chunk in ops.chunks(MAX_TXN_OPS) {
                i.txn(vec![], chunk.to_vec(), vec![]).await?;
            }
            Ok(())
        })
    }

    fn remove_orphans(&self, ids: &[String]) -> Result<(), StoreError> {
        let ids: std::collections::BTreeSet<String> = ids.iter().cloned().collect();
        self.run(|i| async move {
            let ops: Vec<TxnOp> = ids
                .iter()
                .map(|id| TxnOp::delete(i.key(&format!("{ORPHANS_PREFIX}{id}")), None))
                .collect();
            for chunk in ops.chunks(MAX_TXN_OPS) {
                i.txn(vec![], chunk.to_vec(), vec![]).await?;
            }
            Ok(())
        })
    }

    fn reserve_generation(&self) -> Result<u64, StoreError> {
        self.run(|i| async move {
            let fk = i.key(GENERATION_FLOOR_KEY);
            for _ in 0..CAS_ATTEMPTS {
                let (floor, floor_rev) = i.counter(GENERATION_FLOOR_KEY).await?;
                let g = floor.max(1);
                let compares = vec![Compare::mod_revision(
                    fk.clone(),
                    CompareOp::Equal,
                    floor_rev,
                )];
                let ops = vec![TxnOp::put(fk.clone(), (g + 1).to_string(), None)];
                if let TxnResult::Done = i.txn(compares, ops, vec![]).await? {
                    return Ok(g);
                }
            }
            Err(contended("the generation floor"))
        })
    }
}
