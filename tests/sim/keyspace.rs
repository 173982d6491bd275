//! A Redis keyspace in memory, with the commands warden's Redis backend sends and the Lua
//! its scripts run (issue 32 point 3): the simulation runs the backend's own scripts, their
//! very text ([`warden::coord::redis::lua_scripts`]), on an embedded Lua 5.1 (Redis runs
//! Lua 5.1) against this keyspace, so that what they decide (the lock, the epoch, the
//! floor, the expiries) is the product's, not a copy of it.
//!
//! What Redis does and this does too: strings, hashes and sets (the types warden's keys
//! and its garbage tests use; no lists or sorted sets: no script touches one), a TTL per
//! key on the store's clock (PEXPIRE, PTTL; an expired key is gone for every command),
//! TIME on that clock, WRONGTYPE and the other errors with Redis's codes, and the
//! scripting rules of Redis 7.0 (Debian's): `redis.call` raises an error reply as its
//! text (so that `pcall(redis.call, ...)` catches it), `redis.pcall` returns it as a table
//! `{err = ...}`, a status reply is
//! `{ok = ...}`, a nil bulk is `false`; a script's answer converts back as Redis converts
//! it (a number truncated to an integer, `true` to 1, `false` and nil to a nil bulk, a
//! table to an array up to its first nil, a table with `err` or `ok` to an error or a
//! status). Hashes and sets answer in insertion order, as Redis's small encodings do.
//!
//! Determinism: ordered maps only; the Lua state holds nothing between scripts but the
//! compiled scripts (KEYS and ARGV are set anew for each call).

#![allow(dead_code)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

/// A reply, as RESP2 carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Nil,
    Int(i64),
    Bulk(Vec<u8>),
    Status(String),
    Array(Vec<Reply>),
    /// An error reply: its first word is the code (`WRONGTYPE`, `ERR`, `NOSCRIPT`).
    Err(String),
}

impl Reply {
    fn bulk(s: impl AsRef<[u8]>) -> Reply {
        Reply::Bulk(s.as_ref().to_vec())
    }

    /// As the `redis` crate hands a reply to its caller (an error reply parsed the way
    /// its parser does, so that its kind and code are the real ones).
    pub fn to_value(&self) -> redis::Value {
        match self {
            Reply::Nil => redis::Value::Nil,
            Reply::Int(i) => redis::Value::Int(*i),
            Reply::Bulk(b) => redis::Value::BulkString(b.clone()),
            Reply::Status(s) if s == "OK" => redis::Value::Okay,
            Reply::Status(s) => redis::Value::SimpleString(s.clone()),
            Reply::Array(a) => redis::Value::Array(a.iter().map(Reply::to_value).collect()),
            Reply::Err(e) => {
                let line = format!("-{}\r\n", e.replace(['\r', '\n'], " "));
                redis::parse_redis_value(line.as_bytes())
                    .unwrap_or_else(|_| redis::Value::SimpleString(e.clone()))
            }
        }
    }
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_INTEGER: &str = "ERR value is not an integer or out of range";

/// A hash's fields and values, in insertion order.
type Fields = Vec<(Vec<u8>, Vec<u8>)>;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Val {
    Str(Vec<u8>),
    /// Fields in insertion order.
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// Members in insertion order.
    Set(Vec<Vec<u8>>),
}

impl Val {
    fn type_name(&self) -> &'static str {
        match self {
            Val::Str(_) => "string",
            Val::Hash(_) => "hash",
            Val::Set(_) => "set",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    val: Val,
    /// When it expires, on the store's clock.
    expires: Option<Duration>,
}

/// The keyspace. `clock` arguments are the store's clock now (its own: drifting,
/// stepped, stepped back), as an offset from the simulation's start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keyspace {
    keys: BTreeMap<Vec<u8>, Entry>,
    /// Scripts loaded (SCRIPT LOAD, EVAL), by SHA1: a restored or wiped store keeps them
    /// (as a restarted Redis does not: then EVALSHA answers NOSCRIPT and the client loads
    /// the script again, which this keyspace would answer the same way).
    scripts: BTreeMap<String, String>,
    /// Grows by one with every command that wrote data (not with a TTL set anew).
    pub writes: u64,
    /// Which run of the server this is (INFO's `run_id`); a restart sets a new one.
    pub run: u64,
    /// No key expires before this (a lower bound; `None`: none has a TTL).
    earliest: Option<Duration>,
}

fn int_of(b: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.starts_with('+') || (s.len() > 1 && s.starts_with('0')) {
        return None;
    }
    s.parse().ok()
}

fn lower(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_ascii_lowercase()
}

impl Keyspace {
    /// A key's entry if it is alive at `clock`.
    fn live(&self, key: &[u8], clock: Duration) -> Option<&Entry> {
        self.keys
            .get(key)
            .filter(|e| e.expires.is_none_or(|t| t > clock))
    }

    fn live_mut(&mut self, key: &[u8], clock: Duration) -> Option<&mut Entry> {
        if self.live(key, clock).is_none() {
            self.keys.remove(key);
            return None;
        }
        self.keys.get_mut(key)
    }

    /// Removes the keys whose time is up; their names.
    pub fn sweep(&mut self, clock: Duration) -> Vec<Vec<u8>> {
        // Called at every access of the simulated store: most find nothing due.
        if self.earliest.is_none_or(|t| clock < t) {
            return Vec::new();
        }
        let gone: Vec<Vec<u8>> = self
            .keys
            .iter()
            .filter(|(_, e)| e.expires.is_some_and(|t| t <= clock))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &gone {
            self.keys.remove(k);
        }
        self.earliest = self.keys.values().filter_map(|e| e.expires).min();
        gone
    }

    /// A hash's field, if the key is a live hash that has it (no error for another type).
    pub fn hget(&self, key: &[u8], field: &[u8], clock: Duration) -> Option<Vec<u8>> {
        match &self.live(key, clock)?.val {
            Val::Hash(h) => h.iter().find(|(f, _)| f == field).map(|(_, v)| v.clone()),
            _ => None,
        }
    }

    /// A hash's field whether or not the key's time is up (what an expiring key held).
    pub fn hget_raw(&self, key: &[u8], field: &[u8]) -> Option<Vec<u8>> {
        match &self.keys.get(key)?.val {
            Val::Hash(h) => h.iter().find(|(f, _)| f == field).map(|(_, v)| v.clone()),
            _ => None,
        }
    }

    /// Whether the key is alive at `clock`.
    pub fn exists(&self, key: &[u8], clock: Duration) -> bool {
        self.live(key, clock).is_some()
    }

    /// A hash's fields, if the key is a live hash.
    pub fn hgetall(&self, key: &[u8], clock: Duration) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
        match &self.live(key, clock)?.val {
            Val::Hash(h) => Some(h.clone()),
            _ => None,
        }
    }

    /// A string's value, if the key is a live string.
    pub fn get(&self, key: &[u8], clock: Duration) -> Option<Vec<u8>> {
        match &self.live(key, clock)?.val {
            Val::Str(s) => Some(s.clone()),
            _ => None,
        }
    }

    /// The live keys that start with `prefix`.
    pub fn keys_under(&self, prefix: &[u8], clock: Duration) -> Vec<Vec<u8>> {
        self.keys
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter(|(k, _)| self.live(k, clock).is_some())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Sets a hash's fields (the harness's own writes: the operator's `control`).
    pub fn hset(&mut self, key: &[u8], fields: &[(&[u8], Vec<u8>)], clock: Duration) {
        let mut args: Vec<Vec<u8>> = vec![b"HSET".to_vec(), key.to_vec()];
        for (f, v) in fields {
            args.push(f.to_vec());
            args.push(v.clone());
        }
        let _ = self.exec(&args, clock);
    }

    /// Deletes a key (the harness's own writes: `fence --confirm`).
    pub fn del(&mut self, key: &[u8]) -> bool {
        let gone = self.keys.remove(key).is_some();
        self.writes += u64::from(gone);
        gone
    }

    fn wrote(&mut self) {
        self.writes += 1;
    }

    fn hash_mut(
        &mut self,
        key: &[u8],
        clock: Duration,
        create: bool,
    ) -> Result<Option<&mut Fields>, Reply> {
        if self.live_mut(key, clock).is_none() {
            if !create {
                return Ok(None);
            }
            self.keys.insert(
                key.to_vec(),
                Entry {
                    val: Val::Hash(Vec::new()),
                    expires: None,
                },
            );
        }
        match self.keys.get_mut(key).map(|e| &mut e.val) {
            Some(Val::Hash(h)) => Ok(Some(h)),
            _ => Err(Reply::Err(WRONGTYPE.into())),
        }
    }

    fn hash(&self, key: &[u8], clock: Duration) -> Result<Option<&Fields>, Reply> {
        match self.live(key, clock).map(|e| &e.val) {
            None => Ok(None),
            Some(Val::Hash(h)) => Ok(Some(h)),
            Some(_) => Err(Reply::Err(WRONGTYPE.into())),
        }
    }

    fn set(&self, key: &[u8], clock: Duration) -> Result<Option<&Vec<Vec<u8>>>, Reply> {
        match self.live(key, clock).map(|e| &e.val) {
            None => Ok(None),
            Some(Val::Set(s)) => Ok(Some(s)),
            Some(_) => Err(Reply::Err(WRONGTYPE.into())),
        }
    }

    fn string(&self, key: &[u8], clock: Duration) -> Result<Option<&Vec<u8>>, Reply> {
        match self.live(key, clock).map(|e| &e.val) {
            None => Ok(None),
            Some(Val::Str(s)) => Ok(Some(s)),
            Some(_) => Err(Reply::Err(WRONGTYPE.into())),
        }
    }

    /// Runs one command (its name and arguments) at `clock`.
    pub fn exec(&mut self, args: &[Vec<u8>], clock: Duration) -> Reply {
        match self.run(args, clock) {
            Ok(r) | Err(r) => r,
        }
    }

    fn run(&mut self, args: &[Vec<u8>], clock: Duration) -> Result<Reply, Reply> {
        let Some(name) = args.first() else {
            return Err(Reply::Err("ERR empty command".into()));
        };
        let name = lower(name);
        let a = &args[1..];
        let arity = |ok: bool| {
            if ok {
                Ok(())
            } else {
                Err(Reply::Err(format!(
                    "ERR wrong number of arguments for '{name}' command"
                )))
            }
        };
        match name.as_str() {
            "ping" => Ok(Reply::Status("PONG".into())),
            // The server section's run id (what warden's scripts read of INFO): new with
            // each run of the server (a restore or a wipe is a restart).
            "info" => Ok(Reply::bulk(format!(
                "# Server\r\nredis_version:7.0.15\r\nrun_id:{:040x}\r\n",
                self.run
            ))),
            "time" => {
                let micros = clock.as_micros();
                Ok(Reply::Array(vec![
                    Reply::bulk((micros / 1_000_000).to_string()),
                    Reply::bulk((micros % 1_000_000).to_string()),
                ]))
            }
            "get" => {
                arity(a.len() == 1)?;
                Ok(self.string(&a[0], clock)?.map_or(Reply::Nil, Reply::bulk))
            }
            "set" => {
                arity(a.len() == 2)?;
                self.keys.insert(
                    a[0].clone(),
                    Entry {
                        val: Val::Str(a[1].clone()),
                        expires: None,
                    },
                );
                self.wrote();
                Ok(Reply::Status("OK".into()))
            }
            "del" => {
                arity(!a.is_empty())?;
                let mut n = 0;
                for k in a {
                    if self.live_mut(k, clock).is_some() {
                        self.keys.remove(k);
                        n += 1;
                    }
                }
                if n > 0 {
                    self.wrote();
                }
                Ok(Reply::Int(n))
            }
            "exists" => {
                arity(!a.is_empty())?;
                Ok(Reply::Int(
                    a.iter().filter(|k| self.live(k, clock).is_some()).count() as i64,
                ))
            }
            "type" => {
                arity(a.len() == 1)?;
                Ok(Reply::Status(
                    self.live(&a[0], clock)
                        .map_or("none", |e| e.val.type_name())
                        .into(),
                ))
            }
            "pexpire" => {
                arity(a.len() == 2)?;
                let ms = int_of(&a[1]).ok_or_else(|| Reply::Err(NOT_INTEGER.into()))?;
                let Some(e) = self.live_mut(&a[0], clock) else {
                    return Ok(Reply::Int(0));
                };
                // A new TTL is no write of data (`writes`: what a snapshot of the store
                // counts; a keepalive's PEXPIRE every few hundred ms would push every
                // write that matters out of the simulation's last snapshots).
                if ms <= 0 {
                    self.keys.remove(&a[0]);
                    self.wrote();
                } else {
                    let t = clock + Duration::from_millis(ms as u64);
                    e.expires = Some(t);
                    self.earliest = Some(self.earliest.map_or(t, |e| e.min(t)));
                }
                Ok(Reply::Int(1))
            }
            "pttl" => {
                arity(a.len() == 1)?;
                Ok(Reply::Int(match self.live(&a[0], clock) {
                    None => -2,
                    Some(Entry { expires: None, .. }) => -1,
                    Some(Entry {
                        expires: Some(t), ..
                    }) => t.saturating_sub(clock).as_millis() as i64,
                }))
            }
            "incr" => {
                arity(a.len() == 1)?;
                let cur = match self.string(&a[0], clock)? {
                    None => 0,
                    Some(v) => int_of(v).ok_or_else(|| Reply::Err(NOT_INTEGER.into()))?,
                };
                let n = cur.checked_add(1).ok_or_else(|| {
                    Reply::Err("ERR increment or decrement would overflow".into())
                })?;
                let expires = self.live(&a[0], clock).and_then(|e| e.expires);
                self.keys.insert(
                    a[0].clone(),
                    Entry {
                        val: Val::Str(n.to_string().into_bytes()),
                        expires,
                    },
                );
                self.wrote();
                Ok(Reply::Int(n))
            }
            "hget" => {
                arity(a.len() == 2)?;
                Ok(self
                    .hash(&a[0], clock)?
                    .and_then(|h| h.iter().find(|(f, _)| *f == a[1]))
                    .map_or(Reply::Nil, |(_, v)| Reply::bulk(v)))
            }
            "hmget" => {
                arity(a.len() >= 2)?;
                let h = self.hash(&a[0], clock)?;
                Ok(Reply::Array(
                    a[1..]
                        .iter()
                        .map(|want| {
                            h.and_then(|h| h.iter().find(|(f, _)| f == want))
                                .map_or(Reply::Nil, |(_, v)| Reply::bulk(v))
                        })
                        .collect(),
                ))
            }
            "hexists" => {
                arity(a.len() == 2)?;
                Ok(Reply::Int(i64::from(
                    self.hash(&a[0], clock)?
                        .is_some_and(|h| h.iter().any(|(f, _)| *f == a[1])),
                )))
            }
            "hgetall" => {
                arity(a.len() == 1)?;
                Ok(Reply::Array(
                    self.hash(&a[0], clock)?
                        .map(|h| {
                            h.iter()
                                .flat_map(|(f, v)| [Reply::bulk(f), Reply::bulk(v)])
                                .collect()
                        })
                        .unwrap_or_default(),
                ))
            }
            "hvals" => {
                arity(a.len() == 1)?;
                Ok(Reply::Array(
                    self.hash(&a[0], clock)?
                        .map(|h| h.iter().map(|(_, v)| Reply::bulk(v)).collect())
                        .unwrap_or_default(),
                ))
            }
            "hset" => {
                arity(a.len() >= 3 && a.len() % 2 == 1)?;
                let h = self.hash_mut(&a[0], clock, true)?.expect("created");
                let mut added = 0;
                for pair in a[1..].chunks(2) {
                    match h.iter_mut().find(|(f, _)| *f == pair[0]) {
                        Some((_, v)) => *v = pair[1].clone(),
                        None => {
                            h.push((pair[0].clone(), pair[1].clone()));
                            added += 1;
                        }
                    }
                }
                self.wrote();
                Ok(Reply::Int(added))
            }
            "hdel" => {
                arity(a.len() >= 2)?;
                let Some(h) = self.hash_mut(&a[0], clock, false)? else {
                    return Ok(Reply::Int(0));
                };
                let before = h.len();
                h.retain(|(f, _)| !a[1..].contains(f));
                let n = (before - h.len()) as i64;
                if h.is_empty() {
                    self.keys.remove(&a[0]);
                }
                if n > 0 {
                    self.wrote();
                }
                Ok(Reply::Int(n))
            }
            "hincrby" => {
                arity(a.len() == 3)?;
                let by = int_of(&a[2]).ok_or_else(|| Reply::Err(NOT_INTEGER.into()))?;
                let h = self.hash_mut(&a[0], clock, true)?.expect("created");
                let cur = match h.iter().find(|(f, _)| *f == a[1]) {
                    None => 0,
                    Some((_, v)) => int_of(v)
                        .ok_or_else(|| Reply::Err("ERR hash value is not an integer".into()))?,
                };
                let n = cur.checked_add(by).ok_or_else(|| {
                    Reply::Err("ERR increment or decrement would overflow".into())
                })?;
                let text = n.to_string().into_bytes();
                match h.iter_mut().find(|(f, _)| *f == a[1]) {
                    Some((_, v)) => *v = text,
                    None => h.push((a[1].clone(), text)),
                }
                self.wrote();
                Ok(Reply::Int(n))
            }
            "sadd" => {
                arity(a.len() >= 2)?;
                if self.set(&a[0], clock)?.is_none() {
                    self.keys.insert(
                        a[0].clone(),
                        Entry {
                            val: Val::Set(Vec::new()),
                            expires: None,
                        },
                    );
                }
                let Some(Entry {
                    val: Val::Set(s), ..
                }) = self.keys.get_mut(&a[0])
                else {
                    unreachable!("a set, made above")
                };
                let mut added = 0;
                for m in &a[1..] {
                    if !s.contains(m) {
                        s.push(m.clone());
                        added += 1;
                    }
                }
                self.wrote();
                Ok(Reply::Int(added))
            }
            "smembers" => {
                arity(a.len() == 1)?;
                Ok(Reply::Array(
                    self.set(&a[0], clock)?
                        .map(|s| s.iter().map(Reply::bulk).collect())
                        .unwrap_or_default(),
                ))
            }
            // Nobody subscribes in the simulation: its sessions poll.
            "publish" => {
                arity(a.len() == 2)?;
                Ok(Reply::Int(0))
            }
            "config" => {
                arity(a.len() == 2 && lower(&a[0]) == "get")?;
                let value = match lower(&a[1]).as_str() {
                    "appendonly" => "yes",
                    "maxmemory-policy" => "noeviction",
                    _ => return Ok(Reply::Array(vec![])),
                };
                Ok(Reply::Array(vec![
                    Reply::bulk(lower(&a[1])),
                    Reply::bulk(value),
                ]))
            }
            // No replicas.
            "wait" => {
                arity(a.len() == 2)?;
                Ok(Reply::Int(0))
            }
            "script" => {
                arity(a.len() == 2 && lower(&a[0]) == "load")?;
                let code = String::from_utf8_lossy(&a[1]).into_owned();
                let sha = redis::Script::new(&code).get_hash().to_string();
                self.scripts.insert(sha.clone(), code);
                Ok(Reply::bulk(sha))
            }
            "eval" | "evalsha" => {
                arity(a.len() >= 2)?;
                let code = if name == "eval" {
                    let code = String::from_utf8_lossy(&a[0]).into_owned();
                    let sha = redis::Script::new(&code).get_hash().to_string();
                    self.scripts.insert(sha, code.clone());
                    code
                } else {
                    let sha = lower(&a[0]);
                    match self.scripts.get(&sha) {
                        Some(c) => c.clone(),
                        None => {
                            return Err(Reply::Err(
                                "NOSCRIPT No matching script. Please use EVAL.".into(),
                            ))
                        }
                    }
                };
                let n = int_of(&a[1])
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| Reply::Err(NOT_INTEGER.into()))?
                    as usize;
                if n > a.len() - 2 {
                    return Err(Reply::Err(
                        "ERR Number of keys can't be greater than number of args".into(),
                    ));
                }
                let (keys, argv) = a[2..].split_at(n);
                Ok(self.eval(&code, keys, argv, clock))
            }
            _ => Err(Reply::Err(format!(
                "ERR unknown command '{name}', with args beginning with: "
            ))),
        }
    }

    /// Runs a script: atomically, as Redis does (nothing else runs meanwhile).
    pub fn eval(
        &mut self,
        code: &str,
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
        clock: Duration,
    ) -> Reply {
        LUA.with(|lua| {
            let this = RefCell::new(self);
            let out = lua.lua.scope(|scope| {
                let raw =
                    scope.create_function(|lua, args: mlua::MultiValue| {
                        let mut cmd = Vec::with_capacity(args.len());
                        for v in args {
                            match v {
                                mlua::Value::String(s) => cmd.push(s.as_bytes().to_vec()),
                                mlua::Value::Integer(i) => cmd.push(i.to_string().into_bytes()),
                                mlua::Value::Number(n) => cmd.push(number_text(n).into_bytes()),
                                _ => return to_lua(
                                    lua,
                                    &Reply::Err(
                                        "ERR Lua redis lib command arguments must be strings or \
                                         integers"
                                            .into(),
                                    ),
                                ),
                            }
                        }
                        let reply = this.borrow_mut().exec(&cmd, clock);
                        to_lua(lua, &reply)
                    })?;
                let g = lua.lua.globals();
                g.set("__raw", raw)?;
                g.set(
                    "KEYS",
                    lua.lua.create_sequence_from(
                        keys.iter()
                            .map(|k| lua.lua.create_string(k))
                            .collect::<mlua::Result<Vec<_>>>()?,
                    )?,
                )?;
                g.set(
                    "ARGV",
                    lua.lua.create_sequence_from(
                        argv.iter()
                            .map(|k| lua.lua.create_string(k))
                            .collect::<mlua::Result<Vec<_>>>()?,
                    )?,
                )?;
                let f = lua.compiled(code)?;
                let run: mlua::Function = g.get("__run")?;
                let (ok, v): (bool, mlua::Value) = run.call(f)?;
                let reply = from_lua(&v);
                Ok(if ok {
                    reply
                } else {
                    match reply {
                        Reply::Err(e) => Reply::Err(format!("{e} script: user_script")),
                        // Raised by `redis.call` (an error reply's text, its code first, as
                        // Redis 7.0 raises it), or by the script itself (`error('...')`).
                        Reply::Bulk(b) => {
                            let text = String::from_utf8_lossy(&b).into_owned();
                            let code = text.split(' ').next().unwrap_or("");
                            if !code.is_empty() && code.bytes().all(|c| c.is_ascii_uppercase()) {
                                Reply::Err(format!("{text} script: user_script"))
                            } else {
                                Reply::Err(format!("ERR {text} script: user_script"))
                            }
                        }
                        other => Reply::Err(format!("ERR user_script: {other:?}")),
                    }
                })
            });
            out.unwrap_or_else(|e| Reply::Err(format!("ERR Error running script: {e}")))
        })
    }
}

/// How Lua 5.1 writes a number as a string (`%.14g`): integers without a point.
fn number_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// A reply as `redis.call` gives it to Lua.
fn to_lua(lua: &mlua::Lua, r: &Reply) -> mlua::Result<mlua::Value> {
    Ok(match r {
        Reply::Nil => mlua::Value::Boolean(false),
        Reply::Int(i) => mlua::Value::Integer(*i as mlua::Integer),
        Reply::Bulk(b) => mlua::Value::String(lua.create_string(b)?),
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.set("ok", s.as_str())?;
            mlua::Value::Table(t)
        }
        Reply::Err(e) => {
            let t = lua.create_table()?;
            t.set("err", e.as_str())?;
            mlua::Value::Table(t)
        }
        Reply::Array(a) => {
            let t = lua.create_table()?;
            for (i, r) in a.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, r)?)?;
            }
            mlua::Value::Table(t)
        }
    })
}

/// A script's answer as Redis converts it.
fn from_lua(v: &mlua::Value) -> Reply {
    match v {
        mlua::Value::Integer(i) => Reply::Int(*i),
        mlua::Value::Number(n) => Reply::Int(n.trunc() as i64),
        mlua::Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        mlua::Value::Boolean(true) => Reply::Int(1),
        mlua::Value::Table(t) => {
            if let Ok(mlua::Value::String(e)) = t.raw_get::<mlua::Value>("err") {
                return Reply::Err(e.to_string_lossy());
            }
            if let Ok(mlua::Value::String(s)) = t.raw_get::<mlua::Value>("ok") {
                return Reply::Status(s.to_string_lossy());
            }
            let mut out = Vec::new();
            for i in 1.. {
                match t.raw_get::<mlua::Value>(i) {
                    Ok(mlua::Value::Nil) | Err(_) => break,
                    Ok(v) => out.push(from_lua(&v)),
                }
            }
            Reply::Array(out)
        }
        _ => Reply::Nil,
    }
}

/// The `redis` library of the scripts, and the runner that turns a raised error into the
/// error reply. `__raw` (set for each script) runs one command and returns its reply,
/// an error reply as `{err = ...}`.
const PRELUDE: &str = r#"
redis = {}
redis.error_reply = function(m) return {err = m} end
redis.status_reply = function(m) return {ok = m} end
redis.call = function(...)
  local r = __raw(...)
  if type(r) == 'table' and r.err then error(r.err, 0) end
  return r
end
redis.pcall = function(...) return __raw(...) end
__run = function(f)
  local ok, r = pcall(f)
  if ok then return true, r end
  if type(r) == 'table' and r.err then return false, r end
  return false, tostring(r)
end
"#;

struct Vm {
    lua: mlua::Lua,
    /// Compiled scripts by their text.
    compiled: RefCell<BTreeMap<String, mlua::Function>>,
}

impl Vm {
    fn new() -> Vm {
        let lua = mlua::Lua::new();
        lua.load(PRELUDE)
            .exec()
            .expect("the prelude is valid Lua 5.1");
        Vm {
            lua,
            compiled: RefCell::new(BTreeMap::new()),
        }
    }

    fn compiled(&self, code: &str) -> mlua::Result<mlua::Function> {
        if let Some(f) = self.compiled.borrow().get(code) {
            return Ok(f.clone());
        }
        let f = self
            .lua
            .load(code)
            .set_name("@user_script")
            .into_function()?;
        self.compiled
            .borrow_mut()
            .insert(code.to_string(), f.clone());
        Ok(f)
    }
}

thread_local! {
    /// One Lua state per thread (a `Lua` is not `Send`; a simulated run is one thread).
    static LUA: Vm = Vm::new();
}
