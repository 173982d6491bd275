//! The `warden` command line (SPEC §7): parse, load the config, call the library, map
//! errors to exit codes. Exit codes: 0 success; 1 the operation failed or was refused;
//! 2 usage or configuration error; 3 coordination service unreachable or auth refused.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use warden::config::{self, Config, LogFormat};
use warden::coord::StoreError;
use warden::ops;

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
    /// Planned switchover: the active steps down cleanly and NODE (or any healthy standby)
    /// takes over; waits for the new active and prints it and the time taken.
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
    let cli = Cli::parse();
    ExitCode::from(run(cli) as u8)
}

fn load(path: &std::path::Path) -> Result<Config, i32> {
    config::load(path).map_err(|e| {
        eprintln!("warden: {e}");
        2
    })
}

fn runtime() -> Result<tokio::runtime::Runtime, i32> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("warden: cannot start the async runtime: {e}");
            1
        })
}

/// Prints a coordination error and returns its exit code.
fn store_error(e: &StoreError) -> i32 {
    eprintln!("warden: {e}");
    if e.is_unreachable() {
        3
    } else {
        1
    }
}

fn run(cli: Cli) -> i32 {
    match cli.command {
        Command::CheckConfig => {
            let cfg = match load(&cli.config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            for w in cfg.warnings() {
                eprintln!("warning: {w}");
            }
            print!("{}", cfg.render_masked());
            0
        }
        Command::Run => {
            let cfg = match load(&cli.config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            init_logging(&cfg);
            for w in cfg.warnings() {
                tracing::warn!("{w}");
            }
            let rt = match runtime() {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            match rt.block_on(warden::launch::run(cfg)) {
                Ok(code) => code,
                Err(fatal) => {
                    tracing::error!("{}", fatal.message);
                    eprintln!("warden: {}", fatal.message);
                    fatal.code
                }
            }
        }
        Command::Status { json } => operator(&cli.config, |cfg| async move {
            match ops::status::snapshot(&cfg).await {
                Ok(snap) => {
                    if json {
                        println!("{}", ops::status::to_json(&cfg, &snap));
                    } else {
                        print!("{}", ops::status::to_text(&cfg, &snap));
                    }
                    0
                }
                Err(e) => store_error(&e),
            }
        }),
        Command::Init { force } => operator(&cli.config, |cfg| async move {
            match ops::init::init(&cfg, force).await {
                Ok(ops::init::InitOutcome::Done(lines)) => {
                    for l in lines {
                        println!("{l}");
                    }
                    0
                }
                Ok(ops::init::InitOutcome::Refused(why)) => {
                    eprintln!("warden: {why}");
                    1
                }
                Err(e) => store_error(&e),
            }
        }),
        Command::Failover(args) => operator(&cli.config, |cfg| async move {
            ops::failover::failover(&cfg, &args).await
        }),
        Command::Pause(args) => operator(&cli.config, |cfg| async move {
            ops::pause::pause(&cfg, &args).await
        }),
        Command::Resume(args) => operator(&cli.config, |cfg| async move {
            ops::pause::resume(&cfg, &args).await
        }),
        Command::History(args) => operator(&cli.config, |cfg| async move {
            ops::history::history(&cfg, &args).await
        }),
        Command::Fence(args) => operator(&cli.config, |cfg| async move {
            ops::fence::fence(&cfg, &args).await
        }),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "warden", &mut std::io::stdout());
            0
        }
        Command::Manpage => {
            use clap::CommandFactory;
            match clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("warden: cannot write the man page: {e}");
                    1
                }
            }
        }
        Command::FenceLocal(args) => match runtime() {
            Ok(rt) => rt.block_on(ops::fence_local::run(&args)),
            Err(code) => code,
        },
    }
}

/// Loads the config and runs an operator command on a runtime of its own.
fn operator<F, Fut>(config: &std::path::Path, f: F) -> i32
where
    F: FnOnce(Config) -> Fut,
    Fut: std::future::Future<Output = i32>,
{
    let cfg = match load(config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match runtime() {
        Ok(rt) => rt.block_on(f(cfg)),
        Err(code) => code,
    }
}

/// Logs go to stderr (journald), one line per event; `RUST_LOG` overrides `log.level`.
fn init_logging(cfg: &Config) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&cfg.log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only on a terminal: journald and log files get plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match cfg.log.format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}
