//! `kind = "script"`: run a program that fences the target.
//!
//! `protocol = "env"`: the program gets the target in `WARDEN_TARGET_*` variables, stdin
//! closed; exit 0 = fenced. `protocol = "fence-agent"`: a ClusterLabs fence agent, driven
//! the way Pacemaker drives it: no arguments (an agent given any arguments ignores stdin
//! and runs its default action, which is reboot), its options as `key=value` lines on
//! stdin with `action=off` and `plug=<node_id>`. Either way the program runs in its own
//! process group, which is killed at the timeout and once the program exits, so nothing
//! it started outlives the attempt.

use crate::outcome::MethodResult;
use crate::process::{self, POLL_INTERVAL};
use crate::{FenceContext, ScriptFence, ScriptProtocol, Target};
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::time::Instant;

/// How many of the last output lines a failure quotes: enough to show an agent's error,
/// short enough for one log line.
const TAIL_LINES: usize = 5;
/// A quoted line is cut here; the log has more of it (up to [`LINE_BYTES`]).
const TAIL_LINE_CHARS: usize = 300;
/// After SIGKILL to the group: how long to wait for its processes to vanish and for the
/// program to be reaped. SIGKILL takes effect at once unless a process is stuck in the
/// kernel (uninterruptible sleep on a dead NFS server), which no wait would cure.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(1);
/// How long to keep reading output after the group is gone: a process that escaped the
/// group (setsid) may hold the pipe open forever.
const OUTPUT_DRAIN: Duration = Duration::from_millis(500);

/// Option keys whose values are masked in a dry-run plan.
const SECRET_WORDS: &[&str] = &["pass", "secret", "token", "key"];

/// The environment given to the program: the target and this node. Unknown values are
/// empty strings, so a script can test `[ -n "$WARDEN_TARGET_PORT" ]` under `set -u`.
fn environment(ctx: &FenceContext, target: &Target) -> Vec<(&'static str, String)> {
    fn s<T: ToString>(v: &Option<T>) -> String {
        v.as_ref().map(T::to_string).unwrap_or_default()
    }
    vec![
        ("WARDEN_TARGET_NODE_ID", s(&target.node_id)),
        ("WARDEN_TARGET_HOST", s(&target.host)),
        ("WARDEN_TARGET_PORT", s(&target.port)),
        ("WARDEN_TARGET_PID", s(&target.pid)),
        ("WARDEN_TARGET_START_TIME", s(&target.start_time)),
        ("WARDEN_TARGET_SERVICE_PID", s(&target.service_pid)),
        ("WARDEN_TARGET_SERVICE_PGID", s(&target.service_pgid)),
        (
            "WARDEN_TARGET_SERVICE_START_TIME",
            s(&target.service_start_time),
        ),
        ("WARDEN_TARGET_BOOT_ID", s(&target.boot_id)),
        ("WARDEN_TARGET_EPOCH", s(&target.epoch)),
        ("WARDEN_CLUSTER", ctx.cluster.clone()),
        ("WARDEN_NODE_ID", ctx.node_id.clone()),
    ]
}

/// The `key=value` lines a fence agent reads on stdin, or why there are none.
fn agent_input(m: &ScriptFence, target: &Target) -> Result<Vec<(String, String)>, MethodResult> {
    let mut lines = Vec::new();
    for (key, value) in &m.options {
        let bad = |s: &str| s.contains(['\n', '\r']);
        if key.is_empty() || key.contains('=') || bad(key) || bad(value) {
            return Err(MethodResult::failed(format!(
                "option {key:?} cannot be passed to a fence agent: keys must be non-empty without \
                 '=', and neither keys nor values may contain line breaks; fix [[fence]] options"
            )));
        }
        // Ours comes last and wins: agents keep the last value of a key, and this method
        // only ever powers a target off.
        if key != "action" {
            lines.push((key.clone(), value.clone()));
        }
    }
    lines.push(("action".to_string(), "off".to_string()));
    if !m.options.contains_key("plug") {
        match &target.node_id {
            Some(id) => lines.push(("plug".to_string(), id.clone())),
            None => {
                return Err(MethodResult::not_applicable(
                    "the target's node id is unknown (unreadable breadcrumb) and options set no \
                     plug, so the agent would not know what to power off",
                ))
            }
        }
    }
    Ok(lines)
}

/// What the program will be given on stdin, if anything, or why it must not run.
fn stdin_text(m: &ScriptFence, target: &Target) -> Result<Option<String>, MethodResult> {
    match m.protocol {
        ScriptProtocol::Env => Ok(None),
        ScriptProtocol::FenceAgent => {
            if m.command.len() > 1 {
                return Err(MethodResult::failed(format!(
                    "protocol \"fence-agent\" takes the agent's path alone, but command has \
                     arguments {:?}: an agent given arguments ignores stdin and reboots by \
                     default; move them into options",
                    &m.command[1..]
                )));
            }
            let lines = agent_input(m, target)?;
            Ok(Some(
                lines.iter().map(|(k, v)| format!("{k}={v}\n")).collect(),
            ))
        }
    }
}

/// How the wait for the program ended.
enum End {
    /// It exited or was killed (not yet reaped).
    Ended(WaitStatus),
    /// The method's timeout came first.
    TimedOut,
    /// The wait itself failed (someone else reaped the program).
    WaitFailed(nix::errno::Errno),
}

/// SIGKILLs the program's process group if the attempt is dropped half-way (the chain's
/// hard bound, or a caller giving up), so that no fence program outlives its attempt.
/// Disarmed once the program is reaped: after that its pgid may name someone else.
struct GroupGuard {
    pgid: u32,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = killpg(Pid::from_raw(self.pgid as i32), Signal::SIGKILL);
        }
    }
}

/// Where the program's output goes: the log, under the attempt's method and target, and
/// the last few lines (stdout and stderr interleaved as they arrived) for a failure.
#[derive(Clone)]
struct Output {
    label: String,
    target: String,
    tail: Arc<Mutex<VecDeque<String>>>,
}

/// A fence program's stream logs at most this many lines per attempt; the rest is read
/// (a program never blocks on a full pipe) and counted in one line (SPEC §9).
const LOG_LINES: usize = 50;
/// A logged line is cut here, with how many bytes more it had.
const LINE_BYTES: usize = 512;

/// Logs the lines of one output stream (within [`LOG_LINES`] and [`LINE_BYTES`]) and
/// keeps the last few; memory stays bounded whatever the program prints.
async fn pump<R: AsyncRead + Unpin>(stream: R, name: &'static str, out: Output) {
    let Output {
        label,
        target,
        tail,
    } = out;
    let mut reader = BufReader::with_capacity(64 * 1024, stream);
    let mut buf = Vec::new();
    let mut logged = 0;
    let mut unlogged: u64 = 0;
    loop {
        buf.clear();
        match (&mut reader)
            .take(LINE_BYTES as u64)
            .read_until(b'\n', &mut buf)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let more = if buf.last() == Some(&b'\n') {
            0
        } else {
            skip_line(&mut reader).await
        };
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end();
        if line.is_empty() && more == 0 {
            continue;
        }
        if logged < LOG_LINES {
            logged += 1;
            let cut = if more > 0 {
                format!(" ({more} bytes more)")
            } else {
                String::new()
            };
            tracing::info!(
                method = label.as_str(),
                target = target.as_str(),
                stream = name,
                "{line}{cut}"
            );
        } else {
            unlogged += buf.len() as u64 + more;
        }
        if let Ok(mut tail) = tail.lock() {
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line.chars().take(TAIL_LINE_CHARS).collect());
        }
    }
    if unlogged > 0 {
        tracing::info!(
            method = label.as_str(),
            target = target.as_str(),
            stream = name,
            "(its output went on: {unlogged} bytes more, not logged)"
        );
    }
}

/// Reads and drops the rest of the current line (through its newline); returns how many
/// bytes it had. A read error ends it as the end of the stream does.
async fn skip_line<R: AsyncRead + Unpin>(reader: &mut BufReader<R>) -> u64 {
    let mut skipped = 0;
    loop {
        let chunk = match reader.fill_buf().await {
            Ok([]) | Err(_) => return skipped,
            Ok(chunk) => chunk,
        };
        match chunk.iter().position(|&b| b == b'\n') {
            Some(end) => {
                reader.consume(end + 1);
                return skipped + end as u64;
            }
            None => {
                let n = chunk.len();
                reader.consume(n);
                skipped += n as u64;
            }
        }
    }
}

/// The live members of group `pgid`, scanned on tokio's blocking pool so that a slow
/// `/proc` never holds up a runtime worker. A scan that cannot finish reports the group
/// leader as still there, which keeps the cleanup waiting and the report honest.
async fn group_members(pgid: u32) -> Vec<u32> {
    tokio::task::spawn_blocking(move || process::group_members(pgid))
        .await
        .unwrap_or_else(|_| vec![pgid])
}

pub(crate) async fn fence(
    m: &ScriptFence,
    ctx: &FenceContext,
    target: &Target,
    label: &str,
    deadline: Instant,
) -> MethodResult {
    let Some(program) = m.command.first() else {
        return MethodResult::failed(
            "command is empty; name the program to run in [[fence]] command",
        );
    };
    let stdin = match stdin_text(m, target) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let mut cmd = Command::new(program);
    cmd.args(&m.command[1..])
        .envs(environment(ctx, target))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so that the program and everything it starts can be killed as one.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return MethodResult::failed(format!(
                "cannot run {program}: {e}; check that [[fence]] command names an executable file"
            ))
        }
    };
    let Some(pgid) = child.id() else {
        // tokio gives no id only after the child was reaped, which nothing here did yet.
        return MethodResult::failed(format!("{program} exited before warden could track it"));
    };
    let mut guard = GroupGuard { pgid, armed: true };

    let output = Output {
        label: label.to_string(),
        target: target.label().to_string(),
        tail: Arc::default(),
    };
    let mut readers = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        readers.push(tokio::spawn(pump(stdout, "stdout", output.clone())));
    }
    if let Some(stderr) = child.stderr.take() {
        readers.push(tokio::spawn(pump(stderr, "stderr", output.clone())));
    }
    let writer = match (child.stdin.take(), stdin) {
        (Some(mut pipe), Some(text)) => Some(tokio::spawn(async move {
            // An agent that exits without reading its input closes the pipe: its exit
            // status says what went wrong, not this write.
            let _ = pipe.write_all(text.as_bytes()).await;
            // Dropping the pipe closes stdin: the agent reads until end of file.
        })),
        _ => None,
    };

    // Wait for the exit without reaping (WNOWAIT): until it is reaped, the program's pid,
    // and so its process group id, cannot be handed to anyone else, which makes the
    // killpg below safe.
    let end = loop {
        match waitid(
            Id::Pid(Pid::from_raw(pgid as i32)),
            WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG,
        ) {
            Ok(WaitStatus::StillAlive) => {}
            Ok(status) => break End::Ended(status),
            Err(e) => break End::WaitFailed(e),
        }
        if Instant::now() >= deadline {
            break End::TimedOut;
        }
        tokio::time::sleep(POLL_INTERVAL.min(deadline.saturating_duration_since(Instant::now())))
            .await;
    };

    // Whatever the program left behind goes with it; on timeout, the program too.
    let _ = killpg(Pid::from_raw(pgid as i32), Signal::SIGKILL);
    let cleanup_deadline = process::deadline_after(Instant::now(), CLEANUP_TIMEOUT);
    let mut leftovers = group_members(pgid).await;
    while !leftovers.is_empty() && Instant::now() < cleanup_deadline {
        tokio::time::sleep(POLL_INTERVAL).await;
        leftovers = group_members(pgid).await;
    }
    if tokio::time::timeout(CLEANUP_TIMEOUT, child.wait())
        .await
        .is_ok()
    {
        guard.armed = false;
    }
    if let Some(w) = writer {
        w.abort();
    }
    for r in readers {
        let abort = r.abort_handle();
        if tokio::time::timeout(OUTPUT_DRAIN, r).await.is_err() {
            abort.abort();
        }
    }
    let last_output = match output.tail.lock() {
        Ok(t) if !t.is_empty() => format!(
            "; last output: {}",
            t.iter().cloned().collect::<Vec<_>>().join(" | ")
        ),
        _ => String::new(),
    };
    let still = if leftovers.is_empty() {
        String::new()
    } else {
        format!(
            "; pids {} of its process group {pgid} survived SIGKILL (stuck in the kernel?)",
            process::join_pids(&leftovers)
        )
    };

    match end {
        End::Ended(WaitStatus::Exited(_, 0)) => {
            MethodResult::fenced(format!("{program} exited 0{still}"))
        }
        End::Ended(WaitStatus::Exited(_, code)) => MethodResult::failed(format!(
            "{program} exited with status {code}{last_output}{still}"
        )),
        End::Ended(WaitStatus::Signaled(_, sig, _)) => MethodResult::failed(format!(
            "{program} was killed by {}{last_output}{still}",
            sig.as_str()
        )),
        End::TimedOut => MethodResult::failed(format!(
            "{program} timed out after {}; killed{last_output}{still}",
            humantime::format_duration(m.timeout)
        )),
        End::Ended(other) => MethodResult::failed(format!(
            "{program} ended unexpectedly: {other:?}{last_output}{still}"
        )),
        End::WaitFailed(e) => MethodResult::failed(format!(
            "cannot wait for {program}: {e}{last_output}{still}"
        )),
    }
}

pub(crate) fn plan(m: &ScriptFence, ctx: &FenceContext, target: &Target) -> String {
    let Some(program) = m.command.first() else {
        return "would fail: command is empty".to_string();
    };
    let timeout = humantime::format_duration(m.timeout);
    match stdin_text(m, target) {
        Err(r) => format!("would not run: {}", r.outcome),
        Ok(None) => {
            let env: Vec<String> = environment(ctx, target)
                .into_iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!(
                "would run {:?} with {} (exit 0 = fenced; killed after {timeout})",
                m.command,
                env.join(" ")
            )
        }
        Ok(Some(_)) => {
            let input = agent_input(m, target).unwrap_or_default();
            let shown: Vec<String> = input
                .iter()
                .map(|(k, v)| {
                    let secret = SECRET_WORDS
                        .iter()
                        .any(|w| k.to_ascii_lowercase().contains(w));
                    format!("{k}={}", if secret { "***" } else { v })
                })
                .collect();
            format!(
                "would run fence agent {program} with on stdin: {} (exit 0 = fenced; killed after {timeout})",
                shown.join(", ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(options: &[(&str, &str)]) -> ScriptFence {
        ScriptFence {
            command: vec!["/usr/sbin/fence_dummy".into()],
            protocol: ScriptProtocol::FenceAgent,
            options: options
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            timeout: Duration::from_secs(5),
            nodes: None,
        }
    }

    fn rm1() -> Target {
        Target {
            node_id: Some("rm1".into()),
            ..Target::default()
        }
    }

    #[test]
    fn agent_input_ends_with_action_off_and_plug() {
        let m = agent(&[("ipaddr", "10.0.0.9"), ("action", "reboot")]);
        let text = stdin_text(&m, &rm1()).unwrap().unwrap();
        assert_eq!(text, "ipaddr=10.0.0.9\naction=off\nplug=rm1\n");
    }

    #[test]
    fn configured_plug_is_kept() {
        let m = agent(&[("plug", "4")]);
        let text = stdin_text(&m, &rm1()).unwrap().unwrap();
        assert_eq!(text, "plug=4\naction=off\n");
    }

    #[test]
    fn line_breaks_in_options_are_refused() {
        let m = agent(&[("ipaddr", "10.0.0.9\naction=on")]);
        let err = stdin_text(&m, &rm1()).unwrap_err();
        assert!(matches!(err.outcome, crate::Outcome::Failed(_)), "{err:?}");
    }

    #[test]
    fn agent_without_plug_for_unknown_target_does_not_apply() {
        let err = stdin_text(&agent(&[]), &Target::default()).unwrap_err();
        assert!(
            matches!(err.outcome, crate::Outcome::NotApplicable(_)),
            "{err:?}"
        );
    }

    #[test]
    fn agent_with_arguments_is_refused() {
        let mut m = agent(&[]);
        m.command.push("-o".into());
        let err = stdin_text(&m, &rm1()).unwrap_err();
        assert!(
            matches!(err.outcome, crate::Outcome::Failed(ref r) if r.contains("reboots")),
            "{err:?}"
        );
    }

    #[test]
    fn plan_masks_secrets() {
        let m = agent(&[("password", "hunter2"), ("login", "admin")]);
        let plan = plan(&m, &FenceContext::default(), &rm1());
        assert!(plan.contains("password=***"), "{plan}");
        assert!(plan.contains("login=admin"), "{plan}");
        assert!(!plan.contains("hunter2"), "{plan}");
    }
}
