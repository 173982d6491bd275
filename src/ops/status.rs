//! `warden status [--json]` (SPEC §7): read from the store alone.
//!
//! `status` must never contradict a node's own `/active`: the lock holder is found by the
//! store session that owns the lock (see [`ClusterSnapshot::active`]), so garbage in
//! the lock's data is reported as such while the node it belongs to is still named. Every
//! string from the store reaches the terminal through [`printable`]; the JSON form needs
//! no such care (JSON escapes control characters).

use crate::config::Config;
use crate::coord::{ClusterSnapshot, Connector, Session, StoreError};
use crate::record::{printable, Epoch};
use serde_json::{json, Value};

/// Reads the cluster.
pub async fn snapshot<C: Connector>(connector: &C) -> Result<ClusterSnapshot, StoreError> {
    connector.connect().await?.snapshot().await
}

/// The active's epoch: the lock record's, else the member's, else the lock's czxid, which
/// is the epoch by definition (SPEC §3 "Epoch").
fn active_epoch(snap: &ClusterSnapshot) -> Option<Epoch> {
    let (holder, member) = snap.active()?;
    holder
        .epoch
        .or(member.node.epoch)
        .or_else(|| snap.lock.as_ref().map(|(_, epoch)| *epoch))
}

/// Why the lock's record could not be read, if it could not.
fn lock_unreadable(snap: &ClusterSnapshot) -> Option<String> {
    match &snap.lock {
        Some((Err(e), _)) => Some(e.to_string()),
        _ => None,
    }
}

/// The JSON object of SPEC §7.
pub fn to_json(cfg: &Config, snap: &ClusterSnapshot) -> Value {
    let active = snap.active().map(|(holder, member)| {
        json!({
            "node_id": holder.node_id,
            "epoch": active_epoch(snap),
            "since": member.node.since,
        })
    });
    let breadcrumb = snap.breadcrumb.as_ref().map(|(b, _)| match b {
        Ok(r) => json!({"node_id": r.node_id, "epoch": r.epoch}),
        Err(e) => json!({"node_id": null, "epoch": null, "unreadable": e.to_string()}),
    });
    let members: Vec<Value> = snap
        .members
        .iter()
        .map(|(id, m)| match m {
            Ok(m) => json!({
                "node_id": id,
                "role": m.role,
                "health": m.health,
                "host": m.node.host,
                "port": m.node.port,
                "pid": m.node.pid,
                "since": m.node.since,
                "epoch": m.node.epoch,
                "epoch_seen": m.node.epoch_seen,
                "follow": m.follow,
                "priority": m.priority,
                "position": m.position,
                "position_at": m.position_at,
                "after": m.after,
                "failed_takeovers": m.failed_takeovers,
                // A new session's wait before it may take the lock, as its record last
                // said it (SPEC §6b; null once the wait is over).
                "tries_in": m.tries_in,
                "session_timeout": m.session_timeout,
                "containment": m.containment,
                "leftover": m.leftover.as_ref().map(|l| json!({
                    "epoch": l.epoch,
                    "service_pid": l.service_pid,
                    "service_cgroup": l.service_cgroup,
                })),
                "remembers": m.remembers.as_ref().map(|r| json!({
                    "node_id": r.active.node_id,
                    "epoch": r.active.epoch,
                    "incarnation": r.active.incarnation,
                })),
            }),
            Err(e) => json!({
                "node_id": id, "role": null, "health": null, "host": null, "port": null,
                "pid": null, "since": null, "unreadable": e.to_string(),
            }),
        })
        .collect();
    json!({
        "cluster": cfg.cluster.name,
        "backend": cfg.coordination.backend.as_str(),
        "paused": snap.control.paused,
        "lost_data": snap.lost_data().is_some(),
        "lost_data_reason": snap.lost_data(),
        "pause_reason": snap.control.reason,
        "control_unreadable": snap.control_unreadable,
        "active": active,
        "lock_holder": snap.lock_holder_id(),
        "lock_unreadable": lock_unreadable(snap),
        "breadcrumb": breadcrumb,
        "failover": snap.control.failover,
        "failover_pending": snap
            .control
            .failover
            .as_ref()
            .is_some_and(|f| f.pending_at(std::time::SystemTime::now())),
        "last_confirmation": super::fence::last_confirmation(snap),
        "history_unreadable_entries": snap.history.unreadable_entries,
        "history_unreadable": snap.history.unreadable,
        "history_set_aside": snap.set_aside,
        "garbage": snap.garbage,
        "members": members,
    })
}

/// Whether the store keeps a trace of `node`'s epoch `e`: a breadcrumb of it or a later
/// one, a later promotion, an entry of that node's at a later epoch, the operator's
/// confirm of it (what `Elector::forgotten_active` goes by).
fn store_keeps(snap: &ClusterSnapshot, node: &str, e: Epoch) -> bool {
    use crate::coord::items;
    crate::record::KeptOf {
        breadcrumb: snap
            .breadcrumb
            .as_ref()
            .and_then(|(b, _)| b.as_ref().ok()?.epoch),
        newest_promotion: items::newest_promotion(&snap.history),
        node_entries: items::history_by_node(&snap.history).get(node).copied(),
        node_confirmed: items::confirmed_by_node(&snap.history).get(node).copied(),
    }
    .ended(e)
}

/// The view for people: who is active, then a table of members.
pub fn to_text(cfg: &Config, snap: &ClusterSnapshot) -> String {
    let p = |s: &str| printable(s).into_owned();
    let mut out = String::new();
    out.push_str(&format!(
        "cluster {} ({})\n",
        p(&cfg.cluster.name),
        cfg.coordination.backend.as_str()
    ));
    if let Some(why) = snap.lost_data() {
        out.push_str(&format!("*** STORE LOST DATA: {why} ***\n"));
    }
    if snap.control.paused {
        out.push_str(&format!(
            "*** PAUSED: nobody is promoted or demoted automatically ({}) — `warden resume` ends it ***\n",
            p(snap.control.reason.as_deref().unwrap_or("no reason given"))
        ));
    }
    if let Some(e) = &snap.control_unreadable {
        out.push_str(&format!(
            "control:    UNREADABLE ({}): every node treats the cluster as not paused with no \
             switchover pending; `warden pause` (then `warden resume`) writes it anew\n",
            p(e)
        ));
    }
    match snap.active() {
        Some((holder, member)) => out.push_str(&format!(
            "active:     {} (epoch {}, since {})\n",
            p(&holder.node_id),
            active_epoch(snap).map_or_else(|| "?".to_string(), |e| e.to_string()),
            p(member.node.since.as_deref().unwrap_or("?"))
        )),
        None => {
            let why = match (&snap.lock, snap.lock_holder_id()) {
                (None, _) => "nobody holds the lock".to_string(),
                (Some(_), Some(id)) => {
                    format!("{} holds the lock and is not serving yet", p(id))
                }
                (Some((Ok(h), _)), None) => format!(
                    "the lock names {}, but no member's ZooKeeper session holds it",
                    p(&h.node_id)
                ),
                (Some((Err(_), _)), None) => {
                    "the lock's record is unreadable and no member's ZooKeeper session holds it"
                        .to_string()
                }
            };
            out.push_str(&format!("active:     none ({why})\n"));
        }
    }
    if let Some(e) = lock_unreadable(snap) {
        let holder = match snap.lock_holder_id() {
            Some(id) => format!(
                "its holder {} is known by the ZooKeeper session that owns it",
                p(id)
            ),
            None => "its holder is unknown".to_string(),
        };
        out.push_str(&format!(
            "lock:       record UNREADABLE ({}); {holder}\n",
            p(&e)
        ));
    }
    match &snap.breadcrumb {
        Some((Ok(b), _)) => out.push_str(&format!(
            "breadcrumb: {} (epoch {}): fenced before anyone else promotes\n",
            p(&b.node_id),
            b.epoch.map_or_else(|| "?".to_string(), |e| e.to_string())
        )),
        Some((Err(e), _)) => out.push_str(&format!(
            "breadcrumb: UNREADABLE ({}); `warden fence --confirm --unreadable` once the old active is down\n",
            p(&e.to_string())
        )),
        None => out.push_str("breadcrumb: none (no old active needs fencing before the next promotion)\n"),
    }
    if let Some(e) = super::fence::last_confirmation(snap) {
        out.push_str(&format!(
            "confirmed:  {}\n",
            p(&super::fence::describe_confirmation(e))
        ));
    }
    if let Some(f) = &snap.control.failover {
        let state = if f.pending_at(std::time::SystemTime::now()) {
            format!("lapses {}", p(&f.deadline))
        } else {
            format!("lapsed {}; the next active clears it", p(&f.deadline))
        };
        out.push_str(&format!(
            "switchover: {} -> {} requested by {} ({state})\n",
            p(&f.from),
            p(f.to.as_deref().unwrap_or("any healthy standby")),
            p(&f.by),
        ));
    }
    if let Some(e) = &snap.history.unreadable {
        out.push_str(&format!(
            "history:    UNREADABLE ({}); the next transition keeps a copy of it beside it \
             before starting a new one\n",
            p(e)
        ));
    }
    for line in &snap.garbage {
        out.push_str(&format!("garbage:    {}\n", p(line)));
    }
    if snap.history.unreadable_entries > 0 {
        out.push_str(&format!(
            "history:    {} unreadable entries skipped (`warden history` shows the rest)\n",
            snap.history.unreadable_entries
        ));
    }
    if !snap.set_aside.is_empty() {
        let paths: Vec<String> = snap.set_aside.iter().map(|s| p(s)).collect();
        out.push_str(&format!(
            "history:    earlier histories kept in {}\n",
            paths.join(", ")
        ));
    }
    out.push_str(&format!(
        "\n{:<16} {:<11} {:<10} {:<12} {:<20} {:<25} {:<20} {}\n",
        "NODE", "ROLE", "HEALTH", "EPOCH", "POSITION", "SINCE", "HOST", "PID"
    ));
    if snap.members.is_empty() {
        out.push_str("(no warden is running)\n");
    }
    for (id, m) in &snap.members {
        match m {
            Ok(m) => out.push_str(&format!(
                "{:<16} {:<11} {:<10} {:<12} {:<20} {:<25} {:<20} {}\n",
                p(id),
                m.role.to_string(),
                m.health.to_string(),
                m.node
                    .epoch
                    .map_or_else(|| "-".to_string(), |e| e.to_string()),
                m.position
                    .map_or_else(|| "-".to_string(), |p| p.to_string()),
                p(m.node.since.as_deref().unwrap_or("-")),
                p(&m.node.host),
                m.node.pid
            )),
            Err(e) => out.push_str(&format!(
                "{:<16} unreadable member record: {}\n",
                p(id),
                p(&e.to_string())
            )),
        }
    }
    // What the lease really follows, and how each service is contained (SPEC §4, §6):
    // said once per member when it is worth an operator's attention.
    for (id, m) in &snap.members {
        let Ok(m) = m else { continue };
        if let Some(t) = &m.session_timeout {
            out.push_str(&format!("{}: session timeout in force {}\n", p(id), p(t)));
        }
        if let Some(c) = m
            .containment
            .as_deref()
            .filter(|c| !c.starts_with("cgroup"))
        {
            out.push_str(&format!("{}: service containment: {}\n", p(id), p(c)));
        }
        if let Some(f) = &m.follow {
            out.push_str(&format!("{}: follow {}\n", p(id), p(f)));
        }
        // The review of stop 39: a service that outlived its stop blocks every promotion
        // (each winner fences it first, and that fence cannot be verified while it runs).
        if let Some(l) = &m.leftover {
            let what = match (l.service_pid, &l.service_cgroup) {
                (Some(pid), Some(cg)) => format!("pid {pid}, cgroup {}", p(cg)),
                (Some(pid), None) => format!("pid {pid}"),
                (None, Some(cg)) => format!("cgroup {}", p(cg)),
                (None, None) => "its processes".to_string(),
            };
            out.push_str(&format!(
                "{}: its service of epoch {} outlived its stop ({what}) and still runs: no \
                 node becomes active until it is gone; processes stuck in the kernel (a hung \
                 mount?) end only with a reboot of {}\n",
                p(id),
                l.epoch.map_or_else(|| "-".to_string(), |e| e.to_string()),
                p(&m.node.host),
            ));
        }
        // Said only while the store keeps no trace of that epoch: after each reconnection
        // every standby remembers the healthy active (the review of stop 42).
        if let Some((r, e)) = m
            .remembers
            .as_ref()
            .and_then(|r| Some((r, r.active.epoch?)))
            .filter(|(r, e)| !store_keeps(snap, &r.active.node_id, *e))
        {
            out.push_str(&format!(
                "{}: saw {} commit epoch {e} (before its link with the store broke, or from \
                 the lock alone), and the store keeps no trace of that epoch: whoever wins \
                 next fences {1} first (unless its warden lives and stepped down)\n",
                p(id),
                p(&r.active.node_id),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{
        Control, FailoverRequest, Health, History, HistoryEntry, MemberRecord, NodeRecord,
        RecordError, Role, SessionId, Version,
    };

    fn config() -> Config {
        crate::config::parse(
            "[cluster]\nname = \"rm\"\nnode_id = \"n1\"\n\n[coordination.zookeeper]\n\
             connect = \"127.0.0.1:2181\"\n\n[service]\ncommand = [\"/usr/bin/s\"]\n\n\
             [[fence]]\nkind = \"script\"\ncommand = [\"/bin/true\"]\n",
            std::path::Path::new("test.toml"),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn member(node: &str, role: Role, host: &str) -> MemberRecord {
        MemberRecord::bare(
            NodeRecord {
                node_id: node.into(),
                host: host.into(),
                incarnation: "i".into(),
                epoch: Some(42),
                since: Some("2025-01-02T03:04:05Z".into()),
                ..Default::default()
            },
            role,
            Health::Healthy,
        )
    }

    #[test]
    fn garbage_in_the_lock_data_does_not_hide_the_active_that_holds_it() {
        let snap = ClusterSnapshot {
            lock: Some((Err(RecordError::NotJson("expected value".into())), 42)),
            lock_owner: Some(SessionId(7)),
            members: vec![
                ("n1".into(), Ok(member("n1", Role::Active, "h1"))),
                ("n2".into(), Ok(member("n2", Role::Standby, "h2"))),
            ],
            member_sessions: vec![("n1".into(), SessionId(7)), ("n2".into(), SessionId(8))],
            ..Default::default()
        };
        let text = to_text(&config(), &snap);
        assert!(text.contains("active:     n1 (epoch 42"), "{text}");
        assert!(
            text.contains("lock:       record UNREADABLE")
                && text.contains("its holder n1 is known by the ZooKeeper session"),
            "{text}"
        );
        let json = to_json(&config(), &snap);
        assert_eq!(json["active"]["node_id"], "n1", "{json:#}");
        assert_eq!(json["lock_holder"], "n1", "{json:#}");
        assert!(json["lock_unreadable"].is_string(), "{json:#}");

        // A valid record naming another node does not move the lock either.
        let mut lying = snap.clone();
        lying.lock = Some((
            Ok(NodeRecord {
                node_id: "n2".into(),
                ..Default::default()
            }),
            42,
        ));
        assert_eq!(lying.active().map(|(h, _)| h.node_id.as_str()), Some("n1"));

        // The holder's session belongs to no member: nobody is active, and status says why.
        let mut orphan = snap.clone();
        orphan.lock_owner = Some(SessionId(99));
        let text = to_text(&config(), &orphan);
        assert!(
            text.contains("active:     none (the lock's record is unreadable and no member"),
            "{text}"
        );
    }

    /// SPEC §6b: each member's data position, with when it was read in the JSON; `-` and
    /// null while unknown.
    #[test]
    fn positions_are_shown_and_an_unknown_one_is_a_dash() {
        let mut m2 = member("n2", Role::Standby, "h2");
        m2.position = Some(123_456_789);
        m2.position_at = Some("2026-11-29T09:00:00.000Z".into());
        let mut m3 = member("n3", Role::Standby, "h3");
        m3.after = Some("n2".into());
        m3.failed_takeovers = Some(2);
        let snap = ClusterSnapshot {
            members: vec![("n2".into(), Ok(m2)), ("n3".into(), Ok(m3))],
            ..Default::default()
        };
        let text = to_text(&config(), &snap);
        assert!(text.contains("POSITION"), "{text}");
        let row = |id: &str| {
            text.lines()
                .find(|l| l.starts_with(id))
                .unwrap_or_else(|| panic!("no row of {id}: {text}"))
                .split_whitespace()
                .nth(4)
                .map(str::to_string)
        };
        assert_eq!(row("n2").as_deref(), Some("123456789"), "{text}");
        assert_eq!(row("n3").as_deref(), Some("-"), "{text}");
        let json = to_json(&config(), &snap);
        assert_eq!(json["members"][0]["position"], 123_456_789, "{json:#}");
        assert_eq!(
            json["members"][0]["position_at"], "2026-11-29T09:00:00.000Z",
            "{json:#}"
        );
        assert!(json["members"][1]["position"].is_null(), "{json:#}");
        // And the standby each lets try first.
        assert!(json["members"][0]["after"].is_null(), "{json:#}");
        assert_eq!(json["members"][1]["after"], "n2", "{json:#}");
        assert_eq!(json["members"][1]["failed_takeovers"], 2, "{json:#}");
        assert!(json["members"][0]["failed_takeovers"].is_null(), "{json:#}");
    }

    /// The review of stop 39: a member's service that outlived its stop blocks every
    /// promotion, and `status` says so, with what to do.
    #[test]
    fn a_members_service_that_outlived_its_stop_is_said() {
        let mut m = member("n2", Role::Ineligible, "h2");
        m.leftover = Some(NodeRecord {
            node_id: "n2".into(),
            epoch: Some(7),
            service_pid: Some(4242),
            ..Default::default()
        });
        let snap = ClusterSnapshot {
            members: vec![("n2".into(), Ok(m))],
            ..Default::default()
        };
        let text = to_text(&config(), &snap);
        assert!(
            text.contains(
                "n2: its service of epoch 7 outlived its stop (pid 4242) and still runs: no \
                 node becomes active until it is gone"
            ) && text.contains("a reboot of h2"),
            "{text}"
        );
        let json = to_json(&config(), &snap);
        assert_eq!(json["members"][0]["leftover"]["epoch"], 7, "{json:#}");
        assert_eq!(
            json["members"][0]["leftover"]["service_pid"], 4242,
            "{json:#}"
        );
        // Without one, the key is there and null.
        let plain = ClusterSnapshot {
            members: vec![("n1".into(), Ok(member("n1", Role::Standby, "h1")))],
            ..Default::default()
        };
        assert!(to_json(&config(), &plain)["members"][0]["leftover"].is_null());
        assert!(!to_text(&config(), &plain).contains("outlived"));
    }

    /// The simulation's seed 308747: a standby says which active it saw commit before its
    /// link with the store broke (the next winner fences it unless the store still names
    /// that epoch).
    #[test]
    fn an_active_a_member_remembers_is_said() {
        let mut m = member("n2", Role::Standby, "h2");
        m.remembers = Some(crate::record::Remembered {
            active: NodeRecord {
                node_id: "n1".into(),
                incarnation: "abc".into(),
                epoch: Some(7),
                ..Default::default()
            },
            rewrite: None,
        });
        let snap = ClusterSnapshot {
            members: vec![("n2".into(), Ok(m))],
            ..Default::default()
        };
        let text = to_text(&config(), &snap);
        assert!(
            text.contains("n2: saw n1 commit epoch 7 (before its link with the store broke"),
            "{text}"
        );
        // Not while the store keeps that epoch's breadcrumb.
        let mut kept = snap.clone();
        kept.breadcrumb = Some((
            Ok(NodeRecord {
                node_id: "n1".into(),
                epoch: Some(7),
                ..Default::default()
            }),
            Version::new(1),
        ));
        assert!(!to_text(&config(), &kept).contains("saw n1"));
        // Still said beside n1's own entry of epoch 7 (written at any change of role,
        // after the store forgot too: the simulation's seed 255290); not after the
        // operator's confirm of it.
        let entry = |to: &str| crate::record::HistoryEntry {
            at: "2026-01-01T00:00:00Z".into(),
            node_id: "n1".into(),
            from: "promoting".into(),
            to: to.into(),
            epoch: Some(7),
            reason: "test".into(),
        };
        let mut own = snap.clone();
        own.history.entries = vec![entry("neutral")];
        assert!(to_text(&config(), &own).contains("n2: saw n1 commit epoch 7"));
        let mut confirmed = snap.clone();
        confirmed.history.entries = vec![entry(crate::record::CONFIRMED_DOWN)];
        assert!(!to_text(&config(), &confirmed).contains("saw n1"));
        let json = to_json(&config(), &snap);
        let r = &json["members"][0]["remembers"];
        assert_eq!(
            (&r["node_id"], &r["epoch"], &r["incarnation"]),
            (&json!("n1"), &json!(7), &json!("abc")),
            "{json:#}"
        );
    }

    #[test]
    fn an_unreadable_control_is_said_and_not_silently_not_paused() {
        let snap = ClusterSnapshot {
            control_unreadable: Some("record is not UTF-8".into()),
            ..Default::default()
        };
        let text = to_text(&config(), &snap);
        assert!(
            text.contains("control:    UNREADABLE (record is not UTF-8)"),
            "{text}"
        );
        let json = to_json(&config(), &snap);
        assert_eq!(
            json["control_unreadable"], "record is not UTF-8",
            "{json:#}"
        );
        assert_eq!(json["paused"], false, "{json:#}");
    }

    #[test]
    fn escape_sequences_and_newlines_from_the_store_are_shown_escaped() {
        let evil = "x\u{1b}[2J\nactive:     fake\r";
        let mut m = member("n1", Role::Standby, evil);
        m.node.since = Some(evil.into());
        m.containment = Some(evil.into());
        m.session_timeout = Some(evil.into());
        m.leftover = Some(NodeRecord {
            service_cgroup: Some(evil.into()),
            ..Default::default()
        });
        let snap = ClusterSnapshot {
            lock: Some((Err(RecordError::NotJson(evil.into())), 1)),
            breadcrumb: Some((
                Ok(NodeRecord {
                    node_id: "n1".into(),
                    ..Default::default()
                }),
                Version::new(1),
            )),
            control: Control {
                paused: true,
                reason: Some(evil.into()),
                failover: Some(FailoverRequest {
                    from: evil.into(),
                    to: Some(evil.into()),
                    by: evil.into(),
                    deadline: evil.into(),
                    force: false,
                }),
            },
            control_unreadable: None,
            members: vec![
                ("n1".into(), Ok(m)),
                (evil.into(), Err(RecordError::NotJson(evil.into()))),
            ],
            history: History {
                entries: vec![HistoryEntry {
                    at: evil.into(),
                    node_id: evil.into(),
                    from: "breadcrumb".into(),
                    to: super::super::fence::CONFIRMED_DOWN.into(),
                    epoch: None,
                    reason: evil.into(),
                }],
                unreadable_entries: 0,
                unreadable: Some(evil.into()),
            },
            set_aside: vec![evil.into()],
            ..Default::default()
        };
        let text = to_text(&config(), &snap);
        assert!(!text.contains('\u{1b}') && !text.contains('\r'), "{text:?}");
        assert!(!text.contains("\nactive:     fake"), "{text}");
        assert!(text.contains("x\\u{1b}[2J\\u{a}active:"), "{text}");
    }
}
