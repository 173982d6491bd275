//! SPEC §5: a service that outlived its stop (this node's own leftovers, or a live
//! member's stuck service) is fenced before any commit.

use super::*;

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
