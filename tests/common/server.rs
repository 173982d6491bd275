//! One server process of a test: what the harnesses of the real servers (ZooKeeper,
//! MariaDB, Redis, PostgreSQL, sshd) share, so that each keeps only its config, its
//! readiness probe and its clients.
//!
//! A [`ServerProcess`] owns the server's temp dir and its log, registered for the failure
//! dump; it spawns the server to die with the test's thread, its output appended to the
//! log; waits until a probe says it answers, against a deadline; and kills it by pid (and
//! reaps it) when told to or when dropped, before the temp dir goes (kept with
//! `WARDEN_TEST_KEEP=1` when the test failed).
//!
//! The fencing crate's tests include this file too, for their sshd: it takes only
//! `register_log` and `dump_logs` from its parent module.

use super::{dump_logs, register_log};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fmt;
use std::fs;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// How many of the log's last lines a [`NotReady`] shows.
const TAIL_LINES: usize = 20;

/// How often [`ServerProcess::terminate`] looks whether the server has exited.
const EXIT_POLL: Duration = Duration::from_millis(20);

/// A server of a test: its temp dir, its log, and its process while it runs.
pub struct ServerProcess {
    dir: TempDir,
    log: PathBuf,
    /// The program last spawned, for messages.
    program: String,
    child: Option<Child>,
}

impl ServerProcess {
    /// A server not started yet, whose files are in `dir` and whose log is
    /// `dir/log_name`, registered under `label` for the failure dump.
    pub fn new(dir: TempDir, label: &str, log_name: &str) -> ServerProcess {
        let log = dir.path().join(log_name);
        register_log(label, &log);
        ServerProcess {
            dir,
            log,
            program: String::new(),
            child: None,
        }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Spawns `cmd` as [`spawn_logged`] does; `install` is the command that installs
    /// the program, for the failure when it cannot be run.
    pub fn spawn(&mut self, cmd: Command, install: &str) {
        assert!(self.child.is_none(), "{} already runs", self.program);
        self.program = cmd.get_program().to_string_lossy().into_owned();
        self.child = Some(spawn_logged(cmd, &self.log, install));
    }

    /// Polls `ready` every `every` until it is true, and returns how long that took; an
    /// error if the server exits first or `timeout` passes, after the server is killed.
    pub fn wait_ready(
        &mut self,
        timeout: Duration,
        every: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> Result<Duration, NotReady> {
        let start = Instant::now();
        let reason = loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                break format!("{} exited with {status} before it answered", self.program);
            }
            if ready() {
                return Ok(start.elapsed());
            }
            if start.elapsed() > timeout {
                break format!("{} did not answer within {timeout:?}", self.program);
            }
            std::thread::sleep(every);
        };
        self.kill();
        Err(NotReady {
            reason,
            log: self.log.clone(),
            text: self.log(),
        })
    }

    /// The server's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the test started the server and has not killed it since (it may have
    /// exited on its own).
    pub fn started(&self) -> bool {
        self.child.is_some()
    }

    /// Whether the server is down: never started, killed, or exited (which this reaps).
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| c.try_wait().ok().flatten().is_some())
    }

    /// SIGKILL by pid (after a SIGCONT, should it be frozen), and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, for the server to exit cleanly within `grace`; then [`kill`](Self::kill).
    pub fn terminate(&mut self, grace: Duration) {
        if let Some(child) = &mut self.child {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
            let deadline = Instant::now() + grace;
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(EXIT_POLL);
            }
        }
        self.kill();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            dump_logs();
        }
        self.kill();
        keep_dir_if_failed(&mut self.dir);
    }
}

/// A server that did not come up: why, and its log then.
#[derive(Debug)]
pub struct NotReady {
    reason: String,
    log: PathBuf,
    text: String,
}

impl NotReady {
    /// Whether the server's log says its port was taken: another test bound it between
    /// [`free_port`] and the server's bind.
    pub fn port_taken(&self) -> bool {
        self.text.contains("Address already in use")
    }

    /// Fails the test: every log of the test, then `what` and why.
    pub fn fail(self, what: &str) -> ! {
        dump_logs();
        panic!("{what}: {self}");
    }
}

impl fmt::Display for NotReady {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<&str> = self.text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(TAIL_LINES)..];
        write!(
            f,
            "{}; the last lines of {}:\n{}",
            self.reason,
            self.log.display(),
            tail.join("\n")
        )
    }
}

/// Runs `start(server, port)` on a free port, up to 5 times while the server's log says
/// the port was taken; fails the test, saying that `what` did not start, otherwise.
pub fn start_on_a_free_port<S>(
    what: &str,
    server: &mut S,
    mut start: impl FnMut(&mut S, u16) -> Result<(), NotReady>,
) {
    for attempt in 1..=5 {
        let port = free_port();
        match start(server, port) {
            Ok(()) => return,
            Err(e) if attempt < 5 && e.port_taken() => {
                eprintln!("{what}: port {port} was taken ({}), retrying", e.reason);
            }
            Err(e) => e.fail(&format!("{what} did not start")),
        }
    }
}

/// Spawns `cmd` with no stdin, its stdout and stderr appended to `log`, dying with the
/// test's thread; panics with `install` (the command that installs the program) when it
/// cannot be run.
pub fn spawn_logged(mut cmd: Command, log: &Path, install: &str) -> Child {
    let file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("open the log {}: {e}", log.display()));
    cmd.stdin(Stdio::null())
        .stdout(file.try_clone().expect("clone the log's handle"))
        .stderr(file);
    die_with_parent(&mut cmd);
    cmd.spawn().unwrap_or_else(|e| {
        panic!(
            "cannot run {} ({e}); install it with: {install}",
            cmd.get_program().to_string_lossy()
        )
    })
}

/// A loopback port free right now (another process may take it before use; callers that
/// bind it retry).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// Makes the child die with the thread that spawned it (the test's thread), so that a
/// test process killed outright leaves no server or daemon behind.
pub fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Keeps `dir` when the test failed and `WARDEN_TEST_KEEP` is set.
pub fn keep_dir_if_failed(dir: &mut TempDir) {
    if std::thread::panicking() && std::env::var_os("WARDEN_TEST_KEEP").is_some() {
        dir.disable_cleanup(true);
        eprintln!("WARDEN_TEST_KEEP: kept {}", dir.path().display());
    }
}
