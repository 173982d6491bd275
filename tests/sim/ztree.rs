//! The simulated ensemble's data (issue 32 point 3): a znode tree as ZooKeeper keeps it,
//! for `zk_wire.rs`. One zxid counter, bumped once per write transaction (a multi-op is
//! one); each znode's `czxid`, `mzxid`, `version` (from 0, one more per `setData`) and
//! `ephemeral_owner`; the answers ZooKeeper gives (`NoNode`, `NodeExists`, `BadVersion`,
//! `NotEmpty`, a multi-op's failing index); and, for each applied write, the watch events
//! it fires (`NodeCreated`, `NodeDataChanged`, `NodeDeleted`, by path).
//!
//! Checked against a real ZooKeeper by `tests/zk_tree.rs`: the same steps (the backend's
//! shapes of creates, conditional writes, multi-ops failing at an index, an ephemeral's
//! end with its session) on both, every answer compared.

use std::collections::BTreeMap;
use zookeeper_client as zk;

/// A write's watch events: the znode and what happened to it.
pub type Fired = Vec<(String, zk::EventType)>;

#[derive(Clone, Debug)]
pub struct Znode {
    pub data: Vec<u8>,
    pub stat: zk::Stat,
}

/// A multi-op's operation, owned (`warden::coord::zookeeper::wire::Op` borrows).
#[derive(Clone, Debug)]
pub enum TreeOp {
    Check {
        path: String,
        version: i32,
    },
    SetData {
        path: String,
        data: Vec<u8>,
        version: Option<i32>,
    },
    Create {
        path: String,
        data: Vec<u8>,
        ephemeral: bool,
    },
    Delete {
        path: String,
        version: Option<i32>,
    },
}

#[derive(Clone, Debug)]
pub struct Tree {
    nodes: BTreeMap<String, Znode>,
    /// The last transaction's zxid.
    pub zxid: i64,
}

fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

fn stat_at(zxid: i64, owner: i64, len: usize) -> zk::Stat {
    zk::Stat {
        czxid: zxid,
        mzxid: zxid,
        pzxid: zxid,
        ctime: 0,
        mtime: 0,
        version: 0,
        cversion: 0,
        aversion: 0,
        ephemeral_owner: owner,
        data_length: len as i32,
        num_children: 0,
    }
}

impl Default for Tree {
    fn default() -> Tree {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            "/".to_string(),
            Znode {
                data: Vec::new(),
                stat: stat_at(0, 0, 0),
            },
        );
        Tree { nodes, zxid: 0 }
    }
}

impl Tree {
    pub fn get(&self, path: &str) -> Result<(Vec<u8>, zk::Stat), zk::Error> {
        self.nodes
            .get(path)
            .map(|z| (z.data.clone(), self.stat_of(path, z)))
            .ok_or(zk::Error::NoNode)
    }

    pub fn stat(&self, path: &str) -> Option<zk::Stat> {
        self.nodes.get(path).map(|z| self.stat_of(path, z))
    }

    pub fn data(&self, path: &str) -> Option<&[u8]> {
        self.nodes.get(path).map(|z| z.data.as_slice())
    }

    fn stat_of(&self, path: &str, z: &Znode) -> zk::Stat {
        zk::Stat {
            num_children: self.children_of(path).len() as i32,
            ..z.stat
        }
    }

    fn children_of(&self, path: &str) -> Vec<String> {
        let prefix = if path == "/" {
            "/".to_string()
        } else {
            format!("{path}/")
        };
        self.nodes
            .range(prefix.clone()..)
            .take_while(|(p, _)| p.starts_with(&prefix))
            .filter(|(p, _)| p.len() > prefix.len() && !p[prefix.len()..].contains('/'))
            .map(|(p, _)| p[prefix.len()..].to_string())
            .collect()
    }

    pub fn children(&self, path: &str) -> Result<Vec<String>, zk::Error> {
        if !self.nodes.contains_key(path) {
            return Err(zk::Error::NoNode);
        }
        Ok(self.children_of(path))
    }

    /// Every znode whose path starts with `prefix`, with its data.
    pub fn under(&self, prefix: &str) -> Vec<(String, Vec<u8>, zk::Stat)> {
        self.nodes
            .range(prefix.to_string()..)
            .take_while(|(p, _)| p.starts_with(prefix))
            .map(|(p, z)| (p.clone(), z.data.clone(), self.stat_of(p, z)))
            .collect()
    }

    /// One write transaction: `ops` all applied under one new zxid, or none (the index of
    /// the first that failed, and why). `owner` owns the ephemerals it creates.
    pub fn apply(
        &mut self,
        ops: &[TreeOp],
        owner: i64,
    ) -> Result<(Vec<zk::MultiWriteResult>, Fired), (usize, zk::Error)> {
        let mut next = self.clone();
        next.zxid += 1;
        let zxid = next.zxid;
        let mut results = Vec::new();
        let mut fired = Fired::new();
        for (i, op) in ops.iter().enumerate() {
            let r = next.one(op, owner, zxid, &mut fired).map_err(|e| (i, e))?;
            results.push(r);
        }
        *self = next;
        Ok((results, fired))
    }

    fn one(
        &mut self,
        op: &TreeOp,
        owner: i64,
        zxid: i64,
        fired: &mut Fired,
    ) -> Result<zk::MultiWriteResult, zk::Error> {
        let version_ok =
            |z: &Znode, v: Option<i32>| v.is_none_or(|v| v == -1 || v == z.stat.version);
        match op {
            TreeOp::Check { path, version } => {
                let z = self.nodes.get(path).ok_or(zk::Error::NoNode)?;
                if !version_ok(z, Some(*version)) {
                    return Err(zk::Error::BadVersion);
                }
                Ok(zk::MultiWriteResult::Check)
            }
            TreeOp::SetData {
                path,
                data,
                version,
            } => {
                let z = self.nodes.get_mut(path).ok_or(zk::Error::NoNode)?;
                if !version_ok(z, *version) {
                    return Err(zk::Error::BadVersion);
                }
                z.data = data.clone();
                z.stat.version = z.stat.version.wrapping_add(1);
                z.stat.mzxid = zxid;
                z.stat.data_length = data.len() as i32;
                fired.push((path.clone(), zk::EventType::NodeDataChanged));
                Ok(zk::MultiWriteResult::SetData {
                    stat: self.stat_of(path, &self.nodes[path]),
                })
            }
            TreeOp::Create {
                path,
                data,
                ephemeral,
            } => {
                if self.nodes.contains_key(path) {
                    return Err(zk::Error::NodeExists);
                }
                let p = parent(path);
                let pz = self.nodes.get_mut(p).ok_or(zk::Error::NoNode)?;
                if pz.stat.ephemeral_owner != 0 {
                    return Err(zk::Error::NoChildrenForEphemerals);
                }
                pz.stat.cversion += 1;
                pz.stat.pzxid = zxid;
                let stat = stat_at(zxid, if *ephemeral { owner } else { 0 }, data.len());
                self.nodes.insert(
                    path.clone(),
                    Znode {
                        data: data.clone(),
                        stat,
                    },
                );
                fired.push((path.clone(), zk::EventType::NodeCreated));
                Ok(zk::MultiWriteResult::Create {
                    path: path.clone(),
                    stat,
                })
            }
            TreeOp::Delete { path, version } => {
                let z = self.nodes.get(path).ok_or(zk::Error::NoNode)?;
                if !version_ok(z, *version) {
                    return Err(zk::Error::BadVersion);
                }
                if !self.children_of(path).is_empty() {
                    return Err(zk::Error::NotEmpty);
                }
                self.nodes.remove(path);
                if let Some(pz) = self.nodes.get_mut(parent(path)) {
                    pz.stat.cversion += 1;
                    pz.stat.pzxid = zxid;
                }
                fired.push((path.clone(), zk::EventType::NodeDeleted));
                Ok(zk::MultiWriteResult::Delete)
            }
        }
    }

    /// The session `owner` ended: its ephemerals go, in one transaction (as ZooKeeper's
    /// `closeSession`). The paths deleted.
    pub fn end_session(&mut self, owner: i64) -> Fired {
        let doomed: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, z)| z.stat.ephemeral_owner == owner && owner != 0)
            .map(|(p, _)| p.clone())
            .collect();
        if doomed.is_empty() {
            return Fired::new();
        }
        let ops: Vec<TreeOp> = doomed
            .into_iter()
            .map(|path| TreeOp::Delete {
                path,
                version: None,
            })
            .collect();
        self.apply(&ops, owner).map(|(_, f)| f).unwrap_or_default()
    }

    /// The owners of the ephemerals in the tree.
    pub fn ephemeral_owners(&self) -> Vec<i64> {
        let mut v: Vec<i64> = self
            .nodes
            .values()
            .map(|z| z.stat.ephemeral_owner)
            .filter(|o| *o != 0)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}
