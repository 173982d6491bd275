//! `control` as the election reads it (SPEC §8): pause, and switchover requests with their
//! deadlines.

use super::{
    leave::Leave, ControlView, Elector, FailoverView, Phase, Reason, Step, MAX_SWITCHOVER,
};
use std::time::Instant;

impl Elector {
    pub(super) fn on_control(&mut self, control: ControlView, now: Instant) {
        let was_paused = self.control.paused;
        self.control = self.bounded(control, now);
        // A fresh view: a request still in it, lapsed or not, is judged anew.
        self.lapsed_failover = None;
        if self.control.paused != was_paused {
            self.reason = Some(if self.control.paused {
                Reason::Paused
            } else {
                Reason::Resumed
            });
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
                    self.reason = Some(Reason::SwitchoverStepsUsDown);
                    self.leave(Leave::Cede);
                }
            }
            _ => {}
        }
    }

    /// A switchover request lapses at its deadline, but never later than
    /// [`MAX_SWITCHOVER`] after this node first saw it.
    pub(super) fn bounded(&mut self, mut control: ControlView, now: Instant) -> ControlView {
        let same = |a: &FailoverView, b: &FailoverView| {
            a.from == b.from && a.to == b.to && a.deadline == b.deadline
        };
        // SPEC §6a.2: a request this node called off is withdrawn for it, until `control`
        // no longer holds it.
        match (&self.called_off, &control.failover) {
            (Some(off), Some(f)) if same(off, f) => control.failover = None,
            (Some(_), _) => self.called_off = None,
            _ => {}
        }
        let Some(f) = control.failover.as_mut() else {
            self.failover_seen = None;
            return control;
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

    /// `failover --to <us> --force`: the operator's word that this node takes over even
    /// while ineligible.
    pub(super) fn forced_target(&self, now: Instant) -> bool {
        self.control.failover.as_ref().is_some_and(|f| {
            f.force && now < f.lapses_at && f.to.as_deref() == Some(self.cfg.node_id.as_str())
        })
    }

    /// A pending switchover keeps us out when it asks us to step down or names another node.
    pub(super) fn switchover_excludes_us(&self, now: Instant) -> Option<Reason> {
        let f = self.control.failover.as_ref()?;
        if now >= f.lapses_at {
            return None;
        }
        if f.from == self.cfg.node_id {
            return Some(Reason::SwitchoverMovesAway);
        }
        match &f.to {
            Some(to) if *to != self.cfg.node_id => {
                Some(Reason::SwitchoverNamesAnother { to: to.clone() })
            }
            _ => None,
        }
    }

    /// A pending switchover request names this node.
    pub(super) fn named_target(&self, now: Instant) -> bool {
        self.control.failover.as_ref().is_some_and(|f| {
            now < f.lapses_at && f.to.as_deref() == Some(self.cfg.node_id.as_str())
        })
    }
}
