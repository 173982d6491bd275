//! Bad input in the store (issue 11: 2a, 2c, 3, 5 and "Also"), on a real ZooKeeper: what
//! an attacker or a careless operator plants in the cluster's znodes gets one clear answer,
//! a documented way out, and nothing of the history is lost.
//!
//! - a breadcrumb whose node_id no node can have is unreadable, and `fence --confirm
//!   --unreadable` clears it;
//! - a history epoch above every czxid is moved aside by `init --force`, as the log says;
//! - unreadable history entries are skipped and counted, never a reason to lose the rest;
//!   an unreadable history znode is copied before it is replaced; a history at the znode
//!   limit is trimmed by the next append, and a too long pause reason is refused;
//! - `init` leaves the shared root's ACL alone, and an authorization error names the znode;
//! - `status` says so when `control` is unreadable, names the active whose lock data is
//!   garbage, and prints nothing from the store raw to a terminal.

mod common;

use common::*;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

// ---------------------------------------------------------------------------------------
// Helpers

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `warden -c CONFIG ARGS`, which must exit 0; its stdout.
fn cli_ok(config: &std::path::Path, args: &[&str]) -> String {
    let out = cli(config, args);
    assert!(out.status.success(), "warden {args:?}:\n{}", describe(&out));
    stdout(&out)
}

/// A node whose only fence method is `signal`, which cannot act on an unknown old active.
fn signal_only(cluster: &Cluster, id: &str) -> Node {
    cluster.node_with(
        id,
        NodeOptions {
            fences: Some(vec![signal_fence()]),
            ..Default::default()
        },
    )
}

/// Stops a warden that is not active (it just leaves) and waits until no member is left.
fn stop_and_wait_gone(warden: &mut Warden, node: &Node) {
    warden.sigterm();
    assert_eq!(
        warden.wait_exit(secs(15)).code(),
        Some(0),
        "{}",
        warden.log()
    );
    wait_for_status(&node.config, secs(15), "no members are left", |s| {
        member_ids(s).is_empty()
    });
}

/// Adds `lines` to the `[coordination.zookeeper]` table of a node's config.
fn with_zookeeper_keys(node: &Node, lines: &str) {
    let text = std::fs::read_to_string(&node.config).expect("read the config");
    let table = "[coordination.zookeeper]\n";
    assert!(text.contains(table), "{text}");
    std::fs::write(
        &node.config,
        text.replacen(table, &format!("{table}{lines}"), 1),
    )
    .expect("write the config");
}

/// A raw ZooKeeper session for what the harness's client does not do (ACLs, versions).
struct RawZk {
    client: zookeeper_client::Client,
    rt: tokio::runtime::Runtime,
}

impl RawZk {
    /// A session authenticated as the digest user `warden:secret`, the owner of the
    /// tests' `acl = "creator"` clusters (reading an ACL needs READ or ADMIN).
    fn connect(zk: &ZkServer) -> RawZk {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let client = rt
            .block_on(
                zookeeper_client::Client::connector()
                    .with_session_timeout(secs(10))
                    .with_auth("digest", b"warden:secret")
                    .connect(&zk.connect_string()),
            )
            .expect("a ZooKeeper session");
        RawZk { client, rt }
    }

    /// The ACL of `path` as `scheme:id:perms` strings, sorted.
    fn acl(&self, path: &str) -> Vec<String> {
        let (acls, _) = self
            .rt
            .block_on(self.client.get_acl(path))
            .unwrap_or_else(|e| panic!("getAcl {path}: {e}"));
        let mut out: Vec<String> = acls
            .iter()
            .map(|a| format!("{}:{}:{}", a.scheme(), a.id(), a.permission()))
            .collect();
        out.sort();
        out
    }

    /// Overwrites `path`'s data whatever its version (an attacker's `set`).
    fn set(&self, path: &str, data: &[u8]) {
        self.rt
            .block_on(self.client.set_data(path, data, None))
            .unwrap_or_else(|e| panic!("set {path}: {e}"));
    }
}

// ---------------------------------------------------------------------------------------
// 2a. A breadcrumb whose node_id is not a valid node_id

/// A breadcrumb naming node_id "rm\0x" (valid JSON, but no config can hold that id and no
/// command line can name it) is unreadable: the log's advice is `fence --confirm
/// --unreadable`, `status` shows it unreadable, and that command clears it, after which
/// the node promotes.
#[test]
fn a_breadcrumb_with_an_invalid_node_id_is_unreadable_and_confirm_unreadable_clears_it() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let client = ZkClient::connect(&zk.connect_string());
    let breadcrumb = cluster.znode("breadcrumb");
    client.put(
        &breadcrumb,
        br#"{"node_id":"rm\u0000x","host":"h","incarnation":"old","epoch":1}"#,
    );
    let n1 = signal_only(&cluster, "n1");
    let warden = n1.start();

    warden.wait_for_log("fence --confirm --unreadable", secs(30));
    let status = status_json(&n1.config);
    assert_eq!(active_id(&status), None, "{status:#}");
    let unreadable = status["breadcrumb"]["unreadable"]
        .as_str()
        .unwrap_or_default();
    assert!(unreadable.contains("not a valid node_id"), "{status:#}");
    let text = cli_ok(&n1.config, &["status"]);
    assert!(
        text.contains("breadcrumb: UNREADABLE") && text.contains("rm\\u{0}x"),
        "{text}"
    );
    assert!(!text.contains('\0'), "{text:?}");

    let cleared = cli_ok(&n1.config, &["fence", "--confirm", "--unreadable"]);
    assert!(
        cleared.contains("unreadable breadcrumb is deleted"),
        "{cleared}"
    );
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    cluster.assert_safe();
}

// ---------------------------------------------------------------------------------------
// 2c. A history epoch above every czxid

/// A history whose newest promotion carries an epoch above every czxid (an ensemble
/// restored from an old snapshot) blocks every promotion; the log names `init --force`,
/// and `init --force` (every warden stopped) moves the history aside, keeping it byte for
/// byte and saying where, and raises the epoch counter above it (the floor keeps that
/// epoch as seen), after which the node promotes with a greater epoch.
#[test]
fn init_force_moves_aside_a_history_whose_epoch_is_above_every_czxid() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let client = ZkClient::connect(&zk.connect_string());
    let history = cluster.znode("history");
    let future = br#"[{"at":"2030-01-01T00:00:00.000Z","node_id":"old","from":"promoting","to":"active","epoch":999999999999,"reason":"from the future"}]"#;
    client.put(&history, future);
    let n1 = signal_only(&cluster, "n1");
    let mut warden = n1.start();

    warden.wait_for_log("not above the recorded epoch 999999999999", secs(30));
    let log = warden.log();
    assert!(
        log.contains("init --force") && log.contains("history.old-"),
        "the refusal does not say what init --force does:\n{log}"
    );
    assert!(n1.runs().is_empty(), "n1 promoted: {:?}", n1.runs());
    stop_and_wait_gone(&mut warden, &n1);
    let before = client.get(&history).expect("history");
    assert!(
        String::from_utf8_lossy(&before).contains("from the future"),
        "{}",
        String::from_utf8_lossy(&before)
    );

    // n1 read that history: a join after its back-off keeps the epoch as seen, in the
    // floor (SPEC §3a), as if it had retried before it was stopped.
    client.put(&cluster.znode("floor"), br#"{"n1": 999999999999}"#);
    let out = cli_ok(&n1.config, &["init", "--force"]);
    assert!(out.contains("history.old-"), "{out}");
    let base = format!("/warden/{}", cluster.name);
    let kept: Vec<String> = client
        .children(&base)
        .into_iter()
        .filter(|c| c.starts_with("history.old-"))
        .collect();
    assert_eq!(kept.len(), 1, "{:?}", client.children(&base));
    assert_eq!(
        client.get(&format!("{base}/{}", kept[0])).as_deref(),
        Some(&before[..]),
        "the old history was not kept as it was"
    );
    let shown = cli_ok(&n1.config, &["history"]);
    assert!(shown.contains(&kept[0]), "{shown}");

    let _warden = n1.start();
    let status = wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    // The counter went above that history: no epoch goes back.
    assert!(active_epoch(&status) > Some(999_999_999_999), "{status:#}");
    cluster.assert_safe();
}

// ---------------------------------------------------------------------------------------
// 3. History is never lost

/// One unreadable entry among readable ones: `warden history` shows the readable ones and
/// counts the other, `--json` and `status --json` expose the count, and the next
/// transitions keep every old element, the unreadable one included.
#[test]
fn an_unreadable_history_entry_is_skipped_and_counted_and_the_rest_kept() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let client = ZkClient::connect(&zk.connect_string());
    let history = cluster.znode("history");
    client.put(
        &history,
        br#"[{"at":"2020-01-02T00:00:00.000Z","node_id":"n9","from":"promoting","to":"active","epoch":5,"reason":"second"},
            {"at":7,"garbage":true},
            {"at":"2020-01-01T00:00:00.000Z","node_id":"n9","from":"standby","to":"promoting","epoch":5,"reason":"first"}]"#,
    );
    let n1 = cluster.node("n1");
    let text = cli_ok(&n1.config, &["history"]);
    assert!(!text.contains("no transitions recorded yet"), "{text}");
    assert!(text.contains("second") && text.contains("first"), "{text}");
    assert!(text.contains("1 unreadable entry skipped"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&cli_ok(&n1.config, &["history", "--json"])).expect("JSON");
    assert_eq!(json["unreadable_entries"], 1, "{json:#}");
    assert_eq!(
        json["entries"].as_array().map(Vec::len),
        Some(2),
        "{json:#}"
    );

    let _warden = n1.start();
    let status = wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    assert_eq!(status["history_unreadable_entries"], 1, "{status:#}");
    wait_until(secs(10), "n1's promotion is in history", || {
        let raw = client.get(&history).unwrap_or_default();
        String::from_utf8_lossy(&raw).contains(r#""node_id":"n1""#)
    });
    let raw = String::from_utf8(client.get(&history).unwrap()).unwrap();
    for kept in [
        r#""reason":"second""#,
        r#""reason":"first""#,
        r#""garbage":true"#,
    ] {
        assert!(raw.contains(kept), "{kept} was dropped from history: {raw}");
    }
    let text = cli_ok(&n1.config, &["history"]);
    assert!(
        text.contains("n1") && text.contains("second") && text.contains("1 unreadable entry"),
        "{text}"
    );
}

/// A history znode that is not an array is copied to `history.unreadable-<time>` before
/// the first write replaces it: by an operator's command (which says where it went on
/// stderr) and by a daemon's transition (which logs it).
#[test]
fn an_unreadable_history_znode_is_copied_aside_before_it_is_replaced() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let client = ZkClient::connect(&zk.connect_string());
    let history = cluster.znode("history");
    let base = format!("/warden/{}", cluster.name);
    let kept = |client: &ZkClient| -> Vec<String> {
        client
            .children(&base)
            .into_iter()
            .filter(|c| c.starts_with("history.unreadable-"))
            .collect()
    };
    let garbage: &[u8] = b"\xff\xfe{ not a history";
    client.put(&history, garbage);
    let n1 = cluster.node("n1");
    let text = cli_ok(&n1.config, &["history"]);
    assert!(text.contains("UNREADABLE"), "{text}");
    assert!(!text.contains("no transitions recorded yet"), "{text}");

    // An operator's command: `pause` records itself in history.
    let out = cli(&n1.config, &["pause", "--reason", "test"]);
    assert!(out.status.success(), "{}", describe(&out));
    let copies = kept(&client);
    assert_eq!(copies.len(), 1, "{:?}", client.children(&base));
    assert!(stderr(&out).contains(&copies[0]), "{}", describe(&out));
    assert_eq!(
        client.get(&format!("{base}/{}", copies[0])).as_deref(),
        Some(garbage)
    );
    let text = cli_ok(&n1.config, &["history"]);
    assert!(
        text.contains(&copies[0]) && text.contains("paused"),
        "{text}"
    );
    cli_ok(&n1.config, &["resume"]);

    // A daemon's transition.
    let garbage2: &[u8] = br#"{"not":"an array"}"#;
    client.put(&history, garbage2);
    let warden = n1.start();
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    // Its start writes several entries in a moment; the first to land finds the
    // garbage, and only it may copy it. (Each entry had its own writer once: under load
    // two of them read the garbage before either replaced it, and each kept a copy.)
    wait_until(secs(10), "n1's promotion is in history", || {
        client
            .get(&history)
            .is_some_and(|h| String::from_utf8_lossy(&h).contains(r#""to":"active""#))
    });
    assert_eq!(kept(&client).len(), 2, "{:?}", client.children(&base));
    let second = kept(&client)
        .into_iter()
        .find(|c| *c != copies[0])
        .expect("two copies");
    assert_eq!(
        client.get(&format!("{base}/{second}")).as_deref(),
        Some(garbage2)
    );
    wait_until(secs(10), "the log names the copy", || {
        warden.log_mentions(&second)
    });
    let status = status_json(&n1.config);
    let set_aside = status["history_set_aside"].to_string();
    assert!(
        set_aside.contains(&copies[0]) && set_aside.contains(&second),
        "{status:#}"
    );
}

/// Issue 31, 3: a history znode at ZooKeeper's 1 MiB limit (long pause reasons of an
/// older warden) made every later append fail for good. The next append trims it (long
/// texts cut, the oldest dropped) and keeps the new entry: an operator's `pause` and
/// `resume`, and a daemon's promotion. A `pause --reason` over its limit is refused
/// (exit 2, naming the limit) and changes nothing.
#[test]
fn a_history_at_the_znode_limit_is_trimmed_by_the_next_append_and_long_reasons_are_refused() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let client = ZkClient::connect(&zk.connect_string());
    let history = cluster.znode("history");
    // Just under jute.maxbuffer (1,048,575 bytes for the whole request, the path and
    // headers included): any entry added to it as it is makes the request too large.
    const PLANTED: usize = 1_048_575 - 300;
    let old = |i: usize, reason: &str| {
        serde_json::json!({"at": format!("2020-01-01T00:00:{i:02}.000Z"), "node_id": "n9",
            "from": "running", "to": "paused", "epoch": null, "reason": reason})
    };
    let mut entries: Vec<serde_json::Value> = (0..40)
        .map(|i| old(i, &format!("old {i} {}", "x".repeat(25_000))))
        .collect();
    let size = |e: &Vec<serde_json::Value>| serde_json::to_vec(e).unwrap().len();
    let pad = PLANTED - size(&entries);
    entries[39] = old(39, &format!("old 39 {}", "x".repeat(25_000 + pad)));
    let planted = serde_json::to_vec(&entries).unwrap();
    assert_eq!(planted.len(), PLANTED);
    client.put(&history, &planted);
    let n1 = cluster.node("n1");

    let reason = format!("kernel upgrade {}", "r".repeat(380));
    for args in [&["pause", "--reason", reason.as_str()][..], &["resume"]] {
        let out = cli(&n1.config, args);
        assert!(out.status.success(), "{}", describe(&out));
        assert!(
            !stderr(&out).contains("could not be added to history"),
            "warden {args:?} lost its history entry:\n{}",
            describe(&out)
        );
    }
    let raw = client.get(&history).expect("history");
    assert!(
        raw.len() <= 256 * 1024,
        "history is still {} bytes",
        raw.len()
    );
    let json: serde_json::Value =
        serde_json::from_str(&cli_ok(&n1.config, &["history", "--json"])).expect("JSON");
    let shown = json["entries"].as_array().expect("entries");
    assert_eq!(shown[0]["to"], "running", "{:#}", shown[0]);
    assert_eq!(shown[1]["to"], "paused", "{:#}", shown[1]);
    assert!(
        shown[1]["reason"]
            .as_str()
            .is_some_and(|r| r.contains(&reason)),
        "{:#}",
        shown[1]
    );
    // The old entries stay, their reasons cut with a marker.
    assert_eq!(shown.len(), 42, "{} entries", shown.len());
    let oldest = shown[41]["reason"].as_str().expect("reason");
    assert!(
        oldest.starts_with("old 39 xxx") && oldest.ends_with("bytes cut]"),
        "{oldest}"
    );

    // Over the limit: refused, nothing changed.
    let long = "y".repeat(401);
    let out = cli(&n1.config, &["pause", "--reason", &long]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("at most 400"),
        "the refusal names the limit: {}",
        describe(&out)
    );
    assert_eq!(status_json(&n1.config)["paused"], false);

    // A daemon's transitions land too.
    client.put(&history, &planted);
    let _warden = n1.start();
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    wait_until(secs(10), "n1's promotion is in history", || {
        client
            .get(&history)
            .is_some_and(|h| String::from_utf8_lossy(&h).contains(r#""to":"active""#))
    });
    assert!(client.get(&history).expect("history").len() <= 256 * 1024);
}

// ---------------------------------------------------------------------------------------
// 5. ACLs: the shared root is not the cluster's

/// `init` of a cluster with `acl = "creator"` leaves the shared root open for others to
/// create their cluster under (it never gets the digest ACL), so an `acl = "open"` cluster
/// under the same root initialises and runs; an authorization error names the znode.
#[test]
fn init_keeps_the_shared_root_open_for_other_clusters_and_auth_errors_name_the_znode() {
    let zk = ZkServer::start();
    let raw = RawZk::connect(&zk);
    let secure = Cluster::new(&zk);
    let open = Cluster::new(&zk);
    let s1 = secure.node("s1");
    with_zookeeper_keys(&s1, "acl = \"creator\"\nauth = \"digest:warden:secret\"\n");
    let o1 = open.node("o1");

    cli_ok(&s1.config, &["init"]);
    let root = raw.acl("/warden");
    assert!(
        root.iter().any(|a| a.starts_with("world:anyone:")),
        "/warden is closed to other clusters: {root:?}"
    );
    let base = raw.acl(&format!("/warden/{}", secure.name));
    assert!(
        base.iter().all(|a| a.starts_with("digest:warden:")),
        "the cluster's own znode has no digest ACL: {base:?}"
    );

    cli_ok(&o1.config, &["init"]);
    // `init` again (it repairs ACLs) still leaves the shared root alone.
    cli_ok(&s1.config, &["init"]);
    assert_eq!(raw.acl("/warden"), root);
    let _o = o1.start();
    let _s = s1.start();
    wait_for_status(&o1.config, secs(30), "o1 is active", |s| {
        active_id(s).as_deref() == Some("o1")
    });
    wait_for_status(&s1.config, secs(30), "s1 is active", |s| {
        active_id(s).as_deref() == Some("s1")
    });

    // Someone with the wrong credentials: the error names the znode refused.
    let intruder = secure.node("s2");
    with_zookeeper_keys(
        &intruder,
        "acl = \"creator\"\nauth = \"digest:warden:wrong\"\n",
    );
    let out = cli(&intruder.config, &["init"]);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(
        stderr(&out).contains(&format!("/warden/{}", secure.name)),
        "the error does not name the znode:\n{}",
        describe(&out)
    );
    let out = cli(&intruder.config, &["status"]);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(
        stderr(&out).contains(&format!("/warden/{}/", secure.name)),
        "the error does not name the znode:\n{}",
        describe(&out)
    );
}

// ---------------------------------------------------------------------------------------
// Also: control, escape sequences, garbage in the lock

/// An unreadable `control` is said in `status` (text and JSON), not silently "not paused".
#[test]
fn status_says_when_control_is_unreadable() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let client = ZkClient::connect(&zk.connect_string());
    client.put(&cluster.znode("control"), b"{\"paused\": tru");
    let n1 = cluster.node("n1");
    let status = status_json(&n1.config);
    assert!(
        status["control_unreadable"]
            .as_str()
            .is_some_and(|s| s.contains("not valid JSON")),
        "{status:#}"
    );
    let text = cli_ok(&n1.config, &["status"]);
    assert!(text.contains("control:    UNREADABLE"), "{text}");
}

/// Escape sequences and newlines planted in records (a member's host, control's reason,
/// the breadcrumb, history) reach the terminal escaped in `status`, `history` and `fence`.
#[test]
fn escape_sequences_from_the_store_never_reach_the_terminal_raw() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let client = ZkClient::connect(&zk.connect_string());
    let evil = "\u{1b}[2J\u{1b}]0;pwned\u{7}\nactive:     n666 (forged)\r";
    let evil_json = serde_json::to_string(evil).unwrap();
    client.put(
        &cluster.znode("control"),
        format!(r#"{{"paused":true,"reason":{evil_json}}}"#).as_bytes(),
    );
    client.put(
        &cluster.znode("breadcrumb"),
        format!(r#"{{"node_id":"n1","host":{evil_json},"incarnation":{evil_json},"epoch":3}}"#)
            .as_bytes(),
    );
    client.put(
        &cluster.znode("history"),
        format!(
            r#"[{{"at":{evil_json},"node_id":{evil_json},"from":"a","to":"b","epoch":1,"reason":{evil_json}}}]"#
        )
        .as_bytes(),
    );
    client.create_ephemeral(
        &cluster.znode("members/n7"),
        format!(r#"{{"node_id":"n7","host":{evil_json},"role":"standby","health":"healthy","since":{evil_json}}}"#)
            .as_bytes(),
    );
    let n1 = cluster.node("n1");
    let raw_bytes = |out: &std::process::Output| {
        let all = [&out.stdout[..], &out.stderr[..]].concat();
        assert!(
            !all.contains(&0x1b) && !all.contains(&b'\r') && !all.contains(&0x07),
            "raw control characters in the output:\n{}",
            describe(out)
        );
        String::from_utf8_lossy(&all).into_owned()
    };
    for args in [
        &["status"][..],
        &["history"][..],
        &["fence", "n1", "--dry-run"][..],
        &["fence", "--confirm", "--unreadable"][..],
    ] {
        let out = cli(&n1.config, args);
        let text = raw_bytes(&out);
        assert!(
            !text.lines().any(|l| l.starts_with("active:     n666")),
            "a forged line in `warden {args:?}`:\n{text}"
        );
        assert!(text.contains("\\u{1b}[2J"), "`warden {args:?}`:\n{text}");
    }
}

/// Garbage written into the lock's data while n1 is active: `status` never says "active:
/// none" while n1's `/active` answers 200; it names n1 (found by the lock's session) and
/// says that the lock's record is unreadable.
#[test]
fn garbage_in_the_lock_data_does_not_make_status_contradict_the_active() {
    let zk = ZkServer::start();
    let mut cluster = Cluster::new(&zk);
    // A slow renewal (every 5s) keeps the window between the garbage and the active's
    // next renewal, which notices it, wide enough to look at both.
    cluster.session_timeout = secs(30);
    let port = free_port();
    let n1 = cluster.node_with(
        "n1",
        NodeOptions {
            extra: format!("[api]\nlisten = \"127.0.0.1:{port}\"\n"),
            ..Default::default()
        },
    );
    let _warden = n1.start();
    // A new cluster's first promotion waits a session timeout (the first epoch counter):
    // the raw client connects once n1 leads, so that its own session is not idle that long.
    wait_for_status(&n1.config, secs(90), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    let raw = RawZk::connect(&zk);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut consistent = 0;
    for _ in 0..10 {
        wait_for_status(&n1.config, secs(60), "n1 is active", |s| {
            active_id(s).as_deref() == Some("n1")
        });
        wait_until(secs(10), "n1 serves /active", || {
            http_status(addr, "/active") == Some(200)
        });
        raw.set(&cluster.znode("lock"), b"\x00garbage{");
        let before = http_status(addr, "/active");
        let status = status_json(&n1.config);
        let text = cli(&n1.config, &["status"]);
        let after = http_status(addr, "/active");
        if before == Some(200) && after == Some(200) {
            consistent += 1;
            assert_eq!(active_id(&status).as_deref(), Some("n1"), "{status:#}");
            assert!(status["lock_unreadable"].is_string(), "{status:#}");
            let text = stdout(&text);
            assert!(
                text.contains("active:     n1") && text.contains("record UNREADABLE"),
                "{text}"
            );
        }
        if consistent >= 2 {
            return;
        }
    }
    panic!("never saw n1 serve /active across a `status` after the garbage ({consistent} times)");
}

/// The HTTP status of `GET path`, or `None` if nothing answers.
fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let timeout = Duration::from_secs(2);
    let mut s = TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw);
    text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}
