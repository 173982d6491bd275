//! The ZooKeeper session's own steps: the join (the floor, the counter, the lock's
//! multi-op), bounded calls, reads and writes of the znodes, and the watches.

use super::*;

impl<W: Wire> ZkSession<W> {
    /// A session over `client`, established now: `op_timeout` bounds every call, and
    /// `settle` (the configured session timeout) is how long it lives before it may make
    /// the epoch counter (see [`ZkSession::try_lock`]).
    pub fn over(
        client: W,
        paths: Paths,
        acl_mode: AclMode,
        op_timeout: Duration,
        settle: Duration,
    ) -> ZkSession<W> {
        ZkSession {
            id: client.session_id(),
            granted: client.session_timeout(),
            client,
            paths,
            acls: match acl_mode {
                AclMode::Open => zk::Acls::anyone_all(),
                AclMode::Creator => zk::Acls::creator_all(),
            },
            acl_mode,
            op_timeout,
            lock_version: Arc::new(AtomicI32::new(ANY_VERSION)),
            joined: Arc::new(watch::Sender::new(None)),
            member_gone: Arc::new(watch::Sender::new(false)),
            above: Arc::new(watch::Sender::new(None)),
            lock_absent: Arc::new(watch::Sender::new(0)),
            floor_raised: Arc::new(AtomicU64::new(0)),
            relinked: Arc::new(watch::Sender::new(0)),
            established: tokio::time::Instant::now(),
            settle,
        }
    }

    pub fn paths(&self) -> &Paths {
        &self.paths
    }

    /// The ACL of the cluster's own znodes.
    pub(super) fn acls(&self) -> &[Acl] {
        &self.acls
    }

    /// A multi-op's check that the lock is at the version this session holds.
    pub(super) fn check_lock(&self) -> Op<'_> {
        Op::Check {
            path: &self.paths.lock,
            version: self.held_lock_version(),
        }
    }

    /// A multi-op's write of the breadcrumb: at `version`, or a create when there is none.
    pub(super) fn write_breadcrumb<'a>(&'a self, data: &'a [u8], version: Option<i32>) -> Op<'a> {
        match version {
            Some(v) => Op::SetData {
                path: &self.paths.breadcrumb,
                data,
                version: Some(v),
            },
            None => Op::Create {
                path: &self.paths.breadcrumb,
                data,
                mode: zk::CreateMode::Persistent,
                acls: self.acls(),
            },
        }
    }

    /// `Ok` when the lock is this session's, at the version it holds; else what a write
    /// under it comes to: `Conflict` (another's, or none), `Unknown` (no answer).
    pub(super) async fn lock_is_ours(&self) -> Result<(), WriteOutcome> {
        match self.own_lock().await {
            Ok(Some(stat)) if stat.version == self.held_lock_version() => Ok(()),
            Ok(_) => Err(WriteOutcome::Conflict),
            Err(_) => Err(WriteOutcome::Unknown),
        }
    }

    pub(super) fn held_lock_version(&self) -> i32 {
        self.lock_version.load(Ordering::SeqCst)
    }

    pub(super) fn hold_lock_version(&self, version: i32) {
        self.lock_version.store(version, Ordering::SeqCst);
    }

    /// Runs one client call on znode `path` under the operation timeout.
    pub(super) async fn bounded<T>(
        &self,
        what: &str,
        path: &str,
        f: impl Future<Output = Result<T, zk::Error>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.op_timeout, f).await {
            Ok(r) => r.map_err(|e| classify(e, path)),
            Err(_) => Err(StoreError::Unknown(format!(
                "{what} got no answer within {}",
                humantime::format_duration(self.op_timeout)
            ))),
        }
    }

    /// One multi-op, all or none, under `op_timeout`. `what` names it in an error; a
    /// failed operation's error names its znode.
    pub(super) async fn multi(&self, what: &str, ops: &[Op<'_>]) -> Result<(), StoreError> {
        self.multi_results(what, ops)
            .await
            .map(|_| ())
            .map_err(|e| match e {
                MultiFailed::Op { error, .. } | MultiFailed::Other(error) => error,
            })
    }

    /// [`multi`](Self::multi) with each operation's result, and the index of the one that
    /// failed.
    pub(super) async fn multi_results(
        &self,
        what: &str,
        ops: &[Op<'_>],
    ) -> Result<Vec<zk::MultiWriteResult>, MultiFailed> {
        let paths: Vec<&str> = ops.iter().map(Op::path).collect();
        let paths = paths.as_slice();
        match tokio::time::timeout(self.op_timeout, self.client.multi(ops)).await {
            Ok(Ok(results)) => Ok(results),
            Ok(Err(zk::MultiWriteError::OperationFailed { index, source })) => {
                Err(MultiFailed::Op {
                    index,
                    error: classify(source, paths.get(index).copied().unwrap_or("?")),
                })
            }
            Ok(Err(e)) => Err(MultiFailed::Other(classify_multi(e, paths))),
            Err(_) => Err(MultiFailed::Other(StoreError::Unknown(format!(
                "{what} got no answer within {}",
                humantime::format_duration(self.op_timeout)
            )))),
        }
    }

    /// Creates `<root>/<cluster>/members` and its parents where missing. Only the
    /// cluster's own znodes (`<root>/<cluster>` and below) get the cluster's ACL: the
    /// znodes of `root` are shared with other clusters, which may use another ACL, so they
    /// are created with [`shared_parent_acls`] and never changed once they exist.
    pub(super) async fn ensure_parents(&self) -> Result<(), StoreError> {
        let shared = shared_parent_acls(self.acl_mode);
        for path in ancestors(&self.paths.root) {
            self.create_if_missing(&path, &shared).await?;
        }
        for path in [&self.paths.base, &self.paths.members] {
            self.create_if_missing(path, self.acls()).await?;
        }
        Ok(())
    }

    /// Creates an empty persistent znode unless it exists. Exists is asked first: a
    /// create under a parent we may not write is refused even when the znode is there.
    pub(super) async fn create_if_missing(
        &self,
        path: &str,
        acls: &[Acl],
    ) -> Result<(), StoreError> {
        if self
            .bounded("looking for", path, self.client.check_stat(path))
            .await?
            .is_some()
        {
            return Ok(());
        }
        match self
            .bounded(
                "creating",
                path,
                self.client
                    .create(path, &[], zk::CreateMode::Persistent, acls),
            )
            .await
        {
            Ok(_) | Err(StoreError::Rejected(_)) => Ok(()),
            Err(StoreError::Auth(why)) => Err(StoreError::Auth(format!(
                "{why} (creating {path} needs the CREATE permission on {})",
                parent(path)
            ))),
            Err(e) => Err(e),
        }
    }

    /// Sets the configured ACL on the cluster's persistent znodes (`warden init`):
    /// `<root>/<cluster>` and below, never the shared `root`.
    pub(super) async fn repair_acls(&self) -> Result<(), StoreError> {
        let mut paths = vec![self.paths.base.clone(), self.paths.members.clone()];
        for p in [
            &self.paths.breadcrumb,
            &self.paths.control,
            &self.paths.history,
            &self.paths.epoch,
            &self.paths.floor,
        ] {
            if self
                .bounded("looking for", p, self.client.check_stat(p))
                .await?
                .is_some()
            {
                paths.push(p.clone());
            }
        }
        paths.extend(self.list_set_aside().await?);
        for p in paths {
            self.bounded(
                "setting the ACL of",
                &p,
                self.client.set_acl(&p, self.acls()),
            )
            .await?;
        }
        Ok(())
    }

    /// The old histories kept beside `history` (full paths, sorted).
    pub(super) async fn list_set_aside(&self) -> Result<Vec<String>, StoreError> {
        let base = &self.paths.base;
        let mut names = match self
            .bounded("listing", base, self.client.list_children(base))
            .await
        {
            Ok(c) => c,
            Err(StoreError::Rejected(_)) => Vec::new(),
            Err(e) => return Err(e),
        };
        names.retain(|n| n.starts_with(SET_ASIDE_PREFIX));
        names.sort();
        Ok(names.into_iter().map(|n| format!("{base}/{n}")).collect())
    }

    /// SPEC §3a, §4.2: raise our entry of the floor to our `epoch_seen`; refuse, before
    /// the counter moves, when the floor is above every epoch the store remembers handing
    /// out (it lost data: restored from an old snapshot, or wiped); else create `lock` in
    /// one multi-op that also moves the counter and checks that neither the floor nor the
    /// counter changed since they were read. On NodeExists the lock is ours iff its owner
    /// is this session (a create whose reply was lost). Watching is the caller's: see
    /// [`ZkSession::watch_lock`].
    ///
    /// The zxid alone cannot tell a store that forgot: it grows with every write, so a
    /// later czxid climbs past an epoch that was handed out and forgotten. The counter
    /// moves only with a lock, and goes back with a restore; the floor, raised by the live
    /// nodes that saw the forgotten epoch, stays above it until `init --force`.
    pub(super) async fn try_lock(&self, me: &NodeRecord) -> JoinOutcome {
        for _ in 0..JOIN_TRIES {
            let Ok((floor, floor_version)) = self.raise_floor(&me.node_id, me.epoch_seen).await
            else {
                return JoinOutcome::Unknown;
            };
            let Ok(counter) = self.read_counter().await else {
                return JoinOutcome::Unknown;
            };
            if let Some(why) = lost(counter.epoch, floor_max(&floor)) {
                // Never sit on a lock this node may not promote under (a create of an
                // earlier try whose answer was lost): `init --force` waits for none.
                let _ = self.delete_own_lock().await;
                return JoinOutcome::LostData(why);
            }
            let Some(epoch_version) = counter.version else {
                // The first join since the counter existed (a cluster made by an older
                // warden): it starts at the zxid now, above every lock before it.
                //
                // Or an ensemble wiped, or restored to before the counter: the active of
                // before may still be inside its lease, its lock, session and breadcrumb
                // gone with the data, and nothing left to fence it by (the simulation's
                // seeds 3337, 6369, 14266). Only a session that has lived a whole session
                // timeout makes the counter: every session of the old data was last heard
                // of before this one began, so by then each old active's lease (half its
                // session timeout past that) has ended and its service is down. The join
                // waits for that (it shows as a standby; the task ends with the session),
                // then reads everything again: another node may have led meanwhile.
                if self.established.elapsed() < self.settle {
                    tokio::time::sleep_until(self.established + self.settle).await;
                    continue;
                }
                let created = self
                    .bounded(
                        "creating the epoch counter",
                        &self.paths.epoch,
                        self.client.create(
                            &self.paths.epoch,
                            &offset_bytes(0),
                            zk::CreateMode::Persistent,
                            self.acls(),
                        ),
                    )
                    .await;
                match created {
                    Ok(_) | Err(StoreError::Rejected(_)) => continue,
                    Err(_) => return JoinOutcome::Unknown,
                }
            };
            match self
                .take_lock(me, floor_version, epoch_version, counter.offset)
                .await
            {
                Take::Done(outcome) => return outcome,
                Take::Again => continue,
            }
        }
        JoinOutcome::Unknown
    }

    /// The join's multi-op: check the floor at the version read, set the counter at the
    /// version read (its new mzxid is the lock's czxid), create `lock`. The epoch is that
    /// zxid plus the counter's offset.
    pub(super) async fn take_lock(
        &self,
        me: &NodeRecord,
        floor_version: i32,
        epoch_version: i32,
        offset: Epoch,
    ) -> Take {
        let data = record::to_bytes(me);
        let offset_data = offset_bytes(offset);
        let ops = [
            Op::Check {
                path: &self.paths.floor,
                version: floor_version,
            },
            Op::SetData {
                path: &self.paths.epoch,
                data: &offset_data,
                version: Some(epoch_version),
            },
            Op::Create {
                path: &self.paths.lock,
                data: &data,
                mode: zk::CreateMode::Ephemeral,
                acls: self.acls(),
            },
        ];
        let taken = self.multi_results("creating the lock", &ops).await;
        match taken {
            Ok(results) => match results.get(1) {
                Some(zk::MultiWriteResult::SetData { stat }) => {
                    // A lock just created is at version 0 (a create's stat inside a
                    // multi-op can be invalid on some servers: ZOOKEEPER-4026).
                    self.hold_lock_version(0);
                    Take::Done(JoinOutcome::Held {
                        epoch: stat.mzxid.max(0) as Epoch + offset,
                    })
                }
                _ => Take::Done(JoinOutcome::Unknown),
            },
            Err(MultiFailed::Op {
                index: 2,
                error: StoreError::Rejected(_),
            }) => Take::Done(self.lock_exists(offset).await),
            Err(MultiFailed::Op {
                error: StoreError::Rejected(_),
                ..
            }) => Take::Again,
            Err(_) => Take::Done(JoinOutcome::Unknown),
        }
    }

    /// The lock exists: ours iff its owner is this session (a create whose reply was
    /// lost), else another's.
    pub(super) async fn lock_exists(&self, offset: Epoch) -> JoinOutcome {
        match self
            .bounded(
                "reading the lock",
                &self.paths.lock,
                self.client.check_stat(&self.paths.lock),
            )
            .await
        {
            Ok(Some(stat)) if stat.ephemeral_owner == self.id => {
                self.hold_lock_version(stat.version);
                JoinOutcome::Held {
                    epoch: stat.czxid.max(0) as Epoch + offset,
                }
            }
            Ok(Some(_)) => JoinOutcome::Exists {
                epoch: self.holder_epoch().await,
            },
            // Gone again already, or no answer: try again.
            Ok(None) | Err(_) => JoinOutcome::Unknown,
        }
    }

    /// SPEC §3a: the floor, with `node`'s entry raised to `seen` (created when missing), and
    /// its version.
    pub(super) async fn raise_floor(
        &self,
        node: &str,
        seen: Option<Epoch>,
    ) -> Result<(Floor, i32), StoreError> {
        let path = &self.paths.floor;
        for _ in 0..JOIN_TRIES {
            let (floor, version) = match self.get_optional(path).await? {
                Some((data, stat)) => (parse_floor(&data), Some(stat.version)),
                None => (Floor::new(), None),
            };
            let up = raised(&floor, node, seen);
            let written = match (version, up) {
                (Some(v), None) => {
                    // The floor holds `seen` already: a later record with the same one
                    // reads it no more (each read was on the way of the member record's
                    // write, and of the new active's service start: 30 ms a takeover).
                    if let Some(seen) = seen.filter(|&e| e < super::super::MAX_KEPT_EPOCH) {
                        self.floor_raised.fetch_max(seen, Ordering::SeqCst);
                    }
                    return Ok((floor, v));
                }
                (Some(v), Some(up)) => self
                    .bounded(
                        "raising the floor",
                        path,
                        self.client.set_data(path, &record::to_bytes(&up), Some(v)),
                    )
                    .await
                    .map(|stat| (up, stat.version)),
                (None, up) => {
                    let up = up.unwrap_or(floor);
                    self.bounded(
                        "creating the floor",
                        path,
                        self.client.create(
                            path,
                            &record::to_bytes(&up),
                            zk::CreateMode::Persistent,
                            self.acls(),
                        ),
                    )
                    .await
                    .map(|stat| (up, stat.version))
                }
            };
            match written {
                Ok(done) => {
                    if let Some(seen) = seen {
                        self.floor_raised.fetch_max(seen, Ordering::SeqCst);
                    }
                    return Ok(done);
                }
                Err(StoreError::Rejected(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Unknown(format!(
            "{path} kept changing while this node raised its entry"
        )))
    }

    /// Raises our entry of the floor to `seen`, before a member record carrying it is
    /// written, unless this session already did. A member record never stands above the
    /// floor: when the raise fails, so does the write of the record (a commit checks the
    /// floor, not the member records; the review of stop 41).
    pub(super) async fn keep_seen(
        &self,
        node: &str,
        seen: Option<Epoch>,
    ) -> Result<(), StoreError> {
        let Some(seen) = seen else { return Ok(()) };
        if self.floor_raised.load(Ordering::SeqCst) >= seen {
            return Ok(());
        }
        self.raise_floor(node, Some(seen)).await.map(|_| ())
    }

    /// SPEC §3a: the greatest epoch the store remembers handing out (the counter, the
    /// lock's, the breadcrumb's, history's newest), the offset and the counter's version.
    pub(super) async fn read_counter(&self) -> Result<Counter, StoreError> {
        let (epoch, lock, breadcrumb, history) = tokio::join!(
            self.get_optional(&self.paths.epoch),
            self.get_optional(&self.paths.lock),
            self.get_optional(&self.paths.breadcrumb),
            self.read_history(),
        );
        let (epoch, lock, breadcrumb) = (epoch?, lock?, breadcrumb?);
        Ok(counter_of(
            epoch
                .as_ref()
                .map(|(d, s)| (d.as_slice(), s.mzxid, s.version)),
            lock.as_ref().map(|(d, _)| d.as_slice()),
            breadcrumb.as_ref().map(|(d, _)| d.as_slice()),
            &history?,
        ))
    }

    /// The epoch the lock's record names once its holder committed, for `epoch_seen`;
    /// `None` when unread or not yet committed (best effort: it only adds knowledge).
    pub(super) async fn holder_epoch(&self) -> Option<Epoch> {
        let (data, _) = self
            .bounded(
                "reading the lock",
                &self.paths.lock,
                self.client.get_data(&self.paths.lock),
            )
            .await
            .ok()?;
        record::parse::<NodeRecord>(&data).ok()?.epoch
    }

    /// Every member znode's data and stat, read in one request after listing them:
    /// `(child name, data and stat)`, `None` for one that went away in between.
    #[allow(clippy::type_complexity)]
    pub(super) async fn member_znodes(
        &self,
    ) -> Result<Vec<(String, Option<(Vec<u8>, zk::Stat)>)>, StoreError> {
        Ok(self.member_znodes_and_lock(false).await?.0)
    }

    /// The member znodes, and with `lock` whether the lock exists, read in the same
    /// multi-read (no request more; `None` when there are no members to read).
    #[allow(clippy::type_complexity)]
    pub(super) async fn member_znodes_and_lock(
        &self,
        lock: bool,
    ) -> Result<(Vec<(String, Option<(Vec<u8>, zk::Stat)>)>, Option<bool>), StoreError> {
        let at = &self.paths.members;
        let mut children = match self
            .bounded("listing members", at, self.client.list_children(at))
            .await
        {
            Ok(c) => c,
            Err(StoreError::Rejected(_)) => return Ok((Vec::new(), None)),
            Err(e) => return Err(e),
        };
        children.sort();
        if children.is_empty() {
            return Ok((Vec::new(), None));
        }
        let mut paths: Vec<String> = children.iter().map(|c| self.paths.member(c)).collect();
        if lock {
            paths.push(self.paths.lock.clone());
        }
        let mut results = self
            .bounded("reading members", at, self.client.get_data_of(&paths))
            .await?;
        let lock_found =
            lock.then(|| matches!(results.pop(), Some(zk::MultiReadResult::Data { .. })));
        let members = children
            .into_iter()
            .zip(results)
            .map(|(c, r)| match r {
                zk::MultiReadResult::Data { data, stat } => (c, Some((data, stat))),
                _ => (c, None),
            })
            .collect();
        Ok((members, lock_found))
    }

    /// The greatest `epoch_seen` in the member records (SPEC §3a).
    pub(super) async fn members_epoch_seen(&self) -> Result<Option<Epoch>, StoreError> {
        Ok(self
            .member_znodes()
            .await?
            .into_iter()
            .filter_map(|(_, d)| record::parse::<MemberRecord>(&d?.0).ok()?.node.epoch_seen)
            .max())
    }

    /// Waits until the lock is deleted (returns `true`) or the session ends (`false`).
    /// Data changes re-arm the watch; each time the lock's data names a committed epoch,
    /// `on_record` gets it (SPEC §6 `follow`).
    pub(super) async fn watch_lock(&self, mut on_record: impl FnMut(&[u8])) -> bool {
        loop {
            let (data, watcher) = match self.client.get_and_watch_data(&self.paths.lock).await {
                Ok((data, _, watcher)) => (data, watcher),
                Err(zk::Error::NoNode) => return true,
                Err(e) => match classify(e, &self.paths.lock) {
                    StoreError::SessionLost(_) | StoreError::Auth(_) => return false,
                    // A connection blip: the client reconnects within the session.
                    _ => {
                        tokio::time::sleep(crate::coord::WATCH_RETRY_DELAY).await;
                        continue;
                    }
                },
            };
            on_record(&data);
            let ev = watcher.changed().await;
            match ev.event_type {
                zk::EventType::NodeDeleted => return true,
                zk::EventType::Session => return false,
                _ => continue,
            }
        }
    }

    /// Hands each version of `path`'s data to `on_data` (`None` while it does not exist),
    /// across deletions and creations, until the session ends: the lock for a node that
    /// has not joined, the breadcrumb for every node.
    pub(super) async fn watch_data(&self, path: &str, on_data: &mut impl FnMut(Option<&[u8]>)) {
        self.watch_data_again(path, None, on_data).await
    }

    /// [`watch_data`](Self::watch_data), also read again each time `again` changes.
    pub(super) async fn watch_data_again(
        &self,
        path: &str,
        mut again: Option<watch::Receiver<u64>>,
        on_data: &mut impl FnMut(Option<&[u8]>),
    ) {
        loop {
            let watcher = match self.client.get_and_watch_data(path).await {
                Ok((data, _, watcher)) => {
                    on_data(Some(&data));
                    watcher
                }
                Err(zk::Error::NoNode) => {
                    match self.client.check_and_watch_stat(path).await {
                        // Created in between: read it.
                        Ok((Some(_), _)) => continue,
                        Ok((None, watcher)) => {
                            on_data(None);
                            watcher
                        }
                        Err(e) => match classify(e, path) {
                            StoreError::SessionLost(_) | StoreError::Auth(_) => return,
                            _ => {
                                tokio::time::sleep(crate::coord::WATCH_RETRY_DELAY).await;
                                continue;
                            }
                        },
                    }
                }
                Err(e) => match classify(e, path) {
                    StoreError::SessionLost(_) | StoreError::Auth(_) => return,
                    _ => {
                        tokio::time::sleep(crate::coord::WATCH_RETRY_DELAY).await;
                        continue;
                    }
                },
            };
            let relinked = async {
                match again.as_mut() {
                    Some(rx) => {
                        if rx.changed().await.is_err() {
                            std::future::pending::<()>().await
                        }
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                event = watcher.changed() => {
                    if event.event_type == zk::EventType::Session {
                        return;
                    }
                }
                _ = relinked => {}
            }
        }
    }

    /// Returns when the session has ended for good (expired, closed, authentication
    /// failed), logging connection changes on the way. The client's state watcher blocks
    /// forever after a terminal state, so this stops at the first one.
    pub(super) async fn session_ended(&self, events: &mpsc::UnboundedSender<StoreEvent>) {
        let mut gone = self.member_gone.subscribe();
        // (Biased here and below: the simulation replays a seed only when no choice
        // among ready branches is left to tokio's RNG.)
        tokio::select! {
            biased;
            _ = gone.wait_for(|g| *g) => {}
            _ = self.client_session_ended(events) => {}
        }
    }

    /// A write to our member znode found it gone (NoNode) while the session lives: the
    /// ensemble lost it (restored from a copy that kept the session but not the znode, a
    /// wipe of the cluster's tree, a delete by hand). Everything this session registered
    /// is in doubt; it ends, and the next session registers again and waits its session
    /// timeout (SPEC §3a). Without it the holder's renewals failed for ever and it won and
    /// lost the same lock in a loop (the simulation's seed 11741).
    pub(super) fn member_gone(&self, node_id: &str) {
        if !self.member_gone.send_replace(true) {
            tracing::warn!(
                session = %SessionId(self.id),
                "the member znode of {node_id} is gone while this session lives: the \
                 ensemble lost it; the session is over"
            );
        }
    }

    /// Waits for the client's session to end; meanwhile sends [`StoreEvent::Reconnected`]
    /// each time the client is connected again after a change of state. The state watcher
    /// keeps only the newest state, so a disconnection and a reconnection between two
    /// looks show as one change to `SyncConnected`: every change that ends connected is a
    /// reconnection (the first look is not a change).
    pub(super) async fn client_session_ended(&self, events: &mpsc::UnboundedSender<StoreEvent>) {
        let mut states = self.client.state_watcher();
        let mut state = states.peek_state();
        let mut first = true;
        loop {
            match state {
                zk::SessionState::Expired
                | zk::SessionState::Closed
                | zk::SessionState::AuthFailed => return,
                zk::SessionState::Disconnected => {
                    tracing::warn!("disconnected from ZooKeeper; the client is reconnecting")
                }
                zk::SessionState::SyncConnected if !first => {
                    tracing::info!("ZooKeeper connection re-established within the session");
                    // The ensemble may have restarted from a copy that kept this session:
                    // what the floor held in the session's view is known no more, and the
                    // member record written again raises our entry once more (review of
                    // stop 46).
                    self.floor_raised.store(0, Ordering::SeqCst);
                    let _ = events.send(StoreEvent::Reconnected);
                    // After it: the breadcrumb read again is of the new link.
                    self.relinked.send_modify(|n| *n += 1);
                }
                _ => {}
            }
            first = false;
            state = states.changed().await;
        }
    }

    /// Hands `control` to `each` now and after every change, until the session ends or
    /// `each` returns false.
    pub(super) async fn follow_control(&self, mut each: impl FnMut(&Control) -> bool) {
        while let Some((control, _version, w)) = self.watch_control().await {
            if !each(&control) || w.changed().await.event_type == zk::EventType::Session {
                return;
            }
        }
    }

    /// Reads `control` and waits for its next change; `None` when the session ends.
    pub(super) async fn watch_control(&self) -> Option<(Control, Option<i32>, W::Watch)> {
        loop {
            match self.client.get_and_watch_data(&self.paths.control).await {
                Ok((data, stat, w)) => {
                    let control = record::parse(&data).unwrap_or_else(|e| {
                        tracing::warn!(
                            control = %self.paths.control,
                            "control is unreadable ({e}); treating it as not paused with no \
                             switchover pending (`warden status` shows it; `warden pause` \
                             rewrites it)"
                        );
                        Control::default()
                    });
                    return Some((control, Some(stat.version), w));
                }
                Err(zk::Error::NoNode) => {
                    match self.client.check_and_watch_stat(&self.paths.control).await {
                        Ok((None, w)) => return Some((Control::default(), None, w)),
                        Ok((Some(_), _)) => continue,
                        Err(e) => match classify(e, &self.paths.control) {
                            StoreError::SessionLost(_) | StoreError::Auth(_) => return None,
                            _ => tokio::time::sleep(crate::coord::WATCH_RETRY_DELAY).await,
                        },
                    }
                }
                Err(e) => match classify(e, &self.paths.control) {
                    StoreError::SessionLost(_) | StoreError::Auth(_) => return None,
                    _ => tokio::time::sleep(crate::coord::WATCH_RETRY_DELAY).await,
                },
            }
        }
    }

    pub(super) async fn get_optional(
        &self,
        path: &str,
    ) -> Result<Option<(Vec<u8>, zk::Stat)>, StoreError> {
        match self
            .bounded("reading", path, self.client.get_data(path))
            .await
        {
            Ok(x) => Ok(Some(x)),
            Err(StoreError::Rejected(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The lock's stat when this session owns it.
    pub(super) async fn own_lock(&self) -> Result<Option<zk::Stat>, StoreError> {
        let stat = self
            .bounded(
                "reading the lock",
                &self.paths.lock,
                self.client.check_stat(&self.paths.lock),
            )
            .await?;
        Ok(stat.filter(|s| s.ephemeral_owner == self.id))
    }

    /// Deletes `lock` if this session owns it. The caller drops the session afterwards
    /// (SPEC §4.3 "Release the lock").
    pub(super) async fn delete_own_lock(&self) -> Result<(), StoreError> {
        match self.own_lock().await? {
            Some(s) => self.delete_lock_at(s.version).await,
            None => Ok(()),
        }
    }

    /// Deletes `lock` at `version` (read with its owner checked); gone already is done.
    pub(super) async fn delete_lock_at(&self, version: i32) -> Result<(), StoreError> {
        match self
            .bounded(
                "deleting the lock",
                &self.paths.lock,
                self.client.delete(&self.paths.lock, Some(version)),
            )
            .await
        {
            Ok(()) | Err(StoreError::Rejected(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Writes `data` at `path` at `version` (or creates it when `None`).
    pub(super) async fn write(
        &self,
        path: &str,
        data: &[u8],
        version: Option<i32>,
    ) -> Result<(), StoreError> {
        match version {
            Some(v) => self
                .bounded("writing", path, self.client.set_data(path, data, Some(v)))
                .await
                .map(|_| ()),
            None => self
                .bounded(
                    "creating",
                    path,
                    self.client
                        .create(path, data, zk::CreateMode::Persistent, self.acls()),
                )
                .await
                .map(|_| ()),
        }
    }

    /// `<base>/history.<kind>-<UTC time>`, the time without colons so that the name is
    /// easy to type in `zkCli.sh`.
    pub(super) fn set_aside_path(&self, kind: &str) -> String {
        format!("{}/{}", self.paths.base, items::set_aside_name(kind))
    }

    /// The ensemble's current zxid, read from a write that changes nothing: the base
    /// znode's (empty) data set again. Every lock created later gets a greater czxid.
    pub(super) async fn current_zxid(&self) -> Result<Epoch, StoreError> {
        let base = &self.paths.base;
        let stat = self
            .bounded(
                "reading the current zxid at",
                base,
                self.client.set_data(base, &[], None),
            )
            .await?;
        Ok(stat.mzxid.max(0) as Epoch)
    }

    /// Deletes each znode at the version given, all or none (`init --force`).
    pub(super) async fn delete_at_versions(
        &self,
        doomed: &[(&str, i32)],
    ) -> Result<(), StoreError> {
        if doomed.is_empty() {
            return Ok(());
        }
        let ops: Vec<Op<'_>> = doomed
            .iter()
            .map(|(path, version)| Op::Delete {
                path,
                version: Some(*version),
            })
            .collect();
        self.multi("deleting", &ops).await
    }
}
