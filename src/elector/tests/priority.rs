//! SPEC §6: `priority`: a lower one lets a healthy higher one try first; 0 never takes
//! the lock by itself, only when a switchover names it.

use super::*;

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
