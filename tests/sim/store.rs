//! The simulated coordination store: `warden::coord::{Connector, Session}` over an
//! in-memory model, for the simulation of the real daemon under tokio's paused clock.
//!
//! The store mirrors `coord/zookeeper.rs` call for call: versions that start at 0 on a
//! create and grow by one on each write; the lock and the member records ephemeral, owned
//! by the session that created them; one counter bumped by every write, whose value at the
//! lock's creation is its epoch (ZooKeeper's czxid); the multi-ops with the checks the
//! backend builds, including its own bookkeeping of the lock version it holds. A trait
//! method that is several requests in the backend (join: create, then stat on
//! NodeExists; the compare-and-deletes: read, then multi) is several requests here too, so
//! whatever may change between them does.
//!
//! The events (`Session::events`) are the backend's: `control` at once and after each
//! change; for every session, joined or not, each committed promotion once per epoch
//! (`StoreEvent::Active`: the lock's data watched across deletions and creations, or
//! read at each poll), so that a standby that never joins still follows each new active;
//! and the end of the holder a join saw. `members` is the backend's two requests (list,
//! then one multi-read), which the daemon's priority rule polls.
//!
//! Three stores in one model (`StoreConfig::watches`, `StoreConfig::sessions`):
//! - ZooKeeper: sessions kept alive by the client's pings, expiring on tick boundaries once
//!   `granted` passed without contact, and never while the ensemble has no quorum;
//! - a store without watches: the events are found by polling;
//! - a store without sessions: the lock and member records carry a lease on the store's own
//!   clock, which runs fast or slow and may jump forward.
//!
//! And Redis itself (`StoreConfig::redis`, issue 32 point 3): no model of it at all, but
//! the backend's own `RedisSession` (its Rust and its Lua scripts) over a simulated RESP
//! wire (`redis_wire.rs`) to an in-memory keyspace with an embedded Lua 5.1
//! (`keyspace.rs`, checked against a real redis-server by `tests/redis_lua.rs`). Its
//! requests meet the same latency, loss and faults as the model's, its keys' TTLs run on
//! the TTL store's clock, and a forgetting store restores the keyspace; its facts come
//! from the keyspace's changes. Likewise MySQL itself (`StoreConfig::mysql`): the
//! backend's own `MysqlSession` (all of `mysql.rs` and `mysql/decide.rs`) over a simulated
//! wire (`mysql_wire.rs`) whose transactions run on tables in memory (`tables.rs`, held to
//! a real MariaDB by `tests/mysql_rows.rs`), each applied as a whole on arrival, `NOW(6)`
//! the TTL store's clock; ZooKeeper itself (`StoreConfig::zk_wire`, `zk_wire.rs`) on the
//! model's sessions.
//!
//! Every call goes the way a request goes: it waits while its process is frozen (and never
//! returns once the process is dead), travels a request latency, is applied atomically on
//! arrival in the order its session sent it, and its answer travels a reply latency. No
//! answer within `op_timeout` is "outcome unknown", as the backend's `bounded` says. A
//! request on the wire is applied even if its caller has given up, as on a real connection.
//!
//! What the invariants need comes out as [`Fact`]s, in the order the writes were applied:
//! [`SimStore::take_facts`], or an observer called at each write
//! ([`SimStore::observe`]). The harness's other knobs (partitions, quorum, kill, freeze,
//! the operator's control and `fence --confirm`) are methods of [`SimStore`].
//!
//! Determinism: one `Arc<Mutex<State>>` (never locked across an `.await`), ordered maps
//! only, tokio's clock only, every random draw from one [`SimRng`], and every `select!`
//! biased; a seed replays exactly.

// Each test crate that includes this file uses a part of it.
#![allow(dead_code)]

use super::plan::{between, Forget, SimRng};
#[path = "keyspace.rs"]
mod keyspace;
#[path = "mysql_wire.rs"]
mod mysql_wire;
#[path = "redis_wire.rs"]
mod redis_wire;
#[path = "tables.rs"]
#[allow(dead_code)]
mod tables;
#[path = "zk_wire.rs"]
mod zk_wire;
#[path = "ztree.rs"]
mod ztree;
pub use redis_wire::SimSession;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::time::Instant;
use warden::coord::{
    ActiveTracker, ClusterSnapshot, Connector, Item, Session, StoreError, StoreEvent,
};
use warden::elector::RETRY_DELAY;
use warden::record::{
    BreadcrumbView, Control, Epoch, History, HistoryEntry, JoinOutcome, MemberRecord, NodeRecord,
    RecordError, Role, SessionId, TakeoverState, Version, WriteOutcome,
};

/// Where the cluster's state would live in ZooKeeper: the simulation's config names
/// cluster `sim` under the default root. Only for [`Session::name_of`] and set-aside names.
const BASE: &str = "/warden/sim";
/// `coord/zookeeper.rs` HISTORY_LEN.
const HISTORY_LEN: usize = 100;
/// `coord/zookeeper.rs` CAS_ATTEMPTS: read-modify-writes give up after this many races.
const CAS_ATTEMPTS: usize = 5;
/// TTL mode: the store's clock jumps forward at most this many times per run, each tick
/// with this chance ("a few times per run" at the simulation's tick lengths).
const MAX_STEPS: u32 = 3;
const STEP_CHANCE: f64 = 0.01;
/// `coord/zookeeper.rs` JOIN_TRIES: a join reads the floor and the counter again this
/// often when another node changed one of them between its reads and its multi-op.
const JOIN_TRIES: usize = 5;
/// The store keeps this many snapshots back for [`SimStore::forget`] (seeds with store
/// faults only).
const SNAPSHOTS: usize = 48;
/// SPEC §3a, stop 32: the join raises the joiner's entry of the floor and refuses, before
/// the counter moves, when the counter is below the floor. `false` is the code before
/// that fix, for the seed-revert table (never committed so).
const FLOOR_AT_JOIN: bool = true;
/// Stop 40: a commit is refused when the floor holds its epoch, raised after the takeover
/// read the state (`tests/commit_floor.rs`). `false` is the code before that fix, for the
/// seed-revert table (never committed so).
const FLOOR_AT_COMMIT: bool = true;
/// Seed 81344: a renewal (and a rewrite of the breadcrumb) first reads the lock and
/// checks that it is this session's, not another's new lock at the version held. `false`
/// is the code before that fix, for the seed-revert table (never committed so).
const OWN_LOCK: bool = true;

#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// ZooKeeper mode: the session timeout the server grants (sessions expire after this
    /// long without contact). TTL mode: the lease TTL.
    pub granted: Duration,
    /// Expiry happens on multiples of this (ZooKeeper's tickTime), in both modes.
    pub tick: Duration,
    /// A call whose answer does not arrive within this returns "outcome unknown" (as the
    /// backend's `bounded` does); a connect that gets no session within it fails with
    /// `StoreError::Unreachable`.
    pub op_timeout: Duration,
    /// One-way network latency, drawn per message from this range.
    pub latency: (Duration, Duration),
    /// Probability that a reply is lost (the request was applied or not, 50/50): the
    /// caller sees "outcome unknown" after `op_timeout`.
    pub loss: f64,
    pub watches: Watches,
    pub sessions: Sessions,
    /// `coord/zookeeper.rs` `settle`, the configured session timeout: only a session that
    /// has lived this long makes the epoch counter when there is none (a new, wiped or
    /// restored ensemble; stop 33).
    pub settle: Duration,
    /// Redis (issue 32 point 3): the sessions are the backend's own `RedisSession` over a
    /// simulated RESP wire that runs its Lua scripts on an in-memory keyspace
    /// (`redis_wire.rs`, `keyspace.rs`), instead of this model's copy of what they decide.
    /// Only with `Sessions::Ttl` (the keys' TTLs run on the store's clock) and
    /// `Watches::Polling` (its `poll_interval`).
    pub redis: bool,
    /// ZooKeeper (issue 32 point 3): the sessions are the backend's own `ZkSession` over a
    /// simulated client whose calls run on a znode tree (`zk_wire.rs`, `ztree.rs`),
    /// instead of this model's copy of what it decides. Only with `Sessions::Zk` and
    /// `Watches::Yes`: the model's sessions (pings, expiry, quorum) stay the server's.
    pub zk_wire: bool,
    /// MySQL (issue 32 point 3): the sessions are the backend's own `MysqlSession`, its
    /// transactions run on tables in memory (`mysql_wire.rs`, `tables.rs`), instead of this
    /// model's copy of what they decide. Only with `Sessions::Ttl` (its rows expire on the
    /// store's clock) and `Watches::Polling` (its `poll_interval`).
    pub mysql: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Watches {
    Yes,
    /// No watches: `events()` polls control and the lock every `every`.
    Polling {
        every: Duration,
    },
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sessions {
    /// ZooKeeper: while its client is connected (reachable, not frozen, not dead, store up)
    /// a session is kept alive by pings every `granted / 3`; it expires `granted` (rounded
    /// up to the next tick) after the last contact, which deletes its lock and member
    /// record. While the store is down no session expires, and when it is back every
    /// session's last contact counts as then (a new leader gives every session a full
    /// timeout).
    Zk,
    /// No sessions: the lock and member records carry an expiry on the *store's* clock,
    /// set to its now + `granted` (rounded up to a tick) at each contact, and vanish when
    /// that clock passes it. The clock runs at (1 + drift) times real time, the drift drawn
    /// once within ±`max_drift`, and jumps forward by up to `max_step` a few times per run
    /// (or when [`SimStore::step_clock`] says). It keeps running while the store is down:
    /// leases that ran out meanwhile vanish the moment it is back, before any client can
    /// renew them.
    Ttl { max_drift: f64, max_step: Duration },
}

/// A write the invariants care about, as the store applied it.
// Handed over one at a time as they happen, never kept in bulk by the store once
// someone observes them: boxing the records would only add allocations.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Fact {
    /// A promotion was committed by (node, inc) with `epoch`; `replaced` is the breadcrumb
    /// it overwrote (`None`: there was none).
    Commit {
        node: usize,
        inc: u32,
        epoch: Epoch,
        replaced: Option<NodeRecord>,
        record: NodeRecord,
        at: Instant,
        /// `control` as the commit found it (its version checked).
        control: Control,
        /// When the caller's last `read_state` answered: it decided on that control.
        read_at: Option<Instant>,
        /// Each member record's position as stored at the commit: what the committer's
        /// look at the members, a moment before, could show at most.
        positions: BTreeMap<usize, Option<u64>>,
    },
    /// A renewal (or a commit) by the lock holder was applied; `sent` is when the caller
    /// issued the call (the start of the lease it grants).
    Renewed {
        node: usize,
        inc: u32,
        sent: Instant,
        at: Instant,
    },
    /// The breadcrumb was rewritten with the service's identity.
    Recorded {
        node: usize,
        inc: u32,
        record: NodeRecord,
        at: Instant,
    },
    /// The breadcrumb was deleted; `by` `None` is the operator's `fence --confirm`.
    BreadcrumbDeleted {
        by: Option<(usize, u32)>,
        record: NodeRecord,
        at: Instant,
    },
    LockTaken {
        node: usize,
        inc: u32,
        epoch: Epoch,
        at: Instant,
        /// The breadcrumb as the lock was taken.
        crumb: Option<NodeRecord>,
    },
    /// A join was refused because the store restarted since the joiner's session began
    /// (Redis's ACQUIRE answered `restarted`: stop 36, review F2).
    RefusedRestarted { node: usize, inc: u32, at: Instant },
    /// The lock went away: released by its holder (or its session closed), or its
    /// session or lease expired.
    LockGone {
        node: usize,
        inc: u32,
        expired: bool,
        at: Instant,
    },
}

/// A warden process: node index and incarnation number.
type Inc = (usize, u32);

#[derive(Clone)]
struct Lock {
    session: i64,
    owner: Inc,
    record: NodeRecord,
    czxid: u64,
    version: i64,
}

/// What `check_stat(lock)` tells.
#[derive(Clone, Copy, Debug)]
struct LockStat {
    session: i64,
    version: i64,
    czxid: u64,
    /// The committed epoch its record names (the backend reads the data for it).
    epoch: Option<u64>,
}

#[derive(Clone)]
struct Member {
    session: i64,
    record: MemberRecord,
    version: i64,
}

/// What a restored store holds: everything but the sessions' client side.
#[derive(Clone)]
struct Snap {
    at: Instant,
    zxid: u64,
    lock: Option<Lock>,
    breadcrumb: Option<(NodeRecord, i64)>,
    control: Option<(Control, i64)>,
    members: BTreeMap<String, Member>,
    history: Option<(Vec<HistoryEntry>, i64)>,
    set_aside: BTreeMap<String, Vec<HistoryEntry>>,
    floor: BTreeMap<String, u64>,
    floor_version: i64,
    counter: u64,
    counter_version: i64,
    offset: u64,
    /// The sessions alive then: a restored ZooKeeper knows them (and gives each a full
    /// timeout), a restored Redis or MySQL keeps their keys and rows.
    sessions: BTreeSet<i64>,
    /// Redis mode: the keyspace.
    keyspace: keyspace::Keyspace,
    /// ZooKeeper wire mode: the znode tree.
    ztree: ztree::Tree,
    /// MySQL mode: the tables.
    tables: tables::Tables,
}

/// Something the store sends a client without being asked: a fired watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Note {
    ControlChanged,
    /// The breadcrumb's data or exists watch fired (`ZkSession::watch_data`).
    BreadcrumbChanged,
    /// The watch on the lock fired: its data changed, it was deleted, or (armed while
    /// it was absent) created. `join`: the join it was armed for (`None`: a node that
    /// has not joined, watching for new actives).
    Lock {
        join: Option<u64>,
        deleted: bool,
    },
}

/// What the join's multi-op did.
enum Created {
    Taken(LockStat),
    /// The lock exists (NodeExists).
    Exists,
    /// The floor or the counter changed since they were read (BadVersion): read again.
    Moved,
}

/// The floor and the counter as a join reads them.
#[derive(Clone, Debug)]
struct JoinRead {
    floor: Option<(u64, String)>,
    floor_version: i64,
    counter: u64,
    counter_version: i64,
}

/// A watch on the lock: a data watch armed while it exists (fires when its data is set
/// or it is deleted), or an exists watch armed while it does not (fires when it is made).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LockWatch {
    join: Option<u64>,
    on_data: bool,
}

/// A session as the store sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Server {
    /// Asked for; the request has not arrived yet.
    Opening,
    Alive,
    /// Expired or closed.
    Ended,
    /// A connection to the simulated Redis: no session at the store (the keys' TTLs are
    /// the backend's leases), only the connection's order of requests and replies.
    Raw,
}

/// One session: its client's side and the store's.
struct Sess {
    owner: Inc,
    /// The client still exists: not dropped, not given up while connecting. Only an open
    /// client pings.
    open: bool,
    /// The lock version the client believes it holds (the backend's `lock_version`; `None`
    /// is its `ANY_VERSION`).
    held: Option<i64>,
    /// FIFO on the connection: no request arrives, and no reply or watch event gets back,
    /// before an earlier one.
    next_arrival: Instant,
    next_reply: Instant,
    /// When the client learns that the session has ended.
    lost_at: Option<Instant>,
    server: Server,
    /// Connected when the state was last looked at; it changes only under
    /// [`SimStore::with`], which looks before and after, so it held all along since.
    connected: bool,
    /// The last contact (a request or a ping reaching the store) and the expiry it set, on
    /// the expiry clock ([`State::expiry_clock`]).
    contact: Instant,
    deadline: Duration,
    control_watch: bool,
    /// The watch on the breadcrumb (data while it exists, exists while it does not).
    breadcrumb_watch: bool,
    /// The watch on the lock, if armed.
    lock_watch: Option<LockWatch>,
    /// The client was connected once; since then it connected again `reconnects` times
    /// (each a `StoreEvent::Reconnected`, as `ZkSession::client_session_ended` sends).
    ever_connected: bool,
    reconnects: u64,
    /// Fired watches on their way to the client, with when they get there.
    outbox: VecDeque<(Instant, Note)>,
}

impl Sess {
    fn new(owner: Inc, now: Instant) -> Sess {
        Sess {
            owner,
            open: true,
            held: None,
            next_arrival: now,
            next_reply: now,
            lost_at: None,
            server: Server::Opening,
            connected: false,
            contact: now,
            deadline: Duration::ZERO,
            control_watch: false,
            breadcrumb_watch: false,
            lock_watch: None,
            ever_connected: false,
            reconnects: 0,
            outbox: VecDeque::new(),
        }
    }
}

/// A request on its way: applied by the session's wire task at `at`.
struct Job {
    at: Instant,
    run: Apply,
}

type Apply = Box<dyn FnOnce(&mut State, Instant) + Send>;

/// The answer to a request, and when it gets back to the client.
type Reply<T> = oneshot::Receiver<(T, Instant)>;

/// A promotion's commit as its caller sends it.
struct Commit {
    record: NodeRecord,
    breadcrumb_version: Option<i64>,
    control_version: i64,
    /// The lock version the caller holds.
    held: Option<i64>,
    /// When the caller sent it: the lease it grants starts there.
    sent: Instant,
    /// When the caller's last `read_state` answered.
    read_at: Option<Instant>,
}

/// Who a request came from, and when it is applied.
#[derive(Clone, Copy)]
struct Ctx {
    sid: i64,
    owner: Inc,
    now: Instant,
}

enum Wait<T> {
    Ready(T),
    /// Look again after the next change of the state, or at this instant.
    Until(Option<Instant>),
}

type Observer = Arc<dyn Fn(&Fact) + Send + Sync>;

struct State {
    cfg: StoreConfig,
    t0: Instant,
    /// Every request or reply lost on the way (the model's `loss`): when, and whose.
    losses: Vec<(Instant, usize)>,
    rng: SimRng,
    /// TTL mode: the store's clock runs at `1 + drift` and has jumped by `stepped`.
    drift: f64,
    stepped: Duration,
    steps_left: u32,
    zxid: u64,
    next_session: i64,
    /// Every session ever opened (a run opens a few hundred at most).
    sessions: BTreeMap<i64, Sess>,
    lock: Option<Lock>,
    breadcrumb: Option<(NodeRecord, i64)>,
    control: Option<(Control, i64)>,
    members: BTreeMap<String, Member>,
    /// Newest first, and the version.
    history: Option<(Vec<HistoryEntry>, i64)>,
    set_aside: BTreeMap<String, Vec<HistoryEntry>>,
    /// SPEC §3a, ZooKeeper's `<base>/floor`: each node's greatest `epoch_seen`, for good,
    /// and its znode version.
    floor: BTreeMap<String, u64>,
    floor_version: i64,
    /// ZooKeeper's `<base>/epoch`: the zxid of its last write (its mzxid: set only by the
    /// multi-op that creates the lock, and by `init --force`), its version (-1 while it
    /// does not exist: a new, wiped or restored ensemble), and the offset `init --force`
    /// raised every later epoch by. A lock's epoch is its czxid plus it.
    counter: u64,
    counter_version: i64,
    offset: u64,
    /// Seeds with store faults: the persistent state after each of the last writes, for
    /// [`SimStore::forget`]; the first is what `warden init` left.
    snapshots: Option<VecDeque<Snap>>,
    /// Replies sent before this instant come back this much later (a store that answers
    /// after the caller's `op_timeout`, its writes applied).
    slow: Option<(Instant, Duration)>,
    /// TTL mode: how far the store's clock was stepped back.
    stepped_back: Duration,
    up: bool,
    cut_off: BTreeSet<usize>,
    dead: BTreeSet<Inc>,
    frozen: BTreeSet<Inc>,
    facts: Vec<Fact>,
    observer: Option<Observer>,
    /// Wakes every waiter after a change it may wait for. A `Notify`, not a `watch`:
    /// tokio's `watch` spreads its waiters over eight `Notify`s picked by the runtime's
    /// unseeded RNG, so the waiters of one change resumed in a different order from run
    /// to run and a seed did not replay (a frozen node's calls, released together at its
    /// thaw, reached the store in a random order and drew other latencies).
    changes: Arc<Notify>,
    changed: bool,
    /// Redis mode: the keyspace and what the facts need to know of its clients.
    redis: redis_wire::RedisSide,
    /// ZooKeeper wire mode: the znode tree, its watches.
    zk: zk_wire::ZkSide,
    /// MySQL mode: the tables, and what the facts need to know of its sessions.
    mysql: mysql_wire::MysqlSide,
}

impl State {
    fn sess(&self, sid: i64) -> &Sess {
        self.sessions.get(&sid).expect("sessions are never removed")
    }

    fn sess_mut(&mut self, sid: i64) -> &mut Sess {
        self.sessions
            .get_mut(&sid)
            .expect("sessions are never removed")
    }

    fn latency(&mut self) -> Duration {
        let (lo, hi) = self.cfg.latency;
        between(&mut self.rng, lo, hi)
    }

    /// The clock expiries are measured on, as an offset from the start: real time for
    /// ZooKeeper, the store's own drifting and jumping clock for TTL leases.
    fn expiry_clock(&self, at: Instant) -> Duration {
        let real = at.saturating_duration_since(self.t0);
        match self.cfg.sessions {
            Sessions::Zk => real,
            Sessions::Ttl { .. } => {
                (real.mul_f64(1.0 + self.drift) + self.stepped).saturating_sub(self.stepped_back)
            }
        }
    }

    /// ZooKeeper's `ExpiryQueue.roundToNextInterval`: `granted` after `clock`, on the next
    /// tick boundary.
    fn deadline_after(&self, clock: Duration) -> Duration {
        let tick = self.cfg.tick.as_nanos();
        let t = (clock + self.cfg.granted).as_nanos();
        Duration::from_nanos(((t / tick + 1) * tick) as u64)
    }

    /// The node's link to the store works.
    fn link(&self, node: usize) -> bool {
        !self.cut_off.contains(&node)
    }

    /// What the store sends can reach the process (frozen: it waits in the kernel).
    fn reaches(&self, who: Inc) -> bool {
        self.link(who.0) && !self.dead.contains(&who)
    }

    /// The client of `sid` is connected, so it pings.
    fn connected(&self, sid: i64) -> bool {
        let s = self.sess(sid);
        self.up
            && s.open
            && s.lost_at.is_none()
            && self.reaches(s.owner)
            && !self.frozen.contains(&s.owner)
    }

    /// A contact of `sid` with the store at `at`.
    fn touch(&mut self, sid: i64, at: Instant) {
        let deadline = self.deadline_after(self.expiry_clock(at));
        let s = self.sess_mut(sid);
        if s.server == Server::Alive {
            s.contact = at;
            s.deadline = deadline;
        }
    }

    /// Brings the store up to `now`: the pings of the connections that stayed up, the
    /// expiries that are due, the handshake of clients that just connected, and what
    /// clients learn by it.
    fn refresh(&mut self, now: Instant) {
        // Each loop reads the sessions in one pass and acts after it, in the same order as
        // one lookup per session would (an action changes only its own session's contact,
        // deadline and loss, which no later check reads): a `with` runs this twice, and a
        // run opens a few hundred sessions, so the lookups were most of a seed's time.
        // Redis: no sessions at the store (only connections), its keys' TTLs alone.
        if self.cfg.redis {
            if self.up {
                self.redis_sweep(now);
            }
            return;
        }
        if self.cfg.mysql {
            if self.up {
                self.mysql_sweep(now);
            }
            return;
        }
        let ping = self.cfg.granted / 3;
        if !ping.is_zero() {
            let pinged: Vec<(i64, Instant)> = self
                .sessions
                .iter()
                .filter(|(_, s)| s.server == Server::Alive && s.connected)
                .filter_map(|(&sid, s)| {
                    let pings =
                        now.saturating_duration_since(s.contact).as_nanos() / ping.as_nanos();
                    (pings > 0).then(|| {
                        (
                            sid,
                            s.contact + Duration::from_nanos((ping.as_nanos() * pings) as u64),
                        )
                    })
                })
                .collect();
            for (sid, last) in pinged {
                self.touch(sid, last);
            }
        }
        // A store without quorum deletes nothing.
        if self.up {
            let clock = self.expiry_clock(now);
            let due: Vec<i64> = self
                .sessions
                .iter()
                .filter(|(_, s)| s.server == Server::Alive && s.deadline <= clock)
                .map(|(&sid, _)| sid)
                .collect();
            for sid in due {
                self.end_session(sid, true, now);
            }
        }
        let up = self.up;
        let (cut_off, dead, frozen) = (&self.cut_off, &self.dead, &self.frozen);
        let mut contact = Vec::new();
        let mut told = Vec::new();
        for (&sid, s) in self.sessions.iter_mut() {
            // A Redis connection has no session to keep alive or to lose.
            if s.server == Server::Raw {
                continue;
            }
            // `connected(sid)`, on the session at hand.
            let connected = up
                && s.open
                && s.lost_at.is_none()
                && !cut_off.contains(&s.owner.0)
                && !dead.contains(&s.owner)
                && !frozen.contains(&s.owner);
            let was = std::mem::replace(&mut s.connected, connected);
            if !connected {
                continue;
            }
            // Connected while opening: the client's first connection.
            let reconnect = std::mem::replace(&mut s.ever_connected, true);
            match s.server {
                // The client (re)connects: that is a contact.
                Server::Alive if !was => {
                    if reconnect {
                        s.reconnects += 1;
                    }
                    contact.push(sid)
                }
                // Connecting, it is told the session is gone.
                Server::Ended if s.lost_at.is_none() => told.push(sid),
                _ => {}
            }
        }
        for sid in contact {
            self.touch(sid, now);
        }
        for sid in told {
            let at = now + self.latency();
            self.sess_mut(sid).lost_at = Some(at);
            self.changed = true;
        }
    }

    /// Ends a session (expiry, or its client's close): its lock and member records go.
    fn end_session(&mut self, sid: i64, expired: bool, now: Instant) {
        let s = self.sess_mut(sid);
        if s.server != Server::Alive {
            return;
        }
        s.server = Server::Ended;
        // Whatever was on its way is not delivered: an expired session hears only that.
        s.outbox.clear();
        s.control_watch = false;
        s.breadcrumb_watch = false;
        s.lock_watch = None;
        self.zxid += 1;
        if self.cfg.zk_wire {
            self.zk_end_session(sid, expired, now);
            self.changed = true;
            return;
        }
        if self.lock.as_ref().is_some_and(|l| l.session == sid) {
            self.delete_lock(expired, now);
        }
        self.members.retain(|_, m| m.session != sid);
        self.changed = true;
    }

    fn delete_lock(&mut self, expired: bool, now: Instant) {
        let Some(lock) = self.lock.take() else {
            return;
        };
        self.facts.push(Fact::LockGone {
            node: lock.owner.0,
            inc: lock.owner.1,
            expired,
            at: now,
        });
        self.fire_lock_watches(true, true, now);
        self.changed = true;
    }

    /// Fires the lock's data watches (`on_data`: its data was set or it was deleted) or
    /// its exists watches (it was created).
    fn fire_lock_watches(&mut self, on_data: bool, deleted: bool, now: Instant) {
        let mut fired = Vec::new();
        for (sid, s) in self.sessions.iter_mut() {
            if s.server != Server::Alive {
                continue;
            }
            if let Some(w) = s.lock_watch.filter(|w| w.on_data == on_data) {
                s.lock_watch = None;
                fired.push((*sid, w.join));
            }
        }
        for (sid, join) in fired {
            self.push_note(sid, Note::Lock { join, deleted }, now);
        }
    }

    fn fire_control_watches(&mut self, now: Instant) {
        let fired: Vec<i64> = self
            .sessions
            .iter_mut()
            .filter(|(_, s)| s.server == Server::Alive && s.control_watch)
            .map(|(sid, s)| {
                s.control_watch = false;
                *sid
            })
            .collect();
        for sid in fired {
            self.push_note(sid, Note::ControlChanged, now);
        }
    }

    fn fire_breadcrumb_watches(&mut self, now: Instant) {
        let fired: Vec<i64> = self
            .sessions
            .iter_mut()
            .filter(|(_, s)| s.server == Server::Alive && s.breadcrumb_watch)
            .map(|(sid, s)| {
                s.breadcrumb_watch = false;
                *sid
            })
            .collect();
        for sid in fired {
            self.push_note(sid, Note::BreadcrumbChanged, now);
        }
    }

    fn push_note(&mut self, sid: i64, note: Note, now: Instant) {
        let at = self.reply_at(sid, now);
        self.sess_mut(sid).outbox.push_back((at, note));
        self.changed = true;
    }

    /// When something the store sends `sid` at `now` gets there (if the link is up then).
    fn reply_at(&mut self, sid: i64, now: Instant) -> Instant {
        let slow = match self.slow {
            Some((until, extra)) if now < until => extra,
            _ => Duration::ZERO,
        };
        let lat = self.latency() + slow;
        let s = self.sess_mut(sid);
        s.next_reply = (now + lat).max(s.next_reply);
        s.next_reply
    }

    /// Puts a request of `sid` on the wire at `now`: `apply` runs when it arrives, if the
    /// store is up and the node's link works then, and its answer comes back on the
    /// receiver with the instant it gets there. Returns no job when the request cannot
    /// leave (store down, link cut) or is lost on the way; a lost reply drops the sender.
    fn request<T: Send + 'static>(
        &mut self,
        sid: i64,
        now: Instant,
        apply: impl FnOnce(&mut State, Instant) -> T + Send + 'static,
    ) -> (Option<Job>, Reply<T>) {
        let (tx, rx) = oneshot::channel();
        let owner = self.sess(sid).owner;
        if !self.up || !self.link(owner.0) {
            return (None, rx);
        }
        let lat = self.latency();
        let s = self.sess_mut(sid);
        let at = (now + lat).max(s.next_arrival);
        s.next_arrival = at;
        let lost = self.rng.chance(self.cfg.loss);
        if lost {
            self.losses.push((now, owner.0));
        }
        if lost && self.rng.chance(0.5) {
            return (None, rx);
        }
        let run = move |st: &mut State, now: Instant| {
            if !st.up || !st.link(owner.0) {
                return;
            }
            let out = apply(st, now);
            if !lost {
                let at = st.reply_at(sid, now);
                let _ = tx.send((out, at));
            }
        };
        (
            Some(Job {
                at,
                run: Box::new(run),
            }),
            rx,
        )
    }

    fn open_session(&mut self, sid: i64, now: Instant) {
        self.zxid += 1;
        self.sess_mut(sid).server = Server::Alive;
        self.touch(sid, now);
    }

    fn maybe_step(&mut self) {
        if let Sessions::Ttl { max_step, .. } = self.cfg.sessions {
            if self.steps_left > 0 && self.rng.chance(STEP_CHANCE) {
                self.steps_left -= 1;
                self.stepped += between(&mut self.rng, Duration::ZERO, max_step);
                self.changed = true;
            }
        }
    }

    fn publish(&mut self) {
        if std::mem::take(&mut self.changed) {
            self.changes.notify_waiters();
        }
    }

    // ----- the facts the backends' own wires share ------------------------------------

    /// `owner`'s lock went: released, replaced, or (`expired`) its session or lease ended.
    pub(super) fn lock_gone(&mut self, owner: Option<Inc>, expired: bool, at: Instant) {
        if let Some(o) = owner {
            self.facts.push(Fact::LockGone {
                node: o.0,
                inc: o.1,
                expired,
                at,
            });
        }
    }

    /// The breadcrumb as it is now, whatever the backend.
    pub(super) fn breadcrumb_now(&self, now: Instant) -> Option<NodeRecord> {
        if self.cfg.redis {
            return self.redis_breadcrumb(now).and_then(|(b, _)| b.ok());
        }
        if self.cfg.mysql {
            return self.mysql_breadcrumb().and_then(|b| b.ok());
        }
        if self.cfg.zk_wire {
            return self.zk_breadcrumb();
        }
        self.breadcrumb.as_ref().map(|(r, _)| r.clone())
    }

    /// `owner` took the lock at `epoch`.
    pub(super) fn lock_taken(&mut self, owner: Option<Inc>, epoch: Epoch, at: Instant) {
        if let Some(o) = owner {
            let crumb = self.breadcrumb_now(at);
            self.facts.push(Fact::LockTaken {
                node: o.0,
                inc: o.1,
                epoch,
                at,
                crumb,
            });
        }
    }

    /// A renewal (or a commit) of `owner`, sent at `sent`, applied.
    pub(super) fn renewed(&mut self, owner: Inc, sent: Instant, at: Instant) {
        self.facts.push(Fact::Renewed {
            node: owner.0,
            inc: owner.1,
            sent,
            at,
        });
    }

    /// `owner` committed the breadcrumb `after` over `before` (raw), on `control`, having
    /// read control at `read_at`.
    pub(super) fn committed(
        &mut self,
        owner: Inc,
        (before, after): (Option<&[u8]>, Option<&[u8]>),
        control: Control,
        read_at: Option<Instant>,
        at: Instant,
    ) {
        let parsed = |b: Option<&[u8]>| b.and_then(|b| warden::record::parse::<NodeRecord>(b).ok());
        if let Some(record) = parsed(after) {
            let positions = self.positions_now(at);
            self.facts.push(Fact::Commit {
                node: owner.0,
                inc: owner.1,
                epoch: record.epoch.unwrap_or_default(),
                replaced: parsed(before),
                record,
                at,
                control,
                read_at,
                positions,
            });
        }
    }

    /// Each member record's position as stored now, by node index, whatever the backend.
    fn positions_now(&self, now: Instant) -> BTreeMap<usize, Option<u64>> {
        let records: Vec<MemberRecord> = if self.cfg.redis {
            self.redis_members(now).into_values().collect()
        } else if self.cfg.mysql {
            self.mysql_members(now).into_values().collect()
        } else if self.cfg.zk_wire {
            self.zk_members().into_values().collect()
        } else {
            self.members.values().map(|m| m.record.clone()).collect()
        };
        records
            .into_iter()
            .filter_map(|m| {
                let n: usize = m.node.node_id.strip_prefix('n')?.parse().ok()?;
                Some((n.checked_sub(1)?, m.position))
            })
            .collect()
    }

    /// A write of `owner` other than a commit changed the breadcrumb from `before` to
    /// `after` (raw): deleted it, or (`recorded`: a rewrite by its holder) recorded the
    /// service.
    pub(super) fn crumb_changed(
        &mut self,
        owner: Inc,
        (before, after): (Option<&[u8]>, Option<&[u8]>),
        recorded: bool,
        at: Instant,
    ) {
        let parsed = |b: &[u8]| warden::record::parse::<NodeRecord>(b).ok();
        match (before, after) {
            (Some(d), None) => {
                if let Some(record) = parsed(d) {
                    self.facts.push(Fact::BreadcrumbDeleted {
                        by: Some(owner),
                        record,
                        at,
                    });
                }
            }
            (_, Some(d)) if recorded => {
                if let Some(record) = parsed(d) {
                    self.facts.push(Fact::Recorded {
                        node: owner.0,
                        inc: owner.1,
                        record,
                        at,
                    });
                }
            }
            _ => {}
        }
    }

    // ----- the store's operations, as applied on arrival ------------------------------

    fn lock_stat(&self) -> Option<LockStat> {
        self.lock.as_ref().map(|l| LockStat {
            session: l.session,
            version: l.version,
            czxid: l.czxid,
            epoch: l.record.epoch,
        })
    }

    /// The greatest `epoch_seen` in the member records (SPEC §3a).
    fn members_epoch_seen(&self) -> Option<u64> {
        self.members
            .values()
            .filter_map(|m| m.record.node.epoch_seen)
            .max()
    }

    /// The backend's check of the lock in its multi-ops: `check_version(lock, held)`,
    /// where ZooKeeper's -1 (`None`) only asks that it exists.
    fn lock_at(&self, held: Option<i64>) -> bool {
        self.lock
            .as_ref()
            .is_some_and(|l| held.is_none_or(|v| v == l.version))
    }

    fn control_value(&self) -> Control {
        self.control
            .as_ref()
            .map(|(c, _)| c.clone())
            .unwrap_or_default()
    }

    /// The join's multi-op: check the floor at the version read, set the counter at the
    /// version read (its mzxid becomes the lock's czxid), create the lock. `czxid` in
    /// [`Lock`] is the epoch: the zxid plus the counter's offset.
    fn create_lock(
        &mut self,
        c: Ctx,
        record: NodeRecord,
        versions: Option<(i64, i64)>,
    ) -> Result<Created, StoreError> {
        if let Some((floor, counter)) = versions {
            // (No counter: the multi-op's set fails, NoNode, and the join tries again.)
            if floor != self.floor_version || counter != self.counter_version || counter < 0 {
                return Ok(Created::Moved);
            }
        }
        if self.lock.is_some() {
            return Ok(Created::Exists);
        }
        self.zxid += 1;
        self.counter = self.zxid;
        self.counter_version += 1;
        let epoch = self.zxid + self.offset;
        self.lock = Some(Lock {
            session: c.sid,
            owner: c.owner,
            record,
            czxid: epoch,
            version: 0,
        });
        self.fire_lock_watches(false, false, c.now);
        let crumb = self.breadcrumb_now(c.now);
        self.facts.push(Fact::LockTaken {
            node: c.owner.0,
            inc: c.owner.1,
            epoch,
            at: c.now,
            crumb,
        });
        Ok(Created::Taken(self.lock_stat().expect("just created")))
    }

    /// `zookeeper.rs` `raise_floor` (one read and one conditional write there; one step
    /// here, which is what the version check makes of it), then what `read_counter`
    /// returns: the floor's greatest entry and whose, its version, the counter (the
    /// greatest epoch the store remembers: the counter's, the lock's, the breadcrumb's,
    /// history's newest) and the counter's version.
    fn raise_floor(&mut self, node: &str, seen: Option<u64>) -> JoinRead {
        if let Some(seen) = seen.filter(|&e| e < warden::coord::MAX_KEPT_EPOCH) {
            if self.floor.get(node).is_none_or(|&kept| kept < seen) {
                self.floor.insert(node.to_string(), seen);
                self.floor_version += 1;
                self.zxid += 1;
            }
        }
        JoinRead {
            floor: self.floor_max(),
            floor_version: self.floor_version,
            counter: self.counter_epoch(),
            counter_version: self.counter_version,
        }
    }

    fn floor_max(&self) -> Option<(u64, String)> {
        self.floor
            .iter()
            .map(|(n, e)| (*e, n.clone()))
            .filter(|(e, _)| *e < warden::coord::MAX_KEPT_EPOCH)
            .max()
    }

    /// `zookeeper.rs` `counter_of`.
    fn counter_epoch(&self) -> u64 {
        let history = history_of(self.history.as_ref().map(|(e, _)| e.clone()));
        [
            (self.counter_version >= 0).then_some(self.counter + self.offset),
            self.lock.as_ref().and_then(|l| l.record.epoch),
            self.breadcrumb.as_ref().and_then(|(b, _)| b.epoch),
            newest_promotion(&history),
        ]
        .into_iter()
        .flatten()
        .filter(|&e| e < warden::coord::MAX_KEPT_EPOCH)
        .max()
        .unwrap_or(0)
    }

    /// The persistent state now, for a later restore.
    fn snap(&self, now: Instant) -> Snap {
        Snap {
            at: now,
            zxid: self.zxid,
            lock: self.lock.clone(),
            breadcrumb: self.breadcrumb.clone(),
            control: self.control.clone(),
            members: self.members.clone(),
            history: self.history.clone(),
            set_aside: self.set_aside.clone(),
            floor: self.floor.clone(),
            floor_version: self.floor_version,
            counter: self.counter,
            counter_version: self.counter_version,
            offset: self.offset,
            sessions: self
                .sessions
                .iter()
                .filter(|(_, s)| s.server == Server::Alive)
                .map(|(sid, _)| *sid)
                .collect(),
            keyspace: self.redis.keyspace.clone(),
            ztree: self.zk.tree.clone(),
            tables: self.mysql.tables.clone(),
        }
    }

    /// Keeps a snapshot after each write (seeds with store faults only).
    fn keep_snapshot(&mut self, now: Instant) {
        let due = match &self.snapshots {
            Some(q) => q.back().is_none_or(|s| s.zxid != self.zxid),
            None => false,
        };
        if due {
            let snap = self.snap(now);
            let q = self.snapshots.as_mut().expect("checked");
            if q.len() > SNAPSHOTS {
                // The first is what `warden init` left, for a wipe.
                q.remove(1);
            }
            q.push_back(snap);
        }
    }

    /// The store comes back from `snap`: its items as they were then; of its sessions,
    /// those alive then are alive again with a full timeout (a new leader's; their
    /// clients reconnect, and one that had learned its session was gone never pings it
    /// again, so it expires), the rest ended. Every watch fires, as a reconnecting client
    /// reads again.
    fn restore(&mut self, snap: Snap, keep_sessions: bool, now: Instant) {
        if self.cfg.redis {
            self.redis_restore(snap, now);
            return;
        }
        if self.cfg.mysql {
            self.mysql_restore(snap, now);
            return;
        }
        let ztree = self.cfg.zk_wire.then(|| snap.clone());
        let before = self.lock.as_ref().map(|l| (l.owner, l.czxid));
        let after = snap.lock.as_ref().map(|l| (l.owner, l.czxid));
        if let Some((owner, _)) = before.filter(|b| Some(*b) != after) {
            self.facts.push(Fact::LockGone {
                node: owner.0,
                inc: owner.1,
                expired: true,
                at: now,
            });
        }
        self.zxid = snap.zxid;
        self.lock = snap.lock;
        self.breadcrumb = snap.breadcrumb;
        self.control = snap.control;
        self.members = snap.members;
        self.history = snap.history;
        self.set_aside = snap.set_aside;
        self.floor = snap.floor;
        self.floor_version = snap.floor_version;
        self.counter = snap.counter;
        self.counter_version = snap.counter_version;
        self.offset = snap.offset;
        let sids: Vec<i64> = self.sessions.keys().copied().collect();
        for sid in sids {
            let alive = keep_sessions && snap.sessions.contains(&sid);
            let s = self.sess_mut(sid);
            if alive && s.server != Server::Opening {
                // A client that never learned its session had ended still holds its
                // standing watch on `control`, and sets it again on reconnecting (seed
                // 86916 at stop 35: cleared with the ended session, it was never fired,
                // and a node cut off through a `resume` stayed out for good).
                if s.server == Server::Ended && s.lost_at.is_none() {
                    s.control_watch = true;
                    s.breadcrumb_watch = true;
                }
                s.server = Server::Alive;
                s.connected = false;
                self.touch(sid, now);
            } else if s.server == Server::Alive {
                s.server = Server::Ended;
                s.outbox.clear();
                s.control_watch = false;
                s.breadcrumb_watch = false;
                s.lock_watch = None;
            }
        }
        if let Some(snap) = ztree {
            self.zk_restore(&snap, now);
            if let Some(q) = &mut self.snapshots {
                while q.len() > 1 && q.back().is_some_and(|s| s.zxid > self.zxid) {
                    q.pop_back();
                }
            }
            self.changed = true;
            return;
        }
        let alive: BTreeSet<i64> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.server == Server::Alive)
            .map(|(sid, _)| *sid)
            .collect();
        self.members.retain(|_, m| alive.contains(&m.session));
        if self
            .lock
            .as_ref()
            .is_some_and(|l| !alive.contains(&l.session))
        {
            self.lock = None;
        }
        // A reconnecting client sets its watches again with the last zxid it saw, and the
        // server fires those whose node changed since: all of them, here (a spurious
        // event only makes the client read again).
        self.fire_control_watches(now);
        self.fire_breadcrumb_watches(now);
        let deleted = self.lock.is_none();
        self.fire_lock_watches(true, deleted, now);
        if !deleted {
            self.fire_lock_watches(false, false, now);
        }
        if let Some(q) = &mut self.snapshots {
            while q.len() > 1 && q.back().is_some_and(|s| s.zxid > self.zxid) {
                q.pop_back();
            }
        }
        self.changed = true;
    }

    fn delete_lock_at(&mut self, version: i64, now: Instant) -> Result<(), StoreError> {
        match &self.lock {
            Some(l) if l.version == version => {
                self.zxid += 1;
                self.delete_lock(false, now);
                Ok(())
            }
            Some(_) => Err(rejected("lock", "BadVersion")),
            None => Err(rejected("lock", "NoNode")),
        }
    }

    /// multi: check control's version, set the lock's data (at the version held), set the
    /// breadcrumb at its version or create it.
    fn commit(&mut self, c: Ctx, p: Commit) -> Result<(), StoreError> {
        let Commit {
            record,
            breadcrumb_version,
            control_version,
            held,
            sent,
            read_at,
        } = p;
        if self.control.as_ref().map(|(_, v)| *v) != Some(control_version) {
            return Err(rejected("control", "BadVersion"));
        }
        if !self.lock_at(held) {
            return Err(rejected("lock", "BadVersion"));
        }
        match (breadcrumb_version, &self.breadcrumb) {
            (Some(v), Some((_, cur))) if v == *cur => {}
            (None, None) => {}
            _ => return Err(rejected("breadcrumb", "BadVersion")),
        }
        // Every store's commit: the floor as it is at the commit, not at the takeover's
        // read (`tests/commit_floor.rs`). One step here, so the check is the comparison.
        let current = self.breadcrumb.as_ref().map(|(b, _)| b);
        if FLOOR_AT_COMMIT
            && warden::coord::floor_refuses(self.floor_max().map(|(e, _)| e), &record, current)
        {
            return Err(rejected("floor", "BadVersion"));
        }
        self.zxid += 1;
        let lock = self.lock.as_mut().expect("checked");
        lock.record = record.clone();
        lock.version += 1;
        let replaced = self.breadcrumb.take();
        let version = replaced.as_ref().map_or(0, |(_, v)| v + 1);
        self.breadcrumb = Some((record.clone(), version));
        self.fire_breadcrumb_watches(c.now);
        let positions = self.positions_now(c.now);
        self.facts.push(Fact::Commit {
            node: c.owner.0,
            inc: c.owner.1,
            epoch: record.epoch.unwrap_or_default(),
            replaced: replaced.map(|(r, _)| r),
            record,
            at: c.now,
            control: self.control_value(),
            read_at,
            positions,
        });
        self.fire_lock_watches(true, false, c.now);
        self.facts.push(Fact::Renewed {
            node: c.owner.0,
            inc: c.owner.1,
            sent,
            at: c.now,
        });
        Ok(())
    }

    /// multi: check the lock at the version held, set our member record.
    fn renew(
        &mut self,
        c: Ctx,
        member: MemberRecord,
        held: Option<i64>,
        sent: Instant,
    ) -> Result<(), StoreError> {
        if !self.lock_at(held) {
            return Err(rejected("lock", "BadVersion"));
        }
        self.set_member(member)?;
        self.facts.push(Fact::Renewed {
            node: c.owner.0,
            inc: c.owner.1,
            sent,
            at: c.now,
        });
        Ok(())
    }

    /// multi: check the lock at the version held, set the breadcrumb at `version`.
    fn record_service(
        &mut self,
        c: Ctx,
        record: NodeRecord,
        version: i64,
        held: Option<i64>,
    ) -> Result<(), StoreError> {
        if !self.lock_at(held) {
            return Err(rejected("lock", "BadVersion"));
        }
        match &mut self.breadcrumb {
            Some((cur, v)) if *v == version => {
                *cur = record.clone();
                *v += 1;
            }
            _ => return Err(rejected("breadcrumb", "BadVersion")),
        }
        self.zxid += 1;
        self.fire_breadcrumb_watches(c.now);
        self.facts.push(Fact::Recorded {
            node: c.owner.0,
            inc: c.owner.1,
            record,
            at: c.now,
        });
        Ok(())
    }

    /// multi: check the lock at the version held; write `record` as the breadcrumb at
    /// `version` (create it when `None`).
    fn restore_breadcrumb(
        &mut self,
        now: Instant,
        record: NodeRecord,
        version: Option<i64>,
        held: Option<i64>,
    ) -> Result<(), StoreError> {
        if !self.lock_at(held) {
            return Err(rejected("lock", "BadVersion"));
        }
        match (&mut self.breadcrumb, version) {
            (Some((cur, v)), Some(want)) if *v == want => {
                *cur = record;
                *v += 1;
            }
            (None, None) => self.breadcrumb = Some((record, 0)),
            (Some(_), None) => return Err(rejected("breadcrumb", "NodeExists")),
            _ => return Err(rejected("breadcrumb", "BadVersion")),
        }
        self.zxid += 1;
        self.fire_breadcrumb_watches(now);
        Ok(())
    }

    /// multi: with `lock_check` (the version held), check the lock at that version;
    /// delete the breadcrumb at `version`.
    fn delete_breadcrumb(
        &mut self,
        c: Ctx,
        version: i64,
        lock_check: Option<Option<i64>>,
    ) -> Result<(), StoreError> {
        if lock_check.is_some_and(|held| !self.lock_at(held)) {
            return Err(rejected("lock", "BadVersion"));
        }
        match &self.breadcrumb {
            Some((_, v)) if *v == version => {}
            _ => return Err(rejected("breadcrumb", "BadVersion")),
        }
        self.zxid += 1;
        let (record, _) = self.breadcrumb.take().expect("checked");
        self.fire_breadcrumb_watches(c.now);
        self.facts.push(Fact::BreadcrumbDeleted {
            by: Some(c.owner),
            record,
            at: c.now,
        });
        Ok(())
    }

    fn create_member(&mut self, c: Ctx, m: MemberRecord) -> Result<(), StoreError> {
        // `keep_seen`: the node's entry of the floor first.
        self.raise_floor(&m.node.node_id, m.node.epoch_seen);
        if self.members.contains_key(&m.node.node_id) {
            return Err(rejected("member", "NodeExists"));
        }
        self.zxid += 1;
        self.members.insert(
            m.node.node_id.clone(),
            Member {
                session: c.sid,
                record: m,
                version: 0,
            },
        );
        Ok(())
    }

    /// `set_data(members/<id>)` at any version: whoever owns it, as ZooKeeper allows.
    fn set_member(&mut self, m: MemberRecord) -> Result<(), StoreError> {
        self.raise_floor(&m.node.node_id, m.node.epoch_seen);
        let Some(member) = self.members.get_mut(&m.node.node_id) else {
            // `ZkSession::member_gone`: the client ends the session (as the polled
            // backends' keepalive does).
            return Err(StoreError::SessionLost(format!(
                "NoNode at {BASE}/member: the member znode is gone"
            )));
        };
        member.record = m;
        member.version += 1;
        self.zxid += 1;
        Ok(())
    }

    fn create_control(&mut self, now: Instant) -> Result<(), StoreError> {
        if self.control.is_some() {
            return Err(rejected("control", "NodeExists"));
        }
        self.put_control(Control::default(), now);
        Ok(())
    }

    /// Sets control at `version`, or creates it when `None`.
    fn write_control(
        &mut self,
        control: Control,
        version: Option<i64>,
        now: Instant,
    ) -> Result<(), StoreError> {
        match (version, &self.control) {
            (Some(v), Some((_, cur))) if v == *cur => {}
            (None, None) => {}
            _ => return Err(rejected("control", "BadVersion or NodeExists")),
        }
        self.put_control(control, now);
        Ok(())
    }

    fn put_control(&mut self, control: Control, now: Instant) {
        let version = self.control.as_ref().map_or(0, |(_, v)| v + 1);
        self.control = Some((control, version));
        self.zxid += 1;
        self.fire_control_watches(now);
    }

    /// Sets history at `version`, or creates it when `None`.
    fn write_history(
        &mut self,
        entries: Vec<HistoryEntry>,
        version: Option<i64>,
    ) -> Result<(), StoreError> {
        let next = match (version, &self.history) {
            (Some(v), Some((_, cur))) if v == *cur => v + 1,
            (None, None) => 0,
            _ => return Err(rejected("history", "BadVersion or NodeExists")),
        };
        self.history = Some((entries, next));
        self.zxid += 1;
        Ok(())
    }

    fn delete_takeover_state(
        &mut self,
        c: Ctx,
        breadcrumb: Option<i64>,
        control: Option<i64>,
    ) -> Result<(), StoreError> {
        let at = |cur: Option<i64>, want: Option<i64>| want.is_none_or(|v| cur == Some(v));
        if !at(self.breadcrumb.as_ref().map(|(_, v)| *v), breadcrumb) {
            return Err(rejected("breadcrumb", "BadVersion"));
        }
        if !at(self.control.as_ref().map(|(_, v)| *v), control) {
            return Err(rejected("control", "BadVersion"));
        }
        self.zxid += 1;
        if breadcrumb.is_some() {
            let (record, _) = self.breadcrumb.take().expect("checked");
            self.fire_breadcrumb_watches(c.now);
            self.facts.push(Fact::BreadcrumbDeleted {
                by: Some(c.owner),
                record,
                at: c.now,
            });
        }
        if control.is_some() {
            self.control = None;
            self.fire_control_watches(c.now);
        }
        Ok(())
    }

    fn move_history_aside(&mut self, version: i64) -> Result<String, StoreError> {
        match &self.history {
            Some((_, v)) if *v == version => {}
            _ => return Err(rejected("history", "BadVersion")),
        }
        self.zxid += 1;
        let name = format!("history.old-{}", self.zxid);
        let (entries, _) = self.history.take().expect("checked");
        self.set_aside.insert(name.clone(), entries);
        Ok(format!("{BASE}/{name}"))
    }

    fn snapshot(&self) -> ClusterSnapshot {
        ClusterSnapshot {
            lock: self.lock.as_ref().map(|l| (Ok(l.record.clone()), l.czxid)),
            lock_owner: self.lock.as_ref().map(|l| SessionId(l.session)),
            breadcrumb: self
                .breadcrumb
                .as_ref()
                .map(|(r, v)| (Ok(r.clone()), Version::new(*v))),
            control: self.control_value(),
            control_version: self.control.as_ref().map(|(_, v)| Version::new(*v)),
            control_unreadable: None,
            marker_missing: false,
            epoch_counter: Some(self.counter_epoch()),
            kept_floor: self.floor_max(),
            counter_unreadable: false,
            // ZooKeeper's lock is ephemeral: an expired one is gone.
            expired_lock_epoch: None,
            garbage: Vec::new(),
            members: self
                .members
                .iter()
                .map(|(id, m)| (id.clone(), Ok(m.record.clone())))
                .collect(),
            member_sessions: self
                .members
                .iter()
                .map(|(id, m)| (id.clone(), SessionId(m.session)))
                .collect(),
            history: history_of(self.history.as_ref().map(|(e, _)| e.clone())),
            set_aside: self
                .set_aside
                .keys()
                .map(|n| format!("{BASE}/{n}"))
                .collect(),
        }
    }
}

/// The history entry of the operator's `fence --confirm` of `record`.
pub(super) fn confirmed_entry(record: &NodeRecord) -> HistoryEntry {
    HistoryEntry {
        at: "2026-01-01T00:00:00Z".into(),
        node_id: record.node_id.clone(),
        from: "breadcrumb".into(),
        to: "confirmed down".into(),
        epoch: record.epoch,
        reason: "confirmed down by the simulation's operator".into(),
    }
}

fn rejected(what: &str, why: &str) -> StoreError {
    StoreError::Rejected(format!("{why} at {BASE}/{what}"))
}

fn history_of(entries: Option<Vec<HistoryEntry>>) -> History {
    History {
        entries: entries.unwrap_or_default(),
        ..History::default()
    }
}

/// `coord/zookeeper.rs` `newest_promotion`: only completed promotions count.
pub fn newest_promotion(history: &History) -> Option<Epoch> {
    history
        .entries
        .iter()
        .filter(|h| h.to == Role::Active.as_str())
        .filter_map(|h| h.epoch)
        .max()
}

/// `record::insert_history` on entries: first (by the order of writes), the newest kept.
fn insert_history(entries: &mut Vec<HistoryEntry>, entry: &HistoryEntry) {
    entries.insert(0, entry.clone());
    entries.truncate(HISTORY_LEN);
}

fn write_outcome(r: Result<(), StoreError>) -> WriteOutcome {
    match r {
        Ok(()) => WriteOutcome::Done,
        Err(StoreError::Rejected(_)) => WriteOutcome::Conflict,
        Err(_) => WriteOutcome::Unknown,
    }
}

/// A version as the backend would send it: ZooKeeper's are never negative.
fn znode_version(v: Version) -> Option<i64> {
    Some(v.get()).filter(|&v| (0..=i64::from(i32::MAX)).contains(&v))
}

/// The simulated store; cheap to clone.
#[derive(Clone)]
pub struct SimStore {
    state: Arc<Mutex<State>>,
}

impl SimStore {
    /// Whether a request of one of `nodes`, or its reply, was lost since `since`.
    pub fn lost_since(&self, since: Instant, nodes: &[usize]) -> bool {
        self.lock()
            .losses
            .iter()
            .any(|(at, node)| *at >= since && nodes.contains(node))
    }

    /// A store as `warden init` leaves it (an empty `control`, nothing else), with its
    /// expiry ticker running. Must be called inside the runtime.
    pub fn new(cfg: StoreConfig, seed: u64) -> SimStore {
        assert!(!cfg.tick.is_zero(), "the store needs a tick");
        let mut rng = SimRng::new(seed);
        let drift = match cfg.sessions {
            Sessions::Ttl { max_drift, .. } => (rng.unit() * 2.0 - 1.0) * max_drift,
            Sessions::Zk => 0.0,
        };
        let t0 = Instant::now();
        let tick = cfg.tick;
        let state = State {
            cfg,
            t0,
            rng,
            drift,
            stepped: Duration::ZERO,
            steps_left: MAX_STEPS,
            losses: Vec::new(),
            // Whatever `warden init` wrote before the run.
            zxid: 100,
            next_session: 0,
            sessions: BTreeMap::new(),
            lock: None,
            breadcrumb: None,
            control: Some((Control::default(), 0)),
            members: BTreeMap::new(),
            history: None,
            set_aside: BTreeMap::new(),
            floor: BTreeMap::new(),
            floor_version: 0,
            counter: 100,
            counter_version: -1,
            offset: 0,
            snapshots: None,
            slow: None,
            stepped_back: Duration::ZERO,
            up: true,
            cut_off: BTreeSet::new(),
            dead: BTreeSet::new(),
            frozen: BTreeSet::new(),
            facts: Vec::new(),
            observer: None,
            changes: Arc::new(Notify::new()),
            changed: false,
            redis: redis_wire::RedisSide::default(),
            zk: zk_wire::ZkSide::default(),
            mysql: mysql_wire::MysqlSide::default(),
        };
        let store = SimStore {
            state: Arc::new(Mutex::new(state)),
        };
        store.quiet(|st, now| {
            if st.cfg.redis {
                st.redis_init(now);
            }
            if st.cfg.mysql {
                st.mysql_init(now);
            }
            if st.cfg.zk_wire {
                st.zk_init();
            }
        });
        spawn_ticker(Arc::downgrade(&store.state), t0, tick);
        store
    }

    /// The connector of one warden process: node index `node`, incarnation `inc`.
    pub fn connector(&self, node: usize, inc: u32) -> SimConnector {
        SimConnector {
            store: self.clone(),
            owner: (node, inc),
        }
    }

    /// The node's network link to the store (a partition when false). While it is cut,
    /// calls get no answer and no ping reaches the store; watch events wait for it.
    pub fn set_reachable(&self, node: usize, reachable: bool) {
        self.with(|st, _| {
            if reachable {
                st.cut_off.remove(&node);
            } else {
                st.cut_off.insert(node);
            }
            st.changed = true;
        });
    }

    /// The store is up (has quorum). While it is down nothing is answered or applied.
    pub fn set_up(&self, up: bool) {
        self.with(|st, now| {
            if up && !st.up && st.cfg.sessions == Sessions::Zk {
                st.up = true;
                let alive: Vec<i64> = st
                    .sessions
                    .iter()
                    .filter(|(_, s)| s.server == Server::Alive)
                    .map(|(sid, _)| *sid)
                    .collect();
                for sid in alive {
                    st.touch(sid, now);
                }
            }
            st.up = up;
            st.changed = true;
        });
    }

    /// Process `inc` of `node` died (kill -9, reboot): its calls never return, it pings
    /// no more and closes nothing; its sessions expire by themselves. Requests it sent
    /// before are still on the wire and land.
    pub fn kill(&self, node: usize, inc: u32) {
        self.with(|st, _| {
            st.dead.insert((node, inc));
            st.changed = true;
        });
    }

    /// The process is frozen (SIGSTOP): no pings; its calls are not sent until it is
    /// thawed, and answers wait for it.
    pub fn set_frozen(&self, node: usize, inc: u32, frozen: bool) {
        self.with(|st, _| {
            if frozen {
                st.frozen.insert((node, inc));
            } else {
                st.frozen.remove(&(node, inc));
            }
            st.changed = true;
        });
    }

    /// The breadcrumb as it is now.
    pub fn breadcrumb(&self) -> Option<NodeRecord> {
        self.quiet(|st, now| st.breadcrumb_now(now))
    }

    /// The lock's holder (node, incarnation) and its epoch, as it is now.
    pub fn lock_holder(&self) -> Option<(usize, u32, Epoch)> {
        self.quiet(|st, now| {
            if st.cfg.redis {
                return st.redis_lock_holder(now);
            }
            if st.cfg.mysql {
                return st.mysql_lock_holder(now);
            }
            if st.cfg.zk_wire {
                return st.zk_lock_holder();
            }
            st.lock.as_ref().map(|l| (l.owner.0, l.owner.1, l.czxid))
        })
    }

    /// The member records as they are now, by node id: what `status` shows.
    pub fn member_records(&self) -> BTreeMap<String, MemberRecord> {
        self.quiet(|st, now| {
            if st.cfg.redis {
                return st.redis_members(now);
            }
            if st.cfg.mysql {
                return st.mysql_members(now);
            }
            if st.cfg.zk_wire {
                return st.zk_members();
            }
            st.members
                .iter()
                .map(|(id, m)| (id.clone(), m.record.clone()))
                .collect()
        })
    }

    /// `control` as it is now (an absent one reads as the default, as the daemons read it).
    pub fn control(&self) -> Control {
        self.quiet(|st, now| {
            if st.cfg.redis {
                return st.redis_control(now);
            }
            if st.cfg.mysql {
                return st.mysql_control();
            }
            if st.cfg.zk_wire {
                return st.zk_control_now();
            }
            st.control_value()
        })
    }

    /// The simulated operator replaces control (`warden pause`, `warden failover`): its
    /// version grows and its watches fire.
    pub fn set_control(&self, control: Control) {
        self.with(|st, now| {
            if st.cfg.redis {
                st.redis_set_control(control, now);
            } else if st.cfg.mysql {
                st.mysql_set_control(control);
            } else if st.cfg.zk_wire {
                st.zk_set_control(control, now);
            } else {
                st.put_control(control, now);
            }
        });
    }

    /// The simulated operator's `warden fence --confirm`: the breadcrumb goes, whatever it
    /// names.
    pub fn confirm_fenced(&self) {
        self.with(|st, now| {
            if st.cfg.redis {
                st.redis_confirm_fenced(now);
                return;
            }
            if st.cfg.mysql {
                st.mysql_confirm_fenced(now);
                return;
            }
            if st.cfg.zk_wire {
                st.zk_confirm_fenced(now);
                return;
            }
            if let Some((record, _)) = st.breadcrumb.take() {
                st.zxid += 1;
                st.fire_breadcrumb_watches(now);
                // As `warden fence --confirm` records it (src/ops/fence.rs).
                let entry = confirmed_entry(&record);
                match &mut st.history {
                    Some((entries, version)) => {
                        entries.insert(0, entry);
                        *version += 1;
                    }
                    None => st.history = Some((vec![entry], 0)),
                }
                st.facts.push(Fact::BreadcrumbDeleted {
                    by: None,
                    record,
                    at: now,
                });
            }
        });
    }

    /// Every fact since the last call, in the order applied (none once an observer is set:
    /// they go to it instead).
    pub fn take_facts(&self) -> Vec<Fact> {
        self.quiet(|st, _| std::mem::take(&mut st.facts))
    }

    /// Hands every fact from now on to `observer` as it is applied, right after the write,
    /// outside the store's lock (the observer may call the store). Facts a harness query
    /// ([`breadcrumb`](Self::breadcrumb) and the like) or a dropped session happen to apply
    /// (an expiry that was due) follow at the next call that applies anything.
    pub fn observe(&self, observer: impl Fn(&Fact) + Send + Sync + 'static) {
        self.with(|st, _| st.observer = Some(Arc::new(observer)));
    }

    /// Drops the observer: it usually holds the world that holds this store, a cycle
    /// that would keep every seed's world alive until the sweep ends.
    pub fn unobserve(&self) {
        self.with(|st, _| st.observer = None);
    }

    /// Keeps snapshots from now on, so that the store can forget ([`forget`](Self::forget)).
    pub fn keep_snapshots(&self) {
        self.with(|st, now| {
            let first = st.snap(now);
            st.snapshots = Some(VecDeque::from([first]));
        });
    }

    /// The store forgets (issue 32 point 1): restored to a snapshot, or wiped. What it
    /// went back to, in words, or `None` when there was nothing to forget.
    pub fn forget(&self, how: Forget) -> Option<String> {
        self.with(|st, now| {
            let q = st.snapshots.as_ref()?;
            let (snap, keep) = match how {
                Forget::Wiped => (q.front()?.clone(), false),
                Forget::Writes(k) => (q.get(q.len().checked_sub(k + 1)?)?.clone(), true),
                Forget::Last(t) => {
                    let cut = now.checked_sub(t)?;
                    (q.iter().rev().find(|s| s.at <= cut)?.clone(), true)
                }
            };
            if snap.zxid == st.zxid && keep {
                return None;
            }
            if st.cfg.redis {
                let said = st.redis_forgotten(&snap, now);
                st.restore(snap, keep, now);
                return Some(said);
            }
            if st.cfg.mysql {
                let said = st.mysql_forgotten(&snap, now);
                st.restore(snap, keep, now);
                return Some(said);
            }
            if st.cfg.zk_wire {
                let said = st.zk_forgotten(&snap);
                st.restore(snap, keep, now);
                return Some(said);
            }
            let said = format!(
                "zxid {} -> {}, counter {} -> {}, floor {:?} -> {:?}",
                st.zxid,
                snap.zxid,
                st.counter_epoch(),
                snap.counter + snap.offset,
                st.floor_max(),
                snap.floor.iter().map(|(n, e)| (*e, n.clone())).max()
            );
            st.restore(snap, keep, now);
            Some(said)
        })
    }

    /// Replies sent in the next `dur` come back `extra` later: past `op_timeout`, the
    /// caller gives up on a write the store applied.
    pub fn set_slow(&self, dur: Duration, extra: Duration) {
        self.with(|st, now| st.slow = Some((now + dur, extra)));
    }

    /// SPEC §3a: the floor's greatest entry as the store keeps it now.
    /// The floor as a commit of `node` at `epoch` found it: on ZooKeeper the commit's
    /// multi-op raises the committer's entry to its own epoch (stop 46), which is not
    /// the floor having heard of that epoch before.
    pub fn floor_max_before_commit(&self, node: &str, epoch: Epoch) -> Option<Epoch> {
        let zk = self.quiet(|st, _| st.cfg.zk_wire && !st.cfg.redis && !st.cfg.mysql);
        if zk {
            return self.quiet(|st, _| st.zk_floor_max_but(Some((node, epoch))));
        }
        self.floor_max()
    }

    pub fn floor_max(&self) -> Option<Epoch> {
        self.quiet(|st, now| {
            if st.cfg.redis {
                return st.redis_floor_max(now);
            }
            if st.cfg.mysql {
                return st.mysql_floor_max(now);
            }
            if st.cfg.zk_wire {
                return st.zk_floor_max();
            }
            st.floor_max().map(|(e, _)| e)
        })
    }

    /// SPEC §3a: the store says it lost data (what `status` reads), in words.
    pub fn lost_data(&self) -> Option<String> {
        self.quiet(|st, now| {
            if st.cfg.redis {
                return st.redis_snapshot(now).lost_data();
            }
            if st.cfg.mysql {
                return st.mysql_snapshot(now).lost_data();
            }
            if st.cfg.zk_wire {
                return st.zk_snapshot().lost_data();
            }
            st.snapshot().lost_data()
        })
    }

    /// TTL mode: the store's clock steps back by `by` (leases last longer). No-op in
    /// ZooKeeper mode.
    pub fn step_clock_back(&self, by: Duration) {
        self.with(|st, _| {
            if let Sessions::Ttl { .. } = st.cfg.sessions {
                st.stepped_back += by;
                st.changed = true;
            }
        });
    }

    /// TTL mode: the store's clock jumps forward by `by` (leases it passes vanish now).
    /// No-op in ZooKeeper mode.
    pub fn step_clock(&self, by: Duration) {
        self.with(|st, _| {
            if let Sessions::Ttl { .. } = st.cfg.sessions {
                st.stepped += by;
                st.changed = true;
            }
        });
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the state at the current instant, with everything due applied before
    /// and after; wakes the waiters when something changed, then hands the new facts to
    /// the observer (outside the lock).
    fn with<R>(&self, f: impl FnOnce(&mut State, Instant) -> R) -> R {
        let (r, facts, observer) = {
            let mut st = self.lock();
            let now = Instant::now();
            st.refresh(now);
            let r = f(&mut st, now);
            st.refresh(now);
            st.keep_snapshot(now);
            st.publish();
            match st.observer.clone() {
                Some(o) => (r, std::mem::take(&mut st.facts), Some(o)),
                None => (r, Vec::new(), None),
            }
        };
        if let Some(o) = observer {
            for fact in &facts {
                o(fact);
            }
        }
        r
    }

    /// [`with`](Self::with) without calling the observer: for the harness's queries (it
    /// may hold its own lock, which the observer takes) and for `Drop`.
    fn quiet<R>(&self, f: impl FnOnce(&mut State, Instant) -> R) -> R {
        let mut st = self.lock();
        let now = Instant::now();
        st.refresh(now);
        let r = f(&mut st, now);
        st.refresh(now);
        st.publish();
        r
    }

    /// Waits until `f` says ready, looking again after every change of the state and at
    /// the instant `f` names.
    async fn until<T>(&self, mut f: impl FnMut(&mut State, Instant) -> Wait<T> + Send) -> T {
        let changes = self.lock().changes.clone();
        loop {
            // Registered before the state is read, so a change between the two wakes it.
            let changed = changes.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let at = match self.with(|st, now| f(st, now)) {
                Wait::Ready(t) => return t,
                Wait::Until(at) => at,
            };
            let timer = async {
                match at {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = changed => {}
                _ = timer => {}
            }
        }
    }

    /// Returns once `who` runs: waits while it is frozen, forever once it is dead.
    async fn gate(&self, who: Inc) {
        self.until(|st, _| {
            if st.dead.contains(&who) || st.frozen.contains(&who) {
                Wait::Until(None)
            } else {
                Wait::Ready(())
            }
        })
        .await
    }

    /// The answer of a request, once it got back to `who`; never, if it was lost or the
    /// link was cut when it arrived.
    async fn delivered<T>(&self, who: Inc, reply: Reply<T>) -> T {
        let Ok((out, at)) = reply.await else {
            return std::future::pending().await;
        };
        tokio::time::sleep_until(at).await;
        if !self.with(|st, _| st.reaches(who)) {
            return std::future::pending().await;
        }
        out
    }
}

/// The store's expiry sweep, every tick from the start, so that expiries happen while
/// nobody calls (every access also applies what is due first). It holds the state weakly
/// and ends with the store; a runtime that is dropped simply drops it.
fn spawn_ticker(state: Weak<Mutex<State>>, t0: Instant, tick: Duration) {
    tokio::spawn(async move {
        let mut at = t0;
        loop {
            at += tick;
            tokio::time::sleep_until(at).await;
            let Some(state) = state.upgrade() else {
                return;
            };
            SimStore { state }.with(|st, _| st.maybe_step());
        }
    });
}

/// The wire of one session: applies its requests at their arrival, one after the other.
/// It ends once the session's handle is gone and everything sent has landed.
fn spawn_wire(store: SimStore) -> mpsc::UnboundedSender<Job> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
    tokio::spawn(async move {
        while let Some(job) = rx.recv().await {
            tokio::time::sleep_until(job.at).await;
            store.with(|st, now| (job.run)(st, now));
        }
    });
    tx
}

/// The settings a backend's own session gets over a raw connection of the simulated
/// store: its session timeout, its polling, and its operation timeout (the backends' is
/// min(session_timeout / 3, connect_timeout): the store's, so that both time a call out
/// alike).
pub(super) fn backend_settings(
    cfg: &StoreConfig,
    url: &str,
    prefix: &str,
    cluster: &str,
) -> warden::coord::StoreSettings {
    let poll_interval = match cfg.watches {
        Watches::Polling { every } => every,
        Watches::Yes => Duration::from_millis(250),
    };
    warden::coord::StoreSettings {
        url: url.into(),
        password: None,
        session_timeout: cfg.granted,
        poll_interval,
        connect_timeout: cfg.op_timeout,
        prefix: prefix.into(),
        cluster: cluster.into(),
        replicas_ack: 0,
    }
}

impl SimStore {
    /// A raw connection of `owner`, for a backend's own session: its number (the
    /// session's id), and the store's config.
    pub(super) fn raw_connection(&self, owner: Inc) -> (i64, StoreConfig) {
        self.with(|st, now| {
            st.next_session += 1;
            let sid = st.next_session;
            let mut s = Sess::new(owner, now);
            s.server = Server::Raw;
            st.sessions.insert(sid, s);
            (sid, st.cfg.clone())
        })
    }
}

thread_local! {
    /// How many connects, of any node, panic before the next one runs: a connect task
    /// that dies (SPEC 10a), as mysql_async's did on `require_ssl` in a build without TLS.
    /// Per thread: a run's current-thread runtime is its test's thread.
    static CONNECT_PANICS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The next `n` connects on this thread panic.
pub fn panic_next_connects(n: u32) {
    CONNECT_PANICS.with(|c| c.set(n));
}

/// Opens sessions for one warden process.
#[derive(Clone)]
pub struct SimConnector {
    store: SimStore,
    owner: Inc,
}

impl Connector for SimConnector {
    type Session = SimSession;

    async fn connect(&self) -> Result<SimSession, StoreError> {
        let panics = CONNECT_PANICS.with(|c| {
            let n = c.get();
            c.set(n.saturating_sub(1));
            n > 0
        });
        if panics {
            panic!("the simulated connect panics, as a store driver's may");
        }
        let store = &self.store;
        let owner = self.owner;
        if store.lock().cfg.redis {
            return redis_wire::connect(store, owner).await;
        }
        if store.lock().cfg.mysql {
            return mysql_wire::connect(store, owner)
                .await
                .map(SimSession::Mysql);
        }
        if store.lock().cfg.zk_wire {
            return zk_wire::connect(store, owner)
                .await
                .map(|s| SimSession::Zk(Box::new(s)));
        }
        store.gate(owner).await;
        let sent = Instant::now();
        let (sid, job, reply, cfg) = store.with(|st, now| {
            st.next_session += 1;
            let sid = st.next_session;
            st.sessions.insert(sid, Sess::new(owner, now));
            let (job, reply) = st.request(sid, now, move |st, now| st.open_session(sid, now));
            (sid, job, reply, st.cfg.clone())
        });
        let wire = spawn_wire(store.clone());
        if let Some(job) = job {
            let _ = wire.send(job);
        }
        let mut abandon = Abandon {
            store: store.clone(),
            sid,
            armed: true,
        };
        let answer =
            tokio::time::timeout_at(sent + cfg.op_timeout, store.delivered(owner, reply)).await;
        store.gate(owner).await;
        if answer.is_err() {
            return Err(StoreError::Unreachable {
                store: "the simulated store",
                key: "(none)",
                connect: format!(
                    "the simulated store (n{} incarnation {})",
                    owner.0 + 1,
                    owner.1
                ),
                timeout: format!("{:?}", cfg.op_timeout),
                reason: "no session was established".into(),
            });
        }
        abandon.armed = false;
        Ok(SimSession::Model(ModelSession {
            h: Arc::new(Handle {
                store: store.clone(),
                sid,
                owner,
                cfg,
                wire,
                joined: watch::Sender::new(None),
                read_at: Mutex::new(None),
                established: Instant::now(),
            }),
        }))
    }
}

/// A connect given up (timed out, or its task aborted): the client is gone, so a session
/// the store opened anyway is never pinged and expires.
struct Abandon {
    store: SimStore,
    sid: i64,
    armed: bool,
}

impl Drop for Abandon {
    fn drop(&mut self) {
        if self.armed {
            let sid = self.sid;
            self.store.quiet(|st, _| st.sess_mut(sid).open = false);
        }
    }
}

/// A session; clones share it. When the last clone is dropped, the client closes it.
#[derive(Clone)]
pub struct ModelSession {
    h: Arc<Handle>,
}

struct Handle {
    store: SimStore,
    sid: i64,
    owner: Inc,
    cfg: StoreConfig,
    wire: mpsc::UnboundedSender<Job>,
    /// The number of the latest join: the events watch the lock for it.
    joined: watch::Sender<Option<u64>>,
    /// When the last `read_state` answered (for [`Fact::Commit`]).
    read_at: Mutex<Option<Instant>>,
    /// When the session was established (`coord/zookeeper.rs` `established`).
    established: Instant,
}

/// ZooKeeper's closeSession: sent after everything the session sent before, it deletes
/// the session's lock and member record when it lands. A client that is dead, cut off or
/// frozen sends nothing: its session expires.
impl Drop for Handle {
    fn drop(&mut self) {
        self.store.close_session(self.sid, &self.wire);
    }
}

impl SimStore {
    /// The client of `sid` was told its session ended (an answer said so): it knows now.
    fn learned_lost(&self, sid: i64) {
        self.with(|st, now| {
            let s = st.sess_mut(sid);
            if s.lost_at.is_none_or(|t| t > now) {
                s.lost_at = Some(now);
                st.changed = true;
            }
        });
    }

    /// The client of `sid` is gone (its last handle dropped): it closes its session, if
    /// it can reach the store (a request on its wire, after everything it sent before).
    fn close_session(&self, sid: i64, wire: &mpsc::UnboundedSender<Job>) {
        let job = self.quiet(|st, now| {
            let connected = st.connected(sid);
            st.sess_mut(sid).open = false;
            st.changed = true;
            if !connected {
                return None;
            }
            st.request(sid, now, move |st, now| st.end_session(sid, false, now))
                .0
        });
        if let Some(job) = job {
            let _ = wire.send(job);
        }
    }
}

impl ModelSession {
    /// One request of this session, bounded by `op_timeout` (the backend's `bounded`):
    /// `op` runs at the store on arrival, if the session is alive there.
    async fn call<T: Send + 'static>(
        &self,
        what: &str,
        op: impl FnOnce(&mut State, Ctx) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let h = &*self.h;
        let (sid, owner) = (h.sid, h.owner);
        h.store.gate(owner).await;
        let sent = Instant::now();
        let sending = h.store.with(|st, now| {
            if st.sess(sid).lost_at.is_some_and(|t| t <= now) {
                // The client knows: it fails at once.
                return Err(StoreError::SessionLost(format!(
                    "{what}: the session has ended"
                )));
            }
            Ok(st.request(sid, now, move |st, now| {
                if st.sess(sid).server != Server::Alive {
                    return Err(StoreError::SessionLost("session expired".into()));
                }
                st.touch(sid, now);
                op(st, Ctx { sid, owner, now })
            }))
        });
        let (job, reply) = sending?;
        if let Some(job) = job {
            let _ = h.wire.send(job);
        }
        let timeout = h.cfg.op_timeout;
        let answer = tokio::time::timeout_at(sent + timeout, h.store.delivered(owner, reply))
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::Unknown(format!(
                    "{what} got no answer within {timeout:?}"
                )))
            });
        if let Err(StoreError::SessionLost(_)) = answer {
            h.store.learned_lost(sid);
        }
        h.store.gate(owner).await;
        answer
    }

    fn held(&self) -> Option<i64> {
        let sid = self.h.sid;
        self.h.store.with(|st, _| st.sess(sid).held)
    }

    fn hold(&self, version: Option<i64>) {
        let sid = self.h.sid;
        self.h.store.with(|st, _| st.sess_mut(sid).held = version);
    }

    /// `ZkSession::lock_is_ours`: one read of the lock's stat; `Ok` when it is this
    /// session's at the version held. `OWN_LOCK = false` is the code before seed 81344's
    /// fix (a version check alone), for the seed-revert table.
    async fn lock_is_ours(&self) -> Result<(), WriteOutcome> {
        if !OWN_LOCK {
            return Ok(());
        }
        let (sid, held) = (self.h.sid, self.held());
        match self
            .call("reading the lock", move |st, _| {
                Ok(st
                    .lock
                    .as_ref()
                    .is_some_and(|l| l.session == sid && Some(l.version) == held))
            })
            .await
        {
            Ok(true) => Ok(()),
            Ok(false) => Err(WriteOutcome::Conflict),
            Err(_) => Err(WriteOutcome::Unknown),
        }
    }

    /// Returns once the client knows the session has ended (never, if it cannot learn it).
    async fn lost(&self) {
        let sid = self.h.sid;
        self.h
            .store
            .until(|st, now| match st.sess(sid).lost_at {
                Some(t) if t <= now => Wait::Ready(()),
                at => Wait::Until(at),
            })
            .await;
        self.h.store.gate(self.h.owner).await;
    }

    /// Waits for a fired watch that `pick` wants (`Some(true)`; `Some(false)` drops it, a
    /// stale one): the note once it got here, `None` when the session is known lost first.
    async fn note(&self, pick: impl Fn(&Note) -> Option<bool> + Send + Sync) -> Option<Note> {
        let (sid, owner) = (self.h.sid, self.h.owner);
        let got = self
            .h
            .store
            .until(|st, now| {
                let deliverable = st.up && st.reaches(owner);
                let s = st.sess_mut(sid);
                if s.lost_at.is_some_and(|t| t <= now) {
                    return Wait::Ready(None);
                }
                s.outbox.retain(|(_, n)| pick(n) != Some(false));
                let mut next = s.lost_at;
                if let Some(i) = s.outbox.iter().position(|(_, n)| pick(n) == Some(true)) {
                    let at = s.outbox[i].0;
                    if at <= now && deliverable {
                        let (_, note) = s.outbox.remove(i).expect("found above");
                        return Wait::Ready(Some(note));
                    }
                    // Past due but cut off: it comes with the reconnection.
                    if at > now {
                        next = Some(next.map_or(at, |n| n.min(at)));
                    }
                }
                Wait::Until(next)
            })
            .await;
        self.h.store.gate(owner).await;
        got
    }

    /// Waits for the lock watch armed for `join` to fire.
    async fn lock_note(&self, join: Option<u64>) -> Option<Note> {
        self.note(move |n| match n {
            Note::Lock { join: j, .. } => Some(*j == join),
            Note::ControlChanged | Note::BreadcrumbChanged => None,
        })
        .await
    }

    /// `ZkSession::watch_lock`: hands each version of the lock's data to `on_record`
    /// until the lock is deleted (`true`) or the session ends (`false`). Polling: until a
    /// look finds it gone or created anew.
    async fn watch_lock(&self, join: u64, on_record: &mut impl FnMut(&NodeRecord)) -> bool {
        match self.h.cfg.watches {
            Watches::Yes => loop {
                let armed = self
                    .call("watching the lock", move |st, c| {
                        let Some(l) = &st.lock else {
                            return Ok(None);
                        };
                        let record = l.record.clone();
                        st.sess_mut(c.sid).lock_watch = Some(LockWatch {
                            join: Some(join),
                            on_data: true,
                        });
                        Ok(Some(record))
                    })
                    .await;
                match armed {
                    Ok(None) => return true,
                    Ok(Some(record)) => {
                        on_record(&record);
                        match self.lock_note(Some(join)).await {
                            Some(Note::Lock { deleted: true, .. }) => return true,
                            Some(_) => continue,
                            None => return false,
                        }
                    }
                    Err(StoreError::SessionLost(_)) => return false,
                    Err(_) => tokio::time::sleep(RETRY_DELAY).await,
                }
            },
            Watches::Polling { every } => {
                let mut seen = None;
                loop {
                    match self.read_holder().await {
                        Ok(None) => return true,
                        Ok(Some((czxid, _))) if seen.is_some_and(|s| s != czxid) => return true,
                        Ok(Some((czxid, record))) => {
                            on_record(&record);
                            seen = Some(czxid);
                        }
                        Err(StoreError::SessionLost(_)) => return false,
                        Err(_) => {}
                    }
                    tokio::time::sleep(every).await;
                }
            }
        }
    }

    /// `ZkSession::watch_active`: hands each version of the lock's data to `on_record`,
    /// across deletions and creations, until the session ends (for a node that has not
    /// joined: SPEC §6, it still learns each new active to follow). Polling: a look every
    /// poll interval.
    async fn watch_active(&self, on_record: &mut impl FnMut(&NodeRecord)) {
        match self.h.cfg.watches {
            Watches::Yes => loop {
                // get_and_watch_data, then check_and_watch_stat when there is no lock.
                let read = self
                    .call("watching the lock", |st, c| {
                        let Some(l) = &st.lock else {
                            return Ok(None);
                        };
                        let record = l.record.clone();
                        st.sess_mut(c.sid).lock_watch = Some(LockWatch {
                            join: None,
                            on_data: true,
                        });
                        Ok(Some(record))
                    })
                    .await;
                match read {
                    Ok(Some(record)) => on_record(&record),
                    Ok(None) => {
                        match self
                            .call("watching for the lock", |st, c| {
                                if st.lock.is_some() {
                                    return Ok(false);
                                }
                                st.sess_mut(c.sid).lock_watch = Some(LockWatch {
                                    join: None,
                                    on_data: false,
                                });
                                Ok(true)
                            })
                            .await
                        {
                            // Created in between: read it.
                            Ok(false) => continue,
                            Ok(true) => {}
                            Err(StoreError::SessionLost(_)) => return,
                            Err(_) => {
                                tokio::time::sleep(RETRY_DELAY).await;
                                continue;
                            }
                        }
                    }
                    Err(StoreError::SessionLost(_)) => return,
                    Err(_) => {
                        tokio::time::sleep(RETRY_DELAY).await;
                        continue;
                    }
                }
                if self.lock_note(None).await.is_none() {
                    return;
                }
            },
            Watches::Polling { every } => loop {
                match self.read_holder().await {
                    Ok(Some((_, record))) => on_record(&record),
                    Ok(None) => {}
                    Err(StoreError::SessionLost(_)) => return,
                    Err(_) => {}
                }
                tokio::time::sleep(every).await;
            },
        }
    }

    /// The lock's czxid and record, if it is held (`polled.rs` `read_holder`).
    async fn read_holder(&self) -> Result<Option<(u64, NodeRecord)>, StoreError> {
        self.call("reading the lock", |st, _| {
            Ok(st.lock.as_ref().map(|l| (l.czxid, l.record.clone())))
        })
        .await
    }

    /// `ZkSession::follow_control`: hands `control` to `each` now and after every change
    /// (polling: every change a look finds), until the session ends or `each` says stop.
    async fn follow_control(&self, mut each: impl FnMut(&Control) -> bool) {
        let read = |watch: bool| {
            self.call("reading control", move |st, c| {
                if watch {
                    st.sess_mut(c.sid).control_watch = true;
                }
                Ok(st.control_value())
            })
        };
        match self.h.cfg.watches {
            Watches::Yes => loop {
                match read(true).await {
                    Ok(control) => {
                        if !each(&control)
                            || self
                                .note(|n| (*n == Note::ControlChanged).then_some(true))
                                .await
                                .is_none()
                        {
                            return;
                        }
                    }
                    Err(StoreError::SessionLost(_)) => return,
                    Err(_) => tokio::time::sleep(RETRY_DELAY).await,
                }
            },
            Watches::Polling { every } => {
                let mut last = None;
                loop {
                    match read(false).await {
                        Ok(control) => {
                            if last.as_ref() != Some(&control) {
                                if !each(&control) {
                                    return;
                                }
                                last = Some(control);
                            }
                        }
                        Err(StoreError::SessionLost(_)) => return,
                        Err(_) => {}
                    }
                    tokio::time::sleep(every).await;
                }
            }
        }
    }

    /// `ZkSession::watch_data` on the breadcrumb: hands it to `each` now and after every
    /// change (polling: every change a look finds), until the session ends.
    async fn follow_breadcrumb(
        &self,
        mut again: watch::Receiver<u64>,
        mut each: impl FnMut(Option<NodeRecord>),
    ) {
        let read = |watch: bool| {
            self.call("watching the breadcrumb", move |st, c| {
                if watch {
                    st.sess_mut(c.sid).breadcrumb_watch = true;
                }
                Ok(st.breadcrumb.as_ref().map(|(r, _)| r.clone()))
            })
        };
        match self.h.cfg.watches {
            Watches::Yes => loop {
                match read(true).await {
                    Ok(found) => {
                        each(found);
                        // `ZkSession::watch_data_again`: read again in a new link too.
                        let relinked = async {
                            if again.changed().await.is_err() {
                                std::future::pending::<()>().await
                            }
                        };
                        tokio::select! {
                            biased;
                            note = self.note(|n| (*n == Note::BreadcrumbChanged).then_some(true)) => {
                                if note.is_none() {
                                    return;
                                }
                            }
                            _ = relinked => {}
                        }
                    }
                    Err(StoreError::SessionLost(_)) => return,
                    Err(_) => tokio::time::sleep(RETRY_DELAY).await,
                }
            },
            Watches::Polling { every } => loop {
                match read(false).await {
                    Ok(found) => each(found),
                    Err(StoreError::SessionLost(_)) => return,
                    Err(_) => {}
                }
                tokio::time::sleep(every).await;
            },
        }
    }

    /// `ZkSession::client_session_ended`'s reconnections: a `Reconnected` each time the
    /// client is back in its session, then `relinked` counted up (`ZkSession::relinked`).
    /// Never returns.
    async fn reconnections(
        &self,
        events: &mpsc::UnboundedSender<StoreEvent>,
        relinked: &watch::Sender<u64>,
    ) {
        let (sid, mut seen) = (self.h.sid, 0);
        loop {
            seen = self
                .h
                .store
                .until(|st, _| match st.sess(sid).reconnects {
                    n if n > seen => Wait::Ready(n),
                    _ => Wait::Until(None),
                })
                .await;
            self.h.store.gate(self.h.owner).await;
            let _ = events.send(StoreEvent::Reconnected);
            relinked.send_modify(|n| *n += 1);
        }
    }

    /// `ZkSession::run_events`, step for step.
    async fn run_events(&self, events: mpsc::UnboundedSender<StoreEvent>) {
        let ended = self.lost();
        let control = self.follow_control(|c| events.send(StoreEvent::Control(c.clone())).is_ok());
        let relinked = watch::Sender::new(0u64);
        let reconnected = self.reconnections(&events, &relinked);
        tokio::pin!(ended, control, reconnected);
        let mut joined = self.h.joined.subscribe();
        let mut armed = *joined.borrow_and_update();
        let mut following = true;
        let tracker = std::sync::Mutex::new(ActiveTracker::default());
        let send_all = |evs: Vec<StoreEvent>| {
            for ev in evs {
                let _ = events.send(ev);
            }
        };
        let breadcrumbs = async {
            let mut link = relinked.subscribe();
            let mut read_in = *link.borrow_and_update();
            self.follow_breadcrumb(relinked.subscribe(), |found| {
                let mut tracker = tracker.lock().unwrap();
                // `ZkSession::run_events`: the first read in a new link confirms again.
                let now_in = *link.borrow_and_update();
                if now_in != read_in {
                    read_in = now_in;
                    tracker.relinked();
                }
                send_all(tracker.breadcrumb(found));
            })
            .await;
            std::future::pending::<()>().await
        };
        tokio::pin!(breadcrumbs);
        loop {
            // The lock is watched whether or not this node joined: a standby that never
            // joins (priority 0, a failed follow, paused) must still learn each new active
            // to follow it (SPEC §6). Its deletion matters only to a joined node.
            let holder = async {
                let mut on_record = |r: &NodeRecord| {
                    // Only a committed promotion names an active (`coord::committed`).
                    send_all(tracker.lock().unwrap().lock(r));
                };
                match armed {
                    Some(join) => self.watch_lock(join, &mut on_record).await.then_some(join),
                    None => {
                        self.watch_active(&mut on_record).await;
                        std::future::pending().await
                    }
                }
            };
            tokio::select! {
                biased;
                _ = &mut ended => break,
                _ = &mut control, if following => following = false,
                _ = &mut reconnected => {}
                _ = &mut breadcrumbs => {}
                gone = holder => {
                    if let Some(join) = gone {
                        let _ = events.send(StoreEvent::HolderGone { join });
                    }
                    armed = None;
                }
                changed = joined.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    armed = *joined.borrow_and_update();
                }
            }
        }
        let _ = events.send(StoreEvent::SessionLost);
    }

    /// `ZkSession::try_lock`: raise this node's entry of the floor and read the counter;
    /// refuse, before the counter moves, when the counter is below the floor (SPEC §3a);
    /// then the multi-op (floor and counter at the versions read, create the lock); on
    /// NodeExists, the lock is ours iff this session owns it (a create whose reply was
    /// lost).
    async fn try_lock(&self, me: &NodeRecord) -> JoinOutcome {
        for _ in 0..JOIN_TRIES {
            let (node, seen) = (me.node_id.clone(), me.epoch_seen);
            let versions = if FLOOR_AT_JOIN {
                let read = match self
                    .call("raising the floor", move |st, _| {
                        Ok(st.raise_floor(&node, seen))
                    })
                    .await
                {
                    Ok(r) => r,
                    Err(_) => return JoinOutcome::Unknown,
                };
                if let Some((floor, who)) = &read.floor {
                    if let Some(why) =
                        warden::coord::lost_data(false, Some(read.counter), Some(*floor), Some(who))
                    {
                        // Never sit on a lock this node may not promote under.
                        let sid = self.h.sid;
                        let _ = self
                            .call("deleting our lock", move |st, c| {
                                if st.lock.as_ref().is_some_and(|l| l.session == sid) {
                                    st.zxid += 1;
                                    st.delete_lock(false, c.now);
                                }
                                Ok(())
                            })
                            .await;
                        return JoinOutcome::LostData(why);
                    }
                }
                if read.counter_version < 0 {
                    // `ZkSession::try_lock`: no counter (a new, wiped or restored
                    // ensemble). Only a session that has lived a whole session timeout
                    // makes it, then reads everything again.
                    let settled = self.h.established + self.h.cfg.settle;
                    if Instant::now() < settled {
                        tokio::time::sleep_until(settled).await;
                        continue;
                    }
                    let made = self
                        .call("creating the epoch counter", |st, _| {
                            if st.counter_version < 0 {
                                st.zxid += 1;
                                st.counter = st.zxid;
                                st.counter_version = 0;
                            }
                            Ok(())
                        })
                        .await;
                    if made.is_err() {
                        return JoinOutcome::Unknown;
                    }
                    continue;
                }
                Some((read.floor_version, read.counter_version))
            } else {
                None
            };
            let record = me.clone();
            match self
                .call("creating the lock", move |st, c| {
                    st.create_lock(c, record, versions)
                })
                .await
            {
                Ok(Created::Taken(l)) => {
                    self.hold(Some(l.version));
                    return JoinOutcome::Held { epoch: l.czxid };
                }
                Ok(Created::Moved) => continue,
                Ok(Created::Exists) => {
                    return match self
                        .call("reading the lock", |st, _| Ok(st.lock_stat()))
                        .await
                    {
                        Ok(Some(l)) if l.session == self.h.sid => {
                            self.hold(Some(l.version));
                            JoinOutcome::Held { epoch: l.czxid }
                        }
                        Ok(Some(l)) => JoinOutcome::Exists { epoch: l.epoch },
                        Ok(None) | Err(_) => JoinOutcome::Unknown,
                    }
                }
                Err(_) => return JoinOutcome::Unknown,
            }
        }
        JoinOutcome::Unknown
    }

    async fn read_breadcrumb(&self) -> Result<Option<(NodeRecord, i64)>, StoreError> {
        self.call("reading the breadcrumb", |st, _| Ok(st.breadcrumb.clone()))
            .await
    }

    async fn read_control(&self) -> Result<Option<(Control, i64)>, StoreError> {
        self.call("reading control", |st, _| Ok(st.control.clone()))
            .await
    }

    async fn read_history_znode(&self) -> Result<Option<(Vec<HistoryEntry>, i64)>, StoreError> {
        self.call("reading history", |st, _| Ok(st.history.clone()))
            .await
    }
}

impl Session for ModelSession {
    fn id(&self) -> SessionId {
        SessionId(self.h.sid)
    }

    fn granted_session_timeout(&self) -> Option<Duration> {
        Some(self.h.cfg.granted)
    }

    async fn events(&self, events: mpsc::UnboundedSender<StoreEvent>) {
        self.run_events(events).await
    }

    async fn ensure_cluster(&self) -> Result<(), StoreError> {
        // `warden init` made everything before the run: one look, as the backend's checks.
        self.call("looking for the cluster's znodes", |_, _| Ok(()))
            .await
    }

    async fn member(
        &self,
        node_id: &str,
    ) -> Result<Option<(SessionId, Result<MemberRecord, RecordError>)>, StoreError> {
        let id = node_id.to_string();
        self.call("reading a member", move |st, _| {
            Ok(st
                .members
                .get(&id)
                .map(|m| (SessionId(m.session), Ok(m.record.clone()))))
        })
        .await
    }

    async fn create_member(&self, m: &MemberRecord) -> Result<(), StoreError> {
        let m = m.clone();
        self.call("registering this node", move |st, c| st.create_member(c, m))
            .await
    }

    async fn delete_member(&self, node_id: &str) -> Result<(), StoreError> {
        let id = node_id.to_string();
        match self
            .call("deleting a stale member", move |st, _| {
                match st.members.remove(&id) {
                    Some(_) => {
                        st.zxid += 1;
                        Ok(())
                    }
                    None => Err(rejected("member", "NoNode")),
                }
            })
            .await
        {
            Ok(()) | Err(StoreError::Rejected(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn set_member(&self, m: &MemberRecord) -> Result<(), StoreError> {
        let m = m.clone();
        self.call("publishing the member record", move |st, _| {
            st.set_member(m)
        })
        .await
    }

    async fn join(&self, me: &NodeRecord, join: u64) -> JoinOutcome {
        let outcome = self.try_lock(me).await;
        // Watch the lock whoever holds it: a standby for its release, the holder for its
        // loss.
        self.h.joined.send_replace(Some(join));
        outcome
    }

    async fn read_state(&self) -> Result<TakeoverState, StoreError> {
        // The reads go out together, as the backend sends them.
        let (breadcrumb, control, history, lock) = tokio::join!(
            self.read_breadcrumb(),
            self.read_control(),
            self.read_history(),
            // The members' records go out in the same round trip, as the backend reads them.
            self.call("reading the lock", |st, _| Ok((
                st.lock_stat(),
                st.members_epoch_seen()
            ))),
        );
        let (lock, seen) = match lock {
            Ok((l, seen)) => (Ok(l), Ok(seen)),
            Err(e) => (Err(e.clone()), Err(e)),
        };
        if let Ok(Some(l)) = lock {
            if l.session == self.h.sid {
                self.hold(Some(l.version));
            }
        }
        let breadcrumb = match breadcrumb? {
            None => BreadcrumbView::Absent,
            Some((record, v)) => BreadcrumbView::Record {
                record,
                version: Version::new(v),
            },
        };
        // A missing control is created (empty) so the promotion can check its version.
        let mut control = control?;
        let (control, control_version) = loop {
            match control {
                Some(c) => break c,
                None => match self
                    .call("creating control", |st, c| st.create_control(c.now))
                    .await
                {
                    Ok(()) | Err(StoreError::Rejected(_)) => control = self.read_control().await?,
                    Err(e) => return Err(e),
                },
            }
        };
        *self.h.read_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        Ok(TakeoverState {
            breadcrumb,
            control,
            control_version: Version::new(control_version),
            history_by_node: history
                .as_ref()
                .map(warden::coord::items::history_by_node)
                .unwrap_or_default(),
            confirmed_by_node: history
                .as_ref()
                .map(warden::coord::items::confirmed_by_node)
                .unwrap_or_default(),
            newest_promotion: newest_promotion(&history?),
            members_epoch_seen: seen?,
        })
    }

    async fn commit_promotion(
        &self,
        breadcrumb: &NodeRecord,
        breadcrumb_version: Option<Version>,
        control_version: Version,
    ) -> WriteOutcome {
        let sent = Instant::now();
        let (Some(control_version), Ok(breadcrumb_version)) = (
            znode_version(control_version),
            breadcrumb_version
                .map(|v| znode_version(v).ok_or(()))
                .transpose(),
        ) else {
            return WriteOutcome::Conflict;
        };
        let held = self.held();
        let record = breadcrumb.clone();
        let read_at = *self.h.read_at.lock().unwrap_or_else(|p| p.into_inner());
        let outcome = write_outcome(
            self.call("committing the promotion", move |st, c| {
                let commit = Commit {
                    record,
                    breadcrumb_version,
                    control_version,
                    held,
                    sent,
                    read_at,
                };
                st.commit(c, commit)
            })
            .await,
        );
        if let (WriteOutcome::Done, Some(v)) = (&outcome, held) {
            self.hold(Some(v + 1));
        }
        outcome
    }

    async fn renew(&self, member: &MemberRecord) -> WriteOutcome {
        // `ZkSession::renew`: the lock must also be this session's (a version check alone
        // passes on another's new lock at the same version), read beside the multi-op.
        let sent = Instant::now();
        let held = self.held();
        let member = member.clone();
        let (ours, renewed) = tokio::join!(
            self.lock_is_ours(),
            self.call("renewing the lease", move |st, c| {
                st.renew(c, member, held, sent)
            }),
        );
        match (ours, write_outcome(renewed)) {
            (Ok(()), outcome) => outcome,
            (Err(_), WriteOutcome::Unknown) => WriteOutcome::Unknown,
            (Err(outcome), _) => outcome,
        }
    }

    async fn rewrite_own_breadcrumb(&self, record: &NodeRecord) -> WriteOutcome {
        let (cur, version) = match self.read_breadcrumb().await {
            Ok(Some(found)) => found,
            Ok(None) => return WriteOutcome::Conflict,
            Err(_) => return WriteOutcome::Unknown,
        };
        if !(cur.same_incarnation(record) && cur.epoch == record.epoch) {
            return WriteOutcome::Conflict;
        }
        if let Err(outcome) = self.lock_is_ours().await {
            return outcome;
        }
        let held = self.held();
        let record = record.clone();
        write_outcome(
            self.call("recording the service", move |st, c| {
                st.record_service(c, record, version, held)
            })
            .await,
        )
    }

    async fn restore_breadcrumb(
        &self,
        record: &NodeRecord,
        version: Option<Version>,
    ) -> WriteOutcome {
        let Ok(version) = version.map(|v| znode_version(v).ok_or(())).transpose() else {
            return WriteOutcome::Conflict;
        };
        if let Err(outcome) = self.lock_is_ours().await {
            return outcome;
        }
        let held = self.held();
        let record = record.clone();
        write_outcome(
            self.call("restoring the breadcrumb", move |st, c| {
                st.restore_breadcrumb(c.now, record, version, held)
            })
            .await,
        )
    }

    async fn breadcrumb_bytes(&self) -> Result<Option<(Vec<u8>, Version)>, StoreError> {
        // The simulated store keeps records, not bytes: they are written out as a backend
        // would read them, so compare-and-delete runs the trait's own code here.
        Ok(self
            .read_breadcrumb()
            .await?
            .map(|(rec, v)| (warden::record::to_bytes(&rec), Version::new(v))))
    }

    async fn delete_breadcrumb_at(
        &self,
        version: Version,
        check_lock: bool,
    ) -> Result<(), StoreError> {
        let version = znode_version(version)
            .ok_or_else(|| StoreError::Rejected(format!("no version {version} of a znode")))?;
        let lock_check = check_lock.then(|| self.held());
        self.call("deleting the breadcrumb", move |st, c| {
            st.delete_breadcrumb(c, version, lock_check)
        })
        .await
    }

    async fn release(&self) -> Result<(), StoreError> {
        let stat = self
            .call("reading the lock", |st, _| Ok(st.lock_stat()))
            .await?;
        match stat {
            Some(l) if l.session == self.h.sid => {
                match self
                    .call("deleting the lock", move |st, c| {
                        st.delete_lock_at(l.version, c.now)
                    })
                    .await
                {
                    Ok(()) | Err(StoreError::Rejected(_)) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            _ => Ok(()),
        }
    }

    async fn read_history(&self) -> Result<History, StoreError> {
        Ok(history_of(self.read_history_znode().await?.map(|(e, _)| e)))
    }

    async fn append_history(&self, entry: &HistoryEntry) -> Result<Option<String>, StoreError> {
        for _ in 0..CAS_ATTEMPTS {
            let (mut entries, version) = match self.read_history_znode().await? {
                Some((entries, v)) => (entries, Some(v)),
                None => (Vec::new(), None),
            };
            insert_history(&mut entries, entry);
            match self
                .call("writing history", move |st, _| {
                    st.write_history(entries, version)
                })
                .await
            {
                Ok(()) => return Ok(None),
                Err(StoreError::Rejected(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Unknown(format!(
            "{BASE}/history kept changing; not written"
        )))
    }

    async fn set_aside(&self) -> Result<Vec<String>, StoreError> {
        self.call("listing", |st, _| {
            Ok(st.set_aside.keys().map(|n| format!("{BASE}/{n}")).collect())
        })
        .await
    }

    async fn update_control<F>(&self, mut change: F) -> Result<Result<Control, String>, StoreError>
    where
        F: FnMut(&mut Control) -> Result<bool, String> + Send,
    {
        for _ in 0..CAS_ATTEMPTS {
            let (mut control, version) = match self.read_control().await? {
                Some((c, v)) => (c, Some(v)),
                None => (Control::default(), None),
            };
            match change(&mut control) {
                Err(reason) => return Ok(Err(reason)),
                Ok(false) => return Ok(Ok(control)),
                Ok(true) => {}
            }
            let value = control.clone();
            match self
                .call("writing control", move |st, c| {
                    st.write_control(value, version, c.now)
                })
                .await
            {
                Ok(()) => return Ok(Ok(control)),
                Err(StoreError::Rejected(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Unknown(format!(
            "{BASE}/control kept changing; not written"
        )))
    }

    async fn snapshot(&self) -> Result<ClusterSnapshot, StoreError> {
        // One atomic read: the backend's several reads could see a change between them; the
        // operator commands are not what the simulation tests.
        self.call("reading the cluster", |st, _| Ok(st.snapshot()))
            .await
    }

    async fn members(
        &self,
    ) -> Result<Vec<(String, Result<MemberRecord, RecordError>)>, StoreError> {
        // As the backend: list the children, then read them in one multi; a record gone
        // in between is left out.
        let ids = self
            .call("listing members", |st, _| {
                Ok(st.members.keys().cloned().collect::<Vec<_>>())
            })
            .await?;
        self.call("reading members", move |st, _| {
            Ok(ids
                .into_iter()
                .filter_map(|id| {
                    let m = st.members.get(&id)?;
                    Some((id, Ok(m.record.clone())))
                })
                .collect())
        })
        .await
    }

    fn name_of(&self, what: Item) -> String {
        match what {
            Item::Cluster => BASE.to_string(),
            Item::Lock => format!("{BASE}/lock"),
            Item::Breadcrumb => format!("{BASE}/breadcrumb"),
            Item::Control => format!("{BASE}/control"),
            Item::History => format!("{BASE}/history"),
        }
    }

    async fn init(&self) -> Result<Vec<String>, StoreError> {
        self.ensure_cluster().await?;
        Ok(vec![format!("{BASE} exists with the configured ACL")])
    }

    /// `ZkSession::write_marker`: the counter's offset raised so that the counter it
    /// leaves (the write's zxid plus the offset) is at least `floor`.
    async fn write_marker(&self, floor: Option<Epoch>) -> Result<Option<String>, StoreError> {
        let Some(floor) = floor else {
            return Ok(None);
        };
        self.call("raising the epoch counter", move |st, _| {
            st.offset = st.offset.max(floor.saturating_sub(st.zxid));
            st.zxid += 1;
            st.counter = st.zxid;
            st.counter_version += 1;
            Ok(Some(format!(
                "raised {BASE}/epoch to {} (offset {})",
                st.counter + st.offset,
                st.offset
            )))
        })
        .await
    }

    async fn delete_takeover_state(
        &self,
        breadcrumb: Option<Version>,
        control: Option<Version>,
    ) -> Result<(), StoreError> {
        let version = |v: Option<Version>| {
            v.map(|v| {
                znode_version(v).ok_or_else(|| StoreError::Rejected(format!("no version {v}")))
            })
            .transpose()
        };
        let (breadcrumb, control) = (version(breadcrumb)?, version(control)?);
        if breadcrumb.is_none() && control.is_none() {
            return Ok(());
        }
        self.call("deleting", move |st, c| {
            st.delete_takeover_state(c, breadcrumb, control)
        })
        .await
    }

    async fn current_epoch(&self) -> Result<Epoch, StoreError> {
        // As the backend: a write that changes nothing, for the zxid it gets.
        self.call("reading the current zxid", |st, _| {
            st.zxid += 1;
            Ok(st.zxid)
        })
        .await
    }

    async fn move_history_aside_if_above(
        &self,
        epoch: Epoch,
    ) -> Result<Option<(String, Epoch)>, StoreError> {
        let Some((entries, version)) = self.read_history_znode().await? else {
            return Ok(None);
        };
        let Some(newest) = newest_promotion(&history_of(Some(entries))).filter(|&n| n > epoch)
        else {
            return Ok(None);
        };
        let copy = self
            .call("moving history aside", move |st, _| {
                st.move_history_aside(version)
            })
            .await?;
        Ok(Some((copy, newest)))
    }
}
