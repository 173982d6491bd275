//! `kind = "signal"`: fence an incarnation that ran on this host, on this boot, by
//! signalling its processes.

use crate::outcome::MethodResult;
use crate::process::{self, TerminateOptions, Whereabouts};
use crate::{FenceContext, SignalFence, Target};
use tokio::time::Instant;

/// Where the target ran, as far as this method can tell (SPEC §5 "Which host is this?"):
/// on this boot of this machine, in this pid namespace; on this machine before a reboot;
/// or anywhere else, which only a method that can reach it (ssh, a script) may fence.
enum Locality {
    /// On this machine, since its last boot, in this pid namespace: its processes, if
    /// any, are ours to see.
    ThisBoot,
    /// On this machine before a reboot, which ended all of it.
    Rebooted(String),
    /// Elsewhere, or unknown.
    Elsewhere(String),
}

fn locality(ctx: &FenceContext, target: &Target) -> Locality {
    match process::whereabouts(&ctx.boot_id, &ctx.machine_id, ctx.pid_ns, target) {
        Whereabouts::ThisBoot => Locality::ThisBoot,
        Whereabouts::Rebooted(how) => Locality::Rebooted(how),
        // Same kernel, another container: its pids are not ours, and finding none of them
        // here would pass for "already gone".
        Whereabouts::OtherPidNamespace { recorded, here } => Locality::Elsewhere(format!(
            "the target ran on this machine and boot but in another pid namespace ({recorded}; \
             this warden runs in {here}): a container sharing this kernel, whose processes \
             this warden cannot identify by their pids"
        )),
        Whereabouts::Elsewhere(why) => Locality::Elsewhere(why),
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
        // locality() let only targets of this very pid namespace through.
        foreign_pid_ns: None,
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
            // A dry run reads /proc in the calling thread: `warden fence --dry-run` is a
            // command of its own, not the daemon's runtime.
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
