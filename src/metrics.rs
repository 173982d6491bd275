//! warden's Prometheus metrics (SPEC §10), served by [`crate::api`] at `/metrics`.
//!
//! One [`Metrics`] per process, cloned into whoever records: the daemon's loop and its
//! fence tasks. Every method is a few atomic operations and never blocks on I/O.
//!
//! | metric | type | meaning |
//! | --- | --- | --- |
//! | `warden_role{role}` | gauge | 1 for this node's current role, 0 for every other role |
//! | `warden_epoch` | gauge | the epoch of this node's member record; 0 while it has none |
//! | `warden_transitions_total{from,to}` | counter | role transitions of this node |
//! | `warden_fence_attempts_total{method,outcome}` | counter | fence method runs, by outcome `fenced`, `not_applicable`, `failed` |
//! | `warden_last_failover_seconds` | gauge | how long this node's last takeover took (below); 0 before the first |
//! | `warden_coordination_connected` | gauge | 1 while a ZooKeeper session is open |
//! | `warden_health_checks_total{result}` | counter | health probes run, by result `pass`, `fail` |
//!
//! **`warden_last_failover_seconds`** is measured on the node that takes over: from the
//! moment it left `standby` for `fencing` or `promoting` (it won the lock) to the moment it
//! became `active` (its service started, or its promote hook succeeded). It includes
//! fencing the old active and the breadcrumb write, not the time the cluster spent without
//! an active before this node won the lock (the old active's session expiry). A takeover
//! that ends anywhere but `active` (fencing or promotion failed) leaves the gauge as it was.
//!
//! [`Metrics::encode`] writes the Prometheus text exposition format 0.0.4, the one
//! `text/plain; version=0.0.4` names and that every Prometheus version scrapes.

use crate::record::Role;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use warden_fencing::FenceReport;

/// The `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleLabels {
    role: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransitionLabels {
    from: &'static str,
    to: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FenceLabels {
    method: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

struct Inner {
    registry: Registry,
    role: Family<RoleLabels, Gauge>,
    epoch: Gauge,
    transitions: Family<TransitionLabels, Counter>,
    fence_attempts: Family<FenceLabels, Counter>,
    last_failover: Gauge<f64, AtomicU64>,
    connected: Gauge,
    health_checks: Family<ResultLabels, Counter>,
    /// When this node left `standby` to take over, while that takeover is under way.
    takeover_started: Mutex<Option<Instant>>,
}

/// The process's metrics: cheap to clone (one `Arc`), shareable across tasks.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Every metric registered, the role `ineligible`, nothing counted yet.
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let role = Family::<RoleLabels, Gauge>::default();
        let epoch = Gauge::default();
        let transitions = Family::<TransitionLabels, Counter>::default();
        let fence_attempts = Family::<FenceLabels, Counter>::default();
        let last_failover = Gauge::<f64, AtomicU64>::default();
        let connected = Gauge::default();
        let health_checks = Family::<ResultLabels, Counter>::default();
        registry.register(
            "warden_role",
            "This node's role: 1 for the current one, 0 for the others",
            role.clone(),
        );
        registry.register(
            "warden_epoch",
            "The epoch of this node's member record (0: none yet)",
            epoch.clone(),
        );
        // Counters are registered without `_total`: the encoder appends it.
        registry.register(
            "warden_transitions",
            "Role transitions of this node",
            transitions.clone(),
        );
        registry.register(
            "warden_fence_attempts",
            "Fence method runs by method and outcome (fenced, not_applicable, failed)",
            fence_attempts.clone(),
        );
        registry.register(
            "warden_last_failover_seconds",
            "From leaving standby to active (service started) in this node's last takeover",
            last_failover.clone(),
        );
        registry.register(
            "warden_coordination_connected",
            "1 while a coordination service session is open",
            connected.clone(),
        );
        registry.register(
            "warden_health_checks",
            "Health probes run, by result (pass, fail)",
            health_checks.clone(),
        );
        // Series that exist from the start, so dashboards and rate() see zeros, not gaps.
        for r in Role::ALL {
            role.get_or_create(&RoleLabels { role: r.as_str() }).set(0);
        }
        for result in ["pass", "fail"] {
            health_checks
                .get_or_create(&ResultLabels { result })
                .inc_by(0);
        }
        let m = Metrics {
            inner: Arc::new(Inner {
                registry,
                role,
                epoch,
                transitions,
                fence_attempts,
                last_failover,
                connected,
                health_checks,
                takeover_started: Mutex::new(None),
            }),
        };
        m.set_role(Role::Ineligible);
        m
    }

    /// Sets `warden_role`: 1 for `role`, 0 for every other role.
    pub fn set_role(&self, role: Role) {
        for r in Role::ALL {
            self.inner
                .role
                .get_or_create(&RoleLabels { role: r.as_str() })
                .set(i64::from(r == role));
        }
    }

    /// Sets `warden_epoch` (0 for `None`).
    pub fn set_epoch(&self, epoch: Option<u64>) {
        let v = i64::try_from(epoch.unwrap_or(0)).unwrap_or(i64::MAX);
        self.inner.epoch.set(v);
    }

    /// Records a role transition at `now`: counts it, sets `warden_role` to `to`, and times
    /// a takeover (see the module docs) into `warden_last_failover_seconds`.
    pub fn transition(&self, from: Role, to: Role, now: Instant) {
        self.inner
            .transitions
            .get_or_create(&TransitionLabels {
                from: from.as_str(),
                to: to.as_str(),
            })
            .inc();
        self.set_role(to);
        let took = {
            // A poisoned lock only means a panic elsewhere mid-update of an Option<Instant>,
            // which cannot leave it inconsistent: go on with its value.
            let mut started = self
                .inner
                .takeover_started
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            match to {
                Role::Fencing | Role::Promoting if from == Role::Standby => {
                    *started = Some(now);
                    None
                }
                Role::Fencing | Role::Promoting => None,
                Role::Active => started.take().map(|s| now.saturating_duration_since(s)),
                _ => {
                    *started = None;
                    None
                }
            }
        };
        if let Some(took) = took {
            self.failover_took(took);
        }
    }

    /// Sets `warden_last_failover_seconds`. [`transition`](Self::transition) already calls
    /// this when a takeover completes; call it only to time a takeover some other way.
    pub fn failover_took(&self, took: Duration) {
        self.inner.last_failover.set(took.as_secs_f64());
    }

    /// Counts one fence method run: `method` is [`warden_fencing::FenceMethod::label`]
    /// (`signal`, `ssh`, `script:NAME`), `outcome` is [`warden_fencing::Outcome::label`]
    /// (`fenced`, `not_applicable`, `failed`).
    pub fn fence_attempt(&self, method: &str, outcome: &str) {
        self.inner
            .fence_attempts
            .get_or_create(&FenceLabels {
                method: method.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// Counts every attempt of one run of the fence chain.
    pub fn fence_report(&self, report: &FenceReport) {
        for a in &report.attempts {
            self.fence_attempt(&a.method, a.outcome.label());
        }
    }

    /// Sets `warden_coordination_connected`.
    pub fn set_connected(&self, connected: bool) {
        self.inner.connected.set(i64::from(connected));
    }

    /// Counts one health probe.
    pub fn health_check(&self, pass: bool) {
        let result = if pass { "pass" } else { "fail" };
        self.inner
            .health_checks
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Every metric in the Prometheus text format 0.0.4 ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut open_metrics = String::new();
        // Writing into a String cannot fail; the encoder's own errors come only from the
        // writer, so an empty answer here is unreachable in practice.
        if prometheus_client::encoding::text::encode_registry(
            &mut open_metrics,
            &self.inner.registry,
        )
        .is_err()
        {
            return String::new();
        }
        to_text_format(&open_metrics)
    }
}

/// prometheus-client writes OpenMetrics; the 0.0.4 text format differs only in what
/// OpenMetrics adds: a counter family is named without `_total` in its `# HELP`/`# TYPE`
/// lines (0.0.4 names it as its samples), and `# UNIT`/`# EOF` lines (none here: no
/// units registered, and `encode_registry` writes no `# EOF`).
fn to_text_format(open_metrics: &str) -> String {
    let mut out = String::with_capacity(open_metrics.len() + 64);
    let mut counters: Vec<&str> = Vec::new();
    for line in open_metrics.lines() {
        if let Some(name) = line
            .strip_prefix("# TYPE ")
            .and_then(|rest| rest.strip_suffix(" counter"))
        {
            counters.push(name);
        }
    }
    for line in open_metrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(&name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        match renamed {
            Some(l) => out.push_str(&l),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn encodes_every_metric_in_the_text_format() {
        let m = Metrics::new();
        m.set_epoch(Some(7));
        m.set_connected(true);
        m.health_check(true);
        m.health_check(true);
        m.health_check(false);
        m.fence_attempt("script:rec", "failed");
        m.fence_attempt("signal", "fenced");
        let now = Instant::now();
        m.transition(Role::Ineligible, Role::Standby, now);
        let text = m.encode();
        assert_eq!(sample(&text, r#"warden_role{role="standby"}"#), Some(1.0));
        assert_eq!(sample(&text, r#"warden_role{role="active"}"#), Some(0.0));
        assert_eq!(sample(&text, "warden_epoch"), Some(7.0));
        assert_eq!(sample(&text, "warden_coordination_connected"), Some(1.0));
        assert_eq!(
            sample(&text, r#"warden_health_checks_total{result="pass"}"#),
            Some(2.0)
        );
        assert_eq!(
            sample(&text, r#"warden_health_checks_total{result="fail"}"#),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"warden_fence_attempts_total{method="script:rec",outcome="failed"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"warden_transitions_total{from="ineligible",to="standby"}"#
            ),
            Some(1.0)
        );
        assert!(text.contains("# TYPE warden_transitions_total counter\n"));
        assert!(text.contains("# HELP warden_transitions_total "));
        assert!(text.contains("# TYPE warden_role gauge\n"));
        assert!(!text.contains("# EOF"));
        assert!(!text.contains("# UNIT"));
    }

    #[test]
    fn a_takeover_is_timed_from_leaving_standby_to_active() {
        let m = Metrics::new();
        let t0 = Instant::now();
        let last = |m: &Metrics| sample(&m.encode(), "warden_last_failover_seconds");
        assert_eq!(last(&m), Some(0.0));
        m.transition(Role::Ineligible, Role::Standby, t0);
        m.transition(
            Role::Standby,
            Role::Fencing,
            t0 + Duration::from_millis(100),
        );
        m.transition(
            Role::Fencing,
            Role::Promoting,
            t0 + Duration::from_millis(900),
        );
        m.transition(
            Role::Promoting,
            Role::Active,
            t0 + Duration::from_millis(1350),
        );
        assert_eq!(last(&m), Some(1.25));
        // A takeover that fails leaves the last one's figure, and a later start from
        // ineligible (a restart after demotion) is not a takeover.
        m.transition(Role::Active, Role::Demoting, t0 + Duration::from_secs(5));
        m.transition(
            Role::Demoting,
            Role::Ineligible,
            t0 + Duration::from_secs(6),
        );
        m.transition(Role::Ineligible, Role::Standby, t0 + Duration::from_secs(7));
        m.transition(Role::Standby, Role::Fencing, t0 + Duration::from_secs(8));
        m.transition(Role::Fencing, Role::Ineligible, t0 + Duration::from_secs(9));
        m.transition(Role::Ineligible, Role::Active, t0 + Duration::from_secs(10));
        assert_eq!(last(&m), Some(1.25));
        // Neutral -> active (a renewal came back) is not a takeover either.
        m.transition(Role::Active, Role::Neutral, t0 + Duration::from_secs(11));
        m.transition(Role::Neutral, Role::Active, t0 + Duration::from_secs(12));
        assert_eq!(last(&m), Some(1.25));
        m.transition(Role::Active, Role::Demoting, t0 + Duration::from_secs(13));
        m.transition(Role::Demoting, Role::Standby, t0 + Duration::from_secs(14));
        m.transition(Role::Standby, Role::Promoting, t0 + Duration::from_secs(15));
        m.transition(
            Role::Promoting,
            Role::Active,
            t0 + Duration::from_millis(15_500),
        );
        assert_eq!(last(&m), Some(0.5));
    }

    #[test]
    fn the_role_gauge_has_exactly_one_current_role() {
        let m = Metrics::new();
        let text = m.encode();
        let ones: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("warden_role{") && l.ends_with(" 1"))
            .collect();
        assert_eq!(ones, vec![r#"warden_role{role="ineligible"} 1"#]);
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("warden_role{"))
                .count(),
            Role::ALL.len()
        );
        m.set_role(Role::Active);
        assert_eq!(
            sample(&m.encode(), r#"warden_role{role="active"}"#),
            Some(1.0)
        );
        assert_eq!(
            sample(&m.encode(), r#"warden_role{role="ineligible"}"#),
            Some(0.0)
        );
    }

    #[test]
    fn an_epoch_beyond_i64_saturates_and_none_is_zero() {
        let m = Metrics::new();
        m.set_epoch(Some(u64::MAX));
        assert_eq!(sample(&m.encode(), "warden_epoch"), Some(i64::MAX as f64));
        m.set_epoch(None);
        assert_eq!(sample(&m.encode(), "warden_epoch"), Some(0.0));
    }
}
