//! Health probes and the checker task against real listeners and processes.

use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose, SanType};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use warden::config::{HealthConfig, HealthKind};
use warden::health::{spawn_checker, CheckerSettings, HealthChange, HttpProbe, Probe, ProbeEnv};
use warden::record::Health;

const DEADLINE: Duration = Duration::from_secs(10);
const INTERVAL: Duration = Duration::from_millis(50);
const TIMEOUT: Duration = Duration::from_secs(1);

async fn next_position(rx: &mut mpsc::Receiver<Option<u64>>) -> Option<u64> {
    tokio::time::timeout(DEADLINE, rx.recv())
        .await
        .expect("no position in time")
        .expect("the checker ended")
}

async fn next_change(rx: &mut mpsc::Receiver<HealthChange>) -> HealthChange {
    tokio::time::timeout(DEADLINE, rx.recv())
        .await
        .expect("no health change in time")
        .expect("the checker ended")
}

/// Accepts connections and closes them at once.
async fn tcp_listener() -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            drop(conn);
        }
    });
    (address, task)
}

/// A tiny HTTP server answering every request with the status in `status`; records the
/// request heads it got.
struct HttpServer {
    url: String,
    status: Arc<AtomicU16>,
    requests: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn http_server(path: &str) -> HttpServer {
    serve(path, None).await
}

/// The same server behind TLS with `tls` (an https URL).
async fn https_server(path: &str, tls: TlsAcceptor) -> HttpServer {
    serve(path, Some(tls)).await
}

async fn serve(path: &str, tls: Option<TlsAcceptor>) -> HttpServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}{path}", listener.local_addr().unwrap());
    let status = Arc::new(AtomicU16::new(200));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (s, r) = (status.clone(), requests.clone());
    let task = tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let (s, r, tls) = (s.clone(), r.clone(), tls.clone());
            tokio::spawn(async move {
                let code = s.load(Ordering::SeqCst);
                match tls {
                    // A failed handshake (the client refused the certificate) ends it.
                    Some(tls) => {
                        if let Ok(conn) = tls.accept(conn).await {
                            answer(conn, code, &r).await;
                        }
                    }
                    None => answer(conn, code, &r).await,
                }
            });
        }
    });
    HttpServer {
        url,
        status,
        requests,
        task,
    }
}

/// Reads a request head, records it and answers `code`.
async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    mut conn: S,
    code: u16,
    requests: &Mutex<Vec<String>>,
) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    requests
        .lock()
        .unwrap()
        .push(String::from_utf8_lossy(&head).into_owned());
    let answer = format!(
        "HTTP/1.1 {code} Status {code}\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    );
    let _ = conn.write_all(answer.as_bytes()).await;
    let _ = conn.shutdown().await;
}

/// A private CA made for the test, as a site would run one.
struct TestCa {
    name: String,
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl TestCa {
    fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            name: name.to_string(),
            cert,
            key,
        }
    }

    /// Writes the CA certificate as PEM into `dir`; returns the file.
    fn write_pem(&self, dir: &Path) -> std::path::PathBuf {
        let file = dir.join(format!("{}.pem", self.name));
        std::fs::write(&file, self.cert.pem()).unwrap();
        file
    }

    /// A server certificate signed by this CA for `names` (DNS names or IP addresses).
    fn server(&self, names: &[&str]) -> TlsAcceptor {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = names
            .iter()
            .map(|n| match n.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*n).try_into().unwrap()),
            })
            .collect();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap();
        TlsAcceptor::from(Arc::new(config))
    }
}

fn https_probe(url: &str, ca_file: Option<&Path>) -> Probe {
    Probe::service(&HealthConfig {
        kind: HealthKind::Http,
        url: Some(url.to_string()),
        ca_file: ca_file.map(Path::to_path_buf),
        ..HealthConfig::default()
    })
    .unwrap()
}

#[tokio::test]
async fn tcp_probe_turns_unhealthy_after_fall_failures_once_the_listener_is_gone() {
    let (address, listener) = tcp_listener().await;
    let probe = Probe::Tcp {
        address: address.clone(),
    };
    let (tx, mut rx) = mpsc::channel(8);
    let _checker = spawn_checker(
        probe,
        CheckerSettings {
            interval: INTERVAL,
            timeout: TIMEOUT,
            rise: 2,
            fall: 3,
            grace: Duration::ZERO,
        },
        tx,
        None,
        None,
    );

    let change = next_change(&mut rx).await;
    assert_eq!(change.health, Health::Healthy);
    assert_eq!(change.detail, format!("tcp {address}: connected"));

    listener.abort();
    let _ = listener.await; // the listening socket is closed once the task is gone
    let gone = Instant::now();
    let change = next_change(&mut rx).await;
    assert_eq!(change.health, Health::Unhealthy);
    assert_eq!(change.detail, format!("tcp {address}: connection refused"));
    // Three failures in a row, one interval apart: at least two intervals.
    assert!(gone.elapsed() >= INTERVAL * 2, "{:?}", gone.elapsed());
}

#[tokio::test]
async fn exec_probe_passes_on_exit_0_only() {
    let pass = Probe::Exec {
        command: vec!["true".into()],
        env: ProbeEnv::default(),
    }
    .check(TIMEOUT)
    .await;
    assert!(pass.pass, "{pass:?}");
    let fail = Probe::Exec {
        command: vec!["false".into()],
        env: ProbeEnv::default(),
    }
    .check(TIMEOUT)
    .await;
    assert!(!fail.pass);
    assert_eq!(fail.detail, "exec false: exit status 1");
}

/// Checks `server` with `probe` (rise 1, fall 2): healthy on its 200, unhealthy once it
/// answers 500, healthy again on 204. Returns the head of the first request.
async fn follows_the_status(server: &HttpServer, probe: Probe) -> String {
    let (tx, mut rx) = mpsc::channel(8);
    let _checker = spawn_checker(
        probe,
        CheckerSettings {
            interval: INTERVAL,
            timeout: TIMEOUT,
            rise: 1,
            fall: 2,
            grace: Duration::ZERO,
        },
        tx,
        None,
        None,
    );

    let change = next_change(&mut rx).await;
    assert_eq!(change.health, Health::Healthy, "{}", change.detail);
    assert_eq!(
        change.detail,
        format!("http {}: 200 Status 200", server.url)
    );
    let head = server.requests.lock().unwrap()[0].clone();

    server.status.store(500, Ordering::SeqCst);
    let change = next_change(&mut rx).await;
    assert_eq!(change.health, Health::Unhealthy);
    assert_eq!(
        change.detail,
        format!("http {}: 500 Status 500", server.url)
    );

    server.status.store(204, Ordering::SeqCst);
    assert_eq!(next_change(&mut rx).await.health, Health::Healthy);
    head
}

#[tokio::test]
async fn http_probe_wants_a_2xx_answer() {
    let server = http_server("/ws/v1/cluster/info?x=1").await;
    let config = HealthConfig {
        kind: HealthKind::Http,
        url: Some(server.url.clone()),
        ..HealthConfig::default()
    };
    let head = follows_the_status(&server, Probe::service(&config).unwrap()).await;
    assert!(
        head.starts_with("GET /ws/v1/cluster/info?x=1 HTTP/1.1\r\n"),
        "{head}"
    );
    let host = server
        .url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    assert!(head.contains(&format!("\r\nHost: {host}\r\n")), "{head}");
}

#[tokio::test]
async fn https_probe_is_healthy_when_health_ca_file_names_the_servers_ca() {
    let ca = TestCa::new("ca");
    let dir = tempfile::tempdir().unwrap();
    let ca_file = ca.write_pem(dir.path());
    let server = https_server("/ws/v1/cluster/info", ca.server(&["127.0.0.1"])).await;
    let head = follows_the_status(&server, https_probe(&server.url, Some(&ca_file))).await;
    assert!(
        head.starts_with("GET /ws/v1/cluster/info HTTP/1.1\r\n"),
        "{head}"
    );
}

#[tokio::test]
async fn https_probe_names_the_certificate_problem_and_the_fix() {
    let ca = TestCa::new("ca");
    let server = https_server("/health", ca.server(&["127.0.0.1"])).await;

    // The host does not trust the private CA: health.ca_file is the fix.
    let check = https_probe(&server.url, None).check(TIMEOUT).await;
    assert!(!check.pass);
    assert_eq!(
        check.detail,
        format!(
            "http {}: the server's certificate is not signed by a CA this host trusts \
             (UnknownIssuer): set health.ca_file to the PEM file of the CA that signed it",
            server.url
        )
    );

    // A CA file of another CA.
    let dir = tempfile::tempdir().unwrap();
    let other_ca = TestCa::new("other-ca").write_pem(dir.path());
    let check = https_probe(&server.url, Some(&other_ca))
        .check(TIMEOUT)
        .await;
    assert!(!check.pass);
    assert!(
        check.detail.contains(&format!(
            "is signed by no CA of health.ca_file ({}) nor of this host (UnknownIssuer)",
            other_ca.display()
        )),
        "{}",
        check.detail
    );

    // The right CA, but a certificate for another name than the URL's host.
    let ca_file = ca.write_pem(dir.path());
    let elsewhere = https_server("/health", ca.server(&["rm1.example.com"])).await;
    let check = https_probe(&elsewhere.url, Some(&ca_file))
        .check(TIMEOUT)
        .await;
    assert!(!check.pass);
    assert!(
        check.detail.contains(
            "the server's certificate does not name host 127.0.0.1 (certificate not valid \
             for name \"127.0.0.1\"; certificate is only valid for DnsName(\"rm1.example.com\"))"
        ),
        "{}",
        check.detail
    );

    // A plain HTTP server behind an https URL answers the TLS hello with HTTP.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let plain = tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let _ = conn
                .write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
                .await;
        }
    });
    let url = format!("https://127.0.0.1:{port}/health");
    let check = https_probe(&url, Some(&ca_file)).check(TIMEOUT).await;
    plain.abort();
    assert!(!check.pass);
    assert!(
        check.detail.contains(&format!(
            "does the server speak https on port {port}? For plain HTTP write the url with http://"
        )),
        "{}",
        check.detail
    );
}

#[tokio::test]
async fn a_hanging_probe_is_cut_off_at_its_timeout() {
    // Accepts, reads, never answers.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    let timeout = Duration::from_millis(300);
    let probe = Probe::Http(HttpProbe::new(&url, None).unwrap());
    let started = Instant::now();
    let check = probe.check(timeout).await;
    let elapsed = started.elapsed();
    assert!(!check.pass);
    assert_eq!(check.detail, format!("http {url}: no answer within 300ms"));
    assert!(elapsed >= timeout && elapsed < timeout * 4, "{elapsed:?}");
    silent.abort();

    let hanging = Probe::Exec {
        command: vec!["sleep".into(), "30".into()],
        env: ProbeEnv::default(),
    };
    let started = Instant::now();
    let check = hanging.check(timeout).await;
    assert!(!check.pass);
    assert_eq!(check.detail, "exec sleep 30: no answer within 300ms");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn failures_during_start_grace_do_not_count() {
    // A port nobody listens on: bind, then close.
    let address = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let grace = Duration::from_millis(600);
    let (tx, mut rx) = mpsc::channel(8);
    let started = Instant::now();
    let _checker = spawn_checker(
        Probe::Tcp { address },
        CheckerSettings {
            interval: INTERVAL,
            timeout: TIMEOUT,
            rise: 2,
            fall: 1,
            grace,
        },
        tx,
        None,
        None,
    );
    let change = next_change(&mut rx).await;
    assert_eq!(change.health, Health::Unhealthy);
    assert!(
        started.elapsed() >= grace,
        "counted a failure in the grace: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn no_check_is_healthy_at_once_and_the_checker_stops_when_dropped() {
    let (tx, mut rx) = mpsc::channel(8);
    let checker = spawn_checker(
        Probe::None,
        CheckerSettings {
            interval: Duration::from_secs(3600),
            timeout: TIMEOUT,
            rise: 5,
            fall: 5,
            grace: Duration::ZERO,
        },
        tx,
        None,
        None,
    );
    assert_eq!(next_change(&mut rx).await.health, Health::Healthy);

    drop(checker);
    let end = tokio::time::timeout(DEADLINE, rx.recv())
        .await
        .expect("checker still running");
    assert_eq!(end, None, "the task ended and dropped its sender");
}

#[tokio::test]
async fn standby_probe_uses_the_standby_command() {
    let config = HealthConfig {
        kind: HealthKind::Tcp,
        address: Some("127.0.0.1:1".into()),
        standby_command: vec!["false".into()],
        ..HealthConfig::default()
    };
    let (tx, mut rx) = mpsc::channel(8);
    let _checker = spawn_checker(
        Probe::standby(&config, ProbeEnv::default()),
        CheckerSettings {
            interval: INTERVAL,
            timeout: TIMEOUT,
            rise: 1,
            fall: 1,
            grace: Duration::ZERO,
        },
        tx,
        None,
        None,
    );
    let change = next_change(&mut rx).await;
    assert_eq!(change.health, Health::Unhealthy);
    assert_eq!(change.detail, "exec false: exit status 1");
}

/// SPEC §6b: the last line a passing check writes to stdout is the node's data position;
/// each change is sent once, and garbage counts as unknown.
#[tokio::test]
async fn a_checks_last_stdout_line_is_the_position() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("position");
    std::fs::write(&file, "42\n").unwrap();
    let config = HealthConfig {
        standby_command: vec![
            "sh".into(),
            "-c".into(),
            format!("echo checking the replica; cat '{}'", file.display()),
        ],
        ..HealthConfig::default()
    };
    let (mut rx, mut prx, _checker) = standby_checker(&config);
    assert_eq!(next_change(&mut rx).await.health, Health::Healthy);
    assert_eq!(next_position(&mut prx).await, Some(42));
    std::fs::write(&file, "lagging\n").unwrap();
    assert_eq!(next_position(&mut prx).await, None, "garbage is unknown");
    std::fs::write(&file, "  43  \n").unwrap();
    assert_eq!(next_position(&mut prx).await, Some(43));
    // A failing check says nothing of the data: unknown.
    std::fs::write(&file, "44\n").unwrap();
    assert_eq!(next_position(&mut prx).await, Some(44));
    let config = HealthConfig {
        standby_command: vec!["sh".into(), "-c".into(), "echo 45; exit 1".into()],
        ..HealthConfig::default()
    };
    let (_rx, mut prx, _failing) = standby_checker(&config);
    assert_eq!(next_position(&mut prx).await, None);
}

/// A checker of `config`'s `standby_command` (rise and fall 1), with its health changes
/// and its positions.
fn standby_checker(
    config: &HealthConfig,
) -> (
    mpsc::Receiver<HealthChange>,
    mpsc::Receiver<Option<u64>>,
    warden::health::CheckerHandle,
) {
    let (tx, rx) = mpsc::channel(8);
    let (ptx, prx) = mpsc::channel(8);
    let checker = spawn_checker(
        Probe::standby(config, ProbeEnv::default()),
        CheckerSettings {
            interval: INTERVAL,
            timeout: TIMEOUT,
            rise: 1,
            fall: 1,
            grace: Duration::ZERO,
        },
        tx,
        None,
        Some(ptx),
    );
    (rx, prx, checker)
}
