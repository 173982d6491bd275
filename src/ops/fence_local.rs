//! `warden fence-local`: the remote half of `ssh` fencing (SPEC §5). The `ssh` method of
//! the fencing node runs it on the old active's host with that incarnation's record as
//! arguments (built by `warden_fencing::fence_local_args`, so both ends agree).
//!
//! It does on this host what the `signal` method does on its own, through the same
//! `terminate_incarnation`: it signals the recorded warden process and service group only
//! where start times still match, kills the recorded service cgroup, falls back to
//! whatever listens on the recorded port when the record names no service pid, group or
//! cgroup, waits until none of it remains, and says so. It reads no config file and no
//! environment (sshd passes neither).
//!
//! Which host this is (SPEC §5) is decided by the recorded boot id, machine id and pid
//! namespace, compared parsed (a boot id in upper case is the same boot): ssh reached a
//! host by *name*, and a cloned machine, a rescheduled pod or a container on a shared
//! kernel may answer to it. Another boot id on the recorded machine means it rebooted,
//! which ended the incarnation: fenced. Another boot id without the recorded machine id
//! (or on another machine) is NOT fenced: nothing here can tell whether this is the
//! recorded machine. The same boot in another pid namespace cannot see the recorded pids:
//! NOT fenced, though the recorded cgroup, when found and verified to hold that
//! namespace's processes, is still killed.
//!
//! Output: one line per finding (stdout for what was done or found gone, stderr for what
//! stops it from verifying), then a verdict line. Exit codes: 0 fenced, and the last
//! stdout line then starts with `warden_fencing::FENCE_LOCAL_FENCED`; 1 not fenced (the
//! lines say what still runs or cannot be verified); 2 bad arguments.
//!
//! It bounds itself: it waits at most `--timeout` for the processes to go, and a watchdog
//! ends it with exit 1 shortly after that whatever it is stuck in, because a timed-out ssh
//! channel does not stop the remote command.

use crate::error::Error;
use clap::{Args, Parser};
use nix::sys::signal::Signal;
use std::ffi::OsString;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;
use warden_fencing::cgroup::Cgroup;
use warden_fencing::process::{self, TerminateOptions, Whereabouts};
use warden_fencing::{SignalName, Target, FENCE_LOCAL_FENCED, FENCE_LOCAL_MAX_TIMEOUT};

/// How long past `--timeout` fence-local may take before its watchdog ends it with exit 1:
/// time to print its findings after the wait. The ssh side passes a `--timeout` that ends
/// a second before its own deadline, so this still falls inside it.
const WATCHDOG_GRACE: Duration = Duration::from_millis(500);

/// Exit codes (SPEC §5) where this module ends the process itself, or clap does: not
/// fenced (the watchdog); bad arguments (clap's usage errors). [`run`]'s own outcomes are
/// [`Error`]s, which `main` maps to the same codes.
pub const EXIT_NOT_FENCED: i32 = crate::error::EXIT_FAILED as i32;
pub const EXIT_BAD_ARGUMENTS: i32 = crate::error::EXIT_USAGE as i32;

/// The record of the incarnation to fence on this host, as `warden fence-local` takes it.
/// Pids and start times (clock ticks since boot, `/proc/PID/stat` field 22) come from the
/// breadcrumb; a field the record lacks is left out.
#[derive(Args, Clone, Debug, PartialEq, Eq)]
pub struct FenceLocalArgs {
    /// `/proc/sys/kernel/random/boot_id` of this host when the incarnation was recorded.
    /// Required: without it, recorded pids could belong to an earlier boot.
    #[arg(long, value_name = "UUID")]
    pub boot_id: String,
    /// `/etc/machine-id` of this host when the incarnation was recorded (32 hex digits).
    /// Without it, another boot id cannot be told from another machine.
    #[arg(long, value_name = "ID")]
    pub machine_id: Option<String>,
    /// The inode of the old warden's pid namespace (`/proc/self/ns/pid`): in another one,
    /// the recorded pids name other processes.
    #[arg(long, value_name = "INODE")]
    pub pid_ns: Option<u64>,
    /// The old warden process.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// The old warden process's start time.
    #[arg(long, value_name = "TICKS", requires = "pid")]
    pub start_time: Option<u64>,
    /// The old service's pid.
    #[arg(long, value_name = "PID")]
    pub service_pid: Option<u32>,
    /// The old service's process group.
    #[arg(long, value_name = "PGID")]
    pub service_pgid: Option<u32>,
    /// The old service's start time (of the service pid, or of the group's leader).
    #[arg(long, value_name = "TICKS")]
    pub service_start_time: Option<u64>,
    /// The old service's cgroup v2, relative to the hierarchy's root (as in
    /// `/proc/PID/cgroup`): every process in it is killed through `cgroup.kill`.
    #[arg(long, value_name = "PATH")]
    pub service_cgroup: Option<String>,
    /// The inode of the old warden's cgroup namespace (`/proc/self/ns/cgroup`), whose
    /// root `--service-cgroup` is relative to: from another cgroup namespace the cgroup
    /// cannot be looked up, and is never taken for removed.
    #[arg(long, value_name = "INODE", requires = "service_cgroup")]
    pub cgroup_ns: Option<u64>,
    /// The epoch the old node was promoted with: a promoted record that names no service
    /// process is not fenced by finding its warden gone (only listeners found on `--port`
    /// stand in for the service).
    #[arg(long)]
    pub epoch: Option<u64>,
    /// The service's port: whatever listens on it is killed when the record names no
    /// service pid, group or cgroup.
    #[arg(long)]
    pub port: Option<u16>,
    /// The signal to send; anything but SIGKILL is followed by SIGCONT.
    #[arg(long, default_value = "SIGKILL", value_parser = parse_fence_signal)]
    pub signal: SignalName,
    /// How long to wait for the processes to go (e.g. `10s`, `2500ms`; at most 1h).
    #[arg(long, default_value = "10s", value_parser = parse_timeout)]
    pub timeout: Duration,
}

/// `--signal`: one a fence can use ([`warden_fencing::values::fence_signal_refusal`]).
fn parse_fence_signal(text: &str) -> Result<SignalName, String> {
    let signal: SignalName = text.parse()?;
    match warden_fencing::values::fence_signal_refusal(signal.0) {
        Some(why) => Err(format!("{text:?} {why}")),
        None => Ok(signal),
    }
}

/// A `--timeout`: a duration up to [`FENCE_LOCAL_MAX_TIMEOUT`].
fn parse_timeout(text: &str) -> Result<Duration, String> {
    let max = humantime::format_duration(FENCE_LOCAL_MAX_TIMEOUT);
    let d = humantime::parse_duration(text).map_err(|e| {
        format!("{text:?} is not a duration ({e}); write it like 10s or 2500ms, at most {max}")
    })?;
    if d > FENCE_LOCAL_MAX_TIMEOUT {
        return Err(format!(
            "{text} is longer than fence-local waits ({max} at most): processes that a signal \
             has not ended by then will not end by waiting; pass a shorter --timeout"
        ));
    }
    Ok(d)
}

/// `fence-local`'s arguments as a command line of their own, for
/// [`FenceLocalArgs::parse_from_args`]: the clap definition `warden fence-local` flattens.
#[derive(Parser)]
#[command(name = "warden fence-local", no_binary_name = true)]
struct FenceLocalCommand {
    #[command(flatten)]
    args: FenceLocalArgs,
}

impl FenceLocalArgs {
    /// Parses and validates `argv` (the arguments after `fence-local`, as the ssh method
    /// sends them) the way `warden fence-local` does: clap's parse, then [`run`]'s own
    /// checks. The error is what fence-local would print before exiting with
    /// [`EXIT_BAD_ARGUMENTS`]. For tests and the `fence_local_args` fuzz target: argv
    /// comes from the network, so this must never panic.
    pub fn parse_from_args<I, T>(argv: I) -> Result<FenceLocalArgs, String>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let args = FenceLocalCommand::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .args;
        args.validate()?;
        Ok(args)
    }

    /// The record as the fencing crate's [`Target`].
    pub fn target(&self) -> Target {
        Target {
            boot_id: Some(self.boot_id.clone()),
            machine_id: self.machine_id.clone(),
            pid_ns: self.pid_ns,
            service_cgroup: self.service_cgroup.clone(),
            cgroup_ns: self.cgroup_ns,
            epoch: self.epoch,
            pid: self.pid,
            start_time: self.start_time,
            service_pid: self.service_pid,
            service_pgid: self.service_pgid,
            service_start_time: self.service_start_time,
            port: self.port,
            ..Target::default()
        }
    }

    /// What clap cannot check on its own.
    fn validate(&self) -> Result<(), String> {
        let id = &self.boot_id;
        if process::parse_boot_id(id).is_none() || id.trim() != id {
            return Err(format!(
                "--boot-id {id:?} is not a boot id (expected a UUID such as the content of \
                 /proc/sys/kernel/random/boot_id)"
            ));
        }
        if let Some(m) = &self.machine_id {
            if process::parse_machine_id(m).is_none() || m.trim() != m {
                return Err(format!(
                    "--machine-id {m:?} is not a machine id (expected 32 hex digits such as the \
                     content of /etc/machine-id)"
                ));
            }
        }
        if self.cgroup_ns == Some(0) {
            return Err(
                "--cgroup-ns 0 is not a cgroup namespace (expected the inode number of \
                 /proc/PID/ns/cgroup, as `stat -L -c %i /proc/self/ns/cgroup` prints it)"
                    .to_string(),
            );
        }
        if self.pid_ns == Some(0) {
            return Err(
                "--pid-ns 0 is not a pid namespace (expected the inode number of \
                 /proc/PID/ns/pid, as `stat -L -c %i /proc/self/ns/pid` prints it)"
                    .to_string(),
            );
        }
        if let Some(c) = &self.service_cgroup {
            let plain = Cgroup::at(Path::new("/"), c).is_some_and(|cg| !cg.is_root());
            if !plain {
                return Err(format!(
                    "--service-cgroup {c:?} is not a service's cgroup (expected a path below the \
                     hierarchy's root as in /proc/PID/cgroup, such as /system.slice/warden.service/service-42, \
                     without `..`, and not the root itself)"
                ));
            }
        }
        if self.service_start_time.is_some()
            && self.service_pid.is_none()
            && self.service_pgid.is_none()
        {
            return Err(
                "--service-start-time needs --service-pid or --service-pgid to apply to"
                    .to_string(),
            );
        }
        Ok(())
    }
}

/// Ends the process with [`EXIT_NOT_FENCED`] if it is still running `bound` after it was
/// armed; disarmed when dropped.
struct Watchdog {
    _disarm: mpsc::Sender<()>,
}

impl Watchdog {
    fn arm(bound: Duration) -> Watchdog {
        let (tx, rx) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            // Disconnected = the watchdog was dropped: fence-local finished in time.
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(bound) {
                crate::errln!(
                    "fence-local: NOT fenced: still working after {}; giving up (a process \
                     stuck in the kernel, or a /proc too slow to read?); check the old \
                     incarnation's processes on this host by hand",
                    humantime::format_duration(bound)
                );
                std::process::exit(EXIT_NOT_FENCED);
            }
        });
        Watchdog { _disarm: tx }
    }
}

/// Runs `warden fence-local`: `Ok` when verified fenced, else [`Error::NotFenced`] or
/// [`Error::FenceLocalArguments`] (exit 1, 2). Prints its findings, and its verdict when
/// fenced (see the module doc); `main` prints the verdict otherwise.
pub async fn run(args: &FenceLocalArgs) -> Result<(), Error> {
    args.validate().map_err(Error::FenceLocalArguments)?;
    // --timeout is at most an hour (parse_timeout); saturating all the same.
    let _watchdog = Watchdog::arm(args.timeout.saturating_add(WATCHDOG_GRACE));
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "this host".to_string());

    let now = match process::boot_id() {
        Ok(id) => id,
        Err(e) => {
            return Err(Error::NotFenced(format!(
                "NOT fenced: cannot read the boot id of {host}: {e}; is /proc mounted?"
            )))
        }
    };
    // Unknown here (empty, 0) means neither "this boot" nor "rebooted": never fenced by
    // a guess about which machine this is.
    let machine_id = process::machine_id().unwrap_or_default();
    let pid_ns = process::pid_ns().unwrap_or(0);
    let target = args.target();
    let foreign_pid_ns = match process::whereabouts(&now, &machine_id, pid_ns, &target) {
        Whereabouts::Rebooted(how) => {
            crate::outln!("{FENCE_LOCAL_FENCED}: {host}: {how}");
            return Ok(());
        }
        Whereabouts::Elsewhere(why) => {
            return Err(Error::NotFenced(format!(
                "NOT fenced on {host}: {why}. Fence that machine by a method that reaches it, \
                 or confirm by hand with `warden fence --confirm`"
            )))
        }
        Whereabouts::ThisBoot => None,
        Whereabouts::OtherPidNamespace { recorded, here } => {
            crate::errln!(
                "fence-local: {host}: the incarnation ran on this boot of this machine but in pid \
                 namespace {recorded}, and fence-local runs in {here}: its recorded pids cannot \
                 be checked from here, so it cannot be verified fenced"
            );
            Some(recorded)
        }
    };

    let signal: Signal = args.signal.0;
    crate::outln!(
        "fence-local: {host}: the record's boot and machine; sending {} to what remains of it, \
         waiting up to {}",
        signal.as_str(),
        humantime::format_duration(args.timeout)
    );
    let opts = TerminateOptions {
        signal,
        pidfile: None,
        // This host is the old active's: whatever serves on its port is the old service.
        port_fallback: true,
        foreign_pid_ns,
    };
    let deadline = process::deadline_after(tokio::time::Instant::now(), args.timeout);
    let report = process::terminate_incarnation(&target, &opts, deadline).await;

    for s in &report.killed {
        crate::outln!("fence-local: killed every process of {s} (cgroup.kill)");
    }
    for s in &report.signalled {
        crate::outln!("fence-local: sent {} to {s}", signal.as_str());
    }
    for g in &report.gone {
        crate::outln!("fence-local: already gone: {g}");
    }
    for p in &report.problems {
        crate::errln!("fence-local: cannot verify: {p}");
    }
    for r in &report.remaining {
        crate::errln!(
            "fence-local: still running {}ms after {}: {r}",
            report.waited.as_millis(),
            signal.as_str()
        );
    }
    if report.is_fenced() {
        crate::outln!(
            "{FENCE_LOCAL_FENCED}: nothing of the incarnation remains on {host} ({})",
            report.summary()
        );
        Ok(())
    } else {
        Err(Error::NotFenced(format!(
            "NOT fenced on {host}: {}",
            report.summary()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT_ID: &str = "0d4b3c6e-4a4f-4c55-9f43-2b8d1e0c1f00";

    fn parse(argv: &[&str]) -> Result<FenceLocalArgs, String> {
        FenceLocalArgs::parse_from_args(argv)
    }

    #[test]
    fn what_the_ssh_method_sends_parses_back_to_its_target() {
        let target = Target {
            boot_id: Some(BOOT_ID.into()),
            machine_id: Some("3d1219c7c4c5404aaa1f6d2a48adfda4".into()),
            pid_ns: Some(4026531836),
            pid: Some(4242),
            start_time: Some(123_456),
            service_pgid: Some(4300),
            service_start_time: Some(123_999),
            service_cgroup: Some("/system.slice/warden.service/service-1".into()),
            epoch: Some(7),
            port: Some(5432),
            ..Target::default()
        };
        let argv = warden_fencing::fence_local_args(&target, Duration::from_millis(12_500));
        let args = FenceLocalArgs::parse_from_args(&argv).expect("the ssh method's argv parses");
        assert_eq!(args.target(), target);
        assert_eq!(args.timeout, Duration::from_millis(12_500));
    }

    #[test]
    fn timeout_over_the_bound_is_refused_not_a_panic() {
        for t in [
            "18446744073709551615s",
            "3601s",
            "2h",
            "99999999999999999999999h",
        ] {
            let e = parse(&["--boot-id", BOOT_ID, "--timeout", t]).unwrap_err();
            assert!(e.contains("--timeout"), "{t}: {e}");
        }
        let ok = parse(&["--boot-id", BOOT_ID, "--timeout", "1h"]).expect("1h is the bound");
        assert_eq!(ok.timeout, FENCE_LOCAL_MAX_TIMEOUT);
    }

    #[test]
    fn what_clap_cannot_check_is_refused_by_the_same_entry_point() {
        for argv in [
            &["--boot-id", " 0d4b3c6e-4a4f-4c55-9f43-2b8d1e0c1f00"][..],
            &["--boot-id", "not-a-uuid"],
            &["--boot-id", BOOT_ID, "--machine-id", "xyz"],
            &["--boot-id", BOOT_ID, "--pid-ns", "0"],
            &["--boot-id", BOOT_ID, "--service-cgroup", "/"],
            &["--boot-id", BOOT_ID, "--service-cgroup", "/a/../b"],
            &["--boot-id", BOOT_ID, "--service-start-time", "5"],
            &["--boot-id", BOOT_ID, "--start-time", "5"],
            &["--pid", "1"],
        ] {
            assert!(parse(argv).is_err(), "{argv:?} accepted");
        }
    }

    #[test]
    fn arguments_that_are_not_utf8_are_refused() {
        use std::os::unix::ffi::OsStringExt;
        let argv = [
            OsString::from("--boot-id"),
            OsString::from_vec(b"\xff\xfe".to_vec()),
        ];
        assert!(FenceLocalArgs::parse_from_args(argv).is_err());
    }
}
