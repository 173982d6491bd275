//! A small real service for tests and the demo: it proves from its own records that two
//! copies never ran at once.
//!
//! It appends one line per event to `--journal PATH` (O_APPEND, one `write` per line, so
//! lines of several processes never tear), stamped with CLOCK_MONOTONIC in nanoseconds,
//! which is system-wide and so comparable across processes and with the test's own clock:
//!
//! ```text
//! start <mono_ns> pid=<pid> node=<WARDEN_NODE_ID> epoch=<WARDEN_EPOCH>
//! tick <mono_ns> pid=<pid>          every --tick (10ms)
//! stop <mono_ns> pid=<pid>          on SIGTERM, then exit 0
//! ```
//!
//! A run killed by SIGKILL simply stops ticking: its last tick is within one tick of its
//! death. `pid=` on every line lets a reader attribute lines even if two copies (a bug
//! under test) wrote to one file at once. A variable missing from the environment is
//! written as `-`.

use clap::Parser;
use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::time::{clock_gettime, ClockId};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The managed service of warden's tests and demo: appends start/tick/stop lines to a journal.
#[derive(Parser, Debug)]
#[command(name = "warden-journal-service", version)]
struct Args {
    /// The file to append journal lines to (created if missing).
    #[arg(long)]
    journal: PathBuf,
    /// How often to append a `tick` line.
    #[arg(long, default_value = "10ms", value_parser = humantime::parse_duration)]
    tick: Duration,
    /// Bind a TCP listener here and accept (and close) connections, for tcp health checks.
    #[arg(long)]
    listen: Option<String>,
    /// Ignore SIGTERM, so that only SIGKILL (after warden's stop_timeout) ends the service.
    #[arg(long)]
    ignore_term: bool,
    /// Exit on its own after this long, as a crash would (no `stop` line).
    #[arg(long, value_parser = humantime::parse_duration)]
    exit_after: Option<Duration>,
    /// The exit code of `--exit-after`.
    #[arg(long, default_value_t = 1, requires = "exit_after")]
    exit_code: u8,
    /// Start a child in the service's process group that reads PATH (on a mount that
    /// never answers: the tests' hung FUSE mount) and so waits in the kernel: once a
    /// signal kills it, it cannot end until the mount answers, as on a hung NFS mount.
    #[arg(long, value_name = "PATH")]
    hang_on: Option<PathBuf>,
}

/// Set by the SIGTERM handler; the main loop writes `stop` and exits when it sees it.
static TERM: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_: libc::c_int) {
    TERM.store(true, Ordering::SeqCst);
}

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process of the machine.
fn mono_ns() -> u64 {
    // CLOCK_MONOTONIC always exists on Linux; a failure here is a broken system.
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is readable");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// The journal: one `write(2)` per line on an O_APPEND file.
struct Journal {
    file: File,
    pid: u32,
}

impl Journal {
    fn append(&mut self, line: &str) -> std::io::Result<()> {
        self.file.write_all(format!("{line}\n").as_bytes())?;
        self.file.flush()
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match serve(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("warden-journal-service: {e}");
            ExitCode::from(2)
        }
    }
}

fn serve(args: &Args) -> Result<ExitCode, String> {
    let handler = if args.ignore_term {
        SigHandler::SigIgn
    } else {
        SigHandler::Handler(on_term)
    };
    let action = SigAction::new(handler, SaFlags::empty(), SigSet::empty());
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe { sigaction(Signal::SIGTERM, &action) }
        .map_err(|e| format!("cannot install the SIGTERM handler: {e}"))?;

    if let Some(path) = &args.hang_on {
        // Never waited for: it outlives this process when it hangs, as it should.
        let child = std::process::Command::new("stat")
            .arg(path)
            .stdout(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start `stat {}`: {e}", path.display()))?;
        eprintln!(
            "warden-journal-service: pid {} reads {} (a hung mount)",
            child.id(),
            path.display()
        );
    }

    if let Some(addr) = &args.listen {
        let listener =
            TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        std::thread::spawn(move || {
            // Accept and close at once: a tcp health check only needs the connect to succeed.
            for conn in listener.incoming() {
                drop(conn);
            }
        });
    }

    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.journal)
        .map_err(|e| format!("cannot open journal {}: {e}", args.journal.display()))?;
    let mut journal = Journal {
        file,
        pid: std::process::id(),
    };
    let env = |name: &str| std::env::var(name).unwrap_or_else(|_| "-".to_string());
    let (node, epoch) = (env("WARDEN_NODE_ID"), env("WARDEN_EPOCH"));
    let write_err = |e: std::io::Error| format!("cannot write {}: {e}", args.journal.display());

    journal
        .append(&format!(
            "start {} pid={} node={node} epoch={epoch}",
            mono_ns(),
            journal.pid
        ))
        .map_err(write_err)?;
    eprintln!(
        "warden-journal-service: started pid={} node={node} epoch={epoch}, journal {}",
        journal.pid,
        args.journal.display()
    );

    let started = Instant::now();
    loop {
        std::thread::sleep(args.tick);
        if TERM.load(Ordering::SeqCst) {
            journal
                .append(&format!("stop {} pid={}", mono_ns(), journal.pid))
                .map_err(write_err)?;
            eprintln!("warden-journal-service: stopped on SIGTERM");
            return Ok(ExitCode::SUCCESS);
        }
        if args.exit_after.is_some_and(|d| started.elapsed() >= d) {
            eprintln!(
                "warden-journal-service: exiting with code {} (simulated crash)",
                args.exit_code
            );
            return Ok(ExitCode::from(args.exit_code));
        }
        journal
            .append(&format!("tick {} pid={}", mono_ns(), journal.pid))
            .map_err(write_err)?;
    }
}
