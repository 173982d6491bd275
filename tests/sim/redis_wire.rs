//! The simulated store as Redis (issue 32 point 3): the sessions are the backend's own
//! `warden::coord::redis::RedisSession`, its Rust and its Lua scripts, over a simulated
//! RESP wire ([`SimWire`]) whose commands run on the in-memory keyspace of `keyspace.rs`.
//! Only the wire is simulated: what a request meets on its way is the store model's
//! (`State::request`: latency, loss, a cut link, a store that is down, a frozen or dead
//! client, slow replies), and each command, a script as a whole, is applied atomically
//! when it arrives. The keys' TTLs run on the store's clock (`State::expiry_clock`:
//! drifting, stepped forward and back), and a forgetting store restores the keyspace.
//!
//! What the invariants need comes out of the keyspace's changes as the model's facts: the
//! lock's holder changing (taken, released, expired, restored away), the breadcrumb
//! changing (a commit, a rewrite, a delete), and the holder's acknowledged renewals and
//! commits (which start the lease the checker holds it to).
//!
//! Outside the seam: the `redis` crate's connection (its reconnects, TLS, the
//! `ConnectionManager`'s own timeouts: the simulated wire never breaks, it only stays
//! silent, which the backend's operation timeout turns into an unknown outcome), the
//! events channel (nobody subscribes: the sessions find every change by polling, as they
//! do when a message is lost), `WAIT` (the simulation's store has no replicas) and the
//! ACL/persistence checks (the keyspace reports `appendonly yes`, `noeviction`).

use super::keyspace::{Keyspace, Reply};
use super::{Fact, Inc, SimStore, Snap, State};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::time::Instant;
use warden::coord::redis::{kept_number, lua_scripts, RedisSession, Wire};
use warden::coord::{ClusterSnapshot, Connector, Item, Session, StoreError, StoreEvent};
use warden::record::{
    self, Control, Epoch, History, HistoryEntry, JoinOutcome, MemberRecord, NodeRecord,
    RecordError, SessionId, TakeoverState, Version, WriteOutcome,
};

/// The cluster's keys: `key_prefix` "warden", cluster "sim".
const PREFIX: &str = "warden";
const CLUSTER: &str = "sim";

fn key(name: &str) -> Vec<u8> {
    format!("{PREFIX}:{{{CLUSTER}}}:{name}").into_bytes()
}

/// The store's Redis side.
#[derive(Default)]
pub(super) struct RedisSide {
    pub(super) keyspace: Keyspace,
    /// When each connection first read `control` since it last took the lock (for
    /// [`Fact::Commit`]: the control the committer decided on).
    read_at: BTreeMap<i64, Instant>,
    /// The backend's scripts by SHA1, with their names.
    names: BTreeMap<String, &'static str>,
}

/// The lock as the checker sees it: its session and epoch.
fn lock_of(ks: &Keyspace, clock: std::time::Duration) -> Option<(i64, Epoch)> {
    let session = ks.hget(&key("lock"), b"session", clock)?;
    let session: i64 = std::str::from_utf8(&session).ok()?.parse().ok()?;
    let epoch = ks
        .hget(&key("lock"), b"epoch", clock)
        .and_then(|e| kept_number(&e))
        .unwrap_or_default();
    Some((session, epoch))
}

fn crumb_of(ks: &Keyspace, clock: std::time::Duration) -> Option<(Vec<u8>, Vec<u8>)> {
    let data = ks.hget(&key("breadcrumb"), b"data", clock);
    let version = ks.hget(&key("breadcrumb"), b"version", clock);
    if data.is_none() && version.is_none() {
        return None;
    }
    Some((data.unwrap_or_default(), version.unwrap_or_default()))
}

impl State {
    fn ks_clock(&self, now: Instant) -> std::time::Duration {
        self.expiry_clock(now)
    }

    /// The owner of a session id: the simulated connection it was opened on (a session's
    /// id is its connection's number).
    fn redis_owner(&self, session: i64) -> Option<Inc> {
        self.sessions.get(&session).map(|s| s.owner)
    }

    /// What `warden init` leaves: the backend's own WRITE_MARKER script on an empty store.
    pub(super) fn redis_init(&mut self, now: Instant) {
        for (name, code) in lua_scripts() {
            let sha = redis::Script::new(code).get_hash().to_string();
            self.redis.names.insert(sha, name);
        }
        let code = lua_scripts()
            .into_iter()
            .find(|(n, _)| *n == "write_marker")
            .map(|(_, c)| c)
            .expect("the backend has a write_marker script");
        let clock = self.ks_clock(now);
        let r = self
            .redis
            .keyspace
            .eval(code, &[key("epoch"), key("init")], &[Vec::new()], clock);
        assert!(matches!(r, Reply::Bulk(_)), "init: {r:?}");
    }

    /// Keys whose time is up vanish; the lock's going is a fact.
    pub(super) fn redis_sweep(&mut self, now: Instant) {
        let clock = self.ks_clock(now);
        let before: Option<i64> = self
            .redis
            .keyspace
            .hget_raw(&key("lock"), b"session")
            .and_then(|s| std::str::from_utf8(&s).ok()?.parse().ok());
        let gone = self.redis.keyspace.sweep(clock);
        if gone.is_empty() {
            return;
        }
        self.zxid += 1;
        self.changed = true;
        if gone.contains(&key("lock")) {
            self.lock_gone(before.and_then(|s| self.redis_owner(s)), true, now);
        }
    }

    /// One command of connection `sid` (of `owner`, sent at `sent`), applied at `now`,
    /// and the facts it makes.
    fn redis_one(
        &mut self,
        sid: i64,
        owner: Inc,
        sent: Instant,
        args: &[Vec<u8>],
        now: Instant,
    ) -> Reply {
        let clock = self.ks_clock(now);
        let name = match args.first().map(|a| a.to_ascii_uppercase()) {
            Some(c) if c == b"EVALSHA" => args
                .get(1)
                .and_then(|sha| {
                    self.redis
                        .names
                        .get(&String::from_utf8_lossy(sha).to_lowercase())
                })
                .copied(),
            _ => None,
        };
        if args
            .first()
            .is_some_and(|c| c.eq_ignore_ascii_case(b"HMGET"))
            && args.get(1) == Some(&key("control"))
        {
            // The first read since this connection last took the lock: the takeover's read
            // (§4.3a), not the events loop's polls that follow it (the commit is decided on
            // the version it read, and checked against it).
            self.redis.read_at.entry(sid).or_insert(now);
        }
        let ks = &self.redis.keyspace;
        let (lock0, crumb0, writes0) = (lock_of(ks, clock), crumb_of(ks, clock), ks.writes);
        let reply = self.redis.keyspace.exec(args, clock);
        let ks = &self.redis.keyspace;
        let (lock1, crumb1) = (lock_of(ks, clock), crumb_of(ks, clock));
        if ks.writes == writes0 {
            return reply;
        }
        self.zxid += 1;
        self.changed = true;
        if lock0.map(|l| l.0) != lock1.map(|l| l.0) {
            let gone = lock0.and_then(|(s, _)| self.redis_owner(s));
            self.lock_gone(gone, false, now);
            if let Some((s, epoch)) = lock1 {
                self.redis.read_at.remove(&s);
                self.lock_taken(self.redis_owner(s), epoch, now);
            }
        }
        let done = reply == Reply::Int(1);
        let argv = |i: usize| {
            let n = args
                .get(2)
                .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
                .unwrap_or(0);
            args.get(3 + n + i).cloned().unwrap_or_default()
        };
        let crumbs = (
            crumb0.as_ref().map(|(d, _)| d.as_slice()),
            crumb1.as_ref().map(|(d, _)| d.as_slice()),
        );
        match name {
            Some("commit") if done => {
                let control = self.redis_control_at(clock);
                let read_at = self.redis.read_at.get(&sid).copied();
                self.committed(owner, crumbs, control, read_at, now);
                self.renewed(owner, sent, now);
            }
            Some("acquire")
                if matches!(&reply, Reply::Array(a)
                    if a.first() == Some(&Reply::Bulk(b"restarted".to_vec()))) =>
            {
                self.facts.push(Fact::RefusedRestarted {
                    node: owner.0,
                    inc: owner.1,
                    at: now,
                });
            }
            Some("set_member") if done && argv(5) == b"1" => self.renewed(owner, sent, now),
            _ if crumb0 != crumb1 => {
                self.crumb_changed(owner, crumbs, name == Some("breadcrumb_at"), now);
            }
            _ => {}
        }
        reply
    }

    /// The store comes back from `snap`: its keyspace as it was (keys whose TTL ran out
    /// meanwhile vanish at the next sweep, before any client is answered).
    pub(super) fn redis_restore(&mut self, snap: Snap, now: Instant) {
        let clock = self.ks_clock(now);
        let before = lock_of(&self.redis.keyspace, clock);
        let after = lock_of(&snap.keyspace, clock);
        let gone = before
            .filter(|b| Some(*b) != after)
            .and_then(|(s, _)| self.redis_owner(s));
        self.lock_gone(gone, true, now);
        self.zxid = snap.zxid;
        // A store that comes back from a snapshot restarted: a new run id.
        let run = self.redis.keyspace.run.max(snap.keyspace.run) + 1;
        self.redis.keyspace = snap.keyspace;
        self.redis.keyspace.run = run;
        if let Some(q) = &mut self.snapshots {
            while q.len() > 1 && q.back().is_some_and(|s| s.zxid > self.zxid) {
                q.pop_back();
            }
        }
        self.redis_sweep(now);
        self.changed = true;
    }

    /// What a restore to `snap` forgets, in words.
    pub(super) fn redis_forgotten(&self, snap: &Snap, now: Instant) -> String {
        let clock = self.ks_clock(now);
        let counter = |ks: &Keyspace| ks.get(&key("epoch"), clock);
        format!(
            "zxid {} -> {}, counter {:?} -> {:?}, floor {:?} -> {:?}",
            self.zxid,
            snap.zxid,
            counter(&self.redis.keyspace).map(|c| String::from_utf8_lossy(&c).into_owned()),
            counter(&snap.keyspace).map(|c| String::from_utf8_lossy(&c).into_owned()),
            floor_of(&self.redis.keyspace, clock),
            floor_of(&snap.keyspace, clock),
        )
    }

    fn redis_control_at(&self, clock: std::time::Duration) -> Control {
        self.redis
            .keyspace
            .hget(&key("control"), b"data", clock)
            .and_then(|d| record::parse(&d).ok())
            .unwrap_or_default()
    }

    pub(super) fn redis_control(&self, now: Instant) -> Control {
        self.redis_control_at(self.ks_clock(now))
    }

    /// The operator replaces control (`warden pause`, `failover`): the next version.
    pub(super) fn redis_set_control(&mut self, control: Control, now: Instant) {
        let clock = self.ks_clock(now);
        let ks = &mut self.redis.keyspace;
        let version = ks
            .hget(&key("control"), b"version", clock)
            .and_then(|v| kept_number(&v))
            .map_or(0, |v| v + 1);
        ks.exec(&[b"DEL".to_vec(), key("control")], clock);
        ks.hset(
            &key("control"),
            &[
                (b"data", record::to_bytes(&control)),
                (b"version", version.to_string().into_bytes()),
            ],
            clock,
        );
        self.zxid += 1;
        self.changed = true;
    }

    /// `fence --confirm`: the breadcrumb goes.
    pub(super) fn redis_confirm_fenced(&mut self, now: Instant) {
        let clock = self.ks_clock(now);
        let crumb = crumb_of(&self.redis.keyspace, clock);
        if self.redis.keyspace.del(&key("breadcrumb")) {
            self.zxid += 1;
            self.changed = true;
            if let Some(record) = crumb.and_then(|(d, _)| record::parse::<NodeRecord>(&d).ok()) {
                // As `warden fence --confirm` records it (src/ops/fence.rs).
                let h = key("history");
                let mut values = self
                    .redis
                    .keyspace
                    .hget(&h, b"data", clock)
                    .and_then(|d| record::parse_history_values(&d).ok())
                    .unwrap_or_default();
                let entry = super::confirmed_entry(&record);
                values.insert(0, serde_json::to_value(&entry).expect("an entry"));
                let version = self
                    .redis
                    .keyspace
                    .hget(&h, b"version", clock)
                    .and_then(|v| std::str::from_utf8(&v).ok()?.parse::<i64>().ok())
                    .map_or(0, |v| v + 1);
                self.redis.keyspace.hset(
                    &h,
                    &[
                        (b"data", record::history_bytes(&values)),
                        (b"version", version.to_string().into_bytes()),
                    ],
                    clock,
                );
                self.facts.push(Fact::BreadcrumbDeleted {
                    by: None,
                    record,
                    at: now,
                });
            }
        }
    }

    pub(super) fn redis_breadcrumb(
        &self,
        now: Instant,
    ) -> Option<(Result<NodeRecord, RecordError>, Vec<u8>)> {
        crumb_of(&self.redis.keyspace, self.ks_clock(now))
            .map(|(d, v)| (record::parse::<NodeRecord>(&d), v))
    }

    pub(super) fn redis_lock_holder(&self, now: Instant) -> Option<(usize, u32, Epoch)> {
        let (s, epoch) = lock_of(&self.redis.keyspace, self.ks_clock(now))?;
        let o = self.redis_owner(s)?;
        Some((o.0, o.1, epoch))
    }

    pub(super) fn redis_members(&self, now: Instant) -> BTreeMap<String, MemberRecord> {
        let clock = self.ks_clock(now);
        let prefix = key("member:");
        self.redis
            .keyspace
            .keys_under(&prefix, clock)
            .into_iter()
            .filter_map(|k| {
                let id = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
                let data = self.redis.keyspace.hget(&k, b"record", clock)?;
                Some((id, record::parse(&data).ok()?))
            })
            .collect()
    }

    pub(super) fn redis_floor_max(&self, now: Instant) -> Option<Epoch> {
        floor_of(&self.redis.keyspace, self.ks_clock(now)).map(|(e, _)| e)
    }

    /// What `status` reads of a store that lost data.
    pub(super) fn redis_snapshot(&self, now: Instant) -> ClusterSnapshot {
        let clock = self.ks_clock(now);
        let ks = &self.redis.keyspace;
        let raw = ks.get(&key("epoch"), clock);
        let counter = raw.as_deref().and_then(kept_number);
        let init = ks.exists(&key("init"), clock);
        ClusterSnapshot {
            marker_missing: !init || counter.is_none(),
            epoch_counter: counter,
            counter_unreadable: raw.is_some() && counter.is_none(),
            kept_floor: floor_of(ks, clock),
            ..ClusterSnapshot::default()
        }
    }
}

/// The floor's greatest entry and whose.
fn floor_of(ks: &Keyspace, clock: std::time::Duration) -> Option<(Epoch, String)> {
    ks.hgetall(&key("seen"), clock)?
        .into_iter()
        .filter_map(|(n, e)| Some((kept_number(&e)?, String::from_utf8_lossy(&n).into_owned())))
        .max()
}

/// One connection to the simulated Redis; clones share it.
#[derive(Clone)]
pub struct SimWire {
    h: Arc<WireHandle>,
}

struct WireHandle {
    store: SimStore,
    sid: i64,
    owner: Inc,
    wire: mpsc::UnboundedSender<super::Job>,
}

fn args_of(cmd: &redis::Cmd) -> Vec<Vec<u8>> {
    cmd.args_iter()
        .filter_map(|a| match a {
            redis::Arg::Simple(b) => Some(b.to_vec()),
            _ => None,
        })
        .collect()
}

impl SimWire {
    /// Sends `cmds` (one, or a pipeline) and waits for their replies: forever when the
    /// request or its reply is lost, the link is cut or the store is down (the backend's
    /// operation timeout ends the wait: an unknown outcome, as on a real connection that
    /// goes silent).
    async fn send(&self, cmds: Vec<Vec<Vec<u8>>>) -> Vec<Reply> {
        let h = &*self.h;
        let (sid, owner) = (h.sid, h.owner);
        h.store.gate(owner).await;
        let sent = Instant::now();
        let (job, reply) = h.store.with(|st, now| {
            st.request(sid, now, move |st, now| {
                cmds.iter()
                    .map(|a| st.redis_one(sid, owner, sent, a, now))
                    .collect::<Vec<Reply>>()
            })
        });
        if let Some(job) = job {
            let _ = h.wire.send(job);
        }
        let out = h.store.delivered(owner, reply).await;
        h.store.gate(owner).await;
        out
    }
}

impl redis::aio::ConnectionLike for SimWire {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        let args = args_of(cmd);
        Box::pin(async move {
            let out = self.send(vec![args]).await;
            Ok(out.first().map_or(redis::Value::Nil, Reply::to_value))
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        let cmds: Vec<Vec<Vec<u8>>> = cmd.cmd_iter().map(args_of).collect();
        Box::pin(async move {
            let out = self.send(cmds).await;
            Ok(out
                .iter()
                .skip(offset)
                .take(count)
                .map(Reply::to_value)
                .collect())
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// Never yields: nobody subscribes in the simulation.
pub struct NoMessages;

impl futures_util::Stream for NoMessages {
    type Item = ();

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<()>> {
        std::task::Poll::Pending
    }
}

impl Wire for SimWire {
    type Own = SimWire;
    type Messages = NoMessages;

    async fn own_connection(&self) -> Result<SimWire, redis::RedisError> {
        Ok(self.clone())
    }

    /// The events channel is outside the seam: the sessions poll (as after a lost
    /// message), which is what the model's polled stores do too.
    async fn subscribe(&self, _channel: String) -> Result<NoMessages, redis::RedisError> {
        Err(redis::RedisError::from((
            redis::ErrorKind::Io,
            "the simulated Redis has no events channel",
        )))
    }
}

/// Opens a `RedisSession` of `owner` on a connection of its own: the backend's `open`
/// (its PING within the connect timeout, then its keepalive), with the connection's
/// number as the session id (deterministic, unlike the connector's random one).
pub(super) async fn connect(store: &SimStore, owner: Inc) -> Result<SimSession, StoreError> {
    store.gate(owner).await;
    let (sid, cfg) = store.raw_connection(owner);
    let settings = super::backend_settings(&cfg, "redis://sim:6379/0", PREFIX, CLUSTER);
    let wire = SimWire {
        h: Arc::new(WireHandle {
            store: store.clone(),
            sid,
            owner,
            wire: super::spawn_wire(store.clone()),
        }),
    };
    let checked = AtomicBool::new(true);
    let opened = RedisSession::open(wire, Arc::new(settings), sid, &checked).await;
    store.gate(owner).await;
    opened.map(SimSession::Redis)
}

/// A session of the simulated store: the model's, or the Redis or ZooKeeper backend's own.
#[derive(Clone)]
pub enum SimSession {
    Model(super::ModelSession),
    Redis(RedisSession<SimWire>),
    /// The ZooKeeper backend's own (`zk_wire.rs`).
    Zk(Box<warden::coord::zookeeper::ZkSession<super::zk_wire::SimZk>>),
    /// The MySQL backend's own (`mysql_wire.rs`).
    Mysql(warden::coord::mysql::MysqlSession<super::mysql_wire::SimSql>),
}

macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            SimSession::Model($s) => $e,
            SimSession::Redis($s) => $e,
            SimSession::Zk($s) => $e,
            SimSession::Mysql($s) => $e,
        }
    };
}

impl Session for SimSession {
    fn id(&self) -> SessionId {
        each!(self, s => s.id())
    }

    fn granted_session_timeout(&self) -> Option<std::time::Duration> {
        each!(self, s => s.granted_session_timeout())
    }

    async fn events(&self, events: mpsc::UnboundedSender<StoreEvent>) {
        each!(self, s => s.events(events).await)
    }

    async fn ensure_cluster(&self) -> Result<(), StoreError> {
        each!(self, s => s.ensure_cluster().await)
    }

    async fn members(
        &self,
    ) -> Result<Vec<(String, Result<MemberRecord, RecordError>)>, StoreError> {
        each!(self, s => s.members().await)
    }

    async fn check_initialized(&self) -> Result<(), StoreError> {
        each!(self, s => s.check_initialized().await)
    }

    async fn write_marker(&self, floor: Option<Epoch>) -> Result<Option<String>, StoreError> {
        each!(self, s => s.write_marker(floor).await)
    }

    async fn member(
        &self,
        node_id: &str,
    ) -> Result<Option<(SessionId, Result<MemberRecord, RecordError>)>, StoreError> {
        each!(self, s => s.member(node_id).await)
    }

    async fn create_member(&self, m: &MemberRecord) -> Result<(), StoreError> {
        each!(self, s => s.create_member(m).await)
    }

    async fn delete_member(&self, node_id: &str) -> Result<(), StoreError> {
        each!(self, s => s.delete_member(node_id).await)
    }

    async fn set_member(&self, m: &MemberRecord) -> Result<(), StoreError> {
        each!(self, s => s.set_member(m).await)
    }

    async fn join(&self, me: &NodeRecord, join: u64) -> JoinOutcome {
        each!(self, s => s.join(me, join).await)
    }

    async fn read_state(&self) -> Result<TakeoverState, StoreError> {
        each!(self, s => s.read_state().await)
    }

    async fn commit_promotion(
        &self,
        breadcrumb: &NodeRecord,
        breadcrumb_version: Option<Version>,
        control_version: Version,
    ) -> WriteOutcome {
        each!(self, s => s.commit_promotion(breadcrumb, breadcrumb_version, control_version).await)
    }

    async fn renew(&self, member: &MemberRecord) -> WriteOutcome {
        each!(self, s => s.renew(member).await)
    }

    async fn rewrite_own_breadcrumb(&self, record: &NodeRecord) -> WriteOutcome {
        each!(self, s => s.rewrite_own_breadcrumb(record).await)
    }

    async fn restore_breadcrumb(
        &self,
        record: &NodeRecord,
        version: Option<Version>,
    ) -> WriteOutcome {
        each!(self, s => s.restore_breadcrumb(record, version).await)
    }

    async fn breadcrumb_bytes(&self) -> Result<Option<(Vec<u8>, Version)>, StoreError> {
        each!(self, s => s.breadcrumb_bytes().await)
    }

    async fn delete_breadcrumb_at(
        &self,
        version: Version,
        check_lock: bool,
    ) -> Result<(), StoreError> {
        each!(self, s => s.delete_breadcrumb_at(version, check_lock).await)
    }

    async fn release(&self) -> Result<(), StoreError> {
        each!(self, s => s.release().await)
    }

    async fn release_deleting(&self, own: Option<(&str, &str, Epoch)>) -> warden::coord::Released {
        each!(self, s => s.release_deleting(own).await)
    }

    async fn read_history(&self) -> Result<History, StoreError> {
        each!(self, s => s.read_history().await)
    }

    async fn append_history(&self, entry: &HistoryEntry) -> Result<Option<String>, StoreError> {
        each!(self, s => s.append_history(entry).await)
    }

    async fn set_aside(&self) -> Result<Vec<String>, StoreError> {
        each!(self, s => s.set_aside().await)
    }

    async fn update_control<F>(&self, change: F) -> Result<Result<Control, String>, StoreError>
    where
        F: FnMut(&mut Control) -> Result<bool, String> + Send,
    {
        each!(self, s => s.update_control(change).await)
    }

    async fn update_control_from<F>(
        &self,
        seen: (Control, Option<Version>),
        change: F,
    ) -> Result<Result<Control, String>, StoreError>
    where
        F: FnMut(&mut Control) -> Result<bool, String> + Send,
    {
        each!(self, s => s.update_control_from(seen, change).await)
    }

    async fn snapshot(&self) -> Result<ClusterSnapshot, StoreError> {
        each!(self, s => s.snapshot().await)
    }

    fn name_of(&self, what: Item) -> String {
        each!(self, s => s.name_of(what))
    }

    async fn init(&self) -> Result<Vec<String>, StoreError> {
        each!(self, s => s.init().await)
    }

    async fn delete_takeover_state(
        &self,
        breadcrumb: Option<Version>,
        control: Option<Version>,
    ) -> Result<(), StoreError> {
        each!(self, s => s.delete_takeover_state(breadcrumb, control).await)
    }

    async fn current_epoch(&self) -> Result<Epoch, StoreError> {
        each!(self, s => s.current_epoch().await)
    }

    async fn move_history_aside_if_above(
        &self,
        epoch: Epoch,
    ) -> Result<Option<(String, Epoch)>, StoreError> {
        each!(self, s => s.move_history_aside_if_above(epoch).await)
    }
}

/// The connector's other half, for the compiler: `SimConnector` is the one `Connector`.
#[allow(dead_code)]
fn _is_a_session<C: Connector<Session = SimSession>>() {}
