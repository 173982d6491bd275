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

/// SIGSTOP of the active's warden past the session, its service still running: the
/// standby fences the old incarnation before its own service starts.
#[test]
fn a_frozen_active_warden_is_fenced_before_the_standby_starts() {
    let db = MariaDb::start();
    let cluster = cluster_on(&db);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let wardens = start_active_then_standbys(&n1, &[&n2]);
    let old = n1.last_run().unwrap();
    let freeze_ns = mono_now_ns();
    wardens[0].sigstop();
    wait_until(
        secs(5),
        "n1's service runs on with its warden frozen",
        || {
            n1.last_run()
                .is_some_and(|r| r.last_ns > freeze_ns + nanos(ms(300)))
        },
    );
    wait_for_status(&n2.config, secs(30), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    let new = wait_for(secs(5), "n2's service started", || n2.last_run());
    let old_after = n1.runs().into_iter().find(|r| r.pid == old.pid).unwrap();
    assert!(
        old_after.last_ns < new.start_ns,
        "the old service ticked at {} after the new one started at {}",
        old_after.last_ns,
        new.start_ns
    );
    assert!(!process_alive(old.pid), "the old service was not fenced");
    assert!(
        cluster.fence_calls().contains(&"n2 n1".to_string()),
        "no fencing of n1: {:?}",
        cluster.fence_calls()
    );
    assert!(new.epoch > old.epoch, "{old} then {new}");
    cluster.assert_safe();
}

/// Every fence method fails: the standby never promotes while the old service lives, and
/// its log says what failed and what the operator can do.
#[test]
fn every_fence_failing_means_no_promotion() {
    let db = MariaDb::start();
    let cluster = cluster_on(&db);
    let calls = cluster.dir().join("fail-calls");
    let fail = cluster.script(
        "fence-fail.sh",
        &format!(
            "echo \"$WARDEN_TARGET_NODE_ID\" >> '{}'\necho 'fence-fail: the PDU refused' >&2\nexit 1\n",
            calls.display()
        ),
    );
    let n1 = cluster.node("n1");
    let n2 = cluster.node_with(
        "n2",
        NodeOptions {
            fences: Some(vec![script_fence(&[&fail.display().to_string()], secs(5))]),
            ..Default::default()
        },
    );
    let wardens = start_active_then_standbys(&n1, &[&n2]);
    let old = n1.last_run().unwrap();
    wardens[0].sigstop();
    wait_until(secs(60), "n2 has tried to fence n1 twice", || {
        std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .lines()
            .count()
            >= 2
    });
    assert!(n2.runs().is_empty(), "n2 promoted: {:?}", n2.runs());
    assert!(process_alive(old.pid), "the old service died: no premise");
    let status = status_json(&n2.config);
    assert_eq!(active_id(&status), None, "{status:#}");
    let log = wardens[1].log();
    for needle in ["fence-fail", "fence --confirm"] {
        assert!(log.contains(needle), "n2's log lacks {needle:?}:\n{log}");
    }
    wardens[0].kill9();
    cluster.assert_safe();
}

/// The database restarted with its data (SIGKILL, InnoDB recovery): one node serves again,
/// nobody sees lost data, and an epoch never goes back.
#[test]
fn a_database_restarted_with_its_data_elects_again() {
    let mut db = MariaDb::start();
    let cluster = cluster_on(&db);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let _wardens = start_active_then_standbys(&n1, &[&n2]);
    let old = n1.last_run().unwrap();
    db.restart();
    let status = wait_for_status(&n1.config, secs(60), "a node is active again", |s| {
        active_id(s).is_some()
    });
    assert_eq!(status["lost_data"], false, "{status:#}");
    assert!(active_epoch(&status) >= old.epoch, "{status:#}");
    wait_until(secs(10), "the active's service runs", || {
        let s = status_json(&n1.config);
        match active_id(&s).as_deref() {
            Some("n1") => n1.last_run().is_some_and(|r| process_alive(r.pid)),
            Some("n2") => n2.last_run().is_some_and(|r| process_alive(r.pid)),
            _ => false,
        }
    });
    cluster.assert_safe();
}

/// The database wiped (restarted empty) while n1 is active: n1's service is down by its
/// lease end, nobody promotes, `status` says the store lost data; plain `init` is not the
/// way out, `init --force` is, and the next active's epoch is above the old one.
#[test]
fn a_wiped_database_blocks_every_promotion_until_init_force() {
    let mut db = MariaDb::start();
    let cluster = cluster_on(&db);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let _wardens = start_active_then_standbys(&n1, &[&n2]);
    let old = n1.last_run().unwrap();
    // n1 has published what it has seen.
    wait_for_status(&n1.config, secs(10), "n1's record carries its epoch", |s| {
        s["members"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["epoch_seen"] == old.epoch.unwrap()))
    });
    let wipe_ns = mono_now_ns();
    db.restart_empty();
    wait_until(secs(10), "n1's service stopped", || !process_alive(old.pid));
    let run = n1.runs().into_iter().find(|r| r.pid == old.pid).unwrap();
    let lease = cluster.session_timeout / 2;
    assert!(
        ns(run.last_ns.saturating_sub(wipe_ns)) <= lease,
        "n1's service ran {:?} past the wipe, beyond its {lease:?} lease",
        ns(run.last_ns.saturating_sub(wipe_ns))
    );
    let status = status_json(&n1.config);
    assert_eq!(status["lost_data"], true, "{status:#}");
    assert_eq!(active_id(&status), None, "{status:#}");
    let text = cli(&n1.config, &["status"]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("init --force"),
        "{}",
        describe(&text)
    );

    let out = cli(&n1.config, &["init", "--force"]);
    assert!(out.status.success(), "{}", describe(&out));
    let status = wait_for_status(&n1.config, secs(30), "a node is active again", |s| {
        active_id(s).is_some()
    });
    assert_eq!(status["lost_data"], false, "{status:#}");
    let epoch = active_epoch(&status).unwrap();
    assert!(
        Some(epoch) > old.epoch,
        "epoch {epoch} after {:?}",
        old.epoch
    );
    // Nobody served between the wipe and init --force.
    for n in [&n1, &n2] {
        for r in n.runs() {
            assert!(
                r.pid == old.pid || r.epoch > old.epoch,
                "{} served with epoch {:?} after the wipe",
                n.id,
                r.epoch
            );
        }
    }
    cluster.assert_safe();
}

/// A store whose epoch counter went back (a restore from an old backup) while wardens
/// run: nobody promotes, plain `init` refuses, `init --force` raises the counter.
#[test]
fn an_epoch_counter_that_went_back_is_lost_data() {
    let db = MariaDb::start();
    let cluster = cluster_on(&db);
    let n1 = cluster.node("n1");
    let mut wardens = start_active_then_standbys(&n1, &[]);
    let old = n1.last_run().unwrap();
    wait_for_status(&n1.config, secs(10), "n1's record carries its epoch", |s| {
        s["members"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["epoch_seen"] == old.epoch.unwrap()))
    });
    // The restore: the counter back at 0 and the lock gone, n1 still running.
    db.sql(&format!(
        "UPDATE warden.warden_epoch SET epoch = 0 WHERE cluster = '{0}'; \
         DELETE FROM warden.warden_lock WHERE cluster = '{0}'",
        cluster.name
    ));
    wait_for_status(
        &n1.config,
        secs(30),
        "status says the store lost data",
        |s| s["lost_data"] == true && active_id(s).is_none(),
    );
    wait_until(secs(10), "n1's service stopped", || !process_alive(old.pid));
    let refused = cli(&n1.config, &["init"]);
    assert_eq!(refused.status.code(), Some(1), "{}", describe(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("init --force"),
        "{}",
        describe(&refused)
    );
    assert_eq!(n1.runs().len(), 1, "n1 served again on a lost store");
    let out = cli(&n1.config, &["init", "--force"]);
    assert!(out.status.success(), "{}", describe(&out));
    let status = wait_for_status(&n1.config, secs(30), "n1 is active again", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    assert!(active_epoch(&status) > old.epoch, "{status:#}");
    assert!(wardens[0].is_running());
    cluster.assert_safe();
}

/// Two wardens with one node_id: the second exits 2 naming it; the first is undisturbed.
#[test]
fn two_nodes_with_one_node_id_the_second_refuses() {
    let db = MariaDb::start();
    let cluster = cluster_on(&db);
    let n1 = cluster.node("n1");
    let mut wardens = start_active_then_standbys(&n1, &[]);
    let epoch = active_epoch(&status_json(&n1.config)).unwrap();
    let mut second = Warden::start(&n1.config);
    let exit = second.wait_exit(secs(15));
    assert_eq!(exit.code(), Some(2), "{exit}\n{}", second.log());
    assert!(second.log_mentions("node_id"), "{}", second.log());
    assert!(wardens[0].is_running());
    let status = status_json(&n1.config);
    assert_eq!(active_id(&status).as_deref(), Some("n1"));
    assert_eq!(active_epoch(&status), Some(epoch));
    assert_eq!(n1.runs().len(), 1, "the service was restarted");
    cluster.assert_safe();
}

/// Garbage in rows: an unreadable breadcrumb blocks promotion until `fence --confirm
/// --unreadable`; unreadable control reads as the default and `status` says so.
#[test]
fn garbage_in_a_row_blocks_promotion_until_confirmed() {
    let db = MariaDb::start();
    let cluster = cluster_on(&db);
    db.sql(&format!(
        "INSERT INTO warden.warden_kv (cluster, name, value, version) VALUES \
         ('{0}', 'breadcrumb', 0xfffe7b206e6f74, 0), ('{0}', 'control', 'not json', 0)",
        cluster.name
    ));
    let n1 = cluster.node_with(
        "n1",
        NodeOptions {
            fences: Some(vec![signal_fence()]),
            ..Default::default()
        },
    );
    let mut warden = n1.start();
    warden.wait_for_log("fence --confirm", secs(30));
    let status = status_json(&n1.config);
    assert_eq!(active_id(&status), None, "{status:#}");
    assert!(status["control_unreadable"].is_string(), "{status:#}");
    assert!(status["breadcrumb"]["unreadable"].is_string(), "{status:#}");
    assert!(
        n1.runs().is_empty(),
        "n1 promoted past an unknown old active"
    );
    let out = cli(&n1.config, &["fence", "--confirm", "--unreadable"]);
    assert!(out.status.success(), "{}", describe(&out));
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    assert!(warden.is_running());
    cluster.assert_safe();
}
