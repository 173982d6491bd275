//! SPEC §6: `follow` and `priority`.

use super::*;

/// A standby with a `follow` hook, registered and standing by behind n2.
fn following_standby() -> H {
    let mut e = Elector::new(
        ElectorConfig {
            follow: true,
            ..cfg()
        },
        true,
    );
    assert_eq!(e.poll_action(), Some(Action::Connect));
    let mut h = H {
        e,
        now: Instant::now(),
    };
    let j = h.session();
    h.feed(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Exists { epoch: None },
    });
    h
}

/// The ticket of the one action `actions` holds, a `Follow`.
fn follow_ticket(actions: &[Action]) -> Ticket {
    match actions {
        [Action::Follow { ticket, .. }] => *ticket,
        other => panic!("expected one Follow, got {other:?}"),
    }
}

fn active_record(node: &str, epoch: Epoch) -> NodeRecord {
    NodeRecord {
        node_id: node.into(),
        host: "10.0.0.2".into(),
        port: Some(6379),
        incarnation: format!("inc-{node}"),
        epoch: Some(epoch),
        ..NodeRecord::default()
    }
}

#[test]
fn rule_6_follow_runs_once_per_new_active_and_a_failure_makes_the_node_ineligible() {
    let mut h = following_standby();
    let a = h.feed(Event::ActiveChanged {
        record: active_record("n2", 7),
    });
    let t = match a.as_slice() {
        [Action::Follow { ticket, active }] if active.node_id == "n2" => *ticket,
        other => panic!("{other:?}"),
    };
    // The same epoch again: nothing more.
    assert!(h
        .feed(Event::ActiveChanged {
            record: active_record("n2", 7),
        })
        .is_empty());
    let all = h.feed_all(Event::Followed {
        ticket: t,
        ok: false,
        detail: "REPLICAOF refused".into(),
    });
    assert!(
        has(&all, |a| matches!(
            a,
            Action::Transition {
                to: Role::Ineligible,
                ..
            }
        )),
        "{all:?}"
    );
    assert!(h.e.follow_state().unwrap().starts_with("failed:"));
    // Retried after rejoin_delay, not before; a success makes it a standby again.
    h.now += Duration::from_millis(999);
    h.e.handle_timeout(h.now);
    assert!(h.drain().is_empty());
    h.now += Duration::from_millis(1);
    h.e.handle_timeout(h.now);
    let t = follow_ticket(&h.drain());
    let all = h.feed_all(Event::Followed {
        ticket: t,
        ok: true,
        detail: "following n2".into(),
    });
    assert!(
        has(&all, |a| matches!(
            a,
            Action::Transition {
                to: Role::Standby,
                ..
            }
        )),
        "{all:?}"
    );
    assert_eq!(h.e.follow_state().as_deref(), Some("current (n2 epoch 7)"));
    // A newer active is followed too.
    let a = h.feed(Event::ActiveChanged {
        record: active_record("n3", 9),
    });
    assert!(matches!(a.as_slice(), [Action::Follow { active, .. }] if active.node_id == "n3"));
}

#[test]
fn rule_6_hooks_are_told_an_active_only_when_another_node_is_the_newest() {
    // A standby without a follow hook still knows whom to name.
    let mut h = H::new();
    let j = h.session();
    h.feed(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Exists { epoch: None },
    });
    assert!(h.e.known_active().is_none());
    h.feed(Event::ActiveChanged {
        record: active_record("n2", 7),
    });
    assert_eq!(h.e.known_active().map(|a| a.epoch), Some(Some(7)));

    // While this node holds the lock, an older active of another node is not named;
    // a newer one (the node it lost its lease to) is.
    let mut h = H::new();
    h.active(5);
    h.feed_all(Event::ActiveChanged {
        record: active_record("n2", 3),
    });
    assert!(h.e.known_active().is_none());
    h.feed_all(Event::ActiveChanged {
        record: active_record("n2", 9),
    });
    assert_eq!(h.e.known_active().map(|a| a.node_id.as_str()), Some("n2"));
}

#[test]
fn rule_6_a_forced_switchover_to_an_ineligible_node_lets_it_join() {
    let mut h = following_standby();
    let t = follow_ticket(&h.feed(Event::ActiveChanged {
        record: active_record("n2", 7),
    }));
    h.feed(Event::Followed {
        ticket: t,
        ok: false,
        detail: "REPLICAOF refused".into(),
    });
    assert_eq!(h.e.role(), Role::Ineligible);
    let lapses_at = h.now + Duration::from_secs(30);
    let request = |force| ControlView {
        paused: false,
        failover: Some(FailoverView {
            from: "n2".into(),
            to: Some("n1".into()),
            deadline: "2026-01-01T00:00:00Z".into(),
            force,
            lapses_at,
        }),
    };
    // Without --force the request changes nothing; with it, n1 is in the election.
    h.feed(Event::ControlChanged {
        control: request(false),
    });
    assert_eq!(h.e.role(), Role::Ineligible);
    h.feed(Event::ControlChanged {
        control: request(true),
    });
    assert_eq!(h.e.role(), Role::Standby);
}

fn with_priority(priority: u16) -> H {
    let mut e = Elector::new(ElectorConfig { priority, ..cfg() }, true);
    assert_eq!(e.poll_action(), Some(Action::Connect));
    H {
        e,
        now: Instant::now(),
    }
}

#[test]
fn rule_6_a_lower_priority_lets_a_healthy_higher_one_try_first_for_half_a_session() {
    let mut h = with_priority(50);
    h.feed(Event::Members {
        members: vec![MemberRecord {
            priority: Some(900),
            ..MemberRecord::bare(
                NodeRecord {
                    node_id: "n2".into(),
                    ..NodeRecord::default()
                },
                Role::Standby,
                Health::Healthy,
            )
        }],
    });
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    assert!(a.is_empty(), "joined before the higher one could: {a:?}");
    assert_eq!(h.e.role(), Role::Standby);
    h.now += T / 2 - Duration::from_millis(1);
    h.e.handle_timeout(h.now);
    assert!(h.drain().is_empty());
    h.now += Duration::from_millis(1);
    h.e.handle_timeout(h.now);
    assert!(matches!(h.drain().as_slice(), [Action::Join { .. }]));
}

#[test]
fn rule_6_priority_0_never_takes_the_lock_by_itself_but_joins_when_named() {
    let mut h = with_priority(0);
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    assert!(a.is_empty(), "{a:?}");
    assert_eq!(h.e.role(), Role::Standby);
    let lapses_at = h.now + Duration::from_secs(30);
    let a = h.feed(Event::ControlChanged {
        control: ControlView {
            paused: false,
            failover: Some(FailoverView {
                from: "n2".into(),
                to: Some("n1".into()),
                deadline: "2026-01-01T00:00:00Z".into(),
                force: false,
                lapses_at,
            }),
        },
    });
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
}

#[test]
fn rule_6_priority_0_named_by_a_request_that_lapses_before_the_read_does_not_promote() {
    // Simulation seed 1355: n1 (priority 0) took the lock while `failover --to n1`
    // was pending; the request lapsed before the state read came back, and n1 was
    // promoted by itself.
    let mut h = with_priority(0);
    h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    let lapses_at = h.now + Duration::from_millis(50);
    let request = ControlView {
        paused: false,
        failover: Some(FailoverView {
            from: "n2".into(),
            to: Some("n1".into()),
            deadline: "2026-01-01T00:00:00.050Z".into(),
            force: false,
            lapses_at,
        }),
    };
    let a = h.feed(Event::ControlChanged {
        control: request.clone(),
    });
    let j = H::ticket_of(&a);
    let r = h.held(j, 7);
    h.now = lapses_at;
    let a = h.feed(Event::StateRead {
        ticket: r,
        result: Ok(Box::new(ClusterState {
            breadcrumb: BreadcrumbView::Absent,
            control: request,
            control_version: Version::new(1),
            newest_history_epoch: None,
            history_by_node: Default::default(),
            confirmed_by_node: Default::default(),
            remembered_alive: false,
            own_service_gone: false,
            members_epoch_seen: None,
            members: Vec::new(),
            own_position: None,
            member_leftovers: Vec::new(),
            member_memories: Vec::new(),
        })),
    });
    assert!(matches!(a.as_slice(), [Action::Release { .. }]), "{a:?}");
    // While the request is pending, the same read promotes.
    let mut h = with_priority(0);
    h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    let request = ControlView {
        failover: Some(FailoverView {
            lapses_at: h.now + Duration::from_secs(30),
            ..request_to_n1()
        }),
        paused: false,
    };
    let a = h.feed(Event::ControlChanged {
        control: request.clone(),
    });
    let j = H::ticket_of(&a);
    let r = h.held(j, 7);
    let a = h.feed(Event::StateRead {
        ticket: r,
        result: Ok(Box::new(ClusterState {
            breadcrumb: BreadcrumbView::Absent,
            control: request,
            control_version: Version::new(1),
            newest_history_epoch: None,
            history_by_node: Default::default(),
            confirmed_by_node: Default::default(),
            remembered_alive: false,
            own_service_gone: false,
            members_epoch_seen: None,
            members: Vec::new(),
            own_position: None,
            member_leftovers: Vec::new(),
            member_memories: Vec::new(),
        })),
    });
    assert!(
        matches!(a.as_slice(), [Action::CommitPromotion { epoch: 7, .. }]),
        "{a:?}"
    );
}

fn request_to_n1() -> FailoverView {
    FailoverView {
        from: "n2".into(),
        to: Some("n1".into()),
        deadline: "2026-01-01T00:00:30Z".into(),
        force: false,
        lapses_at: Instant::now(),
    }
}

#[test]
fn rule_6_a_follow_that_fails_while_the_lock_is_free_keeps_the_node_from_promoting() {
    // The follow of a new active is still running when that active goes; the follow then
    // fails: its data may lack what that active wrote, so it must not be promoted (SPEC
    // §6). It does not even try for the lock while the follow runs.
    let mut h = following_standby();
    let t = follow_ticket(&h.feed(Event::ActiveChanged {
        record: active_record("n2", 7),
    }));
    assert_eq!(h.feed(Event::LockDeleted), vec![]);
    let a = h.feed(Event::Followed {
        ticket: t,
        ok: false,
        detail: "REPLICAOF refused".into(),
    });
    assert_eq!(a, vec![]);
    assert_eq!(h.e.role(), Role::Ineligible);
}

#[test]
fn rule_6_without_a_follow_hook_nothing_follows() {
    let mut h = H::new();
    let j = h.session();
    h.feed(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Exists { epoch: None },
    });
    assert!(h
        .feed(Event::ActiveChanged {
            record: active_record("n2", 7),
        })
        .is_empty());
    assert_eq!(h.e.follow_state(), None);
    assert_eq!(h.e.epoch_seen(), Some(7));
}

/// A node restarted after it was the active learns of its own earlier incarnation as the
/// last active: it does not follow it (its service would be told to follow itself;
/// simulation seed 49018), and nothing keeps it from the election.
#[test]
fn rule_6_a_node_never_follows_an_earlier_incarnation_of_itself() {
    let mut h = following_standby();
    let old_self = active_record("n1", 7);
    assert_ne!(old_self.incarnation, h.e.cfg.incarnation);
    let a = h.feed(Event::ActiveChanged { record: old_self });
    assert!(!has(&a, |a| matches!(a, Action::Follow { .. })), "{a:?}");
    assert_eq!(h.e.epoch_seen(), Some(7));
    assert_eq!(h.e.follow_state(), None);
    // Another node's newer promotion is followed as ever.
    let a = h.feed(Event::ActiveChanged {
        record: active_record("n2", 8),
    });
    assert!(
        matches!(a.as_slice(), [Action::Follow { active, .. }] if active.node_id == "n2"),
        "{a:?}"
    );
}

#[test]
fn rule_6_follow_never_runs_beside_promote() {
    let mut h = following_standby();
    let f = follow_ticket(&h.feed(Event::ActiveChanged {
        record: active_record("n2", 7),
    }));
    // n2 steps down while the follow runs: the lock is free, but this node waits.
    assert_eq!(h.feed(Event::LockDeleted), vec![]);
    assert_eq!(h.e.role(), Role::Standby);
    // The follow ends: now it joins.
    let a = h.feed(Event::Followed {
        ticket: f,
        ok: true,
        detail: "following n2".into(),
    });
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");

    // A follow that starts while the join is out: the lock, if won, is given back.
    let mut h = following_standby();
    let a = h.feed(Event::LockDeleted);
    let j = H::ticket_of(&a);
    follow_ticket(&h.feed(Event::ActiveChanged {
        record: active_record("n2", 7),
    }));
    let a = h.feed_all(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Held { epoch: 8 },
    });
    let r = H::ticket_of(&a);
    assert_eq!(
        a,
        vec![
            Action::Release {
                ticket: r,
                breadcrumb: None
            },
            Action::Transition {
                from: Role::Standby,
                to: Role::Demoting,
                epoch: None,
                reason: Reason::StillFollowing,
            }
        ]
    );
}

/// A healthy standby's member record with `priority` and `position`.
fn standby(id: &str, priority: u16, position: Option<u64>) -> MemberRecord {
    MemberRecord {
        priority: Some(priority),
        position,
        ..MemberRecord::bare(
            NodeRecord {
                node_id: id.into(),
                ..NodeRecord::default()
            },
            Role::Standby,
            Health::Healthy,
        )
    }
}

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
fn rule_6b_a_winner_stands_aside_once_for_a_standby_the_fresh_members_place_above_it() {
    let mut h = H::new();
    let r = h.won(3);
    // The members read with the state: n2 has received more than this node.
    let mut st = state(BreadcrumbView::Absent);
    st.members = vec![standby("n1", 100, Some(10)), standby("n2", 100, Some(20))];
    h.e.handle(
        Event::StateRead {
            ticket: r,
            result: Ok(Box::new(st.clone())),
        },
        h.now,
    );
    let all = h.drain();
    assert!(
        has(
            &all,
            |a| matches!(a, Action::Transition { reason: Reason::BetterPlaced(who), .. }
            if who.contains("n2 (priority 100, position 20)") && who.contains("position 10"))
        ),
        "{all:?}"
    );
    let a = strip(all);
    let rel = H::ticket_of(&a);
    assert_eq!(
        a,
        vec![Action::Release {
            ticket: rel,
            breadcrumb: None
        }],
        "nothing is fenced or written before it stands aside"
    );
    // It waits for n2 as for any standby placed above it: no join at once in the next
    // session.
    let a = h.feed(Event::Released { ticket: rel });
    assert_eq!(a, vec![Action::Connect]);
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    assert!(!has(&a, |a| matches!(a, Action::Join { .. })), "{a:?}");
    let a = h.advance(T / 2 + Duration::from_millis(1));
    assert!(has(&a, |a| matches!(a, Action::Join { .. })), "{a:?}");
    let j = H::ticket_of(&a);
    // n2 did not take the lock: this time the node promotes, whatever the records say.
    let r = h.held(j, 4);
    let a = h.read_all(r, st);
    assert!(commits(&a), "{a:?}");
}

#[test]
fn rule_6b_a_winner_the_fresh_members_place_first_or_a_named_one_promotes_at_once() {
    // The best-placed: nobody above it, or only priority 0 and unhealthy nodes.
    let mut h = H::new();
    let r = h.won(3);
    let mut sick = standby("n3", 100, Some(99));
    sick.health = Health::Unhealthy;
    let mut st = state(BreadcrumbView::Absent);
    st.members = vec![
        standby("n1", 100, Some(30)),
        standby("n2", 100, Some(20)),
        standby("n4", 0, Some(99)),
        sick,
    ];
    let a = h.read_all(r, st);
    assert!(commits(&a), "{a:?}");
}

#[test]
fn rule_6b_a_winner_never_stands_aside_for_a_place_the_node_id_alone_gives() {
    // tests/election.rs `crashed_service_hands_over_without_fencing`, 3 runs in 16 since
    // issue 33: n0's service had just crashed, and n0 was a standby again 200 ms later,
    // before this node's read with the state. No position on either side (a check that
    // prints none), or the same one: placed above by its smaller node id alone, n0 is no
    // better a successor, and standing aside for it handed the role back to the node
    // whose service had just failed.
    for (theirs, mine) in [(None, None), (Some(20), Some(20))] {
        let mut h = H::new();
        let r = h.won(3);
        let mut st = state(BreadcrumbView::Absent);
        st.members = vec![standby("n0", 100, theirs), standby("n1", 100, mine)];
        st.own_position = mine;
        let a = h.read_all(r, st);
        assert!(commits(&a), "{theirs:?} / {mine:?}: {a:?}");
    }
}

/// n2 placed above this node (n1, position 10) as the fresh members show it.
fn n2_above() -> Vec<MemberRecord> {
    vec![standby("n1", 100, Some(10)), standby("n2", 100, Some(20))]
}

fn stood_aside(actions: &[Action]) -> bool {
    has(actions, |a| matches!(a, Action::Release { .. }))
}

#[test]
fn rule_6b_the_fresh_check_uses_the_nodes_own_position_not_its_record() {
    // Its record tells no standby position any more (a newer role's), but its check
    // says 30: above n2's 20, it promotes.
    let mut h = H::new();
    let r = h.won(3);
    let mut st = state(BreadcrumbView::Absent);
    st.members = vec![standby("n1", 100, None), standby("n2", 100, Some(20))];
    st.own_position = Some(30);
    let a = h.read_all(r, st);
    assert!(commits(&a), "{a:?}");
}

#[test]
fn rule_6b_a_switchover_naming_this_node_is_never_stood_aside_from() {
    let mut h = H::new();
    let named = ControlView {
        paused: false,
        failover: Some(FailoverView {
            from: "n9".into(),
            to: Some("n1".into()),
            deadline: "2099-01-01T00:00:00Z".into(),
            force: false,
            lapses_at: h.now + Duration::from_secs(30),
        }),
    };
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: named.clone(),
    });
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
    let j = H::ticket_of(&a);
    let r = h.held(j, 3);
    let mut st = state(BreadcrumbView::Absent);
    st.control = named;
    st.members = n2_above();
    let a = h.read_all(r, st);
    assert!(!stood_aside(&a), "{a:?}");
}

#[test]
fn rule_6b_no_stand_aside_after_anything_was_written_under_the_hold() {
    // A commit whose answer was lost: the re-read finds n2 above, but the commit may have
    // landed; standing aside would leave a breadcrumb naming this node.
    let mut h = H::new();
    let c = h.committing(3);
    let a = h.feed(Event::Committed {
        ticket: c,
        outcome: WriteOutcome::Unknown,
    });
    let mut st = state(BreadcrumbView::Absent);
    st.members = n2_above();
    let a = h.read_all(H::ticket_of(&a), st);
    assert!(
        !has(&a, |a| matches!(
            a,
            Action::Release {
                breadcrumb: None,
                ..
            }
        )),
        "{a:?}"
    );
    // A first read that finds our own breadcrumb (a hold with writes under it) neither.
    let mut h = H::new();
    let r = h.won(3);
    let mut st = state(BreadcrumbView::Record {
        record: record("n1", "inc-1", Some(3)),
        version: Version::new(1),
    });
    st.members = n2_above();
    let a = h.read_all(r, st);
    assert!(!stood_aside(&a), "{a:?}");
}

#[test]
fn rule_6b_a_new_active_starts_a_new_round_of_standing_aside() {
    let mut h = H::new();
    let r = h.won(3);
    let mut st = state(BreadcrumbView::Absent);
    st.members = n2_above();
    assert!(stood_aside(&h.read_all(r, st)));
    assert!(h.e.stood_aside_for_better.is_some());
    h.feed(Event::ActiveChanged {
        record: record("n2", "inc-2", Some(4)),
    });
    assert!(h.e.stood_aside_for_better.is_none());
    // A lost session too.
    h.e.stood_aside_for_better = Some((3, Vec::new()));
    h.feed(Event::SessionLost);
    assert!(h.e.stood_aside_for_better.is_none());
}

#[test]
fn rule_6_after_its_own_promotion_a_node_never_follows_an_older_active() {
    // The simulation's seed 61801: a follow of n2 at epoch 7 still owed when this node
    // was promoted at 9; after its service failed and it demoted, the follow ran with
    // epoch 7, an epoch older than the one its service had been promoted with.
    let mut h = H::new();
    h.e.cfg.follow = true;
    let old = active_record("n2", 7);
    h.e.active = Some(old.clone());
    // It takes over from n2 (fencing it), with the follow of n2 never run.
    let r = h.won(9);
    let a = h.read(
        r,
        BreadcrumbView::Record {
            record: old,
            version: Version::new(4),
        },
    );
    let a = h.feed(Event::FenceDone {
        ticket: H::ticket_of(&a),
        fenced: true,
        summary: "signal: fenced".into(),
    });
    // Its follow of n2 had failed, to be retried (a switchover with --force named it).
    h.e.follow_failed = Some("the follow hook failed: REPLICAOF refused".into());
    h.e.follow_retry_at = Some(h.now + Duration::from_secs(1));
    let a = h.feed(Event::Committed {
        ticket: H::ticket_of(&a),
        outcome: WriteOutcome::Done,
    });
    let a = h.feed(Event::ServiceStarted {
        ticket: H::ticket_of(&a),
    });
    h.recorded(&a);
    assert_eq!(h.e.role(), Role::Active);
    let a = h.feed(Event::ServiceHealthChanged {
        healthy: false,
        detail: "tcp refused".into(),
    });
    let s = H::ticket_of(&a);
    let a = h.feed(Event::ServiceStopped {
        ticket: s,
        clean: true,
        detail: String::new(),
    });
    let r = H::ticket_of(&a);
    let mut all = h.feed(Event::Released { ticket: r });
    all.extend(h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    }));
    all.extend(h.advance(T * 3));
    assert!(
        !has(
            &all,
            |a| matches!(a, Action::Follow { active, .. } if active.epoch < Some(9))
        ),
        "{all:?}"
    );
}

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

/// A winner that stood aside (its release `rel` out): the release answered, a new
/// session, the wait for the better-placed one out; returns the join's ticket.
fn rejoin_after_standing_aside(h: &mut H, rel: Ticket) -> Ticket {
    h.feed(Event::Released { ticket: rel });
    h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    let a = h.advance(T / 2 + Duration::from_millis(1));
    assert!(has(&a, |a| matches!(a, Action::Join { .. })), "{a:?}");
    H::ticket_of(&a)
}

#[test]
fn rule_6b_a_winner_stands_aside_again_for_one_that_took_the_lock_and_failed_since() {
    // The simulation's seed 13358: n2, better-placed, could not fence the dead active
    // (its machine was down) and sat out; n1 had stood aside for it once, and promoted
    // without n2's writes once the machine was back, a second before n2 tried again.
    let mut h = H::new();
    let r = h.won(3);
    let mut st = state(BreadcrumbView::Absent);
    let mut n2 = standby("n2", 100, Some(20));
    n2.failed_takeovers = Some(1);
    st.members = vec![standby("n1", 100, Some(10)), n2.clone()];
    let a = h.read_all(r, st.clone());
    let rel = H::ticket_of(&a);
    assert!(matches!(a.as_slice(), [Action::Release { .. }]), "{a:?}");
    let j = rejoin_after_standing_aside(&mut h, rel);
    // n2 took the lock and failed once more since: n1 stands aside again.
    n2.failed_takeovers = Some(2);
    st.members = vec![standby("n1", 100, Some(10)), n2.clone()];
    let r = h.held(j, 4);
    let a = h.read_all(r, st.clone());
    assert!(matches!(a.as_slice(), [Action::Release { .. }]), "{a:?}");
    let rel = H::ticket_of(&a);
    let j = rejoin_after_standing_aside(&mut h, rel);
    // Not since: it promotes (n2 does not keep the cluster without an active).
    let r = h.held(j, 5);
    let a = h.read_all(r, st);
    assert!(commits(&a), "{a:?}");
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

#[test]
fn rule_6b_a_lock_learnt_held_after_a_lost_join_answer_still_stands_aside_for_the_better_placed() {
    // The simulation's seeds 56156 and 110414: the join's answer was lost in a store
    // outage; the rejoin that learns the outcome finds the lock this node's. Nothing of
    // its own is under that lock: the members read with the state still count.
    let mut h = H::new();
    let j = h.session();
    let a = h.feed(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Unknown,
    });
    assert!(a.is_empty(), "{a:?}");
    let a = h.advance(RETRY_DELAY);
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
    let r = h.held(H::ticket_of(&a), 3);
    let mut st = state(BreadcrumbView::Absent);
    st.members = n2_above();
    let a = h.read_all(r, st.clone());
    assert!(stood_aside(&a), "{a:?}");

    // A rejoin after a hold of its own (a refused renewal) is no fresh hold: it does not.
    let mut h = H::new();
    let r = h.won(3);
    let a = h.read(r, BreadcrumbView::Absent);
    let c = H::ticket_of(&a);
    let a = h.feed(Event::Committed {
        ticket: c,
        outcome: WriteOutcome::Conflict,
    });
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
    let r = h.held(H::ticket_of(&a), 3);
    let a = h.read_all(r, st);
    assert!(!stood_aside(&a), "{a:?}");
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
fn rule_6b_a_promotion_history_shows_since_the_stand_aside_starts_a_new_round_unseen() {
    // The simulation's seed 143244: n1 stood aside at epoch 3 for n2; cut off from the
    // store, it never saw n3 promoted at epoch 4 and step down. At epoch 5 its read shows
    // n2 above it again: a new round, it stands aside again.
    let mut h = H::new();
    let r = h.won(3);
    let mut st = state(BreadcrumbView::Absent);
    st.members = n2_above();
    let a = h.read_all(r, st.clone());
    let rel = H::ticket_of(&a);
    assert!(stood_aside(&a), "{a:?}");
    let j = rejoin_after_standing_aside(&mut h, rel);
    let r = h.held(j, 5);
    st.newest_history_epoch = Some(4);
    let a = h.read_all(r, st.clone());
    assert!(stood_aside(&a), "{a:?}");
    // Or the breadcrumb of one, its history entry never written (the review of stop 47).
    let mut h2 = H::new();
    let r = h2.won(3);
    let mut st2 = state(BreadcrumbView::Absent);
    st2.members = n2_above();
    let a2 = h2.read_all(r, st2.clone());
    let j = rejoin_after_standing_aside(&mut h2, H::ticket_of(&a2));
    let r = h2.held(j, 5);
    st2.breadcrumb = BreadcrumbView::Record {
        record: record("n3", "inc-3", Some(4)),
        version: Version::new(1),
    };
    assert!(stood_aside(&h2.read_all(r, st2)));
    // No promotion since (history's newest is the one before): it promotes.
    let rel = H::ticket_of(&a);
    let j = rejoin_after_standing_aside(&mut h, rel);
    let r = h.held(j, 6);
    let a = h.read_all(r, st);
    assert!(commits(&a), "{a:?}");
}

/// A winner at epoch 3 that stood aside for n2, placed above it, and joined again after
/// its wait: the join's ticket, and the state it read.
fn stood_aside_for_n2_once(h: &mut H) -> (Ticket, ClusterState) {
    let r = h.won(3);
    let mut st = state(BreadcrumbView::Absent);
    st.members = n2_above();
    let a = h.read_all(r, st.clone());
    assert!(stood_aside(&a), "{a:?}");
    (rejoin_after_standing_aside(h, H::ticket_of(&a)), st)
}

#[test]
fn rule_6b_a_link_made_again_with_the_store_starts_a_new_round() {
    // The simulation's seed 27238 (there n2 and n1 the other way round): this node (n1)
    // stood aside for n2, placed above it; n2 took the lock and lost it to the store's
    // restart, which forgot that hold and the failure n2's record counted. n1, its link
    // made again, held the lock as n2's own wait ended: it stands aside once more,
    // although nothing the store kept shows a new round.
    let mut h = H::new();
    let (j, st) = stood_aside_for_n2_once(&mut h);
    h.feed(Event::Reconnected);
    let r = h.held(j, 5);
    let a = h.read_all(r, st.clone());
    assert!(stood_aside(&a), "{a:?}");
    // Once per round, however often the link breaks (the review of stop 49: a flapping
    // link must not keep the cluster without an active): the next hold promotes.
    let j = rejoin_after_standing_aside(&mut h, H::ticket_of(&a));
    h.feed(Event::Reconnected);
    let r = h.held(j, 7);
    let a = h.read_all(r, st);
    assert!(commits(&a), "{a:?}");
}

#[test]
fn rule_6b_a_winner_stands_aside_once_more_for_one_above_it_never_stood_aside_for() {
    // The simulation's seed 282415: n1 stood aside for n2; n2 stood aside for n0, which
    // had restarted and still waited out its new session. n1's next hold finds n0 above
    // it too: it stands aside for n0 once, then promotes.
    let mut h = H::new();
    let (j, mut st) = stood_aside_for_n2_once(&mut h);
    st.members.push(standby("n0", 100, Some(20)));
    let r = h.held(j, 5);
    let a = h.read_all(r, st.clone());
    assert!(stood_aside(&a), "{a:?}");
    // n2 gone from above meanwhile changes nothing: both were stood aside for.
    st.members.retain(|m| m.node.node_id != "n2");
    let j = rejoin_after_standing_aside(&mut h, H::ticket_of(&a));
    let r = h.held(j, 7);
    let a = h.read_all(r, st);
    assert!(commits(&a), "{a:?}");
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
