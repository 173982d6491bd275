//! After winning the lock, before the commit: the old active's breadcrumb is fenced (SPEC
//! §4.3b, §5, §9), and a node whose fence failed sits out (§4.8).

use super::*;

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
