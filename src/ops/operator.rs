//! What the operator commands (`failover`, `pause`, `resume`, `fence`, `history`) share:
//! who runs them, how they end (SPEC §7 exit codes), and how they record what they did in
//! `history`.

use crate::coord::{Connector, Session};
use crate::record::{self, Epoch, HistoryEntry};
use std::time::SystemTime;

// The operator commands' error lives with the one error of every command.
pub use crate::error::OpError;

/// Opens the command's session to the cluster, bounded by `connect_timeout`.
pub async fn session<C: Connector>(connector: &C) -> Result<C::Session, OpError> {
    connector
        .connect()
        .await
        .map_err(OpError::store("reach the cluster"))
}

/// Who runs the command, as `user@host`: `$USER` (or `$LOGNAME`, or the uid's name) at
/// this machine's hostname. It goes into failover requests and history entries.
pub fn identity() -> String {
    let user = ["USER", "LOGNAME"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|u| !u.is_empty())
        .unwrap_or_else(|| {
            let uid = nix::unistd::getuid();
            nix::unistd::User::from_uid(uid)
                .ok()
                .flatten()
                .map_or_else(|| format!("uid{uid}"), |u| u.name)
        });
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_string());
    format!("{user}@{host}")
}

/// A history entry stamped now.
pub fn entry(
    node_id: impl Into<String>,
    from: impl Into<String>,
    to: impl Into<String>,
    epoch: Option<Epoch>,
    reason: impl Into<String>,
) -> HistoryEntry {
    HistoryEntry {
        at: record::rfc3339(SystemTime::now()),
        node_id: node_id.into(),
        from: from.into(),
        to: to.into(),
        epoch,
        reason: reason.into(),
    }
}

/// Appends `entry` to `history`. The operation it records is already done, so a failure
/// is a warning on stderr, not a failed command. An unreadable history znode is copied
/// before it is replaced; where the copy went is said here.
pub async fn record<S: Session>(zk: &S, entry: &HistoryEntry) {
    match zk.append_history(entry).await {
        Ok(None) => {}
        Ok(Some(copy)) => crate::errln!(
            "warden: the history znode was unreadable; its old contents are kept in {copy} \
             and a new history starts with this entry"
        ),
        Err(e) => crate::errln!(
            "warden: warning: done, but it could not be added to history ({}); it is missing \
             from `warden history`",
            record::printable(&e.to_string())
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coord::StoreError;

    #[test]
    fn identity_is_user_at_host() {
        let id = identity();
        let (user, host) = id.split_once('@').unwrap();
        assert!(!user.is_empty(), "{id}");
        assert!(!host.is_empty(), "{id}");
    }

    #[test]
    fn unreachable_store_exits_3_and_refusals_exit_1() {
        let unreachable = OpError::Store {
            doing: "read the cluster",
            source: StoreError::Unreachable {
                store: "ZooKeeper",
                key: "coordination.zookeeper.connect",
                connect: "127.0.0.1:1".into(),
                timeout: "1s".into(),
                reason: "refused".into(),
            },
        };
        assert_eq!(unreachable.exit_code(), 3);
        assert!(unreachable
            .to_string()
            .starts_with("could not read the cluster: cannot reach ZooKeeper"));
        let unknown = OpError::Store {
            doing: "write control",
            source: StoreError::Unknown("no answer".into()),
        };
        assert_eq!(unknown.exit_code(), 1);
        assert_eq!(OpError::Refused("no".into()).exit_code(), 1);
        assert_eq!(OpError::Failed("no".into()).exit_code(), 1);
    }
}
