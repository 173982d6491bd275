//! Deterministic simulation of the election (issue 6, item 1; DESIGN "Layers of proof" 2).
//!
//! Several real [`warden::elector::Elector`]s run against a model of ZooKeeper (sessions
//! with server-side expiry on tick boundaries after the session timeout the server
//! *granted*, ephemeral znodes, czxid epochs, versions, one-shot watches, the multi-ops of
//! `coord/zookeeper.rs`, per-connection FIFO with random latency, lost replies whose
//! request may or may not have been applied), a model of `daemon.rs` around each elector
//! (tasks per session, fences among them, ticket and session-generation filtering, member
//! registration that waits for a killed predecessor of this machine and refuses one of
//! another, the cgroup prepared at the commit and named in the breadcrumb, the service's
//! identity recorded after the start), managed services and fence methods, under a seeded
//! fault schedule (freeze, kill -9, SIGTERM, service crash or unhealthy, a main process
//! that exits while its children run on, partition from the store with or without the
//! host, store without quorum, fence methods failing or hanging, a service stuck in the
//! kernel, a machine rebooting) over virtual time.
//!
//! Issue 10 brought what the simulation could not see before:
//! - services are process trees: a main process (it holds the listening socket), children
//!   in its process group, sometimes a helper that left the group (`setsid`, double fork).
//!   A node has a cgroup for its service or not (seeded); warden's stop and kill reach the
//!   cgroup, else the process group, and a stop is clean only once what it reaches is
//!   empty. A warden's death takes the main process (parent-death signal) and, under
//!   systemd (seeded), the whole unit; otherwise the children run on;
//! - nodes live on machines with a boot id, a machine id and a pid namespace: separate
//!   machines, two containers on one kernel, a cloned machine answering to another's host
//!   name, a pod restarted on either of two machines with one host name; reboots. Each
//!   elector gets its `HostIdentity`, every record carries it, and the fence methods act by
//!   SPEC §5 "Which host is this?": `signal` on this boot (or "rebooted"), ssh reaching a
//!   host *by name* and `fence-local` judging there, finding the service by the cgroup,
//!   group and pid the breadcrumb names, or by its port when it names none;
//! - the server may grant a shorter session timeout than configured.
//!
//! After every step the invariants of `sim/world.rs` are checked:
//!
//! 1. never two services up at the same instant, counting every process of them (children
//!    whose main process exited, helpers outside the process group), and never two live
//!    wardens reporting `active`;
//! 2. a service starts only when every earlier promoted incarnation is dead (crashed,
//!    fenced, exited) or stepped down cleanly (deleted its own breadcrumb after its service
//!    stopped), and a promotion overwrites only the breadcrumb of such an incarnation; a
//!    node deletes its own breadcrumb only once no process of its service is left;
//! 3. a running warden's service (every process of it) is down by the end of the lease the
//!    store really granted (send time of the last applied commit or renewal + half the
//!    *granted* session timeout), and a frozen one's right after it wakes;
//! 4. epochs of successive promotions (service starts and breadcrumb commits) only grow,
//!    and a commit or renewal is applied only while the writer's session holds the lock;
//! 5. liveness: with a healthy store and working fences, some node is active within
//!    3 x session_timeout + 30s (the longest rejoin back-off) after the faults end. A
//!    breadcrumb that no fence can verify (a promoted record naming no service) is SPEC
//!    §5's case for `fence --confirm`: the model's operator confirms it once nothing of
//!    that incarnation runs, and the sweep reports how many seeds needed that;
//! 6. nobody refuses to promote for a stale epoch (the model store never goes back in time);
//! 7. a node reports `active` only while the breadcrumb identifies its running service
//!    (pid and group, and its cgroup when it has one).
//!
//! The model's driver does what `daemon.rs` does, and nothing more: the bugs this
//! simulation found were fixed in the elector, not stepped around here. Their seeds are
//! regression tests (each found again when its fix is reverted):
//! - 6121, 35431, 95637: a stop during a start answered "not running" and the start leaked
//!   a service (`regression_a_stop_during_a_start_stops_what_it_started`);
//! - 8994: a start completing after the lease end served on
//!   (`regression_a_start_completing_after_the_lease_end_is_killed`);
//! - 1894, 7674: a second copy started beside an unkillable service
//!   (`regression_no_second_start_next_to_an_unkillable_service`);
//! - 7, 11, 12: the breadcrumb deleted when the main process exited, its children still
//!   running (`regression_a_main_process_exit_stops_the_rest_before_the_breadcrumb_goes`);
//! - 2, 3, 6: a lease that followed the configured session timeout past the granted one
//!   (`regression_the_lease_follows_the_granted_session_timeout`);
//! - 880, 456, 721: the answer to a `RecordService` of a stopped service made its restarted
//!   successor `active`
//!   (`regression_a_record_of_a_stopped_service_never_makes_its_successor_active`);
//! - 16685, 19330, 28238: a restart under the same lock in a cgroup the breadcrumb does not
//!   name (`regression_a_restart_under_the_same_lock_runs_in_the_recorded_cgroup`).
//!
//! `cargo test --test sim` runs 20,000 seeds. Environment:
//! - `WARDEN_SIM_SEED=N`: run seed N alone and print its plan and event trace;
//! - `WARDEN_SIM_SEEDS=N` (default 20000) and `WARDEN_SIM_FIRST=N` (default 0): the range;
//! - `WARDEN_SIM_NODES` (default 3), `WARDEN_SIM_FAULTS` (most faults per seed, default 6).
//!
//! A soak: `WARDEN_SIM_SEEDS=1000000 cargo test --release --test sim`.

#[path = "sim/node.rs"]
mod node;
#[path = "sim/plan.rs"]
mod plan;
#[path = "sim/store.rs"]
mod store;
#[path = "sim/world.rs"]
mod world;

use std::time::{Duration, Instant};
use world::{Outcome, World};

const DEFAULT_SEEDS: u64 = 20_000;
const DEFAULT_NODES: usize = 3;
const DEFAULT_FAULTS: usize = 6;
/// Failing seeds listed at the end of a sweep; the first is replayed with its trace.
const LISTED_FAILURES: usize = 20;

fn env_num<T: std::str::FromStr>(key: &str, default: T) -> T {
    match std::env::var(key) {
        Ok(v) => v
            .trim()
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("{key}={v:?} is not a number")),
        Err(_) => default,
    }
}

fn nodes() -> usize {
    env_num("WARDEN_SIM_NODES", DEFAULT_NODES)
}

fn max_faults() -> usize {
    env_num("WARDEN_SIM_FAULTS", DEFAULT_FAULTS)
}

/// The settings a replay needs besides the seed.
fn replay_env() -> String {
    ["WARDEN_SIM_NODES", "WARDEN_SIM_FAULTS"]
        .iter()
        .filter_map(|k| Some(format!("{k}={} ", std::env::var(k).ok()?)))
        .collect()
}

/// Runs one seed with its trace and panics with a readable report if it fails.
fn replay(seed: u64) -> Outcome {
    let out = World::new(seed, nodes(), max_faults(), true).run();
    if let Some(why) = &out.failure {
        let mut report = format!(
            "seed {seed} FAILED: {why}\n\nplan: {}\n\nlast {} steps of the trace:\n",
            out.plan,
            out.trace.len()
        );
        for line in &out.trace {
            report.push_str(line);
            report.push('\n');
        }
        report.push_str(&format!(
            "\nseed {seed} FAILED: {why}\nreplay: {}WARDEN_SIM_SEED={seed} cargo test --test sim\n",
            replay_env()
        ));
        panic!("{report}");
    }
    out
}

#[test]
fn simulated_elections_keep_every_invariant() {
    if let Ok(seed) = std::env::var("WARDEN_SIM_SEED") {
        let seed: u64 = seed.trim().parse().expect("WARDEN_SIM_SEED is a number");
        let out = replay(seed);
        println!("plan: {}", out.plan);
        for line in &out.trace {
            println!("{line}");
        }
        println!(
            "seed {seed} passed: {} steps, {} promotions, {} fences, {:.1}s virtual, \
             active {:?} after the faults",
            out.steps,
            out.starts,
            out.fences,
            out.virtual_time.as_secs_f64(),
            out.recovery
        );
        return;
    }
    let first: u64 = env_num("WARDEN_SIM_FIRST", 0);
    let count: u64 = env_num("WARDEN_SIM_SEEDS", DEFAULT_SEEDS);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let started = Instant::now();
    let results: Vec<Sweep> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut sweep = Sweep::default();
                    let mut seed = first + t;
                    while seed < first + count {
                        let out = World::new(seed, nodes(), max_faults(), false).run();
                        sweep.add(seed, out);
                        seed += threads;
                    }
                    sweep
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut total = Sweep::default();
    for r in results {
        total.merge(r);
    }
    let elapsed = started.elapsed();
    total.recoveries.sort();
    let pct = |p: f64| {
        total
            .recoveries
            .get(((total.recoveries.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or_default()
    };
    println!(
        "{} seeds ({first}..{}) in {:.1}s on {threads} threads: {} steps, {:.0}s virtual, \
         {} promotions, {} fences; first active after the faults: median {:?}, p99 {:?}, \
         max {:?}",
        total.seeds,
        first + count,
        elapsed.as_secs_f64(),
        total.steps,
        total.virtual_time.as_secs_f64(),
        total.starts,
        total.fences,
        pct(0.5),
        pct(0.99),
        pct(1.0),
    );
    if !total.confirmed.is_empty() {
        total.confirmed.sort();
        println!(
            "{} seeds needed an operator's `fence --confirm` (a promoted breadcrumb that names \
             no service); the first: {:?}",
            total.confirmed.len(),
            &total.confirmed[..total.confirmed.len().min(10)]
        );
    }
    if total.failures.is_empty() {
        return;
    }
    total.failures.sort();
    eprintln!("{} seeds failed:", total.failures.len());
    for (seed, why) in total.failures.iter().take(LISTED_FAILURES) {
        eprintln!("  WARDEN_SIM_SEED={seed}: {why}");
    }
    // The first failure again, with its trace (same seed, same run).
    replay(total.failures[0].0);
    panic!(
        "seed {} failed only without its trace: the run is not deterministic",
        total.failures[0].0
    );
}

#[derive(Default)]
struct Sweep {
    seeds: u64,
    steps: u64,
    starts: u64,
    fences: u64,
    /// Seeds that needed an operator's `fence --confirm` (see `World::operator_confirms`).
    confirmed: Vec<u64>,
    virtual_time: Duration,
    recoveries: Vec<Duration>,
    failures: Vec<(u64, String)>,
}

impl Sweep {
    fn add(&mut self, seed: u64, out: Outcome) {
        self.seeds += 1;
        self.steps += out.steps;
        self.starts += u64::from(out.starts);
        self.fences += u64::from(out.fences);
        if out.confirms > 0 {
            self.confirmed.push(seed);
        }
        self.virtual_time += out.virtual_time;
        if let Some(r) = out.recovery {
            self.recoveries.push(r);
        }
        if let Some(f) = out.failure {
            self.failures.push((seed, f));
        }
    }

    fn merge(&mut self, o: Sweep) {
        self.seeds += o.seeds;
        self.steps += o.steps;
        self.starts += o.starts;
        self.fences += o.fences;
        self.confirmed.extend(o.confirmed);
        self.virtual_time += o.virtual_time;
        self.recoveries.extend(o.recoveries);
        self.failures.extend(o.failures);
    }
}

/// The same seed twice gives the same run, step for step.
#[test]
fn a_seed_replays_exactly() {
    for seed in [1, 7, 4242] {
        let a = World::new(seed, 3, DEFAULT_FAULTS, true).run();
        let b = World::new(seed, 3, DEFAULT_FAULTS, true).run();
        assert_eq!(a.trace, b.trace, "seed {seed}");
        assert_eq!(a.steps, b.steps, "seed {seed}");
    }
}

/// Without faults, one node is active soon and stays so; nobody refuses its promotion.
///
/// Found by this simulation before `36ccab4` (every one of these seeds, no faults at all):
/// the `history` entry of a node's own `standby -> promoting`, written with the lock's
/// epoch, could reach ZooKeeper before its `ReadState` read `history`, and the node refused
/// its own promotion ("the lock's epoch 106 is not above the recorded epoch 106").
/// `read_state` now counts only transitions to `active`; invariant 6 guards it.
#[test]
fn without_faults_one_node_becomes_active() {
    for seed in 0..50 {
        let out = World::new(seed, 3, 0, false).run();
        assert_eq!(out.failure, None, "seed {seed}");
        assert!(out.starts >= 1, "seed {seed}: nobody was promoted");
    }
}

/// Found by this simulation, fixed in `f03f941` (`Svc::Starting(ticket, Option<StopCause>)`).
/// Seed 6121: a SIGTERM lands while a start is in flight; the stop answered "not running",
/// the node deleted its breadcrumb, then the spawn completed. 35431: the lease's demotion
/// raced a start; a renewal later started a second copy next to the leaked one. 95637: the
/// leaked copy ran past the lease end. The elector now holds a stop asked for during a
/// start until the start reports, then stops what it started.
#[test]
fn regression_a_stop_during_a_start_stops_what_it_started() {
    expect_no_failures(&[6121, 35431, 95637]);
}

/// Found by this simulation, fixed in `f03f941`. Seed 8994: the warden froze between the
/// lease check and the spawn and woke after the lease end; the lease timer's `KillService`
/// found nothing to kill, the late `ServiceStarted` made it `active` on an ended lease, and
/// nothing stopped the service. The elector now stops and kills a start that completes
/// after the lease end.
#[test]
fn regression_a_start_completing_after_the_lease_end_is_killed() {
    expect_no_failures(&[8994]);
}

/// Found by this simulation, fixed in `f03f941`. Seeds 1894, 7674: the lease ran out, the
/// forced stop could not kill the service (stuck in the kernel past SIGKILL + `KILL_WAIT`:
/// `ServiceStopped { clean: false }`), a renewal succeeded and `start_if_due` started a
/// second copy next to the unkillable one. After an unclean stop the elector now gives up
/// the lock and keeps its breadcrumb, so whoever wins fences the stuck copy first.
#[test]
fn regression_no_second_start_next_to_an_unkillable_service() {
    expect_no_failures(&[1894, 7674]);
}

/// Issue 10. Seed 7: the main process of n3's service exited while a helper of it ran on
/// (in its cgroup); the elector took the service for down and deleted its breadcrumb at
/// once, so the next active would start beside the helper without fencing it. The elector
/// now stops what is left of the service first, and keeps the breadcrumb if that stop is
/// not clean. (Reverted, 1,290 of 20,000 seeds fail.)
#[test]
fn regression_a_main_process_exit_stops_the_rest_before_the_breadcrumb_goes() {
    expect_no_failures(&[7, 11, 12]);
}

/// Issue 10. Seeds 2, 3, 6: ZooKeeper granted a shorter session timeout than configured;
/// with the lease computed from the configured one, the service ran past the lease the
/// store really granted (invariant 3), when the standby may already own the lock. The
/// lease now follows the smaller of the two. (Reverted, 2,047 of 20,000 seeds fail.)
#[test]
fn regression_the_lease_follows_the_granted_session_timeout() {
    expect_no_failures(&[2, 3, 6]);
}

/// Found by this simulation (issue 10). Seed 880: a `RecordService` for the running
/// service was in flight (its first try's outcome unknown, a retry sent) when the lease
/// doubt stopped that service; a renewal then started a new copy, whose own record was
/// never sent because the old one was still in flight; the old one's answer came back
/// `Done` and made the node `active` with a breadcrumb naming the dead copy's pid and
/// group (invariant 7). On a node without a cgroup and outside systemd, a kill -9 then
/// leaves the new copy's children running where no fence looks: in seed 58547 (with
/// invariant 7 off) a standby fenced "nothing of it remains" and started beside them.
/// The fix: an in-flight record is forgotten when the service it names stops.
#[test]
fn regression_a_record_of_a_stopped_service_never_makes_its_successor_active() {
    expect_no_failures(&[880, 456, 721]);
}

/// Found by this simulation (issue 10). Seed 16685, with each start in a fresh cgroup: a
/// restart under the same lock (after a forced stop and a renewal) ran in a cgroup the
/// breadcrumb did not name yet; warden was killed before its `RecordService`, and the
/// fence found the recorded cgroup and pid empty while a helper of the new copy ran on.
/// `daemon.rs` restarts in the cgroup the breadcrumb names (`Spawner::prepare_again`), as
/// the model does by default.
#[test]
fn regression_a_restart_under_the_same_lock_runs_in_the_recorded_cgroup() {
    let seeds = [16685, 19330, 28238];
    for seed in seeds {
        let fresh = World::shaped(seed, 3, DEFAULT_FAULTS, false, |p| {
            p.layout.fresh_cgroup_per_start = true
        })
        .run();
        assert!(
            fresh.failure.is_some(),
            "seed {seed} no longer shows the fresh-cgroup hole: pick new seeds"
        );
    }
    expect_no_failures(&seeds);
}

/// Open: on a node with neither a cgroup nor systemd, a warden that dies while the
/// breadcrumb does not name its running service leaves children that no fence finds.
/// Seeds 116525, 124946, 157413: killed between the start and `RecordService`; the
/// breadcrumb names no service, so `fence-local` falls back to the port, kills the child
/// that listens and reports nothing left, while a child that does not listen runs on.
/// Seed 137392: a restart under the same lock, killed before its `RecordService`; the
/// breadcrumb names the previous copy's pid and group, both gone. Recording the service's
/// identity before it runs (fork, record, then exec) would close both.
#[test]
#[ignore = "open: see the doc comment; the sweep's 20,000 seeds do not reach these"]
fn without_cgroup_or_systemd_a_service_the_breadcrumb_does_not_name_is_still_fenced() {
    expect_no_failures(&[116525, 124946, 137392, 157413]);
}

fn expect_no_failures(seeds: &[u64]) {
    let failed: Vec<String> = seeds
        .iter()
        .filter_map(|&seed| {
            let why = World::new(seed, 3, DEFAULT_FAULTS, false).run().failure?;
            Some(format!("seed {seed}: {why}"))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{failed:#?}\nreplay one with its trace: WARDEN_SIM_SEED=<seed> cargo test --test sim"
    );
}

/// The first seed of `seeds` that breaks a safety invariant (anything but liveness) with
/// its plan changed by `shape`.
fn first_safety_failure(
    seeds: std::ops::Range<u64>,
    shape: impl Fn(&mut plan::Plan) + Copy,
) -> Option<(u64, String)> {
    seeds.into_iter().find_map(|seed| {
        let why = World::shaped(seed, 3, DEFAULT_FAULTS, false, shape)
            .run()
            .failure?;
        (!why.starts_with("liveness")).then_some((seed, why))
    })
}

/// SPEC §6's stated limit, seen: without a cgroup, a helper of the service that leaves its
/// process group (`setsid`, double fork) is out of reach of the stop, which finds the group
/// empty and reports the service down; the node deletes its breadcrumb, and the next active
/// starts beside the helper. The sweep draws such helpers only where a cgroup holds them;
/// this shows that the invariants count them where none does.
#[test]
fn without_a_cgroup_a_helper_that_left_the_process_group_outlives_the_stop() {
    let found = first_safety_failure(0..200, |p| {
        p.layout.escapes_without_cgroup = true;
        for n in &mut p.layout.nodes {
            n.cgroup = false;
        }
    });
    assert!(
        found.is_some(),
        "no seed shows a helper outside the process group outliving its service"
    );
}

/// The fence rules before `f1cb605` knew a host by its boot id and host name: `signal`
/// took another boot id on a host of the same name for a reboot (a cloned machine, a pod
/// rescheduled under its name), an equal boot id for its own pids (a container on the same
/// kernel, another pid namespace), and `fence-local` took any other boot id for a reboot.
/// With them the simulation finds two services up; with SPEC §5's rules (boot id, machine
/// id, pid namespace) the sweep finds none.
#[test]
fn boot_id_and_host_name_alone_let_a_live_node_pass_for_fenced() {
    let found = first_safety_failure(0..400, |p| {
        p.layout.fence_rules = plan::FenceRules::ByHostName;
    });
    assert!(
        found.is_some(),
        "no seed shows a clone, a moved pod or a container fenced by the wrong rule"
    );
}
