//! The coordination service: what the election needs from it, and the ZooKeeper backend.
//!
//! The backend speaks the election's vocabulary (join, commit a promotion, renew the lease,
//! compare-and-delete the breadcrumb) rather than ZooKeeper's, so that the MySQL and Redis
//! backends planned in SPEC §2 can map the same operations onto their own primitives.
//! There is one backend today, so it is a concrete type; the trait is extracted when the
//! second one lands and shows what really varies.

pub mod zookeeper;

use crate::record::{self, Control, HistoryEntry, MemberRecord, NodeRecord, RecordError};

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
    /// Authentication was refused or the ACL forbids the operation.
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
    pub breadcrumb: Option<(Result<NodeRecord, RecordError>, i32)>,
    pub control: Control,
    pub control_version: Option<i32>,
    /// Member records; unreadable ones are listed by node id with the error.
    pub members: Vec<(String, Result<MemberRecord, RecordError>)>,
    pub history: Vec<HistoryEntry>,
}

impl ClusterSnapshot {
    /// The active node: the lock holder once its member record says `active`.
    pub fn active(&self) -> Option<(&NodeRecord, &MemberRecord)> {
        let (Ok(holder), _) = self.lock.as_ref()? else {
            return None;
        };
        self.members.iter().find_map(|(id, m)| match m {
            Ok(m)
                if *id == holder.node_id
                    && m.role == record::Role::Active
                    && m.node.incarnation == holder.incarnation =>
            {
                Some((holder, m))
            }
            _ => None,
        })
    }
}
