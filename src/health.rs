//! Health checks and their rise/fall hysteresis (SPEC §2 `[health]`, §4.6).
//!
//! A [`Probe`] answers one question once, within a timeout: `exec` (exit 0), `tcp`
//! (connect), `http` (a 2xx answer to GET) or `none` (always healthy). A checker task
//! ([`spawn_checker`]) probes every `interval` and feeds the results through a
//! [`Hysteresis`], so one slow answer does not demote an active and one lucky answer does
//! not make a broken node eligible; it sends only changes of [`Health`].
//!
//! `start_grace`: failures during the first `start_grace` after the checker starts (a
//! service still starting up) do not count toward `fall`, but they do break a run of
//! passes. Passes during the grace count, so a service that comes up quickly is healthy
//! after `rise` passes without waiting for the grace to end.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{debug, info, warn};

use crate::config::{HealthConfig, HealthKind};
use crate::record::Health;
use crate::service::{io_reason, run_command, HookError};

/// `tokio::time::interval` cannot tick at a zero period, and probing faster than this only
/// burns CPU; a shorter configured interval is raised to it.
const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// The most of an HTTP answer read while looking for its status line. A status line is a
/// few dozen bytes; a server sending more without a line break is not answering HTTP.
const MAX_STATUS_LINE: usize = 8 * 1024;

/// A health check configuration is incomplete or invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HealthError {
    #[error("health.kind = \"exec\" needs health.command (the program and its arguments)")]
    MissingCommand,
    #[error("health.kind = \"tcp\" needs health.address, e.g. \"127.0.0.1:8032\"")]
    MissingAddress,
    #[error("health.address {0:?} is not host:port, e.g. \"127.0.0.1:8032\"")]
    BadAddress(String),
    #[error("health.kind = \"http\" needs health.url, e.g. \"http://127.0.0.1:8088/health\"")]
    MissingUrl,
    #[error("health.url {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
}

/// One way to ask "is it healthy?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Always healthy.
    None,
    /// The command exits 0; it runs with the variables in `env` at the time.
    Exec { command: Vec<String>, env: ProbeEnv },
    /// A TCP connection to `address` (`host:port`) succeeds.
    Tcp { address: String },
    /// `GET` of the URL answers 2xx.
    Http(HttpUrl),
}

/// The variables an `exec` probe's command is given, as the daemon last set them (SPEC §6:
/// `standby_command` is told the cluster, the node, its role, the newest epoch and the
/// active to follow, which change while the checker runs). Clones share them.
#[derive(Clone, Debug, Default)]
pub struct ProbeEnv(Arc<Mutex<Vec<(String, String)>>>);

impl ProbeEnv {
    /// Sets the variables of the next runs.
    pub fn set(&self, env: Vec<(String, String)>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = env;
    }

    /// The variables now.
    pub fn get(&self) -> Vec<(String, String)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl PartialEq for ProbeEnv {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for ProbeEnv {}

/// A parsed `http://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    /// As configured, for messages.
    pub url: String,
    /// For the `Host` header: host and port as written in the URL.
    authority: String,
    /// To connect to: a name or an IP address (IPv6 without brackets).
    host: String,
    port: u16,
    /// Path and query, starting with `/`.
    target: String,
}

/// The result of one probe: whether it passed, and what was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub pass: bool,
    /// For example `tcp 127.0.0.1:8032: connection refused`.
    pub detail: String,
}

/// A change of health, sent by the checker task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthChange {
    pub health: Health,
    /// Why: the last probe's result.
    pub detail: String,
}

impl Probe {
    /// The check of the service itself: `health.kind` with its address, url or command.
    pub fn service(config: &HealthConfig) -> Result<Probe, HealthError> {
        match config.kind {
            HealthKind::None => Ok(Probe::None),
            HealthKind::Exec => {
                if config.command.is_empty() || config.command[0].is_empty() {
                    return Err(HealthError::MissingCommand);
                }
                Ok(Probe::Exec {
                    command: config.command.clone(),
                    env: ProbeEnv::default(),
                })
            }
            HealthKind::Tcp => {
                let address = config
                    .address
                    .as_deref()
                    .ok_or(HealthError::MissingAddress)?;
                check_host_port(address)?;
                Ok(Probe::Tcp {
                    address: address.to_string(),
                })
            }
            HealthKind::Http => {
                let url = config.url.as_deref().ok_or(HealthError::MissingUrl)?;
                HttpUrl::parse(url)
                    .map(Probe::Http)
                    .map_err(|reason| HealthError::BadUrl {
                        url: url.to_string(),
                        reason,
                    })
            }
        }
    }

    /// A standby's eligibility: `health.standby_command` if set, run with `env`, else
    /// always eligible (in spawn mode the service does not run on a standby, so it cannot
    /// be checked there).
    pub fn standby(config: &HealthConfig, env: ProbeEnv) -> Probe {
        if config.standby_command.is_empty() {
            Probe::None
        } else {
            Probe::Exec {
                command: config.standby_command.clone(),
                env,
            }
        }
    }

    /// A short name for logs: `tcp 127.0.0.1:8032`, `http http://...`, `exec check`.
    pub fn label(&self) -> String {
        match self {
            Probe::None => "none".to_string(),
            Probe::Exec { command, .. } => format!("exec {}", command.join(" ")),
            Probe::Tcp { address } => format!("tcp {address}"),
            Probe::Http(url) => format!("http {}", url.url),
        }
    }

    /// Probes once. Never takes much longer than `timeout` (an `exec` probe may add the
    /// time to reap its killed process group).
    pub async fn check(&self, timeout: Duration) -> Check {
        let label = self.label();
        let result = match self {
            Probe::None => Ok("no check configured".to_string()),
            Probe::Exec { command, env } => match run_command(command, &env.get(), timeout).await {
                Ok(()) => Ok("exit status 0".to_string()),
                Err(HookError::Failed { exit, said, .. }) => Err(match said {
                    Some(said) => format!("{exit}: {said}"),
                    None => exit.to_string(),
                }),
                Err(HookError::TimedOut { .. }) => Err(timed_out(timeout)),
                Err(e) => Err(e.to_string()),
            },
            Probe::Tcp { address } => {
                match tokio::time::timeout(timeout, TcpStream::connect(address.as_str())).await {
                    Ok(Ok(_)) => Ok("connected".to_string()),
                    Ok(Err(e)) => Err(io_reason(&e)),
                    Err(_) => Err(timed_out(timeout)),
                }
            }
            Probe::Http(url) => match tokio::time::timeout(timeout, http_get(url)).await {
                Ok(Ok((status, reason))) if (200..300).contains(&status) => {
                    Ok(format!("{status} {reason}").trim_end().to_string())
                }
                Ok(Ok((status, reason))) => {
                    Err(format!("{status} {reason}").trim_end().to_string())
                }
                Ok(Err(e)) => Err(e),
                Err(_) => Err(timed_out(timeout)),
            },
        };
        match result {
            Ok(what) => Check {
                pass: true,
                detail: format!("{label}: {what}"),
            },
            Err(what) => Check {
                pass: false,
                detail: format!("{label}: {what}"),
            },
        }
    }
}

fn timed_out(timeout: Duration) -> String {
    format!("no answer within {}", humantime::format_duration(timeout))
}

/// Checks `host:port` loosely (the host may be a name, resolved at each probe).
fn check_host_port(address: &str) -> Result<(), HealthError> {
    let ok = address
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if ok {
        Ok(())
    } else {
        Err(HealthError::BadAddress(address.to_string()))
    }
}

impl HttpUrl {
    /// Parses `http://host[:port][/path][?query]`. `https` is refused: warden speaks plain
    /// HTTP only, to keep TLS out of the supervisor.
    pub fn parse(url: &str) -> Result<HttpUrl, String> {
        let lower = url.to_ascii_lowercase();
        if lower.starts_with("https://") {
            return Err(
                "https is not supported; point the check at a plain http endpoint \
                        (a loopback port), or use kind = \"exec\" with a client such as curl"
                    .to_string(),
            );
        }
        if !lower.starts_with("http://") {
            return Err("must start with http://".to_string());
        }
        let rest = &url["http://".len()..];
        let (authority, target) = match rest.find(['/', '?', '#']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        // The fragment is for browsers, never sent.
        let target = target.split('#').next().unwrap_or("/");
        let target = match target {
            "" => "/".to_string(),
            t if t.starts_with('?') => format!("/{t}"),
            t => t.to_string(),
        };
        if target.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("the path contains spaces or control characters".to_string());
        }
        if authority.contains('@') {
            return Err("user names and passwords in the URL are not supported".to_string());
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| "unclosed '[' in the host".to_string())?;
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| format!("unexpected {p:?} after the host"))?,
                ),
            };
            (host, port)
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err("no host".to_string());
        }
        let port = match port {
            None => 80,
            Some(p) => p
                .parse::<u16>()
                .map_err(|_| format!("port {p:?} is not a number from 0 to 65535"))?,
        };
        Ok(HttpUrl {
            url: url.to_string(),
            authority: authority.to_string(),
            host: host.to_string(),
            port,
            target,
        })
    }
}

/// A minimal HTTP/1.1 GET: sends the request, reads only the status line. Returns the
/// status code and reason phrase, or why there was none.
async fn http_get(url: &HttpUrl) -> Result<(u16, String), String> {
    let mut stream = TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(|e| io_reason(&e))?;
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: warden/{}\r\nAccept: */*\r\n\
         Connection: close\r\n\r\n",
        url.target,
        url.authority,
        env!("CARGO_PKG_VERSION")
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("sending the request failed: {}", io_reason(&e)))?;
    let mut head = Vec::with_capacity(256);
    let mut chunk = [0u8; 512];
    let line_end = loop {
        if let Some(i) = head.windows(2).position(|w| w == b"\r\n") {
            break i;
        }
        if head.len() > MAX_STATUS_LINE {
            return Err("the answer is not HTTP (no status line)".to_string());
        }
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading the answer failed: {}", io_reason(&e)))?;
        if n == 0 {
            return Err("connection closed without an answer".to_string());
        }
        head.extend_from_slice(&chunk[..n]);
    };
    parse_status_line(&head[..line_end])
}

/// `HTTP/1.1 200 OK` -> (200, "OK").
fn parse_status_line(line: &[u8]) -> Result<(u16, String), String> {
    let line = String::from_utf8_lossy(line);
    let mut parts = line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    let code = parts.next().unwrap_or_default();
    let reason = parts.next().unwrap_or_default().trim().to_string();
    if !version.starts_with("HTTP/") {
        return Err(format!("the answer is not HTTP: {:?}", truncate(&line, 80)));
    }
    match code.parse::<u16>() {
        Ok(code) if (100..600).contains(&code) => Ok((code, reason)),
        _ => Err(format!("bad HTTP status line: {:?}", truncate(&line, 80))),
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Rise/fall hysteresis over a stream of pass/fail results. Pure: no clock, no I/O.
///
/// Starts [`Health::Unknown`]; `rise` passes in a row make it healthy, `fall` failures in
/// a row make it unhealthy (from unknown too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hysteresis {
    rise: u32,
    fall: u32,
    health: Health,
    passes: u32,
    failures: u32,
}

impl Hysteresis {
    /// `rise` and `fall` below 1 are taken as 1: a change needs at least one result.
    pub fn new(rise: u32, fall: u32) -> Hysteresis {
        Hysteresis {
            rise: rise.max(1),
            fall: fall.max(1),
            health: Health::Unknown,
            passes: 0,
            failures: 0,
        }
    }

    /// The current health.
    pub fn health(&self) -> Health {
        self.health
    }

    /// Takes one result; returns the new health if it changed.
    pub fn observe(&mut self, pass: bool) -> Option<Health> {
        let next = if pass {
            self.failures = 0;
            self.passes = self.passes.saturating_add(1);
            (self.passes >= self.rise).then_some(Health::Healthy)
        } else {
            self.passes = 0;
            self.failures = self.failures.saturating_add(1);
            (self.failures >= self.fall).then_some(Health::Unhealthy)
        };
        match next {
            Some(health) if health != self.health => {
                self.health = health;
                Some(health)
            }
            _ => None,
        }
    }

    /// A failure that does not count (during `start_grace`): it breaks a run of passes but
    /// adds nothing toward `fall`, and never changes the health.
    pub fn excuse_failure(&mut self) {
        self.passes = 0;
    }
}

/// What a checker probes: a configured [`Probe`], or the simulation's model of one.
pub trait Prober: Send + Sync + 'static {
    /// Nothing to probe: healthy at once.
    fn is_none(&self) -> bool;
    /// Probes once, within about `timeout`.
    fn check(&self, timeout: Duration) -> impl std::future::Future<Output = Check> + Send;
}

impl Prober for Probe {
    fn is_none(&self) -> bool {
        *self == Probe::None
    }

    fn check(&self, timeout: Duration) -> impl std::future::Future<Output = Check> + Send {
        Probe::check(self, timeout)
    }
}

/// The checker task; dropping the handle stops it (and kills a running `exec` probe).
#[derive(Debug)]
pub struct CheckerHandle {
    task: JoinHandle<()>,
}

impl Drop for CheckerHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts a task that probes every `interval` (each probe bounded by `timeout`) and sends
/// a [`HealthChange`] on `tx` whenever the health changes, starting from `Unknown`.
/// Failures in the first `grace` do not count (see the module docs). The task ends when
/// the handle is dropped or the receiver is gone. With `metrics`, every probe is counted
/// in `warden_health_checks_total`. Must be called within a tokio runtime.
#[allow(clippy::too_many_arguments)]
pub fn spawn_checker<P: Prober>(
    probe: P,
    interval: Duration,
    timeout: Duration,
    rise: u32,
    fall: u32,
    grace: Duration,
    tx: mpsc::Sender<HealthChange>,
    metrics: Option<crate::metrics::Metrics>,
) -> CheckerHandle {
    let task = tokio::spawn(run_checker(
        probe, interval, timeout, rise, fall, grace, tx, metrics,
    ));
    CheckerHandle { task }
}

#[allow(clippy::too_many_arguments)]
async fn run_checker<P: Prober>(
    probe: P,
    interval: Duration,
    timeout: Duration,
    rise: u32,
    fall: u32,
    grace: Duration,
    tx: mpsc::Sender<HealthChange>,
    metrics: Option<crate::metrics::Metrics>,
) {
    if probe.is_none() {
        // Nothing to probe: healthy at once rather than after `rise` intervals.
        let change = HealthChange {
            health: Health::Healthy,
            detail: "none: no check configured".to_string(),
        };
        if tx.send(change).await.is_ok() {
            // Keep the sender alive: a closed channel would read as a dead checker.
            tx.closed().await;
        }
        return;
    }
    let started = Instant::now();
    let mut hysteresis = Hysteresis::new(rise, fall);
    let mut ticks = tokio::time::interval(interval.max(MIN_INTERVAL));
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let check = probe.check(timeout).await;
        if let Some(m) = &metrics {
            m.health_check(check.pass);
        }
        let change = if !check.pass && started.elapsed() < grace {
            debug!(detail = %check.detail, "health check failed during start_grace; not counted");
            hysteresis.excuse_failure();
            None
        } else {
            hysteresis.observe(check.pass)
        };
        let Some(health) = change else {
            continue;
        };
        match health {
            Health::Healthy => info!(%health, detail = %check.detail, "health changed"),
            _ => warn!(%health, detail = %check.detail, "health changed"),
        }
        let change = HealthChange {
            health,
            detail: check.detail,
        };
        if tx.send(change).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(h: &mut Hysteresis, results: &[bool]) -> Vec<Option<Health>> {
        results.iter().map(|&p| h.observe(p)).collect()
    }

    #[test]
    fn rise_passes_in_a_row_make_it_healthy() {
        let mut h = Hysteresis::new(2, 3);
        assert_eq!(h.health(), Health::Unknown);
        assert_eq!(
            run(&mut h, &[true, true, true]),
            [None, Some(Health::Healthy), None]
        );
        assert_eq!(h.health(), Health::Healthy);
    }

    #[test]
    fn fall_failures_in_a_row_make_it_unhealthy_even_from_unknown() {
        let mut h = Hysteresis::new(2, 3);
        assert_eq!(
            run(&mut h, &[false, false, false, false]),
            [None, None, Some(Health::Unhealthy), None]
        );
    }

    #[test]
    fn a_single_blip_changes_nothing() {
        let mut h = Hysteresis::new(2, 3);
        run(&mut h, &[true, true]);
        assert_eq!(
            run(&mut h, &[false, false, true, false, false, true]),
            [None; 6]
        );
        assert_eq!(h.health(), Health::Healthy);
        assert_eq!(
            run(&mut h, &[false, false, false]),
            [None, None, Some(Health::Unhealthy)]
        );
        // Recovery needs `rise` passes in a row again.
        assert_eq!(
            run(&mut h, &[true, false, true, true]),
            [None, None, None, Some(Health::Healthy)]
        );
    }

    #[test]
    fn excused_failures_break_a_pass_run_but_never_count() {
        let mut h = Hysteresis::new(2, 1);
        h.observe(true);
        h.excuse_failure();
        h.excuse_failure();
        assert_eq!(h.health(), Health::Unknown);
        assert_eq!(h.observe(true), None, "the pass run restarted");
        assert_eq!(h.observe(true), Some(Health::Healthy));
    }

    #[test]
    fn rise_and_fall_of_zero_act_as_one() {
        let mut h = Hysteresis::new(0, 0);
        assert_eq!(h.observe(true), Some(Health::Healthy));
        assert_eq!(h.observe(false), Some(Health::Unhealthy));
    }

    #[test]
    fn http_urls_parse_into_what_is_sent() {
        let u = HttpUrl::parse("http://127.0.0.1:8088/ws/v1/cluster/info?x=1#frag").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("127.0.0.1", 8088));
        assert_eq!(u.authority, "127.0.0.1:8088");
        assert_eq!(u.target, "/ws/v1/cluster/info?x=1");
        let u = HttpUrl::parse("HTTP://example.com").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.target.as_str()),
            ("example.com", 80, "/")
        );
        let u = HttpUrl::parse("http://[::1]:9000?q").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.target.as_str()),
            ("::1", 9000, "/?q")
        );
        assert!(HttpUrl::parse("https://x/")
            .unwrap_err()
            .contains("https is not supported"));
        assert!(HttpUrl::parse("ftp://x/").is_err());
        assert!(HttpUrl::parse("http://:80/").is_err());
        assert!(HttpUrl::parse("http://x:99999/").is_err());
        assert!(HttpUrl::parse("http://u:p@x/").is_err());
    }

    #[test]
    fn status_lines() {
        assert_eq!(
            parse_status_line(b"HTTP/1.1 200 OK"),
            Ok((200, "OK".into()))
        );
        assert_eq!(
            parse_status_line(b"HTTP/1.0 503 Service Unavailable"),
            Ok((503, "Service Unavailable".into()))
        );
        assert_eq!(parse_status_line(b"HTTP/1.1 204"), Ok((204, String::new())));
        assert!(parse_status_line(b"SSH-2.0-OpenSSH").is_err());
        assert!(parse_status_line(b"HTTP/1.1 abc").is_err());
    }

    #[test]
    fn probes_from_config() {
        let mut c = HealthConfig {
            kind: HealthKind::Tcp,
            ..HealthConfig::default()
        };
        assert_eq!(Probe::service(&c), Err(HealthError::MissingAddress));
        c.address = Some("localhost".into());
        assert!(matches!(
            Probe::service(&c),
            Err(HealthError::BadAddress(_))
        ));
        c.address = Some("127.0.0.1:8032".into());
        assert_eq!(
            Probe::service(&c),
            Ok(Probe::Tcp {
                address: "127.0.0.1:8032".into()
            })
        );
        c.kind = HealthKind::Exec;
        assert_eq!(Probe::service(&c), Err(HealthError::MissingCommand));
        c.kind = HealthKind::Http;
        assert_eq!(Probe::service(&c), Err(HealthError::MissingUrl));
        assert_eq!(Probe::standby(&c, ProbeEnv::default()), Probe::None);
        c.standby_command = vec!["/bin/true".into()];
        assert_eq!(
            Probe::standby(&c, ProbeEnv::default()),
            Probe::Exec {
                command: vec!["/bin/true".into()],
                env: ProbeEnv::default(),
            }
        );
    }
}
