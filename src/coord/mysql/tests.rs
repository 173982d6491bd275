//! The MySQL backend's pure parts: the session's bounds and a server run's identity.

use super::*;

/// SPEC 3a: the server ends a silent connection within the session timeout, and the
/// pool stops reusing one well before that.
#[test]
fn session_bounds_stay_within_the_session_timeout() {
    for (session, wait) in [
        (1_000, 1),
        (1_999, 1),
        (2_000, 2),
        (10_000, 10),
        (600_000, 600),
    ] {
        let b = SessionBounds::of(Duration::from_millis(session));
        assert_eq!(b.wait_timeout_s, wait, "{session} ms");
        assert!(Duration::from_secs(wait as u64) <= Duration::from_millis(session));
        assert_eq!(b.reuse_for, Duration::from_secs(wait as u64) / 2);
    }
}

/// Another run: another identity, or a start more than 2 s apart. A server that hides
/// its `Uptime` is compared by identity; at the join, a start time that went missing
/// since registration counts as another run, at the keepalive as no verdict.
#[test]
fn a_server_run_without_a_start_time_compares_its_identity_only() {
    let run = |id: &str, started: Option<i64>| ServerRun {
        id: id.into(),
        started,
    };
    let then = run("db:3306:1", Some(1_000));
    for (now, other) in [
        (run("db:3306:1", Some(1_002)), false),
        (run("db:3306:1", Some(1_003)), true),
        (run("db:3306:1", None), false),
        (run("db:3306:2", None), true),
        (run("db:3306:2", Some(1_000)), true),
    ] {
        assert_eq!(now.surely_other_than(&then), other, "{now:?}");
        // The join is strict: a start time that went missing is another run.
        assert_eq!(
            now.other_than(&then),
            other || now.started.is_none(),
            "{now:?}"
        );
    }
    assert!(!run("db:3306:1", Some(5)).other_than(&run("db:3306:1", None)));
    assert!(!run("db:3306:1", None).other_than(&run("db:3306:1", None)));
}
