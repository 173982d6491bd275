//! Hooks mode (SPEC §6): the service always runs, and hooks change its role. Its own check
//! decides its health and, with `health.standby_command` where set, its eligibility; the
//! process the pidfile names is pinned at each commit, and only it may be promoted under
//! that lock.

use super::role::{active_env, Demotion, RoleCtx, Said, ServiceRole};
use super::DaemonError;
use crate::config::Config;
use crate::elector::{Event, KillCause, Ticket};
use crate::host::{CheckerHandle, HealthChange, HookControl, Host, PinnedService, Prober};
use crate::record::{Epoch, Health, NodeRecord};
use std::future::Future;
use std::time::Duration;
use tokio::task::AbortHandle;
use tracing::{error, info, warn};

/// What hooks mode's tasks report.
pub enum HookReport {
    /// The promote hook for `ticket`: done, or why not and whether it ran at all.
    Started(Ticket, Result<(), (String, bool)>),
    /// The service process pinned at promotion is gone.
    PinnedExited(PinnedService),
    /// The service's own check changed (it also decides eligibility).
    Eligibility(HealthChange),
    /// `health.standby_command` changed (SPEC §6: the place for a replication lag check;
    /// a node is eligible only while it and the service's check pass).
    StandbyCheck(HealthChange),
}

/// Hooks mode's service.
pub struct Hooked<H: Host> {
    ctx: RoleCtx<H, HookReport>,
    hooks: H::Hooks,
    follows: bool,
    /// The service's own check, which also decides eligibility; started afresh after each
    /// demotion. `None` when no check is configured.
    probe: Option<H::Probe>,
    eligibility: Option<CheckerHandle>,
    /// With `health.standby_command` (`standby_command`): its checker, and whether it
    /// passes.
    standby_command: bool,
    standby_check: Option<CheckerHandle>,
    standby_ok: bool,
    /// Whether the service's own check says healthy.
    service_ok: bool,
    health: Health,
    /// The task that looks, every health interval, whether the promoted service's pinned
    /// process still runs.
    pin_watch: Option<AbortHandle>,
}

impl<H: Host> Hooked<H> {
    /// The health a node reports, from its service's check and, where set,
    /// `standby_command`: healthy only when both pass.
    fn combined(&self, service: Health) -> Health {
        match (service, self.standby_check.is_some(), self.standby_ok) {
            (Health::Healthy, true, false) => Health::Unhealthy,
            (h, _, _) => h,
        }
    }

    /// A promoted service whose process is gone may be back in its demoted role by now
    /// (systemd restarts it, as the examples' units do, as a replica) while its checks
    /// pass again: its exit is the service's exit, as in spawn mode. Looked at every
    /// health interval, since nothing reports it.
    fn watch_pinned(&mut self) {
        if let Some(h) = self.pin_watch.take() {
            h.abort();
        }
        let Some(pinned) = self.hooks.pinned() else {
            return;
        };
        let (hooks, tell, every) = (
            self.hooks.clone(),
            self.ctx.tell.clone(),
            self.ctx.health.interval,
        );
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if hooks.pinned() != Some(pinned) || tell.is_closed() {
                    return;
                }
                if hooks.pinned_running() == Some(false) {
                    tell.report(HookReport::PinnedExited(pinned));
                    return;
                }
            }
        });
        self.pin_watch = Some(task.abort_handle());
    }

    /// Health starts over after a demotion (a fresh checker, `unknown` until `rise` checks
    /// pass), so that a node never reports more than its checks know. The elector hears
    /// it as the next event, after the action under way.
    fn recheck_after_demotion(&mut self) {
        let Some(probe) = self.probe.clone() else {
            return;
        };
        self.eligibility = None;
        self.service_ok = false;
        if self.health != Health::Unknown {
            self.health = Health::Unknown;
            self.ctx.tell.event(Event::EligibilityChanged {
                eligible: false,
                detail: "checking the service again after its demotion".into(),
            });
        }
        self.eligibility = Some(self.ctx.checker(
            probe,
            Duration::ZERO,
            HookReport::Eligibility,
            Said::HealthCommand,
        ));
    }
}

impl<H: Host> ServiceRole<H> for Hooked<H> {
    type Report = HookReport;

    fn new(cfg: &Config, ctx: RoleCtx<H, HookReport>) -> Result<Self, DaemonError> {
        let hooks = ctx.host.hooks(cfg);
        // SPEC §6: an unreadable pidfile is said at start, not found out at the first
        // fence; a missing one is only warned about by the check (the service may still
        // be starting), and a promotion refuses either.
        match hooks.check_pidfile() {
            Err(e) if e.refuses_start => return Err(DaemonError::Config(e.message)),
            Err(e) => error!(
                "{}; this node cannot be promoted until the pidfile names the running service",
                e.message
            ),
            Ok(()) => {}
        }
        // The service always runs, so its own check decides both its health and whether
        // it may be promoted.
        let probe = ctx
            .host
            .service_probe(&cfg.health)
            .map_err(|e| DaemonError::Config(e.to_string()))?;
        let probe = (!probe.is_none()).then_some(probe);
        // With `standby_command`: not eligible before its first check passes.
        let standby_checked = !cfg.health.standby_command.is_empty();
        let unchecked = probe.is_none();
        Ok(Hooked {
            ctx,
            hooks,
            follows: !cfg.service.follow.is_empty(),
            probe,
            eligibility: None,
            standby_command: standby_checked,
            standby_check: None,
            standby_ok: !standby_checked,
            service_ok: unchecked,
            health: if unchecked && !standby_checked {
                Health::Healthy
            } else {
                Health::Unknown
            },
            pin_watch: None,
        })
    }

    fn begin(&mut self) {
        if let Some(probe) = self.probe.clone() {
            self.eligibility = Some(self.ctx.checker(
                probe,
                Duration::ZERO,
                HookReport::Eligibility,
                Said::HealthCommand,
            ));
        }
        if !self.standby_ok {
            let probe = self
                .ctx
                .host
                .standby_probe(&self.ctx.health, self.ctx.probe_env.clone());
            self.standby_check = Some(self.ctx.checker(
                probe,
                Duration::ZERO,
                HookReport::StandbyCheck,
                Said::StandbyCommand,
            ));
        }
    }

    fn eligible_at_start(&self) -> bool {
        self.service_ok
    }

    fn follows(&self) -> bool {
        self.follows
    }

    fn standby_checked(&self) -> bool {
        self.standby_command
    }

    fn health(&self) -> Health {
        self.health
    }

    fn serving(&self, promoted: bool) -> bool {
        promoted
    }

    fn containment(&self) -> Option<String> {
        None
    }

    fn name_running(&self, r: &mut NodeRecord) {
        // The always-running service, from the pidfile; its group is its own business.
        if let Some(pinned) = self.hooks.pinned() {
            r.service_pid = Some(pinned.pid);
            r.service_start_time = Some(pinned.start_time);
        }
    }

    fn name_leftover(&self, _r: &mut NodeRecord) {}

    /// The server runs on whatever its failed demote left, so that no end can be watched
    /// for, and every winner would kill it again (the review of stop 39): the breadcrumb,
    /// kept and written back, names it instead.
    fn advertises_leftover(&self) -> bool {
        false
    }

    /// The service is the always-running process pinned at the commit: a demote leaves it
    /// running, so the record keeps naming it (it is all a fencer has; without it no one
    /// can fence this node, and the cluster stays without an active: found by the
    /// PostgreSQL example with ZooKeeper frozen).
    fn name_stopped(&self, _r: &mut NodeRecord) {}

    fn commit(&mut self, _epoch: Epoch, r: &mut NodeRecord) -> Result<(), String> {
        // The always-running service's pidfile identity goes into the commit itself (SPEC
        // §4.3c); without it, no promotion.
        if let Some(p) = self.hooks.pin().map_err(|e| e.to_string())? {
            r.service_pid = Some(p.pid);
            r.service_start_time = Some(p.start_time);
        }
        Ok(())
    }

    fn start(
        &mut self,
        ticket: Ticket,
        epoch: Epoch,
    ) -> impl Future<Output = HookReport> + Send + 'static {
        let hooks = self.hooks.clone();
        async move {
            // Only the process pinned at the commit is named by the breadcrumb, so only it
            // may be promoted under this lock: once it is gone (it died while the cluster
            // was paused, and runs again in its demoted role), its successor needs a
            // commit of its own, which pins it.
            if let Some(pinned) = hooks
                .pinned()
                .filter(|_| hooks.pinned_running() == Some(false))
            {
                let why = format!(
                    "the service process pinned at promotion (pid {}) is gone; the next \
                     promotion pins the one running now",
                    pinned.pid
                );
                return HookReport::Started(ticket, Err((why, false)));
            }
            let result = hooks.promote(epoch).await;
            let result = result.map_err(|e| (format!("the promote hook failed: {e}"), true));
            HookReport::Started(ticket, result)
        }
    }

    fn on_report(&mut self, report: HookReport) -> Vec<Event> {
        match report {
            HookReport::Started(ticket, Ok(())) => {
                info!("the promote hook succeeded");
                self.watch_pinned();
                vec![Event::ServiceStarted { ticket }]
            }
            HookReport::Started(ticket, Err((reason, ran))) => vec![Event::StartFailed {
                ticket,
                reason,
                ran,
            }],
            HookReport::PinnedExited(pinned) => {
                if self.hooks.pinned() != Some(pinned) {
                    return Vec::new();
                }
                let how = format!(
                    "the service process pinned at promotion (pid {}) is gone",
                    pinned.pid
                );
                warn!(pid = pinned.pid, "{how}");
                vec![Event::ServiceExited { reason: how }]
            }
            HookReport::Eligibility(c) => {
                self.service_ok = c.health == Health::Healthy;
                self.health = self.combined(c.health);
                vec![
                    Event::ServiceHealthChanged {
                        healthy: c.health != Health::Unhealthy,
                        detail: c.detail.clone(),
                    },
                    Event::EligibilityChanged {
                        eligible: c.health == Health::Healthy,
                        detail: c.detail,
                    },
                ]
            }
            HookReport::StandbyCheck(c) => {
                self.standby_ok = c.health == Health::Healthy;
                let service = if self.service_ok {
                    Health::Healthy
                } else {
                    Health::Unknown
                };
                self.health = self.combined(service);
                vec![Event::StandbyCheckChanged {
                    passing: self.standby_ok,
                    detail: c.detail,
                }]
            }
        }
    }

    /// SPEC §6a.2, a called-off switchover: the demote may have restarted the service
    /// under another pid. The process pinned at promotion is gone, so the promote again
    /// would be refused and the breadcrumb would name nothing a fencer could find: pin the
    /// process the pidfile names now, which the breadcrumb rewrite that follows records
    /// before the promote hook runs.
    fn repin(&mut self) {
        if let Some((gone, now)) = self.hooks.repin() {
            warn!(
                gone = gone.pid,
                pid = now.pid,
                start_time = now.start_time,
                "the service process pinned at promotion (pid {}) is gone and the pidfile \
                 names pid {} now (the service restarted in its demote): pinned it, and \
                 the breadcrumb names it before the promote hook runs again",
                gone.pid,
                now.pid
            );
        }
    }

    fn follow(
        &self,
        ticket: Ticket,
        active: &NodeRecord,
    ) -> Option<impl Future<Output = Event> + Send + 'static> {
        let hooks = self.hooks.clone();
        let env = active_env(active);
        let (node, epoch) = (active.node_id.clone(), active.epoch);
        info!(active = %node, epoch, "running the follow hook");
        Some(async move {
            let (ok, detail) = match hooks.follow(epoch, env).await {
                Ok(()) => (true, format!("following {node}")),
                Err(e) => (false, e),
            };
            Event::Followed { ticket, ok, detail }
        })
    }

    fn stop(
        &mut self,
        ticket: Ticket,
        d: Demotion,
    ) -> impl Future<Output = Event> + Send + 'static {
        let hooks = self.hooks.clone();
        info!(cause = ?d.cause, "running the demote hook");
        if let Some(h) = self.pin_watch.take() {
            h.abort();
        }
        // The service changes role: what its checks said before no longer holds, so the
        // node is not "healthy" again until `rise` checks of the demoted service pass.
        self.recheck_after_demotion();
        async move {
            let Demotion {
                cause: _,
                epoch,
                successor,
                active,
                retry_without_successor,
            } = d;
            let (successor_node, mut extra) = match successor {
                Some((node, env)) => (Some(node), env.await),
                None => (None, Vec::new()),
            };
            extra.extend(active.iter().cloned());
            let mut result = hooks.demote(epoch, extra).await;
            if let (Err(e), Some(node), true) = (&result, &successor_node, retry_without_successor)
            {
                warn!(
                    "the demote hook could not hand over to {node} ({e}); running it again \
                     without a successor"
                );
                result = hooks.demote(epoch, active.clone()).await;
            }
            match result {
                Ok(()) => Event::ServiceStopped {
                    ticket,
                    clean: true,
                    detail: "the demote hook succeeded".to_string(),
                },
                // The elector decides what follows: a planned switchover called off (SPEC
                // §6a.2), or after a forced demotion the kill (§6).
                Err(e) => Event::DemoteFailed {
                    ticket,
                    detail: format!("the demote hook failed: {e}"),
                    said: e.said,
                },
            }
        }
    }

    fn kill(&mut self, cause: KillCause) {
        match cause {
            KillCause::LeaseEnd => {
                warn!("the lease ended before the demote hook finished: killing the service")
            }
            KillCause::DemoteFailed => warn!(
                "the demote hook of a forced demotion failed: killing the pidfile process, \
                 whose role nobody knows"
            ),
        }
        self.hooks.kill();
    }

    /// Only while the elector says the service's role is unknown (a forced demotion's hook
    /// runs or failed, or a voluntary one overtaken by the lease or the lock: SPEC §6a.4).
    /// A service demoted, or never promoted, is left running.
    fn kill_at_exit(&mut self, role_unknown: bool) {
        if role_unknown {
            warn!(
                "exiting at once during a forced demotion whose hook has not succeeded: \
                 killing the pidfile process, whose role nobody knows"
            );
            self.hooks.kill();
        }
    }

    /// Demotes it by hook, else kills the pinned pidfile process.
    fn fence_own(&self) -> impl Future<Output = (bool, String)> + Send + 'static {
        let h = self.hooks.clone();
        async move {
            match h.demote(None, Vec::new()).await {
                Ok(()) => (
                    true,
                    "demoted this node's own service with the demote hook".into(),
                ),
                Err(e) => {
                    let killed = h.kill();
                    (
                        false,
                        format!(
                            "the demote hook failed ({e}){}; the service's role is unknown",
                            if killed {
                                "; killed the pidfile process"
                            } else {
                                ""
                            }
                        ),
                    )
                }
            }
        }
    }

    /// §5: the service of an earlier warden process on this boot is ours and nobody was
    /// promoted since: demoted rather than killed (that earlier warden process is still
    /// ended).
    fn demote_earlier(&self, epoch: Option<Epoch>) -> impl Future<Output = bool> + Send + 'static {
        let h = self.hooks.clone();
        async move {
            match h.demote(epoch, Vec::new()).await {
                Ok(()) => true,
                Err(e) => {
                    warn!("the demote hook failed ({e}); fencing by signal");
                    false
                }
            }
        }
    }

    fn watch_leftover(&mut self, _outlived: bool) {}
}
