//! Carrying out the elector's actions.

use super::*;

impl<C: Connector, H: Host, R: ServiceRole<H>> Daemon<C, H, R> {
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
                let fence_own = self.role.fence_own();
                self.in_session(
                    Event::StateRead {
                        ticket,
                        result: Err("no session".into()),
                    },
                    move |zk| async move {
                        let (gone, summary) = fence_own.await;
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
                if let Err(e) = self.role.commit(epoch, &mut rec) {
                    error!("cannot promote: {e}");
                    let _ = self
                        .tx
                        .send(Input::Elector(Event::CommitAborted { ticket, reason: e }));
                    return;
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
                let tx = self.tx.clone();
                let host = self.host.clone();
                let start = self.role.start(ticket, epoch);
                tokio::spawn(async move {
                    // SPEC §4.3d: the lease is checked right before the start or hook.
                    if host.now() >= lease_valid_until {
                        let why = "the lease ran out before the service could be promoted";
                        let _ = tx.send(Input::Elector(Event::StartFailed {
                            ticket,
                            reason: why.to_string(),
                            ran: false,
                        }));
                        return;
                    }
                    let _ = tx.send(Input::Role(start.await));
                });
            }
            Action::RecordService { ticket, epoch } => {
                let rec = self.record(Some(epoch));
                let recorded = |ticket, outcome| Event::ServiceRecorded { ticket, outcome };
                let unless_done = "could not record the service's identity in the breadcrumb \
                                   yet; not active until it is (retrying under the lease)";
                self.rewrite_breadcrumb(rec, epoch, ticket, recorded, Some(unless_done));
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
                    self.role.repin();
                }
                let mut rec = self.record(Some(epoch));
                self.role.name_stopped(&mut rec);
                let forgotten = |ticket, outcome| Event::ServiceForgotten { ticket, outcome };
                self.rewrite_breadcrumb(rec, epoch, ticket, forgotten, None);
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
                if let Some(follow) = self.role.follow(ticket, &active) {
                    let tx = self.tx.clone();
                    tokio::spawn(async move {
                        let _ = tx.send(Input::Elector(follow.await));
                    });
                }
            }
            Action::StopService { ticket, cause } => {
                // SPEC §6: a planned switchover to a named node tells the demote hook
                // where to hand over (its member record: host and port).
                let bound = crate::coord::op_timeout(
                    self.elector.session_timeout(),
                    self.cfg.connect_timeout(),
                );
                let successor = self
                    .elector
                    .successor()
                    .map(str::to_string)
                    .zip(self.session.as_ref().map(|c| c.zk.clone()))
                    .map(|(node, zk)| {
                        let named = node.clone();
                        let env: BoxFuture<HookEnv> =
                            Box::pin(async move { successor_env(&zk, &named, bound).await });
                        (node, env)
                    });
                let demotion = Demotion {
                    cause,
                    epoch: self.epoch,
                    // SPEC §6b: a successor this node named as it steps down by itself
                    // (not a planned switchover's) is a chance to hand over without loss,
                    // never a reason to leave the service writable: when the hook cannot
                    // hand over to it (gone, unreachable, behind), it runs again without
                    // one, as a step-down without a successor always did (the review of
                    // stop 45: the recipes fail before refusing writes when the successor
                    // has no address).
                    retry_without_successor: !self.elector.successor_is_planned(),
                    successor,
                    // SPEC §6: and the active to follow, when another node is known to be
                    // one (a demotion after losing the lease to it).
                    active: self
                        .elector
                        .known_active()
                        .map(active_env)
                        .into_iter()
                        .flatten()
                        .collect(),
                };
                let stop = self.role.stop(ticket, demotion);
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    let _ = tx.send(Input::Elector(stop.await));
                });
            }
            Action::KillService { cause } => self.role.kill(cause),
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
            transition @ Action::Transition { .. } => self.transition(transition, now),
            Action::WriteHeld => self.write_held_back(),
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

    /// Rewrites our breadcrumb to `rec` at `epoch` as the next rewrite of that epoch
    /// (§4.3d), as a task of the session, after any other writer of it; `done` makes the
    /// elector's event of the outcome (`Unknown` without a session). `unless_done`: what
    /// to log when it did not land.
    fn rewrite_breadcrumb(
        &mut self,
        mut rec: NodeRecord,
        epoch: Epoch,
        ticket: Ticket,
        done: fn(Ticket, WriteOutcome) -> Event,
        unless_done: Option<&'static str>,
    ) {
        rec.rewrite = Some(self.next_rewrite(epoch));
        let crumb = self.crumb_writer();
        self.in_session(done(ticket, WriteOutcome::Unknown), move |zk| async move {
            let _one = crumb.lock().await;
            let outcome = zk.rewrite_own_breadcrumb(&rec).await;
            if let (false, Some(what)) = (outcome == WriteOutcome::Done, unless_done) {
                warn!(?outcome, "{what}");
            }
            done(ticket, outcome)
        });
    }
}
