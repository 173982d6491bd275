//! `warden init [--force]` (SPEC §3): create or repair the cluster's znodes.
//!
//! Only the cluster's own znodes (`<root>/<cluster>` and below) get the cluster's ACL: the
//! root is shared with other clusters, which may use another ACL, so `init` creates it
//! when missing (open for reading and creating, see `ensure_parents`) and never changes it.
//!
//! `--force` is the operator's word, like `fence --confirm`, that every warden of the
//! cluster is stopped and the old active is down. It deletes the breadcrumb and control,
//! and moves `history` aside when it records a promotion with an epoch above the
//! ensemble's current zxid: an ensemble restored from an old snapshot, where that entry
//! would block every promotion (SPEC §3 "Epoch"). Nothing is deleted from history: it is
//! kept as `history.old-<time>` and named in the output.
//!
//! On a store that *lost data* (SPEC §3a: no init marker, or an epoch counter below an
//! epoch a member has seen) `--force` is the way back instead, and may run while wardens
//! run: it refuses only while a lock is held, makes the tables, waits for the running
//! wardens to register what they have seen, then raises the epoch counter above all of it
//! and writes the marker, so the next active's epoch is greater than any before. Plain
//! `init` refuses such a store: writing the marker there is the operator's word that no
//! old active still serves.

use crate::config::Config;
use crate::coord::{Connector, Item, Session, StoreError};
use crate::record::printable;

/// What `init` did, or why it refused.
pub enum InitOutcome {
    Done(Vec<String>),
    Refused(String),
}

/// Creates the missing parent znodes and repairs the ACLs of the cluster's own; with
/// `force`, also deletes the breadcrumb and control and moves a history that would block
/// every promotion aside, but only while no node holds the lock or is a member.
pub async fn init<C: Connector>(
    cfg: &Config,
    connector: &C,
    force: bool,
) -> Result<InitOutcome, StoreError> {
    let zk = connector.connect().await?;
    let before = zk.snapshot().await?;
    // A store that never held this cluster has no members and no marker: a new cluster.
    // ZooKeeper keeps a counter and a floor too (`epoch`, `floor`): a restored ensemble
    // takes the same way back, its counter raised by an offset on top of the zxid.
    let lost = before.lost_data().filter(|_| {
        !before.members.is_empty() || !before.marker_missing || before.counter_unreadable
    });
    if let Some(why) = lost {
        if !force {
            return Ok(InitOutcome::Refused(format!(
                "refusing `init`: {why}. Check that no old active of cluster {:?} still serves \
                 (its warden stops it within half a session timeout of losing the store), then \
                 run `warden init --force`",
                cfg.cluster.name
            )));
        }
        return restore(cfg, &zk, before).await;
    }
    let mut done = zk.init().await?;
    // `--force` on MySQL or Redis sets the counter above every epoch that any record
    // still names (issue 31, 4): a dropped counter table or a deleted key reads as a new
    // cluster, and the next active must never get an epoch an old one had. Read once the
    // tables exist again: a snapshot with a table missing reads nothing at all.
    let floor = if force && cfg.coordination.backend != crate::config::Backend::Zookeeper {
        let now = zk.snapshot().await?;
        newest_named(&[&before, &now]).map(|e| e + 1)
    } else {
        None
    };
    if let Some(line) = zk.write_marker(floor).await? {
        match floor {
            Some(floor) => done.push(format!(
                "{line} (at least {floor}: above every epoch a record of the store names)"
            )),
            None => done.push(line),
        }
    }
    if force {
        let snap = zk.snapshot().await?;
        let mut running: Vec<String> = snap
            .members
            .iter()
            .map(|(id, _)| printable(id).into_owned())
            .collect();
        if let Some((holder, _)) = &snap.lock {
            let id = match (snap.lock_holder_id(), holder) {
                (Some(id), _) => printable(id).into_owned(),
                (None, Ok(h)) => printable(&h.node_id).into_owned(),
                (None, Err(_)) => "<unreadable lock holder>".into(),
            };
            if !running.contains(&id) {
                running.push(id);
            }
        }
        if !running.is_empty() {
            return Ok(InitOutcome::Refused(format!(
                "refusing `init --force`: warden is running on {} (a member or the lock holder); \
                 stop every warden of cluster {:?} first",
                running.join(", "),
                cfg.cluster.name
            )));
        }
        // Version-checked, all or none: a warden that started and committed a promotion
        // since the snapshot changed the breadcrumb, and its fresh breadcrumb must never be
        // deleted by a check that saw the cluster empty.
        let breadcrumb = snap.breadcrumb.as_ref().map(|(_, v)| *v);
        match zk
            .delete_takeover_state(breadcrumb, snap.control_version)
            .await
        {
            Ok(()) => {}
            Err(StoreError::Rejected(_)) => return Ok(changed(cfg)),
            Err(e) => return Err(e),
        }
        done.push(format!(
            "deleted {} and {} (the next election fences nobody)",
            zk.name_of(Item::Breadcrumb),
            zk.name_of(Item::Control)
        ));
        let zxid = zk.current_epoch().await?;
        match zk.move_history_aside_if_above(zxid).await {
            Ok(None) => {}
            Ok(Some((copy, epoch))) => {
                done.push(format!(
                    "moved {} to {copy}: it records a promotion with epoch {epoch}, above the \
                     ensemble's current zxid {zxid} (restored from an old snapshot?), which \
                     would block every promotion; the next active starts a new history, \
                     its epoch raised above that one",
                    zk.name_of(Item::History)
                ));
                let entry = super::operator::entry(
                    super::operator::identity(),
                    "history",
                    "set aside",
                    None,
                    format!(
                        "`init --force` by {}: the history recorded epoch {epoch}, above the \
                         ensemble's zxid {zxid}; kept in {copy}",
                        super::operator::identity()
                    ),
                );
                super::operator::record(&zk, &entry).await;
            }
            Err(StoreError::Rejected(_)) => return Ok(changed(cfg)),
            Err(e) => return Err(e),
        }
    }
    Ok(InitOutcome::Done(done))
}

/// The refusal when the cluster changed while `init --force` ran.
fn changed(cfg: &Config) -> InitOutcome {
    InitOutcome::Refused(format!(
        "refusing `init --force`: the breadcrumb, control or history of cluster {:?} changed \
         while init ran (a warden is starting?); stop every warden and run it again",
        cfg.cluster.name
    ))
}

/// `init --force` on a store that lost data (SPEC §3a): refuses while a lock is held;
/// makes the tables, waits for the running wardens to register what they have seen, then
/// raises the epoch counter above every epoch seen and writes the marker.
async fn restore<S: Session>(
    cfg: &Config,
    zk: &S,
    before: crate::coord::ClusterSnapshot,
) -> Result<InitOutcome, StoreError> {
    if let Some(holder) = held_by(&before) {
        return Ok(InitOutcome::Refused(format!(
            "refusing `init --force`: {holder} holds the lock of cluster {:?}; wait until it \
             has expired (a session timeout) and run it again",
            cfg.cluster.name
        )));
    }
    let mut done = zk.init().await?;
    // Running wardens retry every second while the store has no tables, and register as
    // soon as it does; a session timeout (theirs may still be running out) and two of
    // their retries cover a slow one.
    let wait = cfg.session_timeout() + crate::elector::LOST_DATA_RETRY * 2;
    crate::errln!(
        "warden: the store lost data; waiting {} for running wardens to register the epochs \
         they have seen",
        humantime::format_duration(wait)
    );
    tokio::time::sleep(wait).await;
    let now = zk.snapshot().await?;
    if let Some(holder) = held_by(&now) {
        return Ok(InitOutcome::Refused(format!(
            "refusing `init --force`: {holder} took the lock of cluster {:?} while init \
             waited; run `warden status` and, if the store still lost data, run it again",
            cfg.cluster.name
        )));
    }
    let newest = newest_named(&[&before, &now]);
    let floor = newest.map_or(1, |e| e + 1);
    if let Some(line) = zk.write_marker(Some(floor)).await? {
        done.push(format!("{line} (above every epoch a node has seen)"));
    }
    let registered: Vec<String> = now
        .members
        .iter()
        .map(|(id, _)| printable(id).into_owned())
        .collect();
    done.push(format!(
        "nodes registered while init waited: {}",
        if registered.is_empty() {
            "none".to_string()
        } else {
            registered.join(", ")
        }
    ));
    let entry = super::operator::entry(
        super::operator::identity(),
        "store",
        "restored",
        None,
        format!(
            "`init --force` by {} after the store lost data; epoch counter raised to {floor}",
            super::operator::identity()
        ),
    );
    super::operator::record(zk, &entry).await;
    Ok(InitOutcome::Done(done))
}

/// The greatest epoch that any record of `snaps` names (SPEC §3a, `init --force`): the
/// floor (every node's `epoch_seen`, alive or not), the counter, the lock (expired or not), the breadcrumb,
/// and every history entry (not only completed promotions: a counter raised past one more
/// costs nothing). Values at or above [`crate::coord::MAX_KEPT_EPOCH`] are garbage that no
/// counter ever gave: raising the counter past them would overflow the next promotion's.
fn newest_named(snaps: &[&crate::coord::ClusterSnapshot]) -> Option<crate::record::Epoch> {
    snaps
        .iter()
        .flat_map(|s| {
            let record_epoch = |r: &Result<crate::record::NodeRecord, _>| r.as_ref().ok()?.epoch;
            [
                s.floor().map(|(e, _)| e),
                s.epoch_counter,
                s.lock.as_ref().map(|(_, e)| *e),
                s.expired_lock_epoch,
                s.lock.as_ref().and_then(|(r, _)| record_epoch(r)),
                s.breadcrumb.as_ref().and_then(|(r, _)| record_epoch(r)),
            ]
            .into_iter()
            .chain(s.history.entries.iter().map(|h| h.epoch))
        })
        .flatten()
        .filter(|e| *e < crate::coord::MAX_KEPT_EPOCH)
        .max()
}

/// The node (or session) that holds a live lock, in words.
fn held_by(snap: &crate::coord::ClusterSnapshot) -> Option<String> {
    let (holder, _) = snap.lock.as_ref()?;
    Some(match (snap.lock_holder_id(), holder) {
        (Some(id), _) => format!("node {}", printable(id)),
        (None, Ok(h)) => format!("node {}", printable(&h.node_id)),
        (None, Err(_)) => "an unreadable lock holder".into(),
    })
}
