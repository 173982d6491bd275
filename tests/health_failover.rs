//! Health-driven failover (issue 5 "Show it works" 6, SPEC §4.4 and §4.6): an `http`
//! health check that starts failing makes the active hand over after `fall` failures;
//! the node rejoins as a standby after `rise` passes.
//!
//! Hooks mode, so the checked service always runs and its health decides both the
//! active's fate and the standby's eligibility. Each node's "service" is a small HTTP
//! server in this test that answers 200 or 500 as the test says.

mod common;

use common::*;
use std::fs;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// An HTTP server answering every request with 200 while `healthy`, else 500.
struct Service {
    port: u16,
    healthy: Arc<AtomicBool>,
    requests: Arc<AtomicU64>,
}

impl Service {
    fn start() -> Service {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let healthy = Arc::new(AtomicBool::new(true));
        let requests = Arc::new(AtomicU64::new(0));
        let (h, r) = (healthy.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                r.fetch_add(1, Ordering::SeqCst);
                let status = if h.load(Ordering::SeqCst) {
                    "200 OK"
                } else {
                    "500 Internal Server Error"
                };
                let _ = write!(
                    s,
                    "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
            }
        });
        Service {
            port,
            healthy,
            requests,
        }
    }

    fn set_healthy(&self, yes: bool) {
        self.healthy.store(yes, Ordering::SeqCst);
    }
}

/// Rewrites a harness config into hooks mode with an http health check on `port`.
fn hooks_with_http_health(node: &Node, port: u16, hook: &Path, fall: u32, rise: u32) {
    let text = fs::read_to_string(&node.config).unwrap();
    let start = text.find("[service]").unwrap();
    let end = text.find("[health]").unwrap();
    let after_health = text[end..].find("\n\n").map(|i| end + i).unwrap();
    let hook = toml_str(&hook.display().to_string());
    let middle = format!(
        "[service]\nmode = \"hooks\"\npromote = [{hook}, \"promote\"]\ndemote = [{hook}, \"demote\"]\nhook_timeout = \"2s\"\n\n\
         [health]\nkind = \"http\"\nurl = \"http://127.0.0.1:{port}/health\"\ninterval = \"100ms\"\ntimeout = \"500ms\"\nfall = {fall}\nrise = {rise}\n"
    );
    fs::write(
        &node.config,
        format!("{}{middle}{}", &text[..start], &text[after_health..]),
    )
    .unwrap();
}

#[test]
fn failing_http_health_hands_over_after_fall_and_the_node_rejoins_after_rise() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let record = cluster.dir().join("hook-calls");
    let hook = cluster.script(
        "hook.sh",
        &format!(
            "echo \"$1 $WARDEN_NODE_ID ${{WARDEN_EPOCH:--}}\" >> '{}'\n",
            record.display()
        ),
    );
    let (s1, s2) = (Service::start(), Service::start());
    let (n1, n2) = (cluster.node("n1"), cluster.node("n2"));
    hooks_with_http_health(&n1, s1.port, &hook, 3, 2);
    hooks_with_http_health(&n2, s2.port, &hook, 3, 2);
    let check = cli(&n1.config, &["check-config"]);
    assert_eq!(check.status.code(), Some(0), "{}", describe(&check));

    let _w1 = n1.start();
    let (active, _) = wait_for_active(&n1.config, secs(30));
    assert_eq!(active, "n1");
    let _w2 = n2.start();
    wait_for_status(&n1.config, secs(30), "n2 is a healthy standby", |s| {
        member_role(s, "n2").as_deref() == Some("standby")
    });

    // n1's service starts failing its health check: after `fall` failures n1 demotes
    // and n2 takes over without fencing (n1's demotion was clean).
    let failing_from = s1.requests.load(Ordering::SeqCst);
    s1.set_healthy(false);
    let status = wait_for_status(&n2.config, secs(30), "n2 is active", |s| {
        active_id(s).as_deref() == Some("n2")
    });
    let failed_checks = s1.requests.load(Ordering::SeqCst) - failing_from;
    assert!(
        failed_checks >= 3,
        "n1 handed over after {failed_checks} failed checks, fewer than fall = 3"
    );
    assert!(
        cluster.fence_calls().is_empty(),
        "a clean demotion needs no fencing: {:?}",
        cluster.fence_calls()
    );
    assert_ne!(member_role(&status, "n1").as_deref(), Some("standby"));
    let calls = fs::read_to_string(&record).unwrap();
    let order: Vec<&str> = calls.lines().collect();
    let demote = order
        .iter()
        .position(|l| l.starts_with("demote n1"))
        .unwrap();
    let promote = order
        .iter()
        .position(|l| l.starts_with("promote n2"))
        .unwrap();
    assert!(demote < promote, "{calls}");

    // While unhealthy, n1 stays out of the election (it re-registers after releasing).
    wait_for_status(&n1.config, secs(10), "n1 is back, ineligible", |s| {
        member_role(s, "n1").as_deref() == Some("ineligible")
    });

    // Healthy again: after `rise` passes n1 rejoins as a standby.
    s1.set_healthy(true);
    wait_for_status(&n1.config, secs(30), "n1 rejoins as a standby", |s| {
        member_role(s, "n1").as_deref() == Some("standby")
    });
    assert_eq!(active_id(&status_json(&n1.config)).as_deref(), Some("n2"));
}
