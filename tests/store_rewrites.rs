//! SPEC §4.3d on every backend, against real servers: a standby's session hears each
//! rewrite of the active's breadcrumb within its epoch (`StoreEvent::Rewritten`), after
//! that epoch's `Active`. A standby keeps the latest rewrite in memory, so that a store
//! that forgets it (keeping an older rewrite naming a process that is gone) has it
//! written back before the fence (`Elector::forgotten_active`; the simulation's seed
//! 392502).

mod common;

use common::mariadb::MariaDb;
use common::redis::RedisServer;
use common::ZkServer;
use std::time::Duration;
use tokio::sync::mpsc;
use warden::coord::{Connector, Session, StoreEvent, StoreSettings};
use warden::record::{
    BreadcrumbView, Health, JoinOutcome, MemberRecord, NodeRecord, Role, WriteOutcome,
};

fn node(id: &str) -> NodeRecord {
    NodeRecord {
        node_id: id.to_string(),
        host: "127.0.0.1".to_string(),
        incarnation: format!("inc-{id}"),
        ..Default::default()
    }
}

/// The next event that is not `control` nor `Confirmed` (kept in `confirmed`), within
/// 15 s.
async fn next_event(
    rx: &mut mpsc::UnboundedReceiver<StoreEvent>,
    confirmed: &mut Vec<NodeRecord>,
) -> Option<StoreEvent> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(StoreEvent::Control(_))) => continue,
            Ok(Some(StoreEvent::Confirmed(r))) => confirmed.push(r),
            Ok(got) => return got,
            Err(_) => return None,
        }
    }
}

/// `a` takes the lock and commits; then rewrites its breadcrumb twice (the service
/// recorded, then started again under another pid). `b`, a standby, hears the commit and
/// then each rewrite, in order; a rewrite of the same record is not sent again. Once the
/// store forgot the breadcrumb, a rewrite is refused as not ours.
async fn a_standby_hears_each_rewrite_of_the_active<S: Session>(a: S, b: S) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let events = b.clone();
    tokio::spawn(async move { events.events(tx).await });
    let me = node("n1");
    let member = |node: NodeRecord| MemberRecord::bare(node, Role::Standby, Health::Healthy);
    a.create_member(&member(me.clone()))
        .await
        .expect("n1 registers");
    b.create_member(&member(node("n2")))
        .await
        .expect("n2 registers");
    // A polled store may answer the first joins as unknown while the member record is
    // new: join again until the lock is held, for up to 20 s.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut join = 0;
    let epoch = loop {
        match a.join(&me, join).await {
            JoinOutcome::Held { epoch } => break epoch,
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "n1 never got the lock: {other:?}"
                );
                join += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let state = a.read_state().await.expect("the takeover state");
    let version = match state.breadcrumb {
        BreadcrumbView::Record { version, .. } => Some(version),
        _ => None,
    };
    let commit = NodeRecord {
        epoch: Some(epoch),
        ..me.clone()
    };
    assert_eq!(
        a.commit_promotion(&commit, version, state.control_version)
            .await,
        WriteOutcome::Done
    );
    let mut confirmed = Vec::new();
    assert_eq!(
        next_event(&mut rx, &mut confirmed).await,
        Some(StoreEvent::Active(commit.clone()))
    );
    for (rewrite, pid) in [(1, 4242), (2, 4343)] {
        let rec = NodeRecord {
            rewrite: Some(rewrite),
            service_pid: Some(pid),
            service_pgid: Some(pid),
            service_start_time: Some(u64::from(pid)),
            ..commit.clone()
        };
        assert_eq!(a.rewrite_own_breadcrumb(&rec).await, WriteOutcome::Done);
        assert_eq!(
            next_event(&mut rx, &mut confirmed).await,
            Some(StoreEvent::Rewritten(rec.clone())),
            "rewrite {rewrite}"
        );
    }
    // Nothing more: the same record read again is not news.
    let quiet = tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            match rx.recv().await {
                Some(StoreEvent::Control(_)) => continue,
                Some(StoreEvent::Confirmed(r)) => confirmed.push(r),
                other => return other,
            }
        }
    })
    .await;
    assert!(quiet.is_err(), "an event after the last rewrite: {quiet:?}");
    // The breadcrumb of that epoch seen: confirmed once, as the commit's record.
    assert_eq!(confirmed, vec![commit.clone()]);
    // Stop 35 (the simulation's seed 53770): a breadcrumb the store forgot (here: another
    // session deletes it) is not ours to rewrite, and says so rather than "no answer": the
    // holder leaves the lock instead of retrying for ever. Held here for every store; the
    // `stores` test of that seed may see the active write it back first (stop 44).
    let (_, version) = b
        .breadcrumb_bytes()
        .await
        .expect("a read")
        .expect("the breadcrumb");
    b.delete_breadcrumb_at(version, false)
        .await
        .expect("the delete");
    let rec = NodeRecord {
        rewrite: Some(3),
        ..commit.clone()
    };
    assert_eq!(
        a.rewrite_own_breadcrumb(&rec).await,
        WriteOutcome::Conflict,
        "a missing breadcrumb must read as not ours"
    );
}

fn settings(url: String, password: &str) -> StoreSettings {
    StoreSettings {
        url,
        password: Some(password.to_string()),
        session_timeout: Duration::from_secs(20),
        poll_interval: Duration::from_millis(100),
        connect_timeout: Duration::from_secs(5),
        prefix: "warden".into(),
        cluster: "rewrites".into(),
        replicas_ack: 0,
    }
}

#[test]
fn zookeeper_tells_a_standby_each_rewrite_of_the_active() {
    use warden::coord::zookeeper::ZkConnector;
    let zk = ZkServer::start();
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        let cfg: warden::config::ZooKeeperConfig = toml::from_str(&format!(
            "connect = \"{}\"\nsession_timeout = \"4s\"",
            zk.connect_string()
        ))
        .expect("a ZooKeeper config");
        let connector = ZkConnector::new(&cfg, "rewrites", None);
        let a = connector.connect().await.expect("a session");
        a.ensure_cluster().await.expect("the cluster's znodes");
        let b = connector.connect().await.expect("another session");
        a_standby_hears_each_rewrite_of_the_active(a, b).await;
    });
}

#[test]
fn mariadb_tells_a_standby_each_rewrite_of_the_active() {
    use warden::coord::mysql::MysqlConnector;
    let db = MariaDb::start();
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        let connector =
            MysqlConnector::new(settings(db.url(), db.password())).expect("a connector");
        let a = connector.connect().await.expect("a session");
        a.ensure_cluster().await.expect("the cluster's tables");
        a.write_marker(None).await.expect("init");
        let b = connector.connect().await.expect("another session");
        a_standby_hears_each_rewrite_of_the_active(a, b).await;
    });
}

#[test]
fn redis_tells_a_standby_each_rewrite_of_the_active() {
    use warden::coord::redis::RedisConnector;
    let server = RedisServer::start();
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        let connector =
            RedisConnector::new(settings(server.url(), server.password())).expect("a connector");
        let a = connector.connect().await.expect("a session");
        a.ensure_cluster().await.expect("the cluster's keys");
        a.write_marker(None).await.expect("init");
        let b = connector.connect().await.expect("another session");
        a_standby_hears_each_rewrite_of_the_active(a, b).await;
    });
}
