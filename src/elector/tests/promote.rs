//! After winning the lock (SPEC §4.3a-c, §4.3e): the read, the epoch checks (§3, §3a),
//! fencing (§5, §9) and the commit.

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
fn rule_4_3b_another_nodes_breadcrumb_is_fenced_before_commit() {
    let mut h = H::new();
    let r = h.won(20);
    let old = record("n2", "inc-9", Some(10));
    let a = h.read(
        r,
        BreadcrumbView::Record {
            record: old.clone(),
            version: Version::new(4),
        },
    );
    let f = H::ticket_of(&a);
    assert_eq!(
        a,
        vec![Action::Fence {
            ticket: f,
            order: FenceOrder::Node(old)
        }]
    );
    assert_eq!(h.e.role(), Role::Fencing);
    let a = h.feed(Event::FenceDone {
        ticket: f,
        fenced: true,
        summary: "signal: fenced".into(),
    });
    assert!(
        matches!(
            a.as_slice(),
            [Action::CommitPromotion {
                epoch: 20,
                breadcrumb_version: Some(v),
                ..
            }] if *v == Version::new(4)
        ),
        "{a:?}"
    );
}

/// The simulation's seed 33926: the store forgot the commit of the active n3 (epoch 12)
/// that this node saw, and kept an older breadcrumb (n2's, epoch 10) or none. n3 may
/// still serve (a frozen warden in hooks mode), and only this node's memory names it: its
/// record goes back into the breadcrumb at the version read, the state is read again, and
/// n3 is fenced as any old active (seed 1875: a fence that fails must leave the operator
/// a breadcrumb to `fence --confirm`, whose history entry then stands for it).
#[test]
fn rule_5_an_active_whose_commit_the_store_forgot_is_written_back_and_fenced() {
    let n3 = record("n3", "inc-3", Some(12));
    // Seen in a session that the store's restart (or restore) ended.
    let seen_then_lost = |h: &mut H| {
        h.session();
        h.feed(Event::ActiveChanged { record: n3.clone() });
        assert_eq!(h.feed(Event::SessionLost), vec![Action::Connect]);
        h.session()
    };
    for (found, version) in [
        (
            BreadcrumbView::Record {
                record: record("n2", "inc-9", Some(10)),
                version: Version::new(4),
            },
            Some(Version::new(4)),
        ),
        (BreadcrumbView::Absent, None),
    ] {
        let mut h = H::new();
        let j = seen_then_lost(&mut h);
        let r = h.held(j, 20);
        let a = h.read(r, found);
        let w = H::ticket_of(&a);
        assert_eq!(
            a,
            vec![Action::RestoreBreadcrumb {
                ticket: w,
                record: n3.clone(),
                version,
                check_alive: true,
            }]
        );
        assert_eq!(h.e.role(), Role::Promoting);
        // Written back: n3's breadcrumb is fenced before the commit.
        let a = h.read(
            w,
            BreadcrumbView::Record {
                record: n3.clone(),
                version: Version::new(5),
            },
        );
        let f = H::ticket_of(&a);
        assert_eq!(
            a,
            vec![Action::Fence {
                ticket: f,
                order: FenceOrder::Node(n3.clone())
            }]
        );
        // The fence failed; the operator's `fence --confirm` deleted the breadcrumb: it
        // is not written back again.
        let all = h.feed_all(Event::FenceDone {
            ticket: f,
            fenced: false,
            summary: "script:x failed: exit 1".into(),
        });
        let rel = H::ticket_of(&strip(all));
        assert_eq!(
            h.feed(Event::Released { ticket: rel }),
            vec![Action::Connect]
        );
        h.feed(Event::SessionStarted {
            granted: None,
            control: ControlView::default(),
        });
        let a = h.advance(Duration::from_secs(60));
        let j = H::ticket_of(&a);
        let r = h.held(j, 21);
        let a = h.read_all(
            r,
            ClusterState {
                history_by_node: [("n3".to_string(), 12)].into(),
                confirmed_by_node: [("n3".to_string(), 12)].into(),
                ..state(BreadcrumbView::Absent)
            },
        );
        assert!(commits(&a), "{a:?}");
    }
    // Its warden lives and stepped down (its member record says so, read before the
    // write-back): its lease took its service down; nothing is written back.
    let mut h = H::new();
    let j = seen_then_lost(&mut h);
    let r = h.held(j, 20);
    let a = h.read(r, BreadcrumbView::Absent);
    let w = H::ticket_of(&a);
    assert!(
        matches!(a.as_slice(), [Action::RestoreBreadcrumb { .. }]),
        "{a:?}"
    );
    let a = h.read_all(
        w,
        ClusterState {
            remembered_alive: true,
            own_service_gone: false,
            ..state(BreadcrumbView::Absent)
        },
    );
    assert!(commits(&a), "{a:?}");
    // Seen before a reconnection within this session (ZooKeeper's client back in its
    // session after a restore: the simulation's seed 300191): an earlier link, written
    // back.
    let mut h = H::new();
    let j = h.session();
    h.feed(Event::ActiveChanged { record: n3.clone() });
    assert_eq!(h.feed(Event::Reconnected), vec![]);
    let r = h.held(j, 20);
    let a = h.read(r, BreadcrumbView::Absent);
    assert!(
        matches!(a.as_slice(), [Action::RestoreBreadcrumb { record, .. }] if *record == n3),
        "{a:?}"
    );
    // Seen in this very session with its breadcrumb: a clean step-down before its history
    // entry was written (seed 9899), not a store that forgot; and a store that keeps a
    // history entry of it is taken at its word.
    let mut h = H::new();
    let j = h.session();
    h.feed(Event::ActiveChanged { record: n3.clone() });
    h.feed(Event::ActiveConfirmed { record: n3.clone() });
    let r = h.held(j, 20);
    let a = h.read(r, BreadcrumbView::Absent);
    assert!(commits(&a), "{a:?}");
    // But seen in this session from the lock's record alone (its breadcrumb never seen,
    // or another epoch's or incarnation's confirmed): a restart may have forgotten the breadcrumb and kept
    // the lock (the review of stop 42), written back.
    for confirmed in [
        None,
        Some(record("n3", "inc-3", Some(11))),
        Some(record("n3", "inc-4", Some(12))),
    ] {
        let mut h = H::new();
        let j = h.session();
        h.feed(Event::ActiveChanged { record: n3.clone() });
        if let Some(record) = confirmed.clone() {
            h.feed(Event::ActiveConfirmed { record });
        }
        let r = h.held(j, 20);
        let a = h.read(r, BreadcrumbView::Absent);
        assert!(
            matches!(a.as_slice(), [Action::RestoreBreadcrumb { record, .. }] if *record == n3),
            "{confirmed:?}: {a:?}"
        );
    }
    // A later promotion in history fenced it (each one fences the one before).
    let mut h = H::new();
    let j = seen_then_lost(&mut h);
    let r = h.held(j, 20);
    let a = h.read_all(
        r,
        ClusterState {
            newest_history_epoch: Some(13),
            ..state(BreadcrumbView::Absent)
        },
    );
    assert!(commits(&a), "{a:?}");
}

/// The simulation's seed 392502: the active's lease came back and it started its service
/// again under the same lock (its breadcrumb rewritten to name the new one, §4.3d), then
/// froze; the store forgot that rewrite and kept the older one, naming a process that is
/// gone. A standby that saw the later rewrite writes it back before fencing.
#[test]
fn rule_5_a_start_again_whose_rewrite_the_store_forgot_is_written_back_and_fenced() {
    let with_service = |rewrite: u64, pgid: u32| NodeRecord {
        rewrite: Some(rewrite),
        service_pid: Some(pgid),
        service_pgid: Some(pgid),
        service_start_time: Some(u64::from(pgid) * 10),
        ..record("n3", "inc-3", Some(12))
    };
    let (first, again) = (with_service(1, 55), with_service(3, 77));
    // Saw the commit and each rewrite, in a link the store's restart broke.
    let saw = |h: &mut H, rewrites: &[NodeRecord]| {
        let j = h.session();
        h.feed(Event::ActiveChanged {
            record: record("n3", "inc-3", Some(12)),
        });
        for r in rewrites {
            h.feed(Event::ActiveRewritten { record: r.clone() });
        }
        assert_eq!(h.feed(Event::Reconnected), vec![]);
        h.held(j, 20)
    };
    let stored = |r: &NodeRecord| BreadcrumbView::Record {
        record: r.clone(),
        version: Version::new(7),
    };
    let mut h = H::new();
    let r = saw(&mut h, &[first.clone(), again.clone()]);
    let a = h.read(r, stored(&first));
    let w = H::ticket_of(&a);
    assert_eq!(
        a,
        vec![Action::RestoreBreadcrumb {
            ticket: w,
            record: again.clone(),
            version: Some(Version::new(7)),
            check_alive: false,
        }]
    );
    // Written back, the later one is fenced (and the history entry of epoch 12, the
    // promotion's, does not say the start again is over).
    let a = h.read_all(
        w,
        ClusterState {
            history_by_node: [("n3".to_string(), 12)].into(),
            newest_history_epoch: Some(12),
            ..state(stored(&again))
        },
    );
    assert!(
        matches!(a.as_slice(), [Action::Fence { order: FenceOrder::Node(t), .. }] if *t == again),
        "{a:?}"
    );

    // Written back as well: a later rewrite naming no service (the one written just
    // before a start again: a fence that cannot verify a named process gone does not
    // call it fenced); one seen in this very link (a stored rewrite older than one seen
    // is no trace of a clean step-down); one whose warden lives and stepped down (it is
    // fenced either way, only the record differs).
    let no_service = NodeRecord {
        rewrite: Some(2),
        ..record("n3", "inc-3", Some(12))
    };
    let mut h = H::new();
    let r = saw(&mut h, &[first.clone(), no_service.clone()]);
    let a = h.read(r, stored(&first));
    assert!(
        matches!(a.as_slice(), [Action::RestoreBreadcrumb { record, .. }] if *record == no_service),
        "{a:?}"
    );
    let mut h = H::new();
    let j = h.session();
    h.feed(Event::ActiveChanged {
        record: record("n3", "inc-3", Some(12)),
    });
    assert_eq!(h.feed(Event::Reconnected), vec![]);
    h.feed(Event::ActiveRewritten {
        record: again.clone(),
    });
    let r = h.held(j, 20);
    let a = h.read_all(
        r,
        ClusterState {
            remembered_alive: true,
            own_service_gone: false,
            ..state(stored(&first))
        },
    );
    assert!(
        matches!(a.as_slice(), [Action::RestoreBreadcrumb { record, check_alive: false, .. }]
            if *record == again),
        "seen in this link, its warden alive (not asked again: the driver writes it): {a:?}"
    );

    // Not written back, the stored record fenced as it is: the store kept the later
    // rewrite; the later one names the same service; it is of another incarnation (never
    // taken); a history entry of a later epoch.
    let other_inc = NodeRecord {
        incarnation: "inc-4".into(),
        ..again.clone()
    };
    let same = NodeRecord {
        rewrite: Some(2),
        ..first.clone()
    };
    for (seen, kept, history) in [
        (vec![first.clone(), again.clone()], again.clone(), None),
        (vec![same], first.clone(), None),
        (vec![other_inc], first.clone(), None),
        (vec![first.clone(), again.clone()], first.clone(), Some(13)),
    ] {
        let mut h = H::new();
        let r = saw(&mut h, &seen);
        let a = h.read_all(
            r,
            ClusterState {
                newest_history_epoch: history,
                ..state(stored(&kept))
            },
        );
        assert!(
            matches!(a.as_slice(), [Action::Fence { order: FenceOrder::Node(t), .. }] if *t == kept),
            "{seen:?} {kept:?}: {a:?}"
        );
    }

    // The store forgot the whole epoch (no breadcrumb): what is written back is the
    // commit's record, as before rewrites were told, not a rewrite that names a process
    // a later start again may have replaced (stop 38's review).
    let mut h = H::new();
    let r = saw(&mut h, std::slice::from_ref(&first));
    let a = h.read(r, BreadcrumbView::Absent);
    assert!(
        matches!(a.as_slice(), [Action::RestoreBreadcrumb { record: r, .. }]
            if *r == record("n3", "inc-3", Some(12))),
        "{a:?}"
    );
}

/// The simulation's seed 308747: the store forgot the active's commit while its warden
/// was frozen, and the winner (restarted meanwhile) never saw it. A standby that followed
/// it publishes it in its member record once its link has broken; the winner writes it
/// back and fences it as it would from its own memory.
#[test]
fn rule_5_an_active_only_a_member_remembers_is_written_back_and_fenced() {
    // This node is n1, restarted with no memory; n3 remembers n2.
    let n2 = record("n2", "inc-2", Some(1));
    let told = |m: Remembered| ClusterState {
        member_memories: vec![("n3".to_string(), m)],
        ..state(BreadcrumbView::Absent)
    };
    let of_n2 = Remembered {
        active: n2.clone(),
        rewrite: None,
    };
    let mut h = H::new();
    let j = h.session();
    let r = h.held(j, 2);
    let a = h.read_all(r, told(of_n2.clone()));
    let w = H::ticket_of(&a);
    assert_eq!(
        a,
        vec![Action::RestoreBreadcrumb {
            ticket: w,
            record: n2.clone(),
            version: None,
            check_alive: true,
        }]
    );
    // Written back, it is fenced before the commit.
    let a = h.read(
        w,
        BreadcrumbView::Record {
            record: n2.clone(),
            version: Version::new(1),
        },
    );
    assert!(
        matches!(a.as_slice(), [Action::Fence { order: FenceOrder::Node(t), .. }] if *t == n2),
        "{a:?}"
    );
    // Its warden lives and stepped down: nothing is written back.
    let mut h = H::new();
    let j = h.session();
    let r = h.held(j, 2);
    let a = h.read_all(r, told(of_n2.clone()));
    let w = H::ticket_of(&a);
    let a = h.read_all(
        w,
        ClusterState {
            remembered_alive: true,
            ..told(of_n2.clone())
        },
    );
    assert!(commits(&a), "{a:?}");
    // A later rewrite a member saw, over an older one the store kept: written back.
    let first = NodeRecord {
        rewrite: Some(1),
        service_pid: Some(55),
        service_pgid: Some(55),
        ..n2.clone()
    };
    let again = NodeRecord {
        rewrite: Some(2),
        service_pid: Some(77),
        service_pgid: Some(77),
        ..n2.clone()
    };
    let mut h = H::new();
    let j = h.session();
    let r = h.held(j, 2);
    let a = h.read_all(
        r,
        ClusterState {
            breadcrumb: BreadcrumbView::Record {
                record: first.clone(),
                version: Version::new(3),
            },
            ..told(Remembered {
                active: n2.clone(),
                rewrite: Some(again.clone()),
            })
        },
    );
    assert!(
        matches!(a.as_slice(), [Action::RestoreBreadcrumb { record, check_alive: false, .. }]
            if *record == again),
        "{a:?}"
    );
    // Not written back: the store keeps its breadcrumb, an entry of n2's at a later
    // epoch, or the operator's confirm of it; the memory is of this very
    // process (its own service is its own business).
    for st in [
        ClusterState {
            breadcrumb: BreadcrumbView::Record {
                record: n2.clone(),
                version: Version::new(3),
            },
            ..told(of_n2.clone())
        },
        ClusterState {
            history_by_node: [("n2".to_string(), 2)].into(),
            ..told(of_n2.clone())
        },
        ClusterState {
            history_by_node: [("n2".to_string(), 1)].into(),
            confirmed_by_node: [("n2".to_string(), 1)].into(),
            ..told(of_n2.clone())
        },
        told(Remembered {
            active: record("n1", "inc-1", Some(1)),
            rewrite: None,
        }),
    ] {
        let mut h = H::new();
        let j = h.session();
        let r = h.held(j, 2);
        let a = h.read_all(r, st.clone());
        assert!(
            matches!(
                a.as_slice(),
                [Action::CommitPromotion { .. }] | [Action::Fence { .. }]
            ),
            "{st:?}: {a:?}"
        );
        assert!(
            !a.iter()
                .any(|a| matches!(a, Action::RestoreBreadcrumb { .. })),
            "{st:?}: {a:?}"
        );
    }
}

/// The simulation's seed 255290. The store forgot n2's commit of epoch 1 (and the floor
/// entry that said so) but kept its lock; n2's renewal was late, it went `neutral` and
/// wrote that to history at epoch 1, after the restart; its warden was killed while its
/// service's stop was under way, and one process of it ran on. That entry, or any of
/// n2's own at that epoch (`demoting`, even `active`), is written whenever its role
/// changes, before or after a store forgets, and says nothing of its service being down:
/// the winner that remembers n2 still writes it back and fences it. A confirm by the
/// operator, or an entry of a later epoch, is a trace of its end.
#[test]
fn rule_5_an_entry_of_the_forgotten_epoch_itself_is_no_trace_of_its_end() {
    let n2 = record("n2", "inc-2", Some(1));
    for entry in ["neutral", "demoting", "active"] {
        // Seen in an earlier link, by this node and by n3.
        let mut h = H::new();
        let j = h.session();
        h.feed(Event::ActiveChanged { record: n2.clone() });
        h.feed(Event::Reconnected);
        let r = h.held(j, 2);
        let st = ClusterState {
            history_by_node: [("n2".to_string(), 1)].into(),
            newest_history_epoch: (entry == "active").then_some(1),
            member_memories: vec![(
                "n3".to_string(),
                Remembered {
                    active: n2.clone(),
                    rewrite: None,
                },
            )],
            ..state(BreadcrumbView::Absent)
        };
        let a = h.read_all(r, st);
        assert!(
            matches!(a.as_slice(), [Action::RestoreBreadcrumb { record, .. }] if *record == n2),
            "an entry `{entry}` at epoch 1: {a:?}"
        );
    }
}

/// The review of stop 42. The driver's "alive and stepped down" is about the record it
/// checked: a newer one another member published meanwhile is checked in its turn, not
/// taken as checked.
#[test]
fn rule_5_members_memories_are_checked_one_by_one() {
    let told = |ms: Vec<(&str, NodeRecord)>| ClusterState {
        member_memories: ms
            .into_iter()
            .map(|(n, active)| {
                (
                    n.to_string(),
                    Remembered {
                        active,
                        rewrite: None,
                    },
                )
            })
            .collect(),
        ..state(BreadcrumbView::Absent)
    };
    let (x, y) = (
        record("n2", "inc-2", Some(5)),
        record("n4", "inc-4", Some(7)),
    );
    let mut h = H::new();
    let j = h.session();
    let r = h.held(j, 9);
    let a = h.read_all(r, told(vec![("n3", x.clone())]));
    let w = H::ticket_of(&a);
    assert!(
        matches!(a.as_slice(), [Action::RestoreBreadcrumb { record, check_alive: true, .. }] if *record == x),
        "{a:?}"
    );
    // x's warden lives and stepped down; meanwhile n5 registered again, remembering y.
    let a = h.read_all(
        w,
        ClusterState {
            remembered_alive: true,
            ..told(vec![("n3", x.clone()), ("n5", y.clone())])
        },
    );
    let w = H::ticket_of(&a);
    assert!(
        matches!(a.as_slice(), [Action::RestoreBreadcrumb { record, check_alive: true, .. }] if *record == y),
        "y is checked, not taken as checked: {a:?}"
    );
    // y's warden lives and stepped down too: the commit goes out.
    let a = h.read_all(
        w,
        ClusterState {
            remembered_alive: true,
            ..told(vec![("n3", x.clone()), ("n5", y.clone())])
        },
    );
    assert!(commits(&a), "{a:?}");
}

/// What a standby publishes for that: an active seen in an earlier link than its current
/// one (any seen so far, at a new session's registration), or in this link from the
/// lock's record alone; never one whose breadcrumb this link saw (a missing breadcrumb
/// there is the trace of a clean step-down: seed 9899).
#[test]
fn rule_5_a_member_publishes_an_active_it_saw_in_an_earlier_link_only() {
    let n3 = record("n3", "inc-3", Some(12));
    let mut h = H::new();
    h.session();
    assert_eq!(h.e.remembered(true), None);
    h.feed(Event::ActiveChanged { record: n3.clone() });
    assert!(
        h.e.remembered(false).is_some(),
        "seen in this link, from the lock alone"
    );
    h.feed(Event::ActiveConfirmed { record: n3.clone() });
    assert_eq!(
        h.e.remembered(false),
        None,
        "its breadcrumb seen in this link"
    );
    let told = Some(Remembered {
        active: n3.clone(),
        rewrite: None,
    });
    assert_eq!(h.e.remembered(true), told, "registering a new session");
    h.feed(Event::Reconnected);
    assert_eq!(h.e.remembered(false), told, "after a reconnection");
    let later = NodeRecord {
        rewrite: Some(1),
        ..n3.clone()
    };
    h.feed(Event::ActiveRewritten {
        record: later.clone(),
    });
    assert_eq!(
        h.e.remembered(false).and_then(|m| m.rewrite),
        Some(later.clone()),
        "with the latest rewrite"
    );
    // Its breadcrumb read again in the new link (the review of stop 48): proven there.
    h.feed(Event::ActiveConfirmed { record: later });
    assert_eq!(
        h.e.remembered(false),
        None,
        "confirmed again after the reconnection"
    );
    // A newer active seen in this link with its breadcrumb: nothing to say again.
    h.feed(Event::ActiveChanged {
        record: record("n2", "inc-2", Some(13)),
    });
    h.feed(Event::ActiveConfirmed {
        record: record("n2", "inc-2", Some(13)),
    });
    assert_eq!(h.e.remembered(false), None);
}

/// The review of stop 48: an active seen commit, then a reconnection within the session,
/// then its breadcrumb read again in the new link naming it: its clean step-down later
/// (no breadcrumb, no history of its end) is no forgotten commit, and the winner fences
/// nobody. Without the read again, it is one (written back and fenced).
#[test]
fn rule_5_an_active_confirmed_again_after_a_reconnection_is_no_forgotten_commit() {
    let n3 = record("n3", "inc-3", Some(12));
    for again in [true, false] {
        let mut h = H::new();
        let j = h.session();
        h.feed(Event::ActiveChanged { record: n3.clone() });
        h.feed(Event::ActiveConfirmed { record: n3.clone() });
        h.feed(Event::Reconnected);
        if again {
            let all = h.feed_all(Event::ActiveConfirmed { record: n3.clone() });
            assert!(
                all.iter()
                    .any(|a| matches!(a, Action::Notice { message, .. }
                    if message.contains("still names n3 at epoch 12"))),
                "{all:?}"
            );
        }
        let r = h.held(j, 20);
        let a = h.read(r, BreadcrumbView::Absent);
        if again {
            assert!(commits(&a), "{a:?}");
        } else {
            assert!(
                matches!(a.as_slice(), [Action::RestoreBreadcrumb { record, .. }] if *record == n3),
                "{a:?}"
            );
        }
    }
}

#[test]
fn rule_4_3b_failed_fencing_never_promotes_and_backs_off() {
    let mut h = H::new();
    let j = h.session();
    fence_fails_and_sits_out(&mut h, 20, j);
    // Rejoin only after rejoin_delay, never a start in between.
    let a = h.advance(Duration::from_millis(999));
    assert_eq!(a, vec![]);
    let a = h.advance(Duration::from_millis(1));
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
}

/// Fails to fence the breadcrumb of n2 at version 4 from the lock won at `epoch` (the
/// transition tells the operator of `fence --confirm`), and releases; returns when the
/// new session is up (sitting out).
fn fence_fails_and_sits_out(h: &mut H, epoch: Epoch, rejoin: Ticket) {
    let r = h.held(rejoin, epoch);
    let a = h.read(
        r,
        BreadcrumbView::Record {
            record: record("n2", "inc-9", Some(10)),
            version: Version::new(4),
        },
    );
    let f = H::ticket_of(&a);
    let all = h.feed_all(Event::FenceDone {
        ticket: f,
        fenced: false,
        summary: "script:x failed: exit 1".into(),
    });
    assert!(
        has(&all, |a| matches!(a, Action::Transition { reason, .. }
            if reason.to_string().contains("fence --confirm"))),
        "{all:?}"
    );
    let a = strip(all);
    let rel = H::ticket_of(&a);
    assert_eq!(
        a,
        vec![Action::Release {
            ticket: rel,
            breadcrumb: None
        }]
    );
    assert_eq!(
        h.feed(Event::Released { ticket: rel }),
        vec![Action::Connect]
    );
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView::default(),
    });
    assert_eq!(a, vec![]);
}

/// §4.8 with `fence --confirm`: a node sitting out after failed fences looks at the
/// breadcrumb every renewal interval, and joins again as soon as it changed, not at its
/// back-off's end (up to 30 s, during which the cluster has no active).
#[test]
fn rule_4_8_a_node_sitting_out_after_a_failed_fence_rejoins_once_the_breadcrumb_changed() {
    let mut h = H::new();
    let j = h.session();
    fence_fails_and_sits_out(&mut h, 20, j);
    // The first back-off (1 s) ends before a look would: none is sent.
    let a = h.advance(Duration::from_secs(1));
    let j = H::ticket_of(&a);
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
    fence_fails_and_sits_out(&mut h, 21, j);
    // The second (2 s): a look after a renewal interval (1 s); the breadcrumb is the same.
    let a = h.advance(Duration::from_millis(999));
    assert_eq!(a, vec![]);
    let a = h.advance(Duration::from_millis(1));
    let peek = match a.as_slice() {
        [Action::PeekBreadcrumb { ticket }] => *ticket,
        _ => panic!("no look at the breadcrumb: {a:?}"),
    };
    let a = h.feed(Event::BreadcrumbPeeked {
        ticket: peek,
        version: Ok(Some(Version::new(4))),
    });
    assert_eq!(a, vec![], "the breadcrumb did not change");
    // An unanswered look changes nothing either.
    let a = h.feed(Event::BreadcrumbPeeked {
        ticket: peek,
        version: Err("no session".into()),
    });
    assert_eq!(a, vec![]);
    // Back-off of 2 s from the release: the next look would be at its end, so none.
    let a = h.advance(Duration::from_millis(999));
    assert_eq!(a, vec![]);
    let a = h.advance(Duration::from_millis(1));
    let j = H::ticket_of(&a);
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");

    // A third failure (4 s): the operator confirms meanwhile, and the next look finds the
    // breadcrumb gone: join at once, with the failures forgotten.
    fence_fails_and_sits_out(&mut h, 22, j);
    let a = h.advance(Duration::from_secs(1));
    let peek = match a.as_slice() {
        [Action::PeekBreadcrumb { ticket }] => *ticket,
        _ => panic!("no look at the breadcrumb: {a:?}"),
    };
    let all = h.feed_all(Event::BreadcrumbPeeked {
        ticket: peek,
        version: Ok(None),
    });
    assert!(
        has(&all, |a| matches!(a, Action::Notice { message, .. }
            if message.contains("fence --confirm"))),
        "{all:?}"
    );
    let a = strip(all);
    let j = H::ticket_of(&a);
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
    // A late answer to an older look is ignored.
    let a = h.feed(Event::BreadcrumbPeeked {
        ticket: peek,
        version: Ok(None),
    });
    assert_eq!(a, vec![]);
    // The next failure backs off as the first did (1 s, no look): the count restarted.
    fence_fails_and_sits_out(&mut h, 23, j);
    let a = h.advance(Duration::from_millis(999));
    assert_eq!(a, vec![]);
    let a = h.advance(Duration::from_millis(1));
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
}

#[test]
fn rule_4_3b_an_older_incarnation_of_this_node_is_fenced_locally() {
    let mut h = H::new();
    let r = h.won(20);
    let old = on_this_boot(record("n1", "inc-0", Some(10)));
    let a = h.read(
        r,
        BreadcrumbView::Record {
            record: old.clone(),
            version: Version::new(1),
        },
    );
    assert!(
        matches!(a.as_slice(), [Action::Fence { order: FenceOrder::OwnLeftovers(o), .. }] if *o == old),
        "{a:?}"
    );
}

/// `r` as written by a warden on this machine, this boot, this pid namespace.
fn on_this_boot(mut r: NodeRecord) -> NodeRecord {
    let host = cfg().host;
    r.boot_id = host.boot_id.to_uppercase();
    r.machine_id = host.machine_id;
    r.pid_ns = host.pid_ns;
    r
}

/// The order for a breadcrumb of this node id written as `r`.
fn order_for(r: NodeRecord) -> FenceOrder {
    let mut h = H::new();
    let read = h.won(20);
    let a = h.read(
        read,
        BreadcrumbView::Record {
            record: r,
            version: Version::new(1),
        },
    );
    match a.as_slice() {
        [Action::Fence { order, .. }] => order.clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn rule_5_our_node_id_from_another_machine_or_boot_is_fenced_by_the_whole_chain() {
    // A cloned machine or a rescheduled pod with our node id.
    let mut other_machine = on_this_boot(record("n1", "inc-0", Some(10)));
    other_machine.machine_id = "3a000000000000000000000000000002".into();
    assert!(matches!(order_for(other_machine), FenceOrder::Node(_)));
    // A container on this kernel: same boot id, another pid namespace.
    let mut container = on_this_boot(record("n1", "inc-0", Some(10)));
    container.pid_ns = Some(4026532000);
    assert!(matches!(order_for(container), FenceOrder::Node(_)));
    // This machine before a reboot: the chain decides (`signal` says "rebooted").
    let mut rebooted = on_this_boot(record("n1", "inc-0", Some(10)));
    rebooted.boot_id = "b00700000000000000000000000000bb".into();
    assert!(matches!(order_for(rebooted), FenceOrder::Node(_)));
    // A record without host ids (an older warden) is never "ours" by its node id.
    assert!(matches!(
        order_for(record("n1", "inc-0", Some(10))),
        FenceOrder::Node(_)
    ));
}

/// Active at epoch 3, its service unhealthy and its stop not verified (pid 9 still
/// runs); released, then the lock won again at `epoch`: the state read's ticket.
fn left_running_then_won(epoch: Epoch) -> (H, Ticket) {
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
    h.feed(Event::Released {
        ticket: H::ticket_of(&a),
    });
    h.advance(Duration::from_secs(31));
    let r = h.won(epoch);
    (h, r)
}

#[test]
fn rule_5_our_own_service_left_by_a_stuck_stop_is_fenced_without_fencing_ourselves() {
    let (mut h, r) = left_running_then_won(9);
    let mine = record("n1", "inc-1", Some(3));
    let a = h.read(
        r,
        BreadcrumbView::Record {
            record: mine.clone(),
            version: Version::new(2),
        },
    );
    assert!(
        matches!(a.as_slice(), [Action::Fence { order: FenceOrder::OwnService(r), .. }] if *r == mine),
        "{a:?}"
    );
}

/// Our own breadcrumb of epoch 3 as written back: a later rewrite naming the service.
fn own_written_back() -> BreadcrumbView {
    let mut mine = record("n1", "inc-1", Some(3));
    mine.rewrite = Some(2);
    mine.service_pid = Some(9);
    BreadcrumbView::Record {
        record: mine,
        version: Version::new(0),
    }
}

#[test]
fn rule_5_own_leftovers_whose_commit_the_store_forgot_are_written_back_before_the_epoch_is_refused()
{
    // Seed 25694: the store forgot the commit of epoch 3 and gave the lock out at 3 again.
    // Refusing the epoch and leaving would leave nothing for the next winner to fence.
    let (mut h, r) = left_running_then_won(3);
    let a = h.read(r, BreadcrumbView::Absent);
    assert_eq!(
        a,
        vec![Action::RestoreOwnBreadcrumb {
            ticket: H::ticket_of(&a),
            epoch: 3,
            version: None,
        }]
    );
    // Written back: our record at the lock's epoch is no commit of this hold. The epoch
    // is refused and the breadcrumb stays for whoever wins to fence the service.
    let a = h.read(H::ticket_of(&a), own_written_back());
    assert_released_keeping_breadcrumb(&a);
}

#[test]
fn rule_5_own_leftovers_are_written_back_then_fenced_before_a_new_epoch_commits() {
    let (mut h, r) = left_running_then_won(9);
    // An older breadcrumb of another node (a restore from before our commit): ours goes
    // back over it, as our commit had written it.
    let a = h.read(
        r,
        BreadcrumbView::Record {
            record: record("n2", "inc-0", Some(2)),
            version: Version::new(7),
        },
    );
    assert!(
        matches!(a.as_slice(), [Action::RestoreOwnBreadcrumb { epoch: 3, version: Some(v), .. }]
            if *v == Version::new(7)),
        "{a:?}"
    );
    let a = h.read(H::ticket_of(&a), own_written_back());
    assert!(
        matches!(
            a.as_slice(),
            [Action::Fence {
                order: FenceOrder::OwnService(_),
                ..
            }]
        ),
        "{a:?}"
    );
    // Still stuck: never a commit; the breadcrumb stays.
    let a = h.feed(Event::FenceDone {
        ticket: H::ticket_of(&a),
        fenced: false,
        summary: "still runs after SIGKILL".into(),
    });
    assert_released_keeping_breadcrumb(&a);
}

#[test]
fn rule_5_own_leftovers_are_fenced_after_any_other_fence_and_only_their_fence_clears_them() {
    let (mut h, r) = left_running_then_won(9);
    // A later breadcrumb of another node: not written over; fenced, then our own service.
    let a = h.read(
        r,
        BreadcrumbView::Record {
            record: record("n2", "inc-0", Some(5)),
            version: Version::new(7),
        },
    );
    assert!(
        matches!(
            a.as_slice(),
            [Action::Fence {
                order: FenceOrder::Node(_),
                ..
            }]
        ),
        "{a:?}"
    );
    let a = h.feed(Event::FenceDone {
        ticket: H::ticket_of(&a),
        fenced: true,
        summary: "n2 is down".into(),
    });
    assert!(
        matches!(a.as_slice(), [Action::Fence { order: FenceOrder::OwnService(r), .. }]
            if r.epoch == Some(3)),
        "{a:?}"
    );
    let a = h.feed(Event::FenceDone {
        ticket: H::ticket_of(&a),
        fenced: true,
        summary: "this node's own service is gone".into(),
    });
    assert!(
        matches!(a.as_slice(), [Action::CommitPromotion { epoch: 9, .. }]),
        "{a:?}"
    );
}

#[test]
fn rule_5_own_leftovers_found_gone_on_the_way_to_the_write_back_are_cleared() {
    // The driver fences the service before it writes back: when it is gone, nothing is
    // written and nothing is left to fence.
    let (mut h, r) = left_running_then_won(9);
    let a = h.read(r, BreadcrumbView::Absent);
    assert!(
        matches!(
            a.as_slice(),
            [Action::RestoreOwnBreadcrumb { epoch: 3, .. }]
        ),
        "{a:?}"
    );
    let mut st = state(BreadcrumbView::Absent);
    st.own_service_gone = true;
    let a = h.read_all(H::ticket_of(&a), st);
    assert!(
        matches!(a.as_slice(), [Action::CommitPromotion { epoch: 9, .. }]),
        "{a:?}"
    );
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

/// n2's member record: its service of epoch 7 outlived its stop.
fn n2_leftover() -> NodeRecord {
    let mut l = record("n2", "inc-0", Some(7));
    l.service_pid = Some(9);
    l
}

#[test]
fn rule_5_a_live_members_stuck_service_is_fenced_before_any_commit() {
    // The store forgot the breadcrumb naming it: only n2's member record says so.
    let mut h = H::new();
    let r = h.won(20);
    let mut st = state(BreadcrumbView::Absent);
    st.member_leftovers = vec![n2_leftover()];
    let a = h.read_all(r, st);
    assert!(
        matches!(a.as_slice(), [Action::Fence { order: FenceOrder::Node(l), .. }] if *l == n2_leftover()),
        "{a:?}"
    );
    let a = h.feed(Event::FenceDone {
        ticket: H::ticket_of(&a),
        fenced: true,
        summary: "gone".into(),
    });
    assert!(
        matches!(a.as_slice(), [Action::CommitPromotion { epoch: 20, .. }]),
        "{a:?}"
    );
}

#[test]
fn rule_5_a_stuck_service_that_cannot_be_fenced_blocks_the_promotion_with_its_own_advice() {
    let mut h = H::new();
    let r = h.won(20);
    let mut st = state(BreadcrumbView::Absent);
    st.member_leftovers = vec![n2_leftover()];
    let a = h.read_all(r, st);
    let a = h.feed_all(Event::FenceDone {
        ticket: H::ticket_of(&a),
        fenced: false,
        summary: "still runs after SIGKILL".into(),
    });
    let said = a
        .iter()
        .filter_map(|a| match a {
            Action::Transition { reason, .. } => Some(reason.to_string()),
            _ => None,
        })
        .collect::<String>();
    assert!(said.contains("stuck in the kernel"), "{said}");
    assert!(!said.contains("fence --confirm"), "{said}");
    assert_released_keeping_breadcrumb(&strip(a));
}

#[test]
fn rule_5_a_stuck_service_the_breadcrumb_names_is_fenced_once() {
    let mut h = H::new();
    let r = h.won(20);
    let mut st = state(BreadcrumbView::Record {
        record: n2_leftover(),
        version: Version::new(4),
    });
    st.member_leftovers = vec![n2_leftover()];
    let a = h.read_all(r, st);
    assert!(
        matches!(
            a.as_slice(),
            [Action::Fence {
                order: FenceOrder::Node(_),
                ..
            }]
        ),
        "{a:?}"
    );
    let a = h.feed(Event::FenceDone {
        ticket: H::ticket_of(&a),
        fenced: true,
        summary: "gone".into(),
    });
    assert!(commits(&a), "{a:?}");
}

#[test]
fn rule_5_a_stuck_service_the_breadcrumb_names_by_epoch_only_is_fenced_too() {
    // The breadcrumb of that epoch names an earlier start (the store forgot a rewrite):
    // fencing it finds nothing of the stuck service, so the member's record is fenced too.
    let mut h = H::new();
    let r = h.won(20);
    let mut earlier = n2_leftover();
    earlier.service_pid = Some(8);
    let mut st = state(BreadcrumbView::Record {
        record: earlier.clone(),
        version: Version::new(4),
    });
    st.member_leftovers = vec![n2_leftover()];
    let a = h.read_all(r, st);
    assert!(
        matches!(a.as_slice(), [Action::Fence { order: FenceOrder::Node(b), .. }] if *b == earlier),
        "{a:?}"
    );
    let a = h.feed(Event::FenceDone {
        ticket: H::ticket_of(&a),
        fenced: true,
        summary: "gone".into(),
    });
    assert!(
        matches!(a.as_slice(), [Action::Fence { order: FenceOrder::Node(l), .. }] if *l == n2_leftover()),
        "{a:?}"
    );
}

#[test]
fn rule_5_own_leftovers_that_ended_while_out_of_the_lock_are_forgotten() {
    // The driver looked while this node was out of the lock: nothing left of the service.
    // The next hold commits without fencing it (and the member record stops naming it).
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
    assert_eq!(h.e.own_leftovers(), Some(3));
    // Ignored while the lock is held: that hold fences it in its order.
    h.feed(Event::OwnServiceGone);
    assert_eq!(h.e.own_leftovers(), Some(3));
    h.feed(Event::Released {
        ticket: H::ticket_of(&a),
    });
    h.feed(Event::OwnServiceGone);
    assert_eq!(h.e.own_leftovers(), None);
    h.advance(Duration::from_secs(31));
    let r = h.won(9);
    let a = h.read(r, BreadcrumbView::Absent);
    assert!(
        matches!(a.as_slice(), [Action::CommitPromotion { epoch: 9, .. }]),
        "{a:?}"
    );
}

#[test]
fn rule_9_an_unreadable_breadcrumb_is_fenced_as_an_unknown_old_active() {
    let mut h = H::new();
    let r = h.won(20);
    let a = h.read(
        r,
        BreadcrumbView::Unreadable {
            reason: "not JSON".into(),
            version: Version::new(2),
        },
    );
    assert!(
        matches!(
            a.as_slice(),
            [Action::Fence {
                order: FenceOrder::Unreadable,
                ..
            }]
        ),
        "{a:?}"
    );
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
