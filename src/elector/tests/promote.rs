//! After winning the lock (SPEC §4.3, §4.3a, §4.3c, §4.3e, §4.5): the read, the epoch
//! checks (§3, §3a) and the commit. What is fenced before the commit is in `fencing.rs`,
//! `forgotten_commit.rs` and `leftovers.rs`.

use super::*;

/// After a promotion given up without acting on it (`a`, a lone `Release`): the release
/// is acknowledged, the node reconnects and backs off like any failed promotion (§4.8):
/// no join at once.
fn assert_released_then_backs_off(h: &mut H, a: Vec<Action>) {
    assert!(matches!(a.as_slice(), [Action::Release { .. }]), "{a:?}");
    let a = h.feed(Event::Released {
        ticket: H::ticket_of(&a),
    });
    assert_eq!(a, vec![Action::Connect]);
    // Backing off like any failed promotion (§4.8): no join at once.
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    assert_eq!(a, vec![]);
}

#[test]
fn rule_4_3_empty_breadcrumb_commit_then_start_with_the_epoch() {
    let mut h = H::new();
    let j = h.session();
    let a = h.feed(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Held { epoch: 42 },
    });
    let r = H::ticket_of(&a);
    assert_eq!(a, vec![Action::ReadState { ticket: r }]);
    let a = h.read(r, BreadcrumbView::Absent);
    let c = H::ticket_of(&a);
    assert_eq!(
        a,
        vec![Action::CommitPromotion {
            ticket: c,
            epoch: 42,
            breadcrumb_version: None,
            control_version: Version::new(0)
        }]
    );
    let sent = h.now;
    h.now += Duration::from_millis(3);
    let a = h.feed(Event::Committed {
        ticket: c,
        outcome: WriteOutcome::Done,
    });
    let s = H::ticket_of(&a);
    // The lease runs from the commit's send time; a start must leave room to stop.
    assert_eq!(
        a,
        vec![Action::StartService {
            ticket: s,
            epoch: 42,
            lease_valid_until: sent + T / 2
        }]
    );
    assert_eq!(h.e.role(), Role::Promoting);
    let a = h.feed(Event::ServiceStarted { ticket: s });
    let r = H::ticket_of_record(&a);
    assert_eq!(
        a,
        vec![Action::RecordService {
            ticket: r,
            epoch: 42
        }]
    );
    assert_eq!(
        h.e.role(),
        Role::Promoting,
        "not active before the service's identity is in the breadcrumb"
    );
    let a = h.recorded(&a);
    assert_eq!(a, vec![]);
    assert_eq!(h.e.role(), Role::Active);
}

#[test]
fn rule_4_3a_paused_cluster_found_after_winning_releases_the_lock() {
    let mut h = H::new();
    let r = h.won(7);
    let a = h.feed(Event::StateRead {
        ticket: r,
        result: Ok(Box::new(ClusterState {
            breadcrumb: BreadcrumbView::Absent,
            control: ControlView {
                paused: true,
                failover: None,
            },
            control_version: Version::new(3),
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
}

#[test]
fn rule_4_3c_a_rewrite_of_ours_at_the_lock_epoch_is_not_taken_for_the_unknown_commit() {
    // Only the commit's own record (no rewrite number) answers an unknown commit.
    let mut h = H::new();
    let c = h.committing(30);
    let a = h.feed(Event::Committed {
        ticket: c,
        outcome: WriteOutcome::Unknown,
    });
    let mut rewrite = record("n1", "inc-1", Some(30));
    rewrite.rewrite = Some(4);
    let a = h.read(
        H::ticket_of(&a),
        BreadcrumbView::Record {
            record: rewrite,
            version: Version::new(3),
        },
    );
    assert!(
        !has(&a, |a| matches!(a, Action::StartService { .. })),
        "{a:?}"
    );
    assert_released_keeping_breadcrumb(&a);
}

/// A commit conflicts when control, the breadcrumb or the lock moved, and it does not say
/// which: the node joins again to learn whether the lock is still its own, then reads the
/// state again. It read and committed for ever under a lock the store no longer had (a
/// store restored to before the lock was taken, which kept this session: the
/// simulation's seed 473271, with every other node of priority 0).
#[test]
fn rule_4_3c_conflict_joins_again_then_reads_again_and_unknown_is_resolved_by_reading() {
    let mut h = H::new();
    let c = h.committing(30);
    let a = h.feed(Event::Committed {
        ticket: c,
        outcome: WriteOutcome::Conflict,
    });
    assert!(matches!(a.as_slice(), [.., Action::Join { .. }]), "{a:?}");
    let a = h.feed(Event::Joined {
        ticket: H::ticket_of(&a),
        outcome: JoinOutcome::Held { epoch: 30 },
    });
    assert!(
        matches!(a.as_slice(), [.., Action::ReadState { .. }]),
        "{a:?}"
    );
    let a = h.read(H::ticket_of(&a), BreadcrumbView::Absent);
    let c = H::ticket_of(&a);
    let sent = h.now;
    h.now += Duration::from_millis(800);
    let a = h.feed(Event::Committed {
        ticket: c,
        outcome: WriteOutcome::Unknown,
    });
    let r = H::ticket_of(&a);
    assert_eq!(a, vec![Action::ReadState { ticket: r }]);
    // The unknown write went through: our record with our epoch is there.
    let a = h.read(
        r,
        BreadcrumbView::Record {
            record: record("n1", "inc-1", Some(30)),
            version: Version::new(0),
        },
    );
    assert!(
        matches!(a.as_slice(), [Action::StartService { lease_valid_until, .. }]
            if *lease_valid_until == sent + T / 2),
        "lease from the unknown commit's send time: {a:?}"
    );
}

#[test]
fn rule_4_3c_a_conflicting_commit_whose_lock_is_gone_stands_by() {
    let mut h = H::new();
    let c = h.committing(30);
    let a = h.feed(Event::Committed {
        ticket: c,
        outcome: WriteOutcome::Conflict,
    });
    let a = h.feed(Event::Joined {
        ticket: H::ticket_of(&a),
        outcome: JoinOutcome::Exists { epoch: Some(31) },
    });
    assert!(
        !a.iter()
            .any(|a| matches!(a, Action::ReadState { .. } | Action::CommitPromotion { .. })),
        "{a:?}"
    );
    assert_eq!(h.e.role(), Role::Standby);
}

#[test]
fn rule_3_epoch_not_above_the_recorded_one_refuses_to_promote() {
    let mut h = H::new();
    let r = h.won(5);
    let all = h.feed_all(Event::StateRead {
        ticket: r,
        result: Ok(Box::new(ClusterState {
            breadcrumb: BreadcrumbView::Absent,
            control: ControlView::default(),
            control_version: Version::new(0),
            newest_history_epoch: Some(9),
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
        has(
            &all,
            |a| matches!(a, Action::Transition { reason, .. } if reason.to_string().contains("not above"))
        ),
        "{all:?}"
    );
    assert!(matches!(strip(all).as_slice(), [Action::Release { .. }]));
}

#[test]
fn rule_3a_an_epoch_not_above_one_a_member_has_seen_is_lost_data() {
    let mut h = H::new();
    let r = h.won(5);
    let all = h.feed_all(Event::StateRead {
        ticket: r,
        result: Ok(Box::new(ClusterState {
            breadcrumb: BreadcrumbView::Absent,
            control: ControlView::default(),
            control_version: Version::new(0),
            newest_history_epoch: None,
            history_by_node: Default::default(),
            confirmed_by_node: Default::default(),
            remembered_alive: false,
            own_service_gone: false,
            members_epoch_seen: Some(5),
            members: Vec::new(),
            own_position: None,
            member_leftovers: Vec::new(),
            member_memories: Vec::new(),
        })),
    });
    assert!(
        has(&all, |a| matches!(a, Action::Transition { reason, .. }
            if reason.to_string().contains("lost data") && reason.to_string().contains("init --force"))),
        "{all:?}"
    );
    assert!(matches!(strip(all).as_slice(), [Action::Release { .. }]));
    // What it read is remembered, for its own member record.
    assert_eq!(h.e.epoch_seen(), Some(5));
}

#[test]
fn rule_3a_a_standby_learns_the_holders_committed_epoch_and_a_lost_store_is_waited_out() {
    let mut h = H::new();
    let j = h.session();
    h.feed(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::Exists { epoch: Some(41) },
    });
    assert_eq!(h.e.epoch_seen(), Some(41));
    let mut h = H::new();
    let j = h.session();
    let all = h.feed_all(Event::Joined {
        ticket: j,
        outcome: JoinOutcome::LostData("the store lost data: no marker".into()),
    });
    assert!(
        has(&all, |a| matches!(a, Action::Notice { warn: true, message }
            if message.contains("no marker"))),
        "{all:?}"
    );
    assert!(
        !has(&all, |a| matches!(a, Action::Join { .. })),
        "joined again at once: {all:?}"
    );
}

#[test]
fn rule_4_3e_failed_promotion_keeps_the_breadcrumb_and_backs_off() {
    let mut h = H::new();
    let s = h.starting(1);
    let a = h.feed(Event::StartFailed {
        ticket: s,
        reason: "exec failed".into(),
        ran: true,
    });
    // Demote whatever the failed promotion left, then release without deleting the
    // breadcrumb: the next active fences us.
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
    assert!(matches!(a.as_slice(), [Action::Release { .. }]), "{a:?}");
    let a = h.feed(Event::Released {
        ticket: H::ticket_of(&a),
    });
    assert_eq!(a, vec![Action::Connect]);
    h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    assert_eq!(h.advance(Duration::from_millis(900)), vec![]);
    assert!(matches!(
        h.advance(Duration::from_millis(100)).as_slice(),
        [Action::Join { .. }]
    ));
}

#[test]
fn rule_4_3e_a_promotion_that_cannot_name_its_service_releases_without_writing() {
    let mut h = H::new();
    let c = h.committing(6);
    let a = h.feed(Event::CommitAborted {
        ticket: c,
        reason: "the pidfile /run/x.pid holds \"garbage\"".into(),
    });
    assert_released_then_backs_off(&mut h, a);
}

#[test]
fn rule_3a_a_promotion_the_stores_replicas_do_not_have_is_never_acted_on() {
    let mut h = H::new();
    let c = h.committing(6);
    let a = h.feed(Event::Committed {
        ticket: c,
        outcome: WriteOutcome::NotDurable,
    });
    assert_released_then_backs_off(&mut h, a);
}

#[test]
fn rule_4_5_a_stop_during_the_commit_waits_for_it_and_deletes_what_it_wrote() {
    let mut h = H::new();
    let c = h.committing(8);
    let a = h.feed(Event::StopRequested);
    assert_eq!(
        a,
        vec![],
        "no release while the commit's answer is out: {a:?}"
    );
    // Unknown outcome: read to find out; it did go through.
    let a = h.feed(Event::Committed {
        ticket: c,
        outcome: WriteOutcome::Unknown,
    });
    let mine = record("n1", "inc-1", Some(8));
    let a = h.read(
        H::ticket_of(&a),
        BreadcrumbView::Record {
            record: mine,
            version: Version::new(0),
        },
    );
    assert!(
        matches!(
            a.as_slice(),
            [Action::Release {
                breadcrumb: Some(8),
                ..
            }]
        ),
        "{a:?}"
    );

    // Acknowledged: the same, without the read; never a start.
    let mut h = H::new();
    let c = h.committing(8);
    h.feed(Event::StopRequested);
    let a = h.feed(Event::Committed {
        ticket: c,
        outcome: WriteOutcome::Done,
    });
    assert!(
        matches!(
            a.as_slice(),
            [Action::Release {
                breadcrumb: Some(8),
                ..
            }]
        ),
        "{a:?}"
    );
}

/// The transition to `promoting` holds its writes (the member record, the history entry)
/// until the commit is answered, whatever the answer: the commit's own reads and write
/// would otherwise wait behind them. Once: a second answer has nothing held.
#[test]
fn the_transition_to_promoting_is_written_once_the_commit_is_answered() {
    let mut h = H::new();
    let c = h.committing(4);
    let a = h.feed_all(Event::Committed {
        ticket: c,
        outcome: WriteOutcome::Done,
    });
    assert_eq!(a.first(), Some(&Action::WriteHeld), "{a:?}");
    assert_eq!(a.iter().filter(|a| **a == Action::WriteHeld).count(), 1);
    let a = h.feed_all(Event::Committed {
        ticket: c,
        outcome: WriteOutcome::Done,
    });
    assert!(!a.contains(&Action::WriteHeld), "{a:?}");
}
