//! One warden process: a real [`Elector`] and a model of `daemon.rs` around it.
//!
//! The driver carries out actions the way `daemon.rs` does: store calls and fences run as
//! tasks of the current session (aborted with it, their results dropped when the session
//! changed), a join leaves a watch on `lock` behind, `Release` takes the session away,
//! deletes the lock if it is ours and then closes the session, a stop of a service that is
//! not running answers "stopped" at once, a stop of one that is stops every process its
//! cgroup (or, without one, its process group) holds and is clean only once none is left,
//! `KillService` SIGKILLs the stopping and the running service the same way, the main
//! process's exit is reported as `ServiceExited` whatever still runs of the service,
//! `RecordService` writes the running service's identity into the breadcrumb. Each store
//! call is a sequence of requests as in `coord/zookeeper.rs`, each bounded by the
//! operation timeout (from the session timeout in force).

use super::plan::{between, ms, SimConfig, Time};
use super::store::{Crumb, Fail, Inc, Note, Req, Resp, SvcRec};
use super::world::{incarnation, name, FenceStep, IdMap, Victim, World, KILL_WAIT, POLL};
use std::time::Duration;
use warden::elector::{
    Action, BreadcrumbView, ClusterState, ControlView, Elector, ElectorConfig, Event, FenceOrder,
    JoinOutcome, Ticket, WriteOutcome, RETRY_DELAY,
};
use warden::record::{Epoch, HostIdentity, Role, Version};

/// `daemon.rs`: connect back-off and the wait for a killed predecessor's session.
const CONNECT_BACKOFF_START: Duration = Duration::from_millis(250);
const CONNECT_BACKOFF_MAX: Duration = Duration::from_secs(10);
const PREDECESSOR_POLL: Duration = Duration::from_millis(250);
/// `coord/zookeeper.rs`: version-checked writes of `history` give up after this many races.
const CAS_ATTEMPTS: u8 = 5;
/// Chance that exec of the service fails.
const EXEC_FAILS: f64 = 0.02;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Running,
    /// SIGSTOP: nothing is processed, no timer fires; its service keeps running.
    Frozen,
    /// Killed (kill -9, or fenced).
    Dead,
    /// Exited by itself (after a stop).
    Exited,
}

/// Inputs of the daemon's loop (its channel), as `daemon.rs` `Input`.
#[derive(Clone, Debug)]
pub enum Input {
    Elector(Event),
    Session(u64, Event),
    LockDeleted(u64, Ticket),
    Connected(u64),
    Started(Ticket, Result<u64, String>),
    Exited(u64),
    Unhealthy,
    Stop,
}

pub enum ProcEv {
    Input(Input),
    Wake { task: u64 },
    Reply { sid: u64, req_id: u64, resp: Resp },
    Timeout { req_id: u64 },
    Note { sid: u64, note: Note },
    Ping { sid: u64 },
}

enum TaskIn {
    Wake,
    Reply(Resp),
    Watch { deleted: bool },
}

#[derive(Clone, Copy, Debug)]
enum JoinSt {
    Create,
    Stat,
    Watch,
    WatchRetry,
    Armed,
}

#[derive(Clone, Copy, Debug)]
enum RegSt {
    Connect,
    GetMember,
    CreateMember,
    DeleteMember,
    Control,
    ControlRetry,
}

#[derive(Clone, Copy, Debug)]
enum StopSt {
    Begin,
    Term,
    Kill,
}

enum Kind {
    Join {
        ticket: Ticket,
        st: JoinSt,
    },
    ReadState {
        ticket: Ticket,
        st: u8,
        crumb: Option<Crumb>,
        control_version: i32,
    },
    /// A lease-granting write (the promotion commit or a renewal, sent with the time the
    /// elector ordered it): `req` until it is out, then its outcome goes back as `done`.
    Write {
        ticket: Ticket,
        req: Option<Req>,
        done: fn(Ticket, WriteOutcome) -> Event,
    },
    RecordService {
        ticket: Ticket,
        epoch: Epoch,
        /// The running service's identity when the action was carried out.
        svc: Option<SvcRec>,
        st: u8,
    },
    DeleteCrumb {
        ticket: Ticket,
        epoch: Epoch,
        st: u8,
    },
    Release {
        ticket: Ticket,
        st: u8,
    },
    History {
        epoch: Option<Epoch>,
        to_active: bool,
        significant: bool,
        st: u8,
        attempts: u8,
    },
    Register {
        st: RegSt,
        backoff: Duration,
    },
    Fence {
        ticket: Ticket,
        /// Boxed: a record is large, and tasks are many.
        order: Box<FenceOrder>,
        fault: Option<bool>,
        /// What the acting method signalled, until when it waits, and which method.
        waiting: Option<(Vec<Victim>, Time, String)>,
    },
    Start {
        ticket: Ticket,
        epoch: Epoch,
        valid_until: Time,
        spawning: bool,
    },
    Stop {
        ticket: Ticket,
        svc: u64,
        st: StopSt,
        deadline: Time,
    },
}

pub struct Task {
    /// The session generation whose task set holds it; `None`: a free task.
    gen: Option<u64>,
    /// The client it talks through (0: none).
    sid: u64,
    kind: Kind,
}

pub struct Proc {
    pub node: usize,
    pub inc: u32,
    pub incarnation: String,
    pub elector: Elector,
    pub status: Status,
    pub deferred: Vec<ProcEv>,
    pub resumed_at: Option<Time>,
    /// `elector.poll_timeout()` as virtual time, refreshed after every input.
    pub timer: Option<Time>,
    pub restart_after_exit: Option<Duration>,
    // daemon.rs state
    session: Option<(u64, u64)>,
    next_gen: u64,
    join_ticket: Ticket,
    lock_watch: Option<u64>,
    connecting: Option<u64>,
    pub service: Option<u64>,
    pub stopping: Option<u64>,
    pub tasks: IdMap<Task>,
    pending: IdMap<u64>,
    /// For invariant 3: the lease as the store granted it, from the send times of the
    /// lease-granting writes it applied.
    pub lease_end: Option<Time>,
    /// When the elector last ordered a promotion commit.
    last_commit: Option<Time>,
    /// The cgroup prepared for the next start (`Spawner::prepare`), by epoch, recorded in
    /// the commit; and whether a start used it already.
    prepared: Option<(Epoch, u64, bool)>,
}

impl Proc {
    /// Incarnation `inc` of `node`, on the machine, boot and pid namespace of `host`.
    pub fn new(cfg: &SimConfig, node: usize, inc: u32, host: HostIdentity) -> Proc {
        let incarnation = incarnation((node, inc));
        let elector = Elector::new(
            ElectorConfig {
                node_id: node_id(node),
                incarnation: incarnation.clone(),
                session_timeout: cfg.session_timeout,
                rejoin_delay: cfg.rejoin_delay,
                demote_grace: cfg.stop_timeout,
                host,
            },
            true,
        );
        Proc {
            node,
            inc,
            incarnation,
            elector,
            status: Status::Running,
            deferred: Vec::new(),
            resumed_at: None,
            timer: None,
            restart_after_exit: None,
            session: None,
            next_gen: 1,
            join_ticket: 0,
            lock_watch: None,
            connecting: None,
            service: None,
            stopping: None,
            tasks: IdMap::default(),
            pending: IdMap::default(),
            lease_end: None,
            last_commit: None,
            prepared: None,
        }
    }
}

pub fn node_id(node: usize) -> String {
    format!("n{}", node + 1)
}

impl World {
    fn me(&self, node: usize) -> Inc {
        (node, self.procs[node].inc)
    }

    /// Something for this process's own channel, processed after the current input.
    fn input(&mut self, node: usize, input: Input) {
        let (now, me) = (self.now, self.me(node));
        self.push_proc(now, me, ProcEv::Input(input));
    }

    pub fn proc_event(&mut self, node: usize, pe: ProcEv) {
        match pe {
            ProcEv::Input(i) => self.on_input(node, i),
            ProcEv::Wake { task } => self.run_task(node, task, TaskIn::Wake),
            ProcEv::Reply { sid, req_id, resp } => {
                if resp == Resp::Err(Fail::Expired) {
                    self.client_expired(node, sid);
                }
                if let Some(task) = self.procs[node].pending.remove(&req_id) {
                    self.run_task(node, task, TaskIn::Reply(resp));
                }
            }
            ProcEv::Timeout { req_id } => {
                if let Some(task) = self.procs[node].pending.remove(&req_id) {
                    self.run_task(node, task, TaskIn::Reply(Resp::Err(Fail::Unknown)));
                }
            }
            ProcEv::Note { sid, note } => match note {
                Note::Expired => self.client_expired(node, sid),
                Note::LockWatch { task, deleted } => {
                    self.run_task(node, task, TaskIn::Watch { deleted })
                }
            },
            ProcEv::Ping { sid } => {
                let Some(c) = self.conns.get(&sid) else {
                    return;
                };
                if c.closed || c.expired {
                    return;
                }
                self.send(sid, 0, Req::Ping);
                let at = self.now + self.plan.cfg.ping_interval();
                let me = self.me(node);
                self.push_proc(at, me, ProcEv::Ping { sid });
            }
        }
    }

    /// The client learned that its session is gone; the state watcher of the current
    /// session reports it.
    fn client_expired(&mut self, node: usize, sid: u64) {
        let Some(c) = self.conns.get_mut(&sid) else {
            return;
        };
        if c.expired {
            return;
        }
        c.expired = true;
        if let Some((s, gen)) = self.procs[node].session {
            if s == sid {
                self.input(node, Input::Session(gen, Event::SessionLost));
            }
        }
    }

    fn on_input(&mut self, node: usize, input: Input) {
        match input {
            Input::Elector(ev) => self.feed(node, ev),
            Input::Session(gen, ev) => {
                if self.procs[node].session.is_some_and(|(_, g)| g == gen) {
                    if ev == Event::SessionLost {
                        self.drop_session(node, false);
                    }
                    self.feed(node, ev);
                }
            }
            Input::LockDeleted(gen, ticket) => {
                let p = &self.procs[node];
                if p.session.is_some_and(|(_, g)| g == gen) && ticket == p.join_ticket {
                    self.feed(node, Event::LockDeleted);
                }
            }
            Input::Connected(sid) => {
                let p = &mut self.procs[node];
                p.connecting = None;
                let gen = p.next_gen;
                p.next_gen += 1;
                p.session = Some((sid, gen));
                // The state watcher starts from the client's current state.
                if self.conns.get(&sid).is_some_and(|c| c.expired) {
                    self.input(node, Input::Session(gen, Event::SessionLost));
                }
                // `coord/zookeeper.rs` reports the timeout the server granted.
                let granted = Some(self.plan.cfg.granted);
                self.feed(
                    node,
                    Event::SessionStarted {
                        control: ControlView::default(),
                        granted,
                    },
                );
            }
            Input::Started(ticket, Ok(svc)) => {
                self.procs[node].service = Some(svc);
                self.feed(node, Event::ServiceStarted { ticket });
            }
            Input::Started(ticket, Err(reason)) => {
                self.feed(node, Event::StartFailed { ticket, reason });
            }
            Input::Exited(svc) => {
                if self.procs[node].service == Some(svc) {
                    self.feed(
                        node,
                        Event::ServiceExited {
                            reason: "exit status 1".into(),
                        },
                    );
                }
            }
            Input::Unhealthy => {
                // The health checker runs only while the service does.
                if self.procs[node].service.is_some() {
                    self.feed(
                        node,
                        Event::ServiceHealthChanged {
                            healthy: false,
                            detail: "tcp: connection refused".into(),
                        },
                    );
                }
            }
            Input::Stop => self.feed(node, Event::StopRequested),
        }
    }

    /// The session context is dropped: its tasks are aborted; `close` drops the last
    /// client too, which closes the session.
    fn drop_session(&mut self, node: usize, close: bool) {
        let Some((sid, gen)) = self.procs[node].session.take() else {
            return;
        };
        let p = &mut self.procs[node];
        p.tasks.retain(|_, t| t.gen != Some(gen));
        p.lock_watch = None;
        if close {
            self.close_conn(sid);
        } else if let Some(c) = self.conns.get_mut(&sid) {
            c.closed = true;
        }
    }

    /// Invariant 3's lease (see `Proc::lease_end`).
    pub fn grant_lease(&mut self, who: Inc, sent: Time) {
        let end = sent + self.plan.cfg.lease();
        let p = &mut self.procs[who.0];
        if p.inc == who.1 {
            p.lease_end = Some(p.lease_end.map_or(end, |e| e.max(end)));
        }
    }

    fn track_lease(&mut self, node: usize, ev: &Event) {
        let p = &self.procs[node];
        // The one lease the elector takes without an acknowledgement: a commit whose outcome
        // was unknown, confirmed by reading our breadcrumb back, counts from its send time
        // (one of our commits was applied, and the read shows the session alive since).
        let sent = match ev {
            Event::StateRead {
                result: Ok(state), ..
            } => match &state.breadcrumb {
                BreadcrumbView::Record { record, .. }
                    if record.incarnation == p.incarnation
                        && record.epoch.is_some()
                        && record.epoch == p.elector.epoch() =>
                {
                    p.last_commit
                }
                _ => None,
            },
            _ => None,
        };
        if let Some(sent) = sent {
            let who = self.me(node);
            self.grant_lease(who, sent);
        }
    }

    pub fn feed(&mut self, node: usize, ev: Event) {
        self.track_lease(node, &ev);
        if self.tracing() {
            let line = format!("{} <- {}", name(self.me(node)), short_event(&ev));
            self.log(|| line);
        }
        let now = self.instant();
        self.procs[node].elector.handle(ev, now);
        self.drain(node);
    }

    pub fn drain(&mut self, node: usize) {
        while let Some(a) = self.procs[node].elector.poll_action() {
            if self.tracing() && !matches!(a, Action::Transition { .. }) {
                let line = match &a {
                    // Instants print as virtual time, so that traces compare across runs.
                    Action::StartService {
                        ticket,
                        epoch,
                        lease_valid_until,
                    } => format!(
                        "StartService {{ ticket: {ticket}, epoch: {epoch}, lease_valid_until: \
                         {:.4} }}",
                        self.offset(*lease_valid_until).as_secs_f64()
                    ),
                    other => format!("{other:?}"),
                };
                let line = format!("{} -> {line}", name(self.me(node)));
                self.log(|| line);
            }
            self.act(node, a);
        }
        let t = self.procs[node].elector.poll_timeout();
        self.procs[node].timer = t.map(|i| self.offset(i));
    }

    fn spawn(
        &mut self,
        node: usize,
        gen: Option<u64>,
        sid: u64,
        kind: Kind,
        delay: Duration,
    ) -> u64 {
        let id = self.id();
        let p = &mut self.procs[node];
        p.tasks.insert(id, Task { gen, sid, kind });
        let at = self.now + delay;
        self.wake_at(node, id, at);
        id
    }

    /// A store call in the current session, or its "no session" result at once.
    fn in_session(&mut self, node: usize, lost: Event, kind: Kind) {
        if !self.spawn_in_session(node, kind) {
            self.input(node, Input::Elector(lost));
        }
    }

    /// Spawns `kind` in the current session; returns whether there is one.
    fn spawn_in_session(&mut self, node: usize, kind: Kind) -> bool {
        let Some((sid, gen)) = self.procs[node].session else {
            return false;
        };
        let d = self.task_delay();
        self.spawn(node, Some(gen), sid, kind, d);
        true
    }

    /// A lease-granting write in the session; without one, its outcome is unknown at once.
    fn write(
        &mut self,
        node: usize,
        ticket: Ticket,
        req: Req,
        done: fn(Ticket, WriteOutcome) -> Event,
    ) {
        let lost = done(ticket, WriteOutcome::Unknown);
        let kind = Kind::Write {
            ticket,
            req: Some(req),
            done,
        };
        self.in_session(node, lost, kind);
    }

    fn act(&mut self, node: usize, action: Action) {
        let now = self.now;
        match action {
            Action::Connect => self.connect(node),
            Action::Join { ticket } => {
                let p = &mut self.procs[node];
                p.join_ticket = ticket;
                match p.session {
                    Some((sid, gen)) => {
                        if let Some(w) = p.lock_watch.take() {
                            p.tasks.remove(&w);
                        }
                        let d = self.task_delay();
                        let kind = Kind::Join {
                            ticket,
                            st: JoinSt::Create,
                        };
                        let t = self.spawn(node, Some(gen), sid, kind, d);
                        self.procs[node].lock_watch = Some(t);
                    }
                    None => self.input(
                        node,
                        Input::Elector(Event::Joined {
                            ticket,
                            outcome: JoinOutcome::Unknown,
                        }),
                    ),
                }
            }
            Action::ReadState { ticket } => self.in_session(
                node,
                Event::StateRead {
                    ticket,
                    result: Err("no session".into()),
                },
                Kind::ReadState {
                    ticket,
                    st: 0,
                    crumb: None,
                    control_version: 0,
                },
            ),
            Action::Fence { ticket, order } => {
                // A task of the current session: a fence the elector abandons (its session
                // was lost) is aborted with it and never acts after a later election.
                let Some((sid, gen)) = self.procs[node].session else {
                    self.input(
                        node,
                        Input::Elector(Event::FenceDone {
                            ticket,
                            fenced: false,
                            summary: "no coordination session to fence under".into(),
                        }),
                    );
                    return;
                };
                let local = matches!(
                    order,
                    FenceOrder::OwnLeftovers(_) | FenceOrder::OwnService(_)
                );
                let fault = if local { None } else { self.fence_fault() };
                let d = match fault {
                    Some(true) => self.plan.cfg.fence_timeout,
                    Some(false) => between(&mut self.rng, ms(1), ms(50)),
                    None if local => between(&mut self.rng, ms(1), ms(30)),
                    None => between(&mut self.rng, ms(5), ms(300)),
                };
                let kind = Kind::Fence {
                    ticket,
                    order: Box::new(order),
                    fault,
                    waiting: None,
                };
                self.spawn(node, Some(gen), sid, kind, d);
            }
            Action::CommitPromotion {
                ticket,
                epoch,
                breadcrumb_version,
                control_version,
            } => {
                self.procs[node].last_commit = Some(now);
                // Spawn mode: no process of the service to name yet, but the cgroup it will
                // start in (`Spawner::prepare`), so that a fence can find it from the start.
                let svc = self.plan.layout.nodes[node].cgroup.then(|| SvcRec {
                    pid: None,
                    cgroup: Some(self.prepare_cgroup(node, epoch)),
                });
                let req = Req::Commit {
                    epoch,
                    crumb_version: breadcrumb_version.map(|v| v.get() as i32),
                    control_version: control_version.get() as i32,
                    sent: now,
                    svc,
                };
                self.write(node, ticket, req, |ticket, outcome| Event::Committed {
                    ticket,
                    outcome,
                });
            }
            Action::StartService {
                ticket,
                epoch,
                lease_valid_until,
            } => {
                let valid_until = self.offset(lease_valid_until);
                let d = self.task_delay();
                self.spawn(
                    node,
                    None,
                    0,
                    Kind::Start {
                        ticket,
                        epoch,
                        valid_until,
                        spawning: false,
                    },
                    d,
                );
            }
            Action::RecordService { ticket, epoch } => {
                // `daemon.rs` builds the record now, from the service it knows of.
                let svc = self.procs[node].service.map(|id| SvcRec {
                    pid: Some(id),
                    cgroup: self.cgroup_of(id),
                });
                let kind = Kind::RecordService {
                    ticket,
                    epoch,
                    svc,
                    st: 0,
                };
                let lost = Event::ServiceRecorded {
                    ticket,
                    outcome: WriteOutcome::Unknown,
                };
                self.in_session(node, lost, kind);
            }
            Action::Renew { ticket } => {
                let req = Req::Renew { sent: now };
                self.write(node, ticket, req, |ticket, outcome| Event::Renewed {
                    ticket,
                    outcome,
                });
            }
            Action::StopService { ticket, .. } => {
                match self.procs[node].service {
                    None => self.input(
                        node,
                        Input::Elector(Event::ServiceStopped {
                            ticket,
                            clean: true,
                            detail: "not running".into(),
                        }),
                    ),
                    Some(svc) => self.stop(node, ticket, svc),
                }
                let p = &mut self.procs[node];
                if let Some(s) = p.service.take() {
                    p.stopping = Some(s);
                }
            }
            Action::KillService => {
                // `service::kill`: `cgroup.kill` of its cgroup, or SIGKILL to its group.
                let p = &self.procs[node];
                for svc in [p.stopping, p.service].into_iter().flatten() {
                    let reach = self.reach_of(svc);
                    self.sigkill(svc, reach);
                }
            }
            Action::DeleteOwnBreadcrumb { ticket, epoch } => self.in_session(
                node,
                Event::BreadcrumbDeleted { ticket },
                Kind::DeleteCrumb {
                    ticket,
                    epoch,
                    st: 0,
                },
            ),
            Action::Release { ticket } => match self.procs[node].session {
                Some((sid, gen)) => {
                    // The context goes (its tasks with it); the release task keeps the client
                    // until the lock is deleted, then drops it, which closes the session.
                    let p = &mut self.procs[node];
                    p.session = None;
                    p.tasks.retain(|_, t| t.gen != Some(gen));
                    p.lock_watch = None;
                    let d = self.task_delay();
                    self.spawn(node, None, sid, Kind::Release { ticket, st: 0 }, d);
                }
                None => self.input(node, Input::Elector(Event::Released { ticket })),
            },
            Action::ClearFailover { .. } => {}
            Action::Transition {
                from,
                to,
                epoch,
                reason,
            } => {
                if self.tracing() {
                    let line = format!(
                        "{} {from} -> {to} (epoch {epoch:?}): {reason}",
                        name(self.me(node))
                    );
                    self.log(|| line);
                }
                // (6) The store here never goes back in time, so a refusal to promote for
                // a stale epoch is always spurious.
                if reason.starts_with("refusing to promote") {
                    let who = self.me(node);
                    self.fail(format!(
                        "{} refused to promote spuriously: {reason}",
                        name(who)
                    ));
                }
                let significant = !matches!(
                    (from, to),
                    (Role::Ineligible, Role::Standby) | (Role::Standby, Role::Ineligible)
                );
                let kind = Kind::History {
                    epoch,
                    to_active: to == Role::Active,
                    significant,
                    st: 0,
                    attempts: 0,
                };
                self.spawn_in_session(node, kind);
            }
            Action::Notice { message, .. } => {
                if self.tracing() {
                    let line = format!("{} notice: {message}", name(self.me(node)));
                    self.log(|| line);
                }
            }
            Action::Exit { code } => {
                let who = self.me(node);
                self.log(|| format!("{} exits with {code}", name(who)));
                self.drop_session(node, true);
                if let Some(t) = self.procs[node].connecting.take() {
                    self.abort_register(node, t);
                }
                self.exited(node);
            }
        }
    }

    /// `Spawner::prepare`: the cgroup of the next start under `epoch`.
    fn prepare_cgroup(&mut self, node: usize, epoch: Epoch) -> u64 {
        match self.procs[node].prepared {
            Some((e, cg, _)) if e == epoch => cg,
            _ => {
                let cg = self.id();
                self.procs[node].prepared = Some((epoch, cg, false));
                cg
            }
        }
    }

    /// The cgroup a start runs in: the one prepared for its epoch (and recorded in the
    /// commit), or, with `fresh_cgroup_per_start`, a new one after the first start.
    fn start_cgroup(&mut self, node: usize, epoch: Epoch) -> Option<u64> {
        if !self.plan.layout.nodes[node].cgroup {
            return None;
        }
        let cg = self.prepare_cgroup(node, epoch);
        let fresh = self.plan.layout.fresh_cgroup_per_start;
        let p = &mut self.procs[node];
        let used = p.prepared.is_some_and(|(_, _, used)| used);
        p.prepared = Some((epoch, cg, true));
        if fresh && used {
            return Some(self.id());
        }
        Some(cg)
    }

    /// `service::stop` in a task of its own: stop signal, `stop_timeout`, SIGKILL.
    fn stop(&mut self, node: usize, ticket: Ticket, svc: u64) {
        let d = self.task_delay();
        self.spawn(
            node,
            None,
            0,
            Kind::Stop {
                ticket,
                svc,
                st: StopSt::Begin,
                deadline: Duration::ZERO,
            },
            d,
        );
    }

    fn abort_register(&mut self, node: usize, task: u64) {
        if let Some(t) = self.procs[node].tasks.remove(&task) {
            if t.sid != 0 {
                self.close_conn(t.sid);
            }
        }
    }

    fn connect(&mut self, node: usize) {
        if let Some(t) = self.procs[node].connecting.take() {
            self.abort_register(node, t);
        }
        let d = self.task_delay();
        let t = self.spawn(
            node,
            None,
            0,
            Kind::Register {
                st: RegSt::Connect,
                backoff: CONNECT_BACKOFF_START,
            },
            d,
        );
        self.procs[node].connecting = Some(t);
    }

    /// Sends a request for `task` and arms its operation timeout.
    fn request(&mut self, node: usize, task: u64, sid: u64, req: Req, timeout: Duration) {
        let req_id = self.id();
        let p = &mut self.procs[node];
        p.pending.insert(req_id, task);
        self.send(sid, req_id, req);
        let (at, me) = (self.now + timeout, self.me(node));
        self.push_proc(at, me, ProcEv::Timeout { req_id });
    }

    fn wake_at(&mut self, node: usize, task: u64, at: Time) {
        let me = self.me(node);
        self.push_proc(at, me, ProcEv::Wake { task });
    }

    fn run_task(&mut self, node: usize, id: u64, input: TaskIn) {
        let Some(mut task) = self.procs[node].tasks.remove(&id) else {
            return;
        };
        if self.step(node, id, &mut task, input) {
            self.procs[node].tasks.insert(id, task);
        }
    }

    /// Advances one task; returns whether it goes on.
    fn step(&mut self, node: usize, id: u64, task: &mut Task, input: TaskIn) -> bool {
        if let Kind::Register { .. } = task.kind {
            return self.register_step(node, id, task, input);
        }
        let op = self.plan.cfg.op_timeout();
        let me = self.me(node);
        let sid = task.sid;
        let gen = task.gen.unwrap_or(0);
        match &mut task.kind {
            Kind::Join { ticket, st } => {
                let ticket = *ticket;
                let joined = |w: &mut World, outcome| {
                    w.input(node, Input::Session(gen, Event::Joined { ticket, outcome }));
                };
                match (*st, input) {
                    (JoinSt::Create, TaskIn::Wake) => {
                        self.request(node, id, sid, Req::CreateLock, op);
                    }
                    (JoinSt::Create, TaskIn::Reply(r)) => match r {
                        Resp::Created { czxid } => {
                            joined(self, JoinOutcome::Held { epoch: czxid });
                            *st = JoinSt::Watch;
                            self.request(node, id, sid, Req::StatLock { watch: Some(id) }, op);
                        }
                        Resp::Err(Fail::Rejected) => {
                            *st = JoinSt::Stat;
                            self.request(node, id, sid, Req::StatLock { watch: None }, op);
                        }
                        _ => {
                            joined(self, JoinOutcome::Unknown);
                            *st = JoinSt::Watch;
                            self.request(node, id, sid, Req::StatLock { watch: Some(id) }, op);
                        }
                    },
                    (JoinSt::Stat, TaskIn::Reply(r)) => {
                        let outcome = match r {
                            Resp::Stat(Some(l)) if l.session == sid => {
                                JoinOutcome::Held { epoch: l.czxid }
                            }
                            Resp::Stat(Some(_)) => JoinOutcome::Exists,
                            _ => JoinOutcome::Unknown,
                        };
                        joined(self, outcome);
                        *st = JoinSt::Watch;
                        self.request(node, id, sid, Req::StatLock { watch: Some(id) }, op);
                    }
                    (JoinSt::Watch, TaskIn::Reply(r)) => match r {
                        Resp::Stat(None) => {
                            self.input(node, Input::LockDeleted(gen, ticket));
                            return false;
                        }
                        Resp::Stat(Some(_)) => *st = JoinSt::Armed,
                        Resp::Err(Fail::Expired) => return false,
                        _ => {
                            *st = JoinSt::WatchRetry;
                            let at = self.now + RETRY_DELAY;
                            self.wake_at(node, id, at);
                        }
                    },
                    (JoinSt::WatchRetry, TaskIn::Wake) => {
                        *st = JoinSt::Watch;
                        self.request(node, id, sid, Req::StatLock { watch: Some(id) }, op);
                    }
                    (JoinSt::Armed, TaskIn::Watch { deleted: true }) => {
                        self.input(node, Input::LockDeleted(gen, ticket));
                        return false;
                    }
                    (JoinSt::Armed, TaskIn::Watch { deleted: false }) => {
                        *st = JoinSt::Watch;
                        self.request(node, id, sid, Req::StatLock { watch: Some(id) }, op);
                    }
                    _ => {}
                }
                true
            }
            Kind::ReadState {
                ticket,
                st,
                crumb,
                control_version,
            } => {
                let ticket = *ticket;
                let result = match (*st, input) {
                    (0, TaskIn::Wake) => {
                        *st = 1;
                        self.request(node, id, sid, Req::GetCrumb, op);
                        return true;
                    }
                    (1, TaskIn::Reply(Resp::Crumb(c))) => {
                        *crumb = c;
                        *st = 2;
                        self.request(node, id, sid, Req::GetControl, op);
                        return true;
                    }
                    (2, TaskIn::Reply(Resp::Control { version })) => {
                        *control_version = version;
                        *st = 3;
                        self.request(node, id, sid, Req::GetHistory, op);
                        return true;
                    }
                    (3, TaskIn::Reply(Resp::History { entries, .. })) => {
                        // Only completed promotions count (`coord/zookeeper.rs` read_state).
                        let newest = entries
                            .into_iter()
                            .filter(|(_, to_active)| *to_active)
                            .filter_map(|(e, _)| e)
                            .max();
                        let breadcrumb = match crumb {
                            None => BreadcrumbView::Absent,
                            Some(c) => BreadcrumbView::Record {
                                record: self.node_record(c.owner, Some(c.epoch), c.svc),
                                version: Version::new(c.version.into()),
                            },
                        };
                        Ok(Box::new(ClusterState {
                            breadcrumb,
                            control: ControlView::default(),
                            control_version: Version::new((*control_version).into()),
                            newest_history_epoch: newest,
                        }))
                    }
                    (_, TaskIn::Reply(Resp::Err(f))) => Err(format!("reading failed: {f:?}")),
                    _ => return true,
                };
                self.input(
                    node,
                    Input::Session(gen, Event::StateRead { ticket, result }),
                );
                false
            }
            Kind::Write { ticket, req, done } => {
                if let Some(req) = req.take() {
                    self.request(node, id, sid, req, op);
                    return true;
                }
                let TaskIn::Reply(r) = input else { return true };
                let ev = done(*ticket, write_outcome(&r));
                self.input(node, Input::Session(gen, ev));
                false
            }
            Kind::RecordService {
                ticket,
                epoch,
                svc,
                st,
            } => {
                let ticket = *ticket;
                let done = |outcome| Event::ServiceRecorded { ticket, outcome };
                match (*st, input) {
                    (0, TaskIn::Wake) => {
                        *st = 1;
                        self.request(node, id, sid, Req::GetCrumb, op);
                        true
                    }
                    (1, TaskIn::Reply(Resp::Crumb(Some(c))))
                        if c.owner == me && c.epoch == *epoch =>
                    {
                        *st = 2;
                        let req = Req::RecordService {
                            version: c.version,
                            svc: *svc,
                        };
                        self.request(node, id, sid, req, op);
                        true
                    }
                    (1, TaskIn::Reply(Resp::Crumb(_))) => {
                        self.input(node, Input::Session(gen, done(WriteOutcome::Conflict)));
                        false
                    }
                    (_, TaskIn::Reply(r)) => {
                        let outcome = if *st == 2 {
                            write_outcome(&r)
                        } else {
                            WriteOutcome::Unknown
                        };
                        self.input(node, Input::Session(gen, done(outcome)));
                        false
                    }
                    _ => true,
                }
            }
            Kind::DeleteCrumb { ticket, epoch, st } => {
                let ticket = *ticket;
                match (*st, input) {
                    (0, TaskIn::Wake) => {
                        *st = 1;
                        self.request(node, id, sid, Req::GetCrumb, op);
                        return true;
                    }
                    (1, TaskIn::Reply(Resp::Crumb(Some(c))))
                        if c.owner == me && c.epoch == *epoch =>
                    {
                        *st = 2;
                        self.request(node, id, sid, Req::DeleteCrumb { version: c.version }, op);
                        return true;
                    }
                    (_, TaskIn::Reply(_)) => {}
                    _ => return true,
                }
                self.input(
                    node,
                    Input::Session(gen, Event::BreadcrumbDeleted { ticket }),
                );
                false
            }
            Kind::Release { ticket, st } => {
                let ticket = *ticket;
                match (*st, input) {
                    (0, TaskIn::Wake) => {
                        *st = 1;
                        self.request(node, id, sid, Req::StatLock { watch: None }, op);
                        return true;
                    }
                    (1, TaskIn::Reply(Resp::Stat(Some(l)))) if l.session == sid => {
                        *st = 2;
                        self.request(node, id, sid, Req::DeleteLock { version: l.version }, op);
                        return true;
                    }
                    (_, TaskIn::Reply(_)) => {}
                    _ => return true,
                }
                self.close_conn(sid);
                self.input(node, Input::Elector(Event::Released { ticket }));
                false
            }
            Kind::History {
                epoch,
                to_active,
                significant,
                st,
                attempts,
            } => match (*st, input) {
                (0, TaskIn::Wake) => {
                    *st = 1;
                    self.request(node, id, sid, Req::SetMember, op);
                    true
                }
                (1, TaskIn::Reply(_)) | (3, TaskIn::Reply(Resp::Err(Fail::Rejected)))
                    if *significant && *attempts < CAS_ATTEMPTS =>
                {
                    *attempts += 1;
                    *st = 2;
                    self.request(node, id, sid, Req::GetHistory, op);
                    true
                }
                (2, TaskIn::Reply(Resp::History { version, .. })) => {
                    *st = 3;
                    let req = Req::SetHistory {
                        epoch: *epoch,
                        to_active: *to_active,
                        version,
                    };
                    self.request(node, id, sid, req, op);
                    true
                }
                (_, TaskIn::Reply(_)) => false,
                _ => true,
            },
            Kind::Register { .. } => unreachable!("handled above"),
            Kind::Fence {
                ticket,
                order,
                fault,
                waiting,
            } => {
                let ticket = *ticket;
                let (fenced, summary) = match (waiting.take(), *fault) {
                    (_, Some(hang)) => {
                        self.fences += 1;
                        let why = if hang {
                            "the fence method timed out"
                        } else {
                            "the fence method failed"
                        };
                        (false, why.to_string())
                    }
                    (None, None) => match self.fence_begin(me, order) {
                        FenceStep::Done(fenced, summary) => (fenced, summary),
                        FenceStep::Wait(victims, deadline, method) => {
                            if self.tracing() {
                                let line = format!(
                                    "{} fence {}: {method} signalled {victims:?}",
                                    name(me),
                                    short_order(order)
                                );
                                self.log(|| line);
                            }
                            *waiting = Some((victims, deadline, method));
                            let at = self.now + POLL;
                            self.wake_at(node, id, at);
                            return true;
                        }
                    },
                    (Some((victims, deadline, method)), None) => {
                        if self.victims_gone(&victims) {
                            (true, format!("{method}: nothing of it remains"))
                        } else if self.now >= deadline {
                            (false, format!("{method}: processes remain after SIGKILL"))
                        } else {
                            *waiting = Some((victims, deadline, method));
                            let at = (self.now + POLL).min(deadline);
                            self.wake_at(node, id, at);
                            return true;
                        }
                    }
                };
                if self.tracing() {
                    let line = format!(
                        "{} fence {}: {fenced} ({summary})",
                        name(me),
                        short_order(order)
                    );
                    self.log(|| line);
                }
                self.input(
                    node,
                    Input::Elector(Event::FenceDone {
                        ticket,
                        fenced,
                        summary,
                    }),
                );
                false
            }
            Kind::Start {
                ticket,
                epoch,
                valid_until,
                spawning,
            } => {
                let ticket = *ticket;
                if !*spawning {
                    // SPEC §4.3d: the lease is checked right before the start...
                    if self.now >= *valid_until {
                        let reason =
                            "the lease ran out before the service could be started".to_string();
                        self.input(node, Input::Started(ticket, Err(reason)));
                        return false;
                    }
                    // ...which runs on the blocking pool a moment later.
                    *spawning = true;
                    let at = self.now + between(&mut self.rng, Duration::ZERO, ms(3));
                    self.wake_at(node, id, at);
                    return true;
                }
                let result = if self.rng.chance(EXEC_FAILS) {
                    Err("exec failed: No such file or directory".to_string())
                } else {
                    let cgroup = self.start_cgroup(node, *epoch);
                    Ok(self.spawn_service(me, *epoch, cgroup))
                };
                self.input(node, Input::Started(ticket, result));
                false
            }
            Kind::Stop {
                ticket,
                svc,
                st,
                deadline,
            } => {
                let ticket = *ticket;
                let svc = *svc;
                // `service::stop`: every process of its cgroup, or without one, of its
                // process group; down only once none is left.
                let reach = self.reach_of(svc);
                let alive = !self.service_down(svc);
                let (clean, detail) = match *st {
                    StopSt::Begin => {
                        if !alive {
                            (true, "already gone")
                        } else {
                            self.sigterm(svc, reach);
                            self.add_waiter(svc, me, id, reach);
                            *st = StopSt::Term;
                            *deadline = self.now + self.plan.cfg.stop_timeout;
                            let at = *deadline;
                            self.wake_at(node, id, at);
                            return true;
                        }
                    }
                    StopSt::Term => {
                        if !alive {
                            (true, "stopped")
                        } else if self.now >= *deadline {
                            self.sigkill(svc, reach);
                            self.add_waiter(svc, me, id, reach);
                            *st = StopSt::Kill;
                            *deadline = self.now + KILL_WAIT;
                            let at = *deadline;
                            self.wake_at(node, id, at);
                            return true;
                        } else {
                            return true;
                        }
                    }
                    StopSt::Kill => {
                        if !alive {
                            (true, "killed after stop_timeout")
                        } else if self.now >= *deadline {
                            (false, "still running after SIGKILL")
                        } else {
                            return true;
                        }
                    }
                };
                self.input(
                    node,
                    Input::Elector(Event::ServiceStopped {
                        ticket,
                        clean,
                        detail: detail.into(),
                    }),
                );
                false
            }
        }
    }

    /// SPEC §4.9: `members/<id>` is held by a warden of another machine: exit 2. systemd
    /// does not restart that (RestartPreventExitStatus=2); a pod is restarted with back-off.
    fn refuse_start(&mut self, node: usize, sid: u64) {
        let who = self.me(node);
        self.log(|| {
            format!(
                "{} refuses to start: members/n{} is held by a warden of another machine \
                 (exit 2)",
                name(who),
                node + 1
            )
        });
        self.close_conn(sid);
        self.procs[node].connecting = None;
        self.procs[node].restart_after_exit = if self.plan.layout.nodes[node].systemd {
            None
        } else {
            Some(between(&mut self.aux, ms(1000), ms(10_000)))
        };
        self.exited(node);
    }

    /// `daemon.rs` `connect` + `register`: open a session, register `members/<id>`
    /// (waiting for a killed predecessor's session to expire), read `control`.
    fn register_step(&mut self, node: usize, id: u64, task: &mut Task, input: TaskIn) -> bool {
        let Kind::Register { st, backoff } = &mut task.kind else {
            unreachable!("a register task");
        };
        let op = self.plan.cfg.op_timeout();
        let me = self.me(node);
        let sid = task.sid;
        enum Next {
            Req(RegSt, Req),
            Retry,
            Wait,
            Done,
            Stay,
        }
        let next = match (*st, input) {
            (RegSt::Connect, TaskIn::Wake) => {
                let sid = self.open_conn(me);
                task.sid = sid;
                let ct = self.plan.cfg.connect_timeout;
                self.request(node, id, sid, Req::CreateSession, ct);
                return true;
            }
            (RegSt::Connect, TaskIn::Reply(Resp::Ok)) => {
                let at = self.now + self.plan.cfg.ping_interval();
                self.push_proc(at, me, ProcEv::Ping { sid });
                Next::Req(RegSt::GetMember, Req::GetMember)
            }
            (RegSt::GetMember, TaskIn::Reply(Resp::Member(m))) => match m {
                None => Next::Req(RegSt::CreateMember, Req::CreateMember),
                Some(m) if m.session == sid => Next::Req(RegSt::Control, Req::GetControl),
                Some(m) if m.inc == me.1 => Next::Req(RegSt::DeleteMember, Req::DeleteMember),
                Some(m) => {
                    if self.proc_alive((node, m.inc)) {
                        self.fail(format!(
                            "{} refused to start: another live warden holds members/n{}",
                            name(me),
                            node + 1
                        ));
                        return false;
                    }
                    // SPEC §4.9: a killed predecessor of this machine (another boot, or a
                    // warden pid that is gone) is waited for; anything else is another warden
                    // with our node id: exit 2.
                    let (pred, mine) = (self.inc_info((node, m.inc)), self.inc_info(me));
                    let same_machine = self.plan.layout.places[pred.place].host
                        == self.plan.layout.places[mine.place].host;
                    if !same_machine {
                        self.refuse_start(node, sid);
                        return false;
                    }
                    Next::Wait
                }
            },
            (RegSt::CreateMember, TaskIn::Reply(Resp::Ok)) => {
                Next::Req(RegSt::Control, Req::GetControl)
            }
            (RegSt::CreateMember, TaskIn::Reply(Resp::Err(Fail::Rejected)))
            | (RegSt::DeleteMember, TaskIn::Reply(Resp::Ok))
            | (RegSt::DeleteMember, TaskIn::Reply(Resp::Err(Fail::Rejected))) => {
                Next::Req(RegSt::GetMember, Req::GetMember)
            }
            (RegSt::Control, TaskIn::Reply(Resp::Control { .. })) => Next::Done,
            (RegSt::Control, TaskIn::Reply(Resp::Err(Fail::Expired))) => Next::Retry,
            (RegSt::Control, TaskIn::Reply(Resp::Err(_))) => {
                *st = RegSt::ControlRetry;
                let at = self.now + RETRY_DELAY;
                self.wake_at(node, id, at);
                Next::Stay
            }
            (RegSt::ControlRetry, TaskIn::Wake) => Next::Req(RegSt::Control, Req::GetControl),
            (_, TaskIn::Reply(_)) => Next::Retry,
            _ => Next::Stay,
        };
        match next {
            Next::Req(s, req) => {
                *st = s;
                self.request(node, id, sid, req, op);
                true
            }
            Next::Retry | Next::Wait => {
                self.close_conn(sid);
                task.sid = 0;
                let delay = if matches!(next, Next::Wait) {
                    PREDECESSOR_POLL
                } else {
                    let d = *backoff;
                    *backoff = (*backoff * 2).min(CONNECT_BACKOFF_MAX);
                    d
                };
                *st = RegSt::Connect;
                let at = self.now + delay;
                self.wake_at(node, id, at);
                true
            }
            Next::Done => {
                self.input(node, Input::Connected(sid));
                false
            }
            Next::Stay => true,
        }
    }
}

fn write_outcome(r: &Resp) -> WriteOutcome {
    match r {
        Resp::Ok => WriteOutcome::Done,
        Resp::Err(Fail::Rejected) => WriteOutcome::Conflict,
        _ => WriteOutcome::Unknown,
    }
}

/// A fence order for the trace: whose incarnation, and what identifies its service.
fn short_order(order: &FenceOrder) -> String {
    match order {
        FenceOrder::Unreadable => "Unreadable".into(),
        FenceOrder::Node(r) | FenceOrder::OwnLeftovers(r) | FenceOrder::OwnService(r) => {
            let kind = match order {
                FenceOrder::Node(_) => "Node",
                FenceOrder::OwnLeftovers(_) => "OwnLeftovers",
                _ => "OwnService",
            };
            format!(
                "{kind}({}#{} at {} boot {} epoch {:?}, service pid {:?}{})",
                r.node_id,
                r.incarnation,
                r.host,
                r.boot_id.trim_start_matches('0'),
                r.epoch,
                r.service_pid,
                if r.service_cgroup.is_some() {
                    " + cgroup"
                } else {
                    ""
                }
            )
        }
    }
}

/// An event for the trace, without the long reasons.
fn short_event(ev: &Event) -> String {
    match ev {
        Event::StateRead {
            ticket,
            result: Ok(s),
        } => format!(
            "StateRead {{ ticket: {ticket}, breadcrumb: {}, control_version: {}, history: {:?} }}",
            match &s.breadcrumb {
                BreadcrumbView::Absent => "absent".to_string(),
                BreadcrumbView::Record { record, version } => format!(
                    "{}#{} epoch {:?} v{version}",
                    record.node_id, record.incarnation, record.epoch
                ),
                BreadcrumbView::Unreadable { .. } => "unreadable".to_string(),
            },
            s.control_version,
            s.newest_history_epoch
        ),
        other => format!("{other:?}"),
    }
}
