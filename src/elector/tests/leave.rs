//! Demotion and release (SPEC §4.4, §4.5).

use super::*;

#[test]
fn rule_4_4_session_lost_while_active_demotes_and_opens_a_new_session() {
    let mut h = H::new();
    h.active(3);
    let a = h.feed(Event::SessionLost);
    let s = H::ticket_of(&a);
    assert_eq!(
        a,
        vec![
            Action::StopService {
                ticket: s,
                cause: StopCause::Forced
            },
            Action::Connect
        ]
    );
    // A new session while the old service still stops: no join yet.
    assert_eq!(
        h.feed(Event::SessionStarted {
            granted: None,
            control: ControlView::default()
        }),
        vec![]
    );
    let a = h.feed(Event::ServiceStopped {
        ticket: s,
        clean: true,
        detail: String::new(),
    });
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
}

#[test]
fn rule_4_4_unhealthy_active_demotes_deletes_its_breadcrumb_and_releases() {
    let mut h = H::new();
    h.active(3);
    let a = h.feed(Event::ServiceHealthChanged {
        healthy: false,
        detail: "tcp refused".into(),
    });
    let s = H::ticket_of(&a);
    assert_eq!(
        a,
        vec![Action::StopService {
            ticket: s,
            cause: StopCause::Demote
        }]
    );
    assert_eq!(h.e.role(), Role::Demoting);
    let a = h.feed(Event::ServiceStopped {
        ticket: s,
        clean: true,
        detail: String::new(),
    });
    let d = H::ticket_of(&a);
    assert_eq!(
        a,
        vec![Action::Release {
            ticket: d,
            breadcrumb: Some(3)
        }]
    );
}

#[test]
fn rule_4_4_an_unclean_demotion_keeps_the_breadcrumb() {
    let mut h = H::new();
    h.active(3);
    let a = h.feed(Event::ServiceExited {
        reason: "exit 1".into(),
    });
    // Its main process is gone, but children may run on: stop them first.
    assert!(
        matches!(
            a.as_slice(),
            [Action::StopService {
                cause: StopCause::Demote,
                ..
            }]
        ),
        "{a:?}"
    );
    let a = h.feed(Event::ServiceStopped {
        ticket: H::ticket_of(&a),
        clean: false,
        detail: "pid 12 survived SIGKILL".into(),
    });
    assert!(
        matches!(
            a.as_slice(),
            [Action::Release {
                breadcrumb: None,
                ..
            }]
        ),
        "leftovers keep the breadcrumb: {a:?}"
    );

    let mut h = H::new();
    h.active(3);
    let a = h.feed(Event::ServiceHealthChanged {
        healthy: false,
        detail: "x".into(),
    });
    let a = h.feed(Event::ServiceStopped {
        ticket: H::ticket_of(&a),
        clean: false,
        detail: "pid 9 still runs".into(),
    });
    assert_released_keeping_breadcrumb(&a);
}

#[test]
fn rule_4_4_lock_gone_while_active_demotes_and_joins_again() {
    let mut h = H::new();
    h.active(3);
    let a = h.feed(Event::LockDeleted);
    let s = H::ticket_of(&a);
    assert!(matches!(
        a.as_slice(),
        [Action::StopService {
            cause: StopCause::Forced,
            ..
        }]
    ));
    let a = h.feed(Event::ServiceStopped {
        ticket: s,
        clean: true,
        detail: String::new(),
    });
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
}

#[test]
fn rule_4_5_stop_hands_over_cleanly_and_exits_zero() {
    let mut h = H::new();
    h.active(3);
    let a = h.feed(Event::StopRequested);
    let s = H::ticket_of(&a);
    let a = h.feed(Event::ServiceStopped {
        ticket: s,
        clean: true,
        detail: String::new(),
    });
    let r = H::ticket_of(&a);
    assert_eq!(
        a,
        vec![Action::Release {
            ticket: r,
            breadcrumb: Some(3)
        }]
    );
    let a = h.feed(Event::Released { ticket: r });
    assert_eq!(a, vec![Action::Exit { code: 0 }]);
}

#[test]
fn rule_4_5_stop_as_standby_exits_at_once() {
    let mut h = H::new();
    let j = h.session();
    h.feed(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Exists { epoch: None },
    });
    assert_eq!(h.feed(Event::StopRequested), vec![Action::Exit { code: 0 }]);
}
