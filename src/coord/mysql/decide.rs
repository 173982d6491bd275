//! The MySQL backend's transactions that decide (issue 32 point 3): who takes the lock
//! and at which epoch, and whether the store lost data first (the floor against the
//! counter); whether a commit, a renewal or a registration is still this session's. Each
//! is written once, here, over [`Rows`]: the row operations it needs, one statement each.
//! `mysql.rs` runs them in a server's transaction (`SqlRows`, one statement per method);
//! `tests/sim/tables.rs` runs the same functions on tables in memory, and
//! `tests/mysql_rows.rs` holds those tables to a real MariaDB, step by step.
//!
//! Outside the seam, in the statements: what the server computes (`NOW(6)` and the
//! expiries against it, `LAST_INSERT_ID`, the floor's text comparison in the raise),
//! InnoDB's row locks (a transaction in memory is applied at once, as if alone: what the
//! locks are there to give), and the connection.

use crate::coord::items;
use crate::record::{self, Epoch, MemberRecord, NodeRecord};
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

/// The lock row as a taking transaction reads it, locked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockRow {
    pub session: i64,
    pub record: Vec<u8>,
    pub epoch: Epoch,
    /// Expired on the server's clock.
    pub expired: bool,
    /// Bumped by every write of the row (renewals included).
    pub version: i64,
    /// How far its expiry lies ahead of the server's clock, in microseconds.
    pub ahead_us: i64,
    /// The holder's own session timeout (what it adds to `renewed_at` to make
    /// `expires_at`), in microseconds.
    pub timeout_us: i64,
}

/// A member row as a registration reads it, locked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberRow {
    pub session: i64,
    /// Not touched for the reader's session timeout, on the server's clock.
    pub expired: bool,
    pub record: Vec<u8>,
}

/// A live member row: node, session, record.
pub type LiveMember = (String, i64, Vec<u8>);

/// The row operations of the deciding transactions, each one statement inside one
/// transaction (see the module's doc). What a method reads "for update" stays locked to
/// the end of the transaction.
pub trait Rows: Send {
    type Error: Send;

    /// The session of `node`'s member row, if there is one.
    fn member_session(
        &mut self,
        node: &str,
    ) -> impl Future<Output = Result<Option<i64>, Self::Error>> + Send;

    /// `node`'s member row, for update when `locked`.
    fn member(
        &mut self,
        node: &str,
        locked: bool,
    ) -> impl Future<Output = Result<Option<MemberRow>, Self::Error>> + Send;

    /// The member rows touched within the reader's session timeout: node, session,
    /// record, by node.
    fn live_members(&mut self)
        -> impl Future<Output = Result<Vec<LiveMember>, Self::Error>> + Send;

    /// `node`'s member row replaced: held by `session`, touched now.
    fn replace_member(
        &mut self,
        node: &str,
        session: i64,
        record: &[u8],
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// `node`'s member row rewritten (when `record` is given) and touched, only while
    /// `session` holds it: whether it did.
    fn renew_member(
        &mut self,
        node: &str,
        session: i64,
        record: Option<&[u8]>,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// `node`'s member row deleted, whoever holds it.
    fn delete_member(&mut self, node: &str)
        -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// The lock row, for update when `locked`.
    fn lock(
        &mut self,
        locked: bool,
    ) -> impl Future<Output = Result<Option<LockRow>, Self::Error>> + Send;

    /// The lock row's session, for update when `locked`; without, a read that takes no
    /// lock and waits on none (a frozen holder's open transaction holds its row).
    fn lock_session(
        &mut self,
        locked: bool,
    ) -> impl Future<Output = Result<Option<i64>, Self::Error>> + Send;

    /// The lock row renewed (its expiry moved to now plus the session timeout, its
    /// version bumped, its record replaced when given), only while `session` holds it
    /// and it has not expired: whether it did.
    fn renew_lock(
        &mut self,
        session: i64,
        record: Option<&[u8]>,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// The lock row replaced: held by `session` at `epoch`, version 0, renewed now.
    fn replace_lock(
        &mut self,
        session: i64,
        record: &[u8],
        epoch: Epoch,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// The lock row deleted while `session` holds it.
    fn delete_lock(&mut self, session: i64)
        -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// The epoch counter, for update when `locked` (`None`: no row).
    fn counter(
        &mut self,
        locked: bool,
    ) -> impl Future<Output = Result<Option<u64>, Self::Error>> + Send;

    /// The counter raised by one: the epoch it now holds.
    fn next_epoch(&mut self) -> impl Future<Output = Result<Epoch, Self::Error>> + Send;

    /// The counter's row made where there is none (at 0), then raised to `floor` when
    /// given: never lowered, but replaced when it holds no epoch a counter gives (at or
    /// above 2^53). What `init` writes with the marker.
    fn init_counter(
        &mut self,
        floor: Option<Epoch>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Whether the init marker is there.
    fn marker(&mut self) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// `node`'s row of the floor raised to `epoch`, never lowered (garbage in it is
    /// overwritten).
    fn raise_seen(
        &mut self,
        node: &str,
        epoch: Epoch,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// The floor (SPEC §3a): the greatest `epoch_seen` of the member rows and the floor's
    /// rows, and whose; with `locked`, the floor's rows (and the gaps between them) locked
    /// in share mode, the member rows read as committed.
    fn floor(
        &mut self,
        locked: bool,
    ) -> impl Future<Output = Result<Option<(Epoch, String)>, Self::Error>> + Send;

    /// Row `name` of the kv table, its value and version, for update when `locked`
    /// (`None`: absent).
    fn kv(
        &mut self,
        name: &str,
        locked: bool,
    ) -> impl Future<Output = Result<Option<(Vec<u8>, i64)>, Self::Error>> + Send;

    /// Row `name` of the kv table written: at `version` (its version bumped), or created
    /// at version 0 when `version` is `None` (an error where it exists). Whether it did.
    fn write_kv(
        &mut self,
        name: &str,
        data: &[u8],
        version: Option<i64>,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Row `name` of the kv table created at version 0 unless it exists: whether it did.
    fn insert_kv_ignore(
        &mut self,
        name: &str,
        data: &[u8],
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Row `name` of the kv table deleted, only at `version` when given: whether it was.
    fn delete_kv(
        &mut self,
        name: &str,
        version: Option<i64>,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// The names of the kv table's rows that begin with `prefix`, in order.
    fn kv_names(
        &mut self,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<String>, Self::Error>> + Send;

    /// Which run of which server this transaction talks to.
    fn server_run(&mut self) -> impl Future<Output = Result<ServerRun, Self::Error>> + Send;
}

/// Which run of which server a transaction talks to (stop 36, review F2): the server's
/// identity (`@@hostname:@@port:@@server_id`, what differs between a primary and the
/// replica a failover promotes) and when it started (the server's clock less its
/// `Uptime`, in seconds). A server that restarted (a crash with `innodb_flush_log_at_trx_
/// commit` other than 1 loses its last second) or another server (a failover to a replica
/// that lagged) may have forgotten exactly the last promotion while a session older than
/// that kept its member row: such a session takes no lock (SPEC §3a, the wait of a new
/// session). Written by hand: neither MySQL nor MariaDB names a run of the server in one
/// value both have (`@@server_uuid` is MySQL's only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerRun {
    pub id: String,
    /// `None` when the server hides its `Uptime` (answers without the row; a read that
    /// fails is an error): then only the identity is compared.
    pub started: Option<i64>,
}

impl ServerRun {
    /// Another run than `then` (the run the session registered on), as the join decides:
    /// another server, or a start more than 2 s apart (both readings round to the second;
    /// `Uptime` follows the server's clock, so a step of it moves neither reading far), or
    /// a start time known then and missing now.
    pub fn other_than(&self, then: &ServerRun) -> bool {
        self.id != then.id
            || match (self.started, then.started) {
                (Some(now), Some(then)) => (now - then).abs() > 2,
                (None, Some(_)) => true,
                (_, None) => false,
            }
    }

    /// Another run for sure, as a standby's keepalive decides (every `session_timeout /
    /// 6`): a start time missing now is no verdict, so that it never ends a session on
    /// its own (the review of stop 42).
    pub fn surely_other_than(&self, then: &ServerRun) -> bool {
        self.id != then.id
            || self
                .started
                .zip(then.started)
                .is_some_and(|(now, then)| (now - then).abs() > 2)
    }
}

/// What a lock-taking transaction found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Taking {
    /// Ours, with this epoch.
    Held(Epoch),
    /// Another live session's; its committed epoch if its record names one.
    Other { holder: i64, epoch: Option<Epoch> },
    /// The store lost data: why.
    Lost(String),
    /// The joiner's member row no longer names its session (the store forgot it).
    Gone,
    /// The server restarted, or is another one, since the session registered.
    Restarted,
}

/// What a session remembers between its transactions, and names for what they say.
pub struct Memory<'a> {
    pub cluster: &'a str,
    /// The lock table's and the counter's table's names, for the log and the errors.
    pub lock_table: &'a str,
    pub epoch_table: &'a str,
    /// A live-looking lock row whose expiry lies further ahead than its holder's session
    /// timeout, as first seen: see [`stuck_lock_stale`].
    pub stuck: &'a Mutex<Option<StuckLock>>,
    /// The run of the server this session first registered on (see [`ServerRun`]).
    pub run: &'a Mutex<Option<ServerRun>>,
}

/// A lock row seen with its expiry too far ahead: whose (session) and at which version, and
/// when this process first saw it so.
#[derive(Clone, Copy, Debug)]
pub struct StuckLock {
    holder: (i64, i64),
    since: tokio::time::Instant,
}

/// SPEC §3a, issue 31: whether a lock row that has not expired on the server's clock may be
/// taken all the same. A holder writes `expires_at` = NOW(6) + its session timeout at every
/// renewal, so a row whose expiry lies further ahead than that (`ahead_us` > `timeout_us`,
/// the holder's timeout read from its own row, at most the longest a config allows) was
/// written before the server's clock stepped back (or by hand): a dead holder would keep
/// every standby out until the clock caught up, days maybe. Such a row is taken once it has
/// not changed (same session, same version, which every renewal bumps) for the holder's
/// session timeout on this process's monotonic clock: a live holder renews every sixth of
/// it, and its lease ends half of it after its last renewal, so by then it is dead or has
/// demoted itself, whatever the server's clock says. Never earlier: a live holder's next
/// renewal moves the row back within its timeout. Logs it once per row version.
pub fn stuck_lock_stale(
    stuck: &Mutex<Option<StuckLock>>,
    table: &str,
    cluster: &str,
    holder: (i64, i64),
    ahead_us: i64,
    timeout_us: i64,
) -> bool {
    let longest =
        i64::try_from(crate::config::SESSION_TIMEOUT_RANGE.max.as_micros()).unwrap_or(i64::MAX);
    let timeout = timeout_us.clamp(0, longest);
    // Poisoned only by a panic while held, which nothing here can raise.
    let mut stuck = stuck.lock().unwrap_or_else(|e| e.into_inner());
    if ahead_us <= timeout {
        *stuck = None;
        return false;
    }
    // tokio's clock: the real one in the daemon, the simulation's in the simulation.
    let now = tokio::time::Instant::now();
    match *stuck {
        Some(s) if s.holder == holder => {
            now.duration_since(s.since) >= Duration::from_micros(timeout.unsigned_abs())
        }
        _ => {
            tracing::warn!(
                "the lock row of cluster {cluster} in table {table} expires {} from now on \
                 the MySQL server's clock, more than its holder's session timeout ({}): the \
                 server's clock went back, or the row was edited; it is taken if it does not \
                 change for that session timeout",
                humantime::format_duration(Duration::from_secs(
                    ahead_us.unsigned_abs() / 1_000_000
                )),
                humantime::format_duration(Duration::from_millis(timeout.unsigned_abs() / 1000)),
            );
            *stuck = Some(StuckLock { holder, since: now });
            false
        }
    }
}

/// SPEC §3a: one transaction takes an absent or expired lock and raises the epoch, unless
/// the store lost data (no marker, or the counter below the floor): then nobody takes it,
/// and the counter does not move. `me` (its record as `data`) joins in session `id`.
/// Returns what it found, and whether the transaction is to be committed (the joiner's
/// raised entry of the floor stays, even when it refuses).
pub async fn take_lock<R: Rows>(
    r: &mut R,
    m: &Memory<'_>,
    id: i64,
    me: &NodeRecord,
    data: &[u8],
) -> Result<(Taking, bool), R::Error> {
    // A session the store no longer knows takes nothing (see `Core::gone`).
    if r.member_session(&me.node_id).await? != Some(id) {
        return Ok((Taking::Gone, false));
    }
    match r.lock(true).await? {
        // An expired row of ours is gone as anyone's is: taken anew below, at a new epoch
        // (never renewed back: seed 507023).
        Some(l) if l.session == id && !l.expired => return Ok((Taking::Held(l.epoch), false)),
        Some(l) if !l.expired => {
            let stale = stuck_lock_stale(
                m.stuck,
                m.lock_table,
                m.cluster,
                (l.session, l.version),
                l.ahead_us,
                l.timeout_us,
            );
            if !stale {
                let epoch = record::parse::<NodeRecord>(&l.record)
                    .ok()
                    .and_then(|r| r.epoch);
                return Ok((
                    Taking::Other {
                        holder: l.session,
                        epoch,
                    },
                    false,
                ));
            }
        }
        _ => {}
    }
    let counter = r.counter(true).await?;
    // At or above 2^53 it holds no epoch a counter gives (garbage, or next to overflowing
    // BIGINT UNSIGNED, which failed every promotion): lost data, which `init --force`
    // replaces.
    if let Some(c) = counter.filter(|c| *c >= crate::coord::MAX_KEPT_EPOCH) {
        return Ok((
            Taking::Lost(format!(
                "the store lost data: the epoch counter of cluster {} (table {}) is at {c}, \
                 above any epoch a counter gives (2^53); run `warden init --force`, which \
                 replaces it",
                m.cluster, m.epoch_table
            )),
            false,
        ));
    }
    let marker = r.marker().await?;
    // SPEC §3a: the joiner's entry of the floor first, then the floor against the counter,
    // before it moves; a refusal keeps the raised floor (committed).
    raise(r, &me.node_id, me.epoch_seen).await?;
    let now = r.server_run().await?;
    let then = m.run.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if then.is_none_or(|then| now.other_than(&then)) {
        return Ok((Taking::Restarted, true));
    }
    // As it is now, share-locked (as the commit reads it): a plain read would read the
    // view this transaction's first read made, before it waited on the lock row, and miss
    // a raise committed meanwhile (the review of stop 43,
    // `commit_floor::a_mysql_join_that_waited_on_the_lock_row_sees_the_floor_raised_meanwhile`).
    let floor = r.floor(true).await?;
    if let Some(why) = crate::coord::lost_data(
        !marker || counter.is_none(),
        counter,
        floor.as_ref().map(|(e, _)| *e),
        floor.as_ref().map(|(_, who)| who.as_str()),
    ) {
        return Ok((Taking::Lost(why), true));
    }
    let epoch = r.next_epoch().await?;
    r.replace_lock(id, data, epoch).await?;
    Ok((Taking::Held(epoch), true))
}

/// SPEC §4.3c: the promotion's commit, all or nothing, only while session `id` holds the
/// lock, control is at `control` and the breadcrumb at `breadcrumb` (`None`: absent);
/// the lock row gets `crumb` (a renewal too: the lease starts at its send time), and so
/// does the breadcrumb. Whether it is to be committed; refused when the floor holds its
/// epoch (see below).
pub async fn commit<R: Rows>(
    r: &mut R,
    id: i64,
    crumb: &NodeRecord,
    control: i64,
    breadcrumb: Option<i64>,
) -> Result<bool, R::Error> {
    let data = record::to_bytes(crumb);
    if r.kv(items::CONTROL, true).await?.map(|(_, v)| v) != Some(control) {
        return Ok(false);
    }
    let current = r.kv(items::BREADCRUMB, true).await?;
    if current.as_ref().map(|(_, v)| *v) != breadcrumb {
        return Ok(false);
    }
    if !r.renew_lock(id, Some(&data)).await? {
        return Ok(false);
    }
    // SPEC §3a: the floor as it is now, not as the takeover read it. A node that saw an
    // epoch the store forgot may raise its entry between that read and this commit (its
    // registration, its join, while the fence ran); a commit at an epoch the floor holds
    // would hand out a fencing token that is not new (stop 40's finding,
    // `tests/commit_floor.rs`). Refused as a conflict (the rollback undoes the lock row's
    // write): the elector reads the state again, finds the floor above its epoch and says
    // the store lost data. Read after the lock row is ours, as a join locks it first and
    // raises the floor after: the same order, so the two never deadlock. A commit of our
    // breadcrumb again is refused only by a floor above it (`floor_refuses`).
    let floor = r.floor(true).await?.map(|(e, _)| e);
    let current = current.and_then(|(value, _)| record::parse::<NodeRecord>(&value).ok());
    if crate::coord::floor_refuses(floor, crumb, current.as_ref()) {
        return Ok(false);
    }
    r.write_kv(items::BREADCRUMB, &data, breadcrumb).await?;
    Ok(true)
}

/// The lease renewal: the lock row, then our member row (`m`, as `data`), both only while
/// session `id` holds them. Whether it is to be committed.
pub async fn renew<R: Rows>(
    r: &mut R,
    id: i64,
    m: &MemberRecord,
    data: &[u8],
) -> Result<bool, R::Error> {
    Ok(r.renew_lock(id, None).await? && r.renew_member(&m.node.node_id, id, Some(data)).await?)
}

/// Registers `m` (as `data`) in session `id`: refused (`false`) while another live session
/// holds the node's member row. The session's server run is the one of its first attempt
/// to register: one that restarts between a try and its retry costs a wait, never hides a
/// restart. Whether it is to be committed.
pub async fn register<R: Rows>(
    r: &mut R,
    mem: &Memory<'_>,
    id: i64,
    m: &MemberRecord,
    data: &[u8],
) -> Result<bool, R::Error> {
    let now = r.server_run().await?;
    mem.run
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert(now);
    let node = &m.node.node_id;
    let row = r.member(node, true).await?;
    if let Some(row) = &row {
        if !row.expired && row.session != id {
            return Ok(false);
        }
    }
    // The row replaced below may have seen more than this process has: its epoch stays in
    // the floor (SPEC §3a).
    let old_seen = row.and_then(|row| {
        record::parse::<MemberRecord>(&row.record)
            .ok()?
            .node
            .epoch_seen
    });
    raise(r, node, old_seen.max(m.node.epoch_seen)).await?;
    r.replace_member(node, id, data).await?;
    Ok(true)
}

/// Raises `node`'s row of the floor to `epoch`, when there is one a counter gives.
pub async fn raise<R: Rows>(r: &mut R, node: &str, epoch: Option<Epoch>) -> Result<(), R::Error> {
    match epoch.filter(|e| *e < crate::coord::MAX_KEPT_EPOCH) {
        Some(e) => r.raise_seen(node, e).await,
        None => Ok(()),
    }
}
