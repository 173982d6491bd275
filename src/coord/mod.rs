//! The coordination store: what the election needs from it, as one trait, and the
//! ZooKeeper backend.
//!
//! [`Session`] speaks the election's vocabulary (register, join, read the takeover state,
//! commit a promotion, renew, compare-and-delete the breadcrumb, release, and one stream
//! of [`StoreEvent`]s), never a store's: watches, session states and ephemeral owners
//! live in `zookeeper.rs` only. The driver (`daemon/`), the operator commands (`ops/`)
//! and the simulation's store model all see only the trait.
//!
//! Generic, not `dyn` and not an enum: `async fn` in a trait cannot be called through
//! `dyn` on Rust 1.85 without boxing every future, and an enum over backends would put
//! the simulation's model into the product. The daemon and the commands are generic over
//! a [`Connector`]; [`configured::Configured`] picks the backend once from the config
//! (for `run` and for the commands), and each backend gets its own copy of the driver at
//! compile time.

pub mod configured;
pub mod items;
pub mod mysql;
pub mod polled;
pub mod redis;
pub mod zookeeper;

use crate::record::{
    self, Control, Epoch, History, HistoryEntry, JoinOutcome, MemberRecord, NodeRecord,
    RecordError, SessionId, TakeoverState, Version, WriteOutcome,
};
use std::future::Future;
use std::time::Duration;
use tokio::sync::mpsc;
use tracing::warn;

/// How often a restarted warden looks again whether its killed predecessor's session
/// ended (SPEC §4.9).
const PREDECESSOR_POLL: Duration = Duration::from_millis(250);

/// How long a store's watch loop waits before it reads or arms its watch again after a
/// request failed without ending the session (a connection blip, a timeout). Short,
/// because the client reconnects by itself within the session and the elector waits on
/// what the watch reports; long enough not to spin on a dead connection. The same 200 ms
/// as the elector's own retry of a store call, but the store layer's.
const WATCH_RETRY_DELAY: Duration = Duration::from_millis(200);

/// Opens sessions to one cluster's state in the store.
pub trait Connector: Clone + Send + Sync + 'static {
    type Session: Session;

    /// Opens a session, bounded by the backend's connect timeout.
    fn connect(&self) -> impl Future<Output = Result<Self::Session, StoreError>> + Send;
}

/// What the store tells the driver without being asked, in order, on one channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreEvent {
    /// `control` as it is now: once at the start, then after every change.
    Control(Control),
    /// The lock holder seen by join number `join` is gone (the lock was released, or its
    /// session ended): a standby may try again, a holder has lost it.
    HolderGone { join: u64 },
    /// The lock's holder committed its promotion: its record, naming the epoch (SPEC §6
    /// `follow`). Sent once per epoch while the holder is watched after a join.
    Active(NodeRecord),
    /// The breadcrumb as the active rewrote it within its epoch (SPEC §4.3d), when it is
    /// the record of the active last sent (same incarnation and epoch) with a later
    /// `rewrite`: what fencing that active must name, should the store forget it.
    Rewritten(NodeRecord),
    /// The breadcrumb names the active last sent (same incarnation and epoch, any
    /// rewrite): seen in this link, so that its later absence within the link is a clean
    /// step-down, not a store that forgot it. Sent once per epoch. An active learned from
    /// the lock's record alone proves nothing: a restart can forget the breadcrumb and
    /// keep the lock (the review of stop 42).
    Confirmed(NodeRecord),
    /// SPEC §6b herd-free succession: the member record of `id`, watched instead of the
    /// lock ([`Session::watch_above`]), changed or went (`None`: gone or unreadable).
    AboveChanged {
        id: String,
        record: Option<Box<MemberRecord>>,
    },
    /// The connection to the store was lost and made again within the session (ZooKeeper:
    /// the client is back in its session). The store may have restarted meanwhile, and
    /// one restored from a copy, or that lost its last writes, may have forgotten what
    /// this node saw before (a commit): what the node remembers from before is from an
    /// earlier link (`Elector::forgotten_active`). Stores whose restart ends the session
    /// (Redis and MySQL check the server's run) never send it.
    Reconnected,
    /// The session ended for good; the last event.
    SessionLost,
}

/// A session with the store. Clones share the session; it ends when the last clone is
/// dropped (or the store ends it), and with it everything it holds: the lock, the member
/// record.
pub trait Session: Clone + Send + Sync + 'static {
    /// The store's id of this session (for the log and for `status`).
    fn id(&self) -> SessionId;

    /// The session timeout the store granted, when it tells one (SPEC §4: every interval
    /// follows the smaller of the configured and the granted one).
    fn granted_session_timeout(&self) -> Option<Duration>;

    /// SPEC §6b herd-free succession: while this node waits in the lock's queue, watch the
    /// member record of `above` (the standby placed just above it) instead of the lock,
    /// and report its changes as [`StoreEvent::AboveChanged`]; `None`: watch the lock. The
    /// lock's holder still reaches the events once it commits (the breadcrumb's watch
    /// reads the lock then). A store without watches (one that polls) keeps what it does.
    fn watch_above(&self, above: Option<&str>) {
        let _ = above;
    }

    /// Runs until the session ends, sending [`StoreEvent`]s to `events`: `control` at
    /// once and after each change, the holder's end after each [`join`](Self::join), and
    /// [`StoreEvent::SessionLost`] last.
    fn events(&self, events: mpsc::UnboundedSender<StoreEvent>) -> impl Future<Output = ()> + Send;

    /// Creates whatever the cluster's state needs to exist (parents, tables, keys), or
    /// checks that it does (`NotInitialized` when it cannot be made here).
    fn ensure_cluster(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// SPEC §3a: `NotInitialized`, with the way out, when the store has no init marker
    /// (`warden run` refuses to start then). Stores without a marker: always fine.
    fn check_initialized(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        async { Ok(()) }
    }

    /// SPEC §3a: writes the init marker, with the epoch counter raised to at least
    /// `floor` (`init --force` after a loss); what it did, if anything. Stores without a
    /// marker: nothing.
    fn write_marker(
        &self,
        floor: Option<Epoch>,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send {
        let _ = floor;
        async { Ok(None) }
    }

    /// The member record of `node_id` and the session that holds it, if there is one.
    #[allow(clippy::type_complexity)]
    fn member(
        &self,
        node_id: &str,
    ) -> impl Future<
        Output = Result<Option<(SessionId, Result<MemberRecord, RecordError>)>, StoreError>,
    > + Send;

    /// Registers our member record, held by this session; `Rejected` when another
    /// session holds one for the node id.
    fn create_member(
        &self,
        m: &MemberRecord,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Removes a member record left by an earlier session of this very process.
    fn delete_member(&self, node_id: &str) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Rewrites our member record (role and health changes).
    fn set_member(&self, m: &MemberRecord) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// SPEC §4.2: try to take the lock with `me` as its record. From its answer on, the
    /// events report the end of the holder seen (ours or another's) as join `join`.
    fn join(&self, me: &NodeRecord, join: u64) -> impl Future<Output = JoinOutcome> + Send;

    /// SPEC §4.3a: breadcrumb and control with their versions, and the newest promotion
    /// in history. A missing control is created, so that the commit can check it.
    fn read_state(&self) -> impl Future<Output = Result<TakeoverState, StoreError>> + Send;

    /// SPEC §4.3c: all or nothing, only while we hold the lock and control is at
    /// `control_version`: write the lock's record with the epoch, and the breadcrumb
    /// (created when `breadcrumb_version` is `None`, else at that version).
    fn commit_promotion(
        &self,
        breadcrumb: &NodeRecord,
        breadcrumb_version: Option<Version>,
        control_version: Version,
    ) -> impl Future<Output = WriteOutcome> + Send;

    /// The lease renewal: rewrites our member record only while we hold the lock. Only
    /// its acknowledgement extends the lease.
    fn renew(&self, member: &MemberRecord) -> impl Future<Output = WriteOutcome> + Send;

    /// Rewrites our breadcrumb (SPEC §4.3d: with the service's identity) while it is still
    /// ours for `record.epoch` and we hold the lock.
    fn rewrite_own_breadcrumb(
        &self,
        record: &NodeRecord,
    ) -> impl Future<Output = WriteOutcome> + Send;

    /// Writes `record` back as the breadcrumb (created when `version` is `None`, else at
    /// that version), only while we hold the lock: the store forgot the commit of an
    /// active this node saw (see `Elector::forgotten_active`), or this node's own whose
    /// service outlived its stop (`Elector::own_leftovers_forgotten`), and the breadcrumb
    /// is what fencing, `status` and `fence --confirm` go by.
    fn restore_breadcrumb(
        &self,
        record: &NodeRecord,
        version: Option<Version>,
    ) -> impl Future<Output = WriteOutcome> + Send;

    /// The breadcrumb as stored, with its version; `None` when there is none.
    fn breadcrumb_bytes(
        &self,
    ) -> impl Future<Output = Result<Option<(Vec<u8>, Version)>, StoreError>> + Send;

    /// Compare-and-delete of the breadcrumb (SPEC §3): only if it names `node_id` with
    /// `incarnation` and `epoch` (`None` = any), at the version just read; with
    /// `check_lock`, only while we hold the lock. `Ok(false)`: it names something else.
    /// The same for every backend: a read, then [`delete_breadcrumb_at`] that version.
    ///
    /// [`delete_breadcrumb_at`]: Session::delete_breadcrumb_at
    fn compare_and_delete_breadcrumb(
        &self,
        node_id: &str,
        incarnation: Option<&str>,
        epoch: Option<Epoch>,
        check_lock: bool,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        async move {
            let Some((data, version)) = self.breadcrumb_bytes().await? else {
                return Ok(false);
            };
            if !names_breadcrumb(&data, node_id, incarnation, epoch) {
                return Ok(false);
            }
            self.delete_breadcrumb_at(version, check_lock)
                .await
                .map(|_| true)
        }
    }

    /// Deletes the breadcrumb at `version` (`fence --confirm`).
    fn delete_breadcrumb_at(
        &self,
        version: Version,
        check_lock: bool,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Releases the lock if this session holds it. The caller drops the session after
    /// (SPEC §4.3 "Release the lock").
    fn release(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// [`release`]; with `own` (our node id, incarnation and epoch), first the
    /// compare-and-delete of our breadcrumb while the lock is ours, as
    /// [`compare_and_delete_breadcrumb`] with its `lock` check does (SPEC §4.4, §8: a clean
    /// step down leaves nothing to fence). Answers what became of the breadcrumb (when
    /// `own` was given) and of the lock. A store that can delete both in one write
    /// overrides this (ZooKeeper: a planned switchover's successor waits for one write,
    /// not two).
    ///
    /// [`release`]: Session::release
    /// [`compare_and_delete_breadcrumb`]: Session::compare_and_delete_breadcrumb
    fn release_deleting(
        &self,
        own: Option<(&str, &str, Epoch)>,
    ) -> impl Future<Output = Released> + Send {
        release_in_two_steps(self, own)
    }

    /// History, newest first; unreadable entries are counted and skipped.
    fn read_history(&self) -> impl Future<Output = Result<History, StoreError>> + Send;

    /// Adds an entry first in history (by the order of writes), keeping the newest. When the stored
    /// history was unreadable as a whole, it is kept aside first: the answer names where.
    fn append_history(
        &self,
        entry: &HistoryEntry,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;

    /// Old histories kept beside the current one (unreadable ones set aside, and those
    /// `init --force` moved), by name, sorted.
    fn set_aside(&self) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// Version-checked read-modify-write of `control`: `change` returns `Ok(false)` to
    /// leave it, `Err(reason)` to refuse.
    fn update_control<F>(
        &self,
        change: F,
    ) -> impl Future<Output = Result<Result<Control, String>, StoreError>> + Send
    where
        F: FnMut(&mut Control) -> Result<bool, String> + Send;

    /// [`update_control`](Self::update_control) whose first try starts from `seen`:
    /// `control` as this session read it (a snapshot's) and its version (`None`: absent).
    /// That write goes out without a read first, one round trip less on the way of a
    /// `failover`; a control changed since is read again.
    fn update_control_from<F>(
        &self,
        seen: (Control, Option<Version>),
        change: F,
    ) -> impl Future<Output = Result<Result<Control, String>, StoreError>> + Send
    where
        F: FnMut(&mut Control) -> Result<bool, String> + Send,
    {
        drop(seen);
        self.update_control(change)
    }

    /// Clears `control.failover` only while it is still the request named by `from`, `to`
    /// and `deadline`. `Ok(true)` when cleared or already gone. Every backend shares this
    /// one, on top of its [`update_control`](Self::update_control).
    fn clear_failover_request(
        &self,
        from: &str,
        to: Option<&str>,
        deadline: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        async move {
            let mut other = false;
            self.update_control(|c| {
                other = false;
                match &c.failover {
                    Some(f)
                        if f.from == from && f.to.as_deref() == to && f.deadline == deadline =>
                    {
                        c.failover = None;
                        Ok(true)
                    }
                    Some(_) => {
                        other = true;
                        Ok(false)
                    }
                    None => Ok(false),
                }
            })
            .await?
            .map_err(StoreError::Rejected)?;
            Ok(!other)
        }
    }

    /// Everything `status` and the operator commands read.
    fn snapshot(&self) -> impl Future<Output = Result<ClusterSnapshot, StoreError>> + Send;

    /// The member records, by node id (SPEC §6 `priority`: who else could take a free
    /// lock). By default from a [`snapshot`](Self::snapshot); a backend may read less.
    #[allow(clippy::type_complexity)]
    fn members(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, Result<MemberRecord, RecordError>)>, StoreError>> + Send
    {
        async { Ok(self.snapshot().await?.members) }
    }

    /// Where `what` lives in the store, in the store's words, for messages
    /// (`/warden/rm/breadcrumb`).
    fn name_of(&self, what: Item) -> String;

    /// `init`: creates the cluster's state and repairs its permissions, all but the init
    /// marker ([`write_marker`](Self::write_marker)); what it did, one line each.
    fn init(&self) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// `init --force`: deletes the breadcrumb and control at the versions read, all or
    /// none (`Rejected` when either changed).
    fn delete_takeover_state(
        &self,
        breadcrumb: Option<Version>,
        control: Option<Version>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The epoch the store is at now: every lock taken later gets a greater one.
    fn current_epoch(&self) -> impl Future<Output = Result<Epoch, StoreError>> + Send;

    /// `init --force`: when history records a promotion with an epoch above `epoch` (a
    /// store restored from an old backup), moves it aside, whole, so that it no longer
    /// blocks every promotion. Returns where it went and the epoch that blocked.
    fn move_history_aside_if_above(
        &self,
        epoch: Epoch,
    ) -> impl Future<Output = Result<Option<(String, Epoch)>, StoreError>> + Send;
}

/// A part of a cluster's state, for [`Session::name_of`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    /// The cluster as a whole.
    Cluster,
    Lock,
    Breadcrumb,
    Control,
    History,
}

/// Why registering a node (SPEC §4.9) did not succeed.
#[derive(Debug)]
pub enum RegisterError {
    /// The store failed; try again with a new session.
    Store(StoreError),
    /// Another live warden runs with our node id, or on another machine with our machine
    /// id: the message says where.
    Duplicate(String),
}

impl From<StoreError> for RegisterError {
    fn from(e: StoreError) -> Self {
        RegisterError::Store(e)
    }
}

/// What [`Session::release_deleting`] did.
#[derive(Debug)]
pub struct Released {
    /// Whether our breadcrumb was deleted (`Ok(false)`: it named something else, or the
    /// lock was not ours); `None` when none was to be deleted.
    pub breadcrumb: Option<Result<bool, StoreError>>,
    pub lock: Result<(), StoreError>,
}

/// [`Session::release_deleting`] as two steps: the compare-and-delete of our breadcrumb
/// (with its `lock` check), then the release.
pub(crate) async fn release_in_two_steps<S: Session>(
    s: &S,
    own: Option<(&str, &str, Epoch)>,
) -> Released {
    let breadcrumb = match own {
        // Tried again while the lock is still ours: see [`RELEASE_TRIES`].
        Some((node_id, incarnation, epoch)) => Some(
            sent_until_known(
                || s.compare_and_delete_breadcrumb(node_id, Some(incarnation), Some(epoch), true),
                |done| matches!(done, Err(StoreError::Unknown(_))),
            )
            .await,
        ),
        None => None,
    };
    Released {
        breadcrumb,
        lock: s.release().await,
    }
}

/// How many times a clean step-down sends the delete of its breadcrumb (with the lock's,
/// where one write does both) when no answer came back. A breadcrumb left behind makes
/// the successor fence a node that stopped cleanly, and a fence that cannot reach it
/// (signal only, another machine) holds the switchover until the operator's
/// `fence --confirm` (the simulation's seed 309456: one lost reply on a lossy link).
pub const RELEASE_TRIES: u32 = 3;

/// [`Session::release_deleting`], sent again (up to [`RELEASE_TRIES`] in all) while
/// neither the breadcrumb's nor the lock's fate is known: the lock is then still ours or
/// gone with the breadcrumb, and a second look tells which.
pub async fn release_deleting_retried<S: Session>(
    s: &S,
    own: Option<(&str, &str, Epoch)>,
) -> Released {
    sent_until_known(
        || s.release_deleting(own),
        |done| {
            matches!(
                (&done.breadcrumb, &done.lock),
                (
                    Some(Err(StoreError::Unknown(_))),
                    Err(StoreError::Unknown(_))
                )
            )
        },
    )
    .await
}

/// Sends `send` until `unknown` says its answer is known, [`RELEASE_TRIES`] times at most;
/// the last answer.
async fn sent_until_known<T, F: Future<Output = T>>(
    mut send: impl FnMut() -> F,
    unknown: impl Fn(&T) -> bool,
) -> T {
    let mut tries = 1;
    loop {
        let done = send().await;
        if tries >= RELEASE_TRIES || !unknown(&done) {
            return done;
        }
        tries += 1;
    }
}

/// Whether breadcrumb bytes `data` name `node_id` with `incarnation` and `epoch` (`None` =
/// any): the compare of the breadcrumb's compare-and-delete (SPEC §3).
pub(crate) fn names_breadcrumb(
    data: &[u8],
    node_id: &str,
    incarnation: Option<&str>,
    epoch: Option<Epoch>,
) -> bool {
    crate::record::parse::<NodeRecord>(data).is_ok_and(|cur| {
        cur.node_id == node_id
            && incarnation.is_none_or(|i| i == cur.incarnation)
            && epoch.is_none_or(|e| Some(e) == cur.epoch)
    })
}

/// SPEC §4.9: registers `me` in `session` and returns `control` as it is. A member record
/// of our node id held by another session is our own earlier process's when
/// [`predecessor_is_gone`] says so (`is_running` tells whether a pid with a start time
/// still runs on this host): then this waits, in the same session, for that session to
/// end; anything else is another warden with our node id. `waiting_logged` keeps the
/// "waiting" line to once per start.
///
/// With `clone_check` (at the first start; the session timeout), a live member of any
/// other node id that carries our machine id with another boot id is a second machine
/// with our `/etc/machine-id` (cloned from one image): once our own record is in, so that
/// of two clones starting at once at least one sees the other, this refuses to start,
/// after waiting up to `clone_check` for such a record to go (this machine's own before a
/// fast reboot, of a second node id, goes when its session expires; a clone's stays).
pub async fn register<S: Session>(
    session: &S,
    me: &MemberRecord,
    is_running: impl Fn(u32, u64) -> bool,
    waiting_logged: &mut bool,
    clone_check: Option<Duration>,
) -> Result<(), RegisterError> {
    // A session that expires counts from its last heartbeat, and ZooKeeper notices on its
    // next tick: half a session timeout more covers both.
    let bound = clone_check.map(|wait| {
        let wait = wait.max(session.granted_session_timeout().unwrap_or(wait));
        wait + wait / 2
    });
    register_member(session, me, is_running, waiting_logged, bound).await?;
    let Some(bound) = bound else {
        return Ok(());
    };
    let started = tokio::time::Instant::now();
    let host = record::HostIdentity::of(&me.node);
    let mut logged = false;
    loop {
        let clones: Vec<MemberRecord> = session
            .members()
            .await?
            .into_iter()
            .filter_map(|(id, m)| m.ok().filter(|_| id != me.node.node_id))
            .filter(|m| host.same_machine_other_boot(&m.node))
            .collect();
        let Some(clone) = clones.first() else {
            return Ok(());
        };
        let bound = bound_for(bound, clone);
        if started.elapsed() >= bound {
            // Leave no member record behind: the cluster must not count this node.
            if let Err(e) = session.delete_member(&me.node.node_id).await {
                warn!("could not delete this node's member record before exiting: {e}");
            }
            return Err(cloned_machine(&me.node, &clone.node));
        }
        if !logged {
            warn!(
                "the member {} on host {} carries this machine's id with another boot ({}): \
                 this machine before a reboot, whose session will expire, or a clone with the \
                 same /etc/machine-id; waiting up to {} to tell",
                record::printable(&clone.node.node_id),
                record::printable(&clone.node.host),
                record::printable(&clone.node.boot_id),
                humantime::format_duration(bound)
            );
            logged = true;
        }
        tokio::time::sleep(PREDECESSOR_POLL).await;
    }
}

/// The longest a record of this machine's previous boot may take to go: `bound`, or
/// half as long again as the session timeout that record says it ran with, when that
/// was longer (the timeout was lowered before a fast reboot: the old session still
/// lasts its own). At most [`MAX_PREDECESSOR_WAIT`], so that a garbage value cannot
/// keep a clone waiting for ever.
fn bound_for(bound: Duration, other: &MemberRecord) -> Duration {
    let theirs = other
        .session_timeout
        .as_deref()
        .and_then(|t| humantime::parse_duration(t).ok())
        .map_or(Duration::ZERO, |t| t + t / 2);
    bound.max(theirs.min(MAX_PREDECESSOR_WAIT))
}

/// The longest a start waits for a record of this machine's previous boot to go (an hour:
/// far above any session timeout a cluster runs with).
const MAX_PREDECESSOR_WAIT: Duration = Duration::from_secs(3600);

/// The refusal of a machine whose id `clone`, a live member, carries with another boot.
fn cloned_machine(me: &NodeRecord, clone: &NodeRecord) -> RegisterError {
    RegisterError::Duplicate(format!(
        "the member {} on host {} (boot {}) carries this machine's id {} from \
         /etc/machine-id, and this is host {} on boot {}: two machines share one machine id \
         (cloned from one image?), so neither can tell its own leftovers from the other's; \
         give each machine its own id (on one of them: rm /etc/machine-id && \
         systemd-machine-id-setup, then restart its services) — refusing to start",
        record::printable(&clone.node_id),
        record::printable(&clone.host),
        record::printable(&clone.boot_id),
        me.machine_id,
        me.host,
        me.boot_id
    ))
}

/// SPEC §4.9: creates our member record, or waits for our killed predecessor's to go.
/// With `clone_bound`, a predecessor of another boot of this machine whose record is
/// still there after that long is no predecessor: its session lives on, so it is a clone
/// with our machine id (and, cloned with it, our config's node id).
async fn register_member<S: Session>(
    session: &S,
    me: &MemberRecord,
    is_running: impl Fn(u32, u64) -> bool,
    waiting_logged: &mut bool,
    clone_bound: Option<Duration>,
) -> Result<(), RegisterError> {
    session.ensure_cluster().await?;
    let mut other_boot_since: Option<tokio::time::Instant> = None;
    loop {
        match session.member(&me.node.node_id).await? {
            None => match session.create_member(me).await {
                Ok(()) => return Ok(()),
                Err(StoreError::Rejected(_)) => continue,
                Err(e) => return Err(e.into()),
            },
            Some((owner, _)) if owner == session.id() => return Ok(()),
            Some((_, Ok(other))) if other.node.incarnation == me.node.incarnation => {
                // Our own earlier session, closing: make room.
                session.delete_member(&me.node.node_id).await?;
            }
            Some((_, Ok(other))) if predecessor_is_gone(&me.node, &other.node, &is_running) => {
                let other_boot =
                    record::HostIdentity::of(&me.node).same_machine_other_boot(&other.node);
                if let (Some(bound), true) = (clone_bound, other_boot) {
                    let since = *other_boot_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() >= bound_for(bound, &other) {
                        return Err(cloned_machine(&me.node, &other.node));
                    }
                }
                if !*waiting_logged {
                    warn!(
                        old_pid = other.node.pid,
                        "an earlier warden for node {} on this machine (pid {}, boot {}) is \
                         gone but its session is still open; waiting for it to expire \
                         (up to session_timeout)",
                        me.node.node_id,
                        other.node.pid,
                        other.node.boot_id
                    );
                    *waiting_logged = true;
                }
                // Poll again in this same session: a new session per look would leave a
                // trail of short-lived sessions for as long as the old one lasts.
                tokio::time::sleep(PREDECESSOR_POLL).await;
            }
            Some((_, other)) => {
                let who = match other {
                    Ok(o) => format!("on host {} (pid {})", o.node.host, o.node.pid),
                    Err(e) => format!("(its member record is unreadable: {e})"),
                };
                return Err(RegisterError::Duplicate(format!(
                    "another warden with node_id {:?} is running {who}; each node needs a \
                     unique cluster.node_id — refusing to start",
                    me.node.node_id
                )));
            }
        }
    }
}

/// SPEC §4.9: a member record of our node id held by another session is our own killed
/// predecessor's (wait for its session to expire) when it names this machine and either
/// another boot (a fast reboot) or, on this boot and in this pid namespace, a warden
/// process that no longer runs (a restart right after `kill -9`). Anything else is
/// another live warden with our node id.
pub fn predecessor_is_gone(
    me: &NodeRecord,
    other: &NodeRecord,
    is_running: impl Fn(u32, u64) -> bool,
) -> bool {
    let host = record::HostIdentity::of(me);
    if !host.same_machine(other) {
        return false;
    }
    if host.same_boot(other) {
        return !is_running(other.pid, other.start_time);
    }
    // Same machine, another boot: every process of that boot is gone. (Same boot but
    // another pid namespace is another container on this kernel: not ours to judge.)
    other.boot_id != me.boot_id
}

/// A random, positive 63-bit session id (the store's only proof of who holds what).
pub(crate) fn random_session_id() -> i64 {
    let mut b = [0u8; 8];
    // getrandom through std's hasher seed would be weaker; /dev/urandom is always there
    // on Linux, and a clock-and-pid mix is the fallback.
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        b = (t ^ (u64::from(std::process::id()) << 40)).to_le_bytes();
    }
    (i64::from_le_bytes(b) & i64::MAX).max(1)
}

/// What a store without a session service of its own (MySQL, Redis) needs to know: its
/// `[coordination.<backend>]` table, the password read, and the cluster.
#[derive(Clone, Debug)]
pub struct StoreSettings {
    /// `mysql://user@host:port/db`, `redis://host:port/db`: never with a password.
    pub url: String,
    pub password: Option<String>,
    pub session_timeout: Duration,
    pub poll_interval: Duration,
    pub connect_timeout: Duration,
    /// `table_prefix` or `key_prefix`.
    pub prefix: String,
    pub cluster: String,
    /// Redis `replicas_ack` (SPEC §3a); 0 for MySQL.
    pub replicas_ack: u32,
}

impl StoreSettings {
    /// The settings of the configured MySQL or Redis store, its password read; the error
    /// names the key to fix.
    pub fn from_config(cfg: &crate::config::Config) -> Result<StoreSettings, String> {
        let view = cfg.store().ok_or_else(|| {
            format!(
                "backend = \"{0}\" needs a [coordination.{0}] table",
                cfg.coordination.backend.as_str()
            )
        })?;
        Ok(StoreSettings {
            url: view.url.to_string(),
            password: cfg.read_store_password().map_err(|e| e.to_string())?,
            session_timeout: view.session_timeout,
            poll_interval: view.poll_interval,
            connect_timeout: view.connect_timeout,
            prefix: view.prefix.cloned().unwrap_or_default(),
            cluster: cfg.cluster.name.clone(),
            replicas_ack: view.replicas_ack,
        })
    }

    /// Each statement, script or transaction gets at most this long ([`op_timeout`]).
    pub fn op_timeout(&self) -> Duration {
        op_timeout(self.session_timeout, self.connect_timeout)
    }
}

/// Each store call gets at most this long. A third of the session timeout keeps a renewal
/// that hangs from using up the lease before the next is tried; `connect_timeout` caps it
/// for operators' commands.
pub(crate) fn op_timeout(session_timeout: Duration, connect_timeout: Duration) -> Duration {
    (session_timeout / 3)
        .min(connect_timeout)
        .max(Duration::from_millis(100))
}

/// How a store call ended when it did not succeed, in the three kinds the election acts on.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store answered no: the node exists, does not exist, or has another version.
    #[error("{0}")]
    Rejected(String),
    /// Not known whether it happened: connection loss, timeout, no answer.
    #[error("outcome unknown: {0}")]
    Unknown(String),
    /// The store has no cluster state to work on: never initialized (`warden init`), or
    /// it lost it (wiped, restored). The text says which command helps.
    #[error("{0}")]
    NotInitialized(String),
    /// The store is set up in a way warden cannot be safe on (Redis evicting keys); the
    /// text names the setting and the fix. A configuration error of the store's: exit 2.
    #[error("{0}")]
    Unsuitable(String),
    /// The session expired or was closed; nothing more can be done in it.
    #[error("the coordination session was lost: {0}")]
    SessionLost(String),
    /// Authentication was refused or permissions forbid the operation; the backend's
    /// text names the store, what was refused and which setting or grant to check.
    #[error("{0}")]
    Auth(String),
    /// No session could be opened in time.
    #[error("cannot reach {store} at {connect} within {timeout}: {reason}; check {key} and that {store} is up")]
    Unreachable {
        /// The store's name in words ("ZooKeeper", "MySQL").
        store: &'static str,
        /// The config key that says where it is.
        key: &'static str,
        connect: String,
        timeout: String,
        reason: String,
    },
}

impl StoreError {
    /// Whether the store's own setup is wrong for warden (exit 2, like a config error).
    pub fn is_unsuitable(&self) -> bool {
        matches!(self, StoreError::Unsuitable(_))
    }

    /// Whether the operator's command should exit 3 (coordination unreachable or auth).
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            StoreError::Unreachable { .. } | StoreError::Auth(_) | StoreError::SessionLost(_)
        )
    }
}

/// The greatest epoch the floor counts (2^53, exclusive; SPEC §3a). Nothing hands out
/// such epochs (a counter grows by one a promotion), and Redis's Lua compares numbers as
/// doubles, exact only below it: an entry above it is garbage, skipped by every reader of
/// the floor and overwritten by the next raise, so that one bad value can never block
/// every promotion for good.
pub const MAX_KEPT_EPOCH: Epoch = 1 << 53;

/// Which active a session's events last named: `Active` once per epoch of the lock's
/// committed record, `Rewritten` for each later rewrite of that record's breadcrumb
/// (§4.3d). The lock and the breadcrumb are read apart (two ZooKeeper watches, two reads
/// of a polled store), so either may be seen first: a rewrite seen before its epoch's
/// lock data is sent right after that `Active`.
#[derive(Debug, Default)]
pub struct ActiveTracker {
    sent: Option<NodeRecord>,
    breadcrumb: Option<NodeRecord>,
    /// The epoch last sent as [`StoreEvent::Confirmed`].
    confirmed: Option<Epoch>,
}

impl ActiveTracker {
    /// The lock's committed record as read now.
    pub fn lock(&mut self, record: &NodeRecord) -> Vec<StoreEvent> {
        let mut out = Vec::new();
        if record.epoch.is_some() && record.epoch != self.sent.as_ref().and_then(|s| s.epoch) {
            self.sent = Some(record.clone());
            out.push(StoreEvent::Active(record.clone()));
            out.extend(self.confirmed());
            out.extend(self.rewritten());
        }
        out
    }

    /// Whether `record` (a breadcrumb's) names another epoch than the active last sent:
    /// a commit the lock's record has not shown yet.
    pub fn is_new(&self, record: &NodeRecord) -> bool {
        record.epoch.is_some() && record.epoch != self.sent.as_ref().and_then(|s| s.epoch)
    }

    /// The breadcrumb as read now (`None`: there is none, or it is unreadable).
    pub fn breadcrumb(&mut self, record: Option<NodeRecord>) -> Vec<StoreEvent> {
        self.breadcrumb = record;
        let mut out: Vec<StoreEvent> = self.confirmed().into_iter().collect();
        out.extend(self.rewritten());
        out
    }

    /// The client is in a new link with the store (a reconnection within the session):
    /// the next breadcrumb read that names the active confirms it again, in that link.
    /// Without it an active confirmed once stayed unconfirmed after any reconnection until
    /// the next promotion, and a clean step-down it made later looked like a commit the
    /// store forgot: the winner fenced it (the review of stop 48).
    pub fn relinked(&mut self) {
        self.confirmed = None;
    }

    fn confirmed(&mut self) -> Option<StoreEvent> {
        let (sent, b) = (self.sent.as_ref()?, self.breadcrumb.as_ref()?);
        if !sent.same_incarnation(b) || sent.epoch != b.epoch || self.confirmed == sent.epoch {
            return None;
        }
        self.confirmed = sent.epoch;
        Some(StoreEvent::Confirmed(sent.clone()))
    }

    fn rewritten(&mut self) -> Option<StoreEvent> {
        let (sent, b) = (self.sent.as_ref()?, self.breadcrumb.as_ref()?);
        if !sent.same_incarnation(b)
            || sent.epoch != b.epoch
            || b.rewrite.unwrap_or(0) <= sent.rewrite.unwrap_or(0)
        {
            return None;
        }
        self.sent = Some(b.clone());
        Some(StoreEvent::Rewritten(b.clone()))
    }
}

/// A lock's record, when it names a committed promotion (an epoch).
pub(crate) fn committed(data: &[u8]) -> Option<NodeRecord> {
    record::parse::<NodeRecord>(data)
        .ok()
        .filter(|r| r.epoch.is_some())
}

/// SPEC §3a at the commit: whether the floor (`floor`, its greatest entry as it is at the
/// commit) refuses the commit of `new`. Refused when the floor holds its epoch: some node
/// has seen it, or a later one, before this commit (stop 40's finding). But a commit of
/// the breadcrumb again (`current`, the one the commit replaces at the version it checks,
/// names the same incarnation at the same epoch: a holder that joined again within its
/// hold, or whose renewal was refused, commits once more to start its lease) is refused
/// only by a floor *above* its epoch: the nodes that saw this very commit, the committer
/// first, publish its epoch, and a floor at it would refuse every such commit for good
/// (the review of stop 41).
pub fn floor_refuses(floor: Option<Epoch>, new: &NodeRecord, current: Option<&NodeRecord>) -> bool {
    let again = commits_again(new, current);
    match (floor, new.epoch) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(f), Some(e)) if again => f > e,
        (Some(f), Some(e)) => f >= e,
    }
}

/// Whether a commit of `new` over `current` (the breadcrumb it replaces) commits that
/// breadcrumb again: the same incarnation at the same epoch (see [`floor_refuses`]).
pub fn commits_again(new: &NodeRecord, current: Option<&NodeRecord>) -> bool {
    current.is_some_and(|c| c.same_incarnation(new) && c.epoch == new.epoch)
}

/// SPEC §3a: a store without its init marker (or epoch counter), or whose epoch counter
/// is below an epoch a member has seen (`seen`, by node `who` when known), lost data: why,
/// in words with the way out, or `None`.
pub fn lost_data(
    marker_missing: bool,
    counter: Option<Epoch>,
    seen: Option<Epoch>,
    who: Option<&str>,
) -> Option<String> {
    const WAY_OUT: &str = "no node promotes until an operator has checked that no old active \
                           still serves and run `warden init --force`";
    if marker_missing {
        return Some(format!(
            "the store has no init marker or epoch counter: if wardens of this cluster ran \
             against it, it lost data (wiped, restarted without persistence, or replaced), and \
             {WAY_OUT}; a new cluster needs `warden init`"
        ));
    }
    let (counter, seen) = (counter?, seen?);
    (counter < seen).then(|| {
        let who = who.map_or("a node".to_string(), |n| {
            format!("node {}", record::printable(n))
        });
        format!(
            "the store lost data: its epoch counter {counter} is below epoch {seen}, which {who} \
             has seen (restored from an old backup or snapshot, or failed over to a stale \
             replica); {WAY_OUT}"
        )
    })
}

/// Everything `status` and the operator commands read about a cluster.
#[derive(Debug, Clone, Default)]
pub struct ClusterSnapshot {
    /// The lock holder's record (or why it could not be read) and the epoch the store
    /// gave the lock.
    pub lock: Option<(Result<NodeRecord, RecordError>, Epoch)>,
    /// The session that holds the lock: the truth about who holds it, whatever its data
    /// says. `None` when there is no lock or it was not read.
    pub lock_owner: Option<SessionId>,
    pub breadcrumb: Option<(Result<NodeRecord, RecordError>, Version)>,
    /// `control` as the daemons use it: an unreadable one counts as the default.
    pub control: Control,
    pub control_version: Option<Version>,
    /// Why `control` could not be read, when it exists and could not.
    pub control_unreadable: Option<String>,
    /// Member records; unreadable ones are listed by node id with the error.
    pub members: Vec<(String, Result<MemberRecord, RecordError>)>,
    /// The session that holds each member record, by node id.
    pub member_sessions: Vec<(String, SessionId)>,
    pub history: History,
    /// Old histories kept beside `history` (`history.unreadable-*`, `history.old-*`).
    pub set_aside: Vec<String>,
    /// The store's init marker is missing (SPEC §3a; ZooKeeper has none: never).
    pub marker_missing: bool,
    /// The store's epoch counter (ZooKeeper: the greatest zxid read), when known.
    pub epoch_counter: Option<Epoch>,
    /// SPEC §3a, the floor as the store keeps it for good: the greatest `epoch_seen` of any
    /// node, alive or not, and whose it is (Redis `:seen`, MySQL every member row and the
    /// rows that keep each node's). `None` where the store keeps none (ZooKeeper: its
    /// members are ephemeral), or none was seen.
    pub kept_floor: Option<(Epoch, String)>,
    /// The epoch counter exists but holds no epoch (garbage, a key of another type): the
    /// store lost data, never a new cluster.
    pub counter_unreadable: bool,
    /// The epoch of a lock record that expired and is still stored (MySQL: a holder that
    /// crashed leaves its row), which `lock` leaves out: no lock, but an epoch that
    /// `init --force` must stay above.
    pub expired_lock_epoch: Option<Epoch>,
    /// Store items that hold what warden never writes there (a Redis key of another
    /// type), one sentence each: which item, what is wrong with it, and what replaces it.
    /// Readers skip them; `status` shows them (issue 31, 5).
    pub garbage: Vec<String>,
}

impl ClusterSnapshot {
    /// A snapshot that has read the lock: its data, the epoch the store gave it and the
    /// session that holds it. Each backend then adds what else it reads.
    pub(crate) fn of_lock(lock: Option<(Vec<u8>, Epoch, SessionId)>) -> ClusterSnapshot {
        let (lock, lock_owner) = match lock {
            Some((data, epoch, owner)) => (
                Some((record::parse::<NodeRecord>(&data), epoch)),
                Some(owner),
            ),
            None => (None, None),
        };
        ClusterSnapshot {
            lock,
            lock_owner,
            ..ClusterSnapshot::default()
        }
    }

    /// Adds the breadcrumb and control as read, with their versions.
    pub(crate) fn add_items(
        &mut self,
        breadcrumb: Option<(Vec<u8>, i64)>,
        control: Option<(Vec<u8>, i64)>,
    ) {
        self.breadcrumb = items::snapshot_breadcrumb(breadcrumb);
        (self.control, self.control_version, self.control_unreadable) =
            items::snapshot_control(control);
    }

    /// Whether a member id read from the store is one anyone could name on a command
    /// line; one that is not is listed with why, and its record is not read.
    pub(crate) fn valid_member_id(&mut self, id: &str) -> bool {
        match record::check_node_id(id) {
            Ok(()) => true,
            Err(e) => {
                self.members.push((id.to_string(), Err(e)));
                false
            }
        }
    }

    /// Adds a member as read: its session and its record.
    pub(crate) fn add_member(&mut self, id: String, session: SessionId, data: &[u8]) {
        self.member_sessions.push((id.clone(), session));
        self.members.push((id, record::parse::<MemberRecord>(data)));
    }

    /// SPEC §3a, the floor: the greatest `epoch_seen` of the live member records and of
    /// what the store keeps for nodes alive or not, and whose it is. `status`, `init` and
    /// the join read this same floor.
    pub fn floor(&self) -> Option<(Epoch, &str)> {
        self.members
            .iter()
            .filter_map(|(id, m)| Some((m.as_ref().ok()?.node.epoch_seen?, id.as_str())))
            .chain(self.kept_floor.iter().map(|(e, id)| (*e, id.as_str())))
            .filter(|(e, _)| *e < MAX_KEPT_EPOCH)
            .max()
    }

    /// SPEC §3a: why the store lost data, in words with the way out, or `None`.
    pub fn lost_data(&self) -> Option<String> {
        if self.counter_unreadable {
            return Some(
                "the store's epoch counter holds no epoch (garbage, or a value of another \
                 type): no node promotes until an operator has checked that no old active \
                 still serves and run `warden init --force`, which replaces it"
                    .to_string(),
            );
        }
        let seen = self.floor();
        lost_data(
            self.marker_missing,
            self.epoch_counter,
            seen.map(|(e, _)| e),
            seen.map(|(_, node)| node),
        )
    }

    /// The node id whose session owns the lock, or, when sessions were not read, the one
    /// the lock's record names.
    pub fn lock_holder_id(&self) -> Option<&str> {
        let (record, _) = self.lock.as_ref()?;
        match self.lock_owner {
            Some(owner) => self
                .member_sessions
                .iter()
                .find(|(_, s)| *s == owner)
                .map(|(id, _)| id.as_str()),
            None => record.as_ref().ok().map(|h| h.node_id.as_str()),
        }
    }

    /// The active node: the lock holder once its member record says `active`. The holder
    /// is found by its session, so garbage written into the lock's data cannot make
    /// `status` contradict the node's own `/active`; its record is the lock's when that
    /// is readable and names it, else the member's own.
    pub fn active(&self) -> Option<(&NodeRecord, &MemberRecord)> {
        let (record, _) = self.lock.as_ref()?;
        let holder = self.lock_holder_id()?;
        let member = self.members.iter().find_map(|(id, m)| match m {
            Ok(m) if id == holder && m.role == record::Role::Active => Some(m),
            _ => None,
        })?;
        match record {
            Ok(h) if h.node_id == holder && h.incarnation == member.node.incarnation => {
                Some((h, member))
            }
            // Sessions read: the session is the proof, whatever the data says.
            _ if self.lock_owner.is_some() => Some((&member.node, member)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(inc: &str, epoch: Epoch, rewrite: Option<u64>) -> NodeRecord {
        NodeRecord {
            node_id: "n1".into(),
            incarnation: inc.into(),
            epoch: Some(epoch),
            rewrite,
            ..Default::default()
        }
    }

    #[test]
    fn the_tracker_sends_each_active_once_and_each_later_rewrite_of_it() {
        let mut t = ActiveTracker::default();
        let commit = rec("a", 5, None);
        assert_eq!(t.lock(&commit), vec![StoreEvent::Active(commit.clone())]);
        assert_eq!(t.lock(&commit), vec![]);
        // The breadcrumb as committed confirms it (once), then rewritten; an older rewrite
        // read late is not sent, nor one of another incarnation or epoch.
        assert_eq!(
            t.breadcrumb(Some(commit.clone())),
            vec![StoreEvent::Confirmed(commit.clone())]
        );
        assert_eq!(t.breadcrumb(Some(commit.clone())), vec![]);
        let r2 = rec("a", 5, Some(2));
        assert_eq!(
            t.breadcrumb(Some(r2.clone())),
            vec![StoreEvent::Rewritten(r2.clone())]
        );
        assert_eq!(t.breadcrumb(Some(rec("a", 5, Some(1)))), vec![]);
        assert_eq!(t.breadcrumb(Some(rec("b", 5, Some(9)))), vec![]);
        assert_eq!(t.breadcrumb(Some(rec("a", 4, Some(9)))), vec![]);
        assert_eq!(t.breadcrumb(None), vec![]);
        // The lock's data again (a re-armed watch) sends nothing more.
        assert_eq!(t.lock(&commit), vec![]);
        // A rewrite read before its epoch's lock data follows that Active.
        let r1 = rec("c", 6, Some(1));
        assert_eq!(t.breadcrumb(Some(r1.clone())), vec![]);
        let commit6 = rec("c", 6, None);
        assert_eq!(
            t.lock(&commit6),
            vec![
                StoreEvent::Active(commit6.clone()),
                StoreEvent::Confirmed(commit6.clone()),
                StoreEvent::Rewritten(r1.clone())
            ]
        );
        // A lock whose breadcrumb is gone (a restart forgot it) confirms nothing.
        let mut t = ActiveTracker::default();
        assert_eq!(t.breadcrumb(None), vec![]);
        let commit7 = rec("d", 7, None);
        assert_eq!(t.lock(&commit7), vec![StoreEvent::Active(commit7.clone())]);
        assert_eq!(t.breadcrumb(Some(rec("a", 5, None))), vec![]);
    }
}
