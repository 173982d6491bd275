//! SPEC §6b: which standby tries first for a free lock (priority, then position, then
//! node id), how long the others wait for it, and whom a node stepping down names.

use super::*;

/// This node (n1, priority 100) with `members` (its own record among them when `mine`
/// is `Some`) sees the lock free: whether it joins at once.
fn joins_at_once(mine: Option<Option<u64>>, members: Vec<MemberRecord>) -> bool {
    let mut h = H::new();
    let mut all = members;
    if let Some(position) = mine {
        all.push(standby("n1", 100, position));
    }
    h.feed(Event::Members { members: all });
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    has(&a, |a| matches!(a, Action::Join { .. }))
}

#[test]
fn rule_6b_the_best_placed_standby_tries_first() {
    // Same priority: the greater position first; a known position above an unknown one.
    assert!(!joins_at_once(
        Some(Some(10)),
        vec![standby("n2", 100, Some(20))]
    ));
    assert!(joins_at_once(
        Some(Some(30)),
        vec![standby("n2", 100, Some(20))]
    ));
    assert!(!joins_at_once(
        Some(None),
        vec![standby("n2", 100, Some(1))]
    ));
    assert!(joins_at_once(Some(Some(1)), vec![standby("n2", 100, None)]));
    // Priority first, whatever the positions.
    assert!(joins_at_once(
        Some(Some(10)),
        vec![standby("n2", 50, Some(99))]
    ));
    assert!(!joins_at_once(
        Some(Some(99)),
        vec![standby("n2", 200, Some(10))]
    ));
    // All else equal, the smaller node id: exactly one is best-placed.
    assert!(joins_at_once(
        Some(Some(5)),
        vec![standby("n2", 100, Some(5))]
    ));
    assert!(!joins_at_once(
        Some(Some(5)),
        vec![standby("n0", 100, Some(5))]
    ));
    assert!(joins_at_once(None, vec![standby("n2", 100, None)]));
    // Priority 0 never takes the lock by itself, so it is placed above nobody.
    assert!(joins_at_once(Some(None), vec![standby("n0", 0, Some(99))]));
    // Nor is a member that is not a healthy standby.
    let mut sick = standby("n2", 100, Some(99));
    sick.health = Health::Unhealthy;
    assert!(joins_at_once(Some(Some(1)), vec![sick]));
}

#[test]
fn rule_6b_a_waiting_standby_tries_at_once_when_the_better_placed_is_gone() {
    let mut h = H::new();
    h.feed(Event::Members {
        members: vec![standby("n1", 100, Some(10)), standby("n2", 100, Some(20))],
    });
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    assert!(a.is_empty(), "{a:?}");
    h.now += T / 6;
    h.e.handle_timeout(h.now);
    assert!(h.drain().is_empty());
    // n2's record is gone (its session ended): n1 does not wait out the rest.
    let a = h.feed(Event::Members {
        members: vec![standby("n1", 100, Some(10))],
    });
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
}

#[test]
fn rule_6b_a_wait_cut_short_by_a_lost_session_is_waited_again_in_the_next() {
    let mut h = H::new();
    let members = vec![standby("n1", 100, Some(10)), standby("n2", 100, Some(20))];
    h.feed(Event::Members {
        members: members.clone(),
    });
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    assert!(a.is_empty(), "{a:?}");
    h.feed(Event::SessionLost);
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    assert!(
        !has(&a, |a| matches!(a, Action::Join { .. })),
        "joined before n2, placed above it, could: {a:?}"
    );
}

#[test]
fn rule_6b_a_node_stepping_down_by_itself_names_the_best_placed_standby() {
    let members = || {
        let mut sick = standby("n5", 900, Some(99));
        sick.health = Health::Unhealthy;
        vec![
            standby("n2", 100, Some(10)),
            standby("n3", 100, Some(20)),
            standby("n4", 0, Some(99)),
            sick,
        ]
    };
    // A stop (SIGTERM).
    let mut h = H::new();
    h.active(3);
    h.feed(Event::Members { members: members() });
    assert_eq!(h.e.successor(), None, "named while it serves");
    h.feed(Event::StopRequested);
    assert_eq!(h.e.successor(), Some("n3"));
    // Its service failed.
    let mut h = H::new();
    h.active(3);
    h.feed(Event::Members { members: members() });
    h.feed(Event::ServiceHealthChanged {
        healthy: false,
        detail: "tcp refused".into(),
    });
    assert_eq!(h.e.role(), Role::Demoting);
    assert_eq!(h.e.successor(), Some("n3"));
    // Nobody eligible: nobody named.
    let mut h = H::new();
    h.active(3);
    h.feed(Event::Members {
        members: vec![standby("n4", 0, Some(99))],
    });
    h.feed(Event::StopRequested);
    assert_eq!(h.e.successor(), None);
}

#[test]
fn rule_6b_a_standby_publishes_the_one_placed_just_above_it() {
    let mut h = H::new();
    let me = standby("n1", 100, Some(10));
    let members = vec![
        me.clone(),
        standby("n2", 100, Some(30)),
        standby("n3", 100, Some(20)),
        standby("n4", 100, Some(5)),
        standby("n5", 0, Some(99)),
    ];
    h.feed(Event::Members {
        members: members.clone(),
    });
    // n2 and n3 are above it; n3 just above.
    assert_eq!(h.e.placed_after(), Some("n3"));
    // The best-placed lets nobody first.
    let mut best = members.clone();
    best[0].position = Some(99);
    h.feed(Event::Members { members: best });
    assert_eq!(h.e.placed_after(), None);
    // The active lets nobody first.
    let mut h = H::new();
    h.active(3);
    h.feed(Event::Members {
        members: members.clone(),
    });
    assert_eq!(h.e.placed_after(), None);
    // Nor does a node of priority 0, which never tries by itself.
    let mut h = H::new();
    h.e.cfg.priority = 0;
    h.feed(Event::Members { members });
    assert_eq!(h.e.placed_after(), None);
}

#[test]
fn rule_6b_a_node_is_placed_by_what_its_check_tells_now_not_its_record_as_read() {
    // The simulation's seed 110414: n1's record, read before its first check printed,
    // says "unknown", so n2 (position 0) was placed above it; its check now says 369.
    let mut h = H::new();
    h.feed(Event::Members {
        members: vec![standby("n1", 100, None), standby("n2", 100, Some(0))],
    });
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    assert!(!has(&a, |a| matches!(a, Action::Join { .. })), "{a:?}");
    // Waiting for n2: the check's position places n1 first, and it tries at once.
    let a = h.feed(Event::OwnPosition {
        position: Some(369),
    });
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
    // And the next members read, its record still old, keeps it first.
    let mut h = H::new();
    h.feed(Event::OwnPosition {
        position: Some(369),
    });
    assert!(joins_at_once_after(
        &mut h,
        vec![standby("n1", 100, None), standby("n2", 100, Some(0))]
    ));
}

/// `h` reads `members`, then its session starts with the lock free: whether it joins
/// at once.
fn joins_at_once_after(h: &mut H, members: Vec<MemberRecord>) -> bool {
    h.feed(Event::Members { members });
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    has(&a, |a| matches!(a, Action::Join { .. }))
}

#[test]
fn rule_6b_the_wait_for_a_better_placed_standby_counts_from_the_end_of_its_new_session() {
    // The simulation's seed 304442: n2, placed above, had just restarted and waited out
    // its new session when the lock went free; n1 must not take the lock half a session
    // timeout later, a moment before n2 may.
    let mut h = H::new();
    let mut n2 = standby("n2", 100, Some(20));
    n2.tries_at = Some(h.now + T * 4 / 5);
    h.feed(Event::Members {
        members: vec![standby("n1", 100, Some(10)), n2],
    });
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    assert!(!has(&a, |a| matches!(a, Action::Join { .. })), "{a:?}");
    let a = h.advance(T / 2 + Duration::from_millis(1));
    assert!(!has(&a, |a| matches!(a, Action::Join { .. })), "{a:?}");
    let a = h.advance(T * 4 / 5 - Duration::from_millis(2));
    assert!(!has(&a, |a| matches!(a, Action::Join { .. })), "{a:?}");
    let a = h.advance(Duration::from_millis(2));
    assert!(has(&a, |a| matches!(a, Action::Join { .. })), "{a:?}");

    // Not for one whose record names this node as placed above it (crossed views): the
    // usual half (the simulation's seed 158755).
    let mut h = H::new();
    let mut n2 = standby("n2", 100, Some(20));
    n2.tries_at = Some(h.now + T * 4 / 5);
    n2.after = Some("n1".into());
    h.feed(Event::Members {
        members: vec![standby("n1", 100, Some(10)), n2],
    });
    h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    let a = h.advance(T / 2 + Duration::from_millis(1));
    assert!(has(&a, |a| matches!(a, Action::Join { .. })), "{a:?}");

    // Never more than one session timeout beyond the usual wait, whatever it says.
    let mut h = H::new();
    let mut n2 = standby("n2", 100, Some(20));
    n2.tries_at = Some(h.now + T * 100);
    h.feed(Event::Members {
        members: vec![standby("n1", 100, Some(10)), n2],
    });
    h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    let a = h.advance(T + T / 2 + Duration::from_millis(1));
    assert!(has(&a, |a| matches!(a, Action::Join { .. })), "{a:?}");

    // Nor when each read finds it waiting out a new session again (a node that keeps
    // re-making its link): the wait ends one session timeout beyond the usual half after
    // it began (the review of stop 47).
    let mut h = H::new();
    let members = |h: &H| {
        let mut n2 = standby("n2", 100, Some(20));
        n2.tries_at = Some(h.now + T * 9 / 10);
        vec![standby("n1", 100, Some(10)), n2]
    };
    let m = members(&h);
    h.feed(Event::Members { members: m });
    h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    let mut joined = false;
    for _ in 0..3 {
        let a = h.advance(T * 2 / 5);
        joined |= has(&a, |a| matches!(a, Action::Join { .. }));
        let m = members(&h);
        let a = h.feed(Event::Members { members: m });
        joined |= has(&a, |a| matches!(a, Action::Join { .. }));
    }
    // 1.2 T so far; the cap is at 1.5 T.
    let a = h.advance(T * 3 / 10 - Duration::from_millis(1));
    joined |= has(&a, |a| matches!(a, Action::Join { .. }));
    assert!(!joined, "not before the cap");
    let a = h.advance(Duration::from_millis(2));
    assert!(has(&a, |a| matches!(a, Action::Join { .. })), "{a:?}");
}
