//! The service's cgroup (cgroup v2), so that a helper that calls `setsid()` or
//! double-forks still belongs to the service (SPEC §6).
//!
//! A process group is not a container: `setsid()` leaves it, and `kill(-pgid)` then misses
//! the escapee. A cgroup is: every descendant of a process stays in its cgroup unless
//! somebody with write access to the hierarchy moves it. So where the cgroup v2 hierarchy
//! is writable (root, or under systemd with `Delegate=yes`), the spawned service runs in a
//! cgroup of its own below warden's, "down" means that cgroup is unpopulated, and stop,
//! kill and fencing act on every process in it.
//!
//! Where the hierarchy is (`/sys/fs/cgroup` on unified hosts, `/sys/fs/cgroup/unified` on
//! hybrid ones) is read from `/proc/self/mountinfo`; a process's cgroup is the `0::` line
//! of `/proc/PID/cgroup`. procfs parses both. Records name a cgroup by its path relative to the hierarchy's
//! root (`/system.slice/warden.service/service-42`), which is the same on every process
//! of one host whatever the mount point.
//!
//! Only core interface files are used (`cgroup.procs`, `cgroup.events`, `cgroup.kill`),
//! which exist in every cgroup whether or not controllers are enabled, so creating a child
//! cgroup needs no controller and does not trip the no-internal-processes rule.

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use procfs::process::{MountInfo, Process};
use procfs::ProcessCGroups;

/// The inode of the initial (the host's own) cgroup namespace: fixed by the kernel
/// (`PROC_CGROUP_INIT_INO`), as that of every initial namespace is.
pub const INITIAL_NAMESPACE: u64 = 0xEFFF_FFFB;

/// The inode of this process's cgroup namespace (`/proc/self/ns/cgroup`). Cgroup paths in
/// `/proc/PID/cgroup` and under a cgroup2 mount made inside it are relative to its root,
/// so a path recorded in another cgroup namespace names another cgroup here, or none.
pub fn namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata("/proc/self/ns/cgroup").ok().map(|m| m.ino())
}

/// The mount point of the cgroup v2 hierarchy, from `/proc/self/mountinfo`; `None` on a
/// host without one (cgroup v1 only).
pub fn unified_mount() -> Option<PathBuf> {
    let text = fs::read_to_string("/proc/self/mountinfo").ok()?;
    parse_unified_mount(&text)
}

/// Finds the cgroup2 mount point in the text of a `mountinfo` file: one that shows the
/// whole hierarchy if there is one, otherwise the first.
pub fn parse_unified_mount(mountinfo: &str) -> Option<PathBuf> {
    let mounts = parse_unified_mounts(mountinfo);
    mounts
        .iter()
        .find(|(root, _)| root == "/")
        .or(mounts.first())
        .map(|(_, mount_point)| mount_point.clone())
}

/// Every cgroup2 mount in the text of a `mountinfo` file, as (the cgroup it shows, where it
/// is mounted). A mount whose root is not `/` (a container's view bind-mounted from a
/// subtree) shows only the cgroups below that root, under other names.
///
/// The callers read the file themselves and procfs's `MountInfo` parses it line by line:
/// `Process::mountinfo` fails on the whole file when one line, of any mount, is beyond
/// its parser, and that must not hide the cgroup2 mount.
fn parse_unified_mounts(mountinfo: &str) -> Vec<(String, PathBuf)> {
    mountinfo
        .lines()
        .filter_map(|line| MountInfo::from_line(line).ok())
        .filter(|m| m.fs_type == "cgroup2")
        .filter_map(|m| {
            let mount_point = unescape_mountinfo(m.mount_point.to_str()?);
            Some((unescape_mountinfo(&m.root), PathBuf::from(mount_point)))
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo` octal. By hand: procfs
/// hands out the root and mount point as escaped.
fn unescape_mountinfo(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        // Exactly three octal digits (from_str_radix alone would also take a sign).
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)))
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        match (bytes[i], octal) {
            (b'\\', Some(v)) => {
                out.push(v);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup v2 path of a process (the `0::` line of `/proc/PID/cgroup`), relative to
/// the hierarchy's root, e.g. `/system.slice/warden.service`. `None` when the process is
/// gone or the host has no cgroup v2 hierarchy.
pub fn of_pid(pid: u32) -> Option<String> {
    let process = Process::new(i32::try_from(pid).ok()?).ok()?;
    unified_path(&process.cgroups().ok()?)
}

/// This process's cgroup v2 path.
pub fn own() -> Option<String> {
    unified_path(&Process::myself().ok()?.cgroups().ok()?)
}

/// The cgroup v2 line (hierarchy 0, no controllers) of a process's cgroups.
fn unified_path(cgroups: &ProcessCGroups) -> Option<String> {
    cgroups
        .into_iter()
        .find(|c| c.hierarchy == 0 && c.controllers.is_empty())
        .map(|c| c.pathname.trim_end().to_string())
        .filter(|p| p.starts_with('/'))
}

/// A cgroup v2 directory: its path relative to the hierarchy's root (as recorded) and
/// where it is on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cgroup {
    relative: String,
    dir: PathBuf,
}

impl Cgroup {
    /// The cgroup at `relative` (as recorded: absolute within the hierarchy, no `..`)
    /// under `mount`. `None` when the path is not a plain cgroup path.
    pub fn at(mount: &Path, relative: &str) -> Option<Cgroup> {
        if !relative.starts_with('/') || relative.contains('\0') {
            return None;
        }
        let rel = Path::new(relative);
        let mut dir = mount.to_path_buf();
        for c in rel.components() {
            match c {
                Component::RootDir => {}
                Component::Normal(part) => dir.push(part),
                // "..", "." or a prefix could leave the hierarchy.
                _ => return None,
            }
        }
        Some(Cgroup {
            relative: relative.to_string(),
            dir,
        })
    }

    /// The cgroup at `relative` under this host's cgroup v2 mount. Where the hierarchy is
    /// only mounted from a subtree (its mountinfo root is not `/`), `relative` is looked up
    /// below that root, and a cgroup outside it is not found: joining the path to that
    /// mount would name another cgroup, or none, and "none" would pass for "ended".
    pub fn find(relative: &str) -> Option<Cgroup> {
        let text = fs::read_to_string("/proc/self/mountinfo").ok()?;
        Cgroup::find_in(&parse_unified_mounts(&text), relative)
    }

    fn find_in(mounts: &[(String, PathBuf)], relative: &str) -> Option<Cgroup> {
        let wanted = normalized(relative)?;
        if let Some((_, mount)) = mounts.iter().find(|(root, _)| root == "/") {
            return Cgroup::at(mount, relative);
        }
        // Only subtree mounts are left: `relative` must lie below one's root.
        mounts.iter().find_map(|(root, mount)| {
            let root = normalized(root)?;
            let below = if wanted == root {
                "/"
            } else {
                // "/a/bc" is not below "/a/b".
                let rest = wanted.strip_prefix(&root)?;
                if !rest.starts_with('/') {
                    return None;
                }
                rest
            };
            let mut cgroup = Cgroup::at(mount, below)?;
            cgroup.relative = relative.to_string();
            Some(cgroup)
        })
    }

    /// Whether this is the hierarchy's root cgroup, which holds every process of the host.
    pub fn is_root(&self) -> bool {
        normalized(&self.relative).as_deref() == Some("/")
    }

    /// Whether the cgroup at `relative` (a path as in `/proc/PID/cgroup`) is this one or
    /// one below it.
    pub fn contains(&self, relative: &str) -> bool {
        match (normalized(&self.relative), normalized(relative)) {
            (Some(me), Some(other)) => {
                me == "/" || other == me || other.starts_with(&format!("{me}/"))
            }
            _ => false,
        }
    }

    /// The path relative to the hierarchy's root, as recorded in the breadcrumb.
    pub fn relative(&self) -> &str {
        &self.relative
    }

    /// The directory on this host.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the cgroup directory exists.
    pub fn exists(&self) -> bool {
        self.dir.join("cgroup.procs").exists()
    }

    /// Creates the cgroup directory (its parent must exist). An existing one is fine.
    pub fn create(&self) -> io::Result<()> {
        match fs::create_dir(&self.dir) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            other => other,
        }
    }

    /// Removes the (empty) cgroup directory; a missing one is fine.
    pub fn remove(&self) -> io::Result<()> {
        match fs::remove_dir(&self.dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// The `cgroup.procs` file: writing a pid moves that process into the cgroup, and a
    /// process that writes `0` moves itself (the way to enter it between fork and exec).
    pub fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Moves process `pid` into this cgroup.
    pub fn add(&self, pid: u32) -> io::Result<()> {
        write_existing(&self.procs_file(), &pid.to_string())
    }

    /// Every process in this cgroup and its descendants. A cgroup that does not exist
    /// (removed, or never created on this host) has none.
    pub fn pids(&self) -> io::Result<Vec<u32>> {
        let mut pids = Vec::new();
        match collect_pids(&self.dir, &mut pids, 0) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && !self.dir.exists() => Ok(Vec::new()),
            Err(e) => Err(e),
            Ok(()) => {
                pids.sort_unstable();
                pids.dedup();
                Ok(pids)
            }
        }
    }

    /// Whether any process remains in the cgroup or below it. Reads `cgroup.events`
    /// (`populated 0|1`, which covers descendants and ignores nothing), and falls back to
    /// listing pids. A cgroup that does not exist is empty.
    pub fn is_populated(&self) -> io::Result<bool> {
        match fs::read_to_string(self.dir.join("cgroup.events")) {
            Ok(text) => {
                if let Some(v) = text
                    .lines()
                    .find_map(|l| l.strip_prefix("populated "))
                    .map(str::trim)
                {
                    return Ok(v != "0");
                }
                Ok(!self.pids()?.is_empty())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if self.dir.exists() {
                    Ok(!self.pids()?.is_empty())
                } else {
                    Ok(false)
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Sends `signal` to every process in the cgroup and below. Returns how many were
    /// signalled. Processes gone meanwhile are skipped. Refused for the root cgroup, which
    /// holds every process of the host.
    pub fn signal(&self, signal: Signal) -> io::Result<usize> {
        self.refuse_root()?;
        let mut n = 0;
        for pid in self.pids()? {
            if pid <= 1 {
                continue;
            }
            match kill(Pid::from_raw(pid as i32), signal) {
                Ok(()) => n += 1,
                Err(Errno::ESRCH) => {}
                Err(e) => return Err(io::Error::from(e)),
            }
        }
        Ok(n)
    }

    /// SIGKILLs every process in the cgroup and below at once: `cgroup.kill` (Linux 5.14
    /// and later), which also catches processes forked during the kill; on older kernels a
    /// SIGKILL to every listed pid (call it again until the cgroup is unpopulated).
    /// Refused for the root cgroup, which holds every process of the host.
    pub fn kill(&self) -> io::Result<()> {
        self.refuse_root()?;
        // Written without O_CREAT: a kernel without `cgroup.kill` must answer "not found"
        // (and get the fallback), not "permission denied" for creating a file in cgroupfs.
        match write_existing(&self.dir.join("cgroup.kill"), "1") {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound && !self.dir.exists() => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.signal(Signal::SIGKILL).map(|_| ())
            }
            Err(e) => Err(e),
        }
    }
}

impl Cgroup {
    fn refuse_root(&self) -> io::Result<()> {
        if self.is_root() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is the root of the cgroup hierarchy, which holds every process of \
                     this host; refusing to signal it",
                    self.dir.display()
                ),
            ));
        }
        Ok(())
    }
}

/// `relative` with `.` and repeated slashes removed, `/` for the root; `None` when it is
/// not an absolute path without `..`.
fn normalized(relative: &str) -> Option<String> {
    if !relative.starts_with('/') || relative.contains('\0') {
        return None;
    }
    let mut parts = Vec::new();
    for c in Path::new(relative).components() {
        match c {
            Component::RootDir => {}
            Component::Normal(part) => parts.push(part.to_str()?),
            _ => return None,
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// Writes `text` to an existing file (a cgroup interface file), never creating one.
fn write_existing(path: &Path, text: &str) -> io::Result<()> {
    use std::io::Write;
    fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(text.as_bytes())
}

/// Depth guard against a pathological (or cyclic through bind mounts) tree.
const MAX_DEPTH: usize = 32;

fn collect_pids(dir: &Path, pids: &mut Vec<u32>, depth: usize) -> io::Result<()> {
    let text = fs::read_to_string(dir.join("cgroup.procs"))?;
    pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    if depth >= MAX_DEPTH {
        return Ok(());
    }
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            match collect_pids(&entry.path(), pids, depth + 1) {
                // A child cgroup removed while we looked.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                other => other?,
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_unified_mount_on_hybrid_and_unified_hosts() {
        let hybrid = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                      35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                      41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            parse_unified_mount(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let unified =
            "30 24 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            parse_unified_mount(unified),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        assert_eq!(
            parse_unified_mount("1 1 0:1 / /x\\040y rw - cgroup2 cgroup2 rw\n"),
            Some(PathBuf::from("/x y"))
        );
        assert_eq!(
            parse_unified_mount("31 23 0:28 / /sys rw - sysfs sysfs rw\n"),
            None
        );
    }

    /// The cgroup v2 path in a `/proc/PID/cgroup` text, as procfs parses it.
    fn parse_proc_cgroup(text: &str) -> Option<String> {
        use procfs::FromBufRead;
        unified_path(&ProcessCGroups::from_buf_read(text.as_bytes()).ok()?)
    }

    #[test]
    fn reads_the_v2_line_of_proc_cgroup() {
        let text = "4:memory:/x\n0::/system.slice/warden.service\n";
        assert_eq!(
            parse_proc_cgroup(text).as_deref(),
            Some("/system.slice/warden.service")
        );
        assert_eq!(parse_proc_cgroup("0::/\n").as_deref(), Some("/"));
        assert_eq!(parse_proc_cgroup("4:memory:/x\n"), None);
    }

    #[test]
    fn recorded_paths_cannot_leave_the_hierarchy() {
        let m = Path::new("/sys/fs/cgroup");
        assert_eq!(
            Cgroup::at(m, "/a/b").unwrap().dir(),
            Path::new("/sys/fs/cgroup/a/b")
        );
        assert!(Cgroup::at(m, "/a/../../etc").is_none());
        assert!(Cgroup::at(m, "a/b").is_none());
        assert!(Cgroup::at(m, "/a/./b").is_some_and(|c| c.dir() == Path::new("/sys/fs/cgroup/a/b")));
        assert!(Cgroup::at(m, "/a\0b").is_none());
    }

    #[test]
    fn a_subtree_mount_finds_only_cgroups_below_its_root() {
        let container = "50 40 0:30 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let mounts = parse_unified_mounts(container);
        let found = Cgroup::find_in(&mounts, "/docker/abc/warden/service-1").unwrap();
        assert_eq!(found.dir(), Path::new("/sys/fs/cgroup/warden/service-1"));
        assert_eq!(found.relative(), "/docker/abc/warden/service-1");
        assert!(Cgroup::find_in(&mounts, "/warden/service-1").is_none());
        assert!(Cgroup::find_in(&mounts, "/docker/abcd/x").is_none());
        // A whole-hierarchy mount wins over a subtree one.
        let both = format!("{container}51 40 0:30 / /mnt/cg rw - cgroup2 cgroup2 rw\n");
        let mounts = parse_unified_mounts(&both);
        assert_eq!(
            Cgroup::find_in(&mounts, "/warden/s").unwrap().dir(),
            Path::new("/mnt/cg/warden/s")
        );
        assert_eq!(parse_unified_mount(&both), Some(PathBuf::from("/mnt/cg")));
    }

    #[test]
    fn the_root_cgroup_is_never_killed() {
        let root = Cgroup::at(Path::new("/nonexistent-cgroup-root"), "//").unwrap();
        assert!(root.is_root());
        assert_eq!(root.kill().unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert!(root.signal(Signal::SIGKILL).is_err());
    }

    #[test]
    fn contains_covers_the_cgroup_and_its_descendants_only() {
        let c = Cgroup::at(Path::new("/cg"), "/w/s-1").unwrap();
        assert!(c.contains("/w/s-1"));
        assert!(c.contains("/w/s-1/helper"));
        assert!(c.contains("/w/./s-1/"));
        assert!(!c.contains("/w/s-10"));
        assert!(!c.contains("/w"));
        assert!(!c.contains("w/s-1"));
    }

    #[test]
    fn a_missing_cgroup_is_empty() {
        let c = Cgroup::at(Path::new("/nonexistent-cgroup-root"), "/x").unwrap();
        assert!(!c.is_populated().unwrap());
        assert!(c.pids().unwrap().is_empty());
        assert!(c.kill().is_ok());
    }
}
