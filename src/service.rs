//! The managed service (SPEC §6).
//!
//! Spawn mode: [`Spawner::start`] runs `service.command` as a child of warden in its own
//! process group, with a parent-death signal so it never outlives warden, and hands back a
//! [`RunningService`] that reports when the process exits by itself. [`stop`] takes the
//! whole group down (`stop_signal`, then SIGKILL after the grace) and [`kill_group`] kills
//! it at once (the lease end). Both check the recorded start time first, so a recycled
//! pid or process group is never signalled.
//!
//! [`run_command`] runs a short external command under a hard timeout, killing its whole
//! process group when the time is up. Health `exec` checks use it, and so will the hooks
//! of hooks mode.
//!
//! Hooks mode (`promote`/`demote` with `WARDEN_ROLE`, `hook_timeout`, `pidfile`) is not
//! built yet. It belongs here, beside [`Spawner`]: a `Hooks` type built from the same
//! [`ServiceConfig`] that calls [`run_command`] with [`service_env`] plus `WARDEN_ROLE`,
//! and reads the pidfile into a [`ServiceIdentity`] so that [`kill_group`] (or a
//! pid-only variant) can end a service whose `demote` failed under a forced demotion.
//!
//! Everything here is called from tokio tasks of the daemon's driver and is bounded in
//! time: the longest call is [`stop`], at most `grace` + [`KILL_WAIT`].

use std::fmt;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::mpsc as std_mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tracing::{debug, info, warn};
use warden_fencing::{process, SignalName};

use crate::config::ServiceConfig;

/// How long fork + exec of the service may take. It takes milliseconds; only a wedged
/// host (the binary on a hung network filesystem, memory exhausted) takes longer, and a
/// promotion must fail rather than hang on it.
const SPAWN_TIMEOUT: Duration = Duration::from_secs(5);

/// After SIGKILL the kernel ends a process group within milliseconds, except processes in
/// uninterruptible sleep (D state: a hung disk or NFS mount), which die only when the I/O
/// returns. Past this, [`stop`] reports what remains instead of waiting, so a demotion
/// always finishes and the driver can say which pids are stuck.
pub const KILL_WAIT: Duration = Duration::from_secs(5);

/// How often [`stop`] looks for remaining members of the group. Each look scans `/proc`,
/// so this trades a little CPU during a stop for a shorter failover.
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

/// Who the running service is: enough to find it again, and to never mistake a recycled
/// pid for it. `start_time` is `/proc/PID/stat` field 22 (clock ticks since boot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceIdentity {
    pub pid: u32,
    /// The service's process group; in spawn mode the group it leads, so equal to `pid`.
    pub pgid: u32,
    pub start_time: u64,
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
    #[error("{program} failed: {exit}")]
    Failed { program: String, exit: Exit },
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

/// The service process ended: the leader of its group was reaped.
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
    /// No process of the group remains. `forced`: it took SIGKILL after the grace.
    Stopped { forced: bool, elapsed: Duration },
    /// These processes of the group were still alive [`KILL_WAIT`] after SIGKILL (stuck
    /// in uninterruptible sleep), or could not be signalled (EPERM).
    StillRunning { pids: Vec<u32> },
}

/// The variables every service process and hook receives (SPEC §6). Hooks mode will add
/// `WARDEN_ROLE` for the transition it runs; spawn mode sets `WARDEN_ROLE=active`.
pub fn service_env(cluster: &str, node_id: &str, epoch: u64) -> Vec<(String, String)> {
    vec![
        ("WARDEN_EPOCH".to_string(), epoch.to_string()),
        ("WARDEN_CLUSTER".to_string(), cluster.to_string()),
        ("WARDEN_NODE_ID".to_string(), node_id.to_string()),
    ]
}

/// Starts the service of spawn mode: `service.command`, run directly (no shell).
#[derive(Clone, Debug)]
pub struct Spawner {
    argv: Vec<String>,
    cluster: String,
    node_id: String,
}

impl Spawner {
    /// A spawner for `config.command`, passing `cluster` and `node_id` to the service.
    pub fn new(
        config: &ServiceConfig,
        cluster: &str,
        node_id: &str,
    ) -> Result<Spawner, ServiceError> {
        if config.command.is_empty() || config.command[0].is_empty() {
            return Err(ServiceError::NoCommand);
        }
        Ok(Spawner {
            argv: config.command.clone(),
            cluster: cluster.to_string(),
            node_id: node_id.to_string(),
        })
    }

    /// The program as named in the config (`service.command[0]`).
    pub fn program(&self) -> &str {
        &self.argv[0]
    }

    /// Starts the service with `WARDEN_EPOCH=epoch`, in its own process group, stdin
    /// null, stdout and stderr forwarded to the log, and SIGKILL as its parent-death
    /// signal.
    ///
    /// Must be called from within warden's tokio runtime (the exit reaper and the output
    /// forwarders are tasks on it). It blocks the calling thread for the fork + exec only,
    /// at most [`SPAWN_TIMEOUT`].
    ///
    /// The parent-death signal fires when the *thread* that forked exits, not the
    /// process. So the fork does not happen on the calling thread (a `spawn_blocking`
    /// thread or a runtime worker that may later retire would kill the service when it
    /// ends): it happens on one dedicated thread that lives as long as warden. Calling
    /// `start` from any thread, `spawn_blocking` included, is therefore safe.
    pub fn start(&self, epoch: u64) -> Result<RunningService, ServiceError> {
        let handle = Handle::try_current().map_err(|_| ServiceError::NoRuntime)?;
        let program = self.argv[0].clone();
        let name = program_name(&program);

        let mut command = Command::new(&program);
        command
            .args(&self.argv[1..])
            .envs(service_env(&self.cluster, &self.node_id, epoch))
            .env("WARDEN_ROLE", "active")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for var in SUPERVISOR_ENV {
            command.env_remove(var);
        }
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the closure runs in the child between fork and exec, where only
        // async-signal-safe calls are allowed; prctl, getppid and _exit are plain
        // system calls, and the error path builds an io::Error from errno without
        // allocating.
        unsafe {
            command.pre_exec(move || set_parent_death_signal(parent));
        }

        let started_at = Instant::now();
        let spawned = starter::spawn(command, handle, SPAWN_TIMEOUT).map_err(|e| match e {
            starter::Error::Io(e) => ServiceError::Spawn {
                program: program.clone(),
                reason: io_reason(&e),
            },
            starter::Error::Timeout => ServiceError::SpawnTimeout {
                program: program.clone(),
                timeout: SPAWN_TIMEOUT,
            },
            starter::Error::Unavailable(why) => ServiceError::Starter(why),
        })?;
        let mut child = spawned.child;
        let pid = spawned.pid;
        let Some(start_time) = spawned.start_time else {
            // Without a start time the service could not be fenced safely later.
            if pid > 1 {
                let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
            return Err(ServiceError::NoStartTime { program, pid });
        };
        let identity = ServiceIdentity {
            pid,
            pgid: pid,
            start_time,
        };
        info!(service = %name, pid, epoch, "service started");

        if let Some(out) = child.stdout.take() {
            tokio::spawn(forward_lines(
                out,
                Origin::Service(name.clone()),
                Stream::Stdout,
            ));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(forward_lines(
                err,
                Origin::Service(name.clone()),
                Stream::Stderr,
            ));
        }

        let (tx, rx) = oneshot::channel();
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
                identity,
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
}

/// The service started by [`Spawner::start`]. Dropping it neither stops nor kills the
/// service: use [`stop`] or [`kill_group`] with its [`identity`](Self::identity).
#[derive(Debug)]
pub struct RunningService {
    identity: ServiceIdentity,
    exit: oneshot::Receiver<ExitReport>,
    report: Option<ExitReport>,
}

impl RunningService {
    /// The started process: pid, process group and start time.
    pub fn identity(&self) -> ServiceIdentity {
        self.identity
    }

    /// Waits until the service process (the group leader) has exited, by itself or
    /// because it was stopped, and says how. Cancel-safe, so it can sit in a
    /// `tokio::select!`; once it returned, later calls return the same report at once.
    ///
    /// Other members of the group may outlive the leader: call [`stop`] to end them.
    pub async fn exited(&mut self) -> ExitReport {
        if let Some(report) = &self.report {
            return report.clone();
        }
        let report = match (&mut self.exit).await {
            Ok(report) => report,
            // The reaper task is gone without a report: the runtime is shutting down.
            Err(_) => ExitReport {
                identity: self.identity,
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

/// Stops the service: sends `signal` to its whole process group, waits up to `grace`
/// until no process of the group remains, then sends SIGKILL to the group and waits up to
/// [`KILL_WAIT`] more. Zombies do not count as remaining.
///
/// A group whose leader pid now belongs to a process with another start time is gone
/// (the pid was recycled): nothing is signalled and the outcome is `Stopped`.
pub async fn stop(identity: ServiceIdentity, signal: SignalName, grace: Duration) -> StopOutcome {
    let started = Instant::now();
    if group_gone(&identity) {
        return StopOutcome::Stopped {
            forced: false,
            elapsed: started.elapsed(),
        };
    }
    info!(pid = identity.pid, pgid = identity.pgid, signal = %signal,
        grace_ms = grace.as_millis() as u64, "stopping the service's process group");
    if let Err(e) = signal_group(&identity, signal.0) {
        warn!(pgid = identity.pgid, signal = %signal, error = %e,
            "cannot signal the service's process group; will try SIGKILL after the grace");
    }
    // A stopped (SIGSTOP, SIGTSTP) process acts on the stop signal only once continued.
    if signal.0 != Signal::SIGKILL && signal.0 != Signal::SIGCONT {
        let _ = signal_group(&identity, Signal::SIGCONT);
    }
    if wait_until_gone(&identity, started + grace).await {
        let elapsed = started.elapsed();
        info!(
            pgid = identity.pgid,
            elapsed_ms = elapsed.as_millis() as u64,
            "service stopped"
        );
        return StopOutcome::Stopped {
            forced: false,
            elapsed,
        };
    }

    warn!(
        pgid = identity.pgid,
        grace_ms = grace.as_millis() as u64,
        "service did not stop within its grace (service.stop_timeout); \
         sending SIGKILL to its process group"
    );
    if let Err(e) = signal_group(&identity, Signal::SIGKILL) {
        warn!(pgid = identity.pgid, error = %e, "cannot SIGKILL the service's process group");
    }
    if wait_until_gone(&identity, Instant::now() + KILL_WAIT).await {
        let elapsed = started.elapsed();
        info!(
            pgid = identity.pgid,
            elapsed_ms = elapsed.as_millis() as u64,
            "service killed"
        );
        return StopOutcome::Stopped {
            forced: true,
            elapsed,
        };
    }
    let pids = process::group_members(identity.pgid);
    warn!(
        pgid = identity.pgid,
        ?pids,
        "processes of the service's group survived SIGKILL (stuck in the kernel, \
         e.g. on a hung mount?)"
    );
    StopOutcome::StillRunning { pids }
}

/// Sends SIGKILL to the service's process group now, without waiting (the lease end).
/// Returns whether a signal was sent: `false` when the group is already gone or its pid
/// was recycled. A failure to signal is logged.
pub fn kill_group(identity: ServiceIdentity) -> bool {
    match signal_group(&identity, Signal::SIGKILL) {
        Ok(sent) => {
            if sent {
                warn!(
                    pgid = identity.pgid,
                    "killed the service's process group (SIGKILL)"
                );
            }
            sent
        }
        Err(e) => {
            warn!(pgid = identity.pgid, error = %e,
                "cannot SIGKILL the service's process group");
            false
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
    if let Some(out) = child.stdout.take() {
        tokio::spawn(forward_lines(
            out,
            Origin::Command(name.clone()),
            Stream::Stdout,
        ));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(forward_lines(
            err,
            Origin::Command(name.clone()),
            Stream::Stderr,
        ));
    }

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
                Ok(())
            } else {
                Err(HookError::Failed {
                    program: program.clone(),
                    exit,
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
    if identity.pgid <= 1 || identity.pgid == own_group {
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

/// Polls until the group is gone or `deadline` passes; true if gone.
async fn wait_until_gone(identity: &ServiceIdentity, deadline: Instant) -> bool {
    loop {
        if group_gone(identity) {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        tokio::time::sleep(STOP_POLL.min(deadline - now)).await;
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

/// An I/O error as a short lower-case reason: "no such file or directory",
/// "connection refused".
pub(crate) fn io_reason(e: &io::Error) -> String {
    let text = match e.raw_os_error() {
        Some(code) => Errno::from_raw(code).desc().to_string(),
        None => e.to_string(),
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    }
}

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
async fn forward_lines<R: AsyncRead + Unpin>(reader: R, origin: Origin, stream: Stream) {
    let mut reader = BufReader::new(reader);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader)
            .take(MAX_LOG_LINE)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => {
                debug!(error = %e, "reading a child's output failed; no more is forwarded");
                return;
            }
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        match (&origin, &stream) {
            (Origin::Service(name), Stream::Stdout) => info!(service = %name, "{text}"),
            (Origin::Service(name), Stream::Stderr) => warn!(service = %name, "{text}"),
            (Origin::Command(name), Stream::Stdout) => info!(command = %name, "{text}"),
            (Origin::Command(name), Stream::Stderr) => warn!(command = %name, "{text}"),
        }
    }
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
        Timeout,
        Unavailable(String),
    }

    pub(super) struct Spawned {
        pub child: Child,
        pub pid: u32,
        pub start_time: Option<u64>,
    }

    struct Request {
        command: Command,
        handle: Handle,
        reply: std_mpsc::SyncSender<io::Result<Spawned>>,
    }

    static REQUESTS: Mutex<Option<std_mpsc::Sender<Request>>> = Mutex::new(None);

    /// Spawns `command` on the starter thread and waits up to `timeout` for the child.
    pub(super) fn spawn(
        command: Command,
        handle: Handle,
        timeout: Duration,
    ) -> Result<Spawned, Error> {
        let (reply, answer) = std_mpsc::sync_channel(1);
        let request = Request {
            command,
            handle,
            reply,
        };
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
            Ok(Ok(spawned)) => Ok(spawned),
            Ok(Err(e)) => Err(Error::Io(e)),
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

    fn serve(mut request: Request) {
        let _runtime = request.handle.enter();
        let result = request.command.spawn().map(|child| {
            // A child that has not been waited for keeps its /proc entry (as a zombie
            // at worst), so the pid is always present here.
            let pid = child.id().unwrap_or(0);
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
            // not run. Dropping the child lets tokio reap it.
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
        for pgid in [0, 1, own] {
            let id = ServiceIdentity {
                pid: pgid,
                pgid,
                start_time: 0,
            };
            assert_eq!(signal_group(&id, Signal::SIGCONT), Ok(false), "pgid {pgid}");
        }
    }
}

/// Hooks mode (SPEC §6): the service always runs, and warden changes its role by running
/// `promote` and `demote` under `hook_timeout`, with `WARDEN_ROLE` and `WARDEN_EPOCH`.
#[derive(Clone, Debug)]
pub struct Hooks {
    promote: Vec<String>,
    demote: Vec<String>,
    timeout: Duration,
    pidfile: Option<std::path::PathBuf>,
    cluster: String,
    node_id: String,
}

impl Hooks {
    pub fn new(config: &ServiceConfig, cluster: &str, node_id: &str) -> Hooks {
        Hooks {
            promote: config.promote.clone(),
            demote: config.demote.clone(),
            timeout: config.hook_timeout,
            pidfile: config.pidfile.clone(),
            cluster: cluster.to_string(),
            node_id: node_id.to_string(),
        }
    }

    fn env(&self, epoch: Option<u64>, role: &str) -> Vec<(String, String)> {
        let mut env = service_env(&self.cluster, &self.node_id, epoch.unwrap_or(0));
        if epoch.is_none() {
            // No epoch to hand over (demoting leftovers of an earlier warden process).
            env.retain(|(k, _)| k != "WARDEN_EPOCH");
        }
        env.push(("WARDEN_ROLE".to_string(), role.to_string()));
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

    /// Runs the `demote` hook.
    pub async fn demote(&self, epoch: Option<u64>) -> Result<(), HookError> {
        run_command(&self.demote, &self.env(epoch, "standby"), self.timeout).await
    }

    /// The service process named by `pidfile`, with its start time, if it runs.
    pub fn service_process(&self) -> Option<(u32, u64)> {
        let path = self.pidfile.as_ref()?;
        let pid: u32 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
        let start = warden_fencing::process::start_time(pid)?;
        warden_fencing::process::is_running(pid, Some(start)).then_some((pid, start))
    }

    /// SIGKILL of the `pidfile` process: after a forced demotion whose hook failed, a
    /// service whose role is unknown must not keep serving. Returns whether it was killed.
    pub fn kill(&self) -> bool {
        let Some((pid, _)) = self.service_process() else {
            return false;
        };
        match nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        ) {
            Ok(()) => {
                warn!(pid, "killed the service named by the pidfile (SIGKILL)");
                true
            }
            Err(e) => {
                warn!(pid, error = %e, "cannot SIGKILL the service named by the pidfile");
                false
            }
        }
    }
}
