//! The Redis backend (SPEC §3a), on the `redis` crate (tokio, `ConnectionManager`,
//! `Script`).
//!
//! Keys, all under `<prefix>:{<cluster>}` (the braces keep a cluster in one hash slot):
//! `:lock` (a hash: the holder's session, record, epoch and version, with a TTL), `:epoch`
//! (the counter, `INCR`ed by each new holder), `:init` (the marker, written by `warden
//! init` only), `:member:<node_id>` (a hash: session and record, with a TTL), `:members`
//! (the node ids ever registered, to list them), `:seen` (each node's `epoch_seen`, kept
//! without a TTL so that a node that died still speaks for what it saw), and one hash per
//! item (`:breadcrumb`, `:control`, `:history`, set-aside histories listed in `:aside`):
//! data and a version for compare-and-set.
//!
//! There is no session service: a session is a random id, its member key and (while it
//! holds it) the lock kept alive by a keepalive task every `session_timeout / 6` with
//! `PEXPIRE session_timeout`. A key not touched for `session_timeout` expires on the
//! server; a session that cannot touch its member key for `session_timeout` on its own
//! clock (or finds it gone or taken) is lost. Only the elector's acknowledged renewal
//! extends the holder's lease (SPEC §4).
//!
//! Every operation on the lock, and every compare-and-set, is one Lua script: atomic on
//! the server. A reply that does not come within the operation timeout, or a broken
//! connection, is an unknown outcome (the `ConnectionManager` reconnects, it never sends a
//! command again); an acquire with an unknown outcome is resolved by reading the lock.
//! A release publishes on `:events`, as does every change of `control`, so standbys act
//! at once; they also poll every `poll_interval`, which covers a lost message.

use super::items::{self, Items, BREADCRUMB, CONTROL, HISTORY, SET_ASIDE_PREFIX};
use super::polled::{self, Polled, Touched};
use super::{
    ClusterSnapshot, Connector, Item, Session, StoreError, StoreEvent, StoreSettings,
    MAX_KEPT_EPOCH,
};
use crate::record::{
    self, Epoch, JoinOutcome, MemberRecord, NodeRecord, SessionId, TakeoverState, Version,
    WriteOutcome,
};
use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, IntoConnectionInfo, RedisError, Script, ServerErrorKind, Value};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio::sync::mpsc;

/// The cluster's key names.
#[derive(Clone, Debug)]
struct Keys {
    base: String,
}

impl Keys {
    fn new(prefix: &str, cluster: &str) -> Keys {
        Keys {
            base: format!("{prefix}:{{{cluster}}}"),
        }
    }

    fn key(&self, name: &str) -> String {
        format!("{}:{name}", self.base)
    }

    fn lock(&self) -> String {
        self.key("lock")
    }

    fn epoch(&self) -> String {
        self.key("epoch")
    }

    fn init(&self) -> String {
        self.key("init")
    }

    fn seen(&self) -> String {
        self.key("seen")
    }

    fn members(&self) -> String {
        self.key("members")
    }

    fn member(&self, node_id: &str) -> String {
        self.key(&format!("member:{node_id}"))
    }

    fn aside(&self) -> String {
        self.key("aside")
    }

    fn events(&self) -> String {
        self.key("events")
    }
}

/// Lua helpers of every script, for keys that hold what warden never writes (SPEC §9,
/// issue 31): a key of another type (`SET` over a hash) made every script that touched it
/// fail with WRONGTYPE, for good. `hget(k, f)`: the field, or false when `k` is not a hash
/// (its garbage counts as absent). `claim(k, t)`: deletes `k` when it holds another type
/// than `t`, so that the write that follows replaces the garbage. `version_of(k)`: an
/// item's version as [`item_of`] reports it to the readers: false when absent, '-1' when
/// it holds none warden wrote (another type, no version or not a number), else its digits;
/// a compare-and-set from that '-1' replaces the item.
macro_rules! guard_fns {
    () => {
        r#"
local function hget(k, f)
  local ok, v = pcall(redis.call, 'HGET', k, f)
  if ok then return v end
  return false
end
local function type_of(k)
  return redis.call('TYPE', k)['ok']
end
local function claim(k, want)
  local t = type_of(k)
  if t ~= 'none' and t ~= want then redis.call('DEL', k) end
end
local function version_of(k)
  local t = type_of(k)
  if t == 'none' then return false end
  if t ~= 'hash' then return '-1' end
  local v = redis.call('HGET', k, 'version')
  if not v then
    if redis.call('HEXISTS', k, 'data') == 1 then return '-1' end
    return false
  end
  if string.match(v, '^%d+$') then
    local n = tonumber(v)
    if n < 9007199254740992 then return string.format('%d', n) end
  end
  return '-1'
end
"#
    };
}

mod lua;
mod store;
pub use lua::*;

/// The real wire: the connector's shared `ConnectionManager`, and its client for a
/// connection of its own and for subscriptions.
#[derive(Clone)]
pub struct Resp {
    conn: ConnectionManager,
    client: redis::Client,
}

impl redis::aio::ConnectionLike for Resp {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, Value> {
        self.conn.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        self.conn.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

impl Wire for Resp {
    type Own = redis::aio::MultiplexedConnection;
    type Messages = redis::aio::PubSubStream;

    async fn own_connection(&self) -> Result<Self::Own, RedisError> {
        self.client.get_multiplexed_async_connection().await
    }

    async fn subscribe(&self, channel: String) -> Result<Self::Messages, RedisError> {
        let mut p = self.client.get_async_pubsub().await?;
        p.subscribe(channel).await?;
        Ok(p.into_on_message())
    }
}

/// Opens sessions on one cluster's keys; sessions share one multiplexed connection.
#[derive(Clone)]
pub struct RedisConnector {
    s: Arc<StoreSettings>,
    client: redis::Client,
    /// The shared connection, once made.
    conn: Arc<tokio::sync::Mutex<Option<ConnectionManager>>>,
    /// Whether `appendonly` was looked at (once per process).
    persistence_checked: Arc<AtomicBool>,
}

impl RedisConnector {
    /// Fails only on a URL the driver cannot use (config validation catches those first).
    pub fn new(s: StoreSettings) -> Result<RedisConnector, StoreError> {
        let info = s
            .url
            .as_str()
            .into_connection_info()
            .map_err(|e| StoreError::Rejected(format!("coordination.redis.url: {e}")))?;
        let info = match &s.password {
            Some(p) => {
                let settings = info.redis_settings().clone().set_password(p);
                info.set_redis_settings(settings)
            }
            None => info,
        };
        let client = redis::Client::open(info)
            .map_err(|e| StoreError::Rejected(format!("coordination.redis.url: {e}")))?;
        Ok(RedisConnector {
            s: Arc::new(s),
            client,
            conn: Arc::new(tokio::sync::Mutex::new(None)),
            persistence_checked: Arc::new(AtomicBool::new(false)),
        })
    }

    fn unreachable(&self, reason: String) -> StoreError {
        unreachable(&self.s, reason)
    }

    /// The server refused the database the URL names (`SELECT`: "DB index is out of
    /// range"): a setup error of the config's (exit 2), not an unreachable store (issue 31).
    fn no_such_database(&self) -> StoreError {
        StoreError::Unsuitable(format!(
            "coordination.redis.url = {:?} names a database Redis does not have (it has \
             fewer, as its `databases` setting says): name one below that number, as in \
             redis://db1:6379/0",
            self.s.url
        ))
    }

    /// The shared connection, made on first use.
    async fn connection(&self) -> Result<ConnectionManager, StoreError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let op = self.s.op_timeout();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.s.connect_timeout))
            .set_response_timeout(Some(op))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let made = tokio::time::timeout(
            self.s.connect_timeout,
            self.client.get_connection_manager_with_config(config),
        )
        .await;
        let c = match made {
            Err(_) => return Err(self.unreachable("no answer".into())),
            Ok(Err(e)) if e.to_string().contains("DB index is out of range") => {
                return Err(self.no_such_database())
            }
            Ok(Err(e)) => {
                return Err(match classify(e, "connecting") {
                    StoreError::Auth(why) => StoreError::Auth(why),
                    other => self.unreachable(other.to_string()),
                })
            }
            Ok(Ok(c)) => c,
        };
        *slot = Some(c.clone());
        Ok(c)
    }
}

impl Connector for RedisConnector {
    type Session = RedisSession;

    async fn connect(&self) -> Result<RedisSession, StoreError> {
        let wire = Resp {
            conn: self.connection().await?,
            client: self.client.clone(),
        };
        RedisSession::open(
            wire,
            self.s.clone(),
            super::random_session_id(),
            &self.persistence_checked,
        )
        .await
    }
}

/// The store did not answer within the connect timeout, or refused the connection.
fn unreachable(s: &StoreSettings, reason: String) -> StoreError {
    StoreError::Unreachable {
        store: "Redis",
        key: "coordination.redis.url",
        connect: s.url.clone(),
        timeout: humantime::format_duration(s.connect_timeout).to_string(),
        reason,
    }
}

/// A Redis error as the election sees it: refusals of access are `Auth`; a server that is
/// loading, read-only or without its master, and every connection or timeout error, is an
/// unknown outcome; other server errors (a key of the wrong type) are definite.
fn classify(e: RedisError, doing: &str) -> StoreError {
    match e.kind() {
        ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm) => {
            StoreError::Auth(format!(
                "Redis refused {doing}: {e} (check coordination.redis.password_file and the \
                 user's ACL)"
            ))
        }
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::ReadOnly
            | ServerErrorKind::MasterDown
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown,
        ) => StoreError::Unknown(format!("{doing}: {e}")),
        // `Extension`: a server error the driver has no name for (WRONGTYPE is one): the
        // server answered, so the outcome is known.
        ErrorKind::Server(_) | ErrorKind::Extension => {
            StoreError::Rejected(format!("{doing}: Redis error: {e}"))
        }
        _ => StoreError::Unknown(format!("{doing}: {e}")),
    }
}

fn outcome(r: Result<bool, StoreError>) -> WriteOutcome {
    match r {
        Ok(true) => WriteOutcome::Done,
        Ok(false) | Err(StoreError::Rejected(_)) => WriteOutcome::Conflict,
        Err(_) => WriteOutcome::Unknown,
    }
}

/// A reply's text (bulk, simple or integer), if it has one.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

fn bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        other => text(other).unwrap_or_default().into_bytes(),
    }
}

/// Two fields of a hash as HMGET answers them (each absent or its bytes).
type Fields2 = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Whether a command failed on a key that holds another type than the command reads.
fn wrong_type(e: &RedisError) -> bool {
    e.code() == Some("WRONGTYPE")
}

/// A version or an epoch as warden writes them into Redis: decimal digits, below 2^53
/// ([`MAX_KEPT_EPOCH`]), as the scripts' `epoch_of` and `version_of` read them (a sign, a
/// space or more digits is garbage, never a number to compare).
pub fn kept_number(raw: &[u8]) -> Option<u64> {
    if raw.is_empty() || !raw.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(raw)
        .ok()?
        .parse::<u64>()
        .ok()
        .filter(|n| *n < MAX_KEPT_EPOCH)
}

/// An item (control, breadcrumb, history) as read from its hash's `data` and `version`
/// fields: `None` when neither exists; else its data (empty when missing) and version,
/// -1 when it holds none warden wrote. A compare-and-set from -1 replaces the item (the
/// scripts' `version_of` says -1 of the same items, and of a key of another type).
pub fn item_of(data: Option<Vec<u8>>, version: Option<Vec<u8>>) -> Option<(Vec<u8>, i64)> {
    if data.is_none() && version.is_none() {
        return None;
    }
    let version = version
        .as_deref()
        .and_then(kept_number)
        .and_then(|v| i64::try_from(v).ok())
        .unwrap_or(-1);
    Some((data.unwrap_or_default(), version))
}

/// The lock as read from its hash (HGETALL): (session, record, epoch) when it names a
/// session. A session or epoch that is not a number reads as 0: no live session has id
/// 0, so such a lock is nobody's, and expires (or the next ACQUIRE replaces it).
pub fn lock_of(fields: &HashMap<Vec<u8>, Vec<u8>>) -> Option<(i64, Vec<u8>, Epoch)> {
    let session = fields.get(b"session".as_slice())?;
    Some((
        std::str::from_utf8(session)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_default(),
        fields
            .get(b"record".as_slice())
            .cloned()
            .unwrap_or_default(),
        fields
            .get(b"epoch".as_slice())
            .and_then(|e| kept_number(e))
            .unwrap_or_default(),
    ))
}

/// A session: clones share it; it ends when the last clone is dropped.
#[derive(Clone)]
pub struct RedisSession<W: Wire = Resp> {
    inner: Arc<Inner<W>>,
}

impl<W: Wire> RedisSession<W> {
    /// A session over `wire` with the id `id`: probes the store within the connect
    /// timeout, reads its persistence setting once per `persistence_checked`, and starts
    /// the keepalive. The connector passes a random id; the simulation its own wire and a
    /// deterministic id.
    #[doc(hidden)]
    pub async fn open(
        wire: W,
        s: Arc<StoreSettings>,
        id: i64,
        persistence_checked: &AtomicBool,
    ) -> Result<RedisSession<W>, StoreError> {
        let inner = Arc::new(Inner {
            op_timeout: s.op_timeout(),
            k: Keys::new(&s.prefix, &s.cluster),
            core: polled::Core::new(id, s.session_timeout, s.poll_interval),
            conn: wire,
            s,
        });
        // A probe within the connect timeout: the manager may have been made long ago.
        let mut c = inner.conn.clone();
        match tokio::time::timeout(
            inner.s.connect_timeout,
            redis::cmd("PING").query_async::<Value>(&mut c),
        )
        .await
        {
            Err(_) => return Err(unreachable(&inner.s, "no answer to PING".into())),
            Ok(Err(e)) => {
                return Err(match classify(e, "connecting") {
                    StoreError::Auth(why) => StoreError::Auth(why),
                    other => unreachable(&inner.s, other.to_string()),
                })
            }
            Ok(Ok(_)) => {}
        }
        if !persistence_checked.swap(true, Ordering::Relaxed) {
            for warning in inner.persistence_warnings().await {
                tracing::warn!("{warning}");
            }
        }
        tokio::spawn(polled::keepalive(Arc::downgrade(&inner)));
        Ok(RedisSession { inner })
    }
}

impl<W: Wire> std::fmt::Debug for RedisSession<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RedisSession({:#x})", self.inner.core.id)
    }
}

struct Inner<W: Wire> {
    s: Arc<StoreSettings>,
    conn: W,
    k: Keys,
    op_timeout: Duration,
    /// The session's id, member, joins and loss, shared with the polled loops.
    core: polled::Core,
}

impl<W: Wire> Inner<W> {
    fn ttl_ms(&self) -> u64 {
        self.s.session_timeout.as_millis().max(1) as u64
    }

    /// Runs `f` on the shared connection within the operation timeout.
    async fn bounded<T, F, Fut>(&self, doing: &str, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(W) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        self.bounded_raw(doing, f)
            .await?
            .map_err(|e| classify(e, doing))
    }

    /// [`Inner::bounded`] for a read of a key that may hold another type than warden
    /// writes there: `Ok(None)` then (WRONGTYPE), which the caller takes as garbage that
    /// the next write replaces, instead of an error that fails every reader for good.
    async fn bounded_typed<T, F, Fut>(&self, doing: &str, f: F) -> Result<Option<T>, StoreError>
    where
        F: FnOnce(W) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        match self.bounded_raw(doing, f).await? {
            Err(e) if wrong_type(&e) => Ok(None),
            r => r.map(Some).map_err(|e| classify(e, doing)),
        }
    }

    /// A member hash's `session` and `record` fields; `None` when the key holds another
    /// type (garbage the next registration replaces).
    async fn member_fields(&self, key: String) -> Result<Option<Fields2>, StoreError> {
        self.bounded_typed("reading a member", |mut c| async move {
            redis::cmd("HMGET")
                .arg(&key)
                .arg("session")
                .arg("record")
                .query_async(&mut c)
                .await
        })
        .await
    }

    /// `f` on the shared connection, its answer as the driver gave it, within the
    /// operation timeout (no answer by then is an unknown outcome).
    async fn bounded_raw<T, F, Fut>(
        &self,
        doing: &str,
        f: F,
    ) -> Result<Result<T, RedisError>, StoreError>
    where
        F: FnOnce(W) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        tokio::time::timeout(self.op_timeout, f(self.conn.clone()))
            .await
            .map_err(|_| {
                StoreError::Unknown(format!(
                    "{doing} got no answer within {}",
                    humantime::format_duration(self.op_timeout)
                ))
            })
    }

    /// Warden's keys that hold another type than warden writes there (Redis `TYPE`, one
    /// round trip for all): one sentence each, naming the key and what replaces it.
    async fn wrong_types(&self) -> Result<Vec<String>, StoreError> {
        let expected = [
            (self.k.lock(), "hash", "the next election"),
            (
                self.k.key(BREADCRUMB),
                "hash",
                "the next promotion, or `warden fence --confirm --unreadable`,",
            ),
            (
                self.k.key(CONTROL),
                "hash",
                "`warden pause` or `warden resume`",
            ),
            (self.k.key(HISTORY), "hash", "the next transition"),
            (self.k.members(), "set", "each node's next registration"),
            (self.k.seen(), "hash", "each node's next join"),
            (self.k.epoch(), "string", "`warden init --force`"),
            (self.k.aside(), "set", "the next history set aside"),
        ];
        let mut pipe = redis::pipe();
        for (key, _, _) in &expected {
            pipe.cmd("TYPE").arg(key);
        }
        let found: Vec<String> = self
            .bounded("reading the types of warden's keys", |mut c| async move {
                pipe.query_async(&mut c).await
            })
            .await?;
        Ok(expected
            .iter()
            .zip(found)
            .filter(|((_, kind, _), found)| found != "none" && found != kind)
            .map(|((key, kind, replaced_by), found)| {
                format!(
                    "key {} holds a {}, not the {kind} warden writes there: every reader \
                     skips it, and {replaced_by} replaces it",
                    crate::record::printable(key),
                    crate::record::printable(&found)
                )
            })
            .collect())
    }

    /// The member records listed in `members`, with their sessions, into `snap` (and a
    /// garbage note for a member key of another type): what `snapshot` and `members`
    /// read, one SMEMBERS and one HMGET per member.
    async fn read_members(&self, snap: &mut ClusterSnapshot) -> Result<(), StoreError> {
        let i = self;
        let members_key = i.k.members();
        // A members key of another type lists nobody (the next registration replaces it).
        let listed: Vec<Vec<u8>> = i
            .bounded_typed("listing members", |mut c| async move {
                redis::cmd("SMEMBERS")
                    .arg(&members_key)
                    .query_async(&mut c)
                    .await
            })
            .await?
            .unwrap_or_default();
        let mut ids: Vec<String> = listed
            .iter()
            .map(|id| String::from_utf8_lossy(id).into_owned())
            .collect();
        ids.sort();
        for id in ids {
            if !snap.valid_member_id(&id) {
                continue;
            }
            let read = i.member_fields(i.k.member(&id)).await?;
            // Gone (expired), or a key of another type that no session holds: no longer
            // a member (the node's next registration replaces it).
            let Some((Some(session), data)) = read else {
                if read.is_none() {
                    snap.garbage.push(format!(
                        "key {} is not the hash warden writes there: member {} counts as \
                         gone until its next registration replaces it",
                        crate::record::printable(&i.k.member(&id)),
                        crate::record::printable(&id)
                    ));
                }
                continue;
            };
            let session = SessionId(
                std::str::from_utf8(&session)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_default(),
            );
            snap.add_member(id, session, &data.unwrap_or_default());
        }
        Ok(())
    }

    /// Runs a script invocation; its integer answer.
    async fn call(&self, doing: &str, inv: redis::ScriptInvocation<'_>) -> Result<i64, StoreError> {
        self.bounded(doing, |mut c| async move { inv.invoke_async(&mut c).await })
            .await
    }

    /// The lock: (session, record, epoch), if held (an expired key is gone).
    async fn read_lock(&self) -> Result<Option<(i64, Vec<u8>, Epoch)>, StoreError> {
        let key = self.k.lock();
        // A lock key of another type is no lock: no warden holds it, and the next ACQUIRE
        // replaces it.
        let h: Option<HashMap<Vec<u8>, Vec<u8>>> = self
            .bounded_typed("reading the lock", |mut c| async move {
                redis::cmd("HGETALL").arg(&key).query_async(&mut c).await
            })
            .await?;
        Ok(h.as_ref().and_then(lock_of))
    }

    async fn get(&self, name: &str) -> Result<Option<(Vec<u8>, i64)>, StoreError> {
        let key = self.k.key(name);
        let doing = format!("reading key {key}");
        let key2 = key.clone();
        let found: Option<Fields2> = self
            .bounded_typed(&doing, |mut c| async move {
                redis::cmd("HMGET")
                    .arg(&key2)
                    .arg("data")
                    .arg("version")
                    .query_async(&mut c)
                    .await
            })
            .await?;
        if let Some((data, version)) = found {
            return Ok(item_of(data, version));
        }
        // A key of another type: unreadable, at version -1, which the next write (`pause`,
        // a promotion, `init --force`) replaces. A string's content is kept as the data,
        // so that an unreadable history copied aside keeps it.
        let data: Option<Vec<u8>> = self
            .bounded_typed(&doing, |mut c| async move {
                redis::cmd("GET").arg(&key).query_async(&mut c).await
            })
            .await?
            .flatten();
        Ok(Some((data.unwrap_or_default(), -1)))
    }

    fn path(&self, name: &str) -> String {
        format!("key {}", self.k.key(name))
    }

    /// `appendonly` is not `yes`, or could not be read; `INFO` gives no `run_id` (its
    /// restarts go unseen, see [`ACQUIRE`]): what the operator should know.
    async fn persistence_warnings(&self) -> Vec<String> {
        let run: Result<String, StoreError> = self
            .bounded("reading INFO server", |mut c| async move {
                redis::cmd("INFO").arg("server").query_async(&mut c).await
            })
            .await;
        let run = match run {
            Ok(info) if info.lines().any(|l| l.starts_with("run_id:")) => None,
            Ok(_) => Some("it has no run_id".to_string()),
            Err(e) => Some(e.to_string()),
        };
        let run = run.map(|why| {
            format!(
                "could not read Redis's run_id at {} (INFO server: {why}); without it a standby \
                 cannot tell that Redis restarted and may have forgotten its last second, the \
                 last promotion among it: allow INFO (`+info`) to warden's user",
                self.s.url
            )
        });
        self.appendonly_warning()
            .await
            .into_iter()
            .chain(run)
            .collect()
    }

    async fn appendonly_warning(&self) -> Option<String> {
        let got: Result<Vec<String>, StoreError> = self
            .bounded("reading appendonly", |mut c| async move {
                redis::cmd("CONFIG")
                    .arg("GET")
                    .arg("appendonly")
                    .query_async(&mut c)
                    .await
            })
            .await;
        match got {
            Ok(v) if v.get(1).map(String::as_str) == Some("yes") => None,
            Ok(v) => Some(format!(
                "Redis at {} runs with appendonly {:?}: a restart loses the lock, the epoch and \
                 the breadcrumb, and every promotion stops until `warden init --force`; set \
                 `appendonly yes` (and `appendfsync everysec` or `always`)",
                self.s.url,
                v.get(1).cloned().unwrap_or_default()
            )),
            Err(e) => Some(format!(
                "could not read Redis's appendonly setting at {} ({e}); a renamed or disabled \
                 CONFIG command hides it: make sure `appendonly yes` is set",
                self.s.url
            )),
        }
    }

    /// SPEC §3a: a Redis that may evict keys under memory pressure can drop the epoch
    /// counter, the floor or the lock itself (every `volatile-*` policy picks among the keys
    /// with a TTL: the lock and the members). `Unsuitable` unless `maxmemory-policy` is
    /// `noeviction`; a policy that cannot be read (CONFIG renamed) is warned of.
    async fn check_eviction(&self) -> Result<(), StoreError> {
        let got: Result<Vec<String>, StoreError> = self
            .bounded("reading maxmemory-policy", |mut c| async move {
                redis::cmd("CONFIG")
                    .arg("GET")
                    .arg("maxmemory-policy")
                    .query_async(&mut c)
                    .await
            })
            .await;
        match got {
            Ok(v) if v.get(1).map(String::as_str) == Some("noeviction") => Ok(()),
            Ok(v) if v.len() >= 2 => Err(StoreError::Unsuitable(format!(
                "Redis at {} runs with maxmemory-policy {:?}: under memory pressure it may \
                 evict warden's keys (the epoch counter, the lock, what each node has seen), \
                 and two nodes could be promoted; set `maxmemory-policy noeviction` (CONFIG \
                 SET maxmemory-policy noeviction, and in redis.conf) or give warden a Redis \
                 of its own",
                self.s.url, v[1]
            ))),
            // A user whose ACL has no CONFIG is allowed: warn, as for `appendonly`.
            Ok(_) | Err(StoreError::Rejected(_) | StoreError::Auth(_)) => {
                tracing::warn!(
                    "could not read Redis's maxmemory-policy at {}; a renamed or disabled \
                     CONFIG command hides it: make sure it is `noeviction`",
                    self.s.url
                );
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Writes or deletes the breadcrumb at `version`, checking the lock when asked.
    async fn breadcrumb_at(
        &self,
        doing: &str,
        check_lock: bool,
        version: Option<i64>,
        data: Option<&[u8]>,
    ) -> Result<bool, StoreError> {
        let mut inv = BREADCRUMB_AT.prepare_invoke();
        inv.key(self.k.lock())
            .key(self.k.key(BREADCRUMB))
            .arg(self.core.id)
            .arg(if check_lock { "1" } else { "" })
            .arg(version.map(|v| v.to_string()).unwrap_or_default())
            .arg(data.unwrap_or_default())
            .arg(if data.is_some() { "set" } else { "del" });
        Ok(self.call(doing, inv).await? == 1)
    }

    /// Publishes a member record (renewing the lock with it when `renew`): 1 written, 0
    /// the lock is not ours, -1 the member key is not ours.
    async fn write_member(
        &self,
        doing: &str,
        m: &MemberRecord,
        renew: bool,
    ) -> Result<i64, StoreError> {
        let mut inv = SET_MEMBER.prepare_invoke();
        inv.key(self.k.member(&m.node.node_id))
            .key(self.k.seen())
            .key(self.k.lock())
            .key(self.k.members())
            .arg(self.core.id)
            .arg(record::to_bytes(m))
            .arg(self.ttl_ms())
            .arg(&m.node.node_id)
            .arg(m.node.epoch_seen.map(|e| e.to_string()).unwrap_or_default())
            .arg(if renew { "1" } else { "" });
        self.call(doing, inv).await
    }
}

impl<W: Wire> Polled for Inner<W> {
    fn core(&self) -> &polled::Core {
        &self.core
    }

    async fn touch(&self, node: &str) -> Result<Touched, StoreError> {
        let mut inv = TOUCH.prepare_invoke();
        inv.key(self.k.member(node))
            .key(self.k.lock())
            .arg(self.core.id)
            .arg(self.ttl_ms());
        Ok(match self.call("keeping the session alive", inv).await? {
            1 => Touched::Alive,
            2 => Touched::Restarted("Redis's run_id"),
            _ => Touched::Gone,
        })
    }

    async fn read_control(&self) -> Result<Option<(Vec<u8>, i64)>, StoreError> {
        self.get(CONTROL).await
    }

    async fn read_breadcrumb(&self) -> Result<Option<(Vec<u8>, i64)>, StoreError> {
        self.get(super::items::BREADCRUMB).await
    }

    async fn read_holder(&self) -> Result<Option<(i64, Vec<u8>)>, StoreError> {
        Ok(self.read_lock().await?.map(|(s, r, _)| (s, r)))
    }
}

impl<W: Wire> Items for RedisSession<W> {
    async fn get_item(&self, name: &str) -> Result<Option<(Vec<u8>, i64)>, StoreError> {
        self.inner.get(name).await
    }

    async fn put_item(
        &self,
        name: &str,
        data: &[u8],
        version: Option<i64>,
    ) -> Result<(), StoreError> {
        let i = &self.inner;
        let mut inv = PUT_ITEM.prepare_invoke();
        inv.key(i.k.key(name))
            .key(i.k.aside())
            .arg(data)
            .arg(version.map(|v| v.to_string()).unwrap_or_default())
            .arg(if name.starts_with(SET_ASIDE_PREFIX) {
                name
            } else {
                ""
            })
            .arg(if name == CONTROL {
                i.k.events()
            } else {
                String::new()
            });
        if i.call("writing", inv).await? == 1 {
            Ok(())
        } else {
            Err(StoreError::Rejected(format!(
                "{} changed since it was read",
                i.path(name)
            )))
        }
    }

    fn item_path(&self, name: &str) -> String {
        self.inner.path(name)
    }
}

/// A subscription to the cluster's events channel, or `None` (then polling alone).
async fn subscribe<W: Wire>(i: &Inner<W>) -> Option<W::Messages> {
    match tokio::time::timeout(i.op_timeout, i.conn.subscribe(i.k.events())).await {
        Ok(Ok(p)) => Some(p),
        _ => None,
    }
}
