//! The backend the config names, chosen once: [`Configured`] is its connector, built and
//! checked, and [`Configured::run`] hands it to a [`StoreJob`] (`warden run`, or an
//! operator command), which is generic over [`Connector`]. No type stands for "any
//! backend" in a session, so nothing restates the store's methods; the simulation's store
//! model is a [`Connector`] too, and never in here.

use super::mysql::MysqlConnector;
use super::redis::RedisConnector;
use super::zookeeper::ZkConnector;
use super::{Connector, StoreSettings};
use crate::config::{Backend, Config};
use std::future::Future;

/// What runs on the configured store, whichever backend it is.
pub trait StoreJob {
    type Output;
    /// Runs the job on `connector`.
    fn run<C: Connector>(self, connector: C) -> impl Future<Output = Self::Output>;
}

/// The connector the config names, with its credentials read; nothing is connected yet.
// Boxed: the ZooKeeper client's settings are large, and this is moved once.
pub enum Configured {
    Zookeeper(Box<ZkConnector>),
    Mysql(MysqlConnector),
    Redis(RedisConnector),
}

impl Configured {
    /// The connector `cfg` names. The error (an unreadable or too open credentials file, a
    /// URL the driver refuses) says which key to fix.
    pub fn from_config(cfg: &Config) -> Result<Configured, String> {
        match cfg.coordination.backend {
            Backend::Zookeeper => {
                let auth = cfg.read_auth().map_err(|e| e.to_string())?;
                Ok(Configured::Zookeeper(Box::new(ZkConnector::new(
                    &cfg.coordination.zookeeper,
                    &cfg.cluster.name,
                    auth,
                ))))
            }
            Backend::Mysql => MysqlConnector::new(StoreSettings::from_config(cfg)?)
                .map(Configured::Mysql)
                .map_err(|e| e.to_string()),
            Backend::Redis => RedisConnector::new(StoreSettings::from_config(cfg)?)
                .map(Configured::Redis)
                .map_err(|e| e.to_string()),
        }
    }

    /// Runs `job` on this connector: the one dispatch on the backend.
    pub async fn run<J: StoreJob>(self, job: J) -> J::Output {
        match self {
            Configured::Zookeeper(c) => job.run(*c).await,
            Configured::Mysql(c) => job.run(c).await,
            Configured::Redis(c) => job.run(c).await,
        }
    }
}
