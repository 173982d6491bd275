//! Pause and planned switchovers (SPEC §8).

use super::*;

#[test]
fn paused_cluster_keeps_the_active_when_its_service_fails() {
    let mut h = H::new();
    h.active(3);
    h.feed(Event::ControlChanged {
        control: ControlView {
            paused: true,
            failover: None,
        },
    });
    let a = h.feed(Event::ServiceExited {
        reason: "crash".into(),
    });
    // What is left of it is stopped, and nothing starts beside it.
    assert!(
        matches!(a.as_slice(), [Action::StopService { .. }]),
        "{a:?}"
    );
    assert_eq!(h.e.role(), Role::Active);
    let a = h.feed(Event::ServiceStopped {
        ticket: H::ticket_of(&a),
        clean: true,
        detail: String::new(),
    });
    assert_eq!(a, vec![], "paused: no restart, no handover");
    assert_eq!(h.e.role(), Role::Active);
}

#[test]
fn rule_8_a_request_with_a_far_deadline_lapses_within_the_longest_timeout() {
    let mut h = H::new();
    let far = ControlView {
        paused: false,
        failover: Some(FailoverView {
            from: "n9".into(),
            to: Some("n8".into()),
            deadline: "2099-01-01T00:00:00Z".into(),
            force: false,
            lapses_at: h.now + Duration::from_secs(3600 * 24 * 365),
        }),
    };
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: far.clone(),
    });
    assert_eq!(a, vec![], "a request naming another node keeps us out");
    // Seen again later (a watch): still counted from the first sight.
    h.now += Duration::from_secs(1800);
    let a = h.feed(Event::ControlChanged {
        control: far.clone(),
    });
    assert_eq!(a, vec![]);
    let a = h.advance(MAX_SWITCHOVER - Duration::from_secs(1800));
    assert!(
        matches!(a.as_slice(), [Action::Join { .. }]),
        "the request lapsed {} after it was first seen: {a:?}",
        humantime::format_duration(MAX_SWITCHOVER)
    );
}

#[test]
fn planned_switchover_away_from_us_demotes_cleanly_and_stays_out() {
    let mut h = H::new();
    h.active(3);
    let lapses_at = h.now + Duration::from_secs(30);
    let a = h.feed(Event::ControlChanged {
        control: ControlView {
            paused: false,
            failover: Some(FailoverView {
                deadline: "2026-01-01T00:00:00Z".into(),
                force: false,
                from: "n1".into(),
                to: Some("n2".into()),
                lapses_at,
            }),
        },
    });
    let s = H::ticket_of(&a);
    assert!(matches!(
        a.as_slice(),
        [Action::StopService {
            cause: StopCause::Demote,
            ..
        }]
    ));
    let a = h.feed(Event::ServiceStopped {
        ticket: s,
        clean: true,
        detail: String::new(),
    });
    let a = h.feed(Event::Released {
        ticket: H::ticket_of(&a),
    });
    assert_eq!(a, vec![Action::Connect]);
    // The request is still in control when the new session reads it: stay out.
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView {
            paused: false,
            failover: Some(FailoverView {
                deadline: "2026-01-01T00:00:00Z".into(),
                force: false,
                from: "n1".into(),
                to: Some("n2".into()),
                lapses_at,
            }),
        },
    });
    assert_eq!(a, vec![]);
    // Cleared by the new active: join as a standby again, no back-off.
    let a = h.feed(Event::ControlChanged {
        control: ControlView::default(),
    });
    assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
}

#[test]
fn a_lapsed_switchover_request_is_cleared_by_the_next_active() {
    let mut h = H::new();
    let a = h.feed(Event::SessionStarted {
        granted: None,
        control: ControlView {
            paused: false,
            failover: Some(FailoverView {
                deadline: "2026-01-01T00:00:00Z".into(),
                force: false,
                from: "n9".into(),
                to: Some("n8".into()),
                lapses_at: h.now + Duration::from_secs(2),
            }),
        },
    });
    assert_eq!(a, vec![], "a request naming another node keeps us out");
    let a = h.advance(Duration::from_secs(2));
    let j = H::ticket_of(&a);
    let r = h.held(j, 4);
    let a = h.read(r, BreadcrumbView::Absent);
    let a = h.feed(Event::Committed {
        ticket: H::ticket_of(&a),
        outcome: WriteOutcome::Done,
    });
    let a = h.feed(Event::ServiceStarted {
        ticket: H::ticket_of(&a),
    });
    let r = H::ticket_of_record(&a);
    assert_eq!(
        a,
        vec![Action::RecordService {
            ticket: r,
            epoch: 4
        }]
    );
    let a = h.recorded(&a);
    assert!(
        matches!(a.as_slice(), [Action::ClearFailover { request }] if request.from == "n9"),
        "{a:?}"
    );
}
