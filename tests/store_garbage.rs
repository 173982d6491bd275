//! Issue 31, class 5: garbage in a MySQL or Redis store that no command cleared. Each key
//! or row warden reads, of the wrong type or holding what no warden writes, gets one
//! sentence naming it, never a panic or an "outcome unknown" (exit 1 from every command,
//! as if the store were unreachable), never a node flapping every poll; and `init --force`
//! clears it.

mod common;

use common::mariadb::MariaDb;
use common::redis::RedisServer;
use common::*;

/// A cluster on a fresh store, initialized by `warden init`.
fn initialized(cluster: Cluster) -> Cluster {
    let n = cluster.node("init");
    let out = cli(&n.config, &["init"]);
    assert!(out.status.success(), "warden init: {}", describe(&out));
    cluster
}

fn active_is(config: &std::path::Path, id: &str) -> bool {
    try_status_json(config).is_ok_and(|s| active_id(&s).as_deref() == Some(id))
}

/// Whether `ok` holds within `within`, polled.
fn within(within: std::time::Duration, mut ok: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + within;
    loop {
        if ok() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(ms(100));
    }
}

/// n1 of `cluster`, started and active.
fn start_n1_active(cluster: &Cluster, what: &str) -> (Node, Warden) {
    let n1 = cluster.node("n1");
    let w = n1.start();
    assert!(
        within(secs(20), || active_is(&n1.config, "n1")),
        "{what}: n1 is not active: {}",
        w.log()
    );
    (n1, w)
}

/// `warden ARGS` must exit 0 without a panic; says `what` otherwise.
fn must_succeed(config: &std::path::Path, args: &[&str], what: &str) {
    let out = cli(config, args);
    let said = describe(&out);
    assert!(
        out.status.success() && !said.contains("panicked"),
        "{what}: `warden {}`: {said}",
        args.join(" ")
    );
}

/// The scenario for one piece of garbage: n1 is active, `plant` puts the garbage in, and
/// then `status`, `pause` and `resume` answer (exit 0), `status` names the key `named`
/// in one sentence (one that no node replaces at once), n1 is active (`lock_lost`: again,
/// after losing a lock the garbage replaced), stopped; `init --force` exits 0, and n1
/// started again is active.
fn garbage_is_named_and_cleared(
    cluster: &Cluster,
    what: &str,
    lock_lost: bool,
    named: Option<&str>,
    plant: impl Fn(),
) {
    let (n1, mut w) = start_n1_active(cluster, what);
    plant();
    must_succeed(&n1.config, &["status"], what);
    if let Some(key) = named {
        // Named in one sentence by `status`, unless a node already replaced it.
        let status = try_status_json(&n1.config).expect("status --json");
        let garbage = status["garbage"].as_array().cloned().unwrap_or_default();
        assert!(
            garbage
                .iter()
                .any(|g| g.as_str().is_some_and(|g| g.contains(key))),
            "{what}: `status` does not name {key}: {status:#}"
        );
    }
    must_succeed(&n1.config, &["pause", "--reason", "garbage"], what);
    must_succeed(&n1.config, &["resume"], what);
    assert!(
        within(secs(20), || active_is(&n1.config, "n1")),
        "{what}: n1 is not active with the garbage in: {}",
        w.log()
    );
    if !lock_lost {
        assert_eq!(
            n1.runs().len(),
            1,
            "{what}: the service was restarted: {}",
            w.log()
        );
    }
    w.sigterm();
    assert_eq!(w.wait_exit(secs(20)).code(), Some(0), "{what}: {}", w.log());
    assert!(!w.log_mentions("panicked"), "{what}: {}", w.log());
    // Its member key outlives it by up to a session timeout.
    assert!(
        within(secs(20), || try_status_json(&n1.config)
            .is_ok_and(|s| member_ids(&s).is_empty())),
        "{what}: n1 is still listed as a member"
    );
    must_succeed(&n1.config, &["init", "--force"], what);
    let w = n1.start();
    assert!(
        within(secs(20), || active_is(&n1.config, "n1")),
        "{what}: n1 is not active after init --force: {}",
        w.log()
    );
    must_succeed(&n1.config, &["status"], what);
    cluster.assert_safe();
}

/// Every Redis key warden reads, holding a value of another type (or a hash whose version
/// is not a number): today `status` and `init --force` say "outcome unknown: ...
/// WRONGTYPE" and exit 1 for good, `pause` says control "kept changing", and a `seen` of
/// another type makes the active fail every renewal.
#[test]
fn redis_keys_of_the_wrong_type_are_named_and_cleared() {
    let db = RedisServer::start();
    let cases: &[(&str, bool, &[&[&str]])] = &[
        ("control", false, &[&["SET", "control", "x"]]),
        (
            "control",
            false,
            &[
                &["DEL", "control"],
                &["HSET", "control", "data", "{}", "version", "abc"],
            ],
        ),
        (
            "breadcrumb",
            false,
            &[&["DEL", "breadcrumb"], &["RPUSH", "breadcrumb", "x"]],
        ),
        ("history", false, &[&["SET", "history", "x"]]),
        (
            "history",
            false,
            &[&["DEL", "history"], &["HSET", "history", "version", "abc"]],
        ),
        ("seen", false, &[&["DEL", "seen"], &["SET", "seen", "x"]]),
        (
            "members",
            false,
            &[&["DEL", "members"], &["HSET", "members", "a", "b"]],
        ),
        (
            "member:ghost",
            false,
            &[
                &["SADD", "members", "ghost"],
                &["SET", "member:ghost", "\u{ff}"],
            ],
        ),
        ("aside", false, &[&["SET", "aside", "x"]]),
        (
            "epoch",
            false,
            &[&["DEL", "epoch"], &["HSET", "epoch", "a", "1"]],
        ),
        ("lock", true, &[&["SET", "lock", "x"]]),
    ];
    for (key, lock_lost, commands) in cases {
        let cluster = initialized(Cluster::with_redis(&db));
        let what = format!("key {key} after {commands:?}");
        // Keys that no running node rewrites at once: `status` must name them. (Not the
        // breadcrumb since stop 44: the active looks at it after every renewal and writes
        // back one it cannot read, within a renewal interval; this raced `status`.)
        let named = ["control", "aside", "epoch"]
            .contains(key)
            .then(|| format!("warden:{{{}}}:{key}", cluster.name));
        garbage_is_named_and_cleared(&cluster, &what, *lock_lost, named.as_deref(), || {
            for command in commands.iter() {
                let full = format!("warden:{{{}}}:{}", cluster.name, command[1]);
                let mut args = command.to_vec();
                args[1] = &full;
                db.cli(&args);
            }
        });
    }
}

/// `warden ARGS`, which must not panic, and must exit 0, or 1 with a message naming every
/// one of `names` (the table and the column that hold the garbage).
fn answers_naming(config: &std::path::Path, args: &[&str], what: &str, names: &[&str]) {
    let out = cli(config, args);
    let said = describe(&out);
    assert!(
        !said.contains("panicked") && matches!(out.status.code(), Some(0 | 1)),
        "{what}: `warden {}`: {said}",
        args.join(" ")
    );
    if out.status.code() == Some(1) {
        assert!(
            names.iter().all(|n| said.contains(n)),
            "{what}: `warden {}` does not name {names:?}: {said}",
            args.join(" ")
        );
    }
}

/// A MySQL column whose type an operator changed, holding what no warden writes: the
/// driver's row conversion panicked (`status`, `pause`, `init --force` exited 101 with
/// "Couldn't convert Row"). Each command now answers, naming the table and the column.
#[test]
fn mysql_columns_holding_garbage_are_named_never_a_panic() {
    let cases: &[(&str, &[&str], &str)] = &[
        (
            "ALTER TABLE warden.warden_kv MODIFY version VARCHAR(40) NOT NULL; REPLACE INTO \
             warden.warden_kv (cluster, name, value, version) VALUES ('{c}', 'control', '{}', \
             'abc')",
            &["warden_kv", "version"],
            "a kv version that is not a number",
        ),
        (
            "ALTER TABLE warden.warden_epoch MODIFY epoch VARCHAR(40) NOT NULL; UPDATE \
             warden.warden_epoch SET epoch = 'abc' WHERE cluster = '{c}'",
            &["warden_epoch", "epoch"],
            "an epoch counter that is not a number",
        ),
        (
            "ALTER TABLE warden.warden_lock MODIFY session VARCHAR(40) NOT NULL; UPDATE \
             warden.warden_lock SET session = 'abc' WHERE cluster = '{c}'",
            &["warden_lock", "session"],
            "a lock session that is not a number",
        ),
    ];
    for (sql, names, what) in cases {
        let db = MariaDb::start();
        let cluster = initialized(Cluster::with_mysql(&db));
        let (n1, mut w) = start_n1_active(&cluster, what);
        db.sql(&sql.replace("{c}", &cluster.name));
        for args in [&["status"][..], &["pause", "--reason", "x"]] {
            answers_naming(&n1.config, args, what, names);
        }
        w.sigterm();
        w.wait_exit(secs(20));
        assert!(!w.log_mentions("panicked"), "{what}: {}", w.log());
        // Once n1's rows expired (init --force refuses while n1 holds the lock, and
        // `status` may not be able to say when that is).
        let mut refused = String::new();
        let expired = within(secs(20), || {
            let out = cli(&n1.config, &["init", "--force"]);
            refused = describe(&out);
            !refused.contains("refusing `init --force`")
        });
        assert!(expired, "{what}: init --force refused for 20 s: {refused}");
        answers_naming(&n1.config, &["init", "--force"], what, names);
        answers_naming(&n1.config, &["status"], what, names);
    }
}

/// Values near the top of their columns: a kv or lock row version at 2^63-1 made every
/// `version + 1` fail (`pause` said control "kept changing"; the active's renewals failed),
/// and an epoch counter at 2^64-1 (or anything at or above 2^53, which no counter gives)
/// failed every promotion. Versions wrap; such a counter is lost data that `init --force`
/// replaces.
#[test]
fn mysql_values_near_overflow_are_cleared() {
    let db = MariaDb::start();
    let cases: &[(&str, &str)] = &[
        (
            "kv version at 2^63-1",
            "REPLACE INTO warden.warden_kv (cluster, name, value, version) VALUES ('{c}', \
             'control', '{}', 9223372036854775807)",
        ),
        (
            "lock version at 2^63-1",
            "UPDATE warden.warden_lock SET version = 9223372036854775807 WHERE cluster = '{c}'",
        ),
        (
            "epoch counter at 2^64-1",
            "UPDATE warden.warden_epoch SET epoch = 18446744073709551615 WHERE cluster = '{c}'",
        ),
    ];
    for (what, sql) in cases {
        let cluster = initialized(Cluster::with_mysql(&db));
        garbage_is_named_and_cleared(&cluster, what, false, None, || {
            db.sql(&sql.replace("{c}", &cluster.name));
        });
    }
}

/// Redis's counter at or above 2^53 (no counter gives it) is lost data too.
#[test]
fn a_redis_counter_near_overflow_is_cleared() {
    let db = RedisServer::start();
    let cluster = initialized(Cluster::with_redis(&db));
    garbage_is_named_and_cleared(&cluster, "counter at 2^63-1", false, None, || {
        db.cli(&[
            "SET",
            &format!("warden:{{{}}}:epoch", cluster.name),
            "9223372036854775807",
        ]);
    });
}

/// SQL that moves the lock row's times `ahead` into the future, as a MySQL server whose
/// clock stepped back by that much sees the times the holder wrote before the step.
fn lock_row_ahead(cluster: &str, ahead: &str) -> String {
    format!(
        "UPDATE warden.warden_lock SET renewed_at = renewed_at + INTERVAL {ahead}, expires_at \
         = expires_at + INTERVAL {ahead} WHERE cluster = '{cluster}'"
    )
}

/// SPEC §3a, issue 31: a lock row whose times lie a day ahead of the server's clock (the
/// clock stepped back) while its holder is dead kept every standby out for that day. A
/// standby takes it once the row has not changed (its `version`, bumped by every renewal)
/// for the holder's own session timeout on the standby's clock: by then the holder's lease
/// (half of that after its last renewal) has ended, whatever the server's clock says.
#[test]
fn a_mysql_lock_row_ahead_of_the_clock_with_a_dead_holder_is_taken() {
    let db = MariaDb::start();
    let cluster = initialized(Cluster::with_mysql(&db));
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let wardens = start_active_then_standbys(&n1, &[&n2]);
    // Frozen first, so that no renewal lands between the update and the kill.
    wardens[0].sigstop();
    db.sql(&lock_row_ahead(&cluster.name, "1 DAY"));
    wardens[0].kill9();
    assert!(
        within(secs(30), || active_is(&n2.config, "n2")),
        "n2 is not active within 30 s of a dead holder whose lock row is a day ahead: {}",
        wardens[1].log()
    );
    assert!(
        wardens[1].log_mentions("warden_lock"),
        "n2's log does not name the lock row: {}",
        wardens[1].log()
    );
    cluster.assert_safe();
}

/// The other side of [`a_mysql_lock_row_ahead_of_the_clock_with_a_dead_holder_is_taken`]:
/// a live holder whose row lies ahead keeps its lock (its renewals move the row), and the
/// standby never takes it early.
#[test]
fn a_mysql_lock_row_ahead_of_the_clock_with_a_live_holder_stays_its() {
    let db = MariaDb::start();
    let cluster = initialized(Cluster::with_mysql(&db));
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let _wardens = start_active_then_standbys(&n1, &[&n2]);
    // Several times, over more than the session timeout (2 s) in all.
    for _ in 0..12 {
        db.sql(&lock_row_ahead(&cluster.name, "1 DAY"));
        std::thread::sleep(ms(250));
    }
    let status = status_json(&n1.config);
    assert_eq!(active_id(&status).as_deref(), Some("n1"), "{status:#}");
    assert_eq!(n1.runs().len(), 1, "n1's service was restarted");
    assert!(n2.runs().is_empty(), "n2 ran the service");
    cluster.assert_safe();
}

/// Issue 31, class 6: a Redis URL naming a database the server does not have (`/99`,
/// where Redis has 16) passed `check-config` and made every command exit 3, "cannot
/// reach Redis". The server's answer is a setup error: exit 2 naming the key.
#[test]
fn a_redis_database_the_server_does_not_have_is_named() {
    let db = RedisServer::start();
    let mut cluster = Cluster::with_redis(&db);
    let url = db.url();
    let coordination = cluster.coordination.take().unwrap_or_default();
    let base = url
        .trim_end_matches(|c: char| c.is_ascii_digit())
        .trim_end_matches('/');
    cluster.coordination = Some(coordination.replace(&url, &format!("{base}/99")));
    let n = cluster.node("n1");
    let out = cli(&n.config, &["init"]);
    let said = describe(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("coordination.redis.url") && said.contains("99"),
        "{said}"
    );
}

/// Review of issue 31 (F1): `SET lock x` over the lock a live active holds. The Lua
/// scripts took a lock key of another type for no lock, so the standby took it at once
/// (in 260 ms), while the holder's lease still ran: with a fence that reports fenced
/// without acting, the two services overlapped. The garbage is now nobody's lock until it
/// expires (four session timeouts). n1's warden is frozen as the garbage lands, so that
/// n2 surely tries first: it must not be active within n1's session timeout (on the old
/// scripts it was, within a second); n1, thawed, finds its lock gone and stops its
/// service; n2 takes over once the garbage expired, and the journals show no overlap.
#[test]
fn a_redis_lock_key_of_another_type_is_not_taken_while_its_holders_lease_runs() {
    let db = RedisServer::start();
    let mut cluster = Cluster::with_redis(&db);
    cluster.session_timeout = secs(3);
    cluster.use_redis(&db);
    let cluster = initialized(cluster);
    let opts = || NodeOptions {
        fences: Some(vec![cluster.no_op_fence()]),
        ..NodeOptions::default()
    };
    let (n1, n2) = (
        cluster.node_with("n1", opts()),
        cluster.node_with("n2", opts()),
    );
    let w1 = n1.start();
    assert!(
        within(secs(20), || active_is(&n1.config, "n1")),
        "{}",
        w1.log()
    );
    let w2 = n2.start();
    assert!(
        within(secs(20), || try_status_json(&n1.config)
            .is_ok_and(|s| member_ids(&s).len() == 2)),
        "{}",
        w2.log()
    );
    let key = format!("warden:{{{}}}:lock", cluster.name);
    freeze_pid(w1.pid());
    let planted = std::time::Instant::now();
    db.cli(&["SET", &key, "x"]);
    holds_for(
        secs(3),
        "n2 stays out inside n1's session timeout",
        || match try_status_json(&n2.config).ok().and_then(|s| active_id(&s)) {
            Some(id) if id == "n2" => Err(format!(
                "n2 took a lock key of another type {:?} after it landed: {}",
                planted.elapsed(),
                w2.log()
            )),
            _ => Ok(()),
        },
    );
    thaw_pid(w1.pid());
    assert!(
        within(secs(30), || active_is(&n2.config, "n2")
            || active_is(&n2.config, "n1")),
        "nobody active after the garbage lock expired: {}\n{}",
        w1.log(),
        w2.log()
    );
    cluster.assert_safe();
}
