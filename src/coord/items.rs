//! What every backend keeps the same way: named items (`control`, `history` and the
//! copies set aside beside it) holding JSON, each with a version for compare-and-set.
//! The read-modify-write of `control` and the append to `history` are written once, here,
//! on top of a backend's [`Items`].

use super::StoreError;
use crate::record::{
    self, BreadcrumbView, Control, History, HistoryEntry, NodeRecord, TakeoverState, Version,
    WriteOutcome,
};
use std::future::Future;

/// The items' names.
pub const BREADCRUMB: &str = "breadcrumb";
pub const CONTROL: &str = "control";
pub const HISTORY: &str = "history";

/// `history` keeps this many transitions.
pub const HISTORY_LEN: usize = 100;
/// Old histories are kept beside `history` under names that start with this:
/// `history.unreadable-<time>` (an item that was not an array) and `history.old-<time>`
/// (moved aside by `init --force`).
pub const SET_ASIDE_PREFIX: &str = "history.";
/// A version-checked read-modify-write gives up after this many races.
pub const CAS_ATTEMPTS: usize = 5;

/// The [`super::Session`] methods of a store whose breadcrumb and history are items
/// (MySQL, Redis), for its `impl Session`: the same delegations in each.
macro_rules! session_methods_on_items {
    () => {
        // The breadcrumb is an item like control and history.
        async fn breadcrumb_bytes(
            &self,
        ) -> Result<Option<(Vec<u8>, $crate::record::Version)>, StoreError> {
            Ok(self
                .get_item($crate::coord::items::BREADCRUMB)
                .await?
                .map(|(data, v)| (data, $crate::record::Version::new(v))))
        }

        async fn read_history(&self) -> Result<$crate::record::History, StoreError> {
            $crate::coord::items::read_history(self).await
        }

        async fn append_history(
            &self,
            entry: &$crate::record::HistoryEntry,
        ) -> Result<Option<String>, StoreError> {
            $crate::coord::items::append_history(self, entry).await
        }
    };
}
pub(crate) use session_methods_on_items;

/// The [`super::Session`] methods that change `control`, for every backend's
/// `impl Session`: the read-modify-write of [`update_control_from`] on its items.
macro_rules! control_methods_on_items {
    () => {
        async fn update_control<F>(
            &self,
            change: F,
        ) -> Result<Result<$crate::record::Control, String>, StoreError>
        where
            F: FnMut(&mut $crate::record::Control) -> Result<bool, String> + Send,
        {
            $crate::coord::items::update_control_from(self, None, change).await
        }

        async fn update_control_from<F>(
            &self,
            seen: ($crate::record::Control, Option<$crate::record::Version>),
            change: F,
        ) -> Result<Result<$crate::record::Control, String>, StoreError>
        where
            F: FnMut(&mut $crate::record::Control) -> Result<bool, String> + Send,
        {
            $crate::coord::items::update_control_from(self, Some(seen), change).await
        }
    };
}
pub(crate) use control_methods_on_items;

/// A backend's named, versioned items.
pub trait Items: Sync {
    /// The item's data and version, `None` when absent.
    fn get_item(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<(Vec<u8>, i64)>, StoreError>> + Send;

    /// Writes the item at `version`, or creates it when `None`; `Rejected` when it changed
    /// since (or exists already).
    fn put_item(
        &self,
        name: &str,
        data: &[u8],
        version: Option<i64>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The item's name in the store's words, for messages (`/warden/rm/history`).
    fn item_path(&self, name: &str) -> String;
}

/// Why a read-modify-write did not write.
#[derive(Debug)]
pub enum Refusal {
    /// `change` refused, with this reason.
    Refused(String),
    Store(StoreError),
}

impl From<StoreError> for Refusal {
    fn from(e: StoreError) -> Self {
        Refusal::Store(e)
    }
}

/// History as stored (an unreadable item reads as empty, with the reason).
pub fn history_of(data: &[u8]) -> History {
    record::parse_history(data).unwrap_or_else(|e| History {
        unreadable: Some(e.to_string()),
        ..History::default()
    })
}

/// The greatest epoch of a completed promotion in `history`. Only completed ones count:
/// the entry of our own step into `promoting` carries the epoch we are about to use and
/// may already be written.
pub fn newest_promotion(history: &History) -> Option<record::Epoch> {
    history
        .entries
        .iter()
        .filter(|h| h.to == record::Role::Active.as_str())
        .filter_map(|h| h.epoch)
        .max()
}

/// The greatest epoch each node's entries of `history` name.
pub fn history_by_node(history: &History) -> std::collections::BTreeMap<String, record::Epoch> {
    greatest_by_node(history, |_| true)
}

/// The greatest epoch of each node's `warden fence --confirm` entries in `history`: the
/// operator's word that the node's service of that epoch is down. Unlike the node's own
/// entries of an epoch, written whenever its warden changes role (after a store that
/// forgot its breadcrumb too: the simulation's seed 255290), this is a trace of its end.
pub fn confirmed_by_node(history: &History) -> std::collections::BTreeMap<String, record::Epoch> {
    greatest_by_node(history, |h| h.to == record::CONFIRMED_DOWN)
}

fn greatest_by_node(
    history: &History,
    keep: impl Fn(&record::HistoryEntry) -> bool,
) -> std::collections::BTreeMap<String, record::Epoch> {
    let mut by = std::collections::BTreeMap::new();
    for h in history.entries.iter().filter(|h| keep(h)) {
        if let Some(e) = h.epoch {
            let cur: &mut record::Epoch = by.entry(h.node_id.clone()).or_default();
            *cur = (*cur).max(e);
        }
    }
    by
}

/// `history.<kind>-<UTC time>`, the time without colons so that the name is easy to type.
pub fn set_aside_name(kind: &str) -> String {
    let stamp = record::rfc3339(std::time::SystemTime::now()).replace(':', "");
    format!("{SET_ASIDE_PREFIX}{kind}-{stamp}")
}

/// Reads a JSON item (absent or unreadable = the default), lets `change` edit it, and
/// writes it back at the version read (or creates it), retrying when another writer got
/// there first. `change` returns `Ok(false)` to leave it, `Err` to refuse.
pub async fn read_modify_write<T, F>(
    items: &impl Items,
    name: &str,
    change: F,
) -> Result<T, Refusal>
where
    T: Default + serde::Serialize + record::Record,
    F: FnMut(&mut T) -> Result<bool, String>,
{
    read_modify_write_from(items, name, None, change).await
}

/// [`read_modify_write`] whose first try starts from `seen`: the item as this session
/// read it, and its version (`None`: absent). That write goes out without a read first;
/// an item changed since is read again.
pub async fn read_modify_write_from<T, F>(
    items: &impl Items,
    name: &str,
    mut seen: Option<(T, Option<i64>)>,
    mut change: F,
) -> Result<T, Refusal>
where
    T: Default + serde::Serialize + record::Record,
    F: FnMut(&mut T) -> Result<bool, String>,
{
    for _ in 0..CAS_ATTEMPTS {
        let (mut value, version) = match seen.take() {
            Some(seen) => seen,
            None => match items.get_item(name).await? {
                Some((data, version)) => (record::parse(&data).unwrap_or_default(), Some(version)),
                None => (T::default(), None),
            },
        };
        if !change(&mut value).map_err(Refusal::Refused)? {
            return Ok(value);
        }
        match items
            .put_item(name, &record::to_bytes(&value), version)
            .await
        {
            Ok(()) => return Ok(value),
            Err(StoreError::Rejected(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(StoreError::Unknown(format!(
        "{} kept changing; not written",
        items.item_path(name)
    ))
    .into())
}

/// Creates `history.<kind>-<time>` holding `data`; another name if that one is taken.
/// Returns its name in the store's words.
pub async fn keep_copy(items: &impl Items, kind: &str, data: &[u8]) -> Result<String, StoreError> {
    let stem = set_aside_name(kind);
    for n in 1..=CAS_ATTEMPTS {
        let copy = if n == 1 {
            stem.clone()
        } else {
            format!("{stem}.{n}")
        };
        match items.put_item(&copy, data, None).await {
            Ok(()) => return Ok(items.item_path(&copy)),
            Err(StoreError::Rejected(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Rejected(format!(
        "{} and the next names are taken; history was not rewritten",
        items.item_path(&stem)
    )))
}

/// Adds `entry` first in `history` ([`record::insert_history`]: never dropped, the whole
/// kept under its count and byte bounds, so that an oversize history left by an older
/// warden is trimmed by the next append instead of failing every one). An unreadable
/// history is kept aside first; the answer names where.
pub async fn append_history(
    items: &impl Items,
    entry: &HistoryEntry,
) -> Result<Option<String>, StoreError> {
    let name = HISTORY;
    let mut kept = None;
    for _ in 0..CAS_ATTEMPTS {
        let (mut values, version) = match items.get_item(name).await? {
            None => (Vec::new(), None),
            Some((data, version)) => match record::parse_history_values(&data) {
                Ok(values) => (values, Some(version)),
                Err(why) => {
                    let copy = keep_copy(items, "unreadable", &data).await?;
                    tracing::warn!(
                        history = %items.item_path(name),
                        copy = %copy,
                        "history is unreadable ({why}); its old contents are kept in {copy} \
                         and a new history starts"
                    );
                    let note = HistoryEntry {
                        at: entry.at.clone(),
                        node_id: entry.node_id.clone(),
                        from: "history".into(),
                        to: "set aside".into(),
                        epoch: None,
                        reason: format!(
                            "history was unreadable ({why}); its old contents are in {copy}"
                        ),
                    };
                    kept = Some(copy);
                    let mut values = Vec::new();
                    record::insert_history(&mut values, &note, HISTORY_LEN);
                    (values, Some(version))
                }
            },
        };
        record::insert_history(&mut values, entry, HISTORY_LEN);
        match items
            .put_item(name, &record::history_bytes(&values), version)
            .await
        {
            Ok(()) => return Ok(kept),
            Err(StoreError::Rejected(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Unknown(format!(
        "{} kept changing; not written",
        items.item_path(name)
    )))
}

/// The breadcrumb as a takeover sees it, from the item as read.
pub fn breadcrumb_view(found: Option<(Vec<u8>, i64)>) -> BreadcrumbView {
    match found {
        None => BreadcrumbView::Absent,
        Some((data, v)) => match record::parse::<NodeRecord>(&data) {
            Ok(record) => BreadcrumbView::Record {
                record,
                version: Version::new(v),
            },
            Err(e) => BreadcrumbView::Unreadable {
                reason: e.to_string(),
                version: Version::new(v),
            },
        },
    }
}

/// `control` and its version for a takeover; a missing one is created (empty) so that the
/// promotion can check its version.
pub async fn takeover_control(items: &impl Items) -> Result<(Control, i64), StoreError> {
    loop {
        match items.get_item(CONTROL).await? {
            Some((data, v)) => return Ok((record::parse(&data).unwrap_or_default(), v)),
            None => match items
                .put_item(CONTROL, &record::to_bytes(&Control::default()), None)
                .await
            {
                Ok(()) | Err(StoreError::Rejected(_)) => {}
                Err(e) => return Err(e),
            },
        }
    }
}

/// The takeover state a store's `read_state` returns, from what it read: the breadcrumb,
/// `control` at `control_version`, `history`, and the greatest epoch the members have seen.
/// A failed read of `history` is returned before one of `members_epoch_seen`.
pub fn takeover_state(
    breadcrumb: BreadcrumbView,
    control: Control,
    control_version: i64,
    history: Result<History, StoreError>,
    members_epoch_seen: Result<Option<record::Epoch>, StoreError>,
) -> Result<TakeoverState, StoreError> {
    Ok(TakeoverState {
        breadcrumb,
        control,
        control_version: Version::new(control_version),
        history_by_node: history.as_ref().map(history_by_node).unwrap_or_default(),
        confirmed_by_node: history.as_ref().map(confirmed_by_node).unwrap_or_default(),
        newest_promotion: newest_promotion(&history?),
        members_epoch_seen: members_epoch_seen?,
    })
}

/// `control` as `status` shows it: the value (the default when unreadable), its version,
/// and why it could not be read.
pub fn snapshot_control(
    found: Option<(Vec<u8>, i64)>,
) -> (Control, Option<Version>, Option<String>) {
    match found {
        Some((d, v)) => match record::parse(&d) {
            Ok(c) => (c, Some(Version::new(v)), None),
            Err(e) => (
                Control::default(),
                Some(Version::new(v)),
                Some(e.to_string()),
            ),
        },
        None => (Control::default(), None, None),
    }
}

/// The breadcrumb as `status` shows it.
pub fn snapshot_breadcrumb(
    found: Option<(Vec<u8>, i64)>,
) -> Option<(Result<NodeRecord, record::RecordError>, Version)> {
    found.map(|(d, v)| (record::parse::<NodeRecord>(&d), Version::new(v)))
}

/// `history`, newest first; unreadable entries counted and skipped.
pub async fn read_history(items: &impl Items) -> Result<History, StoreError> {
    Ok(match items.get_item(HISTORY).await? {
        Some((data, _)) => history_of(&data),
        None => History::default(),
    })
}

/// [`super::Session::update_control_from`] (and, from nothing seen, `update_control`) on
/// top of [`read_modify_write_from`].
pub async fn update_control_from<F>(
    items: &impl Items,
    seen: Option<(Control, Option<Version>)>,
    change: F,
) -> Result<Result<Control, String>, StoreError>
where
    F: FnMut(&mut Control) -> Result<bool, String>,
{
    let seen = seen.map(|(c, v)| (c, v.map(Version::get)));
    match read_modify_write_from(items, CONTROL, seen, change).await {
        Ok(control) => Ok(Ok(control)),
        Err(Refusal::Refused(reason)) => Ok(Err(reason)),
        Err(Refusal::Store(e)) => Err(e),
    }
}

/// A store whose cluster has no epoch counter (never initialized, or wiped).
pub fn no_epoch_counter(cluster: &str) -> StoreError {
    StoreError::Rejected(format!(
        "cluster {cluster} has no epoch counter: run `warden init`"
    ))
}

/// The version of our own breadcrumb for `record`'s incarnation and epoch, before
/// rewriting it; else how the rewrite ends without being tried.
pub async fn own_breadcrumb_version(
    items: &impl Items,
    record: &NodeRecord,
) -> Result<i64, WriteOutcome> {
    // A missing breadcrumb is not ours: the store forgot it (a Redis crash within
    // `appendfsync everysec`, a failover to a lagging replica) or an operator deleted it.
    // Read as "no answer", the holder retried for ever under a lock it kept renewing, and
    // nobody else could take it (the simulation's seed 53770).
    let (data, v) = match items.get_item(BREADCRUMB).await {
        Ok(Some(found)) => found,
        Ok(None) => return Err(WriteOutcome::Conflict),
        Err(_) => return Err(WriteOutcome::Unknown),
    };
    match record::parse::<NodeRecord>(&data) {
        Ok(cur) if cur.same_incarnation(record) && cur.epoch == record.epoch => Ok(v),
        _ => Err(WriteOutcome::Conflict),
    }
}

/// The refusal of a breadcrumb write or delete whose checks failed.
pub fn breadcrumb_changed(items: &impl Items, check_lock: bool) -> StoreError {
    StoreError::Rejected(format!(
        "{} changed since it was read{}",
        items.item_path(BREADCRUMB),
        if check_lock {
            ", or the lock is no longer ours"
        } else {
            ""
        }
    ))
}

/// `history` as read, with its version and newest promotion, when that promotion's epoch
/// is above `epoch` (`init --force` moves such a history aside).
pub async fn history_above(
    items: &impl Items,
    epoch: record::Epoch,
) -> Result<Option<(Vec<u8>, i64, record::Epoch)>, StoreError> {
    let Some((data, v)) = items.get_item(HISTORY).await? else {
        return Ok(None);
    };
    Ok(newest_promotion(&history_of(&data))
        .filter(|&n| n > epoch)
        .map(|n| (data, v, n)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::FailoverRequest;
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// Items in memory; counts the reads.
    #[derive(Default)]
    struct Memory {
        items: Mutex<HashMap<String, (Vec<u8>, i64)>>,
        reads: Mutex<usize>,
    }

    impl Items for Memory {
        async fn get_item(&self, name: &str) -> Result<Option<(Vec<u8>, i64)>, StoreError> {
            *self.reads.lock().unwrap() += 1;
            Ok(self.items.lock().unwrap().get(name).cloned())
        }

        async fn put_item(
            &self,
            name: &str,
            data: &[u8],
            version: Option<i64>,
        ) -> Result<(), StoreError> {
            let mut items = self.items.lock().unwrap();
            let next = match (items.get(name), version) {
                (None, None) => 0,
                (Some((_, v)), Some(want)) if *v == want => v + 1,
                _ => return Err(StoreError::Rejected("changed".into())),
            };
            items.insert(name.to_string(), (data.to_vec(), next));
            Ok(())
        }

        fn item_path(&self, name: &str) -> String {
            name.to_string()
        }
    }

    fn request(from: &str) -> FailoverRequest {
        FailoverRequest {
            from: from.into(),
            to: None,
            by: "test".into(),
            deadline: "2026-11-26T00:00:00Z".into(),
            force: false,
        }
    }

    /// The request of `failover`: refused when one is pending.
    fn ask(from: &str) -> impl FnMut(&mut Control) -> Result<bool, String> + '_ {
        move |c| {
            if c.failover.is_some() {
                return Err("a request is pending".into());
            }
            c.failover = Some(request(from));
            Ok(true)
        }
    }

    #[tokio::test]
    async fn a_write_from_what_was_seen_reads_nothing_while_the_item_is_unchanged() {
        let m = Memory::default();
        // Absent when seen: created without a read.
        let out = update_control_from(&m, Some((Control::default(), None)), ask("n1")).await;
        assert_eq!(out.unwrap().unwrap().failover, Some(request("n1")));
        assert_eq!(*m.reads.lock().unwrap(), 0);
        // Seen at its version: written without a read.
        let (data, v) = m.get_item(CONTROL).await.unwrap().unwrap();
        let mut seen: Control = record::parse(&data).unwrap();
        seen.failover = None;
        m.put_item(CONTROL, &record::to_bytes(&seen), Some(v))
            .await
            .unwrap();
        let reads = *m.reads.lock().unwrap();
        let out = update_control_from(&m, Some((seen, Some(Version::new(v + 1)))), ask("n2")).await;
        assert_eq!(out.unwrap().unwrap().failover, Some(request("n2")));
        assert_eq!(*m.reads.lock().unwrap(), reads);
    }

    #[tokio::test]
    async fn a_write_from_what_was_seen_judges_again_an_item_changed_since() {
        let m = Memory::default();
        // Seen absent, but another request landed since: read again, and refused.
        m.put_item(
            CONTROL,
            &record::to_bytes(&Control {
                failover: Some(request("n9")),
                ..Control::default()
            }),
            None,
        )
        .await
        .unwrap();
        let out = update_control_from(&m, Some((Control::default(), None)), ask("n1")).await;
        assert_eq!(out.unwrap(), Err("a request is pending".to_string()));
        assert_eq!(*m.reads.lock().unwrap(), 1);
        // Seen at an older version: read again, and written at the current one.
        let (data, v) = m.get_item(CONTROL).await.unwrap().unwrap();
        let mut now: Control = record::parse(&data).unwrap();
        now.failover = None;
        m.put_item(CONTROL, &record::to_bytes(&now), Some(v))
            .await
            .unwrap();
        let stale = (Control::default(), Some(Version::new(v)));
        let out = update_control_from(&m, Some(stale), ask("n1")).await;
        assert_eq!(out.unwrap().unwrap().failover, Some(request("n1")));
        let (_, last) = m.get_item(CONTROL).await.unwrap().unwrap();
        assert_eq!(last, v + 2);
    }
}
