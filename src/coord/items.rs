//! What every backend keeps the same way: named items (`control`, `history` and the
//! copies set aside beside it) holding JSON, each with a version for compare-and-set.
//! The read-modify-write of `control` and the append to `history` are written once, here,
//! on top of a backend's [`Items`].

use super::StoreError;
use crate::record::{self, History, HistoryEntry};
use std::future::Future;

/// `history` keeps this many transitions.
pub const HISTORY_LEN: usize = 100;
/// Old histories are kept beside `history` under names that start with this:
/// `history.unreadable-<time>` (an item that was not an array) and `history.old-<time>`
/// (moved aside by `init --force`).
pub const SET_ASIDE_PREFIX: &str = "history.";
/// A version-checked read-modify-write gives up after this many races.
pub const CAS_ATTEMPTS: usize = 5;

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
    mut change: F,
) -> Result<T, Refusal>
where
    T: Default + serde::Serialize + record::Record,
    F: FnMut(&mut T) -> Result<bool, String>,
{
    for _ in 0..CAS_ATTEMPTS {
        let (mut value, version) = match items.get_item(name).await? {
            Some((data, version)) => (record::parse(&data).unwrap_or_default(), Some(version)),
            None => (T::default(), None),
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

/// Adds `entry` to `history` at its place by time, keeping the newest [`HISTORY_LEN`].
/// An unreadable history is kept aside first; the answer names where.
pub async fn append_history(
    items: &impl Items,
    entry: &HistoryEntry,
) -> Result<Option<String>, StoreError> {
    let name = "history";
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
