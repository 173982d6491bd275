//! [`terminate_incarnation`]: what it may act on ([`survey`]), and the signals, the waits
//! and the report of ending an old incarnation on this host.

use super::*;

/// What [`terminate_incarnation`] may act on besides the processes recorded in the
/// [`Target`].
#[derive(Clone, Debug)]
pub struct TerminateOptions {
    /// The signal to send. SIGKILL also ends a SIGSTOPped process; any other signal is
    /// followed by SIGCONT so that a stopped process can act on it.
    pub signal: Signal,
    /// Hooks mode: the service's pidfile on this host. Pass it only when the target is
    /// this host's own service (a former incarnation of this node): another node's
    /// service is not the one this pidfile names.
    pub pidfile: Option<PathBuf>,
    /// When the target recorded no service pid, group or cgroup: also signal whatever
    /// listens on `target.port` (`warden fence-local` does this on the old active's host).
    /// Never set it for a port this host's own service may use.
    pub port_fallback: bool,
    /// The target ran on this boot of this machine but in another pid namespace (this
    /// one): its recorded pids name other processes here, or none. Only its recorded
    /// cgroup is acted on, and only once every process in it is seen to belong to that
    /// namespace; the recorded pids are reported as unverifiable.
    pub foreign_pid_ns: Option<u64>,
}

impl TerminateOptions {
    /// Only the recorded processes, with `signal`.
    pub fn new(signal: Signal) -> Self {
        TerminateOptions {
            signal,
            pidfile: None,
            port_fallback: false,
            foreign_pid_ns: None,
        }
    }
}

/// One thing to signal, identified so that a recycled pid is never mistaken for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    /// A process group, signalled with `killpg`. `what` says whose ("service group").
    Group { pgid: u32, what: String },
    /// One process and the start time it had when it was identified.
    Process {
        pid: u32,
        start_time: u64,
        what: String,
    },
    /// The service's cgroup: every process in it and below, however it left the process
    /// group (`setsid()`, a double fork), killed at once through `cgroup.kill` whatever
    /// the configured signal (SPEC §5); gone once the cgroup is unpopulated or removed.
    Cgroup { cgroup: Cgroup, what: String },
}

impl Subject {
    /// The pids of this subject that are still alive (zombies do not count).
    pub fn alive_pids(&self) -> Vec<u32> {
        match self {
            Subject::Group { pgid, .. } => group_members(*pgid),
            Subject::Process {
                pid, start_time, ..
            } => {
                if is_running(*pid, Some(*start_time)) {
                    vec![*pid]
                } else {
                    Vec::new()
                }
            }
            Subject::Cgroup { cgroup, .. } => cgroup
                .pids()
                .unwrap_or_default()
                .into_iter()
                .filter(|&pid| is_running(pid, None))
                .collect(),
        }
    }

    /// Whether nothing of this subject runs any more. For a cgroup the kernel's own
    /// `populated` flag decides, so a process that a scan of `cgroup.procs` missed still
    /// counts; a cgroup whose state cannot be read is not gone.
    pub fn is_gone(&self) -> bool {
        match self {
            Subject::Cgroup { cgroup, .. } => matches!(cgroup.is_populated(), Ok(false)),
            _ => self.alive_pids().is_empty(),
        }
    }

    fn send(&self, signal: Signal) -> nix::Result<()> {
        match self {
            Subject::Group { pgid, .. } => killpg(Pid::from_raw(*pgid as i32), signal),
            Subject::Process { pid, .. } => kill(Pid::from_raw(*pid as i32), signal),
            Subject::Cgroup { cgroup, .. } => cgroup
                .kill()
                .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EINVAL))),
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Group { pgid, what } => write!(f, "{what} {pgid}"),
            Subject::Process { pid, what, .. } => write!(f, "{what} {pid}"),
            Subject::Cgroup { cgroup, what } => write!(f, "{what} {}", cgroup.relative()),
        }
    }
}

/// What of an incarnation runs on this host right now, found without signalling anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Survey {
    /// Processes and groups that are the incarnation's and still alive.
    pub subjects: Vec<Subject>,
    /// Recorded processes that are gone, or whose pid now belongs to another process.
    pub gone: Vec<String>,
    /// Processes that may be the incarnation's but cannot be identified safely, or a
    /// record that cannot be acted on. Any of these means "not verified fenced".
    pub problems: Vec<String>,
}

impl Survey {
    /// Adds a subject unless one already added covers it (the same process, or the group
    /// it belongs to), so that each process is signalled and reported once.
    fn add(&mut self, subject: Subject) {
        let covered = match &subject {
            Subject::Group { pgid, .. } => self
                .subjects
                .iter()
                .any(|s| matches!(s, Subject::Group { pgid: g, .. } if g == pgid)),
            Subject::Process { pid, .. } => {
                let group = pgid(*pid);
                self.subjects.iter().any(|s| match s {
                    Subject::Process { pid: p, .. } => p == pid,
                    Subject::Group { pgid: g, .. } => Some(*g) == group,
                    // Signalled on its own as well: the cgroup is killed with SIGKILL
                    // only, and a pid check is independent evidence.
                    Subject::Cgroup { .. } => false,
                })
            }
            Subject::Cgroup { cgroup, .. } => self
                .subjects
                .iter()
                .any(|s| matches!(s, Subject::Cgroup { cgroup: c, .. } if c == cgroup)),
        };
        if !covered {
            self.subjects.push(subject);
        }
    }

    /// One line: what would be signalled, what is gone, what cannot be verified.
    pub fn describe(&self, signal: Signal) -> String {
        let mut parts = Vec::new();
        let (cgroups, signalled): (Vec<&Subject>, Vec<&Subject>) = self
            .subjects
            .iter()
            .partition(|s| matches!(s, Subject::Cgroup { .. }));
        if self.subjects.is_empty() {
            parts.push("nothing of it runs on this host".to_string());
        }
        if !signalled.is_empty() {
            let list: Vec<String> = signalled
                .iter()
                .map(|s| format!("{s} (pids {})", join_pids(&s.alive_pids())))
                .collect();
            parts.push(format!(
                "would send {} to {}",
                signal.as_str(),
                list.join(", ")
            ));
        }
        for s in cgroups {
            if let Subject::Cgroup { cgroup, .. } = s {
                parts.push(format!(
                    "would kill every process of {s} (pids {}) by writing 1 to {}",
                    join_pids(&s.alive_pids()),
                    cgroup.dir().join("cgroup.kill").display()
                ));
            }
        }
        if !self.gone.is_empty() {
            parts.push(format!("already gone: {}", self.gone.join(", ")));
        }
        if !self.problems.is_empty() {
            parts.push(format!("cannot verify: {}", self.problems.join("; ")));
        }
        parts.join("; ")
    }
}

/// Finds what of `target`'s incarnation still runs on this host. Reads `/proc` and the
/// cgroup hierarchy, and may take a while on a busy host: async callers run it on a
/// blocking thread ([`terminate_incarnation`] does).
///
/// Identity rules, so that only the recorded incarnation is ever signalled:
/// - the service group `service_pgid`: if its leader (pid = pgid) is alive with a start
///   time other than the recorded service's, the group is gone and its pgid was reused;
///   if the leader matches, the group is the recorded one; if the leader is gone, see
///   `survey_group` for when its remaining members count as the service's.
/// - `service_pid` and the warden `pid`: only when alive with the recorded start time. A
///   record without a warden pid cannot be verified fenced.
/// - `service_cgroup`: every process in it is the service's; fenced once it is
///   unpopulated or removed.
/// - the pidfile's pid (hooks mode) and port listeners: see [`TerminateOptions`].
/// - a promoted record (with an epoch) that names no service process at all cannot be
///   verified fenced by finding its warden gone: its service may still serve. Only
///   listeners found on its port (the port fallback) stand in for it.
///
/// The caller must have established that the target ran on this boot of this machine
/// ([`whereabouts`]): every rule above reads pids and start times as this boot's.
pub fn survey(target: &Target, opts: &TerminateOptions) -> Survey {
    let mut s = Survey::default();
    let me = std::process::id();
    let my_pgid = pgid(me);
    let service_named = target.service_pid.is_some()
        || target.service_pgid.is_some()
        || target.service_cgroup.is_some();

    if let Some(recorded) = opts.foreign_pid_ns {
        // The recorded pids were numbers in another pid namespace: here they name other
        // processes or none, and "none" must not pass for "gone".
        let pids: Vec<String> = [
            target.pid.map(|p| format!("warden pid {p}")),
            target.service_pid.map(|p| format!("service pid {p}")),
            target.service_pgid.map(|p| format!("service group {p}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        let here = pid_ns().map_or_else(|_| "unknown".to_string(), |ns| ns.to_string());
        s.problems.push(format!(
            "the incarnation ran in pid namespace {recorded} (a container on this machine), \
             this process runs in pid namespace {here}, where its pids ({}) name other \
             processes or none, so they cannot be checked from here; run fence-local inside \
             that container (ssh into it, or command = \"nsenter --target <a pid in it> --all \
             warden fence-local\"), or confirm by hand with `warden fence --confirm`",
            if pids.is_empty() {
                "none recorded".to_string()
            } else {
                pids.join(", ")
            }
        ));
        if let Some(relative) = &target.service_cgroup {
            survey_cgroup(target, relative, opts, &mut s);
        }
        return s;
    }

    if let Some(pgid) = target.service_pgid {
        survey_group(target, pgid, me, my_pgid, &mut s);
    }
    if let Some(pid) = target.service_pid {
        // Also when a group was recorded: the service may have left its group since.
        survey_recorded_pid("service pid", pid, target.service_start_time, me, &mut s);
    }
    match target.pid {
        Some(pid) => survey_recorded_pid("warden pid", pid, target.start_time, me, &mut s),
        // Fenced means the old warden cannot wake up and act; that cannot be verified
        // without knowing which process it was.
        None => s.problems.push(
            "the record names no warden pid, so warden cannot verify that the old warden is \
             gone; confirm by hand with `warden fence --confirm` once it is"
                .to_string(),
        ),
    }
    if let Some(path) = &opts.pidfile {
        survey_pidfile(target, path, me, &mut s);
    }
    let mut listeners_found = false;
    if opts.port_fallback && !service_named {
        match target.port {
            Some(port) => {
                let listeners = listeners_on_port(port);
                if listeners.is_empty() {
                    s.gone.push(format!("nothing listens on port {port}"));
                }
                for pid in listeners {
                    // No start time was recorded for a listener: whatever listens on the
                    // old active's service port is the service that must stop serving.
                    add_observed(&format!("listener on port {port}, pid"), pid, me, &mut s);
                    listeners_found = true;
                }
            }
            None => s.problems.push(
                "the record names no service pid, group, cgroup or port, so the service cannot \
                 be found"
                    .to_string(),
            ),
        }
    }
    if let Some(relative) = &target.service_cgroup {
        survey_cgroup(target, relative, opts, &mut s);
    }
    if let Some(epoch) = target.epoch {
        // A promoted node ran its service as active. With nothing that names the service,
        // "the warden is gone" says nothing about the service: in hooks mode it runs on
        // by design, and a spawned one may have outlived its warden.
        if !service_named && opts.pidfile.is_none() && !listeners_found {
            let port = match (opts.port_fallback, target.port) {
                (true, Some(port)) => format!(" and nothing listens on its port {port}"),
                _ => String::new(),
            };
            s.problems.push(format!(
                "the record names no service process, so warden cannot verify that the old \
                 service is down (it was promoted, epoch {epoch}; no service pid, group or \
                 cgroup was recorded{port}); make sure it is stopped on its host, then run \
                 `warden fence --confirm`"
            ));
        }
    }
    s
}

/// Why the cgroup path `relative` that `target` recorded cannot be looked up from this
/// process, if it cannot: a cgroup path is relative to the root of the recorder's cgroup
/// namespace, so from another one (a container's, or the host's when the recorder ran in
/// a container) it names another cgroup or none, and "none" must not pass for "removed".
/// A record of an older warden names no cgroup namespace: it is taken as the host's own
/// only when both sides run in the host's initial namespaces.
pub fn cgroup_out_of_view(target: &Target, relative: &str) -> Option<String> {
    let advice = "so whether the service still runs in it is unknown (never taken for \
                  removed); fence it from the recorder's cgroup namespace (fence-local run \
                  on its host outside any container the recorder did not share), or confirm \
                  by hand with `warden fence --confirm` once it is down";
    let Some(here) = cgroup::namespace() else {
        return Some(format!(
            "this process's cgroup namespace cannot be read (/proc/self/ns/cgroup), so the \
             recorded service cgroup {relative} cannot be looked up safely, {advice}"
        ));
    };
    match target.cgroup_ns {
        Some(recorded) if recorded == here => None,
        Some(recorded) => Some(format!(
            "the service cgroup {relative} was recorded in cgroup namespace {recorded}, and \
             this process runs in cgroup namespace {here}, where that path names another \
             cgroup or none, {advice}"
        )),
        None if here == cgroup::INITIAL_NAMESPACE
            && target.pid_ns == Some(INITIAL_PID_NAMESPACE) =>
        {
            None
        }
        None => Some(format!(
            "the record names service cgroup {relative} but not the cgroup namespace it was \
             recorded in (written by an older warden), and this process runs in cgroup \
             namespace {here}, which may not be the recorder's, {advice}"
        )),
    }
}

/// The recorded service cgroup (`relative`, as in `/proc/PID/cgroup`): a subject while it
/// holds processes, gone once it is empty or removed; unknown when it cannot be looked up
/// from this cgroup namespace ([`cgroup_out_of_view`]).
pub(super) fn survey_cgroup(
    target: &Target,
    relative: &str,
    opts: &TerminateOptions,
    s: &mut Survey,
) {
    let what = "service cgroup".to_string();
    if let Some(why) = cgroup_out_of_view(target, relative) {
        s.problems.push(why);
        return;
    }
    let Some(cgroup) = Cgroup::find(relative) else {
        s.problems.push(match cgroup::unified_mount() {
            None => format!(
                "the record names service cgroup {relative}, but this host has no cgroup v2 \
                 hierarchy mounted, so it cannot be checked; mount cgroup2 or confirm by hand"
            ),
            Some(mount) => format!(
                "the recorded service cgroup {relative:?} is not a cgroup path this host can \
                 see below {} (a path outside this mount's root, or with `..`), so it cannot be \
                 checked",
                mount.display()
            ),
        });
        return;
    };
    if cgroup.is_root() {
        s.problems.push(format!(
            "the recorded service cgroup {relative} is the root of the hierarchy, which holds \
             every process of this host; refusing to kill it"
        ));
        return;
    }
    if cgroup::own().is_some_and(|own| cgroup.contains(&own)) {
        s.problems.push(format!(
            "the recorded service cgroup {relative} holds this very process; refusing to kill it"
        ));
        return;
    }
    match cgroup.is_populated() {
        Err(e) => s.problems.push(format!(
            "cannot read whether service cgroup {relative} ({}) holds processes: {e}; run \
             warden as root",
            cgroup.dir().display()
        )),
        Ok(false) if cgroup.exists() => s.gone.push(format!("{what} {relative} (empty)")),
        Ok(false) => s
            .gone
            .push(format!("{what} {relative} (removed: its processes ended)")),
        Ok(true) => {
            if let Some(recorded) = opts.foreign_pid_ns {
                // From another pid namespace, a cgroup path could resolve differently (a
                // cgroup namespace); act only on a cgroup whose processes all live in the
                // recorded pid namespace, which makes it the incarnation's.
                let pids = cgroup.pids().unwrap_or_default();
                let strangers: Vec<u32> = pids
                    .iter()
                    .copied()
                    .filter(|&p| is_running(p, None) && pid_ns_of(p) != Some(recorded))
                    .collect();
                if !strangers.is_empty() {
                    s.problems.push(format!(
                        "cgroup {relative} holds pids {} that are not in the recorded pid \
                         namespace {recorded}, so it may not be the service's cgroup; not \
                         touched",
                        join_pids(&strangers)
                    ));
                    return;
                }
            }
            s.add(Subject::Cgroup { cgroup, what });
        }
    }
}

pub(super) fn survey_group(
    target: &Target,
    pgid: u32,
    me: u32,
    my_pgid: Option<u32>,
    s: &mut Survey,
) {
    if pgid <= 1 {
        s.problems.push(format!(
            "the recorded service group {pgid} is not a valid process group"
        ));
        return;
    }
    if Some(pgid) == my_pgid || pgid == me {
        s.problems.push(format!(
            "the recorded service group {pgid} is this warden's own group; refusing to signal it"
        ));
        return;
    }
    let subject = Subject::Group {
        pgid,
        what: "service group".to_string(),
    };
    match stat(pgid).filter(|l| !l.is_exited()) {
        Some(leader) => {
            // The leader's identity is known only when the leader is the recorded service
            // (spawn mode puts the service at the head of its own group).
            let leader_is_service = target.service_pid.unwrap_or(pgid) == pgid;
            match (leader_is_service, target.service_start_time) {
                (true, Some(t)) if t == leader.start_time => s.add(subject),
                (true, Some(t)) => s.gone.push(format!(
                    "service group {pgid} (pid {pgid} now belongs to a process that started at tick {}, \
                     not {t}, so the recorded group ended and its id was reused)",
                    leader.start_time
                )),
                (false, Some(t))
                    if target
                        .service_pid
                        .and_then(stat)
                        .is_some_and(|p| !p.is_exited() && p.start_time == t && p.pgid == pgid) =>
                {
                    // The recorded service itself is still in that group.
                    s.add(subject)
                }
                _ => s.problems.push(format!(
                    "process {pgid} leads group {pgid}, but no start time was recorded for it, \
                     so warden cannot tell whether it is the old service"
                )),
            }
        }
        None => survey_leaderless_group(target, pgid, subject, s),
    }
}

/// The recorded service group's leader is gone. Whether the processes left in group `pgid`
/// are the service's:
///
/// Linux hands out no pid that is still in use as a process group id, so while the
/// recorded group keeps a member, no new group `pgid` can exist, and its members are the
/// recorded group's leftovers. But the group may have emptied since the record was
/// written (the whole service ended), freeing the id; after a wrap of the pid counter a
/// new process with pid `pgid` can lead a new, unrelated group, and its members look the
/// same. That is told apart as far as the record allows:
/// - with a recorded cgroup, membership decides: members inside it are the service's
///   (the cgroup subject kills them), members outside are not (a service's descendants
///   stay in its cgroup), and are left alone.
/// - without one, a member that started before the recorded leader cannot descend from
///   it, so the group is not provably the recorded one: not touched, not fenced. When
///   every member started at or after the recorded leader, they are taken for the
///   service's leftovers and signalled. What remains possible is a recycled group whose
///   members all started after the recorded service; then the old group had ended
///   (the verdict "fenced" is still right), and only those processes are hit. This runs
///   only where the caller checked boot id, machine id and pid namespace
///   ([`whereabouts`]), so start times compare within one boot and one pid namespace.
/// - without a recorded start time nothing tells them apart: not touched, not fenced.
pub(super) fn survey_leaderless_group(
    target: &Target,
    pgid: u32,
    subject: Subject,
    s: &mut Survey,
) {
    let members = group_members(pgid);
    if members.is_empty() {
        s.gone.push(format!("service group {pgid}"));
        return;
    }
    if let Some(relative) = &target.service_cgroup {
        let outside: Vec<u32> = members
            .iter()
            .copied()
            .filter(|&pid| {
                let own = cgroup::of_pid(pid);
                !Cgroup::at(Path::new("/"), relative)
                    .zip(own)
                    .is_some_and(|(c, own)| c.contains(&own))
            })
            .collect();
        if !outside.is_empty() {
            s.gone.push(format!(
                "service group {pgid} (its leader is gone; pids {} left in the group are \
                 outside the service's cgroup {relative}, so they are not the service's and \
                 were not touched)",
                join_pids(&outside)
            ));
        }
        // Those inside are the cgroup's to kill (survey_cgroup).
        return;
    }
    let Some(recorded) = target.service_start_time else {
        s.problems.push(format!(
            "the leader of service group {pgid} is gone and pids {} remain in the group, but no \
             service start time was recorded, so warden cannot tell whether they are the old \
             service's; they were not touched: stop them by hand if they are, then run \
             `warden fence --confirm`",
            join_pids(&members)
        ));
        return;
    };
    let older: Vec<u32> = members
        .iter()
        .copied()
        .filter(|&pid| stat(pid).is_some_and(|p| p.start_time < recorded))
        .collect();
    if older.is_empty() {
        s.add(subject);
    } else {
        s.problems.push(format!(
            "the leader of service group {pgid} is gone, and pids {} in the group started before \
             the recorded service (tick {recorded}), so they cannot descend from it: the group \
             id may have been reused; nothing in it was touched. Check them by hand, then run \
             `warden fence --confirm`",
            join_pids(&older)
        ));
    }
}

pub(super) fn survey_recorded_pid(
    what: &str,
    pid: u32,
    recorded: Option<u64>,
    me: u32,
    s: &mut Survey,
) {
    if pid <= 1 {
        s.problems
            .push(format!("the recorded {what} {pid} is not a valid pid"));
        return;
    }
    let Some(now) = stat(pid).filter(|p| !p.is_exited()) else {
        s.gone.push(format!("{what} {pid}"));
        return;
    };
    match recorded {
        Some(t) if t != now.start_time => s.gone.push(format!(
            "{what} {pid} (the pid now belongs to a process that started at tick {}, not {t})",
            now.start_time
        )),
        Some(t) if pid == me => s.problems.push(format!(
            "the recorded {what} {pid} (tick {t}) is this very process; refusing to signal itself"
        )),
        Some(t) => s.add(Subject::Process {
            pid,
            start_time: t,
            what: what.to_string(),
        }),
        None => s.problems.push(format!(
            "{what} {pid} is running, but no start time was recorded for it, so warden cannot \
             tell whether it is the old process or a new one with a recycled pid"
        )),
    }
}

/// A pidfile is a line or a few; anything larger is not one.
pub(super) const PIDFILE_MAX_BYTES: u64 = 64 * 1024;

pub(super) fn survey_pidfile(target: &Target, path: &Path, me: u32, s: &mut Survey) {
    let text = match crate::files::read_regular_file(path, PIDFILE_MAX_BYTES) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            s.gone.push(format!(
                "service (pidfile {} does not exist)",
                path.display()
            ));
            return;
        }
        Err(e) => {
            s.problems
                .push(format!("cannot read the pidfile {}: {e}", path.display()));
            return;
        }
    };
    // The pid is the first line (PostgreSQL's postmaster.pid and many daemons' pidfiles
    // go on with more lines).
    let first = text.lines().next().unwrap_or("").trim();
    let Ok(pid) = first.parse::<u32>() else {
        s.problems.push(format!(
            "the pidfile {} does not hold a pid on its first line (it holds {:?})",
            path.display(),
            first.chars().take(64).collect::<String>()
        ));
        return;
    };
    let what = format!("service (pidfile {}) pid", path.display());
    if target.service_pid == Some(pid) && target.service_start_time.is_some() {
        // The recorded service: its start time tells a recycled pid apart.
        survey_recorded_pid(&what, pid, target.service_start_time, me, s);
    } else {
        // No start time to compare. The pidfile is the service's own statement of which
        // process it is on this host right now; trusting it risks only a stale pidfile
        // whose pid was reused, while distrusting it would leave a service whose role is
        // unknown serving next to the new active.
        add_observed(&what, pid, me, s);
    }
}

/// Adds a process identified by something other than a recorded start time, pinned to the
/// start time it has now so that the wait below is not fooled by a later reuse of its pid.
pub(super) fn add_observed(what: &str, pid: u32, me: u32, s: &mut Survey) {
    if pid <= 1 || pid == me {
        s.problems
            .push(format!("{what} {pid} is not a process warden may signal"));
        return;
    }
    match stat(pid).filter(|p| !p.is_exited()) {
        Some(p) => s.add(Subject::Process {
            pid,
            start_time: p.start_time,
            what: what.to_string(),
        }),
        None => s.gone.push(format!("{what} {pid}")),
    }
}

/// What [`terminate_incarnation`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TerminateReport {
    /// What was signalled, e.g. `service group 1234`.
    pub signalled: Vec<String>,
    /// Cgroups whose every process was killed through `cgroup.kill`, e.g. `service cgroup
    /// /system.slice/warden.service/service-42`.
    pub killed: Vec<String>,
    /// Recorded processes that were already gone (or whose pid was recycled).
    pub gone: Vec<String>,
    /// What could not be identified or signalled; non-empty means not fenced.
    pub problems: Vec<String>,
    /// What still ran when the wait ended, with its pids; non-empty means not fenced.
    pub remaining: Vec<String>,
    /// The pids of `remaining`.
    pub remaining_pids: Vec<u32>,
    /// The signal sent, and how long the wait for the processes to go lasted.
    pub signal: Option<Signal>,
    pub waited: Duration,
}

impl TerminateReport {
    /// Verified: nothing of the incarnation remains and nothing was left unidentified.
    pub fn is_fenced(&self) -> bool {
        self.problems.is_empty() && self.remaining.is_empty()
    }

    /// One line for the log and the fence report.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if !self.remaining.is_empty() {
            parts.push(format!(
                "still running {}ms after {}: {}",
                self.waited.as_millis(),
                self.signal.map_or("the signal", |s| s.as_str()),
                self.remaining.join(", ")
            ));
        }
        if !self.problems.is_empty() {
            parts.push(self.problems.join("; "));
        }
        if !self.signalled.is_empty() {
            parts.push(format!("signalled {}", self.signalled.join(", ")));
        }
        if !self.killed.is_empty() {
            parts.push(format!(
                "killed every process of {} (cgroup.kill)",
                self.killed.join(", ")
            ));
        }
        if !self.gone.is_empty() {
            parts.push(format!("already gone: {}", self.gone.join(", ")));
        }
        if parts.is_empty() {
            parts.push("the record names no process of the incarnation".to_string());
        }
        parts.join("; ")
    }
}

/// Signals what remains of `target`'s incarnation on this host (see [`survey`] for how
/// each process is identified), then waits until none of it remains or `deadline`
/// passes. Processes already gone count as fenced; zombies count as gone.
///
/// Shared by the `signal` fence method and `warden fence-local`, so that both kill
/// exactly the same processes by the same rules.
///
/// Every scan of `/proc` and of the cgroup hierarchy runs on tokio's blocking pool, so
/// that a slow scan on a busy host never holds up a runtime worker (the daemon's
/// lease-end kill runs on one). Signals are sent once, from this future, right after
/// the survey; the wait only looks. So dropping the future (an abandoned fence) stops it
/// at its next await, and a scan still running on the pool then only reads.
pub async fn terminate_incarnation(
    target: &Target,
    opts: &TerminateOptions,
    deadline: Instant,
) -> TerminateReport {
    let survey = {
        let (t, o) = (target.clone(), opts.clone());
        match blocking(move || survey(&t, &o)).await {
            Ok(survey) => survey,
            Err(why) => {
                return TerminateReport {
                    problems: vec![why],
                    signal: Some(opts.signal),
                    ..TerminateReport::default()
                }
            }
        }
    };
    let mut report = TerminateReport {
        gone: survey.gone,
        problems: survey.problems,
        signal: Some(opts.signal),
        ..TerminateReport::default()
    };
    let started = Instant::now();
    let mut sent = Vec::new();
    for subject in survey.subjects {
        let cgroup = matches!(subject, Subject::Cgroup { .. });
        let signal = if cgroup { Signal::SIGKILL } else { opts.signal };
        match subject.send(signal) {
            Ok(()) => {
                if !matches!(signal, Signal::SIGKILL | Signal::SIGCONT) {
                    // A stopped process keeps any other signal pending until it is
                    // continued; without this a SIGSTOPped warden would never exit.
                    let _ = subject.send(Signal::SIGCONT);
                }
                if cgroup {
                    tracing::info!(
                        target = target.label(),
                        "killed every process of {subject} through cgroup.kill"
                    );
                    report.killed.push(subject.to_string());
                } else {
                    tracing::info!(
                        target = target.label(),
                        signal = signal.as_str(),
                        "sent {} to {subject}",
                        signal.as_str()
                    );
                    report.signalled.push(subject.to_string());
                }
                sent.push(subject);
            }
            // Exited between the survey and the signal.
            Err(Errno::ESRCH) => report.gone.push(subject.to_string()),
            Err(Errno::EPERM | Errno::EACCES) if cgroup => report.problems.push(format!(
                "not permitted to kill {subject} (writing cgroup.kill was refused); run warden \
                 as root, or give its user write access to that cgroup (systemd: Delegate=yes)"
            )),
            Err(Errno::EPERM) => report.problems.push(format!(
                "not permitted to signal {subject}: it belongs to another user; run warden as \
                 root or as the service's user"
            )),
            Err(e) => report
                .problems
                .push(format!("cannot signal {subject}: {e}")),
        }
    }
    if !report.problems.is_empty() {
        // Not fenced whatever the others do; do not hold the chain up waiting for them.
        return remaining(report, sent).await;
    }
    loop {
        report.waited = started.elapsed();
        let all_gone = {
            let sent = sent.clone();
            blocking(move || sent.iter().all(Subject::is_gone)).await
        };
        match all_gone {
            Ok(true) => return report,
            Ok(false) => {}
            Err(why) => {
                report.problems.push(why);
                return remaining(report, sent).await;
            }
        }
        if Instant::now() >= deadline {
            return remaining(report, sent).await;
        }
        tokio::time::sleep(POLL_INTERVAL.min(deadline.saturating_duration_since(Instant::now())))
            .await;
    }
}

/// Runs a scan of `/proc` or the cgroup hierarchy on tokio's blocking pool. `Err` says why
/// it produced no answer (the scan panicked, or the runtime is shutting down), which
/// callers count as "not verified".
async fn blocking<T: Send + 'static>(
    scan: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(scan).await.map_err(|e| {
        format!("the scan of /proc for the incarnation's processes did not finish: {e}")
    })
}

async fn remaining(mut report: TerminateReport, sent: Vec<Subject>) -> TerminateReport {
    let still = blocking(move || {
        sent.iter()
            .filter(|s| !s.is_gone())
            .map(|s| (s.to_string(), s.alive_pids()))
            .collect::<Vec<_>>()
    })
    .await;
    match still {
        Ok(still) => {
            for (subject, pids) in still {
                report
                    .remaining
                    .push(format!("{subject} (pids {})", join_pids(&pids)));
                report.remaining_pids.extend(pids);
            }
        }
        Err(why) => report.problems.push(why),
    }
    report
}

/// `"12 34"`, or `"none left"` for an empty list.
pub(crate) fn join_pids(pids: &[u32]) -> String {
    if pids.is_empty() {
        return "none left".to_string();
    }
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}
