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

mod terminate;
pub use terminate::*;

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

#[cfg(test)]
mod tests;
