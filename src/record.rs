//! The records warden keeps in the coordination service (SPEC §3), and their JSON form.
//!
//! Records are JSON objects readable in `zkCli.sh get`; unknown fields are ignored so an
//! older warden can read a newer one's records. Anything unreadable (not UTF-8, not JSON,
//! over [`MAX_RECORD_BYTES`]) is a [`RecordError`], which the election treats as an
//! unknown old active (SPEC §9).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::SystemTime;
use warden_fencing::Target;

/// The fencing token: every new lock holder's epoch is greater than every earlier one.
pub type Epoch = u64;

/// ZooKeeper refuses znodes over 1 MiB; anything larger is not ours.
pub const MAX_RECORD_BYTES: usize = 1024 * 1024;

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
    /// The greatest epoch this node has seen (member records; SPEC §3a).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch_seen: Option<Epoch>,
    /// Random per warden process start.
    #[serde(default)]
    pub incarnation: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<Epoch>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

impl NodeRecord {
    /// Whether `other` is the same warden process start (node id and incarnation).
    pub fn same_incarnation(&self, other: &NodeRecord) -> bool {
        self.node_id == other.node_id && self.incarnation == other.incarnation
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
            incarnation: non_empty(&self.incarnation),
            epoch: self.epoch,
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
}

/// Boot and machine ids are hex (UUIDs with or without dashes): equal when their hex digits
/// are, case aside; an empty or non-hex id equals nothing.
fn same_id(a: &str, b: &str) -> bool {
    let digits = |s: &str| -> Option<String> {
        let d: String = s.chars().filter(|c| *c != '-').collect();
        (!d.is_empty() && d.chars().all(|c| c.is_ascii_hexdigit())).then(|| d.to_ascii_lowercase())
    };
    matches!((digits(a), digits(b)), (Some(x), Some(y)) if x == y)
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

/// Why a record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record is {0} bytes, over the 1 MiB limit")]
    TooLarge(usize),
    #[error("record is not UTF-8")]
    NotUtf8,
    #[error("record is not valid JSON: {0}")]
    NotJson(String),
}

/// Parses a record's bytes, refusing anything oversized, non-UTF-8 or not JSON of the type.
pub fn parse<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, RecordError> {
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(RecordError::TooLarge(bytes.len()));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| RecordError::NotUtf8)?;
    serde_json::from_str(text).map_err(|e| RecordError::NotJson(e.to_string()))
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
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_ignored() {
        let r: NodeRecord =
            parse(br#"{"node_id":"rm1","host":"h","future":{"x":1},"pid":7}"#).unwrap();
        assert_eq!(r.node_id, "rm1");
        assert_eq!(r.pid, 7);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(
            parse::<NodeRecord>(b"\xff\xfe"),
            Err(RecordError::NotUtf8)
        ));
        assert!(matches!(
            parse::<NodeRecord>(b"not json"),
            Err(RecordError::NotJson(_))
        ));
        let big = vec![b' '; MAX_RECORD_BYTES + 1];
        assert!(matches!(
            parse::<NodeRecord>(&big),
            Err(RecordError::TooLarge(_))
        ));
    }

    #[test]
    fn member_record_flattens_the_node_record() {
        let m = MemberRecord {
            node: NodeRecord {
                node_id: "rm1".into(),
                ..Default::default()
            },
            role: Role::Standby,
            health: Health::Healthy,
            session_timeout: None,
            containment: None,
        };
        let v: serde_json::Value = serde_json::from_slice(&to_bytes(&m)).unwrap();
        assert_eq!(v["node_id"], "rm1");
        assert_eq!(v["role"], "standby");
        assert_eq!(parse::<MemberRecord>(&to_bytes(&m)).unwrap(), m);
    }

    #[test]
    fn a_failover_request_lapses_at_its_deadline() {
        let now = SystemTime::now();
        let req = |d: SystemTime| FailoverRequest {
            from: "a".into(),
            to: None,
            by: "op".into(),
            deadline: rfc3339(d),
        };
        assert!(req(now + std::time::Duration::from_secs(5)).pending_at(now));
        assert!(!req(now - std::time::Duration::from_secs(5)).pending_at(now));
        let mut bad = req(now);
        bad.deadline = "soon".into();
        assert!(!bad.pending_at(now));
    }
}
