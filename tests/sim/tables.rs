//! The MySQL backend's tables in memory (issue 32 point 3): what the backend's deciding
//! transactions (`warden::coord::mysql::decide`: take the lock, commit, renew, register)
//! run on outside a server, one statement per [`Rows`] method, as `mysql.rs`'s `SqlRows`
//! runs them on one. `tests/mysql_rows.rs` holds these tables to a real MariaDB step by
//! step: the same transactions, the same answers, the same rows after.
//!
//! A transaction works on a copy of the tables ([`Tx::begin`]) and puts it back only when
//! it commits ([`Tx::finish`]): applied at once, as if alone, which is what InnoDB's row
//! locks give the real ones. Times are microseconds on the server's clock (`NOW(6)`),
//! which the caller gives: the simulation's store clock, drifting and stepped.

use std::collections::BTreeMap;
use warden::coord::mysql::decide::{LiveMember, LockRow, MemberRow, Rows, ServerRun};
use warden::coord::mysql::kept_seen;
use warden::record::{self, Epoch, MemberRecord};

/// The row of `<prefix>lock`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lock {
    pub session: i64,
    pub record: Vec<u8>,
    pub epoch: Epoch,
    pub version: i64,
    pub renewed_at: i64,
    /// `None`: a row of an older warden, which expires a reader's session timeout after
    /// `renewed_at`.
    pub expires_at: Option<i64>,
}

/// A row of `<prefix>member`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub session: i64,
    pub record: Vec<u8>,
    pub renewed_at: i64,
}

/// One cluster's rows of the four tables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tables {
    pub lock: Option<Lock>,
    /// `<prefix>epoch`.
    pub counter: Option<u64>,
    pub members: BTreeMap<String, Member>,
    /// `<prefix>kv`: value and version by name.
    pub kv: BTreeMap<String, (Vec<u8>, i64)>,
}

/// The rows without their times, for comparing with a server's (whose clock is its own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rowset {
    /// session, record, epoch, version.
    pub lock: Option<(i64, Vec<u8>, Epoch, i64)>,
    pub counter: Option<u64>,
    /// node: session, record.
    pub members: BTreeMap<String, (i64, Vec<u8>)>,
    pub kv: BTreeMap<String, (Vec<u8>, i64)>,
}

impl Tables {
    pub fn rowset(&self) -> Rowset {
        Rowset {
            lock: self
                .lock
                .as_ref()
                .map(|l| (l.session, l.record.clone(), l.epoch, l.version)),
            counter: self.counter,
            members: self
                .members
                .iter()
                .map(|(n, m)| (n.clone(), (m.session, m.record.clone())))
                .collect(),
            kv: self.kv.clone(),
        }
    }
}

/// `mysql.rs` NEXT_VERSION: one more, back to 0 at 2^53 - 1 (or from a negative value).
fn next_version(v: i64) -> i64 {
    if (0..9_007_199_254_740_991).contains(&v) {
        v + 1
    } else {
        0
    }
}

/// The name of `node`'s row of the floor in kv.
fn seen_row(node: &str) -> String {
    format!("seen/{node}")
}

/// One transaction on a copy of the tables.
pub struct Tx {
    work: Tables,
    /// The server's clock, µs.
    now: i64,
    /// The session's timeout, µs.
    exp: i64,
    server: ServerRun,
    /// The kv rows it read.
    reads: std::collections::BTreeSet<String>,
}

impl Tx {
    pub fn begin(tables: &Tables, now: i64, exp: i64, server: &ServerRun) -> Tx {
        Tx {
            work: tables.clone(),
            now,
            exp,
            server: server.clone(),
            reads: Default::default(),
        }
    }

    /// Whether it read row `name` of the kv table.
    pub fn read(&self, name: &str) -> bool {
        self.reads.contains(name)
    }

    /// Commits (`keep`) into `tables`, or rolls back.
    pub fn finish(self, keep: bool, tables: &mut Tables) {
        if keep {
            *tables = self.work;
        }
    }

    /// When the lock row expires: `expires_at`, or `renewed_at` + the reader's timeout.
    fn lock_expiry(&self, l: &Lock) -> i64 {
        l.expires_at.unwrap_or(l.renewed_at + self.exp)
    }
}

/// Never fails: the tables answer every statement (a server's errors are the wire's).
#[derive(Debug)]
pub enum Never {}

impl Rows for Tx {
    type Error = Never;

    async fn member_session(&mut self, node: &str) -> Result<Option<i64>, Never> {
        Ok(self.work.members.get(node).map(|m| m.session))
    }

    async fn member(&mut self, node: &str, _locked: bool) -> Result<Option<MemberRow>, Never> {
        Ok(self.work.members.get(node).map(|m| MemberRow {
            session: m.session,
            expired: m.renewed_at < self.now - self.exp,
            record: m.record.clone(),
        }))
    }

    async fn replace_member(
        &mut self,
        node: &str,
        session: i64,
        record: &[u8],
    ) -> Result<(), Never> {
        self.work.members.insert(
            node.to_string(),
            Member {
                session,
                record: record.to_vec(),
                renewed_at: self.now,
            },
        );
        Ok(())
    }

    async fn live_members(&mut self) -> Result<Vec<LiveMember>, Never> {
        Ok(self
            .work
            .members
            .iter()
            .filter(|(_, m)| m.renewed_at >= self.now - self.exp)
            .map(|(n, m)| (n.clone(), m.session, m.record.clone()))
            .collect())
    }

    async fn delete_member(&mut self, node: &str) -> Result<(), Never> {
        self.work.members.remove(node);
        Ok(())
    }

    async fn renew_member(
        &mut self,
        node: &str,
        session: i64,
        record: Option<&[u8]>,
    ) -> Result<bool, Never> {
        let now = self.now;
        Ok(match self.work.members.get_mut(node) {
            Some(m) if m.session == session => {
                if let Some(record) = record {
                    m.record = record.to_vec();
                }
                m.renewed_at = now;
                true
            }
            _ => false,
        })
    }

    async fn lock_session(&mut self, _locked: bool) -> Result<Option<i64>, Never> {
        Ok(self.work.lock.as_ref().map(|l| l.session))
    }

    async fn delete_lock(&mut self, session: i64) -> Result<(), Never> {
        if self
            .work
            .lock
            .as_ref()
            .is_some_and(|l| l.session == session)
        {
            self.work.lock = None;
        }
        Ok(())
    }

    async fn lock(&mut self, _locked: bool) -> Result<Option<LockRow>, Never> {
        Ok(self.work.lock.as_ref().map(|l| {
            let expiry = self.lock_expiry(l);
            LockRow {
                session: l.session,
                record: l.record.clone(),
                epoch: l.epoch,
                expired: expiry < self.now,
                version: l.version,
                ahead_us: expiry - self.now,
                timeout_us: expiry - l.renewed_at,
            }
        }))
    }

    async fn renew_lock(&mut self, session: i64, record: Option<&[u8]>) -> Result<bool, Never> {
        let (now, exp) = (self.now, self.exp);
        let live = self
            .work
            .lock
            .as_ref()
            .is_some_and(|l| self.lock_expiry(l) >= self.now);
        Ok(match self.work.lock.as_mut() {
            Some(l) if l.session == session && live => {
                if let Some(r) = record {
                    l.record = r.to_vec();
                }
                l.version = next_version(l.version);
                l.renewed_at = now;
                l.expires_at = Some(now + exp);
                true
            }
            _ => false,
        })
    }

    async fn replace_lock(
        &mut self,
        session: i64,
        record: &[u8],
        epoch: Epoch,
    ) -> Result<(), Never> {
        self.work.lock = Some(Lock {
            session,
            record: record.to_vec(),
            epoch,
            version: 0,
            renewed_at: self.now,
            expires_at: Some(self.now + self.exp),
        });
        Ok(())
    }

    async fn counter(&mut self, _locked: bool) -> Result<Option<u64>, Never> {
        Ok(self.work.counter)
    }

    async fn init_counter(&mut self, floor: Option<Epoch>) -> Result<(), Never> {
        // `mysql.rs`: INSERT IGNORE at 0, then IF(epoch >= 2^53, floor, GREATEST(epoch,
        // floor)).
        let c = self.work.counter.get_or_insert(0);
        if let Some(floor) = floor {
            *c = if *c >= warden::coord::MAX_KEPT_EPOCH {
                floor
            } else {
                (*c).max(floor)
            };
        }
        Ok(())
    }

    async fn next_epoch(&mut self) -> Result<Epoch, Never> {
        // (Only with a counter: a join refuses without one. A server's LAST_INSERT_ID
        // would then be the connection's last, whatever it was.)
        let next = self.work.counter.map_or(0, |c| c + 1);
        if self.work.counter.is_some() {
            self.work.counter = Some(next);
        }
        Ok(next)
    }

    async fn marker(&mut self) -> Result<bool, Never> {
        Ok(self.work.kv.contains_key("init"))
    }

    async fn raise_seen(&mut self, node: &str, epoch: Epoch) -> Result<(), Never> {
        // `mysql.rs` raise_seen: INSERT ... ON DUPLICATE KEY UPDATE, the kept value when it
        // is 20 digits and not below the new one (compared as bytes), else the new one.
        let new = format!("{epoch:020}").into_bytes();
        match self.work.kv.get_mut(&seen_row(node)) {
            None => {
                self.work.kv.insert(seen_row(node), (new, 0));
            }
            Some((value, version)) => {
                let kept = value.len() == 20 && value.iter().all(u8::is_ascii_digit);
                *version = next_version(*version);
                if !(kept && *value >= new) {
                    *value = new;
                }
            }
        }
        Ok(())
    }

    async fn floor(&mut self, _locked: bool) -> Result<Option<(Epoch, String)>, Never> {
        let from_members = self.work.members.iter().filter_map(|(node, m)| {
            Some((
                record::parse::<MemberRecord>(&m.record)
                    .ok()?
                    .node
                    .epoch_seen?,
                node.clone(),
            ))
        });
        let from_rows = self.work.kv.iter().filter_map(|(name, (v, _))| {
            let node = name.strip_prefix("seen/")?.to_string();
            Some((kept_seen(v)?, node))
        });
        Ok(from_members
            .chain(from_rows)
            .filter(|(e, _)| *e < warden::coord::MAX_KEPT_EPOCH)
            .max())
    }

    async fn kv(&mut self, name: &str, _locked: bool) -> Result<Option<(Vec<u8>, i64)>, Never> {
        self.reads.insert(name.to_string());
        Ok(self.work.kv.get(name).cloned())
    }

    async fn insert_kv_ignore(&mut self, name: &str, data: &[u8]) -> Result<bool, Never> {
        if self.work.kv.contains_key(name) {
            return Ok(false);
        }
        self.work.kv.insert(name.to_string(), (data.to_vec(), 0));
        Ok(true)
    }

    async fn delete_kv(&mut self, name: &str, version: Option<i64>) -> Result<bool, Never> {
        match self.work.kv.get(name) {
            Some((_, v)) if version.is_none_or(|want| want == *v) => {
                self.work.kv.remove(name);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn kv_names(&mut self, prefix: &str) -> Result<Vec<String>, Never> {
        Ok(self
            .work
            .kv
            .keys()
            .filter(|n| n.starts_with(prefix))
            .cloned()
            .collect())
    }

    async fn write_kv(
        &mut self,
        name: &str,
        data: &[u8],
        version: Option<i64>,
    ) -> Result<bool, Never> {
        match version {
            Some(v) => match self.work.kv.get_mut(name) {
                Some((value, cur)) if *cur == v => {
                    *value = data.to_vec();
                    *cur = next_version(*cur);
                    Ok(true)
                }
                _ => Ok(false),
            },
            // (Every caller creates a row only after finding it absent: a server's
            // duplicate-key error never comes. Were it to, nothing is written.)
            None if self.work.kv.contains_key(name) => Ok(false),
            None => {
                self.work.kv.insert(name.to_string(), (data.to_vec(), 0));
                Ok(true)
            }
        }
    }

    async fn server_run(&mut self) -> Result<ServerRun, Never> {
        Ok(self.server.clone())
    }
}
