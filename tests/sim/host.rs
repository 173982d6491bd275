//! The host of one simulated warden incarnation: `warden::host::Host` on the world's
//! processes and machines and tokio's paused clock, so that the real daemon runs here.
//!
//! Spawn mode starts and stops services (process trees) of the world. Hooks mode
//! ([`SimHooks`]) acts on the node's always-running service: `promote` makes it the
//! primary, `demote` a replica, `follow` repoints it; each takes a few milliseconds, and
//! fails or hangs until `hook_timeout` as the plan's hook faults say, having done its
//! work first or not. The pidfile names the service where the warden runs.

use super::plan::{between, ms, Hook, Mode, Plan};
use super::world::{cgroup_id, cgroup_name, name, Inc, Reach, World, KILL_WAIT, POLL};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use warden::config::{Config, HealthConfig, HealthKind};
use warden::health::{Check, HealthError, ProbeEnv, Prober};
use warden::host::{
    HookControl, HookFailure, Host, PreparedStart, RunningService, SpawnControl, Start,
};
use warden::record::Epoch;
use warden::service::{PinnedService, ServiceIdentity, StopOutcome};
use warden_fencing::process::{whereabouts, Whereabouts};
use warden_fencing::{FenceContext, FenceMethod, MethodResult, Methods, SignalName, Target};

#[derive(Clone)]
pub struct SimHost {
    pub world: World,
    pub who: Inc,
}

impl SimHost {
    async fn gate(&self) {
        self.world.gate(self.who).await
    }
}

impl Host for SimHost {
    type Spawner = SimSpawner;
    type Hooks = SimHooks;
    type Methods = SimMethods;
    type Probe = SimProbe;

    fn now(&self) -> std::time::Instant {
        Instant::now().into_std()
    }

    fn wall(&self) -> SystemTime {
        self.world.lock().wall()
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> impl Future<Output = ()> + Send {
        tokio::time::sleep_until(Instant::from_std(deadline))
    }

    fn is_running(&self, pid: u32, start_time: u64) -> bool {
        let w = self.world.lock();
        let me = &w.wardens[&self.who];
        let machine = w.machine_of_place(me.place);
        w.wardens.values().any(|x| {
            x.alive
                && x.pid == pid
                && x.start_time == start_time
                && w.machine_of_place(x.place) == machine
                && x.boot == me.boot
                && w.plan.layout.places[x.place].pid_ns == w.plan.layout.places[me.place].pid_ns
        })
    }

    fn spawner(&self, _cfg: &Config) -> Result<SimSpawner, String> {
        Ok(SimSpawner { host: self.clone() })
    }

    fn hooks(&self, cfg: &Config) -> SimHooks {
        SimHooks {
            host: self.clone(),
            hook_timeout: cfg.service.hook_timeout,
            pinned: Arc::new(Mutex::new(None)),
        }
    }

    fn fence_methods(&self) -> SimMethods {
        SimMethods { host: self.clone() }
    }

    fn service_probe(&self, cfg: &HealthConfig) -> Result<SimProbe, HealthError> {
        Ok(SimProbe {
            host: (cfg.kind != HealthKind::None).then(|| self.clone()),
        })
    }

    fn standby_probe(&self, _cfg: &HealthConfig, _env: ProbeEnv) -> SimProbe {
        SimProbe { host: None }
    }
}

/// A start made ready: its epoch and the cgroup prepared for it.
pub struct SimPrepared {
    epoch: Epoch,
    cgroup: Option<u64>,
    name: Option<String>,
}

impl PreparedStart for SimPrepared {
    fn epoch(&self) -> Epoch {
        self.epoch
    }

    fn cgroup(&self) -> Option<&str> {
        self.name.as_deref()
    }
}

#[derive(Clone)]
pub struct SimSpawner {
    host: SimHost,
}

pub struct SimRunning {
    identity: ServiceIdentity,
    exited: tokio::sync::oneshot::Receiver<String>,
}

impl RunningService for SimRunning {
    fn identity(&self) -> ServiceIdentity {
        self.identity.clone()
    }

    async fn exited(self) -> String {
        self.exited
            .await
            .unwrap_or_else(|_| "gone with its machine".to_string())
    }
}

impl SimSpawner {
    fn cgroups(&self) -> bool {
        self.host.world.lock().plan.layout.nodes[self.host.who.0].cgroup
    }

    fn prepared(&self, epoch: Epoch, cgroup: Option<u64>) -> SimPrepared {
        SimPrepared {
            epoch,
            cgroup,
            name: cgroup.map(cgroup_name),
        }
    }

    /// The service `id` names, and what stop and kill reach of it.
    fn find(&self, id: &ServiceIdentity) -> Option<(u64, Reach)> {
        let w = self.host.world.lock();
        let svc = w.service_by_pid(id.pid, id.start_time)?;
        let reach = if id.cgroup.is_some() {
            Reach::Cgroup
        } else {
            Reach::Group
        };
        Some((svc, reach))
    }

    fn alive(&self, svc: u64, reach: Reach) -> bool {
        let w = self.host.world.lock();
        w.service(svc).is_some_and(|s| s.alive(reach))
    }
}

impl SpawnControl for SimSpawner {
    type Prepared = SimPrepared;
    type Running = SimRunning;

    fn prepare(&self, epoch: Epoch) -> SimPrepared {
        let cgroup = self.cgroups().then(|| self.host.world.lock().id());
        self.prepared(epoch, cgroup)
    }

    async fn start(&self, start: Start<SimPrepared>) -> Result<SimRunning, String> {
        let delay = between(&mut self.host.world.lock().rng, ms(1), ms(20));
        tokio::time::sleep(delay).await;
        self.host.gate().await;
        let prepared = match start {
            Start::Prepared(p) => p,
            Start::Again { epoch, cgroup } => self.prepared(epoch, cgroup_id(&cgroup)),
            Start::Fresh(epoch) => self.prepare(epoch),
        };
        let mut w = self.host.world.lock();
        let (_, pid, start_time, exited) =
            w.spawn_service(self.host.who, prepared.epoch, prepared.cgroup);
        Ok(SimRunning {
            identity: ServiceIdentity {
                pid,
                pgid: pid,
                start_time,
                cgroup: prepared.name,
            },
            exited,
        })
    }

    async fn stop(&self, id: ServiceIdentity, _signal: SignalName, grace: Duration) -> StopOutcome {
        let started = Instant::now();
        self.host.gate().await;
        let Some((svc, reach)) = self.find(&id) else {
            return StopOutcome::Stopped {
                forced: false,
                elapsed: Duration::ZERO,
            };
        };
        self.host.world.signal(svc, reach, false, "stopped");
        let give_up = Instant::now() + grace;
        while self.alive(svc, reach) && Instant::now() < give_up {
            tokio::time::sleep(POLL).await;
            self.host.gate().await;
        }
        if !self.alive(svc, reach) {
            return StopOutcome::Stopped {
                forced: false,
                elapsed: started.elapsed(),
            };
        }
        self.host
            .world
            .signal(svc, reach, true, "killed after stop_timeout");
        let give_up = Instant::now() + KILL_WAIT;
        while self.alive(svc, reach) && Instant::now() < give_up {
            tokio::time::sleep(POLL).await;
            self.host.gate().await;
        }
        if self.alive(svc, reach) {
            return StopOutcome::StillRunning { pids: vec![id.pid] };
        }
        StopOutcome::Stopped {
            forced: true,
            elapsed: started.elapsed(),
        }
    }

    fn kill(&self, id: &ServiceIdentity) -> bool {
        if !self.host.world.lock().alive(self.host.who) {
            return false;
        }
        match self.find(id) {
            Some((svc, reach)) => {
                self.host
                    .world
                    .signal(svc, reach, true, "killed at the lease end");
                true
            }
            None => false,
        }
    }

    async fn gone(&self, id: ServiceIdentity) -> bool {
        self.host.gate().await;
        self.find(&id)
            .is_none_or(|(svc, reach)| !self.alive(svc, reach))
    }

    fn containment(&self) -> String {
        if self.cgroups() {
            "cgroup".into()
        } else {
            "process group only".into()
        }
    }
}

/// How long a hook takes when it neither fails nor hangs.
const HOOK_TIME: (Duration, Duration) = (Duration::from_millis(1), Duration::from_millis(30));

/// Hooks mode: the hooks act on the node's always-running service where its warden runs.
#[derive(Clone)]
pub struct SimHooks {
    host: SimHost,
    hook_timeout: Duration,
    /// The service pinned at the last promotion (SPEC §4.3c).
    pinned: Arc<Mutex<Option<PinnedService>>>,
}

/// What a hook does this time.
enum Run {
    Ok,
    /// Fails after its work (`true`) or before it.
    Fails(bool),
    /// Hangs until `hook_timeout`, after its work or before it.
    Hangs(bool),
}

impl SimHooks {
    fn who(&self) -> Inc {
        self.host.who
    }

    /// Starts a hook: its run time, and how it ends (`broken`: the plan's fault now).
    fn begin(&self, broken: impl FnOnce(&Plan, Duration) -> Option<bool>) -> (Duration, Run) {
        let mut w = self.host.world.lock();
        let now = w.now();
        let fault = broken(&w.plan, now);
        let took = between(&mut w.rng, HOOK_TIME.0, HOOK_TIME.1);
        let run = match fault {
            None => Run::Ok,
            Some(hang) => {
                w.hooks_failed += 1;
                let worked = w.rng.chance(0.5);
                if hang {
                    Run::Hangs(worked)
                } else {
                    Run::Fails(worked)
                }
            }
        };
        (took, run)
    }

    /// Runs a hook: after its run time, `work` (when the hook gets that far), then its
    /// answer; a hook that hangs is given up at `hook_timeout`, as `service.rs` does.
    async fn run(
        &self,
        what: &str,
        took: Duration,
        run: Run,
        work: impl FnOnce(&World) -> Result<(), String>,
    ) -> Result<(), String> {
        let started = Instant::now();
        self.host.gate().await;
        tokio::time::sleep(took.min(self.hook_timeout)).await;
        self.host.gate().await;
        let world = &self.host.world;
        match run {
            Run::Ok => work(world),
            Run::Fails(worked) => {
                if worked {
                    let _ = work(world);
                }
                Err(format!("sim: the {what} hook failed (exit 1)"))
            }
            Run::Hangs(worked) => {
                if worked {
                    let _ = work(world);
                }
                tokio::time::sleep_until(started + self.hook_timeout).await;
                self.host.gate().await;
                Err(format!(
                    "sim: the {what} hook did not finish within {:?}; killed",
                    self.hook_timeout
                ))
            }
        }
    }

    /// A planned switchover's demote, as the Redis recipe does it (SPEC §6a): with no
    /// address for the successor it fails at once; else it pauses writes, waits (for at
    /// most half the hook's timeout) until the successor's copy holds everything this
    /// one wrote, refuses writes, ends the pause, and fails unless the successor had
    /// everything. The plan's hook faults apply as to any hook.
    async fn hand_over(
        &self,
        took: Duration,
        run: Run,
        successor: &str,
        addressed: bool,
    ) -> Result<(), String> {
        let who = self.who();
        let started = Instant::now();
        let to = successor
            .strip_prefix('n')
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| n.checked_sub(1));
        let worked = match run {
            Run::Ok => true,
            Run::Fails(worked) | Run::Hangs(worked) => worked,
        };
        self.host.gate().await;
        tokio::time::sleep(took.min(self.hook_timeout)).await;
        self.host.gate().await;
        let mut said = Ok(());
        // (Hung or gone: `CLIENT PAUSE` gets no answer, or PostgreSQL is not running with
        // no clean shutdown to tell what the successor lacks: not handed over.)
        let runs = {
            let w = self.host.world.lock();
            w.db_of(who).is_some_and(|id| w.db_running_now(id))
        };
        if !runs {
            said = Err("sim: demote: the service does not answer: not handed over".to_string());
        } else if !addressed {
            said = Err(format!(
                "sim: demote: the successor {successor} has no host and port in its record"
            ));
        } else if to.is_some_and(|to| !self.host.world.lock().successor_answers(who, to)) {
            said = Err(format!(
                "sim: demote: {successor} did not answer as a standby: not handed over; \
                 still the primary"
            ));
        } else if let (true, Some(to)) = (worked, to) {
            let bound = self.hook_timeout / 2;
            let last = self.host.world.lock().pause_data(who, started + bound * 2);
            let deadline = Instant::now() + bound;
            let synced = loop {
                if self.host.world.lock().successor_has(to, last) {
                    break true;
                }
                if Instant::now() >= deadline {
                    break false;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                self.host.gate().await;
            };
            let mut w = self.host.world.lock();
            w.end_handover(who, to, synced);
            if synced {
                w.demote_db(who, true);
            } else {
                said = Err(format!(
                    "sim: demote: {successor} did not receive everything within {bound:?}: \
                     not handed over"
                ));
            }
        }
        match run {
            Run::Ok => said,
            Run::Fails(_) => Err("sim: the demote hook failed (exit 1)".to_string()),
            Run::Hangs(_) => {
                tokio::time::sleep_until(started + self.hook_timeout).await;
                self.host.gate().await;
                Err(format!(
                    "sim: the demote hook did not finish within {:?}; killed",
                    self.hook_timeout
                ))
            }
        }
    }

    /// The service where this warden runs, as its pidfile names it.
    fn pidfile(&self) -> Result<PinnedService, String> {
        let w = self.host.world.lock();
        let svc = w
            .db_of(self.who())
            .and_then(|id| w.service(id))
            .ok_or_else(|| "sim: the pidfile names no running process".to_string())?;
        Ok(PinnedService {
            pid: svc.pid,
            start_time: svc.start_time,
        })
    }
}

impl HookControl for SimHooks {
    async fn promote(&self, epoch: Epoch) -> Result<(), String> {
        let who = self.who();
        let (took, run) = self.begin(|p, now| p.hook_fault(who.0, Hook::Promote, now));
        self.run("promote", took, run, |world| {
            world.lock().promote_db(who, epoch)
        })
        .await
    }

    async fn demote(
        &self,
        _epoch: Option<Epoch>,
        extra: Vec<(String, String)>,
    ) -> Result<(), HookFailure> {
        let who = self.who();
        let (took, run) = self.begin(|p, now| p.hook_fault(who.0, Hook::Demote, now));
        let failed = !matches!(run, Run::Ok);
        let var = |k: &str| {
            extra
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        let successor = var("WARDEN_SUCCESSOR_NODE");
        let planned = successor.is_some();
        let data = self.host.world.lock().data.is_some();
        let result = match successor {
            Some(node) if data => {
                let addressed = var("WARDEN_SUCCESSOR_HOST").is_some()
                    && var("WARDEN_SUCCESSOR_PORT").is_some();
                self.hand_over(took, run, &node, addressed).await
            }
            _ => {
                self.run("demote", took, run, |world| {
                    world.lock().demote_db(who, true);
                    Ok(())
                })
                .await
            }
        };
        if planned && result.is_err() {
            // A planned switchover this demote was for is called off (SPEC §6a.2).
            if let Some(f) = self.host.world.store.control().failover {
                let mut w = self.host.world.lock();
                if f.from == format!("n{}", who.0 + 1) {
                    w.withdrawn.insert(who.0, f);
                }
            }
        }
        if failed || result.is_err() {
            // Still primary unless it got that far: its role is unknown to warden.
            self.host.world.lock().demote_db(who, false);
        }
        result.map_err(|e| HookFailure {
            detail: e.clone(),
            said: Some(e),
        })
    }

    async fn follow(
        &self,
        epoch: Option<Epoch>,
        extra: Vec<(String, String)>,
    ) -> Result<(), String> {
        let who = self.who();
        let active = extra
            .iter()
            .find(|(k, _)| k == "WARDEN_ACTIVE_NODE")
            .map(|(_, v)| v.clone());
        let me = format!("n{}", who.0 + 1);
        if active.is_none() || active.as_deref() == Some(me.as_str()) {
            self.host.world.lock().fail(format!(
                "{} ran its follow hook for epoch {epoch:?} told to follow {active:?}",
                name(who)
            ));
        }
        let (took, run) = self.begin(|p, now| p.follow_broken(who.0, now));
        let target = active
            .as_deref()
            .and_then(|a| a.strip_prefix('n'))
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| n.checked_sub(1));
        let result = self
            .run("follow", took, run, |world| {
                let mut w = world.lock();
                match w.db_of(who) {
                    Some(_) => {
                        if let Some(t) = target {
                            w.follow_data(who, t, epoch);
                        }
                        Ok(())
                    }
                    None => Err("sim: the service is not running".into()),
                }
            })
            .await;
        let detail = match &result {
            Ok(()) => format!("following {} epoch {epoch:?}", active.unwrap_or_default()),
            Err(e) => e.clone(),
        };
        self.host
            .world
            .lock()
            .followed(who, result.is_ok(), &detail);
        result
    }

    fn check_pidfile(&self) -> Result<(), warden::host::PidfileProblem> {
        self.pidfile()
            .map(|_| ())
            .map_err(|message| warden::host::PidfileProblem {
                message,
                refuses_start: false,
            })
    }

    fn pin(&self) -> Result<Option<PinnedService>, String> {
        let pinned = self.pidfile()?;
        *self.pinned.lock().unwrap() = Some(pinned);
        Ok(Some(pinned))
    }

    fn pinned(&self) -> Option<PinnedService> {
        *self.pinned.lock().unwrap()
    }

    fn pinned_running(&self) -> Option<bool> {
        let p = self.pinned()?;
        let w = self.host.world.lock();
        Some(
            w.service_by_pid(p.pid, p.start_time)
                .and_then(|id| w.service(id))
                .is_some_and(|s| s.alive(Reach::Main)),
        )
    }

    fn repin(&self) -> Option<(PinnedService, PinnedService)> {
        let gone = self.pinned()?;
        if self.pinned_running() != Some(false) {
            return None;
        }
        let now = self.pidfile().ok().filter(|now| *now != gone)?;
        *self.pinned.lock().unwrap() = Some(now);
        Some((gone, now))
    }

    fn kill(&self) -> bool {
        let world = &self.host.world;
        let Some(p) = self.pinned() else {
            return false;
        };
        let svc = {
            let w = world.lock();
            if !w.alive(self.who()) {
                return false;
            }
            w.service_by_pid(p.pid, p.start_time)
        };
        match svc {
            Some(svc) => {
                world.signal(svc, Reach::Main, true, "killed by its pidfile");
                true
            }
            None => false,
        }
    }
}

/// The service's health check: unhealthy while the world says so.
#[derive(Clone)]
pub struct SimProbe {
    host: Option<SimHost>,
}

impl Prober for SimProbe {
    fn is_none(&self) -> bool {
        self.host.is_none()
    }

    async fn check(&self, _timeout: Duration) -> Check {
        let Some(host) = &self.host else {
            return Check {
                pass: true,
                detail: "none".into(),
                said: None,
            };
        };
        host.gate().await;
        let mut w = host.world.lock();
        let node = host.who.0;
        if matches!(w.plan.mode, Mode::Hooks { .. }) && w.db_of(host.who).is_none() {
            // The always-running service is down: systemd starts it again after a
            // while, where this warden runs (if its machine is up).
            let now = Instant::now();
            match w.db_restart_at[node] {
                Some(t) if t <= now => {
                    w.db_restart_at[node] = None;
                    w.start_db(node);
                }
                Some(_) => {}
                None => {
                    let after = between(&mut w.rng, ms(500), ms(3000));
                    w.db_restart_at[node] = Some(now + after);
                }
            }
            // (A failed check says nothing of the data: unknown, as the daemon takes it.)
            w.said[node].push((Instant::now(), None));
            return Check {
                pass: false,
                detail: "sim: the service is down".into(),
                said: None,
            };
        }
        let sick = w.unhealthy[node];
        // SPEC §6b: a passing check of a node with data prints its copy's position.
        let copy = if sick { None } else { w.db_of(host.who) };
        let said = match (copy, &mut w.data) {
            (Some(id), Some(d)) => d.said(id),
            _ => None,
        };
        // (Garbage, nothing, or a failed check is no position: the member counts as
        // position unknown, placed last, as the daemon does; the simulation's seed 15994
        // counted a node by an older position its record no longer showed.)
        let p = said.as_deref().and_then(|s| s.parse().ok());
        w.said[node].push((Instant::now(), p));
        if std::env::var_os("WARDEN_SIM_TRACE_SAID").is_some() {
            w.log(|| format!("CHECK n{} said {p:?}", node + 1));
        }
        Check {
            pass: !sick,
            detail: if sick { "sim: unhealthy" } else { "sim: ok" }.into(),
            said,
        }
    }
}

/// The fence methods: `signal` acts on this host, any other method reaches the target's
/// host by name (as ssh and `fence-local` do) and acts there by the same rules.
#[derive(Clone)]
pub struct SimMethods {
    host: SimHost,
}

impl Methods for SimMethods {
    async fn run(
        &self,
        method: &FenceMethod,
        ctx: &FenceContext,
        target: &Target,
        deadline: Instant,
    ) -> MethodResult {
        self.host.gate().await;
        let world = &self.host.world;
        let fault = {
            let mut w = world.lock();
            w.fence_runs
                .push((ctx.node_id.clone(), target.node_id.clone(), Instant::now()));
            w.fence_fault
        };
        match fault {
            Some(true) => return std::future::pending().await,
            Some(false) => return MethodResult::failed("sim: the method fails"),
            None => {}
        }
        // Where the method acts: this place (`signal`), or the place the target's host
        // name reaches now.
        let (boot, machine, pid_ns, machine_ix) = match method {
            FenceMethod::Signal(_) => {
                let w = world.lock();
                let place = w.wardens[&self.host.who].place;
                (
                    ctx.boot_id.clone(),
                    ctx.machine_id.clone(),
                    ctx.pid_ns,
                    w.machine_of_place(place),
                )
            }
            _ => {
                let mut w = world.lock();
                let Some(host) = &target.host else {
                    return MethodResult::failed("the record names no host");
                };
                let places: Vec<usize> = w
                    .plan
                    .layout
                    .places
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| &p.name == host)
                    .map(|(i, _)| i)
                    .collect();
                if places.is_empty() {
                    return MethodResult::failed(format!("cannot resolve {host}"));
                }
                // A name several machines answer to reaches one of them.
                let place = places[w.rng.range(0..=places.len() as u64 - 1) as usize];
                let m = w.machine_of_place(place);
                if !w.machines[m].up || w.machines[m].isolated {
                    return MethodResult::failed(format!("cannot connect to {host}"));
                }
                let (b, mid, ns, _) = w.place_identity(place);
                (b, mid, ns, m)
            }
        };
        // Where the record's incarnation ran, judged by the real function the methods use
        // (SPEC 5 "Which host is this?").
        match whereabouts(&boot, &machine, pid_ns, target) {
            Whereabouts::Rebooted(how) => return MethodResult::fenced(how),
            Whereabouts::OtherPidNamespace { .. } => {
                return MethodResult::not_applicable("another pid namespace on this kernel")
            }
            Whereabouts::Elsewhere(why) => return MethodResult::not_applicable(why),
            Whereabouts::ThisBoot => {}
        }
        // Only fence-local (over ssh) guesses the service by its port; `signal` never does,
        // as this host's own service may listen on it (fencing/src/signal.rs).
        let port_fallback = !matches!(method, FenceMethod::Signal(_));
        // Kill the old warden and every process of its service this host can find.
        let victims = {
            let w = world.lock();
            let warden = w
                .wardens
                .iter()
                .find(|(_, x)| {
                    Some(x.pid) == target.pid
                        && Some(x.start_time) == target.start_time
                        && w.machine_of_place(x.place) == machine_ix
                        && w.plan.layout.places[x.place].pid_ns == pid_ns
                })
                .map(|(k, _)| *k);
            let mut svcs = Vec::new();
            for s in &w.services {
                // Pids, process groups and (under a cgroup namespace) cgroup paths of
                // another container mean nothing here.
                if s.machine != machine_ix || s.pid_ns != pid_ns {
                    continue;
                }
                let by_cgroup = target
                    .service_cgroup
                    .as_ref()
                    .is_some_and(|c| s.cgroup.map(cgroup_name).as_ref() == Some(c));
                let by_group = target.service_pgid == Some(s.pid)
                    && target.service_start_time == Some(s.start_time);
                // A record naming no service: the service is found by the port it
                // listens on (its main process and its group hold the socket).
                let node_port = w.plan.layout.nodes[s.owner.0].port;
                let by_port = port_fallback
                    && target.service_pid.is_none()
                    && target.service_cgroup.is_none()
                    && target.port == Some(node_port);
                // Hooks mode: the service's pid (from its pidfile), with its start time.
                let by_pid = target.service_pid == Some(s.pid)
                    && target.service_start_time == Some(s.start_time);
                if by_cgroup {
                    svcs.push((s.id, Reach::Cgroup));
                } else if by_group || by_port {
                    svcs.push((s.id, Reach::Group));
                } else if by_pid {
                    svcs.push((s.id, Reach::Main));
                }
            }
            (warden, svcs)
        };
        if let Some(who) = victims.0 {
            world.kill_warden(who, &format!("fenced by {}", name(self.host.who)));
        }
        for &(svc, reach) in &victims.1 {
            world.signal(svc, reach, true, "fenced");
        }
        let promoted_unnamed = target.epoch.is_some()
            && target.service_pid.is_none()
            && target.service_cgroup.is_none()
            && (!port_fallback || target.port.is_none());
        loop {
            let left = {
                let w = world.lock();
                let warden_left = victims.0.is_some_and(|v| w.alive(v));
                let svc_left = victims
                    .1
                    .iter()
                    .any(|&(svc, reach)| w.service(svc).is_some_and(|s| s.alive(reach)));
                warden_left || svc_left
            };
            if !left {
                break;
            }
            if Instant::now() >= deadline {
                return MethodResult::failed("the old incarnation is still running");
            }
            tokio::time::sleep(POLL).await;
            self.host.gate().await;
        }
        if promoted_unnamed {
            return MethodResult::failed(
                "the record names no service, so nothing can verify it gone",
            );
        }
        MethodResult::fenced("killed the old incarnation")
    }
}
