//! The values warden reads from a MySQL or Redis store, on arbitrary bytes (issue 31,
//! class 5): whatever is in a key or a row is anybody's (SPEC §9), so every reader answers
//! with a value or an error naming where the garbage is, never a panic (the MySQL
//! driver's own row conversion panicked on a column whose type was changed).
//!
//! The input is split at NUL bytes into parts: the fields of a Redis hash, the cells of a
//! MySQL row (each cell's first byte picks its type: NULL, signed, unsigned or bytes).
//!
//! Beyond "no panic":
//! - a Redis number (an epoch, a version) is decimal digits below 2^53 or nothing;
//! - an item reads as absent only when it has neither data nor version, and its version
//!   is -1 (garbage, which the next write replaces) or a number below 2^53;
//! - a MySQL row that does not convert is an error naming its table.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mysql_common::constants::ColumnType;
use mysql_common::packets::Column;
use mysql_common::row::new_row;
use mysql_common::value::Value;
use std::collections::HashMap;
use std::sync::Arc;
use warden::coord::mysql::{kept_seen, typed};
use warden::coord::redis::{item_of, kept_number, lock_of};
use warden::coord::MAX_KEPT_EPOCH;

fuzz_target!(|data: &[u8]| {
    // Redis.
    if let Some(n) = kept_number(data) {
        assert!(n < MAX_KEPT_EPOCH);
        assert!(data.iter().all(u8::is_ascii_digit), "{data:?} read as {n}");
    }
    let parts: Vec<&[u8]> = data.split(|b| *b == 0).collect();
    let part = |i: usize| parts.get(i).map(|p| p.to_vec());
    assert_eq!(item_of(None, None), None);
    for (d, v) in [
        (part(0), part(1)),
        (None, part(1)),
        (part(0), None),
    ] {
        let found = item_of(d.clone(), v.clone());
        if d.is_none() && v.is_none() {
            assert_eq!(found, None);
            continue;
        }
        let (_, version) = found.expect("an item with data or a version exists");
        let kept = v.as_deref().and_then(kept_number);
        match kept {
            Some(k) => assert_eq!(Ok(version), i64::try_from(k)),
            None => assert_eq!(version, -1),
        }
    }
    let fields: HashMap<Vec<u8>, Vec<u8>> = parts
        .chunks(2)
        .filter_map(|pair| Some((pair.first()?.to_vec(), pair.get(1)?.to_vec())))
        .collect();
    if let Some((_, _, epoch)) = lock_of(&fields) {
        assert!(epoch < MAX_KEPT_EPOCH);
    }

    // MySQL.
    if let Some(e) = kept_seen(data) {
        assert!(e < MAX_KEPT_EPOCH);
    }
    let names = ["session", "record", "epoch", "expired", "version", "ahead", "timeout"];
    let cells: Vec<Value> = parts.iter().take(names.len()).map(|p| cell(p)).collect();
    let columns: Arc<[Column]> = names
        .iter()
        .take(cells.len())
        .map(|n| Column::new(ColumnType::MYSQL_TYPE_VAR_STRING).with_name(n.as_bytes()))
        .collect();
    let sql = "SELECT session FROM `fuzz_lock` WHERE cluster = ?";
    let row = || new_row(cells.clone(), columns.clone());
    check(typed::<(i64, Vec<u8>, u64, bool, i64, i64, i64)>(row(), sql));
    check(typed::<(i64, Vec<u8>, u64, bool)>(row(), sql));
    check(typed::<(Vec<u8>, i64)>(row(), sql));
    check(typed::<(String, i64, Vec<u8>)>(row(), sql));
    check(typed::<u64>(row(), sql));
});

/// A MySQL cell from a part of the input: its first byte picks the type.
fn cell(part: &[u8]) -> Value {
    let (tag, rest) = part.split_first().unwrap_or((&0, &[]));
    let mut eight = [0u8; 8];
    for (d, s) in eight.iter_mut().zip(rest) {
        *d = *s;
    }
    match tag % 4 {
        0 => Value::NULL,
        1 => Value::Int(i64::from_le_bytes(eight)),
        2 => Value::UInt(u64::from_le_bytes(eight)),
        _ => Value::Bytes(rest.to_vec()),
    }
}

/// A conversion that failed names the table.
fn check<T>(converted: Result<T, warden::coord::mysql::TypedError>) {
    if let Err(e) = converted {
        let said = e.to_string();
        assert!(said.contains("`fuzz_lock`"), "{said}");
    }
}

