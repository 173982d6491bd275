//! Spawn mode's start (SPEC §6): [`Spawner`] prepares and starts `service.command` in
//! its own process group and, where it can, a cgroup of its own; [`RunningService`] is
//! what it started.

use super::*;

/// Starts the service of spawn mode: `service.command`, run directly (no shell). Clones
/// share what they learned about the cgroup hierarchy.
#[derive(Clone, Debug)]
pub struct Spawner {
    argv: Vec<String>,
    cluster: String,
    node_id: String,
    cgroups: Arc<Mutex<CgroupPlan>>,
}

/// A start made ready by [`Spawner::prepare`]: its epoch and the cgroup the service will
/// run in. Dropping it without starting removes the (empty) cgroup.
#[derive(Debug)]
pub struct Prepared {
    pub(super) epoch: u64,
    pub(super) cgroup: Option<Cgroup>,
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
pub(super) enum Failure {
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
    pub(super) fn enter_supervisor(&self) -> bool {
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

/// In the child, before exec: marks every descriptor above stderr close-on-exec, so that
/// the service inherits none that warden itself inherited without the flag (from a shell,
/// a test runner, an init system). Best effort: close_range with `CLOSE_RANGE_CLOEXEC`
/// needs Linux 5.11, and without it those descriptors stay open, as with any fork + exec.
pub(super) fn close_inherited_on_exec() {
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
pub(super) fn set_parent_death_signal(parent: libc::pid_t) -> io::Result<()> {
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

/// The one thread that forks the service.
///
/// PR_SET_PDEATHSIG is delivered when the thread that forked the child exits. Runtime
/// worker threads can retire (`block_in_place`, blocking-pool threads after their idle
/// time), so the fork happens on a thread that is started once and never ends: its
/// request channel lives in a static. It enters the caller's runtime so the child's pipes
/// and exit notification belong to that runtime.
pub(super) mod starter {
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
