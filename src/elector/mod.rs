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
//!
//! The rules live in one file per concern, each an `impl Elector` block: `join.rs` (sessions
//! and the lock), `promote.rs` (read, fence, commit), `service.rs` (start, record, stop),
//! `lease.rs` (renewals and the deadlines they set), `leave.rs` (demote, release, back off),
//! `control.rs` (pause and switchover), `follow.rs` (follow and priority), `role.rs` (the
//! reported role and its transitions) and `timer.rs` (every deadline, as one table). The
//! unit tests are in `tests/`, one file per concern.

mod control;
mod follow;
mod join;
mod lease;
mod leave;
mod promote;
mod reason;
mod role;
mod service;
#[cfg(test)]
mod tests;
mod timer;

pub use crate::record::{BreadcrumbView, JoinOutcome, Version, WriteOutcome};
use crate::record::{Epoch, HostIdentity, MemberRecord, NodeRecord, Remembered, Role};
pub use follow::{best_placed, placement};
use lease::Lease;
use leave::Leave;
pub use reason::{Reason, SWITCHOVER_CALLED_OFF};
use service::Svc;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use timer::Timer;

mod io;
pub use io::*;

/// The longest rejoin delay after repeated failures (SPEC §4.8). Defined with the config
/// whose range it bounds (`election.rejoin_delay`), which sits below the elector.
pub use crate::config::MAX_REJOIN_DELAY;
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
    /// Hooks mode with `health.standby_command`: eligible only once it passes too
    /// ([`Event::StandbyCheckChanged`]).
    pub standby_check: bool,
    /// A new session waits one session timeout before its first join (SPEC §3a "A store
    /// that forgot"): every warden whose memory the store lost, and that can reach it,
    /// registers what it saw meanwhile, and every lease of before has ended. The daemon
    /// sets it; unit tests of other rules leave it off.
    pub settle: bool,
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

/// What a fence in [`Step::Fencing`] is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FenceOf {
    /// The old active the breadcrumb names (or an unknown one, or an earlier warden
    /// process of this node).
    Breadcrumb,
    /// This process's own service, which outlived its stop.
    OwnService,
    /// A live member's service that outlived its stop ([`ClusterState::member_leftovers`]).
    Leftover,
}

/// SPEC §6b: standbys a winner stood aside for, each with its process (incarnation) and
/// its failed takeovers then (node id, incarnation, count).
pub(super) type FailedTakeovers = Vec<(String, String, u32)>;

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
        /// What is fenced: the breadcrumb's active, or a service that outlived its stop.
        of: FenceOf,
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
    /// Voluntary demotion in progress: stop, then release (deleting the breadcrumb).
    Leaving { why: Leave },
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

/// The election state machine of one node. See the module doc.
#[derive(Debug)]
pub struct Elector {
    cfg: ElectorConfig,
    phase: Phase,
    svc: Svc,
    lease: Lease,
    role: Role,
    /// Whether the node may take the lock: its eligibility check passes (`check_ok`) and,
    /// where configured, hooks mode's `standby_command` too (`standby_ok`).
    eligible: bool,
    check_ok: bool,
    standby_ok: bool,
    service_healthy: bool,
    control: ControlView,
    /// Failures in a row (§4.8) and until when we stay out.
    failures: u32,
    /// Holds let go because something failed, never reset (published).
    failed_holds: u32,
    out_until: Option<Instant>,
    /// While sitting out after a failed fence: the breadcrumb that could not be fenced,
    /// looked at again every renewal interval (§4.8).
    fence_watch: Option<leave::FenceWatch>,
    /// Since when we are stable standby or active (§4.8 reset).
    stable_since: Option<Instant>,
    /// Retry a join or a read at this instant (after an unknown outcome).
    retry_at: Option<Instant>,
    /// A join's outcome was unknown: the lock may be ours, so we must find out even if we
    /// no longer want it.
    must_rejoin: bool,
    /// Our own service could not be verified stopped: the epoch of the commit it ran under.
    /// It is fenced locally ([`FenceOrder::OwnService`]) before this node commits again,
    /// and its breadcrumb is written back when the store forgot it
    /// ([`Action::RestoreOwnBreadcrumb`]).
    own_leftovers: Option<Epoch>,
    /// The epoch the service was last started under.
    svc_epoch: Option<Epoch>,
    /// Live members' services that outlived their stop, still to fence before this
    /// hold's commit (from the last state read).
    leftovers_to_fence: Vec<NodeRecord>,
    /// The breadcrumb holds our record for the epoch we hold.
    breadcrumb_written: bool,
    /// `control` still holds a switchover request that lapsed: the next active clears it
    /// (SPEC §8), though the election already ignores it.
    lapsed_failover: Option<FailoverView>,
    /// SPEC §6a.2: the switchover request this node called off (its demote failed and it
    /// promoted itself again): withdrawn as far as this node is concerned, so that it never
    /// cedes to it again, and cleared once the promotion is recorded (it lapses at its
    /// deadline if the clear never lands).
    called_off: Option<FailoverView>,
    /// When the current session started (for [`ElectorConfig::settle`]).
    session_since: Option<Instant>,
    /// The wait of the current session was said to be over.
    settle_said: bool,
    /// How many links with the store began so far (each session, and each reconnection
    /// within one: [`Event::Reconnected`]): `active` was learned in link `active_link`.
    links: u64,
    active_link: u64,
    /// The forgotten active whose warden the last [`Action::RestoreBreadcrumb`] asked the
    /// driver to check (`check_alive`): what [`ClusterState::remembered_alive`] is about.
    alive_checked: Option<NodeRecord>,
    /// The link in which `active`'s breadcrumb was seen ([`Event::ActiveConfirmed`]).
    active_confirmed: Option<u64>,
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
    /// The look at our breadcrumb in flight ([`Action::KeepBreadcrumb`]) and when it was
    /// sent. No other is sent meanwhile, so that its answer is not made old news by the
    /// next on a slow store (the review of stop 44); one without an answer for a lease
    /// (its session ended, a driver that lost it) no longer holds the next back.
    keeping: Option<(Ticket, Instant)>,
    /// The rewrite that names none (or, with `repin`, the process pinned anew), in flight.
    forgetting: Option<Ticket>,
    /// SPEC §6a.2: the rewrite before the next start is [`Action::RepinService`]: a
    /// called-off switchover's service may have restarted under another pid in its demote.
    repin: bool,
    /// SPEC §6a.2: the demote of a called-off switchover failed, and the promote hook has
    /// not run since: the service may still take writes although the elector counts it
    /// down. A step-down meanwhile keeps the breadcrumb (seed 45962).
    undemoted: bool,
    /// A transition's writes are held back ([`Action::Transition::held`]).
    held: bool,
    /// The greatest epoch this node has seen committed: its own, the holder's, the
    /// breadcrumb's, history's, other members' (SPEC §3a). Published in the member record;
    /// a new lock's epoch must be above it.
    epoch_seen: Option<Epoch>,
    /// SPEC §6 `follow`: the newest active of another node, the epoch followed last, the
    /// follow in flight, why the last one failed and when to try again.
    active: Option<NodeRecord>,
    /// The latest rewrite of `active`'s breadcrumb within its epoch (§4.3d) this node was
    /// told of ([`Event::ActiveRewritten`]); `None` until one, and again for a new active.
    active_rewrite: Option<NodeRecord>,
    followed: Option<Epoch>,
    following: Option<Ticket>,
    follow_failed: Option<String>,
    follow_retry_at: Option<Instant>,
    /// SPEC §6 `priority`: a healthy standby of higher priority is a member; this node
    /// waited for it once before the join now due.
    higher_rival: bool,
    rival_waited: bool,
    /// SPEC §6b: the best-placed eligible standby other than this node, as the members
    /// last read showed it: the successor this node names when it steps down by itself.
    best_standby: Option<String>,
    /// SPEC §6b: the eligible standby placed just above this one, as the members last
    /// read showed it.
    placed_after: Option<String>,
    /// This node's own position as the members last read showed it (its record's), to
    /// place a changed record of `placed_after` against it.
    own_place: Option<u64>,
    /// SPEC §6b: the latest end of a new session's wait among the standbys placed above
    /// this node ([`MemberRecord::tries_at`]), at most a session timeout from when it was
    /// read: the wait for them counts from then.
    above_tries_at: Option<Instant>,
    /// The latest this node waits for standbys placed above it, set as the wait starts:
    /// one session timeout beyond the usual half, whatever later reads say (a node that
    /// keeps re-making its link would otherwise push the wait for ever: the review of
    /// stop 47).
    rival_wait_cap: Option<Instant>,
    /// SPEC §6b: this node's position as its check last told it ([`Event::OwnPosition`]).
    own_position: Option<u64>,
    /// The members as last read, placed again when [`own_position`](Self::own_position)
    /// moves.
    members_view: Vec<MemberRecord>,
    /// SPEC §6b herd-free succession: a read of the members was asked for and is to come.
    members_asked: bool,
    /// When the members were last read (not placed again by a check of its own).
    members_read_at: Option<Instant>,
    /// The record of `placed_after` as its watch last showed it.
    above_record: Option<MemberRecord>,
    /// SPEC §6b: this node, holding the lock, stood aside once for standbys the members
    /// read with the state placed above it, with each one's failed takeovers then
    /// ([`MemberRecord::failed_takeovers`], by incarnation); until another node's
    /// promotion is seen, or this
    /// node's own, it does not again (a better-placed one that does not take the lock
    /// must not keep the cluster without an active), unless one of them took the lock and
    /// failed since: it tries again after its back-off, which grows with each failure,
    /// so this node stands aside again, and its next look finds it sitting out.
    /// With the epoch of the hold it let go: a promotion that history shows completed at a
    /// later epoch is a new round too, seen or not (the simulation's seed 143244: cut off
    /// from the store while n1 was promoted and stepped down, this node never saw it, and
    /// promoted without the writes a standby placed above it held).
    stood_aside_for_better: Option<(Epoch, FailedTakeovers)>,
    /// A link made again with the store started this round anew already (the stand-aside
    /// and the wait for a better-placed standby, forgotten with what the store may have
    /// forgotten): not again until a new active, a commit or a new session.
    round_relinked: bool,
    /// The lock was won and its first state read is still to come: nothing has been
    /// fenced, restored or committed under it yet (the only time to stand aside, §6b).
    fresh_hold: bool,
    /// `must_rejoin` only learns the outcome of a join that was this node's first try for
    /// the lock (its answer was lost): nothing of this node's can be under a lock it finds
    /// held, so that hold is fresh too. (The simulation's seeds 56156 and 110414: a join
    /// lost in a store outage, learnt held by the rejoin, promoted without looking again
    /// at a standby placed above it, which held hundreds more writes.) False when the
    /// rejoin follows a hold of this node's (a refused renewal, rewrite or commit).
    rejoin_fresh: bool,
    stopping: bool,
    /// The reason for the next transition.
    reason: Option<Reason>,
    next_ticket: Ticket,
    actions: VecDeque<Action>,
}

impl Elector {
    /// A new elector; it asks for a session at once.
    pub fn new(cfg: ElectorConfig, eligible: bool) -> Self {
        let standby_check = cfg.standby_check;
        let mut e = Elector {
            cfg,
            phase: Phase::Connecting,
            svc: Svc::Down,
            lease: Lease::default(),
            role: Role::Ineligible,
            eligible: eligible && !standby_check,
            check_ok: eligible,
            standby_ok: !standby_check,
            service_healthy: true,
            control: ControlView::default(),
            failures: 0,
            failed_holds: 0,
            out_until: None,
            fence_watch: None,
            stable_since: None,
            retry_at: None,
            must_rejoin: false,
            own_leftovers: None,
            svc_epoch: None,
            leftovers_to_fence: Vec::new(),
            breadcrumb_written: false,
            lapsed_failover: None,
            called_off: None,
            failover_seen: None,
            session_since: None,
            settle_said: false,
            granted: None,
            service_recorded: false,
            recording: None,
            record_retry_at: None,
            names_earlier_start: false,
            epoch_seen: None,
            active: None,
            active_rewrite: None,
            links: 0,
            active_link: 0,
            alive_checked: None,
            active_confirmed: None,
            followed: None,
            following: None,
            follow_failed: None,
            follow_retry_at: None,
            higher_rival: false,
            rival_waited: false,
            best_standby: None,
            placed_after: None,
            own_place: None,
            own_position: None,
            members_view: Vec::new(),
            above_tries_at: None,
            rival_wait_cap: None,
            members_asked: false,
            members_read_at: None,
            above_record: None,
            stood_aside_for_better: None,
            round_relinked: false,
            fresh_hold: false,
            rejoin_fresh: false,
            forgetting: None,
            keeping: None,
            undemoted: false,
            held: false,
            repin: false,
            stopping: false,
            reason: None,
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

    /// The node this node hands over to as it steps down (SPEC §6 `WARDEN_SUCCESSOR_*`):
    /// in a planned switchover, the request's target (`failover` names one with or without
    /// `--to`, §6a.3; a request without one, from an older warden, names none); when it
    /// steps down by itself (a stop, its service failed), the best-placed eligible standby
    /// as the members last read showed it (§6b), so that its `demote` can hand over
    /// without loss; `None` otherwise (a forced demotion: another node may hold the lock).
    pub fn successor(&self) -> Option<&str> {
        match self.phase {
            Phase::Holding {
                step: Step::Leaving { why, .. },
                ..
            } => match why {
                Leave::Cede => self.control.failover.as_ref()?.to.as_deref(),
                Leave::Stop | Leave::ServiceFailed => self.best_standby.as_deref(),
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether [`Self::successor`] is a planned switchover's target (`failover`), not one
    /// this node named as it steps down by itself.
    pub fn successor_is_planned(&self) -> bool {
        matches!(
            self.phase,
            Phase::Holding {
                step: Step::Leaving {
                    why: Leave::Cede,
                    ..
                },
                ..
            }
        )
    }

    /// SPEC §6b: until when this node waits out its new (or re-made) session before it may
    /// take the lock, while it does: for its member record
    /// ([`MemberRecord::tries_from`]), so that a standby below it waits for it that long.
    pub fn settles_until(&self, now: Instant) -> Option<Instant> {
        self.settling(now)
    }

    /// SPEC §6b: the standby this node lets try first for a free lock (the one placed just
    /// above it), for its member record: `None` while it holds the lock, for priority 0
    /// (never tries by itself), and when none is placed above it.
    pub fn placed_after(&self) -> Option<&str> {
        if self.cfg.priority == 0 || matches!(self.phase, Phase::Holding { .. }) {
            return None;
        }
        self.placed_after.as_deref()
    }

    /// SPEC §4.8, §6b: how many times this warden let go of the lock because something
    /// failed, never reset, for its member record ([`MemberRecord::failed_takeovers`]).
    pub fn failed_holds(&self) -> u32 {
        self.failed_holds
    }

    /// SPEC §6b herd-free succession: the member whose record this node watches instead
    /// of the lock, the standby placed just above it: only the best-placed standby
    /// watches the lock, so that a free lock wakes one node, not every standby. `None`
    /// (watch the lock) unless this node waits in the lock's queue (joined, another node
    /// holds it) with a standby placed above it; for priority 0, for a node that a
    /// switchover names, and for one that must join again, the lock is watched as before.
    pub fn watched_above(&self, now: Instant) -> Option<&str> {
        if self.cfg.priority == 0
            || !matches!(self.phase, Phase::Standby)
            || self.must_rejoin
            || self.stopping
            || self.named_target(now)
        {
            return None;
        }
        let above = self.placed_after.as_deref()?;
        // Two standbys whose views of each other crossed (positions read at different
        // times) would each watch the other, and nobody the lock (the review of stop 46):
        // when the one above names this node as the one it lets try first, the smaller
        // node id watches the lock.
        let crossed = self.above_record.as_ref().is_some_and(|r| {
            r.node.node_id == above && r.after.as_deref() == Some(self.cfg.node_id.as_str())
        });
        if crossed && self.cfg.node_id.as_str() < above {
            return None;
        }
        Some(above)
    }

    /// SPEC §6: whether this standby follows the current active, for `status`: `None`
    /// without a `follow` hook or an active to follow.
    pub fn follow_state(&self) -> Option<String> {
        if !self.cfg.follow || matches!(self.phase, Phase::Holding { .. }) {
            return None;
        }
        // (An earlier incarnation of this node is not followed: nothing to show.)
        let active = self
            .active
            .as_ref()
            .filter(|a| a.node_id != self.cfg.node_id)?;
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

    /// The epoch our own service ran under when it outlived its stop, while it is not
    /// known to be gone (published in the member record: [`crate::record::MemberRecord::leftover`]).
    pub fn own_leftovers(&self) -> Option<Epoch> {
        self.own_leftovers
    }

    /// Whether the store could have forgotten `active`'s commit without a trace this node
    /// would call a clean step-down: this link never saw its breadcrumb (it was seen in an
    /// earlier link than the current one and not read again since, or only the lock's
    /// record was, which a restart can keep while it forgets the breadcrumb: the review of
    /// stop 42). A breadcrumb read again in a new link that still names it proves it in
    /// that link (the review of stop 48: without that, one reconnection while an active
    /// served made its later clean step-down look forgotten, and it was fenced).
    fn active_unproven(&self) -> bool {
        self.active_confirmed != Some(self.links)
    }

    /// What the member record publishes as [`crate::record::MemberRecord::remembers`]:
    /// another node's active this node saw commit in an earlier link with the store than
    /// the current one, with the latest rewrite of its breadcrumb seen. `registering`:
    /// for the registration of a new session, whose link is not counted yet, so that
    /// any active seen so far is from an earlier one. Within one unbroken link a missing
    /// breadcrumb is the trace of a clean step-down (`forgotten_active`): nothing to say.
    pub fn remembered(&self, registering: bool) -> Option<Remembered> {
        let active = self.active.as_ref()?;
        if self.is_ours(active) || !(registering || self.active_unproven()) {
            return None;
        }
        Some(Remembered {
            active: active.clone(),
            rewrite: self.active_rewrite.clone(),
        })
    }

    /// The epoch of the lock we hold, if any.
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

    /// The next instant at which [`Elector::handle_timeout`] has work to do: the earliest
    /// of the armed timers (`timer.rs`).
    pub fn poll_timeout(&self) -> Option<Instant> {
        Timer::ALL
            .into_iter()
            .filter_map(|t| self.deadline(t))
            .min()
    }

    /// Feeds one event.
    pub fn handle(&mut self, event: Event, now: Instant) {
        match event {
            Event::SessionStarted { control, granted } => {
                self.on_session_started(control, granted, now)
            }
            Event::SessionLost => self.on_session_lost(now),
            Event::Reconnected => self.on_reconnected(now),
            Event::Joined { ticket, outcome } => self.on_joined(ticket, outcome, now),
            Event::LockDeleted => self.on_lock_deleted(now),
            Event::StateRead { ticket, result } => self.on_state_read(ticket, result, now),
            Event::FenceDone {
                ticket,
                fenced,
                summary,
            } => self.on_fence_done(ticket, fenced, summary, now),
            Event::Committed { ticket, outcome } => {
                // Answered, whatever the outcome: what the promotion held back goes first.
                if std::mem::take(&mut self.held) {
                    self.actions.push_back(Action::WriteHeld);
                }
                self.on_committed(ticket, outcome, now)
            }
            Event::CommitAborted { ticket, reason } => self.on_commit_aborted(ticket, reason),
            Event::Renewed { ticket, outcome } => self.on_renewed(ticket, outcome, now),
            Event::ServiceStarted { ticket } => self.on_service_started(ticket, now),
            Event::ServiceForgotten { ticket, outcome } => {
                self.on_service_forgotten(ticket, outcome, now)
            }
            Event::ServiceRecorded { ticket, outcome } => {
                self.on_service_recorded(ticket, outcome, now)
            }
            Event::StartFailed {
                ticket,
                reason,
                ran,
            } => self.on_start_failed(ticket, reason, ran, now),
            Event::ServiceExited { reason } => self.on_service_exited(reason),
            Event::ServiceStopped {
                ticket,
                clean,
                detail,
            } => self.on_service_stopped(ticket, clean, detail, now),
            Event::DemoteFailed {
                ticket,
                detail,
                said,
            } => self.on_demote_failed(ticket, detail, said, now),
            Event::OwnServiceGone => self.on_own_service_gone(),
            Event::Released { ticket } => self.on_released(ticket, now),
            Event::BreadcrumbKept { ticket, kept } => self.on_breadcrumb_kept(ticket, kept, now),
            Event::BreadcrumbPeeked { ticket, version } => {
                self.on_breadcrumb_peeked(ticket, version, now)
            }
            Event::ActiveChanged { record } => self.on_active_changed(record),
            Event::ActiveRewritten { record } => self.on_active_rewritten(record),
            Event::ActiveConfirmed { record } => {
                if self
                    .active
                    .as_ref()
                    .is_some_and(|a| a.same_incarnation(&record) && a.epoch == record.epoch)
                {
                    if self.active_link < self.links && self.active_confirmed != Some(self.links) {
                        self.notice(
                            false,
                            format!(
                                "the breadcrumb still names {} at epoch {} in this node's new \
                                 link with the store: the store kept that commit",
                                record.node_id,
                                record.epoch.unwrap_or_default()
                            ),
                        );
                    }
                    self.active_confirmed = Some(self.links);
                }
            }
            Event::Followed { ticket, ok, detail } => self.on_followed(ticket, ok, detail, now),
            Event::Members { members } => {
                self.members_read_at = Some(now);
                self.on_members(&members, now)
            }
            Event::OwnPosition { position } => self.on_own_position(position, now),
            Event::AboveChanged {
                id,
                record,
                own_position,
            } => self.on_above_changed(&id, record, own_position),
            Event::EligibilityChanged { eligible, detail } => {
                self.check_ok = eligible;
                self.on_eligibility(detail, now);
            }
            Event::StandbyCheckChanged { passing, detail } => {
                self.standby_ok = passing;
                self.on_eligibility(format!("standby_command: {detail}"), now);
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
        self.fire_due(&Timer::ALL, now);
        self.after_input(now);
    }

    /// One of the eligibility checks changed (`detail`: what it said).
    fn on_eligibility(&mut self, detail: String, now: Instant) {
        self.eligible = self.check_ok && self.standby_ok;
        self.reason = Some(Reason::Eligibility(detail));
        if self.eligible {
            self.try_join(now);
        }
    }

    fn is_ours(&self, record: &NodeRecord) -> bool {
        record.node_id == self.cfg.node_id && record.incarnation == self.cfg.incarnation
    }

    fn notice(&mut self, warn: bool, message: String) {
        self.actions.push_back(Action::Notice { warn, message });
    }

    fn ticket(&mut self) -> Ticket {
        let t = self.next_ticket;
        self.next_ticket += 1;
        t
    }
}
