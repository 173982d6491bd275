//! The simulation's store (`sim/store.rs`), seen the way the daemon sees it: only through
//! `warden::coord::{Connector, Session}`, plus the harness's own knobs (partitions, a store
//! without quorum, killed and frozen processes, the operator). Each test runs under tokio's
//! paused clock, as the simulation does, so the timings asserted are exact virtual ones.

#[allow(dead_code)]
#[path = "sim/plan.rs"]
mod plan;
#[path = "sim/store.rs"]
mod store;

use plan::ms;
use std::time::Duration;
use store::{Fact, Sessions, SimSession, SimStore, StoreConfig, Watches};
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};
use warden::coord::{self, Connector, Session, StoreError, StoreEvent};
use warden::record::{
    BreadcrumbView, Control, Health, JoinOutcome, MemberRecord, NodeRecord, Role, Version,
    WriteOutcome,
};

const GRANTED: Duration = Duration::from_millis(2000);
const TICK: Duration = Duration::from_millis(400);
const OP_TIMEOUT: Duration = Duration::from_millis(600);
const MAX_LATENCY: Duration = Duration::from_millis(10);

fn cfg() -> StoreConfig {
    StoreConfig {
        granted: GRANTED,
        tick: TICK,
        op_timeout: OP_TIMEOUT,
        latency: (ms(1), MAX_LATENCY),
        loss: 0.0,
        watches: Watches::Yes,
        sessions: Sessions::Zk,
        // The counter is made at the first join, as by a session that lived long enough.
        settle: Duration::ZERO,
        redis: false,
        zk_wire: false,
        mysql: false,
    }
}

fn node(i: usize) -> NodeRecord {
    NodeRecord {
        node_id: format!("n{}", i + 1),
        host: format!("h{}", i + 1),
        incarnation: format!("inc-{i}"),
        ..Default::default()
    }
}

fn member(i: usize, role: Role) -> MemberRecord {
    MemberRecord::bare(node(i), role, Health::Healthy)
}

/// A registered session of node `i` (incarnation 0) with its events running, past the
/// first `control` the daemon waits for.
struct Client {
    s: SimSession,
    events: UnboundedReceiver<StoreEvent>,
    task: JoinHandle<()>,
}

async fn open(store: &SimStore, i: usize) -> Client {
    let s = store.connector(i, 0).connect().await.expect("a session");
    coord::register(&s, &member(i, Role::Standby), |_, _| true, &mut false, None)
        .await
        .expect("registered");
    let (tx, mut events) = mpsc::unbounded_channel();
    let s2 = s.clone();
    let task = tokio::spawn(async move { s2.events(tx).await });
    match events.recv().await {
        Some(StoreEvent::Control(_)) => {}
        other => panic!("expected control first, got {other:?}"),
    }
    Client { s, events, task }
}

/// The next event within `within`, if any.
async fn next(events: &mut UnboundedReceiver<StoreEvent>, within: Duration) -> Option<StoreEvent> {
    timeout(within, events.recv()).await.ok().flatten()
}

fn held(outcome: JoinOutcome) -> u64 {
    match outcome {
        JoinOutcome::Held { epoch } => epoch,
        other => panic!("expected the lock, got {other:?}"),
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_lock_goes_to_one_session_and_each_new_lock_has_a_greater_epoch() {
    let store = SimStore::new(cfg(), 1);
    let a = open(&store, 0).await;
    let mut b = open(&store, 1).await;
    let e1 = held(a.s.join(&node(0), 1).await);
    // Asking again finds it held by this very session (a create whose reply was lost).
    assert_eq!(a.s.join(&node(0), 2).await, JoinOutcome::Held { epoch: e1 });
    assert_eq!(
        b.s.join(&node(1), 1).await,
        JoinOutcome::Exists { epoch: None }
    );
    assert_eq!(store.lock_holder(), Some((0, 0, e1)));

    a.s.release().await.unwrap();
    assert_eq!(store.lock_holder(), None);
    assert_eq!(
        next(&mut b.events, ms(50)).await,
        Some(StoreEvent::HolderGone { join: 1 })
    );
    let e2 = held(b.s.join(&node(1), 2).await);
    assert!(e2 > e1, "{e2} after {e1}");
    // Releasing a lock another session holds does nothing.
    a.s.release().await.unwrap();
    assert_eq!(store.lock_holder(), Some((1, 0, e2)));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_commit_checks_control_the_breadcrumb_and_the_lock() {
    let store = SimStore::new(cfg(), 2);
    let a = open(&store, 0).await;
    let b = open(&store, 1).await;
    let epoch = held(a.s.join(&node(0), 1).await);
    let state = a.s.read_state().await.unwrap();
    assert_eq!(state.breadcrumb, BreadcrumbView::Absent);
    assert_eq!(state.newest_promotion, None);
    let cv = state.control_version;
    let rec = NodeRecord {
        epoch: Some(epoch),
        ..node(0)
    };
    let other_version = Version::new(cv.get() + 1);
    assert_eq!(
        a.s.commit_promotion(&rec, None, other_version).await,
        WriteOutcome::Conflict
    );
    // A breadcrumb version when there is none.
    assert_eq!(
        a.s.commit_promotion(&rec, Some(Version::new(0)), cv).await,
        WriteOutcome::Conflict
    );
    assert_eq!(store.breadcrumb(), None);
    assert_eq!(
        a.s.commit_promotion(&rec, None, cv).await,
        WriteOutcome::Done
    );
    assert_eq!(store.breadcrumb(), Some(rec.clone()));
    // Created once: a second create fails.
    assert_eq!(
        a.s.commit_promotion(&rec, None, cv).await,
        WriteOutcome::Conflict
    );
    // The operator changed control since it was read.
    let state = a.s.read_state().await.unwrap();
    let BreadcrumbView::Record { version: bv, .. } = state.breadcrumb else {
        panic!("{:?}", state.breadcrumb);
    };
    store.set_control(Control {
        paused: true,
        ..Control::default()
    });
    assert_eq!(
        a.s.commit_promotion(&rec, Some(bv), state.control_version)
            .await,
        WriteOutcome::Conflict
    );

    // Once the lock is another session's, the old holder's commit fails.
    a.s.release().await.unwrap();
    held(b.s.join(&node(1), 1).await);
    let state = a.s.read_state().await.unwrap();
    assert_eq!(
        a.s.commit_promotion(&rec, state.breadcrumb.version(), state.control_version)
            .await,
        WriteOutcome::Conflict
    );
    let state = b.s.read_state().await.unwrap();
    let rec_b = NodeRecord {
        epoch: Some(store.lock_holder().unwrap().2),
        ..node(1)
    };
    assert_eq!(
        b.s.commit_promotion(&rec_b, state.breadcrumb.version(), state.control_version)
            .await,
        WriteOutcome::Done
    );
    assert_eq!(store.breadcrumb(), Some(rec_b));
}

/// The lock checks are the backend's: `check_version(lock, held)` with the version this
/// session last saw of its own lock, not the lock's owner. A session that released the
/// lock passes it again once a new lock reaches that same version; the daemon never gets
/// there, because it drops the session right after a release.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_renewal_under_another_sessions_lock_at_the_same_version_is_refused() {
    let store = SimStore::new(cfg(), 3);
    let a = open(&store, 0).await;
    let b = open(&store, 1).await;
    held(a.s.join(&node(0), 1).await);
    a.s.release().await.unwrap();
    assert_eq!(
        a.s.renew(&member(0, Role::Active)).await,
        WriteOutcome::Conflict
    );
    // b's new lock is at version 0, the version a held: the version check alone passed
    // (seed 81344); the lock must also be a's.
    held(b.s.join(&node(1), 1).await);
    assert_eq!(
        a.s.renew(&member(0, Role::Active)).await,
        WriteOutcome::Conflict
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_renewal_needs_the_lock() {
    let store = SimStore::new(cfg(), 4);
    let a = open(&store, 0).await;
    held(a.s.join(&node(0), 1).await);
    assert_eq!(
        a.s.renew(&member(0, Role::Active)).await,
        WriteOutcome::Done
    );
    let m = a.s.member("n1").await.unwrap().expect("registered");
    assert_eq!(m.0, a.s.id());
    assert_eq!(m.1.unwrap().role, Role::Active);
    a.s.release().await.unwrap();
    assert_eq!(
        a.s.renew(&member(0, Role::Active)).await,
        WriteOutcome::Conflict
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_partitioned_session_expires_and_its_client_learns_it_once_reachable() {
    let store = SimStore::new(cfg(), 5);
    let mut a = open(&store, 0).await;
    let mut b = open(&store, 1).await;
    held(a.s.join(&node(0), 1).await);
    assert_eq!(
        b.s.join(&node(1), 7).await,
        JoinOutcome::Exists { epoch: None }
    );
    store.take_facts();

    let cut = Instant::now();
    store.set_reachable(0, false);
    // The renewal gets no answer.
    assert_eq!(
        a.s.renew(&member(0, Role::Active)).await,
        WriteOutcome::Unknown
    );
    assert_eq!(Instant::now() - cut, OP_TIMEOUT);
    assert_eq!(
        next(&mut b.events, GRANTED * 2).await,
        Some(StoreEvent::HolderGone { join: 7 })
    );
    // The last ping may have come up to a third of the timeout before the cut; expiry is
    // on the next tick, and the watch event travels back.
    let gone = Instant::now() - cut;
    assert!(
        gone >= GRANTED - GRANTED / 3 && gone <= GRANTED + TICK + MAX_LATENCY,
        "{gone:?}"
    );
    assert_eq!(store.lock_holder(), None);
    assert!(matches!(
        store.take_facts().as_slice(),
        [Fact::LockGone {
            node: 0,
            inc: 0,
            expired: true,
            ..
        }]
    ));
    // Cut off, the client cannot know.
    assert_eq!(next(&mut a.events, GRANTED * 3).await, None);
    store.set_reachable(0, true);
    assert_eq!(
        next(&mut a.events, MAX_LATENCY).await,
        Some(StoreEvent::SessionLost)
    );
    assert!(matches!(
        a.s.read_state().await,
        Err(StoreError::SessionLost(_))
    ));
    assert_eq!(
        a.s.renew(&member(0, Role::Active)).await,
        WriteOutcome::Unknown
    );
    // A new session works.
    let c = open(&store, 0).await;
    held(c.s.join(&node(0), 1).await);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_killed_process_never_hears_back_and_its_session_expires() {
    let store = SimStore::new(cfg(), 6);
    let a = open(&store, 0).await;
    let mut b = open(&store, 1).await;
    held(a.s.join(&node(0), 1).await);
    assert_eq!(
        b.s.join(&node(1), 1).await,
        JoinOutcome::Exists { epoch: None }
    );
    let killed = Instant::now();
    store.kill(0, 0);
    let pending = tokio::spawn({
        let s = a.s.clone();
        async move { s.renew(&member(0, Role::Active)).await }
    });
    assert_eq!(
        next(&mut b.events, GRANTED * 2).await,
        Some(StoreEvent::HolderGone { join: 1 })
    );
    assert!(Instant::now() - killed <= GRANTED + TICK + MAX_LATENCY);
    assert!(b.s.member("n1").await.unwrap().is_none());
    // Dropping the dead process's session closes nothing, and its call never returns.
    a.task.abort();
    drop(a.s);
    tokio::time::sleep(GRANTED * 5).await;
    assert!(!pending.is_finished());
    // A new incarnation of the node registers.
    let c = store.connector(0, 1).connect().await.unwrap();
    coord::register(&c, &member(0, Role::Standby), |_, _| true, &mut false, None)
        .await
        .unwrap();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn dropping_the_last_clone_closes_the_session_at_once() {
    let store = SimStore::new(cfg(), 7);
    let a = open(&store, 0).await;
    let mut b = open(&store, 1).await;
    held(a.s.join(&node(0), 1).await);
    assert_eq!(
        b.s.join(&node(1), 1).await,
        JoinOutcome::Exists { epoch: None }
    );
    store.take_facts();
    let t = Instant::now();
    a.task.abort();
    let clone = a.s.clone();
    drop(a.s);
    tokio::task::yield_now().await;
    assert_eq!(store.lock_holder().map(|h| h.0), Some(0), "a clone is left");
    drop(clone);
    assert_eq!(
        next(&mut b.events, GRANTED).await,
        Some(StoreEvent::HolderGone { join: 1 })
    );
    assert!(
        Instant::now() - t <= MAX_LATENCY * 2,
        "{:?}",
        Instant::now() - t
    );
    assert!(matches!(
        store.take_facts().as_slice(),
        [Fact::LockGone {
            node: 0,
            expired: false,
            ..
        }]
    ));
    assert!(b.s.member("n1").await.unwrap().is_none());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn watches_report_control_changes_and_the_holders_end() {
    let store = SimStore::new(cfg(), 8);
    let mut a = open(&store, 0).await;
    let mut b = open(&store, 1).await;
    held(a.s.join(&node(0), 1).await);
    assert_eq!(
        b.s.join(&node(1), 3).await,
        JoinOutcome::Exists { epoch: None }
    );
    let paused = Control {
        paused: true,
        reason: Some("maintenance".into()),
        failover: None,
    };
    store.set_control(paused.clone());
    // Fired, then read again: two round trips at most.
    for events in [&mut a.events, &mut b.events] {
        assert_eq!(
            next(events, MAX_LATENCY * 4).await,
            Some(StoreEvent::Control(paused.clone()))
        );
    }
    // A daemon's own change through the trait fires the same watches.
    let cleared =
        a.s.update_control(|c| {
            c.paused = false;
            Ok(true)
        })
        .await
        .unwrap()
        .unwrap();
    assert!(!cleared.paused);
    for events in [&mut a.events, &mut b.events] {
        assert_eq!(
            next(events, MAX_LATENCY * 4).await,
            Some(StoreEvent::Control(cleared.clone()))
        );
    }
    a.s.release().await.unwrap();
    assert_eq!(
        next(&mut b.events, MAX_LATENCY * 2).await,
        Some(StoreEvent::HolderGone { join: 3 })
    );
    // The holder's own watch fired too (its own lock is gone).
    assert_eq!(
        next(&mut a.events, MAX_LATENCY * 2).await,
        Some(StoreEvent::HolderGone { join: 1 })
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_watch_armed_before_a_partition_fires_when_it_heals() {
    let store = SimStore::new(cfg(), 9);
    let a = open(&store, 0).await;
    let mut b = open(&store, 1).await;
    held(a.s.join(&node(0), 1).await);
    assert_eq!(
        b.s.join(&node(1), 1).await,
        JoinOutcome::Exists { epoch: None }
    );
    // The events arm the watch after the join: a round trip.
    tokio::time::sleep(MAX_LATENCY * 2).await;
    store.set_reachable(1, false);
    a.s.release().await.unwrap();
    // Shorter than the session timeout: b's session lives on.
    assert_eq!(next(&mut b.events, GRANTED / 2).await, None);
    store.set_reachable(1, true);
    // The client is back in its session: it says so first (stop 37), then the watch fires.
    assert_eq!(
        next(&mut b.events, MAX_LATENCY).await,
        Some(StoreEvent::Reconnected)
    );
    assert_eq!(
        next(&mut b.events, MAX_LATENCY).await,
        Some(StoreEvent::HolderGone { join: 1 })
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn polling_finds_the_same_events() {
    let every = ms(250);
    let store = SimStore::new(
        StoreConfig {
            watches: Watches::Polling { every },
            ..cfg()
        },
        10,
    );
    let mut a = open(&store, 0).await;
    let mut b = open(&store, 1).await;
    held(a.s.join(&node(0), 1).await);
    assert_eq!(
        b.s.join(&node(1), 4).await,
        JoinOutcome::Exists { epoch: None }
    );
    let paused = Control {
        paused: true,
        ..Control::default()
    };
    store.set_control(paused.clone());
    for events in [&mut a.events, &mut b.events] {
        assert_eq!(
            next(events, every + MAX_LATENCY * 2).await,
            Some(StoreEvent::Control(paused.clone()))
        );
    }
    // Unchanged control is not reported again.
    assert_eq!(next(&mut b.events, every * 3).await, None);
    a.s.release().await.unwrap();
    assert_eq!(
        next(&mut b.events, every + MAX_LATENCY * 2).await,
        Some(StoreEvent::HolderGone { join: 4 })
    );
    let mut a_events = a.events;
    assert_eq!(
        next(&mut a_events, every + MAX_LATENCY * 2).await,
        Some(StoreEvent::HolderGone { join: 1 })
    );
    // A lock taken anew between two looks counts as gone too.
    held(b.s.join(&node(1), 5).await);
    assert_eq!(
        a.s.join(&node(0), 2).await,
        JoinOutcome::Exists { epoch: None }
    );
    assert_eq!(next(&mut a_events, every).await, None);
    b.s.release().await.unwrap();
    held(b.s.join(&node(1), 6).await);
    assert_eq!(
        next(&mut a_events, every + MAX_LATENCY * 2).await,
        Some(StoreEvent::HolderGone { join: 2 })
    );
}

fn ttl() -> StoreConfig {
    StoreConfig {
        sessions: Sessions::Ttl {
            max_drift: 0.05,
            max_step: Duration::ZERO,
        },
        ..cfg()
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_jump_of_the_store_clock_ends_a_lease_early() {
    let store = SimStore::new(ttl(), 11);
    let mut a = open(&store, 0).await;
    let mut b = open(&store, 1).await;
    held(a.s.join(&node(0), 1).await);
    assert_eq!(
        b.s.join(&node(1), 1).await,
        JoinOutcome::Exists { epoch: None }
    );
    assert_eq!(
        a.s.renew(&member(0, Role::Active)).await,
        WriteOutcome::Done
    );
    // Connected and pinging, a lease lives on.
    tokio::time::sleep(GRANTED * 3).await;
    assert!(store.lock_holder().is_some());
    // a's lease has half of its time left, b's all of it (a fresh contact).
    store.set_reachable(0, false);
    tokio::time::sleep(GRANTED / 2).await;
    b.s.member("n1").await.unwrap();
    assert!(store.lock_holder().is_some());
    store.take_facts();
    // Whatever the drift, and expiry rounded up to a tick: past a's lease, not b's.
    store.step_clock(GRANTED / 2 + TICK * 2);
    assert_eq!(store.lock_holder(), None);
    assert!(matches!(
        store.take_facts().as_slice(),
        [Fact::LockGone {
            node: 0,
            expired: true,
            ..
        }]
    ));
    assert_eq!(
        next(&mut b.events, MAX_LATENCY).await,
        Some(StoreEvent::HolderGone { join: 1 })
    );
    held(b.s.join(&node(1), 2).await);
    // The store tells a at its next contact.
    assert_eq!(next(&mut a.events, GRANTED).await, None);
    store.set_reachable(0, true);
    assert_eq!(
        next(&mut a.events, MAX_LATENCY).await,
        Some(StoreEvent::SessionLost)
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn without_quorum_zookeeper_keeps_sessions_and_ttl_leases_run_out() {
    for (cfg, survives) in [(cfg(), true), (ttl(), false)] {
        let store = SimStore::new(cfg, 12);
        let a = open(&store, 0).await;
        held(a.s.join(&node(0), 1).await);
        store.set_up(false);
        assert_eq!(
            a.s.renew(&member(0, Role::Active)).await,
            WriteOutcome::Unknown
        );
        tokio::time::sleep(GRANTED * 3).await;
        assert!(
            store.lock_holder().is_some(),
            "nothing is deleted while down"
        );
        store.set_up(true);
        assert_eq!(store.lock_holder().is_some(), survives);
        assert_eq!(
            a.s.renew(&member(0, Role::Active)).await,
            if survives {
                WriteOutcome::Done
            } else {
                WriteOutcome::Unknown
            }
        );
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_frozen_process_sends_nothing_until_thawed() {
    let store = SimStore::new(cfg(), 13);
    let mut a = open(&store, 0).await;
    let mut b = open(&store, 1).await;
    held(a.s.join(&node(0), 1).await);
    assert_eq!(
        b.s.join(&node(1), 1).await,
        JoinOutcome::Exists { epoch: None }
    );
    store.set_frozen(0, 0, true);
    let renewal = tokio::spawn({
        let s = a.s.clone();
        async move { s.renew(&member(0, Role::Active)).await }
    });
    // No pings: the session expires while frozen.
    assert_eq!(
        next(&mut b.events, GRANTED * 2).await,
        Some(StoreEvent::HolderGone { join: 1 })
    );
    tokio::time::sleep(GRANTED).await;
    assert!(!renewal.is_finished());
    assert_eq!(next(&mut a.events, ms(1)).await, None);
    store.set_frozen(0, 0, false);
    assert_eq!(renewal.await.unwrap(), WriteOutcome::Unknown);
    assert_eq!(
        next(&mut a.events, MAX_LATENCY).await,
        Some(StoreEvent::SessionLost)
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn no_session_without_the_store() {
    let store = SimStore::new(cfg(), 14);
    store.set_up(false);
    let t = Instant::now();
    let err = store
        .connector(0, 0)
        .connect()
        .await
        .err()
        .expect("no session");
    assert!(matches!(err, StoreError::Unreachable { .. }), "{err}");
    assert_eq!(Instant::now() - t, OP_TIMEOUT);
    store.set_up(true);
    store.set_reachable(0, false);
    assert!(store.connector(0, 0).connect().await.is_err());
    // Every reply lost: no session either.
    let lossy = SimStore::new(StoreConfig { loss: 1.0, ..cfg() }, 14);
    assert!(lossy.connector(0, 0).connect().await.is_err());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn requests_of_a_session_land_in_the_order_sent() {
    let store = SimStore::new(
        StoreConfig {
            latency: (ms(1), ms(50)),
            ..cfg()
        },
        15,
    );
    let a = open(&store, 0).await;
    let (standby, ineligible) = (member(0, Role::Standby), member(0, Role::Ineligible));
    for _ in 0..20 {
        let (first, second) = tokio::join!(a.s.set_member(&standby), a.s.set_member(&ineligible));
        first.unwrap();
        second.unwrap();
        let (_, m) = a.s.member("n1").await.unwrap().unwrap();
        assert_eq!(m.unwrap().role, Role::Ineligible);
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_writes_that_matter_are_facts_in_order() {
    writes_that_matter(false).await;
}

/// The same on the ZooKeeper backend itself (`sim/zk_wire.rs`): its multi-ops, read off
/// the znode tree, make the same facts in the same order.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_zookeeper_backends_writes_that_matter_are_the_same_facts() {
    writes_that_matter(true).await;
}

/// The same on the MySQL backend itself (`sim/mysql_wire.rs`): its transactions, read off
/// the tables in memory, make the same facts in the same order.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_mysql_backends_writes_that_matter_are_the_same_facts() {
    writes_that_matter_on(StoreConfig {
        mysql: true,
        watches: Watches::Polling { every: ms(250) },
        sessions: Sessions::Ttl {
            max_drift: 0.0,
            max_step: Duration::ZERO,
        },
        ..cfg()
    })
    .await;
}

async fn writes_that_matter(zk_wire: bool) {
    writes_that_matter_on(StoreConfig { zk_wire, ..cfg() }).await;
}

async fn writes_that_matter_on(cfg: StoreConfig) {
    let zk_wire = cfg.zk_wire;
    let store = SimStore::new(cfg, 16);
    let a = open(&store, 0).await;
    let epoch = held(a.s.join(&node(0), 1).await);
    let state = a.s.read_state().await.unwrap();
    let rec = NodeRecord {
        epoch: Some(epoch),
        ..node(0)
    };
    let committed_at = Instant::now();
    assert_eq!(
        a.s.commit_promotion(&rec, None, state.control_version)
            .await,
        WriteOutcome::Done
    );
    assert_eq!(
        a.s.renew(&member(0, Role::Active)).await,
        WriteOutcome::Done
    );
    let recorded = NodeRecord {
        service_pid: Some(42),
        ..rec.clone()
    };
    assert_eq!(
        a.s.rewrite_own_breadcrumb(&recorded).await,
        WriteOutcome::Done
    );
    // Not ours for another epoch.
    let later = NodeRecord {
        epoch: Some(epoch + 1),
        ..rec.clone()
    };
    assert_eq!(
        a.s.rewrite_own_breadcrumb(&later).await,
        WriteOutcome::Conflict
    );
    assert!(!a
        .s
        .compare_and_delete_breadcrumb("n1", Some("inc-0"), Some(epoch + 1), true)
        .await
        .unwrap());
    assert!(a
        .s
        .compare_and_delete_breadcrumb("n1", Some("inc-0"), Some(epoch), true)
        .await
        .unwrap());
    a.s.release().await.unwrap();
    let facts = store.take_facts();
    let kinds: Vec<&str> = facts
        .iter()
        .map(|f| match f {
            Fact::LockTaken { .. } => "taken",
            Fact::Commit { .. } => "commit",
            Fact::Renewed { .. } => "renewed",
            Fact::Recorded { .. } => "recorded",
            Fact::BreadcrumbDeleted { .. } => "deleted",
            Fact::LockGone { .. } => "gone",
            Fact::RefusedRestarted { .. } => "refused",
        })
        .collect();
    assert_eq!(
        kinds,
        ["taken", "commit", "renewed", "renewed", "recorded", "deleted", "gone"]
    );
    match &facts[1] {
        Fact::Commit {
            node: 0,
            inc: 0,
            epoch: e,
            replaced: None,
            record,
            at,
            ..
        } => {
            assert_eq!((*e, record), (epoch, &rec));
            assert!(*at > committed_at);
        }
        other => panic!("{other:?}"),
    }
    match &facts[2] {
        // The model commits in one request; ZooKeeper's backend reads the floor first
        // (`tests/commit_floor.rs`), so its multi-op goes out a round trip later. The
        // elector's lease starts at its own send, the earlier: never later than this.
        Fact::Renewed { sent, at, .. } => {
            if zk_wire {
                assert!(*sent > committed_at);
            } else {
                assert_eq!(*sent, committed_at);
            }
            assert!(at > sent);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(&facts[4], Fact::Recorded { record, .. } if *record == recorded));
    assert!(matches!(
        &facts[5],
        Fact::BreadcrumbDeleted {
            by: Some((0, 0)),
            ..
        }
    ));

    // The operator's confirm, and a history the next takeover reads. (At the new lock's
    // epoch: ZooKeeper's commit raises the floor to its own epoch, so the first one's
    // again would be refused, as it must be once its breadcrumb is gone.)
    let epoch2 = held(a.s.join(&node(0), 2).await);
    let state = a.s.read_state().await.unwrap();
    let rec = NodeRecord {
        epoch: Some(epoch2),
        ..rec
    };
    assert_eq!(
        a.s.commit_promotion(&rec, None, state.control_version)
            .await,
        WriteOutcome::Done
    );
    store.confirm_fenced();
    assert!(matches!(
        store.take_facts().last(),
        Some(Fact::BreadcrumbDeleted { by: None, .. })
    ));
    assert_eq!(store.breadcrumb(), None);
    let entry = warden::record::HistoryEntry {
        at: "2026-01-01T00:00:00.000Z".into(),
        node_id: "n1".into(),
        from: "promoting".into(),
        to: "active".into(),
        epoch: Some(epoch),
        reason: "test".into(),
    };
    assert_eq!(a.s.append_history(&entry).await.unwrap(), None);
    let state = a.s.read_state().await.unwrap();
    assert_eq!(state.newest_promotion, Some(epoch));
    assert_eq!(state.history_by_node.get("n1"), Some(&epoch2));
    // The confirm is recorded as `warden fence --confirm` records it, newest first.
    let entries = a.s.read_history().await.unwrap().entries;
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(entries[0], entry);
    assert_eq!(
        (entries[1].to.as_str(), entries[1].epoch),
        ("confirmed down", Some(epoch2))
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_operator_commands_see_the_same_store() {
    let store = SimStore::new(cfg(), 17);
    let a = open(&store, 0).await;
    let epoch = held(a.s.join(&node(0), 1).await);
    let snap = a.s.snapshot().await.unwrap();
    assert_eq!(snap.lock_owner, Some(a.s.id()));
    assert_eq!(snap.lock.as_ref().map(|(_, e)| *e), Some(epoch));
    assert_eq!(snap.lock_holder_id(), Some("n1"));
    assert!(a.s.current_epoch().await.unwrap() > epoch);
    let cleared =
        a.s.clear_failover_request("n1", None, "2026-01-01T00:00:00Z")
            .await
            .unwrap();
    assert!(cleared, "no request counts as cleared");
    assert_eq!(
        a.s.name_of(coord::Item::Breadcrumb),
        "/warden/sim/breadcrumb"
    );
    let snap = a.s.snapshot().await.unwrap();
    a.s.delete_takeover_state(None, snap.control_version)
        .await
        .unwrap();
    assert_eq!(a.s.snapshot().await.unwrap().control_version, None);
    // The next takeover creates it again.
    let state = a.s.read_state().await.unwrap();
    assert_eq!(state.control, Control::default());
}

/// One scenario with lost replies and wide latencies, as the facts and outcomes it gives.
async fn scenario(seed: u64) -> Vec<String> {
    let t0 = Instant::now();
    let store = SimStore::new(
        StoreConfig {
            latency: (ms(1), ms(300)),
            loss: 0.2,
            ..cfg()
        },
        seed,
    );
    let mut out = Vec::new();
    let mut sessions = Vec::new();
    for i in 0..2 {
        match store.connector(i, 0).connect().await {
            Ok(s) => {
                let created = s.create_member(&member(i, Role::Standby)).await;
                out.push(format!("{i} registered {created:?}"));
                sessions.push((i, s));
            }
            Err(e) => out.push(format!("{i}: {e}")),
        }
    }
    for round in 0..10u64 {
        for (i, s) in &sessions {
            let outcome = s.join(&node(*i), round).await;
            out.push(format!("{:?} {i} join {outcome:?}", Instant::now() - t0));
            let renewed = s.renew(&member(*i, Role::Active)).await;
            out.push(format!("{:?} {i} renew {renewed:?}", Instant::now() - t0));
            if round % 3 == 2 {
                let released = s.release().await;
                out.push(format!(
                    "{:?} {i} release {released:?}",
                    Instant::now() - t0
                ));
            }
        }
        if round == 4 {
            store.set_reachable(0, false);
        }
        if round == 6 {
            store.set_reachable(0, true);
        }
    }
    let at = |t: &Instant| *t - t0;
    for f in store.take_facts() {
        out.push(match f {
            Fact::Commit { node, epoch, .. } => format!("commit {node} {epoch}"),
            Fact::Renewed {
                node, sent, at: t, ..
            } => {
                format!("renewed {node} {:?} {:?}", at(&sent), at(&t))
            }
            Fact::Recorded { node, .. } => format!("recorded {node}"),
            Fact::RefusedRestarted { node, .. } => format!("refused {node}"),
            Fact::BreadcrumbDeleted { by, .. } => format!("deleted by {by:?}"),
            Fact::LockTaken {
                node, epoch, at: t, ..
            } => {
                format!("taken {node} {epoch} {:?}", at(&t))
            }
            Fact::LockGone {
                node,
                expired,
                at: t,
                ..
            } => format!("gone {node} {expired} {:?}", at(&t)),
        });
    }
    out
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_seed_replays_exactly() {
    let first = scenario(99).await;
    assert_eq!(first, scenario(99).await);
    assert_ne!(first, scenario(100).await);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_observer_hears_each_fact_as_it_is_applied() {
    let store = SimStore::new(cfg(), 18);
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let h = heard.clone();
    let s2 = store.clone();
    // The observer may call the store: it runs outside the store's lock.
    store.observe(move |f| h.lock().unwrap().push((f.clone(), s2.lock_holder())));
    let a = open(&store, 0).await;
    let epoch = held(a.s.join(&node(0), 1).await);
    a.s.release().await.unwrap();
    let heard = heard.lock().unwrap().clone();
    assert!(matches!(
        heard.as_slice(),
        [
            (Fact::LockTaken { node: 0, .. }, Some((0, 0, e))),
            (Fact::LockGone { node: 0, expired: false, .. }, None),
        ] if *e == epoch
    ));
    assert!(store.take_facts().is_empty());
}

/// Takes the lock for `c` (node `i`) and commits a promotion with its epoch; returns it.
async fn promote(c: &Client, i: usize, join: u64) -> NodeRecord {
    let epoch = held(c.s.join(&node(i), join).await);
    let state = c.s.read_state().await.unwrap();
    let rec = NodeRecord {
        epoch: Some(epoch),
        ..node(i)
    };
    assert_eq!(
        c.s.commit_promotion(&rec, state.breadcrumb.version(), state.control_version)
            .await,
        WriteOutcome::Done
    );
    rec
}

/// SPEC §6 `follow`: every session hears of each committed promotion once, whether its
/// node joined (a standby behind the lock) or never did (priority 0, a failed follow),
/// as the backends' `StoreEvent::Active`; a lock not yet committed names no active.
/// [`next`], past `control` (the ZooKeeper backend hears of its creation by the first
/// takeover read).
async fn next_active(
    events: &mut UnboundedReceiver<StoreEvent>,
    within: Duration,
) -> Option<StoreEvent> {
    loop {
        match next(events, within).await {
            // (`Confirmed`, the breadcrumb of the active seen, follows its `Active` once
            // per epoch: the tracker's own test counts it.)
            Some(StoreEvent::Control(_) | StoreEvent::Confirmed(_)) => continue,
            other => return other,
        }
    }
}

async fn each_new_active_once(watches: Watches, seed: u64) {
    each_new_active_once_on(StoreConfig { watches, ..cfg() }, seed).await;
}

async fn each_new_active_once_on(store_cfg: StoreConfig, seed: u64) {
    let wait = match store_cfg.watches {
        Watches::Yes => MAX_LATENCY * 4,
        Watches::Polling { every } => every + MAX_LATENCY * 4,
    };
    let store = SimStore::new(store_cfg, seed);
    let a = open(&store, 0).await;
    let mut b = open(&store, 1).await;
    let mut c = open(&store, 2).await;
    let first = promote(&a, 0, 1).await;
    assert_eq!(
        b.s.join(&node(1), 1).await,
        JoinOutcome::Exists { epoch: first.epoch }
    );
    for events in [&mut b.events, &mut c.events] {
        assert_eq!(
            next_active(events, wait).await,
            Some(StoreEvent::Active(first.clone()))
        );
        assert_eq!(next_active(events, wait * 2).await, None, "once per epoch");
    }
    // The holder goes; the next lock is only taken, then committed.
    a.s.release().await.unwrap();
    assert_eq!(
        next_active(&mut b.events, wait).await,
        Some(StoreEvent::HolderGone { join: 1 })
    );
    let second = promote(&b, 1, 2).await;
    assert!(second.epoch > first.epoch);
    assert_eq!(
        next_active(&mut c.events, wait * 2).await,
        Some(StoreEvent::Active(second.clone()))
    );
    // The holder hears of its own commit too (the elector knows its own record), then
    // of its lock's end, then of the next active.
    let mut a_events = a.events;
    assert_eq!(
        next_active(&mut a_events, wait).await,
        Some(StoreEvent::Active(first))
    );
    assert_eq!(
        next_active(&mut a_events, wait).await,
        Some(StoreEvent::HolderGone { join: 1 })
    );
    assert_eq!(
        next_active(&mut a_events, wait * 2).await,
        Some(StoreEvent::Active(second))
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn every_session_hears_of_each_new_active_once() {
    each_new_active_once(Watches::Yes, 21).await;
}

/// The same on the ZooKeeper backend itself: its watches on the lock and the breadcrumb,
/// over the simulated client.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn on_the_zookeeper_backend_every_session_hears_of_each_new_active_once() {
    each_new_active_once_on(
        StoreConfig {
            zk_wire: true,
            ..cfg()
        },
        23,
    )
    .await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn polling_hears_of_each_new_active_once() {
    each_new_active_once(Watches::Polling { every: ms(250) }, 22).await;
}

/// SPEC §3a on the ZooKeeper backend itself: what the floor keeps counts as seen in the
/// takeover read, also when no member record shows it (a node raises its entry, then
/// registers: seed 81846 promoted between the two, below an epoch the floor held).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn on_the_zookeeper_backend_the_floor_counts_as_seen_in_the_takeover_read() {
    let store = SimStore::new(
        StoreConfig {
            zk_wire: true,
            ..cfg()
        },
        24,
    );
    let a = open(&store, 0).await;
    let b = open(&store, 1).await;
    let seen = MemberRecord {
        node: NodeRecord {
            epoch_seen: Some(50),
            ..node(1)
        },
        ..member(1, Role::Standby)
    };
    b.s.set_member(&seen).await.unwrap();
    b.s.delete_member("n2").await.unwrap();
    assert_eq!(store.floor_max(), Some(50));
    let state = a.s.read_state().await.unwrap();
    assert_eq!(state.members_epoch_seen, Some(50));
}
