//! The MySQL/MariaDB backend (SPEC §3a), on `mysql_async`.
//!
//! Tables, all keyed by cluster: `<prefix>lock` (the holder's session, record, epoch,
//! `renewed_at` and `expires_at`), `<prefix>epoch` (the counter, never deleted), `<prefix>member` (one row
//! per node: session, record, `renewed_at`) and `<prefix>kv` (breadcrumb, control,
//! history, the init marker, set-aside histories: data and a version).
//!
//! There is no session service: a session is a random id. Its member row and, while it
//! holds it, the lock row are touched every `session_timeout / 6` by a keepalive task;
//! a row not touched for `session_timeout` on the server's clock (`NOW(6)`, in UTC) is
//! gone (the lock row: the *holder's* `session_timeout`, which it writes as `expires_at`),
//! and the session that cannot touch its member row for `session_timeout` on its
//! own clock (or finds it gone) is lost. Only the elector's renewal, acknowledged, extends
//! the holder's lease (SPEC §4): the keepalive only keeps rivals out longer, the way
//! ZooKeeper's pings keep an ephemeral lock alive.
//!
//! Affected rows are read with `CLIENT_FOUND_ROWS` off (the driver's default): an `UPDATE`
//! that matched and changed one row says 1, so every conditional update also bumps a
//! version or a `DATETIME(6)`. A server error is a definite answer; anything else (a
//! broken connection, no answer within the operation timeout) is an unknown outcome,
//! resolved by reading the rows.

use super::items::{self, Items, BREADCRUMB, CONTROL, HISTORY, SET_ASIDE_PREFIX};
use super::polled::{self, Polled, Touched};
use super::{ClusterSnapshot, Connector, Item, Session, StoreError, StoreEvent, StoreSettings};
use crate::record::{
    self, Epoch, JoinOutcome, MemberRecord, NodeRecord, SessionId, TakeoverState, Version,
    WriteOutcome,
};
pub mod decide;
mod rows;
mod store;
pub use rows::*;

use decide::{
    stuck_lock_stale, LiveMember, LockRow, MemberRow, Rows, ServerRun, StuckLock, Taking,
};
use mysql_async::prelude::Queryable;
use mysql_async::{Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts, TxOpts};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The init marker's name in `<prefix>kv`.
const MARKER: &str = "init";

/// How long the server keeps a warden connection that says nothing (SPEC 3a), and how
/// long the pool reuses one that idled.
#[derive(Debug, Clone, Copy, PartialEq)]
struct SessionBounds {
    /// `wait_timeout`, whole seconds: the session timeout rounded down (at least 1 s,
    /// which the config's least session timeout allows).
    wait_timeout_s: usize,
    /// Half of `wait_timeout`: a connection idle longer is closed by the pool rather than
    /// handed out again, well before the server ends it.
    reuse_for: Duration,
}

impl SessionBounds {
    fn of(session_timeout: Duration) -> SessionBounds {
        let wait = session_timeout.as_secs().max(1);
        SessionBounds {
            wait_timeout_s: usize::try_from(wait).unwrap_or(usize::MAX),
            reuse_for: Duration::from_secs(wait) / 2,
        }
    }
}

/// SPEC 3a, "lock expiry is the holder's": the holder writes its own expiry with every
/// touch of the lock row, so that a reader with a shorter `session_timeout` (a rolling
/// change of the setting) never ends a lease that is still valid. Nullable: a warden of
/// an older version still writes the table (its rows have none), and a row without one
/// expires after the reader's own session timeout, as it did then.
const EXPIRES_AT_COLUMN: &str = "expires_at DATETIME(6) NULL";

/// What a write of the lock row by its holder sets; its parameter is the holder's
/// session timeout in microseconds.
const LOCK_RENEWED: &str = "renewed_at = NOW(6), expires_at = NOW(6) + INTERVAL ? MICROSECOND";

/// What every write of a row sets its `version` to: one more, back to 0 at 2^53 - 1 (or
/// from a negative value): a version near the top of BIGINT (an operator's edit, a
/// restore) made every `version + 1` fail with an out-of-range error, for good. A
/// compare-and-set that read the old version still sees a change.
const NEXT_VERSION: &str =
    "version = IF(version >= 0 AND version < 9007199254740991, version + 1, 0)";

/// Whether the lock row has expired, on the server's clock; its parameter is the reader's
/// session timeout in microseconds, for a row an older warden wrote without `expires_at`.
const LOCK_EXPIRED: &str = "COALESCE(expires_at, renewed_at + INTERVAL ? MICROSECOND) < NOW(6)";

/// Opens sessions on one cluster's rows. Sessions of one connector share a small pool.
#[derive(Clone)]
pub struct MysqlConnector {
    s: Arc<StoreSettings>,
    pool: Pool,
}

impl MysqlConnector {
    /// Fails only on a URL the driver cannot use (config validation catches those first).
    pub fn new(s: StoreSettings) -> Result<MysqlConnector, StoreError> {
        let opts = Opts::from_url(&s.url)
            .map_err(|e| StoreError::Rejected(format!("coordination.mysql.url: {e}")))?;
        let lock_wait = s.op_timeout().as_secs().max(1);
        let bounds = SessionBounds::of(s.session_timeout);
        // A connection goes back to the pool as it is: mysql_async would otherwise reset
        // it (COM_RESET_CONNECTION), which puts every session setting below back to the
        // server's default on its next use. warden leaves nothing else in a session (a
        // transaction it abandons is rolled back on the way back to the pool).
        let pool_opts = PoolOpts::default()
            .with_constraints(PoolConstraints::new(0, 4).expect("0 <= 4"))
            .with_inactive_connection_ttl(Duration::from_secs(60))
            .with_reset_connection(false);
        let opts = OptsBuilder::from_opts(opts)
            .pass(s.password.clone())
            .pool_opts(pool_opts)
            // The host of the URL, never a local server's socket: by default the driver
            // asks the server for its socket path and reconnects there when that path
            // exists here, which on a host running its own MySQL is another server.
            .prefer_socket(false)
            // The server ends a connection idle for `wait_timeout` (set below); one idle
            // for half of it is not handed out again, so no statement goes to a connection
            // the server is closing.
            .wait_timeout(Some(bounds.wait_timeout_s))
            .conn_ttl(Some(bounds.reuse_for))
            // `setup`, not `init`: run on every new connection and again after any reset,
            // so no statement runs without these settings (with `init` and the pool's
            // default reset, every reused connection wrote renewals in the server's own
            // time zone and waited on a frozen warden's rows for the server's 50 s).
            // UTC: a DATETIME has no zone, and a daylight-saving step of the server's
            // local time would age every row by an hour.
            .setup(vec![
                "SET time_zone = '+00:00'".to_string(),
                // SPEC 3a: a warden that vanishes inside one of its short transactions
                // (frozen, or its network cut between an UPDATE of the lock row and the
                // COMMIT) keeps its row locks while the server keeps its connection, and
                // every rival's statement on the lock row waits on it. The server ends an
                // idle connection after `wait_timeout` (8 h by default; TCP keepalive
                // notices a dead peer after 2 h), which rolls its transaction back and
                // frees the rows: at most the session timeout here, on MySQL and MariaDB.
                // MariaDB (10.3+) also ends a connection idle *in a transaction* sooner:
                // `/*M!100300 ... */` is run by MariaDB only, and sets all three of its
                // idle-transaction timeouts, since a server-wide read-only or write one
                // would override the general one. `lock_wait_timeout` bounds the wait of
                // `init`'s DDL on a table a frozen warden has open (the default is a year,
                // and every statement on the table queues behind a waiting ALTER).
                format!(
                    "SET SESSION innodb_lock_wait_timeout = {lock_wait}, lock_wait_timeout = \
                     {lock_wait}, wait_timeout = {wait} \
                     /*M!100300 , idle_transaction_timeout = {lock_wait}, \
                     idle_readonly_transaction_timeout = {lock_wait}, \
                     idle_write_transaction_timeout = {lock_wait} */",
                    wait = bounds.wait_timeout_s,
                ),
            ]);
        Ok(MysqlConnector {
            s: Arc::new(s),
            pool: Pool::new(opts),
        })
    }

    fn unreachable(&self, reason: String) -> StoreError {
        StoreError::Unreachable {
            store: "MySQL",
            key: "coordination.mysql.url",
            connect: self.s.url.clone(),
            timeout: humantime::format_duration(self.s.connect_timeout).to_string(),
            reason,
        }
    }
}

impl Connector for MysqlConnector {
    type Session = MysqlSession;

    async fn connect(&self) -> Result<MysqlSession, StoreError> {
        let probe = async {
            let mut conn = self.pool.get_conn().await?;
            conn.query_drop("SELECT 1").await
        };
        match tokio::time::timeout(self.s.connect_timeout, probe).await {
            Err(_) => return Err(self.unreachable("no answer".into())),
            Ok(Err(e)) => {
                return Err(match classify(e, "connecting") {
                    StoreError::Auth(why) => StoreError::Auth(why),
                    other => self.unreachable(other.to_string()),
                })
            }
            Ok(Ok(())) => {}
        }
        let wire = Server {
            pool: self.pool.clone(),
            c: Arc::new(Ctx {
                t: Tables::new(&self.s.prefix),
                cluster: self.s.cluster.clone(),
                exp: self.s.session_timeout.as_micros().min(i64::MAX as u128) as i64,
            }),
        };
        wire.upgrade_lock_table(&self.s).await?;
        Ok(MysqlSession::open(
            wire,
            self.s.clone(),
            super::random_session_id(),
        ))
    }
}

/// The table names of a prefix (validated by the config: `[A-Za-z0-9_]`).
#[derive(Clone, Debug)]
struct Tables {
    lock: String,
    epoch: String,
    member: String,
    kv: String,
}

impl Tables {
    fn new(prefix: &str) -> Tables {
        let t = |name: &str| format!("`{prefix}{name}`");
        Tables {
            lock: t("lock"),
            epoch: t("epoch"),
            member: t("member"),
            kv: t("kv"),
        }
    }

    fn ddl(&self) -> [String; 4] {
        let key = "VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL";
        [
            format!(
                "CREATE TABLE IF NOT EXISTS {} (cluster {key}, session BIGINT NOT NULL, \
                 record LONGBLOB NOT NULL, epoch BIGINT UNSIGNED NOT NULL, version BIGINT NOT \
                 NULL, renewed_at DATETIME(6) NOT NULL, {EXPIRES_AT_COLUMN}, PRIMARY KEY (cluster)) \
                 ENGINE=InnoDB",
                self.lock
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {} (cluster {key}, epoch BIGINT UNSIGNED NOT NULL, \
                 PRIMARY KEY (cluster)) ENGINE=InnoDB",
                self.epoch
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {} (cluster {key}, node_id {key}, session BIGINT NOT \
                 NULL, record LONGBLOB NOT NULL, renewed_at DATETIME(6) NOT NULL, PRIMARY KEY \
                 (cluster, node_id)) ENGINE=InnoDB",
                self.member
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {} (cluster {key}, name {key}, value LONGBLOB NOT \
                 NULL, version BIGINT NOT NULL, PRIMARY KEY (cluster, name)) ENGINE=InnoDB",
                self.kv
            ),
        ]
    }
}

/// The bound of a DDL statement batch: a table is created with fsyncs of its own and may
/// wait for a metadata lock, which takes longer than a third of a short session timeout on
/// a busy server (`warden init` failed so, "creating the tables got no answer within
/// 666ms"). Each statement is idempotent, and no lock or lease waits on it.
const DDL_TIMEOUT: Duration = Duration::from_secs(30);

/// A server error is a definite answer (the statement did not apply); everything else is
/// an unknown outcome. Lock waits and deadlocks are retried like unknown outcomes: a
/// renewal that waited on a rival's row lock has not lost the lock.
fn classify(e: mysql_async::Error, doing: &str) -> StoreError {
    match e {
        mysql_async::Error::Server(s) => match s.code {
            // Access denied, for the user, the database, a table or a command.
            1044 | 1045 | 1142 | 1143 | 1227 | 1698 => StoreError::Auth(format!(
                "MySQL refused {doing}: {} (check the user's grants and \
                 coordination.mysql.password_file)",
                s.message
            )),
            // Table doesn't exist.
            1146 => StoreError::NotInitialized(format!(
                "{doing}: {}; the tables are missing: run `warden init` (or `warden init \
                 --force` if this database lost them)",
                s.message
            )),
            1205 | 1213 => StoreError::Unknown(format!("{doing}: {}", s.message)),
            _ => StoreError::Rejected(format!("{doing}: MySQL error {}: {}", s.code, s.message)),
        },
        mysql_async::Error::Other(e) if e.is::<Garbage>() => {
            StoreError::Rejected(format!("{doing}: {e}"))
        }
        other => StoreError::Unknown(format!("{doing}: {other}")),
    }
}

/// A row that holds what warden never writes there, in words naming the table and every
/// column (the driver's own conversion panicked on it: issue 31).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Garbage(pub String);

/// The first row `sql` returns, as `T`; a row whose columns do not convert (a column whose
/// type was changed, a NULL) is a [`Garbage`] error instead of the driver's panic.
async fn first<T, Q, P>(q: &mut Q, sql: String, params: P) -> Result<Option<T>, mysql_async::Error>
where
    T: mysql_async::prelude::FromRow + Send + 'static,
    Q: Queryable,
    P: Into<mysql_async::Params> + Send,
{
    let row: Option<mysql_async::Row> = q.exec_first(sql.as_str(), params).await?;
    row.map(|r| typed(r, &sql)).transpose()
}

/// Every row `sql` returns, as `T`; see [`first`].
async fn all<T, Q, P>(q: &mut Q, sql: String, params: P) -> Result<Vec<T>, mysql_async::Error>
where
    T: mysql_async::prelude::FromRow + Send + 'static,
    Q: Queryable,
    P: Into<mysql_async::Params> + Send,
{
    let rows: Vec<mysql_async::Row> = q.exec(sql.as_str(), params).await?;
    rows.into_iter().map(|r| typed(r, &sql)).collect()
}

/// The MySQL driver's error, which [`typed`] returns.
pub type TypedError = mysql_async::Error;

/// `row` as `T`, or the [`Garbage`] error that names the table (`sql`'s FROM) and shows
/// each column.
pub fn typed<T: mysql_async::prelude::FromRow>(
    row: mysql_async::Row,
    sql: &str,
) -> Result<T, mysql_async::Error> {
    mysql_async::from_row_opt::<T>(row).map_err(|e| {
        let table = table_of(sql);
        mysql_async::Error::Other(Box::new(Garbage(format!(
            "a row of table {table} holds what warden never writes there ({}): was a column's \
             type changed? Give it back the type `warden init` created (compare `SHOW CREATE \
             TABLE {table}` with a fresh one), or delete the row if it is control, the lock or \
             the epoch counter (`warden init --force` then replaces it)",
            shown_columns(&e.0)
        ))))
    })
}

/// The table a statement reads: the word after its `FROM`.
fn table_of(sql: &str) -> &str {
    sql.split_once(" FROM ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("?")
}

/// Each column of a row, `name = value`, short and on one line (long values by length).
pub fn shown_columns(row: &mysql_async::Row) -> String {
    use mysql_async::Value;
    let columns = row.columns_ref();
    (0..row.len())
        .map(|i| {
            let name = columns
                .get(i)
                .map(|c| c.name_str().into_owned())
                .unwrap_or_else(|| format!("#{i}"));
            let value = match row.as_ref(i) {
                None | Some(Value::NULL) => "NULL".to_string(),
                Some(Value::Bytes(b)) if b.len() <= 40 => {
                    format!(
                        "{:?}",
                        crate::record::printable(&String::from_utf8_lossy(b))
                    )
                }
                Some(Value::Bytes(b)) => format!("{} bytes", b.len()),
                Some(Value::Int(n)) => n.to_string(),
                Some(Value::UInt(n)) => n.to_string(),
                Some(other) => format!("{other:?}"),
            };
            format!("{name} = {value}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn outcome(r: Result<bool, StoreError>) -> WriteOutcome {
    match r {
        Ok(true) => WriteOutcome::Done,
        Ok(false) | Err(StoreError::Rejected(_)) => WriteOutcome::Conflict,
        Err(_) => WriteOutcome::Unknown,
    }
}

/// The lock row as the readers select it: session, record, epoch, expired, version, how
/// far its expiry lies ahead of the server's clock and the holder's session timeout (µs).
/// The lock row's columns as read (see [`LockRow`]).
type LockColumns = (i64, Vec<u8>, u64, bool, i64, i64, i64);

/// The name, in `<prefix>kv`, of the row that keeps `node`'s greatest `epoch_seen` for good
/// (SPEC §3a, the floor): a member row is replaced when its node registers again, with
/// what the new process has seen, which may be less.
fn seen_row(node: &str) -> String {
    format!("{SEEN_PREFIX}{node}")
}

/// The prefix of the floor's rows in `<prefix>kv`.
const SEEN_PREFIX: &str = "seen/";

/// Raises `node`'s row of the floor to `epoch` (never lowers it): one statement, atomic on
/// the server, so that concurrent raises of one row keep the greater. The value is the
/// epoch in 20 zero-padded digits, so that rows compare as text: a `CAST` of a row that
/// holds garbage fails the statement in strict mode, and garbage must never block the
/// raise (it is overwritten instead). The digits are matched in the value's hex (twenty
/// `3x` pairs): MySQL 8.0.22 and later refuse a binary string (the `LONGBLOB`) in a
/// regular expression (error 3995), which would have failed every raise there for good
/// (the review of stop 43; MariaDB takes both).
async fn raise_seen<Q: Queryable>(
    q: &mut Q,
    t: &Tables,
    cluster: &str,
    node: &str,
    epoch: Option<Epoch>,
) -> Result<(), mysql_async::Error> {
    let Some(epoch) = epoch.filter(|e| *e < super::MAX_KEPT_EPOCH) else {
        return Ok(());
    };
    q.exec_drop(
        format!(
            "INSERT INTO {} (cluster, name, value, version) VALUES (?, ?, ?, 0) ON DUPLICATE \
             KEY UPDATE {NEXT_VERSION}, value = IF(HEX(value) REGEXP '^(3[0-9]){{20}}$' \
             AND value >= VALUES(value), value, VALUES(value))",
            t.kv
        ),
        (cluster, seen_row(node), format!("{epoch:020}").into_bytes()),
    )
    .await
}

/// The floor (SPEC §3a): the greatest `epoch_seen` of any node, alive or not, from the
/// member rows whatever their age and the rows that keep each node's for good; with the
/// node that set it. Parsed here rather than in SQL: a handful of rows, and no JSON
/// functions to depend on.
async fn read_floor<Q: Queryable>(
    q: &mut Q,
    t: &Tables,
    cluster: &str,
) -> Result<Option<(Epoch, String)>, mysql_async::Error> {
    read_floor_as(q, t, cluster, "").await
}

/// [`read_floor`] inside a transaction, with the floor's own rows share-locked (and the
/// gaps between them: InnoDB's next-key locks under REPEATABLE READ) until its end: a raise
/// that has not committed waits for it, so a check against this floor holds at the
/// commit (SPEC §3a; `decide::commit`). The member rows are read as committed, unlocked:
/// every write of a member's `epoch_seen` raises its floor row too (in the same
/// transaction when it registers), and a lock on them made every standby's keepalive wait
/// on a frozen committer, on MySQL until its `wait_timeout` (the review of stop 41).
async fn read_floor_locked(
    tx: &mut mysql_async::Transaction<'_>,
    t: &Tables,
    cluster: &str,
) -> Result<Option<(Epoch, String)>, mysql_async::Error> {
    // `LOCK IN SHARE MODE`, not `FOR SHARE`: MariaDB and MySQL both take it.
    read_floor_as(tx, t, cluster, " LOCK IN SHARE MODE").await
}

async fn read_floor_as<Q: Queryable>(
    q: &mut Q,
    t: &Tables,
    cluster: &str,
    locking: &str,
) -> Result<Option<(Epoch, String)>, mysql_async::Error> {
    let members: Vec<(String, Vec<u8>)> = all(
        q,
        format!("SELECT node_id, record FROM {} WHERE cluster = ?", t.member),
        (cluster,),
    )
    .await?;
    let kept: Vec<(String, Vec<u8>)> = all(
        q,
        format!(
            "SELECT name, value FROM {} WHERE cluster = ? AND name LIKE ?{locking}",
            t.kv
        ),
        (cluster, format!("{SEEN_PREFIX}%")),
    )
    .await?;
    let from_members = members.into_iter().filter_map(|(node, r)| {
        Some((
            record::parse::<MemberRecord>(&r).ok()?.node.epoch_seen?,
            node,
        ))
    });
    let from_rows = kept.into_iter().filter_map(|(name, v)| {
        let node = name.strip_prefix(SEEN_PREFIX)?.to_string();
        Some((kept_seen(&v)?, node))
    });
    Ok(from_members
        .chain(from_rows)
        .filter(|(e, _)| *e < super::MAX_KEPT_EPOCH)
        .max())
}

/// The epoch a row of the floor keeps (`seen/<node>` in the kv table: 20 zero-padded
/// digits as [`raise_seen`] writes them, or the digits an older warden wrote), or `None`
/// for garbage, which every reader skips and the next raise overwrites.
pub fn kept_seen(value: &[u8]) -> Option<Epoch> {
    std::str::from_utf8(value)
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|e| *e < super::MAX_KEPT_EPOCH)
}

/// The work of one transaction on a wire's connection: its answer, and whether to commit
/// (else it is rolled back).
pub type Work<'c, T, E> = std::pin::Pin<Box<dyn Future<Output = Result<(T, bool), E>> + Send + 'c>>;

/// Boxes a transaction's work (see [`Wire::transact`]).
pub fn work<'c, T, E>(f: impl Future<Output = Result<(T, bool), E>> + Send + 'c) -> Work<'c, T, E> {
    Box::pin(f)
}

/// Where the backend's statements run (issue 32 point 3): a server ([`Server`]), or the
/// simulation's tables in memory (`tests/sim/mysql_wire.rs`). Everything the backend
/// decides, in this file and in [`decide`], is written once over [`Rows`] and runs on
/// both; outside it, in the wire: the SQL text of each statement, the connection and its
/// pool, and the DDL.
pub trait Wire: Send + Sync + 'static {
    /// A connection inside one transaction.
    type Conn: Rows<Error = Self::Error> + Send;
    type Error: Send + 'static;

    /// Runs `f` in one transaction, committed when `f` says so, else rolled back; `doing`
    /// names it. Unbounded: the caller bounds it.
    fn transact<T, F>(
        &self,
        doing: &str,
        f: F,
    ) -> impl Future<Output = Result<T, Self::Error>> + Send
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut Self::Conn) -> Work<'c, T, Self::Error> + Send + 'static;

    /// What an error of `doing` tells: a definite answer, or an unknown outcome.
    fn classify(e: Self::Error, doing: &str) -> StoreError;

    /// Creates the tables that are missing, within `bound`.
    fn create_tables(&self, bound: Duration)
        -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// What a server's statements name: the tables, the cluster, the session timeout.
struct Ctx {
    t: Tables,
    cluster: String,
    /// The session timeout in microseconds: a lock row of an older warden, without
    /// `expires_at`, expires this long after its renewal; a renewal adds it.
    exp: i64,
}

/// The real wire: a server, through the connector's pool.
#[derive(Clone)]
pub struct Server {
    pool: Pool,
    c: Arc<Ctx>,
}

impl Wire for Server {
    type Conn = SqlRows;
    type Error = mysql_async::Error;

    async fn transact<T, F>(&self, _doing: &str, f: F) -> Result<T, mysql_async::Error>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqlRows) -> Work<'c, T, mysql_async::Error> + Send + 'static,
    {
        let tx = self.pool.start_transaction(TxOpts::default()).await?;
        let mut rows = SqlRows {
            tx,
            c: self.c.clone(),
        };
        let (answer, keep) = f(&mut rows).await?;
        // Rolled back otherwise, on its way back to the pool.
        if keep {
            rows.tx.commit().await?;
        }
        Ok(answer)
    }

    fn classify(e: mysql_async::Error, doing: &str) -> StoreError {
        classify(e, doing)
    }

    async fn create_tables(&self, bound: Duration) -> Result<(), StoreError> {
        let ddl = self.c.t.ddl();
        let work = async {
            let mut c = self.pool.get_conn().await?;
            for statement in &ddl {
                c.query_drop(statement).await?;
            }
            Ok(())
        };
        within(bound, "creating the tables", work).await
    }
}

/// `work` within `bound`: no answer by then is an unknown outcome.
async fn within<T>(
    bound: Duration,
    doing: &str,
    work: impl Future<Output = Result<T, mysql_async::Error>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(bound, work).await {
        Err(_) => Err(no_answer(doing, bound)),
        Ok(r) => r.map_err(|e| classify(e, doing)),
    }
}

fn no_answer(doing: &str, bound: Duration) -> StoreError {
    StoreError::Unknown(format!(
        "{doing} got no answer within {}",
        humantime::format_duration(bound)
    ))
}

impl Server {
    /// Gives a lock table made by an older warden its `expires_at` column, as
    /// `ensure_cluster` makes missing tables: where the grants allow, else the error says
    /// what to run. Chosen over refusing to start: old and new wardens share the table
    /// during a rolling upgrade (the column is nullable), and nothing else needs doing.
    /// Within [`DDL_TIMEOUT`] (see [`Server::create_tables`]'s callers).
    async fn upgrade_lock_table(&self, s: &StoreSettings) -> Result<(), StoreError> {
        let (t, name) = (&self.c.t, format!("{}lock", s.prefix));
        let alter = format!("ALTER TABLE {} ADD COLUMN {EXPIRES_AT_COLUMN}", t.lock);
        let work = async {
            let mut c = self.pool.get_conn().await?;
            let columns: Vec<String> = c
                .exec(
                    "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = \
                     DATABASE() AND TABLE_NAME = ?",
                    (&name,),
                )
                .await?;
            // No table: `init` (or `ensure_cluster`) makes it whole.
            if columns.is_empty() || columns.iter().any(|c| c.eq_ignore_ascii_case("expires_at")) {
                return Ok(false);
            }
            match c.query_drop(alter.as_str()).await {
                Ok(()) => Ok(true),
                // Another warden added it meanwhile.
                Err(mysql_async::Error::Server(e)) if e.code == 1060 => Ok(false),
                Err(e) => Err(e),
            }
        };
        let added = within(
            s.op_timeout().max(DDL_TIMEOUT),
            "adding the expires_at column to the lock table",
            work,
        )
        .await;
        match added {
            Ok(true) => {
                tracing::info!(
                    "added the expires_at column to {} (made by an older warden): each lock \
                     holder now writes its own expiry (SPEC 3a)",
                    t.lock
                );
                Ok(())
            }
            Ok(false) => Ok(()),
            Err(StoreError::Auth(why)) => Err(StoreError::NotInitialized(format!(
                "the lock table {} was made by an older warden and lacks the expires_at column \
                 this version needs (each holder writes its own expiry), and this user may \
                 not add it ({why}): run `warden init` as a user allowed to ALTER it, or have \
                 an administrator run `{alter}`",
                t.lock
            ))),
            Err(e) => Err(e),
        }
    }
}

/// A session: clones share it; it ends when the last clone is dropped.
pub struct MysqlSession<W: Wire = Server> {
    inner: Arc<Inner<W>>,
}

impl<W: Wire> Clone for MysqlSession<W> {
    fn clone(&self) -> Self {
        MysqlSession {
            inner: self.inner.clone(),
        }
    }
}

impl<W: Wire> std::fmt::Debug for MysqlSession<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MysqlSession({:#x})", self.inner.core.id)
    }
}

/// What a session remembers between its transactions (see [`decide::Memory`]), shared
/// with the transactions' work, which owns what it uses.
struct Remembered {
    cluster: String,
    lock_table: String,
    epoch_table: String,
    /// A live-looking lock row whose expiry lies further ahead than its holder's session
    /// timeout, as first seen: see [`stuck_lock_stale`].
    stuck: std::sync::Mutex<Option<StuckLock>>,
    /// The run of the server this session first registered on (see [`ServerRun`]).
    run: std::sync::Mutex<Option<ServerRun>>,
}

impl Remembered {
    fn memory(&self) -> decide::Memory<'_> {
        decide::Memory {
            cluster: &self.cluster,
            lock_table: &self.lock_table,
            epoch_table: &self.epoch_table,
            stuck: &self.stuck,
            run: &self.run,
        }
    }

    fn run_then(&self) -> Option<ServerRun> {
        self.run.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

struct Inner<W: Wire> {
    s: Arc<StoreSettings>,
    wire: W,
    /// The table names, for what the session says.
    t: Tables,
    mem: Arc<Remembered>,
    op_timeout: Duration,
    /// The session's id, member, joins and loss, shared with the polled loops.
    core: polled::Core,
}

/// What a breadcrumb-changing transaction writes (see
/// [`MysqlSession::with_lock_and_breadcrumb`]).
enum CrumbWrite {
    /// The row rewritten at the version checked, or made where it was absent.
    Write(Vec<u8>),
    Delete,
}

impl<W: Wire> Inner<W> {
    /// Runs `f` in one transaction within the operation timeout.
    async fn run<T, F>(&self, doing: &str, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut W::Conn) -> Work<'c, T, W::Error> + Send + 'static,
    {
        match tokio::time::timeout(self.op_timeout, self.wire.transact(doing, f)).await {
            Err(_) => Err(no_answer(doing, self.op_timeout)),
            Ok(r) => r.map_err(|e| W::classify(e, doing)),
        }
    }

    /// The keepalive: gone when the member row no longer names this session; restarted
    /// when the lock is not this session's and the server is another run than the one
    /// the session registered on (`polled::Touched::Restarted`).
    async fn touch_rows(&self, node: &str) -> Result<Touched, StoreError> {
        let (id, then, node) = (self.core.id, self.mem.run_then(), node.to_string());
        // Two transactions, each writing one row, as the autocommit statements before
        // them did: the member row, then (while the lock is this session's) the lock row.
        // Both in one transaction held the first row while writing the second: the member
        // row first can deadlock with the elector's renewal (lock row, then member row;
        // InnoDB fails one of them, and an unknown renewal costs a lease), and the lock
        // row first held it, and kept every joiner out, across a frozen keepalive's next
        // statement (the review of stop 43).
        let (touched, held) = self
            .run("keeping the session alive", move |c| {
                work(async move {
                    if !c.renew_member(&node, id, None).await? {
                        return Ok(((Touched::Gone, false), false));
                    }
                    // The lock row only while it names this session, looked at with a read
                    // that takes no lock: an UPDATE examines the row whoever holds it and
                    // waits on its row lock, so a holder frozen inside a transaction made
                    // every standby's keepalive wait, and lose its session, with it.
                    if c.lock_session(false).await? == Some(id) {
                        return Ok(((Touched::Alive, true), true));
                    }
                    // (As the join: a session without a recorded run, which registration
                    // always records, counts as another run.)
                    let other = match &then {
                        Some(then) => c.server_run().await?.surely_other_than(then),
                        None => true,
                    };
                    let touched = if other {
                        Touched::Restarted("the server's identity or start time")
                    } else {
                        Touched::Alive
                    };
                    Ok(((touched, false), true))
                })
            })
            .await?;
        if held {
            self.run("keeping the lock", move |c| {
                work(async move {
                    let renewed = c.renew_lock(id, None).await?;
                    Ok(((), renewed))
                })
            })
            .await?;
        }
        Ok(touched)
    }

    /// The epoch counter's row as it is, garbage included (`None`: no row).
    async fn read_counter(&self) -> Result<Option<u64>, StoreError> {
        self.run("reading the epoch counter", |c| {
            work(async move { Ok((c.counter(false).await?, false)) })
        })
        .await
    }

    /// The lock row: (session, record, epoch, expired).
    async fn read_lock(&self) -> Result<Option<(i64, Vec<u8>, Epoch, bool)>, StoreError> {
        let row = self
            .run("reading the lock", |c| {
                work(async move { Ok((c.lock(false).await?, false)) })
            })
            .await?;
        // A row too far ahead of the server's clock counts as expired once it has not
        // changed for its holder's session timeout (a standby then joins and takes it).
        Ok(row.map(|l| {
            let stale = !l.expired
                && stuck_lock_stale(
                    &self.mem.stuck,
                    &self.t.lock,
                    &self.s.cluster,
                    (l.session, l.version),
                    l.ahead_us,
                    l.timeout_us,
                );
            (l.session, l.record, l.epoch, l.expired || stale)
        }))
    }

    /// SPEC §3a: one transaction takes an absent or expired lock and raises the epoch,
    /// unless the store lost data (no marker, or the counter below a member's
    /// `epoch_seen`): then nobody takes it, and the counter does not move.
    async fn try_lock(&self, me: &NodeRecord) -> Result<Taking, StoreError> {
        let (mem, id, me) = (self.mem.clone(), self.core.id, me.clone());
        self.run("taking the lock", move |c| {
            work(async move {
                let data = record::to_bytes(&me);
                decide::take_lock(c, &mem.memory(), id, &me, &data).await
            })
        })
        .await
    }

    async fn get(&self, name: &str) -> Result<Option<(Vec<u8>, i64)>, StoreError> {
        let name = name.to_string();
        self.run("reading", move |c| {
            work(async move { Ok((c.kv(&name, false).await?, false)) })
        })
        .await
    }

    fn path(&self, name: &str) -> String {
        format!(
            "{} row {}/{}",
            self.t.kv.trim_matches('`'),
            self.s.cluster,
            name
        )
    }
}

impl<W: Wire> Polled for Inner<W> {
    fn core(&self) -> &polled::Core {
        &self.core
    }

    async fn touch(&self, node: &str) -> Result<Touched, StoreError> {
        self.touch_rows(node).await
    }

    async fn read_control(&self) -> Result<Option<(Vec<u8>, i64)>, StoreError> {
        self.get(CONTROL).await
    }

    async fn read_breadcrumb(&self) -> Result<Option<(Vec<u8>, i64)>, StoreError> {
        self.get(super::items::BREADCRUMB).await
    }

    async fn read_holder(&self) -> Result<Option<(i64, Vec<u8>)>, StoreError> {
        Ok(self
            .read_lock()
            .await?
            .filter(|(.., expired)| !expired)
            .map(|(s, r, ..)| (s, r)))
    }
}

impl<W: Wire> Items for MysqlSession<W> {
    async fn get_item(&self, name: &str) -> Result<Option<(Vec<u8>, i64)>, StoreError> {
        self.inner.get(name).await
    }

    async fn put_item(
        &self,
        name: &str,
        data: &[u8],
        version: Option<i64>,
    ) -> Result<(), StoreError> {
        let (n, data) = (name.to_string(), data.to_vec());
        let done = self
            .inner
            .run("writing", move |c| {
                work(async move {
                    let done = match version {
                        Some(v) => c.write_kv(&n, &data, Some(v)).await?,
                        None => c.insert_kv_ignore(&n, &data).await?,
                    };
                    Ok((done, done))
                })
            })
            .await?;
        if done {
            Ok(())
        } else {
            Err(StoreError::Rejected(format!(
                "{} changed since it was read",
                self.inner.path(name)
            )))
        }
    }

    fn item_path(&self, name: &str) -> String {
        self.inner.path(name)
    }
}

impl<W: Wire> MysqlSession<W> {
    /// A session `id` on `wire`, its keepalive started (the caller checked that the
    /// store answers).
    pub fn open(wire: W, s: Arc<StoreSettings>, id: i64) -> MysqlSession<W> {
        let t = Tables::new(&s.prefix);
        let mem = Arc::new(Remembered {
            cluster: s.cluster.clone(),
            lock_table: t.lock.clone(),
            epoch_table: t.epoch.clone(),
            stuck: std::sync::Mutex::new(None),
            run: std::sync::Mutex::new(None),
        });
        let inner = Arc::new(Inner {
            op_timeout: s.op_timeout(),
            core: polled::Core::new(id, s.session_timeout, s.poll_interval),
            s,
            wire,
            t,
            mem,
        });
        tokio::spawn(polled::keepalive(Arc::downgrade(&inner)));
        MysqlSession { inner }
    }

    /// What `snapshot` reads; `NotInitialized` when any table is missing.
    async fn read_snapshot(&self) -> Result<ClusterSnapshot, StoreError> {
        let i = &self.inner;
        // An expired lock row is no lock, but its epoch was handed out.
        let row = i.read_lock().await?;
        let expired_lock_epoch = row
            .as_ref()
            .and_then(|(.., epoch, expired)| expired.then_some(*epoch));
        let lock = row.and_then(|(session, data, epoch, expired)| {
            (!expired).then_some((data, epoch, SessionId(session)))
        });
        let mut snap = ClusterSnapshot::of_lock(lock);
        snap.expired_lock_epoch = expired_lock_epoch;
        snap.add_items(i.get(BREADCRUMB).await?, i.get(CONTROL).await?);
        let rows = i
            .run("listing members", |c| {
                work(async move { Ok((c.live_members().await?, false)) })
            })
            .await?;
        for (id, session, data) in rows {
            if snap.valid_member_id(&id) {
                snap.add_member(id, SessionId(session), &data);
            }
        }
        snap.history = self.read_history().await?;
        snap.set_aside = self.set_aside().await?;
        snap.kept_floor = i
            .run("reading the floor", |c| {
                work(async move { Ok((c.floor(false).await?, false)) })
            })
            .await?;
        // A counter at or above 2^53 (or that cannot be read as a number) holds no epoch:
        // the store lost data, which `init --force` replaces (SPEC §3a).
        snap.epoch_counter = match i.read_counter().await {
            Ok(None) => None,
            Ok(Some(e)) if e < super::MAX_KEPT_EPOCH => Some(e),
            Ok(Some(_)) | Err(StoreError::Rejected(_)) => {
                snap.counter_unreadable = true;
                None
            }
            Err(e) => return Err(e),
        };
        // A missing counter row is as lost as a missing marker: neither is ever deleted.
        snap.marker_missing = i.get(MARKER).await?.is_none() || snap.epoch_counter.is_none();
        Ok(snap)
    }

    /// Whether the tables and the init marker exist.
    async fn initialized(&self) -> Result<bool, StoreError> {
        match self.inner.get(MARKER).await {
            Ok(found) => Ok(found.is_some()),
            Err(StoreError::NotInitialized(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// A breadcrumb-changing transaction: checks that this session holds the lock (when
    /// `check_lock`) and that the breadcrumb is at `version` (`None`: absent), then
    /// writes it. `Ok(false)`: a check failed.
    async fn with_lock_and_breadcrumb(
        &self,
        doing: &str,
        check_lock: bool,
        version: Option<i64>,
        write: CrumbWrite,
    ) -> Result<bool, StoreError> {
        let id = self.inner.core.id;
        self.inner
            .run(doing, move |c| {
                work(async move {
                    if check_lock && c.lock_session(true).await? != Some(id) {
                        return Ok((false, false));
                    }
                    if c.kv(BREADCRUMB, true).await?.map(|(_, v)| v) != version {
                        return Ok((false, false));
                    }
                    let done = match write {
                        CrumbWrite::Write(data) => c.write_kv(BREADCRUMB, &data, version).await?,
                        CrumbWrite::Delete => c.delete_kv(BREADCRUMB, version).await?,
                    };
                    Ok((done, done))
                })
            })
            .await
    }
}

#[cfg(test)]
mod tests;
