//! How the service's role is changed (SPEC §6), behind one trait: [`super::Spawned`]
//! starts the service on promotion and stops it on demotion, [`super::Hooked`] runs hooks
//! on a service that always runs. The driver calls only [`ServiceRole`]; the mode is
//! chosen once, where `run` is put together ([`crate::launch`]) or where the simulation
//! starts a node, and the simulation plugs in its own processes and hooks underneath
//! (the [`Host`]'s [`crate::host::SpawnControl`] and [`crate::host::HookControl`]), so it
//! runs these very roles.
//!
//! A role's slow steps (a start, a stop, a hook) are futures the driver runs as tasks; what
//! they find comes back to the loop as an [`Event`] for the elector, or as the role's own
//! report ([`ServiceRole::Report`]), which the loop hands back to
//! [`ServiceRole::on_report`]: the role's state changes only there, in the loop, never
//! from a task.

use super::DaemonError;
use crate::config::{Config, HealthConfig};
use crate::elector::{Event, KillCause, StopCause, Ticket};
use crate::host::{CheckerHandle, CheckerSettings, HealthChange, Host, ProbeEnv};
use crate::metrics::Metrics;
use crate::record::{Epoch, Health, NodeRecord};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// A boxed future, for a step whose kind only one role runs.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A hook's extra variables (`WARDEN_SUCCESSOR_*`, `WARDEN_ACTIVE_*`).
pub type HookEnv = Vec<(String, String)>;

/// What a role's task tells the loop. (Sent once and unpacked at once into the loop's own
/// input, which carries the same event unboxed.)
#[allow(clippy::large_enum_variant)]
pub enum Told<M> {
    /// An event for the elector.
    Event(Event),
    /// The role's own report, for [`ServiceRole::on_report`].
    Report(M),
    /// A check told another data position (SPEC §6b; `None`: unknown now).
    Position(Said, Option<u64>),
}

/// The way back to the loop, for a role and its tasks.
pub struct Tell<M>(Arc<dyn Sink<M>>);

/// Where a [`Tell`] sends to: the loop's channel.
pub(super) trait Sink<M>: Send + Sync {
    /// Sends `told`; `false` once the loop is gone.
    fn send(&self, told: Told<M>) -> bool;
    fn is_closed(&self) -> bool;
}

impl<M> Clone for Tell<M> {
    fn clone(&self) -> Self {
        Tell(self.0.clone())
    }
}

impl<M> Tell<M> {
    pub(super) fn new(sink: impl Sink<M> + 'static) -> Self {
        Tell(Arc::new(sink))
    }

    pub fn event(&self, event: Event) -> bool {
        self.0.send(Told::Event(event))
    }

    pub fn report(&self, report: M) -> bool {
        self.0.send(Told::Report(report))
    }

    pub fn position(&self, said: Said, position: Option<u64>) -> bool {
        self.0.send(Told::Position(said, position))
    }

    /// Whether the loop is gone: a role's watching task then ends.
    pub fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

/// Which command told a position (SPEC §6b): the index into the driver's positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Said {
    /// `health.command`, the service's own check.
    HealthCommand = 0,
    /// `health.standby_command`.
    StandbyCommand = 1,
}

/// What a role works with: this host, the way back to the loop, and what its checks need.
pub struct RoleCtx<H: Host, M> {
    pub host: H,
    pub tell: Tell<M>,
    pub(super) metrics: Metrics,
    pub(super) health: HealthConfig,
    /// What `standby_command` is told (SPEC §6), kept current by the driver.
    pub(super) probe_env: ProbeEnv,
}

impl<H: Host, M: Send + 'static> RoleCtx<H, M> {
    /// Starts a health checker whose changes come back as `wrap(change)` reports, and the
    /// positions it reads as told by `said`.
    pub fn checker(
        &self,
        probe: H::Probe,
        grace: Duration,
        wrap: fn(HealthChange) -> M,
        said: Said,
    ) -> CheckerHandle {
        let (htx, mut hrx) = mpsc::channel(8);
        let (ptx, mut prx) = mpsc::channel(8);
        let h = &self.health;
        let handle = self.host.checker(
            probe,
            CheckerSettings {
                interval: h.interval,
                timeout: h.timeout,
                rise: h.rise,
                fall: h.fall,
                grace,
            },
            htx,
            Some({
                let metrics = self.metrics.clone();
                Arc::new(move |pass| metrics.health_check(pass))
            }),
            Some(ptx),
        );
        let tell = self.tell.clone();
        tokio::spawn(async move {
            loop {
                let open = tokio::select! {
                    Some(c) = hrx.recv() => tell.report(wrap(c)),
                    Some(p) = prx.recv() => tell.position(said, p),
                    else => break,
                };
                if !open {
                    break;
                }
            }
        });
        handle
    }
}

/// A demotion as the elector asked it (SPEC §6, §6b), for a role that hands over.
pub struct Demotion {
    pub cause: StopCause,
    /// The epoch this node was promoted under.
    pub epoch: Option<Epoch>,
    /// The node to hand over to, with the read of its `WARDEN_SUCCESSOR_*` (a store read
    /// that runs only when awaited).
    pub successor: Option<(String, BoxFuture<HookEnv>)>,
    /// `WARDEN_ACTIVE_*` of the active to follow, when another node is known to be one.
    pub active: HookEnv,
    /// The successor is one this node named as it stepped down by itself, not a planned
    /// switchover's: a chance to hand over without loss, never a reason to stay writable.
    pub retry_without_successor: bool,
}

/// How the service's role is changed: what the driver asks of spawn and hooks mode alike.
pub trait ServiceRole<H: Host>: Sized + Send + 'static {
    /// What this role's tasks report back to the loop (a started process, an exit, a
    /// check's change).
    type Report: Send + 'static;

    /// The role `cfg` asks for; checks start only at [`begin`](Self::begin). An error stops
    /// warden at its start.
    fn new(cfg: &Config, ctx: RoleCtx<H, Self::Report>) -> Result<Self, DaemonError>;
    /// Starts the checks that run from the start; called once the probe environment names
    /// the node.
    fn begin(&mut self);
    /// Whether the node is eligible before any check ran (none is configured).
    fn eligible_at_start(&self) -> bool;
    /// Whether a standby runs the `follow` hook (SPEC §6).
    fn follows(&self) -> bool;
    /// Whether `health.standby_command` is checked beside the eligibility check
    /// ([`Event::StandbyCheckChanged`]).
    fn standby_checked(&self) -> bool;
    /// The health this node reports.
    fn health(&self) -> Health;
    /// Whether the service serves now; `promoted`: the elector counts it as serving.
    fn serving(&self, promoted: bool) -> bool;
    /// How the service is contained, for `status` (SPEC §6).
    fn containment(&self) -> Option<String>;

    /// Names the running service in `r`, a record of ours.
    fn name_running(&self, r: &mut NodeRecord);
    /// Names the service that outlived its stop in `r`, a record of ours naming the
    /// running service.
    fn name_leftover(&self, r: &mut NodeRecord);
    /// Whether the member record names a service that outlived its stop
    /// ([`MemberRecord::leftover`]).
    fn advertises_leftover(&self) -> bool;
    /// What the breadcrumb names once the service is stopped or demoted, in `r`, a record
    /// of ours naming the running service.
    fn name_stopped(&self, r: &mut NodeRecord);

    /// The commit of a promotion at `epoch`: names in `r` what the breadcrumb must name
    /// before the service may be promoted; an error refuses the promotion.
    fn commit(&mut self, epoch: Epoch, r: &mut NodeRecord) -> Result<(), String>;
    /// Starts or promotes the service for the elector's `ticket`.
    fn start(
        &mut self,
        ticket: Ticket,
        epoch: Epoch,
    ) -> impl Future<Output = Self::Report> + Send + 'static;
    /// A report of this role's tasks, in the loop: the events it means for the elector.
    fn on_report(&mut self, report: Self::Report) -> Vec<Event>;
    /// A called-off switchover (SPEC §6a.2) is about to promote the service again.
    fn repin(&mut self);
    /// Points a standby's service at `active` (SPEC §6); `None` where there is nothing to
    /// point.
    fn follow(
        &self,
        ticket: Ticket,
        active: &NodeRecord,
    ) -> Option<impl Future<Output = Event> + Send + 'static>;
    /// Stops or demotes the service; the event says how it went.
    fn stop(
        &mut self,
        ticket: Ticket,
        demotion: Demotion,
    ) -> impl Future<Output = Event> + Send + 'static;
    /// The service must not serve on (the lease ended before its stop did, or a forced
    /// demotion's hook failed): kill it now.
    fn kill(&mut self, cause: KillCause);
    /// Warden exits at once (a second stop signal, a fatal error); `role_unknown`: the
    /// elector says a stop forced by now is under way, whose end warden will not hear
    /// ([`crate::elector::Elector::service_role_unknown`]).
    fn kill_at_exit(&mut self, role_unknown: bool);
    /// Fences this very process's own service, which an earlier stop could not verify
    /// gone (SPEC §5): whether it is, and what was done.
    fn fence_own(&self) -> impl Future<Output = (bool, String)> + Send + 'static;
    /// The service of an earlier warden process of this node on this boot, at `epoch`:
    /// whether it was demoted in place (then only that warden process is ended).
    fn demote_earlier(&self, epoch: Option<Epoch>) -> impl Future<Output = bool> + Send + 'static;
    /// Whether the elector counts a service of this node as outliving its stop: while it
    /// does, the role looks for its end ([`Event::OwnServiceGone`]).
    fn watch_leftover(&mut self, outlived: bool);
}

/// Fencing our own leftovers on this host: SIGKILL, and this long to see them gone.
pub(super) const OWN_LEFTOVERS_TIMEOUT: Duration = Duration::from_secs(5);

/// `WARDEN_ACTIVE_NODE/HOST/PORT` for a hook that follows `active` (SPEC §6); host and
/// port only when its record names them.
pub(super) fn active_env(active: &NodeRecord) -> Vec<(String, String)> {
    let mut env = vec![("WARDEN_ACTIVE_NODE".to_string(), active.node_id.clone())];
    if !active.host.is_empty() {
        env.push(("WARDEN_ACTIVE_HOST".to_string(), active.host.clone()));
    }
    if let Some(port) = active.port {
        env.push(("WARDEN_ACTIVE_PORT".to_string(), port.to_string()));
    }
    env
}

/// `d` in whole milliseconds, for the log and the records.
pub(super) fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}
