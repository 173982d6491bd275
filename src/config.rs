//! TOML -> typed, validated [`Config`] (SPEC §2). All defaults and checks live here.
//!
//! Reading a config goes through four steps, each of which can stop with a
//! [`ConfigError`] that names the file, line, column and dotted key:
//!
//! 1. the TOML syntax, parsed with spans ([`toml::de::DeTable`]);
//! 2. the *schema*: every key known (a typo gets the nearest valid key suggested), every
//!    value of the right type, durations with units, required keys present;
//! 3. serde builds the typed [`Config`] (which cannot fail once the schema passed);
//! 4. the rules that relate values to each other (modes, fencing, ACLs), checked on the
//!    typed config and reported at the place in the file the value came from.
//!
//! [`parse`] does all of that without touching the filesystem; [`load`] reads the file,
//! parses it and then checks the files the config points at (private keys and the
//! ZooKeeper auth file must exist and be private, as OpenSSH demands of keys).
//!
//! Key paths count `[[fence]]` tables from 0, as TOML tooling does: `fence[0]` is the
//! first one in the file.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;
use toml::de::{DeTable, DeValue};
use toml::Spanned;
use warden_fencing::{FenceMethod, ScriptProtocol, SignalName};

/// The whole configuration file.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub cluster: ClusterConfig,
    pub coordination: CoordinationConfig,
    #[serde(default)]
    pub election: ElectionConfig,
    pub service: ServiceConfig,
    #[serde(default)]
    pub health: HealthConfig,
    #[serde(default)]
    pub fence: Vec<FenceMethod>,
    #[serde(default)]
    pub api: Option<ApiConfig>,
    #[serde(default)]
    pub log: LogConfig,
}

/// `[cluster]`: which election this node takes part in, and how peers reach it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// One election scope: `<root>/<name>` in ZooKeeper.
    pub name: String,
    /// Unique in the cluster: `[A-Za-z0-9._-]{1,64}`.
    pub node_id: String,
    /// How peers reach this node for fencing; default: the hostname.
    #[serde(default)]
    pub host: Option<String>,
    /// The managed service's port, if it has one (used by fencing).
    #[serde(default)]
    pub port: Option<u16>,
}

/// `[coordination]`: which coordination service elects the active.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CoordinationConfig {
    #[serde(default)]
    pub backend: Backend,
    /// Required with `backend = "zookeeper"`; when absent it holds the defaults (an empty
    /// `connect`), and only the chosen backend's table is used.
    #[serde(default, skip_serializing_if = "ZooKeeperConfig::is_unset")]
    pub zookeeper: ZooKeeperConfig,
    #[serde(default)]
    pub mysql: Option<MysqlConfig>,
    #[serde(default)]
    pub redis: Option<RedisConfig>,
}

/// The coordination service backend.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    #[default]
    Zookeeper,
    Mysql,
    Redis,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Zookeeper => "zookeeper",
            Backend::Mysql => "mysql",
            Backend::Redis => "redis",
        }
    }
}

/// `[coordination.mysql]` (SPEC §3a).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MysqlConfig {
    /// `mysql://user@host:port/database`; never a password (that goes in `password_file`).
    pub url: String,
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    #[serde(default = "default_session_timeout", with = "humantime_serde")]
    pub session_timeout: Duration,
    #[serde(default = "default_poll_interval", with = "humantime_serde")]
    pub poll_interval: Duration,
    #[serde(default = "default_connect_timeout", with = "humantime_serde")]
    pub connect_timeout: Duration,
    #[serde(default = "default_table_prefix")]
    pub table_prefix: String,
}

/// `[coordination.redis]` (SPEC §3a).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://host:port/db` or `rediss://...`; never a password.
    pub url: String,
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    #[serde(default = "default_session_timeout", with = "humantime_serde")]
    pub session_timeout: Duration,
    #[serde(default = "default_poll_interval", with = "humantime_serde")]
    pub poll_interval: Duration,
    #[serde(default = "default_connect_timeout", with = "humantime_serde")]
    pub connect_timeout: Duration,
    #[serde(default = "default_key_prefix")]
    pub key_prefix: String,
}

/// `[coordination.zookeeper]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ZooKeeperConfig {
    /// `host:port[,host:port...][/chroot]`
    pub connect: String,
    /// The parent znode of every cluster.
    #[serde(default = "default_root")]
    pub root: String,
    #[serde(default = "default_session_timeout", with = "humantime_serde")]
    pub session_timeout: Duration,
    #[serde(default = "default_connect_timeout", with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// `scheme:credentials`, e.g. `digest:warden:secret`.
    #[serde(default)]
    pub auth: Option<String>,
    /// A file holding the `auth` string; must not be readable by group or others.
    #[serde(default)]
    pub auth_file: Option<PathBuf>,
    #[serde(default)]
    pub acl: AclMode,
}

/// The ACL warden puts on the znodes it creates.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AclMode {
    /// World-writable: anyone who can reach ZooKeeper can change the election.
    #[default]
    Open,
    /// Only the authenticated user (digest ACL) may change them.
    Creator,
}

/// `[election]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ElectionConfig {
    /// After a failed promotion or fencing, before trying again (doubles up to 30s).
    #[serde(default = "default_rejoin_delay", with = "humantime_serde")]
    pub rejoin_delay: Duration,
    /// SPEC §6: 0 = never promoted by itself; higher wins the race for a free lock.
    #[serde(default = "default_priority")]
    pub priority: u16,
}

impl Default for ElectionConfig {
    fn default() -> Self {
        ElectionConfig {
            rejoin_delay: default_rejoin_delay(),
            priority: default_priority(),
        }
    }
}

fn default_priority() -> u16 {
    100
}

/// How warden controls the managed service.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ServiceMode {
    /// warden starts the service on the active and stops it on demotion.
    #[default]
    Spawn,
    /// The service always runs; warden calls `promote` / `demote` hooks.
    Hooks,
}

/// `[service]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    #[serde(default)]
    pub mode: ServiceMode,
    /// spawn: the service's program and arguments.
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default = "default_stop_signal")]
    pub stop_signal: SignalName,
    #[serde(default = "default_stop_timeout", with = "humantime_serde")]
    pub stop_timeout: Duration,
    /// hooks: run to promote / demote the always-running service.
    #[serde(default)]
    pub promote: Vec<String>,
    #[serde(default)]
    pub demote: Vec<String>,
    /// hooks, optional: run on each standby when a new active is promoted, and at start
    /// when one exists (SPEC §6): the place to repoint a replica.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub follow: Vec<String>,
    #[serde(default = "default_hook_timeout", with = "humantime_serde")]
    pub hook_timeout: Duration,
    /// hooks: the service's pid, so that fencing and forced demotion kill the right process.
    #[serde(default)]
    pub pidfile: Option<PathBuf>,
}

/// How the service's health is checked.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum HealthKind {
    Exec,
    Tcp,
    Http,
    #[default]
    None,
}

/// `[health]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HealthConfig {
    #[serde(default)]
    pub kind: HealthKind,
    /// tcp: `host:port` to connect to.
    #[serde(default)]
    pub address: Option<String>,
    /// http: a 2xx answer is healthy.
    #[serde(default)]
    pub url: Option<String>,
    /// http with an https URL: a PEM file of CA certificates trusted besides the host's.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// exec: exit 0 is healthy.
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default = "default_health_interval", with = "humantime_serde")]
    pub interval: Duration,
    #[serde(default = "default_health_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Consecutive failures before unhealthy.
    #[serde(default = "default_fall")]
    pub fall: u32,
    /// Consecutive passes before healthy.
    #[serde(default = "default_rise")]
    pub rise: u32,
    /// spawn mode: checks of a just-started service do not count yet.
    #[serde(default = "default_start_grace", with = "humantime_serde")]
    pub start_grace: Duration,
    /// spawn mode: exit 0 = this standby may take over; default: always eligible.
    #[serde(default)]
    pub standby_command: Vec<String>,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            kind: HealthKind::None,
            address: None,
            url: None,
            ca_file: None,
            command: Vec::new(),
            interval: default_health_interval(),
            timeout: default_health_timeout(),
            fall: default_fall(),
            rise: default_rise(),
            start_grace: default_start_grace(),
            standby_command: Vec::new(),
        }
    }
}

/// `[api]`: the HTTP listener for role checks and metrics.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    pub listen: SocketAddr,
}

/// The log line format.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// `[log]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// A tracing `EnvFilter` directive; `RUST_LOG` overrides it.
    #[serde(default = "default_log_level")]
    pub level: String,
    #[serde(default)]
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: default_log_level(),
            format: LogFormat::Text,
        }
    }
}

fn default_root() -> String {
    "/warden".to_string()
}
fn default_poll_interval() -> Duration {
    Duration::from_millis(250)
}
fn default_table_prefix() -> String {
    "warden_".to_string()
}
fn default_key_prefix() -> String {
    "warden".to_string()
}

impl ZooKeeperConfig {
    /// Absent from the file (another backend is used).
    fn is_unset(&self) -> bool {
        *self == ZooKeeperConfig::default()
    }
}

impl Default for ZooKeeperConfig {
    fn default() -> Self {
        ZooKeeperConfig {
            connect: String::new(),
            root: default_root(),
            session_timeout: default_session_timeout(),
            connect_timeout: default_connect_timeout(),
            auth: None,
            auth_file: None,
            acl: AclMode::default(),
        }
    }
}
fn default_session_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_connect_timeout() -> Duration {
    Duration::from_secs(5)
}
fn default_rejoin_delay() -> Duration {
    Duration::from_secs(1)
}
fn default_stop_signal() -> SignalName {
    SignalName(nix::sys::signal::Signal::SIGTERM)
}
fn default_stop_timeout() -> Duration {
    Duration::from_secs(3)
}
/// 3s: with the default session timeout (10s, lease 5s, renewals every 1.67s) a demote
/// hook then still fits in what is left of the lease after one late renewal, so the
/// defaults do not warn against each other (`check-config`).
fn default_hook_timeout() -> Duration {
    Duration::from_secs(3)
}
fn default_health_interval() -> Duration {
    Duration::from_secs(1)
}
fn default_health_timeout() -> Duration {
    Duration::from_secs(1)
}
fn default_fall() -> u32 {
    3
}
fn default_rise() -> u32 {
    2
}
fn default_start_grace() -> Duration {
    Duration::from_secs(10)
}
fn default_log_level() -> String {
    "info".to_string()
}

/// The shortest session timeout accepted. Below it the lease (1/2) and renewal interval
/// (1/6, about 33ms) are shorter than one round trip to a loaded ensemble, so the active
/// would demote itself on ordinary jitter.
pub const MIN_SESSION_TIMEOUT: Duration = Duration::from_millis(200);

/// The range a duration key may take, and why its ends are where they are. Every duration
/// is bounded: a value near `u64::MAX` seconds passes humantime but overflows the first
/// `Instant + duration` it meets, and a value of a few nanoseconds is a busy loop.
pub struct DurationRange {
    pub min: Duration,
    pub max: Duration,
    /// Why shorter is refused: `(the lease is half of it ...)`.
    short: &'static str,
    /// Why longer is refused.
    long: &'static str,
}

/// The shortest timeout or delay: warden's timers count whole milliseconds, so anything
/// shorter is zero to them.
const MIN_TIMER: Duration = Duration::from_millis(1);
const TIMER_RESOLUTION: &str = "warden's timers count whole milliseconds";

const ONE_HOUR: Duration = Duration::from_secs(3600);

/// `session_timeout`: below 200ms the lease cannot outlast a round trip; above an hour a
/// dead active goes unreplaced for longer than any outage is worth riding out.
pub const SESSION_TIMEOUT_RANGE: DurationRange = DurationRange {
    min: MIN_SESSION_TIMEOUT,
    max: ONE_HOUR,
    short: "the lease is half of it and is renewed every sixth, which must outlast a round \
            trip to ZooKeeper",
    long: "a node that died is noticed only this long after, so its service stays down as \
           long",
};

/// `connect_timeout` bounds every operator command against an unreachable ZooKeeper
/// (SPEC §9: they exit 3 within it); ten minutes is already far past a human's patience.
pub const CONNECT_TIMEOUT_RANGE: DurationRange = DurationRange {
    min: MIN_TIMER,
    max: Duration::from_secs(600),
    short: TIMER_RESOLUTION,
    long: "every operator command waits this long before it reports ZooKeeper unreachable",
};

/// MySQL's and Redis's `session_timeout`: one statement is a round trip plus a row lock,
/// so a second is the least that leaves room for renewals (every sixth of it).
pub const STORE_SESSION_RANGE: DurationRange = DurationRange {
    min: Duration::from_secs(1),
    max: Duration::from_secs(600),
    short: "the lease is half of it and is renewed every sixth, which must outlast a \
            statement on a busy database",
    long: "a node that died is noticed only this long after, so its service stays down as \
           long",
};

/// `poll_interval`: standbys read the lock this often.
pub const POLL_INTERVAL_RANGE: DurationRange = DurationRange {
    min: Duration::from_millis(10),
    max: Duration::from_secs(60),
    short: "each standby reads the lock this often: shorter only loads the database",
    long: "a standby notices a released lock only this late",
};

/// The longest rejoin delay after repeated failures (SPEC §4.8): the elector's back-off
/// stops there.
pub const MAX_REJOIN_DELAY: Duration = Duration::from_secs(30);

/// `rejoin_delay` doubles after each failure up to the elector's 30s ceiling (SPEC §4.8),
/// so a longer value would silently be cut to 30s.
pub const REJOIN_DELAY_RANGE: DurationRange = DurationRange {
    min: MIN_TIMER,
    max: MAX_REJOIN_DELAY,
    short: TIMER_RESOLUTION,
    long: "the back-off after repeated failures stops there, so a longer delay would be cut \
           short",
};

/// `stop_timeout` and `hook_timeout`: a database's shutdown checkpoint can take minutes;
/// an hour is generous, and a failover waits for the old active's stop.
pub const GRACEFUL_STOP_RANGE: DurationRange = DurationRange {
    min: MIN_TIMER,
    max: ONE_HOUR,
    short: TIMER_RESOLUTION,
    long: "a stop or hook that hangs holds up the failover for this long",
};

/// `health.interval`: checking more often than every 10ms is a busy loop against the
/// service it watches; checking less often than hourly leaves a dead service unnoticed.
pub const HEALTH_INTERVAL_RANGE: DurationRange = DurationRange {
    min: Duration::from_millis(10),
    max: ONE_HOUR,
    short: "checks more often than that keep the service and the host busy answering them",
    long: "a failed service would go unnoticed for longer",
};

/// `health.timeout`: a check that hangs for an hour is a failed check.
pub const HEALTH_TIMEOUT_RANGE: DurationRange = DurationRange {
    min: MIN_TIMER,
    max: ONE_HOUR,
    short: TIMER_RESOLUTION,
    long: "a hung check would delay the next one for longer",
};

/// `health.start_grace` may be 0 (no grace). Crash recovery of a large database can take
/// hours, so the ceiling is a day rather than an hour.
pub const START_GRACE_RANGE: DurationRange = DurationRange {
    min: Duration::ZERO,
    max: Duration::from_secs(24 * 3600),
    short: "",
    long: "a service that fails while it starts would stay active and failed for longer",
};

/// Every `[[fence]] timeout`: an IPMI power-off takes up to a minute or two; a failover
/// waits for each attempt, and an hour covers even a slow one many times over.
pub const FENCE_TIMEOUT_RANGE: DurationRange = DurationRange {
    min: MIN_TIMER,
    max: ONE_HOUR,
    short: TIMER_RESOLUTION,
    long: "a failover waits for each fence attempt, which would hold it up for this long",
};

impl Config {
    /// The host peers use to reach this node: `cluster.host`, else this machine's hostname.
    pub fn host(&self) -> String {
        self.cluster.host.clone().unwrap_or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .unwrap_or_else(|| "localhost".to_string())
        })
    }

    /// The graceful demotion time: `stop_timeout` in spawn mode, `hook_timeout` in hooks mode.
    pub fn demote_grace(&self) -> Duration {
        match self.service.mode {
            ServiceMode::Spawn => self.service.stop_timeout,
            ServiceMode::Hooks => self.service.hook_timeout,
        }
    }

    /// The session timeout asked of the coordination store (the store may grant less).
    pub fn session_timeout(&self) -> Duration {
        self.store()
            .map_or(self.coordination.zookeeper.session_timeout, |s| {
                s.session_timeout
            })
    }

    /// How often the active renews its lease: `session_timeout / 6` (SPEC §4).
    pub fn renewal_interval(&self) -> Duration {
        self.session_timeout() / 6
    }

    /// How long a lease lasts after the send time of its last acknowledged renewal:
    /// `session_timeout / 2` (SPEC §4).
    pub fn lease(&self) -> Duration {
        self.session_timeout() / 2
    }
}

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/// A place in a config file. Lines and columns count from 1; columns count characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub path: PathBuf,
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            shown_path(&self.path),
            self.line,
            self.column
        )
    }
}

/// Why a config was refused. Each displays as one sentence naming the file, line, column
/// and dotted key (`coordination.zookeeper.session_timeout`, `fence[2].timeout`), except
/// [`ConfigError::Read`], which has no line to name, and the file checks of
/// [`Config::read_auth`] at run time, which name the key and the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read {}: {}", shown_path(.path), io_reason(.error))]
    Read { path: PathBuf, error: io::Error },
    /// The text is not valid TOML.
    #[error("{at}: invalid TOML: {message}")]
    Syntax { at: Location, message: String },
    /// A key that no table of the config has.
    #[error("{at}: unknown key `{}` {context}", one_line(.name))]
    UnknownKey {
        at: Location,
        key: String,
        name: String,
        /// Where it was and what was probably meant: `in [coordination.zookeeper]; did you
        /// mean `session_timeout`?`.
        context: String,
    },
    /// A required key or table is absent; `at` is the table that lacks it.
    #[error("{at}: missing required {what}")]
    MissingKey {
        at: Location,
        key: String,
        /// `key `node_id` in [cluster]`, `table [service]`.
        what: String,
    },
    /// A value of the wrong TOML type.
    #[error("{at}: `{key}` must be {expected}, not {found}")]
    WrongType {
        at: Location,
        key: String,
        expected: String,
        found: String,
    },
    /// A value of the right type that is not allowed.
    #[error("{at}: `{key}` {reason}")]
    Invalid {
        at: Location,
        key: String,
        reason: String,
    },
    /// A secret file readable by someone other than its owner (SPEC §9).
    #[error(
        "{}`{key}`: {} can be read or written by group or others (mode {mode:04o}); \
         run `chmod 600 {}`",
        prefix(.at), shown_path(.file), shown_path(.file)
    )]
    InsecureFile {
        at: Option<Location>,
        key: String,
        file: PathBuf,
        mode: u32,
    },
    /// A file the config names that cannot be used.
    #[error("{}`{key}`: cannot read {}: {}", prefix(.at), shown_path(.file), io_reason(.error))]
    UnreadableFile {
        at: Option<Location>,
        key: String,
        file: PathBuf,
        error: io::Error,
    },
}

impl ConfigError {
    /// The dotted key the error is about, if it is about one.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Read { .. } | ConfigError::Syntax { .. } => None,
            ConfigError::UnknownKey { key, .. }
            | ConfigError::MissingKey { key, .. }
            | ConfigError::WrongType { key, .. }
            | ConfigError::Invalid { key, .. }
            | ConfigError::InsecureFile { key, .. }
            | ConfigError::UnreadableFile { key, .. } => Some(key),
        }
    }

    /// Where in the config file the error is, if it is in the file.
    pub fn location(&self) -> Option<&Location> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Syntax { at, .. }
            | ConfigError::UnknownKey { at, .. }
            | ConfigError::MissingKey { at, .. }
            | ConfigError::WrongType { at, .. }
            | ConfigError::Invalid { at, .. } => Some(at),
            ConfigError::InsecureFile { at, .. } | ConfigError::UnreadableFile { at, .. } => {
                at.as_ref()
            }
        }
    }
}

fn prefix(at: &Option<Location>) -> String {
    at.as_ref().map(|at| format!("{at}: ")).unwrap_or_default()
}

/// `s` with its control characters escaped (`\n`, `\u{1b}`), so that a value echoed in a
/// message can neither break it over lines nor reach the terminal as an escape sequence.
fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    // Control characters, and the Unicode line separators and direction overrides, which
    // a terminal shows as a line break or uses to reorder the text around them.
    let unsafe_char = |c: char| {
        c.is_control()
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if s.chars().any(unsafe_char) {
        s.chars()
            .map(|c| {
                if unsafe_char(c) {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect::<String>()
            .into()
    } else {
        s.into()
    }
}

/// A path for a message, on one line.
fn shown_path(path: &Path) -> String {
    one_line(&path.display().to_string()).into_owned()
}

/// A value as written in TOML, quoted and escaped: `"rm 1"`, `"a\nb"`.
/// A MySQL or Redis URL warden can use: the backend's scheme, a host, for MySQL a
/// database, and no password (it belongs in `password_file`, mode 0600).
fn check_store_url(backend: Backend, text: &str) -> Result<(), String> {
    let url = url::Url::parse(text).map_err(|e| format!("is not a URL ({e})"))?;
    if url.password().is_some() {
        return Err(
            "contains a password: put it in password_file (mode 0600) instead, and \
                    remove it from the URL"
                .into(),
        );
    }
    let schemes: &[&str] = match backend {
        Backend::Mysql => &["mysql"],
        _ => &["redis", "rediss"],
    };
    if !schemes.contains(&url.scheme()) {
        return Err(format!(
            "has scheme {:?}: use {}",
            url.scheme(),
            quoted_list(schemes)
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("names no host: write it as in mysql://warden@db1:3306/warden".into());
    }
    if backend == Backend::Mysql && url.path().trim_matches('/').is_empty() {
        return Err(
            "names no database: add it as the path, as in mysql://warden@db1:3306/warden".into(),
        );
    }
    Ok(())
}

fn quoted(s: &str) -> String {
    format!("{s:?}")
}

/// `No such file or directory` rather than `No such file or directory (os error 2)`: the
/// number tells an operator nothing.
fn io_reason(error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(code) => nix::errno::Errno::from_raw(code).desc().to_string(),
        None => error.to_string(),
    }
}

// ---------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------

/// Reads, parses and validates the config at `path`, then checks the files it names: an
/// ssh `identity_file` and the ZooKeeper `auth_file` must exist, be readable and not be
/// accessible by group or others; `known_hosts` must be readable; a script fence given by
/// absolute path must be an executable file. These checks live here rather than in
/// [`parse`] so that a config can be checked on a machine that lacks its files.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let read_error = |error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    };
    let bytes = read_regular_file(path, MAX_CONFIG_BYTES).map_err(read_error)?;
    let text = String::from_utf8(bytes).map_err(|_| {
        read_error(io::Error::new(
            io::ErrorKind::InvalidData,
            "it is not UTF-8 text",
        ))
    })?;
    let source = Source::new(&text, path)?;
    let config = source.build()?;
    check_files(&config, &source)?;
    Ok(config)
}

/// Parses and validates config text; `path` only names the file in errors. Touches no
/// file: see [`load`] for the checks of the files the config names.
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    Source::new(text, path)?.build()
}

/// Whether `s` is a valid cluster name or node id: `[A-Za-z0-9._-]{1,64}`. Node ids
/// appear in znode paths and in fence agents' `plug=` lines, so nothing else is allowed.
pub fn is_valid_id(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

// ---------------------------------------------------------------------------------------
// Key paths and locations
// ---------------------------------------------------------------------------------------

/// One step of a dotted key path.
#[derive(Clone, Debug)]
enum Seg {
    Key(String),
    Index(usize),
}

/// A dotted key path such as `fence[2].options.password`.
#[derive(Clone, Debug, Default)]
struct KeyPath(Vec<Seg>);

impl KeyPath {
    fn of(keys: &[&str]) -> KeyPath {
        KeyPath(keys.iter().map(|k| Seg::Key(k.to_string())).collect())
    }
    fn key(&self, key: &str) -> KeyPath {
        let mut p = self.clone();
        p.0.push(Seg::Key(key.to_string()));
        p
    }
    fn index(&self, i: usize) -> KeyPath {
        let mut p = self.clone();
        p.0.push(Seg::Index(i));
        p
    }
    fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    if !k.is_empty()
                        && k.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                    {
                        f.write_str(k)?;
                    } else {
                        write!(f, "{k:?}")?;
                    }
                }
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// The parsed text with its spans, so that any value can be traced back to a line.
struct Source<'a> {
    path: &'a Path,
    text: &'a str,
    doc: Spanned<DeTable<'a>>,
    /// The offset of every line's first byte, so that locating an offset is a binary
    /// search rather than a count of the newlines before it: a config with many errors
    /// would otherwise take quadratic time.
    line_starts: Vec<usize>,
}

/// The errors the schema found, of which only the one to report is kept (built only when
/// it beats the one kept so far), and a count of the unknown keys.
#[derive(Default)]
struct Findings {
    best: Option<(Rank, usize, ConfigError)>,
    unknown_keys: usize,
}

impl Findings {
    /// Records an error of `rank` at offset `pos`; `error` runs only if this is now the
    /// first error to report (the lowest rank, then the earliest in the file).
    fn push(&mut self, rank: Rank, pos: usize, error: impl FnOnce() -> ConfigError) {
        if rank == Rank::Unknown {
            self.unknown_keys += 1;
        }
        if self
            .best
            .as_ref()
            .is_none_or(|(r, p, _)| (rank, pos) < (*r, *p))
        {
            self.best = Some((rank, pos, error()));
        }
    }

    /// The error to report. Of many unknown keys (a file that is not a warden config) it
    /// names the first and counts the rest, so the operator knows there is more to fix.
    fn into_error(self) -> Option<ConfigError> {
        let more = self.unknown_keys.saturating_sub(1);
        self.best.map(|(_, _, error)| match error {
            ConfigError::UnknownKey {
                at,
                key,
                name,
                context,
            } if more > 0 => ConfigError::UnknownKey {
                at,
                key,
                name,
                context: format!(
                    "{context} ({more} more unknown key{} follow{})",
                    if more == 1 { "" } else { "s" },
                    if more == 1 { "s" } else { "" }
                ),
            },
            other => other,
        })
    }
}

/// How an error found by the schema ranks: an unknown key (most likely a typo, which
/// also makes the intended key look missing) is reported first, a missing key last.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rank {
    Unknown,
    Value,
    Missing,
}

impl<'a> Source<'a> {
    fn new(text: &'a str, path: &'a Path) -> Result<Source<'a>, ConfigError> {
        match DeTable::parse(text) {
            Ok(doc) => Ok(Source {
                path,
                text,
                doc,
                line_starts: line_starts(text),
            }),
            Err(e) => {
                let span = e.span().unwrap_or(0..0);
                let mut message = one_line(e.message().trim()).into_owned();
                // toml says only "duplicate key"; name it, as every other error does.
                if message == "duplicate key" {
                    if let Some(key) = text.get(span.clone()).filter(|k| !k.contains('\n')) {
                        message = format!("duplicate key `{}`", one_line(key));
                    }
                }
                Err(ConfigError::Syntax {
                    at: locate(path, text, &line_starts(text), span.start),
                    message,
                })
            }
        }
    }

    fn location(&self, offset: usize) -> Location {
        locate(self.path, self.text, &self.line_starts, offset)
    }

    /// Whether `path` is set in the file.
    fn has(&self, path: &KeyPath) -> bool {
        let mut table: &DeTable<'a> = self.doc.get_ref();
        for (i, seg) in path.0.iter().enumerate() {
            let Seg::Key(k) = seg else { return false };
            let Some(next) = table.get(k.as_str()) else {
                return false;
            };
            match next.get_ref() {
                DeValue::Table(t) => table = t,
                _ => return i + 1 == path.0.len(),
            }
        }
        true
    }

    /// Where the value at `path` is, or, when it is absent, the deepest table on the way
    /// to it: a missing key is reported at the table that lacks it.
    fn at(&self, path: &KeyPath) -> Location {
        let mut span = self.doc.span();
        let mut table: &DeTable<'a> = self.doc.get_ref();
        let mut array: Option<&[Spanned<DeValue<'a>>]> = None;
        for seg in &path.0 {
            let next = match (seg, array) {
                (Seg::Key(k), None) => table.get(k.as_str()),
                (Seg::Index(i), Some(items)) => items.get(*i),
                _ => None,
            };
            let Some(next) = next else {
                break;
            };
            span = next.span();
            array = None;
            match next.get_ref() {
                DeValue::Table(t) => table = t,
                DeValue::Array(a) => array = Some(a),
                _ => {}
            }
        }
        self.location(span.start)
    }

    /// A refused value. The reason may echo the value, so control characters in it are
    /// escaped: an error is one line (SPEC §7).
    fn invalid(&self, path: &KeyPath, reason: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            at: self.at(path),
            key: path.to_string(),
            reason: one_line(&reason.into()).into_owned(),
        }
    }

    /// Steps 2 to 4 of the module docs.
    fn build(&self) -> Result<Config, ConfigError> {
        let mut found = Findings::default();
        self.check_table(
            ROOT,
            self.doc.get_ref(),
            self.doc.span(),
            &KeyPath::default(),
            &mut found,
        );
        if let Some(err) = found.into_error() {
            return Err(err);
        }
        let config: Config = toml::from_str(self.text).map_err(|e| self.serde_error(&e))?;
        self.validate(&config)?;
        Ok(config)
    }

    /// The schema is meant to catch everything serde would refuse; this maps whatever it
    /// missed to the same kind of message, located by the error's span.
    fn serde_error(&self, e: &toml::de::Error) -> ConfigError {
        let span = e.span().unwrap_or(0..0);
        ConfigError::Invalid {
            at: self.location(span.start),
            key: self.key_at(span.start).to_string(),
            reason: format!("is not valid: {}", one_line(e.message().trim())),
        }
    }

    /// The key path of the innermost value whose span holds `offset`. Every value is
    /// searched, since a table's span covers only its `[header]`, not its keys.
    fn key_at(&self, offset: usize) -> KeyPath {
        fn visit(
            value: &Spanned<DeValue<'_>>,
            path: KeyPath,
            offset: usize,
            best: &mut Option<(usize, KeyPath)>,
        ) {
            let span = value.span();
            if span.start <= offset && offset <= span.end {
                let len = span.end - span.start;
                if best.as_ref().is_none_or(|(b, _)| len <= *b) {
                    *best = Some((len, path.clone()));
                }
            }
            match value.get_ref() {
                DeValue::Table(t) => {
                    for (k, v) in t.iter() {
                        visit(v, path.key(k.get_ref()), offset, best);
                    }
                }
                DeValue::Array(a) => {
                    for (i, v) in a.iter().enumerate() {
                        visit(v, path.index(i), offset, best);
                    }
                }
                _ => {}
            }
        }
        let mut best = None;
        for (k, v) in self.doc.get_ref().iter() {
            visit(v, KeyPath::default().key(k.get_ref()), offset, &mut best);
        }
        best.map(|(_, path)| path).unwrap_or_default()
    }
}

/// The offset of every line's first byte.
fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect()
}

/// The line and column (in characters) of a byte offset, found in `line_starts` by binary
/// search: locating many errors must not cost a scan of the text each.
fn locate(path: &Path, text: &str, line_starts: &[usize], offset: usize) -> Location {
    let offset = offset.min(text.len());
    // line_starts[0] is 0, so at least one start is <= offset.
    let line = line_starts.partition_point(|&start| start <= offset);
    let line_start = line_starts[..line].last().copied().unwrap_or(0);
    let column = text
        .get(line_start..offset)
        .map(|s| s.chars().count())
        .unwrap_or(0)
        + 1;
    Location {
        path: path.to_path_buf(),
        line: line.max(1),
        column,
    }
}

// ---------------------------------------------------------------------------------------
// Schema: which keys exist, their types, which are required
// ---------------------------------------------------------------------------------------

/// The type of a value in the file. The schema mirrors the serde structs above (a test
/// checks that the key names match) and adds what serde cannot say well: units on
/// durations, the expected choices, which key of which table was wrong.
#[derive(Clone, Copy)]
enum Kind {
    Str,
    Int {
        min: i64,
        max: i64,
    },
    Duration,
    Signal,
    Choice(&'static [&'static str]),
    StrList,
    StrMap,
    SocketAddr,
    Table(&'static [Field]),
    /// The `[[fence]]` array: each table's `kind` selects its schema.
    Fences,
}

#[derive(Clone, Copy)]
struct Field {
    name: &'static str,
    kind: Kind,
    required: bool,
}

const fn req(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        required: true,
    }
}

const fn opt(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        required: false,
    }
}

const PORT: Kind = Kind::Int { min: 1, max: 65535 };
const COUNT: Kind = Kind::Int {
    min: 1,
    max: u32::MAX as i64,
};

const ROOT: &[Field] = &[
    req("cluster", Kind::Table(CLUSTER)),
    req("coordination", Kind::Table(COORDINATION)),
    opt("election", Kind::Table(ELECTION)),
    req("service", Kind::Table(SERVICE)),
    opt("health", Kind::Table(HEALTH)),
    opt("fence", Kind::Fences),
    opt("api", Kind::Table(API)),
    opt("log", Kind::Table(LOG)),
];
const CLUSTER: &[Field] = &[
    req("name", Kind::Str),
    req("node_id", Kind::Str),
    opt("host", Kind::Str),
    opt("port", PORT),
];
const COORDINATION: &[Field] = &[
    opt("backend", Kind::Choice(&["zookeeper", "mysql", "redis"])),
    opt("zookeeper", Kind::Table(ZOOKEEPER)),
    opt("mysql", Kind::Table(MYSQL)),
    opt("redis", Kind::Table(REDIS)),
];
const MYSQL: &[Field] = &[
    req("url", Kind::Str),
    opt("password_file", Kind::Str),
    opt("session_timeout", Kind::Duration),
    opt("poll_interval", Kind::Duration),
    opt("connect_timeout", Kind::Duration),
    opt("table_prefix", Kind::Str),
];
const REDIS: &[Field] = &[
    req("url", Kind::Str),
    opt("password_file", Kind::Str),
    opt("session_timeout", Kind::Duration),
    opt("poll_interval", Kind::Duration),
    opt("connect_timeout", Kind::Duration),
    opt("key_prefix", Kind::Str),
];
const ZOOKEEPER: &[Field] = &[
    req("connect", Kind::Str),
    opt("root", Kind::Str),
    opt("session_timeout", Kind::Duration),
    opt("connect_timeout", Kind::Duration),
    opt("auth", Kind::Str),
    opt("auth_file", Kind::Str),
    opt("acl", Kind::Choice(&["open", "creator"])),
];
const ELECTION: &[Field] = &[
    opt("rejoin_delay", Kind::Duration),
    opt("priority", Kind::Int { min: 0, max: 1000 }),
];
const SERVICE: &[Field] = &[
    opt("mode", Kind::Choice(&["spawn", "hooks"])),
    opt("command", Kind::StrList),
    opt("stop_signal", Kind::Signal),
    opt("stop_timeout", Kind::Duration),
    opt("promote", Kind::StrList),
    opt("demote", Kind::StrList),
    opt("follow", Kind::StrList),
    opt("hook_timeout", Kind::Duration),
    opt("pidfile", Kind::Str),
];
const HEALTH: &[Field] = &[
    opt("kind", Kind::Choice(&["exec", "tcp", "http", "none"])),
    opt("address", Kind::Str),
    opt("url", Kind::Str),
    opt("ca_file", Kind::Str),
    opt("command", Kind::StrList),
    opt("interval", Kind::Duration),
    opt("timeout", Kind::Duration),
    opt("fall", COUNT),
    opt("rise", COUNT),
    opt("start_grace", Kind::Duration),
    opt("standby_command", Kind::StrList),
];
const API: &[Field] = &[req("listen", Kind::SocketAddr)];
const LOG: &[Field] = &[
    opt("level", Kind::Str),
    opt("format", Kind::Choice(&["text", "json"])),
];
const FENCE_KINDS: &[&str] = &["ssh", "signal", "script"];
const FENCE_SSH: &[Field] = &[
    req("kind", Kind::Choice(FENCE_KINDS)),
    req("user", Kind::Str),
    opt("port", PORT),
    req("identity_file", Kind::Str),
    req("known_hosts", Kind::Str),
    opt("timeout", Kind::Duration),
    opt("command", Kind::Str),
    opt("nodes", Kind::StrList),
];
const FENCE_SIGNAL: &[Field] = &[
    req("kind", Kind::Choice(FENCE_KINDS)),
    opt("signal", Kind::Signal),
    opt("timeout", Kind::Duration),
    opt("nodes", Kind::StrList),
];
const FENCE_SCRIPT: &[Field] = &[
    req("kind", Kind::Choice(FENCE_KINDS)),
    req("command", Kind::StrList),
    opt("protocol", Kind::Choice(&["env", "fence-agent"])),
    opt("options", Kind::StrMap),
    opt("timeout", Kind::Duration),
    opt("nodes", Kind::StrList),
];

fn fence_schema(kind: &str) -> Option<&'static [Field]> {
    match kind {
        "ssh" => Some(FENCE_SSH),
        "signal" => Some(FENCE_SIGNAL),
        "script" => Some(FENCE_SCRIPT),
        _ => None,
    }
}

/// Every table of the schema with the words that name it in a message, so that a key
/// written in the wrong table can be pointed to the right one.
fn all_tables() -> Vec<(String, &'static [Field])> {
    let mut out = Vec::new();
    fn walk(label: String, fields: &'static [Field], out: &mut Vec<(String, &'static [Field])>) {
        out.push((label.clone(), fields));
        for f in fields {
            if let Kind::Table(sub) = f.kind {
                let name = if label.is_empty() {
                    f.name.to_string()
                } else {
                    format!(
                        "{}.{}",
                        label.trim_matches(|c| c == '[' || c == ']'),
                        f.name
                    )
                };
                walk(format!("[{name}]"), sub, out);
            }
        }
    }
    walk(String::new(), ROOT, &mut out);
    for kind in FENCE_KINDS {
        if let Some(fields) = fence_schema(kind) {
            out.push((format!("a [[fence]] of kind = \"{kind}\""), fields));
        }
    }
    out
}

impl Kind {
    fn describe(&self) -> String {
        match self {
            Kind::Str => "a string".into(),
            Kind::Int { min, max } => format!("an integer {}", int_range(*min, *max)),
            Kind::Duration => "a duration with a unit, such as \"5s\" or \"250ms\"".into(),
            Kind::Signal => "a signal name such as \"SIGTERM\"".into(),
            Kind::Choice(choices) => format!("one of {}", quoted_list(choices)),
            Kind::StrList => "an array of strings".into(),
            Kind::StrMap => "a table of strings".into(),
            Kind::SocketAddr => "an address and port such as \"127.0.0.1:7232\"".into(),
            Kind::Table(_) => "a table".into(),
            Kind::Fences => "an array of tables, written [[fence]]".into(),
        }
    }
}

/// `from 1 to 65535`, or `at least 1` where the maximum is the type's own (noise).
fn int_range(min: i64, max: i64) -> String {
    if max >= i64::from(u32::MAX) {
        format!("at least {min}")
    } else {
        format!("from {min} to {max}")
    }
}

fn quoted_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("\"{s}\"")).collect();
    match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => quoted.join(""),
    }
}

fn type_name(value: &DeValue<'_>) -> String {
    match value {
        DeValue::Integer(_) => "an integer".into(),
        DeValue::Array(_) => "an array".into(),
        other => format!("a {}", other.type_str()),
    }
}

/// The closest of `candidates` to a misspelt `word`, if one is close enough to be the
/// likely intent.
fn nearest<'c>(word: &str, candidates: impl IntoIterator<Item = &'c str>) -> Option<&'c str> {
    let norm = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    let word_n = norm(word);
    candidates
        .into_iter()
        .map(|c| (strsim::osa_distance(&word_n, &norm(c)), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

impl Source<'_> {
    fn check_table(
        &self,
        fields: &'static [Field],
        table: &DeTable<'_>,
        span: std::ops::Range<usize>,
        path: &KeyPath,
        found: &mut Findings,
    ) {
        for (key, value) in table.iter() {
            let name: &str = key.get_ref();
            match fields.iter().find(|f| f.name == name) {
                Some(field) => self.check_value(field.kind, value, &path.key(name), found),
                None => found.push(Rank::Unknown, key.span().start, || {
                    ConfigError::UnknownKey {
                        at: self.location(key.span().start),
                        key: path.key(name).to_string(),
                        name: name.to_string(),
                        context: one_line(&format!(
                            "{}{}",
                            self.table_label(path, table),
                            unknown_key_hint(name, fields)
                        ))
                        .into_owned(),
                    }
                }),
            }
        }
        for field in fields.iter().filter(|f| f.required) {
            if table.get(field.name).is_none() {
                found.push(Rank::Missing, span.start, || {
                    let what = match (field.kind, path.is_root()) {
                        (Kind::Table(_), _) => format!("table [{}]", path.key(field.name)),
                        (_, true) => format!("key `{}`", field.name),
                        (_, false) => {
                            format!("key `{}` {}", field.name, self.table_label(path, table))
                        }
                    };
                    ConfigError::MissingKey {
                        at: self.location(span.start),
                        key: path.key(field.name).to_string(),
                        what,
                    }
                });
            }
        }
    }

    /// `in [coordination.zookeeper]`, `in fence[1] (kind = "ssh")`, `at the top level`.
    fn table_label(&self, path: &KeyPath, table: &DeTable<'_>) -> String {
        if path.is_root() {
            return "at the top level".to_string();
        }
        if matches!(path.0.last(), Some(Seg::Index(_))) {
            return match table.get("kind").and_then(|k| k.get_ref().as_str()) {
                Some(kind) => format!("in {path} (kind = {})", quoted(kind)),
                None => format!("in {path}"),
            };
        }
        format!("in [{path}]")
    }

    fn check_value(
        &self,
        kind: Kind,
        value: &Spanned<DeValue<'_>>,
        path: &KeyPath,
        found: &mut Findings,
    ) {
        let start = value.span().start;
        let v = value.get_ref();
        let wrong_type = |found: &mut Findings| {
            found.push(Rank::Value, start, || ConfigError::WrongType {
                at: self.location(start),
                key: path.to_string(),
                expected: kind.describe(),
                found: type_name(v),
            })
        };
        // The reason is built only for the error that is reported.
        let invalid = |found: &mut Findings, reason: &dyn Fn() -> String| {
            found.push(Rank::Value, start, || ConfigError::Invalid {
                at: self.location(start),
                key: path.to_string(),
                reason: one_line(&reason()).into_owned(),
            })
        };
        match kind {
            Kind::Str => match v.as_str() {
                // No file name, program, host or argument can hold a NUL, and a C library
                // call would silently cut the value short at it.
                Some(s) if s.contains('\0') => invalid(found, &|| {
                    format!(
                        "= {} contains a NUL character (\\u0000), which no name, path or \
                         argument can hold: remove it",
                        quoted(s)
                    )
                }),
                Some(_) => {}
                None => wrong_type(found),
            },
            Kind::Int { min, max } => match v.as_integer() {
                Some(i) => {
                    let n = i64::from_str_radix(i.as_str(), i.radix()).ok();
                    if !n.is_some_and(|n| (min..=max).contains(&n)) {
                        invalid(found, &|| {
                            format!(
                                "= {} is out of range: it must be {}",
                                i.as_str(),
                                int_range(min, max)
                            )
                        });
                    }
                }
                None => wrong_type(found),
            },
            Kind::Duration => match v {
                DeValue::String(s) => {
                    if let Err(reason) = parse_duration(s) {
                        invalid(found, &|| reason.clone());
                    }
                }
                DeValue::Integer(_) | DeValue::Float(_) => invalid(found, &|| {
                    let written = one_line(&self.text[value.span()]);
                    format!(
                        "= {written} has no unit: write a string with a unit, such as \"{written}s\" \
                         or \"250ms\""
                    )
                }),
                _ => wrong_type(found),
            },
            Kind::Signal => match v.as_str() {
                Some(s) => match SignalName::from_str(s) {
                    Err(reason) => {
                        invalid(found, &|| format!("is not valid: {}", one_line(&reason)))
                    }
                    Ok(signal) => {
                        if let Some(why) = cannot_end_a_process(signal.0) {
                            invalid(found, &|| {
                                format!(
                                    "= {} cannot end a process: {} {why}; use a signal that \
                                     ends it, such as \"SIGTERM\" or \"SIGKILL\"",
                                    quoted(s),
                                    signal.0.as_str()
                                )
                            });
                        }
                    }
                },
                None => wrong_type(found),
            },
            Kind::Choice(choices) => match v.as_str() {
                Some(s) if choices.contains(&s) => {}
                Some(s) => invalid(found, &|| {
                    let hint = match nearest(s, choices.iter().copied()) {
                        Some(near) => format!("; did you mean \"{near}\"?"),
                        None => String::new(),
                    };
                    format!(
                        "= {} is not one of {}{hint}",
                        quoted(s),
                        quoted_list(choices)
                    )
                }),
                None => wrong_type(found),
            },
            Kind::StrList => match v.as_array() {
                Some(items) => {
                    for (i, item) in items.iter().enumerate() {
                        self.check_value(Kind::Str, item, &path.index(i), found);
                    }
                }
                None => wrong_type(found),
            },
            Kind::StrMap => match v.as_table() {
                Some(t) => {
                    for (k, item) in t.iter() {
                        self.check_value(Kind::Str, item, &path.key(k.get_ref()), found);
                    }
                }
                None => wrong_type(found),
            },
            Kind::SocketAddr => match v.as_str() {
                Some(s) => {
                    if s.parse::<SocketAddr>().is_err() {
                        invalid(found, &|| {
                            format!(
                                "= {} is not an IP address and port such as \"127.0.0.1:7232\" \
                                 (names are not resolved here)",
                                quoted(s)
                            )
                        });
                    }
                }
                None => wrong_type(found),
            },
            Kind::Table(fields) => match v.as_table() {
                Some(t) => self.check_table(fields, t, value.span(), path, found),
                None => wrong_type(found),
            },
            Kind::Fences => match v.as_array() {
                Some(items) => {
                    for (i, item) in items.iter().enumerate() {
                        self.check_fence(item, &path.index(i), found);
                    }
                }
                None => wrong_type(found),
            },
        }
    }

    fn check_fence(&self, item: &Spanned<DeValue<'_>>, path: &KeyPath, found: &mut Findings) {
        let Some(table) = item.get_ref().as_table() else {
            found.push(Rank::Value, item.span().start, || ConfigError::WrongType {
                at: self.location(item.span().start),
                key: path.to_string(),
                expected: "a table".into(),
                found: type_name(item.get_ref()),
            });
            return;
        };
        let schema = table
            .get("kind")
            .and_then(|k| k.get_ref().as_str())
            .and_then(fence_schema);
        match schema {
            Some(fields) => self.check_table(fields, table, item.span(), path, found),
            // An absent or unknown kind is reported through the `kind` field alone: with no
            // schema to check against, the other keys cannot be judged.
            None => match table.get("kind") {
                Some(kind) => {
                    self.check_value(Kind::Choice(FENCE_KINDS), kind, &path.key("kind"), found)
                }
                None => found.push(Rank::Missing, item.span().start, || {
                    ConfigError::MissingKey {
                        at: self.location(item.span().start),
                        key: path.key("kind").to_string(),
                        what: format!("key `kind` in {path}: one of {}", quoted_list(FENCE_KINDS)),
                    }
                }),
            },
        }
    }
}

/// Why a signal cannot stop a service or fence a process: by default it suspends, resumes
/// or is ignored, so a process that does not handle it keeps running. (SIGKILL after
/// `stop_timeout` would still end a service, but only after a pointless wait.)
fn cannot_end_a_process(signal: nix::sys::signal::Signal) -> Option<&'static str> {
    use nix::sys::signal::Signal::*;
    match signal {
        SIGSTOP | SIGTSTP | SIGTTIN | SIGTTOU => Some("only suspends a process"),
        SIGCONT => Some("only resumes a suspended process"),
        // SIGURG and SIGWINCH are ignored by default too, but some services stop on them
        // (Apache httpd's graceful stop is SIGWINCH), and SIGKILL follows anyway: allowed.
        SIGCHLD => Some("is ignored by a process that does not handle it"),
        _ => None,
    }
}

/// `; did you mean `x`?`, `; `x` belongs in [a.b]`, or the list of valid keys.
fn unknown_key_hint(name: &str, fields: &[Field]) -> String {
    if let Some(near) = nearest(name, fields.iter().map(|f| f.name)) {
        return format!("; did you mean `{near}`?");
    }
    let elsewhere: Vec<String> = all_tables()
        .into_iter()
        .filter(|(_, fs)| fs.iter().any(|f| f.name == name))
        .map(|(label, _)| {
            if label.is_empty() {
                "at the top level, before the first [table]".to_string()
            } else {
                format!("in {label}")
            }
        })
        .collect();
    if !elsewhere.is_empty() {
        return format!("; `{name}` belongs {}", elsewhere.join(" or "));
    }
    let names: Vec<&str> = fields.iter().map(|f| f.name).collect();
    let agent = if std::ptr::eq(fields, FENCE_SCRIPT) {
        " (a fence agent's settings go in `options = { ... }`)"
    } else {
        ""
    };
    format!("; valid keys here: {}{agent}", names.join(", "))
}

/// A humantime duration that insists on a unit: a bare `"10"` is refused, since nobody
/// can tell whether it meant seconds or milliseconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "= \"{s}\" has no unit: add one, such as \"{t}s\" or \"{t}ms\""
        ));
    }
    humantime::parse_duration(t).map_err(|e| {
        format!(
            "= \"{s}\" is not a duration ({e}): write it with a unit, such as \"5s\" or \"250ms\""
        )
    })
}

// ---------------------------------------------------------------------------------------
// Rules between values
// ---------------------------------------------------------------------------------------

impl Source<'_> {
    fn validate(&self, c: &Config) -> Result<(), ConfigError> {
        self.validate_cluster(c)?;
        match c.coordination.backend {
            Backend::Zookeeper => self.validate_zookeeper(c)?,
            Backend::Mysql | Backend::Redis => self.validate_store(c)?,
        }
        self.check_duration(
            c.election.rejoin_delay,
            &KeyPath::of(&["election", "rejoin_delay"]),
            &REJOIN_DELAY_RANGE,
        )?;
        self.validate_service(c)?;
        self.validate_health(c)?;
        self.validate_fences(c)?;
        self.validate_log(c)?;
        Ok(())
    }

    fn check_id(&self, value: &str, path: &KeyPath, what: &str) -> Result<(), ConfigError> {
        if is_valid_id(value) {
            Ok(())
        } else {
            Err(self.invalid(
                path,
                format!(
                    "= \"{value}\" is not a valid {what}: use 1 to 64 letters, digits, '.', '_' or '-'"
                ),
            ))
        }
    }

    /// `d` within `range`; the message names the bound and why it is there.
    fn check_duration(
        &self,
        d: Duration,
        path: &KeyPath,
        range: &DurationRange,
    ) -> Result<(), ConfigError> {
        let reason = if d.is_zero() && !range.min.is_zero() {
            format!(
                "must be longer than 0: at least {} ({})",
                fmt_duration(range.min),
                range.short
            )
        } else if d < range.min {
            format!(
                "= {} is too short: it must be at least {} ({})",
                fmt_duration(d),
                fmt_duration(range.min),
                range.short
            )
        } else if d > range.max {
            format!(
                "= {} is too long: it must be at most {} ({})",
                fmt_duration(d),
                fmt_duration(range.max),
                range.long
            )
        } else {
            return Ok(());
        };
        Err(self.invalid(path, reason))
    }

    fn check_command(&self, cmd: &[String], path: &KeyPath) -> Result<(), ConfigError> {
        match cmd.first() {
            None => Err(self.invalid(path, "must name a program: it is empty")),
            Some(p) if p.trim().is_empty() => {
                Err(self.invalid(&path.index(0), "must name a program: it is an empty string"))
            }
            Some(_) => Ok(()),
        }
    }

    fn validate_cluster(&self, c: &Config) -> Result<(), ConfigError> {
        self.check_id(
            &c.cluster.name,
            &KeyPath::of(&["cluster", "name"]),
            "cluster name",
        )?;
        self.check_id(
            &c.cluster.node_id,
            &KeyPath::of(&["cluster", "node_id"]),
            "node id",
        )?;
        if let Some(host) = &c.cluster.host {
            if let Err(reason) = check_host(host) {
                return Err(self.invalid(
                    &KeyPath::of(&["cluster", "host"]),
                    format!("= {} is not a host name or address: {reason}", quoted(host)),
                ));
            }
        }
        Ok(())
    }

    /// `[coordination.mysql]` or `[coordination.redis]`, whichever `backend` names.
    fn validate_store(&self, c: &Config) -> Result<(), ConfigError> {
        let backend = c.coordination.backend;
        let name = backend.as_str();
        let p = |k: &str| KeyPath::of(&["coordination", name, k]);
        let Some(s) = c.store() else {
            return Err(self.invalid(
                &KeyPath::of(&["coordination", "backend"]),
                format!(
                    "= \"{name}\" needs a [coordination.{name}] table with at least `url` \
                     (SPEC 3a)"
                ),
            ));
        };
        if let Err(reason) = check_store_url(backend, s.url) {
            return Err(self.invalid(&p("url"), reason));
        }
        self.check_duration(
            s.session_timeout,
            &p("session_timeout"),
            &STORE_SESSION_RANGE,
        )?;
        self.check_duration(
            s.connect_timeout,
            &p("connect_timeout"),
            &CONNECT_TIMEOUT_RANGE,
        )?;
        self.check_duration(s.poll_interval, &p("poll_interval"), &POLL_INTERVAL_RANGE)?;
        if s.poll_interval >= s.session_timeout / 2 {
            return Err(self.invalid(
                &p("poll_interval"),
                format!(
                    "= {} must be less than half of session_timeout ({}): a standby that \
                     polls less often than that notices a dead active after the lease the \
                     active already gave up",
                    fmt_duration(s.poll_interval),
                    fmt_duration(s.session_timeout)
                ),
            ));
        }
        if let Some(file) = s.password_file {
            if file.as_os_str().is_empty() {
                return Err(self.invalid(&p("password_file"), "must name a file: it is empty"));
            }
        }
        if let Some(prefix) = s.prefix {
            let ok = match backend {
                Backend::Mysql => {
                    (1..=32).contains(&prefix.len())
                        && prefix
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
                }
                _ => {
                    (1..=64).contains(&prefix.len())
                        && prefix
                            .bytes()
                            .all(|b| b.is_ascii_graphic() && !b"{}:".contains(&b))
                }
            };
            if !ok {
                let (key, rule) = match backend {
                    Backend::Mysql => (
                        "table_prefix",
                        "use 1 to 32 letters, digits or '_' (it becomes part of table names)",
                    ),
                    _ => (
                        "key_prefix",
                        "use 1 to 64 printable characters without spaces, '{', '}' or ':' \
                         (it becomes part of key names)",
                    ),
                };
                return Err(self.invalid(&p(key), format!("= {} {rule}", quoted(prefix))));
            }
        }
        Ok(())
    }

    fn validate_zookeeper(&self, c: &Config) -> Result<(), ConfigError> {
        let zk = &c.coordination.zookeeper;
        let p = |k: &str| KeyPath::of(&["coordination", "zookeeper", k]);
        if zk.connect.is_empty() && !self.has(&KeyPath::of(&["coordination", "zookeeper"])) {
            return Err(self.invalid(
                &KeyPath::of(&["coordination"]),
                "needs a [coordination.zookeeper] table with `connect` (or choose another \
                 backend: backend = \"mysql\" or \"redis\", SPEC 3a)",
            ));
        }
        if let Err(reason) = check_connect(&zk.connect) {
            return Err(self.invalid(&p("connect"), reason));
        }
        if let Err(reason) = check_znode_path(&zk.root) {
            return Err(self.invalid(&p("root"), format!("= \"{}\" {reason}", zk.root)));
        }
        self.check_duration(
            zk.session_timeout,
            &p("session_timeout"),
            &SESSION_TIMEOUT_RANGE,
        )?;
        self.check_duration(
            zk.connect_timeout,
            &p("connect_timeout"),
            &CONNECT_TIMEOUT_RANGE,
        )?;
        if zk.auth.is_some() && zk.auth_file.is_some() {
            return Err(self.invalid(
                &p("auth_file"),
                "cannot be set together with `auth`: keep one of them (auth_file keeps the \
                 secret out of this file)",
            ));
        }
        if let Some(auth) = &zk.auth {
            // The value is a secret: the message never repeats it.
            if let Err(reason) = check_auth(auth) {
                return Err(self.invalid(&p("auth"), reason));
            }
        }
        if let Some(file) = &zk.auth_file {
            if file.as_os_str().is_empty() {
                return Err(self.invalid(&p("auth_file"), "must name a file: it is empty"));
            }
        }
        if zk.acl == AclMode::Creator && zk.auth.is_none() && zk.auth_file.is_none() {
            return Err(self.invalid(
                &p("acl"),
                "= \"creator\" needs credentials: set `auth` or `auth_file` in \
                 [coordination.zookeeper], or use acl = \"open\"",
            ));
        }
        Ok(())
    }

    fn validate_service(&self, c: &Config) -> Result<(), ConfigError> {
        let s = &c.service;
        let p = |k: &str| KeyPath::of(&["service", k]);
        self.check_duration(s.stop_timeout, &p("stop_timeout"), &GRACEFUL_STOP_RANGE)?;
        self.check_duration(s.hook_timeout, &p("hook_timeout"), &GRACEFUL_STOP_RANGE)?;
        // Keys of the other mode are ignored, not refused: the SPEC's own sample sets
        // both, and `warnings` tells the operator.
        match s.mode {
            ServiceMode::Spawn => {
                if s.command.is_empty() {
                    return Err(self.invalid(
                        &p("command"),
                        "is required with mode = \"spawn\": name the service's program and its \
                         arguments, such as [\"/usr/bin/my-service\", \"--flag\"]",
                    ));
                }
                self.check_command(&s.command, &p("command"))?;
            }
            ServiceMode::Hooks => {
                for (key, hook) in [("promote", &s.promote), ("demote", &s.demote)] {
                    if hook.is_empty() {
                        return Err(self.invalid(
                            &p(key),
                            format!(
                                "is required with mode = \"hooks\": name the program that \
                                 changes the service's role, such as [\"/usr/lib/my-service/{key}\"]"
                            ),
                        ));
                    }
                    self.check_command(hook, &p(key))?;
                }
                if !s.follow.is_empty() {
                    self.check_command(&s.follow, &p("follow"))?;
                }
                if let Some(file) = &s.pidfile {
                    if file.as_os_str().is_empty() {
                        return Err(self.invalid(&p("pidfile"), "must name a file: it is empty"));
                    }
                    // Relative to what? warden's working directory is not the service's,
                    // and a pidfile read from the wrong place names the wrong process.
                    if !file.is_absolute() {
                        return Err(self.invalid(
                            &p("pidfile"),
                            format!(
                                "= \"{}\" must be an absolute path, such as \"/run/my-service.pid\"",
                                file.display()
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn validate_health(&self, c: &Config) -> Result<(), ConfigError> {
        let h = &c.health;
        let p = |k: &str| KeyPath::of(&["health", k]);
        self.check_duration(h.interval, &p("interval"), &HEALTH_INTERVAL_RANGE)?;
        self.check_duration(h.timeout, &p("timeout"), &HEALTH_TIMEOUT_RANGE)?;
        self.check_duration(h.start_grace, &p("start_grace"), &START_GRACE_RANGE)?;
        let (needs, kind_name) = match h.kind {
            HealthKind::Tcp => ("address", "tcp"),
            HealthKind::Http => ("url", "http"),
            HealthKind::Exec => ("command", "exec"),
            HealthKind::None => ("", "none"),
        };
        // A key of another kind is refused rather than ignored: it usually means `kind`
        // was forgotten, and the operator believes a check runs that does not.
        let set = [
            ("address", h.address.is_some()),
            ("url", h.url.is_some()),
            ("command", !h.command.is_empty()),
        ];
        for (key, is_set) in set {
            if is_set && key != needs {
                return Err(self.invalid(
                    &p(key),
                    format!("does not apply to kind = \"{kind_name}\" (set kind, or remove it)"),
                ));
            }
            if !is_set && key == needs {
                return Err(
                    self.invalid(&p(key), format!("is required with kind = \"{kind_name}\""))
                );
            }
        }
        if let Some(address) = &h.address {
            if let Err(reason) = check_host_port(address) {
                return Err(self.invalid(&p("address"), format!("= \"{address}\" {reason}")));
            }
        }
        let mut https = false;
        if let Some(url) = &h.url {
            match crate::http_url::HttpUrl::parse(url) {
                Ok(parsed) => https = parsed.is_https(),
                Err(reason) => {
                    return Err(self.invalid(&p("url"), format!("= {} {reason}", quoted(url))))
                }
            }
        }
        if let Some(file) = &h.ca_file {
            // Refused rather than ignored, like a key of another kind above: the operator
            // believes the check verifies the service against that CA.
            if !https {
                return Err(self.invalid(
                    &p("ca_file"),
                    "applies only to kind = \"http\" with an https:// url (remove it, or \
                     write the url with https://)",
                ));
            }
            if file.as_os_str().is_empty() {
                return Err(self.invalid(&p("ca_file"), "must name a file: it is empty"));
            }
        }
        if h.kind == HealthKind::Exec {
            self.check_command(&h.command, &p("command"))?;
        }
        if !h.standby_command.is_empty() {
            self.check_command(&h.standby_command, &p("standby_command"))?;
        }
        Ok(())
    }

    fn validate_fences(&self, c: &Config) -> Result<(), ConfigError> {
        if c.fence.is_empty() {
            return Err(self.invalid(
                &KeyPath::of(&["fence"]),
                "is missing: warden refuses to start without a way to fence; add a [[fence]] \
                 method (a script running /bin/true if your storage already prevents two writers)",
            ));
        }
        for (i, method) in c.fence.iter().enumerate() {
            let p = KeyPath::of(&["fence"]).index(i);
            self.check_duration(method.timeout(), &p.key("timeout"), &FENCE_TIMEOUT_RANGE)?;
            if let Some(nodes) = method.nodes() {
                if nodes.is_empty() {
                    return Err(self.invalid(
                        &p.key("nodes"),
                        "is empty, so this method would never apply: list the node ids it may \
                         fence, or remove `nodes` to let it act on every node",
                    ));
                }
                for (j, node) in nodes.iter().enumerate() {
                    self.check_id(node, &p.key("nodes").index(j), "node id")?;
                }
            }
            match method {
                FenceMethod::Ssh(m) => {
                    if m.user.trim().is_empty() {
                        return Err(
                            self.invalid(&p.key("user"), "must name the remote user: it is empty")
                        );
                    }
                    for (key, file) in [
                        ("identity_file", &m.identity_file),
                        ("known_hosts", &m.known_hosts),
                    ] {
                        if file.as_os_str().is_empty() {
                            return Err(self.invalid(&p.key(key), "must name a file: it is empty"));
                        }
                    }
                    if m.command.as_ref().is_some_and(|cmd| cmd.trim().is_empty()) {
                        return Err(self.invalid(
                            &p.key("command"),
                            "is empty: remove it to run `warden fence-local` on the target",
                        ));
                    }
                }
                FenceMethod::Signal(_) => {}
                FenceMethod::Script(m) => {
                    self.check_command(&m.command, &p.key("command"))?;
                    match m.protocol {
                        ScriptProtocol::FenceAgent => {
                            if m.command.len() != 1 {
                                return Err(self.invalid(
                                    &p.key("command"),
                                    "must be the fence agent's path alone with protocol = \
                                     \"fence-agent\": its settings go in `options`, such as \
                                     options = { ipaddr = \"10.0.0.9\", username = \"admin\" }",
                                ));
                            }
                            for key in m.options.keys() {
                                if key.is_empty() || key.contains(['=', '\n']) {
                                    return Err(self.invalid(
                                        &p.key("options").key(key),
                                        "is not a valid fence agent option name",
                                    ));
                                }
                            }
                            for (key, value) in &m.options {
                                if value.contains('\n') {
                                    return Err(self.invalid(
                                        &p.key("options").key(key),
                                        "must be one line: the agent reads one key=value per line",
                                    ));
                                }
                            }
                        }
                        ScriptProtocol::Env => {
                            if !m.options.is_empty() {
                                return Err(self.invalid(
                                    &p.key("options"),
                                    "only applies with protocol = \"fence-agent\"; a script of \
                                     protocol \"env\" gets its target in WARDEN_TARGET_* variables",
                                ));
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn validate_log(&self, c: &Config) -> Result<(), ConfigError> {
        if let Err(reason) = check_log_level(&c.log.level) {
            return Err(self.invalid(&KeyPath::of(&["log", "level"]), reason));
        }
        Ok(())
    }
}

/// `host:port`, where host may be a name, an IPv4 address or a bracketed IPv6 address.
fn check_host_port(s: &str) -> Result<(), String> {
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err("is not host:port: the port is missing".into());
    };
    if !port.parse::<u16>().is_ok_and(|p| p > 0) {
        return Err(format!("has an invalid port \"{port}\""));
    }
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
    let ok = match bare {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "has an invalid host \"{host}\" (write an IPv6 address in brackets: \"[::1]:2181\")"
        ))
    }
}

/// `cluster.host`: what peers pass to `connect()` (with the ssh port) to fence this node,
/// so a name or an address alone: no port, no brackets, no path, no spaces. An IPv6
/// address is written bare (`::1`, `fe80::1%eth0`).
fn check_host(host: &str) -> Result<(), String> {
    const FIX: &str = "give the name or address alone, such as \"rm1.example.com\", \
                       \"10.0.0.1\" or \"fd00::1\"";
    if host.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    if let Some((addr, scope)) = host.split_once('%') {
        if addr.parse::<std::net::Ipv6Addr>().is_ok()
            && !scope.is_empty()
            && scope
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        {
            return Ok(());
        }
    }
    if host.is_empty() {
        return Err(format!("it is empty; {FIX}"));
    }
    if let Some(bare) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        if bare.parse::<std::net::Ipv6Addr>().is_ok() {
            return Err(format!(
                "write an IPv6 address without brackets, such as {}",
                quoted(bare)
            ));
        }
    }
    if let Some((name, port)) = host.rsplit_once(':') {
        let name = name.trim_start_matches('[').trim_end_matches(']');
        let is_host =
            !name.is_empty() && !name.contains(':') || name.parse::<std::net::Ipv6Addr>().is_ok();
        if is_host && port.parse::<u16>().is_ok() {
            return Err(format!(
                "it has a port; give the host alone, such as {} (the service's port goes in \
                 cluster.port, the ssh port in the ssh [[fence]]'s port)",
                quoted(name)
            ));
        }
    }
    // A DNS name is at most 253 characters of letters, digits, '-' and '.'; '_' appears in
    // some internal names and resolves through /etc/hosts.
    if host.len() > 253
        || !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    {
        return Err(format!(
            "a name has at most 253 letters, digits, '.', '-' and '_'; {FIX}"
        ));
    }
    Ok(())
}

/// A znode path: absolute, no trailing or doubled `/`, no `.` or `..` parts.
fn check_znode_path(s: &str) -> Result<(), String> {
    if !s.starts_with('/') {
        return Err("must start with '/'".into());
    }
    if s == "/" || s.ends_with('/') {
        return Err("must not end with '/' (use, for example, \"/warden\")".into());
    }
    if s[1..]
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err("must not have empty, \".\" or \"..\" parts".into());
    }
    // ZooKeeper refuses these in a path (they "do not display well"): refused here rather
    // than by every call at run time.
    if s.chars().any(|c| {
        c.is_control()
            || ('\u{e000}'..='\u{f8ff}').contains(&c)
            || ('\u{fff0}'..='\u{ffff}').contains(&c)
    }) {
        return Err(
            "must not hold control or private-use characters: ZooKeeper refuses them".into(),
        );
    }
    Ok(())
}

/// `host:port[,host:port...][/chroot]`.
fn check_connect(connect: &str) -> Result<(), String> {
    let (hosts, chroot) = match connect.find('/') {
        Some(i) => (&connect[..i], Some(&connect[i..])),
        None => (connect, None),
    };
    if hosts.trim().is_empty() {
        return Err(format!(
            "= \"{connect}\" names no server: list host:port pairs, such as \"zk1:2181,zk2:2181,zk3:2181\""
        ));
    }
    for server in hosts.split(',') {
        let server = server.trim();
        if let Err(reason) = check_host_port(server) {
            return Err(format!("= \"{connect}\": \"{server}\" {reason}"));
        }
    }
    if let Some(chroot) = chroot {
        if let Err(reason) = check_znode_path(chroot) {
            return Err(format!("= \"{connect}\": the chroot \"{chroot}\" {reason}"));
        }
    }
    Ok(())
}

/// `scheme:credentials`; a digest's credentials are `user:password`. The secret part is
/// never echoed back.
fn check_auth(auth: &str) -> Result<(), String> {
    let Some((scheme, credentials)) = auth.split_once(':') else {
        return Err("must be scheme:credentials, such as \"digest:warden:PASSWORD\" (the value is not shown)".into());
    };
    if scheme.is_empty() || credentials.is_empty() {
        return Err("must be scheme:credentials, such as \"digest:warden:PASSWORD\" (the value is not shown)".into());
    }
    if scheme == "digest" {
        match credentials.split_once(':') {
            Some((user, password)) if !user.is_empty() && !password.is_empty() => {}
            _ => {
                return Err(
                    "uses scheme \"digest\", whose credentials must be user:password (the value is not shown)".into(),
                )
            }
        }
    }
    Ok(())
}

const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];

/// A tracing `EnvFilter` directive. A bare word that is not a level is refused although
/// `EnvFilter` would take it as a target name: `level = "inf"` would otherwise quietly
/// log everything from a module called `inf` and nothing else.
fn check_log_level(level: &str) -> Result<(), String> {
    if level.trim().is_empty() {
        return Err(
            "is empty: use a level such as \"info\", or directives such as \"info,warden=debug\""
                .into(),
        );
    }
    for directive in level.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let bare = !directive.contains(['=', '[']);
        let is_level = LEVELS.contains(&directive.to_ascii_lowercase().as_str())
            || directive.parse::<u8>().is_ok_and(|n| n <= 5);
        if bare && !is_level {
            let hint = match nearest(directive, LEVELS.iter().copied()) {
                Some(near) => format!("did you mean \"{near}\"? "),
                None => String::new(),
            };
            return Err(format!(
                "= \"{level}\": \"{directive}\" is not a level; {hint}use one of {}, or \
                 target=level such as \"warden=debug\"",
                quoted_list(LEVELS)
            ));
        }
    }
    match tracing_subscriber::EnvFilter::builder().parse(level) {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("= \"{level}\" is not a valid log filter: {e}")),
    }
}

// ---------------------------------------------------------------------------------------
// Files named by the config
// ---------------------------------------------------------------------------------------

/// What is wrong with a file the config names.
enum FileProblem {
    Unreadable(io::Error),
    Insecure(u32),
}

/// The largest config file read. The reference config, every comment included, is about
/// 10 KiB; a megabyte is a hundred times that, and bounds what a wrong `-c` (a log file, a
/// disk image) costs before it is refused.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The largest `auth_file`: it holds one `scheme:credentials` line.
const MAX_AUTH_FILE_BYTES: u64 = 64 << 10;

/// The largest ssh `identity_file`: an OpenSSH RSA key of 16384 bits is about 13 KiB.
const MAX_IDENTITY_FILE_BYTES: u64 = 1 << 20;

pub use warden_fencing::files::read_regular_file;
use warden_fencing::files::{file_type_name, open_regular_file, read_opened};

/// Opens a file that holds a secret, refusing it (as OpenSSH refuses a private key) when
/// group or others have any access to it, and returns its content (at most `limit` bytes).
fn read_private_file(file: &Path, limit: u64) -> Result<Vec<u8>, FileProblem> {
    let (opened, meta) = open_regular_file(file).map_err(FileProblem::Unreadable)?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(FileProblem::Insecure(mode));
    }
    read_opened(opened, &meta, limit).map_err(FileProblem::Unreadable)
}

fn file_error(
    problem: FileProblem,
    at: Option<Location>,
    key: &KeyPath,
    file: &Path,
) -> ConfigError {
    match problem {
        FileProblem::Unreadable(error) => ConfigError::UnreadableFile {
            at,
            key: key.to_string(),
            file: file.to_path_buf(),
            error,
        },
        FileProblem::Insecure(mode) => ConfigError::InsecureFile {
            at,
            key: key.to_string(),
            file: file.to_path_buf(),
            mode,
        },
    }
}

/// The file checks of [`load`].
fn check_files(c: &Config, source: &Source<'_>) -> Result<(), ConfigError> {
    if let Some(file) = c.store().and_then(|s| s.password_file) {
        let key = KeyPath::of(&[
            "coordination",
            c.coordination.backend.as_str(),
            "password_file",
        ]);
        read_private_file(file, MAX_AUTH_FILE_BYTES)
            .map_err(|p| file_error(p, Some(source.at(&key)), &key, file))?;
    }
    if let Some(file) = &c.coordination.zookeeper.auth_file {
        let key = KeyPath::of(&["coordination", "zookeeper", "auth_file"]);
        let content = read_private_file(file, MAX_AUTH_FILE_BYTES)
            .map_err(|p| file_error(p, Some(source.at(&key)), &key, file))?;
        let text = String::from_utf8_lossy(&content);
        if let Err(reason) = check_auth(text.trim()) {
            return Err(source.invalid(
                &key,
                format!("names {}, whose content {reason}", shown_path(file)),
            ));
        }
    }
    let service = KeyPath::of(&["service"]);
    let health = KeyPath::of(&["health"]);
    let mut programs: Vec<(KeyPath, &[String])> = Vec::new();
    match c.service.mode {
        ServiceMode::Spawn => {
            programs.push((service.key("command"), &c.service.command));
            programs.push((health.key("standby_command"), &c.health.standby_command));
        }
        ServiceMode::Hooks => {
            programs.push((service.key("promote"), &c.service.promote));
            programs.push((service.key("demote"), &c.service.demote));
            programs.push((service.key("follow"), &c.service.follow));
        }
    }
    if c.health.kind == HealthKind::Exec {
        programs.push((health.key("command"), &c.health.command));
    }
    if let Some(file) = &c.health.ca_file {
        let key = health.key("ca_file");
        crate::http_url::read_ca_file(file).map_err(|e| match e {
            crate::http_url::CaFileError::Unreadable(error) => ConfigError::UnreadableFile {
                at: Some(source.at(&key)),
                key: key.to_string(),
                file: file.clone(),
                error,
            },
            invalid => source.invalid(&key, format!("names {}, which {invalid}", shown_path(file))),
        })?;
    }
    for (i, method) in c.fence.iter().enumerate() {
        let p = KeyPath::of(&["fence"]).index(i);
        match method {
            FenceMethod::Ssh(m) => {
                let key = p.key("identity_file");
                read_private_file(&m.identity_file, MAX_IDENTITY_FILE_BYTES)
                    .map_err(|e| file_error(e, Some(source.at(&key)), &key, &m.identity_file))?;
                // Opened, not read: the fence reads it when it runs, and it may be long.
                let key = p.key("known_hosts");
                open_regular_file(&m.known_hosts).map_err(|error| ConfigError::UnreadableFile {
                    at: Some(source.at(&key)),
                    key: key.to_string(),
                    file: m.known_hosts.clone(),
                    error,
                })?;
            }
            FenceMethod::Script(m) => programs.push((p.key("command"), &m.command)),
            FenceMethod::Signal(_) => {}
        }
    }
    for (key, command) in programs {
        check_program(command, &key.index(0), source)?;
    }
    Ok(())
}

/// A program named by absolute path must be an executable regular file: a missing or
/// broken one would otherwise surface at the worst moment, in the middle of a failover.
/// A bare name is looked up in the PATH it runs with, which this check cannot know.
/// Any execute bit will do: `check-config` may run as another user than the daemon.
fn check_program(
    command: &[String],
    key: &KeyPath,
    source: &Source<'_>,
) -> Result<(), ConfigError> {
    let Some(program) = command.first().map(Path::new) else {
        return Ok(());
    };
    if !program.is_absolute() {
        return Ok(());
    }
    // stat, never open: a fifo named here must not block the check.
    let meta = std::fs::metadata(program).map_err(|error| ConfigError::UnreadableFile {
        at: Some(source.at(key)),
        key: key.to_string(),
        file: program.to_path_buf(),
        error,
    })?;
    let why = if !meta.is_file() {
        file_type_name(meta.file_type()).to_string()
    } else if meta.permissions().mode() & 0o111 == 0 {
        format!(
            "nobody may execute it (mode {:04o}); run `chmod +x {}`",
            meta.permissions().mode() & 0o7777,
            shown_path(program)
        )
    } else {
        return Ok(());
    };
    Err(source.invalid(
        key,
        format!(
            "= {} is not an executable file: {why}",
            quoted(&program.display().to_string())
        ),
    ))
}

/// The keys `[coordination.mysql]` and `[coordination.redis]` share, for validation.
pub(crate) struct StoreView<'a> {
    pub url: &'a str,
    pub password_file: Option<&'a PathBuf>,
    pub session_timeout: Duration,
    pub poll_interval: Duration,
    pub connect_timeout: Duration,
    /// `table_prefix` or `key_prefix`.
    pub prefix: Option<&'a String>,
}

impl Config {
    /// The chosen backend's table when it is MySQL or Redis.
    pub(crate) fn store(&self) -> Option<StoreView<'_>> {
        match self.coordination.backend {
            Backend::Zookeeper => None,
            Backend::Mysql => self.coordination.mysql.as_ref().map(|m| StoreView {
                url: &m.url,
                password_file: m.password_file.as_ref(),
                session_timeout: m.session_timeout,
                poll_interval: m.poll_interval,
                connect_timeout: m.connect_timeout,
                prefix: Some(&m.table_prefix),
            }),
            Backend::Redis => self.coordination.redis.as_ref().map(|r| StoreView {
                url: &r.url,
                password_file: r.password_file.as_ref(),
                session_timeout: r.session_timeout,
                poll_interval: r.poll_interval,
                connect_timeout: r.connect_timeout,
                prefix: Some(&r.key_prefix),
            }),
        }
    }

    /// `[coordination.mysql]`, when the backend is MySQL.
    pub fn mysql(&self) -> Option<&MysqlConfig> {
        match self.coordination.backend {
            Backend::Mysql => self.coordination.mysql.as_ref(),
            _ => None,
        }
    }

    /// `[coordination.redis]`, when the backend is Redis.
    pub fn redis(&self) -> Option<&RedisConfig> {
        match self.coordination.backend {
            Backend::Redis => self.coordination.redis.as_ref(),
            _ => None,
        }
    }

    /// How long the chosen backend waits for a connection.
    pub fn connect_timeout(&self) -> Duration {
        self.store()
            .map_or(self.coordination.zookeeper.connect_timeout, |s| {
                s.connect_timeout
            })
    }

    /// How often standbys read the lock (MySQL, Redis); `None` for ZooKeeper's watches.
    pub fn poll_interval(&self) -> Option<Duration> {
        self.store().map(|s| s.poll_interval)
    }

    /// The MySQL or Redis password: the trimmed content of `password_file` (checked again
    /// here, since the file may have changed since [`load`]); `None` without one.
    pub fn read_store_password(&self) -> Result<Option<String>, ConfigError> {
        let Some(file) = self.store().and_then(|s| s.password_file) else {
            return Ok(None);
        };
        let key = KeyPath::of(&[
            "coordination",
            self.coordination.backend.as_str(),
            "password_file",
        ]);
        let content = read_private_file(file, MAX_AUTH_FILE_BYTES)
            .map_err(|p| file_error(p, None, &key, file))?;
        let text = String::from_utf8(content).map_err(|_| ConfigError::UnreadableFile {
            at: None,
            key: key.to_string(),
            file: file.clone(),
            error: io::Error::new(io::ErrorKind::InvalidData, "it is not UTF-8 text"),
        })?;
        Ok(Some(text.trim_end_matches(['\n', '\r']).to_string()))
    }

    /// The ZooKeeper credentials: `auth`, or the trimmed content of `auth_file` (checked
    /// again here, since the file may have changed since [`load`]); `None` without either.
    pub fn read_auth(&self) -> Result<Option<String>, ConfigError> {
        let zk = &self.coordination.zookeeper;
        if let Some(auth) = &zk.auth {
            return Ok(Some(auth.clone()));
        }
        let Some(file) = &zk.auth_file else {
            return Ok(None);
        };
        let key = KeyPath::of(&["coordination", "zookeeper", "auth_file"]);
        let content = read_private_file(file, MAX_AUTH_FILE_BYTES)
            .map_err(|p| file_error(p, None, &key, file))?;
        let text = String::from_utf8(content).map_err(|_| ConfigError::UnreadableFile {
            at: None,
            key: key.to_string(),
            file: file.clone(),
            error: io::Error::new(io::ErrorKind::InvalidData, "it is not UTF-8 text"),
        })?;
        Ok(Some(text.trim().to_string()))
    }
}

// ---------------------------------------------------------------------------------------
// Warnings
// ---------------------------------------------------------------------------------------

/// A duration for messages: from a second up to the millisecond (`1s 666ms` rather than
/// `1s 666ms 666us 666ns`), below a second exactly and with its unit (`1ns`, `1ms 500us`),
/// so that a sub-millisecond value is never shown as `0s`.
fn fmt_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".to_string();
    }
    let shown = if d < Duration::from_secs(1) {
        d
    } else {
        Duration::new(d.as_secs(), d.subsec_millis() * 1_000_000)
    };
    humantime::format_duration(shown).to_string()
}

impl Config {
    /// Settings that are valid but that an operator should know the consequences of;
    /// `warden check-config` prints them (SPEC §7) and `run` logs them.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let zk = &self.coordination.zookeeper;
        let (grace_key, grace) = match self.service.mode {
            ServiceMode::Spawn => ("service.stop_timeout", self.service.stop_timeout),
            ServiceMode::Hooks => ("service.hook_timeout", self.service.hook_timeout),
        };
        let lease = self.lease();
        let renewal = self.renewal_interval();
        if lease.saturating_sub(grace) < renewal {
            out.push(format!(
                "{grace_key} = {} leaves less than one renewal interval ({}) of the {} lease \
                 (half of coordination.{}.session_timeout = {}), so a single late \
                 renewal demotes the active; raise session_timeout or lower {grace_key}",
                fmt_duration(grace),
                fmt_duration(renewal),
                fmt_duration(lease),
                self.coordination.backend.as_str(),
                fmt_duration(self.session_timeout()),
            ));
        }
        let backend = self.coordination.backend;
        for (name, set) in [
            ("mysql", self.coordination.mysql.is_some()),
            ("redis", self.coordination.redis.is_some()),
        ] {
            if set && backend.as_str() != name {
                out.push(format!(
                    "[coordination.{name}] is ignored: backend = \"{}\"",
                    backend.as_str()
                ));
            }
        }
        if let Some(st) = self.store() {
            let key = format!("coordination.{}", backend.as_str());
            if st.poll_interval > st.session_timeout / 6 {
                out.push(format!(
                    "{key}.poll_interval = {} is longer than a renewal interval ({}): standbys \
                     notice a released or expired lock later than the active renews it",
                    fmt_duration(st.poll_interval),
                    fmt_duration(st.session_timeout / 6)
                ));
            }
            if st.session_timeout < Duration::from_secs(3) {
                out.push(format!(
                    "{key}.session_timeout = {} is short for a database: one slow statement \
                     (a checkpoint, a lock wait) longer than the lease demotes the active",
                    fmt_duration(st.session_timeout)
                ));
            }
        }
        if backend == Backend::Zookeeper
            && zk.auth.is_none()
            && zk.auth_file.is_none()
            && zk.acl == AclMode::Open
        {
            out.push(
                "coordination.zookeeper has no auth and acl = \"open\": anyone who can reach \
                 ZooKeeper can change the election (set auth_file and acl = \"creator\")"
                    .to_string(),
            );
        }
        let s = &self.service;
        let ignored: &[(&str, bool)] = match s.mode {
            ServiceMode::Spawn => &[
                ("service.promote", !s.promote.is_empty()),
                ("service.demote", !s.demote.is_empty()),
                ("service.follow", !s.follow.is_empty()),
                ("service.pidfile", s.pidfile.is_some()),
            ],
            ServiceMode::Hooks => &[("service.command", !s.command.is_empty())],
        };
        let (mode, other) = match s.mode {
            ServiceMode::Spawn => ("spawn", "hooks"),
            ServiceMode::Hooks => ("hooks", "spawn"),
        };
        for (key, _) in ignored.iter().filter(|(_, set)| *set) {
            out.push(format!(
                "{key} is ignored: it applies to service.mode = \"{other}\", and this node \
                 runs in \"{mode}\" mode"
            ));
        }
        if self.service.mode == ServiceMode::Hooks && self.health.kind == HealthKind::None {
            out.push(
                "health.kind = \"none\" in hooks mode: warden cannot tell when the service \
                 fails, so the active is never replaced while its warden runs"
                    .to_string(),
            );
        }
        if self.health.timeout > self.health.interval {
            out.push(format!(
                "health.timeout = {} is longer than health.interval = {}: a hanging check \
                 delays the next one, so failures are noticed later than fall × interval",
                fmt_duration(self.health.timeout),
                fmt_duration(self.health.interval)
            ));
        }
        if !self.fence.is_empty()
            && self
                .fence
                .iter()
                .all(|m| matches!(m, FenceMethod::Signal(_)))
        {
            out.push(
                "every [[fence]] is kind = \"signal\", which only acts on an old active that ran \
                 on this host: taking over from another node will fail to fence it (add an ssh \
                 or script method)"
                    .to_string(),
            );
        }
        if let Some(api) = &self.api {
            if !api.listen.ip().is_loopback() {
                out.push(format!(
                    "api.listen = {} is not a loopback address: anyone who can reach it can \
                     read this node's role and metrics (the API has no authentication)",
                    api.listen
                ));
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------

/// What a masked secret is shown as.
const MASK: &str = "****";

/// `digest:warden:secret` -> `digest:warden:****`; any other scheme's credentials are
/// masked whole, since their user part cannot be told from the secret.
fn mask_auth(auth: &str) -> String {
    match auth.split_once(':') {
        Some(("digest", credentials)) => match credentials.split_once(':') {
            Some((user, _)) => format!("digest:{user}:{MASK}"),
            None => format!("digest:{MASK}"),
        },
        Some((scheme, _)) => format!("{scheme}:{MASK}"),
        None => MASK.to_string(),
    }
}

/// Whether a fence agent option holds a secret. `*_script` options name a program that
/// prints the secret (`password_script`), which is safe and useful to show.
fn is_secret_option(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    !k.ends_with("_script")
        && ["password", "passwd", "secret", "token", "key"]
            .iter()
            .any(|word| k.contains(word))
}

/// Removes `[fence.options]` headers with nothing under them: an env-protocol script has
/// empty options, which the serializer still writes as a table of its own.
fn drop_empty_options(body: &str) -> String {
    let lines: Vec<&str> = body.lines().collect();
    let mut out = String::with_capacity(body.len());
    let mut i = 0;
    while i < lines.len() {
        let next = lines.get(i + 1).map(|l| l.trim());
        if lines[i] == "[fence.options]" && next.is_none_or(|n| n.is_empty() || n.starts_with('['))
        {
            i += if next == Some("") { 2 } else { 1 };
            continue;
        }
        out.push_str(lines[i]);
        out.push('\n');
        i += 1;
    }
    out
}

impl Config {
    /// The resolved config as TOML, every default filled in and secrets masked, for
    /// `warden check-config`. Without secrets it parses back to an equal config.
    pub fn render_masked(&self) -> String {
        let mut shown = self.clone();
        if let Some(auth) = &mut shown.coordination.zookeeper.auth {
            *auth = mask_auth(auth);
        }
        for method in &mut shown.fence {
            if let FenceMethod::Script(m) = method {
                for (key, value) in m.options.iter_mut() {
                    if is_secret_option(key) {
                        *value = MASK.to_string();
                    }
                }
            }
        }
        let mut out = String::from(
            "# warden configuration as resolved: every default filled in, secrets shown as ****.\n",
        );
        if self.cluster.host.is_none() {
            out.push_str(&format!(
                "# cluster.host is not set: peers reach this node at its hostname, {:?}.\n",
                self.host()
            ));
        }
        if self.api.is_none() {
            out.push_str("# [api] is not set: no HTTP listener.\n");
        }
        out.push('\n');
        match toml::to_string_pretty(&shown) {
            Ok(body) => out.push_str(&drop_empty_options(&body)),
            // Every field is a string, number, list or table, so this cannot happen; if it
            // does, the operator still learns why nothing was printed.
            Err(e) => out.push_str(&format!("# cannot render the configuration: {e}\n")),
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = "/etc/warden/warden.toml";

    /// The smallest valid config; tests append to it or replace parts of it.
    const BASE: &str = r#"[cluster]
name = "rm"
node_id = "rm1"

[coordination.zookeeper]
connect = "zk1:2181,zk2:2181"

[service]
command = ["/usr/bin/my-service"]

[[fence]]
kind = "script"
command = ["/bin/true"]
"#;

    fn ok(text: &str) -> Config {
        match parse(text, Path::new(PATH)) {
            Ok(c) => c,
            Err(e) => panic!("expected a valid config, got: {e}\n{text}"),
        }
    }

    fn err(text: &str) -> ConfigError {
        match parse(text, Path::new(PATH)) {
            Ok(_) => panic!("expected an error for:\n{text}"),
            Err(e) => e,
        }
    }

    fn msg(text: &str) -> String {
        err(text).to_string()
    }

    /// `text` for [`load`], which checks that the programs it names exist: BASE's service
    /// program is made up.
    fn on_disk(text: &str) -> String {
        text.replace("/usr/bin/my-service", "/bin/true")
    }

    /// BASE with `from` replaced by `to`, which must occur in it.
    fn with(from: &str, to: &str) -> String {
        assert!(BASE.contains(from), "{from:?} is not in BASE");
        BASE.replacen(from, to, 1)
    }

    fn mysql(table: &str) -> String {
        with(
            "[coordination.zookeeper]\nconnect = \"zk1:2181,zk2:2181\"\n",
            &format!("[coordination]\nbackend = \"mysql\"\n\n[coordination.mysql]\n{table}\n"),
        )
    }

    #[test]
    fn a_mysql_backend_needs_only_its_own_table() {
        let c = ok(&mysql("url = \"mysql://warden@db1:3306/warden\""));
        assert_eq!(c.coordination.backend, Backend::Mysql);
        let m = c.mysql().expect("the mysql table");
        assert_eq!(m.table_prefix, "warden_");
        assert_eq!(c.session_timeout(), Duration::from_secs(10));
        assert_eq!(c.poll_interval(), Some(Duration::from_millis(250)));
        assert_eq!(c.lease(), Duration::from_secs(5));
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
        let m = msg(&with(
            "[coordination.zookeeper]\nconnect = \"zk1:2181,zk2:2181\"\n",
            "[coordination]\nbackend = \"mysql\"\n",
        ));
        assert!(m.contains("needs a [coordination.mysql] table"), "{m}");
    }

    #[test]
    fn mysql_values_are_checked() {
        let m = msg(&mysql("url = \"mysql://warden:secret@db1/warden\""));
        assert!(
            m.contains("contains a password: put it in password_file"),
            "{m}"
        );
        assert!(!m.contains("secret"), "the password is repeated: {m}");
        let m = msg(&mysql("url = \"redis://db1/warden\""));
        assert!(
            m.contains("`coordination.mysql.url`") && m.contains("scheme"),
            "{m}"
        );
        let m = msg(&mysql("url = \"mysql://warden@db1:3306\""));
        assert!(m.contains("names no database"), "{m}");
        let m = msg(&mysql(
            "url = \"mysql://warden@db1/warden\"\nsession_timeout = \"2s\"\npoll_interval = \"1s\"",
        ));
        assert!(m.contains("less than half of session_timeout"), "{m}");
        let m = msg(&mysql(
            "url = \"mysql://warden@db1/warden\"\ntable_prefix = \"w-\"",
        ));
        assert!(
            m.contains("table_prefix") && m.contains("letters, digits or '_'"),
            "{m}"
        );
        let m = msg(&mysql(
            "url = \"mysql://warden@db1/warden\"\npoll_intervall = \"1s\"",
        ));
        assert!(
            m.contains("poll_interval"),
            "the nearest key is suggested: {m}"
        );
        let c = ok(&mysql(
            "url = \"mysql://warden@db1/warden\"\nsession_timeout = \"2s\"\npoll_interval = \"900ms\"",
        ));
        let w = c.warnings().join("\n");
        assert!(
            w.contains("poll_interval") && w.contains("session_timeout = 2s"),
            "{w}"
        );
    }

    #[test]
    fn reference_config_parses_without_warnings() {
        let c = ok(include_str!("../config/warden.toml"));
        assert_eq!(c.fence.len(), 4);
        assert_eq!(c.api.as_ref().map(|a| a.listen.port()), Some(7232));
        assert_eq!(c.cluster.port, Some(8032));
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    }

    #[test]
    fn reference_config_names_every_key_of_the_schema() {
        // Every key must be documented in the reference, set or commented out.
        let text = include_str!("../config/warden.toml");
        for (label, fields) in all_tables() {
            for f in fields {
                let documented = text.lines().any(|l| {
                    let l = l.trim_start_matches(['#', ' ']);
                    l.starts_with(&format!("{} =", f.name))
                        || l.starts_with(&format!("[{}]", f.name))
                        || l.contains(&format!("[{}", f.name))
                        || l.starts_with(&format!("[coordination.{}]", f.name))
                });
                assert!(
                    documented,
                    "{label}: `{}` is not in config/warden.toml",
                    f.name
                );
            }
        }
    }

    #[test]
    fn example_configs_parse() {
        let spawn = ok(include_str!("../config/examples/spawn.toml"));
        assert_eq!(spawn.service.mode, ServiceMode::Spawn);
        assert!(matches!(spawn.fence[0], FenceMethod::Signal(_)));
        assert!(matches!(spawn.fence[1], FenceMethod::Script(_)));
        assert!(spawn.warnings().is_empty(), "{:?}", spawn.warnings());
        let hooks = ok(include_str!("../config/examples/hooks.toml"));
        assert_eq!(hooks.service.mode, ServiceMode::Hooks);
        assert_eq!(
            hooks.service.pidfile,
            Some(PathBuf::from("/run/my-service.pid"))
        );
        assert!(hooks.warnings().is_empty(), "{:?}", hooks.warnings());
    }

    #[test]
    fn defaults_are_filled_in() {
        let c = ok(BASE);
        let zk = &c.coordination.zookeeper;
        assert_eq!(c.coordination.backend, Backend::Zookeeper);
        assert_eq!(zk.root, "/warden");
        assert_eq!(zk.session_timeout, Duration::from_secs(10));
        assert_eq!(zk.connect_timeout, Duration::from_secs(5));
        assert_eq!(zk.acl, AclMode::Open);
        assert_eq!(c.election.rejoin_delay, Duration::from_secs(1));
        assert_eq!(c.service.mode, ServiceMode::Spawn);
        assert_eq!(c.service.stop_signal.to_string(), "SIGTERM");
        assert_eq!(c.service.stop_timeout, Duration::from_secs(3));
        assert_eq!(c.service.hook_timeout, Duration::from_secs(3));
        assert_eq!(c.health, HealthConfig::default());
        assert_eq!((c.health.fall, c.health.rise), (3, 2));
        assert_eq!(c.api, None);
        assert_eq!(c.log, LogConfig::default());
        assert_eq!(c.renewal_interval(), Duration::from_secs(10) / 6);
        assert_eq!(c.lease(), Duration::from_secs(5));
        assert_eq!(c.demote_grace(), Duration::from_secs(3));
        match &c.fence[0] {
            FenceMethod::Script(s) => {
                assert_eq!(s.protocol, ScriptProtocol::Env);
                assert_eq!(s.timeout, Duration::from_secs(30));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_key_suggests_the_nearest() {
        let text = with("connect = ", "sesion_timeout = \"10s\"\nconnect = ");
        let e = err(&text);
        assert_eq!(
            e.to_string(),
            "/etc/warden/warden.toml:6:1: unknown key `sesion_timeout` in \
             [coordination.zookeeper]; did you mean `session_timeout`?"
        );
        assert_eq!(e.key(), Some("coordination.zookeeper.sesion_timeout"));
    }

    #[test]
    fn unknown_key_in_the_wrong_table_names_the_right_one() {
        let m = msg(&with("[service]\n", "[service]\nrejoin_delay = \"1s\"\n"));
        assert_eq!(
            m,
            "/etc/warden/warden.toml:9:1: unknown key `rejoin_delay` in [service]; \
             `rejoin_delay` belongs in [election]"
        );
    }

    #[test]
    fn unknown_table_is_reported_before_the_missing_one() {
        let m = msg(&with("[service]", "[servce]"));
        assert_eq!(
            m,
            "/etc/warden/warden.toml:8:2: unknown key `servce` at the top level; did you mean `service`?"
        );
    }

    #[test]
    fn unknown_key_in_a_fence_names_its_index() {
        let e = err(&format!("{BASE}timout = \"5s\"\n"));
        assert_eq!(e.key(), Some("fence[0].timout"));
        assert_eq!(
            e.to_string(),
            "/etc/warden/warden.toml:14:1: unknown key `timout` in fence[0] (kind = \"script\"); \
             did you mean `timeout`?"
        );
    }

    #[test]
    fn unknown_key_without_a_near_match_lists_the_valid_ones() {
        let m = msg(&with("[service]\n", "[service]\nbanana = 1\n"));
        assert!(
            m.contains("valid keys here: mode, command, stop_signal"),
            "{m}"
        );
    }

    #[test]
    fn wrong_type_names_expected_and_found() {
        let e = err(&with(
            "node_id = \"rm1\"",
            "node_id = \"rm1\"\nport = \"8032\"",
        ));
        assert_eq!(
            e.to_string(),
            "/etc/warden/warden.toml:4:8: `cluster.port` must be an integer from 1 to 65535, not a string"
        );
        let m = msg(&with(
            "command = [\"/usr/bin/my-service\"]",
            "command = \"/usr/bin/my-service\"",
        ));
        assert_eq!(
            m,
            "/etc/warden/warden.toml:9:11: `service.command` must be an array of strings, not a string"
        );
        let m = msg(&with(
            "command = [\"/usr/bin/my-service\"]",
            "command = [\"/usr/bin/my-service\", 3]",
        ));
        assert!(
            m.contains("`service.command[1]` must be a string, not an integer"),
            "{m}"
        );
    }

    #[test]
    fn missing_required_key_points_at_its_table() {
        let e = err(&with("node_id = \"rm1\"\n", ""));
        assert_eq!(
            e.to_string(),
            "/etc/warden/warden.toml:1:1: missing required key `node_id` in [cluster]"
        );
        assert_eq!(e.key(), Some("cluster.node_id"));
        let e = err(&with("connect = \"zk1:2181,zk2:2181\"\n", ""));
        assert_eq!(
            e.to_string(),
            "/etc/warden/warden.toml:5:1: missing required key `connect` in [coordination.zookeeper]"
        );
    }

    #[test]
    fn missing_required_table_is_named() {
        let m = msg(&with(
            "[service]\ncommand = [\"/usr/bin/my-service\"]\n",
            "",
        ));
        assert_eq!(
            m,
            "/etc/warden/warden.toml:1:1: missing required table [service]"
        );
    }

    #[test]
    fn fence_without_kind_or_with_a_bad_kind() {
        let m = msg(&with("kind = \"script\"\n", ""));
        assert_eq!(
            m,
            "/etc/warden/warden.toml:11:1: missing required key `kind` in fence[0]: one of \
             \"ssh\", \"signal\" or \"script\""
        );
        let m = msg(&with("kind = \"script\"", "kind = \"scirpt\""));
        assert_eq!(
            m,
            "/etc/warden/warden.toml:12:8: `fence[0].kind` = \"scirpt\" is not one of \"ssh\", \
             \"signal\" or \"script\"; did you mean \"script\"?"
        );
        let m = msg(&format!(
            "{BASE}\n[[fence]]\nkind = \"ssh\"\nidentity_file = \"/k\"\nknown_hosts = \"/h\"\n"
        ));
        assert_eq!(
            m,
            "/etc/warden/warden.toml:15:1: missing required key `user` in fence[1] (kind = \"ssh\")"
        );
    }

    #[test]
    fn durations_need_a_unit() {
        let text = |v: &str| with("connect = ", &format!("session_timeout = {v}\nconnect = "));
        let e = err(&text("10"));
        assert_eq!(
            e.to_string(),
            "/etc/warden/warden.toml:6:19: `coordination.zookeeper.session_timeout` = 10 has no \
             unit: write a string with a unit, such as \"10s\" or \"250ms\""
        );
        let m = msg(&text("\"10\""));
        assert!(
            m.ends_with("= \"10\" has no unit: add one, such as \"10s\" or \"10ms\""),
            "{m}"
        );
        let m = msg(&text("\"10 parsecs\""));
        assert!(m.contains("is not a duration"), "{m}");
        assert_eq!(
            ok(&text("\"2m\"")).coordination.zookeeper.session_timeout,
            Duration::from_secs(120)
        );
        assert_eq!(
            ok(&text("\"1m 30s\""))
                .coordination
                .zookeeper
                .session_timeout,
            Duration::from_secs(90)
        );
    }

    #[test]
    fn syntax_errors_are_located() {
        let e = err(&with("name = \"rm\"", "name = = \"rm\""));
        assert!(matches!(e, ConfigError::Syntax { .. }));
        assert!(
            e.to_string()
                .starts_with("/etc/warden/warden.toml:2:8: invalid TOML:"),
            "{e}"
        );
    }

    #[test]
    fn invalid_ids_are_refused() {
        let m = msg(&with("node_id = \"rm1\"", "node_id = \"rm 1\""));
        assert_eq!(
            m,
            "/etc/warden/warden.toml:3:11: `cluster.node_id` = \"rm 1\" is not a valid node id: \
             use 1 to 64 letters, digits, '.', '_' or '-'"
        );
        let m = msg(&with(
            "name = \"rm\"",
            &format!("name = \"{}\"", "a".repeat(65)),
        ));
        assert!(
            m.contains("`cluster.name`") && m.contains("not a valid cluster name"),
            "{m}"
        );
        let m = msg(&format!("{BASE}nodes = [\"rm1\", \"rm/2\"]\n"));
        assert!(
            m.contains(":14:17: `fence[0].nodes[1]` = \"rm/2\" is not a valid node id"),
            "{m}"
        );
    }

    #[test]
    fn zookeeper_values_are_checked() {
        let connect = |v: &str| msg(&with("\"zk1:2181,zk2:2181\"", v));
        assert!(connect("\"\"").contains("`coordination.zookeeper.connect` = \"\" names no server"));
        assert!(connect("\"zk1\"").contains("\"zk1\" is not host:port"));
        assert!(connect("\"zk1:2181,zk2:x\"").contains("invalid port \"x\""));
        assert!(connect("\"zk1:2181/app/\"").contains("the chroot \"/app/\" must not end with '/'"));
        assert!(
            ok(&with(
                "\"zk1:2181,zk2:2181\"",
                "\"zk1:2181,[::1]:2181/app\""
            ))
            .fence
            .len()
                == 1
        );

        let zk = |line: &str| msg(&with("connect = ", &format!("{line}\nconnect = ")));
        assert_eq!(
            zk("root = \"warden\""),
            "/etc/warden/warden.toml:6:8: `coordination.zookeeper.root` = \"warden\" must start with '/'"
        );
        assert!(zk("root = \"/warden/\"").contains("must not end with '/'"));
        assert!(zk("session_timeout = \"100ms\"")
            .contains("`coordination.zookeeper.session_timeout` = 100ms is too short: it must be at least 200ms"));
        assert!(zk("connect_timeout = \"0s\"")
            .contains("`coordination.zookeeper.connect_timeout` must be longer than 0"));
        assert!(zk("acl = \"creator\"")
            .contains("`coordination.zookeeper.acl` = \"creator\" needs credentials"));
        assert!(zk("acl = \"craetor\"").contains("did you mean \"creator\"?"));
        assert!(
            zk("auth = \"digest:w:s\"\nauth_file = \"/etc/warden/zk.auth\"").contains(
                ":7:13: `coordination.zookeeper.auth_file` cannot be set together with `auth`"
            )
        );
        let m = zk("auth = \"digest:topsecret\"");
        assert!(
            m.contains("`coordination.zookeeper.auth` uses scheme \"digest\""),
            "{m}"
        );
        assert!(!m.contains("topsecret"), "the secret leaked: {m}");
        assert!(zk("auth = \"nocolon\"").contains("must be scheme:credentials"));
        let c = ok(&with(
            "connect = ",
            "auth = \"digest:warden:s3cret\"\nacl = \"creator\"\nconnect = ",
        ));
        assert_eq!(
            c.read_auth().ok().flatten().as_deref(),
            Some("digest:warden:s3cret")
        );
    }

    #[test]
    fn service_modes_require_their_commands() {
        let m = msg(&with("command = [\"/usr/bin/my-service\"]", "command = []"));
        assert!(
            m.contains(":9:11: `service.command` is required with mode = \"spawn\""),
            "{m}"
        );
        let m = msg(&with(
            "command = [\"/usr/bin/my-service\"]",
            "mode = \"hooks\"\npromote = [\"/p\"]",
        ));
        assert_eq!(
            m,
            "/etc/warden/warden.toml:8:1: `service.demote` is required with mode = \"hooks\": name \
             the program that changes the service's role, such as [\"/usr/lib/my-service/demote\"]"
        );
        let m = msg(&with(
            "command = [\"/usr/bin/my-service\"]",
            "command = [\"\"]",
        ));
        assert!(
            m.contains("`service.command[0]` must name a program"),
            "{m}"
        );
        let m = msg(&with("[service]\n", "[service]\nstop_timeout = \"0s\"\n"));
        assert!(
            m.contains(":9:16: `service.stop_timeout` must be longer than 0"),
            "{m}"
        );
        let m = msg(&with("[service]\n", "[service]\nhook_timeout = \"0ms\"\n"));
        assert!(
            m.contains("`service.hook_timeout` must be longer than 0"),
            "{m}"
        );
        let m = msg(&with(
            "[service]\n",
            "[service]\nstop_signal = \"SIGFOO\"\n",
        ));
        assert!(
            m.contains("`service.stop_signal` is not valid: unknown signal"),
            "{m}"
        );
        let hooks = ok(&with(
            "command = [\"/usr/bin/my-service\"]",
            "mode = \"hooks\"\npromote = [\"/p\"]\ndemote = [\"/d\"]\npidfile = \"/run/s.pid\"",
        ));
        assert_eq!(hooks.demote_grace(), Duration::from_secs(3));
    }

    #[test]
    fn health_kinds_require_their_target() {
        let health = |body: &str| msg(&format!("{BASE}\n[health]\n{body}\n"));
        assert_eq!(
            health("kind = \"tcp\""),
            "/etc/warden/warden.toml:15:1: `health.address` is required with kind = \"tcp\""
        );
        assert!(health("kind = \"tcp\"\naddress = \"localhost\"").contains("is not host:port"));
        assert!(health("kind = \"http\"\nurl = \"ftp://x/\"")
            .contains("`health.url` = \"ftp://x/\" has scheme \"ftp\""));
        assert!(
            health("kind = \"exec\"").contains("`health.command` is required with kind = \"exec\"")
        );
        assert!(health("address = \"127.0.0.1:80\"")
            .contains(":16:11: `health.address` does not apply to kind = \"none\""));
        assert!(
            health("fall = 0").contains("`health.fall` = 0 is out of range: it must be at least 1")
        );
        assert!(health("rise = -1").contains("`health.rise` = -1 is out of range"));
        assert!(health("interval = \"0s\"").contains("`health.interval` must be longer than 0"));
        assert!(health("timeout = \"0s\"").contains("`health.timeout` must be longer than 0"));
        let c = ok(&format!(
            "{BASE}\n[health]\nkind = \"http\"\nurl = \"http://127.0.0.1:8088/ws\"\n"
        ));
        assert_eq!(c.health.kind, HealthKind::Http);
        let c = ok(&format!(
            "{BASE}\n[health]\nkind = \"http\"\nurl = \"https://rm1:8090/ws\"\nca_file = \"/etc/warden/ca.pem\"\n"
        ));
        assert_eq!(c.health.ca_file, Some(PathBuf::from("/etc/warden/ca.pem")));
        assert!(
            health("kind = \"http\"\nurl = \"http://rm1/\"\nca_file = \"/ca.pem\"")
                .contains("`health.ca_file` applies only to kind = \"http\" with an https:// url")
        );
        assert!(
            health("kind = \"tcp\"\naddress = \"rm1:80\"\nca_file = \"/ca.pem\"")
                .contains("`health.ca_file` applies only to kind = \"http\"")
        );
        assert!(
            health("kind = \"http\"\nurl = \"https://rm1/\"\nca_file = \"\"")
                .contains("`health.ca_file` must name a file: it is empty")
        );
    }

    #[test]
    fn a_health_ca_file_must_hold_a_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        let path = dir.path().join("warden.toml");
        std::fs::write(
            &path,
            on_disk(&format!(
                "{BASE}\n[health]\nkind = \"http\"\nurl = \"https://127.0.0.1:8090/\"\nca_file = \"{}\"\n",
                ca.display()
            )),
        )
        .unwrap();
        let m = load(&path).unwrap_err().to_string();
        assert!(
            m.contains(&format!(
                ":18:11: `health.ca_file`: cannot read {}: No such file or directory",
                ca.display()
            )),
            "{m}"
        );
        std::fs::write(&ca, "not a certificate\n").unwrap();
        let m = load(&path).unwrap_err().to_string();
        assert!(
            m.contains(&format!(
                "`health.ca_file` names {}, which holds no certificate",
                ca.display()
            )),
            "{m}"
        );
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(&ca, cert.cert.pem()).unwrap();
        assert_eq!(
            load(&path).unwrap().health.ca_file.as_deref(),
            Some(ca.as_path())
        );
    }

    #[test]
    fn at_least_one_fence_is_required() {
        let text = BASE.split("[[fence]]").next().unwrap_or_default();
        let m = msg(text);
        assert_eq!(
            m,
            "/etc/warden/warden.toml:1:1: `fence` is missing: warden refuses to start without a \
             way to fence; add a [[fence]] method (a script running /bin/true if your storage \
             already prevents two writers)"
        );
        let m = msg(&format!("fence = []\n{text}"));
        assert!(
            m.starts_with("/etc/warden/warden.toml:1:9: `fence` is missing"),
            "{m}"
        );
        let m = msg(&format!("{text}fence = []\n"));
        assert!(
            m.ends_with("unknown key `fence` in [service]; `fence` belongs at the top level, before the first [table]"),
            "{m}"
        );
        let m = msg(&format!("{text}[fence]\nkind = \"signal\"\n"));
        assert!(
            m.contains("`fence` must be an array of tables, written [[fence]], not a table"),
            "{m}"
        );
    }

    #[test]
    fn fence_methods_are_checked() {
        let m = msg(&with("command = [\"/bin/true\"]", "command = []"));
        assert!(
            m.contains(":13:11: `fence[0].command` must name a program: it is empty"),
            "{m}"
        );
        let m = msg(&with(
            "command = [\"/bin/true\"]",
            "protocol = \"fence-agent\"\ncommand = [\"/usr/sbin/fence_ipmilan\", \"--ip=10.0.0.9\"]",
        ));
        assert!(
            m.contains(":14:11: `fence[0].command` must be the fence agent's path alone")
                && m.contains("`options`"),
            "{m}"
        );
        let m = msg(&format!("{BASE}options = {{ ipaddr = \"10.0.0.9\" }}\n"));
        assert!(
            m.contains(":14:11: `fence[0].options` only applies with protocol = \"fence-agent\""),
            "{m}"
        );
        let m = msg(&format!(
            "{BASE}protocol = \"fence-agent\"\noptions = {{ ipaddr = 10 }}\n"
        ));
        assert!(
            m.contains("`fence[0].options.ipaddr` must be a string, not an integer"),
            "{m}"
        );
        let m = msg(&format!("{BASE}nodes = []\n"));
        assert!(
            m.contains("`fence[0].nodes` is empty, so this method would never apply"),
            "{m}"
        );
        let m = msg(&format!("{BASE}timeout = \"0s\"\n"));
        assert!(
            m.contains("`fence[0].timeout` must be longer than 0"),
            "{m}"
        );
        let ssh = |user: &str| {
            format!(
                "{BASE}\n[[fence]]\nkind = \"ssh\"\nuser = \"{user}\"\nidentity_file = \"/k\"\nknown_hosts = \"/h\"\n"
            )
        };
        assert!(msg(&ssh("")).contains(":17:8: `fence[1].user` must name the remote user"));
        let c = ok(&ssh("warden"));
        match &c.fence[1] {
            FenceMethod::Ssh(s) => assert_eq!((s.port, s.timeout), (22, Duration::from_secs(15))),
            other => panic!("{other:?}"),
        }
        let m = msg(&format!(
            "{BASE}\n[[fence]]\nkind = \"signal\"\nsignal = 9\n"
        ));
        assert!(
            m.contains(
                "`fence[1].signal` must be a signal name such as \"SIGTERM\", not an integer"
            ),
            "{m}"
        );
    }

    #[test]
    fn log_and_api_are_checked() {
        let log = |level: &str| msg(&format!("{BASE}\n[log]\nlevel = \"{level}\"\n"));
        let m = log("inf");
        assert!(
            m.contains(
                ":16:9: `log.level` = \"inf\": \"inf\" is not a level; did you mean \"info\"?"
            ),
            "{m}"
        );
        assert!(log("info,warden=verbose").contains("is not a valid log filter"));
        assert!(log("").contains("`log.level` is empty"));
        ok(&format!(
            "{BASE}\n[log]\nlevel = \"info,warden=debug\"\nformat = \"json\"\n"
        ));
        let m = msg(&format!("{BASE}\n[api]\nlisten = \"localhost:7232\"\n"));
        assert!(
            m.contains(":16:10: `api.listen` = \"localhost:7232\" is not an IP address and port"),
            "{m}"
        );
        let m = msg(&format!("{BASE}\n[api]\n"));
        assert_eq!(
            m,
            "/etc/warden/warden.toml:15:1: missing required key `listen` in [api]"
        );
    }

    #[test]
    fn a_missing_config_file_is_one_sentence() {
        let e = match load(Path::new("/nonexistent/warden.toml")) {
            Err(e) => e,
            Ok(_) => panic!("loaded a missing file"),
        };
        assert_eq!(
            e.to_string(),
            "cannot read /nonexistent/warden.toml: No such file or directory"
        );
    }

    /// A config with one ssh fence whose key and known_hosts live in `dir`.
    fn ssh_config(dir: &Path, key_mode: u32) -> PathBuf {
        let key = dir.join("id_ed25519");
        let known = dir.join("known_hosts");
        std::fs::write(&key, "KEY").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(key_mode)).unwrap();
        std::fs::write(&known, "").unwrap();
        let text = with(
            "kind = \"script\"\ncommand = [\"/bin/true\"]\n",
            &format!(
                "kind = \"ssh\"\nuser = \"warden\"\nidentity_file = \"{}\"\nknown_hosts = \"{}\"\n",
                key.display(),
                known.display()
            ),
        );
        let path = dir.join("warden.toml");
        std::fs::write(&path, on_disk(&text)).unwrap();
        path
    }

    #[test]
    fn an_identity_file_readable_by_others_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = ssh_config(dir.path(), 0o644);
        let e = load(&path).unwrap_err();
        let key = dir.path().join("id_ed25519");
        assert!(
            matches!(e, ConfigError::InsecureFile { mode: 0o644, .. }),
            "{e:?}"
        );
        assert_eq!(e.key(), Some("fence[0].identity_file"));
        assert_eq!(
            e.to_string(),
            format!(
                "{}:14:17: `fence[0].identity_file`: {} can be read or written by group or others \
                 (mode 0644); run `chmod 600 {}`",
                path.display(),
                key.display(),
                key.display()
            )
        );
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        load(&path).unwrap();
    }

    #[test]
    fn a_missing_identity_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = ssh_config(dir.path(), 0o600);
        std::fs::remove_file(dir.path().join("id_ed25519")).unwrap();
        let m = load(&path).unwrap_err().to_string();
        assert!(
            m.contains(&format!(
                ":14:17: `fence[0].identity_file`: cannot read {}: No such file or directory",
                dir.path().join("id_ed25519").display()
            )),
            "{m}"
        );
        // parse alone does not look at files.
        parse(&std::fs::read_to_string(&path).unwrap(), &path).unwrap();
    }

    #[test]
    fn an_auth_file_is_checked_and_read() {
        let dir = tempfile::tempdir().unwrap();
        let auth = dir.path().join("zk.auth");
        std::fs::write(&auth, "digest:warden:s3cret\n").unwrap();
        std::fs::set_permissions(&auth, std::fs::Permissions::from_mode(0o640)).unwrap();
        let text = with(
            "connect = ",
            &format!(
                "auth_file = \"{}\"\nacl = \"creator\"\nconnect = ",
                auth.display()
            ),
        );
        let path = dir.path().join("warden.toml");
        std::fs::write(&path, on_disk(&text)).unwrap();
        let m = load(&path).unwrap_err().to_string();
        assert!(
            m.contains(&format!("run `chmod 600 {}`", auth.display())),
            "{m}"
        );
        assert!(m.contains("`coordination.zookeeper.auth_file`"), "{m}");

        std::fs::set_permissions(&auth, std::fs::Permissions::from_mode(0o600)).unwrap();
        let c = load(&path).unwrap();
        assert_eq!(
            c.read_auth().unwrap().as_deref(),
            Some("digest:warden:s3cret")
        );
        assert!(!c.render_masked().contains("s3cret"));

        std::fs::write(&auth, "garbage\n").unwrap();
        let m = load(&path).unwrap_err().to_string();
        assert!(
            m.contains("whose content must be scheme:credentials"),
            "{m}"
        );
        assert!(!m.contains("garbage"), "{m}");

        // At run time the file is checked again.
        std::fs::set_permissions(&auth, std::fs::Permissions::from_mode(0o604)).unwrap();
        let m = c.read_auth().unwrap_err().to_string();
        assert!(m.starts_with("`coordination.zookeeper.auth_file`: "), "{m}");
        assert!(m.contains("chmod 600"), "{m}");
    }

    #[test]
    fn a_missing_fence_script_is_refused_by_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("warden.toml");
        std::fs::write(&path, on_disk(&with("/bin/true", "/nonexistent/fence"))).unwrap();
        let m = load(&path).unwrap_err().to_string();
        assert!(
            m.contains(":13:12: `fence[0].command[0]`: cannot read /nonexistent/fence"),
            "{m}"
        );
        let script = dir.path().join("fence");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
        let text = with("/bin/true", &script.display().to_string());
        std::fs::write(&path, on_disk(&text)).unwrap();
        let m = load(&path).unwrap_err().to_string();
        assert!(m.contains("is not an executable file"), "{m}");
    }

    #[test]
    fn a_graceful_stop_longer_than_the_lease_margin_warns() {
        assert!(ok(BASE)
            .warnings()
            .iter()
            .all(|w| !w.contains("late renewal")));
        // lease 5s, renewal every 1.666s: a 4s stop leaves 1s.
        let c = ok(&with("[service]\n", "[service]\nstop_timeout = \"4s\"\n"));
        let w = c.warnings();
        let late: Vec<&String> = w.iter().filter(|w| w.contains("late renewal")).collect();
        assert_eq!(late.len(), 1, "{w:?}");
        assert_eq!(
            late[0],
            "service.stop_timeout = 4s leaves less than one renewal interval (1s 666ms) of the \
             5s lease (half of coordination.zookeeper.session_timeout = 10s), so a single late \
             renewal demotes the active; raise session_timeout or lower service.stop_timeout"
        );
        // hooks mode judges hook_timeout: its default fits the default lease, 10s does not.
        let hooks = ok(&with(
            "command = [\"/usr/bin/my-service\"]",
            "mode = \"hooks\"\npromote = [\"/p\"]\ndemote = [\"/d\"]",
        ));
        assert!(
            hooks.warnings().iter().all(|w| !w.contains("late renewal")),
            "the defaults warn against each other: {:?}",
            hooks.warnings()
        );
        let hooks = ok(&with(
            "command = [\"/usr/bin/my-service\"]",
            "mode = \"hooks\"\npromote = [\"/p\"]\ndemote = [\"/d\"]\nhook_timeout = \"10s\"",
        ));
        assert!(hooks
            .warnings()
            .iter()
            .any(|w| w.starts_with("service.hook_timeout = 10s")));
    }

    #[test]
    fn other_warnings() {
        let w = ok(BASE).warnings();
        assert!(w.iter().any(|w| w.contains("acl = \"open\"")), "{w:?}");
        let c = ok(&format!("{BASE}\n[api]\nlisten = \"0.0.0.0:7232\"\n"));
        assert!(c
            .warnings()
            .iter()
            .any(|w| w.contains("not a loopback address")));
        let c = ok(&with("[service]\n", "[service]\npromote = [\"/p\"]\n"));
        assert!(c
            .warnings()
            .iter()
            .any(|w| w.starts_with("service.promote is ignored")));
        let c = ok(&with(
            "kind = \"script\"\ncommand = [\"/bin/true\"]",
            "kind = \"signal\"",
        ));
        assert!(c
            .warnings()
            .iter()
            .any(|w| w.contains("only acts on an old active that ran on this host")));
        // What the server grants is judged at run time, by the granted value.
        let c = ok(&with("connect = ", "session_timeout = \"1s\"\nconnect = "));
        assert!(c
            .warnings()
            .iter()
            .all(|w| !w.contains("minSessionTimeout")));
    }

    #[test]
    fn render_masks_secrets() {
        let c = ok(&format!(
            "{}\n[[fence]]\nkind = \"script\"\nprotocol = \"fence-agent\"\ncommand = [\"/usr/sbin/fence_ipmilan\"]\n\
             options = {{ ipaddr = \"10.0.0.9\", password = \"hunter2\", api_token = \"t0k\", password_script = \"/etc/p\" }}\n",
            with("connect = ", "auth = \"digest:warden:s3cret\"\nacl = \"creator\"\nconnect = ")
        ));
        let out = c.render_masked();
        assert!(out.contains("digest:warden:****"), "{out}");
        for secret in ["s3cret", "hunter2", "t0k"] {
            assert!(!out.contains(secret), "{secret} leaked:\n{out}");
        }
        assert!(out.contains("/etc/p"), "{out}");
        assert!(out.contains("10.0.0.9"), "{out}");
        // Masked output still parses; only the secrets differ.
        let back = ok(&out);
        assert_eq!(
            back.coordination.zookeeper.auth.as_deref(),
            Some("digest:warden:****")
        );
        assert_eq!(back.cluster, c.cluster);
    }

    #[test]
    fn render_round_trips_with_every_default_filled_in() {
        for text in [
            BASE,
            include_str!("../config/warden.toml"),
            include_str!("../config/examples/spawn.toml"),
            include_str!("../config/examples/hooks.toml"),
        ] {
            let c = ok(text);
            let out = c.render_masked();
            assert_eq!(ok(&out), c, "{out}");
        }
        let out = ok(BASE).render_masked();
        for line in [
            "session_timeout = \"10s\"",
            "root = \"/warden\"",
            "stop_signal = \"SIGTERM\"",
            "rejoin_delay = \"1s\"",
            "fall = 3",
            "level = \"info\"",
            "protocol = \"env\"",
        ] {
            assert!(out.contains(line), "{line} missing from:\n{out}");
        }
        assert!(out.contains("# [api] is not set"), "{out}");
        assert!(!out.contains("[fence.options]"), "{out}");
        let reference = ok(include_str!("../config/warden.toml")).render_masked();
        assert_eq!(
            reference.matches("[fence.options]").count(),
            1,
            "{reference}"
        );
    }

    #[test]
    fn masking_rules() {
        assert_eq!(mask_auth("digest:warden:secret"), "digest:warden:****");
        assert_eq!(mask_auth("digest:secret"), "digest:****");
        assert_eq!(mask_auth("sasl:whatever"), "sasl:****");
        for key in [
            "password",
            "passwd",
            "Secret",
            "api_token",
            "ssh_key",
            "keyfile",
        ] {
            assert!(is_secret_option(key), "{key}");
        }
        for key in ["ipaddr", "username", "password_script", "plug"] {
            assert!(!is_secret_option(key), "{key}");
        }
    }

    #[test]
    fn serde_errors_are_traced_back_to_their_key() {
        let text = with("connect = ", "session_timeout = \"10s\"\nconnect = ");
        let source = Source::new(&text, Path::new(PATH)).unwrap();
        let offset = text.find("\"10s\"").unwrap() + 1;
        assert_eq!(
            source.key_at(offset).to_string(),
            "coordination.zookeeper.session_timeout"
        );
        let offset = text.rfind("/bin/true").unwrap();
        assert_eq!(source.key_at(offset).to_string(), "fence[0].command[0]");
    }

    #[test]
    fn ids() {
        assert!(is_valid_id("rm1") && is_valid_id("a.b_c-D") && is_valid_id(&"x".repeat(64)));
        assert!(
            !is_valid_id("")
                && !is_valid_id("a b")
                && !is_valid_id("a/b")
                && !is_valid_id(&"x".repeat(65))
        );
    }

    /// Learns a serde struct's field names, so the schema can be held to the structs.
    fn serde_fields<'de, T: Deserialize<'de>>() -> Vec<&'static str> {
        struct Probe(Option<&'static [&'static str]>);
        impl<'de> serde::Deserializer<'de> for &mut Probe {
            type Error = serde::de::value::Error;
            fn deserialize_any<V: serde::de::Visitor<'de>>(
                self,
                _: V,
            ) -> Result<V::Value, Self::Error> {
                Err(serde::de::Error::custom("not a struct"))
            }
            fn deserialize_struct<V: serde::de::Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Self::Error> {
                self.0 = Some(fields);
                Err(serde::de::Error::custom("probed"))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
                enum identifier ignored_any
            }
        }
        let mut probe = Probe(None);
        let _ = T::deserialize(&mut probe);
        probe.0.unwrap_or_default().to_vec()
    }

    #[test]
    fn the_schema_matches_the_structs() {
        let names = |fields: &[Field]| {
            let mut v: Vec<&str> = fields
                .iter()
                .map(|f| f.name)
                .filter(|n| *n != "kind")
                .collect();
            v.sort();
            v
        };
        let sorted = |mut v: Vec<&'static str>| {
            v.sort();
            v
        };
        let mut health = sorted(serde_fields::<HealthConfig>());
        health.retain(|n| *n != "kind");
        assert_eq!(names(ROOT), sorted(serde_fields::<Config>()));
        assert_eq!(names(CLUSTER), sorted(serde_fields::<ClusterConfig>()));
        assert_eq!(
            names(COORDINATION),
            sorted(serde_fields::<CoordinationConfig>())
        );
        assert_eq!(names(ZOOKEEPER), sorted(serde_fields::<ZooKeeperConfig>()));
        assert_eq!(names(MYSQL), sorted(serde_fields::<MysqlConfig>()));
        assert_eq!(names(REDIS), sorted(serde_fields::<RedisConfig>()));
        assert_eq!(names(ELECTION), sorted(serde_fields::<ElectionConfig>()));
        assert_eq!(names(SERVICE), sorted(serde_fields::<ServiceConfig>()));
        assert_eq!(names(HEALTH), health);
        assert_eq!(names(API), sorted(serde_fields::<ApiConfig>()));
        assert_eq!(names(LOG), sorted(serde_fields::<LogConfig>()));
        assert_eq!(
            names(FENCE_SSH),
            sorted(serde_fields::<warden_fencing::SshFence>())
        );
        assert_eq!(
            names(FENCE_SIGNAL),
            sorted(serde_fields::<warden_fencing::SignalFence>())
        );
        assert_eq!(
            names(FENCE_SCRIPT),
            sorted(serde_fields::<warden_fencing::ScriptFence>())
        );
    }

    /// BASE with `line` added to the table whose header is `table`.
    fn in_table(table: &str, line: &str) -> String {
        match BASE.find(&format!("{table}\n")) {
            Some(_) => with(&format!("{table}\n"), &format!("{table}\n{line}\n")),
            None => format!("{BASE}\n{table}\n{line}\n"),
        }
    }

    #[test]
    fn every_duration_has_an_upper_bound() {
        // (table, key, dotted key, the longest accepted, the shortest refused)
        let cases = [
            (
                "[coordination.zookeeper]",
                "session_timeout",
                "coordination.zookeeper.session_timeout",
                "1h",
                "1h 1ms",
            ),
            (
                "[coordination.zookeeper]",
                "connect_timeout",
                "coordination.zookeeper.connect_timeout",
                "10m",
                "10m 1s",
            ),
            (
                "[election]",
                "rejoin_delay",
                "election.rejoin_delay",
                "30s",
                "31s",
            ),
            (
                "[service]",
                "stop_timeout",
                "service.stop_timeout",
                "1h",
                "61m",
            ),
            (
                "[service]",
                "hook_timeout",
                "service.hook_timeout",
                "1h",
                "2h",
            ),
            ("[health]", "interval", "health.interval", "1h", "2h"),
            ("[health]", "timeout", "health.timeout", "1h", "2h"),
            (
                "[health]",
                "start_grace",
                "health.start_grace",
                "1day",
                "25h",
            ),
            ("[[fence]]", "timeout", "fence[0].timeout", "1h", "2h"),
        ];
        for (table, key, dotted, longest, refused) in cases {
            let text = |v: &str| {
                if table == "[[fence]]" {
                    format!("{BASE}{key} = \"{v}\"\n")
                } else {
                    in_table(table, &format!("{key} = \"{v}\""))
                }
            };
            ok(&text(longest));
            for v in [refused, "18446744073709551615s", "584542046090years"] {
                let m = msg(&text(v));
                assert!(
                    m.contains(&format!("`{dotted}` = "))
                        && m.contains(" is too long: it must be at most "),
                    "{v}: {m}"
                );
                assert!(m.starts_with("/etc/warden/warden.toml:"), "{m}");
            }
        }
        // The location is the value's, and the bound and its reason are named.
        let m = msg(&with(
            "[service]\n",
            "[service]\nstop_timeout = \"18446744073709551615s\"\n",
        ));
        assert!(
            m.starts_with(
                "/etc/warden/warden.toml:9:16: `service.stop_timeout` = 584542046090years"
            ) && m.contains("is too long: it must be at most 1h (a stop or hook that hangs"),
            "{m}"
        );
        let m = msg(&with(
            "connect = ",
            "session_timeout = \"18446744073709551615s\"\nconnect = ",
        ));
        assert!(
            m.contains(":6:19: `coordination.zookeeper.session_timeout` = ")
                && m.contains("it must be at most 1h"),
            "{m}"
        );
    }

    #[test]
    fn sub_millisecond_durations_are_refused_and_shown_with_their_unit() {
        let health = |line: &str| msg(&format!("{BASE}\n[health]\n{line}\n"));
        assert_eq!(
            health("interval = \"1ns\""),
            "/etc/warden/warden.toml:16:12: `health.interval` = 1ns is too short: it must be at \
             least 10ms (checks more often than that keep the service and the host busy \
             answering them)"
        );
        assert!(health("interval = \"9ms\"").contains("= 9ms is too short"));
        assert!(health("timeout = \"999us\"")
            .contains("`health.timeout` = 999us is too short: it must be at least 1ms"));
        ok(&with(
            "[service]\n",
            "[service]\nstop_timeout = \"1ms 500us\"\n",
        ));
        let m = msg(&format!("{BASE}timeout = \"1us\"\n"));
        assert!(
            m.contains("`fence[0].timeout` = 1us is too short: it must be at least 1ms"),
            "{m}"
        );
        let m = msg(&in_table("[election]", "rejoin_delay = \"0s\""));
        assert!(
            m.contains("`election.rejoin_delay` must be longer than 0: at least 1ms"),
            "{m}"
        );
        // A start grace of 0 means none, and is fine.
        assert_eq!(
            ok(&format!("{BASE}\n[health]\nstart_grace = \"0s\"\n"))
                .health
                .start_grace,
            Duration::ZERO
        );
        ok(&format!(
            "{BASE}\n[health]\ninterval = \"10ms\"\ntimeout = \"1ms\"\n"
        ));
        assert_eq!(fmt_duration(Duration::from_nanos(1)), "1ns");
        assert_eq!(fmt_duration(Duration::from_micros(1500)), "1ms 500us");
        assert_eq!(fmt_duration(Duration::ZERO), "0s");
        assert_eq!(
            fmt_duration(Duration::from_nanos(1_666_666_666)),
            "1s 666ms"
        );
        assert_eq!(
            fmt_duration(Duration::from_secs(u64::MAX)),
            humantime::format_duration(Duration::from_secs(u64::MAX)).to_string()
        );
    }

    #[test]
    fn signals_that_cannot_end_a_process_are_refused() {
        for signal in [
            "SIGSTOP", "SIGCONT", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGCHLD", "STOP", "19", "cont",
        ] {
            let m = msg(&with(
                "[service]\n",
                &format!("[service]\nstop_signal = \"{signal}\"\n"),
            ));
            assert!(
                m.starts_with(&format!(
                    "/etc/warden/warden.toml:9:15: `service.stop_signal` = \"{signal}\" cannot end a process: "
                )) && m.ends_with("use a signal that ends it, such as \"SIGTERM\" or \"SIGKILL\""),
                "{m}"
            );
            let m = msg(&format!(
                "{BASE}\n[[fence]]\nkind = \"signal\"\nsignal = \"{signal}\"\n"
            ));
            assert!(
                m.contains(":17:10: `fence[1].signal` = ") && m.contains("cannot end a process"),
                "{m}"
            );
        }
        for signal in [
            "SIGTERM", "SIGKILL", "SIGINT", "SIGQUIT", "SIGHUP", "SIGUSR1", "TERM", "15",
        ] {
            ok(&with(
                "[service]\n",
                &format!("[service]\nstop_signal = \"{signal}\"\n"),
            ));
            ok(&format!(
                "{BASE}\n[[fence]]\nkind = \"signal\"\nsignal = \"{signal}\"\n"
            ));
        }
    }

    #[test]
    fn cluster_host_is_a_name_or_an_address_alone() {
        let host = |h: &str| {
            with(
                "node_id = \"rm1\"\n",
                &format!(
                    "node_id = \"rm1\"\nhost = {}\n",
                    toml::Value::String(h.into())
                ),
            )
        };
        for good in [
            "rm1",
            "rm1.example.com",
            "rm_1-a",
            "10.0.0.1",
            "::1",
            "fd00::1",
            "fe80::1%eth0",
        ] {
            assert_eq!(ok(&host(good)).cluster.host.as_deref(), Some(good));
        }
        for (bad, says) in [
            (
                "rm1:22",
                "it has a port; give the host alone, such as \"rm1\"",
            ),
            (
                "10.0.0.1:8032",
                "it has a port; give the host alone, such as \"10.0.0.1\"",
            ),
            (
                "[::1]:22",
                "it has a port; give the host alone, such as \"::1\"",
            ),
            (
                "[::1]",
                "write an IPv6 address without brackets, such as \"::1\"",
            ),
            ("rm1/x", "a name has at most 253 letters"),
            ("rm 1", "a name has at most 253 letters"),
            ("rm1\t", "a name has at most 253 letters"),
            ("", "it is empty"),
        ] {
            let m = msg(&host(bad));
            assert!(
                m.starts_with("/etc/warden/warden.toml:4:8: `cluster.host` = ")
                    && m.contains("is not a host name or address: ")
                    && m.contains(says),
                "{bad:?}: {m}"
            );
            assert!(!m.contains('\n') && !m.contains('\t'), "{m}");
        }
        let m = msg(&host(&"a".repeat(254)));
        assert!(m.contains("a name has at most 253"), "{m}");
        let m = msg(&host("rm1\0"));
        assert_eq!(
            m,
            "/etc/warden/warden.toml:4:8: `cluster.host` = \"rm1\\0\" contains a NUL character \
             (\\u0000), which no name, path or argument can hold: remove it"
        );
    }

    #[test]
    fn a_nul_in_any_string_is_refused() {
        for (from, to, key) in [
            ("\"/usr/bin/my-service\"", "\"/usr/bin/my\\u0000service\"", "`service.command[0]`"),
            ("connect = ", "auth_file = \"/etc/zk\\u0000\"\nconnect = ", "`coordination.zookeeper.auth_file`"),
            ("[service]\n", "[service]\nmode = \"hooks\"\npromote = [\"/p\"]\ndemote = [\"/d\"]\npidfile = \"/run/a\\u0000b\"\n", "`service.pidfile`"),
        ] {
            let m = msg(&with(from, to));
            assert!(m.contains(key) && m.contains("contains a NUL character"), "{m}");
        }
    }

    #[test]
    fn a_relative_pidfile_is_refused() {
        let hooks = |pidfile: &str| {
            with(
                "command = [\"/usr/bin/my-service\"]",
                &format!("mode = \"hooks\"\npromote = [\"/p\"]\ndemote = [\"/d\"]\npidfile = \"{pidfile}\""),
            )
        };
        assert_eq!(
            msg(&hooks("run/my.pid")),
            "/etc/warden/warden.toml:12:11: `service.pidfile` = \"run/my.pid\" must be an absolute \
             path, such as \"/run/my-service.pid\""
        );
        ok(&hooks("/run/my.pid"));
    }

    #[test]
    fn messages_are_one_line_whatever_the_value_holds() {
        for text in [
            with("[service]\n", "[service]\nmode = \"sp\\nawn\"\n"),
            with(
                "[service]\n",
                "[service]\nstop_signal = \"\\u001b[31mTERM\\n\"\n",
            ),
            with("[service]\n", "[service]\n\"bad\\nkey\" = 1\n"),
            with("node_id = \"rm1\"", "node_id = \"rm\\n1\""),
            with("\"zk1:2181,zk2:2181\"", "\"zk1\\n:2181,zk2:2181\""),
            format!("{BASE}\n[log]\nlevel = \"inf\\no\"\n"),
            format!("{BASE}\n[api]\nlisten = \"\\r\\n\"\n"),
            with("connect = ", "root = \"/a\\n\"\nconnect = "),
            with("[service]\n", "[service]\nstop_timeout = \"1\\nparsec\"\n"),
            format!("{BASE}\n[health]\nkind = \"tcp\"\naddress = \"a\\n:1\"\n"),
        ] {
            let m = msg(&text);
            assert!(
                !m.contains(['\n', '\r', '\u{1b}']),
                "not one line: {m:?}\n{text}"
            );
        }
        // The path of the file, from the command line, is escaped too.
        let e = parse("[cluster\n", Path::new("/tmp/a\nb.toml")).unwrap_err();
        assert!(e.to_string().starts_with("/tmp/a\\nb.toml:1:"), "{e}");
    }

    #[test]
    fn many_unknown_keys_name_the_first_and_count_the_rest() {
        let mut text = format!("{BASE}\n[log]\n");
        for i in 0..100_000 {
            text.push_str(&format!("k{i} = 1\n"));
        }
        let m = msg(&text);
        assert_eq!(
            m,
            "/etc/warden/warden.toml:16:1: unknown key `k0` in [log]; valid keys here: level, \
             format (99999 more unknown keys follow)"
        );
        // On one line too (an inline table): still linear, still the first key.
        let keys: Vec<String> = (0..100_000).map(|i| format!("k{i} = 1")).collect();
        let m = msg(&format!("{BASE}\n[log]\nx = {{ {} }}\n", keys.join(", ")));
        assert!(m.contains("unknown key `x` in [log]"), "{m}");
        let m = msg(&format!(
            "{}\n[log]\nspam = 1\n",
            with("[service]\n", "[service]\nbogus = 2\n")
        ));
        assert!(
            m.starts_with("/etc/warden/warden.toml:9:1: unknown key `bogus` in [service]")
                && m.ends_with(" (1 more unknown key follows)"),
            "{m}"
        );
    }

    /// Runs `load` on a thread, so that a test of something that could block (a fifo)
    /// fails instead of hanging.
    fn load_within(path: &Path) -> Result<Config, ConfigError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let path = path.to_path_buf();
        std::thread::spawn(move || {
            let _ = tx.send(load(&path));
        });
        rx.recv_timeout(Duration::from_secs(20))
            .expect("load did not return within 20s")
    }

    #[test]
    fn load_reads_only_a_regular_file_of_at_most_1_mib() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.toml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert_eq!(
            load_within(&fifo).unwrap_err().to_string(),
            format!(
                "cannot read {}: it is a fifo, not a regular file",
                fifo.display()
            )
        );
        assert_eq!(
            load_within(Path::new("/dev/zero")).unwrap_err().to_string(),
            "cannot read /dev/zero: it is a character device, not a regular file"
        );
        assert_eq!(
            load_within(dir.path()).unwrap_err().to_string(),
            format!(
                "cannot read {}: it is a directory, not a regular file",
                dir.path().display()
            )
        );
        // Padded with comments to exactly 1 MiB it loads; one byte more is refused.
        let path = dir.path().join("warden.toml");
        let mut text = on_disk(BASE);
        while text.len() < MAX_CONFIG_BYTES as usize {
            let room = MAX_CONFIG_BYTES as usize - text.len();
            let line = "#".repeat(room.min(100) - 1) + "\n";
            text.push_str(&line);
        }
        assert_eq!(text.len() as u64, MAX_CONFIG_BYTES);
        std::fs::write(&path, &text).unwrap();
        load_within(&path).unwrap();
        text.push('#');
        std::fs::write(&path, &text).unwrap();
        assert_eq!(
            load_within(&path).unwrap_err().to_string(),
            format!(
                "cannot read {}: it is 1.0 MiB, larger than the 1 MiB this file may be",
                path.display()
            )
        );
        std::fs::write(&path, b"\xff\xfe").unwrap();
        assert!(load_within(&path)
            .unwrap_err()
            .to_string()
            .ends_with("it is not UTF-8 text"));
    }

    #[test]
    fn files_the_config_names_must_be_regular_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = ssh_config(dir.path(), 0o600);
        load_within(&path).unwrap();
        let known = dir.path().join("known_hosts");
        std::fs::remove_file(&known).unwrap();
        std::fs::create_dir(&known).unwrap();
        assert_eq!(
            load_within(&path).unwrap_err().to_string(),
            format!(
                "{}:15:15: `fence[0].known_hosts`: cannot read {}: it is a directory, not a \
                 regular file",
                path.display(),
                known.display()
            )
        );
        std::fs::remove_dir(&known).unwrap();
        nix::unistd::mkfifo(&known, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let m = load_within(&path).unwrap_err().to_string();
        assert!(m.ends_with("it is a fifo, not a regular file"), "{m}");
        std::fs::remove_file(&known).unwrap();
        std::fs::write(&known, "").unwrap();

        let key = dir.path().join("id_ed25519");
        std::fs::remove_file(&key).unwrap();
        nix::unistd::mkfifo(&key, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let m = load_within(&path).unwrap_err().to_string();
        assert!(
            m.contains("`fence[0].identity_file`: cannot read")
                && m.ends_with("it is a fifo, not a regular file"),
            "{m}"
        );

        // An auth file: a fifo, or a file far larger than one line of credentials.
        let auth = dir.path().join("zk.auth");
        nix::unistd::mkfifo(&auth, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let text = with(
            "connect = ",
            &format!(
                "auth_file = \"{}\"\nacl = \"creator\"\nconnect = ",
                auth.display()
            ),
        );
        std::fs::write(&path, on_disk(&text)).unwrap();
        let m = load_within(&path).unwrap_err().to_string();
        assert!(
            m.contains("`coordination.zookeeper.auth_file`: cannot read")
                && m.ends_with("it is a fifo, not a regular file"),
            "{m}"
        );
        std::fs::remove_file(&auth).unwrap();
        std::fs::write(&auth, "digest:w:".to_string() + &"x".repeat(100_000)).unwrap();
        std::fs::set_permissions(&auth, std::fs::Permissions::from_mode(0o600)).unwrap();
        let m = load_within(&path).unwrap_err().to_string();
        assert!(
            m.ends_with("it is 97.7 KiB, larger than the 64 KiB this file may be")
                || m.contains("larger than the 64 KiB"),
            "{m}"
        );
    }

    #[test]
    fn programs_named_by_absolute_path_must_be_executable_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("warden.toml");
        let sub = dir.path().join("subdir");
        std::fs::create_dir(&sub).unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o700)).unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let load_text = |text: &str| {
            std::fs::write(&path, text).unwrap();
            load_within(&path)
        };
        let service = |program: &Path| {
            with(
                "\"/usr/bin/my-service\"",
                &format!("\"{}\"", program.display()),
            )
        };
        let m = load_text(&service(&sub)).unwrap_err().to_string();
        assert_eq!(
            m,
            format!(
                "{}:9:12: `service.command[0]` = \"{}\" is not an executable file: it is a directory",
                path.display(),
                sub.display()
            )
        );
        let m = load_text(&service(&fifo)).unwrap_err().to_string();
        assert!(
            m.ends_with("is not an executable file: it is a fifo"),
            "{m}"
        );
        let m = load_text(&service(&plain)).unwrap_err().to_string();
        assert!(
            m.ends_with(&format!(
                "is not an executable file: nobody may execute it (mode 0644); run `chmod +x {}`",
                plain.display()
            )),
            "{m}"
        );
        let m = load_text(&service(&dir.path().join("missing")))
            .unwrap_err()
            .to_string();
        assert!(
            m.contains(":9:12: `service.command[0]`: cannot read ")
                && m.ends_with("No such file or directory"),
            "{m}"
        );
        // A bare name is looked up in PATH when it runs: not checked here.
        load_text(&with("\"/usr/bin/my-service\"", "\"my-service\"")).unwrap();

        // Hooks, health checks and fence scripts alike; only the ones that apply.
        let sub_s = sub.display().to_string();
        let hooks = on_disk(&with(
            "command = [\"/usr/bin/my-service\"]",
            &format!("mode = \"hooks\"\npromote = [\"/bin/true\"]\ndemote = [\"{sub_s}\", \"x\"]"),
        ));
        let m = load_text(&hooks).unwrap_err().to_string();
        assert!(
            m.contains(":11:11: `service.demote[0]` = ") && m.ends_with("it is a directory"),
            "{m}"
        );
        let m = load_text(&format!(
            "{}\n[health]\nkind = \"exec\"\ncommand = [\"{sub_s}\"]\n",
            on_disk(BASE)
        ))
        .unwrap_err()
        .to_string();
        assert!(
            m.contains("`health.command[0]` = ") && m.ends_with("it is a directory"),
            "{m}"
        );
        let m = load_text(&format!(
            "{}\n[health]\nstandby_command = [\"{sub_s}\"]\n",
            on_disk(BASE)
        ))
        .unwrap_err()
        .to_string();
        assert!(
            m.contains("`health.standby_command[0]` = ") && m.ends_with("it is a directory"),
            "{m}"
        );
        let m = load_text(&on_disk(&with(
            "[\"/bin/true\"]",
            &format!("[\"{sub_s}\"]"),
        )))
        .unwrap_err()
        .to_string();
        assert!(
            m.contains(":13:12: `fence[0].command[0]` = ") && m.ends_with("it is a directory"),
            "{m}"
        );
        // The service command of spawn mode is not run in hooks mode: not checked.
        let hooks_with_command = on_disk(&with(
            "command = [\"/usr/bin/my-service\"]",
            &format!("command = [\"{sub_s}\"]\nmode = \"hooks\"\npromote = [\"/bin/true\"]\ndemote = [\"/bin/true\"]"),
        ));
        load_text(&hooks_with_command).unwrap();
    }
}
