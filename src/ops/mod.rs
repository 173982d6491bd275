//! Operator commands: they read and write the same records as the daemon, through a
//! session of their own on the configured store, so they work with every daemon down.

pub mod failover;
pub mod fence;
pub mod fence_local;
pub mod history;
pub mod init;
pub mod operator;
pub mod out;
pub mod pause;
pub mod status;

use crate::config::Config;
use crate::coord::any::{AnyConnector, AnySession};
use crate::coord::{Connector, StoreError};

/// The store session of operator commands: the backend the config names. Everything
/// else works through [`crate::coord::Session`].
pub type StoreSession = AnySession;

/// The connector of operator commands' sessions.
pub fn connector(cfg: &Config) -> Result<AnyConnector, StoreError> {
    AnyConnector::from_config(cfg).map_err(StoreError::Auth)
}

/// Opens a session for an operator command, bounded by `connect_timeout`.
pub async fn session(cfg: &Config) -> Result<StoreSession, StoreError> {
    connector(cfg)?.connect().await
}
