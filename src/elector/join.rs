//! Sessions and the lock (SPEC §4.1, §4.2): who may join, when, and what a join's outcome
//! means.

use super::{
    lease::Lease, leave::Leave, service::Svc, Action, ControlView, Elector, Phase, Reason, Step,
    Ticket, LOST_DATA_RETRY, RETRY_DELAY,
};
use crate::record::JoinOutcome;
use std::time::{Duration, Instant};

impl Elector {
    pub(super) fn on_session_started(
        &mut self,
        control: ControlView,
        granted: Option<Duration>,
        now: Instant,
    ) {
        if !matches!(self.phase, Phase::Connecting) {
            return;
        }
        self.granted = granted;
        self.links += 1;
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
        self.session_since = Some(now);
        self.settle_said = false;
        if self.cfg.settle {
            self.notice(
                false,
                format!(
                    "a new session waits {} (the session timeout) before it tries the lock, so \
                     that every warden that saw the last promotion has registered first",
                    humantime::format_duration(self.session_timeout())
                ),
            );
        }
        if self.stopping {
            self.exit_when_down();
            return;
        }
        self.try_join(now);
    }

    /// The link with the store broke and was made again within the session
    /// ([`Event::Reconnected`]). The store may have restarted meanwhile and forgotten its
    /// last writes, the active's lock among them, with no trace of when: what this node saw
    /// before is from an earlier link (`forgotten_active`), and its next join waits one
    /// session timeout again, as a new session's does ([`Elector::settling`]), so that
    /// every lease of before has ended and every warden has written again what it saw (the
    /// driver rewrites the member record, which raises the floor). The simulation's seed
    /// 168438: a lock the store forgot vanished at once, not by its session's expiry, and
    /// a standby took it while the old active's lease still ran, with its breadcrumb
    /// forgotten too. Stores whose restart ends the session never send it.
    pub(super) fn on_reconnected(&mut self, now: Instant) {
        self.links += 1;
        if matches!(self.phase, Phase::Connecting | Phase::Exited) {
            return;
        }
        self.session_since = Some(now);
        // The store may have forgotten the round this node stood aside in: the better-
        // placed standby's hold of the lock and the failure its record counted (the
        // simulation's seed 27238: n1, placed above, took the lock and lost it to the
        // store's restart, which forgot both; n2, which had stood aside for n1 before,
        // took the lock and promoted without n1's writes as n1's own wait after the
        // re-made link ended). Every node waits out a re-made link as a new session, so
        // the next free lock is a new round, as after a new session: once per round, so
        // that a link that keeps breaking cannot keep this node standing aside for a
        // better-placed one that does not take the lock (the review of stop 49).
        if !std::mem::replace(&mut self.round_relinked, true) {
            self.rival_waited = false;
            self.stood_aside_for_better = None;
        }
        if self.cfg.settle && std::mem::take(&mut self.settle_said) {
            self.notice(
                false,
                format!(
                    "the link with the store was made again within the session; the store may \
                     have restarted, so this node waits {} (the session timeout) before it \
                     tries the lock again",
                    humantime::format_duration(self.session_timeout())
                ),
            );
        }
    }

    /// SPEC §6b: the next free lock is a new round (a new active, a commit of this
    /// node's, a new session): no stand-aside of the last one counts, and a re-made link
    /// may start the round anew once more.
    pub(super) fn new_round(&mut self) {
        self.stood_aside_for_better = None;
        self.round_relinked = false;
    }

    pub(super) fn on_session_lost(&mut self, now: Instant) {
        if matches!(self.phase, Phase::Connecting | Phase::Exited) {
            return;
        }
        self.retry_at = None;
        // A wait for a better-placed standby ends with the session: the next free lock
        // waits again (the review of stop 44).
        self.rival_waited = false;
        self.new_round();
        // The places read in that session: the next one reads them again (a read asked
        // for in it never comes: the review of stop 49).
        self.members_view.clear();
        self.members_asked = false;
        self.above_tries_at = None;
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
            self.reason = Some(Reason::SessionLost);
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

    pub(super) fn on_joined(&mut self, ticket: Ticket, outcome: JoinOutcome, now: Instant) {
        if self.phase != (Phase::Joining { ticket }) {
            return;
        }
        match outcome {
            JoinOutcome::Held { epoch } => {
                // A join that only learns whether an earlier create made the lock ours
                // may find a hold with writes under it already.
                self.fresh_hold = !self.must_rejoin || self.rejoin_fresh;
                self.must_rejoin = false;
                self.rejoin_fresh = false;
                self.phase = Phase::Holding {
                    epoch,
                    step: Step::Serving, // replaced at once below
                };
                self.breadcrumb_written = false;
                self.lease = Lease::default();
                if !self.may_join(now) || self.stopping {
                    self.reason = Some(Reason::NoLongerEligible);
                    self.leave(Leave::StandAside);
                } else if self.following.is_some() {
                    // A follow started while the join was out: never promote beside it.
                    self.reason = Some(Reason::StillFollowing);
                    self.leave(Leave::StandAside);
                } else if let Some(why) = self.takeover_refusal(now) {
                    self.reason = Some(why);
                    self.leave(Leave::StandAside);
                } else if let Some(until) = self.settling(now) {
                    // Won by a join that did not wait for the settle: the one that learns
                    // whether an earlier create went through, or one already out when the
                    // link broke (the simulation's seed 77861: a store that came back
                    // having forgotten the active's lock). The lock is kept, so that
                    // nobody else takes it; nothing is read or promoted before the settle
                    // ends ([`Elector::settling`]).
                    self.reason = Some(Reason::WonTheLock);
                    self.phase = Phase::Holding {
                        epoch,
                        step: Step::Reading {
                            ticket: self.ticket(),
                            unknown_commit: None,
                        },
                    };
                    self.retry_at = Some(until);
                    self.notice(
                        false,
                        format!(
                            "won the lock at epoch {epoch} within the session timeout of a new \
                             or re-made link with the store: holding it {} before promoting",
                            humantime::format_duration(until - now)
                        ),
                    );
                } else {
                    self.reason = Some(Reason::WonTheLock);
                    self.read_state(epoch, None);
                }
            }
            JoinOutcome::Exists { epoch } => {
                self.must_rejoin = false;
                self.phase = Phase::Standby;
                self.epoch_seen = self.epoch_seen.max(epoch);
                self.reason = Some(Reason::AnotherNodeHolds);
            }
            JoinOutcome::LostData(why) => {
                // No lock was taken: look again, quietly after the first time.
                self.must_rejoin = false;
                self.phase = Phase::Idle;
                self.retry_at = Some(now + LOST_DATA_RETRY);
                let why = Reason::StoreLostData(why);
                if self.reason.as_ref() != Some(&why) {
                    self.notice(true, why.to_string());
                    self.reason = Some(why);
                }
            }
            JoinOutcome::Unknown => {
                // The create may have gone through: find out by joining again, even if we
                // no longer want the lock (a held lock we do not know of would block all).
                // A first try's lost answer leaves the hold it may find fresh.
                self.rejoin_fresh = !self.must_rejoin || self.rejoin_fresh;
                self.must_rejoin = true;
                self.phase = Phase::Idle;
                self.retry_at = Some(now + RETRY_DELAY);
            }
        }
    }

    pub(super) fn on_lock_deleted(&mut self, now: Instant) {
        match self.phase {
            Phase::Standby => {
                self.phase = Phase::Idle;
                self.reason = Some(Reason::LockReleased);
                self.try_join(now);
            }
            Phase::Holding { .. } => self.lock_lost(now),
            _ => {}
        }
    }

    /// Until when a new session waits before its first join ([`ElectorConfig::settle`]).
    ///
    /// A store that forgot (a restore, a crash within `appendfsync everysec`, a failover to
    /// a lagging replica) may have lost the last promotion, the active's lock and its
    /// breadcrumb with it. A node that never saw that promotion and joined at once got its
    /// epoch again while the warden that had seen it was still reconnecting, or while the
    /// old active's lease still ran with nothing left to fence it by (the simulation's
    /// seeds 25035, 42005, 63898, 96451, 118499). Every session of before the loss was last
    /// heard of before this one began: one session timeout later each old lease has ended,
    /// and every warden that can reach the store has raised the floor with what it saw.
    pub(super) fn settling(&self, now: Instant) -> Option<Instant> {
        if !self.cfg.settle {
            return None;
        }
        let until = self.session_since? + self.session_timeout();
        (now < until).then_some(until)
    }

    /// Whether this node may enter the election now (§4.1, §4.8, §8).
    pub(super) fn may_join(&self, now: Instant) -> bool {
        ((self.eligible && self.follow_failed.is_none()) || self.forced_target(now))
            && !self.control.paused
            && self.out_until.is_none_or(|t| now >= t)
            && self.switchover_excludes_us(now).is_none()
            && self.svc == Svc::Down
            && !self.stopping
    }

    pub(super) fn try_join(&mut self, now: Instant) {
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
        if let Some(until) = self.settling(now).filter(|_| !self.must_rejoin) {
            self.retry_at = Some(until);
            return;
        }
        if self.cfg.settle && !self.settle_said {
            self.settle_said = true;
            self.notice(
                false,
                "the session has lived its session timeout: this node may take the lock".into(),
            );
        }
        // SPEC §6: `follow` repoints this node's service at the active; a promotion beside
        // it would run `promote` on a service being turned into a replica. Join once it
        // ends (`on_followed`), at most `hook_timeout` later.
        if self.following.is_some() && !self.must_rejoin {
            return;
        }
        if !self.must_rejoin && !self.named_target(now) {
            // SPEC §6: priority 0 never takes the lock by itself. §6b: a node placed below
            // a healthy standby lets it try first, once, for up to half a session timeout,
            // and tries at once when none is left above it (`on_members`).
            if self.cfg.priority == 0 {
                return;
            }
            if self.higher_rival && !self.rival_waited {
                // From when the last of them may try, if one waits out a new session.
                self.rival_waited = true;
                let cap = now + self.lease_len() + self.session_timeout();
                self.rival_wait_cap = Some(cap);
                let from = self.above_tries_at.filter(|t| *t > now).unwrap_or(now);
                self.retry_at = Some((from + self.lease_len()).min(cap));
                // Placed by members read a while ago: look again now at the record of the
                // one just above (one request per waiting node; one that is not above any
                // more has the members read, and a look at them that finds none above ends
                // the wait: `on_above_changed`, `on_members`). The
                // simulation's seed 158755: when the lock went free, a standby placed
                // itself by members read 2.3 s before (a tie, lost by its id), while the
                // records then placed it first; it waited for the other, which stood aside
                // for it (unseen: it watched nothing but the lock while it waited), and
                // promoted once its new session had settled, without 11 writes this node
                // held.
                let stale = self
                    .members_read_at
                    .is_none_or(|t| now.saturating_duration_since(t) > self.renewal_interval());
                if stale && !self.members_asked {
                    match self.placed_after.clone() {
                        Some(id) => self.actions.push_back(Action::ReadAbove { id }),
                        None => {
                            self.members_asked = true;
                            self.actions.push_back(Action::ReadMembers);
                        }
                    }
                }
                return;
            }
        }
        self.retry_at = None;
        self.rival_waited = false;
        let ticket = self.ticket();
        self.phase = Phase::Joining { ticket };
        self.actions.push_back(Action::Join { ticket });
    }
}
