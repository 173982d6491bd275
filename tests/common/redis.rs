//! A Redis server of Debian's `redis-server` package, owned by a test: its own directory
//! in a temp dir, a free loopback port, `--save '' --appendonly yes`, a password in a
//! mode-0600 file. Stopped by pid when dropped.

use super::server::{self, NotReady, ServerProcess};
use super::{freeze_pid, thaw_pid};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tempfile::TempDir;

const INSTALL: &str = "sudo apt-get install -y redis-server (scripts/test.sh installs it)";

/// Fails the test, with the command that installs Redis, when it is missing.
pub fn check_redis_installed() {
    for bin in ["/usr/bin/redis-server", "/usr/bin/redis-cli"] {
        assert!(
            std::path::Path::new(bin).exists(),
            "Redis is not installed ({bin} is missing): {INSTALL}"
        );
    }
}

/// A running Redis server.
pub struct RedisServer {
    server: ServerProcess,
    port: u16,
    password: String,
    appendonly: bool,
    /// `masterauth`: the password this server gives the primary it replicates.
    masterauth: Option<String>,
    /// Arguments added at the next start (`--min-replicas-to-write 1000000`).
    extra: Vec<String>,
    /// A `redis.conf` read first at every start, as Debian's unit reads
    /// `/etc/redis/redis.conf`: the hooks' `CONFIG REWRITE` persists the role there.
    conf_file: Option<PathBuf>,
}

impl RedisServer {
    /// Starts a server on a free loopback port with a password and an append-only file.
    pub fn start() -> RedisServer {
        RedisServer::start_with(true)
    }

    /// Starts a server without persistence at all (`--appendonly no`).
    pub fn start_without_persistence() -> RedisServer {
        RedisServer::start_with(false)
    }

    /// Starts a server whose password is `password`, also used to replicate another such
    /// server (`masterauth`), with a pidfile.
    pub fn start_replicable(password: &str) -> RedisServer {
        RedisServer::start_full(true, Some(password.to_string()), Some(password.to_string()))
    }

    /// [`start_replicable`](Self::start_replicable), but it gives the primary it
    /// replicates `masterauth` instead of `password`: a replica that cannot authenticate.
    pub fn start_replicable_with_masterauth(password: &str, masterauth: &str) -> RedisServer {
        RedisServer::start_full(
            true,
            Some(password.to_string()),
            Some(masterauth.to_string()),
        )
    }

    fn start_with(appendonly: bool) -> RedisServer {
        RedisServer::start_full(appendonly, None, None)
    }

    /// [`start_replicable`](Self::start_replicable), with a `redis.conf` of its own read
    /// first at every start (as Debian's unit reads `/etc/redis/redis.conf`): the hooks'
    /// `CONFIG REWRITE` persists the role there, so a server killed and started again as
    /// [`start_as_the_drop_in_does`](Self::start_as_the_drop_in_does) comes back as the
    /// replica of the primary it last followed, as it does in production.
    pub fn start_replicable_with_conf(password: &str) -> RedisServer {
        let dir = tempfile::Builder::new()
            .prefix("warden-redis-conf-")
            .tempdir()
            .expect("a temp dir");
        let conf = dir.path().join("redis.conf");
        fs::write(&conf, "# rewritten by the hooks' CONFIG REWRITE\n").expect("write redis.conf");
        RedisServer::start_full_with_conf(
            true,
            Some(password.to_string()),
            Some(password.to_string()),
            Some((dir, conf)),
        )
    }

    fn start_full(
        appendonly: bool,
        password: Option<String>,
        masterauth: Option<String>,
    ) -> RedisServer {
        RedisServer::start_full_with_conf(appendonly, password, masterauth, None)
    }

    fn start_full_with_conf(
        appendonly: bool,
        password: Option<String>,
        masterauth: Option<String>,
        conf: Option<(TempDir, PathBuf)>,
    ) -> RedisServer {
        check_redis_installed();
        let (dir, conf_file) = match conf {
            Some((dir, conf)) => (dir, Some(conf)),
            None => (
                tempfile::Builder::new()
                    .prefix("warden-redis-")
                    .tempdir()
                    .expect("a temp dir"),
                None,
            ),
        };
        let password = password.unwrap_or_else(|| format!("pw{:016x}", super::mariadb::rand_u64()));
        let mut r = RedisServer {
            server: ServerProcess::new(dir, "redis", "redis.log"),
            port: 0,
            password,
            appendonly,
            masterauth,
            extra: Vec::new(),
            conf_file,
        };
        fs::write(r.password_file(), format!("{}\n", r.password)).expect("write the password");
        fs::set_permissions(r.password_file(), fs::Permissions::from_mode(0o600))
            .expect("chmod the password file");
        server::start_on_a_free_port("Redis", &mut r, |r, port| {
            r.port = port;
            r.serve()
        });
        r
    }

    fn data(&self) -> PathBuf {
        self.server.dir().join("data")
    }

    /// Starts redis-server and waits until it answers `PING`.
    fn serve(&mut self) -> Result<(), NotReady> {
        fs::create_dir_all(self.data()).expect("the data dir");
        let mut cmd = Command::new("redis-server");
        cmd.args(self.conf_file.iter().map(|c| c.display().to_string()))
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--dir", &self.data().display().to_string()])
            .args(["--save", ""])
            .args(["--appendonly", if self.appendonly { "yes" } else { "no" }])
            .args(["--appendfsync", "everysec"])
            // DEBUG SLEEP stalls a server in the tests (loopback connections are local).
            .args(["--enable-debug-command", "local"])
            .args(["--requirepass", &self.password])
            .args(match &self.masterauth {
                Some(auth) => vec!["--masterauth".to_string(), auth.clone()],
                None => Vec::new(),
            })
            .args(&self.extra)
            .args(["--pidfile", &self.pidfile().display().to_string()])
            .args(["--logfile", &self.server.log_path().display().to_string()])
            .args(["--daemonize", "no"]);
        self.server.spawn(cmd, INSTALL);
        let (port, password) = (self.port, self.password.clone());
        self.server
            .wait_ready(Duration::from_secs(30), Duration::from_millis(20), || {
                cli_at(port, &password, &["PING"]).is_ok_and(|o| o.trim() == "PONG")
            })?;
        Ok(())
    }

    /// `redis://127.0.0.1:PORT/0`, without the password.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where redis-server writes its pid.
    pub fn pidfile(&self) -> PathBuf {
        self.server.dir().join("redis.pid")
    }

    pub fn password_file(&self) -> PathBuf {
        self.server.dir().join("redis.pass")
    }

    pub fn pid(&self) -> Option<u32> {
        self.server.pid()
    }

    /// Runs one command with `redis-cli`; panics with its error.
    pub fn cli(&self, args: &[&str]) -> String {
        self.try_cli(args)
            .unwrap_or_else(|e| panic!("redis-cli {args:?} failed: {e}\n{}", self.log()))
    }

    pub fn try_cli(&self, args: &[&str]) -> Result<String, String> {
        cli_at(self.port, &self.password, args)
    }

    /// Every key of `cluster` (prefix `warden`) as `DUMP` gives it, with its time to live:
    /// a backup taken now, for [`restore_keys`](Self::restore_keys).
    pub fn dump_keys(&self, cluster: &str) -> Vec<(String, Vec<u8>, i64)> {
        let mut c = self.connection();
        let keys: Vec<String> = ::redis::cmd("KEYS")
            .arg(format!("warden:{{{cluster}}}:*"))
            .query(&mut c)
            .expect("KEYS");
        keys.into_iter()
            .filter_map(|k| {
                let data: Option<Vec<u8>> = ::redis::cmd("DUMP").arg(&k).query(&mut c).ok()?;
                let ttl: i64 = ::redis::cmd("PTTL").arg(&k).query(&mut c).ok()?;
                Some((k, data?, ttl.max(0)))
            })
            .collect()
    }

    /// A restore of `dump` (from [`dump_keys`](Self::dump_keys)) in one `MULTI`: the
    /// cluster's keys as they were then (with the time to live they had), whatever was
    /// written since, as after a crash that lost the last writes.
    pub fn restore_keys(&self, cluster: &str, dump: &[(String, Vec<u8>, i64)]) {
        let mut c = self.connection();
        let now: Vec<String> = ::redis::cmd("KEYS")
            .arg(format!("warden:{{{cluster}}}:*"))
            .query(&mut c)
            .expect("KEYS");
        let mut p = ::redis::pipe();
        p.atomic();
        for k in &now {
            p.cmd("DEL").arg(k).ignore();
        }
        for (k, data, ttl) in dump {
            p.cmd("RESTORE")
                .arg(k)
                .arg(*ttl)
                .arg(data.as_slice())
                .ignore();
        }
        let () = p.query(&mut c).expect("restore the cluster's keys");
    }

    fn connection(&self) -> ::redis::Connection {
        ::redis::Client::open(format!(
            "redis://:{}@127.0.0.1:{}/",
            self.password, self.port
        ))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .expect("connect to the test's Redis")
    }

    /// SIGSTOP of redis-server: it keeps its sockets and answers nothing.
    pub fn freeze(&mut self) {
        freeze_pid(self.pid().expect("a running server"));
    }

    pub fn thaw(&mut self) {
        thaw_pid(self.pid().expect("a running server"));
    }

    /// Whether the server is down: killed by the test, or exited (fenced by a warden),
    /// which this reaps.
    pub fn exited(&mut self) -> bool {
        self.server.exited()
    }

    /// SIGKILL by pid, and wait.
    pub fn kill(&mut self) {
        self.server.kill();
    }

    /// Stopped with SIGTERM (Redis writes its append-only file and exits) and started
    /// again on the same directory and port: the data stays.
    pub fn restart(&mut self) {
        self.server.terminate(Duration::from_secs(30));
        if let Err(e) = self.serve() {
            e.fail("Redis did not restart");
        }
    }

    /// Started again (after [`kill`](Self::kill)) on the same directory and port as
    /// `examples/redis`'s systemd drop-in starts it: refusing writes until warden
    /// promotes it or its follow hook points it at the primary.
    pub fn start_as_the_drop_in_does(&mut self) {
        self.start_as_the_drop_in_does_over(&[]);
    }

    /// [`start_as_the_drop_in_does`](Self::start_as_the_drop_in_does) over a
    /// configuration that says `conf` (arguments before the drop-in's, as redis.conf is
    /// read before them). The drop-in's arguments are read from the shipped file
    /// (`examples/redis/redis-server-warden.conf`): what follows `--daemonize no` on its
    /// `ExecStart=` line.
    pub fn start_as_the_drop_in_does_over(&mut self, conf: &[&str]) {
        assert!(
            !self.server.started(),
            "start_as_the_drop_in_does: still running"
        );
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/redis/redis-server-warden.conf");
        let text = fs::read_to_string(&path).expect("the shipped drop-in");
        let line = text
            .lines()
            .filter_map(|l| l.strip_prefix("ExecStart="))
            .find(|l| !l.is_empty())
            .expect("an ExecStart= line with a command in the drop-in");
        let (_, args) = line
            .split_once("--daemonize no")
            .expect("the drop-in's ExecStart= says --daemonize no");
        self.extra = conf.iter().map(|a| a.to_string()).collect();
        self.extra
            .extend(args.split_whitespace().map(str::to_string));
        if let Err(e) = self.serve() {
            e.fail("Redis did not start again");
        }
    }

    /// The password this server asks of its clients.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// Restarted without persistence: killed, its files gone, started again empty on the
    /// same port.
    pub fn restart_empty(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(self.data());
        if let Err(e) = self.serve() {
            e.fail("Redis did not restart empty");
        }
    }

    pub fn log(&self) -> String {
        self.server.log()
    }
}

/// Runs one command with `redis-cli` on the server at `port`.
fn cli_at(port: u16, password: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-a", password, "--no-auth-warning"])
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() && !stdout.starts_with("ERR") && !stdout.starts_with("WRONGTYPE") {
        Ok(stdout)
    } else {
        Err(format!("{stdout}{}", String::from_utf8_lossy(&out.stderr)))
    }
}
