//! The fault campaign on the shipped recipes (issue 32, point 4), shared by
//! `tests/campaign_redis.rs` and `tests/campaign_postgresql.rs`: three nodes (a warden
//! and the recipe's server each, one ZooKeeper), a client that writes and reads all the
//! time, and seeded rounds of faults, each followed by recovery and the checker.
//!
//! - [`Recipe`]: what differs between Redis and PostgreSQL (start, kill, freeze, read the
//!   data, a client connection).
//! - [`Net`]: partitions. Each node's processes (its warden, the hooks it runs, its
//!   server and the server's children) live in a cgroup v2 of their own; nftables rules in
//!   a table of the campaign's own match the sending socket's cgroup (`socket cgroupv2`)
//!   and the peer's port, and a conntrack mark (one per cut) drops the replies on the same
//!   connections. So "node 1 cut off from node 2" drops exactly node 1's traffic to node
//!   2's server and back (replication, the hooks' checks), and "node 1 cut off from the
//!   store" exactly its warden's ZooKeeper session, while the client (the test process)
//!   still reaches everyone. The table and the cgroups are removed on drop.
//! - [`Client`]: one writer per node, each writing unique increasing values (a shared
//!   counter) to its own node's server every few milliseconds; a write that returns OK is
//!   acknowledged and logged with its send and ack times, the node, and the *server's*
//!   clock at the write (all servers run on this one machine, so their clocks are one).
//!   Each acknowledged write is read back.
//! - The checker ([`two_writable_windows`], the per-round loss check in [`Campaign`],
//!   [`promote_epochs`]).
//!
//! **Two writable copies, soundly.** A write's `[send, ack]` interval seen by the client
//! stretches with every scheduling stall of this 2-core machine, so two such intervals
//! overlapping proves nothing. The server's own clock at the write is the instant it
//! accepted it. Node A's writer writes every few milliseconds; two of A's acknowledged
//! writes at server times `a1 < a2` with `a2 - a1 <= GAP` and no other A write between
//! them, and a write acknowledged by node B at a server time strictly between them, is a
//! window with two writable copies: for it to be legitimate, A would have to stop taking
//! writes, B start and stop, and A start again, all within `GAP` (50 ms), which is two
//! complete handovers through warden (each a lock change, a fencing or a demote hook, and a
//! promote hook: 100 ms or more on this machine). A frozen server does not fool it: its
//! clock reading is taken when it executes the write, after the thaw. A replica never
//! takes a write (Redis `READONLY`, PostgreSQL read-only transactions), and a demoted
//! primary refuses them (`NOREPLICAS`, or it is stopped).
//!
//! **Lost writes.** Before each round every node's data is read; after recovery, the
//! active's. A value acknowledged before that read and missing from it is lost, counted in
//! the first round that misses it. In a planned switchover (`failover` that exits 0) none
//! may be lost. After an unplanned takeover, the new active must still hold everything it
//! held before the round (unless its own server was killed in the round: what reached it
//! in memory only is then gone by design).
//!
//! **Epochs.** The recipes' `promote` hooks print `is the primary (epoch N)`; warden logs
//! it with a timestamp. Across every warden log, in time order, the epochs only grow (the
//! same epoch again only on the same node: a called-off switchover promotes again under the
//! same epoch, SPEC §6a.2).
//!
//! Environment: `WARDEN_CAMPAIGN_SEED=N` replays seed N's plan (the same faults and
//! durations in the same order; a target is drawn relative to the node active at the
//! round's start, so it is the same node while the same nodes end up active: the
//! processes' timing differs from run to run); `WARDEN_CAMPAIGN_ROUNDS` (default 20) rounds
//! per recipe.

use super::*;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtOrd};
use std::sync::{Arc, Mutex};
use std::thread;

/// Rounds per recipe when `WARDEN_CAMPAIGN_ROUNDS` is not set.
pub const DEFAULT_ROUNDS: usize = 20;
/// See the module doc: consecutive writes of one node this close in server time, with
/// another node's write between them, are two writable copies.
pub const GAP_US: i64 = 50_000;
/// A round that does not come back to exactly one active whose service takes writes within
/// this fails, printing its seed and the state.
pub const RECOVERY: Duration = Duration::from_secs(90);
/// How long the standbys get to be healthy again after recovery (not a failure when they
/// are not: the next round's faults meet them as they are).
const STANDBYS_SETTLE: Duration = Duration::from_secs(30);
/// How often each writer writes.
const WRITE_EVERY: Duration = Duration::from_millis(5);
/// How often a writer whose server refused a connection tries again.
const RECONNECT_EVERY: Duration = Duration::from_millis(50);

// ---------------------------------------------------------------------------------------
// The seed

// SplitMix64, shared with the ensemble's fault rounds: a seed names the same plan on
// every machine and every crate version.
use super::nft::feed_nft;
pub use super::rng::Rng;

/// The seed (`WARDEN_CAMPAIGN_SEED`, decimal or `0x` hex, else drawn from the clock) and
/// the rounds (`WARDEN_CAMPAIGN_ROUNDS`, else [`DEFAULT_ROUNDS`]).
pub fn settings() -> (u64, usize) {
    let seed = match std::env::var("WARDEN_CAMPAIGN_SEED") {
        Ok(v) => {
            let v = v.trim().replace('_', "");
            match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            }
            .unwrap_or_else(|_| panic!("WARDEN_CAMPAIGN_SEED={v:?} is not a number"))
        }
        Err(_) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            Rng::new(now.as_nanos() as u64 ^ ((std::process::id() as u64) << 32)).next_u64() >> 16
        }
    };
    let rounds = match std::env::var("WARDEN_CAMPAIGN_ROUNDS") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("WARDEN_CAMPAIGN_ROUNDS={v:?} is not a number")),
        Err(_) => DEFAULT_ROUNDS,
    };
    (seed, rounds)
}

// ---------------------------------------------------------------------------------------
// Partitions: a cgroup per node, nftables rules on the sending socket's cgroup

const TABLE_PREFIX: &str = "warden_camp_";
static NET_SEQ: AtomicU64 = AtomicU64::new(0);

/// The nodes' cgroups and the campaign's nftables table (see the module doc).
pub struct Net {
    table: String,
    /// The cgroup v2 mount (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a hybrid
    /// host, where nft, which resolves a cgroup path under `/sys/fs/cgroup`, runs in a
    /// mount namespace of its own with the v2 mount bound there).
    mount: PathBuf,
    hybrid: bool,
    /// This campaign's cgroup, relative to the mount; node `i`'s is `<rel>/n<i+1>`.
    rel: String,
    mark_base: u32,
    cuts: u32,
}

impl Net {
    /// Checks root and nft, removes what dead campaigns left, and makes `nodes` cgroups and
    /// an empty table.
    pub fn new(nodes: usize) -> Net {
        // SAFETY: geteuid has no preconditions.
        assert!(
            unsafe { libc::geteuid() } == 0,
            "the campaign needs root: it puts each node in a cgroup and adds nftables rules"
        );
        let (mount, hybrid) = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            (PathBuf::from("/sys/fs/cgroup"), false)
        } else if Path::new("/sys/fs/cgroup/unified/cgroup.controllers").exists() {
            (PathBuf::from("/sys/fs/cgroup/unified"), true)
        } else {
            panic!("no cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified: the campaign's partitions match each node's cgroup");
        };
        let seq = NET_SEQ.fetch_add(1, AtOrd::SeqCst);
        let rel = format!("{TABLE_PREFIX}{}_{seq}", std::process::id());
        let net = Net {
            table: rel.clone(),
            mount,
            hybrid,
            rel,
            mark_base: 0x5800_0000
                | ((std::process::id() & 0xfff) << 12)
                | ((seq as u32 & 0xf) << 8),
            cuts: 0,
        };
        net.remove_stale();
        for i in 0..nodes {
            fs::create_dir_all(net.cgroup(i))
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", net.cgroup(i).display()));
        }
        net.nft(&format!(
            "table inet {t} {{\n chain out {{\n  type filter hook output priority filter; policy accept;\n }}\n}}\n",
            t = net.table
        ))
        .unwrap_or_else(|e| panic!("cannot create the nftables table {}: {e}", net.table));
        net
    }

    fn cgroup(&self, i: usize) -> PathBuf {
        self.mount.join(&self.rel).join(format!("n{}", i + 1))
    }

    /// Tables and cgroups of campaign processes that died before their `Drop` ran.
    fn remove_stale(&self) {
        let dead = |name: &str| {
            name.strip_prefix(TABLE_PREFIX)
                .and_then(|rest| rest.split('_').next())
                .and_then(|p| p.parse::<u32>().ok())
                .is_some_and(|p| !process_alive(p))
        };
        if let Ok(list) = nft_cmd(&["list", "tables"]) {
            for line in list.lines() {
                if let Some(name) = line.trim().strip_prefix("table inet ") {
                    if dead(name) {
                        let _ = nft_cmd(&["delete", "table", "inet", name]);
                    }
                }
            }
        }
        for entry in fs::read_dir(&self.mount).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if dead(&name) {
                remove_cgroup(&self.mount, &entry.path());
            }
        }
    }

    /// A script that puts itself in node `i`'s cgroup, then execs warden with its
    /// arguments: the daemon and every hook it runs are the node's from their start.
    pub fn warden_wrapper(&self, dir: &Path, i: usize) -> PathBuf {
        let path = dir.join(format!("campaign-warden-n{}", i + 1));
        fs::write(
            &path,
            format!(
                "#!/bin/sh\necho $$ > '{}/cgroup.procs' || exit 1\nexec '{WARDEN}' \"$@\"\n",
                self.cgroup(i).display()
            ),
        )
        .expect("write the warden wrapper");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    /// Moves `pid` (a server just started) into node `i`'s cgroup; its children follow.
    pub fn join(&self, i: usize, pid: u32) {
        // (A server that died meanwhile has nothing to move: the next start joins again.)
        let _ = fs::write(self.cgroup(i).join("cgroup.procs"), pid.to_string());
    }

    /// Kills every process in node `i`'s cgroup (its warden, the hooks it runs, its
    /// server) and waits, up to 10 s, until none is left; `Err` names what stayed.
    pub fn kill_node(&self, i: usize) -> Result<(), String> {
        let procs = self.cgroup(i).join("cgroup.procs");
        // (Hand-written, not `cgroup.kill`: a hybrid host's kernel may lack it.)
        fs::read_to_string(&procs).map_err(|e| format!("cannot read {}: {e}", procs.display()))?;
        poll_for(secs(10), ms(20), || {
            let pids = fs::read_to_string(&procs).ok()?;
            for pid in pids.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
                // SAFETY: kill sends a signal to one pid; no memory is handed over.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            pids.trim().is_empty().then_some(())
        })
        .ok_or_else(|| {
            format!(
                "processes left in {}: {}",
                procs.display(),
                fs::read_to_string(&procs).unwrap_or_default().trim()
            )
        })
    }

    /// Drops node `i`'s traffic to `ports` on loopback, and the replies, on connections
    /// open now or later, until [`heal`](Self::heal).
    pub fn cut(&mut self, i: usize, ports: &[u16]) {
        self.cuts += 1;
        // A mark per cut: connections marked by an earlier cut stay marked after the heal
        // and must not be dropped again by a later cut's mark rule.
        let m = self.mark_base | (self.cuts & 0xff);
        let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
        let script = format!(
            "add rule inet {t} out socket cgroupv2 level 2 \"{rel}/n{n}\" ip daddr 127.0.0.1 tcp dport {{ {p} }} ct mark set {m:#x} drop\n\
             add rule inet {t} out ct mark {m:#x} drop\n",
            t = self.table,
            rel = self.rel,
            n = i + 1,
            p = ports.join(", "),
        );
        self.nft(&script)
            .unwrap_or_else(|e| panic!("cannot add the rules:\n{script}{e}"));
    }

    /// Removes every rule (the table stays).
    pub fn heal(&mut self) {
        self.nft(&format!("flush chain inet {} out\n", self.table))
            .unwrap_or_else(|e| panic!("cannot flush {}: {e}", self.table));
    }

    /// Applies an nft script; on a hybrid host in a mount namespace where the v2 mount is
    /// `/sys/fs/cgroup` (nft resolves `socket cgroupv2` paths there, to the cgroup's id).
    fn nft(&self, script: &str) -> Result<(), String> {
        let cmd = if self.hybrid {
            let mut c = Command::new("unshare");
            c.args(["-m", "sh", "-c"]).arg(format!(
                "mount --bind '{}' /sys/fs/cgroup && exec nft -f -",
                self.mount.display()
            ));
            c
        } else {
            let mut c = Command::new("nft");
            c.args(["-f", "-"]);
            c
        };
        feed_nft(cmd, script)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if let Err(e) = nft_cmd(&["delete", "table", "inet", &self.table]) {
            eprintln!("could not delete the nftables table {}: {e}", self.table);
        }
        remove_cgroup(&self.mount, &self.mount.join(&self.rel));
    }
}

/// Moves every process of `dir` and its children to the root cgroup, and removes them.
fn remove_cgroup(mount: &Path, dir: &Path) {
    let mut dirs = vec![dir.to_path_buf()];
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().is_dir() {
            dirs.insert(0, entry.path());
        }
    }
    for d in &dirs {
        for pid in fs::read_to_string(d.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
        {
            let _ = fs::write(mount.join("cgroup.procs"), pid);
        }
    }
    for d in &dirs {
        if let Err(e) = fs::remove_dir(d) {
            eprintln!("could not remove the cgroup {}: {e}", d.display());
        }
    }
}

fn nft_cmd(args: &[&str]) -> Result<String, String> {
    let out = Command::new("nft")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run nft: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

// ---------------------------------------------------------------------------------------
// The client

/// One connection of the client to one node's server.
pub trait Conn: Send {
    /// Writes `value`; `Ok` with the server's clock (µs since the Unix epoch) when the
    /// write was acknowledged. `Err((connection_lost, why))` otherwise.
    fn write(&mut self, value: u64) -> Result<i64, (bool, String)>;
    /// Reads `value` back (just acknowledged here): whether the server has it.
    fn read(&mut self, value: u64) -> Result<bool, (bool, String)>;
}

/// Opens a connection to one node's server, or `None` (down, frozen, refusing).
pub type Connect = Box<dyn Fn() -> Option<Box<dyn Conn>> + Send + Sync>;

/// One acknowledged write.
#[derive(Clone, Debug)]
pub struct Ack {
    pub node: usize,
    pub value: u64,
    pub send: Instant,
    pub ack: Instant,
    /// The server's clock at the write, µs since the Unix epoch.
    pub server_us: i64,
}

#[derive(Default)]
struct ClientLog {
    acks: Vec<Ack>,
    refused: u64,
    reads: u64,
    /// Acknowledged writes that the same server, read right after, did not have.
    unread: Vec<String>,
}

/// One writer thread per node (see the module doc).
pub struct Client {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<ClientLog>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Client {
    pub fn start(connects: Vec<Connect>) -> Client {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(ClientLog::default()));
        let counter = Arc::new(AtomicU64::new(1));
        let threads = connects
            .into_iter()
            .enumerate()
            .map(|(node, connect)| {
                let (stop, log, counter) = (stop.clone(), log.clone(), counter.clone());
                thread::spawn(move || {
                    let mut conn: Option<Box<dyn Conn>> = None;
                    let mut failed_at: Option<Instant> = None;
                    while !stop.load(AtOrd::SeqCst) {
                        if conn.is_none()
                            && failed_at.is_none_or(|t| t.elapsed() >= RECONNECT_EVERY)
                        {
                            conn = connect();
                            if conn.is_none() {
                                failed_at = Some(Instant::now());
                            }
                        }
                        if let Some(c) = conn.as_mut() {
                            let value = counter.fetch_add(1, AtOrd::SeqCst);
                            let send = Instant::now();
                            match c.write(value) {
                                Ok(server_us) => {
                                    let ack = Instant::now();
                                    let read = c.read(value);
                                    let mut l = log.lock().unwrap();
                                    l.acks.push(Ack {
                                        node,
                                        value,
                                        send,
                                        ack,
                                        server_us,
                                    });
                                    match read {
                                        Ok(true) => l.reads += 1,
                                        Ok(false) => {
                                            l.reads += 1;
                                            l.unread.push(format!(
                                                "n{}: {value} acknowledged, then not there",
                                                node + 1
                                            ));
                                        }
                                        Err((lost, _)) => {
                                            if lost {
                                                conn = None;
                                                failed_at = Some(Instant::now());
                                            }
                                        }
                                    }
                                }
                                Err((lost, _)) => {
                                    log.lock().unwrap().refused += 1;
                                    if lost {
                                        conn = None;
                                        failed_at = Some(Instant::now());
                                    }
                                }
                            }
                        }
                        thread::sleep(WRITE_EVERY);
                    }
                })
            })
            .collect();
        Client { stop, log, threads }
    }

    /// Every acknowledged write so far.
    pub fn acks(&self) -> Vec<Ack> {
        self.log.lock().unwrap().acks.clone()
    }

    /// Whether node `i` acknowledged a write sent after `since`.
    pub fn acked_on_since(&self, i: usize, since: Instant) -> bool {
        let log = self.log.lock().unwrap();
        log.acks
            .iter()
            .rev()
            .take_while(|a| a.send >= since)
            .any(|a| a.node == i)
    }

    /// (refused writes, reads, read anomalies).
    pub fn counts(&self) -> (u64, u64, Vec<String>) {
        let log = self.log.lock().unwrap();
        (log.refused, log.reads, log.unread.clone())
    }

    pub fn stop(&mut self) {
        self.stop.store(true, AtOrd::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.stop.store(true, AtOrd::SeqCst);
    }
}

// ---------------------------------------------------------------------------------------
// The checker

/// Windows with two writable copies (see the module doc): for each node A, two
/// consecutive writes of A at most [`GAP_US`] apart in server time with a write of
/// another node strictly between them. One line per window.
pub fn two_writable_windows(acks: &[Ack], nodes: usize) -> Vec<String> {
    let mut by_node: Vec<Vec<&Ack>> = vec![Vec::new(); nodes];
    for a in acks {
        by_node[a.node].push(a);
    }
    for v in by_node.iter_mut() {
        v.sort_by_key(|a| a.server_us);
    }
    let mut windows = Vec::new();
    for (a, mine) in by_node.iter().enumerate() {
        let mut seen = HashSet::new();
        for (b, theirs) in by_node.iter().enumerate() {
            if a == b {
                continue;
            }
            for w in theirs {
                // The first write of A at or after w, and the one before it.
                let k = mine.partition_point(|x| x.server_us < w.server_us);
                if k == 0 || k == mine.len() {
                    continue;
                }
                let (p, s) = (mine[k - 1], mine[k]);
                if s.server_us == w.server_us || s.server_us - p.server_us > GAP_US {
                    continue;
                }
                if seen.insert(p.value) {
                    windows.push(format!(
                        "n{} took {} at server time {} and {} at {} ({} µs apart); n{} took {} at {} between them",
                        a + 1,
                        p.value,
                        p.server_us,
                        s.value,
                        s.server_us,
                        s.server_us - p.server_us,
                        b + 1,
                        w.value,
                        w.server_us
                    ));
                }
            }
        }
    }
    windows
}

/// The last line of node `i`'s newest warden log in `dir` that contains `words`.
fn last_log_line(dir: &Path, i: usize, words: &str) -> Option<String> {
    let node = format!("n{}", i + 1);
    let newest = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            n.ends_with(".log") && n.split('.').next() == Some(node.as_str())
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())?;
    fs::read_to_string(newest.path())
        .ok()?
        .lines()
        .rev()
        .find(|l| l.contains(words))
        .map(str::to_string)
}

/// Whether any log of node `node`'s wardens in `dir` names epoch `epoch` (`epoch=N` as
/// the daemon logs a follow, a transition or an event, or `epoch N`).
fn node_logs_name_epoch(dir: &Path, node: &str, epoch: u64) -> bool {
    let names = |t: &str| {
        [format!("epoch={epoch}"), format!("epoch {epoch}")]
            .iter()
            .any(|pat| {
                t.match_indices(pat.as_str()).any(|(at, _)| {
                    !t[at + pat.len()..]
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_digit())
                })
            })
    };
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            n.ends_with(".log") && n.split('.').next() == Some(node)
        })
        .any(|e| fs::read_to_string(e.path()).is_ok_and(|t| names(&t)))
}

/// Every `promote` of the recipe's hooks in the warden logs of `dir` (`n<i>*.log`), as
/// (log timestamp, node, epoch, the line), in time order.
pub fn promote_epochs(dir: &Path) -> Vec<(String, String, u64, String)> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if !(name.starts_with('n') && name.ends_with(".log")) {
            continue;
        }
        let node = name.split('.').next().unwrap_or_default().to_string();
        for line in fs::read_to_string(entry.path()).unwrap_or_default().lines() {
            let Some(at) = line.find("is the primary (epoch ") else {
                continue;
            };
            let digits: String = line[at + "is the primary (epoch ".len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            let Ok(epoch) = digits.parse::<u64>() else {
                continue;
            };
            let stamp = line
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            found.push((stamp, node.clone(), epoch, line.to_string()));
        }
    }
    found.sort();
    found
}

/// The promotions whose epoch did not grow: a later one (in log time) below an earlier
/// one, or equal to it on another node.
pub fn epochs_that_went_back(promotes: &[(String, String, u64, String)]) -> Vec<String> {
    promotes
        .windows(2)
        .filter(|w| w[1].2 < w[0].2 || (w[1].2 == w[0].2 && w[1].1 != w[0].1))
        .map(|w| format!("{}\n  then {}", w[0].3, w[1].3))
        .collect()
}

// ---------------------------------------------------------------------------------------
// The recipe and the faults

/// What the campaign needs of a recipe's three nodes.
pub trait Recipe {
    fn name(&self) -> &'static str;
    fn nodes(&self) -> &[Node];
    fn cluster(&self) -> &Cluster;
    fn zk(&mut self) -> &mut ZkServer;
    /// Node `i`'s server port (what the other nodes reach it on).
    fn port(&self, i: usize) -> u16;
    /// Node `i`'s server's main pid while it runs.
    fn server_pid(&self, i: usize) -> Option<u32>;
    /// Whether node `i`'s server has exited (killed, fenced); reaps it.
    fn server_exited(&mut self, i: usize) -> bool;
    fn kill_server(&mut self, i: usize);
    /// Starts node `i`'s server again as its service manager would, refusing writes until
    /// warden promotes it or it follows.
    fn restart_server(&mut self, i: usize);
    fn freeze_server(&mut self, i: usize);
    fn thaw_server(&mut self, i: usize);
    /// The values in node `i`'s data, or why not.
    fn values(&self, i: usize) -> Result<Vec<u64>, String>;
    /// How the client connects to node `i`'s server.
    fn connect(&self, i: usize) -> Connect;
    /// Called once node 1 is active, before the others start (PostgreSQL makes its table).
    fn first_active(&mut self) {}
    /// Whether node `i`'s server replicates node `primary`'s now (the link up), as the
    /// server itself says.
    fn follows(&self, i: usize, primary: usize) -> bool;
    /// The words of a failed follow after which the recipe's README tells the operator to
    /// clone the node again; `None` when it never does.
    fn reclone_advice(&self) -> Option<&'static str> {
        None
    }
    /// Whether a follow that failed so (`status`'s words) is one no retry mends (a history
    /// the rewind cannot bring back), so that the node is cloned again; any other failure
    /// is left to the hooks, and the round waits for it.
    fn reclone_when(&self, _follow: &str) -> bool {
        false
    }
    /// Whether node `i`'s server is a primary now, as the server itself says.
    fn is_primary(&self, _i: usize) -> bool {
        true
    }
    /// Clones node `i`'s server again from node `from`'s and starts it as a standby, as
    /// that README says; everything of node `i` has been killed.
    fn reclone(&mut self, i: usize, from: usize) -> Result<(), String> {
        Err(format!(
            "{} cannot clone n{} from n{}",
            self.name(),
            i + 1,
            from + 1
        ))
    }
}

#[derive(Clone, Debug)]
pub enum Fault {
    KillWarden(usize, Duration),
    KillServer(usize, Duration),
    KillBoth(usize, Duration),
    StopWarden(usize, Duration),
    StopServer(usize, Duration),
    CutNodes(usize, usize, Duration),
    CutStore(usize, Duration),
    StoreRestart { wipe: bool, down: Duration },
    StoreRestore(usize),
    FailoverTo(usize),
    Failover,
}

impl Fault {
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::KillWarden(..) => "kill -9 warden",
            Fault::KillServer(..) => "kill -9 server",
            Fault::KillBoth(..) => "kill -9 warden+server",
            Fault::StopWarden(..) => "SIGSTOP warden",
            Fault::StopServer(..) => "SIGSTOP server",
            Fault::CutNodes(..) => "cut node|node",
            Fault::CutStore(..) => "cut node|store",
            Fault::StoreRestart { wipe: false, .. } => "store restart",
            Fault::StoreRestart { wipe: true, .. } => "store restart, wiped",
            Fault::StoreRestore(..) => "store restored from a copy",
            Fault::FailoverTo(..) => "failover --to",
            Fault::Failover => "failover",
        }
    }

    /// Draws one fault; `active` is the active node's index, aimed at half the time.
    pub fn draw(rng: &mut Rng, active: usize, nodes: usize) -> Fault {
        let target = if rng.percent(50) {
            active
        } else {
            rng.below(nodes as u64) as usize
        };
        let other = (target + 1 + rng.below(nodes as u64 - 1) as usize) % nodes;
        let standby = (active + 1 + rng.below(nodes as u64 - 1) as usize) % nodes;
        match rng.below(100) {
            0..=9 => Fault::KillWarden(target, rng.millis(0, 3000)),
            10..=19 => Fault::KillServer(target, rng.millis(0, 3000)),
            20..=26 => Fault::KillBoth(target, rng.millis(0, 3000)),
            27..=35 => Fault::StopWarden(target, rng.millis(300, 4000)),
            36..=44 => Fault::StopServer(target, rng.millis(300, 4000)),
            45..=54 => Fault::CutNodes(target, other, rng.millis(300, 4000)),
            55..=64 => Fault::CutStore(target, rng.millis(300, 4000)),
            65..=69 => Fault::StoreRestart {
                wipe: false,
                down: rng.millis(0, 3000),
            },
            70..=72 => Fault::StoreRestart {
                wipe: true,
                down: rng.millis(0, 2000),
            },
            73..=76 => Fault::StoreRestore(standby),
            77..=90 => Fault::FailoverTo(standby),
            _ => Fault::Failover,
        }
    }
}

/// The counts of the table.
#[derive(Default, Debug)]
pub struct Stats {
    pub rounds: usize,
    pub faults: BTreeMap<&'static str, usize>,
    pub planned: usize,
    pub called_off: usize,
    pub takeovers: usize,
    pub lost_planned: usize,
    pub lost_unplanned: usize,
    pub lost_reached: usize,
    pub init_force: usize,
    pub lost_data_said: usize,
    /// Restores after which a node was promoted before any warden that had seen the
    /// forgotten promotion raised the floor, above every earlier epoch (SPEC §3a's
    /// accepted limit).
    pub floor_races: usize,
    /// Standbys cloned again, as the recipe's README says, after a follow that failed for
    /// good.
    pub reclones: usize,
}

/// The campaign on one recipe: its nodes, their wardens, the network, the client.
pub struct Campaign<R: Recipe> {
    pub recipe: R,
    pub net: Net,
    wardens: Vec<Option<Warden>>,
    wrappers: Vec<PathBuf>,
    pub client: Client,
    seed: u64,
    rng: Rng,
    pub stats: Stats,
    /// Values already counted lost.
    lost: HashSet<u64>,
    /// The round and fault under way, for failure messages.
    now: String,
    /// After a store restored from a copy: how many promotions the logs held then. None
    /// may follow until `init --force` has run.
    restored: Option<usize>,
}

impl<R: Recipe> Campaign<R> {
    /// Puts the recipe's servers in their cgroups, starts node 1's warden, waits until it
    /// is active, starts the others, waits for healthy standbys, and starts the client.
    pub fn start(mut recipe: R, seed: u64) -> Campaign<R> {
        let n = recipe.nodes().len();
        let net = Net::new(n);
        for i in 0..n {
            if let Some(pid) = recipe.server_pid(i) {
                net.join(i, pid);
            }
        }
        let wrappers: Vec<PathBuf> = (0..n)
            .map(|i| net.warden_wrapper(recipe.cluster().dir(), i))
            .collect();
        let start =
            |i: usize, recipe: &R| Warden::start_program(&wrappers[i], &recipe.nodes()[i].config);
        let mut wardens = vec![Some(start(0, &recipe))];
        assert_eq!(wait_for_active(&recipe.nodes()[0].config, secs(60)).0, "n1");
        recipe.first_active();
        for i in 1..n {
            wardens.push(Some(start(i, &recipe)));
        }
        let client = Client::start((0..n).map(|i| recipe.connect(i)).collect());
        let mut c = Campaign {
            recipe,
            net,
            wardens,
            wrappers,
            client,
            seed,
            rng: Rng::new(seed),
            stats: Stats::default(),
            lost: HashSet::new(),
            now: "start".into(),
            restored: None,
        };
        c.standbys_settle();
        c
    }

    fn config(&self) -> &Path {
        &self.recipe.nodes()[0].config
    }

    fn fail(&self, why: &str) -> ! {
        let st = try_status_json(self.config())
            .map(|s| format!("{s:#}"))
            .unwrap_or_else(|e| e);
        dump_logs();
        panic!(
            "campaign {}: seed {} ({}; replay with WARDEN_CAMPAIGN_SEED={}): {why}\nstatus:\n{st}",
            self.recipe.name(),
            self.seed,
            self.now,
            self.seed
        );
    }

    fn start_warden(&mut self, i: usize) {
        self.wardens[i] = Some(Warden::start_program(
            &self.wrappers[i],
            &self.recipe.nodes()[i].config,
        ));
    }

    /// Restarts what is down: a warden that exited (killed, or fenced as a frozen
    /// incarnation), a server that exited (killed or fenced), as systemd restarts both.
    fn restart_what_is_down(&mut self) {
        for i in 0..self.wardens.len() {
            let down = self.wardens[i].as_mut().is_none_or(|w| !w.is_running());
            if down {
                self.start_warden(i);
            }
            if self.recipe.server_exited(i) {
                self.recipe.restart_server(i);
                if let Some(pid) = self.recipe.server_pid(i) {
                    self.net.join(i, pid);
                }
            }
        }
        if !self.recipe.zk().is_running() {
            self.recipe.zk().restart();
        }
    }

    /// The one active's index when `status` shows exactly one member `active` and it is the
    /// lock's holder.
    fn one_active(st: &Value) -> Option<usize> {
        let id = active_id(st)?;
        let actives = member_ids(st)
            .iter()
            .filter(|m| member_role(st, m).as_deref() == Some("active"))
            .count();
        (actives == 1 && member_role(st, &id).as_deref() == Some("active"))
            .then(|| id[1..].parse::<usize>().ok().map(|n| n - 1))
            .flatten()
    }

    /// [`one_active`](Self::one_active), when its record is the running warden's (pid): a
    /// warden killed a moment ago is still shown active until its session expires.
    fn one_live_active(&mut self, st: &Value) -> Option<usize> {
        let a = Self::one_active(st)?;
        let pid = member(st, &format!("n{}", a + 1))
            .and_then(|m| m.get("pid"))
            .and_then(Value::as_u64)?;
        let w = self.wardens[a].as_mut()?;
        (w.is_running() && u64::from(w.pid()) == pid).then_some(a)
    }

    /// Polls `status` until exactly one active (a running warden) whose service the client
    /// writes to and whose data can be read, within [`RECOVERY`]; restarts what is down
    /// meanwhile and, when the store says it lost data, runs `warden init --force` as the
    /// README tells the operator. Returns the active, when its data was read (taken just
    /// before: every write acknowledged by then is in it), and its data.
    fn recover(&mut self) -> (usize, Instant, HashSet<u64>) {
        let since = Instant::now();
        let mut last: String;
        let mut last_init: Option<Instant> = None;
        loop {
            self.restart_what_is_down();
            match try_status_json(self.config()) {
                Ok(st) => {
                    if st.get("lost_data").and_then(Value::as_bool) == Some(true)
                        && last_init.is_none_or(|t| t.elapsed() > secs(5))
                    {
                        self.init_force();
                        last_init = Some(Instant::now());
                        continue;
                    }
                    last = format!("{st:#}");
                    if let Some(a) = self.one_live_active(&st) {
                        if self.client.acked_on_since(a, since) {
                            let read_at = Instant::now();
                            match self.values_set(a) {
                                Some(values) => return (a, read_at, values),
                                None => {
                                    last = format!("n{}'s data could not be read; {last}", a + 1)
                                }
                            }
                        }
                    }
                }
                Err(e) => last = e,
            }
            if since.elapsed() > RECOVERY {
                self.fail(&format!(
                    "no single active taking writes within {RECOVERY:?}; last status:\n{last}"
                ));
            }
            thread::sleep(ms(200));
        }
    }

    /// `warden init --force`, as the README's operator runs it once `status` says the store
    /// lost data.
    fn init_force(&mut self) {
        let out = cli_with_timeout(self.config(), &["init", "--force"], secs(90));
        eprintln!(
            "campaign: the store lost data; `warden init --force`: {}",
            if out.status.success() {
                "done".to_string()
            } else {
                describe(&out)
            }
        );
        if out.status.success() {
            self.stats.init_force += 1;
            if let Some(before) = self.restored.take() {
                let promotes = promote_epochs(self.recipe.cluster().dir());
                if promotes.len() > before {
                    self.fail(&format!(
                        "after the store was restored from a copy, a node was promoted before `init --force`: {:?}",
                        &promotes[before..]
                    ));
                }
            }
        }
    }

    /// Waits (not a failure) until every other member is a healthy standby whose follow is
    /// current and whose server replicates the active's: the next round's switchover then
    /// has a successor that can take everything.
    fn standbys_settle(&mut self) {
        let since = Instant::now();
        // The nodes whose follow failed, within this wait, with the recipe's advice to
        // clone them again: the hook runs again at once, so `status` shows the failure
        // only between two runs.
        let mut advised: BTreeMap<usize, String> = BTreeMap::new();
        // (Log lines begin with their UTC time in this form: only this wait's count.)
        let since_wall = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
        while since.elapsed() < STANDBYS_SETTLE {
            self.restart_what_is_down();
            if let Ok(st) = try_status_json(self.config()) {
                let ids = member_ids(&st);
                // From the node's own log: `status` cuts a hook's words short, before the
                // recipe's advice (stop 40's third run waited 30 s a round for two standbys
                // so).
                if let Some(advice) = self.recipe.reclone_advice() {
                    for i in 0..self.wardens.len() {
                        if let Some(line) = last_log_line(self.recipe.cluster().dir(), i, advice)
                            .filter(|l| l.get(..since_wall.len()) >= Some(since_wall.as_str()))
                        {
                            advised.insert(i, line);
                        }
                    }
                }
                let ok = ids.len() == self.wardens.len()
                    && ids.iter().all(|id| {
                        member_role(&st, id).as_deref() == Some("active")
                            || (member_role(&st, id).as_deref() == Some("standby")
                                && member_health(&st, id).as_deref() == Some("healthy")
                                && member(&st, id)
                                    .and_then(|m| m.get("follow"))
                                    .and_then(Value::as_str)
                                    .is_none_or(|f| f.starts_with("current")))
                    });
                let active = Self::one_active(&st);
                let n = self.wardens.len();
                if ok && active.is_some_and(|a| (0..n).all(|i| i == a || self.recipe.follows(i, a)))
                {
                    return;
                }
            }
            thread::sleep(ms(200));
        }
        eprintln!("campaign: standbys not all healthy after {STANDBYS_SETTLE:?}; going on");
        self.reclone_what_cannot_follow(&advised);
    }

    /// Does what the recipe's README tells the operator to do with a standby whose follow
    /// failed for good (PostgreSQL: a `pg_rewind` that cannot bring its history back):
    /// stops the node (warden, hooks, server), clones its server again from the active's
    /// and starts the node. Without it such a standby stays out for the rest of the run,
    /// and every later round waits [`STANDBYS_SETTLE`] for it.
    fn reclone_what_cannot_follow(&mut self, advised: &BTreeMap<usize, String>) {
        for (&i, follow) in advised {
            if !self.recipe.reclone_when(follow) {
                eprintln!(
                    "campaign: n{} not cloned again: its follow failed in a way the hooks may \
                     mend ({follow})",
                    i + 1
                );
                continue;
            }
            // Looked at again for each node: the active now, its warden running, its server
            // a primary; this node a standby that does not replicate from it.
            let Ok(st) = try_status_json(self.config()) else {
                return;
            };
            let Some(active) = self.one_live_active(&st) else {
                return;
            };
            // A standby, or one whose server is down (ineligible: stop 41's run stalled from
            // round 478 on such a node, whose server could not start again after a kill,
            // "requested timeline ... does not contain minimum recovery point", and which
            // the campaign left alone as not a standby).
            let standby = matches!(
                member_role(&st, &format!("n{}", i + 1)).as_deref(),
                Some("standby" | "ineligible")
            );
            if i == active
                || !standby
                || self.recipe.follows(i, active)
                || !self.recipe.is_primary(active)
            {
                continue;
            }
            eprintln!(
                "campaign: n{}'s follow failed for good ({follow}); cloning it again from n{}",
                i + 1,
                active + 1
            );
            if let Err(e) = self.net.kill_node(i) {
                self.fail(&format!("could not stop n{} to clone it again: {e}", i + 1));
            }
            if let Some(w) = self.wardens[i].as_mut() {
                w.wait_exit(secs(10));
            }
            if let Err(e) = self.recipe.reclone(i, active) {
                self.fail(&format!("could not clone n{} again: {e}", i + 1));
            }
            if let Some(pid) = self.recipe.server_pid(i) {
                self.net.join(i, pid);
            }
            self.start_warden(i);
            self.stats.reclones += 1;
        }
    }

    fn values_set(&self, i: usize) -> Option<HashSet<u64>> {
        self.recipe.values(i).ok().map(|v| v.into_iter().collect())
    }

    fn failover(&self, to: Option<usize>) -> (bool, String) {
        let mut args = vec!["failover".to_string()];
        if let Some(t) = to {
            args.push("--to".into());
            args.push(format!("n{}", t + 1));
        }
        args.extend(["--timeout".into(), "20s".into()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = cli_with_timeout(self.config(), &args, secs(40));
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        )
    }

    /// Runs the rounds, checking after each; prints the table and returns the stats.
    pub fn run(mut self, rounds: usize) -> Stats {
        let started = Instant::now();
        let mut active = self.recover().0;
        for round in 1..=rounds {
            let fault = Fault::draw(&mut self.rng, active, self.wardens.len());
            self.now = format!("round {round}: {fault:?} with n{} active", active + 1);
            eprintln!("campaign {}: {}", self.recipe.name(), self.now);
            let before: Vec<Option<HashSet<u64>>> = (0..self.wardens.len())
                .map(|i| self.values_set(i))
                .collect();
            let (planned, killed) = self.apply(&fault, active);
            let (new, read_at, after) = self.recover();
            // Everything acknowledged before the read that the active lacks, not counted yet.
            let missing: Vec<u64> = self
                .client
                .acks()
                .iter()
                .filter(|a| {
                    a.ack < read_at && !after.contains(&a.value) && !self.lost.contains(&a.value)
                })
                .map(|a| a.value)
                .collect();
            self.stats.rounds += 1;
            *self.stats.faults.entry(fault.kind()).or_default() += 1;
            match planned {
                Some(true) => {
                    self.stats.planned += 1;
                    self.stats.lost_planned += missing.len();
                    if !missing.is_empty() {
                        self.fail(&format!(
                            "a planned switchover n{} -> n{} lost {} acknowledged writes: {:?}",
                            active + 1,
                            new + 1,
                            missing.len(),
                            &missing[..missing.len().min(20)]
                        ));
                    }
                }
                // `failover` failed: called off (SPEC §6a.2: the old primary serves on and
                // nothing it acknowledged is lost) or refused. A new active after all (the
                // switchover ended past the command's timeout) is judged as a takeover.
                Some(false) if new == active => {
                    self.stats.called_off += 1;
                    self.stats.lost_planned += missing.len();
                    if !missing.is_empty() {
                        self.fail(&format!(
                            "a switchover from n{} that was called off lost {} acknowledged \
                             writes: {:?}",
                            active + 1,
                            missing.len(),
                            &missing[..missing.len().min(20)]
                        ));
                    }
                }
                Some(false) => {
                    self.stats.called_off += 1;
                    self.stats.takeovers += 1;
                    self.stats.lost_unplanned += missing.len();
                }
                None => {
                    if new != active {
                        self.stats.takeovers += 1;
                    }
                    self.stats.lost_unplanned += missing.len();
                    if !killed.contains(&new) {
                        if let Some(had) = &before[new] {
                            let gone: Vec<u64> = had.difference(&after).copied().collect();
                            if !gone.is_empty() {
                                self.stats.lost_reached += gone.len();
                                self.fail(&format!(
                                    "n{} lost {} values it held before the round: {:?}",
                                    new + 1,
                                    gone.len(),
                                    &gone[..gone.len().min(20)]
                                ));
                            }
                        }
                    }
                }
            }
            if !missing.is_empty() {
                eprintln!(
                    "campaign: round {round} lost {} acknowledged writes ({})",
                    missing.len(),
                    fault.kind()
                );
            }
            self.lost.extend(missing);
            let windows = two_writable_windows(&self.client.acks(), self.wardens.len());
            if !windows.is_empty() {
                self.fail(&format!(
                    "{} windows with two writable copies:\n{}",
                    windows.len(),
                    windows.join("\n")
                ));
            }
            let back = epochs_that_went_back(&promote_epochs(self.recipe.cluster().dir()));
            if !back.is_empty() {
                self.fail(&format!("epochs went back:\n{}", back.join("\n")));
            }
            active = new;
            self.standbys_settle();
        }
        self.client.stop();
        let acks = self.client.acks();
        let (refused, reads, unread) = self.client.counts();
        let promotes = promote_epochs(self.recipe.cluster().dir());
        let windows = two_writable_windows(&acks, self.wardens.len());
        let s = &self.stats;
        eprintln!(
            "\ncampaign {} seed {} ({} rounds in {:.0?}):\n\
             | rounds | faults | planned switchovers | takeovers | acknowledged writes | lost writes (planned) | lost writes (unplanned) | windows with two writable copies |\n\
             |---|---|---|---|---|---|---|---|\n\
             | {} | {} | {} | {} | {} | {} | {} | {} |\n\
             faults: {:?}\n\
             switchovers called off or refused: {}; restored stores said lost data: {}; init --force runs: {}; standbys cloned again: {}; restores promoted past before the floor was raised (accepted limit): {}; promotions: {} (epochs {}..{}); refused writes: {}; reads: {}; read anomalies: {}",
            self.recipe.name(),
            self.seed,
            s.rounds,
            started.elapsed(),
            s.rounds,
            s.faults.values().sum::<usize>(),
            s.planned,
            s.takeovers,
            acks.len(),
            s.lost_planned,
            s.lost_unplanned,
            windows.len(),
            s.faults,
            s.called_off,
            s.lost_data_said,
            s.init_force,
            s.reclones,
            s.floor_races,
            promotes.len(),
            promotes.first().map_or(0, |p| p.2),
            promotes.last().map_or(0, |p| p.2),
            refused,
            reads,
            unread.len(),
        );
        assert!(windows.is_empty(), "two writable copies: {windows:?}");
        assert_eq!(s.lost_planned, 0);
        assert!(
            unread.is_empty(),
            "acknowledged writes not read back: {unread:?}"
        );
        self.stats
    }

    /// Applies `fault` and heals it. Returns whether it was a planned switchover (`Some(ok)`)
    /// and which nodes' servers were killed.
    fn apply(&mut self, fault: &Fault, active: usize) -> (Option<bool>, Vec<usize>) {
        let mut killed = Vec::new();
        let mut planned = None;
        match fault.clone() {
            Fault::KillWarden(i, d) => {
                self.kill_warden(i);
                thread::sleep(d);
            }
            Fault::KillServer(i, d) => {
                self.recipe.kill_server(i);
                killed.push(i);
                thread::sleep(d);
            }
            Fault::KillBoth(i, d) => {
                self.kill_warden(i);
                self.recipe.kill_server(i);
                killed.push(i);
                thread::sleep(d);
            }
            Fault::StopWarden(i, d) => {
                if let Some(w) = self.wardens[i].as_mut() {
                    if w.is_running() {
                        w.sigstop();
                        thread::sleep(d);
                        // (Fenced while frozen: the process is gone, nothing to thaw.)
                        if w.is_running() {
                            w.sigcont();
                        }
                    }
                }
            }
            Fault::StopServer(i, d) => {
                self.recipe.freeze_server(i);
                thread::sleep(d);
                self.recipe.thaw_server(i);
                // Fenced while frozen: killed.
                if self.recipe.server_exited(i) {
                    killed.push(i);
                }
            }
            Fault::CutNodes(a, b, d) => {
                let (pa, pb) = (self.recipe.port(a), self.recipe.port(b));
                self.net.cut(a, &[pb]);
                self.net.cut(b, &[pa]);
                thread::sleep(d);
                self.net.heal();
            }
            Fault::CutStore(i, d) => {
                let zk = self.recipe.zk().port();
                self.net.cut(i, &[zk]);
                thread::sleep(d);
                self.net.heal();
            }
            Fault::StoreRestart { wipe, down } => {
                self.recipe.zk().stop();
                thread::sleep(down);
                if wipe {
                    self.recipe.zk().restart_empty();
                } else {
                    self.recipe.zk().restart();
                }
            }
            Fault::StoreRestore(to) => self.store_restore(active, to),
            Fault::FailoverTo(to) => {
                let (ok, why) = self.failover(Some(to));
                if !ok {
                    eprintln!(
                        "campaign: failover --to n{} refused or called off: {why}",
                        to + 1
                    );
                }
                planned = Some(ok);
            }
            Fault::Failover => {
                let (ok, why) = self.failover(None);
                if !ok {
                    eprintln!("campaign: failover refused or called off: {why}");
                }
                planned = Some(ok);
            }
        }
        for i in 0..self.wardens.len() {
            if self.recipe.server_exited(i) && !killed.contains(&i) {
                killed.push(i);
            }
        }
        (planned, killed)
    }

    fn kill_warden(&mut self, i: usize) {
        if let Some(w) = self.wardens[i].as_mut() {
            if w.is_running() {
                w.kill9();
                w.wait_exit(secs(10));
            }
        }
    }

    /// A copy of the store's data, a promotion it then forgets (a switchover to `to`), and
    /// the store restored from the copy. warden must say the store lost data and promote
    /// nobody until the operator runs `warden init --force`, but in SPEC §3a's accepted
    /// limit (counted apart, below).
    fn store_restore(&mut self, active: usize, to: usize) {
        let copy = self.recipe.zk().copy_data();
        let (ok, why) = self.failover(Some(to));
        if !ok {
            eprintln!(
                "campaign: the switchover after the copy was refused ({why}); restoring anyway"
            );
        }
        let dir = self.recipe.cluster().dir().to_path_buf();
        let promotes_before = promote_epochs(&dir).len();
        self.recipe.zk().restore_data(&copy);
        // warden says so within a few session timeouts (when the copy forgot a promotion);
        // meanwhile nobody is promoted.
        let said = poll_for(secs(30), ms(200), || {
            self.restart_what_is_down();
            let st = try_status_json(self.config()).ok()?;
            if st.get("lost_data").and_then(Value::as_bool) == Some(true) {
                return Some(true);
            }
            (!ok && Self::one_active(&st).is_some()).then_some(false)
        })
        .unwrap_or(false);
        let promotes = promote_epochs(&dir);
        // A refused switchover left the copy with nothing to forget but renewals: a node
        // may take the lock again once the restart of the store ended its session.
        if ok && promotes.len() > promotes_before {
            // SPEC §3a's accepted limit (the simulation's "floor race"): the node that
            // joined had not seen the forgotten promotion, and the wardens that had were
            // still reconnecting to the restarted store, so none had raised the floor yet.
            // Safe only while the old active stepped down by its lease end (the
            // two-writable-copies check) and the new epoch is above every epoch promoted
            // before (no epoch handed out twice); anything else fails.
            let highest = promotes[..promotes_before].iter().map(|p| p.2).max();
            let above = promotes[promotes_before..]
                .iter()
                .all(|p| highest.is_none_or(|h| p.2 > h));
            // The premise, from the promoted nodes' own logs: none of them had heard of
            // the forgotten epoch (a follow of it, an event naming it).
            let saw: Vec<String> = match highest {
                Some(h) => promotes[promotes_before..]
                    .iter()
                    .filter(|p| node_logs_name_epoch(&dir, &p.1, h))
                    .map(|p| p.1.clone())
                    .collect(),
                None => Vec::new(),
            };
            if !saw.is_empty() {
                self.fail(&format!(
                    "after the store was restored (forgetting the switchover from n{} to n{}), {saw:?} promoted before `init --force` although its log shows it had seen the forgotten epoch {highest:?}: {:?}",
                    active + 1,
                    to + 1,
                    &promotes[promotes_before..]
                ));
            }
            let restores = self
                .stats
                .faults
                .get("store restored from a copy")
                .copied()
                .unwrap_or(0);
            if self.stats.floor_races + 1 > 1 + restores / 10 {
                self.fail(&format!(
                    "{} restores of {restores} promoted a node before `init --force`: more than \
                     the rare race SPEC §3a accepts",
                    self.stats.floor_races + 1
                ));
            }
            if !above {
                self.fail(&format!(
                    "after the store was restored (forgetting the switchover from n{} to n{}), a node was promoted before `init --force` at an epoch not above every earlier one: {:?}",
                    active + 1,
                    to + 1,
                    &promotes[promotes_before..]
                ));
            }
            eprintln!(
                "campaign: after the restore a node that had not seen the forgotten promotion \
                 was promoted before any warden that had raised the floor (SPEC §3a's \
                 accepted limit), above every earlier epoch: {:?}",
                &promotes[promotes_before..]
            );
            self.stats.floor_races += 1;
            return;
        }
        if ok && !said {
            self.fail(&format!(
                "the store was restored to before the switchover from n{} to n{}, and `status` did not say it lost data within 30s",
                active + 1,
                to + 1
            ));
        }
        if said {
            self.stats.lost_data_said += 1;
            self.restored = Some(promotes_before);
        }
    }
}
