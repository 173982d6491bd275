//! The elector's words with the driver: the events it is fed ([`Event`]) and the actions
//! it answers with ([`Action`]), and what they carry. Data only: the rules are in the
//! elector's other files.

use super::reason::Reason;
use crate::record::{
    BreadcrumbView, Epoch, JoinOutcome, MemberRecord, NodeRecord, Remembered, Role, Version,
    WriteOutcome,
};
use std::time::{Duration, Instant};

/// Identifies one action's result. Results with a ticket the elector no longer waits for
/// are ignored.
pub type Ticket = u64;

/// The `control` znode as the election sees it; the driver turns the wall-clock deadline
/// of a failover request into an instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControlView {
    pub paused: bool,
    pub failover: Option<FailoverView>,
}

/// A planned switchover request (SPEC §8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailoverView {
    pub from: String,
    pub to: Option<String>,
    /// The deadline as written in `control`: with `from` and `to` it names this request,
    /// so that clearing it never clears a newer one.
    pub deadline: String,
    /// Past this instant the request counts as withdrawn.
    pub lapses_at: Instant,
    /// The named node takes over even while ineligible (`failover --to NODE --force`).
    pub force: bool,
}

/// What step 3a of SPEC §4 reads after winning the lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterState {
    pub breadcrumb: BreadcrumbView,
    pub control: ControlView,
    pub control_version: Version,
    /// The epoch of the newest `history` entry, if any.
    pub newest_history_epoch: Option<Epoch>,
    /// The greatest epoch each node's history entries name.
    pub history_by_node: std::collections::BTreeMap<String, Epoch>,
    /// The greatest epoch of each node's `fence --confirm` entries in history.
    pub confirmed_by_node: std::collections::BTreeMap<String, Epoch>,
    /// Set only by [`Action::RestoreBreadcrumb`]: the remembered active's warden is alive
    /// and stepping or stepped down (see `Elector::forgotten_active`), so nothing was
    /// written back. About the record that action named (`Elector::alive_checked`).
    pub remembered_alive: bool,
    /// Set only by [`Action::RestoreOwnBreadcrumb`]: this node's own service, which
    /// outlived its stop, is gone now (killed and verified, or demoted by the hook), so
    /// nothing was written back.
    pub own_service_gone: bool,
    /// The greatest `epoch_seen` in the members' records (SPEC §3a).
    pub members_epoch_seen: Option<Epoch>,
    /// The live members' records, read alongside (SPEC §6b: their places now, fresher
    /// than the ones read once a session timeout).
    pub members: Vec<MemberRecord>,
    /// This node's own position as a standby, as its check last told it (its record
    /// among `members` may be a newer role's, without one).
    pub own_position: Option<u64>,
    /// The services that outlived their stop, as live members' records name them
    /// ([`crate::record::MemberRecord::leftover`]): each is fenced before a commit.
    pub member_leftovers: Vec<NodeRecord>,
    /// The actives live members saw commit in an earlier link with the store than their
    /// current one ([`crate::record::MemberRecord::remembers`]): each counts as this
    /// node's own memory does (`Elector::forgotten_active`).
    /// Each with the member's node id.
    pub member_memories: Vec<(String, Remembered)>,
}

/// What the fence chain should act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FenceOrder {
    /// Another node's incarnation: run the configured chain.
    Node(NodeRecord),
    /// The breadcrumb could not be read: run the chain with what is known (nothing).
    Unreadable,
    /// An older incarnation of this node on this very boot (SPEC §5): the `signal` method
    /// alone, on this host; in hooks mode its service is demoted first by hook, and the
    /// old warden pid is signalled either way.
    OwnLeftovers(NodeRecord),
    /// This very process's own service, which an earlier stop could not verify gone: only
    /// the service is fenced, never warden itself.
    OwnService(NodeRecord),
}

/// What the active's look at its own breadcrumb found ([`Action::KeepBreadcrumb`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeptBreadcrumb {
    /// It names this incarnation's service at this epoch, as last written.
    Named,
    /// The store had forgotten it, or the rewrite naming the service: written back. What
    /// was there instead.
    WrittenBack(String),
    /// It names a later epoch, or another incarnation at ours: the lock may be lost.
    Foreign(String),
    /// It could not be read, or not written back: why. Looked at again after the next
    /// renewal.
    Failed(String),
}

/// An input to the elector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A new session is open and our member record registered; `control` as read in it.
    /// `granted` is the session timeout the store granted, when it says (ZooKeeper clamps
    /// the requested one to its `minSessionTimeout`/`maxSessionTimeout`).
    SessionStarted {
        control: ControlView,
        granted: Option<Duration>,
    },
    /// The current session expired or closed; everything of it is void.
    SessionLost,
    /// The connection to the store was made again within the current session
    /// ([`StoreEvent::Reconnected`](crate::coord::StoreEvent::Reconnected)): the store may
    /// have restarted, and forgotten what this node saw before.
    Reconnected,
    Joined {
        ticket: Ticket,
        outcome: JoinOutcome,
    },
    /// The lock znode was deleted (watch), whoever held it.
    LockDeleted,
    StateRead {
        ticket: Ticket,
        result: Result<Box<ClusterState>, String>,
    },
    FenceDone {
        ticket: Ticket,
        fenced: bool,
        summary: String,
    },
    Committed {
        ticket: Ticket,
        outcome: WriteOutcome,
    },
    /// The commit was not sent: what the promotion needs could not be had (hooks mode: the
    /// pidfile does not name a running service), so this node must not promote.
    CommitAborted {
        ticket: Ticket,
        reason: String,
    },
    Renewed {
        ticket: Ticket,
        outcome: WriteOutcome,
    },
    ServiceStarted {
        ticket: Ticket,
    },
    /// The breadcrumb rewrite with the started service's identity (§4.3d) ended.
    ServiceRecorded {
        ticket: Ticket,
        outcome: WriteOutcome,
    },
    /// The breadcrumb rewrite before a start again under the same lock ended: the one that
    /// names no service process any more ([`Action::ForgetService`]), or the one that names
    /// the process pinned anew ([`Action::RepinService`]).
    ServiceForgotten {
        ticket: Ticket,
        outcome: WriteOutcome,
    },
    StartFailed {
        ticket: Ticket,
        reason: String,
        /// The start or the promote hook ran (it may have done part of its work); false
        /// when it was refused before anything ran (the lease checked right before it, a
        /// pinned process gone).
        ran: bool,
    },
    /// The service (or its promoted role) ended by itself.
    ServiceExited {
        reason: String,
    },
    ServiceStopped {
        ticket: Ticket,
        /// Verified down (possibly after SIGKILL).
        clean: bool,
        detail: String,
    },
    /// The service that outlived its stop has no process left any more (looked at while
    /// `own_leftovers` is set).
    OwnServiceGone,
    /// Hooks mode: the `demote` hook for `ticket` failed and nothing was killed, so the
    /// service runs on whole, in a role nobody knows; `promote` can put it back (SPEC
    /// §6a.2). Otherwise it counts as a stop that could not be verified.
    DemoteFailed {
        ticket: Ticket,
        detail: String,
        /// The hook's last line (its own words: why), when it wrote one.
        said: Option<String>,
    },
    Released {
        ticket: Ticket,
    },
    /// What [`Action::KeepBreadcrumb`] `ticket` found and did.
    BreadcrumbKept {
        ticket: Ticket,
        kept: KeptBreadcrumb,
    },
    /// The breadcrumb's version as [`Action::PeekBreadcrumb`] `ticket` read it (`None`:
    /// there is none).
    BreadcrumbPeeked {
        ticket: Ticket,
        version: Result<Option<Version>, String>,
    },
    /// Another node committed its promotion (SPEC §6 `follow`): its record, with the epoch.
    ActiveChanged {
        record: NodeRecord,
    },
    /// The active rewrote its breadcrumb within its epoch (SPEC §4.3d): its record as
    /// now written, with a later `rewrite`.
    ActiveRewritten {
        record: NodeRecord,
    },
    /// The breadcrumb of the active's epoch (same incarnation) was seen in this link
    /// ([`crate::coord::StoreEvent::Confirmed`]): the active's record.
    ActiveConfirmed {
        record: NodeRecord,
    },
    /// The member records as last read (SPEC §6 `priority`: who else could take a free
    /// lock).
    Members {
        members: Vec<MemberRecord>,
    },
    /// SPEC §6b: this node's position as its standby check now tells it (`None`: unknown),
    /// fresher than its record as the members were last read; the members as last read
    /// are placed again by it.
    OwnPosition {
        position: Option<u64>,
    },
    /// SPEC §6b herd-free succession: the member record of `id`, which this node watches
    /// instead of the lock ([`Elector::watched_above`]), changed or went (`None`: gone or
    /// unreadable).
    AboveChanged {
        id: String,
        record: Option<Box<MemberRecord>>,
        /// This node's position as its last check told it (the driver's), to place
        /// `record` against: its own record's, as the members last read, may be older.
        own_position: Option<u64>,
    },
    /// The `follow` hook for `ticket` ended.
    Followed {
        ticket: Ticket,
        ok: bool,
        detail: String,
    },
    /// Standby eligibility (spawn: `standby_command`; hooks: the service's health).
    EligibilityChanged {
        eligible: bool,
        detail: String,
    },
    /// Hooks mode with `health.standby_command` ([`ElectorConfig::standby_check`]): whether
    /// it passes. SPEC §6: the place for a replication lag check; a node is eligible only
    /// while it and the service's own check pass.
    StandbyCheckChanged {
        passing: bool,
        detail: String,
    },
    /// The promoted service's health (after `start_grace`).
    ServiceHealthChanged {
        healthy: bool,
        detail: String,
    },
    ControlChanged {
        control: ControlView,
    },
    /// SIGTERM or SIGINT.
    StopRequested,
}

/// Why [`Action::KillService`] kills the service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillCause {
    /// The lease ended with the service still up.
    LeaseEnd,
    /// SPEC §6: the demote hook of a forced demotion failed; the service, in a role nobody
    /// knows, must not keep serving.
    DemoteFailed,
}

/// Why the service is being stopped; decides what follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopCause {
    /// A voluntary demotion: unhealthy, failover, shutdown, failed promotion.
    Demote,
    /// The lease is ending, the session or the lock was lost: the service must go.
    Forced,
}

/// An order to the driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Open a new session: connect, create parents, register our member znode, read and
    /// watch `control`; then report [`Event::SessionStarted`].
    Connect,
    /// Create `lock` EPHEMERAL with our record; on NodeExists watch it (SPEC §4.2).
    Join { ticket: Ticket },
    /// Read `breadcrumb`, `control` and the newest history epoch, with versions (§4.3a).
    ReadState { ticket: Ticket },
    /// Run the fence chain against an incarnation (§5); never promote on failure.
    Fence { ticket: Ticket, order: FenceOrder },
    /// Write `record`, another node's active that the store forgot, back as the
    /// breadcrumb (created when `version` is `None`, else at it) while the lock is ours,
    /// then read the state again: reported as [`Event::StateRead`] (an error when the write
    /// did not land). See `Elector::forgotten_active`.
    RestoreBreadcrumb {
        ticket: Ticket,
        record: NodeRecord,
        version: Option<Version>,
        /// First look whether that warden lives and stepped down, and write nothing then
        /// (reported as [`ClusterState::remembered_alive`]): a forgotten commit. Not for
        /// a later rewrite of a breadcrumb the store keeps, which is fenced either way
        /// (the re-read would ask for the same write again, for ever: stop 38's review).
        check_alive: bool,
    },
    /// First fence our own service that outlived its stop, as [`FenceOrder::OwnService`]
    /// does: when it is gone, write nothing (reported as
    /// [`ClusterState::own_service_gone`]). Else write our own breadcrumb of `epoch` back,
    /// naming that service (as a rewrite later than any sent in that epoch), while the
    /// lock is ours (created when `version` is `None`, else at it). Then read the state
    /// again: reported as [`Event::StateRead`] (an error when the write did not land). The
    /// store forgot that breadcrumb, and whoever wins next must fence that service. See
    /// `Elector::own_leftovers_forgotten`.
    RestoreOwnBreadcrumb {
        ticket: Ticket,
        epoch: Epoch,
        version: Option<Version>,
    },
    /// One multi-op: check `lock`, check `control` at `control_version`, write the
    /// breadcrumb with `epoch` (set at `breadcrumb_version`, or create when `None`) (§4.3c).
    CommitPromotion {
        ticket: Ticket,
        epoch: Epoch,
        breadcrumb_version: Option<Version>,
        control_version: Version,
    },
    /// Start (or promote) the service with `WARDEN_EPOCH`, but only if the current time is
    /// still before `lease_valid_until`; else report it as a failed start.
    StartService {
        ticket: Ticket,
        epoch: Epoch,
        lease_valid_until: Instant,
    },
    /// Rewrite our breadcrumb with the running service's pid, group, start time and cgroup
    /// (§4.3d), as in the commit (checks `lock`). The node is not `active` until this is
    /// acknowledged: before it, fencing could not find the service.
    RecordService { ticket: Ticket, epoch: Epoch },
    /// The active, after a renewal: read the breadcrumb, and when the store forgot it (or
    /// the rewrite naming the service: it is missing, names an earlier epoch, another
    /// service of ours, or is unreadable), write our record of `epoch` back, naming the
    /// running service, while the lock is ours. Reported as [`Event::BreadcrumbKept`].
    /// Without it an active whose breadcrumb the store forgot serves on unnamed, and
    /// whoever wins after its warden dies fences nothing (the simulation's seed 965443).
    KeepBreadcrumb { ticket: Ticket, epoch: Epoch },
    /// Rewrite our breadcrumb to name no service process (only the cgroup a start again
    /// reuses), as in the commit (checks `lock`). Sent before the service starts again
    /// under the same lock: the identity of the earlier start, whose processes are gone,
    /// would let a fencer find "nothing left" while the new start runs (simulation seed
    /// 15674: a process group killed at the lease end, the service started again, warden
    /// killed before recording it, the new service's children left running).
    ForgetService { ticket: Ticket, epoch: Epoch },
    /// Hooks mode, a called-off switchover (SPEC §6a.2), before the `promote` hook runs
    /// again: if the process pinned at promotion is gone and `service.pidfile` names
    /// another running process (the service restarted during its demote), pin that one;
    /// then rewrite our breadcrumb to name the pinned process, as in the commit (checks
    /// `lock`, our own breadcrumb at this epoch). Reported as [`Event::ServiceForgotten`].
    /// Without it the promote is refused (the pin is gone) and the successor fences a
    /// breadcrumb that names a dead process, while the one that served runs on.
    RepinService { ticket: Ticket, epoch: Epoch },
    /// A lease renewal: multi-op check `lock`, set our member record, from the holding
    /// session. The lease extends from the elector's `now` when this was emitted.
    Renew { ticket: Ticket },
    /// Demote: stop the service (stop signal, `stop_timeout`, SIGKILL of the group), or run
    /// the `demote` hook.
    StopService { ticket: Ticket, cause: StopCause },
    /// The service must not serve on: kill it now (its process group, or in hooks mode the
    /// pinned pidfile process).
    KillService { cause: KillCause },
    /// Delete `lock` from the holding session, then drop the session. With `breadcrumb`,
    /// first compare-and-delete our breadcrumb (node id, incarnation, this epoch) while
    /// the lock is ours, so that nobody needs to fence us: in the lock's deletion where
    /// the store can (ZooKeeper: one multi-op, one write to wait for on a switchover's
    /// path, not two).
    Release {
        ticket: Ticket,
        breadcrumb: Option<Epoch>,
    },
    /// Read the breadcrumb's version (a node that sits out after a failed fence looks for
    /// a change, §4.8); report [`Event::BreadcrumbPeeked`].
    PeekBreadcrumb { ticket: Ticket },
    /// Clear the `failover` request in `control` once promoted: compare-and-delete, only
    /// if `control` still holds this very request; retried until acknowledged.
    ClearFailover { request: FailoverView },
    /// The role changed: log it, publish the member record, append to history (where
    /// `history` says so), notify.
    Transition {
        from: Role,
        to: Role,
        epoch: Option<Epoch>,
        reason: Reason,
        /// Whether the transition is one for `warden history`: every one but a standby's
        /// eligibility coming and going.
        history: bool,
        /// Its writes (the member record, the history entry) wait for
        /// [`Action::WriteHeld`] or the next transition: the one to `promoting`, whose
        /// commit's reads and write would otherwise queue behind them (ZooKeeper answers a
        /// session's requests in order, each write a disk sync on a busy machine).
        held: bool,
    },
    /// The commit was answered: write what the transition to `promoting` held back.
    WriteHeld,
    /// Run the `follow` hook: point this standby's service at `active` (SPEC §6).
    Follow { ticket: Ticket, active: NodeRecord },
    /// Read the member records now rather than at the next of their reads once a session
    /// timeout, and report them as [`Event::Members`] (SPEC §6b: the standby this node
    /// watched is gone or no longer placed above it).
    ReadMembers,
    /// Read the member record of `id` (the standby placed just above this node) once, and
    /// report it as [`Event::AboveChanged`] (`None` when gone or unreadable): SPEC §6b, a
    /// node about to let it try first for a free lock looks whether it still is above,
    /// its view being old (one request, not a read of every member: no herd).
    ReadAbove { id: String },
    /// Something an operator should read that is not a transition.
    Notice { warn: bool, message: String },
    /// Shut down with this exit code.
    Exit { code: i32 },
}
