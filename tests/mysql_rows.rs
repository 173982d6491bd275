//! The MySQL backend's tables in memory (`sim/tables.rs`) against a real MariaDB (issue 32
//! point 3): the backend's deciding transactions (`warden::coord::mysql::decide`: take the
//! lock, commit, renew, register) run on both, the server's through the backend's own
//! sessions, the tables' directly, in the same order with the same records; every answer
//! must be the same, and so must the rows after each step (their times aside: the server
//! keeps its own clock). What the simulation concludes from the tables holds only as far as
//! they answer as the server does.

mod common;
#[path = "sim/tables.rs"]
mod tables;

use common::mariadb::MariaDb;
use common::*;
use futures_util::FutureExt;
use std::collections::BTreeMap;
use std::sync::Mutex;
use tables::{Rowset, Tables, Tx};
use warden::coord::any::{AnyConnector, AnySession};
use warden::coord::mysql::decide::{self, Memory, ServerRun, StuckLock, Taking};
use warden::coord::{Connector, Session, StoreError};
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
    real: Vec<AnySession>,
    tables: Tables,
    memory: Vec<Remembered>,
    server: ServerRun,
    step: usize,
}

impl Both<'_> {
    fn id(&self, s: usize) -> i64 {
        self.real[s].id().0
    }

    fn sql(&self, q: &str) -> String {
        self.db.sql(&q.replace("{c}", &self.cluster))
    }

    /// The server's rows as [`Rowset`] (blobs read as hex).
    fn server_rows(&self) -> Rowset {
        let unhex = |h: &str| -> Vec<u8> {
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("hex"))
                .collect()
        };
        let rows = |q: &str| -> Vec<Vec<String>> {
            self.sql(q)
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
        let kv =
            rows("SELECT name, HEX(value), version FROM warden.warden_kv WHERE cluster = '{c}'")
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

#[test]
fn the_tables_in_memory_decide_as_mariadb_does() {
    let db = MariaDb::start();
    let mut cluster = Cluster::with_mysql(&db);
    cluster.session_timeout = std::time::Duration::from_micros(TIMEOUT_US as u64);
    cluster.use_mysql(&db);
    let init = cluster.node("init");
    let out = cli(&init.config, &["init"]);
    assert!(out.status.success(), "warden init: {}", describe(&out));
    let cfg = warden::config::load(&init.config).expect("the config");
    tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(async {
            let connector = AnyConnector::from_config(&cfg).expect("a connector");
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
}
