//! The fence chain: tries the configured methods in order until one fences the target.

use crate::outcome::{Attempt, FenceReport, MethodResult, Outcome};
use crate::{process, script, signal, ssh, FenceContext, FenceMethod, Target};
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// How long past its own timeout a method may take to clean up (kill its process group,
/// reap it, read its last output) and report why it stopped. Only beyond that does the
/// chain abandon the attempt: a method that overruns it is stuck in something it cannot
/// bound itself.
pub const OVERRUN_GRACE: Duration = Duration::from_secs(2);

/// What carries out one method's attempt. [`Local`] runs the real methods (ssh, a
/// `signal` on this host, a script); the simulation supplies its own, so the chain itself
/// (order, `nodes` lists, timeouts, abandoning an overrun) runs there unchanged.
pub trait Methods: Clone + Send + Sync + 'static {
    /// Runs `method` against `target` until it answers or `deadline`; dropping the future
    /// cancels the attempt.
    fn run(
        &self,
        method: &FenceMethod,
        ctx: &FenceContext,
        target: &Target,
        deadline: Instant,
    ) -> impl Future<Output = MethodResult> + Send;
}

/// The real methods, run from this process.
#[derive(Clone, Copy, Debug, Default)]
pub struct Local;

impl Methods for Local {
    async fn run(
        &self,
        method: &FenceMethod,
        ctx: &FenceContext,
        target: &Target,
        deadline: Instant,
    ) -> MethodResult {
        match method {
            FenceMethod::Ssh(m) => ssh::fence(m, ctx, target, deadline).await,
            FenceMethod::Signal(m) => signal::fence(m, ctx, target, deadline).await,
            FenceMethod::Script(m) => {
                script::fence(m, ctx, target, &method.label(), deadline).await
            }
        }
    }
}

/// The configured `[[fence]]` methods, in order, and what they know about this node.
#[derive(Clone, Debug)]
pub struct FenceChain<M: Methods = Local> {
    methods: Vec<FenceMethod>,
    ctx: FenceContext,
    runner: M,
}

impl FenceChain {
    /// A chain of `methods` (the `[[fence]]` tables, in config order) run from the node
    /// described by `ctx`.
    pub fn new(methods: Vec<FenceMethod>, ctx: FenceContext) -> Self {
        FenceChain::with_methods(methods, ctx, Local)
    }
}

impl<M: Methods> FenceChain<M> {
    /// A chain whose attempts `runner` carries out.
    pub fn with_methods(methods: Vec<FenceMethod>, ctx: FenceContext, runner: M) -> Self {
        FenceChain {
            methods,
            ctx,
            runner,
        }
    }

    /// The methods, in the order they are tried.
    pub fn methods(&self) -> &[FenceMethod] {
        &self.methods
    }

    /// What the methods know about this node.
    pub fn context(&self) -> &FenceContext {
        &self.ctx
    }

    /// Tries every method in order until one fences `target`. Each attempt runs under its
    /// method's timeout (plus [`OVERRUN_GRACE`] for its cleanup) and is logged.
    ///
    /// Dropping the returned future (a fence the daemon abandons: its session was lost,
    /// it is stopping) cancels the attempt under way, so nothing of it acts later: a
    /// script's process group is SIGKILLed, an ssh connection is shut down (the remote
    /// command loses its terminal and gets SIGHUP), and a `signal` attempt, which sends
    /// its signals once before it starts waiting, sends nothing more.
    pub async fn fence(&self, target: &Target) -> FenceReport {
        let mut report = FenceReport::default();
        for method in &self.methods {
            let label = method.label();
            let started = Instant::now();
            let result = match outside_nodes(method, target) {
                Some(why) => MethodResult::not_applicable(why),
                None => {
                    let deadline = process::deadline_after(started, method.timeout());
                    let run = self.run(method, target, deadline);
                    // On this bound the attempt's future is dropped, which cancels it: its
                    // script's group is killed, its ssh connection shut.
                    let bound = process::deadline_after(deadline, OVERRUN_GRACE);
                    match tokio::time::timeout_at(bound, run).await {
                        Ok(result) => result,
                        Err(_) => MethodResult::failed(format!(
                            "did not finish within its timeout of {}; abandoned",
                            humantime::format_duration(method.timeout())
                        )),
                    }
                }
            };
            let elapsed = started.elapsed();
            log_attempt(&label, target, &result, elapsed);
            let fenced = result.outcome == Outcome::Fenced;
            report.attempts.push(Attempt {
                method: label,
                outcome: result.outcome,
                elapsed,
            });
            if fenced {
                break;
            }
        }
        report
    }

    /// What each method would do to `target`, one line each, without running anything
    /// (`warden fence --dry-run`). It reads `/proc` to say which processes a `signal`
    /// would hit.
    pub fn plan(&self, target: &Target) -> Vec<String> {
        self.methods
            .iter()
            .map(|method| {
                let what = match outside_nodes(method, target) {
                    Some(why) => format!("not applicable ({why})"),
                    None => match method {
                        FenceMethod::Ssh(m) => ssh::plan(m, target),
                        FenceMethod::Signal(m) => signal::plan(m, &self.ctx, target),
                        FenceMethod::Script(m) => script::plan(m, &self.ctx, target),
                    },
                };
                format!("{}: {what}", method.label())
            })
            .collect()
    }

    async fn run(&self, method: &FenceMethod, target: &Target, deadline: Instant) -> MethodResult {
        self.runner.run(method, &self.ctx, target, deadline).await
    }
}

/// Why `method` may not act on `target` because of its `nodes` list, if so.
fn outside_nodes(method: &FenceMethod, target: &Target) -> Option<String> {
    let nodes = method.nodes()?;
    match &target.node_id {
        Some(id) if nodes.iter().any(|n| n == id) => None,
        Some(id) => Some(format!(
            "{id} is not in its nodes list [{}]",
            nodes.join(", ")
        )),
        None => Some(format!(
            "the target's node id is unknown (unreadable breadcrumb) and the method is bound \
             to nodes [{}]",
            nodes.join(", ")
        )),
    }
}

fn log_attempt(label: &str, target: &Target, result: &MethodResult, elapsed: Duration) {
    let elapsed_ms = elapsed.as_millis() as u64;
    let outcome = result.outcome.label();
    match &result.outcome {
        Outcome::Fenced => tracing::info!(
            method = label,
            target = target.label(),
            outcome,
            elapsed_ms,
            "fence {label} fenced {}: {}",
            target.label(),
            result.how.as_deref().unwrap_or("verified")
        ),
        Outcome::NotApplicable(why) => tracing::info!(
            method = label,
            target = target.label(),
            outcome,
            elapsed_ms,
            "fence {label} does not apply to {}: {why}",
            target.label()
        ),
        Outcome::Failed(why) => tracing::warn!(
            method = label,
            target = target.label(),
            outcome,
            elapsed_ms,
            "fence {label} failed on {}: {why}",
            target.label()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(method: &str, outcome: Outcome) -> Attempt {
        Attempt {
            method: method.to_string(),
            outcome,
            elapsed: Duration::from_millis(7),
        }
    }

    #[test]
    fn summary_names_the_winner_and_every_reason() {
        let report = FenceReport {
            attempts: vec![
                attempt("ssh", Outcome::Failed("host key mismatch".into())),
                attempt("signal", Outcome::NotApplicable("another host".into())),
                attempt("script:fence-by-port", Outcome::Fenced),
            ],
        };
        assert_eq!(report.fenced_by(), Some("script:fence-by-port"));
        assert_eq!(
            report.summary(),
            "fenced by script:fence-by-port: ssh: failed (host key mismatch) after 7ms; \
             signal: not applicable (another host) after 7ms; script:fence-by-port: fenced after 7ms"
        );
    }

    #[test]
    fn empty_chain_is_not_fenced() {
        let report = FenceReport::default();
        assert!(!report.is_fenced());
        assert_eq!(
            report.summary(),
            "NOT fenced: no fence method is configured"
        );
    }
}
