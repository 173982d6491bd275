//! The HTTP face (SPEC §10): what load balancers and monitoring ask a node.
//!
//! | route | answer |
//! | --- | --- |
//! | `GET /active` | 200 `active` while this node is active with its service promoted, else 503 `not active: <role>` |
//! | `GET /standby` | 200 `standby` while this node is a healthy standby, else 503 `not standby: <role>, <health>` |
//! | `GET /status` | 200, this node's own member record as JSON (SPEC §3) |
//! | `GET /metrics` | 200, Prometheus text format 0.0.4 ([`crate::metrics`]) |
//!
//! `HEAD` is answered like `GET`; anything else is 405, an unknown path 404.
//!
//! The daemon publishes what it knows as a [`NodeView`] on a `tokio::sync::watch`
//! channel; each request reads the latest view, so the server never waits on the daemon
//! and a request never sees a half-updated state.
//!
//! hyper 1 with hyper-util's tokio glue, not axum: four fixed GET routes need no router,
//! extractors or middleware, and hyper is already the base of every Rust HTTP server, so
//! this adds the fewest crates.
//!
//! A load balancer marks this node down if its check goes unanswered, so no client may
//! keep another waiting (issue 11, 4). The server accepts without pause; a request head
//! must arrive within [`HEADER_READ_TIMEOUT`] of connecting or of the previous answer,
//! and within [`MAX_HEAD_BYTES`]; a connection ends by [`CONNECTION_TIMEOUT`]; and at
//! [`MAX_CONNECTIONS`] each new connection closes the one idle longest, preferring one that
//! has not sent a complete request yet. A flood of idle or stalled connections thus
//! costs a bounded number of tasks and buffers and delays a well-formed check by nothing.

use crate::metrics::{self, Metrics};
use crate::record::{self, Health, MemberRecord, Role};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::{self, AbortHandle, JoinSet};

/// A client must send a whole request head this soon after connecting, and a kept-alive
/// connection its next one this soon after the previous answer (so this is also the
/// keep-alive idle limit). Load balancer checks and Prometheus send theirs at once; 2s
/// tolerates a loaded client host, and frees the slot of a client that sends nothing or
/// dribbles (hyper's deadline does not move while bytes trickle in).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(2);
/// A connection is asked to close this long after it was accepted, whatever it is doing:
/// every answer is computed in microseconds, so only a client that does not read its
/// answer, or keeps one connection for many requests, gets this far.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Once asked to close, a connection may finish the answer it is writing for this long.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// Connections kept at once. At the limit a new connection is still accepted and the one
/// idle longest is closed for it (see [`serve`]). A node has a few load balancers and
/// scrapers; 256 keeps room for them beside a flood (a fresh check is closed only if 256
/// newer connections arrive before its request does), at a quarter of the usual soft
/// limit of 1024 open files.
pub const MAX_CONNECTIONS: usize = 256;
/// Request head limit: our requests are one line and a few headers (hyper's minimum is
/// 8 KiB); a longer head is refused with 431.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Connections the kernel completes before [`serve`] accepts them (capped by
/// `net.core.somaxconn`). tokio's default of 128 overflows under a burst of a few hundred
/// connections, and an overflowing queue drops SYNs, so a well-formed check would wait
/// for its SYN to be resent (1s, then 3s) before [`serve`] ever saw it.
const LISTEN_BACKLOG: u32 = 1024;
/// After a failed `accept` (out of file descriptors, say), wait this long before the next,
/// so the error does not spin the loop.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// What the daemon tells the HTTP face about this node; sent on every transition, health
/// change and service start or stop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    /// This node's own member record (role, health, epoch, identity): `/status` shows it,
    /// and its `role` and `health` decide `/active` and `/standby`.
    pub member: MemberRecord,
    /// Whether the service is promoted here: spawn mode, the service this node started is
    /// running; hooks mode, `promote` succeeded and no `demote` has begun.
    pub serving: bool,
}

impl NodeView {
    /// A view of `member`, serving or not.
    pub fn new(member: MemberRecord, serving: bool) -> NodeView {
        NodeView { member, serving }
    }

    /// `/active` answers 200: the role is `active` and the service is promoted. (A paused
    /// cluster can leave the active role without a running service.)
    pub fn is_active(&self) -> bool {
        self.member.role == Role::Active && self.serving
    }

    /// `/standby` answers 200: the role is `standby` and health is `healthy`.
    pub fn is_healthy_standby(&self) -> bool {
        self.member.role == Role::Standby && self.member.health == Health::Healthy
    }
}

/// Why the HTTP face could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    #[error("cannot listen on {addr}: {reason} (api.listen)")]
    Bind {
        addr: SocketAddr,
        reason: String,
        #[source]
        source: std::io::Error,
    },
}

/// A bound listening socket for [`serve`]; binding first lets start-up report a taken
/// port (exit 2) before the daemon joins the election.
#[derive(Debug)]
pub struct ApiListener {
    listener: TcpListener,
    addr: SocketAddr,
}

impl ApiListener {
    /// The bound address (with the real port when `api.listen` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Binds `listen` (`[api] listen`).
pub async fn bind(listen: SocketAddr) -> Result<ApiListener, ApiError> {
    let bind_error = |source: std::io::Error| ApiError::Bind {
        addr: listen,
        reason: bind_reason(&source),
        source,
    };
    let socket = if listen.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(bind_error)?;
    // As `TcpListener::bind` does: a restarted warden can take its port back at once.
    socket.set_reuseaddr(true).map_err(bind_error)?;
    socket.bind(listen).map_err(bind_error)?;
    let listener = socket.listen(LISTEN_BACKLOG).map_err(bind_error)?;
    let addr = listener.local_addr().map_err(bind_error)?;
    Ok(ApiListener { listener, addr })
}

fn bind_reason(e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::AddrInUse => {
            "address in use: another process listens there; stop it or choose another port"
                .to_string()
        }
        ErrorKind::AddrNotAvailable => {
            "no interface of this host has that address; use one it has, or 127.0.0.1".to_string()
        }
        ErrorKind::PermissionDenied => {
            "permission denied: ports below 1024 need root or CAP_NET_BIND_SERVICE; use a \
             higher port"
                .to_string()
        }
        _ => e.to_string(),
    }
}

/// Serves the HTTP face on `listener` until the task running it is aborted (which also
/// ends every connection it serves). Never returns otherwise: accept errors are logged
/// and retried. Accepts without pause: with [`MAX_CONNECTIONS`] open, each new connection
/// closes the one that has been idle longest ([`Idleness`]), so a new check never waits
/// behind idle clients in the kernel's queue.
pub async fn serve(listener: ApiListener, view: watch::Receiver<NodeView>, metrics: Metrics) {
    tracing::info!(listen = %listener.addr, "HTTP api listening on {}", listener.addr);
    let mut conns = Connections::default();
    let mut accept_failing = false;
    // Connections closed to make room since the limit was last reached; logged once per
    // episode, not once per connection, so a flood does not flood the journal too.
    let mut shed: Option<u64> = None;
    loop {
        let stream = match listener.listener.accept().await {
            Ok((stream, _peer)) => {
                accept_failing = false;
                stream
            }
            Err(e) => {
                if !accept_failing {
                    tracing::warn!(
                        "HTTP api on {}: cannot accept a connection: {e}; retrying (logged \
                         once until it works again)",
                        listener.addr
                    );
                    accept_failing = true;
                }
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        conns.reap();
        if conns.len() >= MAX_CONNECTIONS {
            conns.shed_one();
            if shed.is_none() {
                tracing::warn!(
                    max_connections = MAX_CONNECTIONS,
                    "HTTP api on {}: {MAX_CONNECTIONS} connections open; closing the one idle \
                     longest for each new one (a flood of idle clients?)",
                    listener.addr
                );
            }
            shed = Some(shed.unwrap_or(0) + 1);
        } else if let Some(n) = shed.take() {
            tracing::info!(
                shed = n,
                "HTTP api on {}: below {MAX_CONNECTIONS} connections again after closing {n} \
                 idle ones",
                listener.addr
            );
        }
        conns.open(stream, view.clone(), metrics.clone());
    }
}

/// The connections [`serve`] keeps, with what it needs to choose one to close.
#[derive(Default)]
struct Connections {
    tasks: JoinSet<()>,
    slots: HashMap<task::Id, Slot>,
}

/// One open connection.
struct Slot {
    accepted: Instant,
    last_request: Arc<LastRequest>,
    abort: AbortHandle,
}

impl Connections {
    fn len(&self) -> usize {
        self.slots.len()
    }

    /// Forgets connections that have ended.
    fn reap(&mut self) {
        while let Some(ended) = self.tasks.try_join_next_with_id() {
            let id = match ended {
                Ok((id, ())) => id,
                Err(e) => e.id(),
            };
            self.slots.remove(&id);
        }
    }

    /// Serves `stream` in a task of its own.
    fn open(&mut self, stream: TcpStream, view: watch::Receiver<NodeView>, metrics: Metrics) {
        let accepted = Instant::now();
        let last_request = Arc::new(LastRequest::new(accepted));
        let abort = self
            .tasks
            .spawn(connection(stream, view, metrics, Arc::clone(&last_request)));
        let slot = Slot {
            accepted,
            last_request,
            abort,
        };
        self.slots.insert(slot.abort.id(), slot);
    }

    /// Closes the connection idle longest (see [`Idleness`]); aborting its task drops the
    /// socket.
    fn shed_one(&mut self) {
        let victim = self
            .slots
            .iter()
            .min_by_key(|(_, slot)| Idleness::of(slot.accepted, slot.last_request.get()))
            .map(|(id, _)| *id);
        if let Some(slot) = victim.and_then(|id| self.slots.remove(&id)) {
            slot.abort.abort();
        }
    }
}

/// How a connection ranks for closing at the limit; the least is closed first. Ones that
/// have not sent a complete request come first (a flood of idle or stalled connections is
/// shed before a scraper between two requests), then the one idle longest: since it was
/// accepted, or since its last request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Idleness {
    has_requested: bool,
    idle_since: Instant,
}

impl Idleness {
    fn of(accepted: Instant, last_request: Option<Instant>) -> Idleness {
        Idleness {
            has_requested: last_request.is_some(),
            idle_since: last_request.unwrap_or(accepted),
        }
    }
}

/// When a connection last delivered a complete request head: written by its task, read by
/// the accept loop, so an atomic rather than a lock.
#[derive(Debug)]
struct LastRequest {
    accepted: Instant,
    /// Nanoseconds from `accepted` to the last request, plus one; 0 while there was none.
    nanos_plus_one: AtomicU64,
}

impl LastRequest {
    fn new(accepted: Instant) -> LastRequest {
        LastRequest {
            accepted,
            nanos_plus_one: AtomicU64::new(0),
        }
    }

    fn record(&self, now: Instant) {
        let nanos = u64::try_from(now.saturating_duration_since(self.accepted).as_nanos())
            .unwrap_or(u64::MAX - 1);
        self.nanos_plus_one
            .store(nanos.saturating_add(1), Ordering::Relaxed);
    }

    fn get(&self) -> Option<Instant> {
        match self.nanos_plus_one.load(Ordering::Relaxed) {
            0 => None,
            n => self.accepted.checked_add(Duration::from_nanos(n - 1)),
        }
    }
}

/// Serves one connection: requests while the client keeps it alive, each head within
/// [`HEADER_READ_TIMEOUT`], the whole connection within [`CONNECTION_TIMEOUT`] (plus
/// [`CLOSE_GRACE`] to finish an answer).
async fn connection(
    stream: TcpStream,
    view: watch::Receiver<NodeView>,
    metrics: Metrics,
    last_request: Arc<LastRequest>,
) {
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        last_request.record(Instant::now());
        let response = {
            let current = view.borrow();
            answer(req.method(), req.uri().path(), &current, &metrics)
        };
        async move { Ok::<_, Infallible>(response) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .keep_alive(true)
        .max_buf_size(MAX_HEAD_BYTES)
        .serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    // A client error or a timeout ends only that connection; nothing to report.
    if tokio::time::timeout(CONNECTION_TIMEOUT, conn.as_mut())
        .await
        .is_ok()
    {
        return;
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(CLOSE_GRACE, conn).await;
}

/// The answer to `method path` given the current view: no I/O, so it is tested directly.
fn answer(
    method: &Method,
    path: &str,
    view: &NodeView,
    metrics: &Metrics,
) -> Response<Full<Bytes>> {
    if method != Method::GET && method != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n".into());
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match path {
        "/active" if view.is_active() => text(StatusCode::OK, "active\n".into()),
        "/active" => {
            let why = if view.member.role == Role::Active {
                "active, service not running".to_string()
            } else {
                view.member.role.to_string()
            };
            text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not active: {why}\n"),
            )
        }
        "/standby" if view.is_healthy_standby() => text(StatusCode::OK, "standby\n".into()),
        "/standby" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not standby: {}, {}\n",
                view.member.role, view.member.health
            ),
        ),
        "/status" => {
            let mut body = record::to_bytes(&view.member);
            body.push(b'\n');
            with_type(StatusCode::OK, body, "application/json")
        }
        "/metrics" => with_type(
            StatusCode::OK,
            metrics.encode().into_bytes(),
            metrics::CONTENT_TYPE,
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found; try /active, /standby, /status or /metrics\n".into(),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    with_type(status, body.into_bytes(), "text/plain; charset=utf-8")
}

fn with_type(
    status: StatusCode,
    body: Vec<u8>,
    content_type: &'static str,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    // A cached /active answer would route traffic to a node that is no longer active.
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::NodeRecord;
    use http_body_util::BodyExt;

    fn view(role: Role, health: Health, serving: bool) -> NodeView {
        NodeView::new(
            MemberRecord::bare(
                NodeRecord {
                    node_id: "n1".into(),
                    epoch: Some(3),
                    ..Default::default()
                },
                role,
                health,
            ),
            serving,
        )
    }

    fn get(path: &str, v: &NodeView) -> (StatusCode, String) {
        let r = answer(&Method::GET, path, v, &Metrics::new());
        let status = r.status();
        let body = body_text(r.into_body());
        (status, body)
    }

    fn body_text(b: Full<Bytes>) -> String {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let bytes = rt.block_on(b.collect()).unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn active_only_while_active_and_serving() {
        for role in Role::ALL {
            for serving in [false, true] {
                let v = view(role, Health::Healthy, serving);
                let (status, body) = get("/active", &v);
                if role == Role::Active && serving {
                    assert_eq!((status, body.as_str()), (StatusCode::OK, "active\n"));
                } else {
                    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{role} {serving}");
                    assert!(body.starts_with("not active: "), "{body}");
                }
            }
        }
        let (_, body) = get("/active", &view(Role::Active, Health::Healthy, false));
        assert_eq!(body, "not active: active, service not running\n");
        let (_, body) = get("/active", &view(Role::Standby, Health::Healthy, false));
        assert_eq!(body, "not active: standby\n");
    }

    #[test]
    fn standby_only_while_a_healthy_standby() {
        for role in Role::ALL {
            for health in [Health::Unknown, Health::Healthy, Health::Unhealthy] {
                let (status, _) = get("/standby", &view(role, health, false));
                let ok = role == Role::Standby && health == Health::Healthy;
                assert_eq!(status == StatusCode::OK, ok, "{role} {health}");
            }
        }
        let (_, body) = get("/standby", &view(Role::Standby, Health::Unhealthy, false));
        assert_eq!(body, "not standby: standby, unhealthy\n");
    }

    #[test]
    fn status_is_the_member_record() {
        let v = view(Role::Active, Health::Healthy, true);
        let (status, body) = get("/status", &v);
        assert_eq!(status, StatusCode::OK);
        let back: MemberRecord = serde_json::from_str(&body).unwrap();
        assert_eq!(back, v.member);
    }

    #[test]
    fn other_methods_and_paths_are_refused() {
        let v = view(Role::Active, Health::Healthy, true);
        let r = answer(&Method::POST, "/active", &v, &Metrics::new());
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(r.headers()[ALLOW], "GET, HEAD");
        assert_eq!(get("/nope", &v).0, StatusCode::NOT_FOUND);
        assert_eq!(get("/active/", &v).0, StatusCode::NOT_FOUND);
    }

    #[test]
    fn shedding_closes_a_connection_that_never_asked_first_then_the_longest_idle() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut ranks = [
            ("asked recently", Idleness::of(at(0), Some(at(9_000)))),
            ("never asked, new", Idleness::of(at(5_000), None)),
            ("asked long ago", Idleness::of(at(100), Some(at(200)))),
            ("never asked, old", Idleness::of(at(1_000), None)),
        ];
        ranks.sort_by_key(|(_, rank)| *rank);
        let order: Vec<&str> = ranks.iter().map(|(name, _)| *name).collect();
        assert_eq!(
            order,
            [
                "never asked, old",
                "never asked, new",
                "asked long ago",
                "asked recently"
            ]
        );
    }

    #[test]
    fn last_request_is_none_until_recorded_then_the_latest() {
        let t0 = Instant::now();
        let last = LastRequest::new(t0);
        assert_eq!(last.get(), None);
        last.record(t0);
        assert_eq!(last.get(), Some(t0));
        last.record(t0 + Duration::from_millis(1500));
        assert_eq!(last.get(), Some(t0 + Duration::from_millis(1500)));
        // A clock read before the accept (another thread's) counts as the accept.
        last.record(t0.checked_sub(Duration::from_secs(1)).unwrap_or(t0));
        assert_eq!(last.get(), Some(t0));
    }

    #[tokio::test]
    async fn a_taken_port_is_a_clear_start_up_error() {
        let first = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let err = bind(first.local_addr()).await.unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!(
                "cannot listen on {}: address in use",
                first.local_addr()
            )),
            "{msg}"
        );
        assert!(msg.ends_with("(api.listen)"), "{msg}");
    }
}
