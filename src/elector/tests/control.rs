//! Pause and planned switchovers (SPEC §8).

use super::*;

#[test]
fn paused_cluster_keeps_the_active_when_its_service_fails() {
    let mut h = H::new();
    h.active(3);
    h.feed(Event::ControlChanged {
        control: ControlView {
            paused: true,
            failover: None,
        },
    });
    let a = h.feed(Event::ServiceExited {
        reason: "crash".into(),
    });
    // What is left of it is stopped, and nothing starts beside it.
    assert!(
        matches!(a.as_slice(), [Action::StopService { .. }]),
        "{a:?}"
    );
    assert_eq!(h.e.role(), Role::Active);
    let a = h.feed(Event::ServiceStopped {
        ticket: H::ticket_of(&a),
        clean: true,
        detail: String::new(),
    });
    assert_eq!(a, vec![], "paused: no restart, no handover");
    assert_eq!(h.e.role(), Role::Active);
}

#[test]
fn rule_8_a_request_with_a_far_deadline_lapses_within_the_longest_timeout() {
    let mut h = H::new();
    let far = ControlView {
        paused: false,
        failover: Some(FailoverView {
            from: "n9".into(),
            to: Some("n8".into()),
            deadline: "2099-01-01T00:00:00Z".into(),
            force: false,
            lapses_at: h.now + Duration::from_secs(3600 * 24 * 365),
        }),
    };
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: far.clone(),
    });
    assert_eq!(a, vec![], "a request naming another node keeps us out");
    // Seen again later (a watch): still counted from the first sight.
    h.now += Duration::from_secs(1800);
    let a = h.feed(Event::ControlChanged {
        control: far.clone(),
    });
    assert_eq!(a, vec![]);
    let a = h.advance(MAX_SWITCHOVER - Duration::from_secs(1800));
    assert!(
        matches!(a.as_slice(), [Action::Join { .. }]),
        "the request lapsed {} after it was first seen: {a:?}",
        humantime::format_duration(MAX_SWITCHOVER)
    );
}

#[test]
fn planned_switchover_away_from_us_demotes_cleanly_and_stays_out() {
    let mut h = H::new();
    h.active(3);
    let lapses_at = h.now + Duration::from_secs(30);
    let a = h.feed(Event::ControlChanged {
        control: ControlView {
            paused: false,
            failover: Some(FailoverView {
                deadline: "2026-01-01T00:00:00Z".into(),
                force: false,
                from: "n1".into(),
                to: Some("n2".into()),
                lapses_at,
            }),
        },
    });
    let s = H::ticket_of(&a);
    assert!(matches!(
        a.as_slice(),
        [Action::StopService {
            cause: StopCause::Demote,
            ..
        }]
    ));
    let a = h.feed(Event::ServiceStopped {
        ticket: s,
        clean: true,
        detail: String::new(),
    });
    let a = h.feed(Event::Released {
        ticket: H::ticket_of(&a),
    });
    assert_eq!(a, vec![Action::Connect]);
    // The request is still in control when the new session reads it: stay out.
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView {
            paused: false,
            failover: Some(FailoverView {
                deadline: "2026-01-01T00:00:00Z".into(),
                force: false,
                from: "n1".into(),
                to: Some("n2".into()),
                lapses_at,
            }),
        },
    });
    assert_eq!(a, vec![]);
    // Cleared by the new active: join as a standby again, no back-off.
    let a = h.feed(Event::ControlChanged {
        control: ControlView::default(),
    });
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
}

#[test]
fn a_lapsed_switchover_request_is_cleared_by_the_next_active() {
    let mut h = H::new();
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView {
            paused: false,
            failover: Some(FailoverView {
                deadline: "2026-01-01T00:00:00Z".into(),
                force: false,
                from: "n9".into(),
                to: Some("n8".into()),
                lapses_at: h.now + Duration::from_secs(2),
            }),
        },
    });
    assert_eq!(a, vec![], "a request naming another node keeps us out");
    let a = h.advance(Duration::from_secs(2));
    let j = H::ticket_of(&a);
    let r = h.held(j, 4);
    let a = h.read(r, BreadcrumbView::Absent);
    let a = h.feed(Event::Committed {
        ticket: H::ticket_of(&a),
        outcome: WriteOutcome::Done,
    });
    let a = h.feed(Event::ServiceStarted {
        ticket: H::ticket_of(&a),
    });
    let r = H::ticket_of_record(&a);
    assert_eq!(
        a,
        vec![Action::RecordService {
            ticket: r,
            epoch: 4
        }]
    );
    let a = h.recorded(&a);
    assert!(
        matches!(a.as_slice(), [Action::ClearFailover { request }] if request.from == "n9"),
        "{a:?}"
    );
}

/// The request that moves the active n1 to n2, lapsing 30 s from `now`.
fn n1_to_n2(now: Instant) -> ControlView {
    ControlView {
        paused: false,
        failover: Some(FailoverView {
            deadline: "2026-01-01T00:00:00Z".into(),
            force: false,
            from: "n1".into(),
            to: Some("n2".into()),
            lapses_at: now + Duration::from_secs(30),
        }),
    }
}

/// Active n1 asked to step down for n2: the demote is out; returns its ticket.
fn ceding(h: &mut H) -> Ticket {
    h.active(3);
    let a = h.feed(Event::ControlChanged {
        control: n1_to_n2(h.now),
    });
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
    H::ticket_of(&a)
}

#[test]
fn rule_6a_2_a_switchover_whose_demote_fails_is_called_off_and_the_node_promotes_again() {
    let mut h = H::new();
    let s = ceding(&mut h);
    let lease_end = h.e.lease.end.expect("a lease");
    let a = h.feed_all(Event::DemoteFailed {
        ticket: s,
        detail: "the demote hook failed: demote.sh failed: exit code 1 (n2 is behind)".into(),
        said: Some("n2 is behind".into()),
    });
    let r = repin_of(&a);
    let request = h.e.called_off.clone().expect("the request called off");
    assert_eq!(
        a,
        vec![
            Action::Notice {
                warn: true,
                message: "the demote hook failed in a planned switchover (n2 is behind): \
                          calling the switchover off and promoting this node again at epoch 3"
                    .into()
            },
            // Cleared at once: a step down before the promote is recorded must not hand
            // over to the successor the demote refused.
            Action::ClearFailover { request },
            Action::RepinService {
                ticket: r,
                epoch: 3
            },
            Action::Transition {
                from: Role::Demoting,
                to: Role::Promoting,
                epoch: Some(3),
                reason: Reason::SwitchoverCalledOff("n2 is behind".into()),
                history: true,
                held: true,
            },
        ]
    );
    let a = h.feed_all(Event::ServiceForgotten {
        ticket: r,
        outcome: WriteOutcome::Done,
    });
    let t = H::ticket_of(&a);
    assert_eq!(
        a,
        vec![Action::StartService {
            ticket: t,
            epoch: 3,
            lease_valid_until: lease_end,
        }]
    );
    // The same request, seen again (a watch, a new read): no second step-down.
    assert_eq!(
        h.feed(Event::ControlChanged {
            control: n1_to_n2(h.now),
        }),
        vec![]
    );
    let a = h.feed(Event::ServiceStarted { ticket: t });
    let a = h.recorded(&a);
    assert_eq!(h.e.role(), Role::Active);
    assert!(
        matches!(a.as_slice(), [Action::ClearFailover { request }]
            if request.from == "n1" && request.to.as_deref() == Some("n2")),
        "{a:?}"
    );
    assert_eq!(h.e.epoch(), Some(3));
    // Until it is cleared the request stays withdrawn for this node; once gone, a new one
    // steps it down as always.
    assert_eq!(
        h.feed(Event::ControlChanged {
            control: n1_to_n2(h.now),
        }),
        vec![]
    );
    h.feed(Event::ControlChanged {
        control: ControlView::default(),
    });
    let mut again = n1_to_n2(h.now);
    if let Some(f) = &mut again.failover {
        f.deadline = "2026-01-01T00:01:00Z".into();
    }
    let a = h.feed(Event::ControlChanged { control: again });
    assert!(
        matches!(a.as_slice(), [Action::StopService { .. }]),
        "{a:?}"
    );
}

/// The ticket of the [`Action::RepinService`] in `a`.
fn repin_of(a: &[Action]) -> Ticket {
    a.iter()
        .find_map(|a| match a {
            Action::RepinService { ticket, .. } => Some(*ticket),
            _ => None,
        })
        .expect("a RepinService action")
}

/// SPEC §6a.2: the demote of a called-off switchover may have restarted the service
/// under another pid (the PostgreSQL recipe's immediate shutdown and restart as a standby
/// of nobody). Before the promote hook runs again, the breadcrumb is rewritten naming the
/// process running now (the driver pins it anew when the pinned one is gone), so that
/// fencing finds the process that serves; nothing starts until that is acknowledged, an
/// unknown outcome is retried under the lease, and a conflict means the lock is not ours.
#[test]
fn rule_6a_2_a_called_off_switchover_names_the_process_running_now_before_it_promotes_again() {
    let mut h = H::new();
    let s = ceding(&mut h);
    let lease_end = h.e.lease.end.expect("a lease");
    let a = h.feed(Event::DemoteFailed {
        ticket: s,
        detail: "the demote hook failed".into(),
        said: Some("restarted as a standby of nobody".into()),
    });
    let r = repin_of(&a);
    let request = h.e.called_off.clone().expect("the request called off");
    assert_eq!(
        a,
        vec![
            Action::ClearFailover { request },
            Action::RepinService {
                ticket: r,
                epoch: 3
            }
        ]
    );
    // Not acknowledged: nothing starts, the same rewrite is retried.
    let a = h.feed(Event::ServiceForgotten {
        ticket: r,
        outcome: WriteOutcome::Unknown,
    });
    assert_eq!(a, vec![]);
    let a = h.advance(RETRY_DELAY);
    let r = repin_of(&a);
    assert!(
        a.iter()
            .all(|a| matches!(a, Action::RepinService { .. } | Action::Renew { .. })),
        "{a:?}"
    );
    let a = h.feed(Event::ServiceForgotten {
        ticket: r,
        outcome: WriteOutcome::Done,
    });
    let t = H::ticket_of(&a);
    assert_eq!(
        a,
        vec![Action::StartService {
            ticket: t,
            epoch: 3,
            lease_valid_until: lease_end,
        }]
    );
    // Promoted and recorded: a later start again under this lock forgets, as always.
    let a = h.feed(Event::ServiceStarted { ticket: t });
    h.recorded(&a);
    assert_eq!(h.e.role(), Role::Active);
    assert!(!h.e.repin);

    // The rewrite conflicts: the breadcrumb is not ours, nothing is promoted.
    let mut h = H::new();
    let a = called_off(&mut h);
    let a = h.feed(Event::ServiceForgotten {
        ticket: repin_of(&a),
        outcome: WriteOutcome::Conflict,
    });
    assert!(
        !a.iter()
            .any(|a| matches!(a, Action::StartService { .. } | Action::RepinService { .. })),
        "{a:?}"
    );
    assert_ne!(h.e.role(), Role::Active);
    // The failed demote may have left the service taking writes: demoted first (seed
    // 521978). Then, the lock may still be ours (the store forgot only the breadcrumb):
    // the node joins again whatever it may do now, to learn so and release it (review at
    // stop 35: a priority-0 or ineligible node kept it, renewed by the keepalive, for
    // good).
    let s = match a.as_slice() {
        [Action::StopService { ticket, .. }] => *ticket,
        other => panic!("the service is demoted first: {other:?}"),
    };
    let a = h.feed(Event::ServiceStopped {
        ticket: s,
        clean: true,
        detail: String::new(),
    });
    assert!(a.iter().any(|a| matches!(a, Action::Join { .. })), "{a:?}");
}

/// An active ceding to a switchover whose demote hook fails: the switchover is called
/// off (SPEC §6a.2). Returns the actions of that failure.
fn called_off(h: &mut H) -> Vec<Action> {
    let s = ceding(h);
    h.feed(Event::DemoteFailed {
        ticket: s,
        detail: "the demote hook failed".into(),
        said: None,
    })
}

#[test]
fn rule_6a_2_when_the_promote_after_a_called_off_switchover_fails_the_breadcrumb_is_kept() {
    let mut h = H::new();
    let a = called_off(&mut h);
    let a = h.feed(Event::ServiceForgotten {
        ticket: repin_of(&a),
        outcome: WriteOutcome::Done,
    });
    let t = H::ticket_of(&a);
    let a = h.feed(Event::StartFailed {
        ticket: t,
        reason: "the promote hook failed".into(),
        ran: true,
    });
    // Demote whatever the promote did, then release keeping the breadcrumb: the target
    // fences this node.
    let d = H::ticket_of(&a);
    assert!(
        matches!(a.as_slice(), [Action::StopService { .. }]),
        "{a:?}"
    );
    let a = h.feed(Event::DemoteFailed {
        ticket: d,
        detail: "the demote hook failed".into(),
        said: None,
    });
    assert_released_keeping_breadcrumb(&a);
    let a = h.feed(Event::Released {
        ticket: H::ticket_of(&a),
    });
    assert!(a.contains(&Action::Connect), "{a:?}");
    // The request stands again: this node stays out while it is pending.
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: n1_to_n2(h.now),
    });
    assert_eq!(a, vec![]);
}

/// The simulation's seed 45962 (stop 35): a switchover whose demote failed was called off,
/// and the node stepped down again before its service was promoted again (the store
/// forgot the clear, so the request stood again; or a renewal failed). Its demote had
/// failed, so its service may still take writes: the step-down must keep the breadcrumb
/// for whoever wins to fence it. It deleted it as after a clean demote, and the target
/// promoted beside a primary that still took writes.
#[test]
fn rule_6a_2_a_step_down_before_the_promotion_again_keeps_the_breadcrumb() {
    let mut h = H::new();
    let a = called_off(&mut h);
    let _ = repin_of(&a);
    // Stopped before the rewrite and the promote hook ran: demoted again on the way out,
    // as a running service; that failing too, released with the breadcrumb kept.
    let a = h.feed(Event::StopRequested);
    assert!(
        matches!(a.as_slice(), [Action::StopService { .. }]),
        "{a:?}"
    );
    let a = h.feed(Event::DemoteFailed {
        ticket: H::ticket_of(&a),
        detail: "the demote hook failed".into(),
        said: None,
    });
    assert_released_keeping_breadcrumb(&a);

    // Never stepped down, the lease ends (its renewals fail): the service that may still
    // take writes is killed at the lease end, as a running one.
    let mut h = H::new();
    let _ = called_off(&mut h);
    let a = h.advance(T);
    assert!(
        a.contains(&Action::KillService {
            cause: KillCause::LeaseEnd
        }),
        "{a:?}"
    );
}

/// A called-off switchover whose next renewal finds the lock not this session's, before
/// the promote hook ran again: what the elector does then.
fn lock_lost_after_call_off(h: &mut H) -> Vec<Action> {
    let a = called_off(h);
    let _ = repin_of(&a);
    let a = h.advance(T / 6);
    let r = a
        .iter()
        .find_map(|a| match a {
            Action::Renew { ticket } => Some(*ticket),
            _ => None,
        })
        .unwrap_or_else(|| panic!("a renewal: {a:?}"));
    h.feed(Event::Renewed {
        ticket: r,
        outcome: WriteOutcome::Conflict,
    })
}

/// The simulation's seed 521978 (stop 43's soak): a switchover whose demote failed was
/// called off, and before the promote hook ran again the renewal found the lock not this
/// session's (the store had forgotten writes). The node took its service for down (a
/// called-off service counts down until promoted again) and joined again at once, so its
/// failed demote's service, still taking writes, was never demoted; the rejoin then
/// forgot even that it might be, the promotion was refused, the lock released, and the
/// target promoted beside it. Losing the lock now demotes it as a running service first,
/// and a later step-down after the rejoin does too.
#[test]
fn rule_6a_2_a_lost_lock_before_the_promotion_again_demotes_the_service() {
    let mut h = H::new();
    let a = lock_lost_after_call_off(&mut h);
    assert!(
        matches!(a.as_slice(), [.., Action::StopService { .. }]),
        "the service the failed demote left is demoted before anything else: {a:?}"
    );
    assert!(
        !a.iter().any(|a| matches!(a, Action::Join { .. })),
        "joined again with the service still taking writes: {a:?}"
    );
    let s = H::ticket_of(&a);
    let a = h.feed(Event::ServiceStopped {
        ticket: s,
        clean: true,
        detail: String::new(),
    });
    assert!(a.iter().any(|a| matches!(a, Action::Join { .. })), "{a:?}");
    // Demoted: a later step-down has nothing more to demote.
    assert!(!h.e.undemoted);

    // A SIGTERM while that demote runs: once it ends, warden exits (the review of stop
    // 43: it sat idle, neither joining nor exiting, keeping a lock it may still hold).
    let mut h = H::new();
    let a = lock_lost_after_call_off(&mut h);
    let s = H::ticket_of(&a);
    let _ = h.feed(Event::StopRequested);
    let a = h.feed(Event::ServiceStopped {
        ticket: s,
        clean: true,
        detail: String::new(),
    });
    assert!(a.contains(&Action::Exit { code: 0 }), "{a:?}");
}

#[test]
fn rule_6a_2_a_demote_that_fails_outside_a_switchover_or_past_the_lease_is_not_called_off() {
    // Past the lease: killed, a demotion forced by now (SPEC §6a.4; the review of issue
    // 34), then the old way (breadcrumb kept, lock released).
    let mut h = H::new();
    let s = ceding(&mut h);
    h.now = h.e.lease.end.expect("a lease");
    let a = h.feed(Event::DemoteFailed {
        ticket: s,
        detail: "the demote hook failed".into(),
        said: Some("no".into()),
    });
    let kill = Action::KillService {
        cause: KillCause::DemoteFailed,
    };
    assert_eq!(a.first(), Some(&kill), "{a:?}");
    assert_released_keeping_breadcrumb(&a[1..]);
    // Unhealthy: not a switchover.
    let mut h = H::new();
    h.active(3);
    let a = h.feed(Event::ServiceHealthChanged {
        healthy: false,
        detail: "down".into(),
    });
    let a = h.feed(Event::DemoteFailed {
        ticket: H::ticket_of(&a),
        detail: "the demote hook failed".into(),
        said: Some("no".into()),
    });
    assert_released_keeping_breadcrumb(&a);
}

/// SPEC §6a: a switchover request that lapses (or is withdrawn) while the old active's
/// demote hands over is gone for every node, so a release would let any standby take over,
/// one the demote never waited for. The old active, still holding the lock and its lease,
/// serves on instead, as when its demote fails.
#[test]
fn rule_6a_a_switchover_that_lapses_during_the_demote_is_called_off() {
    let mut h = H::new();
    let s = ceding(&mut h);
    // The demote takes longer than the request's 30 s (the lease is renewed meanwhile).
    h.now += Duration::from_secs(31);
    h.e.lease.end = Some(h.now + Duration::from_secs(1));
    let a = h.feed_all(Event::ServiceStopped {
        ticket: s,
        clean: true,
        detail: String::new(),
    });
    assert!(
        !a.iter().any(|a| matches!(a, Action::Release { .. })),
        "released after the request lapsed: {a:?}"
    );
    assert!(
        a.iter().any(|a| matches!(a, Action::ClearFailover { .. })),
        "{a:?}"
    );
    let r = repin_of(&a);
    assert!(
        a.iter().any(|a| matches!(a, Action::Transition { to: Role::Promoting, reason: Reason::SwitchoverCalledOff(line), .. } if line.contains("lapsed"))),
        "{a:?}"
    );
    // The demote was clean: its service is a replica, never to be killed as a primary
    // that may take writes (the review of stop 43).
    assert!(!h.e.undemoted);
    let a = h.feed_all(Event::ServiceForgotten {
        ticket: r,
        outcome: WriteOutcome::Done,
    });
    assert!(
        matches!(a.as_slice(), [Action::StartService { epoch: 3, .. }]),
        "{a:?}"
    );
}

/// The simulation's seed 53965: a node of priority 0, named by `failover --to`, won the
/// lock and read the state while the request was pending, then fenced the old active; the
/// request lapsed meanwhile (the command had said it failed and that the cluster elects
/// normally). It stands aside instead of committing.
#[test]
fn a_priority_0_node_whose_naming_request_lapsed_while_it_fenced_does_not_commit() {
    // Named, it wins the lock and reads the state while the request is pending: the old
    // active's fence goes out. Returns the fence's ticket.
    let fencing = |h: &mut H| {
        h.e.cfg.priority = 0;
        let named = ControlView {
            paused: false,
            failover: Some(FailoverView {
                deadline: "2026-01-01T00:00:00Z".into(),
                force: false,
                from: "n2".into(),
                to: Some("n1".into()),
                lapses_at: h.now + Duration::from_secs(2),
            }),
        };
        let a = h.feed(Event::SessionStarted {
            granted: None,
            control: named.clone(),
        });
        let r = h.held(H::ticket_of(&a), 4);
        let a = h.read_all(
            r,
            ClusterState {
                control: named,
                ..state(BreadcrumbView::Record {
                    record: record("n2", "inc-2", Some(3)),
                    version: Version::new(3),
                })
            },
        );
        assert!(matches!(a.as_slice(), [Action::Fence { .. }]), "{a:?}");
        H::ticket_of(&a)
    };
    // Fenced in time: the commit goes out.
    let mut early = H::new();
    let f = fencing(&mut early);
    let a = early.feed(Event::FenceDone {
        ticket: f,
        fenced: true,
        summary: "fenced".into(),
    });
    assert!(commits(&a), "{a:?}");
    let mut h = H::new();
    let f = fencing(&mut h);
    // Fenced after the lapse: released, no commit.
    h.advance(Duration::from_secs(3));
    let a = h.feed_all(Event::FenceDone {
        ticket: f,
        fenced: true,
        summary: "fenced".into(),
    });
    assert!(
        !a.iter()
            .any(|a| matches!(a, Action::CommitPromotion { .. })),
        "{a:?}"
    );
    assert!(
        a.iter().any(|a| matches!(a, Action::Release { .. })),
        "{a:?}"
    );
}

/// The review of issue 34: a switchover's demote that fails once the lease is in doubt
/// (a renewal went unanswered meanwhile) is not called off, and the stop counts as
/// unclean; nothing would then kill the service at the lease end, so it is killed now,
/// as after a forced demotion (SPEC §6a.4). With the lease whole and valid, the call-off
/// stands (the test above).
#[test]
fn rule_6a_4_a_demote_that_fails_with_the_lease_in_doubt_kills_the_service() {
    let mut h = H::new();
    let s = ceding(&mut h);
    // A renewal is sent and goes unanswered until it is late: the lease is in doubt.
    h.advance(T / 6);
    h.advance(T / 6);
    assert!(h.e.lease.doubt, "the lease should be in doubt now");
    let a = h.feed(Event::DemoteFailed {
        ticket: s,
        detail: "the demote hook failed".into(),
        said: Some("n2 is behind".into()),
    });
    assert_eq!(
        a.first(),
        Some(&Action::KillService {
            cause: KillCause::DemoteFailed
        }),
        "{a:?}"
    );
}

/// The second review of issue 34: a voluntary demotion overtaken by the lock lost (a
/// store that forgot deleted it) is forced by now too: its failed hook kills the service,
/// and until the hook reports, a warden exiting at once must kill it (SPEC §6a.4).
#[test]
fn rule_6a_4_a_demote_overtaken_by_the_lock_lost_kills_the_service_when_it_fails() {
    let mut h = H::new();
    h.active(3);
    let a = h.feed(Event::ServiceHealthChanged {
        healthy: false,
        detail: "down".into(),
    });
    let s = H::ticket_of(&a);
    assert!(
        !h.e.service_role_unknown(h.now),
        "a voluntary stop, lease valid"
    );
    h.feed(Event::LockDeleted);
    assert!(
        h.e.service_role_unknown(h.now),
        "the lock is lost meanwhile"
    );
    let a = h.feed(Event::DemoteFailed {
        ticket: s,
        detail: "the demote hook failed".into(),
        said: None,
    });
    assert_eq!(
        a.first(),
        Some(&Action::KillService {
            cause: KillCause::DemoteFailed
        }),
        "{a:?}"
    );
    assert!(
        !h.e.service_role_unknown(h.now),
        "stopped: nothing under way"
    );
}
