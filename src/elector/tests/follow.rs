//! SPEC §6: the `follow` hook: run once per new active (never an older one, nor an
//! earlier incarnation of this node), never beside a promotion; a failure makes the node
//! ineligible.

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
                history: true,
                held: false,
            }
        ]
    );
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

/// SPEC §6, hooks mode with `health.standby_command`: a node is eligible only while it
/// and the service's own check both pass, and not before the standby check's first pass.
#[test]
fn rule_6_hooks_mode_is_eligible_only_while_the_service_check_and_standby_command_pass() {
    let mut e = Elector::new(
        ElectorConfig {
            standby_check: true,
            ..cfg()
        },
        true,
    );
    assert_eq!(e.poll_action(), Some(Action::Connect));
    let mut h = H {
        e,
        now: Instant::now(),
    };
    // In a session, the service's check passing, but standby_command not yet: no join.
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    assert!(!a.iter().any(|a| matches!(a, Action::Join { .. })), "{a:?}");
    assert_eq!(h.e.role(), Role::Ineligible);
    let a = h.feed(Event::StandbyCheckChanged {
        passing: true,
        detail: "lag 0".into(),
    });
    assert!(a.iter().any(|a| matches!(a, Action::Join { .. })), "{a:?}");
    // The service's check failing makes it ineligible whatever standby_command says, and
    // standby_command failing does too, with its own words.
    h.feed(Event::EligibilityChanged {
        eligible: false,
        detail: "service down".into(),
    });
    assert!(!h.e.eligible);
    h.feed(Event::EligibilityChanged {
        eligible: true,
        detail: "service up".into(),
    });
    assert!(h.e.eligible);
    h.feed(Event::StandbyCheckChanged {
        passing: false,
        detail: "lag 90s".into(),
    });
    assert!(!h.e.eligible);
    assert_eq!(
        h.e.reason,
        Some(Reason::Eligibility("standby_command: lag 90s".into()))
    );
}

/// A switchover with --force names this node, whose follow of the old active failed and
/// is retried. The lock comes free while a retry runs, so the join waits for it; the retry
/// fails too: the node joins then, as the operator said (before, it waited for ever,
/// retrying the follow, and the switchover lapsed: seen in the full suite).
#[test]
fn rule_6_a_forced_target_joins_when_a_follow_that_held_its_join_back_fails() {
    let mut h = following_standby();
    let t = follow_ticket(&h.feed(Event::ActiveChanged {
        record: active_record("n2", 7),
    }));
    h.feed(Event::Followed {
        ticket: t,
        ok: false,
        detail: "REPLICAOF refused".into(),
    });
    h.feed(Event::ControlChanged {
        control: ControlView {
            paused: false,
            failover: Some(FailoverView {
                from: "n2".into(),
                to: Some("n1".into()),
                deadline: "2026-01-01T00:00:00Z".into(),
                force: true,
                lapses_at: h.now + Duration::from_secs(30),
            }),
        },
    });
    // The retry of the follow is running when n2 lets the lock go.
    let a = h.advance(Duration::from_secs(1));
    let retry = a
        .iter()
        .find_map(|a| match a {
            Action::Follow { ticket, .. } => Some(*ticket),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no retry of the follow: {a:?}"));
    let a = h.feed(Event::LockDeleted);
    assert!(!a.iter().any(|a| matches!(a, Action::Join { .. })), "{a:?}");
    let a = h.feed(Event::Followed {
        ticket: retry,
        ok: false,
        detail: "REPLICAOF refused".into(),
    });
    assert!(
        a.iter().any(|a| matches!(a, Action::Join { .. })),
        "the forced target never joins: {a:?}"
    );
}
