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
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
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

mod direct;

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

/// Starts the service of spawn mode: `service.command`, run directly (no shell). Clones
/// share what they learned about the cgroup hierarchy.
#[derive(Clone, Debug)]
pub struct Spawner {
    argv: Vec<String>,
    cluster: String,
    node_id: String,
    cgroups: Arc<Mutex<CgroupPlan>>,
}

/// Where the service's cgroups go.
#[derive(Debug)]
struct CgroupPlan {
    /// The cgroup v2 mount point and the cgroup below which each start's cgroup is made
    /// (warden's own when the spawner was made), or why the service runs in its process
    /// group only.
    base: Result<(PathBuf, String), String>,
    /// Warden runs in `<base>/supervisor`, a sibling of the service's cgroups.
    in_supervisor: bool,
}

/// A start made ready by [`Spawner::prepare`]: its epoch and the cgroup the service will
/// run in. Dropping it without starting removes the (empty) cgroup.
#[derive(Debug)]
pub struct Prepared {
    epoch: u64,
    cgroup: Option<Cgroup>,
}

impl Prepared {
    /// The epoch the service will get as `WARDEN_EPOCH`.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The service's cgroup, relative to the hierarchy's root: what the breadcrumb records
    /// as `service_cgroup` when it commits the promotion. `None`: process group only.
    /// Should the start fail to enter it and fall back to the process group, the
    /// [`ServiceIdentity`] of the start says so (its `cgroup` is `None`).
    pub fn cgroup(&self) -> Option<&str> {
        self.cgroup.as_ref().map(Cgroup::relative)
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if let Some(cgroup) = self.cgroup.take() {
            remove_cgroup(&cgroup);
        }
    }
}

/// Why one attempt to start the service failed.
enum Failure {
    /// The child could not enter its cgroup (before exec): try without.
    Enter(io::Error),
    /// Anything else: the start fails.
    Start(ServiceError),
}

impl Spawner {
    /// A spawner for `config.command`, passing `cluster` and `node_id` to the service.
    ///
    /// Finds warden's cgroup and checks, by making and removing a cgroup below it, that
    /// the service can get one of its own; if not, it says so once (warn, with the
    /// reason and the fix) and [`containment`](Self::containment) tells it.
    pub fn new(
        config: &ServiceConfig,
        cluster: &str,
        node_id: &str,
    ) -> Result<Spawner, ServiceError> {
        if config.command.is_empty() || config.command[0].is_empty() {
            return Err(ServiceError::NoCommand);
        }
        let plan = probe_cgroups();
        if let Err(why) = &plan.base {
            warn_process_group_only(why);
        }
        Ok(Spawner {
            argv: config.command.clone(),
            cluster: cluster.to_string(),
            node_id: node_id.to_string(),
            cgroups: Arc::new(Mutex::new(plan)),
        })
    }

    /// This spawner without cgroups: the service runs in its process group only. For
    /// tests, and to compare with a host that has no usable cgroup hierarchy.
    pub fn without_cgroup(self) -> Spawner {
        Spawner {
            cgroups: Arc::new(Mutex::new(CgroupPlan {
                base: Err("cgroup containment was turned off".to_string()),
                in_supervisor: false,
            })),
            ..self
        }
    }

    /// The program as named in the config (`service.command[0]`).
    pub fn program(&self) -> &str {
        &self.argv[0]
    }

    /// How the service is held together: a cgroup of its own per start, or only its
    /// process group and why (for `status` and the log).
    pub fn containment(&self) -> Containment {
        match &self.plan().base {
            Ok((_, base)) => Containment::Cgroup(base.clone()),
            Err(why) => Containment::ProcessGroup(why.clone()),
        }
    }

    /// Makes the next start ready: creates its cgroup,
    /// `<warden's cgroup>/warden-service-<epoch>-<random>`, so that its path can be
    /// recorded before the service exists. Without a usable cgroup hierarchy the start
    /// runs in its process group only (said once in the log). Takes a few system calls.
    pub fn prepare(&self, epoch: u64) -> Prepared {
        let mut plan = self.plan();
        let Ok((mount, base)) = &plan.base else {
            return Prepared {
                epoch,
                cgroup: None,
            };
        };
        // A fresh name: one already there (a leftover, however unlikely with 32 random
        // bits) would mix its processes into this start's.
        let path = std::iter::repeat_with(|| {
            let name = format!(
                "{SERVICE_CGROUP_PREFIX}{epoch}-{:08x}",
                rand::random::<u32>()
            );
            child_path(base, &name)
        })
        .take(8)
        .find(|p| !Cgroup::at(mount, p).is_some_and(|c| c.dir().exists()))
        .unwrap_or_default();
        let made = match Cgroup::at(mount, &path) {
            Some(cgroup) => cgroup.create().map(|()| cgroup).map_err(|e| {
                format!(
                    "cannot create the cgroup {}: {}",
                    mount.join(path.trim_start_matches('/')).display(),
                    io_reason(&e)
                )
            }),
            None => Err(format!("{path} is not a valid cgroup path")),
        };
        match made {
            Ok(cgroup) => Prepared {
                epoch,
                cgroup: Some(cgroup),
            },
            Err(why) => {
                plan.fall_back(why);
                Prepared {
                    epoch,
                    cgroup: None,
                }
            }
        }
    }

    /// Makes a restart within the same epoch ready in the cgroup the breadcrumb already
    /// names (`relative`), so that fencing finds the new copy where the record says it is.
    /// A restart only follows a stop that verified the cgroup empty; should it still hold
    /// processes, this refuses rather than mix a second copy into the first.
    pub fn prepare_again(&self, epoch: u64, relative: &str) -> Result<Prepared, String> {
        let plan = self.plan();
        let Ok((mount, _)) = &plan.base else {
            return Ok(Prepared {
                epoch,
                cgroup: None,
            });
        };
        let cgroup = Cgroup::at(mount, relative)
            .ok_or_else(|| format!("{relative} is not a valid cgroup path"))?;
        if cgroup.is_populated().unwrap_or(true) && cgroup.exists() {
            return Err(format!(
                "the service's cgroup {} still holds processes of an earlier start; not \
                 starting a second copy beside them",
                cgroup.dir().display()
            ));
        }
        cgroup.create().map_err(|e| {
            format!(
                "cannot create the cgroup {}: {}",
                cgroup.dir().display(),
                io_reason(&e)
            )
        })?;
        Ok(Prepared {
            epoch,
            cgroup: Some(cgroup),
        })
    }

    /// Starts the service prepared by [`prepare`](Self::prepare), with
    /// `WARDEN_EPOCH=epoch`, in its own process group and its cgroup (entered before
    /// exec), stdin null, stdout and stderr forwarded to the log, and SIGKILL as its
    /// parent-death signal.
    ///
    /// If the child cannot enter the cgroup: with EBUSY, warden moves itself into the
    /// leaf `<its cgroup>/supervisor` and tries once more (the service's cgroup is then a
    /// sibling, same path); otherwise, or if that fails too, it falls back to the process
    /// group for this and every later start, says so once, and the identity returned has
    /// no cgroup.
    ///
    /// Must be called from within warden's tokio runtime (the exit reaper and the output
    /// forwarders are tasks on it). It blocks the calling thread for the fork + exec only,
    /// at most [`SPAWN_TIMEOUT`] in all.
    ///
    /// The parent-death signal fires when the *thread* that forked exits, not the
    /// process. So the fork does not happen on the calling thread (a `spawn_blocking`
    /// thread or a runtime worker that may later retire would kill the service when it
    /// ends): it happens on one dedicated thread that lives as long as warden. Calling
    /// `start` from any thread, `spawn_blocking` included, is therefore safe.
    pub fn start(&self, mut prepared: Prepared) -> Result<RunningService, ServiceError> {
        let handle = Handle::try_current().map_err(|_| ServiceError::NoRuntime)?;
        let epoch = prepared.epoch;
        let program = self.argv[0].clone();
        let name = program_name(&program);
        let started_at = Instant::now();
        let deadline = started_at + SPAWN_TIMEOUT;
        let mut cgroup = prepared.cgroup.take();
        let spawned = loop {
            match self.spawn_once(epoch, cgroup.as_ref(), &handle, deadline) {
                Ok(spawned) => break spawned,
                Err(Failure::Enter(e)) => {
                    // Only a start with a cgroup fails this way, so this loop runs at
                    // most three times: the supervisor retry, then without a cgroup.
                    if let Some(c) = cgroup.take() {
                        if e.raw_os_error() == Some(libc::EBUSY) && self.enter_supervisor() {
                            cgroup = Some(c);
                            continue;
                        }
                        self.plan().fall_back(format!(
                            "the service could not enter its cgroup {}: {}",
                            c.dir().display(),
                            io_reason(&e)
                        ));
                        remove_cgroup(&c);
                    }
                }
                Err(Failure::Start(e)) => {
                    if let Some(c) = cgroup.take() {
                        remove_cgroup(&c);
                    }
                    return Err(e);
                }
            }
        };
        let mut child = spawned.child;
        let pid = spawned.pid;
        let Some(start_time) = spawned.start_time else {
            // Without a start time the service could not be fenced safely later.
            if let Some(c) = &cgroup {
                let _ = c.kill();
            }
            if pid > 1 {
                let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
            return Err(ServiceError::NoStartTime { program, pid });
        };
        let identity = ServiceIdentity {
            pid,
            pgid: pid,
            start_time,
            cgroup: cgroup.as_ref().map(|c| c.relative().to_string()),
        };
        info!(service = %name, pid, epoch, cgroup = identity.cgroup.as_deref().unwrap_or("-"),
            "service started");

        child.forward_output(&name);

        let (tx, rx) = oneshot::channel();
        let reported = identity.clone();
        tokio::spawn(async move {
            let exit = match child.wait().await {
                Ok(status) => Exit::from(status),
                Err(e) => Exit::Unknown(format!("waiting for it failed: {}", io_reason(&e))),
            };
            let ran_for = started_at.elapsed();
            info!(service = %name, pid, %exit, ran_for_ms = ran_for.as_millis() as u64,
                "service process exited");
            // The receiver may be gone (the driver dropped the RunningService); the
            // report then has no reader, which is fine.
            let _ = tx.send(ExitReport {
                identity: reported,
                exit,
                ran_for,
            });
        });

        Ok(RunningService {
            identity,
            exit: rx,
            report: None,
        })
    }

    /// What the service of `epoch` gets added to warden's environment (both ways of
    /// starting it remove [`SUPERVISOR_ENV`] too).
    fn env(&self, epoch: u64) -> Vec<(String, String)> {
        let mut env = service_env(&self.cluster, &self.node_id, epoch);
        env.push(("WARDEN_ROLE".to_string(), "active".to_string()));
        env
    }

    /// The service's command, without the steps between fork and exec.
    fn command(&self, epoch: u64) -> Command {
        let mut command = Command::new(&self.argv[0]);
        command
            .args(&self.argv[1..])
            .envs(self.env(epoch))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for var in SUPERVISOR_ENV {
            command.env_remove(var);
        }
        command
    }

    /// The start of `epoch` for clone3 into `cgroup`, or `None` where that is known not
    /// to work (or the program is not found: the fork path says so in std's words).
    fn direct_plan(&self, epoch: u64, cgroup: &Cgroup) -> Option<direct::Plan> {
        if DIRECT_UNSUPPORTED.load(Ordering::Relaxed) {
            return None;
        }
        let mut env: Vec<(Vec<u8>, Vec<u8>)> = self
            .env(epoch)
            .into_iter()
            .map(|(k, v)| (k.into_bytes(), v.into_bytes()))
            .collect();
        let ours: Vec<Vec<u8>> = env.iter().map(|(k, _)| k.clone()).collect();
        env.extend(
            std::env::vars_os()
                .map(|(k, v)| (k.into_vec(), v.into_vec()))
                .filter(|(k, _)| {
                    !ours.contains(k) && !SUPERVISOR_ENV.iter().any(|s| s.as_bytes() == k)
                }),
        );
        match direct::Plan::new(&self.argv, env, cgroup.dir()) {
            Ok(plan) => plan,
            Err(e) => {
                debug!(error = %io_reason(&e), "cannot open the service's cgroup for clone3");
                None
            }
        }
    }

    /// One start: clone3 into `cgroup` where the kernel offers it, else fork + exec,
    /// entering `cgroup` in the child before exec.
    fn spawn_once(
        &self,
        epoch: u64,
        cgroup: Option<&Cgroup>,
        handle: &Handle,
        deadline: Instant,
    ) -> Result<starter::Spawned, Failure> {
        let program = &self.argv[0];
        let spawn_error = |reason: String| {
            Failure::Start(ServiceError::Spawn {
                program: program.clone(),
                reason,
            })
        };
        let timed_out = || {
            Failure::Start(ServiceError::SpawnTimeout {
                program: program.clone(),
                timeout: SPAWN_TIMEOUT,
            })
        };
        // Into a cgroup, clone3 creates the child there (no migration, see `direct`);
        // should the kernel refuse, the fork below moves the child and tells why.
        if let Some(plan) = cgroup.and_then(|c| self.direct_plan(epoch, c)) {
            let timeout = deadline.saturating_duration_since(Instant::now());
            if timeout.is_zero() {
                return Err(timed_out());
            }
            match starter::spawn(starter::Job::Direct(plan), handle.clone(), timeout) {
                Ok(spawned) => return Ok(spawned),
                Err(starter::Error::Clone { error, unsupported }) => {
                    if unsupported {
                        DIRECT_UNSUPPORTED.store(true, Ordering::Relaxed);
                    }
                    debug!(error = %io_reason(&error), unsupported,
                        "clone3 into the service's cgroup failed; forking and moving instead");
                }
                Err(starter::Error::Io(e)) => return Err(spawn_error(io_reason(&e))),
                Err(starter::Error::Timeout) => return Err(timed_out()),
                Err(starter::Error::Unavailable(why)) => {
                    return Err(Failure::Start(ServiceError::Starter(why)))
                }
            }
        }
        let mut command = self.command(epoch);
        // The cgroup's `cgroup.procs` is opened here (a file opened by std is
        // close-on-exec, so the service never inherits it), and the child writes "0" to
        // it before exec: it moves itself, so nothing it forks can start outside. If the
        // write fails, the child reports its errno on `entry_errors` before failing the
        // exec, which tells that failure apart from one of the exec itself.
        let mut entry_errors = None;
        let entry = match cgroup {
            None => None,
            Some(c) => {
                let procs = File::options()
                    .write(true)
                    .open(c.procs_file())
                    .map_err(Failure::Enter)?;
                let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)
                    .map_err(|e| spawn_error(format!("cannot make a pipe: {}", e.desc())))?;
                entry_errors = Some(read);
                Some((procs, write))
            }
        };
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the closure runs in the child between fork and exec, where only
        // async-signal-safe calls are allowed: write, prctl, getppid and _exit are plain
        // system calls, and the error paths build an io::Error from errno without
        // allocating. The descriptors it uses are owned by the closure, which the
        // command keeps alive until the fork is done.
        unsafe {
            command.pre_exec(move || {
                if let Some((procs, errors)) = &entry {
                    enter_cgroup(procs.as_raw_fd(), errors.as_raw_fd())?;
                }
                close_inherited_on_exec();
                set_parent_death_signal(parent)
            });
        }
        let timeout = deadline.saturating_duration_since(Instant::now());
        if timeout.is_zero() {
            return Err(timed_out());
        }
        starter::spawn(starter::Job::Command(command), handle.clone(), timeout).map_err(|e| match e
        {
            starter::Error::Io(e) | starter::Error::Clone { error: e, .. } => {
                match entry_errors.as_ref().and_then(read_entry_error) {
                    Some(errno) => Failure::Enter(io::Error::from_raw_os_error(errno)),
                    None => spawn_error(io_reason(&e)),
                }
            }
            starter::Error::Timeout => timed_out(),
            starter::Error::Unavailable(why) => Failure::Start(ServiceError::Starter(why)),
        })
    }

    /// Moves warden into `<base>/supervisor`, so that its own cgroup holds no process and
    /// the service's cgroup can be its child. Once only; true if it moved.
    fn enter_supervisor(&self) -> bool {
        let mut plan = self.plan();
        if plan.in_supervisor {
            return false;
        }
        let Ok((mount, base)) = &plan.base else {
            return false;
        };
        let Some(supervisor) = Cgroup::at(mount, &child_path(base, SUPERVISOR_CGROUP)) else {
            return false;
        };
        match supervisor
            .create()
            .and_then(|()| supervisor.add(std::process::id()))
        {
            Ok(()) => {
                info!(
                    cgroup = supervisor.relative(),
                    "moved warden into a leaf cgroup of its own: its cgroup {base} may not \
                     hold processes next to the service's (controllers are enabled in it)"
                );
                plan.in_supervisor = true;
                true
            }
            Err(e) => {
                warn!(cgroup = supervisor.relative(), error = %io_reason(&e),
                    "cannot move warden into a leaf cgroup of its own");
                false
            }
        }
    }

    fn plan(&self) -> MutexGuard<'_, CgroupPlan> {
        // A poisoned lock only means another caller panicked while holding it; the plan
        // inside is still valid.
        self.cgroups.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl CgroupPlan {
    /// From now on the service runs in its process group only; said once.
    fn fall_back(&mut self, why: String) {
        if self.base.is_ok() {
            warn_process_group_only(&why);
            self.base = Err(why);
        }
    }
}

/// Where this warden's services get their cgroups, found when the spawner is made: the
/// cgroup v2 mount, and warden's own cgroup (or, when warden already runs in a
/// `supervisor` leaf, its parent). A cgroup is made and removed below it, so that a
/// hierarchy warden may not write is reported when warden starts, not at its first
/// promotion.
fn probe_cgroups() -> CgroupPlan {
    let mut in_supervisor = false;
    let base = (|| {
        let mount = cgroup::unified_mount()
            .ok_or("this host has no cgroup v2 hierarchy (cgroup v1 only)")?;
        let own = cgroup::own().ok_or("cannot read warden's cgroup from /proc/self/cgroup")?;
        let base = match own.rsplit_once('/') {
            Some((parent, SUPERVISOR_CGROUP)) => {
                in_supervisor = true;
                if parent.is_empty() { "/" } else { parent }.to_string()
            }
            _ => own,
        };
        let name = format!(
            "warden-probe-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        );
        let probe = Cgroup::at(&mount, &child_path(&base, &name))
            .ok_or_else(|| format!("warden's cgroup {base} is not a valid cgroup path"))?;
        probe.create().map_err(|e| {
            format!(
                "cannot create a cgroup in {}: {}",
                probe.dir().parent().unwrap_or(probe.dir()).display(),
                io_reason(&e)
            )
        })?;
        remove_cgroup(&probe);
        Ok::<_, String>((mount, base))
    })();
    CgroupPlan {
        base,
        in_supervisor,
    }
}

fn warn_process_group_only(why: &str) {
    warn!(reason = %why,
        "the service will run in its process group only, without a cgroup of its own: a \
         helper of it that calls setsid() or double-forks escapes stop, kill and fencing. \
         To fix: {CGROUP_FIX}");
}

/// `parent/name` for cgroup paths relative to the hierarchy's root.
fn child_path(parent: &str, name: &str) -> String {
    format!("{}/{name}", parent.trim_end_matches('/'))
}

/// In the child, before exec: moves this process into the cgroup whose `cgroup.procs` is
/// open as `procs`. On failure, writes the errno to `errors` for the parent.
fn enter_cgroup(procs: RawFd, errors: RawFd) -> io::Result<()> {
    // SAFETY: write(2) of a 1-byte buffer that lives for the call, on a descriptor this
    // process holds open.
    let written = unsafe { libc::write(procs, b"0".as_ptr().cast(), 1) };
    if written == 1 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    let code = error.raw_os_error().unwrap_or(libc::EIO).to_ne_bytes();
    // SAFETY: as above; a 4-byte write to an empty pipe cannot block or be split.
    unsafe { libc::write(errors, code.as_ptr().cast(), code.len()) };
    Err(error)
}

/// The errno a child reported through [`enter_cgroup`], if it did.
fn read_entry_error(errors: &OwnedFd) -> Option<i32> {
    let mut code = [0u8; 4];
    match nix::unistd::read(errors, &mut code) {
        Ok(4) => Some(i32::from_ne_bytes(code)),
        _ => None,
    }
}

/// Removes a service cgroup once nothing runs in it, with any cgroups the service made
/// below it; a failure is logged (an empty leftover is harmless: every start uses a
/// fresh name).
fn remove_cgroup(cgroup: &Cgroup) {
    if let Err(e) = remove_tree(cgroup.dir(), 0) {
        warn!(cgroup = cgroup.relative(), error = %io_reason(&e),
            "could not remove the service's empty cgroup; it is harmless, and rmdir removes it");
    }
}

/// Depth guard for [`remove_tree`], against a pathological tree.
const MAX_CGROUP_DEPTH: usize = 32;

/// rmdir of a cgroup directory and its child cgroups, deepest first (a cgroup's files
/// are not removed by hand: rmdir of the directory takes them).
fn remove_tree(dir: &Path, depth: usize) -> io::Result<()> {
    if depth < MAX_CGROUP_DEPTH {
        let entries = match std::fs::read_dir(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            other => other?,
        };
        for entry in entries {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                remove_tree(&entry.path(), depth + 1)?;
            }
        }
    }
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// The service started by [`Spawner::start`]. Dropping it neither stops nor kills the
/// service: use [`stop`] or [`kill`] with its [`identity`](Self::identity).
#[derive(Debug)]
pub struct RunningService {
    identity: ServiceIdentity,
    exit: oneshot::Receiver<ExitReport>,
    report: Option<ExitReport>,
}

impl RunningService {
    /// The started service: pid, process group, start time and cgroup.
    pub fn identity(&self) -> ServiceIdentity {
        self.identity.clone()
    }

    /// Waits until the service's main process (the group leader) has exited, by itself
    /// or because it was stopped, and says how. Cancel-safe, so it can sit in a
    /// `tokio::select!`; once it returned, later calls return the same report at once.
    ///
    /// Other processes of the service may outlive it: call [`stop`] to end them.
    pub async fn exited(&mut self) -> ExitReport {
        if let Some(report) = &self.report {
            return report.clone();
        }
        let report = match (&mut self.exit).await {
            Ok(report) => report,
            // The reaper task is gone without a report: the runtime is shutting down.
            Err(_) => ExitReport {
                identity: self.identity.clone(),
                exit: Exit::Unknown("warden is shutting down".to_string()),
                ran_for: Duration::ZERO,
            },
        };
        self.report = Some(report.clone());
        report
    }

    /// The exit report if the process has already exited, without waiting.
    pub fn try_exited(&mut self) -> Option<ExitReport> {
        if self.report.is_none() {
            if let Ok(report) = self.exit.try_recv() {
                self.report = Some(report);
            }
        }
        self.report.clone()
    }
}

/// Stops the service: sends `signal` to every process of it (all of its cgroup when it
/// has one, else its process group), waits up to `grace` until none remains, then sends
/// SIGKILL (`cgroup.kill`, and to the group) and waits up to [`KILL_WAIT`] more. This
/// holds also when the main process has already exited: whatever it left behind is the
/// service until it is gone. Zombies do not count as remaining. Once the service is
/// down, its empty cgroup is removed.
///
/// A service without a cgroup whose leader pid now belongs to a process with another
/// start time is gone (the pid was recycled, so its group is empty): nothing is signalled
/// and the outcome is `Stopped`.
///
/// The waiting and polling run on a blocking thread, never on a runtime worker, and
/// [`kill`] does not wait for a running stop. Dropping the future does not cancel the
/// stop, which ends within its bounds anyway.
pub async fn stop(identity: ServiceIdentity, signal: SignalName, grace: Duration) -> StopOutcome {
    let pid = identity.pid;
    match tokio::task::spawn_blocking(move || stop_blocking(&identity, signal, grace)).await {
        Ok(outcome) => outcome,
        Err(e) => {
            warn!(pid, error = %e, "the task stopping the service failed; it may still run");
            StopOutcome::StillRunning { pids: Vec::new() }
        }
    }
}

fn stop_blocking(identity: &ServiceIdentity, signal: SignalName, grace: Duration) -> StopOutcome {
    let started = Instant::now();
    let service = Members::of(identity);
    if service.gone() {
        service.clean_up();
        return StopOutcome::Stopped {
            forced: false,
            elapsed: started.elapsed(),
        };
    }
    info!(pid = identity.pid, pgid = identity.pgid, cgroup = service.label(), signal = %signal,
        grace_ms = grace.as_millis() as u64, "stopping the service");
    service.signal(signal.0);
    // A stopped (SIGSTOP, SIGTSTP) process acts on the stop signal only once continued.
    if signal.0 != Signal::SIGKILL && signal.0 != Signal::SIGCONT {
        service.signal(Signal::SIGCONT);
    }
    // The config bounds stop_timeout; checked anyway, so no value can panic a demotion.
    let until = started
        .checked_add(grace)
        .unwrap_or_else(|| started + Duration::from_secs(24 * 3600));
    if service.wait_until_gone(until, false) {
        let elapsed = started.elapsed();
        info!(
            pid = identity.pid,
            elapsed_ms = elapsed.as_millis() as u64,
            "service stopped"
        );
        service.clean_up();
        return StopOutcome::Stopped {
            forced: false,
            elapsed,
        };
    }

    warn!(
        pid = identity.pid,
        cgroup = service.label(),
        grace_ms = grace.as_millis() as u64,
        "service did not stop within its grace (service.stop_timeout); sending SIGKILL to \
         every process of it"
    );
    service.kill();
    if service.wait_until_gone(Instant::now() + KILL_WAIT, true) {
        let elapsed = started.elapsed();
        info!(
            pid = identity.pid,
            elapsed_ms = elapsed.as_millis() as u64,
            "service killed"
        );
        service.clean_up();
        return StopOutcome::Stopped {
            forced: true,
            elapsed,
        };
    }
    let pids = service.remaining();
    warn!(
        pid = identity.pid,
        cgroup = service.label(),
        ?pids,
        "processes of the service survived SIGKILL (stuck in the kernel, e.g. on a hung \
         mount?)"
    );
    StopOutcome::StillRunning { pids }
}

/// Sends SIGKILL to every process of the service now, without waiting (the lease end):
/// `cgroup.kill` of its cgroup, and its process group (checked against the leader's start
/// time, so a recycled group is left alone). Returns whether anything was signalled. A
/// failure to signal is logged. It takes a few system calls and never waits for a
/// [`stop`] in progress.
pub fn kill(identity: &ServiceIdentity) -> bool {
    let service = Members::of(identity);
    let sent = service.kill();
    if sent {
        warn!(
            pid = identity.pid,
            cgroup = service.label(),
            "killed every process of the service (SIGKILL)"
        );
    }
    sent
}

/// Whether no process of the service is left (its cgroup empty or gone; else its process
/// group). It reads `/proc` or `cgroup.procs`: call it off the runtime's workers.
pub fn gone(identity: &ServiceIdentity) -> bool {
    Members::of(identity).gone()
}

/// Every process of a service: its cgroup when it has one, else its process group.
struct Members<'a> {
    identity: &'a ServiceIdentity,
    /// `None` without a cgroup, or when the cgroup v2 mount cannot be found any more.
    cgroup: Option<Cgroup>,
}

impl<'a> Members<'a> {
    fn of(identity: &'a ServiceIdentity) -> Members<'a> {
        let cgroup = identity.cgroup.as_deref().and_then(|path| {
            let found = Cgroup::find(path);
            if found.is_none() {
                warn!(
                    cgroup = path,
                    "cannot find the service's cgroup (is the cgroup v2 \
                    hierarchy still mounted?); acting on its process group only"
                );
            }
            found
        });
        Members { identity, cgroup }
    }

    fn label(&self) -> &str {
        self.cgroup.as_ref().map_or("-", Cgroup::relative)
    }

    /// Whether nothing of the service remains: its cgroup is unpopulated, or without one
    /// its process group is empty (or not ours any more). A cgroup that cannot be read
    /// counts as populated.
    fn gone(&self) -> bool {
        match &self.cgroup {
            Some(c) => match c.is_populated() {
                Ok(populated) => !populated,
                Err(e) => {
                    debug!(cgroup = c.relative(), error = %io_reason(&e),
                        "cannot read the service's cgroup.events");
                    false
                }
            },
            None => group_gone(self.identity),
        }
    }

    /// Sends `signal` to every process of the service; failures are logged.
    fn signal(&self, signal: Signal) {
        let result = match &self.cgroup {
            Some(c) => c.signal(signal).map(|_| ()),
            None => signal_group(self.identity, signal)
                .map(|_| ())
                .map_err(io::Error::from),
        };
        if let Err(e) = result {
            warn!(pid = self.identity.pid, cgroup = self.label(), signal = signal.as_str(),
                error = %io_reason(&e), "cannot signal every process of the service");
        }
    }

    /// SIGKILL to all of it: `cgroup.kill`, which also catches processes forked meanwhile,
    /// and the process group. True if anything was signalled.
    fn kill(&self) -> bool {
        let mut sent = false;
        if let Some(c) = &self.cgroup {
            // Only to say whether anything was killed; cgroup.kill of an empty one is a
            // no-op.
            let populated = c.is_populated().unwrap_or(true);
            match c.kill() {
                Ok(()) => sent |= populated,
                Err(e) => warn!(cgroup = c.relative(), error = %io_reason(&e),
                    "cannot kill the service's cgroup"),
            }
        }
        match signal_group(self.identity, Signal::SIGKILL) {
            Ok(s) => sent |= s,
            Err(e) => warn!(pgid = self.identity.pgid, error = %e,
                "cannot SIGKILL the service's process group"),
        }
        sent
    }

    /// Polls on this (blocking) thread until the service is gone or `deadline` passes;
    /// true if gone. `rekill`: SIGKILL again each time (on kernels without `cgroup.kill`
    /// a process forked during the kill would otherwise survive).
    fn wait_until_gone(&self, deadline: Instant, rekill: bool) -> bool {
        loop {
            if self.gone() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            if rekill {
                self.kill();
            }
            std::thread::sleep(STOP_POLL.min(deadline - now));
        }
    }

    /// What still runs: the cgroup's processes, or the group's.
    fn remaining(&self) -> Vec<u32> {
        match &self.cgroup {
            Some(c) => c.pids().unwrap_or_default(),
            None => process::group_members(self.identity.pgid),
        }
    }

    /// Removes the service's cgroup once it is down.
    fn clean_up(&self) {
        if let Some(c) = &self.cgroup {
            remove_cgroup(c);
        }
    }
}

/// Runs `argv` directly (no shell) with `env` added to warden's environment, in its own
/// process group, stdin null, output forwarded to the log. Exit 0 within `timeout` is
/// `Ok`; at the timeout the whole group is killed. Dropping the returned future (a
/// cancelled check) also kills the group.
///
/// Processes the command leaves behind in its group after exiting by itself are left
/// alone: a hook may start a daemon on purpose.
pub async fn run_command(
    argv: &[String],
    env: &[(String, String)],
    timeout: Duration,
) -> Result<(), HookError> {
    run_command_said(argv, env, timeout).await.map(|_| ())
}

/// [`run_command`], answering on success with the last non-blank line the command wrote
/// to stdout (printable, cut as a failure's last word is), if its stdout closed within a
/// moment of its exit: a check's way to tell its data position (SPEC §6b).
pub async fn run_command_said(
    argv: &[String],
    env: &[(String, String)],
    timeout: Duration,
) -> Result<Option<String>, HookError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(HookError::Empty);
    };
    let name = program_name(program);
    let mut command = Command::new(program);
    command
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // Lets tokio reap the child in the background if this future is dropped.
        .kill_on_drop(true);
    for var in SUPERVISOR_ENV {
        command.env_remove(var);
    }
    let mut child = command.spawn().map_err(|e| HookError::Spawn {
        program: program.clone(),
        reason: io_reason(&e),
    })?;
    // The child is not reaped until `wait` returns, so its pid (= its group id) cannot be
    // recycled while the guard is armed.
    let mut guard = child.id().map(GroupKillGuard);
    let stdout = child.stdout.take().map(|out| {
        tokio::spawn(forward_lines(
            out,
            Origin::Command(name.clone()),
            Stream::Stdout,
        ))
    });
    let said = child.stderr.take().map(|err| {
        tokio::spawn(forward_lines(
            err,
            Origin::Command(name.clone()),
            Stream::Stderr,
        ))
    });

    let result = tokio::time::timeout(timeout, child.wait()).await;
    match result {
        Ok(Ok(status)) => {
            // Reaped: the group id may be recycled from now on, so never signal it.
            if let Some(g) = guard.take() {
                g.disarm();
            }
            let exit = Exit::from(status);
            debug!(command = %name, %exit, "command finished");
            if exit.success() {
                // Its last line on stdout, if the pipe closes soon (as for stderr below).
                Ok(last_word(stdout).await)
            } else {
                // Its last word on stderr, if the pipe closes soon (a helper it left
                // running may hold it open: then without).
                let said = last_word(said).await;
                Err(HookError::Failed {
                    program: program.clone(),
                    exit,
                    said,
                })
            }
        }
        Ok(Err(e)) => {
            drop(guard); // kills the group
            Err(HookError::Wait {
                program: program.clone(),
                reason: io_reason(&e),
            })
        }
        Err(_) => {
            drop(guard); // kills the group
                         // Reap it so no zombie is left; SIGKILL makes this quick.
            let _ = tokio::time::timeout(KILL_WAIT, child.wait()).await;
            warn!(command = %name, timeout_ms = timeout.as_millis() as u64,
                "command timed out; killed its process group");
            Err(HookError::TimedOut {
                program: program.clone(),
                timeout,
            })
        }
    }
}

/// The last line a forwarded stream of an exited command held, if it closes within
/// [`SAID_WAIT`] (a helper the command left running may hold it open: then none).
async fn last_word(stream: Option<tokio::task::JoinHandle<Option<String>>>) -> Option<String> {
    let h = stream?;
    tokio::time::timeout(SAID_WAIT, h)
        .await
        .ok()
        .and_then(Result::ok)
        .flatten()
}

/// SIGKILLs an unreaped child's process group when dropped, unless disarmed.
struct GroupKillGuard(u32);

impl GroupKillGuard {
    fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for GroupKillGuard {
    fn drop(&mut self) {
        if self.0 > 1 {
            let _ = killpg(Pid::from_raw(self.0 as i32), Signal::SIGKILL);
        }
    }
}

/// Whether no process of the service's group remains, or the group is not ours anymore.
fn group_gone(identity: &ServiceIdentity) -> bool {
    recycled(identity) || process::group_members(identity.pgid).is_empty()
}

/// The leader's pid now belongs to another process: our group is gone (a group id cannot
/// be reused while any member of the group lives).
fn recycled(identity: &ServiceIdentity) -> bool {
    matches!(process::start_time(identity.pid), Some(t) if t != identity.start_time)
}

/// Sends `signal` to the service's group. `Ok(false)`: nothing to signal (gone or
/// recycled). Refuses group ids 0 and 1 and warden's own group, which `killpg` would read
/// as "warden itself" or "everything".
fn signal_group(identity: &ServiceIdentity, signal: Signal) -> Result<bool, Errno> {
    let own_group = nix::unistd::getpgrp().as_raw() as u32;
    if identity.pgid <= 1 || identity.pgid == own_group || identity.pgid > i32::MAX as u32 {
        warn!(
            pgid = identity.pgid,
            "refusing to signal process group {}: it is not a service's group", identity.pgid
        );
        return Ok(false);
    }
    if recycled(identity) {
        debug!(
            pid = identity.pid,
            "the service's pid belongs to another process now"
        );
        return Ok(false);
    }
    match killpg(Pid::from_raw(identity.pgid as i32), signal) {
        Ok(()) => Ok(true),
        Err(Errno::ESRCH) => Ok(false),
        Err(e) => Err(e),
    }
}

/// In the child, before exec: marks every descriptor above stderr close-on-exec, so that
/// the service inherits none that warden itself inherited without the flag (from a shell,
/// a test runner, an init system). Best effort: close_range with `CLOSE_RANGE_CLOEXEC`
/// needs Linux 5.11, and without it those descriptors stay open, as with any fork + exec.
fn close_inherited_on_exec() {
    // SAFETY: close_range has no pointers and is async-signal-safe; descriptors the
    // child still needs before exec keep working, they only close at exec.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
    }
}

/// In the child, before exec: SIGKILL when warden dies. If warden died before the prctl,
/// the child was already reparented and the signal will never come, so it exits instead.
fn set_parent_death_signal(parent: libc::pid_t) -> io::Result<()> {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number and has no pointers.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getppid cannot fail; _exit ends the child without running any of the
    // parent's atexit handlers or destructors, as required after fork.
    unsafe {
        if libc::getppid() != parent {
            libc::_exit(1);
        }
    }
    Ok(())
}

/// The last path component of a program, for log fields.
fn program_name(program: &str) -> String {
    program.rsplit('/').next().unwrap_or(program).to_string()
}

pub(crate) use warden_fencing::files::io_reason;

/// Whose output a forwarded line is.
enum Origin {
    Service(String),
    Command(String),
}

enum Stream {
    Stdout,
    Stderr,
}

/// Logs every line of `reader` until EOF: stdout at info, stderr at warn.
/// How long a failed command's stderr may take to close after it exited.
const SAID_WAIT: Duration = Duration::from_millis(100);

/// A failed command's last stderr line is quoted up to this many characters.
const SAID_MAX: usize = 200;

/// Forwards a child's output to the log, line by line; returns its last non-empty line
/// (shortened), for the error of a command that failed.
async fn forward_lines<R: AsyncRead + Unpin>(
    reader: R,
    origin: Origin,
    stream: Stream,
) -> Option<String> {
    if let Origin::Command(name) = origin {
        return forward_command_output(reader, &name, stream).await;
    }
    let mut reader = BufReader::new(reader);
    let mut line = Vec::new();
    let mut last: Option<String> = None;
    loop {
        line.clear();
        match (&mut reader)
            .take(MAX_LOG_LINE)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) => return last,
            Ok(_) => {}
            Err(e) => {
                debug!(error = %e, "reading a child's output failed; no more is forwarded");
                return last;
            }
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        if !text.trim().is_empty() {
            last = Some(
                crate::record::printable(text)
                    .chars()
                    .take(SAID_MAX)
                    .collect(),
            );
        }
        match (&origin, &stream) {
            (Origin::Service(name), Stream::Stdout) => info!(service = %name, "{text}"),
            (Origin::Service(name), Stream::Stderr) => warn!(service = %name, "{text}"),
            (Origin::Command(name), Stream::Stdout) => info!(command = %name, "{text}"),
            (Origin::Command(name), Stream::Stderr) => warn!(command = %name, "{text}"),
        }
    }
}

/// A command (a hook, a health or standby check) logs at most this many lines of each of
/// its output streams per run (SPEC §9: a command that floods its output must neither
/// flood the log nor time out on a full pipe); the rest is read and dropped, and one line
/// says how much there was.
const COMMAND_LOG_LINES: usize = 10;

/// A logged line of a command is cut here, with how many bytes more it had.
const COMMAND_LINE_BYTES: usize = 512;

/// What a command's output is read in: the pipe is drained at this size per read.
const COMMAND_READ_BYTES: usize = 64 * 1024;

/// The end of a command's stream kept for its last line (the error of a failed command,
/// a standby check's position).
const COMMAND_TAIL_BYTES: usize = 1024;

/// Forwards a command's output as [`forward_lines`] does, within bounds: at most
/// [`COMMAND_LOG_LINES`] lines of at most [`COMMAND_LINE_BYTES`] each, then one line
/// counting what was not logged. The pipe is always read to its end, so a command never
/// blocks on a full pipe; the memory used is bounded whatever it prints.
async fn forward_command_output<R: AsyncRead + Unpin>(
    reader: R,
    name: &str,
    stream: Stream,
) -> Option<String> {
    let log = |text: &str| match stream {
        Stream::Stdout => info!(command = %name, "{text}"),
        Stream::Stderr => warn!(command = %name, "{text}"),
    };
    let mut reader = BufReader::with_capacity(COMMAND_READ_BYTES, reader);
    let mut tail = Vec::new();
    let mut line = Vec::new();
    let mut logged = 0;
    let mut unlogged: u64 = 0;
    let failed = |e: io::Error| {
        debug!(command = %name, error = %e, "reading a command's output failed; no more is read");
    };
    loop {
        if logged < COMMAND_LOG_LINES {
            line.clear();
            match (&mut reader)
                .take(COMMAND_LINE_BYTES as u64)
                .read_until(b'\n', &mut line)
                .await
            {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    failed(e);
                    break;
                }
            }
            keep_tail(&mut tail, &line);
            let more = if line.last() == Some(&b'\n') {
                0
            } else {
                match skip_line(&mut reader, &mut tail).await {
                    Ok(n) => n,
                    Err(e) => {
                        failed(e);
                        0
                    }
                }
            };
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\n', '\r']);
            if text.trim().is_empty() && more == 0 {
                continue;
            }
            logged += 1;
            if more > 0 {
                log(&format!("{text} ({more} bytes more)"));
            } else {
                log(text);
            }
        } else {
            let chunk = match reader.fill_buf().await {
                Ok([]) => break,
                Ok(chunk) => chunk,
                Err(e) => {
                    failed(e);
                    break;
                }
            };
            let n = chunk.len();
            keep_tail(&mut tail, chunk);
            reader.consume(n);
            unlogged += n as u64;
        }
    }
    if unlogged > 0 {
        log(&format!(
            "(its output goes on: {unlogged} bytes more, not logged)"
        ));
    }
    last_line(&tail)
}

/// Reads and drops the rest of the current line (through its newline); returns how many
/// bytes it had, the newline not counted.
async fn skip_line<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    tail: &mut Vec<u8>,
) -> io::Result<u64> {
    let mut skipped = 0;
    loop {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(skipped);
        }
        match chunk.iter().position(|&b| b == b'\n') {
            Some(end) => {
                keep_tail(tail, &chunk[..=end]);
                reader.consume(end + 1);
                return Ok(skipped + end as u64);
            }
            None => {
                let n = chunk.len();
                keep_tail(tail, chunk);
                reader.consume(n);
                skipped += n as u64;
            }
        }
    }
}

/// Keeps the last [`COMMAND_TAIL_BYTES`] of a stream in `tail`.
fn keep_tail(tail: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.len() >= COMMAND_TAIL_BYTES {
        tail.clear();
        tail.extend_from_slice(&bytes[bytes.len() - COMMAND_TAIL_BYTES..]);
    } else {
        tail.extend_from_slice(bytes);
        if tail.len() > COMMAND_TAIL_BYTES {
            tail.drain(..tail.len() - COMMAND_TAIL_BYTES);
        }
    }
}

/// The last non-empty line of a stream's tail, made printable and shortened.
fn last_line(tail: &[u8]) -> Option<String> {
    String::from_utf8_lossy(tail)
        .split('\n')
        .map(|l| l.trim_end_matches('\r'))
        .rfind(|l| !l.trim().is_empty())
        .map(|l| crate::record::printable(l).chars().take(SAID_MAX).collect())
}

/// The one thread that forks the service.
///
/// PR_SET_PDEATHSIG is delivered when the thread that forked the child exits. Runtime
/// worker threads can retire (`block_in_place`, blocking-pool threads after their idle
/// time), so the fork happens on a thread that is started once and never ends: its
/// request channel lives in a static. It enters the caller's runtime so the child's pipes
/// and exit notification belong to that runtime.
mod starter {
    use super::*;

    pub(super) enum Error {
        Io(io::Error),
        /// clone3 into the cgroup failed (see [`direct::Error::Clone`]).
        Clone {
            error: io::Error,
            unsupported: bool,
        },
        Timeout,
        Unavailable(String),
    }

    /// What the starter thread starts: a command (fork, and the child moves itself into
    /// its cgroup if it has one), or a plan started directly in its cgroup.
    pub(super) enum Job {
        Command(Command),
        Direct(direct::Plan),
    }

    /// The service's main process, as started by either way.
    pub(super) enum ServiceChild {
        Command(Child),
        Direct(direct::Child),
    }

    impl ServiceChild {
        pub(super) fn pid(&self) -> u32 {
            match self {
                // A child that has not been waited for keeps its /proc entry (as a
                // zombie at worst), so the pid is always present here.
                ServiceChild::Command(child) => child.id().unwrap_or(0),
                ServiceChild::Direct(child) => child.pid,
            }
        }

        pub(super) async fn wait(&mut self) -> io::Result<ExitStatus> {
            match self {
                ServiceChild::Command(child) => child.wait().await,
                ServiceChild::Direct(child) => child.wait().await,
            }
        }

        /// Forwards the service's stdout and stderr to the log, on tasks of the runtime.
        pub(super) fn forward_output(&mut self, name: &str) {
            let origin = || Origin::Service(name.to_string());
            match self {
                ServiceChild::Command(child) => {
                    if let Some(out) = child.stdout.take() {
                        tokio::spawn(forward_lines(out, origin(), Stream::Stdout));
                    }
                    if let Some(err) = child.stderr.take() {
                        tokio::spawn(forward_lines(err, origin(), Stream::Stderr));
                    }
                }
                ServiceChild::Direct(child) => {
                    if let Some(out) = child.stdout.take() {
                        tokio::spawn(forward_lines(out, origin(), Stream::Stdout));
                    }
                    if let Some(err) = child.stderr.take() {
                        tokio::spawn(forward_lines(err, origin(), Stream::Stderr));
                    }
                }
            }
        }
    }

    pub(super) struct Spawned {
        pub child: ServiceChild,
        pub pid: u32,
        pub start_time: Option<u64>,
    }

    struct Request {
        job: Job,
        handle: Handle,
        reply: std_mpsc::SyncSender<Result<Spawned, Error>>,
    }

    static REQUESTS: Mutex<Option<std_mpsc::Sender<Request>>> = Mutex::new(None);

    /// Starts `job` on the starter thread and waits up to `timeout` for the child.
    pub(super) fn spawn(job: Job, handle: Handle, timeout: Duration) -> Result<Spawned, Error> {
        let (reply, answer) = std_mpsc::sync_channel(1);
        let request = Request { job, handle, reply };
        {
            // A poisoned lock only means another caller panicked while holding it; the
            // Option inside is still valid.
            let mut requests = REQUESTS.lock().unwrap_or_else(|p| p.into_inner());
            if requests.is_none() {
                *requests = Some(start_thread().map_err(|e| {
                    Error::Unavailable(format!("cannot start its thread: {}", io_reason(&e)))
                })?);
            }
            let Some(sender) = requests.as_ref() else {
                return Err(Error::Unavailable("no thread".to_string()));
            };
            if sender.send(request).is_err() {
                // The thread ended (it only ends by a panic): start a new one next time.
                *requests = None;
                return Err(Error::Unavailable("its thread ended".to_string()));
            }
        }
        match answer.recv_timeout(timeout) {
            Ok(result) => result,
            Err(std_mpsc::RecvTimeoutError::Timeout) => Err(Error::Timeout),
            Err(std_mpsc::RecvTimeoutError::Disconnected) => {
                Err(Error::Unavailable("its thread ended".to_string()))
            }
        }
    }

    fn start_thread() -> io::Result<std_mpsc::Sender<Request>> {
        let (tx, rx) = std_mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("warden-service-starter".to_string())
            .spawn(move || {
                // Ends only if the static sender is dropped, which never happens.
                for request in rx {
                    serve(request);
                }
            })?;
        Ok(tx)
    }

    fn serve(request: Request) {
        let _runtime = request.handle.enter();
        let child = match request.job {
            Job::Command(mut command) => command
                .spawn()
                .map(ServiceChild::Command)
                .map_err(Error::Io),
            Job::Direct(plan) => direct::spawn(&plan, std::process::id() as libc::pid_t)
                .map(ServiceChild::Direct)
                .map_err(|e| match e {
                    direct::Error::Clone { error, unsupported } => {
                        Error::Clone { error, unsupported }
                    }
                    direct::Error::Exec(e) | direct::Error::Io(e) => Error::Io(e),
                }),
        };
        let result = child.map(|child| {
            let pid = child.pid();
            Spawned {
                start_time: read_start_time(pid),
                child,
                pid,
            }
        });
        if let Err(std_mpsc::TrySendError::Disconnected(Ok(spawned))) =
            request.reply.try_send(result)
        {
            // The caller gave up waiting: nobody will ever stop this service, so it must
            // not run. Dropping the child reaps it.
            if spawned.pid > 1 {
                let _ = killpg(Pid::from_raw(spawned.pid as i32), Signal::SIGKILL);
            }
            warn!(
                pid = spawned.pid,
                "killed a service that started after its caller gave up"
            );
        }
    }

    fn read_start_time(pid: u32) -> Option<u64> {
        for _ in 0..START_TIME_ATTEMPTS {
            if let Some(t) = process::start_time(pid) {
                return Some(t);
            }
            std::thread::sleep(START_TIME_RETRY);
        }
        None
    }
}

/// Hooks mode (SPEC §6): the service always runs, and warden changes its role by running
/// `promote` and `demote` under `hook_timeout`, with `WARDEN_ROLE` and `WARDEN_EPOCH`.
///
/// `service.pidfile` names the service process. It is read at start
/// ([`check_pidfile`](Self::check_pidfile)) and pinned with its start time at promotion
/// ([`pin`](Self::pin)); [`kill`](Self::kill) signals only the pinned process. Clones
/// share the pin, so the task that demotes kills what the promotion pinned.
#[derive(Clone, Debug)]
pub struct Hooks {
    promote: Vec<String>,
    demote: Vec<String>,
    follow: Vec<String>,
    timeout: Duration,
    pidfile: Option<PathBuf>,
    cluster: String,
    node_id: String,
    pinned: Arc<Mutex<Option<PinnedService>>>,
}

/// The service process of hooks mode as pinned at promotion: its pid and its start time
/// (`/proc/PID/stat` field 22), so that a pid reused by another process is never taken for
/// it. The daemon records it in the breadcrumb (`service_pid`, `service_start_time`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinnedService {
    pub pid: u32,
    pub start_time: u64,
}

/// Why `service.pidfile` does not name a service process warden may act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PidfileError {
    #[error(
        "the pidfile {} (service.pidfile) does not exist: is the service running, and does \
         it write its pid there?",
        path.display()
    )]
    Missing { path: PathBuf },
    #[error("cannot read the pidfile {} (service.pidfile): {reason}", path.display())]
    Unreadable { path: PathBuf, reason: String },
    #[error(
        "the pidfile {} (service.pidfile) is empty: the service writes its pid on the \
         first line of it once it runs",
        path.display()
    )]
    Empty { path: PathBuf },
    #[error(
        "the pidfile {} (service.pidfile) holds {holds:?} on its first line, which is not \
         a pid: set service.pidfile to the file where the service writes its pid on the \
         first line (as PostgreSQL's postmaster.pid)",
        path.display()
    )]
    NotAPid { path: PathBuf, holds: String },
    #[error(
        "the pidfile {} (service.pidfile) names pid {pid}, {what}: warden never signals it; \
         set service.pidfile to the service's own pidfile",
        path.display()
    )]
    Refused {
        path: PathBuf,
        pid: u32,
        what: &'static str,
    },
    #[error(
        "the pidfile {} (service.pidfile) names pid {pid}, but no such process runs: the \
         file is stale (left by a service that died?); is the service running?",
        path.display()
    )]
    NotRunning { path: PathBuf, pid: u32 },
    #[error(
        "the pidfile {} (service.pidfile) names pid {pid}, a process in pid namespace \
         {process_ns}, but warden runs in pid namespace {warden_ns}: the service runs in \
         another container than warden, whose processes warden must not pin or kill by a \
         pid of its own; run warden in the service's pid namespace (the same container), or \
         use spawn mode",
        path.display()
    )]
    OtherPidNamespace {
        path: PathBuf,
        pid: u32,
        process_ns: u64,
        warden_ns: u64,
    },
    #[error(
        "the pidfile {} (service.pidfile) names pid {pid}, which is now a process of pid \
         namespace {process_ns} (warden runs in {warden_ns}) that cannot see this pidfile: \
         the file is stale (left by a service that died, its pid since reused by an \
         unrelated container's process), and warden never signals that process; is the \
         service running?",
        path.display()
    )]
    StaleInOtherPidNamespace {
        path: PathBuf,
        pid: u32,
        process_ns: u64,
        warden_ns: u64,
    },
    #[error(
        "the pidfile {} (service.pidfile) names pid {pid}, which {here} in warden's pid \
         namespace {warden_ns}, but {} has pid {pid} in its own: the pidfile was written \
         inside a container, and its pid means another process here, or none; run warden in \
         the service's pid namespace (the same container)",
        path.display(),
        describe_namesakes(namesakes)
    )]
    WrittenInOtherPidNamespace {
        path: PathBuf,
        pid: u32,
        /// What the pid is here: "no process has", "is a kernel thread".
        here: &'static str,
        /// The processes with that pid in their own namespace: pid here, namespace.
        namesakes: Vec<(u32, u64)>,
        warden_ns: u64,
    },
}

impl PidfileError {
    /// Whether warden must not start with this pidfile (exit 2, SPEC §9): it names a
    /// process of another pid namespace that sees the pidfile, or was written inside such a
    /// namespace. Anything else is said at start and refused at promotion; a stale pidfile
    /// (SPEC §9) is only logged.
    pub fn refuses_start(&self) -> bool {
        matches!(
            self,
            PidfileError::OtherPidNamespace { .. }
                | PidfileError::WrittenInOtherPidNamespace { .. }
        )
    }
}

/// "process 1234 (pid namespace 4026532000)", and more of them.
fn describe_namesakes(namesakes: &[(u32, u64)]) -> String {
    let list: Vec<String> = namesakes
        .iter()
        .map(|(pid, ns)| format!("process {pid} (pid namespace {ns})"))
        .collect();
    list.join(" and ")
}

/// How much of a pidfile's bad first line an error quotes.
const PIDFILE_QUOTE: usize = 64;

impl Hooks {
    pub fn new(config: &ServiceConfig, cluster: &str, node_id: &str) -> Hooks {
        Hooks {
            promote: config.promote.clone(),
            demote: config.demote.clone(),
            follow: config.follow.clone(),
            timeout: config.hook_timeout,
            pidfile: config.pidfile.clone(),
            cluster: cluster.to_string(),
            node_id: node_id.to_string(),
            pinned: Arc::new(Mutex::new(None)),
        }
    }

    fn env(&self, epoch: Option<u64>, role: &str) -> Vec<(String, String)> {
        self.env_with(epoch, role, &[])
    }

    fn env_with(
        &self,
        epoch: Option<u64>,
        role: &str,
        extra: &[(String, String)],
    ) -> Vec<(String, String)> {
        let mut env = service_env(&self.cluster, &self.node_id, epoch.unwrap_or(0));
        if epoch.is_none() {
            // No epoch to hand over (demoting leftovers of an earlier warden process).
            env.retain(|(k, _)| k != "WARDEN_EPOCH");
        }
        env.push(("WARDEN_ROLE".to_string(), role.to_string()));
        env.extend(extra.iter().cloned());
        env
    }

    /// Runs the `promote` hook with the new epoch.
    pub async fn promote(&self, epoch: u64) -> Result<(), HookError> {
        run_command(
            &self.promote,
            &self.env(Some(epoch), "active"),
            self.timeout,
        )
        .await
    }

    /// Runs the `demote` hook, with `extra` variables (`WARDEN_SUCCESSOR_*` in a planned
    /// switchover).
    pub async fn demote(
        &self,
        epoch: Option<u64>,
        extra: &[(String, String)],
    ) -> Result<(), HookError> {
        run_command(
            &self.demote,
            &self.env_with(epoch, "standby", extra),
            self.timeout,
        )
        .await
    }

    /// Runs the `follow` hook (SPEC §6) with `WARDEN_ACTIVE_*` in `extra`; without one,
    /// nothing to do.
    pub async fn follow(
        &self,
        epoch: Option<u64>,
        extra: &[(String, String)],
    ) -> Result<(), HookError> {
        if self.follow.is_empty() {
            return Ok(());
        }
        run_command(
            &self.follow,
            &self.env_with(epoch, "standby", extra),
            self.timeout,
        )
        .await
    }

    /// The check at start: the process `service.pidfile` names now, `Ok(None)` without a
    /// pidfile. A missing pidfile, or one naming no running process, is only a warning
    /// here (logged; `Ok(None)`): the service may still be starting. A pidfile that does
    /// not hold a pid, or names warden itself, is an error.
    ///
    /// Across pid namespaces (SPEC §6), what can be checked is refused
    /// ([`PidfileError::refuses_start`]): a pid whose process runs in another pid namespace
    /// than warden's (`/proc/PID/ns/pid`), and a pid that names no process here while a
    /// process of another namespace has it as its own pid there (`NSpid`: the pidfile was
    /// written inside a container). Only a process that sees this very pidfile counts
    /// (the same device and inode at that path from its root, [`process::sees_file`]): a
    /// container that cannot see it did not write it, and the pidfile is then stale, left
    /// by a service of warden's namespace that died (SPEC §9: logged, never signalled).
    /// What cannot be told apart: a pid that names a process of warden's namespace and is
    /// also some container's own pid of another process; the process here is taken, with
    /// a warning.
    pub fn check_pidfile(&self) -> Result<Option<PinnedService>, PidfileError> {
        let Some(path) = &self.pidfile else {
            return Ok(None);
        };
        let (key, read) = read_pidfile_keyed(path);
        // The processes of other namespaces that see this pidfile and have `pid` there; none
        // when the file could not be opened (nothing then to compare them with).
        let namesakes_of = |pid: u32| match key {
            Some(key) => process::namesakes_in_other_pid_namespaces(pid, path, key),
            None => Vec::new(),
        };
        match read {
            Ok(found) => {
                // A pid that is also a container's own pid of some process cannot be told
                // from ours by the file alone: the process here is taken, and the doubt said.
                let namesakes = namesakes_of(found.pid);
                if !namesakes.is_empty() {
                    warn!(
                        pidfile = %path.display(),
                        pid = found.pid,
                        "the pidfile names pid {} of this pid namespace, and {} has that pid \
                         in its own; if the service writes its pidfile inside a container, \
                         this is the wrong process: run warden in the service's container",
                        found.pid,
                        describe_namesakes(&namesakes)
                    );
                }
                Ok(Some(found))
            }
            Err(PidfileError::NotRunning { path, pid }) => {
                let namesakes = namesakes_of(pid);
                if let (false, Ok(warden_ns)) = (namesakes.is_empty(), process::pid_ns()) {
                    return Err(PidfileError::WrittenInOtherPidNamespace {
                        path,
                        pid,
                        here: "no process has",
                        namesakes,
                        warden_ns,
                    });
                }
                let e = PidfileError::NotRunning { path, pid };
                warn!(
                    "{e}; the service may still be starting, but warden needs it by the \
                       time this node is promoted"
                );
                Ok(None)
            }
            Err(PidfileError::Refused {
                path,
                pid,
                what: KERNEL_THREAD,
            }) => {
                // A kernel thread is no service: a container's own pid of its service, read
                // here, names one when it is small (kthreadd is 2).
                let namesakes = namesakes_of(pid);
                match (namesakes.is_empty(), process::pid_ns()) {
                    (false, Ok(warden_ns)) => Err(PidfileError::WrittenInOtherPidNamespace {
                        path,
                        pid,
                        here: "is a kernel thread",
                        namesakes,
                        warden_ns,
                    }),
                    _ => Err(PidfileError::Refused {
                        path,
                        pid,
                        what: KERNEL_THREAD,
                    }),
                }
            }
            Err(e @ PidfileError::StaleInOtherPidNamespace { .. }) => {
                warn!(
                    "{e}; warden needs the service's own pid there by the time this node is \
                     promoted"
                );
                Ok(None)
            }
            Err(e @ PidfileError::Missing { .. }) => {
                warn!(
                    "{e}; the service may still be starting, but warden needs it by the \
                       time this node is promoted"
                );
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// At promotion: pins the process `service.pidfile` names, with its start time, as
    /// the one [`kill`](Self::kill) may signal. `Ok(None)` without a pidfile. Any problem
    /// with the pidfile is an error, and the promotion should fail with its message; the
    /// earlier pin is dropped then, so that nothing is killed on the word of a pidfile
    /// that was not read.
    pub fn pin(&self) -> Result<Option<PinnedService>, PidfileError> {
        let mut pinned = self.pinned.lock().unwrap_or_else(|p| p.into_inner());
        *pinned = None;
        let Some(path) = &self.pidfile else {
            return Ok(None);
        };
        let found = read_pidfile(path)?;
        info!(pid = found.pid, start_time = found.start_time, pidfile = %path.display(),
            "pinned the service process");
        *pinned = Some(found);
        Ok(Some(found))
    }

    /// The process pinned by the last [`pin`](Self::pin), if any.
    pub fn pinned(&self) -> Option<PinnedService> {
        *self.pinned.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A called-off switchover (SPEC §6a.2): the `demote` hook may have restarted the
    /// service (a new pid in the pidfile). When the pinned process is gone and the
    /// pidfile names another running process, pins that one and returns (the one gone,
    /// the one pinned now). Otherwise the pin stands (`None`): a pinned process that still
    /// runs is the service, and a pidfile that names nothing running is no better than the
    /// pin (the promote that follows is refused, as before). It takes a few system calls.
    pub fn repin(&self) -> Option<(PinnedService, PinnedService)> {
        let path = self.pidfile.as_ref()?;
        let mut pinned = self.pinned.lock().unwrap_or_else(|p| p.into_inner());
        let gone = (*pinned)?;
        if warden_fencing::process::is_running(gone.pid, Some(gone.start_time)) {
            return None;
        }
        match read_pidfile(path) {
            Ok(now) if now != gone => {
                *pinned = Some(now);
                info!(pid = now.pid, start_time = now.start_time, pidfile = %path.display(),
                    "pinned the service process");
                Some((gone, now))
            }
            Ok(_) => None,
            Err(e) => {
                warn!(error = %e, pinned_pid = gone.pid,
                    "the pinned service process is gone and the pidfile names no other");
                None
            }
        }
    }

    /// SIGKILL of the pinned service process: after a forced demotion whose hook failed
    /// (or the lease end), a service whose role is unknown must not keep serving. Only
    /// the pinned process is signalled, only while its start time matches, and never
    /// warden itself or its process group. A pidfile that now names another process is
    /// logged as stale and never signalled. Returns whether the pinned process was killed.
    /// It takes a few system calls.
    pub fn kill(&self) -> bool {
        let file = self
            .pidfile
            .as_ref()
            .map_or_else(|| "-".to_string(), |p| p.display().to_string());
        let Some(pinned) = self.pinned() else {
            warn!(pidfile = %file, "no service process was pinned at promotion, so none is \
                killed; set service.pidfile to let warden kill a service whose demotion failed");
            return false;
        };
        if let Some(path) = &self.pidfile {
            match read_pidfile(path) {
                Ok(now) if now != pinned => warn!(pidfile = %file, pid = now.pid,
                    start_time = now.start_time, pinned_pid = pinned.pid,
                    pinned_start_time = pinned.start_time,
                    "the pidfile is stale: it names another process than the one pinned at \
                     promotion; that process is not signalled"),
                Ok(_) => {}
                Err(e) => debug!(error = %e, "the pidfile no longer names the pinned process"),
            }
        }
        kill_pinned(pinned, &file)
    }
}

/// Reads the process a pidfile names: the pid on its first line (later lines, as in
/// PostgreSQL's `postmaster.pid`, are the service's own), running now, and neither init
/// nor warden itself nor the leader of warden's process group.
fn read_pidfile(path: &Path) -> Result<PinnedService, PidfileError> {
    read_pidfile_keyed(path).1
}

/// [`read_pidfile`], and the file it read (device and inode; `None` when it could not be
/// opened), against which a process of another pid namespace is asked whether it sees
/// this very pidfile.
fn read_pidfile_keyed(path: &Path) -> (Option<FileKey>, Result<PinnedService, PidfileError>) {
    // Never blocks on a fifo, never reads without end (SPEC §9).
    let opened = warden_fencing::files::open_regular_file(path).and_then(|(file, meta)| {
        let key = FileKey::of(&meta);
        warden_fencing::files::read_opened(file, &meta, 64 * 1024).map(|bytes| (key, bytes))
    });
    match opened {
        Ok((key, bytes)) => (Some(key), pidfile_process(path, key, &bytes)),
        Err(e) => (
            None,
            Err(match e.kind() {
                io::ErrorKind::NotFound => PidfileError::Missing {
                    path: path.to_path_buf(),
                },
                _ => PidfileError::Unreadable {
                    path: path.to_path_buf(),
                    reason: io_reason(&e),
                },
            }),
        ),
    }
}

/// The process named by `bytes`, the content of the pidfile `path` (the file `key`).
fn pidfile_process(path: &Path, key: FileKey, bytes: &[u8]) -> Result<PinnedService, PidfileError> {
    let text = String::from_utf8_lossy(bytes);
    if text.trim().is_empty() {
        return Err(PidfileError::Empty {
            path: path.to_path_buf(),
        });
    }
    let line = text.lines().next().unwrap_or("").trim();
    let pid = Some(line)
        .filter(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|l| l.parse::<u32>().ok())
        .ok_or_else(|| PidfileError::NotAPid {
            path: path.to_path_buf(),
            holds: line.chars().take(PIDFILE_QUOTE).collect(),
        })?;
    if let Some(what) = forbidden_pid(pid) {
        return Err(PidfileError::Refused {
            path: path.to_path_buf(),
            pid,
            what,
        });
    }
    match process::stat(pid) {
        Some(s) if !s.is_exited() && process::is_kernel_thread(pid) => Err(PidfileError::Refused {
            path: path.to_path_buf(),
            pid,
            what: KERNEL_THREAD,
        }),
        Some(s) if !s.is_exited() => {
            // A process of another pid namespace (a container's, seen here by its outer
            // pid) is not ours to pin: what it is cannot be checked from here. Unknown
            // when either namespace cannot be read (another user's process): taken as is.
            // One that cannot see this pidfile did not write it: the file is stale (its
            // service died and the pid went to an unrelated container's process).
            if let (Some(process_ns), Ok(warden_ns)) = (process::pid_ns_of(pid), process::pid_ns())
            {
                if process_ns != warden_ns {
                    let path = path.to_path_buf();
                    return Err(if process::sees_file(pid, &path, key) {
                        PidfileError::OtherPidNamespace {
                            path,
                            pid,
                            process_ns,
                            warden_ns,
                        }
                    } else {
                        PidfileError::StaleInOtherPidNamespace {
                            path,
                            pid,
                            process_ns,
                            warden_ns,
                        }
                    });
                }
            }
            Ok(PinnedService {
                pid,
                start_time: s.start_time,
            })
        }
        _ => Err(PidfileError::NotRunning {
            path: path.to_path_buf(),
            pid,
        }),
    }
}

/// [`PidfileError::Refused`] of a pidfile that names a kernel thread.
const KERNEL_THREAD: &str = "which is a kernel thread, never a service's process";

/// Why warden may never signal `pid`, if so: `kill` would read 0 and negative numbers as
/// process groups, 1 is init, and warden must not kill itself or its own group.
fn forbidden_pid(pid: u32) -> Option<&'static str> {
    if pid <= 1 || pid > i32::MAX as u32 {
        Some("which is not a service's process (0 and 1 are the caller's group and init)")
    } else if pid == std::process::id() {
        Some("which is warden itself")
    } else if pid == nix::unistd::getpgrp().as_raw() as u32 {
        Some("which leads warden's own process group")
    } else {
        None
    }
}

/// SIGKILL to `pinned` if it still is that process. The process is held as a pidfd while
/// its start time is checked, so the process signalled is the one checked, even if its
/// pid is reused in between (kernels before 5.3, without pidfds, signal by pid).
fn kill_pinned(pinned: PinnedService, pidfile: &str) -> bool {
    let pid = pinned.pid;
    if let Some(what) = forbidden_pid(pid) {
        warn!(pid, pidfile, "refusing to signal pid {pid}, {what}");
        return false;
    }
    let pidfd = match pidfd_open(pid) {
        Ok(fd) => Some(fd),
        Err(Errno::ESRCH) => {
            info!(pid, pidfile, "the pinned service process is already gone");
            return false;
        }
        Err(_) => None,
    };
    match process::stat(pid) {
        Some(s) if s.is_exited() => {
            info!(
                pid,
                pidfile, "the pinned service process has already exited"
            );
            return false;
        }
        None => {
            info!(pid, pidfile, "the pinned service process is already gone");
            return false;
        }
        Some(s) if s.start_time != pinned.start_time => {
            warn!(
                pid,
                pidfile,
                pinned_start_time = pinned.start_time,
                start_time = s.start_time,
                "the pinned service process is gone and its pid belongs to another process \
                 now (another start time): stale, not signalled"
            );
            return false;
        }
        Some(_) => {}
    }
    let sent = match &pidfd {
        Some(fd) => pidfd_send_signal(fd, Signal::SIGKILL),
        None => nix::sys::signal::kill(Pid::from_raw(pid as i32), Signal::SIGKILL),
    };
    match sent {
        Ok(()) => {
            warn!(
                pid,
                pidfile, "killed the service process pinned at promotion (SIGKILL)"
            );
            true
        }
        Err(Errno::ESRCH) => {
            info!(pid, pidfile, "the pinned service process is already gone");
            false
        }
        Err(e) => {
            warn!(pid, pidfile, error = %e, "cannot SIGKILL the pinned service process");
            false
        }
    }
}

/// pidfd_open(2): a descriptor that refers to process `pid` as it is now.
fn pidfd_open(pid: u32) -> Result<OwnedFd, Errno> {
    // SAFETY: pidfd_open takes a pid and flags, and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the kernel just returned this descriptor, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// pidfd_send_signal(2) without siginfo: like kill(2), to exactly that process.
fn pidfd_send_signal(pidfd: &OwnedFd, signal: Signal) -> Result<(), Errno> {
    // SAFETY: the descriptor is open for the call; a null siginfo is allowed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal as libc::c_int,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc < 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
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
