//! warden: an active/standby HA supervisor with fencing, elected through ZooKeeper.
//!
//! The election rules live in [`elector`], a pure state machine; [`daemon`] drives it
//! with the coordination service ([`coord`]), the managed [`service`], [`health`] checks
//! and the fence chain of the `warden-fencing` crate.

pub mod api;
pub mod clock;
pub mod config;
pub mod coord;
pub mod daemon;
pub mod elector;
pub mod error;
pub mod health;
pub mod host;
pub mod http_url;
pub mod launch;
pub mod metrics;
pub mod notify;
pub mod ops;
pub mod record;
pub mod service;

pub use error::Error;
