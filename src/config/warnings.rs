//! Warnings: settings that work but that an operator should know about.

use super::*;

/// A duration for messages: from a second up to the millisecond (`1s 666ms` rather than
/// `1s 666ms 666us 666ns`), below a second exactly and with its unit (`1ns`, `1ms 500us`),
/// so that a sub-millisecond value is never shown as `0s`.
pub(super) fn fmt_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".to_string();
    }
    let shown = if d < Duration::from_secs(1) {
        d
    } else {
        Duration::new(d.as_secs(), d.subsec_millis() * 1_000_000)
    };
    humantime::format_duration(shown).to_string()
}

/// A computed duration (a sixth of the session timeout) for messages: to the millisecond
/// (`333ms`, not `333ms 333us 333ns`), exactly when below one.
pub(super) fn fmt_computed(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        return fmt_duration(d);
    }
    fmt_duration(Duration::new(d.as_secs(), d.subsec_millis() * 1_000_000))
}

impl Config {
    /// Settings that are valid but that an operator should know the consequences of;
    /// `warden check-config` prints them (SPEC §7) and `run` logs them.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let zk = &self.coordination.zookeeper;
        let (grace_key, grace) = match self.service.mode {
            ServiceMode::Spawn => ("service.stop_timeout", self.service.stop_timeout),
            ServiceMode::Hooks => ("service.hook_timeout", self.service.hook_timeout),
        };
        let lease = self.lease();
        let renewal = self.renewal_interval();
        if lease.saturating_sub(grace) < renewal {
            out.push(format!(
                "{grace_key} = {} leaves less than one renewal interval ({}) of the {} lease \
                 (half of coordination.{}.session_timeout = {}), so a single late \
                 renewal demotes the active; raise session_timeout or lower {grace_key}",
                fmt_duration(grace),
                fmt_computed(renewal),
                fmt_computed(lease),
                self.coordination.backend.as_str(),
                fmt_duration(self.session_timeout()),
            ));
        }
        let backend = self.coordination.backend;
        for (name, set) in [
            ("mysql", self.coordination.mysql.is_some()),
            ("redis", self.coordination.redis.is_some()),
        ] {
            if set && backend.as_str() != name {
                out.push(format!(
                    "[coordination.{name}] is ignored: backend = \"{}\"",
                    backend.as_str()
                ));
            }
        }
        if let Some(st) = self.store() {
            let key = format!("coordination.{}", backend.as_str());
            if st.poll_interval > st.session_timeout / 6 {
                out.push(format!(
                    "{key}.poll_interval = {} is longer than a renewal interval ({}): standbys \
                     notice a released or expired lock later than the active renews it",
                    fmt_duration(st.poll_interval),
                    fmt_computed(st.session_timeout / 6)
                ));
            }
            if st.session_timeout < Duration::from_secs(3) {
                out.push(format!(
                    "{key}.session_timeout = {} is short for a database: one slow statement \
                     (a checkpoint, a lock wait) longer than the lease demotes the active",
                    fmt_duration(st.session_timeout)
                ));
            }
        }
        if backend == Backend::Zookeeper
            && zk.auth.is_none()
            && zk.auth_file.is_none()
            && zk.acl == AclMode::Open
        {
            out.push(
                "coordination.zookeeper has no auth and acl = \"open\": anyone who can reach \
                 ZooKeeper can change the election (set auth_file and acl = \"creator\")"
                    .to_string(),
            );
        }
        let s = &self.service;
        let ignored: &[(&str, bool)] = match s.mode {
            ServiceMode::Spawn => &[
                ("service.promote", !s.promote.is_empty()),
                ("service.demote", !s.demote.is_empty()),
                ("service.follow", !s.follow.is_empty()),
                ("service.pidfile", s.pidfile.is_some()),
            ],
            ServiceMode::Hooks => &[("service.command", !s.command.is_empty())],
        };
        let (mode, other) = match s.mode {
            ServiceMode::Spawn => ("spawn", "hooks"),
            ServiceMode::Hooks => ("hooks", "spawn"),
        };
        for (key, _) in ignored.iter().filter(|(_, set)| *set) {
            out.push(format!(
                "{key} is ignored: it applies to service.mode = \"{other}\", and this node \
                 runs in \"{mode}\" mode"
            ));
        }
        if s.mode == ServiceMode::Hooks && !s.follow.is_empty() && self.cluster.port.is_none() {
            // Each node's record carries its own port: the port is what the others' hooks
            // are told of this node, so only its own config can say it is missing.
            out.push(
                "service.follow is set but cluster.port is not: while this node is active, \
                 the other nodes' follow hooks are told no WARDEN_ACTIVE_PORT, and a \
                 switchover's demote hook handing over to this node no \
                 WARDEN_SUCCESSOR_PORT; a hook that points a replica at the active needs \
                 it (set cluster.port to the service's port, as examples/postgresql and \
                 examples/redis do)"
                    .to_string(),
            );
        }
        if self.service.mode == ServiceMode::Hooks && self.health.kind == HealthKind::None {
            out.push(
                "health.kind = \"none\" in hooks mode: warden cannot tell when the service \
                 fails, so the active is never replaced while its warden runs"
                    .to_string(),
            );
        }
        if self.health.timeout > self.health.interval {
            out.push(format!(
                "health.timeout = {} is longer than health.interval = {}: a hanging check \
                 delays the next one, so failures are noticed later than fall × interval",
                fmt_duration(self.health.timeout),
                fmt_duration(self.health.interval)
            ));
        }
        if !self.fence.is_empty()
            && self
                .fence
                .iter()
                .all(|m| matches!(m, FenceMethod::Signal(_)))
        {
            out.push(
                "every [[fence]] is kind = \"signal\", which only acts on an old active that ran \
                 on this host: taking over from another node will fail to fence it (add an ssh \
                 or script method)"
                    .to_string(),
            );
        }
        if let Some(api) = &self.api {
            if !api.listen.ip().is_loopback() {
                out.push(format!(
                    "api.listen = {} is not a loopback address: anyone who can reach it can \
                     read this node's role and metrics (the API has no authentication)",
                    api.listen
                ));
            }
        }
        out
    }
}
