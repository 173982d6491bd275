//! The `[[fence]]` tables of the config, as typed values.

use crate::values;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// One `[[fence]]` table. The chain tries them in the order they are written. warden's
/// config reads it by its `kind` first (so that errors keep their key path), with the
/// `Deserialize` of the variant's struct.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum FenceMethod {
    Ssh(SshFence),
    Signal(SignalFence),
    Script(ScriptFence),
}

impl FenceMethod {
    /// The targets this method may act on; `None` means all.
    pub fn nodes(&self) -> Option<&[String]> {
        match self {
            FenceMethod::Ssh(m) => m.nodes.as_deref(),
            FenceMethod::Signal(m) => m.nodes.as_deref(),
            FenceMethod::Script(m) => m.nodes.as_deref(),
        }
    }

    /// The hard timeout of one attempt.
    pub fn timeout(&self) -> Duration {
        match self {
            FenceMethod::Ssh(m) => m.timeout,
            FenceMethod::Signal(m) => m.timeout,
            FenceMethod::Script(m) => m.timeout,
        }
    }

    /// A short label for logs and metrics: `ssh`, `signal`, `script:fence-by-port`.
    pub fn label(&self) -> String {
        match self {
            FenceMethod::Ssh(_) => "ssh".to_string(),
            FenceMethod::Signal(_) => "signal".to_string(),
            FenceMethod::Script(m) => {
                let name = m
                    .command
                    .first()
                    .map(|c| c.rsplit('/').next().unwrap_or(c).to_string())
                    .unwrap_or_default();
                format!("script:{name}")
            }
        }
    }
}

/// `kind = "ssh"`: kill the old incarnation on its host through `warden fence-local`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SshFence {
    #[serde(deserialize_with = "values::text")]
    pub user: String,
    #[serde(default = "default_ssh_port", deserialize_with = "values::port")]
    pub port: u16,
    #[serde(deserialize_with = "values::path")]
    pub identity_file: PathBuf,
    #[serde(deserialize_with = "values::path")]
    pub known_hosts: PathBuf,
    #[serde(default = "default_ssh_timeout", with = "values::duration")]
    pub timeout: Duration,
    /// The remote command, a line for the remote user's shell; default: `warden
    /// fence-local`. The target's record is appended as `fence-local` arguments either way
    /// (so `"sudo -n /opt/warden/bin/warden fence-local"` is a drop-in), and a configured
    /// command runs under `timeout -s KILL` on the remote host so that it cannot outlive
    /// the attempt. Exit 0 = fenced.
    #[serde(default, deserialize_with = "values::opt_text")]
    pub command: Option<String>,
    #[serde(default, deserialize_with = "values::opt_strings")]
    pub nodes: Option<Vec<String>>,
}

/// `kind = "signal"`: signal the old incarnation's processes when it ran on this host.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SignalFence {
    #[serde(
        default = "default_fence_signal",
        deserialize_with = "values::fence_signal"
    )]
    pub signal: SignalName,
    #[serde(default = "default_signal_timeout", with = "values::duration")]
    pub timeout: Duration,
    #[serde(default, deserialize_with = "values::opt_strings")]
    pub nodes: Option<Vec<String>>,
}

/// `kind = "script"`: run a program that fences the target.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ScriptFence {
    /// The program and its arguments, run directly (no shell).
    #[serde(deserialize_with = "values::strings")]
    pub command: Vec<String>,
    #[serde(default, deserialize_with = "values::choice")]
    pub protocol: ScriptProtocol,
    /// `fence-agent` protocol: written as `key=value` lines on the agent's stdin.
    #[serde(default, deserialize_with = "values::string_map")]
    pub options: BTreeMap<String, String>,
    #[serde(default = "default_script_timeout", with = "values::duration")]
    pub timeout: Duration,
    #[serde(default, deserialize_with = "values::opt_strings")]
    pub nodes: Option<Vec<String>>,
}

/// How a script learns its target.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ScriptProtocol {
    /// `WARDEN_TARGET_*` in the environment; exit 0 = fenced.
    #[default]
    Env,
    /// Pacemaker's: `key=value` lines on stdin with `action=off` and `plug=<node_id>`.
    FenceAgent,
}

fn default_ssh_port() -> u16 {
    22
}
fn default_ssh_timeout() -> Duration {
    Duration::from_secs(15)
}
fn default_signal_timeout() -> Duration {
    Duration::from_secs(5)
}
fn default_script_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_fence_signal() -> SignalName {
    SignalName(nix::sys::signal::Signal::SIGKILL)
}

/// A signal named as in the config: `"SIGKILL"`, `"KILL"` or `"9"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignalName(pub nix::sys::signal::Signal);

impl FromStr for SignalName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        use nix::sys::signal::Signal;
        if let Ok(n) = s.parse::<i32>() {
            return Signal::try_from(n)
                .map(SignalName)
                .map_err(|_| format!("{n} is not a signal number"));
        }
        let upper = s.to_ascii_uppercase();
        let name = if upper.starts_with("SIG") {
            upper
        } else {
            format!("SIG{upper}")
        };
        Signal::from_str(&name)
            .map(SignalName)
            .map_err(|_| format!("unknown signal {s:?} (expected a name such as \"SIGTERM\")"))
    }
}

impl fmt::Display for SignalName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

impl Serialize for SignalName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.as_str())
    }
}
