//! `examples/postgresql` (issue 15): two real PostgreSQL 15 servers, a primary and its
//! streaming replica, each under its warden in hooks mode with the shipped
//! `warden-postgresql` hooks. A writer inserts into whichever server takes the write and
//! records each insert PostgreSQL acknowledged; a sampler asks both servers
//! `pg_is_in_recovery()` all along. "Never two primaries" and "no acknowledged write
//! lost in a switchover" are read from the servers themselves.

mod common;

use common::postgres::{give, os_user, postgres_user, sql_at, PgServer, PsqlSession, BIN};
use common::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

fn hooks_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/postgresql/warden-postgresql")
}

/// Writes `node`'s config for the node of server `pg`: hooks mode with the shipped hooks,
/// `cluster.port` the PostgreSQL port, fencing by signal through the postmaster's pidfile.
fn pg_node(cluster: &Cluster, id: &str, pg: &PgServer) -> Node {
    example_hooks_node(
        cluster,
        id,
        &hooks_script(),
        &hooks_env(pg, 5),
        pg.port(),
        &pg.pidfile(),
        ("30s", "300ms"),
    )
}

/// The hooks' env file for server `pg`, fast stops bounded by `stop_timeout` seconds.
fn hooks_env(pg: &PgServer, stop_timeout: u32) -> String {
    format!(
        "PGBIN={BIN}\nPGDATA={}\nPG_CTL_DIR={}\nPGHOST=127.0.0.1\nPGPORT={}\nPGUSER=postgres\n\
         OS_USER={}\nPG_TIMEOUT=2\nSTOP_TIMEOUT={stop_timeout}\nFOLLOW_WAIT=3\nPG_LOG={}\n",
        pg.data().display(),
        pg.conf().display(),
        pg.port(),
        os_user(),
        pg.log_path().display()
    )
}

/// Inserts base + 1, base + 2, ... into `t` on whichever server takes the write, one at a
/// time, over one kept connection per server ([`PsqlSession`]); keeps the values
/// PostgreSQL acknowledged (`synchronous_commit = on`: flushed), with the server and the
/// moment.
struct Writer {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(u64, u16, Instant)>>>,
    /// Each server's last refusal (an error, or no connection).
    refused: Arc<Mutex<Vec<(u16, Instant)>>>,
    thread: Option<thread::JoinHandle<()>>,
}

/// A kept session to one server, opened again when it has ended.
#[derive(Default)]
struct Slot {
    db: Option<PsqlSession>,
    /// When it last failed to open, or ended.
    failed_at: Option<Instant>,
}

/// How often a slot tries to open a session to a server that refused one: each try starts
/// a `psql`, and trying every round while a server is down (a switchover's gap) loaded the
/// 2-core machine the timings are taken on, and delayed the writer's next try of the other
/// server by a process start.
const RECONNECT_EVERY: Duration = Duration::from_millis(50);

/// The session of `slot` to `port` once it is connected, opened again when it has ended.
/// Never waits for a connection to be made: a client that tries the servers in turn must
/// not be held up by one that is down (psql takes tens of milliseconds to start and fail)
/// while the other takes writes.
fn session(slot: &mut Slot, port: u16) -> Option<&mut PsqlSession> {
    if slot
        .db
        .as_mut()
        .is_some_and(|s| !s.alive() || s.ready() == Some(false))
    {
        // psql ends when its connection fails or is lost.
        slot.db = None;
        slot.failed_at = Some(Instant::now());
    }
    if slot.db.is_none() {
        if slot
            .failed_at
            .is_some_and(|t| t.elapsed() < RECONNECT_EVERY)
        {
            return None;
        }
        slot.db = PsqlSession::connect(port);
        if slot.db.is_none() {
            slot.failed_at = Some(Instant::now());
        }
    }
    let db = slot.db.as_mut()?;
    (db.ready() == Some(true)).then_some(db)
}

impl Writer {
    fn start(ports: [u16; 2], base: u64) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let refused = Arc::new(Mutex::new(Vec::new()));
        let (s, a, r) = (stop.clone(), acked.clone(), refused.clone());
        let refuse = move |port: u16| {
            let mut r = r.lock().unwrap();
            r.retain(|(p, _)| *p != port);
            r.push((port, Instant::now()));
        };
        let thread = thread::spawn(move || {
            let mut sessions: [Slot; 2] = Default::default();
            let mut i = base;
            while !s.load(Ordering::SeqCst) {
                i += 1;
                let mut taken = false;
                for (k, port) in ports.iter().enumerate() {
                    let Some(db) = session(&mut sessions[k], *port) else {
                        refuse(*port);
                        continue;
                    };
                    let sql = format!("INSERT INTO t VALUES ({i})");
                    if db
                        .run(&sql, Duration::from_secs(2))
                        .is_ok_and(|out| out.iter().any(|l| l == "INSERT 0 1"))
                    {
                        a.lock().unwrap().push((i, *port, Instant::now()));
                        taken = true;
                        break;
                    }
                    refuse(*port);
                }
                if !taken {
                    // Both refused (a switchover's gap): not a busy loop of refusals.
                    thread::sleep(Duration::from_millis(2));
                }
            }
        });
        Writer {
            stop,
            acked,
            refused,
            thread: Some(thread),
        }
    }

    /// Whether `port` refused a write after `since`.
    fn refused_since(&self, port: u16, since: Instant) -> bool {
        let refused = self.refused.lock().unwrap();
        refused.iter().any(|(p, at)| *p == port && *at >= since)
    }

    /// When `port` last acknowledged a write after `since`.
    fn last_on(&self, port: u16, since: Instant) -> Option<Instant> {
        let acked = self.acked.lock().unwrap();
        acked
            .iter()
            .rev()
            .find(|(_, p, at)| *p == port && *at >= since)
            .map(|(_, _, at)| *at)
    }

    fn acked(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// When `port` first acknowledged a write after `since`.
    fn first_on(&self, port: u16, since: Instant) -> Option<Instant> {
        let acked = self.acked.lock().unwrap();
        acked
            .iter()
            .find(|(_, p, at)| *p == port && *at >= since)
            .map(|(_, _, at)| *at)
    }

    /// Stops; the values acknowledged.
    fn finish(mut self) -> Vec<u64> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        self.acked.lock().unwrap().iter().map(|a| a.0).collect()
    }
}

/// Asks every server `pg_is_in_recovery()` until stopped; keeps each moment that saw two
/// primaries.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<(usize, Vec<String>)>>,
}

impl Sampler {
    fn start(ports: [u16; 2]) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = thread::spawn(move || {
            let (mut samples, mut two) = (0, Vec::new());
            let mut sessions: [Slot; 2] = Default::default();
            while !s.load(Ordering::SeqCst) {
                let roles: Vec<String> = ports
                    .iter()
                    .enumerate()
                    .map(|(k, p)| {
                        session(&mut sessions[k], *p)
                            .and_then(|db| {
                                db.run("SELECT pg_is_in_recovery()", Duration::from_secs(2))
                                    .ok()
                            })
                            .and_then(|out| out.first().cloned())
                            .unwrap_or_default()
                    })
                    .collect();
                samples += 1;
                if roles.iter().filter(|r| r.as_str() == "f").count() > 1 {
                    two.push(format!("sample {samples}: {roles:?}"));
                }
                thread::sleep(Duration::from_millis(5));
            }
            (samples, two)
        });
        Sampler {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops; how many samples, and those that saw two primaries.
    fn finish(mut self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// The values in `t` on the server at `port`.
fn rows(port: u16) -> Vec<u64> {
    sql_at(port, "SELECT v FROM t ORDER BY v")
        .unwrap_or_else(|e| panic!("SELECT from t on port {port}: {e}"))
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect()
}

/// Two PostgreSQL servers (p1 a primary, p2 its clone), both started as standbys, each
/// with its node config (n1, n2) on one ZooKeeper.
struct Pair {
    p1: PgServer,
    p2: PgServer,
    zk: ZkServer,
    cluster: Cluster,
    n1: Node,
    n2: Node,
    /// The uid the wardens run under; root when `None` (the hooks then run PostgreSQL's
    /// programs through `setpriv`).
    uid: Option<u32>,
}

impl Pair {
    /// The wardens run as root.
    fn new() -> Pair {
        let p1 = PgServer::init();
        let p2 = PgServer::clone_of(&p1);
        p1.restart_as_standby();
        assert_eq!(p1.in_recovery(), Some(true));
        assert_eq!(p2.in_recovery(), Some(true));
        let zk = ZkServer::start();
        let cluster = Cluster::new(&zk);
        let (n1, n2) = (pg_node(&cluster, "n1", &p1), pg_node(&cluster, "n2", &p2));
        Pair {
            p1,
            p2,
            zk,
            cluster,
            n1,
            n2,
            uid: None,
        }
    }

    /// The wardens run as the postgres user, as the example's systemd drop-in runs them
    /// (when the tests run as root): the hooks start PostgreSQL's programs themselves.
    fn new_as_postgres() -> Pair {
        let mut pair = Pair::new();
        if nix::unistd::geteuid().is_root() {
            give(pair.cluster.dir());
            for n in [&pair.n1, &pair.n2] {
                fs::set_permissions(&n.config, fs::Permissions::from_mode(0o644))
                    .expect("chmod the config");
            }
            pair.uid = Some(postgres_user().uid.as_raw());
        }
        pair
    }

    fn start(&self, node: &Node) -> Warden {
        match self.uid {
            Some(uid) => node.start_as(uid),
            None => node.start(),
        }
    }

    fn ports(&self) -> [u16; 2] {
        [self.p1.port(), self.p2.port()]
    }

    /// Starts n1's warden (n1 is promoted, table `t` is created), then n2's, and waits
    /// until n2 is a healthy standby whose follow of n1 has finished and whose server
    /// streams from p1.
    fn start_with_n1_active(&self) -> [Warden; 2] {
        let w1 = self.start(&self.n1);
        assert_eq!(wait_for_active(&self.n1.config, secs(60)).0, "n1");
        assert_eq!(self.p1.in_recovery(), Some(false));
        self.p1.sql("CREATE TABLE t (v bigint PRIMARY KEY)");
        let w2 = self.start(&self.n2);
        wait_for_status(&self.n1.config, secs(60), "n2 is a healthy standby", |s| {
            member_role(s, "n2").as_deref() == Some("standby")
                && member_health(s, "n2").as_deref() == Some("healthy")
                && member(s, "n2")
                    .and_then(|m| m.get("follow"))
                    .and_then(|f| f.as_str())
                    .is_some_and(|f| f.starts_with("current"))
        });
        let p1_addr = format!("127.0.0.1 {}", self.p1.port());
        wait_until(secs(30), "p2 streams from p1", || {
            self.p2.streams_from().as_deref() == Some(p1_addr.as_str())
        });
        [w1, w2]
    }
}

#[test]
fn postgresql_primary_moves_with_warden_and_never_runs_twice() {
    // As the example's drop-in runs warden; the other tests run it as root.
    let pair = Pair::new_as_postgres();
    let Pair {
        p1,
        p2,
        cluster,
        n1,
        n2,
        ..
    } = &pair;
    let ports = pair.ports();
    let check = cli(&n1.config, &["check-config"]);
    assert!(check.status.success(), "{}", describe(&check));
    let sampler = Sampler::start(ports);

    // n1 is promoted; n2 follows it.
    let [_w1, mut w2] = pair.start_with_n1_active();
    let p1_addr = format!("127.0.0.1 {}", p1.port());

    // A planned switchover while the writer writes: nothing acknowledged is lost.
    let writer = Writer::start(ports, 0);
    wait_until(secs(30), "the writer wrote", || writer.acked() >= 20);
    let asked = Instant::now();
    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "30s"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(p2.in_recovery(), Some(false), "p2 is not the primary");
    let before = writer.acked();
    wait_until(secs(30), "the writer writes on p2", || {
        writer.acked() >= before + 20
    });
    // Reported, not asserted (README "Benchmarks").
    if let Some(at) = writer.first_on(p2.port(), asked) {
        eprintln!(
            "timing: switchover to the first write acknowledged by the new primary: {:?}",
            at - asked
        );
    }
    let acked = writer.finish();
    let on_p2 = rows(p2.port());
    let lost: Vec<u64> = acked
        .iter()
        .filter(|v| on_p2.binary_search(v).is_err())
        .copied()
        .collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    let p2_addr = format!("127.0.0.1 {}", p2.port());
    wait_until(secs(30), "p1 streams from p2", || {
        p1.streams_from().as_deref() == Some(p2_addr.as_str())
    });
    assert_eq!(p1.in_recovery(), Some(true));
    wait_for_status(&n1.config, secs(60), "n1 is a healthy standby", |s| {
        member_role(s, "n1").as_deref() == Some("standby")
            && member_health(s, "n1").as_deref() == Some("healthy")
    });

    // p1 stops receiving (its primary_conninfo points nowhere) and p2 takes writes that
    // p1 never gets, as an asynchronous replica can miss the last writes of a primary
    // that dies: p2's history now goes further than the one p1 will be promoted with.
    // (After n1's follow of n2 ran: it would point p1 at p2 again.)
    wait_for_status(&n1.config, secs(60), "n1's follow of n2 is current", |s| {
        member(s, "n1")
            .and_then(|m| m.get("follow"))
            .and_then(|f| f.as_str())
            .is_some_and(|f| f.starts_with("current"))
    });
    p1.sql("ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=1 user=postgres'");
    p1.sql("SELECT pg_reload_conf()");
    wait_until(secs(30), "p1 no longer streams", || {
        p1.streams_from().is_none()
    });
    for v in 2_000_000..2_000_010 {
        p2.sql(&format!("INSERT INTO t VALUES ({v})"));
    }

    // kill -9 of n2's warden and its server together: n1 is promoted after the session;
    // p2, restarted as the drop-in starts it, is rewound and comes back as p1's replica.
    let writer = Writer::start(ports, 3_000_000);
    wait_until(secs(30), "the writer writes on p2", || {
        writer
            .first_on(p2.port(), Instant::now() - secs(1))
            .is_some()
    });
    let killed = Instant::now();
    w2.kill9();
    p2.kill9();
    w2.wait_exit(secs(5));
    p2.wait_gone(secs(30));
    wait_for_status(&n1.config, secs(60), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    assert_eq!(p1.in_recovery(), Some(false));
    wait_until(secs(30), "the writer writes on p1", || {
        writer.first_on(p1.port(), killed).is_some()
    });
    if let Some(at) = writer.first_on(p1.port(), killed) {
        eprintln!(
            "timing: kill -9 to the first write acknowledged by the new primary: {:?} \
             (session_timeout {:?})",
            at - killed,
            cluster.session_timeout
        );
    }
    writer.finish();
    assert_eq!(
        p1.try_sql("SELECT count(*) FROM t WHERE v BETWEEN 2000000 AND 2000009")
            .as_deref(),
        Ok("0"),
        "p1 got the writes it was to miss: the histories did not diverge"
    );
    p1.sql("INSERT INTO t VALUES (1000000)");
    p2.start_as_standby();
    let _w2 = pair.start(n2);
    wait_until(secs(60), "p2 streams from p1 again", || {
        p2.streams_from().as_deref() == Some(p1_addr.as_str())
    });
    wait_until(secs(30), "the write after the failover reached p2", || {
        sql_at(p2.port(), "SELECT count(*) FROM t WHERE v = 1000000").as_deref() == Ok("1")
    });
    assert_eq!(
        sql_at(
            p2.port(),
            "SELECT count(*) FROM t WHERE v BETWEEN 2000000 AND 2000009"
        )
        .as_deref(),
        Ok("0"),
        "p2 kept the writes p1 never had: it was not rewound to p1's history"
    );
    wait_for_status(&n1.config, secs(60), "n2 is a healthy standby again", |s| {
        member_role(s, "n2").as_deref() == Some("standby")
            && member_health(s, "n2").as_deref() == Some("healthy")
    });
    let (samples, two) = sampler.finish();
    assert!(samples > 50, "only {samples} samples");
    assert!(two.is_empty(), "two primaries at once: {two:?}");
}

/// Show-it-works 3 on PostgreSQL: the active cut off from the store (ZooKeeper frozen:
/// it answers nothing, its session clocks stop). Its server stops taking writes by its
/// lease end (the demote hook stops it and starts it as a standby); after the thaw one
/// node is active and takes writes, the other streams from it, and no sample saw two
/// primaries.
#[test]
fn an_active_postgresql_cut_off_from_zookeeper_stops_taking_writes_by_its_lease_end() {
    let mut pair = Pair::new();
    let ports = pair.ports();
    let sampler = Sampler::start(ports);
    let mut wardens = pair.start_with_n1_active();
    let writer = Writer::start(ports, 0);
    wait_until(secs(30), "the writer writes on p1", || writer.acked() >= 20);

    pair.zk.freeze();
    let frozen = Instant::now();
    let p1_port = pair.p1.port();
    wait_until(secs(30), "p1 refuses writes", || {
        writer.refused_since(p1_port, frozen)
    });
    let lease = pair.cluster.session_timeout / 2;
    let last = writer
        .last_on(p1_port, frozen)
        .map_or(Duration::ZERO, |at| at - frozen);
    eprintln!(
        "timing: postgresql active cut off from ZooKeeper: last write acknowledged {last:?} \
         after the freeze (lease {lease:?})"
    );
    // A safety bound, with the slack of a loaded 2-core machine (as in faults_ensemble).
    assert!(
        last <= lease + Duration::from_millis(500),
        "p1 took writes {last:?} after ZooKeeper froze, past its lease of {lease:?}"
    );

    pair.zk.thaw();
    let (new, _) = wait_for_active(&pair.n1.config, secs(60));
    let (primary, other) = if new == "n1" {
        (&pair.p1, &pair.p2)
    } else {
        (&pair.p2, &pair.p1)
    };
    let thawed = Instant::now();
    wait_for(secs(30), "the new active's server takes writes", || {
        writer.first_on(primary.port(), thawed)
    });
    // When n2 won, its fence ended n1's warden too (SPEC §5): systemd's Restart= starts
    // it again, and its follow makes p1 a standby of p2.
    if new == "n2" && !process_alive(wardens[0].pid()) {
        wardens[0] = pair.n1.start();
    }
    let addr = format!("127.0.0.1 {}", primary.port());
    wait_until(
        secs(60),
        "the other server streams from the primary",
        || other.streams_from().as_deref() == Some(addr.as_str()),
    );
    writer.finish();
    let (samples, two) = sampler.finish();
    assert!(samples > 50, "only {samples} samples");
    assert!(two.is_empty(), "two primaries at once: {two:?}");
}

/// Show-it-works 4 on PostgreSQL: a priority-0 standby is never promoted by itself. The
/// primary and its warden die; the standby, of priority 0, stays in recovery until the
/// operator names it with `failover --to`.
#[test]
fn a_priority_0_postgresql_standby_is_promoted_only_when_named() {
    let pair = Pair::new();
    set_priority(&pair.n2, 0);
    let [mut w1, _w2] = pair.start_with_n1_active();
    w1.kill9();
    pair.p1.kill9();
    w1.wait_exit(secs(5));
    pair.p1.wait_gone(secs(30));
    wait_for_status(&pair.n2.config, secs(30), "n1's session is gone", |st| {
        member(st, "n1").is_none() && active_id(st).is_none()
    });
    // "Never by itself" as far as a test can watch: three session timeouts.
    holds_for(
        pair.cluster.session_timeout * 3,
        "nobody is active and p2 stays a standby",
        || {
            let st = status_json(&pair.n2.config);
            match (active_id(&st), pair.p2.in_recovery()) {
                (None, Some(true)) => Ok(()),
                (active, recovery) => Err(format!(
                    "active {active:?}, p2 in recovery {recovery:?}: {st:#}"
                )),
            }
        },
    );

    let out = cli(
        &pair.n2.config,
        &["failover", "--to", "n2", "--timeout", "20s"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(pair.p2.in_recovery(), Some(false), "p2 is not the primary");
    pair.p2.sql("INSERT INTO t VALUES (1)");
}

/// The shipped node config passes `check-config` once the hooks' path is where the
/// package puts them.
#[test]
fn the_example_config_passes_check_config() {
    assert_example_config_passes_check_config("postgresql", "warden-postgresql");
}

/// The demote of a planned switchover, run by itself against real servers: a successor
/// that cannot confirm the old primary's last WAL (a server of another history, which
/// receives none; a port where nothing listens) fails the demote, says why, and leaves
/// the old primary a running standby of nobody, never a primary that a promoted
/// successor would run beside.
#[test]
fn a_switchover_demote_fails_when_the_successor_cannot_confirm_the_last_wal() {
    let p1 = PgServer::init();
    let stranger = PgServer::init();
    p1.sql("CREATE TABLE kept (v int)");
    p1.sql("INSERT INTO kept VALUES (1)");
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("hooks.env");
    fs::write(&env_file, hooks_env(&p1, 1)).unwrap();
    give(dir.path());
    give(&env_file);
    let closed = free_port();
    for (port, why) in [
        (
            stranger.port(),
            "canceling statement due to statement timeout",
        ),
        (closed, "Connection refused"),
    ] {
        assert_eq!(p1.in_recovery(), Some(false), "p1 is not the primary");
        let out = run_switchover_demote(&hooks_script(), &env_file, port, secs(30));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "the demote succeeded: {}",
            describe(&out)
        );
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.contains(&format!(
                "n2 (127.0.0.1:{port}) did not confirm within 1s that it has WAL up to"
            )) && last.contains(why)
                && last.contains("is a standby of nobody now"),
            "the demote does not say why in its last line: {}",
            describe(&out)
        );
        assert_eq!(p1.in_recovery(), Some(true), "p1 is not a running standby");
        assert_eq!(p1.sql("SELECT count(*) FROM kept").trim(), "1");
        p1.sql("SELECT pg_promote()");
        wait_until(secs(30), "p1 is a primary again", || {
            p1.in_recovery() == Some(false)
        });
    }
}
