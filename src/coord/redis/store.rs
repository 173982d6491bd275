//! The [`Session`] trait for Redis: what the daemon and the operator commands ask of the
//! store, each call one script or a few commands.

use super::*;

impl<W: Wire> Session for RedisSession<W> {
    fn id(&self) -> SessionId {
        SessionId(self.inner.core.id)
    }

    fn granted_session_timeout(&self) -> Option<Duration> {
        None
    }

    async fn events(&self, events: mpsc::UnboundedSender<StoreEvent>) {
        // The events channel: a release or a control change wakes the loop at once;
        // polling every poll_interval covers a lost message or a lost subscription.
        let i = &*self.inner;
        let messages = tokio::sync::Mutex::new(None::<W::Messages>);
        polled::events(i, events, || async {
            let mut m = messages.lock().await;
            if m.is_none() {
                *m = subscribe(i).await;
            }
            match m.as_mut() {
                Some(stream) => {
                    if stream.next().await.is_none() {
                        *m = None;
                    }
                }
                None => std::future::pending().await,
            }
        })
        .await
    }

    async fn ensure_cluster(&self) -> Result<(), StoreError> {
        // Nothing to create: keys come with their first write.
        Ok(())
    }

    async fn check_initialized(&self) -> Result<(), StoreError> {
        let i = &self.inner;
        i.check_eviction().await?;
        let key = i.k.init();
        let exists: bool = i
            .bounded("looking for the init marker", |mut c| async move {
                redis::cmd("EXISTS").arg(&key).query_async(&mut c).await
            })
            .await?;
        if exists {
            Ok(())
        } else {
            Err(StoreError::NotInitialized(format!(
                "cluster {} has no init marker in Redis (key {}): run `warden init` first; if \
                 it ran before, Redis lost it (restarted without persistence, or failed over \
                 to a stale replica): check that no old active still serves, then run `warden \
                 init --force`",
                i.s.cluster,
                i.k.init()
            )))
        }
    }

    async fn write_marker(&self, floor: Option<Epoch>) -> Result<Option<String>, StoreError> {
        let i = &self.inner;
        let mut inv = WRITE_MARKER.prepare_invoke();
        inv.key(i.k.epoch())
            .key(i.k.init())
            .arg(floor.map(|f| f.to_string()).unwrap_or_default());
        let epoch: Value = i
            .bounded("writing the init marker", |mut c| async move {
                inv.invoke_async(&mut c).await
            })
            .await?;
        Ok(Some(format!(
            "cluster {} has its init marker ({}); its epoch counter is at {}",
            i.s.cluster,
            i.k.init(),
            text(&epoch).unwrap_or_default()
        )))
    }

    async fn member(
        &self,
        node_id: &str,
    ) -> Result<Option<(SessionId, Result<MemberRecord, record::RecordError>)>, StoreError> {
        let i = &self.inner;
        let read = i.member_fields(i.k.member(node_id)).await?;
        // A key of another type is no member: the next registration replaces it.
        let Some((Some(session), data)) = read else {
            return Ok(None);
        };
        Ok(Some((
            SessionId(
                std::str::from_utf8(&session)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_default(),
            ),
            record::parse(&data.unwrap_or_default()),
        )))
    }

    async fn create_member(&self, m: &MemberRecord) -> Result<(), StoreError> {
        let i = &self.inner;
        let node = m.node.node_id.clone();
        let mut inv = CREATE_MEMBER.prepare_invoke();
        inv.key(i.k.member(&node))
            .key(i.k.members())
            .key(i.k.seen())
            .arg(i.core.id)
            .arg(record::to_bytes(m))
            .arg(i.ttl_ms())
            .arg(&node)
            .arg(m.node.epoch_seen.map(|e| e.to_string()).unwrap_or_default());
        if i.call("registering this node", inv).await? != 1 {
            return Err(StoreError::Rejected(format!(
                "another live session holds the member key of {node}"
            )));
        }
        i.core.registered(&node);
        Ok(())
    }

    async fn delete_member(&self, node_id: &str) -> Result<(), StoreError> {
        let i = &self.inner;
        let key = i.k.member(node_id);
        i.bounded("deleting a stale member", |mut c| async move {
            redis::cmd("DEL").arg(&key).query_async::<i64>(&mut c).await
        })
        .await
        .map(|_| ())
    }

    async fn set_member(&self, m: &MemberRecord) -> Result<(), StoreError> {
        match self
            .inner
            .write_member("publishing the member record", m, false)
            .await?
        {
            1 => Ok(()),
            _ => Err(StoreError::SessionLost(
                "the member key no longer names this session".into(),
            )),
        }
    }

    async fn join(&self, me: &NodeRecord, join: u64) -> JoinOutcome {
        let i = &self.inner;
        let mut inv = ACQUIRE.prepare_invoke();
        inv.key(i.k.lock())
            .key(i.k.epoch())
            .key(i.k.init())
            .key(i.k.seen())
            .key(i.k.member(&me.node_id))
            .arg(i.core.id)
            .arg(record::to_bytes(me))
            .arg(i.ttl_ms())
            .arg(&me.node_id)
            .arg(me.epoch_seen.map(|e| e.to_string()).unwrap_or_default());
        let answer: Result<Vec<Value>, StoreError> = i
            .bounded("taking the lock", |mut c| async move {
                inv.invoke_async(&mut c).await
            })
            .await;
        let committed = |record: &[u8]| record::parse::<NodeRecord>(record).ok()?.epoch;
        let outcome = match answer {
            Ok(v) => match text(v.first().unwrap_or(&Value::Nil)).as_deref() {
                Some("held") => {
                    let epoch = v.get(1).and_then(text).and_then(|e| e.parse().ok());
                    epoch.map(|epoch| (JoinOutcome::Held { epoch }, i.core.id))
                }
                Some("other") => {
                    let holder = v.get(1).and_then(text).and_then(|s| s.parse().ok());
                    let epoch = v.get(2).map(bytes).and_then(|r| committed(&r));
                    holder.map(|h| (JoinOutcome::Exists { epoch }, h))
                }
                Some("gone") => {
                    i.core.gone();
                    return JoinOutcome::Unknown;
                }
                Some("restarted") => {
                    i.core.restarted("Redis's run_id");
                    return JoinOutcome::Unknown;
                }
                Some("lost") => {
                    let what = v.get(1).and_then(text).unwrap_or_default();
                    let seen = v.get(2).and_then(text).and_then(|s| s.parse().ok());
                    let who = v.get(3).and_then(text).filter(|w| !w.is_empty());
                    let counter = what.parse().ok();
                    let why =
                        super::super::lost_data(seen.is_none(), counter, seen, who.as_deref())
                            .unwrap_or_else(|| format!("the store lost data ({what})"));
                    return JoinOutcome::LostData(why);
                }
                _ => None,
            },
            // An unknown outcome: the lock is ours iff it names our session.
            Err(_) => match i.read_lock().await {
                Ok(Some((holder, _, epoch))) if holder == i.core.id => {
                    Some((JoinOutcome::Held { epoch }, holder))
                }
                Ok(Some((holder, record, _))) => Some((
                    JoinOutcome::Exists {
                        epoch: committed(&record),
                    },
                    holder,
                )),
                _ => None,
            },
        };
        i.core.settle_join(join, outcome)
    }

    async fn read_state(&self) -> Result<TakeoverState, StoreError> {
        let i = &self.inner;
        let seen_key = i.k.seen();
        let (breadcrumb, history, seen) = tokio::join!(
            i.get(BREADCRUMB),
            self.read_history(),
            i.bounded_typed("reading the members' epochs", |mut c| async move {
                redis::cmd("HVALS")
                    .arg(&seen_key)
                    .query_async::<Vec<Vec<u8>>>(&mut c)
                    .await
            })
        );
        let breadcrumb = items::breadcrumb_view(breadcrumb?);
        let (control, control_version) = items::takeover_control(self).await?;
        let seen = seen.map(|epochs| {
            epochs
                .unwrap_or_default()
                .iter()
                .filter_map(|s| kept_number(s))
                .max()
        });
        items::takeover_state(breadcrumb, control, control_version, history, seen)
    }

    async fn commit_promotion(
        &self,
        breadcrumb: &NodeRecord,
        breadcrumb_version: Option<Version>,
        control_version: Version,
    ) -> WriteOutcome {
        let i = &self.inner;
        // Whether this commits our breadcrumb again, read first: the script's check of the
        // breadcrumb's version makes the answer hold at the commit. Unread, it does not.
        let again = match i.get(BREADCRUMB).await {
            Ok(Some((data, version))) if Some(version) == breadcrumb_version.map(Version::get) => {
                let current = record::parse::<NodeRecord>(&data).ok();
                super::super::commits_again(breadcrumb, current.as_ref())
            }
            _ => false,
        };
        let mut inv = COMMIT.prepare_invoke();
        inv.key(i.k.lock())
            .key(i.k.key(CONTROL))
            .key(i.k.key(BREADCRUMB))
            .key(i.k.seen())
            .arg(i.core.id)
            .arg(record::to_bytes(breadcrumb))
            .arg(control_version.get())
            .arg(
                breadcrumb_version
                    .map(|v| v.get().to_string())
                    .unwrap_or_default(),
            )
            .arg(i.ttl_ms())
            .arg(breadcrumb.epoch.map(|e| e.to_string()).unwrap_or_default())
            .arg(if again { "1" } else { "" });
        if i.s.replicas_ack == 0 {
            return outcome(
                i.call("committing the promotion", inv)
                    .await
                    .map(|n| n == 1),
            );
        }
        // SPEC §3a `replicas_ack`: a failover of the store to a replica that lacks this
        // promotion would hand its epoch out again. WAIT counts the replicas that have
        // every write of *its connection*, so the commit and the WAIT go out on one
        // connection of their own: the shared one reconnects by itself, and a WAIT on a
        // fresh connection would count replicas that lack the commit.
        let need = i.s.replicas_ack;
        let wait_ms = (i.s.session_timeout / 6).as_millis().max(1) as u64;
        let op = i.op_timeout;
        let own = match tokio::time::timeout(op, i.conn.own_connection()).await {
            Ok(Ok(c)) => c,
            other => {
                let why = match other {
                    Ok(Err(e)) => e.to_string(),
                    _ => "no answer".into(),
                };
                tracing::warn!(
                    "could not open a connection to Redis at {} for the promotion and its \
                     WAIT (coordination.redis.replicas_ack = {need}): {why}; not promoting",
                    i.s.url
                );
                return WriteOutcome::NotDurable;
            }
        };
        let mut c = own.clone();
        let written = match tokio::time::timeout(op, inv.invoke_async::<i64>(&mut c)).await {
            Err(_) => WriteOutcome::Unknown,
            Ok(r) => outcome(
                r.map(|n| n == 1)
                    .map_err(|e| classify(e, "committing the promotion")),
            ),
        };
        if written == WriteOutcome::Conflict {
            return written;
        }
        // An unknown commit cannot be waited for: never promoted on (the elector would
        // take a breadcrumb it finds ours for a commit, without the WAIT).
        let mut c = own;
        let acked: Result<i64, StoreError> = if written == WriteOutcome::Unknown {
            Err(StoreError::Unknown(
                "the commit's outcome is unknown, so it cannot be waited for".into(),
            ))
        } else {
            match tokio::time::timeout(
                op,
                redis::cmd("WAIT")
                    .arg(need)
                    .arg(wait_ms)
                    .query_async::<i64>(&mut c),
            )
            .await
            {
                Err(_) => Err(StoreError::Unknown("WAIT got no answer".into())),
                Ok(r) => r.map_err(|e| classify(e, "waiting for the store's replicas")),
            }
        };
        match acked {
            Ok(n) if n >= i64::from(need) => WriteOutcome::Done,
            other => {
                let got = match other {
                    Ok(n) => format!("{n} of them did"),
                    Err(e) => e.to_string(),
                };
                // Taken back while the lock is ours, so that nobody fences this node for
                // a promotion that never started; what stays (an unknown outcome) names a
                // node whose service never ran.
                let written = breadcrumb_version.map_or(0, |v| v.get() + 1);
                let undone = i
                    .breadcrumb_at("taking the promotion back", true, Some(written), None)
                    .await;
                tracing::warn!(
                    "the promotion is not on {need} replicas of Redis within {wait_ms} ms \
                     ({got}; coordination.redis.replicas_ack = {need}): not promoting{}; \
                     check the store's replicas (INFO replication on {})",
                    match undone {
                        Ok(true) => ", the breadcrumb taken back".to_string(),
                        Ok(false) => ", the breadcrumb changed meanwhile".to_string(),
                        Err(e) => format!(", the breadcrumb not taken back ({e})"),
                    },
                    i.s.url
                );
                WriteOutcome::NotDurable
            }
        }
    }

    async fn renew(&self, member: &MemberRecord) -> WriteOutcome {
        outcome(
            self.inner
                .write_member("renewing the lease", member, true)
                .await
                .map(|n| n == 1),
        )
    }

    async fn rewrite_own_breadcrumb(&self, record: &NodeRecord) -> WriteOutcome {
        let i = &self.inner;
        let v = match items::own_breadcrumb_version(self, record).await {
            Ok(v) => v,
            Err(outcome) => return outcome,
        };
        outcome(
            i.breadcrumb_at(
                "recording the service",
                true,
                Some(v),
                Some(&record::to_bytes(record)),
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
            self.inner
                .breadcrumb_at(
                    "restoring the breadcrumb",
                    true,
                    version.map(|v| v.get()),
                    Some(&record::to_bytes(record)),
                )
                .await,
        )
    }

    async fn delete_breadcrumb_at(
        &self,
        version: Version,
        check_lock: bool,
    ) -> Result<(), StoreError> {
        let i = &self.inner;
        if i.breadcrumb_at(
            "deleting the breadcrumb",
            check_lock,
            Some(version.get()),
            None,
        )
        .await?
        {
            Ok(())
        } else {
            Err(items::breadcrumb_changed(self, check_lock))
        }
    }

    async fn release(&self) -> Result<(), StoreError> {
        let i = &self.inner;
        let mut inv = RELEASE.prepare_invoke();
        inv.key(i.k.lock()).arg(i.core.id).arg(i.k.events());
        i.call("releasing the lock", inv).await.map(|_| ())
    }

    items::session_methods_on_items!();

    async fn set_aside(&self) -> Result<Vec<String>, StoreError> {
        let i = &self.inner;
        let key = i.k.aside();
        // A key of another type lists none (the next set-aside replaces it).
        let listed: Vec<Vec<u8>> = i
            .bounded_typed("listing set-aside histories", |mut c| async move {
                redis::cmd("SMEMBERS").arg(&key).query_async(&mut c).await
            })
            .await?
            .unwrap_or_default();
        let mut names: Vec<String> = listed
            .iter()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect();
        names.sort();
        Ok(names.iter().map(|n| i.path(n)).collect())
    }

    items::control_methods_on_items!();

    async fn snapshot(&self) -> Result<ClusterSnapshot, StoreError> {
        let i = &self.inner;
        let lock = i.read_lock().await?;
        let mut snap = ClusterSnapshot::of_lock(
            lock.map(|(session, data, epoch)| (data, epoch, SessionId(session))),
        );
        let (breadcrumb, control) = (i.get(BREADCRUMB).await?, i.get(CONTROL).await?);
        snap.garbage = i.wrong_types().await?;
        for (name, item, replaced_by) in [
            (
                BREADCRUMB,
                &breadcrumb,
                "the next promotion, or `warden fence --confirm --unreadable`,",
            ),
            (CONTROL, &control, "`warden pause` or `warden resume`"),
        ] {
            let key = i.k.key(name);
            let named = snap.garbage.iter().any(|g| g.contains(key.as_str()));
            if matches!(item, Some((_, -1))) && !named {
                snap.garbage.push(format!(
                    "key {}: its version field holds no version warden wrote (it writes \
                     whole numbers): the item counts as unreadable, and {replaced_by} \
                     replaces it",
                    crate::record::printable(&key)
                ));
            }
        }
        snap.add_items(breadcrumb, control);
        let (epoch_key, init_key) = (i.k.epoch(), i.k.init());
        let init: bool = i
            .bounded("reading the init marker", |mut c| async move {
                redis::cmd("EXISTS")
                    .arg(&init_key)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        // A counter that holds no epoch (garbage, or a key of another type) is as lost as
        // a missing one: `init --force` replaces it.
        let counter = match i
            .bounded_typed("reading the epoch counter", |mut c| async move {
                redis::cmd("GET")
                    .arg(&epoch_key)
                    .query_async::<Option<Vec<u8>>>(&mut c)
                    .await
            })
            .await
        {
            Ok(Some(None)) => None,
            Ok(Some(Some(v))) => {
                let e = kept_number(&v);
                snap.counter_unreadable = e.is_none();
                e
            }
            Ok(None) | Err(StoreError::Rejected(_)) => {
                snap.counter_unreadable = true;
                None
            }
            Err(e) => return Err(e),
        };
        i.read_members(&mut snap).await?;
        snap.history = self.read_history().await?;
        snap.set_aside = self.set_aside().await?;
        let seen_key = i.k.seen();
        // A floor of another type keeps no epoch (the next raise replaces it).
        let seen: HashMap<Vec<u8>, Vec<u8>> = i
            .bounded_typed("reading the floor", |mut c| async move {
                redis::cmd("HGETALL")
                    .arg(&seen_key)
                    .query_async(&mut c)
                    .await
            })
            .await?
            .unwrap_or_default();
        snap.kept_floor = seen
            .into_iter()
            .filter_map(|(node, e)| {
                Some((
                    kept_number(&e)?,
                    String::from_utf8_lossy(&node).into_owned(),
                ))
            })
            .max();
        snap.marker_missing = !init || counter.is_none();
        snap.epoch_counter = counter;
        Ok(snap)
    }

    /// The member records alone (the daemon's priority rule reads them once a session
    /// timeout): not the whole snapshot, which also reads history and every other key.
    async fn members(
        &self,
    ) -> Result<Vec<(String, Result<MemberRecord, record::RecordError>)>, StoreError> {
        let mut snap = ClusterSnapshot::default();
        self.inner.read_members(&mut snap).await?;
        Ok(snap.members)
    }

    fn name_of(&self, what: Item) -> String {
        let i = &self.inner;
        match what {
            Item::Cluster => format!("cluster {} under the keys {}:*", i.s.cluster, i.k.base),
            Item::Lock => format!("key {}", i.k.lock()),
            Item::Breadcrumb => i.path(BREADCRUMB),
            Item::Control => i.path(CONTROL),
            Item::History => i.path(HISTORY),
        }
    }

    async fn init(&self) -> Result<Vec<String>, StoreError> {
        let i = &self.inner;
        i.check_eviction().await?;
        let mut done = vec![format!(
            "Redis at {} answers; cluster {} lives under the keys {}:*",
            i.s.url, i.s.cluster, i.k.base
        )];
        for warning in i.persistence_warnings().await {
            done.push(format!("warning: {warning}"));
        }
        Ok(done)
    }

    async fn delete_takeover_state(
        &self,
        breadcrumb: Option<Version>,
        control: Option<Version>,
    ) -> Result<(), StoreError> {
        let i = &self.inner;
        let v = |v: Option<Version>| v.map(|v| v.get().to_string()).unwrap_or_default();
        let mut inv = DELETE_TAKEOVER.prepare_invoke();
        inv.key(i.k.key(BREADCRUMB))
            .key(i.k.key(CONTROL))
            .arg(v(breadcrumb))
            .arg(v(control));
        if i.call("deleting the takeover state", inv).await? == 1 {
            Ok(())
        } else {
            Err(StoreError::Rejected(
                "the breadcrumb or control changed since they were read".into(),
            ))
        }
    }

    async fn current_epoch(&self) -> Result<Epoch, StoreError> {
        let i = &self.inner;
        let key = i.k.epoch();
        let key2 = key.clone();
        let epoch: Option<Option<Vec<u8>>> = i
            .bounded_typed("reading the epoch counter", |mut c| async move {
                redis::cmd("GET").arg(&key2).query_async(&mut c).await
            })
            .await?;
        match epoch {
            Some(None) => Err(items::no_epoch_counter(&i.s.cluster)),
            Some(Some(raw)) if kept_number(&raw).is_some() => {
                Ok(kept_number(&raw).unwrap_or_default())
            }
            _ => Err(StoreError::Rejected(format!(
                "key {key} holds no epoch (not decimal digits below 2^53, or not a string): \
                 run `warden init --force`, which replaces it"
            ))),
        }
    }

    async fn move_history_aside_if_above(
        &self,
        epoch: Epoch,
    ) -> Result<Option<(String, Epoch)>, StoreError> {
        let i = &self.inner;
        let Some((_, v, newest)) = items::history_above(self, epoch).await? else {
            return Ok(None);
        };
        let copy = items::set_aside_name("old");
        let mut inv = MOVE_ASIDE.prepare_invoke();
        inv.key(i.k.key(HISTORY))
            .key(i.k.key(&copy))
            .key(i.k.aside())
            .arg(v)
            .arg(&copy);
        if i.call("moving history aside", inv).await? != 1 {
            return Err(StoreError::Rejected(format!(
                "{} changed while it was moved aside",
                i.path(HISTORY)
            )));
        }
        Ok(Some((i.path(&copy), newest)))
    }
}
