//! `warden pause [--reason TEXT]` and `warden resume` (SPEC §8): maintenance.
//!
//! While `control.paused` is set the active stays active whatever its health or service
//! does (never past its lease or after losing the lock), and standbys stay out of the
//! election. Both commands are idempotent, and each change is recorded in `history` as a
//! transition of the cluster, `running -> paused` or `paused -> running`, with the
//! operator (`user@host`) as its node.

use super::operator::{self, OpError};
use crate::config::Config;
use crate::coord::{Connector, Session};
use crate::record::{self, Control};
use std::time::SystemTime;

/// The cluster states of a pause entry in `history`.
pub const RUNNING: &str = "running";
pub const PAUSED: &str = "paused";

/// The longest `pause --reason`, in bytes (after trimming): the reason is kept in
/// `control` and in a history entry beside the operator's name, both of which must stay
/// small (a history entry's texts are cut at [`record::MAX_HISTORY_TEXT`]).
pub const MAX_PAUSE_REASON: usize = 400;

/// `warden pause`: stop automatic promotions and demotions.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct PauseArgs {
    /// Why, for `status` and `history` (e.g. "kernel upgrade on rm1"); at most 400 bytes.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
}

/// `warden resume`: end a pause.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct ResumeArgs {}

/// What `pause` or `resume` found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The flag was changed; `reason` is the pause's reason.
    Done { reason: Option<String> },
    /// It was already so; `reason` is the standing pause's reason.
    AlreadySo { reason: Option<String> },
}

/// Runs `warden pause`.
pub async fn pause<C: Connector>(
    cfg: &Config,
    connector: &C,
    args: &PauseArgs,
) -> Result<(), OpError> {
    let name = &cfg.cluster.name;
    let change = async {
        let zk = operator::session(connector).await?;
        set_paused(&zk, args.reason.as_deref()).await
    };
    match change.await? {
        Change::Done { reason } => {
            crate::outln!(
                "cluster {name} paused ({}): nobody is promoted or demoted automatically until \
                 `warden resume`",
                reason.as_deref().unwrap_or("no reason given")
            );
        }
        Change::AlreadySo { reason } => {
            crate::outln!(
                "cluster {name} is already paused ({}); nothing changed",
                record::printable(reason.as_deref().unwrap_or("no reason given"))
            );
        }
    }
    Ok(())
}

/// Runs `warden resume`.
pub async fn resume<C: Connector>(
    cfg: &Config,
    connector: &C,
    _args: &ResumeArgs,
) -> Result<(), OpError> {
    let name = &cfg.cluster.name;
    let change = async {
        let zk = operator::session(connector).await?;
        let change = clear_paused(&zk).await?;
        // What else holds the election back, so "nothing changed" is never the whole story.
        let pending = zk
            .snapshot()
            .await
            .ok()
            .and_then(|s| s.control.failover)
            .filter(|f| f.pending_at(SystemTime::now()));
        Ok::<_, OpError>((change, pending))
    };
    match change.await? {
        (Change::Done { .. }, _) => {
            crate::outln!("cluster {name} resumed: the election runs normally again");
        }
        (Change::AlreadySo { .. }, None) => {
            crate::outln!("cluster {name} is not paused; nothing changed");
        }
        (Change::AlreadySo { .. }, Some(f)) => {
            crate::outln!(
                "cluster {name} is not paused; nothing changed. A switchover request is \
                 pending ({} -> {}, requested by {}, lapses at {}) and keeps other standbys \
                 out; `warden failover --cancel` withdraws it",
                record::printable(&f.from),
                record::printable(f.to.as_deref().unwrap_or("any healthy standby")),
                record::printable(&f.by),
                record::printable(&f.deadline)
            );
        }
    }
    Ok(())
}

/// Sets `paused` with `reason`, refusing while a switchover is pending; records it in
/// `history` when it changed anything.
pub async fn set_paused<S: Session>(zk: &S, reason: Option<&str>) -> Result<Change, OpError> {
    set_paused_at(zk, reason, SystemTime::now()).await
}

/// [`set_paused`] with the wall clock given: `wall` judges whether a switchover request
/// is still pending (the simulation's operator passes its virtual clock).
pub async fn set_paused_at<S: Session>(
    zk: &S,
    reason: Option<&str>,
    wall: SystemTime,
) -> Result<Change, OpError> {
    let reason = reason.map(str::trim).filter(|r| !r.is_empty());
    if let Some(r) = reason.filter(|r| r.len() > MAX_PAUSE_REASON) {
        return Err(OpError::Usage(format!(
            "the pause reason has {} bytes; at most {MAX_PAUSE_REASON} are allowed (--reason): \
             say it shortly and point to the details elsewhere (a ticket, a wiki page)",
            r.len()
        )));
    }
    let mut was = None;
    zk.update_control(|c: &mut Control| {
        if c.paused {
            was = Some(c.reason.clone());
            return Ok(false);
        }
        if let Some(f) = &c.failover {
            if f.pending_at(wall) {
                return Err(format!(
                    "a switchover is pending ({} -> {}, requested by {}, lapses at {}); \
                         pause once it has finished or lapsed, or withdraw it with `warden \
                         failover --cancel`",
                    record::printable(&f.from),
                    record::printable(f.to.as_deref().unwrap_or("any healthy standby")),
                    record::printable(&f.by),
                    record::printable(&f.deadline)
                ));
            }
            // A lapsed request is withdrawn already; drop it while writing anyway.
            c.failover = None;
        }
        was = None;
        c.paused = true;
        c.reason = reason.map(str::to_string);
        Ok(true)
    })
    .await
    .map_err(OpError::store("write control"))?
    .map_err(OpError::Refused)?;
    if let Some(reason) = was {
        return Ok(Change::AlreadySo { reason });
    }
    let by = operator::identity();
    let why = match reason {
        Some(r) => format!("paused by {by}: {r}"),
        None => format!("paused by {by} (no reason given)"),
    };
    operator::record(zk, &operator::entry(&by, RUNNING, PAUSED, None, why)).await;
    Ok(Change::Done {
        reason: reason.map(str::to_string),
    })
}

/// Clears `paused` and its reason; records it in `history` when it changed anything.
pub async fn clear_paused<S: Session>(zk: &S) -> Result<Change, OpError> {
    let mut ended = None;
    zk.update_control(|c: &mut Control| {
        if !c.paused {
            ended = None;
            return Ok(false);
        }
        ended = Some(c.reason.take());
        c.paused = false;
        Ok(true)
    })
    .await
    .map_err(OpError::store("write control"))?
    .map_err(OpError::Refused)?;
    let Some(reason) = ended else {
        return Ok(Change::AlreadySo { reason: None });
    };
    let by = operator::identity();
    let why = format!(
        "resumed by {by} (the pause was for: {})",
        reason.as_deref().unwrap_or("no reason given")
    );
    operator::record(zk, &operator::entry(&by, PAUSED, RUNNING, None, why)).await;
    Ok(Change::Done { reason })
}
