//! The election on a real MariaDB server (issue 13, SPEC §3a): the same scenarios as on
//! ZooKeeper, with "never two actives" proven from the services' own journals.

mod common;

use common::mariadb::MariaDb;
use common::*;

/// A cluster on a fresh MariaDB, initialized by `warden init`.
fn cluster_on(db: &MariaDb) -> Cluster {
    let cluster = Cluster::with_mysql(db);
    let n = cluster.node("init");
    let out = cli(&n.config, &["init"]);
    assert!(out.status.success(), "warden init: {}", describe(&out));
    cluster
}

#[test]
fn run_refuses_a_database_without_init_and_names_it() {
    let db = MariaDb::start();
    let cluster = Cluster::with_mysql(&db);
    let n1 = cluster.node("n1");
    let mut w = n1.start();
    let status = w.wait_exit(secs(30));
    assert_eq!(status.code(), Some(2), "{}", w.log());
    assert!(w.log_mentions("run `warden init` first"), "{}", w.log());
    // After init it runs, and is active.
    let out = cli(&n1.config, &["init"]);
    assert!(out.status.success(), "{}", describe(&out));
    let _w = n1.start();
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
}

/// Three nodes elect one; `kill -9` of the active's warden: its service dies with it, a
/// standby fences the old incarnation once its rows expire, and takes over with a greater
/// epoch.
#[test]
fn three_nodes_elect_one_and_a_killed_active_is_fenced_and_replaced() {
    let db = MariaDb::start();
    let cluster = cluster_on(&db);
    let (n1, n2, n3) = (cluster.node("n1"), cluster.node("n2"), cluster.node("n3"));
    let mut wardens = start_active_then_standbys(&n1, &[&n2, &n3]);
    let status = status_json(&n1.config);
    assert_eq!(status["backend"], "mysql", "{status:#}");
    assert_eq!(member_ids(&status), ["n1", "n2", "n3"]);
    let old = n1.last_run().unwrap();

    let kill_ns = mono_now_ns();
    wardens[0].kill9();
    wardens[0].wait_exit(secs(5));
    let status = wait_for_status(&n2.config, secs(30), "another node is active", |s| {
        matches!(active_id(s).as_deref(), Some("n2" | "n3"))
    });
    let winner = active_id(&status).unwrap();
    let node = if winner == "n2" { &n2 } else { &n3 };
    let new = wait_for(secs(5), "the new active's service started", || {
        node.last_run()
    });
    assert!(new.epoch > old.epoch, "{old} then {new}");
    assert!(
        ns(new.start_ns - kill_ns) > cluster.session_timeout / 2,
        "{winner} took over {:?} after the kill, before n1's rows could expire",
        ns(new.start_ns - kill_ns)
    );
    assert!(
        cluster.fence_calls().contains(&format!("{winner} n1")),
        "{winner} promoted without fencing n1: {:?}",
        cluster.fence_calls()
    );
    cluster.assert_safe();
}

/// A service crash hands over without fencing; SIGTERM of the active hands over cleanly.
#[test]
fn crash_and_sigterm_hand_over_without_fencing() {
    let db = MariaDb::start();
    let cluster = cluster_on(&db);
    let n1 = cluster.node_with(
        "n1",
        NodeOptions {
            service_args: vec!["--exit-after".into(), "2s".into()],
            ..NodeOptions::default()
        },
    );
    let n2 = cluster.node("n2");
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);
    wait_for_status(&n2.config, secs(30), "n2 is active after n1's crash", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    assert!(
        cluster.fence_calls().is_empty(),
        "a crash handover fenced: {:?}",
        cluster.fence_calls()
    );
    let n3 = cluster.node("n3");
    wardens.push(n3.start());
    wait_for_status(&n3.config, secs(30), "n3 is a standby", |s| {
        member_role(s, "n3").as_deref() == Some("standby")
    });
    wardens[1].sigterm();
    assert_eq!(wardens[1].wait_exit(secs(10)).code(), Some(0));
    wait_for_status(
        &n3.config,
        secs(30),
        "n3 is active after n2's SIGTERM",
        |s| active_id(s).as_deref() == Some("n3"),
    );
    assert!(
        cluster.fence_calls().is_empty(),
        "a clean handover fenced: {:?}",
        cluster.fence_calls()
    );
    cluster.assert_safe();
}

/// The operator commands work unchanged: failover --to, pause/resume, history.
#[test]
fn operator_commands_work_on_mysql() {
    let db = MariaDb::start();
    let cluster = cluster_on(&db);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let _wardens = start_active_then_standbys(&n1, &[&n2]);
    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "20s"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("new active: n2"),
        "{}",
        describe(&out)
    );
    let out = cli(&n1.config, &["pause", "--reason", "maintenance"]);
    assert!(out.status.success(), "{}", describe(&out));
    let s = status_json(&n1.config);
    assert_eq!(s["paused"], true, "{s:#}");
    let out = cli(&n1.config, &["failover"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "refused while paused: {}",
        describe(&out)
    );
    let out = cli(&n1.config, &["resume"]);
    assert!(out.status.success(), "{}", describe(&out));
    let out = cli(&n1.config, &["history"]);
    assert!(out.status.success(), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("n2") && text.contains("paused"), "{text}");
    cluster.assert_safe();
}

/// The database frozen (SIGSTOP of mariadbd) for 0.65 x session: the active cannot renew,
/// its service is down by the end of its lease, and once the database answers again the
/// same node serves again: 0.65 x session plus the time since its last renewal is less
/// than the session, so its rows had not expired on the server's clock.
#[test]
fn a_frozen_database_takes_the_service_down_by_the_lease_end() {
    let mut db = MariaDb::start();
    let cluster = cluster_on(&db);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let _wardens = start_active_then_standbys(&n1, &[&n2]);
    let before = n1.last_run().unwrap();
    let freeze_ns = mono_now_ns();
    db.freeze();
    wait_until(
        secs(10),
        "n1's service stopped while the database is frozen",
        || !process_alive(before.pid),
    );
    let run = n1.runs().into_iter().find(|r| r.pid == before.pid).unwrap();
    let lease = cluster.session_timeout / 2;
    assert!(
        ns(run.last_ns.saturating_sub(freeze_ns)) <= lease,
        "n1's service ran {:?} into the freeze, past its {lease:?} lease",
        ns(run.last_ns.saturating_sub(freeze_ns))
    );
    let hold = cluster.session_timeout.mul_f64(0.65);
    let frozen_for = ns(mono_now_ns() - freeze_ns);
    if frozen_for < hold {
        std::thread::sleep(hold - frozen_for);
    }
    db.thaw();
    wait_for_status(&n1.config, secs(30), "n1 is active again", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    cluster.assert_safe();
}
