//! What the ZooKeeper backend asks of its client (issue 32 point 3): the calls of the
//! `zookeeper-client` crate it makes, with that crate's own types, as a trait. The daemon
//! runs [`ZkSession`](super::ZkSession) over [`zk::Client`]; the simulation runs the very
//! same session (every read, multi-op, version check and watch it makes, and what it
//! decides from their answers: lock, epoch, floor, counter) over a simulated ensemble.
//! Only the wire stays outside: the client's connection, its reconnects within a session,
//! and the servers themselves.
//!
//! The calls keep the client's shape, so [`zk::Client`]'s implementation is a line each;
//! the two places where the client hands out borrowed builders (multi-ops) take the
//! operations as a list instead.

use std::future::Future;
use std::time::Duration;
use zookeeper_client as zk;

/// One operation of a multi-op, in the order the backend adds them.
#[derive(Clone, Debug)]
pub enum Op<'a> {
    /// Fails the multi-op unless `path` is at `version`.
    Check {
        path: &'a str,
        version: i32,
    },
    SetData {
        path: &'a str,
        data: &'a [u8],
        version: Option<i32>,
    },
    Create {
        path: &'a str,
        data: &'a [u8],
        mode: zk::CreateMode,
        acls: &'a [zk::Acl],
    },
    Delete {
        path: &'a str,
        version: Option<i32>,
    },
}

impl Op<'_> {
    /// The znode the operation is on.
    pub fn path(&self) -> &str {
        match self {
            Op::Check { path, .. }
            | Op::SetData { path, .. }
            | Op::Create { path, .. }
            | Op::Delete { path, .. } => path,
        }
    }
}

/// A one-shot watch: resolves at the next event on its znode, or of the session.
pub trait Watch: Send + 'static {
    fn changed(self) -> impl Future<Output = zk::WatchedEvent> + Send;
}

/// The session's state as the client sees it.
pub trait States: Send + 'static {
    fn peek_state(&self) -> zk::SessionState;
    /// Waits for the next change and returns the newest state (changes between two looks
    /// show as one).
    fn changed(&mut self) -> impl Future<Output = zk::SessionState> + Send;
}

/// The client calls the backend makes. A clone shares the session; the session ends when
/// every clone is dropped.
pub trait Wire: Clone + Send + Sync + 'static {
    type Watch: Watch;
    type States: States;

    fn session_id(&self) -> i64;
    /// The session timeout the server granted.
    fn session_timeout(&self) -> Duration;
    fn state_watcher(&self) -> Self::States;

    fn check_stat(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<Option<zk::Stat>, zk::Error>> + Send;
    fn get_data(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<u8>, zk::Stat), zk::Error>> + Send;
    fn create(
        &self,
        path: &str,
        data: &[u8],
        mode: zk::CreateMode,
        acls: &[zk::Acl],
    ) -> impl Future<Output = Result<zk::Stat, zk::Error>> + Send;
    fn set_data(
        &self,
        path: &str,
        data: &[u8],
        version: Option<i32>,
    ) -> impl Future<Output = Result<zk::Stat, zk::Error>> + Send;
    fn delete(
        &self,
        path: &str,
        version: Option<i32>,
    ) -> impl Future<Output = Result<(), zk::Error>> + Send;
    fn list_children(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<Vec<String>, zk::Error>> + Send;
    fn set_acl(
        &self,
        path: &str,
        acls: &[zk::Acl],
    ) -> impl Future<Output = Result<(), zk::Error>> + Send;
    /// All the operations or none, in one request.
    fn multi(
        &self,
        ops: &[Op<'_>],
    ) -> impl Future<Output = Result<Vec<zk::MultiWriteResult>, zk::MultiWriteError>> + Send;
    /// Each znode's data and stat, in one request (`MultiReadResult::Error` for one that
    /// is not there).
    fn get_data_of(
        &self,
        paths: &[String],
    ) -> impl Future<Output = Result<Vec<zk::MultiReadResult>, zk::Error>> + Send;
    fn get_and_watch_data(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<u8>, zk::Stat, Self::Watch), zk::Error>> + Send;
    fn check_and_watch_stat(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Option<zk::Stat>, Self::Watch), zk::Error>> + Send;
}

impl Watch for zk::OneshotWatcher {
    async fn changed(self) -> zk::WatchedEvent {
        zk::OneshotWatcher::changed(self).await
    }
}

impl States for zk::StateWatcher {
    fn peek_state(&self) -> zk::SessionState {
        zk::StateWatcher::peek_state(self)
    }

    async fn changed(&mut self) -> zk::SessionState {
        zk::StateWatcher::changed(self).await
    }
}

impl Wire for zk::Client {
    type Watch = zk::OneshotWatcher;
    type States = zk::StateWatcher;

    fn session_id(&self) -> i64 {
        zk::Client::session_id(self).0
    }

    fn session_timeout(&self) -> Duration {
        zk::Client::session_timeout(self)
    }

    fn state_watcher(&self) -> zk::StateWatcher {
        zk::Client::state_watcher(self)
    }

    async fn check_stat(&self, path: &str) -> Result<Option<zk::Stat>, zk::Error> {
        zk::Client::check_stat(self, path).await
    }

    async fn get_data(&self, path: &str) -> Result<(Vec<u8>, zk::Stat), zk::Error> {
        zk::Client::get_data(self, path).await
    }

    async fn create(
        &self,
        path: &str,
        data: &[u8],
        mode: zk::CreateMode,
        acls: &[zk::Acl],
    ) -> Result<zk::Stat, zk::Error> {
        let opts = mode.with_acls(zk::Acls::new(acls));
        zk::Client::create(self, path, data, &opts)
            .await
            .map(|(stat, _)| stat)
    }

    async fn set_data(
        &self,
        path: &str,
        data: &[u8],
        version: Option<i32>,
    ) -> Result<zk::Stat, zk::Error> {
        zk::Client::set_data(self, path, data, version).await
    }

    async fn delete(&self, path: &str, version: Option<i32>) -> Result<(), zk::Error> {
        zk::Client::delete(self, path, version).await
    }

    async fn list_children(&self, path: &str) -> Result<Vec<String>, zk::Error> {
        zk::Client::list_children(self, path).await
    }

    async fn set_acl(&self, path: &str, acls: &[zk::Acl]) -> Result<(), zk::Error> {
        zk::Client::set_acl(self, path, &zk::Acls::new(acls), None)
            .await
            .map(|_| ())
    }

    async fn multi(
        &self,
        ops: &[Op<'_>],
    ) -> Result<Vec<zk::MultiWriteResult>, zk::MultiWriteError> {
        let mut w = self.new_multi_writer();
        for op in ops {
            match *op {
                Op::Check { path, version } => w.add_check_version(path, version),
                Op::SetData {
                    path,
                    data,
                    version,
                } => w.add_set_data(path, data, version),
                Op::Create {
                    path,
                    data,
                    mode,
                    acls,
                } => w.add_create(path, data, &mode.with_acls(zk::Acls::new(acls))),
                Op::Delete { path, version } => w.add_delete(path, version),
            }
            .map_err(|source| zk::MultiWriteError::RequestFailed { source })?;
        }
        w.commit().await
    }

    async fn get_data_of(&self, paths: &[String]) -> Result<Vec<zk::MultiReadResult>, zk::Error> {
        let mut r = self.new_multi_reader();
        for p in paths {
            r.add_get_data(p)?;
        }
        r.commit().await
    }

    async fn get_and_watch_data(
        &self,
        path: &str,
    ) -> Result<(Vec<u8>, zk::Stat, zk::OneshotWatcher), zk::Error> {
        zk::Client::get_and_watch_data(self, path).await
    }

    async fn check_and_watch_stat(
        &self,
        path: &str,
    ) -> Result<(Option<zk::Stat>, zk::OneshotWatcher), zk::Error> {
        zk::Client::check_and_watch_stat(self, path).await
    }
}
