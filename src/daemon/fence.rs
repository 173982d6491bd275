//! Fencing as the driver runs it (SPEC §5): the chain as a task of the session, and this
//! node's own service.

use super::*;

impl<C: Connector, H: Host, R: ServiceRole<H>> Daemon<C, H, R> {
    /// Runs a fence (SPEC §5) as a task of the current session: when the session is lost
    /// or released, or warden stops, the task is aborted with it, which kills a fence
    /// script's process group and closes an ssh channel, so an abandoned fence can never
    /// act after a later election.
    pub(super) fn fence(&mut self, ticket: Ticket, order: FenceOrder) {
        let done = |fenced: bool, summary: String| Event::FenceDone {
            ticket,
            fenced,
            summary,
        };
        let Some(ctx) = &mut self.session else {
            let _ = self.tx.send(Input::Elector(done(
                false,
                "no coordination session to fence under".into(),
            )));
            return;
        };
        let label = match &order {
            FenceOrder::Node(r) | FenceOrder::OwnLeftovers(r) | FenceOrder::OwnService(r) => {
                r.node_id.clone()
            }
            FenceOrder::Unreadable => "<unreadable breadcrumb>".into(),
        };
        info!(target = %label, ?order, "fencing");
        let tx = self.tx.clone();
        let metrics = self.metrics.clone();
        let chain = self.chain.clone();
        let own_chain = self.own_chain.clone();
        let warden_only = self.warden_only_chain.clone();
        // (Futures: they run only for their own kind of order.)
        let fence_own = self.role.fence_own();
        let earlier = match &order {
            FenceOrder::OwnLeftovers(r) => r.epoch,
            _ => None,
        };
        let demote_earlier = self.role.demote_earlier(earlier);
        let zk = ctx.zk.clone();
        let host_id = record::HostIdentity::of(&self.me);
        let run = async move {
            let (fenced, summary) = match order {
                FenceOrder::Node(r) => {
                    let mut target = r.fence_target();
                    target.reboot_contradicted = reboot_contradicted(&zk, &host_id, &r).await;
                    run_chain(&chain, &target, &metrics).await
                }
                FenceOrder::Unreadable => {
                    let (fenced, mut summary) =
                        run_chain(&chain, &Default::default(), &metrics).await;
                    if !fenced {
                        summary.push_str(
                            "; the breadcrumb is unreadable, so no method could identify the \
                             old active: once it is certainly down, run `warden fence \
                             --confirm --unreadable`",
                        );
                    }
                    (fenced, summary)
                }
                FenceOrder::OwnLeftovers(r) => {
                    // §5: in hooks mode the service of an earlier warden process on this
                    // boot is ours and nobody was promoted since: demote it rather than
                    // kill it, then still end that earlier warden process.
                    let demoted = demote_earlier.await;
                    if demoted {
                        let (fenced, summary) =
                            run_chain(&warden_only, &warden_of(&r), &metrics).await;
                        let summary = format!(
                            "demoted the earlier process's service with the demote hook; {summary}"
                        );
                        (fenced, summary)
                    } else {
                        run_chain(&own_chain, &r.fence_target(), &metrics).await
                    }
                }
                FenceOrder::OwnService(_) => fence_own.await,
            };
            let _ = tx.send(Input::Elector(Event::FenceDone {
                ticket,
                fenced,
                summary,
            }));
        };
        ctx.tasks.spawn(run);
    }
}

/// Runs a fence chain and records its attempts in the metrics.
pub(super) async fn run_chain<M: FenceMethods>(
    chain: &FenceChain<M>,
    target: &Target,
    metrics: &Metrics,
) -> (bool, String) {
    let report = chain.fence(target).await;
    metrics.fence_report(&report);
    (report.is_fenced(), report.summary())
}

/// How long a fence waits for the member records that may contradict a reboot: one read
/// of a handful of small records, which a working store answers in milliseconds; a fence
/// that gets none goes on without taking the reboot on trust.
pub(super) const MEMBERS_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// SPEC §5: a record with this machine's id and another boot id reads as "this machine
/// before a reboot", which `signal` takes as fenced. A live member that runs that boot
/// says otherwise (a clone with the same `/etc/machine-id`), and so does silence: when the
/// member records cannot be read, the reboot is not taken on trust either.
pub(super) async fn reboot_contradicted<S: Session>(
    session: &S,
    host: &record::HostIdentity,
    target: &NodeRecord,
) -> Option<String> {
    if !host.same_machine_other_boot(target) {
        return None;
    }
    match tokio::time::timeout(MEMBERS_READ_TIMEOUT, session.members())
        .await
        .unwrap_or_else(|_| {
            Err(StoreError::Unknown(format!(
                "no answer within {}",
                humantime::format_duration(MEMBERS_READ_TIMEOUT)
            )))
        }) {
        Ok(members) => {
            let live: Vec<MemberRecord> = members.into_iter().filter_map(|(_, m)| m.ok()).collect();
            host.reboot_contradicted_by(target, &live)
        }
        Err(e) => Some(format!(
            "the record of {} names this machine's id with another boot id, but the member \
             records could not be read ({e}) to make sure no live member (a clone with the \
             same machine id) still runs that boot",
            record::printable(&target.node_id)
        )),
    }
}

/// An earlier warden process of this node whose service the demote hook already took care
/// of: only that warden process is to be ended (its service is left demoted, running).
pub(super) fn warden_of(r: &NodeRecord) -> Target {
    let mut t = r.fence_target();
    t.service_pid = None;
    t.service_pgid = None;
    t.service_start_time = None;
    t.service_cgroup = None;
    t.port = None;
    // Not a promoted service's record any more: the service was demoted by hook.
    t.epoch = None;
    t
}
