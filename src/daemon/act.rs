//! Carrying out the elector's actions.

use super::*;

impl<C: Connector, H: Host> Daemon<C, H> {
    pub(super) fn act(&mut self, action: Action, now: Instant) {
        match action {
            Action::Connect => self.connect(),
            Action::Join { ticket } => {
                self.join_ticket = ticket;
                // SPEC §3a: the store checks the counter against what we have seen, in the
                // same step that would move it.
                let mut me = self.record(None);
                me.epoch_seen = self.elector.epoch_seen();
                // The store reports the end of the holder this join sees (ours or
                // another's) as a `HolderGone` of this ticket.
                self.in_session(
                    Event::Joined {
                        ticket,
                        outcome: crate::elector::JoinOutcome::Unknown,
                    },
                    move |zk| async move {
                        let outcome = zk.join(&me, ticket).await;
                        Event::Joined { ticket, outcome }
                    },
                );
            }
            Action::ReadState { ticket } => {
                let host = self.host.clone();
                // SPEC §6b: this node's place as a standby, as its check last told it (its
                // member record may say otherwise by now, or not be written yet).
                let own_position = self.standby_position();
                self.in_session(
                    Event::StateRead {
                        ticket,
                        result: Err("no session".into()),
                    },
                    move |zk| async move {
                        let result = read_cluster_state(&zk, &host).await.map(|mut s| {
                            s.own_position = own_position;
                            s
                        });
                        Event::StateRead { ticket, result }
                    },
                );
            }
            Action::RestoreBreadcrumb {
                ticket,
                record,
                version,
                check_alive,
            } => {
                let host = self.host.clone();
                let within = self.elector.session_timeout();
                self.in_session(
                    Event::StateRead {
                        ticket,
                        result: Err("no session".into()),
                    },
                    move |zk| async move {
                        if check_alive && remembered_alive(&zk, &record, within).await {
                            let result = read_cluster_state(&zk, &host).await.map(|mut s| {
                                s.remembered_alive = true;
                                s
                            });
                            return Event::StateRead { ticket, result };
                        }
                        let result = match zk.restore_breadcrumb(&record, version).await {
                            WriteOutcome::Done => read_cluster_state(&zk, &host).await,
                            outcome => Err(format!(
                                "writing back the breadcrumb of {} at epoch {} (a commit or a \
                                 later rewrite of it that the store forgot) got {outcome:?}",
                                record.node_id,
                                record.epoch.unwrap_or_default()
                            )),
                        };
                        Event::StateRead { ticket, result }
                    },
                );
            }
            Action::RestoreOwnBreadcrumb {
                ticket,
                epoch,
                version,
            } => {
                let record = self.leftover_breadcrumb(epoch);
                let host = self.host.clone();
                let control = self.control_svc.clone();
                let own_service = self.stopping.clone();
                self.in_session(
                    Event::StateRead {
                        ticket,
                        result: Err("no session".into()),
                    },
                    move |zk| async move {
                        let (gone, summary) = fence_own_service(control, own_service).await;
                        if gone {
                            info!("{summary}: nothing to write back");
                            let result = read_cluster_state(&zk, &host).await.map(|mut s| {
                                s.own_service_gone = true;
                                s
                            });
                            return Event::StateRead { ticket, result };
                        }
                        warn!("{summary}");
                        let result = match zk.restore_breadcrumb(&record, version).await {
                            WriteOutcome::Done => read_cluster_state(&zk, &host).await,
                            outcome => Err(format!(
                                "writing back this node's own breadcrumb of epoch {epoch}, \
                                 naming its service that outlived a stop, got {outcome:?}"
                            )),
                        };
                        Event::StateRead { ticket, result }
                    },
                );
            }
            Action::Fence { ticket, order } => self.fence(ticket, order),
            Action::CommitPromotion {
                ticket,
                epoch,
                breadcrumb_version,
                control_version,
            } => {
                let mut rec = self.record(Some(epoch));
                match &self.control_svc {
                    ServiceControl::Spawn(spawner) => {
                        // Not started yet: no process of it to name, but its cgroup is
                        // made now and recorded, so fencing finds every process the start
                        // will make even before the start's own record lands.
                        rec.service_pid = None;
                        rec.service_pgid = None;
                        rec.service_start_time = None;
                        let prepared = spawner.prepare(epoch);
                        rec.service_cgroup = prepared.cgroup().map(str::to_string);
                        self.committed_cgroup = rec.service_cgroup.clone();
                        self.prepared = Some(prepared);
                    }
                    ServiceControl::Hooks(hooks) => {
                        // The always-running service's pidfile identity goes into the
                        // commit itself (SPEC §4.3c); without it, no promotion.
                        match hooks.pin() {
                            Ok(Some(p)) => {
                                rec.service_pid = Some(p.pid);
                                rec.service_start_time = Some(p.start_time);
                            }
                            Ok(None) => {}
                            Err(e) => {
                                error!("cannot promote: {e}");
                                let _ = self.tx.send(Input::Elector(Event::CommitAborted {
                                    ticket,
                                    reason: e.to_string(),
                                }));
                                return;
                            }
                        }
                    }
                }
                rec.since = Some(record::rfc3339(self.host.wall()));
                self.epoch = Some(epoch);
                self.in_session(
                    Event::Committed {
                        ticket,
                        outcome: WriteOutcome::Unknown,
                    },
                    move |zk| async move {
                        let outcome = zk
                            .commit_promotion(&rec, breadcrumb_version, control_version)
                            .await;
                        Event::Committed { ticket, outcome }
                    },
                );
            }
            Action::StartService {
                ticket,
                epoch,
                lease_valid_until,
            } => {
                let control = self.control_svc.clone();
                let tx = self.tx.clone();
                let host = self.host.clone();
                // The start the commit prepared, or a restart within the same epoch in the
                // cgroup the breadcrumb already names.
                let start = match (
                    self.prepared.take().filter(|p| p.epoch() == epoch),
                    self.committed_cgroup.clone(),
                ) {
                    (Some(p), _) => Start::Prepared(p),
                    (None, Some(cgroup)) => Start::Again { epoch, cgroup },
                    (None, None) => Start::Fresh(epoch),
                };
                tokio::spawn(async move {
                    // SPEC §4.3d: the lease is checked right before the start or hook.
                    if host.now() >= lease_valid_until {
                        let why = "the lease ran out before the service could be promoted";
                        let _ = tx.send(Input::Started(ticket, Err((why.to_string(), false))));
                        return;
                    }
                    match control {
                        ServiceControl::Spawn(spawner) => {
                            let result = spawner.start(start).await.map(Some);
                            let _ = tx.send(Input::Started(ticket, result.map_err(|e| (e, true))));
                        }
                        ServiceControl::Hooks(hooks) => {
                            // Only the process pinned at the commit is named by the
                            // breadcrumb, so only it may be promoted under this lock: once
                            // it is gone (it died while the cluster was paused, and runs
                            // again in its demoted role), its successor needs a commit of
                            // its own, which pins it.
                            if let Some(pinned) = hooks
                                .pinned()
                                .filter(|_| hooks.pinned_running() == Some(false))
                            {
                                let why = format!(
                                    "the service process pinned at promotion (pid {}) is \
                                     gone; the next promotion pins the one running now",
                                    pinned.pid
                                );
                                let _ = tx.send(Input::Started(ticket, Err((why, false))));
                                return;
                            }
                            let result = hooks.promote(epoch).await.map(|_| None);
                            let result =
                                result.map_err(|e| (format!("the promote hook failed: {e}"), true));
                            let _ = tx.send(Input::Started(ticket, result));
                        }
                    }
                });
            }
            Action::RecordService { ticket, epoch } => {
                let mut rec = self.record(Some(epoch));
                rec.rewrite = Some(self.next_rewrite(epoch));
                let crumb = self.crumb_writer();
                self.in_session(
                    Event::ServiceRecorded {
                        ticket,
                        outcome: WriteOutcome::Unknown,
                    },
                    move |zk| async move {
                        let _one = crumb.lock().await;
                        let outcome = zk.rewrite_own_breadcrumb(&rec).await;
                        if outcome != WriteOutcome::Done {
                            warn!(
                                ?outcome,
                                "could not record the service's identity in the breadcrumb \
                                 yet; not active until it is (retrying under the lease)"
                            );
                        }
                        Event::ServiceRecorded { ticket, outcome }
                    },
                );
            }
            Action::KeepBreadcrumb { ticket, epoch } => {
                let mut rec = self.record(Some(epoch));
                // Written only when the store forgot it: then as a rewrite later than any
                // sent in this epoch, so that standbys take it as the newest.
                rec.rewrite = Some(self.next_rewrite(epoch));
                let crumb = self.crumb_writer();
                self.in_session(
                    Event::BreadcrumbKept {
                        ticket,
                        kept: KeptBreadcrumb::Failed("no session".into()),
                    },
                    move |zk| async move {
                        let _one = crumb.lock().await;
                        let kept = keep_named(&zk, &rec, true).await;
                        Event::BreadcrumbKept { ticket, kept }
                    },
                );
            }
            Action::ForgetService { ticket, epoch } | Action::RepinService { ticket, epoch } => {
                if matches!(action, Action::RepinService { .. }) {
                    self.repin();
                }
                let mut rec = self.record(Some(epoch));
                // In hooks mode the service is the always-running process pinned at the
                // commit: a demote leaves it running, so the record keeps naming it (it is
                // all a fencer has; without it no one can fence this node, and the
                // cluster stays without an active: found by the PostgreSQL example with
                // ZooKeeper frozen). A spawned service's processes are gone once stopped.
                if matches!(self.control_svc, ServiceControl::Spawn(_)) {
                    rec.service_pid = None;
                    rec.service_pgid = None;
                    rec.service_start_time = None;
                }
                // A start again reuses the cgroup the commit named: it still finds it.
                rec.service_cgroup = self.committed_cgroup.clone();
                rec.rewrite = Some(self.next_rewrite(epoch));
                let crumb = self.crumb_writer();
                self.in_session(
                    Event::ServiceForgotten {
                        ticket,
                        outcome: WriteOutcome::Unknown,
                    },
                    move |zk| async move {
                        let _one = crumb.lock().await;
                        let outcome = zk.rewrite_own_breadcrumb(&rec).await;
                        Event::ServiceForgotten { ticket, outcome }
                    },
                );
            }
            Action::Renew { ticket } => {
                let m = self.member();
                self.in_session(
                    Event::Renewed {
                        ticket,
                        outcome: WriteOutcome::Unknown,
                    },
                    move |zk| async move {
                        let outcome = zk.renew(&m).await;
                        Event::Renewed { ticket, outcome }
                    },
                );
            }
            Action::ReadMembers => {
                if let Some(ctx) = &self.session {
                    ctx.members_due.notify_one();
                }
            }
            Action::ReadAbove { id } => {
                let gone = Event::AboveChanged {
                    id: id.clone(),
                    record: None,
                    own_position: None,
                };
                // (Unreadable reads as gone: the elector then reads every member.)
                self.in_session(gone, move |zk| async move {
                    let record = match zk.member(&id).await {
                        Ok(Some((_, Ok(m)))) => Some(Box::new(m)),
                        _ => None,
                    };
                    Event::AboveChanged {
                        id,
                        record,
                        own_position: None,
                    }
                });
            }
            Action::Follow { ticket, active } => {
                let ServiceControl::Hooks(hooks) = &self.control_svc else {
                    return;
                };
                let hooks = hooks.clone();
                let tx = self.tx.clone();
                let env = active_env(&active);
                info!(
                    active = %active.node_id,
                    epoch = active.epoch,
                    "running the follow hook"
                );
                tokio::spawn(async move {
                    let (ok, detail) = match hooks.follow(active.epoch, env).await {
                        Ok(()) => (true, format!("following {}", active.node_id)),
                        Err(e) => (false, e),
                    };
                    let _ = tx.send(Input::Elector(Event::Followed { ticket, ok, detail }));
                });
            }
            Action::StopService { ticket, cause } => {
                let tx = self.tx.clone();
                let spawner = match &self.control_svc {
                    ServiceControl::Spawn(spawner) => spawner.clone(),
                    ServiceControl::Hooks(hooks) => {
                        let hooks = hooks.clone();
                        let epoch = self.epoch;
                        info!(?cause, "running the demote hook");
                        if let Some(h) = self.pin_watch.take() {
                            h.abort();
                        }
                        // The service changes role: what its checks said before no longer holds, so
                        // the node is not "healthy" again until `rise` checks of the demoted service pass.
                        self.recheck_after_demotion();
                        // SPEC §6: a planned switchover to a named node tells the demote
                        // hook where to hand over (its member record: host and port).
                        let successor = self
                            .elector
                            .successor()
                            .map(str::to_string)
                            .zip(self.session.as_ref().map(|c| c.zk.clone()));
                        let bound = crate::coord::op_timeout(
                            self.elector.session_timeout(),
                            self.cfg.connect_timeout(),
                        );
                        // SPEC §6: and the active to follow, when another node is known
                        // to be one (a demotion after losing the lease to it).
                        let active: Vec<(String, String)> = self
                            .elector
                            .known_active()
                            .map(active_env)
                            .into_iter()
                            .flatten()
                            .collect();
                        // SPEC §6b: a successor this node named as it steps down by itself
                        // (not a planned switchover's) is a chance to hand over without
                        // loss, never a reason to leave the service writable: when the
                        // hook cannot hand over to it (gone, unreachable, behind), it runs
                        // again without one, as a step-down without a successor always did
                        // (the review of stop 45: the recipes fail before refusing writes
                        // when the successor has no address).
                        let self_named =
                            successor.is_some() && !self.elector.successor_is_planned();
                        tokio::spawn(async move {
                            let mut extra = match &successor {
                                Some((node, zk)) => successor_env(zk, node, bound).await,
                                None => Vec::new(),
                            };
                            extra.extend(active.iter().cloned());
                            let mut result = hooks.demote(epoch, extra).await;
                            if let (Err(e), true) = (&result, self_named) {
                                warn!(
                                    "the demote hook could not hand over to {} ({e}); running \
                                     it again without a successor",
                                    successor.as_ref().map_or("?", |s| s.0.as_str())
                                );
                                result = hooks.demote(epoch, active.clone()).await;
                            }
                            let event = match result {
                                Ok(()) => Event::ServiceStopped {
                                    ticket,
                                    clean: true,
                                    detail: "the demote hook succeeded".to_string(),
                                },
                                // §6: after a forced demotion, a service whose role is
                                // unknown must not keep serving.
                                Err(e)
                                    if cause == crate::elector::StopCause::Forced
                                        && hooks.kill() =>
                                {
                                    Event::ServiceStopped {
                                        ticket,
                                        clean: false,
                                        detail: format!(
                                            "the demote hook failed: {e}; killed the pidfile \
                                             process"
                                        ),
                                    }
                                }
                                // Nothing was killed: the elector decides whether a planned
                                // switchover is called off (SPEC §6a.2).
                                Err(e) => Event::DemoteFailed {
                                    ticket,
                                    detail: format!("the demote hook failed: {e}"),
                                    said: e.said,
                                },
                            };
                            let _ = tx.send(Input::Elector(event));
                        });
                        return;
                    }
                };
                self.service_check = None;
                let signal = self.cfg.service.stop_signal;
                let grace = self.cfg.service.stop_timeout;
                match self.service.clone() {
                    None => {
                        let _ = tx.send(Input::Elector(Event::ServiceStopped {
                            ticket,
                            clean: true,
                            detail: "not running".into(),
                        }));
                    }
                    Some(id) => {
                        info!(pid = id.pid, ?cause, "stopping the service");
                        tokio::spawn(async move {
                            let (clean, detail) = match spawner.stop(id, signal, grace).await {
                                StopOutcome::Stopped { forced, elapsed } => (
                                    true,
                                    format!(
                                        "stopped in {}{}",
                                        humantime::format_duration(round_ms(elapsed)),
                                        if forced {
                                            " (killed after stop_timeout)"
                                        } else {
                                            ""
                                        }
                                    ),
                                ),
                                StopOutcome::StillRunning { pids } => {
                                    (false, format!("still running after SIGKILL: pids {pids:?}"))
                                }
                            };
                            let _ = tx.send(Input::Elector(Event::ServiceStopped {
                                ticket,
                                clean,
                                detail,
                            }));
                        });
                    }
                }
                // From here on the service is being stopped, no longer ours to report.
                if let Some(id) = self.service.take() {
                    self.stopping = Some(id);
                }
            }
            Action::KillService => {
                let spawner = match &self.control_svc {
                    ServiceControl::Spawn(spawner) => spawner,
                    ServiceControl::Hooks(hooks) => {
                        warn!(
                            "the lease ended before the demote hook finished: killing the service"
                        );
                        hooks.kill();
                        return;
                    }
                };
                // kill_group checks the leader's start time, so a group that is already
                // gone (or recycled) is left alone.
                for id in [&self.stopping, &self.service].into_iter().flatten() {
                    warn!(
                        pid = id.pid,
                        "the lease ended: killing the service's process group"
                    );
                    spawner.kill(id);
                }
            }
            Action::PeekBreadcrumb { ticket } => {
                self.in_session(
                    Event::BreadcrumbPeeked {
                        ticket,
                        version: Err("no session".into()),
                    },
                    move |zk| async move {
                        let version = zk
                            .breadcrumb_bytes()
                            .await
                            .map(|found| found.map(|(_, v)| v))
                            .map_err(|e| e.to_string());
                        Event::BreadcrumbPeeked { ticket, version }
                    },
                );
            }
            Action::Release { ticket, breadcrumb } => {
                let tx = self.tx.clone();
                let (node_id, inc) = (self.me.node_id.clone(), self.me.incarnation.clone());
                let leftover = self
                    .elector
                    .own_leftovers()
                    .map(|epoch| self.leftover_breadcrumb(epoch));
                match self.session.take() {
                    Some(ctx) => {
                        let zk = ctx.zk.clone();
                        let crumb = ctx.crumb.clone();
                        tokio::spawn(async move {
                            // After a look or a rewrite in flight, never beside it.
                            let _one = crumb.lock().await;
                            if let Some(record) = leftover {
                                keep_leftover_named(&zk, &record).await;
                            }
                            // The lock goes first, the session's tasks after (their
                            // events are ignored from now on: the session is taken).
                            // Aborted first, they remove their watches, and ZooKeeper
                            // answers a session's requests in order: the successor
                            // waited for those answers too.
                            let own =
                                breadcrumb.map(|epoch| (node_id.as_str(), inc.as_str(), epoch));
                            let done = coord::release_deleting_retried(&zk, own).await;
                            match (done.breadcrumb, breadcrumb) {
                                (Some(Ok(true)), Some(epoch)) => {
                                    info!(epoch, "deleted our breadcrumb: nobody needs to fence us")
                                }
                                (Some(Ok(false)), _) => warn!(
                                    "our breadcrumb was not ours to delete any more (or a try \
                                     whose answer was lost deleted it with the lock)"
                                ),
                                (Some(Err(e)), _) => warn!(
                                    "could not delete our breadcrumb ({e}); the next active will \
                                     fence this node"
                                ),
                                _ => {}
                            }
                            if let Err(e) = done.lock {
                                warn!("deleting the lock failed ({e}); closing the session removes it");
                            }
                            drop(ctx);
                            drop(zk);
                            let _ = tx.send(Input::Elector(Event::Released { ticket }));
                        });
                    }
                    None => {
                        if breadcrumb.is_some() {
                            warn!(
                                "could not delete our breadcrumb (no session); the next active \
                                 will fence this node"
                            );
                        }
                        let _ = tx.send(Input::Elector(Event::Released { ticket }));
                    }
                }
            }
            Action::ClearFailover { request } => {
                // Retried until acknowledged (or the session ends, which aborts the task):
                // a request left behind would hold standbys out until its deadline.
                if let Some(ctx) = &mut self.session {
                    let zk = ctx.zk.clone();
                    ctx.tasks.spawn(async move {
                        loop {
                            match zk
                                .clear_failover_request(
                                    &request.from,
                                    request.to.as_deref(),
                                    &request.deadline,
                                )
                                .await
                            {
                                Ok(true) => {
                                    info!(from = %request.from, "cleared the switchover request");
                                    return;
                                }
                                Ok(false) => {
                                    info!("control holds a newer switchover request; left it");
                                    return;
                                }
                                Err(e) if e.is_unreachable() => return,
                                Err(e) => {
                                    warn!("could not clear the switchover request ({e}); retrying");
                                    tokio::time::sleep(crate::elector::RETRY_DELAY).await;
                                }
                            }
                        }
                    });
                }
            }
            Action::Transition {
                from,
                to,
                epoch,
                reason,
            } => self.transition(from, to, epoch, reason, now),
            Action::Notice {
                warn: true,
                message,
            } => warn!("{message}"),
            Action::Notice {
                warn: false,
                message,
            } => info!("{message}"),
            Action::Exit { code } => {
                info!("warden stopped");
                self.session = None;
                self.exit_code = Some(code);
            }
        }
    }
}
