//! The ZooKeeper backend's pure parts: the floor, the counter, paths and errors.

use super::*;

#[test]
fn the_floor_keeps_each_nodes_greatest_epoch_seen_and_skips_garbage() {
    let floor = parse_floor(br#"{"n1": 8, "n2": "x", "n3": 9007199254740993, "n4": 42}"#);
    assert_eq!(floor, Floor::from([("n1".into(), 8), ("n4".into(), 42)]));
    assert_eq!(floor_max(&floor), Some((42, "n4")));
    assert!(parse_floor(b"not json").is_empty());
    // Raised only upwards, and only by an epoch; not when the floor holds it already
    // (another's entry does: no entry is ever lowered).
    assert_eq!(raised(&floor, "n4", Some(42)), None);
    assert_eq!(raised(&floor, "n4", Some(7)), None);
    assert_eq!(raised(&floor, "n1", None), None);
    assert_eq!(raised(&floor, "n1", Some(42)), None);
    assert_eq!(raised(&floor, "n9", Some(10)), None);
    assert_eq!(
        raised(&floor, "n1", Some(50)).as_ref().and_then(floor_max),
        Some((50, "n1"))
    );
    let back = parse_floor(&record::to_bytes(&raised(&floor, "n5", Some(90)).unwrap()));
    assert_eq!(back.get("n5"), Some(&90));
}

#[test]
fn the_counter_is_the_greatest_epoch_the_store_remembers() {
    // The epoch znode's mzxid plus its offset...
    let none = History::default();
    let c = counter_of(Some((br#"{"offset": 100}"#, 12, 3)), None, None, &none);
    assert_eq!((c.epoch, c.offset, c.version), (Some(112), 100, Some(3)));
    // ... or what the lock and the breadcrumb record, whichever is greater (a cluster
    // made by an older warden has no epoch znode).
    let at = |e: u64| format!(r#"{{"node_id":"n1","host":"h","incarnation":"i","epoch":{e}}}"#);
    let (lock, crumb) = (at(40), at(7));
    let c = counter_of(
        Some((b"", 12, 0)),
        Some(lock.as_bytes()),
        Some(crumb.as_bytes()),
        &none,
    );
    assert_eq!((c.epoch, c.offset), (Some(40), 0));
    let garbage = at(crate::coord::MAX_KEPT_EPOCH);
    let c = counter_of(
        None,
        Some(garbage.as_bytes()),
        Some(crumb.as_bytes()),
        &none,
    );
    assert_eq!((c.epoch, c.version), (Some(7), None));
    assert_eq!(counter_of(None, None, None, &none).epoch, None);
}

#[test]
fn a_floor_above_the_counter_is_lost_data_naming_the_node() {
    let why = lost(Some(12), Some((47, "n3"))).expect("lost data");
    assert!(
        why.contains("12") && why.contains("47") && why.contains("node n3"),
        "{why}"
    );
    assert!(why.contains("init --force"), "{why}");
    assert_eq!(lost(Some(47), Some((47, "n3"))), None);
    assert_eq!(lost(Some(12), None), None);
    // A store that remembers no epoch at all, while a node saw one: wiped.
    assert!(lost(None, Some((5, "n1"))).is_some());
}

#[test]
fn the_shared_parents_are_the_znodes_of_root() {
    assert_eq!(ancestors("/warden"), ["/warden"]);
    assert_eq!(ancestors("/a/b/"), ["/a", "/a/b"]);
    assert!(ancestors("/").is_empty());
    assert_eq!(parent("/warden/rm"), "/warden");
    assert_eq!(parent("/warden"), "/");
}

#[test]
fn a_creator_cluster_leaves_shared_parents_open_for_reading_and_creating() {
    let acls = shared_parent_acls(AclMode::Creator);
    let anyone = acls
        .iter()
        .find(|a| a.scheme() == "world" && a.id() == "anyone")
        .expect("world:anyone");
    assert!(anyone
        .permission()
        .has(Permission::READ | Permission::CREATE));
    assert!(!anyone.permission().has(Permission::DELETE));
    assert!(!anyone.permission().has(Permission::ADMIN));
    assert_eq!(
        &shared_parent_acls(AclMode::Open)[..],
        &Acls::anyone_all()[..]
    );
}

#[test]
fn an_authorization_error_names_the_znode() {
    let e = classify(zk::Error::NoAuth, "/warden/rm/members");
    assert!(matches!(e, StoreError::Auth(_)));
    assert!(e.to_string().contains("/warden/rm/members"), "{e}");
    let e = classify_multi(
        zk::MultiWriteError::OperationFailed {
            index: 1,
            source: zk::Error::NoAuth,
        },
        &["/a/lock", "/a/breadcrumb"],
    );
    assert!(e.to_string().contains("/a/breadcrumb"), "{e}");
}
