//! ZooKeeper's own ways through the store seam (`warden::coord::Session`), where they differ
//! from the trait's default steps, against a real server: what they leave behind must be
//! what the default steps leave.

mod common;

use common::ZkServer;
use warden::config::ZooKeeperConfig;
use warden::coord::zookeeper::{ZkConnector, ZkSession};
use warden::coord::Session;
use warden::record::{Epoch, JoinOutcome, NodeRecord};

fn node(id: &str) -> NodeRecord {
    NodeRecord {
        node_id: id.to_string(),
        host: "127.0.0.1".to_string(),
        incarnation: format!("inc-{id}"),
        ..Default::default()
    }
}

async fn session(zk: &ZkServer) -> ZkSession {
    let cfg: ZooKeeperConfig = toml::from_str(&format!(
        "connect = \"{}\"\nsession_timeout = \"4s\"",
        zk.connect_string()
    ))
    .expect("a ZooKeeper config");
    let s = ZkConnector::new(&cfg, "release", None)
        .connect()
        .await
        .expect("a session");
    s.ensure_cluster().await.expect("the cluster's znodes");
    s
}

/// `me` takes the lock and commits a promotion: the breadcrumb names it at `epoch`.
async fn promoted(s: &ZkSession, me: &NodeRecord) -> Epoch {
    let JoinOutcome::Held { epoch } = s.join(me, 1).await else {
        panic!("{} did not get the lock", me.node_id);
    };
    let state = s.read_state().await.expect("the takeover state");
    let rec = NodeRecord {
        epoch: Some(epoch),
        ..me.clone()
    };
    let version = match state.breadcrumb {
        warden::record::BreadcrumbView::Record { version, .. } => Some(version),
        _ => None,
    };
    assert_eq!(
        s.commit_promotion(&rec, version, state.control_version)
            .await,
        warden::record::WriteOutcome::Done
    );
    epoch
}

async fn breadcrumb(s: &ZkSession) -> Option<NodeRecord> {
    let (data, _) = s.breadcrumb_bytes().await.expect("a read")?;
    Some(warden::record::parse(&data).expect("a breadcrumb"))
}

#[test]
fn a_clean_release_deletes_the_breadcrumb_only_while_the_lock_is_ours() {
    // The server's helpers run a runtime of their own: started outside this one.
    let zk = ZkServer::start();
    tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(clean_release(&zk));
}

async fn clean_release(zk: &ZkServer) {
    let (n1, n2) = (node("n1"), node("n2"));

    // Ours, at our epoch: both go, and the other node takes over without a breadcrumb.
    let a = session(zk).await;
    let b = session(zk).await;
    let epoch = promoted(&a, &n1).await;
    assert!(matches!(b.join(&n2, 1).await, JoinOutcome::Exists { .. }));
    let done = a.release_deleting(Some(("n1", "inc-n1", epoch))).await;
    assert!(matches!(done.breadcrumb, Some(Ok(true))), "{done:?}");
    assert!(done.lock.is_ok(), "{done:?}");
    assert_eq!(breadcrumb(&b).await, None);
    let epoch_b = promoted(&b, &n2).await;
    drop(a);

    // A breadcrumb of another epoch (or incarnation) is not ours: the lock alone goes.
    let done = b
        .release_deleting(Some(("n2", "inc-n2", epoch_b + 1)))
        .await;
    assert!(matches!(done.breadcrumb, Some(Ok(false))), "{done:?}");
    assert!(done.lock.is_ok(), "{done:?}");
    let c = session(zk).await;
    assert_eq!(
        breadcrumb(&c).await.and_then(|r| r.epoch),
        Some(epoch_b),
        "the breadcrumb that did not match stays"
    );
    assert!(matches!(c.join(&n1, 2).await, JoinOutcome::Held { .. }));
    c.release().await.expect("c's release");
    drop((b, c));

    // A lock that is not ours (deleted by hand, taken by another session): nothing goes,
    // not even a breadcrumb that names us.
    let d = session(zk).await;
    let epoch_d = promoted(&d, &node("n3")).await;
    let e = session(zk).await;
    let by_hand = zookeeper_client::Client::connect(&zk.connect_string())
        .await
        .expect("a client");
    by_hand
        .delete(&d.paths().lock, None)
        .await
        .expect("delete the lock by hand");
    assert!(matches!(
        e.join(&node("n4"), 1).await,
        JoinOutcome::Held { .. }
    ));
    let done = d.release_deleting(Some(("n3", "inc-n3", epoch_d))).await;
    assert!(matches!(done.breadcrumb, Some(Ok(false))), "{done:?}");
    assert!(done.lock.is_ok(), "{done:?}");
    assert_eq!(
        breadcrumb(&e).await.map(|r| r.node_id),
        Some("n3".to_string()),
        "the breadcrumb stays while the lock is another's"
    );
    assert!(
        matches!(d.join(&node("n3"), 2).await, JoinOutcome::Exists { .. }),
        "e's lock stays"
    );
}

/// `restore_breadcrumb` (the simulation's seed 33926): the holder writes another node's
/// record back as the breadcrumb, created when absent or at the version read, and never
/// while the lock is not its own, nor over a breadcrumb that changed since it was read.
#[test]
fn a_breadcrumb_is_written_back_only_by_the_holder_at_the_version_read() {
    let zk = ZkServer::start();
    tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(write_back(&zk));
}

async fn write_back(zk: &ZkServer) {
    use warden::record::{Version, WriteOutcome};
    let (a, b) = (session(zk).await, session(zk).await);
    let forgotten = NodeRecord {
        epoch: Some(7),
        ..node("n3")
    };
    let JoinOutcome::Held { .. } = a.join(&node("n1"), 1).await else {
        panic!("a did not get the lock");
    };
    assert!(matches!(
        b.join(&node("n2"), 1).await,
        JoinOutcome::Exists { .. }
    ));
    // Not the holder: refused.
    assert_eq!(
        b.restore_breadcrumb(&forgotten, None).await,
        WriteOutcome::Conflict
    );
    assert_eq!(breadcrumb(&a).await, None);
    // The holder: created where there is none; a second create is refused.
    assert_eq!(
        a.restore_breadcrumb(&forgotten, None).await,
        WriteOutcome::Done
    );
    assert_eq!(breadcrumb(&b).await, Some(forgotten.clone()));
    assert_eq!(
        a.restore_breadcrumb(&forgotten, None).await,
        WriteOutcome::Conflict
    );
    // At the version read, and not at another.
    let (_, v) = a.breadcrumb_bytes().await.expect("a read").expect("one");
    let later = NodeRecord {
        epoch: Some(8),
        ..forgotten.clone()
    };
    assert_eq!(
        a.restore_breadcrumb(&later, Some(Version::new(v.get() + 1)))
            .await,
        WriteOutcome::Conflict
    );
    assert_eq!(
        a.restore_breadcrumb(&later, Some(v)).await,
        WriteOutcome::Done
    );
    assert_eq!(breadcrumb(&b).await, Some(later));
}

/// The review of stop 41: a member record never stands above the floor. When this node's
/// entry of the floor cannot be raised (here the floor's ACL lets nobody write it), the
/// member record that carries the epoch is not written either. It was (the raise was best
/// effort), and a commit, which checks the floor and not the member records, could then go
/// through below an epoch that record shows.
#[test]
fn no_member_record_is_written_above_a_floor_that_could_not_be_raised() {
    use zookeeper_client as zk;
    let zk_server = ZkServer::start();
    tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(async {
            let a = session(&zk_server).await;
            let by_hand = zk::Client::connect(&zk_server.connect_string())
                .await
                .expect("a client");
            let floor = a.paths().floor.clone();
            let read_only = [zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone())];
            let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&read_only));
            match by_hand.create(&floor, b"{}", &opts).await {
                Ok(_) => {}
                Err(zk::Error::NodeExists) => by_hand
                    .set_acl(&floor, &zk::Acls::new(&read_only), None)
                    .await
                    .map(|_| ())
                    .expect("the floor made read-only"),
                Err(e) => panic!("creating the floor by hand: {e}"),
            }
            let mut n1 = node("n1");
            n1.epoch_seen = Some(9);
            let m = warden::record::MemberRecord::bare(
                n1,
                warden::record::Role::Standby,
                warden::record::Health::Healthy,
            );
            let refused = a.create_member(&m).await;
            assert!(
                refused.is_err(),
                "registered above a floor it could not raise"
            );
            assert!(
                a.member("n1").await.expect("a read").is_none(),
                "the member record of n1 was written though its floor entry was not"
            );
        });
}
