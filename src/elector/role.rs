//! The role reported to operators (SPEC §4), derived from phase, service and lease after
//! every input, and the transition that says why it changed.

use super::{service::Svc, Action, Elector, Phase, Reason, Step, STABLE_RESET};
use crate::record::Role;
use std::time::Instant;

impl Elector {
    fn compute_role(&self, now: Instant) -> Role {
        match &self.phase {
            // Priority 0: in the cluster, but never taking the lock by itself.
            // Or waiting for a standby of higher priority to try first.
            // Or waiting for its follow hook to end before it tries.
            // Or a new session waiting one session timeout before its first try.
            // Or joining again after a join whose answer was lost: still in the election,
            // and a standby placed below must still let it try first (SPEC §6b; the
            // simulation's seed 98757: a store answering late made the best-placed
            // standby look `ineligible` for the 200 ms before its next try, and a standby
            // of a lower priority with less data took the lock then).
            Phase::Idle
                if (self.cfg.priority == 0
                    || self.rival_waited
                    || self.following.is_some()
                    || self.must_rejoin
                    || self.settling(now).is_some())
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
                            // A called-off switchover names the process running now
                            // before it promotes again (SPEC §6a.2).
                            Svc::Down if self.repin => Role::Promoting,
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

    pub(super) fn after_input(&mut self, now: Instant) {
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
        let reason = self.reason.take().unwrap_or(Reason::Unexplained(role));
        self.actions.push_back(Action::Transition {
            from,
            to: role,
            epoch: self.epoch(),
            reason,
            history: !matches!(
                (from, role),
                (Role::Ineligible, Role::Standby) | (Role::Standby, Role::Ineligible)
            ),
            held: role == Role::Promoting,
        });
        self.held = role == Role::Promoting;
    }
}
