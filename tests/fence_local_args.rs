//! `warden fence-local` and the ssh method agree on its arguments: the list that
//! `warden_fencing::fence_local_args` builds parses into `FenceLocalArgs` with clap, and
//! `run` acts on real processes by the rules of SPEC §5.

use clap::Parser;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use warden::ops::fence_local::{self, FenceLocalArgs};
use warden_fencing::process;
use warden_fencing::{fence_local_args, Target};

mod common;
use common::{exit_code, wait_for, wait_until};

/// How long a process under test may take to start or end.
const WAIT: Duration = Duration::from_secs(10);

#[derive(Parser, Debug)]
#[command(name = "fence-local")]
struct Cli {
    #[command(flatten)]
    args: FenceLocalArgs,
}

fn parse(args: &[String]) -> Result<FenceLocalArgs, clap::Error> {
    Cli::try_parse_from(std::iter::once("fence-local".to_string()).chain(args.iter().cloned()))
        .map(|c| c.args)
}

fn boot_id() -> String {
    process::boot_id().expect("read this host's boot id")
}

/// A record of an incarnation on this boot of this machine, in this pid namespace (what
/// fence-local needs to act, SPEC §5), never promoted, with no processes yet.
fn this_boot() -> Target {
    Target {
        boot_id: Some(boot_id()),
        machine_id: Some(process::machine_id().expect("read this host's machine id")),
        pid_ns: Some(process::pid_ns().expect("read this process's pid namespace")),
        ..Target::default()
    }
}

/// A machine id that is not this host's.
fn other_machine_id() -> String {
    let mine = process::machine_id().expect("read this host's machine id");
    if mine.starts_with('0') {
        "1".repeat(32)
    } else {
        "0".repeat(32)
    }
}

/// Every field `fence-local` takes, as a breadcrumb records them.
fn full_target() -> Target {
    Target {
        boot_id: Some("0d4b3c6e-4a4f-4c55-9f43-2b8d1e0c1f00".into()),
        machine_id: Some("3d1219c7c4c5404aaa1f6d2a48adfda4".into()),
        pid_ns: Some(4026531836),
        pid: Some(4242),
        start_time: Some(123_456),
        service_pid: Some(4300),
        service_pgid: Some(4300),
        service_start_time: Some(123_999),
        service_cgroup: Some("/system.slice/warden.service/service-42".into()),
        epoch: Some(77),
        port: Some(8032),
        ..Target::default()
    }
}

#[test]
fn the_ssh_side_argument_list_parses_back_into_the_same_record() {
    let target = full_target();
    let timeout = Duration::from_millis(12_500);
    let args = parse(&fence_local_args(&target, timeout)).expect("the builder's list parses");
    assert_eq!(args.target(), target);
    assert_eq!(args.timeout, timeout);
    assert_eq!(args.signal.0, Signal::SIGKILL);
}

#[test]
fn a_sparse_record_parses_back_too() {
    let target = Target {
        boot_id: Some("b-1".into()),
        port: Some(9000),
        ..Target::default()
    };
    let args = parse(&fence_local_args(&target, Duration::from_secs(3))).unwrap();
    assert_eq!(args.target(), target);
    assert_eq!(args.timeout, Duration::from_secs(3));
}

#[test]
fn defaults_are_sigkill_and_ten_seconds() {
    let args = parse(&["--boot-id".into(), "b".into()]).unwrap();
    assert_eq!(args.signal.0, Signal::SIGKILL);
    assert_eq!(args.timeout, Duration::from_secs(10));
    let term = parse(&["--boot-id", "b", "--signal", "TERM"].map(String::from)).unwrap();
    assert_eq!(term.signal.0, Signal::SIGTERM);
}

#[test]
fn bad_arguments_are_usage_errors_with_exit_code_2() {
    for bad in [
        vec!["--pid", "1"],                                           // no boot id
        vec!["--boot-id", "b", "--start-time", "5"],                  // start time without pid
        vec!["--boot-id", "b", "--pid", "-3"],                        // not a pid
        vec!["--boot-id", "b", "--timeout", "soon"],                  // not a duration
        vec!["--boot-id", "b", "--signal", "SIGNOPE"],                // not a signal
        vec!["--boot-id", "b", "--service-pgid", "1", "--x"],         // unknown flag
        vec!["--boot-id", "b", "--timeout", "18446744073709551615s"], // overflows
        vec!["--boot-id", "b", "--timeout", "2h"], // longer than fence-local waits
        vec!["--boot-id", "b", "--pid-ns", "x"],   // not an inode number
        vec!["--boot-id", "b", "--signal", "SIGHUP"], // a warden ignores it
        vec!["--boot-id", "b", "--signal", "SIGSTOP"], // ends nothing
    ] {
        let args: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
        let e = parse(&args).expect_err(&format!("{bad:?} must be refused"));
        assert_eq!(
            e.exit_code(),
            fence_local::EXIT_BAD_ARGUMENTS,
            "{bad:?}: {e}"
        );
    }
}

fn args_for(target: &Target, timeout: Duration) -> FenceLocalArgs {
    parse(&fence_local_args(target, timeout)).unwrap()
}

#[test]
fn a_timeout_beyond_the_bound_says_why_and_what_to_do() {
    for timeout in ["18446744073709551615s", "2h"] {
        let args = ["--boot-id", "b", "--timeout", timeout].map(String::from);
        let e = parse(&args).expect_err("refused");
        let text = e.to_string();
        assert!(text.contains("--timeout"), "{text}");
        assert!(text.contains("1h"), "{text}");
    }
    assert_eq!(
        parse(&["--boot-id", "b", "--timeout", "1h"].map(String::from))
            .unwrap()
            .timeout,
        warden_fencing::FENCE_LOCAL_MAX_TIMEOUT
    );
}

#[test]
fn the_binary_exits_2_not_101_on_a_timeout_that_would_overflow() {
    let out = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args([
            "fence-local",
            "--boot-id",
            &boot_id(),
            "--timeout",
            "18446744073709551615s",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run warden fence-local");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[tokio::test]
async fn run_refuses_arguments_clap_cannot_check() {
    let mut args = args_for(&full_target(), Duration::from_secs(1));
    args.boot_id = "not a boot id".into();
    assert_eq!(exit_code(fence_local::run(&args).await), 2);
    for (machine_id, pid_ns, cgroup) in [
        (Some("not-a-machine-id"), None, None),
        (None, Some(0), None),
        (None, None, Some("/")),
        (None, None, Some("/a/../../etc")),
        (None, None, Some("relative/path")),
    ] {
        let mut args = args_for(&this_boot(), Duration::from_secs(1));
        if let Some(m) = machine_id {
            args.machine_id = Some(m.into());
        }
        if pid_ns.is_some() {
            args.pid_ns = pid_ns;
        }
        args.service_cgroup = cgroup.map(String::from);
        assert_eq!(
            exit_code(fence_local::run(&args).await),
            2,
            "{machine_id:?} {pid_ns:?} {cgroup:?}"
        );
    }

    let orphan_start_time = Target {
        boot_id: Some(boot_id()),
        service_start_time: Some(5),
        ..Target::default()
    };
    let args = args_for(&orphan_start_time, Duration::from_secs(1));
    assert_eq!(exit_code(fence_local::run(&args).await), 2);
}

#[tokio::test]
async fn another_boot_id_of_this_machine_means_the_reboot_fenced_it() {
    // The pids name this very test process: nothing may be signalled.
    let me = std::process::id();
    let target = Target {
        boot_id: Some("00000000-0000-0000-0000-000000000000".into()),
        pid: Some(me),
        start_time: process::start_time(me),
        ..this_boot()
    };
    assert_eq!(
        exit_code(fence_local::run(&args_for(&target, Duration::from_secs(1))).await),
        0
    );
}

#[tokio::test]
async fn another_boot_id_without_this_machine_id_is_not_fenced() {
    // ssh reached a host by name; a clone or a rescheduled pod may answer to it. Only the
    // machine id tells a reboot of the recorded machine from another machine.
    let me = std::process::id();
    let rebooted = Target {
        boot_id: Some("00000000-0000-0000-0000-000000000000".into()),
        pid: Some(me),
        start_time: process::start_time(me),
        ..this_boot()
    };
    for machine_id in [None, Some(other_machine_id())] {
        let target = Target {
            machine_id: machine_id.clone(),
            ..rebooted.clone()
        };
        assert_eq!(
            exit_code(fence_local::run(&args_for(&target, Duration::from_secs(1))).await),
            1,
            "machine id {machine_id:?}"
        );
    }
}

#[test]
fn another_boot_id_without_a_machine_id_says_it_cannot_tell_the_machine() {
    let out = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args([
            "fence-local",
            "--boot-id",
            "00000000-0000-0000-0000-000000000000",
            "--pid-ns",
            &process::pid_ns().unwrap().to_string(),
            "--timeout",
            "1s",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run warden fence-local");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("NOT fenced")
            && stderr.contains("cannot tell whether this is the recorded machine"),
        "{stderr}"
    );
}

#[tokio::test]
async fn this_boot_id_in_upper_case_is_this_boot_and_its_processes_are_killed() {
    let mut service = Group::spawn("exec sleep 1000");
    let mut warden = Group::spawn("exec sleep 1000");
    let target = Target {
        boot_id: Some(boot_id().to_ascii_uppercase()),
        pid: Some(warden.pid()),
        start_time: Some(warden.start_time()),
        service_pid: Some(service.pid()),
        service_start_time: Some(service.start_time()),
        ..this_boot()
    };
    assert_eq!(
        exit_code(fence_local::run(&args_for(&target, Duration::from_secs(5))).await),
        0
    );
    // Fenced by killing them, not by a "reboot" read from a differently spelled id.
    assert!(!warden.alive() && !service.alive());
}

#[tokio::test]
async fn this_boot_id_on_another_machine_touches_nothing() {
    let mut warden = Group::spawn("exec sleep 1000");
    let target = Target {
        machine_id: Some(other_machine_id()),
        pid: Some(warden.pid()),
        start_time: Some(warden.start_time()),
        ..this_boot()
    };
    assert_eq!(
        exit_code(fence_local::run(&args_for(&target, Duration::from_secs(1))).await),
        1
    );
    assert!(warden.alive());
}

/// `sh -c SCRIPT` leading its own process group; killed with its group when dropped.
struct Group(Child);

impl Group {
    fn spawn(script: &str) -> Group {
        Group(
            Command::new("/bin/sh")
                .args(["-c", script])
                .stdin(Stdio::null())
                .process_group(0)
                .spawn()
                .expect("spawn /bin/sh"),
        )
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
    fn start_time(&self) -> u64 {
        process::start_time(self.pid()).expect("a just-spawned process has a start time")
    }
    fn alive(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.pid() as i32), Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn run_kills_the_service_group_and_a_stopped_warden_and_verifies() {
    let mut service = Group::spawn("sleep 1000 & sleep 1000 & wait");
    wait_until(WAIT, "the service's children", || {
        process::group_members(service.pid()).len() == 3
    });
    let mut warden = Group::spawn("exec sleep 1000");
    kill(Pid::from_raw(warden.pid() as i32), Signal::SIGSTOP).unwrap();
    wait_until(WAIT, "the warden to stop", || {
        process::stat(warden.pid()).is_some_and(|s| s.state == 'T')
    });
    let target = Target {
        pid: Some(warden.pid()),
        start_time: Some(warden.start_time()),
        service_pid: Some(service.pid()),
        service_pgid: Some(service.pid()),
        service_start_time: Some(service.start_time()),
        ..this_boot()
    };
    assert_eq!(
        exit_code(fence_local::run(&args_for(&target, Duration::from_secs(5))).await),
        0
    );
    // Verified before it answered: nothing of the group runs (our children are zombies).
    assert!(process::group_members(service.pid()).is_empty());
    assert!(!process::is_running(warden.pid(), None));
    assert!(!service.alive() && !warden.alive());
}

#[tokio::test]
async fn run_spares_a_pid_whose_start_time_differs_and_counts_the_record_gone() {
    let mut stranger = Group::spawn("exec sleep 1000");
    let real = stranger.start_time();
    let target = Target {
        pid: Some(stranger.pid()),
        start_time: Some(real + 1),
        service_pid: Some(stranger.pid()),
        service_pgid: Some(stranger.pid()),
        service_start_time: Some(real + 2),
        ..this_boot()
    };
    assert_eq!(
        exit_code(fence_local::run(&args_for(&target, Duration::from_secs(2))).await),
        0
    );
    assert!(stranger.alive(), "a process with a recycled pid was killed");
}

#[tokio::test]
async fn run_without_a_warden_pid_cannot_verify() {
    let target = this_boot();
    assert_eq!(
        exit_code(fence_local::run(&args_for(&target, Duration::from_millis(200))).await),
        1
    );
}

/// Fails the test, naming the Debian package, when a tool it needs is missing.
fn require(path: &str, apt_package: &str) {
    assert!(
        std::path::Path::new(path).exists(),
        "{path} is missing; install it with: apt-get install -y {apt_package}"
    );
}

/// The live pids whose parent is `ppid`.
fn children_of(ppid: u32) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .expect("read /proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&pid| process::stat(pid).is_some_and(|s| s.ppid == ppid && !s.is_exited()))
        .collect();
    pids.sort_unstable();
    pids
}

/// A cgroup of one test below the hierarchy's root; emptied and removed when dropped.
struct TestCgroup(warden_fencing::cgroup::Cgroup);

impl TestCgroup {
    fn create(name: &str) -> TestCgroup {
        let mount = warden_fencing::cgroup::unified_mount()
            .expect("this host has no cgroup v2 hierarchy mounted; this test needs one");
        let relative = format!("/warden-test-{}-{name}", std::process::id());
        let c = warden_fencing::cgroup::Cgroup::at(&mount, &relative).expect("a plain path");
        c.create()
            .unwrap_or_else(|e| panic!("cannot create {}: {e}; run as root", c.dir().display()));
        TestCgroup(c)
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.0.is_populated().unwrap_or(false) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.remove();
    }
}

/// A container on this kernel (`unshare --pid`): its group, the namespace's init and a
/// `sleep` in it, by their pids here.
fn container() -> (Group, u32, u32) {
    require("/usr/bin/unshare", "util-linux");
    let g = Group::spawn("exec unshare --pid --fork --mount-proc /bin/sh -c 'sleep 1000 & wait'");
    let init = wait_for(WAIT, "the namespace's init", || {
        children_of(g.pid()).first().copied()
    });
    let sleep = wait_for(WAIT, "the sleep in the namespace", || {
        children_of(init).first().copied()
    });
    (g, init, sleep)
}

/// The record a warden in that container would write about its `sleep`.
fn container_record(sleep: u32) -> Target {
    let status = std::fs::read_to_string(format!("/proc/{sleep}/status")).unwrap();
    let inner: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .expect("an NSpid line");
    Target {
        pid: Some(inner),
        start_time: process::start_time(sleep),
        pid_ns: process::pid_ns_of(sleep),
        // unshare --pid alone: the container shares this cgroup namespace, and a warden
        // in it records so.
        cgroup_ns: warden_fencing::cgroup::namespace(),
        ..this_boot()
    }
}

#[tokio::test]
async fn another_pid_namespace_is_not_fenced_and_its_pids_are_not_read_as_gone() {
    let (_container, _init, sleep) = container();
    let target = container_record(sleep);
    assert_ne!(
        target.pid_ns,
        this_boot().pid_ns,
        "unshare made no new pid namespace"
    );
    assert_eq!(
        exit_code(fence_local::run(&args_for(&target, Duration::from_secs(1))).await),
        1
    );
    assert!(process::is_running(sleep, None));
}

#[tokio::test]
async fn another_pid_namespace_gets_its_verified_cgroup_killed_but_is_still_not_fenced() {
    let cgroup = TestCgroup::create("foreign-ns");
    let (_container, init, sleep) = container();
    // Only the namespace's processes in the cgroup, as a service cgroup of that container.
    cgroup.0.add(init).unwrap();
    cgroup.0.add(sleep).unwrap();
    let target = Target {
        service_cgroup: Some(cgroup.0.relative().to_string()),
        ..container_record(sleep)
    };
    // The warden pid cannot be checked from here: not fenced, but the service is down.
    assert_eq!(
        exit_code(fence_local::run(&args_for(&target, Duration::from_secs(2))).await),
        1
    );
    wait_for(WAIT, "the cgroup to be empty", || {
        (!cgroup.0.is_populated().unwrap()).then_some(())
    });
    assert!(!process::is_running(sleep, None));

    // A cgroup holding a process of another namespace (this one) is not the recorded
    // container's: not touched.
    let (_other, init, sleep) = container();
    let mut here = Group::spawn("exec sleep 1000");
    cgroup.0.add(here.pid()).unwrap();
    cgroup.0.add(init).unwrap();
    let target = Target {
        service_cgroup: Some(cgroup.0.relative().to_string()),
        ..container_record(sleep)
    };
    assert_eq!(
        exit_code(fence_local::run(&args_for(&target, Duration::from_secs(1))).await),
        1
    );
    assert!(
        here.alive(),
        "a process of another pid namespace was killed"
    );
    assert!(process::is_running(init, None));
}

#[tokio::test]
async fn leftovers_of_a_leaderless_group_without_a_recorded_start_time_are_not_touched() {
    let mut leader = Group::spawn("sleep 1000 & exit 0");
    assert!(leader.0.wait().unwrap().success());
    let leftover = wait_for(WAIT, "the leftover alone in the group", || {
        let m = process::group_members(leader.pid());
        (m.len() == 1).then(|| m[0])
    });
    let mut warden = Group::spawn("exec sleep 1000");
    let target = Target {
        pid: Some(warden.pid()),
        start_time: Some(warden.start_time()),
        service_pgid: Some(leader.pid()),
        ..this_boot()
    };
    assert_eq!(
        exit_code(fence_local::run(&args_for(&target, Duration::from_secs(1))).await),
        1
    );
    assert!(
        process::is_running(leftover, None),
        "an unidentified process was killed"
    );
    // Not fenced, so fence-local did not wait for it; the identified warden was killed.
    wait_for(WAIT, "the warden to die", || {
        (!warden.alive()).then_some(())
    });
}

#[tokio::test]
async fn a_promoted_record_without_service_is_not_fenced_when_nothing_listens_on_its_port() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut warden = Group::spawn("exec sleep 1000");
    let target = promoted_without_service(&warden, port);
    assert_eq!(
        exit_code(fence_local::run(&args_for(&target, Duration::from_secs(1))).await),
        1
    );
    // Not fenced, so fence-local did not wait for it; the identified warden was killed.
    wait_for(WAIT, "the warden to die", || {
        (!warden.alive()).then_some(())
    });
}

/// A process leading its own group that holds a listening socket on a loopback port: the
/// test binds it, the child inherits it across exec, and the test's copy is closed.
fn listening_group() -> (Group, u16) {
    use std::os::fd::AsRawFd;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let fd = listener.as_raw_fd();
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", "exec sleep 1000"])
        .stdin(Stdio::null())
        .process_group(0);
    // SAFETY: fcntl is async-signal-safe; it clears close-on-exec on the child's copy.
    unsafe {
        cmd.pre_exec(move || match libc::fcntl(fd, libc::F_SETFD, 0) {
            -1 => Err(std::io::Error::last_os_error()),
            _ => Ok(()),
        });
    }
    let group = Group(cmd.spawn().expect("spawn /bin/sh"));
    drop(listener);
    (group, port)
}

/// The record of a promoted node whose breadcrumb names no service, only its warden and
/// the service's port.
fn promoted_without_service(warden: &Group, port: u16) -> Target {
    Target {
        pid: Some(warden.pid()),
        start_time: Some(warden.start_time()),
        epoch: Some(7),
        port: Some(port),
        ..this_boot()
    }
}

#[tokio::test]
async fn a_promoted_record_without_service_is_fenced_by_killing_what_listens_on_its_port() {
    // The old service: found through /proc/net/tcp and the socket among its open files.
    let (mut service, port) = listening_group();
    assert_eq!(process::listeners_on_port(port), vec![service.pid()]);
    let mut warden = Group::spawn("exec sleep 1000");
    let target = promoted_without_service(&warden, port);
    assert_eq!(
        exit_code(fence_local::run(&args_for(&target, Duration::from_secs(5))).await),
        0
    );
    assert!(!service.alive(), "the listener on port {port} survived");
    assert!(!warden.alive(), "the recorded warden survived");
    assert!(process::listeners_on_port(port).is_empty());
}
