//! One seed's configuration and fault schedule, drawn from the seeded RNG before the run:
//! timeouts, where the nodes run, spawn or hooks mode (with or without a follow hook),
//! each node's `[election] priority`, and the faults, the operator's commands and the
//! hooks' failures among them.

use std::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

/// Virtual time: an offset from the run's base instant.
pub type Time = Duration;

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The simulation's random numbers: xoshiro256** seeded through SplitMix64. Our own, so a
/// seed means the same run whatever versions of `rand` come along, and cheap in a debug
/// build.
pub struct SimRng([u64; 4]);

impl SimRng {
    pub fn new(seed: u64) -> SimRng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        SimRng([next(), next(), next(), next()])
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let out = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Uniform in the range (the tiny modulo bias does not matter here).
    pub fn range(&mut self, r: RangeInclusive<u64>) -> u64 {
        let (lo, hi) = r.into_inner();
        match (hi - lo).checked_add(1) {
            Some(n) => lo + self.next_u64() % n,
            None => self.next_u64(),
        }
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.range(0..=items.len() as u64 - 1) as usize]
    }
}

/// A uniformly drawn duration in `[lo, hi]`.
pub fn between(rng: &mut SimRng, lo: Duration, hi: Duration) -> Duration {
    if hi <= lo {
        return lo;
    }
    Duration::from_nanos(rng.range(lo.as_nanos() as u64..=hi.as_nanos() as u64))
}

/// The settings of one run, the way `warden.toml` and ZooKeeper would set them.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub nodes: usize,
    /// `coordination.session_timeout` as configured (what the client asks for).
    pub session_timeout: Duration,
    /// What the server grants: ZooKeeper clamps the request to its `maxSessionTimeout`,
    /// which some seeds set below the configured timeout. Sessions expire after this.
    pub granted: Duration,
    /// ZooKeeper's tickTime: sessions expire on tick boundaries.
    pub tick: Duration,
    pub rejoin_delay: Duration,
    /// `service.stop_timeout`, the elector's `demote_grace`.
    pub stop_timeout: Duration,
    pub connect_timeout: Duration,
    /// The fence chain's hard timeout: a hanging method fails after this.
    pub fence_timeout: Duration,
}

impl SimConfig {
    /// The session timeout in force (SPEC §4 "The lease"): the smaller of the configured
    /// and the granted one.
    pub fn in_force(&self) -> Duration {
        self.session_timeout.min(self.granted)
    }

    /// The lease the store really grants: half the timeout in force.
    pub fn lease(&self) -> Duration {
        self.in_force() / 2
    }

    /// As `coord/zookeeper.rs` `op_timeout`, from the timeout in force.
    pub fn op_timeout(&self) -> Duration {
        (self.in_force() / 3).min(self.connect_timeout).max(ms(100))
    }
}

/// Where the nodes run (SPEC §5 "Which host is this?").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// One machine per node.
    Separate,
    /// n1 and n2 in containers on one machine: one kernel (boot id, machine id), two pid
    /// namespaces, two host names.
    Containers,
    /// n2's machine is a clone of n1's: its own machine id and boot id, n1's host name.
    /// ssh to that name reaches either machine.
    Clone,
    /// n1 is a pod: each restart of its warden lands on either of two places that answer
    /// to its host name: another machine, or the same machine in a new pid namespace.
    Moving,
}

/// Where a warden can run: a machine, a pid namespace on it, and the host name that
/// reaches it (by ssh, and in the records).
#[derive(Clone, Debug)]
pub struct PlacePlan {
    pub host: usize,
    pub pid_ns: u64,
    pub name: String,
}

#[derive(Clone, Debug)]
pub struct NodePlan {
    /// The places its warden may run at; it starts at the first.
    pub places: Vec<usize>,
    /// warden can give its service a cgroup of its own (delegated cgroup v2): stop, kill
    /// and fencing reach every process of it. Without, only its process group.
    pub cgroup: bool,
    /// warden runs as a systemd unit: when it dies, systemd kills what is left in the
    /// unit's cgroup (its service with it) and starts it again; exit 2 is not restarted.
    /// Without (a container): only the service's main process dies with warden
    /// (parent-death signal), and exit 2 is restarted like any other exit.
    pub systemd: bool,
    pub port: u16,
}

/// The machines, places and nodes of one seed.
#[derive(Clone, Debug)]
pub struct Layout {
    pub topology: Topology,
    /// The machines: machine `i` (`m<i+1>` in traces) has machine id
    /// `MACHINE_ID_BASE + i`.
    pub hosts: usize,
    pub places: Vec<PlacePlan>,
    pub nodes: Vec<NodePlan>,
}

/// `/etc/machine-id` of machine `i` is this plus `i`, in hex.
pub const MACHINE_ID_BASE: u64 = 0x3a00_0000;

/// How the nodes' service is controlled (SPEC §6); every node of a seed has the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// warden starts the service on the active and stops it on demotion.
    Spawn,
    /// The service always runs (a database, one per node); `promote`/`demote` hooks change
    /// its role, and with `follow` each standby repoints it at every new active.
    Hooks { follow: bool },
}

/// How a store forgets (issue 32 point 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Forget {
    /// Restored to the state `k` writes ago (a backup, a lagging replica).
    Writes(usize),
    /// The writes of the last `t` are gone (Redis `appendfsync everysec` after a crash).
    Last(Duration),
    /// Wiped: back to what `warden init` left, with no session.
    Wiped,
}

/// A hook of hooks mode, for [`FaultKind::HookFault`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    Promote,
    Demote,
}

#[derive(Clone, Debug)]
pub enum FaultKind {
    /// SIGSTOP of the node's warden (not of its service), SIGCONT after `dur`.
    Freeze { node: usize, dur: Duration },
    /// `kill -9` of the node's warden; systemd starts a new incarnation after `restart`.
    Crash { node: usize, restart: Duration },
    /// SIGTERM: a clean handover; a new incarnation starts `restart` after the exit.
    Stop { node: usize, restart: Duration },
    /// The managed service dies by itself.
    ServiceCrash { node: usize },
    /// The service health check turns unhealthy.
    Unhealthy { node: usize },
    /// The node cannot reach ZooKeeper for `dur`; with `host_reachable` false, peers cannot
    /// reach the host for fencing either.
    Partition {
        node: usize,
        dur: Duration,
        host_reachable: bool,
    },
    /// The ensemble has no quorum for `dur`: nothing is answered, no session expires.
    StoreDown { dur: Duration },
    /// Fence methods started in the next `dur` fail at once, or hang until their timeout.
    FenceFault { dur: Duration, hang: bool },
    /// The service sits in uninterruptible sleep (a hung mount) for `dur`: signals and
    /// SIGKILL take effect only afterwards, and a fence cannot verify it gone.
    StuckService { node: usize, dur: Duration },
    /// The machine reboots: everything on it dies at once; it is unreachable for `down`,
    /// then comes back with a new boot id (same machine id) and starts its wardens again.
    Reboot { host: usize, down: Duration },
    /// The service's main process exits (a wrapper script, a master that died); its
    /// children run on.
    MainExits { node: usize },
    /// The operator runs `warden failover [--to n<to>] --timeout <timeout>` (the real
    /// command's functions, through a store session of its own). `killed`: the command is
    /// killed right after it wrote the request, so nobody waits on it. A `to` that names
    /// the active node when the command runs is moved to the next node, mostly (an
    /// operator knows which node is active), but not always (the refusal is tried too).
    Switchover {
        to: Option<usize>,
        retarget: bool,
        timeout: Duration,
        killed: bool,
        /// `--force` (with `--to`): the target takes over even while ineligible.
        force: bool,
    },
    /// `warden pause`, then `warden resume` after `dur` (retried until it is written).
    Pause { dur: Duration },
    /// Hooks mode: the node's `promote` or `demote` hook started in the next `dur` fails
    /// (after a short while), or hangs until `hook_timeout`; either way it has done its
    /// work first or not, as the world's RNG says.
    HookFault {
        node: usize,
        hook: Hook,
        dur: Duration,
        hang: bool,
    },
    /// Hooks mode with `follow`: the node's follow hook fails (or hangs until
    /// `hook_timeout`) for `dur`, or for good when `None` (a replica that cannot reach
    /// anyone: SPEC §6 keeps it out until one succeeds).
    FollowBroken {
        node: usize,
        dur: Option<Duration>,
        hang: bool,
    },
    /// `warden failover --cancel`.
    Cancel,
    /// The store is down for `down`, then comes back having forgotten (issue 32 point 1);
    /// the operator runs `init --force` when `status` says it lost data.
    StoreForgets { how: Forget, down: Duration },
    /// A TTL store's clock steps by `by` (back, or forward within or `beyond` the
    /// README's bound of `session_timeout / 2`).
    StoreClock {
        by: Duration,
        back: bool,
        beyond: bool,
    },
    /// For `dur` the store answers `extra` late: past `op_timeout`, its writes applied.
    StoreSlow { dur: Duration, extra: Duration },
}

#[derive(Clone, Debug)]
pub struct Fault {
    pub at: Time,
    /// When it has ended, restarts and deadlines included.
    pub end: Time,
    pub kind: FaultKind,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = |i: &usize| format!("n{}", i + 1);
        write!(f, "{:>9.3}s ", self.at.as_secs_f64())?;
        match &self.kind {
            FaultKind::Freeze { node, dur } => write!(f, "freeze {} for {dur:?}", n(node)),
            FaultKind::Crash { node, restart } => {
                write!(f, "kill -9 {}, restart after {restart:?}", n(node))
            }
            FaultKind::Stop { node, restart } => {
                write!(f, "SIGTERM {}, restart {restart:?} after exit", n(node))
            }
            FaultKind::ServiceCrash { node } => write!(f, "service of {} crashes", n(node)),
            FaultKind::Unhealthy { node } => write!(f, "service of {} unhealthy", n(node)),
            FaultKind::Partition {
                node,
                dur,
                host_reachable,
            } => write!(
                f,
                "partition {} from the store for {dur:?}{}",
                n(node),
                if *host_reachable {
                    ""
                } else {
                    " (host unreachable)"
                }
            ),
            FaultKind::StoreDown { dur } => write!(f, "store unavailable for {dur:?}"),
            FaultKind::FenceFault { dur, hang } => write!(
                f,
                "fence methods {} for {dur:?}",
                if *hang { "hang" } else { "fail" }
            ),
            FaultKind::StuckService { node, dur } => {
                write!(f, "service of {} stuck in D state for {dur:?}", n(node))
            }
            FaultKind::Reboot { host, down } => {
                write!(f, "machine m{} reboots, down for {down:?}", host + 1)
            }
            FaultKind::MainExits { node } => {
                write!(
                    f,
                    "main process of n{}'s service exits, its children run on",
                    node + 1
                )
            }
            FaultKind::Switchover {
                to,
                timeout,
                killed,
                force,
                ..
            } => write!(
                f,
                "OPERATOR failover{}{} --timeout {timeout:?}{}",
                to.map_or(String::new(), |t| format!(" --to {}", n(&t))),
                if *force { " --force" } else { "" },
                if *killed {
                    ", the command killed once the request is written"
                } else {
                    ""
                }
            ),
            FaultKind::Pause { dur } => write!(f, "OPERATOR pause, resume after {dur:?}"),
            FaultKind::Cancel => write!(f, "OPERATOR failover --cancel"),
            FaultKind::StoreForgets { how, down } => {
                write!(f, "store down for {down:?}, back having forgotten: {how:?}")
            }
            FaultKind::StoreClock { by, back, beyond } => write!(
                f,
                "store clock steps {} by {by:?}{}",
                if *back { "back" } else { "forward" },
                if *beyond {
                    " (beyond the bound of session_timeout / 2)"
                } else {
                    ""
                }
            ),
            FaultKind::StoreSlow { dur, extra } => {
                write!(f, "store answers {extra:?} late for {dur:?}")
            }
            FaultKind::HookFault {
                node,
                hook,
                dur,
                hang,
            } => write!(
                f,
                "{hook:?} hook of {} {} for {dur:?}",
                n(node),
                if *hang { "hangs" } else { "fails" }
            ),
            FaultKind::FollowBroken { node, dur, hang } => write!(
                f,
                "follow hook of {} {} {}",
                n(node),
                if *hang { "hangs" } else { "fails" },
                dur.map_or("for good".to_string(), |d| format!("for {d:?}"))
            ),
        }
    }
}

/// What one seed runs.
#[derive(Clone, Debug)]
pub struct Plan {
    pub cfg: SimConfig,
    pub layout: Layout,
    pub mode: Mode,
    /// `[election] priority` of each node (SPEC §6): 0 never takes the lock by itself.
    pub priorities: Vec<u16>,
    pub faults: Vec<Fault>,
    /// When every scheduled fault has ended (restarts after a clean stop are added as they
    /// happen). Background connection losses and latency spikes stop here too.
    pub faults_end: Time,
    /// The fence chain is the `signal` method alone: a node on another machine cannot be
    /// fenced, and only the operator's `fence --confirm` lets another node promote.
    pub signal_only: bool,
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.cfg;
        writeln!(
            f,
            "{} nodes, session_timeout {:?} (granted {:?}, lease {:?}), tick {:?}, stop_timeout \
             {:?}, rejoin_delay {:?}, fence timeout {:?}",
            c.nodes,
            c.session_timeout,
            c.granted,
            c.lease(),
            c.tick,
            c.stop_timeout,
            c.rejoin_delay,
            c.fence_timeout
        )?;
        let priorities: Vec<String> = self
            .priorities
            .iter()
            .enumerate()
            .map(|(i, p)| format!("n{} {p}", i + 1))
            .collect();
        writeln!(
            f,
            "  {}; priorities {}{}",
            match self.mode {
                Mode::Spawn => "spawn mode",
                Mode::Hooks { follow: true } => "hooks mode with a follow hook",
                Mode::Hooks { follow: false } => "hooks mode without a follow hook",
            },
            priorities.join(", "),
            if self.signal_only {
                "; fence chain: signal only"
            } else {
                ""
            }
        )?;
        let l = &self.layout;
        write!(f, "  {:?}:", l.topology)?;
        for (i, n) in l.nodes.iter().enumerate() {
            let places: Vec<String> = n
                .places
                .iter()
                .map(|&p| {
                    let p = &l.places[p];
                    format!("{} (m{}, pid ns {})", p.name, p.host + 1, p.pid_ns)
                })
                .collect();
            write!(
                f,
                " n{} at {}{}{};",
                i + 1,
                places.join(" or "),
                if n.cgroup {
                    ", cgroup"
                } else {
                    ", process group only"
                },
                if n.systemd { ", systemd" } else { "" }
            )?;
        }
        writeln!(f)?;
        if self.faults.is_empty() {
            writeln!(f, "  no faults")?;
        }
        for fault in &self.faults {
            writeln!(f, "  {fault}")?;
        }
        write!(f, "  faults end at {:.3}s", self.faults_end.as_secs_f64())
    }
}

/// Draws a seed's plan. Everything the simulation had before hosts, process trees and
/// granted timeouts comes from `rng` in the same order as before; the newer parts come from
/// `aux`, the operator's commands from `ops`, and hooks mode, priorities and the hooks'
/// faults from `hk`, so that adding them did not change what the older parts of a seed do.
pub fn draw(
    rng: &mut SimRng,
    aux: &mut SimRng,
    ops: &mut SimRng,
    hk: &mut SimRng,
    nodes: usize,
    max_faults: usize,
) -> Plan {
    let session_timeout = rng.pick(&[ms(2000), ms(4000), ms(6000)]);
    let tick = session_timeout / rng.pick(&[3, 5, 10]);
    let lease = session_timeout / 2;
    // Up to 80% of the lease: past 2/3 `check-config` warns that one late renewal demotes.
    let stop_timeout = lease.mul_f64(rng.pick(&[0.05, 0.2, 0.5, 0.8]));
    // ZooKeeper's maxSessionTimeout below what warden asks for, in some seeds; never
    // below its minimum of two ticks.
    let granted = if aux.chance(0.25) {
        (session_timeout.mul_f64(aux.pick(&[0.4, 0.5, 0.75]))).max(tick * 2)
    } else {
        session_timeout
    };
    let cfg = SimConfig {
        nodes,
        session_timeout,
        granted,
        tick,
        rejoin_delay: rng.pick(&[ms(200), ms(1000)]),
        stop_timeout,
        connect_timeout: ms(5000),
        fence_timeout: rng.pick(&[ms(1000), ms(5000)]),
    };
    let st = session_timeout;
    let window = between(rng, st * 2, st * 6);
    let count = rng.range(0..=max_faults as u64) as usize;
    let mut faults = Vec::with_capacity(count);
    let mut faults_end = ms(500);
    for _ in 0..count {
        let at = ms(500) + between(rng, Duration::ZERO, window);
        let node = rng.range(0..=nodes as u64 - 1) as usize;
        let (kind, end) = match rng.range(0..=99) {
            0..=19 => {
                let dur = match rng.range(0..=9) {
                    0..=4 => between(rng, ms(10), lease),
                    5..=7 => between(rng, lease, st + st / 2),
                    _ => between(rng, st + st / 2, st * 4),
                };
                (FaultKind::Freeze { node, dur }, at + dur)
            }
            20..=31 => {
                let restart = between(rng, Duration::ZERO, st * 3);
                (FaultKind::Crash { node, restart }, at + restart)
            }
            32..=39 => {
                let restart = between(rng, Duration::ZERO, st * 2);
                (FaultKind::Stop { node, restart }, at + restart)
            }
            40..=49 => (FaultKind::ServiceCrash { node }, at),
            50..=54 => (FaultKind::Unhealthy { node }, at),
            55..=71 => {
                let dur = between(rng, ms(50), st * 4);
                let host_reachable = rng.chance(0.7);
                (
                    FaultKind::Partition {
                        node,
                        dur,
                        host_reachable,
                    },
                    at + dur,
                )
            }
            72..=81 => {
                let dur = between(rng, ms(100), st * 3);
                (FaultKind::StoreDown { dur }, at + dur)
            }
            82..=93 => {
                let dur = between(rng, ms(100), st * 4);
                let hang = rng.chance(0.5);
                (
                    FaultKind::FenceFault { dur, hang },
                    at + dur + cfg.fence_timeout,
                )
            }
            _ => {
                let dur = between(rng, ms(10), st * 2);
                (FaultKind::StuckService { node, dur }, at + dur)
            }
        };
        faults_end = faults_end.max(end);
        faults.push(Fault { at, end, kind });
    }
    let layout = draw_layout(aux, nodes);
    // The newer faults, on top of the older ones.
    let extra = if max_faults == 0 {
        0
    } else {
        match aux.range(0..=99) {
            0..=49 => 0,
            50..=84 => 1,
            _ => 2,
        }
    };
    for _ in 0..extra {
        let at = ms(500) + between(aux, Duration::ZERO, window);
        let (kind, end) = if aux.chance(0.4) {
            let host = aux.range(0..=layout.hosts as u64 - 1) as usize;
            let down = between(aux, ms(500), st * 3);
            // Wardens come back a few seconds after the machine.
            (FaultKind::Reboot { host, down }, at + down + st)
        } else {
            let node = aux.range(0..=nodes as u64 - 1) as usize;
            (FaultKind::MainExits { node }, at)
        };
        faults_end = faults_end.max(end);
        faults.push(Fault { at, end, kind });
    }
    // The operator's commands: a request counts as a fault until its deadline, a pause
    // until its resume.
    let commands = if max_faults == 0 {
        0
    } else {
        match ops.range(0..=99) {
            0..=54 => 0,
            55..=89 => 1,
            _ => 2,
        }
    };
    for _ in 0..commands {
        let at = ms(500) + between(ops, Duration::ZERO, window);
        let (kind, end) = match ops.range(0..=99) {
            0..=64 => {
                let timeout = ops.pick(&[st / 2, st, st * 3, ms(30_000)]);
                let to = ops
                    .chance(0.6)
                    .then(|| ops.range(0..=nodes as u64 - 1) as usize);
                let killed = ops.chance(0.3);
                let retarget = ops.chance(0.8);
                let force = to.is_some() && hk.chance(0.3);
                (
                    FaultKind::Switchover {
                        to,
                        retarget,
                        timeout,
                        killed,
                        force,
                    },
                    // The request is written within an operation timeout of `at`.
                    at + timeout + cfg.op_timeout(),
                )
            }
            65..=89 => {
                let dur = between(ops, ms(100), st * 4);
                (FaultKind::Pause { dur }, at + dur)
            }
            _ => (FaultKind::Cancel, at),
        };
        faults_end = faults_end.max(end);
        faults.push(Fault { at, end, kind });
    }
    // Hooks mode in a third of the seeds, most of them with a follow hook; different
    // priorities in half (one node of priority 0 in most of those), never all 0.
    let mode = if hk.chance(0.35) {
        Mode::Hooks {
            follow: hk.chance(0.8),
        }
    } else {
        Mode::Spawn
    };
    let mut priorities = vec![DEFAULT_PRIORITY; nodes];
    if hk.chance(0.5) {
        for p in priorities.iter_mut() {
            *p = hk.pick(&[0, 0, 50, 100, 100, 900]);
        }
        if priorities.iter().all(|&p| p == 0) {
            let i = hk.range(0..=nodes as u64 - 1) as usize;
            priorities[i] = hk.pick(&[50, 100, 900]);
        }
    }
    let hook_faults = match (mode, max_faults) {
        (Mode::Spawn, _) | (_, 0) => 0,
        _ => hk.range(0..=3),
    };
    for _ in 0..hook_faults {
        let at = ms(500) + between(hk, Duration::ZERO, window);
        let node = hk.range(0..=nodes as u64 - 1) as usize;
        let hang = hk.chance(0.3);
        let kind = match mode {
            Mode::Hooks { follow: true } if hk.chance(0.5) => {
                let dur = hk.chance(0.75).then(|| between(hk, ms(100), st * 4));
                FaultKind::FollowBroken { node, dur, hang }
            }
            _ => FaultKind::HookFault {
                node,
                hook: if hk.chance(0.5) {
                    Hook::Promote
                } else {
                    Hook::Demote
                },
                dur: between(hk, ms(100), st * 3),
                hang,
            },
        };
        // A hook started just before the window's end hangs or fails up to a hook
        // timeout later. A follow hook broken for good is a fault only where it starts:
        // liveness is not asked of a cluster it leaves without an eligible node.
        let end = match &kind {
            FaultKind::HookFault { dur, .. } => at + *dur + cfg.stop_timeout,
            FaultKind::FollowBroken { dur: Some(d), .. } => at + *d + cfg.stop_timeout,
            _ => at,
        };
        faults_end = faults_end.max(end);
        faults.push(Fault { at, end, kind });
    }
    faults.sort_by_key(|f| f.at);
    let signal_only = aux.chance(0.15);
    Plan {
        cfg,
        layout,
        mode,
        priorities,
        faults,
        faults_end,
        signal_only,
    }
}

/// Issue 32 point 1: one or two store faults in a fifth of the seeds, from their own
/// stream (`sf`), so that the other draws stay as they were. A clock step only where the
/// store has TTL leases (`ttl`); `op_timeout` is the callers'.
pub fn draw_store_faults(plan: &mut Plan, sf: &mut SimRng, ttl: bool, op_timeout: Duration) {
    if plan.faults.is_empty() && plan.faults_end <= ms(500) || !sf.chance(0.2) {
        return;
    }
    let st = plan.cfg.session_timeout;
    for _ in 0..sf.range(1..=2) {
        let at = between(sf, ms(500), st * 6);
        let (kind, end) = match sf.range(0..=99) {
            0..=59 => {
                let how = match sf.range(0..=9) {
                    0..=4 => Forget::Writes(sf.range(1..=8) as usize),
                    5..=8 => Forget::Last(between(sf, ms(100), ms(1500))),
                    _ => Forget::Wiped,
                };
                let down = between(sf, ms(100), st);
                // The operator's `init --force` takes a session timeout and two retries
                // after it: liveness waits for the operator (it counts as busy).
                (FaultKind::StoreForgets { how, down }, at + down)
            }
            60..=79 if ttl => {
                let (back, beyond) = match sf.range(0..=9) {
                    0..=3 => (true, false),
                    4..=7 => (false, false),
                    _ => (false, true),
                };
                let by = match (back, beyond) {
                    (true, _) => between(sf, ms(10), st),
                    (false, false) => between(sf, ms(10), (st / 2).mul_f64(0.9)),
                    (false, true) => between(sf, st / 2 + ms(1), st * 2),
                };
                (FaultKind::StoreClock { by, back, beyond }, at + st)
            }
            _ => {
                let dur = between(sf, ms(50), st);
                let extra = op_timeout + between(sf, ms(1), op_timeout);
                (FaultKind::StoreSlow { dur, extra }, at + dur + extra)
            }
        };
        plan.faults_end = plan.faults_end.max(end);
        plan.faults.push(Fault { at, end, kind });
    }
    plan.faults.sort_by_key(|f| f.at);
}

/// `[election] priority` when the config does not set it.
pub const DEFAULT_PRIORITY: u16 = 100;

impl Plan {
    /// Hooks mode: whether `hook` of `node` fails (`Some(false)`) or hangs (`Some(true)`)
    /// when started at `at`.
    pub fn hook_fault(&self, node: usize, hook: Hook, at: Time) -> Option<bool> {
        self.faults.iter().find_map(|f| match f.kind {
            FaultKind::HookFault {
                node: n,
                hook: h,
                dur,
                hang,
            } if n == node && h == hook && f.at <= at && at < f.at + dur => Some(hang),
            _ => None,
        })
    }

    /// Whether the follow hook of `node` fails (`Some(false)`) or hangs (`Some(true)`)
    /// when started at `at`.
    pub fn follow_broken(&self, node: usize, at: Time) -> Option<bool> {
        self.faults.iter().find_map(|f| match f.kind {
            FaultKind::FollowBroken { node: n, dur, hang }
                if n == node && f.at <= at && dur.is_none_or(|d| at < f.at + d) =>
            {
                Some(hang)
            }
            _ => None,
        })
    }

    /// A node that may become active by itself once the faults are over: priority above
    /// 0 and no follow hook broken for good (SPEC §6).
    pub fn may_lead(&self, node: usize) -> bool {
        self.priorities[node] > 0
            && !self.faults.iter().any(|f| {
                matches!(f.kind, FaultKind::FollowBroken { node: n, dur: None, .. } if n == node)
            })
    }
}

fn draw_layout(aux: &mut SimRng, nodes: usize) -> Layout {
    let topology = if nodes < 2 {
        Topology::Separate
    } else {
        match aux.range(0..=99) {
            0..=49 => Topology::Separate,
            50..=66 => Topology::Containers,
            67..=83 => Topology::Clone,
            _ => Topology::Moving,
        }
    };
    let mut hosts = 0;
    let mut places = Vec::new();
    let host = |hosts: &mut usize| {
        *hosts += 1;
        *hosts - 1
    };
    let mut node_places = Vec::with_capacity(nodes);
    for node in 0..nodes {
        let name = format!("h{}", node + 1);
        let at = match (topology, node) {
            (Topology::Containers, 1) => PlacePlan {
                host: places.first().map_or(0, |p: &PlacePlan| p.host),
                pid_ns: 4_026_532_000 + node as u64,
                name: format!("c{}", node + 1),
            },
            (Topology::Containers, 0) => PlacePlan {
                host: host(&mut hosts),
                pid_ns: 4_026_532_000,
                name: "c1".to_string(),
            },
            (Topology::Clone, 1) => PlacePlan {
                host: host(&mut hosts),
                pid_ns: 4_026_531_836,
                name: "h1".to_string(),
            },
            _ => PlacePlan {
                host: host(&mut hosts),
                pid_ns: 4_026_531_836,
                name,
            },
        };
        places.push(at);
        node_places.push(vec![places.len() - 1]);
    }
    if topology == Topology::Moving {
        // n1's second home: another machine that answers to n1's host name; or, for a pod
        // rescheduled onto the node it ran on, the same machine (same boot id) in another
        // pid namespace, while what its old container left may still run.
        let (h, pid_ns) = if aux.chance(0.5) {
            (host(&mut hosts), 4_026_531_836)
        } else {
            (places[0].host, 4_026_533_001)
        };
        places.push(PlacePlan {
            host: h,
            pid_ns,
            name: places[0].name.clone(),
        });
        node_places[0].push(places.len() - 1);
    }
    let nodes = node_places
        .into_iter()
        .enumerate()
        .map(|(i, places)| {
            let pod = topology == Topology::Moving && i == 0;
            let container = topology == Topology::Containers && i < 2;
            NodePlan {
                places,
                cgroup: aux.chance(0.7),
                systemd: !pod && !container && aux.chance(0.7),
                port: 7000 + i as u16,
            }
        })
        .collect();
    Layout {
        topology,
        hosts,
        places,
        nodes,
    }
}
