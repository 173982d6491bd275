//! The words of every reason: the same as before reasons were typed, since `history`,
//! `status` and the log show them and operators and tests read them.

use super::*;

#[test]
fn every_reason_reads_as_it_did_when_it_was_a_string() {
    let (epoch, seen, n) = (5, 9, 9);
    let summary = "signal: no answer";
    let confirm = "warden fence --confirm n2";
    let unreadable_confirm = "warden fence --confirm --unreadable";
    let cases: Vec<(Reason, String)> = vec![
        (Reason::Unexplained(Role::Standby), "in the election".into()),
        (Reason::Unexplained(Role::Ineligible), "out of the election".into()),
        (Reason::Unexplained(Role::Active), "serving".into()),
        (Reason::Unexplained(Role::Neutral), "the lease is in doubt".into()),
        (Reason::Unexplained(Role::Demoting), "demoting".into()),
        (Reason::Unexplained(Role::Promoting), "promoting".into()),
        (Reason::Unexplained(Role::Fencing), "fencing".into()),
        (Reason::SessionLost, "the coordination session was lost".into()),
        (Reason::WonTheLock, "won the lock".into()),
        (Reason::AnotherNodeHolds, "another node holds the lock".into()),
        (Reason::LockReleased, "the lock was released".into()),
        (Reason::NoLongerEligible, "holding the lock but no longer eligible".into()),
        (Reason::Eligibility("tcp: refused".into()), "tcp: refused".into()),
        (Reason::StoreLostData("the store lost data: x".into()), "the store lost data: x".into()),
        (Reason::Paused, "the cluster was paused".into()),
        (Reason::Resumed, "the cluster was resumed".into()),
        (Reason::FoundPaused, "the cluster is paused".into()),
        (
            Reason::SwitchoverLapsed { from: "n2".into() },
            "the switchover request from n2 lapsed".into(),
        ),
        (
            Reason::SwitchoverStepsUsDown,
            "a planned switchover asked this node to step down".into(),
        ),
        (
            Reason::SwitchoverMovesAway,
            "a planned switchover moves the active away from this node".into(),
        ),
        (
            Reason::SwitchoverNamesAnother { to: "n3".into() },
            "a planned switchover names n3 as the new active".into(),
        ),
        (
            Reason::FollowFailed("REPLICAOF refused".into()),
            "the follow hook failed: REPLICAOF refused".into(),
        ),
        (Reason::FollowingAgain, "following the active again".into()),
        (
            Reason::NotFollowing("the follow hook failed: x".into()),
            "the follow hook failed: x: not promoting until a follow succeeds".into(),
        ),
        (Reason::NotEligible, "no longer eligible: not promoting".into()),
        (
            Reason::StillFollowing,
            "the follow hook is still running: not promoting beside it".into(),
        ),
        (
            Reason::SwitchoverCalledOff("n2 is behind by 42".into()),
            "switchover called off: n2 is behind by 42".into(),
        ),
        (
            Reason::Priority0NotNamed,
            "priority 0 and no pending switchover names this node any more: not promoting".into(),
        ),
        (Reason::StateChanged, "the breadcrumb or control changed; reading again".into()),
        (Reason::FencingNode("n2".into()), "fencing the old active n2".into()),
        (Reason::FencingUnknown, "fencing an unknown old active".into()),
        (
            Reason::FencingOwnLeftovers,
            "fencing leftovers of an earlier warden process on this node".into(),
        ),
        (
            Reason::FencingOwnService,
            "fencing this node's own service, which an earlier stop left running".into(),
        ),
        (Reason::Fenced(summary.into()), format!("fenced the old active: {summary}")),
        (
            Reason::FenceFailed {
                summary: summary.into(),
                target: Some("n2".into()),
            },
            format!(
                "fencing failed, not promoting: {summary}. If the old active is powered off \
             or its service is certainly stopped, record that with `{confirm}`; otherwise \
             fix the fence method"
            ),
        ),
        (
            Reason::FenceFailed {
                summary: summary.into(),
                target: None,
            },
            format!(
                "fencing failed, not promoting: {summary}. If the old active is powered off \
             or its service is certainly stopped, record that with `{unreadable_confirm}`; otherwise \
             fix the fence method"
            ),
        ),
        (
            Reason::EpochSeenBefore { epoch, seen },
            format!(
                "refusing to promote: the store lost data: the lock's epoch {epoch} is not above \
                 epoch {seen}, which a node of this cluster has seen (the store was wiped, \
                 restarted without persistence, or restored from an old backup or snapshot); \
                 no node promotes until you have checked that no old active still serves and \
                 run `warden init --force`, which sets the epoch counter above every epoch seen"
            ),
        ),
        (
            Reason::StaleEpoch { epoch, recorded: n },
            format!(
                "refusing to promote: the lock's epoch {epoch} is not above the recorded \
             epoch {n} (in the breadcrumb or history); the ensemble may have been \
             restored from an old snapshot, and an old active may still hold the newer \
             epoch. Once you have checked that every old active is down, stop every \
             warden of the cluster and run `warden init --force`: on your word, as \
             with `fence --confirm`, it deletes the breadcrumb and control and moves \
             a history with an epoch above the ensemble's zxid to history.old-<time>, \
             and raises the epoch counter above it, so the next active's epoch is \
             greater than every recorded one"
            ),
        ),
        (Reason::PromotionFailed("exec failed".into()), "promotion failed: exec failed".into()),
        (Reason::ServiceStarted, "service started; recording its identity".into()),
        (Reason::ServicePromoted, "service promoted".into()),
        (
            Reason::BreadcrumbNotOurs,
            "the breadcrumb is no longer ours; the lock may have been lost".into(),
        ),
        (Reason::ServiceExited("exit 1".into()), "the service exited: exit 1".into()),
        (
            Reason::StopFailed("pid 9 still runs".into()),
            "the service could not be stopped: pid 9 still runs".into(),
        ),
        (
            Reason::Unhealthy("tcp refused".into()),
            "the service is unhealthy: tcp refused".into(),
        ),
        (Reason::LeaseRenewed, "lease renewed".into()),
        (Reason::LockNotOurs, "the lock is no longer ours".into()),
        (Reason::RenewalFailed, "a lease renewal failed".into()),
        (Reason::RenewalLate, "a lease renewal is late".into()),
        (
            Reason::LeaseEnding,
            "the lease is ending without a renewal; demoting".into(),
        ),
        (Reason::ShuttingDown, "shutting down".into()),
    ];
    for (reason, expected) in cases {
        assert_eq!(reason.to_string(), expected, "{reason:?}");
        // A line continuation without its `\` leaves a run of spaces in the log line.
        assert!(!expected.contains("  "), "a run of spaces: {expected}");
    }
}
