//! Services that hold data (issue 32 point 2): in hooks mode with a follow hook, each
//! node's service is a copy of one replicated log, driven by the hooks as a shipped
//! recipe drives its server (`examples/redis/warden-redis` or
//! `examples/postgresql/warden-postgresql`, drawn per seed), and a client writes all the
//! time.
//!
//! - A copy is a primary (`REPLICAOF NO ONE`) or replicates another node's copy; it
//!   refuses writes while its `min-replicas-to-write` is out of reach (the unit starts it
//!   so, and `demote` sets it), and while a `CLIENT PAUSE` lasts. It accepts a write when
//!   its service runs (not hung), it is a primary, and it neither refuses nor is paused.
//! - `promote`: primary, accepting writes. `follow`: replicates the active the hook names,
//!   and stops refusing (it is read-only as a replica). `demote` without a successor:
//!   refuses writes. `demote` with one (a planned switchover, SPEC §6a): pauses writes,
//!   reads its own offset, waits (bounded) until the successor's copy holds everything
//!   it wrote, refuses writes, ends the pause; it fails when the successor did not catch
//!   up (warden then calls the switchover off) or has no address in its record. The
//!   PostgreSQL recipe first asks the successor whether it is a standby (one that does
//!   not answer as one fails the hook at once, the primary untouched), stops the server
//!   where Redis pauses it, and once the successor has everything leaves the old primary
//!   a standby of it (Redis waits for `follow`).
//! - Replication: a replica follows an address (a node's service on a machine and in a
//!   container, its pid namespace, as the follow hook's `WARDEN_ACTIVE_HOST` names it). At each client tick, a replica whose
//!   service runs, and whose upstream runs at that address on a machine it reaches,
//!   catches up with its upstream with a chance drawn per
//!   seed (so it lags by a few ticks). A replica whose log is not a prefix of its
//!   upstream's (it diverged, or is ahead) is resynced whole: it drops what its upstream
//!   lacks, as a Redis full resync or a PostgreSQL `pg_rewind` does.
//! - A copy is one service process's: a node's service started again (where its warden
//!   runs now) starts from the data of the last service at that address (its disk), else
//!   of the node's last service (a pod that moved carries its volume), in the role that
//!   one last had, and refuses writes until a hook changes that. A service left running
//!   elsewhere keeps its own copy.
//!
//! Ids of writes grow with time, and only the one copy that accepts a write appends
//! it, so every log is strictly increasing: membership is a binary search.
//!
//! Checked: never two copies that accept a write at once (at every client tick and at
//! every promotion); no acknowledged write lost in a planned switchover (the successor's
//! copy, promoted, holds every write any copy acknowledged, save those already lost
//! earlier); the epochs each copy's hooks pass only grow (below an epoch the store forgot
//! while no live warden had seen it, counted apart as SPEC §3a's accepted limit). Lost
//! writes of unplanned takeovers are counted, with how many of them a resync had dropped.

use super::plan::SimRng;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::time::Instant;
use warden::record::Epoch;

/// `true` is the shipped recipe: the successor's Redis becomes writable only through its
/// own warden's `promote`. `false` is the recipe before stop 32 (`FAILOVER TO` from the
/// old primary's `demote`: the successor is made a writable primary outside the lock), for
/// the README's seed-revert table only (never committed so).
pub const HANDOVER_INSIDE_LOCK: bool = true;

/// Where a replica finds its upstream: a node's service on a machine, in a pid
/// namespace (a container has an address of its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Address {
    pub node: usize,
    pub machine: usize,
    pub pid_ns: u64,
}

/// Which shipped recipe the hooks follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recipe {
    Redis,
    Postgres,
}

/// One service's copy of the log.
#[derive(Clone, Default)]
pub struct Copy {
    pub node: usize,
    /// Where its service runs.
    pub at: Option<Address>,
    pub log: Vec<u64>,
    /// The address it replicates; `None`: a primary.
    pub upstream: Option<Address>,
    /// Writes refused (`min-replicas-to-write` out of reach).
    pub refuses: bool,
    /// `CLIENT PAUSE WRITE` until then.
    pub paused_until: Option<Instant>,
    /// The greatest epoch a promote or follow hook passed it.
    pub epoch_seen: Option<Epoch>,
    /// Writes resyncs dropped from it so far (a copy started again carries its disk's).
    pub dropped: u64,
}

impl Copy {
    fn holds(&self, id: u64) -> bool {
        self.log.binary_search(&id).is_ok()
    }

    /// Whether this copy holds all of `want` (another copy's log, as it was), by its last
    /// entry: a log that holds a write holds the whole log its writer had before it.
    pub fn has_all(&self, want: Option<u64>) -> bool {
        want.is_none_or(|id| self.holds(id))
    }
}

/// How a promotion came about, for the lost-write counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Promotion {
    /// The successor of a demote that handed over.
    Planned,
    /// The old primary again, its switchover called off.
    CalledOff,
    /// Anything else: a takeover.
    Unplanned,
}

/// The data of every copy, the client's writes and what the checker counted.
pub struct Data {
    pub recipe: Recipe,
    /// By service id.
    pub copies: BTreeMap<u64, Copy>,
    rng: SimRng,
    /// The client writes every `tick`; a replica catches up at a tick with this chance.
    pub tick: Duration,
    catch_up: f64,
    next_write: u64,
    /// Each tick that took a write: (when, the first write it did not take), in order:
    /// which writes had been acknowledged by a moment ([`Data::acked_by`]).
    ack_marks: Vec<(Instant, u64)>,
    /// Acknowledged writes, in order (ids grow).
    pub acked: Vec<u64>,
    /// Acknowledged writes counted lost so far.
    lost: BTreeSet<u64>,
    /// The last demote that handed over: (from, to).
    /// (from node, to node, the successor's copy that had everything).
    pub handover: Option<(usize, usize, u64)>,
    /// The copy of the node that handed over, as it handed over.
    pub handover_from: Option<u64>,
    /// Another node committed after that handover, before its successor promoted, and
    /// the successor's copy's [`Copy::dropped`] at the handover.
    pub handover_over: bool,
    pub handover_dropped: u64,
    /// Promotions of the successor's node on another copy than the one handed over to
    /// (its warden moved, or a container of it was left running elsewhere).
    pub successor_moved: u32,
    pub handovers: u32,
    pub lost_planned: u64,
    pub lost_unplanned: u64,
    /// Unplanned promotions that lost acknowledged writes.
    pub lossy_takeovers: u32,
    /// Acknowledged writes a resync dropped from a copy.
    pub resync_drops: u64,
    /// Whether a copy took the last tick's writes.
    had_takers: bool,
    /// Each copy's log when the copies last stopped taking writes (the old primary's
    /// crash, demotion or pause).
    reached: BTreeMap<u64, Vec<u64>>,
    /// Takeovers whose new active lacked a write, not lost before, that it held when the
    /// copies last stopped taking writes (it was resynced from a copy with less between).
    pub reached_lost: u32,
    /// Epochs that went back at a copy below an epoch the store forgot (SPEC §3a's
    /// accepted limit).
    pub epoch_back_apart: u32,
    /// SPEC §6b (issue 33): whether the checks print each copy's position (its log's
    /// length, as a replication offset grows with what a copy received), and the chance
    /// that one prints garbage instead; drawn per seed, with a generator of their own
    /// (the draws of seeds from before are unchanged).
    pub positions: bool,
    garbage: f64,
    position_rng: SimRng,
    /// Acknowledged writes a takeover lost that an eligible standby's copy held (its
    /// warden alive, its service running and healthy, of the winner's priority or above):
    /// the most data should have won (issue 33).
    pub lost_better_held: u64,
    pub better_held_takeovers: u32,
    /// The same, where that standby had let go of a lock it won in the round, before
    /// fencing anything (its own look placed another above it then).
    pub lost_declined: u64,
    pub declined_takeovers: u32,
    /// Of those, the winner found its own breadcrumb (of an earlier promotion not
    /// verified stopped) under the lock: it could not stand aside (SPEC §6b).
    pub lost_own_crumb: u64,
    pub own_crumb_takeovers: u32,
    /// Of those, the better-placed standby's record as stored did not show it yet (a
    /// record lags its check).
    pub lost_record_lag: u64,
    pub record_lag_takeovers: u32,
}

impl Data {
    pub fn new(seed: u64) -> Data {
        let mut rng = SimRng::new(seed ^ 0xda7a_c0b1_e5a1_0004);
        let tick = Duration::from_millis(rng.range(10..=40));
        let catch_up = 0.3 + 0.6 * rng.unit();
        let recipe = if rng.chance(0.5) {
            Recipe::Redis
        } else {
            Recipe::Postgres
        };
        let mut position_rng = SimRng::new(seed ^ 0x9051_7105_0000_0033);
        let positions = position_rng.chance(0.8);
        let garbage = if position_rng.chance(0.2) { 0.05 } else { 0.0 };
        Data {
            recipe,
            copies: BTreeMap::new(),
            rng,
            tick,
            catch_up,
            next_write: 1,
            ack_marks: Vec::new(),
            acked: Vec::new(),
            lost: BTreeSet::new(),
            handover: None,
            handover_from: None,
            handover_over: false,
            handover_dropped: 0,
            successor_moved: 0,
            handovers: 0,
            lost_planned: 0,
            lost_unplanned: 0,
            lossy_takeovers: 0,
            resync_drops: 0,
            had_takers: false,
            reached: BTreeMap::new(),
            reached_lost: 0,
            epoch_back_apart: 0,
            positions,
            garbage,
            position_rng,
            lost_better_held: 0,
            better_held_takeovers: 0,
            lost_declined: 0,
            declined_takeovers: 0,
            lost_own_crumb: 0,
            own_crumb_takeovers: 0,
            lost_record_lag: 0,
            record_lag_takeovers: 0,
        }
    }

    /// What a passing check of copy `id` prints as its last line (SPEC §6b): its position,
    /// now and then garbage, or nothing in a seed whose checks print none.
    pub fn said(&mut self, id: u64) -> Option<String> {
        if !self.positions {
            return None;
        }
        if self.position_rng.chance(self.garbage) {
            return Some("offset: unknown".into());
        }
        Some(self.copies.get(&id)?.log.len().to_string())
    }

    /// Of `newly` lost writes, those that copy `id` holds.
    pub fn held_of(&self, id: u64, newly: &[u64]) -> u64 {
        self.copies
            .get(&id)
            .map_or(0, |c| newly.iter().filter(|w| c.holds(**w)).count() as u64)
    }

    /// A service of `at.node` starts (`id`) at `at`: from the data of the last service
    /// there (its disk), else of the node's last service (a pod that moved carries its
    /// volume), in that one's role, refusing writes.
    pub fn start(&mut self, id: u64, at: Address) {
        let node = at.node;
        let last = self
            .copies
            .values()
            .rev()
            .find(|c| c.at == Some(at))
            .or_else(|| self.copies.values().rev().find(|c| c.node == node))
            .cloned()
            .unwrap_or_default();
        self.copies.insert(
            id,
            Copy {
                node,
                at: Some(at),
                refuses: true,
                paused_until: None,
                ..last
            },
        );
    }

    /// The copies (service ids) that accept a write now; `running(id)`: that service runs
    /// and is not hung.
    pub fn writable(&self, now: Instant, running: impl Fn(u64) -> bool) -> Vec<u64> {
        self.copies
            .iter()
            .filter(|(id, c)| {
                c.upstream.is_none()
                    && !c.refuses
                    && c.paused_until.is_none_or(|t| t <= now)
                    && running(**id)
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// One client tick: replication (`source(id, node)`: the copy `id` reads from when it
    /// replicates `node`, if the two run on machines that reach each other), then a write
    /// to every copy that accepts one. Returns those copies: more than one is two copies
    /// taking writes at once.
    pub fn tick(
        &mut self,
        now: Instant,
        running: impl Fn(u64) -> bool,
        source: impl Fn(u64, Address) -> Option<u64>,
    ) -> Vec<u64> {
        let ids: Vec<u64> = self.copies.keys().copied().collect();
        for id in ids {
            let Some(up) = self.copies[&id].upstream else {
                continue;
            };
            if let Some(src) = source(id, up).filter(|s| *s != id) {
                if self.rng.chance(self.catch_up) {
                    self.sync(id, src);
                }
            }
        }
        let takers = self.writable(now, running);
        if takers.is_empty() && self.had_takers {
            self.reached = self
                .copies
                .iter()
                .map(|(id, c)| (*id, c.log.clone()))
                .collect();
        }
        self.had_takers = !takers.is_empty();
        for id in &takers {
            let w = self.next_write;
            self.next_write += 1;
            self.copies.get_mut(id).expect("listed").log.push(w);
            self.acked.push(w);
        }
        if !takers.is_empty() {
            self.ack_marks.push((now, self.next_write));
        }
        takers
    }

    /// Whether write `w` had been acknowledged at `t`.
    pub fn acked_by(&self, w: u64, t: Instant) -> bool {
        let i = self.ack_marks.partition_point(|(at, _)| *at <= t);
        i > 0 && w < self.ack_marks[i - 1].1
    }

    /// Copy `id` catches up with `src`: appends what it lacks, or is resynced whole.
    pub fn sync(&mut self, id: u64, src: u64) {
        let from = &self.copies[&src];
        let to = &self.copies[&id];
        let prefix = to.log.len() <= from.log.len() && to.log.last().is_none_or(|l| from.holds(*l));
        let (log, dropped) = if prefix {
            let mut log = to.log.clone();
            log.extend_from_slice(&from.log[to.log.len()..]);
            (log, 0)
        } else {
            let dropped = to.log.iter().filter(|w| !from.holds(**w)).count();
            (from.log.clone(), dropped as u64)
        };
        self.resync_drops += dropped;
        let c = self.copies.get_mut(&id).expect("read above");
        c.log = log;
        c.dropped += dropped;
    }

    /// Acknowledged writes, not counted lost yet, that copy `id` lacks.
    pub fn would_lose(&self, id: u64) -> Vec<u64> {
        let copy = &self.copies[&id];
        self.acked
            .iter()
            .filter(|w| !copy.holds(**w) && !self.lost.contains(w))
            .copied()
            .collect()
    }

    /// Acknowledged writes, not counted lost yet, that copy `id` lacks: counted lost now.
    pub fn lose_at_promotion(&mut self, id: u64, how: Promotion) -> u64 {
        let copy = &self.copies[&id];
        let newly: Vec<u64> = self
            .acked
            .iter()
            .filter(|id| !copy.holds(**id) && !self.lost.contains(id))
            .copied()
            .collect();
        let count = newly.len() as u64;
        let reached = self
            .reached
            .get(&id)
            .is_some_and(|r| newly.iter().any(|w| r.binary_search(w).is_ok()));
        self.lost.extend(newly);
        match how {
            Promotion::Planned | Promotion::CalledOff => self.lost_planned += count,
            Promotion::Unplanned => {
                self.lost_unplanned += count;
                self.lossy_takeovers += u32::from(count > 0);
                self.reached_lost += u32::from(reached);
            }
        }
        count
    }

    /// An epoch a hook passed `n`'s copy: `Err` with the one it saw before when it went
    /// back.
    pub fn see_epoch(&mut self, id: u64, epoch: Epoch) -> Result<(), Epoch> {
        let c = self
            .copies
            .get_mut(&id)
            .expect("a copy of a running service");
        match c.epoch_seen {
            Some(seen) if epoch < seen => Err(seen),
            _ => {
                c.epoch_seen = Some(epoch);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_ahead_or_diverged_is_resynced_whole_and_counts_what_it_dropped() {
        let mut d = Data::new(1);
        let at = |node| Address {
            node,
            machine: node,
            pid_ns: 1,
        };
        d.start(1, at(0));
        d.start(2, at(1));
        d.copies.get_mut(&1).unwrap().log = vec![1, 2, 3];
        d.copies.get_mut(&2).unwrap().log = vec![1, 2];
        d.sync(2, 1);
        assert_eq!(d.copies[&2].log, vec![1, 2, 3]);
        d.copies.get_mut(&2).unwrap().log = vec![1, 2, 3, 4];
        d.copies.get_mut(&1).unwrap().log = vec![1, 2, 5];
        d.acked = vec![1, 2, 3, 4, 5];
        d.sync(2, 1);
        assert_eq!(d.copies[&2].log, vec![1, 2, 5]);
        assert_eq!(d.resync_drops, 2);
        assert_eq!(d.lose_at_promotion(2, Promotion::Unplanned), 2);
        assert_eq!(d.lose_at_promotion(2, Promotion::Unplanned), 0);
    }
}
