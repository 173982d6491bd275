//! The simulated machines, processes and services around the real daemons, and the
//! invariants checked as they change.
//!
//! Everything is on tokio's paused clock. A warden incarnation is the real
//! [`warden::daemon::Daemon`] in a task; its host ([`super::host::SimHost`]) acts on this
//! world: services are process trees (a main process leading its group, children in the
//! group, sometimes a helper that left it with `setsid`), in a cgroup of their own or not;
//! machines have a boot id and a machine id, places a pid namespace and a host name.
//!
//! In hooks mode each node's service is one always-running process where its warden runs
//! (a unit of its own: it outlives its warden, dies with its machine, and is started
//! again as a replica a while after a health check found it down). It is primary between
//! a promote hook that took effect and a demote hook that did, or its death: a run as
//! primary counts for the invariants as a spawned service's whole life does. Follow hooks
//! are recorded as they end, per incarnation.
//!
//! A dead incarnation acts no more: every entry point of its host waits forever
//! ([`World::gate`]), as do its store calls. A frozen one (SIGSTOP) acts again once thawed:
//! its daemon's future is not polled meanwhile ([`Freezable`]), and whatever its leftover
//! tasks try waits at the gate.

use super::data::{Address, Data, Promotion, Recipe, HANDOVER_INSIDE_LOCK};
use super::plan::{between, ms, Mode, Plan, SimRng};
use super::store::{Fact, SimStore};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use warden::record::{Epoch, FailoverRequest, NodeRecord, Role};

/// The wall clock of the simulation starts here (2026-01-01T00:00:00Z). Every machine's
/// clock agrees with it (no skew is simulated).
const WALL_ORIGIN: u64 = 1_767_225_600;

/// A warden incarnation: node index and restart number.
pub type Inc = (usize, u32);

/// How often stops and fences look whether what they signalled is gone.
pub const POLL: Duration = Duration::from_millis(10);
/// How long after the lease end the killed service may take to be gone.
pub const LEASE_SLACK: Duration = Duration::from_millis(50);
/// `service.rs` KILL_WAIT: how long after SIGKILL a stop still waits.
pub const KILL_WAIT: Duration = Duration::from_secs(5);

pub fn name(who: Inc) -> String {
    format!("n{}#{}", who.0 + 1, who.1)
}

pub fn incarnation(who: Inc) -> String {
    format!("{:08x}{:08x}", who.0, who.1)
}

pub fn parse_incarnation(s: &str) -> Option<Inc> {
    if s.len() != 16 {
        return None;
    }
    let node = u32::from_str_radix(&s[..8], 16).ok()? as usize;
    let inc = u32::from_str_radix(&s[8..], 16).ok()?;
    Some((node, inc))
}

pub fn boot_id(boot: u32) -> String {
    format!("{boot:032x}")
}

pub fn machine_id(machine: usize) -> String {
    format!("{:032x}", super::plan::MACHINE_ID_BASE + machine as u64)
}

const CGROUP_PREFIX: &str = "warden.sim/svc-";

pub fn cgroup_name(id: u64) -> String {
    format!("{CGROUP_PREFIX}{id}")
}

/// The cgroup id of a name [`cgroup_name`] made.
pub fn cgroup_id(name: &str) -> Option<u64> {
    name.strip_prefix(CGROUP_PREFIX)?.parse().ok()
}

/// The earlier promotion `epoch` by `who` would go back behind: a smaller epoch, or the same
/// one of another incarnation (a restart under the same lock may repeat its own).
fn went_back(last: Option<(Inc, Epoch)>, who: Inc, epoch: Epoch) -> Option<(Inc, Epoch)> {
    last.filter(|&(prev, e)| epoch < e || (epoch == e && prev != who))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The process warden spawned, leader of the service's process group.
    Main,
    /// A child in its group.
    Child,
    /// A helper that left the group (`setsid`); still in the cgroup if there is one.
    Escaped,
}

/// Which processes of a service a signal reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    Cgroup,
    Group,
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

pub struct SvcProc {
    pub part: Part,
    pub alive: bool,
    pub ignores_term: bool,
}

/// A service: spawn mode's, started on promotion and stopped on demotion (its whole
/// life is a run as primary), or hooks mode's always-running one (a database, one per
/// node), primary only between a promote hook that took effect and the next demote.
pub struct Service {
    pub id: u64,
    /// Spawn mode: the incarnation that started it. Hooks mode: the one that promoted it
    /// last, or the node's incarnation when it started.
    pub owner: Inc,
    pub epoch: Epoch,
    pub machine: usize,
    pub boot: u32,
    /// The pid namespace it runs in: its pids mean nothing in another one.
    pub pid_ns: u64,
    pub cgroup: Option<u64>,
    pub pid: u32,
    pub start_time: u64,
    pub procs: Vec<SvcProc>,
    pub stuck_until: Option<Instant>,
    pub exited: Option<oneshot::Sender<String>>,
    pub since: Instant,
    /// Hooks mode's always-running service.
    pub hooks: bool,
    /// It serves as the primary: always, in spawn mode.
    pub primary: bool,
    /// Hooks mode: the last demote hook failed without demoting it. Its warden keeps the
    /// breadcrumb and releases the lock, so the next active fences it (SPEC §4.3e, §6):
    /// invariant 2 checks that, not the lease end.
    pub demote_failed: bool,
}

impl Service {
    pub fn alive(&self, reach: Reach) -> bool {
        self.procs.iter().any(|p| p.alive && reach.covers(p.part))
    }

    fn describe(&self) -> String {
        let left: Vec<String> = self
            .procs
            .iter()
            .filter(|p| p.alive)
            .map(|p| format!("{:?}", p.part))
            .collect();
        format!(
            "{} left ({}){}",
            left.len(),
            left.join(", "),
            if self.cgroup.is_some() {
                ""
            } else {
                ", no cgroup"
            }
        )
    }
}

pub struct Warden {
    pub place: usize,
    pub boot: u32,
    pub pid: u32,
    pub start_time: u64,
    pub alive: bool,
    pub frozen: bool,
    /// When it was last frozen, and last thawed.
    pub frozen_at: Option<Instant>,
    pub thawed: Option<Instant>,
    /// When it ended.
    pub gone_at: Option<Instant>,
    pub role: Role,
    /// When it took its role.
    pub role_since: Instant,
    /// When it last took the lock.
    pub took_lock: Option<Instant>,
    /// The breadcrumb then was its own (of an earlier promotion whose service was not
    /// verified stopped): it may not stand aside (SPEC §6b; the next active would fence
    /// it).
    pub took_over_own_crumb: bool,
    /// The member records' positions as stored at its last commit, by node.
    pub commit_positions: BTreeMap<usize, Option<u64>>,
    /// When it last let go of a lock it had won before fencing anything (`promoting` to
    /// `demoting`): it stood aside for a standby its own look placed above it, or refused.
    pub declined: Option<Instant>,
    pub task: Option<tokio::task::AbortHandle>,
}

pub struct Machine {
    pub boot: u32,
    pub up: bool,
    /// Peers cannot reach it (ssh).
    pub isolated: bool,
}

#[derive(Default)]
struct Checks {
    last_start: Option<(Inc, Epoch)>,
    last_commit: Option<(Inc, Epoch)>,
    /// When each commit was seen: a round of a takeover starts at the last before it.
    commits_at: Vec<Instant>,
}

pub struct W {
    pub plan: Plan,
    pub rng: SimRng,
    pub t0: Instant,
    pub machines: Vec<Machine>,
    pub wardens: BTreeMap<Inc, Warden>,
    /// Where each node's warden runs now (an index into the layout's places).
    pub place_of: Vec<usize>,
    pub services: Vec<Service>,
    pub unhealthy: Vec<bool>,
    /// SPEC §6b: the positions each node's passing checks printed, with when (what its
    /// member record published a moment later); `None`: garbage or nothing, unknown.
    pub said: Vec<Vec<(Instant, Option<u64>)>>,
    /// Whether each node is cut off from the store (a partition), and when that last
    /// began or ended (a new session waits a session timeout before it may join).
    pub cut_off: Vec<(bool, Option<Instant>)>,
    /// Fence methods fail (false) or hang (true).
    pub fence_fault: Option<bool>,
    next_id: u64,
    next_boot: u32,
    checks: Checks,
    pub failure: Option<String>,
    pub trace: Vec<String>,
    pub tracing: bool,
    pub starts: u32,
    /// Who ran a fence method, on which node, and when (one entry per attempt).
    pub fence_runs: Vec<(String, Option<String>, tokio::time::Instant)>,
    /// Switchovers whose command said the new active had to fence the old one.
    pub takeovers_reported: u32,
    /// Switchovers from an active whose new active fenced the old one since the request,
    /// but whose command could not tell (the history entries it reads were not written).
    pub takeovers_unreported: u32,
    /// Switchovers the old active called off, as `failover` reported (SPEC §6a.2).
    pub called_off: u32,
    /// Store faults: times the store forgot, `init --force` runs, and whether `status`
    /// said the store lost data.
    pub forgot: u32,
    pub inits: u32,
    pub lost_data_seen: bool,
    /// Joins refused because the store restarted since the joiner's session began.
    pub refused_restarted: u32,
    /// `warden pause` commands not yet followed by their `resume`.
    pub pauses: u32,
    /// The store forgot epochs up to this one that no live warden remembered (SPEC §3a's
    /// accepted limit: nothing can tell such a store from a new one), and how many
    /// commits went back below it.
    pub unremembered: Option<Epoch>,
    pub accepted_limit: u32,
    /// The greatest epoch committed before the store forgot; the store's floor when the
    /// last commit was applied; commits below a forgotten epoch that the floor had not
    /// heard of while a warden that had seen it still lived (it rejoined too late).
    pub forgotten: Option<Epoch>,
    pub floor_at_commit: Option<Epoch>,
    /// The live wardens that had seen the forgotten epoch when the store came back, and
    /// by when they had to rejoin (a session timeout after that) to raise the floor: one
    /// that ended before then took its memory with it (the accepted limit too).
    pub rememberers: Vec<Inc>,
    pub rejoin_by: Option<Instant>,
    /// When the store came back having forgotten.
    pub forgot_at: Option<Instant>,
    pub floor_race: u32,
    /// Member records the store forgot under a session that lived on, still stale once
    /// quiet (`status` shows an old role until the node's next change).
    pub stale_after_forget: u32,
    pub confirms: u32,
    /// Each node's latest incarnation number.
    pub current: Vec<u32>,
    /// The stop-signal channel of each running incarnation.
    pub stops: BTreeMap<Inc, tokio::sync::mpsc::UnboundedSender<()>>,
    /// How long after its warden ends a node is started again, when a fault said so.
    pub restart_after: Vec<Option<Duration>>,
    /// The end of each incarnation's lease as the store granted it: the send time of its
    /// last applied commit or renewal plus half the granted session timeout.
    pub lease_end: BTreeMap<Inc, Instant>,
    /// Operator commands still running (a pause not yet resumed counts).
    pub ops_busy: u32,
    /// When the last operator command ended.
    pub ops_end: Duration,
    /// Switchover requests that named a target: (its node, asked at, lapses at). A
    /// standby named by the operator takes over whatever the others hold (SPEC §6b).
    pub named: Vec<(usize, Instant, Instant)>,
    /// Switchovers that ended with a new active; those of them in a quiet cluster.
    pub switched: u32,
    pub quiet_switches: u32,
    /// Switchovers in a quiet cluster that failed after the store's background loss hit
    /// the old or the new active (counted apart).
    pub quiet_lossy: u32,
    /// The last promotion committed over a switchover request in `control`: that node
    /// clears the request once its service is up (SPEC 8).
    pub must_clear: Option<(Inc, FailoverRequest)>,
    /// How many times the store had forgotten when `must_clear` was set: a store that
    /// forgot since may have forgotten the clear (seed 3305 at stop 35).
    pub must_clear_forgot: u32,
    /// Hooks mode: each incarnation's follow hooks as they ended, and whether they
    /// succeeded (SPEC §6); its own commits count as successes.
    pub follows: BTreeMap<Inc, Vec<(Instant, bool)>>,
    pub follows_failed: u32,
    /// Promote and demote hooks that failed or hung.
    pub hooks_failed: u32,
    /// Promotions of a priority-0 node (named by `failover --to`), and of a node whose
    /// last follow failed (named by `failover --to --force`).
    pub named_commits: u32,
    pub forced_commits: u32,
    /// Hooks mode: when each node's service, found down by its warden's health check,
    /// is started again (systemd restarts it, as a replica).
    pub db_restart_at: Vec<Option<Instant>>,
    /// Hooks mode with a follow hook: the services' data (issue 32 point 2).
    pub data: Option<Data>,
    /// The switchover request each node's failed planned demote called off (SPEC §6a.2:
    /// withdrawn for that node).
    pub withdrawn: BTreeMap<usize, FailoverRequest>,
}

/// The shared world; cheap to clone.
#[derive(Clone)]
pub struct World {
    inner: Arc<Mutex<W>>,
    pub store: SimStore,
    thaw: Arc<Notify>,
}

impl World {
    pub fn new(plan: Plan, seed: u64, store: SimStore, tracing: bool) -> World {
        let machines = (0..plan.layout.hosts)
            .map(|i| Machine {
                boot: i as u32 + 1,
                up: true,
                isolated: false,
            })
            .collect();
        let next_boot = plan.layout.hosts as u32 + 1;
        let place_of = plan.layout.nodes.iter().map(|n| n.places[0]).collect();
        let nodes = plan.cfg.nodes;
        let data = matches!(plan.mode, Mode::Hooks { follow: true }).then(|| Data::new(seed));
        World {
            inner: Arc::new(Mutex::new(W {
                plan,
                rng: SimRng::new(seed ^ 0x5eed_f070_071d),
                t0: Instant::now(),
                machines,
                wardens: BTreeMap::new(),
                place_of,
                services: Vec::new(),
                unhealthy: vec![false; nodes],
                said: vec![Vec::new(); nodes],
                cut_off: vec![(false, None); nodes],
                fence_fault: None,
                next_id: 1,
                next_boot,
                checks: Checks::default(),
                failure: None,
                trace: Vec::new(),
                tracing,
                starts: 0,
                fence_runs: Vec::new(),
                takeovers_reported: 0,
                takeovers_unreported: 0,
                called_off: 0,
                forgot: 0,
                inits: 0,
                lost_data_seen: false,
                refused_restarted: 0,
                pauses: 0,
                unremembered: None,
                accepted_limit: 0,
                forgotten: None,
                floor_at_commit: None,
                rememberers: Vec::new(),
                rejoin_by: None,
                forgot_at: None,
                floor_race: 0,
                stale_after_forget: 0,
                confirms: 0,
                current: vec![0; nodes],
                stops: BTreeMap::new(),
                restart_after: vec![None; nodes],
                lease_end: BTreeMap::new(),
                ops_busy: 0,
                ops_end: Duration::ZERO,
                named: Vec::new(),
                switched: 0,
                quiet_switches: 0,
                quiet_lossy: 0,
                must_clear: None,
                must_clear_forgot: 0,
                follows: BTreeMap::new(),
                follows_failed: 0,
                hooks_failed: 0,
                named_commits: 0,
                forced_commits: 0,
                db_restart_at: vec![None; nodes],
                data,
                withdrawn: BTreeMap::new(),
            })),
            store,
            thaw: Arc::new(Notify::new()),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, W> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits while `who` is frozen; never returns once it is dead.
    pub async fn gate(&self, who: Inc) {
        loop {
            let thawed = self.thaw.notified();
            tokio::pin!(thawed);
            thawed.as_mut().enable();
            let (alive, frozen) = {
                let w = self.lock();
                w.wardens
                    .get(&who)
                    .map_or((false, false), |x| (x.alive, x.frozen))
            };
            if !alive {
                return std::future::pending().await;
            }
            if !frozen {
                return;
            }
            thawed.await;
        }
    }

    pub fn is_frozen(&self, who: Inc) -> bool {
        self.lock().wardens.get(&who).is_some_and(|w| w.frozen)
    }

    pub fn set_frozen(&self, who: Inc, frozen: bool) {
        if let Some(w) = self.lock().wardens.get_mut(&who) {
            if w.frozen && !frozen {
                w.thawed = Some(Instant::now());
            }
            if !w.frozen && frozen {
                w.frozen_at = Some(Instant::now());
            }
            w.frozen = frozen && w.alive;
        }
        self.store.set_frozen(who.0, who.1, frozen);
        if !frozen {
            self.thaw.notify_waiters();
        }
    }

    /// Applies the store's facts to the checks. Called by the store's observer as each
    /// write is applied.
    pub fn on_fact(&self, fact: &Fact) {
        let floor = match fact {
            Fact::Commit { node, epoch, .. } => Some(
                self.store
                    .floor_max_before_commit(&format!("n{}", node + 1), *epoch),
            ),
            _ => None,
        };
        let mut w = self.lock();
        if let Some(floor) = floor {
            w.floor_at_commit = floor;
        }
        w.fact(fact);
        if let Fact::Renewed {
            node, inc, sent, ..
        } = fact
        {
            // (3) The service of a running warden is down by the end of the lease the
            // store granted (a frozen one's, once it wakes: not checked here).
            let who = (*node, *inc);
            let end = *sent + w.plan.cfg.lease();
            if w.lease_end.get(&who).is_some_and(|e| *e >= end) {
                return;
            }
            w.lease_end.insert(who, end);
            drop(w);
            let world = self.clone();
            tokio::spawn(async move {
                // A warden frozen over its lease end kills its service right after it
                // wakes: checked then.
                let mut at = end + LEASE_SLACK;
                let mut w = loop {
                    tokio::time::sleep_until(at).await;
                    let w = world.lock();
                    match w.wardens.get(&who) {
                        Some(x) if x.alive && x.frozen => at = Instant::now() + POLL,
                        Some(x) if x.thawed.is_some_and(|t| t + LEASE_SLACK > Instant::now()) => {
                            at = x.thawed.unwrap() + LEASE_SLACK
                        }
                        _ => break w,
                    }
                };
                if w.lease_end.get(&who) != Some(&end) {
                    return;
                }
                let frozen = w.wardens.get(&who).is_none_or(|x| x.frozen || !x.alive);
                let now = Instant::now();
                let left: Vec<String> = w
                    .services
                    .iter()
                    // A service that left uninterruptible sleep gets the same slack to
                    // die of the SIGKILL pending since.
                    .filter(|s| {
                        s.owner == who
                            && s.primary
                            && !s.demote_failed
                            && s.stuck_until.is_none_or(|t| t + LEASE_SLACK <= now)
                    })
                    .map(|s| s.describe())
                    .collect();
                if !frozen && !left.is_empty() {
                    let t0 = w.t0;
                    w.fail(format!(
                        "the service of {} still runs after the lease the store granted ended \
                         at {:.3}s: {left:?}",
                        name(who),
                        (end - t0).as_secs_f64()
                    ));
                }
            });
        }
    }
}

impl W {
    pub fn now(&self) -> Duration {
        Instant::now() - self.t0
    }

    /// The wall clock (every machine's, and the operator's).
    pub fn wall(&self) -> SystemTime {
        self.wall_at(Instant::now())
    }

    /// The wall clock at `at`.
    pub fn wall_at(&self, at: Instant) -> SystemTime {
        SystemTime::UNIX_EPOCH
            + Duration::from_secs(WALL_ORIGIN)
            + at.saturating_duration_since(self.t0)
    }

    pub fn log(&mut self, line: impl FnOnce() -> String) {
        if self.tracing {
            let at = self.now().as_secs_f64();
            let line = line();
            self.trace.push(format!("{at:>9.3}s {line}"));
        }
    }

    pub fn fail(&mut self, why: String) {
        if self.failure.is_none() {
            let at = self.now().as_secs_f64();
            self.log(|| format!("VIOLATION: {why}"));
            self.failure = Some(format!("at {at:.3}s: {why}"));
        }
    }

    pub fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub fn machine_of_place(&self, place: usize) -> usize {
        self.plan.layout.places[place].host
    }

    /// The record fields of a place on its machine's current boot.
    pub fn place_identity(&self, place: usize) -> (String, String, u64, String) {
        let p = &self.plan.layout.places[place];
        (
            boot_id(self.machines[p.host].boot),
            machine_id(p.host),
            p.pid_ns,
            p.name.clone(),
        )
    }

    pub fn alive(&self, who: Inc) -> bool {
        self.wardens.get(&who).is_some_and(|w| w.alive)
    }

    /// A new incarnation of `node` starts at its current place.
    pub fn new_warden(&mut self, who: Inc) -> NodeRecord {
        let place = self.place_of[who.0];
        let machine = self.machine_of_place(place);
        let boot = self.machines[machine].boot;
        let pid = 100_000 + who.0 as u32 * 10_000 + who.1;
        let start_time = self.id();
        self.wardens.insert(
            who,
            Warden {
                place,
                boot,
                pid,
                start_time,
                alive: true,
                frozen: false,
                frozen_at: None,
                thawed: None,
                gone_at: None,
                role: Role::Ineligible,
                role_since: Instant::now(),
                took_lock: None,
                took_over_own_crumb: false,
                commit_positions: BTreeMap::new(),
                declined: None,
                task: None,
            },
        );
        let (boot_id, machine_id, pid_ns, host) = self.place_identity(place);
        let node = &self.plan.layout.nodes[who.0];
        NodeRecord {
            node_id: format!("n{}", who.0 + 1),
            host,
            port: Some(node.port),
            boot_id,
            machine_id,
            pid_ns: Some(pid_ns),
            pid,
            start_time,
            incarnation: incarnation(who),
            ..Default::default()
        }
    }

    /// Every live warden that remembered the forgotten epoch when the store came back
    /// could not tell it in time: it ended before it could rejoin the restored store, or
    /// was frozen from before the store came back until it should have rejoined (and a
    /// warden frozen then is no memory: SPEC §3a's accepted limit, README "a ZooKeeper
    /// ensemble wiped ... while its active is frozen").
    fn rememberers_could_not(&self) -> bool {
        let (Some(by), Some(back)) = (self.rejoin_by, self.forgot_at) else {
            return false;
        };
        !self.rememberers.is_empty()
            && self.rememberers.iter().all(|r| {
                self.wardens.get(r).is_some_and(|x| {
                    x.gone_at.is_some_and(|gone| gone <= by)
                        || (x.frozen_at.is_some_and(|f| f <= back)
                            && (x.frozen || x.thawed.is_some_and(|t| t >= by)))
                })
            })
    }

    /// A run as primary begins: `owner` starts or promotes a service (`id`, whose own
    /// earlier run does not count) with `epoch`. Invariants 1 and 4 are checked here.
    fn primary_begins(&mut self, owner: Inc, epoch: Epoch, id: Option<u64>) {
        self.starts += 1;
        // (1) Never two services up as primary at the same instant, counting every
        // process of them.
        if let Some(other) = self
            .services
            .iter()
            .find(|s| s.primary && Some(s.id) != id && s.alive(Reach::Cgroup))
        {
            // The old service's epoch was forgotten, and no warden that could act
            // remembered it: nothing was left to fence it by (the accepted limit, counted
            // at the end of the run).
            if self.forgotten.is_some_and(|f| other.epoch <= f) && self.rememberers_could_not() {
                self.unremembered = self.unremembered.max(Some(other.epoch));
            }
            let why = format!(
                "two services up: {} starts with epoch {epoch} while the service of {} \
                 (epoch {}, up since {:.3}s) still runs as primary: {}",
                name(owner),
                name(other.owner),
                other.epoch,
                (other.since - self.t0).as_secs_f64(),
                other.describe()
            );
            self.fail(why);
        }
        // (4) Epochs of successive starts only grow (a restart under the same lock may
        // repeat its epoch).
        if let Some((prev, e)) = went_back(self.checks.last_start, owner, epoch) {
            self.fail(format!(
                "epoch went back: {} starts with epoch {epoch} after {} started with {e}",
                name(owner),
                name(prev)
            ));
        }
        self.checks.last_start = Some((owner, epoch));
    }

    /// The service of `owner` starts with `epoch`; invariants 1 and 4 are checked here.
    pub fn spawn_service(
        &mut self,
        owner: Inc,
        epoch: Epoch,
        cgroup: Option<u64>,
    ) -> (u64, u32, u64, oneshot::Receiver<String>) {
        self.primary_begins(owner, epoch, None);
        let id = self.id();
        let place = self.wardens[&owner].place;
        let machine = self.machine_of_place(place);
        let boot = self.machines[machine].boot;
        let pid_ns = self.plan.layout.places[place].pid_ns;
        let escapes = cgroup.is_some();
        let mut procs = vec![SvcProc {
            part: Part::Main,
            alive: true,
            ignores_term: self.rng.chance(0.2),
        }];
        let children = match self.rng.range(0..=99) {
            0..=39 => 0,
            40..=74 => 1,
            _ => 2,
        };
        for _ in 0..children {
            procs.push(SvcProc {
                part: Part::Child,
                alive: true,
                ignores_term: self.rng.chance(0.2),
            });
        }
        if escapes && self.rng.chance(0.3) {
            procs.push(SvcProc {
                part: Part::Escaped,
                alive: true,
                ignores_term: self.rng.chance(0.3),
            });
        }
        let pid = 500_000 + id as u32;
        let start_time = id;
        let (tx, rx) = oneshot::channel();
        let shape = procs.len();
        self.services.push(Service {
            id,
            owner,
            epoch,
            machine,
            boot,
            pid_ns,
            cgroup,
            pid,
            start_time,
            procs,
            stuck_until: None,
            exited: Some(tx),
            since: Instant::now(),
            hooks: false,
            primary: true,
            demote_failed: false,
        });
        self.log(|| {
            format!(
                "SERVICE {id} of {} UP with epoch {epoch}: {shape} process(es){}",
                name(owner),
                if cgroup.is_some() {
                    ", in its cgroup"
                } else {
                    ""
                }
            )
        });
        (id, pid, start_time, rx)
    }

    /// Hooks mode: the always-running service of `node` starts (as a replica, as the
    /// examples' units start it) at the place its warden runs now.
    pub fn start_db(&mut self, node: usize) -> u64 {
        let id = self.id();
        let place = self.place_of[node];
        let machine = self.machine_of_place(place);
        let boot = self.machines[machine].boot;
        let pid_ns = self.plan.layout.places[place].pid_ns;
        self.services.push(Service {
            id,
            owner: (node, self.current[node]),
            epoch: 0,
            machine,
            boot,
            pid_ns,
            cgroup: None,
            pid: 500_000 + id as u32,
            start_time: id,
            procs: vec![SvcProc {
                part: Part::Main,
                alive: true,
                ignores_term: false,
            }],
            stuck_until: None,
            exited: None,
            since: Instant::now(),
            hooks: true,
            primary: false,
            demote_failed: false,
        });
        // The unit starts it refusing writes, in the role its config last saved.
        if let Some(d) = &mut self.data {
            d.start(
                id,
                Address {
                    node,
                    machine,
                    pid_ns,
                },
            );
        }
        self.log(|| format!("SERVICE {id} of n{} up as a replica", node + 1));
        id
    }

    /// Hooks mode: the always-running service of `who`'s node where `who` runs (its
    /// machine and pid namespace), if it runs.
    pub fn db_of(&self, who: Inc) -> Option<u64> {
        let place = self.wardens.get(&who)?.place;
        let machine = self.machine_of_place(place);
        let pid_ns = self.plan.layout.places[place].pid_ns;
        self.services
            .iter()
            .find(|s| {
                s.hooks
                    && s.owner.0 == who.0
                    && s.machine == machine
                    && s.pid_ns == pid_ns
                    && s.alive(Reach::Main)
            })
            .map(|s| s.id)
    }

    /// Hooks mode: `who`'s promote hook takes effect: its service serves as primary with
    /// `epoch` from now on (invariants 1 and 4 checked as for a start).
    pub fn promote_db(&mut self, who: Inc, epoch: Epoch) -> Result<(), String> {
        let Some(id) = self.db_of(who) else {
            return Err("the service is not running".into());
        };
        self.promote_data(who, id, epoch);
        if self
            .service(id)
            .is_some_and(|s| s.primary && s.owner == who)
        {
            return Ok(());
        }
        self.primary_begins(who, epoch, Some(id));
        let s = self.service_mut(id).expect("found above");
        s.primary = true;
        s.owner = who;
        s.epoch = epoch;
        s.since = Instant::now();
        s.demote_failed = false;
        self.log(|| format!("SERVICE {id} of {} PRIMARY with epoch {epoch}", name(who)));
        Ok(())
    }

    /// Hooks mode: `who`'s demote hook takes effect (or fails, `ok` false, leaving the
    /// service as it was).
    pub fn demote_db(&mut self, who: Inc, ok: bool) {
        let Some(id) = self.db_of(who) else {
            return;
        };
        let s = self.service_mut(id).expect("found above");
        if !s.primary {
            return;
        }
        if !ok {
            s.demote_failed = true;
            return;
        }
        if let Some(c) = self.data.as_mut().and_then(|d| d.copies.get_mut(&id)) {
            c.refuses = true;
        }
        let s = self.service_mut(id).expect("found above");
        s.primary = false;
        s.demote_failed = false;
        self.log(|| format!("SERVICE {id} of {} demoted to a replica", name(who)));
    }

    /// Whether service `id` runs and is not hung, now.
    pub fn db_running_now(&self, id: u64) -> bool {
        self.db_running(id, Instant::now())
    }

    /// Whether service `id` runs and is not hung.
    fn db_running(&self, id: u64, now: Instant) -> bool {
        self.service(id)
            .is_some_and(|s| s.alive(Reach::Main) && s.stuck_until.is_none_or(|t| t <= now))
    }

    /// `node`'s newest service that runs and is not hung (where a successor's address
    /// leads).
    fn db_newest(&self, node: usize, now: Instant) -> Option<&Service> {
        self.services
            .iter()
            .rev()
            .find(|s| s.hooks && s.owner.0 == node && self.db_running(s.id, now))
    }

    /// The copy that a replica `id` reads when it replicates `at`: that node's newest
    /// service running there, if both run on machines that reach each other.
    fn db_source(&self, id: u64, at: Address, now: Instant) -> Option<u64> {
        let reach = |m: usize| self.machines[m].up && !self.machines[m].isolated;
        let me = self.service(id).filter(|_| self.db_running(id, now))?;
        let up = self.services.iter().rev().find(|s| {
            s.hooks
                && s.owner.0 == at.node
                && s.machine == at.machine
                && s.pid_ns == at.pid_ns
                && self.db_running(s.id, now)
        })?;
        (me.machine == up.machine || (reach(me.machine) && reach(up.machine))).then_some(up.id)
    }

    /// The client's tick: replication, then a write to each copy that accepts one.
    pub fn data_tick(&mut self) {
        let Some(mut d) = self.data.take() else {
            return;
        };
        let now = Instant::now();
        let takers = d.tick(
            now,
            |id| self.db_running(id, now),
            |id, up| self.db_source(id, up, now),
        );
        self.data = Some(d);
        self.two_writable(&takers, "took a write in the same client tick");
    }

    /// Fails the seed when more than one copy accepts writes (issue 32 point 2).
    fn two_writable(&mut self, takers: &[u64], how: &str) {
        if takers.len() > 1 {
            let names: Vec<String> = takers
                .iter()
                .map(|id| {
                    let node = self.data.as_ref().map_or(0, |d| d.copies[id].node);
                    format!("n{} (service {id})", node + 1)
                })
                .collect();
            self.fail(format!(
                "two copies accept writes at once: the services of {} {how}",
                names.join(" and ")
            ));
        }
    }

    /// Copies that accept a write now.
    fn writable_now(&self) -> Vec<u64> {
        let now = Instant::now();
        self.data
            .as_ref()
            .map(|d| d.writable(now, |n| self.db_running(n, now)))
            .unwrap_or_default()
    }

    /// An epoch a hook passed `node`'s copy; it must not go back, but below an epoch the
    /// store forgot (SPEC §3a's accepted limit, counted apart).
    fn see_epoch(&mut self, id: u64, node: usize, epoch: Epoch, hook: &str) {
        let forgotten = self.forgotten;
        let Some(d) = &mut self.data else {
            return;
        };
        if let Err(seen) = d.see_epoch(id, epoch) {
            if forgotten.is_some_and(|f| epoch <= f) {
                d.epoch_back_apart += 1;
                self.log(|| {
                    format!(
                        "ACCEPTED LIMIT: the {hook} hook of n{} passed epoch {epoch} after \
                         {seen}, below an epoch the store forgot",
                        node + 1
                    )
                });
            } else {
                self.fail(format!(
                    "the epoch went back at a service: the {hook} hook of n{} passed epoch \
                     {epoch} after {seen}",
                    node + 1
                ));
            }
        }
    }

    /// Issue 33: of the writes acknowledged by the time it took the lock that `node`'s copy
    /// `id` lacks as it is promoted by a takeover, those another eligible standby held (its warden alive and a standby since
    /// before the winner took the lock, its service running and healthy, of `node`'s
    /// priority or above): counted, and logged.
    fn count_better_held(&mut self, node: usize, id: u64) {
        let (took, own_crumb, stored) = self
            .wardens
            .iter()
            .filter(|(k, w)| k.0 == node && w.alive)
            .filter_map(|(_, w)| {
                w.took_lock
                    .map(|t| (t, w.took_over_own_crumb, w.commit_positions.clone()))
            })
            .max_by_key(|(t, _, _)| *t)
            .map_or((None, false, BTreeMap::new()), |(t, c, s)| (Some(t), c, s));
        let Some(d) = &self.data else {
            return;
        };
        // Only writes acknowledged by the time the winner took the lock: what an old
        // primary, still running until fenced, acknowledged after that placed nobody
        // (no look before the decision could have seen them; the simulation's seed 27257:
        // two replicas streaming alike, the one whose check ran last 2 ms before the
        // take printed more, and held one write more when the fence stopped the stream).
        let newly: Vec<u64> = d
            .would_lose(id)
            .into_iter()
            .filter(|w| took.is_none_or(|t| d.acked_by(*w, t)))
            .collect();
        if newly.is_empty() {
            return;
        }
        // Named by a switchover pending when it took the lock: the operator's choice, not
        // a better-placed standby passed over (the simulation's seed 347307: `failover
        // --to n3 --force` named a node whose copy had just restarted with less).
        if self.named.iter().any(|(n, asked, lapses)| {
            *n == node && took.is_some_and(|t| *asked <= t && t <= *lapses)
        }) {
            self.log(|| {
                format!(
                    "NAMED: n{} promoted by a takeover as the switchover named it lacks {} \
                     acknowledged writes (the operator's choice)",
                    node + 1,
                    newly.len()
                )
            });
            return;
        }
        let mine = self.plan.priorities[node];
        // Placed by what the checks had printed when the winner took the lock (what the
        // records could show then): a copy ahead of what its check last printed is not
        // better-placed, only luckier.
        let said_at = |n: usize, by: Option<Instant>| {
            self.said[n]
                .iter()
                .rev()
                .find(|(at, _)| by.is_none_or(|t| *at <= t))
                .and_then(|(_, p)| *p)
        };
        // And still by what they printed when the winner committed (its look at the
        // members came between): one whose check printed garbage or failed meanwhile is
        // "unknown", placed last (SPEC §6b; the simulation's seed 19181).
        let committed = self.checks.commits_at.iter().max().copied();
        let mut best: Option<(usize, u64, bool, bool)> = None;
        // The round: since the last commit before the winner took the lock (its own
        // commit, seen by now, is not the start of its round).
        let round = self
            .checks
            .commits_at
            .iter()
            .filter(|c| took.is_none_or(|t| **c < t))
            .max()
            .copied();
        for (who, w) in &self.wardens {
            let other = who.0;
            if other == node || !w.alive || self.unhealthy[other] {
                continue;
            }
            if w.role != Role::Standby || took.is_some_and(|t| w.role_since > t) {
                continue;
            }
            // Cut off from the store (its record may still say standby) or frozen since
            // before the winner's turn: not a candidate.
            let (cut, cut_at) = self.cut_off[other];
            if cut
                || w.frozen
                || took
                    .zip(cut_at)
                    .is_some_and(|(t, c)| c + self.plan.cfg.session_timeout >= t)
            {
                continue;
            }
            let above_by = |by: Option<Instant>| {
                self.plan.priorities[other] > mine
                    || match (said_at(other, by), said_at(node, by)) {
                        (Some(a), Some(b)) => a > b,
                        (Some(_), None) => true,
                        _ => false,
                    }
            };
            let placed_above = above_by(took) && above_by(committed);
            // And by its record as stored at the commit, which the winner's look a moment
            // before could show at most: a record that lagged its check (a lost write held
            // the member writer back: the simulation's seed 20357) is counted apart.
            let record_above = self.plan.priorities[other] > mine
                || match (
                    stored.get(&other).copied().flatten(),
                    said_at(node, committed),
                ) {
                    (Some(a), Some(b)) => a > b,
                    (Some(_), None) => true,
                    _ => false,
                };
            if !placed_above {
                continue;
            }
            if self.plan.priorities[other] < mine || self.plan.priorities[other] == 0 {
                continue;
            }
            let Some(copy) = self.db_of(*who) else {
                continue;
            };
            let held = d.held_of(copy, &newly);
            // It let go of a lock it had won in this round, before fencing anything: its
            // own look placed the winner (or another) above it then, by the records of that
            // moment (its check printed garbage; positions still moved while the old
            // primary streamed until fenced). Counted apart.
            let declined = w
                .declined
                .is_some_and(|t| round.is_none_or(|r| t > r) && took.is_none_or(|k| t <= k));
            if held > best.map_or(0, |b| b.1) {
                best = Some((other, held, declined, !record_above));
            }
        }
        if let Some((other, held, declined, lagged)) = best {
            let d = self.data.as_mut().expect("checked above");
            if lagged {
                d.lost_record_lag += held;
                d.record_lag_takeovers += 1;
            } else if own_crumb {
                d.lost_own_crumb += held;
                d.own_crumb_takeovers += 1;
            } else if declined {
                d.lost_declined += held;
                d.declined_takeovers += 1;
            } else {
                d.lost_better_held += held;
                d.better_held_takeovers += 1;
            }
            self.log(|| {
                format!(
                    "BETTER HELD{}: n{} promoted by a takeover lacks {held} acknowledged writes \
                     that n{}'s copy held",
                    if lagged {
                        " (its record did not show it yet)"
                    } else if own_crumb {
                        " (by one that found its own breadcrumb under the lock)"
                    } else if declined {
                        " (by one that stood aside in this round)"
                    } else {
                        ""
                    },
                    node + 1,
                    other + 1
                )
            });
        }
    }

    /// `promote` takes effect on `who`'s copy: a primary that accepts writes. Counts what
    /// it lacks of the acknowledged writes (none may be lost in a planned switchover), and
    /// checks that no other copy accepts writes.
    fn promote_data(&mut self, who: Inc, id: u64, epoch: Epoch) {
        let node = who.0;
        if self.data.is_none() {
            return;
        }
        self.see_epoch(id, node, epoch, "promote");
        let d = self.data.as_mut().expect("checked above");
        let how = match d.handover.take() {
            Some((_, to, copy))
                if to == node
                    && copy == id
                    && d.handover_over
                    && d.copies
                        .get(&copy)
                        .is_some_and(|c| c.dropped > d.handover_dropped) =>
            {
                Promotion::Unplanned
            }
            Some((_, to, copy)) if to == node && copy == id => Promotion::Planned,
            Some((_, to, copy)) if to == node => {
                d.successor_moved += 1;
                self.log(|| {
                    format!(
                        "SUCCESSOR MOVED: n{} promotes service {id}, not service {copy} that \
                         the handover checked",
                        node + 1
                    )
                });
                Promotion::Unplanned
            }
            Some((from, ..)) if from == node && d.handover_from == Some(id) => Promotion::CalledOff,
            Some((from, ..)) if from == node => {
                // Another copy of the node that handed over (its warden moved, or came
                // back over another disk): not the one that handed over, so a takeover.
                self.log(|| {
                    format!(
                        "HANDED-OVER NODE MOVED: n{} promotes service {id}, not the copy that \
                         handed over",
                        node + 1
                    )
                });
                Promotion::Unplanned
            }
            _ => Promotion::Unplanned,
        };
        let d = self.data.as_mut().expect("checked above");
        let c = d.copies.get_mut(&id).expect("a running service's");
        c.upstream = None;
        c.refuses = false;
        if how == Promotion::Unplanned {
            self.count_better_held(node, id);
        }
        let d = self.data.as_mut().expect("checked above");
        let reached_before = d.reached_lost;
        let lost = d.lose_at_promotion(id, how);
        if d.reached_lost > reached_before {
            self.log(|| {
                format!(
                    "REACHED AND LOST: n{} promoted lacks a write it held when the copies last \
                     stopped taking writes",
                    node + 1
                )
            });
        }
        let d = self.data.as_mut().expect("checked above");
        if lost > 0 {
            let total = d.acked.len();
            if how == Promotion::Unplanned {
                self.log(|| {
                    format!(
                        "LOST {lost} of {total} acknowledged writes: n{} promoted by a \
                         takeover lacks them",
                        node + 1
                    )
                });
            } else {
                self.fail(format!(
                    "{lost} acknowledged writes lost in a planned switchover ({how:?}): \
                     n{} promoted with epoch {epoch} lacks them",
                    node + 1
                ));
            }
        }
        let takers = self.writable_now();
        self.two_writable(
            &takers,
            &format!("accept writes once n{} is promoted", node + 1),
        );
    }

    /// `follow` takes effect on `who`'s copy: it replicates `active`.
    pub fn follow_data(&mut self, who: Inc, active: usize, epoch: Option<Epoch>) {
        let Some(id) = self.db_of(who).filter(|_| self.data.is_some()) else {
            return;
        };
        // The active's address: where its warden runs now.
        let place = self.place_of[active];
        let at = Address {
            node: active,
            machine: self.machine_of_place(place),
            pid_ns: self.plan.layout.places[place].pid_ns,
        };
        if let Some(e) = epoch {
            self.see_epoch(id, who.0, e, "follow");
        }
        let d = self.data.as_mut().expect("checked above");
        let c = d.copies.get_mut(&id).expect("a running service's");
        c.upstream = Some(at);
        c.refuses = false;
    }

    /// A planned demote's first half (SPEC §6a): `who`'s copy pauses writes until
    /// `until`; returns the last write it holds (what the successor must have).
    pub fn pause_data(&mut self, who: Inc, until: Instant) -> Option<u64> {
        let id = self.db_of(who)?;
        let c = self.data.as_mut()?.copies.get_mut(&id)?;
        c.paused_until = Some(until);
        c.log.last().copied()
    }

    /// The PostgreSQL recipe's first step of a planned demote: whether the successor
    /// answers as a standby (its copy runs, replicates, and this node's machine reaches
    /// it). Always true for Redis, which asks the successor nothing else.
    pub fn successor_answers(&self, who: Inc, successor: usize) -> bool {
        let now = Instant::now();
        let Some(d) = &self.data else {
            return false;
        };
        if d.recipe == Recipe::Redis {
            return true;
        }
        let (Some(mine), Some(theirs)) = (self.db_of(who), self.db_newest(successor, now)) else {
            return false;
        };
        let at = Address {
            node: successor,
            machine: theirs.machine,
            pid_ns: theirs.pid_ns,
        };
        d.copies
            .get(&theirs.id)
            .is_some_and(|c| c.upstream.is_some())
            && self
                .service(mine)
                .is_some_and(|_| self.db_source(mine, at, now).is_some())
    }

    /// Whether `successor`'s copy holds every write up to `last`. A replica linked to
    /// its upstream receives the stream within a round trip: the successor catches up
    /// first (the client's tick only paces the lag while writes go on).
    pub fn successor_has(&mut self, successor: usize, last: Option<u64>) -> bool {
        let now = Instant::now();
        let theirs = self.db_newest(successor, now).map(|s| s.id);
        let source = theirs.and_then(|id| {
            let up = self.data.as_ref()?.copies.get(&id)?.upstream?;
            self.db_source(id, up, now).map(|src| (id, src))
        });
        if let (Some((id, src)), Some(d)) = (source, self.data.as_mut()) {
            d.sync(id, src);
        }
        let Some(d) = &self.data else {
            return false;
        };
        self.db_newest(successor, now)
            .and_then(|s| d.copies.get(&s.id))
            .is_some_and(|c| c.has_all(last))
    }

    /// A planned demote's end: `who`'s copy refuses writes and its pause ends; when the
    /// successor has everything, the switchover hands over to it (the recipe before stop
    /// 32 made the successor a writable primary here, outside the lock).
    pub fn end_handover(&mut self, who: Inc, successor: usize, synced: bool) {
        let mine = self.db_of(who);
        let now = Instant::now();
        let theirs = self.db_newest(successor, now).map(|s| {
            let at = Address {
                node: successor,
                machine: s.machine,
                pid_ns: s.pid_ns,
            };
            (s.id, at)
        });
        let Some(d) = &mut self.data else {
            return;
        };
        let Some(c) = mine.and_then(|id| d.copies.get_mut(&id)) else {
            return;
        };
        c.refuses = true;
        c.paused_until = None;
        if !synced {
            return;
        }
        if let Some((copy, at)) = theirs {
            d.handover = Some((who.0, successor, copy));
            d.handover_from = mine;
            d.handover_over = false;
            d.handover_dropped = d.copies.get(&copy).map_or(0, |c| c.dropped);
            d.handovers += 1;
            if d.recipe == Recipe::Postgres {
                // The old primary is left a standby of the successor.
                if let Some(c) = mine.and_then(|id| d.copies.get_mut(&id)) {
                    c.upstream = Some(at);
                }
            }
        }
        if let (false, Some(mine), Some((theirs, at))) = (HANDOVER_INSIDE_LOCK, mine, theirs) {
            let c = d.copies.get_mut(&mine).expect("found above");
            c.upstream = Some(at);
            c.refuses = false;
            let s = d.copies.get_mut(&theirs).expect("a running service's");
            s.upstream = None;
            s.refuses = false;
            let takers = self.writable_now();
            self.two_writable(&takers, "accept writes after FAILOVER TO");
        }
        self.log(|| {
            format!(
                "HANDOVER by {}: n{} has every write",
                name(who),
                successor + 1
            )
        });
    }

    /// Hooks mode: a follow hook of `who` ended.
    pub fn followed(&mut self, who: Inc, ok: bool, detail: &str) {
        self.follows
            .entry(who)
            .or_default()
            .push((Instant::now(), ok));
        if !ok {
            self.follows_failed += 1;
        }
        self.log(|| {
            format!(
                "FOLLOW by {} {}: {detail}",
                name(who),
                if ok { "succeeded" } else { "FAILED" }
            )
        });
    }

    /// Whether the last follow hook of `who` that ended before `at` failed (SPEC §6:
    /// the node is ineligible until one succeeds).
    pub fn follow_failed_before(&self, who: Inc, at: Instant) -> bool {
        self.follows.get(&who).is_some_and(|f| {
            f.iter()
                .rev()
                .find(|(t, _)| *t < at)
                .is_some_and(|(_, ok)| !ok)
        })
    }

    pub fn service(&self, id: u64) -> Option<&Service> {
        self.services.iter().find(|s| s.id == id)
    }

    pub fn service_mut(&mut self, id: u64) -> Option<&mut Service> {
        self.services.iter_mut().find(|s| s.id == id)
    }

    /// The service a `ServiceIdentity` names, if any of it is left.
    pub fn service_by_pid(&self, pid: u32, start_time: u64) -> Option<u64> {
        self.services
            .iter()
            .find(|s| s.pid == pid && s.start_time == start_time)
            .map(|s| s.id)
    }

    /// Process `i` of `svc` is gone.
    pub fn proc_died(&mut self, svc: u64, i: usize, why: &str) {
        let Some(k) = self.services.iter().position(|s| s.id == svc) else {
            return;
        };
        let s = &mut self.services[k];
        if !s.procs[i].alive {
            return;
        }
        s.procs[i].alive = false;
        let part = s.procs[i].part;
        if part == Part::Main {
            if let Some(tx) = s.exited.take() {
                let _ = tx.send(format!("killed ({why})"));
            }
        }
        if !s.alive(Reach::Cgroup) {
            let owner = s.owner;
            self.services.remove(k);
            self.log(|| format!("SERVICE {svc} of {} DOWN ({why})", name(owner)));
        }
    }

    /// The warden process of `who` is gone (killed, fenced, exited). Its service's main
    /// process dies with it (parent-death signal); under systemd, the unit's cgroup goes:
    /// every process it started on this boot.
    pub fn warden_gone(&mut self, who: Inc, why: &str) -> Vec<(u64, Reach)> {
        let Some(w) = self.wardens.get_mut(&who) else {
            return Vec::new();
        };
        if !w.alive {
            return Vec::new();
        }
        w.alive = false;
        w.gone_at = Some(Instant::now());
        w.frozen = false;
        w.role = Role::Ineligible;
        if let Some(t) = w.task.take() {
            t.abort();
        }
        let (place, boot) = (w.place, w.boot);
        self.log(|| format!("{} gone ({why})", name(who)));
        let systemd = self.plan.layout.nodes[who.0].systemd;
        let machine = self.machine_of_place(place);
        // Hooks mode's service is a unit of its own: it outlives its warden.
        self.services
            .iter()
            .filter(|s| !s.hooks)
            .filter(|s| {
                if systemd {
                    s.owner.0 == who.0 && s.machine == machine && s.boot == boot
                } else {
                    s.owner == who
                }
            })
            .map(|s| (s.id, if systemd { Reach::Cgroup } else { Reach::Main }))
            .collect()
    }

    fn fact(&mut self, fact: &Fact) {
        match fact {
            Fact::Commit {
                node,
                inc,
                epoch,
                replaced,
                control,
                read_at,
                at,
                positions,
                ..
            } => {
                let who = (*node, *inc);
                self.checks.commits_at.push(*at);
                if let Some(w) = self.wardens.get_mut(&who) {
                    w.commit_positions = positions.clone();
                }
                self.log(|| format!("COMMIT by {} epoch {epoch}", name(who)));
                // A third node's commit ends a handover whose successor never promoted (the
                // request lapsed; the successor's warden was dead). Then, if a resync drops
                // writes from the successor's copy (it followed that node's stale copy),
                // what it lacks when it promotes later is a takeover's loss, counted apart,
                // not a planned switchover's (the simulation's seed 36146: the successor
                // promoted two epochs later). A copy that nothing rewound still fails the
                // seed for any loss.
                if let Some(d) = &mut self.data {
                    if d.handover
                        .is_some_and(|(from, to, _)| *node != from && *node != to)
                        && !d.handover_over
                    {
                        d.handover_over = true;
                        self.log(|| {
                            format!(
                                "HANDOVER OVER: {} committed before the successor promoted",
                                name(who)
                            )
                        });
                    }
                }
                // SPEC §6: a node of priority 0 is promoted only when a pending `failover
                // --to` names it, and one whose last follow hook failed (none succeeded
                // since) only when a pending `failover --to NODE --force` does. The commit
                // checked control's version: `control` is what the node read at `read_at`,
                // and decided on.
                let read = read_at.unwrap_or(*at);
                let me = format!("n{}", node + 1);
                let named = control.failover.as_ref().filter(|f| {
                    f.to.as_deref() == Some(me.as_str()) && f.pending_at(self.wall_at(read))
                });
                let priority_0 = self.plan.priorities[*node] == 0;
                let follow_failed = self.follow_failed_before(who, read);
                self.named_commits += u32::from(priority_0 && named.is_some());
                self.forced_commits += u32::from(follow_failed && named.is_some_and(|f| f.force));
                if priority_0 && named.is_none() {
                    self.fail(format!(
                        "{} of priority 0 committed epoch {epoch} without a pending `failover \
                         --to {me}` (control it read: {:?})",
                        name(who),
                        control.failover
                    ));
                }
                if follow_failed && !named.is_some_and(|f| f.force) {
                    self.fail(format!(
                        "{} committed epoch {epoch} although its last follow hook failed, \
                         without a pending `failover --to {me} --force` (control it read: \
                         {:?})",
                        name(who),
                        control.failover
                    ));
                }
                // Its own promotion makes its copy the newest: a follow that failed before
                // it (of an older active) keeps it out no longer (the elector drops it at
                // the commit, seed 61801). Seed 382720: forced in after a failed follow,
                // cut off, demoted by its lease, and nobody committed since: its next
                // promotion is the right one, and was flagged.
                self.follows.entry(who).or_default().push((*at, true));
                // SPEC 8: nobody is promoted while the cluster is paused, nor against a
                // switchover request that is still pending (its `from`, or a standby it
                // does not name). The commit checked control's version, so the promoted
                // node saw this very control.
                if control.paused {
                    self.fail(format!(
                        "{} committed epoch {epoch} while the cluster was paused",
                        name(who)
                    ));
                }
                self.must_clear = control.failover.clone().map(|f| (who, f));
                self.must_clear_forgot = self.forgot;
                if let Some(f) = &control.failover {
                    let me = format!("n{}", node + 1);
                    let pending = f.pending_at(self.wall());
                    let excluded = f.from == me || f.to.as_ref().is_some_and(|t| *t != me);
                    // SPEC §6a.2: a request this node called off is withdrawn for it (its
                    // warden clears it; if that write failed, it lingers for the others).
                    let withdrawn = self.withdrawn.get(node) == Some(f);
                    if pending && excluded && !withdrawn {
                        self.fail(format!(
                            "{} committed epoch {epoch} against a pending switchover request \
                             ({} -> {:?}, deadline {})",
                            name(who),
                            f.from,
                            f.to,
                            f.deadline
                        ));
                    }
                }
                let went = went_back(self.checks.last_commit, who, *epoch);
                let unheard = |e: Epoch| {
                    self.forgotten.is_some_and(|u| e <= u)
                        && self.floor_at_commit.is_none_or(|f| f < e)
                };
                if let Some((prev, e)) = went.filter(|&(_, e)| unheard(e)) {
                    let accepted =
                        self.unremembered.is_some_and(|u| e <= u) || self.rememberers_could_not();
                    if accepted {
                        self.accepted_limit += 1;
                    } else {
                        self.floor_race += 1;
                    }
                    self.log(|| {
                        format!(
                            "{}: {} committed epoch {epoch} after {} committed {e}, which the \
                             store forgot and its floor had not heard of{}",
                            if accepted {
                                "ACCEPTED LIMIT"
                            } else {
                                "FLOOR RACE"
                            },
                            name(who),
                            name(prev),
                            if accepted {
                                " (no live warden remembered it)"
                            } else {
                                " (a warden that had seen it lived, and joined too late)"
                            }
                        )
                    });
                } else if let Some((prev, e)) = went {
                    self.fail(format!(
                        "epoch went back: {} committed epoch {epoch} after {} committed {e}",
                        name(who),
                        name(prev)
                    ));
                }
                self.checks.last_commit = Some((who, *epoch));
                // (2) No promotion over the breadcrumb of an incarnation that may still
                // act: it must be dead, and nothing of its services left.
                if let Some(old) = replaced {
                    match parse_incarnation(&old.incarnation) {
                        Some(o) if o == who => {}
                        Some(o) => {
                            let running = self.alive(o);
                            let left: Vec<u64> = self
                                .services
                                .iter()
                                .filter(|s| s.owner == o && s.primary)
                                .map(|s| s.id)
                                .collect();
                            if running || !left.is_empty() {
                                self.fail(format!(
                                    "{} committed epoch {epoch} over the breadcrumb of {}, \
                                     which is not fenced (warden alive: {running}, services \
                                     left: {left:?})",
                                    name(who),
                                    name(o)
                                ));
                            }
                        }
                        None => {}
                    }
                }
            }
            Fact::BreadcrumbDeleted { by, record, .. } => {
                let owner = parse_incarnation(&record.incarnation);
                self.log(|| format!("BREADCRUMB of {:?} deleted by {by:?}", owner));
                if let (Some(by), Some(o)) = (by, owner) {
                    // A node deletes its own breadcrumb only once nothing of its service is
                    // left; the standby then promotes without fencing.
                    let by = (by.0, by.1);
                    let left: Vec<String> = self
                        .services
                        .iter()
                        .filter(|s| s.owner == o && s.primary)
                        .map(|s| s.describe())
                        .collect();
                    if by == o && !left.is_empty() {
                        self.fail(format!(
                            "{} deleted its breadcrumb while its service still runs: {left:?}",
                            name(o)
                        ));
                    }
                }
            }
            Fact::LockTaken {
                node,
                inc,
                epoch,
                crumb,
                ..
            } => {
                let who = (*node, *inc);
                let own_crumb = crumb
                    .as_ref()
                    .is_some_and(|r| parse_incarnation(&r.incarnation) == Some(who));
                if let Some(w) = self.wardens.get_mut(&who) {
                    w.took_lock = Some(Instant::now());
                    w.took_over_own_crumb = own_crumb;
                }
                self.log(|| format!("LOCK taken by {} epoch {epoch}", name(who)));
            }
            Fact::RefusedRestarted { node, inc, .. } => {
                let who = (*node, *inc);
                self.refused_restarted += 1;
                self.log(|| format!("JOIN of {} refused: the store restarted", name(who)));
            }
            Fact::LockGone {
                node, inc, expired, ..
            } => {
                let who = (*node, *inc);
                self.log(|| format!("LOCK of {} gone (expired: {expired})", name(who)));
            }
            _ => {}
        }
    }

    /// The greatest epoch committed so far.
    pub fn last_commit_epoch(&self) -> Option<Epoch> {
        self.checks.last_commit.map(|(_, e)| e)
    }

    /// Records a warden's reported role; two live wardens `active` at once is a violation.
    pub fn set_role(&mut self, who: Inc, role: Role) {
        let Some(w) = self.wardens.get_mut(&who) else {
            return;
        };
        if !w.alive || w.role == role {
            return;
        }
        if w.role == Role::Promoting && role == Role::Demoting {
            w.declined = Some(Instant::now());
        }
        w.role = role;
        w.role_since = Instant::now();
        self.log(|| format!("{} is {role}", name(who)));
        let actives: Vec<Inc> = self
            .wardens
            .iter()
            .filter(|(_, w)| w.alive && w.role == Role::Active)
            .map(|(k, _)| *k)
            .collect();
        if actives.len() > 1 {
            let names: Vec<String> = actives.iter().map(|a| name(*a)).collect();
            self.fail(format!("two live wardens report active: {names:?}"));
        }
    }

    /// The processes of `svc` that `reach` covers and still run.
    pub fn reached(&self, svc: u64, reach: Reach) -> Vec<usize> {
        self.service(svc).map_or_else(Vec::new, |s| {
            s.procs
                .iter()
                .enumerate()
                .filter(|(_, p)| p.alive && reach.covers(p.part))
                .map(|(i, _)| i)
                .collect()
        })
    }
}

impl World {
    /// Signals what `reach` covers of `svc`: each process exits after a while (SIGTERM:
    /// up to 1.5 × stop_timeout, unless it ignores it; SIGKILL: within 2 ms), or once it
    /// wakes when it is stuck in the kernel.
    pub fn signal(&self, svc: u64, reach: Reach, kill: bool, why: &'static str) {
        let mut w = self.lock();
        let hi = w.plan.cfg.stop_timeout.mul_f64(1.5).max(ms(2));
        let mut exits = Vec::new();
        for i in w.reached(svc, reach) {
            let s = w.service(svc).unwrap();
            if !kill && s.procs[i].ignores_term {
                continue;
            }
            let delay = if kill {
                between(&mut w.rng, Duration::ZERO, ms(2))
            } else {
                between(&mut w.rng, ms(1), hi)
            };
            exits.push((i, delay));
        }
        drop(w);
        for (i, delay) in exits {
            let world = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                loop {
                    let stuck = world.lock().service(svc).and_then(|s| s.stuck_until);
                    match stuck {
                        Some(t) if t > Instant::now() => tokio::time::sleep_until(t).await,
                        _ => break,
                    }
                }
                world.lock().proc_died(svc, i, why);
            });
        }
    }

    /// Kills the warden process of `who` now (kill -9, a fence, a reboot): its daemon
    /// stops, its store session goes silent, its service's processes die as SPEC §6 says.
    pub fn kill_warden(&self, who: Inc, why: &str) {
        let doomed = self.lock().warden_gone(who, why);
        self.store.kill(who.0, who.1);
        self.thaw.notify_waiters();
        for (svc, reach) in doomed {
            self.signal(svc, reach, true, "its warden died");
        }
    }

    /// Everything on `machine` dies at once; it comes back with a new boot.
    pub fn reboot(&self, machine: usize) -> Vec<Inc> {
        let victims: Vec<Inc> = {
            let w = self.lock();
            w.wardens
                .iter()
                .filter(|(_, x)| x.alive && w.machine_of_place(x.place) == machine)
                .map(|(k, _)| *k)
                .collect()
        };
        for v in &victims {
            self.kill_warden(*v, "machine rebooted");
        }
        let mut w = self.lock();
        let doomed: Vec<(u64, usize)> = w
            .services
            .iter()
            .filter(|s| s.machine == machine)
            .flat_map(|s| (0..s.procs.len()).map(move |i| (s.id, i)))
            .collect();
        for (svc, i) in doomed {
            w.proc_died(svc, i, "machine rebooted");
        }
        w.machines[machine].up = false;
        w.next_boot += 1;
        w.machines[machine].boot = w.next_boot;
        w.log(|| format!("machine m{} down", machine + 1));
        victims
    }
}

/// A future that is not polled while its incarnation is frozen (SIGSTOP): timers that
/// ran out meanwhile fire when it is thawed, as in a stopped process.
pub struct Freezable<F> {
    inner: Pin<Box<F>>,
    world: World,
    who: Inc,
    thawed: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl<F: Future> Freezable<F> {
    pub fn new(inner: F, world: World, who: Inc) -> Self {
        Freezable {
            inner: Box::pin(inner),
            world,
            who,
            thawed: None,
        }
    }
}

impl<F: Future> Future for Freezable<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        loop {
            if let Some(t) = self.thawed.as_mut() {
                if t.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.thawed = None;
            }
            if self.world.is_frozen(self.who) {
                let (world, who) = (self.world.clone(), self.who);
                self.thawed = Some(Box::pin(async move { world.gate(who).await }));
                continue;
            }
            return self.inner.as_mut().poll(cx);
        }
    }
}
