//! `kind = "signal"`: fence an incarnation that ran on this host, on this boot, by
//! signalling its processes.

use crate::chain::MethodResult;
use crate::process::{self, TerminateOptions};
use crate::{FenceContext, SignalFence, Target};
use tokio::time::Instant;

/// Where the target ran, as far as this method can tell.
enum Locality {
    /// On this host, since its last boot: its processes, if any, are ours to see.
    ThisBoot,
    /// On this host before a reboot, which ended all of it.
    Rebooted(String),
    /// Elsewhere, or unknown.
    Elsewhere(String),
}

fn locality(ctx: &FenceContext, target: &Target) -> Locality {
    if ctx.boot_id.is_empty() {
        return Locality::Elsewhere(
            "this host's boot id is unknown, so warden cannot tell whether the target ran here"
                .to_string(),
        );
    }
    let same_host = target
        .host
        .as_deref()
        .is_some_and(|h| h.eq_ignore_ascii_case(&ctx.host));
    match target.boot_id.as_deref() {
        Some(b) if b == ctx.boot_id => Locality::ThisBoot,
        // Boot ids are random per boot: another one on the same host means a reboot
        // happened since the record was written, and a reboot kills every process.
        Some(b) if same_host => Locality::Rebooted(format!(
            "this host ({}) rebooted since the record was written (boot id {b}, now {}), \
             which ended the incarnation",
            ctx.host, ctx.boot_id
        )),
        None if same_host => Locality::Elsewhere(format!(
            "the target ran on this host ({}) but its boot id was not recorded, so warden \
             cannot tell whether its processes belong to this boot",
            ctx.host
        )),
        Some(b) => Locality::Elsewhere(format!(
            "the target ran on host {} (boot id {b}), not on this host {}",
            target.host.as_deref().unwrap_or("<unknown>"),
            ctx.host
        )),
        None => Locality::Elsewhere(format!(
            "the target ran on host {} with an unknown boot id, not on this host {}",
            target.host.as_deref().unwrap_or("<unknown>"),
            ctx.host
        )),
    }
}

fn options(m: &SignalFence, ctx: &FenceContext, target: &Target) -> TerminateOptions {
    // The pidfile names this node's own service; it is the target's only when the target
    // is an earlier incarnation of this very node.
    let own_node = target.node_id.as_deref() == Some(ctx.node_id.as_str());
    TerminateOptions {
        signal: m.signal.0,
        pidfile: ctx.pidfile.clone().filter(|_| own_node),
        // Never guess by port here: this host's own service may listen on it.
        port_fallback: false,
    }
}

pub(crate) async fn fence(
    m: &SignalFence,
    ctx: &FenceContext,
    target: &Target,
    deadline: Instant,
) -> MethodResult {
    match locality(ctx, target) {
        Locality::ThisBoot => {}
        Locality::Rebooted(how) => return MethodResult::fenced(how),
        Locality::Elsewhere(why) => return MethodResult::not_applicable(why),
    }
    let report = process::terminate_incarnation(target, &options(m, ctx, target), deadline).await;
    if report.is_fenced() {
        MethodResult::fenced(report.summary())
    } else {
        MethodResult::failed(report.summary())
    }
}

pub(crate) fn plan(m: &SignalFence, ctx: &FenceContext, target: &Target) -> String {
    match locality(ctx, target) {
        Locality::ThisBoot => {
            let survey = process::survey(target, &options(m, ctx, target));
            format!(
                "{}; waits up to {} for them to exit",
                survey.describe(m.signal.0),
                humantime::format_duration(m.timeout)
            )
        }
        Locality::Rebooted(how) => format!("fenced without signalling anything: {how}"),
        Locality::Elsewhere(why) => format!("not applicable ({why})"),
    }
}
