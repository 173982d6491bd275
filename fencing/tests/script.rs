//! `kind = "script"` running real programs: env protocol, fence agents, timeouts.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warden_fencing::process;
use warden_fencing::{FenceChain, FenceMethod, FenceReport, Outcome, ScriptFence, ScriptProtocol};

const FENCE_DUMMY: &str = "/usr/sbin/fence_dummy";

fn script(command: &[&str], timeout: Duration) -> FenceMethod {
    FenceMethod::Script(ScriptFence {
        command: command.iter().map(|s| s.to_string()).collect(),
        protocol: ScriptProtocol::Env,
        options: BTreeMap::new(),
        timeout,
        nodes: None,
    })
}

fn sh(code: &str) -> FenceMethod {
    script(&["/bin/sh", "-c", code], Duration::from_secs(10))
}

fn agent(path: &Path, options: &[(&str, &str)]) -> FenceMethod {
    FenceMethod::Script(ScriptFence {
        command: vec![path.display().to_string()],
        protocol: ScriptProtocol::FenceAgent,
        options: options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        timeout: Duration::from_secs(20),
        nodes: None,
    })
}

async fn run(method: FenceMethod) -> FenceReport {
    FenceChain::new(vec![method], ctx())
        .fence(&local_target())
        .await
}

fn failure(report: &FenceReport) -> String {
    match &report.attempts[0].outcome {
        Outcome::Failed(r) => r.clone(),
        other => panic!("expected failed, got {other:?}"),
    }
}

/// An executable file `name` in `dir` with `body`.
fn program(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn example(name: &str) -> String {
    format!("{}/scripts/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[tokio::test]
async fn script_gets_the_target_in_its_environment_and_a_closed_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("env");
    // `read` at end of file fails at once: stdin is closed, not a terminal or a pipe
    // that stays open.
    let code = format!(
        "if read line; then exit 7; fi; env | grep '^WARDEN_' | sort > {}",
        out.display()
    );
    let report = run(sh(&code)).await;
    assert!(report.is_fenced(), "{}", report.summary());

    let env = std::fs::read_to_string(&out).unwrap();
    let boot = process::boot_id().unwrap();
    for line in [
        "WARDEN_TARGET_NODE_ID=rm1",
        "WARDEN_TARGET_HOST=rm1.test",
        "WARDEN_TARGET_PORT=8032",
        "WARDEN_TARGET_PID=",
        "WARDEN_TARGET_SERVICE_PID=",
        "WARDEN_TARGET_SERVICE_PGID=",
        "WARDEN_TARGET_EPOCH=42",
        &format!("WARDEN_TARGET_BOOT_ID={boot}"),
        "WARDEN_CLUSTER=rm",
        "WARDEN_NODE_ID=rm2",
    ] {
        assert!(env.lines().any(|l| l == line), "{line:?} not in:\n{env}");
    }
}

#[tokio::test]
async fn script_exit_1_is_failed_with_its_status_and_last_output() {
    let report = run(sh(
        "echo checking power; echo 'BMC refused login' >&2; exit 1",
    ))
    .await;
    let reason = failure(&report);
    assert!(reason.contains("exited with status 1"), "{reason}");
    assert!(reason.contains("BMC refused login"), "{reason}");
    assert!(!report.is_fenced());
}

#[tokio::test]
async fn script_output_goes_to_the_log_with_method_and_target() {
    let (buf, _guard) = capture_logs();
    let report = run(sh("echo powered-off-rm1")).await;
    assert!(report.is_fenced(), "{}", report.summary());
    let logs = logs(&buf);
    let line = logs
        .lines()
        .find(|l| l.contains("powered-off-rm1"))
        .unwrap_or_else(|| panic!("output not logged:\n{logs}"));
    assert!(line.contains("method=\"script:sh\""), "{line}");
    assert!(line.contains("target=\"rm1\""), "{line}");
    // And the attempt itself, with its duration.
    assert!(
        logs.lines()
            .any(|l| l.contains("outcome=\"fenced\"") && l.contains("elapsed_ms=")),
        "{logs}"
    );
}

#[tokio::test]
async fn hanging_script_is_killed_with_its_whole_group_at_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    // A child in the background and the script itself both hang.
    let code = format!("sleep 1000 & echo $$ $! > {}; sleep 1000", pids.display());
    let started = std::time::Instant::now();
    let report = run(script(
        &["/bin/sh", "-c", &code],
        Duration::from_millis(300),
    ))
    .await;
    let elapsed = started.elapsed();

    let reason = failure(&report);
    assert!(reason.contains("timed out after 300ms; killed"), "{reason}");
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
    let text = std::fs::read_to_string(&pids).unwrap();
    let ids: Vec<u32> = text
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let (script_pid, background) = (ids[0], ids[1]);
    // Gone on return: the script was its group's leader.
    assert_eq!(process::group_members(script_pid), Vec::<u32>::new());
    assert!(!process::is_running(background, None));
}

#[tokio::test]
async fn leftovers_of_a_successful_script_are_killed() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let code = format!("sleep 1000 & echo $! > {}; exit 0", pid_file.display());
    let report = run(sh(&code)).await;
    assert!(report.is_fenced(), "{}", report.summary());
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        !process::is_running(pid, None),
        "background child {pid} outlived its script"
    );
}

#[tokio::test]
async fn missing_program_is_failed_naming_the_path() {
    let report = run(script(&["/nonexistent/fence-it"], Duration::from_secs(5))).await;
    let reason = failure(&report);
    assert!(reason.contains("/nonexistent/fence-it"), "{reason}");
    assert!(reason.contains("No such file"), "{reason}");
}

#[tokio::test]
async fn non_executable_program_is_failed_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fence-it");
    std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let report = run(script(&[path.to_str().unwrap()], Duration::from_secs(5))).await;
    let reason = failure(&report);
    assert!(reason.contains(path.to_str().unwrap()), "{reason}");
    assert!(reason.contains("Permission denied"), "{reason}");
}

#[tokio::test]
async fn fence_agent_gets_options_action_off_and_plug_on_stdin_and_no_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let agent_path = program(
        dir.path(),
        "fence_record",
        &format!(
            "#!/bin/sh\necho \"args=$#\" > {0}\ncat >> {0}\n",
            seen.display()
        ),
    );
    let report = run(agent(
        &agent_path,
        &[("ipaddr", "10.0.0.9"), ("login", "admin")],
    ))
    .await;
    assert!(report.is_fenced(), "{}", report.summary());
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "args=0\nipaddr=10.0.0.9\nlogin=admin\naction=off\nplug=rm1\n"
    );
}

#[tokio::test]
async fn fence_dummy_powers_the_target_off() {
    require(FENCE_DUMMY, "fence-agents");
    let dir = tempfile::tempdir().unwrap();
    let status = dir.path().join("status");
    // fence_dummy reads its status file as the power state ("on"/"off", no newline) and
    // writes the new state after action=off.
    std::fs::write(&status, "on").unwrap();
    let report = run(agent(
        Path::new(FENCE_DUMMY),
        &[("status_file", status.to_str().unwrap())],
    ))
    .await;
    assert!(report.is_fenced(), "{}", report.summary());
    assert_eq!(std::fs::read_to_string(&status).unwrap(), "off");
}

#[tokio::test]
async fn failing_fence_agent_is_failed() {
    require(FENCE_DUMMY, "fence-agents");
    // type=fail: the dummy never reaches "off"; power_timeout bounds its own wait.
    let report = run(agent(
        Path::new(FENCE_DUMMY),
        &[("type", "fail"), ("power_timeout", "1")],
    ))
    .await;
    let reason = failure(&report);
    assert!(reason.contains("exited with status 1"), "{reason}");
    assert!(reason.contains("Failed"), "{reason}");
}

#[tokio::test]
async fn example_fence_true_fences() {
    let report = run(script(&[&example("fence-true")], Duration::from_secs(5))).await;
    assert!(report.is_fenced(), "{}", report.summary());
}

#[tokio::test]
async fn example_fence_by_port_fails_when_no_port_was_recorded() {
    let target = warden_fencing::Target {
        port: None,
        ..local_target()
    };
    let report = FenceChain::new(
        vec![script(&[&example("fence-by-port")], Duration::from_secs(5))],
        ctx(),
    )
    .fence(&target)
    .await;
    let reason = failure(&report);
    assert!(reason.contains("exited with status 2"), "{reason}");
    assert!(reason.contains("no port"), "{reason}");
}

#[tokio::test]
async fn an_abandoned_fence_kills_its_script_and_everything_the_script_started() {
    // The daemon drops the chain's future when it abandons a fence (session lost,
    // stopping): nothing of that fence may act after a later election.
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("sleep.pid");
    // The script's background sleep is in the script's group but is not the script: only
    // a kill of the whole group ends it.
    let code = format!("sleep 60 & echo $! > {}; wait", pidfile.display());
    let chain = FenceChain::new(
        vec![script(&["/bin/sh", "-c", &code], Duration::from_secs(120))],
        ctx(),
    );
    let target = local_target();
    let mut fence = Box::pin(chain.fence(&target));
    // Drive the fence until the script has started its sleep, then drop it.
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
    drop(fence);
    wait_for("the abandoned script's sleep to be killed", || {
        (!process::is_running(sleep, None)).then_some(())
    });
}
