//! The world of one seed: virtual time and the event queue, the network between the nodes
//! and the store, the managed services, the fence methods, the fault schedule, and the
//! invariants checked after every step.
//!
//! Everything random comes from one stream seeded with the seed, and events at
//! the same instant run in the order they were scheduled, so a seed replays exactly.

use super::node::{node_id, Input, Proc, ProcEv, Status};
use super::plan::{between, ms, FaultKind, FenceRules, Plan, SimRng, Time, MACHINE_ID_BASE};
use super::store::{Crumb, Fact, Inc, Note, Req, Resp, Store, SvcRec};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::{Duration, Instant};
use warden::elector::{FenceOrder, MAX_REJOIN_DELAY};
use warden::record::{Epoch, HostIdentity, NodeRecord, Role};

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
/// How often an operator answers a cluster stuck on a breadcrumb that no fence can verify.
const OPERATOR_VISITS: u32 = 3;
/// `daemon.rs` OWN_LEFTOVERS_TIMEOUT: how long fencing our own service waits after SIGKILL.
const OWN_LEFTOVERS_TIMEOUT: Duration = Duration::from_secs(5);
/// `service.rs` SERVICE_CGROUP_PREFIX: a service's cgroup is named after it.
const CGROUP_PREFIX: &str = "warden-service-";
/// The newer parts of a seed (hosts, process trees, granted timeouts) draw from their own
/// stream, seeded from the seed and this, so that the older parts replay as before.
const AUX_STREAM: u64 = 0xA11C_E5ED_0F0F_1234;

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
        proc: usize,
    },
    HostUp {
        host: usize,
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

/// A spawned service: a tree of processes (SPEC §6).
pub struct Service {
    pub id: u64,
    pub owner: Inc,
    pub epoch: Epoch,
    pub since: Time,
    /// Where it runs (its warden's place when it started), and on which boot.
    pub place: usize,
    pub boot: u32,
    /// Its cgroup, when the node has cgroups: warden's stop and kill reach every process
    /// of it.
    pub cgroup: Option<u64>,
    pub procs: Vec<SvcProc>,
    pub stuck_until: Time,
    /// Stop tasks polling until what they reach of it is gone.
    pub waiters: Vec<(Inc, u64, Reach)>,
}

impl Service {
    /// What warden's own stop and kill reach (SPEC §6).
    pub fn reach(&self) -> Reach {
        if self.cgroup.is_some() {
            Reach::Cgroup
        } else {
            Reach::Group
        }
    }

    pub fn any_alive(&self, reach: Reach) -> bool {
        self.procs.iter().any(|p| p.alive && reach.covers(p.part))
    }

    /// What still runs of it, for a violation's message.
    fn describe(&self) -> String {
        let alive: Vec<&SvcProc> = self.procs.iter().filter(|p| p.alive).collect();
        let parts: Vec<String> = alive.iter().map(|p| format!("{:?}", p.part)).collect();
        format!(
            "{} process(es) left ({}){}",
            alive.len(),
            parts.join(", "),
            if self.cgroup.is_some() {
                ""
            } else {
                ", no cgroup"
            }
        )
    }
}

/// One process of a service.
pub struct SvcProc {
    pub part: Part,
    pub alive: bool,
    pub exit_at: Option<Time>,
    /// Only SIGKILL ends it.
    pub ignores_term: bool,
    /// Holds the service's listening socket (what `fence-local`'s port fallback finds).
    pub listens: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The process warden spawned, leader of the service's process group.
    Main,
    /// A child in its group: a worker, or the real server under a wrapper script.
    Child,
    /// A helper that left the group (`setsid`, a double fork); still in the cgroup if any.
    Escaped,
}

/// Which processes of a service a signal or a check reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Its cgroup: every process of it.
    Cgroup,
    /// Its process group: all but the escaped.
    Group,
    /// The main process.
    Main,
}

impl Reach {
    fn covers(self, part: Part) -> bool {
        match self {
            Reach::Cgroup => true,
            Reach::Group => part != Part::Escaped,
            Reach::Main => part == Part::Main,
        }
    }
}

fn describe_parts(procs: &[SvcProc]) -> String {
    let count = |part| procs.iter().filter(|p| p.part == part).count();
    format!(
        "main + {} child(ren) + {} escaped",
        count(Part::Child),
        count(Part::Escaped)
    )
}

/// A machine's state.
pub struct HostState {
    /// Its current boot: boot ids are unique over the run.
    pub boot: u32,
    pub up: bool,
    pub up_at: Time,
    /// Peers cannot reach it (ssh) until then.
    pub isolated_until: Time,
}

/// Where an incarnation ran: its place, and the boot of that machine.
#[derive(Clone, Copy, Debug)]
pub struct IncInfo {
    pub place: usize,
    pub boot: u32,
}

/// SPEC §5 "Which host is this?" for a record, seen from one place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Where {
    ThisBoot,
    Rebooted,
    OtherPidNamespace,
    Elsewhere,
}

#[derive(Clone, Copy, Debug)]
enum Method {
    Signal,
    Ssh,
}

enum Finding {
    NotApplicable(String),
    Failed(String),
    /// Fenced without acting (a reboot ended it).
    Fenced(String),
    /// Signals `victims`; with a problem it cannot verify the incarnation fenced.
    Act {
        victims: Vec<Victim>,
        problem: Option<String>,
    },
}

/// Something a fence signalled and waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Victim {
    Warden(Inc),
    /// Every process in a cgroup (gone when it is empty, or was never populated).
    Cgroup(u64),
    Service(u64, Reach),
    /// One process of a service (a listener found by its port).
    Process(u64, usize),
}

pub enum FenceStep {
    Done(bool, String),
    /// Fenced once every victim is gone; failed at the deadline.
    Wait(Vec<Victim>, Time, String),
}

pub fn boot_id(boot: u32) -> String {
    format!("{boot:032x}")
}

pub fn machine_id(host: usize) -> String {
    format!("{:032x}", MACHINE_ID_BASE + host as u64)
}

fn parse_hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s, 16).ok()
}

fn cgroup_id(c: &str) -> Option<u64> {
    c.strip_prefix(CGROUP_PREFIX)?.parse().ok()
}

/// An incarnation's warden pid (never reused in the model).
fn warden_pid(who: Inc) -> u32 {
    100_000 + who.0 as u32 * 10_000 + who.1
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
    /// Runs that needed an operator's `fence --confirm` to go on.
    pub confirms: u32,
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
    /// The newer parts' random stream (see `AUX_STREAM`).
    pub aux: SimRng,
    pub hosts: Vec<HostState>,
    /// Where each node's current warden runs.
    node_place: Vec<usize>,
    /// Every incarnation's place and boot, by node and number.
    incs: Vec<Vec<IncInfo>>,
    next_boot: u32,
    next_id: u64,
    partitioned_until: Vec<Time>,
    store_down_until: Time,
    fence_fault: Option<(Time, bool)>,
    /// The latest end of a fault's effect (a heal, a resume, a restart).
    last_fault_effect: Time,
    checks: Checks,
    live_at: Option<Time>,
    /// When an operator confirmed a stuck breadcrumb (liveness counts from there).
    operator_at: Option<Time>,
    confirms: u32,
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
        let mut aux = SimRng::new(seed ^ AUX_STREAM);
        let plan = super::plan::draw(&mut rng, &mut aux, nodes, max_faults);
        World::with_plan(plan, rng, aux, trace)
    }

    /// A seed's world with its plan changed by `shape` first (tests that need a setting
    /// the sweep does not draw).
    pub fn shaped(
        seed: u64,
        nodes: usize,
        max_faults: usize,
        trace: bool,
        shape: impl FnOnce(&mut Plan),
    ) -> World {
        let mut rng = SimRng::new(seed);
        let mut aux = SimRng::new(seed ^ AUX_STREAM);
        let mut plan = super::plan::draw(&mut rng, &mut aux, nodes, max_faults);
        shape(&mut plan);
        World::with_plan(plan, rng, aux, trace)
    }

    fn with_plan(plan: Plan, rng: SimRng, aux: SimRng, trace: bool) -> World {
        let nodes = plan.cfg.nodes;
        let store = Store::new(nodes, plan.cfg.granted, plan.cfg.tick);
        let hosts = (0..plan.layout.hosts)
            .map(|h| HostState {
                boot: h as u32 + 1,
                up: true,
                up_at: Duration::ZERO,
                isolated_until: Duration::ZERO,
            })
            .collect::<Vec<_>>();
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
            aux,
            next_boot: hosts.len() as u32 + 1,
            hosts,
            node_place: vec![0; nodes],
            incs: vec![Vec::new(); nodes],
            next_id: 1,
            partitioned_until: vec![Duration::ZERO; nodes],
            store_down_until: Duration::ZERO,
            fence_fault: None,
            last_fault_effect: Duration::ZERO,
            checks: Checks::default(),
            live_at: None,
            operator_at: None,
            confirms: 0,
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
            let place = w.plan.layout.nodes[node].places[0];
            let p = w.new_incarnation(node, 0, place);
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
            let deadline = self.operator_at.unwrap_or(self.quiet_from()) + self.liveness_bound();
            if self.live_at.is_none() && at > deadline && self.operator_confirms(deadline) {
                continue;
            }
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
            confirms: self.confirms,
            recovery,
            virtual_time: self.now,
            trace: self.trace.take().map(Vec::from).unwrap_or_default(),
            plan: self.plan,
        }
    }

    /// SPEC §5 "Manual fencing": the cluster is stuck on a breadcrumb that no fence can
    /// verify, a promoted record that names no service (on a node without a cgroup: its
    /// promotion failed, or its warden died between the start and `RecordService`). As the
    /// fence's message asks, the operator makes sure the service is stopped on its host
    /// (kills what is left of that incarnation's service: children that outlived their
    /// main process) and runs `warden fence --confirm`. Only when that warden is gone and
    /// nothing of its service is stuck beyond SIGKILL, and at most `OPERATOR_VISITS` times.
    fn operator_confirms(&mut self, at: Time) -> bool {
        if self.confirms >= OPERATOR_VISITS {
            return false;
        }
        let Some(c) = self.store.crumb else {
            return false;
        };
        let named = c.svc.is_some_and(|s| s.pid.is_some() || s.cgroup.is_some());
        let left: Vec<(u64, usize)> = self
            .services
            .iter()
            .filter(|s| s.owner == c.owner)
            .flat_map(|s| {
                s.procs
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.alive)
                    .map(move |(i, _)| (s.id, i))
            })
            .collect();
        let stuck = self
            .services
            .iter()
            .any(|s| s.owner == c.owner && s.stuck_until > at);
        if named || self.proc_alive(c.owner) || stuck {
            return false;
        }
        self.now = at;
        let who = name(c.owner);
        let killed = left.len();
        self.log(|| {
            format!(
                "OPERATOR: the breadcrumb of {who} names no service; killing the {killed} \
                 process(es) left of it, then warden fence --confirm"
            )
        });
        for (svc, i) in left {
            self.proc_died(svc, i);
        }
        self.store.crumb = None;
        self.operator_at = Some(at);
        self.confirms += 1;
        true
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
            Ev::SvcExit { svc, proc } => self.svc_exit(svc, proc),
            Ev::HostUp { host } => {
                let h = &mut self.hosts[host];
                h.up = true;
                h.boot = self.next_boot;
                self.next_boot += 1;
                self.last_fault_effect = self.last_fault_effect.max(self.now);
                self.log(|| format!("machine m{} is up again (new boot id)", host + 1));
            }
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
                // A pod may come back on either of its machines; a warden starts only on a
                // machine that is up (systemd starts it again at boot).
                let homes = self.plan.layout.nodes[node].places.clone();
                let up = |w: &World, p: usize| w.hosts[w.host_of_place(p)].up;
                let mut place = self.place_of(node);
                if homes.len() > 1 {
                    place = self.aux.pick(&homes);
                }
                if !up(self, place) {
                    match homes.iter().copied().find(|&p| up(self, p)) {
                        Some(p) => place = p,
                        None => {
                            let at = self.hosts[self.host_of_place(place)].up_at + ms(500);
                            self.push(at, Ev::Restart { node, after });
                            return;
                        }
                    }
                }
                let inc = after + 1;
                let p = self.new_incarnation(node, inc, place);
                self.procs[node] = p;
                self.last_fault_effect = self.last_fault_effect.max(self.now);
                let at = self.plan.layout.places[place].name.clone();
                self.log(|| format!("{} started at {at}", name((node, inc))));
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

    // ----- hosts ---------------------------------------------------------------------

    /// Where `node`'s warden runs now.
    pub fn place_of(&self, node: usize) -> usize {
        self.node_place[node]
    }

    fn host_of_place(&self, place: usize) -> usize {
        self.plan.layout.places[place].host
    }

    /// This boot of the machine of `place`, and its pid namespace, as the elector and the
    /// records carry them.
    pub fn host_identity(&self, place: usize) -> HostIdentity {
        let p = &self.plan.layout.places[place];
        HostIdentity {
            boot_id: boot_id(self.hosts[p.host].boot),
            machine_id: machine_id(p.host),
            pid_ns: Some(p.pid_ns),
        }
    }

    /// A new incarnation of `node` at `place`, on the current boot of its machine.
    pub fn new_incarnation(&mut self, node: usize, inc: u32, place: usize) -> Proc {
        self.node_place[node] = place;
        let boot = self.hosts[self.host_of_place(place)].boot;
        let incs = &mut self.incs[node];
        debug_assert_eq!(
            incs.len(),
            inc as usize,
            "incarnations are numbered in order"
        );
        incs.push(IncInfo { place, boot });
        let host = self.host_identity(place);
        Proc::new(&self.plan.cfg, node, inc, host)
    }

    pub fn inc_info(&self, who: Inc) -> IncInfo {
        self.incs[who.0][who.1 as usize]
    }

    /// The record an incarnation writes (`lock`, `breadcrumb`, its member record): its
    /// machine, boot and pid namespace, warden pid, port and, once recorded, its service.
    pub fn node_record(&self, owner: Inc, epoch: Option<Epoch>, svc: Option<SvcRec>) -> NodeRecord {
        let info = self.inc_info(owner);
        let place = &self.plan.layout.places[info.place];
        NodeRecord {
            node_id: node_id(owner.0),
            host: place.name.clone(),
            port: Some(self.plan.layout.nodes[owner.0].port),
            boot_id: boot_id(info.boot),
            machine_id: machine_id(place.host),
            pid_ns: Some(place.pid_ns),
            pid: warden_pid(owner),
            start_time: 1,
            service_pid: svc.and_then(|s| s.pid).map(|p| p as u32),
            service_pgid: svc.and_then(|s| s.pid).map(|p| p as u32),
            service_start_time: svc.and_then(|s| s.pid).map(|_| 1),
            service_cgroup: svc
                .and_then(|s| s.cgroup)
                .map(|c| format!("{CGROUP_PREFIX}{c}")),
            incarnation: incarnation(owner),
            epoch,
            ..Default::default()
        }
    }

    /// ssh reaches the machine: it is up and no partition cuts it off.
    fn ssh_reaches(&self, host: usize) -> bool {
        let h = &self.hosts[host];
        h.up && self.now >= h.isolated_until
    }

    /// SPEC §5 "Which host is this?", seen from `place` on its machine's current boot, by
    /// `signal` there or by `fence-local` after ssh reached it.
    fn whereabouts(&self, place: usize, r: &NodeRecord, method: Method) -> Where {
        let p = &self.plan.layout.places[place];
        let (Some(boot), Some(machine)) = (parse_hex(&r.boot_id), parse_hex(&r.machine_id)) else {
            return Where::Elsewhere;
        };
        let this_boot = boot == u64::from(self.hosts[p.host].boot);
        if self.plan.layout.fence_rules == FenceRules::ByHostName {
            return match (this_boot, method) {
                (true, _) => Where::ThisBoot,
                (false, Method::Ssh) => Where::Rebooted,
                (false, Method::Signal) if r.host == p.name => Where::Rebooted,
                (false, Method::Signal) => Where::Elsewhere,
            };
        }
        if machine != MACHINE_ID_BASE + p.host as u64 {
            Where::Elsewhere
        } else if !this_boot {
            Where::Rebooted
        } else if r.pid_ns != Some(p.pid_ns) {
            Where::OtherPidNamespace
        } else {
            Where::ThisBoot
        }
    }

    // ----- services ------------------------------------------------------------------

    fn service(&self, svc: u64) -> Option<&Service> {
        self.services.iter().find(|s| s.id == svc)
    }

    /// Some process of it still runs.
    pub fn service_alive(&self, svc: u64) -> bool {
        self.service(svc).is_some()
    }

    /// Down as warden's stop sees it (SPEC §6): its cgroup empty, or without one, its
    /// process group. A helper that left the group of a service without a cgroup is
    /// invisible here.
    pub fn service_down(&self, svc: u64) -> bool {
        self.service(svc).is_none_or(|s| !s.any_alive(s.reach()))
    }

    /// What warden's stop and kill reach of `svc`.
    pub fn reach_of(&self, svc: u64) -> Reach {
        self.service(svc).map_or(Reach::Group, |s| s.reach())
    }

    pub fn cgroup_of(&self, svc: u64) -> Option<u64> {
        self.service(svc).and_then(|s| s.cgroup)
    }

    /// The service of `owner` starts with `epoch`; invariants 1, 2 and 4 are checked here.
    pub fn spawn_service(&mut self, owner: Inc, epoch: Epoch, cgroup: Option<u64>) -> u64 {
        let id = self.id();
        self.starts += 1;
        // (1) Never two services up at the same instant, counting every process of them:
        // children whose main process exited, helpers that left the process group.
        if let Some(other) = self.services.first() {
            let (o, e, since) = (other.owner, other.epoch, other.since);
            let left = other.describe();
            self.fail(format!(
                "two services up: {} starts with epoch {epoch} while the service of {} \
                 (epoch {e}, up since {:.3}s) still runs: {left}",
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
        let place = self.inc_info(owner).place;
        let host = self.host_of_place(place);
        let escapes = cgroup.is_some() || self.plan.layout.escapes_without_cgroup;
        // The process tree: the main process (it holds the listening socket), children in
        // its group (workers, or the real server under a wrapper script), and sometimes a
        // helper that leaves the group.
        let mut procs = vec![SvcProc {
            part: Part::Main,
            alive: true,
            exit_at: None,
            ignores_term,
            listens: true,
        }];
        let children = match self.aux.range(0..=99) {
            0..=39 => 0,
            40..=74 => 1,
            _ => 2,
        };
        for _ in 0..children {
            procs.push(SvcProc {
                part: Part::Child,
                alive: true,
                exit_at: None,
                ignores_term: self.aux.chance(0.2),
                listens: self.aux.chance(0.5),
            });
        }
        if escapes && self.aux.chance(0.3) {
            procs.push(SvcProc {
                part: Part::Escaped,
                alive: true,
                exit_at: None,
                ignores_term: self.aux.chance(0.3),
                listens: false,
            });
        }
        let shape = describe_parts(&procs);
        self.services.push(Service {
            id,
            owner,
            epoch,
            since: self.now,
            place,
            boot: self.hosts[host].boot,
            cgroup,
            procs,
            stuck_until: Duration::ZERO,
            waiters: Vec::new(),
        });
        self.log(|| {
            format!(
                "SERVICE {id} of {} UP with epoch {epoch}: {shape}{}",
                name(owner),
                if cgroup.is_some() {
                    ", in its cgroup"
                } else {
                    ""
                }
            )
        });
        id
    }

    /// Process `i` of `svc` exits at `at` (or when it wakes, if stuck), unless it already
    /// exits earlier.
    fn schedule_exit(&mut self, svc: u64, i: usize, at: Time) {
        let Some(s) = self.services.iter_mut().find(|s| s.id == svc) else {
            return;
        };
        let at = at.max(s.stuck_until);
        let p = &mut s.procs[i];
        if !p.alive || p.exit_at.is_some_and(|e| e <= at) {
            return;
        }
        p.exit_at = Some(at);
        self.push(at, Ev::SvcExit { svc, proc: i });
    }

    /// The processes of `svc` that `reach` covers and still run.
    fn reached(&self, svc: u64, reach: Reach) -> Vec<(usize, Part, bool)> {
        self.service(svc).map_or_else(Vec::new, |s| {
            s.procs
                .iter()
                .enumerate()
                .filter(|(_, p)| p.alive && reach.covers(p.part))
                .map(|(i, p)| (i, p.part, p.ignores_term))
                .collect()
        })
    }

    /// The stop signal to the processes `reach` covers.
    pub fn sigterm(&mut self, svc: u64, reach: Reach) {
        let hi = self.plan.cfg.stop_timeout.mul_f64(1.5).max(ms(2));
        for (i, part, ignores_term) in self.reached(svc, reach) {
            if ignores_term {
                continue;
            }
            let rng = if part == Part::Main {
                &mut self.rng
            } else {
                &mut self.aux
            };
            let at = self.now + between(rng, ms(1), hi);
            self.schedule_exit(svc, i, at);
        }
    }

    /// SIGKILL to the processes `reach` covers.
    pub fn sigkill(&mut self, svc: u64, reach: Reach) {
        for (i, part, _) in self.reached(svc, reach) {
            let rng = if part == Part::Main {
                &mut self.rng
            } else {
                &mut self.aux
            };
            let at = self.now + between(rng, Duration::ZERO, ms(2));
            self.schedule_exit(svc, i, at);
        }
    }

    fn svc_exit(&mut self, svc: u64, i: usize) {
        let Some(s) = self.service(svc) else { return };
        let p = &s.procs[i];
        if !p.alive || p.exit_at.is_none_or(|e| e > self.now) {
            return; // a stale exit event; a later one is scheduled
        }
        self.proc_died(svc, i);
    }

    /// Process `i` of `svc` is gone: its warden reaps the main process; stops and fences
    /// polling for what they reach wake up; the service is down when nothing of it is left.
    fn proc_died(&mut self, svc: u64, i: usize) {
        let Some(k) = self.services.iter().position(|s| s.id == svc) else {
            return;
        };
        let s = &mut self.services[k];
        s.procs[i].alive = false;
        let (part, owner, now) = (s.procs[i].part, s.owner, self.now);
        let (woken, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut s.waiters)
            .into_iter()
            .partition(|&(_, _, reach)| !s.any_alive(reach));
        s.waiters = waiting;
        let gone = !s.any_alive(Reach::Cgroup);
        if part == Part::Main {
            self.push_proc(now, owner, ProcEv::Input(Input::Exited(svc)));
        }
        for (who, task, _) in woken {
            let at = now + between(&mut self.rng, Duration::ZERO, POLL);
            self.push_proc(at, who, ProcEv::Wake { task });
        }
        if gone {
            self.services.remove(k);
            self.log(|| format!("SERVICE {svc} of {} DOWN", name(owner)));
        } else if self.tracing() {
            let left = self.services[k].describe();
            self.log(|| format!("service {svc}: its {part:?} process exited; left: {left}"));
        }
    }

    /// A stop task of `who` waits for what `reach` covers of `svc` to be gone.
    pub fn add_waiter(&mut self, svc: u64, who: Inc, task: u64, reach: Reach) {
        if let Some(s) = self.services.iter_mut().find(|s| s.id == svc) {
            s.waiters.push((who, task, reach));
        }
    }

    /// `kill -9` of a warden, or a fence of its incarnation; systemd starts it again later.
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
        self.warden_gone(who);
        let at = self.now + restart;
        self.push(
            at,
            Ev::Restart {
                node: who.0,
                after: who.1,
            },
        );
    }

    /// The warden process of `who` is gone. Its service's main process dies with it (the
    /// parent-death signal), its children and helpers do not; under systemd, the unit's
    /// cgroup goes (KillMode): every process warden started on this boot, whatever cgroup
    /// or group it made for it.
    fn warden_gone(&mut self, who: Inc) {
        let systemd = self.plan.layout.nodes[who.0].systemd;
        let info = self.inc_info(who);
        let host = self.host_of_place(info.place);
        let boot = self.hosts[host].boot;
        let svcs: Vec<(u64, Reach)> = self
            .services
            .iter()
            .filter(|s| {
                if systemd {
                    s.owner.0 == who.0 && s.place == info.place && s.boot == boot
                } else {
                    s.owner == who
                }
            })
            .map(|s| (s.id, if systemd { Reach::Cgroup } else { Reach::Main }))
            .collect();
        for (svc, reach) in svcs {
            self.sigkill(svc, reach);
        }
    }

    // ----- fencing -------------------------------------------------------------------

    /// A fence order starts (SPEC §5): the chain's methods in order, each acting by the
    /// rules of "Which host is this?". `Done` when the chain's verdict is known at once,
    /// else `Wait` until what the acting method signalled is gone, or its timeout.
    pub fn fence_begin(&mut self, fencer: Inc, order: &FenceOrder) -> FenceStep {
        self.fences += 1;
        let here = self.inc_info(fencer).place;
        let (record, chain): (&NodeRecord, &[Method]) = match order {
            FenceOrder::Node(r) => (r, &[Method::Signal, Method::Ssh]),
            FenceOrder::OwnLeftovers(r) => (r, &[Method::Signal]),
            FenceOrder::Unreadable => {
                return FenceStep::Done(false, "nothing identifies the old active".into())
            }
            FenceOrder::OwnService(_) => {
                // `fence_own_service`: the service this process last stopped, killed and
                // waited for; never warden itself.
                let deadline = self.now + OWN_LEFTOVERS_TIMEOUT;
                return match self.procs[fencer.0].stopping {
                    Some(svc) if !self.service_down(svc) => {
                        let v = vec![Victim::Service(svc, self.reach_of(svc))];
                        self.kill_victims(&v);
                        FenceStep::Wait(v, deadline, "this node's own service".into())
                    }
                    _ => FenceStep::Done(true, "this node's own service is gone".into()),
                };
            }
        };
        let mut notes = Vec::new();
        for method in chain {
            let finding = match method {
                Method::Signal => match self.whereabouts(here, record, *method) {
                    Where::ThisBoot => self.survey(record, here, false, Some(fencer)),
                    Where::Rebooted => Finding::Fenced("signal: its machine rebooted".into()),
                    Where::OtherPidNamespace => {
                        Finding::NotApplicable("signal: another pid namespace".into())
                    }
                    Where::Elsewhere => Finding::NotApplicable("signal: another machine".into()),
                },
                Method::Ssh => {
                    // ssh reaches a host by name: a clone or the other home of a pod may
                    // answer to it.
                    let reachable: Vec<usize> = (0..self.plan.layout.places.len())
                        .filter(|&p| self.plan.layout.places[p].name == record.host)
                        .filter(|&p| self.ssh_reaches(self.host_of_place(p)))
                        .collect();
                    if reachable.is_empty() {
                        Finding::Failed(format!("ssh: {} unreachable", record.host))
                    } else {
                        let there = self.aux.pick(&reachable);
                        match self.whereabouts(there, record, *method) {
                            Where::ThisBoot => self.survey(record, there, true, None),
                            Where::Rebooted => {
                                Finding::Fenced("ssh: fence-local: the machine rebooted".into())
                            }
                            Where::OtherPidNamespace => Finding::Failed(
                                "ssh: fence-local: another pid namespace, NOT fenced".into(),
                            ),
                            Where::Elsewhere => Finding::Failed(format!(
                                "ssh: {} answered from another machine, NOT fenced",
                                record.host
                            )),
                        }
                    }
                }
            };
            match finding {
                Finding::NotApplicable(why) | Finding::Failed(why) => notes.push(why),
                Finding::Fenced(why) => return FenceStep::Done(true, why),
                Finding::Act {
                    victims,
                    problem: Some(why),
                } => {
                    self.kill_victims(&victims);
                    notes.push(why);
                }
                Finding::Act {
                    victims,
                    problem: None,
                } => {
                    self.kill_victims(&victims);
                    let deadline = self.now + self.plan.cfg.fence_timeout;
                    return FenceStep::Wait(victims, deadline, format!("{method:?}"));
                }
            }
        }
        FenceStep::Done(false, notes.join("; "))
    }

    /// What `terminate_incarnation` finds of the incarnation `r` at `place` (on this boot
    /// of its machine, in its pid namespace); it never signals the process running it.
    fn survey(
        &self,
        r: &NodeRecord,
        place: usize,
        port_fallback: bool,
        me: Option<Inc>,
    ) -> Finding {
        let mut victims = Vec::new();
        let p = &self.plan.layout.places[place];
        if let Some(who) = parse_incarnation(&r.incarnation).filter(|w| Some(*w) != me) {
            let info = self.inc_info(who);
            if self.proc_alive(who) && info.place == place {
                victims.push(Victim::Warden(who));
            }
        }
        let here = |s: &Service| s.place == place && s.boot == self.hosts[p.host].boot;
        let cgroup = r.service_cgroup.as_deref().and_then(cgroup_id);
        if let Some(cg) = cgroup {
            victims.push(Victim::Cgroup(cg));
        }
        let named = [
            (r.service_pgid.map(u64::from), Reach::Group),
            (r.service_pid.map(u64::from), Reach::Main),
        ];
        let service_named = cgroup.is_some() || named.iter().any(|(id, _)| id.is_some());
        for (id, reach) in named {
            if let Some(s) = id.and_then(|id| self.service(id)).filter(|s| here(s)) {
                victims.push(Victim::Service(s.id, reach));
            }
        }
        if service_named || r.epoch.is_none() {
            return Finding::Act {
                victims,
                problem: None,
            };
        }
        // A promoted record that names no service: its warden being gone proves nothing.
        let owner = parse_incarnation(&r.incarnation).map(|w| w.0);
        let listeners: Vec<Victim> = if port_fallback {
            self.services
                .iter()
                .filter(|s| here(s) && Some(s.owner.0) == owner)
                .flat_map(|s| {
                    s.procs
                        .iter()
                        .enumerate()
                        .filter(|(_, p)| p.alive && p.listens)
                        .map(|(i, _)| Victim::Process(s.id, i))
                })
                .collect()
        } else {
            Vec::new()
        };
        if listeners.is_empty() {
            return Finding::Act {
                victims,
                problem: Some(
                    "the record names no service process and nothing listens on its port".into(),
                ),
            };
        }
        victims.extend(listeners);
        Finding::Act {
            victims,
            problem: None,
        }
    }

    fn kill_victims(&mut self, victims: &[Victim]) {
        for v in victims {
            match *v {
                Victim::Warden(who) => {
                    let restart = between(&mut self.rng, ms(100), SYSTEMD_RESTART);
                    self.kill_proc(who, "fenced", restart);
                }
                Victim::Cgroup(cg) => {
                    let svcs: Vec<u64> = self
                        .services
                        .iter()
                        .filter(|s| s.cgroup == Some(cg))
                        .map(|s| s.id)
                        .collect();
                    for svc in svcs {
                        self.sigkill(svc, Reach::Cgroup);
                    }
                }
                Victim::Service(svc, reach) => self.sigkill(svc, reach),
                Victim::Process(svc, i) => {
                    let at = self.now + between(&mut self.aux, Duration::ZERO, ms(2));
                    self.schedule_exit(svc, i, at);
                }
            }
        }
    }

    /// Whether nothing of what a fence signalled remains.
    pub fn victims_gone(&self, victims: &[Victim]) -> bool {
        victims.iter().all(|v| match *v {
            Victim::Warden(who) => !self.proc_alive(who),
            Victim::Cgroup(cg) => !self
                .services
                .iter()
                .any(|s| s.cgroup == Some(cg) && s.any_alive(Reach::Cgroup)),
            Victim::Service(svc, reach) => self.service(svc).is_none_or(|s| !s.any_alive(reach)),
            Victim::Process(svc, i) => self.service(svc).is_none_or(|s| !s.procs[i].alive),
        })
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
                for (svc, i) in self.procs_of_node(node, |_| true) {
                    self.schedule_exit(svc, i, now);
                }
            }
            FaultKind::MainExits { node } => {
                for (svc, i) in self.procs_of_node(node, |p| p == Part::Main) {
                    self.schedule_exit(svc, i, now);
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
                    let h = self.host_of_place(self.place_of(node));
                    self.hosts[h].isolated_until = self.hosts[h].isolated_until.max(until);
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
            FaultKind::Reboot { host, down } => self.reboot(host, down),
        }
    }

    /// The running processes of services of `node` (any incarnation) of the given parts.
    fn procs_of_node(&self, node: usize, part: impl Fn(Part) -> bool) -> Vec<(u64, usize)> {
        self.services
            .iter()
            .filter(|s| s.owner.0 == node)
            .flat_map(|s| {
                s.procs
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.alive && part(p.part))
                    .map(move |(i, _)| (s.id, i))
            })
            .collect()
    }

    /// Everything on the machine dies at once, stuck processes too; it comes back after
    /// `down` with a new boot id and starts its wardens again.
    fn reboot(&mut self, host: usize, down: Duration) {
        if !self.hosts[host].up {
            return;
        }
        let up_at = self.now + down;
        let h = &mut self.hosts[host];
        h.up = false;
        h.up_at = up_at;
        for node in 0..self.procs.len() {
            if self.host_of_place(self.place_of(node)) != host {
                continue;
            }
            let who = (node, self.procs[node].inc);
            let restart = down + between(&mut self.aux, ms(500), ms(3000));
            self.kill_proc(who, "its machine rebooted", restart);
        }
        let dying: Vec<(u64, usize)> = self
            .services
            .iter()
            .filter(|s| self.host_of_place(s.place) == host)
            .flat_map(|s| {
                s.procs
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.alive)
                    .map(move |(i, _)| (s.id, i))
            })
            .collect();
        for (svc, i) in dying {
            self.proc_died(svc, i);
        }
        self.push(up_at, Ev::HostUp { host });
    }

    pub fn exited(&mut self, node: usize) {
        let p = &mut self.procs[node];
        let who = (node, p.inc);
        p.status = Status::Exited;
        p.tasks.clear();
        let restart = p.restart_after_exit.take();
        self.warden_gone(who);
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
        // (7) A node reports `active` only once the breadcrumb identifies its running
        // service (§4.3d): its pid, and its cgroup when it has one. Until then a fence could
        // not find that service.
        for &who in &active {
            let Some(svc) = self.procs[who.0].service else {
                continue;
            };
            let identified = self.store.crumb.is_some_and(|c| {
                c.owner == who
                    && c.svc.is_some_and(|r| {
                        r.pid == Some(svc) && r.cgroup == self.cgroup_of(svc).or(r.cgroup)
                    })
            });
            if !identified && self.service_alive(svc) {
                self.fail(format!(
                    "{} reports active while the breadcrumb does not identify its service {svc} \
                     (breadcrumb: {:?})",
                    name(who),
                    self.store.crumb
                ));
            }
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
