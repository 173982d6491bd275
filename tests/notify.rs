//! systemd notifications (SPEC §10, issue 5 "Show it works" 5) against a test
//! `NOTIFY_SOCKET`: a Unix datagram socket the test binds and reads.
//!
//! - In process: `warden::notify`'s functions send `READY=1`, `STATUS=`, `WATCHDOG=1`,
//!   `STOPPING=1`, stay silent without `NOTIFY_SOCKET`, and never block on a full socket.
//! - End to end: `warden run` with `NOTIFY_SOCKET` and `WATCHDOG_USEC`: `READY=1` once in the
//!   election, `WATCHDOG=1` keeps arriving, `STATUS=` follows the transitions, the pings stop
//!   while the warden is stopped (SIGSTOP), `STOPPING=1` on SIGTERM.
//!
//! The environment is process-global: every test here holds [`ENV`] for its whole run, so
//! they run one at a time whatever the test runner's thread count. This binary holds only
//! such tests.

mod common;

use common::*;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use warden::notify;

static ENV: Mutex<()> = Mutex::new(());

/// Serializes the tests of this binary; a failed test's poison does not stop the others.
fn env_lock() -> MutexGuard<'static, ()> {
    ENV.lock().unwrap_or_else(|p| p.into_inner())
}

fn clear_env() {
    for var in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
        std::env::remove_var(var);
    }
}

/// A bound datagram socket in a temp dir, as systemd's notify socket.
struct Socket {
    _dir: tempfile::TempDir,
    path: PathBuf,
    sock: UnixDatagram,
}

impl Socket {
    fn bind() -> Socket {
        let dir = tempfile::Builder::new()
            .prefix("warden-notify-")
            .tempdir()
            .unwrap();
        let path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        Socket {
            _dir: dir,
            path,
            sock,
        }
    }

    /// The next datagram within `timeout`, or `None`.
    fn recv(&self, timeout: Duration) -> Option<String> {
        self.sock.set_read_timeout(Some(timeout)).unwrap();
        let mut buf = [0u8; 4096];
        match self.sock.recv(&mut buf) {
            Ok(n) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                None
            }
            Err(e) => panic!("recv on the notify socket: {e}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// In process

#[test]
fn each_notification_is_one_datagram_to_notify_socket() {
    let _env = env_lock();
    clear_env();
    let s = Socket::bind();
    std::env::set_var("NOTIFY_SOCKET", &s.path);

    notify::ready();
    assert_eq!(s.recv(secs(2)).as_deref(), Some("READY=1\n"));
    // systemd reads READY=1 once; later calls send nothing.
    notify::ready();
    notify::status("standby, healthy");
    assert_eq!(
        s.recv(secs(2)).as_deref(),
        Some("STATUS=standby, healthy\n")
    );
    notify::watchdog();
    assert_eq!(s.recv(secs(2)).as_deref(), Some("WATCHDOG=1\n"));
    notify::status("a\ntwo-line\r\nstatus");
    assert_eq!(
        s.recv(secs(2)).as_deref(),
        Some("STATUS=a two-line  status\n"),
        "a status stays one line"
    );
    notify::stopping();
    assert_eq!(s.recv(secs(2)).as_deref(), Some("STOPPING=1\n"));
    assert_eq!(s.recv(ms(200)), None);
    clear_env();
}

#[test]
fn without_notify_socket_nothing_is_sent_and_there_is_no_watchdog() {
    let _env = env_lock();
    clear_env();
    let s = Socket::bind();
    std::env::set_var("WATCHDOG_USEC", "2000000");
    assert_eq!(notify::watchdog_interval(), None);
    notify::status("active");
    notify::watchdog();
    notify::stopping();
    assert_eq!(s.recv(ms(200)), None);
    // An empty NOTIFY_SOCKET is no socket either.
    std::env::set_var("NOTIFY_SOCKET", "");
    assert_eq!(notify::watchdog_interval(), None);
    notify::watchdog();
    clear_env();
}

#[test]
fn the_watchdog_interval_is_half_of_watchdog_usec() {
    let _env = env_lock();
    clear_env();
    let s = Socket::bind();
    std::env::set_var("NOTIFY_SOCKET", &s.path);
    assert_eq!(notify::watchdog_interval(), None, "no WATCHDOG_USEC");
    std::env::set_var("WATCHDOG_USEC", "3000000");
    assert_eq!(notify::watchdog_interval(), Some(ms(1500)));
    std::env::set_var("WATCHDOG_PID", std::process::id().to_string());
    assert_eq!(notify::watchdog_interval(), Some(ms(1500)));
    // The watchdog is another process's (set for a parent, inherited by us).
    std::env::set_var("WATCHDOG_PID", "1");
    assert_eq!(notify::watchdog_interval(), None);
    std::env::remove_var("WATCHDOG_PID");
    for bad in ["0", "soon", "-5", ""] {
        std::env::set_var("WATCHDOG_USEC", bad);
        assert_eq!(notify::watchdog_interval(), None, "WATCHDOG_USEC={bad:?}");
    }
    // The variables are left for others to read: nothing unset them.
    std::env::set_var("WATCHDOG_USEC", "1000000");
    assert_eq!(notify::watchdog_interval(), Some(ms(500)));
    assert_eq!(notify::watchdog_interval(), Some(ms(500)));
    assert!(std::env::var_os("NOTIFY_SOCKET").is_some());
    clear_env();
}

#[test]
fn an_abstract_socket_name_is_reached() {
    use std::os::linux::net::SocketAddrExt;
    let _env = env_lock();
    clear_env();
    let name = format!("warden-test-notify-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let sock = UnixDatagram::bind_addr(&addr).unwrap();
    sock.set_read_timeout(Some(secs(2))).unwrap();
    std::env::set_var("NOTIFY_SOCKET", format!("@{name}"));
    notify::watchdog();
    let mut buf = [0u8; 64];
    let n = sock.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"WATCHDOG=1\n");
    clear_env();
}

#[test]
fn a_full_or_missing_socket_never_blocks_the_caller() {
    let _env = env_lock();
    clear_env();
    // Nobody reads: the receive queue fills up after a few datagrams.
    let s = Socket::bind();
    std::env::set_var("NOTIFY_SOCKET", &s.path);
    let start = Instant::now();
    let mut slowest = Duration::ZERO;
    for _ in 0..40 {
        let t = Instant::now();
        notify::watchdog();
        slowest = slowest.max(t.elapsed());
    }
    assert!(slowest < ms(500), "one ping took {slowest:?}");
    assert!(
        start.elapsed() < secs(10),
        "40 pings took {:?}",
        start.elapsed()
    );
    // A socket that does not exist: an error logged, not a panic or a hang.
    std::env::set_var("NOTIFY_SOCKET", "/nonexistent/warden/notify.sock");
    let t = Instant::now();
    notify::status("active");
    notify::watchdog();
    assert!(t.elapsed() < secs(1));
    drop(s);
    clear_env();
}

// ---------------------------------------------------------------------------------------
// End to end: warden run under a test NOTIFY_SOCKET

/// Systemd's side for one warden: reads its socket on a thread and keeps every line with
/// the time it arrived.
struct Systemd {
    path: PathBuf,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Systemd {
    fn start() -> Systemd {
        let Socket { _dir, path, sock } = Socket::bind();
        sock.set_read_timeout(Some(ms(50))).unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, st) = (lines.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !st.load(Ordering::SeqCst) {
                if let Ok(n) = sock.recv(&mut buf) {
                    let now = Instant::now();
                    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                    let mut l = l.lock().unwrap();
                    for line in text.lines() {
                        l.push((now, line.to_string()));
                    }
                }
            }
        });
        Systemd {
            path,
            lines,
            stop,
            thread: Some(thread),
            _dir,
        }
    }

    fn lines(&self) -> Vec<(Instant, String)> {
        self.lines.lock().unwrap().clone()
    }

    /// Sends a marker line to the socket and waits until the reader has it; returns when
    /// it arrived. Datagrams keep their order, so every line sent before it has been read
    /// by then.
    fn mark(&self) -> Instant {
        let marker = format!("TEST-MARK={}", mono_now_ns());
        UnixDatagram::unbound()
            .unwrap()
            .send_to(marker.as_bytes(), &self.path)
            .unwrap();
        wait_for(secs(10), "the reader has the marker", || {
            self.lines()
                .into_iter()
                .find(|(_, l)| *l == marker)
                .map(|(at, _)| at)
        })
    }

    fn count(&self, line: &str) -> usize {
        self.lines().iter().filter(|(_, l)| l == line).count()
    }

    fn count_since(&self, line: &str, since: Instant) -> usize {
        self.lines()
            .iter()
            .filter(|(t, l)| *t >= since && l == line)
            .count()
    }

    /// The roles of the `STATUS=` lines in order (the first word of each summary).
    fn status_roles(&self) -> Vec<String> {
        self.lines()
            .iter()
            .filter_map(|(_, l)| l.strip_prefix("STATUS="))
            .map(|s| {
                s.split(|c: char| c == ',' || c.is_whitespace())
                    .next()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }

    fn dump(&self) -> String {
        let lines = self.lines();
        let first = lines.first().map(|(t, _)| *t);
        lines
            .iter()
            .map(|(t, l)| {
                format!(
                    "  +{:>6}ms {l}\n",
                    first.map_or(0, |f| t.duration_since(f).as_millis())
                )
            })
            .collect()
    }
}

impl Drop for Systemd {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts `node` with `NOTIFY_SOCKET` and `WATCHDOG_USEC` in its environment (held by
/// the caller's [`env_lock`]), and removes them again from ours.
fn start_under_systemd(node: &Node, systemd: &Systemd, watchdog: Duration) -> Warden {
    std::env::set_var("NOTIFY_SOCKET", &systemd.path);
    std::env::set_var("WATCHDOG_USEC", watchdog.as_micros().to_string());
    std::env::remove_var("WATCHDOG_PID");
    let w = node.start();
    clear_env();
    w
}

/// `to` of every transition the warden logged, in order (JSON log lines).
fn logged_transition_targets(w: &Warden) -> Vec<String> {
    w.log()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("transition"))
        })
        .filter_map(|v| v["fields"]["to"].as_str().map(str::to_string))
        .collect()
}

/// Whether `needle` appears in `hay` in order, not necessarily adjacent.
fn is_subsequence(needle: &[String], hay: &[String]) -> bool {
    let mut it = hay.iter();
    needle.iter().all(|n| it.any(|h| h == n))
}

fn environ_has(pid: u32, var: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .any(|kv| kv.starts_with(format!("{var}=").as_bytes()))
}

/// Issue 5, "Show it works" 5: `READY=1` once in the election, `WATCHDOG=1` at half of
/// `WATCHDOG_USEC` while the loop runs and not while the warden is stopped, `STATUS=` for
/// every transition through a failover, `STOPPING=1` on SIGTERM; the managed service does
/// not inherit the notify socket.
#[test]
fn systemd_sees_ready_once_watchdog_pings_status_per_transition_and_stopping() {
    let _env = env_lock();
    clear_env();
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let json_logs = || NodeOptions {
        extra: "[log]\nformat = \"json\"\n".into(),
        ..Default::default()
    };
    let n1 = cluster.node_with("n1", json_logs());
    let n2 = cluster.node_with("n2", json_logs());
    let (sd1, sd2) = (Systemd::start(), Systemd::start());
    // 600ms: a ping every 300ms.
    let watchdog = ms(600);

    let w1 = start_under_systemd(&n1, &sd1, watchdog);
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    let mut w2 = start_under_systemd(&n2, &sd2, watchdog);
    wait_for_status(&n1.config, secs(30), "n2 is a standby", |s| {
        member_role(s, "n2").as_deref() == Some("standby")
    });
    wait_until(secs(10), "both wardens said READY=1", || {
        sd1.count("READY=1") >= 1 && sd2.count("READY=1") >= 1
    });
    wait_until(secs(10), "n1's STATUS says active", || {
        sd1.status_roles().last().map(String::as_str) == Some("active")
    });
    wait_until(secs(10), "n2's STATUS says standby", || {
        sd2.status_roles().last().map(String::as_str) == Some("standby")
    });

    // The service runs without warden's notify socket: only warden talks to systemd.
    let run = wait_for(secs(10), "n1's service runs", || n1.last_run());
    assert!(process_alive(run.pid));
    for var in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
        assert!(!environ_has(run.pid, var), "the service inherited {var}");
    }

    // Pings keep coming, at about half of WATCHDOG_USEC: three from each, and not more
    // than 14 per 2 s over the time they took.
    let since = Instant::now();
    wait_until(secs(10), "both wardens pinged the watchdog 3 times", || {
        [&sd1, &sd2]
            .iter()
            .all(|sd| sd.count_since("WATCHDOG=1", since) >= 3)
    });
    let window = since.elapsed();
    for (id, sd) in [("n1", &sd1), ("n2", &sd2)] {
        let pings = sd.count_since("WATCHDOG=1", since);
        let per_2s = pings as f64 * 2.0 / window.as_secs_f64();
        assert!(
            per_2s <= 14.0,
            "{id}: {pings} watchdog pings in {window:?} (expected about 6 per 2s)\n{}",
            sd.dump()
        );
    }

    // A stopped warden sends nothing; resumed, it pings again.
    w2.sigstop();
    // A ping sent just before the stop may still be in the socket: count from a marker
    // sent after the stop, which arrives after it.
    let stopped_at = sd2.mark();
    // The fault: n2 stays stopped for 1.5 s.
    std::thread::sleep(ms(1500));
    let during = sd2.count_since("WATCHDOG=1", stopped_at);
    w2.sigcont();
    assert_eq!(during, 0, "pings while stopped\n{}", sd2.dump());
    let resumed = Instant::now();
    wait_until(secs(5), "n2 pings again after SIGCONT", || {
        sd2.count_since("WATCHDOG=1", resumed) >= 2
    });
    assert!(
        sd1.count_since("WATCHDOG=1", stopped_at) >= 3,
        "n1 kept pinging"
    );

    // A failover: n2's STATUS follows each of its transitions to active.
    wait_for_status(&n1.config, secs(30), "n2 is a standby again", |s| {
        member_role(s, "n2").as_deref() == Some("standby")
    });
    w1.kill9();
    wait_for_status(&n2.config, secs(30), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    wait_until(secs(10), "n2's STATUS says active", || {
        sd2.status_roles().last().map(String::as_str) == Some("active")
    });
    let transitions = logged_transition_targets(&w2);
    assert!(
        transitions.iter().any(|t| t == "active"),
        "no transition to active in n2's log: {transitions:?}"
    );
    let roles = sd2.status_roles();
    assert!(
        is_subsequence(&transitions, &roles),
        "n2's STATUS lines do not follow its transitions\ntransitions: {transitions:?}\n\
         STATUS roles: {roles:?}\n{}",
        sd2.dump()
    );
    // Once in the election means once: not again on re-joining or promotion.
    assert_eq!(sd1.count("READY=1"), 1, "\n{}", sd1.dump());
    assert_eq!(sd2.count("READY=1"), 1, "\n{}", sd2.dump());
    assert!(
        sd2.lines().iter().position(|(_, l)| l == "READY=1")
            < sd2
                .lines()
                .iter()
                .position(|(_, l)| l == "STATUS=active" || l.starts_with("STATUS=active,")),
        "READY=1 came after the promotion\n{}",
        sd2.dump()
    );

    // SIGTERM: STOPPING=1, then a clean exit.
    w2.sigterm();
    wait_until(secs(10), "n2 says STOPPING=1", || {
        sd2.count("STOPPING=1") == 1
    });
    let status = w2.wait_exit(secs(15));
    assert_eq!(status.code(), Some(0), "{}", w2.log());
    let stop_at = sd2
        .lines()
        .iter()
        .find(|(_, l)| l == "STOPPING=1")
        .map(|(t, _)| *t)
        .unwrap();
    let ready_at = sd2
        .lines()
        .iter()
        .find(|(_, l)| l == "READY=1")
        .map(|(t, _)| *t)
        .unwrap();
    assert!(ready_at < stop_at);
    cluster.assert_safe();
}
