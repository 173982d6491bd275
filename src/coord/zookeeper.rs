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
    self, Control, Epoch, History, HistoryEntry, JoinOutcome, MemberRecord, NodeRecord, SessionId,
    TakeoverState, Version, WriteOutcome,
};
use std::future::Future;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use zookeeper_client as zk;
use zookeeper_client::{Acl, Acls, Permission};

mod session;
mod store;
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
                        Err(_) => tokio::time::sleep(crate::coord::WATCH_RETRY_DELAY).await,
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

#[cfg(test)]
mod tests;
