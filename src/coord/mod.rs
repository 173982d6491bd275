//! The coordination service: what the election needs from it, and the ZooKeeper backend.
//!
//! The backend speaks the election's vocabulary (join, commit a promotion, renew the lease,
//! compare-and-delete the breadcrumb) rather than ZooKeeper's, so that the MySQL and Redis
//! backends planned in SPEC §2 can map the same operations onto their own primitives.
//! There is one backend today, so it is a concrete type; the trait is extracted when the
//! second one lands and shows what really varies.

pub mod zookeeper;

use crate::record::{self, Control, History, MemberRecord, NodeRecord, RecordError};

/// How a store call ended when it did not succeed, in the three kinds the election acts on.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store answered no: the node exists, does not exist, or has another version.
    #[error("{0}")]
    Rejected(String),
    /// Not known whether it happened: connection loss, timeout, no answer.
    #[error("outcome unknown: {0}")]
    Unknown(String),
    /// The session expired or was closed; nothing more can be done in it.
    #[error("the coordination session was lost: {0}")]
    SessionLost(String),
    /// Authentication was refused or the ACL forbids the operation; the text names the
    /// znode refused.
    #[error(
        "ZooKeeper refused access: {0}; check coordination.zookeeper.auth and the znodes' ACLs"
    )]
    Auth(String),
    /// No session could be opened in time.
    #[error("cannot reach ZooKeeper at {connect} within {timeout}: {reason}; check coordination.zookeeper.connect and that the ensemble is up")]
    Unreachable {
        connect: String,
        timeout: String,
        reason: String,
    },
}

impl StoreError {
    /// Whether the operator's command should exit 3 (coordination unreachable or auth).
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            StoreError::Unreachable { .. } | StoreError::Auth(_) | StoreError::SessionLost(_)
        )
    }
}

/// Everything `status` and the operator commands read about a cluster.
#[derive(Debug, Clone, Default)]
pub struct ClusterSnapshot {
    /// The lock holder's record (or why it could not be read) and the lock's czxid.
    pub lock: Option<(Result<NodeRecord, RecordError>, i64)>,
    /// The session that owns the (ephemeral) lock: the truth about who holds it, whatever
    /// its data says. `None` when there is no lock or it was not read.
    pub lock_owner: Option<i64>,
    pub breadcrumb: Option<(Result<NodeRecord, RecordError>, i32)>,
    /// `control` as the daemons use it: an unreadable one counts as the default.
    pub control: Control,
    pub control_version: Option<i32>,
    /// Why `control` could not be read, when it exists and could not.
    pub control_unreadable: Option<String>,
    /// Member records; unreadable ones are listed by node id with the error.
    pub members: Vec<(String, Result<MemberRecord, RecordError>)>,
    /// The session that owns each member znode, by node id.
    pub member_sessions: Vec<(String, i64)>,
    pub history: History,
    /// Old histories kept beside `history` (`history.unreadable-*`, `history.old-*`).
    pub set_aside: Vec<String>,
}

impl ClusterSnapshot {
    /// The node id whose session owns the lock, or, when sessions were not read, the one
    /// the lock's record names.
    pub fn lock_holder_id(&self) -> Option<&str> {
        let (record, _) = self.lock.as_ref()?;
        match self.lock_owner {
            Some(owner) => self
                .member_sessions
                .iter()
                .find(|(_, s)| *s == owner)
                .map(|(id, _)| id.as_str()),
            None => record.as_ref().ok().map(|h| h.node_id.as_str()),
        }
    }

    /// The active node: the lock holder once its member record says `active`. The holder
    /// is found by its session, so garbage written into the lock's data cannot make
    /// `status` contradict the node's own `/active`; its record is the lock's when that
    /// is readable and names it, else the member's own.
    pub fn active(&self) -> Option<(&NodeRecord, &MemberRecord)> {
        let (record, _) = self.lock.as_ref()?;
        let holder = self.lock_holder_id()?;
        let member = self.members.iter().find_map(|(id, m)| match m {
            Ok(m) if id == holder && m.role == record::Role::Active => Some(m),
            _ => None,
        })?;
        match record {
            Ok(h) if h.node_id == holder && h.incarnation == member.node.incarnation => {
                Some((h, member))
            }
            // Sessions read: the session is the proof, whatever the data says.
            _ if self.lock_owner.is_some() => Some((&member.node, member)),
            _ => None,
        }
    }
}
