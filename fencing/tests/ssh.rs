//! `kind = "ssh"` against a real sshd on 127.0.0.1 (its own host key, config and
//! authorized key), running the workspace's own `warden fence-local` on the "remote" host,
//! which is this one: the old incarnation's processes are children of the test.

mod common;

use common::sshd::{keygen, listener, wait_gone, Sshd, SSH_SLACK};
use common::*;
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};
use warden_fencing::process;
use warden_fencing::{
    FenceChain, FenceMethod, FenceReport, Outcome, ScriptFence, ScriptProtocol, SshFence, Target,
};

/// Generous for a loopback session plus fence-local; a pass takes well under a second.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The old incarnation on "127.0.0.1", this boot; no processes or port recorded yet.
fn target() -> Target {
    Target {
        host: Some("127.0.0.1".into()),
        port: None,
        ..local_target()
    }
}

/// A frozen stand-in for the old warden (SIGSTOPped, as a paused warden is).
fn stopped_warden() -> Group {
    let g = Group::spawn("exec sleep 1000");
    stop(&g);
    g
}

/// The record of an incarnation whose service leads its own group.
fn incarnation(service: &Group, warden: &Group) -> Target {
    with_warden(
        Target {
            service_pid: Some(service.pid),
            service_pgid: Some(service.pid),
            service_start_time: Some(service.start_time()),
            ..target()
        },
        warden,
    )
}

fn with_warden(t: Target, warden: &Group) -> Target {
    Target {
        pid: Some(warden.pid),
        start_time: Some(warden.start_time()),
        ..t
    }
}

async fn fence(method: SshFence, target: &Target) -> FenceReport {
    FenceChain::new(vec![FenceMethod::Ssh(method)], ctx())
        .fence(target)
        .await
}

fn failure(report: &FenceReport) -> String {
    match &report.attempts[0].outcome {
        Outcome::Failed(why) => why.clone(),
        other => panic!("expected failed, got {other:?}: {}", report.summary()),
    }
}

#[tokio::test]
async fn ssh_runs_fence_local_which_kills_the_service_group_and_the_stopped_warden() {
    let sshd = Sshd::start();
    sshd.install_warden();
    let mut service = Group::spawn("sleep 1000 & sleep 1000 & wait");
    let members = service.wait_members(3);
    let mut warden = stopped_warden();
    let t = incarnation(&service, &warden);

    let buf = global_logs();
    let report = fence(sshd.method(&sshd.path("known_hosts"), None, TIMEOUT), &t).await;

    assert!(report.is_fenced(), "{}", report.summary());
    assert_eq!(report.fenced_by(), Some("ssh"));
    // Verified on the far side before the answer.
    assert_killed(&mut service, members, &mut warden);
    // fence-local's own lines are in this side's log, under the method and target.
    let logs = logs(&buf);
    let sent = format!(
        "127.0.0.1: fence-local: sent SIGKILL to service group {}",
        service.pid
    );
    let line = logs
        .lines()
        .find(|l| l.contains(&sent))
        .unwrap_or_else(|| panic!("no {sent:?} in the log:\n{logs}"));
    assert!(line.contains("method=\"ssh\" target=\"rm1\""), "{line}");
    let warden_line = format!("fence-local: sent SIGKILL to warden pid {}", warden.pid);
    assert!(logs.contains(&warden_line), "{logs}");
}

#[tokio::test]
async fn a_changed_host_key_fails_naming_host_fingerprint_and_known_hosts_and_the_chain_goes_on() {
    let sshd = Sshd::start();
    sshd.install_warden();
    let other = sshd.path("other_host_key");
    keygen(&other);
    let other_pub = std::fs::read_to_string(other.with_extension("pub")).unwrap();
    let known_hosts = sshd.write(
        "changed_known_hosts",
        &format!("[127.0.0.1]:{} {other_pub}", sshd.port),
    );
    let mut service = Group::spawn("exec sleep 1000");
    let warden = stopped_warden();
    let t = incarnation(&service, &warden);

    let report = fence(sshd.method(&known_hosts, None, TIMEOUT), &t).await;
    let why = failure(&report);
    assert!(why.contains("host key of 127.0.0.1:"), "{why}");
    assert!(why.contains("does not match"), "{why}");
    assert!(why.contains(&sshd.host_fingerprint()), "{why}");
    assert!(why.contains(&known_hosts.display().to_string()), "{why}");
    assert!(
        service.alive(),
        "the service was killed through an untrusted host"
    );
    assert!(
        !sshd.log().contains("Accepted publickey"),
        "warden authenticated to a host with a changed key:\n{}",
        sshd.log()
    );

    // With a second method that fences, the chain goes on to it.
    let chain = FenceChain::new(
        vec![
            FenceMethod::Ssh(sshd.method(&known_hosts, None, TIMEOUT)),
            FenceMethod::Script(ScriptFence {
                command: vec!["/bin/true".into()],
                protocol: ScriptProtocol::Env,
                options: BTreeMap::new(),
                timeout: TIMEOUT,
                nodes: None,
            }),
        ],
        ctx(),
    );
    let report = chain.fence(&t).await;
    assert_eq!(
        report.fenced_by(),
        Some("script:true"),
        "{}",
        report.summary()
    );
    assert!(matches!(report.attempts[0].outcome, Outcome::Failed(_)));
}

#[tokio::test]
async fn an_unknown_host_fails_and_never_authenticates() {
    let sshd = Sshd::start();
    sshd.install_warden();
    let mut service = Group::spawn("exec sleep 1000");
    let warden = stopped_warden();
    let t = incarnation(&service, &warden);
    let empty = sshd.path("empty_known_hosts");
    // A port-less entry vouches for port 22 only, as in OpenSSH (libssh2's check_port
    // would accept it for any port).
    let host_pub = std::fs::read_to_string(sshd.path("host_key.pub")).unwrap();
    let portless = sshd.write("portless_known_hosts", &format!("127.0.0.1 {host_pub}"));

    for known_hosts in [empty, portless] {
        let report = fence(sshd.method(&known_hosts, None, TIMEOUT), &t).await;
        let why = failure(&report);
        assert!(why.contains("host key of 127.0.0.1:"), "{why}");
        assert!(why.contains("is unknown"), "{why}");
        assert!(why.contains(&format!("[127.0.0.1]:{}", sshd.port)), "{why}");
        assert!(why.contains(&sshd.host_fingerprint()), "{why}");
        assert!(why.contains(&known_hosts.display().to_string()), "{why}");
    }
    assert!(service.alive());
    assert!(!sshd.log().contains("Accepted publickey"), "{}", sshd.log());
}

#[tokio::test]
async fn hashed_known_hosts_entries_are_honoured_and_revoked_keys_refused() {
    let sshd = Sshd::start();
    let hashed = sshd.write(
        "hashed_known_hosts",
        &std::fs::read_to_string(sshd.path("known_hosts")).unwrap(),
    );
    let out = std::process::Command::new("/usr/bin/ssh-keygen")
        .args(["-q", "-H", "-f"])
        .arg(&hashed)
        .output()
        .unwrap();
    assert!(out.status.success(), "ssh-keygen -H: {out:?}");
    assert!(std::fs::read_to_string(&hashed).unwrap().starts_with("|1|"));

    // A custom command that succeeds: only the host key check is under test here.
    let report = fence(sshd.method(&hashed, Some("true"), TIMEOUT), &target()).await;
    assert!(report.is_fenced(), "{}", report.summary());

    let host_pub = std::fs::read_to_string(sshd.path("host_key.pub")).unwrap();
    let key = host_pub
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    let revoked = sshd.write(
        "revoked_known_hosts",
        &format!(
            "{}@revoked * {key}\n",
            std::fs::read_to_string(sshd.path("known_hosts")).unwrap()
        ),
    );
    let report = fence(sshd.method(&revoked, Some("true"), TIMEOUT), &target()).await;
    let why = failure(&report);
    assert!(why.contains("@revoked"), "{why}");
    assert!(why.contains(&sshd.host_fingerprint()), "{why}");
}

#[tokio::test]
async fn a_hanging_remote_command_is_cut_off_at_the_timeout_and_leaves_nothing_running() {
    let sshd = Sshd::start();
    let pidfile = sshd.path("sleep.pid");
    let hang = sshd.script(
        "hang",
        &format!("sleep 1000 &\necho $! > {}\nwait\n", pidfile.display()),
    );
    let timeout = Duration::from_secs(3);
    let started = Instant::now();
    let report = fence(
        sshd.method(
            &sshd.path("known_hosts"),
            Some(&hang.display().to_string()),
            timeout,
        ),
        &target(),
    )
    .await;
    let elapsed = started.elapsed();

    let why = failure(&report);
    assert!(why.contains("SIGKILL"), "{why}");
    assert!(
        elapsed < timeout + SSH_SLACK,
        "took {elapsed:?} with a timeout of {timeout:?}"
    );
    let sleep: u32 = wait_for("the hanging command's pidfile", || {
        std::fs::read_to_string(&pidfile).ok()?.trim().parse().ok()
    });
    // Killed on the remote host by the command's own bound, not merely abandoned here.
    wait_gone("the remote command's `sleep 1000`", sleep);
}

#[tokio::test]
async fn a_server_that_never_answers_is_abandoned_at_the_timeout() {
    // Accepts connections (the kernel does, from its backlog) but never speaks ssh.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let sshd = Sshd::start();
    let mut m = sshd.method(&sshd.path("known_hosts"), None, Duration::from_secs(1));
    m.port = silent.local_addr().unwrap().port();
    let started = Instant::now();
    let report = fence(m, &target()).await;
    let elapsed = started.elapsed();

    let why = failure(&report);
    assert!(why.contains("timed out after 1s"), "{why}");
    assert!(why.contains("handshake"), "{why}");
    assert!(
        elapsed < Duration::from_secs(1) + SSH_SLACK,
        "took {elapsed:?}"
    );
}

#[tokio::test]
async fn fence_local_spares_a_recorded_pid_now_held_by_another_process() {
    let sshd = Sshd::start();
    sshd.install_warden();
    let mut stranger = Group::spawn("exec sleep 1000");
    let real = stranger.start_time();
    // An earlier service and warden that had this pid: their start times differ. The
    // recorded incarnation is gone, which is fenced (SPEC §5: processes already gone count
    // as fenced), and the process now holding the pid is left alone.
    let t = Target {
        pid: Some(stranger.pid),
        start_time: Some(real + 1),
        service_pid: Some(stranger.pid),
        service_pgid: Some(stranger.pid),
        service_start_time: Some(real.saturating_sub(1)),
        ..target()
    };
    let buf = global_logs();
    let report = fence(sshd.method(&sshd.path("known_hosts"), None, TIMEOUT), &t).await;

    assert!(report.is_fenced(), "{}", report.summary());
    assert!(stranger.alive(), "a process with a recycled pid was killed");
    assert!(process::is_running(stranger.pid, Some(real)));
    let logs = logs(&buf);
    let gone = format!("fence-local: already gone: service pid {}", stranger.pid);
    assert!(logs.contains(&gone), "no {gone:?} in the log:\n{logs}");
}

#[tokio::test]
async fn a_method_bound_to_other_nodes_or_a_target_without_host_does_not_apply() {
    let sshd = Sshd::start();
    let mut m = sshd.method(&sshd.path("known_hosts"), None, TIMEOUT);
    m.nodes = Some(vec!["other".into()]);
    let report = fence(m, &target()).await;
    assert!(
        matches!(&report.attempts[0].outcome,
            Outcome::NotApplicable(r) if r.contains("rm1 is not in its nodes list [other]")),
        "{}",
        report.summary()
    );

    let hostless = Target {
        host: None,
        ..target()
    };
    let report = fence(
        sshd.method(&sshd.path("known_hosts"), None, TIMEOUT),
        &hostless,
    )
    .await;
    assert!(
        matches!(&report.attempts[0].outcome,
            Outcome::NotApplicable(r) if r.contains("host is unknown")),
        "{}",
        report.summary()
    );
    assert!(
        !sshd.log().contains("Connection from"),
        "a method that does not apply connected:\n{}",
        sshd.log()
    );
}

#[tokio::test]
async fn fence_local_falls_back_to_the_listener_on_the_recorded_port() {
    let sshd = Sshd::start();
    sshd.install_warden();
    let (mut service, port) = listener();
    let mut warden = stopped_warden();
    // No service pid or group recorded, only the port.
    let t = with_warden(
        Target {
            port: Some(port),
            ..target()
        },
        &warden,
    );
    let report = fence(sshd.method(&sshd.path("known_hosts"), None, TIMEOUT), &t).await;

    assert!(report.is_fenced(), "{}", report.summary());
    assert_eq!(service.reap().signal(), Some(libc::SIGKILL));
    assert_eq!(warden.reap().signal(), Some(libc::SIGKILL));
    assert!(process::listeners_on_port(port).is_empty());
}

#[tokio::test]
async fn fence_local_that_cannot_verify_fails_with_its_reason() {
    let sshd = Sshd::start();
    sshd.install_warden();
    // No warden pid recorded: the old warden cannot be shown gone.
    let report = fence(
        sshd.method(&sshd.path("known_hosts"), None, TIMEOUT),
        &target(),
    )
    .await;
    let why = failure(&report);
    assert!(why.contains("could not verify"), "{why}");
    assert!(why.contains("names no warden pid"), "{why}");
}

#[tokio::test]
async fn a_host_without_warden_fails_saying_to_install_it() {
    let sshd = Sshd::start(); // no install_warden: `warden` is not on the sessions' PATH
    let warden = stopped_warden();
    let report = fence(
        sshd.method(&sshd.path("known_hosts"), None, TIMEOUT),
        &with_warden(target(), &warden),
    )
    .await;
    let why = failure(&report);
    assert!(
        why.contains("warden is not installed on 127.0.0.1"),
        "{why}"
    );
    assert!(process::is_running(warden.pid, None));
}

#[tokio::test]
async fn a_key_the_host_does_not_accept_fails_naming_it() {
    let sshd = Sshd::start();
    let stranger_key = sshd.path("stranger_key");
    keygen(&stranger_key);
    let mut m = sshd.method(&sshd.path("known_hosts"), Some("true"), TIMEOUT);
    m.identity_file = stranger_key.clone();
    let report = fence(m, &target()).await;
    let why = failure(&report);
    assert!(why.contains("127.0.0.1 refused"), "{why}");
    assert!(why.contains(&stranger_key.display().to_string()), "{why}");
}

#[tokio::test]
async fn an_abandoned_ssh_fence_closes_its_session_and_the_remote_command_ends() {
    // The daemon drops the chain's future when it abandons a fence (session lost,
    // stopping): the ssh session must go with it, and with it the remote command, which
    // would otherwise run (and act) until its own bound, long after a later election.
    let sshd = Sshd::start();
    let pidfile = sshd.path("remote_sleep.pid");
    let hang = sshd.script(
        "hang",
        &format!("sleep 60 &\necho $! > {}\nwait\n", pidfile.display()),
    );
    let method = sshd.method(
        &sshd.path("known_hosts"),
        Some(&hang.display().to_string()),
        Duration::from_secs(120),
    );
    let chain = FenceChain::new(vec![FenceMethod::Ssh(method)], ctx());
    let t = target();
    let mut fence = Box::pin(chain.fence(&t));
    let sleep: u32 = loop {
        tokio::select! {
            report = &mut fence => panic!("the fence ended: {}", report.summary()),
            _ = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
        if let Some(pid) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            break pid;
        }
    };
    assert!(process::is_running(sleep, None));
    assert!(
        !children_of(sshd.pid()).is_empty(),
        "no sshd session serves the fence"
    );

    drop(fence);

    wait_for("sshd to end the abandoned session", || {
        children_of(sshd.pid()).is_empty().then_some(())
    });
    wait_gone("the abandoned remote command's sleep", sleep);
}
