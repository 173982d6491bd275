//! A TCP forwarder between one warden and its MySQL store, that a test can cut off as a
//! network partition does: [`TcpProxy::cut`] stops forwarding both ways on every
//! connection (and on new ones) without closing anything, [`TcpProxy::heal`] forwards
//! again what waited; [`TcpProxy::blackhole_after`] does the same for good to the one
//! connection that sends a statement the test names, right after the server got it (its
//! answer is dropped), as when a holder vanishes between an `UPDATE` and its `COMMIT`.
//!
//! It reads the MySQL protocol only as far as it must to see statements: a `COM_QUERY`'s
//! text, and a `COM_STMT_EXECUTE` of a statement whose `COM_STMT_PREPARE` text matched
//! (mysql_async prepares each statement once per connection and then sends only its id).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Which statements [`TcpProxy::blackhole_after`] waits for.
type Matcher = Box<dyn Fn(&str) -> bool + Send + Sync>;

struct Shared {
    /// Every connection stops forwarding while this is true.
    cut: watch::Sender<bool>,
    /// Counted up by [`TcpProxy::reset`]: every connection open then is closed.
    resets: watch::Sender<u64>,
    /// Armed by `blackhole_after`, consumed by the first statement it matches.
    matcher: Mutex<Option<Matcher>>,
    /// The statements that blackholed a connection, in order.
    blackholed: Mutex<Vec<String>>,
    /// Whether MariaDB's executable comments are turned into plain ones.
    as_mysql: std::sync::atomic::AtomicBool,
}

/// One connection's protocol state: what its pumps need to see statements.
#[derive(Default)]
struct ConnState {
    /// The text of a `COM_STMT_PREPARE` awaiting the server's answer (its statement id).
    pending_prepare: Option<String>,
    /// The text of each statement prepared on this connection, by id.
    prepared: HashMap<u32, String>,
}

/// A running forwarder to `127.0.0.1:target`.
pub struct TcpProxy {
    port: u16,
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl TcpProxy {
    /// Listens on a free loopback port and forwards each connection to `target`.
    pub fn start(target: u16) -> TcpProxy {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a tokio runtime for the proxy");
        let (cut, _) = watch::channel(false);
        let (resets, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            cut,
            resets,
            matcher: Mutex::new(None),
            blackholed: Mutex::new(Vec::new()),
            as_mysql: std::sync::atomic::AtomicBool::new(false),
        });
        let listener = runtime
            .block_on(TcpListener::bind(("127.0.0.1", 0)))
            .expect("bind the proxy's port");
        let port = listener.local_addr().expect("its address").port();
        let s = shared.clone();
        runtime.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let s = s.clone();
                tokio::spawn(async move {
                    let target: SocketAddr = ([127, 0, 0, 1], target).into();
                    if let Ok(server) = TcpStream::connect(target).await {
                        forward(client, server, s).await;
                    }
                });
            }
        });
        TcpProxy {
            port,
            shared,
            runtime: Some(runtime),
        }
    }

    /// The port to give the client instead of the server's.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops forwarding, both ways, on every connection, new ones included; nothing is
    /// closed: the peers see a partition.
    pub fn cut(&self) {
        self.shared.cut.send_replace(true);
    }

    /// Forwards again, starting with what waited.
    pub fn heal(&self) {
        self.shared.cut.send_replace(false);
    }

    /// Closes every connection open now, both ways (new ones are forwarded as before):
    /// the client sees its link drop and makes it again, within its session.
    pub fn reset(&self) {
        self.shared.resets.send_modify(|n| *n += 1);
    }

    /// The next statement (on any connection) whose text `matches` reaches the server,
    /// and then that connection forwards nothing more, either way, and stays open.
    pub fn blackhole_after(&self, matches: impl Fn(&str) -> bool + Send + Sync + 'static) {
        *self.shared.matcher.lock().unwrap() = Some(Box::new(matches));
    }

    /// From now on MariaDB sees statements as MySQL does: what a client puts in a
    /// MariaDB-only comment (`/*M!100300 ... */`) is skipped, as MySQL skips it. Each
    /// `/*M!` becomes `/* M!`'s same-length twin `/* M`, a plain comment.
    pub fn as_mysql(&self) {
        self.shared
            .as_mysql
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// The statement that blackholed a connection, once one did.
    pub fn wait_blackholed(&self, timeout: Duration) -> String {
        wait_for(timeout, "the proxy blackholed a connection", || {
            self.shared.blackholed.lock().unwrap().first().cloned()
        })
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

use super::wait_for;

async fn forward(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    let mut resets = shared.resets.subscribe();
    resets.borrow_and_update();
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let (hole, _) = watch::channel(false);
    let hole = Arc::new(hole);
    let state = Arc::new(Mutex::new(ConnState::default()));
    let up = pump(cr, sw, true, shared.clone(), hole.clone(), state.clone());
    let down = pump(sr, cw, false, shared, hole, state);
    // A reset drops both pumps, and with them both sockets.
    tokio::select! {
        _ = async { tokio::join!(up, down) } => {}
        _ = resets.changed() => {}
    }
}

/// Waits until neither the proxy is cut nor this connection blackholed.
async fn open(cut: &mut watch::Receiver<bool>, hole: &mut watch::Receiver<bool>) {
    loop {
        if !*cut.borrow_and_update() && !*hole.borrow_and_update() {
            return;
        }
        tokio::select! {
            _ = cut.changed() => {}
            _ = hole.changed() => {}
        }
    }
}

/// Copies `from` to `to` while open; `to_server`: the client's side, where statements
/// are looked at.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    to_server: bool,
    shared: Arc<Shared>,
    hole: Arc<watch::Sender<bool>>,
    state: Arc<Mutex<ConnState>>,
) {
    let (mut cut, mut holed) = (shared.cut.subscribe(), hole.subscribe());
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        open(&mut cut, &mut holed).await;
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                if !*holed.borrow() {
                    let _ = to.shutdown().await;
                }
                // A blackholed connection stays open: park until the proxy goes.
                std::future::pending::<()>().await;
                return;
            }
            Ok(n) => n,
        };
        if to_server && shared.as_mysql.load(std::sync::atomic::Ordering::SeqCst) {
            skip_mariadb_comments(&mut buf[..n]);
        }
        let chunk = &buf[..n];
        let trigger = if to_server {
            seen_statement(chunk, &shared, &state)
        } else {
            seen_answer(chunk, &state);
            None
        };
        open(&mut cut, &mut holed).await;
        if to.write_all(chunk).await.is_err() {
            return;
        }
        if let Some(text) = trigger {
            hole.send_replace(true);
            shared.blackholed.lock().unwrap().push(text);
        }
    }
}

/// `/*M!` to `/* M` in place: the same length, so packet lengths stay right.
fn skip_mariadb_comments(chunk: &mut [u8]) {
    for i in 0..chunk.len().saturating_sub(3) {
        if &chunk[i..i + 4] == b"/*M!" {
            chunk[i + 2] = b' ';
            chunk[i + 3] = b'M';
        }
    }
}

/// The payload of the first packet of `chunk` (3-byte length, sequence id, payload).
fn payload(chunk: &[u8]) -> Option<&[u8]> {
    let len = u32::from_le_bytes([*chunk.first()?, *chunk.get(1)?, *chunk.get(2)?, 0]) as usize;
    chunk.get(4..(4 + len).min(chunk.len()))
}

const COM_QUERY: u8 = 0x03;
const COM_STMT_PREPARE: u8 = 0x16;
const COM_STMT_EXECUTE: u8 = 0x17;

/// A client packet: the text of a statement that should blackhole the connection now.
fn seen_statement(chunk: &[u8], shared: &Shared, state: &Mutex<ConnState>) -> Option<String> {
    let p = payload(chunk)?;
    let text = || String::from_utf8_lossy(&p[1..]).into_owned();
    let statement = match *p.first()? {
        COM_QUERY => text(),
        COM_STMT_PREPARE => {
            state.lock().unwrap().pending_prepare = Some(text());
            return None;
        }
        COM_STMT_EXECUTE => {
            let id = u32::from_le_bytes(p.get(1..5)?.try_into().ok()?);
            state.lock().unwrap().prepared.get(&id)?.clone()
        }
        _ => return None,
    };
    let mut matcher = shared.matcher.lock().unwrap();
    if matcher.as_ref()?(&statement) {
        *matcher = None;
        Some(statement)
    } else {
        None
    }
}

/// A server packet: the statement id of the `COM_STMT_PREPARE_OK` we wait for.
fn seen_answer(chunk: &[u8], state: &Mutex<ConnState>) {
    let mut st = state.lock().unwrap();
    let Some(text) = st.pending_prepare.take() else {
        return;
    };
    let Some(p) = payload(chunk) else { return };
    if p.first() != Some(&0x00) {
        return;
    }
    if let Some(id) = p.get(1..5).and_then(|b| b.try_into().ok()) {
        st.prepared.insert(u32::from_le_bytes(id), text);
    }
}
