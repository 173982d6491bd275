//! `warden status [--json]` (SPEC §7): read from ZooKeeper alone.

use crate::config::Config;
use crate::coord::{ClusterSnapshot, StoreError};
use serde_json::{json, Value};

/// Reads the cluster.
pub async fn snapshot(cfg: &Config) -> Result<ClusterSnapshot, StoreError> {
    super::session(cfg).await?.snapshot().await
}

/// The JSON object of SPEC §7.
pub fn to_json(cfg: &Config, snap: &ClusterSnapshot) -> Value {
    let active = snap.active().map(|(holder, member)| {
        json!({
            "node_id": holder.node_id,
            "epoch": holder.epoch.or(member.node.epoch),
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
                "session_timeout": m.session_timeout,
                "containment": m.containment,
            }),
            Err(e) => json!({
                "node_id": id, "role": null, "health": null, "host": null, "port": null,
                "pid": null, "since": null, "unreadable": e.to_string(),
            }),
        })
        .collect();
    json!({
        "cluster": cfg.cluster.name,
        "backend": "zookeeper",
        "paused": snap.control.paused,
        "pause_reason": snap.control.reason,
        "active": active,
        "breadcrumb": breadcrumb,
        "failover": snap.control.failover,
        "failover_pending": snap
            .control
            .failover
            .as_ref()
            .is_some_and(|f| f.pending_at(std::time::SystemTime::now())),
        "last_confirmation": super::fence::last_confirmation(snap),
        "members": members,
    })
}

/// The view for people: who is active, then a table of members.
pub fn to_text(cfg: &Config, snap: &ClusterSnapshot) -> String {
    let mut out = String::new();
    out.push_str(&format!("cluster {} (zookeeper)\n", cfg.cluster.name));
    if snap.control.paused {
        out.push_str(&format!(
            "*** PAUSED: nobody is promoted or demoted automatically ({}) — `warden resume` ends it ***\n",
            snap.control.reason.as_deref().unwrap_or("no reason given")
        ));
    }
    match snap.active() {
        Some((holder, member)) => out.push_str(&format!(
            "active:     {} (epoch {}, since {})\n",
            holder.node_id,
            holder
                .epoch
                .map_or_else(|| "?".to_string(), |e| e.to_string()),
            member.node.since.as_deref().unwrap_or("?")
        )),
        None => {
            let why = match &snap.lock {
                Some((Ok(h), _)) => format!("{} holds the lock and is not serving yet", h.node_id),
                Some((Err(_), _)) => "the lock holder's record is unreadable".into(),
                None => "nobody holds the lock".into(),
            };
            out.push_str(&format!("active:     none ({why})\n"));
        }
    }
    match &snap.breadcrumb {
        Some((Ok(b), _)) => out.push_str(&format!(
            "breadcrumb: {} (epoch {}): fenced before anyone else promotes\n",
            b.node_id,
            b.epoch.map_or_else(|| "?".to_string(), |e| e.to_string())
        )),
        Some((Err(e), _)) => out.push_str(&format!(
            "breadcrumb: UNREADABLE ({e}); `warden fence --confirm --unreadable` once the old active is down\n"
        )),
        None => out.push_str("breadcrumb: none (the last active stepped down cleanly)\n"),
    }
    if let Some(e) = super::fence::last_confirmation(snap) {
        out.push_str(&format!(
            "confirmed:  {}\n",
            super::fence::describe_confirmation(e)
        ));
    }
    if let Some(f) = &snap.control.failover {
        let state = if f.pending_at(std::time::SystemTime::now()) {
            format!("lapses {}", f.deadline)
        } else {
            format!("lapsed {}; the next active clears it", f.deadline)
        };
        out.push_str(&format!(
            "switchover: {} -> {} requested by {} ({state})\n",
            f.from,
            f.to.as_deref().unwrap_or("any healthy standby"),
            f.by,
        ));
    }
    out.push_str(&format!(
        "\n{:<16} {:<11} {:<10} {:<12} {:<25} {:<20} {}\n",
        "NODE", "ROLE", "HEALTH", "EPOCH", "SINCE", "HOST", "PID"
    ));
    if snap.members.is_empty() {
        out.push_str("(no warden is running)\n");
    }
    for (id, m) in &snap.members {
        match m {
            Ok(m) => out.push_str(&format!(
                "{:<16} {:<11} {:<10} {:<12} {:<25} {:<20} {}\n",
                id,
                m.role.to_string(),
                m.health.to_string(),
                m.node
                    .epoch
                    .map_or_else(|| "-".to_string(), |e| e.to_string()),
                m.node.since.as_deref().unwrap_or("-"),
                m.node.host,
                m.node.pid
            )),
            Err(e) => out.push_str(&format!("{id:<16} unreadable member record: {e}\n")),
        }
    }
    // What the lease really follows, and how each service is contained (SPEC §4, §6):
    // said once per member when it is worth an operator's attention.
    for (id, m) in &snap.members {
        let Ok(m) = m else { continue };
        if let Some(t) = &m.session_timeout {
            out.push_str(&format!("{id}: session timeout in force {t}\n"));
        }
        if let Some(c) = m
            .containment
            .as_deref()
            .filter(|c| !c.starts_with("cgroup"))
        {
            out.push_str(&format!("{id}: service containment: {c}\n"));
        }
    }
    out
}
