//! `warden fence-local`: the remote half of `ssh` fencing (SPEC §5). The `ssh` method of
//! the fencing node runs it on the old active's host with that incarnation's record as
//! arguments (built by `warden_fencing::fence_local_args`, so both ends agree).
//!
//! It does on this host what the `signal` method does on its own, through the same
//! `terminate_incarnation`: it signals the recorded warden process and service group only
//! where start times still match, falls back to whatever listens on the recorded port when
//! the record names no service pid or group, waits until none of it remains, and says so.
//! A boot id other than the recorded one means the host rebooted since, which ended the
//! incarnation: fenced. It reads no config file and no environment (sshd passes neither).
//!
//! Output: one line per finding (stdout for what was done or found gone, stderr for what
//! stops it from verifying), then a verdict line. Exit codes: 0 fenced, and the last
//! stdout line then starts with `warden_fencing::FENCE_LOCAL_FENCED`; 1 not fenced (the
//! lines say what still runs or cannot be verified); 2 bad arguments.
//!
//! It bounds itself: it waits at most `--timeout` for the processes to go, and a watchdog
//! ends it with exit 1 shortly after that whatever it is stuck in, because a timed-out ssh
//! channel does not stop the remote command.

use clap::Args;
use nix::sys::signal::Signal;
use std::sync::mpsc;
use std::time::Duration;
use warden_fencing::process::{self, TerminateOptions};
use warden_fencing::{SignalName, Target, FENCE_LOCAL_FENCED};

/// How long past `--timeout` fence-local may take before its watchdog ends it with exit 1:
/// time to print its findings after the wait. The ssh side passes a `--timeout` that ends
/// a second before its own deadline, so this still falls inside it.
const WATCHDOG_GRACE: Duration = Duration::from_millis(500);

/// Exit codes (SPEC §5): verified fenced; not fenced; bad arguments.
pub const EXIT_FENCED: i32 = 0;
pub const EXIT_NOT_FENCED: i32 = 1;
pub const EXIT_BAD_ARGUMENTS: i32 = 2;

/// The record of the incarnation to fence on this host, as `warden fence-local` takes it.
/// Pids and start times (clock ticks since boot, `/proc/PID/stat` field 22) come from the
/// breadcrumb; a field the record lacks is left out.
#[derive(Args, Clone, Debug, PartialEq, Eq)]
pub struct FenceLocalArgs {
    /// `/proc/sys/kernel/random/boot_id` of this host when the incarnation was recorded.
    /// Required: without it, recorded pids could belong to an earlier boot.
    #[arg(long, value_name = "UUID")]
    pub boot_id: String,
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
    /// The service's port: whatever listens on it is killed when the record names no
    /// service pid or group.
    #[arg(long)]
    pub port: Option<u16>,
    /// The signal to send; anything but SIGKILL is followed by SIGCONT.
    #[arg(long, default_value = "SIGKILL")]
    pub signal: SignalName,
    /// How long to wait for the processes to go (e.g. `10s`, `2500ms`).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

impl FenceLocalArgs {
    /// The record as the fencing crate's [`Target`].
    pub fn target(&self) -> Target {
        Target {
            boot_id: Some(self.boot_id.clone()),
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
        if id.is_empty() || id.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "--boot-id {id:?} is not a boot id (expected a UUID such as the content of \
                 /proc/sys/kernel/random/boot_id)"
            ));
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
                eprintln!(
                    "fence-local: NOT fenced: still working after {}; giving up",
                    humantime::format_duration(bound)
                );
                std::process::exit(EXIT_NOT_FENCED);
            }
        });
        Watchdog { _disarm: tx }
    }
}

/// Runs `warden fence-local` and returns its exit code: 0 verified fenced, 1 not fenced,
/// 2 bad arguments. Prints its findings and verdict (see the module doc).
pub async fn run(args: &FenceLocalArgs) -> i32 {
    if let Err(e) = args.validate() {
        eprintln!("fence-local: {e}");
        return EXIT_BAD_ARGUMENTS;
    }
    let _watchdog = Watchdog::arm(args.timeout + WATCHDOG_GRACE);
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "this host".to_string());

    let now = match process::boot_id() {
        Ok(id) => id,
        Err(e) => {
            eprintln!(
                "fence-local: NOT fenced: cannot read the boot id of {host}: {e}; is /proc \
                 mounted?"
            );
            return EXIT_NOT_FENCED;
        }
    };
    if now != args.boot_id {
        println!(
            "{FENCE_LOCAL_FENCED}: {host} rebooted since the record was written (boot id {}, \
             now {now}), which ended the incarnation",
            args.boot_id
        );
        return EXIT_FENCED;
    }

    let signal: Signal = args.signal.0;
    println!(
        "fence-local: {host}: same boot as the record; sending {} to what remains of it, \
         waiting up to {}",
        signal.as_str(),
        humantime::format_duration(args.timeout)
    );
    let opts = TerminateOptions {
        signal,
        pidfile: None,
        // This host is the old active's: whatever serves on its port is the old service.
        port_fallback: true,
    };
    let deadline = tokio::time::Instant::now() + args.timeout;
    let report = process::terminate_incarnation(&args.target(), &opts, deadline).await;

    for s in &report.signalled {
        println!("fence-local: sent {} to {s}", signal.as_str());
    }
    for g in &report.gone {
        println!("fence-local: already gone: {g}");
    }
    for p in &report.problems {
        eprintln!("fence-local: cannot verify: {p}");
    }
    for r in &report.remaining {
        eprintln!(
            "fence-local: still running {}ms after {}: {r}",
            report.waited.as_millis(),
            signal.as_str()
        );
    }
    if report.is_fenced() {
        println!(
            "{FENCE_LOCAL_FENCED}: nothing of the incarnation remains on {host} ({})",
            report.summary()
        );
        EXIT_FENCED
    } else {
        eprintln!("fence-local: NOT fenced on {host}: {}", report.summary());
        EXIT_NOT_FENCED
    }
}
