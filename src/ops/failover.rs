//! `warden failover [--to NODE] [--timeout 30s]` (SPEC §8): a planned switchover.
//!
//! The command writes `{"from", "to", "by", "deadline"}` into `control`, version-checked
//! (without `--to`, `to` is the eligible standby with the highest priority: every planned
//! switchover has a successor, SPEC §6a.3), and waits until another node is active, or
//! until the old active calls the switchover off because its `demote` could not hand over
//! (SPEC §6a.2: exit 1 with the hook's line). The daemons do the rest: the active named by
//! `from` demotes, deletes its breadcrumb (so nobody needs to fence it) and releases the
//! lock; standbys not named by `to` stay out; the new active clears the request. Past its
//! deadline every daemon treats the request as withdrawn, so a command killed half-way
//! never leaves the cluster without an active for longer than `--timeout`.

use super::operator::{self, OpError};
use crate::config::Config;
use crate::coord::{ClusterSnapshot, StoreError};
use crate::coord::{Connector, Session};
use crate::elector::{best_placed, Reason, SWITCHOVER_CALLED_OFF};
use crate::record::{self, Control, Epoch, FailoverRequest, Health, History, HistoryEntry, Role};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// How often the command reads the cluster while it waits: the time it prints is then
/// within a few tens of milliseconds of the real handover, and a snapshot (a handful of
/// reads) this often costs ZooKeeper little for the few seconds a switchover takes.
const POLL: Duration = Duration::from_millis(25);

/// The longest `--timeout`: a request whose target never takes over keeps the cluster
/// without an active until it lapses, so hours are never what an operator means. The
/// daemons bound every request by the same figure from when they first saw it.
const MAX_TIMEOUT: Duration = crate::elector::MAX_SWITCHOVER;

/// `warden failover`: move the active role to another node.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct FailoverArgs {
    /// The node to take over; default: the eligible standby with the highest priority
    /// (ties: the smallest node id), named in the request so that the old active's
    /// `demote` knows whom to hand over to.
    #[arg(long, value_name = "NODE")]
    pub to: Option<String>,
    /// How long to wait for the new active (e.g. `30s`, `2m`); the request lapses then by
    /// itself and the cluster elects normally.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_timeout)]
    pub timeout: Duration,
    /// Withdraw the pending switchover request instead (whoever made it); the cluster
    /// then elects normally.
    #[arg(long, conflicts_with_all = ["to", "timeout", "force"])]
    pub cancel: bool,
    /// With --to: NODE takes over even while it is ineligible (unhealthy, a failed
    /// `follow`, a failing `standby_command`) or behind the best-placed standby by more
    /// than `election.max_lag`: your word that its data will do.
    #[arg(long, requires = "to")]
    pub force: bool,
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (write e.g. 30s or 2m)"))?;
    if d.is_zero() || d > MAX_TIMEOUT {
        return Err(format!(
            "must be more than 0 and at most {}",
            humantime::format_duration(MAX_TIMEOUT)
        ));
    }
    Ok(d)
}

/// A request written to `control`.
#[derive(Clone, Debug)]
pub struct Requested {
    pub request: FailoverRequest,
    /// `from` held the lock when the request was written: it is to step down cleanly, so
    /// that nobody needs to fence it. (Without an active, the target fences the last one
    /// first, as SPEC §6 says.)
    pub stepping_down: bool,
    /// When the write was sent: the switchover's time counts from here.
    pub sent_at: Instant,
    /// The request's deadline on this process's clock.
    pub lapses_at: Instant,
    pub timeout: Duration,
    /// The epoch `from` was active at when the request was written: a switchover it calls
    /// off (SPEC §6a.2) is recorded in history at that epoch.
    pub epoch: Option<Epoch>,
    /// How many called-off switchovers of `from` at `epoch` history held already: only a
    /// newer one is this request's.
    pub called_off_before: usize,
}

/// A finished switchover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Switched {
    pub from: String,
    pub to: String,
    pub epoch: Option<Epoch>,
    /// From sending the request to seeing the new active.
    pub took: Duration,
    /// The old active did not step down cleanly (its demote failed, or its service would
    /// not stop), so the new active fenced it first: how, as the new active recorded it.
    pub fenced: Option<String>,
}

/// Runs `warden failover`: prints the request and then the new active and the time taken;
/// returns the exit code (SPEC §7).
pub async fn failover<C: Connector>(
    cfg: &Config,
    connector: &C,
    args: &FailoverArgs,
) -> Result<(), OpError> {
    let zk = operator::session(connector).await?;
    if args.cancel {
        match cancel(&zk).await? {
            Some(r) => crate::outln!(
                "withdrew the switchover request {} -> {} (by {}, deadline {}); the \
                 cluster elects normally",
                record::printable(&r.from),
                record::printable(r.to.as_deref().unwrap_or("any healthy standby")),
                record::printable(&r.by),
                record::printable(&r.deadline)
            ),
            None => crate::outln!("no switchover request is pending; nothing to withdraw"),
        }
        return Ok(());
    }
    let requested = request(&zk, cfg, args).await?;
    let r = &requested.request;
    crate::outln!(
        "switchover requested: {} -> {}{} (by {}, lapses at {}); waiting up to {}",
        r.from,
        r.to.as_deref().unwrap_or("any healthy standby"),
        if args.to.is_none() && r.to.is_some() {
            " (the eligible standby with the highest priority)"
        } else {
            ""
        },
        r.by,
        r.deadline,
        humantime::format_duration(requested.timeout)
    );
    let s = await_switch(connector, zk, &requested).await?;
    crate::outln!(
        "new active: {} (epoch {}) after {} ms",
        s.to,
        s.epoch.map_or_else(|| "?".to_string(), |e| e.to_string()),
        s.took.as_millis()
    );
    if let Some(how) = &s.fenced {
        crate::errln!("warning: {}", not_clean(&s, how));
    }
    Ok(())
}

/// What the operator is told when the new active had to fence the old one on its way in.
pub fn not_clean(s: &Switched, how: &str) -> String {
    format!(
        "{from} did not step down cleanly (its demote failed, or its service would not stop: \
         see {from}'s log), so {to} fenced it before promoting ({how}). This was a takeover, \
         not a clean handover: check {from}'s service, and that {to} has the data it should",
        from = record::printable(&s.from),
        to = record::printable(&s.to),
        how = record::printable(how)
    )
}

/// `failover --cancel`: removes the request `control` holds, version-checked, and returns
/// it. The operator's way out of a request that would otherwise hold standbys out until
/// its deadline (a target that is gone, a deadline from a skewed clock). Refused once the
/// old active is stepping down for a target that lives ([`too_late_to_cancel`]); a request
/// that changed between the look and the write is left for the operator to look again.
pub async fn cancel<S: Session>(zk: &S) -> Result<Option<FailoverRequest>, OpError> {
    let snap = zk
        .snapshot()
        .await
        .map_err(OpError::store("read the cluster"))?;
    let judged = snap.control.failover.clone();
    if let Some(why) = judged.as_ref().and_then(|r| too_late_to_cancel(&snap, r)) {
        return Err(OpError::Refused(why));
    }
    let mut withdrawn = None;
    zk.update_control_from((snap.control.clone(), snap.control_version), |c| {
        if c.failover != judged {
            return Err(
                "the switchover request changed while this command looked at the cluster; run \
                 `warden status`, then `warden failover --cancel` again if it is still wanted"
                    .to_string(),
            );
        }
        withdrawn = c.failover.take();
        Ok(withdrawn.is_some())
    })
    .await
    .map_err(OpError::store("withdraw the switchover request"))?
    .map_err(OpError::Refused)?;
    Ok(withdrawn)
}

/// Why `request` can no longer be withdrawn, if so: its old active has begun to step down
/// for its target (its member record says `demoting`), or no longer holds the lock, and
/// both wardens live. The old active's demote has paused
/// its writes and waited for the target to have every one; withdrawn now, the request no
/// longer keeps the other standbys out, and one without those writes could take the lock
/// the old active is releasing (the simulation's seed 339357 lost acknowledged writes so).
/// The old active calls the switchover off by itself when its demote fails, and the request
/// lapses by its deadline in any case. Not refused when either warden is gone (the way out
/// of a request whose target died) or nobody is named.
fn too_late_to_cancel(snap: &ClusterSnapshot, request: &FailoverRequest) -> Option<String> {
    let to = request.to.as_deref()?;
    let member = |id: &str| {
        snap.members
            .iter()
            .find_map(|(m, r)| (m == id).then_some(r.as_ref().ok()).flatten())
    };
    let (from, target) = (member(&request.from)?, member(to)?);
    if target.role == Role::Ineligible && !request.force {
        return None;
    }
    // Demoting: its demote runs, or it is releasing the lock after it. Not the holder any
    // more while its warden lives: it has ceded, and the target is taking over, or waits
    // out the session timeout of a link it made again before it may (stop 37's review: a
    // withdrawal then let another standby take the lock first).
    let stepping_down =
        from.role == Role::Demoting || snap.lock_holder_id() != Some(request.from.as_str());
    stepping_down.then(|| {
        format!(
            "too late to cancel: {from} is stepping down for {to} or has stepped down (its \
             demote has paused its writes and handed over, or is doing so), and withdrawing \
             the request now would let a standby without those writes take over. Wait for \
             {to} to become active (`warden status`): if {from}'s demote fails it calls the \
             switchover off by itself, and the request lapses at {deadline} in any case. If \
             {to} cannot take over, stop its warden first; then the request can be withdrawn",
            from = record::printable(&request.from),
            to = record::printable(to),
            deadline = record::printable(&request.deadline),
        )
    })
}

/// Checks the refusals of SPEC §8 and writes the request into `control`. Paused and
/// pending are checked again inside the version-checked write, so a pause or another
/// request that lands in between is never overwritten.
pub async fn request<S: Session>(
    zk: &S,
    cfg: &Config,
    args: &FailoverArgs,
) -> Result<Requested, OpError> {
    request_at(zk, cfg, args, SystemTime::now()).await
}

/// [`request`] with the wall clock given: the deadline is `wall` + `--timeout`, and `wall`
/// judges whether a request in `control` is still pending (the simulation's operator
/// passes its virtual clock).
pub async fn request_at<S: Session>(
    zk: &S,
    cfg: &Config,
    args: &FailoverArgs,
    wall: SystemTime,
) -> Result<Requested, OpError> {
    // `wall` and this instant are the command's start: the deadline counts from both.
    let sent_at = Instant::now();
    let snap = match tokio::time::timeout(args.timeout, zk.snapshot()).await {
        Ok(read) => read.map_err(OpError::store("read the cluster"))?,
        Err(_) => {
            return Err(OpError::Failed(format!(
                "could not read the cluster within the --timeout of {}; nothing was requested",
                humantime::format_duration(args.timeout)
            )))
        }
    };
    control_refusal(&snap.control, wall).map_err(OpError::Refused)?;
    let stepping_down = snap.active().is_some();
    let epoch = snap.active().and_then(|(h, m)| h.epoch.or(m.node.epoch));
    let from = match (snap.active(), &snap.lock, &args.to) {
        (Some((holder, _)), _, _) => holder.node_id.clone(),
        // Nobody holds the lock and the operator names the node to take it: the way to
        // an active when only priority-0 standbys remain (SPEC §6). `from` is the last
        // active (the breadcrumb's node), which stays out of the election until the
        // request is done or lapses; the target still fences it first.
        (None, None, Some(to)) => match &snap.breadcrumb {
            // (The last active itself may be the one named: it takes over from nobody.)
            Some((Ok(b), _)) if b.node_id != *to => b.node_id.clone(),
            _ => NOBODY.to_string(),
        },
        (None, _, _) => return Err(OpError::Refused(no_active(cfg, &snap))),
    };
    match &args.to {
        Some(to) => target_refusal(cfg, &snap, &from, to, args.force)
            .or_else(|| lag_refusal(cfg.election.max_lag, &snap, &from, to, args.force)),
        None => standby_refusal(&snap, &from),
    }
    .map_or(Ok(()), |why| Err(OpError::Refused(why)))?;

    let deadline = wall.checked_add(args.timeout).ok_or_else(|| {
        OpError::Refused("the clock is too far in the future to set a deadline".into())
    })?;
    // SPEC §6a.3: every planned switchover has a successor, so that the old active's
    // `demote` always knows whom to hand over to (`WARDEN_SUCCESSOR_*`).
    let to = args.to.clone().or_else(|| successor(&snap, &from));
    let request = FailoverRequest {
        from,
        to,
        by: operator::identity(),
        deadline: record::rfc3339(deadline),
        force: args.force,
    };
    // The write too is bounded by the deadline: a store that hangs must not keep the
    // command past the --timeout it was given.
    let left = (sent_at + args.timeout).saturating_duration_since(Instant::now());
    let written = match tokio::time::timeout(
        left,
        zk.update_control_from((snap.control.clone(), snap.control_version), |c| {
            control_refusal(c, wall)?;
            c.failover = Some(request.clone());
            Ok(true)
        }),
    )
    .await
    {
        Ok(written) => written,
        Err(_) => Err(StoreError::Unknown(format!(
            "no answer within the --timeout of {}",
            humantime::format_duration(args.timeout)
        ))),
    };
    match written {
        Ok(Ok(_)) => Ok(Requested {
            called_off_before: called_off(&snap.history, &request.from, epoch).len(),
            request,
            stepping_down,
            sent_at,
            lapses_at: sent_at + args.timeout,
            timeout: args.timeout,
            epoch,
        }),
        Ok(Err(why)) => Err(OpError::Refused(why)),
        Err(StoreError::Unknown(e)) => Err(OpError::Failed(format!(
            "the switchover request may or may not have been written ({e}); `warden status` \
             shows it if it was, and it lapses at {} by itself",
            request.deadline
        ))),
        Err(e) => Err(OpError::store("write the switchover request")(e)),
    }
}

/// Waits, reading the cluster every [`POLL`], until a node other than `from` is active
/// (the target, if the request names one), or the request lapses. `connector` opens a
/// fresh session when the command's own one (`zk`) is lost during the wait.
pub async fn await_switch<C: Connector>(
    connector: &C,
    zk: C::Session,
    req: &Requested,
) -> Result<Switched, OpError> {
    let mut zk = zk;
    let mut last: Option<ClusterSnapshot> = None;
    let mut last_error: Option<StoreError> = None;
    let mut target_left = false;
    let mut called_off_line: Option<String> = None;
    while let Some(left) = req
        .lapses_at
        .checked_duration_since(Instant::now())
        .filter(|left| !left.is_zero())
    {
        match tokio::time::timeout(left, zk.snapshot()).await {
            Err(_) => break,
            Ok(Ok(snap)) => {
                last_error = None;
                // SPEC §6a.2 first: a switchover its old active called off is never reported
                // done, even when another node took over afterwards (the old active was
                // stopped while it promoted itself again): its demote said the handover
                // could not be made.
                let off = called_off(&snap.history, &req.request.from, req.epoch);
                if off.len() > req.called_off_before {
                    // (Newest first: the first is this request's.)
                    let line = off[0].to_string();
                    if let Some((h, _)) = snap.active() {
                        let mut why = called_off_message(req, &line);
                        if h.node_id != req.request.from {
                            why = format!(
                                "{SWITCHOVER_CALLED_OFF}{} ({from}'s demote hook failed and it \
                                 called the switchover off; {from} then stepped down anyway \
                                 and {new} took over at epoch {}: it may lack what {from} had \
                                 not handed over; see {from}'s log and check {new}'s data)",
                                record::printable(&line),
                                h.epoch.map_or_else(|| "?".into(), |e| e.to_string()),
                                from = record::printable(&req.request.from),
                                new = record::printable(&h.node_id),
                            );
                        }
                        return Err(OpError::Failed(why));
                    }
                    called_off_line = Some(line);
                    last = Some(snap);
                    let left = req.lapses_at.saturating_duration_since(Instant::now());
                    tokio::time::sleep(POLL.min(left)).await;
                    continue;
                }
                if let Some(mut done) = switched(&snap, req) {
                    if req.stepping_down {
                        done.fenced =
                            fenced_on_the_way(&zk, snap.history, &done, req.lapses_at).await;
                    }
                    return Ok(done);
                }
                if let Some(to) = &req.request.to {
                    target_left |= !snap.members.iter().any(|(id, _)| id == to);
                }
                last = Some(snap);
            }
            Ok(Err(e)) => {
                if matches!(e, StoreError::SessionLost(_)) {
                    // The session of this command expired (a long ZooKeeper outage): open
                    // another one, within what is left of the wait now (the failed read
                    // took some of it: the simulation's seed 32848 returned 65 ms late).
                    let left = req.lapses_at.saturating_duration_since(Instant::now());
                    if let Ok(Ok(fresh)) = tokio::time::timeout(left, connector.connect()).await {
                        zk = fresh;
                    }
                }
                last_error = Some(e);
            }
        }
        let left = req.lapses_at.saturating_duration_since(Instant::now());
        tokio::time::sleep(POLL.min(left)).await;
    }
    let mut why = timed_out(req, last.as_ref(), last_error, target_left);
    if let (Some(line), OpError::Failed(text)) = (&called_off_line, &mut why) {
        text.push_str(&format!(
            "; {} called the switchover off ({SWITCHOVER_CALLED_OFF}{line}) and was \
             promoting itself again",
            req.request.from
        ));
    }
    Err(why)
}

/// The lines of `from`'s called-off switchovers at `epoch` in `history`, newest first
/// (SPEC §6a.2: `switchover called off: <the demote hook's last line>`).
fn called_off<'h>(history: &'h History, from: &str, epoch: Option<Epoch>) -> Vec<&'h str> {
    history
        .entries
        .iter()
        .filter(|e| e.node_id == from && e.epoch == epoch)
        .filter_map(|e| e.reason.strip_prefix(SWITCHOVER_CALLED_OFF))
        .collect()
}

/// What `failover` says when the old active called the switchover off (SPEC §6a.2).
fn called_off_message(req: &Requested, line: &str) -> String {
    let from = record::printable(&req.request.from);
    format!(
        "{SWITCHOVER_CALLED_OFF}{line} ({from}'s demote hook failed, so {from} promoted \
         itself again{} and serves on: nothing was handed over, and nothing it acknowledged \
         was lost; see {from}'s log, fix what its demote hook says, and try again)",
        req.epoch
            .map_or_else(String::new, |e| format!(" at epoch {e}")),
        line = record::printable(line),
    )
}

/// SPEC §6a.3: the successor `failover` without `--to` names: the best-placed eligible
/// standby (§6b: healthy, `standby`, not of priority 0; the highest priority, then the
/// greatest position, then the smallest node id), as the daemons place them.
fn successor(snap: &ClusterSnapshot, from: &str) -> Option<String> {
    best_placed(
        snap.members.iter().filter_map(|(_, m)| m.as_ref().ok()),
        from,
    )
    .map(|m| m.node.node_id.clone())
}

/// The switchover's result, if `snap` shows it done.
fn switched(snap: &ClusterSnapshot, req: &Requested) -> Option<Switched> {
    let (holder, member) = snap.active()?;
    let wanted = holder.node_id != req.request.from
        && req
            .request
            .to
            .as_ref()
            .is_none_or(|to| *to == holder.node_id);
    wanted.then(|| Switched {
        from: req.request.from.clone(),
        to: holder.node_id.clone(),
        epoch: holder.epoch.or(member.node.epoch),
        took: req.sent_at.elapsed(),
        fenced: None,
    })
}

/// The longest the command waits, once the new active is seen, for its history to show
/// how it got there.
const HISTORY_WAIT: Duration = Duration::from_secs(2);

/// Whether the new active fenced the old one (`done.from`) on its way to `done.epoch`,
/// and how: from its history entries at that epoch (`→ fencing` naming `from`, then
/// `fencing →` with how it fenced). Fencing something else (its own service, left over
/// from an earlier stop) says nothing of `from`'s demotion. Each node appends its entries
/// as it goes, and the new active is seen once its member record says so, which may be
/// before its last entries have landed: the command reads the history again until the new
/// active's `→ active` entry is there, for up to [`HISTORY_WAIT`] and never past the
/// request's lapse (`until`: the command's own bound). Best effort: an entry that could
/// not be written is not seen.
async fn fenced_on_the_way<S: Session>(
    zk: &S,
    mut history: History,
    done: &Switched,
    until: Instant,
) -> Option<String> {
    let epoch = done.epoch?;
    let deadline = (Instant::now() + HISTORY_WAIT).min(until);
    // What the new active records as it starts to fence `from`.
    let fencing_from = Reason::FencingNode(done.from.clone()).to_string();
    let (fencing, active) = (Role::Fencing.as_str(), Role::Active.as_str());
    loop {
        let ours = |e: &&HistoryEntry| e.node_id == done.to && e.epoch == Some(epoch);
        let entries: Vec<&HistoryEntry> = history.entries.iter().filter(ours).collect();
        if entries
            .iter()
            .any(|e| e.to == fencing && e.reason == fencing_from)
        {
            // (Newest first: the first `fencing →` is the last fence's outcome.)
            let how = entries.iter().find(|e| e.from == fencing);
            return Some(how.map_or(fencing_from, |e| e.reason.clone()));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if entries.iter().any(|e| e.to == active) || left.is_zero() {
            return None;
        }
        tokio::time::sleep(POLL.min(left)).await;
        let left = deadline.saturating_duration_since(Instant::now());
        history = match tokio::time::timeout(left, zk.read_history()).await {
            Ok(Ok(h)) => h,
            _ => return None,
        };
    }
}

/// Why no new active was seen in time, from the last state read.
fn timed_out(
    req: &Requested,
    last: Option<&ClusterSnapshot>,
    last_error: Option<StoreError>,
    target_left: bool,
) -> OpError {
    let lapse = format!(
        "the request lapses at {} by itself and the cluster then elects normally",
        req.request.deadline
    );
    let Some(snap) = last else {
        return match last_error {
            Some(source) if source.is_unreachable() => OpError::Store {
                doing: "watch the switchover (the request was written; it lapses by itself)",
                source,
            },
            Some(e) => OpError::Failed(format!(
                "the switchover request was written but the cluster could not be read since \
                 ({e}); {lapse}; check `warden status`"
            )),
            None => OpError::Failed(format!(
                "no new active within {}; {lapse}",
                humantime::format_duration(req.timeout)
            )),
        };
    };
    let from = &req.request.from;
    let mut seen = Vec::new();
    if let (Some(to), true) = (&req.request.to, target_left) {
        seen.push(format!(
            "{to} left the cluster during the switchover (its warden stopped or its session \
             expired)"
        ));
    }
    seen.push(match (&snap.lock, snap.active()) {
        (_, Some((holder, _))) if holder.node_id == *from => {
            format!("{from} is still active: it did not step down (see its log)")
        }
        (_, Some((holder, _))) => format!("{} is active", holder.node_id),
        (None, None) => format!("{from} stepped down and nobody holds the lock"),
        (Some((Ok(h), _)), None) => format!("{} holds the lock but is not serving yet", h.node_id),
        (Some((Err(_), _)), None) => "the lock holder's record is unreadable".to_string(),
    });
    if let Some(to) = &req.request.to {
        if let Some((_, m)) = snap.members.iter().find(|(id, _)| id == to) {
            seen.push(match m {
                Ok(m) => format!("{to} is {} and {}", m.role, m.health),
                Err(e) => format!("{to}'s member record is unreadable ({e})"),
            });
        }
    }
    if let Some(e) = last_error {
        seen.push(format!("the last read of the cluster failed ({e})"));
    }
    OpError::Failed(format!(
        "no new active within {}: {}; {lapse}",
        humantime::format_duration(req.timeout),
        seen.join("; ")
    ))
}

/// Paused, or another request still pending: the refusals that `control` alone decides.
fn control_refusal(c: &Control, now: SystemTime) -> Result<(), String> {
    if c.paused {
        return Err(format!(
            "the cluster is paused ({}): nobody is promoted while paused; run `warden resume` \
             first",
            c.reason.as_deref().unwrap_or("no reason given")
        ));
    }
    match &c.failover {
        Some(f) if f.pending_at(now) => Err(format!(
            "another switchover is pending ({} -> {}, requested by {}, lapses at {}); wait \
             until it finishes or lapses, or withdraw it with `warden failover --cancel`",
            record::printable(&f.from),
            record::printable(f.to.as_deref().unwrap_or("any healthy standby")),
            record::printable(&f.by),
            record::printable(&f.deadline)
        )),
        _ => Ok(()),
    }
}

/// `from` of a request that names a node to take a free lock when no node was active
/// before (no breadcrumb): no node has this id (ids are `[A-Za-z0-9._-]`).
const NOBODY: &str = "(nobody)";

fn no_active(cfg: &Config, snap: &ClusterSnapshot) -> String {
    let name = &cfg.cluster.name;
    match &snap.lock {
        None if standby_refusal(snap, NOBODY).is_some() => format!(
            "cluster {name} has no active node (nobody holds the lock) and no healthy standby \
             that takes it by itself ({}); name the node to take over with `warden failover \
             --to NODE` (add --force for an ineligible one whose data you know will do)",
            members_summary(snap, NOBODY)
        ),
        None => format!(
            "cluster {name} has no active node (nobody holds the lock), so there is nothing to \
             switch over; the election picks an active by itself (or name one with `warden \
             failover --to NODE`)"
        ),
        Some((Ok(h), _)) => format!(
            "cluster {name} has no active node right now ({} holds the lock but is not serving \
             yet); try again once `warden status` shows an active",
            h.node_id
        ),
        Some((Err(e), _)) => format!(
            "cluster {name} has no active node that can be named (the lock holder's record is \
             unreadable: {e})"
        ),
    }
}

/// Why `to` cannot take over from `from`, if it cannot.
fn target_refusal(
    cfg: &Config,
    snap: &ClusterSnapshot,
    from: &str,
    to: &str,
    force: bool,
) -> Option<String> {
    if to == from {
        return Some(format!("{to} is already the active node"));
    }
    let Some((_, member)) = snap.members.iter().find(|(id, _)| id == to) else {
        let ids: Vec<&str> = snap.members.iter().map(|(id, _)| id.as_str()).collect();
        return Some(format!(
            "{to} is not a member of cluster {} (members: {}); is its warden running?",
            cfg.cluster.name,
            if ids.is_empty() {
                "none".to_string()
            } else {
                ids.join(", ")
            }
        ));
    };
    match member {
        Err(e) => Some(format!("{to}'s member record is unreadable ({e})")),
        // --force: the operator's word that an ineligible node's data will do.
        Ok(m) if force && matches!(m.role, Role::Standby | Role::Ineligible) => None,
        Ok(m) if m.health != Health::Healthy => Some(format!(
            "{to} is {} (role {}): it cannot take over; choose a healthy standby, or add \
             --force if you know its data will do",
            m.health, m.role
        )),
        Ok(m) if m.role == Role::Ineligible => Some(format!(
            "{to} is ineligible{}: it cannot take over; fix that, or add --force if you know \
             its data will do",
            m.follow
                .as_deref()
                .filter(|f| f.starts_with("failed"))
                .map(|f| format!(" (follow {f})"))
                .unwrap_or_default()
        )),
        Ok(m) if m.role != Role::Standby => Some(format!(
            "{to} is not a standby (role {}): it is not in the election now (starting, backing \
             off or stepping aside); try again once `warden status` shows it as standby",
            m.role
        )),
        Ok(_) => None,
    }
}

/// SPEC §6b: why `--to` may not name `to` without `--force`: it is behind the best-placed
/// eligible standby by more than `max_lag` (a position difference), or its position is
/// unknown while that standby's is known; the refusal names both positions. Nothing is
/// refused without a `max_lag`, with `--force`, or when no other standby has a position.
fn lag_refusal(
    max_lag: Option<u64>,
    snap: &ClusterSnapshot,
    from: &str,
    to: &str,
    force: bool,
) -> Option<String> {
    let max_lag = max_lag.filter(|_| !force)?;
    let members = || snap.members.iter().filter_map(|(_, m)| m.as_ref().ok());
    let best = best_placed(members(), from)?;
    let ahead = best.position?;
    let target = members().find(|m| m.node.node_id == to)?;
    let (to, best) = (record::printable(to), record::printable(&best.node.node_id));
    let why = match target.position {
        Some(p) if ahead.saturating_sub(p) <= max_lag => return None,
        Some(p) => format!(
            "{to} is at position {p}, {} behind {best} at position {ahead}: more than \
             election.max_lag = {max_lag}",
            ahead - p
        ),
        None => format!(
            "{to}'s position is unknown (its check prints none) while {best} is at position \
             {ahead}: with election.max_lag = {max_lag}, how far behind it is cannot be told"
        ),
    };
    Some(format!(
        "{why}; it would lose what only {best} holds. Choose {best}, wait for {to} to catch \
         up, or add --force if you accept the loss"
    ))
}

/// Why nobody could take over from `from`, if nobody could.
fn standby_refusal(snap: &ClusterSnapshot, from: &str) -> Option<String> {
    // Priority 0 never takes the lock by itself: only `--to` can name it.
    let healthy_standby = snap.members.iter().any(|(id, m)| {
        id != from
            && m.as_ref().is_ok_and(|m| {
                m.role == Role::Standby && m.health == Health::Healthy && m.priority != Some(0)
            })
    });
    if healthy_standby {
        return None;
    }
    Some(format!(
        "no standby is healthy ({}), so nobody could take over; {from} stays active",
        members_summary(snap, from)
    ))
}

/// Each member but `from`, with its role and health, for a refusal.
fn members_summary(snap: &ClusterSnapshot, from: &str) -> String {
    let others: Vec<String> = snap
        .members
        .iter()
        .filter(|(id, _)| id != from)
        .map(|(id, m)| match m {
            Ok(m) if m.priority == Some(0) => format!(
                "{id} {} and {} but of priority 0 (name it with --to)",
                m.role, m.health
            ),
            Ok(m) => format!("{id} {} and {}", m.role, m.health),
            Err(_) => format!("{id} unreadable"),
        })
        .collect();
    if others.is_empty() && from == NOBODY {
        "no member".to_string()
    } else if others.is_empty() {
        format!("{from} is the only member")
    } else {
        others.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::MemberRecord;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: FailoverArgs,
    }

    #[test]
    fn timeout_defaults_to_30s_and_must_be_positive() {
        let cli = Cli::try_parse_from(["failover"]).unwrap();
        assert_eq!(cli.args.timeout, Duration::from_secs(30));
        assert_eq!(cli.args.to, None);
        let cli = Cli::try_parse_from(["failover", "--to", "n2", "--timeout", "1500ms"]).unwrap();
        assert_eq!(cli.args.timeout, Duration::from_millis(1500));
        assert_eq!(cli.args.to.as_deref(), Some("n2"));
        assert!(Cli::try_parse_from(["failover", "--timeout", "0s"]).is_err());
        assert!(Cli::try_parse_from(["failover", "--timeout", "soon"]).is_err());
        assert!(Cli::try_parse_from(["failover", "--timeout", "2h"]).is_err());
    }

    #[test]
    fn rule_6b_the_successor_is_the_best_placed_standby_priority_then_position_then_id() {
        let member = |id: &str, role: Role, health: Health, priority: Option<u16>| {
            let m = MemberRecord {
                priority,
                ..MemberRecord::bare(
                    record::NodeRecord {
                        node_id: id.into(),
                        ..Default::default()
                    },
                    role,
                    health,
                )
            };
            (id.to_string(), Ok(m))
        };
        let mut snap = ClusterSnapshot {
            members: vec![
                member("n1", Role::Active, Health::Healthy, Some(900)),
                member("n2", Role::Standby, Health::Healthy, None),
                member("n4", Role::Standby, Health::Healthy, Some(200)),
                member("n3", Role::Standby, Health::Healthy, Some(200)),
                member("n5", Role::Ineligible, Health::Healthy, Some(800)),
                member("n6", Role::Standby, Health::Unhealthy, Some(700)),
                member("n7", Role::Standby, Health::Healthy, Some(0)),
            ],
            ..Default::default()
        };
        assert_eq!(successor(&snap, "n1").as_deref(), Some("n3"));
        // §6b: at one priority, the greater position; a known one above an unknown one.
        let at = |snap: &mut ClusterSnapshot, id: &str, position: Option<u64>| {
            for (m, r) in &mut snap.members {
                if m == id {
                    r.as_mut().unwrap().position = position;
                }
            }
        };
        at(&mut snap, "n4", Some(7));
        assert_eq!(successor(&snap, "n1").as_deref(), Some("n4"));
        at(&mut snap, "n3", Some(8));
        assert_eq!(successor(&snap, "n1").as_deref(), Some("n3"));
        // A position never places a lower priority above a higher one.
        at(&mut snap, "n2", Some(1_000_000));
        assert_eq!(successor(&snap, "n1").as_deref(), Some("n3"));
        snap.members.retain(|(id, _)| id != "n3" && id != "n4");
        assert_eq!(successor(&snap, "n1").as_deref(), Some("n2"));
        snap.members.retain(|(id, _)| id != "n2");
        assert_eq!(successor(&snap, "n1"), None);
    }

    #[test]
    fn rule_6b_failover_to_refuses_a_target_behind_by_more_than_max_lag_unless_forced() {
        let member = |id: &str, role: Role, position: Option<u64>| {
            let m = MemberRecord {
                position,
                ..MemberRecord::bare(
                    record::NodeRecord {
                        node_id: id.into(),
                        ..Default::default()
                    },
                    role,
                    Health::Healthy,
                )
            };
            (id.to_string(), Ok(m))
        };
        let snap = ClusterSnapshot {
            members: vec![
                member("n1", Role::Active, Some(1_000)),
                member("n2", Role::Standby, Some(990)),
                member("n3", Role::Standby, Some(900)),
                member("n4", Role::Standby, None),
            ],
            ..Default::default()
        };
        let refusal = |max_lag, to, force| lag_refusal(max_lag, &snap, "n1", to, force);
        // No limit by default.
        assert_eq!(refusal(None, "n3", false), None);
        // Within the limit, at it, or the best-placed itself: no refusal.
        assert_eq!(refusal(Some(90), "n3", false), None);
        assert_eq!(refusal(Some(0), "n2", false), None);
        // Behind by more: refused, naming both positions; --force lets it through.
        let why = refusal(Some(89), "n3", false).unwrap();
        assert!(
            why.contains("n3 is at position 900, 90 behind n2 at position 990")
                && why.contains("election.max_lag = 89")
                && why.contains("--force"),
            "{why}"
        );
        assert_eq!(refusal(Some(89), "n3", true), None);
        // An unknown position cannot be shown to be close enough.
        let why = refusal(Some(1_000_000), "n4", false).unwrap();
        assert!(why.contains("n4's position is unknown"), "{why}");
        assert_eq!(refusal(Some(1_000_000), "n4", true), None);
        // Nobody else's position known: nothing to compare with.
        let mut blind = snap.clone();
        for (_, m) in &mut blind.members {
            m.as_mut().unwrap().position = None;
        }
        assert_eq!(lag_refusal(Some(0), &blind, "n1", "n3", false), None);
    }

    #[test]
    fn a_lapsed_request_does_not_block_a_new_one() {
        let now = SystemTime::now();
        let mut c = Control {
            failover: Some(FailoverRequest {
                from: "n1".into(),
                to: Some("n2".into()),
                by: "op@h".into(),
                deadline: record::rfc3339(now - Duration::from_secs(1)),
                force: false,
            }),
            ..Default::default()
        };
        assert_eq!(control_refusal(&c, now), Ok(()));
        if let Some(f) = &mut c.failover {
            f.deadline = record::rfc3339(now + Duration::from_secs(10));
        }
        let why = control_refusal(&c, now).unwrap_err();
        assert!(
            why.contains("another switchover is pending (n1 -> n2"),
            "{why}"
        );
        c.paused = true;
        let why = control_refusal(&c, now).unwrap_err();
        assert!(why.contains("paused"), "{why}");
    }
}
