//! The [`Session`] trait for MySQL/MariaDB: what the daemon and the operator commands ask
//! of the store, each call one transaction or a few statements.

use super::*;

impl<W: Wire> Session for MysqlSession<W> {
    fn id(&self) -> SessionId {
        SessionId(self.inner.core.id)
    }

    fn granted_session_timeout(&self) -> Option<Duration> {
        None
    }

    async fn events(&self, events: mpsc::UnboundedSender<StoreEvent>) {
        // No way to be woken: polling alone.
        polled::events(&*self.inner, events, std::future::pending::<()>).await
    }

    async fn ensure_cluster(&self) -> Result<(), StoreError> {
        // A running warden registers (with what it has seen) even while the marker is
        // missing, so that `status` and `init --force` learn every epoch seen; where the
        // tables are gone too (a wiped database), it makes them again when its grants
        // allow. Never the marker: that is the operator's word (`init --force`).
        match self.inner.get(MARKER).await {
            // Within the operation timeout: a daemon's session waits on it.
            Err(StoreError::NotInitialized(why)) => {
                match self.inner.wire.create_tables(self.inner.op_timeout).await {
                    Ok(_) => Ok(()),
                    Err(_) => Err(StoreError::NotInitialized(why)),
                }
            }
            other => other.map(|_| ()),
        }
    }

    async fn check_initialized(&self) -> Result<(), StoreError> {
        if self.initialized().await? {
            Ok(())
        } else {
            Err(StoreError::NotInitialized(format!(
                "cluster {} has no tables or init marker in MySQL (table prefix {:?}): run \
                 `warden init` first; if it ran before, this database lost them (wiped or \
                 restored): check that no old active still serves, then run `warden init \
                 --force`",
                self.inner.s.cluster, self.inner.s.prefix
            )))
        }
    }

    async fn member(
        &self,
        node_id: &str,
    ) -> Result<Option<(SessionId, Result<MemberRecord, record::RecordError>)>, StoreError> {
        let node = node_id.to_string();
        let row = self
            .inner
            .run("reading a member", move |c| {
                work(async move { Ok((c.member(&node, false).await?, false)) })
            })
            .await?;
        Ok(row
            .filter(|r| !r.expired)
            .map(|r| (SessionId(r.session), record::parse(&r.record))))
    }

    async fn create_member(&self, m: &MemberRecord) -> Result<(), StoreError> {
        let i = &self.inner;
        let (mem, id, m2) = (i.mem.clone(), i.core.id, m.clone());
        let created = i
            .run("registering this node", move |c| {
                work(async move {
                    let data = record::to_bytes(&m2);
                    let created = decide::register(c, &mem.memory(), id, &m2, &data).await?;
                    Ok((created, created))
                })
            })
            .await?;
        let node = &m.node.node_id;
        if !created {
            return Err(StoreError::Rejected(format!(
                "another live session holds the member row of {node}"
            )));
        }
        i.core.registered(node);
        Ok(())
    }

    async fn delete_member(&self, node_id: &str) -> Result<(), StoreError> {
        let node = node_id.to_string();
        self.inner
            .run("deleting a stale member", move |c| {
                work(async move {
                    c.delete_member(&node).await?;
                    Ok(((), true))
                })
            })
            .await
    }

    async fn set_member(&self, m: &MemberRecord) -> Result<(), StoreError> {
        let i = &self.inner;
        let (id, node, data) = (i.core.id, m.node.node_id.clone(), record::to_bytes(m));
        let seen = m.node.epoch_seen;
        let done = i
            .run("publishing the member record", move |c| {
                work(async move {
                    let mine = c.renew_member(&node, id, Some(&data)).await?;
                    if mine {
                        decide::raise(c, &node, seen).await?;
                    }
                    Ok((mine, mine))
                })
            })
            .await?;
        if done {
            Ok(())
        } else {
            Err(StoreError::SessionLost(
                "the member row no longer names this session".into(),
            ))
        }
    }

    async fn join(&self, me: &NodeRecord, join: u64) -> JoinOutcome {
        let i = &self.inner;
        let outcome = match i.try_lock(me).await {
            Ok(Taking::Held(epoch)) => Some((JoinOutcome::Held { epoch }, i.core.id)),
            Ok(Taking::Other { holder, epoch }) => Some((JoinOutcome::Exists { epoch }, holder)),
            Ok(Taking::Lost(why)) => return JoinOutcome::LostData(why),
            Ok(Taking::Gone) => {
                i.core.gone();
                return JoinOutcome::Unknown;
            }
            Ok(Taking::Restarted) => {
                i.core.restarted("the server's identity or start time");
                return JoinOutcome::Unknown;
            }
            Err(StoreError::NotInitialized(why)) => {
                return JoinOutcome::LostData(format!("the store lost data: {why}"))
            }
            // An unknown outcome: the lock is ours iff its row names our session.
            Err(_) => match i.read_lock().await {
                Ok(Some((holder, _, epoch, false))) if holder == i.core.id => {
                    Some((JoinOutcome::Held { epoch }, holder))
                }
                Ok(Some((holder, record, _, false))) => {
                    let epoch = record::parse::<NodeRecord>(&record)
                        .ok()
                        .and_then(|r| r.epoch);
                    Some((JoinOutcome::Exists { epoch }, holder))
                }
                _ => None,
            },
        };
        i.core.settle_join(join, outcome)
    }

    async fn read_state(&self) -> Result<TakeoverState, StoreError> {
        let i = &self.inner;
        let (breadcrumb, history, seen) = tokio::join!(
            i.get(BREADCRUMB),
            self.read_history(),
            i.run("reading the members' epochs", |c| {
                work(async move { Ok((c.floor(false).await?.map(|(e, _)| e), false)) })
            })
        );
        let breadcrumb = items::breadcrumb_view(breadcrumb?);
        let (control, control_version) = items::takeover_control(self).await?;
        items::takeover_state(breadcrumb, control, control_version, history, seen)
    }

    async fn commit_promotion(
        &self,
        breadcrumb: &NodeRecord,
        breadcrumb_version: Option<Version>,
        control_version: Version,
    ) -> WriteOutcome {
        let i = &self.inner;
        let (id, crumb) = (i.core.id, breadcrumb.clone());
        let (bv, cv) = (breadcrumb_version.map(Version::get), control_version.get());
        outcome(
            i.run("committing the promotion", move |c| {
                work(async move {
                    let done = decide::commit(c, id, &crumb, cv, bv).await?;
                    Ok((done, done))
                })
            })
            .await,
        )
    }

    async fn renew(&self, member: &MemberRecord) -> WriteOutcome {
        let i = &self.inner;
        let (id, m) = (i.core.id, member.clone());
        outcome(
            i.run("renewing the lease", move |c| {
                work(async move {
                    let data = record::to_bytes(&m);
                    let done = decide::renew(c, id, &m, &data).await?;
                    Ok((done, done))
                })
            })
            .await,
        )
    }

    async fn rewrite_own_breadcrumb(&self, record: &NodeRecord) -> WriteOutcome {
        let v = match items::own_breadcrumb_version(self, record).await {
            Ok(v) => v,
            Err(outcome) => return outcome,
        };
        outcome(
            self.with_lock_and_breadcrumb(
                "recording the service",
                true,
                Some(v),
                CrumbWrite::Write(record::to_bytes(record)),
            )
            .await,
        )
    }

    async fn restore_breadcrumb(
        &self,
        record: &NodeRecord,
        version: Option<Version>,
    ) -> WriteOutcome {
        outcome(
            self.with_lock_and_breadcrumb(
                "restoring the breadcrumb",
                true,
                version.map(|v| v.get()),
                CrumbWrite::Write(record::to_bytes(record)),
            )
            .await,
        )
    }

    async fn delete_breadcrumb_at(
        &self,
        version: Version,
        check_lock: bool,
    ) -> Result<(), StoreError> {
        let done = self
            .with_lock_and_breadcrumb(
                "deleting the breadcrumb",
                check_lock,
                Some(version.get()),
                CrumbWrite::Delete,
            )
            .await?;
        if done {
            Ok(())
        } else {
            Err(items::breadcrumb_changed(self, check_lock))
        }
    }

    async fn release(&self) -> Result<(), StoreError> {
        let id = self.inner.core.id;
        self.inner
            .run("releasing the lock", move |c| {
                work(async move {
                    c.delete_lock(id).await?;
                    Ok(((), true))
                })
            })
            .await
    }

    items::session_methods_on_items!();

    async fn set_aside(&self) -> Result<Vec<String>, StoreError> {
        let i = &self.inner;
        let names = i
            .run("listing set-aside histories", |c| {
                work(async move { Ok((c.kv_names(SET_ASIDE_PREFIX).await?, false)) })
            })
            .await?;
        Ok(names.iter().map(|n| i.path(n)).collect())
    }

    items::control_methods_on_items!();

    async fn snapshot(&self) -> Result<ClusterSnapshot, StoreError> {
        match self.read_snapshot().await {
            // No tables, or only some: `init` makes them one by one, so a read can find
            // the lock table and not the next. Nothing else to read; `status` says what
            // that means.
            Err(StoreError::NotInitialized(_)) => Ok(ClusterSnapshot {
                marker_missing: true,
                ..ClusterSnapshot::default()
            }),
            other => other,
        }
    }

    fn name_of(&self, what: Item) -> String {
        let i = &self.inner;
        match what {
            Item::Cluster => format!("cluster {} in the {}* tables", i.s.cluster, i.s.prefix),
            Item::Lock => format!("{} row {}", i.t.lock.trim_matches('`'), i.s.cluster),
            Item::Breadcrumb => i.path(BREADCRUMB),
            Item::Control => i.path(CONTROL),
            Item::History => i.path(HISTORY),
        }
    }

    async fn init(&self) -> Result<Vec<String>, StoreError> {
        let i = &self.inner;
        i.wire.create_tables(i.op_timeout.max(DDL_TIMEOUT)).await?;
        Ok(vec![format!(
            "the {}lock, epoch, member and kv tables exist",
            i.s.prefix
        )])
    }

    async fn write_marker(&self, floor: Option<Epoch>) -> Result<Option<String>, StoreError> {
        let i = &self.inner;
        // Names the column a failure is most likely about (its type changed: issue 31).
        let doing = format!(
            "writing the init marker and the epoch counter (column epoch of table {})",
            i.t.epoch
        );
        let epoch = i
            .run(&doing, move |c| {
                work(async move {
                    c.init_counter(floor).await?;
                    c.insert_kv_ignore(MARKER, b"{}").await?;
                    Ok((c.counter(false).await?.unwrap_or_default(), true))
                })
            })
            .await?;
        Ok(Some(format!(
            "cluster {} has its init marker; its epoch counter is at {epoch}",
            i.s.cluster
        )))
    }

    async fn delete_takeover_state(
        &self,
        breadcrumb: Option<Version>,
        control: Option<Version>,
    ) -> Result<(), StoreError> {
        let doomed: Vec<(String, i64)> = [(BREADCRUMB, breadcrumb), (CONTROL, control)]
            .into_iter()
            .filter_map(|(n, v)| v.map(|v| (n.to_string(), v.get())))
            .collect();
        if doomed.is_empty() {
            return Ok(());
        }
        let done = self
            .inner
            .run("deleting the takeover state", move |c| {
                work(async move {
                    for (name, v) in &doomed {
                        if !c.delete_kv(name, Some(*v)).await? {
                            return Ok((false, false));
                        }
                    }
                    Ok((true, true))
                })
            })
            .await?;
        if done {
            Ok(())
        } else {
            Err(StoreError::Rejected(
                "the breadcrumb or control changed since they were read".into(),
            ))
        }
    }

    async fn current_epoch(&self) -> Result<Epoch, StoreError> {
        let i = &self.inner;
        match i.read_counter().await? {
            None => Err(items::no_epoch_counter(&i.s.cluster)),
            Some(e) if e < super::super::MAX_KEPT_EPOCH => Ok(e),
            Some(e) => Err(StoreError::Rejected(format!(
                "the epoch counter of cluster {} (table {}) is at {e}, above any epoch a \
                 counter gives (2^53): run `warden init --force`, which replaces it",
                i.s.cluster, i.t.epoch
            ))),
        }
    }

    async fn move_history_aside_if_above(
        &self,
        epoch: Epoch,
    ) -> Result<Option<(String, Epoch)>, StoreError> {
        let i = &self.inner;
        let Some((data, v, newest)) = items::history_above(self, epoch).await? else {
            return Ok(None);
        };
        let copy = items::set_aside_name("old");
        let copy2 = copy.clone();
        let done = i
            .run("moving history aside", move |c| {
                work(async move {
                    // (A copy of that name already there is a server's duplicate-key
                    // error: nothing moves.)
                    let moved = c.write_kv(&copy2, &data, None).await?
                        && c.delete_kv(HISTORY, Some(v)).await?;
                    Ok((moved, moved))
                })
            })
            .await?;
        if !done {
            return Err(StoreError::Rejected(format!(
                "{} changed while it was moved aside",
                i.path(HISTORY)
            )));
        }
        Ok(Some((i.path(&copy), newest)))
    }
}
