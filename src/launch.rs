//! `warden run` put together: the config, this host ([`ThisHost`]), the coordination store
//! the config names, the stop signals and the HTTP face, around the driver
//! ([`crate::daemon::Daemon`]), which knows none of them by name.

use crate::api;
use crate::config::Config;
use crate::coord::any::AnyConnector;
use crate::daemon::{Daemon, Fatal};
use crate::error::{EXIT_FAILED, EXIT_USAGE};
use crate::host::{self, ThisHost};
use tokio::sync::mpsc;

/// Runs the daemon on this host until it is stopped by SIGTERM or SIGINT; returns the
/// exit code.
pub async fn run(cfg: Config) -> Result<i32, Fatal> {
    use tokio::signal::unix::{signal, SignalKind};
    // The backend the config names, with its credentials read: an unreadable or too open
    // credentials file is a configuration error (exit 2).
    let connector = AnyConnector::from_config(&cfg).map_err(|message| Fatal {
        code: EXIT_USAGE,
        message,
    })?;
    // Bound before anything else, so a taken port is a start-up error (exit 2).
    let listener = match &cfg.api {
        Some(a) => Some(api::bind(a.listen).await.map_err(|e| Fatal {
            code: EXIT_USAGE,
            message: e.to_string(),
        })?),
        None => None,
    };
    let me = host::identity(&cfg).map_err(|message| Fatal {
        code: EXIT_FAILED,
        message,
    })?;
    let mut d = Daemon::new(cfg, me, connector, ThisHost)?;
    let _api = listener.map(|l| {
        AbortOnDrop(tokio::spawn(api::serve(
            l,
            d.view.subscribe(),
            d.metrics.clone(),
        )))
    });
    let mut term = signal(SignalKind::terminate()).map_err(|e| Fatal {
        code: EXIT_FAILED,
        message: format!("cannot install the SIGTERM handler: {e}"),
    })?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| Fatal {
        code: EXIT_FAILED,
        message: format!("cannot install the SIGINT handler: {e}"),
    })?;
    let (stop_tx, stops) = mpsc::unbounded_channel();
    let _signals = AbortOnDrop(tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            if stop_tx.send(()).is_err() {
                return;
            }
        }
    }));
    d.run(stops).await
}

/// Aborts the task when dropped: the HTTP face ends with the daemon.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
