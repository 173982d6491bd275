//! The election on a real MariaDB and a real Redis (issues 13 and 14, SPEC §3a): the same
//! scenarios as on ZooKeeper, written once for any [`TestStore`] and run on each, with
//! "never two actives" proven from the services' own journals.

mod common;

use common::mariadb::MariaDb;
use common::redis::RedisServer;
use common::*;

/// A store server the scenarios run against.
trait TestStore: Sized {
    /// `status --json`'s `backend`.
    const BACKEND: &'static str;
    fn start() -> Self;
    /// A cluster pointed at this server (not initialized).
    fn cluster(&self) -> Cluster;
    /// SIGSTOP / SIGCONT of the server.
    fn freeze(&mut self);
    fn thaw(&mut self);
    /// Restarted with its data.
    fn restart(&mut self);
    /// Wiped: restarted without its data (MySQL: a fresh datadir; Redis: without
    /// persistence).
    fn restart_empty(&mut self);
    /// A restore from an old backup: the epoch counter back at 0, the lock gone.
    fn roll_back_epoch(&self, cluster: &str);
    /// Garbage in the breadcrumb and in control.
    fn put_garbage(&self, cluster: &str);
    /// A backup of the cluster's state as it is now, for [`restore`](Self::restore).
    type Backup;
    fn backup(&self, cluster: &str) -> Self::Backup;
    /// The cluster's state put back as `backup` had it (a restore from a backup, or a
    /// crash that lost the writes since), whatever was written since; but without the
    /// lock, which expired meanwhile (a restore or restart that took longer than a
    /// session timeout).
    fn restore(&self, cluster: &str, backup: &Self::Backup);
    /// The store keeps `epoch` as what `node` has seen, for good (SPEC §3a, the floor), as
    /// a node's member record with that `epoch_seen` would have it kept.
    fn keep_seen(&self, cluster: &str, node: &str, epoch: &str);
    /// What the store keeps of the floor, as text.
    fn kept_seen(&self, cluster: &str) -> String;
    /// Sets the cluster's epoch counter to `epoch` (the next promotion gets `epoch + 1`).
    fn set_counter(&self, cluster: &str, epoch: u64);
    /// Loses some of what the store keeps, as a careless DBA would: each of `what`
    /// (`counter`, `lock`, `members`, `floor`, `breadcrumb`, `history`; MySQL drops the table that holds it, for
    /// every cluster; Redis deletes the cluster's keys).
    fn forget(&self, cluster: &str, what: &[&str]);
    /// Puts `history` (a JSON array of entries) in the store as the cluster's history.
    fn put_history(&self, cluster: &str, history: &str);
    /// Makes `node`'s member record say `role` and keeps it live for an hour, as the record
    /// of a warden that wrote it and died would look until it expires.
    fn hold_member_as(&self, cluster: &str, node: &str, role: &str);
}

impl TestStore for MariaDb {
    const BACKEND: &'static str = "mysql";
    fn start() -> Self {
        MariaDb::start()
    }
    fn cluster(&self) -> Cluster {
        Cluster::with_mysql(self)
    }
    fn freeze(&mut self) {
        MariaDb::freeze(self)
    }
    fn thaw(&mut self) {
        MariaDb::thaw(self)
    }
    fn restart(&mut self) {
        MariaDb::restart(self)
    }
    fn restart_empty(&mut self) {
        MariaDb::restart_empty(self)
    }
    fn roll_back_epoch(&self, cluster: &str) {
        self.sql(&format!(
            "UPDATE warden.warden_epoch SET epoch = 0 WHERE cluster = '{cluster}'; \
             DELETE FROM warden.warden_lock WHERE cluster = '{cluster}'"
        ));
    }
    fn put_garbage(&self, cluster: &str) {
        self.sql(&format!(
            "INSERT INTO warden.warden_kv (cluster, name, value, version) VALUES \
             ('{cluster}', 'breadcrumb', 0xfffe7b206e6f74, 0), \
             ('{cluster}', 'control', 'not json', 0)"
        ));
    }
    type Backup = String;
    fn backup(&self, cluster: &str) -> String {
        self.dump_rows(cluster)
    }
    fn restore(&self, cluster: &str, backup: &String) {
        self.restore_rows(cluster, backup);
        self.sql(&format!(
            "DELETE FROM warden.warden_lock WHERE cluster = '{cluster}'"
        ));
    }
    fn keep_seen(&self, cluster: &str, node: &str, epoch: &str) {
        self.sql(&format!(
            "REPLACE INTO warden.warden_kv (cluster, name, value, version) VALUES \
             ('{cluster}', 'seen/{node}', '{epoch}', 0)"
        ));
    }
    fn kept_seen(&self, cluster: &str) -> String {
        self.sql(&format!(
            "SELECT name, CAST(value AS CHAR) FROM warden.warden_kv WHERE cluster = '{cluster}' \
             AND name LIKE 'seen/%'"
        ))
    }
    fn set_counter(&self, cluster: &str, epoch: u64) {
        self.sql(&format!(
            "UPDATE warden.warden_epoch SET epoch = {epoch} WHERE cluster = '{cluster}'"
        ));
    }
    fn forget(&self, cluster: &str, what: &[&str]) {
        for w in what {
            match *w {
                "counter" => self.sql("DROP TABLE warden.warden_epoch"),
                "lock" => self.sql("DROP TABLE warden.warden_lock"),
                "lock row" => self.sql(&format!(
                    "DELETE FROM warden.warden_lock WHERE cluster = '{cluster}'"
                )),
                "members" => self.sql("DROP TABLE warden.warden_member"),
                // The floor's rows live in kv, beside the breadcrumb and history.
                "floor" => self.sql(&format!(
                    "DELETE FROM warden.warden_kv WHERE cluster = '{cluster}' AND name LIKE \
                     'seen/%'"
                )),
                "breadcrumb" | "history" => self.sql(&format!(
                    "DELETE FROM warden.warden_kv WHERE cluster = '{cluster}' AND name = '{w}'"
                )),
                other => panic!("nothing called {other} to forget"),
            };
        }
    }
    fn put_history(&self, cluster: &str, history: &str) {
        self.sql(&format!(
            "REPLACE INTO warden.warden_kv (cluster, name, value, version) VALUES \
             ('{cluster}', 'history', '{history}', 0)"
        ));
    }
    fn hold_member_as(&self, cluster: &str, node: &str, role: &str) {
        self.sql(&format!(
            "UPDATE warden.warden_member SET record = JSON_SET(CAST(record AS CHAR), \
             '$.role', '{role}'), renewed_at = NOW(6) + INTERVAL 1 HOUR WHERE cluster = \
             '{cluster}' AND node_id = '{node}'"
        ));
    }
}

impl TestStore for RedisServer {
    const BACKEND: &'static str = "redis";
    fn start() -> Self {
        RedisServer::start()
    }
    fn cluster(&self) -> Cluster {
        Cluster::with_redis(self)
    }
    fn freeze(&mut self) {
        RedisServer::freeze(self)
    }
    fn thaw(&mut self) {
        RedisServer::thaw(self)
    }
    fn restart(&mut self) {
        RedisServer::restart(self)
    }
    fn restart_empty(&mut self) {
        RedisServer::restart_empty(self)
    }
    fn roll_back_epoch(&self, cluster: &str) {
        self.cli(&["SET", &format!("warden:{{{cluster}}}:epoch"), "0"]);
        self.cli(&["DEL", &format!("warden:{{{cluster}}}:lock")]);
    }
    fn put_garbage(&self, cluster: &str) {
        let key = |n: &str| format!("warden:{{{cluster}}}:{n}");
        self.cli(&[
            "HSET",
            &key("breadcrumb"),
            "data",
            "\u{1}{ not a record",
            "version",
            "0",
        ]);
        self.cli(&["HSET", &key("control"), "data", "not json", "version", "0"]);
    }
    type Backup = Vec<(String, Vec<u8>, i64)>;
    fn backup(&self, cluster: &str) -> Self::Backup {
        self.dump_keys(cluster)
    }
    fn restore(&self, cluster: &str, backup: &Self::Backup) {
        let lock = format!("warden:{{{cluster}}}:lock");
        let without_lock: Self::Backup = backup
            .iter()
            .filter(|(k, ..)| *k != lock)
            .cloned()
            .collect();
        self.restore_keys(cluster, &without_lock)
    }
    fn keep_seen(&self, cluster: &str, node: &str, epoch: &str) {
        self.cli(&["HSET", &format!("warden:{{{cluster}}}:seen"), node, epoch]);
    }
    fn kept_seen(&self, cluster: &str) -> String {
        self.cli(&["HGETALL", &format!("warden:{{{cluster}}}:seen")])
    }
    fn set_counter(&self, cluster: &str, epoch: u64) {
        self.cli(&[
            "SET",
            &format!("warden:{{{cluster}}}:epoch"),
            &epoch.to_string(),
        ]);
    }
    fn forget(&self, cluster: &str, what: &[&str]) {
        let key = |n: &str| format!("warden:{{{cluster}}}:{n}");
        for w in what {
            match *w {
                "counter" => self.cli(&["DEL", &key("epoch")]),
                "lock" | "lock row" => self.cli(&["DEL", &key("lock")]),
                "members" => self.cli(&["DEL", &key("member:n1")]),
                "floor" => self.cli(&["DEL", &key("seen")]),
                "breadcrumb" => self.cli(&["DEL", &key("breadcrumb")]),
                "history" => self.cli(&["DEL", &key("history")]),
                other => panic!("nothing called {other} to forget"),
            };
        }
    }
    fn put_history(&self, cluster: &str, history: &str) {
        let key = format!("warden:{{{cluster}}}:history");
        self.cli(&["HSET", &key, "data", history, "version", "0"]);
    }
    fn hold_member_as(&self, cluster: &str, node: &str, role: &str) {
        let key = format!("warden:{{{cluster}}}:member:{node}");
        let data = self.cli(&["HGET", &key, "record"]);
        let mut record: serde_json::Value =
            serde_json::from_str(data.trim()).unwrap_or_else(|e| panic!("{data:?}: {e}"));
        record["role"] = role.into();
        self.cli(&["HSET", &key, "record", &record.to_string()]);
        self.cli(&["PEXPIRE", &key, "3600000"]);
    }
}

/// Every scenario, once for each store.
macro_rules! on_every_store {
    ($($scenario:ident),* $(,)?) => {
        mod mysql {
            $(#[test] fn $scenario() { super::$scenario::<super::MariaDb>() })*
        }
        mod redis {
            $(#[test] fn $scenario() { super::$scenario::<super::RedisServer>() })*
        }
    };
}

on_every_store!(
    run_refuses_a_store_without_init_and_names_it,
    three_nodes_elect_one_and_a_killed_active_is_fenced_and_replaced,
    crash_and_sigterm_hand_over_without_fencing,
    operator_commands_work,
    a_frozen_store_takes_the_service_down_by_the_lease_end,
    an_active_whose_breadcrumb_the_store_forgot_leaves_the_lock,
    an_active_writes_back_a_breadcrumb_the_store_forgot_and_is_fenced_once_killed,
    a_frozen_active_warden_is_fenced_before_the_standby_starts,
    every_fence_failing_means_no_promotion,
    a_store_restarted_with_its_data_elects_again,
    a_wiped_store_blocks_every_promotion_until_init_force,
    an_epoch_counter_that_went_back_is_lost_data,
    a_store_that_forgot_the_last_promotion_promotes_nobody_until_init_force,
    a_session_that_outlived_a_store_restart_takes_no_lock,
    an_active_whose_commit_a_restarted_store_forgot_is_fenced_from_memory,
    an_entry_of_the_forgotten_epoch_is_no_trace_of_its_end,
    a_remembered_active_whose_live_record_says_neutral_is_fenced,
    a_remembered_active_whose_live_record_stays_demoting_is_fenced,
    an_active_only_a_standby_remembers_is_fenced_by_a_winner_that_never_saw_it,
    an_active_only_a_standby_remembers_is_fenced_by_a_winner_started_at_once,
    an_active_learned_from_a_lock_that_outlived_its_breadcrumb_is_fenced,
    a_switchover_after_a_store_restart_fences_nobody,
    a_dead_member_sets_the_floor_for_status_and_init_force_too,
    two_nodes_with_one_node_id_the_second_refuses,
    garbage_in_the_store_blocks_promotion_until_confirmed,
    a_floor_at_the_greatest_epoch_is_cleared_by_init_force,
    a_garbage_floor_entry_of_a_node_is_raised_past_and_does_not_unsettle_it,
    init_force_raises_the_counter_above_every_epoch_a_surviving_record_names,
);

/// A cluster on a fresh store, initialized by `warden init`.
fn cluster_on<S: TestStore>(db: &S) -> Cluster {
    let cluster = db.cluster();
    let n = cluster.node("init");
    let out = cli(&n.config, &["init"]);
    assert!(out.status.success(), "warden init: {}", describe(&out));
    cluster
}

fn run_refuses_a_store_without_init_and_names_it<S: TestStore>() {
    let db = S::start();
    let cluster = db.cluster();
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
fn three_nodes_elect_one_and_a_killed_active_is_fenced_and_replaced<S: TestStore>() {
    let db = S::start();
    let cluster = cluster_on(&db);
    let (n1, n2, n3) = (cluster.node("n1"), cluster.node("n2"), cluster.node("n3"));
    let mut wardens = start_active_then_standbys(&n1, &[&n2, &n3]);
    let status = status_json(&n1.config);
    assert_eq!(status["backend"], S::BACKEND, "{status:#}");
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
fn crash_and_sigterm_hand_over_without_fencing<S: TestStore>() {
    let db = S::start();
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
fn operator_commands_work<S: TestStore>() {
    let db = S::start();
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

/// Freezes the store until `active`'s service is down by its lease end, holds it frozen
/// for 0.65 x session in all (the active's rows or keys have not expired on the server's
/// clock: 0.65 x session plus the time since its last renewal is less than the session),
/// and thaws it. Returns when the freeze began.
fn freeze_past_the_lease<S: TestStore>(db: &mut S, cluster: &Cluster, active: &Node) -> u64 {
    let before = active.last_run().unwrap();
    let freeze_ns = mono_now_ns();
    db.freeze();
    wait_until(
        secs(10),
        &format!("{}'s service stopped while the store is frozen", active.id),
        || !process_alive(before.pid),
    );
    let hold = cluster.session_timeout.mul_f64(0.65);
    let frozen_for = ns(mono_now_ns() - freeze_ns);
    if frozen_for < hold {
        // The freeze's length is the fault itself, not a wait for a condition.
        std::thread::sleep(hold - frozen_for);
    }
    db.thaw();
    freeze_ns
}

/// The store frozen (SIGSTOP of the server) for 0.65 x session: the active cannot renew,
/// its service is down by the end of its lease, and once the store answers again the same
/// node serves again: 0.65 x session plus the time since its last renewal is less than
/// the session, so its rows or keys had not expired on the server's clock.
fn a_frozen_store_takes_the_service_down_by_the_lease_end<S: TestStore>() {
    let mut db = S::start();
    let cluster = cluster_on(&db);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let _wardens = start_active_then_standbys(&n1, &[&n2]);
    let before = n1.last_run().unwrap();
    let freeze_ns = freeze_past_the_lease(&mut db, &cluster, &n1);
    let run = n1.runs().into_iter().find(|r| r.pid == before.pid).unwrap();
    let lease = cluster.session_timeout / 2;
    assert!(
        ns(run.last_ns.saturating_sub(freeze_ns)) <= lease,
        "n1's service ran {:?} into the freeze, past its {lease:?} lease",
        ns(run.last_ns.saturating_sub(freeze_ns))
    );
    wait_for_status(&n1.config, secs(30), "n1 is active again", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    cluster.assert_safe();
}

/// The simulation's seed 53770 (stop 35): the store forgot the active's breadcrumb (a
/// Redis crash within `appendfsync everysec`, a MySQL failover to a lagging replica)
/// and kept its lock. A lease in doubt took the service down; once renewals passed again,
/// starting it again needs the breadcrumb rewritten first, and a missing breadcrumb read
/// as "no answer": the node renewed its lock and retried the rewrite for ever, neutral,
/// and nobody else could take the lock. A missing breadcrumb is not ours: the node leaves
/// the lock, and a node is active again under a new epoch. (Or under the same one: a
/// renewal that passed between the forgetting and the freeze lets the active write its
/// breadcrumb back first, as it does since stop 44.)
fn an_active_whose_breadcrumb_the_store_forgot_leaves_the_lock<S: TestStore>() {
    let mut db = S::start();
    let cluster = cluster_on(&db);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let _wardens = start_active_then_standbys(&n1, &[&n2]);
    let before = n1.last_run().unwrap();
    let e = before.epoch.unwrap();
    db.forget(&cluster.name, &["breadcrumb"]);
    let freeze_ns = freeze_past_the_lease(&mut db, &cluster, &n1);
    let again = wait_for(secs(30), "a service started again after the freeze", || {
        [&n1, &n2].iter().find_map(|n| {
            n.last_run()
                .filter(|r| r.start_ns > freeze_ns && process_alive(r.pid))
        })
    });
    assert!(again.epoch >= Some(e), "{before} then {again}");
    wait_for_status(&n1.config, secs(30), "its node is active", |s| {
        active_epoch(s) == again.epoch
    });
    cluster.assert_safe();
}

/// The simulation's seed 965443 (stop 43): the store forgot the active's commit (its
/// breadcrumb and history) and kept its lock, while the active served on (a Redis crash
/// within `appendfsync everysec`, a MySQL failover to a lagging replica). Its renewals
/// passed and it never looked: once its warden was killed, nothing in the store named
/// its service, and the next winner, which never saw that commit, promoted without
/// fencing it. After each renewal the active looks at its breadcrumb and writes it back.
fn an_active_writes_back_a_breadcrumb_the_store_forgot_and_is_fenced_once_killed<S: TestStore>() {
    let db = S::start();
    let cluster = cluster_on(&db);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let mut wardens = start_active_then_standbys(&n1, &[]);
    let e = n1.last_run().unwrap().epoch;
    db.forget(&cluster.name, &["breadcrumb", "history"]);
    breadcrumb_back(&n1, e);
    wardens[0].wait_for_log("the store had forgotten this node's breadcrumb", secs(1));
    killed_active_is_fenced(&cluster, &mut wardens[0], &n1, &n2);
}

/// SIGSTOP of the active's warden past the session, its service still running: the
/// standby fences the old incarnation before its own service starts.
fn a_frozen_active_warden_is_fenced_before_the_standby_starts<S: TestStore>() {
    let db = S::start();
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
fn every_fence_failing_means_no_promotion<S: TestStore>() {
    let db = S::start();
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

/// The store restarted with its data (MariaDB: SIGKILL and InnoDB recovery; Redis: SIGTERM
/// and its append-only file): one node serves again, nobody sees lost data, and an epoch
/// never goes back.
fn a_store_restarted_with_its_data_elects_again<S: TestStore>() {
    let mut db = S::start();
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

/// The store wiped (MariaDB: restarted on an empty datadir; Redis: restarted without
/// persistence) while n1 is active: n1's service is down by its lease end, nobody
/// promotes, `status` says the store lost data; `init --force` is the way out, and the
/// next active's epoch is above the old one.
fn a_wiped_store_blocks_every_promotion_until_init_force<S: TestStore>() {
    let mut db = S::start();
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
    // Until n1's warden has made the tables again (it retries every second), status
    // has no tables to read: on a loaded machine that can outlast the service's stop.
    let status = wait_for_status(&n1.config, secs(10), "status says data was lost", |s| {
        s["lost_data"] == true
    });
    assert_eq!(active_id(&status), None, "{status:#}");
    let text = cli(&n1.config, &["status"]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("init --force"),
        "{}",
        describe(&text)
    );

    // The operator checks that both wardens are back before giving the word.
    wait_for_status(&n1.config, secs(30), "both wardens registered again", |s| {
        member_ids(s) == ["n1", "n2"] && s["lost_data"] == true
    });
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

/// Issue 31, 4: n1 was active at epoch 50 and stopped; then parts of the store were lost
/// (a dropped table, deleted keys) and the operator ran `init --force`. The next active's
/// epoch is above 50 whenever any surviving record names 50: the floor, the history, a
/// member record. (A store that lost everything remembers nothing: see the README.)
fn init_force_raises_the_counter_above_every_epoch_a_surviving_record_names<S: TestStore>() {
    let db = S::start();
    for what in [
        &["counter"][..],
        &["counter", "lock", "members"],
        &["counter", "lock", "members", "floor"],
        &["counter", "floor"],
    ] {
        let cluster = cluster_on(&db);
        db.set_counter(&cluster.name, 49);
        let n1 = cluster.node("n1");
        let mut wardens = start_active_then_standbys(&n1, &[]);
        let old = n1.last_run().unwrap().epoch;
        assert_eq!(old, Some(50));
        wait_for_status(&n1.config, secs(10), "n1's record carries its epoch", |s| {
            member(s, "n1").is_some_and(|m| json_u64(&m["epoch_seen"]) == old)
        });
        wardens[0].sigterm();
        assert_eq!(wardens[0].wait_exit(secs(15)).code(), Some(0));
        drop(wardens);
        // Every warden stopped, as `init --force` asks of the operator.
        wait_for_status(&n1.config, secs(15), "no members are left", |s| {
            member_ids(s).is_empty()
        });
        db.forget(&cluster.name, what);
        let out = cli(&n1.config, &["init", "--force"]);
        assert!(out.status.success(), "forgot {what:?}: {}", describe(&out));
        let _warden = n1.start();
        let status = wait_for_status(&n1.config, secs(30), "n1 is active again", |s| {
            active_id(s).as_deref() == Some("n1")
        });
        assert!(
            active_epoch(&status) > old,
            "forgot {what:?}, then `init --force`: the next active got epoch {:?} after {old:?}\n{}",
            active_epoch(&status),
            describe(&out)
        );
        cluster.assert_safe();
    }
}

/// Issue 31, 4, MySQL: a holder that crashed leaves its lock row, expired, with the epoch
/// it was given; the counter and the floor are lost and the history knows only an older
/// epoch. `init --force` sets the counter above the expired row's epoch too.
#[test]
fn init_force_raises_the_mysql_counter_above_an_expired_lock_row() {
    let db = MariaDb::start();
    let cluster = cluster_on(&db);
    db.set_counter(&cluster.name, 49);
    let n1 = cluster.node("n1");
    let mut wardens = start_active_then_standbys(&n1, &[]);
    assert_eq!(n1.last_run().unwrap().epoch, Some(50));
    wardens[0].sigterm();
    assert_eq!(wardens[0].wait_exit(secs(15)).code(), Some(0));
    drop(wardens);
    wait_for_status(&n1.config, secs(15), "no members are left", |s| {
        member_ids(s).is_empty()
    });
    // The row a holder at epoch 80 left when it crashed, expired a minute ago.
    db.sql(&format!(
        "INSERT INTO warden.warden_lock (cluster, session, record, epoch, version, \
         renewed_at, expires_at) VALUES ('{}', 12345, '{{}}', 80, 0, NOW(6) - INTERVAL 2 \
         MINUTE, NOW(6) - INTERVAL 1 MINUTE)",
        cluster.name
    ));
    db.forget(&cluster.name, &["counter", "floor"]);
    let out = cli(&n1.config, &["init", "--force"]);
    assert!(out.status.success(), "{}", describe(&out));
    let _warden = n1.start();
    let status = wait_for_status(&n1.config, secs(30), "n1 is active again", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    assert!(
        active_epoch(&status) > Some(80),
        "the next active got epoch {:?} below the expired lock row's 80\n{}",
        active_epoch(&status),
        describe(&out)
    );
}

/// A store whose epoch counter went back (a restore from an old backup) while wardens
/// run: nobody promotes, plain `init` refuses, `init --force` raises the counter.
fn an_epoch_counter_that_went_back_is_lost_data<S: TestStore>() {
    let db = S::start();
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
    db.roll_back_epoch(&cluster.name);
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

/// Issue 30.1 (SPEC §3a "A store that forgot"): the store loses exactly the last
/// promotion (MySQL restored from a backup one failover old; Redis crashed within a second
/// of it) while the last active's warden is frozen with its service running. The nodes that
/// saw that promotion must not climb past it: nobody promotes, no epoch is handed out
/// twice, `status` says the store lost data and names who sets the floor, until the
/// operator has stopped the old active and run `init --force`.
fn a_store_that_forgot_the_last_promotion_promotes_nobody_until_init_force<S: TestStore>() {
    let db = S::start();
    let cluster = cluster_on(&db);
    let (n1, n2, n3) = (cluster.node("n1"), cluster.node("n2"), cluster.node("n3"));
    let wardens = start_active_then_standbys(&n1, &[&n2, &n3]);
    let e = n1.last_run().unwrap().epoch.unwrap();
    let seen_by = |s: &serde_json::Value, node: &str, epoch: u64| {
        member(s, node).is_some_and(|m| json_u64(&m["epoch_seen"]) == Some(epoch))
    };
    wait_for_status(&n1.config, secs(10), "every node has seen epoch e", |s| {
        ["n1", "n2", "n3"].iter().all(|n| seen_by(s, n, e))
    });
    let backup = db.backup(&cluster.name);

    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "20s"]);
    assert!(out.status.success(), "{}", describe(&out));
    let status = wait_for_status(&n1.config, secs(20), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    let e2 = active_epoch(&status).unwrap();
    assert!(e2 > e, "{status:#}");
    wait_until(secs(10), "n2's service runs", || {
        n2.last_run()
            .is_some_and(|r| r.epoch == Some(e2) && process_alive(r.pid))
    });
    wait_for_status(&n1.config, secs(10), "n3 has seen n2's epoch", |s| {
        seen_by(s, "n3", e2)
    });

    // n2's warden freezes with its service running, and the store forgets n2's promotion.
    wardens[1].sigstop();
    let n2_run = n2.last_run().unwrap();
    db.restore(&cluster.name, &backup);

    let status = wait_for_status(
        &n1.config,
        secs(30),
        "status says the store lost data",
        |s| s["lost_data"] == true,
    );
    let text = String::from_utf8_lossy(&cli(&n1.config, &["status"]).stdout).into_owned();
    assert!(text.contains("init --force"), "{text}");
    assert!(
        text.contains("node n1") || text.contains("node n3"),
        "status does not name the node that sets the floor:\n{text}\n{status:#}"
    );
    // Long enough for several join attempts of n1 and n3 (a second apart) after the
    // first refusal: the bug promoted 0.2 to 0.3 s after the restore.
    holds_for(
        secs(4),
        "nobody promotes on a store that forgot the last promotion",
        || {
            for n in [&n1, &n3] {
                if let Some(r) = n.runs().iter().find(|r| r.start_ns > n2_run.start_ns) {
                    return Err(format!("{} promoted: {r}", n.id));
                }
            }
            Ok(())
        },
    );
    let refused = cli(&n1.config, &["init"]);
    assert_eq!(refused.status.code(), Some(1), "{}", describe(&refused));

    // The operator's way out: stop the old active for good, then `init --force`.
    wardens[1].kill9();
    wait_until(secs(10), "n2's service is gone with its warden", || {
        !process_alive(n2_run.pid)
    });
    let out = cli(&n1.config, &["init", "--force"]);
    assert!(out.status.success(), "{}", describe(&out));
    let status = wait_for_status(&n1.config, secs(30), "a node is active again", |s| {
        matches!(active_id(s).as_deref(), Some("n1" | "n3"))
    });
    let e3 = active_epoch(&status).unwrap();
    assert!(
        e3 > e2,
        "epoch {e3} after the store forgot epoch {e2}: {status:#}"
    );
    assert_eq!(status["lost_data"], false, "{status:#}");
    cluster.assert_no_epoch_twice();
    cluster.assert_safe();
}

/// Waits until `status` (asked of `node`) shows each of `nodes` with `epoch_seen` =
/// `epoch`.
fn wait_seen(node: &Node, nodes: &[&str], epoch: u64) {
    wait_for_status(
        &node.config,
        secs(10),
        &format!("{nodes:?} have seen epoch {epoch}"),
        |s| {
            nodes
                .iter()
                .all(|n| member(s, n).is_some_and(|m| json_u64(&m["epoch_seen"]) == Some(epoch)))
        },
    );
}

/// Stop 35's review, F2 (SPEC §3a "A store that forgot"): the store restarted and lost
/// exactly the last promotion (Redis: its last second of `appendfsync everysec`; MySQL:
/// a crash with `innodb_flush_log_at_trx_commit = 2`, or a failover to a replica that
/// lagged), but kept the member records of the sessions older than it. A standby whose
/// session outlived the restart, and which never saw the lost epoch (its warden was
/// frozen through the handover), found the lock free and took it at once: it was handed
/// the lost epoch again and promoted beside the node that held it, still inside its lease.
/// A join now finds that the store restarted since its session began and takes nothing:
/// its next session waits one session timeout, by when that lease has ended.
fn a_session_that_outlived_a_store_restart_takes_no_lock<S: TestStore>() {
    let mut db = S::start();
    let cluster = cluster_on(&db);
    let (n1, n2, n3) = (cluster.node("n1"), cluster.node("n2"), cluster.node("n3"));
    let wardens = start_active_then_standbys(&n1, &[&n2, &n3]);
    let e1 = n1.last_run().unwrap().epoch.unwrap();
    wait_seen(&n1, &["n1", "n2", "n3"], e1);
    let backup = db.backup(&cluster.name);

    // n3 sleeps through a handover to n2.
    wardens[2].sigstop();
    wardens[0].sigterm();
    let status = wait_for_status(&n2.config, secs(30), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    let e2 = active_epoch(&status).unwrap();
    assert!(e2 > e1, "{status:#}");
    wait_until(secs(10), "n2's service runs", || {
        n2.last_run()
            .is_some_and(|r| r.epoch == Some(e2) && process_alive(r.pid))
    });

    // The store restarts and forgets n2's promotion; n3 wakes.
    db.restart();
    db.restore(&cluster.name, &backup);
    wardens[2].sigcont();
    holds_for(
        secs(3),
        "n3 takes no lock in the session that outlived the restart",
        || match n3.runs().first() {
            Some(r) => Err(format!("n3 promoted: {r}")),
            None => Ok(()),
        },
    );
    wardens[2].wait_for_log(
        "restarted or failed over since this session began",
        secs(30),
    );
    cluster.assert_no_epoch_twice();
    cluster.assert_safe();
}

/// `active` promoted with `standbys` behind it (each having seen its epoch); then its
/// warden is frozen (its service runs on) and the store restarts having forgotten
/// `forget`. Returns the wardens (the active's first) and the active's service.
fn freeze_active_and_forget<S: TestStore>(
    db: &mut S,
    cluster: &Cluster,
    active: &Node,
    standbys: &[&Node],
    forget: &[&str],
) -> (Vec<Warden>, Run) {
    let wardens = start_active_then_standbys(active, standbys);
    let old = active.last_run().unwrap();
    let ids: Vec<&str> = standbys.iter().map(|n| n.id.as_str()).collect();
    wait_seen(active, &ids, old.epoch.unwrap());
    wardens[0].sigstop();
    // Forgotten before the restart, not after: a store forgets at its restart, and no
    // client ever sees the new run with what it lost (a warden that reads the breadcrumb
    // again in its new link would see it there and rightly call its later absence a
    // clean step-down, stop 48).
    db.forget(&cluster.name, forget);
    db.restart();
    (wardens, old)
}

/// After a frozen active (its service `old` of epoch `e_old`) whose commit the store
/// forgot: `winner` becomes active at a greater epoch, its service runs, the old service
/// is gone (fenced first), and the winner's log says `why`.
fn took_over_after_fencing(
    cluster: &Cluster,
    winner: &Node,
    warden: &Warden,
    old: &Run,
    why: &str,
) {
    let id = winner.id.as_str();
    let status = wait_for_status(&winner.config, secs(60), &format!("{id} is active"), |s| {
        active_id(s).as_deref() == Some(id)
    });
    let e = active_epoch(&status).unwrap();
    assert!(Some(e) > old.epoch, "{status:#}");
    wait_until(secs(10), &format!("{id}'s service runs"), || {
        winner
            .last_run()
            .is_some_and(|r| r.epoch == Some(e) && process_alive(r.pid))
    });
    assert!(
        !process_alive(old.pid),
        "the old service (pid {}) still runs beside {id}'s; {id}'s log:\n{}",
        old.pid,
        warden.log()
    );
    warden.wait_for_log(why, secs(1));
    cluster.assert_safe();
}

/// The simulation's seed 33926: the store restarted and forgot the active's commit (its
/// breadcrumb and history entry) but kept its lock (a Redis crash between the lock's
/// fsync and the commit's; a MySQL failover to a replica that had the one and not the
/// other), while the active's warden was frozen with its service running. Its lock
/// expired; nothing in the store named it any more, and the standby promoted without
/// fencing it: two services up. The standby saw that commit in a session the restart
/// ended: it writes the active's record back as the breadcrumb and fences it first.
fn an_active_whose_commit_a_restarted_store_forgot_is_fenced_from_memory<S: TestStore>() {
    forgot_then_fenced_from_memory::<S>(|_, _, _| {});
}

/// n1 promoted with n2 behind it, frozen; the store restarted having forgotten its
/// breadcrumb and history; then `meanwhile` (the store, the cluster's name, n1's service);
/// n2 writes n1's breadcrumb back, fences it, and takes over.
fn forgot_then_fenced_from_memory<S: TestStore>(meanwhile: impl FnOnce(&S, &str, &Run)) {
    let mut db = S::start();
    let cluster = cluster_on(&db);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let (wardens, old) =
        freeze_active_and_forget(&mut db, &cluster, &n1, &[&n2], &["breadcrumb", "history"]);
    meanwhile(&db, &cluster.name, &old);
    took_over_after_fencing(
        &cluster,
        &n2,
        &wardens[1],
        &old,
        "writing its breadcrumb back",
    );
    wardens[0].sigcont();
}

/// The simulation's seed 255290: as above, but the history the store keeps has an entry
/// of the frozen active's at its very epoch, as its warden writes at any change of role
/// after the restart too (there: `neutral`, its renewal late once the store came back;
/// its warden was then killed mid-stop, its service left running). That entry says
/// nothing of its service being down, and the standby that remembers the commit still
/// writes the breadcrumb back and fences it first. Before the fix it promoted beside it.
fn an_entry_of_the_forgotten_epoch_is_no_trace_of_its_end<S: TestStore>() {
    forgot_then_fenced_from_memory::<S>(|db, cluster, old| {
        let entry = serde_json::json!([{
            "at": "2026-01-01T00:00:00.000Z",
            "node_id": "n1",
            "from": "promoting",
            "to": "neutral",
            "epoch": old.epoch,
            "reason": "a lease renewal is late",
        }]);
        db.put_history(cluster, &entry.to_string());
    });
}

/// As above, with the frozen active's member record saying `neutral` and live past its
/// lock: a warden whose renewal was late writes that before its lease end's kill, and a
/// record outlives its warden (on MySQL and Redis after its lock, by up to its last
/// write). The winner took that record for a warden alive and stepped down, and promoted
/// beside the service; `neutral` is fenced now (SPEC §9: an active cut off is fenced
/// whatever it did at its lease end).
fn a_remembered_active_whose_live_record_says_neutral_is_fenced<S: TestStore>() {
    forgot_then_fenced_from_memory::<S>(|db, cluster, _| {
        db.hold_member_as(cluster, "n1", "neutral")
    });
}

/// Stop 48's review: as above, with the record saying `demoting`, which a warden killed
/// during its stop leaves as it is (its service may run on), and which a planned
/// switchover's old active shows only until its next session registers (`ineligible` or
/// `standby`). The winner reads it again for up to a session timeout; one that stays
/// `demoting` is fenced. Before, `demoting` counted as stepped down at once.
fn a_remembered_active_whose_live_record_stays_demoting_is_fenced<S: TestStore>() {
    forgot_then_fenced_from_memory::<S>(|db, cluster, _| {
        db.hold_member_as(cluster, "n1", "demoting")
    });
}

/// The simulation's seed 308747: as above, the store restarted and forgot the active's
/// commit (its lock too) while its warden was frozen, but the node that wins next never
/// saw that commit
/// (it started after the restart), and the standby that followed the active never wins
/// (priority 0). That standby's keepalive finds the restart at once; it registers again,
/// naming the active it saw (`status` shows it), and the winner writes that active's
/// record back and fences it before promoting. Before the fix the winner promoted beside
/// the frozen active's service.
fn an_active_only_a_standby_remembers_is_fenced_by_a_winner_that_never_saw_it<S: TestStore>() {
    only_a_standby_remembers::<S>(false);
}

/// The same, with the winner started at once after the restart (the review of stop 42):
/// the remembering standby's keepalive, not its next join, ends its session, so that it
/// has registered again within the winner's wait of one session timeout.
fn an_active_only_a_standby_remembers_is_fenced_by_a_winner_started_at_once<S: TestStore>() {
    only_a_standby_remembers::<S>(true);
}

/// Found by the review of stop 42: the store restarted and forgot the active's commit
/// (breadcrumb and history) but kept its lock, while the active's warden was frozen; the
/// only other node started after the restart and learned that active from the lock's
/// record alone, in its first link. Its memory is no proof of a clean step-down (it never
/// saw that breadcrumb): it writes the active back and fences it before promoting.
fn an_active_learned_from_a_lock_that_outlived_its_breadcrumb_is_fenced<S: TestStore>() {
    let mut db = S::start();
    let cluster = cluster_on(&db);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let (wardens, old) =
        freeze_active_and_forget(&mut db, &cluster, &n1, &[], &["breadcrumb", "history"]);
    let n2_warden = n2.start();
    took_over_after_fencing(
        &cluster,
        &n2,
        &n2_warden,
        &old,
        "writing its breadcrumb back",
    );
    wardens[0].sigcont();
}

fn only_a_standby_remembers<S: TestStore>(at_once: bool) {
    let mut db = S::start();
    let cluster = cluster_on(&db);
    let (n1, n2, n3) = (cluster.node("n1"), cluster.node("n2"), cluster.node("n3"));
    set_priority(&n2, 0);
    let (wardens, old) = freeze_active_and_forget(
        &mut db,
        &cluster,
        &n1,
        &[&n2],
        &["breadcrumb", "history", "lock row"],
    );
    let e1 = old.epoch.unwrap();
    if !at_once {
        wait_for_status(&n2.config, secs(30), "n2 says it saw n1 commit", |s| {
            member(s, "n2").is_some_and(|m| {
                m["remembers"]["node_id"] == "n1" && json_u64(&m["remembers"]["epoch"]) == Some(e1)
            })
        });
    }
    let n3_warden = n3.start();
    took_over_after_fencing(
        &cluster,
        &n3,
        &n3_warden,
        &old,
        "which n2 (its member record says so) saw n1 commit",
    );
    wardens[0].sigcont();
}

/// Stop 36's review: the old active steps down cleanly in a planned switchover, after a
/// store restart that ended the successor's session, and with no history entry of the
/// old active's epoch left (trimmed to the newest 100, or an append that failed). The
/// successor saw that active commit in an earlier session, and finds no breadcrumb and no
/// promotion entry, as after a store that forgot: but its step-down wrote a history entry
/// of that epoch (and, were that append lost, its warden lives and its member record says
/// it stepped down). Nobody is fenced (SPEC §4.5: a switchover takes over without
/// fencing); the review's sequence fenced it, killing a healthy warden.
fn a_switchover_after_a_store_restart_fences_nobody<S: TestStore>() {
    let mut db = S::start();
    let cluster = cluster_on(&db);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);
    let e1 = n1.last_run().unwrap().epoch.unwrap();
    wait_seen(&n1, &["n2"], e1);
    db.restart();
    wait_for_status(
        &n1.config,
        secs(60),
        "n1 is active after the restart",
        |s| active_id(s).as_deref() == Some("n1"),
    );
    db.forget(&cluster.name, &["history"]);
    // (n1 may be starting its service again after a lease in doubt over the restart:
    // the command refuses until it serves.)
    wait_until(secs(30), "failover --to n2 is done", || {
        cli(&n1.config, &["failover", "--to", "n2", "--timeout", "30s"])
            .status
            .success()
    });
    wait_for_status(&n1.config, secs(30), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    assert!(wardens[0].is_running(), "n1's warden was killed");
    assert_eq!(
        cluster.fence_calls(),
        Vec::<String>::new(),
        "somebody was fenced"
    );
    cluster.assert_safe();
}

/// Issue 30.2 (SPEC §3a): the floor counts every node ever seen, alive or not, and
/// `status`, `init` and `init --force` read the same floor as the join. The only node that
/// saw the last epoch is dead for good: `status` must still say the store lost data and
/// name it, and `init --force` must raise the counter above it, so a node is active again.
fn a_dead_member_sets_the_floor_for_status_and_init_force_too<S: TestStore>() {
    let db = S::start();
    let cluster = cluster_on(&db);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    // n2 is stopped all along: only n1 sees its epoch.
    let wardens = start_active_then_standbys(&n1, &[]);
    let e = n1.last_run().unwrap().epoch.unwrap();
    wait_for_status(&n1.config, secs(10), "n1's record carries its epoch", |s| {
        member(s, "n1").is_some_and(|m| json_u64(&m["epoch_seen"]) == Some(e))
    });
    db.roll_back_epoch(&cluster.name);
    wardens[0].kill9();
    let run = n1.last_run().unwrap();
    wait_until(secs(10), "n1's service is gone with its warden", || {
        !process_alive(run.pid)
    });
    wait_for_status(&n1.config, secs(10), "n1's member record expired", |s| {
        member(s, "n1").is_none()
    });

    let _n2 = n2.start();
    let status = wait_for_status(
        &n1.config,
        secs(20),
        "status says the store lost data",
        |s| s["lost_data"] == true && member(s, "n2").is_some(),
    );
    assert_eq!(active_id(&status), None, "{status:#}");
    let text = String::from_utf8_lossy(&cli(&n1.config, &["status"]).stdout).into_owned();
    assert!(
        text.contains("node n1") && text.contains("init --force"),
        "status does not name dead n1 as the node that sets the floor:\n{text}"
    );
    let out = cli(&n1.config, &["init", "--force"]);
    assert!(out.status.success(), "{}", describe(&out));
    let status = wait_for_status(&n1.config, secs(30), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    assert!(active_epoch(&status) > Some(e), "{status:#}");
    assert_eq!(status["lost_data"], false, "{status:#}");
    cluster.assert_safe();
}

/// Review of issue 30 (SPEC §3a, §9 "a value in the store of the wrong type ... `init
/// --force` clears it"): the floor keeps every node's `epoch_seen` for good, so one
/// bogus value (a garbage member record, a warden of another version) could block every
/// join for good: `init --force` raising the counter past it panicked (u64::MAX) or left
/// a counter Redis cannot `INCR` (i64::MAX). A kept entry at or above 2^53, which no
/// counter ever gives, is garbage: every reader of the floor skips it, so a node is
/// promoted, and `init --force` never panics on it.
fn a_floor_at_the_greatest_epoch_is_cleared_by_init_force<S: TestStore>() {
    a_bogus_floor_is_cleared_by_init_force::<S>(&u64::MAX.to_string());
}

/// [`a_floor_at_the_greatest_epoch_is_cleared_by_init_force`] with `epoch` in the floor.
fn a_bogus_floor_is_cleared_by_init_force<S: TestStore>(epoch: &str) {
    let db = S::start();
    let cluster = cluster_on(&db);
    db.keep_seen(&cluster.name, "ghost", epoch);
    let n1 = cluster.node("n1");
    let _w = n1.start();
    let status = wait_for_status(&n1.config, secs(20), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    assert_eq!(status["lost_data"], false, "{status:#}");
    let out = cli(&n1.config, &["init", "--force"]);
    let said = describe(&out);
    assert!(
        !said.contains("panicked"),
        "`init --force` panicked on a floor of {epoch}: {said}"
    );
    // Refused: n1 runs and holds the lock.
    assert_eq!(
        out.status.code(),
        Some(1),
        "`init --force` on a floor of {epoch}: {said}"
    );
    wait_for_status(
        &n1.config,
        secs(30),
        "n1 is active after init --force",
        |s| active_id(s).as_deref() == Some("n1"),
    );
    cluster.assert_safe();
}

/// Review of issue 30 (SPEC §9, "a value in the store of the wrong type": named in one
/// sentence, `init --force` clears it): every reader of the floor (the join's, `status`'s,
/// `init --force`'s) skips an entry that is not a number, but the writes that raise a
/// node's own entry fail on it, every time: on Redis every renewal script errors and is
/// taken for "the lock is no longer ours" (the active's service is stopped and started
/// again at the same epoch about every 350 ms, for good); on MariaDB every publication of
/// the member record fails (error 1292) and the node's entry is never raised, so the
/// floor no longer protects what it saw. Node n1, whose kept entry is garbage, must be
/// promoted, stay active and have its entry raised (at the latest after `init --force`).
fn a_garbage_floor_entry_of_a_node_is_raised_past_and_does_not_unsettle_it<S: TestStore>() {
    let db = S::start();
    let cluster = cluster_on(&db);
    db.keep_seen(&cluster.name, "n1", "not a number");
    let n1 = cluster.node("n1");
    let w = n1.start();
    // Active, and its record (whose writes raise its entry) published with its epoch.
    let active = |s: &serde_json::Value| {
        active_id(s).as_deref() == Some("n1")
            && member(s, "n1").is_some_and(|m| {
                json_u64(&m["epoch_seen"]).is_some()
                    && json_u64(&m["epoch_seen"]) == active_epoch(s)
            })
    };
    if !poll_status(&n1.config, secs(20), active) {
        let out = cli(&n1.config, &["init", "--force"]);
        eprintln!("n1 not active within 20s; init --force: {}", describe(&out));
    }
    assert!(
        poll_status(&n1.config, secs(30), active),
        "n1 is never promoted with garbage as its kept epoch_seen, even after init --force; \
         its log:\n{}",
        w.log()
    );
    // Its entry of the floor is raised past the garbage (the store keeps what n1 has seen),
    // and n1 stays active through its renewals.
    let epoch = active_epoch(&status_json(&n1.config)).unwrap();
    let deadline = std::time::Instant::now() + secs(15);
    // MySQL keeps an entry zero-padded (it compares them as text), Redis as it is.
    let raised = |kept: &str| {
        kept.split_whitespace()
            .any(|w| w.parse::<u64>().ok() == Some(epoch))
    };
    while !raised(&db.kept_seen(&cluster.name)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let kept = db.kept_seen(&cluster.name);
    let status = status_json(&n1.config);
    assert!(
        raised(&kept) && active_id(&status).as_deref() == Some("n1"),
        "n1's entry of the floor is still {kept:?} after 15 s at epoch {epoch} (n1 active: \
         {:?}); its log:\n{}",
        active_id(&status),
        w.log()
    );
    cluster.assert_safe();
}

/// [`a_garbage_floor_entry_of_a_node_is_raised_past_and_does_not_unsettle_it`] on
/// MariaDB, across a restart: registering raises the node's entry in the same
/// transaction, so once n1 has seen an epoch, a garbage entry makes every registration of
/// n1 fail (error 1292) and n1 never comes back.
#[test]
fn a_garbage_floor_entry_lets_a_mysql_node_register_again() {
    let db = MariaDb::start();
    let cluster = cluster_on(&db);
    db.keep_seen(&cluster.name, "n1", "not a number");
    let n1 = cluster.node("n1");
    let mut w = n1.start();
    wait_for_status(&n1.config, secs(20), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    w.sigterm();
    assert_eq!(w.wait_exit(secs(20)).code(), Some(0), "{}", w.log());
    let w = n1.start();
    assert!(
        poll_status(&n1.config, secs(20), |s| active_id(s).as_deref()
            == Some("n1")),
        "n1 is not active again after a restart; its log:\n{}",
        w.log()
    );
    cluster.assert_safe();
}

/// Whether `status --json` satisfies `ok` within `within` (polled; no panic on a timeout).
fn poll_status(
    config: &std::path::Path,
    within: std::time::Duration,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> bool {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if try_status_json(config).is_ok_and(|s| ok(&s)) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    false
}

/// [`a_floor_at_the_greatest_epoch_is_cleared_by_init_force`] with a floor Redis's own
/// counter (a signed 64-bit `INCR`) cannot go above: `init --force` sets the counter one
/// above it, and every `INCR` after fails.
#[test]
fn a_floor_beyond_redis_integers_is_cleared_by_init_force() {
    a_bogus_floor_is_cleared_by_init_force::<RedisServer>(&i64::MAX.to_string());
}

/// Two wardens with one node_id: the second exits 2 naming it; the first is undisturbed.
fn two_nodes_with_one_node_id_the_second_refuses<S: TestStore>() {
    let db = S::start();
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
fn garbage_in_the_store_blocks_promotion_until_confirmed<S: TestStore>() {
    let db = S::start();
    let cluster = cluster_on(&db);
    db.put_garbage(&cluster.name);
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

/// Redis without persistence: `init` and `run` warn, naming the setting.
#[test]
fn redis_without_appendonly_is_warned_of() {
    let r = RedisServer::start_without_persistence();
    let cluster = r.cluster();
    let n1 = cluster.node("n1");
    let out = cli(&n1.config, &["init"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("appendonly yes"),
        "{}",
        describe(&out)
    );
    let w = n1.start();
    w.wait_for_log("appendonly yes", secs(10));
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    cluster.assert_safe();
}

/// Issue 30.11 (SPEC §3a "Redis as a store, for real"): a Redis that may evict keys can
/// drop the counter, the floor or the lock. `init` and `run` refuse it, exit 2, naming the
/// setting; once it is `noeviction`, both work.
#[test]
fn a_redis_that_may_evict_keys_is_refused_by_init_and_run() {
    let r = RedisServer::start();
    let cluster = r.cluster();
    let n1 = cluster.node("n1");
    for policy in ["allkeys-lru", "volatile-ttl"] {
        r.cli(&["CONFIG", "SET", "maxmemory-policy", policy]);
        let out = cli(&n1.config, &["init"]);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("maxmemory-policy") && err.contains(policy) && err.contains("noeviction"),
            "{}",
            describe(&out)
        );
    }
    r.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let out = cli(&n1.config, &["init"]);
    assert!(out.status.success(), "{}", describe(&out));
    r.cli(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let mut w = n1.start();
    let code = w.wait_exit(secs(20));
    assert_eq!(code.code(), Some(2), "{}", w.log());
    assert!(w.log().contains("maxmemory-policy"), "{}", w.log());
    r.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let _w = n1.start();
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    cluster.assert_safe();
}

/// Issue 30.11 (SPEC §3a `replicas_ack`): with `replicas_ack = 1`, a promotion counts only
/// once a replica of the store has it. The store's replica frozen: nobody is promoted (a
/// failover of the store to that replica would lose the promotion and hand its epoch out
/// again), and the log says why; the replica back: the node is promoted.
#[test]
fn replicas_ack_promotes_only_once_a_replica_of_the_store_has_it() {
    let primary = RedisServer::start_replicable("storepw");
    let mut replica = RedisServer::start_replicable("storepw");
    replica.cli(&["REPLICAOF", "127.0.0.1", &primary.port().to_string()]);
    wait_until(secs(20), "the store's replica is in sync", || {
        primary
            .cli(&["INFO", "replication"])
            .contains("connected_slaves:1")
            && replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
    });
    let mut cluster = primary.cluster();
    cluster.coordination = cluster
        .coordination
        .take()
        .map(|c| format!("{c}replicas_ack = 1\n"));
    let n1 = cluster.node("n1");
    let out = cli(&n1.config, &["init"]);
    assert!(out.status.success(), "{}", describe(&out));

    replica.freeze();
    let w = n1.start();
    w.wait_for_log("replicas_ack", secs(20));
    holds_for(
        secs(2),
        "nobody promotes while no replica acknowledges",
        || match n1.last_run() {
            Some(r) => Err(format!("n1 promoted: {r}")),
            None => Ok(()),
        },
    );
    // Each attempt writes the breadcrumb, waits for the replica, and takes it back: between
    // attempts none stays.
    wait_for_status(
        &n1.config,
        secs(10),
        "the promotion that no replica acknowledged is taken back",
        |s| s["breadcrumb"].is_null(),
    );

    replica.thaw();
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    cluster.assert_safe();
}

/// `init` makes the MySQL tables one by one, and a wiped database gets them back the
/// same way: `status` run between two of them reads as "no tables", not as an error
/// (it failed on the missing `warden_kv` in one CI run of the wiped-store scenario).
#[test]
fn status_between_the_creation_of_two_mysql_tables_says_what_to_do() {
    let db = MariaDb::start();
    let cluster = cluster_on(&db);
    let n1 = cluster.node("n1");
    db.sql("DROP TABLE warden.warden_kv; DROP TABLE warden.warden_member");
    let text = cli(&n1.config, &["status"]);
    assert!(text.status.success(), "{}", describe(&text));
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("init --force"),
        "{}",
        describe(&text)
    );
    let status = status_json(&n1.config);
    assert_eq!(status["lost_data"], true, "{status:#}");
    assert_eq!(active_id(&status), None, "{status:#}");
}

/// Every statement a warden runs on MySQL does so in UTC and with its own lock waits,
/// also on a connection the pool hands out again: the pool's reset of a reused connection
/// had put the server's defaults back (found when a frozen active's row locks stalled a
/// MariaDB cluster for the server's 50 s lock wait). On a server whose time zone is not
/// UTC, renewals written in its local time would make a live lock look hours old, or a
/// dead one hours fresh.
#[test]
fn mysql_sessions_keep_utc_and_their_lock_waits_on_reused_connections() {
    let db = MariaDb::start();
    db.sql("SET GLOBAL time_zone = '+05:00'");
    let cluster = cluster_on(&db);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let _wardens = start_active_then_standbys(&n1, &[&n2]);
    // Many renewals, each on a connection the pool has handed out before.
    holds_for(
        cluster.session_timeout * 2,
        "every row's renewal is in UTC",
        || {
            let ages = db.sql(
                "SELECT TIMESTAMPDIFF(SECOND, renewed_at, UTC_TIMESTAMP(6)) FROM \
                 warden.warden_lock UNION ALL SELECT TIMESTAMPDIFF(SECOND, renewed_at, \
                 UTC_TIMESTAMP(6)) FROM warden.warden_member",
            );
            match ages
                .lines()
                .map(|l| l.trim().parse::<i64>())
                .find(|age| !age.as_ref().is_ok_and(|a| (-1..=10).contains(a)))
            {
                None => Ok(()),
                Some(age) => Err(format!("a row renewed {age:?} s ago: {ages}")),
            }
        },
    );
    wait_for_status(&n1.config, secs(10), "n1 is still active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    cluster.assert_safe();
}

/// A holder stuck inside a transaction on the lock row (a warden frozen there; MySQL has
/// no idle timeout to end it) must not take the standbys' sessions with it: a standby's
/// keepalive touches the lock row only while the row names its session, and looks with a
/// read that takes no lock. (It used to update the row whoever held it, waiting on the
/// row lock, and lost its session every session timeout.)
#[test]
fn a_standby_keeps_its_mysql_session_while_the_lock_row_is_locked() {
    let db = MariaDb::start();
    let cluster = cluster_on(&db);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let _wardens = start_active_then_standbys(&n1, &[&n2]);
    let session = || db.sql("SELECT session FROM warden.warden_member WHERE node_id = 'n2'");
    let before = session();
    let mut holder = db.hold_rows("SELECT * FROM warden.warden_lock");
    holds_for(
        cluster.session_timeout * 3,
        "n2 keeps its session",
        || match session() {
            now if now == before => Ok(()),
            now => Err(format!("n2's session went from {before} to {now}")),
        },
    );
    let _ = holder.kill();
    let _ = holder.wait();
    wait_for_status(&n1.config, secs(30), "a node is active again", |s| {
        active_id(s).is_some()
    });
    cluster.assert_safe();
}

/// Review of issue 30 (SPEC §9, "a value in the store of the wrong type ... `init --force`
/// clears it"): an epoch counter that is not a number is lost data to the join (the
/// ACQUIRE script says so, naming `init --force`), and `init --force` must then set it
/// above the floor, so that a node is active again. Today `init --force` (and the
/// snapshot under `status`) cannot read the cluster at all: "outcome unknown: listing
/// members: Incompatible type", exit 1.
#[test]
fn a_redis_epoch_counter_that_is_not_a_number_is_cleared_by_init_force() {
    let db = RedisServer::start();
    let cluster = cluster_on(&db);
    db.cli(&[
        "SET",
        &format!("warden:{{{}}}:epoch", cluster.name),
        "garbage",
    ]);
    let n1 = cluster.node("n1");
    let w = n1.start();
    let out = cli(&n1.config, &["init", "--force"]);
    assert!(out.status.success(), "init --force: {}", describe(&out));
    assert!(
        poll_status(&n1.config, secs(30), |s| active_id(s).as_deref()
            == Some("n1")),
        "n1 is not active after init --force; its log:\n{}",
        w.log()
    );
    cluster.assert_safe();
}
