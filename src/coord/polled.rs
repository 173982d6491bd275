//! What the stores without a session service of their own (MySQL, Redis) share: a session
//! is a random id whose member record a keepalive task touches every `session_timeout /
//! 6`, and the events are found by reading `control` and the lock every `poll_interval`
//! (sooner when the backend has a way to be woken).

use super::{StoreError, StoreEvent};
use crate::record::{self, Epoch, JoinOutcome, NodeRecord};
use std::future::Future;
use std::sync::{Mutex, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// A session's state that its keepalive and its events share.
pub struct Core {
    pub id: i64,
    pub session_timeout: Duration,
    pub poll_interval: Duration,
    /// The node id whose member record this session holds, once registered.
    pub member: Mutex<Option<String>>,
    /// The latest join and the holder's session it saw.
    pub joined: watch::Sender<Option<(u64, i64)>>,
    /// Set once the session is lost.
    pub lost: watch::Sender<bool>,
}

impl Core {
    pub fn new(id: i64, session_timeout: Duration, poll_interval: Duration) -> Core {
        Core {
            id,
            session_timeout,
            poll_interval,
            member: Mutex::new(None),
            joined: watch::Sender::new(None),
            lost: watch::Sender::new(false),
        }
    }

    /// The outcome of join `join`: what it found and the holder's session it saw, which
    /// the events then watch (`None`: nothing known, [`JoinOutcome::Unknown`]).
    pub fn settle_join(&self, join: u64, found: Option<(JoinOutcome, i64)>) -> JoinOutcome {
        match found {
            Some((outcome, holder)) => {
                self.joined.send_replace(Some((join, holder)));
                outcome
            }
            None => JoinOutcome::Unknown,
        }
    }

    /// A join found this session's member record gone or another session's (the store
    /// forgot it: a restore, a wipe, a failover to a lagging replica): the session is lost,
    /// as the keepalive would find at its next touch. A session the store no longer knows
    /// never takes the lock: the wait of a new session (SPEC §3a) counts from one the store
    /// knows.
    pub fn gone(&self) {
        tracing::warn!(
            session = %super::SessionId(self.id),
            "taking the lock found the member record of this session gone or taken: the \
             session is lost"
        );
        self.lost.send_replace(true);
    }

    /// A join or a keepalive found the store restarted or failed over since this session
    /// began (`what` changed: Redis's `run_id`, MySQL's server identity): the session is
    /// lost. Such a store may have lost exactly its last writes, a promotion among them,
    /// while this older session survived in it; its holder may still be inside its lease.
    /// The new session waits one session timeout before it joins (SPEC §3a), as after any
    /// loss, by when that lease has ended. Never a holder's keepalive: a holder whose lock
    /// survived the restart keeps it.
    pub fn restarted(&self, what: &str) {
        tracing::warn!(
            session = %super::SessionId(self.id),
            "the store restarted or failed over since this session began ({what} \
             changed): it may have forgotten its last writes, a promotion among them, so \
             this session takes no lock; the next one waits one session timeout before it \
             joins"
        );
        self.lost.send_replace(true);
    }

    /// Records that this session now holds `node`'s member record.
    pub fn registered(&self, node: &str) {
        *self.member.lock().unwrap_or_else(|p| p.into_inner()) = Some(node.to_string());
    }
}

/// What a keepalive found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Touched {
    /// The member record is this session's, touched.
    Alive,
    /// The member record is gone or another session's.
    Gone,
    /// The server restarted or failed over since this session registered (`what`
    /// changed), and the lock is not this session's: the session ends (see
    /// [`Core::restarted`]). At the keepalive, not only at the next join: a standby that
    /// saw the last promotion registers again at once, saying so
    /// ([`crate::record::MemberRecord::remembers`]), before a node that never saw it can
    /// win (the simulation's seed 308747).
    Restarted(&'static str),
}

/// A backend's reads and writes the shared loops need.
pub trait Polled: Send + Sync + 'static {
    fn core(&self) -> &Core;
    /// Touches `node`'s member record (and the lock while it names this session).
    fn touch(&self, node: &str) -> impl Future<Output = Result<Touched, StoreError>> + Send;
    /// `control`'s data and version, if it exists.
    fn read_control(
        &self,
    ) -> impl Future<Output = Result<Option<(Vec<u8>, i64)>, StoreError>> + Send;
    /// The live lock's session and record, if it is held.
    fn read_holder(
        &self,
    ) -> impl Future<Output = Result<Option<(i64, Vec<u8>)>, StoreError>> + Send;
    /// The breadcrumb's data and version, if it exists.
    fn read_breadcrumb(
        &self,
    ) -> impl Future<Output = Result<Option<(Vec<u8>, i64)>, StoreError>> + Send;
}

/// The keepalive task: marks the session lost when its member record is gone or taken, or
/// no touch was acknowledged for `session_timeout`. Ends with the session.
pub async fn keepalive<P: Polled>(p: Weak<P>) {
    let Some(every) = p.upgrade().map(|p| p.core().session_timeout / 6) else {
        return;
    };
    let mut last_ack = Instant::now();
    loop {
        tokio::time::sleep(every).await;
        let Some(p) = p.upgrade() else { return };
        let c = p.core();
        if *c.lost.borrow() {
            return;
        }
        let node = c.member.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(node) = node else {
            last_ack = Instant::now();
            continue;
        };
        let sent = Instant::now();
        match p.touch(&node).await {
            Ok(Touched::Alive) => last_ack = sent,
            Ok(Touched::Restarted(what)) => {
                c.restarted(what);
                return;
            }
            // Gone, or taken; a store without its tables has none either.
            Ok(Touched::Gone) | Err(StoreError::NotInitialized(_)) => {
                tracing::warn!(
                    session = %super::SessionId(c.id),
                    "the member record of this session is gone or taken: the session is lost"
                );
                c.lost.send_replace(true);
                return;
            }
            Err(e) => {
                if sent.duration_since(last_ack) >= c.session_timeout {
                    tracing::warn!(
                        session = %super::SessionId(c.id),
                        "no keepalive acknowledged for the session timeout ({e}): the session \
                         is lost"
                    );
                    c.lost.send_replace(true);
                    return;
                }
            }
        }
    }
}

/// The events of a polled session: `control` at once and after each change, the holder's
/// committed record and its end after each join, `SessionLost` last. `wake` resolves when
/// the backend hears of a change before the next poll (Redis's events channel); a backend
/// without one passes a future that never resolves.
pub async fn events<P: Polled, W, F>(p: &P, events: mpsc::UnboundedSender<StoreEvent>, mut wake: W)
where
    W: FnMut() -> F,
    F: Future<Output = ()>,
{
    let c = p.core();
    let mut lost = c.lost.subscribe();
    let mut joined = c.joined.subscribe();
    let mut armed = *joined.borrow_and_update();
    let mut control_seen: Option<Option<i64>> = None;
    let mut tracker = super::ActiveTracker::default();
    let mut breadcrumb_seen: Option<(Option<i64>, Option<Epoch>, Option<i64>)> = None;
    let mut first = true;
    loop {
        if *lost.borrow() {
            break;
        }
        if !first {
            // (Biased: the simulation replays a seed only when no choice among ready
            // branches is left to tokio's RNG.)
            tokio::select! {
                biased;
                _ = lost.changed() => continue,
                _ = wake() => {}
                _ = tokio::time::sleep(c.poll_interval) => {}
            }
        }
        first = false;
        if joined.has_changed().unwrap_or(false) {
            armed = *joined.borrow_and_update();
        }
        if let Ok(found) = p.read_control().await {
            let version = found.as_ref().map(|(_, v)| *v);
            if control_seen != Some(version) {
                control_seen = Some(version);
                let control = found
                    .and_then(|(d, _)| record::parse(&d).ok())
                    .unwrap_or_default();
                if events.send(StoreEvent::Control(control)).is_err() {
                    return;
                }
            }
        }
        // The holder is read whether or not this node joined: a standby that never joins
        // (priority 0, a failed follow, paused) must still learn each new active to
        // follow it (SPEC §6). Its going matters only to a joined node.
        if let Ok(holder) = p.read_holder().await {
            if let Some(r) = holder.as_ref().and_then(|(_, r)| super::committed(r)) {
                for ev in tracker.lock(&r) {
                    let _ = events.send(ev);
                }
                // And the breadcrumb, for the active's rewrites within its epoch (§4.3d):
                // what a fence of it must name should the store forget them. Not by the
                // holder (its elector knows its own), and parsed only when it changed.
                // (Keyed by the holder's session and epoch too: a breadcrumb deleted and
                // made again starts its versions again, so one term's version 1 is no
                // proof of the next term's: stop 38's review.)
                let ours = holder.as_ref().is_some_and(|(s, _)| *s == c.id);
                if !ours {
                    if let Ok(found) = p.read_breadcrumb().await {
                        let key = (
                            holder.as_ref().map(|(s, _)| *s),
                            r.epoch,
                            found.as_ref().map(|(_, v)| *v),
                        );
                        if breadcrumb_seen != Some(key) {
                            breadcrumb_seen = Some(key);
                            let record =
                                found.and_then(|(d, _)| record::parse::<NodeRecord>(&d).ok());
                            for ev in tracker.breadcrumb(record) {
                                let _ = events.send(ev);
                            }
                        }
                    }
                }
            }
            if let Some((join, seen)) = armed {
                if holder.map(|(s, _)| s) != Some(seen) {
                    let _ = events.send(StoreEvent::HolderGone { join });
                    armed = None;
                }
            }
        }
    }
    let _ = events.send(StoreEvent::SessionLost);
}
