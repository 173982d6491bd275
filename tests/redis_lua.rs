//! The simulation's Redis (`sim/keyspace.rs`: an in-memory keyspace and an embedded Lua
//! 5.1 that runs the backend's own scripts) against a real `redis-server` (issue 32 point
//! 3): the same commands and the same scripts, with the same keys and arguments, on both;
//! every answer must be the same (errors by their code: the real one adds where in the
//! script it failed). What the simulation concludes about the Redis backend holds only as
//! far as this keyspace answers as Redis does.

mod common;
#[path = "sim/keyspace.rs"]
mod keyspace;

use common::redis::{check_redis_installed, RedisServer};
use keyspace::{Keyspace, Reply};
use std::collections::BTreeMap;
use std::time::Duration;

/// A TTL far longer than the test, so that no key expires on the real server meanwhile.
const TTL: &str = "600000";

/// One step: a plain command, or a script of the backend's by name.
enum Step {
    Cmd(Vec<&'static str>),
    Script(&'static str, Vec<String>, Vec<String>),
    Eval(&'static str, Vec<String>),
}

fn k(name: &str) -> String {
    format!("w:{{c}}:{name}")
}

fn cmd(parts: &[&'static str]) -> Step {
    Step::Cmd(parts.to_vec())
}

fn script(name: &'static str, keys: &[&str], args: &[&str]) -> Step {
    Step::Script(
        name,
        keys.iter().map(|n| k(n)).collect(),
        args.iter().map(|a| a.to_string()).collect(),
    )
}

fn eval(code: &'static str, keys: &[&str]) -> Step {
    Step::Eval(code, keys.iter().map(|n| k(n)).collect())
}

/// A reply as the comparison sees it: an error by its code, a positive TTL as "some",
/// a set's members sorted (Redis 7.0 keeps small sets in a hash table, in no order).
fn normal(r: Reply, sorted: bool) -> Reply {
    match r {
        Reply::Err(e) => Reply::Err(e.split_whitespace().next().unwrap_or("").to_string()),
        Reply::Array(mut a) if sorted => {
            a.sort_by_key(|r| format!("{r:?}"));
            Reply::Array(a)
        }
        other => other,
    }
}

fn of_value(v: redis::Value) -> Reply {
    match v {
        redis::Value::Nil => Reply::Nil,
        redis::Value::Int(i) => Reply::Int(i),
        redis::Value::BulkString(b) => Reply::Bulk(b),
        redis::Value::SimpleString(s) => Reply::Status(s),
        redis::Value::Okay => Reply::Status("OK".into()),
        redis::Value::Array(a) => Reply::Array(a.into_iter().map(of_value).collect()),
        redis::Value::ServerError(e) => {
            Reply::Err(format!("{} {}", e.code(), e.details().unwrap_or_default()))
        }
        other => panic!("a reply of RESP3: {other:?}"),
    }
}

fn the_steps() -> Vec<Step> {
    let ttl = TTL;
    vec![
        // init on an empty store, then with a floor, then over garbage.
        script("write_marker", &["epoch", "init"], &[""]),
        cmd(&["GET", "w:{c}:epoch"]),
        script("write_marker", &["epoch", "init"], &["7"]),
        script("write_marker", &["epoch", "init"], &["3"]),
        // Members: create, refuse another session, renew without and with the lock.
        script(
            "create_member",
            &["member:n1", "members", "seen"],
            &["11", "rec-n1", ttl, "n1", "5"],
        ),
        script(
            "create_member",
            &["member:n1", "members", "seen"],
            &["12", "rec-n1", ttl, "n1", "9"],
        ),
        script(
            "create_member",
            &["member:n2", "members", "seen"],
            &["22", "rec-n2", ttl, "n2", ""],
        ),
        cmd(&["HGETALL", "w:{c}:seen"]),
        cmd(&["SMEMBERS", "w:{c}:members"]),
        cmd(&["HMGET", "w:{c}:member:n1", "session", "record"]),
        script(
            "set_member",
            &["member:n1", "seen", "lock", "members"],
            &["11", "rec-n1b", ttl, "n1", "6", ""],
        ),
        script(
            "set_member",
            &["member:n1", "seen", "lock", "members"],
            &["11", "rec-n1c", ttl, "n1", "6", "1"],
        ),
        script(
            "set_member",
            &["member:n2", "seen", "lock", "members"],
            &["11", "rec", ttl, "n2", "", ""],
        ),
        // The floor (n1 saw 6) is below the counter (7): n1 takes the lock, epoch 8.
        script(
            "acquire",
            &["lock", "epoch", "init", "seen", "member:n1"],
            &["11", "rec-n1", ttl, "n1", "6"],
        ),
        script(
            "acquire",
            &["lock", "epoch", "init", "seen", "member:n1"],
            &["11", "rec-n1", ttl, "n1", "6"],
        ),
        script(
            "acquire",
            &["lock", "epoch", "init", "seen", "member:n2"],
            &["22", "rec-n2", ttl, "n2", ""],
        ),
        cmd(&["HGETALL", "w:{c}:lock"]),
        // A session whose member key the store forgot, or that names another session,
        // takes nothing (stop 35): `gone`.
        script(
            "acquire",
            &["lock", "epoch", "init", "seen", "member:n9"],
            &["99", "rec-n9", ttl, "n9", ""],
        ),
        script(
            "acquire",
            &["lock", "epoch", "init", "seen", "member:n2"],
            &["99", "rec-n2", ttl, "n2", ""],
        ),
        cmd(&["GET", "w:{c}:epoch"]),
        cmd(&["PTTL", "w:{c}:nothing"]),
        script("touch", &["member:n1", "lock"], &["11", ttl]),
        script("touch", &["member:n2", "lock"], &["11", ttl]),
        script(
            "set_member",
            &["member:n1", "seen", "lock", "members"],
            &["11", "rec-n1d", ttl, "n1", "7", "1"],
        ),
        script(
            "set_member",
            &["member:n2", "seen", "lock", "members"],
            &["22", "rec-n2b", ttl, "n2", "7", "1"],
        ),
        // Items: control created, written at its version, refused at another.
        script("put_item", &["control", "aside"], &["{}", "", "", "w:{c}:events"]),
        script("put_item", &["control", "aside"], &["{}", "", "", "w:{c}:events"]),
        script("put_item", &["control", "aside"], &["{\"a\":1}", "0", "", ""]),
        script("put_item", &["control", "aside"], &["{\"a\":2}", "0", "", ""]),
        cmd(&["HMGET", "w:{c}:control", "data", "version"]),
        script(
            "put_item",
            &["history.x", "aside"],
            &["[]", "", "history.x", ""],
        ),
        // The commit: refused at an epoch the floor holds (7) and without an epoch; then
        // at control's version, the breadcrumb absent; then stale versions.
        script(
            "commit",
            &["lock", "control", "breadcrumb", "seen"],
            &["11", "crumb-0", "1", "", ttl, "7"],
        ),
        script(
            "commit",
            &["lock", "control", "breadcrumb", "seen"],
            &["11", "crumb-0", "1", "", ttl, ""],
        ),
        script(
            "commit",
            &["lock", "control", "breadcrumb", "seen"],
            &["11", "crumb-1", "1", "", ttl, "8"],
        ),
        script(
            "commit",
            &["lock", "control", "breadcrumb", "seen"],
            &["11", "crumb-2", "1", "", ttl, "8"],
        ),
        script(
            "commit",
            &["lock", "control", "breadcrumb", "seen"],
            &["22", "crumb-2", "1", "0", ttl, "8"],
        ),
        script(
            "commit",
            &["lock", "control", "breadcrumb", "seen"],
            &["11", "crumb-2", "1", "0", ttl, "8"],
        ),
        // Once the committer published its epoch (8), only a commit of its breadcrumb again
        // goes through at it (the review of stop 41).
        script(
            "set_member",
            &["member:n1", "seen", "lock", "members"],
            &["11", "rec-n1e", ttl, "n1", "8", "1"],
        ),
        script(
            "commit",
            &["lock", "control", "breadcrumb", "seen"],
            &["11", "crumb-2", "1", "1", ttl, "8", ""],
        ),
        script(
            "commit",
            &["lock", "control", "breadcrumb", "seen"],
            &["11", "crumb-2", "1", "1", ttl, "8", "1"],
        ),
        cmd(&["HGETALL", "w:{c}:lock"]),
        cmd(&["HGETALL", "w:{c}:breadcrumb"]),
        script(
            "breadcrumb_at",
            &["lock", "breadcrumb"],
            &["11", "1", "1", "crumb-3", "set"],
        ),
        script(
            "breadcrumb_at",
            &["lock", "breadcrumb"],
            &["22", "1", "2", "crumb-4", "set"],
        ),
        script(
            "breadcrumb_at",
            &["lock", "breadcrumb"],
            &["22", "", "2", "", "del"],
        ),
        cmd(&["EXISTS", "w:{c}:breadcrumb"]),
        // Written back where there is none (version ''), by the holder only, once; a
        // delete of an absent one is refused.
        script(
            "breadcrumb_at",
            &["lock", "breadcrumb"],
            &["22", "1", "", "crumb-5", "set"],
        ),
        script(
            "breadcrumb_at",
            &["lock", "breadcrumb"],
            &["11", "1", "", "", "del"],
        ),
        script(
            "breadcrumb_at",
            &["lock", "breadcrumb"],
            &["11", "1", "", "crumb-5", "set"],
        ),
        script(
            "breadcrumb_at",
            &["lock", "breadcrumb"],
            &["11", "1", "", "crumb-6", "set"],
        ),
        cmd(&["HGETALL", "w:{c}:breadcrumb"]),
        script(
            "breadcrumb_at",
            &["lock", "breadcrumb"],
            &["11", "1", "0", "", "del"],
        ),
        script(
            "delete_takeover",
            &["breadcrumb", "control"],
            &["", "9"],
        ),
        script(
            "delete_takeover",
            &["breadcrumb", "control"],
            &["", "1"],
        ),
        // History moved aside, from a hash and from a string (garbage).
        script("put_item", &["history", "aside"], &["[1]", "", "", ""]),
        script(
            "move_aside",
            &["history", "history.old-1", "aside"],
            &["0", "history.old-1"],
        ),
        cmd(&["SET", "w:{c}:history", "junk"]),
        script(
            "move_aside",
            &["history", "history.old-2", "aside"],
            &["-1", "history.old-2"],
        ),
        cmd(&["HGETALL", "w:{c}:history.old-2"]),
        cmd(&["SMEMBERS", "w:{c}:aside"]),
        // Release: not ours, then ours.
        script("release", &["lock"], &["22", "w:{c}:events"]),
        script("release", &["lock"], &["11", "w:{c}:events"]),
        cmd(&["EXISTS", "w:{c}:lock"]),
        // A session begun on another run of the server (a restart or a failover since;
        // a member key without `run`, from before stop 36) takes nothing: `restarted`,
        // after raising its node's entry of the floor and before the counter moves.
        cmd(&["HSET", "w:{c}:member:n2", "run", "0123abcd"]),
        script(
            "acquire",
            &["lock", "epoch", "init", "seen", "member:n2"],
            &["22", "rec-n2", ttl, "n2", "8"],
        ),
        cmd(&["GET", "w:{c}:epoch"]),
        cmd(&["HGET", "w:{c}:seen", "n2"]),
        cmd(&["HDEL", "w:{c}:member:n2", "run"]),
        script(
            "acquire",
            &["lock", "epoch", "init", "seen", "member:n2"],
            &["22", "rec-n2", ttl, "n2", "8"],
        ),
        cmd(&["EXISTS", "w:{c}:lock"]),
        // Its next session registers on this run.
        script(
            "create_member",
            &["member:n2", "members", "seen"],
            &["22", "rec-n2", ttl, "n2", "8"],
        ),
        // Garbage: a lock that is no warden lock is nobody's, and gets an expiry.
        cmd(&["SET", "w:{c}:lock", "x"]),
        script(
            "acquire",
            &["lock", "epoch", "init", "seen", "member:n2"],
            &["22", "rec-n2", ttl, "n2", ""],
        ),
        cmd(&["DEL", "w:{c}:lock"]),
        cmd(&["HSET", "w:{c}:lock", "session", "abc", "epoch", "3"]),
        script(
            "acquire",
            &["lock", "epoch", "init", "seen", "member:n2"],
            &["22", "rec-n2", ttl, "n2", ""],
        ),
        cmd(&["DEL", "w:{c}:lock"]),
        // A floor above the counter: lost, naming who saw it.
        cmd(&["HSET", "w:{c}:seen", "n3", "40"]),
        script(
            "acquire",
            &["lock", "epoch", "init", "seen", "member:n2"],
            &["22", "rec-n2", ttl, "n2", ""],
        ),
        // A counter that holds no epoch, one of another type, no marker.
        cmd(&["HDEL", "w:{c}:seen", "n3"]),
        cmd(&["SET", "w:{c}:epoch", "12x"]),
        script(
            "acquire",
            &["lock", "epoch", "init", "seen", "member:n2"],
            &["22", "rec-n2", ttl, "n2", ""],
        ),
        cmd(&["DEL", "w:{c}:epoch"]),
        cmd(&["SADD", "w:{c}:epoch", "1"]),
        script(
            "acquire",
            &["lock", "epoch", "init", "seen", "member:n2"],
            &["22", "rec-n2", ttl, "n2", ""],
        ),
        script("write_marker", &["epoch", "init"], &["41"]),
        cmd(&["DEL", "w:{c}:init"]),
        script(
            "acquire",
            &["lock", "epoch", "init", "seen", "member:n2"],
            &["22", "rec-n2", ttl, "n2", "50"],
        ),
        cmd(&["HGETALL", "w:{c}:seen"]),
        script("write_marker", &["epoch", "init"], &[""]),
        // The floor of another type is claimed; the members key too.
        cmd(&["SET", "w:{c}:seen", "junk"]),
        cmd(&["SET", "w:{c}:members", "junk"]),
        script(
            "create_member",
            &["member:n3", "members", "seen"],
            &["33", "rec-n3", ttl, "n3", "44"],
        ),
        cmd(&["TYPE", "w:{c}:seen"]),
        cmd(&["TYPE", "w:{c}:members"]),
        cmd(&["HGETALL", "w:{c}:seen"]),
        script(
            "acquire",
            &["lock", "epoch", "init", "seen", "member:n3"],
            &["33", "rec-n3", ttl, "n3", "44"],
        ),
        cmd(&["HGET", "w:{c}:lock", "epoch"]),
        // Versions that are garbage read as -1; a CAS from -1 replaces the item.
        cmd(&["HSET", "w:{c}:control", "version", "x1"]),
        script("put_item", &["control", "aside"], &["{}", "-1", "", ""]),
        cmd(&["HGETALL", "w:{c}:control"]),
        cmd(&["SET", "w:{c}:breadcrumb", "junk"]),
        // A floor entry that holds no epoch (garbage) is skipped, never compared.
        cmd(&["HSET", "w:{c}:seen", "n7", "junk"]),
        script(
            "commit",
            &["lock", "control", "breadcrumb", "seen"],
            &["33", "crumb-9", "0", "-1", ttl, "45"],
        ),
        cmd(&["HGETALL", "w:{c}:breadcrumb"]),
        // Plain commands' errors and edge cases.
        cmd(&["HGET", "w:{c}:history", "data"]),
        cmd(&["GET", "w:{c}:lock"]),
        cmd(&["INCR", "w:{c}:history"]),
        cmd(&["SET", "w:{c}:n", "9x"]),
        cmd(&["INCR", "w:{c}:n"]),
        cmd(&["HSET", "w:{c}:h", "f", "x"]),
        cmd(&["HINCRBY", "w:{c}:h", "f", "1"]),
        cmd(&["HINCRBY", "w:{c}:h", "g", "5"]),
        cmd(&["HVALS", "w:{c}:h"]),
        cmd(&["HVALS", "w:{c}:none"]),
        cmd(&["SMEMBERS", "w:{c}:h"]),
        cmd(&["PEXPIRE", "w:{c}:h", "x"]),
        cmd(&["PEXPIRE", "w:{c}:none", "100"]),
        cmd(&["PTTL", "w:{c}:h"]),
        cmd(&["EVALSHA", "0000000000000000000000000000000000000000", "0"]),
        cmd(&["CONFIG", "GET", "maxmemory-policy"]),
        cmd(&["TYPE", "w:{c}:n"]),
        // What a script's answer becomes.
        eval("return {1, 2.7, true, false, 'x', nil, 5}", &[]),
        eval("return 3.99", &[]),
        eval("return -3.99", &[]),
        eval("return true", &[]),
        eval("return false", &[]),
        eval("return nil", &[]),
        eval("return redis.error_reply('MYERR went wrong')", &[]),
        eval("return redis.status_reply('FINE')", &[]),
        eval("return {err = 'OTHER code'}", &[]),
        eval("return redis.call('GET', KEYS[1])", &["none"]),
        eval("return redis.call('TYPE', KEYS[1])", &["h"]),
        eval("return redis.call('TYPE', KEYS[1])['ok']", &["h"]),
        eval("return redis.pcall('HGET', KEYS[1], 'f')", &["n"]),
        eval("return redis.call('HGET', KEYS[1], 'f')", &["n"]),
        eval(
            "local ok, e = pcall(redis.call, 'HGET', KEYS[1], 'f') return {ok and 1 or 0, type(e)}",
            &["n"],
        ),
        eval("return tostring(4 * tonumber('2000'))", &[]),
        eval("redis.call('PEXPIRE', KEYS[1], 4 * tonumber('2000')) return redis.call('PTTL', KEYS[1]) > 0", &["h"]),
        eval("return redis.call('HGETALL', KEYS[1])", &["h"]),
        eval("return redis.call('INCR', KEYS[1])", &["n"]),
        eval("return string.format('%d', tonumber('9007199254740991'))", &[]),
        eval("return {redis.call('EXISTS', KEYS[1]), redis.call('PTTL', KEYS[2])}", &["h", "n"]),
        eval("error('plain')", &[]),
        eval("return redis.call('NOSUCH')", &[]),
        eval("return redis.call('GET', {})", &[]),
        // The keepalive of a session that holds no lock on another run of the server than
        // the one it registered on (a restart since): 2.
        script(
            "create_member",
            &["member:n7", "members", "seen"],
            &["77", "rec-n7", "5000", "n7", ""],
        ),
        script("touch", &["member:n7", "lock"], &["77", ttl]),
        cmd(&["HSET", "w:{c}:member:n7", "run", "0123"]),
        script("touch", &["member:n7", "lock"], &["77", ttl]),
    ]
}

/// Every step on a real Redis and on the simulation's keyspace: the same answers.
#[tokio::test(flavor = "current_thread")]
async fn the_simulated_keyspace_answers_every_script_and_command_as_redis_does() {
    check_redis_installed();
    let server = RedisServer::start();
    let client = redis::Client::open(format!(
        "redis://:{}@127.0.0.1:{}/0",
        server.password(),
        server.port()
    ))
    .expect("a client");
    let mut real = client
        .get_multiplexed_async_connection()
        .await
        .expect("a connection to the real server");
    let scripts: BTreeMap<&str, &str> = warden::coord::redis::lua_scripts().into_iter().collect();
    let mut sim = Keyspace::default();
    let clock = Duration::from_secs(1);
    let mut differ = Vec::new();
    for (i, step) in the_steps().into_iter().enumerate() {
        let (args, what): (Vec<Vec<u8>>, String) = match &step {
            Step::Cmd(parts) => (
                parts.iter().map(|p| p.as_bytes().to_vec()).collect(),
                parts.join(" "),
            ),
            Step::Script(name, keys, argv) => {
                let code = scripts
                    .get(name)
                    .unwrap_or_else(|| panic!("the backend has no script {name}"));
                let mut a = vec![
                    b"EVAL".to_vec(),
                    code.as_bytes().to_vec(),
                    keys.len().to_string().into_bytes(),
                ];
                a.extend(keys.iter().map(|k| k.as_bytes().to_vec()));
                a.extend(argv.iter().map(|k| k.as_bytes().to_vec()));
                (a, format!("script {name} {keys:?} {argv:?}"))
            }
            Step::Eval(code, keys) => {
                let mut a = vec![
                    b"EVAL".to_vec(),
                    code.as_bytes().to_vec(),
                    keys.len().to_string().into_bytes(),
                ];
                a.extend(keys.iter().map(|k| k.as_bytes().to_vec()));
                (a, format!("eval {code}"))
            }
        };
        let mut c = redis::cmd(std::str::from_utf8(&args[0]).expect("ascii"));
        for a in &args[1..] {
            c.arg(a.as_slice());
        }
        let got_real = match c.query_async::<redis::Value>(&mut real).await {
            Ok(v) => of_value(v),
            Err(e) => Reply::Err(format!("{} {e}", e.code().unwrap_or("?"))),
        };
        let got_sim = sim.exec(&args, clock);
        let sorted = what.starts_with("SMEMBERS");
        let (r, s) = (
            normal(got_real.clone(), sorted),
            normal(got_sim.clone(), sorted),
        );
        if r != s {
            differ.push(format!(
                "step {i} ({what}):\n  redis:    {got_real:?}\n  keyspace: {got_sim:?}"
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "the simulated keyspace answered {} step(s) otherwise than Redis:\n{}",
        differ.len(),
        differ.join("\n")
    );
}

/// Expiry on the keyspace's own clock: a key is there before its time and gone at it;
/// PTTL counts down on that clock; a TTL of 0 or less deletes; SET clears the TTL.
#[test]
fn keys_expire_on_the_keyspace_clock() {
    let mut ks = Keyspace::default();
    let b = |s: &str| s.as_bytes().to_vec();
    let t = Duration::from_secs;
    ks.exec(&[b("SET"), b("k"), b("v")], t(10));
    assert_eq!(
        ks.exec(&[b("PEXPIRE"), b("k"), b("1500")], t(10)),
        Reply::Int(1)
    );
    assert_eq!(ks.exec(&[b("PTTL"), b("k")], t(11)), Reply::Int(500));
    assert_eq!(
        ks.exec(&[b("EXISTS"), b("k")], Duration::from_millis(11_499)),
        Reply::Int(1)
    );
    assert_eq!(
        ks.exec(&[b("EXISTS"), b("k")], Duration::from_millis(11_500)),
        Reply::Int(0)
    );
    assert_eq!(ks.sweep(t(12)), vec![b("k")]);
    ks.exec(&[b("SET"), b("k"), b("v")], t(20));
    ks.exec(&[b("PEXPIRE"), b("k"), b("100")], t(20));
    ks.exec(&[b("SET"), b("k"), b("w")], t(20));
    assert_eq!(ks.exec(&[b("PTTL"), b("k")], t(30)), Reply::Int(-1));
    assert_eq!(
        ks.exec(&[b("PEXPIRE"), b("k"), b("0")], t(30)),
        Reply::Int(1)
    );
    assert_eq!(ks.exec(&[b("PTTL"), b("k")], t(30)), Reply::Int(-2));
}

/// `RedisSession::members` reads the member records alone (SMEMBERS, one HMGET each)
/// instead of the whole snapshot: on a real server it answers what the snapshot's members
/// say, garbage included (an id that is no node id, a listed node whose key is gone, a
/// member key of another type).
#[tokio::test(flavor = "current_thread")]
async fn members_answers_what_the_snapshot_says() {
    use warden::coord::redis::RedisConnector;
    use warden::coord::{Connector, Session, StoreSettings};
    use warden::record::{Health, MemberRecord, NodeRecord, Role};
    check_redis_installed();
    let server = RedisServer::start();
    let settings = StoreSettings {
        url: server.url(),
        password: Some(server.password().to_string()),
        session_timeout: Duration::from_secs(20),
        poll_interval: Duration::from_millis(250),
        connect_timeout: Duration::from_secs(5),
        prefix: "warden".into(),
        cluster: "c".into(),
        replicas_ack: 0,
    };
    let connector = RedisConnector::new(settings).expect("a connector");
    let member = |id: &str| MemberRecord {
        node: NodeRecord {
            node_id: id.into(),
            host: format!("h-{id}"),
            incarnation: format!("inc-{id}"),
            ..Default::default()
        },
        role: Role::Standby,
        health: Health::Healthy,
        session_timeout: None,
        containment: None,
        follow: None,
        priority: Some(3),
        leftover: None,
        remembers: None,
        position: Some(42),
        position_at: Some("2026-11-29T09:00:00.000Z".into()),
        after: Some("n2".into()),
        failed_takeovers: None,
        tries_in: Some("2s 300ms".into()),
        tries_at: None,
    };
    let a = connector.connect().await.expect("a session");
    let b = connector.connect().await.expect("another session");
    a.write_marker(None).await.expect("init");
    a.create_member(&member("n2")).await.expect("n2 registers");
    b.create_member(&member("n1")).await.expect("n1 registers");
    for m in ["bad id!", "n9", "n7"] {
        server.cli(&["SADD", "warden:{c}:members", m]);
    }
    server.cli(&["SET", "warden:{c}:member:n7", "junk"]);
    let members = a.members().await.expect("members");
    let snapshot = a.snapshot().await.expect("a snapshot");
    assert_eq!(format!("{members:?}"), format!("{:?}", snapshot.members));
    let ids: Vec<&str> = members.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["bad id!", "n1", "n2"], "{members:?}");
    assert!(members[1].1.as_ref().is_ok_and(|m| m.priority == Some(3)));
}
