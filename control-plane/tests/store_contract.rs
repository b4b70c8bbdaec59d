//! The StateStore contract, one body run against both backends: the embedded redb file
//! and etcd (a test-owned `etcd` process). Run with
//! `cargo test -p wharf-control-plane --test store_contract`.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use wharf::ids::ConnectorName;
use wharf_control_plane::model::{
    AuditEntry, AuditQuery, AuditRetention, ConnectorRecord, ConnectorSpec, DeletionRecord,
    TargetState,
};
use wharf_control_plane::store::seal::Sealer;
use wharf_control_plane::store::{
    CreateOutcome, EtcdOptions, EtcdStore, Fence, RedbStore, StateStore, StoreError, WriteFence,
};
use wharf_harness::etcd::TestEtcd;

const SECRET: &str = "s3cr3t-pa55";
/// How long the test waits for a fresh etcd to answer, in milliseconds.
const CONNECT_DEADLINE_MS: u64 = 20_000;

fn rec(name: &str) -> ConnectorRecord {
    let mut config = wharf::sdk::ConfigMap::new();
    config.insert("connection.password".into(), SECRET.into());
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

/// The shared body: what the herder, the finalizer and the services rely on.
fn contract(s: &dyn StateStore) {
    // Create: once; a taken name is AlreadyExists.
    assert_eq!(
        s.create_connector(&rec("b")).unwrap(),
        CreateOutcome::Created
    );
    assert_eq!(
        s.create_connector(&rec("a")).unwrap(),
        CreateOutcome::Created
    );
    assert_eq!(
        s.create_connector(&rec("a")).unwrap(),
        CreateOutcome::AlreadyExists
    );
    let names: Vec<_> = s
        .connectors()
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["a", "b"], "sorted by name");
    let a = s.connector("a").unwrap().unwrap();
    assert_eq!(a.config["connection.password"], SECRET);
    assert!(s.connector("zz").unwrap().is_none());

    // Conditional replace on the revision read.
    let mut a2 = a.clone();
    a2.tasks_max = 3;
    assert!(s.put_connector(&a2).unwrap());
    assert!(
        !s.put_connector(&a2).unwrap(),
        "stale revision must not overwrite"
    );
    let a3 = s.connector("a").unwrap().unwrap();
    assert_eq!(a3.tasks_max, 3);
    assert_ne!(a3.revision, a.revision);
    let mut ghost = rec("ghost");
    ghost.revision = a3.revision;
    assert!(
        !s.put_connector(&ghost).unwrap(),
        "no write to an absent connector"
    );
    assert!(s.connector("ghost").unwrap().is_none());

    // Offsets: per connector, an empty offset removes a partition.
    s.put_offsets(
        "a",
        &[
            ("{\"p\":1}".into(), "{\"o\":1}".into()),
            ("{\"p\":2}".into(), "{\"o\":2}".into()),
        ],
    )
    .unwrap();
    s.put_offsets("a", &[("{\"p\":2}".into(), String::new())])
        .unwrap();
    s.put_offsets("ab", &[("{\"p\":1}".into(), "{\"o\":3}".into())])
        .unwrap();
    assert_eq!(
        s.offsets("a").unwrap(),
        vec![("{\"p\":1}".to_owned(), "{\"o\":1}".to_owned())]
    );
    s.put_offsets("b", &[("{\"p\":1}".into(), "{\"o\":9}".into())])
        .unwrap();
    s.reset_offsets("b").unwrap();
    assert!(s.offsets("b").unwrap().is_empty());

    // Deletion: only on the connector's current revision, only once.
    let a = s.connector("a").unwrap().unwrap();
    let d = DeletionRecord::seal(
        &a,
        s.offsets("a").unwrap(),
        wharf_control_plane::model::DeletionMode::Cleanup,
        0,
    );
    let mut stale = a.clone();
    stale.revision = a.revision + 1000;
    assert!(!s.start_deletion(&stale, &d).unwrap());
    assert!(s.start_deletion(&a, &d).unwrap());
    assert!(
        !s.start_deletion(&a, &d).unwrap(),
        "second deletion refused"
    );
    assert!(s.connector("a").unwrap().unwrap().deleting);
    assert_eq!(
        s.create_connector(&rec("a")).unwrap(),
        CreateOutcome::StillDeleting
    );
    let d = s.deletion("a").unwrap().unwrap();
    assert_eq!(s.deletions().unwrap().len(), 1);
    let mut d2 = d.clone();
    d2.requested_at_ms += 1;
    assert!(s.put_deletion(&d2).unwrap());
    assert!(!s.put_deletion(&d2).unwrap(), "stale deletion revision");
    let d = s.deletion("a").unwrap().unwrap();
    assert_eq!(d.requested_at_ms, d2.requested_at_ms);
    assert!(!s.finish_deletion("a", d.revision + 1000).unwrap());
    assert!(
        s.connector("a").unwrap().is_some(),
        "nothing removed on a conflict"
    );
    let used = d.next_generation;
    assert!(s.finish_deletion("a", d.revision).unwrap());
    assert!(s.connector("a").unwrap().is_none());
    assert!(s.deletion("a").unwrap().is_none());
    assert!(s.offsets("a").unwrap().is_empty());
    assert_eq!(
        s.offsets("ab").unwrap().len(),
        1,
        "another connector's offsets stay"
    );
    assert!(!s.finish_deletion("a", d.revision).unwrap());
    // A re-created name starts above every generation the old one handed out.
    assert_eq!(
        s.create_connector(&rec("a")).unwrap(),
        CreateOutcome::Created
    );
    assert!(s.connector("a").unwrap().unwrap().next_generation >= used);

    // Executors: epochs grow across executors; lost only at the current epoch.
    let x1 = s
        .register_executor("x", "http://127.0.0.2:1", vec![])
        .unwrap();
    let y1 = s
        .register_executor("y", "http://127.0.0.3:1", vec![])
        .unwrap();
    let x2 = s
        .register_executor("x", "http://127.0.0.2:1", vec![])
        .unwrap();
    assert!(y1.epoch > x1.epoch && x2.epoch > y1.epoch);
    assert!(!s.mark_executor_lost("x", x1.epoch).unwrap());
    assert!(s.mark_executor_lost("x", x2.epoch).unwrap());
    assert!(!s.mark_executor_lost("x", x2.epoch).unwrap());
    assert!(s.executor("x").unwrap().unwrap().lost);
    let ids: Vec<_> = s.executors().unwrap().into_iter().map(|e| e.id).collect();
    assert_eq!(ids, ["x", "y"]);

    // The record log a registration names is kept with the executor, and replaced by
    // the next registration (none named: empty).
    let log = "nats://a:4222?prefix=wharf";
    let y2 = s
        .register_executor_with_log("y", "http://127.0.0.3:1", vec![], log)
        .unwrap();
    assert_eq!(y2.record_log, log);
    assert_eq!(s.executor("y").unwrap().unwrap().record_log, log);
    assert_eq!(s.executor("x").unwrap().unwrap().record_log, "");
}

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;

fn entry(time_ms: i64, nonce: u64, connector: &str) -> AuditEntry {
    AuditEntry {
        id: AuditEntry::id_for(time_ms, nonce),
        time_ms,
        principal: "alice".into(),
        role: "operator".into(),
        auth_method: "token".into(),
        rpc: "DeleteConnector".into(),
        connector: connector.into(),
        deletion_mode: "cleanup".into(),
        outcome: "OK".into(),
        message: String::new(),
        forwarded_by: String::new(),
    }
}

fn ids(s: &dyn StateStore, q: &AuditQuery) -> (Vec<String>, Option<String>) {
    let page = s.audit_entries(q).unwrap();
    (
        page.entries.into_iter().map(|e| e.id).collect(),
        page.next_after,
    )
}

/// The audit trail: time order, connector and time filters, paging, retention by age
/// and by count.
fn audit_contract(s: &dyn StateStore) {
    let now = 100 * DAY_MS;
    let keep = AuditRetention {
        max_entries: 5,
        max_age_days: 10,
    };
    // Appended out of order; read back in time order.
    for (t, n, c) in [
        (now - 3, 0, "a"),
        (now - 5, 0, "b"),
        (now - 4, 7, "a"),
        (now - 4, 2, "a"),
    ] {
        s.append_audit(&entry(t, n, c), &keep, now).unwrap();
    }
    let all = AuditQuery {
        limit: 100,
        ..Default::default()
    };
    let want: Vec<String> = [(now - 5, 0), (now - 4, 2), (now - 4, 7), (now - 3, 0)]
        .iter()
        .map(|(t, n)| AuditEntry::id_for(*t, *n))
        .collect();
    assert_eq!(ids(s, &all), (want.clone(), None));
    let got = s.audit_entries(&all).unwrap();
    assert_eq!(got.entries[0], entry(now - 5, 0, "b"), "round trip");
    // Filters.
    let only_a = AuditQuery {
        connector: Some("a".into()),
        ..all.clone()
    };
    assert_eq!(ids(s, &only_a).0, want[1..].to_vec());
    let window = AuditQuery {
        since_ms: now - 4,
        until_ms: Some(now - 3),
        ..all.clone()
    };
    assert_eq!(ids(s, &window).0, want[1..3].to_vec());
    // Paging: two, then the rest, with the connector filter applied across pages.
    let page1 = AuditQuery {
        limit: 2,
        ..only_a.clone()
    };
    let (first, next) = ids(s, &page1);
    assert_eq!(first, want[1..3].to_vec());
    assert_eq!(next.as_deref(), Some(want[2].as_str()));
    let page2 = AuditQuery {
        after: next,
        ..page1.clone()
    };
    assert_eq!(ids(s, &page2), (want[3..].to_vec(), None));
    // Age: an entry appended eleven days later removes every older one.
    let later = now + 11 * DAY_MS;
    s.append_audit(&entry(later - 1, 0, "c"), &keep, later)
        .unwrap();
    assert_eq!(ids(s, &all).0, vec![AuditEntry::id_for(later - 1, 0)]);
    // Count: beyond max_entries the oldest go.
    for n in 1..=6 {
        s.append_audit(&entry(later, n, "c"), &keep, later).unwrap();
    }
    let (left, _) = ids(s, &all);
    let want: Vec<String> = (2..=6).map(|n| AuditEntry::id_for(later, n)).collect();
    assert_eq!(left, want);
}

/// The ledger and the orphans: a ledger is kept in its connector's record (and so
/// survives a reopen or another replica), orphans are kept apart, replaced by id and
/// removed by id.
fn ledger_contract(s: &dyn StateStore) {
    use wharf_control_plane::model::resources::{
        EntryState, LedgerEntry, Locator, OrphanCleanup, OrphanReason, OrphanRecord, Resource,
        ResourceKind, ResourceOwner,
    };
    let entry = LedgerEntry {
        resource: Resource::created(
            ResourceKind::Queue,
            "nc.shared.q",
            Locator::default().host("127.0.0.1:5672").vhost("/"),
        ),
        owner: ResourceOwner::Task(1),
        state: EntryState::Intended,
        incarnation: "i1".into(),
        updated_at_ms: 5,
    };
    let mut r = rec("ledgered");
    r.resources = vec![entry.clone()];
    r.declared = vec![entry.resource.clone()];
    assert_eq!(s.create_connector(&r).unwrap(), CreateOutcome::Created);
    let back = s.connector("ledgered").unwrap().unwrap();
    assert_eq!(back.resources, vec![entry.clone()]);
    assert_eq!(back.declared, vec![entry.resource.clone()]);

    assert!(s.orphans().unwrap().is_empty());
    let orphan = |id: &str, at: i64| OrphanRecord {
        id: id.into(),
        connector: "gone".into(),
        entry: entry.clone(),
        reason: OrphanReason::Force,
        orphaned_at_ms: at,
        // The purge's context holds the connector's config, secrets included: sealed.
        cleanup: Some(OrphanCleanup {
            plugin: "p".into(),
            config: [("connection.password".to_owned(), SECRET.to_owned())]
                .into_iter()
                .collect(),
            task_config: Default::default(),
            cleanup_timeout_ms: 1000,
        }),
        purge_error: String::new(),
    };
    s.put_orphans(&[orphan("i1-1", 20), orphan("i1-0", 10)])
        .unwrap();
    s.put_orphans(&[orphan("i1-0", 10)]).unwrap();
    let ids: Vec<String> = s.orphans().unwrap().into_iter().map(|o| o.id).collect();
    assert_eq!(ids, ["i1-0", "i1-1"], "oldest first, one per id");
    s.remove_orphans(&["i1-0".into(), "not-there".into()])
        .unwrap();
    let left = s.orphans().unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0], orphan("i1-1", 20));

    // A purge's generation is above every one handed out, and below every later
    // connector's.
    let g1 = s.reserve_generation().unwrap();
    let g2 = s.reserve_generation().unwrap();
    assert!(g2 > g1, "{g1} {g2}");
    assert_eq!(
        s.create_connector(&rec("after-purge")).unwrap(),
        CreateOutcome::Created
    );
    assert!(s.connector("after-purge").unwrap().unwrap().next_generation > g2);
}

fn etcd_store(etcd: &TestEtcd, prefix: &str, dir: &std::path::Path) -> EtcdStore {
    let deadline = Instant::now() + Duration::from_millis(CONNECT_DEADLINE_MS);
    loop {
        let opts = EtcdOptions {
            endpoints: vec![etcd.endpoint.clone()],
            prefix: prefix.into(),
            ..Default::default()
        };
        match EtcdStore::connect(&opts, Sealer::load_or_create(dir).unwrap()) {
            Ok(s) => return s,
            Err(e) if Instant::now() < deadline => {
                eprintln!("etcd not ready yet: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("etcd store: {e}"),
        }
    }
}

#[test]
fn redb_backend_keeps_the_store_contract() {
    let dir = tempfile::tempdir().unwrap();
    let s = RedbStore::open(
        &dir.path().join("s.redb"),
        Sealer::load_or_create(dir.path()).unwrap(),
    )
    .unwrap();
    contract(&s);
    audit_contract(&s);
    ledger_contract(&s);
}

#[test]
fn etcd_backend_keeps_the_store_contract_and_never_holds_secrets_in_clear() {
    let etcd = TestEtcd::start();
    let dir = tempfile::tempdir().unwrap();
    let s = etcd_store(&etcd, "/contract/", dir.path());
    contract(&s);
    audit_contract(&s);
    ledger_contract(&s);

    // Every value under the prefix is ciphertext as far as etcd can tell.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut client = s.client();
    let kvs = rt
        .block_on(client.get(
            "/contract/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        ))
        .unwrap();
    assert!(!kvs.kvs().is_empty());
    for kv in kvs.kvs() {
        assert!(
            !kv.value()
                .windows(SECRET.len())
                .any(|w| w == SECRET.as_bytes()),
            "secret in clear under {}",
            String::from_utf8_lossy(kv.key())
        );
    }

    // A second replica with the same store.key reads the same sealed records; one with
    // another key cannot (Corrupt, not garbage).
    let same = etcd_store(&etcd, "/contract/", dir.path());
    assert_eq!(
        same.connector("b").unwrap().unwrap().config["connection.password"],
        SECRET
    );
    let other_dir = tempfile::tempdir().unwrap();
    let other = etcd_store(&etcd, "/contract/", other_dir.path());
    assert!(matches!(
        other.connector("b"),
        Err(StoreError::Corrupt { .. })
    ));

    // Another prefix is another cluster.
    let isolated = etcd_store(&etcd, "/other/", dir.path());
    assert!(isolated.connectors().unwrap().is_empty());

    // A fenced writer whose leader key is not (or no longer) its own changes nothing.
    let b = s.connector("b").unwrap().unwrap();
    s.set_write_fence(WriteFence::Leader(Fence {
        leader_create_revision: 1,
    }));
    let mut b2 = b.clone();
    b2.tasks_max = 7;
    assert!(matches!(
        s.put_connector(&b2),
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        s.register_executor("z", "http://127.0.0.4:1", vec![]),
        Err(StoreError::Unavailable(_))
    ));
    s.set_write_fence(WriteFence::Follower);
    assert!(matches!(
        s.put_connector(&b2),
        Err(StoreError::Unavailable(_))
    ));
    s.set_write_fence(WriteFence::Open);
    assert_eq!(s.connector("b").unwrap().unwrap().tasks_max, b.tasks_max);
    assert!(s.executor("z").unwrap().is_none());
    assert!(s.put_connector(&b2).unwrap());
}
