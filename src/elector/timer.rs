//! The elector's deadlines as one table (quinn-proto's `timer.rs`): an enum of timers, the
//! instant each is due at, [`Elector::poll_timeout`] the earliest of them, and
//! [`Elector::handle_timeout`] the step each takes once passed.
//!
//! A deadline here is computed from the state rather than stored beside it: whether a timer
//! is armed depends on the phase, the lease's doubt and the service (a renewal is late only
//! while it is not yet in doubt; the lease end kills only a service not already killed), and
//! a stored copy would have to follow each of them. An armed timer's instant is always one
//! its step acts on once passed: any other would spin the driver.

use super::{service::Svc, Action, Elector, KillCause, Phase, Reason, Step, StopCause};
use std::time::Instant;

/// One deadline of the elector. [`Timer::ALL`] is the order in which passed ones are acted
/// on: each step sees what the earlier ones changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timer {
    /// Join or read again after an unknown outcome, a lost store, or a rival's head start.
    Retry,
    /// Run the failed `follow` hook again (SPEC §6).
    FollowRetry,
    /// Send again the breadcrumb rewrite whose outcome was unknown (§4.3d).
    RecordRetry,
    /// The switchover request in `control` lapses (SPEC §8).
    SwitchoverLapse,
    /// The back-off after a failure ends (§4.8), while out of the election.
    Rejoin,
    /// Sitting out after a failed fence: look whether the breadcrumb changed (§4.8).
    PeekBreadcrumb,
    /// The renewal in flight is late: the lease is in doubt (§4.4).
    RenewalLate,
    /// The next renewal is due.
    Renewal,
    /// The lease in doubt ends within the graceful stop: demote now.
    Demote,
    /// The lease ends with the service still there: kill it.
    Kill,
}

impl Timer {
    /// Every timer, in the order passed ones are acted on.
    pub(super) const ALL: [Timer; 10] = [
        Timer::Retry,
        Timer::FollowRetry,
        Timer::RecordRetry,
        Timer::SwitchoverLapse,
        Timer::Rejoin,
        Timer::PeekBreadcrumb,
        Timer::RenewalLate,
        Timer::Renewal,
        Timer::Demote,
        Timer::Kill,
    ];

    /// The lease's own timers (§4.4), which a start that completes also checks at once.
    pub(super) const LEASE: [Timer; 4] = [
        Timer::RenewalLate,
        Timer::Renewal,
        Timer::Demote,
        Timer::Kill,
    ];
}

impl Elector {
    /// When `timer` is due; `None` while it is not armed.
    pub(super) fn deadline(&self, timer: Timer) -> Option<Instant> {
        let holding = matches!(self.phase, Phase::Holding { .. });
        match timer {
            Timer::Retry => self.retry_at,
            Timer::FollowRetry => self.follow_retry_at,
            Timer::RecordRetry => self.record_retry_at,
            Timer::SwitchoverLapse => self.control.failover.as_ref().map(|f| f.lapses_at),
            Timer::Rejoin => self.out_until.filter(|_| matches!(self.phase, Phase::Idle)),
            // Only a look that comes before the back-off's own end.
            Timer::PeekBreadcrumb => self.fence_watch.and_then(|w| w.next).filter(|&t| {
                matches!(self.phase, Phase::Idle) && self.out_until.is_some_and(|end| t < end)
            }),
            Timer::RenewalLate => match self.lease.in_flight {
                // Only until it is declared late.
                Some((_, sent)) if holding && !self.lease.doubt => {
                    Some(sent + self.renewal_interval())
                }
                _ => None,
            },
            Timer::Renewal => self.lease.next_renewal.filter(|_| holding),
            Timer::Demote => {
                let end = self.lease.end?;
                (self.lease.doubt && self.svc_running())
                    .then(|| end.checked_sub(self.cfg.demote_grace).unwrap_or(end))
            }
            // A called-off switchover's service counts down until promoted again, but its
            // failed demote may have left it taking writes: killed at the lease end too.
            Timer::Kill => self
                .lease
                .end
                .filter(|_| (self.svc != Svc::Down || self.undemoted) && !self.lease.killed),
        }
    }

    /// Takes the step of every timer in `timers` that has passed, in that order.
    pub(super) fn fire_due(&mut self, timers: &[Timer], now: Instant) {
        for &timer in timers {
            if self.deadline(timer).is_some_and(|t| now >= t) {
                self.fire(timer, now);
            }
        }
    }

    /// The step of a passed timer.
    fn fire(&mut self, timer: Timer, now: Instant) {
        match timer {
            Timer::Retry => {
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
            Timer::FollowRetry => {
                self.follow_retry_at = None;
                self.follow_now();
            }
            Timer::RecordRetry => {
                self.record_retry_at = None;
                self.record_service();
                self.start_if_due(now);
            }
            Timer::SwitchoverLapse => {
                if let Some(f) = &self.control.failover {
                    self.reason = Some(Reason::SwitchoverLapsed {
                        from: f.from.clone(),
                    });
                }
                self.lapsed_failover = self.control.failover.take();
                self.try_join(now);
            }
            Timer::Rejoin => {
                self.out_until = None;
                self.fence_watch = None;
                self.try_join(now);
            }
            Timer::PeekBreadcrumb => {
                let ticket = self.ticket();
                let next = now + self.renewal_interval();
                if let Some(w) = &mut self.fence_watch {
                    w.next = Some(next);
                    w.ticket = Some(ticket);
                }
                self.actions.push_back(Action::PeekBreadcrumb { ticket });
            }
            // The renewal timers run under a lease, as they always have; a renewal in
            // flight or due always has one.
            Timer::RenewalLate if self.lease.end.is_some() => {
                self.lease.doubt = true;
                self.reason = Some(Reason::RenewalLate);
            }
            Timer::Renewal if self.lease.end.is_some() && self.lease.in_flight.is_none() => {
                let ticket = self.ticket();
                self.lease.in_flight = Some((ticket, now));
                self.lease.next_renewal = None;
                self.actions.push_back(Action::Renew { ticket });
            }
            Timer::RenewalLate | Timer::Renewal => {}
            Timer::Demote => {
                self.reason = Some(Reason::LeaseEnding);
                self.stop_service(StopCause::Forced);
            }
            Timer::Kill => {
                self.lease.killed = true;
                self.undemoted = false;
                self.notice(
                    true,
                    "the lease ended with the service still running; killing it".into(),
                );
                self.actions.push_back(Action::KillService {
                    cause: KillCause::LeaseEnd,
                });
            }
        }
    }
}
