//! Stopping a service of spawn mode (SPEC §6): [`stop`] (the signal, then SIGKILL after
//! the grace, until nothing of it remains), [`kill`] and [`gone`].

use super::*;

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

pub(super) fn stop_blocking(
    identity: &ServiceIdentity,
    signal: SignalName,
    grace: Duration,
) -> StopOutcome {
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
pub(super) struct Members<'a> {
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

/// Whether no process of the service's group remains, or the group is not ours anymore.
pub(super) fn group_gone(identity: &ServiceIdentity) -> bool {
    recycled(identity) || process::group_members(identity.pgid).is_empty()
}

/// The leader's pid now belongs to another process: our group is gone (a group id cannot
/// be reused while any member of the group lives).
pub(super) fn recycled(identity: &ServiceIdentity) -> bool {
    matches!(process::start_time(identity.pid), Some(t) if t != identity.start_time)
}

/// Sends `signal` to the service's group. `Ok(false)`: nothing to signal (gone or
/// recycled). Refuses group ids 0 and 1 and warden's own group, which `killpg` would read
/// as "warden itself" or "everything".
pub(super) fn signal_group(identity: &ServiceIdentity, signal: Signal) -> Result<bool, Errno> {
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
