//! SPEC §6b herd-free succession: a standby queued for the lock watches the record of the
//! one placed just above it, not the lock, and reads the members again only when it matters.

use super::*;

/// n1 (priority 100, position 10) in the lock's queue behind an active, with n2 placed
/// just above it and n3 below it.
fn queued_behind_n2() -> H {
    let mut h = H::new();
    h.feed(Event::Members {
        members: vec![
            standby("n1", 100, Some(10)),
            standby("n2", 100, Some(20)),
            standby("n3", 100, Some(5)),
        ],
    });
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    // (Placed below n2 at its first election: it lets n2 try first, then joins.)
    assert!(a.is_empty(), "{a:?}");
    let a = h.advance(T / 2);
    let j = H::ticket_of(&a);
    h.feed(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Exists { epoch: Some(3) },
    });
    h
}

#[test]
fn rule_6b_a_free_lock_is_waited_for_by_fresh_records_not_old_ones() {
    // The simulation's seed 158755: queued behind n2 by members read long ago, this node
    // (n1) finds the lock free. Before it lets n2 try first it reads the members again,
    // and the records now place it first: it joins at once.
    let mut h = queued_behind_n2();
    h.advance(T);
    let a = h.feed(Event::LockDeleted);
    // One request, for the record of the one above (no herd of full reads).
    assert!(
        matches!(a.as_slice(), [Action::ReadAbove { id }] if id == "n2"),
        "{a:?}"
    );
    let a = h.feed(Event::AboveChanged {
        id: "n2".into(),
        record: Some(Box::new(standby("n2", 100, Some(20)))),
        own_position: Some(30),
    });
    assert!(matches!(a.as_slice(), [Action::ReadMembers]), "{a:?}");
    let a = h.feed(Event::Members {
        members: vec![
            standby("n1", 100, Some(30)),
            standby("n2", 100, Some(20)),
            standby("n3", 100, Some(5)),
        ],
    });
    assert!(has(&a, |a| matches!(a, Action::Join { .. })), "{a:?}");
    // Still placed below n2 by n2's fresh record: it waits for n2 as before, and reads
    // nothing more.
    let mut h = queued_behind_n2();
    h.advance(T);
    h.feed(Event::LockDeleted);
    let a = h.feed(Event::AboveChanged {
        id: "n2".into(),
        record: Some(Box::new(standby("n2", 100, Some(40)))),
        own_position: Some(30),
    });
    assert!(a.is_empty(), "{a:?}");
    // A view read just now is not read again.
    let mut h = queued_behind_n2();
    h.feed(Event::Members {
        members: vec![
            standby("n1", 100, Some(10)),
            standby("n2", 100, Some(20)),
            standby("n3", 100, Some(5)),
        ],
    });
    let a = h.feed(Event::LockDeleted);
    assert!(a.is_empty(), "{a:?}");
}

#[test]
fn rule_6b_herd_free_only_the_best_placed_standby_watches_the_lock() {
    let mut h = queued_behind_n2();
    assert_eq!(h.e.watched_above(h.now), Some("n2"));
    // Best-placed: it watches the lock.
    h.feed(Event::Members {
        members: vec![standby("n1", 100, Some(30)), standby("n2", 100, Some(20))],
    });
    assert_eq!(h.e.watched_above(h.now), None);
    // Priority 0 and the active watch the lock (the one for a switchover naming it, the
    // other for its loss).
    let mut h = queued_behind_n2();
    h.e.cfg.priority = 0;
    assert_eq!(h.e.watched_above(h.now), None);
    let mut h = H::new();
    h.active(3);
    h.feed(Event::Members {
        members: vec![standby("n2", 100, Some(20))],
    });
    assert_eq!(h.e.watched_above(h.now), None);
    // A node not in the lock's queue (waiting to join) watches the lock as before.
    let mut h = H::new();
    h.feed(Event::Members {
        members: vec![standby("n1", 100, Some(10)), standby("n2", 100, Some(20))],
    });
    h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    assert_eq!(h.e.watched_above(h.now), None);
}

#[test]
fn rule_6b_herd_free_a_switchover_naming_this_node_watches_the_lock() {
    let mut h = queued_behind_n2();
    assert_eq!(h.e.watched_above(h.now), Some("n2"));
    h.feed(Event::ControlChanged {
        control: ControlView {
            failover: Some(FailoverView {
                lapses_at: h.now + T * 5,
                ..request_to_n1()
            }),
            ..ControlView::default()
        },
    });
    assert_eq!(h.e.watched_above(h.now), None);
}

#[test]
fn rule_6b_herd_free_a_change_of_the_one_above_is_looked_into_only_when_it_matters() {
    let mut h = queued_behind_n2();
    // n2's position moved, still above n1: nothing to do.
    let a = h.feed(Event::AboveChanged {
        id: "n2".into(),
        record: Some(Box::new(standby("n2", 100, Some(25)))),
        own_position: None,
    });
    assert!(a.is_empty(), "{a:?}");
    // Another member's record: not the one watched.
    let a = h.feed(Event::AboveChanged {
        id: "n3".into(),
        record: None,
        own_position: None,
    });
    assert!(a.is_empty(), "{a:?}");
    // n2 took the lock (no longer a standby): the members are read now.
    let mut taking = standby("n2", 100, Some(20));
    taking.role = Role::Fencing;
    let a = h.feed(Event::AboveChanged {
        id: "n2".into(),
        record: Some(Box::new(taking)),
        own_position: None,
    });
    assert!(matches!(a.as_slice(), [Action::ReadMembers]), "{a:?}");
    // Once: a second change before the read asks no second read.
    let a = h.feed(Event::AboveChanged {
        id: "n2".into(),
        record: None,
        own_position: None,
    });
    assert!(a.is_empty(), "{a:?}");
    // The read shows nobody above: n1 watches the lock (and tries when it is free).
    let mut active = standby("n2", 100, Some(20));
    active.role = Role::Active;
    h.feed(Event::Members {
        members: vec![standby("n1", 100, Some(10)), active],
    });
    assert_eq!(h.e.watched_above(h.now), None);
    let a = h.feed(Event::LockDeleted);
    assert!(has(&a, |a| matches!(a, Action::Join { .. })), "{a:?}");
}

#[test]
fn rule_6b_herd_free_the_one_above_gone_unhealthy_or_passed_is_looked_into() {
    for record in [
        None,
        Some({
            let mut m = standby("n2", 100, Some(20));
            m.health = Health::Unhealthy;
            m
        }),
        Some(standby("n2", 100, Some(9))),
        Some(standby("n2", 0, Some(99))),
    ] {
        let mut h = queued_behind_n2();
        let a = h.feed(Event::AboveChanged {
            id: "n2".into(),
            record: record.clone().map(Box::new),
            own_position: None,
        });
        assert!(
            matches!(a.as_slice(), [Action::ReadMembers]),
            "{record:?}: {a:?}"
        );
    }
}

#[test]
fn rule_6b_herd_free_the_one_above_is_placed_against_this_nodes_own_check_now() {
    // n1's record as the members last read said 10; its check says 30 now: n2 (20) is not
    // above it any more, whatever the older read said.
    let mut h = queued_behind_n2();
    let a = h.feed(Event::AboveChanged {
        id: "n2".into(),
        record: Some(Box::new(standby("n2", 100, Some(20)))),
        own_position: Some(30),
    });
    assert!(matches!(a.as_slice(), [Action::ReadMembers]), "{a:?}");
}

#[test]
fn rule_6b_herd_free_two_standbys_whose_views_crossed_do_not_both_watch_the_other() {
    // n1 watches n2, and n2's record names n1 as the one it lets try first (its view is
    // older): the smaller id, n1, watches the lock, so a free lock still wakes somebody.
    let mut h = queued_behind_n2();
    let mut crossed = standby("n2", 100, Some(20));
    crossed.after = Some("n1".into());
    h.feed(Event::AboveChanged {
        id: "n2".into(),
        record: Some(Box::new(crossed)),
        own_position: Some(10),
    });
    assert_eq!(h.e.watched_above(h.now), None);
    // The larger id keeps watching: here n0 above n1, n0's record naming n1.
    let mut h = H::new();
    let mut n0 = standby("n0", 100, Some(20));
    n0.after = Some("n1".into());
    h.feed(Event::Members {
        members: vec![standby("n1", 100, Some(10)), n0],
    });
    h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    let a = h.advance(T / 2);
    let j = H::ticket_of(&a);
    h.feed(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Exists { epoch: Some(3) },
    });
    assert_eq!(h.e.watched_above(h.now), Some("n0"));
}
