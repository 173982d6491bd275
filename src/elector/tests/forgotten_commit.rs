//! SPEC §5: an active whose commit the store forgot, named only by this node's memory or
//! a member's, is written back into the breadcrumb and fenced before the commit.

use super::*;

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
