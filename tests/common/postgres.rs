//! A PostgreSQL 15 server of Debian's `postgresql-15` package, owned by a test: its own
//! data directory in a temp dir, a free loopback port, trust authentication on loopback
//! (the tests are about roles, not passwords), `wal_log_hints` for `pg_rewind`. Started
//! and stopped with `pg_ctl` as the `postgres` user when the tests run as root
//! (PostgreSQL refuses to run as root), else as the user running them. Every node starts
//! as a standby (`standby.signal`), as the shipped systemd drop-in makes it: only warden
//! promotes. Stopped by its pid when dropped.

use super::server::{free_port, ServerProcess};
use nix::sys::signal::{kill, Signal};
use nix::unistd::{Pid, User};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = "/usr/lib/postgresql/15/bin";
pub const INSTALL: &str = "sudo apt-get install -y postgresql-15 (scripts/test.sh installs it)";

/// Fails the test, with the command that installs PostgreSQL 15, when it is missing.
pub fn check_postgres_installed() {
    for bin in [
        "postgres",
        "pg_ctl",
        "initdb",
        "pg_basebackup",
        "pg_rewind",
        "psql",
    ] {
        let path = Path::new(BIN).join(bin);
        assert!(
            path.exists(),
            "PostgreSQL 15 is not installed ({} is missing): {INSTALL}",
            path.display()
        );
    }
}

/// Who runs the servers: `postgres` when the tests run as root.
pub fn os_user() -> String {
    if nix::unistd::geteuid().is_root() {
        "postgres".to_string()
    } else {
        User::from_uid(nix::unistd::geteuid())
            .ok()
            .flatten()
            .map(|u| u.name)
            .expect("the current user has a name")
    }
}

/// A command run as [`os_user`], killed after 60 s (`pg_ctl` is given shorter waits of its
/// own; `initdb` and `pg_basebackup` of a new cluster take a few seconds).
fn as_pg(program: &str) -> Command {
    let mut c = Command::new("timeout");
    c.args(["--kill-after=5", "60"]);
    if nix::unistd::geteuid().is_root() {
        c.args([
            "setpriv",
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--reset-env",
        ]);
    }
    c.arg(program);
    c
}

/// The `postgres` user that Debian's package makes.
pub fn postgres_user() -> User {
    User::from_name("postgres")
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("no postgres user: {INSTALL}"))
}

/// Gives a path to [`os_user`] (the tests run as root create it).
pub fn give(path: &Path) {
    if nix::unistd::geteuid().is_root() {
        let pg = postgres_user();
        nix::unistd::chown(path, Some(pg.uid), Some(pg.gid)).expect("chown to postgres");
    }
}

fn run(mut c: Command, what: &str) -> Output {
    let out = c
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A PostgreSQL server. `pg_ctl` starts it, as the shipped hooks do: its
/// [`ServerProcess`] has its dir and its log but no child, and its pid is in its pidfile.
pub struct PgServer {
    server: ServerProcess,
    port: u16,
    /// What [`kill9`](Self::kill9) killed, for [`wait_gone`](Self::wait_gone).
    killed: std::sync::Mutex<Vec<u32>>,
}

impl PgServer {
    /// A new cluster (`initdb`), started as a primary so that replicas can be cloned from
    /// it; then [`restart_as_standby`](Self::restart_as_standby) makes it wait for warden.
    pub fn init() -> PgServer {
        let pg = PgServer::new_dir();
        let mut c = as_pg(&format!("{BIN}/initdb"));
        c.args(["-D", &pg.data().display().to_string()]).args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ]);
        run(c, "initdb");
        pg.configure(false);
        pg.start();
        pg
    }

    /// A fast stop, then a start as a standby.
    pub fn restart_as_standby(&self) {
        self.stop_fast();
        self.start_as_standby();
    }

    /// A start as a standby, as the shipped systemd drop-in starts it (`standby.signal`).
    pub fn start_as_standby(&self) {
        fs::write(self.data().join("standby.signal"), "").expect("write standby.signal");
        give(&self.data().join("standby.signal"));
        self.start();
    }

    /// A start as a standby as the drop-in makes it (`standby.signal`, then `pg_ctl
    /// start`), as systemd restarts a server that died; `Err` with what `pg_ctl` said when
    /// it did not come up (another start, a hook's, may have won the race).
    pub fn try_start_as_standby(&self) -> Result<(), String> {
        fs::write(self.data().join("standby.signal"), "").map_err(|e| e.to_string())?;
        give(&self.data().join("standby.signal"));
        let mut c = as_pg(&format!("{BIN}/pg_ctl"));
        c.args(["-D", &self.conf().display().to_string()])
            .args(["-l", &self.log_path().display().to_string()])
            .args(["-w", "-t", "30", "start"]);
        let out = c
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("pg_ctl start: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }

    pub fn stop_fast(&self) {
        let mut c = as_pg(&format!("{BIN}/pg_ctl"));
        c.args(["-D", &self.conf().display().to_string()])
            .args(["-m", "fast", "-w", "-t", "30", "stop"]);
        run(c, "pg_ctl stop -m fast");
    }

    /// A replica of `primary` (`pg_basebackup` with its WAL), started as its standby.
    pub fn clone_of(primary: &PgServer) -> PgServer {
        let pg = PgServer::new_dir();
        let mut c = as_pg(&format!("{BIN}/pg_basebackup"));
        c.args(["-h", "127.0.0.1", "-p", &primary.port.to_string()])
            .args(["-U", "postgres", "-X", "stream", "-R", "--no-sync"])
            .args(["-D", &pg.data().display().to_string()]);
        run(c, "pg_basebackup");
        pg.configure(true);
        pg.start();
        pg
    }

    /// A replica of `primary` cloned without its WAL (`pg_basebackup -X none`) and started,
    /// not waited for, as a standby of `upstream_port` (in the words the shipped hooks
    /// write, for a node without `WARDEN_NODE_ID`), where nothing answers: it stays in
    /// recovery, never consistent, and takes no connection ("the database system is not
    /// yet accepting connections"), as a standby whose upstream went away before it
    /// caught up does.
    pub fn stuck_clone_of(primary: &PgServer, upstream_port: u16) -> PgServer {
        let pg = PgServer::new_dir();
        let mut c = as_pg(&format!("{BIN}/pg_basebackup"));
        c.args(["-h", "127.0.0.1", "-p", &primary.port.to_string()])
            .args(["-U", "postgres", "-X", "none", "-c", "fast", "--no-sync"])
            .args(["-D", &pg.data().display().to_string()]);
        run(c, "pg_basebackup -X none");
        pg.configure(true);
        let auto = pg.data().join("postgresql.auto.conf");
        fs::write(
            &auto,
            format!(
                "primary_conninfo = 'host=127.0.0.1 port={upstream_port} user=postgres \
                 application_name=warden'\n"
            ),
        )
        .expect("write postgresql.auto.conf");
        give(&auto);
        let mut c = as_pg(&format!("{BIN}/pg_ctl"));
        c.args(["-D", &pg.conf().display().to_string()])
            .args(["-l", &pg.log_path().display().to_string()])
            .args(["-W", "start"]);
        run(c, "pg_ctl start -W");
        pg
    }

    /// Clones this stopped server again from the server at `primary_port` (its data
    /// moved aside, then `pg_basebackup` with its WAL) and starts it as its standby: what the
    /// recipe's README tells the operator to do with a node `pg_rewind` cannot bring back.
    /// `Err` with what failed.
    pub fn clone_again_from(&self, primary_port: u16) -> Result<(), String> {
        // The data that could not be rewound is kept beside (the last one only) for a look
        // afterwards.
        let d = self.data();
        let kept = self.server.dir().join("data.not-rewound");
        if kept.exists() {
            fs::remove_dir_all(&kept).map_err(|e| format!("remove {}: {e}", kept.display()))?;
        }
        if d.exists() {
            fs::rename(&d, &kept).map_err(|e| format!("move {} aside: {e}", d.display()))?;
        }
        let mut c = as_pg(&format!("{BIN}/pg_basebackup"));
        c.args(["-h", "127.0.0.1", "-p", &primary_port.to_string()])
            .args(["-U", "postgres", "-X", "stream", "-R", "--no-sync"])
            .args(["-D", &d.display().to_string()]);
        let out = c
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("pg_basebackup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "pg_basebackup: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        self.try_start_as_standby()
    }

    fn new_dir() -> PgServer {
        check_postgres_installed();
        let dir = tempfile::Builder::new()
            .prefix("warden-pg-")
            .tempdir()
            .expect("a temp dir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        give(dir.path());
        PgServer {
            server: ServerProcess::new(dir, "postgresql", "postgresql.log"),
            port: free_port(),
            killed: Default::default(),
        }
    }

    /// This server's configuration, apart from its data as Debian keeps it (so that
    /// `pg_rewind`, which copies the data directory's files from its source, leaves it
    /// alone): `postgresql.conf` and `pg_hba.conf` in [`conf`](Self::conf); and
    /// `standby.signal` for a standby.
    fn configure(&self, standby: bool) {
        fs::create_dir_all(self.conf()).expect("the config dir");
        give(&self.conf());
        let d = self.data();
        fs::write(
            self.conf().join("postgresql.conf"),
            format!(
                "data_directory = '{data}'\nhba_file = '{conf}/pg_hba.conf'\n\
                 ident_file = '{data}/pg_ident.conf'\nport = {port}\n\
                 listen_addresses = '127.0.0.1'\nunix_socket_directories = '{dir}'\n\
                 wal_level = replica\nwal_log_hints = on\nmax_wal_senders = 10\n\
                 hot_standby = on\nfsync = off\nwal_keep_size = '256MB'\n\
                 logging_collector = off\nmax_connections = 50\nshared_buffers = '16MB'\n\
                 dynamic_shared_memory_type = mmap\nlog_line_prefix = '%m [%p] '\n",
                data = d.display(),
                conf = self.conf().display(),
                port = self.port,
                dir = self.server.dir().display()
            ),
        )
        .expect("write postgresql.conf");
        fs::write(
            self.conf().join("pg_hba.conf"),
            "local all all trust\nhost all all 127.0.0.1/32 trust\n\
             host replication all 127.0.0.1/32 trust\n",
        )
        .expect("write pg_hba.conf");
        if standby {
            fs::write(d.join("standby.signal"), "").expect("write standby.signal");
            give(&d.join("standby.signal"));
        }
        for f in ["postgresql.conf", "pg_hba.conf"] {
            give(&self.conf().join(f));
        }
    }

    /// What `pg_ctl -D` is given: the configuration directory.
    pub fn conf(&self) -> PathBuf {
        self.server.dir().join("conf")
    }

    /// `pg_ctl start`; panics with the server's log when it does not come up.
    pub fn start(&self) {
        let mut c = as_pg(&format!("{BIN}/pg_ctl"));
        c.args(["-D", &self.conf().display().to_string()])
            .args(["-l", &self.log_path().display().to_string()])
            .args(["-w", "-t", "30", "start"]);
        let out = c.stdin(Stdio::null()).output().expect("pg_ctl start");
        assert!(
            out.status.success(),
            "pg_ctl start failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
    }

    pub fn data(&self) -> PathBuf {
        self.server.dir().join("data")
    }

    pub fn log_path(&self) -> PathBuf {
        self.server.log_path().to_path_buf()
    }

    pub fn log(&self) -> String {
        self.server.log()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The postmaster's pidfile.
    pub fn pidfile(&self) -> PathBuf {
        self.data().join("postmaster.pid")
    }

    /// The id of the server's System V segment (`ipcs -m`), while its pidfile is there:
    /// the second number on the pidfile's line 7.
    pub fn shmid(&self) -> Option<u32> {
        fs::read_to_string(self.pidfile())
            .ok()?
            .lines()
            .nth(6)?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    }

    /// The postmaster's pid, while its pidfile is there.
    pub fn pid(&self) -> Option<u32> {
        fs::read_to_string(self.pidfile())
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// One statement through `psql` on loopback, bounded to 5 s.
    pub fn try_sql(&self, sql: &str) -> Result<String, String> {
        sql_at(self.port, sql)
    }

    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql)
            .unwrap_or_else(|e| panic!("psql {sql:?} on port {} failed: {e}", self.port))
    }

    /// `pg_is_in_recovery()`: `Some(false)` for a primary; `None` when it does not answer.
    pub fn in_recovery(&self) -> Option<bool> {
        match self.try_sql("SELECT pg_is_in_recovery()").ok()?.as_str() {
            "t" => Some(true),
            "f" => Some(false),
            _ => None,
        }
    }

    /// Where its WAL receiver streams from (`host port`), if it streams.
    pub fn streams_from(&self) -> Option<String> {
        self.try_sql(
            "SELECT sender_host || ' ' || sender_port FROM pg_stat_wal_receiver \
             WHERE status = 'streaming'",
        )
        .ok()
        .filter(|s| !s.is_empty())
    }

    /// SIGKILL of the postmaster and of every process it started, as the crash of its
    /// machine would. (A postmaster killed alone leaves backends that hold its shared
    /// memory until they notice, and a start in that window fails: "pre-existing shared
    /// memory block is still in use".) [`wait_gone`](Self::wait_gone) waits for them.
    pub fn kill9(&self) {
        let pids = self.processes();
        for &pid in &pids {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
        self.killed.lock().expect("the killed pids").extend(pids);
    }

    /// Waits until nothing of the server runs: its port does not answer, and each process
    /// [`kill9`](Self::kill9) killed is gone or a zombie. A zombie postmaster (this
    /// sandbox's pid 1 reaps orphans late) still passes PostgreSQL's `kill(pid, 0)` test
    /// of `postmaster.pid`, and the next start would refuse ("lock file already exists"):
    /// its pid file is removed then, as nothing of that server runs.
    pub fn wait_gone(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        super::wait_until(timeout, "PostgreSQL no longer answers", || {
            self.try_sql("SELECT 1").is_err()
        });
        let killed = std::mem::take(&mut *self.killed.lock().expect("the killed pids"));
        super::wait_until(
            deadline.saturating_duration_since(Instant::now()),
            "the killed PostgreSQL's processes are gone (or zombies)",
            || {
                killed
                    .iter()
                    .all(|&pid| process_state(pid).is_none_or(|state| state == 'Z'))
            },
        );
        if let Some(pid) = self.pid() {
            if killed.contains(&pid) && process_state(pid) == Some('Z') {
                // Its segment's id is on that file's line 7: removed first, as the next
                // start, finding no pid file, would not (`harness.rs`).
                self.remove_leftover_shared_memory();
                let _ = fs::remove_file(self.pidfile());
            }
        }
    }

    /// The postmaster and every process it started: the server as a whole.
    pub fn processes(&self) -> Vec<u32> {
        let Some(postmaster) = self.pid() else {
            return Vec::new();
        };
        let mut pids = vec![postmaster];
        pids.extend(
            super::all_pids()
                .into_iter()
                .filter(|&pid| proc_stat(pid).is_some_and(|(_, _, ppid)| ppid == postmaster)),
        );
        pids
    }
}

/// A PostgreSQL process's state letter (`R`, `S`, `Z`, ...), or None when `pid` is gone
/// or is now another program's.
fn process_state(pid: u32) -> Option<char> {
    proc_stat(pid)
        .filter(|(comm, _, _)| comm == "postgres")
        .map(|(_, state, _)| state)
}

/// The command, state and parent of `pid` from `/proc/<pid>/stat`.
pub fn proc_stat(pid: u32) -> Option<(String, char, u32)> {
    // "pid (comm) state ppid ...": the command may hold spaces and parens.
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((comm, state, ppid))
}

/// One statement on the server at `port` on loopback, bounded to 5 s; the unaligned rows.
pub fn sql_at(port: u16, sql: &str) -> Result<String, String> {
    let out = Command::new("timeout")
        .args(["5", &format!("{BIN}/psql")])
        .args(["-X", "-Atq", "-v", "ON_ERROR_STOP=1"])
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-U", "postgres", "-d", "postgres", "-c", sql])
        .env("PGCONNECT_TIMEOUT", "2")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // Immediate: nothing to keep. Then the pid, should pg_ctl not answer.
        let mut c = as_pg(&format!("{BIN}/pg_ctl"));
        c.args(["-D", &self.conf().display().to_string()]).args([
            "-m",
            "immediate",
            "-w",
            "-t",
            "10",
            "stop",
        ]);
        let _ = c
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        self.kill9();
        self.remove_leftover_shared_memory();
    }
}

impl PgServer {
    /// A postmaster killed by a test (or fenced by warden) and never started again leaves
    /// its System V segment behind (`ipcs -m`: one per kill; the kernel's limit, `shmmni`,
    /// is 4096), which the next start in the same data dir would have removed. Its id is on
    /// line 7 of the pidfile, which only a clean stop removes. (The dynamic segments are
    /// files in the data dir, `dynamic_shared_memory_type = mmap`: they go with it.)
    fn remove_leftover_shared_memory(&self) {
        let Some(shmid) = self.shmid() else {
            return;
        };
        let _ = Command::new("ipcrm")
            .args(["-m", &shmid.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A client that keeps one connection, as applications do: one `psql` process fed
/// statements on its stdin (a `psql` per statement spends tens of milliseconds starting
/// and connecting, which would be measured as part of a switchover). Statements and the
/// markers between them share one output stream (stderr into stdout), so each answer is
/// read whole and in order.
pub struct PsqlSession {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    next: u64,
    /// Whether [`READY`] has been read (see [`ready`](Self::ready)).
    ready: bool,
}

/// What a new session's psql echoes once it is connected.
const READY: &str = "@@warden-test-connected";

impl PsqlSession {
    /// Starts `psql` for the server on `port`; `None` if it could not be started.
    pub fn connect(port: u16) -> Option<PsqlSession> {
        let mut child = Command::new("sh")
            .args([
                "-c",
                &format!(
                    "exec {BIN}/psql -X -At -h 127.0.0.1 -p {port} -U postgres -d postgres 2>&1"
                ),
            ])
            .env("PGCONNECT_TIMEOUT", "2")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let stdin = child.stdin.take()?;
        let stdout = child.stdout.take()?;
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut session = PsqlSession {
            child,
            stdin,
            lines,
            next: 0,
            ready: false,
        };
        // psql connects before it reads its input: this marker comes once it has.
        use std::io::Write;
        writeln!(session.stdin, "\\echo {READY}")
            .and_then(|()| session.stdin.flush())
            .ok()?;
        Some(session)
    }

    /// Whether the connection is made: `Some(true)` once psql said so, `Some(false)` when
    /// it failed (psql has exited), `None` while it is being made. Never waits, so that a
    /// client trying a server that is down is not held up by it.
    pub fn ready(&mut self) -> Option<bool> {
        use std::sync::mpsc::TryRecvError;
        while !self.ready {
            match self.lines.try_recv() {
                Ok(line) if line == READY => self.ready = true,
                Ok(_) => {}
                Err(TryRecvError::Empty) => return None,
                Err(TryRecvError::Disconnected) => return Some(false),
            }
        }
        Some(true)
    }

    /// Runs one statement; its output lines. `Err` when the server answered with an error,
    /// the session ended (psql exits when the connection is lost) or no answer came within
    /// `timeout`; then the session is unusable if [`alive`](Self::alive) says so.
    pub fn run(&mut self, sql: &str, timeout: Duration) -> Result<Vec<String>, String> {
        use std::io::Write;
        self.next += 1;
        let marker = format!("@@warden-test-{}", self.next);
        writeln!(self.stdin, "{sql};\n\\echo {marker}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("psql's stdin: {e}"))?;
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line == marker => break,
                Ok(line) if line == READY && !self.ready => self.ready = true,
                Ok(line) => out.push(line),
                Err(_) => {
                    let _ = self.child.kill();
                    return Err(format!("no answer within {timeout:?}: {out:?}"));
                }
            }
        }
        if out
            .iter()
            .any(|l| l.starts_with("ERROR:") || l.starts_with("FATAL:") || l.starts_with("psql:"))
        {
            Err(out.join("\n"))
        } else {
            Ok(out)
        }
    }

    /// Whether psql still runs (it exits when its connection is lost).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for PsqlSession {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
