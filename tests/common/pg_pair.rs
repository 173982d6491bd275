//! The harness of `examples/postgresql` (issue 15), shared by its tests and the benchmark:
//! two real PostgreSQL 15 servers under their wardens with the shipped hooks ([`Pair`]),
//! a client that writes to whichever server takes the write ([`Writer`]) and one that
//! asks both for their role all along ([`Sampler`]).

use super::postgres::{give, os_user, postgres_user, sql_at, PgServer, PsqlSession, BIN};
use super::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The shipped hooks, or the script `WARDEN_PG_HOOKS` names (the benchmark times
/// another version of the recipe with it, alternated with this one).
pub fn hooks_script() -> PathBuf {
    match std::env::var_os("WARDEN_PG_HOOKS") {
        Some(path) => PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/postgresql/warden-postgresql"),
    }
}

/// Writes `node`'s config for the node of server `pg`: hooks mode with the shipped hooks,
/// `cluster.port` the PostgreSQL port, fencing by signal through the postmaster's pidfile.
pub fn pg_node(cluster: &Cluster, id: &str, pg: &PgServer) -> Node {
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
pub fn hooks_env(pg: &PgServer, stop_timeout: u32) -> String {
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
pub struct Writer {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(u64, u16, Instant)>>>,
    /// Each server's last refusal (an error, or no connection).
    refused: Arc<Mutex<Vec<(u16, Instant)>>>,
    thread: Option<thread::JoinHandle<()>>,
}

/// A kept session to one server, opened again when it has ended.
#[derive(Default)]
pub struct Slot {
    db: Option<PsqlSession>,
    /// When it last failed to open, or ended.
    failed_at: Option<Instant>,
}

/// How often a slot tries to open a session to a server that refused one: each try starts
/// a `psql`, and trying every round while a server is down (a switchover's gap) loaded the
/// 2-core machine the timings are taken on, and delayed the writer's next try of the other
/// server by a process start.
pub const RECONNECT_EVERY: Duration = Duration::from_millis(50);

/// The session of `slot` to `port` once it is connected, opened again when it has ended.
/// Never waits for a connection to be made: a client that tries the servers in turn must
/// not be held up by one that is down (psql takes tens of milliseconds to start and fail)
/// while the other takes writes.
pub fn session(slot: &mut Slot, port: u16) -> Option<&mut PsqlSession> {
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
    /// Writes as fast as the servers take the writes, one after another.
    pub fn start(ports: [u16; 2], base: u64) -> Writer {
        Writer::paced(ports, base, None)
    }

    /// With `every`: at most one write per `every` (on a fixed schedule), so that the
    /// writer leaves the machine CPU to spare. Refused writes are tried again after 2 ms
    /// either way: the first write a new primary takes is timed as closely.
    pub fn paced(ports: [u16; 2], base: u64, every: Option<Duration>) -> Writer {
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
            let mut next = Instant::now();
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
                } else if let Some(every) = every {
                    // The schedule does not drift, nor catch up after a gap.
                    next = (next + every).max(Instant::now());
                    thread::sleep(next.saturating_duration_since(Instant::now()));
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
    pub fn refused_since(&self, port: u16, since: Instant) -> bool {
        let refused = self.refused.lock().unwrap();
        refused.iter().any(|(p, at)| *p == port && *at >= since)
    }

    /// When `port` last acknowledged a write after `since`.
    pub fn last_on(&self, port: u16, since: Instant) -> Option<Instant> {
        let acked = self.acked.lock().unwrap();
        acked
            .iter()
            .rev()
            .find(|(_, p, at)| *p == port && *at >= since)
            .map(|(_, _, at)| *at)
    }

    pub fn acked(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// When `port` first acknowledged a write after `since`.
    pub fn first_on(&self, port: u16, since: Instant) -> Option<Instant> {
        let acked = self.acked.lock().unwrap();
        acked
            .iter()
            .find(|(_, p, at)| *p == port && *at >= since)
            .map(|(_, _, at)| *at)
    }

    /// Stops; the values acknowledged.
    pub fn finish(mut self) -> Vec<u64> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        self.acked.lock().unwrap().iter().map(|a| a.0).collect()
    }
}

/// Asks every server `pg_is_in_recovery()` until stopped; keeps each moment that saw two
/// primaries.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<(usize, Vec<String>)>>,
}

impl Sampler {
    pub fn start(ports: [u16; 2]) -> Sampler {
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
    pub fn finish(mut self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// The values in `t` on the server at `port`.
pub fn rows(port: u16) -> Vec<u64> {
    sql_at(port, "SELECT v FROM t ORDER BY v")
        .unwrap_or_else(|e| panic!("SELECT from t on port {port}: {e}"))
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect()
}

/// Two PostgreSQL servers (p1 a primary, p2 its clone), both started as standbys, each
/// with its node config (n1, n2) on one ZooKeeper.
pub struct Pair {
    pub p1: PgServer,
    pub p2: PgServer,
    pub zk: ZkServer,
    pub cluster: Cluster,
    pub n1: Node,
    pub n2: Node,
    /// The uid the wardens run under; root when `None` (the hooks then run PostgreSQL's
    /// programs through `setpriv`).
    pub uid: Option<u32>,
}

impl Pair {
    /// The wardens run as root.
    pub fn new() -> Pair {
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
    pub fn new_as_postgres() -> Pair {
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

    pub fn start(&self, node: &Node) -> Warden {
        match self.uid {
            Some(uid) => node.start_as(uid),
            None => node.start(),
        }
    }

    pub fn ports(&self) -> [u16; 2] {
        [self.p1.port(), self.p2.port()]
    }

    /// Starts n1's warden (n1 is promoted, table `t` is created), then n2's, and waits
    /// until n2 is a healthy standby whose follow of n1 has finished and whose server
    /// streams from p1.
    pub fn start_with_n1_active(&self) -> [Warden; 2] {
        let w1 = self.start(&self.n1);
        assert_eq!(wait_for_active(&self.n1.config, secs(60)).0, "n1");
        assert_eq!(self.p1.in_recovery(), Some(false));
        self.p1.sql("CREATE TABLE t (v bigint PRIMARY KEY)");
        let w2 = self.start(&self.n2);
        self.await_follower(&self.n2, &self.p2, &self.p1);
        [w1, w2]
    }

    /// Waits until `node` is a healthy standby whose follow has finished, and its server
    /// streams from `primary`.
    pub fn await_follower(&self, node: &Node, server: &PgServer, primary: &PgServer) {
        await_follower(&self.n1.config, node, server, primary);
    }
}

/// Three PostgreSQL servers (p1 a primary, p2 and p3 its clones), all started as
/// standbys, each with its node config (n1, n2, n3) on one ZooKeeper; the wardens run as
/// root.
pub struct Trio {
    pub pg: Vec<PgServer>,
    pub nodes: Vec<Node>,
    pub cluster: Cluster,
    pub zk: ZkServer,
}

impl Trio {
    pub fn new() -> Trio {
        let p1 = PgServer::init();
        let p2 = PgServer::clone_of(&p1);
        let p3 = PgServer::clone_of(&p1);
        p1.restart_as_standby();
        let zk = ZkServer::start();
        let cluster = Cluster::new(&zk);
        let pg = vec![p1, p2, p3];
        let nodes = pg
            .iter()
            .enumerate()
            .map(|(i, p)| pg_node(&cluster, &format!("n{}", i + 1), p))
            .collect();
        Trio {
            pg,
            nodes,
            cluster,
            zk,
        }
    }

    /// Starts n1's warden (n1 is promoted, table `t` is created), then the others', and
    /// waits until each is a healthy standby streaming from p1.
    pub fn start_with_n1_active(&self) -> Vec<Warden> {
        let mut wardens = vec![self.nodes[0].start()];
        assert_eq!(wait_for_active(&self.nodes[0].config, secs(60)).0, "n1");
        assert_eq!(self.pg[0].in_recovery(), Some(false));
        self.pg[0].sql("CREATE TABLE t (v bigint PRIMARY KEY)");
        wardens.extend(self.nodes[1..].iter().map(Node::start));
        self.await_followers(0);
        wardens
    }

    /// Waits until every other node is a healthy standby whose follow has finished and
    /// whose server streams from the one of node `primary`.
    pub fn await_followers(&self, primary: usize) {
        for i in (0..self.pg.len()).filter(|i| *i != primary) {
            await_follower(
                &self.nodes[primary].config,
                &self.nodes[i],
                &self.pg[i],
                &self.pg[primary],
            );
        }
    }
}

/// Waits (reading the cluster with `config`) until `node` is a healthy standby whose
/// follow has finished, and `server` streams from `primary`.
fn await_follower(config: &Path, node: &Node, server: &PgServer, primary: &PgServer) {
    {
        let id = node.id.as_str();
        wait_for_status(
            config,
            secs(60),
            &format!("{id} is a healthy standby"),
            |s| {
                member_role(s, id).as_deref() == Some("standby")
                    && member_health(s, id).as_deref() == Some("healthy")
                    && member(s, id)
                        .and_then(|m| m.get("follow"))
                        .and_then(|f| f.as_str())
                        .is_some_and(|f| f.starts_with("current"))
            },
        );
        let addr = format!("127.0.0.1 {}", primary.port());
        wait_until(
            secs(30),
            &format!("{id}'s server streams from {addr}"),
            || server.streams_from().as_deref() == Some(addr.as_str()),
        );
    }
}

/// Freezes `pg` as a whole: its postmaster first, so that it starts and reaps no child
/// meanwhile, then every process it started. Returns them for [`thaw_server`].
pub fn freeze_server(pg: &PgServer) -> Vec<u32> {
    let postmaster = pg.pid().expect("a running postmaster");
    super::freeze_pid(postmaster);
    let pids = pg.processes();
    for &pid in &pids[1..] {
        // A child that exited is a zombie now (its postmaster is stopped): still there.
        super::freeze_pid(pid);
    }
    pids
}

/// Thaws what [`freeze_server`] froze: the children first, the postmaster last (a child
/// that was exiting is reaped then, and is no longer there to thaw).
pub fn thaw_server(pids: &[u32]) {
    for &pid in pids.iter().rev() {
        super::thaw_pid(pid);
    }
}

/// Starts `pg`'s postmaster (stopped) as a child of this test process, not daemonized by
/// `pg_ctl`, and waits until it answers: a test that kills it reaps it itself
/// ([`std::process::Child::wait`]), as systemd would. (A postmaster that `pg_ctl` starts
/// is orphaned to this sandbox's pid 1, which does not reap it: killed, it stays a zombie
/// that `kill -0`, the hooks and `pg_ctl` take for a running server. Making the whole test
/// process a child subreaper instead adopts every other test's postmasters too, and
/// those, killed, then stay zombies.)
pub fn start_postmaster_as_child(pg: &PgServer) -> std::process::Child {
    let mut c = if nix::unistd::geteuid().is_root() {
        let mut c = std::process::Command::new("setpriv");
        // setpriv execs the postmaster: the child's pid is the postmaster's.
        c.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--reset-env",
        ])
        .arg(format!("{BIN}/postgres"));
        c
    } else {
        std::process::Command::new(format!("{BIN}/postgres"))
    };
    c.arg("-D").arg(pg.conf());
    let child = super::server::spawn_logged(c, &pg.log_path(), super::postgres::INSTALL);
    wait_until(
        secs(30),
        "the postmaster started as a child answers",
        || pg.in_recovery().is_some(),
    );
    child
}
