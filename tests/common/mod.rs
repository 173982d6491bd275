//! The shared harness of warden's integration tests: real servers and real processes.
//!
//! - [`server::ServerProcess`]: what every real server's harness shares (its temp dir,
//!   its registered log, the spawn, the readiness wait, the kill by pid in `Drop`).
//! - [`ZkServer`]: a standalone ZooKeeper from Debian's `zookeeper` package on a free
//!   loopback port, in a temp dir; freeze/thaw/stop/restart; stopped in `Drop`.
//! - [`Cluster`], [`Node`]: warden config files for one election scope, with the
//!   journal service as the managed service.
//! - [`Warden`]: one `warden run` process with its log; killed in `Drop`.
//! - [`cli`], [`status_json`]: `warden -c CONFIG ...` under a hard timeout.
//! - [`wait_until`]: poll a condition against a deadline.
//! - [`Journal`], [`assert_no_overlap`], [`assert_epochs_grow`]: the services' own records
//!   and the proof that two never ran at once.
//!
//! Every log (ZooKeeper's, each warden's) and every journal is registered per test thread;
//! when a test fails (a [`wait_until`] times out, or any panic drops a handle), all of them
//! are printed once, so a failing CI run says why. Set `WARDEN_TEST_KEEP=1` to keep the temp
//! dirs of a failed test, and `WARDEN_TEST_LOG` (say `debug`) for the daemons' `RUST_LOG`.

#![allow(dead_code)]

pub mod campaign;
pub mod hung_mount;
pub mod mariadb;
pub mod nft;
pub mod pg_pair;
pub mod postgres;
pub mod proxy;
pub mod redis;
pub mod redis_setup;
pub mod rng;
pub mod server;

// Not every test binary uses each of them (the rest of this module is `dead_code`-allowed).
#[allow(unused_imports)]
pub use server::{die_with_parent, free_port, keep_dir_if_failed};
use server::{NotReady, ServerProcess};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use std::cell::RefCell;
use std::fmt::Write as _;
use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// The daemon under test.
pub const WARDEN: &str = env!("CARGO_BIN_EXE_warden");
/// The managed service of the tests (`src/bin/warden-journal-service.rs`).
pub const JOURNAL_SERVICE: &str = env!("CARGO_BIN_EXE_warden-journal-service");

/// How often [`wait_until`] polls: fast enough to time failovers, cheap for file reads.
const POLL: Duration = Duration::from_millis(20);
/// How often status-based waits run `warden status`, which opens a ZooKeeper session.
const STATUS_POLL: Duration = Duration::from_millis(100);
/// A CLI command that has not exited by then is hung: every command is bounded by
/// `connect_timeout` (1s in these tests) plus its own work.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(15);
/// A JVM on a loaded 2-core CI machine can take several seconds to serve.
const ZK_START_TIMEOUT: Duration = Duration::from_secs(40);
/// How many lines of each log a failure prints (the end is what matters), after runs of
/// repeated lines are cut ([`collapse_repeats`]).
const DUMP_TAIL_LINES: usize = 300;

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

// ---------------------------------------------------------------------------------------
// Clocks and processes

/// CLOCK_MONOTONIC in nanoseconds: the clock of the journal lines.
pub fn mono_now_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is readable");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// A duration in nanoseconds, to add to journal timestamps.
pub fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// Nanoseconds as a readable duration, for messages.
pub fn ns(n: u64) -> Duration {
    Duration::from_nanos(n)
}

/// Whether `pid` is a live process. A zombie is dead: this machine's init reaps orphans
/// late, so `kill -0` would still find it.
pub fn process_alive(pid: u32) -> bool {
    let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("State:"))
        .and_then(|s| s.trim().chars().next())
        .is_some_and(|state| state != 'Z' && state != 'X')
}

/// The process's command line, NUL-separated arguments joined by spaces.
pub fn process_cmdline(pid: u32) -> Option<String> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        String::from_utf8_lossy(&raw)
            .split('\0')
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// The pids under `/proc` now.
pub fn all_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect()
}

/// Pids of live processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for pid in all_pids() {
        if let Some(cmdline) = process_cmdline(pid) {
            if cmdline.contains(marker) && process_alive(pid) {
                found.push((pid, cmdline));
            }
        }
    }
    found
}

/// The fields of `/proc/PID/stat` that the tests read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// `R`, `S`, `D`, `T` (stopped), `Z` (zombie), ...
    pub state: char,
    /// The process group (field 5).
    pub pgid: u32,
    /// Clock ticks since boot (field 22): with the pid, it names one process for good.
    pub start_time: u64,
}

/// `/proc/PID/stat` of a live or zombie process; `None` once it is gone.
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn parse_stat(text: &str) -> Option<ProcStat> {
    // The command name (field 2) may hold spaces and parentheses: the fields that follow
    // start after its last ')'. `f[0]` is field 3, so field n is `f[n - 3]`.
    let rest = text.get(text.rfind(')')? + 1..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        state: f.first()?.chars().next()?,
        pgid: f.get(2)?.parse().ok()?,
        start_time: f.get(19)?.parse().ok()?,
    })
}

/// The state of every thread of `pid` (`/proc/PID/task/*/stat`); `None` once it is gone.
fn thread_states(pid: u32) -> Option<Vec<char>> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    Some(
        tasks
            .filter_map(|t| fs::read_to_string(t.ok()?.path().join("stat")).ok())
            .filter_map(|s| parse_stat(&s).map(|s| s.state))
            .collect(),
    )
}

/// How long a process may take to act on SIGSTOP or SIGCONT: a signal is delivered
/// asynchronously (each thread stops when it next runs), and a JVM has dozens of threads
/// on a loaded 2-core machine.
const SIGNAL_TAKES_EFFECT: Duration = Duration::from_secs(10);

/// Waits until every thread of `pid` is stopped (state `T`), or the process is dead: after
/// `kill(SIGSTOP)` returns, the target may still run (and answer) for a moment.
/// SIGSTOP of a test's server by pid, once it is really stopped.
pub fn freeze_pid(pid: u32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .expect("SIGSTOP the server");
    wait_stopped(pid);
}

/// SIGCONT of a server frozen by [`freeze_pid`], once it runs again. A process that
/// ended meanwhile has nothing to thaw: a frozen PostgreSQL backend that was exiting is a
/// zombie, reaped as soon as its postmaster (thawed first) runs again, so its SIGCONT
/// finds no process (the CI failure of stop 32).
pub fn thaw_pid(pid: u32) {
    match nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGCONT,
    ) {
        Ok(()) => wait_continued(pid),
        Err(nix::errno::Errno::ESRCH) => {}
        Err(e) => panic!("SIGCONT the server {pid}: {e}"),
    }
}

pub fn wait_stopped(pid: u32) {
    wait_until(
        SIGNAL_TAKES_EFFECT,
        &format!("every thread of process {pid} is stopped (state T)"),
        || {
            thread_states(pid)
                .is_none_or(|states| states.iter().all(|s| matches!(s, 'T' | 'Z' | 'X')))
        },
    );
}

/// Waits until no thread of `pid` is stopped any more (after SIGCONT), or it is gone.
pub fn wait_continued(pid: u32) {
    wait_until(
        SIGNAL_TAKES_EFFECT,
        &format!("no thread of process {pid} is stopped (state T)"),
        || thread_states(pid).is_none_or(|states| !states.contains(&'T')),
    );
}

fn signal(pid: u32, sig: Signal) -> nix::Result<()> {
    kill(Pid::from_raw(pid as i32), sig)
}

/// Kills whatever journal-service processes recorded in `journal` are still alive (and
/// their process groups), checking their command line names that journal so that a
/// recycled pid is never hit.
pub fn kill_journal_services(journal: &Path) {
    let needle = journal.display().to_string();
    for run in Journal::read(journal) {
        if process_alive(run.pid) && process_cmdline(run.pid).is_some_and(|c| c.contains(&needle)) {
            let _ = kill(Pid::from_raw(-(run.pid as i32)), Signal::SIGKILL);
            let _ = signal(run.pid, Signal::SIGKILL);
        }
    }
}

/// Kills, when dropped, the processes whose pids a test's helper script wrote to `file`
/// (one per line) and that still run a command line containing `marker`: e.g. a fence
/// script that hangs in `sleep 600` while its warden is killed.
pub struct PidFileReaper {
    pub file: PathBuf,
    pub marker: String,
}

impl Drop for PidFileReaper {
    fn drop(&mut self) {
        let pids = fs::read_to_string(&self.file).unwrap_or_default();
        for pid in pids.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
            if process_alive(pid) && process_cmdline(pid).is_some_and(|c| c.contains(&self.marker))
            {
                let _ = signal(pid, Signal::SIGKILL);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Per-test registry of logs and journals, printed once when the test fails

#[derive(Default)]
struct Registry {
    logs: Vec<(String, PathBuf)>,
    journals: Vec<(String, PathBuf)>,
    dumped: bool,
}

thread_local! {
    static REGISTRY: RefCell<Registry> = RefCell::new(Registry::default());
}

/// Registers a log file to print when this test fails (once, however often registered).
pub fn register_log(label: &str, path: &Path) {
    REGISTRY.with(|r| {
        let logs = &mut r.borrow_mut().logs;
        if !logs.iter().any(|(_, p)| p == path) {
            logs.push((label.to_string(), path.to_path_buf()));
        }
    });
}

/// Registers a service journal to summarize when this test fails.
pub fn register_journal(label: &str, path: &Path) {
    REGISTRY.with(|r| {
        r.borrow_mut()
            .journals
            .push((label.to_string(), path.to_path_buf()))
    });
}

/// Prints the tail of every registered log and a summary of every journal to stderr
/// (captured by the test runner and shown for a failing test). Once per test.
pub fn dump_logs() {
    let Some((logs, journals)) = REGISTRY.with(|r| {
        let mut r = r.borrow_mut();
        let first = !r.dumped;
        r.dumped = true;
        first.then(|| (r.logs.clone(), r.journals.clone()))
    }) else {
        return;
    };
    for (label, path) in logs {
        let Ok(text) = fs::read_to_string(&path) else {
            continue;
        };
        let all = text.lines().count();
        let lines = collapse_repeats(text.lines());
        let skip = lines.len().saturating_sub(DUMP_TAIL_LINES);
        eprintln!(
            "\n======== {label}: {} ({all} lines{}{}) ========",
            path.display(),
            if lines.len() < all {
                ", repeats cut"
            } else {
                ""
            },
            if skip > 0 {
                format!(", last {DUMP_TAIL_LINES}")
            } else {
                String::new()
            }
        );
        for line in &lines[skip..] {
            eprintln!("{line}");
        }
    }
    for (label, path) in journals {
        if !path.exists() {
            continue;
        }
        eprintln!("\n======== journal {label}: {} ========", path.display());
        for run in Journal::read(&path) {
            eprintln!("{run}");
        }
    }
    eprintln!("\n======== now: mono {} ns ========", mono_now_ns());
}

/// The lines of a log with each run of repeats cut to its first line and a count: a line
/// repeats when, digits aside, it reads as one of the last few kept (a hook that fails
/// every 300 ms, a PostgreSQL that refuses each write with two lines). Without this the
/// last lines of a failing test's logs were all repeats, and what led to them was cut
/// (CI, stop 37: 300 lines of one refused standby-check).
pub fn collapse_repeats<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<String> {
    const WINDOW: usize = 4;
    let shape = |l: &str| -> String { l.chars().filter(|c| !c.is_ascii_digit()).collect() };
    let mut out = Vec::new();
    let mut recent: std::collections::VecDeque<String> = Default::default();
    let mut cut = 0usize;
    for line in lines {
        let s = shape(line);
        if recent.contains(&s) {
            cut += 1;
            continue;
        }
        if cut > 0 {
            out.push(format!("    [... {cut} lines like the ones above ...]"));
            cut = 0;
        }
        out.push(line.to_string());
        recent.push_back(s);
        if recent.len() > WINDOW {
            recent.pop_front();
        }
    }
    if cut > 0 {
        out.push(format!("    [... {cut} lines like the ones above ...]"));
    }
    out
}

/// Called from the `Drop` of every handle: a panicking test prints everything once.
fn dump_if_panicking() {
    if std::thread::panicking() {
        dump_logs();
    }
}

// ---------------------------------------------------------------------------------------
// Waiting

/// Polls `f` every 20ms until it is true; after `timeout` prints every log of the test and
/// panics naming `what`.
pub fn wait_until(timeout: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    loop {
        if f() {
            return;
        }
        if start.elapsed() >= timeout {
            dump_logs();
            panic!("timed out after {timeout:?} waiting until {what}");
        }
        std::thread::sleep(POLL);
    }
}

/// Polls `f` every `every` until it gives a value, for at most `timeout`; `None` after
/// that, for the caller to say what it means (where [`wait_for`] would panic).
pub fn poll_for<T>(
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() >= timeout {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// Like [`wait_until`], but `f` returns a value once the condition holds.
pub fn wait_for<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let mut found = None;
    wait_until(timeout, what, || {
        found = f();
        found.is_some()
    });
    found.expect("wait_until returned, so the value was found")
}

// ---------------------------------------------------------------------------------------
// ZooKeeper

const ZK_JAR: &str = "/usr/share/java/zookeeper.jar";
/// Without an slf4j binding the server logs nowhere; with this one it logs to stderr.
const SLF4J_SIMPLE_JAR: &str = "/usr/share/java/slf4j-simple.jar";
const ZK_CONF_DIR: &str = "/etc/zookeeper/conf";
pub const ZK_INSTALL: &str = "apt-get install -y zookeeper";

/// `java` with Debian's ZooKeeper on the classpath, tuned for a test server, its output
/// to `log`; the caller adds its own options, the main class and the config.
pub fn zookeeper_java(log: fs::File) -> Command {
    let mut classpath = format!("{ZK_CONF_DIR}:{ZK_JAR}");
    if Path::new(SLF4J_SIMPLE_JAR).exists() {
        classpath.push(':');
        classpath.push_str(SLF4J_SIMPLE_JAR);
    }
    let mut cmd = Command::new("java");
    cmd.args([
        // Startup speed over peak speed: a test server does little work.
        "-XX:TieredStopAtLevel=1",
        "-XX:+UseSerialGC",
        "-Xmx256m",
        "-Djava.net.preferIPv4Stack=true",
        "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
        // Every client that closes its socket (each `warden status`) logs a stack
        // trace here at WARN; it drowns the server's story in a failing test's dump.
        "-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.NIOServerCnxn=error",
        "-cp",
        &classpath,
    ])
    .stdin(Stdio::null())
    .stdout(log.try_clone().expect("clone the log handle"))
    .stderr(log);
    cmd
}

/// A standalone ZooKeeper server of Debian's `zookeeper` package, owned by the test.
pub struct ZkServer {
    server: ServerProcess,
    port: u16,
    /// `zoo.cfg` lines after the defaults (a later line overrides an earlier key).
    extra_config: String,
}

impl ZkServer {
    /// Starts a server on a free loopback port and waits until it accepts sessions.
    pub fn start() -> ZkServer {
        ZkServer::start_with_config("")
    }

    /// Like [`start`](Self::start), with `extra` appended to `zoo.cfg`: a key given there
    /// overrides the default (`maxSessionTimeout=2000`, say).
    pub fn start_with_config(extra: &str) -> ZkServer {
        check_zookeeper_installed();
        let dir = tempfile::Builder::new()
            .prefix("warden-zk-")
            .tempdir()
            .expect("create a temp dir");
        let mut zk = ZkServer {
            server: ServerProcess::new(dir, "zookeeper", "zookeeper.log"),
            port: 0,
            extra_config: extra.to_string(),
        };
        server::start_on_a_free_port("ZooKeeper", &mut zk, |zk, port| {
            zk.port = port;
            zk.write_config();
            zk.serve()
        });
        zk
    }

    /// `127.0.0.1:PORT`, for warden's `connect`.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.server.pid()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        self.server.log()
    }

    /// Sends a four-letter-word command (`ruok`, `srvr`, `mntr`) and returns the answer.
    pub fn four_letter(&self, cmd: &str) -> std::io::Result<String> {
        four_letter(self.port, cmd)
    }

    /// The server's last processed zxid (`srvr`'s `Zxid: 0x...`), while it serves.
    pub fn zxid(&self) -> Option<u64> {
        let srvr = self.four_letter("srvr").ok()?;
        let hex = srvr.lines().find_map(|l| l.strip_prefix("Zxid: 0x"))?;
        u64::from_str_radix(hex.trim(), 16).ok()
    }

    /// Whether the server answers `ruok` with `imok`.
    pub fn ruok(&self) -> bool {
        ruok(self.port)
    }

    /// SIGSTOP: the server keeps its sockets but answers nothing, as a hung or cut-off
    /// server does; its session clocks stop too. Returns once every thread is stopped.
    pub fn freeze(&mut self) {
        freeze_pid(self.pid().expect("freeze a running ZooKeeper"));
    }

    /// SIGCONT after [`freeze`](Self::freeze); returns once no thread is stopped.
    pub fn thaw(&mut self) {
        thaw_pid(self.pid().expect("thaw a running ZooKeeper"));
    }

    /// Kills the server (SIGKILL by pid) and waits for it; the data dir stays.
    pub fn stop(&mut self) {
        self.server.kill();
    }

    /// Starts the server again on the same port and data dir, and waits until it serves.
    pub fn restart(&mut self) {
        self.server.kill();
        if let Err(e) = self.serve() {
            e.fail(&format!("ZooKeeper did not restart on port {}", self.port));
        }
    }

    /// Killed and started again on the same port with an empty data dir: a server that
    /// lost everything (a new disk, a restore of nothing).
    pub fn restart_empty(&mut self) {
        self.server.kill();
        let data = self.server.dir().join("data");
        fs::remove_dir_all(&data).expect("remove the ZooKeeper data dir");
        fs::create_dir_all(&data).expect("create the ZooKeeper data dir");
        self.restart();
    }

    /// Whether the test started the server and has not stopped it since.
    pub fn is_running(&self) -> bool {
        self.server.started()
    }

    /// A consistent copy of the data dir as it is now, kept beside it for
    /// [`restore_data`](Self::restore_data). The server is frozen while it is copied: a
    /// stopped process is between system calls, so every write it made is whole in the
    /// copy (a snapshot and its transaction log as a backup of a running server has them),
    /// and it serves on as soon as it is thawed, its sessions alive.
    pub fn copy_data(&mut self) -> PathBuf {
        static COPIES: AtomicU32 = AtomicU32::new(0);
        let copy = self.server.dir().join(format!(
            "data.copy-{}",
            COPIES.fetch_add(1, Ordering::SeqCst)
        ));
        self.freeze();
        let out = run_bounded(
            "cp",
            &[
                "-a".to_string(),
                self.server.dir().join("data").display().to_string(),
                copy.display().to_string(),
            ],
            secs(30),
        );
        self.thaw();
        assert!(
            out.status.success(),
            "copying the ZooKeeper data dir: {}",
            describe(&out)
        );
        copy
    }

    /// The server restored from `copy` (a [`copy_data`](Self::copy_data)): stopped, its data
    /// dir replaced by the copy, started again on the same port. Everything written since
    /// the copy is forgotten, as by an ensemble restored from a backup.
    pub fn restore_data(&mut self, copy: &Path) {
        self.server.kill();
        let data = self.server.dir().join("data");
        fs::remove_dir_all(&data).expect("remove the ZooKeeper data dir");
        let out = run_bounded(
            "cp",
            &[
                "-a".to_string(),
                copy.display().to_string(),
                data.display().to_string(),
            ],
            secs(30),
        );
        assert!(
            out.status.success(),
            "restoring the ZooKeeper data dir: {}",
            describe(&out)
        );
        self.restart();
    }

    fn write_config(&self) {
        let data = self.server.dir().join("data");
        fs::create_dir_all(&data).expect("create the ZooKeeper data dir");
        // tickTime 100ms: sessions are checked every tick, so expiry is timely; the
        // session bounds let each test choose a short session_timeout. forceSync=no, as
        // the test PostgreSQL runs with fsync = off: the tests kill processes, never the
        // machine, so nothing written is lost without the fsync, and with it a burst of
        // another server's disk writes stalled this ZooKeeper's every write (CI, stop 37:
        // "fsync-ing the write ahead log took 2817ms" while a pg_rewind synced its data
        // dir), past the 1 s lease of a 2 s session: the active demoted as it must, and
        // the test, which has no systemd to start its killed server again, had no way on.
        let cfg = format!(
            "tickTime=100\n\
             forceSync=no\n\
             minSessionTimeout=200\n\
             maxSessionTimeout=60000\n\
             dataDir={}\n\
             clientPort={}\n\
             clientPortAddress=127.0.0.1\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=ruok,srvr,mntr,wchc,dump\n\
             maxClientCnxns=0\n\
             {}",
            data.display(),
            self.port,
            self.extra_config
        );
        fs::write(self.server.dir().join("zoo.cfg"), cfg).expect("write zoo.cfg");
    }

    /// Starts the server and waits until it is ready: it answers `ruok`, `srvr` says it
    /// serves, and a client session can be opened.
    fn serve(&mut self) -> Result<(), NotReady> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.server.log_path())
            .expect("open the ZooKeeper log");
        // (`spawn` points stdout and stderr at the same log again.)
        let mut cmd = zookeeper_java(log);
        cmd.arg("org.apache.zookeeper.server.ZooKeeperServerMain")
            .arg(self.server.dir().join("zoo.cfg"))
            .current_dir(self.server.dir());
        self.server.spawn(cmd, ZK_INSTALL);
        let port = self.port;
        let took = self.server.wait_ready(ZK_START_TIMEOUT, ms(50), || {
            ruok(port)
                && four_letter(port, "srvr").is_ok_and(|s| s.contains("Mode: standalone"))
                && ZkClient::try_connect(&format!("127.0.0.1:{port}"), secs(2)).is_ok()
        })?;
        eprintln!("zookeeper on port {port} serving after {took:?}");
        Ok(())
    }
}

/// Fails the test with the install command when java or ZooKeeper is missing.
pub fn check_zookeeper_installed() {
    let java = Command::new("java")
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !java.is_ok_and(|s| s.success()) {
        panic!("java is not installed (ZooKeeper needs it); install with: {ZK_INSTALL}");
    }
    if !Path::new(ZK_JAR).exists() {
        panic!("{ZK_JAR} is missing: ZooKeeper is not installed; install with: {ZK_INSTALL}");
    }
}

/// Whether the server on `port` answers `ruok` with `imok`.
fn ruok(port: u16) -> bool {
    four_letter(port, "ruok").is_ok_and(|a| a == "imok")
}

fn four_letter(port: u16, cmd: &str) -> std::io::Result<String> {
    let addr = ("127.0.0.1", port);
    let mut stream = TcpStream::connect_timeout(
        &std::net::ToSocketAddrs::to_socket_addrs(&addr)?
            .next()
            .expect("one address"),
        Duration::from_millis(500),
    )?;
    stream.set_read_timeout(Some(Duration::from_millis(1000)))?;
    stream.write_all(cmd.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// A small ZooKeeper client for tests that read or plant znodes (a garbage breadcrumb).
pub struct ZkClient {
    // Declared before the runtime: dropped first, closing the session while the runtime
    // still runs.
    client: zookeeper_client::Client,
    rt: tokio::runtime::Runtime,
}

impl ZkClient {
    /// Opens a session, panicking with the reason after 5s.
    pub fn connect(connect: &str) -> ZkClient {
        ZkClient::try_connect(connect, secs(5))
            .unwrap_or_else(|e| panic!("cannot open a ZooKeeper session to {connect}: {e}"))
    }

    pub fn try_connect(connect: &str, timeout: Duration) -> Result<ZkClient, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("build a tokio runtime");
        let client = rt
            .block_on(async {
                tokio::time::timeout(
                    timeout,
                    zookeeper_client::Client::connector()
                        .with_session_timeout(secs(10))
                        .with_connection_timeout(timeout)
                        .connect(connect),
                )
                .await
            })
            .map_err(|_| format!("no session after {timeout:?}"))?
            .map_err(|e| e.to_string())?;
        Ok(ZkClient { client, rt })
    }

    /// Writes `data` at `path`, creating it and its parents (persistent, open ACL).
    pub fn put(&self, path: &str, data: &[u8]) {
        use zookeeper_client::{Acls, CreateMode, Error};
        self.rt.block_on(async {
            let opts = CreateMode::Persistent.with_acls(Acls::anyone_all());
            if let Some((parent, _)) = path.rsplit_once('/') {
                if !parent.is_empty() {
                    match self.client.mkdir(parent, &opts).await {
                        Ok(()) | Err(Error::NodeExists) => {}
                        Err(e) => panic!("mkdir {parent}: {e}"),
                    }
                }
            }
            match self.client.create(path, data, &opts).await {
                Ok(_) => {}
                Err(Error::NodeExists) => {
                    self.client
                        .set_data(path, data, None)
                        .await
                        .unwrap_or_else(|e| panic!("set {path}: {e}"));
                }
                Err(e) => panic!("create {path}: {e}"),
            }
        })
    }

    /// The data of `path`, or `None` if it does not exist.
    pub fn get(&self, path: &str) -> Option<Vec<u8>> {
        self.rt.block_on(async {
            match self.client.get_data(path).await {
                Ok((data, _)) => Some(data),
                Err(zookeeper_client::Error::NoNode) => None,
                Err(e) => panic!("get {path}: {e}"),
            }
        })
    }

    /// The data version of `path` (how many times it was written since its creation), or
    /// `None` if it does not exist.
    pub fn version(&self, path: &str) -> Option<i32> {
        self.rt.block_on(async {
            match self.client.get_data(path).await {
                Ok((_, stat)) => Some(stat.version),
                Err(zookeeper_client::Error::NoNode) => None,
                Err(e) => panic!("get {path}: {e}"),
            }
        })
    }

    /// Deletes `path` (any version), as an operator's `zkCli delete` would.
    pub fn delete(&self, path: &str) {
        self.rt.block_on(async {
            self.client
                .delete(path, None)
                .await
                .unwrap_or_else(|e| panic!("delete {path}: {e}"))
        })
    }

    pub fn exists(&self, path: &str) -> bool {
        self.rt.block_on(async {
            self.client
                .check_stat(path)
                .await
                .unwrap_or_else(|e| panic!("stat {path}: {e}"))
                .is_some()
        })
    }

    /// Creates `path` EPHEMERAL with `data`, owned by this client's session (parents are
    /// created persistent, open ACL): a znode that lives exactly as long as the session.
    pub fn create_ephemeral(&self, path: &str, data: &[u8]) {
        use zookeeper_client::{Acls, CreateMode, Error};
        self.rt.block_on(async {
            if let Some((parent, _)) = path.rsplit_once('/') {
                let opts = CreateMode::Persistent.with_acls(Acls::anyone_all());
                match self.client.mkdir(parent, &opts).await {
                    Ok(()) | Err(Error::NodeExists) => {}
                    Err(e) => panic!("mkdir {parent}: {e}"),
                }
            }
            let opts = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
            self.client
                .create(path, data, &opts)
                .await
                .unwrap_or_else(|e| panic!("create {path} EPHEMERAL: {e}"));
        })
    }

    /// Closes the session (its ephemeral znodes go with it) and waits, up to 5s, until the
    /// client reports it closed.
    pub fn close(self) {
        use zookeeper_client::SessionState;
        let ZkClient { client, rt } = self;
        let mut states = client.state_watcher();
        // The session closes once its last client handle is dropped.
        drop(client);
        rt.block_on(async {
            let _ = tokio::time::timeout(secs(5), async {
                let mut state = states.peek_state();
                // A terminal state is final: `changed` would block forever after it.
                while !matches!(
                    state,
                    SessionState::Closed | SessionState::Expired | SessionState::AuthFailed
                ) {
                    state = states.changed().await;
                }
            })
            .await;
        });
    }

    /// The children of `path`, sorted; empty if it does not exist.
    pub fn children(&self, path: &str) -> Vec<String> {
        self.rt.block_on(async {
            match self.client.list_children(path).await {
                Ok(mut c) => {
                    c.sort();
                    c
                }
                Err(zookeeper_client::Error::NoNode) => Vec::new(),
                Err(e) => panic!("children of {path}: {e}"),
            }
        })
    }
}

// ---------------------------------------------------------------------------------------
// Clusters, nodes and their configs

static CLUSTER_SEQ: AtomicU32 = AtomicU32::new(0);

/// One election scope of a test: a temp dir holding each node's config, journal and log.
pub struct Cluster {
    /// `cluster.name`, unique per test.
    pub name: String,
    /// `coordination.zookeeper.connect`.
    pub connect: String,
    pub session_timeout: Duration,
    pub connect_timeout: Duration,
    pub rejoin_delay: Duration,
    pub stop_timeout: Duration,
    /// The `[coordination]` tables when the store is not ZooKeeper (see
    /// [`Cluster::with_mysql`]).
    pub coordination: Option<String>,
    dir: TempDir,
    nodes: RefCell<Vec<(String, PathBuf)>>,
}

/// Per-node choices of a test; the default is the journal service with no extra
/// arguments and the fence chain [`Cluster::recorder_fence`] + [`signal_fence`].
#[derive(Clone, Debug, Default)]
pub struct NodeOptions {
    /// Extra arguments of the journal service (`--exit-after 1s`, `--ignore-term`, ...).
    pub service_args: Vec<String>,
    /// `[[fence]]` tables replacing the default chain.
    pub fences: Option<Vec<String>>,
    /// TOML appended to the config as is (a `[health]` table, say).
    pub extra: String,
}

/// One node's files.
#[derive(Clone, Debug)]
pub struct Node {
    pub id: String,
    pub config: PathBuf,
    pub journal: PathBuf,
}

impl Cluster {
    /// A cluster on `zk` with the tests' short timeouts: session 2s (lease 1s, renewal
    /// every 333ms), connect 1s, rejoin 200ms, stop 500ms.
    pub fn new(zk: &ZkServer) -> Cluster {
        Cluster::with_connect(&zk.connect_string())
    }

    /// A cluster pointed at any connect string (a dead port, for "ZooKeeper down").
    pub fn with_connect(connect: &str) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("warden-test-")
            .tempdir()
            .expect("create a temp dir");
        let test = std::thread::current()
            .name()
            .unwrap_or("test")
            .rsplit("::")
            .next()
            .unwrap_or("test")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect::<String>();
        let short: String = test.chars().take(32).collect();
        let name = format!(
            "{short}-{}-{}",
            std::process::id(),
            CLUSTER_SEQ.fetch_add(1, Ordering::SeqCst)
        );
        Cluster {
            name,
            connect: connect.to_string(),
            session_timeout: secs(2),
            connect_timeout: secs(1),
            rejoin_delay: ms(200),
            stop_timeout: ms(500),
            coordination: None,
            dir,
            nodes: RefCell::new(Vec::new()),
        }
    }

    /// A cluster on a MariaDB server, with the tests' short timeouts (session 2s, polled
    /// every 100ms, connect 1s). Its tables exist once [`init`](Self::init) ran.
    pub fn with_mysql(db: &mariadb::MariaDb) -> Cluster {
        let mut c = Cluster::with_connect("127.0.0.1:1");
        c.use_mysql(db);
        c
    }

    pub fn with_redis(r: &redis::RedisServer) -> Cluster {
        let mut c = Cluster::with_connect("127.0.0.1:1");
        c.use_redis(r);
        c
    }

    /// Points the nodes written from now on at `r`, with this cluster's timeouts.
    pub fn use_redis(&mut self, r: &redis::RedisServer) {
        self.coordination = Some(format!(
            "[coordination]\nbackend = \"redis\"\n\n[coordination.redis]\nurl = {}\n\
             password_file = {}\nsession_timeout = {}\npoll_interval = \"100ms\"\n\
             connect_timeout = {}\n",
            toml_str(&r.url()),
            toml_str(&r.password_file().display().to_string()),
            toml_duration(self.session_timeout),
            toml_duration(self.connect_timeout),
        ));
    }

    /// Points the nodes written from now on at `db`, with this cluster's timeouts.
    pub fn use_mysql(&mut self, db: &mariadb::MariaDb) {
        self.use_mysql_at(db, &db.url());
    }

    /// Points the nodes written from now on at `db` through `url` (another port: a
    /// [`proxy::TcpProxy`] in front of it), with this cluster's timeouts.
    pub fn use_mysql_at(&mut self, db: &mariadb::MariaDb, url: &str) {
        let c = self;
        c.coordination = Some(format!(
            "[coordination]\nbackend = \"mysql\"\n\n[coordination.mysql]\nurl = {}\n\
             password_file = {}\nsession_timeout = {}\npoll_interval = \"100ms\"\n\
             connect_timeout = {}\n",
            toml_str(url),
            toml_str(&db.password_file().display().to_string()),
            toml_duration(c.session_timeout),
            toml_duration(c.connect_timeout),
        ));
    }

    /// The temp dir of this cluster.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The ZooKeeper path of a znode of this cluster (`breadcrumb`, `lock`, `members`).
    pub fn znode(&self, name: &str) -> String {
        format!("/warden/{}/{name}", self.name)
    }

    /// Writes the config of node `id` with the default options.
    pub fn node(&self, id: &str) -> Node {
        self.node_with(id, NodeOptions::default())
    }

    /// Writes the config of node `id`.
    pub fn node_with(&self, id: &str, opts: NodeOptions) -> Node {
        let config = self.dir().join(format!("{id}.toml"));
        let journal = self.dir().join(format!("{id}.journal"));
        let mut command = vec![
            JOURNAL_SERVICE.to_string(),
            "--journal".to_string(),
            journal.display().to_string(),
        ];
        command.extend(opts.service_args.iter().cloned());
        let fences = opts
            .fences
            .clone()
            .unwrap_or_else(|| vec![self.recorder_fence(), signal_fence()]);
        let text = format!(
            "# warden test config: node {id} of cluster {name}\n\
             [cluster]\n\
             name = {name_s}\n\
             node_id = {id_s}\n\
             host = \"127.0.0.1\"\n\
             \n\
             {coordination}\n\
             [election]\n\
             rejoin_delay = {rejoin}\n\
             \n\
             [service]\n\
             mode = \"spawn\"\n\
             command = {command}\n\
             stop_timeout = {stop}\n\
             \n\
             [health]\n\
             kind = \"none\"\n\
             \n\
             {fences}\n\
             {extra}\n",
            name = self.name,
            name_s = toml_str(&self.name),
            id_s = toml_str(id),
            coordination = self.coordination.clone().unwrap_or_else(|| format!(
                "[coordination]\nbackend = \"zookeeper\"\n\n[coordination.zookeeper]\n\
                 connect = {}\nsession_timeout = {}\nconnect_timeout = {}\n",
                toml_str(&self.connect),
                toml_duration(self.session_timeout),
                toml_duration(self.connect_timeout),
            )),
            rejoin = toml_duration(self.rejoin_delay),
            command = toml_array(&command),
            stop = toml_duration(self.stop_timeout),
            fences = fences.join("\n"),
            extra = opts.extra,
        );
        fs::write(&config, text).expect("write the node config");
        register_journal(id, &journal);
        self.nodes
            .borrow_mut()
            .push((id.to_string(), journal.clone()));
        Node {
            id: id.to_string(),
            config,
            journal,
        }
    }

    /// A `[[fence]]` script placed first in the default chain: it records who fenced whom
    /// (`<WARDEN_NODE_ID> <WARDEN_TARGET_NODE_ID>` in [`fence_calls`](Self::fence_calls))
    /// and fails, so the chain goes on to `signal`. An empty record proves that no fencing
    /// was attempted, whatever the logs say.
    pub fn recorder_fence(&self) -> String {
        self.recorder("fence-recorder.sh", 1)
    }

    /// A `[[fence]]` script that records its call as [`recorder_fence`](Self::recorder_fence)
    /// does and reports *fenced* (exit 0) without acting on anything: whatever keeps two
    /// services apart afterwards is warden's own doing (the old active's lease).
    pub fn no_op_fence(&self) -> String {
        self.recorder("fence-no-op.sh", 0)
    }

    fn recorder(&self, name: &str, exit_code: i32) -> String {
        let calls = self.dir().join("fence-calls");
        let script = self.script(
            name,
            &format!(
                "echo \"$WARDEN_NODE_ID $WARDEN_TARGET_NODE_ID\" >> {}\nexit {exit_code}\n",
                sh_quote(&calls.display().to_string())
            ),
        );
        script_fence(&[&script.display().to_string()], secs(2))
    }

    /// The lines of the recorder fence: one `<fencer> <target>` per fencing attempt.
    pub fn fence_calls(&self) -> Vec<String> {
        fs::read_to_string(self.dir().join("fence-calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Writes an executable `/bin/sh` script in the cluster's dir and returns its path.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.dir().join(name);
        fs::write(&path, format!("#!/bin/sh\n{body}")).expect("write a script");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod a script");
        path
    }

    /// Every run of every node's service so far.
    pub fn runs(&self) -> Vec<Run> {
        self.nodes
            .borrow()
            .iter()
            .flat_map(|(_, journal)| Journal::read(journal))
            .collect()
    }

    /// The safety proof from the services' own records: no two ran at once, and every
    /// promotion saw a greater epoch.
    /// Every epoch in the journals was handed to one node only (a re-promotion on the same
    /// node under the same lock keeps its epoch, and counts once).
    pub fn assert_no_epoch_twice(&self) {
        let runs = self.runs();
        let mut by_epoch: Vec<(u64, String)> = runs
            .iter()
            .filter_map(|r| Some((r.epoch?, r.node.clone())))
            .collect();
        by_epoch.sort();
        by_epoch.dedup();
        let mut epochs: Vec<u64> = by_epoch.iter().map(|(e, _)| *e).collect();
        epochs.dedup();
        assert_eq!(
            epochs.len(),
            by_epoch.len(),
            "an epoch was handed to two nodes: {runs:#?}"
        );
    }

    pub fn assert_safe(&self) {
        let runs = self.runs();
        assert_no_overlap(&runs);
        assert_epochs_grow(&runs);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        dump_if_panicking();
        for (_, journal) in self.nodes.borrow().iter() {
            kill_journal_services(journal);
        }
        keep_dir_if_failed(&mut self.dir);
    }
}

impl Node {
    /// Starts `warden -c <config> run` for this node.
    pub fn start(&self) -> Warden {
        let mut w = Warden::start(&self.config);
        w.journal = Some(self.journal.clone());
        w
    }

    /// Starts `warden -c <config> run` for this node under `uid` (and gid `uid`): the
    /// caller makes the config readable and the journal's dir writable for it.
    pub fn start_as(&self, uid: u32) -> Warden {
        let mut w = Warden::start_program_as(Path::new(WARDEN), &self.config, Some(uid));
        w.journal = Some(self.journal.clone());
        w
    }

    /// The runs of this node's service so far.
    pub fn runs(&self) -> Vec<Run> {
        Journal::read(&self.journal)
    }

    /// The latest run of this node's service, if any.
    pub fn last_run(&self) -> Option<Run> {
        self.runs().pop()
    }
}

/// `[[fence]] kind = "signal"` with a 3s timeout.
pub fn signal_fence() -> String {
    "[[fence]]\nkind = \"signal\"\nsignal = \"SIGKILL\"\ntimeout = \"3s\"\n".to_string()
}

/// `[[fence]] kind = "script"` (environment protocol) running `command`.
pub fn script_fence(command: &[&str], timeout: Duration) -> String {
    let command: Vec<String> = command.iter().map(|s| s.to_string()).collect();
    format!(
        "[[fence]]\nkind = \"script\"\ncommand = {}\ntimeout = {}\n",
        toml_array(&command),
        toml_duration(timeout)
    )
}

/// A node in hooks mode with the shipped hooks of an example (`examples/redis`,
/// `examples/postgresql`): `script promote|demote|follow|standby-check ENV_FILE`, the env
/// file written from `env`, `cluster.port` the service's port, fencing by signal through
/// the service's pidfile (after a recorder); `service.hook_timeout` and `health.interval`.
/// `examples/<name>/warden.toml` passes `check-config` once its hook script, which the
/// package installs as `/usr/lib/warden/<name>/<script>`, is the repository's copy.
pub fn assert_example_config_passes_check_config(name: &str, script: &str) {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name);
    let dir = tempfile::tempdir().unwrap();
    let text = fs::read_to_string(examples.join("warden.toml"))
        .unwrap()
        .replace(
            &format!("/usr/lib/warden/{name}/{script}"),
            &examples.join(script).display().to_string(),
        );
    let config = dir.path().join("warden.toml");
    fs::write(&config, text).unwrap();
    let out = cli(&config, &["check-config"]);
    assert!(out.status.success(), "{}", describe(&out));
}

/// Sets `[election] priority` in `node`'s config.
pub fn set_priority(node: &Node, priority: u16) {
    let text = fs::read_to_string(&node.config).unwrap();
    assert!(
        text.contains("[election]\n"),
        "no [election] in {}",
        node.config.display()
    );
    let text = text.replacen(
        "[election]\n",
        &format!("[election]\npriority = {priority}\n"),
        1,
    );
    fs::write(&node.config, text).unwrap();
}

pub fn example_hooks_node(
    cluster: &Cluster,
    id: &str,
    script: &Path,
    env: &str,
    port: u16,
    pidfile: &Path,
    (hook_timeout, interval): (&str, &str),
) -> Node {
    let node = cluster.node_with(
        id,
        NodeOptions {
            fences: Some(vec![cluster.recorder_fence(), signal_fence()]),
            ..Default::default()
        },
    );
    let env_file = cluster.dir().join(format!("{id}-hooks.env"));
    fs::write(&env_file, env).unwrap();
    let script = script.display().to_string();
    let env_file = env_file.display().to_string();
    let hook = |what: &str| toml_array(&[script.clone(), what.to_string(), env_file.clone()]);
    let text = fs::read_to_string(&node.config).unwrap();
    let start = text.find("[service]").unwrap();
    let end = text.find("[health]").unwrap();
    let service = format!(
        "[service]\nmode = \"hooks\"\npromote = {}\ndemote = {}\nfollow = {}\n\
         hook_timeout = \"{hook_timeout}\"\npidfile = {}\n\n",
        hook("promote"),
        hook("demote"),
        hook("follow"),
        toml_str(&pidfile.display().to_string()),
    );
    let health = format!(
        "[health]\nkind = \"none\"\nstandby_command = {}\ninterval = \"{interval}\"\nrise = 1\n\n",
        hook("standby-check")
    );
    let rest = text[end..].replacen("[health]\nkind = \"none\"\n", &health, 1);
    let text = format!("{}{service}{rest}", &text[..start]).replacen(
        "host = \"127.0.0.1\"\n",
        &format!("host = \"127.0.0.1\"\nport = {port}\n"),
        1,
    );
    fs::write(&node.config, text).unwrap();
    node
}

/// A TOML basic string.
pub fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

pub fn toml_array(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| toml_str(s)).collect();
    format!("[{}]", quoted.join(", "))
}

/// A duration as warden's config writes it: `"200ms"`, `"2s"`.
pub fn toml_duration(d: Duration) -> String {
    toml_str(&humantime::format_duration(d).to_string())
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

// ---------------------------------------------------------------------------------------
// warden processes and the CLI

/// One `warden -c CONFIG run` process, its output in a log file.
pub struct Warden {
    child: Child,
    pid: u32,
    config: PathBuf,
    log_path: PathBuf,
    label: String,
    journal: Option<PathBuf>,
    exit: Option<ExitStatus>,
}

impl Warden {
    /// Starts the daemon with `RUST_LOG=info` (or `$WARDEN_TEST_LOG`), stdout and stderr
    /// to `<config stem>.log` (`.2.log`, ... for later starts of the same config).
    pub fn start(config: &Path) -> Warden {
        Warden::start_program(Path::new(WARDEN), config)
    }

    /// Runs `<program> -c <config> run` as [`start`](Self::start) runs warden: the
    /// harness's self-tests use a stand-in program.
    pub fn start_program(program: &Path, config: &Path) -> Warden {
        Warden::start_program_as(program, config, None)
    }

    /// [`start_program`](Self::start_program), under `uid` (and gid `uid`) when given.
    pub fn start_program_as(program: &Path, config: &Path, uid: Option<u32>) -> Warden {
        let stem = config
            .file_stem()
            .expect("a config file name")
            .to_string_lossy()
            .to_string();
        let dir = config.parent().expect("a config dir");
        let (log_path, label) = (1..)
            .map(|n| {
                if n == 1 {
                    (dir.join(format!("{stem}.log")), format!("warden {stem}"))
                } else {
                    (
                        dir.join(format!("{stem}.{n}.log")),
                        format!("warden {stem} (start {n})"),
                    )
                }
            })
            .find(|(p, _)| !p.exists())
            .expect("some log name is free");
        let log = fs::File::create(&log_path).expect("create the warden log");
        register_log(&label, &log_path);
        let mut cmd = Command::new(program);
        cmd.arg("-c")
            .arg(config)
            .arg("run")
            .env(
                "RUST_LOG",
                std::env::var("WARDEN_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env_remove("WARDEN_CONFIG")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log handle"))
            .stderr(log);
        if let Some(uid) = uid {
            // std drops privileges before the pre_exec hook below runs, so the parent-death
            // signal (which a credential change clears) is set after it.
            cmd.uid(uid).gid(uid);
        }
        die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        Warden {
            pid: child.id(),
            child,
            config: config.to_path_buf(),
            log_path,
            label,
            journal: None,
            exit: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn config(&self) -> &Path {
        &self.config
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Everything the daemon printed so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Whether the log mentions `needle`, ignoring case.
    pub fn log_mentions(&self, needle: &str) -> bool {
        self.log().to_lowercase().contains(&needle.to_lowercase())
    }

    /// How many lines of the log mention `needle`, ignoring case.
    pub fn log_count(&self, needle: &str) -> usize {
        let needle = needle.to_lowercase();
        self.log()
            .lines()
            .filter(|l| l.to_lowercase().contains(&needle))
            .count()
    }

    /// Waits until the log mentions `needle` (ignoring case).
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) {
        wait_until(
            timeout,
            &format!("the log of {} mentions {needle:?}", self.label),
            || self.log_mentions(needle),
        );
    }

    pub fn signal(&self, sig: Signal) {
        signal(self.pid, sig).unwrap_or_else(|e| panic!("{sig} to {}: {e}", self.label));
    }

    pub fn kill9(&self) {
        self.signal(Signal::SIGKILL);
    }

    /// SIGSTOP; returns once the daemon is stopped (every thread), not merely signalled.
    pub fn sigstop(&self) {
        self.signal(Signal::SIGSTOP);
        wait_stopped(self.pid);
    }

    /// SIGCONT; returns once no thread of the daemon is stopped.
    pub fn sigcont(&self) {
        self.signal(Signal::SIGCONT);
        wait_continued(self.pid);
    }

    pub fn sigterm(&self) {
        self.signal(Signal::SIGTERM);
    }

    /// The exit status if the process has exited (reaping it).
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().expect("try_wait on warden");
        }
        self.exit
    }

    pub fn is_running(&mut self) -> bool {
        self.try_exit().is_none()
    }

    /// Waits for the process to exit; panics with every log after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let label = self.label.clone();
        wait_for(timeout, &format!("{label} exits"), || self.try_exit())
    }
}

impl Drop for Warden {
    fn drop(&mut self) {
        dump_if_panicking();
        if self.try_exit().is_none() {
            // SIGKILL ends a stopped (SIGSTOPped) daemon too; the SIGCONT is belt and braces.
            let _ = signal(self.pid, Signal::SIGKILL);
            let _ = signal(self.pid, Signal::SIGCONT);
            let _ = self.child.wait();
        }
        if let Some(journal) = &self.journal {
            kill_journal_services(journal);
        }
    }
}

/// Runs `warden -c CONFIG <args>` to completion under [`CLI_TIMEOUT`].
pub fn cli(config: &Path, args: &[&str]) -> Output {
    cli_with_timeout(config, args, CLI_TIMEOUT)
}

/// Runs `warden -c CONFIG <args>`; a command still running at `timeout` is killed and the
/// test fails with what it printed.
pub fn cli_with_timeout(config: &Path, args: &[&str], timeout: Duration) -> Output {
    let mut full = vec!["-c".to_string(), config.display().to_string()];
    full.extend(args.iter().map(|s| s.to_string()));
    run_bounded(WARDEN, &full, timeout)
}

/// Runs a shipped hook script's `demote` by itself (`script demote ENV_FILE`), as warden
/// runs it in a planned switchover to `n2` at 127.0.0.1:`port`, under `timeout`.
pub fn run_switchover_demote(
    script: &Path,
    env_file: &Path,
    port: u16,
    timeout: Duration,
) -> Output {
    run_switchover_demote_with(script, env_file, port, timeout, &[])
}

/// [`run_switchover_demote`] with variables of its own set (`TMPDIR`, `PATH`, ...).
pub fn run_switchover_demote_with(
    script: &Path,
    env_file: &Path,
    port: u16,
    timeout: Duration,
    vars: &[(&str, &Path)],
) -> Output {
    let mut args: Vec<String> = vars
        .iter()
        .map(|(k, v)| format!("{k}={}", v.display()))
        .collect();
    args.extend([
        "WARDEN_SUCCESSOR_NODE=n2".to_string(),
        "WARDEN_SUCCESSOR_HOST=127.0.0.1".to_string(),
        format!("WARDEN_SUCCESSOR_PORT={port}"),
        script.display().to_string(),
        "demote".to_string(),
        env_file.display().to_string(),
    ]);
    run_bounded("env", &args, timeout)
}

/// Runs a shipped hook script's `hook` (not `demote`) by itself (`script HOOK ENV_FILE`),
/// as warden runs it on a standby while `n1` at 127.0.0.1:`active_port` is the active,
/// under `timeout`.
pub fn run_standby_hook(
    script: &Path,
    hook: &str,
    env_file: &Path,
    active_port: u16,
    timeout: Duration,
) -> Output {
    let args = [
        "WARDEN_ACTIVE_NODE=n1".to_string(),
        "WARDEN_ACTIVE_HOST=127.0.0.1".to_string(),
        format!("WARDEN_ACTIVE_PORT={active_port}"),
        script.display().to_string(),
        hook.to_string(),
        env_file.display().to_string(),
    ];
    run_bounded("env", &args, timeout)
}

/// Asserts that `hook`, run with the setting `name='value'` in `env_file`, refused it:
/// exit 2 and one line on stderr that names the setting and the file.
pub fn assert_setting_refused(out: &Output, hook: &str, name: &str, value: &str, env_file: &Path) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(2)
            && stderr.lines().count() == 1
            && stderr.contains(&format!("{name}={value}"))
            && stderr.contains(&env_file.display().to_string()),
        "{hook} with {name}={value}: not refused in one line naming it and {}: {}",
        env_file.display(),
        describe(out)
    );
}

/// Runs `warden <args>` (no `-c`) under [`CLI_TIMEOUT`].
pub fn warden_cmd(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    run_bounded(WARDEN, &args, CLI_TIMEOUT)
}

/// Runs `program args` to completion; one still running at `timeout` is killed and the
/// test fails with what it printed.
pub fn run_bounded(program: &str, args: &[String], timeout: Duration) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_remove("RUST_LOG")
        .env_remove("WARDEN_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    die_with_parent(&mut cmd);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = out.read_to_end(&mut buf);
        buf
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = err.read_to_end(&mut buf);
        buf
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if start.elapsed() >= timeout {
            let _ = child.kill();
            let _ = child.wait();
            let stdout = out_reader.join().unwrap_or_default();
            let stderr = err_reader.join().unwrap_or_default();
            dump_logs();
            panic!(
                "`{program} {}` did not exit within {timeout:?}; killed.\nstdout:\n{}\nstderr:\n{}",
                args.join(" "),
                String::from_utf8_lossy(&stdout),
                String::from_utf8_lossy(&stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    }
}

/// A command's output as text, for assertion messages.
pub fn describe(out: &Output) -> String {
    format!(
        "exit: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `warden -c CONFIG status --json`, which must exit 0 and print one JSON object.
pub fn status_json(config: &Path) -> Value {
    try_status_json(config).unwrap_or_else(|e| {
        dump_logs();
        panic!("{e}")
    })
}

/// `status --json` as a value, or why not.
pub fn try_status_json(config: &Path) -> Result<Value, String> {
    let out = cli(config, &["status", "--json"]);
    if !out.status.success() {
        return Err(format!("`warden status --json` failed\n{}", describe(&out)));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "`warden status --json` printed no JSON object ({e})\n{}",
            describe(&out)
        )
    })
}

/// Polls `status --json` until `pred` holds; returns that status. On timeout the panic
/// shows the last status (or error) as well as every log.
pub fn wait_for_status(
    config: &Path,
    timeout: Duration,
    what: &str,
    mut pred: impl FnMut(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    let mut last;
    loop {
        let status = try_status_json(config);
        if let Ok(s) = &status {
            if pred(s) {
                return s.clone();
            }
        }
        last = match status {
            Ok(s) => serde_json::to_string_pretty(&s).unwrap_or_default(),
            Err(e) => e,
        };
        if start.elapsed() >= timeout {
            dump_logs();
            panic!("timed out after {timeout:?} waiting until {what}; last status:\n{last}");
        }
        std::thread::sleep(STATUS_POLL);
    }
}

/// Waits until `status --json` names an active node; returns its node id and epoch.
pub fn wait_for_active(config: &Path, timeout: Duration) -> (String, u64) {
    let s = wait_for_status(config, timeout, "status names an active node", |s| {
        active_id(s).is_some()
    });
    (
        active_id(&s).expect("checked"),
        active_epoch(&s).expect("an active node has an epoch"),
    )
}

/// Starts `first` and waits until it is active with its service running; then starts
/// `others` and waits until each reports `standby`. Returns the wardens, `first` first.
/// Starting one node first makes "who is active" deterministic.
pub fn start_active_then_standbys(first: &Node, others: &[&Node]) -> Vec<Warden> {
    let mut wardens = vec![first.start()];
    // A new session waits one session timeout before it joins (SPEC §3a; some tests run
    // the first node with a long one).
    wait_for_status(
        &first.config,
        secs(60),
        &format!("{} is active", first.id),
        |s| active_id(s).as_deref() == Some(first.id.as_str()),
    );
    wait_until(
        secs(10),
        &format!("the service of {} runs", first.id),
        || first.last_run().is_some_and(|r| process_alive(r.pid)),
    );
    wardens.extend(others.iter().map(|n| n.start()));
    wait_for_status(
        &first.config,
        secs(30),
        "the other nodes are standbys",
        |s| {
            others
                .iter()
                .all(|n| member_role(s, &n.id).as_deref() == Some("standby"))
        },
    );
    // A standby takes over only once its session has lived a session timeout (SPEC §3a).
    for w in &wardens[1..] {
        w.wait_for_log("this node may take the lock", secs(60));
    }
    wardens
}

/// SPEC §6b: waits (reading the cluster with `config`) until every view is settled for a
/// takeover by `advanced` rather than `lagging`: both healthy with positions published,
/// `advanced`'s at least `gap` ahead, `lagging` lets `advanced` try first (`after`), and
/// `advanced` lets nobody.
pub fn await_placed_first(config: &Path, lagging: &str, advanced: &str, gap: u64) {
    wait_for_status(
        config,
        secs(60),
        &format!("{lagging} lets {advanced}, at a greater position, try first"),
        |st| {
            let (Some(l), Some(a)) = (member(st, lagging), member(st, advanced)) else {
                return false;
            };
            let (lp, ap) = (json_u64(&l["position"]), json_u64(&a["position"]));
            lp.zip(ap).is_some_and(|(lp, ap)| ap >= lp + gap)
                && l["after"].as_str() == Some(advanced)
                && a["after"].is_null()
                && member_health(st, lagging).as_deref() == Some("healthy")
                && member_health(st, advanced).as_deref() == Some("healthy")
        },
    );
}

/// `active.node_id` of a status.
pub fn active_id(status: &Value) -> Option<String> {
    status["active"]["node_id"].as_str().map(str::to_string)
}

/// Sets `health.standby_command` to `check`, checked every 200 ms with a 2 s timeout.
pub fn with_standby_command(node: &Node, check: &Path) {
    let text = fs::read_to_string(&node.config).unwrap().replace(
        "[health]\nkind = \"none\"\n",
        &format!(
            "[health]\nkind = \"none\"\nstandby_command = [{}]\ninterval = \"200ms\"\n\
             timeout = \"2s\"\n",
            toml_str(&check.display().to_string())
        ),
    );
    fs::write(&node.config, text).unwrap();
}

/// Waits until `node`'s `status` shows the breadcrumb naming `node` at `epoch` again:
/// the active wrote back what the store forgot.
pub fn breadcrumb_back(node: &Node, epoch: Option<u64>) -> Value {
    wait_for_status(
        &node.config,
        secs(30),
        &format!("the breadcrumb names {} at epoch {epoch:?} again", node.id),
        |s| {
            s["breadcrumb"]["node_id"] == node.id.as_str()
                && json_u64(&s["breadcrumb"]["epoch"]) == epoch
        },
    )
}

/// `kill -9` of `active`'s warden (the active `node`), then `winner` starts and becomes
/// active, having fenced `node` first (its fence script's calls say so). Returns the
/// winner's warden.
pub fn killed_active_is_fenced(
    cluster: &Cluster,
    active: &mut Warden,
    node: &Node,
    winner: &Node,
) -> Warden {
    active.kill9();
    active.wait_exit(secs(5));
    let warden = winner.start();
    let (id, old) = (winner.id.as_str(), node.id.as_str());
    wait_for_status(&winner.config, secs(60), &format!("{id} is active"), |s| {
        active_id(s).as_deref() == Some(id)
    });
    assert!(
        cluster.fence_calls().contains(&format!("{id} {old}")),
        "{id} promoted without fencing {old}: {:?}",
        cluster.fence_calls()
    );
    cluster.assert_safe();
    warden
}

/// `active.epoch` of a status (a JSON number, or a decimal string).
pub fn active_epoch(status: &Value) -> Option<u64> {
    json_u64(&status["active"]["epoch"])
}

/// A number, or a decimal string (epochs are 64-bit; some writers quote them).
pub fn json_u64(v: &Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

/// The member record of `node` in a status.
pub fn member<'a>(status: &'a Value, node: &str) -> Option<&'a Value> {
    status["members"]
        .as_array()?
        .iter()
        .find(|m| m["node_id"] == node)
}

/// The role `node` reports in a status.
pub fn member_role(status: &Value, node: &str) -> Option<String> {
    member(status, node).and_then(|m| m["role"].as_str().map(str::to_string))
}

/// The health `node` reports in a status.
pub fn member_health(status: &Value, node: &str) -> Option<String> {
    member(status, node).and_then(|m| m["health"].as_str().map(str::to_string))
}

/// The node ids of the members in a status, sorted.
pub fn member_ids(status: &Value) -> Vec<String> {
    let mut ids: Vec<String> = status["members"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|m| m["node_id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

// ---------------------------------------------------------------------------------------
// Journals: the services' own records

/// One run of the journal service: from its `start` line to its last line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    /// `WARDEN_NODE_ID` as the service saw it (`-` if unset).
    pub node: String,
    pub pid: u32,
    /// `WARDEN_EPOCH` as the service saw it.
    pub epoch: Option<u64>,
    pub start_ns: u64,
    /// The last line's time: a run killed by SIGKILL died within one tick after it.
    pub last_ns: u64,
    pub ticks: usize,
    /// Whether it wrote `stop` (a SIGTERM it handled).
    pub stopped: bool,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "run node={} pid={} epoch={} start={} last={} ({:?}, {} ticks){}",
            self.node,
            self.pid,
            self.epoch
                .map(|e| e.to_string())
                .unwrap_or_else(|| "-".into()),
            self.start_ns,
            self.last_ns,
            ns(self.last_ns.saturating_sub(self.start_ns)),
            self.ticks,
            if self.stopped { " stopped" } else { "" }
        )
    }
}

/// Reader of the journal service's files.
pub struct Journal;

impl Journal {
    /// The runs recorded in `path`, in the order they started; none if it does not exist.
    /// Lines are attributed by their `pid=`, so runs that (wrongly) overlapped in one file
    /// are still told apart. An unfinished last line is ignored.
    pub fn read(path: &Path) -> Vec<Run> {
        let Ok(text) = fs::read_to_string(path) else {
            return Vec::new();
        };
        let complete = match text.rfind('\n') {
            Some(end) => &text[..=end],
            None => "",
        };
        let mut runs: Vec<Run> = Vec::new();
        for (n, line) in complete.lines().enumerate() {
            let mut words = line.split_whitespace();
            let kind = words
                .next()
                .unwrap_or_else(|| not_a_journal_line(path, n + 1, line));
            let at: u64 = words
                .next()
                .and_then(|w| w.parse().ok())
                .unwrap_or_else(|| not_a_journal_line(path, n + 1, line));
            let fields: Vec<(&str, &str)> = words.filter_map(|w| w.split_once('=')).collect();
            let field = |k: &str| fields.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
            let pid: Option<u32> = field("pid").and_then(|p| p.parse().ok());
            if kind == "start" {
                runs.push(Run {
                    node: field("node").unwrap_or("-").to_string(),
                    pid: pid.unwrap_or_else(|| not_a_journal_line(path, n + 1, line)),
                    epoch: field("epoch").and_then(|e| e.parse().ok()),
                    start_ns: at,
                    last_ns: at,
                    ticks: 0,
                    stopped: false,
                });
                continue;
            }
            let run = match pid {
                Some(pid) => runs.iter_mut().rev().find(|r| r.pid == pid),
                None => runs.last_mut(),
            }
            .unwrap_or_else(|| not_a_journal_line(path, n + 1, line));
            run.last_ns = run.last_ns.max(at);
            match kind {
                "tick" => run.ticks += 1,
                "stop" => run.stopped = true,
                _ => not_a_journal_line(path, n + 1, line),
            }
        }
        runs.sort_by_key(|r| r.start_ns);
        runs
    }
}

fn not_a_journal_line<T>(path: &Path, line_no: usize, line: &str) -> T {
    panic!("{}:{line_no}: not a journal line: {line:?}", path.display())
}

/// No two runs overlap in `[start_ns, last_ns]`: from the services' own records, two were
/// never active at once. (A SIGKILLed run's true end is up to one tick after its last
/// line; the tests check that the old process is gone where it matters.)
pub fn assert_no_overlap(runs: &[Run]) {
    let mut sorted: Vec<&Run> = runs.iter().collect();
    sorted.sort_by_key(|r| r.start_ns);
    // The run that ends last among those started so far: a later start must follow it.
    let mut latest: Option<&Run> = None;
    for run in sorted {
        match latest {
            Some(prev) if run.start_ns <= prev.last_ns => {
                dump_logs();
                panic!(
                    "two services ran at once:\n  {prev}\n  {run}\n(the second started {:?} \
                     before the first's last line)",
                    ns(prev.last_ns - run.start_ns)
                );
            }
            _ => latest = Some(run),
        }
    }
}

/// Runs ordered by start have strictly growing epochs; a run may keep its predecessor's
/// epoch only on the same node (a re-promotion under the same lock). Every run must have
/// seen `WARDEN_EPOCH`.
pub fn assert_epochs_grow(runs: &[Run]) {
    let mut sorted: Vec<&Run> = runs.iter().collect();
    sorted.sort_by_key(|r| r.start_ns);
    let mut report = String::new();
    for r in &sorted {
        let _ = writeln!(report, "  {r}");
    }
    for run in &sorted {
        if run.epoch.is_none() {
            dump_logs();
            panic!("a service did not get a decimal WARDEN_EPOCH:\n{report}");
        }
    }
    for pair in sorted.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let ok = b.epoch > a.epoch || (b.epoch == a.epoch && b.node == a.node);
        if !ok {
            dump_logs();
            panic!(
                "epochs did not grow from one promotion to the next ({} then {}):\n{report}",
                a.epoch.unwrap_or(0),
                b.epoch.unwrap_or(0)
            );
        }
    }
}

/// Checks `ok` every 20ms for the whole of `window` and fails the test the first time it
/// does not hold. This wait IS the assertion: "nothing happens for so long" can only be
/// shown by watching that long.
pub fn holds_for(window: Duration, what: &str, mut ok: impl FnMut() -> Result<(), String>) {
    let end = std::time::Instant::now() + window;
    loop {
        if let Err(why) = ok() {
            dump_logs();
            panic!("{what} stopped holding: {why}");
        }
        if std::time::Instant::now() >= end {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The exit code `main` gives a command's outcome (SPEC §7): 0, or the error's code.
pub fn exit_code<E: Into<warden::Error>>(outcome: Result<(), E>) -> i32 {
    outcome.map_or_else(|e| i32::from(e.into().exit_code()), |()| 0)
}
