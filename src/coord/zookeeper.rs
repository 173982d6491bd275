//! The ZooKeeper backend (SPEC §3): `lock`, `breadcrumb`, `members/<id>`, `control` and
//! `history` under `<root>/<cluster>`, on the `zookeeper-client` crate.
//!
//! Edges of the client this module is built around:
//! - every error that is not a ZooKeeper answer (`NodeExists`, `NoNode`, `BadVersion`, ...)
//!   is "outcome unknown": a request in flight when a server freezes fails with
//!   `Custom("no response ...")`, not `ConnectionLoss`;
//! - there is no `close()`: the session ends when every clone of the `Client` is dropped,
//!   so a [`ZkSession`] must not be cloned into anything that outlives it;
//! - after a terminal session state the state watcher blocks forever, so the watch task
//!   stops at the first terminal state.
//!
//! Every call is bounded by the session's operation timeout.

use super::{
    names_breadcrumb, op_timeout, ClusterSnapshot, Connector, Item, Released, Session, StoreError,
    StoreEvent,
};
use crate::config::{AclMode, ZooKeeperConfig};
use crate::record::{
    self, BreadcrumbView, Control, Epoch, History, HistoryEntry, JoinOutcome, MemberRecord,
    NodeRecord, SessionId, TakeoverState, Version, WriteOutcome,
};
use std::future::Future;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use zookeeper_client as zk;
use zookeeper_client::{Acl, Acls, Permission};

pub mod wire;
use wire::{Op, States as _, Watch as _, Wire};

use super::items::{self, history_of, newest_promotion, Items};
pub use super::items::{HISTORY_LEN, SET_ASIDE_PREFIX};

/// The znode paths of one cluster.
#[derive(Clone, Debug)]
pub struct Paths {
    pub root: String,
    pub base: String,
    pub lock: String,
    pub breadcrumb: String,
    pub members: String,
    pub control: String,
    pub history: String,
    /// SPEC §3a, the epoch counter: set in the same multi-op that creates each lock, so
    /// its mzxid is the newest lock's czxid; its data holds the offset `init --force`
    /// raised every epoch by.
    pub epoch: String,
    /// SPEC §3a, the floor: each node's greatest `epoch_seen`, kept for good.
    pub floor: String,
}

impl Paths {
    pub fn new(root: &str, cluster: &str) -> Paths {
        let base = format!("{}/{}", root.trim_end_matches('/'), cluster);
        Paths {
            root: root.to_string(),
            lock: format!("{base}/lock"),
            breadcrumb: format!("{base}/breadcrumb"),
            members: format!("{base}/members"),
            control: format!("{base}/control"),
            history: format!("{base}/history"),
            epoch: format!("{base}/epoch"),
            floor: format!("{base}/floor"),
            base,
        }
    }

    pub fn member(&self, node_id: &str) -> String {
        format!("{}/{}", self.members, node_id)
    }
}

/// Opens sessions to one cluster's znodes.
#[derive(Clone, Debug)]
pub struct ZkConnector {
    cfg: ZooKeeperConfig,
    auth: Option<String>,
    paths: Paths,
}

impl ZkConnector {
    /// `auth` is the resolved `scheme:credentials` (from `auth` or `auth_file`).
    pub fn new(cfg: &ZooKeeperConfig, cluster: &str, auth: Option<String>) -> ZkConnector {
        ZkConnector {
            paths: Paths::new(&cfg.root, cluster),
            cfg: cfg.clone(),
            auth,
        }
    }

    pub fn paths(&self) -> &Paths {
        &self.paths
    }

    /// Opens a session, bounded by `connect_timeout`.
    pub async fn connect(&self) -> Result<ZkSession, StoreError> {
        let mut connector = zk::Client::connector()
            .with_session_timeout(self.cfg.session_timeout)
            .with_connection_timeout(self.cfg.connect_timeout);
        if let Some(auth) = &self.auth {
            let (scheme, cred) = auth.split_once(':').unwrap_or(("digest", auth));
            connector = connector.with_auth(scheme, cred.as_bytes());
        }
        let unreachable = |reason: String| StoreError::Unreachable {
            store: "ZooKeeper",
            key: "coordination.zookeeper.connect",
            connect: self.cfg.connect.clone(),
            timeout: humantime::format_duration(self.cfg.connect_timeout).to_string(),
            reason,
        };
        let client = match tokio::time::timeout(
            self.cfg.connect_timeout,
            connector.connect(&self.cfg.connect),
        )
        .await
        {
            Err(_) => return Err(unreachable("no session was established".into())),
            Ok(Err(zk::Error::AuthFailed)) => {
                return Err(zk_auth(
                    "authentication failed (wrong credentials in coordination.zookeeper.auth?)"
                        .into(),
                ))
            }
            Ok(Err(e)) => return Err(unreachable(e.to_string())),
            Ok(Ok(c)) => c,
        };
        // SPEC §4: every interval follows the smaller of the configured and the granted
        // session timeout.
        let granted = client.session_timeout();
        let in_force = if granted.is_zero() {
            self.cfg.session_timeout
        } else {
            granted.min(self.cfg.session_timeout)
        };
        Ok(ZkSession::over(
            client,
            self.paths.clone(),
            self.cfg.acl,
            op_timeout(in_force, self.cfg.connect_timeout),
            // The configured timeout: no node's lease is longer than its own in force,
            // which is at most its configured one.
            self.cfg.session_timeout,
        ))
    }
}

/// The ACL of a parent znode shared with other clusters (the znodes of `root`), when this
/// session has to create it. Everyone may read it and create their cluster under it, so a
/// cluster with `acl = "open"` can live beside one with `acl = "creator"`; with `creator`,
/// only its creator may delete children or change it. An `open` cluster creates it as it
/// creates everything, open.
fn shared_parent_acls(mode: AclMode) -> Vec<Acl> {
    match mode {
        AclMode::Open => Acls::anyone_all().to_vec(),
        AclMode::Creator => vec![
            Acl::new(Permission::READ | Permission::CREATE, zk::AuthId::anyone()),
            Acl::new(Permission::ALL, zk::AuthId::authed()),
        ],
    }
}

/// `history`'s data read entry by entry; an unreadable znode reads as empty, with why.
/// `/a`, `/a/b`, `/a/b/c` for `/a/b/c`; nothing for `/`.
fn ancestors(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        at.push('/');
        at.push_str(part);
        out.push(at.clone());
    }
    out
}

/// The parent of a znode path (`/` for a top-level one).
fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// ZooKeeper's "any version" in a check or a conditional write.
const ANY_VERSION: i32 = -1;

/// A znode version from a [`Version`] this backend made; `None` for one it cannot have
/// made (which then matches no znode).
fn znode_version(v: Version) -> Option<i32> {
    i32::try_from(v.get()).ok().filter(|&v| v >= 0)
}

/// Sorts a client error met at znode `at` into the three kinds the election acts on. An
/// authorization error names the znode: "not authorized" alone leaves an operator to
/// guess which of a dozen ACLs is wrong.
/// ZooKeeper refused us: `what` was refused; the advice names the setting and the ACLs.
fn zk_auth(what: String) -> StoreError {
    StoreError::Auth(format!(
        "ZooKeeper refused access: {what}; check coordination.zookeeper.auth and the znodes' ACLs"
    ))
}

fn classify(e: zk::Error, at: &str) -> StoreError {
    use zk::Error as E;
    match e {
        E::NodeExists | E::NoNode | E::BadVersion | E::NotEmpty => {
            StoreError::Rejected(e.to_string())
        }
        E::SessionExpired | E::ClientClosed => StoreError::SessionLost(e.to_string()),
        E::NoAuth | E::AuthFailed | E::InvalidAcl => zk_auth(format!("{e} at {at}")),
        other => StoreError::Unknown(other.to_string()),
    }
}

/// A multi-op's error, naming the znode of the operation that failed (`paths` in the
/// order the operations were added).
fn classify_multi(e: zk::MultiWriteError, paths: &[&str]) -> StoreError {
    match e {
        zk::MultiWriteError::OperationFailed { index, source } => {
            classify(source, paths.get(index).copied().unwrap_or("?"))
        }
        zk::MultiWriteError::RequestFailed { source } => classify(source, &paths.join(", ")),
    }
}

fn write_outcome(r: Result<(), StoreError>) -> WriteOutcome {
    match r {
        Ok(()) => WriteOutcome::Done,
        Err(StoreError::Rejected(_)) => WriteOutcome::Conflict,
        Err(_) => WriteOutcome::Unknown,
    }
}

/// SPEC §3a, the floor as ZooKeeper keeps it (`<base>/floor`, persistent): each node's
/// greatest `epoch_seen`, by node id. An entry that is not an epoch below
/// [`MAX_KEPT_EPOCH`](super::MAX_KEPT_EPOCH) is garbage: skipped, and overwritten by the
/// node's next raise.
type Floor = std::collections::BTreeMap<String, Epoch>;

fn parse_floor(data: &[u8]) -> Floor {
    let Ok(serde_json::Value::Object(map)) = serde_json::from_slice(data) else {
        return Floor::new();
    };
    map.into_iter()
        .filter_map(|(node, e)| Some((node, e.as_u64().filter(|&e| e < super::MAX_KEPT_EPOCH)?)))
        .collect()
}

/// The greatest entry of the floor and whose it is.
fn floor_max(floor: &Floor) -> Option<(Epoch, &str)> {
    floor.iter().map(|(n, e)| (*e, n.as_str())).max()
}

/// `floor` with `node`'s entry raised to `seen`, when that raises the floor: not when the
/// floor already holds `seen` or more, in this node's entry or another's. No entry is
/// ever lowered, so the floor (its greatest entry, which is all that refuses anything)
/// keeps `seen` either way; and the floor is one znode: when a new active commits, every
/// node sees its epoch at once, and each raising its own entry made them conflict with
/// one another, about n²/2 writes tried for n nodes (1,050 requests per crash failover
/// with 32 standbys, issue 33's benchmark). The committer's entry is raised by its
/// commit ([`Session::commit_promotion`]), so the others only read it.
fn raised(floor: &Floor, node: &str, seen: Option<Epoch>) -> Option<Floor> {
    let seen = seen.filter(|&e| e < super::MAX_KEPT_EPOCH)?;
    if floor_max(floor).is_some_and(|(kept, _)| kept >= seen) {
        return None;
    }
    let mut up = floor.clone();
    up.insert(node.to_string(), seen);
    Some(up)
}

/// The offset `init --force` raised epochs by (`<base>/epoch`'s data, `{"offset": N}`);
/// 0 when there is none or it is unreadable.
fn parse_offset(data: &[u8]) -> Epoch {
    serde_json::from_slice::<serde_json::Value>(data)
        .ok()
        .and_then(|v| v["offset"].as_u64())
        .filter(|&o| o < super::MAX_KEPT_EPOCH)
        .unwrap_or(0)
}

fn offset_bytes(offset: Epoch) -> Vec<u8> {
    serde_json::json!({ "offset": offset })
        .to_string()
        .into_bytes()
}

/// SPEC §3a: why the store lost data, when the floor is above every epoch the store
/// remembers handing out (`counter`, `None`: it remembers none).
fn lost(counter: Option<Epoch>, floor: Option<(Epoch, &str)>) -> Option<String> {
    let (seen, who) = floor?;
    super::lost_data(false, Some(counter.unwrap_or(0)), Some(seen), Some(who))
}

/// How often a join reads the floor and the counter again when another node changed one
/// of them between its reads and its multi-op, before it reports an unknown outcome.
const JOIN_TRIES: usize = 5;

/// The epoch counter as read at a join: what the store remembers handing out.
#[derive(Clone, Copy, Debug)]
struct Counter {
    /// The greatest epoch the store remembers: the epoch znode's (its mzxid plus the
    /// offset), the lock's, the breadcrumb's and history's newest.
    epoch: Option<Epoch>,
    /// The offset every new lock's czxid is raised by.
    offset: Epoch,
    /// The epoch znode's version; `None` when it does not exist.
    version: Option<i32>,
}

/// The counter from the epoch znode as read (data, mzxid, version) and the epochs the
/// store records elsewhere (the lock's and the breadcrumb's records, history's newest):
/// their greatest, garbage above [`MAX_KEPT_EPOCH`](super::MAX_KEPT_EPOCH) skipped. The
/// join and `status` read it so, alike.
fn counter_of(
    epoch: Option<(&[u8], i64, i32)>,
    lock: Option<&[u8]>,
    breadcrumb: Option<&[u8]>,
    history: &History,
) -> Counter {
    let recorded = [lock, breadcrumb]
        .into_iter()
        .flatten()
        .filter_map(|d| record::parse::<NodeRecord>(d).ok()?.epoch)
        .chain(newest_promotion(history));
    let offset = epoch.map_or(0, |(d, _, _)| parse_offset(d));
    let counted = epoch.map(|(_, mzxid, _)| mzxid.max(0) as Epoch + offset);
    Counter {
        epoch: counted
            .into_iter()
            .chain(recorded)
            .filter(|&e| e < super::MAX_KEPT_EPOCH)
            .max(),
        offset,
        version: epoch.map(|(_, _, v)| v),
    }
}

/// A znode's data and stat, as read.
pub type Znode = (Vec<u8>, zk::Stat);

/// What `status` shows of the cluster, from its znodes as read (`None`: absent): the lock,
/// the breadcrumb, control, the members (child name, data and stat), history, the
/// set-aside histories, the epoch counter and the floor. Apart from the reads, so that the
/// simulation reads its ensemble as this backend does.
#[allow(clippy::too_many_arguments)]
pub fn snapshot_of(
    lock: Option<(Vec<u8>, zk::Stat)>,
    breadcrumb: Option<(Vec<u8>, zk::Stat)>,
    control: Option<(Vec<u8>, zk::Stat)>,
    members: Vec<(String, Option<Znode>)>,
    history: History,
    set_aside: Vec<String>,
    epoch: Option<(Vec<u8>, zk::Stat)>,
    floor: Option<(Vec<u8>, zk::Stat)>,
) -> ClusterSnapshot {
    // The counter as the join reads it (SPEC §3a): what the store remembers handing
    // out. The zxid is no counter: it grows with every write, also after a restore.
    let counter = counter_of(
        epoch
            .as_ref()
            .map(|(d, s)| (d.as_slice(), s.mzxid, s.version)),
        lock.as_ref().map(|(d, _)| d.as_slice()),
        breadcrumb.as_ref().map(|(d, _)| d.as_slice()),
        &history,
    );
    let mut snap = ClusterSnapshot::of_lock(lock.map(|(d, s)| {
        (
            d,
            s.czxid.max(0) as Epoch + counter.offset,
            SessionId(s.ephemeral_owner),
        )
    }));
    snap.kept_floor =
        floor.and_then(|(d, _)| floor_max(&parse_floor(&d)).map(|(e, node)| (e, node.to_string())));
    let versioned =
        |found: Option<(Vec<u8>, zk::Stat)>| found.map(|(d, s)| (d, i64::from(s.version)));
    snap.add_items(versioned(breadcrumb), versioned(control));
    for (id, found) in members {
        if !snap.valid_member_id(&id) {
            continue;
        }
        if let Some((d, s)) = found {
            snap.add_member(id, SessionId(s.ephemeral_owner), &d);
        }
    }
    snap.history = history;
    snap.set_aside = set_aside;
    // None remembered: any epoch seen is above it (a wiped ensemble).
    snap.epoch_counter = Some(counter.epoch.unwrap_or(0));
    snap
}

/// How a multi-op failed: at one operation (by its index), or as a whole.
enum MultiFailed {
    Op { index: usize, error: StoreError },
    Other(StoreError),
}

/// What one try of the join's multi-op came to.
enum Take {
    Done(JoinOutcome),
    /// The floor or the counter changed since they were read: read them again.
    Again,
}

/// One ZooKeeper session, over the `zookeeper-client` crate's client or (in the
/// simulation) a simulated ensemble ([`wire`]). Dropping it (with every clone) closes the
/// session, which removes its ephemeral znodes.
#[derive(Clone)]
pub struct ZkSession<W: Wire = zk::Client> {
    client: W,
    id: i64,
    paths: Paths,
    acls: zk::Acls<'static>,
    acl_mode: AclMode,
    op_timeout: Duration,
    /// The session timeout the server granted (it clamps the requested one).
    granted: Duration,
    /// The version of `lock` as our own create (and our commit's write) left it; the
    /// holder's multi-ops check it, so a lock that was deleted and created anew is not
    /// mistaken for ours by its existence alone. `ANY_VERSION` while we hold none.
    lock_version: Arc<AtomicI32>,
    /// The number of the latest join: the events watch the lock for it.
    joined: Arc<watch::Sender<Option<u64>>>,
    /// Set when our member znode was found gone while the session lives (see
    /// [`ZkSession::member_gone`]): the session ends.
    member_gone: Arc<watch::Sender<bool>>,
    /// SPEC §6b herd-free succession: the member watched instead of the lock while joined
    /// ([`Session::watch_above`]).
    above: Arc<watch::Sender<Option<String>>>,
    /// How many reads of the members found the lock gone: a node that watches a member
    /// instead of the lock learns so of a free lock that the one above it left free.
    lock_absent: Arc<watch::Sender<u64>>,
    /// The greatest `epoch_seen` this session has raised our entry of the floor to, so
    /// that a member record rewritten with the same one costs no second write.
    floor_raised: Arc<AtomicU64>,
    /// How many times the client was connected again within this session, counted after
    /// each [`StoreEvent::Reconnected`] is sent: the breadcrumb is read again then, so
    /// that an active it still names is confirmed in the new link (`ActiveTracker::relinked`).
    relinked: Arc<watch::Sender<u64>>,
    /// When this session was established, and how long it lives before it may make the
    /// epoch counter (see [`ZkSession::try_lock`]).
    established: tokio::time::Instant,
    settle: Duration,
}

impl<W: Wire> std::fmt::Debug for ZkSession<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ZkSession({:#x})", self.id)
    }
}

impl<W: Wire> ZkSession<W> {
    /// A session over `client`, established now: `op_timeout` bounds every call, and
    /// `settle` (the configured session timeout) is how long it lives before it may make
    /// the epoch counter (see [`ZkSession::try_lock`]).
    pub fn over(
        client: W,
        paths: Paths,
        acl_mode: AclMode,
        op_timeout: Duration,
        settle: Duration,
    ) -> ZkSession<W> {
        ZkSession {
            id: client.session_id(),
            granted: client.session_timeout(),
            client,
            paths,
            acls: match acl_mode {
                AclMode::Open => zk::Acls::anyone_all(),
                AclMode::Creator => zk::Acls::creator_all(),
            },
            acl_mode,
            op_timeout,
            lock_version: Arc::new(AtomicI32::new(ANY_VERSION)),
            joined: Arc::new(watch::Sender::new(None)),
            member_gone: Arc::new(watch::Sender::new(false)),
            above: Arc::new(watch::Sender::new(None)),
            lock_absent: Arc::new(watch::Sender::new(0)),
            floor_raised: Arc::new(AtomicU64::new(0)),
            relinked: Arc::new(watch::Sender::new(0)),
            established: tokio::time::Instant::now(),
            settle,
        }
    }

    pub fn paths(&self) -> &Paths {
        &self.paths
    }

    /// The ACL of the cluster's own znodes.
    fn acls(&self) -> &[Acl] {
        &self.acls
    }

    /// A multi-op's check that the lock is at the version this session holds.
    fn check_lock(&self) -> Op<'_> {
        Op::Check {
            path: &self.paths.lock,
            version: self.held_lock_version(),
        }
    }

    /// A multi-op's write of the breadcrumb: at `version`, or a create when there is none.
    fn write_breadcrumb<'a>(&'a self, data: &'a [u8], version: Option<i32>) -> Op<'a> {
        match version {
            Some(v) => Op::SetData {
                path: &self.paths.breadcrumb,
                data,
                version: Some(v),
            },
            None => Op::Create {
                path: &self.paths.breadcrumb,
                data,
                mode: zk::CreateMode::Persistent,
                acls: self.acls(),
            },
        }
    }

    /// `Ok` when the lock is this session's, at the version it holds; else what a write
    /// under it comes to: `Conflict` (another's, or none), `Unknown` (no answer).
    async fn lock_is_ours(&self) -> Result<(), WriteOutcome> {
        match self.own_lock().await {
            Ok(Some(stat)) if stat.version == self.held_lock_version() => Ok(()),
            Ok(_) => Err(WriteOutcome::Conflict),
            Err(_) => Err(WriteOutcome::Unknown),
        }
    }

    fn held_lock_version(&self) -> i32 {
        self.lock_version.load(Ordering::SeqCst)
    }

    fn hold_lock_version(&self, version: i32) {
        self.lock_version.store(version, Ordering::SeqCst);
    }

    /// Runs one client call on znode `path` under the operation timeout.
    async fn bounded<T>(
        &self,
        what: &str,
        path: &str,
        f: impl Future<Output = Result<T, zk::Error>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.op_timeout, f).await {
            Ok(r) => r.map_err(|e| classify(e, path)),
            Err(_) => Err(StoreError::Unknown(format!(
                "{what} got no answer within {}",
                humantime::format_duration(self.op_timeout)
            ))),
        }
    }

    /// One multi-op, all or none, under `op_timeout`. `what` names it in an error; a
    /// failed operation's error names its znode.
    async fn multi(&self, what: &str, ops: &[Op<'_>]) -> Result<(), StoreError> {
        self.multi_results(what, ops)
            .await
            .map(|_| ())
            .map_err(|e| match e {
                MultiFailed::Op { error, .. } | MultiFailed::Other(error) => error,
            })
    }

    /// [`multi`](Self::multi) with each operation's result, and the index of the one that
    /// failed.
    async fn multi_results(
        &self,
        what: &str,
        ops: &[Op<'_>],
    ) -> Result<Vec<zk::MultiWriteResult>, MultiFailed> {
        let paths: Vec<&str> = ops.iter().map(Op::path).collect();
        let paths = paths.as_slice();
        match tokio::time::timeout(self.op_timeout, self.client.multi(ops)).await {
            Ok(Ok(results)) => Ok(results),
            Ok(Err(zk::MultiWriteError::OperationFailed { index, source })) => {
                Err(MultiFailed::Op {
                    index,
                    error: classify(source, paths.get(index).copied().unwrap_or("?")),
                })
            }
            Ok(Err(e)) => Err(MultiFailed::Other(classify_multi(e, paths))),
            Err(_) => Err(MultiFailed::Other(StoreError::Unknown(format!(
                "{what} got no answer within {}",
                humantime::format_duration(self.op_timeout)
            )))),
        }
    }

    /// Creates `<root>/<cluster>/members` and its parents where missing. Only the
    /// cluster's own znodes (`<root>/<cluster>` and below) get the cluster's ACL: the
    /// znodes of `root` are shared with other clusters, which may use another ACL, so they
    /// are created with [`shared_parent_acls`] and never changed once they exist.
    async fn ensure_parents(&self) -> Result<(), StoreError> {
        let shared = shared_parent_acls(self.acl_mode);
        for path in ancestors(&self.paths.root) {
            self.create_if_missing(&path, &shared).await?;
        }
        for path in [&self.paths.base, &self.paths.members] {
            self.create_if_missing(path, self.acls()).await?;
        }
        Ok(())
    }

    /// Creates an empty persistent znode unless it exists. Exists is asked first: a
    /// create under a parent we may not write is refused even when the znode is there.
    async fn create_if_missing(&self, path: &str, acls: &[Acl]) -> Result<(), StoreError> {
        if self
            .bounded("looking for", path, self.client.check_stat(path))
            .await?
            .is_some()
        {
            return Ok(());
        }
        match self
            .bounded(
                "creating",
                path,
                self.client
                    .create(path, &[], zk::CreateMode::Persistent, acls),
            )
            .await
        {
            Ok(_) | Err(StoreError::Rejected(_)) => Ok(()),
            Err(StoreError::Auth(why)) => Err(StoreError::Auth(format!(
                "{why} (creating {path} needs the CREATE permission on {})",
                parent(path)
            ))),
            Err(e) => Err(e),
        }
    }

    /// Sets the configured ACL on the cluster's persistent znodes (`warden init`):
    /// `<root>/<cluster>` and below, never the shared `root`.
    async fn repair_acls(&self) -> Result<(), StoreError> {
        let mut paths = vec![self.paths.base.clone(), self.paths.members.clone()];
        for p in [
            &self.paths.breadcrumb,
            &self.paths.control,
            &self.paths.history,
            &self.paths.epoch,
            &self.paths.floor,
        ] {
            if self
                .bounded("looking for", p, self.client.check_stat(p))
                .await?
                .is_some()
            {
                paths.push(p.clone());
            }
        }
        paths.extend(self.list_set_aside().await?);
        for p in paths {
            self.bounded(
                "setting the ACL of",
                &p,
                self.client.set_acl(&p, self.acls()),
            )
            .await?;
        }
        Ok(())
    }

    /// The old histories kept beside `history` (full paths, sorted).
    async fn list_set_aside(&self) -> Result<Vec<String>, StoreError> {
        let base = &self.paths.base;
        let mut names = match self
            .bounded("listing", base, self.client.list_children(base))
            .await
        {
            Ok(c) => c,
            Err(StoreError::Rejected(_)) => Vec::new(),
            Err(e) => return Err(e),
        };
        names.retain(|n| n.starts_with(SET_ASIDE_PREFIX));
        names.sort();
        Ok(names.into_iter().map(|n| format!("{base}/{n}")).collect())
    }

    /// SPEC §3a, §4.2: raise our entry of the floor to our `epoch_seen`; refuse, before
    /// the counter moves, when the floor is above every epoch the store remembers handing
    /// out (it lost data: restored from an old snapshot, or wiped); else create `lock` in
    /// one multi-op that also moves the counter and checks that neither the floor nor the
    /// counter changed since they were read. On NodeExists the lock is ours iff its owner
    /// is this session (a create whose reply was lost). Watching is the caller's: see
    /// [`ZkSession::watch_lock`].
    ///
    /// The zxid alone cannot tell a store that forgot: it grows with every write, so a
    /// later czxid climbs past an epoch that was handed out and forgotten. The counter
    /// moves only with a lock, and goes back with a restore; the floor, raised by the live
    /// nodes that saw the forgotten epoch, stays above it until `init --force`.
    async fn try_lock(&self, me: &NodeRecord) -> JoinOutcome {
        for _ in 0..JOIN_TRIES {
            let Ok((floor, floor_version)) = self.raise_floor(&me.node_id, me.epoch_seen).await
            else {
                return JoinOutcome::Unknown;
            };
            let Ok(counter) = self.read_counter().await else {
                return JoinOutcome::Unknown;
            };
            if let Some(why) = lost(counter.epoch, floor_max(&floor)) {
                // Never sit on a lock this node may not promote under (a create of an
                // earlier try whose answer was lost): `init --force` waits for none.
                let _ = self.delete_own_lock().await;
                return JoinOutcome::LostData(why);
            }
            let Some(epoch_version) = counter.version else {
                // The first join since the counter existed (a cluster made by an older
                // warden): it starts at the zxid now, above every lock before it.
                //
                // Or an ensemble wiped, or restored to before the counter: the active of
                // before may still be inside its lease, its lock, session and breadcrumb
                // gone with the data, and nothing left to fence it by (the simulation's
                // seeds 3337, 6369, 14266). Only a session that has lived a whole session
                // timeout makes the counter: every session of the old data was last heard
                // of before this one began, so by then each old active's lease (half its
                // session timeout past that) has ended and its service is down. The join
                // waits for that (it shows as a standby; the task ends with the session),
                // then reads everything again: another node may have led meanwhile.
                if self.established.elapsed() < self.settle {
                    tokio::time::sleep_until(self.established + self.settle).await;
                    continue;
                }
                let created = self
                    .bounded(
                        "creating the epoch counter",
                        &self.paths.epoch,
                        self.client.create(
                            &self.paths.epoch,
                            &offset_bytes(0),
                            zk::CreateMode::Persistent,
                            self.acls(),
                        ),
                    )
                    .await;
                match created {
                    Ok(_) | Err(StoreError::Rejected(_)) => continue,
                    Err(_) => return JoinOutcome::Unknown,
                }
            };
            match self
                .take_lock(me, floor_version, epoch_version, counter.offset)
                .await
            {
                Take::Done(outcome) => return outcome,
                Take::Again => continue,
            }
        }
        JoinOutcome::Unknown
    }

    /// The join's multi-op: check the floor at the version read, set the counter at the
    /// version read (its new mzxid is the lock's czxid), create `lock`. The epoch is that
    /// zxid plus the counter's offset.
    async fn take_lock(
        &self,
        me: &NodeRecord,
        floor_version: i32,
        epoch_version: i32,
        offset: Epoch,
    ) -> Take {
        let data = record::to_bytes(me);
        let offset_data = offset_bytes(offset);
        let ops = [
            Op::Check {
                path: &self.paths.floor,
                version: floor_version,
            },
            Op::SetData {
                path: &self.paths.epoch,
                data: &offset_data,
                version: Some(epoch_version),
            },
            Op::Create {
                path: &self.paths.lock,
                data: &data,
                mode: zk::CreateMode::Ephemeral,
                acls: self.acls(),
            },
        ];
        let taken = self.multi_results("creating the lock", &ops).await;
        match taken {
            Ok(results) => match results.get(1) {
                Some(zk::MultiWriteResult::SetData { stat }) => {
                    // A lock just created is at version 0 (a create's stat inside a
                    // multi-op can be invalid on some servers: ZOOKEEPER-4026).
                    self.hold_lock_version(0);
                    Take::Done(JoinOutcome::Held {
                        epoch: stat.mzxid.max(0) as Epoch + offset,
                    })
                }
                _ => Take::Done(JoinOutcome::Unknown),
            },
            Err(MultiFailed::Op {
                index: 2,
                error: StoreError::Rejected(_),
            }) => Take::Done(self.lock_exists(offset).await),
            Err(MultiFailed::Op {
                error: StoreError::Rejected(_),
                ..
            }) => Take::Again,
            Err(_) => Take::Done(JoinOutcome::Unknown),
        }
    }

    /// The lock exists: ours iff its owner is this session (a create whose reply was
    /// lost), else another's.
    async fn lock_exists(&self, offset: Epoch) -> JoinOutcome {
        match self
            .bounded(
                "reading the lock",
                &self.paths.lock,
                self.client.check_stat(&self.paths.lock),
            )
            .await
        {
            Ok(Some(stat)) if stat.ephemeral_owner == self.id => {
                self.hold_lock_version(stat.version);
                JoinOutcome::Held {
                    epoch: stat.czxid.max(0) as Epoch + offset,
                }
            }
            Ok(Some(_)) => JoinOutcome::Exists {
                epoch: self.holder_epoch().await,
            },
            // Gone again already, or no answer: try again.
            Ok(None) | Err(_) => JoinOutcome::Unknown,
        }
    }

    /// SPEC §3a: the floor, with `node`'s entry raised to `seen` (created when missing), and
    /// its version.
    async fn raise_floor(
        &self,
        node: &str,
        seen: Option<Epoch>,
    ) -> Result<(Floor, i32), StoreError> {
        let path = &self.paths.floor;
        for _ in 0..JOIN_TRIES {
            let (floor, version) = match self.get_optional(path).await? {
                Some((data, stat)) => (parse_floor(&data), Some(stat.version)),
                None => (Floor::new(), None),
            };
            let up = raised(&floor, node, seen);
            let written = match (version, up) {
                (Some(v), None) => {
                    // The floor holds `seen` already: a later record with the same one
                    // reads it no more (each read was on the way of the member record's
                    // write, and of the new active's service start: 30 ms a takeover).
                    if let Some(seen) = seen.filter(|&e| e < super::MAX_KEPT_EPOCH) {
                        self.floor_raised.fetch_max(seen, Ordering::SeqCst);
                    }
                    return Ok((floor, v));
                }
                (Some(v), Some(up)) => self
                    .bounded(
                        "raising the floor",
                        path,
                        self.client.set_data(path, &record::to_bytes(&up), Some(v)),
                    )
                    .await
                    .map(|stat| (up, stat.version)),
                (None, up) => {
                    let up = up.unwrap_or(floor);
                    self.bounded(
                        "creating the floor",
                        path,
                        self.client.create(
                            path,
                            &record::to_bytes(&up),
                            zk::CreateMode::Persistent,
                            self.acls(),
                        ),
                    )
                    .await
                    .map(|stat| (up, stat.version))
                }
            };
            match written {
                Ok(done) => {
                    if let Some(seen) = seen {
                        self.floor_raised.fetch_max(seen, Ordering::SeqCst);
                    }
                    return Ok(done);
                }
                Err(StoreError::Rejected(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Unknown(format!(
            "{path} kept changing while this node raised its entry"
        )))
    }

    /// Raises our entry of the floor to `seen`, before a member record carrying it is
    /// written, unless this session already did. A member record never stands above the
    /// floor: when the raise fails, so does the write of the record (a commit checks the
    /// floor, not the member records; the review of stop 41).
    async fn keep_seen(&self, node: &str, seen: Option<Epoch>) -> Result<(), StoreError> {
        let Some(seen) = seen else { return Ok(()) };
        if self.floor_raised.load(Ordering::SeqCst) >= seen {
            return Ok(());
        }
        self.raise_floor(node, Some(seen)).await.map(|_| ())
    }

    /// SPEC §3a: the greatest epoch the store remembers handing out (the counter, the
    /// lock's, the breadcrumb's, history's newest), the offset and the counter's version.
    async fn read_counter(&self) -> Result<Counter, StoreError> {
        let (epoch, lock, breadcrumb, history) = tokio::join!(
            self.get_optional(&self.paths.epoch),
            self.get_optional(&self.paths.lock),
            self.get_optional(&self.paths.breadcrumb),
            self.read_history(),
        );
        let (epoch, lock, breadcrumb) = (epoch?, lock?, breadcrumb?);
        Ok(counter_of(
            epoch
                .as_ref()
                .map(|(d, s)| (d.as_slice(), s.mzxid, s.version)),
            lock.as_ref().map(|(d, _)| d.as_slice()),
            breadcrumb.as_ref().map(|(d, _)| d.as_slice()),
            &history?,
        ))
    }

    /// The epoch the lock's record names once its holder committed, for `epoch_seen`;
    /// `None` when unread or not yet committed (best effort: it only adds knowledge).
    async fn holder_epoch(&self) -> Option<Epoch> {
        let (data, _) = self
            .bounded(
                "reading the lock",
                &self.paths.lock,
                self.client.get_data(&self.paths.lock),
            )
            .await
            .ok()?;
        record::parse::<NodeRecord>(&data).ok()?.epoch
    }

    /// Every member znode's data and stat, read in one request after listing them:
    /// `(child name, data and stat)`, `None` for one that went away in between.
    #[allow(clippy::type_complexity)]
    async fn member_znodes(
        &self,
    ) -> Result<Vec<(String, Option<(Vec<u8>, zk::Stat)>)>, StoreError> {
        Ok(self.member_znodes_and_lock(false).await?.0)
    }

    /// The member znodes, and with `lock` whether the lock exists, read in the same
    /// multi-read (no request more; `None` when there are no members to read).
    #[allow(clippy::type_complexity)]
    async fn member_znodes_and_lock(
        &self,
        lock: bool,
    ) -> Result<(Vec<(String, Option<(Vec<u8>, zk::Stat)>)>, Option<bool>), StoreError> {
        let at = &self.paths.members;
        let mut children = match self
            .bounded("listing members", at, self.client.list_children(at))
            .await
        {
            Ok(c) => c,
            Err(StoreError::Rejected(_)) => return Ok((Vec::new(), None)),
            Err(e) => return Err(e),
        };
        children.sort();
        if children.is_empty() {
            return Ok((Vec::new(), None));
        }
        let mut paths: Vec<String> = children.iter().map(|c| self.paths.member(c)).collect();
        if lock {
            paths.push(self.paths.lock.clone());
        }
        let mut results = self
            .bounded("reading members", at, self.client.get_data_of(&paths))
            .await?;
        let lock_found =
            lock.then(|| matches!(results.pop(), Some(zk::MultiReadResult::Data { .. })));
        let members = children
            .into_iter()
            .zip(results)
            .map(|(c, r)| match r {
                zk::MultiReadResult::Data { data, stat } => (c, Some((data, stat))),
                _ => (c, None),
            })
            .collect();
        Ok((members, lock_found))
    }

    /// The greatest `epoch_seen` in the member records (SPEC §3a).
    async fn members_epoch_seen(&self) -> Result<Option<Epoch>, StoreError> {
        Ok(self
            .member_znodes()
            .await?
            .into_iter()
            .filter_map(|(_, d)| record::parse::<MemberRecord>(&d?.0).ok()?.node.epoch_seen)
            .max())
    }

    /// Waits until the lock is deleted (returns `true`) or the session ends (`false`).
    /// Data changes re-arm the watch; each time the lock's data names a committed epoch,
    /// `on_record` gets it (SPEC §6 `follow`).
    async fn watch_lock(&self, mut on_record: impl FnMut(&[u8])) -> bool {
        loop {
            let (data, watcher) = match self.client.get_and_watch_data(&self.paths.lock).await {
                Ok((data, _, watcher)) => (data, watcher),
                Err(zk::Error::NoNode) => return true,
                Err(e) => match classify(e, &self.paths.lock) {
                    StoreError::SessionLost(_) | StoreError::Auth(_) => return false,
                    // A connection blip: the client reconnects within the session.
                    _ => {
                        tokio::time::sleep(crate::elector::RETRY_DELAY).await;
                        continue;
                    }
                },
            };
            on_record(&data);
            let ev = watcher.changed().await;
            match ev.event_type {
                zk::EventType::NodeDeleted => return true,
                zk::EventType::Session => return false,
                _ => continue,
            }
        }
    }

    /// Hands each version of `path`'s data to `on_data` (`None` while it does not exist),
    /// across deletions and creations, until the session ends: the lock for a node that
    /// has not joined, the breadcrumb for every node.
    async fn watch_data(&self, path: &str, on_data: &mut impl FnMut(Option<&[u8]>)) {
        self.watch_data_again(path, None, on_data).await
    }

    /// [`watch_data`](Self::watch_data), also read again each time `again` changes.
    async fn watch_data_again(
        &self,
        path: &str,
        mut again: Option<watch::Receiver<u64>>,
        on_data: &mut impl FnMut(Option<&[u8]>),
    ) {
        loop {
            let watcher = match self.client.get_and_watch_data(path).await {
                Ok((data, _, watcher)) => {
                    on_data(Some(&data));
                    watcher
                }
                Err(zk::Error::NoNode) => {
                    match self.client.check_and_watch_stat(path).await {
                        // Created in between: read it.
                        Ok((Some(_), _)) => continue,
                        Ok((None, watcher)) => {
                            on_data(None);
                            watcher
                        }
                        Err(e) => match classify(e, path) {
                            StoreError::SessionLost(_) | StoreError::Auth(_) => return,
                            _ => {
                                tokio::time::sleep(crate::elector::RETRY_DELAY).await;
                                continue;
                            }
                        },
                    }
                }
                Err(e) => match classify(e, path) {
                    StoreError::SessionLost(_) | StoreError::Auth(_) => return,
                    _ => {
                        tokio::time::sleep(crate::elector::RETRY_DELAY).await;
                        continue;
                    }
                },
            };
            let relinked = async {
                match again.as_mut() {
                    Some(rx) => {
                        if rx.changed().await.is_err() {
                            std::future::pending::<()>().await
                        }
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                event = watcher.changed() => {
                    if event.event_type == zk::EventType::Session {
                        return;
                    }
                }
                _ = relinked => {}
            }
        }
    }

    /// Returns when the session has ended for good (expired, closed, authentication
    /// failed), logging connection changes on the way. The client's state watcher blocks
    /// forever after a terminal state, so this stops at the first one.
    async fn session_ended(&self, events: &mpsc::UnboundedSender<StoreEvent>) {
        let mut gone = self.member_gone.subscribe();
        // (Biased here and below: the simulation replays a seed only when no choice
        // among ready branches is left to tokio's RNG.)
        tokio::select! {
            biased;
            _ = gone.wait_for(|g| *g) => {}
            _ = self.client_session_ended(events) => {}
        }
    }

    /// A write to our member znode found it gone (NoNode) while the session lives: the
    /// ensemble lost it (restored from a copy that kept the session but not the znode, a
    /// wipe of the cluster's tree, a delete by hand). Everything this session registered
    /// is in doubt; it ends, and the next session registers again and waits its session
    /// timeout (SPEC §3a). Without it the holder's renewals failed for ever and it won and
    /// lost the same lock in a loop (the simulation's seed 11741).
    fn member_gone(&self, node_id: &str) {
        if !self.member_gone.send_replace(true) {
            tracing::warn!(
                session = %SessionId(self.id),
                "the member znode of {node_id} is gone while this session lives: the \
                 ensemble lost it; the session is over"
            );
        }
    }

    /// Waits for the client's session to end; meanwhile sends [`StoreEvent::Reconnected`]
    /// each time the client is connected again after a change of state. The state watcher
    /// keeps only the newest state, so a disconnection and a reconnection between two
    /// looks show as one change to `SyncConnected`: every change that ends connected is a
    /// reconnection (the first look is not a change).
    async fn client_session_ended(&self, events: &mpsc::UnboundedSender<StoreEvent>) {
        let mut states = self.client.state_watcher();
        let mut state = states.peek_state();
        let mut first = true;
        loop {
            match state {
                zk::SessionState::Expired
                | zk::SessionState::Closed
                | zk::SessionState::AuthFailed => return,
                zk::SessionState::Disconnected => {
                    tracing::warn!("disconnected from ZooKeeper; the client is reconnecting")
                }
                zk::SessionState::SyncConnected if !first => {
                    tracing::info!("ZooKeeper connection re-established within the session");
                    // The ensemble may have restarted from a copy that kept this session:
                    // what the floor held in the session's view is known no more, and the
                    // member record written again raises our entry once more (review of
                    // stop 46).
                    self.floor_raised.store(0, Ordering::SeqCst);
                    let _ = events.send(StoreEvent::Reconnected);
                    // After it: the breadcrumb read again is of the new link.
                    self.relinked.send_modify(|n| *n += 1);
                }
                _ => {}
            }
            first = false;
            state = states.changed().await;
        }
    }

    /// Hands `control` to `each` now and after every change, until the session ends or
    /// `each` returns false.
    async fn follow_control(&self, mut each: impl FnMut(&Control) -> bool) {
        while let Some((control, _version, w)) = self.watch_control().await {
            if !each(&control) || w.changed().await.event_type == zk::EventType::Session {
                return;
            }
        }
    }

    /// Reads `control` and waits for its next change; `None` when the session ends.
    async fn watch_control(&self) -> Option<(Control, Option<i32>, W::Watch)> {
        loop {
            match self.client.get_and_watch_data(&self.paths.control).await {
                Ok((data, stat, w)) => {
                    let control = record::parse(&data).unwrap_or_else(|e| {
                        tracing::warn!(
                            control = %self.paths.control,
                            "control is unreadable ({e}); treating it as not paused with no \
                             switchover pending (`warden status` shows it; `warden pause` \
                             rewrites it)"
                        );
                        Control::default()
                    });
                    return Some((control, Some(stat.version), w));
                }
                Err(zk::Error::NoNode) => {
                    match self.client.check_and_watch_stat(&self.paths.control).await {
                        Ok((None, w)) => return Some((Control::default(), None, w)),
                        Ok((Some(_), _)) => continue,
                        Err(e) => match classify(e, &self.paths.control) {
                            StoreError::SessionLost(_) | StoreError::Auth(_) => return None,
                            _ => tokio::time::sleep(crate::elector::RETRY_DELAY).await,
                        },
                    }
                }
                Err(e) => match classify(e, &self.paths.control) {
                    StoreError::SessionLost(_) | StoreError::Auth(_) => return None,
                    _ => tokio::time::sleep(crate::elector::RETRY_DELAY).await,
                },
            }
        }
    }

    async fn get_optional(&self, path: &str) -> Result<Option<(Vec<u8>, zk::Stat)>, StoreError> {
        match self
            .bounded("reading", path, self.client.get_data(path))
            .await
        {
            Ok(x) => Ok(Some(x)),
            Err(StoreError::Rejected(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The lock's stat when this session owns it.
    async fn own_lock(&self) -> Result<Option<zk::Stat>, StoreError> {
        let stat = self
            .bounded(
                "reading the lock",
                &self.paths.lock,
                self.client.check_stat(&self.paths.lock),
            )
            .await?;
        Ok(stat.filter(|s| s.ephemeral_owner == self.id))
    }

    /// Deletes `lock` if this session owns it. The caller drops the session afterwards
    /// (SPEC §4.3 "Release the lock").
    async fn delete_own_lock(&self) -> Result<(), StoreError> {
        match self.own_lock().await? {
            Some(s) => self.delete_lock_at(s.version).await,
            None => Ok(()),
        }
    }

    /// Deletes `lock` at `version` (read with its owner checked); gone already is done.
    async fn delete_lock_at(&self, version: i32) -> Result<(), StoreError> {
        match self
            .bounded(
                "deleting the lock",
                &self.paths.lock,
                self.client.delete(&self.paths.lock, Some(version)),
            )
            .await
        {
            Ok(()) | Err(StoreError::Rejected(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Writes `data` at `path` at `version` (or creates it when `None`).
    async fn write(&self, path: &str, data: &[u8], version: Option<i32>) -> Result<(), StoreError> {
        match version {
            Some(v) => self
                .bounded("writing", path, self.client.set_data(path, data, Some(v)))
                .await
                .map(|_| ()),
            None => self
                .bounded(
                    "creating",
                    path,
                    self.client
                        .create(path, data, zk::CreateMode::Persistent, self.acls()),
                )
                .await
                .map(|_| ()),
        }
    }

    /// `<base>/history.<kind>-<UTC time>`, the time without colons so that the name is
    /// easy to type in `zkCli.sh`.
    fn set_aside_path(&self, kind: &str) -> String {
        format!("{}/{}", self.paths.base, items::set_aside_name(kind))
    }

    /// The ensemble's current zxid, read from a write that changes nothing: the base
    /// znode's (empty) data set again. Every lock created later gets a greater czxid.
    async fn current_zxid(&self) -> Result<Epoch, StoreError> {
        let base = &self.paths.base;
        let stat = self
            .bounded(
                "reading the current zxid at",
                base,
                self.client.set_data(base, &[], None),
            )
            .await?;
        Ok(stat.mzxid.max(0) as Epoch)
    }

    /// Deletes each znode at the version given, all or none (`init --force`).
    async fn delete_at_versions(&self, doomed: &[(&str, i32)]) -> Result<(), StoreError> {
        if doomed.is_empty() {
            return Ok(());
        }
        let ops: Vec<Op<'_>> = doomed
            .iter()
            .map(|(path, version)| Op::Delete {
                path,
                version: Some(*version),
            })
            .collect();
        self.multi("deleting", &ops).await
    }
}

impl<W: Wire> Items for ZkSession<W> {
    async fn get_item(&self, name: &str) -> Result<Option<(Vec<u8>, i64)>, StoreError> {
        let path = format!("{}/{name}", self.paths.base);
        Ok(self
            .get_optional(&path)
            .await?
            .map(|(data, stat)| (data, stat.version.into())))
    }

    async fn put_item(
        &self,
        name: &str,
        data: &[u8],
        version: Option<i64>,
    ) -> Result<(), StoreError> {
        let path = format!("{}/{name}", self.paths.base);
        let version = match version {
            Some(v) => Some(i32::try_from(v).map_err(|_| {
                StoreError::Rejected(format!("no version {v} of a znode ({path})"))
            })?),
            None => None,
        };
        self.write(&path, data, version).await
    }

    fn item_path(&self, name: &str) -> String {
        format!("{}/{name}", self.paths.base)
    }
}

impl Connector for ZkConnector {
    type Session = ZkSession;

    async fn connect(&self) -> Result<ZkSession, StoreError> {
        ZkConnector::connect(self).await
    }
}

impl<W: Wire> ZkSession<W> {
    /// The events of [`Session::events`]: the session's end from the client's state
    /// watcher, `control` from a data watch re-armed after each change, and the lock's
    /// deletion from an exists-watch armed for the latest join; or, while a standby placed
    /// above this node is named ([`Session::watch_above`]), that standby's member record
    /// instead of the lock (SPEC §6b herd-free succession).
    async fn run_events(&self, events: mpsc::UnboundedSender<StoreEvent>) {
        let ended = self.session_ended(&events);
        // The first event must be `control` (the daemon's open waits for it): the lock is
        // watched only once it was sent.
        let (control_sent, control_seen) = tokio::sync::watch::channel(false);
        let control = self.follow_control(|c| {
            control_sent.send_replace(true);
            events.send(StoreEvent::Control(c.clone())).is_ok()
        });
        tokio::pin!(ended, control);
        let mut joined = self.joined.subscribe();
        let mut armed = *joined.borrow_and_update();
        let mut above_rx = self.above.subscribe();
        let mut above = above_rx.borrow_and_update().clone();
        // The reads of the members that found the lock gone, as counted when the lock was
        // last watched for this join.
        let mut absent_seen = *self.lock_absent.borrow();
        let mut following = true;
        let tracker = std::sync::Mutex::new(super::ActiveTracker::default());
        let send_all = |evs: Vec<StoreEvent>| {
            for ev in evs {
                let _ = events.send(ev);
            }
        };
        // Whether the lock is watched now: while it is not (herd-free succession), a new
        // active is learned from the breadcrumb its commit wrote in the same multi-op, and
        // the lock read once then (`lock_reads`), so that `Active` still comes from the
        // lock's own record.
        let lock_watched = std::sync::atomic::AtomicBool::new(true);
        let lock_read_due = tokio::sync::Notify::new();
        // The breadcrumb, for the active's rewrites within its epoch (§4.3d): what a
        // fence of it must name should the store forget them (`StoreEvent::Rewritten`).
        let mut bc_control_seen = control_seen.clone();
        let breadcrumbs = async {
            let _ = bc_control_seen.wait_for(|sent| *sent).await;
            let mut link = self.relinked.subscribe();
            let mut read_in = *link.borrow_and_update();
            let again = self.relinked.subscribe();
            self.watch_data_again(&self.paths.breadcrumb, Some(again), &mut |data| {
                let record = data.and_then(|d| record::parse::<NodeRecord>(d).ok());
                let mut tracker = lock_tracker(&tracker);
                // The first read in a new link confirms the active again (SPEC §3a: what
                // this link saw of its breadcrumb, `Elector::remembered`).
                let now_in = *link.borrow_and_update();
                if now_in != read_in {
                    read_in = now_in;
                    tracker.relinked();
                }
                if record.as_ref().is_some_and(|r| tracker.is_new(r))
                    && !lock_watched.load(std::sync::atomic::Ordering::Relaxed)
                {
                    lock_read_due.notify_one();
                }
                send_all(tracker.breadcrumb(record));
            })
            .await;
            std::future::pending::<()>().await
        };
        tokio::pin!(breadcrumbs);
        let lock_reads = async {
            loop {
                lock_read_due.notified().await;
                // Until it is answered (a lost answer would leave this node without the
                // new active, its `follow` not run), or a newer commit asks another.
                loop {
                    match self.get_optional(&self.paths.lock).await {
                        Ok(Some((data, _))) => {
                            if let Some(r) = super::committed(&data) {
                                send_all(lock_tracker(&tracker).lock(&r));
                            }
                            break;
                        }
                        Ok(None) => break,
                        Err(StoreError::SessionLost(_) | StoreError::Auth(_)) => {
                            std::future::pending::<()>().await
                        }
                        Err(_) => tokio::time::sleep(crate::elector::RETRY_DELAY).await,
                    }
                }
            }
        };
        tokio::pin!(lock_reads);
        loop {
            // The lock is watched whether or not this node joined: a standby that never
            // joins (priority 0, a failed follow, paused) must still learn each new active
            // to follow it (SPEC §6). Its deletion matters only to a joined node.
            let mut control_seen = control_seen.clone();
            // (Never for a lock of its own: its holder watches it for its loss.)
            let herd = armed
                .zip(above.clone())
                .filter(|_| self.held_lock_version() == ANY_VERSION);
            let was_watched =
                lock_watched.swap(herd.is_none(), std::sync::atomic::Ordering::Relaxed);
            if was_watched && herd.is_some() {
                // A commit seen by the lock's watch just dropped would be missed: the lock
                // is read once now.
                lock_read_due.notify_one();
            }
            let mut absent = self.lock_absent.subscribe();
            let holder = async {
                let _ = control_seen.wait_for(|sent| *sent).await;
                let on_record = |data: &[u8]| {
                    if let Some(r) = super::committed(data) {
                        send_all(lock_tracker(&tracker).lock(&r));
                    }
                };
                match (armed, herd) {
                    // SPEC §6b: only the best-placed standby wakes when the lock goes.
                    // This one hears of the standby above it; and of a free lock from the
                    // reads of the members, should the one above not take it.
                    (_, Some((join, id))) => {
                        let path = self.paths.member(&id);
                        let watched = async {
                            self.watch_data(&path, &mut |d| {
                                let record = d
                                    .and_then(|d| record::parse::<MemberRecord>(d).ok())
                                    .map(Box::new);
                                let _ = events.send(StoreEvent::AboveChanged {
                                    id: id.clone(),
                                    record,
                                });
                            })
                            .await;
                            std::future::pending::<()>().await
                        };
                        tokio::select! {
                            _ = watched => None,
                            _ = absent.wait_for(|n| *n > absent_seen) => Some(join),
                        }
                    }
                    (Some(join), None) => self.watch_lock(on_record).await.then_some(join),
                    (None, _) => {
                        self.watch_data(&self.paths.lock, &mut |d| {
                            if let Some(d) = d {
                                on_record(d)
                            }
                        })
                        .await;
                        std::future::pending().await
                    }
                }
            };
            tokio::select! {
                biased;
                _ = &mut ended => break,
                _ = &mut breadcrumbs => {}
                _ = &mut lock_reads => {}
                _ = &mut control, if following => following = false,
                gone = holder => {
                    if let Some(join) = gone {
                        let _ = events.send(StoreEvent::HolderGone { join });
                    }
                    armed = None;
                }
                changed = joined.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    armed = *joined.borrow_and_update();
                    absent_seen = *self.lock_absent.borrow();
                }
                changed = above_rx.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    above = above_rx.borrow_and_update().clone();
                    absent_seen = *self.lock_absent.borrow();
                }
            }
        }
        let _ = events.send(StoreEvent::SessionLost);
    }
}

/// The tracker, whatever a panicking holder left in it.
fn lock_tracker(
    t: &std::sync::Mutex<super::ActiveTracker>,
) -> std::sync::MutexGuard<'_, super::ActiveTracker> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

impl<W: Wire> ZkSession<W> {
    /// [`Session::read_history`], callable without the trait in scope (tests read it so).
    pub async fn read_history(&self) -> Result<History, StoreError> {
        <Self as Session>::read_history(self).await
    }
}

impl<W: Wire> Session for ZkSession<W> {
    fn id(&self) -> SessionId {
        SessionId(self.id)
    }

    fn granted_session_timeout(&self) -> Option<Duration> {
        (!self.granted.is_zero()).then_some(self.granted)
    }

    fn watch_above(&self, above: Option<&str>) {
        self.above.send_if_modified(|a| {
            let changed = a.as_deref() != above;
            if changed {
                *a = above.map(str::to_string);
            }
            changed
        });
    }

    async fn events(&self, events: mpsc::UnboundedSender<StoreEvent>) {
        self.run_events(events).await
    }

    async fn ensure_cluster(&self) -> Result<(), StoreError> {
        self.ensure_parents().await
    }

    async fn member(
        &self,
        node_id: &str,
    ) -> Result<Option<(SessionId, Result<MemberRecord, record::RecordError>)>, StoreError> {
        let path = self.paths.member(node_id);
        match self
            .bounded("reading a member", &path, self.client.get_data(&path))
            .await
        {
            Ok((data, stat)) => Ok(Some((
                SessionId(stat.ephemeral_owner),
                record::parse(&data),
            ))),
            Err(StoreError::Rejected(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn create_member(&self, m: &MemberRecord) -> Result<(), StoreError> {
        let path = self.paths.member(&m.node.node_id);
        let data = record::to_bytes(m);
        // SPEC §3a: what this node has seen is kept for good, even in a store that forgot
        // it (restored), so that nodes that never saw it are refused too; first, so that a
        // member record that shows an epoch never stands above the floor.
        self.keep_seen(&m.node.node_id, m.node.epoch_seen).await?;
        self.bounded(
            "registering this node",
            &path,
            self.client
                .create(&path, &data, zk::CreateMode::Ephemeral, self.acls()),
        )
        .await
        .map(|_| ())
    }

    async fn delete_member(&self, node_id: &str) -> Result<(), StoreError> {
        let path = self.paths.member(node_id);
        match self
            .bounded(
                "deleting a stale member",
                &path,
                self.client.delete(&path, None),
            )
            .await
        {
            Ok(()) | Err(StoreError::Rejected(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn set_member(&self, m: &MemberRecord) -> Result<(), StoreError> {
        let path = self.paths.member(&m.node.node_id);
        self.keep_seen(&m.node.node_id, m.node.epoch_seen).await?;
        match self
            .bounded(
                "publishing the member record",
                &path,
                self.client.set_data(&path, &record::to_bytes(m), None),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(StoreError::Rejected(why)) => {
                self.member_gone(&m.node.node_id);
                Err(StoreError::SessionLost(why))
            }
            Err(e) => Err(e),
        }
    }

    async fn join(&self, me: &NodeRecord, join: u64) -> JoinOutcome {
        let outcome = self.try_lock(me).await;
        // Watch the lock whoever holds it: a standby for its release, the holder for its
        // loss.
        self.joined.send_replace(Some(join));
        outcome
    }

    async fn read_state(&self) -> Result<TakeoverState, StoreError> {
        // The three reads go out together: one round trip on the takeover path, not three.
        let (breadcrumb, control, history, lock, seen, floor) = tokio::join!(
            self.get_optional(&self.paths.breadcrumb),
            self.get_optional(&self.paths.control),
            self.read_history(),
            self.bounded(
                "reading the lock",
                &self.paths.lock,
                self.client.check_stat(&self.paths.lock)
            ),
            self.members_epoch_seen(),
            self.get_optional(&self.paths.floor),
        );
        // SPEC §3a: what the floor keeps counts as seen too. A node raises its entry before
        // it registers (two requests), so a winner that read only the member records
        // between the two promoted below an epoch the floor already held (the simulation
        // of the backend itself, seed 81846: a wiped ensemble, the warden that had seen
        // the lost epoch rejoining while another promoted).
        let seen = seen.and_then(|m| {
            let kept = floor?.and_then(|(d, _)| floor_max(&parse_floor(&d)).map(|(e, _)| e));
            Ok(m.max(kept))
        });
        // After a commit whose outcome was unknown, the lock's version tells whether our
        // write of it went through; either way the holder's checks use what is there now.
        if let Ok(Some(stat)) = lock {
            if stat.ephemeral_owner == self.id {
                self.hold_lock_version(stat.version);
            }
        }
        let breadcrumb = match breadcrumb? {
            None => BreadcrumbView::Absent,
            Some((data, stat)) => match record::parse::<NodeRecord>(&data) {
                Ok(record) => BreadcrumbView::Record {
                    record,
                    version: Version::new(stat.version.into()),
                },
                Err(e) => BreadcrumbView::Unreadable {
                    reason: e.to_string(),
                    version: Version::new(stat.version.into()),
                },
            },
        };
        // A missing control is created (empty) so the promotion can check its version.
        let mut control = control?;
        let (control, control_version) = loop {
            match control {
                Some((data, stat)) => {
                    break (record::parse(&data).unwrap_or_default(), stat.version)
                }
                None => {
                    let data = record::to_bytes(&Control::default());
                    match self
                        .bounded(
                            "creating control",
                            &self.paths.control,
                            self.client.create(
                                &self.paths.control,
                                &data,
                                zk::CreateMode::Persistent,
                                self.acls(),
                            ),
                        )
                        .await
                    {
                        Ok(_) | Err(StoreError::Rejected(_)) => {
                            control = self.get_optional(&self.paths.control).await?
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        };
        Ok(TakeoverState {
            breadcrumb,
            control,
            control_version: Version::new(control_version.into()),
            history_by_node: history
                .as_ref()
                .map(items::history_by_node)
                .unwrap_or_default(),
            confirmed_by_node: history
                .as_ref()
                .map(items::confirmed_by_node)
                .unwrap_or_default(),
            newest_promotion: newest_promotion(&history?),
            members_epoch_seen: seen?,
        })
    }

    async fn commit_promotion(
        &self,
        breadcrumb: &NodeRecord,
        breadcrumb_version: Option<Version>,
        control_version: Version,
    ) -> WriteOutcome {
        let (Some(control_version), Ok(breadcrumb_version)) = (
            znode_version(control_version),
            breadcrumb_version
                .map(|v| znode_version(v).ok_or(()))
                .transpose(),
        ) else {
            return WriteOutcome::Conflict;
        };
        // SPEC §3a: the floor as it is now, not as the takeover read it. A node that saw an
        // epoch the store forgot may raise its entry between that read and this commit
        // (its registration, its join, while the fence ran); a commit at an epoch the
        // floor holds would hand out a fencing token that is not new (stop 40's finding,
        // `tests/commit_floor.rs`). Refused as a conflict: the elector reads the state
        // again, finds the floor above its epoch and says the store lost data. The
        // multi-op checks the floor at the version read, so a raise after this read
        // fails the commit too. (A missing floor is created empty: it can be checked.)
        // The breadcrumb is read beside it: a commit of the breadcrumb again (ours, at
        // this epoch, at the version the multi-op checks) is refused only by a floor above
        // its epoch (`super::floor_refuses`).
        let (floor, current) = tokio::join!(
            self.raise_floor(&breadcrumb.node_id, None),
            self.get_optional(&self.paths.breadcrumb),
        );
        let (floor_version, raised_floor) = match (floor, current) {
            (Ok((floor, version)), Ok(current)) => {
                let current = current
                    .filter(|(_, stat)| Some(stat.version) == breadcrumb_version)
                    .and_then(|(data, _)| record::parse::<NodeRecord>(&data).ok());
                let max = floor_max(&floor).map(|(e, _)| e);
                if super::floor_refuses(max, breadcrumb, current.as_ref()) {
                    return WriteOutcome::Conflict;
                }
                // The committer's entry goes up to the new epoch in the commit itself:
                // every node that sees the commit finds the floor holding it already, and
                // reads it without writing (`raised`).
                let up = raised(&floor, &breadcrumb.node_id, breadcrumb.epoch)
                    .map(|up| record::to_bytes(&up));
                (version, up)
            }
            // Nothing of the promotion was written: read again, as after a conflict.
            _ => return WriteOutcome::Conflict,
        };
        let data = record::to_bytes(breadcrumb);
        let lock_version = self.held_lock_version();
        let ops = [
            match &raised_floor {
                Some(up) => Op::SetData {
                    path: &self.paths.floor,
                    data: up,
                    version: Some(floor_version),
                },
                None => Op::Check {
                    path: &self.paths.floor,
                    version: floor_version,
                },
            },
            Op::Check {
                path: &self.paths.control,
                version: control_version,
            },
            Op::SetData {
                path: &self.paths.lock,
                data: &data,
                version: (lock_version != ANY_VERSION).then_some(lock_version),
            },
            self.write_breadcrumb(&data, breadcrumb_version),
        ];
        let outcome = write_outcome(self.multi("committing the promotion", &ops).await);
        if outcome == WriteOutcome::Done && lock_version != ANY_VERSION {
            self.hold_lock_version(lock_version + 1);
        }
        if outcome == WriteOutcome::Done && raised_floor.is_some() {
            if let Some(e) = breadcrumb.epoch {
                self.floor_raised.fetch_max(e, Ordering::SeqCst);
            }
        }
        outcome
    }

    async fn renew(&self, member: &MemberRecord) -> WriteOutcome {
        // A version check alone cannot tell our lock from another's: a lock created anew
        // starts at version 0 again. An ensemble restored to before our lock, whose
        // snapshot kept our session, lets another node take a new lock at the version we
        // hold; our renewal would then pass, and this node would serve again beside the
        // new active (the simulation's seed 81344). So the lock must also be ours: owned
        // by this session, at the version we hold. The read goes out beside the multi-op
        // (one round trip: the lease has room for no more); a renewal counts only when
        // both say so.
        let data = record::to_bytes(member);
        let me = self.paths.member(&member.node.node_id);
        let ops = [
            self.check_lock(),
            Op::SetData {
                path: &me,
                data: &data,
                version: None,
            },
        ];
        let (ours, renewed) = tokio::join!(
            self.lock_is_ours(),
            self.multi_results("renewing the lease", &ops),
        );
        let renewed = match renewed {
            Ok(_) => Ok(()),
            Err(MultiFailed::Op {
                index: 1,
                error: StoreError::Rejected(why),
            }) => {
                self.member_gone(&member.node.node_id);
                Err(StoreError::SessionLost(why))
            }
            Err(MultiFailed::Op { error, .. } | MultiFailed::Other(error)) => Err(error),
        };
        match (ours, write_outcome(renewed)) {
            (Ok(()), outcome) => outcome,
            (Err(_), WriteOutcome::Unknown) => WriteOutcome::Unknown,
            (Err(outcome), _) => outcome,
        }
    }

    async fn rewrite_own_breadcrumb(&self, record: &NodeRecord) -> WriteOutcome {
        // A missing breadcrumb is not ours (see `items::own_breadcrumb_version`).
        let (data, stat) = match self.get_optional(&self.paths.breadcrumb).await {
            Ok(Some(found)) => found,
            Ok(None) => return WriteOutcome::Conflict,
            Err(_) => return WriteOutcome::Unknown,
        };
        match record::parse::<NodeRecord>(&data) {
            Ok(cur) if cur.same_incarnation(record) && cur.epoch == record.epoch => {}
            _ => return WriteOutcome::Conflict,
        }
        // (The lock must be ours, not one at the same version: see `renew`.)
        if let Err(outcome) = self.lock_is_ours().await {
            return outcome;
        }
        let new = record::to_bytes(record);
        let ops = [
            self.check_lock(),
            Op::SetData {
                path: &self.paths.breadcrumb,
                data: &new,
                version: Some(stat.version),
            },
        ];
        write_outcome(self.multi("recording the service", &ops).await)
    }

    async fn restore_breadcrumb(
        &self,
        record: &NodeRecord,
        version: Option<Version>,
    ) -> WriteOutcome {
        let Ok(version) = version.map(|v| znode_version(v).ok_or(())).transpose() else {
            return WriteOutcome::Conflict;
        };
        // (The lock must be ours, not one at the same version: see `renew`.)
        if let Err(outcome) = self.lock_is_ours().await {
            return outcome;
        }
        let data = record::to_bytes(record);
        let ops = [self.check_lock(), self.write_breadcrumb(&data, version)];
        write_outcome(self.multi("restoring the breadcrumb", &ops).await)
    }

    async fn breadcrumb_bytes(&self) -> Result<Option<(Vec<u8>, Version)>, StoreError> {
        Ok(self
            .get_optional(&self.paths.breadcrumb)
            .await?
            .map(|(data, stat)| (data, Version::new(stat.version.into()))))
    }

    async fn delete_breadcrumb_at(
        &self,
        version: Version,
        check_lock: bool,
    ) -> Result<(), StoreError> {
        let version = znode_version(version)
            .ok_or_else(|| StoreError::Rejected(format!("no version {version} of a znode")))?;
        let delete = Op::Delete {
            path: &self.paths.breadcrumb,
            version: Some(version),
        };
        let ops = if check_lock {
            vec![self.check_lock(), delete]
        } else {
            vec![delete]
        };
        self.multi("deleting the breadcrumb", &ops).await
    }

    async fn release(&self) -> Result<(), StoreError> {
        self.delete_own_lock().await
    }

    async fn release_deleting(&self, own: Option<(&str, &str, Epoch)>) -> Released {
        let Some((node_id, incarnation, epoch)) = own else {
            return Released {
                breadcrumb: None,
                lock: self.delete_own_lock().await,
            };
        };
        // Both reads go out together, then one multi-op deletes both: the breadcrumb at
        // the version that names us, the lock at the version read with its owner checked
        // (so the breadcrumb goes only while the lock is ours, the `lock` check of the
        // two-step compare-and-delete).
        let (crumb, lock) = tokio::join!(self.breadcrumb_bytes(), self.own_lock());
        let lock = match lock {
            Ok(Some(s)) => s,
            // Not ours: neither is ours to delete.
            Ok(None) => {
                return Released {
                    breadcrumb: Some(Ok(false)),
                    lock: Ok(()),
                }
            }
            Err(e) => {
                return Released {
                    breadcrumb: Some(Err(e.clone())),
                    lock: Err(e),
                }
            }
        };
        let version = match crumb {
            Ok(Some((data, v)))
                if names_breadcrumb(&data, node_id, Some(incarnation), Some(epoch)) =>
            {
                Ok(znode_version(v))
            }
            Ok(_) => Ok(None),
            Err(e) => Err(e),
        };
        // Not ours, or unread: the lock alone goes.
        let Ok(Some(version)) = version else {
            return Released {
                breadcrumb: Some(version.map(|_| false)),
                lock: self.delete_lock_at(lock.version).await,
            };
        };
        let ops = [
            Op::Delete {
                path: &self.paths.breadcrumb,
                version: Some(version),
            },
            Op::Delete {
                path: &self.paths.lock,
                version: Some(lock.version),
            },
        ];
        let both = self
            .multi("deleting the breadcrumb and the lock", &ops)
            .await;
        match both {
            Ok(()) => Released {
                breadcrumb: Some(Ok(true)),
                lock: Ok(()),
            },
            // One of them changed since it was read: judged again, in two steps.
            Err(StoreError::Rejected(_)) => super::release_in_two_steps(self, own).await,
            Err(e) => Released {
                breadcrumb: Some(Err(e.clone())),
                lock: Err(e),
            },
        }
    }

    async fn read_history(&self) -> Result<History, StoreError> {
        Ok(match self.get_optional(&self.paths.history).await? {
            Some((data, _)) => history_of(&data),
            None => History::default(),
        })
    }

    async fn append_history(&self, entry: &HistoryEntry) -> Result<Option<String>, StoreError> {
        items::append_history(self, entry).await
    }

    async fn set_aside(&self) -> Result<Vec<String>, StoreError> {
        self.list_set_aside().await
    }

    items::control_methods_on_items!();

    async fn snapshot(&self) -> Result<ClusterSnapshot, StoreError> {
        // The reads go out together: `status` and the operator commands wait for one
        // round trip (and the member list's second), not six.
        let (lock, breadcrumb, control, members, history, set_aside, epoch, floor) = tokio::try_join!(
            self.get_optional(&self.paths.lock),
            self.get_optional(&self.paths.breadcrumb),
            self.get_optional(&self.paths.control),
            self.member_znodes(),
            self.read_history(),
            self.list_set_aside(),
            self.get_optional(&self.paths.epoch),
            self.get_optional(&self.paths.floor),
        )?;
        Ok(snapshot_of(
            lock, breadcrumb, control, members, history, set_aside, epoch, floor,
        ))
    }

    async fn members(
        &self,
    ) -> Result<Vec<(String, Result<MemberRecord, record::RecordError>)>, StoreError> {
        // Two requests (list, one multi-read) rather than a whole snapshot. The lock goes
        // in the multi-read too: a node that watches a member instead of the lock (SPEC
        // §6b) learns of a free lock at least once a read of the members so, whatever the
        // one above it does.
        let (members, lock) = self.member_znodes_and_lock(true).await?;
        if lock == Some(false) {
            self.lock_absent.send_modify(|n| *n += 1);
        }
        Ok(members
            .into_iter()
            .filter_map(|(id, found)| Some((id, record::parse::<MemberRecord>(&found?.0))))
            .collect())
    }

    fn name_of(&self, what: Item) -> String {
        match what {
            Item::Cluster => self.paths.base.clone(),
            Item::Lock => self.paths.lock.clone(),
            Item::Breadcrumb => self.paths.breadcrumb.clone(),
            Item::Control => self.paths.control.clone(),
            Item::History => self.paths.history.clone(),
        }
    }

    async fn init(&self) -> Result<Vec<String>, StoreError> {
        self.ensure_parents().await?;
        self.repair_acls().await?;
        Ok(vec![format!(
            "{} exists with the configured ACL",
            self.paths.base
        )])
    }

    async fn delete_takeover_state(
        &self,
        breadcrumb: Option<Version>,
        control: Option<Version>,
    ) -> Result<(), StoreError> {
        let mut doomed = Vec::new();
        for (path, version) in [
            (&self.paths.breadcrumb, breadcrumb),
            (&self.paths.control, control),
        ] {
            if let Some(v) = version {
                let v = znode_version(v)
                    .ok_or_else(|| StoreError::Rejected(format!("no version {v} of {path}")))?;
                doomed.push((path.as_str(), v));
            }
        }
        self.delete_at_versions(&doomed).await
    }

    async fn current_epoch(&self) -> Result<Epoch, StoreError> {
        let offset = self
            .get_optional(&self.paths.epoch)
            .await?
            .map_or(0, |(d, _)| parse_offset(&d));
        Ok(self.current_zxid().await? + offset)
    }

    /// SPEC §3a `init --force` after a loss: raises the offset every epoch gets on top of
    /// its czxid, so that the counter is at least `floor` and the next lock's epoch above
    /// it, however far the ensemble's zxid went back. ZooKeeper has no init marker:
    /// without a floor, nothing.
    async fn write_marker(&self, floor: Option<Epoch>) -> Result<Option<String>, StoreError> {
        let Some(floor) = floor else {
            return Ok(None);
        };
        let path = &self.paths.epoch;
        for _ in 0..JOIN_TRIES {
            let (offset, version) = match self.get_optional(path).await? {
                Some((d, stat)) => (parse_offset(&d), Some(stat.version)),
                None => (0, None),
            };
            // The write below gets a zxid above this one: with this offset, the counter it
            // leaves is at least the floor. An offset never goes down, so no epoch does.
            let zxid = self.current_zxid().await?;
            let offset = offset.max(floor.saturating_sub(zxid));
            let data = offset_bytes(offset);
            let written = match version {
                Some(v) => {
                    self.bounded(
                        "raising the epoch counter",
                        path,
                        self.client.set_data(path, &data, Some(v)),
                    )
                    .await
                }
                None => {
                    self.bounded(
                        "creating the epoch counter",
                        path,
                        self.client
                            .create(path, &data, zk::CreateMode::Persistent, self.acls()),
                    )
                    .await
                }
            };
            match written {
                Ok(stat) => {
                    let counter = stat.mzxid.max(0) as Epoch + offset;
                    return Ok(Some(format!(
                        "raised the epoch counter {path} to {counter}: every epoch from now on \
                         is a lock's czxid plus {offset}"
                    )));
                }
                Err(StoreError::Rejected(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Unknown(format!(
            "{path} kept changing while `init --force` raised it; run it again"
        )))
    }

    async fn move_history_aside_if_above(
        &self,
        zxid: Epoch,
    ) -> Result<Option<(String, Epoch)>, StoreError> {
        let path = &self.paths.history;
        let Some((data, stat)) = self.get_optional(path).await? else {
            return Ok(None);
        };
        let Some(newest) = newest_promotion(&history_of(&data)).filter(|&n| n > zxid) else {
            return Ok(None);
        };
        let copy = self.set_aside_path("old");
        let ops = [
            Op::Create {
                path: &copy,
                data: &data,
                mode: zk::CreateMode::Persistent,
                acls: self.acls(),
            },
            Op::Delete {
                path,
                version: Some(stat.version),
            },
        ];
        self.multi("moving history aside", &ops).await?;
        // The nodes that read that history keep its epoch as seen, in the floor: the
        // counter goes above it, or the floor would block every promotion next (SPEC §3a),
        // and the next active's epoch is greater than any recorded before.
        self.write_marker(Some(newest + 1)).await?;
        Ok(Some((copy, newest)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_keeps_each_nodes_greatest_epoch_seen_and_skips_garbage() {
        let floor = parse_floor(br#"{"n1": 8, "n2": "x", "n3": 9007199254740993, "n4": 42}"#);
        assert_eq!(floor, Floor::from([("n1".into(), 8), ("n4".into(), 42)]));
        assert_eq!(floor_max(&floor), Some((42, "n4")));
        assert!(parse_floor(b"not json").is_empty());
        // Raised only upwards, and only by an epoch; not when the floor holds it already
        // (another's entry does: no entry is ever lowered).
        assert_eq!(raised(&floor, "n4", Some(42)), None);
        assert_eq!(raised(&floor, "n4", Some(7)), None);
        assert_eq!(raised(&floor, "n1", None), None);
        assert_eq!(raised(&floor, "n1", Some(42)), None);
        assert_eq!(raised(&floor, "n9", Some(10)), None);
        assert_eq!(
            raised(&floor, "n1", Some(50)).as_ref().and_then(floor_max),
            Some((50, "n1"))
        );
        let back = parse_floor(&record::to_bytes(&raised(&floor, "n5", Some(90)).unwrap()));
        assert_eq!(back.get("n5"), Some(&90));
    }

    #[test]
    fn the_counter_is_the_greatest_epoch_the_store_remembers() {
        // The epoch znode's mzxid plus its offset...
        let none = History::default();
        let c = counter_of(Some((br#"{"offset": 100}"#, 12, 3)), None, None, &none);
        assert_eq!((c.epoch, c.offset, c.version), (Some(112), 100, Some(3)));
        // ... or what the lock and the breadcrumb record, whichever is greater (a cluster
        // made by an older warden has no epoch znode).
        let at = |e: u64| format!(r#"{{"node_id":"n1","host":"h","incarnation":"i","epoch":{e}}}"#);
        let (lock, crumb) = (at(40), at(7));
        let c = counter_of(
            Some((b"", 12, 0)),
            Some(lock.as_bytes()),
            Some(crumb.as_bytes()),
            &none,
        );
        assert_eq!((c.epoch, c.offset), (Some(40), 0));
        let garbage = at(crate::coord::MAX_KEPT_EPOCH);
        let c = counter_of(
            None,
            Some(garbage.as_bytes()),
            Some(crumb.as_bytes()),
            &none,
        );
        assert_eq!((c.epoch, c.version), (Some(7), None));
        assert_eq!(counter_of(None, None, None, &none).epoch, None);
    }

    #[test]
    fn a_floor_above_the_counter_is_lost_data_naming_the_node() {
        let why = lost(Some(12), Some((47, "n3"))).expect("lost data");
        assert!(
            why.contains("12") && why.contains("47") && why.contains("node n3"),
            "{why}"
        );
        assert!(why.contains("init --force"), "{why}");
        assert_eq!(lost(Some(47), Some((47, "n3"))), None);
        assert_eq!(lost(Some(12), None), None);
        // A store that remembers no epoch at all, while a node saw one: wiped.
        assert!(lost(None, Some((5, "n1"))).is_some());
    }

    #[test]
    fn the_shared_parents_are_the_znodes_of_root() {
        assert_eq!(ancestors("/warden"), ["/warden"]);
        assert_eq!(ancestors("/a/b/"), ["/a", "/a/b"]);
        assert!(ancestors("/").is_empty());
        assert_eq!(parent("/warden/rm"), "/warden");
        assert_eq!(parent("/warden"), "/");
    }

    #[test]
    fn a_creator_cluster_leaves_shared_parents_open_for_reading_and_creating() {
        let acls = shared_parent_acls(AclMode::Creator);
        let anyone = acls
            .iter()
            .find(|a| a.scheme() == "world" && a.id() == "anyone")
            .expect("world:anyone");
        assert!(anyone
            .permission()
            .has(Permission::READ | Permission::CREATE));
        assert!(!anyone.permission().has(Permission::DELETE));
        assert!(!anyone.permission().has(Permission::ADMIN));
        assert_eq!(
            &shared_parent_acls(AclMode::Open)[..],
            &Acls::anyone_all()[..]
        );
    }

    #[test]
    fn an_authorization_error_names_the_znode() {
        let e = classify(zk::Error::NoAuth, "/warden/rm/members");
        assert!(matches!(e, StoreError::Auth(_)));
        assert!(e.to_string().contains("/warden/rm/members"), "{e}");
        let e = classify_multi(
            zk::MultiWriteError::OperationFailed {
                index: 1,
                source: zk::Error::NoAuth,
            },
            &["/a/lock", "/a/breadcrumb"],
        );
        assert!(e.to_string().contains("/a/breadcrumb"), "{e}");
    }
}
