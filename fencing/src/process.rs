//! Process identity on Linux, read from `/proc`, and the one routine that terminates an
//! old incarnation on this host.
//!
//! A pid alone does not name a process: pids are recycled. Every record therefore carries
//! the process's start time (clock ticks since boot, `/proc/PID/stat` field 22), and
//! nothing here signals a recorded pid without first checking that the process behind it
//! started at the recorded time. Used by the `signal` fence method, by `warden
//! fence-local` (the remote half of `ssh` fencing) and by the daemon when it records its
//! own identity.

use crate::cgroup::{self, Cgroup};
use crate::Target;
use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use procfs::net::{TcpNetEntry, TcpState};
use procfs::process::{FDTarget, Process};
use procfs::ProcError;
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

/// A `procfs` error as the `io::Error` it stands for, so that messages read as before
/// ("No such file or directory"): procfs turns ENOENT and EACCES into variants of its own.
fn io_error(e: ProcError) -> io::Error {
    match e {
        ProcError::Io(e, _) => e,
        ProcError::NotFound(_) => io::Error::from_raw_os_error(libc::ENOENT),
        ProcError::PermissionDenied(_) => io::Error::from_raw_os_error(libc::EACCES),
        other => io::Error::other(other.to_string()),
    }
}

/// This host's boot id (`/proc/sys/kernel/random/boot_id`): a random UUID the kernel picks
/// at every boot, so a record carrying another one was written before the last reboot.
pub fn boot_id() -> io::Result<String> {
    let path = "/proc/sys/kernel/random/boot_id";
    let id = procfs::sys::kernel::random::boot_id()
        .map_err(io_error)?
        .trim()
        .to_string();
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

/// The inode of the initial (the host's own) pid namespace: fixed by the kernel
/// (`PROC_PID_INIT_INO`).
pub const INITIAL_PID_NAMESPACE: u64 = 0xEFFF_FFFC;

/// The inode of this process's pid namespace (`/proc/self/ns/pid`): processes in other
/// pid namespaces (another container on the same kernel) are not visible by our pids.
///
/// One `stat` of the link, by hand: procfs's `Process::namespaces` stats every namespace
/// of the process (ten of them) and fails when any one cannot be read, where only the pid
/// namespace matters here.
pub fn pid_ns() -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(fs::metadata("/proc/self/ns/pid")?.ino())
}

/// The inode of process `pid`'s pid namespace (`/proc/PID/ns/pid`), if it can be read
/// (root, or the process's own user).
pub fn pid_ns_of(pid: u32) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(format!("/proc/{pid}/ns/pid"))
        .ok()
        .map(|m| m.ino())
}

/// A file as the kernel knows it: its device and inode, the same whatever path or mount
/// namespace it is reached through (a container's bind mount of a host directory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileKey {
    pub dev: u64,
    pub ino: u64,
}

impl FileKey {
    /// The key of the file `meta` describes.
    pub fn of(meta: &fs::Metadata) -> FileKey {
        use std::os::unix::fs::MetadataExt;
        FileKey {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// How long [`sees_file`] waits for one look through a process's root: the paths cross
/// that process's mounts, one of which may hang (a dead NFS server, a stuck FUSE daemon).
pub const SEES_FILE_TIMEOUT: Duration = Duration::from_secs(2);

/// How much of a `/proc/PID/mountinfo` is read: some 20,000 mounts, far more than a host
/// has; a longer one is not read at all (its mounts are then not looked through).
const MOUNTINFO_LIMIT: u64 = 4 << 20;

/// Whether process `pid` sees the very file `key` is (same device and inode), which this
/// process reaches at the absolute path `path`. Looked for from the process's own root
/// (`/proc/PID/root`): at `path` itself (a container sharing this filesystem view), and
/// wherever one of its mounts of that filesystem holds the file (a volume: the host's
/// directory bind-mounted at another path in the container, found through
/// `/proc/PID/mountinfo`). An unrelated container, with files of its own at those paths,
/// does not see it. Anything that cannot be told counts as not seeing: a relative path, a
/// process that is gone or vanishes mid-look, a root this process may not enter, and a
/// look that takes longer than [`SEES_FILE_TIMEOUT`] (left to finish on its own thread).
pub fn sees_file(pid: u32, path: &Path, key: FileKey) -> bool {
    if !path.is_absolute() {
        return false;
    }
    let path = path.to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    // A thread, not the caller, looks, so that a hung mount in the container cannot hang
    // the caller: the thread is left behind, blocked, and the answer is "not seen".
    let spawned = std::thread::Builder::new()
        .name("sees-file".to_string())
        .spawn(move || {
            let _ = tx.send(look_for_file(pid, &path, key));
        });
    if spawned.is_err() {
        return false;
    }
    rx.recv_timeout(SEES_FILE_TIMEOUT).unwrap_or(false)
}

/// [`sees_file`] without its timeout.
fn look_for_file(pid: u32, path: &Path, key: FileKey) -> bool {
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    let sees = |at: &Path| {
        let Ok(inside) = at.strip_prefix("/") else {
            return false;
        };
        fs::metadata(root.join(inside)).is_ok_and(|m| FileKey::of(&m) == key)
    };
    if sees(path) {
        return true;
    }
    // Where the file is within its filesystem, as mounted here; then every mount of that
    // filesystem in the process's mount namespace that holds that place.
    let Some(in_fs) = place_in_filesystem(path, key) else {
        return false;
    };
    let Some(theirs) = mounts_of(&format!("/proc/{pid}/mountinfo")) else {
        return false;
    };
    theirs
        .iter()
        .filter(|m| m.dev == dev_numbers(key.dev))
        .filter_map(|m| Some(m.point.join(in_fs.strip_prefix(&m.root).ok()?)))
        .any(|at| sees(&at))
}

/// A mount as `/proc/PID/mountinfo` states it: the filesystem's device (major, minor),
/// the directory of that filesystem it shows (`root`), and where (`point`).
#[derive(Debug, PartialEq, Eq)]
struct Mount {
    dev: (u32, u32),
    root: PathBuf,
    point: PathBuf,
}

/// The major and minor numbers of device `dev` (`st_dev`), as mountinfo writes them.
fn dev_numbers(dev: u64) -> (u32, u32) {
    (libc::major(dev), libc::minor(dev))
}

/// The mounts of a `mountinfo` file, in its order (a later mount on the same point covers
/// an earlier one); `None` when it cannot be read whole.
fn mounts_of(file: &str) -> Option<Vec<Mount>> {
    let bytes = crate::files::read_regular_file(Path::new(file), MOUNTINFO_LIMIT).ok()?;
    Some(parse_mountinfo(&String::from_utf8_lossy(&bytes)))
}

/// The mounts of `mountinfo` text (`36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3
/// /dev/root rw`); lines that do not parse are skipped.
fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ').skip(2);
            let (major, minor) = fields.next()?.split_once(':')?;
            let root = unescape_mount_path(fields.next()?);
            let point = unescape_mount_path(fields.next()?);
            Some(Mount {
                dev: (major.parse().ok()?, minor.parse().ok()?),
                root,
                point,
            })
        })
        .collect()
}

/// A path as mountinfo writes it: space, tab, newline and backslash as `\ooo` octal.
fn unescape_mount_path(field: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|o| {
            let o = std::str::from_utf8(o).ok()?;
            u8::from_str_radix(o, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// Where the file `key`, at `path` here, is within its filesystem: the path below the
/// root of that filesystem, read from this process's own mounts (the last mount whose
/// point holds the path is the one it is on). `None` when that mount is not of the
/// file's device (a filesystem whose files carry devices of their own, as btrfs
/// subvolumes) or the mounts cannot be read.
fn place_in_filesystem(path: &Path, key: FileKey) -> Option<PathBuf> {
    // Mount points are written without symlinks.
    let path = fs::canonicalize(path).ok()?;
    let ours = mounts_of("/proc/self/mountinfo")?;
    let on = ours
        .iter()
        .filter(|m| path.starts_with(&m.point))
        .max_by_key(|m| m.point.components().count())
        .filter(|m| m.dev == dev_numbers(key.dev))?;
    // `max_by_key` keeps the last of equals: the mount on top.
    Some(on.root.join(path.strip_prefix(&on.point).ok()?))
}

/// The processes of other pid namespaces (containers on this kernel, seen from here) whose
/// pid *in their own namespace* is `pid` and that see the file `path` names (by `key`,
/// [`sees_file`]): each as its pid here and the inode of its pid namespace, sorted. A pid
/// read from a file that a process inside a container wrote is one of these, and names
/// another process here, or none. A container that cannot see the file cannot have
/// written it: its processes are left out however their pids read, so that a stale file
/// written here is not taken for a container's. Reads `NSpid` of every process's
/// `/proc/PID/status`, which takes a scan of `/proc`: meant for checks at start.
pub fn namesakes_in_other_pid_namespaces(pid: u32, path: &Path, key: FileKey) -> Vec<(u32, u64)> {
    let Ok(ours) = pid_ns() else {
        return Vec::new();
    };
    let mut found: Vec<(u32, u64)> = all_processes()
        .filter_map(|(here, p)| {
            let nspid = p.status().ok()?.nspid?;
            // Outermost first: more than one entry means a nested namespace, and the last
            // is the pid the process sees for itself.
            if nspid.len() < 2 || u32::try_from(*nspid.last()?).ok()? != pid {
                return None;
            }
            let ns = pid_ns_of(here)?;
            (ns != ours && sees_file(here, path, key)).then_some((here, ns))
        })
        .collect();
    found.sort_unstable();
    found
}

/// 32 hex digits (either case) as a number; `None` for anything else.
fn parse_hex128(hex: &str) -> Option<u128> {
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u128::from_str_radix(hex, 16).ok()
}

/// A boot id (a UUID: 32 hex digits, bare or dashed 8-4-4-4-12, either case) as a number,
/// so that two spellings of one boot compare equal. `None` for anything else: an id that
/// does not parse is unknown, equal to nothing.
pub fn parse_boot_id(text: &str) -> Option<u128> {
    let text = text.trim();
    if text.len() == 36 {
        let dashes = [8, 13, 18, 23];
        let ok = text
            .bytes()
            .enumerate()
            .all(|(i, b)| (b == b'-') == dashes.contains(&i));
        if !ok {
            return None;
        }
        return parse_hex128(&text.replace('-', ""));
    }
    parse_hex128(text)
}

/// A machine id (`/etc/machine-id`: 32 hex digits, either case) as a number; `None` for
/// anything else, which is unknown and equal to nothing.
pub fn parse_machine_id(text: &str) -> Option<u128> {
    parse_hex128(text.trim())
}

/// Where a recorded incarnation ran, as seen from this process (SPEC §5 "Which host is
/// this?"). Boot id and host name alone do not identify a machine: containers on one
/// kernel share a boot id but not their pids, and cloned machines share host names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Whereabouts {
    /// Same boot id, machine id and pid namespace: the recorded pids are ours to see.
    ThisBoot,
    /// Same machine id, another boot id: the machine rebooted since, which ended every
    /// process of the incarnation. Says so for the log.
    Rebooted(String),
    /// Same boot and machine, but another pid namespace (`recorded`; this process runs
    /// in `here`): the recorded pids name other processes here, or none.
    OtherPidNamespace { recorded: u64, here: u64 },
    /// Another machine, or one that cannot be told apart from this one; and why.
    Elsewhere(String),
}

/// Where `target` ran, seen from a process on boot `boot_id` of machine `machine_id` in
/// pid namespace `pid_ns` (empty or 0: unknown). Ids are compared parsed, so case and
/// dashes do not matter; an unknown or unparsable id on either side means the target is
/// neither on this boot nor rebooted.
pub fn whereabouts(boot_id: &str, machine_id: &str, pid_ns: u64, target: &Target) -> Whereabouts {
    let host = target
        .host
        .as_deref()
        .map_or_else(String::new, |h| format!(" (host {h})"));
    let Some(here_boot) = parse_boot_id(boot_id) else {
        return Whereabouts::Elsewhere(format!(
            "this host's boot id {boot_id:?} is unknown or not a UUID, so warden cannot tell \
             whether the target ran here; check that /proc/sys/kernel/random/boot_id is \
             readable"
        ));
    };
    let recorded_boot_text = target.boot_id.as_deref().unwrap_or_default();
    let recorded_boot = match target.boot_id.as_deref() {
        None => {
            return Whereabouts::Elsewhere(format!(
                "the record of the target{host} has no boot id, so warden cannot tell \
                 whether its processes belong to this boot of this machine"
            ))
        }
        Some(b) => match parse_boot_id(b) {
            Some(id) => id,
            None => {
                return Whereabouts::Elsewhere(format!(
                    "the recorded boot id {b:?}{host} is not a UUID, so warden cannot \
                     tell whether the target ran on this boot of this machine"
                ))
            }
        },
    };
    let Some(here_machine) = parse_machine_id(machine_id) else {
        return Whereabouts::Elsewhere(format!(
            "this host's machine id {machine_id:?} is unknown or not 32 hex digits, so warden \
             cannot tell whether this is the recorded machine; create /etc/machine-id \
             (systemd-machine-id-setup)"
        ));
    };
    let recorded_machine = match target.machine_id.as_deref() {
        None => {
            return Whereabouts::Elsewhere(format!(
                "the record of the target{host} has no machine id (written by an older \
                 warden?), so warden cannot tell whether this is the recorded machine"
            ))
        }
        Some(m) => match parse_machine_id(m) {
            Some(id) => id,
            None => {
                return Whereabouts::Elsewhere(format!(
                    "the recorded machine id {m:?}{host} is not 32 hex digits, so warden \
                     cannot tell whether this is the recorded machine"
                ))
            }
        },
    };
    let machine_id = machine_id.trim();
    if recorded_machine != here_machine {
        return Whereabouts::Elsewhere(format!(
            "the target ran on another machine{host}: machine id {}, and this is machine \
             {machine_id}",
            target.machine_id.as_deref().unwrap_or_default().trim()
        ));
    }
    let Some(recorded_ns) = target.pid_ns.filter(|&ns| ns != 0) else {
        return Whereabouts::Elsewhere(format!(
            "the record of the target{host} has no pid namespace (written by an older \
             warden?), so warden cannot tell whether it ran in this container or another one \
             on the same machine"
        ));
    };
    if pid_ns == 0 {
        return Whereabouts::Elsewhere(
            "this process's pid namespace is unknown (/proc/self/ns/pid unreadable), so warden \
             cannot tell whether the target's pids are visible here"
                .to_string(),
        );
    }
    if recorded_boot != here_boot {
        if let Some(why) = &target.reboot_contradicted {
            // The machine id is shared with a live machine that runs the recorded boot.
            return Whereabouts::Elsewhere(why.clone());
        }
        // Boot ids are random per boot, and the machine id says this is the same machine:
        // it rebooted since the record was written, and a reboot ends every process.
        return Whereabouts::Rebooted(format!(
            "this machine{host} (machine id {machine_id}) rebooted since the record was \
             written (boot id {recorded_boot_text}, now {}), which ended the incarnation",
            boot_id.trim()
        ));
    }
    if recorded_ns != pid_ns {
        return Whereabouts::OtherPidNamespace {
            recorded: recorded_ns,
            here: pid_ns,
        };
    }
    Whereabouts::ThisBoot
}

/// The latest deadline [`deadline_after`] gives: far beyond any timeout, well within what
/// an `Instant` can hold (tokio bounds its own "never" the same way).
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `from + d` without the panic of `Instant + Duration` on overflow: a duration too long to
/// add is cut to [`FAR_FUTURE`]. Durations from arguments and config are bounded where
/// they are read; this keeps a missed bound from crashing the caller.
pub fn deadline_after(from: Instant, d: Duration) -> Instant {
    from.checked_add(d.min(FAR_FUTURE))
        .or_else(|| from.checked_add(FAR_FUTURE))
        .unwrap_or(from)
}

/// The fields of `/proc/PID/stat` (parsed by procfs) that fencing needs.
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

    fn of(stat: &procfs::process::Stat) -> Option<ProcStat> {
        Some(ProcStat {
            state: stat.state,
            ppid: u32::try_from(stat.ppid).ok()?,
            pgid: u32::try_from(stat.pgrp).ok()?,
            start_time: stat.starttime,
        })
    }
}

/// The stat of a process opened by procfs, or `None` once it is gone.
fn stat_of(process: &Process) -> Option<ProcStat> {
    ProcStat::of(&process.stat().ok()?)
}

/// `/proc/PID/stat` of a process, or `None` when there is no such process (or `/proc`
/// cannot be read).
pub fn stat(pid: u32) -> Option<ProcStat> {
    if pid == 0 {
        return None;
    }
    stat_of(&Process::new(i32::try_from(pid).ok()?).ok()?)
}

/// Whether `pid` is a kernel thread (`PF_KTHREAD` in `/proc/PID/stat`'s flags): it runs
/// no program, so it is never a service's process, and signals do not end it.
pub fn is_kernel_thread(pid: u32) -> bool {
    /// `PF_KTHREAD` of the kernel's `include/linux/sched.h`.
    const PF_KTHREAD: u32 = 0x0020_0000;
    i32::try_from(pid)
        .ok()
        .and_then(|p| Process::new(p).ok()?.stat().ok())
        .is_some_and(|s| s.flags & PF_KTHREAD != 0)
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

/// Every process (not a thread: `/proc` lists only thread group leaders at its top
/// level) with its pid; one that ends during the scan is left out.
fn all_processes() -> impl Iterator<Item = (u32, Process)> {
    procfs::process::all_processes()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let p = p.ok()?;
            Some((u32::try_from(p.pid).ok()?, p))
        })
}

/// The live (non-zombie) processes whose process group is `pgid`, sorted.
pub fn group_members(pgid: u32) -> Vec<u32> {
    if pgid == 0 {
        return Vec::new();
    }
    let mut pids: Vec<u32> = all_processes()
        .filter(|(_, p)| stat_of(p).is_some_and(|s| s.pgid == pgid && !s.is_exited()))
        .map(|(pid, _)| pid)
        .collect();
    pids.sort_unstable();
    pids
}

/// The inodes of the sockets among `entries` (of `/proc/net/tcp` or `/proc/net/tcp6`)
/// that listen on local port `port`, sorted.
fn listen_inodes(entries: &[TcpNetEntry], port: u16) -> Vec<u64> {
    let mut inodes: Vec<u64> = entries
        .iter()
        .filter(|e| e.state == TcpState::Listen && e.local_address.port() == port)
        .map(|e| e.inode)
        .filter(|&inode| inode != 0)
        .collect();
    inodes.sort_unstable();
    inodes
}

/// The processes holding a listening TCP socket (IPv4 or IPv6) on `port`, sorted.
///
/// Reads `/proc/net/tcp{,6}` and matches their inodes against the sockets among the open
/// files of every process (`/proc/*/fd`), so that no `fuser` or `ss` is needed on the
/// host. Only this network namespace is visible, and only the file descriptors of
/// processes this process may inspect: run as root (or as the service's user) to see the
/// service's sockets.
pub fn listeners_on_port(port: u16) -> Vec<u32> {
    let entries: Vec<TcpNetEntry> = [procfs::net::tcp(), procfs::net::tcp6()]
        .into_iter()
        // tcp6 is absent when IPv6 is disabled; nothing listens there then.
        .filter_map(Result::ok)
        .flatten()
        .collect();
    let inodes = listen_inodes(&entries, port);
    if inodes.is_empty() {
        return Vec::new();
    }
    let mut pids: Vec<u32> = all_processes()
        .filter(|(_, p)| {
            let Ok(fds) = p.fd() else {
                return false;
            };
            fds.filter_map(Result::ok).any(|fd| match fd.target {
                FDTarget::Socket(inode) => inodes.binary_search(&inode).is_ok(),
                _ => false,
            })
        })
        .map(|(pid, _)| pid)
        .collect();
    pids.sort_unstable();
    pids
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
fn survey_cgroup(target: &Target, relative: &str, opts: &TerminateOptions, s: &mut Survey) {
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
fn survey_leaderless_group(target: &Target, pgid: u32, subject: Subject, s: &mut Survey) {
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

/// A pidfile is a line or a few; anything larger is not one.
const PIDFILE_MAX_BYTES: u64 = 64 * 1024;

fn survey_pidfile(target: &Target, path: &Path, me: u32, s: &mut Survey) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/proc/PID/stat` text as procfs parses it.
    fn parse_stat(text: &str) -> Option<ProcStat> {
        use procfs::FromRead;
        ProcStat::of(&procfs::process::Stat::from_read(text.as_bytes()).ok()?)
    }

    #[test]
    fn mountinfo_lines_give_device_root_and_point_with_escapes_undone() {
        let text =
            "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n\
                    40 36 0:52 /srv/my\\040data /data\\134x rw - ext4 /dev/sda1 rw\n\
                    garbage\n\
                    41 36 8:x / /y rw - ext4 /dev/sda1 rw\n";
        assert_eq!(
            parse_mountinfo(text),
            vec![
                Mount {
                    dev: (98, 0),
                    root: PathBuf::from("/mnt1"),
                    point: PathBuf::from("/mnt2"),
                },
                Mount {
                    dev: (0, 52),
                    root: PathBuf::from("/srv/my data"),
                    point: PathBuf::from("/data\\x"),
                },
            ]
        );
        // A backslash without three octal digits, or past a byte, is kept as it is.
        assert_eq!(
            unescape_mount_path("a\\9b\\777"),
            PathBuf::from("a\\9b\\777")
        );
    }

    #[test]
    fn this_process_sees_its_own_file_and_its_place_in_the_filesystem() {
        let dir = std::env::temp_dir().join(format!("warden-sees-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("service.pid");
        fs::write(&file, "1\n").unwrap();
        let key = FileKey::of(&fs::metadata(&file).unwrap());
        let me = std::process::id();
        assert!(sees_file(me, &file, key));
        // Through the mounts too: its place in the filesystem, from a mount of it.
        assert!(place_in_filesystem(&file, key).is_some());
        let other = dir.join("other");
        fs::write(&other, "2\n").unwrap();
        assert!(!sees_file(me, &other, key), "another file is not this one");
        assert!(
            !sees_file(me, Path::new("service.pid"), key),
            "a relative path"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

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
        // A zombie's stat as Linux 6.1 shows it.
        let zombie = "7 (x) Z 1 7 7 0 -1 4227084 0 0 0 0 0 0 0 0 20 0 1 0 55 0 0 \
                      18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0";
        assert!(parse_stat(zombie).unwrap().is_exited());
        let dead = zombie.replacen(" Z ", " X ", 1);
        assert!(parse_stat(&dead).unwrap().is_exited());
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
        let parse = |text: &str| {
            use procfs::FromBufReadSI;
            procfs::net::TcpNetEntries::from_buf_read(
                text.as_bytes(),
                procfs::current_system_info(),
            )
            .unwrap()
            .0
        };
        let tcp = parse(tcp);
        assert_eq!(listen_inodes(&tcp, 8080), vec![111]);
        assert_eq!(listen_inodes(&tcp, 8081), vec![333]);
        assert!(listen_inodes(&tcp, 22).is_empty());
        let tcp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 444 1 0000000000000000 100 0 0 10 0
";
        assert_eq!(listen_inodes(&parse(tcp6), 8080), vec![444]);
    }

    #[test]
    fn boot_ids_parse_bare_or_dashed_in_either_case_and_nothing_else() {
        let id = parse_boot_id("ea6e745e-35d0-4857-9b07-fa79425460ee").unwrap();
        assert_eq!(
            parse_boot_id("EA6E745E-35D0-4857-9B07-FA79425460EE"),
            Some(id)
        );
        assert_eq!(parse_boot_id("ea6e745e35d048579b07fa79425460ee"), Some(id));
        assert_eq!(
            parse_boot_id(" ea6e745e-35d0-4857-9b07-fa79425460ee\n"),
            Some(id)
        );
        for bad in [
            "",
            "b-1",
            "ea6e745e-35d0-4857-9b07-fa79425460e",
            "ea6e745e-35d0-4857-9b07-fa79425460eg",
            "ea6e745e35d0-4857-9b07-fa79425460ee-",
            "+a6e745e-35d0-4857-9b07-fa79425460ee",
            "ea6e745e-35d0-4857-9b07-fa79425460ee0",
        ] {
            assert_eq!(parse_boot_id(bad), None, "{bad:?}");
        }
        let m = parse_machine_id("3d1219c7c4c5404aaa1f6d2a48adfda4").unwrap();
        assert_eq!(
            parse_machine_id("3D1219C7C4C5404AAA1F6D2A48ADFDA4"),
            Some(m)
        );
        assert_eq!(
            parse_machine_id("3d1219c7-c4c5-404a-aa1f-6d2a48adfda4"),
            None
        );
        assert_eq!(parse_machine_id("uninitialized"), None);
    }

    #[test]
    fn a_cgroup_recorded_in_another_cgroup_namespace_is_out_of_view() {
        let here = cgroup::namespace().expect("/proc/self/ns/cgroup");
        let t = |ns: Option<u64>, pid_ns: Option<u64>| Target {
            service_cgroup: Some("/warden/service-1".into()),
            cgroup_ns: ns,
            pid_ns,
            ..Target::default()
        };
        assert_eq!(
            cgroup_out_of_view(&t(Some(here), None), "/warden/service-1"),
            None
        );
        let why = cgroup_out_of_view(&t(Some(here + 1), None), "/warden/service-1")
            .expect("another cgroup namespace");
        assert!(
            why.contains("cgroup namespace") && why.contains("never taken for removed"),
            "{why}"
        );
        // An older warden's record: trusted only between the host's initial namespaces.
        let old = t(None, Some(INITIAL_PID_NAMESPACE));
        assert_eq!(
            cgroup_out_of_view(&old, "/warden/service-1").is_none(),
            here == cgroup::INITIAL_NAMESPACE
        );
        assert!(cgroup_out_of_view(&t(None, Some(4026532000)), "/warden/service-1").is_some());
    }

    #[test]
    fn whereabouts_needs_boot_machine_and_pid_namespace_to_agree() {
        const BOOT: &str = "ea6e745e-35d0-4857-9b07-fa79425460ee";
        const OTHER_BOOT: &str = "00000000-0000-4000-8000-000000000000";
        const MACHINE: &str = "3d1219c7c4c5404aaa1f6d2a48adfda4";
        const OTHER_MACHINE: &str = "11111111111111111111111111111111";
        let t = |boot: Option<&str>, machine: Option<&str>, ns: Option<u64>| Target {
            boot_id: boot.map(str::to_string),
            machine_id: machine.map(str::to_string),
            pid_ns: ns,
            ..Target::default()
        };
        let here = |target: &Target| whereabouts(BOOT, MACHINE, 7, target);
        let elsewhere = |w: Whereabouts, why: &str| match w {
            Whereabouts::Elsewhere(r) => assert!(r.contains(why), "{r}"),
            other => panic!("expected elsewhere ({why}), got {other:?}"),
        };

        assert_eq!(
            here(&t(Some(BOOT), Some(MACHINE), Some(7))),
            Whereabouts::ThisBoot
        );
        assert_eq!(
            here(&t(
                Some(&BOOT.to_uppercase()),
                Some(&MACHINE.to_uppercase()),
                Some(7)
            )),
            Whereabouts::ThisBoot
        );
        assert_eq!(
            here(&t(Some(BOOT), Some(MACHINE), Some(8))),
            Whereabouts::OtherPidNamespace {
                recorded: 8,
                here: 7
            }
        );
        assert!(matches!(
            here(&t(Some(OTHER_BOOT), Some(MACHINE), Some(8))),
            Whereabouts::Rebooted(_)
        ));
        // A live member runs that boot: a clone sharing the machine id, not a reboot.
        let cloned = Target {
            reboot_contradicted: Some("the live member rm9 runs that boot".into()),
            ..t(Some(OTHER_BOOT), Some(MACHINE), Some(8))
        };
        elsewhere(here(&cloned), "the live member rm9 runs that boot");
        // It says nothing about a record of this very boot.
        assert_eq!(
            here(&Target {
                reboot_contradicted: Some("irrelevant".into()),
                ..t(Some(BOOT), Some(MACHINE), Some(7))
            }),
            Whereabouts::ThisBoot
        );
        elsewhere(
            here(&t(Some(BOOT), Some(OTHER_MACHINE), Some(7))),
            "another machine",
        );
        elsewhere(
            here(&t(Some(OTHER_BOOT), Some(OTHER_MACHINE), Some(7))),
            "another machine",
        );
        elsewhere(here(&t(Some(OTHER_BOOT), None, Some(7))), "no machine id");
        elsewhere(
            here(&t(Some(OTHER_BOOT), Some(MACHINE), None)),
            "no pid namespace",
        );
        elsewhere(
            here(&t(Some(BOOT), Some(MACHINE), Some(0))),
            "no pid namespace",
        );
        elsewhere(here(&t(None, Some(MACHINE), Some(7))), "no boot id");
        elsewhere(
            here(&t(Some("garbage"), Some(MACHINE), Some(7))),
            "not a UUID",
        );
        elsewhere(
            here(&t(Some(BOOT), Some("garbage"), Some(7))),
            "not 32 hex digits",
        );
        // Unknown on this side.
        let all = t(Some(BOOT), Some(MACHINE), Some(7));
        elsewhere(whereabouts(BOOT, "", 7, &all), "machine id");
        elsewhere(
            whereabouts(BOOT, MACHINE, 0, &all),
            "pid namespace is unknown",
        );
        elsewhere(whereabouts("", MACHINE, 7, &all), "boot id");
        let rebooted = t(Some(OTHER_BOOT), Some(MACHINE), Some(7));
        elsewhere(whereabouts(BOOT, "", 7, &rebooted), "machine id");
        elsewhere(
            whereabouts(BOOT, MACHINE, 0, &rebooted),
            "pid namespace is unknown",
        );
    }

    #[test]
    fn deadlines_past_what_an_instant_holds_do_not_panic() {
        let now = Instant::now();
        assert_eq!(
            deadline_after(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
        assert!(deadline_after(now, Duration::MAX) > now + Duration::from_secs(86_400 * 365));
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
