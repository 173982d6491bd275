//! Spawn mode against real processes: environment, process group and cgroup, stop and
//! kill, crash reports, and the parent-death signal (SPEC §6).
//!
//! The tests of cgroup containment need a writable cgroup v2 hierarchy (root, or a
//! delegated cgroup); elsewhere they say that they are skipped and pass.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use warden::config::{ServiceConfig, ServiceMode};
use warden::service::{
    self, stop, Containment, Exit, RunningService, ServiceIdentity, Spawner, StopOutcome,
};
use warden_fencing::cgroup::{self, Cgroup};
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
        follow: Vec::new(),
        hook_timeout: Duration::from_secs(10),
        pidfile: None,
    }
}

fn spawner(script: &str, arg: &Path) -> Spawner {
    Spawner::new(&config(script, arg), "rm", "rm1").unwrap()
}

/// Starts `spawner`'s service with `epoch`, as the daemon does: prepare, then start.
fn start(spawner: &Spawner, epoch: u64) -> RunningService {
    spawner.start(spawner.prepare(epoch)).unwrap()
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
    let mut svc = start(&spawner(&script, &out), 4294967311);
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
    let mut svc = start(&spawner(&script, &pidfile), 1);
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
    let mut svc = start(&spawner(&script, &ready), 1);
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
    let mut svc = start(&spawner("exit 3", dir.path()), 1);
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
    let spawner = Spawner::new(&cfg, "rm", "rm1").unwrap();
    let prepared = spawner.prepare(1);
    let made = prepared.cgroup().map(str::to_string);
    let err = spawner
        .start(prepared)
        .expect_err("started a missing program");
    assert_eq!(
        err.to_string(),
        "cannot start /nonexistent/warden-test-service: no such file or directory \
         (check service.command)"
    );
    // An exec that fails is not a cgroup that cannot be entered: no fallback, and the
    // cgroup made for the start is gone.
    assert_eq!(
        spawner
            .containment()
            .to_string()
            .contains("process group only"),
        made.is_none()
    );
    if let Some(path) = made {
        assert!(!Cgroup::find(&path).unwrap().exists(), "{path} left behind");
    }
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
    let mut svc = start(&spawner("exec sleep 300", dir.path()), 1);
    let real = svc.identity();
    // The same pid with another start time: what a recorded identity looks like after
    // the service died and its pid went to an unrelated process.
    // Without a cgroup, as a record of a service that had none: a cgroup is unique to
    // one start, so only the process group can be recycled.
    let stale = ServiceIdentity {
        start_time: real.start_time + 1,
        cgroup: None,
        ..real.clone()
    };
    assert!(!service::kill(&stale));
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

    assert!(service::kill(&real));
    let outcome = stop(real, SignalName(Signal::SIGTERM), DEADLINE).await;
    assert!(
        matches!(outcome, StopOutcome::Stopped { .. }),
        "{outcome:?}"
    );
    let report = tokio::time::timeout(DEADLINE, svc.exited()).await.unwrap();
    assert_eq!(report.exit, Exit::Signal(libc::SIGKILL));
}

#[tokio::test]
async fn kill_kills_the_group_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("grandchild");
    let script = format!(r#"trap '' TERM; sleep 300 & echo $! {WRITE_0}; wait"#);
    let mut svc = start(&spawner(&script, &pidfile), 1);
    let grandchild: u32 = wait_for("the grandchild's pid", || content(&pidfile))
        .await
        .trim()
        .parse()
        .unwrap();
    assert!(service::kill(&svc.identity()));
    wait_for("the grandchild to die", || {
        (!alive(grandchild)).then_some(())
    })
    .await;
    let report = tokio::time::timeout(DEADLINE, svc.exited()).await.unwrap();
    assert_eq!(report.exit, Exit::Signal(libc::SIGKILL));
    let outcome = stop(svc.identity(), SignalName(Signal::SIGTERM), DEADLINE).await;
    assert!(
        matches!(outcome, StopOutcome::Stopped { .. }),
        "{outcome:?}"
    );
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
        start(&spawner, 1)
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
        let svc = start(&spawner("exec sleep 300", &pidfile), 1);
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
    let service_cgroup = cgroup::of_pid(service).filter(|p| p.contains("/warden-service-"));

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
    // What the dead warden left: its service's empty cgroup.
    if let Some(c) = service_cgroup.as_deref().and_then(Cgroup::find) {
        wait_for("the service's cgroup to be removable", || c.remove().ok()).await;
    }
}

/// Whether this host lets the service have a cgroup (root, or a delegated cgroup);
/// prints why not, and the test is skipped.
fn cgroups_usable(spawner: &Spawner) -> bool {
    match spawner.containment() {
        Containment::Cgroup(_) => true,
        Containment::ProcessGroup(why) => {
            eprintln!("skipped: the service gets no cgroup here ({why})");
            false
        }
    }
}

/// The pids a test service appended to `path`, one a line, once there are `n`.
fn pids(path: &Path, n: usize) -> Option<Vec<u32>> {
    let text = fs::read_to_string(path).ok()?;
    let pids: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
    (pids.len() >= n).then_some(pids)
}

/// A service whose main process exits at once and leaves four processes behind, each
/// appending its pid to `$0`: a background child, a helper that left the process group
/// with `setsid` (its shell and that shell's child), and a double-forked orphan.
const ESCAPING_TREE: &str = r#"
sleep 1000 & echo $! >> "$0"
setsid sh -c 'echo $$ >> "$0"; sleep 1000 & echo $! >> "$0"; wait' "$0" &
( sleep 1000 & echo $! >> "$0" ) &
exit 0
"#;

/// How many pids [`ESCAPING_TREE`] writes.
const TREE_PIDS: usize = 4;

/// The pids of [`ESCAPING_TREE`] that left the service's process group.
fn escaped(pgid: u32, pids: &[u32]) -> Vec<u32> {
    pids.iter()
        .copied()
        .filter(|&p| warden_fencing::process::pgid(p).is_some_and(|g| g != pgid))
        .collect()
}

#[tokio::test]
async fn each_start_runs_in_a_fresh_cgroup_of_its_own_entered_before_exec() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cgroup");
    // The shell's very first command reads the shell's own cgroup: it ran there from exec.
    let script = format!(r#"cat /proc/$$/cgroup {WRITE_0}; exec sleep 300"#);
    let spawner = spawner(&script, &out);
    if !cgroups_usable(&spawner) {
        return;
    }
    let own = cgroup::own().unwrap();
    assert_eq!(spawner.containment(), Containment::Cgroup(own.clone()));

    let unused = spawner.prepare(5);
    let prepared = spawner.prepare(5);
    let path = prepared.cgroup().unwrap().to_string();
    let prefix = format!("{}/warden-service-5-", own.trim_end_matches('/'));
    assert!(path.starts_with(&prefix), "{path} is not below {prefix}");
    assert_ne!(unused.cgroup(), Some(path.as_str()), "not a fresh cgroup");
    let unused_path = unused.cgroup().unwrap().to_string();
    assert!(Cgroup::find(&unused_path).unwrap().exists());
    drop(unused);
    assert!(
        !Cgroup::find(&unused_path).unwrap().exists(),
        "a prepared start that never ran left its cgroup"
    );

    let mut svc = spawner.start(prepared).unwrap();
    let id = svc.identity();
    assert_eq!(id.cgroup.as_deref(), Some(path.as_str()));
    let seen = wait_for("the service to report its cgroup", || content(&out)).await;
    assert!(
        seen.lines().any(|l| l == format!("0::{path}")),
        "the service did not start in {path}: {seen}"
    );
    assert_eq!(cgroup::of_pid(id.pid).as_deref(), Some(path.as_str()));

    let outcome = stop(id, SignalName(Signal::SIGTERM), DEADLINE).await;
    assert!(
        matches!(outcome, StopOutcome::Stopped { forced: false, .. }),
        "{outcome:?}"
    );
    assert!(
        !Cgroup::find(&path).unwrap().exists(),
        "the stopped service's cgroup was not removed"
    );
    assert_eq!(svc.exited().await.exit, Exit::Signal(libc::SIGTERM));
}

/// The service starts as a plain program would from a shell: no signal blocked, SIGPIPE
/// not ignored (Rust ignores it in warden), no descriptor of warden's inherited (not even
/// one warden inherited without close-on-exec), and a
/// program named without a slash found on `PATH`. Holds for both ways of starting it
/// (clone3 into its cgroup, and fork + move).
#[tokio::test]
async fn the_service_starts_with_default_signals_and_only_its_standard_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("started");
    // The shell execs sleep, which inherits what warden set up and changes nothing of it
    // (a shell blocks signals of its own around its forks, so it is not asked).
    let script = format!(r#"echo started {WRITE_0}; exec sleep 300"#);
    let mut cfg = config(&script, &out);
    cfg.command[0] = "sh".into();
    for spawner in [
        Spawner::new(&cfg, "rm", "rm1").unwrap(),
        Spawner::new(&cfg, "rm", "rm1").unwrap().without_cgroup(),
    ] {
        let _ = fs::remove_file(&out);
        let mut svc = start(&spawner, 3);
        wait_for("the service to start", || content(&out)).await;
        let pid = svc.identity().pid;
        wait_for("the service to exec sleep", || {
            let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            (comm == "sleep\n").then_some(())
        })
        .await;
        let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let field = |name: &str| {
            let line = status.lines().find(|l| l.starts_with(name)).unwrap();
            u64::from_str_radix(line[name.len()..].trim(), 16).unwrap()
        };
        assert_eq!(field("SigBlk:"), 0, "signals blocked: {status}");
        assert_eq!(
            field("SigIgn:") & (1 << (libc::SIGPIPE - 1)),
            0,
            "SIGPIPE ignored: {status}"
        );
        let fds: Vec<String> = fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let target = fs::read_link(e.path()).unwrap_or_default();
                format!("{}={}", e.file_name().to_string_lossy(), target.display())
            })
            .filter(|f| !["0=", "1=", "2="].iter().any(|s| f.starts_with(s)))
            .collect();
        assert!(
            fds.is_empty(),
            "descriptors beyond stdio leaked into the service ({:?}): {fds:?}",
            spawner.containment()
        );
        let id = svc.identity();
        let outcome = stop(id, SignalName(Signal::SIGTERM), DEADLINE).await;
        assert!(
            matches!(outcome, StopOutcome::Stopped { .. }),
            "{outcome:?}"
        );
        assert_eq!(svc.exited().await.exit, Exit::Signal(libc::SIGTERM));
    }
}

#[tokio::test]
async fn stop_ends_every_process_of_the_service_after_its_main_process_exited() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("pids");
    let spawner = spawner(ESCAPING_TREE, &record);
    if !cgroups_usable(&spawner) {
        return;
    }
    let mut svc = start(&spawner, 1);
    let id = svc.identity();
    let pids = wait_for("the service's helpers to start", || {
        pids(&record, TREE_PIDS)
    })
    .await;
    // The main process is gone, and its exit is reported; its helpers run on.
    let report = tokio::time::timeout(DEADLINE, svc.exited()).await.unwrap();
    assert_eq!(report.exit, Exit::Code(0));
    assert!(pids.iter().all(|&p| alive(p)), "{pids:?}");
    assert!(
        !escaped(id.pgid, &pids).is_empty(),
        "no helper left the process group: the test proves nothing"
    );

    let path = id.cgroup.clone().unwrap();
    let outcome = stop(id, SignalName(Signal::SIGTERM), DEADLINE).await;
    assert!(
        matches!(outcome, StopOutcome::Stopped { forced: false, .. }),
        "{outcome:?}"
    );
    let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    assert!(
        left.is_empty(),
        "processes of the service survived its stop: {left:?}"
    );
    assert!(!Cgroup::find(&path).unwrap().exists());
}

/// Without a cgroup the process group is all there is: the helper that called setsid()
/// escapes the stop. This is what warden warns about (SPEC §6) when it cannot make a
/// cgroup.
#[tokio::test]
async fn without_a_cgroup_a_setsid_helper_escapes_the_stop() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("pids");
    let spawner = spawner(ESCAPING_TREE, &record).without_cgroup();
    assert!(
        matches!(spawner.containment(), Containment::ProcessGroup(_)),
        "{}",
        spawner.containment()
    );
    let mut svc = start(&spawner, 1);
    let id = svc.identity();
    assert_eq!(id.cgroup, None);
    let pids = wait_for("the service's helpers to start", || {
        pids(&record, TREE_PIDS)
    })
    .await;
    assert_eq!(
        tokio::time::timeout(DEADLINE, svc.exited())
            .await
            .unwrap()
            .exit,
        Exit::Code(0)
    );
    let escapees = escaped(id.pgid, &pids);
    assert!(!escapees.is_empty(), "no helper left the process group");

    let outcome = stop(id, SignalName(Signal::SIGTERM), DEADLINE).await;
    assert!(
        matches!(outcome, StopOutcome::Stopped { forced: false, .. }),
        "{outcome:?}"
    );
    for &p in &pids {
        // Those still in the group were stopped; the escapees were not.
        assert_eq!(alive(p), escapees.contains(&p), "pid {p}");
    }
    for p in escapees {
        let _ = kill(Pid::from_raw(p as i32), Signal::SIGKILL);
    }
}

#[tokio::test]
async fn kill_ends_every_process_of_the_service_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("pids");
    // Nothing of it dies of SIGTERM: only SIGKILL ends it.
    let script = format!("trap '' TERM\n{ESCAPING_TREE}");
    let spawner = spawner(&script, &record);
    if !cgroups_usable(&spawner) {
        return;
    }
    let svc = start(&spawner, 1);
    let id = svc.identity();
    let pids = wait_for("the service's helpers to start", || {
        pids(&record, TREE_PIDS)
    })
    .await;
    assert!(!escaped(id.pgid, &pids).is_empty());

    assert!(service::kill(&id));
    wait_for("every process of the service to die", || {
        pids.iter().all(|&p| !alive(p)).then_some(())
    })
    .await;
    let outcome = stop(id, SignalName(Signal::SIGTERM), DEADLINE).await;
    assert!(
        matches!(outcome, StopOutcome::Stopped { forced: false, .. }),
        "{outcome:?}"
    );
}

/// The lease end kills the service while a demotion is still waiting out its grace: the
/// kill does not wait for the stop, and the stop then sees the service gone.
#[tokio::test]
async fn the_lease_end_kill_does_not_wait_for_a_running_stop() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("terms");
    // The shell notes each SIGTERM and carries on.
    let script = r#"trap 'echo term >> "$0"' TERM; echo ready >> "$0"; while :; do sleep 1; done"#;
    let svc_spawner = spawner(script, &marker);
    let mut svc = start(&svc_spawner, 1);
    let id = svc.identity();
    let said = |what: &'static str| {
        let marker = marker.clone();
        move || {
            fs::read_to_string(&marker)
                .ok()
                .filter(|t| t.lines().any(|l| l == what))
        }
    };
    // A SIGTERM before the trap is set would end the shell at once.
    wait_for("the service to set its trap", said("ready")).await;
    // Far longer than the test's deadline: only the kill can end the stop in time.
    let grace = Duration::from_secs(600);
    let stopping = tokio::spawn(stop(id.clone(), SignalName(Signal::SIGTERM), grace));
    wait_for("the stop to send SIGTERM", said("term")).await;
    assert!(alive(id.pid), "the service died of SIGTERM");

    assert!(service::kill(&id));
    let outcome = tokio::time::timeout(DEADLINE, stopping)
        .await
        .expect("the stop did not notice the kill")
        .unwrap();
    assert!(
        matches!(outcome, StopOutcome::Stopped { forced: false, .. }),
        "{outcome:?}"
    );
    assert_eq!(svc.exited().await.exit, Exit::Signal(libc::SIGKILL));
}

/// CPU time this thread has used, in clock ticks (`/proc/thread-self/stat` fields 14, 15).
fn thread_cpu_ticks() -> u64 {
    let stat = fs::read_to_string("/proc/thread-self/stat").unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    // fields[0] is field 3.
    fields[14 - 3].parse::<u64>().unwrap() + fields[15 - 3].parse::<u64>().unwrap()
}

/// stop() polls for the service's processes on a blocking thread: the runtime thread
/// that awaits it spends (next to) no CPU time, however long the grace and however many
/// processes are scanned. Without a cgroup each poll scans all of /proc, so a service
/// with many processes makes a scan on the runtime thread show.
#[tokio::test(flavor = "current_thread")]
async fn stop_polls_on_a_blocking_thread_not_on_the_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let script = format!(
        r#"trap '' TERM; i=0; while [ $i -lt 150 ]; do sleep 1000 & i=$((i+1)); done; echo ready {WRITE_0}; wait"#
    );
    let spawner = spawner(&script, &ready).without_cgroup();
    let mut svc = start(&spawner, 1);
    wait_for("the service's children to start", || content(&ready)).await;

    let before = thread_cpu_ticks();
    let outcome = stop(
        svc.identity(),
        SignalName(Signal::SIGTERM),
        Duration::from_secs(2),
    )
    .await;
    let used = thread_cpu_ticks() - before;
    assert!(
        matches!(outcome, StopOutcome::Stopped { forced: true, .. }),
        "{outcome:?}"
    );
    // Scanning /proc 100 times for ~150 processes takes tens of ticks of CPU; awaiting a
    // blocking task takes none.
    assert!(
        used < 5,
        "the runtime thread used {used} clock ticks of CPU during the stop"
    );
    assert_eq!(svc.exited().await.exit, Exit::Signal(libc::SIGKILL));
}

#[tokio::test]
async fn a_start_whose_cgroup_is_gone_falls_back_to_the_process_group_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let spawner = spawner("exec sleep 300", dir.path());
    if !cgroups_usable(&spawner) {
        return;
    }
    let prepared = spawner.prepare(3);
    let path = prepared.cgroup().unwrap().to_string();
    Cgroup::find(&path).unwrap().remove().unwrap();

    let mut svc = spawner.start(prepared).unwrap();
    let id = svc.identity();
    assert_eq!(
        id.cgroup, None,
        "the identity must say the service has no cgroup"
    );
    assert_eq!(warden_fencing::process::pgid(id.pid), Some(id.pid));
    match spawner.containment() {
        Containment::ProcessGroup(why) => assert!(
            why.contains(&path) && why.contains("no such file or directory"),
            "{why}"
        ),
        other => panic!("still {other:?}"),
    }
    let outcome = stop(id, SignalName(Signal::SIGTERM), DEADLINE).await;
    assert!(
        matches!(outcome, StopOutcome::Stopped { forced: false, .. }),
        "{outcome:?}"
    );
    assert_eq!(svc.exited().await.exit, Exit::Signal(libc::SIGTERM));
}
