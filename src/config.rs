//! TOML -> typed, validated [`Config`] (SPEC §2). All defaults and checks live here.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use warden_fencing::{FenceMethod, SignalName};

/// The whole configuration file.
#[derive(Clone, Debug, Deserialize, Serialize)]
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

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    pub name: String,
    pub node_id: String,
    /// How peers reach this node for fencing; default: the hostname.
    #[serde(default)]
    pub host: Option<String>,
    #[serde(default)]
    pub port: Option<u16>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CoordinationConfig {
    #[serde(default)]
    pub backend: Backend,
    pub zookeeper: ZooKeeperConfig,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    #[default]
    Zookeeper,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ZooKeeperConfig {
    /// `host:port[,host:port...][/chroot]`
    pub connect: String,
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

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AclMode {
    #[default]
    Open,
    Creator,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ElectionConfig {
    #[serde(default = "default_rejoin_delay", with = "humantime_serde")]
    pub rejoin_delay: Duration,
}

impl Default for ElectionConfig {
    fn default() -> Self {
        ElectionConfig {
            rejoin_delay: default_rejoin_delay(),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ServiceMode {
    #[default]
    Spawn,
    Hooks,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
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
    #[serde(default = "default_hook_timeout", with = "humantime_serde")]
    pub hook_timeout: Duration,
    #[serde(default)]
    pub pidfile: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum HealthKind {
    Exec,
    Tcp,
    Http,
    #[default]
    None,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
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
    /// exec: exit 0 is healthy.
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default = "default_health_interval", with = "humantime_serde")]
    pub interval: Duration,
    #[serde(default = "default_health_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    #[serde(default = "default_fall")]
    pub fall: u32,
    #[serde(default = "default_rise")]
    pub rise: u32,
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

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    pub listen: SocketAddr,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
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
fn default_hook_timeout() -> Duration {
    Duration::from_secs(10)
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
}
