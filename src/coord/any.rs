//! The backend the config names, as one type: what `warden run` and the operator
//! commands use. The driver and the commands stay generic over [`Connector`]; this enum
//! only dispatches each call to the real backend (the simulation's store model is not in
//! it, and never in the product).

use super::mysql::{MysqlConnector, MysqlSession};
use super::redis::{RedisConnector, RedisSession};
use super::zookeeper::{ZkConnector, ZkSession};
use super::{ClusterSnapshot, Connector, Item, Session, StoreError, StoreEvent, StoreSettings};
use crate::config::{Backend, Config};
use crate::record::{
    Control, Epoch, History, HistoryEntry, JoinOutcome, MemberRecord, NodeRecord, RecordError,
    SessionId, TakeoverState, Version, WriteOutcome,
};
use std::time::Duration;
use tokio::sync::mpsc;

/// Opens sessions on the configured backend.
#[derive(Clone)]
// Boxed: the ZooKeeper client is large, and these are moved around rarely.
pub enum AnyConnector {
    Zookeeper(Box<ZkConnector>),
    Mysql(MysqlConnector),
    Redis(RedisConnector),
}

/// A session on the configured backend.
#[derive(Clone, Debug)]
pub enum AnySession {
    Zookeeper(Box<ZkSession>),
    Mysql(MysqlSession),
    Redis(RedisSession),
}

impl AnyConnector {
    /// The connector `cfg` names, with its credentials read; the error (an unreadable or
    /// too open credentials file, a URL the driver refuses) says which key to fix.
    pub fn from_config(cfg: &Config) -> Result<AnyConnector, String> {
        match cfg.coordination.backend {
            Backend::Zookeeper => {
                let auth = cfg.read_auth().map_err(|e| e.to_string())?;
                Ok(AnyConnector::Zookeeper(Box::new(ZkConnector::new(
                    &cfg.coordination.zookeeper,
                    &cfg.cluster.name,
                    auth,
                ))))
            }
            Backend::Mysql => MysqlConnector::new(StoreSettings::from_config(cfg)?)
                .map(AnyConnector::Mysql)
                .map_err(|e| e.to_string()),
            Backend::Redis => RedisConnector::new(StoreSettings::from_config(cfg)?)
                .map(AnyConnector::Redis)
                .map_err(|e| e.to_string()),
        }
    }
}

impl Connector for AnyConnector {
    type Session = AnySession;

    async fn connect(&self) -> Result<AnySession, StoreError> {
        match self {
            AnyConnector::Zookeeper(c) => c
                .connect()
                .await
                .map(|s| AnySession::Zookeeper(Box::new(s))),
            AnyConnector::Mysql(c) => c.connect().await.map(AnySession::Mysql),
            AnyConnector::Redis(c) => c.connect().await.map(AnySession::Redis),
        }
    }
}

/// Calls the same method on whichever backend `self` is.
macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            AnySession::Zookeeper($s) => $e,
            AnySession::Mysql($s) => $e,
            AnySession::Redis($s) => $e,
        }
    };
}

impl AnySession {
    /// [`Session::read_history`], callable without the trait in scope.
    pub async fn read_history(&self) -> Result<History, StoreError> {
        <Self as Session>::read_history(self).await
    }
}

impl Session for AnySession {
    fn id(&self) -> SessionId {
        each!(self, s => s.id())
    }

    fn granted_session_timeout(&self) -> Option<Duration> {
        each!(self, s => s.granted_session_timeout())
    }

    fn watch_above(&self, above: Option<&str>) {
        each!(self, s => s.watch_above(above))
    }

    async fn events(&self, events: mpsc::UnboundedSender<StoreEvent>) {
        each!(self, s => s.events(events).await)
    }

    async fn ensure_cluster(&self) -> Result<(), StoreError> {
        each!(self, s => s.ensure_cluster().await)
    }

    async fn members(
        &self,
    ) -> Result<Vec<(String, Result<MemberRecord, RecordError>)>, StoreError> {
        each!(self, s => s.members().await)
    }

    async fn check_initialized(&self) -> Result<(), StoreError> {
        each!(self, s => s.check_initialized().await)
    }

    async fn write_marker(&self, floor: Option<Epoch>) -> Result<Option<String>, StoreError> {
        each!(self, s => s.write_marker(floor).await)
    }

    async fn member(
        &self,
        node_id: &str,
    ) -> Result<Option<(SessionId, Result<MemberRecord, RecordError>)>, StoreError> {
        each!(self, s => s.member(node_id).await)
    }

    async fn create_member(&self, m: &MemberRecord) -> Result<(), StoreError> {
        each!(self, s => s.create_member(m).await)
    }

    async fn delete_member(&self, node_id: &str) -> Result<(), StoreError> {
        each!(self, s => s.delete_member(node_id).await)
    }

    async fn set_member(&self, m: &MemberRecord) -> Result<(), StoreError> {
        each!(self, s => s.set_member(m).await)
    }

    async fn join(&self, me: &NodeRecord, join: u64) -> JoinOutcome {
        each!(self, s => s.join(me, join).await)
    }

    async fn read_state(&self) -> Result<TakeoverState, StoreError> {
        each!(self, s => s.read_state().await)
    }

    async fn commit_promotion(
        &self,
        breadcrumb: &NodeRecord,
        breadcrumb_version: Option<Version>,
        control_version: Version,
    ) -> WriteOutcome {
        each!(self, s => s.commit_promotion(breadcrumb, breadcrumb_version, control_version).await)
    }

    async fn renew(&self, member: &MemberRecord) -> WriteOutcome {
        each!(self, s => s.renew(member).await)
    }

    async fn rewrite_own_breadcrumb(&self, record: &NodeRecord) -> WriteOutcome {
        each!(self, s => s.rewrite_own_breadcrumb(record).await)
    }

    async fn restore_breadcrumb(
        &self,
        record: &NodeRecord,
        version: Option<Version>,
    ) -> WriteOutcome {
        each!(self, s => s.restore_breadcrumb(record, version).await)
    }

    async fn breadcrumb_bytes(&self) -> Result<Option<(Vec<u8>, Version)>, StoreError> {
        each!(self, s => s.breadcrumb_bytes().await)
    }

    async fn delete_breadcrumb_at(
        &self,
        version: Version,
        check_lock: bool,
    ) -> Result<(), StoreError> {
        each!(self, s => s.delete_breadcrumb_at(version, check_lock).await)
    }

    async fn release(&self) -> Result<(), StoreError> {
        each!(self, s => s.release().await)
    }

    async fn release_deleting(&self, own: Option<(&str, &str, Epoch)>) -> super::Released {
        each!(self, s => s.release_deleting(own).await)
    }

    async fn read_history(&self) -> Result<History, StoreError> {
        match self {
            AnySession::Zookeeper(s) => Session::read_history(s.as_ref()).await,
            AnySession::Mysql(s) => Session::read_history(s).await,
            AnySession::Redis(s) => Session::read_history(s).await,
        }
    }

    async fn append_history(&self, entry: &HistoryEntry) -> Result<Option<String>, StoreError> {
        each!(self, s => s.append_history(entry).await)
    }

    async fn set_aside(&self) -> Result<Vec<String>, StoreError> {
        each!(self, s => s.set_aside().await)
    }

    async fn update_control<F>(&self, change: F) -> Result<Result<Control, String>, StoreError>
    where
        F: FnMut(&mut Control) -> Result<bool, String> + Send,
    {
        each!(self, s => s.update_control(change).await)
    }

    async fn update_control_from<F>(
        &self,
        seen: (Control, Option<Version>),
        change: F,
    ) -> Result<Result<Control, String>, StoreError>
    where
        F: FnMut(&mut Control) -> Result<bool, String> + Send,
    {
        each!(self, s => s.update_control_from(seen, change).await)
    }

    async fn snapshot(&self) -> Result<ClusterSnapshot, StoreError> {
        each!(self, s => s.snapshot().await)
    }

    fn name_of(&self, what: Item) -> String {
        each!(self, s => s.name_of(what))
    }

    async fn init(&self) -> Result<Vec<String>, StoreError> {
        each!(self, s => s.init().await)
    }

    async fn delete_takeover_state(
        &self,
        breadcrumb: Option<Version>,
        control: Option<Version>,
    ) -> Result<(), StoreError> {
        each!(self, s => s.delete_takeover_state(breadcrumb, control).await)
    }

    async fn current_epoch(&self) -> Result<Epoch, StoreError> {
        each!(self, s => s.current_epoch().await)
    }

    async fn move_history_aside_if_above(
        &self,
        epoch: Epoch,
    ) -> Result<Option<(String, Epoch)>, StoreError> {
        each!(self, s => s.move_history_aside_if_above(epoch).await)
    }
}
