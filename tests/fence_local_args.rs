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

/// Every field `fence-local` takes, as a breadcrumb records them.
fn full_target() -> Target {
    Target {
        boot_id: Some("0d4b3c6e-4a4f-4c55-9f43-2b8d1e0c1f00".into()),
        pid: Some(4242),
        start_time: Some(123_456),
        service_pid: Some(4300),
        service_pgid: Some(4300),
        service_start_time: Some(123_999),
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
        vec!["--pid", "1"],                                   // no boot id
        vec!["--boot-id", "b", "--start-time", "5"],          // start time without pid
        vec!["--boot-id", "b", "--pid", "-3"],                // not a pid
        vec!["--boot-id", "b", "--timeout", "soon"],          // not a duration
        vec!["--boot-id", "b", "--signal", "SIGNOPE"],        // not a signal
        vec!["--boot-id", "b", "--service-pgid", "1", "--x"], // unknown flag
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

#[tokio::test]
async fn run_refuses_arguments_clap_cannot_check() {
    let mut args = args_for(&full_target(), Duration::from_secs(1));
    args.boot_id = "not a boot id".into();
    assert_eq!(fence_local::run(&args).await, 2);

    let orphan_start_time = Target {
        boot_id: Some(boot_id()),
        service_start_time: Some(5),
        ..Target::default()
    };
    let args = args_for(&orphan_start_time, Duration::from_secs(1));
    assert_eq!(fence_local::run(&args).await, 2);
}

#[tokio::test]
async fn another_boot_id_means_the_reboot_fenced_it() {
    // The pids name this very test process: nothing may be signalled.
    let me = std::process::id();
    let target = Target {
        boot_id: Some("00000000-0000-0000-0000-000000000000".into()),
        pid: Some(me),
        start_time: process::start_time(me),
        ..Target::default()
    };
    assert_eq!(
        fence_local::run(&args_for(&target, Duration::from_secs(1))).await,
        0
    );
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

fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test]
async fn run_kills_the_service_group_and_a_stopped_warden_and_verifies() {
    let mut service = Group::spawn("sleep 1000 & sleep 1000 & wait");
    wait_until("the service's children", || {
        process::group_members(service.pid()).len() == 3
    });
    let mut warden = Group::spawn("exec sleep 1000");
    kill(Pid::from_raw(warden.pid() as i32), Signal::SIGSTOP).unwrap();
    wait_until("the warden to stop", || {
        process::stat(warden.pid()).is_some_and(|s| s.state == 'T')
    });
    let target = Target {
        boot_id: Some(boot_id()),
        pid: Some(warden.pid()),
        start_time: Some(warden.start_time()),
        service_pid: Some(service.pid()),
        service_pgid: Some(service.pid()),
        service_start_time: Some(service.start_time()),
        ..Target::default()
    };
    assert_eq!(
        fence_local::run(&args_for(&target, Duration::from_secs(5))).await,
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
        boot_id: Some(boot_id()),
        pid: Some(stranger.pid()),
        start_time: Some(real + 1),
        service_pid: Some(stranger.pid()),
        service_pgid: Some(stranger.pid()),
        service_start_time: Some(real + 2),
        ..Target::default()
    };
    assert_eq!(
        fence_local::run(&args_for(&target, Duration::from_secs(2))).await,
        0
    );
    assert!(stranger.alive(), "a process with a recycled pid was killed");
}

#[tokio::test]
async fn run_without_a_warden_pid_cannot_verify() {
    let target = Target {
        boot_id: Some(boot_id()),
        ..Target::default()
    };
    assert_eq!(
        fence_local::run(&args_for(&target, Duration::from_millis(200))).await,
        1
    );
}
