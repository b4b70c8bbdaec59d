//! Leader election on a test-owned etcd: one replica leads; when its etcd lease is lost
//! it steps down (and its fenced store writes are refused) and the other replica leads.
//! Run with `cargo test -p wharf-control-plane --test etcd_election`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use wharf_control_plane::store::etcd_election::{Election, Role};
use wharf_control_plane::store::seal::Sealer;
use wharf_control_plane::store::{EtcdOptions, EtcdStore, StateStore, StoreError};
use wharf_harness::etcd::TestEtcd;

/// Election TTL in the test, in seconds (etcd's shortest).
const TTL_SECS: u32 = 2;
/// Bound on each role change, in milliseconds.
const ROLE_DEADLINE_MS: u64 = 15_000;
/// Bound on a fresh etcd answering, in milliseconds.
const CONNECT_DEADLINE_MS: u64 = 20_000;

async fn store(etcd: &TestEtcd, dir: &std::path::Path) -> Arc<EtcdStore> {
    let deadline = Instant::now() + Duration::from_millis(CONNECT_DEADLINE_MS);
    loop {
        let opts = EtcdOptions {
            endpoints: vec![etcd.endpoint.clone()],
            prefix: "/election/".into(),
            ..Default::default()
        };
        let sealer = Sealer::load_or_create(dir).unwrap();
        match tokio::task::spawn_blocking(move || EtcdStore::connect(&opts, sealer))
            .await
            .unwrap()
        {
            Ok(s) => return Arc::new(s),
            Err(e) if Instant::now() < deadline => {
                eprintln!("etcd not ready: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

async fn wait_role(rx: &mut watch::Receiver<Role>, want: impl Fn(&Role) -> bool) -> Role {
    let r = tokio::time::timeout(Duration::from_millis(ROLE_DEADLINE_MS), async {
        loop {
            let r = rx.borrow_and_update().clone();
            if want(&r) {
                return r;
            }
            rx.changed().await.expect("election running");
        }
    })
    .await;
    r.unwrap_or_else(|_| panic!("role did not change in time (now {:?})", rx.borrow()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_loses_its_lease_steps_down_and_the_other_replica_leads() {
    let etcd = TestEtcd::start();
    let dir = tempfile::tempdir().unwrap();
    let cancel = CancellationToken::new();

    let sa = store(&etcd, dir.path()).await;
    let ea = Election::new(sa.clone(), "http://a".into(), TTL_SECS);
    let mut ra = ea.subscribe();
    let ta = tokio::spawn(ea.run(cancel.child_token()));
    wait_role(&mut ra, |r| *r == Role::Leader).await;

    let sb = store(&etcd, dir.path()).await;
    let eb = Election::new(sb.clone(), "http://b".into(), TTL_SECS);
    let mut rb = eb.subscribe();
    let tb = tokio::spawn(eb.run(cancel.child_token()));
    let r = wait_role(&mut rb, |r| matches!(r, Role::Follower { leader: Some(_) })).await;
    assert_eq!(
        r,
        Role::Follower {
            leader: Some("http://a".into())
        }
    );

    // The leader writes; the follower's store refuses writes (they go to the leader).
    let x = sa
        .register_executor("x", "http://127.0.0.2:1", vec![])
        .unwrap();
    assert!(matches!(
        sb.register_executor("z", "http://127.0.0.4:1", vec![]),
        Err(StoreError::Unavailable(_))
    ));

    // Take A's lease away behind its back (as an expiry during a partition would).
    let mut client = sa.client();
    let leader = client.get("/election/leader", None).await.unwrap();
    let lease = leader.kvs()[0].lease();
    client.lease_revoke(lease).await.unwrap();

    // A notices and stops leading (and sits out a TTL); B is elected; A's writes are
    // refused.
    let r = wait_role(&mut ra, |r| *r != Role::Leader).await;
    assert!(matches!(r, Role::Follower { .. }), "{r:?}");
    wait_role(&mut rb, |r| *r == Role::Leader).await;
    assert!(matches!(
        sa.mark_executor_lost("x", x.epoch),
        Err(StoreError::Unavailable(_))
    ));
    assert!(
        !sb.executor("x").unwrap().unwrap().lost,
        "the deposed leader changed nothing"
    );
    let y = sb
        .register_executor("y", "http://127.0.0.3:1", vec![])
        .unwrap();
    assert!(y.epoch > x.epoch);
    let r = wait_role(&mut ra, |r| matches!(r, Role::Follower { leader: Some(_) })).await;
    assert_eq!(
        r,
        Role::Follower {
            leader: Some("http://b".into())
        }
    );

    // Resigning (shutdown) revokes the lease: A takes over without waiting for a TTL.
    cancel.cancel();
    ta.await.unwrap();
    tb.await.unwrap();
    let left = client.get("/election/leader", None).await.unwrap();
    assert!(
        left.kvs().is_empty(),
        "a resigning leader leaves no leader key behind"
    );
}
