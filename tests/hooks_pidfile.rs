//! Hooks mode's `service.pidfile` against real processes (SPEC §6, §9): read from its
//! first line, pinned with its start time at promotion, and killed only while it is that
//! process; stale, garbage and dangerous pidfiles are refused with a clear message.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use warden::config::{ServiceConfig, ServiceMode};
use warden::service::{Hooks, PidfileError, PinnedService};
use warden_fencing::{process, SignalName};

/// Generous: these tests start processes on possibly loaded CI machines.
const DEADLINE: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(10);

fn hooks(pidfile: &Path) -> Hooks {
    let config = ServiceConfig {
        mode: ServiceMode::Hooks,
        command: Vec::new(),
        stop_signal: SignalName(Signal::SIGTERM),
        stop_timeout: Duration::from_secs(3),
        promote: vec!["/bin/true".into()],
        demote: vec!["/bin/true".into()],
        follow: Vec::new(),
        hook_timeout: Duration::from_secs(10),
        pidfile: Some(pidfile.to_path_buf()),
    };
    Hooks::new(&config, "rm", "rm1")
}

/// A stand-in for the always-running service, killed when the test ends.
struct Service(Child);

impl Service {
    fn start() -> Service {
        Service(
            Command::new("sleep")
                .arg("300")
                .stdin(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Whether it still runs (not yet reaped, not a zombie).
    fn running(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None)) && process::is_running(self.pid(), None)
    }

    /// Waits for it to end, and says how.
    fn ended(&mut self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        let deadline = Instant::now() + DEADLINE;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.0.try_wait() {
                return status.signal();
            }
            std::thread::sleep(POLL);
        }
        panic!("pid {} did not end", self.pid());
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// PostgreSQL's `postmaster.pid`: the pid, then the data directory, start time, port,
/// socket directory, listen address, shared memory key and status.
fn postmaster_pid(pid: u32) -> String {
    format!("{pid}\n/var/lib/postgresql/16/main\n1718000000\n5432\n/var/run/postgresql\n*\n  5432001         0\nready   \n")
}

fn pidfile_with(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("service.pid");
    fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_postmaster_pid_style_pidfile_is_read_from_its_first_line_pinned_and_killed() {
    let dir = tempfile::tempdir().unwrap();
    let mut service = Service::start();
    let pid = service.pid();
    let path = pidfile_with(dir.path(), &postmaster_pid(pid));
    let hooks = hooks(&path);
    let expected = PinnedService {
        pid,
        start_time: process::start_time(pid).unwrap(),
    };

    assert_eq!(hooks.check_pidfile(), Ok(Some(expected)));
    assert_eq!(hooks.pinned(), None, "checking at start pins nothing");
    assert_eq!(hooks.pin(), Ok(Some(expected)));
    assert_eq!(hooks.pinned(), Some(expected));
    // A clone (the task that demotes) kills what the promotion pinned.
    assert!(hooks.clone().kill());
    assert_eq!(service.ended(), Some(libc::SIGKILL));
}

#[test]
fn a_pidfile_that_names_another_process_than_the_pinned_one_is_never_signalled() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = Service::start();
    let path = pidfile_with(dir.path(), &format!("{}\n", first.pid()));
    let hooks = hooks(&path);
    hooks.pin().unwrap();
    // The pinned process ends; another one runs and the pidfile names it now.
    let _ = first.0.kill();
    let _ = first.0.wait();
    let mut second = Service::start();
    fs::write(&path, format!("{}\n", second.pid())).unwrap();

    assert!(!hooks.kill(), "killed a process that was not pinned");
    assert!(
        second.running(),
        "the process the stale pidfile names was signalled"
    );
}

/// Clock ticks since boot now, in the unit of a process's start time (from /proc/uptime,
/// in hundredths of a second; Linux reports start times at USER_HZ = 100).
fn process_clock_ticks() -> u64 {
    let uptime = fs::read_to_string("/proc/uptime").unwrap();
    let seconds = uptime.split_whitespace().next().unwrap();
    let (whole, hundredths) = seconds.split_once('.').unwrap();
    whole.parse::<u64>().unwrap() * 100 + hundredths.parse::<u64>().unwrap()
}

/// Makes the kernel give the next process `pid`, through `ns_last_pid` (root only).
/// `None` when that is not possible here, or other processes kept taking the pid.
fn start_with_pid(pid: u32) -> Option<Service> {
    for _ in 0..200 {
        fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).ok()?;
        let service = Service::start();
        if service.pid() == pid {
            return Some(service);
        }
    }
    None
}

#[test]
fn a_pinned_pid_reused_by_another_process_is_never_signalled() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = Service::start();
    let pid = first.pid();
    let path = pidfile_with(dir.path(), &format!("{pid}\n"));
    let hooks = hooks(&path);
    let pinned = hooks.pin().unwrap().unwrap();
    let _ = first.0.kill();
    let _ = first.0.wait();
    // A start time counts clock ticks: the next process must start in a later one to be
    // told apart.
    let deadline = Instant::now() + DEADLINE;
    while process_clock_ticks() <= pinned.start_time + 1 {
        assert!(Instant::now() < deadline, "the clock does not advance");
        std::thread::sleep(POLL);
    }

    let Some(mut reused) = start_with_pid(pid) else {
        eprintln!("skipped: cannot make the kernel reuse pid {pid} (needs root)");
        return;
    };
    let now = process::start_time(pid).unwrap();
    assert_ne!(now, pinned.start_time, "the same process?");
    // The pidfile still names pid `pid`: the same number, another process.
    assert!(!hooks.kill(), "killed a process that reused the pinned pid");
    assert!(
        reused.running(),
        "the process that reused the pid was signalled"
    );
}

#[test]
fn a_pidfile_naming_warden_itself_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let me = std::process::id();
    let path = pidfile_with(dir.path(), &format!("{me}\n"));
    let hooks = hooks(&path);
    let refused = PidfileError::Refused {
        path: path.clone(),
        pid: me,
        what: "which is warden itself",
    };
    assert_eq!(hooks.check_pidfile(), Err(refused.clone()));
    assert_eq!(hooks.pin(), Err(refused.clone()));
    assert_eq!(
        refused.to_string(),
        format!(
            "the pidfile {} (service.pidfile) names pid {me}, which is warden itself: warden \
             never signals it; set service.pidfile to the service's own pidfile",
            path.display()
        )
    );
    assert!(!hooks.kill(), "nothing pinned, nothing killed");
    // Still here.
}

#[test]
fn a_pidfile_that_is_not_a_pid_is_an_error_at_start_and_at_promotion() {
    let dir = tempfile::tempdir().unwrap();
    let path = pidfile_with(dir.path(), "hello world\n1234\n");
    let hooks = hooks(&path);
    let expected = PidfileError::NotAPid {
        path: path.clone(),
        holds: "hello world".into(),
    };
    assert_eq!(hooks.check_pidfile(), Err(expected.clone()));
    assert_eq!(hooks.pin(), Err(expected.clone()));
    assert_eq!(
        expected.to_string(),
        format!(
            "the pidfile {} (service.pidfile) holds \"hello world\" on its first line, which \
             is not a pid: set service.pidfile to the file where the service writes its pid \
             on the first line (as PostgreSQL's postmaster.pid)",
            path.display()
        )
    );

    for text in ["-5\n", "+5\n", "99999999999\n", "12 34\n", "\u{0}\u{1}\n"] {
        fs::write(&path, text).unwrap();
        let e = hooks.pin().unwrap_err();
        assert!(matches!(e, PidfileError::NotAPid { .. }), "{text:?}: {e}");
    }
    for text in ["", "\n", "  \n\n"] {
        fs::write(&path, text).unwrap();
        let e = hooks.check_pidfile().unwrap_err();
        assert_eq!(e, PidfileError::Empty { path: path.clone() }, "{text:?}");
    }
    for pid in [0, 1] {
        fs::write(&path, format!("{pid}\n")).unwrap();
        let e = hooks.pin().unwrap_err();
        assert!(matches!(e, PidfileError::Refused { .. }), "{pid}: {e}");
    }
}

#[test]
fn a_missing_or_stale_pidfile_is_a_warning_at_start_and_an_error_at_promotion() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-yet.pid");
    let hooks = hooks(&path);
    assert_eq!(hooks.check_pidfile(), Ok(None));
    assert_eq!(
        hooks.pin(),
        Err(PidfileError::Missing { path: path.clone() })
    );

    // A pid whose process has ended (and was reaped).
    let mut gone = Service::start();
    let pid = gone.pid();
    let _ = gone.0.kill();
    let _ = gone.0.wait();
    fs::write(&path, format!("{pid}\n")).unwrap();
    if process::stat(pid).is_none() {
        assert_eq!(hooks.check_pidfile(), Ok(None));
        assert_eq!(
            hooks.pin(),
            Err(PidfileError::NotRunning {
                path: path.clone(),
                pid
            })
        );
    }
    assert_eq!(hooks.pinned(), None, "a failed pin leaves nothing pinned");
}

#[test]
fn check_config_refuses_a_relative_pidfile() {
    let text = r#"
[cluster]
name = "rm"
node_id = "rm1"

[coordination.zookeeper]
connect = "127.0.0.1:2181"
acl = "open"

[service]
mode = "hooks"
promote = ["/bin/true"]
demote = ["/bin/true"]
pidfile = "run/my-service.pid"

[[fence]]
kind = "script"
command = ["/bin/true"]
"#;
    let err = warden::config::parse(text, Path::new("/etc/warden/warden.toml")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "/etc/warden/warden.toml:14:11: `service.pidfile` = \"run/my-service.pid\" must be an \
         absolute path, such as \"/run/my-service.pid\""
    );
    let absolute = text.replace("\"run/my-service.pid\"", "\"/run/my-service.pid\"");
    let config = warden::config::parse(&absolute, Path::new("/etc/warden/warden.toml")).unwrap();
    assert_eq!(
        config.service.pidfile.as_deref(),
        Some(Path::new("/run/my-service.pid"))
    );
}

/// SPEC §6a.2: a called-off switchover pins anew only when the pinned process is gone and
/// the pidfile names another running one (the demote restarted the service); a pinned
/// process that still runs stays pinned whatever the pidfile says, and a pidfile that
/// names nothing running leaves the pin as it was (the promote is then refused).
#[test]
fn a_called_off_switchover_pins_the_pidfile_process_only_when_the_pinned_one_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = Service::start();
    let path = pidfile_with(dir.path(), &format!("{}\n", first.pid()));
    let hooks = hooks(&path);
    let pinned = hooks.pin().unwrap().unwrap();
    let second = Service::start();
    let now = PinnedService {
        pid: second.pid(),
        start_time: process::start_time(second.pid()).unwrap(),
    };
    fs::write(&path, format!("{}\n", second.pid())).unwrap();
    assert_eq!(hooks.repin(), None, "the pinned process still runs");
    assert_eq!(hooks.pinned(), Some(pinned));

    let _ = first.0.kill();
    let _ = first.0.wait();
    fs::write(&path, format!("{}\n", std::process::id() + 1_000_000)).unwrap();
    assert_eq!(hooks.repin(), None, "the pidfile names nothing running");
    assert_eq!(hooks.pinned(), Some(pinned));

    fs::write(&path, postmaster_pid(second.pid())).unwrap();
    assert_eq!(hooks.clone().repin(), Some((pinned, now)));
    assert_eq!(hooks.pinned(), Some(now), "clones share the pin");
}
