//! The lease (SPEC §4 "The lease", §4.4): renewals, the doubt when one fails or is late,
//! and the demotion and kill it forces before the lease ends.

use super::{timer::Timer, Elector, Phase, Reason, Ticket, RETRY_DELAY};
use crate::record::WriteOutcome;
use std::time::{Duration, Instant};

/// The lease: how long our service may run without a fresh acknowledged write.
#[derive(Clone, Debug, Default)]
pub(super) struct Lease {
    /// Lease end; `None` before the first acknowledged write of this holding.
    pub(super) end: Option<Instant>,
    /// When the next renewal is due.
    pub(super) next_renewal: Option<Instant>,
    /// The renewal in flight and the instant it was sent.
    pub(super) in_flight: Option<(Ticket, Instant)>,
    /// A renewal failed or is late: the lease is in doubt (role `neutral`).
    pub(super) doubt: bool,
    /// SIGKILL was already ordered for this lease end.
    pub(super) killed: bool,
}

impl Elector {
    /// The lease: half the session timeout in force.
    pub(super) fn lease_len(&self) -> Duration {
        self.session_timeout() / 2
    }

    /// Renewals are due every sixth of the session timeout in force.
    pub(super) fn renewal_interval(&self) -> Duration {
        self.session_timeout() / 6
    }

    pub(super) fn on_renewed(&mut self, ticket: Ticket, outcome: WriteOutcome, now: Instant) {
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
                    self.reason = Some(Reason::LeaseRenewed);
                }
                self.lease.doubt = false;
                self.lease.killed = false;
                self.lease.next_renewal = Some(sent + self.renewal_interval());
                self.start_if_due(now);
                self.keep_breadcrumb(now);
            }
            WriteOutcome::Conflict => {
                self.reason = Some(Reason::LockNotOurs);
                // As for a rewrite (`rewrite_failed`): the lock may still be held by our
                // session (the store forgot the renewals that moved its version), so join
                // again to learn it, whatever this node may do now. A priority-0 node
                // kept it for ever, renewed by the keepalive, and nobody became active
                // (the simulation's seed 135015).
                self.rejoin_fresh = false;
                self.must_rejoin = true;
                self.lock_lost(now);
            }
            WriteOutcome::Unknown | WriteOutcome::NotDurable => {
                self.lease.doubt = true;
                self.reason = Some(Reason::RenewalFailed);
                self.lease.next_renewal = Some(now + RETRY_DELAY);
            }
        }
    }

    /// The lease end, if the lease is still valid: a start is allowed up to it.
    pub(super) fn lease_left(&self, now: Instant) -> Option<Instant> {
        let end = self.lease.end?;
        (now < end).then_some(end)
    }

    /// §4.4: the service must be down by the lease end. Once a renewal failed or is late,
    /// demotion starts at lease end less the graceful stop (at once if that is past); at
    /// the lease end whatever remains is killed, renewal doubt or not. The four deadlines
    /// are in `timer.rs`'s table.
    pub(super) fn lease_timers(&mut self, now: Instant) {
        self.fire_due(&Timer::LEASE, now);
    }
}
