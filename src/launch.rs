//! `warden run` put together: the config, this host ([`ThisHost`]), the coordination store
//! the config names, the stop signals and the HTTP face, around the driver
//! ([`crate::daemon::Daemon`]), which knows none of them by name.

use crate::api;
use crate::config::{Config, ServiceMode};
use crate::coord::configured::{Configured, StoreJob};
use crate::coord::Connector;
use crate::daemon::{Daemon, DaemonError, Hooked, ServiceRole, Spawned};
use crate::error::Fatal;
use crate::host::{self, ThisHost};
use tokio::sync::mpsc;

/// Runs the daemon on this host until it is stopped by SIGTERM, SIGINT or SIGQUIT (each
/// hands over first); returns the exit code. Every other signal that would end the
/// process by default and that only `kill` sends is logged and ignored (`stray_signals`).
pub async fn run(cfg: Config) -> Result<i32, Fatal> {
    // First of all: from here on no `kill -HUP` ends the daemon without a handover.
    let _stray = AbortOnDrop(stray_signals()?);
    // The backend the config names, with its credentials read: an unreadable or too open
    // credentials file is a configuration error (exit 2).
    let store = Configured::from_config(&cfg).map_err(Fatal::Usage)?;
    // Bound before anything else, so a taken port is a start-up error (exit 2).
    let listener = match &cfg.api {
        Some(a) => Some(
            api::bind(a.listen)
                .await
                .map_err(|e| Fatal::Usage(e.to_string()))?,
        ),
        None => None,
    };
    let me = host::identity(&cfg).map_err(Fatal::Failed)?;
    store.run(Run { cfg, me, listener }).await
}

/// `warden run` on the configured store.
struct Run {
    cfg: Config,
    me: crate::record::NodeRecord,
    listener: Option<api::ApiListener>,
}

impl StoreJob for Run {
    type Output = Result<i32, Fatal>;

    async fn run<C: Connector>(self, connector: C) -> Result<i32, Fatal> {
        let Run { cfg, me, listener } = self;
        // The one place the service's mode is chosen: the driver knows only its role.
        match cfg.service.mode {
            ServiceMode::Spawn => {
                let d = Daemon::<_, _, Spawned<_>>::new(cfg, me, connector, ThisHost)?;
                serve(d, listener).await
            }
            ServiceMode::Hooks => {
                let d = Daemon::<_, _, Hooked<_>>::new(cfg, me, connector, ThisHost)?;
                serve(d, listener).await
            }
        }
    }
}

/// Runs `d` with its HTTP face on `listener`, until a stop signal ends it.
async fn serve<C: Connector, R: ServiceRole<ThisHost>>(
    mut d: Daemon<C, ThisHost, R>,
    listener: Option<api::ApiListener>,
) -> Result<i32, Fatal> {
    use tokio::signal::unix::{signal, SignalKind};
    let _api = listener.map(|l| {
        AbortOnDrop(tokio::spawn(api::serve(
            l,
            d.view.subscribe(),
            d.metrics.clone(),
        )))
    });
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| Fatal::Failed(format!("cannot install the SIGTERM handler: {e}")))?;
    let mut int = signal(SignalKind::interrupt())
        .map_err(|e| Fatal::Failed(format!("cannot install the SIGINT handler: {e}")))?;
    // SIGQUIT (Ctrl-\) would dump core with no handover; it stops as SIGTERM does.
    let mut quit = signal(SignalKind::quit())
        .map_err(|e| Fatal::Failed(format!("cannot install the SIGQUIT handler: {e}")))?;
    let (stop_tx, stops) = mpsc::unbounded_channel();
    let _signals = AbortOnDrop(tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
                _ = quit.recv() => {
                    tracing::info!("received SIGQUIT: stopping with a handover, as on SIGTERM");
                }
            }
            if stop_tx.send(()).is_err() {
                return;
            }
        }
    }));
    Ok(d.run(stops).await?)
}

/// Aborts the task when dropped: the HTTP face ends with the daemon.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The signals whose default action ends the process (most of them without a core) and
/// that the kernel never sends to a daemon on its own account, or sends as a warning
/// only: `run` logs and ignores them, so that no stray `kill` ends an active without a
/// handover. SIGXCPU and SIGXFSZ are the kernel's: ignored, a CPU limit still ends the
/// process at its hard limit (SIGKILL) and a file over its size limit fails the write
/// (a log line dropped). The crash signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT,
/// SIGTRAP, SIGSYS) keep their default: they mean this process is broken.
const STRAY: [(libc::c_int, &str); 11] = [
    (libc::SIGHUP, "SIGHUP"),
    (libc::SIGUSR1, "SIGUSR1"),
    (libc::SIGUSR2, "SIGUSR2"),
    (libc::SIGALRM, "SIGALRM"),
    (libc::SIGVTALRM, "SIGVTALRM"),
    (libc::SIGPROF, "SIGPROF"),
    (libc::SIGIO, "SIGIO"),
    (libc::SIGPWR, "SIGPWR"),
    (libc::SIGSTKFLT, "SIGSTKFLT"),
    (libc::SIGXCPU, "SIGXCPU"),
    (libc::SIGXFSZ, "SIGXFSZ"),
];

/// A stray signal is logged at most this often per kind: a loop of `kill -USR1` is one
/// line a minute.
const STRAY_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// The name of signal `signo` as `kill -l` spells it.
fn signal_name(signo: libc::c_int) -> String {
    if let Some((_, name)) = STRAY.iter().find(|(s, _)| *s == signo) {
        return (*name).to_string();
    }
    let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    match signo {
        s if s == min => "SIGRTMIN".to_string(),
        s if s == max => "SIGRTMAX".to_string(),
        s if s > min && s < max => format!("SIGRTMIN+{}", s - min),
        s => format!("signal {s}"),
    }
}

/// What the log says of a stray signal: SIGHUP is the "reload" reflex, so it says how
/// to load a changed config.
fn stray_message(name: &str, unlogged: u64) -> String {
    let more = if unlogged > 0 {
        format!(" ({unlogged} more since the last line about it)")
    } else {
        String::new()
    };
    if name == "SIGHUP" {
        format!(
            "received SIGHUP{more}: ignored; warden does not reload its config; \
             `systemctl restart warden` hands over and starts with the new one"
        )
    } else {
        format!(
            "received {name}{more}: ignored; warden gives it no meaning \
             (SIGTERM, SIGINT or SIGQUIT stop it with a handover)"
        )
    }
}

/// Installs a handler for every stray signal (see [`STRAY`]) and the realtime signals
/// SIGRTMIN..=SIGRTMAX, and logs each at most once per [`STRAY_LOG_EVERY`] per kind. A
/// handler (not SIG_IGN) is what exec resets to the default, so the service and hooks
/// get every signal at its default.
fn stray_signals() -> Result<tokio::task::JoinHandle<()>, Fatal> {
    use std::collections::HashMap;
    use tokio::signal::unix::{signal, SignalKind};
    let signos = STRAY
        .iter()
        .map(|(s, _)| *s)
        .chain(libc::SIGRTMIN()..=libc::SIGRTMAX());
    let (tx, mut rx) = mpsc::unbounded_channel::<libc::c_int>();
    let mut listeners = Vec::new();
    for signo in signos {
        let mut stream = signal(SignalKind::from_raw(signo)).map_err(|e| {
            Fatal::Failed(format!(
                "cannot install the {} handler: {e}",
                signal_name(signo)
            ))
        })?;
        let tx = tx.clone();
        listeners.push(AbortOnDrop(tokio::spawn(async move {
            while stream.recv().await.is_some() {
                if tx.send(signo).is_err() {
                    return;
                }
            }
        })));
    }
    drop(tx);
    Ok(tokio::spawn(async move {
        // Held here: the listeners end with this task.
        let _listeners = listeners;
        let mut last: HashMap<libc::c_int, (tokio::time::Instant, u64)> = HashMap::new();
        while let Some(signo) = rx.recv().await {
            let now = tokio::time::Instant::now();
            match last.get_mut(&signo) {
                Some((at, unlogged)) if now.duration_since(*at) < STRAY_LOG_EVERY => {
                    *unlogged += 1;
                }
                Some((at, unlogged)) => {
                    tracing::warn!("{}", stray_message(&signal_name(signo), *unlogged));
                    (*at, *unlogged) = (now, 0);
                }
                None => {
                    tracing::warn!("{}", stray_message(&signal_name(signo), 0));
                    last.insert(signo, (now, 0));
                }
            }
        }
    }))
}

/// SPEC §7: what the driver's stop means as an exit code. A configuration it cannot carry
/// out, and a store that will not take this node as configured, are usage errors (2:
/// systemd does not restart them); refused credentials say the store refused us (3).
impl From<DaemonError> for Fatal {
    fn from(e: DaemonError) -> Fatal {
        match e {
            DaemonError::Config(m) | DaemonError::Store(m) => Fatal::Usage(m),
            DaemonError::Auth(m) => Fatal::Unreachable(m),
        }
    }
}
