//! The records warden keeps in the coordination service (SPEC §3), and their JSON form.
//!
//! Records are JSON objects readable in `zkCli.sh get`; unknown fields are ignored so an
//! older warden can read a newer one's records. Anything unreadable (not UTF-8, not JSON,
//! over [`MAX_RECORD_BYTES`], or naming a node_id no node can have) is a [`RecordError`],
//! which the election treats as an unknown old active (SPEC §9).
//!
//! Whatever comes from the store reaches a terminal only through [`printable`]: a record
//! is anybody's bytes, and an escape sequence in a node's `host` must not clear an
//! operator's screen.

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;
use std::time::SystemTime;
use warden_fencing::Target;

/// The fencing token: every new lock holder's epoch is greater than every earlier one.
pub type Epoch = u64;

/// ZooKeeper refuses znodes over 1 MiB; anything larger is not ours.
pub const MAX_RECORD_BYTES: usize = 1024 * 1024;

/// The version of a stored item as its store counts them (ZooKeeper: the znode's
/// version; MySQL: a row version; Redis: a counter). Opaque to the elector and the
/// operator commands: they only hand back what they read, so that a conditional write
/// applies only to what was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Version(i64);

impl Version {
    /// For backends: wraps the store's own number.
    pub const fn new(v: i64) -> Version {
        Version(v)
    }

    /// For backends: the store's own number back.
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Who holds a store session, as the store tells it (ZooKeeper: the session id that owns
/// an ephemeral znode): the truth about who holds the lock, whatever its data says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SessionId(pub i64);

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// The breadcrumb as read from the store.
// Read once per takeover and moved, never stored in bulk: boxing the record would only
// add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BreadcrumbView {
    Absent,
    Record {
        record: NodeRecord,
        version: Version,
    },
    /// Present but not a readable record (garbage, too large, not UTF-8).
    Unreadable {
        reason: String,
        version: Version,
    },
}

impl BreadcrumbView {
    /// The version read, when there is a breadcrumb.
    pub fn version(&self) -> Option<Version> {
        match self {
            BreadcrumbView::Absent => None,
            BreadcrumbView::Record { version, .. } | BreadcrumbView::Unreadable { version, .. } => {
                Some(*version)
            }
        }
    }
}

/// What a takeover reads after winning the lock (SPEC §4.3a), as the store has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TakeoverState {
    pub breadcrumb: BreadcrumbView,
    pub control: Control,
    pub control_version: Version,
    /// The greatest epoch of a completed promotion in `history`, if any.
    pub newest_promotion: Option<Epoch>,
    /// The greatest epoch each node's `history` entries name (its promotion, its
    /// step-down, a `fence --confirm` of it).
    pub history_by_node: std::collections::BTreeMap<String, Epoch>,
    /// The greatest epoch of each node's `fence --confirm` entries.
    pub confirmed_by_node: std::collections::BTreeMap<String, Epoch>,
    /// The greatest `epoch_seen` in the member records (SPEC §3a), if any.
    pub members_epoch_seen: Option<Epoch>,
}

/// The outcome of trying to take the lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JoinOutcome {
    /// The lock is ours (taken now, or found held by our session); `epoch` is the one
    /// the store gave it, greater than every earlier lock's.
    Held { epoch: Epoch },
    /// Another session holds it; `epoch` is the holder's once it has committed its
    /// promotion (the lock's record names it), for `epoch_seen`.
    Exists { epoch: Option<Epoch> },
    /// The store lost data (SPEC §3a): no init marker, or its epoch counter is below a
    /// member's `epoch_seen`. Nobody takes the lock until `warden init --force`; the text
    /// says so for the log.
    LostData(String),
    /// Neither could be established (connection loss, timeout); try again.
    Unknown,
}

/// The outcome of a conditional write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Acknowledged.
    Done,
    /// The store said no: a version or existence check failed.
    Conflict,
    /// Not known whether it was applied.
    Unknown,
    /// Applied, but the store could not make it durable as configured (Redis
    /// `replicas_ack`: too few replicas have it in time) and took it back where it could:
    /// the write must not be acted on.
    NotDurable,
}

/// Who a warden process is and where its service runs: the data of `lock`, `breadcrumb`
/// and (flattened) of `members/<node_id>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub node_id: String,
    #[serde(default)]
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(default)]
    pub boot_id: String,
    /// `/etc/machine-id` of the host (SPEC §3, §5 "Which host is this?").
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub machine_id: String,
    /// The inode of warden's pid namespace (`/proc/self/ns/pid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_ns: Option<u64>,
    /// warden's own process.
    #[serde(default)]
    pub pid: u32,
    #[serde(default)]
    pub start_time: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_pgid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_start_time: Option<u64>,
    /// Spawn mode: the service's own cgroup v2, relative to the hierarchy's root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_cgroup: Option<String>,
    /// The inode of warden's cgroup namespace (`/proc/self/ns/cgroup`), whose root
    /// `service_cgroup` is relative to: from another one the path is not the same cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_ns: Option<u64>,
    /// The greatest epoch this node has seen (member records; SPEC §3a).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch_seen: Option<Epoch>,
    /// Random per warden process start.
    #[serde(default)]
    pub incarnation: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<Epoch>,
    /// A breadcrumb rewritten within its epoch (SPEC §4.3d: the service's identity, a
    /// start again, a stop): which rewrite, counting from 1 in this incarnation and
    /// epoch. A store that forgets can keep an older rewrite naming a process that is
    /// gone while a later start runs; a standby that saw the later one writes it back
    /// before fencing (`Elector::forgotten_active`; the simulation's seed 392502).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<u64>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

impl NodeRecord {
    /// Whether `other` is the same warden process start (node id and incarnation).
    pub fn same_incarnation(&self, other: &NodeRecord) -> bool {
        self.node_id == other.node_id && self.incarnation == other.incarnation
    }

    /// Whether `other` names the same service processes (pid, group, start time and
    /// cgroup).
    pub fn same_service(&self, other: &NodeRecord) -> bool {
        (
            self.service_pid,
            self.service_pgid,
            self.service_start_time,
            &self.service_cgroup,
        ) == (
            other.service_pid,
            other.service_pgid,
            other.service_start_time,
            &other.service_cgroup,
        )
    }

    /// This record as the incarnation a fence method acts on.
    pub fn fence_target(&self) -> Target {
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Target {
            node_id: Some(self.node_id.clone()),
            host: non_empty(&self.host),
            port: self.port,
            boot_id: non_empty(&self.boot_id),
            machine_id: non_empty(&self.machine_id),
            pid_ns: self.pid_ns,
            pid: (self.pid != 0).then_some(self.pid),
            start_time: (self.start_time != 0).then_some(self.start_time),
            service_pid: self.service_pid,
            service_pgid: self.service_pgid,
            service_start_time: self.service_start_time,
            service_cgroup: self.service_cgroup.clone(),
            cgroup_ns: self.cgroup_ns,
            incarnation: non_empty(&self.incarnation),
            epoch: self.epoch,
            // Only the caller knows the live members that could contradict a reboot.
            reboot_contradicted: None,
        }
    }
}

/// What tells one machine (and one container on it) from another (SPEC §5 "Which host is
/// this?"): a record is *on this boot* only when all three equal ours, and was written
/// before a *reboot* of this machine only when the machine id equals ours and the boot id
/// does not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostIdentity {
    pub boot_id: String,
    pub machine_id: String,
    pub pid_ns: Option<u64>,
}

impl HostIdentity {
    /// The host identity a record carries.
    pub fn of(r: &NodeRecord) -> HostIdentity {
        HostIdentity {
            boot_id: r.boot_id.clone(),
            machine_id: r.machine_id.clone(),
            pid_ns: r.pid_ns,
        }
    }

    /// Whether `r` was written on this machine, on this boot, in this pid namespace. An
    /// unknown part on either side is never a match.
    pub fn same_boot(&self, r: &NodeRecord) -> bool {
        same_id(&self.boot_id, &r.boot_id)
            && same_id(&self.machine_id, &r.machine_id)
            && self.pid_ns.is_some()
            && self.pid_ns == r.pid_ns
    }

    /// Whether `r` was written on this machine (same machine id), whatever the boot.
    pub fn same_machine(&self, r: &NodeRecord) -> bool {
        same_id(&self.machine_id, &r.machine_id)
    }

    /// Whether `r` carries this machine's id with another boot id, both known: on its
    /// face this machine before a reboot, or (while `r` is a live member's) a clone of
    /// this machine that shares its `/etc/machine-id`.
    pub fn same_machine_other_boot(&self, r: &NodeRecord) -> bool {
        self.same_machine(r)
            && matches!(
                (hex_digits(&self.boot_id), hex_digits(&r.boot_id)),
                (Some(x), Some(y)) if x != y
            )
    }

    /// Why `target` (a breadcrumb that names this machine with another boot id) was not
    /// written before a reboot of this machine, if a live member says so: a member record
    /// in `live` that carries the target's machine id *and* boot id shows that boot still
    /// running, so the machine id is shared by two machines (cloned from one image) and
    /// the target is another machine's, to be fenced by the whole chain (SPEC §5).
    pub fn reboot_contradicted_by(
        &self,
        target: &NodeRecord,
        live: &[MemberRecord],
    ) -> Option<String> {
        if !self.same_machine_other_boot(target) {
            return None;
        }
        let witness = live.iter().find(|m| {
            same_id(&m.node.machine_id, &target.machine_id)
                && same_id(&m.node.boot_id, &target.boot_id)
        })?;
        Some(format!(
            "the record of {} names this machine's id {} (/etc/machine-id) with boot {}, \
             and that boot is not over: the live member {} on host {} runs it; two machines \
             share this machine id (cloned from one image?), so the record is another \
             machine's and only a method that reaches it may fence it (give each machine its \
             own id: rm /etc/machine-id && systemd-machine-id-setup)",
            printable(&target.node_id),
            printable(&target.machine_id),
            printable(&target.boot_id),
            printable(&witness.node.node_id),
            printable(&witness.node.host)
        ))
    }
}

/// The hex digits of a boot or machine id (a UUID with or without dashes), lower case;
/// `None` for an empty or non-hex id, which is unknown.
fn hex_digits(s: &str) -> Option<String> {
    let d: String = s.trim().chars().filter(|c| *c != '-').collect();
    (!d.is_empty() && d.chars().all(|c| c.is_ascii_hexdigit())).then(|| d.to_ascii_lowercase())
}

/// Boot and machine ids are hex (UUIDs with or without dashes): equal when their hex digits
/// are, case aside; an empty or non-hex id equals nothing.
fn same_id(a: &str, b: &str) -> bool {
    matches!((hex_digits(a), hex_digits(b)), (Some(x), Some(y)) if x == y)
}

/// A node's role, as published in its member record and shown by `status` (SPEC §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Not in the election: unhealthy, starting, paused standby, backing off, ceding.
    Ineligible,
    Standby,
    Fencing,
    Promoting,
    Active,
    Demoting,
    /// Holds the lock but its lease is in doubt; the service goes down by the lease end.
    Neutral,
}

impl Role {
    pub const ALL: [Role; 7] = [
        Role::Ineligible,
        Role::Standby,
        Role::Fencing,
        Role::Promoting,
        Role::Active,
        Role::Demoting,
        Role::Neutral,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Ineligible => "ineligible",
            Role::Standby => "standby",
            Role::Fencing => "fencing",
            Role::Promoting => "promoting",
            Role::Active => "active",
            Role::Demoting => "demoting",
            Role::Neutral => "neutral",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The node's view of its own health.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// Not enough checks yet.
    Unknown,
    Healthy,
    Unhealthy,
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Health::Unknown => "unknown",
            Health::Healthy => "healthy",
            Health::Unhealthy => "unhealthy",
        })
    }
}

/// `members/<node_id>`: a node record plus what the node says of itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    #[serde(flatten)]
    pub node: NodeRecord,
    pub role: Role,
    pub health: Health,
    /// The session timeout in force (the smaller of the configured and the granted one),
    /// e.g. `"4s"`, so that `status` shows what the lease really follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_timeout: Option<String>,
    /// How the spawned service is contained: `"cgroup /path"` or `"process group only:
    /// <why>"` (SPEC §6); absent in hooks mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<String>,
    /// Hooks mode with `follow` (SPEC §6): whether this standby follows the current active
    /// (`current (...)`, `pending (...)`, `failed: ...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow: Option<String>,
    /// `[election] priority` (SPEC §6); absent in records of older wardens (= 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u16>,
    /// A service of this node that outlived its stop (processes left after SIGKILL, stuck
    /// in the kernel), named as a breadcrumb names a service, with the epoch it ran
    /// under and no warden process (`pid` 0: its warden lives and must go on saying so).
    /// Whoever wins the lock fences it before promoting, whatever the breadcrumb says: a
    /// store that forgot that breadcrumb leaves this record the only trace of it
    /// (`Elector::member_leftovers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leftover: Option<NodeRecord>,
    /// The active this node saw commit in an earlier link with the store than its
    /// current one (before a restart of the store, a reconnection), or in this link from
    /// the lock's record alone, its breadcrumb not seen (`Elector::remembered`): a store that forgot
    /// that commit may keep no other trace of it, and the winner may be a node that never
    /// saw it (restarted meanwhile). Whoever wins the lock counts it as its own memory of
    /// an active (`Elector::forgotten_active`; the simulation's seed 308747).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remembers: Option<Remembered>,
    /// SPEC §6b: the node's data position as its last passing check told it (the last
    /// stdout line of `health.standby_command`, or of `health.command` on the active), and
    /// when that check ran (RFC 3339); absent while unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position_at: Option<String>,
    /// SPEC §6b: the standby placed just above this one, as this node last read the
    /// members: it lets that one try first for a free lock. Absent for the best-placed,
    /// the active, and a node of priority 0 (which never tries by itself).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "informational_node_id"
    )]
    pub after: Option<String>,
    /// SPEC §4.8 and §6b: how many times this warden process (this incarnation) let go
    /// of the lock because something failed (a fence, a promotion, its service), never
    /// reset: a standby that let it try first once looks at it before it does again (a
    /// better-placed standby that took the lock and failed since will try again after its
    /// back-off). Absent while none failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_takeovers: Option<u32>,
    /// SPEC §6b: while this node waits out a new (or re-made) session before it may take
    /// the lock (§4.1), how much of that wait was left when the record was written (e.g.
    /// `"2s 300ms"`): a standby placed below it lets it try first for that much longer
    /// (at most one session timeout more). A duration, not a time of day, so that no two
    /// hosts' clocks are compared (the review of stop 47). Informational: one that is not
    /// a duration is dropped.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "informational_duration"
    )]
    pub tries_in: Option<String>,
    /// When [`tries_in`](Self::tries_in) ends on this host's monotonic clock, counted
    /// from when the driver first read that record (never written).
    #[serde(skip)]
    pub tries_at: Option<std::time::Instant>,
}

/// [`MemberRecord::tries_in`] as read: one that is not a duration is dropped.
fn informational_duration<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    let v = Option::<serde_json::Value>::deserialize(d)?;
    Ok(v.and_then(|v| match v {
        serde_json::Value::String(s) if humantime::parse_duration(&s).is_ok() => Some(s),
        _ => None,
    }))
}

/// [`MemberRecord::after`] as read: informational, so one that is not a node id (or not a
/// string) is dropped rather than making the whole record unreadable, which would hide
/// its `leftover` and `remembers` from a winner (the review of stop 45).
fn informational_node_id<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    let v = Option::<serde_json::Value>::deserialize(d)?;
    Ok(v.and_then(|v| match v {
        serde_json::Value::String(s) if check_node_id(&s).is_ok() => Some(s),
        _ => None,
    }))
}

/// [`MemberRecord::remembers`]: another node's active, as this node saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remembered {
    /// Its commit's record: what a forgotten commit writes back.
    pub active: NodeRecord,
    /// The latest rewrite of its breadcrumb within that epoch (SPEC §4.3d) this node saw,
    /// if any: written back over an older one the store kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<NodeRecord>,
}

/// `control`: maintenance and planned switchover (SPEC §8).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Control {
    #[serde(default)]
    pub paused: bool,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub failover: Option<FailoverRequest>,
}

/// A pending planned switchover.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailoverRequest {
    pub from: String,
    /// The requested new active; `None`: any healthy standby.
    #[serde(default)]
    pub to: Option<String>,
    /// Who asked (user@host).
    #[serde(default)]
    pub by: String,
    /// RFC 3339; past it the request counts as withdrawn.
    pub deadline: String,
    /// `failover --to NODE --force`: NODE takes over even while it is ineligible
    /// (unhealthy, a failed `follow`, a failing `standby_command`): the operator's word.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
}

impl FailoverRequest {
    /// Whether the request still stands at wall-clock time `now`. An unparsable deadline
    /// counts as lapsed, so a bad request can never hold the cluster.
    pub fn pending_at(&self, now: SystemTime) -> bool {
        humantime::parse_rfc3339_weak(&self.deadline)
            .map(|d| now < d)
            .unwrap_or(false)
    }
}

/// `to` of the history entry of `warden fence --confirm`: the operator's word that the
/// node the breadcrumb named is down.
pub const CONFIRMED_DOWN: &str = "confirmed down";

/// What the store keeps of a node's epoch `e`, as the greatest epochs it names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeptOf {
    /// The breadcrumb's epoch.
    pub breadcrumb: Option<Epoch>,
    /// The newest completed promotion in history.
    pub newest_promotion: Option<Epoch>,
    /// The greatest epoch of that node's own history entries.
    pub node_entries: Option<Epoch>,
    /// The greatest epoch of the operator's `fence --confirm` entries of that node.
    pub node_confirmed: Option<Epoch>,
}

impl KeptOf {
    /// SPEC §3a: whether the store keeps a trace of the *end* of that node's commit of
    /// epoch `e`: a breadcrumb of it or a later one, a later promotion, an entry of that
    /// node's at a later epoch, the operator's confirm of it. Not an entry of that node's
    /// at that very epoch: its warden writes one at each change of role (`neutral` when a
    /// renewal is late, `demoting`, even `active`), after a store that forgot its
    /// breadcrumb as well as before, and none says its service is down (the simulation's
    /// seed 255290). One rule for the winner (`Elector::forgotten_active`) and `status`.
    pub fn ended(&self, e: Epoch) -> bool {
        self.breadcrumb.is_some_and(|b| b >= e)
            || self.newest_promotion.is_some_and(|h| h > e)
            || self.node_entries.is_some_and(|h| h > e)
            || self.node_confirmed.is_some_and(|h| h >= e)
    }
}

/// One entry of `history`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub at: String,
    pub node_id: String,
    pub from: String,
    pub to: String,
    #[serde(default)]
    pub epoch: Option<Epoch>,
    pub reason: String,
}

/// `history` as read: the entries that parse, in the stored order (newest first), and how
/// many elements of the array did not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    pub entries: Vec<HistoryEntry>,
    /// Elements that are not history entries: skipped when read, kept when rewritten.
    pub unreadable_entries: usize,
    /// Why the znode as a whole could not be read (not an array, not UTF-8, too large);
    /// then `entries` is empty, and the next write keeps a copy of it first.
    pub unreadable: Option<String>,
}

/// Why a record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record is {0} bytes, over the 1 MiB limit")]
    TooLarge(usize),
    #[error("record is not UTF-8")]
    NotUtf8,
    #[error("record is not valid JSON: {}", printable(.0))]
    NotJson(String),
    /// The node_id could not be given to `warden fence --confirm NODE`, a fence agent's
    /// `plug=` line or a znode path. Holds the id as [`printable`] shows it, shortened.
    #[error(
        "record names node_id \"{0}\", which is not a valid node_id ([A-Za-z0-9._-], 1 to 64 \
         characters)"
    )]
    BadNodeId(String),
}

/// A record kept in the store: parsed from JSON, then checked for what serde cannot say.
pub trait Record: for<'de> Deserialize<'de> {
    /// What makes a well-formed JSON value unreadable as this record.
    fn check(&self) -> Result<(), RecordError> {
        Ok(())
    }
}

impl Record for NodeRecord {
    fn check(&self) -> Result<(), RecordError> {
        check_node_id(&self.node_id)
    }
}

impl MemberRecord {
    /// `node`'s member record in `role` and `health`, none of the optional fields
    /// (session timeout, containment, follow, priority, leftover, remembers, position)
    /// set.
    pub fn bare(node: NodeRecord, role: Role, health: Health) -> MemberRecord {
        MemberRecord {
            node,
            role,
            health,
            session_timeout: None,
            containment: None,
            follow: None,
            priority: None,
            leftover: None,
            remembers: None,
            position: None,
            position_at: None,
            after: None,
            failed_takeovers: None,
            tries_in: None,
            tries_at: None,
        }
    }
}

impl Record for MemberRecord {
    fn check(&self) -> Result<(), RecordError> {
        self.node.check()
    }
}

/// The ids of a switchover request are only compared with a node's own id, never put in
/// a path or a command line, and an unreadable `control` would read as "not paused": a
/// strange id there is shown escaped rather than made a reason to forget the pause.
impl Record for Control {}

impl Record for HistoryEntry {}

/// A node_id read from the store must be one a config could hold (SPEC §2:
/// `[A-Za-z0-9._-]{1,64}`): it goes into `warden fence --confirm NODE`, a fence agent's
/// `plug=` line, `WARDEN_TARGET_NODE_ID` and `members/<node_id>`.
pub fn check_node_id(id: &str) -> Result<(), RecordError> {
    if crate::config::is_valid_id(id) {
        return Ok(());
    }
    // Enough of it to recognise, not a megabyte of it in a log line.
    const SHOWN: usize = 80;
    let mut shown: String = printable(id).chars().take(SHOWN).collect();
    if printable(id).chars().count() > SHOWN {
        shown.push('…');
    }
    Err(RecordError::BadNodeId(shown))
}

/// Parses a record's bytes, refusing anything oversized, non-UTF-8, not JSON of the type
/// or failing the record's own check.
pub fn parse<T: Record>(bytes: &[u8]) -> Result<T, RecordError> {
    let value: T =
        serde_json::from_str(text(bytes)?).map_err(|e| RecordError::NotJson(e.to_string()))?;
    value.check()?;
    Ok(value)
}

/// The bytes as text, if they are UTF-8 and within [`MAX_RECORD_BYTES`].
fn text(bytes: &[u8]) -> Result<&str, RecordError> {
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(RecordError::TooLarge(bytes.len()));
    }
    std::str::from_utf8(bytes).map_err(|_| RecordError::NotUtf8)
}

/// The elements of the `history` array, each left as it is: one unreadable element must
/// never cost the others (SPEC §9, "nothing lost"). An error only when the znode as a
/// whole is not an array.
pub fn parse_history_values(bytes: &[u8]) -> Result<Vec<serde_json::Value>, RecordError> {
    serde_json::from_str::<Vec<serde_json::Value>>(text(bytes)?)
        .map_err(|e| RecordError::NotJson(format!("history is not a JSON array: {e}")))
}

/// One element of `history`, if it is an entry.
fn history_entry(value: &serde_json::Value) -> Option<HistoryEntry> {
    HistoryEntry::deserialize(value)
        .ok()
        .filter(|e| e.check().is_ok())
}

/// Reads `history` entry by entry: unreadable elements are counted, not fatal.
pub fn parse_history(bytes: &[u8]) -> Result<History, RecordError> {
    let values = parse_history_values(bytes)?;
    let entries: Vec<HistoryEntry> = values.iter().filter_map(history_entry).collect();
    Ok(History {
        unreadable_entries: values.len() - entries.len(),
        entries,
        unreadable: None,
    })
}

/// The longest free text (a reason, a called-off line, an error's details) one history
/// entry keeps, in bytes: a longer one is cut, with a marker saying how much, when the
/// entry is written (the new entry, and every entry written again by an append).
pub const MAX_HISTORY_TEXT: usize = 1024;

/// The most bytes the serialized `history` may take: well under the smallest value limit
/// of the stores (ZooKeeper's `jute.maxbuffer`, 1 MiB by default, counts the whole
/// request) and under [`MAX_RECORD_BYTES`], what a reader accepts. With every text at
/// most [`MAX_HISTORY_TEXT`], 100 entries take about 130 KiB, so in practice only the
/// count bounds it; the bytes bound the rest (unreadable elements, a history planted or
/// written by an older warden).
pub const MAX_HISTORY_BYTES: usize = 256 * 1024;

/// `s` if it has at most `max` bytes, else its head (cut at a character boundary) and a
/// marker naming how many bytes were cut; the result has at most `max` bytes (for `max`
/// of at least 40).
pub fn cut_text(s: &str, max: usize) -> Cow<'_, str> {
    if s.len() <= max {
        return Cow::Borrowed(s);
    }
    // The marker's length with the most digits a cut can have.
    let room = max.saturating_sub(format!("… [{} bytes cut]", s.len()).len());
    let mut head = room.min(s.len());
    while !s.is_char_boundary(head) {
        head -= 1;
    }
    Cow::Owned(format!("{}… [{} bytes cut]", &s[..head], s.len() - head))
}

/// Cuts every string field of an object element to [`MAX_HISTORY_TEXT`] (an entry's
/// `reason`, `from`, `to`, and fields a newer warden added); other elements stay as read.
pub fn cut_history_texts(value: &mut serde_json::Value) {
    if let serde_json::Value::Object(fields) = value {
        for field in fields.values_mut() {
            if let serde_json::Value::String(text) = field {
                if let Cow::Owned(cut) = cut_text(text, MAX_HISTORY_TEXT) {
                    *text = cut;
                }
            }
        }
    }
}

/// Puts `entry` first in the stored `history` array (newest first by the order of the
/// writes, not by anybody's clock: a node whose clock runs fast, or entries from a newer
/// warden, must not push a new transition below old ones), then keeps at most `keep`
/// elements in at most [`MAX_HISTORY_BYTES`]: unreadable elements go first (oldest
/// first), then the oldest entries; the new entry is never dropped. Free texts over
/// [`MAX_HISTORY_TEXT`] are cut.
pub fn insert_history(values: &mut Vec<serde_json::Value>, entry: &HistoryEntry, keep: usize) {
    // Serializing this plain struct cannot fail: no maps with non-string keys, no I/O.
    let value = serde_json::to_value(entry).expect("history entries serialize to JSON");
    values.insert(0, value);
    values.iter_mut().for_each(cut_history_texts);
    // What `history_bytes` writes for each element: the same fields, so the same length.
    let sizes: Vec<usize> = values.iter().map(|v| to_bytes(v).len()).collect();
    let mut count = values.len();
    // `[`, `]` and a comma between elements.
    let mut bytes = sizes.iter().sum::<usize>() + count + 1;
    let over = |count: usize, bytes: usize| count > keep || bytes > MAX_HISTORY_BYTES;
    let mut gone = vec![false; values.len()];
    // Index 0 is the new entry: never a candidate.
    for unreadable_only in [true, false] {
        for i in (1..values.len()).rev() {
            if !over(count, bytes) {
                break;
            }
            if gone[i] || (unreadable_only && history_entry(&values[i]).is_some()) {
                continue;
            }
            gone[i] = true;
            count -= 1;
            bytes -= sizes[i] + 1;
        }
    }
    let mut i = 0;
    values.retain(|_| {
        i += 1;
        !gone[i - 1]
    });
}

/// The bytes of the `history` array: each element that is exactly an entry in the order
/// of SPEC §3 (`at`, `node_id`, ...), easy to read in `zkCli.sh get`; anything else (an
/// unreadable element, an entry with fields from a newer warden) as it was read, so that
/// nothing of it is lost.
pub fn history_bytes(values: &[serde_json::Value]) -> Vec<u8> {
    let mut out = b"[".to_vec();
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match history_entry(v).filter(|e| serde_json::to_value(e).ok().as_ref() == Some(v)) {
            Some(e) => out.extend(to_bytes(&e)),
            None => out.extend(to_bytes(v)),
        }
    }
    out.push(b']');
    out
}

/// `s` as it may reach a terminal: control characters (C0, DEL, C1, so ESC and newlines)
/// and the invisible bidirectional overrides are written as `\u{1b}`, the rest as is.
/// For everything read from the store before it is printed as text.
pub fn printable(s: &str) -> Cow<'_, str> {
    let hidden = |c: char| {
        c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !s.chars().any(hidden) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if hidden(c) {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Serializes a record for the store.
pub fn to_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain structs cannot fail: no maps with non-string keys, no I/O.
    serde_json::to_vec(value).expect("records serialize to JSON")
}

/// RFC 3339 with milliseconds, UTC.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests;
