//! Health checks and their rise/fall hysteresis (SPEC §2 `[health]`, §4.6).
//!
//! A [`Probe`] answers one question once, within a timeout: `exec` (exit 0), `tcp`
//! (connect), `http` (a 2xx answer to GET, over TLS for an https URL) or `none` (always
//! healthy). A checker task
//! ([`spawn_checker`]) probes every `interval` and feeds the results through a
//! [`Hysteresis`], so one slow answer does not demote an active and one lucky answer does
//! not make a broken node eligible; it sends only changes of [`Health`].
//!
//! `start_grace`: failures during the first `start_grace` after the checker starts (a
//! service still starting up) do not count toward `fall`, but they do break a run of
//! passes. Passes during the grace count, so a service that comes up quickly is healthy
//! after `rise` passes without waiting for the grace to end.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper::header::{ACCEPT, CONNECTION, HOST, USER_AGENT};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_rustls::TlsConnector;
use tracing::{debug, info, warn};

use crate::config::{HealthConfig, HealthKind};
pub use crate::http_url::{read_ca_file, CaFileError, HttpUrl, MAX_CA_FILE_BYTES};
use crate::record::Health;
use crate::service::{io_reason, run_command_said, HookError};

/// `tokio::time::interval` cannot tick at a zero period, and probing faster than this only
/// burns CPU; a shorter configured interval is raised to it.
const MIN_INTERVAL: Duration = Duration::from_millis(10);

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
    #[error("health.url {url:?} {reason}")]
    BadUrl { url: String, reason: String },
    #[error("health.ca_file {}: {reason}", .file.display())]
    CaFile { file: PathBuf, reason: String },
    #[error("cannot set up TLS for the https health check: {0}")]
    Tls(String),
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
    Http(HttpProbe),
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

/// An `http` check: its URL and, for https, the TLS client that verifies the server.
#[derive(Clone)]
pub struct HttpProbe {
    url: HttpUrl,
    /// `health.ca_file`, for messages.
    ca_file: Option<PathBuf>,
    tls: Option<TlsConnector>,
}

impl fmt::Debug for HttpProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpProbe")
            .field("url", &self.url)
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

/// Two checks are the same when they ask the same URL trusting the same CA file.
impl PartialEq for HttpProbe {
    fn eq(&self, other: &Self) -> bool {
        self.url == other.url && self.ca_file == other.ca_file
    }
}

impl Eq for HttpProbe {}

/// The result of one probe: whether it passed, and what was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub pass: bool,
    /// For example `tcp 127.0.0.1:8032: connection refused`.
    pub detail: String,
    /// An `exec` check that passed: the last line it wrote to stdout, where it may tell
    /// the node's data position (SPEC §6b; [`position_of`]).
    pub said: Option<String>,
}

/// SPEC §6b: a check's last stdout line as a data position: a non-negative integer (up to
/// `u64::MAX`, no sign, spaces around allowed). Anything else is not a position: why.
pub fn position_of(line: &str) -> Result<u64, String> {
    let t = line.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{:?} is not a position (a non-negative integer that grows with the data)",
            crate::record::printable(t)
        ));
    }
    t.parse::<u64>()
        .map_err(|_| format!("{t} is not a position: more than {}", u64::MAX))
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
                HttpProbe::new(url, config.ca_file.as_deref()).map(Probe::Http)
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
            Probe::Http(http) => format!("http {}", http.url()),
        }
    }

    /// Probes once. Never takes much longer than `timeout` (an `exec` probe may add the
    /// time to reap its killed process group).
    pub async fn check(&self, timeout: Duration) -> Check {
        let label = self.label();
        let mut said = None;
        let result = match self {
            Probe::None => Ok("no check configured".to_string()),
            Probe::Exec { command, env } => {
                match run_command_said(command, &env.get(), timeout).await {
                    Ok(line) => {
                        said = line;
                        Ok("exit status 0".to_string())
                    }
                    Err(HookError::Failed { exit, said, .. }) => Err(match said {
                        Some(said) => format!("{exit}: {said}"),
                        None => exit.to_string(),
                    }),
                    Err(HookError::TimedOut { .. }) => Err(timed_out(timeout)),
                    Err(e) => Err(e.to_string()),
                }
            }
            Probe::Tcp { address } => {
                match tokio::time::timeout(timeout, TcpStream::connect(address.as_str())).await {
                    Ok(Ok(_)) => Ok("connected".to_string()),
                    Ok(Err(e)) => Err(io_reason(&e)),
                    Err(_) => Err(timed_out(timeout)),
                }
            }
            Probe::Http(http) => match tokio::time::timeout(timeout, http.get()).await {
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
                said,
            },
            Err(what) => Check {
                pass: false,
                detail: format!("{label}: {what}"),
                said: None,
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

/// The TLS client of an https check: this host's trusted CAs (as OpenSSL finds them,
/// `SSL_CERT_FILE` and `SSL_CERT_DIR` included) and those of `ca_file`.
fn tls_connector(ca_file: Option<&Path>) -> Result<TlsConnector, HealthError> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        warn!(error = %e, "cannot load some of this host's trusted CA certificates; https health checks trust the others");
    }
    roots.add_parsable_certificates(native.certs);
    if let Some(file) = ca_file {
        let ca_error = |reason: String| HealthError::CaFile {
            file: file.to_path_buf(),
            reason,
        };
        for cert in read_ca_file(file).map_err(|e| ca_error(e.to_string()))? {
            roots.add(cert).map_err(|e| ca_error(e.to_string()))?;
        }
    }
    if roots.is_empty() {
        warn!(
            "this host trusts no CA certificate (is ca-certificates installed?); an https \
             health check fails until health.ca_file names the CA of the service's certificate"
        );
    }
    // The provider is named, not left to rustls's process-wide default, which is
    // ambiguous (and panics) when another crate enables a second one.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| HealthError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

impl HttpProbe {
    /// The check of `url`; an https one trusts this host's CAs and those in `ca_file`
    /// (which an http one does not use).
    pub fn new(url: &str, ca_file: Option<&Path>) -> Result<HttpProbe, HealthError> {
        let parsed = HttpUrl::parse(url).map_err(|reason| HealthError::BadUrl {
            url: url.to_string(),
            reason,
        })?;
        let tls = match parsed.is_https() {
            true => Some(tls_connector(ca_file)?),
            false => None,
        };
        Ok(HttpProbe {
            url: parsed,
            ca_file: ca_file.map(Path::to_path_buf),
            tls,
        })
    }

    /// The URL as configured.
    pub fn url(&self) -> &str {
        &self.url.url
    }

    /// One `GET`: connects, shakes hands for https, sends the request and reads the head
    /// of the answer. Returns its status code and reason phrase, or why there was none.
    async fn get(&self) -> Result<(u16, String), String> {
        let tcp = TcpStream::connect((self.url.host.as_str(), self.url.port))
            .await
            .map_err(|e| io_reason(&e))?;
        match (&self.tls, &self.url.server_name) {
            (Some(tls), Some(name)) => {
                let stream = tls
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| self.handshake_failure(&e))?;
                self.exchange(stream).await
            }
            _ => self.exchange(tcp).await,
        }
    }

    async fn exchange<S>(&self, stream: S) -> Result<(u16, String), String>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        // Header names as HTTP/1.1 clients have always written them (`Host`): some
        // embedded status pages match them case-sensitively.
        let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
            .title_case_headers(true)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(answer_failure)?;
        let request = hyper::Request::get(self.url.target.as_str())
            .header(HOST, self.url.authority.as_str())
            .header(USER_AGENT, concat!("warden/", env!("CARGO_PKG_VERSION")))
            .header(ACCEPT, "*/*")
            // One connection per check: a check must see whether the service still
            // accepts connections, which a kept-alive one would hide.
            .header(CONNECTION, "close")
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("cannot build the request: {e}"))?;
        let answer = sender.send_request(request);
        tokio::pin!(answer);
        // The connection is driven here rather than in a task of its own, so that the
        // check's timeout ends it together with the check.
        let mut conn = Box::pin(conn);
        let first = tokio::select! {
            biased;
            answer = &mut answer => Ok(answer),
            ended = &mut conn => Err(ended),
        };
        let response = match first {
            Ok(answer) => answer.map_err(answer_failure)?,
            Err(ended) => {
                // An answer that came before the end waits in `answer`; a request still
                // pending fails once the connection is dropped.
                drop(conn);
                match (answer.await, ended) {
                    (Ok(response), _) => response,
                    // The connection's own error: the request only learnt that it ended.
                    (Err(e), Err(ended)) if e.is_user() => return Err(answer_failure(ended)),
                    (Err(e), Ok(())) if e.is_user() => {
                        return Err("connection closed without an answer".to_string())
                    }
                    (Err(e), _) => return Err(answer_failure(e)),
                }
            }
        };
        let status = response.status();
        // hyper keeps the reason phrase only where it is not the standard one.
        let reason = match response.extensions().get::<hyper::ext::ReasonPhrase>() {
            Some(reason) => String::from_utf8_lossy(reason.as_bytes())
                .trim()
                .to_string(),
            None => status.canonical_reason().unwrap_or_default().to_string(),
        };
        Ok((status.as_u16(), reason))
    }

    /// What a failed TLS handshake means, and what to do about it.
    fn handshake_failure(&self, e: &io::Error) -> String {
        let Some(tls) = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        else {
            return format!("the TLS handshake failed: {}", io_reason(e));
        };
        match tls {
            rustls::Error::InvalidCertificate(cert) => self.certificate_refused(cert),
            rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
                format!(
                    "the TLS handshake failed ({tls}): does the server speak https on port {}? \
                     For plain HTTP write the url with http://",
                    self.url.port
                )
            }
            other => format!("the TLS handshake failed: {other}"),
        }
    }

    fn certificate_refused(&self, cert: &rustls::CertificateError) -> String {
        use rustls::CertificateError as C;
        match cert {
            C::UnknownIssuer => match &self.ca_file {
                None => "the server's certificate is not signed by a CA this host trusts \
                         (UnknownIssuer): set health.ca_file to the PEM file of the CA that \
                         signed it"
                    .to_string(),
                Some(file) => format!(
                    "the server's certificate is signed by no CA of health.ca_file ({}) nor \
                     of this host (UnknownIssuer): point health.ca_file at the PEM file of \
                     the CA that signed it",
                    file.display()
                ),
            },
            C::BadSignature => format!(
                "the server's certificate names as its issuer a CA that {} trusts, but that \
                 CA did not sign it (BadSignature; a CA made anew keeps its name but not its \
                 key): point health.ca_file at the PEM file of the CA that signed it",
                match &self.ca_file {
                    None => "this host".to_string(),
                    Some(file) => format!("health.ca_file ({}) or this host", file.display()),
                }
            ),
            C::NotValidForName | C::NotValidForNameContext { .. } => format!(
                "the server's certificate does not name host {} ({cert}): write in \
                 health.url a host name the certificate holds",
                self.url.host
            ),
            C::Expired
            | C::ExpiredContext { .. }
            | C::NotValidYet
            | C::NotValidYetContext { .. } => {
                format!(
                    "the server's certificate is not valid now ({cert}): renew it, or check \
                     this host's clock"
                )
            }
            other => format!("the server's certificate was refused ({other})"),
        }
    }
}

/// What a failed exchange after connecting means.
fn answer_failure(e: hyper::Error) -> String {
    if e.is_parse() {
        return format!("the answer is not HTTP ({e})");
    }
    if e.is_incomplete_message() || e.is_canceled() || e.is_closed() {
        return "connection closed without an answer".to_string();
    }
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            return format!("the connection failed: {}", io_reason(io));
        }
        source = cause.source();
    }
    e.to_string()
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

/// How a checker probes, and when its health changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckerSettings {
    /// A probe every `interval` (raised to a 10 ms floor).
    pub interval: Duration,
    /// Each probe bounded by `timeout`.
    pub timeout: Duration,
    /// Passes in a row that make the node healthy.
    pub rise: u32,
    /// Failures in a row that make it unhealthy.
    pub fall: u32,
    /// Failures in the first `grace` after the checker starts do not count (see the module
    /// docs).
    pub grace: Duration,
}

/// Told whether each probe of a checker passed.
pub type EachProbe = std::sync::Arc<dyn Fn(bool) + Send + Sync>;

/// Starts a task that probes as `settings` say and sends a [`HealthChange`] on `tx`
/// whenever the health changes, starting from `Unknown`. The task ends when the handle is
/// dropped or the receiver is gone. With `each`, every probe's outcome is told to it (the
/// driver counts them in `warden_health_checks_total`); with `positions`, each change of the position the checks
/// tell (SPEC §6b; `None`: unknown) is sent there. Must be called within a tokio runtime.
pub fn spawn_checker<P: Prober>(
    probe: P,
    settings: CheckerSettings,
    tx: mpsc::Sender<HealthChange>,
    each: Option<EachProbe>,
    positions: Option<mpsc::Sender<Option<u64>>>,
) -> CheckerHandle {
    let task = tokio::spawn(run_checker(probe, settings, tx, each, positions));
    CheckerHandle { task }
}

async fn run_checker<P: Prober>(
    probe: P,
    settings: CheckerSettings,
    tx: mpsc::Sender<HealthChange>,
    each: Option<EachProbe>,
    positions: Option<mpsc::Sender<Option<u64>>>,
) {
    let CheckerSettings {
        interval,
        timeout,
        rise,
        fall,
        grace,
    } = settings;
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
    let mut position = Positions::default();
    loop {
        ticks.tick().await;
        let check = probe.check(timeout).await;
        if let Some(each) = &each {
            each(check.pass);
        }
        if let (Some(ptx), Some(p)) = (&positions, position.read(&check)) {
            if ptx.send(p).await.is_err() {
                return;
            }
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

/// The positions a checker's passing checks tell (SPEC §6b), as a change at a time.
#[derive(Debug, Default)]
struct Positions {
    /// The last one sent: `None` before the first, `Some(None)` for "unknown".
    sent: Option<Option<u64>>,
    /// Garbage was logged since the last position: said once, not at every check.
    garbage_said: bool,
}

impl Positions {
    /// What a check tells: `Some` when the position it gives differs from the last sent
    /// (`Some(None)`: unknown now: nothing printed, garbage, or a failed check, which says
    /// nothing of the data).
    fn read(&mut self, check: &Check) -> Option<Option<u64>> {
        let now = match check.said.as_deref().map(position_of) {
            Some(Ok(p)) => {
                self.garbage_said = false;
                Some(p)
            }
            Some(Err(why)) => {
                if !self.garbage_said {
                    self.garbage_said = true;
                    warn!(
                        "the check's last line on stdout {why}: this node's position counts as \
                         unknown, placed after every node that has one (SPEC §6b); said \
                         once until it prints one"
                    );
                }
                None
            }
            None => None,
        };
        if self.sent == Some(now) {
            return None;
        }
        self.sent = Some(now);
        Some(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::ServerName;

    #[test]
    fn a_position_is_a_non_negative_integer_and_anything_else_is_unknown() {
        assert_eq!(position_of("12345"), Ok(12345));
        assert_eq!(position_of("  0 \r"), Ok(0));
        assert_eq!(position_of(&u64::MAX.to_string()), Ok(u64::MAX));
        for garbage in [
            "",
            "-1",
            "+5",
            "1.5",
            "0x10",
            "12 34",
            "18446744073709551616",
            "ok",
        ] {
            assert!(position_of(garbage).is_err(), "{garbage:?}");
        }
        let check = |said: Option<&str>| Check {
            pass: true,
            detail: String::new(),
            said: said.map(str::to_string),
        };
        let mut p = Positions::default();
        assert_eq!(p.read(&check(Some("7"))), Some(Some(7)));
        assert_eq!(p.read(&check(Some("7"))), None, "no change, nothing sent");
        assert_eq!(p.read(&check(Some("9"))), Some(Some(9)));
        assert_eq!(p.read(&check(Some("lagging"))), Some(None));
        assert!(p.garbage_said);
        assert_eq!(p.read(&check(Some("lagging"))), None);
        assert_eq!(p.read(&check(None)), None);
        assert_eq!(p.read(&check(Some("10"))), Some(Some(10)));
        assert!(!p.garbage_said);
        let failed = Check {
            pass: false,
            detail: String::new(),
            said: None,
        };
        assert_eq!(p.read(&failed), Some(None));
    }
    use std::net::IpAddr;

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
        assert!(!u.is_https());
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
        assert_eq!(u.authority, "[::1]:9000");
        let u = HttpUrl::parse("https://rm1.example.com/ws/v1/cluster/info").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("rm1.example.com", 443));
        assert_eq!(u.authority, "rm1.example.com");
        assert_eq!(
            u.server_name,
            Some(ServerName::try_from("rm1.example.com").unwrap())
        );
        let u = HttpUrl::parse("https://127.0.0.1:8090/").unwrap();
        assert_eq!(
            u.server_name,
            Some(ServerName::IpAddress(
                "127.0.0.1".parse::<IpAddr>().unwrap().into()
            ))
        );
        assert!(HttpUrl::parse("ftp://x/")
            .unwrap_err()
            .contains("has scheme \"ftp\""));
        assert!(HttpUrl::parse("127.0.0.1:8088/health").is_err());
        assert!(HttpUrl::parse("http://:80/").is_err());
        assert!(HttpUrl::parse("http://x:99999/").is_err());
        assert!(HttpUrl::parse("http://u:p@x/")
            .unwrap_err()
            .contains("user name or password"));
    }

    /// The status and reason phrase of `answer`, as the check reads them from a server
    /// that sends it.
    async fn answered(answer: &'static str) -> Result<(u16, String), String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let probe = HttpProbe::new("http://127.0.0.1:1/health", None).unwrap();
        let (client, mut server) = tokio::io::duplex(4096);
        let serve = tokio::spawn(async move {
            let mut request = [0u8; 1024];
            let _ = server.read(&mut request).await;
            let _ = server.write_all(answer.as_bytes()).await;
            let _ = server.shutdown().await;
        });
        let got = probe.exchange(client).await;
        let _ = serve.await;
        got
    }

    #[tokio::test]
    async fn status_lines() {
        assert_eq!(
            answered("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").await,
            Ok((200, "OK".into()))
        );
        assert_eq!(
            answered("HTTP/1.0 503 Service Unavailable\r\n\r\n").await,
            Ok((503, "Service Unavailable".into()))
        );
        assert_eq!(
            answered("HTTP/1.1 200 Status 200\r\n\r\n").await,
            Ok((200, "Status 200".into()))
        );
        assert_eq!(
            answered("HTTP/1.1 204\r\n\r\n").await,
            Ok((204, String::new()))
        );
        let ssh = answered("SSH-2.0-OpenSSH\r\n").await;
        assert!(
            ssh.as_ref()
                .is_err_and(|e| e.starts_with("the answer is not HTTP")),
            "{ssh:?}"
        );
        assert!(answered("HTTP/1.1 abc\r\n\r\n").await.is_err());
        assert_eq!(
            answered("").await,
            Err("connection closed without an answer".into())
        );
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
