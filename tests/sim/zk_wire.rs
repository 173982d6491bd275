//! The simulated store as ZooKeeper (issue 32 point 3): the sessions are the backend's own
//! `warden::coord::zookeeper::ZkSession` (its reads, multi-ops, version checks and
//! watches, and what it decides from their answers: lock, epoch, floor, counter), over a
//! simulated client ([`SimZk`], the backend's `Wire`) whose calls run on the znode tree of
//! `ztree.rs`. Only the wire is simulated, and what ZooKeeper's servers do: the model's
//! sessions (`State::refresh`: pings, expiry on tick boundaries, no expiry without
//! quorum), its requests (`State::request`: latency, loss, a cut link, a store that is
//! down, a frozen or dead client, slow replies), each applied atomically on arrival; the
//! tree's one zxid; an ended session's ephemerals deleted in one transaction; one-shot
//! watches, fired by the writes, delivered in order with the replies, and a session event
//! once the client learns its session ended; the client's state watcher
//! (`SyncConnected`, `Disconnected`, `Expired`) read off the model's session.
//!
//! What the invariants need comes out of the tree's changes as the model's facts: the
//! lock's holder changing (created, deleted, gone with its session, restored away), the
//! breadcrumb changing, and the holder's acknowledged renewals and commits (which start
//! the lease the checker holds it to), recognised by the multi-ops' shapes.
//!
//! Outside the seam: the `zookeeper-client` crate itself (its connection, its reconnects
//! within a session, its re-registration of watches, which this wire stands for), the
//! servers' replication (the simulated ensemble is one tree; a failover to a lagging
//! follower is a restore), and ACLs (every znode is open).

use super::ztree::{Fired, Tree, TreeOp};
use super::{Fact, Inc, Server, Sess, SimStore, Snap, State, Wait};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::time::Instant;
use warden::config::AclMode;
use warden::coord::items::history_of;
use warden::coord::zookeeper::wire::{Op, States, Watch, Wire};
use warden::coord::zookeeper::{snapshot_of, Paths, ZkSession};
use warden::coord::{ClusterSnapshot, StoreError};
use warden::record::{self, Control, Epoch, MemberRecord, NodeRecord};
use zookeeper_client as zk;

/// The simulation's config: cluster `sim` under the default root.
fn paths() -> Paths {
    Paths::new("/warden", "sim")
}

/// The store's ZooKeeper side.
#[derive(Default)]
pub(super) struct ZkSide {
    pub(super) tree: Tree,
    /// Armed watches by id.
    watches: BTreeMap<u64, Armed>,
    next_watch: u64,
    /// Fired watches on their way to the client: whose, when they get there, the event.
    fired: BTreeMap<u64, (i64, Instant, zk::WatchedEvent)>,
    /// The watches of sessions the server ended (armed, or fired and not delivered): a
    /// restore that brings such a session back arms them again, as its client, which
    /// never learned the session had ended, sets them again on reconnecting (the model's
    /// seed 86916).
    dormant: BTreeMap<u64, Armed>,
    /// When each session last read `control` (for [`Fact::Commit`]: the control the
    /// committer decided on).
    read_at: BTreeMap<i64, Instant>,
}

/// A watch as the server keeps it: a data watch (armed while the znode exists: fires when
/// its data is set or it is deleted) or an exists watch (armed while it does not: fires
/// when it is created).
struct Armed {
    sid: i64,
    path: String,
    on_data: bool,
}

/// A request of the client, as it reaches the server.
enum Req {
    Stat(String),
    Get(String),
    Create {
        path: String,
        data: Vec<u8>,
        ephemeral: bool,
    },
    Set {
        path: String,
        data: Vec<u8>,
        version: Option<i32>,
    },
    Delete {
        path: String,
        version: Option<i32>,
    },
    Children(String),
    SetAcl(String),
    Multi(Vec<TreeOp>),
    GetOf(Vec<String>),
    GetWatch(String),
    StatWatch(String),
}

/// Its answer.
enum Resp {
    Stat(Option<zk::Stat>),
    Get(Vec<u8>, zk::Stat),
    Written(zk::Stat),
    Done,
    Children(Vec<String>),
    Multi(Result<Vec<zk::MultiWriteResult>, (usize, zk::Error)>),
    GetOf(Vec<zk::MultiReadResult>),
    GetWatch(Vec<u8>, zk::Stat, u64),
    StatWatch(Option<zk::Stat>, u64),
}

/// The lock as the facts see it: its owner's session and czxid.
fn lock_of(tree: &Tree) -> Option<(i64, i64)> {
    tree.stat(&paths().lock)
        .map(|s| (s.ephemeral_owner, s.czxid))
}

/// The offset `init --force` raised epochs by (the epoch znode's `{"offset": N}`).
fn offset_of(tree: &Tree) -> Epoch {
    tree.data(&paths().epoch)
        .and_then(|d| serde_json::from_slice::<serde_json::Value>(d).ok())
        .and_then(|v| v["offset"].as_u64())
        .unwrap_or(0)
}

fn op_of(op: &Op<'_>) -> TreeOp {
    match *op {
        Op::Check { path, version } => TreeOp::Check {
            path: path.into(),
            version,
        },
        Op::SetData {
            path,
            data,
            version,
        } => TreeOp::SetData {
            path: path.into(),
            data: data.to_vec(),
            version,
        },
        Op::Create {
            path, data, mode, ..
        } => TreeOp::Create {
            path: path.into(),
            data: data.to_vec(),
            ephemeral: matches!(mode, zk::CreateMode::Ephemeral),
        },
        Op::Delete { path, version } => TreeOp::Delete {
            path: path.into(),
            version,
        },
    }
}

impl State {
    /// What `warden init` leaves: the cluster's parents.
    pub(super) fn zk_init(&mut self) {
        let p = paths();
        for path in ["/warden", p.base.as_str(), p.members.as_str()] {
            let _ = self.zk.tree.apply(
                &[TreeOp::Create {
                    path: path.into(),
                    data: Vec::new(),
                    ephemeral: false,
                }],
                0,
            );
        }
    }

    fn zk_owner(&self, sid: i64) -> Option<Inc> {
        self.sessions.get(&sid).map(|s| s.owner)
    }

    /// One request of session `sid` (of `owner`, sent at `sent`), applied at `now`, and
    /// the facts it makes.
    fn zk_apply(
        &mut self,
        sid: i64,
        owner: Inc,
        sent: Instant,
        req: Req,
        now: Instant,
    ) -> Result<Resp, zk::Error> {
        if self.sess(sid).server != Server::Alive {
            return Err(zk::Error::SessionExpired);
        }
        self.touch(sid, now);
        let p = paths();
        let (lock0, crumb0) = (lock_of(&self.zk.tree), self.zk_crumb());
        let tree = &mut self.zk.tree;
        let mut write: Option<(Vec<TreeOp>, Fired)> = None;
        let resp = match req {
            Req::Stat(path) => Resp::Stat(tree.stat(&path)),
            Req::Get(path) => {
                if path == p.control {
                    self.zk.read_at.insert(sid, now);
                }
                let (d, s) = tree.get(&path)?;
                Resp::Get(d, s)
            }
            Req::Children(path) => Resp::Children(tree.children(&path)?),
            Req::SetAcl(path) => {
                tree.stat(&path).ok_or(zk::Error::NoNode)?;
                Resp::Done
            }
            Req::GetOf(paths_read) => Resp::GetOf(
                paths_read
                    .iter()
                    .map(|path| match tree.get(path) {
                        Ok((data, stat)) => zk::MultiReadResult::Data { data, stat },
                        Err(err) => zk::MultiReadResult::Error { err },
                    })
                    .collect(),
            ),
            Req::GetWatch(path) => {
                if path == p.control {
                    self.zk.read_at.insert(sid, now);
                }
                let (d, s) = tree.get(&path)?;
                let id = self.zk_arm(sid, &path, true);
                Resp::GetWatch(d, s, id)
            }
            Req::StatWatch(path) => {
                let stat = tree.stat(&path);
                let id = self.zk_arm(sid, &path, stat.is_some());
                Resp::StatWatch(stat, id)
            }
            Req::Create {
                path,
                data,
                ephemeral,
            } => {
                let ops = vec![TreeOp::Create {
                    path: path.clone(),
                    data,
                    ephemeral,
                }];
                let (mut r, fired) = tree.apply(&ops, sid).map_err(|(_, e)| e)?;
                write = Some((ops, fired));
                match r.pop() {
                    Some(zk::MultiWriteResult::Create { stat, .. }) => Resp::Written(stat),
                    _ => unreachable!("a create answers with its stat"),
                }
            }
            Req::Set {
                path,
                data,
                version,
            } => {
                let ops = vec![TreeOp::SetData {
                    path,
                    data,
                    version,
                }];
                let (mut r, fired) = tree.apply(&ops, sid).map_err(|(_, e)| e)?;
                write = Some((ops, fired));
                match r.pop() {
                    Some(zk::MultiWriteResult::SetData { stat }) => Resp::Written(stat),
                    _ => unreachable!("a setData answers with its stat"),
                }
            }
            Req::Delete { path, version } => {
                let ops = vec![TreeOp::Delete { path, version }];
                let (_, fired) = tree.apply(&ops, sid).map_err(|(_, e)| e)?;
                write = Some((ops, fired));
                Resp::Done
            }
            Req::Multi(ops) => match tree.apply(&ops, sid) {
                Ok((results, fired)) => {
                    write = Some((ops, fired));
                    Resp::Multi(Ok(results))
                }
                Err(failed) => Resp::Multi(Err(failed)),
            },
        };
        if let Some((ops, fired)) = write {
            self.zxid += 1;
            self.changed = true;
            self.zk_fire(fired, now);
            self.zk_facts(sid, owner, sent, &ops, lock0, crumb0, now);
        }
        Ok(resp)
    }

    fn zk_crumb(&self) -> Option<Vec<u8>> {
        self.zk.tree.data(&paths().breadcrumb).map(<[u8]>::to_vec)
    }

    /// The facts of a write of `owner` (session `sid`): the lock's holder changing, a
    /// commit, a renewal, a rewrite or a delete of the breadcrumb.
    #[allow(clippy::too_many_arguments)]
    fn zk_facts(
        &mut self,
        sid: i64,
        owner: Inc,
        sent: Instant,
        ops: &[TreeOp],
        lock0: Option<(i64, i64)>,
        crumb0: Option<Vec<u8>>,
        now: Instant,
    ) {
        let p = paths();
        self.zk_lock_facts(lock0, false, now);
        let crumb1 = self.zk_crumb();
        let checks = |path: &str| {
            ops.iter()
                .any(|o| matches!(o, TreeOp::Check { path: c, .. } if c == path))
        };
        let writes = |f: &dyn Fn(&str) -> bool| {
            ops.iter().any(|o| match o {
                TreeOp::SetData { path, .. } | TreeOp::Create { path, .. } => f(path),
                _ => false,
            })
        };
        let commit = checks(&p.control) && writes(&|x| x == p.lock);
        let renewal = checks(&p.lock) && writes(&|x| x.starts_with(&format!("{}/", p.members)));
        let rewrite = checks(&p.lock) && writes(&|x| x == p.breadcrumb);
        let crumbs = (crumb0.as_deref(), crumb1.as_deref());
        if commit {
            let (control, read_at) = (self.zk_control(), self.zk.read_at.get(&sid).copied());
            self.committed(owner, crumbs, control, read_at, now);
        }
        if commit || renewal {
            self.renewed(owner, sent, now);
        }
        if !commit && crumb0 != crumb1 {
            self.crumb_changed(owner, crumbs, rewrite, now);
        }
    }

    /// The lock's holder changed since `lock0`: its going (`expired`: with its session)
    /// and the new one's taking.
    fn zk_lock_facts(&mut self, lock0: Option<(i64, i64)>, expired: bool, now: Instant) {
        let lock1 = lock_of(&self.zk.tree);
        if lock0 == lock1 {
            return;
        }
        self.lock_gone(lock0.and_then(|(s, _)| self.zk_owner(s)), expired, now);
        if let Some((s, czxid)) = lock1 {
            let epoch = czxid.max(0) as Epoch + offset_of(&self.zk.tree);
            self.lock_taken(self.zk_owner(s), epoch, now);
        }
    }

    /// Arms a watch of `sid` on `path`: its id.
    fn zk_arm(&mut self, sid: i64, path: &str, on_data: bool) -> u64 {
        self.zk.next_watch += 1;
        let id = self.zk.next_watch;
        self.zk.watches.insert(
            id,
            Armed {
                sid,
                path: path.to_string(),
                on_data,
            },
        );
        id
    }

    /// Watch `id` of `sid` fired with `ev` on `path`: on its way to the client, in order
    /// with the replies.
    fn zk_deliver(&mut self, id: u64, sid: i64, ev: zk::EventType, path: &str, now: Instant) {
        let at = self.reply_at(sid, now);
        self.zk
            .fired
            .insert(id, (sid, at, zk::WatchedEvent::new(ev, path)));
    }

    /// Fires the watches a write triggers: each once, on its way to its client in order
    /// with the replies.
    fn zk_fire(&mut self, fired: Fired, now: Instant) {
        for (path, ev) in fired {
            let hit: Vec<u64> = self
                .zk
                .watches
                .iter()
                .filter(|(_, w)| {
                    w.path == path
                        && match ev {
                            zk::EventType::NodeCreated => !w.on_data,
                            _ => w.on_data,
                        }
                })
                .map(|(id, _)| *id)
                .collect();
            for id in hit {
                let w = self.zk.watches.remove(&id).expect("listed");
                self.zk_deliver(id, w.sid, ev, &path, now);
            }
        }
        self.changed = true;
    }

    /// The watches of `sid`, armed or fired and not delivered, go dormant (its session
    /// ended at the server).
    fn zk_dormant(&mut self, sid: i64) {
        let armed: Vec<u64> = self
            .zk
            .watches
            .iter()
            .filter(|(_, w)| w.sid == sid)
            .map(|(id, _)| *id)
            .collect();
        for id in armed {
            let w = self.zk.watches.remove(&id).expect("listed");
            self.zk.dormant.insert(id, w);
        }
        // An ended session hears nothing more but that it ended.
        let fired: Vec<(u64, String)> = self
            .zk
            .fired
            .iter()
            .filter(|(_, f)| f.0 == sid)
            .map(|(id, f)| (*id, f.2.path.clone()))
            .collect();
        for (id, path) in fired {
            self.zk.fired.remove(&id);
            self.zk.dormant.insert(
                id,
                Armed {
                    sid,
                    path,
                    on_data: true,
                },
            );
        }
    }

    /// A session ended at the server: its ephemerals go in one transaction, and its
    /// watches with it (its client hears a session event instead).
    pub(super) fn zk_end_session(&mut self, sid: i64, expired: bool, now: Instant) {
        self.zk_dormant(sid);
        let lock0 = lock_of(&self.zk.tree);
        let fired = self.zk.tree.end_session(sid);
        if !fired.is_empty() {
            self.zk_fire(fired, now);
            self.zk_lock_facts(lock0, expired, now);
        }
    }

    /// The store comes back from `snap` (the model's sessions are restored by the
    /// caller): the tree as it was; the ephemerals of sessions not alive now go; every
    /// armed watch whose znode differs fires, as a reconnecting client's watches do.
    pub(super) fn zk_restore(&mut self, snap: &Snap, now: Instant) {
        let lock0 = lock_of(&self.zk.tree);
        let old = std::mem::replace(&mut self.zk.tree, snap.ztree.clone());
        let dead: Vec<i64> = self
            .zk
            .tree
            .ephemeral_owners()
            .into_iter()
            .filter(|o| {
                self.sessions
                    .get(o)
                    .is_none_or(|s| s.server != Server::Alive)
            })
            .collect();
        for o in dead {
            self.zk.tree.end_session(o);
        }
        // The watches of the sessions the restore ended go dormant, as at any end.
        let ended: Vec<i64> = self
            .zk
            .watches
            .values()
            .map(|w| w.sid)
            .chain(self.zk.fired.values().map(|f| f.0))
            .filter(|sid| self.sess(*sid).server != Server::Alive)
            .collect::<std::collections::BTreeSet<i64>>()
            .into_iter()
            .collect();
        for sid in ended {
            self.zk_dormant(sid);
        }
        // The watches of the sessions alive again, set again by their clients, each fired
        // once (a spurious event only makes the backend read again), but an exists watch
        // whose znode is still absent.
        let revived: Vec<u64> = self
            .zk
            .dormant
            .iter()
            .filter(|(_, w)| self.sess(w.sid).server == Server::Alive)
            .map(|(id, _)| *id)
            .collect();
        for id in revived {
            let w = self.zk.dormant.remove(&id).expect("listed");
            let ev = match (self.zk.tree.stat(&w.path).is_some(), w.on_data) {
                (false, false) => {
                    self.zk.watches.insert(id, w);
                    continue;
                }
                (false, true) => zk::EventType::NodeDeleted,
                (true, false) => zk::EventType::NodeCreated,
                (true, true) => zk::EventType::NodeDataChanged,
            };
            self.zk_deliver(id, w.sid, ev, &w.path, now);
        }
        let mut fired: BTreeMap<String, zk::EventType> = BTreeMap::new();
        for w in self.zk.watches.values() {
            let (was, is) = (old.stat(&w.path), self.zk.tree.stat(&w.path));
            let ev = match (was.map(|s| s.mzxid), is.map(|s| s.mzxid)) {
                (a, b) if a == b => continue,
                (_, None) => zk::EventType::NodeDeleted,
                (None, Some(_)) => zk::EventType::NodeCreated,
                (Some(_), Some(_)) => zk::EventType::NodeDataChanged,
            };
            fired.insert(w.path.clone(), ev);
        }
        // A watch armed on an existing znode that is gone fires as deleted; one armed on
        // an absent znode fires only when it exists again (or changed: read again).
        for (path, ev) in fired {
            let hit: Vec<u64> = self
                .zk
                .watches
                .iter()
                .filter(|(_, w)| w.path == path && (w.on_data || ev != zk::EventType::NodeDeleted))
                .map(|(id, _)| *id)
                .collect();
            for id in hit {
                let w = self.zk.watches.remove(&id).expect("listed");
                self.zk_deliver(id, w.sid, ev, &path, now);
            }
        }
        self.zk_lock_facts(lock0, true, now);
        self.changed = true;
    }

    /// What a restore to `snap` forgets, in words.
    pub(super) fn zk_forgotten(&self, snap: &Snap) -> String {
        let p = paths();
        let data = |t: &Tree, path: &str| {
            t.data(path)
                .map(|d| String::from_utf8_lossy(d).into_owned())
        };
        format!(
            "zxid {} -> {}, epoch znode {:?} (mzxid {:?}) -> {:?} (mzxid {:?}), floor {:?} -> {:?}",
            self.zk.tree.zxid,
            snap.ztree.zxid,
            data(&self.zk.tree, &p.epoch),
            self.zk.tree.stat(&p.epoch).map(|s| s.mzxid),
            data(&snap.ztree, &p.epoch),
            snap.ztree.stat(&p.epoch).map(|s| s.mzxid),
            data(&self.zk.tree, &p.floor),
            data(&snap.ztree, &p.floor),
        )
    }

    fn zk_control(&self) -> Control {
        self.zk
            .tree
            .data(&paths().control)
            .and_then(|d| record::parse(d).ok())
            .unwrap_or_default()
    }

    pub(super) fn zk_control_now(&self) -> Control {
        self.zk_control()
    }

    /// The operator replaces control (`warden pause`, `failover`): the next version.
    pub(super) fn zk_set_control(&mut self, control: Control, now: Instant) {
        let path = paths().control;
        let data = record::to_bytes(&control);
        let op = match self.zk.tree.stat(&path) {
            Some(_) => TreeOp::SetData {
                path,
                data,
                version: None,
            },
            None => TreeOp::Create {
                path,
                data,
                ephemeral: false,
            },
        };
        if let Ok((_, fired)) = self.zk.tree.apply(&[op], 0) {
            self.zxid += 1;
            self.zk_fire(fired, now);
        }
    }

    /// `fence --confirm`: the breadcrumb goes, and history says so.
    pub(super) fn zk_confirm_fenced(&mut self, now: Instant) {
        let p = paths();
        let Some(data) = self.zk_crumb() else {
            return;
        };
        let mut ops = vec![TreeOp::Delete {
            path: p.breadcrumb.clone(),
            version: None,
        }];
        let record = record::parse::<NodeRecord>(&data).ok();
        if let Some(record) = &record {
            // As `warden fence --confirm` records it (src/ops/fence.rs).
            let mut values = self
                .zk
                .tree
                .data(&p.history)
                .and_then(|d| record::parse_history_values(d).ok())
                .unwrap_or_default();
            let entry = super::confirmed_entry(record);
            values.insert(0, serde_json::to_value(&entry).expect("an entry"));
            let data = record::history_bytes(&values);
            ops.push(match self.zk.tree.stat(&p.history) {
                Some(_) => TreeOp::SetData {
                    path: p.history.clone(),
                    data,
                    version: None,
                },
                None => TreeOp::Create {
                    path: p.history.clone(),
                    data,
                    ephemeral: false,
                },
            });
        }
        if let Ok((_, fired)) = self.zk.tree.apply(&ops, 0) {
            self.zxid += 1;
            self.zk_fire(fired, now);
            if let Some(record) = record {
                self.facts.push(Fact::BreadcrumbDeleted {
                    by: None,
                    record,
                    at: now,
                });
            }
        }
    }

    pub(super) fn zk_breadcrumb(&self) -> Option<NodeRecord> {
        self.zk_crumb()
            .and_then(|d| record::parse::<NodeRecord>(&d).ok())
    }

    pub(super) fn zk_lock_holder(&self) -> Option<(usize, u32, Epoch)> {
        let (s, czxid) = lock_of(&self.zk.tree)?;
        let o = self.zk_owner(s)?;
        Some((o.0, o.1, czxid.max(0) as Epoch + offset_of(&self.zk.tree)))
    }

    /// SPEC §3a: the floor's greatest entry (`<base>/floor`, by node id).
    pub(super) fn zk_floor_max(&self) -> Option<Epoch> {
        self.zk_floor_max_but(None)
    }

    /// The floor's greatest entry, but for `committed` (node id, epoch): the committer's
    /// entry at the epoch of its commit, which the commit's own multi-op raised it to.
    pub(super) fn zk_floor_max_but(&self, committed: Option<(&str, Epoch)>) -> Option<Epoch> {
        let d = self.zk.tree.data(&paths().floor)?;
        let v: serde_json::Value = serde_json::from_slice(d).ok()?;
        v.as_object()?
            .iter()
            .filter_map(|(node, e)| Some((node, e.as_u64()?)))
            .filter(|&(node, e)| committed != Some((node.as_str(), e)))
            .map(|(_, e)| e)
            .max()
    }

    pub(super) fn zk_members(&self) -> BTreeMap<String, MemberRecord> {
        let prefix = format!("{}/", paths().members);
        self.zk
            .tree
            .under(&prefix)
            .into_iter()
            .filter_map(|(path, data, _)| {
                let id = path[prefix.len()..].to_string();
                Some((id, record::parse(&data).ok()?))
            })
            .collect()
    }

    /// What `status` reads, as the backend reads it.
    pub(super) fn zk_snapshot(&self) -> ClusterSnapshot {
        let p = paths();
        let t = &self.zk.tree;
        let get = |path: &str| t.get(path).ok();
        let prefix = format!("{}/", p.members);
        let members = t
            .under(&prefix)
            .into_iter()
            .map(|(path, d, s)| (path[prefix.len()..].to_string(), Some((d, s))))
            .collect();
        let history = t.data(&p.history).map(history_of).unwrap_or_default();
        snapshot_of(
            get(&p.lock),
            get(&p.breadcrumb),
            get(&p.control),
            members,
            history,
            Vec::new(),
            get(&p.epoch),
            get(&p.floor),
        )
    }

    /// The watch `id` of `sid`: its event once it reached its client; a session event once
    /// the client learned its session ended.
    fn zk_watch(&mut self, sid: i64, id: u64, now: Instant) -> Wait<zk::WatchedEvent> {
        let owner = self.sess(sid).owner;
        let lost_at = self.sess(sid).lost_at;
        if let Some((_, at, _)) = self.zk.fired.get(&id) {
            if *at <= now && self.reaches(owner) {
                let (_, _, ev) = self.zk.fired.remove(&id).expect("looked");
                return Wait::Ready(ev);
            }
            if *at > now {
                return Wait::Until(Some(*at));
            }
            return Wait::Until(None);
        }
        match lost_at {
            Some(t) if t <= now => {
                self.zk.watches.remove(&id);
                self.zk.dormant.remove(&id);
                Wait::Ready(zk::WatchedEvent::new_session(zk::SessionState::Expired))
            }
            t => Wait::Until(t),
        }
    }

    /// The client's view of its session.
    fn zk_state(&self, sid: i64, now: Instant) -> zk::SessionState {
        let s = self.sess(sid);
        if s.lost_at.is_some_and(|t| t <= now) {
            zk::SessionState::Expired
        } else if self.connected(sid) {
            zk::SessionState::SyncConnected
        } else {
            zk::SessionState::Disconnected
        }
    }
}

/// One simulated ZooKeeper client; clones share its session.
#[derive(Clone)]
pub struct SimZk {
    h: Arc<ZkHandle>,
}

struct ZkHandle {
    store: SimStore,
    sid: i64,
    owner: Inc,
    granted: std::time::Duration,
    wire: mpsc::UnboundedSender<super::Job>,
}

impl Drop for ZkHandle {
    /// The last clone gone: the client closes its session (if it can reach the store).
    fn drop(&mut self) {
        self.store.close_session(self.sid, &self.wire);
    }
}

impl SimZk {
    /// Sends `req` and waits for its answer; `ConnectionLoss` when none came within two
    /// thirds of the session timeout (the request or its reply lost, the link cut, the
    /// store down), as the client's own connection timeout says. The backend's `bounded`
    /// usually ends the wait first: an unknown outcome.
    async fn call(&self, req: Req) -> Result<Resp, zk::Error> {
        let h = &*self.h;
        let (sid, owner) = (h.sid, h.owner);
        h.store.gate(owner).await;
        let sent = Instant::now();
        let sending = h.store.with(|st, now| {
            if st.sess(sid).lost_at.is_some_and(|t| t <= now) {
                // The client knows: it fails at once.
                return Err(zk::Error::SessionExpired);
            }
            Ok(st.request(sid, now, move |st, now| {
                st.zk_apply(sid, owner, sent, req, now)
            }))
        });
        let (job, reply) = sending?;
        if let Some(job) = job {
            let _ = h.wire.send(job);
        }
        // A real client never loses one request on a live connection: a connection that
        // stays silent for two thirds of the session timeout is given up, every request
        // on it failing with `ConnectionLoss`, and the client connects again within the
        // session (a watch of the backend's with no timeout of its own then reads again).
        let answer = tokio::time::timeout(h.granted * 2 / 3, h.store.delivered(owner, reply))
            .await
            .unwrap_or(Err(zk::Error::ConnectionLoss));
        if let Err(zk::Error::SessionExpired) = answer {
            h.store.learned_lost(sid);
        }
        h.store.gate(owner).await;
        answer
    }

    fn watch(&self, id: u64) -> SimWatch {
        SimWatch {
            h: self.h.clone(),
            id,
        }
    }
}

/// A one-shot watch of a simulated client.
pub struct SimWatch {
    h: Arc<ZkHandle>,
    id: u64,
}

impl Watch for SimWatch {
    async fn changed(self) -> zk::WatchedEvent {
        let (sid, id) = (self.h.sid, self.id);
        let ev = self
            .h
            .store
            .until(move |st, now| st.zk_watch(sid, id, now))
            .await;
        self.h.store.gate(self.h.owner).await;
        ev
    }
}

/// The state watcher of a simulated client.
pub struct SimStates {
    h: Arc<ZkHandle>,
    last: zk::SessionState,
}

impl States for SimStates {
    fn peek_state(&self) -> zk::SessionState {
        self.last
    }

    async fn changed(&mut self) -> zk::SessionState {
        let (sid, last) = (self.h.sid, self.last);
        let state = self
            .h
            .store
            .until(move |st, now| {
                let s = st.zk_state(sid, now);
                if s != last {
                    Wait::Ready(s)
                } else if last == zk::SessionState::Expired {
                    // Terminal: no more changes (as the client's watcher).
                    Wait::Until(None)
                } else {
                    Wait::Until(st.sess(sid).lost_at.filter(|t| *t > now))
                }
            })
            .await;
        self.h.store.gate(self.h.owner).await;
        self.last = state;
        state
    }
}

fn unexpected() -> zk::Error {
    zk::Error::UnexpectedError("the simulated ensemble answered another request".into())
}

impl Wire for SimZk {
    type Watch = SimWatch;
    type States = SimStates;

    fn session_id(&self) -> i64 {
        self.h.sid
    }

    fn session_timeout(&self) -> std::time::Duration {
        self.h.granted
    }

    fn state_watcher(&self) -> SimStates {
        let sid = self.h.sid;
        let last = self.h.store.with(|st, now| st.zk_state(sid, now));
        SimStates {
            h: self.h.clone(),
            last,
        }
    }

    async fn check_stat(&self, path: &str) -> Result<Option<zk::Stat>, zk::Error> {
        match self.call(Req::Stat(path.into())).await? {
            Resp::Stat(s) => Ok(s),
            _ => Err(unexpected()),
        }
    }

    async fn get_data(&self, path: &str) -> Result<(Vec<u8>, zk::Stat), zk::Error> {
        match self.call(Req::Get(path.into())).await? {
            Resp::Get(d, s) => Ok((d, s)),
            _ => Err(unexpected()),
        }
    }

    async fn create(
        &self,
        path: &str,
        data: &[u8],
        mode: zk::CreateMode,
        _acls: &[zk::Acl],
    ) -> Result<zk::Stat, zk::Error> {
        let req = Req::Create {
            path: path.into(),
            data: data.to_vec(),
            ephemeral: matches!(mode, zk::CreateMode::Ephemeral),
        };
        match self.call(req).await? {
            Resp::Written(s) => Ok(s),
            _ => Err(unexpected()),
        }
    }

    async fn set_data(
        &self,
        path: &str,
        data: &[u8],
        version: Option<i32>,
    ) -> Result<zk::Stat, zk::Error> {
        let req = Req::Set {
            path: path.into(),
            data: data.to_vec(),
            version,
        };
        match self.call(req).await? {
            Resp::Written(s) => Ok(s),
            _ => Err(unexpected()),
        }
    }

    async fn delete(&self, path: &str, version: Option<i32>) -> Result<(), zk::Error> {
        let req = Req::Delete {
            path: path.into(),
            version,
        };
        match self.call(req).await? {
            Resp::Done => Ok(()),
            _ => Err(unexpected()),
        }
    }

    async fn list_children(&self, path: &str) -> Result<Vec<String>, zk::Error> {
        match self.call(Req::Children(path.into())).await? {
            Resp::Children(c) => Ok(c),
            _ => Err(unexpected()),
        }
    }

    async fn set_acl(&self, path: &str, _acls: &[zk::Acl]) -> Result<(), zk::Error> {
        match self.call(Req::SetAcl(path.into())).await? {
            Resp::Done => Ok(()),
            _ => Err(unexpected()),
        }
    }

    async fn multi(
        &self,
        ops: &[Op<'_>],
    ) -> Result<Vec<zk::MultiWriteResult>, zk::MultiWriteError> {
        let ops: Vec<TreeOp> = ops.iter().map(op_of).collect();
        match self.call(Req::Multi(ops)).await {
            Ok(Resp::Multi(Ok(r))) => Ok(r),
            Ok(Resp::Multi(Err((index, source)))) => {
                Err(zk::MultiWriteError::OperationFailed { index, source })
            }
            Ok(_) => Err(zk::MultiWriteError::RequestFailed {
                source: unexpected(),
            }),
            Err(source) => Err(zk::MultiWriteError::RequestFailed { source }),
        }
    }

    async fn get_data_of(&self, paths: &[String]) -> Result<Vec<zk::MultiReadResult>, zk::Error> {
        match self.call(Req::GetOf(paths.to_vec())).await? {
            Resp::GetOf(r) => Ok(r),
            _ => Err(unexpected()),
        }
    }

    async fn get_and_watch_data(
        &self,
        path: &str,
    ) -> Result<(Vec<u8>, zk::Stat, SimWatch), zk::Error> {
        match self.call(Req::GetWatch(path.into())).await? {
            Resp::GetWatch(d, s, id) => Ok((d, s, self.watch(id))),
            _ => Err(unexpected()),
        }
    }

    async fn check_and_watch_stat(
        &self,
        path: &str,
    ) -> Result<(Option<zk::Stat>, SimWatch), zk::Error> {
        match self.call(Req::StatWatch(path.into())).await? {
            Resp::StatWatch(s, id) => Ok((s, self.watch(id))),
            _ => Err(unexpected()),
        }
    }
}

/// Opens a `ZkSession` of `owner` over a simulated client: the model's session opening
/// (a request, bounded by the connect timeout), then the backend's session over it.
pub(super) async fn connect(store: &SimStore, owner: Inc) -> Result<ZkSession<SimZk>, StoreError> {
    store.gate(owner).await;
    let sent = Instant::now();
    let (sid, job, reply, cfg) = store.with(|st, now| {
        st.next_session += 1;
        let sid = st.next_session;
        st.sessions.insert(sid, Sess::new(owner, now));
        let (job, reply) = st.request(sid, now, move |st, now| st.open_session(sid, now));
        (sid, job, reply, st.cfg.clone())
    });
    let wire = super::spawn_wire(store.clone());
    if let Some(job) = job {
        let _ = wire.send(job);
    }
    let client = SimZk {
        h: Arc::new(ZkHandle {
            store: store.clone(),
            sid,
            owner,
            granted: cfg.granted,
            wire,
        }),
    };
    let answer =
        tokio::time::timeout_at(sent + cfg.op_timeout, store.delivered(owner, reply)).await;
    store.gate(owner).await;
    if answer.is_err() {
        // (Dropping the client gives the session up, as the model's connect does.)
        return Err(StoreError::Unreachable {
            store: "the simulated ZooKeeper",
            key: "(none)",
            connect: format!(
                "the simulated ZooKeeper (n{} incarnation {})",
                owner.0 + 1,
                owner.1
            ),
            timeout: format!("{:?}", cfg.op_timeout),
            reason: "no session was established".into(),
        });
    }
    Ok(ZkSession::over(
        client,
        paths(),
        AclMode::Open,
        cfg.op_timeout,
        cfg.settle,
    ))
}
