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

use crate::config::Config;
use crate::coord::{Item, Session, StoreError};
use crate::record::printable;

/// What `init` did, or why it refused.
pub enum InitOutcome {
    Done(Vec<String>),
    Refused(String),
}

/// Creates the missing parent znodes and repairs the ACLs of the cluster's own; with
/// `force`, also deletes the breadcrumb and control and moves a history that would block
/// every promotion aside, but only while no node holds the lock or is a member.
pub async fn init(cfg: &Config, force: bool) -> Result<InitOutcome, StoreError> {
    let zk = super::session(cfg).await?;
    let mut done = zk.init().await?;
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
                     would block every promotion; the next active starts a new history and \
                     a lower epoch than before",
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
