//! A model of the ZooKeeper ensemble as one linearizable server: sessions with server-side
//! expiry on tick boundaries, ephemeral znodes, a zxid per write (the lock's czxid is the
//! epoch), versions, one-shot watches, and the multi-ops of `coord/zookeeper.rs`.
//!
//! It knows nothing of the network: the world decides whether a request reaches it and
//! whether its reply gets back.

use super::plan::Time;
use std::time::Duration;
use warden::record::Epoch;

/// `coord/zookeeper.rs` HISTORY_LEN.
const HISTORY_LEN: usize = 100;

/// A `history` entry as far as the election reads it: its epoch, and whether the
/// transition was to `active`.
pub type HistoryEntry = (Option<Epoch>, bool);

/// Who a znode or a session belongs to: node index and incarnation number.
pub type Inc = (usize, u32);

#[derive(Clone, Debug)]
pub struct Session {
    pub owner: Inc,
    pub alive: bool,
    pub expire_at: Time,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lock {
    pub session: u64,
    pub owner: Inc,
    pub czxid: u64,
    pub version: i32,
}

/// The breadcrumb: the record of the incarnation promoted last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crumb {
    pub owner: Inc,
    pub epoch: Epoch,
    pub version: i32,
    /// The service identity recorded after the start (§4.3d); the commit has none.
    pub svc: Option<SvcRec>,
}

/// The identity of a spawned service as the breadcrumb records it: its main pid, which
/// leads its process group (`service_pid`, `service_pgid`, `service_start_time`; pids
/// here are service ids, never reused), and its cgroup (`service_cgroup`). The commit
/// records the cgroup prepared for the start, when the node has cgroups; `RecordService`
/// both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SvcRec {
    pub pid: Option<u64>,
    pub cgroup: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    pub session: u64,
    pub inc: u32,
}

#[derive(Clone, Debug)]
pub enum Req {
    CreateSession,
    CloseSession,
    Ping,
    /// `create(lock, EPHEMERAL)` with the caller's record.
    CreateLock,
    /// `check_stat(lock)`, with an exists-watch for the given task when `Some`.
    StatLock {
        watch: Option<u64>,
    },
    DeleteLock {
        version: i32,
    },
    GetCrumb,
    GetControl,
    GetHistory,
    /// `set_data(members/<id>)`: the member record published on a transition.
    SetMember,
    /// multi: check control version, set lock data, set breadcrumb at version / create.
    /// `sent`: when the elector ordered it, the start of the lease it grants.
    Commit {
        epoch: Epoch,
        crumb_version: Option<i32>,
        control_version: i32,
        sent: Time,
        svc: Option<SvcRec>,
    },
    /// multi: check lock exists, set our member record.
    Renew {
        sent: Time,
    },
    /// multi: check lock exists, set breadcrumb at version (service identity recorded).
    RecordService {
        version: i32,
        svc: Option<SvcRec>,
    },
    /// multi: check lock exists, delete breadcrumb at version.
    DeleteCrumb {
        version: i32,
    },
    GetMember,
    CreateMember,
    DeleteMember,
    /// set `history` at version (or create it), with one more entry.
    SetHistory {
        epoch: Option<Epoch>,
        to_active: bool,
        version: Option<i32>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fail {
    /// NodeExists, NoNode, BadVersion: the store said no.
    Rejected,
    /// The session is expired or closed.
    Expired,
    /// No answer, connection loss: the outcome is not known.
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resp {
    Ok,
    Created {
        czxid: u64,
    },
    Stat(Option<Lock>),
    Crumb(Option<Crumb>),
    Control {
        version: i32,
    },
    /// The entries (newest 100) as (epoch, whether the transition was to `active`), and
    /// the znode's version.
    History {
        entries: Vec<HistoryEntry>,
        version: Option<i32>,
    },
    Member(Option<Member>),
    Err(Fail),
}

/// Something the server sends on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Note {
    /// The session is gone (expired, or a request came in on a dead session).
    Expired,
    /// An exists-watch on `lock` fired for `task`: deleted, or its data changed.
    LockWatch { task: u64, deleted: bool },
}

/// What the invariants need to hear about writes as the server applies them.
#[derive(Clone, Debug)]
pub enum Fact {
    Committed {
        by: Inc,
        session: u64,
        epoch: Epoch,
        lock: Option<Lock>,
        replaced: Option<Crumb>,
        sent: Time,
    },
    Renewed {
        by: Inc,
        session: u64,
        lock: Option<Lock>,
        sent: Time,
    },
    CrumbDeleted {
        by: Inc,
        crumb: Crumb,
    },
    SessionEnded {
        session: u64,
        owner: Inc,
        expired: bool,
    },
}

pub struct Store {
    /// The session timeout the server grants (it clamps what clients ask for).
    session_timeout: Duration,
    tick: Duration,
    pub zxid: u64,
    pub sessions: super::world::IdMap<Session>,
    pub lock: Option<Lock>,
    pub crumb: Option<Crumb>,
    pub control_version: i32,
    pub members: Vec<Option<Member>>,
    /// The newest 100 entries, and the znode's version.
    pub history: Option<(Vec<HistoryEntry>, i32)>,
    lock_watchers: Vec<(u64, u64)>,
    /// Notes to send, by session.
    pub outbox: Vec<(u64, Note)>,
    pub facts: Vec<Fact>,
    pub down: bool,
}

impl Store {
    pub fn new(nodes: usize, session_timeout: Duration, tick: Duration) -> Store {
        Store {
            session_timeout,
            tick,
            // `warden init` created the parents and `control`.
            zxid: 100,
            sessions: Default::default(),
            lock: None,
            crumb: None,
            control_version: 0,
            members: vec![None; nodes],
            history: None,
            lock_watchers: Vec::new(),
            outbox: Vec::new(),
            facts: Vec::new(),
            down: false,
        }
    }

    /// ZooKeeper's `ExpiryQueue.roundToNextInterval`: expiry on the next tick boundary.
    fn expiry_after(&self, now: Time) -> Time {
        let t = (now + self.session_timeout).as_nanos() as u64;
        let tick = self.tick.as_nanos() as u64;
        Duration::from_nanos((t / tick + 1) * tick)
    }

    fn touch(&mut self, sid: u64, now: Time) {
        let at = self.expiry_after(now);
        if let Some(s) = self.sessions.get_mut(&sid) {
            if s.alive {
                s.expire_at = at;
            }
        }
    }

    /// A new leader gives every session a full timeout again (after an outage).
    pub fn renew_all_sessions(&mut self, now: Time) {
        let at = self.expiry_after(now);
        for s in self.sessions.values_mut().filter(|s| s.alive) {
            s.expire_at = at;
        }
    }

    /// Expires every session whose time has come; called on tick boundaries.
    pub fn tick(&mut self, now: Time) {
        if self.down {
            return;
        }
        let mut due: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.alive && s.expire_at <= now)
            .map(|(id, _)| *id)
            .collect();
        due.sort_unstable();
        for sid in due {
            self.end_session(sid, true);
            self.outbox.push((sid, Note::Expired));
        }
    }

    fn next_zxid(&mut self) -> u64 {
        self.zxid += 1;
        self.zxid
    }

    fn end_session(&mut self, sid: u64, expired: bool) {
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        if !s.alive {
            return;
        }
        s.alive = false;
        let owner = s.owner;
        self.next_zxid();
        if self.lock.is_some_and(|l| l.session == sid) {
            self.delete_lock();
        }
        for m in self.members.iter_mut() {
            if m.is_some_and(|m| m.session == sid) {
                *m = None;
            }
        }
        self.lock_watchers.retain(|(s, _)| *s != sid);
        self.facts.push(Fact::SessionEnded {
            session: sid,
            owner,
            expired,
        });
    }

    fn delete_lock(&mut self) {
        self.lock = None;
        self.fire_lock_watches(true);
    }

    fn fire_lock_watches(&mut self, deleted: bool) {
        for (sid, task) in std::mem::take(&mut self.lock_watchers) {
            self.outbox.push((sid, Note::LockWatch { task, deleted }));
        }
    }

    fn lock_exists(&self) -> bool {
        self.lock.is_some()
    }

    /// A set bumps the version; a create (after a delete) starts at 0 again, as in ZooKeeper.
    fn set_crumb(&mut self, owner: Inc, epoch: Epoch, svc: Option<SvcRec>) {
        let version = self.crumb.map_or(0, |c| c.version + 1);
        self.crumb = Some(Crumb {
            owner,
            epoch,
            version,
            svc,
        });
    }

    /// Applies one request from session `sid` of `from` at `now`.
    pub fn apply(&mut self, now: Time, from: Inc, sid: u64, req: &Req) -> Resp {
        if let Req::CreateSession = req {
            let expire_at = self.expiry_after(now);
            self.sessions.insert(
                sid,
                Session {
                    owner: from,
                    alive: true,
                    expire_at,
                },
            );
            self.next_zxid();
            return Resp::Ok;
        }
        if !self.sessions.get(&sid).is_some_and(|s| s.alive) {
            self.outbox.push((sid, Note::Expired));
            return Resp::Err(Fail::Expired);
        }
        self.touch(sid, now);
        let (node, inc) = from;
        match req {
            Req::CreateSession => unreachable!("handled above"),
            Req::CloseSession => {
                self.end_session(sid, false);
                Resp::Ok
            }
            Req::Ping => Resp::Ok,
            Req::CreateLock => {
                if self.lock.is_some() {
                    return Resp::Err(Fail::Rejected);
                }
                let czxid = self.next_zxid();
                self.lock = Some(Lock {
                    session: sid,
                    owner: from,
                    czxid,
                    version: 0,
                });
                Resp::Created { czxid }
            }
            Req::StatLock { watch } => {
                if let (Some(task), Some(_)) = (watch, self.lock) {
                    self.lock_watchers.push((sid, *task));
                }
                Resp::Stat(self.lock)
            }
            Req::DeleteLock { version } => match self.lock {
                Some(l) if l.version == *version => {
                    self.next_zxid();
                    self.delete_lock();
                    Resp::Ok
                }
                _ => Resp::Err(Fail::Rejected),
            },
            Req::GetCrumb => Resp::Crumb(self.crumb),
            Req::GetControl => Resp::Control {
                version: self.control_version,
            },
            Req::GetHistory => Resp::History {
                entries: self
                    .history
                    .as_ref()
                    .map(|h| h.0.clone())
                    .unwrap_or_default(),
                version: self.history.as_ref().map(|h| h.1),
            },
            Req::SetMember => {
                if self.members[node].is_some_and(|m| m.session == sid) {
                    self.next_zxid();
                    Resp::Ok
                } else {
                    Resp::Err(Fail::Rejected)
                }
            }
            Req::Commit {
                epoch,
                crumb_version,
                control_version,
                sent,
                svc,
            } => {
                let crumb_ok = match (crumb_version, self.crumb) {
                    (Some(v), Some(c)) => c.version == *v,
                    (None, None) => true,
                    _ => false,
                };
                if *control_version != self.control_version || !self.lock_exists() || !crumb_ok {
                    return Resp::Err(Fail::Rejected);
                }
                let lock = self.lock;
                let replaced = self.crumb;
                self.next_zxid();
                if let Some(l) = self.lock.as_mut() {
                    l.version += 1;
                }
                self.fire_lock_watches(false);
                self.set_crumb(from, *epoch, *svc);
                self.facts.push(Fact::Committed {
                    by: from,
                    session: sid,
                    epoch: *epoch,
                    lock,
                    replaced,
                    sent: *sent,
                });
                Resp::Ok
            }
            Req::Renew { sent } => {
                if !self.lock_exists() || self.members[node].is_none_or(|m| m.session != sid) {
                    return Resp::Err(Fail::Rejected);
                }
                self.next_zxid();
                self.facts.push(Fact::Renewed {
                    by: from,
                    session: sid,
                    lock: self.lock,
                    sent: *sent,
                });
                Resp::Ok
            }
            Req::RecordService { version, svc } => {
                if !self.lock_exists() || self.crumb.is_none_or(|c| c.version != *version) {
                    return Resp::Err(Fail::Rejected);
                }
                self.next_zxid();
                if let Some(c) = self.crumb.as_mut() {
                    c.version += 1;
                    c.svc = *svc;
                }
                Resp::Ok
            }
            Req::DeleteCrumb { version } => {
                let Some(crumb) = self.crumb.filter(|c| c.version == *version) else {
                    return Resp::Err(Fail::Rejected);
                };
                if !self.lock_exists() {
                    return Resp::Err(Fail::Rejected);
                }
                self.next_zxid();
                self.crumb = None;
                self.facts.push(Fact::CrumbDeleted { by: from, crumb });
                Resp::Ok
            }
            Req::GetMember => Resp::Member(self.members[node]),
            Req::CreateMember => {
                if self.members[node].is_some() {
                    return Resp::Err(Fail::Rejected);
                }
                self.next_zxid();
                self.members[node] = Some(Member { session: sid, inc });
                Resp::Ok
            }
            Req::DeleteMember => {
                if self.members[node].is_none() {
                    return Resp::Err(Fail::Rejected);
                }
                self.next_zxid();
                self.members[node] = None;
                Resp::Ok
            }
            Req::SetHistory {
                epoch,
                to_active,
                version,
            } => {
                let ok = match (version, &self.history) {
                    (Some(v), Some((_, cur))) => v == cur,
                    (None, None) => true,
                    _ => false,
                };
                if !ok {
                    return Resp::Err(Fail::Rejected);
                }
                self.next_zxid();
                let (mut entries, version) = match self.history.take() {
                    Some((e, v)) => (e, v + 1),
                    None => (Vec::new(), 0),
                };
                entries.push((*epoch, *to_active));
                if entries.len() > HISTORY_LEN {
                    entries.remove(0);
                }
                self.history = Some((entries, version));
                Resp::Ok
            }
        }
    }
}
