//! Why the role changed: the reason each transition carries, in the words that the log,
//! `history` and `status` show.

use crate::record::{Epoch, Role};
use std::fmt;

/// Why the role changed (SPEC §4). `Display` gives the words for the log, `history` and
/// `status`; the driver picks a log level by the variant, never by the words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// No input explained the change: the words for the role it changed to.
    Unexplained(Role),

    /// The coordination session expired or closed.
    SessionLost,
    /// Our join created the lock.
    WonTheLock,
    /// Our join found the lock held.
    AnotherNodeHolds,
    /// The lock another node held was deleted.
    LockReleased,
    /// The lock came to us after this node stopped being able to take it.
    NoLongerEligible,
    /// Standby eligibility changed: the check's own words.
    Eligibility(String),
    /// The store lost data (SPEC §3a), in the store's words.
    StoreLostData(String),

    /// `control` was paused.
    Paused,
    /// `control` was resumed.
    Resumed,
    /// The state read after winning the lock found the cluster paused (§4.3a).
    FoundPaused,
    /// A switchover request passed its deadline (SPEC §8).
    SwitchoverLapsed { from: String },
    /// A switchover request moves the active away from this node while it serves.
    SwitchoverStepsUsDown,
    /// A switchover request moves the active away from this node while it promotes.
    SwitchoverMovesAway,
    /// A switchover request names another node.
    SwitchoverNamesAnother { to: String },
    /// SPEC §6a.2: the demote of a planned switchover failed while this node held the lock
    /// and its lease: it promotes itself again. The hook's last line.
    SwitchoverCalledOff(String),

    /// The `follow` hook failed (SPEC §6): its detail.
    FollowFailed(String),
    /// A `follow` hook succeeded after failing.
    FollowingAgain,
    /// Holding the lock, but the last follow failed (its words): no promotion.
    NotFollowing(String),
    /// Holding the lock, but not eligible any more: no promotion.
    NotEligible,
    /// Holding the lock, but the members read with the cluster's state show eligible
    /// standbys placed above this node (SPEC §6b; their ids and positions): it lets them
    /// take over first, once.
    BetterPlaced(String),
    /// Holding the lock while the `follow` hook runs: no promotion beside it.
    StillFollowing,
    /// Holding the lock with priority 0 and no switchover naming this node any more.
    Priority0NotNamed,

    /// The commit found the breadcrumb or `control` changed (§4.3c).
    StateChanged,
    /// Fencing another node's incarnation (§4.3b).
    FencingNode(String),
    /// Fencing whoever left an unreadable breadcrumb (SPEC §9).
    FencingUnknown,
    /// Fencing an earlier warden process of this node on this boot (SPEC §5).
    FencingOwnLeftovers,
    /// Fencing this process's own service, which an earlier stop left running.
    FencingOwnService,
    /// Fencing the service of a live member that outlived its stop (its member record's
    /// `leftover`).
    FencingStuckService(String),
    /// The fence chain succeeded: its summary.
    Fenced(String),
    /// A service that outlived its stop could not be fenced: this node's own (`node`
    /// `None`) or a live member's. No `fence --confirm` helps: its processes must end.
    StuckServiceNotFenced {
        summary: String,
        node: Option<String>,
    },
    /// The fence chain failed: its summary, and the node whose fence an operator may confirm
    /// (`None`: the breadcrumb was unreadable).
    FenceFailed {
        summary: String,
        target: Option<String>,
    },
    /// The lock's epoch is not above one a member has seen: the store lost data (SPEC §3a).
    EpochSeenBefore { epoch: Epoch, seen: Epoch },
    /// The lock's epoch is not above the breadcrumb's or history's (SPEC §3).
    StaleEpoch { epoch: Epoch, recorded: Epoch },
    /// The commit could not be sent, or the start failed: why.
    PromotionFailed(String),

    /// The service started; its identity is being recorded (§4.3d).
    ServiceStarted,
    /// The service's identity is recorded: active.
    ServicePromoted,
    /// A breadcrumb rewrite was refused: the lock may be gone.
    BreadcrumbNotOurs,
    /// The service ended by itself: how.
    ServiceExited(String),
    /// A stop could not verify the service gone: what is left.
    StopFailed(String),
    /// The promoted service's health check failed: its detail.
    Unhealthy(String),

    /// A renewal was acknowledged after the lease was in doubt.
    LeaseRenewed,
    /// A renewal or a delete showed the lock is not ours.
    LockNotOurs,
    /// A renewal's outcome is unknown.
    RenewalFailed,
    /// A renewal was not answered within a renewal interval.
    RenewalLate,
    /// The lease ends within the graceful stop: demoting.
    LeaseEnding,

    /// SIGTERM or SIGINT.
    ShuttingDown,
}

/// How a history entry of a called-off switchover begins (SPEC §6a.2); `failover` looks
/// for it.
pub const SWITCHOVER_CALLED_OFF: &str = "switchover called off: ";

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Unexplained(to) => f.write_str(match to {
                Role::Standby => "in the election",
                Role::Ineligible => "out of the election",
                Role::Active => "serving",
                Role::Neutral => "the lease is in doubt",
                Role::Demoting => "demoting",
                Role::Promoting => "promoting",
                Role::Fencing => "fencing",
            }),
            Reason::SessionLost => f.write_str("the coordination session was lost"),
            Reason::WonTheLock => f.write_str("won the lock"),
            Reason::AnotherNodeHolds => f.write_str("another node holds the lock"),
            Reason::LockReleased => f.write_str("the lock was released"),
            Reason::NoLongerEligible => f.write_str("holding the lock but no longer eligible"),
            Reason::Eligibility(detail) => f.write_str(detail),
            Reason::StoreLostData(why) => f.write_str(why),
            Reason::Paused => f.write_str("the cluster was paused"),
            Reason::Resumed => f.write_str("the cluster was resumed"),
            Reason::FoundPaused => f.write_str("the cluster is paused"),
            Reason::SwitchoverLapsed { from } => {
                write!(f, "the switchover request from {from} lapsed")
            }
            Reason::SwitchoverStepsUsDown => {
                f.write_str("a planned switchover asked this node to step down")
            }
            Reason::SwitchoverMovesAway => {
                f.write_str("a planned switchover moves the active away from this node")
            }
            Reason::SwitchoverNamesAnother { to } => {
                write!(f, "a planned switchover names {to} as the new active")
            }
            Reason::SwitchoverCalledOff(line) => write!(f, "{SWITCHOVER_CALLED_OFF}{line}"),
            Reason::FollowFailed(detail) => write!(f, "the follow hook failed: {detail}"),
            Reason::FollowingAgain => f.write_str("following the active again"),
            Reason::NotFollowing(why) => {
                write!(f, "{why}: not promoting until a follow succeeds")
            }
            Reason::NotEligible => f.write_str("no longer eligible: not promoting"),
            Reason::BetterPlaced(who) => write!(
                f,
                "standbys placed above this one as the members read now show them: {who}; \
                 letting them take over first"
            ),
            Reason::StillFollowing => {
                f.write_str("the follow hook is still running: not promoting beside it")
            }
            Reason::Priority0NotNamed => f.write_str(
                "priority 0 and no pending switchover names this node any more: not promoting",
            ),
            Reason::StateChanged => f.write_str("the breadcrumb or control changed; reading again"),
            Reason::FencingNode(node) => write!(f, "fencing the old active {node}"),
            Reason::FencingUnknown => f.write_str("fencing an unknown old active"),
            Reason::FencingOwnLeftovers => {
                f.write_str("fencing leftovers of an earlier warden process on this node")
            }
            Reason::FencingOwnService => {
                f.write_str("fencing this node's own service, which an earlier stop left running")
            }
            Reason::FencingStuckService(node) => write!(
                f,
                "fencing the service of {node}, which outlived its stop (its member record says \
                 so)"
            ),
            Reason::Fenced(summary) => write!(f, "fenced the old active: {summary}"),
            Reason::StuckServiceNotFenced { summary, node } => write!(
                f,
                "fencing failed, not promoting: {summary}. The service of {} outlived its stop: \
                 its processes are stuck in the kernel (a hung NFS or FUSE mount?). It ends \
                 when they do (bring the mount back) or when that host reboots; no node \
                 promotes beside it until then",
                node.as_deref().unwrap_or("this node")
            ),
            Reason::FenceFailed { summary, target } => {
                let confirm = match target {
                    Some(node) => format!("warden fence --confirm {node}"),
                    None => "warden fence --confirm --unreadable".to_string(),
                };
                write!(
                    f,
                    "fencing failed, not promoting: {summary}. If the old active is powered off \
                 or its service is certainly stopped, record that with `{confirm}`; otherwise \
                 fix the fence method"
                )
            }
            Reason::EpochSeenBefore { epoch, seen } => write!(
                f,
                "refusing to promote: the store lost data: the lock's epoch {epoch} is not above \
                 epoch {seen}, which a node of this cluster has seen (the store was wiped, \
                 restarted without persistence, or restored from an old backup or snapshot); \
                 no node promotes until you have checked that no old active still serves and \
                 run `warden init --force`, which sets the epoch counter above every epoch seen"
            ),
            Reason::StaleEpoch { epoch, recorded: n } => write!(
                f,
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
            Reason::PromotionFailed(why) => write!(f, "promotion failed: {why}"),
            Reason::ServiceStarted => f.write_str("service started; recording its identity"),
            Reason::ServicePromoted => f.write_str("service promoted"),
            Reason::BreadcrumbNotOurs => {
                f.write_str("the breadcrumb is no longer ours; the lock may have been lost")
            }
            Reason::ServiceExited(how) => write!(f, "the service exited: {how}"),
            Reason::StopFailed(detail) => write!(f, "the service could not be stopped: {detail}"),
            Reason::Unhealthy(detail) => write!(f, "the service is unhealthy: {detail}"),
            Reason::LeaseRenewed => f.write_str("lease renewed"),
            Reason::LockNotOurs => f.write_str("the lock is no longer ours"),
            Reason::RenewalFailed => f.write_str("a lease renewal failed"),
            Reason::RenewalLate => f.write_str("a lease renewal is late"),
            Reason::LeaseEnding => f.write_str("the lease is ending without a renewal; demoting"),
            Reason::ShuttingDown => f.write_str("shutting down"),
        }
    }
}
