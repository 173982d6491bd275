//! Spawn mode against real processes: environment, process group, stop and kill, crash
//! reports, and the parent-death signal (SPEC §6).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use warden::config::{ServiceConfig, ServiceMode};
use warden::service::{kill_group, stop, Exit, ServiceIdentity, Spawner, StopOutcome};
use warden_fencing::SignalName;

/// Generous: these tests start shells on possibly loaded CI machines.
const DEADLINE: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(10);

/// Set in the environment of the helper process of `the_service_dies_with_warden`.
const HELPER_ENV: &str = "WARDEN_TEST_PDEATHSIG_HELPER_PIDFILE";

/// A spawn-mode config running `script` with `sh -c`; `$0` in the script is `arg`.
fn config(script: &str, arg: &Path) -> ServiceConfig {
    ServiceConfig {
        mode: ServiceMode::Spawn,
        command: vec![
            "/bin/sh".into(),
            "-c".into(),
            script.into(),
            arg.display().to_string(),
        ],
        stop_signal: SignalName(Signal::SIGTERM),
        stop_timeout: Duration::from_secs(3),
        promote: Vec::new(),
        demote: Vec::new(),
        hook_timeout: Duration::from_secs(10),
        pidfile: None,
    }
}

fn spawner(script: &str, arg: &Path) -> Spawner {
    Spawner::new(&config(script, arg), "rm", "rm1").unwrap()
}

/// A live process: exists and is not a zombie (an orphan may wait a while for init to
/// reap it, and it runs no code meanwhile).
fn alive(pid: u32) -> bool {
    warden_fencing::process::is_running(pid, None)
}

/// Polls `f` until it returns `Some`, failing the test after [`DEADLINE`].
async fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// A file's content once the script has written it completely (scripts write to
/// `$0.tmp` and rename, or write one short line).
fn content(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().filter(|s| s.ends_with('\n'))
}

/// Scripts write through a temp file and `mv`, so a reader never sees half a file.
const WRITE_0: &str = r#"> "$0.tmp" && mv "$0.tmp" "$0""#;

#[tokio::test]
async fn service_gets_epoch_cluster_node_and_role_and_its_own_group() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("env");
    let script = format!(
        r#"printf '%s %s %s %s\n' "$WARDEN_EPOCH" "$WARDEN_CLUSTER" "$WARDEN_NODE_ID" "$WARDEN_ROLE" {WRITE_0}; exec sleep 300"#
    );
    let mut svc = spawner(&script, &out).start(4294967311).unwrap();
    let id = svc.identity();

    let env = wait_for("the service to write its environment", || content(&out)).await;
    assert_eq!(env, "4294967311 rm rm1 active\n");
    assert_eq!(id.pgid, id.pid, "the service leads its own process group");
    assert_eq!(warden_fencing::process::pgid(id.pid), Some(id.pid));
    assert_ne!(
        id.pgid,
        nix::unistd::getpgrp().as_raw() as u32,
        "not warden's group"
    );
    assert_eq!(
        warden_fencing::process::start_time(id.pid),
        Some(id.start_time)
    );
    let stdin = fs::read_link(format!("/proc/{}/fd/0", id.pid)).unwrap();
    assert_eq!(stdin, PathBuf::from("/dev/null"));

    let outcome = stop(id, SignalName(Signal::SIGTERM), Duration::from_secs(5)).await;
    assert!(
        matches!(outcome, StopOutcome::Stopped { forced: false, .. }),
        "{outcome:?}"
    );
    assert_eq!(svc.exited().await.exit, Exit::Signal(libc::SIGTERM));
}

#[tokio::test]
async fn stop_ends_the_whole_group_grandchildren_included() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("grandchild");
    let script = format!(r#"sleep 300 & echo $! {WRITE_0}; wait"#);
    let mut svc = spawner(&script, &pidfile).start(1).unwrap();
    let grandchild: u32 = wait_for("the grandchild's pid", || content(&pidfile))
        .await
        .trim()
        .parse()
        .unwrap();
    assert!(alive(grandchild));

    let outcome = stop(
        svc.identity(),
        SignalName(Signal::SIGTERM),
        Duration::from_secs(5),
    )
    .await;
    assert!(
        matches!(outcome, StopOutcome::Stopped { forced: false, .. }),
        "{outcome:?}"
    );
    assert!(!alive(grandchild), "the service's child survived the stop");
    assert!(warden_fencing::process::group_members(svc.identity().pgid).is_empty());
    assert_eq!(svc.exited().await.exit, Exit::Signal(libc::SIGTERM));
}

#[tokio::test]
async fn stop_escalates_to_sigkill_when_the_service_ignores_the_stop_signal() {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    // The trap is inherited by `sleep` too: nothing in the group dies of SIGTERM.
    let script = format!(r#"trap '' TERM; echo ready {WRITE_0}; while :; do sleep 1; done"#);
    let mut svc = spawner(&script, &ready).start(1).unwrap();
    wait_for("the trap to be set", || content(&ready)).await;

    let grace = Duration::from_millis(300);
    let outcome = stop(svc.identity(), SignalName(Signal::SIGTERM), grace).await;
    match outcome {
        StopOutcome::Stopped {
            forced: true,
            elapsed,
        } => assert!(
            elapsed >= grace,
            "SIGKILL came before the grace: {elapsed:?}"
        ),
        other => panic!("expected a forced stop, got {other:?}"),
    }
    assert_eq!(svc.exited().await.exit, Exit::Signal(libc::SIGKILL));
}

#[tokio::test]
async fn a_service_that_exits_by_itself_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut svc = spawner("exit 3", dir.path()).start(1).unwrap();
    let report = tokio::time::timeout(DEADLINE, svc.exited())
        .await
        .expect("no exit report");
    assert_eq!(report.exit, Exit::Code(3));
    assert_eq!(report.identity, svc.identity());
    // Asking again answers the same at once.
    assert_eq!(svc.exited().await, report);
    assert_eq!(svc.try_exited(), Some(report));

    // Stopping what is already gone is immediate and signals nothing.
    let outcome = stop(svc.identity(), SignalName(Signal::SIGTERM), DEADLINE).await;
    match outcome {
        StopOutcome::Stopped {
            forced: false,
            elapsed,
        } => assert!(elapsed < Duration::from_secs(1), "{elapsed:?}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_missing_program_is_a_clear_error() {
    let mut cfg = config("", Path::new("/"));
    cfg.command = vec!["/nonexistent/warden-test-service".into()];
    let err = Spawner::new(&cfg, "rm", "rm1")
        .unwrap()
        .start(1)
        .expect_err("started a missing program");
    assert_eq!(
        err.to_string(),
        "cannot start /nonexistent/warden-test-service: no such file or directory \
         (check service.command)"
    );
    cfg.command.clear();
    let err = Spawner::new(&cfg, "rm", "rm1").expect_err("empty command accepted");
    assert!(
        err.to_string().contains("service.command is empty"),
        "{err}"
    );
}

#[tokio::test]
async fn a_recycled_pid_is_never_signalled() {
    let dir = tempfile::tempdir().unwrap();
    let mut svc = spawner("exec sleep 300", dir.path()).start(1).unwrap();
    let real = svc.identity();
    // The same pid with another start time: what a recorded identity looks like after
    // the service died and its pid went to an unrelated process.
    let stale = ServiceIdentity {
        start_time: real.start_time + 1,
        ..real
    };
    assert!(!kill_group(stale));
    let outcome = stop(
        stale,
        SignalName(Signal::SIGKILL),
        Duration::from_millis(100),
    )
    .await;
    assert!(
        matches!(outcome, StopOutcome::Stopped { forced: false, .. }),
        "{outcome:?}"
    );
    assert!(alive(real.pid), "a stale identity killed another process");
    assert_eq!(svc.try_exited(), None);

    assert!(kill_group(real));
    let report = tokio::time::timeout(DEADLINE, svc.exited()).await.unwrap();
    assert_eq!(report.exit, Exit::Signal(libc::SIGKILL));
}

#[tokio::test]
async fn kill_group_kills_the_group_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("grandchild");
    let script = format!(r#"trap '' TERM; sleep 300 & echo $! {WRITE_0}; wait"#);
    let mut svc = spawner(&script, &pidfile).start(1).unwrap();
    let grandchild: u32 = wait_for("the grandchild's pid", || content(&pidfile))
        .await
        .trim()
        .parse()
        .unwrap();
    assert!(kill_group(svc.identity()));
    wait_for("the grandchild to die", || {
        (!alive(grandchild)).then_some(())
    })
    .await;
    let report = tokio::time::timeout(DEADLINE, svc.exited()).await.unwrap();
    assert_eq!(report.exit, Exit::Signal(libc::SIGKILL));
}

/// The parent-death signal fires when the forking *thread* ends; starting from a thread
/// that ends right away must not kill the service.
#[tokio::test]
async fn the_service_outlives_the_thread_that_started_it() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("survived");
    let script = format!(r#"sleep 0.5; echo survived {WRITE_0}; exec sleep 300"#);
    let spawner = spawner(&script, &marker);
    let handle = tokio::runtime::Handle::current();
    let mut svc = std::thread::spawn(move || {
        let _runtime = handle.enter();
        spawner.start(1).unwrap()
    })
    .join()
    .unwrap();
    wait_for("the service to outlive its starting thread", || {
        content(&marker)
    })
    .await;
    assert!(alive(svc.identity().pid));
    stop(svc.identity(), SignalName(Signal::SIGTERM), DEADLINE).await;
    tokio::time::timeout(DEADLINE, svc.exited()).await.unwrap();
}

/// Run only as the helper process of `the_service_dies_with_warden` (a no-op otherwise):
/// plays warden, starting a service and then waiting to be killed.
#[test]
fn pdeathsig_helper() {
    let Ok(pidfile) = std::env::var(HELPER_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let pidfile = PathBuf::from(pidfile);
        let svc = spawner("exec sleep 300", &pidfile).start(1).unwrap();
        let tmp = pidfile.with_extension("tmp");
        fs::write(&tmp, format!("{}\n", svc.identity().pid)).unwrap();
        fs::rename(&tmp, &pidfile).unwrap();
        std::future::pending::<()>().await;
    });
}

#[tokio::test]
async fn the_service_dies_with_warden() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("service.pid");
    let mut helper = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "pdeathsig_helper",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, &pidfile)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let service: u32 = wait_for("the helper's service to start", || content(&pidfile))
        .await
        .trim()
        .parse()
        .unwrap();
    assert!(alive(service));

    helper.kill().unwrap(); // SIGKILL: no destructor or handler of warden runs
    helper.wait().unwrap();

    let deadline = Instant::now() + DEADLINE;
    while alive(service) {
        if Instant::now() > deadline {
            let _ = kill(Pid::from_raw(service as i32), Signal::SIGKILL);
            panic!("the service outlived its warden: no parent-death signal");
        }
        tokio::time::sleep(POLL).await;
    }
}
