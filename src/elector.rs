//! The election as a pure state machine (SPEC §4).
//!
//! This module does no I/O and reads no clock: every input is a [`Event`] passed to
//! [`Elector::handle`] with the current time, and [`Elector::handle_timeout`] is called when
//! the instant from [`Elector::poll_timeout`] has passed. After every input the driver drains
//! [`Elector::poll_action`] and carries each [`Action`] out; an action whose result matters
//! carries a [`Ticket`], and its result comes back as an event with the same ticket. A result
//! with any other ticket is stale (an older session, an abandoned step) and is ignored, which
//! is how "never act on the old session's events" holds.
//!
//! Three things move independently and are kept apart on purpose:
//! - the *phase*: where we are in the election (connecting, standby, holding the lock, ...);
//! - the *service*: down, starting, up or stopping;
//! - the *lease*: until when the service may run, from the send time of the last
//!   acknowledged renewal write.
//!
//! The role reported to operators is derived from the three after every input.

pub use crate::record::{BreadcrumbView, JoinOutcome, Version, WriteOutcome};
use crate::record::{Epoch, Health, HostIdentity, MemberRecord, NodeRecord, Role};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The longest rejoin delay after repeated failures (SPEC §4.8).
pub const MAX_REJOIN_DELAY: Duration = Duration::from_secs(30);
/// Stable standby or active for this long resets the rejoin back-off (SPEC §4.8).
pub const STABLE_RESET: Duration = Duration::from_secs(60);
/// The longest a switchover request can hold the cluster (`failover --timeout` allows
/// no more). A daemon counts it from the moment it first saw the request, on its own
/// clock, so a request written with a deadline far in the future (an operator host with a
/// skewed clock, a hand-edited znode) lapses anyway (SPEC §8, §9).
pub const MAX_SWITCHOVER: Duration = Duration::from_secs(3600);
/// Retry delay after a store call whose outcome is unknown (connection loss, timeout).
/// Short, because the client reconnects by itself within the session and a standby waits
/// on us meanwhile; long enough not to spin on a dead connection.
pub const RETRY_DELAY: Duration = Duration::from_millis(200);

/// How often a node looks again while the store has lost data (SPEC §3a): nothing
/// promotes until `warden init --force`, and the cluster should come back soon after it.
pub const LOST_DATA_RETRY: Duration = Duration::from_secs(1);

/// Identifies one action's result. Results with a ticket the elector no longer waits for
/// are ignored.
pub type Ticket = u64;

/// What the elector needs to know about itself.
#[derive(Clone, Debug)]
pub struct ElectorConfig {
    pub node_id: String,
    /// Random per warden process start; tells our own breadcrumb from an older process's.
    pub incarnation: String,
    pub session_timeout: Duration,
    pub rejoin_delay: Duration,
    /// How long a graceful demotion may take: `stop_timeout` (spawn) or `hook_timeout` (hooks).
    pub demote_grace: Duration,
    /// This warden's machine, boot and pid namespace: a breadcrumb of this node from
    /// anywhere else is another machine's, fenced by the whole chain (SPEC §5).
    pub host: HostIdentity,
    /// Hooks mode with a `follow` hook (SPEC §6): standbys follow each new active.
    pub follow: bool,
    /// `[election] priority` (SPEC §6): 0 never takes the lock by itself.
    pub priority: u16,
}

impl ElectorConfig {
    /// The lease is valid for half the session timeout after the send time of the last
    /// acknowledged renewal (SPEC §4 "The lease").
    pub fn lease(&self) -> Duration {
        self.session_timeout / 2
    }

    /// Renewals are sent every sixth of the session timeout.
    pub fn renewal_interval(&self) -> Duration {
        self.session_timeout / 6
    }
}

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
    /// The greatest `epoch_seen` in the members' records (SPEC §3a).
    pub members_epoch_seen: Option<Epoch>,
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
    /// The breadcrumb rewrite that names no service process any more (before a start
    /// again under the same lock) ended.
    ServiceForgotten {
        ticket: Ticket,
        outcome: WriteOutcome,
    },
    StartFailed {
        ticket: Ticket,
        reason: String,
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
    BreadcrumbDeleted {
        ticket: Ticket,
    },
    Released {
        ticket: Ticket,
    },
    /// Another node committed its promotion (SPEC §6 `follow`): its record, with the epoch.
    ActiveChanged {
        record: NodeRecord,
    },
    /// The member records as last read (SPEC §6 `priority`: who else could take a free
    /// lock).
    Members {
        members: Vec<MemberRecord>,
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
    /// Rewrite our breadcrumb to name no service process (only the cgroup a start again
    /// reuses), as in the commit (checks `lock`). Sent before the service starts again
    /// under the same lock: the identity of the earlier start, whose processes are gone,
    /// would let a fencer find "nothing left" while the new start runs (simulation seed
    /// 15674: a process group killed at the lease end, the service started again, warden
    /// killed before recording it, the new service's children left running).
    ForgetService { ticket: Ticket, epoch: Epoch },
    /// A lease renewal: multi-op check `lock`, set our member record, from the holding
    /// session. The lease extends from the elector's `now` when this was emitted.
    Renew { ticket: Ticket },
    /// Demote: stop the service (stop signal, `stop_timeout`, SIGKILL of the group), or run
    /// the `demote` hook.
    StopService { ticket: Ticket, cause: StopCause },
    /// The lease has ended with the service still up: SIGKILL its process group now.
    KillService,
    /// Compare-and-delete our breadcrumb (node id, incarnation, epoch) with a `lock` check.
    DeleteOwnBreadcrumb { ticket: Ticket, epoch: Epoch },
    /// Delete `lock` from the holding session, then drop the session.
    Release { ticket: Ticket },
    /// Clear the `failover` request in `control` once promoted: compare-and-delete, only
    /// if `control` still holds this very request; retried until acknowledged.
    ClearFailover { request: FailoverView },
    /// The role changed: log it, publish the member record, append to history, notify.
    Transition {
        from: Role,
        to: Role,
        epoch: Option<Epoch>,
        reason: String,
    },
    /// Run the `follow` hook: point this standby's service at `active` (SPEC §6).
    Follow { ticket: Ticket, active: NodeRecord },
    /// Something an operator should read that is not a transition.
    Notice { warn: bool, message: String },
    /// Shut down with this exit code.
    Exit { code: i32 },
}

/// Where the service is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Svc {
    Down,
    /// A start is in flight; a stop asked for meanwhile waits for it to report, so that
    /// what it starts is stopped, never leaked.
    Starting(Ticket, Option<StopCause>),
    Up,
    Stopping(Ticket, StopCause),
}

/// Why we leave the lock; decides the back-off and what the breadcrumb needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leave {
    /// The service turned unhealthy or exited while active: a failure (§4.8).
    ServiceFailed,
    /// Promotion failed: a failure; keep the breadcrumb so this node gets fenced (§4.3e).
    PromotionFailed,
    /// Fencing failed: a failure; nothing was started.
    FenceFailed,
    /// The epoch is not above the recorded one: a failure (the ensemble went back in time).
    StaleEpoch,
    /// The epoch is not above one a member has seen: the store lost data (SPEC §3a). Not
    /// this node's failure: look again soon, and promote once `init --force` has run.
    LostData,
    /// Paused, a switchover names another node, or not eligible any more: no failure.
    StandAside,
    /// A planned switchover away from us: stay out until the request ends.
    Cede,
    /// Shutdown.
    Stop,
}

impl Leave {
    fn is_failure(self) -> bool {
        matches!(
            self,
            Leave::ServiceFailed | Leave::PromotionFailed | Leave::FenceFailed | Leave::StaleEpoch
        )
    }
}

/// Steps while we hold the lock.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    /// §4.3a. `unknown_commit` is the send time of a commit whose outcome was unknown.
    Reading {
        ticket: Ticket,
        unknown_commit: Option<Instant>,
    },
    /// §4.3b. `target` names the fenced node for the operator's advice.
    Fencing {
        ticket: Ticket,
        target: Option<String>,
        breadcrumb_version: Option<Version>,
        control_version: Version,
    },
    /// §4.3c.
    Committing {
        ticket: Ticket,
        sent: Instant,
        breadcrumb_version: Option<Version>,
        control_version: Version,
    },
    /// The breadcrumb is ours; the service follows the lease (§4.3d, §4.4).
    Serving,
    /// Voluntary demotion in progress: stop, then delete the breadcrumb, then release.
    Leaving {
        why: Leave,
        deleting: Option<Ticket>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for a session.
    Connecting,
    /// In a session, not in the lock's queue.
    Idle,
    Joining {
        ticket: Ticket,
    },
    /// Another node holds the lock; we watch it.
    Standby,
    Holding {
        epoch: Epoch,
        step: Step,
    },
    /// `lock` delete and session drop in flight.
    Releasing {
        ticket: Ticket,
        why: Leave,
    },
    /// The lock vanished under us while we held it; demote, then join again.
    LockLost,
    Exited,
}

/// The lease: how long our service may run without a fresh acknowledged write.
#[derive(Clone, Debug, Default)]
struct Lease {
    /// Lease end; `None` before the first acknowledged write of this holding.
    end: Option<Instant>,
    /// When the next renewal is due.
    next_renewal: Option<Instant>,
    /// The renewal in flight and the instant it was sent.
    in_flight: Option<(Ticket, Instant)>,
    /// A renewal failed or is late: the lease is in doubt (role `neutral`).
    doubt: bool,
    /// SIGKILL was already ordered for this lease end.
    killed: bool,
}

/// The election state machine of one node. See the module doc.
#[derive(Debug)]
pub struct Elector {
    cfg: ElectorConfig,
    phase: Phase,
    svc: Svc,
    lease: Lease,
    role: Role,
    eligible: bool,
    service_healthy: bool,
    control: ControlView,
    /// Failures in a row (§4.8) and until when we stay out.
    failures: u32,
    out_until: Option<Instant>,
    /// Since when we are stable standby or active (§4.8 reset).
    stable_since: Option<Instant>,
    /// Retry a join or a read at this instant (after an unknown outcome).
    retry_at: Option<Instant>,
    /// A join's outcome was unknown: the lock may be ours, so we must find out even if we
    /// no longer want it.
    must_rejoin: bool,
    /// Our own service could not be verified stopped: treat our breadcrumb as needing the
    /// local fence before we promote again.
    own_leftovers: bool,
    /// The breadcrumb holds our record for the epoch we hold.
    breadcrumb_written: bool,
    /// `control` still holds a switchover request that lapsed: the next active clears it
    /// (SPEC §8), though the election already ignores it.
    lapsed_failover: Option<FailoverView>,
    /// The switchover request seen last (from, to, deadline) and when it was first seen:
    /// its deadline is bounded by [`MAX_SWITCHOVER`] from then.
    failover_seen: Option<(FailoverView, Instant)>,
    /// The session timeout the current session was granted, if it is below the configured
    /// one: every interval follows the smaller (SPEC §4 "The lease").
    granted: Option<Duration>,
    /// The started service's identity is in the breadcrumb (§4.3d); until then we are not
    /// `active`.
    service_recorded: bool,
    /// The breadcrumb rewrite in flight, or when to retry it (either kind).
    recording: Option<Ticket>,
    record_retry_at: Option<Instant>,
    /// The breadcrumb names the service of an earlier start under this lock (it was
    /// recorded), which may no longer be the one that runs: before another start, it is
    /// rewritten to name none.
    names_earlier_start: bool,
    /// The rewrite that names none, in flight.
    forgetting: Option<Ticket>,
    /// The greatest epoch this node has seen committed: its own, the holder's, the
    /// breadcrumb's, history's, other members' (SPEC §3a). Published in the member record;
    /// a new lock's epoch must be above it.
    epoch_seen: Option<Epoch>,
    /// SPEC §6 `follow`: the newest active of another node, the epoch followed last, the
    /// follow in flight, why the last one failed and when to try again.
    active: Option<NodeRecord>,
    followed: Option<Epoch>,
    following: Option<Ticket>,
    follow_failed: Option<String>,
    follow_retry_at: Option<Instant>,
    /// SPEC §6 `priority`: a healthy standby of higher priority is a member; this node
    /// waited for it once before the join now due.
    higher_rival: bool,
    rival_waited: bool,
    stopping: bool,
    /// The reason for the next transition.
    reason: String,
    next_ticket: Ticket,
    actions: VecDeque<Action>,
}

impl Elector {
    /// A new elector; it asks for a session at once.
    pub fn new(cfg: ElectorConfig, eligible: bool) -> Self {
        let mut e = Elector {
            cfg,
            phase: Phase::Connecting,
            svc: Svc::Down,
            lease: Lease::default(),
            role: Role::Ineligible,
            eligible,
            service_healthy: true,
            control: ControlView::default(),
            failures: 0,
            out_until: None,
            stable_since: None,
            retry_at: None,
            must_rejoin: false,
            own_leftovers: false,
            breadcrumb_written: false,
            lapsed_failover: None,
            failover_seen: None,
            granted: None,
            service_recorded: false,
            recording: None,
            record_retry_at: None,
            names_earlier_start: false,
            epoch_seen: None,
            active: None,
            followed: None,
            following: None,
            follow_failed: None,
            follow_retry_at: None,
            higher_rival: false,
            rival_waited: false,
            forgetting: None,
            stopping: false,
            reason: String::new(),
            next_ticket: 1,
            actions: VecDeque::new(),
        };
        e.actions.push_back(Action::Connect);
        e
    }

    /// The role as reported to operators.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The session timeout in force: the smaller of the configured one and the one the
    /// store granted to the current session (SPEC §4 "The lease").
    pub fn session_timeout(&self) -> Duration {
        self.granted.map_or(self.cfg.session_timeout, |g| {
            g.min(self.cfg.session_timeout)
        })
    }

    /// The lease: half the session timeout in force.
    fn lease_len(&self) -> Duration {
        self.session_timeout() / 2
    }

    /// Renewals are due every sixth of the session timeout in force.
    fn renewal_interval(&self) -> Duration {
        self.session_timeout() / 6
    }

    /// The epoch of the lock we hold, if any.
    /// The node a planned switchover hands over to while this node cedes to it (SPEC §6
    /// `WARDEN_SUCCESSOR_*`): `failover --to`'s target; `None` otherwise.
    pub fn successor(&self) -> Option<&str> {
        match self.phase {
            Phase::Holding {
                step: Step::Leaving {
                    why: Leave::Cede, ..
                },
                ..
            } => self.control.failover.as_ref()?.to.as_deref(),
            _ => None,
        }
    }

    /// SPEC §6: whether this standby follows the current active, for `status`: `None`
    /// without a `follow` hook or an active to follow.
    pub fn follow_state(&self) -> Option<String> {
        if !self.cfg.follow || matches!(self.phase, Phase::Holding { .. }) {
            return None;
        }
        let active = self.active.as_ref()?;
        Some(match (&self.follow_failed, self.followed) {
            (Some(why), _) => format!("failed: {why}"),
            (None, Some(e)) if Some(e) == active.epoch => {
                format!("current ({} epoch {e})", active.node_id)
            }
            _ => format!("pending ({})", active.node_id),
        })
    }

    /// SPEC §6 `WARDEN_ACTIVE_*`: the active this node should follow, when another node is
    /// known to be active: the newest promotion seen, of another node, newer than any lock
    /// this node holds. `None` otherwise (so in `promote`).
    pub fn known_active(&self) -> Option<&NodeRecord> {
        let active = self.active.as_ref()?;
        if active.epoch < self.epoch_seen {
            return None;
        }
        match self.phase {
            Phase::Holding { epoch, .. } if active.epoch <= Some(epoch) => None,
            _ => Some(active),
        }
    }

    /// The greatest epoch this node has seen committed (SPEC §3a `epoch_seen`).
    pub fn epoch_seen(&self) -> Option<Epoch> {
        self.epoch_seen
    }

    pub fn epoch(&self) -> Option<Epoch> {
        match self.phase {
            Phase::Holding { epoch, .. } => Some(epoch),
            _ => None,
        }
    }

    /// Whether the service is up and promoted under a valid lease.
    pub fn is_serving(&self) -> bool {
        self.role == Role::Active
    }

    /// The next action to carry out.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The next instant at which [`Elector::handle_timeout`] has work to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut consider = |i: Option<Instant>| {
            if let Some(i) = i {
                t = Some(t.map_or(i, |t| t.min(i)));
            }
        };
        consider(self.retry_at);
        consider(self.record_retry_at);
        consider(self.follow_retry_at);
        if matches!(self.phase, Phase::Idle) {
            consider(self.out_until);
        }
        if let Some(f) = &self.control.failover {
            consider(Some(f.lapses_at));
        }
        if let Phase::Holding { .. } = self.phase {
            consider(self.lease.next_renewal);
            if let Some((_, sent)) = self.lease.in_flight {
                // Only until it is declared late: an instant that handle_timeout does not
                // consume would spin the driver.
                if !self.lease.doubt {
                    consider(Some(sent + self.renewal_interval()));
                }
            }
        }
        if let Some(end) = self.lease.end {
            if self.lease.doubt && self.svc_running() {
                consider(Some(end.checked_sub(self.cfg.demote_grace).unwrap_or(end)));
            }
            if self.svc != Svc::Down && !self.lease.killed {
                consider(Some(end));
            }
        }
        t
    }

    /// Feeds one event.
    pub fn handle(&mut self, event: Event, now: Instant) {
        match event {
            Event::SessionStarted { control, granted } => {
                self.on_session_started(control, granted, now)
            }
            Event::SessionLost => self.on_session_lost(now),
            Event::Joined { ticket, outcome } => self.on_joined(ticket, outcome, now),
            Event::LockDeleted => self.on_lock_deleted(now),
            Event::StateRead { ticket, result } => self.on_state_read(ticket, result, now),
            Event::FenceDone {
                ticket,
                fenced,
                summary,
            } => self.on_fence_done(ticket, fenced, summary, now),
            Event::Committed { ticket, outcome } => self.on_committed(ticket, outcome, now),
            Event::CommitAborted { ticket, reason } => self.on_commit_aborted(ticket, reason),
            Event::Renewed { ticket, outcome } => self.on_renewed(ticket, outcome, now),
            Event::ServiceStarted { ticket } => self.on_service_started(ticket, now),
            Event::ServiceForgotten { ticket, outcome } => {
                self.on_service_forgotten(ticket, outcome, now)
            }
            Event::ServiceRecorded { ticket, outcome } => {
                self.on_service_recorded(ticket, outcome, now)
            }
            Event::StartFailed { ticket, reason } => self.on_start_failed(ticket, reason, now),
            Event::ServiceExited { reason } => self.on_service_exited(reason),
            Event::ServiceStopped {
                ticket,
                clean,
                detail,
            } => self.on_service_stopped(ticket, clean, detail, now),
            Event::BreadcrumbDeleted { ticket } => self.on_breadcrumb_deleted(ticket),
            Event::Released { ticket } => self.on_released(ticket, now),
            Event::ActiveChanged { record } => self.on_active_changed(record),
            Event::Followed { ticket, ok, detail } => self.on_followed(ticket, ok, detail, now),
            Event::Members { members } => self.on_members(&members),
            Event::EligibilityChanged { eligible, detail } => {
                self.eligible = eligible;
                self.reason = detail;
                if eligible {
                    self.try_join(now);
                }
            }
            Event::ServiceHealthChanged { healthy, detail } => {
                self.on_service_health(healthy, detail)
            }
            Event::ControlChanged { control } => self.on_control(control, now),
            Event::StopRequested => self.on_stop_requested(),
        }
        self.after_input(now);
    }

    /// Acts on every deadline that has passed; harmless when none has.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.retry_at.is_some_and(|t| now >= t) {
            self.retry_at = None;
            match self.phase {
                Phase::Idle => self.try_join(now),
                Phase::Holding {
                    step:
                        Step::Reading {
                            ticket,
                            unknown_commit,
                        },
                    epoch,
                } => {
                    // Re-issue the read under a fresh ticket.
                    let _ = ticket;
                    self.read_state(epoch, unknown_commit);
                }
                _ => {}
            }
        }
        if self.follow_retry_at.is_some_and(|t| now >= t) {
            self.follow_retry_at = None;
            self.follow_now();
        }
        if self.record_retry_at.is_some_and(|t| now >= t) {
            self.record_retry_at = None;
            self.record_service();
            self.start_if_due(now);
        }
        if let Some(f) = &self.control.failover {
            if now >= f.lapses_at {
                self.reason = format!("the switchover request from {} lapsed", f.from);
                self.lapsed_failover = self.control.failover.take();
                self.try_join(now);
            }
        }
        if matches!(self.phase, Phase::Idle) && self.out_until.is_some_and(|t| now >= t) {
            self.out_until = None;
            self.try_join(now);
        }
        self.lease_timers(now);
        self.after_input(now);
    }

    // ----- inputs --------------------------------------------------------------------

    fn on_session_started(
        &mut self,
        control: ControlView,
        granted: Option<Duration>,
        now: Instant,
    ) {
        if !matches!(self.phase, Phase::Connecting) {
            return;
        }
        self.granted = granted;
        if let Some(g) = granted.filter(|g| *g < self.cfg.session_timeout) {
            self.notice(
                true,
                format!(
                    "the coordination service granted a session timeout of {} instead of the \
                     configured {}; the lease and renewals follow the granted one (raise the \
                     server's maxSessionTimeout, or lower session_timeout to match)",
                    humantime::format_duration(g),
                    humantime::format_duration(self.cfg.session_timeout)
                ),
            );
        }
        if let Some(g) = granted.filter(|g| *g > self.cfg.session_timeout) {
            self.notice(
                true,
                format!(
                    "the coordination service granted a session timeout of {} instead of the \
                     configured {} (its minSessionTimeout): a dead node is noticed only after \
                     {0}; lower the ensemble's tickTime or minSessionTimeout, or raise \
                     session_timeout to match",
                    humantime::format_duration(g),
                    humantime::format_duration(self.cfg.session_timeout)
                ),
            );
        }
        self.control = self.bounded(control, now);
        self.phase = Phase::Idle;
        if self.stopping {
            self.exit_when_down();
            return;
        }
        self.try_join(now);
    }

    fn on_session_lost(&mut self, now: Instant) {
        if matches!(self.phase, Phase::Connecting | Phase::Exited) {
            return;
        }
        self.retry_at = None;
        self.must_rejoin = false;
        self.lease.in_flight = None;
        self.lease.next_renewal = None;
        self.breadcrumb_written = false;
        self.forget_record();
        let was_releasing = matches!(self.phase, Phase::Releasing { .. });
        if let Phase::Releasing { why, .. } = self.phase {
            // The session drop finished the release for us.
            self.after_release(why, now);
        } else {
            self.reason = "the coordination session was lost".into();
            self.force_stop();
        }
        if !matches!(self.phase, Phase::Exited) {
            self.phase = Phase::Connecting;
            self.actions.push_back(Action::Connect);
        }
        if was_releasing && self.stopping {
            self.exit_when_down();
        }
    }

    fn on_joined(&mut self, ticket: Ticket, outcome: JoinOutcome, now: Instant) {
        if self.phase != (Phase::Joining { ticket }) {
            return;
        }
        match outcome {
            JoinOutcome::Held { epoch } => {
                self.must_rejoin = false;
                self.phase = Phase::Holding {
                    epoch,
                    step: Step::Serving, // replaced at once below
                };
                self.breadcrumb_written = false;
                self.lease = Lease::default();
                if !self.may_join(now) || self.stopping {
                    self.reason = "holding the lock but no longer eligible".into();
                    self.leave(Leave::StandAside);
                } else if let Some(why) = self.takeover_refusal(now) {
                    self.reason = why;
                    self.leave(Leave::StandAside);
                } else {
                    self.reason = "won the lock".into();
                    self.read_state(epoch, None);
                }
            }
            JoinOutcome::Exists { epoch } => {
                self.must_rejoin = false;
                self.phase = Phase::Standby;
                self.epoch_seen = self.epoch_seen.max(epoch);
                self.reason = "another node holds the lock".into();
            }
            JoinOutcome::LostData(why) => {
                // No lock was taken: look again, quietly after the first time.
                self.must_rejoin = false;
                self.phase = Phase::Idle;
                self.retry_at = Some(now + LOST_DATA_RETRY);
                if self.reason != why {
                    self.notice(true, why.clone());
                    self.reason = why;
                }
            }
            JoinOutcome::Unknown => {
                // The create may have gone through: find out by joining again, even if we
                // no longer want the lock (a held lock we do not know of would block all).
                self.must_rejoin = true;
                self.phase = Phase::Idle;
                self.retry_at = Some(now + RETRY_DELAY);
            }
        }
    }

    fn on_lock_deleted(&mut self, now: Instant) {
        match self.phase {
            Phase::Standby => {
                self.phase = Phase::Idle;
                self.reason = "the lock was released".into();
                self.try_join(now);
            }
            Phase::Holding { .. } => self.lock_lost(now),
            _ => {}
        }
    }

    fn on_state_read(
        &mut self,
        ticket: Ticket,
        result: Result<Box<ClusterState>, String>,
        now: Instant,
    ) {
        let Phase::Holding {
            epoch,
            step:
                Step::Reading {
                    ticket: t,
                    unknown_commit,
                },
        } = self.phase
        else {
            return;
        };
        if t != ticket {
            return;
        }
        let state = match result {
            Ok(s) => s,
            Err(e) => {
                self.notice(
                    true,
                    format!("reading the cluster state failed ({e}); retrying"),
                );
                self.retry_at = Some(now + RETRY_DELAY);
                return;
            }
        };
        if self.stopping {
            // Only here to learn whether an unknown commit went through (see
            // `on_stop_requested`): if it did, delete our breadcrumb on the way out.
            let ours = matches!(&state.breadcrumb, BreadcrumbView::Record { record, .. }
                if self.is_ours(record) && record.epoch == Some(epoch));
            match unknown_commit {
                Some(sent) if ours => self.committed(epoch, sent, now),
                _ => self.leave(Leave::Stop),
            }
            return;
        }
        self.control = self.bounded(state.control.clone(), now);
        // 3a: paused, or a switchover that names another node.
        if state.control.paused {
            self.reason = "the cluster is paused".into();
            self.leave(Leave::StandAside);
            return;
        }
        if let Some(why) = self
            .switchover_excludes_us(now)
            .or_else(|| self.takeover_refusal(now))
        {
            self.reason = why;
            self.leave(Leave::StandAside);
            return;
        }
        let control_version = state.control_version;
        let breadcrumb_version = state.breadcrumb.version();
        match &state.breadcrumb {
            BreadcrumbView::Record { record, .. } if self.is_ours(record) => {
                let recorded = record.epoch.unwrap_or(0);
                if recorded == epoch {
                    if let Some(sent) = unknown_commit {
                        // Our unknown commit went through: the lease runs from its send time.
                        self.committed(epoch, sent, now);
                        return;
                    }
                } else if !self.epoch_is_new(epoch, record.epoch, &state) {
                    return;
                }
                if self.own_leftovers {
                    // Our own service outlived a stop: fence it, never this process.
                    self.start_fence(
                        epoch,
                        FenceOrder::OwnService(record.clone()),
                        breadcrumb_version,
                        control_version,
                    );
                    return;
                }
            }
            BreadcrumbView::Record { record, .. } => {
                // Another node, or an older incarnation of this one. Our node id alone
                // proves nothing (a cloned machine, a rescheduled pod): only a record from
                // this very boot is our own leftovers (SPEC §5).
                let order = if record.node_id == self.cfg.node_id && self.cfg.host.same_boot(record)
                {
                    FenceOrder::OwnLeftovers(record.clone())
                } else {
                    FenceOrder::Node(record.clone())
                };
                if !self.epoch_is_new(epoch, record.epoch, &state) {
                    return;
                }
                self.start_fence(epoch, order, breadcrumb_version, control_version);
                return;
            }
            BreadcrumbView::Unreadable { reason, .. } => {
                if !self.epoch_is_new(epoch, None, &state) {
                    return;
                }
                self.notice(
                    true,
                    format!(
                        "the breadcrumb is unreadable ({reason}); fencing an unknown old active \
                         with what is known"
                    ),
                );
                self.start_fence(
                    epoch,
                    FenceOrder::Unreadable,
                    breadcrumb_version,
                    control_version,
                );
                return;
            }
            BreadcrumbView::Absent => {
                if !self.epoch_is_new(epoch, None, &state) {
                    return;
                }
            }
        }
        self.commit(epoch, breadcrumb_version, control_version, now);
    }

    fn on_fence_done(&mut self, ticket: Ticket, fenced: bool, summary: String, now: Instant) {
        let Phase::Holding {
            epoch,
            step:
                Step::Fencing {
                    ticket: t,
                    ref target,
                    breadcrumb_version,
                    control_version,
                },
        } = self.phase
        else {
            return;
        };
        let confirm = match target {
            Some(node) => format!("warden fence --confirm {node}"),
            None => "warden fence --confirm --unreadable".to_string(),
        };
        if t != ticket {
            return;
        }
        if fenced {
            self.own_leftovers = false;
            self.reason = format!("fenced the old active: {summary}");
            self.commit(epoch, breadcrumb_version, control_version, now);
        } else {
            self.reason = format!(
                "fencing failed, not promoting: {summary}. If the old active is powered off \
                 or its service is certainly stopped, record that with `{confirm}`; otherwise \
                 fix the fence method"
            );
            self.leave(Leave::FenceFailed);
        }
    }

    fn on_committed(&mut self, ticket: Ticket, outcome: WriteOutcome, now: Instant) {
        let Phase::Holding {
            epoch,
            step: Step::Committing {
                ticket: t, sent, ..
            },
        } = self.phase
        else {
            return;
        };
        if t != ticket {
            return;
        }
        match outcome {
            WriteOutcome::Done => self.committed(epoch, sent, now),
            WriteOutcome::Conflict if self.stopping => self.leave(Leave::Stop),
            WriteOutcome::Conflict => {
                self.reason = "the breadcrumb or control changed; reading again".into();
                self.read_state(epoch, None);
            }
            WriteOutcome::Unknown => self.read_state(epoch, Some(sent)),
        }
    }

    fn on_commit_aborted(&mut self, ticket: Ticket, reason: String) {
        let Phase::Holding {
            step: Step::Committing { ticket: t, .. },
            ..
        } = self.phase
        else {
            return;
        };
        if t != ticket {
            return;
        }
        // Nothing was written or started: release and back off like a failed promotion.
        self.reason = format!("promotion failed: {reason}");
        self.leave(Leave::PromotionFailed);
    }

    fn on_renewed(&mut self, ticket: Ticket, outcome: WriteOutcome, now: Instant) {
        let Some((t, sent)) = self.lease.in_flight else {
            return;
        };
        if t != ticket || !matches!(self.phase, Phase::Holding { .. }) {
            return;
        }
        self.lease.in_flight = None;
        match outcome {
            WriteOutcome::Done => {
                let end = sent + self.lease_len();
                self.lease.end = Some(self.lease.end.map_or(end, |e| e.max(end)));
                if self.lease.doubt {
                    self.reason = "lease renewed".into();
                }
                self.lease.doubt = false;
                self.lease.killed = false;
                self.lease.next_renewal = Some(sent + self.renewal_interval());
                self.start_if_due(now);
            }
            WriteOutcome::Conflict => {
                self.reason = "the lock is no longer ours".into();
                self.lock_lost(now);
            }
            WriteOutcome::Unknown => {
                self.lease.doubt = true;
                self.reason = "a lease renewal failed".into();
                self.lease.next_renewal = Some(now + RETRY_DELAY);
            }
        }
    }

    fn on_service_started(&mut self, ticket: Ticket, now: Instant) {
        let Svc::Starting(t, pending) = self.svc else {
            return;
        };
        if t != ticket {
            return;
        }
        self.svc = Svc::Up;
        self.service_healthy = true;
        // A start that completes after the lease ended must not serve: stop it and kill
        // it at once (the kill ordered while it was still starting found nothing).
        if self.lease.end.is_some_and(|end| now >= end) {
            self.lease.doubt = true;
            self.lease.killed = false;
        }
        if let Some(cause) = pending {
            self.stop_service(cause);
            self.lease_timers(now);
            return;
        }
        if let Phase::Holding {
            step: Step::Serving,
            ..
        } = self.phase
        {
            self.reason = "service started; recording its identity".into();
            self.service_recorded = false;
            self.record_service();
            // A start that raced the lease end is stopped by the lease timers below.
            self.lease_timers(now);
        }
    }

    /// §4.3d: write the started service's identity into the breadcrumb. Until that is
    /// acknowledged the node is `promoting`, not `active`.
    fn record_service(&mut self) {
        let Phase::Holding {
            epoch,
            step: Step::Serving,
        } = self.phase
        else {
            return;
        };
        if self.svc != Svc::Up || self.service_recorded || self.recording.is_some() {
            return;
        }
        let ticket = self.ticket();
        self.recording = Some(ticket);
        self.record_retry_at = None;
        self.actions
            .push_back(Action::RecordService { ticket, epoch });
    }

    fn forget_record(&mut self) {
        self.service_recorded = false;
        self.recording = None;
        self.record_retry_at = None;
    }

    fn on_service_forgotten(&mut self, ticket: Ticket, outcome: WriteOutcome, now: Instant) {
        if self.forgetting != Some(ticket) {
            return;
        }
        self.forgetting = None;
        if !matches!(
            self.phase,
            Phase::Holding {
                step: Step::Serving,
                ..
            }
        ) {
            return;
        }
        match outcome {
            WriteOutcome::Done => {
                self.names_earlier_start = false;
                self.start_if_due(now);
            }
            WriteOutcome::Unknown => {
                // Retried while the lease holds; nothing starts until it is done.
                self.record_retry_at = Some(now + RETRY_DELAY);
            }
            WriteOutcome::Conflict => {
                self.reason =
                    "the breadcrumb is no longer ours; the lock may have been lost".into();
                self.lock_lost(now);
            }
        }
    }

    fn on_service_recorded(&mut self, ticket: Ticket, outcome: WriteOutcome, now: Instant) {
        if self.recording != Some(ticket) {
            return;
        }
        self.recording = None;
        if !matches!(
            self.phase,
            Phase::Holding {
                step: Step::Serving,
                ..
            }
        ) || self.svc != Svc::Up
        {
            return;
        }
        match outcome {
            WriteOutcome::Done => {
                self.service_recorded = true;
                self.names_earlier_start = true;
                self.reason = "service promoted".into();
                let pending = self
                    .control
                    .failover
                    .clone()
                    .or(self.lapsed_failover.take());
                if let Some(request) = pending {
                    self.actions.push_back(Action::ClearFailover { request });
                }
            }
            WriteOutcome::Unknown => {
                // Retried while the lease holds; the lease timers take the service down if
                // the store stays silent.
                self.record_retry_at = Some(now + RETRY_DELAY);
            }
            WriteOutcome::Conflict => {
                self.reason =
                    "the breadcrumb is no longer ours; the lock may have been lost".into();
                self.lock_lost(now);
            }
        }
    }

    fn on_start_failed(&mut self, ticket: Ticket, reason: String, now: Instant) {
        let Svc::Starting(t, pending) = self.svc else {
            return;
        };
        if t != ticket {
            return;
        }
        if let Some(cause) = pending {
            // A stop was asked for meanwhile: demote whatever the attempt left.
            self.svc = Svc::Up;
            self.stop_service(cause);
            return;
        }
        self.svc = Svc::Down;
        self.reason = format!("promotion failed: {reason}");
        if let Phase::Holding {
            step: Step::Serving,
            ..
        } = self.phase
        {
            if self.lease_left(now).is_none() {
                // The lease ran out before the start: wait for a renewal, as in §4.4.
                self.lease.doubt = true;
                return;
            }
            // §4.3e: demote (a promote hook may have done half its work), keep the
            // breadcrumb, release.
            self.svc = Svc::Up;
            self.leave(Leave::PromotionFailed);
        }
    }

    /// The service's main process exited. Its children may run on (a wrapper script, a
    /// master process that died): the service is down only once a stop found nothing of
    /// it left (SPEC §6), so every path here goes through a stop before the demotion
    /// counts as clean or anything starts again.
    fn on_service_exited(&mut self, reason: String) {
        match self.svc {
            Svc::Up | Svc::Starting(..) => {}
            _ => return,
        }
        self.service_recorded = false;
        let serving = matches!(
            self.phase,
            Phase::Holding {
                step: Step::Serving,
                ..
            }
        );
        if !serving {
            self.stop_service(StopCause::Demote);
            return;
        }
        if self.control.paused {
            self.notice(
                true,
                format!(
                    "the service exited ({reason}); the cluster is paused, so no failover: \
                     stopping what is left of it before it may start again"
                ),
            );
            self.stop_service(StopCause::Demote);
            return;
        }
        self.reason = format!("the service exited: {reason}");
        self.leave(Leave::ServiceFailed);
    }

    fn on_service_stopped(&mut self, ticket: Ticket, clean: bool, detail: String, now: Instant) {
        let Svc::Stopping(t, _) = self.svc else {
            return;
        };
        if t != ticket {
            return;
        }
        self.svc = Svc::Down;
        // A record still in flight names the service that just stopped: its answer must
        // not count for the next start (simulation seed 880).
        self.forget_record();
        self.lease.killed = false;
        if !clean {
            self.own_leftovers = true;
            self.notice(
                true,
                format!("the service could not be verified stopped: {detail}"),
            );
        }
        match self.phase.clone() {
            Phase::Holding {
                epoch,
                step: Step::Leaving { why, .. },
            } => {
                if clean && self.breadcrumb_written && why != Leave::PromotionFailed {
                    let ticket = self.ticket();
                    self.phase = Phase::Holding {
                        epoch,
                        step: Step::Leaving {
                            why,
                            deleting: Some(ticket),
                        },
                    };
                    self.actions
                        .push_back(Action::DeleteOwnBreadcrumb { ticket, epoch });
                } else {
                    self.release(why);
                }
            }
            Phase::Holding {
                step: Step::Serving,
                ..
            } => {
                if clean {
                    self.start_if_due(now);
                } else {
                    // Never a second copy beside one that would not die: give up the
                    // lock and keep the breadcrumb, so whoever wins fences it first.
                    self.reason = format!("the service could not be stopped: {detail}");
                    self.leave(Leave::ServiceFailed);
                }
            }
            Phase::LockLost => {
                self.phase = Phase::Idle;
                self.try_join(now);
            }
            _ => {
                if self.stopping {
                    self.exit_when_down();
                } else if matches!(self.phase, Phase::Idle) {
                    self.try_join(now);
                }
            }
        }
    }

    fn on_breadcrumb_deleted(&mut self, ticket: Ticket) {
        let Phase::Holding {
            step:
                Step::Leaving {
                    why,
                    deleting: Some(t),
                },
            ..
        } = self.phase
        else {
            return;
        };
        if t != ticket {
            return;
        }
        self.breadcrumb_written = false;
        self.release(why);
    }

    fn on_released(&mut self, ticket: Ticket, now: Instant) {
        let Phase::Releasing { ticket: t, why } = self.phase else {
            return;
        };
        if t != ticket {
            return;
        }
        self.after_release(why, now);
        if !matches!(self.phase, Phase::Exited) {
            self.phase = Phase::Connecting;
            self.actions.push_back(Action::Connect);
        }
    }

    fn on_service_health(&mut self, healthy: bool, detail: String) {
        self.service_healthy = healthy;
        if healthy || self.svc != Svc::Up {
            return;
        }
        if !matches!(
            self.phase,
            Phase::Holding {
                step: Step::Serving,
                ..
            }
        ) {
            return;
        }
        if self.control.paused {
            self.notice(
                true,
                format!(
                    "the service is unhealthy ({detail}); the cluster is paused, so no failover"
                ),
            );
            return;
        }
        self.reason = format!("the service is unhealthy: {detail}");
        self.leave(Leave::ServiceFailed);
    }

    fn on_control(&mut self, control: ControlView, now: Instant) {
        let was_paused = self.control.paused;
        self.control = self.bounded(control, now);
        // A fresh view: a request still in it, lapsed or not, is judged anew.
        self.lapsed_failover = None;
        if self.control.paused != was_paused {
            self.reason = if self.control.paused {
                "the cluster was paused".into()
            } else {
                "the cluster was resumed".into()
            };
        }
        match self.phase {
            Phase::Idle => self.try_join(now),
            Phase::Holding {
                step: Step::Serving,
                ..
            } => {
                let cede = !self.control.paused
                    && self
                        .control
                        .failover
                        .as_ref()
                        .is_some_and(|f| f.from == self.cfg.node_id && now < f.lapses_at);
                if cede {
                    self.reason = "a planned switchover asked this node to step down".into();
                    self.leave(Leave::Cede);
                }
            }
            _ => {}
        }
    }

    fn on_stop_requested(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        self.reason = "shutting down".into();
        match self.phase {
            Phase::Holding {
                step: Step::Leaving { .. },
                ..
            }
            | Phase::Releasing { .. } => {
                // Already leaving; the release ends in an exit now.
            }
            Phase::Holding {
                step: Step::Committing { .. },
                ..
            }
            | Phase::Holding {
                step:
                    Step::Reading {
                        unknown_commit: Some(_),
                        ..
                    },
                ..
            } => {
                // A commit whose answer is still out may have written our breadcrumb:
                // learn its outcome first, so that a clean stop deletes it and nobody
                // needs to fence this node (simulation seed 1744).
            }
            Phase::Holding { .. } => self.leave(Leave::Stop),
            Phase::Joining { .. } => {
                // The lock may be ours in a moment; dropping the session removes it.
                self.exit_when_down();
            }
            _ => self.exit_when_down(),
        }
    }

    /// A switchover request lapses at its deadline, but never later than
    /// [`MAX_SWITCHOVER`] after this node first saw it.
    fn bounded(&mut self, mut control: ControlView, now: Instant) -> ControlView {
        let Some(f) = control.failover.as_mut() else {
            self.failover_seen = None;
            return control;
        };
        let same = |a: &FailoverView, b: &FailoverView| {
            a.from == b.from && a.to == b.to && a.deadline == b.deadline
        };
        let first_seen = match &self.failover_seen {
            Some((seen, at)) if same(seen, f) => *at,
            _ => now,
        };
        self.failover_seen = Some((f.clone(), first_seen));
        let cap = first_seen + MAX_SWITCHOVER;
        if f.lapses_at > cap {
            f.lapses_at = cap;
        }
        control
    }

    // ----- steps ---------------------------------------------------------------------

    /// Whether this node may enter the election now (§4.1, §4.8, §8).
    fn may_join(&self, now: Instant) -> bool {
        ((self.eligible && self.follow_failed.is_none()) || self.forced_target(now))
            && !self.control.paused
            && self.out_until.is_none_or(|t| now >= t)
            && self.switchover_excludes_us(now).is_none()
            && self.svc == Svc::Down
            && !self.stopping
    }

    /// `failover --to <us> --force`: the operator's word that this node takes over even
    /// while ineligible.
    fn forced_target(&self, now: Instant) -> bool {
        self.control.failover.as_ref().is_some_and(|f| {
            f.force && now < f.lapses_at && f.to.as_deref() == Some(self.cfg.node_id.as_str())
        })
    }

    /// A pending switchover keeps us out when it asks us to step down or names another node.
    fn switchover_excludes_us(&self, now: Instant) -> Option<String> {
        let f = self.control.failover.as_ref()?;
        if now >= f.lapses_at {
            return None;
        }
        if f.from == self.cfg.node_id {
            return Some("a planned switchover moves the active away from this node".into());
        }
        match &f.to {
            Some(to) if *to != self.cfg.node_id => {
                Some(format!("a planned switchover names {to} as the new active"))
            }
            _ => None,
        }
    }

    fn try_join(&mut self, now: Instant) {
        if !matches!(self.phase, Phase::Idle) {
            return;
        }
        if self.must_rejoin && self.svc == Svc::Down && !self.stopping {
            // fall through: join to learn whether an earlier create made the lock ours
        } else if !self.may_join(now) {
            return;
        }
        if self.retry_at.is_some() && !self.must_rejoin {
            return;
        }
        if !self.must_rejoin && !self.named_target(now) {
            // SPEC §6: priority 0 never takes the lock by itself; a lower priority lets a
            // healthy higher one try first, once, for a renewal interval.
            if self.cfg.priority == 0 {
                return;
            }
            if self.higher_rival && !self.rival_waited {
                self.rival_waited = true;
                self.retry_at = Some(now + self.cfg.renewal_interval());
                return;
            }
        }
        self.retry_at = None;
        self.rival_waited = false;
        let ticket = self.ticket();
        self.phase = Phase::Joining { ticket };
        self.actions.push_back(Action::Join { ticket });
    }

    /// SPEC §6 `priority`: a healthy standby of higher priority among the members makes
    /// this node let it try first for a free lock; said once each time that changes.
    fn on_members(&mut self, members: &[MemberRecord]) {
        let rivals: Vec<&str> = members
            .iter()
            .filter(|m| {
                m.node.node_id != self.cfg.node_id
                    && m.role == Role::Standby
                    && m.health == Health::Healthy
                    && m.priority.unwrap_or(100) > self.cfg.priority
            })
            .map(|m| m.node.node_id.as_str())
            .collect();
        let higher = !rivals.is_empty();
        if higher && !self.higher_rival {
            self.notice(
                false,
                format!(
                    "standbys of higher priority than {}: {}; they try first when the lock is \
                     free",
                    self.cfg.priority,
                    rivals.join(", ")
                ),
            );
        }
        self.higher_rival = higher;
    }

    /// Why this node, holding the lock, must not promote although the cluster would let
    /// it (SPEC §6): its follow hook failed last, or it is not eligible, and no forced
    /// switchover names it; or it is of priority 0 and no switchover names it. Checked
    /// again once the lock is ours and once the state is read, since a request may lapse
    /// or a follow fail after the join went out (simulation seeds 1355 and 352).
    fn takeover_refusal(&self, now: Instant) -> Option<String> {
        if !self.forced_target(now) {
            if let Some(why) = &self.follow_failed {
                return Some(format!("{why}: not promoting until a follow succeeds"));
            }
            if !self.eligible {
                return Some("no longer eligible: not promoting".into());
            }
        }
        if self.cfg.priority == 0 && !self.named_target(now) {
            return Some(
                "priority 0 and no pending switchover names this node any more: not promoting"
                    .into(),
            );
        }
        None
    }

    /// A pending switchover request names this node.
    fn named_target(&self, now: Instant) -> bool {
        self.control.failover.as_ref().is_some_and(|f| {
            now < f.lapses_at && f.to.as_deref() == Some(self.cfg.node_id.as_str())
        })
    }

    fn read_state(&mut self, epoch: Epoch, unknown_commit: Option<Instant>) {
        let ticket = self.ticket();
        self.phase = Phase::Holding {
            epoch,
            step: Step::Reading {
                ticket,
                unknown_commit,
            },
        };
        self.actions.push_back(Action::ReadState { ticket });
    }

    fn start_fence(
        &mut self,
        epoch: Epoch,
        order: FenceOrder,
        breadcrumb_version: Option<Version>,
        control_version: Version,
    ) {
        let ticket = self.ticket();
        let target = match &order {
            FenceOrder::Node(r) | FenceOrder::OwnLeftovers(r) | FenceOrder::OwnService(r) => {
                Some(r.node_id.clone())
            }
            FenceOrder::Unreadable => None,
        };
        self.reason = match &order {
            FenceOrder::Node(r) => format!("fencing the old active {}", r.node_id),
            FenceOrder::Unreadable => "fencing an unknown old active".into(),
            FenceOrder::OwnLeftovers(_) => {
                "fencing leftovers of an earlier warden process on this node".into()
            }
            FenceOrder::OwnService(_) => {
                "fencing this node's own service, which an earlier stop left running".into()
            }
        };
        self.phase = Phase::Holding {
            epoch,
            step: Step::Fencing {
                ticket,
                target,
                breadcrumb_version,
                control_version,
            },
        };
        self.actions.push_back(Action::Fence { ticket, order });
    }

    /// The epoch must be above every earlier one (§3 "Epoch") and every one a member has
    /// seen (§3a); else refuse and say why. What was read is remembered as seen.
    fn epoch_is_new(
        &mut self,
        epoch: Epoch,
        breadcrumb: Option<Epoch>,
        state: &ClusterState,
    ) -> bool {
        let history = state.newest_history_epoch;
        let seen = self.epoch_seen.max(state.members_epoch_seen);
        self.epoch_seen = seen;
        if let Some(seen) = seen.filter(|&s| epoch <= s) {
            self.reason = format!(
                "refusing to promote: the store lost data: the lock's epoch {epoch} is not above                  epoch {seen}, which a node of this cluster has seen (the store was wiped,                  restarted without persistence, or restored from an old backup or snapshot);                  no node promotes until you have checked that no old active still serves and                  run `warden init --force`, which sets the epoch counter above every epoch seen"
            );
            self.leave(Leave::LostData);
            return false;
        }
        let newest = breadcrumb.max(history);
        self.epoch_seen = self.epoch_seen.max(newest);
        match newest {
            Some(n) if epoch <= n => {
                self.reason = format!(
                    "refusing to promote: the lock's epoch {epoch} is not above the recorded \
                     epoch {n} (in the breadcrumb or history); the ensemble may have been \
                     restored from an old snapshot, and an old active may still hold the newer \
                     epoch. Once you have checked that every old active is down, stop every \
                     warden of the cluster and run `warden init --force`: on your word, as \
                     with `fence --confirm`, it deletes the breadcrumb and control and moves \
                     a history with an epoch above the ensemble's zxid to history.old-<time>, \
                     so the next active gets a lower epoch than before (a resource that \
                     refuses stale epochs must be told)"
                );
                self.leave(Leave::StaleEpoch);
                false
            }
            _ => true,
        }
    }

    fn commit(
        &mut self,
        epoch: Epoch,
        breadcrumb_version: Option<Version>,
        control_version: Version,
        now: Instant,
    ) {
        let ticket = self.ticket();
        self.phase = Phase::Holding {
            epoch,
            step: Step::Committing {
                ticket,
                sent: now,
                breadcrumb_version,
                control_version,
            },
        };
        self.actions.push_back(Action::CommitPromotion {
            ticket,
            epoch,
            breadcrumb_version,
            control_version,
        });
    }

    /// The breadcrumb write was acknowledged: the lease starts at its send time (§4.3c).
    fn committed(&mut self, epoch: Epoch, sent: Instant, now: Instant) {
        self.phase = Phase::Holding {
            epoch,
            step: Step::Serving,
        };
        self.breadcrumb_written = true;
        self.epoch_seen = self.epoch_seen.max(Some(epoch));
        // The commit's record names no service process (the service is down).
        self.names_earlier_start = false;
        self.forgetting = None;
        self.lease = Lease {
            end: Some(sent + self.lease_len()),
            next_renewal: Some(sent + self.renewal_interval()),
            ..Lease::default()
        };
        if self.stopping {
            // Stopped while the commit was out: nothing started; delete the breadcrumb
            // we just wrote and release.
            self.leave(Leave::Stop);
            return;
        }
        self.start_if_due(now);
    }

    /// §4.3d: start the service if we serve, it is down, and the lease is valid.
    fn start_if_due(&mut self, now: Instant) {
        let Phase::Holding {
            epoch,
            step: Step::Serving,
        } = self.phase
        else {
            return;
        };
        // A lease in doubt waits for a renewal to succeed before anything starts again.
        if self.svc != Svc::Down || self.stopping || self.lease.doubt {
            return;
        }
        if self.control.paused && self.breadcrumb_written && self.role == Role::Active {
            return;
        }
        let Some(until) = self.lease_left(now) else {
            self.lease.doubt = true;
            return;
        };
        if self.names_earlier_start {
            // First the breadcrumb stops naming the earlier start's processes.
            if self.forgetting.is_none() && self.record_retry_at.is_none() {
                let ticket = self.ticket();
                self.forgetting = Some(ticket);
                self.actions
                    .push_back(Action::ForgetService { ticket, epoch });
            }
            return;
        }
        let ticket = self.ticket();
        self.svc = Svc::Starting(ticket, None);
        self.actions.push_back(Action::StartService {
            ticket,
            epoch,
            lease_valid_until: until,
        });
    }

    /// The lease end, if the lease is still valid: a start is allowed up to it.
    fn lease_left(&self, now: Instant) -> Option<Instant> {
        let end = self.lease.end?;
        (now < end).then_some(end)
    }

    /// §4.4: the service must be down by the lease end. Once a renewal failed or is late,
    /// demotion starts at lease end less the graceful stop (at once if that is past); at
    /// the lease end whatever remains is killed, renewal doubt or not.
    fn lease_timers(&mut self, now: Instant) {
        let Some(end) = self.lease.end else { return };
        if let Phase::Holding { .. } = self.phase {
            if let Some((_, sent)) = self.lease.in_flight {
                if now >= sent + self.renewal_interval() && !self.lease.doubt {
                    self.lease.doubt = true;
                    self.reason = "a lease renewal is late".into();
                }
            }
            if self.lease.in_flight.is_none() && self.lease.next_renewal.is_some_and(|t| now >= t) {
                let ticket = self.ticket();
                self.lease.in_flight = Some((ticket, now));
                self.lease.next_renewal = None;
                self.actions.push_back(Action::Renew { ticket });
            }
        }
        let demote_at = end.checked_sub(self.cfg.demote_grace).unwrap_or(end);
        if self.lease.doubt && now >= demote_at && self.svc_running() {
            self.reason = "the lease is ending without a renewal; demoting".into();
            self.stop_service(StopCause::Forced);
        }
        if now >= end && self.svc != Svc::Down && !self.lease.killed {
            self.lease.killed = true;
            self.notice(
                true,
                "the lease ended with the service still running; killing it".into(),
            );
            self.actions.push_back(Action::KillService);
        }
    }

    fn stop_service(&mut self, cause: StopCause) {
        match self.svc {
            Svc::Up => {
                let ticket = self.ticket();
                self.svc = Svc::Stopping(ticket, cause);
                self.actions
                    .push_back(Action::StopService { ticket, cause });
            }
            Svc::Starting(t, None) => self.svc = Svc::Starting(t, Some(cause)),
            Svc::Starting(_, Some(_)) | Svc::Stopping(..) | Svc::Down => {}
        }
    }

    /// The service is up or coming up, and nobody asked it to stop yet.
    fn svc_running(&self) -> bool {
        matches!(self.svc, Svc::Up | Svc::Starting(_, None))
    }

    /// Stop the service because the session or the lock is gone.
    fn force_stop(&mut self) {
        self.stop_service(StopCause::Forced);
    }

    /// The lock vanished or is not ours (§4.4): demote, then join again.
    fn lock_lost(&mut self, now: Instant) {
        self.reason = "the lock is no longer ours".into();
        self.forget_record();
        self.lease.in_flight = None;
        self.lease.next_renewal = None;
        self.breadcrumb_written = false;
        self.force_stop();
        if self.svc == Svc::Down {
            self.phase = Phase::Idle;
            self.try_join(now);
        } else {
            self.phase = Phase::LockLost;
        }
    }

    /// Leave the lock: demote if needed, delete our breadcrumb if the demotion was clean,
    /// release (§4.3e, §4.4, §4.5, §8).
    fn leave(&mut self, why: Leave) {
        let Phase::Holding { epoch, .. } = self.phase else {
            return;
        };
        self.phase = Phase::Holding {
            epoch,
            step: Step::Leaving {
                why,
                deleting: None,
            },
        };
        match self.svc {
            Svc::Up | Svc::Starting(..) => self.stop_service(StopCause::Demote),
            Svc::Stopping(..) => {}
            Svc::Down => {
                if self.breadcrumb_written && why != Leave::PromotionFailed && !self.own_leftovers {
                    let ticket = self.ticket();
                    self.phase = Phase::Holding {
                        epoch,
                        step: Step::Leaving {
                            why,
                            deleting: Some(ticket),
                        },
                    };
                    self.actions
                        .push_back(Action::DeleteOwnBreadcrumb { ticket, epoch });
                } else {
                    self.release(why);
                }
            }
        }
    }

    fn release(&mut self, why: Leave) {
        let ticket = self.ticket();
        self.lease = Lease::default();
        self.breadcrumb_written = false;
        self.forget_record();
        self.phase = Phase::Releasing { ticket, why };
        self.actions.push_back(Action::Release { ticket });
    }

    fn after_release(&mut self, why: Leave, now: Instant) {
        if why == Leave::LostData {
            self.out_until = Some(now + LOST_DATA_RETRY);
        }
        if why.is_failure() {
            self.failures = self.failures.saturating_add(1);
            let factor = 1u32 << (self.failures - 1).min(16);
            let delay = self
                .cfg
                .rejoin_delay
                .saturating_mul(factor)
                .min(MAX_REJOIN_DELAY);
            self.out_until = Some(now + delay);
            self.notice(
                false,
                format!(
                    "staying out of the election for {} ({} failure(s) in a row)",
                    humantime::format_duration(delay),
                    self.failures
                ),
            );
        }
        if self.stopping || why == Leave::Stop {
            self.stopping = true;
            self.exit_when_down();
        }
    }

    fn exit_when_down(&mut self) {
        if self.svc == Svc::Down && !matches!(self.phase, Phase::Exited) {
            self.phase = Phase::Exited;
            self.actions.push_back(Action::Exit { code: 0 });
        }
    }

    fn is_ours(&self, record: &NodeRecord) -> bool {
        record.node_id == self.cfg.node_id && record.incarnation == self.cfg.incarnation
    }

    /// SPEC §6: another node committed its promotion. A standby with a `follow` hook
    /// points its service at it (once per epoch; a newer active replaces one not yet
    /// followed).
    fn on_active_changed(&mut self, record: NodeRecord) {
        self.epoch_seen = self.epoch_seen.max(record.epoch);
        if self.is_ours(&record) || record.epoch.is_none() {
            return;
        }
        if record.epoch <= self.active.as_ref().and_then(|a| a.epoch) {
            return;
        }
        // Kept without a follow hook too: every hook is told the active (SPEC §6).
        self.active = Some(record);
        if self.cfg.follow {
            self.follow_now();
        }
    }

    /// Runs `follow` for the newest active, unless one runs, this node holds the lock, or
    /// it follows that epoch already.
    fn follow_now(&mut self) {
        let Some(active) = self.active.clone() else {
            return;
        };
        if self.following.is_some()
            || matches!(self.phase, Phase::Holding { .. } | Phase::Exited)
            || self.svc != Svc::Down
            || (self.followed == active.epoch && self.follow_failed.is_none())
        {
            return;
        }
        let ticket = self.ticket();
        self.following = Some(ticket);
        self.follow_retry_at = None;
        self.actions.push_back(Action::Follow { ticket, active });
    }

    fn on_followed(&mut self, ticket: Ticket, ok: bool, detail: String, now: Instant) {
        if self.following != Some(ticket) {
            return;
        }
        self.following = None;
        let epoch = self.active.as_ref().and_then(|a| a.epoch);
        if ok {
            self.followed = epoch;
            if self.follow_failed.take().is_some() {
                self.notice(false, format!("the follow hook succeeded: {detail}"));
                self.reason = "following the active again".into();
            }
            // A newer active may have come meanwhile; else this node may join again.
            self.follow_now();
            self.try_join(now);
        } else {
            // SPEC §6: ineligible until a follow succeeds, retried every rejoin_delay.
            let why = format!("the follow hook failed: {detail}");
            if self.follow_failed.as_deref() != Some(why.as_str()) {
                self.notice(true, why.clone());
            }
            self.reason = why.clone();
            self.follow_failed = Some(why);
            self.follow_retry_at = Some(now + self.cfg.rejoin_delay);
        }
    }

    fn notice(&mut self, warn: bool, message: String) {
        self.actions.push_back(Action::Notice { warn, message });
    }

    fn ticket(&mut self) -> Ticket {
        let t = self.next_ticket;
        self.next_ticket += 1;
        t
    }

    // ----- the reported role ---------------------------------------------------------

    fn compute_role(&self, now: Instant) -> Role {
        match &self.phase {
            // Priority 0: in the cluster, but never taking the lock by itself.
            // Or waiting for a standby of higher priority to try first.
            Phase::Idle
                if (self.cfg.priority == 0 || self.rival_waited)
                    && self.svc == Svc::Down
                    && self.may_join(now) =>
            {
                Role::Standby
            }
            Phase::Connecting | Phase::Idle | Phase::Exited => match self.svc {
                Svc::Stopping(..) | Svc::Starting(_, Some(_)) => Role::Demoting,
                _ => Role::Ineligible,
            },
            Phase::Joining { .. } => Role::Standby,
            Phase::Standby => {
                if self.may_join(now) {
                    Role::Standby
                } else {
                    Role::Ineligible
                }
            }
            Phase::Holding { step, .. } => match step {
                Step::Reading { .. } | Step::Committing { .. } => Role::Promoting,
                Step::Fencing { .. } => Role::Fencing,
                Step::Leaving { .. } => Role::Demoting,
                Step::Serving => {
                    if self.lease.doubt {
                        Role::Neutral
                    } else {
                        match self.svc {
                            Svc::Up if self.service_recorded => Role::Active,
                            Svc::Up | Svc::Starting(_, None) => Role::Promoting,
                            Svc::Starting(_, Some(_)) | Svc::Stopping(..) | Svc::Down => {
                                if self.control.paused {
                                    Role::Active
                                } else {
                                    Role::Neutral
                                }
                            }
                        }
                    }
                }
            },
            Phase::Releasing { .. } => Role::Demoting,
            Phase::LockLost => Role::Demoting,
        }
    }

    fn after_input(&mut self, now: Instant) {
        let role = self.compute_role(now);
        if role == self.role {
            return;
        }
        let from = self.role;
        // §4.8: stable standby or active for STABLE_RESET resets the back-off.
        if matches!(from, Role::Standby | Role::Active) {
            if self
                .stable_since
                .is_some_and(|s| now.duration_since(s) >= STABLE_RESET)
            {
                self.failures = 0;
            }
            self.stable_since = None;
        }
        if matches!(role, Role::Standby | Role::Active) {
            self.stable_since = Some(now);
        }
        self.role = role;
        // A reason explains one transition; the next one needs its own.
        let reason = if self.reason.is_empty() {
            default_reason(from, role).to_string()
        } else {
            std::mem::take(&mut self.reason)
        };
        self.actions.push_back(Action::Transition {
            from,
            to: role,
            epoch: self.epoch(),
            reason,
        });
    }
}

/// Words for a transition that no input explained.
fn default_reason(from: Role, to: Role) -> &'static str {
    match (from, to) {
        (_, Role::Standby) => "in the election",
        (_, Role::Ineligible) => "out of the election",
        (_, Role::Active) => "serving",
        (_, Role::Neutral) => "the lease is in doubt",
        (_, Role::Demoting) => "demoting",
        (_, Role::Promoting) => "promoting",
        (_, Role::Fencing) => "fencing",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(6); // session timeout: lease 3s, renewals 1s
    const GRACE: Duration = Duration::from_millis(500);

    fn cfg() -> ElectorConfig {
        ElectorConfig {
            node_id: "n1".into(),
            incarnation: "inc-1".into(),
            session_timeout: T,
            rejoin_delay: Duration::from_secs(1),
            demote_grace: GRACE,
            host: crate::record::HostIdentity {
                boot_id: "b00700000000000000000000000000aa".into(),
                machine_id: "3a000000000000000000000000000001".into(),
                pid_ns: Some(4026531836),
            },
            follow: false,
            priority: 100,
        }
    }

    fn record(node: &str, inc: &str, epoch: Option<Epoch>) -> NodeRecord {
        NodeRecord {
            node_id: node.into(),
            incarnation: inc.into(),
            epoch,
            ..Default::default()
        }
    }

    /// One elector and virtual time.
    struct H {
        e: Elector,
        now: Instant,
    }

    impl H {
        fn new() -> H {
            let now = Instant::now();
            let mut e = Elector::new(cfg(), true);
            assert_eq!(e.poll_action(), Some(Action::Connect));
            H { e, now }
        }

        fn drain(&mut self) -> Vec<Action> {
            std::iter::from_fn(|| self.e.poll_action()).collect()
        }

        /// Feeds an event; returns the actions, transitions left out.
        fn feed(&mut self, ev: Event) -> Vec<Action> {
            self.e.handle(ev, self.now);
            strip(self.drain())
        }

        fn feed_all(&mut self, ev: Event) -> Vec<Action> {
            self.e.handle(ev, self.now);
            self.drain()
        }

        /// Moves virtual time forward, firing every timeout on the way in order.
        fn advance(&mut self, d: Duration) -> Vec<Action> {
            let end = self.now + d;
            let mut out = Vec::new();
            while let Some(t) = self.e.poll_timeout().filter(|t| *t <= end) {
                self.now = t.max(self.now);
                self.e.handle_timeout(self.now);
                out.extend(self.drain());
            }
            self.now = end;
            self.e.handle_timeout(self.now);
            out.extend(self.drain());
            strip(out)
        }

        fn ticket_of(actions: &[Action]) -> Ticket {
            actions
                .iter()
                .find_map(|a| match a {
                    Action::Join { ticket }
                    | Action::ReadState { ticket }
                    | Action::Fence { ticket, .. }
                    | Action::CommitPromotion { ticket, .. }
                    | Action::StartService { ticket, .. }
                    | Action::Renew { ticket }
                    | Action::StopService { ticket, .. }
                    | Action::DeleteOwnBreadcrumb { ticket, .. }
                    | Action::Release { ticket } => Some(*ticket),
                    _ => None,
                })
                .expect("an action with a ticket")
        }

        fn ticket_of_record(actions: &[Action]) -> Ticket {
            actions
                .iter()
                .find_map(|a| match a {
                    Action::RecordService { ticket, .. } => Some(*ticket),
                    _ => None,
                })
                .expect("a RecordService action")
        }

        fn session(&mut self) -> Ticket {
            let a = self.feed(Event::SessionStarted {
                granted: None,
                control: ControlView::default(),
            });
            assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
            H::ticket_of(&a)
        }

        fn read(&mut self, ticket: Ticket, breadcrumb: BreadcrumbView) -> Vec<Action> {
            self.feed(Event::StateRead {
                ticket,
                result: Ok(Box::new(ClusterState {
                    breadcrumb,
                    control: ControlView::default(),
                    control_version: Version::new(0),
                    newest_history_epoch: None,
                    members_epoch_seen: None,
                })),
            })
        }

        /// Session, lock won with `epoch`, empty breadcrumb, commit acknowledged, service up.
        fn active(&mut self, epoch: Epoch) {
            let j = self.session();
            let a = self.feed(Event::Joined {
                ticket: j,
                outcome: JoinOutcome::Held { epoch },
            });
            let r = H::ticket_of(&a);
            let a = self.read(r, BreadcrumbView::Absent);
            let c = H::ticket_of(&a);
            let a = self.feed(Event::Committed {
                ticket: c,
                outcome: WriteOutcome::Done,
            });
            let s = H::ticket_of(&a);
            let a = self.feed(Event::ServiceStarted { ticket: s });
            self.recorded(&a);
            assert_eq!(self.e.role(), Role::Active);
        }

        /// Acknowledges the `RecordService` among `actions`; returns what follows.
        fn recorded(&mut self, actions: &[Action]) -> Vec<Action> {
            let ticket = actions
                .iter()
                .find_map(|a| match a {
                    Action::RecordService { ticket, .. } => Some(*ticket),
                    _ => None,
                })
                .expect("a RecordService action");
            self.feed(Event::ServiceRecorded {
                ticket,
                outcome: WriteOutcome::Done,
            })
        }
    }

    fn strip(actions: Vec<Action>) -> Vec<Action> {
        actions
            .into_iter()
            .filter(|a| !matches!(a, Action::Transition { .. } | Action::Notice { .. }))
            .collect()
    }

    fn has(actions: &[Action], f: impl Fn(&Action) -> bool) -> bool {
        actions.iter().any(f)
    }

    #[test]
    fn rule_4_1_joins_only_when_eligible() {
        let mut h = H::new();
        h.e = Elector::new(cfg(), false);
        h.drain();
        let a = h.feed(Event::SessionStarted {
            granted: None,
            control: ControlView::default(),
        });
        assert_eq!(a, vec![]);
        assert_eq!(h.e.role(), Role::Ineligible);
        let a = h.feed(Event::EligibilityChanged {
            eligible: true,
            detail: "healthy".into(),
        });
        assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
    }

    #[test]
    fn rule_4_1_no_join_while_paused() {
        let mut h = H::new();
        let a = h.feed(Event::SessionStarted {
            granted: None,
            control: ControlView {
                paused: true,
                failover: None,
            },
        });
        assert_eq!(a, vec![]);
        let a = h.feed(Event::ControlChanged {
            control: ControlView::default(),
        });
        assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
    }

    #[test]
    fn rule_4_2_node_exists_means_standby_and_a_deleted_lock_means_join_again() {
        let mut h = H::new();
        let j = h.session();
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Exists { epoch: None },
        });
        assert_eq!(a, vec![]);
        assert_eq!(h.e.role(), Role::Standby);
        let a = h.feed(Event::LockDeleted);
        assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
    }

    #[test]
    fn rule_4_2_unknown_create_outcome_is_resolved_by_joining_again_even_if_ineligible() {
        let mut h = H::new();
        let j = h.session();
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Unknown,
        });
        assert_eq!(a, vec![]);
        h.feed(Event::EligibilityChanged {
            eligible: false,
            detail: "standby check failed".into(),
        });
        let a = h.advance(RETRY_DELAY);
        let j2 = H::ticket_of(&a);
        assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
        // The earlier create did go through: the lock is ours, but we are not eligible.
        let a = h.feed(Event::Joined {
            ticket: j2,
            outcome: JoinOutcome::Held { epoch: 5 },
        });
        assert!(matches!(a.as_slice(), [Action::Release { .. }]), "{a:?}");
    }

    #[test]
    fn rule_4_2_results_with_stale_tickets_are_ignored() {
        let mut h = H::new();
        let j = h.session();
        h.feed(Event::SessionLost);
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 9 },
        });
        assert_eq!(a, vec![]);
        assert_eq!(h.e.epoch(), None);
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
        let j = h.session();
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 7 },
        });
        let r = H::ticket_of(&a);
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
                members_epoch_seen: None,
            })),
        });
        assert!(matches!(a.as_slice(), [Action::Release { .. }]), "{a:?}");
    }

    #[test]
    fn rule_4_3b_another_nodes_breadcrumb_is_fenced_before_commit() {
        let mut h = H::new();
        let j = h.session();
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 20 },
        });
        let r = H::ticket_of(&a);
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
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 20 },
        });
        let r = H::ticket_of(&a);
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
                if reason.contains("fence --confirm"))),
            "{all:?}"
        );
        let a = strip(all);
        let rel = H::ticket_of(&a);
        assert_eq!(a, vec![Action::Release { ticket: rel }]);
        let a = h.feed(Event::Released { ticket: rel });
        assert_eq!(a, vec![Action::Connect]);
        // Rejoin only after rejoin_delay, never a start in between.
        let a = h.feed(Event::SessionStarted {
            granted: None,
            control: ControlView::default(),
        });
        assert_eq!(a, vec![]);
        let a = h.advance(Duration::from_millis(999));
        assert_eq!(a, vec![]);
        let a = h.advance(Duration::from_millis(1));
        assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
    }

    #[test]
    fn rule_4_3b_an_older_incarnation_of_this_node_is_fenced_locally() {
        let mut h = H::new();
        let j = h.session();
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 20 },
        });
        let r = H::ticket_of(&a);
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
        let j = h.session();
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 20 },
        });
        let a = h.read(
            H::ticket_of(&a),
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
        let j = h.session();
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 20 },
        });
        let r = H::ticket_of(&a);
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

    #[test]
    fn rule_4_3c_conflict_reads_again_and_unknown_is_resolved_by_reading() {
        let mut h = H::new();
        let j = h.session();
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 30 },
        });
        let a = h.read(H::ticket_of(&a), BreadcrumbView::Absent);
        let c = H::ticket_of(&a);
        let a = h.feed(Event::Committed {
            ticket: c,
            outcome: WriteOutcome::Conflict,
        });
        assert!(matches!(a.as_slice(), [Action::ReadState { .. }]), "{a:?}");
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
    fn rule_3_epoch_not_above_the_recorded_one_refuses_to_promote() {
        let mut h = H::new();
        let j = h.session();
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 5 },
        });
        let r = H::ticket_of(&a);
        let all = h.feed_all(Event::StateRead {
            ticket: r,
            result: Ok(Box::new(ClusterState {
                breadcrumb: BreadcrumbView::Absent,
                control: ControlView::default(),
                control_version: Version::new(0),
                newest_history_epoch: Some(9),
                members_epoch_seen: None,
            })),
        });
        assert!(
            has(
                &all,
                |a| matches!(a, Action::Transition { reason, .. } if reason.contains("not above"))
            ),
            "{all:?}"
        );
        assert!(matches!(strip(all).as_slice(), [Action::Release { .. }]));
    }

    /// A standby with a `follow` hook, registered and standing by behind n2.
    fn following_standby() -> H {
        let mut e = Elector::new(
            ElectorConfig {
                follow: true,
                ..cfg()
            },
            true,
        );
        assert_eq!(e.poll_action(), Some(Action::Connect));
        let mut h = H {
            e,
            now: Instant::now(),
        };
        let j = h.session();
        h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Exists { epoch: None },
        });
        h
    }

    /// The ticket of the one action `actions` holds, a `Follow`.
    fn follow_ticket(actions: &[Action]) -> Ticket {
        match actions {
            [Action::Follow { ticket, .. }] => *ticket,
            other => panic!("expected one Follow, got {other:?}"),
        }
    }

    fn active_record(node: &str, epoch: Epoch) -> NodeRecord {
        NodeRecord {
            node_id: node.into(),
            host: "10.0.0.2".into(),
            port: Some(6379),
            incarnation: format!("inc-{node}"),
            epoch: Some(epoch),
            ..NodeRecord::default()
        }
    }

    #[test]
    fn rule_6_follow_runs_once_per_new_active_and_a_failure_makes_the_node_ineligible() {
        let mut h = following_standby();
        let a = h.feed(Event::ActiveChanged {
            record: active_record("n2", 7),
        });
        let t = match a.as_slice() {
            [Action::Follow { ticket, active }] if active.node_id == "n2" => *ticket,
            other => panic!("{other:?}"),
        };
        // The same epoch again: nothing more.
        assert!(h
            .feed(Event::ActiveChanged {
                record: active_record("n2", 7),
            })
            .is_empty());
        let all = h.feed_all(Event::Followed {
            ticket: t,
            ok: false,
            detail: "REPLICAOF refused".into(),
        });
        assert!(
            has(&all, |a| matches!(
                a,
                Action::Transition {
                    to: Role::Ineligible,
                    ..
                }
            )),
            "{all:?}"
        );
        assert!(h.e.follow_state().unwrap().starts_with("failed:"));
        // Retried after rejoin_delay, not before; a success makes it a standby again.
        h.now += Duration::from_millis(999);
        h.e.handle_timeout(h.now);
        assert!(h.drain().is_empty());
        h.now += Duration::from_millis(1);
        h.e.handle_timeout(h.now);
        let t = follow_ticket(&h.drain());
        let all = h.feed_all(Event::Followed {
            ticket: t,
            ok: true,
            detail: "following n2".into(),
        });
        assert!(
            has(&all, |a| matches!(
                a,
                Action::Transition {
                    to: Role::Standby,
                    ..
                }
            )),
            "{all:?}"
        );
        assert_eq!(h.e.follow_state().as_deref(), Some("current (n2 epoch 7)"));
        // A newer active is followed too.
        let a = h.feed(Event::ActiveChanged {
            record: active_record("n3", 9),
        });
        assert!(matches!(a.as_slice(), [Action::Follow { active, .. }] if active.node_id == "n3"));
    }

    #[test]
    fn rule_6_hooks_are_told_an_active_only_when_another_node_is_the_newest() {
        // A standby without a follow hook still knows whom to name.
        let mut h = H::new();
        let j = h.session();
        h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Exists { epoch: None },
        });
        assert!(h.e.known_active().is_none());
        h.feed(Event::ActiveChanged {
            record: active_record("n2", 7),
        });
        assert_eq!(h.e.known_active().map(|a| a.epoch), Some(Some(7)));

        // While this node holds the lock, an older active of another node is not named;
        // a newer one (the node it lost its lease to) is.
        let mut h = H::new();
        h.active(5);
        h.feed_all(Event::ActiveChanged {
            record: active_record("n2", 3),
        });
        assert!(h.e.known_active().is_none());
        h.feed_all(Event::ActiveChanged {
            record: active_record("n2", 9),
        });
        assert_eq!(h.e.known_active().map(|a| a.node_id.as_str()), Some("n2"));
    }

    #[test]
    fn rule_6_a_forced_switchover_to_an_ineligible_node_lets_it_join() {
        let mut h = following_standby();
        let t = follow_ticket(&h.feed(Event::ActiveChanged {
            record: active_record("n2", 7),
        }));
        h.feed(Event::Followed {
            ticket: t,
            ok: false,
            detail: "REPLICAOF refused".into(),
        });
        assert_eq!(h.e.role(), Role::Ineligible);
        let lapses_at = h.now + Duration::from_secs(30);
        let request = |force| ControlView {
            paused: false,
            failover: Some(FailoverView {
                from: "n2".into(),
                to: Some("n1".into()),
                deadline: "2026-01-01T00:00:00Z".into(),
                force,
                lapses_at,
            }),
        };
        // Without --force the request changes nothing; with it, n1 is in the election.
        h.feed(Event::ControlChanged {
            control: request(false),
        });
        assert_eq!(h.e.role(), Role::Ineligible);
        h.feed(Event::ControlChanged {
            control: request(true),
        });
        assert_eq!(h.e.role(), Role::Standby);
    }

    fn with_priority(priority: u16) -> H {
        let mut e = Elector::new(ElectorConfig { priority, ..cfg() }, true);
        assert_eq!(e.poll_action(), Some(Action::Connect));
        H {
            e,
            now: Instant::now(),
        }
    }

    #[test]
    fn rule_6_a_lower_priority_lets_a_healthy_higher_one_try_first_once() {
        let mut h = with_priority(50);
        h.feed(Event::Members {
            members: vec![MemberRecord {
                node: NodeRecord {
                    node_id: "n2".into(),
                    ..NodeRecord::default()
                },
                role: Role::Standby,
                health: Health::Healthy,
                session_timeout: None,
                containment: None,
                follow: None,
                priority: Some(900),
            }],
        });
        let a = h.feed(Event::SessionStarted {
            granted: None,
            control: ControlView::default(),
        });
        assert!(a.is_empty(), "joined before the higher one could: {a:?}");
        assert_eq!(h.e.role(), Role::Standby);
        h.now += T / 6 - Duration::from_millis(1);
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
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 7 },
        });
        let r = H::ticket_of(&a);
        h.now = lapses_at;
        let a = h.feed(Event::StateRead {
            ticket: r,
            result: Ok(Box::new(ClusterState {
                breadcrumb: BreadcrumbView::Absent,
                control: request,
                control_version: Version::new(1),
                newest_history_epoch: None,
                members_epoch_seen: None,
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
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 7 },
        });
        let r = H::ticket_of(&a);
        let a = h.feed(Event::StateRead {
            ticket: r,
            result: Ok(Box::new(ClusterState {
                breadcrumb: BreadcrumbView::Absent,
                control: request,
                control_version: Version::new(1),
                newest_history_epoch: None,
                members_epoch_seen: None,
            })),
        });
        assert!(
            matches!(a.as_slice(), [Action::CommitPromotion { epoch: 7, .. }]),
            "{a:?}"
        );
    }

    fn request_to_n1() -> FailoverView {
        FailoverView {
            from: "n2".into(),
            to: Some("n1".into()),
            deadline: "2026-01-01T00:00:30Z".into(),
            force: false,
            lapses_at: Instant::now(),
        }
    }

    #[test]
    fn rule_6_a_follow_that_fails_while_the_lock_is_taken_keeps_the_node_from_promoting() {
        // The follow of a new active is still running when that active goes and this
        // node wins the free lock; the follow then fails: its data may lack what that
        // active wrote, so it must not be promoted (SPEC §6).
        let mut h = following_standby();
        let t = follow_ticket(&h.feed(Event::ActiveChanged {
            record: active_record("n2", 7),
        }));
        let a = h.feed(Event::LockDeleted);
        let j = H::ticket_of(&a);
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 9 },
        });
        let r = H::ticket_of(&a);
        h.feed(Event::Followed {
            ticket: t,
            ok: false,
            detail: "REPLICAOF refused".into(),
        });
        let a = h.read(r, BreadcrumbView::Absent);
        assert!(matches!(a.as_slice(), [Action::Release { .. }]), "{a:?}");
    }

    #[test]
    fn rule_6_without_a_follow_hook_nothing_follows() {
        let mut h = H::new();
        let j = h.session();
        h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Exists { epoch: None },
        });
        assert!(h
            .feed(Event::ActiveChanged {
                record: active_record("n2", 7),
            })
            .is_empty());
        assert_eq!(h.e.follow_state(), None);
        assert_eq!(h.e.epoch_seen(), Some(7));
    }

    #[test]
    fn rule_3a_an_epoch_not_above_one_a_member_has_seen_is_lost_data() {
        let mut h = H::new();
        let j = h.session();
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 5 },
        });
        let all = h.feed_all(Event::StateRead {
            ticket: H::ticket_of(&a),
            result: Ok(Box::new(ClusterState {
                breadcrumb: BreadcrumbView::Absent,
                control: ControlView::default(),
                control_version: Version::new(0),
                newest_history_epoch: None,
                members_epoch_seen: Some(5),
            })),
        });
        assert!(
            has(&all, |a| matches!(a, Action::Transition { reason, .. }
                if reason.contains("lost data") && reason.contains("init --force"))),
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
        let j = h.session();
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 1 },
        });
        let a = h.read(H::ticket_of(&a), BreadcrumbView::Absent);
        let a = h.feed(Event::Committed {
            ticket: H::ticket_of(&a),
            outcome: WriteOutcome::Done,
        });
        let s = H::ticket_of(&a);
        let a = h.feed(Event::StartFailed {
            ticket: s,
            reason: "exec failed".into(),
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
    fn lease_renewals_every_sixth_and_the_lease_runs_from_the_send_time() {
        let mut h = H::new();
        h.active(3);
        let t0 = h.now;
        let a = h.advance(T / 6);
        let r = H::ticket_of(&a);
        assert_eq!(a, vec![Action::Renew { ticket: r }]);
        let sent = h.now;
        // The ack arrives late; the lease counts from the send time anyway.
        h.now += Duration::from_millis(400);
        assert_eq!(
            h.feed(Event::Renewed {
                ticket: r,
                outcome: WriteOutcome::Done
            }),
            vec![]
        );
        assert_eq!(h.e.role(), Role::Active);
        assert_eq!(h.e.lease.end, Some(sent + T / 2));
        assert!(sent > t0);
    }

    #[test]
    fn rule_4_4_late_renewal_means_neutral_demotion_before_and_kill_at_lease_end() {
        let mut h = H::new();
        h.active(3);
        let lease_end = h.e.lease.end.unwrap();
        // The first renewal is sent and never answered.
        let a = h.advance(T / 6);
        assert!(matches!(a.as_slice(), [Action::Renew { .. }]));
        // One interval later it is late: neutral.
        h.advance(T / 6);
        assert_eq!(h.e.role(), Role::Neutral);
        // Demotion starts at lease end less the graceful stop, and not before.
        let until_demote = lease_end - GRACE - h.now;
        assert_eq!(h.advance(until_demote - Duration::from_millis(1)), vec![]);
        let a = h.advance(Duration::from_millis(1));
        assert!(
            matches!(
                a.as_slice(),
                [Action::StopService {
                    cause: StopCause::Forced,
                    ..
                }]
            ),
            "{a:?}"
        );
        // The stop hangs: at the lease end the service is killed.
        let a = h.advance(GRACE);
        assert_eq!(a, vec![Action::KillService]);
        assert_eq!(h.now, lease_end);
    }

    #[test]
    fn rule_4_4_a_graceful_stop_longer_than_the_lease_serves_until_a_renewal_is_late() {
        // Hooks mode's defaults: hook_timeout 10s against a 5s lease.
        let mut h = H::new();
        h.e = Elector::new(
            ElectorConfig {
                demote_grace: T * 2,
                ..cfg()
            },
            true,
        );
        h.drain();
        h.active(3);
        // Renewals on time: serving on and on, no demotion.
        for _ in 0..10 {
            for a in h.advance(T / 6) {
                match a {
                    Action::Renew { ticket } => {
                        h.feed(Event::Renewed {
                            ticket,
                            outcome: WriteOutcome::Done,
                        });
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            assert_eq!(h.e.role(), Role::Active);
        }
        // A renewal goes unanswered: demotion starts as soon as it is late.
        let a = h.advance(T / 6);
        assert!(matches!(a.as_slice(), [Action::Renew { .. }]), "{a:?}");
        let a = h.advance(T / 6);
        assert!(
            matches!(
                a.as_slice(),
                [Action::StopService {
                    cause: StopCause::Forced,
                    ..
                }]
            ),
            "{a:?}"
        );
    }

    #[test]
    fn rule_4_4_a_later_renewal_from_the_same_session_promotes_again_without_fencing() {
        let mut h = H::new();
        h.active(3);
        let a = h.advance(T / 6);
        let r1 = H::ticket_of(&a);
        h.feed(Event::Renewed {
            ticket: r1,
            outcome: WriteOutcome::Unknown,
        });
        assert_eq!(h.e.role(), Role::Neutral);
        // Renewals keep failing until the demotion.
        let mut stop = None;
        for _ in 0..40 {
            for a in h.advance(RETRY_DELAY) {
                match a {
                    Action::Renew { ticket } => {
                        h.feed(Event::Renewed {
                            ticket,
                            outcome: WriteOutcome::Unknown,
                        });
                    }
                    Action::StopService { ticket, .. } => stop = Some(ticket),
                    other => panic!("unexpected {other:?}"),
                }
            }
            if stop.is_some() {
                break;
            }
        }
        let stop = stop.expect("demotion before the lease end");
        let a = h.feed(Event::ServiceStopped {
            ticket: stop,
            clean: true,
            detail: String::new(),
        });
        assert_eq!(a, vec![]);
        // ZooKeeper is back within the session: the next renewal succeeds.
        let a = h.advance(RETRY_DELAY);
        let r = H::ticket_of(&a);
        let a = h.feed(Event::Renewed {
            ticket: r,
            outcome: WriteOutcome::Done,
        });
        // The breadcrumb still names the stopped service's processes: it names none
        // before anything starts again, so no fencer can find "nothing left" of a start it
        // does not name.
        let f = match a.as_slice() {
            [Action::ForgetService { ticket, epoch: 3 }] => *ticket,
            other => panic!("the breadcrumb is rewritten first: {other:?}"),
        };
        let a = h.feed(Event::ServiceForgotten {
            ticket: f,
            outcome: WriteOutcome::Done,
        });
        assert!(
            matches!(a.as_slice(), [Action::StartService { epoch: 3, .. }]),
            "same epoch, no fence: {a:?}"
        );
    }

    /// Simulation seed 15674: the service is started again under the same lock only once
    /// the breadcrumb names no earlier start; an unknown outcome is retried under the lease
    /// and starts nothing, a conflict means the lock is lost.
    #[test]
    fn rule_4_3d_a_start_again_waits_until_the_breadcrumb_names_no_earlier_start() {
        let mut h = H::new();
        h.active(3);
        // The service exits while the cluster is paused: stopped, and started again after
        // the resume.
        h.feed(Event::ControlChanged {
            control: ControlView {
                paused: true,
                failover: None,
            },
        });
        let a = h.feed(Event::ServiceExited {
            reason: "exit 1".into(),
        });
        let stop = H::ticket_of(&a);
        let a = h.feed(Event::ServiceStopped {
            ticket: stop,
            clean: true,
            detail: String::new(),
        });
        assert_eq!(a, vec![], "paused: nothing starts again");
        h.feed(Event::ControlChanged {
            control: ControlView::default(),
        });
        // Resumed: the next renewal starts the service again, after the rewrite.
        let mut forget = None;
        for _ in 0..40 {
            for a in h.advance(RETRY_DELAY) {
                match a {
                    Action::Renew { ticket } => {
                        for a in h.feed(Event::Renewed {
                            ticket,
                            outcome: WriteOutcome::Done,
                        }) {
                            match a {
                                Action::ForgetService { ticket, epoch: 3 } => forget = Some(ticket),
                                Action::StartService { .. } => {
                                    panic!("started before the breadcrumb was rewritten")
                                }
                                _ => {}
                            }
                        }
                    }
                    Action::StartService { .. } => {
                        panic!("started before the breadcrumb was rewritten")
                    }
                    _ => {}
                }
            }
            if forget.is_some() {
                break;
            }
        }
        let f = forget.expect("the breadcrumb is rewritten after the resume");
        let a = h.feed(Event::ServiceForgotten {
            ticket: f,
            outcome: WriteOutcome::Unknown,
        });
        assert_eq!(a, vec![], "nothing starts on an unknown outcome");
        let a = h.advance(RETRY_DELAY);
        let f = a
            .iter()
            .find_map(|a| match a {
                Action::ForgetService { ticket, .. } => Some(*ticket),
                _ => None,
            })
            .unwrap_or_else(|| panic!("retried: {a:?}"));
        assert!(!a.iter().any(|a| matches!(a, Action::StartService { .. })));
        let a = h.feed(Event::ServiceForgotten {
            ticket: f,
            outcome: WriteOutcome::Conflict,
        });
        assert!(
            !a.iter().any(|a| matches!(a, Action::StartService { .. })),
            "the lock may be lost: {a:?}"
        );
        assert_ne!(h.e.role(), Role::Active);
    }

    #[test]
    fn rule_4_4_session_lost_while_active_demotes_and_opens_a_new_session() {
        let mut h = H::new();
        h.active(3);
        let a = h.feed(Event::SessionLost);
        let s = H::ticket_of(&a);
        assert_eq!(
            a,
            vec![
                Action::StopService {
                    ticket: s,
                    cause: StopCause::Forced
                },
                Action::Connect
            ]
        );
        // A new session while the old service still stops: no join yet.
        assert_eq!(
            h.feed(Event::SessionStarted {
                granted: None,
                control: ControlView::default()
            }),
            vec![]
        );
        let a = h.feed(Event::ServiceStopped {
            ticket: s,
            clean: true,
            detail: String::new(),
        });
        assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
    }

    #[test]
    fn rule_4_4_unhealthy_active_demotes_deletes_its_breadcrumb_and_releases() {
        let mut h = H::new();
        h.active(3);
        let a = h.feed(Event::ServiceHealthChanged {
            healthy: false,
            detail: "tcp refused".into(),
        });
        let s = H::ticket_of(&a);
        assert_eq!(
            a,
            vec![Action::StopService {
                ticket: s,
                cause: StopCause::Demote
            }]
        );
        assert_eq!(h.e.role(), Role::Demoting);
        let a = h.feed(Event::ServiceStopped {
            ticket: s,
            clean: true,
            detail: String::new(),
        });
        let d = H::ticket_of(&a);
        assert_eq!(
            a,
            vec![Action::DeleteOwnBreadcrumb {
                ticket: d,
                epoch: 3
            }]
        );
        let a = h.feed(Event::BreadcrumbDeleted { ticket: d });
        assert!(matches!(a.as_slice(), [Action::Release { .. }]));
    }

    #[test]
    fn rule_4_4_an_unclean_demotion_keeps_the_breadcrumb() {
        let mut h = H::new();
        h.active(3);
        let a = h.feed(Event::ServiceExited {
            reason: "exit 1".into(),
        });
        // Its main process is gone, but children may run on: stop them first.
        assert!(
            matches!(
                a.as_slice(),
                [Action::StopService {
                    cause: StopCause::Demote,
                    ..
                }]
            ),
            "{a:?}"
        );
        let a = h.feed(Event::ServiceStopped {
            ticket: H::ticket_of(&a),
            clean: false,
            detail: "pid 12 survived SIGKILL".into(),
        });
        assert!(
            matches!(a.as_slice(), [Action::Release { .. }]),
            "leftovers keep the breadcrumb: {a:?}"
        );

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
        assert!(matches!(a.as_slice(), [Action::Release { .. }]), "{a:?}");
    }

    #[test]
    fn rule_4_4_lock_gone_while_active_demotes_and_joins_again() {
        let mut h = H::new();
        h.active(3);
        let a = h.feed(Event::LockDeleted);
        let s = H::ticket_of(&a);
        assert!(matches!(
            a.as_slice(),
            [Action::StopService {
                cause: StopCause::Forced,
                ..
            }]
        ));
        let a = h.feed(Event::ServiceStopped {
            ticket: s,
            clean: true,
            detail: String::new(),
        });
        assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
    }

    #[test]
    fn rule_4_5_stop_hands_over_cleanly_and_exits_zero() {
        let mut h = H::new();
        h.active(3);
        let a = h.feed(Event::StopRequested);
        let s = H::ticket_of(&a);
        let a = h.feed(Event::ServiceStopped {
            ticket: s,
            clean: true,
            detail: String::new(),
        });
        let d = H::ticket_of(&a);
        let a = h.feed(Event::BreadcrumbDeleted { ticket: d });
        let r = H::ticket_of(&a);
        assert_eq!(a, vec![Action::Release { ticket: r }]);
        let a = h.feed(Event::Released { ticket: r });
        assert_eq!(a, vec![Action::Exit { code: 0 }]);
    }

    #[test]
    fn rule_4_5_stop_as_standby_exits_at_once() {
        let mut h = H::new();
        let j = h.session();
        h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Exists { epoch: None },
        });
        assert_eq!(h.feed(Event::StopRequested), vec![Action::Exit { code: 0 }]);
    }

    #[test]
    fn rule_4_7_never_a_second_start_while_the_service_runs() {
        let mut h = H::new();
        h.active(3);
        // Renewals acknowledged over and over never start a second copy.
        for _ in 0..20 {
            for a in h.advance(T / 6) {
                match a {
                    Action::Renew { ticket } => {
                        let out = h.feed(Event::Renewed {
                            ticket,
                            outcome: WriteOutcome::Done,
                        });
                        assert!(!has(&out, |a| matches!(a, Action::StartService { .. })));
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
    }

    #[test]
    fn rule_4_8_rejoin_delay_doubles_up_to_30s_and_resets_after_60s_stable() {
        let mut h = H::new();
        let mut delays = Vec::new();
        for _ in 0..7 {
            // Win, then fail to fence.
            let j = match h.e.phase {
                Phase::Idle => {
                    let a = h.advance(Duration::from_secs(60));
                    H::ticket_of(&a)
                }
                _ => h.session(),
            };
            let a = h.feed(Event::Joined {
                ticket: j,
                outcome: JoinOutcome::Held { epoch: 100 },
            });
            let a = h.read(
                H::ticket_of(&a),
                BreadcrumbView::Record {
                    record: record("n2", "x", Some(1)),
                    version: Version::new(0),
                },
            );
            let a = h.feed(Event::FenceDone {
                ticket: H::ticket_of(&a),
                fenced: false,
                summary: "no".into(),
            });
            h.feed(Event::Released {
                ticket: H::ticket_of(&a),
            });
            h.feed(Event::SessionStarted {
                granted: None,
                control: ControlView::default(),
            });
            delays.push(h.e.out_until.unwrap() - h.now);
        }
        let secs: Vec<u64> = delays.iter().map(|d| d.as_secs()).collect();
        assert_eq!(secs, vec![1, 2, 4, 8, 16, 30, 30]);

        // 60s of stable standby resets the count.
        let a = h.advance(Duration::from_secs(30));
        let j = H::ticket_of(&a);
        h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Exists { epoch: None },
        });
        h.advance(STABLE_RESET);
        let a = h.feed(Event::LockDeleted);
        let a = h.feed(Event::Joined {
            ticket: H::ticket_of(&a),
            outcome: JoinOutcome::Held { epoch: 200 },
        });
        let a = h.read(
            H::ticket_of(&a),
            BreadcrumbView::Record {
                record: record("n2", "x", Some(1)),
                version: Version::new(0),
            },
        );
        let a = h.feed(Event::FenceDone {
            ticket: H::ticket_of(&a),
            fenced: false,
            summary: "no".into(),
        });
        h.feed(Event::Released {
            ticket: H::ticket_of(&a),
        });
        assert_eq!(h.e.out_until.unwrap() - h.now, Duration::from_secs(1));
    }

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
    fn rule_6_a_service_whose_main_process_exited_is_stopped_before_the_breadcrumb_goes() {
        let mut h = H::new();
        h.active(3);
        let a = h.feed(Event::ServiceExited {
            reason: "exit 0".into(),
        });
        let st = H::ticket_of(&a);
        assert!(
            matches!(a.as_slice(), [Action::StopService { .. }]),
            "{a:?}"
        );
        let a = h.feed(Event::ServiceStopped {
            ticket: st,
            clean: true,
            detail: String::new(),
        });
        assert!(
            matches!(a.as_slice(), [Action::DeleteOwnBreadcrumb { epoch: 3, .. }]),
            "{a:?}"
        );
    }

    #[test]
    fn rule_5_our_own_service_left_by_a_stuck_stop_is_fenced_without_fencing_ourselves() {
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
        let rel = H::ticket_of(&a);
        h.feed(Event::Released { ticket: rel });
        h.advance(Duration::from_secs(31));
        let j = h.session();
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 9 },
        });
        let mine = record("n1", "inc-1", Some(3));
        let a = h.read(
            H::ticket_of(&a),
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

    #[test]
    fn rule_4_3d_not_active_until_the_service_identity_is_recorded() {
        let mut h = H::new();
        let s = starting(&mut h, 5);
        let a = h.feed(Event::ServiceStarted { ticket: s });
        let r = H::ticket_of_record(&a);
        assert_eq!(h.e.role(), Role::Promoting);
        // No answer: retried after RETRY_DELAY, still promoting.
        let a = h.feed(Event::ServiceRecorded {
            ticket: r,
            outcome: WriteOutcome::Unknown,
        });
        assert_eq!(a, vec![]);
        let a = h.advance(RETRY_DELAY);
        let r2 = H::ticket_of_record(&a);
        assert_ne!(r, r2);
        assert_eq!(h.e.role(), Role::Promoting);
        // A stale answer to the first try changes nothing.
        h.feed(Event::ServiceRecorded {
            ticket: r,
            outcome: WriteOutcome::Done,
        });
        assert_eq!(h.e.role(), Role::Promoting);
        h.feed(Event::ServiceRecorded {
            ticket: r2,
            outcome: WriteOutcome::Done,
        });
        assert_eq!(h.e.role(), Role::Active);
    }

    #[test]
    fn rule_4_3e_a_promotion_that_cannot_name_its_service_releases_without_writing() {
        let mut h = H::new();
        let j = h.session();
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 6 },
        });
        let a = h.read(H::ticket_of(&a), BreadcrumbView::Absent);
        let a = h.feed(Event::CommitAborted {
            ticket: H::ticket_of(&a),
            reason: "the pidfile /run/x.pid holds \"garbage\"".into(),
        });
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
    fn rule_4_3d_a_late_record_of_a_stopped_service_never_makes_the_next_copy_active() {
        // Simulation seed 880: record unknown, lease in doubt, service stopped, renewal
        // back, a new copy started; then the first record's answer arrived.
        let mut h = H::new();
        let s = starting(&mut h, 5);
        let a = h.feed(Event::ServiceStarted { ticket: s });
        let r1 = H::ticket_of_record(&a);
        // The lease ends without a renewal answer: forced stop.
        let a = h.advance(T / 2);
        let st = a
            .iter()
            .find_map(|a| match a {
                Action::StopService { ticket, .. } => Some(*ticket),
                _ => None,
            })
            .expect("a forced stop");
        h.feed(Event::ServiceStopped {
            ticket: st,
            clean: true,
            detail: String::new(),
        });
        // A renewal finally succeeds: a new copy starts.
        let renew = a
            .iter()
            .rev()
            .find_map(|a| match a {
                Action::Renew { ticket } => Some(*ticket),
                _ => None,
            })
            .expect("a renewal in flight");
        let a = h.feed(Event::Renewed {
            ticket: renew,
            outcome: WriteOutcome::Done,
        });
        let s2 = a
            .iter()
            .find_map(|a| match a {
                Action::StartService { ticket, .. } => Some(*ticket),
                _ => None,
            })
            .expect("a new start");
        let a = h.feed(Event::ServiceStarted { ticket: s2 });
        let r2 = H::ticket_of_record(&a);
        assert_ne!(r1, r2, "the new copy gets a record of its own");
        h.feed(Event::ServiceRecorded {
            ticket: r1,
            outcome: WriteOutcome::Done,
        });
        assert_ne!(
            h.e.role(),
            Role::Active,
            "the old copy's record made the new copy active"
        );
        h.feed(Event::ServiceRecorded {
            ticket: r2,
            outcome: WriteOutcome::Done,
        });
        assert_eq!(h.e.role(), Role::Active);
    }

    #[test]
    fn rule_4_5_a_stop_during_the_commit_waits_for_it_and_deletes_what_it_wrote() {
        let mut h = H::new();
        let j = h.session();
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 8 },
        });
        let a = h.read(H::ticket_of(&a), BreadcrumbView::Absent);
        let c = H::ticket_of(&a);
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
            matches!(a.as_slice(), [Action::DeleteOwnBreadcrumb { epoch: 8, .. }]),
            "{a:?}"
        );

        // Acknowledged: the same, without the read; never a start.
        let mut h = H::new();
        let j = h.session();
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 8 },
        });
        let a = h.read(H::ticket_of(&a), BreadcrumbView::Absent);
        let c = H::ticket_of(&a);
        h.feed(Event::StopRequested);
        let a = h.feed(Event::Committed {
            ticket: c,
            outcome: WriteOutcome::Done,
        });
        assert!(
            matches!(a.as_slice(), [Action::DeleteOwnBreadcrumb { epoch: 8, .. }]),
            "{a:?}"
        );
    }

    #[test]
    fn rule_4_3d_a_rejected_service_record_means_the_lock_is_lost() {
        let mut h = H::new();
        let s = starting(&mut h, 5);
        let a = h.feed(Event::ServiceStarted { ticket: s });
        let a = h.feed(Event::ServiceRecorded {
            ticket: H::ticket_of_record(&a),
            outcome: WriteOutcome::Conflict,
        });
        assert!(
            matches!(
                a.as_slice(),
                [Action::StopService {
                    cause: StopCause::Forced,
                    ..
                }]
            ),
            "{a:?}"
        );
        assert_ne!(h.e.role(), Role::Active);
    }

    #[test]
    fn rule_4_the_lease_follows_a_granted_session_timeout_below_the_configured_one() {
        let mut h = H::new();
        let a = h.feed_all(Event::SessionStarted {
            granted: Some(T / 3),
            control: ControlView::default(),
        });
        assert!(
            has(
                &a,
                |a| matches!(a, Action::Notice { warn: true, message } if message.contains("granted"))
            ),
            "{a:?}"
        );
        assert_eq!(h.e.session_timeout(), T / 3);
        let a = h.feed(Event::Joined {
            ticket: H::ticket_of(&strip(a)),
            outcome: JoinOutcome::Held { epoch: 2 },
        });
        let a = h.read(H::ticket_of(&a), BreadcrumbView::Absent);
        let sent = h.now;
        let a = h.feed(Event::Committed {
            ticket: H::ticket_of(&a),
            outcome: WriteOutcome::Done,
        });
        assert!(
            matches!(a.as_slice(), [Action::StartService { lease_valid_until, .. }] if *lease_valid_until == sent + T / 6),
            "{a:?}"
        );
        // A larger grant than configured changes no interval, but is said: a dead node
        // is noticed later than configured.
        let mut h = H::new();
        let all = h.feed_all(Event::SessionStarted {
            granted: Some(T * 2),
            control: ControlView::default(),
        });
        assert_eq!(h.e.session_timeout(), T);
        assert!(
            has(&all, |a| matches!(a, Action::Notice { warn: true, message }
                if message.contains("minSessionTimeout"))),
            "{all:?}"
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
        let a = h.feed(Event::BreadcrumbDeleted {
            ticket: H::ticket_of(&a),
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
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 4 },
        });
        let a = h.read(H::ticket_of(&a), BreadcrumbView::Absent);
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

    /// Won the lock and committed; the start is in flight.
    fn starting(h: &mut H, epoch: Epoch) -> Ticket {
        let j = h.session();
        let a = h.feed(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch },
        });
        let a = h.read(H::ticket_of(&a), BreadcrumbView::Absent);
        let a = h.feed(Event::Committed {
            ticket: H::ticket_of(&a),
            outcome: WriteOutcome::Done,
        });
        assert!(
            matches!(a.as_slice(), [Action::StartService { .. }]),
            "{a:?}"
        );
        H::ticket_of(&a)
    }

    #[test]
    fn a_stop_during_a_start_waits_for_it_and_stops_what_it_started() {
        // Simulation seed 6121: the stop answered "not running" and the start leaked.
        let mut h = H::new();
        let s = starting(&mut h, 7);
        let a = h.feed(Event::StopRequested);
        assert_eq!(a, vec![], "no stop while the start is in flight: {a:?}");
        let a = h.feed(Event::ServiceStarted { ticket: s });
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
        assert!(
            matches!(a.as_slice(), [Action::DeleteOwnBreadcrumb { .. }]),
            "{a:?}"
        );
    }

    #[test]
    fn a_start_that_completes_after_the_lease_end_is_stopped_and_killed() {
        // Simulation seed 8994: frozen between the lease check and the spawn.
        let mut h = H::new();
        let s = starting(&mut h, 7);
        let end = h.e.lease.end.unwrap();
        h.now = end + Duration::from_millis(10);
        h.e.handle_timeout(h.now);
        h.drain();
        let a = h.feed(Event::ServiceStarted { ticket: s });
        assert!(
            has(&a, |a| matches!(
                a,
                Action::StopService {
                    cause: StopCause::Forced,
                    ..
                }
            )) && has(&a, |a| matches!(a, Action::KillService)),
            "{a:?}"
        );
        assert_ne!(h.e.role(), Role::Active);
    }

    #[test]
    fn an_unkillable_service_is_never_joined_by_a_second_copy() {
        // Simulation seed 7674: a renewal started a second copy beside a stuck one.
        let mut h = H::new();
        h.active(3);
        let a = h.advance(T / 6);
        let r = H::ticket_of(&a);
        h.feed(Event::Renewed {
            ticket: r,
            outcome: WriteOutcome::Unknown,
        });
        let mut stop = None;
        for _ in 0..40 {
            for a in h.advance(RETRY_DELAY) {
                match a {
                    Action::Renew { ticket } => {
                        h.feed(Event::Renewed {
                            ticket,
                            outcome: WriteOutcome::Unknown,
                        });
                    }
                    Action::StopService { ticket, .. } => stop = Some(ticket),
                    Action::KillService => {}
                    other => panic!("unexpected {other:?}"),
                }
            }
            if stop.is_some() {
                break;
            }
        }
        let a = h.feed(Event::ServiceStopped {
            ticket: stop.unwrap(),
            clean: false,
            detail: "pid 9 in D state".into(),
        });
        // Give up the lock, keep the breadcrumb: no restart, no breadcrumb delete.
        assert!(matches!(a.as_slice(), [Action::Release { .. }]), "{a:?}");
    }

    #[test]
    fn every_role_change_is_a_transition_with_epoch_and_reason() {
        let mut h = H::new();
        let j = h.session();
        let all = h.feed_all(Event::Joined {
            ticket: j,
            outcome: JoinOutcome::Held { epoch: 8 },
        });
        assert!(
            has(&all, |a| matches!(a,
            Action::Transition { from: Role::Standby, to: Role::Promoting, epoch: Some(8), reason }
            if reason == "won the lock")),
            "{all:?}"
        );
    }
}
