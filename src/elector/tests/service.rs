//! The service under the lock (SPEC §4.3d, §4.7): start, record, stop.

use super::*;

#[test]
fn rule_4_3d_not_active_until_the_service_identity_is_recorded() {
    let mut h = H::new();
    let s = h.starting(5);
    let a = h.feed(Event::ServiceStarted { ticket: s });
    let r = H::ticket_of_record(&a);
    assert_eq!(h.e.role(), Role::Promoting);
    // No answer: retried after RETRY_DELAY, still promoting.
    let a = h.feed(Event::ServiceRecorded {
        ticket: r,
        outcome: WriteOutcome::Unknown,
    });
    assert_eq!(a, vec![]);
    let a = h.advance(RETRY_DELAY);
    let r2 = H::ticket_of_record(&a);
    assert_ne!(r, r2);
    assert_eq!(h.e.role(), Role::Promoting);
    // A stale answer to the first try changes nothing.
    h.feed(Event::ServiceRecorded {
        ticket: r,
        outcome: WriteOutcome::Done,
    });
    assert_eq!(h.e.role(), Role::Promoting);
    h.feed(Event::ServiceRecorded {
        ticket: r2,
        outcome: WriteOutcome::Done,
    });
    assert_eq!(h.e.role(), Role::Active);
}

/// Simulation seed 15674: the service is started again under the same lock only once
/// the breadcrumb names no earlier start; an unknown outcome is retried under the lease
/// and starts nothing, a conflict means the lock is lost.
#[test]
fn rule_4_3d_a_start_again_waits_until_the_breadcrumb_names_no_earlier_start() {
    let mut h = H::new();
    h.active(3);
    // The service exits while the cluster is paused: stopped, and started again after
    // the resume.
    h.feed(Event::ControlChanged {
        control: ControlView {
            paused: true,
            failover: None,
        },
    });
    let a = h.feed(Event::ServiceExited {
        reason: "exit 1".into(),
    });
    let stop = H::ticket_of(&a);
    let a = h.feed(Event::ServiceStopped {
        ticket: stop,
        clean: true,
        detail: String::new(),
    });
    assert_eq!(a, vec![], "paused: nothing starts again");
    h.feed(Event::ControlChanged {
        control: ControlView::default(),
    });
    // Resumed: the next renewal starts the service again, after the rewrite.
    let mut forget = None;
    for _ in 0..40 {
        for a in h.advance(RETRY_DELAY) {
            match a {
                Action::Renew { ticket } => {
                    for a in h.feed(Event::Renewed {
                        ticket,
                        outcome: WriteOutcome::Done,
                    }) {
                        match a {
                            Action::ForgetService { ticket, epoch: 3 } => forget = Some(ticket),
                            Action::StartService { .. } => {
                                panic!("started before the breadcrumb was rewritten")
                            }
                            _ => {}
                        }
                    }
                }
                Action::StartService { .. } => {
                    panic!("started before the breadcrumb was rewritten")
                }
                _ => {}
            }
        }
        if forget.is_some() {
            break;
        }
    }
    let f = forget.expect("the breadcrumb is rewritten after the resume");
    let a = h.feed(Event::ServiceForgotten {
        ticket: f,
        outcome: WriteOutcome::Unknown,
    });
    assert_eq!(a, vec![], "nothing starts on an unknown outcome");
    let a = h.advance(RETRY_DELAY);
    let f = a
        .iter()
        .find_map(|a| match a {
            Action::ForgetService { ticket, .. } => Some(*ticket),
            _ => None,
        })
        .unwrap_or_else(|| panic!("retried: {a:?}"));
    assert!(!a.iter().any(|a| matches!(a, Action::StartService { .. })));
    let a = h.feed(Event::ServiceForgotten {
        ticket: f,
        outcome: WriteOutcome::Conflict,
    });
    assert!(
        !a.iter().any(|a| matches!(a, Action::StartService { .. })),
        "the lock may be lost: {a:?}"
    );
    assert_ne!(h.e.role(), Role::Active);
}

#[test]
fn rule_4_3d_a_late_record_of_a_stopped_service_never_makes_the_next_copy_active() {
    // Simulation seed 880: record unknown, lease in doubt, service stopped, renewal
    // back, a new copy started; then the first record's answer arrived.
    let mut h = H::new();
    let s = h.starting(5);
    let a = h.feed(Event::ServiceStarted { ticket: s });
    let r1 = H::ticket_of_record(&a);
    // The lease ends without a renewal answer: forced stop.
    let a = h.advance(T / 2);
    let st = a
        .iter()
        .find_map(|a| match a {
            Action::StopService { ticket, .. } => Some(*ticket),
            _ => None,
        })
        .expect("a forced stop");
    h.feed(Event::ServiceStopped {
        ticket: st,
        clean: true,
        detail: String::new(),
    });
    // A renewal finally succeeds: a new copy starts.
    let renew = a
        .iter()
        .rev()
        .find_map(|a| match a {
            Action::Renew { ticket } => Some(*ticket),
            _ => None,
        })
        .expect("a renewal in flight");
    let a = h.feed(Event::Renewed {
        ticket: renew,
        outcome: WriteOutcome::Done,
    });
    let s2 = a
        .iter()
        .find_map(|a| match a {
            Action::StartService { ticket, .. } => Some(*ticket),
            _ => None,
        })
        .expect("a new start");
    let a = h.feed(Event::ServiceStarted { ticket: s2 });
    let r2 = H::ticket_of_record(&a);
    assert_ne!(r1, r2, "the new copy gets a record of its own");
    h.feed(Event::ServiceRecorded {
        ticket: r1,
        outcome: WriteOutcome::Done,
    });
    assert_ne!(
        h.e.role(),
        Role::Active,
        "the old copy's record made the new copy active"
    );
    h.feed(Event::ServiceRecorded {
        ticket: r2,
        outcome: WriteOutcome::Done,
    });
    assert_eq!(h.e.role(), Role::Active);
}

#[test]
fn rule_4_3d_a_rejected_service_record_means_the_lock_is_lost() {
    let mut h = H::new();
    let s = h.starting(5);
    let a = h.feed(Event::ServiceStarted { ticket: s });
    let a = h.feed(Event::ServiceRecorded {
        ticket: H::ticket_of_record(&a),
        outcome: WriteOutcome::Conflict,
    });
    assert_forced_stop(&h, &a);
}

#[test]
fn rule_4_7_never_a_second_start_while_the_service_runs() {
    let mut h = H::new();
    h.active(3);
    // Renewals acknowledged over and over never start a second copy.
    for _ in 0..20 {
        for a in h.advance(T / 6) {
            match a {
                Action::Renew { ticket } => {
                    let out = h.feed(Event::Renewed {
                        ticket,
                        outcome: WriteOutcome::Done,
                    });
                    assert!(!has(&out, |a| matches!(a, Action::StartService { .. })));
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}

#[test]
fn rule_6_a_service_whose_main_process_exited_is_stopped_before_the_breadcrumb_goes() {
    let mut h = H::new();
    h.active(3);
    let a = h.feed(Event::ServiceExited {
        reason: "exit 0".into(),
    });
    let st = H::ticket_of(&a);
    assert!(
        matches!(a.as_slice(), [Action::StopService { .. }]),
        "{a:?}"
    );
    let a = h.feed(Event::ServiceStopped {
        ticket: st,
        clean: true,
        detail: String::new(),
    });
    assert!(
        matches!(
            a.as_slice(),
            [Action::Release {
                breadcrumb: Some(3),
                ..
            }]
        ),
        "{a:?}"
    );
}

#[test]
fn a_stop_during_a_start_waits_for_it_and_stops_what_it_started() {
    // Simulation seed 6121: the stop answered "not running" and the start leaked.
    let mut h = H::new();
    let s = h.starting(7);
    let a = h.feed(Event::StopRequested);
    assert_eq!(a, vec![], "no stop while the start is in flight: {a:?}");
    let a = h.feed(Event::ServiceStarted { ticket: s });
    let st = H::ticket_of(&a);
    assert_eq!(
        a,
        vec![Action::StopService {
            ticket: st,
            cause: StopCause::Demote
        }]
    );
    let a = h.feed(Event::ServiceStopped {
        ticket: st,
        clean: true,
        detail: String::new(),
    });
    assert!(
        matches!(
            a.as_slice(),
            [Action::Release {
                breadcrumb: Some(_),
                ..
            }]
        ),
        "{a:?}"
    );
}

/// A start in flight (ticket returned) whose lease has just ended, the lease timers run.
fn starting_past_the_lease_end() -> (H, Ticket) {
    let mut h = H::new();
    let s = h.starting(7);
    let end = h.e.lease.end.unwrap();
    h.now = end + Duration::from_millis(10);
    h.e.handle_timeout(h.now);
    h.drain();
    (h, s)
}

/// Whether `a` demotes by force and kills the service.
fn demotes_and_kills(a: &[Action]) -> bool {
    has(a, |a| {
        matches!(
            a,
            Action::StopService {
                cause: StopCause::Forced,
                ..
            }
        )
    }) && has(a, |a| {
        matches!(
            a,
            Action::KillService {
                cause: KillCause::LeaseEnd
            }
        )
    })
}

#[test]
fn a_start_that_completes_after_the_lease_end_is_stopped_and_killed() {
    // Simulation seed 8994: frozen between the lease check and the spawn.
    let (mut h, s) = starting_past_the_lease_end();
    let a = h.feed(Event::ServiceStarted { ticket: s });
    assert!(demotes_and_kills(&a), "{a:?}");
    assert_ne!(h.e.role(), Role::Active);
}

#[test]
fn a_start_that_fails_after_the_lease_end_is_demoted_and_killed() {
    // Simulation seed 376839: a promote hook promoted the database, then hung while its
    // warden was frozen past the lease end; its timeout reported a failed start on waking.
    // The database may take writes: it is demoted and killed at once, never left as is.
    let (mut h, s) = starting_past_the_lease_end();
    let a = h.feed(Event::StartFailed {
        ticket: s,
        reason: "the promote hook did not finish within 1.6s; killed".into(),
        ran: true,
    });
    assert!(demotes_and_kills(&a), "{a:?}");
    assert_ne!(h.e.role(), Role::Active);
    // Refused before anything ran (the lease checked right before the hook): the service
    // is as it was, a replica, and nothing stops or kills it (stop 37's review).
    let (mut h, s) = starting_past_the_lease_end();
    let a = h.feed(Event::StartFailed {
        ticket: s,
        reason: "the lease ran out before the service could be promoted".into(),
        ran: false,
    });
    assert!(
        !has(&a, |a| matches!(
            a,
            Action::StopService { .. }
                | Action::KillService {
                    cause: KillCause::LeaseEnd
                }
        )),
        "{a:?}"
    );
    assert_ne!(h.e.role(), Role::Active);
}

#[test]
fn an_unkillable_service_is_never_joined_by_a_second_copy() {
    // Simulation seed 7674: a renewal started a second copy beside a stuck one.
    let mut h = H::new();
    h.active(3);
    let a = h.advance(T / 6);
    let r = H::ticket_of(&a);
    h.feed(Event::Renewed {
        ticket: r,
        outcome: WriteOutcome::Unknown,
    });
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
                Action::KillService {
                    cause: KillCause::LeaseEnd,
                } => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        if stop.is_some() {
            break;
        }
    }
    let a = h.feed(Event::ServiceStopped {
        ticket: stop.unwrap(),
        clean: false,
        detail: "pid 9 in D state".into(),
    });
    // Give up the lock, keep the breadcrumb: no restart, no breadcrumb delete.
    assert!(matches!(a.as_slice(), [Action::Release { .. }]), "{a:?}");
}

/// Renews once as `active` and returns the check of the breadcrumb that follows.
fn renew_and_keep(h: &mut H) -> (Ticket, Epoch) {
    let a = h.advance(T / 6);
    let a = h.feed(Event::Renewed {
        ticket: H::ticket_of(&a),
        outcome: WriteOutcome::Done,
    });
    match a.as_slice() {
        [Action::KeepBreadcrumb { ticket, epoch }] => (*ticket, *epoch),
        _ => panic!("expected a look at the breadcrumb after the renewal: {a:?}"),
    }
}

#[test]
fn rule_4_3d_the_active_writes_back_a_breadcrumb_the_store_forgot_and_serves_on() {
    // The simulation's seed 965443: the store forgot the active's breadcrumb and kept its
    // lock. The active renewed for 8 s never knowing; its warden was then killed with the
    // service running, and the next winner found nothing to fence. After every renewal
    // the active looks at its breadcrumb: the driver writes it back when it is missing.
    let mut h = H::new();
    h.active(3);
    let (ticket, epoch) = renew_and_keep(&mut h);
    assert_eq!(epoch, 3);
    let all = h.feed_all(Event::BreadcrumbKept {
        ticket,
        kept: KeptBreadcrumb::WrittenBack("there was none".into()),
    });
    assert!(
        has(&all, |a| matches!(a, Action::Notice { warn: true, message }
            if message.contains("written back") && message.contains("there was none"))),
        "{all:?}"
    );
    assert_eq!(strip(all), vec![]);
    assert_eq!(h.e.role(), Role::Active);
    // And again after the next renewal, whatever the last look found.
    let (_, epoch) = renew_and_keep(&mut h);
    assert_eq!(epoch, 3);
}

#[test]
fn rule_4_3d_the_active_leaves_the_lock_when_its_breadcrumb_names_another() {
    let mut h = H::new();
    h.active(3);
    let (ticket, _) = renew_and_keep(&mut h);
    let a = h.feed(Event::BreadcrumbKept {
        ticket,
        kept: KeptBreadcrumb::Foreign("n2 at epoch 4".into()),
    });
    assert_forced_stop(&h, &a);
}

#[test]
fn rule_4_3d_a_look_at_the_breadcrumb_that_failed_changes_nothing_and_comes_again() {
    let mut h = H::new();
    h.active(3);
    let (ticket, _) = renew_and_keep(&mut h);
    let stale = ticket;
    let a = h.feed(Event::BreadcrumbKept {
        ticket,
        kept: KeptBreadcrumb::Failed("no answer within 1s".into()),
    });
    assert_eq!(a, vec![]);
    assert_eq!(h.e.role(), Role::Active);
    let (ticket, _) = renew_and_keep(&mut h);
    assert_ne!(ticket, stale);
    // An answer to an earlier look is old news.
    let a = h.feed(Event::BreadcrumbKept {
        ticket: stale,
        kept: KeptBreadcrumb::Foreign("n2 at epoch 4".into()),
    });
    assert_eq!(a, vec![]);
    assert_eq!(h.e.role(), Role::Active);
}

#[test]
fn rule_4_3d_no_look_at_the_breadcrumb_before_the_service_is_recorded() {
    // Until then the rewrite naming the service is what writes the breadcrumb.
    let mut h = H::new();
    let s = h.starting(3);
    let a = h.feed(Event::ServiceStarted { ticket: s });
    assert!(
        matches!(a.as_slice(), [Action::RecordService { .. }]),
        "{a:?}"
    );
    let a = h.advance(T / 6);
    let r = a
        .iter()
        .find_map(|a| match a {
            Action::Renew { ticket } => Some(*ticket),
            _ => None,
        })
        .expect("a renewal");
    let a = h.feed(Event::Renewed {
        ticket: r,
        outcome: WriteOutcome::Done,
    });
    assert!(
        !has(&a, |a| matches!(a, Action::KeepBreadcrumb { .. })),
        "{a:?}"
    );
}

#[test]
fn rule_4_3d_one_look_at_the_breadcrumb_at_a_time_until_a_lease_passes_unanswered() {
    // On a slow store the answer must not be made old news by the next look (the review
    // of stop 44); a look never answered (its session ended) holds the next back for a
    // lease at most.
    let mut h = H::new();
    h.active(3);
    let (first, _) = renew_and_keep(&mut h);
    let sent = h.now;
    let mut again = None;
    while again.is_none() {
        let a = h.advance(T / 6);
        let a = h.feed(Event::Renewed {
            ticket: H::ticket_of(&a),
            outcome: WriteOutcome::Done,
        });
        again = a.iter().find_map(|a| match a {
            Action::KeepBreadcrumb { ticket, .. } => Some(*ticket),
            _ => None,
        });
        assert!(
            again.is_none() || h.now >= sent + T / 2,
            "a second look {:?} after the first, unanswered",
            h.now - sent
        );
    }
    assert_ne!(again, Some(first));
    // The first one's answer is old news now.
    let a = h.feed(Event::BreadcrumbKept {
        ticket: first,
        kept: KeptBreadcrumb::Foreign("n2 at epoch 4".into()),
    });
    assert_eq!(a, vec![]);
    assert_eq!(h.e.role(), Role::Active);
}

/// SPEC §6: the demote hook of a forced demotion (here the session lost) fails: the
/// service, in a role nobody knows, is killed before anything else follows; a voluntary
/// demotion's failed hook kills nothing (it may be called off, or the breadcrumb is kept).
#[test]
fn rule_6_a_failed_demote_hook_of_a_forced_demotion_kills_the_service() {
    let failed = |ticket| Event::DemoteFailed {
        ticket,
        detail: "the demote hook failed: exit 1".into(),
        said: None,
    };
    let kill = Action::KillService {
        cause: KillCause::DemoteFailed,
    };
    let mut h = H::new();
    h.active(3);
    let a = h.feed(Event::SessionLost);
    assert!(
        has(&a, |a| matches!(
            a,
            Action::StopService {
                cause: StopCause::Forced,
                ..
            }
        )),
        "{a:?}"
    );
    let a = h.feed(failed(H::ticket_of(&a)));
    assert_eq!(a.first(), Some(&kill), "{a:?}");
    assert_eq!(a.iter().filter(|x| **x == kill).count(), 1, "{a:?}");

    let mut h = H::new();
    h.active(3);
    let a = h.feed(Event::ServiceHealthChanged {
        healthy: false,
        detail: "down".into(),
    });
    let a = h.feed(failed(H::ticket_of(&a)));
    assert!(!a.contains(&kill), "{a:?}");
}
