//! Spawn mode (SPEC §6): warden starts the service on promotion, in a cgroup the commit
//! names, and stops it on demotion; a standby's eligibility is `health.standby_command`.

use super::role::{round_ms, Demotion, RoleCtx, Said, ServiceRole, OWN_LEFTOVERS_TIMEOUT};
use super::DaemonError;
use crate::config::Config;
use crate::elector::{Event, KillCause, Ticket};
use crate::host::{
    CheckerHandle, HealthChange, Host, PreparedStart, Prober, RunningService, ServiceIdentity,
    SignalName, SpawnControl, Start, StopOutcome,
};
use crate::record::{Epoch, Health, NodeRecord};
use std::future::Future;
use std::time::Duration;
use tracing::{info, warn};

/// What spawn mode's tasks report.
pub enum SpawnReport<R> {
    /// The start for `ticket`: the process, or why not and whether it ran at all.
    Started(Ticket, Result<R, (String, bool)>),
    /// The service with this identity exited by itself.
    Exited(ServiceIdentity, String),
    /// `health.standby_command` changed.
    Eligibility(HealthChange),
    /// The running service's check changed.
    ServiceHealth(HealthChange),
}

type Running<H> = <<H as Host>::Spawner as SpawnControl>::Running;

/// Spawn mode's service.
pub struct Spawned<H: Host> {
    ctx: RoleCtx<H, SpawnReport<Running<H>>>,
    spawner: H::Spawner,
    stop_signal: SignalName,
    stop_timeout: Duration,
    /// The running service, if any.
    service: Option<ServiceIdentity>,
    /// The service being stopped, so the lease end can still kill it.
    stopping: Option<ServiceIdentity>,
    /// The start the last commit prepared (its cgroup is in the breadcrumb), and that
    /// cgroup, where a restart within the same epoch runs again.
    prepared: Option<<H::Spawner as SpawnControl>::Prepared>,
    committed_cgroup: Option<String>,
    /// The check of the service itself (`health.kind`), built once at start so that a
    /// probe that cannot be built (an unreadable `health.ca_file`) stops warden there.
    service_probe: H::Probe,
    service_check: Option<CheckerHandle>,
    /// `health.standby_command`, and its checker.
    standby_probe: H::Probe,
    eligibility: Option<CheckerHandle>,
    health: Health,
    /// The task that looks for the end of a service that outlived its stop.
    leftover_watch: Option<tokio::task::JoinHandle<()>>,
}

impl<H: Host> ServiceRole<H> for Spawned<H> {
    type Report = SpawnReport<Running<H>>;

    fn new(cfg: &Config, ctx: RoleCtx<H, Self::Report>) -> Result<Self, DaemonError> {
        let spawner = ctx.host.spawner(cfg).map_err(DaemonError::Config)?;
        let service_probe = ctx
            .host
            .service_probe(&cfg.health)
            .map_err(|e| DaemonError::Config(e.to_string()))?;
        // A standby's eligibility comes from `standby_command` (§4.6).
        let standby_probe = ctx.host.standby_probe(&cfg.health, ctx.probe_env.clone());
        Ok(Spawned {
            health: if standby_probe.is_none() {
                Health::Healthy
            } else {
                Health::Unknown
            },
            ctx,
            spawner,
            stop_signal: cfg.service.stop_signal,
            stop_timeout: cfg.service.stop_timeout,
            service: None,
            stopping: None,
            prepared: None,
            committed_cgroup: None,
            service_probe,
            service_check: None,
            standby_probe,
            eligibility: None,
            leftover_watch: None,
        })
    }

    fn begin(&mut self) {
        if !self.standby_probe.is_none() {
            self.eligibility = Some(self.ctx.checker(
                self.standby_probe.clone(),
                Duration::ZERO,
                SpawnReport::Eligibility,
                Said::StandbyCommand,
            ));
        }
    }

    fn eligible_at_start(&self) -> bool {
        self.standby_probe.is_none()
    }

    fn follows(&self) -> bool {
        false
    }

    /// `standby_command` is the eligibility check itself here.
    fn standby_checked(&self) -> bool {
        false
    }

    fn health(&self) -> Health {
        self.health
    }

    fn serving(&self, _promoted: bool) -> bool {
        self.service.is_some()
    }

    fn containment(&self) -> Option<String> {
        Some(self.spawner.containment())
    }

    fn name_running(&self, r: &mut NodeRecord) {
        if let Some(s) = &self.service {
            r.service_pid = Some(s.pid);
            r.service_pgid = Some(s.pgid);
            r.service_start_time = Some(s.start_time);
            r.service_cgroup = s.cgroup.clone();
        }
    }

    fn name_leftover(&self, r: &mut NodeRecord) {
        if let Some(s) = &self.stopping {
            r.service_pid = Some(s.pid);
            r.service_pgid = Some(s.pgid);
            r.service_start_time = Some(s.start_time);
            r.service_cgroup = s.cgroup.clone();
        }
        if r.service_cgroup.is_none() {
            r.service_cgroup = self.committed_cgroup.clone();
        }
    }

    /// Spawn mode only: [`Self::watch_leftover`] takes it back once its processes are
    /// gone. (In hooks mode the server runs on whatever its failed demote left, so that no
    /// end can be watched for, and every winner would kill it again: the review of stop
    /// 39; the breadcrumb, kept and written back, names it there.)
    fn advertises_leftover(&self) -> bool {
        true
    }

    fn name_stopped(&self, r: &mut NodeRecord) {
        // A spawned service's processes are gone once stopped; a start again reuses the
        // cgroup the commit named: it still finds it.
        r.service_pid = None;
        r.service_pgid = None;
        r.service_start_time = None;
        r.service_cgroup = self.committed_cgroup.clone();
    }

    fn commit(&mut self, epoch: Epoch, r: &mut NodeRecord) -> Result<(), String> {
        // Not started yet: no process of it to name, but its cgroup is made now and
        // recorded, so fencing finds every process the start will make even before the
        // start's own record lands.
        r.service_pid = None;
        r.service_pgid = None;
        r.service_start_time = None;
        let prepared = self.spawner.prepare(epoch);
        r.service_cgroup = prepared.cgroup().map(str::to_string);
        self.committed_cgroup = r.service_cgroup.clone();
        self.prepared = Some(prepared);
        Ok(())
    }

    fn start(
        &mut self,
        ticket: Ticket,
        epoch: Epoch,
    ) -> impl Future<Output = Self::Report> + Send + 'static {
        // The start the commit prepared, or a restart within the same epoch in the cgroup
        // the breadcrumb already names.
        let start = match (
            self.prepared.take().filter(|p| p.epoch() == epoch),
            self.committed_cgroup.clone(),
        ) {
            (Some(p), _) => Start::Prepared(p),
            (None, Some(cgroup)) => Start::Again { epoch, cgroup },
            (None, None) => Start::Fresh(epoch),
        };
        let spawner = self.spawner.clone();
        async move {
            let result = spawner.start(start).await;
            SpawnReport::Started(ticket, result.map_err(|e| (e, true)))
        }
    }

    fn on_report(&mut self, report: Self::Report) -> Vec<Event> {
        match report {
            SpawnReport::Started(ticket, Ok(running)) => {
                let id = running.identity();
                self.service = Some(id.clone());
                info!(pid = id.pid, pgid = id.pgid, "service started");
                let tell = self.ctx.tell.clone();
                tokio::spawn(async move {
                    let how = running.exited().await;
                    tell.report(SpawnReport::Exited(id, how));
                });
                if !self.service_probe.is_none() {
                    self.service_check = Some(self.ctx.checker(
                        self.service_probe.clone(),
                        self.ctx.health.start_grace,
                        SpawnReport::ServiceHealth,
                        Said::HealthCommand,
                    ));
                }
                vec![Event::ServiceStarted { ticket }]
            }
            SpawnReport::Started(ticket, Err((reason, ran))) => vec![Event::StartFailed {
                ticket,
                reason,
                ran,
            }],
            SpawnReport::Exited(id, how) => {
                if self.service.as_ref() != Some(&id) {
                    return Vec::new();
                }
                warn!(pid = id.pid, "the service exited: {how}");
                vec![Event::ServiceExited { reason: how }]
            }
            SpawnReport::Eligibility(c) => {
                if self.service.is_none() {
                    self.health = c.health;
                }
                vec![Event::EligibilityChanged {
                    eligible: c.health == Health::Healthy,
                    detail: c.detail,
                }]
            }
            SpawnReport::ServiceHealth(c) => {
                if self.service.is_some() {
                    self.health = c.health;
                }
                vec![Event::ServiceHealthChanged {
                    healthy: c.health != Health::Unhealthy,
                    detail: c.detail,
                }]
            }
        }
    }

    fn repin(&mut self) {}

    fn follow(
        &self,
        _ticket: Ticket,
        _active: &NodeRecord,
    ) -> Option<impl Future<Output = Event> + Send + 'static> {
        None::<std::future::Ready<Event>>
    }

    fn stop(
        &mut self,
        ticket: Ticket,
        demotion: Demotion,
    ) -> impl Future<Output = Event> + Send + 'static {
        self.service_check = None;
        let (spawner, signal, grace) = (self.spawner.clone(), self.stop_signal, self.stop_timeout);
        // From here on the service is being stopped, no longer ours to report.
        let id = self.service.take();
        if let Some(id) = &id {
            info!(pid = id.pid, cause = ?demotion.cause, "stopping the service");
            self.stopping = Some(id.clone());
        }
        async move {
            let Some(id) = id else {
                return Event::ServiceStopped {
                    ticket,
                    clean: true,
                    detail: "not running".into(),
                };
            };
            let (clean, detail) = match spawner.stop(id, signal, grace).await {
                StopOutcome::Stopped { forced, elapsed } => (
                    true,
                    format!(
                        "stopped in {}{}",
                        humantime::format_duration(round_ms(elapsed)),
                        if forced {
                            " (killed after stop_timeout)"
                        } else {
                            ""
                        }
                    ),
                ),
                StopOutcome::StillRunning { pids } => {
                    (false, format!("still running after SIGKILL: pids {pids:?}"))
                }
            };
            Event::ServiceStopped {
                ticket,
                clean,
                detail,
            }
        }
    }

    fn kill(&mut self, cause: KillCause) {
        let why = match cause {
            KillCause::LeaseEnd => "the lease ended",
            // (A spawned service is stopped by signals, not by a hook: not asked.)
            KillCause::DemoteFailed => "the stop failed",
        };
        // kill_group checks the leader's start time, so a group that is already gone (or
        // recycled) is left alone.
        for id in [&self.stopping, &self.service].into_iter().flatten() {
            warn!(pid = id.pid, "{why}: killing the service's process group");
            self.spawner.kill(id);
        }
    }

    /// The running service always (nothing supervises it once warden is gone), and one
    /// being stopped when its role is unknown.
    fn kill_at_exit(&mut self, role_unknown: bool) {
        let stopping = self.stopping.as_ref().filter(|_| role_unknown);
        for id in [self.service.as_ref(), stopping].into_iter().flatten() {
            self.spawner.kill(id);
        }
    }

    /// Kills it and waits.
    fn fence_own(&self) -> impl Future<Output = (bool, String)> + Send + 'static {
        let (spawner, service) = (self.spawner.clone(), self.stopping.clone());
        async move {
            let Some(id) = service else {
                return (true, "no service of this process is known to run".into());
            };
            let signal = SignalName(nix::sys::signal::Signal::SIGKILL);
            match spawner.stop(id, signal, OWN_LEFTOVERS_TIMEOUT).await {
                StopOutcome::Stopped { .. } => (true, "this node's own service is gone".into()),
                StopOutcome::StillRunning { pids } => (
                    false,
                    format!(
                        "this node's own service still runs after SIGKILL (pids {pids:?}); \
                         processes stuck in the kernel (a hung mount?) must end before this \
                         node may serve again"
                    ),
                ),
            }
        }
    }

    /// Nothing to demote in place: the fence kills it.
    fn demote_earlier(&self, _epoch: Option<Epoch>) -> impl Future<Output = bool> + Send + 'static {
        std::future::ready(false)
    }

    /// Looks every second whether its processes are gone, and tells the elector when they
    /// are: the member record then stops naming it, so that winners stop fencing a service
    /// that is over (a fence of a member's leftover names no warden pid and is never
    /// verified by `signal` or ssh: the review of stop 39).
    fn watch_leftover(&mut self, outlived: bool) {
        if let Some(h) = self.leftover_watch.take() {
            h.abort();
        }
        let (true, Some(id)) = (outlived, self.stopping.clone()) else {
            return;
        };
        let (tell, spawner) = (self.ctx.tell.clone(), self.spawner.clone());
        self.leftover_watch = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if spawner.gone(id.clone()).await && !tell.event(Event::OwnServiceGone) {
                    return;
                }
                if tell.is_closed() {
                    return;
                }
            }
        }));
    }
}
