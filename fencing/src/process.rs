//! Process identity on Linux, read from `/proc`, and the one routine that terminates an
//! old incarnation on this host.
//!
//! A pid alone does not name a process: pids are recycled. Every record therefore carries
//! the process's start time (clock ticks since boot, `/proc/PID/stat` field 22), and
//! nothing here signals a recorded pid without first checking that the process behind it
//! started at the recorded time. Used by the `signal` fence method, by `warden
//! fence-local` (the remote half of `ssh` fencing) and by the daemon when it records its
//! own identity.

use crate::Target;
use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::time::Instant;

/// How often [`terminate_incarnation`] looks at `/proc` while waiting for processes to go.
/// Short, because a standby waits on this before it promotes; a scan of `/proc` costs
/// well under a millisecond on a normal host.
pub const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// This host's boot id (`/proc/sys/kernel/random/boot_id`): a random UUID the kernel picks
/// at every boot, so a record carrying another one was written before the last reboot.
pub fn boot_id() -> io::Result<String> {
    let path = "/proc/sys/kernel/random/boot_id";
    let id = fs::read_to_string(path)?.trim().to_string();
    if id.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{path} is empty; is /proc mounted?"),
        ));
    }
    Ok(id)
}

/// This machine's id (`/etc/machine-id`, or `/var/lib/dbus/machine-id` where only that
/// exists): stable across reboots, different on every installed machine or container
/// image instance (systemd writes it at first boot), normalized to lower case.
pub fn machine_id() -> io::Result<String> {
    let mut last = None;
    for path in ["/etc/machine-id", "/var/lib/dbus/machine-id"] {
        match fs::read_to_string(path) {
            Ok(text) => {
                let id = text.trim().to_ascii_lowercase();
                if !id.is_empty() {
                    return Ok(id);
                }
                last = Some(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{path} is empty"),
                ));
            }
            Err(e) => last = Some(io::Error::new(e.kind(), format!("{path}: {e}"))),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no machine id")))
}

/// The inode of this process's pid namespace (`/proc/self/ns/pid`): processes in other
/// pid namespaces (another container on the same kernel) are not visible by our pids.
pub fn pid_ns() -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(fs::metadata("/proc/self/ns/pid")?.ino())
}

/// The fields of `/proc/PID/stat` that fencing needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 3: `R`, `S`, `D`, `T`, `Z` (zombie), `X` (dead), ...
    pub state: char,
    /// Field 4.
    pub ppid: u32,
    /// Field 5: the process group.
    pub pgid: u32,
    /// Field 22: start time in clock ticks since boot.
    pub start_time: u64,
}

impl ProcStat {
    /// A zombie or dead process has exited: it runs no code and holds no resources but
    /// its pid. One whose parent died lingers until init reaps it, and `kill -0` still
    /// finds it, so liveness must be read from the state, never from `kill`.
    pub fn is_exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses the text of `/proc/PID/stat`. The command name (field 2) is in parentheses and
/// may itself contain spaces and parentheses, so the fields are counted from the LAST
/// `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 of the file.
    let field = |n: usize| fields.get(n - 3).copied();
    Some(ProcStat {
        state: field(3)?.chars().next()?,
        ppid: field(4)?.parse().ok()?,
        pgid: field(5)?.parse().ok()?,
        start_time: field(22)?.parse().ok()?,
    })
}

/// `/proc/PID/stat` of a process, or `None` when there is no such process (or `/proc`
/// cannot be read).
pub fn stat(pid: u32) -> Option<ProcStat> {
    if pid == 0 {
        return None;
    }
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The start time of a process in clock ticks since boot (`/proc/PID/stat` field 22).
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|s| s.start_time)
}

/// The process group of a process.
pub fn pgid(pid: u32) -> Option<u32> {
    stat(pid).map(|s| s.pgid)
}

/// Whether `pid` is a live process (not a zombie) and, if `start_time` is given, the one
/// that started at that time rather than a later process that got the recycled pid.
pub fn is_running(pid: u32, start_time: Option<u64>) -> bool {
    match stat(pid) {
        Some(s) => !s.is_exited() && !matches!(start_time, Some(t) if t != s.start_time),
        None => false,
    }
}

/// Every pid that is a process (not a thread: `/proc` lists only thread group leaders at
/// its top level).
fn all_pids() -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// The live (non-zombie) processes whose process group is `pgid`, sorted.
pub fn group_members(pgid: u32) -> Vec<u32> {
    if pgid == 0 {
        return Vec::new();
    }
    let mut pids: Vec<u32> = all_pids()
        .into_iter()
        .filter(|&pid| stat(pid).is_some_and(|s| s.pgid == pgid && !s.is_exited()))
        .collect();
    pids.sort_unstable();
    pids
}

/// The socket inodes in LISTEN state (`st` = `0A`) on local port `port`, from the text of
/// `/proc/net/tcp` or `/proc/net/tcp6`.
pub fn parse_listen_inodes(text: &str, port: u16) -> Vec<u64> {
    const TCP_LISTEN: &str = "0A";
    text.lines()
        .skip(1) // the header
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let local_port = f.get(1)?.rsplit(':').next()?;
            let local_port = u16::from_str_radix(local_port, 16).ok()?;
            if local_port != port || *f.get(3)? != TCP_LISTEN {
                return None;
            }
            f.get(9)?.parse().ok().filter(|&inode| inode != 0)
        })
        .collect()
}

/// The processes holding a listening TCP socket (IPv4 or IPv6) on `port`, sorted.
///
/// Reads `/proc/net/tcp{,6}` and matches their inodes against the `socket:[INODE]` links
/// in `/proc/*/fd`, so that no `fuser` or `ss` is needed on the host. Only this network
/// namespace is visible, and only the file descriptors of processes this process may
/// inspect: run as root (or as the service's user) to see the service's sockets.
pub fn listeners_on_port(port: u16) -> Vec<u32> {
    let mut inodes: Vec<u64> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        // tcp6 is absent when IPv6 is disabled; nothing listens there then.
        .filter_map(|p| fs::read_to_string(p).ok())
        .flat_map(|text| parse_listen_inodes(&text, port))
        .collect();
    if inodes.is_empty() {
        return Vec::new();
    }
    inodes.sort_unstable();
    let mut pids: Vec<u32> = all_pids()
        .into_iter()
        .filter(|pid| {
            let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
                return false;
            };
            fds.filter_map(|fd| fs::read_link(fd.ok()?.path()).ok())
                .filter_map(|link| socket_inode(&link))
                .any(|inode| inodes.binary_search(&inode).is_ok())
        })
        .collect();
    pids.sort_unstable();
    pids
}

fn socket_inode(link: &Path) -> Option<u64> {
    link.to_str()?
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

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
    /// When the target recorded neither a service pid nor a service group: also signal
    /// whatever listens on `target.port` (`warden fence-local` does this on the old
    /// active's host). Never set it for a port this host's own service may use.
    pub port_fallback: bool,
}

impl TerminateOptions {
    /// Only the recorded processes, with `signal`.
    pub fn new(signal: Signal) -> Self {
        TerminateOptions {
            signal,
            pidfile: None,
            port_fallback: false,
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
        }
    }

    fn send(&self, signal: Signal) -> nix::Result<()> {
        match self {
            Subject::Group { pgid, .. } => killpg(Pid::from_raw(*pgid as i32), signal),
            Subject::Process { pid, .. } => kill(Pid::from_raw(*pid as i32), signal),
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Group { pgid, what } => write!(f, "{what} {pgid}"),
            Subject::Process { pid, what, .. } => write!(f, "{what} {pid}"),
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
                })
            }
        };
        if !covered {
            self.subjects.push(subject);
        }
    }

    /// One line: what would be signalled, what is gone, what cannot be verified.
    pub fn describe(&self, signal: Signal) -> String {
        let mut parts = Vec::new();
        if self.subjects.is_empty() {
            parts.push("nothing of it runs on this host".to_string());
        } else {
            let list: Vec<String> = self
                .subjects
                .iter()
                .map(|s| format!("{s} (pids {})", join_pids(&s.alive_pids())))
                .collect();
            parts.push(format!(
                "would send {} to {}",
                signal.as_str(),
                list.join(", ")
            ));
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

/// Finds what of `target`'s incarnation still runs on this host.
///
/// Identity rules, so that only the recorded incarnation is ever signalled:
/// - the service group `service_pgid`: if its leader (pid = pgid) is alive with a start
///   time other than the recorded service's, the group is gone and its pgid was reused;
///   if the leader matches, the group is the recorded one; if the leader is gone but
///   members remain, they are the old group's leftovers, since Linux does not hand out a
///   pid that is still some group's id.
/// - `service_pid` and the warden `pid`: only when alive with the recorded start time. A
///   record without a warden pid cannot be verified fenced.
/// - the pidfile's pid (hooks mode) and port listeners: see [`TerminateOptions`].
pub fn survey(target: &Target, opts: &TerminateOptions) -> Survey {
    let mut s = Survey::default();
    let me = std::process::id();
    let my_pgid = pgid(me);

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
            "the record names no warden pid, so warden cannot verify that the old warden is gone"
                .to_string(),
        ),
    }
    if let Some(path) = &opts.pidfile {
        survey_pidfile(target, path, me, &mut s);
    }
    if opts.port_fallback && target.service_pid.is_none() && target.service_pgid.is_none() {
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
                }
            }
            None => s.problems.push(
                "the record names no service pid, group or port, so the service cannot be found"
                    .to_string(),
            ),
        }
    }
    s
}

fn survey_group(target: &Target, pgid: u32, me: u32, my_pgid: Option<u32>, s: &mut Survey) {
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
        None => {
            if group_members(pgid).is_empty() {
                s.gone.push(format!("service group {pgid}"));
            } else {
                s.add(subject);
            }
        }
    }
}

fn survey_recorded_pid(what: &str, pid: u32, recorded: Option<u64>, me: u32, s: &mut Survey) {
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

fn survey_pidfile(target: &Target, path: &Path, me: u32, s: &mut Survey) {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
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
    let Ok(pid) = text.trim().parse::<u32>() else {
        s.problems.push(format!(
            "the pidfile {} does not hold a pid (it holds {:?})",
            path.display(),
            text.trim()
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
fn add_observed(what: &str, pid: u32, me: u32, s: &mut Survey) {
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
pub async fn terminate_incarnation(
    target: &Target,
    opts: &TerminateOptions,
    deadline: Instant,
) -> TerminateReport {
    let survey = survey(target, opts);
    let mut report = TerminateReport {
        gone: survey.gone,
        problems: survey.problems,
        signal: Some(opts.signal),
        ..TerminateReport::default()
    };
    let started = Instant::now();
    let mut sent = Vec::new();
    for subject in survey.subjects {
        match subject.send(opts.signal) {
            Ok(()) => {
                if !matches!(opts.signal, Signal::SIGKILL | Signal::SIGCONT) {
                    // A stopped process keeps any other signal pending until it is
                    // continued; without this a SIGSTOPped warden would never exit.
                    let _ = subject.send(Signal::SIGCONT);
                }
                tracing::info!(
                    target = target.label(),
                    signal = opts.signal.as_str(),
                    "sent {} to {subject}",
                    opts.signal.as_str()
                );
                report.signalled.push(subject.to_string());
                sent.push(subject);
            }
            // Exited between the survey and the signal.
            Err(Errno::ESRCH) => report.gone.push(subject.to_string()),
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
        return remaining(report, &sent);
    }
    loop {
        report.waited = started.elapsed();
        if sent.iter().all(|s| s.alive_pids().is_empty()) {
            return report;
        }
        if Instant::now() >= deadline {
            return remaining(report, &sent);
        }
        tokio::time::sleep(POLL_INTERVAL.min(deadline.saturating_duration_since(Instant::now())))
            .await;
    }
}

fn remaining(mut report: TerminateReport, sent: &[Subject]) -> TerminateReport {
    for subject in sent {
        let pids = subject.alive_pids();
        if !pids.is_empty() {
            report
                .remaining
                .push(format!("{subject} (pids {})", join_pids(&pids)));
            report.remaining_pids.extend(pids);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        // comm may hold spaces and parentheses: "(a) (b c)".
        let text = "4242 ((a) (b c)) S 1 4240 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0";
        let s = parse_stat(text).unwrap();
        assert_eq!(
            s,
            ProcStat {
                state: 'S',
                ppid: 1,
                pgid: 4240,
                start_time: 987654
            }
        );
        assert!(!s.is_exited());
    }

    #[test]
    fn zombie_and_dead_states_count_as_exited() {
        let zombie = "7 (x) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55 0 0";
        assert!(parse_stat(zombie).unwrap().is_exited());
        let dead = "7 (x) X 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55 0 0";
        assert!(parse_stat(dead).unwrap().is_exited());
    }

    #[test]
    fn truncated_stat_is_rejected() {
        assert_eq!(parse_stat("7 (x) S 1 7"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn listen_inodes_match_port_and_listen_state_only() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 222 1 0000000000000000 20 4 30 10 -1
   2: 00000000:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 333 1 0000000000000000 100 0 0 10 0
";
        assert_eq!(parse_listen_inodes(tcp, 8080), vec![111]);
        assert_eq!(parse_listen_inodes(tcp, 8081), vec![333]);
        assert!(parse_listen_inodes(tcp, 22).is_empty());
        let tcp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 444 1 0000000000000000 100 0 0 10 0
";
        assert_eq!(parse_listen_inodes(tcp6, 8080), vec![444]);
    }

    #[test]
    fn socket_links_yield_their_inode() {
        assert_eq!(socket_inode(Path::new("socket:[12345]")), Some(12345));
        assert_eq!(socket_inode(Path::new("pipe:[12345]")), None);
        assert_eq!(socket_inode(Path::new("/dev/null")), None);
    }

    #[test]
    fn this_process_is_running_with_its_own_start_time_only() {
        let me = std::process::id();
        let t = start_time(me).unwrap();
        assert!(is_running(me, Some(t)));
        assert!(is_running(me, None));
        assert!(!is_running(me, Some(t + 1)));
        assert!(group_members(pgid(me).unwrap()).contains(&me));
        assert!(!boot_id().unwrap().is_empty());
    }
}
