//! The simulated operator: runs the real operator commands' functions (`warden failover`,
//! `failover --cancel`, `pause`, `resume`) through store sessions of its own, on the
//! simulation's clocks, and checks what SPEC §8 promises of them.

use super::plan::{ms, Fault, FaultKind};
use super::world::World;
use std::path::Path;
use std::time::Duration;
use tokio::time::Instant;
use warden::config::Config;
use warden::coord::{Connector, Session};
use warden::ops::failover::{self, FailoverArgs};
use warden::ops::operator::OpError;
use warden::ops::pause;

/// The store sees operator sessions as owned by this node index (no warden has it).
const OPERATOR: usize = 1000;

/// How long the operator waits before running `resume` again after it failed.
const RETRY: Duration = Duration::from_millis(500);

/// The operator's view of a command in progress: counts as busy for liveness.
pub struct Busy(World);

impl Busy {
    pub fn new(world: &World) -> Busy {
        world.lock().ops_busy += 1;
        Busy(world.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut w = self.0.lock();
        w.ops_busy -= 1;
        w.ops_end = w.ops_end.max(w.now());
    }
}

fn describe(e: &OpError) -> String {
    match e {
        OpError::Refused(why) => format!("refused: {why}"),
        other => format!("{other:?}"),
    }
}

/// The arguments of one `warden failover`.
pub struct Switch {
    pub to: Option<usize>,
    pub timeout: Duration,
    /// The command dies once its request is written.
    pub killed: bool,
    /// `--force`: the target takes over even while ineligible.
    pub force: bool,
}

/// `warden failover [--to NODE [--force]] --timeout T`. Checks that the command ends by
/// the request's deadline, and that a switchover in a quiet cluster (no fault near it)
/// succeeds.
pub async fn switchover(world: World, cfg: Config, seq: u32, switch: Switch, quiet: bool) {
    let Switch {
        to,
        timeout,
        killed,
        force,
    } = switch;
    let _busy = Busy::new(&world);
    let connector = world.store.connector(OPERATOR, seq);
    let zk = match connector.connect().await {
        Ok(zk) => zk,
        Err(e) => {
            world
                .lock()
                .log(|| format!("OPERATOR failover: no session ({e})"));
            return;
        }
    };
    let args = FailoverArgs {
        force,
        to: to.map(|t| format!("n{}", t + 1)),
        timeout,
        cancel: false,
    };
    let (wall, asked) = (world.lock().wall(), Instant::now());
    let requested = match failover::request_at(&zk, &cfg, &args, wall).await {
        Ok(r) => r,
        Err(e) => {
            world.lock().log(|| {
                format!(
                    "OPERATOR failover {:?}{}: {}",
                    args.to,
                    if force { " --force" } else { "" },
                    describe(&e)
                )
            });
            return;
        }
    };
    {
        let mut w = world.lock();
        // The request holds standbys out until it lapses: a fault until then.
        let lapses = requested.lapses_at - w.t0;
        w.ops_end = w.ops_end.max(lapses);
        if let Some(t) = to {
            w.named.push((t, asked, requested.lapses_at));
        }
        w.log(|| {
            format!(
                "OPERATOR failover: requested {} -> {:?}, deadline {}",
                requested.request.from, requested.request.to, requested.request.deadline
            )
        });
    }
    if killed {
        world
            .lock()
            .log(|| "OPERATOR failover: the command is killed".to_string());
        return;
    }
    let result = failover::await_switch(&connector, zk, &requested).await;
    let now = Instant::now();
    // The model's background loss is no fault of the plan's: a quiet switchover that
    // failed after a request or reply of the old or the new active was lost is counted
    // apart (seed 59901: the commit's reply lost, then the first renewal, and the lease
    // ran out before the renewal's own timeout).
    let node = |id: &str| id.strip_prefix('n')?.parse::<usize>().ok()?.checked_sub(1);
    let involved: Vec<usize> = std::iter::once(requested.request.from.as_str())
        .chain(requested.request.to.as_deref())
        .filter_map(node)
        .collect();
    let lossy = quiet && result.is_err() && world.store.lost_since(requested.sent_at, &involved);
    let mut w = world.lock();
    w.log(|| match &result {
        Ok(s) => format!("OPERATOR failover: new active {} after {:?}", s.to, s.took),
        Err(e) => format!("OPERATOR failover: {}", describe(e)),
    });
    // SPEC 8: the command never waits past the request's deadline.
    if now > requested.lapses_at {
        let late = now - requested.lapses_at;
        w.fail(format!(
            "`warden failover` returned {late:?} after its request lapsed"
        ));
    }
    if let Err(OpError::Failed(why)) = &result {
        if why.starts_with(warden::elector::SWITCHOVER_CALLED_OFF) {
            w.called_off += 1;
        }
    }
    if let Ok(s) = &result {
        w.switched += 1;
        w.quiet_switches += u32::from(quiet);
        // "A takeover, not a clean handover" only when the new active did fence.
        let sent = requested.sent_at;
        let fenced_from = |(by, on, at): &(String, Option<String>, Instant)| {
            *by == s.to && on.as_deref() == Some(s.from.as_str()) && *at >= sent
        };
        // Only a step-down is reported so: without an active, fencing the last one is the
        // rule (SPEC 6), not news.
        if requested.stepping_down && s.fenced.is_none() && w.fence_runs.iter().any(fenced_from) {
            w.takeovers_unreported += 1;
        }
        if let Some(how) = &s.fenced {
            w.takeovers_reported += 1;
            if !w.fence_runs.iter().any(fenced_from) {
                w.fail(format!(
                    "`warden failover` said {} fenced {} on its way in ({how}), but {} ran no \
                     fence method on {} since the request",
                    s.to, s.from, s.to, s.from
                ));
            }
        }
    }
    if lossy {
        w.quiet_lossy += 1;
        w.log(|| {
            "OPERATOR failover: failed in a quiet cluster after the store lost a request or \
             reply of the old or the new active (counted apart)"
                .to_string()
        });
    } else if quiet && result.is_err() {
        w.fail(format!(
            "a switchover in a quiet cluster failed: {}",
            describe(result.as_ref().err().unwrap())
        ));
    }
}

/// `warden failover --cancel`.
pub async fn cancel(world: World, seq: u32) {
    let _busy = Busy::new(&world);
    let connector = world.store.connector(OPERATOR, seq);
    let outcome = match connector.connect().await {
        Ok(zk) => failover::cancel(&zk).await.map_err(|e| describe(&e)),
        Err(e) => Err(format!("no session ({e})")),
    };
    world
        .lock()
        .log(|| format!("OPERATOR failover --cancel: {outcome:?}"));
}

/// `warden pause`, then `warden resume` after `dur`, retried until it is written (an
/// operator does not leave a cluster paused because one command failed).
pub async fn pause(world: World, seq: u32, dur: Duration) {
    let _busy = Busy::new(&world);
    world.lock().pauses += 1;
    let connector = world.store.connector(OPERATOR, seq);
    let outcome = match connector.connect().await {
        Ok(zk) => {
            let wall = world.lock().wall();
            pause::set_paused_at(&zk, Some("simulated maintenance"), wall)
                .await
                .map_err(|e| describe(&e))
        }
        Err(e) => Err(format!("no session ({e})")),
    };
    world.lock().log(|| format!("OPERATOR pause: {outcome:?}"));
    tokio::time::sleep(dur).await;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let outcome = match connector.connect().await {
            Ok(zk) => pause::clear_paused(&zk).await.map_err(|e| describe(&e)),
            Err(e) => Err(format!("no session ({e})")),
        };
        world
            .lock()
            .log(|| format!("OPERATOR resume (attempt {attempt}): {outcome:?}"));
        if outcome.is_ok() {
            world.lock().pauses -= 1;
            return;
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// The operator's configuration: n1's, as on the machine the commands run on.
pub fn config(text: &str) -> Config {
    warden::config::parse(text, Path::new("/sim/warden.toml"))
        .unwrap_or_else(|e| panic!("the simulation's config does not parse: {e}\n{text}"))
}

/// Whether a switchover (fault `me` of the plan) runs in a quiet cluster: its timeout is at
/// least `needs` (a session timeout, the old active's graceful stop, the store's polls and
/// round trips), no other fault comes within two session timeouts of it, and the first
/// election is long over. It must succeed then.
pub fn quiet(faults: &[Fault], me: usize, st: Duration, needs: Duration) -> bool {
    let f = &faults[me];
    let long_enough = matches!(f.kind, FaultKind::Switchover { timeout, .. } if timeout >= needs);
    long_enough
        && f.at > ms(500) + st * 2
        && faults
            .iter()
            .enumerate()
            .all(|(i, g)| i == me || g.end + st * 2 < f.at || g.at > f.end)
}

/// What the README asks of an operator after the store forgot (SPEC §3a): look at
/// `status` for a while (a node that saw the forgotten epoch may join only later); when
/// it says the store lost data, check that no old active still serves (here: wait until no
/// service runs as primary), then `warden init --force`.
///
/// This is `ops::init::init`'s lost-data path (`restore`) step for step, on an operator
/// session through the same `Session` trait, with the operator's own looks between its
/// steps (an old primary powered off, a forgotten `resume` given again): refused while a
/// lock is held, a session timeout and two join retries for running wardens to register
/// what they have seen, then the counter raised above every epoch seen.
pub async fn recover_lost_data(world: World, cfg: Config, seq: u32, st: Duration) {
    let _busy = Busy::new(&world);
    let connector = world.store.connector(OPERATOR, 10_000 + seq);
    // Looks for a while; once `status` said the store lost data, keeps at it until its
    // `init --force` lands, as an operator would (seed 294474: a lost reply, then
    // snapshots that timed out on a lossy link, and the cluster stayed down for good).
    let start = Instant::now();
    let mut seen_loss = false;
    while Instant::now() < start + st * 8 || (seen_loss && Instant::now() < start + st * 60) {
        tokio::time::sleep(st / 2).await;
        let Ok(zk) = connector.connect().await else {
            continue;
        };
        let Ok(before) = zk.snapshot().await else {
            continue;
        };
        // A store that forgot may have forgotten a `resume`: `status` says paused while
        // no maintenance runs, and the operator resumes again.
        if before.control.paused && world.lock().pauses == 0 {
            let done = pause::clear_paused(&zk).await.map_err(|e| describe(&e));
            world
                .lock()
                .log(|| format!("OPERATOR resume again (the store forgot it): {done:?}"));
        }
        let Some(why) = before.lost_data() else {
            continue;
        };
        seen_loss = true;
        let (active, machines) = {
            let mut w = world.lock();
            w.lost_data_seen = true;
            w.log(|| format!("OPERATOR status: {why}"));
            let active = w
                .wardens
                .values()
                .any(|x| x.alive && x.role == warden::record::Role::Active);
            let machines: std::collections::BTreeSet<usize> = w
                .services
                .iter()
                .filter(|s| s.primary && s.alive(super::world::Reach::Cgroup))
                .map(|s| s.machine)
                .collect();
            (active, machines)
        };
        if active || before.lock.is_some() {
            world.lock().log(|| {
                "OPERATOR waits: an active may still serve until its lease ends, or a lock is \
                 held"
                    .to_string()
            });
            continue;
        }
        if !machines.is_empty() {
            // No warden is active, yet a primary runs: an old active's service that no
            // fence can find now (the store forgot its breadcrumb). The README's check
            // "no old active still serves" finds it; the operator powers it off.
            for m in machines {
                world
                    .lock()
                    .log(|| format!("OPERATOR powers off m{}: an old primary runs there", m + 1));
                crate::power_cycle(&world, m, st);
            }
            continue;
        }
        let wait = cfg.session_timeout() + warden::elector::LOST_DATA_RETRY * 2;
        tokio::time::sleep(wait).await;
        let Ok(now) = zk.snapshot().await else {
            continue;
        };
        if now.lock.is_some() {
            world
                .lock()
                .log(|| "OPERATOR init --force refused: a lock was taken".to_string());
            continue;
        }
        let newest = [
            before.floor().map(|(e, _)| e),
            now.floor().map(|(e, _)| e),
            before.epoch_counter,
            now.epoch_counter,
            now.breadcrumb
                .as_ref()
                .and_then(|(b, _)| b.as_ref().ok()?.epoch),
            super::store::newest_promotion(&now.history),
        ]
        .into_iter()
        .flatten()
        .filter(|e| *e < warden::coord::MAX_KEPT_EPOCH)
        .max();
        let floor = newest.map_or(1, |e| e + 1);
        let done = zk.write_marker(Some(floor)).await;
        {
            let mut w = world.lock();
            w.log(|| format!("OPERATOR init --force: counter raised above {floor}: {done:?}"));
            if done.is_ok() {
                w.inits += 1;
            }
        }
        if done.is_ok() {
            resume_if_forgotten(&world, &connector, st).await;
            return;
        }
    }
}

/// A store that forgot may have forgotten a `resume`: `status` says paused while no
/// maintenance runs, and the operator resumes again until it lands (seed 289325: the
/// first try got no answer, the `init --force` after it ended the operator's look, and the
/// cluster stayed paused for good).
async fn resume_if_forgotten(world: &World, connector: &impl Connector, st: Duration) {
    let until = Instant::now() + st * 20;
    while Instant::now() < until {
        if let Ok(zk) = connector.connect().await {
            if let Ok(now) = zk.snapshot().await {
                if !now.control.paused || world.lock().pauses > 0 {
                    return;
                }
                let done = pause::clear_paused(&zk).await.map_err(|e| describe(&e));
                let ok = done.is_ok();
                world
                    .lock()
                    .log(|| format!("OPERATOR resume again (the store forgot it): {done:?}"));
                if ok {
                    return;
                }
            }
        }
        tokio::time::sleep(st / 2).await;
    }
}
