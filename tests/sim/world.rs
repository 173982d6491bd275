//! The world of one seed: virtual time and the event queue, the network between the nodes
//! and the store, the managed services, the fence methods, the fault schedule, and the
//! invariants checked after every step.
//!
//! Everything random comes from one stream seeded with the seed, and events at
//! the same instant run in the order they were scheduled, so a seed replays exactly.

use super::node::{Input, Proc, ProcEv, Status};
use super::plan::{between, ms, FaultKind, Plan, SimRng, Time};
use super::store::{Crumb, Fact, Inc, Note, Req, Resp, Store};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::{Duration, Instant};
use warden::elector::{FenceOrder, MAX_REJOIN_DELAY};
use warden::record::{Epoch, Role};

/// How late a running (not frozen) warden may still have its service up after its lease
/// ended: the SIGKILL at the lease end, or the first timer after a SIGCONT, plus the exit.
pub const LEASE_SLACK: Duration = Duration::from_millis(50);
/// A killed or fenced warden is started again by systemd after this long (at most).
const SYSTEMD_RESTART: Duration = Duration::from_secs(3);
/// `service::KILL_WAIT`: how long a stop waits for the group to go after SIGKILL.
pub const KILL_WAIT: Duration = Duration::from_secs(5);
/// The fence chain's poll interval (`warden_fencing::process::POLL_INTERVAL`).
pub const POLL: Duration = Duration::from_millis(10);
/// Chance that a request's connection drops while it is in flight (during the faults).
const CONNECTION_LOSS: f64 = 0.01;
/// Last trace lines printed for a failing seed.
pub const TRACE_LINES: usize = 400;

pub struct Entry {
    at: Time,
    seq: u64,
    /// Boxed: the heap moves entries around, and events are large.
    ev: Box<Ev>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap is a max-heap: the earliest (time, seq) first.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

pub enum Ev {
    /// Something for one warden process (incarnation): dropped if it is gone, held while
    /// it is frozen.
    Proc {
        node: usize,
        inc: u32,
        pe: ProcEv,
    },
    /// A request reaching the store.
    Server {
        from: Inc,
        sid: u64,
        req_id: u64,
        req: Req,
        reply_lost: bool,
    },
    StoreTick,
    SvcExit {
        svc: u64,
    },
    Fault(usize),
    Resume {
        node: usize,
        inc: u32,
    },
    Heal {
        node: usize,
    },
    StoreUp,
    Restart {
        node: usize,
        after: u32,
    },
}

/// The client side of one ZooKeeper session (a `zk::Client` and its connection).
pub struct Conn {
    pub owner: Inc,
    /// FIFO: a request reaches the server, and a reply the client, no earlier than the
    /// previous one on this connection.
    pub last_req: Time,
    pub last_resp: Time,
    pub expired: bool,
    pub closed: bool,
}

pub struct Service {
    pub id: u64,
    pub owner: Inc,
    pub epoch: Epoch,
    pub since: Time,
    pub exit_at: Option<Time>,
    /// This copy ignores the stop signal: only SIGKILL ends it.
    pub ignores_term: bool,
    pub stuck_until: Time,
    /// Stop tasks polling for its exit.
    pub waiters: Vec<(Inc, u64)>,
}

#[derive(Default)]
struct Checks {
    last_start: Option<(Inc, Epoch)>,
    last_commit: Option<(Inc, Epoch)>,
    /// Every incarnation whose promotion was committed, and whether it has since deleted
    /// its own breadcrumb after a clean demotion.
    promoted: Vec<(Inc, bool)>,
}

/// What one seed did.
pub struct Outcome {
    pub failure: Option<String>,
    pub steps: u64,
    pub starts: u32,
    pub fences: u32,
    /// From the end of the faults to the first instant some node was active.
    pub recovery: Option<Duration>,
    pub virtual_time: Duration,
    pub trace: Vec<String>,
    pub plan: Plan,
}

pub struct World {
    pub plan: Plan,
    pub base: Instant,
    pub now: Time,
    pub rng: SimRng,
    seq: u64,
    queue: BinaryHeap<Entry>,
    pub store: Store,
    pub procs: Vec<Proc>,
    pub conns: IdMap<Conn>,
    pub services: Vec<Service>,
    next_id: u64,
    partitioned_until: Vec<Time>,
    isolated_until: Vec<Time>,
    store_down_until: Time,
    fence_fault: Option<(Time, bool)>,
    /// The latest end of a fault's effect (a heal, a resume, a restart).
    last_fault_effect: Time,
    checks: Checks,
    live_at: Option<Time>,
    pub failure: Option<String>,
    trace: Option<VecDeque<String>>,
    steps: u64,
    starts: u32,
    pub fences: u32,
}

/// Ids here are small counters: a multiplicative hash is enough, and much cheaper than
/// SipHash in a debug build.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8 | u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A map keyed by an id.
pub type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// Invariant 4: the last promotion, if `who`'s with `epoch` does not come after it (only the
/// same incarnation may repeat an epoch).
fn went_back(last: Option<(Inc, Epoch)>, who: Inc, epoch: Epoch) -> Option<(Inc, Epoch)> {
    last.filter(|&(prev, e)| epoch < e || (epoch == e && prev != who))
}

pub fn name(who: Inc) -> String {
    format!("n{}#{}", who.0 + 1, who.1)
}

impl World {
    pub fn new(seed: u64, nodes: usize, max_faults: usize, trace: bool) -> World {
        let mut rng = SimRng::new(seed);
        let plan = super::plan::draw(&mut rng, nodes, max_faults);
        let store = Store::new(nodes, plan.cfg.session_timeout, plan.cfg.tick);
        // The one clock read: instants are only ever compared with each other.
        let base = Instant::now();
        let mut w = World {
            base,
            now: Duration::ZERO,
            rng,
            seq: 0,
            queue: BinaryHeap::new(),
            store,
            procs: Vec::with_capacity(nodes),
            conns: IdMap::default(),
            services: Vec::new(),
            next_id: 1,
            partitioned_until: vec![Duration::ZERO; nodes],
            isolated_until: vec![Duration::ZERO; nodes],
            store_down_until: Duration::ZERO,
            fence_fault: None,
            last_fault_effect: Duration::ZERO,
            checks: Checks::default(),
            live_at: None,
            failure: None,
            trace: trace.then(VecDeque::new),
            steps: 0,
            starts: 0,
            fences: 0,
            plan,
        };
        for i in 0..w.plan.faults.len() {
            let at = w.plan.faults[i].at;
            w.push(at, Ev::Fault(i));
        }
        let tick = w.plan.cfg.tick;
        w.push(tick, Ev::StoreTick);
        for node in 0..nodes {
            let p = Proc::new(&w.plan.cfg, node, 0);
            w.procs.push(p);
        }
        w
    }

    // ----- plumbing ------------------------------------------------------------------

    pub fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub fn instant(&self) -> Instant {
        self.base + self.now
    }

    pub fn offset(&self, i: Instant) -> Time {
        i.saturating_duration_since(self.base)
    }

    /// Something for incarnation `who` at `at` (dropped if another one runs by then).
    pub fn push_proc(&mut self, at: Time, (node, inc): Inc, pe: ProcEv) {
        self.push(at, Ev::Proc { node, inc, pe });
    }

    pub fn push(&mut self, at: Time, ev: Ev) {
        self.seq += 1;
        self.queue.push(Entry {
            at,
            seq: self.seq,
            ev: Box::new(ev),
        });
    }

    pub fn tracing(&self) -> bool {
        self.trace.is_some()
    }

    pub fn log(&mut self, line: impl FnOnce() -> String) {
        if let Some(t) = &mut self.trace {
            if t.len() >= TRACE_LINES {
                t.pop_front();
            }
            t.push_back(format!("{:>10.4}  {}", self.now.as_secs_f64(), line()));
        }
    }

    pub fn fail(&mut self, why: String) {
        if self.failure.is_none() {
            self.log(|| format!("VIOLATION: {why}"));
            self.failure = Some(why);
        }
    }

    pub fn in_faults(&self) -> bool {
        self.now < self.plan.faults_end
    }

    /// One network hop: mostly fast, sometimes slow, during the faults sometimes past the
    /// operation timeout (a stalled server or a congested link).
    pub fn latency(&mut self) -> Duration {
        let r = self.rng.unit();
        if r < 0.90 {
            between(&mut self.rng, Duration::from_micros(200), ms(10))
        } else if r < 0.99 || !self.in_faults() {
            between(&mut self.rng, ms(10), ms(50))
        } else if r < 0.995 {
            between(&mut self.rng, ms(50), ms(200))
        } else {
            let hi = self.plan.cfg.op_timeout() * 2;
            between(&mut self.rng, ms(200), hi)
        }
    }

    /// A tokio task getting to run.
    pub fn task_delay(&mut self) -> Duration {
        between(&mut self.rng, Duration::ZERO, ms(1))
    }

    pub fn partitioned(&self, node: usize) -> bool {
        self.now < self.partitioned_until[node]
    }

    fn host_reachable(&self, node: usize) -> bool {
        self.now >= self.isolated_until[node]
    }

    pub fn fence_fault(&self) -> Option<bool> {
        self.fence_fault
            .filter(|(until, _)| self.now < *until)
            .map(|(_, hang)| hang)
    }

    pub fn proc_alive(&self, who: Inc) -> bool {
        let p = &self.procs[who.0];
        p.inc == who.1 && matches!(p.status, Status::Running | Status::Frozen)
    }

    // ----- the run -------------------------------------------------------------------

    fn quiet_from(&self) -> Time {
        self.plan.faults_end.max(self.last_fault_effect)
    }

    /// After the faults, with a healthy store and working fences, some node is active
    /// within this: sessions of crashed or fenced wardens expire (1), a restarted warden
    /// waits for its predecessor's session (2), a standby that failed to fence during the
    /// faults sits out its back-off (at most 30s) before it tries again and wins (3).
    fn liveness_bound(&self) -> Duration {
        self.plan.cfg.session_timeout * 3 + MAX_REJOIN_DELAY
    }

    fn tail(&self) -> Duration {
        self.plan.cfg.session_timeout * 2
    }

    pub fn run(mut self) -> Outcome {
        for node in 0..self.procs.len() {
            self.drain(node);
        }
        let mut spins = 0u32;
        let mut last_timer: Option<(usize, Time)> = None;
        loop {
            let next_q = self.queue.peek().map(|e| e.at);
            let next_t = self
                .procs
                .iter()
                .enumerate()
                .filter(|(_, p)| p.status == Status::Running)
                .filter_map(|(i, p)| p.timer.map(|t| (t, i)))
                .min();
            let (at, timer) = match (next_q, next_t) {
                (Some(q), Some((t, n))) if t < q => (t, Some(n)),
                (Some(q), _) => (q, None),
                (None, Some((t, n))) => (t, Some(n)),
                (None, None) => break,
            };
            let at = at.max(self.now);
            let deadline = self.quiet_from() + self.liveness_bound();
            if self.live_at.is_none() && at > deadline {
                self.now = deadline;
                let roles = self.roles();
                self.fail(format!(
                    "liveness: no node became active within {:?} after the faults ended at \
                     {:.3}s (roles: {roles})",
                    self.liveness_bound(),
                    self.quiet_from().as_secs_f64()
                ));
                break;
            }
            if let Some(l) = self.live_at {
                if at > l + self.tail() {
                    break;
                }
            }
            self.now = at;
            self.steps += 1;
            match timer {
                Some(node) => {
                    if last_timer == Some((node, at)) {
                        spins += 1;
                        if spins > 1000 {
                            let p = &self.procs[node];
                            let who = (node, p.inc);
                            self.fail(format!(
                                "{}: poll_timeout keeps returning {:?} after handle_timeout at \
                                 that instant (the driver would spin)",
                                name(who),
                                at
                            ));
                            break;
                        }
                    } else {
                        spins = 0;
                        last_timer = Some((node, at));
                    }
                    self.fire_timer(node);
                }
                None => {
                    let e = self.queue.pop().expect("peeked");
                    self.dispatch(*e.ev);
                }
            }
            self.check_step();
            if self.failure.is_some() {
                break;
            }
            if self.live_at.is_none() && self.now >= self.quiet_from() && self.someone_active() {
                self.live_at = Some(self.now);
                let d = self.now - self.quiet_from();
                self.log(|| format!("LIVE: a node is active {d:?} after the faults ended"));
            }
            if self.steps > 20_000_000 {
                self.fail("runaway: over 20M steps".into());
                break;
            }
        }
        let recovery = self.live_at.map(|l| l - self.quiet_from().min(l));
        Outcome {
            failure: self.failure.take(),
            steps: self.steps,
            starts: self.starts,
            fences: self.fences,
            recovery,
            virtual_time: self.now,
            trace: self.trace.take().map(Vec::from).unwrap_or_default(),
            plan: self.plan,
        }
    }

    fn roles(&self) -> String {
        self.procs
            .iter()
            .map(|p| {
                format!(
                    "{} {:?} {}",
                    name((p.node, p.inc)),
                    p.status,
                    p.elector.role()
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn someone_active(&self) -> bool {
        self.procs.iter().any(|p| {
            p.status == Status::Running
                && p.elector.role() == Role::Active
                && p.service.is_some_and(|s| self.service_alive(s))
        })
    }

    fn fire_timer(&mut self, node: usize) {
        let now = self.instant();
        self.procs[node].elector.handle_timeout(now);
        self.drain(node);
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::Proc { node, inc, pe } => {
                if matches!(pe, ProcEv::Reply { .. } | ProcEv::Note { .. })
                    && self.partitioned(node)
                {
                    // A watch event is not lost: the client re-arms its watches when it
                    // reconnects and the server sends what it missed.
                    if let ProcEv::Note {
                        sid,
                        note: note @ Note::LockWatch { .. },
                    } = pe
                    {
                        let at = self.partitioned_until[node] + self.latency();
                        if self.store.sessions.get(&sid).is_some_and(|s| s.alive) {
                            self.push_proc(at, (node, inc), ProcEv::Note { sid, note });
                        }
                    }
                    return;
                }
                let p = &mut self.procs[node];
                if p.inc != inc {
                    return;
                }
                match p.status {
                    Status::Dead | Status::Exited => {}
                    Status::Frozen => p.deferred.push(pe),
                    Status::Running => self.proc_event(node, pe),
                }
            }
            Ev::Server {
                from,
                sid,
                req_id,
                req,
                reply_lost,
            } => self.serve(from, sid, req_id, req, reply_lost),
            Ev::StoreTick => {
                let now = self.now;
                self.store.tick(now);
                self.after_store();
                let tick = self.plan.cfg.tick;
                self.push(now + tick, Ev::StoreTick);
            }
            Ev::SvcExit { svc } => self.svc_exit(svc),
            Ev::Fault(i) => self.fault(i),
            Ev::Resume { node, inc } => {
                let p = &mut self.procs[node];
                if p.inc != inc || p.status != Status::Frozen {
                    return;
                }
                p.status = Status::Running;
                p.resumed_at = Some(self.now);
                let deferred = std::mem::take(&mut p.deferred);
                self.last_fault_effect = self.last_fault_effect.max(self.now);
                self.log(|| format!("{} resumed (SIGCONT)", name((node, inc))));
                let now = self.now;
                for pe in deferred {
                    self.push_proc(now, (node, inc), pe);
                }
            }
            Ev::Heal { node } => {
                if !self.partitioned(node) {
                    self.last_fault_effect = self.last_fault_effect.max(self.now);
                    self.log(|| format!("n{} reconnected to the store", node + 1));
                }
            }
            Ev::StoreUp => {
                if self.now >= self.store_down_until && self.store.down {
                    self.store.down = false;
                    let now = self.now;
                    self.store.renew_all_sessions(now);
                    self.last_fault_effect = self.last_fault_effect.max(now);
                    self.log(|| "the store has a quorum again".into());
                }
            }
            Ev::Restart { node, after } => {
                let p = &self.procs[node];
                if p.inc != after || matches!(p.status, Status::Running | Status::Frozen) {
                    return;
                }
                let inc = after + 1;
                self.procs[node] = Proc::new(&self.plan.cfg, node, inc);
                self.last_fault_effect = self.last_fault_effect.max(self.now);
                self.log(|| format!("{} started", name((node, inc))));
                self.drain(node);
            }
        }
    }

    // ----- the store and the network -------------------------------------------------

    /// Sends a request on connection `sid`; `req_id` 0 means nobody waits for the reply.
    pub fn send(&mut self, sid: u64, req_id: u64, req: Req) {
        let Some(conn) = self.conns.get(&sid) else {
            return;
        };
        let owner = conn.owner;
        if conn.closed {
            return;
        }
        if conn.expired {
            // The client knows: every call fails at once.
            if req_id != 0 {
                let at = self.now + self.task_delay();
                let resp = Resp::Err(super::store::Fail::Expired);
                self.push_proc(at, owner, ProcEv::Reply { sid, req_id, resp });
            }
            return;
        }
        let lat = self.latency();
        let loss = self.in_faults() && self.rng.chance(CONNECTION_LOSS);
        let conn = self.conns.get_mut(&sid).expect("checked");
        let arrival = (self.now + lat).max(conn.last_req);
        conn.last_req = arrival;
        if loss {
            // The connection drops with the request in flight: the client reports a
            // connection loss; the request may or may not have reached the server.
            if req_id != 0 {
                let at = self.now + self.latency();
                let resp = Resp::Err(super::store::Fail::Unknown);
                self.push_proc(at, owner, ProcEv::Reply { sid, req_id, resp });
            }
            if !self.rng.chance(0.5) {
                return;
            }
        }
        self.push(
            arrival,
            Ev::Server {
                from: owner,
                sid,
                req_id,
                req,
                reply_lost: loss,
            },
        );
    }

    fn serve(&mut self, from: Inc, sid: u64, req_id: u64, req: Req, reply_lost: bool) {
        if self.store.down || self.partitioned(from.0) {
            return;
        }
        let now = self.now;
        let resp = self.store.apply(now, from, sid, &req);
        if self.tracing() && !matches!(req, Req::Ping) {
            let line = format!("store <- {} s{sid} {req:?} => {resp:?}", name(from));
            self.log(|| line);
        }
        self.after_store();
        if req_id != 0 && !reply_lost {
            self.reply(sid, ProcEv::Reply { sid, req_id, resp });
        }
    }

    /// Sends something from the server to the client of `sid`, in order on its connection.
    fn reply(&mut self, sid: u64, pe: ProcEv) {
        let lat = self.latency();
        let Some(conn) = self.conns.get_mut(&sid) else {
            return;
        };
        if conn.closed {
            return;
        }
        let at = (self.now + lat).max(conn.last_resp);
        conn.last_resp = at;
        let owner = conn.owner;
        self.push_proc(at, owner, pe);
    }

    fn after_store(&mut self) {
        for (sid, note) in std::mem::take(&mut self.store.outbox) {
            self.reply(sid, ProcEv::Note { sid, note });
        }
        for fact in std::mem::take(&mut self.store.facts) {
            self.fact(fact);
        }
    }

    pub fn open_conn(&mut self, owner: Inc) -> u64 {
        let sid = self.id();
        self.conns.insert(
            sid,
            Conn {
                owner,
                last_req: self.now,
                last_resp: self.now,
                expired: false,
                closed: false,
            },
        );
        sid
    }

    /// The last clone of the client is dropped: it closes the session.
    pub fn close_conn(&mut self, sid: u64) {
        let Some(conn) = self.conns.get(&sid) else {
            return;
        };
        if conn.closed {
            return;
        }
        if !conn.expired {
            self.send(sid, 0, Req::CloseSession);
        }
        if let Some(c) = self.conns.get_mut(&sid) {
            c.closed = true;
        }
    }

    // ----- services ------------------------------------------------------------------

    pub fn service_alive(&self, svc: u64) -> bool {
        self.services.iter().any(|s| s.id == svc)
    }

    /// The service of `owner` starts with `epoch`; invariants 1, 2 and 4 are checked here.
    pub fn spawn_service(&mut self, owner: Inc, epoch: Epoch) -> u64 {
        let id = self.id();
        self.starts += 1;
        // (1) Never two services up at the same instant.
        if let Some(other) = self.services.first() {
            let (o, e, since) = (other.owner, other.epoch, other.since);
            self.fail(format!(
                "two services up: {} starts with epoch {epoch} while the service of {} \
                 (epoch {e}, up since {:.3}s) still runs",
                name(owner),
                name(o),
                since.as_secs_f64()
            ));
        }
        // (2) Every earlier promoted incarnation is dead (crashed, fenced, exited) or stepped
        // down cleanly (deleted its own breadcrumb after its service stopped).
        let promoted = self.checks.promoted.clone();
        for (j, stepped_down) in promoted {
            if j != owner && !stepped_down && self.proc_alive(j) {
                self.fail(format!(
                    "{} starts its service with epoch {epoch} while {} (promoted earlier) is \
                     neither fenced, stopped nor stepped down",
                    name(owner),
                    name(j)
                ));
            }
        }
        // (4) Epochs of successive promotions only grow.
        if let Some((prev, e)) = went_back(self.checks.last_start, owner, epoch) {
            self.fail(format!(
                "epoch went back: {} starts with epoch {epoch} after {} started with {e}",
                name(owner),
                name(prev)
            ));
        }
        self.checks.last_start = Some((owner, epoch));
        let ignores_term = self.rng.chance(0.2);
        self.services.push(Service {
            id,
            owner,
            epoch,
            since: self.now,
            exit_at: None,
            ignores_term,
            stuck_until: Duration::ZERO,
            waiters: Vec::new(),
        });
        self.log(|| format!("SERVICE {id} of {} UP with epoch {epoch}", name(owner)));
        id
    }

    fn schedule_exit(&mut self, svc: u64, at: Time) {
        let Some(s) = self.services.iter_mut().find(|s| s.id == svc) else {
            return;
        };
        let at = at.max(s.stuck_until);
        if s.exit_at.is_some_and(|e| e <= at) {
            return;
        }
        s.exit_at = Some(at);
        self.push(at, Ev::SvcExit { svc });
    }

    pub fn sigterm(&mut self, svc: u64) {
        let Some(s) = self.services.iter().find(|s| s.id == svc) else {
            return;
        };
        if s.ignores_term {
            return;
        }
        let hi = self.plan.cfg.stop_timeout.mul_f64(1.5).max(ms(2));
        let at = self.now + between(&mut self.rng, ms(1), hi);
        self.schedule_exit(svc, at);
    }

    pub fn sigkill(&mut self, svc: u64) {
        let at = self.now + between(&mut self.rng, Duration::ZERO, ms(2));
        self.schedule_exit(svc, at);
    }

    fn svc_exit(&mut self, svc: u64) {
        let Some(i) = self.services.iter().position(|s| s.id == svc) else {
            return;
        };
        let s = &self.services[i];
        if s.exit_at.is_none_or(|e| e > self.now) {
            return; // a stale exit event; a later one is scheduled
        }
        let s = self.services.remove(i);
        self.log(|| format!("SERVICE {} of {} DOWN", s.id, name(s.owner)));
        let now = self.now;
        self.push_proc(now, s.owner, ProcEv::Input(Input::Exited(svc)));
        for (who, task) in s.waiters {
            let at = now + between(&mut self.rng, Duration::ZERO, POLL);
            self.push_proc(at, who, ProcEv::Wake { task });
        }
    }

    pub fn add_waiter(&mut self, svc: u64, who: Inc, task: u64) {
        if let Some(s) = self.services.iter_mut().find(|s| s.id == svc) {
            s.waiters.push((who, task));
        }
    }

    /// `kill -9` of a warden, or a fence of its incarnation: its service dies with it
    /// (parent-death signal) and systemd starts it again later.
    pub fn kill_proc(&mut self, who: Inc, why: &str, restart: Duration) {
        if !self.proc_alive(who) {
            return;
        }
        let p = &mut self.procs[who.0];
        p.status = Status::Dead;
        p.deferred.clear();
        p.tasks.clear();
        let line = format!("{} killed ({why})", name(who));
        self.log(|| line);
        self.sigkill_all(who);
        let at = self.now + restart;
        self.push(
            at,
            Ev::Restart {
                node: who.0,
                after: who.1,
            },
        );
    }

    // ----- fencing -------------------------------------------------------------------

    /// The fence chain's verdict at the end of its run, with its effects.
    pub fn fence_now(
        &mut self,
        fencer: Inc,
        order: &FenceOrder,
        hang: Option<bool>,
    ) -> (bool, String) {
        self.fences += 1;
        if let Some(hang) = hang {
            return (
                false,
                if hang {
                    "the fence method timed out".into()
                } else {
                    "the fence method failed".into()
                },
            );
        }
        let target = match order {
            FenceOrder::Node(r) | FenceOrder::OwnLeftovers(r) | FenceOrder::OwnService(r) => {
                parse_incarnation(&r.incarnation)
            }
            FenceOrder::Unreadable => None,
        };
        let Some(target) = target else {
            return (false, "nothing identifies the old active".into());
        };
        let local = matches!(order, FenceOrder::OwnLeftovers(_) | FenceOrder::OwnService(_));
        if !local && !self.host_reachable(target.0) {
            return (false, format!("ssh: n{} unreachable", target.0 + 1));
        }
        // Its warden (never ourselves: the survey skips its own pid) and, on that host, the
        // service (recorded group or the port's listener).
        if target != fencer {
            let restart = between(&mut self.rng, ms(100), SYSTEMD_RESTART);
            self.kill_proc(target, "fenced", restart);
        }
        let victims: Vec<(u64, bool)> = self
            .services
            .iter()
            .filter(|s| {
                if local {
                    s.owner == target
                } else {
                    s.owner.0 == target.0
                }
            })
            .map(|s| (s.id, s.stuck_until > self.now))
            .collect();
        let mut stuck = false;
        for (svc, is_stuck) in victims {
            stuck |= is_stuck;
            self.sigkill(svc);
        }
        if stuck {
            return (
                false,
                "processes of the service remain after SIGKILL".into(),
            );
        }
        (true, format!("fenced {}", name(target)))
    }

    // ----- faults --------------------------------------------------------------------

    fn fault(&mut self, i: usize) {
        let f = self.plan.faults[i].clone();
        self.log(|| format!("FAULT {f}"));
        let now = self.now;
        match f.kind {
            FaultKind::Freeze { node, dur } => {
                let p = &mut self.procs[node];
                if p.status == Status::Running {
                    p.status = Status::Frozen;
                    let inc = p.inc;
                    self.push(now + dur, Ev::Resume { node, inc });
                }
            }
            FaultKind::Crash { node, restart } => {
                let who = (node, self.procs[node].inc);
                self.kill_proc(who, "kill -9", restart);
            }
            FaultKind::Stop { node, restart } => {
                let p = &mut self.procs[node];
                if matches!(p.status, Status::Running | Status::Frozen) {
                    p.restart_after_exit = Some(restart);
                    let who = (node, p.inc);
                    self.push_proc(now, who, ProcEv::Input(Input::Stop));
                }
            }
            FaultKind::ServiceCrash { node } => {
                let svcs: Vec<u64> = self
                    .services
                    .iter()
                    .filter(|s| s.owner.0 == node)
                    .map(|s| s.id)
                    .collect();
                for s in svcs {
                    self.schedule_exit(s, now);
                }
            }
            FaultKind::Unhealthy { node } => {
                let who = (node, self.procs[node].inc);
                self.push_proc(now, who, ProcEv::Input(Input::Unhealthy));
            }
            FaultKind::Partition {
                node,
                dur,
                host_reachable,
            } => {
                let until = now + dur;
                self.partitioned_until[node] = self.partitioned_until[node].max(until);
                if !host_reachable {
                    self.isolated_until[node] = self.isolated_until[node].max(until);
                }
                self.push(until, Ev::Heal { node });
            }
            FaultKind::StoreDown { dur } => {
                self.store_down_until = self.store_down_until.max(now + dur);
                self.store.down = true;
                let until = self.store_down_until;
                self.push(until, Ev::StoreUp);
            }
            FaultKind::FenceFault { dur, hang } => {
                self.fence_fault = Some((now + dur, hang));
            }
            FaultKind::StuckService { node, dur } => {
                for s in self.services.iter_mut().filter(|s| s.owner.0 == node) {
                    s.stuck_until = s.stuck_until.max(now + dur);
                }
            }
        }
    }

    /// SIGKILL to every service `who` started (its process group goes with the warden).
    fn sigkill_all(&mut self, who: Inc) {
        let svcs: Vec<u64> = self
            .services
            .iter()
            .filter(|s| s.owner == who)
            .map(|s| s.id)
            .collect();
        for s in svcs {
            self.sigkill(s);
        }
    }

    pub fn exited(&mut self, node: usize) {
        let p = &mut self.procs[node];
        let who = (node, p.inc);
        p.status = Status::Exited;
        p.tasks.clear();
        let restart = p.restart_after_exit.take();
        self.sigkill_all(who);
        if let Some(r) = restart {
            let at = self.now + r;
            self.last_fault_effect = self.last_fault_effect.max(at);
            self.push(at, Ev::Restart { node, after: who.1 });
        }
    }

    // ----- invariants ----------------------------------------------------------------

    fn fact(&mut self, fact: Fact) {
        match fact {
            Fact::Committed {
                by,
                session,
                epoch,
                lock,
                replaced,
                sent,
            } => {
                self.grant_lease(by, sent);
                match lock {
                    Some(l) if l.session == session && l.czxid == epoch => {}
                    other => self.fail(format!(
                        "{} committed its promotion with epoch {epoch} while the lock is {other:?} \
                         (not its session s{session}'s)",
                        name(by)
                    )),
                }
                if let Some((prev, e)) = went_back(self.checks.last_commit, by, epoch) {
                    self.fail(format!(
                        "breadcrumb epoch went back: {} committed {epoch} after {} committed {e}",
                        name(by),
                        name(prev)
                    ));
                }
                if let Some(Crumb { owner, .. }) = replaced {
                    // The breadcrumb it overwrote named an incarnation that must be gone.
                    if owner != by && self.proc_alive(owner) && !self.stepped_down(owner) {
                        self.fail(format!(
                            "{} overwrote the breadcrumb of {}, which is alive and was never fenced",
                            name(by),
                            name(owner)
                        ));
                    }
                }
                self.checks.last_commit = Some((by, epoch));
                match self.checks.promoted.iter_mut().find(|(i, _)| *i == by) {
                    Some(entry) => entry.1 = false,
                    None => self.checks.promoted.push((by, false)),
                }
            }
            Fact::Renewed {
                by,
                session,
                lock,
                sent,
            } => {
                self.grant_lease(by, sent);
                if lock.is_none_or(|l| l.session != session) {
                    self.fail(format!(
                        "{} renewed its lease from session s{session} while the lock is {lock:?}",
                        name(by)
                    ));
                }
            }
            Fact::CrumbDeleted { by, crumb } => {
                if crumb.owner == by {
                    if self.services.iter().any(|s| s.owner == by) {
                        self.fail(format!(
                            "{} deleted its breadcrumb while its service still runs",
                            name(by)
                        ));
                    }
                    if let Some(entry) = self.checks.promoted.iter_mut().find(|(i, _)| *i == by) {
                        entry.1 = true;
                    }
                }
            }
            Fact::SessionEnded {
                session,
                owner,
                expired,
            } => self.log(|| {
                format!(
                    "session s{session} of {} {}",
                    name(owner),
                    if expired { "EXPIRED" } else { "closed" }
                )
            }),
        }
    }

    fn stepped_down(&self, who: Inc) -> bool {
        self.checks
            .promoted
            .iter()
            .any(|(i, down)| *i == who && *down)
    }

    fn check_step(&mut self) {
        // (1b) At most one live warden reports itself active.
        let active: Vec<Inc> = self
            .procs
            .iter()
            .filter(|p| matches!(p.status, Status::Running | Status::Frozen))
            .filter(|p| p.elector.role() == Role::Active)
            .map(|p| (p.node, p.inc))
            .collect();
        if active.len() > 1 {
            self.fail(format!(
                "two wardens report active: {}",
                active
                    .iter()
                    .map(|w| name(*w))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        // (3) A running warden's service is down by its lease end (or right after it wakes
        // up, if it was frozen across it).
        let mut late = None;
        for s in &self.services {
            let p = &self.procs[s.owner.0];
            if p.inc != s.owner.1 || p.status != Status::Running {
                continue;
            }
            // A process in uninterruptible sleep dies only when it wakes; a fence cannot
            // verify it gone meanwhile, so invariant 1 still holds.
            let until = p
                .lease_end
                .unwrap_or_default()
                .max(p.resumed_at.unwrap_or_default())
                .max(s.stuck_until)
                + LEASE_SLACK;
            if self.now > until {
                late = Some((s.owner, s.id, p.lease_end));
            }
        }
        if let Some((who, svc, lease_end)) = late {
            self.fail(format!(
                "the service {svc} of {} still runs after its lease ended (lease end {:?})",
                name(who),
                lease_end.map(|t| t.as_secs_f64())
            ));
        }
    }
}

/// Incarnations are named `<node index>:<number>`.
pub fn incarnation(who: Inc) -> String {
    format!("{}:{}", who.0, who.1)
}

pub fn parse_incarnation(s: &str) -> Option<Inc> {
    let (n, i) = s.split_once(':')?;
    Some((n.parse().ok()?, i.parse().ok()?))
}
