//! Steps 3a to 3c of SPEC §4 after winning the lock: read the cluster state, refuse an
//! epoch that is not new (§3, §3a), fence the old active (§5), commit the breadcrumb.

use super::{
    lease::Lease, leave::Leave, Action, ClusterState, Elector, FenceOf, FenceOrder, Phase, Reason,
    Step, Ticket, RETRY_DELAY,
};
use crate::record::{BreadcrumbView, Epoch, NodeRecord, Remembered, Version, WriteOutcome};
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
        // SPEC §6b: a stand-aside for a better-placed standby only on a hold's first read,
        // with nothing of ours under it: it releases the lock keeping the breadcrumb, and
        // one that named this node would have the next active fence it (the review of
        // stop 45). Any later read of this hold follows a write or a fence.
        let fresh = std::mem::take(&mut self.fresh_hold)
            && unknown_commit.is_none()
            && self.own_leftovers.is_none()
            && !matches!(&state.breadcrumb, BreadcrumbView::Record { record, .. }
                if self.is_ours(record));
        if state.own_service_gone && self.own_leftovers.take().is_some() {
            self.notice(
                false,
                "this node's own service, which outlived its stop, is gone now".into(),
            );
        }
        if let Some(own) = self.own_leftovers_forgotten(&state) {
            let ticket = self.await_state(epoch, unknown_commit);
            self.actions.push_back(Action::RestoreOwnBreadcrumb {
                ticket,
                epoch: own,
                version: state.breadcrumb.version(),
            });
            return;
        }
        if self.stopping {
            // Only here to learn whether an unknown commit went through, or to write our
            // own leftovers' breadcrumb back (see `on_stop_requested`): if it did, delete
            // our breadcrumb on the way out.
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
            self.reason = Some(Reason::FoundPaused);
            self.leave(Leave::StandAside);
            return;
        }
        if let Some(why) = self
            .switchover_excludes_us(now)
            .or_else(|| self.takeover_refusal(now))
        {
            self.reason = Some(why);
            self.leave(Leave::StandAside);
            return;
        }
        if let Some((above, failures)) = fresh
            .then(|| {
                // A new round since its stand-aside: a promotion history shows, or the
                // breadcrumb of one (history is written once, and may have failed: the
                // review of stop 47).
                let crumb = match &state.breadcrumb {
                    BreadcrumbView::Record { record, .. } => record.epoch,
                    _ => None,
                };
                self.better_placed_now(
                    &state.members,
                    state.own_position,
                    state.newest_history_epoch.max(crumb),
                    now,
                )
            })
            .flatten()
        {
            // SPEC §6b: the view this node joined on is up to a session timeout old; the
            // records read now may place another standby above it (one that received
            // more since). It releases the lock before anything is fenced or written, and
            // waits for that one as for any standby placed above it.
            self.stood_aside_for_better = Some((epoch, failures));
            self.higher_rival = true;
            self.rival_waited = false;
            self.reason = Some(Reason::BetterPlaced(above));
            self.leave(Leave::StandAside);
            return;
        }
        let control_version = state.control_version;
        let breadcrumb_version = state.breadcrumb.version();
        // Live members' services that outlived their stop, but for one the breadcrumb
        // names, that very service (fenced as the old active), and our own
        // (`own_leftovers`). Not by epoch alone: a store that forgot a rewrite can keep
        // a breadcrumb of that epoch naming an earlier start (the review of stop 39).
        self.leftovers_to_fence = state
            .member_leftovers
            .iter()
            .filter(|l| {
                !self.is_ours(l)
                    && !matches!(&state.breadcrumb, BreadcrumbView::Record { record, .. }
                        if record.same_incarnation(l)
                            && record.epoch == l.epoch
                            && record.same_service(l))
            })
            .cloned()
            .collect();
        let recorded = match &state.breadcrumb {
            BreadcrumbView::Record { record, .. } => Some(Some(record)),
            BreadcrumbView::Absent => Some(None),
            // Fenced as unknown below: nothing readable to write over.
            BreadcrumbView::Unreadable { .. } => None,
        };
        if let Some(recorded) = recorded {
            if let Some((active, check_alive)) = self.forgotten_active(recorded, &state) {
                if !self.epoch_is_new(epoch, recorded.and_then(|r| r.epoch), &state) {
                    return;
                }
                let ticket = self.await_state(epoch, None);
                self.alive_checked = check_alive.then(|| active.clone());
                self.actions.push_back(Action::RestoreBreadcrumb {
                    ticket,
                    record: active,
                    version: breadcrumb_version,
                    check_alive,
                });
                return;
            }
        }
        match &state.breadcrumb {
            BreadcrumbView::Record { record, .. } if self.is_ours(record) => {
                // A commit's record, at this lock's epoch: ours of this hold, unless our
                // own service outlived a stop. Then it is the breadcrumb of that service,
                // whose forgotten commit let the store give its epoch out again.
                let this_hold = record.epoch == Some(epoch)
                    && record.rewrite.is_none()
                    && self.own_leftovers.is_none();
                if this_hold {
                    if let Some(sent) = unknown_commit {
                        // Our unknown commit went through: the lease runs from its send time.
                        self.committed(epoch, sent, now);
                        return;
                    }
                } else if !self.epoch_is_new(epoch, record.epoch, &state) {
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
        self.fence_own_or_commit(epoch, breadcrumb_version, control_version, now);
    }

    /// The last steps before the commit, whatever else was fenced: while our own service
    /// outlived a stop, fence it (never this process); then each live member's service
    /// that outlived its stop. The simulation's seed 25694 found a node promoting beside
    /// one once the store forgot the breadcrumb naming it; the review of its fix, that
    /// the node whose service it is need not be the one that wins next.
    fn fence_own_or_commit(
        &mut self,
        epoch: Epoch,
        breadcrumb_version: Option<Version>,
        control_version: Version,
        now: Instant,
    ) {
        if let Some(own) = self.own_leftovers {
            let order = FenceOrder::OwnService(NodeRecord {
                node_id: self.cfg.node_id.clone(),
                incarnation: self.cfg.incarnation.clone(),
                epoch: Some(own),
                ..NodeRecord::default()
            });
            self.start_fence(epoch, order, breadcrumb_version, control_version);
        } else if let Some(leftover) = self.leftovers_to_fence.pop() {
            let node = leftover.node_id.clone();
            self.start_fence(
                epoch,
                FenceOrder::Node(leftover),
                breadcrumb_version,
                control_version,
            );
            self.reason = Some(Reason::FencingStuckService(node));
            if let Phase::Holding {
                step: Step::Fencing { of, .. },
                ..
            } = &mut self.phase
            {
                *of = FenceOf::Leftover;
            }
        } else {
            self.commit(epoch, breadcrumb_version, control_version, now);
        }
    }

    /// The epoch of our own service's breadcrumb when the store forgot it: that service
    /// outlived its stop (a process stuck in the kernel), the store has no breadcrumb of
    /// that epoch or a later one, and this node saw no other node commit since (which
    /// fenced it). Leaving the lock now would leave nothing for the next winner to fence
    /// (the simulation's seed 25694: the store forgot the commit the moment after it,
    /// this node won its lock again, refused the epoch it had seen, and the next node
    /// promoted beside the stuck service). The driver first tries to fence the service
    /// and writes nothing when it is gone; else the record goes back as a later rewrite
    /// of that epoch naming the service: never as one of this lock's epoch, which a
    /// standby could pair with this node's next commit.
    ///
    /// History does not count: this node's entry into `promoting` is written before the
    /// commit, and `fence --confirm` refuses while this warden lives. Not over an
    /// unreadable breadcrumb, which is fenced as an unknown active anyway.
    fn own_leftovers_forgotten(&mut self, state: &ClusterState) -> Option<Epoch> {
        let own = self.own_leftovers?;
        let kept = match &state.breadcrumb {
            BreadcrumbView::Absent => false,
            BreadcrumbView::Record { record, .. } => record.epoch.is_some_and(|e| e >= own),
            BreadcrumbView::Unreadable { .. } => true,
        };
        if kept
            || self
                .active
                .as_ref()
                .and_then(|a| a.epoch)
                .is_some_and(|e| e > own)
        {
            return None;
        }
        self.notice(
            true,
            format!(
                "the store keeps no breadcrumb of epoch {own}, under which this node's own \
                 service ran and could not be verified stopped: fencing it, else writing \
                 that breadcrumb back, naming the service, so that it is fenced before \
                 anyone promotes"
            ),
        );
        Some(own)
    }

    /// The newest active this node, or a live member (`ClusterState::member_memories`),
    /// saw commit, when the store keeps no trace of its epoch
    /// (no breadcrumb of it or of a later one, `breadcrumb` being the epoch the breadcrumb
    /// names; no history entry of a later epoch, nor a confirm of it) and it was seen in an earlier
    /// session than the one seeing node has now. The store forgot its commit (a restore, a crash within
    /// `appendfsync everysec`, a failover to a lagging replica) and may have kept its lock,
    /// which then expired: that active may still serve (a frozen warden in hooks mode
    /// leaves its database taking writes), and only memory names it (the simulation's
    /// seed 33926: two copies took writes; seed 308747: only a standby remembered it). Its record goes back into the
    /// breadcrumb before anything else, so that it is fenced as any old active is, and a
    /// fence that fails leaves what `status` and `fence --confirm` go by (seed 1875:
    /// fencing it from memory alone left the operator nothing to confirm). Not when a later
    /// promotion is in history, or an entry of that node's at a later epoch, or the
    /// operator's `fence --confirm` of it (a confirm stays done), nor when
    /// its warden lives and its member record says it stepped down or is stepping down
    /// (the driver reads it before writing: `remembered_alive`; stop 36's review found a
    /// planned switchover fencing a healthy old active whose history entries were trimmed).
    ///
    /// Why an earlier link (a session, or a reconnection within one): a store that forgets
    /// restarts or is restored, which breaks every connection to it. Redis and MySQL end a
    /// session at the join that finds another run of the server. ZooKeeper refuses a
    /// client that saw a newer zxid, but only until other clients' writes bring the
    /// ensemble's zxid past it: then the client is back in its old session (the
    /// simulation's seed 300191, where the sessions outlived the restore), so a
    /// reconnection counts as a new link too. Within one unbroken link a missing
    /// breadcrumb and history entry are the trace of a clean step-down before the
    /// active's history entry was written (seed 9899: SIGTERM while promoting); fencing
    /// it then failed, needlessly, and left the cluster to the operator.
    ///
    /// Also when the breadcrumb is that very active's at its epoch but an older rewrite
    /// of it (§4.3d) than the latest this node was told of, naming another service: the
    /// store forgot a start again under the same lock. Fencing by the older record finds
    /// its process gone and calls it fenced while the later one serves on (the
    /// simulation's seed 392502: a warden whose lease came back started its service
    /// again, froze, and the store forgot the rewrite naming the new one). The later
    /// rewrite is written back, in whatever link it was seen (a stored rewrite older than
    /// one seen is never the trace of a clean step-down), and whether or not that warden
    /// lives (it is fenced either way: only the record differs). A rewrite naming no
    /// service (written just before a start again) is written back too: a fence that
    /// cannot verify a named process gone does not call it fenced. The history names
    /// epochs, not rewrites: only an entry of a later epoch says this one is over.
    fn forgotten_active(
        &mut self,
        breadcrumb: Option<&NodeRecord>,
        state: &ClusterState,
    ) -> Option<(NodeRecord, bool)> {
        // This node's memory first, then each live member's: a winner that never saw the
        // active (restarted meanwhile) is told of it by a standby that followed it (the
        // simulation's seed 308747: only that standby remembered an active whose warden
        // was frozen and whose commit the store forgot). A member publishes only what it
        // saw in an earlier link than its current one (`Elector::remembered`).
        let own = self.active.clone().map(|active| {
            let earlier = self.active_unproven();
            let memory = Remembered {
                active,
                rewrite: self.active_rewrite.clone(),
            };
            ("this node".to_string(), memory, earlier)
        });
        let memories: Vec<(String, Remembered, bool)> = own
            .into_iter()
            .chain(
                state
                    .member_memories
                    .iter()
                    .filter(|(node, _)| *node != self.cfg.node_id)
                    .map(|(node, m)| {
                        (
                            format!("{node} (its member record says so)"),
                            m.clone(),
                            true,
                        )
                    }),
            )
            .filter(|(_, m, _)| !self.is_ours(&m.active) && m.active.epoch.is_some())
            .collect();
        let history_past = |node: &str, e: Epoch| {
            state.newest_history_epoch.is_some_and(|h| h > e)
                || state.history_by_node.get(node).is_some_and(|&h| h > e)
        };
        for (who, memory, _) in &memories {
            let (Some(b), Some(later), Some(e)) =
                (breadcrumb, &memory.rewrite, memory.active.epoch)
            else {
                continue;
            };
            if !(b.same_incarnation(later)
                && later.epoch == Some(e)
                && b.epoch == Some(e)
                && b.rewrite.unwrap_or(0) < later.rewrite.unwrap_or(0)
                && !b.same_service(later))
                || history_past(&later.node_id, e)
            {
                continue;
            }
            self.notice(
                true,
                format!(
                    "the store keeps an older breadcrumb of {} at epoch {e} (rewrite {}) \
                     than the one {who} saw written (rewrite {}, naming {}): the store \
                     forgot a start again; writing the later one back to fence that service \
                     before promoting",
                    later.node_id,
                    b.rewrite.unwrap_or(0),
                    later.rewrite.unwrap_or(0),
                    match (
                        later.service_pgid.or(later.service_pid),
                        &later.service_cgroup
                    ) {
                        (Some(p), _) => format!("process group {p}"),
                        (None, Some(c)) => format!("cgroup {c}"),
                        (None, None) => "no service".to_string(),
                    }
                ),
            );
            return Some((later.clone(), false));
        }
        // A trace of that commit's end (`KeptOf::ended`; the simulation's seed 255290: an
        // entry of the active's own epoch, written after the store forgot, is none).
        let kept = |a: &NodeRecord, e: Epoch| {
            crate::record::KeptOf {
                breadcrumb: breadcrumb.and_then(|b| b.epoch),
                newest_promotion: state.newest_history_epoch,
                node_entries: state.history_by_node.get(&a.node_id).copied(),
                node_confirmed: state.confirmed_by_node.get(&a.node_id).copied(),
            }
            .ended(e)
        };
        // The newest forgotten one (each promotion fenced the one before it); this node's
        // own memory on a tie.
        let mut newest: Option<(String, NodeRecord, Epoch)> = None;
        for (who, memory, earlier) in memories {
            let Some(e) = memory.active.epoch else {
                continue;
            };
            // (No veto by what this node saw in its current link: it learns the active
            // from the lock's record too, which can outlive the breadcrumb a restart
            // forgot; the review of stop 42 proposed one, and `tests/stores.rs` caught it.)
            if !earlier || kept(&memory.active, e) || newest.as_ref().is_some_and(|n| n.2 >= e) {
                continue;
            }
            newest = Some((who, memory.active, e));
        }
        let (who, active, e) = newest?;
        // The driver found that very active's warden alive and stepped down, just before:
        // not another one a member published since (the review of stop 42: the answer for
        // one record taken for a newer one, whose service may run on).
        let checked = self
            .alive_checked
            .as_ref()
            .is_some_and(|c| c.same_incarnation(&active) && c.epoch == active.epoch);
        if state.remembered_alive && checked {
            self.notice(
                false,
                format!(
                    "the store keeps no breadcrumb of epoch {e}, which {who} saw {} commit, \
                     but its warden lives and has stepped down: not fenced",
                    active.node_id
                ),
            );
            return None;
        }
        self.notice(
            true,
            format!(
                "the store keeps no breadcrumb of epoch {e}, which {who} saw {} commit, and \
                 no trace of its end (a later promotion, an operator's confirm): the store \
                 forgot it; writing its breadcrumb back to fence it \
                 before promoting",
                active.node_id
            ),
        );
        Some((active, true))
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
                    of,
                    breadcrumb_version,
                    control_version,
                },
        } = self.phase
        else {
            return;
        };
        if t != ticket {
            return;
        }
        if fenced {
            if of == FenceOf::OwnService {
                self.own_leftovers = None;
            }
            self.reason = Some(Reason::Fenced(summary));
            self.fence_own_or_commit(epoch, breadcrumb_version, control_version, now);
        } else {
            self.leftovers_to_fence.clear();
            self.reason = Some(match of {
                FenceOf::Breadcrumb => Reason::FenceFailed {
                    summary,
                    target: target.clone(),
                },
                FenceOf::OwnService => Reason::StuckServiceNotFenced {
                    summary,
                    node: None,
                },
                FenceOf::Leftover => Reason::StuckServiceNotFenced {
                    summary,
                    node: target.clone(),
                },
            });
            self.fence_watch = Some(super::leave::FenceWatch {
                version: breadcrumb_version,
                next: None,
                ticket: None,
            });
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
                // Control, the breadcrumb or the lock moved; the store does not say which.
                // The lock may not be ours any more: a store restored to before it was
                // taken keeps this session, and every commit conflicted for ever (the
                // simulation's seed 473271). Join again to learn it, as after a refused
                // renewal or rewrite: held still, the state is read again; another's, this
                // node stands by.
                self.reason = Some(Reason::StateChanged);
                self.lease = Lease::default();
                self.rejoin_fresh = false;
                self.must_rejoin = true;
                self.phase = Phase::Idle;
                self.try_join(now);
            }
            WriteOutcome::Unknown => self.read_state(epoch, Some(sent)),
            // SPEC §3a `replicas_ack`: the store could lose this promotion in a failover of
            // its own; it took the breadcrumb back where it could. Never promote on it:
            // release and back off like a failed promotion.
            WriteOutcome::NotDurable if self.stopping => self.leave(Leave::Stop),
            WriteOutcome::NotDurable => {
                self.reason = Some(Reason::PromotionFailed(
                    "the store did not have the promotion on its replicas in time \
                     (coordination.redis.replicas_ack)"
                        .into(),
                ));
                self.leave(Leave::PromotionFailed);
            }
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
        self.reason = Some(Reason::PromotionFailed(reason));
        self.leave(Leave::PromotionFailed);
    }

    pub(super) fn read_state(&mut self, epoch: Epoch, unknown_commit: Option<Instant>) {
        let ticket = self.await_state(epoch, unknown_commit);
        self.actions.push_back(Action::ReadState { ticket });
    }

    /// Waits for a state read under a fresh ticket, which the caller's action answers
    /// (a plain read, or one after a write-back).
    fn await_state(&mut self, epoch: Epoch, unknown_commit: Option<Instant>) -> Ticket {
        let ticket = self.ticket();
        self.phase = Phase::Holding {
            epoch,
            step: Step::Reading {
                ticket,
                unknown_commit,
            },
        };
        ticket
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
        self.reason = Some(match &order {
            FenceOrder::Node(r) => Reason::FencingNode(r.node_id.clone()),
            FenceOrder::Unreadable => Reason::FencingUnknown,
            FenceOrder::OwnLeftovers(_) => Reason::FencingOwnLeftovers,
            FenceOrder::OwnService(_) => Reason::FencingOwnService,
        });
        self.phase = Phase::Holding {
            epoch,
            step: Step::Fencing {
                ticket,
                target,
                of: match order {
                    FenceOrder::OwnService(_) => FenceOf::OwnService,
                    _ => FenceOf::Breadcrumb,
                },
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
            self.reason = Some(Reason::EpochSeenBefore { epoch, seen });
            self.leave(Leave::LostData);
            return false;
        }
        let newest = breadcrumb.max(history);
        self.epoch_seen = self.epoch_seen.max(newest);
        match newest {
            Some(n) if epoch <= n => {
                self.reason = Some(Reason::StaleEpoch { epoch, recorded: n });
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
        // A takeover only a named switchover allowed (priority 0; a failed follow under
        // `--force`) stands aside when that request lapsed since the state was read (while
        // fencing): the operator's command has said by then that it failed and that the
        // cluster elects normally, which never makes this node active (the simulation's
        // seed 53965 on the Redis backend: committed 156 ms after the lapse).
        if let Some(why @ (Reason::Priority0NotNamed | Reason::NotFollowing(_))) =
            self.takeover_refusal(now)
        {
            self.reason = Some(why);
            self.leave(Leave::StandAside);
            return;
        }
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
        self.new_round();
        // An active older than this promotion is nobody to follow any more: a follow of it
        // still owed (failed, or never run) would pass its older epoch to this node's
        // service after a demotion (the simulation's seed 61801: the follow hook passed
        // epoch 120 after the service had been promoted at 188). The next active is
        // followed when it commits.
        if self.active.as_ref().is_some_and(|a| a.epoch < Some(epoch)) {
            self.active = None;
            self.active_rewrite = None;
            self.follow_failed = None;
            self.follow_retry_at = None;
        }
        self.phase = Phase::Holding {
            epoch,
            step: Step::Serving,
        };
        self.breadcrumb_written = true;
        self.epoch_seen = self.epoch_seen.max(Some(epoch));
        // The commit's record names no service process (the service is down).
        self.names_earlier_start = false;
        self.forgetting = None;
        self.repin = false;
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
