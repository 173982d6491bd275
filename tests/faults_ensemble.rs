//! Fault injection against real processes (issue 6, item 2): a three-server ZooKeeper
//! ensemble on loopback, three wardens with the journal service, and faults of SPEC §9
//! injected into the real processes and the network. The checker is the services' own
//! journals: no two services ever ran at once, and epochs only grew.
//!
//! - Each server has its own address (127.0.0.1-3) and ports, and runs under its own uid.
//!   Each warden talks to one server alone (n1 to server 1, ...), so the test controls
//!   which server a warden depends on.
//! - Partitions are nftables rules on `lo`, in a table of the test's own, deleted in
//!   `Drop` even on panic. Matching addresses alone does not work: ZooKeeper's outgoing
//!   quorum and election connections all leave from 127.0.0.1, whatever address the
//!   server listens on. So the rules match the *sending socket's uid* (`meta skuid`)
//!   plus the peer's address and ports, and a conntrack mark drops the replies on the
//!   same connections. A network namespace with a veth pair would take the servers off
//!   loopback for nothing more. Details in `tests/ensemble/net.rs`.
//! - `active_whose_server_loses_the_leader_demotes_by_lease_end`: the active's server is
//!   cut off from the leader while it still serves its clients; only the lease renewed
//!   by acknowledged writes stops the active in time. Prints the measured numbers.
//! - `random_fault_rounds_never_run_two_services_and_epochs_only_grow`: seeded random
//!   rounds of `kill -9`, SIGSTOP/SIGCONT, service crash, ZooKeeper leader kill, a warden
//!   cut off from ZooKeeper, the active's server cut off from the leader, and fence
//!   scripts that fail or hang; after every round, an active again (bounded) and the
//!   checker.
//!
//! Environment: `WARDEN_FAULT_SEED=N` replays seed N's fault plan (the same faults,
//! targets and durations in the same order; the processes' own timing differs from run
//! to run); `WARDEN_FAULT_ROUNDS=N` sets the number of rounds (default 12, and then a
//! time budget keeps the test well inside CI's per-test limit; an explicit count has no
//! budget). A long soak:
//!
//! ```sh
//! WARDEN_FAULT_ROUNDS=500 cargo test --release --test faults_ensemble -- --nocapture
//! ```
//!
//! Needs root (uids, nftables), Debian's `zookeeper` and `nftables` (installed by the
//! preflight if missing).

mod common;
mod ensemble;

use common::*;
use ensemble::net::Firewall;
use ensemble::rng::{seed_from_env, Rng};
use ensemble::trio::{FenceMode, Trio};
use ensemble::zk::Ensemble;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The two tests of this file start three JVMs each: under `cargo test` (one process,
/// parallel threads) they take turns, so the lease measurement is not taken on a machine
/// busy starting the other ensemble. (nextest runs each test in its own process anyway.)
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Rounds when `WARDEN_FAULT_ROUNDS` is not set.
const DEFAULT_ROUNDS: usize = 12;
/// With the default round count, no new round starts after this much time: CI's
/// per-test limit (nextest's, 180s) must hold on a loaded 2-core machine.
const DEFAULT_BUDGET: Duration = Duration::from_secs(100);
/// After a round's faults are healed, an active (with its service running) within this.
const RECOVERY_BOUND: Duration = Duration::from_secs(60);
/// How late past its lease end an active cut off from the quorum may still write a journal
/// line: timers and scheduling on a loaded 2-core machine.
const LEASE_SLACK: Duration = Duration::from_millis(500);
/// The ensemble serves again (every server leader or follower) within this.
const ENSEMBLE_BOUND: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------
// (b) alone, deterministic

/// The active's server is cut off from the ZooKeeper leader while it still serves its
/// clients (it stays a follower until `syncLimit`, 6s, passes without its leader). The
/// active's renewals (writes) cannot commit; nothing it hears from its server says its
/// session is in danger, while the leader will expire that session after the session
/// timeout. Its service must be down by the lease end (session/2 after the send of the
/// last acknowledged renewal), before the session can expire, and so before a standby
/// can win the lock; the standby fences the old incarnation before its own service
/// starts.
#[test]
fn active_whose_server_loses_the_leader_demotes_by_lease_end() {
    let _serial = serial();
    let mut fw = Firewall::new();
    let mut ens = Ensemble::start();
    let leader = wait_for(secs(30), "one server leads", || ens.leader());
    let followers: Vec<usize> = (1..=3).filter(|&id| id != leader).collect();
    let (fa, fb) = (followers[0], followers[1]);
    // n1 (the active) on a follower, n2 on the other follower, n3 on the leader.
    let mut trio = Trio::new(&ens, [fa, fb, leader], [true, true, true]);
    let session = trio.cluster.session_timeout;
    let lease = session / 2;
    let wardens = start_active_then_standbys(&trio.nodes[0], &[&trio.nodes[1], &trio.nodes[2]]);
    for (i, w) in wardens.into_iter().enumerate() {
        trio.wardens[i] = Some(w);
    }
    let old = trio.nodes[0].last_run().expect("n1's service runs");
    assert_eq!(
        ens.peer(fa).mode().as_deref(),
        Some("follower"),
        "premise: n1's server follows"
    );
    let lock = trio.cluster.znode("lock");
    let at_leader = ZkClient::connect(&ens.peer(leader).connect_string());
    assert!(at_leader.exists(&lock), "premise: n1 holds the lock");

    let cut_ns = mono_now_ns();
    fw.cut_peers(ens.peer(fa), ens.peer(leader));
    eprintln!(
        "cut server {fa} (n1's) off from the leader, server {leader}; rules:\n{}",
        fw.listing()
    );
    // The partition is the fault: it lasts until a standby's service has started. While
    // it lasts, note when n1's service died and what the ensemble said at that moment.
    struct AtDeath {
        seen_ns: u64,
        server_mode: Option<String>,
        lock_held: bool,
    }
    let mut at_death: Option<AtDeath> = None;
    let new = wait_for(secs(40), "a standby's service started", || {
        if at_death.is_none() && !process_alive(old.pid) {
            at_death = Some(AtDeath {
                seen_ns: mono_now_ns(),
                server_mode: ens.peer(fa).mode(),
                lock_held: at_leader.exists(&lock),
            });
        }
        trio.nodes[1..]
            .iter()
            .flat_map(|n| n.runs())
            .min_by_key(|r| r.start_ns)
    });
    let server_mode_at_takeover = ens.peer(fa).mode();
    fw.heal();
    let heal_ns = mono_now_ns();

    let old = trio.nodes[0]
        .runs()
        .into_iter()
        .find(|r| r.pid == old.pid)
        .expect("n1's run is in its journal");
    let ran_on = ns(old.last_ns.saturating_sub(cut_ns));
    let takeover = ns(new.start_ns.saturating_sub(cut_ns));
    let gap = ns(new.start_ns.saturating_sub(old.last_ns));
    let n1_log = trio.warden(0).log();
    let lease_lines: Vec<&str> = n1_log
        .lines()
        .filter(|l| {
            let l = l.to_lowercase();
            l.contains("lease") || l.contains("neutral") || l.contains("renew")
        })
        .collect();
    eprintln!(
        "\n==== lease measurement (session {session:?}, lease {lease:?}, renewal every {:?}, \
         stop_timeout {:?})\n\
         n1's service: last journal line {ran_on:?} after the cut ({}){}\n\
         n1's server when the service was seen dead: {}; n1's lock at the leader then: {}\n\
         {} service started {takeover:?} after the cut, {gap:?} after n1's last line \
         (epoch {:?} -> {:?})\n\
         n1's server when the standby started: {}; partition healed {:?} after the cut\n\
         n1's log on its lease:\n  {}\n====",
        session / 6,
        trio.cluster.stop_timeout,
        if old.stopped {
            "stopped by SIGTERM"
        } else {
            "killed"
        },
        at_death
            .as_ref()
            .map(|d| format!(", seen dead {:?} after the cut", ns(d.seen_ns - cut_ns)))
            .unwrap_or_default(),
        at_death
            .as_ref()
            .and_then(|d| d.server_mode.clone())
            .unwrap_or_else(|| "not serving".into()),
        at_death
            .as_ref()
            .map(|d| if d.lock_held { "still held" } else { "gone" })
            .unwrap_or("-"),
        new.node,
        old.epoch,
        new.epoch,
        server_mode_at_takeover.unwrap_or_else(|| "not serving".into()),
        ns(heal_ns - cut_ns),
        lease_lines.join("\n  "),
    );

    let at_death = at_death.unwrap_or_else(|| {
        dump_logs();
        panic!(
            "n1's service was still alive when {} started: {old} / {new}",
            new.node
        )
    });
    assert!(
        ran_on < session,
        "n1's service ran on {ran_on:?} after its server lost the leader: past the session \
         timeout {session:?}"
    );
    // The last acknowledged renewal was sent before the cut, so the lease ends at most
    // `lease` after it; 400ms for scheduling on a loaded machine.
    assert!(
        ran_on < lease + ms(400),
        "n1's service ran on {ran_on:?} after its server lost the leader, past its lease \
         of {lease:?}"
    );
    assert!(
        new.start_ns > old.last_ns,
        "{} started before n1's service's last line:\n  {old}\n  {new}",
        new.node
    );
    // The premises: n1's server still served its clients, and n1's session was still
    // alive in the quorum (its lock not yet deleted), when the service went down. So only
    // the lease stopped it, and it stopped before anyone could take over.
    assert_eq!(
        at_death.server_mode.as_deref(),
        Some("follower"),
        "premise: n1's server still served when the service went down"
    );
    assert!(
        at_death.lock_held,
        "premise: n1's session was alive in the quorum when its service went down"
    );
    assert!(
        n1_log.to_lowercase().contains("neutral"),
        "n1 did not report its role neutral (lease in doubt)"
    );
    assert!(
        trio.ctl_calls()
            .iter()
            .any(|c| c.starts_with(&format!("{} n1 ", new.node))),
        "{} promoted without fencing n1's incarnation: {:?}",
        new.node,
        trio.ctl_calls()
    );

    // Back to three wardens (n1's was fenced) with one active.
    trio.restart_dead();
    ens.wait_serving(ENSEMBLE_BOUND);
    let got = trio.wait_active(&ens, &fw, RECOVERY_BOUND);
    assert!(got.is_some(), "no active after the partition healed");
    trio.cluster.assert_safe();
}

// ---------------------------------------------------------------------------------------
// Random rounds

#[derive(Clone, Copy, Debug)]
enum Who {
    Active,
    /// One of the two other nodes, in id order.
    Standby(usize),
}

#[derive(Clone, Debug)]
enum Fault {
    /// `kill -9` of a warden, started again after `down`.
    KillWarden { who: Who, down: Duration },
    /// SIGSTOP of a warden, SIGCONT after `for_` (if it still exists: past the session
    /// timeout a peer fences it).
    FreezeWarden { who: Who, for_: Duration },
    /// `kill -9` of the active's service.
    CrashService,
    /// `kill -9` of the ZooKeeper leader, started again after `down`.
    KillZkLeader { down: Duration },
    /// One warden's server cut off from its clients, for `for_`.
    CutWarden { who: Who, for_: Duration },
    /// The active's server cut off from the leader (or, if it leads, the leader from both
    /// followers), for `for_`.
    PartitionActiveServer { for_: Duration },
}

#[derive(Clone, Debug)]
struct Step {
    fault: Fault,
    /// What each node's steerable fence script does this round.
    fences: [FenceMode; 3],
}

fn plan(seed: u64, rounds: usize) -> Vec<Step> {
    let mut rng = Rng::new(seed);
    (0..rounds)
        .map(|_| {
            let who = |rng: &mut Rng| {
                if rng.percent(70) {
                    Who::Active
                } else {
                    Who::Standby(rng.below(2) as usize)
                }
            };
            let fault = match rng.below(6) {
                0 => Fault::KillWarden {
                    who: who(&mut rng),
                    down: rng.millis(0, 5000),
                },
                1 => Fault::FreezeWarden {
                    who: who(&mut rng),
                    for_: rng.millis(300, 7000),
                },
                2 => Fault::CrashService,
                3 => Fault::KillZkLeader {
                    down: rng.millis(500, 6000),
                },
                4 => Fault::CutWarden {
                    who: who(&mut rng),
                    for_: rng.millis(500, 7000),
                },
                _ => Fault::PartitionActiveServer {
                    for_: rng.millis(500, 7000),
                },
            };
            let mut fences = [FenceMode::Ok; 3];
            for f in &mut fences {
                *f = match rng.below(4) {
                    0 => FenceMode::Fail,
                    1 => FenceMode::Hang,
                    _ => FenceMode::Ok,
                };
            }
            Step { fault, fences }
        })
        .collect()
}

/// Prints the seed, the plan and the rounds done when the test fails (after the
/// harness's log dump, so it ends the output).
struct Report {
    seed: u64,
    rounds: usize,
    plan: Vec<String>,
    done: Vec<String>,
}

impl Report {
    fn replay(&self) -> String {
        format!(
            "WARDEN_FAULT_SEED={} WARDEN_FAULT_ROUNDS={} cargo test --test faults_ensemble \
             random_fault_rounds -- --nocapture",
            self.seed, self.rounds
        )
    }
}

impl Drop for Report {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "\n======== faults_ensemble FAILED: seed {} ========\nplan:\n  {}\nrounds \
                 completed ({}):\n  {}\nfailed in round {}\nreplay: {}",
                self.seed,
                self.plan.join("\n  "),
                self.done.len(),
                self.done.join("\n  "),
                self.done.len(),
                self.replay()
            );
        }
    }
}

#[test]
fn random_fault_rounds_never_run_two_services_and_epochs_only_grow() {
    let _serial = serial();
    let (seed, _) = seed_from_env();
    let explicit_rounds: Option<usize> = std::env::var("WARDEN_FAULT_ROUNDS").ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("WARDEN_FAULT_ROUNDS={v:?} is not a number"))
    });
    let rounds = explicit_rounds.unwrap_or(DEFAULT_ROUNDS);
    let budget = explicit_rounds.is_none().then_some(DEFAULT_BUDGET);
    let steps = plan(seed, rounds);
    let mut report = Report {
        seed,
        rounds,
        plan: steps
            .iter()
            .enumerate()
            .map(|(k, s)| format!("{k}: {:?} fences {:?}", s.fault, s.fences))
            .collect(),
        done: Vec::new(),
    };
    eprintln!(
        "faults_ensemble: seed {seed}, {rounds} rounds{}; replay: {}",
        budget
            .map(|b| format!(" (budget {b:?})"))
            .unwrap_or_default(),
        report.replay()
    );
    let started = Instant::now();

    let mut fw = Firewall::new();
    let mut ens = Ensemble::start();
    // n3 has no `signal` after its steerable script: when that script fails or hangs, n3
    // cannot fence at all and must never promote.
    let mut trio = Trio::new(&ens, [1, 2, 3], [true, true, false]);
    for i in 0..3 {
        trio.start(i);
    }
    let Some((first, epoch, _)) = trio.wait_active(&ens, &fw, RECOVERY_BOUND) else {
        dump_logs();
        panic!("no active after the start");
    };
    eprintln!(
        "start: {} active, epoch {epoch}, after {:?}",
        trio.id(first),
        started.elapsed()
    );

    let mut recoveries = Vec::new();
    for (k, step) in steps.iter().enumerate() {
        if let Some(budget) = budget {
            if started.elapsed() > budget {
                eprintln!(
                    "budget of {budget:?} spent after {k} rounds (set WARDEN_FAULT_ROUNDS to \
                     run them all)"
                );
                break;
            }
        }
        let (line, recovery) = round(k, step, &mut ens, &mut fw, &mut trio);
        eprintln!("{line}");
        report.done.push(line);
        recoveries.push(recovery);
    }

    // Every node recovers: all three wardens run and are active or standby. A node backing
    // off after failures in a row sits out up to 30s (SPEC §4.8).
    let restarted = trio.restart_dead();
    let settled = wait_for(secs(90), "all three nodes are active or standby", || {
        let s = trio.status(&ens, &fw).ok()?;
        let ok = trio.nodes.iter().all(|n| {
            matches!(
                member_role(&s, &n.id).as_deref(),
                Some("active") | Some("standby")
            )
        });
        ok.then_some(s)
    });
    trio.cluster.assert_safe();
    let runs = trio.cluster.runs();
    recoveries.sort();
    eprintln!(
        "faults_ensemble: seed {seed}: {} rounds in {:?}, {} promotions, epochs {:?}..{:?}, \
         recovery after heal: median {:?}, max {:?}; at the end {} (restarted {restarted:?}); \
         fence script runs: {}",
        report.done.len(),
        started.elapsed(),
        runs.len(),
        runs.iter().filter_map(|r| r.epoch).min(),
        runs.iter().filter_map(|r| r.epoch).max(),
        recoveries
            .get(recoveries.len() / 2)
            .copied()
            .unwrap_or_default(),
        recoveries.last().copied().unwrap_or_default(),
        trio.roles(&settled),
        trio.ctl_calls().len(),
    );
}

/// One round: inject, hold, heal, restart what died, wait for an active, check.
/// Returns the round's line and the time from heal to an active.
fn round(
    k: usize,
    step: &Step,
    ens: &mut Ensemble,
    fw: &mut Firewall,
    trio: &mut Trio,
) -> (String, Duration) {
    let t0 = Instant::now();
    let Some((active, _, active_run)) = trio.wait_active(ens, fw, RECOVERY_BOUND) else {
        dump_logs();
        panic!("round {k}: no active at the start of the round");
    };
    for (i, mode) in step.fences.iter().enumerate() {
        trio.set_fence(i, *mode);
    }
    let others: Vec<usize> = (0..3).filter(|&i| i != active).collect();
    let pick = |who: Who| match who {
        Who::Active => active,
        Who::Standby(n) => others[n % others.len()],
    };
    // Set when the fault cuts the active off from the quorum (its writes cannot commit)
    // for longer than its lease: (when, for how long). Its service must then be down by
    // the lease end, whatever else happens.
    let mut active_cut: Option<(u64, Duration)> = None;
    // Every `sleep` below is the fault itself: how long it lasts.
    let what = match step.fault {
        Fault::KillWarden { who, down } => {
            let i = pick(who);
            trio.warden(i).kill9();
            trio.warden(i).wait_exit(secs(10));
            std::thread::sleep(down);
            format!("kill -9 {} for {down:?}", trio.id(i))
        }
        Fault::FreezeWarden { who, for_ } => {
            let i = pick(who);
            trio.warden(i).sigstop();
            std::thread::sleep(for_);
            let fenced = !trio.warden(i).is_running();
            if !fenced {
                trio.warden(i).sigcont();
            }
            format!(
                "SIGSTOP {} for {for_:?}{}",
                trio.id(i),
                if fenced { " (fenced meanwhile)" } else { "" }
            )
        }
        Fault::CrashService => {
            let needle = trio.nodes[active].journal.display().to_string();
            if process_cmdline(active_run.pid).is_some_and(|c| c.contains(&needle)) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(active_run.pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            format!(
                "kill -9 of {}'s service pid {}",
                trio.id(active),
                active_run.pid
            )
        }
        Fault::KillZkLeader { down } => {
            let leader = wait_for(secs(30), "one server leads", || ens.leader());
            if trio.server_of[active] == leader {
                active_cut = Some((mono_now_ns(), down));
            }
            ens.kill(leader);
            std::thread::sleep(down);
            ens.restart(leader);
            let users: Vec<&str> = (0..3)
                .filter(|&i| trio.server_of[i] == leader)
                .map(|i| trio.id(i))
                .collect();
            format!("kill -9 of ZooKeeper leader {leader} (used by {users:?}) for {down:?}")
        }
        Fault::CutWarden { who, for_ } => {
            let i = pick(who);
            let server = trio.server_of[i];
            if i == active {
                active_cut = Some((mono_now_ns(), for_));
            }
            fw.cut_client(ens.peer(server));
            std::thread::sleep(for_);
            fw.heal();
            format!(
                "{} cut off from ZooKeeper (server {server}) for {for_:?}",
                trio.id(i)
            )
        }
        Fault::PartitionActiveServer { for_ } => {
            let server = trio.server_of[active];
            let leader = wait_for(secs(30), "one server leads", || ens.leader());
            let cut_from: Vec<usize> = if server == leader {
                (1..=3).filter(|&id| id != leader).collect()
            } else {
                vec![leader]
            };
            active_cut = Some((mono_now_ns(), for_));
            for &other in &cut_from {
                fw.cut_peers(ens.peer(server), ens.peer(other));
            }
            std::thread::sleep(for_);
            fw.heal();
            format!(
                "server {server} of the active {} cut off from {} for {for_:?}",
                trio.id(active),
                if server == leader {
                    format!("its followers {cut_from:?} (it led)")
                } else {
                    format!("the leader {leader}")
                }
            )
        }
    };
    let healed = Instant::now();
    let restarted = trio.restart_dead();
    ens.wait_serving(ENSEMBLE_BOUND);
    let Some((now_active, epoch, run)) = trio.wait_active(ens, fw, RECOVERY_BOUND) else {
        dump_logs();
        panic!(
            "round {k} ({what}): no active within {RECOVERY_BOUND:?} after the fault healed \
             (ensemble {}; restarted {restarted:?}; last status {:?})",
            ens.describe(),
            trio.status(ens, fw)
        );
    };
    let recovery = healed.elapsed();
    // A warden fenced while the cluster recovered (after the heal) starts again too.
    let mut restarted = restarted;
    restarted.extend(trio.restart_dead());

    // The checker, from the services' own journals.
    trio.cluster.assert_safe();
    let mut lease_note = String::new();
    if let Some((cut_ns, cut_for)) = active_cut {
        let lease = trio.cluster.session_timeout / 2;
        let old = trio.nodes[active]
            .runs()
            .into_iter()
            .find(|r| r.pid == active_run.pid)
            .expect("the active's run is in its journal");
        let ran_on = ns(old.last_ns.saturating_sub(cut_ns));
        lease_note = format!(
            "; {}'s service ran {ran_on:?} into the cut",
            trio.id(active)
        );
        if cut_for > lease + LEASE_SLACK && ran_on > lease + LEASE_SLACK {
            dump_logs();
            panic!(
                "round {k} ({what}): the active {}'s service ran on {ran_on:?} after it was cut \
                 off from the quorum, past its lease of {lease:?}:\n  {old}",
                trio.id(active)
            );
        }
    }
    let live = trio.live_services();
    if live.len() != 1 || live[0].pid != run.pid {
        dump_logs();
        panic!(
            "round {k} ({what}): {} is active with service pid {}, but these services run:\n  {}",
            trio.id(now_active),
            run.pid,
            live.iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join("\n  ")
        );
    }
    let line = format!(
        "round {k}: {what}; fences {}; was {} -> now {} (epoch {epoch}); restarted {:?}; \
         active {recovery:?} after heal{lease_note}; round {:?}",
        step.fences
            .iter()
            .enumerate()
            .map(|(i, m)| format!("{}={}", trio.id(i), m.word()))
            .collect::<Vec<_>>()
            .join(","),
        trio.id(active),
        trio.id(now_active),
        restarted,
        t0.elapsed()
    );
    (line, recovery)
}
