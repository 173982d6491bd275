//! Short external commands under a hard timeout ([`run_command`]): health `exec` checks
//! and the hooks; their output forwarded to warden's log, the last line kept.

use super::*;

/// Runs `argv` directly (no shell) with `env` added to warden's environment, in its own
/// process group, stdin null, output forwarded to the log. Exit 0 within `timeout` is
/// `Ok`; at the timeout the whole group is killed. Dropping the returned future (a
/// cancelled check) also kills the group.
///
/// Processes the command leaves behind in its group after exiting by itself are left
/// alone: a hook may start a daemon on purpose.
pub async fn run_command(
    argv: &[String],
    env: &[(String, String)],
    timeout: Duration,
) -> Result<(), HookError> {
    run_command_said(argv, env, timeout).await.map(|_| ())
}

/// [`run_command`], answering on success with the last non-blank line the command wrote
/// to stdout (printable, cut as a failure's last word is), if its stdout closed within a
/// moment of its exit: a check's way to tell its data position (SPEC §6b).
pub async fn run_command_said(
    argv: &[String],
    env: &[(String, String)],
    timeout: Duration,
) -> Result<Option<String>, HookError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(HookError::Empty);
    };
    let name = program_name(program);
    let mut command = Command::new(program);
    command
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // Lets tokio reap the child in the background if this future is dropped.
        .kill_on_drop(true);
    for var in SUPERVISOR_ENV {
        command.env_remove(var);
    }
    let mut child = command.spawn().map_err(|e| HookError::Spawn {
        program: program.clone(),
        reason: io_reason(&e),
    })?;
    // The child is not reaped until `wait` returns, so its pid (= its group id) cannot be
    // recycled while the guard is armed.
    let mut guard = child.id().map(GroupKillGuard);
    let stdout = child.stdout.take().map(|out| {
        tokio::spawn(forward_lines(
            out,
            Origin::Command(name.clone()),
            Stream::Stdout,
        ))
    });
    let said = child.stderr.take().map(|err| {
        tokio::spawn(forward_lines(
            err,
            Origin::Command(name.clone()),
            Stream::Stderr,
        ))
    });

    let result = tokio::time::timeout(timeout, child.wait()).await;
    match result {
        Ok(Ok(status)) => {
            // Reaped: the group id may be recycled from now on, so never signal it.
            if let Some(g) = guard.take() {
                g.disarm();
            }
            let exit = Exit::from(status);
            debug!(command = %name, %exit, "command finished");
            if exit.success() {
                // Its last line on stdout, if the pipe closes soon (as for stderr below).
                Ok(last_word(stdout).await)
            } else {
                // Its last word on stderr, if the pipe closes soon (a helper it left
                // running may hold it open: then without).
                let said = last_word(said).await;
                Err(HookError::Failed {
                    program: program.clone(),
                    exit,
                    said,
                })
            }
        }
        Ok(Err(e)) => {
            drop(guard); // kills the group
            Err(HookError::Wait {
                program: program.clone(),
                reason: io_reason(&e),
            })
        }
        Err(_) => {
            drop(guard); // kills the group
                         // Reap it so no zombie is left; SIGKILL makes this quick.
            let _ = tokio::time::timeout(KILL_WAIT, child.wait()).await;
            warn!(command = %name, timeout_ms = timeout.as_millis() as u64,
                "command timed out; killed its process group");
            Err(HookError::TimedOut {
                program: program.clone(),
                timeout,
            })
        }
    }
}

/// The last line a forwarded stream of an exited command held, if it closes within
/// [`SAID_WAIT`] (a helper the command left running may hold it open: then none).
pub(super) async fn last_word(
    stream: Option<tokio::task::JoinHandle<Option<String>>>,
) -> Option<String> {
    let h = stream?;
    tokio::time::timeout(SAID_WAIT, h)
        .await
        .ok()
        .and_then(Result::ok)
        .flatten()
}

/// SIGKILLs an unreaped child's process group when dropped, unless disarmed.
pub(super) struct GroupKillGuard(u32);

impl GroupKillGuard {
    fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for GroupKillGuard {
    fn drop(&mut self) {
        if self.0 > 1 {
            let _ = killpg(Pid::from_raw(self.0 as i32), Signal::SIGKILL);
        }
    }
}

/// The last path component of a program, for log fields.
pub(super) fn program_name(program: &str) -> String {
    program.rsplit('/').next().unwrap_or(program).to_string()
}

pub(crate) use warden_fencing::files::io_reason;

/// Whose output a forwarded line is.
pub(super) enum Origin {
    Service(String),
    Command(String),
}

pub(super) enum Stream {
    Stdout,
    Stderr,
}

/// Logs every line of `reader` until EOF: stdout at info, stderr at warn.
/// How long a failed command's stderr may take to close after it exited.
pub(super) const SAID_WAIT: Duration = Duration::from_millis(100);

/// A failed command's last stderr line is quoted up to this many characters.
pub(super) const SAID_MAX: usize = 200;

/// Forwards a child's output to the log, line by line; returns its last non-empty line
/// (shortened), for the error of a command that failed.
pub(super) async fn forward_lines<R: AsyncRead + Unpin>(
    reader: R,
    origin: Origin,
    stream: Stream,
) -> Option<String> {
    if let Origin::Command(name) = origin {
        return forward_command_output(reader, &name, stream).await;
    }
    let mut reader = BufReader::new(reader);
    let mut line = Vec::new();
    let mut last: Option<String> = None;
    loop {
        line.clear();
        match (&mut reader)
            .take(MAX_LOG_LINE)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) => return last,
            Ok(_) => {}
            Err(e) => {
                debug!(error = %e, "reading a child's output failed; no more is forwarded");
                return last;
            }
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        if !text.trim().is_empty() {
            last = Some(
                crate::record::printable(text)
                    .chars()
                    .take(SAID_MAX)
                    .collect(),
            );
        }
        match (&origin, &stream) {
            (Origin::Service(name), Stream::Stdout) => info!(service = %name, "{text}"),
            (Origin::Service(name), Stream::Stderr) => warn!(service = %name, "{text}"),
            (Origin::Command(name), Stream::Stdout) => info!(command = %name, "{text}"),
            (Origin::Command(name), Stream::Stderr) => warn!(command = %name, "{text}"),
        }
    }
}

/// A command (a hook, a health or standby check) logs at most this many lines of each of
/// its output streams per run (SPEC §9: a command that floods its output must neither
/// flood the log nor time out on a full pipe); the rest is read and dropped, and one line
/// says how much there was.
pub(super) const COMMAND_LOG_LINES: usize = 10;

/// A logged line of a command is cut here, with how many bytes more it had.
pub(super) const COMMAND_LINE_BYTES: usize = 512;

/// What a command's output is read in: the pipe is drained at this size per read.
pub(super) const COMMAND_READ_BYTES: usize = 64 * 1024;

/// The end of a command's stream kept for its last line (the error of a failed command,
/// a standby check's position).
pub(super) const COMMAND_TAIL_BYTES: usize = 1024;

/// Forwards a command's output as [`forward_lines`] does, within bounds: at most
/// [`COMMAND_LOG_LINES`] lines of at most [`COMMAND_LINE_BYTES`] each, then one line
/// counting what was not logged. The pipe is always read to its end, so a command never
/// blocks on a full pipe; the memory used is bounded whatever it prints.
pub(super) async fn forward_command_output<R: AsyncRead + Unpin>(
    reader: R,
    name: &str,
    stream: Stream,
) -> Option<String> {
    let log = |text: &str| match stream {
        Stream::Stdout => info!(command = %name, "{text}"),
        Stream::Stderr => warn!(command = %name, "{text}"),
    };
    let mut reader = BufReader::with_capacity(COMMAND_READ_BYTES, reader);
    let mut tail = Vec::new();
    let mut line = Vec::new();
    let mut logged = 0;
    let mut unlogged: u64 = 0;
    let failed = |e: io::Error| {
        debug!(command = %name, error = %e, "reading a command's output failed; no more is read");
    };
    loop {
        if logged < COMMAND_LOG_LINES {
            line.clear();
            match (&mut reader)
                .take(COMMAND_LINE_BYTES as u64)
                .read_until(b'\n', &mut line)
                .await
            {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    failed(e);
                    break;
                }
            }
            keep_tail(&mut tail, &line);
            let more = if line.last() == Some(&b'\n') {
                0
            } else {
                match skip_line(&mut reader, &mut tail).await {
                    Ok(n) => n,
                    Err(e) => {
                        failed(e);
                        0
                    }
                }
            };
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\n', '\r']);
            if text.trim().is_empty() && more == 0 {
                continue;
            }
            logged += 1;
            if more > 0 {
                log(&format!("{text} ({more} bytes more)"));
            } else {
                log(text);
            }
        } else {
            let chunk = match reader.fill_buf().await {
                Ok([]) => break,
                Ok(chunk) => chunk,
                Err(e) => {
                    failed(e);
                    break;
                }
            };
            let n = chunk.len();
            keep_tail(&mut tail, chunk);
            reader.consume(n);
            unlogged += n as u64;
        }
    }
    if unlogged > 0 {
        log(&format!(
            "(its output goes on: {unlogged} bytes more, not logged)"
        ));
    }
    last_line(&tail)
}

/// Reads and drops the rest of the current line (through its newline); returns how many
/// bytes it had, the newline not counted.
pub(super) async fn skip_line<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    tail: &mut Vec<u8>,
) -> io::Result<u64> {
    let mut skipped = 0;
    loop {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(skipped);
        }
        match chunk.iter().position(|&b| b == b'\n') {
            Some(end) => {
                keep_tail(tail, &chunk[..=end]);
                reader.consume(end + 1);
                return Ok(skipped + end as u64);
            }
            None => {
                let n = chunk.len();
                keep_tail(tail, chunk);
                reader.consume(n);
                skipped += n as u64;
            }
        }
    }
}

/// Keeps the last [`COMMAND_TAIL_BYTES`] of a stream in `tail`.
pub(super) fn keep_tail(tail: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.len() >= COMMAND_TAIL_BYTES {
        tail.clear();
        tail.extend_from_slice(&bytes[bytes.len() - COMMAND_TAIL_BYTES..]);
    } else {
        tail.extend_from_slice(bytes);
        if tail.len() > COMMAND_TAIL_BYTES {
            tail.drain(..tail.len() - COMMAND_TAIL_BYTES);
        }
    }
}

/// The last non-empty line of a stream's tail, made printable and shortened.
pub(super) fn last_line(tail: &[u8]) -> Option<String> {
    String::from_utf8_lossy(tail)
        .split('\n')
        .map(|l| l.trim_end_matches('\r'))
        .rfind(|l| !l.trim().is_empty())
        .map(|l| crate::record::printable(l).chars().take(SAID_MAX).collect())
}
