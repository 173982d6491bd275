//! Issue 31, classes 1, 2 and 7 (SPEC §9): output that cannot be written never panics a
//! command or the daemon; no catchable signal ends `run` without a handover; a command
//! whose output floods is read and logged within bounds.
//!
//! Every test runs the real binary. A "closed pipe" is a pipe whose read end the test
//! closed before the command started (so the first write meets EPIPE); `/dev/full` gives
//! ENOSPC on every write.

mod common;

use common::*;
use nix::sys::signal::Signal;
use std::fs;
use std::os::fd::OwnedFd;
use std::process::{Command, Output, Stdio};

/// A pipe whose read end is closed: whatever writes to it meets EPIPE.
fn closed_pipe() -> Stdio {
    let (read, write): (OwnedFd, OwnedFd) = nix::unistd::pipe().expect("a pipe");
    drop(read);
    Stdio::from(write)
}

fn dev_full() -> Stdio {
    Stdio::from(
        fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("open /dev/full"),
    )
}

/// Runs `warden <args>` with stdout to `stdout`; stderr is captured.
fn warden_to(stdout: Stdio, args: &[&str]) -> Output {
    let mut child = Command::new(WARDEN)
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("WARDEN_CONFIG")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start warden");
    // Bounded: a hang is a failure of its own.
    let start = std::time::Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("collect the output");
        }
        if start.elapsed() >= CLI_TIMEOUT {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect the output");
            panic!("warden {args:?} hung\n{}", describe(&out));
        }
        std::thread::sleep(ms(20));
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// SPEC §9: output that cannot be written ends the command "as for SIGPIPE": killed by
/// that signal (status 141 in a shell), no panic.
fn assert_ended_as_for_sigpipe(out: &Output, what: &str) {
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{what}: ended as for SIGPIPE\n{}",
        describe(out)
    );
    assert_stderr(out, what, "holds no panic", |err| !err.contains("panicked"));
}

/// A closed stdout: ended as for SIGPIPE, and quietly.
fn assert_stdout_closed(out: &Output, what: &str) {
    assert_ended_as_for_sigpipe(out, what);
    assert_stderr(out, what, "is quiet", |err| {
        !err.contains("standard output")
    });
}

/// ENOSPC: ended as for SIGPIPE, with one line on stderr naming standard output and the
/// reason.
fn assert_stdout_full(out: &Output, what: &str) {
    assert_ended_as_for_sigpipe(out, what);
    assert_stderr(out, what, "names standard output and the reason", |err| {
        err.contains("standard output") && err.contains("No space left on device")
    });
}

/// What `out` said on stderr passes `ok`, which `says` describes.
fn assert_stderr(out: &Output, what: &str, says: &str, ok: impl Fn(&str) -> bool) {
    assert!(
        ok(&stderr(out)),
        "{what}: its stderr {says}\n{}",
        describe(out)
    );
}

// ---------------------------------------------------------------------------------------
// Class 1: output to a closed pipe or a full disk

/// The commands that need nothing but their arguments: a closed stdout ends them quietly
/// as for SIGPIPE; a full one too, with one line on stderr.
#[test]
fn offline_commands_end_as_for_sigpipe_on_a_closed_or_full_stdout() {
    let cluster = Cluster::with_connect(&format!("127.0.0.1:{}", free_port()));
    let n1 = cluster.node("n1");
    let config = n1.config.display().to_string();
    let cases: [&[&str]; 7] = [
        &["completions", "bash"],
        &["completions", "zsh"],
        &["manpage"],
        &["-c", &config, "check-config"],
        &["--help"],
        &["status", "--help"],
        &["--version"],
    ];
    for args in cases {
        let out = warden_to(closed_pipe(), args);
        assert_stdout_closed(&out, &format!("warden {args:?} | (closed)"));
        let out = warden_to(dev_full(), args);
        assert_stdout_full(&out, &format!("warden {args:?} > /dev/full"));
    }
}

/// `status`, `history` (print only) and `failover`, `pause`, `resume`, `init` (change the
/// cluster) on a live cluster: a closed or full stdout ends each as for SIGPIPE, never a
/// panic, and what it changed stays changed: a switchover whose command ended goes on.
#[test]
fn cluster_commands_end_as_for_sigpipe_and_a_switchover_still_happens() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let _wardens = start_active_then_standbys(&n1, &[&n2]);
    let c = n1.config.display().to_string();
    for args in [
        vec!["-c", &c, "status"],
        vec!["-c", &c, "status", "--json"],
        vec!["-c", &c, "history"],
        vec!["-c", &c, "history", "--json"],
    ] {
        let out = warden_to(closed_pipe(), &args);
        assert_stdout_closed(&out, &format!("warden {args:?} | (closed)"));
        let out = warden_to(dev_full(), &args);
        assert_stdout_full(&out, &format!("warden {args:?} > /dev/full"));
    }

    // A planned switchover whose reader went away: the command ends once the request is
    // written, and the switchover happens.
    let out = warden_to(
        closed_pipe(),
        &["-c", &c, "failover", "--to", "n2", "--timeout", "20s"],
    );
    assert_stdout_closed(&out, "failover | (closed)");
    assert_eq!(wait_for_active(&n1.config, secs(30)).0, "n2");
    wait_for_status(&n1.config, secs(30), "n1 is a standby again", |s| {
        member_role(s, "n1").as_deref() == Some("standby") && s["failover"].is_null()
    });
    let out = warden_to(
        dev_full(),
        &["-c", &c, "failover", "--to", "n1", "--timeout", "20s"],
    );
    assert_stdout_full(&out, "failover > /dev/full");
    assert_eq!(wait_for_active(&n1.config, secs(30)).0, "n1");

    let out = warden_to(closed_pipe(), &["-c", &c, "pause", "--reason", "io test"]);
    assert_stdout_closed(&out, "pause | (closed)");
    assert_eq!(
        status_json(&n1.config)["paused"],
        serde_json::Value::Bool(true)
    );
    let out = warden_to(dev_full(), &["-c", &c, "resume"]);
    assert_stdout_full(&out, "resume > /dev/full");
    assert_eq!(
        status_json(&n1.config)["paused"],
        serde_json::Value::Bool(false)
    );
    let out = warden_to(dev_full(), &["-c", &c, "pause", "--reason", "io test"]);
    assert_stdout_full(&out, "pause > /dev/full");
    let out = warden_to(closed_pipe(), &["-c", &c, "resume"]);
    assert_stdout_closed(&out, "resume | (closed)");
    let out = warden_to(dev_full(), &["-c", &c, "init"]);
    assert_stdout_full(&out, "init > /dev/full");
    let out = warden_to(closed_pipe(), &["-c", &c, "init"]);
    assert_stdout_closed(&out, "init | (closed)");
    let status = status_json(&n1.config);
    assert_eq!(status["paused"], serde_json::Value::Bool(false), "{status}");
    cluster.assert_safe();
    assert!(
        cluster.fence_calls().is_empty(),
        "{:?}",
        cluster.fence_calls()
    );
}

/// `run` whose stderr reader died: the daemon logs into a closed pipe, becomes active,
/// and a planned switchover away from it is a clean one (its service stopped by SIGTERM
/// while it still ran, nobody fenced), then it exits 0 on SIGTERM.
#[test]
fn run_with_a_dead_log_reader_hands_over_cleanly() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let log = cluster.dir().join("n1.stdout.log");
    let mut w1 = Command::new(WARDEN);
    w1.arg("-c")
        .arg(&n1.config)
        .arg("run")
        .env("RUST_LOG", "debug")
        .env_remove("WARDEN_CONFIG")
        .stdin(Stdio::null())
        .stdout(fs::File::create(&log).expect("create the stdout log"))
        .stderr(closed_pipe());
    die_with_parent(&mut w1);
    let mut w1 = KillOnDrop(w1.spawn().expect("start warden"));
    assert_eq!(wait_for_active(&n1.config, secs(30)).0, "n1");
    let _w2 = n2.start();
    wait_for_status(&n1.config, secs(30), "n2 is a standby", |s| {
        member_role(s, "n2").as_deref() == Some("standby")
    });
    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "20s"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(wait_for_active(&n1.config, secs(30)).0, "n2");
    wait_for_status(&n1.config, secs(30), "n1 is a standby again", |s| {
        member_role(s, "n1").as_deref() == Some("standby")
    });
    assert!(
        w1.0.try_wait().expect("try_wait").is_none(),
        "n1 must still run after handing over"
    );
    let first = n1.runs();
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(
        first[0].stopped,
        "n1's service was stopped by SIGTERM: {}",
        first[0]
    );
    assert!(
        cluster.fence_calls().is_empty(),
        "{:?}",
        cluster.fence_calls()
    );
    cluster.assert_safe();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(w1.0.id() as i32),
        Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let status = wait_for(secs(20), "n1 exits", || w1.0.try_wait().expect("try_wait"));
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(
        fs::read_to_string(&log).unwrap_or_default().is_empty(),
        "logs go to stderr only"
    );
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// ---------------------------------------------------------------------------------------
// Class 2: signals

/// The signals whose default action ends a process and that only `kill` sends to a
/// daemon: each is logged by name and ignored; the node stays active, its service
/// untouched. A loop of one signal is logged once.
#[test]
fn stray_signals_are_logged_and_ignored_by_an_active_node() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let n1 = cluster.node("n1");
    let mut w = start_active_then_standbys(&n1, &[]).remove(0);
    let (_, epoch) = wait_for_active(&n1.config, secs(30));
    let run = n1.last_run().expect("n1's service runs");
    let rtmin = libc::SIGRTMIN();
    let signals: Vec<(i32, String)> = [
        Signal::SIGHUP,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGALRM,
        Signal::SIGVTALRM,
        Signal::SIGPROF,
        Signal::SIGIO,
        Signal::SIGPWR,
        Signal::SIGSTKFLT,
        Signal::SIGXCPU,
        Signal::SIGXFSZ,
    ]
    .iter()
    .map(|s| (*s as i32, s.as_str().to_string()))
    .chain([
        (rtmin, "SIGRTMIN".to_string()),
        (rtmin + 5, "SIGRTMIN+5".to_string()),
        (libc::SIGRTMAX(), "SIGRTMAX".to_string()),
    ])
    .collect();
    for (signo, name) in &signals {
        // SAFETY: kill(2) with a pid we started and a valid signal number.
        let rc = unsafe { libc::kill(w.pid() as libc::pid_t, *signo) };
        assert_eq!(rc, 0, "kill -{signo}");
        w.wait_for_log(&format!("received {name}"), secs(10));
        assert!(w.is_running(), "{name} ended warden run\n{}", w.log());
    }
    assert!(
        w.log_mentions("does not reload its config"),
        "SIGHUP says what to do instead\n{}",
        w.log()
    );
    // A loop of USR1: logged once a minute, not once per signal.
    for _ in 0..20 {
        w.signal(Signal::SIGUSR1);
    }
    w.signal(Signal::SIGUSR2);
    // USR2 was logged a moment ago too: the marker that the loop was handled is a status.
    let s = status_json(&n1.config);
    assert_eq!(active_id(&s).as_deref(), Some("n1"), "{s}");
    assert_eq!(active_epoch(&s), Some(epoch), "{s}");
    assert!(w.is_running());
    assert_eq!(
        w.log_count("received SIGUSR1"),
        1,
        "a loop of kill -USR1 is logged once\n{}",
        w.log()
    );
    let now = n1.last_run().expect("n1's service runs");
    assert_eq!(now.pid, run.pid, "the service was never restarted");
    assert!(process_alive(now.pid));
}

/// SIGQUIT (Ctrl-\) stops `run` as SIGTERM does: a handover, then exit 0.
#[test]
fn sigquit_stops_run_with_a_handover() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);
    wardens[0].signal(Signal::SIGQUIT);
    let status = wardens[0].wait_exit(secs(20));
    assert_eq!(status.code(), Some(0), "{status:?}\n{}", wardens[0].log());
    assert_eq!(wait_for_active(&n2.config, secs(30)).0, "n2");
    let first = n1.runs();
    assert!(first[0].stopped, "n1's service was stopped: {}", first[0]);
    assert!(wardens[0].log_mentions("SIGQUIT"), "{}", wardens[0].log());
    cluster.assert_safe();
}

// ---------------------------------------------------------------------------------------
// Class 7: commands that flood

/// A `standby_command` that prints a MiB (in lines, and as one line) and exits 0 passes:
/// the node takes over on a switchover; its log stays small.
#[test]
fn a_standby_command_that_prints_a_megabyte_passes_and_is_logged_within_bounds() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let counted = cluster.dir().join("checks");
    let check = cluster.script(
        "flood.sh",
        &format!(
            "echo x >> '{}'\nyes | head -c 1048576\nhead -c 1048576 /dev/zero | tr '\\0' 'z' >&2\n",
            counted.display()
        ),
    );
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    with_standby_command(&n2, &check);
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);
    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "20s"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(wait_for_active(&n1.config, secs(30)).0, "n2");
    let checks = fs::read_to_string(&counted)
        .unwrap_or_default()
        .lines()
        .count();
    let size = fs::metadata(wardens[1].log_path()).unwrap().len();
    eprintln!(
        "n2 ran its standby_command {checks} times (2 MiB of output each); its log is {size} bytes"
    );
    assert!(checks >= 1);
    // Each run is at most a few bounded lines: far below the 2 MiB it printed.
    assert!(
        size < 16 * 1024 * (checks as u64 + 10),
        "n2's log grew by {size} bytes for {checks} checks"
    );
    assert!(
        wardens[1].log_mentions("bytes more"),
        "{}",
        wardens[1].log()
    );
    cluster.assert_safe();
    wardens.clear();
}

/// A `standby_command` that prints until it is killed at its timeout: the check fails
/// (never eligible), the daemon stays up, the log stays bounded.
#[test]
fn a_standby_command_that_prints_forever_is_killed_at_its_timeout_and_logged_within_bounds() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let counted = cluster.dir().join("checks");
    let check = cluster.script(
        "forever.sh",
        &format!("echo x >> '{}'\nexec yes\n", counted.display()),
    );
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    with_standby_command(&n2, &check);
    let mut wardens = start_active_then_standbys(&n1, &[]);
    wardens.push(n2.start());
    wait_for_status(&n1.config, secs(30), "n2 is ineligible", |s| {
        member_role(s, "n2").as_deref() == Some("ineligible")
    });
    wardens[1].wait_for_log("timed out", secs(30));
    wait_until(secs(30), "three checks ran", || {
        fs::read_to_string(&counted)
            .unwrap_or_default()
            .lines()
            .count()
            >= 3
    });
    let checks = fs::read_to_string(&counted)
        .unwrap_or_default()
        .lines()
        .count();
    let size = fs::metadata(wardens[1].log_path()).unwrap().len();
    eprintln!("n2 ran its endless standby_command {checks} times; its log is {size} bytes");
    assert!(wardens[1].is_running());
    assert!(
        size < 16 * 1024 * (checks as u64 + 10),
        "n2's log grew by {size} bytes for {checks} checks"
    );
    // Never eligible: a switchover to it is refused or times out, n1 stays active.
    let out = cli(&n1.config, &["failover", "--to", "n2", "--timeout", "3s"]);
    assert!(!out.status.success(), "{}", describe(&out));
    assert_eq!(wait_for_active(&n1.config, secs(30)).0, "n1");
    cluster.assert_safe();
    wardens.clear();
}

/// A fence script that prints a MiB in lines and a MiB in one line before it fails: the
/// chain goes on to `signal` and the standby takes over; the log stays small and the
/// failure still quotes the script's last words.
#[test]
fn a_fence_script_that_floods_is_logged_within_bounds() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let flood = cluster.script(
        "fence-flood.sh",
        "yes | head -c 1048576\nhead -c 1048576 /dev/zero | tr '\\0' 'z' >&2\n\
         echo >&2\necho 'last words' >&2\nexit 1\n",
    );
    let fences = vec![
        script_fence(&[&flood.display().to_string()], secs(10)),
        signal_fence(),
    ];
    let opts = NodeOptions {
        fences: Some(fences),
        ..NodeOptions::default()
    };
    let (n1, n2) = (
        cluster.node_with("n1", opts.clone()),
        cluster.node_with("n2", opts),
    );
    let wardens = start_active_then_standbys(&n1, &[&n2]);
    let before = fs::metadata(wardens[1].log_path()).unwrap().len();
    wardens[0].kill9();
    wait_for_status(&n2.config, secs(30), "n2 took over", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    wardens[1].wait_for_log("last words", secs(10));
    let grew = fs::metadata(wardens[1].log_path()).unwrap().len() - before;
    eprintln!("n2's log grew by {grew} bytes for a fence script printing 2 MiB");
    assert!(grew < 256 * 1024, "n2's log grew by {grew} bytes");
    assert!(
        wardens[1].log_mentions("bytes more"),
        "{}",
        wardens[1].log()
    );
    cluster.assert_safe();
}

/// `run` whose stderr is a full disk: every log line fails with ENOSPC; the daemon
/// becomes active and stops cleanly on SIGTERM (exit 0).
#[test]
fn run_with_a_full_log_sink_serves_and_stops_cleanly() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let n1 = cluster.node("n1");
    let mut w1 = Command::new(WARDEN);
    w1.arg("-c")
        .arg(&n1.config)
        .arg("run")
        .env("RUST_LOG", "debug")
        .env_remove("WARDEN_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(dev_full());
    die_with_parent(&mut w1);
    let mut w1 = KillOnDrop(w1.spawn().expect("start warden"));
    assert_eq!(wait_for_active(&n1.config, secs(30)).0, "n1");
    wait_until(secs(10), "n1's service runs", || {
        n1.last_run().is_some_and(|r| process_alive(r.pid))
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(w1.0.id() as i32),
        Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let status = wait_for(secs(20), "n1 exits", || w1.0.try_wait().expect("try_wait"));
    assert_eq!(status.code(), Some(0), "{status:?}");
    let runs = n1.runs();
    assert!(
        runs[0].stopped,
        "n1's service was stopped by SIGTERM: {}",
        runs[0]
    );
}
