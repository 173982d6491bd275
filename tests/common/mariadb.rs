//! A MariaDB server of Debian's `mariadb-server` package, owned by a test: its own datadir
//! in a temp dir, a free loopback port, a `warden` database and user with a random
//! password in a mode-0600 file. Stopped by pid when dropped.
//!
//! `mariadb-install-db` takes seconds, so it runs once per test process into a template
//! datadir, which each server copies.

use super::server::{self, NotReady, ServerProcess};
use super::{freeze_pid, thaw_pid};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

const INSTALL: &str = "sudo apt-get install -y mariadb-server (scripts/test.sh installs it)";

/// Fails the test, with the command that installs MariaDB, when it is missing.
pub fn check_mariadb_installed() {
    for bin in [
        "/usr/sbin/mariadbd",
        "/usr/bin/mariadb-install-db",
        "/usr/bin/mariadb",
    ] {
        assert!(
            Path::new(bin).exists(),
            "MariaDB is not installed ({bin} is missing): {INSTALL}"
        );
    }
}

/// The template datadir: made once per machine, user and MariaDB version, and kept for
/// later runs (a directory per test process, as before, leaked about 100 MB each: a
/// static is never dropped). Made in a directory of its own, then renamed into place, so
/// that test processes starting side by side never see half of one.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        check_mariadb_installed();
        let version = Command::new("mariadbd")
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let key = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            version.hash(&mut h);
            h.finish()
        };
        let home = std::env::temp_dir().join(format!(
            "warden-mariadb-template-{}-{key:016x}",
            nix::unistd::geteuid()
        ));
        let data = home.join("data");
        if home.join("ready").exists() {
            return data;
        }
        let dir = tempfile::Builder::new()
            .prefix("warden-mariadb-template-new-")
            .tempdir()
            .expect("a temp dir");
        let new_data = dir.path().join("data");
        // Its own tmpdir: installs running side by side (one per test process) clash
        // over temporary table files in a shared /tmp.
        let tmp = dir.path().join("tmp");
        fs::create_dir_all(&tmp).expect("a tmpdir");
        let out = Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", new_data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .args(as_root())
            .arg("--auth-root-authentication-method=socket")
            .arg("--skip-test-db")
            .output()
            .expect("run mariadb-install-db");
        assert!(
            out.status.success(),
            "mariadb-install-db failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        fs::write(dir.path().join("ready"), version).expect("mark the template ready");
        // Another process may have put its own in place meanwhile: then ours goes (the
        // TempDir's drop) and theirs is used.
        if fs::rename(dir.path(), &home).is_ok() {
            let _ = dir.keep();
        }
        assert!(
            home.join("ready").exists(),
            "no MariaDB template datadir at {}",
            home.display()
        );
        data
    })
}

/// `--user=root` when the tests run as root (mariadbd refuses root otherwise).
fn as_root() -> Vec<String> {
    if nix::unistd::geteuid().is_root() {
        vec!["--user=root".to_string()]
    } else {
        Vec::new()
    }
}

/// A running MariaDB server.
pub struct MariaDb {
    server: ServerProcess,
    port: u16,
    password: String,
}

impl MariaDb {
    /// Starts a server on a free loopback port with a `warden` database and user.
    pub fn start() -> MariaDb {
        let dir = tempfile::Builder::new()
            .prefix("warden-mariadb-")
            .tempdir()
            .expect("a temp dir");
        let password = format!("pw{:016x}", rand_u64());
        let mut db = MariaDb {
            server: ServerProcess::new(dir, "mariadb", "error.log"),
            port: 0,
            password,
        };
        fs::write(db.password_file(), format!("{}\n", db.password)).expect("write the password");
        fs::set_permissions(db.password_file(), fs::Permissions::from_mode(0o600))
            .expect("chmod the password file");
        db.fresh_datadir();
        server::start_on_a_free_port("MariaDB", &mut db, |db, port| {
            db.port = port;
            db.serve()
        });
        db.create_user();
        db
    }

    fn dir(&self) -> &Path {
        self.server.dir()
    }

    fn data(&self) -> PathBuf {
        self.dir().join("data")
    }

    fn socket(&self) -> PathBuf {
        self.dir().join("mysqld.sock")
    }

    fn fresh_datadir(&self) {
        let _ = fs::remove_dir_all(self.data());
        let ok = Command::new("cp")
            .arg("-a")
            .arg(template())
            .arg(self.data())
            .status()
            .expect("cp the template datadir");
        assert!(ok.success(), "copying the template datadir failed");
    }

    /// Starts mariadbd and waits until it answers a query.
    fn serve(&mut self) -> Result<(), NotReady> {
        let mut cmd = Command::new("mariadbd");
        cmd.arg("--no-defaults")
            .args(as_root())
            .arg(format!("--datadir={}", self.data().display()))
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!("--tmpdir={}", self.dir().display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!(
                "--pid-file={}",
                self.dir().join("mysqld.pid").display()
            ))
            .arg(format!("--log-error={}", self.server.log_path().display()))
            .args([
                "--skip-log-bin",
                "--skip-name-resolve",
                "--performance-schema=OFF",
                "--innodb-buffer-pool-size=16M",
                "--innodb-log-file-size=8M",
                "--max-connections=200",
            ]);
        self.server.spawn(cmd, INSTALL);
        let socket = self.socket();
        self.server
            .wait_ready(Duration::from_secs(60), Duration::from_millis(50), || {
                sql_over(&socket, "SELECT 1").is_ok()
            })?;
        Ok(())
    }

    fn create_user(&self) {
        let pw = &self.password;
        self.sql(&format!(
            "CREATE DATABASE IF NOT EXISTS warden; \
             CREATE USER IF NOT EXISTS 'warden'@'127.0.0.1' IDENTIFIED BY '{pw}'; \
             CREATE USER IF NOT EXISTS 'warden'@'localhost' IDENTIFIED BY '{pw}'; \
             GRANT ALL ON warden.* TO 'warden'@'127.0.0.1'; \
             GRANT ALL ON warden.* TO 'warden'@'localhost';"
        ));
    }

    /// `mysql://warden@127.0.0.1:PORT/warden`, without the password.
    pub fn url(&self) -> String {
        format!("mysql://warden@127.0.0.1:{}/warden", self.port)
    }

    /// [`url`](Self::url) with another port: a proxy's in front of this server.
    pub fn url_via(&self, port: u16) -> String {
        format!("mysql://warden@127.0.0.1:{port}/warden")
    }

    pub fn password_file(&self) -> PathBuf {
        self.dir().join("mysql.pass")
    }

    pub fn password(&self) -> &str {
        &self.password
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> Option<u32> {
        self.server.pid()
    }

    /// Runs `query` as root over the socket (in database `warden` once it exists); panics
    /// with the client's error.
    pub fn sql(&self, query: &str) -> String {
        self.try_sql(query)
            .unwrap_or_else(|e| panic!("SQL failed: {query}: {e}\n{}", self.log()))
    }

    /// A client that opens a transaction, locks the rows `query` selects `FOR UPDATE` and
    /// then does nothing, as a warden frozen inside one of its transactions does (the
    /// root session has no idle timeout). The rows are freed when the child is killed.
    pub fn hold_rows(&self, query: &str) -> Child {
        use std::io::Write;
        let mut child = Command::new("mariadb")
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-uroot", "-N", "-B", "--unbuffered", "warden"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the mariadb client");
        // Its stdin stays open with the child: EOF would end the session.
        let stdin = child.stdin.as_mut().expect("its stdin");
        writeln!(stdin, "BEGIN; {query} FOR UPDATE; SELECT 'held';").expect("write to it");
        let mut out = child.stdout.take().expect("its stdout");
        // Read on a thread, so that a client that never gets the rows fails the test at a
        // deadline instead of hanging it.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::Read;
            let mut seen = String::new();
            let mut buf = [0u8; 256];
            while !seen.contains("held") {
                match out.read(&mut buf) {
                    Ok(n) if n > 0 => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
                    _ => break,
                }
            }
            let _ = tx.send(seen);
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(seen) if seen.contains("held") => child,
            other => {
                let _ = child.kill();
                panic!("the mariadb client did not lock the rows of {query}: {other:?}");
            }
        }
    }

    pub fn try_sql(&self, query: &str) -> Result<String, String> {
        sql_over(&self.socket(), query)
    }

    /// Every row of `cluster` in warden's four tables (prefix `warden_`), as SQL that puts
    /// them back: a backup taken now, for [`restore_rows`](Self::restore_rows).
    pub fn dump_rows(&self, cluster: &str) -> String {
        let out = Command::new("mariadb-dump")
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args([
                "-uroot",
                "--no-create-info",
                "--skip-extended-insert",
                "--compact",
            ])
            .arg("--hex-blob")
            .arg(format!("--where=cluster = '{cluster}'"))
            .args([
                "warden",
                "warden_lock",
                "warden_epoch",
                "warden_member",
                "warden_kv",
            ])
            .output()
            .expect("run mariadb-dump");
        assert!(
            out.status.success(),
            "mariadb-dump failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("mariadb-dump writes SQL text")
    }

    /// A restore of `dump` (from [`dump_rows`](Self::dump_rows)): the cluster's rows as
    /// they were then, in one transaction, whatever was written since.
    pub fn restore_rows(&self, cluster: &str, dump: &str) {
        let wipe: String = ["warden_lock", "warden_epoch", "warden_member", "warden_kv"]
            .iter()
            .map(|t| format!("DELETE FROM warden.{t} WHERE cluster = '{cluster}'; "))
            .collect();
        self.sql(&format!("USE warden; BEGIN; {wipe}{dump} COMMIT;"));
    }

    /// SIGSTOP of mariadbd: it keeps its sockets and answers nothing.
    pub fn freeze(&mut self) {
        freeze_pid(self.pid().expect("a running server"));
    }

    pub fn thaw(&mut self) {
        thaw_pid(self.pid().expect("a running server"));
    }

    /// SIGKILL by pid, and wait.
    pub fn kill(&mut self) {
        self.server.kill();
    }

    /// Stops (SIGKILL: InnoDB recovers on the next start) and starts the server again on
    /// the same datadir and port; the data stays.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(e) = self.serve() {
            e.fail("MariaDB did not restart");
        }
    }

    /// The database wiped: stopped, a fresh datadir, started again on the same port with
    /// the `warden` database and user but none of the tables.
    pub fn restart_empty(&mut self) {
        self.kill();
        self.fresh_datadir();
        if let Err(e) = self.serve() {
            e.fail("MariaDB did not restart empty");
        }
        self.create_user();
    }

    pub fn log(&self) -> String {
        self.server.log()
    }
}

/// Runs `query` as root over the server's unix socket.
fn sql_over(socket: &Path, query: &str) -> Result<String, String> {
    let out = Command::new("mariadb")
        .arg("--no-defaults")
        .arg(format!("--socket={}", socket.display()))
        .args(["-uroot", "-N", "-B", "--connect-timeout=2", "-e", query])
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

pub fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut b);
    }
    u64::from_le_bytes(b)
}
