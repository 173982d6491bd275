//! `kind = "ssh"`: fence the old incarnation on its own host, over ssh (SPEC §5).
//!
//! One attempt: connect to `target.host:port` (bounded by the method's timeout), check the
//! host key against `known_hosts` (unknown, changed or revoked key = failed, naming the
//! host, the fingerprint seen and the file; warden never connects anyway), authenticate
//! with `identity_file` alone, run the remote command, and read its exit status.
//!
//! The remote command:
//! - by default `warden fence-local` followed by [`fence_local_args`]: the target's
//!   recorded boot id, machine id and pid namespace, warden pid and start time, service
//!   pid, group, start time and cgroup, epoch, port, and a `--timeout` that ends before
//!   this attempt's deadline. `fence-local`
//!   bounds itself by that timeout (it reads no config and no environment: sshd passes
//!   neither), so it needs no tool on the remote host besides warden. Exit 0 counts as
//!   fenced only together with the verdict line [`FENCE_LOCAL_FENCED`], so that a warden
//!   without `fence-local` (or a server that closes the channel without an exit status,
//!   which libssh2 reports as 0) never passes for a fence.
//! - with `command = "..."`: that string, run by the remote user's login shell, followed
//!   by the same arguments (so `command = "sudo -n /opt/warden/bin/warden fence-local"`
//!   is a drop-in; a script of your own can read or ignore them). It runs under
//!   `timeout -s KILL <bound> sh -c '...'` (coreutils or busybox on the remote host), so
//!   that it and everything it starts are killed there when the bound passes: a timed-out
//!   ssh channel leaves a remote process running otherwise. Exit 0 = fenced.
//!
//! The remote bound is computed just before the command starts: the time left less
//! `REMOTE_MARGIN`, so the remote side ends (and says why) before this side gives up. The
//! remote user must be allowed to signal the old warden and service: root, their user,
//! or `command = "sudo -n warden fence-local"`.
//!
//! libssh2 blocks, so the session runs on tokio's blocking pool. At the method's deadline
//! the attempt is abandoned and counts as failed: its TCP connection is shut down so the
//! blocking call returns at once, and every libssh2 call is bounded by the time left
//! (`Session::set_timeout`) in any case. Dropping the attempt's future abandons it the
//! same way, so a fence the daemon gives up on cannot act after a later election: the
//! blocking half starts nothing more, and the remote command, which runs on a terminal,
//! gets SIGHUP when sshd sees the connection go.

use crate::outcome::MethodResult;
use crate::{FenceContext, SshFence, Target};
use ssh2::{
    ExtendedData, HashType, HostKeyType, KnownHostFileKind, MethodType, PtyModeOpcode, PtyModes,
    Session,
};
use std::collections::VecDeque;
use std::io::Read;
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tokio::time::Instant;

/// The subcommand of warden that the default remote command runs.
pub const FENCE_LOCAL_SUBCOMMAND: &str = "fence-local";

/// The default remote command, before its arguments. Found through the remote user's
/// PATH; set `command` to an absolute path when warden lives elsewhere.
pub const DEFAULT_REMOTE_COMMAND: &str = "warden fence-local";

/// What `warden fence-local` prints at the start of its last line when, and only when, it
/// verified that nothing of the incarnation remains (and then exits 0).
pub const FENCE_LOCAL_FENCED: &str = "fence-local: fenced";

/// The longest `--timeout` that `warden fence-local` accepts. Waiting longer for killed
/// processes to go helps nothing (SIGKILL acts at once; what survives it is stuck in the
/// kernel), and a bound keeps deadline arithmetic far from overflow. [`fence_local_args`]
/// never passes more.
pub const FENCE_LOCAL_MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// How much earlier than this attempt's deadline the remote command must end: time for
/// its verdict to travel back and be read. Less would let the local side give up on a
/// remote command that is about to answer; the remote bound never drops below half the
/// time left, so a short timeout still leaves the remote side time to act.
const REMOTE_MARGIN: Duration = Duration::from_secs(1);

/// How many of the last output lines a failure quotes: enough to show why, short enough
/// for one log line.
const TAIL_LINES: usize = 5;
/// A quoted line is cut here; the log has it whole (up to [`MAX_LINE_BYTES`]).
const TAIL_LINE_CHARS: usize = 300;
/// A remote "line" without a newline is cut into pieces of this size, so that a command
/// printing binary junk cannot grow memory without end.
const MAX_LINE_BYTES: usize = 4096;
/// Lines of remote output logged per attempt; `fence-local` prints a handful. Past this
/// only the tail is kept.
const MAX_LOGGED_LINES: usize = 50;
/// A logged line is cut here, with how many bytes more it had (SPEC §9: a remote command
/// that floods does not flood the log).
const LOGGED_LINE_BYTES: usize = 512;

/// The phase of a session in which the remote command runs.
const RUNNING: &str = "running the remote command";

/// libssh2's LIBSSH2_ERROR_TIMEOUT: a blocking call ran past `Session::set_timeout`.
const LIBSSH2_ERROR_TIMEOUT: i32 = -9;

/// Exit statuses of a POSIX shell for a command it could not find or not execute.
const EXIT_NOT_FOUND: i32 = 127;
const EXIT_NOT_EXECUTABLE: i32 = 126;
/// `warden fence-local`: 1 = not verified fenced, 2 = it refused its arguments.
const FENCE_LOCAL_NOT_FENCED: i32 = 1;
const FENCE_LOCAL_BAD_ARGUMENTS: i32 = 2;

/// The arguments of `warden fence-local` (after the subcommand) that describe `target`,
/// each flag followed by its value as a separate item; the fields the record lacks are
/// left out. `timeout` is how long fence-local may wait for the processes to go (it
/// bounds its own run by it); it is written in whole milliseconds (`12500ms`), at most
/// [`FENCE_LOCAL_MAX_TIMEOUT`].
///
/// The root crate's `FenceLocalArgs` parses exactly this list (its tests check it), so
/// both ends of the ssh method change together.
pub fn fence_local_args(target: &Target, timeout: Duration) -> Vec<String> {
    let mut args = Vec::new();
    let mut push = |flag: &str, value: Option<String>| {
        if let Some(v) = value {
            args.push(flag.to_string());
            args.push(v);
        }
    };
    push("--boot-id", target.boot_id.clone());
    push("--machine-id", target.machine_id.clone());
    push("--pid-ns", target.pid_ns.map(|v| v.to_string()));
    push("--pid", target.pid.map(|v| v.to_string()));
    push("--start-time", target.start_time.map(|v| v.to_string()));
    push("--service-pid", target.service_pid.map(|v| v.to_string()));
    push("--service-pgid", target.service_pgid.map(|v| v.to_string()));
    push(
        "--service-start-time",
        target.service_start_time.map(|v| v.to_string()),
    );
    push("--service-cgroup", target.service_cgroup.clone());
    // Only with a cgroup: an older fence-local on the remote host knows no --cgroup-ns,
    // and only a cgroup record needs it.
    push(
        "--cgroup-ns",
        target
            .cgroup_ns
            .filter(|_| target.service_cgroup.is_some())
            .map(|v| v.to_string()),
    );
    push("--epoch", target.epoch.map(|v| v.to_string()));
    push("--port", target.port.map(|v| v.to_string()));
    let timeout = timeout.min(FENCE_LOCAL_MAX_TIMEOUT);
    push("--timeout", Some(format!("{}ms", timeout.as_millis())));
    args
}

/// How long the remote command may run when `left` remains before the deadline.
/// Whole milliseconds, the unit it travels in.
fn remote_bound(left: Duration) -> Duration {
    let bound = left.saturating_sub(REMOTE_MARGIN).max(left / 2);
    Duration::from_millis(u64::try_from(bound.as_millis()).unwrap_or(u64::MAX))
}

/// `bound` as seconds for `timeout(1)`, which takes fractions: `2.500`.
fn seconds(bound: Duration) -> String {
    format!("{}.{:03}", bound.as_secs(), bound.subsec_millis())
}

/// The line the remote shell runs.
fn remote_command(m: &SshFence, target: &Target, bound: Duration) -> String {
    let args: Vec<String> = fence_local_args(target, bound)
        .iter()
        .map(|a| shell_quote(a))
        .collect();
    match &m.command {
        None => format!("{DEFAULT_REMOTE_COMMAND} {}", args.join(" ")),
        Some(command) => {
            let inner = format!("{} {}", command.trim(), args.join(" "));
            format!(
                "timeout -s KILL {} sh -c {}",
                seconds(bound),
                shell_quote(&inner)
            )
        }
    }
}

/// Quotes `s` for a POSIX shell, leaving plain words (the usual flags, numbers and boot
/// ids) as they are for a readable log.
fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@%+,".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Standard base64 (RFC 4648), with or without `=` padding: OpenSSH prints fingerprints
/// unpadded and stores keys padded.
fn base64(bytes: &[u8], pad: bool) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else if pad {
                out.push('=');
            }
        }
    }
    out
}

/// The name a host has in known_hosts: `host` for port 22, `[host]:port` otherwise, as
/// OpenSSH writes and looks it up. Host names are compared in lower case, as OpenSSH does.
fn known_hosts_name(host: &str, port: u16) -> String {
    let host = host.to_ascii_lowercase();
    if port == 22 {
        host
    } else {
        format!("[{host}]:{port}")
    }
}

fn key_type_name(kind: HostKeyType) -> &'static str {
    match kind {
        HostKeyType::Rsa => "ssh-rsa",
        HostKeyType::Dss => "ssh-dss",
        HostKeyType::Ecdsa256 => "ecdsa-sha2-nistp256",
        HostKeyType::Ecdsa384 => "ecdsa-sha2-nistp384",
        HostKeyType::Ecdsa521 => "ecdsa-sha2-nistp521",
        HostKeyType::Ed25519 => "ssh-ed25519",
        HostKeyType::Unknown => "unknown",
    }
}

/// The host key algorithms that verify a known_hosts key of type `key_type`.
fn host_key_algorithms(key_type: &str) -> &'static [&'static str] {
    match key_type {
        "ssh-ed25519" => &["ssh-ed25519"],
        "ecdsa-sha2-nistp256" => &["ecdsa-sha2-nistp256"],
        "ecdsa-sha2-nistp384" => &["ecdsa-sha2-nistp384"],
        "ecdsa-sha2-nistp521" => &["ecdsa-sha2-nistp521"],
        "ssh-rsa" => &["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"],
        _ => &[],
    }
}

/// A known_hosts file as the host key check needs it.
#[derive(Debug)]
struct KnownHostsFile {
    path: PathBuf,
    /// The lines libssh2 is given (markers and comments left out), with their numbers.
    entries: Vec<(usize, String)>,
    /// The base64 keys of `@revoked` lines: refused for every host.
    revoked: Vec<String>,
    /// The key types of the plain-text (unhashed) entries for the host, so that the
    /// handshake asks for a key the file can verify, as OpenSSH does.
    key_types: Vec<String>,
}

impl KnownHostsFile {
    /// A known_hosts file of a few hundred thousand hosts is still below this.
    const KNOWN_HOSTS_MAX_BYTES: u64 = 64 * 1024 * 1024;

    fn read(path: &Path, name: &str) -> Result<KnownHostsFile, String> {
        // Only a regular file, and a bounded one: a fifo named here would hang the fence.
        let text = crate::files::read_regular_file(path, Self::KNOWN_HOSTS_MAX_BYTES)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .map_err(|e| {
                format!(
                    "cannot read known_hosts {}: {e}; create it with the target host's public key \
                 (a line `{name} <type> <key>`, fingerprint checked out of band)",
                    path.display()
                )
            })?;
        let mut file = KnownHostsFile {
            path: path.to_path_buf(),
            entries: Vec::new(),
            revoked: Vec::new(),
            key_types: Vec::new(),
        };
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            if let Some(marker) = fields[0].strip_prefix('@') {
                // `@revoked HOSTS TYPE KEY`; `@cert-authority` lines need certificate
                // support that libssh2 lacks, so they grant nothing here.
                if marker == "revoked" {
                    if let Some(key) = fields.get(3) {
                        file.revoked.push(key.to_string());
                    }
                }
                continue;
            }
            let names_this_host = fields[0].split(',').any(|n| n.eq_ignore_ascii_case(name));
            if names_this_host {
                if let Some(key_type) = fields.get(1) {
                    file.key_types.push(key_type.to_string());
                }
            }
            file.entries.push((i + 1, line.to_string()));
        }
        Ok(file)
    }
}

/// Checks the server's host key against the known_hosts file. `Err` says why the session
/// must not go on, naming the host, the fingerprint seen and the file.
fn check_host_key(
    session: &Session,
    host: &str,
    port: u16,
    file: &KnownHostsFile,
) -> Result<(), String> {
    let (key, kind) = session
        .host_key()
        .ok_or_else(|| format!("{host}:{port} sent no host key"))?;
    let fingerprint = session
        .host_key_hash(HashType::Sha256)
        .map(|h| format!("SHA256:{}", base64(h, false)))
        .unwrap_or_else(|| "SHA256:<unavailable>".to_string());
    let seen = format!("{} key {fingerprint}", key_type_name(kind));
    let path = file.path.display();
    let name = known_hosts_name(host, port);

    if file.revoked.contains(&base64(key, true)) {
        return Err(format!(
            "host key of {host}:{port} is marked @revoked in {path} (the server offered {seen}); \
             refusing to connect"
        ));
    }
    let mut known = session
        .known_hosts()
        .map_err(|e| format!("cannot set up the known hosts check: {e}"))?;
    let mut unreadable = Vec::new();
    for (n, line) in &file.entries {
        if known.read_str(line, KnownHostFileKind::OpenSSH).is_err() {
            unreadable.push(n.to_string());
        }
    }
    let skipped = if unreadable.is_empty() {
        String::new()
    } else {
        format!(
            " (lines {} of it could not be parsed and were skipped)",
            unreadable.join(", ")
        )
    };
    // Only the exact name: `check_port` would also accept a port-less entry for a
    // non-22 port, which OpenSSH does not.
    match known.check(&name, key) {
        ssh2::CheckResult::Match => Ok(()),
        ssh2::CheckResult::Mismatch => Err(format!(
            "host key of {host}:{port} does not match {path}{skipped}: the server offered {seen}, \
             the file has another key for `{name}`. The host may have been reinstalled, or this \
             is not the host you think: verify the fingerprint out of band, then replace its \
             line in {path}. warden does not connect to a host with a changed key"
        )),
        ssh2::CheckResult::NotFound => Err(format!(
            "host key of {host}:{port} is unknown: {path} has no entry for `{name}`{skipped}; \
             the server offered {seen}. Verify that fingerprint out of band, then add the line \
             `{name} {} {}` to {path}. warden does not connect to an unknown host",
            key_type_name(kind),
            base64(key, true)
        )),
        ssh2::CheckResult::Failure => Err(format!(
            "cannot check the host key of {host}:{port} (the server offered {seen}) against \
             {path}{skipped}"
        )),
    }
}

/// What the blocking half and the async half share about one attempt.
#[derive(Default)]
struct Shared {
    /// Set at the deadline: the blocking half must stop.
    abandoned: bool,
    /// A handle on the session's TCP connection, shut down when the attempt is abandoned so
    /// that a libssh2 call blocked on it returns at once.
    stream: Option<TcpStream>,
    /// What the session is doing, for a timeout message.
    phase: &'static str,
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    // Nothing panics while holding this lock; recover the data if something did.
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// Abandons the attempt's session when dropped: at the deadline, and whenever the
/// attempt's future is dropped half-way (the chain's hard bound, or the daemon abandoning
/// a fence because its session was lost or it is stopping). The blocking half sees
/// `abandoned` before each step and starts nothing more, and the TCP connection is shut
/// down, so a libssh2 call blocked on it returns at once and sshd ends the session: the
/// remote command's terminal hangs up (SIGHUP), so it stops too instead of acting on
/// after a later election. Harmless once the session ended by itself.
struct Abandon(Arc<Mutex<Shared>>);

impl Abandon {
    /// Abandons the session now; returns what it was doing.
    fn now(&self) -> &'static str {
        let mut s = lock(&self.0);
        s.abandoned = true;
        if let Some(stream) = s.stream.take() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        s.phase
    }
}

impl Drop for Abandon {
    fn drop(&mut self) {
        self.now();
    }
}

/// Everything the blocking half needs, owned.
struct Request {
    method: SshFence,
    host: String,
    target: Target,
    deadline: std::time::Instant,
}

/// What the blocking half reports while it runs.
enum Progress {
    /// The remote command is about to start, with the bound it was given: computed from
    /// the time left after connecting, so that a slow handshake still leaves the remote
    /// side to end before this one gives up.
    Running { command: String, bound: Duration },
    /// A line of remote output.
    Line(String),
}

/// How the remote command ended.
enum RemoteExit {
    Status(i32),
    Signal(String),
}

/// Why the blocking half stopped without an exit status.
enum SessionError {
    /// The deadline passed during `phase`.
    TimedOut(&'static str),
    /// Anything else, said for an operator.
    Failed(String),
}

impl From<String> for SessionError {
    fn from(s: String) -> Self {
        SessionError::Failed(s)
    }
}

fn set_phase(shared: &Mutex<Shared>, phase: &'static str) -> Result<(), SessionError> {
    let mut s = lock(shared);
    s.phase = phase;
    if s.abandoned {
        return Err(SessionError::TimedOut(phase));
    }
    Ok(())
}

/// The time left before the deadline, or a timeout in `phase`.
fn time_left(deadline: std::time::Instant, phase: &'static str) -> Result<Duration, SessionError> {
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    if left.is_zero() {
        Err(SessionError::TimedOut(phase))
    } else {
        Ok(left)
    }
}

/// Bounds the next libssh2 call by the time left (0 would mean "no timeout" to libssh2).
fn arm(
    session: &Session,
    deadline: std::time::Instant,
    phase: &'static str,
) -> Result<(), SessionError> {
    let ms = time_left(deadline, phase)?.as_millis();
    session.set_timeout(u32::try_from(ms).unwrap_or(u32::MAX).max(1));
    Ok(())
}

fn ssh_error(what: &str, phase: &'static str, e: ssh2::Error) -> SessionError {
    if matches!(e.code(), ssh2::ErrorCode::Session(LIBSSH2_ERROR_TIMEOUT)) {
        SessionError::TimedOut(phase)
    } else {
        SessionError::Failed(format!("{what}: {e}"))
    }
}

/// libssh2's LIBSSH2_ERROR_CHANNEL_REQUEST_DENIED: the server said no to a request.
const LIBSSH2_ERROR_CHANNEL_REQUEST_DENIED: i32 = -22;

/// Asks for a terminal for the remote command. Not for its output: when the connection
/// goes (an abandoned attempt shuts it down), sshd hangs the terminal up and the kernel
/// sends SIGHUP to the command, which a command without a terminal never gets; it would
/// run on until its own bound. Echo and `\n` -> `\r\n` translation are turned off so the
/// output reads as without one. A server that refuses terminals (`no-pty` in
/// authorized_keys, `PermitTTY no`) still runs the command, bounded by its own timeout
/// only; the log says so.
fn request_terminal(channel: &mut ssh2::Channel, host: &str) -> Result<(), SessionError> {
    let mut modes = PtyModes::new();
    modes.set_boolean(PtyModeOpcode::ECHO, false);
    modes.set_boolean(PtyModeOpcode::ONLCR, false);
    match channel.request_pty("dumb", Some(modes), None) {
        Ok(()) => Ok(()),
        Err(e) if matches!(e.code(), ssh2::ErrorCode::Session(LIBSSH2_ERROR_TIMEOUT)) => {
            Err(SessionError::TimedOut(RUNNING))
        }
        Err(e) => {
            let denied = matches!(
                e.code(),
                ssh2::ErrorCode::Session(LIBSSH2_ERROR_CHANNEL_REQUEST_DENIED)
            );
            if !denied {
                return Err(ssh_error("cannot request a terminal", RUNNING, e));
            }
            tracing::warn!(
                method = "ssh",
                host,
                "{host} refused a terminal for the remote command (no-pty or PermitTTY no): \
                 if this attempt is abandoned, the command runs on there until its own bound \
                 instead of getting SIGHUP; allow a pty for the fencing key to cut it off"
            );
            Ok(())
        }
    }
}

/// One ssh session, start to end, on a blocking thread. The command line and every line
/// of remote output go to `progress` as they happen.
fn run_session(
    req: &Request,
    shared: &Mutex<Shared>,
    progress: &UnboundedSender<Progress>,
) -> Result<RemoteExit, SessionError> {
    let m = &req.method;
    let (host, port) = (req.host.as_str(), m.port);
    let name = known_hosts_name(host, port);
    // Read before connecting: a missing file fails without touching the network.
    let known_hosts = KnownHostsFile::read(&m.known_hosts, &name)?;

    const RESOLVING: &str = "resolving the host name";
    set_phase(shared, RESOLVING)?;
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| {
            format!("cannot resolve {host}: {e}; check the target's recorded host name and DNS")
        })?
        .collect();

    const CONNECTING: &str = "connecting";
    set_phase(shared, CONNECTING)?;
    let mut errors = Vec::new();
    let mut connected = None;
    for addr in &addrs {
        match TcpStream::connect_timeout(addr, time_left(req.deadline, CONNECTING)?) {
            Ok(s) => {
                connected = Some(s);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                return Err(SessionError::TimedOut(CONNECTING))
            }
            Err(e) => errors.push(format!("{addr}: {e}")),
        }
    }
    let stream = connected.ok_or_else(|| {
        format!(
            "cannot connect to {host}:{port} ({}); is sshd running there and the port reachable?",
            if errors.is_empty() {
                "the name resolves to no address".to_string()
            } else {
                errors.join("; ")
            }
        )
    })?;
    {
        let mut s = lock(shared);
        if s.abandoned {
            return Err(SessionError::TimedOut(CONNECTING));
        }
        s.stream = stream.try_clone().ok();
    }

    let mut session =
        Session::new().map_err(|e| format!("cannot start an ssh session (libssh2 failed): {e}"))?;
    session.set_tcp_stream(stream);
    let preferred: Vec<&str> = {
        let supported = session
            .supported_algs(MethodType::HostKey)
            .unwrap_or_default();
        let mut algs: Vec<&str> = Vec::new();
        for key_type in &known_hosts.key_types {
            for alg in host_key_algorithms(key_type) {
                if supported.contains(alg) && !algs.contains(alg) {
                    algs.push(alg);
                }
            }
        }
        algs
    };
    if !preferred.is_empty() {
        // Ask for a key type the file has for this host; the check below still decides.
        let _ = session.method_pref(MethodType::HostKey, &preferred.join(","));
    }

    const HANDSHAKE: &str = "in the ssh handshake";
    set_phase(shared, HANDSHAKE)?;
    arm(&session, req.deadline, HANDSHAKE)?;
    session.handshake().map_err(|e| {
        ssh_error(
            &format!("ssh handshake with {host}:{port} failed (is it an ssh server?)"),
            HANDSHAKE,
            e,
        )
    })?;

    set_phase(shared, "checking the host key")?;
    check_host_key(&session, host, port, &known_hosts)?;

    const AUTH: &str = "authenticating";
    set_phase(shared, AUTH)?;
    arm(&session, req.deadline, AUTH)?;
    session
        .userauth_pubkey_file(&m.user, None, &m.identity_file, None)
        .map_err(|e| {
            ssh_error(
                &format!(
                    "{host} refused the key {} for user {}; add its public key to {}'s \
                     authorized_keys on {host} (keys with a passphrase are not supported)",
                    m.identity_file.display(),
                    m.user,
                    m.user
                ),
                AUTH,
                e,
            )
        })?;
    if !session.authenticated() {
        return Err(SessionError::Failed(format!(
            "{host} did not authenticate {} with {}",
            m.user,
            m.identity_file.display()
        )));
    }

    set_phase(shared, RUNNING)?;
    arm(&session, req.deadline, RUNNING)?;
    let mut channel = session
        .channel_session()
        .map_err(|e| ssh_error("cannot open an ssh channel", RUNNING, e))?;
    // stderr and stdout in one stream, in the order they were written: nothing to
    // interleave here, and no stream can stall the other by filling its window.
    channel
        .handle_extended_data(ExtendedData::Merge)
        .map_err(|e| ssh_error("cannot merge the remote stderr", RUNNING, e))?;
    request_terminal(&mut channel, host)?;
    let bound = remote_bound(time_left(req.deadline, RUNNING)?);
    let command = remote_command(m, &req.target, bound);
    // The receiver is gone only when the attempt was abandoned.
    let _ = progress.send(Progress::Running {
        command: command.clone(),
        bound,
    });
    // The last moment to notice an abandoned attempt before anything runs remotely.
    set_phase(shared, RUNNING)?;
    channel
        .exec(&command)
        .map_err(|e| ssh_error("the server refused to run the command", RUNNING, e))?;

    let mut pending: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    let send = |bytes: &[u8]| {
        let line = String::from_utf8_lossy(bytes);
        let line = line.trim_end();
        if !line.is_empty() {
            let _ = progress.send(Progress::Line(line.to_string()));
        }
    };
    loop {
        arm(&session, req.deadline, RUNNING)?;
        let n = match channel.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                return Err(SessionError::TimedOut(RUNNING))
            }
            Err(e) => {
                return Err(SessionError::Failed(format!(
                    "lost the remote command's output: {e}"
                )))
            }
        };
        if n == 0 {
            break;
        }
        pending.extend_from_slice(&buf[..n]);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            send(&pending[..end]);
            pending.drain(..=end);
        }
        if pending.len() >= MAX_LINE_BYTES {
            send(&pending);
            pending.clear();
        }
    }
    send(&pending);

    arm(&session, req.deadline, RUNNING)?;
    channel
        .wait_close()
        .map_err(|e| ssh_error("the remote command did not end cleanly", RUNNING, e))?;
    let signal = channel.exit_signal().ok().and_then(|s| s.exit_signal);
    let status = channel
        .exit_status()
        .map_err(|e| ssh_error("no exit status", RUNNING, e))?;
    let _ = session.disconnect(None, "warden fencing done", None);
    Ok(match signal {
        Some(sig) => RemoteExit::Signal(sig),
        None => RemoteExit::Status(status),
    })
}

/// `line` up to `max` bytes (at a character boundary), with how many bytes more it had.
fn cut(line: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if line.len() <= max {
        return line.into();
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} ({} bytes more)", &line[..end], line.len() - end).into()
}

/// One attempt as the async half sees it: the command line and the remote output, logged
/// as they come, the last few lines kept for a failure.
struct Output<'a> {
    method: &'a SshFence,
    target: &'a str,
    host: &'a str,
    /// The remote command's own bound, once it was started.
    bound: Option<Duration>,
    tail: VecDeque<String>,
    logged: usize,
    fenced_line: Option<String>,
}

impl Output<'_> {
    fn progress(&mut self, p: Progress) {
        let (target, host) = (self.target, self.host);
        match p {
            Progress::Running { command, bound } => {
                tracing::info!(
                    method = "ssh",
                    target,
                    host,
                    "running `{command}` on {}@{host}:{}",
                    self.method.user,
                    self.method.port
                );
                self.bound = Some(bound);
            }
            Progress::Line(line) => self.line(line),
        }
    }

    fn line(&mut self, line: String) {
        let (target, host) = (self.target, self.host);
        if self.logged < MAX_LOGGED_LINES {
            let shown = cut(&line, LOGGED_LINE_BYTES);
            tracing::info!(method = "ssh", target, host, "{host}: {shown}");
        } else if self.logged == MAX_LOGGED_LINES {
            tracing::info!(
                method = "ssh",
                target,
                host,
                "{host}: (further output is not logged)"
            );
        }
        self.logged += 1;
        if line.starts_with(FENCE_LOCAL_FENCED) {
            self.fenced_line = Some(line.clone());
        }
        if self.tail.len() == TAIL_LINES {
            self.tail.pop_front();
        }
        self.tail
            .push_back(line.chars().take(TAIL_LINE_CHARS).collect());
    }

    fn quoted(&self) -> String {
        if self.tail.is_empty() {
            "; it printed nothing".to_string()
        } else {
            format!(
                "; last output: {}",
                self.tail.iter().cloned().collect::<Vec<_>>().join(" | ")
            )
        }
    }
}

pub(crate) async fn fence(
    m: &SshFence,
    _ctx: &FenceContext,
    target: &Target,
    deadline: Instant,
) -> MethodResult {
    let Some(host) = target.host.clone().filter(|h| !h.is_empty()) else {
        return MethodResult::not_applicable(
            "the target's host is unknown, so there is nowhere to connect",
        );
    };
    if m.command.is_none() && target.boot_id.is_none() {
        return MethodResult::not_applicable(
            "the record has no boot id, so fence-local could not tell whether the recorded \
             processes belong to the current boot of that host",
        );
    }
    let req = Request {
        method: m.clone(),
        host: host.clone(),
        target: target.clone(),
        deadline: deadline.into_std(),
    };
    let shared = Arc::new(Mutex::new(Shared::default()));
    // Before the session starts, so that no way out of this function leaves it running.
    let abandon = Abandon(shared.clone());
    let (tx, mut rx) = unbounded_channel::<Progress>();
    let mut task = tokio::task::spawn_blocking({
        let shared = shared.clone();
        move || run_session(&req, &shared, &tx)
    });
    let mut output = Output {
        method: m,
        target: target.label(),
        host: &host,
        bound: None,
        tail: VecDeque::new(),
        logged: 0,
        fenced_line: None,
    };
    let ended = loop {
        tokio::select! {
            Some(p) = rx.recv() => output.progress(p),
            joined = &mut task => break Some(joined),
            _ = tokio::time::sleep_until(deadline) => break None,
        }
    };
    let ended = match ended {
        Some(joined) => joined,
        // Abandon the session: the blocking call on its socket returns at once.
        None => Ok(Err(SessionError::TimedOut(abandon.now()))),
    };
    while let Ok(p) = rx.try_recv() {
        output.progress(p);
    }
    let timeout = humantime::format_duration(m.timeout);
    let at = format!("{}@{host}:{}", m.user, m.port);
    match ended {
        Err(e) => MethodResult::failed(format!("the ssh attempt on {at} crashed: {e}")),
        Ok(Err(SessionError::Failed(why))) => MethodResult::failed(why),
        Ok(Err(SessionError::TimedOut(phase))) => {
            let remote = match output.bound {
                Some(bound) if phase == RUNNING => format!(
                    "; the remote command ends itself within {} there{}",
                    humantime::format_duration(bound),
                    output.quoted()
                ),
                _ => String::new(),
            };
            MethodResult::failed(format!(
                "timed out after {timeout} {phase} on {at}; abandoned the session{remote}"
            ))
        }
        Ok(Ok(exit)) => verdict(&output, exit),
    }
}

/// What the remote command's end means.
fn verdict(output: &Output<'_>, exit: RemoteExit) -> MethodResult {
    let (m, host) = (output.method, output.host);
    let out = output.quoted();
    let default = m.command.is_none();
    let what = match &m.command {
        None => format!("`{DEFAULT_REMOTE_COMMAND}` on {host}"),
        Some(c) => format!("`{c}` on {host}"),
    };
    match exit {
        RemoteExit::Status(0) if !default => MethodResult::fenced(format!("{what} exited 0")),
        RemoteExit::Status(0) => match &output.fenced_line {
            Some(line) => MethodResult::fenced(format!("{host}: {line}")),
            None => MethodResult::failed(format!(
                "{what} exited 0 but did not print its verdict `{FENCE_LOCAL_FENCED}`: the \
                 warden installed there may lack fence-local; install the same warden version \
                 on every node{out}"
            )),
        },
        RemoteExit::Status(EXIT_NOT_FOUND) if default => MethodResult::failed(format!(
            "warden is not installed on {host} (the remote shell answered 127, command not \
             found): install warden on that host, or set command to the absolute path of its \
             `warden fence-local`{out}"
        )),
        RemoteExit::Status(EXIT_NOT_FOUND) => MethodResult::failed(format!(
            "{what} exited 127: a program it needs is not installed on {host} (the command \
             itself, or `timeout` and `sh`, which warden wraps it in){out}"
        )),
        RemoteExit::Status(EXIT_NOT_EXECUTABLE) => MethodResult::failed(format!(
            "{what} exited 126: the program exists but cannot be executed by {}{out}",
            m.user
        )),
        RemoteExit::Status(FENCE_LOCAL_NOT_FENCED) if default => MethodResult::failed(format!(
            "fence-local on {host} could not verify the target fenced{out}"
        )),
        RemoteExit::Status(FENCE_LOCAL_BAD_ARGUMENTS) if default => MethodResult::failed(format!(
            "fence-local on {host} refused its arguments (exit 2); is the same warden version \
             installed on every node?{out}"
        )),
        RemoteExit::Status(code) => {
            MethodResult::failed(format!("{what} exited with status {code}{out}"))
        }
        RemoteExit::Signal(sig) if sig == "KILL" && !default => MethodResult::failed(format!(
            "{what} was killed by SIGKILL: it ran past its bound of {} there{out}",
            humantime::format_duration(output.bound.unwrap_or_default())
        )),
        RemoteExit::Signal(sig) => {
            MethodResult::failed(format!("{what} was killed by SIG{sig}{out}"))
        }
    }
}

pub(crate) fn plan(m: &SshFence, target: &Target) -> String {
    let Some(host) = target.host.as_deref().filter(|h| !h.is_empty()) else {
        return "not applicable (the target's host is unknown)".to_string();
    };
    if m.command.is_none() && target.boot_id.is_none() {
        return "not applicable (the record has no boot id for fence-local)".to_string();
    }
    let bound = remote_bound(m.timeout);
    format!(
        "would connect to {}@{host}:{}, check its host key against {} (as `{}`), \
         authenticate with {} and run `{}` (exit 0 = fenced; abandoned after {})",
        m.user,
        m.port,
        m.known_hosts.display(),
        known_hosts_name(host, m.port),
        m.identity_file.display(),
        remote_command(m, target, bound),
        humantime::format_duration(m.timeout)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn method(command: Option<&str>) -> SshFence {
        SshFence {
            user: "root".into(),
            port: 22,
            identity_file: "/etc/warden/id_ed25519".into(),
            known_hosts: "/etc/warden/known_hosts".into(),
            timeout: Duration::from_secs(15),
            command: command.map(str::to_string),
            nodes: None,
        }
    }

    fn target() -> Target {
        Target {
            node_id: Some("rm1".into()),
            host: Some("rm1.example".into()),
            port: Some(8032),
            boot_id: Some("0d4b3c6e-4a4f-4c55-9f43-2b8d1e0c1f00".into()),
            machine_id: Some("3d1219c7c4c5404aaa1f6d2a48adfda4".into()),
            pid_ns: Some(4026531836),
            pid: Some(100),
            start_time: Some(2000),
            service_pid: Some(200),
            service_pgid: Some(200),
            service_start_time: Some(2100),
            service_cgroup: Some("/warden-rm1/service-42".into()),
            epoch: Some(77),
            ..Target::default()
        }
    }

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (input, padded, bare) in [
            ("", "", ""),
            ("f", "Zg==", "Zg"),
            ("fo", "Zm8=", "Zm8"),
            ("foo", "Zm9v", "Zm9v"),
            ("foob", "Zm9vYg==", "Zm9vYg"),
            ("fooba", "Zm9vYmE=", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes(), true), padded);
            assert_eq!(base64(input.as_bytes(), false), bare);
        }
        assert_eq!(base64(&[0xfb, 0xff], true), "+/8=");
    }

    #[test]
    fn known_hosts_name_brackets_every_port_but_22() {
        assert_eq!(known_hosts_name("RM1.example", 22), "rm1.example");
        assert_eq!(known_hosts_name("127.0.0.1", 22022), "[127.0.0.1]:22022");
    }

    #[test]
    fn shell_quote_leaves_words_and_quotes_the_rest() {
        assert_eq!(shell_quote("--boot-id"), "--boot-id");
        assert_eq!(shell_quote("12500ms"), "12500ms");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("$(reboot)"), "'$(reboot)'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn args_carry_every_recorded_field_and_skip_unknown_ones() {
        let args = fence_local_args(&target(), Duration::from_millis(12_500));
        assert_eq!(
            args.join(" "),
            "--boot-id 0d4b3c6e-4a4f-4c55-9f43-2b8d1e0c1f00 \
             --machine-id 3d1219c7c4c5404aaa1f6d2a48adfda4 --pid-ns 4026531836 --pid 100 \
             --start-time 2000 --service-pid 200 --service-pgid 200 --service-start-time 2100 \
             --service-cgroup /warden-rm1/service-42 --epoch 77 --port 8032 --timeout 12500ms"
        );
        let sparse = Target {
            boot_id: Some("b".into()),
            ..Target::default()
        };
        assert_eq!(
            fence_local_args(&sparse, Duration::from_secs(1)),
            ["--boot-id", "b", "--timeout", "1000ms"]
        );
    }

    #[test]
    fn args_never_pass_a_timeout_fence_local_refuses() {
        let args = fence_local_args(&target(), Duration::from_secs(86_400));
        assert_eq!(args[args.len() - 2..], ["--timeout", "3600000ms"]);
    }

    #[test]
    fn default_command_is_fence_local_with_the_target() {
        let line = remote_command(&method(None), &target(), Duration::from_secs(14));
        assert!(
            line.starts_with("warden fence-local --boot-id 0d4b3c6e-"),
            "{line}"
        );
        assert!(line.ends_with("--port 8032 --timeout 14000ms"), "{line}");
    }

    #[test]
    fn custom_command_runs_under_a_kill_bound_with_the_arguments_appended() {
        let m = method(Some("sudo -n /opt/warden/bin/warden fence-local"));
        let line = remote_command(&m, &target(), Duration::from_millis(2500));
        assert!(
            line.starts_with(
                "timeout -s KILL 2.500 sh -c 'sudo -n /opt/warden/bin/warden fence-local \
                 --boot-id 0d4b3c6e-"
            ),
            "{line}"
        );
        assert!(line.ends_with("--timeout 2500ms'"), "{line}");
    }

    #[test]
    fn a_hostile_boot_id_reaches_the_command_as_one_argument() {
        let hostile = "x'; echo injected; echo '$(id) \"y\"";
        let t = Target {
            boot_id: Some(hostile.into()),
            ..target()
        };
        let line = remote_command(&method(Some("printf '%s\\n'")), &t, Duration::from_secs(5));
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &line])
            .output()
            .unwrap();
        assert!(out.status.success(), "{line}: {out:?}");
        let printed = String::from_utf8(out.stdout).unwrap();
        let args: Vec<&str> = printed.lines().collect();
        assert_eq!(args[..2], ["--boot-id", hostile], "{line}");
    }

    #[test]
    fn remote_bound_leaves_a_margin_but_at_least_half() {
        assert_eq!(
            remote_bound(Duration::from_secs(15)),
            Duration::from_secs(14)
        );
        assert_eq!(
            remote_bound(Duration::from_secs(1)),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn plan_names_host_known_hosts_and_command() {
        let p = plan(&method(None), &target());
        assert!(p.contains("root@rm1.example:22"), "{p}");
        assert!(p.contains("/etc/warden/known_hosts"), "{p}");
        assert!(p.contains("`warden fence-local --boot-id"), "{p}");
        let unknown = Target {
            host: None,
            ..target()
        };
        assert!(plan(&method(None), &unknown).starts_with("not applicable"));
    }

    #[test]
    fn known_hosts_file_collects_key_types_and_revoked_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("known_hosts");
        std::fs::write(
            &path,
            "# comment\n\n[127.0.0.1]:2222,other ssh-ed25519 AAAAkey1\n\
             127.0.0.1 ecdsa-sha2-nistp256 AAAAkey2\n\
             @revoked * ssh-ed25519 AAAArevoked\n\
             @cert-authority *.example ssh-ed25519 AAAAca\n",
        )
        .unwrap();
        let f = KnownHostsFile::read(&path, "[127.0.0.1]:2222").unwrap();
        assert_eq!(f.key_types, ["ssh-ed25519"]);
        assert_eq!(f.revoked, ["AAAArevoked"]);
        assert_eq!(f.entries.len(), 2);
        assert_eq!(f.entries[0].0, 3);
        let missing = KnownHostsFile::read(&dir.path().join("nope"), "h").unwrap_err();
        assert!(missing.contains("cannot read known_hosts"), "{missing}");
    }
}
