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
