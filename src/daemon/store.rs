//! What the driver reads and writes in the store beside the elector's own steps: the
//! session's opening, the cluster state a takeover reads, the breadcrumb kept named, and
//! the writers of the member record and history.

use crate::coord::{self, Connector, RegisterError, Session, StoreError, StoreEvent};
use crate::elector::{
    ClusterState, ControlView, Event, FailoverView, KeptBreadcrumb, WriteOutcome,
};
use crate::host::Host;
use crate::record::{self, Control, HistoryEntry, MemberRecord, NodeRecord, Role, Version};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::warn;

/// A session just opened and registered, with its event stream running.
pub(super) struct Opened<S> {
    pub(super) session: S,
    pub(super) control: Control,
    pub(super) tasks: JoinSet<()>,
    pub(super) events: mpsc::UnboundedReceiver<StoreEvent>,
}

/// `WARDEN_SUCCESSOR_NODE/HOST/PORT` for a demote hook handing over to `node`, from its
/// member record; the host and port are left out when the record cannot be read within
/// `bound` (the hook then knows the node, and that it should look it up itself). The
/// read has two tries of half of it: one lost answer would call the switchover off (the
/// simulation's seed 85589, a store that drops 1% of answers), and two whole tries could
/// outlast the lease (the review of that fix).
pub(super) async fn successor_env<S: Session>(
    zk: &S,
    node: &str,
    bound: Duration,
) -> Vec<(String, String)> {
    let mut env = vec![("WARDEN_SUCCESSOR_NODE".to_string(), node.to_string())];
    let mut read = tokio::time::timeout(bound / 2, zk.member(node)).await;
    if matches!(read, Err(_) | Ok(Err(_))) {
        read = tokio::time::timeout(bound / 2, zk.member(node)).await;
    }
    match read {
        Ok(Ok(Some((_, Ok(m))))) => {
            if !m.node.host.is_empty() {
                env.push(("WARDEN_SUCCESSOR_HOST".to_string(), m.node.host.clone()));
            }
            if let Some(port) = m.node.port {
                env.push(("WARDEN_SUCCESSOR_PORT".to_string(), port.to_string()));
            }
        }
        other => warn!(
            "the demote hook gets WARDEN_SUCCESSOR_NODE={node} without its host and port: \
             its member record could not be read ({})",
            match other {
                Err(_) => "no answer".to_string(),
                Ok(Err(e)) => e.to_string(),
                Ok(Ok(None)) => "it is not registered".to_string(),
                Ok(Ok(Some((_, Err(e))))) => e.to_string(),
                Ok(Ok(Some((_, Ok(_))))) => unreachable!("matched above"),
            }
        ),
    }
    env
}

/// Connects, registers `me` (SPEC §4.9) and starts the session's events; returns once
/// the first `control` has arrived.
pub(super) async fn open<C: Connector>(
    connector: &C,
    host: &impl Host,
    me: &MemberRecord,
    first_start: bool,
    session_timeout: Duration,
    waiting_logged: &mut bool,
) -> Result<Opened<C::Session>, RegisterError> {
    let session = connector.connect().await?;
    if first_start {
        session.check_initialized().await?;
    }
    let is_running = |pid, start_time| host.is_running(pid, start_time);
    // Two machines with one machine id are refused at start (SPEC §5, "Which host is
    // this?"); a reconnect keeps the node it is.
    let clone_check = first_start.then_some(session_timeout);
    coord::register(&session, me, is_running, waiting_logged, clone_check).await?;
    let (etx, mut events) = mpsc::unbounded_channel();
    let mut tasks = JoinSet::new();
    let s = session.clone();
    tasks.spawn(async move { s.events(etx).await });
    loop {
        return match events.recv().await {
            Some(StoreEvent::Control(control)) => Ok(Opened {
                session,
                control,
                tasks,
                events,
            }),
            // Before anything was learned in this session: nothing to doubt.
            Some(StoreEvent::Reconnected) => continue,
            _ => Err(RegisterError::Store(StoreError::SessionLost(
                "while reading control".into(),
            ))),
        };
    }
}

pub(super) fn control_view(c: &Control, host: &impl Host) -> ControlView {
    let now = host.now();
    let wall = host.wall();
    ControlView {
        paused: c.paused,
        failover: c.failover.as_ref().map(|f| {
            let lapses_at = humantime::parse_rfc3339_weak(&f.deadline)
                .ok()
                .and_then(|d| d.duration_since(wall).ok())
                // The elector bounds a request by MAX_SWITCHOVER from when it first saw
                // it; capping here too keeps a deadline in the year 9999 from overflowing.
                .map_or(now, |left| now + left.min(crate::elector::MAX_SWITCHOVER));
            FailoverView {
                from: f.from.clone(),
                to: f.to.clone(),
                deadline: f.deadline.clone(),
                force: f.force,
                lapses_at,
            }
        }),
    }
}

/// What [`Daemon::tries_seen`] keys a member's [`MemberRecord::tries_in`] by.
pub(super) fn tries_key(m: &MemberRecord) -> Option<(String, String, String)> {
    let t = m.tries_in.clone()?;
    Some((m.node.node_id.clone(), m.node.incarnation.clone(), t))
}

pub(super) fn control_event(c: &Control, host: &impl Host) -> Event {
    Event::ControlChanged {
        control: control_view(c, host),
    }
}

/// Whether the warden of `active` (that incarnation) still lives and has stepped down or
/// is stepping down: its member record is live and says so. Then its lease, not a fence,
/// took its service down, and its breadcrumb is not written back (a clean step-down whose
/// history entries are gone, trimmed or never appended, is no forgotten commit). A frozen
/// warden's record says `active` (or expired with its session): written back and fenced.
///
/// A record that says `demoting` is looked at again, every [`ALIVE_POLL`] for up to
/// `within` (the session timeout): a planned switchover's old active shows it between
/// its release and its next session's registration (then `ineligible` or `standby`, the
/// same incarnation: alive and stepped down), but so does a warden killed during its
/// stop, whose record outlives it until its session expires (then gone: fenced). One
/// still `demoting` by then is fenced too. Bounded by `within` and the store's own
/// timeouts; the lock is ours meanwhile, and nothing runs under it.
pub(super) async fn remembered_alive<S: Session>(
    zk: &S,
    active: &NodeRecord,
    within: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let verdict = match zk.member(&active.node_id).await {
            Ok(Some((_, Ok(m)))) => stepped_down(&m, active),
            _ => Some(false),
        };
        match verdict {
            Some(alive) => return alive,
            None if tokio::time::Instant::now() >= deadline => return false,
            None => tokio::time::sleep(ALIVE_POLL).await,
        }
    }
}

/// How often [`remembered_alive`] reads a `demoting` record again.
pub(super) const ALIVE_POLL: Duration = Duration::from_millis(50);

/// [`remembered_alive`]'s verdict on the member record read: `Some(true)` stepped down,
/// `Some(false)` not (fence it), `None` not known yet (`demoting`, a step-down under way:
/// read it again). Not `neutral`: a warden whose renewal was late writes that before its lease
/// ends and its service is killed, and a record outlives its warden (until its session
/// expires, which in ZooKeeper can be after a lock the store forgot is free again; on
/// MySQL and Redis after its lock, by up to the record's last write): a warden killed
/// there leaves its service running and a record that looks alive (the simulation's seed
/// 255290 had the same shape, its `neutral` written to history). SPEC §9 fences an active
/// cut off from the store whatever it did at its lease end; so does this.
pub(super) fn stepped_down(m: &MemberRecord, active: &NodeRecord) -> Option<bool> {
    if !m.node.same_incarnation(active) {
        return Some(false);
    }
    match m.role {
        Role::Standby | Role::Ineligible => Some(true),
        Role::Demoting => None,
        _ => Some(false),
    }
}

/// SPEC §4.3a's read, as the elector takes it.
pub(super) async fn read_cluster_state<S: Session>(
    zk: &S,
    host: &impl Host,
) -> Result<Box<ClusterState>, String> {
    // The members alongside, not after: the takeover path waits for the slower of two
    // reads, not for both.
    let (state, members) = tokio::join!(zk.read_state(), zk.members());
    let state = state.map_err(|e| e.to_string())?;
    let members = members.map_err(|e| e.to_string())?;
    Ok(Box::new(ClusterState {
        breadcrumb: state.breadcrumb,
        control: control_view(&state.control, host),
        control_version: state.control_version,
        newest_history_epoch: state.newest_promotion,
        history_by_node: state.history_by_node,
        confirmed_by_node: state.confirmed_by_node,
        remembered_alive: false,
        own_service_gone: false,
        members_epoch_seen: state.members_epoch_seen,
        members: members
            .iter()
            .filter_map(|(_, m)| m.as_ref().ok().cloned())
            .collect(),
        own_position: None,
        member_memories: members
            .iter()
            .filter_map(|(_, m)| {
                let m = m.as_ref().ok()?;
                Some((m.node.node_id.clone(), m.remembers.clone()?))
            })
            .collect(),
        member_leftovers: members
            .into_iter()
            .filter_map(|(_, m)| m.ok()?.leftover)
            .collect(),
    }))
}

/// Makes sure the breadcrumb names `record` (our promotion of `record.epoch`, naming the
/// service), writing it back while the lock is ours when the store forgot it: it is what
/// whoever wins next fences.
///
/// `serving`: the active's look after a renewal ([`Action::KeepBreadcrumb`]). An
/// unreadable breadcrumb is written over, and a later epoch, or another incarnation at
/// ours, is [`KeptBreadcrumb::Foreign`]. Otherwise, on the way out of the lock while our
/// service outlived its stop: the release drops the session, and with it the member
/// record that also names the service, until the next session registers. Then an
/// unreadable breadcrumb (fenced as unknown) or a later epoch is left as it is.
///
/// Bounded by the store's own timeouts.
pub(super) async fn keep_named<S: Session>(
    zk: &S,
    record: &NodeRecord,
    serving: bool,
) -> KeptBreadcrumb {
    let found = match zk.breadcrumb_bytes().await {
        Ok(found) => found,
        Err(e) => return KeptBreadcrumb::Failed(format!("reading the breadcrumb failed: {e}")),
    };
    let found = found
        .as_ref()
        .map(|(data, version)| (data.as_slice(), *version));
    let (version, was) = match breadcrumb_verdict(found, record, serving) {
        Verdict::Keep => return KeptBreadcrumb::Named,
        Verdict::Foreign(what) => return KeptBreadcrumb::Foreign(what),
        Verdict::WriteBack { version, was } => (version, was),
    };
    match zk.restore_breadcrumb(record, version).await {
        WriteOutcome::Done => KeptBreadcrumb::WrittenBack(was),
        outcome => KeptBreadcrumb::Failed(format!("{was}, and writing it back got {outcome:?}")),
    }
}

/// What [`keep_named`] does with the breadcrumb it read (its bytes and version).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// It names `record` (or, for a leftover, something that must stay).
    Keep,
    /// `serving` only: a later epoch, or another incarnation at ours.
    Foreign(String),
    /// Write `record` back at `version` (create when `None`); `was`: what was there.
    WriteBack {
        version: Option<Version>,
        was: String,
    },
}

/// The decision of [`keep_named`], apart from the store (see there).
///
/// Our own breadcrumb at our epoch with a later `rewrite` than `record`'s is kept too: a
/// rewrite sent after this look was built (the service started again, its new identity
/// recorded) must not be overwritten by the older identity (the review of stop 44).
pub(super) fn breadcrumb_verdict(
    found: Option<(&[u8], Version)>,
    record: &NodeRecord,
    serving: bool,
) -> Verdict {
    let Some((data, version)) = found else {
        return Verdict::WriteBack {
            version: None,
            was: "there was none".to_string(),
        };
    };
    let b = match record::parse::<NodeRecord>(data) {
        Ok(b) => b,
        Err(e) if serving => {
            return Verdict::WriteBack {
                version: Some(version),
                was: format!("it was unreadable: {e}"),
            }
        }
        Err(_) => return Verdict::Keep,
    };
    let later = b.epoch.is_some_and(|e| Some(e) > record.epoch);
    let ours = b.node_id == record.node_id && b.incarnation == record.incarnation;
    let what = format!(
        "{} (incarnation {}) at epoch {}",
        b.node_id,
        b.incarnation,
        b.epoch.map_or("none".to_string(), |e| e.to_string())
    );
    if b.epoch == record.epoch {
        if b.same_service(record) && (ours || !serving) {
            return Verdict::Keep;
        }
        if serving && ours && b.rewrite.unwrap_or(0) > record.rewrite.unwrap_or(0) {
            return Verdict::Keep;
        }
        if serving && !ours {
            return Verdict::Foreign(what);
        }
    }
    if later {
        return match serving {
            true => Verdict::Foreign(what),
            false => Verdict::Keep,
        };
    }
    Verdict::WriteBack {
        version: Some(version),
        was: format!("it named {what}"),
    }
}

/// On the way out of the lock while our service outlived its stop: when the breadcrumb
/// no longer names the epoch it ran under (the store forgot it), writes `record` back
/// while the lock is still ours, so that whoever wins next fences that service. A
/// failure is logged, and the member record of the next session still names the
/// service.
pub(super) async fn keep_leftover_named<S: Session>(zk: &S, record: &NodeRecord) {
    match keep_named(zk, record, false).await {
        KeptBreadcrumb::Named | KeptBreadcrumb::Foreign(_) => {}
        KeptBreadcrumb::WrittenBack(_) => warn!(
            epoch = record.epoch,
            "the store had forgotten the breadcrumb naming this node's service, which \
             outlived its stop: written back before leaving the lock"
        ),
        KeptBreadcrumb::Failed(why) => warn!(
            "could not write back the breadcrumb naming this node's service, which outlived \
             its stop ({why}); its member record names it once this node registers again"
        ),
    }
}

/// The task that appends a session's history entries, one after the other in the order
/// sent. A task per entry, as before, raced our own appends against each other: each
/// read-modify-write but the first was refused and read again, and over an unreadable
/// history each made its own copy of it (two copies of the same bytes after one start,
/// seen in CI). An entry that fails is logged and not tried again: history is a record
/// for operators, and a later entry must not wait behind it.
pub(super) fn spawn_history_writer<S: Session>(
    tasks: &mut JoinSet<()>,
    zk: S,
) -> mpsc::UnboundedSender<HistoryEntry> {
    let (tx, mut rx) = mpsc::unbounded_channel::<HistoryEntry>();
    tasks.spawn(async move {
        while let Some(entry) = rx.recv().await {
            if let Err(e) = zk.append_history(&entry).await {
                warn!("could not append to history: {e}");
            }
        }
    });
    tx
}

/// The task that writes a session's member record: each write waits for the one before,
/// a record replaced while a write is under way is skipped for the newest, and a write
/// whose outcome is unknown (no answer, no connection) is tried again until it lands or a
/// newer record replaces it. A task per write, as before, let an older record land last,
/// and a write that failed (the store down for a moment) was never made again: either way
/// `status` showed a standby as ineligible until its next change (simulation seed 31 of
/// the end-of-run check).
pub(super) fn spawn_member_writer<S: Session>(
    tasks: &mut JoinSet<()>,
    zk: S,
) -> tokio::sync::watch::Sender<Option<MemberRecord>> {
    let (tx, mut rx) = tokio::sync::watch::channel(None::<MemberRecord>);
    tasks.spawn(async move {
        while rx.changed().await.is_ok() {
            let mut failing = false;
            loop {
                let Some(m) = rx.borrow_and_update().clone() else {
                    break;
                };
                match zk.set_member(&m).await {
                    Ok(()) => break,
                    // The store refused it, or the session is over: a later record may
                    // fare better, this one would not.
                    Err(
                        e @ (StoreError::Rejected(_)
                        | StoreError::NotInitialized(_)
                        | StoreError::SessionLost(_)
                        | StoreError::Auth(_)),
                    ) => {
                        warn!("could not publish the member record: {e}");
                        break;
                    }
                    Err(e) => {
                        if !failing {
                            warn!(
                                "could not publish the member record (status shows the last \
                                 one written; retrying every {:?}): {e}",
                                crate::elector::RETRY_DELAY
                            );
                            failing = true;
                        }
                        tokio::select! {
                            biased;
                            newer = rx.changed() => {
                                if newer.is_err() {
                                    return;
                                }
                            }
                            _ = tokio::time::sleep(crate::elector::RETRY_DELAY) => {}
                        }
                    }
                }
            }
        }
    });
    tx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(epoch: u64, pid: u32, rewrite: u64) -> NodeRecord {
        NodeRecord {
            node_id: "n1".into(),
            incarnation: "inc-1".into(),
            epoch: Some(epoch),
            service_pid: Some(pid),
            rewrite: Some(rewrite),
            ..Default::default()
        }
    }

    fn verdict(found: Option<&NodeRecord>, record: &NodeRecord, serving: bool) -> Verdict {
        let bytes = found.map(record::to_bytes);
        breadcrumb_verdict(
            bytes.as_deref().map(|b| (b, Version::new(7))),
            record,
            serving,
        )
    }

    fn written_back(v: &Verdict) -> bool {
        matches!(v, Verdict::WriteBack { .. })
    }

    /// The simulation's seed 255290, and SPEC §9: a remembered active whose live-looking
    /// record says `neutral` is fenced (its warden may have died before its lease end's
    /// kill); one stepped down is not; one stepping down is read again (stop 48's
    /// review); another incarnation's record is no sign of that one's warden.
    #[test]
    fn a_remembered_active_is_stepped_down_by_its_record_after_its_stop_and_read_again_while_demoting(
    ) {
        let active = ours(5, 100, 1);
        let record = |role, incarnation: &str| {
            MemberRecord::bare(
                NodeRecord {
                    incarnation: incarnation.into(),
                    ..active.clone()
                },
                role,
                record::Health::Healthy,
            )
        };
        for (role, down) in [
            (Role::Standby, Some(true)),
            (Role::Ineligible, Some(true)),
            (Role::Demoting, None),
            (Role::Neutral, Some(false)),
            (Role::Active, Some(false)),
            (Role::Promoting, Some(false)),
            (Role::Fencing, Some(false)),
        ] {
            assert_eq!(
                stepped_down(&record(role, "inc-1"), &active),
                down,
                "{role}"
            );
            assert_eq!(
                stepped_down(&record(role, "inc-2"), &active),
                Some(false),
                "{role}"
            );
        }
    }

    #[test]
    fn the_active_keeps_its_breadcrumb_and_writes_back_only_what_the_store_forgot() {
        // The look after a renewal: our promotion of epoch 5, service 100, rewrite 3.
        let me = ours(5, 100, 3);
        assert_eq!(verdict(Some(&ours(5, 100, 2)), &me, true), Verdict::Keep);
        assert_eq!(
            verdict(None, &me, true),
            Verdict::WriteBack {
                version: None,
                was: "there was none".into()
            }
        );
        // An earlier epoch (the store forgot our commit), an older rewrite naming another
        // service of ours (it forgot the rewrite naming this one), or garbage.
        assert!(written_back(&verdict(Some(&ours(4, 100, 9)), &me, true)));
        assert!(written_back(&verdict(Some(&ours(5, 90, 1)), &me, true)));
        let garbage = breadcrumb_verdict(Some((b"{ not json", Version::new(7))), &me, true);
        assert!(
            matches!(&garbage, Verdict::WriteBack { version: Some(v), .. } if *v == Version::new(7)),
            "{garbage:?}"
        );
        // A rewrite sent after this look was built (the service started again and was
        // recorded anew) is newer than what the look would write: kept.
        assert_eq!(verdict(Some(&ours(5, 200, 4)), &me, true), Verdict::Keep);
        // A later epoch, or another incarnation (or node) at ours: not ours.
        assert!(matches!(
            verdict(Some(&ours(6, 100, 1)), &me, true),
            Verdict::Foreign(_)
        ));
        let other = NodeRecord {
            incarnation: "inc-2".into(),
            ..ours(5, 100, 3)
        };
        assert!(matches!(
            verdict(Some(&other), &me, true),
            Verdict::Foreign(_)
        ));
        let n2 = NodeRecord {
            node_id: "n2".into(),
            ..ours(5, 100, 9)
        };
        assert!(matches!(verdict(Some(&n2), &me, true), Verdict::Foreign(_)));
    }

    #[test]
    fn a_leftover_is_written_back_only_over_an_earlier_epoch_or_another_service() {
        // On the way out with a service that outlived its stop (as before stop 44).
        let me = ours(5, 100, 3);
        assert_eq!(verdict(Some(&ours(5, 100, 1)), &me, false), Verdict::Keep);
        assert_eq!(verdict(Some(&ours(6, 1, 1)), &me, false), Verdict::Keep);
        let garbage = breadcrumb_verdict(Some((b"{ not json", Version::new(7))), &me, false);
        assert_eq!(garbage, Verdict::Keep);
        assert!(written_back(&verdict(None, &me, false)));
        assert!(written_back(&verdict(Some(&ours(4, 100, 1)), &me, false)));
        assert!(written_back(&verdict(Some(&ours(5, 90, 9)), &me, false)));
        let n2 = NodeRecord {
            node_id: "n2".into(),
            ..ours(4, 100, 9)
        };
        assert!(written_back(&verdict(Some(&n2), &me, false)));
    }
}
