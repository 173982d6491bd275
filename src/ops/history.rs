//! `warden history [--json]` (SPEC §7): the cluster's last 100 transitions, newest first,
//! as the daemons and the operator commands recorded them in the `history` znode.
//!
//! The znode is read entry by entry: an unreadable entry is skipped and counted, never a
//! reason to show nothing; a znode unreadable as a whole is said so, with where the
//! earlier histories were kept. Every string from the store is shown through
//! [`printable`].

use super::operator::{self, OpError};
use crate::config::Config;
use crate::coord::{Connector, Session};
use crate::record::{printable, History, HistoryEntry};
use serde::Serialize;

/// `warden history`: what happened to the cluster lately.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct HistoryArgs {
    /// Print one JSON object: the entries (newest first), how many were unreadable, and
    /// the earlier histories kept beside it.
    #[arg(long)]
    pub json: bool,
}

/// Runs `warden history`.
pub async fn history<C: Connector>(
    cfg: &Config,
    connector: &C,
    args: &HistoryArgs,
) -> Result<(), OpError> {
    let read = async {
        let zk = operator::session(connector).await?;
        let history = zk
            .read_history()
            .await
            .map_err(OpError::store("read the history"))?;
        let set_aside = zk
            .set_aside()
            .await
            .map_err(OpError::store("list the earlier histories"))?;
        Ok::<_, OpError>((history, set_aside))
    };
    let (history, set_aside) = read.await?;
    if args.json {
        crate::outln!("{}", to_json(&history, &set_aside));
    } else {
        crate::out!("{}", to_text(&cfg.cluster.name, &history, &set_aside));
    }
    Ok(())
}

/// `{"entries": [{"at", "node_id", "from", "to", "epoch", "reason"}], "unreadable_entries":
/// N, "unreadable": null | why, "set_aside": [paths]}`, entries newest first with their
/// fields in the order of SPEC §3.
pub fn to_json(history: &History, set_aside: &[String]) -> String {
    #[derive(Serialize)]
    struct Json<'a> {
        entries: &'a [HistoryEntry],
        unreadable_entries: usize,
        unreadable: Option<&'a str>,
        set_aside: &'a [String],
    }
    // JSON is UTF-8 by definition: the lossy conversion never loses anything.
    String::from_utf8_lossy(&crate::record::to_bytes(&Json {
        entries: &history.entries,
        unreadable_entries: history.unreadable_entries,
        unreadable: history.unreadable.as_deref(),
        set_aside,
    }))
    .into_owned()
}

/// A table for people: time, node, from → to, epoch, reason; newest first; then what
/// could not be read and where earlier histories are.
pub fn to_text(cluster: &str, history: &History, set_aside: &[String]) -> String {
    let cluster = printable(cluster);
    let mut out = String::new();
    if let Some(why) = &history.unreadable {
        out.push_str(&format!(
            "cluster {cluster}: the history znode is UNREADABLE ({}); it stays as it is until \
             the next transition, which first keeps a copy of it beside it \
             (history.unreadable-<time>)\n",
            printable(why)
        ));
    }
    let entries = &history.entries;
    if entries.is_empty() && history.unreadable.is_none() && history.unreadable_entries == 0 {
        out.push_str(&format!("cluster {cluster}: no transitions recorded yet\n"));
    } else if !entries.is_empty() {
        out.push_str(&table(&cluster, entries));
    }
    match history.unreadable_entries {
        0 => {}
        1 => out.push_str("1 unreadable entry skipped (`zkCli.sh get` shows it as it is)\n"),
        n => out.push_str(&format!(
            "{n} unreadable entries skipped (`zkCli.sh get` shows them as they are)\n"
        )),
    }
    if !set_aside.is_empty() {
        let paths: Vec<String> = set_aside
            .iter()
            .map(|p| printable(p).into_owned())
            .collect();
        out.push_str(&format!(
            "earlier histories kept beside it: {}\n",
            paths.join(", ")
        ));
    }
    out
}

fn table(cluster: &str, entries: &[HistoryEntry]) -> String {
    let rows: Vec<[String; 5]> = entries
        .iter()
        .map(|e| {
            [
                printable(&e.at).into_owned(),
                printable(&e.node_id).into_owned(),
                format!("{} → {}", printable(&e.from), printable(&e.to)),
                e.epoch.map_or_else(|| "-".to_string(), |n| n.to_string()),
                printable(&e.reason).into_owned(),
            ]
        })
        .collect();
    let head = ["TIME", "NODE", "FROM → TO", "EPOCH", "REASON"];
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([head[i].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let (w_at, w_node, w_tr, w_epoch) = (width(0), width(1), width(2), width(3));
    let mut out = format!(
        "cluster {cluster}: last {} transitions, newest first\n",
        entries.len()
    );
    let mut row = |at: &str, node: &str, tr: &str, ep: &str, reason: &str| {
        out.push_str(&format!(
            "{at:<w_at$} {node:<w_node$} {tr:<w_tr$} {ep:<w_epoch$} {reason}\n"
        ));
    };
    row(head[0], head[1], head[2], head[3], head[4]);
    for r in &rows {
        row(&r[0], &r[1], &r[2], &r[3], &r[4]);
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

    fn history(entries: Vec<HistoryEntry>) -> History {
        History {
            entries,
            ..History::default()
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
        let text = to_text("rm", &history(entries), &[]);
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
    fn empty_history_says_so_and_json_is_an_object_with_the_entries() {
        assert_eq!(
            to_text("rm", &History::default(), &[]),
            "cluster rm: no transitions recorded yet\n"
        );
        let json = to_json(
            &history(vec![entry("n1", "standby", "fencing", None, "lock won")]),
            &[],
        );
        assert_eq!(
            json,
            r#"{"entries":[{"at":"2025-01-02T03:04:05.678Z","node_id":"n1","from":"standby","to":"fencing","epoch":null,"reason":"lock won"}],"unreadable_entries":0,"unreadable":null,"set_aside":[]}"#
        );
    }

    #[test]
    fn unreadable_entries_are_counted_and_an_unreadable_znode_is_named() {
        let mut h = history(vec![entry("n1", "standby", "fencing", None, "lock won")]);
        h.unreadable_entries = 2;
        let text = to_text("rm", &h, &["/warden/rm/history.old-x".into()]);
        assert!(text.contains("last 1 transitions"), "{text}");
        assert!(text.contains("2 unreadable entries skipped"), "{text}");
        assert!(text.contains("/warden/rm/history.old-x"), "{text}");
        assert!(!text.contains("no transitions recorded yet"), "{text}");
        let gone = History {
            unreadable: Some("record is not UTF-8".into()),
            ..History::default()
        };
        let text = to_text("rm", &gone, &[]);
        assert!(text.contains("UNREADABLE (record is not UTF-8)"), "{text}");
        assert!(!text.contains("no transitions recorded yet"), "{text}");
    }

    #[test]
    fn escape_sequences_from_the_store_are_shown_escaped() {
        let h = history(vec![entry(
            "n1\u{1b}[2J",
            "a\nb",
            "active",
            Some(1),
            "why\r\u{1b}]0;title\u{7}",
        )]);
        let text = to_text("rm", &h, &[]);
        assert!(!text.contains('\u{1b}') && !text.contains('\r') && !text.contains('\u{7}'));
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(
            text.contains("n1\\u{1b}[2J") && text.contains("a\\u{a}b"),
            "{text}"
        );
    }
}
