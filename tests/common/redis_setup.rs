//! The harness of `examples/redis` (issue 15), shared by its tests and the benchmark:
//! real redis-server processes under their wardens with the shipped hooks ([`Setup`]), and
//! a client that writes to and asks every server in rounds ([`Prober`]; what it checks is
//! said in `tests/examples_redis.rs`).

use super::redis::RedisServer;
use super::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The shipped hooks, or the script `WARDEN_REDIS_HOOKS` names (the benchmark times
/// another version of the recipe with it, alternated with this one).
pub fn hooks_script() -> PathBuf {
    match std::env::var_os("WARDEN_REDIS_HOOKS") {
        Some(path) => PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/redis/warden-redis"),
    }
}

/// The role Redis itself reports: `master` or `slave`.
pub fn role(r: &RedisServer) -> String {
    r.try_cli(&["INFO", "replication"])
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.trim().strip_prefix("role:").map(str::to_string))
        .unwrap_or_default()
}

/// Whether Redis replicates the server on `port` with the link up.
pub fn linked_to(r: &RedisServer, port: u16) -> bool {
    let info = r.try_cli(&["INFO", "replication"]).unwrap_or_default();
    info.contains("role:slave")
        && info.contains(&format!("master_port:{port}\r"))
        && info.contains("master_link_status:up")
}

/// Writes `node`'s config for the node of Redis `r`: hooks mode with the shipped hooks,
/// `cluster.port` the Redis port, fencing by signal through the Redis pidfile.
pub fn redis_node(cluster: &Cluster, id: &str, r: &RedisServer) -> Node {
    example_hooks_node(
        cluster,
        id,
        &hooks_script(),
        &format!(
            "REDIS_HOST=127.0.0.1\nREDIS_PORT={}\nREDIS_PASSWORD_FILE={}\nREDIS_TIMEOUT=1\n\
             FOLLOW_WAIT=1\n",
            r.port(),
            r.password_file().display()
        ),
        r.port(),
        &r.pidfile(),
        ("3s", "200ms"),
    )
}

/// `n` Redis servers that replicate each other (one password), a ZooKeeper, and a node
/// config for each (`n1` for the first server, ...).
pub struct Setup {
    pub redis: Vec<RedisServer>,
    pub nodes: Vec<Node>,
    pub cluster: Cluster,
    pub zk: ZkServer,
}

impl Setup {
    pub fn new(n: usize) -> Setup {
        let password = format!("pw{:016x}", super::mariadb::rand_u64());
        let redis = (0..n)
            .map(|_| RedisServer::start_replicable(&password))
            .collect();
        Setup::with(redis)
    }

    pub fn with(redis: Vec<RedisServer>) -> Setup {
        let zk = ZkServer::start();
        let cluster = Cluster::new(&zk);
        let nodes = redis
            .iter()
            .enumerate()
            .map(|(i, r)| redis_node(&cluster, &format!("n{}", i + 1), r))
            .collect();
        Setup {
            redis,
            nodes,
            cluster,
            zk,
        }
    }

    pub fn ports(&self) -> Vec<u16> {
        self.redis.iter().map(RedisServer::port).collect()
    }

    /// Starts n1's warden, waits until it is active, then the others', and waits until
    /// every other server replicates n1's and its node is a healthy standby.
    pub fn start_with_n1_active(&self) -> Vec<Warden> {
        let mut wardens = vec![self.nodes[0].start()];
        assert_eq!(wait_for_active(&self.nodes[0].config, secs(30)).0, "n1");
        for node in &self.nodes[1..] {
            wardens.push(node.start());
        }
        self.await_followers(0);
        wardens
    }

    /// Waits until every other server replicates the one of node `primary` with the link
    /// up, and their nodes are healthy standbys whose follow is current.
    pub fn await_followers(&self, primary: usize) {
        let (of, port) = (&self.nodes[primary].id, self.redis[primary].port());
        for (i, r) in self.redis.iter().enumerate().filter(|(i, _)| *i != primary) {
            let id = &self.nodes[i].id;
            wait_until(secs(30), &format!("{id}'s Redis replicates {of}'s"), || {
                linked_to(r, port)
            });
            self.wait_healthy_standby(id);
        }
    }

    pub fn wait_healthy_standby(&self, id: &str) {
        wait_for_status(
            &self.nodes[0].config,
            secs(30),
            &format!("{id} is a healthy standby whose follow is current"),
            |s| {
                member_role(s, id).as_deref() == Some("standby")
                    && member_health(s, id).as_deref() == Some("healthy")
                    && follow_of(s, id).is_some_and(|f| f.starts_with("current"))
            },
        );
    }
}

pub fn follow_of(status: &serde_json::Value, id: &str) -> Option<String> {
    member(status, id)?
        .get("follow")?
        .as_str()
        .map(str::to_string)
}

/// One write a Redis server accepted: `INCR`'s answer, and how many replicas `WAIT` then
/// saw take it.
#[derive(Clone, Debug)]
pub struct Write {
    pub node: usize,
    pub value: i64,
    pub at: Instant,
    pub replicas: i64,
}

#[derive(Default)]
pub struct ProbeLog {
    writes: Vec<Write>,
    rounds: usize,
    /// Rounds in which two servers accepted the write, with when.
    two_accepted: Vec<(Instant, String)>,
    /// Rounds in which two servers called themselves the primary, with when.
    two_masters: Vec<(Instant, String)>,
    /// The last round in which each server refused the write (or did not answer).
    refused_at: Vec<Option<Instant>>,
    /// When each server accepted a write of its own clock thread (see [`Prober::start`]).
    clock: Vec<Vec<Instant>>,
}

/// Asks every server, round after round, to `INCR` the counter and for its role; and,
/// for the timings, each server apart to `INCR` a key of its own.
pub struct Prober {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<ProbeLog>>,
    thread: Option<thread::JoinHandle<()>>,
    clocks: Vec<thread::JoinHandle<()>>,
}

/// A connection to the server on `port`, each step bounded.
pub fn connect(port: u16, password: &str) -> Option<::redis::Connection> {
    let client = ::redis::Client::open(format!("redis://:{password}@127.0.0.1:{port}/")).ok()?;
    let con = client
        .get_connection_with_timeout(Duration::from_millis(200))
        .ok()?;
    con.set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    con.set_write_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    Some(con)
}

impl Prober {
    pub fn start(ports: Vec<u16>, password: &str) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(ProbeLog {
            refused_at: vec![None; ports.len()],
            clock: vec![Vec::new(); ports.len()],
            ..ProbeLog::default()
        }));
        // The rounds go from server to server, so a round waits on the old primary while
        // a switchover pauses its writes: when the new primary first takes a write is
        // measured by a client of its own, as its applications would see it.
        let clocks = ports
            .iter()
            .enumerate()
            .map(|(i, &port)| {
                let (s, l, password) = (stop.clone(), log.clone(), password.to_string());
                thread::spawn(move || {
                    let mut con = None;
                    while !s.load(Ordering::SeqCst) {
                        if con.is_none() {
                            con = connect(port, &password);
                        }
                        if let Some(c) = con.as_mut() {
                            match ::redis::cmd("INCR").arg("clock").query::<i64>(c) {
                                Ok(_) => l.lock().unwrap().clock[i].push(Instant::now()),
                                Err(e) if e.is_io_error() || e.is_timeout() => con = None,
                                Err(_) => {}
                            }
                        }
                        thread::sleep(Duration::from_millis(2));
                    }
                })
            })
            .collect();
        let (s, l, password) = (stop.clone(), log.clone(), password.to_string());
        let all_replicas = ports.len() - 1;
        let thread = thread::spawn(move || {
            let mut cons: Vec<Option<::redis::Connection>> = ports.iter().map(|_| None).collect();
            while !s.load(Ordering::SeqCst) {
                let (mut accepted, mut masters) = (Vec::new(), Vec::new());
                for (i, port) in ports.iter().enumerate() {
                    if cons[i].is_none() {
                        cons[i] = connect(*port, &password);
                    }
                    let Some(con) = cons[i].as_mut() else {
                        l.lock().unwrap().refused_at[i] = Some(Instant::now());
                        continue;
                    };
                    match ::redis::cmd("INCR").arg("counter").query::<i64>(con) {
                        Ok(value) => {
                            let at = Instant::now();
                            let replicas = ::redis::cmd("WAIT")
                                .arg(all_replicas)
                                .arg(100)
                                .query::<i64>(con)
                                .unwrap_or(0);
                            accepted.push(format!("n{}={value}", i + 1));
                            l.lock().unwrap().writes.push(Write {
                                node: i,
                                value,
                                at,
                                replicas,
                            });
                        }
                        Err(e) => {
                            l.lock().unwrap().refused_at[i] = Some(Instant::now());
                            if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
                                cons[i] = None;
                                continue;
                            }
                        }
                    }
                    let info = ::redis::cmd("INFO")
                        .arg("replication")
                        .query::<String>(con)
                        .unwrap_or_default();
                    if info.contains("role:master") {
                        masters.push(format!("n{}", i + 1));
                    }
                }
                let mut log = l.lock().unwrap();
                log.rounds += 1;
                let round = log.rounds;
                if accepted.len() > 1 {
                    log.two_accepted.push((
                        Instant::now(),
                        format!("round {round}: {}", accepted.join(", ")),
                    ));
                }
                if masters.len() > 1 {
                    log.two_masters.push((
                        Instant::now(),
                        format!(
                            "round {round}: masters {}; accepted {}",
                            masters.join(", "),
                            accepted.join(", ")
                        ),
                    ));
                }
                drop(log);
                thread::sleep(Duration::from_millis(5));
            }
        });
        Prober {
            stop,
            log,
            thread: Some(thread),
            clocks,
        }
    }

    /// When `node` first accepted a write of its own client after `since`: what the
    /// `timing:` lines report.
    pub fn first_alone_on(&self, node: usize, since: Instant) -> Option<Instant> {
        let log = self.log.lock().unwrap();
        log.clock[node].iter().find(|&&at| at >= since).copied()
    }

    /// When `node` first accepted a write after `since`.
    pub fn first_on(&self, node: usize, since: Instant) -> Option<Instant> {
        self.accepted_on(node, since).first().map(|w| w.at)
    }

    /// How many writes `node` accepted that a replica received.
    pub fn replicated_on(&self, node: usize) -> usize {
        let log = self.log.lock().unwrap();
        log.writes
            .iter()
            .filter(|w| w.node == node && w.replicas >= 1)
            .count()
    }

    /// The writes `node` accepted after `since`.
    pub fn accepted_on(&self, node: usize, since: Instant) -> Vec<Write> {
        let log = self.log.lock().unwrap();
        log.writes
            .iter()
            .filter(|w| w.node == node && w.at >= since)
            .cloned()
            .collect()
    }

    /// How many rounds the prober has finished.
    pub fn rounds(&self) -> usize {
        self.log.lock().unwrap().rounds
    }

    pub fn refused_since(&self, node: usize, since: Instant) -> bool {
        self.log.lock().unwrap().refused_at[node].is_some_and(|at| at >= since)
    }

    /// Rounds that saw two servers call themselves the primary between `from` and `to`.
    pub fn two_masters_between(&self, from: Instant, to: Instant) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.two_masters
            .iter()
            .filter(|(at, _)| *at >= from && *at <= to)
            .map(|(_, what)| what.clone())
            .collect()
    }

    /// Rounds in which two servers accepted the write between `from` and `to`.
    pub fn two_accepting_between(&self, from: Instant, to: Instant) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.two_accepted
            .iter()
            .filter(|(at, _)| *at >= from && *at <= to)
            .map(|(_, what)| what.clone())
            .collect()
    }

    /// Writes lost between `from` and `to`: each accepted write whose value a later one
    /// did not exceed.
    pub fn lost_between(&self, from: Instant, to: Instant) -> Vec<String> {
        let log = self.log.lock().unwrap();
        let window: Vec<&Write> = log
            .writes
            .iter()
            .filter(|w| w.at >= from && w.at <= to)
            .collect();
        lost(&window, |_| true)
    }

    /// Stops, and checks the whole record: no round with two servers accepting the write,
    /// and no write lost that every replica had received. Returns the writes.
    pub fn finish(mut self) -> Vec<Write> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        for t in self.clocks.drain(..) {
            t.join().unwrap();
        }
        let log = std::mem::take(&mut *self.log.lock().unwrap());
        assert!(log.rounds > 50, "only {} rounds", log.rounds);
        assert!(
            log.two_accepted.is_empty(),
            "two servers accepted writes at once: {:?}",
            log.two_accepted
        );
        let all = log.refused_at.len() as i64 - 1;
        let writes: Vec<&Write> = log.writes.iter().collect();
        let lost = lost(&writes, |w| w.replicas >= all);
        assert!(
            lost.is_empty(),
            "writes every replica had were lost: {lost:?}"
        );
        eprintln!(
            "prober: {} rounds, {} writes accepted, {} received by every replica",
            log.rounds,
            log.writes.len(),
            log.writes.iter().filter(|w| w.replicas >= all).count()
        );
        log.writes
    }
}

/// The writes of `writes` (in the order accepted) that `counts` selects and that a later
/// write did not exceed: the counter went back past them, so they were lost.
pub fn lost(writes: &[&Write], counts: impl Fn(&Write) -> bool) -> Vec<String> {
    let mut lost = Vec::new();
    for (i, w) in writes.iter().enumerate() {
        if !counts(w) {
            continue;
        }
        if let Some(later) = writes[i + 1..].iter().find(|l| l.value <= w.value) {
            lost.push(format!("{w:?}, then {later:?}"));
        }
    }
    lost
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// A TCP proxy on a free loopback port to `127.0.0.1:target`, whose direction from the
/// target to the client can be held ([`hold`](Self::hold)): a replica that replicates
/// through it keeps its link up while it receives nothing, as behind a congested link.
pub struct Proxy {
    pub port: u16,
    held: Arc<AtomicBool>,
}

impl Proxy {
    pub fn start(target: u16) -> Proxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("the proxy's address").port();
        let held = Arc::new(AtomicBool::new(false));
        let h = held.clone();
        thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(upstream) = std::net::TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let (Ok(mut c_in), Ok(mut u_out)) = (client.try_clone(), upstream.try_clone())
                else {
                    continue;
                };
                thread::spawn(move || {
                    let _ = std::io::copy(&mut c_in, &mut u_out);
                });
                let (mut u_in, mut c_out, h) = (upstream, client, h.clone());
                thread::spawn(move || {
                    use std::io::{Read, Write};
                    let mut buf = [0u8; 16384];
                    loop {
                        match u_in.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                // Held after the read too: what a read waiting when the
                                // hold began returns is held with the rest.
                                while h.load(Ordering::SeqCst) {
                                    thread::sleep(Duration::from_millis(5));
                                }
                                if c_out.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                });
            }
        });
        Proxy { port, held }
    }

    /// Holds (true) or lets through (false) what the target sends.
    pub fn hold(&self, on: bool) {
        self.held.store(on, Ordering::SeqCst);
    }
}
