//! Fencing over ssh and through a Pacemaker fence agent, end to end (issue 4, "Show it
//! works" 1, 2, 3 and 5 at the level of the daemon): real `warden run` daemons, a real
//! ZooKeeper, a real OpenSSH server (`/usr/sbin/sshd -D` on a loopback port with its own
//! host key, key-only auth: the fencing crate's harness) and Debian's `fence_dummy`.
//!
//! Both nodes have `host = "127.0.0.1"`, so the standby's `ssh` method connects to the
//! test's sshd and runs `warden fence-local` on "the old active's host", which is this
//! one. No chain here has a `signal` method: it would fence locally and hide the ssh path.
//!
//! Every test ends with `cluster.assert_safe()`: from the services' own journals, no two
//! ran at once and every promotion saw a greater `WARDEN_EPOCH`.

mod common;

/// The fencing crate's sshd harness, reused as is. It takes `require`, `wait_for` and
/// `Group` from its parent module (`fencing/tests/common/mod.rs` there): the shims below
/// stand in for them, so the rest of that module (tracing captures, fencing contexts) is
/// not pulled in. Its `warden_binary()` builds relative to the fencing crate and is not
/// used here: the root crate's tests have the binary as `CARGO_BIN_EXE_warden`.
#[allow(dead_code)]
#[path = "../fencing/tests/common/sshd.rs"]
mod sshd;

use common::{
    active_id, dump_logs, holds_for, mono_now_ns, ms, nanos, process_alive, processes_with,
    register_log, secs, start_active_then_standbys, toml_array, toml_duration, toml_str,
    wait_for_status, wait_until, Cluster, Node, NodeOptions, PidFileReaper, Run, Warden, ZkServer,
    WARDEN,
};
use sshd::{keygen, Sshd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

// ---------------------------------------------------------------------------------------
// What `sshd.rs` takes from its parent module

/// A process at the head of its own process group; dropping it SIGKILLs the group. (The
/// harness's `listener()` builds one; these tests do not use it.)
#[allow(dead_code)]
pub struct Group {
    pub child: Child,
    pub pid: u32,
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.child.wait();
    }
}

/// Fails the test, naming the Debian package, when a tool it needs is missing.
fn require(path: &str, apt_package: &str) {
    assert!(
        Path::new(path).exists(),
        "{path} is missing; install it with: apt-get install -y {apt_package}"
    );
}

/// The sshd harness's wait: `check` every 10ms until it yields a value, 10s at most.
fn wait_for<T>(what: &str, check: impl FnMut() -> Option<T>) -> T {
    common::wait_for(secs(10), what, check)
}

// ---------------------------------------------------------------------------------------
// Helpers of these tests

const FENCE_DUMMY: &str = "/usr/sbin/fence_dummy";

/// Generous for a loopback session plus fence-local; a pass takes well under a second.
const SSH_TIMEOUT: Duration = Duration::from_secs(10);

/// Starts the test's sshd and registers its log, printed with the others on failure.
fn start_sshd() -> Sshd {
    require("/usr/sbin/sshd", "openssh-server openssh-client");
    require("/usr/bin/ssh-keygen", "openssh-server openssh-client");
    let sshd = Sshd::start();
    register_log("sshd", &sshd.path("sshd.log"));
    // Refused at config load otherwise (SPEC §9); ssh-keygen writes it so.
    let mode = std::fs::metadata(sshd.path("client_key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "client_key has mode {mode:o}");
    sshd
}

/// A known_hosts file that names the test's sshd with another host's key: what a
/// reinstalled host (or a man in the middle) looks like.
fn wrong_known_hosts(sshd: &Sshd) -> PathBuf {
    let other = sshd.path("other_host_key");
    keygen(&other);
    let other_pub = std::fs::read_to_string(other.with_extension("pub")).unwrap();
    sshd.write(
        "changed_known_hosts",
        &format!("[127.0.0.1]:{} {other_pub}", sshd.port),
    )
}

/// `[[fence]] kind = "ssh"` for the test's sshd, as root (the tests run as root, and the
/// remote user must be allowed to kill the old incarnation). `command = None` runs the
/// default `warden fence-local`, found on the sessions' PATH (see [`install_warden`]).
fn ssh_fence(sshd: &Sshd, known_hosts: &Path, command: Option<&str>, timeout: Duration) -> String {
    let mut table = format!(
        "[[fence]]\nkind = \"ssh\"\nuser = \"root\"\nport = {}\nidentity_file = {}\n\
         known_hosts = {}\ntimeout = {}\n",
        sshd.port,
        toml_str(&sshd.path("client_key").display().to_string()),
        toml_str(&known_hosts.display().to_string()),
        toml_duration(timeout),
    );
    if let Some(c) = command {
        table.push_str(&format!("command = {}\n", toml_str(c)));
    }
    table
}

/// The remote command of the ssh method, absolute: the remote PATH need not have warden.
/// The method appends fence-local's arguments to it.
fn fence_local_command() -> String {
    format!("{WARDEN} fence-local")
}

/// Puts the warden under test on the sshd sessions' PATH (the harness's `bin/`), so that
/// the method's default remote command, `warden fence-local`, finds it.
fn install_warden(sshd: &Sshd) {
    let link = sshd.path("bin/warden");
    if !link.exists() {
        std::os::unix::fs::symlink(WARDEN, link).unwrap();
    }
}

/// `[[fence]] kind = "script"`, `protocol = "fence-agent"` running fence_dummy with
/// `options` (sent as `key=value` lines on its stdin with `action=off` and `plug=`).
fn fence_dummy(options: &[(&str, &str)], timeout: Duration) -> String {
    let options: Vec<String> = options
        .iter()
        .map(|(k, v)| format!("{k} = {}", toml_str(v)))
        .collect();
    format!(
        "[[fence]]\nkind = \"script\"\nprotocol = \"fence-agent\"\ncommand = {}\n\
         options = {{ {} }}\ntimeout = {}\n",
        toml_array(&[FENCE_DUMMY.to_string()]),
        options.join(", "),
        toml_duration(timeout)
    )
}

fn chain(fences: Vec<String>) -> NodeOptions {
    NodeOptions {
        fences: Some(fences),
        ..Default::default()
    }
}

/// The SHA256 fingerprint of a public key file, as `ssh-keygen -l` and sshd print it.
fn fingerprint(pub_key: &Path) -> String {
    let out = std::process::Command::new("/usr/bin/ssh-keygen")
        .args(["-l", "-E", "sha256", "-f"])
        .arg(pub_key)
        .output()
        .unwrap();
    assert!(out.status.success(), "ssh-keygen -l: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    text.split_whitespace()
        .find(|w| w.starts_with("SHA256:"))
        .unwrap_or_else(|| panic!("no fingerprint in {text:?}"))
        .to_string()
}

/// `text` without ANSI escape sequences (`ESC [ ... letter`): warden's text logs are
/// coloured even when written to a file, and a colour code sits between a field's name
/// and its value.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            if chars.next() == Some('[') {
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The lines of `log` that contain every one of `needles`.
fn lines_with<'a>(log: &'a str, needles: &[&str]) -> Vec<&'a str> {
    log.lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .collect()
}

/// The first line of `w`'s log containing every one of `needles`; fails the test with
/// every log otherwise.
fn log_line(w: &Warden, needles: &[&str]) -> String {
    let log = plain(&w.log());
    match lines_with(&log, needles).first() {
        Some(l) => l.to_string(),
        None => {
            dump_logs();
            panic!(
                "no line of {} contains all of {needles:?}",
                w.log_path().display()
            )
        }
    }
}

/// The byte offset in `w`'s log of the first line containing every one of `needles`.
fn log_position(w: &Warden, needles: &[&str]) -> usize {
    let line = log_line(w, needles);
    plain(&w.log()).find(&line).expect("the line is in the log")
}

/// The `elapsed_ms=N` field of a fence attempt's log line.
fn elapsed_ms(line: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("elapsed_ms="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no elapsed_ms in {line:?}"))
}

/// During a window in which the standby must not promote: it started no service, and the
/// old service is alive and still ticking (so the standby had every reason to want to).
fn no_promotion_while_old_service_runs(
    standby: &Node,
    old_node: &Node,
    old: &Run,
    old_must_tick: bool,
) -> Result<(), String> {
    if !standby.runs().is_empty() {
        return Err(format!(
            "{} started its service: {:?}",
            standby.id,
            standby.runs()
        ));
    }
    if old_must_tick {
        if !process_alive(old.pid) {
            return Err(format!(
                "the old service {} died: the test lost its premise",
                old.pid
            ));
        }
        let last = old_node.last_run().expect("the old run is in the journal");
        let now = mono_now_ns();
        // It ticks every 10ms; 2s of silence means it stopped (or the machine did).
        if last.last_ns + nanos(secs(2)) < now {
            return Err(format!(
                "the old service has not ticked for {:?}: the test lost its premise",
                Duration::from_nanos(now - last.last_ns)
            ));
        }
    }
    Ok(())
}

/// The proof of a fenced takeover from the services' own records: the old run ended
/// (its last line) before the new run started, and the old service is gone.
fn assert_old_ended_before_new_started(old_node: &Node, old: &Run, new: &Run) {
    let old_after = old_node.last_run().unwrap();
    assert_eq!(
        old_after.pid, old.pid,
        "the old node started another service"
    );
    assert!(
        old_after.last_ns < new.start_ns,
        "the old service wrote at {} after the new one started at {}",
        old_after.last_ns,
        new.start_ns
    );
    assert!(
        !process_alive(old.pid),
        "the old service {} survived the fence",
        old.pid
    );
}

/// Waits until `node` is active by its own status and its service has started; returns
/// the new run.
fn wait_promoted(node: &Node, timeout: Duration) -> Run {
    wait_for_status(
        &node.config,
        timeout,
        &format!("{} is active", node.id),
        |s| active_id(s).as_deref() == Some(node.id.as_str()),
    );
    common::wait_for(secs(5), &format!("{}'s service started", node.id), || {
        node.last_run()
    })
}

/// Asserts that a warden frozen by SIGSTOP was ended by the fence's SIGKILL (the test
/// never sent it one).
fn assert_killed_by_fence(w: &mut Warden) {
    let exit = w.wait_exit(secs(5));
    assert_eq!(
        exit.signal(),
        Some(libc::SIGKILL),
        "the frozen warden was not killed by the fence: {exit}"
    );
}

/// Freezes the active's warden with its service running, and waits until the service is
/// seen ticking with its warden frozen (the premise of a fence that must kill it).
fn freeze_active(w: &Warden, node: &Node) {
    let freeze_ns = mono_now_ns();
    w.sigstop();
    wait_until(
        secs(5),
        &format!("{}'s service keeps running with its warden frozen", node.id),
        || {
            node.last_run()
                .is_some_and(|r| r.last_ns > freeze_ns + nanos(ms(300)))
        },
    );
}

// ---------------------------------------------------------------------------------------
// The tests

/// Show it works 1: the active's warden is frozen (SIGSTOP) past its session with its
/// service running. The standby fences over ssh, through `warden fence-local` run by the
/// real sshd, which kills the service group and the frozen warden; only then does the
/// standby promote.
#[test]
fn frozen_active_is_fenced_over_ssh_before_the_standby_promotes() {
    let sshd = start_sshd();
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let fences = vec![ssh_fence(
        &sshd,
        &sshd.path("known_hosts"),
        Some(&fence_local_command()),
        SSH_TIMEOUT,
    )];
    let n1 = cluster.node_with("n1", chain(fences.clone()));
    let n2 = cluster.node_with("n2", chain(fences));
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);
    let old = n1.last_run().unwrap();
    let old_warden_pid = wardens[0].pid();

    // n1's warden stays frozen: that is the fault. The standby must fence it and take over.
    freeze_active(&wardens[0], &n1);
    let new = wait_promoted(&n2, secs(30));
    assert_eq!(new.node, "n2");
    assert!(new.epoch > old.epoch, "{old} then {new}");
    // The order, from the services' own clocks: the old service's last line came before
    // the new service's start.
    assert_old_ended_before_new_started(&n1, &old, &new);
    // fence-local killed the frozen warden too.
    assert_killed_by_fence(&mut wardens[0]);

    // The standby's log: the ssh method ran fence-local on 127.0.0.1, which killed the
    // old service group and warden and printed its verdict; the chain says ssh fenced.
    let w2 = &wardens[1];
    log_line(
        w2,
        &[
            "running `timeout -s KILL",
            &fence_local_command(),
            "root@127.0.0.1:",
        ],
    );
    log_line(
        w2,
        &[
            "127.0.0.1: fence-local: sent SIGKILL to",
            &old.pid.to_string(),
        ],
    );
    log_line(
        w2,
        &[
            "127.0.0.1: fence-local: sent SIGKILL to warden pid",
            &old_warden_pid.to_string(),
        ],
    );
    log_line(
        w2,
        &[
            "method=\"ssh\"",
            "127.0.0.1: fence-local: fenced: nothing of the incarnation remains",
        ],
    );
    let fenced = log_line(w2, &["fence ssh fenced n1"]);
    assert!(fenced.contains("outcome=\"fenced\""), "{fenced}");
    // sshd's own account: the client key was accepted for root.
    let client = fingerprint(&sshd.path("client_key.pub"));
    let sshd_log = sshd.log();
    assert!(
        !lines_with(
            &sshd_log,
            &["Accepted publickey for root from 127.0.0.1", &client]
        )
        .is_empty(),
        "sshd did not log the accepted key {client}:\n{sshd_log}"
    );

    // Nothing of the old incarnation acts again while the new service runs on.
    let ticks = new.ticks;
    wait_until(secs(10), "n2's service runs on for 30 ticks", || {
        n2.last_run().is_some_and(|r| r.ticks >= ticks + 30)
    });
    assert_eq!(n1.runs().len(), 1, "n1 started another service");
    assert_eq!(n1.last_run().unwrap().last_ns, n1.runs()[0].last_ns);
    cluster.assert_safe();
}

/// Show it works 2: known_hosts names the old active's host with another key. The ssh
/// fence fails, naming the host, the fingerprint seen and the known_hosts path, and never
/// authenticates; with nothing else in the chain nobody promotes while the old service
/// runs (its warden is frozen, so it keeps ticking). A second standby whose chain goes
/// on to a script that kills the recorded pids fences and promotes.
#[test]
fn wrong_host_key_fails_ssh_fencing_and_blocks_promotion() {
    let sshd = start_sshd();
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let wrong = wrong_known_hosts(&sshd);
    let ssh_wrong = ssh_fence(&sshd, &wrong, Some(&fence_local_command()), SSH_TIMEOUT);
    let n1 = cluster.node_with("n1", chain(vec![ssh_wrong.clone()]));
    let n2 = cluster.node_with("n2", chain(vec![ssh_wrong.clone()]));
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);
    let old = n1.last_run().unwrap();
    let old_warden_pid = wardens[0].pid();

    // SIGSTOP rather than kill -9: after kill -9 the old service dies with its warden
    // (parent-death signal), and "no promotion while the old service lives" needs it alive.
    freeze_active(&wardens[0], &n1);
    wardens[1].wait_for_log("fence ssh failed on n1", secs(30));
    let failure = log_line(&wardens[1], &["fence ssh failed on n1"]);
    for needle in [
        "host key of 127.0.0.1:",
        "does not match",
        &sshd.host_fingerprint(),
        &wrong.display().to_string(),
        &format!("[127.0.0.1]:{}", sshd.port),
    ] {
        assert!(failure.contains(needle), "no {needle:?} in {failure}");
    }

    // The assertion window: 3 session timeouts in which n2 keeps trying (and failing) and
    // must not promote, while the old service runs on.
    holds_for(
        cluster.session_timeout * 3,
        "no promotion while the old service runs",
        || no_promotion_while_old_service_runs(&n2, &n1, &old, true),
    );
    assert!(
        wardens[1].log_count("fence ssh failed on n1") >= 2,
        "n2 stopped trying to fence n1"
    );
    let status = common::status_json(&n2.config);
    assert_ne!(active_id(&status).as_deref(), Some("n2"), "{status:#}");
    assert!(
        wardens[1].log_mentions("fence --confirm"),
        "n2's log does not say what to do"
    );
    assert!(
        !sshd.log().contains("Accepted publickey"),
        "warden authenticated to a host whose key does not match:\n{}",
        sshd.log()
    );

    // The second variant: a standby whose chain goes on, after the same failing ssh
    // method, to a script that SIGKILLs the recorded warden and service pids. n2 steps
    // out (SIGTERM: a clean exit) so that n3 is the one to take over.
    let kills = cluster.dir().join("kills");
    let kill = cluster.script(
        "fence-kill.sh",
        &format!(
            "[ -n \"$WARDEN_TARGET_PID\" ] && [ -n \"$WARDEN_TARGET_SERVICE_PID\" ] || \
             {{ echo 'fence-kill: no pids recorded' >&2; exit 1; }}\n\
             echo \"fence-kill: SIGKILL to warden $WARDEN_TARGET_PID and service \
             $WARDEN_TARGET_SERVICE_PID\"\n\
             echo \"$WARDEN_TARGET_PID $WARDEN_TARGET_SERVICE_PID\" >> '{}'\n\
             kill -9 \"$WARDEN_TARGET_SERVICE_PID\" \"$WARDEN_TARGET_PID\"\n\
             exit 0\n",
            kills.display()
        ),
    );
    let n3 = cluster.node_with(
        "n3",
        chain(vec![
            ssh_wrong,
            common::script_fence(&[&kill.display().to_string()], secs(5)),
        ]),
    );
    wardens[1].sigterm();
    wardens[1].wait_exit(secs(10));
    assert!(n2.runs().is_empty(), "n2 promoted: {:?}", n2.runs());
    let mut w3 = n3.start();
    let new = wait_promoted(&n3, secs(30));
    assert!(new.epoch > old.epoch, "{old} then {new}");
    assert_old_ended_before_new_started(&n1, &old, &new);
    assert_killed_by_fence(&mut wardens[0]);
    assert_eq!(
        std::fs::read_to_string(&kills).unwrap(),
        format!("{old_warden_pid} {}\n", old.pid),
        "the script did not get the recorded pids (once)"
    );
    // In n3's log the ssh method failed first, then the script fenced.
    let ssh_failed = log_position(&w3, &["fence ssh failed on n1", "does not match"]);
    let script_fenced = log_position(&w3, &["fence script:fence-kill.sh fenced n1"]);
    assert!(
        ssh_failed < script_fenced,
        "the script ran before ssh failed"
    );
    assert!(w3.is_running());
    cluster.assert_safe();
}

/// Show it works 3: the remote command hangs. The ssh method's 2s timeout cuts it off:
/// the attempt fails by then, and nothing of it is left running on the "remote" host
/// (the method runs a configured command under `timeout -s KILL` there). The chain goes on
/// to a working ssh method (the default `warden fence-local`), and the standby promotes.
#[test]
fn hung_remote_command_is_cut_off_at_the_timeout() {
    let sshd = start_sshd();
    install_warden(&sshd);
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    // The hung command records its pid and becomes `sleep` with an argument unique to
    // this test process, so that a scan of /proc finds its processes and no others. The
    // trailing `#` makes the shell ignore fence-local's arguments appended to it.
    let marker = format!("1000.{}", std::process::id());
    let hang_pids = cluster.dir().join("hang-pids");
    let _reaper = PidFileReaper {
        file: hang_pids.clone(),
        marker: marker.clone(),
    };
    let hang = format!("echo $$ >> {}; exec sleep {marker} #", hang_pids.display());
    let hang_timeout = secs(2);
    let fences = vec![
        ssh_fence(&sshd, &sshd.path("known_hosts"), Some(&hang), hang_timeout),
        ssh_fence(&sshd, &sshd.path("known_hosts"), None, SSH_TIMEOUT),
    ];
    let n1 = cluster.node_with("n1", chain(fences.clone()));
    let n2 = cluster.node_with("n2", chain(fences));
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);
    let old = n1.last_run().unwrap();

    freeze_active(&wardens[0], &n1);
    let new = wait_promoted(&n2, secs(30));
    assert_old_ended_before_new_started(&n1, &old, &new);
    assert_killed_by_fence(&mut wardens[0]);

    // The hung method failed within its timeout (plus the chain's grace), having hung.
    let w2 = &wardens[1];
    let failed = log_line(w2, &["fence ssh failed on n1"]);
    assert!(
        failed.contains("ran past its bound") || failed.contains("timed out after 2s"),
        "{failed}"
    );
    let took = elapsed_ms(&failed);
    assert!(
        took <= (hang_timeout + sshd::SSH_SLACK).as_millis() as u64,
        "the hung attempt took {took}ms with a timeout of {hang_timeout:?}: {failed}"
    );
    assert!(took >= 500, "the command did not hang: {failed}");
    // Then the default remote command fenced.
    let fenced = log_position(w2, &["fence ssh fenced n1", "fence-local: fenced"]);
    assert!(log_position(w2, &["fence ssh failed on n1"]) < fenced);

    // The hung command ran (it recorded its pid) and nothing of it remains.
    let pids: Vec<u32> = std::fs::read_to_string(&hang_pids)
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert!(!pids.is_empty(), "the hanging remote command never ran");
    wait_until(secs(3), "no hung remote command remains", || {
        processes_with(&marker).is_empty() && pids.iter().all(|p| !process_alive(*p))
    });
    cluster.assert_safe();
}

/// Show it works 5: a Pacemaker fence agent (`fence_dummy`, which keeps the power state
/// in a file) after an ssh method that fails (wrong host key). A failing agent
/// (`type = "fail"`) fails the chain: no promotion. Then `action=off` reaches a working
/// agent, its status file says off, and the standby promotes.
///
/// fence_dummy powers nothing off: a frozen old active would live on after it "fenced".
/// So the old active here is ended with kill -9 (its service dies with its warden, by the
/// parent-death signal), which keeps "never two services at once" true; what is under
/// test is the fencing decision.
#[test]
fn fence_agent_powers_off_through_fence_dummy() {
    require(FENCE_DUMMY, "fence-agents");
    let sshd = start_sshd();
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let wrong = wrong_known_hosts(&sshd);
    let ssh_wrong = ssh_fence(&sshd, &wrong, Some(&fence_local_command()), SSH_TIMEOUT);
    let power = cluster.dir().join("power");
    std::fs::write(&power, "on").unwrap();

    let n1 = cluster.node_with("n1", chain(vec![ssh_wrong.clone()]));
    // type=fail: the dummy never reaches "off"; power_timeout bounds its own wait.
    let n2 = cluster.node_with(
        "n2",
        chain(vec![
            ssh_wrong.clone(),
            fence_dummy(&[("type", "fail"), ("power_timeout", "1")], secs(20)),
        ]),
    );
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);
    let old = n1.last_run().unwrap();

    wardens[0].kill9();
    wardens[0].wait_exit(secs(5));
    wait_until(secs(3), "n1's service died with its warden", || {
        !process_alive(old.pid)
    });

    // The failing agent fails the chain.
    wardens[1].wait_for_log("fence script:fence_dummy failed on n1", secs(30));
    let failed = log_line(&wardens[1], &["fence script:fence_dummy failed on n1"]);
    assert!(failed.contains("exited with status 1"), "{failed}");
    assert!(
        log_position(&wardens[1], &["fence ssh failed on n1", "does not match"])
            < log_position(&wardens[1], &["fence script:fence_dummy failed on n1"]),
        "the agent ran before the ssh method failed"
    );
    // The assertion window: 3 session timeouts of failed fencing and no promotion.
    holds_for(
        cluster.session_timeout * 3,
        "no promotion while fencing fails",
        || no_promotion_while_old_service_runs(&n2, &n1, &old, false),
    );
    assert!(
        wardens[1].log_count("fence script:fence_dummy failed on n1") >= 2,
        "n2 stopped trying to fence n1"
    );
    assert_eq!(std::fs::read_to_string(&power).unwrap(), "on");

    // A standby with a working agent: action=off reaches it, and it promotes.
    let n3 = cluster.node_with(
        "n3",
        chain(vec![
            ssh_wrong,
            fence_dummy(
                &[("type", "file"), ("status_file", power.to_str().unwrap())],
                secs(20),
            ),
        ]),
    );
    wardens[1].sigterm();
    wardens[1].wait_exit(secs(10));
    assert!(n2.runs().is_empty(), "n2 promoted: {:?}", n2.runs());
    let w3 = n3.start();
    let new = wait_promoted(&n3, secs(30));
    assert_eq!(std::fs::read_to_string(&power).unwrap(), "off");
    assert!(new.epoch > old.epoch, "{old} then {new}");
    assert_old_ended_before_new_started(&n1, &old, &new);
    let fenced = log_line(&w3, &["fence script:fence_dummy fenced n1"]);
    assert!(fenced.contains("outcome=\"fenced\""), "{fenced}");
    assert!(
        log_position(&w3, &["fence ssh failed on n1"])
            < log_position(&w3, &["fence script:fence_dummy fenced n1"])
    );
    cluster.assert_safe();
}
