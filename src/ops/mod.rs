//! Operator commands: they read and write the same znodes as the daemon, through a
//! session of their own, so they work with every daemon down.

pub mod failover;
pub mod fence;
pub mod fence_local;
pub mod history;
pub mod init;
pub mod operator;
pub mod pause;
pub mod status;

use crate::config::Config;
use crate::coord::zookeeper::{ZkConnector, ZkSession};
use crate::coord::StoreError;

/// The store session of operator commands: the one place the commands name a backend;
/// everything else works through [`crate::coord::Session`].
pub type StoreSession = ZkSession;

/// The connector of operator commands' sessions.
pub fn connector(cfg: &Config) -> Result<ZkConnector, StoreError> {
    let auth = cfg
        .read_auth()
        .map_err(|e| StoreError::Auth(e.to_string()))?;
    Ok(ZkConnector::new(
        &cfg.coordination.zookeeper,
        &cfg.cluster.name,
        auth,
    ))
}

/// Opens a session for an operator command, bounded by `connect_timeout`.
pub async fn session(cfg: &Config) -> Result<StoreSession, StoreError> {
    connector(cfg)?.connect().await
}
