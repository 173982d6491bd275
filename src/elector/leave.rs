//! Leaving the lock (SPEC §4.3e, §4.4, §4.5, §4.8): demote, delete our breadcrumb when the
//! demotion was clean, release, back off after a failure, exit on shutdown.

use super::{
    lease::Lease, service::Svc, Action, Elector, Phase, Reason, Step, StopCause, Ticket,
    LOST_DATA_RETRY, MAX_REJOIN_DELAY,
};
use crate::record::{Epoch, Version};
use std::time::Instant;

/// A node that failed to fence sits out for its back-off (§4.8), up to 30 s; the operator's
/// way out, `fence --confirm`, deletes the breadcrumb that could not be fenced. The node
/// looks at the breadcrumb every renewal interval meanwhile and joins again as soon as it
/// changed, rather than leaving the cluster without an active for the rest of the back-off.
#[derive(Clone, Copy, Debug)]
pub(super) struct FenceWatch {
    /// The breadcrumb's version when the fence failed (`None`: there was none to read).
    pub(super) version: Option<Version>,
    /// When to look next; set once the lock is released.
    pub(super) next: Option<Instant>,
    /// The look whose answer counts.
    pub(super) ticket: Option<Ticket>,
}

/// Why we leave the lock; decides the back-off and what the breadcrumb needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Leave {
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

impl Elector {
    pub(super) fn on_released(&mut self, ticket: Ticket, now: Instant) {
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

    pub(super) fn on_stop_requested(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        self.reason = Some(Reason::ShuttingDown);
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
            Phase::Holding {
                step: Step::Reading { .. },
                ..
            } if self.own_leftovers.is_some() => {
                // Our service outlived its stop and the store may have forgotten the
                // breadcrumb naming it: the read (or the write-back under way) finishes
                // first, so that the lock is not released before it lands.
            }
            Phase::Holding { .. } => self.leave(Leave::Stop),
            Phase::Joining { .. } => {
                // The lock may be ours in a moment; dropping the session removes it.
                self.exit_when_down();
            }
            _ => self.exit_when_down(),
        }
    }

    /// The lock vanished or is not ours (§4.4): demote, then join again.
    pub(super) fn lock_lost(&mut self, now: Instant) {
        self.reason = Some(Reason::LockNotOurs);
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
    pub(super) fn leave(&mut self, why: Leave) {
        let Phase::Holding { epoch, .. } = self.phase else {
            return;
        };
        self.phase = Phase::Holding {
            epoch,
            step: Step::Leaving { why },
        };
        self.undemoted_runs();
        match self.svc {
            Svc::Up | Svc::Starting(..) => self.stop_service(StopCause::Demote),
            Svc::Stopping(..) => {}
            Svc::Down => {
                self.delete_breadcrumb_then_release(epoch, why, self.own_leftovers.is_none())
            }
        }
    }

    /// The service is down on the way out: release, deleting our breadcrumb with the lock
    /// if we wrote it, the service is known to be gone (`clean`) and the promotion did not
    /// fail (§4.3e keeps it, so that whoever wins fences this node).
    pub(super) fn delete_breadcrumb_then_release(&mut self, epoch: Epoch, why: Leave, clean: bool) {
        let ours = clean && self.breadcrumb_written && why != Leave::PromotionFailed;
        let breadcrumb = ours.then_some(epoch);
        self.undemoted = false;
        let ticket = self.ticket();
        self.lease = Lease::default();
        self.breadcrumb_written = false;
        self.forget_record();
        self.phase = Phase::Releasing { ticket, why };
        self.actions
            .push_back(Action::Release { ticket, breadcrumb });
    }

    pub(super) fn after_release(&mut self, why: Leave, now: Instant) {
        if why == Leave::FenceFailed {
            let next = now + self.renewal_interval();
            if let Some(w) = &mut self.fence_watch {
                w.next = Some(next);
            }
        } else {
            self.fence_watch = None;
        }
        if why == Leave::LostData {
            self.out_until = Some(now + LOST_DATA_RETRY);
        }
        if why.is_failure() {
            self.failures = self.failures.saturating_add(1);
            self.failed_holds = self.failed_holds.saturating_add(1);
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

    /// A look at the breadcrumb while sitting out after a failed fence: when it changed
    /// (deleted by `fence --confirm`, or replaced by another node's promotion), the
    /// back-off ends now. An unanswered look is tried again at the next interval.
    pub(super) fn on_breadcrumb_peeked(
        &mut self,
        ticket: Ticket,
        version: Result<Option<Version>, String>,
        now: Instant,
    ) {
        let Some(w) = self.fence_watch else {
            return;
        };
        if w.ticket != Some(ticket) {
            return;
        }
        match version {
            Ok(v) if v != w.version => {}
            _ => return,
        }
        self.fence_watch = None;
        if self.out_until.is_some_and(|t| now < t) {
            self.out_until = None;
            self.failures = 0;
            self.notice(
                false,
                "the breadcrumb this node could not fence has changed (`fence --confirm` \
                 deleted it, or another node was promoted): joining the election again now"
                    .into(),
            );
            self.try_join(now);
        }
    }

    pub(super) fn exit_when_down(&mut self) {
        if self.svc == Svc::Down && !matches!(self.phase, Phase::Exited) {
            self.phase = Phase::Exited;
            self.actions.push_back(Action::Exit { code: 0 });
        }
    }
}
