//! Shared by the fencing tests: real processes in their own process groups, waits with a
//! deadline, and a log capture. Nothing here is mocked.
#![allow(dead_code)] // each test binary uses a part of it

/// The root crate's harness of a test's server process, which the sshd harness runs on.
#[path = "../../../tests/common/server.rs"]
pub mod server;
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

/// What `server.rs` takes from its parent. The root crate's tests print every registered
/// log when a test fails; the fencing tests have no such dump: the sshd harness prints its
/// own log from its `Drop` when a test fails.
fn register_log(_label: &str, _path: &Path) {}
fn dump_logs() {}

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

/// A target that ran on this machine, on this boot, in this pid namespace (SPEC §5: all
/// three identify "this host"), promoted (epoch 42), with no processes recorded yet.
pub fn local_target() -> Target {
    Target {
        node_id: Some("rm1".into()),
        host: Some("rm1.test".into()),
        port: Some(8032),
        boot_id: Some(process::boot_id().expect("read this host's boot id")),
        machine_id: Some(process::machine_id().expect("read this host's machine id")),
        pid_ns: Some(process::pid_ns().expect("read this process's pid namespace")),
        incarnation: Some("i-1".into()),
        epoch: Some(42),
        ..Target::default()
    }
}

/// A machine id that is not this host's.
pub fn other_machine_id() -> String {
    let mine = process::machine_id().expect("read this host's machine id");
    let other = if mine.starts_with('0') {
        "1".repeat(32)
    } else {
        "0".repeat(32)
    };
    assert_ne!(mine, other);
    other
}

/// A boot id that is not this boot's.
pub const OTHER_BOOT_ID: &str = "00000000-0000-4000-8000-000000000000";

/// A cgroup v2 of its own for one test, directly below the hierarchy's root. Dropping it
/// kills what is left in it, waits until it is empty and removes it. Needs root (the
/// tests run as root) and a cgroup2 mount.
pub struct TestCgroup {
    pub cgroup: warden_fencing::cgroup::Cgroup,
}

impl TestCgroup {
    pub fn create(name: &str) -> TestCgroup {
        use warden_fencing::cgroup::{self, Cgroup};
        let mount = cgroup::unified_mount().expect(
            "this host has no cgroup v2 hierarchy mounted; the cgroup tests need one \
             (mount -t cgroup2 none /sys/fs/cgroup)",
        );
        let relative = format!("/warden-test-{}-{name}", std::process::id());
        let cgroup = Cgroup::at(&mount, &relative).expect("a plain cgroup path");
        cgroup.create().unwrap_or_else(|e| {
            panic!(
                "cannot create the test cgroup {}: {e}; the cgroup tests run as root",
                cgroup.dir().display()
            )
        });
        TestCgroup { cgroup }
    }

    /// The path a record carries.
    pub fn relative(&self) -> String {
        self.cgroup.relative().to_string()
    }

    /// Shell code that moves the shell running it into this cgroup.
    pub fn enter(&self) -> String {
        format!("echo $$ > {}", self.cgroup.procs_file().display())
    }

    pub fn is_populated(&self) -> bool {
        self.cgroup.is_populated().expect("read cgroup.events")
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = self.cgroup.kill();
        let deadline = Instant::now() + PATIENCE;
        while self.cgroup.is_populated().unwrap_or(false) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Err(e) = self.cgroup.remove() {
            eprintln!(
                "could not remove the test cgroup {}: {e}",
                self.cgroup.dir().display()
            );
        }
    }
}

/// The pids whose parent is `ppid`.
pub fn children_of(ppid: u32) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .expect("read /proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&pid| process::stat(pid).is_some_and(|s| s.ppid == ppid && !s.is_exited()))
        .collect();
    pids.sort_unstable();
    pids
}

/// The pid of host process `pid` in its own (innermost) pid namespace: the last field of
/// `NSpid:` in `/proc/PID/status`.
pub fn pid_in_own_namespace(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .expect("an NSpid line")
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
