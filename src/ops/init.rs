//! `warden init [--force]` (SPEC §3): create or repair the cluster's znodes.

use crate::config::Config;
use crate::coord::StoreError;

/// What `init` did, or why it refused.
pub enum InitOutcome {
    Done(Vec<String>),
    Refused(String),
}

/// Creates the missing parent znodes with the configured ACL and repairs the ACLs of
/// existing ones; with `force`, also deletes the breadcrumb and control, but only while no
/// node holds the lock or is a member.
pub async fn init(cfg: &Config, force: bool) -> Result<InitOutcome, StoreError> {
    let zk = super::session(cfg).await?;
    let paths = zk.paths().clone();
    zk.ensure_parents().await?;
    zk.repair_acls().await?;
    let mut done = vec![format!("{} exists with the configured ACL", paths.base)];
    if force {
        let snap = zk.snapshot().await?;
        let mut running: Vec<String> = snap.members.iter().map(|(id, _)| id.clone()).collect();
        if let Some((holder, _)) = &snap.lock {
            let id = holder
                .as_ref()
                .map(|h| h.node_id.clone())
                .unwrap_or_else(|_| "<unreadable lock holder>".into());
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
        // Version-checked, in one multi-op: a warden that started and committed a
        // promotion since the snapshot changed the breadcrumb, and its fresh breadcrumb must
        // never be deleted by a check that saw the cluster empty.
        let mut doomed = Vec::new();
        if let Some((_, v)) = &snap.breadcrumb {
            doomed.push((paths.breadcrumb.as_str(), *v));
        }
        if let Some(v) = snap.control_version {
            doomed.push((paths.control.as_str(), v));
        }
        match zk.delete_at_versions(&doomed).await {
            Ok(()) => {}
            Err(StoreError::Rejected(_)) => {
                return Ok(InitOutcome::Refused(format!(
                    "refusing `init --force`: the breadcrumb or control of cluster {:?} changed \
                     while init ran (a warden is starting?); stop every warden and run it again",
                    cfg.cluster.name
                )))
            }
            Err(e) => return Err(e),
        }
        done.push(format!(
            "deleted {} and {} (the next election fences nobody)",
            paths.breadcrumb, paths.control
        ));
    }
    Ok(InitOutcome::Done(done))
}
