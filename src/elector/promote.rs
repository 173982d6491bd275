//! Steps 3a to 3c of SPEC §4 after winning the lock: read the cluster state, refuse an
//! epoch that is not new (§3, §3a), fence the old active (§5), commit the breadcrumb.

use super::{
    lease::Lease, leave::Leave, Action, ClusterState, Elector, FenceOrder, Phase, Step, Ticket,
    RETRY_DELAY,
};
use crate::record::{BreadcrumbView, Epoch, Version, WriteOutcome};
use std::time::Instant;

impl Elector {
    pub(super) fn on_state_read(
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

    pub(super) fn on_fence_done(
        &mut self,
        ticket: Ticket,
        fenced: bool,
        summary: String,
        now: Instant,
    ) {
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

    pub(super) fn on_committed(&mut self, ticket: Ticket, outcome: WriteOutcome, now: Instant) {
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

    pub(super) fn on_commit_aborted(&mut self, ticket: Ticket, reason: String) {
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

    pub(super) fn read_state(&mut self, epoch: Epoch, unknown_commit: Option<Instant>) {
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
}
