//! The fence methods of warden and the chain that runs them (SPEC §5).
//!
//! Fencing acts on an *incarnation*: the old active's record from the breadcrumb
//! ([`Target`]). A node is fenced when neither its warden process nor any process of its
//! service remains, or its host was rebooted. Methods answer [`Outcome::Fenced`],
//! [`Outcome::NotApplicable`] or [`Outcome::Failed`]; the [`FenceChain`] tries them in
//! order under a hard timeout each, and the first that fences wins.
//!
//! [`process`] reads process identity from `/proc` and holds
//! [`process::terminate_incarnation`], the one routine that kills an incarnation on its
//! own host: the `signal` method uses it here, `warden fence-local` on the old active's
//! host. Example fence scripts live in `fencing/scripts/`.

pub mod cgroup;
mod chain;
mod config;
pub mod files;
mod outcome;
pub mod process;
mod script;
mod signal;
mod ssh;
pub mod values;

pub use chain::{FenceChain, Local, Methods, OVERRUN_GRACE};
pub use config::{FenceMethod, ScriptFence, ScriptProtocol, SignalFence, SignalName, SshFence};
pub use outcome::{Attempt, FenceReport, MethodResult, Outcome};
pub use ssh::{
    fence_local_args, DEFAULT_REMOTE_COMMAND, FENCE_LOCAL_FENCED, FENCE_LOCAL_MAX_TIMEOUT,
    FENCE_LOCAL_SUBCOMMAND,
};

use serde::Serialize;
use std::path::PathBuf;

/// The incarnation to fence, as recorded in the breadcrumb. Every field but `node_id` may be
/// unknown (an old or partly written record); `node_id` is unknown only when the breadcrumb
/// could not be parsed at all.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Target {
    pub node_id: Option<String>,
    pub host: Option<String>,
    /// The managed service's port, if it has one.
    pub port: Option<u16>,
    /// `/proc/sys/kernel/random/boot_id` of the target's host when it was recorded.
    pub boot_id: Option<String>,
    /// `/etc/machine-id` of the target's host: with `boot_id` and `pid_ns`, what tells
    /// this machine (and this container) from another (SPEC §5 "Which host is this?").
    pub machine_id: Option<String>,
    /// The inode of the target warden's `/proc/self/ns/pid`: containers on one kernel
    /// share a boot id but not their pid namespace.
    pub pid_ns: Option<u64>,
    /// The old warden process and its start time (clock ticks since boot, /proc stat field 22).
    pub pid: Option<u32>,
    pub start_time: Option<u64>,
    /// The old service: its pid, process group and start time.
    pub service_pid: Option<u32>,
    pub service_pgid: Option<u32>,
    pub service_start_time: Option<u64>,
    /// The service's cgroup v2, relative to the hierarchy's root (spawn mode, when the
    /// service had a cgroup of its own): every process in it is the service's.
    pub service_cgroup: Option<String>,
    /// The inode of the target warden's cgroup namespace (`/proc/self/ns/cgroup`): the
    /// cgroup path above is relative to that namespace's root, and names another cgroup,
    /// or none, from another one.
    pub cgroup_ns: Option<u64>,
    /// Random per warden process start.
    pub incarnation: Option<String>,
    pub epoch: Option<u64>,
    /// Why the target, which names this machine's id with another boot id, was *not*
    /// written before a reboot of this machine (a live member still runs that boot: two
    /// machines share one machine id). Set by the caller, which can see the members;
    /// `signal` then does not take the target as rebooted (SPEC §5).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reboot_contradicted: Option<String>,
}

impl Target {
    /// A short name for logs: the node id, or `<unreadable breadcrumb>`.
    pub fn label(&self) -> &str {
        self.node_id.as_deref().unwrap_or("<unreadable breadcrumb>")
    }
}

/// What a fence method knows about the node that runs it.
#[derive(Clone, Debug, Default)]
pub struct FenceContext {
    pub cluster: String,
    /// This node's id (passed to scripts as `WARDEN_NODE_ID`).
    pub node_id: String,
    /// This node's host name as configured (`cluster.host`).
    pub host: String,
    /// This host's current boot id.
    pub boot_id: String,
    /// This host's machine id (`/etc/machine-id`); empty if unknown.
    pub machine_id: String,
    /// The inode of this warden's pid namespace; 0 if unknown.
    pub pid_ns: u64,
    /// Hooks mode: the pidfile of the locally running service, so `signal` can find it.
    pub pidfile: Option<PathBuf>,
}

impl FenceContext {
    /// The context of a fence chain run from this process: this host's boot id, machine
    /// id and pid namespace are read here. A boot id that cannot be read is an error (the
    /// `signal` method could not tell whether a target ran here); a machine id or pid
    /// namespace that cannot be read is left unknown, which makes `signal` decline every
    /// target rather than guess.
    pub fn local(
        cluster: &str,
        node_id: &str,
        host: &str,
        pidfile: Option<PathBuf>,
    ) -> std::io::Result<FenceContext> {
        Ok(FenceContext {
            cluster: cluster.to_string(),
            node_id: node_id.to_string(),
            host: host.to_string(),
            boot_id: process::boot_id()?,
            machine_id: process::machine_id().unwrap_or_default(),
            pid_ns: process::pid_ns().unwrap_or(0),
            pidfile,
        })
    }
}
