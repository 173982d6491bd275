//! The real-process fault suite's own harness (issue 6, item 2): a three-server ZooKeeper
//! ensemble on loopback ([`zk`]), partitions with nftables ([`net`]), a seeded random
//! source ([`rng`]) and three wardens with steerable fence scripts ([`trio`]). Built on
//! the shared harness in `tests/common`.

#![allow(dead_code)]

pub mod net;
// Shared with the recipes' fault campaign (tests/common); not every crate uses both.
#[allow(unused_imports)]
pub use crate::common::{nft, rng};
pub mod trio;
pub mod zk;
