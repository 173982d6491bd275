//! Self-tests of the test harness: the ZooKeeper server it starts, the PostgreSQL server's
//! clean-up, the journal service and the journal checker. These pass without the daemon,
//! so a red election test means the daemon, not the harness.

mod common;

use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fs;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};

#[test]
fn zookeeper_starts_answers_ruok_and_serves_sessions() {
    let zk = ZkServer::start();
    assert!(zk.ruok(), "ruok did not answer imok");
    let srvr = zk.four_letter("srvr").expect("srvr");
    assert!(srvr.contains("Mode: standalone"), "srvr: {srvr}");
    let client = ZkClient::connect(&zk.connect_string());
    client.put("/warden/selftest/breadcrumb", b"not json");
    assert_eq!(
        client.get("/warden/selftest/breadcrumb").as_deref(),
        Some(&b"not json"[..])
    );
    assert_eq!(client.children("/warden/selftest"), vec!["breadcrumb"]);
    assert!(
        zk.log().contains("ZooKeeperServer"),
        "no server log was captured"
    );
}

#[test]
fn frozen_zookeeper_answers_nothing_until_thawed() {
    let mut zk = ZkServer::start();
    let pid = zk.pid().unwrap();
    // SIGSTOP takes effect asynchronously: freeze returns only once the JVM is stopped.
    zk.freeze();
    assert_eq!(proc_stat(pid).map(|s| s.state), Some('T'));
    // The kernel still accepts the connection; the frozen server never answers.
    assert!(!zk.ruok(), "a SIGSTOPped server answered ruok");
    zk.thaw();
    assert_ne!(proc_stat(pid).map(|s| s.state), Some('T'));
    wait_until(secs(10), "the thawed server answers ruok", || zk.ruok());
}

/// A PostgreSQL server killed by a test (or fenced) and never started again once left a
/// System V segment (`ipcs -m`) and two files in `/dev/shm` behind per kill, for good: a
/// machine that runs the suite often would reach the kernel's limit of segments.
#[test]
fn a_killed_postgresql_leaves_no_shared_memory_behind() {
    use common::postgres::PgServer;
    let pg = PgServer::init();
    let pid = pg.pid().expect("the postmaster's pid");
    let shmid = pg
        .shmid()
        .expect("the segment's id on line 7 of postmaster.pid");
    // (`ipcs -i` exits 0 for an id it does not know too.)
    let segment_exists = || {
        let out = Command::new("ipcs")
            .args(["-m", "-i", &shmid.to_string()])
            .stdin(Stdio::null())
            .output()
            .expect("ipcs");
        String::from_utf8_lossy(&out.stdout).contains(&format!("shmid={shmid}"))
    };
    assert!(
        segment_exists(),
        "no System V segment {shmid} while the server runs"
    );
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(
        !maps.contains("/dev/shm/"),
        "the server maps segments in /dev/shm, which nothing removes after a kill: {maps}"
    );
    pg.kill9();
    pg.wait_gone(secs(30));
    drop(pg);
    // Removed once the last process attached to it is gone: the killed postmaster's
    // children notice its death and exit on their own, a moment later.
    wait_until(
        secs(30),
        &format!("System V segment {shmid} is removed after its server"),
        || !segment_exists(),
    );
}

#[test]
fn proc_stat_reads_state_group_and_start_time() {
    let me = std::process::id();
    let stat = proc_stat(me).expect("this process has a stat");
    assert_eq!(stat.pgid, nix::unistd::getpgrp().as_raw() as u32);
    assert_ne!(stat.start_time, 0);
    assert_eq!(proc_stat(me).unwrap().start_time, stat.start_time);
    // Killed and reaped on every path, a failed assertion included.
    struct Reaped(Child);
    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let child = Reaped(Command::new("sleep").arg("600").spawn().expect("run sleep"));
    let pid = child.0.id();
    assert_ne!(proc_stat(pid).unwrap().state, 'T');
    kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).unwrap();
    wait_stopped(pid);
    assert_eq!(proc_stat(pid).unwrap().state, 'T');
    kill(Pid::from_raw(pid as i32), Signal::SIGCONT).unwrap();
    wait_continued(pid);
    assert_ne!(proc_stat(pid).unwrap().state, 'T');
    drop(child);
    assert_eq!(proc_stat(pid), None, "a reaped child has no stat");
    // A process that is gone counts as stopped and as continued: nothing of it runs.
    wait_stopped(pid);
    wait_continued(pid);
}

#[test]
fn restarted_zookeeper_keeps_its_port_and_data() {
    let mut zk = ZkServer::start();
    let port = zk.port();
    ZkClient::connect(&zk.connect_string()).put("/kept", b"yes");
    zk.stop();
    assert!(!zk.ruok(), "a stopped server answered ruok");
    assert!(ZkClient::try_connect(&zk.connect_string(), ms(500)).is_err());
    zk.restart();
    assert_eq!(zk.port(), port);
    assert_eq!(
        ZkClient::connect(&zk.connect_string())
            .get("/kept")
            .as_deref(),
        Some(&b"yes"[..])
    );
}

#[test]
fn cluster_writes_a_config_per_node() {
    let cluster = Cluster::with_connect("127.0.0.1:1");
    let node = cluster.node_with(
        "n1",
        NodeOptions {
            service_args: vec!["--ignore-term".into()],
            ..Default::default()
        },
    );
    let text = fs::read_to_string(&node.config).unwrap();
    let cfg: toml::Value = toml::from_str(&text).expect("the harness writes valid TOML");
    assert_eq!(cfg["cluster"]["node_id"].as_str(), Some("n1"));
    assert_eq!(cfg["cluster"]["name"].as_str(), Some(cluster.name.as_str()));
    assert_eq!(
        cfg["coordination"]["zookeeper"]["session_timeout"].as_str(),
        Some("2s")
    );
    assert_eq!(cfg["election"]["rejoin_delay"].as_str(), Some("200ms"));
    let command = cfg["service"]["command"].as_array().unwrap();
    assert_eq!(command[0].as_str(), Some(JOURNAL_SERVICE));
    assert_eq!(command.last().unwrap().as_str(), Some("--ignore-term"));
    let fences = cfg["fence"].as_array().unwrap();
    assert_eq!(fences[0]["kind"].as_str(), Some("script"));
    assert_eq!(fences[1]["kind"].as_str(), Some("signal"));
    assert_eq!(
        cluster.znode("breadcrumb"),
        format!("/warden/{}/breadcrumb", cluster.name)
    );
}

fn journal_service(journal: &Path, args: &[&str]) -> Child {
    Command::new(JOURNAL_SERVICE)
        .arg("--journal")
        .arg(journal)
        .args(args)
        .env("WARDEN_NODE_ID", "n7")
        .env("WARDEN_EPOCH", "4294967303")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the journal service")
}

fn wait_ticks(journal: &Path, n: usize) {
    wait_until(secs(10), &format!("{n} ticks in the journal"), || {
        Journal::read(journal).last().is_some_and(|r| r.ticks >= n)
    });
}

#[test]
fn journal_service_records_start_ticks_and_stop() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("svc.journal");
    let before = mono_now_ns();
    let mut child = journal_service(&journal, &[]);
    wait_ticks(&journal, 5);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    let after = mono_now_ns();
    assert_eq!(status.code(), Some(0), "exit 0 on SIGTERM");

    let runs = Journal::read(&journal);
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = &runs[0];
    assert_eq!(run.node, "n7");
    assert_eq!(run.epoch, Some(4294967303));
    assert_eq!(run.pid, child.id());
    assert!(run.stopped, "no stop line: {run}");
    assert!(run.ticks >= 5);
    assert!(before < run.start_ns && run.start_ns < run.last_ns && run.last_ns < after);
    let text = fs::read_to_string(&journal).unwrap();
    assert!(text.starts_with(&format!(
        "start {} pid={} node=n7 epoch=4294967303\n",
        run.start_ns, run.pid
    )));
}

#[test]
fn journal_service_crashes_on_request_and_can_ignore_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let crash = dir.path().join("crash.journal");
    let status = journal_service(&crash, &["--exit-after", "100ms", "--exit-code", "7"])
        .wait()
        .unwrap();
    assert_eq!(status.code(), Some(7));
    let runs = Journal::read(&crash);
    assert_eq!(runs.len(), 1);
    assert!(!runs[0].stopped, "a crash writes no stop line");

    let stubborn = dir.path().join("stubborn.journal");
    let mut child = journal_service(&stubborn, &["--ignore-term"]);
    wait_ticks(&stubborn, 2);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let ticks = Journal::read(&stubborn)[0].ticks;
    wait_ticks(&stubborn, ticks + 10);
    assert!(
        child.try_wait().unwrap().is_none(),
        "--ignore-term died of SIGTERM"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!Journal::read(&stubborn)[0].stopped);
}

#[test]
fn journal_service_listens_for_tcp_health_checks() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("svc.journal");
    let port = free_port();
    let mut child = journal_service(&journal, &["--listen", &format!("127.0.0.1:{port}")]);
    wait_ticks(&journal, 1);
    TcpStream::connect(("127.0.0.1", port)).expect("the service accepts connections");
    child.kill().unwrap();
    child.wait().unwrap();
}

fn run(node: &str, pid: u32, epoch: u64, start_ns: u64, last_ns: u64) -> Run {
    Run {
        node: node.into(),
        pid,
        epoch: Some(epoch),
        start_ns,
        last_ns,
        ticks: 1,
        stopped: false,
    }
}

#[test]
#[should_panic(expected = "two services ran at once")]
fn overlap_checker_catches_two_services_at_once() {
    assert_no_overlap(&[run("n1", 10, 5, 100, 200), run("n2", 11, 6, 150, 300)]);
}

#[test]
#[should_panic(expected = "two services ran at once")]
fn overlap_checker_catches_a_run_nested_in_a_long_one() {
    assert_no_overlap(&[
        run("n1", 10, 5, 100, 1000),
        run("n2", 11, 6, 200, 300),
        run("n3", 12, 7, 400, 500),
    ]);
}

#[test]
fn overlap_checker_accepts_runs_one_after_another() {
    assert_no_overlap(&[
        run("n2", 11, 6, 201, 300),
        run("n1", 10, 5, 100, 200),
        run("n1", 12, 6, 301, 400),
    ]);
}

#[test]
#[should_panic(expected = "epochs did not grow")]
fn epoch_checker_catches_a_reused_epoch_on_another_node() {
    assert_epochs_grow(&[run("n1", 10, 5, 100, 200), run("n2", 11, 5, 300, 400)]);
}

#[test]
#[should_panic(expected = "epochs did not grow")]
fn epoch_checker_catches_a_smaller_epoch() {
    assert_epochs_grow(&[run("n1", 10, 5, 100, 200), run("n1", 11, 4, 300, 400)]);
}

#[test]
fn epoch_checker_allows_a_repromotion_under_the_same_lock() {
    assert_epochs_grow(&[
        run("n1", 10, 5, 100, 200),
        run("n1", 11, 5, 300, 400),
        run("n2", 12, 9, 500, 600),
    ]);
}

#[test]
fn journal_reader_attributes_interleaved_lines_by_pid() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.journal");
    fs::write(
        &path,
        "start 100 pid=1 node=n1 epoch=3\n\
         tick 110 pid=1\n\
         start 115 pid=2 node=n1 epoch=-\n\
         tick 120 pid=1\n\
         tick 125 pid=2\n\
         stop 130 pid=2\n\
         tick 13",
    )
    .unwrap();
    let runs = Journal::read(&path);
    assert_eq!(runs.len(), 2);
    assert_eq!((runs[0].pid, runs[0].last_ns, runs[0].ticks), (1, 120, 2));
    assert_eq!(
        (runs[1].pid, runs[1].last_ns, runs[1].stopped),
        (2, 130, true)
    );
    assert_eq!(runs[1].epoch, None);
    let caught = std::panic::catch_unwind(|| assert_no_overlap(&runs));
    assert!(
        caught.is_err(),
        "interleaved runs in one file must count as an overlap"
    );
}

#[test]
fn warden_handle_logs_signals_and_kills_a_stopped_process_on_drop() {
    let cluster = Cluster::with_connect("127.0.0.1:1");
    let node = cluster.node("n1");
    let stand_in = cluster.script(
        "stand-in.sh",
        "echo \"args: $*\"\necho \"RUST_LOG=$RUST_LOG\" >&2\nexec sleep 600\n",
    );
    let mut w = Warden::start_program(&stand_in, &node.config);
    let pid = w.pid();
    w.wait_for_log(&format!("args: -c {} run", node.config.display()), secs(5));
    w.wait_for_log("rust_log=info", secs(5));
    assert!(w.is_running());
    // sigstop returns once the process is stopped, not merely signalled.
    w.sigstop();
    assert_eq!(proc_stat(pid).map(|s| s.state), Some('T'));
    drop(w);
    assert!(!process_alive(pid), "Drop left a stopped process alive");

    let mut again = Warden::start_program(&stand_in, &node.config);
    assert!(
        again.log_path().ends_with("n1.2.log"),
        "{:?}",
        again.log_path()
    );
    again.sigterm();
    let exit = again.wait_exit(secs(5));
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&exit),
        Some(15)
    );
}

#[test]
fn a_hung_command_is_killed_at_its_bound() {
    let started = std::time::Instant::now();
    let caught = std::panic::catch_unwind(|| run_bounded("sleep", &["600".into()], ms(300)));
    let message = caught.expect_err("a hung command must fail the test");
    let message = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(message.contains("did not exit within"), "{message}");
    assert!(started.elapsed() < secs(5), "took {:?}", started.elapsed());
    let done = run_bounded(
        "sh",
        &["-c".into(), "echo out; echo err >&2; exit 3".into()],
        secs(5),
    );
    assert_eq!(done.status.code(), Some(3));
    assert_eq!(done.stdout, b"out\n");
    assert_eq!(done.stderr, b"err\n");
}

#[test]
fn zombies_count_as_dead() {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    // Not reaped yet: a zombie until wait(); `kill -0` would still find it.
    wait_until(secs(5), "the child has exited", || {
        fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
            s.lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'))
        })
    });
    assert!(!process_alive(pid));
    child.wait().unwrap();
    assert!(!process_alive(pid));
    assert!(process_alive(std::process::id()));
}

#[test]
#[should_panic(expected = "timed out after")]
fn wait_until_names_what_it_waited_for() {
    wait_until(ms(50), "pigs fly", || false);
}
