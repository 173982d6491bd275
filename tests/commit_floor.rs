//! SPEC §3a, the floor, on every store (a regression of stop 40's finding): a node that
//! raises its entry of the floor *after* the winner read the takeover state and *before*
//! its commit must not let the commit through at an epoch the floor already holds.
//!
//! The winner n1 takes the lock at epoch `e` and reads the takeover state (nothing seen
//! above `e`). Then n2, whose last process saw epoch `e + 5` on a store that has since
//! forgotten it (a restore from a backup), registers and tries to join: its entry of the
//! floor goes up to `e + 5`. n1's commit at `e` must now be refused (a conflict: the
//! elector reads the state again, finds the floor above its epoch and says the store lost
//! data), never acknowledged: a promotion at an epoch some node has seen hands out a
//! fencing token that is not new. Against real servers, through the store seam the
//! daemon itself uses.

mod common;

use common::mariadb::MariaDb;
use common::redis::RedisServer;
use common::*;
use warden::coord::configured::{Configured, StoreJob};
use warden::coord::mysql::MysqlConnector;
use warden::coord::StoreSettings;
use warden::coord::{Connector, Session};
use warden::record::{
    BreadcrumbView, Epoch, Health, JoinOutcome, MemberRecord, NodeRecord, Role, WriteOutcome,
};

fn record(id: &str, seen: Option<Epoch>) -> NodeRecord {
    NodeRecord {
        node_id: id.to_string(),
        host: "127.0.0.1".to_string(),
        pid: std::process::id(),
        incarnation: format!("inc-{id}"),
        epoch_seen: seen,
        ..Default::default()
    }
}

fn member(node: NodeRecord) -> MemberRecord {
    MemberRecord::bare(node, Role::Standby, Health::Healthy)
}

/// A session of the store, as `warden run` opens it.
async fn session<C: Connector>(store: &C) -> C::Session {
    let s = store.connect().await.expect("a session");
    s.ensure_cluster().await.expect("the cluster's state");
    s
}

/// `me` registers and takes the lock; its epoch.
async fn held<S: Session>(s: &S, me: &NodeRecord) -> Epoch {
    s.create_member(&member(me.clone()))
        .await
        .expect("registering");
    match s.join(me, 1).await {
        JoinOutcome::Held { epoch } => epoch,
        other => panic!("{} did not get the lock: {other:?}", me.node_id),
    }
}

/// The commit `s` makes for `me` at `epoch` from what `read_state` says now, as the
/// elector makes it (the breadcrumb at the version read, control at the version read),
/// with `between` run after the read and before the commit.
async fn commit_after<S: Session>(
    s: &S,
    me: &NodeRecord,
    epoch: Epoch,
    between: impl std::future::Future<Output = ()>,
) -> WriteOutcome {
    let state = s.read_state().await.expect("the takeover state");
    assert!(
        state.members_epoch_seen.is_none_or(|seen| seen < epoch),
        "nothing above epoch {epoch} is seen yet: {state:?}"
    );
    let version = match state.breadcrumb {
        BreadcrumbView::Record { version, .. } | BreadcrumbView::Unreadable { version, .. } => {
            Some(version)
        }
        _ => None,
    };
    between.await;
    let rec = NodeRecord {
        epoch: Some(epoch),
        ..me.clone()
    };
    s.commit_promotion(&rec, version, state.control_version)
        .await
}

/// Sessions of n1 and n2; n1 registered and holding the lock, at the epoch returned.
async fn n1_holds_n2_waits<C: Connector>(store: &C) -> (C::Session, C::Session, NodeRecord, Epoch) {
    let a = session(store).await;
    let b = session(store).await;
    let me = record("n1", None);
    let epoch = held(&a, &me).await;
    (a, b, me, epoch)
}

async fn floor_raised_between_read_and_commit<C: Connector>(store: &C) {
    let (a, b, me, epoch) = n1_holds_n2_waits(store).await;

    let late = record("n2", Some(epoch + 5));
    let outcome = commit_after(&a, &me, epoch, async {
        // n2's registration and its join raise its entry of the floor; the lock is n1's.
        b.create_member(&member(late.clone()))
            .await
            .expect("n2 registers");
        let joined = b.join(&late, 1).await;
        assert!(
            !matches!(joined, JoinOutcome::Held { .. }),
            "n2 took the lock n1 holds: {joined:?}"
        );
    })
    .await;
    assert_eq!(
        outcome,
        WriteOutcome::Conflict,
        "n1's commit at epoch {epoch} went through although n2 had raised the floor to {} \
         after n1 read the state",
        epoch + 5
    );

    // What the elector does next: read again, and find the floor above its epoch.
    let again = a.read_state().await.expect("the takeover state again");
    assert!(
        again.members_epoch_seen >= Some(epoch + 5),
        "the state read after the refused commit does not show n2's {}: {again:?}",
        epoch + 5
    );
    // And nothing was promoted: the breadcrumb does not name n1 at its epoch.
    if let Some((data, _)) = a.breadcrumb_bytes().await.expect("the breadcrumb") {
        let crumb: NodeRecord = warden::record::parse(&data).expect("a breadcrumb");
        assert_ne!(
            crumb.epoch,
            Some(epoch),
            "the refused commit left {crumb:?}"
        );
    }
}

/// The control: with nothing raised in between, the same commit goes through.
async fn nothing_raised_between_read_and_commit<C: Connector>(store: &C) {
    let a = session(store).await;
    let me = record("n1", None);
    let epoch = held(&a, &me).await;
    let outcome = commit_after(&a, &me, epoch, async {}).await;
    assert_eq!(outcome, WriteOutcome::Done);
}

/// The review of stop 41: a holder commits its breadcrumb again within its hold (it
/// joined again after a refused renewal, its lock still its own), after it published its
/// epoch as seen, which raised the floor to that epoch. That commit must go through (else
/// the holder reads and commits again for ever, and nobody else can take its lock); a
/// floor *above* the epoch still refuses it.
async fn our_breadcrumb_committed_again_at_our_published_epoch<C: Connector>(store: &C) {
    let (a, b, me, epoch) = n1_holds_n2_waits(store).await;
    assert_eq!(
        commit_after(&a, &me, epoch, async {}).await,
        WriteOutcome::Done
    );
    let seen = member(record("n1", Some(epoch)));
    a.set_member(&seen).await.expect("n1 publishes its epoch");
    let again = || async {
        let state = a.read_state().await.expect("the takeover state");
        assert!(state.members_epoch_seen >= Some(epoch), "{state:?}");
        let BreadcrumbView::Record { record, version } = state.breadcrumb else {
            panic!("no breadcrumb after the commit: {state:?}");
        };
        assert_eq!(record.epoch, Some(epoch));
        a.commit_promotion(&record, Some(version), state.control_version)
            .await
    };
    assert_eq!(
        again().await,
        WriteOutcome::Done,
        "n1's breadcrumb committed again at its own epoch {epoch}, which it published, was \
         refused"
    );
    let late = record("n2", Some(epoch + 5));
    b.create_member(&member(late)).await.expect("n2 registers");
    assert_eq!(
        again().await,
        WriteOutcome::Conflict,
        "n1's breadcrumb committed again at {epoch} although n2 had seen {}",
        epoch + 5
    );
}

/// Every scenario, each on a cluster of its own, initialized by `warden init`.
fn on(make: impl Fn() -> Cluster) {
    for scenario in [0, 1, 2] {
        let cluster = make();
        let out = cli(&cluster.node("init").config, &["init"]);
        assert!(out.status.success(), "warden init: {}", describe(&out));
        let cfg = warden::config::load(&cluster.node("n1").config).expect("the node's config");
        let store = Configured::from_config(&cfg).expect("the store's settings");
        let rt = tokio::runtime::Runtime::new().expect("a runtime");
        rt.block_on(store.run(Scenario(scenario)));
    }
}

/// Scenario `.0` of [`on`], on the cluster's store.
struct Scenario(u8);

impl StoreJob for Scenario {
    type Output = ();

    async fn run<C: Connector>(self, store: C) {
        match self.0 {
            0 => nothing_raised_between_read_and_commit(&store).await,
            1 => floor_raised_between_read_and_commit(&store).await,
            _ => our_breadcrumb_committed_again_at_our_published_epoch(&store).await,
        }
    }
}

#[test]
fn zookeeper_refuses_a_commit_below_a_floor_raised_after_the_read() {
    // The servers' helpers run a runtime of their own: started outside the test's.
    let zk = ZkServer::start();
    on(|| Cluster::with_connect(&zk.connect_string()));
}

#[test]
fn mysql_refuses_a_commit_below_a_floor_raised_after_the_read() {
    let db = MariaDb::start();
    on(|| Cluster::with_mysql(&db));
}

#[test]
fn redis_refuses_a_commit_below_a_floor_raised_after_the_read() {
    let r = RedisServer::start();
    on(|| Cluster::with_redis(&r));
}

/// SPEC §3a on MySQL (the review of stop 43): a join that waited on the lock row while
/// another transaction raised the floor must see that raise. The join's first read (is
/// its member row still its session's?) made InnoDB's read view; its read of the floor,
/// after the wait, read that view and missed the raise committed meanwhile, so it took the
/// lock at an epoch the floor held (only the commit's check of the floor stopped the
/// promotion). The floor is now read as it is, share-locked, as the commit reads it.
#[test]
fn a_mysql_join_that_waited_on_the_lock_row_sees_the_floor_raised_meanwhile() {
    use mysql_async::prelude::Queryable;
    let db = MariaDb::start();
    let mut cluster = Cluster::with_mysql(&db);
    // An operation timeout (and a lock wait: the sessions' `innodb_lock_wait_timeout`) of
    // 20 s, so that the join's wait below lasts until the other transaction commits, and
    // a loaded host still sees it wait.
    cluster.session_timeout = secs(60);
    cluster.connect_timeout = secs(20);
    cluster.use_mysql(&db);
    let out = cli(&cluster.node("init").config, &["init"]);
    assert!(out.status.success(), "warden init: {}", describe(&out));
    let name = cluster.name.clone();
    let cfg = warden::config::load(&cluster.node("n1").config).expect("the node's config");
    let store = MysqlConnector::new(StoreSettings::from_config(&cfg).expect("the settings"))
        .expect("a connector");
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        let (a, b, _, epoch) = n1_holds_n2_waits(&store).await;
        let n2 = record("n2", None);
        b.create_member(&member(n2.clone()))
            .await
            .expect("n2 registers");
        // n1's lease ran out: n2 may take the lock.
        a.release().await.expect("n1 releases");
        let opts = mysql_async::OptsBuilder::from_opts(
            mysql_async::Opts::from_url(&db.url()).expect("the URL"),
        )
        .pass(Some(db.password().to_string()));
        let mut holder = mysql_async::Conn::new(opts).await.expect("a client");
        // Another transaction holds the cluster's lock row (a joiner of its own, say),
        // and raises a node's entry of the floor far above the counter.
        holder.query_drop("START TRANSACTION").await.expect("begin");
        holder
            .exec_drop(
                "INSERT INTO warden.warden_lock (cluster, session, record, epoch, version, \
                 renewed_at, expires_at) VALUES (?, 1, '{}', 0, 0, NOW(6) - INTERVAL 1 DAY, \
                 NOW(6) - INTERVAL 1 DAY) ON DUPLICATE KEY UPDATE version = version",
                (&name,),
            )
            .await
            .expect("the lock row");
        holder
            .exec_drop(
                "SELECT session FROM warden.warden_lock WHERE cluster = ? FOR UPDATE",
                (&name,),
            )
            .await
            .expect("locked");
        let high = epoch + 50;
        holder
            .exec_drop(
                "INSERT INTO warden.warden_kv (cluster, name, value, version) VALUES (?, \
                 'seen/n9', ?, 0)",
                (&name, format!("{high:020}").into_bytes()),
            )
            .await
            .expect("the raise");
        let join = tokio::spawn(async move { b.join(&n2, 1).await });
        // Once n2's join waits on the lock row, the other transaction commits.
        // (As root: the warden user may not see other users' transactions. Polled on this
        // worker thread; the join runs on the other.)
        tokio::task::block_in_place(|| {
            wait_until(secs(15), "n2's join waits on the lock row", || {
                db.sql(
                    "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = \
                     'LOCK WAIT'",
                )
                .trim()
                    == "1"
            })
        });
        holder.query_drop("COMMIT").await.expect("commit");
        let outcome = join.await.expect("the join");
        assert!(
            matches!(&outcome, JoinOutcome::LostData(why) if why.contains(&high.to_string())),
            "n2 joined past a floor at {high} raised while it waited: {outcome:?}"
        );
    });
}
