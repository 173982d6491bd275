//! The simulated store as MySQL (issue 32 point 3): the sessions are the backend's own
//! `warden::coord::mysql::MysqlSession`, everything it decides (the deciding transactions
//! of `decide.rs` and the rest of `mysql.rs`: the keepalive, the reads, the
//! compare-and-set writes, `init`), over a simulated wire ([`SimSql`]) whose transactions
//! run on the tables in memory of `tables.rs` (held to a real MariaDB by
//! `tests/mysql_rows.rs`). Only the wire is simulated: what a request meets on its way is
//! the store model's (`State::request`: latency, loss, a cut link, a store that is down, a
//! frozen or dead client, slow replies), and each transaction is applied as a whole when
//! it arrives, as if alone (what InnoDB's row locks give). `NOW(6)` is the store's clock
//! (`State::expiry_clock`: drifting, stepped forward and back); a forgetting store restores
//! its rows and restarts (a new start time, which the sessions compare with the run they
//! registered on).
//!
//! What the invariants need comes out of the rows' changes as the model's facts: the lock's
//! holder changing (taken, released, replaced; its row expiring on the store's clock), the
//! breadcrumb changing (a commit, a rewrite, a delete), and the holder's acknowledged
//! renewals and commits (which start the lease the checker holds it to).
//!
//! Outside the seam: the SQL text of each statement (held to the tables by
//! `tests/mysql_rows.rs`), `mysql_async`'s pool and connections, the DDL (the tables always
//! exist here: a wiped store keeps them empty), and row-lock waits (a transaction is never
//! interleaved with another, so none waits, and none holds a lock while its client is
//! frozen).

use super::tables::{Never, Tables, Tx};
use super::{Fact, Inc, Job, SimStore, Snap, State};
use futures_util::FutureExt;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use warden::coord::mysql::decide::{Rows, ServerRun};
use warden::coord::mysql::{MysqlSession, Wire, Work};
use warden::coord::{ClusterSnapshot, StoreError};
use warden::record::{self, Control, Epoch, MemberRecord, NodeRecord, RecordError};

const PREFIX: &str = "warden_";
const CLUSTER: &str = "sim";
/// The server's identity (`@@hostname:@@port:@@server_id`): one server, restarted.
const SERVER_ID: &str = "sim:3306:1";

/// The store's MySQL side.
#[derive(Default)]
pub(super) struct MysqlSide {
    pub(super) tables: Tables,
    /// The server's run: its start time moves at every restart.
    server: Option<ServerRun>,
    /// Each session's run as its first registration read it (`decide::register`).
    registered: BTreeMap<i64, ServerRun>,
    /// When each session first read `control` since it last took the lock (for
    /// [`Fact::Commit`]: the control the committer decided on).
    read_at: BTreeMap<i64, Instant>,
    /// The expired lock row already reported gone: its session and version.
    expired: Option<(i64, i64)>,
}

impl State {
    /// `NOW(6)`: the store's clock, µs.
    fn sql_now(&self, now: Instant) -> i64 {
        self.expiry_clock(now).as_micros().min(i64::MAX as u128) as i64
    }

    /// The sessions' timeout, µs: what a member row lives without a touch.
    fn sql_exp(&self) -> i64 {
        self.cfg.granted.as_micros() as i64
    }

    fn sql_owner(&self, session: i64) -> Option<Inc> {
        self.sessions.get(&session).map(|s| s.owner)
    }

    fn sql_server(&self) -> ServerRun {
        self.mysql.server.clone().expect("started by mysql_init")
    }

    /// A new run of the server, started now on its clock.
    fn sql_restart(&mut self, now: Instant) {
        self.mysql.server = Some(ServerRun {
            id: SERVER_ID.into(),
            started: Some(self.sql_now(now).div_euclid(1_000_000)),
        });
    }

    /// A transaction on the tables as they are now (reads of what a harness looks at).
    fn sql_read<T>(&self, now: Instant, f: impl FnOnce(&mut Tx) -> T) -> T {
        let mut tx = Tx::begin(
            &self.mysql.tables,
            self.sql_now(now),
            self.sql_exp(),
            &self.sql_server(),
        );
        f(&mut tx)
    }

    /// What `warden init` leaves: the counter at 0 and the marker.
    pub(super) fn mysql_init(&mut self, now: Instant) {
        self.sql_restart(now);
        let t = &mut self.mysql.tables;
        t.counter = Some(0);
        t.kv.insert("init".into(), (b"{}".to_vec(), 0));
    }

    /// A live lock row whose expiry passed on the store's clock is gone: a fact, once.
    pub(super) fn mysql_sweep(&mut self, now: Instant) {
        let clock = self.sql_now(now);
        let exp = self.sql_exp();
        let Some(l) = &self.mysql.tables.lock else {
            return;
        };
        let key = (l.session, l.version);
        if l.expires_at.unwrap_or(l.renewed_at + exp) >= clock || self.mysql.expired == Some(key) {
            return;
        }
        self.mysql.expired = Some(key);
        self.lock_gone(self.sql_owner(key.0), true, now);
    }

    /// The lock's live holder: its session and epoch.
    fn sql_lock(&self, now: Instant) -> Option<(i64, Epoch)> {
        let l = self.mysql.tables.lock.as_ref()?;
        let live = l.expires_at.unwrap_or(l.renewed_at + self.sql_exp()) >= self.sql_now(now);
        live.then_some((l.session, l.epoch))
    }

    /// One transaction `f` of session `sid` (of `owner`, sent at `sent`), applied at
    /// `now`, and the facts it makes.
    #[allow(clippy::too_many_arguments)]
    fn mysql_tx<T, F>(
        &mut self,
        sid: i64,
        owner: Inc,
        sent: Instant,
        doing: &str,
        exp: i64,
        f: F,
        now: Instant,
    ) -> T
    where
        F: for<'c> FnOnce(&'c mut Tx) -> Work<'c, T, Never>,
    {
        let server = self.sql_server();
        if doing == "registering this node" {
            self.mysql.registered.entry(sid).or_insert(server.clone());
        }
        let mut tx = Tx::begin(&self.mysql.tables, self.sql_now(now), exp, &server);
        let (out, keep) = match f(&mut tx)
            .now_or_never()
            .expect("a transaction on the tables never waits")
        {
            Ok(done) => done,
            Err(never) => match never {},
        };
        if tx.read("control") {
            self.mysql.read_at.entry(sid).or_insert(now);
        }
        if !keep {
            return out;
        }
        let before = self.mysql.tables.clone();
        let lock0 = self.sql_lock(now);
        tx.finish(true, &mut self.mysql.tables);
        if self.mysql.tables == before {
            return out;
        }
        self.zxid += 1;
        self.changed = true;
        let lock1 = self.sql_lock(now);
        let row0 = before.lock.as_ref().map(|l| l.session);
        let row1 = self.mysql.tables.lock.as_ref().map(|l| l.session);
        // A holder that renewed its row after it expired (nobody took it meanwhile) holds
        // it again.
        let revived = row0 == row1 && lock0.is_none();
        if row0 != row1 {
            let gone = lock0.and_then(|(s, _)| self.sql_owner(s));
            self.lock_gone(gone, false, now);
        }
        if row0 != row1 || revived {
            if let Some((s, epoch)) = lock1 {
                if !revived {
                    self.mysql.read_at.remove(&s);
                }
                self.lock_taken(self.sql_owner(s), epoch, now);
            }
        }
        let crumb0 = before.kv.get("breadcrumb").map(|(d, _)| d.clone());
        let crumb1 = self
            .mysql
            .tables
            .kv
            .get("breadcrumb")
            .map(|(d, _)| d.clone());
        let crumbs = (crumb0.as_deref(), crumb1.as_deref());
        match doing {
            "committing the promotion" => {
                let (control, read_at) =
                    (self.sql_control(), self.mysql.read_at.get(&sid).copied());
                self.committed(owner, crumbs, control, read_at, now);
                self.renewed(owner, sent, now);
            }
            "renewing the lease" => self.renewed(owner, sent, now),
            "taking the lock" if lock1.map(|l| l.0) != Some(sid) => {
                // (`decide::take_lock`: a refusal for a restart commits the raised floor.)
                let then = self.mysql.registered.get(&sid);
                if then.is_none_or(|then| server.other_than(then)) {
                    self.facts.push(Fact::RefusedRestarted {
                        node: owner.0,
                        inc: owner.1,
                        at: now,
                    });
                }
            }
            _ if crumb0 != crumb1 => {
                let recorded =
                    doing == "recording the service" || doing == "restoring the breadcrumb";
                self.crumb_changed(owner, crumbs, recorded, now);
            }
            _ => {}
        }
        out
    }

    /// The store comes back from `snap`, restarted: its rows as they were then.
    pub(super) fn mysql_restore(&mut self, snap: Snap, now: Instant) {
        let before = self.sql_lock(now);
        self.mysql.tables = snap.tables;
        let after = self.sql_lock(now);
        let gone = before
            .filter(|b| Some(*b) != after)
            .and_then(|(s, _)| self.sql_owner(s));
        self.lock_gone(gone, true, now);
        self.zxid = snap.zxid;
        self.sql_restart(now);
        if let Some(q) = &mut self.snapshots {
            while q.len() > 1 && q.back().is_some_and(|s| s.zxid > self.zxid) {
                q.pop_back();
            }
        }
        self.mysql_sweep(now);
        self.changed = true;
    }

    /// What a restore to `snap` forgets, in words.
    pub(super) fn mysql_forgotten(&self, snap: &Snap, now: Instant) -> String {
        let floor = |t: &Tables| {
            Tx::begin(t, self.sql_now(now), self.sql_exp(), &self.sql_server())
                .floor(false)
                .now_or_never()
                .and_then(|r| r.ok())
                .flatten()
        };
        format!(
            "zxid {} -> {}, counter {:?} -> {:?}, floor {:?} -> {:?}",
            self.zxid,
            snap.zxid,
            self.mysql.tables.counter,
            snap.tables.counter,
            floor(&self.mysql.tables),
            floor(&snap.tables),
        )
    }

    fn sql_control(&self) -> Control {
        self.mysql
            .tables
            .kv
            .get("control")
            .and_then(|(d, _)| record::parse(d).ok())
            .unwrap_or_default()
    }

    pub(super) fn mysql_control(&self) -> Control {
        self.sql_control()
    }

    /// The operator replaces control (`warden pause`, `failover`): the next version.
    pub(super) fn mysql_set_control(&mut self, control: Control) {
        let kv = &mut self.mysql.tables.kv;
        let version = kv.get("control").map_or(0, |(_, v)| v + 1);
        kv.insert("control".into(), (record::to_bytes(&control), version));
        self.zxid += 1;
        self.changed = true;
    }

    /// `fence --confirm`: the breadcrumb goes, and history says so.
    pub(super) fn mysql_confirm_fenced(&mut self, now: Instant) {
        let Some((data, _)) = self.mysql.tables.kv.remove("breadcrumb") else {
            return;
        };
        self.zxid += 1;
        self.changed = true;
        let Some(record) = record::parse::<NodeRecord>(&data).ok() else {
            return;
        };
        // As `warden fence --confirm` records it (src/ops/fence.rs).
        let kv = &mut self.mysql.tables.kv;
        let (mut values, version) = match kv.get("history") {
            Some((d, v)) => (record::parse_history_values(d).unwrap_or_default(), v + 1),
            None => (Vec::new(), 0),
        };
        let entry = super::confirmed_entry(&record);
        values.insert(0, serde_json::to_value(&entry).expect("an entry"));
        kv.insert("history".into(), (record::history_bytes(&values), version));
        self.facts.push(Fact::BreadcrumbDeleted {
            by: None,
            record,
            at: now,
        });
    }

    pub(super) fn mysql_breadcrumb(&self) -> Option<Result<NodeRecord, RecordError>> {
        let (d, _) = self.mysql.tables.kv.get("breadcrumb")?;
        Some(record::parse::<NodeRecord>(d))
    }

    pub(super) fn mysql_lock_holder(&self, now: Instant) -> Option<(usize, u32, Epoch)> {
        let (s, epoch) = self.sql_lock(now)?;
        let o = self.sql_owner(s)?;
        Some((o.0, o.1, epoch))
    }

    pub(super) fn mysql_members(&self, now: Instant) -> BTreeMap<String, MemberRecord> {
        let live = self.sql_read(now, |tx| tx.live_members().now_or_never());
        live.and_then(|r| r.ok())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(id, _, data)| Some((id, record::parse(&data).ok()?)))
            .collect()
    }

    pub(super) fn mysql_floor_max(&self, now: Instant) -> Option<Epoch> {
        self.sql_read(now, |tx| tx.floor(false).now_or_never())
            .and_then(|r| r.ok())
            .flatten()
            .map(|(e, _)| e)
    }

    /// What `status` reads of a store that lost data.
    pub(super) fn mysql_snapshot(&self, now: Instant) -> ClusterSnapshot {
        let t = &self.mysql.tables;
        let counter = t.counter.filter(|c| *c < warden::coord::MAX_KEPT_EPOCH);
        ClusterSnapshot {
            marker_missing: !t.kv.contains_key("init") || counter.is_none(),
            epoch_counter: counter,
            counter_unreadable: t.counter.is_some() && counter.is_none(),
            kept_floor: self
                .sql_read(now, |tx| tx.floor(false).now_or_never())
                .and_then(|r| r.ok())
                .flatten(),
            ..ClusterSnapshot::default()
        }
    }
}

/// One session's connection to the simulated server; clones share it.
#[derive(Clone)]
pub struct SimSql {
    h: Arc<SqlHandle>,
}

struct SqlHandle {
    store: SimStore,
    sid: i64,
    owner: Inc,
    wire: mpsc::UnboundedSender<Job>,
    /// The session's timeout, µs.
    exp: i64,
}

impl Wire for SimSql {
    type Conn = Tx;
    type Error = Never;

    /// Sends the transaction and waits for its answer: forever when the request or its
    /// reply is lost, the link is cut or the store is down (the backend's operation
    /// timeout ends the wait: an unknown outcome, as on a real connection that goes
    /// silent).
    async fn transact<T, F>(&self, doing: &str, f: F) -> Result<T, Never>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut Tx) -> Work<'c, T, Never> + Send + 'static,
    {
        let h = &*self.h;
        let (sid, owner, exp) = (h.sid, h.owner, h.exp);
        h.store.gate(owner).await;
        let sent = Instant::now();
        let doing = doing.to_string();
        let (job, reply) = h.store.with(|st, now| {
            st.request(sid, now, move |st, now| {
                st.mysql_tx(sid, owner, sent, &doing, exp, f, now)
            })
        });
        if let Some(job) = job {
            let _ = h.wire.send(job);
        }
        let out = h.store.delivered(owner, reply).await;
        h.store.gate(owner).await;
        Ok(out)
    }

    fn classify(e: Never, _doing: &str) -> StoreError {
        match e {}
    }

    /// The tables always exist here.
    async fn create_tables(&self, _bound: Duration) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Opens a `MysqlSession` of `owner` on a connection of its own: the connector's probe
/// (an empty transaction within the connect timeout), then the session and its keepalive,
/// with the connection's number as the session id (deterministic, unlike the connector's
/// random one).
pub(super) async fn connect(
    store: &SimStore,
    owner: Inc,
) -> Result<MysqlSession<SimSql>, StoreError> {
    store.gate(owner).await;
    let (sid, cfg) = store.raw_connection(owner);
    let settings = super::backend_settings(&cfg, "mysql://warden@sim:3306/warden", PREFIX, CLUSTER);
    let wire = SimSql {
        h: Arc::new(SqlHandle {
            store: store.clone(),
            sid,
            owner,
            wire: super::spawn_wire(store.clone()),
            exp: cfg.granted.as_micros() as i64,
        }),
    };
    let probe = wire.transact("connecting", |_| {
        warden::coord::mysql::work(async { Ok(((), false)) })
    });
    if tokio::time::timeout(cfg.op_timeout, probe).await.is_err() {
        store.gate(owner).await;
        return Err(StoreError::Unreachable {
            store: "MySQL",
            key: "coordination.mysql.url",
            connect: settings.url,
            timeout: humantime::format_duration(cfg.op_timeout).to_string(),
            reason: "no answer".into(),
        });
    }
    let session = MysqlSession::open(wire, Arc::new(settings), sid);
    store.gate(owner).await;
    Ok(session)
}
