//! SPEC §6 `follow` and `priority`: standbys follow each new active, and a node steps back
//! for one of higher priority or when its follow failed.

use super::{service::Svc, Action, Elector, Phase, Reason, Ticket};
use crate::record::{Epoch, Health, MemberRecord, NodeRecord, Role};
use std::time::Instant;

impl Elector {
    /// SPEC §6 `priority` and §6b: a healthy standby placed above this node among the
    /// members (a higher priority; the same or a higher one with a greater position; or,
    /// all else equal, a smaller node id) makes this node let it try first for a free
    /// lock; said once each time that changes. When none is left above it while it waits,
    /// it tries at once.
    pub(super) fn on_members(&mut self, members: &[MemberRecord], now: Instant) {
        let me = members.iter().find(|m| m.node.node_id == self.cfg.node_id);
        // Its own place from its record as read, as the others are placed (by records as
        // old as its own: a fresher own position would place every streaming replica
        // first in its own eyes, the review of stop 47); from what its check told it last
        // when the record has none (the simulation's seed 110414: read before its first
        // check printed, it said "unknown", and the node, which held the most, waited for
        // one with nothing until a standby with nothing took the lock).
        let mine = (
            self.cfg.priority,
            me.and_then(|m| m.position).or(self.own_position),
        );
        self.members_view = members.to_vec();
        let id = self.cfg.node_id.clone();
        let above: Vec<&MemberRecord> = standbys_above(members, mine, &id).collect();
        // The lowest of those above: the one just above this node.
        self.placed_after = above
            .iter()
            .min_by(|a, b| placement(key(a), key(b)))
            .map(|m| m.node.node_id.clone());
        // The one above as read now (its `after` too: see `watched_above`).
        self.above_record = above
            .iter()
            .find(|m| Some(&m.node.node_id) == self.placed_after.as_ref())
            .map(|m| (*m).clone());
        self.own_place = mine.1;
        self.members_asked = false;
        // (The simulation's seed 304442: the best-placed had just restarted and waited out
        // its new session when the lock went free; a standby of lower priority waited
        // half a session timeout for it, took the lock a moment before it could, and
        // promoted without its writes.)
        // Not for one whose record names this node as placed above it (crossed views: it
        // stood aside for this node, or will; the simulation's seed 158755: waited for
        // through its new session, it then took the lock and promoted, having stood aside
        // for this node once already, without the writes this node held).
        let me_id = self.cfg.node_id.clone();
        self.above_tries_at = above
            .iter()
            .filter(|m| m.after.as_deref() != Some(me_id.as_str()))
            .filter_map(|m| m.tries_at)
            .filter(|t| *t > now)
            .max()
            .map(|t| t.min(now + self.session_timeout()));
        if let (Some(t), Some(retry), Some(cap), true, Phase::Idle) = (
            self.above_tries_at,
            self.retry_at,
            self.rival_wait_cap,
            self.rival_waited,
            &self.phase,
        ) {
            self.retry_at = Some(retry.max(t + self.lease_len()).min(cap));
        }
        let rivals: Vec<&str> = above.iter().map(|m| m.node.node_id.as_str()).collect();
        // (Kept by every node: the active names it when it steps down by itself.)
        let best = best_placed(members, &self.cfg.node_id);
        if best.map(|m| &m.node.node_id) != self.best_standby.as_ref() {
            if let Some(m) = best {
                self.notice(
                    false,
                    format!(
                        "the best-placed standby besides this node is now {} (priority {}, \
                         position {}): the successor named if this node steps down",
                        m.node.node_id,
                        m.priority.unwrap_or(100),
                        m.position.map_or("unknown".to_string(), |p| p.to_string()),
                    ),
                );
            }
            self.best_standby = best.map(|m| m.node.node_id.clone());
        }
        let higher = !rivals.is_empty();
        // (A node of priority 0 never tries by itself: nobody is "first" for it.)
        // (Nor for the active: it tries for nothing.)
        if higher
            && !self.higher_rival
            && self.cfg.priority > 0
            && !matches!(self.phase, Phase::Holding { .. })
        {
            self.notice(
                false,
                format!(
                    "standbys placed above this one (priority {}, position {}): {}; they try \
                     first when the lock is free",
                    self.cfg.priority,
                    mine.1.map_or("unknown".to_string(), |p| p.to_string()),
                    rivals.join(", ")
                ),
            );
        }
        let was = self.higher_rival;
        self.higher_rival = higher;
        if was && !higher && self.rival_waited {
            // The one it waited for is gone, ineligible or holds the lock: no more waiting.
            self.retry_at = None;
            self.try_join(now);
        }
    }

    /// SPEC §6b: this node's check told another position: the members as last read are
    /// placed again by it (it may be placed first now, and try at once).
    pub(super) fn on_own_position(&mut self, position: Option<u64>, now: Instant) {
        if position == self.own_position {
            return;
        }
        self.own_position = position;
        if !self.members_view.is_empty() {
            let members = std::mem::take(&mut self.members_view);
            self.on_members(&members, now);
        }
    }

    /// SPEC §6b herd-free succession: the record of `id`, the standby this node watches
    /// instead of the lock, changed (`record`) or went (`None`). While it is still a
    /// healthy standby placed above this node, nothing changes (its position moved, say);
    /// else the members are read now to find the next one above, or none: then this node
    /// watches the lock, and tries at once if it is free.
    pub(super) fn on_above_changed(
        &mut self,
        id: &str,
        record: Option<Box<MemberRecord>>,
        own_position: Option<u64>,
    ) {
        if self.placed_after.as_deref() != Some(id) {
            return;
        }
        // Placed against what its own check says now (the review of stop 46: its record
        // as the members last read may be older, and two standbys could each find the
        // other above).
        let mine = (self.cfg.priority, own_position.or(self.own_place));
        let still_above = record.as_ref().is_some_and(|m| {
            standbys_above(std::slice::from_ref(m), mine, &self.cfg.node_id)
                .next()
                .is_some()
        });
        self.above_record = record.map(|r| *r);
        if !still_above && !self.members_asked {
            self.members_asked = true;
            self.actions.push_back(Action::ReadMembers);
        }
    }

    /// SPEC §6b: the eligible standbys that `members` (read with the cluster's state, so
    /// fresher than the view this node joined on) place above this node, which holds the
    /// lock and has fenced and written nothing yet, in words, with each one's failed
    /// takeovers (kept to look at next time); `None` when there are none, when a
    /// switchover names this node, for priority 0 (joins only when named), or when it
    /// stood aside for them once already in this round and none of them has failed a
    /// takeover since (seed 13358 of the simulation: the better-placed standby could not
    /// fence the dead active, whose machine was down, and sat out; the machine came back,
    /// and this node, which had stood aside once, promoted without the writes that one
    /// held, a second before it would have tried again).
    pub(super) fn better_placed_now(
        &self,
        members: &[MemberRecord],
        own_position: Option<u64>,
        newest_promotion: Option<Epoch>,
        now: Instant,
    ) -> Option<(String, super::FailedTakeovers)> {
        if self.cfg.priority == 0 || self.named_target(now) {
            return None;
        }
        // Its own place from what its check told it, not from its record: that may be a
        // newer role's by now, which tells no standby position (the review of stop 45).
        let me = members.iter().find(|m| m.node.node_id == self.cfg.node_id);
        let mine = (
            self.cfg.priority,
            own_position.or_else(|| me.and_then(|m| m.position)),
        );
        // Placed above by priority or by data, not by the node id alone: the id orders who
        // tries first for a free lock (herd-free), but a winner that stood aside for a
        // standby of the same priority and position gained no data, and handed the role
        // back to a node whose service had just failed and came back a standby
        // (`crashed_service_hands_over_without_fencing`, 3 runs in 16).
        let above: Vec<&MemberRecord> = standbys_above(members, mine, &self.cfg.node_id)
            .filter(|m| (m.priority.unwrap_or(100), m.position) > mine)
            .collect();
        let before = self
            .stood_aside_for_better
            .as_ref()
            .filter(|(at, _)| newest_promotion.is_none_or(|p| p <= *at))
            .map(|(_, before)| before);
        if let Some(before) = before {
            // A count of the same warden process that grew, or another process (a restart
            // of that node): the failures-in-a-row count would not do, reset as it is once
            // a node has stood by long enough (the review of stop 46). Or one it never
            // stood aside for in this round (the simulation's seed 282415: it stood aside
            // for n2, which stood aside for n1, restarted meanwhile and still waiting out
            // its new session; this node then promoted without the writes n1 held). At
            // most once per node and failure: the cluster is not kept without an active.
            let failed_or_new = above.iter().any(|m| {
                before
                    .iter()
                    .find(|(id, _, _)| *id == m.node.node_id)
                    .is_none_or(|(_, inc, f)| {
                        *inc != m.node.incarnation || m.failed_takeovers.unwrap_or(0) > *f
                    })
            });
            if !failed_or_new {
                return None;
            }
        }
        let words: Vec<String> = above
            .iter()
            .map(|m| {
                format!(
                    "{} (priority {}, position {})",
                    m.node.node_id,
                    m.priority.unwrap_or(100),
                    m.position.map_or("unknown".to_string(), |p| p.to_string())
                )
            })
            .collect();
        // Those above now, and those of the round it stood aside for before (kept, so that
        // each is stood aside for once per failure, whatever comes and goes above).
        let mut failures: super::FailedTakeovers = above
            .iter()
            .map(|m| {
                (
                    m.node.node_id.clone(),
                    m.node.incarnation.clone(),
                    m.failed_takeovers.unwrap_or(0),
                )
            })
            .collect();
        for old in before.into_iter().flatten() {
            if !failures.iter().any(|(id, _, _)| *id == old.0) {
                failures.push(old.clone());
            }
        }
        (!above.is_empty()).then(|| {
            (
                format!(
                    "{}; this node: priority {}, position {}",
                    words.join(", "),
                    mine.0,
                    mine.1.map_or("unknown".to_string(), |p| p.to_string())
                ),
                failures,
            )
        })
    }

    /// Why this node, holding the lock, must not promote although the cluster would let
    /// it (SPEC §6): its follow hook failed last, or it is not eligible, and no forced
    /// switchover names it; or it is of priority 0 and no switchover names it. Checked
    /// again once the lock is ours and once the state is read, since a request may lapse
    /// or a follow fail after the join went out (simulation seeds 1355 and 352).
    pub(super) fn takeover_refusal(&self, now: Instant) -> Option<Reason> {
        if !self.forced_target(now) {
            if let Some(why) = &self.follow_failed {
                return Some(Reason::NotFollowing(why.clone()));
            }
            if !self.eligible {
                return Some(Reason::NotEligible);
            }
        }
        if self.cfg.priority == 0 && !self.named_target(now) {
            return Some(Reason::Priority0NotNamed);
        }
        None
    }

    /// SPEC §6: another node committed its promotion. A standby with a `follow` hook
    /// points its service at it (once per epoch; a newer active replaces one not yet
    /// followed).
    pub(super) fn on_active_changed(&mut self, record: NodeRecord) {
        self.epoch_seen = self.epoch_seen.max(record.epoch);
        if self.is_ours(&record) || record.epoch.is_none() {
            return;
        }
        if record.epoch <= self.active.as_ref().and_then(|a| a.epoch) {
            return;
        }
        // Kept without a follow hook too: every hook is told the active (SPEC §6).
        self.active = Some(record);
        // A new active: the next free lock is a new round (SPEC §6b).
        self.new_round();
        self.active_rewrite = None;
        self.active_link = self.links;
        self.active_confirmed = None;
        if self.cfg.follow {
            self.follow_now();
        }
    }

    /// The active's breadcrumb rewritten within its epoch (§4.3d): kept beside the active
    /// (same incarnation and epoch) when it is a later rewrite than the last kept, so
    /// that a store which keeps an older rewrite has the later one written back
    /// (`forgotten_active`; the simulation's seed 392502). Never a new active: nothing is
    /// followed, and `active` stays the commit's record, which is what a forgotten commit
    /// writes back (stop 38's review: a rewrite seen before a later start again names a
    /// process that may be gone, which a fence would take as fenced).
    pub(super) fn on_active_rewritten(&mut self, record: NodeRecord) {
        let Some(active) = &self.active else {
            return;
        };
        let newest = self.active_rewrite.as_ref().unwrap_or(active);
        if !active.same_incarnation(&record)
            || active.epoch != record.epoch
            || record.rewrite.unwrap_or(0) <= newest.rewrite.unwrap_or(0)
        {
            return;
        }
        self.active_rewrite = Some(record);
    }

    /// Runs `follow` for the newest active, unless one runs, this node holds the lock, it
    /// follows that epoch already, or that active is this node in an earlier incarnation
    /// (restarted after it was the active: its service would be told to follow itself;
    /// whoever wins next fences what is left of it, this node included).
    pub(super) fn follow_now(&mut self) {
        let Some(active) = self.active.clone() else {
            return;
        };
        if active.node_id == self.cfg.node_id
            || self.following.is_some()
            || matches!(self.phase, Phase::Holding { .. } | Phase::Exited)
            || self.svc != Svc::Down
            || (self.followed == active.epoch && self.follow_failed.is_none())
        {
            return;
        }
        let ticket = self.ticket();
        self.following = Some(ticket);
        self.follow_retry_at = None;
        self.actions.push_back(Action::Follow { ticket, active });
    }

    pub(super) fn on_followed(&mut self, ticket: Ticket, ok: bool, detail: String, now: Instant) {
        if self.following != Some(ticket) {
            return;
        }
        self.following = None;
        let epoch = self.active.as_ref().and_then(|a| a.epoch);
        if ok {
            self.followed = epoch;
            if self.follow_failed.take().is_some() {
                self.notice(false, format!("the follow hook succeeded: {detail}"));
                self.reason = Some(Reason::FollowingAgain);
            }
            // A newer active may have come meanwhile; else this node may join again.
            self.follow_now();
            self.try_join(now);
        } else {
            // SPEC §6: ineligible until a follow succeeds, retried every rejoin_delay.
            let why = Reason::FollowFailed(detail);
            let words = why.to_string();
            if self.follow_failed.as_deref() != Some(words.as_str()) {
                self.notice(true, words.clone());
            }
            self.reason = Some(why);
            self.follow_failed = Some(words);
            self.follow_retry_at = Some(now + self.cfg.rejoin_delay);
            // A switchover with --force naming this node joins without a follow (a join
            // it put off while the follow ran, the lock free meanwhile, comes now; the
            // full suite's `standbys_follow_each_new_active_and_a_failed_follow_makes_them
            // _ineligible` saw it wait for ever, retrying the follow). Anyone else is
            // ineligible and stays out.
            self.try_join(now);
        }
    }
}

/// SPEC §6b: whether member `m` is placed above a node of `mine` (priority, position) and
/// id `id`: priority first (0 is never placed above anyone: it never takes the lock by
/// itself), then the position (a known one above an unknown one), then the smaller node
/// id, so that exactly one standby is best-placed.
fn placed_above(m: &MemberRecord, mine: (u16, Option<u64>), id: &str) -> bool {
    let theirs = m.priority.unwrap_or(100);
    theirs != 0 && placement((theirs, m.position, &m.node.node_id), (mine.0, mine.1, id)).is_gt()
}

/// SPEC §6b: the healthy standbys among `members` placed above node `id`, whose place is
/// `mine` (priority, position).
fn standbys_above<'a>(
    members: &'a [MemberRecord],
    mine: (u16, Option<u64>),
    id: &'a str,
) -> impl Iterator<Item = &'a MemberRecord> + 'a {
    members.iter().filter(move |m| {
        m.node.node_id != id
            && m.role == Role::Standby
            && m.health == Health::Healthy
            && placed_above(m, mine, id)
    })
}

/// SPEC §6b: how a node of (priority, position, node id) `a` is placed against `b`:
/// `Greater` when `a` is placed above. Priority first, then the position (a known one
/// above an unknown one, the greater above the smaller), then the smaller node id (the
/// one order every member and every operator sees alike), so that no two are placed
/// alike.
pub fn placement(a: (u16, Option<u64>, &str), b: (u16, Option<u64>, &str)) -> std::cmp::Ordering {
    a.0.cmp(&b.0)
        .then_with(|| a.1.cmp(&b.1))
        .then_with(|| b.2.cmp(a.2))
}

/// SPEC §6a.3 and §6b: the best-placed eligible standby among `members` other than
/// `except` (a healthy `standby` not of priority 0, which is never promoted by itself):
/// the successor a planned switchover names without `--to`, and that a node stepping down
/// by itself names.
pub fn best_placed<'a>(
    members: impl IntoIterator<Item = &'a MemberRecord>,
    except: &str,
) -> Option<&'a MemberRecord> {
    members
        .into_iter()
        .filter(|m| {
            m.node.node_id != except
                && m.role == Role::Standby
                && m.health == Health::Healthy
                && m.priority != Some(0)
        })
        .max_by(|a, b| placement(key(a), key(b)))
}

/// A member's place: (priority, position, node id).
fn key(m: &MemberRecord) -> (u16, Option<u64>, &str) {
    (
        m.priority.unwrap_or(100),
        m.position,
        m.node.node_id.as_str(),
    )
}
