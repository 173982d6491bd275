//! TOML -> typed, validated [`Config`] (SPEC §2). All defaults and checks live here.
//!
//! Reading a config goes through four steps, each of which can stop with a
//! [`ConfigError`] that names the file, line, column and dotted key:
//!
//! 1. the TOML syntax, parsed with spans ([`toml::de::DeTable`]);
//! 2. the unknown keys: the serde types are the schema, and their field names (learnt
//!    from serde itself) are checked against the file's keys in one pass; a typo gets the
//!    nearest valid key suggested, a key in the wrong table the table it belongs in;
//! 3. serde builds the typed [`Config`] (through `serde_path_to_error`, so an error
//!    carries its dotted key). The fields name the functions of
//!    [`warden_fencing::values`] that read them: durations with units, ranges, signals,
//!    choices, no NUL in a string. Wrong types, refused values and missing keys become
//!    [`ConfigError`]s located by the key's span. serde reads the keys in the file's
//!    order and stops at its first error, which is the one reported: a required key is
//!    found missing where its table ends;
//! 4. the rules that relate values to each other (modes, fencing, ACLs), checked on the
//!    typed config and reported at the place in the file the value came from.
//!
//! [`parse`] does all of that without touching the filesystem; [`load`] reads the file,
//! parses it and then checks the files the config points at (private keys and the
//! ZooKeeper auth file must exist and be private, as OpenSSH demands of keys).
//!
//! Key paths count `[[fence]]` tables from 0, as TOML tooling does: `fence[0]` is the
//! first one in the file.
//!
//! The folder: this file holds the types and their defaults; `error` where in the file
//! and what is wrong; `entry` [`load`] and [`parse`]; `keys` key paths and locations in
//! the source; `schema` steps 2 and 3 (which tables there are, and serde's errors in the
//! words of [`ConfigError`]); `rules` step 4; `files` the files the config names;
//! `warnings` what works but an operator should know; `render` the resolved config for
//! `check-config`.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::de::{DeTable, DeValue};
use toml::Spanned;
use warden_fencing::{values, FenceMethod, ScriptProtocol, SignalName};

mod entry;
mod error;
mod files;
mod keys;
mod render;
mod rules;
mod schema;
#[cfg(test)]
mod tests;
mod warnings;

pub use entry::*;
pub use error::*;
pub use files::*;
use keys::*;
#[cfg(test)]
use render::*;
use rules::*;
use schema::*;
use warnings::*;

/// The whole configuration file.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(deserialize_with = "values::table")]
    pub cluster: ClusterConfig,
    #[serde(deserialize_with = "values::table")]
    pub coordination: CoordinationConfig,
    #[serde(default, deserialize_with = "values::table")]
    pub election: ElectionConfig,
    #[serde(deserialize_with = "values::table")]
    pub service: ServiceConfig,
    #[serde(default, deserialize_with = "values::table")]
    pub health: HealthConfig,
    #[serde(default, deserialize_with = "fences")]
    pub fence: Vec<FenceMethod>,
    #[serde(default, deserialize_with = "values::opt_table")]
    pub api: Option<ApiConfig>,
    #[serde(default, deserialize_with = "values::table")]
    pub log: LogConfig,
}

/// `[cluster]`: which election this node takes part in, and how peers reach it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// One election scope: `<root>/<name>` in ZooKeeper.
    #[serde(deserialize_with = "values::text")]
    pub name: String,
    /// Unique in the cluster: `[A-Za-z0-9._-]{1,64}`.
    #[serde(deserialize_with = "values::text")]
    pub node_id: String,
    /// How peers reach this node for fencing; default: the hostname.
    #[serde(default, deserialize_with = "values::opt_text")]
    pub host: Option<String>,
    /// The managed service's port, if it has one (used by fencing).
    #[serde(default, deserialize_with = "values::opt_port")]
    pub port: Option<u16>,
}

/// `[coordination]`: which coordination service elects the active.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CoordinationConfig {
    #[serde(default, deserialize_with = "values::choice")]
    pub backend: Backend,
    /// Required with `backend = "zookeeper"`; when absent it holds the defaults (an empty
    /// `connect`), and only the chosen backend's table is used.
    #[serde(
        default,
        skip_serializing_if = "ZooKeeperConfig::is_unset",
        deserialize_with = "values::table"
    )]
    pub zookeeper: ZooKeeperConfig,
    #[serde(default, deserialize_with = "values::opt_table")]
    pub mysql: Option<MysqlConfig>,
    #[serde(default, deserialize_with = "values::opt_table")]
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

    /// The store's name in words, for log lines ("the MySQL session expired").
    pub fn display_name(self) -> &'static str {
        match self {
            Backend::Zookeeper => "ZooKeeper",
            Backend::Mysql => "MySQL",
            Backend::Redis => "Redis",
        }
    }
}

/// `[coordination.mysql]` (SPEC §3a).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MysqlConfig {
    /// `mysql://user@host:port/database`; never a password (that goes in `password_file`).
    #[serde(deserialize_with = "values::text")]
    pub url: String,
    #[serde(default, deserialize_with = "values::opt_path")]
    pub password_file: Option<PathBuf>,
    #[serde(default = "default_session_timeout", with = "values::duration")]
    pub session_timeout: Duration,
    #[serde(default = "default_poll_interval", with = "values::duration")]
    pub poll_interval: Duration,
    #[serde(default = "default_connect_timeout", with = "values::duration")]
    pub connect_timeout: Duration,
    #[serde(default = "default_table_prefix", deserialize_with = "values::text")]
    pub table_prefix: String,
}

/// `[coordination.redis]` (SPEC §3a).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://host:port/db` or `rediss://...`; never a password.
    #[serde(deserialize_with = "values::text")]
    pub url: String,
    #[serde(default, deserialize_with = "values::opt_path")]
    pub password_file: Option<PathBuf>,
    #[serde(default = "default_session_timeout", with = "values::duration")]
    pub session_timeout: Duration,
    #[serde(default = "default_poll_interval", with = "values::duration")]
    pub poll_interval: Duration,
    #[serde(default = "default_connect_timeout", with = "values::duration")]
    pub connect_timeout: Duration,
    #[serde(default = "default_key_prefix", deserialize_with = "values::text")]
    pub key_prefix: String,
    /// SPEC §3a: replicas of the store that must have a promotion (`WAIT`) before the
    /// service is promoted; 0 = none.
    #[serde(default, deserialize_with = "values::replicas")]
    pub replicas_ack: u32,
}

/// `[coordination.zookeeper]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ZooKeeperConfig {
    /// `host:port[,host:port...][/chroot]`
    #[serde(deserialize_with = "values::text")]
    pub connect: String,
    /// The parent znode of every cluster.
    #[serde(default = "default_root", deserialize_with = "values::text")]
    pub root: String,
    #[serde(default = "default_session_timeout", with = "values::duration")]
    pub session_timeout: Duration,
    #[serde(default = "default_connect_timeout", with = "values::duration")]
    pub connect_timeout: Duration,
    /// `scheme:credentials`, e.g. `digest:warden:secret`.
    #[serde(default, deserialize_with = "values::opt_text")]
    pub auth: Option<String>,
    /// A file holding the `auth` string; must not be readable by group or others.
    #[serde(default, deserialize_with = "values::opt_path")]
    pub auth_file: Option<PathBuf>,
    #[serde(default, deserialize_with = "values::choice")]
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
    #[serde(default = "default_rejoin_delay", with = "values::duration")]
    pub rejoin_delay: Duration,
    /// SPEC §6: 0 = never promoted by itself; higher wins the race for a free lock.
    #[serde(default = "default_priority", deserialize_with = "values::priority")]
    pub priority: u16,
    /// SPEC §6b: `failover --to` refuses a target whose position is behind the best-placed
    /// eligible standby's by more than this (without `--force`); `None`: no limit.
    #[serde(
        default,
        deserialize_with = "values::opt_position",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_lag: Option<u64>,
}

impl Default for ElectionConfig {
    fn default() -> Self {
        ElectionConfig {
            rejoin_delay: default_rejoin_delay(),
            priority: default_priority(),
            max_lag: None,
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
    #[serde(default, deserialize_with = "values::choice")]
    pub mode: ServiceMode,
    /// spawn: the service's program and arguments.
    #[serde(default, deserialize_with = "values::strings")]
    pub command: Vec<String>,
    #[serde(default = "default_stop_signal", deserialize_with = "values::signal")]
    pub stop_signal: SignalName,
    #[serde(default = "default_stop_timeout", with = "values::duration")]
    pub stop_timeout: Duration,
    /// hooks: run to promote / demote the always-running service.
    #[serde(default, deserialize_with = "values::strings")]
    pub promote: Vec<String>,
    #[serde(default, deserialize_with = "values::strings")]
    pub demote: Vec<String>,
    /// hooks, optional: run on each standby when a new active is promoted, and at start
    /// when one exists (SPEC §6): the place to repoint a replica.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "values::strings"
    )]
    pub follow: Vec<String>,
    #[serde(default = "default_hook_timeout", with = "values::duration")]
    pub hook_timeout: Duration,
    /// hooks: the service's pid, so that fencing and forced demotion kill the right process.
    #[serde(default, deserialize_with = "values::opt_path")]
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
    #[serde(default, deserialize_with = "values::choice")]
    pub kind: HealthKind,
    /// tcp: `host:port` to connect to.
    #[serde(default, deserialize_with = "values::opt_text")]
    pub address: Option<String>,
    /// http: a 2xx answer is healthy.
    #[serde(default, deserialize_with = "values::opt_text")]
    pub url: Option<String>,
    /// http with an https URL: a PEM file of CA certificates trusted besides the host's.
    #[serde(default, deserialize_with = "values::opt_path")]
    pub ca_file: Option<PathBuf>,
    /// exec: exit 0 is healthy.
    #[serde(default, deserialize_with = "values::strings")]
    pub command: Vec<String>,
    #[serde(default = "default_health_interval", with = "values::duration")]
    pub interval: Duration,
    #[serde(default = "default_health_timeout", with = "values::duration")]
    pub timeout: Duration,
    /// Consecutive failures before unhealthy.
    #[serde(default = "default_fall", deserialize_with = "values::count")]
    pub fall: u32,
    /// Consecutive passes before healthy.
    #[serde(default = "default_rise", deserialize_with = "values::count")]
    pub rise: u32,
    /// spawn mode: checks of a just-started service do not count yet.
    #[serde(default = "default_start_grace", with = "values::duration")]
    pub start_grace: Duration,
    /// spawn mode: exit 0 = this standby may take over; default: always eligible.
    #[serde(default, deserialize_with = "values::strings")]
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
    #[serde(deserialize_with = "values::socket_addr")]
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
    #[serde(default = "default_log_level", deserialize_with = "values::text")]
    pub level: String,
    #[serde(default, deserialize_with = "values::choice")]
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
