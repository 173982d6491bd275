//! Shared by the fencing tests: real processes in their own process groups, waits with a
//! deadline, and a log capture. Nothing here is mocked.
#![allow(dead_code)] // each test binary uses a part of it

pub mod sshd;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use warden_fencing::process;
use warden_fencing::{FenceContext, Target};

/// How long a test waits for something that should happen at once (a process to start or
/// stop). Generous, because CI machines stall; a pass never waits this long.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A process started by `sh -c SCRIPT` at the head of its own process group. Dropping it
/// SIGKILLs the group and reaps the shell, so a failing test leaves nothing behind.
pub struct Group {
    pub child: Child,
    pub pid: u32,
}

impl Group {
    pub fn spawn(script: &str) -> Group {
        let child = Command::new("/bin/sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("spawn /bin/sh");
        let pid = child.id();
        Group { child, pid }
    }

    /// The shell's start time, as a record would carry it.
    pub fn start_time(&self) -> u64 {
        process::start_time(self.pid).expect("a just-spawned process has a start time")
    }

    /// Waits until the group has `n` live members (the shell's children have started).
    pub fn wait_members(&self, n: usize) -> Vec<u32> {
        wait_for(&format!("{n} live members in group {}", self.pid), || {
            let m = process::group_members(self.pid);
            (m.len() == n).then_some(m)
        })
    }

    /// Reaps the shell; it must have ended (tests call this after fencing).
    pub fn reap(&mut self) -> ExitStatus {
        self.child.wait().expect("wait for the shell")
    }

    /// Whether the shell is still alive (not exited), without reaping it.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.pid as i32), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// Freezes `g`'s shell with SIGSTOP, as a paused warden is, and waits until it is stopped.
pub fn stop(g: &Group) {
    nix::sys::signal::kill(Pid::from_raw(g.pid as i32), Signal::SIGSTOP).expect("SIGSTOP");
    wait_for("the process to stop", || {
        (process::stat(g.pid)?.state == 'T').then_some(())
    });
}

/// Asserts that fencing left nothing of `service` (whose live members were `members`) and
/// `warden` running, and that SIGKILL ended both shells. Checked at once, not eventually:
/// a method answers fenced only once verified. Our own children are zombies until reaped
/// here, and zombies count as gone.
pub fn assert_killed(service: &mut Group, members: Vec<u32>, warden: &mut Group) {
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(process::group_members(service.pid), Vec::<u32>::new());
    for pid in members {
        assert!(!process::is_running(pid, None), "pid {pid} survived");
    }
    assert!(!process::is_running(warden.pid, None));
    assert_eq!(service.reap().signal(), Some(libc::SIGKILL));
    assert_eq!(warden.reap().signal(), Some(libc::SIGKILL));
}

/// Polls `check` every 10ms until it yields a value; panics naming `what` after
/// [`PATIENCE`].
pub fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting for {what} after {PATIENCE:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Fails the test, naming the Debian package, when a tool it needs is missing.
pub fn require(path: &str, apt_package: &str) {
    assert!(
        Path::new(path).exists(),
        "{path} is missing; install it with: apt-get install -y {apt_package}"
    );
}

/// This host, as the fencing node sees it.
pub fn ctx() -> FenceContext {
    FenceContext {
        cluster: "rm".into(),
        node_id: "rm2".into(),
        host: "rm2.test".into(),
        boot_id: process::boot_id().expect("read this host's boot id"),
        machine_id: process::machine_id().expect("read this host's machine id"),
        pid_ns: process::pid_ns().expect("read this process's pid namespace"),
        pidfile: None,
    }
}

/// A target that ran on this host, on this boot, with no processes recorded yet.
pub fn local_target() -> Target {
    Target {
        node_id: Some("rm1".into()),
        host: Some("rm1.test".into()),
        port: Some(8032),
        boot_id: Some(process::boot_id().expect("read this host's boot id")),
        incarnation: Some("i-1".into()),
        epoch: Some(42),
        ..Target::default()
    }
}

/// A `tracing` subscriber that writes plain text into a shared buffer.
fn buffer_subscriber() -> (Arc<Mutex<Vec<u8>>>, impl tracing::Subscriber + Send + Sync) {
    #[derive(Clone)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("log buffer").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Arc::new(Mutex::new(Vec::new()));
    let writer = Buf(buf.clone());
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    (buf, subscriber)
}

/// Everything logged through `tracing` while the returned guard lives, on this thread
/// (tokio's current-thread test runtime runs spawned tasks here too).
pub fn capture_logs() -> (Arc<Mutex<Vec<u8>>>, tracing::subscriber::DefaultGuard) {
    let (buf, subscriber) = buffer_subscriber();
    (buf, tracing::subscriber::set_default(subscriber))
}

/// Everything logged through `tracing` by any thread of this test binary, from the first
/// call on. For binaries whose tests run log-producing work in parallel: scoped
/// subscribers ([`capture_logs`]) race with tracing's per-callsite interest cache there
/// and may miss events. Tests pick out their own lines by something unique to them (a
/// pid, a port). Do not mix it with [`capture_logs`] in one binary.
pub fn global_logs() -> Arc<Mutex<Vec<u8>>> {
    static BUF: std::sync::OnceLock<Arc<Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    BUF.get_or_init(|| {
        let (buf, subscriber) = buffer_subscriber();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global subscriber in this test binary");
        buf
    })
    .clone()
}

pub fn logs(buf: &Arc<Mutex<Vec<u8>>>) -> String {
    String::from_utf8_lossy(&buf.lock().expect("log buffer")).into_owned()
}
