//! The Lua scripts that make each of the Redis backend's steps one atomic call, and
//! their loading ([`lua_scripts`]).

use super::*;

/// `epoch_of(s)`: the epoch a stored text holds, or nil when it holds none: decimal
/// digits below 2^53 ([`MAX_KEPT_EPOCH`]; Lua's numbers are doubles, exact below it).
/// Raises `:seen[node]` to `e` (ARGV given as `node`, `e`; an empty `e` is nothing seen);
/// an entry that holds no epoch (garbage) is overwritten, never compared.
pub(super) const SEEN_FN: &str = concat!(
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
pub(super) static ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
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
pub(super) static TOUCH: LazyLock<Lua> = LazyLock::new(|| {
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
pub(super) static CREATE_MEMBER: LazyLock<Lua> = LazyLock::new(|| {
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
pub(super) static SET_MEMBER: LazyLock<Lua> = LazyLock::new(|| {
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
pub(super) static RELEASE: LazyLock<Lua> = LazyLock::new(|| {
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
pub(super) static PUT_ITEM: LazyLock<Lua> = LazyLock::new(|| {
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
pub(super) static COMMIT: LazyLock<Lua> = LazyLock::new(|| {
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
pub(super) static BREADCRUMB_AT: LazyLock<Lua> = LazyLock::new(|| {
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
pub(super) static DELETE_TAKEOVER: LazyLock<Lua> = LazyLock::new(|| {
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
pub(super) static MOVE_ASIDE: LazyLock<Lua> = LazyLock::new(|| {
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
pub(super) static WRITE_MARKER: LazyLock<Lua> = LazyLock::new(|| {
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
pub(super) struct Lua {
    name: &'static str,
    code: String,
    script: Script,
}

impl Lua {
    pub(super) fn new(name: &'static str, code: &str) -> Lua {
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
