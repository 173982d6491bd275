//! The [`Session`] trait for ZooKeeper: what the daemon and the operator commands ask of
//! the store, each call one or a few of the session's steps.

use super::*;

impl<W: Wire> Session for ZkSession<W> {
    fn id(&self) -> SessionId {
        SessionId(self.id)
    }

    fn granted_session_timeout(&self) -> Option<Duration> {
        (!self.granted.is_zero()).then_some(self.granted)
    }

    fn watch_above(&self, above: Option<&str>) {
        self.above.send_if_modified(|a| {
            let changed = a.as_deref() != above;
            if changed {
                *a = above.map(str::to_string);
            }
            changed
        });
    }

    async fn events(&self, events: mpsc::UnboundedSender<StoreEvent>) {
        self.run_events(events).await
    }

    async fn ensure_cluster(&self) -> Result<(), StoreError> {
        self.ensure_parents().await
    }

    async fn member(
        &self,
        node_id: &str,
    ) -> Result<Option<(SessionId, Result<MemberRecord, record::RecordError>)>, StoreError> {
        let path = self.paths.member(node_id);
        match self
            .bounded("reading a member", &path, self.client.get_data(&path))
            .await
        {
            Ok((data, stat)) => Ok(Some((
                SessionId(stat.ephemeral_owner),
                record::parse(&data),
            ))),
            Err(StoreError::Rejected(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn create_member(&self, m: &MemberRecord) -> Result<(), StoreError> {
        let path = self.paths.member(&m.node.node_id);
        let data = record::to_bytes(m);
        // SPEC §3a: what this node has seen is kept for good, even in a store that forgot
        // it (restored), so that nodes that never saw it are refused too; first, so that a
        // member record that shows an epoch never stands above the floor.
        self.keep_seen(&m.node.node_id, m.node.epoch_seen).await?;
        self.bounded(
            "registering this node",
            &path,
            self.client
                .create(&path, &data, zk::CreateMode::Ephemeral, self.acls()),
        )
        .await
        .map(|_| ())
    }

    async fn delete_member(&self, node_id: &str) -> Result<(), StoreError> {
        let path = self.paths.member(node_id);
        match self
            .bounded(
                "deleting a stale member",
                &path,
                self.client.delete(&path, None),
            )
            .await
        {
            Ok(()) | Err(StoreError::Rejected(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn set_member(&self, m: &MemberRecord) -> Result<(), StoreError> {
        let path = self.paths.member(&m.node.node_id);
        self.keep_seen(&m.node.node_id, m.node.epoch_seen).await?;
        match self
            .bounded(
                "publishing the member record",
                &path,
                self.client.set_data(&path, &record::to_bytes(m), None),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(StoreError::Rejected(why)) => {
                self.member_gone(&m.node.node_id);
                Err(StoreError::SessionLost(why))
            }
            Err(e) => Err(e),
        }
    }

    async fn join(&self, me: &NodeRecord, join: u64) -> JoinOutcome {
        let outcome = self.try_lock(me).await;
        // Watch the lock whoever holds it: a standby for its release, the holder for its
        // loss.
        self.joined.send_replace(Some(join));
        outcome
    }

    async fn read_state(&self) -> Result<TakeoverState, StoreError> {
        // The three reads go out together: one round trip on the takeover path, not three.
        let (breadcrumb, control, history, lock, seen, floor) = tokio::join!(
            self.get_optional(&self.paths.breadcrumb),
            self.get_optional(&self.paths.control),
            self.read_history(),
            self.bounded(
                "reading the lock",
                &self.paths.lock,
                self.client.check_stat(&self.paths.lock)
            ),
            self.members_epoch_seen(),
            self.get_optional(&self.paths.floor),
        );
        // SPEC §3a: what the floor keeps counts as seen too. A node raises its entry before
        // it registers (two requests), so a winner that read only the member records
        // between the two promoted below an epoch the floor already held (the simulation
        // of the backend itself, seed 81846: a wiped ensemble, the warden that had seen
        // the lost epoch rejoining while another promoted).
        let seen = seen.and_then(|m| {
            let kept = floor?.and_then(|(d, _)| floor_max(&parse_floor(&d)).map(|(e, _)| e));
            Ok(m.max(kept))
        });
        // After a commit whose outcome was unknown, the lock's version tells whether our
        // write of it went through; either way the holder's checks use what is there now.
        if let Ok(Some(stat)) = lock {
            if stat.ephemeral_owner == self.id {
                self.hold_lock_version(stat.version);
            }
        }
        let breadcrumb =
            items::breadcrumb_view(breadcrumb?.map(|(data, stat)| (data, stat.version.into())));
        // A missing control is created (empty) so the promotion can check its version.
        let mut control = control?;
        let (control, control_version) = loop {
            match control {
                Some((data, stat)) => {
                    break (record::parse(&data).unwrap_or_default(), stat.version)
                }
                None => {
                    let data = record::to_bytes(&Control::default());
                    match self
                        .bounded(
                            "creating control",
                            &self.paths.control,
                            self.client.create(
                                &self.paths.control,
                                &data,
                                zk::CreateMode::Persistent,
                                self.acls(),
                            ),
                        )
                        .await
                    {
                        Ok(_) | Err(StoreError::Rejected(_)) => {
                            control = self.get_optional(&self.paths.control).await?
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        };
        items::takeover_state(breadcrumb, control, control_version.into(), history, seen)
    }

    async fn commit_promotion(
        &self,
        breadcrumb: &NodeRecord,
        breadcrumb_version: Option<Version>,
        control_version: Version,
    ) -> WriteOutcome {
        let (Some(control_version), Ok(breadcrumb_version)) = (
            znode_version(control_version),
            breadcrumb_version
                .map(|v| znode_version(v).ok_or(()))
                .transpose(),
        ) else {
            return WriteOutcome::Conflict;
        };
        // SPEC §3a: the floor as it is now, not as the takeover read it. A node that saw an
        // epoch the store forgot may raise its entry between that read and this commit
        // (its registration, its join, while the fence ran); a commit at an epoch the
        // floor holds would hand out a fencing token that is not new (stop 40's finding,
        // `tests/commit_floor.rs`). Refused as a conflict: the elector reads the state
        // again, finds the floor above its epoch and says the store lost data. The
        // multi-op checks the floor at the version read, so a raise after this read
        // fails the commit too. (A missing floor is created empty: it can be checked.)
        // The breadcrumb is read beside it: a commit of the breadcrumb again (ours, at
        // this epoch, at the version the multi-op checks) is refused only by a floor above
        // its epoch (`super::super::floor_refuses`).
        let (floor, current) = tokio::join!(
            self.raise_floor(&breadcrumb.node_id, None),
            self.get_optional(&self.paths.breadcrumb),
        );
        let (floor_version, raised_floor) = match (floor, current) {
            (Ok((floor, version)), Ok(current)) => {
                let current = current
                    .filter(|(_, stat)| Some(stat.version) == breadcrumb_version)
                    .and_then(|(data, _)| record::parse::<NodeRecord>(&data).ok());
                let max = floor_max(&floor).map(|(e, _)| e);
                if super::super::floor_refuses(max, breadcrumb, current.as_ref()) {
                    return WriteOutcome::Conflict;
                }
                // The committer's entry goes up to the new epoch in the commit itself:
                // every node that sees the commit finds the floor holding it already, and
                // reads it without writing (`raised`).
                let up = raised(&floor, &breadcrumb.node_id, breadcrumb.epoch)
                    .map(|up| record::to_bytes(&up));
                (version, up)
            }
            // Nothing of the promotion was written: read again, as after a conflict.
            _ => return WriteOutcome::Conflict,
        };
        let data = record::to_bytes(breadcrumb);
        let lock_version = self.held_lock_version();
        let ops = [
            match &raised_floor {
                Some(up) => Op::SetData {
                    path: &self.paths.floor,
                    data: up,
                    version: Some(floor_version),
                },
                None => Op::Check {
                    path: &self.paths.floor,
                    version: floor_version,
                },
            },
            Op::Check {
                path: &self.paths.control,
                version: control_version,
            },
            Op::SetData {
                path: &self.paths.lock,
                data: &data,
                version: (lock_version != ANY_VERSION).then_some(lock_version),
            },
            self.write_breadcrumb(&data, breadcrumb_version),
        ];
        let outcome = write_outcome(self.multi("committing the promotion", &ops).await);
        if outcome == WriteOutcome::Done && lock_version != ANY_VERSION {
            self.hold_lock_version(lock_version + 1);
        }
        if outcome == WriteOutcome::Done && raised_floor.is_some() {
            if let Some(e) = breadcrumb.epoch {
                self.floor_raised.fetch_max(e, Ordering::SeqCst);
            }
        }
        outcome
    }

    async fn renew(&self, member: &MemberRecord) -> WriteOutcome {
        // A version check alone cannot tell our lock from another's: a lock created anew
        // starts at version 0 again. An ensemble restored to before our lock, whose
        // snapshot kept our session, lets another node take a new lock at the version we
        // hold; our renewal would then pass, and this node would serve again beside the
        // new active (the simulation's seed 81344). So the lock must also be ours: owned
        // by this session, at the version we hold. The read goes out beside the multi-op
        // (one round trip: the lease has room for no more); a renewal counts only when
        // both say so.
        let data = record::to_bytes(member);
        let me = self.paths.member(&member.node.node_id);
        let ops = [
            self.check_lock(),
            Op::SetData {
                path: &me,
                data: &data,
                version: None,
            },
        ];
        let (ours, renewed) = tokio::join!(
            self.lock_is_ours(),
            self.multi_results("renewing the lease", &ops),
        );
        let renewed = match renewed {
            Ok(_) => Ok(()),
            Err(MultiFailed::Op {
                index: 1,
                error: StoreError::Rejected(why),
            }) => {
                self.member_gone(&member.node.node_id);
                Err(StoreError::SessionLost(why))
            }
            Err(MultiFailed::Op { error, .. } | MultiFailed::Other(error)) => Err(error),
        };
        match (ours, write_outcome(renewed)) {
            (Ok(()), outcome) => outcome,
            (Err(_), WriteOutcome::Unknown) => WriteOutcome::Unknown,
            (Err(outcome), _) => outcome,
        }
    }

    async fn rewrite_own_breadcrumb(&self, record: &NodeRecord) -> WriteOutcome {
        // A missing breadcrumb is not ours (see `items::own_breadcrumb_version`).
        let (data, stat) = match self.get_optional(&self.paths.breadcrumb).await {
            Ok(Some(found)) => found,
            Ok(None) => return WriteOutcome::Conflict,
            Err(_) => return WriteOutcome::Unknown,
        };
        match record::parse::<NodeRecord>(&data) {
            Ok(cur) if cur.same_incarnation(record) && cur.epoch == record.epoch => {}
            _ => return WriteOutcome::Conflict,
        }
        // (The lock must be ours, not one at the same version: see `renew`.)
        if let Err(outcome) = self.lock_is_ours().await {
            return outcome;
        }
        let new = record::to_bytes(record);
        let ops = [
            self.check_lock(),
            Op::SetData {
                path: &self.paths.breadcrumb,
                data: &new,
                version: Some(stat.version),
            },
        ];
        write_outcome(self.multi("recording the service", &ops).await)
    }

    async fn restore_breadcrumb(
        &self,
        record: &NodeRecord,
        version: Option<Version>,
    ) -> WriteOutcome {
        let Ok(version) = version.map(|v| znode_version(v).ok_or(())).transpose() else {
            return WriteOutcome::Conflict;
        };
        // (The lock must be ours, not one at the same version: see `renew`.)
        if let Err(outcome) = self.lock_is_ours().await {
            return outcome;
        }
        let data = record::to_bytes(record);
        let ops = [self.check_lock(), self.write_breadcrumb(&data, version)];
        write_outcome(self.multi("restoring the breadcrumb", &ops).await)
    }

    async fn breadcrumb_bytes(&self) -> Result<Option<(Vec<u8>, Version)>, StoreError> {
        Ok(self
            .get_optional(&self.paths.breadcrumb)
            .await?
            .map(|(data, stat)| (data, Version::new(stat.version.into()))))
    }

    async fn delete_breadcrumb_at(
        &self,
        version: Version,
        check_lock: bool,
    ) -> Result<(), StoreError> {
        let version = znode_version(version)
            .ok_or_else(|| StoreError::Rejected(format!("no version {version} of a znode")))?;
        let delete = Op::Delete {
            path: &self.paths.breadcrumb,
            version: Some(version),
        };
        let ops = if check_lock {
            vec![self.check_lock(), delete]
        } else {
            vec![delete]
        };
        self.multi("deleting the breadcrumb", &ops).await
    }

    async fn release(&self) -> Result<(), StoreError> {
        self.delete_own_lock().await
    }

    async fn release_deleting(&self, own: Option<(&str, &str, Epoch)>) -> Released {
        let Some((node_id, incarnation, epoch)) = own else {
            return Released {
                breadcrumb: None,
                lock: self.delete_own_lock().await,
            };
        };
        // Both reads go out together, then one multi-op deletes both: the breadcrumb at
        // the version that names us, the lock at the version read with its owner checked
        // (so the breadcrumb goes only while the lock is ours, the `lock` check of the
        // two-step compare-and-delete).
        let (crumb, lock) = tokio::join!(self.breadcrumb_bytes(), self.own_lock());
        let lock = match lock {
            Ok(Some(s)) => s,
            // Not ours: neither is ours to delete.
            Ok(None) => {
                return Released {
                    breadcrumb: Some(Ok(false)),
                    lock: Ok(()),
                }
            }
            Err(e) => {
                return Released {
                    breadcrumb: Some(Err(e.clone())),
                    lock: Err(e),
                }
            }
        };
        let version = match crumb {
            Ok(Some((data, v)))
                if names_breadcrumb(&data, node_id, Some(incarnation), Some(epoch)) =>
            {
                Ok(znode_version(v))
            }
            Ok(_) => Ok(None),
            Err(e) => Err(e),
        };
        // Not ours, or unread: the lock alone goes.
        let Ok(Some(version)) = version else {
            return Released {
                breadcrumb: Some(version.map(|_| false)),
                lock: self.delete_lock_at(lock.version).await,
            };
        };
        let ops = [
            Op::Delete {
                path: &self.paths.breadcrumb,
                version: Some(version),
            },
            Op::Delete {
                path: &self.paths.lock,
                version: Some(lock.version),
            },
        ];
        let both = self
            .multi("deleting the breadcrumb and the lock", &ops)
            .await;
        match both {
            Ok(()) => Released {
                breadcrumb: Some(Ok(true)),
                lock: Ok(()),
            },
            // One of them changed since it was read: judged again, in two steps.
            Err(StoreError::Rejected(_)) => super::super::release_in_two_steps(self, own).await,
            Err(e) => Released {
                breadcrumb: Some(Err(e.clone())),
                lock: Err(e),
            },
        }
    }

    async fn read_history(&self) -> Result<History, StoreError> {
        Ok(match self.get_optional(&self.paths.history).await? {
            Some((data, _)) => history_of(&data),
            None => History::default(),
        })
    }

    async fn append_history(&self, entry: &HistoryEntry) -> Result<Option<String>, StoreError> {
        items::append_history(self, entry).await
    }

    async fn set_aside(&self) -> Result<Vec<String>, StoreError> {
        self.list_set_aside().await
    }

    items::control_methods_on_items!();

    async fn snapshot(&self) -> Result<ClusterSnapshot, StoreError> {
        // The reads go out together: `status` and the operator commands wait for one
        // round trip (and the member list's second), not six.
        let (lock, breadcrumb, control, members, history, set_aside, epoch, floor) = tokio::try_join!(
            self.get_optional(&self.paths.lock),
            self.get_optional(&self.paths.breadcrumb),
            self.get_optional(&self.paths.control),
            self.member_znodes(),
            self.read_history(),
            self.list_set_aside(),
            self.get_optional(&self.paths.epoch),
            self.get_optional(&self.paths.floor),
        )?;
        Ok(snapshot_of(
            lock, breadcrumb, control, members, history, set_aside, epoch, floor,
        ))
    }

    async fn members(
        &self,
    ) -> Result<Vec<(String, Result<MemberRecord, record::RecordError>)>, StoreError> {
        // Two requests (list, one multi-read) rather than a whole snapshot. The lock goes
        // in the multi-read too: a node that watches a member instead of the lock (SPEC
        // §6b) learns of a free lock at least once a read of the members so, whatever the
        // one above it does.
        let (members, lock) = self.member_znodes_and_lock(true).await?;
        if lock == Some(false) {
            self.lock_absent.send_modify(|n| *n += 1);
        }
        Ok(members
            .into_iter()
            .filter_map(|(id, found)| Some((id, record::parse::<MemberRecord>(&found?.0))))
            .collect())
    }

    fn name_of(&self, what: Item) -> String {
        match what {
            Item::Cluster => self.paths.base.clone(),
            Item::Lock => self.paths.lock.clone(),
            Item::Breadcrumb => self.paths.breadcrumb.clone(),
            Item::Control => self.paths.control.clone(),
            Item::History => self.paths.history.clone(),
        }
    }

    async fn init(&self) -> Result<Vec<String>, StoreError> {
        self.ensure_parents().await?;
        self.repair_acls().await?;
        Ok(vec![format!(
            "{} exists with the configured ACL",
            self.paths.base
        )])
    }

    async fn delete_takeover_state(
        &self,
        breadcrumb: Option<Version>,
        control: Option<Version>,
    ) -> Result<(), StoreError> {
        let mut doomed = Vec::new();
        for (path, version) in [
            (&self.paths.breadcrumb, breadcrumb),
            (&self.paths.control, control),
        ] {
            if let Some(v) = version {
                let v = znode_version(v)
                    .ok_or_else(|| StoreError::Rejected(format!("no version {v} of {path}")))?;
                doomed.push((path.as_str(), v));
            }
        }
        self.delete_at_versions(&doomed).await
    }

    async fn current_epoch(&self) -> Result<Epoch, StoreError> {
        let offset = self
            .get_optional(&self.paths.epoch)
            .await?
            .map_or(0, |(d, _)| parse_offset(&d));
        Ok(self.current_zxid().await? + offset)
    }

    /// SPEC §3a `init --force` after a loss: raises the offset every epoch gets on top of
    /// its czxid, so that the counter is at least `floor` and the next lock's epoch above
    /// it, however far the ensemble's zxid went back. ZooKeeper has no init marker:
    /// without a floor, nothing.
    async fn write_marker(&self, floor: Option<Epoch>) -> Result<Option<String>, StoreError> {
        let Some(floor) = floor else {
            return Ok(None);
        };
        let path = &self.paths.epoch;
        for _ in 0..JOIN_TRIES {
            let (offset, version) = match self.get_optional(path).await? {
                Some((d, stat)) => (parse_offset(&d), Some(stat.version)),
                None => (0, None),
            };
            // The write below gets a zxid above this one: with this offset, the counter it
            // leaves is at least the floor. An offset never goes down, so no epoch does.
            let zxid = self.current_zxid().await?;
            let offset = offset.max(floor.saturating_sub(zxid));
            let data = offset_bytes(offset);
            let written = match version {
                Some(v) => {
                    self.bounded(
                        "raising the epoch counter",
                        path,
                        self.client.set_data(path, &data, Some(v)),
                    )
                    .await
                }
                None => {
                    self.bounded(
                        "creating the epoch counter",
                        path,
                        self.client
                            .create(path, &data, zk::CreateMode::Persistent, self.acls()),
                    )
                    .await
                }
            };
            match written {
                Ok(stat) => {
                    let counter = stat.mzxid.max(0) as Epoch + offset;
                    return Ok(Some(format!(
                        "raised the epoch counter {path} to {counter}: every epoch from now on \
                         is a lock's czxid plus {offset}"
                    )));
                }
                Err(StoreError::Rejected(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Unknown(format!(
            "{path} kept changing while `init --force` raised it; run it again"
        )))
    }

    async fn move_history_aside_if_above(
        &self,
        zxid: Epoch,
    ) -> Result<Option<(String, Epoch)>, StoreError> {
        let path = &self.paths.history;
        let Some((data, stat)) = self.get_optional(path).await? else {
            return Ok(None);
        };
        let Some(newest) = newest_promotion(&history_of(&data)).filter(|&n| n > zxid) else {
            return Ok(None);
        };
        let copy = self.set_aside_path("old");
        let ops = [
            Op::Create {
                path: &copy,
                data: &data,
                mode: zk::CreateMode::Persistent,
                acls: self.acls(),
            },
            Op::Delete {
                path,
                version: Some(stat.version),
            },
        ];
        self.multi("moving history aside", &ops).await?;
        // The nodes that read that history keep its epoch as seen, in the floor: the
        // counter goes above it, or the floor would block every promotion next (SPEC §3a),
        // and the next active's epoch is greater than any recorded before.
        self.write_marker(Some(newest + 1)).await?;
        Ok(Some((copy, newest)))
    }
}
