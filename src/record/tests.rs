//! The records' tests: bad input drops a field, not a record; history's order and bound;
//! a request's deadline; which boot of a machine a record names.

use super::*;

#[test]
fn unknown_fields_are_ignored() {
    let r: NodeRecord = parse(br#"{"node_id":"rm1","host":"h","future":{"x":1},"pid":7}"#).unwrap();
    assert_eq!(r.node_id, "rm1");
    assert_eq!(r.pid, 7);
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    assert!(matches!(
        parse::<NodeRecord>(b"\xff\xfe"),
        Err(RecordError::NotUtf8)
    ));
    assert!(matches!(
        parse::<NodeRecord>(b"not json"),
        Err(RecordError::NotJson(_))
    ));
    let big = vec![b' '; MAX_RECORD_BYTES + 1];
    assert!(matches!(
        parse::<NodeRecord>(&big),
        Err(RecordError::TooLarge(_))
    ));
}

/// A member record with `set` applied written, then read with its value `good`
/// replaced by each bad one: the record is kept, only that field dropped (`get`).
fn bad_values_drop_only_the_field(
    set: impl Fn(&mut MemberRecord),
    good: &str,
    get: impl Fn(&MemberRecord) -> bool,
    bad: &[&str],
) {
    let mut m = MemberRecord::bare(
        NodeRecord {
            node_id: "n1".into(),
            ..Default::default()
        },
        Role::Standby,
        Health::Healthy,
    );
    set(&mut m);
    let good_bytes = to_bytes(&m);
    assert_eq!(parse::<MemberRecord>(&good_bytes).unwrap(), m);
    let text = String::from_utf8(good_bytes).unwrap();
    for bad in bad {
        let bytes = text.replace(good, bad);
        assert_ne!(bytes, text, "{bad}");
        let read = parse::<MemberRecord>(bytes.as_bytes()).unwrap();
        assert!(!get(&read), "{bad}");
        assert_eq!(read.node.node_id, "n1");
    }
}

/// The review of stop 45: a member record whose `after` is not a node id keeps the
/// rest (its leftover above all); only `after` is dropped.
#[test]
fn a_bad_after_is_dropped_not_the_member_record() {
    bad_values_drop_only_the_field(
        |m| m.after = Some("n2".into()),
        "\"n2\"",
        |m| m.after.is_some(),
        &["\"n2\\u001b[31m\"", "5", "{}", "\"\""],
    );
}

/// SPEC §6b: a `tries_in` that is not a duration is dropped, the record kept.
#[test]
fn a_bad_tries_in_is_dropped_not_the_member_record() {
    bad_values_drop_only_the_field(
        |m| m.tries_in = Some("2s 300ms".into()),
        "\"2s 300ms\"",
        |m| m.tries_in.is_some(),
        &["\"soon\"", "5", "{}", "\"\""],
    );
}

#[test]
fn member_record_flattens_the_node_record() {
    let m = MemberRecord::bare(
        NodeRecord {
            node_id: "rm1".into(),
            ..Default::default()
        },
        Role::Standby,
        Health::Healthy,
    );
    let v: serde_json::Value = serde_json::from_slice(&to_bytes(&m)).unwrap();
    assert_eq!(v["node_id"], "rm1");
    assert_eq!(v["role"], "standby");
    assert_eq!(parse::<MemberRecord>(&to_bytes(&m)).unwrap(), m);
}

#[test]
fn a_node_id_no_node_can_have_makes_the_record_unreadable() {
    for bad in [
        "rm\u{0}1".to_string(),
        "rm1\nrm2".to_string(),
        String::new(),
        "x".repeat(65),
        "rm 1".to_string(),
        "\u{1b}[2J".to_string(),
    ] {
        let json = serde_json::json!({"node_id": bad, "incarnation": "i"}).to_string();
        let err = parse::<NodeRecord>(json.as_bytes()).unwrap_err();
        assert!(matches!(err, RecordError::BadNodeId(_)), "{bad:?}: {err}");
        let shown = err.to_string();
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        let member = serde_json::json!({"node_id": bad, "role": "active", "health": "healthy"});
        assert!(
            matches!(
                parse::<MemberRecord>(member.to_string().as_bytes()),
                Err(RecordError::BadNodeId(_))
            ),
            "{bad:?}"
        );
    }
    let long = parse::<NodeRecord>(
        serde_json::json!({"node_id": "y".repeat(10_000)})
            .to_string()
            .as_bytes(),
    )
    .unwrap_err()
    .to_string();
    assert!(long.len() < 300, "{long}");
    assert!(parse::<NodeRecord>(br#"{"node_id":"a.b_c-D9"}"#).is_ok());
}

#[test]
fn printable_escapes_control_characters_and_keeps_the_rest() {
    assert!(matches!(printable("rm1 → rm2 é"), Cow::Borrowed(_)));
    assert_eq!(
        printable("a\u{1b}[2Jb\nc\r\u{7f}\u{9b}"),
        "a\\u{1b}[2Jb\\u{a}c\\u{d}\\u{7f}\\u{9b}"
    );
    assert_eq!(printable("x\u{202e}y"), "x\\u{202e}y");
    let e = parse::<NodeRecord>(br#"{"node_id":"n","pid":"\u001b[2J"}"#).unwrap_err();
    assert!(!e.to_string().contains('\u{1b}'), "{e}");
}

#[test]
fn history_is_read_entry_by_entry() {
    let good = |at: &str| serde_json::json!({"at": at, "node_id": "n1", "from": "a", "to": "b", "reason": "r"});
    let text = serde_json::json!([good("t3"), 17, {"at": "t2"}, good("t1"), "junk"]).to_string();
    let h = parse_history(text.as_bytes()).unwrap();
    assert_eq!(h.entries.len(), 2);
    assert_eq!(h.unreadable_entries, 3);
    assert_eq!(h.entries[1].at, "t1");
    assert!(parse_history(b"{}").is_err());
    assert!(parse_history(b"[1,").is_err());
    assert!(parse_history(b"\xff[]").is_err());
    assert_eq!(parse_history(b"[]").unwrap(), History::default());
}

fn entry_at(at: &str) -> HistoryEntry {
    HistoryEntry {
        at: at.into(),
        node_id: "n1".into(),
        from: "a".into(),
        to: "b".into(),
        epoch: None,
        reason: "r".into(),
    }
}

fn value_of(e: &HistoryEntry) -> serde_json::Value {
    serde_json::to_value(e).unwrap()
}

#[test]
fn inserting_into_history_keeps_unreadable_elements_and_every_field() {
    let (entry, v) = (entry_at, value_of);
    let mut values = vec![v(&entry("t5")), serde_json::json!("junk"), v(&entry("t3"))];
    insert_history(&mut values, &entry("t4"), 10);
    assert_eq!(values[0], v(&entry("t4")));
    assert_eq!(values[2], serde_json::json!("junk"));
    insert_history(&mut values, &entry("t9"), 10);
    assert_eq!(values[0], v(&entry("t9")));
    // Over the count, the unreadable element goes before any entry.
    insert_history(&mut values, &entry("t0"), 4);
    assert_eq!(values.len(), 4);
    assert!(!values.contains(&serde_json::json!("junk")), "{values:?}");
    assert_eq!(values[0], v(&entry("t0")));
    // Entries keep the order of SPEC §3; the rest keeps every field.
    values.push(
        serde_json::json!({"at": "t", "node_id": "n", "from": "a", "to": "b",
        "epoch": null, "reason": "r", "future": 1}),
    );
    let text = String::from_utf8(history_bytes(&values)).unwrap();
    assert!(
        text.starts_with(
            r#"[{"at":"t0","node_id":"n1","from":"a","to":"b","epoch":null,"reason":"r"},"#
        ),
        "{text}"
    );
    assert!(text.contains(r#""future":1"#), "{text}");
    let back: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(back, values);
}

/// Issue 31, 3: a node whose clock runs fast (or a newer warden's entries) must not
/// bury a new transition below old ones, where truncation drops it.
#[test]
fn a_new_entry_goes_first_whatever_the_clocks_say() {
    let mut values: Vec<serde_json::Value> = (0..100)
        .map(|i| value_of(&entry_at(&format!("2099-01-01T00:00:{i:02}.000Z"))))
        .collect();
    let new = entry_at("2026-01-01T00:00:00.000Z");
    insert_history(&mut values, &new, 100);
    assert_eq!(values.len(), 100);
    assert_eq!(values[0], value_of(&new), "the new entry was dropped");
    // The oldest by the order of writes went.
    assert_eq!(values[99]["at"], "2099-01-01T00:00:98.000Z");
}

/// Issue 31, 3: 100+ unreadable elements cost the unreadable ones, never the new entry
/// nor the readable old ones.
#[test]
fn unreadable_elements_go_before_any_entry_and_the_new_one_stays() {
    // Newer than the readable entries (a newer warden wrote them, say).
    let mut values: Vec<serde_json::Value> =
        (0..120).map(|i| serde_json::json!({ "junk": i })).collect();
    values.extend([value_of(&entry_at("t2")), value_of(&entry_at("t1"))]);
    insert_history(&mut values, &entry_at("t3"), 100);
    assert_eq!(values.len(), 100);
    assert_eq!(
        values[0],
        value_of(&entry_at("t3")),
        "the new entry was dropped"
    );
    assert_eq!(
        values[98],
        value_of(&entry_at("t2")),
        "an old entry was dropped"
    );
    assert_eq!(
        values[99],
        value_of(&entry_at("t1")),
        "an old entry was dropped"
    );
    // The newest unreadable ones stayed, the oldest went.
    assert_eq!(values[1], serde_json::json!({ "junk": 0 }));
    assert_eq!(values[97], serde_json::json!({ "junk": 96 }));
}

/// Issue 31, 3: the serialized history stays under [`MAX_HISTORY_BYTES`] whatever was
/// stored before (an old warden's long reasons, big unreadable elements), and long
/// texts are cut with a marker.
#[test]
fn history_never_outgrows_its_byte_bound_and_long_texts_are_cut() {
    let long = |n: usize| "x".repeat(n);
    let mut old = entry_at("t1");
    old.reason = long(20_000);
    let mut values = vec![value_of(&old); 50];
    values.extend((0..5).map(|_| serde_json::json!(long(300_000))));
    let mut new = entry_at("t2");
    new.reason = format!("é{}", long(5_000));
    insert_history(&mut values, &new, 100);
    let bytes = history_bytes(&values);
    assert!(bytes.len() <= MAX_HISTORY_BYTES, "{} bytes", bytes.len());
    assert_eq!(values.len(), 51, "the readable entries all fit once cut");
    let first = history_entry(&values[0]).unwrap();
    assert!(
        first.reason.len() <= MAX_HISTORY_TEXT,
        "{}",
        first.reason.len()
    );
    assert!(first.reason.starts_with('é'), "{}", &first.reason[..10]);
    assert!(first.reason.ends_with(" bytes cut]"), "{}", first.reason);
    let second = history_entry(&values[1]).unwrap();
    assert!(second.reason.len() <= MAX_HISTORY_TEXT);
    // Big readable entries alone: the oldest go, the new one stays.
    let future = serde_json::Value::from(vec![long(1000); 100]);
    let mut values = vec![
        serde_json::json!({"at": "t", "node_id": "n1", "from": "a",
        "to": "b", "reason": "r", "future": future});
        30
    ];
    insert_history(&mut values, &entry_at("t3"), 100);
    assert!(history_bytes(&values).len() <= MAX_HISTORY_BYTES);
    assert_eq!(values[0], value_of(&entry_at("t3")));
    assert!(values.len() > 1 && values.len() < 30, "{}", values.len());
    assert_eq!(cut_text("short", 40), "short");
    assert!(cut_text(&long(100), 40).len() <= 40);
}

#[test]
fn a_failover_request_lapses_at_its_deadline() {
    let now = SystemTime::now();
    let req = |d: SystemTime| FailoverRequest {
        from: "a".into(),
        to: None,
        by: "op".into(),
        deadline: rfc3339(d),
        force: false,
    };
    assert!(req(now + std::time::Duration::from_secs(5)).pending_at(now));
    assert!(!req(now - std::time::Duration::from_secs(5)).pending_at(now));
    let mut bad = req(now);
    bad.deadline = "soon".into();
    assert!(!bad.pending_at(now));
}

fn host_record(machine: &str, boot: &str) -> NodeRecord {
    NodeRecord {
        node_id: "rm1".into(),
        host: "rm1.example".into(),
        machine_id: machine.into(),
        boot_id: boot.into(),
        pid_ns: Some(4026531836),
        ..Default::default()
    }
}

fn live(node: &str, machine: &str, boot: &str) -> MemberRecord {
    MemberRecord::bare(
        NodeRecord {
            node_id: node.into(),
            host: format!("{node}.example"),
            ..host_record(machine, boot)
        },
        Role::Standby,
        Health::Healthy,
    )
}

const M: &str = "3a000000000000000000000000000001";
const B_HERE: &str = "b0070000-0000-0000-0000-0000000000aa";
const B_OLD: &str = "b00700000000000000000000000000bb";

#[test]
fn another_boot_of_this_machine_needs_both_boot_ids_known() {
    let here = HostIdentity::of(&host_record(M, B_HERE));
    assert!(here.same_machine_other_boot(&host_record(M, B_OLD)));
    // The same boot, spelled otherwise, is not another boot.
    assert!(!here.same_machine_other_boot(&host_record(M, &B_HERE.to_uppercase())));
    assert!(!here.same_machine_other_boot(&host_record(M, "")));
    assert!(!here.same_machine_other_boot(&host_record(M, "not-hex")));
    assert!(!here.same_machine_other_boot(&host_record("3a000000000000000000000000000002", B_OLD)));
}

#[test]
fn a_reboot_is_contradicted_only_by_a_live_member_on_that_very_boot() {
    let here = HostIdentity::of(&host_record(M, B_HERE));
    let crumb = host_record(M, B_OLD);
    assert_eq!(here.reboot_contradicted_by(&crumb, &[]), None);
    // Members of this boot, or of another machine with that boot id, say nothing.
    let unrelated = [
        live("rm2", M, B_HERE),
        live("rm3", "3a000000000000000000000000000002", B_OLD),
    ];
    assert_eq!(here.reboot_contradicted_by(&crumb, &unrelated), None);
    let why = here
        .reboot_contradicted_by(&crumb, &[live("clone", M, &B_OLD.to_uppercase())])
        .expect("a clone runs the recorded boot");
    assert!(
        why.contains("clone") && why.contains("/etc/machine-id"),
        "{why}"
    );
    // A record of this very boot is no reboot to contradict.
    assert_eq!(
        here.reboot_contradicted_by(&host_record(M, B_HERE), &[live("x", M, B_HERE)]),
        None
    );
}
