//! The `warden` command line (SPEC §7): parse, load the config, call the library; the one
//! [`Error`] a command ends with is printed once and mapped to its exit code once, in
//! `main` (0 success; 1 the operation failed or was refused; 2 usage or configuration
//! error; 3 coordination service unreachable or auth refused).

use clap::{CommandFactory, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use warden::config::{self, Config, LogFormat};
use warden::coord::configured::{Configured, StoreJob};
use warden::coord::{Connector, StoreError};
use warden::ops::{self, operator::OpError};
use warden::{errln, out, outln, Error};

#[derive(Parser)]
#[command(
    name = "warden",
    version,
    about = "Active/standby HA supervisor with fencing, elected through ZooKeeper, MySQL/MariaDB or Redis",
    long_about = None
)]
struct Cli {
    /// The config file.
    #[arg(
        short,
        long,
        global = true,
        env = "WARDEN_CONFIG",
        default_value = "/etc/warden/warden.toml"
    )]
    config: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon in the foreground (systemd Type=notify).
    Run,
    /// Show the active node, epoch, breadcrumb and every member's role and health.
    Status {
        /// One JSON object, for scripts.
        #[arg(long)]
        json: bool,
    },
    /// Create or repair the cluster's znodes and their ACLs.
    Init {
        /// Also delete the breadcrumb and control (refused while any warden runs).
        #[arg(long)]
        force: bool,
    },
    /// Validate the config without contacting anything; print it resolved, secrets masked.
    CheckConfig,
    /// Planned switchover: the active steps down cleanly and NODE (or the eligible standby
    /// of highest priority) takes over; waits for the new active and prints it and the
    /// time taken; exit 1 when the old active called it off (its demote could not hand over).
    Failover(ops::failover::FailoverArgs),
    /// Maintenance: while paused nobody is promoted or demoted automatically.
    Pause(ops::pause::PauseArgs),
    /// End maintenance.
    Resume(ops::pause::ResumeArgs),
    /// The cluster's last 100 transitions, newest first.
    History(ops::history::HistoryArgs),
    /// Manual fencing: run the fence chain against NODE's incarnation in the breadcrumb, or
    /// record an operator's word that NODE is down (--confirm).
    Fence(ops::fence::FenceArgs),
    /// The remote half of ssh fencing (SPEC §5): reads no config and no environment.
    #[command(name = "fence-local", hide = true)]
    FenceLocal(ops::fence_local::FenceLocalArgs),
    /// Print a shell completion script (for packaging).
    #[command(hide = true)]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the man page in roff (for packaging).
    #[command(hide = true)]
    Manpage,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_error(&e),
    };
    let result = run(cli);
    exit(result)
}

/// The one place an error is printed and mapped to the exit code (SPEC §7).
fn exit(result: Result<(), Error>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(line) = e.report() {
                errln!("{line}");
            }
            ExitCode::from(e.exit_code())
        }
    }
}

/// A parse error, or `--help`/`--version`, which clap renders: help and version go to
/// standard output through [`out`] (output that cannot be written ends the command as for
/// SIGPIPE), errors to stderr with exit 2.
fn clap_error(e: &clap::Error) -> ExitCode {
    if e.use_stderr() {
        // clap's own print ignores write errors; it never panics.
        let _ = e.print();
        return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(warden::error::EXIT_USAGE));
    }
    let text = if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        e.render().ansi().to_string()
    } else {
        e.render().to_string()
    };
    out!("{text}");
    ExitCode::SUCCESS
}

fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::Local(format!("cannot start the async runtime: {e}")))
}

fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::CheckConfig => {
            let cfg = config::load(&cli.config)?;
            for w in cfg.warnings() {
                errln!("warning: {w}");
            }
            out!("{}", cfg.render_masked());
            Ok(())
        }
        Command::Run => {
            let cfg = config::load(&cli.config)?;
            init_logging(&cfg);
            for w in cfg.warnings() {
                tracing::warn!("{w}");
            }
            match runtime()?.block_on(warden::launch::run(cfg)) {
                Ok(0) => Ok(()),
                // Said in the log already (a second stop signal).
                Ok(code) => Err(Error::Stopped(u8::try_from(code).unwrap_or(1))),
                Err(fatal) => {
                    tracing::error!("{fatal}");
                    Err(fatal.into())
                }
            }
        }
        Command::Status { json } => operator(&cli.config, OpCommand::Status { json }),
        Command::Init { force } => operator(&cli.config, OpCommand::Init { force }),
        Command::Failover(args) => operator(&cli.config, OpCommand::Failover(args)),
        Command::Pause(args) => operator(&cli.config, OpCommand::Pause(args)),
        Command::Resume(args) => operator(&cli.config, OpCommand::Resume(args)),
        Command::History(args) => operator(&cli.config, OpCommand::History(args)),
        Command::Fence(args) => operator(&cli.config, OpCommand::Fence(args)),
        // Both are made in memory and written through `out`: clap_complete panics on a
        // write error of its own.
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "warden", &mut script);
            ops::out::write_bytes(&script);
            Ok(())
        }
        Command::Manpage => {
            let mut page = Vec::new();
            clap_mangen::Man::new(Cli::command())
                .render(&mut page)
                .map_err(|e| Error::Local(format!("cannot render the man page: {e}")))?;
            ops::out::write_bytes(&page);
            Ok(())
        }
        Command::FenceLocal(args) => runtime()?.block_on(ops::fence_local::run(&args)),
    }
}

/// The commands that run on the configured store.
enum OpCommand {
    Status { json: bool },
    Init { force: bool },
    Failover(ops::failover::FailoverArgs),
    Pause(ops::pause::PauseArgs),
    Resume(ops::pause::ResumeArgs),
    History(ops::history::HistoryArgs),
    Fence(ops::fence::FenceArgs),
}

/// Loads the config and runs an operator command on a runtime of its own, on the store it
/// names.
fn operator(config: &std::path::Path, command: OpCommand) -> Result<(), Error> {
    let cfg = config::load(config)?;
    let store = match Configured::from_config(&cfg) {
        Ok(store) => store,
        // A store that cannot be used as configured (an unreadable credentials file) is
        // said as the store's refusal; `status` and `init` have no words of their own.
        Err(why) => {
            let refused = StoreError::Auth(why);
            return Err(match command {
                OpCommand::Status { .. } | OpCommand::Init { .. } => refused.into(),
                _ => OpError::store("reach the cluster")(refused).into(),
            });
        }
    };
    runtime()?.block_on(store.run(OnStore { cfg, command }))
}

/// An operator command with its config, as a job on the store.
struct OnStore {
    cfg: Config,
    command: OpCommand,
}

impl StoreJob for OnStore {
    type Output = Result<(), Error>;

    async fn run<C: Connector>(self, store: C) -> Result<(), Error> {
        let cfg = &self.cfg;
        match self.command {
            OpCommand::Status { json } => {
                let snap = ops::status::snapshot(&store).await?;
                if json {
                    outln!("{}", ops::status::to_json(cfg, &snap));
                } else {
                    out!("{}", ops::status::to_text(cfg, &snap));
                }
                Ok(())
            }
            OpCommand::Init { force } => match ops::init::init(cfg, &store, force).await? {
                ops::init::InitOutcome::Done(lines) => {
                    for l in lines {
                        outln!("{l}");
                    }
                    Ok(())
                }
                ops::init::InitOutcome::Refused(why) => Err(OpError::Refused(why).into()),
            },
            OpCommand::Failover(args) => Ok(ops::failover::failover(cfg, &store, &args).await?),
            OpCommand::Pause(args) => Ok(ops::pause::pause(cfg, &store, &args).await?),
            OpCommand::Resume(args) => Ok(ops::pause::resume(cfg, &store, &args).await?),
            OpCommand::History(args) => Ok(ops::history::history(cfg, &store, &args).await?),
            OpCommand::Fence(args) => Ok(ops::fence::fence(cfg, &store, &args).await?),
        }
    }
}

/// Logs go to stderr (journald), one line per event; `RUST_LOG` overrides `log.level`.
fn init_logging(cfg: &Config) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&cfg.log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only on a terminal: journald and log files get plain text. A line that
    // cannot be written is dropped (SPEC §9): a dead journald or a closed pipe never
    // takes the daemon down, and tracing is told nothing of the error (its own report of
    // it is an `eprintln!`, which panics on the same broken stderr).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .log_internal_errors(false)
        .with_writer(|| DropErrors(std::io::stderr()));
    match cfg.log.format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// A log sink that drops what it cannot write: a full disk or a closed pipe loses log
/// lines, never the daemon.
struct DropErrors<W>(W);

impl<W: std::io::Write> std::io::Write for DropErrors<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // All of it counts as written: a partial write's rest would only fail again.
        let _ = self.0.write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = self.0.flush();
        Ok(())
    }
}
