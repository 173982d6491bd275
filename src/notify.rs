//! systemd service notifications (SPEC §10): `READY=1`, `STATUS=`, `WATCHDOG=1`,
//! `STOPPING=1`, sent to `NOTIFY_SOCKET`.
//!
//! Every function is a no-op when `NOTIFY_SOCKET` is unset (not under systemd
//! `Type=notify`). None fails or blocks for long: a notification that cannot be sent is
//! logged (once per run of failures) and dropped, since the daemon must go on either way;
//! a missed `WATCHDOG=1` is what the watchdog is for.
//!
//! The messages are formatted by the `sd-notify` crate. They are sent here rather than by
//! `sd_notify::notify` because that send has no time bound (a datagram send waits while
//! the receiver's queue is full, and it runs on the loop that drives the elector) and
//! does not reach abstract-namespace sockets (`@name`), which sd_notify(3) allows.
//!
//! The environment is left as it is (no `unset_env`): the service spawner strips
//! `NOTIFY_SOCKET` and `WATCHDOG_*` from the managed service's environment instead.

use crate::record::{Health, MemberRecord};
use sd_notify::NotifyState;
use std::ffi::OsString;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long one notification may wait for room in systemd's receive queue. systemd drains
/// it at once unless PID 1 itself is stuck; the loop that sends must not be.
const SEND_TIMEOUT: Duration = Duration::from_millis(100);

/// Set once `READY=1` was sent: systemd reads only the first.
static READY_SENT: AtomicBool = AtomicBool::new(false);
/// Set while notifications fail, so a dead socket is logged once, not at every ping.
static FAILING: AtomicBool = AtomicBool::new(false);

/// `READY=1`: start-up is done. Call it when this node is first in the election (standby or
/// holding the lock); only the first call of the process sends.
pub fn ready() {
    if socket().is_none() || READY_SENT.swap(true, Ordering::SeqCst) {
        return;
    }
    send(&[NotifyState::Ready]);
}

/// `STATUS=<line>`: the one line `systemctl status` shows. Line breaks become spaces.
pub fn status(line: &str) {
    if socket().is_none() {
        return;
    }
    let line: String = line
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    send(&[NotifyState::Status(&line)]);
}

/// `STOPPING=1`: shutdown has begun (the stop signal arrived).
pub fn stopping() {
    if socket().is_none() {
        return;
    }
    send(&[NotifyState::Stopping]);
}

/// `WATCHDOG=1`: this process is alive. Call it every [`watchdog_interval`] from the loop
/// that drives the elector, so that a hung loop stops the pings and systemd kills warden.
pub fn watchdog() {
    if socket().is_none() {
        return;
    }
    send(&[NotifyState::Watchdog]);
}

/// How often to call [`watchdog`]: half of `WATCHDOG_USEC`, as sd_watchdog_enabled(3)
/// advises. `None` without `NOTIFY_SOCKET`, without `WATCHDOG_USEC`, when `WATCHDOG_PID`
/// names another process, or when `WATCHDOG_USEC` is 0.
pub fn watchdog_interval() -> Option<Duration> {
    socket()?;
    sd_notify::watchdog_enabled()
        .map(|usec| usec / 2)
        .filter(|half| !half.is_zero())
}

/// The one-line role summary for [`status`]: `active, epoch 7, healthy`.
pub fn summary(member: &MemberRecord) -> String {
    let mut line = member.role.to_string();
    if let Some(epoch) = member.node.epoch {
        line.push_str(&format!(", epoch {epoch}"));
    }
    line.push_str(match member.health {
        Health::Healthy => ", healthy",
        Health::Unhealthy => ", unhealthy",
        Health::Unknown => ", health unknown",
    });
    line
}

fn socket() -> Option<OsString> {
    std::env::var_os("NOTIFY_SOCKET").filter(|s| !s.is_empty())
}

fn send(states: &[NotifyState]) {
    let Some(path) = socket() else {
        return;
    };
    let mut msg = String::new();
    for s in states {
        msg.push_str(&s.to_string());
        msg.push('\n');
    }
    match send_datagram(&path, msg.as_bytes()) {
        Ok(()) => {
            if FAILING.swap(false, Ordering::Relaxed) {
                tracing::info!("systemd notifications are delivered again");
            }
        }
        Err(e) => {
            if !FAILING.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "cannot notify systemd through NOTIFY_SOCKET={}: {e}; check that the \
                     unit is Type=notify and that the socket exists (further failures are \
                     not logged until one succeeds)",
                    path.to_string_lossy()
                );
            }
        }
    }
}

fn send_datagram(path: &OsString, msg: &[u8]) -> std::io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    sock.set_write_timeout(Some(SEND_TIMEOUT))?;
    let bytes = path.as_encoded_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        sock.connect_addr(&addr)?;
    } else {
        sock.connect(path)?;
    }
    let sent = sock.send(msg)?;
    if sent != msg.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            format!("sent {sent} of {} bytes", msg.len()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{NodeRecord, Role};

    #[test]
    fn the_summary_names_role_epoch_and_health() {
        let m = MemberRecord::bare(
            NodeRecord {
                node_id: "n1".into(),
                epoch: Some(7),
                ..Default::default()
            },
            Role::Active,
            Health::Healthy,
        );
        assert_eq!(summary(&m), "active, epoch 7, healthy");
        let m = MemberRecord::bare(NodeRecord::default(), Role::Ineligible, Health::Unknown);
        assert_eq!(summary(&m), "ineligible, health unknown");
    }
}
