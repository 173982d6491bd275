//! `warden history [--json]` (SPEC §7): the cluster's last 100 transitions, newest first,
//! as the daemons and the operator commands recorded them in the `history` znode.

use super::operator::{self, OpError, EXIT_OK};
use crate::config::Config;
use crate::record::HistoryEntry;

/// `warden history`: what happened to the cluster lately.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct HistoryArgs {
    /// Print the entries as one JSON array, newest first.
    #[arg(long)]
    pub json: bool,
}

/// Runs `warden history`; returns the exit code (SPEC §7).
pub async fn history(cfg: &Config, args: &HistoryArgs) -> i32 {
    let entries = async {
        let zk = operator::session(cfg).await?;
        zk.read_history()
            .await
            .map_err(OpError::store("read the history"))
    };
    match entries.await {
        Ok(entries) => {
            if !args.json {
                print!("{}", to_text(&cfg.cluster.name, &entries));
                return EXIT_OK;
            }
            match to_json(&entries) {
                Ok(json) => {
                    println!("{json}");
                    EXIT_OK
                }
                Err(e) => {
                    OpError::Failed(format!("cannot print the history as JSON: {e}")).report()
                }
            }
        }
        Err(e) => e.report(),
    }
}

/// The entries as a JSON array, newest first, each with its fields in the order of SPEC
/// §3: `[{"at", "node_id", "from", "to", "epoch", "reason"}]`.
pub fn to_json(entries: &[HistoryEntry]) -> Result<String, serde_json::Error> {
    serde_json::to_string(entries)
}

/// A table for people: time, node, from → to, epoch, reason; newest first.
pub fn to_text(cluster: &str, entries: &[HistoryEntry]) -> String {
    if entries.is_empty() {
        return format!("cluster {cluster}: no transitions recorded yet\n");
    }
    let transition = |e: &HistoryEntry| format!("{} → {}", e.from, e.to);
    let epoch = |e: &HistoryEntry| e.epoch.map_or_else(|| "-".to_string(), |n| n.to_string());
    let width = |head: &str, f: &dyn Fn(&HistoryEntry) -> String| {
        entries
            .iter()
            .map(|e| f(e).chars().count())
            .chain([head.chars().count()])
            .max()
            .unwrap_or(0)
    };
    let w_at = width("TIME", &|e| e.at.clone());
    let w_node = width("NODE", &|e| e.node_id.clone());
    let w_tr = width("FROM → TO", &transition);
    let w_epoch = width("EPOCH", &epoch);
    let mut out = format!(
        "cluster {cluster}: last {} transitions, newest first\n",
        entries.len()
    );
    let mut row = |at: &str, node: &str, tr: &str, ep: &str, reason: &str| {
        out.push_str(&format!(
            "{at:<w_at$} {node:<w_node$} {tr:<w_tr$} {ep:<w_epoch$} {reason}\n"
        ));
    };
    row("TIME", "NODE", "FROM → TO", "EPOCH", "REASON");
    for e in entries {
        row(&e.at, &e.node_id, &transition(e), &epoch(e), &e.reason);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(node: &str, from: &str, to: &str, epoch: Option<u64>, reason: &str) -> HistoryEntry {
        HistoryEntry {
            at: "2025-01-02T03:04:05.678Z".into(),
            node_id: node.into(),
            from: from.into(),
            to: to.into(),
            epoch,
            reason: reason.into(),
        }
    }

    #[test]
    fn table_lines_up_and_shows_every_field() {
        let entries = vec![
            entry("n2", "promoting", "active", Some(42), "service promoted"),
            entry(
                "op@host",
                "running",
                "paused",
                None,
                "paused by op@host: upgrade",
            ),
        ];
        let text = to_text("rm", &entries);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "cluster rm: last 2 transitions, newest first");
        assert!(lines[1].starts_with("TIME "), "{text}");
        assert!(lines[2].contains("n2") && lines[2].contains("promoting → active"));
        assert!(lines[2].contains(" 42 ") && lines[2].ends_with("service promoted"));
        assert!(lines[3].contains(" - ") && lines[3].contains("running → paused"));
        // Columns count characters: "→" is one character of three bytes.
        let col = |l: &str, word: &str| l[..l.find(word).unwrap()].chars().count();
        assert_eq!(col(lines[1], "REASON"), col(lines[2], "service"), "{text}");
        assert_eq!(
            col(lines[1], "REASON"),
            col(lines[3], "paused by"),
            "{text}"
        );
    }

    #[test]
    fn empty_history_says_so_and_json_is_an_array() {
        assert_eq!(
            to_text("rm", &[]),
            "cluster rm: no transitions recorded yet\n"
        );
        let json = to_json(&[entry("n1", "standby", "fencing", None, "lock won")]).unwrap();
        assert_eq!(
            json,
            r#"[{"at":"2025-01-02T03:04:05.678Z","node_id":"n1","from":"standby","to":"fencing","epoch":null,"reason":"lock won"}]"#
        );
    }
}
