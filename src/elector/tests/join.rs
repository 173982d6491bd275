//! Sessions and the lock (SPEC §4.1, §4.2) and the rejoin back-off (§4.8).

use super::*;

#[test]
fn rule_4_1_joins_only_when_eligible() {
    let mut h = H::new();
    h.e = Elector::new(cfg(), false);
    h.drain();
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    assert_eq!(a, vec![]);
    assert_eq!(h.e.role(), Role::Ineligible);
    let a = h.feed(Event::EligibilityChanged {
        eligible: true,
        detail: "healthy".into(),
    });
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
}

/// An elector whose sessions wait the settle (as the daemon's do), before its session.
fn settling() -> H {
    let mut h = H::new();
    h.e = Elector::new(
        ElectorConfig {
            settle: true,
            ..cfg()
        },
        true,
    );
    h.drain();
    h
}

/// [`settling`], with a session that has waited its settle out: the first join's ticket.
fn settled_session() -> (H, Ticket) {
    let mut h = settling();
    h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    let a = h.advance(T);
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
    let j = H::ticket_of(&a);
    (h, j)
}

/// SPEC §3a "A store that forgot" (stop 35): a new session is a standby that waits one
/// session timeout before its first join, and again after a lost session; the held lock's
/// own rejoin (learning whether a create went through) does not wait.
#[test]
fn rule_3a_a_new_session_waits_a_session_timeout_before_it_joins() {
    let mut h = settling();
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    assert_eq!(a, vec![]);
    assert_eq!(h.e.role(), Role::Standby);
    let a = h.advance(T - Duration::from_millis(1));
    assert_eq!(a, vec![]);
    let a = h.advance(Duration::from_millis(1));
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
    // Lost and made again: the new session waits its own session timeout.
    let j = H::ticket_of(&a);
    let a = h.feed(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Exists { epoch: Some(4) },
    });
    assert_eq!(a, vec![]);
    assert_eq!(h.feed(Event::SessionLost), vec![Action::Connect]);
    let a = h.feed(Event::SessionStarted {
        granted: Some(T / 2),
        control: ControlView::default(),
    });
    assert_eq!(a, vec![]);
    assert_eq!(h.e.role(), Role::Standby);
    let a = h.advance(T / 2);
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
}

/// SPEC §3a "A store that forgot", stop 37 (the simulation's seed 168438): a reconnection
/// within the session may be a store that restarted and forgot the active's lock, which
/// vanished at once with its lease still running. The next join waits one session timeout
/// from the reconnection, as a new session's first join does.
#[test]
fn rule_3a_a_reconnection_within_the_session_waits_a_session_timeout_again() {
    let (mut h, j) = settled_session();
    let a = h.feed(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Exists { epoch: Some(4) },
    });
    assert_eq!(a, vec![]);
    let a = h.advance(T / 2);
    assert_eq!(a, vec![]);
    assert_eq!(h.feed(Event::Reconnected), vec![]);
    // The lock is gone at once: no join until a session timeout after the reconnection.
    assert_eq!(h.feed(Event::LockDeleted), vec![]);
    assert_eq!(h.e.role(), Role::Standby);
    let a = h.advance(T - Duration::from_millis(1));
    assert_eq!(a, vec![]);
    let a = h.advance(Duration::from_millis(1));
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
}

/// Stop 37 (the simulation's seed 77861): the join that learns whether an unknown create
/// went through does not wait for the settle, and may take a free lock. Won within the
/// settle, the lock is held and nothing is read or promoted until the settle ends.
#[test]
fn rule_3a_a_lock_won_within_the_settle_is_held_until_it_ends() {
    let (mut h, j) = settled_session();
    assert_eq!(
        h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Unknown,
        }),
        vec![]
    );
    assert_eq!(h.feed(Event::Reconnected), vec![]);
    // The rejoin goes out at once, settle or not: it must learn whether the lock is ours.
    let a = h.advance(RETRY_DELAY);
    let j = H::ticket_of(&a);
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
    let a = h.feed(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Held { epoch: 9 },
    });
    assert_eq!(a, vec![], "nothing is read within the settle");
    let a = h.advance(T - RETRY_DELAY - Duration::from_millis(1));
    assert_eq!(a, vec![]);
    let a = h.advance(Duration::from_millis(1));
    assert!(matches!(a.as_slice(), [Action::ReadState { .. }]), "{a:?}");
}

#[test]
fn rule_4_1_no_join_while_paused() {
    let mut h = H::new();
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView {
            paused: true,
            failover: None,
        },
    });
    assert_eq!(a, vec![]);
    let a = h.feed(Event::ControlChanged {
        control: ControlView::default(),
    });
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
}

#[test]
fn rule_4_2_node_exists_means_standby_and_a_deleted_lock_means_join_again() {
    let mut h = H::new();
    let j = h.session();
    let a = h.feed(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Exists { epoch: None },
    });
    assert_eq!(a, vec![]);
    assert_eq!(h.e.role(), Role::Standby);
    let a = h.feed(Event::LockDeleted);
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
}

/// The simulation's seed 98757 (SPEC §6b): a join whose answer was lost leaves the node a
/// standby while it joins again, not `ineligible`: the standbys placed below it read its
/// record and let it try first; `ineligible` for the retry's 200 ms let one of a lower
/// priority and less data take the lock. No transition is reported at all.
#[test]
fn rule_4_2_a_join_whose_answer_was_lost_stays_standby_while_it_joins_again() {
    let mut h = H::new();
    let j = h.session();
    assert_eq!(h.e.role(), Role::Standby);
    let all = h.feed_all(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Unknown,
    });
    assert!(
        !all.iter().any(|a| matches!(a, Action::Transition { .. })),
        "{all:?}"
    );
    assert_eq!(h.e.role(), Role::Standby);
    let a = h.advance(RETRY_DELAY);
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
    assert_eq!(h.e.role(), Role::Standby);
}

#[test]
fn rule_4_2_unknown_create_outcome_is_resolved_by_joining_again_even_if_ineligible() {
    let mut h = H::new();
    let j = h.session();
    let a = h.feed(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Unknown,
    });
    assert_eq!(a, vec![]);
    h.feed(Event::EligibilityChanged {
        eligible: false,
        detail: "standby check failed".into(),
    });
    let a = h.advance(RETRY_DELAY);
    let j2 = H::ticket_of(&a);
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
    // The earlier create did go through: the lock is ours, but we are not eligible.
    let a = h.feed(Event::Joined {
        ticket: j2,
        outcome: JoinOutcome::Held { epoch: 5 },
    });
    assert!(matches!(a.as_slice(), [Action::Release { .. }]), "{a:?}");
}

#[test]
fn rule_4_2_results_with_stale_tickets_are_ignored() {
    let mut h = H::new();
    let j = h.session();
    h.feed(Event::SessionLost);
    let a = h.feed(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Held { epoch: 9 },
    });
    assert_eq!(a, vec![]);
    assert_eq!(h.e.epoch(), None);
}

/// The join `ticket` wins the lock at `epoch`, fencing n2 fails, the lock is released.
fn fence_fails(h: &mut H, ticket: Ticket, epoch: Epoch) {
    let r = h.held(ticket, epoch);
    let a = h.read(
        r,
        BreadcrumbView::Record {
            record: record("n2", "x", Some(1)),
            version: Version::new(0),
        },
    );
    let a = h.feed(Event::FenceDone {
        ticket: H::ticket_of(&a),
        fenced: false,
        summary: "no".into(),
    });
    h.feed(Event::Released {
        ticket: H::ticket_of(&a),
    });
}

#[test]
fn rule_4_8_rejoin_delay_doubles_up_to_30s_and_resets_after_60s_stable() {
    let mut h = H::new();
    let mut delays = Vec::new();
    for _ in 0..7 {
        // Win, then fail to fence.
        let j = match h.e.phase {
            Phase::Idle => {
                let a = h.advance(Duration::from_secs(60));
                H::ticket_of(&a)
            }
            _ => h.session(),
        };
        fence_fails(&mut h, j, 100);
        h.feed(Event::SessionStarted {
            granted: None,
            control: ControlView::default(),
        });
        delays.push(h.e.out_until.unwrap() - h.now);
    }
    let secs: Vec<u64> = delays.iter().map(|d| d.as_secs()).collect();
    assert_eq!(secs, vec![1, 2, 4, 8, 16, 30, 30]);

    // 60s of stable standby resets the count.
    let a = h.advance(Duration::from_secs(30));
    let j = H::ticket_of(&a);
    h.feed(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Exists { epoch: None },
    });
    h.advance(STABLE_RESET);
    let a = h.feed(Event::LockDeleted);
    fence_fails(&mut h, H::ticket_of(&a), 200);
    assert_eq!(h.e.out_until.unwrap() - h.now, Duration::from_secs(1));
}

#[test]
fn every_role_change_is_a_transition_with_epoch_and_reason() {
    let mut h = H::new();
    let j = h.session();
    let all = h.feed_all(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Held { epoch: 8 },
    });
    assert!(
        has(&all, |a| matches!(a,
        Action::Transition { from: Role::Standby, to: Role::Promoting, epoch: Some(8), reason, .. }
        if reason.to_string() == "won the lock")),
        "{all:?}"
    );
}
