//! The MySQL store's own bounds (SPEC §3a, §10a): the holder's lock expiry, a holder cut
//! off inside a transaction, the session settings of every connection, lock tables made
//! by an older warden, and URL parameters this build cannot honour.

mod common;

use common::mariadb::MariaDb;
use common::proxy::TcpProxy;
use common::*;

/// A cluster on `db`, its tables made by `warden init`.
fn initialized(cluster: &Cluster) {
    let n = cluster.node("init");
    let out = cli(&n.config, &["init"]);
    assert!(out.status.success(), "warden init: {}", describe(&out));
}

/// The config of node `id` on a MySQL store at `url` (no server needed to check it).
fn config_with_url(cluster: &mut Cluster, id: &str, url: &str) -> Node {
    cluster.coordination = Some(format!(
        "[coordination]\nbackend = \"mysql\"\n\n[coordination.mysql]\nurl = {}\n",
        toml_str(url)
    ));
    cluster.node(id)
}

/// `require_ssl` (and the other TLS parameters) asked for TLS of a build without it:
/// `check-config` passed and every connect panicked (`status` exited 101, `run` lost its
/// connect task). Now each is a config error naming the key and the parameter, as are
/// the parameters warden sets itself (its pool, `wait_timeout`, which rows count as
/// changed, the socket it prefers) and any mysql_async does not know.
#[test]
fn url_parameters_this_build_cannot_honour_are_config_errors() {
    let mut cluster = Cluster::with_connect("127.0.0.1:1");
    for param in [
        "require_ssl=true",
        "verify_ca=false",
        "verify_identity=true",
        "built_in_roots=false",
        "pool_max=100",
        "wait_timeout=28800",
        "client_found_rows=true",
        "reset_connection=true",
        "prefer_socket=true",
        "conn_ttl=10",
        "no_such_parameter=1",
    ] {
        let name = param.split('=').next().unwrap();
        let url = format!("mysql://warden@127.0.0.1:1/warden?{param}");
        let node = config_with_url(&mut cluster, "n1", &url);
        for command in [&["check-config"][..], &["status"]] {
            let out = cli(&node.config, command);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{param}: {}", describe(&out));
            assert!(
                stderr.contains("coordination.mysql.url") && stderr.contains(name),
                "{param}: {}",
                describe(&out)
            );
            assert!(!stderr.contains("panicked"), "{param}: {}", describe(&out));
        }
    }
    // What it can honour still passes.
    let node = config_with_url(
        &mut cluster,
        "n2",
        "mysql://warden@127.0.0.1:1/warden?tcp_nodelay=true&compression=fast",
    );
    let out = cli(&node.config, &["check-config"]);
    assert!(out.status.success(), "{}", describe(&out));
}

/// The `/bin/true` fence: reports the old active fenced without touching it, so that only
/// warden's own lease rules keep two services apart.
fn true_fence() -> NodeOptions {
    NodeOptions {
        fences: Some(vec![script_fence(&["/bin/true"], secs(2))]),
        ..NodeOptions::default()
    }
}

/// SPEC §3a "Lock expiry is the holder's": n1 holds the lock with a 30 s session, n2 reads
/// it with 3 s (a rolling change of `session_timeout`). n1's path to MariaDB is cut for
/// 4 s: its lease (15 s after its last acknowledged renewal) is valid throughout, so n2,
/// whose fence reports success without doing anything, must not promote. (It expired the
/// row after its own 3 s, fenced with `/bin/true` and started a second service.)
#[test]
fn a_standby_waits_for_the_holders_expiry_not_its_own() {
    let db = MariaDb::start();
    let proxy = TcpProxy::start(db.port());
    let mut cluster = Cluster::with_mysql(&db);
    initialized(&cluster);
    cluster.session_timeout = secs(30);
    cluster.use_mysql_at(&db, &db.url_via(proxy.port()));
    let n1 = cluster.node("n1");
    cluster.session_timeout = secs(3);
    cluster.use_mysql(&db);
    let n2 = cluster.node_with("n2", true_fence());
    let _wardens = start_active_then_standbys(&n1, &[&n2]);
    let served = n1.last_run().unwrap();

    proxy.cut();
    holds_for(secs(4), "n2 stays out while n1 is cut off", || {
        match n2.last_run() {
            None => Ok(()),
            Some(run) => Err(format!("n2 started its service: {run}")),
        }
    });
    proxy.heal();
    wait_for_status(&n2.config, secs(30), "n1 is active again", |s| {
        active_id(s).as_deref() == Some("n1") && member_role(s, "n1").as_deref() == Some("active")
    });
    assert!(n2.runs().is_empty(), "n2 ran: {:?}", n2.runs());
    assert!(process_alive(served.pid), "n1's service stopped: {served}");
    assert_eq!(
        n1.runs().len(),
        1,
        "n1 restarted its service: {:?}",
        n1.runs()
    );
    cluster.assert_safe();
}

/// SPEC §3a "A holder that vanishes inside a transaction": n1's connection goes silent
/// (a partition that closes nothing) right after MariaDB ran its renewal's `UPDATE` of
/// the lock row, so the row stays locked by a transaction nobody will end. n1 talks to
/// MariaDB as to MySQL, which skips MariaDB's `/*M! */` idle-transaction timeouts: only
/// `wait_timeout` ends that connection, and with the server's default (8 h) no rival could
/// lock the row and no node served again. warden sets it to the session timeout.
#[test]
fn a_holder_cut_off_inside_a_transaction_frees_the_lock_row() {
    let db = MariaDb::start();
    let proxy = TcpProxy::start(db.port());
    proxy.as_mysql();
    let mut cluster = Cluster::with_mysql(&db);
    initialized(&cluster);
    cluster.use_mysql_at(&db, &db.url_via(proxy.port()));
    let n1 = cluster.node("n1");
    cluster.use_mysql(&db);
    let n2 = cluster.node("n2");
    let _wardens = start_active_then_standbys(&n1, &[&n2]);

    proxy.blackhole_after(|sql| {
        sql.starts_with("UPDATE `warden_lock`") && sql.contains("version = IF(version")
    });
    let statement = proxy.wait_blackholed(secs(10));
    eprintln!("blackholed after: {statement}");
    // The row is locked by the silent transaction, until the server ends its connection:
    // then a root client can lock it, and a node serves again.
    let row_free = || {
        db.try_sql(
            "SET SESSION innodb_lock_wait_timeout = 1; SELECT session FROM \
             warden.warden_lock FOR UPDATE",
        )
        .is_ok()
    };
    wait_until(secs(5), "the lock row is locked", || !row_free());
    let locked_ns = mono_now_ns();
    wait_until(secs(60), "the lock row is free again", row_free);
    eprintln!(
        "the silent transaction held the lock row for {:?} (session timeout {:?})",
        ns(mono_now_ns() - locked_ns),
        cluster.session_timeout
    );
    wait_for_status(&n2.config, secs(30), "a node is active", |s| {
        active_id(s).is_some()
    });
    cluster.assert_safe();
}

/// Lock tables made by an older warden have no `expires_at`. A warden adds the column
/// when it connects, where the user may ALTER the table (old wardens sharing the table in
/// a rolling upgrade go on writing it: the column is nullable); where it may not, `run`
/// exits 2 naming `warden init` and the statement to run, instead of failing on every
/// read of the lock. `warden init` by a user who may adds it.
#[test]
fn a_lock_table_of_an_older_warden_gets_its_expiry_column() {
    let db = MariaDb::start();
    let cluster = Cluster::with_mysql(&db);
    initialized(&cluster);
    db.sql(
        "ALTER TABLE warden.warden_lock DROP COLUMN expires_at; \
         REVOKE ALTER ON warden.* FROM 'warden'@'127.0.0.1'",
    );
    let has_column = || {
        db.sql(
            "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'warden' \
             AND TABLE_NAME = 'warden_lock' AND COLUMN_NAME = 'expires_at'",
        )
        .trim()
            == "1"
    };
    let n1 = cluster.node("n1");
    let mut w = n1.start();
    let status = w.wait_exit(secs(30));
    assert_eq!(status.code(), Some(2), "{}", w.log());
    assert!(
        w.log_mentions("run `warden init` as a user allowed to ALTER it")
            && w.log_mentions("ADD COLUMN expires_at"),
        "{}",
        w.log()
    );
    let out = cli(&n1.config, &["status"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("run `warden init`"),
        "{}",
        describe(&out)
    );
    assert!(!has_column());

    db.sql("GRANT ALTER ON warden.* TO 'warden'@'127.0.0.1'");
    let out = cli(&n1.config, &["init"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(has_column());
    let _w = n1.start();
    wait_for_status(&n1.config, secs(30), "n1 is active", |s| {
        active_id(s).as_deref() == Some("n1")
    });
    assert_eq!(
        db.sql("SELECT expires_at > renewed_at FROM warden.warden_lock")
            .trim(),
        "1",
        "the holder writes its expiry"
    );
    cluster.assert_safe();
}
