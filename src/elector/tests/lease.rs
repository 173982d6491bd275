//! The lease and its renewals (SPEC §4 "The lease", §4.4).

use super::*;

#[test]
fn lease_renewals_every_sixth_and_the_lease_runs_from_the_send_time() {
    let mut h = H::new();
    h.active(3);
    let t0 = h.now;
    let a = h.advance(T / 6);
    let r = H::ticket_of(&a);
    assert_eq!(a, vec![Action::Renew { ticket: r }]);
    let sent = h.now;
    // The ack arrives late; the lease counts from the send time anyway.
    h.now += Duration::from_millis(400);
    let a = h.feed(Event::Renewed {
        ticket: r,
        outcome: WriteOutcome::Done,
    });
    // And the active looks at its breadcrumb (seed 965443).
    assert!(
        matches!(a.as_slice(), [Action::KeepBreadcrumb { epoch: 3, .. }]),
        "{a:?}"
    );
    assert_eq!(h.e.role(), Role::Active);
    assert_eq!(h.e.lease.end, Some(sent + T / 2));
    assert!(sent > t0);
}

#[test]
fn rule_4_4_late_renewal_means_neutral_demotion_before_and_kill_at_lease_end() {
    let mut h = H::new();
    h.active(3);
    let lease_end = h.e.lease.end.unwrap();
    // The first renewal is sent and never answered.
    let a = h.advance(T / 6);
    assert!(matches!(a.as_slice(), [Action::Renew { .. }]));
    // One interval later it is late: neutral.
    h.advance(T / 6);
    assert_eq!(h.e.role(), Role::Neutral);
    // Demotion starts at lease end less the graceful stop, and not before.
    let until_demote = lease_end - GRACE - h.now;
    assert_eq!(h.advance(until_demote - Duration::from_millis(1)), vec![]);
    let a = h.advance(Duration::from_millis(1));
    assert!(
        matches!(
            a.as_slice(),
            [Action::StopService {
                cause: StopCause::Forced,
                ..
            }]
        ),
        "{a:?}"
    );
    // The stop hangs: at the lease end the service is killed.
    let a = h.advance(GRACE);
    assert_eq!(
        a,
        vec![Action::KillService {
            cause: KillCause::LeaseEnd
        }]
    );
    assert_eq!(h.now, lease_end);
}

#[test]
fn rule_4_4_a_graceful_stop_longer_than_the_lease_serves_until_a_renewal_is_late() {
    // Hooks mode's defaults: hook_timeout 10s against a 5s lease.
    let mut h = H::new();
    h.e = Elector::new(
        ElectorConfig {
            demote_grace: T * 2,
            ..cfg()
        },
        true,
    );
    h.drain();
    h.active(3);
    // Renewals on time: serving on and on, no demotion.
    for _ in 0..10 {
        for a in h.advance(T / 6) {
            match a {
                Action::Renew { ticket } => {
                    h.feed(Event::Renewed {
                        ticket,
                        outcome: WriteOutcome::Done,
                    });
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(h.e.role(), Role::Active);
    }
    // A renewal goes unanswered: demotion starts as soon as it is late.
    let a = h.advance(T / 6);
    assert!(matches!(a.as_slice(), [Action::Renew { .. }]), "{a:?}");
    let a = h.advance(T / 6);
    assert!(
        matches!(
            a.as_slice(),
            [Action::StopService {
                cause: StopCause::Forced,
                ..
            }]
        ),
        "{a:?}"
    );
}

#[test]
fn rule_4_4_a_later_renewal_from_the_same_session_promotes_again_without_fencing() {
    let mut h = H::new();
    h.active(3);
    let a = h.advance(T / 6);
    let r1 = H::ticket_of(&a);
    h.feed(Event::Renewed {
        ticket: r1,
        outcome: WriteOutcome::Unknown,
    });
    assert_eq!(h.e.role(), Role::Neutral);
    // Renewals keep failing until the demotion.
    let mut stop = None;
    for _ in 0..40 {
        for a in h.advance(RETRY_DELAY) {
            match a {
                Action::Renew { ticket } => {
                    h.feed(Event::Renewed {
                        ticket,
                        outcome: WriteOutcome::Unknown,
                    });
                }
                Action::StopService { ticket, .. } => stop = Some(ticket),
                other => panic!("unexpected {other:?}"),
            }
        }
        if stop.is_some() {
            break;
        }
    }
    let stop = stop.expect("demotion before the lease end");
    let a = h.feed(Event::ServiceStopped {
        ticket: stop,
        clean: true,
        detail: String::new(),
    });
    assert_eq!(a, vec![]);
    // ZooKeeper is back within the session: the next renewal succeeds.
    let a = h.advance(RETRY_DELAY);
    let r = H::ticket_of(&a);
    let a = h.feed(Event::Renewed {
        ticket: r,
        outcome: WriteOutcome::Done,
    });
    // The breadcrumb still names the stopped service's processes: it names none
    // before anything starts again, so no fencer can find "nothing left" of a start it
    // does not name.
    let f = match a.as_slice() {
        [Action::ForgetService { ticket, epoch: 3 }] => *ticket,
        other => panic!("the breadcrumb is rewritten first: {other:?}"),
    };
    let a = h.feed(Event::ServiceForgotten {
        ticket: f,
        outcome: WriteOutcome::Done,
    });
    assert!(
        matches!(a.as_slice(), [Action::StartService { epoch: 3, .. }]),
        "same epoch, no fence: {a:?}"
    );
}

#[test]
fn rule_4_the_lease_follows_a_granted_session_timeout_below_the_configured_one() {
    let mut h = H::new();
    let a = h.feed_all(Event::SessionStarted {
        granted: Some(T / 3),
        control: ControlView::default(),
    });
    assert!(
        has(
            &a,
            |a| matches!(a, Action::Notice { warn: true, message } if message.contains("granted"))
        ),
        "{a:?}"
    );
    assert_eq!(h.e.session_timeout(), T / 3);
    let r = h.held(H::ticket_of(&strip(a)), 2);
    let a = h.read(r, BreadcrumbView::Absent);
    let sent = h.now;
    let a = h.feed(Event::Committed {
        ticket: H::ticket_of(&a),
        outcome: WriteOutcome::Done,
    });
    assert!(
        matches!(a.as_slice(), [Action::StartService { lease_valid_until, .. }] if *lease_valid_until == sent + T / 6),
        "{a:?}"
    );
    // A larger grant than configured changes no interval, but is said: a dead node
    // is noticed later than configured.
    let mut h = H::new();
    let all = h.feed_all(Event::SessionStarted {
        granted: Some(T * 2),
        control: ControlView::default(),
    });
    assert_eq!(h.e.session_timeout(), T);
    assert!(
        has(&all, |a| matches!(a, Action::Notice { warn: true, message }
            if message.contains("minSessionTimeout"))),
        "{all:?}"
    );
}

#[test]
fn rule_4_4_a_renewal_refused_joins_again_to_learn_whether_the_lock_is_still_ours() {
    // The store forgot the renewals that moved the lock's version: our session may still
    // hold it. Even a node that would never join by itself (priority 0 now) joins once,
    // so that a lock it holds is released, not kept for ever (seed 135015).
    let mut h = H::new();
    h.active(3);
    h.e.cfg.priority = 0;
    let a = h.advance(T / 6);
    let a = h.feed(Event::Renewed {
        ticket: H::ticket_of(&a),
        outcome: WriteOutcome::Conflict,
    });
    let a = h.feed(Event::ServiceStopped {
        ticket: H::ticket_of(&a),
        clean: true,
        detail: "stopped".into(),
    });
    assert!(has(&a, |a| matches!(a, Action::Join { .. })), "{a:?}");
}
