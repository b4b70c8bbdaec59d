//! The resource ledger as a plugin sees it: every external resource a connector
//! instance or task provisions (a table, a trigger, a queue, a replication slot, a
//! file...) is declared through its context, **before** it is created, and confirmed
//! after; a deletion-aware stop releases what it removed. The runtime keeps the ledger
//! durably beside the connector (docs/resources.md), refuses a second connector's claim
//! on a resource another live connector holds, and finishes a deletion as cleaned only
//! when every created entry was released or found absent.
//!
//! A plugin uses [`Resources`] (from [`ConnectorContext::resources`](crate::ConnectorContext::resources)
//! or [`TaskContext::resources`](crate::TaskContext)):
//!
//! ```ignore
//! let table = Resource::created(ResourceKind::Table, "wharf_audit_orders",
//!     Locator::default().host("db:5432").database("app"));
//! ctx.resources().intend(&table).await?;   // durable before the table exists
//! create_table(...).await?;
//! ctx.resources().confirm(&table).await?;
//! // in stop_with(true), once it is dropped:
//! ctx.resources().release(&table).await?;
//! ```
//!
//! The ledger itself is behind the [`ResourceLedger`] trait: the executor implements it
//! by calling the control plane; [`MemoryLedger`] keeps entries in memory (for unit tests
//! and the conformance kit).

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::PluginResult;

mod canonical;

/// What kind of external resource an entry is. The named kinds are the ones Wharf's
/// metrics and docs group by; anything else is [`ResourceKind::Other`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "String", from = "String")]
pub enum ResourceKind {
    /// A database table.
    Table,
    /// A row-level trigger.
    Trigger,
    /// A database function (a trigger function).
    Function,
    /// A message queue.
    Queue,
    /// A message exchange.
    Exchange,
    /// A binding between an exchange and a queue.
    Binding,
    /// A PostgreSQL logical replication slot.
    ReplicationSlot,
    /// A PostgreSQL publication.
    Publication,
    /// A Kafka (or record-log) topic.
    Topic,
    /// A Kafka consumer group.
    ConsumerGroup,
    /// A file.
    File,
    /// An account or role.
    Account,
    /// Any other kind, by its lowercase name (`[a-z0-9_]`, at most 64 bytes).
    Other(String),
}

impl ResourceKind {
    /// The kind's name on the wire, in the store and in metrics: `table`, `trigger`,
    /// `function`, `queue`, `exchange`, `binding`, `replication_slot`, `publication`,
    /// `topic`, `consumer_group`, `file`, `account`, or the name of an
    /// [`ResourceKind::Other`].
    pub fn as_str(&self) -> &str {
        match self {
            ResourceKind::Table => "table",
            ResourceKind::Trigger => "trigger",
            ResourceKind::Function => "function",
            ResourceKind::Queue => "queue",
            ResourceKind::Exchange => "exchange",
            ResourceKind::Binding => "binding",
            ResourceKind::ReplicationSlot => "replication_slot",
            ResourceKind::Publication => "publication",
            ResourceKind::Topic => "topic",
            ResourceKind::ConsumerGroup => "consumer_group",
            ResourceKind::File => "file",
            ResourceKind::Account => "account",
            ResourceKind::Other(name) => name,
        }
    }

    /// The kind named `name` (the inverse of [`ResourceKind::as_str`]): a named kind, or
    /// `Other` for a name that is none of them.
    pub fn parse(name: &str) -> Self {
        match name {
            "table" => ResourceKind::Table,
            "trigger" => ResourceKind::Trigger,
            "function" => ResourceKind::Function,
            "queue" => ResourceKind::Queue,
            "exchange" => ResourceKind::Exchange,
            "binding" => ResourceKind::Binding,
            "replication_slot" => ResourceKind::ReplicationSlot,
            "publication" => ResourceKind::Publication,
            "topic" => ResourceKind::Topic,
            "consumer_group" => ResourceKind::ConsumerGroup,
            "file" => ResourceKind::File,
            "account" => ResourceKind::Account,
            other => ResourceKind::Other(other.to_owned()),
        }
    }
}

impl From<String> for ResourceKind {
    fn from(name: String) -> Self {
        ResourceKind::parse(&name)
    }
}

impl From<ResourceKind> for String {
    fn from(kind: ResourceKind) -> Self {
        kind.as_str().to_owned()
    }
}

impl std::fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a resource lives, redacted: the parts that tell two resources of the same name
/// apart, and never a secret (no user, password, token or query string). Empty parts
/// do not apply.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct Locator {
    /// `host:port` (or a host alone) of the external system.
    pub host: String,
    /// Database (or schema-qualified database) name.
    pub database: String,
    /// RabbitMQ virtual host.
    pub vhost: String,
    /// Filesystem path (of a file, or of an SQLite database).
    pub path: String,
}

impl Locator {
    /// Sets the host (`host:port`).
    #[must_use]
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.host = host.into();
        self
    }

    /// Sets the database.
    #[must_use]
    pub fn database(mut self, database: impl Into<String>) -> Self {
        self.database = database.into();
        self
    }

    /// Sets the virtual host.
    #[must_use]
    pub fn vhost(mut self, vhost: impl Into<String>) -> Self {
        self.vhost = vhost.into();
        self
    }

    /// Sets the path.
    #[must_use]
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }
}

impl Locator {
    /// This locator of a resource of `kind` in canonical form: loopback names and
    /// addresses as `127.0.0.1`, host names in lowercase without a trailing dot, the
    /// kind's default port when none is named, a path without repeated slashes or `.`
    /// segments (the rules are in `resources/canonical.rs`; no DNS look-up).
    #[must_use]
    pub fn canonical(&self, kind: &ResourceKind) -> Locator {
        canonical::canonical(self, kind)
    }
}

impl std::fmt::Display for Locator {
    /// `host=H database=D vhost=V path=P`, the parts that are set, or `-` when none is.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = [
            ("host", &self.host),
            ("database", &self.database),
            ("vhost", &self.vhost),
            ("path", &self.path),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
        if parts.is_empty() {
            f.write_str("-")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}

/// Whether this connector incarnation made a resource or found it there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Origin {
    /// This incarnation creates it; a deletion removes it.
    Created,
    /// It existed before (the user's, or another system's); a deletion never removes it.
    Adopted,
}

impl Origin {
    /// `created` or `adopted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Created => "created",
            Origin::Adopted => "adopted",
        }
    }
}

/// One external resource as a plugin declares it. Two declarations are the same
/// resource when their kind, name and locator are equal ([`Resource::same_as`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Resource {
    /// Kind.
    pub kind: ResourceKind,
    /// Its name in the external system (`wharf_audit_orders`, `nc.shared.q`).
    pub name: String,
    /// Where it lives.
    pub locator: Locator,
    /// Created by this incarnation, or adopted.
    pub origin: Origin,
}

impl Resource {
    /// A resource this incarnation creates.
    pub fn created(kind: ResourceKind, name: impl Into<String>, locator: Locator) -> Self {
        Self {
            kind,
            name: name.into(),
            locator,
            origin: Origin::Created,
        }
    }

    /// A resource that existed before and is only used.
    pub fn adopted(kind: ResourceKind, name: impl Into<String>, locator: Locator) -> Self {
        Self {
            kind,
            name: name.into(),
            locator,
            origin: Origin::Adopted,
        }
    }

    /// The same resource with `origin`.
    #[must_use]
    pub fn with_origin(mut self, origin: Origin) -> Self {
        self.origin = origin;
        self
    }

    /// True when both name the same resource (kind, name and locator; the origin aside).
    /// Locators are compared in their canonical form ([`Locator::canonical`]), so
    /// `localhost:5672` and `127.0.0.1:5672` are one place.
    pub fn same_as(&self, other: &Resource) -> bool {
        self.kind == other.kind
            && self.name == other.name
            && (self.locator == other.locator
                || self.locator.canonical(&self.kind) == other.locator.canonical(&other.kind))
    }
}

impl std::fmt::Display for Resource {
    /// `queue nc.shared.q (host=127.0.0.1:5672 vhost=/)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} ({})", self.kind, self.name, self.locator)
    }
}

/// Which instance of a connector owns an entry: the one whose `stop_with(true)` removes
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ResourceOwner {
    /// The connector instance (what the tasks share).
    Connector,
    /// Task `i`.
    Task(u32),
}

impl std::fmt::Display for ResourceOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResourceOwner::Connector => f.write_str("connector"),
            ResourceOwner::Task(i) => write!(f, "task {i}"),
        }
    }
}

/// A change a plugin records in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LedgerChange {
    /// About to create (or adopt) it: recorded before the resource exists, so that a
    /// crash between the two leaves an entry to check, never an unknown resource.
    Intent,
    /// It exists now.
    Confirm,
    /// A deletion-aware stop removed it.
    Release,
    /// The plugin checked: it does not exist where the entry says (a cleanup that runs
    /// again after the resource was already removed).
    Absent,
}

impl LedgerChange {
    /// `intent`, `confirm`, `release`, `absent`.
    pub fn as_str(self) -> &'static str {
        match self {
            LedgerChange::Intent => "intent",
            LedgerChange::Confirm => "confirm",
            LedgerChange::Release => "release",
            LedgerChange::Absent => "absent",
        }
    }
}

/// Where an entry stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EntryState {
    /// Declared, not yet confirmed (the resource may or may not exist).
    Intended,
    /// Exists.
    Confirmed,
    /// Removed by a deletion-aware stop.
    Released,
    /// Found not to exist.
    Absent,
}

impl EntryState {
    /// The state after `change`: the last change wins, except that an intent does not
    /// take back a confirmation (a restart declares again what exists). Pure.
    pub fn after(self, change: LedgerChange) -> EntryState {
        match (self, change) {
            (EntryState::Confirmed, LedgerChange::Intent) => EntryState::Confirmed,
            (
                EntryState::Intended | EntryState::Released | EntryState::Absent,
                LedgerChange::Intent,
            ) => EntryState::Intended,
            (_, LedgerChange::Confirm) => EntryState::Confirmed,
            (_, LedgerChange::Release) => EntryState::Released,
            (_, LedgerChange::Absent) => EntryState::Absent,
        }
    }

    /// The state a new entry gets from its first change.
    pub fn first(change: LedgerChange) -> EntryState {
        EntryState::Intended.after(change)
    }

    /// True when nothing is left of it outside (released or found absent).
    pub fn accounted(self) -> bool {
        match self {
            EntryState::Released | EntryState::Absent => true,
            EntryState::Intended | EntryState::Confirmed => false,
        }
    }

    /// `intended`, `confirmed`, `released`, `absent`.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryState::Intended => "intended",
            EntryState::Confirmed => "confirmed",
            EntryState::Released => "released",
            EntryState::Absent => "absent",
        }
    }
}

/// One entry of a connector's ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    /// The instance that owns it.
    pub owner: ResourceOwner,
    /// The resource.
    pub resource: Resource,
    /// Where it stands.
    pub state: EntryState,
}

/// Where a plugin's ledger changes go. The executor's implementation sends each change
/// to the control plane and returns only once it is stored; [`MemoryLedger`] keeps them
/// in memory.
#[async_trait]
pub trait ResourceLedger: Send + Sync {
    /// Records `change` of `resource`, owned by `owner`; returns once the change is
    /// durable.
    ///
    /// # Errors
    /// The change was not stored: the control plane refused it (another live connector
    /// holds the resource: the text names it; the instance was fenced) or could not be
    /// reached. A plugin MUST NOT create the resource after a failed
    /// [`LedgerChange::Intent`]; it returns the error from its call.
    async fn record(
        &self,
        owner: ResourceOwner,
        resource: &Resource,
        change: LedgerChange,
    ) -> PluginResult<()>;
}

/// An instance's handle on its connector's ledger (from its context): every change is
/// recorded as owned by this instance.
#[derive(Clone)]
pub struct Resources {
    ledger: Arc<dyn ResourceLedger>,
    owner: ResourceOwner,
}

impl Resources {
    /// A handle recording into `ledger` as `owner`.
    pub fn new(ledger: Arc<dyn ResourceLedger>, owner: ResourceOwner) -> Self {
        Self { ledger, owner }
    }

    /// A handle on a fresh [`MemoryLedger`] that nobody reads (what a context built
    /// without a ledger gets, in a plugin's own unit tests).
    pub fn detached(owner: ResourceOwner) -> Self {
        Self::new(Arc::new(MemoryLedger::default()), owner)
    }

    /// The instance changes are recorded for.
    pub fn owner(&self) -> ResourceOwner {
        self.owner
    }

    /// Records the intent to create (or adopt) `resource`, before it is made.
    ///
    /// # Errors
    /// See [`ResourceLedger::record`]: then the resource MUST NOT be created.
    pub async fn intend(&self, resource: &Resource) -> PluginResult<()> {
        self.ledger
            .record(self.owner, resource, LedgerChange::Intent)
            .await
    }

    /// Records that `resource` exists now.
    ///
    /// # Errors
    /// See [`ResourceLedger::record`].
    pub async fn confirm(&self, resource: &Resource) -> PluginResult<()> {
        self.ledger
            .record(self.owner, resource, LedgerChange::Confirm)
            .await
    }

    /// Records that a deletion-aware stop removed `resource`.
    ///
    /// # Errors
    /// See [`ResourceLedger::record`].
    pub async fn release(&self, resource: &Resource) -> PluginResult<()> {
        self.ledger
            .record(self.owner, resource, LedgerChange::Release)
            .await
    }

    /// Records that `resource` was checked and does not exist where the entry says.
    ///
    /// # Errors
    /// See [`ResourceLedger::record`].
    pub async fn absent(&self, resource: &Resource) -> PluginResult<()> {
        self.ledger
            .record(self.owner, resource, LedgerChange::Absent)
            .await
    }
}

impl std::fmt::Debug for Resources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resources")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

/// A ledger in memory: entries by owner and resource, in the order first recorded.
/// Also records every change in order ([`MemoryLedger::changes`]) so that a test can
/// check that an intent came before a confirmation.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    inner: Mutex<MemoryInner>,
}

#[derive(Debug, Default)]
struct MemoryInner {
    entries: Vec<LedgerEntry>,
    changes: Vec<(ResourceOwner, Resource, LedgerChange)>,
}

impl MemoryLedger {
    /// A snapshot of the entries.
    pub fn entries(&self) -> Vec<LedgerEntry> {
        self.lock().entries.clone()
    }

    /// Every change recorded so far, in order.
    pub fn changes(&self) -> Vec<(ResourceOwner, Resource, LedgerChange)> {
        self.lock().changes.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl ResourceLedger for MemoryLedger {
    async fn record(
        &self,
        owner: ResourceOwner,
        resource: &Resource,
        change: LedgerChange,
    ) -> PluginResult<()> {
        let mut inner = self.lock();
        inner.changes.push((owner, resource.clone(), change));
        match inner
            .entries
            .iter_mut()
            .find(|e| e.owner == owner && e.resource.same_as(resource))
        {
            Some(e) => {
                e.state = e.state.after(change);
                if change == LedgerChange::Intent {
                    e.resource.origin = resource.origin;
                }
            }
            None => inner.entries.push(LedgerEntry {
                owner,
                resource: resource.clone(),
                state: EntryState::first(change),
            }),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> Resource {
        Resource::created(
            ResourceKind::Queue,
            "q",
            Locator::default().host("h:5672").vhost("/"),
        )
    }

    #[test]
    fn every_named_kind_parses_back_from_its_name() {
        for k in [
            ResourceKind::Table,
            ResourceKind::Trigger,
            ResourceKind::Function,
            ResourceKind::Queue,
            ResourceKind::Exchange,
            ResourceKind::Binding,
            ResourceKind::ReplicationSlot,
            ResourceKind::Publication,
            ResourceKind::Topic,
            ResourceKind::ConsumerGroup,
            ResourceKind::File,
            ResourceKind::Account,
        ] {
            assert_eq!(ResourceKind::parse(k.as_str()), k);
        }
        assert_eq!(
            ResourceKind::parse("bucket"),
            ResourceKind::Other("bucket".into())
        );
    }

    #[test]
    fn a_locator_shows_only_the_parts_that_are_set() {
        assert_eq!(queue().locator.to_string(), "host=h:5672 vhost=/");
        assert_eq!(Locator::default().to_string(), "-");
    }

    #[test]
    fn an_intent_does_not_take_back_a_confirmation() {
        assert_eq!(
            EntryState::Confirmed.after(LedgerChange::Intent),
            EntryState::Confirmed
        );
        assert_eq!(
            EntryState::Released.after(LedgerChange::Intent),
            EntryState::Intended
        );
    }

    #[test]
    fn release_and_absent_account_for_an_entry_and_nothing_else_does() {
        assert!(EntryState::Released.accounted());
        assert!(EntryState::Absent.accounted());
        assert!(!EntryState::Intended.accounted());
        assert!(!EntryState::Confirmed.accounted());
    }

    #[test]
    fn the_same_resource_is_kind_name_and_locator_whatever_its_origin() {
        let q = queue();
        assert!(q.same_as(&q.clone().with_origin(Origin::Adopted)));
        assert!(!q.same_as(&Resource {
            locator: Locator::default().host("other:5672").vhost("/"),
            ..q.clone()
        }));
    }

    #[test]
    fn two_spellings_of_one_broker_are_one_resource() {
        let local = Resource::created(
            ResourceKind::Queue,
            "q",
            Locator::default().host("LOCALHOST.").vhost("/"),
        );
        assert!(queue().same_as(&queue()));
        let mut loopback = queue();
        loopback.locator.host = "127.0.0.1:5672".into();
        assert!(local.same_as(&loopback));
        assert!(!local.same_as(&queue()), "h:5672 is another host");
    }

    #[tokio::test]
    async fn a_memory_ledger_keeps_one_entry_per_owner_and_resource() {
        let ledger = Arc::new(MemoryLedger::default());
        let r = Resources::new(ledger.clone(), ResourceOwner::Connector);
        r.intend(&queue()).await.unwrap();
        r.confirm(&queue()).await.unwrap();
        r.intend(&queue()).await.unwrap();
        let entries = ledger.entries();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].state, EntryState::Confirmed);
        r.release(&queue()).await.unwrap();
        assert_eq!(ledger.entries()[0].state, EntryState::Released);
        assert_eq!(ledger.changes().len(), 4);
    }
}
