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

use super::items::{self, newest_promotion, Items, BREADCRUMB, CONTROL, HISTORY, SET_ASIDE_PREFIX};
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

/// `epoch_of(s)`: the epoch a stored text holds, or nil when it holds none: decimal
/// digits below 2^53 ([`MAX_KEPT_EPOCH`]; Lua's numbers are doubles, exact below it).
/// Raises `:seen[node]` to `e` (ARGV given as `node`, `e`; an empty `e` is nothing seen);
/// an entry that holds no epoch (garbage) is overwritten, never compared.
const SEEN_FN: &str = concat!(
    guard_fns!(),
    r#"
local function epoch_of(s)
  if type(s) ~= 'string' or not string.match(s, '^%d+$') then return nil end
  local n = tonumber(s)
  if n and n < 9007199254740992 then return n end
  return nil
end
local function run_id()
  local ok, info = pcall(redis.call, 'INFO', 'server')
  if not ok or type(info) ~= 'string' then return '' end
  return string.match(info, 'run_id:(%x+)') or ''
end
local function raise_seen(key, node, e)
  local want = epoch_of(e)
  if want then
    local cur = epoch_of(hget(key, node))
    if not cur or want > cur then
      claim(key, 'hash')
      redis.call('HSET', key, node, e)
    end
  end
end
"#
);

/// KEYS: lock, epoch, init, seen, the joiner's member key. ARGV: session, record, ttl ms,
/// node id, the joiner's `epoch_seen` ('' = none). A session whose member key the store
/// no longer holds (it forgot it) takes nothing: `gone`. Nor does a session begun on
/// another run of the server (the member key's `run` is not the `run_id` of `INFO`, a
/// restart or a failover since): `restarted`. Such a server may have forgotten exactly
/// the last promotion (its last second of `appendfsync everysec`, a replica that lagged)
/// while the session, older, survived it; the new session the joiner then begins waits
/// one session timeout (SPEC §3a), by when the lease of that forgotten promotion's holder
/// has ended. `INFO` denied (an ACL) reads as run '' on both sides: no check. SPEC §3a: the joiner's entry of the floor is raised first, and
/// a counter below the floor is refused before it moves, so a store that forgot exactly
/// the last promotion never hands its epoch out again (the joiner remembers it).
///
/// A lock key that is no warden lock (another type, or a hash whose session is not a
/// session id: `SET lock x` over a held lock) is never taken at once: its holder, alive,
/// is inside its lease until its next renewal fails (SPEC §3a: nobody takes the lock
/// before its holder's lease ended). It is held by nobody (session 0) until it expires;
/// when it has no expiry it gets four times the joiner's session timeout, which covers a
/// holder of up to eight times the joiner's (its lease is half its own timeout): the
/// holder's own timeout went with its lock record.
static ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "acquire",
        &format!(
            r#"{SEEN_FN}
if hget(KEYS[5], 'session') ~= ARGV[1] then return {{'gone'}} end
local cur = hget(KEYS[1], 'session')
if cur and string.match(cur, '^%-?%d+$') then
  if cur == ARGV[1] then return {{'held', hget(KEYS[1], 'epoch')}} end
  return {{'other', cur, hget(KEYS[1], 'record') or ''}}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('PTTL', KEYS[1]) < 0 then
    redis.call('PEXPIRE', KEYS[1], 4 * tonumber(ARGV[3]))
  end
  return {{'other', '0', ''}}
end
raise_seen(KEYS[4], ARGV[4], ARGV[5])
if hget(KEYS[5], 'run') ~= run_id() then return {{'restarted'}} end
if redis.call('EXISTS', KEYS[3]) == 0 then return {{'lost', 'marker'}} end
local got, e = pcall(redis.call, 'GET', KEYS[2])
if not got or not e then return {{'lost', 'counter'}} end
if not epoch_of(e) then return {{'lost', 'counter'}} end
local seen, raw, who = 0, '0', ''
local listed, all = pcall(redis.call, 'HGETALL', KEYS[4])
if not listed then all = {{}} end
for i = 1, #all, 2 do
  local n = epoch_of(all[i + 1])
  if n and n > seen then seen, raw, who = n, all[i + 1], all[i] end
end
if epoch_of(e) < seen then return {{'lost', e, raw, who}} end
local n = redis.call('INCR', KEYS[2])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'session', ARGV[1], 'record', ARGV[2], 'epoch', n, 'version', 0)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {{'held', n}}
"#
        ),
    )
});

/// KEYS: member, lock. ARGV: session, ttl ms. 0: the member key is gone or another
/// session's; 2: the lock is not this session's and the server is another run than the
/// one the session registered on (see [`ACQUIRE`]; `polled::Touched::Restarted`).
static TOUCH: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "touch",
        &format!(
            r#"{SEEN_FN}
if hget(KEYS[1], 'session') ~= ARGV[1] then return 0 end
if hget(KEYS[2], 'session') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
if hget(KEYS[1], 'run') ~= run_id() then return 2 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"#
        ),
    )
});

/// KEYS: member, members, seen. ARGV: session, record, ttl ms, node id, epoch seen. The
/// member key keeps the `run_id` of the server the session first registered on (`run`,
/// see [`ACQUIRE`]): a registration again by the same session keeps it.
static CREATE_MEMBER: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "create_member",
        &format!(
            r#"{SEEN_FN}
local cur = hget(KEYS[1], 'session')
if cur and cur ~= ARGV[1] then return 0 end
local run = cur and hget(KEYS[1], 'run') or run_id()
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'session', ARGV[1], 'record', ARGV[2], 'run', run)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
claim(KEYS[2], 'set')
redis.call('SADD', KEYS[2], ARGV[4])
raise_seen(KEYS[3], ARGV[4], ARGV[5])
return 1
"#
        ),
    )
});

/// KEYS: member, seen, lock (checked when ARGV[6] is '1'), members. ARGV: session, record,
/// ttl ms, node id, epoch seen, renew. The node is listed in `members` again each time: a
/// members key that was deleted or replaced by garbage lists every live node again within
/// a renewal.
static SET_MEMBER: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "set_member",
        &format!(
            r#"{SEEN_FN}
if ARGV[6] == '1' then
  if hget(KEYS[3], 'session') ~= ARGV[1] then return 0 end
end
if hget(KEYS[1], 'session') ~= ARGV[1] then return -1 end
if ARGV[6] == '1' then redis.call('PEXPIRE', KEYS[3], ARGV[3]) end
redis.call('HSET', KEYS[1], 'record', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
raise_seen(KEYS[2], ARGV[4], ARGV[5])
claim(KEYS[4], 'set')
redis.call('SADD', KEYS[4], ARGV[4])
return 1
"#
        ),
    )
});

/// KEYS: lock. ARGV: session, events channel.
static RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "release",
        concat!(
            guard_fns!(),
            r#"
if hget(KEYS[1], 'session') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
return 0
"#
        ),
    )
});

/// KEYS: item, aside. ARGV: data, version ('' = create), set-aside name or '', channel to
/// publish on or ''.
static PUT_ITEM: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "put_item",
        concat!(
            guard_fns!(),
            r#"
local v = version_of(KEYS[1])
if ARGV[2] == '' then
  if v then return 0 end
  redis.call('HSET', KEYS[1], 'data', ARGV[1], 'version', 0)
else
  if v ~= ARGV[2] then return 0 end
  if v == '-1' then redis.call('DEL', KEYS[1]) end
  redis.call('HSET', KEYS[1], 'data', ARGV[1], 'version', tonumber(v) + 1)
end
if ARGV[3] ~= '' then
  claim(KEYS[2], 'set')
  redis.call('SADD', KEYS[2], ARGV[3])
end
if ARGV[4] ~= '' then redis.call('PUBLISH', ARGV[4], 'control') end
return 1
"#
        ),
    )
});

/// KEYS: lock, control, breadcrumb, seen. ARGV: session, record, control version,
/// breadcrumb version ('' = absent), ttl ms, the promotion's epoch, '1' when it commits
/// the breadcrumb at that version again (`coord::commits_again`: then only a floor above
/// the epoch refuses it, see `coord::floor_refuses`).
///
/// SPEC §3a: refused while the floor (`seen`) holds the epoch, as it is at the commit and
/// not as the takeover read it: a node that saw an epoch the store forgot may raise its
/// entry in between (its registration, while the fence ran), and a commit at an epoch the
/// floor holds would hand out a fencing token that is not new (stop 40's finding,
/// `tests/commit_floor.rs`). The elector reads the state again, finds the floor above
/// its epoch and says the store lost data.
static COMMIT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "commit",
        &format!(
            "{SEEN_FN}{}",
            r#"
if hget(KEYS[1], 'session') ~= ARGV[1] then return 0 end
if version_of(KEYS[2]) ~= ARGV[3] then return 0 end
local b = version_of(KEYS[3])
if ARGV[4] == '' then
  if b then return 0 end
elseif b ~= ARGV[4] then
  return 0
end
local want = epoch_of(ARGV[6])
if not want then return 0 end
local listed, kept = pcall(redis.call, 'HVALS', KEYS[4])
if listed then
  for i = 1, #kept do
    local n = epoch_of(kept[i])
    if n and (n > want or (n == want and ARGV[7] ~= '1')) then return 0 end
  end
end
redis.call('HSET', KEYS[1], 'record', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
if b == '-1' then redis.call('DEL', KEYS[3]) end
redis.call('HSET', KEYS[3], 'data', ARGV[2], 'version', (tonumber(b) or -1) + 1)
return 1
"#
        ),
    )
});

/// KEYS: lock, breadcrumb. ARGV: session, check lock ('1' or ''), version ('' = absent:
/// a set creates it), data, 'set' or 'del'.
static BREADCRUMB_AT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "breadcrumb_at",
        concat!(
            guard_fns!(),
            r#"
if ARGV[2] == '1' and hget(KEYS[1], 'session') ~= ARGV[1] then return 0 end
local v = version_of(KEYS[2])
if ARGV[3] == '' then
  if v or ARGV[5] == 'del' then return 0 end
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 'data', ARGV[4], 'version', 0)
  return 1
end
if v ~= ARGV[3] then return 0 end
if ARGV[5] == 'del' then
  redis.call('DEL', KEYS[2])
else
  if ARGV[3] == '-1' then redis.call('DEL', KEYS[2]) end
  redis.call('HSET', KEYS[2], 'data', ARGV[4], 'version', tonumber(ARGV[3]) + 1)
end
return 1
"#
        ),
    )
});

/// KEYS: breadcrumb, control. ARGV: their versions ('' = leave it). All or none.
static DELETE_TAKEOVER: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "delete_takeover",
        concat!(
            guard_fns!(),
            r#"
for i = 1, 2 do
  if ARGV[i] ~= '' and version_of(KEYS[i]) ~= ARGV[i] then return 0 end
end
for i = 1, 2 do
  if ARGV[i] ~= '' then redis.call('DEL', KEYS[i]) end
end
return 1
"#
        ),
    )
});

/// KEYS: history, copy, aside. ARGV: version, copy's name.
static MOVE_ASIDE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "move_aside",
        concat!(
            guard_fns!(),
            r#"
if version_of(KEYS[1]) ~= ARGV[1] then return 0 end
local data = hget(KEYS[1], 'data')
if not data and type_of(KEYS[1]) == 'string' then data = redis.call('GET', KEYS[1]) end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'data', data or '', 'version', 0)
redis.call('DEL', KEYS[1])
claim(KEYS[3], 'set')
redis.call('SADD', KEYS[3], ARGV[2])
return 1
"#
        ),
    )
});

/// KEYS: epoch, init. ARGV: floor or ''. Returns the counter.
/// A counter that holds no epoch (garbage, a wrong type) is the operator's to replace:
/// `init --force` sets it to the floor.
static WRITE_MARKER: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "write_marker",
        &format!(
            r#"{SEEN_FN}
local ok, cur = pcall(redis.call, 'GET', KEYS[1])
if not ok then redis.call('DEL', KEYS[1]) cur = nil end
if not epoch_of(cur) then
  redis.call('SET', KEYS[1], 0)
  cur = '0'
end
if ARGV[1] ~= '' and epoch_of(ARGV[1]) > epoch_of(cur) then
  redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('SET', KEYS[2], '1')
return redis.call('GET', KEYS[1])
"#
        ),
    )
});

/// A Lua script of this backend: its name, its text and the `redis::Script` that sends it
/// (EVALSHA, then SCRIPT LOAD once when the server does not know it).
struct Lua {
    name: &'static str,
    code: String,
    script: Script,
}

impl Lua {
    fn new(name: &'static str, code: &str) -> Lua {
        Lua {
            name,
            code: code.to_string(),
            script: Script::new(code),
        }
    }
}

impl std::ops::Deref for Lua {
    type Target = Script;

    fn deref(&self) -> &Script {
        &self.script
    }
}

/// Every Lua script of this backend, as (name, text): the simulation runs the very same
/// text on its embedded Lua 5.1 (issue 32 point 3), so that what the scripts decide (the
/// lock, the epoch, the floor, the expiries) is tested there, not a copy of it.
#[doc(hidden)]
pub fn lua_scripts() -> Vec<(&'static str, &'static str)> {
    [
        &ACQUIRE,
        &TOUCH,
        &CREATE_MEMBER,
        &SET_MEMBER,
        &RELEASE,
        &PUT_ITEM,
        &COMMIT,
        &BREADCRUMB_AT,
        &DELETE_TAKEOVER,
        &MOVE_ASIDE,
        &WRITE_MARKER,
    ]
    .into_iter()
    .map(|l: &'static LazyLock<Lua>| {
        let l: &'static Lua = l;
        (l.name, l.code.as_str())
    })
    .collect()
}

/// The RESP wire under a [`RedisSession`]: what the session needs of its connection to
/// Redis, and nothing of the election (that is all in the scripts and the session's
/// Rust). Commands and scripts go through `redis::aio::ConnectionLike` (the crate's own
/// seam: `query_async` and `invoke_async` take any), plus the two things a shared
/// connection cannot give: a connection of its own, and a subscription.
///
/// [`Resp`] is the real one (the `redis` crate's `ConnectionManager`: its timeouts,
/// reconnects and TLS); the simulation has one that runs the scripts on an embedded Lua
/// against an in-memory keyspace.
pub trait Wire: redis::aio::ConnectionLike + Clone + Send + Sync + 'static {
    /// A connection of its own: `WAIT` counts the replicas that have every write of its
    /// connection, so a commit and its `WAIT` go out on one that nothing else uses.
    type Own: redis::aio::ConnectionLike + Clone + Send;
    /// Messages of a subscription; each item is one message.
    type Messages: futures_util::Stream + Unpin + Send;

    /// Opens a connection of its own (bounded by the caller).
    fn own_connection(&self) -> impl Future<Output = Result<Self::Own, RedisError>> + Send;

    /// Subscribes to `channel` (bounded by the caller); `Err` when it cannot.
    fn subscribe(
        &self,
        channel: String,
    ) -> impl Future<Output = Result<Self::Messages, RedisError>> + Send;
}

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

impl<W: Wire> Session for RedisSession<W> {
    fn id(&self) -> SessionId {
        SessionId(self.inner.core.id)
    }

    fn granted_session_timeout(&self) -> Option<Duration> {
        None
    }

    async fn events(&self, events: mpsc::UnboundedSender<StoreEvent>) {
        // The events channel: a release or a control change wakes the loop at once;
        // polling every poll_interval covers a lost message or a lost subscription.
        let i = &*self.inner;
        let messages = tokio::sync::Mutex::new(None::<W::Messages>);
        polled::events(i, events, || async {
            let mut m = messages.lock().await;
            if m.is_none() {
                *m = subscribe(i).await;
            }
            match m.as_mut() {
                Some(stream) => {
                    if stream.next().await.is_none() {
                        *m = None;
                    }
                }
                None => std::future::pending().await,
            }
        })
        .await
    }

    async fn ensure_cluster(&self) -> Result<(), StoreError> {
        // Nothing to create: keys come with their first write.
        Ok(())
    }

    async fn check_initialized(&self) -> Result<(), StoreError> {
        let i = &self.inner;
        i.check_eviction().await?;
        let key = i.k.init();
        let exists: bool = i
            .bounded("looking for the init marker", |mut c| async move {
                redis::cmd("EXISTS").arg(&key).query_async(&mut c).await
            })
            .await?;
        if exists {
            Ok(())
        } else {
            Err(StoreError::NotInitialized(format!(
                "cluster {} has no init marker in Redis (key {}): run `warden init` first; if \
                 it ran before, Redis lost it (restarted without persistence, or failed over \
                 to a stale replica): check that no old active still serves, then run `warden \
                 init --force`",
                i.s.cluster,
                i.k.init()
            )))
        }
    }

    async fn write_marker(&self, floor: Option<Epoch>) -> Result<Option<String>, StoreError> {
        let i = &self.inner;
        let mut inv = WRITE_MARKER.prepare_invoke();
        inv.key(i.k.epoch())
            .key(i.k.init())
            .arg(floor.map(|f| f.to_string()).unwrap_or_default());
        let epoch: Value = i
            .bounded("writing the init marker", |mut c| async move {
                inv.invoke_async(&mut c).await
            })
            .await?;
        Ok(Some(format!(
            "cluster {} has its init marker ({}); its epoch counter is at {}",
            i.s.cluster,
            i.k.init(),
            text(&epoch).unwrap_or_default()
        )))
    }

    async fn member(
        &self,
        node_id: &str,
    ) -> Result<Option<(SessionId, Result<MemberRecord, record::RecordError>)>, StoreError> {
        let i = &self.inner;
        let read = i.member_fields(i.k.member(node_id)).await?;
        // A key of another type is no member: the next registration replaces it.
        let Some((Some(session), data)) = read else {
            return Ok(None);
        };
        Ok(Some((
            SessionId(
                std::str::from_utf8(&session)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_default(),
            ),
            record::parse(&data.unwrap_or_default()),
        )))
    }

    async fn create_member(&self, m: &MemberRecord) -> Result<(), StoreError> {
        let i = &self.inner;
        let node = m.node.node_id.clone();
        let mut inv = CREATE_MEMBER.prepare_invoke();
        inv.key(i.k.member(&node))
            .key(i.k.members())
            .key(i.k.seen())
            .arg(i.core.id)
            .arg(record::to_bytes(m))
            .arg(i.ttl_ms())
            .arg(&node)
            .arg(m.node.epoch_seen.map(|e| e.to_string()).unwrap_or_default());
        if i.call("registering this node", inv).await? != 1 {
            return Err(StoreError::Rejected(format!(
                "another live session holds the member key of {node}"
            )));
        }
        i.core.registered(&node);
        Ok(())
    }

    async fn delete_member(&self, node_id: &str) -> Result<(), StoreError> {
        let i = &self.inner;
        let key = i.k.member(node_id);
        i.bounded("deleting a stale member", |mut c| async move {
            redis::cmd("DEL").arg(&key).query_async::<i64>(&mut c).await
        })
        .await
        .map(|_| ())
    }

    async fn set_member(&self, m: &MemberRecord) -> Result<(), StoreError> {
        match self
            .inner
            .write_member("publishing the member record", m, false)
            .await?
        {
            1 => Ok(()),
            _ => Err(StoreError::SessionLost(
                "the member key no longer names this session".into(),
            )),
        }
    }

    async fn join(&self, me: &NodeRecord, join: u64) -> JoinOutcome {
        let i = &self.inner;
        let mut inv = ACQUIRE.prepare_invoke();
        inv.key(i.k.lock())
            .key(i.k.epoch())
            .key(i.k.init())
            .key(i.k.seen())
            .key(i.k.member(&me.node_id))
            .arg(i.core.id)
            .arg(record::to_bytes(me))
            .arg(i.ttl_ms())
            .arg(&me.node_id)
            .arg(me.epoch_seen.map(|e| e.to_string()).unwrap_or_default());
        let answer: Result<Vec<Value>, StoreError> = i
            .bounded("taking the lock", |mut c| async move {
                inv.invoke_async(&mut c).await
            })
            .await;
        let committed = |record: &[u8]| record::parse::<NodeRecord>(record).ok()?.epoch;
        let outcome = match answer {
            Ok(v) => match text(v.first().unwrap_or(&Value::Nil)).as_deref() {
                Some("held") => {
                    let epoch = v.get(1).and_then(text).and_then(|e| e.parse().ok());
                    epoch.map(|epoch| (JoinOutcome::Held { epoch }, i.core.id))
                }
                Some("other") => {
                    let holder = v.get(1).and_then(text).and_then(|s| s.parse().ok());
                    let epoch = v.get(2).map(bytes).and_then(|r| committed(&r));
                    holder.map(|h| (JoinOutcome::Exists { epoch }, h))
                }
                Some("gone") => {
                    i.core.gone();
                    return JoinOutcome::Unknown;
                }
                Some("restarted") => {
                    i.core.restarted("Redis's run_id");
                    return JoinOutcome::Unknown;
                }
                Some("lost") => {
                    let what = v.get(1).and_then(text).unwrap_or_default();
                    let seen = v.get(2).and_then(text).and_then(|s| s.parse().ok());
                    let who = v.get(3).and_then(text).filter(|w| !w.is_empty());
                    let counter = what.parse().ok();
                    let why = super::lost_data(seen.is_none(), counter, seen, who.as_deref())
                        .unwrap_or_else(|| format!("the store lost data ({what})"));
                    return JoinOutcome::LostData(why);
                }
                _ => None,
            },
            // An unknown outcome: the lock is ours iff it names our session.
            Err(_) => match i.read_lock().await {
                Ok(Some((holder, _, epoch))) if holder == i.core.id => {
                    Some((JoinOutcome::Held { epoch }, holder))
                }
                Ok(Some((holder, record, _))) => Some((
                    JoinOutcome::Exists {
                        epoch: committed(&record),
                    },
                    holder,
                )),
                _ => None,
            },
        };
        match outcome {
            Some((o, holder)) => {
                i.core.joined.send_replace(Some((join, holder)));
                o
            }
            None => JoinOutcome::Unknown,
        }
    }

    async fn read_state(&self) -> Result<TakeoverState, StoreError> {
        let i = &self.inner;
        let seen_key = i.k.seen();
        let (breadcrumb, history, seen) = tokio::join!(
            i.get(BREADCRUMB),
            self.read_history(),
            i.bounded_typed("reading the members' epochs", |mut c| async move {
                redis::cmd("HVALS")
                    .arg(&seen_key)
                    .query_async::<Vec<Vec<u8>>>(&mut c)
                    .await
            })
        );
        let breadcrumb = items::breadcrumb_view(breadcrumb?);
        let (control, control_version) = items::takeover_control(self).await?;
        Ok(TakeoverState {
            breadcrumb,
            control,
            control_version: Version::new(control_version),
            history_by_node: history
                .as_ref()
                .map(items::history_by_node)
                .unwrap_or_default(),
            confirmed_by_node: history
                .as_ref()
                .map(items::confirmed_by_node)
                .unwrap_or_default(),
            newest_promotion: newest_promotion(&history?),
            members_epoch_seen: seen?
                .unwrap_or_default()
                .iter()
                .filter_map(|s| kept_number(s))
                .max(),
        })
    }

    async fn commit_promotion(
        &self,
        breadcrumb: &NodeRecord,
        breadcrumb_version: Option<Version>,
        control_version: Version,
    ) -> WriteOutcome {
        let i = &self.inner;
        // Whether this commits our breadcrumb again, read first: the script's check of the
        // breadcrumb's version makes the answer hold at the commit. Unread, it does not.
        let again = match i.get(BREADCRUMB).await {
            Ok(Some((data, version))) if Some(version) == breadcrumb_version.map(Version::get) => {
                let current = record::parse::<NodeRecord>(&data).ok();
                super::commits_again(breadcrumb, current.as_ref())
            }
            _ => false,
        };
        let mut inv = COMMIT.prepare_invoke();
        inv.key(i.k.lock())
            .key(i.k.key(CONTROL))
            .key(i.k.key(BREADCRUMB))
            .key(i.k.seen())
            .arg(i.core.id)
            .arg(record::to_bytes(breadcrumb))
            .arg(control_version.get())
            .arg(
                breadcrumb_version
                    .map(|v| v.get().to_string())
                    .unwrap_or_default(),
            )
            .arg(i.ttl_ms())
            .arg(breadcrumb.epoch.map(|e| e.to_string()).unwrap_or_default())
            .arg(if again { "1" } else { "" });
        if i.s.replicas_ack == 0 {
            return outcome(
                i.call("committing the promotion", inv)
                    .await
                    .map(|n| n == 1),
            );
        }
        // SPEC §3a `replicas_ack`: a failover of the store to a replica that lacks this
        // promotion would hand its epoch out again. WAIT counts the replicas that have
        // every write of *its connection*, so the commit and the WAIT go out on one
        // connection of their own: the shared one reconnects by itself, and a WAIT on a
        // fresh connection would count replicas that lack the commit.
        let need = i.s.replicas_ack;
        let wait_ms = (i.s.session_timeout / 6).as_millis().max(1) as u64;
        let op = i.op_timeout;
        let own = match tokio::time::timeout(op, i.conn.own_connection()).await {
            Ok(Ok(c)) => c,
            other => {
                let why = match other {
                    Ok(Err(e)) => e.to_string(),
                    _ => "no answer".into(),
                };
                tracing::warn!(
                    "could not open a connection to Redis at {} for the promotion and its \
                     WAIT (coordination.redis.replicas_ack = {need}): {why}; not promoting",
                    i.s.url
                );
                return WriteOutcome::NotDurable;
            }
        };
        let mut c = own.clone();
        let written = match tokio::time::timeout(op, inv.invoke_async::<i64>(&mut c)).await {
            Err(_) => WriteOutcome::Unknown,
            Ok(r) => outcome(
                r.map(|n| n == 1)
                    .map_err(|e| classify(e, "committing the promotion")),
            ),
        };
        if written == WriteOutcome::Conflict {
            return written;
        }
        // An unknown commit cannot be waited for: never promoted on (the elector would
        // take a breadcrumb it finds ours for a commit, without the WAIT).
        let mut c = own;
        let acked: Result<i64, StoreError> = if written == WriteOutcome::Unknown {
            Err(StoreError::Unknown(
                "the commit's outcome is unknown, so it cannot be waited for".into(),
            ))
        } else {
            match tokio::time::timeout(
                op,
                redis::cmd("WAIT")
                    .arg(need)
                    .arg(wait_ms)
                    .query_async::<i64>(&mut c),
            )
            .await
            {
                Err(_) => Err(StoreError::Unknown("WAIT got no answer".into())),
                Ok(r) => r.map_err(|e| classify(e, "waiting for the store's replicas")),
            }
        };
        match acked {
            Ok(n) if n >= i64::from(need) => WriteOutcome::Done,
            other => {
                let got = match other {
                    Ok(n) => format!("{n} of them did"),
                    Err(e) => e.to_string(),
                };
                // Taken back while the lock is ours, so that nobody fences this node for
                // a promotion that never started; what stays (an unknown outcome) names a
                // node whose service never ran.
                let written = breadcrumb_version.map_or(0, |v| v.get() + 1);
                let undone = i
                    .breadcrumb_at("taking the promotion back", true, Some(written), None)
                    .await;
                tracing::warn!(
                    "the promotion is not on {need} replicas of Redis within {wait_ms} ms \
                     ({got}; coordination.redis.replicas_ack = {need}): not promoting{}; \
                     check the store's replicas (INFO replication on {})",
                    match undone {
                        Ok(true) => ", the breadcrumb taken back".to_string(),
                        Ok(false) => ", the breadcrumb changed meanwhile".to_string(),
                        Err(e) => format!(", the breadcrumb not taken back ({e})"),
                    },
                    i.s.url
                );
                WriteOutcome::NotDurable
            }
        }
    }

    async fn renew(&self, member: &MemberRecord) -> WriteOutcome {
        outcome(
            self.inner
                .write_member("renewing the lease", member, true)
                .await
                .map(|n| n == 1),
        )
    }

    async fn rewrite_own_breadcrumb(&self, record: &NodeRecord) -> WriteOutcome {
        let i = &self.inner;
        let v = match items::own_breadcrumb_version(self, record).await {
            Ok(v) => v,
            Err(outcome) => return outcome,
        };
        outcome(
            i.breadcrumb_at(
                "recording the service",
                true,
                Some(v),
                Some(&record::to_bytes(record)),
            )
            .await,
        )
    }

    async fn restore_breadcrumb(
        &self,
        record: &NodeRecord,
        version: Option<Version>,
    ) -> WriteOutcome {
        outcome(
            self.inner
                .breadcrumb_at(
                    "restoring the breadcrumb",
                    true,
                    version.map(|v| v.get()),
                    Some(&record::to_bytes(record)),
                )
                .await,
        )
    }

    async fn delete_breadcrumb_at(
        &self,
        version: Version,
        check_lock: bool,
    ) -> Result<(), StoreError> {
        let i = &self.inner;
        if i.breadcrumb_at(
            "deleting the breadcrumb",
            check_lock,
            Some(version.get()),
            None,
        )
        .await?
        {
            Ok(())
        } else {
            Err(items::breadcrumb_changed(self, check_lock))
        }
    }

    async fn release(&self) -> Result<(), StoreError> {
        let i = &self.inner;
        let mut inv = RELEASE.prepare_invoke();
        inv.key(i.k.lock()).arg(i.core.id).arg(i.k.events());
        i.call("releasing the lock", inv).await.map(|_| ())
    }

    items::session_methods_on_items!();

    async fn set_aside(&self) -> Result<Vec<String>, StoreError> {
        let i = &self.inner;
        let key = i.k.aside();
        // A key of another type lists none (the next set-aside replaces it).
        let listed: Vec<Vec<u8>> = i
            .bounded_typed("listing set-aside histories", |mut c| async move {
                redis::cmd("SMEMBERS").arg(&key).query_async(&mut c).await
            })
            .await?
            .unwrap_or_default();
        let mut names: Vec<String> = listed
            .iter()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect();
        names.sort();
        Ok(names.iter().map(|n| i.path(n)).collect())
    }

    items::control_methods_on_items!();

    async fn snapshot(&self) -> Result<ClusterSnapshot, StoreError> {
        let i = &self.inner;
        let lock = i.read_lock().await?;
        let mut snap = ClusterSnapshot::of_lock(
            lock.map(|(session, data, epoch)| (data, epoch, SessionId(session))),
        );
        let (breadcrumb, control) = (i.get(BREADCRUMB).await?, i.get(CONTROL).await?);
        snap.garbage = i.wrong_types().await?;
        for (name, item, replaced_by) in [
            (
                BREADCRUMB,
                &breadcrumb,
                "the next promotion, or `warden fence --confirm --unreadable`,",
            ),
            (CONTROL, &control, "`warden pause` or `warden resume`"),
        ] {
            let key = i.k.key(name);
            let named = snap.garbage.iter().any(|g| g.contains(key.as_str()));
            if matches!(item, Some((_, -1))) && !named {
                snap.garbage.push(format!(
                    "key {}: its version field holds no version warden wrote (it writes \
                     whole numbers): the item counts as unreadable, and {replaced_by} \
                     replaces it",
                    crate::record::printable(&key)
                ));
            }
        }
        snap.add_items(breadcrumb, control);
        let (epoch_key, init_key) = (i.k.epoch(), i.k.init());
        let init: bool = i
            .bounded("reading the init marker", |mut c| async move {
                redis::cmd("EXISTS")
                    .arg(&init_key)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        // A counter that holds no epoch (garbage, or a key of another type) is as lost as
        // a missing one: `init --force` replaces it.
        let counter = match i
            .bounded_typed("reading the epoch counter", |mut c| async move {
                redis::cmd("GET")
                    .arg(&epoch_key)
                    .query_async::<Option<Vec<u8>>>(&mut c)
                    .await
            })
            .await
        {
            Ok(Some(None)) => None,
            Ok(Some(Some(v))) => {
                let e = kept_number(&v);
                snap.counter_unreadable = e.is_none();
                e
            }
            Ok(None) | Err(StoreError::Rejected(_)) => {
                snap.counter_unreadable = true;
                None
            }
            Err(e) => return Err(e),
        };
        i.read_members(&mut snap).await?;
        snap.history = self.read_history().await?;
        snap.set_aside = self.set_aside().await?;
        let seen_key = i.k.seen();
        // A floor of another type keeps no epoch (the next raise replaces it).
        let seen: HashMap<Vec<u8>, Vec<u8>> = i
            .bounded_typed("reading the floor", |mut c| async move {
                redis::cmd("HGETALL")
                    .arg(&seen_key)
                    .query_async(&mut c)
                    .await
            })
            .await?
            .unwrap_or_default();
        snap.kept_floor = seen
            .into_iter()
            .filter_map(|(node, e)| {
                Some((
                    kept_number(&e)?,
                    String::from_utf8_lossy(&node).into_owned(),
                ))
            })
            .max();
        snap.marker_missing = !init || counter.is_none();
        snap.epoch_counter = counter;
        Ok(snap)
    }

    /// The member records alone (the daemon's priority rule reads them once a session
    /// timeout): not the whole snapshot, which also reads history and every other key.
    async fn members(
        &self,
    ) -> Result<Vec<(String, Result<MemberRecord, record::RecordError>)>, StoreError> {
        let mut snap = ClusterSnapshot::default();
        self.inner.read_members(&mut snap).await?;
        Ok(snap.members)
    }

    fn name_of(&self, what: Item) -> String {
        let i = &self.inner;
        match what {
            Item::Cluster => format!("cluster {} under the keys {}:*", i.s.cluster, i.k.base),
            Item::Lock => format!("key {}", i.k.lock()),
            Item::Breadcrumb => i.path(BREADCRUMB),
            Item::Control => i.path(CONTROL),
            Item::History => i.path(HISTORY),
        }
    }

    async fn init(&self) -> Result<Vec<String>, StoreError> {
        let i = &self.inner;
        i.check_eviction().await?;
        let mut done = vec![format!(
            "Redis at {} answers; cluster {} lives under the keys {}:*",
            i.s.url, i.s.cluster, i.k.base
        )];
        for warning in i.persistence_warnings().await {
            done.push(format!("warning: {warning}"));
        }
        Ok(done)
    }

    async fn delete_takeover_state(
        &self,
        breadcrumb: Option<Version>,
        control: Option<Version>,
    ) -> Result<(), StoreError> {
        let i = &self.inner;
        let v = |v: Option<Version>| v.map(|v| v.get().to_string()).unwrap_or_default();
        let mut inv = DELETE_TAKEOVER.prepare_invoke();
        inv.key(i.k.key(BREADCRUMB))
            .key(i.k.key(CONTROL))
            .arg(v(breadcrumb))
            .arg(v(control));
        if i.call("deleting the takeover state", inv).await? == 1 {
            Ok(())
        } else {
            Err(StoreError::Rejected(
                "the breadcrumb or control changed since they were read".into(),
            ))
        }
    }

    async fn current_epoch(&self) -> Result<Epoch, StoreError> {
        let i = &self.inner;
        let key = i.k.epoch();
        let key2 = key.clone();
        let epoch: Option<Option<Vec<u8>>> = i
            .bounded_typed("reading the epoch counter", |mut c| async move {
                redis::cmd("GET").arg(&key2).query_async(&mut c).await
            })
            .await?;
        match epoch {
            Some(None) => Err(items::no_epoch_counter(&i.s.cluster)),
            Some(Some(raw)) if kept_number(&raw).is_some() => {
                Ok(kept_number(&raw).unwrap_or_default())
            }
            _ => Err(StoreError::Rejected(format!(
                "key {key} holds no epoch (not decimal digits below 2^53, or not a string): \
                 run `warden init --force`, which replaces it"
            ))),
        }
    }

    async fn move_history_aside_if_above(
        &self,
        epoch: Epoch,
    ) -> Result<Option<(String, Epoch)>, StoreError> {
        let i = &self.inner;
        let Some((_, v, newest)) = items::history_above(self, epoch).await? else {
            return Ok(None);
        };
        let copy = items::set_aside_name("old");
        let mut inv = MOVE_ASIDE.prepare_invoke();
        inv.key(i.k.key(HISTORY))
            .key(i.k.key(&copy))
            .key(i.k.aside())
            .arg(v)
            .arg(&copy);
        if i.call("moving history aside", inv).await? != 1 {
            return Err(StoreError::Rejected(format!(
                "{} changed while it was moved aside",
                i.path(HISTORY)
            )));
        }
        Ok(Some((i.path(&copy), newest)))
    }
}

/// A subscription to the cluster's events channel, or `None` (then polling alone).
async fn subscribe<W: Wire>(i: &Inner<W>) -> Option<W::Messages> {
    match tokio::time::timeout(i.op_timeout, i.conn.subscribe(i.k.events())).await {
        Ok(Ok(p)) => Some(p),
        _ => None,
    }
}
