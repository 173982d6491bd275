//! What the driver waits on besides the store: the clock, the process table, the service,
//! the fence methods and the health probes, as one [`Host`] trait.
//!
//! The driver (`daemon/`) is generic over a [`Host`] (and a [`crate::coord::Connector`]
//! and the service's role, whose two implementations run on this trait's spawner and
//! hooks), so the simulation runs the real driver, with models of processes, machines
//! and fence methods on virtual time, and this file holds the one real implementation,
//! [`ThisHost`]: the boot-time clock, `/proc`, cgroups and process groups, hook
//! commands, ssh, scripts and signals. The driver itself reads no `/proc` and no clock
//! of its own.
//!
//! One trait with associated types rather than five type parameters: the parts go
//! together (a simulated service is fenced by simulated methods on a simulated clock), and
//! `Daemon<C, H, R>` stays readable.

use crate::config::{Config, HealthConfig};
use crate::health::{HealthError, Probe};
use crate::record::{self, Epoch, NodeRecord};
use crate::service::{self, Hooks, Spawner};
use std::future::Future;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::mpsc;
use tracing::warn;
pub use warden_fencing::SignalName;

// The words of this seam, from the parts behind it: the driver names them through here.
pub use crate::health::{
    CheckerHandle, CheckerSettings, EachProbe, HealthChange, ProbeEnv, Prober,
};
pub use crate::service::{PinnedService, ServiceIdentity, StopOutcome};
pub use warden_fencing::{
    FenceChain, FenceContext, FenceMethod, Methods as FenceMethods, SignalFence, Target,
};

/// The world around one warden process.
pub trait Host: Clone + Send + Sync + 'static {
    type Spawner: SpawnControl;
    type Hooks: HookControl;
    type Methods: warden_fencing::Methods;
    type Probe: Prober + Clone;

    /// Now, on the clock leases are measured with (it must count a suspend).
    fn now(&self) -> Instant;
    /// The wall clock, for records and for the deadlines operators write.
    fn wall(&self) -> SystemTime;
    /// Sleeps until `deadline` on [`now`](Self::now)'s clock, or wakes earlier.
    fn sleep_until(&self, deadline: Instant) -> impl Future<Output = ()> + Send;
    /// Whether process `pid` with this start time runs on this host (SPEC §4.9).
    fn is_running(&self, pid: u32, start_time: u64) -> bool;
    /// Spawn mode's service.
    fn spawner(&self, cfg: &Config) -> Result<Self::Spawner, String>;
    /// Hooks mode's service.
    fn hooks(&self, cfg: &Config) -> Self::Hooks;
    /// What carries out the fence chain's attempts.
    fn fence_methods(&self) -> Self::Methods;
    /// The fence chain of `methods` for `ctx`, carried out by [`fence_methods`](Self::fence_methods).
    fn fence_chain(
        &self,
        methods: Vec<FenceMethod>,
        ctx: FenceContext,
    ) -> FenceChain<Self::Methods> {
        FenceChain::with_methods(methods, ctx, self.fence_methods())
    }
    /// The check of the service itself (`health.kind`).
    fn service_probe(&self, cfg: &HealthConfig) -> Result<Self::Probe, HealthError>;
    /// A standby's eligibility (`health.standby_command`); in hooks mode together with the
    /// service's own check.
    /// `env`: the variables its command is given, kept current by the daemon.
    fn standby_probe(&self, cfg: &HealthConfig, env: ProbeEnv) -> Self::Probe;
    /// Starts a checker of `probe` (see [`crate::health::spawn_checker`]): its changes on
    /// `tx`, each probe's outcome to `each`, the positions it reads on `positions`.
    fn checker(
        &self,
        probe: Self::Probe,
        settings: CheckerSettings,
        tx: mpsc::Sender<HealthChange>,
        each: Option<EachProbe>,
        positions: Option<mpsc::Sender<Option<u64>>>,
    ) -> CheckerHandle {
        crate::health::spawn_checker(probe, settings, tx, each, positions)
    }
}

/// A start the commit made ready: its epoch, and the cgroup the breadcrumb names.
pub trait PreparedStart: Send + 'static {
    fn epoch(&self) -> Epoch;
    fn cgroup(&self) -> Option<&str>;
}

/// Which start [`SpawnControl::start`] carries out.
pub enum Start<P> {
    /// The one the commit prepared.
    Prepared(P),
    /// A restart within the same epoch, in the cgroup the breadcrumb already names.
    Again { epoch: Epoch, cgroup: String },
    /// A start nothing prepared.
    Fresh(Epoch),
}

/// Spawn mode: warden starts the service on promotion and stops it on demotion.
pub trait SpawnControl: Clone + Send + Sync + 'static {
    type Prepared: PreparedStart;
    type Running: RunningService;

    /// Makes a start ready (its cgroup exists from now on).
    fn prepare(&self, epoch: Epoch) -> Self::Prepared;
    /// Starts the service.
    fn start(
        &self,
        start: Start<Self::Prepared>,
    ) -> impl Future<Output = Result<Self::Running, String>> + Send;
    /// Stops every process of the service: `signal`, then SIGKILL after `grace`.
    fn stop(
        &self,
        id: ServiceIdentity,
        signal: SignalName,
        grace: Duration,
    ) -> impl Future<Output = StopOutcome> + Send;
    /// SIGKILL to every process of the service now, without waiting.
    fn kill(&self, id: &ServiceIdentity) -> bool;
    /// Whether no process of the service is left; nothing is signalled.
    fn gone(&self, id: ServiceIdentity) -> impl Future<Output = bool> + Send;
    /// How the service is held together, for `status`.
    fn containment(&self) -> String;
}

/// A started service.
pub trait RunningService: Send + 'static {
    fn identity(&self) -> ServiceIdentity;
    /// Waits until the main process exits; says how.
    fn exited(self) -> impl Future<Output = String> + Send;
}

/// A hook that did not succeed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookFailure {
    /// What happened, for the log.
    pub detail: String,
    /// The last line the hook wrote to stderr, when it wrote one: its own words for why
    /// (a called-off switchover quotes it, SPEC §6a.2).
    pub said: Option<String>,
}

impl std::fmt::Display for HookFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.detail)
    }
}

/// Hooks mode: the service always runs; hooks change its role.
pub trait HookControl: Clone + Send + Sync + 'static {
    fn promote(&self, epoch: Epoch) -> impl Future<Output = Result<(), String>> + Send;
    /// `extra`: more variables for the hook (`WARDEN_SUCCESSOR_*`).
    fn demote(
        &self,
        epoch: Option<Epoch>,
        extra: Vec<(String, String)>,
    ) -> impl Future<Output = Result<(), HookFailure>> + Send;
    /// The `follow` hook (SPEC §6), with `WARDEN_ACTIVE_*` in `extra`.
    fn follow(
        &self,
        epoch: Option<Epoch>,
        extra: Vec<(String, String)>,
    ) -> impl Future<Output = Result<(), String>> + Send;
    /// The check at start; an error is logged (the promotion will refuse), or refuses the
    /// start when [`PidfileProblem::refuses_start`] says so.
    fn check_pidfile(&self) -> Result<(), PidfileProblem>;
    /// At promotion: pins the pidfile's process (SPEC §4.3c).
    fn pin(&self) -> Result<Option<PinnedService>, String>;
    fn pinned(&self) -> Option<PinnedService>;
    /// Whether the pinned process still runs (with its start time); `None` when nothing
    /// is pinned (no pidfile).
    fn pinned_running(&self) -> Option<bool>;
    /// A called-off switchover (SPEC §6a.2): when the pinned process is gone and the
    /// pidfile names another running process, pins that one and returns (the one gone,
    /// the one pinned now); `None` when the pin stands.
    fn repin(&self) -> Option<(PinnedService, PinnedService)>;
    /// SIGKILL of the pinned process.
    fn kill(&self) -> bool;
}

/// This machine: the boot-time clock, `/proc`, cgroups, hook commands and the real fence
/// methods.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThisHost;

impl Host for ThisHost {
    type Spawner = Spawner;
    type Hooks = Hooks;
    type Methods = warden_fencing::Local;
    type Probe = Probe;

    fn now(&self) -> Instant {
        crate::clock::now()
    }

    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }

    fn sleep_until(&self, deadline: Instant) -> impl Future<Output = ()> + Send {
        crate::clock::sleep_until(deadline)
    }

    fn is_running(&self, pid: u32, start_time: u64) -> bool {
        warden_fencing::process::is_running(pid, Some(start_time))
    }

    fn spawner(&self, cfg: &Config) -> Result<Spawner, String> {
        Spawner::new(&cfg.service, &cfg.cluster.name, &cfg.cluster.node_id)
            .map_err(|e| e.to_string())
    }

    fn hooks(&self, cfg: &Config) -> Hooks {
        Hooks::new(&cfg.service, &cfg.cluster.name, &cfg.cluster.node_id)
    }

    fn fence_methods(&self) -> warden_fencing::Local {
        warden_fencing::Local
    }

    fn service_probe(&self, cfg: &HealthConfig) -> Result<Probe, HealthError> {
        Probe::service(cfg)
    }

    fn standby_probe(&self, cfg: &HealthConfig, env: ProbeEnv) -> Probe {
        Probe::standby(cfg, env)
    }
}

impl PreparedStart for service::Prepared {
    fn epoch(&self) -> Epoch {
        service::Prepared::epoch(self)
    }

    fn cgroup(&self) -> Option<&str> {
        service::Prepared::cgroup(self)
    }
}

impl SpawnControl for Spawner {
    type Prepared = service::Prepared;
    type Running = service::RunningService;

    fn prepare(&self, epoch: Epoch) -> service::Prepared {
        Spawner::prepare(self, epoch)
    }

    async fn start(
        &self,
        start: Start<service::Prepared>,
    ) -> Result<service::RunningService, String> {
        let spawner = self.clone();
        // Making the cgroup and forking wait on the kernel: off the runtime's threads.
        let started = tokio::task::spawn_blocking(move || {
            let prepared = match start {
                Start::Prepared(p) => p,
                Start::Again { epoch, cgroup } => spawner
                    .prepare_again(epoch, &cgroup)
                    .map_err(service::ServiceError::Starter)?,
                Start::Fresh(epoch) => spawner.prepare(epoch),
            };
            Spawner::start(&spawner, prepared)
        })
        .await;
        match started {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(e) => Err(format!("the start task failed: {e}")),
        }
    }

    fn stop(
        &self,
        id: ServiceIdentity,
        signal: SignalName,
        grace: Duration,
    ) -> impl Future<Output = StopOutcome> + Send {
        service::stop(id, signal, grace)
    }

    fn kill(&self, id: &ServiceIdentity) -> bool {
        service::kill(id)
    }

    async fn gone(&self, id: ServiceIdentity) -> bool {
        tokio::task::spawn_blocking(move || service::gone(&id))
            .await
            .unwrap_or(false)
    }

    fn containment(&self) -> String {
        Spawner::containment(self).to_string()
    }
}

impl RunningService for service::RunningService {
    fn identity(&self) -> ServiceIdentity {
        service::RunningService::identity(self)
    }

    async fn exited(mut self) -> String {
        service::RunningService::exited(&mut self)
            .await
            .exit
            .to_string()
    }
}

impl HookControl for Hooks {
    async fn promote(&self, epoch: Epoch) -> Result<(), String> {
        Hooks::promote(self, epoch).await.map_err(|e| e.to_string())
    }

    async fn demote(
        &self,
        epoch: Option<Epoch>,
        extra: Vec<(String, String)>,
    ) -> Result<(), HookFailure> {
        Hooks::demote(self, epoch, &extra)
            .await
            .map_err(|e| HookFailure {
                detail: e.to_string(),
                said: match e {
                    service::HookError::Failed { said, .. } => said,
                    _ => None,
                },
            })
    }

    async fn follow(
        &self,
        epoch: Option<Epoch>,
        extra: Vec<(String, String)>,
    ) -> Result<(), String> {
        Hooks::follow(self, epoch, &extra)
            .await
            .map_err(|e| e.to_string())
    }

    fn check_pidfile(&self) -> Result<(), PidfileProblem> {
        Hooks::check_pidfile(self)
            .map(|_| ())
            .map_err(|e| PidfileProblem {
                refuses_start: e.refuses_start(),
                message: e.to_string(),
            })
    }

    fn pin(&self) -> Result<Option<PinnedService>, String> {
        Hooks::pin(self).map_err(|e| e.to_string())
    }

    fn pinned(&self) -> Option<PinnedService> {
        Hooks::pinned(self)
    }

    fn pinned_running(&self) -> Option<bool> {
        Hooks::pinned(self).map(|p| warden_fencing::process::is_running(p.pid, Some(p.start_time)))
    }

    fn repin(&self) -> Option<(PinnedService, PinnedService)> {
        Hooks::repin(self)
    }

    fn kill(&self) -> bool {
        Hooks::kill(self)
    }
}

/// What the start-time check of hooks mode's `service.pidfile` found (SPEC §6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PidfileProblem {
    /// What is wrong, and what to do.
    pub message: String,
    /// Warden must not start with it (exit 2): the pidfile names a process of another pid
    /// namespace. Otherwise it is logged, and a promotion refuses while it lasts.
    pub refuses_start: bool,
}

/// Who this warden process is: this host's boot id, machine id and pid namespace, and
/// this process's pid and start time, read from `/proc` and `/etc/machine-id`.
pub fn identity(cfg: &Config) -> Result<NodeRecord, String> {
    let boot_id = warden_fencing::process::boot_id().map_err(|e| {
        format!("cannot read this host's boot id from /proc/sys/kernel/random/boot_id: {e}")
    })?;
    let pid = std::process::id();
    let start_time = warden_fencing::process::start_time(pid).unwrap_or(0);
    // Without a machine id, a breadcrumb of this node can never count as "on this boot"
    // (SPEC §5): fencing our own leftovers then needs the whole chain.
    let machine_id = warden_fencing::process::machine_id().unwrap_or_else(|e| {
        warn!("cannot read this host's machine id ({e}); fencing will treat every record as another machine's (write /etc/machine-id with systemd-machine-id-setup)");
        String::new()
    });
    let pid_ns = warden_fencing::process::pid_ns().ok();
    let cgroup_ns = warden_fencing::cgroup::namespace();
    Ok(NodeRecord {
        node_id: cfg.cluster.node_id.clone(),
        host: cfg.host(),
        port: cfg.cluster.port,
        boot_id,
        machine_id,
        pid_ns,
        cgroup_ns,
        pid,
        start_time,
        incarnation: format!("{:016x}", rand::random::<u64>()),
        since: Some(record::rfc3339(SystemTime::now())),
        ..Default::default()
    })
}
