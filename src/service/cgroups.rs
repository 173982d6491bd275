//! The cgroup v2 side of spawn mode: whether warden may make the service's cgroup, how
//! the child enters it before exec, and its removal.

use super::*;

/// Where the service's cgroups go.
#[derive(Debug)]
pub(super) struct CgroupPlan {
    /// The cgroup v2 mount point and the cgroup below which each start's cgroup is made
    /// (warden's own when the spawner was made), or why the service runs in its process
    /// group only.
    pub(super) base: Result<(PathBuf, String), String>,
    /// Warden runs in `<base>/supervisor`, a sibling of the service's cgroups.
    pub(super) in_supervisor: bool,
}

impl CgroupPlan {
    /// From now on the service runs in its process group only; said once.
    pub(super) fn fall_back(&mut self, why: String) {
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
pub(super) fn probe_cgroups() -> CgroupPlan {
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

pub(super) fn warn_process_group_only(why: &str) {
    warn!(reason = %why,
        "the service will run in its process group only, without a cgroup of its own: a \
         helper of it that calls setsid() or double-forks escapes stop, kill and fencing. \
         To fix: {CGROUP_FIX}");
}

/// `parent/name` for cgroup paths relative to the hierarchy's root.
pub(super) fn child_path(parent: &str, name: &str) -> String {
    format!("{}/{name}", parent.trim_end_matches('/'))
}

/// In the child, before exec: moves this process into the cgroup whose `cgroup.procs` is
/// open as `procs`. On failure, writes the errno to `errors` for the parent.
pub(super) fn enter_cgroup(procs: RawFd, errors: RawFd) -> io::Result<()> {
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
pub(super) fn read_entry_error(errors: &OwnedFd) -> Option<i32> {
    let mut code = [0u8; 4];
    match nix::unistd::read(errors, &mut code) {
        Ok(4) => Some(i32::from_ne_bytes(code)),
        _ => None,
    }
}

/// Removes a service cgroup once nothing runs in it, with any cgroups the service made
/// below it; a failure is logged (an empty leftover is harmless: every start uses a
/// fresh name).
pub(super) fn remove_cgroup(cgroup: &Cgroup) {
    if let Err(e) = remove_tree(cgroup.dir(), 0) {
        warn!(cgroup = cgroup.relative(), error = %io_reason(&e),
            "could not remove the service's empty cgroup; it is harmless, and rmdir removes it");
    }
}

/// Depth guard for [`remove_tree`], against a pathological tree.
pub(super) const MAX_CGROUP_DEPTH: usize = 32;

/// rmdir of a cgroup directory and its child cgroups, deepest first (a cgroup's files
/// are not removed by hand: rmdir of the directory takes them).
pub(super) fn remove_tree(dir: &Path, depth: usize) -> io::Result<()> {
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
