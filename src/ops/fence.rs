//! `warden fence NODE [--dry-run] [--force]`, `warden fence --confirm NODE` and
//! `warden fence --confirm --unreadable` (SPEC §5 "Manual fencing").
//!
//! `fence NODE` runs this node's configured chain against the incarnation the breadcrumb
//! records for NODE, from this host. A successful manual fence keeps the breadcrumb: only
//! an operator's `--confirm` deletes it, and the next election's fence of a fenced
//! incarnation succeeds again anyway (every method counts processes already gone as
//! fenced). `--confirm` is the answer to "fencing keeps failing and the old host is gone":
//! it compare-and-deletes the breadcrumb, so the next election needs no fencing. It is
//! refused while that very incarnation is provably alive (it holds the lock or its member
//! record), because then the operator's word is wrong.
//!
//! Every fence and confirmation is printed and recorded in `history` with the operator
//! (`user@host`) in its reason; [`last_confirmation`] finds the confirmation for `status`.
//! What the records say (node ids, hosts, what fence methods answered) is printed through
//! [`printable`]. A breadcrumb naming a node_id that no config could hold is unreadable
//! (see [`crate::record::check_node_id`]), so `--confirm --unreadable` is its way out.

use super::operator::{self, OpError};
use crate::config::Config;
use crate::coord::{ClusterSnapshot, StoreError};
use crate::coord::{Connector, Session};
use crate::record::{printable, HistoryEntry, MemberRecord, NodeRecord, Role};
use warden_fencing::{process, FenceChain, FenceContext, FenceReport};

/// `from` of the history entries of manual fencing: the incarnation the breadcrumb named.
pub const BREADCRUMB: &str = "breadcrumb";
/// `to` of a confirmation's history entry.
pub use crate::record::CONFIRMED_DOWN;
/// `to` of a manual fence's history entry, by its result.
pub const FENCED: &str = "fenced";
pub const NOT_FENCED: &str = "not fenced";
/// `node_id` of the history entry of `--confirm --unreadable`: the node is unknown.
pub const UNREADABLE_NODE: &str = "<unreadable breadcrumb>";

/// `warden fence`: fence the last active by hand, or confirm it is down.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct FenceArgs {
    /// The node the breadcrumb names (the last active).
    #[arg(
        value_name = "NODE",
        required_unless_present = "unreadable",
        conflicts_with = "unreadable"
    )]
    pub node: Option<String>,
    /// Print what each fence method would do to NODE, and change nothing.
    #[arg(long, conflicts_with = "confirm")]
    pub dry_run: bool,
    /// Fence NODE even while it holds the lock (it is alive in the election).
    #[arg(long, conflicts_with = "confirm")]
    pub force: bool,
    /// Record that NODE is down: delete the breadcrumb naming it, so the next election
    /// promotes without fencing.
    #[arg(long)]
    pub confirm: bool,
    /// With --confirm: delete a breadcrumb that cannot be parsed (its node is unknown).
    #[arg(long, requires = "confirm")]
    pub unreadable: bool,
}

/// What `fence NODE --dry-run` would do.
#[derive(Clone, Debug)]
pub struct Plan {
    pub target: NodeRecord,
    /// One line per method, in chain order.
    pub methods: Vec<String>,
}

/// A manual fence that ran.
#[derive(Clone, Debug)]
pub struct Fenced {
    pub target: NodeRecord,
    pub report: FenceReport,
}

/// A deleted breadcrumb.
#[derive(Clone, Debug)]
pub struct Confirmed {
    /// The record deleted, or `None` for an unreadable breadcrumb.
    pub target: Option<NodeRecord>,
}

/// Runs `warden fence`; prints what it did and returns the exit code (SPEC §7): 0 only
/// if NODE was fenced, the plan printed, or the breadcrumb deleted.
pub async fn fence<C: Connector>(
    cfg: &Config,
    connector: &C,
    args: &FenceArgs,
) -> Result<(), OpError> {
    let zk = operator::session(connector).await?;
    let node = args.node.as_deref();
    match (args.confirm, args.unreadable, node) {
        (true, true, None) => print_confirmed(&confirm_unreadable(&zk).await?),
        (true, false, Some(node)) => print_confirmed(&confirm(&zk, node).await?),
        (false, false, Some(node)) if args.dry_run => {
            let p = plan(&zk, cfg, node, args.force).await?;
            crate::outln!("would fence {} with, in order:", describe(&p.target));
            for line in &p.methods {
                crate::outln!("  {}", printable(line));
            }
            crate::outln!("(dry run: nothing was run or changed)");
            Ok(())
        }
        (false, false, Some(node)) => print_fenced(&fence_node(&zk, cfg, node, args.force).await?),
        _ => Err(OpError::Refused(
            "use `warden fence NODE [--dry-run] [--force]`, `warden fence --confirm NODE` or \
             `warden fence --confirm --unreadable`"
                .into(),
        )),
    }
}

fn print_fenced(f: &Fenced) -> Result<(), OpError> {
    let node = printable(&f.target.node_id);
    crate::outln!("{}", printable(&f.report.summary()));
    if f.report.is_fenced() {
        crate::outln!(
            "{node} is fenced. The breadcrumb stays: the next election fences this incarnation \
             again, which succeeds at once now; `warden fence --confirm {node}` records it as \
             down instead"
        );
        Ok(())
    } else {
        Err(OpError::Failed(format!(
            "{node} is NOT fenced: no method fenced it (see above); fix that method, or, if \
             {node}'s host is down for good, run `warden fence --confirm {node}`"
        )))
    }
}

fn print_confirmed(c: &Confirmed) -> Result<(), OpError> {
    match &c.target {
        Some(t) => crate::outln!(
            "{} confirmed down: its breadcrumb is deleted, so the next election promotes \
             without fencing; standbys sitting out after failed fences see it within \
             session_timeout / 6 and join again",
            describe(t)
        ),
        None => crate::outln!(
            "the unreadable breadcrumb is deleted, so the next election promotes without \
             fencing; standbys sitting out after failed fences see it within \
             session_timeout / 6 and join again"
        ),
    }
    Ok(())
}

/// The chain this node would run against NODE's incarnation, after the same checks as
/// [`fence_node`]; runs nothing.
pub async fn plan<S: Session>(
    zk: &S,
    cfg: &Config,
    node: &str,
    force: bool,
) -> Result<Plan, OpError> {
    let snap = read(zk).await?;
    let target = fence_target(&snap, node, force)?;
    let chain = chain(cfg)?;
    Ok(Plan {
        methods: chain.plan(&target_of(&snap, &target)),
        target,
    })
}

/// Runs the configured chain against NODE's incarnation in the breadcrumb. Refused when
/// the breadcrumb does not name NODE, or NODE holds the lock and `force` is not given.
pub async fn fence_node<S: Session>(
    zk: &S,
    cfg: &Config,
    node: &str,
    force: bool,
) -> Result<Fenced, OpError> {
    let snap = read(zk).await?;
    let target = fence_target(&snap, node, force)?;
    let chain = chain(cfg)?;
    crate::outln!("fencing {} with the configured chain", describe(&target));
    let report = chain.fence(&target_of(&snap, &target)).await;
    let by = operator::identity();
    let (to, verdict) = if report.is_fenced() {
        (FENCED, "fenced")
    } else {
        (NOT_FENCED, "not fenced")
    };
    let why = format!(
        "manual fence by {by} of incarnation {}: {verdict} ({})",
        target.incarnation,
        report.summary()
    );
    let entry = operator::entry(node, BREADCRUMB, to, target.epoch, why);
    operator::record(zk, &entry).await;
    Ok(Fenced { target, report })
}

/// `--confirm NODE`: compare-and-deletes the breadcrumb if it names NODE, unless that very
/// incarnation is alive (holds the lock or a member record).
pub async fn confirm<S: Session>(zk: &S, node: &str) -> Result<Confirmed, OpError> {
    let snap = read(zk).await?;
    let target = named(&snap, node)?;
    if let Some(why) = alive(&snap, &target) {
        return Err(OpError::Refused(why));
    }
    let deleted = zk
        .compare_and_delete_breadcrumb(node, Some(&target.incarnation), target.epoch, false)
        .await;
    match deleted {
        Ok(true) => {}
        Ok(false) | Err(StoreError::Rejected(_)) => {
            return Err(OpError::Failed(format!(
                "the breadcrumb changed while confirming (it no longer is {}); nothing was \
                 deleted; check `warden status` and run the command again",
                describe(&target)
            )))
        }
        Err(e) => return Err(OpError::store("delete the breadcrumb")(e)),
    }
    let by = operator::identity();
    let why = format!(
        "{CONFIRMED_DOWN} by {by}: the breadcrumb of incarnation {} was deleted, so the next \
         election promotes without fencing",
        target.incarnation
    );
    let entry = operator::entry(node, BREADCRUMB, CONFIRMED_DOWN, target.epoch, why);
    operator::record(zk, &entry).await;
    Ok(Confirmed {
        target: Some(target),
    })
}

/// `--confirm --unreadable`: deletes a breadcrumb that cannot be parsed, at the version
/// read (a breadcrumb rewritten meanwhile is left alone).
pub async fn confirm_unreadable<S: Session>(zk: &S) -> Result<Confirmed, OpError> {
    let snap = read(zk).await?;
    let (why_unreadable, version) = match &snap.breadcrumb {
        None => {
            return Err(OpError::Refused(
                "there is no breadcrumb, so there is nothing to delete: the next election \
                 fences nobody"
                    .into(),
            ))
        }
        Some((Ok(b), _)) => {
            return Err(OpError::Refused(format!(
                "the breadcrumb is readable (it names {}); if {} is down, run `warden fence \
                 --confirm {}`",
                describe(b),
                b.node_id,
                b.node_id
            )))
        }
        Some((Err(e), version)) => (e.to_string(), *version),
    };
    match zk.delete_breadcrumb_at(version, false).await {
        Ok(()) => {}
        Err(StoreError::Rejected(_)) => {
            return Err(OpError::Failed(
                "the breadcrumb changed or vanished since it was read; nothing was deleted; \
                 check `warden status` and run the command again"
                    .into(),
            ))
        }
        Err(e) => return Err(OpError::store("delete the breadcrumb")(e)),
    }
    let by = operator::identity();
    let why = format!(
        "{CONFIRMED_DOWN} by {by}: the unreadable breadcrumb ({why_unreadable}) was deleted, so \
         the next election promotes without fencing"
    );
    let entry = operator::entry(UNREADABLE_NODE, BREADCRUMB, CONFIRMED_DOWN, None, why);
    operator::record(zk, &entry).await;
    Ok(Confirmed { target: None })
}

/// The newest operator confirmation (`fence --confirm`) that no promotion has followed
/// yet, for `status`: while it stands, it explains why the breadcrumb is gone.
pub fn last_confirmation(snap: &ClusterSnapshot) -> Option<&HistoryEntry> {
    let active = Role::Active.as_str();
    snap.history
        .entries
        .iter()
        .take_while(|e| e.to != active)
        .find(|e| e.to == CONFIRMED_DOWN)
}

/// One line for `status` about a confirmation: `n1 confirmed down at <time>: <reason>`.
pub fn describe_confirmation(e: &HistoryEntry) -> String {
    format!("{} confirmed down at {}: {}", e.node_id, e.at, e.reason)
}

async fn read<S: Session>(zk: &S) -> Result<ClusterSnapshot, OpError> {
    zk.snapshot()
        .await
        .map_err(OpError::store("read the cluster"))
}

/// The breadcrumb's record if it names `node`.
fn named(snap: &ClusterSnapshot, node: &str) -> Result<NodeRecord, OpError> {
    match &snap.breadcrumb {
        None => Err(OpError::Refused(format!(
            "there is no breadcrumb, so {node} needs no fencing: the last active stepped down \
             cleanly or was confirmed down"
        ))),
        Some((Err(e), _)) => Err(OpError::Refused(format!(
            "the breadcrumb is unreadable ({e}), so it names no node; once the old active is \
             down, run `warden fence --confirm --unreadable`"
        ))),
        Some((Ok(b), _)) if b.node_id != node => Err(OpError::Refused(format!(
            "the breadcrumb names {}, not {node}: only the last active needs fencing",
            describe(b)
        ))),
        Some((Ok(b), _)) => Ok(b.clone()),
    }
}

/// NODE's incarnation to fence: refused unless the breadcrumb names it, and while NODE
/// holds the lock unless `force`.
fn fence_target(snap: &ClusterSnapshot, node: &str, force: bool) -> Result<NodeRecord, OpError> {
    let target = named(snap, node)?;
    if force {
        return Ok(target);
    }
    match &snap.lock {
        Some((Ok(holder), _)) if holder.node_id == node => Err(OpError::Refused(format!(
            "{node} holds the lock: it is alive in the election and may be serving; fencing it \
             takes its service down. Add --force if that is what you want"
        ))),
        // The lock's data is garbage, but its session says whose it is.
        Some((Err(_), _)) if snap.lock_holder_id() == Some(node) => Err(OpError::Refused(format!(
            "{node} holds the lock (by its ZooKeeper session; the lock's record is \
                 unreadable): it is alive in the election and may be serving; fencing it takes \
                 its service down. Add --force if that is what you want"
        ))),
        Some((Err(e), _)) if snap.lock_holder_id().is_none() => Err(OpError::Refused(format!(
            "the lock holder's record is unreadable ({e}), so it may be {node}; add --force to \
             fence anyway"
        ))),
        _ => Ok(target),
    }
}

/// Why `target`'s incarnation is provably alive, if it is: a confirmation would be wrong.
fn alive(snap: &ClusterSnapshot, target: &NodeRecord) -> Option<String> {
    let node = &target.node_id;
    match &snap.lock {
        Some((Ok(holder), _)) if holder.same_incarnation(target) => {
            return Some(format!(
                "{node} holds the lock with that very incarnation: its warden is alive, so it is \
                 not down. Stop it (or wait until its ZooKeeper session expires), or fence it \
                 with `warden fence {node} --force`"
            ))
        }
        // Held by a member's session: that member's record, checked below, says which
        // incarnation holds it.
        Some((Err(e), _)) if snap.lock_holder_id().is_none() => {
            return Some(format!(
                "the lock holder's record is unreadable ({e}), so it may be {node}'s incarnation; \
                 try again once `warden status` shows the lock gone or readable"
            ))
        }
        _ => {}
    }
    snap.members.iter().find_map(|(_, m)| match m {
        Ok(m) if m.node.same_incarnation(target) => Some(format!(
            "{node}'s warden of that incarnation still runs (pid {} on {}, role {}), so it is not \
             down; stop it, or fence it with `warden fence {node}`",
            m.node.pid, m.node.host, m.role
        )),
        _ => None,
    })
}

/// `record` as the chain's target, with what the live members say against taking it for
/// a record of this machine before a reboot (SPEC §5: a clone with the same machine id
/// that still runs that boot).
fn target_of(snap: &ClusterSnapshot, record: &NodeRecord) -> warden_fencing::Target {
    let mut target = record.fence_target();
    let here = crate::record::HostIdentity {
        boot_id: process::boot_id().unwrap_or_default(),
        machine_id: process::machine_id().unwrap_or_default(),
        pid_ns: process::pid_ns().ok(),
    };
    let live: Vec<MemberRecord> = snap
        .members
        .iter()
        .filter_map(|(_, m)| m.as_ref().ok().cloned())
        .collect();
    target.reboot_contradicted = here.reboot_contradicted_by(record, &live);
    target
}

/// The fence chain of this node's config, run from this host.
fn chain(cfg: &Config) -> Result<FenceChain, OpError> {
    let ctx = FenceContext::local(
        &cfg.cluster.name,
        &cfg.cluster.node_id,
        &cfg.host(),
        cfg.service.pidfile.clone(),
    )
    .map_err(|e| {
        OpError::Failed(format!(
            "cannot read this host's boot id from /proc/sys/kernel/random/boot_id ({e}); the \
             signal method needs it to tell whether the target ran here"
        ))
    })?;
    Ok(FenceChain::new(cfg.fence.clone(), ctx))
}

/// `n1 (incarnation 3f.., epoch 42, host rm1, warden pid 812, service pid 815)`, printable.
fn describe(r: &NodeRecord) -> String {
    let mut parts = vec![format!("incarnation {}", r.incarnation)];
    if let Some(e) = r.epoch {
        parts.push(format!("epoch {e}"));
    }
    if !r.host.is_empty() {
        parts.push(format!("host {}", r.host));
    }
    if r.pid != 0 {
        parts.push(format!("warden pid {}", r.pid));
    }
    if let Some(p) = r.service_pid {
        parts.push(format!("service pid {p}"));
    }
    printable(&format!("{} ({})", r.node_id, parts.join(", "))).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Health, History, MemberRecord, RecordError, SessionId, Version};
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: FenceArgs,
    }

    fn parse(args: &[&str]) -> Result<FenceArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("fence").chain(args.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn the_forms_of_the_command_parse_and_bad_mixes_do_not() {
        let a = parse(&["n1", "--dry-run"]).unwrap();
        assert_eq!(a.node.as_deref(), Some("n1"));
        assert!(a.dry_run && !a.confirm);
        let a = parse(&["--confirm", "n1"]).unwrap();
        assert!(a.confirm && !a.unreadable);
        let a = parse(&["--confirm", "--unreadable"]).unwrap();
        assert!(a.confirm && a.unreadable && a.node.is_none());
        assert!(parse(&[]).is_err());
        assert!(parse(&["--unreadable"]).is_err());
        assert!(parse(&["--confirm", "--unreadable", "n1"]).is_err());
        assert!(parse(&["--confirm", "n1", "--dry-run"]).is_err());
        assert!(parse(&["--confirm", "n1", "--force"]).is_err());
    }

    fn record(node: &str, incarnation: &str) -> NodeRecord {
        NodeRecord {
            node_id: node.into(),
            incarnation: incarnation.into(),
            epoch: Some(7),
            ..Default::default()
        }
    }

    fn snapshot(breadcrumb: Option<NodeRecord>, lock: Option<NodeRecord>) -> ClusterSnapshot {
        ClusterSnapshot {
            breadcrumb: breadcrumb.map(|b| (Ok(b), Version::new(3))),
            lock: lock.map(|l| (Ok(l), 99)),
            ..Default::default()
        }
    }

    #[test]
    fn fencing_needs_the_breadcrumb_to_name_the_node_and_no_lock_without_force() {
        let refused = |r: Result<NodeRecord, OpError>| match r {
            Err(OpError::Refused(why)) => why,
            other => panic!("not refused: {other:?}"),
        };
        let why = refused(fence_target(&snapshot(None, None), "n1", false));
        assert!(why.contains("no breadcrumb"), "{why}");
        let why = refused(fence_target(
            &snapshot(Some(record("n2", "a")), None),
            "n1",
            false,
        ));
        assert!(why.contains("names n2"), "{why}");
        let held = snapshot(Some(record("n1", "a")), Some(record("n1", "b")));
        let why = refused(fence_target(&held, "n1", false));
        assert!(
            why.contains("holds the lock") && why.contains("--force"),
            "{why}"
        );
        assert_eq!(fence_target(&held, "n1", true).unwrap().incarnation, "a");
        let unreadable = ClusterSnapshot {
            breadcrumb: Some((Err(RecordError::NotUtf8), Version::new(1))),
            ..Default::default()
        };
        let why = refused(fence_target(&unreadable, "n1", true));
        assert!(why.contains("--confirm --unreadable"), "{why}");
    }

    #[test]
    fn garbage_in_the_lock_data_still_tells_the_holder_by_its_session() {
        let mut snap = snapshot(Some(record("n1", "a")), None);
        snap.lock = Some((Err(RecordError::NotJson("x".into())), 99));
        snap.lock_owner = Some(SessionId(7));
        snap.member_sessions = vec![("n2".into(), SessionId(7))];
        assert_eq!(fence_target(&snap, "n1", false).unwrap().incarnation, "a");
        assert_eq!(alive(&snap, &record("n1", "a")), None);
        snap.breadcrumb = Some((Ok(record("n2", "b")), Version::new(3)));
        assert!(matches!(
            fence_target(&snap, "n2", false),
            Err(OpError::Refused(why)) if why.contains("holds the lock")
        ));
        // No member owns the lock's session: the holder is unknown, so refuse.
        snap.member_sessions.clear();
        assert!(alive(&snap, &record("n2", "b")).is_some());
    }

    #[test]
    fn a_live_incarnation_cannot_be_confirmed_down() {
        let target = record("n1", "a");
        let held = snapshot(Some(target.clone()), Some(record("n1", "a")));
        assert!(alive(&held, &target).is_some_and(|w| w.contains("holds the lock")));
        // The same node restarted (another incarnation) holds the lock: the recorded one
        // may be gone.
        let restarted = snapshot(Some(target.clone()), Some(record("n1", "b")));
        assert_eq!(alive(&restarted, &target), None);
        let mut member = snapshot(Some(target.clone()), None);
        member.members.push((
            "n1".into(),
            Ok(MemberRecord::bare(
                record("n1", "a"),
                Role::Standby,
                Health::Healthy,
            )),
        ));
        assert!(alive(&member, &target).is_some_and(|w| w.contains("still runs")));
    }

    #[test]
    fn the_last_confirmation_counts_until_the_next_promotion() {
        let e = |node: &str, from: &str, to: &str| HistoryEntry {
            at: "t".into(),
            node_id: node.into(),
            from: from.into(),
            to: to.into(),
            epoch: None,
            reason: "r".into(),
        };
        let mut snap = ClusterSnapshot {
            history: History {
                entries: vec![
                    e("n2", "standby", "promoting"),
                    e("n1", BREADCRUMB, CONFIRMED_DOWN),
                    e("n1", "promoting", "active"),
                ],
                ..Default::default()
            },
            ..Default::default()
        };
        let c = last_confirmation(&snap).unwrap();
        assert_eq!(c.node_id, "n1");
        assert_eq!(describe_confirmation(c), "n1 confirmed down at t: r");
        snap.history
            .entries
            .insert(0, e("n2", "promoting", "active"));
        assert!(last_confirmation(&snap).is_none());
    }
}
