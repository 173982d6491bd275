//! Hooks mode (SPEC §6): [`Hooks`] runs `promote`, `demote` and `follow`, and pins the
//! service process that `service.pidfile` names.

use super::*;

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
pub(super) fn describe_namesakes(namesakes: &[(u32, u64)]) -> String {
    let list: Vec<String> = namesakes
        .iter()
        .map(|(pid, ns)| format!("process {pid} (pid namespace {ns})"))
        .collect();
    list.join(" and ")
}

/// How much of a pidfile's bad first line an error quotes.
pub(super) const PIDFILE_QUOTE: usize = 64;

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
pub(super) fn read_pidfile(path: &Path) -> Result<PinnedService, PidfileError> {
    read_pidfile_keyed(path).1
}

/// [`read_pidfile`], and the file it read (device and inode; `None` when it could not be
/// opened), against which a process of another pid namespace is asked whether it sees
/// this very pidfile.
pub(super) fn read_pidfile_keyed(
    path: &Path,
) -> (Option<FileKey>, Result<PinnedService, PidfileError>) {
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
pub(super) fn pidfile_process(
    path: &Path,
    key: FileKey,
    bytes: &[u8],
) -> Result<PinnedService, PidfileError> {
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
pub(super) const KERNEL_THREAD: &str = "which is a kernel thread, never a service's process";

/// Why warden may never signal `pid`, if so: `kill` would read 0 and negative numbers as
/// process groups, 1 is init, and warden must not kill itself or its own group.
pub(super) fn forbidden_pid(pid: u32) -> Option<&'static str> {
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
pub(super) fn kill_pinned(pinned: PinnedService, pidfile: &str) -> bool {
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
        Some(fd) => pidfd_kill(fd),
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
pub(super) fn pidfd_open(pid: u32) -> Result<OwnedFd, Errno> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or(Errno::EINVAL)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).map_err(errno)
}

/// pidfd_send_signal(2) without siginfo: like kill(2), to exactly that process. SIGKILL
/// only: the one signal this module sends by pidfd.
pub(super) fn pidfd_kill(pidfd: &OwnedFd) -> Result<(), Errno> {
    rustix::process::pidfd_send_signal(pidfd, rustix::process::Signal::KILL).map_err(errno)
}

/// rustix's error as the `nix` one the rest of this module speaks.
fn errno(e: rustix::io::Errno) -> Errno {
    Errno::from_raw(e.raw_os_error())
}
