//! The driver: one task owns the [`Elector`], feeds it events from ZooKeeper, the service,
//! health checks, timers and signals, and carries out its actions.
//!
//! Slow actions (a fence, a service stop, a ZooKeeper write) run in their own tasks and
//! report back through one channel, so the elector is never blocked and the lease timer
//! fires even while a fence or a stop is still running. No election rule lives here:
//! where this file decides something, it is how to carry out an action, never whether.

use crate::api::NodeView;
use crate::config::Config;
use crate::coord::{self, Connector, RegisterError, Session, StoreError, StoreEvent};
use crate::elector::{
    Action, Elector, ElectorConfig, Event, FenceOrder, KeptBreadcrumb, Reason, Ticket, WriteOutcome,
};
use crate::host::{
    FenceChain, FenceContext, FenceMethod, FenceMethods, Host, ProbeEnv, SignalFence, SignalName,
    Target,
};
use crate::metrics::Metrics;
use crate::notify;
use crate::record::{self, Epoch, Health, HistoryEntry, MemberRecord, NodeRecord, Role};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tracing::{error, info, warn};

/// Back-off between attempts to reach ZooKeeper: starts here, doubles, caps below.
const CONNECT_BACKOFF_START: Duration = Duration::from_millis(250);
const CONNECT_BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Why the driver could not start, or stopped on its own: what happened, never an exit
/// code; where `run` is put together (`launch.rs`) each kind becomes one.
#[derive(Clone, Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configuration cannot be carried out on this host: the service's command, its
    /// pidfile, a health check's CA file.
    #[error("{0}")]
    Config(String),
    /// The store will not take this node as configured: another live warden has its node
    /// id, or the store was never initialized, or is not one warden can use.
    #[error("{0}")]
    Store(String),
    /// The store refused our credentials.
    #[error("{0}")]
    Auth(String),
}

mod act;
mod fence;
mod hooked;
mod role;
mod spawned;
mod store;
pub use hooked::{HookReport, Hooked};
use role::{active_env, round_ms, OWN_LEFTOVERS_TIMEOUT};
pub use role::{BoxFuture, Demotion, HookEnv, RoleCtx, Said, ServiceRole, Tell, Told};
pub use spawned::{SpawnReport, Spawned};
use store::*;

/// What reaches the loop.
enum Input<S, M> {
    /// A result or an event for the elector, valid whatever the session.
    Elector(Event),
    /// An event of session `gen`; dropped if that session is no longer current.
    Session(u64, Event),
    /// A lock watch of session `gen` for join `ticket` fired: the lock was deleted.
    LockDeleted(u64, Ticket),
    /// A new session is open and registered: the session, `control` as it was first
    /// read, the task that runs its events and the channel they arrive on.
    Connected(Box<Opened<S>>),
    /// A report of the service role's tasks.
    Role(M),
    /// A check told another data position (SPEC §6b; `None`: unknown now).
    Position(Said, Option<u64>),
    Fatal(DaemonError),
    /// The task of connect attempt `n` died (panicked) without a session or an error: a
    /// new attempt is due, if `n` is still the newest.
    ConnectDied(u64),
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

/// The driver of one warden process: generic over the store it is elected through, the
/// host it runs on and how the service's role is changed, so the simulation runs this very
/// code.
pub struct Daemon<C: Connector, H: Host, R: ServiceRole<H>> {
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
    /// The service, spawned or hooked.
    role: R,
    tx: mpsc::UnboundedSender<DaemonInput<C, H, R>>,
    rx: mpsc::UnboundedReceiver<DaemonInput<C, H, R>>,
    session: Option<SessionCtx<C::Session>>,
    next_gen: u64,
    /// The join whose lock watch counts.
    join_ticket: Ticket,
    connecting: Option<AbortHandle>,
    /// The number of the newest connect attempt (see [`Input::ConnectDied`]).
    connect_attempt: u64,
    /// The last breadcrumb rewrite within an epoch (§4.3d): the epoch and its number
    /// ([`NodeRecord::rewrite`]).
    rewrites: Option<(Epoch, u64)>,
    /// The writes of the transition to `promoting` (our member record, its history
    /// entry), held back until the promotion's commit is answered or the next transition:
    /// ZooKeeper answers a session's reads after its earlier writes, and the takeover's
    /// reads and commit waited for these (a disk sync each on a busy machine).
    held_back: Option<Option<HistoryEntry>>,
    epoch: Option<Epoch>,
    role_since: Instant,
    /// The `epoch_seen` in the member record last published.
    published_epoch_seen: Option<Epoch>,
    /// The `follow` state in the member record last published.
    published_follow: Option<String>,
    /// The leftover our member record names, as last published.
    published_leftover: Option<Epoch>,
    /// The active our member record says this node remembers
    /// ([`MemberRecord::remembers`], from `Elector::remembered`), as last published.
    published_remembers: Option<record::Remembered>,
    /// SPEC §6b: the standby placed just above this one, as last published.
    published_after: Option<String>,
    /// Whether the record last written carried [`MemberRecord::tries_in`]: the wait's end
    /// is written too, or a settled node would look settling to each new reader.
    published_settling: bool,
    /// What `standby_command` is told (SPEC §6), kept current by [`Self::drain`].
    probe_env: ProbeEnv,
    /// SPEC §6b: the data position the last passing check of each kind told, and when it
    /// was read (as RFC 3339); `None` while unknown. See [`Daemon::position`].
    positions: [Option<(u64, String)>; 2],
    /// SPEC §6b: when each member's [`MemberRecord::tries_in`] ends, by (node, incarnation,
    /// the value read), from when this node first read it ([`Daemon::read_tries_at`]).
    tries_seen: std::collections::HashMap<(String, String, String), Instant>,
    exit_code: Option<i32>,
}

/// What reaches the loop of a daemon on store `C`, host `H` and role `R`.
type DaemonInput<C, H, R> = Input<<C as Connector>::Session, <R as ServiceRole<H>>::Report>;

/// A [`Tell`] into the loop's channel.
struct LoopSink<S, M>(mpsc::UnboundedSender<Input<S, M>>);

impl<S: Send + 'static, M: Send + 'static> role::Sink<M> for LoopSink<S, M> {
    fn send(&self, told: Told<M>) -> bool {
        let input = match told {
            Told::Event(e) => Input::Elector(e),
            Told::Report(m) => Input::Role(m),
            Told::Position(said, p) => Input::Position(said, p),
        };
        self.0.send(input).is_ok()
    }

    fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

impl<C: Connector, H: Host, R: ServiceRole<H>> Daemon<C, H, R> {
    /// A daemon for `cfg`, this warden process being `me`; nothing runs until
    /// [`run`](Self::run).
    pub fn new(cfg: Config, me: NodeRecord, connector: C, host: H) -> Result<Self, DaemonError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let metrics = Metrics::new();
        let ctx = FenceContext {
            cluster: cfg.cluster.name.clone(),
            node_id: cfg.cluster.node_id.clone(),
            host: me.host.clone(),
            boot_id: me.boot_id.clone(),
            machine_id: me.machine_id.clone(),
            pid_ns: me.pid_ns.unwrap_or(0),
            pidfile: cfg.service.pidfile.clone(),
        };
        let chain = host.fence_chain(cfg.fence.clone(), ctx.clone());
        let own_signal = vec![FenceMethod::Signal(SignalFence {
            signal: SignalName(nix::sys::signal::Signal::SIGKILL),
            timeout: OWN_LEFTOVERS_TIMEOUT,
            nodes: None,
        })];
        let warden_only_chain = host.fence_chain(
            own_signal.clone(),
            FenceContext {
                pidfile: None,
                ..ctx.clone()
            },
        );
        let own_chain = host.fence_chain(own_signal, ctx);
        let probe_env = ProbeEnv::default();
        let role = R::new(
            &cfg,
            RoleCtx {
                host: host.clone(),
                tell: Tell::new(LoopSink(tx.clone())),
                metrics: metrics.clone(),
                health: cfg.health.clone(),
                probe_env: probe_env.clone(),
            },
        )?;
        let elector = Elector::new(
            ElectorConfig {
                node_id: cfg.cluster.node_id.clone(),
                incarnation: me.incarnation.clone(),
                session_timeout: cfg.session_timeout(),
                rejoin_delay: cfg.election.rejoin_delay,
                demote_grace: cfg.demote_grace(),
                host: record::HostIdentity::of(&me),
                follow: role.follows(),
                standby_check: role.standby_checked(),
                priority: cfg.election.priority,
                settle: true,
            },
            role.eligible_at_start(),
        );
        let (view, _) = tokio::sync::watch::channel(NodeView::new(
            MemberRecord {
                priority: Some(cfg.election.priority),
                ..MemberRecord::bare(me.clone(), Role::Ineligible, Health::Unknown)
            },
            false,
        ));
        let role_since = host.now();
        let mut d = Daemon {
            host,
            metrics,
            view,
            cfg,
            me,
            connector,
            elector,
            chain,
            own_chain,
            warden_only_chain,
            role,
            tx,
            rx,
            session: None,
            next_gen: 1,
            join_ticket: 0,
            connecting: None,
            connect_attempt: 0,
            rewrites: None,
            held_back: None,
            epoch: None,
            role_since,
            published_epoch_seen: None,
            published_follow: None,
            published_leftover: None,
            published_remembers: None,
            published_after: None,
            published_settling: false,
            probe_env,
            positions: [None, None],
            tries_seen: Default::default(),
            exit_code: None,
        };
        // The checkers below look at once: their first `standby_command` is told the
        // cluster, the node and its role too, not nothing (`tests/hooks.rs` saw a first
        // check with no WARDEN_* at all, 1 run in 5 under load).
        d.probe_env.set(d.standby_command_env());
        d.role.begin();
        Ok(d)
    }

    /// What the HTTP face shows, as it changes.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<NodeView> {
        self.view.subscribe()
    }

    /// Runs until the election lets the daemon exit; returns the exit code. Each message
    /// on `stops` is a stop signal: the first hands over cleanly, the second exits at
    /// once. With `stops` closed, no more can come.
    pub async fn run(
        &mut self,
        mut stops: mpsc::UnboundedReceiver<()>,
    ) -> Result<i32, DaemonError> {
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
                let unknown = self.elector.service_role_unknown(self.host.now());
                self.role.kill_at_exit(unknown);
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
        let now = self.host.now();
        self.elector.handle(event, now);
        self.drain(now);
    }

    fn on_input(&mut self, input: DaemonInput<C, H, R>) -> Result<(), DaemonError> {
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
            Input::Role(report) => {
                for event in self.role.on_report(report) {
                    self.feed(event);
                }
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
            Input::Fatal(f) => {
                // A refused reconnect ends warden too: a forced stop under way is not heard
                // of again (the review of issue 34).
                if self.elector.service_role_unknown(self.host.now()) {
                    self.role.kill_at_exit(true);
                }
                return Err(f);
            }
            Input::ConnectDied(attempt) => {
                if attempt == self.connect_attempt && self.session.is_none() {
                    self.connecting = None;
                    self.connect();
                }
            }
        }
        Ok(())
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
                self.role.watch_leftover(leftover.is_some());
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
        let serving = self.role.serving(self.elector.is_serving());
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
        self.role.name_running(&mut r);
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
    /// while the elector counts it as running, with no warden process to fence, where the
    /// role names it there ([`ServiceRole::advertises_leftover`]).
    fn advertised_leftover(&self) -> Option<NodeRecord> {
        if !self.role.advertises_leftover() {
            return None;
        }
        let mut r = self.leftover(self.elector.own_leftovers()?);
        r.pid = 0;
        r.start_time = 0;
        r.epoch_seen = None;
        Some(r)
    }

    /// Our record of `epoch` naming the service that outlived its stop.
    fn leftover(&self, epoch: Epoch) -> NodeRecord {
        let mut r = self.record(Some(epoch));
        self.role.name_leftover(&mut r);
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
            health: self.role.health(),
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

    /// Logs, counts, notifies and writes [`Action::Transition`] `transition`.
    fn transition(&mut self, transition: Action, now: Instant) {
        let Action::Transition {
            from,
            to,
            epoch,
            reason,
            history,
            held,
        } = transition
        else {
            return;
        };
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
        // What an earlier transition held back lands first, in order.
        self.write_held_back();
        if held {
            self.held_back = Some(history.then_some(entry));
        } else {
            self.write_transition(m, history.then_some(entry));
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
                        let _ = tx.send(Input::Fatal(DaemonError::Store(message)));
                        return;
                    }
                    Err(RegisterError::Store(
                        StoreError::NotInitialized(message) | StoreError::Unsuitable(message),
                    )) if first_start => {
                        let _ = tx.send(Input::Fatal(DaemonError::Store(message)));
                        return;
                    }
                    Err(RegisterError::Store(e @ StoreError::Auth(_))) => {
                        let _ = tx.send(Input::Fatal(DaemonError::Auth(e.to_string())));
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
            health: self.role.health(),
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

    /// How the service is contained, for `status` (SPEC §6).
    fn containment(&self) -> Option<String> {
        self.role.containment()
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
