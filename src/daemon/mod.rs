//! The driver: one task owns the [`Elector`], feeds it events from ZooKeeper, the service,
//! health checks, timers and signals, and carries out its actions.
//!
//! Slow actions (a fence, a service stop, a ZooKeeper write) run in their own tasks and
//! report back through one channel, so the elector is never blocked and the lease timer
//! fires even while a fence or a stop is still running. No election rule lives here:
//! where this file decides something, it is how to carry out an action, never whether.

use crate::api::NodeView;
use crate::config::{Config, ServiceMode};
use crate::coord::{self, Connector, RegisterError, Session, StoreError, StoreEvent};
use crate::elector::{
    Action, ClusterState, ControlView, Elector, ElectorConfig, Event, FailoverView, FenceOrder,
    KeptBreadcrumb, Reason, Ticket, WriteOutcome,
};
use crate::error::{EXIT_UNREACHABLE, EXIT_USAGE};
use crate::health::{self, CheckerHandle, HealthChange, ProbeEnv, Prober};
use crate::host::{HookControl, Host, PreparedStart, RunningService, SpawnControl, Start};
use crate::metrics::Metrics;
use crate::notify;
use crate::record::{
    self, Control, Epoch, Health, HistoryEntry, MemberRecord, NodeRecord, Role, Version,
};
use crate::service::{PinnedService, ServiceIdentity, StopOutcome};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tracing::{error, info, warn};
use warden_fencing::{FenceChain, FenceContext, FenceMethod, SignalFence, SignalName};

/// Back-off between attempts to reach ZooKeeper: starts here, doubles, caps below.
const CONNECT_BACKOFF_START: Duration = Duration::from_millis(250);
const CONNECT_BACKOFF_MAX: Duration = Duration::from_secs(10);
/// Fencing our own leftovers on this host: SIGKILL, and this long to see them gone.
const OWN_LEFTOVERS_TIMEOUT: Duration = Duration::from_secs(5);

/// How the service's role is changed (SPEC §6).
enum ServiceControl<H: Host> {
    /// warden starts the service on promotion and stops it on demotion.
    Spawn(H::Spawner),
    /// The service always runs; hooks change its role.
    Hooks(H::Hooks),
}

impl<H: Host> Clone for ServiceControl<H> {
    fn clone(&self) -> Self {
        match self {
            ServiceControl::Spawn(s) => ServiceControl::Spawn(s.clone()),
            ServiceControl::Hooks(h) => ServiceControl::Hooks(h.clone()),
        }
    }
}

pub use crate::error::Fatal;

mod act;
mod fence;
mod store;
use fence::*;
use store::*;

/// What reaches the loop.
enum Input<S, R> {
    /// A result or an event for the elector, valid whatever the session.
    Elector(Event),
    /// An event of session `gen`; dropped if that session is no longer current.
    Session(u64, Event),
    /// A lock watch of session `gen` for join `ticket` fired: the lock was deleted.
    LockDeleted(u64, Ticket),
    /// A new session is open and registered: the session, `control` as it was first
    /// read, the task that runs its events and the channel they arrive on.
    Connected(Box<Opened<S>>),
    /// The service started (spawn mode: the process; hooks mode: promoted) for `ticket`;
    /// or it failed: why, and whether the start or hook ran at all.
    Started(Ticket, Result<Option<R>, (String, bool)>),
    /// The service with this identity exited by itself.
    Exited(ServiceIdentity, String),
    /// Hooks mode: the service process pinned at promotion is gone.
    PinnedExited(PinnedService),
    /// The standby eligibility check changed.
    Eligibility(HealthChange),
    /// Hooks mode: `health.standby_command` changed (SPEC §6: the place for a replication
    /// lag check; a node is eligible only while it and the service's check pass).
    StandbyCheck(HealthChange),
    /// The service health check changed.
    ServiceHealth(HealthChange),
    /// A check told another data position (SPEC §6b; `None`: unknown now).
    Position(Said, Option<u64>),
    Fatal(Fatal),
    /// The task of connect attempt `n` died (panicked) without a session or an error: a
    /// new attempt is due, if `n` is still the newest.
    ConnectDied(u64),
}

/// Which command told a position (SPEC §6b): the index into [`Daemon::positions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Said {
    /// `health.command`, the service's own check.
    HealthCommand = 0,
    /// `health.standby_command`.
    StandbyCommand = 1,
}

/// A session just opened and registered, with its event stream running.
struct Opened<S> {
    session: S,
    control: Control,
    tasks: JoinSet<()>,
    events: mpsc::UnboundedReceiver<StoreEvent>,
}

/// The current session and everything that lives and dies with it.
struct SessionCtx<S> {
    zk: S,
    gen: u64,
    /// Watchers and in-flight calls of this session; dropping the set aborts them, which
    /// drops their clones of the client so the session really closes.
    tasks: JoinSet<()>,
    /// Our member record as it should be in the store; one task of `tasks` writes each
    /// new one after the last, so an older record can never land after a newer one.
    member: tokio::sync::watch::Sender<Option<MemberRecord>>,
    /// Our history entries, appended by one task of `tasks` in the order sent.
    history: mpsc::UnboundedSender<HistoryEntry>,
    /// Held by each of our breadcrumb's writers of this session, start to end (a look
    /// with its write-back, a rewrite, the release's delete): on MySQL a call can overtake
    /// another through the pool, and a look that read before a rewrite or a delete
    /// landed would write an older record back after it (the review of stop 44).
    crumb: Arc<tokio::sync::Mutex<()>>,
    /// Wakes the members' reader for a read now (`Action::ReadMembers`).
    members_due: Arc<tokio::sync::Notify>,
    /// The member watched instead of the lock as last told to the session (SPEC §6b).
    watched_above: Option<String>,
}

/// The driver of one warden process: generic over the store it is elected through and
/// the host it runs on, so the simulation runs this very code.
pub struct Daemon<C: Connector, H: Host> {
    host: H,
    pub(crate) metrics: Metrics,
    /// What the HTTP face shows; replaced after every drain.
    pub(crate) view: tokio::sync::watch::Sender<NodeView>,
    cfg: Config,
    me: NodeRecord,
    connector: C,
    elector: Elector,
    chain: FenceChain<H::Methods>,
    own_chain: FenceChain<H::Methods>,
    /// `signal` without the pidfile: ends an earlier warden process of this node whose
    /// service the demote hook already demoted.
    warden_only_chain: FenceChain<H::Methods>,
    control_svc: ServiceControl<H>,
    tx: mpsc::UnboundedSender<DaemonInput<C, H>>,
    rx: mpsc::UnboundedReceiver<DaemonInput<C, H>>,
    session: Option<SessionCtx<C::Session>>,
    next_gen: u64,
    /// The join whose lock watch counts.
    join_ticket: Ticket,
    connecting: Option<AbortHandle>,
    /// The number of the newest connect attempt (see [`Input::ConnectDied`]).
    connect_attempt: u64,
    /// The running service, if any.
    service: Option<ServiceIdentity>,
    /// Spawn mode: the start the last commit prepared (its cgroup is in the breadcrumb),
    /// and that cgroup, where a restart within the same epoch runs again.
    prepared: Option<<H::Spawner as SpawnControl>::Prepared>,
    committed_cgroup: Option<String>,
    /// The last breadcrumb rewrite within an epoch (§4.3d): the epoch and its number
    /// ([`NodeRecord::rewrite`]).
    rewrites: Option<(Epoch, u64)>,
    /// The writes of the transition to `promoting` (our member record, its history
    /// entry), held back until the promotion's commit is answered or the next transition:
    /// ZooKeeper answers a session's reads after its earlier writes, and the takeover's
    /// reads and commit waited for these (a disk sync each on a busy machine).
    held_back: Option<Option<HistoryEntry>>,
    /// The service being stopped, so the lease end can still kill it.
    stopping: Option<ServiceIdentity>,
    epoch: Option<Epoch>,
    role_since: Instant,
    /// The `epoch_seen` in the member record last published.
    published_epoch_seen: Option<Epoch>,
    /// The `follow` state in the member record last published.
    published_follow: Option<String>,
    /// The leftover our member record names, as last published, and the task that
    /// watches for its end (spawn mode).
    published_leftover: Option<Epoch>,
    /// The active our member record says this node remembers
    /// ([`MemberRecord::remembers`], from `Elector::remembered`), as last published.
    published_remembers: Option<record::Remembered>,
    /// SPEC §6b: the standby placed just above this one, as last published.
    published_after: Option<String>,
    /// Whether the record last written carried [`MemberRecord::tries_in`]: the wait's end
    /// is written too, or a settled node would look settling to each new reader.
    published_settling: bool,
    leftover_watch: Option<tokio::task::JoinHandle<()>>,
    /// What `standby_command` is told (SPEC §6), kept current by [`Self::drain`].
    probe_env: ProbeEnv,
    health: Health,
    /// SPEC §6b: the data position the last passing check of each kind told, and when it
    /// was read (as RFC 3339); `None` while unknown. See [`Daemon::position`].
    positions: [Option<(u64, String)>; 2],
    /// SPEC §6b: when each member's [`MemberRecord::tries_in`] ends, by (node, incarnation,
    /// the value read), from when this node first read it ([`Daemon::read_tries_at`]).
    tries_seen: std::collections::HashMap<(String, String, String), Instant>,
    eligibility: Option<CheckerHandle>,
    /// Hooks mode: the service's own check, which also decides eligibility; started
    /// afresh after each demotion.
    hooks_probe: Option<H::Probe>,
    /// Hooks mode with `health.standby_command`: its checker, and whether it passes.
    standby_check: Option<CheckerHandle>,
    standby_ok: bool,
    /// Hooks mode: whether the service's own check says healthy.
    service_ok: bool,
    /// The check of the service itself (`health.kind`), built once at start so that a
    /// probe that cannot be built (an unreadable `health.ca_file`) stops warden there.
    service_probe: H::Probe,
    service_check: Option<CheckerHandle>,
    /// Hooks mode: the task that looks, every health interval, whether the promoted
    /// service's pinned process still runs.
    pin_watch: Option<AbortHandle>,
    exit_code: Option<i32>,
}

/// What reaches the loop of a daemon on store `C` and host `H`.
type DaemonInput<C, H> =
    Input<<C as Connector>::Session, <<H as Host>::Spawner as SpawnControl>::Running>;

impl<C: Connector, H: Host> Daemon<C, H> {
    /// A daemon for `cfg`, this warden process being `me`; nothing runs until
    /// [`run`](Self::run).
    pub fn new(cfg: Config, me: NodeRecord, connector: C, host: H) -> Result<Self, Fatal> {
        let (tx, rx) = mpsc::unbounded_channel();
        let ctx = FenceContext {
            cluster: cfg.cluster.name.clone(),
            node_id: cfg.cluster.node_id.clone(),
            host: me.host.clone(),
            boot_id: me.boot_id.clone(),
            machine_id: me.machine_id.clone(),
            pid_ns: me.pid_ns.unwrap_or(0),
            pidfile: cfg.service.pidfile.clone(),
        };
        let methods = host.fence_methods();
        let chain = FenceChain::with_methods(cfg.fence.clone(), ctx.clone(), methods.clone());
        let own_signal = vec![FenceMethod::Signal(SignalFence {
            signal: SignalName(nix::sys::signal::Signal::SIGKILL),
            timeout: OWN_LEFTOVERS_TIMEOUT,
            nodes: None,
        })];
        let warden_only_chain = FenceChain::with_methods(
            own_signal.clone(),
            FenceContext {
                pidfile: None,
                ..ctx.clone()
            },
            methods.clone(),
        );
        let own_chain = FenceChain::with_methods(own_signal, ctx, methods);
        let control_svc: ServiceControl<H> = match cfg.service.mode {
            ServiceMode::Spawn => {
                ServiceControl::Spawn(host.spawner(&cfg).map_err(|message| Fatal {
                    code: EXIT_USAGE,
                    message,
                })?)
            }
            ServiceMode::Hooks => ServiceControl::Hooks(host.hooks(&cfg)),
        };
        if let ServiceControl::Hooks(hooks) = &control_svc {
            // SPEC §6: an unreadable pidfile is said at start, not found out at the first
            // fence; a missing one is only warned about by the check (the service may
            // still be starting), and a promotion refuses either.
            match hooks.check_pidfile() {
                Err(e) if e.refuses_start => {
                    return Err(Fatal {
                        code: EXIT_USAGE,
                        message: e.message,
                    })
                }
                Err(e) => error!(
                    "{}; this node cannot be promoted until the pidfile names the running service",
                    e.message
                ),
                Ok(()) => {}
            }
        }
        // Spawn mode: a standby's eligibility comes from `standby_command` (§4.6). Hooks
        // mode: the service always runs, so its own health check decides both.
        let probe_env = ProbeEnv::default();
        let service_probe = host.service_probe(&cfg.health).map_err(|e| Fatal {
            code: EXIT_USAGE,
            message: e.to_string(),
        })?;
        let standby_probe = match cfg.service.mode {
            ServiceMode::Spawn => host.standby_probe(&cfg.health, probe_env.clone()),
            ServiceMode::Hooks => service_probe.clone(),
        };
        let eligible_now = standby_probe.is_none();
        let hooks_probe = (cfg.service.mode == ServiceMode::Hooks && !eligible_now)
            .then(|| standby_probe.clone());
        // Hooks mode with `standby_command`: not eligible before its first check passes.
        let standby_checked =
            cfg.service.mode == ServiceMode::Hooks && !cfg.health.standby_command.is_empty();
        let elector = Elector::new(
            ElectorConfig {
                node_id: cfg.cluster.node_id.clone(),
                incarnation: me.incarnation.clone(),
                session_timeout: cfg.session_timeout(),
                rejoin_delay: cfg.election.rejoin_delay,
                demote_grace: cfg.demote_grace(),
                host: record::HostIdentity::of(&me),
                follow: cfg.service.mode == ServiceMode::Hooks && !cfg.service.follow.is_empty(),
                priority: cfg.election.priority,
                settle: true,
            },
            eligible_now && !standby_checked,
        );
        let (view, _) = tokio::sync::watch::channel(NodeView::new(
            MemberRecord {
                node: me.clone(),
                role: Role::Ineligible,
                health: Health::Unknown,
                session_timeout: None,
                containment: None,
                follow: None,
                priority: Some(cfg.election.priority),
                leftover: None,
                remembers: None,
                position: None,
                position_at: None,
                after: None,
                failed_takeovers: None,
                tries_in: None,
                tries_at: None,
            },
            false,
        ));
        let role_since = host.now();
        let mut d = Daemon {
            host,
            metrics: Metrics::new(),
            view,
            cfg,
            me,
            connector,
            elector,
            chain,
            own_chain,
            warden_only_chain,
            control_svc,
            tx,
            rx,
            session: None,
            next_gen: 1,
            join_ticket: 0,
            connecting: None,
            connect_attempt: 0,
            service: None,
            prepared: None,
            committed_cgroup: None,
            rewrites: None,
            held_back: None,
            stopping: None,
            epoch: None,
            role_since,
            published_epoch_seen: None,
            published_follow: None,
            published_leftover: None,
            published_remembers: None,
            published_after: None,
            published_settling: false,
            leftover_watch: None,
            probe_env,
            health: if eligible_now {
                Health::Healthy
            } else {
                Health::Unknown
            },
            positions: [None, None],
            tries_seen: Default::default(),
            eligibility: None,
            hooks_probe,
            standby_check: None,
            standby_ok: true,
            service_ok: eligible_now,
            service_probe,
            service_check: None,
            pin_watch: None,
            exit_code: None,
        };
        // The checkers below look at once: their first `standby_command` is told the
        // cluster, the node and its role too, not nothing (`tests/hooks.rs` saw a first
        // check with no WARDEN_* at all, 1 run in 5 under load).
        d.probe_env.set(d.standby_command_env());
        if !eligible_now {
            let said = d.own_check_said();
            d.eligibility =
                Some(d.checker(standby_probe, Duration::ZERO, Input::Eligibility, said));
        }
        if d.cfg.service.mode == ServiceMode::Hooks && !d.cfg.health.standby_command.is_empty() {
            let probe = d.host.standby_probe(&d.cfg.health, d.probe_env.clone());
            d.standby_ok = false;
            d.health = Health::Unknown;
            d.standby_check = Some(d.checker(
                probe,
                Duration::ZERO,
                Input::StandbyCheck,
                Said::StandbyCommand,
            ));
        }
        Ok(d)
    }

    /// What the HTTP face shows, as it changes.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<NodeView> {
        self.view.subscribe()
    }

    /// Runs until the election lets the daemon exit; returns the exit code. Each message
    /// on `stops` is a stop signal: the first hands over cleanly, the second exits at
    /// once. With `stops` closed, no more can come.
    pub async fn run(&mut self, mut stops: mpsc::UnboundedReceiver<()>) -> Result<i32, Fatal> {
        info!(
            node_id = %self.me.node_id,
            cluster = %self.cfg.cluster.name,
            incarnation = %self.me.incarnation,
            pid = self.me.pid,
            "warden starting"
        );
        let mut stop_signals = 0;
        let mut stops_open = true;
        self.drain(self.host.now());
        // SPEC §10: pinged from this loop, so a hung loop stops the pings.
        let mut watchdog = notify::watchdog_interval().map(|every| {
            let mut i = tokio::time::interval(every);
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            i
        });
        loop {
            if let Some(code) = self.exit_code {
                return Ok(code);
            }
            let deadline = self.elector.poll_timeout();
            let host = self.host.clone();
            let sleep = async {
                match deadline {
                    Some(t) => host.sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            let stop = async {
                if !stops_open {
                    return std::future::pending().await;
                }
                stops.recv().await
            };
            let ping = async {
                match watchdog.as_mut() {
                    Some(i) => {
                        i.tick().await;
                    }
                    None => std::future::pending().await,
                }
            };
            // Biased: the branches are polled in this order, not at random, so that a
            // simulation replays the same run from the same seed.
            tokio::select! {
                biased;
                _ = ping => {
                    notify::watchdog();
                    continue;
                }
                stop = stop => match stop {
                    Some(()) => stop_signals += 1,
                    None => {
                        stops_open = false;
                        continue;
                    }
                },
                input = self.rx.recv() => {
                    // The daemon holds a sender itself, so the channel never closes.
                    if let Some(input) = input {
                        self.on_input(input)?;
                    }
                    self.drain(self.host.now());
                    continue;
                }
                _ = sleep => {
                    let now = self.host.now();
                    self.elector.handle_timeout(now);
                    self.drain(now);
                    continue;
                }
            }
            // A stop signal.
            if stop_signals >= 2 {
                warn!("second stop signal: exiting at once");
                if let (Some(id), ServiceControl::Spawn(spawner)) =
                    (&self.service, &self.control_svc)
                {
                    spawner.kill(id);
                }
                return Ok(1);
            }
            info!("stop requested: handing over cleanly");
            notify::stopping();
            let now = self.host.now();
            self.elector.handle(Event::StopRequested, now);
            self.drain(now);
        }
    }

    fn feed(&mut self, event: Event) {
        if matches!(event, Event::Committed { .. }) {
            self.write_held_back();
        }
        let now = self.host.now();
        self.elector.handle(event, now);
        self.drain(now);
    }

    fn on_input(&mut self, input: DaemonInput<C, H>) -> Result<(), Fatal> {
        match input {
            Input::Elector(ev) => self.feed(ev),
            Input::Session(gen, mut ev) => {
                if let Event::AboveChanged {
                    own_position,
                    record,
                    ..
                } = &mut ev
                {
                    *own_position = self.standby_position();
                    if let Some(m) = record {
                        self.read_tries_at(m);
                    }
                }
                if let Event::Members { members } = &mut ev {
                    let before = std::mem::take(&mut self.tries_seen);
                    for m in members.iter_mut() {
                        if let Some(key) = tries_key(m) {
                            if let Some(at) = before.get(&key) {
                                self.tries_seen.insert(key, *at);
                            }
                        }
                        self.read_tries_at(m);
                    }
                }
                if self.session.as_ref().is_some_and(|s| s.gen == gen) {
                    if ev == Event::SessionLost {
                        warn!(
                            "the {} session expired or closed",
                            self.cfg.coordination.backend.display_name()
                        );
                        self.metrics.set_connected(false);
                        self.session = None;
                    }
                    let reconnected = ev == Event::Reconnected;
                    self.feed(ev);
                    if reconnected {
                        // The store may have restarted and forgotten our record, and with
                        // it our entry of the floor (SPEC §3a): written again.
                        self.publish_member();
                    }
                }
            }
            Input::LockDeleted(gen, ticket) => {
                if self.session.as_ref().is_some_and(|s| s.gen == gen) && ticket == self.join_ticket
                {
                    self.feed(Event::LockDeleted);
                }
            }
            Input::Connected(opened) => {
                let Opened {
                    session: zk,
                    control,
                    mut tasks,
                    mut events,
                } = *opened;
                self.connecting = None;
                let gen = self.next_gen;
                self.next_gen += 1;
                info!(session = %zk.id(), "connected to the coordination store");
                // The store's events go to the elector as events of this session.
                let tx = self.tx.clone();
                let host = self.host.clone();
                tasks.spawn(async move {
                    while let Some(event) = events.recv().await {
                        let input = match event {
                            StoreEvent::Control(control) => {
                                Input::Session(gen, control_event(&control, &host))
                            }
                            StoreEvent::HolderGone { join } => Input::LockDeleted(gen, join),
                            StoreEvent::Active(record) => {
                                Input::Session(gen, Event::ActiveChanged { record })
                            }
                            StoreEvent::Confirmed(record) => {
                                Input::Session(gen, Event::ActiveConfirmed { record })
                            }
                            StoreEvent::Rewritten(record) => {
                                Input::Session(gen, Event::ActiveRewritten { record })
                            }
                            StoreEvent::AboveChanged { id, record } => Input::Session(
                                gen,
                                Event::AboveChanged {
                                    id,
                                    record,
                                    own_position: None,
                                },
                            ),
                            StoreEvent::Reconnected => Input::Session(gen, Event::Reconnected),
                            StoreEvent::SessionLost => Input::Session(gen, Event::SessionLost),
                        };
                        if tx.send(input).is_err() {
                            return;
                        }
                    }
                });
                // SPEC §6 `priority`, §6b: who else could take a free lock, looked at once
                // a session timeout: at the highest priority too, positions and ties still
                // place one standby first (the review of stop 44). Every node, priority 0
                // too: an active names the best-placed standby as its successor when it
                // steps down by itself (§6b), and a priority-0 node can be named active.
                // And sooner when the elector asks (herd-free succession: the standby this
                // node watched is gone or no longer above it).
                let members_due = Arc::new(tokio::sync::Notify::new());
                {
                    let (zk2, tx2) = (zk.clone(), self.tx.clone());
                    let every = self.elector.session_timeout();
                    let due = members_due.clone();
                    tasks.spawn(async move {
                        loop {
                            if let Ok(Ok(members)) =
                                tokio::time::timeout(every, zk2.members()).await
                            {
                                let members: Vec<MemberRecord> =
                                    members.into_iter().filter_map(|(_, m)| m.ok()).collect();
                                let ev = Input::Session(gen, Event::Members { members });
                                if tx2.send(ev).is_err() {
                                    return;
                                }
                            }
                            tokio::select! {
                                _ = tokio::time::sleep(every) => {}
                                _ = due.notified() => {}
                            }
                        }
                    });
                }
                let member = spawn_member_writer(&mut tasks, zk.clone());
                let history = spawn_history_writer(&mut tasks, zk.clone());
                self.session = Some(SessionCtx {
                    zk: zk.clone(),
                    gen,
                    tasks,
                    member,
                    history,
                    crumb: Arc::default(),
                    members_due,
                    watched_above: None,
                });
                self.metrics.set_connected(true);
                // READY once registered in the election, whatever the role: a node kept
                // out by a pause or its health is up and must not be restarted by systemd.
                notify::ready();
                self.feed(Event::SessionStarted {
                    control: control_view(&control, &self.host),
                    granted: zk.granted_session_timeout(),
                });
                // The member record names the session timeout in force from now on, even
                // if no role change follows soon.
                self.publish_member();
            }
            Input::Started(ticket, result) => match result {
                Ok(None) => {
                    info!("the promote hook succeeded");
                    self.watch_pinned();
                    self.feed(Event::ServiceStarted { ticket });
                }
                Ok(Some(running)) => {
                    let id = running.identity();
                    self.service = Some(id.clone());
                    info!(pid = id.pid, pgid = id.pgid, "service started");
                    let tx = self.tx.clone();
                    tokio::spawn(async move {
                        let how = running.exited().await;
                        let _ = tx.send(Input::Exited(id, how));
                    });
                    self.start_service_check();
                    self.feed(Event::ServiceStarted { ticket });
                }
                Err((reason, ran)) => self.feed(Event::StartFailed {
                    ticket,
                    reason,
                    ran,
                }),
            },
            Input::Exited(id, how) => {
                if self.service.as_ref() == Some(&id) {
                    warn!(pid = id.pid, "the service exited: {how}");
                    self.feed(Event::ServiceExited { reason: how });
                }
            }
            Input::PinnedExited(pinned) => {
                let current = match &self.control_svc {
                    ServiceControl::Hooks(h) => h.pinned() == Some(pinned),
                    ServiceControl::Spawn(_) => false,
                };
                if current {
                    let how = format!(
                        "the service process pinned at promotion (pid {}) is gone",
                        pinned.pid
                    );
                    warn!(pid = pinned.pid, "{how}");
                    self.feed(Event::ServiceExited { reason: how });
                }
            }
            Input::Eligibility(c) => {
                let hooks = matches!(self.control_svc, ServiceControl::Hooks(_));
                if hooks {
                    self.service_ok = c.health == Health::Healthy;
                    self.health = self.hooks_health(c.health);
                    self.feed(Event::ServiceHealthChanged {
                        healthy: c.health != Health::Unhealthy,
                        detail: c.detail.clone(),
                    });
                } else if self.service.is_none() {
                    self.health = c.health;
                }
                self.feed(Event::EligibilityChanged {
                    eligible: c.health == Health::Healthy && (!hooks || self.standby_ok),
                    detail: c.detail,
                });
            }
            Input::StandbyCheck(c) => {
                self.standby_ok = c.health == Health::Healthy;
                let service = if self.service_ok {
                    Health::Healthy
                } else {
                    Health::Unknown
                };
                self.health = self.hooks_health(service);
                self.feed(Event::EligibilityChanged {
                    eligible: self.service_ok && self.standby_ok,
                    detail: format!("standby_command: {}", c.detail),
                });
            }
            Input::ServiceHealth(c) => {
                if self.service.is_some() {
                    self.health = c.health;
                }
                self.feed(Event::ServiceHealthChanged {
                    healthy: c.health != Health::Unhealthy,
                    detail: c.detail,
                });
            }
            Input::Position(said, p) => {
                let (before, standby_before) =
                    (self.position().map(|p| p.0), self.standby_position());
                self.positions[said as usize] = p.map(|p| (p, record::rfc3339(self.host.wall())));
                if self.position().map(|p| p.0) != before {
                    self.publish_member();
                }
                let position = self.standby_position();
                if position != standby_before {
                    self.feed(Event::OwnPosition { position });
                }
            }
            Input::Fatal(f) => return Err(f),
            Input::ConnectDied(attempt) => {
                if attempt == self.connect_attempt && self.session.is_none() {
                    self.connecting = None;
                    self.connect();
                }
            }
        }
        Ok(())
    }

    /// Hooks mode: a promoted service whose process is gone may be back in its demoted
    /// role by now (systemd restarts it, as the examples' units do, as a replica) while
    /// its checks pass again: its exit is the service's exit, as in spawn mode. Looked at
    /// every health interval, since nothing reports it.
    fn watch_pinned(&mut self) {
        if let Some(h) = self.pin_watch.take() {
            h.abort();
        }
        let ServiceControl::Hooks(hooks) = &self.control_svc else {
            return;
        };
        let Some(pinned) = hooks.pinned() else {
            return;
        };
        let (hooks, tx, every) = (hooks.clone(), self.tx.clone(), self.cfg.health.interval);
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if hooks.pinned() != Some(pinned) || tx.is_closed() {
                    return;
                }
                if hooks.pinned_running() == Some(false) {
                    let _ = tx.send(Input::PinnedExited(pinned));
                    return;
                }
            }
        });
        self.pin_watch = Some(task.abort_handle());
    }

    /// SPEC §6a.2, a called-off switchover: the demote may have restarted the service
    /// under another pid. The process pinned at promotion is gone, so the promote again
    /// would be refused and the breadcrumb would name nothing a fencer could find: pin
    /// the process the pidfile names now, which the breadcrumb rewrite that follows
    /// records before the promote hook runs.
    fn repin(&mut self) {
        let ServiceControl::Hooks(hooks) = &self.control_svc else {
            return;
        };
        if let Some((gone, now)) = hooks.repin() {
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

    fn start_service_check(&mut self) {
        if self.service_probe.is_none() {
            return;
        }
        let probe = self.service_probe.clone();
        self.service_check = Some(self.checker(
            probe,
            self.cfg.health.start_grace,
            Input::ServiceHealth,
            Said::HealthCommand,
        ));
    }

    /// Starts a health checker whose changes reach the loop as `wrap(change)`.
    fn checker(
        &self,
        probe: H::Probe,
        grace: Duration,
        wrap: fn(HealthChange) -> DaemonInput<C, H>,
        said: Said,
    ) -> CheckerHandle {
        let (htx, mut hrx) = mpsc::channel(8);
        let (ptx, mut prx) = mpsc::channel(8);
        let h = &self.cfg.health;
        let handle = health::spawn_checker(
            probe,
            h.interval,
            h.timeout,
            h.rise,
            h.fall,
            grace,
            htx,
            Some(self.metrics.clone()),
            Some(ptx),
        );
        let tx = self.tx.clone();
        tokio::spawn(async move {
            loop {
                let input = tokio::select! {
                    Some(c) = hrx.recv() => wrap(c),
                    Some(p) = prx.recv() => Input::Position(said, p),
                    else => break,
                };
                if tx.send(input).is_err() {
                    break;
                }
            }
        });
        handle
    }

    /// Hooks mode: the health a node reports, from its service's check and, where set,
    /// `standby_command`: healthy only when both pass.
    fn hooks_health(&self, service: Health) -> Health {
        match (service, self.standby_check.is_some(), self.standby_ok) {
            (Health::Healthy, true, false) => Health::Unhealthy,
            (h, _, _) => h,
        }
    }

    /// Hooks mode: health starts over after a demotion (a fresh checker, `unknown` until
    /// `rise` checks pass), so that a node never reports more than its checks know.
    fn recheck_after_demotion(&mut self) {
        let Some(probe) = self.hooks_probe.clone() else {
            return;
        };
        self.eligibility = None;
        self.service_ok = false;
        if self.health != Health::Unknown {
            self.health = Health::Unknown;
            // Within an action: the drain under way carries out what follows.
            let now = self.host.now();
            self.elector.handle(
                Event::EligibilityChanged {
                    eligible: false,
                    detail: "checking the service again after its demotion".into(),
                },
                now,
            );
        }
        let said = self.own_check_said();
        self.eligibility = Some(self.checker(probe, Duration::ZERO, Input::Eligibility, said));
    }

    /// Carries out every pending action.
    fn drain(&mut self, now: Instant) {
        while let Some(action) = self.elector.poll_action() {
            self.act(action, now);
        }
        // What this node has seen must reach the store before a wipe can forget it
        // (SPEC §3a); registration carries it into every new session.
        let seen = self.elector.epoch_seen();
        let follow = self.elector.follow_state();
        let leftover = self.elector.own_leftovers();
        let remembers = self.elector.remembered(false);
        let after = self.elector.placed_after().map(str::to_string);
        let settling = self.elector.settles_until(now).is_some();
        let changed = seen != self.published_epoch_seen
            || follow != self.published_follow
            || leftover != self.published_leftover
            || remembers != self.published_remembers;
        // (`after` and the end of the wait for a new session alone are not written past a
        // takeover's held-back record, `held_back`: that write, once the commit is
        // answered, carries them; the review of stop 45.)
        let placed = after != self.published_after || settling != self.published_settling;
        if changed || (placed && self.held_back.is_none()) {
            self.published_epoch_seen = seen;
            self.published_follow = follow;
            self.published_remembers = remembers;
            self.published_after = after;
            self.published_settling = settling;
            if leftover != self.published_leftover {
                self.published_leftover = leftover;
                self.watch_leftover();
            }
            self.publish_member();
        }
        // SPEC §6b herd-free succession: the lock, or the standby placed just above.
        if let Some(ctx) = self.session.as_mut() {
            let above = self.elector.watched_above(now).map(str::to_string);
            if above != ctx.watched_above {
                ctx.zk.watch_above(above.as_deref());
                ctx.watched_above = above;
            }
        }
        self.probe_env.set(self.standby_command_env());
        let serving = match self.control_svc {
            ServiceControl::Hooks(_) => self.elector.is_serving(),
            _ => self.service.is_some(),
        };
        self.view
            .send_replace(NodeView::new(self.member(), serving));
    }

    /// SPEC §6: what `standby_command` is told now: the cluster, the node, its role, the
    /// newest epoch it knows and the active it should follow.
    fn standby_command_env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("WARDEN_CLUSTER".to_string(), self.cfg.cluster.name.clone()),
            (
                "WARDEN_NODE_ID".to_string(),
                self.cfg.cluster.node_id.clone(),
            ),
            ("WARDEN_ROLE".to_string(), self.elector.role().to_string()),
        ];
        if let Some(epoch) = self.elector.epoch().or(self.elector.epoch_seen()) {
            env.push(("WARDEN_EPOCH".to_string(), epoch.to_string()));
        }
        if let Some(active) = self.elector.known_active() {
            env.extend(active_env(active));
        }
        env
    }

    /// Spawns a call in the current session; without a session the call cannot happen and
    /// its result is reported as `lost`.
    fn in_session<F, Fut>(&mut self, lost: Event, f: F)
    where
        F: FnOnce(C::Session) -> Fut,
        Fut: std::future::Future<Output = Event> + Send + 'static,
    {
        match &mut self.session {
            Some(ctx) => {
                let fut = f(ctx.zk.clone());
                let tx = self.tx.clone();
                let gen = ctx.gen;
                ctx.tasks.spawn(async move {
                    let ev = fut.await;
                    let _ = tx.send(Input::Session(gen, ev));
                });
            }
            None => {
                let _ = self.tx.send(Input::Elector(lost));
            }
        }
    }

    /// The session's [`SessionCtx::crumb`] (without a session, a fresh one: nothing
    /// runs then anyway).
    fn crumb_writer(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.session
            .as_ref()
            .map(|c| c.crumb.clone())
            .unwrap_or_default()
    }

    fn record(&self, epoch: Option<Epoch>) -> NodeRecord {
        let mut r = self.me.clone();
        r.epoch = epoch;
        if let Some(s) = &self.service {
            r.service_pid = Some(s.pid);
            r.service_pgid = Some(s.pgid);
            r.service_start_time = Some(s.start_time);
            r.service_cgroup = s.cgroup.clone();
        }
        if let ServiceControl::Hooks(h) = &self.control_svc {
            // The always-running service, from the pidfile; its group is its own business.
            if let Some(pinned) = h.pinned() {
                r.service_pid = Some(pinned.pid);
                r.service_start_time = Some(pinned.start_time);
            }
        }
        r
    }

    /// Our breadcrumb of `epoch`, naming the service that outlived its stop, as a rewrite
    /// later than any sent in that epoch ([`Action::RestoreOwnBreadcrumb`]).
    fn leftover_breadcrumb(&mut self, epoch: Epoch) -> NodeRecord {
        let mut r = self.leftover(epoch);
        r.rewrite = Some(self.next_rewrite(epoch));
        r
    }

    /// The member record's [`MemberRecord::leftover`]: the service that outlived its stop
    /// while the elector counts it as running, with no warden process to fence. Spawn
    /// mode only: there [`Daemon::watch_leftover`] takes it back once its processes are
    /// gone. In hooks mode the server runs on whatever its failed demote left, so that
    /// no end can be watched for, and every winner would kill it again (the review of
    /// stop 39); the breadcrumb, kept and written back, names it there.
    fn advertised_leftover(&self) -> Option<NodeRecord> {
        if !matches!(self.control_svc, ServiceControl::Spawn(_)) {
            return None;
        }
        let mut r = self.leftover(self.elector.own_leftovers()?);
        r.pid = 0;
        r.start_time = 0;
        r.epoch_seen = None;
        Some(r)
    }

    /// While our service outlived its stop (spawn mode), looks every second whether its
    /// processes are gone, and tells the elector when they are ([`Event::OwnServiceGone`]):
    /// the member record then stops naming it, so that winners stop fencing a service
    /// that is over (a fence of a member's leftover names no warden pid and is never
    /// verified by `signal` or ssh: the review of stop 39).
    fn watch_leftover(&mut self) {
        if let Some(h) = self.leftover_watch.take() {
            h.abort();
        }
        let (Some(_), ServiceControl::Spawn(spawner), Some(id)) = (
            self.elector.own_leftovers(),
            &self.control_svc,
            self.stopping.clone(),
        ) else {
            return;
        };
        let (tx, spawner) = (self.tx.clone(), spawner.clone());
        self.leftover_watch = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if spawner.gone(id.clone()).await {
                    let _ = tx.send(Input::Elector(Event::OwnServiceGone));
                }
            }
        }));
    }

    /// Our record of `epoch` naming the service that outlived its stop.
    fn leftover(&self, epoch: Epoch) -> NodeRecord {
        let mut r = self.record(Some(epoch));
        if matches!(self.control_svc, ServiceControl::Spawn(_)) {
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
        r
    }

    /// The number of the next breadcrumb rewrite within `epoch`: 1 for the first. Each
    /// send counts (a retry too), so a later write always carries a greater number.
    fn next_rewrite(&mut self, epoch: Epoch) -> u64 {
        let n = match self.rewrites {
            Some((e, n)) if e == epoch => n + 1,
            _ => 1,
        };
        self.rewrites = Some((epoch, n));
        n
    }

    fn member(&self) -> MemberRecord {
        let mut node = self.record(self.elector.epoch());
        node.epoch_seen = self.elector.epoch_seen();
        node.since = Some(record::rfc3339(
            self.host.wall() - self.host.now().saturating_duration_since(self.role_since),
        ));
        MemberRecord {
            node,
            role: self.elector.role(),
            health: self.health,
            session_timeout: Some(
                humantime::format_duration(round_ms(self.elector.session_timeout())).to_string(),
            ),
            containment: self.containment(),
            follow: self.elector.follow_state(),
            priority: Some(self.cfg.election.priority),
            leftover: self.advertised_leftover(),
            remembers: self.elector.remembered(false),
            position: self.position().map(|p| p.0),
            position_at: self.position().map(|p| p.1.clone()),
            after: self.elector.placed_after().map(str::to_string),
            failed_takeovers: Some(self.elector.failed_holds()).filter(|&n| n > 0),
            tries_in: self.tries_in(),
            tries_at: None,
        }
    }

    /// The eligibility checker's kind: in spawn mode it runs `standby_command`, in hooks
    /// mode the service's own check.
    fn own_check_said(&self) -> Said {
        match self.cfg.service.mode {
            ServiceMode::Hooks => Said::HealthCommand,
            _ => Said::StandbyCommand,
        }
    }

    /// SPEC §6b: the position this node publishes. The active's (and a promoting, demoting
    /// or neutral node's) from `health.command`; a standby's (and a fencing one's, not yet
    /// promoted) from `standby_command`, or from `health.command` where no
    /// `standby_command` is set (hooks mode, where the service's check runs on standbys
    /// too).
    fn position(&self) -> Option<&(u64, String)> {
        let serving = !matches!(
            self.elector.role(),
            Role::Standby | Role::Ineligible | Role::Fencing
        );
        self.position_of(serving)
    }

    /// SPEC §6b: the position this node has as a standby, whatever its role now.
    fn standby_position(&self) -> Option<u64> {
        self.position_of(false).map(|p| p.0)
    }

    fn position_of(&self, serving: bool) -> Option<&(u64, String)> {
        let said = if serving || self.cfg.health.standby_command.is_empty() {
            Said::HealthCommand
        } else {
            Said::StandbyCommand
        };
        self.positions[said as usize].as_ref()
    }

    fn transition(
        &mut self,
        from: Role,
        to: Role,
        epoch: Option<Epoch>,
        reason: Reason,
        now: Instant,
    ) {
        let took = now.duration_since(self.role_since);
        self.role_since = now;
        let took_ms = took.as_millis() as u64;
        // A planned switchover is the operator's wish, not trouble.
        let planned = matches!(
            reason,
            Reason::SwitchoverStepsUsDown
                | Reason::SwitchoverMovesAway
                | Reason::SwitchoverNamesAnother { .. }
        );
        // No promotion until an operator acts.
        let refused = matches!(
            reason,
            Reason::FenceFailed { .. } | Reason::EpochSeenBefore { .. } | Reason::StaleEpoch { .. }
        );
        match to {
            Role::Neutral | Role::Demoting if from == Role::Active && !planned => {
                warn!(%from, %to, epoch, %reason, took_ms, "transition")
            }
            _ if refused => error!(%from, %to, epoch, %reason, took_ms, "transition"),
            _ => info!(%from, %to, epoch, %reason, took_ms, "transition"),
        }
        let m = self.member();
        self.metrics.transition(from, to, now);
        self.metrics.set_epoch(epoch);

        notify::status(&notify::summary(&m));
        let entry = HistoryEntry {
            at: record::rfc3339(self.host.wall()),
            node_id: self.me.node_id.clone(),
            from: from.to_string(),
            to: to.to_string(),
            epoch,
            reason: reason.to_string(),
        };
        let significant = !matches!(
            (from, to),
            (Role::Ineligible, Role::Standby) | (Role::Standby, Role::Ineligible)
        );
        // What an earlier transition held back lands first, in order.
        self.write_held_back();
        if to == Role::Promoting {
            self.held_back = Some(significant.then_some(entry));
        } else {
            self.write_transition(m, significant.then_some(entry));
        }
    }

    /// Writes a transition's member record `m` and its history `entry`.
    fn write_transition(&mut self, m: MemberRecord, entry: Option<HistoryEntry>) {
        if let Some(ctx) = &mut self.session {
            ctx.member.send_replace(Some(m));
            if let Some(entry) = entry {
                // The writer ends only with the session, when this one is gone too.
                let _ = ctx.history.send(entry);
            }
        }
    }

    /// Writes what the transition to `promoting` held back, if anything: our member record
    /// as it is now, and that transition's history entry.
    fn write_held_back(&mut self) {
        if let Some(entry) = self.held_back.take() {
            let m = self.member();
            self.write_transition(m, entry);
        }
    }

    /// Writes our member record as it is now (a transition does this too).
    fn publish_member(&mut self) {
        let m = self.member();
        if let Some(ctx) = &mut self.session {
            ctx.member.send_replace(Some(m));
        }
    }

    /// Opens a new session in the background, retrying with back-off; registers our
    /// member record (SPEC §4.9) and starts the session's events before reporting it.
    fn connect(&mut self) {
        if let Some(h) = self.connecting.take() {
            h.abort();
        }
        let connector = self.connector.clone();
        let host = self.host.clone();
        let tx = self.tx.clone();
        let me = self.member_for_registration();
        // A store that was never initialized stops `warden run` at its start (exit 2); one
        // that lost its tables while we ran is waited out: `status` says it lost data, and
        // `warden init --force` brings the cluster back (SPEC §3a).
        let first_start = self.next_gen == 1;
        let session_timeout = self.elector.session_timeout();
        let h = tokio::spawn(async move {
            let mut backoff = CONNECT_BACKOFF_START;
            let mut waiting_logged = false;
            loop {
                match open(
                    &connector,
                    &host,
                    &me,
                    first_start,
                    session_timeout,
                    &mut waiting_logged,
                )
                .await
                {
                    Ok(opened) => {
                        let _ = tx.send(Input::Connected(Box::new(opened)));
                        return;
                    }
                    Err(RegisterError::Duplicate(message)) => {
                        let _ = tx.send(Input::Fatal(Fatal {
                            code: EXIT_USAGE,
                            message,
                        }));
                        return;
                    }
                    Err(RegisterError::Store(
                        StoreError::NotInitialized(message) | StoreError::Unsuitable(message),
                    )) if first_start => {
                        let _ = tx.send(Input::Fatal(Fatal {
                            code: EXIT_USAGE,
                            message,
                        }));
                        return;
                    }
                    Err(RegisterError::Store(e @ StoreError::Auth(_))) => {
                        let _ = tx.send(Input::Fatal(Fatal {
                            code: EXIT_UNREACHABLE,
                            message: e.to_string(),
                        }));
                        return;
                    }
                    Err(RegisterError::Store(e)) => {
                        // A store without its tables is waited for at a steady pace: once
                        // `init --force` makes them, this node must register (with what it
                        // has seen) before the init marker is written.
                        let most = match e {
                            StoreError::NotInitialized(_) => crate::elector::LOST_DATA_RETRY,
                            _ => CONNECT_BACKOFF_MAX,
                        };
                        backoff = backoff.min(most);
                        warn!("{e}; retrying in {}", humantime::format_duration(backoff));
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(CONNECT_BACKOFF_MAX);
                    }
                }
            }
        });
        self.connecting = Some(h.abort_handle());
        // SPEC 10a: a connect task that dies (a panic in a store's driver: mysql_async's
        // on a URL asking for TLS of a build without it) would leave `run` without a
        // session and silent until systemd restarted it. Noticed here, said, and tried
        // again after the longest back-off, since the same panic may well come again.
        self.connect_attempt += 1;
        let (attempt, tx) = (self.connect_attempt, self.tx.clone());
        tokio::spawn(async move {
            // An end with a result (sent) or by abort (a newer attempt, or the daemon's
            // end) needs nothing.
            let Err(e) = h.await else { return };
            if !e.is_panic() {
                return;
            }
            error!(
                "the task connecting to the coordination store died: {}; connecting again in \
                 {} (this is a bug in warden or its store driver: please report it with this \
                 line)",
                panic_text(e),
                humantime::format_duration(CONNECT_BACKOFF_MAX)
            );
            tokio::time::sleep(CONNECT_BACKOFF_MAX).await;
            let _ = tx.send(Input::ConnectDied(attempt));
        });
    }

    fn member_for_registration(&self) -> MemberRecord {
        let mut node = self.record(None);
        node.epoch_seen = self.elector.epoch_seen();
        MemberRecord {
            node,
            role: Role::Ineligible,
            health: self.health,
            session_timeout: None,
            containment: self.containment(),
            follow: None,
            priority: Some(self.cfg.election.priority),
            leftover: self.advertised_leftover(),
            remembers: self.elector.remembered(true),
            position: self.position().map(|p| p.0),
            position_at: self.position().map(|p| p.1.clone()),
            after: None,
            failed_takeovers: Some(self.elector.failed_holds()).filter(|&n| n > 0),
            tries_in: self.tries_in(),
            tries_at: None,
        }
    }

    /// SPEC §6b: when another member's [`MemberRecord::tries_in`] ends on this host's
    /// monotonic clock, from when this node first read that record's value (a record read
    /// again unchanged is not counted again).
    fn read_tries_at(&mut self, m: &mut MemberRecord) {
        let now = self.host.now();
        m.tries_at = m.tries_in.as_deref().and_then(|t| {
            let left = humantime::parse_duration(t).ok()?;
            let key = tries_key(m)?;
            Some(
                *self
                    .tries_seen
                    .entry(key)
                    .or_insert_with(|| now.checked_add(left).unwrap_or(now)),
            )
        });
    }

    /// SPEC §6b: how much of this node's wait for a new session is left, while it lasts
    /// ([`MemberRecord::tries_in`]).
    fn tries_in(&self) -> Option<String> {
        let now = self.host.now();
        let until = self.elector.settles_until(now)?;
        Some(humantime::format_duration(round_ms(until - now)).to_string())
    }

    /// How the spawned service is contained, for `status` (SPEC §6); `None` in hooks mode.
    fn containment(&self) -> Option<String> {
        match &self.control_svc {
            ServiceControl::Spawn(spawner) => Some(spawner.containment().to_string()),
            ServiceControl::Hooks(_) => None,
        }
    }
}

/// What a task's panic said, for the log.
fn panic_text(e: tokio::task::JoinError) -> String {
    let payload = e.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// `WARDEN_ACTIVE_NODE/HOST/PORT` for a hook that follows `active` (SPEC §6); host and
/// port only when its record names them.
fn active_env(active: &NodeRecord) -> Vec<(String, String)> {
    let mut env = vec![("WARDEN_ACTIVE_NODE".to_string(), active.node_id.clone())];
    if !active.host.is_empty() {
        env.push(("WARDEN_ACTIVE_HOST".to_string(), active.host.clone()));
    }
    if let Some(port) = active.port {
        env.push(("WARDEN_ACTIVE_PORT".to_string(), port.to_string()));
    }
    env
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}
