//! The managed service (SPEC §6).
//!
//! Spawn mode: [`Spawner::prepare`] picks the cgroup of the next start (so that the
//! daemon can record it in the breadcrumb in the same write that commits the promotion),
//! and [`Spawner::start`] runs `service.command` as a child of warden in its own process
//! group and, where the cgroup v2 hierarchy is writable, in that fresh cgroup below
//! warden's, entered before exec so that no helper the service forks can start outside
//! it. A parent-death signal means the service never outlives warden. [`stop`] sends
//! `stop_signal` to every process of the service, SIGKILL after the grace, and reports it
//! stopped only when nothing of it remains, also when its main process had exited long
//! before; [`kill`] kills all of it at once (the lease end). Without a usable cgroup the
//! process group is all that holds the service ([`Containment::ProcessGroup`]): a helper
//! that calls `setsid()` or double-forks then escapes, and warden says so once.
//!
//! [`run_command`] runs a short external command under a hard timeout, killing its whole
//! process group when the time is up. Health `exec` checks and the hooks use it.
//!
//! Hooks mode: [`Hooks`] runs `promote` and `demote` with [`service_env`] plus
//! `WARDEN_ROLE`, and reads `service.pidfile`. [`Hooks::pin`] pins the service process
//! with its start time at promotion; [`Hooks::kill`] (a forced demotion whose hook failed)
//! signals only that process, and only while its start time still matches.
//!
//! Everything here is bounded in time. The longest call is [`stop`], at most `grace` +
//! [`KILL_WAIT`], and its polling runs on a blocking thread, never on a runtime worker.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tracing::{debug, info, warn};
use warden_fencing::cgroup::{self, Cgroup};
use warden_fencing::process::{self, FileKey};
use warden_fencing::SignalName;

use crate::config::ServiceConfig;

mod cgroups;
mod commands;
mod direct;
mod hooks;
mod spawn;
mod stop;

use cgroups::*;
pub use commands::*;
pub use hooks::*;
pub use spawn::*;
pub use stop::*;

/// How long fork + exec of the service may take, all attempts together (a start that
/// cannot enter its cgroup is tried again without it). It takes milliseconds; only a
/// wedged host (the binary on a hung network filesystem, memory exhausted) takes longer,
/// and a promotion must fail rather than hang on it.
const SPAWN_TIMEOUT: Duration = Duration::from_secs(5);

/// After SIGKILL the kernel ends a process group within milliseconds, except processes in
/// uninterruptible sleep (D state: a hung disk or NFS mount), which die only when the I/O
/// returns. Past this, [`stop`] reports what remains instead of waiting, so a demotion
/// always finishes and the driver can say which pids are stuck.
pub const KILL_WAIT: Duration = Duration::from_secs(5);

/// How often [`stop`] looks for remaining processes of the service (`cgroup.events`, or a
/// scan of `/proc` for the process group). It runs on a blocking thread, so this trades a
/// little CPU during a stop for a shorter failover.
const STOP_POLL: Duration = Duration::from_millis(20);

/// `/proc/PID/stat` of a just-forked child can be briefly unreadable on a loaded host.
/// We retry this many times, [`START_TIME_RETRY`] apart (at most ~100ms in all), before
/// giving up on a service whose identity we cannot record.
const START_TIME_ATTEMPTS: u32 = 50;
const START_TIME_RETRY: Duration = Duration::from_millis(2);

/// A service or command that prints an endless line must not grow warden's memory: longer
/// lines are logged in pieces of this size.
const MAX_LOG_LINE: u64 = 16 * 1024;

/// Environment variables that belong to warden's own supervisor (systemd notify and
/// watchdog). A child inheriting them could send `READY=1` or watchdog pings in warden's
/// name, so they are removed from every child's environment.
const SUPERVISOR_ENV: [&str; 3] = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];

/// Each start's cgroup is `<warden's cgroup>/warden-service-<epoch>-<random>`: a fresh
/// name per start, so that a leftover of an earlier start is never mixed in.
const SERVICE_CGROUP_PREFIX: &str = "warden-service-";

/// Set once clone3 into a cgroup is known not to work on this kernel (or under this
/// seccomp filter): every later start forks and moves the child instead.
static DIRECT_UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// The leaf cgroup warden moves itself into when its own cgroup may not hold processes
/// next to the service's (a delegated unit cgroup with controllers enabled: the kernel
/// then allows processes only in leaves). systemd's `DelegateSubgroup=supervisor` uses
/// the same name, so either way the service's cgroup is a sibling of warden's.
const SUPERVISOR_CGROUP: &str = "supervisor";

/// What an operator does when the service gets no cgroup of its own.
const CGROUP_FIX: &str = "run warden under systemd with Delegate=yes (packaging/warden.service \
     sets it), or as root, on a host with the cgroup v2 hierarchy";

/// Who the running service is: enough to find every process of it again, and to never
/// mistake a recycled pid for it. `start_time` is `/proc/PID/stat` field 22 (clock ticks
/// since boot).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceIdentity {
    pub pid: u32,
    /// The service's process group; in spawn mode the group it leads, so equal to `pid`.
    pub pgid: u32,
    pub start_time: u64,
    /// The service's own cgroup v2, relative to the hierarchy's root (as the breadcrumb
    /// records it in `service_cgroup`); `None` when its process group is all that holds
    /// it.
    pub cgroup: Option<String>,
}

/// Why the service could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    #[error("service.command is empty: set the program and its arguments to run in spawn mode")]
    NoCommand,
    #[error("cannot start {program}: {reason} (check service.command)")]
    Spawn { program: String, reason: String },
    #[error(
        "started {program} (pid {pid}) but could not read /proc/{pid}/stat to record its \
         identity; killed it so that it cannot run unrecorded (is /proc mounted?)"
    )]
    NoStartTime { program: String, pid: u32 },
    #[error(
        "starting {program} took longer than {}; the host may be overloaded or the binary \
         on a hung filesystem",
        humantime::format_duration(*timeout)
    )]
    SpawnTimeout { program: String, timeout: Duration },
    #[error("warden's process-starting thread is not available: {0}")]
    Starter(String),
    #[error("the service can only be started from within warden's tokio runtime")]
    NoRuntime,
}

/// Why a command run by [`run_command`] did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HookError {
    #[error("the command is empty; set a program and its arguments in the config")]
    Empty,
    #[error("cannot run {program}: {reason} (check the command in the config)")]
    Spawn { program: String, reason: String },
    #[error("{program} failed: {exit}{}", said.as_deref().map(|s| format!(" ({s})")).unwrap_or_default())]
    Failed {
        program: String,
        exit: Exit,
        /// The last line it wrote to stderr, if any: usually why.
        said: Option<String>,
    },
    #[error(
        "{program} did not finish within {}; killed its process group",
        humantime::format_duration(*timeout)
    )]
    TimedOut { program: String, timeout: Duration },
    #[error("waiting for {program} failed: {reason}; killed its process group")]
    Wait { program: String, reason: String },
}

/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this status code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
    /// Its status could not be learned (the reaper failed or the runtime is shutting down).
    Unknown(String),
}

impl Exit {
    /// Whether the process exited with status 0.
    pub fn success(&self) -> bool {
        matches!(self, Exit::Code(0))
    }
}

impl From<ExitStatus> for Exit {
    fn from(status: ExitStatus) -> Exit {
        match (status.code(), status.signal()) {
            (Some(code), _) => Exit::Code(code),
            (None, Some(sig)) => Exit::Signal(sig),
            // Neither code nor signal: only possible for a stopped/continued status,
            // which `wait` does not report; keep the raw value for the log.
            (None, None) => Exit::Unknown(format!("raw wait status {}", status.into_raw())),
        }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(code) => write!(f, "exit status {code}"),
            Exit::Signal(sig) => match Signal::try_from(*sig) {
                Ok(s) => write!(f, "killed by signal {sig} ({})", s.as_str()),
                Err(_) => write!(f, "killed by signal {sig}"),
            },
            Exit::Unknown(why) => write!(f, "unknown exit status ({why})"),
        }
    }
}

/// The service's main process ended: the leader of its group was reaped. Other processes
/// of the service may still run: [`stop`] ends them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitReport {
    pub identity: ServiceIdentity,
    pub exit: Exit,
    /// From the start to the reaping of the process.
    pub ran_for: Duration,
}

/// The result of [`stop`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopOutcome {
    /// No process of the service remains: its cgroup is unpopulated (without one: its
    /// process group is empty). `forced`: it took SIGKILL after the grace.
    Stopped { forced: bool, elapsed: Duration },
    /// These processes of the service were still alive [`KILL_WAIT`] after SIGKILL (stuck
    /// in uninterruptible sleep), or could not be signalled (EPERM).
    StillRunning { pids: Vec<u32> },
}

/// How the spawned service is held together, so that "down" means all of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Containment {
    /// Each start runs in a fresh cgroup below this one (relative to the hierarchy's
    /// root): a helper that calls `setsid()` or double-forks still belongs to the service.
    Cgroup(String),
    /// No cgroup of its own: the process group is all that holds the service, and a
    /// helper that leaves it (`setsid()`) escapes stop, kill and fencing. Why.
    ProcessGroup(String),
}

impl fmt::Display for Containment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Containment::Cgroup(base) => {
                write!(f, "cgroup (a fresh one below {base} for each start)")
            }
            Containment::ProcessGroup(why) => write!(f, "process group only: {why}"),
        }
    }
}

/// The variables every service process and hook receives (SPEC §6). Hooks add
/// `WARDEN_ROLE` for the transition they run; spawn mode sets `WARDEN_ROLE=active`.
pub fn service_env(cluster: &str, node_id: &str, epoch: u64) -> Vec<(String, String)> {
    vec![
        ("WARDEN_EPOCH".to_string(), epoch.to_string()),
        ("WARDEN_CLUSTER".to_string(), cluster.to_string()),
        ("WARDEN_NODE_ID".to_string(), node_id.to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_reads_like_a_sentence() {
        assert_eq!(Exit::Code(3).to_string(), "exit status 3");
        assert_eq!(Exit::Signal(9).to_string(), "killed by signal 9 (SIGKILL)");
        assert!(Exit::Code(0).success());
        assert!(!Exit::Signal(15).success());
    }

    #[tokio::test]
    async fn a_flooding_command_is_read_to_its_end_and_its_last_line_kept() {
        // 20,000 lines, one line of 100 KiB, then the last words without a newline.
        let mut input = "y\n".repeat(20_000).into_bytes();
        input.extend(std::iter::repeat_n(b'z', 100 * 1024));
        input.extend_from_slice(b"\nlast words\r");
        let (mut tx, rx) = tokio::io::duplex(4096);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            tx.write_all(&input).await.is_ok()
        });
        let last = forward_command_output(rx, "flood", Stream::Stderr).await;
        assert!(writer.await.unwrap(), "every byte was read");
        assert_eq!(last.as_deref(), Some("last words"));
    }

    #[test]
    fn the_tail_keeps_the_last_bytes_and_the_last_line_is_printable() {
        let mut tail = Vec::new();
        keep_tail(&mut tail, &[b'a'; 3 * COMMAND_TAIL_BYTES]);
        assert_eq!(tail.len(), COMMAND_TAIL_BYTES);
        keep_tail(&mut tail, b"\nend \x1b[31m\n\n  \n");
        assert_eq!(tail.len(), COMMAND_TAIL_BYTES);
        assert_eq!(last_line(&tail).as_deref(), Some("end \\u{1b}[31m"));
        assert_eq!(last_line(b"\n \n"), None);
    }

    #[test]
    fn io_reasons_are_short_and_lower_case() {
        let e = io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(io_reason(&e), "no such file or directory");
        let e = io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert_eq!(io_reason(&e), "connection refused");
    }

    #[test]
    fn warden_never_signals_its_own_group_or_everything() {
        let own = nix::unistd::getpgrp().as_raw() as u32;
        for pgid in [0, 1, own, u32::MAX] {
            let id = ServiceIdentity {
                pid: pgid,
                pgid,
                start_time: 0,
                cgroup: None,
            };
            assert_eq!(signal_group(&id, Signal::SIGCONT), Ok(false), "pgid {pgid}");
        }
    }

    #[test]
    fn warden_never_kills_itself_init_or_a_group_by_pidfile() {
        let me = std::process::id();
        let own_group = nix::unistd::getpgrp().as_raw() as u32;
        for pid in [0, 1, me, own_group, u32::MAX] {
            assert!(forbidden_pid(pid).is_some(), "pid {pid}");
            let pinned = PinnedService { pid, start_time: 0 };
            assert!(!kill_pinned(pinned, "test"), "pid {pid}");
        }
    }

    #[test]
    fn service_cgroups_are_children_of_warden_s() {
        assert_eq!(child_path("/", "x"), "/x");
        assert_eq!(
            child_path("/system.slice/warden.service", "x"),
            "/system.slice/warden.service/x"
        );
    }

    fn sleeper() -> ServiceConfig {
        ServiceConfig {
            mode: crate::config::ServiceMode::Spawn,
            command: vec!["/bin/sleep".into(), "300".into()],
            stop_signal: SignalName(Signal::SIGTERM),
            stop_timeout: Duration::from_secs(3),
            promote: Vec::new(),
            demote: Vec::new(),
            follow: Vec::new(),
            hook_timeout: Duration::from_secs(10),
            pidfile: None,
        }
    }

    /// The child's failure to enter its cgroup (here: its `cgroup.procs` is /dev/full, so
    /// the write in the child fails with ENOSPC after the parent opened it) reaches the
    /// parent as such, not as a failed exec: the service starts in its process group
    /// only, and the spawner says so from then on.
    #[tokio::test]
    async fn a_child_that_cannot_enter_its_cgroup_falls_back_to_the_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("fake");
        std::fs::create_dir(&fake).unwrap();
        std::os::unix::fs::symlink("/dev/full", fake.join("cgroup.procs")).unwrap();
        let spawner = Spawner::new(&sleeper(), "rm", "rm1").unwrap();
        let prepared = Prepared {
            epoch: 1,
            cgroup: Cgroup::at(dir.path(), "/fake"),
        };

        let svc = spawner.start(prepared).unwrap();
        let id = svc.identity();
        assert_eq!(id.cgroup, None);
        assert!(process::is_running(id.pid, Some(id.start_time)));
        match spawner.containment() {
            Containment::ProcessGroup(why) => assert!(
                why.contains("could not enter its cgroup") && why.contains("no space left"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            spawner.prepare(2).cgroup(),
            None,
            "a cgroup after the fallback"
        );
        let outcome = stop(id, SignalName(Signal::SIGTERM), Duration::from_secs(5)).await;
        assert!(
            matches!(outcome, StopOutcome::Stopped { .. }),
            "{outcome:?}"
        );
    }

    /// Restores this process's cgroup and removes a test cgroup tree, also when the
    /// test fails.
    struct CgroupScratch {
        home: Cgroup,
        root: Cgroup,
    }

    impl Drop for CgroupScratch {
        fn drop(&mut self) {
            let _ = self.home.add(std::process::id());
            let _ = self.root.kill();
            let deadline = Instant::now() + Duration::from_secs(5);
            while self.root.is_populated().unwrap_or(false) && Instant::now() < deadline {
                std::thread::sleep(STOP_POLL);
            }
            let _ = remove_tree(self.root.dir(), 0);
        }
    }

    /// The systemd case: warden's unit cgroup (delegated) must become an inner node with
    /// controllers for its services, which the kernel allows only once no process is in
    /// it. `enter_supervisor` moves warden into the leaf `<unit>/supervisor`; the service's
    /// cgroup is its sibling, and the unit can then enable controllers.
    #[tokio::test(flavor = "current_thread")]
    async fn warden_moves_into_a_supervisor_leaf_and_its_service_is_a_sibling() {
        let (Some(mount), Some(home)) = (cgroup::unified_mount(), cgroup::own()) else {
            eprintln!("skipped: no cgroup v2 hierarchy on this host");
            return;
        };
        let unit_path = format!("/warden-unit-test-{}", std::process::id());
        let (Some(unit), Some(home)) = (Cgroup::at(&mount, &unit_path), Cgroup::at(&mount, &home))
        else {
            panic!("not a cgroup path");
        };
        if let Err(e) = unit.create() {
            eprintln!("skipped: cannot create a cgroup ({})", io_reason(&e));
            return;
        }
        let _scratch = CgroupScratch {
            home,
            root: unit.clone(),
        };
        // Warden runs in its unit cgroup, as systemd starts it.
        unit.add(std::process::id()).unwrap();
        let controller = std::fs::read_to_string(unit.dir().join("cgroup.controllers"))
            .unwrap()
            .split_whitespace()
            .next()
            .map(str::to_string);
        let subtree = unit.dir().join("cgroup.subtree_control");
        if let Some(c) = &controller {
            let e = std::fs::write(&subtree, format!("+{c}")).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EBUSY), "{e}");
        }

        let config = sleeper();
        let spawner = Spawner::new(&config, "rm", "rm1").unwrap();
        assert_eq!(
            spawner.containment(),
            Containment::Cgroup(unit_path.clone())
        );
        assert!(spawner.enter_supervisor());
        assert_eq!(
            cgroup::own().as_deref(),
            Some(format!("{unit_path}/supervisor").as_str())
        );
        assert!(!spawner.enter_supervisor(), "moves only once");
        if let Some(c) = &controller {
            std::fs::write(&subtree, format!("+{c}")).unwrap();
        }

        let prepared = spawner.prepare(7);
        let path = prepared.cgroup().unwrap().to_string();
        assert!(
            path.starts_with(&format!("{unit_path}/{SERVICE_CGROUP_PREFIX}7-")),
            "{path}"
        );
        let svc = spawner.start(prepared).unwrap();
        let id = svc.identity();
        assert_eq!(id.cgroup.as_deref(), Some(path.as_str()));
        assert_eq!(cgroup::of_pid(id.pid).as_deref(), Some(path.as_str()));
        let outcome = stop(id, SignalName(Signal::SIGTERM), Duration::from_secs(5)).await;
        assert!(
            matches!(outcome, StopOutcome::Stopped { .. }),
            "{outcome:?}"
        );
        assert!(
            !Cgroup::at(&mount, &path).unwrap().exists(),
            "cgroup left behind"
        );
        // A spawner made by a warden that already runs in the leaf keeps the layout.
        let again = Spawner::new(&config, "rm", "rm1").unwrap();
        assert_eq!(again.containment(), Containment::Cgroup(unit_path));
        assert!(!again.enter_supervisor());
    }
}
