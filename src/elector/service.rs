//! The managed service under the lock (SPEC §4.3d, §4.7, §6): start it while the lease
//! holds, record its identity, stop it, and what its exit or ill health means.

use super::{
    leave::Leave, Action, Elector, KeptBreadcrumb, KillCause, Phase, Reason, Step, StopCause,
    Ticket, RETRY_DELAY,
};
use crate::record::{Epoch, Role, WriteOutcome};
use std::time::Instant;

/// Where the service is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Svc {
    Down,
    /// A start is in flight; a stop asked for meanwhile waits for it to report, so that
    /// what it starts is stopped, never leaked.
    Starting(Ticket, Option<StopCause>),
    Up,
    Stopping(Ticket, StopCause),
}

impl Elector {
    /// The epoch held while in the serving step.
    fn serving_epoch(&self) -> Option<Epoch> {
        match self.phase {
            Phase::Holding {
                epoch,
                step: Step::Serving,
            } => Some(epoch),
            _ => None,
        }
    }

    /// The breadcrumb is ours and the service follows the lease (§4.3d, §4.4).
    fn in_serving_step(&self) -> bool {
        matches!(
            self.phase,
            Phase::Holding {
                step: Step::Serving,
                ..
            }
        )
    }

    pub(super) fn on_service_started(&mut self, ticket: Ticket, now: Instant) {
        let Svc::Starting(t, pending) = self.svc else {
            return;
        };
        if t != ticket {
            return;
        }
        self.svc = Svc::Up;
        self.service_healthy = true;
        // Promoted again: from here a step-down runs the demote hook as always.
        self.undemoted = false;
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
        if self.in_serving_step() {
            self.reason = Some(Reason::ServiceStarted);
            self.service_recorded = false;
            self.record_service();
            // A start that raced the lease end is stopped by the lease timers below.
            self.lease_timers(now);
        }
    }

    /// §4.3d: write the started service's identity into the breadcrumb. Until that is
    /// acknowledged the node is `promoting`, not `active`.
    pub(super) fn record_service(&mut self) {
        let Some(epoch) = self.serving_epoch() else {
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

    /// After a renewal, the active looks at its breadcrumb ([`Action::KeepBreadcrumb`]):
    /// the store may have forgotten it while keeping the lock, and the breadcrumb is what
    /// whoever wins next fences. Not before the service is recorded, nor while a rewrite
    /// is in flight: those write the breadcrumb themselves.
    pub(super) fn keep_breadcrumb(&mut self, now: Instant) {
        let Some(epoch) = self.serving_epoch() else {
            return;
        };
        if self.svc != Svc::Up
            || !self.service_recorded
            || self.recording.is_some()
            || self.forgetting.is_some()
            || self
                .keeping
                .is_some_and(|(_, sent)| now < sent + self.lease_len())
        {
            return;
        }
        let ticket = self.ticket();
        self.keeping = Some((ticket, now));
        self.actions
            .push_back(Action::KeepBreadcrumb { ticket, epoch });
    }

    pub(super) fn on_breadcrumb_kept(
        &mut self,
        ticket: Ticket,
        kept: KeptBreadcrumb,
        now: Instant,
    ) {
        if self.keeping.map(|(t, _)| t) != Some(ticket) {
            return;
        }
        self.keeping = None;
        if !self.in_serving_step() || self.svc != Svc::Up || !self.service_recorded {
            return;
        }
        match kept {
            KeptBreadcrumb::Named => {}
            KeptBreadcrumb::WrittenBack(found) => self.notice(
                true,
                format!(
                    "the store had forgotten this node's breadcrumb ({found}): written back, \
                     naming the running service, so that whoever wins next fences it; look \
                     at the store's durability (a restore, a failover to a lagging replica, \
                     a crash that lost writes)"
                ),
            ),
            KeptBreadcrumb::Foreign(what) => {
                self.notice(
                    true,
                    format!(
                        "the breadcrumb names {what}, not this node's promotion: demoting \
                         and joining again to learn whether the lock is still ours"
                    ),
                );
                self.reason = Some(Reason::BreadcrumbNotOurs);
                // As for a rewrite that found the breadcrumb not ours (`rewrite_failed`).
                self.rejoin_fresh = false;
                self.must_rejoin = true;
                self.lock_lost(now);
            }
            KeptBreadcrumb::Failed(why) => self.notice(
                false,
                format!(
                    "could not make sure the breadcrumb still names this node ({why}); \
                     looking again after the next renewal"
                ),
            ),
        }
    }

    pub(super) fn forget_record(&mut self) {
        self.service_recorded = false;
        self.recording = None;
        self.record_retry_at = None;
    }

    pub(super) fn on_service_forgotten(
        &mut self,
        ticket: Ticket,
        outcome: WriteOutcome,
        now: Instant,
    ) {
        if self.forgetting != Some(ticket) {
            return;
        }
        self.forgetting = None;
        if !self.in_serving_step() {
            return;
        }
        match outcome {
            WriteOutcome::Done => {
                self.names_earlier_start = false;
                self.repin = false;
                self.start_if_due(now);
            }
            WriteOutcome::Unknown | WriteOutcome::Conflict | WriteOutcome::NotDurable => {
                self.rewrite_failed(outcome, now)
            }
        }
    }

    /// A breadcrumb rewrite (naming the service, or naming none) was not acknowledged. An
    /// unknown outcome is retried while the lease holds: nothing starts until it is done,
    /// and the lease timers take the service down if the store stays silent. A conflict
    /// means the breadcrumb is not ours any more.
    fn rewrite_failed(&mut self, outcome: WriteOutcome, now: Instant) {
        if outcome == WriteOutcome::Conflict {
            self.reason = Some(Reason::BreadcrumbNotOurs);
            // The lock may still be ours (the store forgot only the breadcrumb): join again
            // whatever this node may do now, so that a held lock is released rather than
            // kept, renewed by the keepalive, by a node that will not serve (priority 0,
            // not eligible, paused: found in review at stop 35).
            self.rejoin_fresh = false;
            self.must_rejoin = true;
            self.lock_lost(now);
        } else {
            self.record_retry_at = Some(now + RETRY_DELAY);
        }
    }

    pub(super) fn on_service_recorded(
        &mut self,
        ticket: Ticket,
        outcome: WriteOutcome,
        now: Instant,
    ) {
        if self.recording != Some(ticket) {
            return;
        }
        self.recording = None;
        if !self.in_serving_step() || self.svc != Svc::Up {
            return;
        }
        match outcome {
            WriteOutcome::Done => {
                self.service_recorded = true;
                self.names_earlier_start = true;
                self.reason = Some(Reason::ServicePromoted);
                let pending = self
                    .control
                    .failover
                    .clone()
                    .or(self.lapsed_failover.take());
                if let Some(request) = pending {
                    self.actions.push_back(Action::ClearFailover { request });
                }
                // SPEC §6a.2: the switchover this node called off is over.
                if let Some(request) = self.called_off.clone() {
                    self.actions.push_back(Action::ClearFailover { request });
                }
            }
            WriteOutcome::Unknown | WriteOutcome::Conflict | WriteOutcome::NotDurable => {
                self.rewrite_failed(outcome, now)
            }
        }
    }

    pub(super) fn on_start_failed(
        &mut self,
        ticket: Ticket,
        reason: String,
        ran: bool,
        now: Instant,
    ) {
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
        self.reason = Some(Reason::PromotionFailed(reason));
        if self.in_serving_step() {
            if self.lease_left(now).is_none() {
                // The lease ran out before the start failed. An attempt that ran may have
                // done half its work (a promote hook that promoted the database, then hung
                // past its timeout while this warden was frozen: the simulation's seed
                // 376839), so whatever it left is demoted and killed at once, as a start
                // that completes after the lease end is. One refused before anything ran
                // left the service as it was (a working replica, never to be killed: stop
                // 37's review). Then wait for a renewal, as in §4.4.
                self.lease.doubt = true;
                if ran {
                    self.svc = Svc::Up;
                    self.lease.killed = false;
                    self.lease_timers(now);
                }
                return;
            }
            // §4.3e: demote (a promote hook may have done half its work), keep the
            // breadcrumb, release. A switchover this node called off stands again (SPEC
            // §6a.2): its target takes over, fencing this node first.
            if let Some(request) = self.called_off.take() {
                self.control.failover = Some(request);
            }
            self.svc = Svc::Up;
            self.leave(Leave::PromotionFailed);
        }
    }

    /// The service's main process exited. Its children may run on (a wrapper script, a
    /// master process that died): the service is down only once a stop found nothing of
    /// it left (SPEC §6), so every path here goes through a stop before the demotion
    /// counts as clean or anything starts again.
    pub(super) fn on_service_exited(&mut self, reason: String) {
        match self.svc {
            Svc::Up | Svc::Starting(..) => {}
            _ => return,
        }
        self.service_recorded = false;
        let serving = self.in_serving_step();
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
        self.reason = Some(Reason::ServiceExited(reason));
        self.leave(Leave::ServiceFailed);
    }

    pub(super) fn on_service_stopped(
        &mut self,
        ticket: Ticket,
        clean: bool,
        detail: String,
        now: Instant,
    ) {
        let Svc::Stopping(t, cause) = self.svc else {
            return;
        };
        if t != ticket {
            return;
        }
        // SPEC §6a: a planned switchover whose request lapsed (or was withdrawn) while the
        // demote handed over: every node takes the request for gone, so releasing now
        // would let any standby take over, one the demote did not wait for and that may
        // lack what the old active acknowledged. This node has all of it and still holds
        // the lock and its lease: it serves on, as when its demote fails.
        let ceding = matches!(
            self.phase,
            Phase::Holding {
                step: Step::Leaving {
                    why: Leave::Cede,
                    ..
                },
                ..
            }
        );
        if ceding && clean && cause == StopCause::Demote && !self.ceding_request_live(now) {
            if let Phase::Holding { epoch, .. } = self.phase {
                if self.may_serve_on(now) {
                    self.call_off(
                        epoch,
                        "the switchover request lapsed or was withdrawn before the demote \
                         ended"
                            .into(),
                        false,
                        now,
                    );
                    return;
                }
            }
        }
        self.svc = Svc::Down;
        // Demoted (or, not clean, left to whoever wins to fence: `own_leftovers`).
        self.undemoted = false;
        // A record still in flight names the service that just stopped: its answer must
        // not count for the next start (simulation seed 880).
        self.forget_record();
        self.lease.killed = false;
        if !clean {
            // The breadcrumb of the epoch it ran under names it (or its cgroup). Only a
            // started service stops, so that epoch is known.
            self.own_leftovers = Some(self.svc_epoch.unwrap_or_default());
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
                self.delete_breadcrumb_then_release(epoch, why, clean);
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
                    self.reason = Some(Reason::StopFailed(detail));
                    self.leave(Leave::ServiceFailed);
                }
            }
            Phase::LockLost => {
                self.phase = Phase::Idle;
                if self.stopping {
                    // A stop asked for while the forced demote ran (the review of stop
                    // 43: it sat idle, neither joining nor exiting).
                    self.exit_when_down();
                } else {
                    self.try_join(now);
                }
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

    /// Hooks mode: the `demote` hook failed and nothing was killed. In a planned
    /// switchover, while this node still holds the lock and its lease, the switchover is
    /// called off (SPEC §6a.2): the service is promoted again at the same epoch (no fencing:
    /// the breadcrumb is ours). Otherwise, as any stop that could not be verified: the
    /// breadcrumb is kept and the next active fences this node.
    ///
    /// Only hooks mode's `demote` can be called off. A spawned service whose stop failed
    /// still has processes after SIGKILL: starting it again beside them would make two
    /// copies, and a stop that succeeded has nothing to call off (the successor then
    /// takes over with what it has, as before).
    pub(super) fn on_demote_failed(
        &mut self,
        ticket: Ticket,
        detail: String,
        said: Option<String>,
        now: Instant,
    ) {
        let cede = matches!(
            self.phase,
            Phase::Holding {
                step: Step::Leaving {
                    why: Leave::Cede,
                    ..
                },
                ..
            }
        );
        let may_call_off =
            cede && self.svc == Svc::Stopping(ticket, StopCause::Demote) && self.may_serve_on(now);
        if !may_call_off {
            // SPEC §6, §6a.4: after a forced demotion, a service whose role is unknown must
            // not keep serving; once stopped, unclean, nothing would kill it at the lease
            // end (the review of issue 34).
            if matches!(self.svc, Svc::Stopping(t, _) if t == ticket) && self.forced_by_now(now) {
                self.actions.push_back(Action::KillService {
                    cause: KillCause::DemoteFailed,
                });
            }
            self.on_service_stopped(ticket, false, detail, now);
            return;
        }
        let Phase::Holding { epoch, .. } = self.phase else {
            return;
        };
        self.call_off(epoch, said.unwrap_or(detail), true, now);
    }

    /// Whether the stop or start under way is forced by now (SPEC §6a.4): asked so, or a
    /// voluntary one (a step-down, a switchover) overtaken by a lease in doubt or over, or
    /// by the lock lost. Its service's role is unknown until it reports.
    fn forced_by_now(&self, now: Instant) -> bool {
        let asked = match self.svc {
            Svc::Stopping(_, cause) | Svc::Starting(_, Some(cause)) => cause,
            Svc::Up | Svc::Down | Svc::Starting(_, None) => return false,
        };
        asked == StopCause::Forced
            || self.lease.doubt
            || self.lease_left(now).is_none()
            || !matches!(self.phase, Phase::Holding { .. })
    }

    /// SPEC §6a.4: whether a warden that exits at once now must kill its service first: a
    /// stop (or a start with a stop asked) forced by now is under way, and the service's
    /// role is unknown until it reports; a warden that exits cannot hear that.
    pub fn service_role_unknown(&self, now: Instant) -> bool {
        self.forced_by_now(now)
    }

    /// Whether this node may promote its service again after a demote, under the lock it
    /// holds: not stopping, and the lease valid and not in doubt (checked here and again
    /// right before the hook, §4.3d).
    fn may_serve_on(&self, now: Instant) -> bool {
        !self.stopping && !self.lease.doubt && self.lease_left(now).is_some()
    }

    /// Whether the switchover request this node cedes to is still pending.
    fn ceding_request_live(&self, now: Instant) -> bool {
        self.control
            .failover
            .as_ref()
            .is_some_and(|f| f.from == self.cfg.node_id && now < f.lapses_at)
    }

    /// SPEC §6a.2: calls the switchover off (`line` says why) and promotes this node's
    /// service again at `epoch` (no fencing: the breadcrumb is ours).
    fn call_off(&mut self, epoch: Epoch, line: String, hook_failed: bool, now: Instant) {
        let what = if hook_failed {
            "the demote hook failed in a planned switchover"
        } else {
            "a planned switchover cannot end as asked"
        };
        self.notice(
            true,
            format!(
                "{what} ({line}): calling the switchover off and promoting this node again \
                 at epoch {epoch}"
            ),
        );
        self.svc = Svc::Down;
        // Counted down, so that the promote hook runs again; but a failed demote may have
        // left it taking writes (a clean one, called off because the request lapsed, left
        // a replica: never to be killed as a primary, the review of stop 43).
        self.undemoted = hook_failed;
        self.forget_record();
        self.lease.killed = false;
        // Withdrawn as far as this node goes: it must not cede to it again (`bounded`
        // keeps it out of every later view of `control`).
        self.called_off = self.control.failover.take();
        // Cleared in the store at once, not once the promotion is recorded: should this
        // node step down before then (a SIGTERM during its promote), the request must not
        // hand the cluster to the successor its demote refused.
        if let Some(request) = self.called_off.clone() {
            self.actions.push_back(Action::ClearFailover { request });
        }
        self.phase = Phase::Holding {
            epoch,
            step: Step::Serving,
        };
        // The demote may have restarted the service under another pid (the PostgreSQL
        // recipe's immediate shutdown and restart as a standby of nobody): before the
        // promote hook runs, the breadcrumb must name the process running now, so that
        // whoever takes over later fences the one that serves (the driver pins it anew
        // only if the pinned one is gone).
        self.names_earlier_start = true;
        self.repin = true;
        self.reason = Some(Reason::SwitchoverCalledOff(line));
        self.start_if_due(now);
    }

    pub(super) fn on_service_health(&mut self, healthy: bool, detail: String) {
        self.service_healthy = healthy;
        if healthy || self.svc != Svc::Up {
            return;
        }
        if !self.in_serving_step() {
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
        self.reason = Some(Reason::Unhealthy(detail));
        self.leave(Leave::ServiceFailed);
    }

    /// §4.3d: start the service if we serve, it is down, and the lease is valid.
    pub(super) fn start_if_due(&mut self, now: Instant) {
        let Some(epoch) = self.serving_epoch() else {
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
            // First the breadcrumb stops naming the earlier start's processes (or, after
            // a called-off switchover, names the process running now).
            if self.forgetting.is_none() && self.record_retry_at.is_none() {
                let ticket = self.ticket();
                self.forgetting = Some(ticket);
                self.actions.push_back(if self.repin {
                    Action::RepinService { ticket, epoch }
                } else {
                    Action::ForgetService { ticket, epoch }
                });
            }
            return;
        }
        let ticket = self.ticket();
        self.svc = Svc::Starting(ticket, None);
        self.svc_epoch = Some(epoch);
        self.actions.push_back(Action::StartService {
            ticket,
            epoch,
            lease_valid_until: until,
        });
    }

    /// Our service that outlived its stop is over: nothing of it to fence any more. Not
    /// while we hold the lock: that hold's own fence finds it gone, in its order.
    pub(super) fn on_own_service_gone(&mut self) {
        if matches!(self.phase, Phase::Holding { .. } | Phase::Releasing { .. }) {
            return;
        }
        if self.own_leftovers.take().is_some() {
            self.notice(
                false,
                "this node's own service, which outlived its stop, is gone now".into(),
            );
        }
    }

    pub(super) fn stop_service(&mut self, cause: StopCause) {
        self.undemoted_runs();
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

    /// SPEC §6a.2: a called-off switchover's failed demote may have left the service
    /// taking writes although it counts down until promoted again: a stop counts it as
    /// running, so that it is demoted (if that fails too, the breadcrumb stays for whoever
    /// wins to fence it). Every way out goes through here: a step-down (seed 45962), a
    /// lost lock or session (seed 521978).
    pub(super) fn undemoted_runs(&mut self) {
        if self.undemoted && self.svc == Svc::Down {
            self.svc = Svc::Up;
        }
    }

    /// The service is up or coming up, and nobody asked it to stop yet.
    pub(super) fn svc_running(&self) -> bool {
        matches!(self.svc, Svc::Up | Svc::Starting(_, None))
    }

    /// Stop the service because the session or the lock is gone.
    pub(super) fn force_stop(&mut self) {
        self.stop_service(StopCause::Forced);
    }
}
