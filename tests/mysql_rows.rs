//! The MySQL backend's tables in memory (`sim/tables.rs`) against a real MariaDB (issue 32
//! point 3): the backend's deciding transactions (`warden::coord::mysql::decide`: take the
//! lock, commit, renew, register) run on both, the server's through the backend's own
//! sessions, the tables' directly, in the same order with the same records; every answer
//! must be the same, and so must the rows after each step (their times aside: the server
//! keeps its own clock). What the simulation concludes from the tables holds only as far as
//! they answer as the server does.

mod common;
#[path = "sim/tables.rs"]
#[allow(dead_code)]
mod tables;

use common::mariadb::MariaDb;
use common::*;
use futures_util::FutureExt;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tables::{Never, Rowset, Tables, Tx};
use warden::coord::mysql::decide::{self, Memory, ServerRun, StuckLock, Taking};
use warden::coord::mysql::MysqlConnector;
use warden::coord::mysql::{MysqlSession, Wire, Work};
use warden::coord::{Connector, Session, StoreError, StoreSettings};
use warden::record::{
    self, Epoch, Health, JoinOutcome, MemberRecord, NodeRecord, Role, WriteOutcome,
};

/// The session timeout of every session here: long, so that nothing expires unless a step
/// says so.
const TIMEOUT_US: i64 = 60_000_000;

fn member(id: &str, seen: Option<Epoch>) -> MemberRecord {
    let node = NodeRecord {
        node_id: id.to_string(),
        host: "127.0.0.1".to_string(),
        pid: 4242,
        incarnation: format!("inc-{id}"),
        epoch_seen: seen,
        ..Default::default()
    };
    MemberRecord::bare(node, Role::Standby, Health::Healthy)
}

/// What a session of the tables remembers (as `mysql.rs`'s `Inner` does).
#[derive(Default)]
struct Remembered {
    stuck: Mutex<Option<StuckLock>>,
    run: Mutex<Option<ServerRun>>,
}

/// Both sides: the server with its sessions, the tables with theirs.
struct Both<'a> {
    db: &'a MariaDb,
    cluster: String,
    real: Vec<MysqlSession>,
    tables: Tables,
    memory: Vec<Remembered>,
    server: ServerRun,
    step: usize,
}

/// The server's rows of `cluster` as [`Rowset`] (blobs read as hex).
fn server_rows(db: &MariaDb, cluster: &str) -> Rowset {
    let unhex = |h: &str| -> Vec<u8> {
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("hex"))
            .collect()
    };
    let rows = |q: &str| -> Vec<Vec<String>> {
        db.sql(&q.replace("{c}", cluster))
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect()
    };
    let lock = rows(
        "SELECT session, HEX(record), epoch, version FROM warden.warden_lock WHERE cluster \
         = '{c}'",
    )
    .first()
    .map(|r| {
        (
            r[0].parse().unwrap(),
            unhex(&r[1]),
            r[2].parse().unwrap(),
            r[3].parse().unwrap(),
        )
    });
    let counter = rows("SELECT epoch FROM warden.warden_epoch WHERE cluster = '{c}'")
        .first()
        .map(|r| r[0].parse().unwrap());
    let members = rows(
        "SELECT node_id, session, HEX(record) FROM warden.warden_member WHERE cluster = \
         '{c}'",
    )
    .into_iter()
    .map(|r| (r[0].clone(), (r[1].parse().unwrap(), unhex(&r[2]))))
    .collect();
    let kv = rows("SELECT name, HEX(value), version FROM warden.warden_kv WHERE cluster = '{c}'")
        .into_iter()
        .map(|r| (r[0].clone(), (unhex(&r[1]), r[2].parse().unwrap())))
        .collect();
    Rowset {
        lock,
        counter,
        members,
        kv,
    }
}

impl Both<'_> {
    fn id(&self, s: usize) -> i64 {
        self.real[s].id().0
    }

    fn sql(&self, q: &str) -> String {
        self.db.sql(&q.replace("{c}", &self.cluster))
    }

    fn server_rows(&self) -> Rowset {
        server_rows(self.db, &self.cluster)
    }

    /// After each step: the same rows on both sides.
    fn same_rows(&mut self, what: &str) {
        self.step += 1;
        let (server, mine) = (self.server_rows(), self.tables.rowset());
        assert_eq!(
            server, mine,
            "step {} ({what}): the tables' rows differ from the server's (left: server)",
            self.step
        );
    }

    fn tx(&self) -> Tx {
        Tx::begin(&self.tables, 0, TIMEOUT_US, &self.server)
    }

    fn memory(&self, s: usize) -> Memory<'_> {
        Memory {
            cluster: &self.cluster,
            lock_table: "`warden_lock`",
            epoch_table: "`warden_epoch`",
            stuck: &self.memory[s].stuck,
            run: &self.memory[s].run,
        }
    }

    async fn register(&mut self, s: usize, m: &MemberRecord) -> String {
        let real = match self.real[s].create_member(m).await {
            Ok(()) => "registered".to_string(),
            Err(StoreError::Rejected(_)) => "refused".to_string(),
            Err(e) => panic!("registering {}: {e}", m.node.node_id),
        };
        let mut tx = self.tx();
        let id = self.id(s);
        let done = decide::register(&mut tx, &self.memory(s), id, m, &record::to_bytes(m))
            .now_or_never()
            .expect("the tables answer at once")
            .unwrap();
        tx.finish(done, &mut self.tables);
        let mine = if done { "registered" } else { "refused" }.to_string();
        assert_eq!(
            real,
            mine,
            "step {}: registering session {s}",
            self.step + 1
        );
        self.same_rows(&format!("session {s} registers {}", m.node.node_id));
        real
    }

    async fn join(&mut self, s: usize, me: &MemberRecord) -> String {
        let real = match self.real[s].join(&me.node, 1).await {
            JoinOutcome::Held { epoch } => format!("held {epoch}"),
            JoinOutcome::Exists { epoch } => format!("another's, at {epoch:?}"),
            JoinOutcome::LostData(why) => format!("lost: {why}"),
            JoinOutcome::Unknown => "nothing (gone or restarted)".to_string(),
        };
        let mut tx = self.tx();
        let id = self.id(s);
        let (taking, keep) = decide::take_lock(
            &mut tx,
            &self.memory(s),
            id,
            &me.node,
            &record::to_bytes(&me.node),
        )
        .now_or_never()
        .expect("the tables answer at once")
        .unwrap();
        tx.finish(keep, &mut self.tables);
        let mine = match taking {
            Taking::Held(epoch) => format!("held {epoch}"),
            Taking::Other { epoch, .. } => format!("another's, at {epoch:?}"),
            Taking::Lost(why) => format!("lost: {why}"),
            Taking::Gone | Taking::Restarted => "nothing (gone or restarted)".to_string(),
        };
        assert_eq!(real, mine, "step {}: session {s} joins", self.step + 1);
        self.same_rows(&format!("session {s} joins as {}", me.node.node_id));
        real
    }

    async fn commit(
        &mut self,
        s: usize,
        me: &MemberRecord,
        epoch: Epoch,
        bv: Option<i64>,
    ) -> WriteOutcome {
        let rec = NodeRecord {
            epoch: Some(epoch),
            ..me.node.clone()
        };
        let cv = self.tables.kv.get("control").map_or(-1, |(_, v)| *v);
        let real = self.real[s]
            .commit_promotion(
                &rec,
                bv.map(warden::record::Version::new),
                warden::record::Version::new(cv),
            )
            .await;
        let mut tx = self.tx();
        let id = self.id(s);
        let done = decide::commit(&mut tx, id, &rec, cv, bv)
            .now_or_never()
            .expect("the tables answer at once")
            .unwrap();
        self.compare_write(
            tx,
            done,
            real,
            &format!("session {s} commits epoch {epoch}"),
        )
    }

    /// Ends a write's transaction on the tables, and holds its answer and the rows after
    /// it to the server's.
    fn compare_write(
        &mut self,
        tx: Tx,
        done: bool,
        real: WriteOutcome,
        what: &str,
    ) -> WriteOutcome {
        tx.finish(done, &mut self.tables);
        let mine = if done {
            WriteOutcome::Done
        } else {
            WriteOutcome::Conflict
        };
        assert_eq!(real, mine, "step {}: {what}", self.step + 1);
        self.same_rows(what);
        real
    }

    async fn renew(&mut self, s: usize, m: &MemberRecord) -> WriteOutcome {
        let real = self.real[s].renew(m).await;
        let mut tx = self.tx();
        let id = self.id(s);
        let done = decide::renew(&mut tx, id, m, &record::to_bytes(m))
            .now_or_never()
            .expect("the tables answer at once")
            .unwrap();
        self.compare_write(tx, done, real, &format!("session {s} renews"))
    }

    /// The lock row expired on both clocks.
    fn expire_lock(&mut self) {
        self.sql(
            "UPDATE warden.warden_lock SET expires_at = NOW(6) - INTERVAL 1 SECOND WHERE \
             cluster = '{c}'",
        );
        if let Some(l) = self.tables.lock.as_mut() {
            l.expires_at = Some(-1_000_000);
        }
    }

    /// `node`'s member row not touched for twice the session timeout, on both clocks.
    fn expire_member(&mut self, node: &str) {
        self.sql(&format!(
            "UPDATE warden.warden_member SET renewed_at = NOW(6) - INTERVAL 120 SECOND WHERE \
             cluster = '{{c}}' AND node_id = '{node}'"
        ));
        if let Some(m) = self.tables.members.get_mut(node) {
            m.renewed_at = -2 * TIMEOUT_US;
        }
    }

    fn set_counter(&mut self, epoch: u64) {
        self.sql(&format!(
            "UPDATE warden.warden_epoch SET epoch = {epoch} WHERE cluster = '{{c}}'"
        ));
        self.tables.counter = Some(epoch);
    }

    fn set_kv(&mut self, name: &str, value: &str, version: i64) {
        self.sql(&format!(
            "REPLACE INTO warden.warden_kv (cluster, name, value, version) VALUES ('{{c}}', \
             '{name}', '{value}', {version})"
        ));
        self.tables
            .kv
            .insert(name.to_string(), (value.as_bytes().to_vec(), version));
    }
}

/// A cluster on `db` whose sessions live [`TIMEOUT_US`], after `warden init`, and its
/// config.
fn initialized(db: &MariaDb) -> (Cluster, warden::config::Config) {
    let mut cluster = Cluster::with_mysql(db);
    cluster.session_timeout = std::time::Duration::from_micros(TIMEOUT_US as u64);
    cluster.use_mysql(db);
    let init = cluster.node("init");
    let out = cli(&init.config, &["init"]);
    assert!(out.status.success(), "warden init: {}", describe(&out));
    let cfg = warden::config::load(&init.config).expect("the config");
    (cluster, cfg)
}

#[test]
fn the_tables_in_memory_decide_as_mariadb_does() {
    let db = MariaDb::start();
    // Every statement must read the same under a server's HIGH_NOT_PRECEDENCE, where
    // `NOT a < b` is `(NOT a) < b` (the review of stop 44: an expired lock renewed).
    db.sql("SET GLOBAL sql_mode = CONCAT(@@GLOBAL.sql_mode, ',HIGH_NOT_PRECEDENCE')");
    let (cluster, cfg) = initialized(&db);
    tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(async {
            let connector =
                MysqlConnector::new(StoreSettings::from_config(&cfg).expect("the settings"))
                    .expect("a connector");
            let mut real = Vec::new();
            for _ in 0..3 {
                real.push(connector.connect().await.expect("a session"));
            }
            let mut both = Both {
                db: &db,
                cluster: cluster.name.clone(),
                real,
                tables: Tables::default(),
                memory: (0..3).map(|_| Remembered::default()).collect(),
                server: ServerRun {
                    id: "tables:3306:1".into(),
                    started: Some(0),
                },
                step: 0,
            };
            // What `warden init` left, as the tables' start.
            let rows = both.server_rows();
            both.tables = Tables {
                lock: None,
                counter: rows.counter,
                members: BTreeMap::new(),
                kv: rows.kv.clone(),
            };
            assert!(rows.lock.is_none() && rows.members.is_empty(), "{rows:?}");
            both.same_rows("after init");
            steps(&mut both).await;
        });
}

async fn steps(b: &mut Both<'_>) {
    let (n1, n2) = (member("n1", Some(3)), member("n2", None));
    // Registration: a second live session of n1 is refused.
    assert_eq!(b.register(1, &n2).await, "registered");
    assert_eq!(b.join(1, &n2).await, "held 1");
    assert_eq!(b.register(0, &n1).await, "registered");
    assert_eq!(b.register(2, &n1).await, "refused");
    assert_eq!(b.join(0, &n1).await, "another's, at None");
    // The floor (n1 saw 3) is above the holder's epoch: its commit is refused.
    b.set_kv("control", "{}", 0);
    assert_eq!(b.commit(1, &n2, 1, None).await, WriteOutcome::Conflict);
    // Its lock expired, n1 joins: the counter (1) is below the floor (3): lost data.
    b.expire_lock();
    assert!(b.join(0, &n1).await.starts_with("lost: "));
    // `init --force`'s counter: n1 takes the lock at 6 and commits; nobody else can.
    b.set_counter(5);
    assert_eq!(b.join(0, &n1).await, "held 6");
    assert_eq!(b.join(1, &n2).await, "another's, at None");
    assert_eq!(b.commit(1, &n2, 6, None).await, WriteOutcome::Conflict);
    assert_eq!(b.commit(0, &n1, 6, None).await, WriteOutcome::Done);
    assert_eq!(b.commit(0, &n1, 6, None).await, WriteOutcome::Conflict);
    assert_eq!(b.join(1, &n2).await, "another's, at Some(6)");
    assert_eq!(b.renew(0, &n1).await, WriteOutcome::Done);
    assert_eq!(b.renew(1, &n2).await, WriteOutcome::Conflict);
    assert_eq!(b.join(0, &n1).await, "held 6");
    // n1's member row expires: another session of n1 registers, keeping what the row saw;
    // the first session is gone and takes nothing.
    b.expire_member("n1");
    let n1_again = member("n1", None);
    assert_eq!(b.register(2, &n1_again).await, "registered");
    b.expire_lock();
    assert_eq!(b.join(0, &n1).await, "nothing (gone or restarted)");
    assert_eq!(b.renew(0, &n1).await, WriteOutcome::Conflict);
    // A garbage entry of the floor is raised past; a garbage counter is lost data.
    b.set_kv("seen/n2", "junk", 7);
    assert_eq!(b.register(1, &member("n2", Some(4))).await, "registered");
    b.set_counter(9_007_199_254_740_993);
    assert!(b
        .join(1, &n2)
        .await
        .starts_with("lost: the store lost data: the epoch counter"));
    b.set_counter(6);
    assert_eq!(b.join(2, &n1_again).await, "held 7");
    assert_eq!(b.commit(2, &n1_again, 7, Some(0)).await, WriteOutcome::Done);
    assert_eq!(b.renew(2, &n1_again).await, WriteOutcome::Done);
    // The simulation's seed 507023: an expired lock row is gone, though it names this
    // very session: no renewal brings it back (the keepalive did, under a node of
    // priority 0 that had seen it go and never joined again: nobody else could take it),
    // and a join of that session takes it anew, at a new epoch.
    b.expire_lock();
    assert_eq!(b.renew(2, &n1_again).await, WriteOutcome::Conflict);
    assert_eq!(b.join(2, &n1_again).await, "held 8");
    assert_eq!(b.renew(2, &n1_again).await, WriteOutcome::Done);
}

/// The backend's whole session on the tables in memory: each transaction applied at
/// once, as if alone, on one server run.
#[derive(Clone)]
struct Mem {
    tables: Arc<Mutex<Tables>>,
    server: ServerRun,
}

impl Wire for Mem {
    type Conn = Tx;
    type Error = Never;

    async fn transact<T, F>(&self, _doing: &str, f: F) -> Result<T, Never>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut Tx) -> Work<'c, T, Never> + Send + 'static,
    {
        let mut tables = self.tables.lock().unwrap();
        let mut tx = Tx::begin(&tables, 0, TIMEOUT_US, &self.server);
        let (out, keep) = f(&mut tx)
            .now_or_never()
            .expect("the tables answer at once")?;
        tx.finish(keep, &mut tables);
        Ok(out)
    }

    fn classify(e: Never, _doing: &str) -> StoreError {
        match e {}
    }

    async fn create_tables(&self, _bound: std::time::Duration) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Issue 32 point 3: the backend's sessions (`MysqlSession`, all of `mysql.rs`: the
/// operations beside the deciding transactions too, release, publishing a member, the
/// compare-and-set writes of the breadcrumb and of control, `init --force`'s marker, the
/// snapshot) give the same answers on the tables in memory as on a real MariaDB, and
/// leave the same rows: one session of each on either side, with the same session ids,
/// step by step.
#[test]
fn the_backends_sessions_answer_on_the_tables_as_on_mariadb() {
    let db = MariaDb::start();
    let (cluster, cfg) = initialized(&db);
    let settings = Arc::new(StoreSettings::from_config(&cfg).expect("the settings"));
    let name = cluster.name.clone();
    tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(async {
            let connector =
                MysqlConnector::new(StoreSettings::from_config(&cfg).expect("the settings"))
                    .expect("a connector");
            let rows = server_rows(&db, &name);
            let mem = Mem {
                tables: Arc::new(Mutex::new(Tables {
                    lock: None,
                    counter: rows.counter,
                    members: BTreeMap::new(),
                    kv: rows.kv.clone(),
                })),
                server: ServerRun {
                    id: "tables:3306:1".into(),
                    started: Some(0),
                },
            };
            let mut real = Vec::new();
            let mut mine = Vec::new();
            for _ in 0..2 {
                let r = connector.connect().await.expect("a session");
                mine.push(MysqlSession::open(mem.clone(), settings.clone(), r.id().0));
                real.push(r);
            }
            let mut step = 0;
            let mut same = |what: &str, a: String, b: String| {
                step += 1;
                assert_eq!(
                    a, b,
                    "step {step} ({what}): the answers differ (left: server)"
                );
                let mine = mem.tables.lock().unwrap().rowset();
                assert_eq!(
                    server_rows(&db, &name),
                    mine,
                    "step {step} ({what}): the rows differ (left: server)"
                );
            };
            macro_rules! both {
                ($what:expr, $s:expr, |$x:ident| $call:expr) => {{
                    let a = {
                        let $x = &real[$s];
                        format!("{:?}", $call.await)
                    };
                    let b = {
                        let $x = &mine[$s];
                        format!("{:?}", $call.await)
                    };
                    eprintln!("{}: {a}", $what);
                    same($what, a.clone(), b);
                    a
                }};
            }
            let (n1, n2) = (member("n1", None), member("n2", None));
            both!("n1 registers", 0, |s| s.create_member(&n1));
            both!("n2 registers", 1, |s| s.create_member(&n2));
            both!("n1 joins", 0, |s| s.join(&n1.node, 1));
            both!("n2 pauses", 1, |s| s.update_control(|c| {
                c.paused = true;
                Ok(true)
            }));
            both!("n2 resumes", 1, |s| s.update_control(|c| {
                c.paused = false;
                Ok(true)
            }));
            both!("n1 reads the takeover state", 0, |s| s.read_state());
            let cv = real[0]
                .read_state()
                .await
                .expect("the state")
                .control_version;
            let crumb = NodeRecord {
                epoch: Some(1),
                ..n1.node.clone()
            };
            both!("n2 commits without the lock", 1, |s| s
                .commit_promotion(&crumb, None, cv));
            both!("n1 commits", 0, |s| s.commit_promotion(&crumb, None, cv));
            let n2_seen = member("n2", Some(1));
            both!("n2 publishes what it saw", 1, |s| s.set_member(&n2_seen));
            let served = NodeRecord {
                service_pid: Some(77),
                ..crumb.clone()
            };
            both!("n1 records its service", 0, |s| s
                .rewrite_own_breadcrumb(&served));
            both!("n2 records a service not its own", 1, |s| s
                .rewrite_own_breadcrumb(&served));
            both!("n1 renews", 0, |s| s.renew(&n1));
            both!("a member", 1, |s| s.member("n1"));
            both!("the breadcrumb", 1, |s| s.breadcrumb_bytes());
            both!("the snapshot", 1, |s| s.snapshot());
            let v = real[0]
                .breadcrumb_bytes()
                .await
                .expect("read")
                .expect("a breadcrumb")
                .1;
            both!("n2 deletes the breadcrumb under the lock", 1, |s| s
                .delete_breadcrumb_at(v, true));
            both!("n1 releases", 0, |s| s.release());
            both!("n2 deletes it, no lock needed", 1, |s| s
                .delete_breadcrumb_at(v, false));
            both!(
                "n2 restores an absent breadcrumb without the lock",
                1,
                |s| s.restore_breadcrumb(&crumb, None)
            );
            both!("n2 joins", 1, |s| s.join(&n2_seen.node, 2));
            both!("n2 restores an absent breadcrumb", 1, |s| s
                .restore_breadcrumb(&crumb, None));
            both!("init --force's marker, floor 9", 0, |s| s
                .write_marker(Some(9)));
            both!("the epoch", 0, |s| s.current_epoch());
            both!("n1's row goes", 0, |s| s.delete_member("n1"));
            both!("the takeover state goes", 0, |s| s
                .delete_takeover_state(None, Some(cv)));
            both!("the set-aside histories", 0, |s| s.set_aside());
        });
}
