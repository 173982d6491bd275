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
//! this adds the fewest crates. Every connection is bounded: headers must arrive within
//! [`HEADER_READ_TIMEOUT`], the whole exchange ends by [`CONNECTION_TIMEOUT`], one request
//! per connection, and at most [`MAX_CONNECTIONS`] at once, so slow or idle clients cannot
//! pin memory or tasks.

use crate::metrics::{self, Metrics};
use crate::record::{self, Health, MemberRecord, Role};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// A client must send its request headers this soon after connecting. Load balancer
/// checks and Prometheus send them at once; 5s tolerates a loaded client host.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection is closed this long after it was accepted, whatever it is doing: every
/// answer is computed in microseconds, so only a client that does not read can take long.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more wait in the kernel's accept queue. A node has a few
/// load balancers and scrapers, not hundreds.
pub const MAX_CONNECTIONS: usize = 64;
/// Request head limit: our requests are one line and a few headers (hyper's minimum is 8 KiB).
const MAX_HEAD_BYTES: usize = 16 * 1024;
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
    let listener = TcpListener::bind(listen).await.map_err(bind_error)?;
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
/// and retried.
pub async fn serve(listener: ApiListener, view: watch::Receiver<NodeView>, metrics: Metrics) {
    tracing::info!(listen = %listener.addr, "HTTP api listening on {}", listener.addr);
    let mut conns: JoinSet<()> = JoinSet::new();
    let mut accept_failing = false;
    loop {
        // Reap finished connections; at the limit, wait for one to end before accepting.
        while conns.try_join_next().is_some() {}
        if conns.len() >= MAX_CONNECTIONS {
            conns.join_next().await;
            continue;
        }
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
        let view = view.clone();
        let metrics = metrics.clone();
        conns.spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let response = {
                    let current = view.borrow();
                    answer(req.method(), req.uri().path(), &current, &metrics)
                };
                async move { Ok::<_, Infallible>(response) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .keep_alive(false)
                .max_buf_size(MAX_HEAD_BYTES)
                .serve_connection(TokioIo::new(stream), service);
            // A client error or a timeout ends only that connection; nothing to report.
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT, conn).await;
        });
    }
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
            MemberRecord {
                node: NodeRecord {
                    node_id: "n1".into(),
                    epoch: Some(3),
                    ..Default::default()
                },
                role,
                health,
                session_timeout: None,
                containment: None,
            },
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
