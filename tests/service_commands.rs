//! `run_command` (hooks, health `exec` checks) against real processes: exit status,
//! environment, and the hard timeout that kills the whole process group.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use warden::service::{run_command, Exit, HookError};

const DEADLINE: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(10);

fn sh(script: &str, arg: &Path) -> Vec<String> {
    vec![
        "/bin/sh".into(),
        "-c".into(),
        script.into(),
        arg.display().to_string(),
    ]
}

fn alive(pid: u32) -> bool {
    warden_fencing::process::is_running(pid, None)
}

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

fn pid_in(path: &Path) -> Option<u32> {
    fs::read_to_string(path)
        .ok()?
        .strip_suffix('\n')?
        .parse()
        .ok()
}

/// Starts `sleep 300` in the background, writes its pid to `$0`, and waits.
const GRANDCHILD: &str = r#"sleep 300 & echo $! > "$0.tmp" && mv "$0.tmp" "$0"; wait"#;

#[tokio::test]
async fn exit_status_decides_success() {
    let t = Duration::from_secs(5);
    assert_eq!(run_command(&["true".into()], &[], t).await, Ok(()));
    assert_eq!(
        run_command(&["false".into()], &[], t).await,
        Err(HookError::Failed {
            program: "false".into(),
            exit: Exit::Code(1),
            said: None,
        })
    );
    assert_eq!(run_command(&[], &[], t).await, Err(HookError::Empty));
    let err = run_command(&["/nonexistent/hook".into()], &[], t)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot run /nonexistent/hook: no such file or directory (check the command in the config)"
    );
}

#[tokio::test]
async fn the_command_gets_the_given_environment() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("env");
    let env = [("WARDEN_ROLE".to_string(), "standby".to_string())];
    run_command(&sh(r#"echo "$WARDEN_ROLE" > "$0""#, &out), &env, DEADLINE)
        .await
        .unwrap();
    assert_eq!(fs::read_to_string(&out).unwrap(), "standby\n");
}

#[tokio::test]
async fn a_command_past_its_timeout_is_killed_with_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("grandchild");
    // Long enough for a loaded machine to start the shell and its child first.
    let timeout = Duration::from_secs(2);
    let started = Instant::now();
    let result = run_command(&sh(GRANDCHILD, &pidfile), &[], timeout).await;
    let elapsed = started.elapsed();
    assert_eq!(
        result,
        Err(HookError::TimedOut {
            program: "/bin/sh".into(),
            timeout
        })
    );
    assert!(
        elapsed >= timeout && elapsed < timeout + Duration::from_secs(5),
        "{elapsed:?}"
    );
    let grandchild = pid_in(&pidfile).expect("the command never started its child");
    wait_for("the command's child to be killed", || {
        (!alive(grandchild)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn dropping_a_running_command_kills_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("grandchild");
    let argv = sh(GRANDCHILD, &pidfile);
    let task = tokio::spawn(async move { run_command(&argv, &[], Duration::from_secs(300)).await });
    let grandchild = wait_for("the command's child", || pid_in(&pidfile)).await;
    task.abort();
    wait_for("the command's child to be killed", || {
        (!alive(grandchild)).then_some(())
    })
    .await;
}
