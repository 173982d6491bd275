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
/// then `status`, `pause` and `resume` answer (exit 0), n1 is active (`lock_lost`: again,
/// after losing a lock the garbage replaced), stopped; `init --force` exits 0, and n1
/// started again is active.
fn garbage_is_named_and_cleared(cluster: &Cluster, what: &str, lock_lost: bool, plant: impl Fn()) {
    let n1 = cluster.node("n1");
    let mut w = n1.start();
    assert!(
        within(secs(20), || active_is(&n1.config, "n1")),
        "{what}: n1 is not active: {}",
        w.log()
    );
    plant();
    must_succeed(&n1.config, &["status"], what);
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
        garbage_is_named_and_cleared(&cluster, &what, *lock_lost, || {
            for command in commands.iter() {
                let full = format!("warden:{{{}}}:{}", cluster.name, command[1]);
                let mut args = command.to_vec();
                args[1] = &full;
                db.cli(&args);
            }
        });
    }
}
