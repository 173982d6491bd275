//! The HTTP face (SPEC §10, issue 5 "Show it works" 4), checked with real HTTP requests
//! over TCP.
//!
//! - In process: `warden::api::serve` on a loopback port with a `watch` channel the test
//!   drives: `/active`, `/standby`, `/status`, `/metrics`, and the bounds on slow clients.
//! - End to end: `warden run` with `[api] listen` on a real ZooKeeper: `/active` answers
//!   200 only on the active through a failover, and `/metrics` parses as Prometheus text
//!   with counters that match the transitions and fence attempts in the daemon's log.

mod common;

use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use warden::api::{self, NodeView};
use warden::metrics::Metrics;
use warden::record::{Health, MemberRecord, NodeRecord, Role};

// ---------------------------------------------------------------------------------------
// A small HTTP/1.1 client: one request per connection, every step under a timeout.

/// How long a test waits to connect, and for each read or write.
const HTTP_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// `METHOD path` to `addr`; an error if the server cannot be reached or answers garbage.
fn request(addr: SocketAddr, method: &str, path: &str) -> Result<Reply, String> {
    let mut s = TcpStream::connect_timeout(&addr, HTTP_TIMEOUT)
        .map_err(|e| format!("connect to {addr}: {e}"))?;
    s.set_read_timeout(Some(HTTP_TIMEOUT))
        .and_then(|()| s.set_write_timeout(Some(HTTP_TIMEOUT)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: warden-test\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("send to {addr}: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("read from {addr}: {e}"))?;
    let text = String::from_utf8(raw).map_err(|_| "reply is not UTF-8".to_string())?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no end of headers in {text:?}"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap_or((l, ""));
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect();
    let reply = Reply {
        status,
        headers,
        body: body.to_string(),
    };
    if method != "HEAD" {
        if let Some(len) = reply.header("content-length") {
            let len: usize = len.parse().map_err(|_| format!("bad length {len:?}"))?;
            if len != reply.body.len() {
                return Err(format!(
                    "content-length {len} but {} body bytes",
                    reply.body.len()
                ));
            }
        }
    }
    Ok(reply)
}

fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path).unwrap_or_else(|e| panic!("GET {path} from {addr}: {e}"))
}

/// The status of `GET path`, or `None` if nothing answers (a dead node).
fn try_status(addr: SocketAddr, path: &str) -> Option<u16> {
    request(addr, "GET", path).ok().map(|r| r.status)
}

// ---------------------------------------------------------------------------------------
// A strict parser of the Prometheus text format 0.0.4.

#[derive(Clone, Debug, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn valid_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with("__")
}

/// Parses `{a="x",b="y"}` (the braces excluded) with the format's escapes.
fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (name, after) = rest
            .split_once("=\"")
            .ok_or_else(|| format!("label without =\" in {s:?}"))?;
        if !valid_label_name(name) {
            return Err(format!("bad label name {name:?}"));
        }
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err(format!("unterminated label value in {s:?}")),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("bad escape {other:?} in {s:?}")),
                },
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} twice in {s:?}"));
        }
        rest = &after[end + 1..];
        rest = match rest.strip_prefix(',') {
            Some(r) => r,
            None if rest.is_empty() => rest,
            None => return Err(format!("junk after a label value in {s:?}")),
        };
    }
    Ok(labels)
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "NaN" => Ok(f64::NAN),
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        _ => s.parse().map_err(|_| format!("bad sample value {s:?}")),
    }
}

/// Every sample of a 0.0.4 text exposition; an error names the first line that breaks the
/// format: a bad name, label or value, a `# TYPE` after its samples or twice, a sample
/// whose name is not its family's (counters and gauges are named as their samples), a
/// series twice, or a missing final newline.
fn parse_prometheus(text: &str) -> Result<Vec<Sample>, String> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("the exposition does not end with a newline".into());
    }
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helps: BTreeSet<String> = BTreeSet::new();
    let mut seen_samples: BTreeSet<String> = BTreeSet::new();
    let mut series: BTreeSet<(String, Vec<(String, String)>)> = BTreeSet::new();
    let mut samples = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let err = |e: String| format!("line {}: {e}: {line:?}", n + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.trim_start().splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                (Some("TYPE"), Some(name), Some(kind)) => {
                    if !valid_metric_name(name) {
                        return Err(err("bad metric name".into()));
                    }
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                        return Err(err(format!("unknown type {kind}")));
                    }
                    if seen_samples.contains(name) {
                        return Err(err("TYPE after its samples".into()));
                    }
                    if types.insert(name.to_string(), kind.to_string()).is_some() {
                        return Err(err("TYPE twice".into()));
                    }
                }
                (Some("HELP"), Some(name), _) => {
                    if !valid_metric_name(name) {
                        return Err(err("bad metric name".into()));
                    }
                    if !helps.insert(name.to_string()) {
                        return Err(err("HELP twice".into()));
                    }
                }
                (Some("TYPE"), ..) => return Err(err("incomplete TYPE".into())),
                _ => {} // a plain comment
            }
            continue;
        }
        let (name_labels, value) = line
            .rsplit_once(' ')
            .ok_or_else(|| err("no value".into()))?;
        let (name, labels) = match name_labels.split_once('{') {
            Some((name, rest)) => {
                let inner = rest
                    .strip_suffix('}')
                    .ok_or_else(|| err("labels not closed".into()))?;
                (name, parse_labels(inner).map_err(err)?)
            }
            None => (name_labels, BTreeMap::new()),
        };
        if !valid_metric_name(name) {
            return Err(err("bad metric name".into()));
        }
        match types.get(name).map(String::as_str) {
            Some("counter" | "gauge" | "untyped") | None => {}
            Some(kind) => return Err(err(format!("a bare sample of a {kind}"))),
        }
        let value = parse_value(value).map_err(err)?;
        if types.get(name).is_some_and(|k| k == "counter") && (value.is_nan() || value < 0.0) {
            return Err(err("a negative or NaN counter".into()));
        }
        let key = (
            name.to_string(),
            labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        );
        if !series.insert(key) {
            return Err(err("the same series twice".into()));
        }
        seen_samples.insert(name.to_string());
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    Ok(samples)
}

#[test]
fn the_strict_parser_refuses_what_prometheus_refuses() {
    let ok = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\",y=\"q\\\"\"} 2\nb 1.5\n";
    let s = parse_prometheus(ok).unwrap();
    assert_eq!(s[0].labels["y"], "q\"");
    assert_eq!(s[1].value, 1.5);
    for bad in [
        "a 1",                                  // no final newline
        "a{x=\"1\"} one\n",                     // value
        "1a 1\n",                               // name
        "a{x=1} 1\n",                           // unquoted label
        "a{x=\"1\" 1\n",                        // unclosed labels
        "a 1\n# TYPE a gauge\n",                // TYPE after samples
        "# TYPE a counter\n# TYPE a counter\n", // TYPE twice
        "a{x=\"1\"} 1\na{x=\"1\"} 2\n",         // series twice
        "# TYPE a counter\na -1\n",             // negative counter
        "# TYPE a histogram\na 1\n",            // bare histogram sample
        "a{x=\"1\",x=\"2\"} 1\n",               // label twice
    ] {
        assert!(parse_prometheus(bad).is_err(), "accepted {bad:?}");
    }
}

/// The value of the one sample `name{labels}`; panics with the whole text if absent.
fn value_of(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let want: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    samples
        .iter()
        .find(|s| s.name == name && s.labels == want)
        .map(|s| s.value)
        .unwrap_or_else(|| panic!("no sample {name}{labels:?} in {samples:#?}"))
}

/// `name`'s samples as label-set -> value.
fn family(samples: &[Sample], name: &str) -> BTreeMap<BTreeMap<String, String>, f64> {
    samples
        .iter()
        .filter(|s| s.name == name)
        .map(|s| (s.labels.clone(), s.value))
        .collect()
}

// ---------------------------------------------------------------------------------------
// In process: serve() with a view the test drives

fn member(role: Role, health: Health, epoch: Option<u64>) -> MemberRecord {
    MemberRecord::bare(
        NodeRecord {
            node_id: "n1".into(),
            host: "127.0.0.1".into(),
            pid: std::process::id(),
            incarnation: "0123456789abcdef".into(),
            epoch,
            since: Some("2025-01-01T00:00:00.000Z".into()),
            ..Default::default()
        },
        role,
        health,
    )
}

/// `serve` running on a loopback port in its own runtime; aborted on drop.
struct Face {
    addr: SocketAddr,
    view: watch::Sender<NodeView>,
    metrics: Metrics,
    task: tokio::task::JoinHandle<()>,
    /// Keeps the server's runtime alive; dropped last.
    _rt: tokio::runtime::Runtime,
}

impl Face {
    fn start(first: NodeView) -> Face {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(api::bind("127.0.0.1:0".parse().unwrap()))
            .unwrap();
        let addr = listener.local_addr();
        assert_ne!(addr.port(), 0, "local_addr names the bound port");
        let (view, rx) = watch::channel(first);
        let metrics = Metrics::new();
        let task = rt.spawn(api::serve(listener, rx, metrics.clone()));
        Face {
            addr,
            view,
            metrics,
            task,
            _rt: rt,
        }
    }

    fn set(&self, v: NodeView) {
        self.view.send_replace(v);
    }
}

impl Drop for Face {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[test]
fn active_answers_200_only_while_active_with_the_service_promoted() {
    let face = Face::start(NodeView::new(
        member(Role::Ineligible, Health::Unknown, None),
        false,
    ));
    let r = get(face.addr, "/active");
    assert_eq!(
        (r.status, r.body.as_str()),
        (503, "not active: ineligible\n")
    );
    assert_eq!(r.header("cache-control"), Some("no-store"));

    face.set(NodeView::new(
        member(Role::Standby, Health::Healthy, None),
        false,
    ));
    assert_eq!(get(face.addr, "/active").body, "not active: standby\n");

    face.set(NodeView::new(
        member(Role::Promoting, Health::Healthy, Some(4)),
        false,
    ));
    assert_eq!(get(face.addr, "/active").status, 503);
    // The service started but the role is still promoting: not yet.
    face.set(NodeView::new(
        member(Role::Promoting, Health::Healthy, Some(4)),
        true,
    ));
    assert_eq!(get(face.addr, "/active").status, 503);

    face.set(NodeView::new(
        member(Role::Active, Health::Healthy, Some(4)),
        true,
    ));
    let r = get(face.addr, "/active");
    assert_eq!((r.status, r.body.as_str()), (200, "active\n"));
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    // HEAD for checkers that ask only for the status.
    let head = request(face.addr, "HEAD", "/active").unwrap();
    assert_eq!((head.status, head.body.as_str()), (200, ""));

    // Active but the service is down (a paused cluster): no traffic.
    face.set(NodeView::new(
        member(Role::Active, Health::Healthy, Some(4)),
        false,
    ));
    let r = get(face.addr, "/active");
    assert_eq!(
        (r.status, r.body.as_str()),
        (503, "not active: active, service not running\n")
    );

    for role in [Role::Neutral, Role::Demoting, Role::Fencing] {
        face.set(NodeView::new(member(role, Health::Healthy, Some(4)), true));
        let r = get(face.addr, "/active");
        assert_eq!((r.status, r.body), (503, format!("not active: {role}\n")));
    }
}

#[test]
fn standby_answers_200_only_while_a_healthy_standby() {
    let face = Face::start(NodeView::new(
        member(Role::Standby, Health::Healthy, None),
        false,
    ));
    let r = get(face.addr, "/standby");
    assert_eq!((r.status, r.body.as_str()), (200, "standby\n"));
    face.set(NodeView::new(
        member(Role::Standby, Health::Unhealthy, None),
        false,
    ));
    let r = get(face.addr, "/standby");
    assert_eq!(
        (r.status, r.body.as_str()),
        (503, "not standby: standby, unhealthy\n")
    );
    face.set(NodeView::new(
        member(Role::Active, Health::Healthy, Some(2)),
        true,
    ));
    let r = get(face.addr, "/standby");
    assert_eq!(
        (r.status, r.body.as_str()),
        (503, "not standby: active, healthy\n")
    );
    face.set(NodeView::new(
        member(Role::Ineligible, Health::Healthy, None),
        false,
    ));
    assert_eq!(get(face.addr, "/standby").status, 503);
}

#[test]
fn status_serves_the_member_record_as_json() {
    let m = member(Role::Active, Health::Healthy, Some(9));
    let face = Face::start(NodeView::new(m.clone(), true));
    let r = get(face.addr, "/status");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let json: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(json["node_id"], "n1");
    assert_eq!(json["role"], "active");
    assert_eq!(json["health"], "healthy");
    assert_eq!(json["epoch"], 9);
    let back: MemberRecord = serde_json::from_str(&r.body).unwrap();
    assert_eq!(back, m);

    let m2 = member(Role::Demoting, Health::Unhealthy, Some(9));
    face.set(NodeView::new(m2.clone(), false));
    let back: MemberRecord = serde_json::from_str(&get(face.addr, "/status").body).unwrap();
    assert_eq!(back, m2);
}

#[test]
fn metrics_parse_as_prometheus_text_and_count_what_was_recorded() {
    let face = Face::start(NodeView::new(
        member(Role::Standby, Health::Healthy, None),
        false,
    ));
    let m = &face.metrics;
    let t0 = Instant::now();
    m.set_connected(true);
    m.transition(Role::Ineligible, Role::Standby, t0);
    m.transition(Role::Standby, Role::Fencing, t0 + Duration::from_millis(10));
    m.fence_attempt("script:fence-recorder.sh", "failed");
    m.fence_attempt("signal", "fenced");
    m.transition(
        Role::Fencing,
        Role::Promoting,
        t0 + Duration::from_millis(800),
    );
    m.set_epoch(Some(12));
    m.transition(
        Role::Promoting,
        Role::Active,
        t0 + Duration::from_millis(1510),
    );
    for pass in [true, true, true, false] {
        m.health_check(pass);
    }

    let r = get(face.addr, "/metrics");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let s = parse_prometheus(&r.body).unwrap_or_else(|e| panic!("{e}\n{}", r.body));
    for role in Role::ALL {
        let want = if role == Role::Active { 1.0 } else { 0.0 };
        assert_eq!(
            value_of(&s, "warden_role", &[("role", role.as_str())]),
            want
        );
    }
    assert_eq!(value_of(&s, "warden_epoch", &[]), 12.0);
    assert_eq!(value_of(&s, "warden_coordination_connected", &[]), 1.0);
    assert_eq!(value_of(&s, "warden_last_failover_seconds", &[]), 1.5);
    let transitions = family(&s, "warden_transitions_total");
    assert_eq!(transitions.len(), 4, "{transitions:?}");
    for (from, to) in [
        ("ineligible", "standby"),
        ("standby", "fencing"),
        ("fencing", "promoting"),
        ("promoting", "active"),
    ] {
        assert_eq!(
            value_of(
                &s,
                "warden_transitions_total",
                &[("from", from), ("to", to)]
            ),
            1.0
        );
    }
    assert_eq!(
        value_of(
            &s,
            "warden_fence_attempts_total",
            &[
                ("method", "script:fence-recorder.sh"),
                ("outcome", "failed")
            ]
        ),
        1.0
    );
    assert_eq!(
        value_of(
            &s,
            "warden_fence_attempts_total",
            &[("method", "signal"), ("outcome", "fenced")]
        ),
        1.0
    );
    assert_eq!(
        value_of(&s, "warden_health_checks_total", &[("result", "pass")]),
        3.0
    );
    assert_eq!(
        value_of(&s, "warden_health_checks_total", &[("result", "fail")]),
        1.0
    );

    // Counters only grow, between scrapes too.
    m.transition(Role::Active, Role::Demoting, t0 + Duration::from_secs(5));
    m.set_connected(false);
    let s = parse_prometheus(&get(face.addr, "/metrics").body).unwrap();
    assert_eq!(
        value_of(
            &s,
            "warden_transitions_total",
            &[("from", "active"), ("to", "demoting")]
        ),
        1.0
    );
    assert_eq!(value_of(&s, "warden_role", &[("role", "demoting")]), 1.0);
    assert_eq!(value_of(&s, "warden_coordination_connected", &[]), 0.0);
}

#[test]
fn unknown_paths_are_404_and_other_methods_405() {
    let face = Face::start(NodeView::new(
        member(Role::Active, Health::Healthy, Some(1)),
        true,
    ));
    assert_eq!(get(face.addr, "/").status, 404);
    assert_eq!(get(face.addr, "/nope").status, 404);
    // A query string does not change the route.
    assert_eq!(get(face.addr, "/active?from=haproxy").status, 200);
    let r = request(face.addr, "POST", "/active").unwrap();
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD"));
}

#[test]
fn a_stalled_client_is_cut_off_and_does_not_hold_up_others() {
    let face = Face::start(NodeView::new(
        member(Role::Active, Health::Healthy, Some(1)),
        true,
    ));
    // Half a request, then silence: a slowloris client.
    let mut slow = TcpStream::connect_timeout(&face.addr, HTTP_TIMEOUT).unwrap();
    slow.write_all(b"GET /active HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    // Many idle connections that never send a byte.
    let idle: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect_timeout(&face.addr, HTTP_TIMEOUT).unwrap())
        .collect();
    // Others are answered meanwhile.
    let start = Instant::now();
    for _ in 0..5 {
        assert_eq!(get(face.addr, "/active").status, 200);
    }
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    // The stalled one is closed once its headers are overdue.
    slow.set_read_timeout(Some(api::CONNECTION_TIMEOUT + Duration::from_secs(5)))
        .unwrap();
    let mut rest = Vec::new();
    let start = Instant::now();
    let closed = slow.read_to_end(&mut rest);
    let took = start.elapsed();
    assert!(
        closed.is_ok()
            || closed
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the stalled connection was not closed: {closed:?}"
    );
    assert!(
        took <= api::HEADER_READ_TIMEOUT + Duration::from_secs(2),
        "closed only after {took:?}"
    );
    let answer = String::from_utf8_lossy(&rest);
    assert!(
        !answer.contains("200 OK"),
        "a partial request was answered: {answer}"
    );
    drop(idle);
}
// ---------------------------------------------------------------------------------------
// Floods (issue 11, point 4): connections that send nothing, half a request or one byte
// at a time must not keep a well-formed `GET /active` waiting, or a load balancer would
// mark a healthy active down.

/// What the issue asks of `GET /active` beside a flood.
const FLOOD_ANSWER_BOUND: Duration = Duration::from_secs(1);
/// How long a timed request waits for its answer, so a failure says how late it was.
const FLOOD_ANSWER_WAIT: Duration = Duration::from_secs(5);
/// Timed requests per flood: every one must be within the bound; the median is reported.
const FLOOD_TRIES: usize = 5;

/// Raises this process's soft limit of open files to `want` (within the hard limit): a
/// flood test holds both ends of its connections in this one process.
fn raise_open_files_limit(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read or write the struct they are given.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    assert_eq!(got, 0, "getrlimit: {}", std::io::Error::last_os_error());
    if lim.rlim_cur >= want {
        return;
    }
    assert!(
        lim.rlim_max >= want,
        "this test needs {want} open files; the hard limit is {}",
        lim.rlim_max
    );
    lim.rlim_cur = want;
    // SAFETY: as above.
    let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    assert_eq!(set, 0, "setrlimit: {}", std::io::Error::last_os_error());
}

/// `n` connections to `addr` that each send `first` (perhaps nothing) and then nothing more.
fn flood(addr: SocketAddr, n: usize, first: &[u8]) -> Vec<TcpStream> {
    (0..n)
        .map(|i| {
            let mut s = TcpStream::connect_timeout(&addr, HTTP_TIMEOUT)
                .unwrap_or_else(|e| panic!("flood connection {i} of {n} to {addr}: {e}"));
            // A failed write means the server has already closed this one: still a flood.
            let _ = s.write_all(first);
            s
        })
        .collect()
}

/// The time from connecting to the end of a 200 answer to `GET /active`.
fn timed_active(addr: SocketAddr) -> Result<Duration, String> {
    let start = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, FLOOD_ANSWER_WAIT)
        .map_err(|e| format!("connect: {e} after {:?}", start.elapsed()))?;
    let left = FLOOD_ANSWER_WAIT.saturating_sub(start.elapsed()).max(ms(1));
    s.set_read_timeout(Some(left))
        .and_then(|()| s.set_write_timeout(Some(left)))
        .map_err(|e| e.to_string())?;
    s.write_all(b"GET /active HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("send: {e} after {:?}", start.elapsed()))?;
    let mut reply = Vec::new();
    s.read_to_end(&mut reply)
        .map_err(|e| format!("no answer: {e} after {:?}", start.elapsed()))?;
    let took = start.elapsed();
    let reply = String::from_utf8_lossy(&reply);
    if !reply.starts_with("HTTP/1.1 200") {
        return Err(format!("after {took:?}, not a 200: {reply:?}"));
    }
    Ok(took)
}

/// Times [`FLOOD_TRIES`] requests for `GET /active` one after another; each must be
/// answered within [`FLOOD_ANSWER_BOUND`]. Prints the times for the record.
fn assert_active_answers_promptly(addr: SocketAddr, beside: &str) {
    let mut took: Vec<Duration> = (0..FLOOD_TRIES)
        .map(|i| timed_active(addr).unwrap_or_else(|e| panic!("beside {beside}, try {i}: {e}")))
        .collect();
    took.sort();
    let median = took[took.len() / 2];
    eprintln!("beside {beside}: GET /active answered in {took:?}, median {median:?}");
    assert!(
        took.iter().all(|t| *t <= FLOOD_ANSWER_BOUND),
        "beside {beside}, GET /active took {took:?}: more than {FLOOD_ANSWER_BOUND:?}"
    );
}

fn active_face() -> Face {
    Face::start(NodeView::new(
        member(Role::Active, Health::Healthy, Some(1)),
        true,
    ))
}

#[test]
fn active_answers_within_a_second_beside_1000_idle_connections() {
    raise_open_files_limit(4096);
    let face = active_face();
    let idle = flood(face.addr, 1000, b"");
    assert_active_answers_promptly(face.addr, "1000 idle connections");
    drop(idle);
}

#[test]
fn active_answers_within_a_second_beside_200_stalled_half_requests() {
    raise_open_files_limit(4096);
    let face = active_face();
    let stalled = flood(face.addr, 200, b"GET /act");
    assert_active_answers_promptly(face.addr, "200 connections stalled in their request line");
    drop(stalled);
}

#[test]
fn a_client_dribbling_its_headers_is_cut_off_at_the_header_deadline() {
    use std::io::ErrorKind;
    let face = active_face();
    let mut s = TcpStream::connect_timeout(&face.addr, HTTP_TIMEOUT).unwrap();
    let start = Instant::now();
    s.write_all(b"GET /active HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .unwrap();
    // One more header byte every 100ms: each wait for the server's answer paces the next.
    s.set_read_timeout(Some(ms(100))).unwrap();
    let give_up = api::HEADER_READ_TIMEOUT + secs(3);
    let mut dribbled = 0;
    let mut answer = Vec::new();
    let cut_after = loop {
        assert!(
            start.elapsed() < give_up,
            "still connected after {:?} and {dribbled} dribbled bytes",
            start.elapsed()
        );
        let mut buf = [0u8; 512];
        match s.read(&mut buf) {
            Ok(0) => break start.elapsed(),
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                // Fails only once the server has closed; the next read then says so.
                if s.write_all(b"a").is_ok() {
                    dribbled += 1;
                }
            }
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break start.elapsed(),
            Err(e) => panic!("reading the dribbling connection: {e}"),
        }
    };
    eprintln!(
        "a header dribbled a byte per 100ms was cut off after {cut_after:?} ({dribbled} bytes)"
    );
    // Dribbling does not extend the deadline, and the deadline is not shorter than stated.
    assert!(
        cut_after >= api::HEADER_READ_TIMEOUT.saturating_sub(ms(100))
            && cut_after <= api::HEADER_READ_TIMEOUT + secs(1),
        "cut off after {cut_after:?}, the header deadline is {:?}",
        api::HEADER_READ_TIMEOUT
    );
    assert!(
        dribbled >= 5,
        "only {dribbled} bytes dribbled before the cut"
    );
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        !answer.contains(" 200 "),
        "a dribbled request was answered: {answer}"
    );
}

/// Whether the server closes `s` within `wait`; it sends nothing on the connections this
/// asks about, so any read that returns is the close.
fn closed_within(s: &TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait.max(ms(1)))).unwrap();
    let mut buf = [0u8; 64];
    match (&*s).read(&mut buf) {
        Ok(0) => true,
        Ok(n) => panic!("the server sent {:?}", String::from_utf8_lossy(&buf[..n])),
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// One answer from a kept-alive connection: the head, then `Content-Length` body bytes.
fn read_reply(r: &mut BufReader<&TcpStream>) -> Result<(u16, String), String> {
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        match r.read_line(&mut line) {
            Ok(0) => return Err(format!("closed after {head:?}")),
            Ok(_) if line == "\r\n" => break,
            Ok(_) => head.push(line.trim_end().to_string()),
            Err(e) => return Err(format!("{e} after {head:?}")),
        }
    }
    let status = head
        .first()
        .and_then(|l| l.strip_prefix("HTTP/1.1 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("bad status line in {head:?}"))?;
    let len: usize = head
        .iter()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .ok_or_else(|| format!("no content-length in {head:?}"))?;
    let mut body = vec![0; len];
    r.read_exact(&mut body)
        .map_err(|e| format!("{e} reading a {len}-byte body"))?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

#[test]
fn at_the_limit_a_new_client_is_served_and_the_longest_idle_connection_closed() {
    raise_open_files_limit(4096);
    let face = active_face();
    let idle = flood(face.addr, api::MAX_CONNECTIONS, b"");
    let flooded = Instant::now();
    // Every slot is taken: the request is accepted at once and one idle connection closed
    // for it, rather than the request waiting until some header deadline frees a slot.
    let took = timed_active(face.addr).unwrap();
    assert!(took <= FLOOD_ANSWER_BOUND, "answered after {took:?}");
    assert!(
        closed_within(&idle[0], FLOOD_ANSWER_WAIT),
        "the longest idle connection is still open"
    );
    // Only that one: the next oldest is open until its own header deadline.
    if flooded.elapsed() < api::HEADER_READ_TIMEOUT / 2 {
        assert!(
            !closed_within(&idle[1], ms(1)),
            "the second idle connection was closed too"
        );
    }
    drop(idle);
}

#[test]
fn a_kept_alive_client_outlives_idle_connections_at_the_limit_then_is_closed_when_idle() {
    raise_open_files_limit(4096);
    let face = active_face();
    let kept = TcpStream::connect_timeout(&face.addr, HTTP_TIMEOUT).unwrap();
    kept.set_write_timeout(Some(HTTP_TIMEOUT)).unwrap();
    let mut replies = BufReader::new(&kept);
    let ask = b"GET /active HTTP/1.1\r\nHost: x\r\n\r\n";
    let start = Instant::now();
    (&kept).write_all(ask).unwrap();
    kept.set_read_timeout(Some(HTTP_TIMEOUT)).unwrap();
    assert_eq!(read_reply(&mut replies), Ok((200, "active\n".to_string())));

    // More idle connections than there are slots: each new one closes an idle one, the
    // oldest first, but never the older connection that has sent a request.
    let idle = flood(face.addr, api::MAX_CONNECTIONS + 10, b"");
    assert!(
        closed_within(&idle[0], FLOOD_ANSWER_WAIT),
        "no idle connection was closed at the limit"
    );
    kept.set_read_timeout(Some(HTTP_TIMEOUT)).unwrap();
    (&kept).write_all(ask).unwrap();
    assert_eq!(
        read_reply(&mut replies),
        Ok((200, "active\n".to_string())),
        "the second request, {:?} after the first",
        start.elapsed()
    );

    // Idle after its answer, it is closed at the keep-alive idle limit.
    let answered = Instant::now();
    assert!(
        closed_within(&kept, api::HEADER_READ_TIMEOUT + secs(1)),
        "a kept-alive connection idle for {:?} is still open",
        answered.elapsed()
    );
    let idle_for = answered.elapsed();
    assert!(
        idle_for >= api::HEADER_READ_TIMEOUT.saturating_sub(ms(100)),
        "closed after only {idle_for:?} idle"
    );
    drop(idle);
}

#[test]
fn a_request_head_over_the_limit_is_refused() {
    let face = active_face();
    let mut s = TcpStream::connect_timeout(&face.addr, HTTP_TIMEOUT).unwrap();
    s.set_read_timeout(Some(HTTP_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(HTTP_TIMEOUT)).unwrap();
    let big = "a".repeat(api::MAX_HEAD_BYTES);
    // The server may close before reading it all; what it answers is what counts.
    let _ = write!(s, "GET /active HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n");
    let mut reply = Vec::new();
    let read = s.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply);
    assert!(
        reply.starts_with("HTTP/1.1 431")
            || (reply.is_empty()
                && read.is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset)),
        "{reply:?}"
    );
    // The connection's end is its own: others are served.
    assert_eq!(get(face.addr, "/active").status, 200);
}

#[test]
fn aborting_serve_closes_the_port() {
    let face = Face::start(NodeView::new(
        member(Role::Standby, Health::Healthy, None),
        false,
    ));
    assert_eq!(get(face.addr, "/standby").status, 200);
    face.task.abort();
    wait_until(secs(5), "the aborted server stops accepting", || {
        TcpStream::connect_timeout(&face.addr, Duration::from_millis(200)).is_err()
    });
}

#[test]
fn binding_a_taken_port_names_the_address_and_the_config_key() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let err = rt.block_on(api::bind(addr)).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("cannot listen on {addr}: address in use")),
        "{err}"
    );
    assert!(err.ends_with("(api.listen)"), "{err}");
}

// ---------------------------------------------------------------------------------------
// End to end: warden run with [api]

fn api_extra(port: u16) -> String {
    // JSON logs: the test reads transitions and fence attempts from their fields.
    format!("[api]\nlisten = \"127.0.0.1:{port}\"\n\n[log]\nformat = \"json\"\n")
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// The JSON log lines of a warden, as `fields` objects.
fn log_fields(w: &Warden) -> Vec<serde_json::Value> {
    w.log()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| v["fields"].clone())
        .collect()
}

/// (from, to) -> count of the transitions this warden logged.
fn logged_transitions(w: &Warden) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for f in log_fields(w) {
        let msg = f["message"].as_str().unwrap_or_default();
        if let (true, Some(from), Some(to)) = (
            msg.starts_with("transition"),
            f["from"].as_str(),
            f["to"].as_str(),
        ) {
            *out.entry((from.to_string(), to.to_string())).or_insert(0.0) += 1.0;
        }
    }
    out
}

/// (method, outcome) -> count of the fence attempts this warden logged.
fn logged_fence_attempts(w: &Warden) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for f in log_fields(w) {
        let msg = f["message"].as_str().unwrap_or_default();
        if let (true, Some(method), Some(outcome)) = (
            msg.starts_with("fence"),
            f["method"].as_str(),
            f["outcome"].as_str(),
        ) {
            *out.entry((method.to_string(), outcome.to_string()))
                .or_insert(0.0) += 1.0;
        }
    }
    out
}

fn pairs(
    fam: &BTreeMap<BTreeMap<String, String>, f64>,
    a: &str,
    b: &str,
) -> BTreeMap<(String, String), f64> {
    fam.iter()
        .filter(|(_, v)| **v > 0.0)
        .map(|(labels, v)| ((labels[a].clone(), labels[b].clone()), *v))
        .collect()
}

/// Polls `/active` on every address until stopped; returns every round of answers.
struct ActiveWatcher {
    stop: Arc<AtomicBool>,
    rounds: Arc<Mutex<Vec<Vec<Option<u16>>>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ActiveWatcher {
    fn start(addrs: Vec<SocketAddr>) -> ActiveWatcher {
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(Mutex::new(Vec::new()));
        let (s, r) = (stop.clone(), rounds.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let round = addrs.iter().map(|a| try_status(*a, "/active")).collect();
                r.lock().unwrap().push(round);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        ActiveWatcher {
            stop,
            rounds,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> Vec<Vec<Option<u16>>> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        std::mem::take(&mut *self.rounds.lock().unwrap())
    }
}

/// Issue 5, "Show it works" 4: `/active` answers 200 only on the active and 503 on the
/// standby, through a failover (kill -9 of the active's warden, the standby fences and
/// promotes); the restarted node answers as a standby; the new active's `/metrics` parses
/// as Prometheus text and its counters match the transitions and fence attempts it logged.
#[test]
fn active_answers_only_on_the_active_through_a_failover_and_metrics_match_the_log() {
    let zk = ZkServer::start();
    let cluster = Cluster::new(&zk);
    let (p1, p2) = (free_port(), free_port());
    let (a1, a2) = (loopback(p1), loopback(p2));
    let n1 = cluster.node_with(
        "n1",
        NodeOptions {
            extra: api_extra(p1),
            ..Default::default()
        },
    );
    let n2 = cluster.node_with(
        "n2",
        NodeOptions {
            extra: api_extra(p2),
            ..Default::default()
        },
    );
    let mut wardens = start_active_then_standbys(&n1, &[&n2]);

    wait_until(
        secs(10),
        "n1 answers /active 200 and n2 /standby 200",
        || try_status(a1, "/active") == Some(200) && try_status(a2, "/standby") == Some(200),
    );
    let r = get(a2, "/active");
    assert_eq!((r.status, r.body.as_str()), (503, "not active: standby\n"));
    let r = get(a1, "/standby");
    assert_eq!(
        (r.status, r.body.as_str()),
        (503, "not standby: active, healthy\n")
    );
    for (addr, id, role) in [(a1, "n1", "active"), (a2, "n2", "standby")] {
        let s: serde_json::Value = serde_json::from_str(&get(addr, "/status").body).unwrap();
        assert_eq!(s["node_id"], id, "{s:#}");
        assert_eq!(s["role"], role, "{s:#}");
        assert_eq!(s["health"], "healthy", "{s:#}");
    }
    let n1_epoch = json_u64(
        &serde_json::from_str::<serde_json::Value>(&get(a1, "/status").body).unwrap()["epoch"],
    )
    .expect("the active's /status has its epoch");

    // The failover, watched from outside as a load balancer would.
    let watcher = ActiveWatcher::start(vec![a1, a2]);
    wardens[0].kill9();
    wait_until(secs(30), "n2 answers /active with 200", || {
        try_status(a2, "/active") == Some(200)
    });
    let rounds = watcher.finish();
    for round in &rounds {
        assert!(
            round.iter().filter(|s| **s == Some(200)).count() <= 1,
            "two nodes answered /active 200 at once: {round:?}"
        );
    }
    assert!(
        rounds.iter().any(|r| r[1] == Some(503)),
        "n2 answered 503 before it took over: {rounds:?}"
    );
    assert_eq!(
        try_status(a1, "/active"),
        None,
        "the killed node still answers"
    );
    assert_eq!(get(a2, "/standby").status, 503);
    let s2: serde_json::Value = serde_json::from_str(&get(a2, "/status").body).unwrap();
    assert_eq!(s2["role"], "active", "{s2:#}");
    let n2_epoch = json_u64(&s2["epoch"]).expect("the new active's /status has its epoch");
    assert!(n2_epoch > n1_epoch, "epoch {n2_epoch} after {n1_epoch}");

    // n1 comes back as a standby: /standby 200, /active 503.
    drop(wardens.remove(0));
    let w1 = n1.start();
    wait_until(secs(30), "the restarted n1 answers /standby 200", || {
        try_status(a1, "/standby") == Some(200)
    });
    assert_eq!(get(a1, "/active").status, 503);
    assert_eq!(get(a2, "/active").status, 200);

    // n2's metrics against n2's log.
    let w2 = &wardens[0];
    let deadline = Instant::now() + secs(10);
    loop {
        let text = get(a2, "/metrics").body;
        let s = parse_prometheus(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let metric_transitions = pairs(&family(&s, "warden_transitions_total"), "from", "to");
        let metric_fences = pairs(
            &family(&s, "warden_fence_attempts_total"),
            "method",
            "outcome",
        );
        let log_transitions = logged_transitions(w2);
        let log_fences = logged_fence_attempts(w2);
        if metric_transitions == log_transitions && metric_fences == log_fences {
            for role in Role::ALL {
                let want = if role == Role::Active { 1.0 } else { 0.0 };
                assert_eq!(
                    value_of(&s, "warden_role", &[("role", role.as_str())]),
                    want
                );
            }
            assert_eq!(value_of(&s, "warden_epoch", &[]), n2_epoch as f64);
            assert_eq!(value_of(&s, "warden_coordination_connected", &[]), 1.0);
            let took = value_of(&s, "warden_last_failover_seconds", &[]);
            assert!(took > 0.0 && took < 30.0, "last failover {took}s");
            for result in ["pass", "fail"] {
                value_of(&s, "warden_health_checks_total", &[("result", result)]);
            }
            // The failover went through fencing: the recorder script failed, then signal.
            let recorder = cluster
                .fence_calls()
                .iter()
                .filter(|l| l.starts_with("n2 "))
                .count();
            assert!(
                recorder >= 1,
                "n2 never fenced: {:?}",
                cluster.fence_calls()
            );
            assert_eq!(
                metric_fences
                    .get(&("script:fence-recorder.sh".to_string(), "failed".to_string()))
                    .copied(),
                Some(recorder as f64),
                "{metric_fences:?}"
            );
            assert!(
                metric_fences.keys().any(|(m, _)| m == "signal"),
                "{metric_fences:?}"
            );
            assert!(
                metric_transitions
                    .keys()
                    .any(|(f, t)| f == "standby" && (t == "fencing" || t == "promoting")),
                "{metric_transitions:?}"
            );
            assert!(
                metric_transitions.keys().any(|(_, t)| t == "active"),
                "{metric_transitions:?}"
            );
            break;
        }
        if Instant::now() >= deadline {
            dump_logs();
            panic!(
                "n2's metrics do not match its log\ntransitions: metrics {metric_transitions:?}\n\
                 log {log_transitions:?}\nfence attempts: metrics {metric_fences:?}\n\
                 log {log_fences:?}\n{text}"
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(w1);
    cluster.assert_safe();
}

/// A taken `api.listen` port is a start-up error (exit 2) that names the address and the
/// key, before warden joins any election.
#[test]
fn warden_run_exits_2_when_the_api_port_is_taken() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    // No ZooKeeper at all: the bind failure must come first.
    let cluster = Cluster::with_connect(&format!("127.0.0.1:{}", free_port()));
    let n1 = cluster.node_with(
        "n1",
        NodeOptions {
            extra: format!("[api]\nlisten = \"127.0.0.1:{port}\"\n"),
            ..Default::default()
        },
    );
    let mut w = n1.start();
    let status = w.wait_exit(secs(10));
    assert_eq!(status.code(), Some(2), "{}", w.log());
    let log = w.log();
    assert!(
        log.contains(&format!(
            "cannot listen on 127.0.0.1:{port}: address in use"
        )) && log.contains("(api.listen)"),
        "{log}"
    );
    drop(taken);
}
