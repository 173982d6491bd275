//! The backend's statements ([`SqlRows`]) on a server, one each, inside one of its
//! transactions; and what the server says of its own run.

use super::*;

/// The backend's statements ([`Rows`]) on a server, inside one of its transactions: one
/// statement each.
pub struct SqlRows {
    pub(super) tx: mysql_async::Transaction<'static>,
    pub(super) c: Arc<Ctx>,
}

impl Rows for SqlRows {
    type Error = mysql_async::Error;

    async fn member_session(&mut self, node: &str) -> Result<Option<i64>, Self::Error> {
        let c = &*self.c;
        first(
            &mut self.tx,
            format!(
                "SELECT session FROM {} WHERE cluster = ? AND node_id = ?",
                c.t.member
            ),
            (&c.cluster, node),
        )
        .await
    }

    async fn member(&mut self, node: &str, locked: bool) -> Result<Option<MemberRow>, Self::Error> {
        let c = &*self.c;
        let row: Option<(i64, bool, Vec<u8>)> = first(
            &mut self.tx,
            format!(
                "SELECT session, renewed_at < NOW(6) - INTERVAL ? MICROSECOND, record FROM {} \
                 WHERE cluster = ? AND node_id = ?{}",
                c.t.member,
                for_update(locked)
            ),
            (c.exp, &c.cluster, node),
        )
        .await?;
        Ok(row.map(|(session, expired, record)| MemberRow {
            session,
            expired,
            record,
        }))
    }

    async fn live_members(&mut self) -> Result<Vec<LiveMember>, Self::Error> {
        let c = &*self.c;
        all(
            &mut self.tx,
            format!(
                "SELECT node_id, session, record FROM {} WHERE cluster = ? AND renewed_at >= \
                 NOW(6) - INTERVAL ? MICROSECOND ORDER BY node_id",
                c.t.member
            ),
            (&c.cluster, c.exp),
        )
        .await
    }

    async fn replace_member(
        &mut self,
        node: &str,
        session: i64,
        record: &[u8],
    ) -> Result<(), Self::Error> {
        let c = &*self.c;
        self.tx
            .exec_drop(
                format!(
                    "REPLACE INTO {} (cluster, node_id, session, record, renewed_at) VALUES \
                     (?, ?, ?, ?, NOW(6))",
                    c.t.member
                ),
                (&c.cluster, node, session, record),
            )
            .await
    }

    async fn renew_member(
        &mut self,
        node: &str,
        session: i64,
        record: Option<&[u8]>,
    ) -> Result<bool, Self::Error> {
        let c = &*self.c;
        match record {
            Some(record) => {
                self.tx
                    .exec_drop(
                        format!(
                            "UPDATE {} SET record = ?, renewed_at = NOW(6) WHERE cluster = ? \
                             AND node_id = ? AND session = ?",
                            c.t.member
                        ),
                        (record, &c.cluster, node, session),
                    )
                    .await?
            }
            None => {
                self.tx
                    .exec_drop(
                        format!(
                            "UPDATE {} SET renewed_at = NOW(6) WHERE cluster = ? AND node_id = \
                             ? AND session = ?",
                            c.t.member
                        ),
                        (&c.cluster, node, session),
                    )
                    .await?
            }
        }
        Ok(self.tx.affected_rows() == 1)
    }

    async fn delete_member(&mut self, node: &str) -> Result<(), Self::Error> {
        let c = &*self.c;
        self.tx
            .exec_drop(
                format!(
                    "DELETE FROM {} WHERE cluster = ? AND node_id = ?",
                    c.t.member
                ),
                (&c.cluster, node),
            )
            .await
    }

    async fn lock(&mut self, locked: bool) -> Result<Option<LockRow>, Self::Error> {
        // With the row: its version (bumped by every renewal), how far its expiry lies
        // ahead of the server's clock, and the holder's own session timeout (what it adds
        // to renewed_at to make expires_at), in microseconds.
        let c = &*self.c;
        let row: Option<LockColumns> = first(
            &mut self.tx,
            format!(
                "SELECT session, record, epoch, {LOCK_EXPIRED}, version, \
                 TIMESTAMPDIFF(MICROSECOND, NOW(6), COALESCE(expires_at, renewed_at + \
                 INTERVAL ? MICROSECOND)), TIMESTAMPDIFF(MICROSECOND, renewed_at, \
                 COALESCE(expires_at, renewed_at + INTERVAL ? MICROSECOND)) FROM {} WHERE \
                 cluster = ?{}",
                c.t.lock,
                for_update(locked)
            ),
            (c.exp, c.exp, c.exp, &c.cluster),
        )
        .await?;
        Ok(row.map(
            |(session, record, epoch, expired, version, ahead_us, timeout_us)| LockRow {
                session,
                record,
                epoch,
                expired,
                version,
                ahead_us,
                timeout_us,
            },
        ))
    }

    async fn lock_session(&mut self, locked: bool) -> Result<Option<i64>, Self::Error> {
        let table = self.c.t.lock.clone();
        self.of_cluster("session", &table, locked).await
    }

    async fn renew_lock(
        &mut self,
        session: i64,
        record: Option<&[u8]>,
    ) -> Result<bool, Self::Error> {
        let c = &*self.c;
        // Not once expired: an expired row is gone, though it names this session (the
        // simulation's seed 507023: the keepalive renewed it under a node that had seen it
        // go, and that node, of priority 0, held it for ever without serving). In
        // parentheses: under the server's HIGH_NOT_PRECEDENCE, `NOT a < b` reads as
        // `(NOT a) < b`, always true (the review of stop 44).
        let sql = |set_record: &str| {
            format!(
                "UPDATE {} SET {set_record}{NEXT_VERSION}, {LOCK_RENEWED} WHERE cluster = ? AND \
                 session = ? AND NOT ({LOCK_EXPIRED})",
                c.t.lock
            )
        };
        match record {
            Some(record) => {
                self.tx
                    .exec_drop(
                        sql("record = ?, "),
                        (record, c.exp, &c.cluster, session, c.exp),
                    )
                    .await?
            }
            None => {
                self.tx
                    .exec_drop(sql(""), (c.exp, &c.cluster, session, c.exp))
                    .await?
            }
        }
        Ok(self.tx.affected_rows() == 1)
    }

    async fn replace_lock(
        &mut self,
        session: i64,
        record: &[u8],
        epoch: Epoch,
    ) -> Result<(), Self::Error> {
        let c = &*self.c;
        self.tx
            .exec_drop(
                format!(
                    "REPLACE INTO {} (cluster, session, record, epoch, version, renewed_at, \
                     expires_at) VALUES (?, ?, ?, ?, 0, NOW(6), NOW(6) + INTERVAL ? MICROSECOND)",
                    c.t.lock
                ),
                (&c.cluster, session, record, epoch, c.exp),
            )
            .await
    }

    async fn delete_lock(&mut self, session: i64) -> Result<(), Self::Error> {
        let c = &*self.c;
        self.tx
            .exec_drop(
                format!("DELETE FROM {} WHERE cluster = ? AND session = ?", c.t.lock),
                (&c.cluster, session),
            )
            .await
    }

    async fn counter(&mut self, locked: bool) -> Result<Option<u64>, Self::Error> {
        let table = self.c.t.epoch.clone();
        self.of_cluster("epoch", &table, locked).await
    }

    async fn next_epoch(&mut self) -> Result<Epoch, Self::Error> {
        let c = &*self.c;
        self.tx
            .exec_drop(
                format!(
                    "UPDATE {} SET epoch = LAST_INSERT_ID(epoch + 1) WHERE cluster = ?",
                    c.t.epoch
                ),
                (&c.cluster,),
            )
            .await?;
        Ok(self
            .tx
            .query_first("SELECT LAST_INSERT_ID()")
            .await?
            .unwrap_or_default())
    }

    async fn init_counter(&mut self, floor: Option<Epoch>) -> Result<(), Self::Error> {
        let c = &*self.c;
        self.tx
            .exec_drop(
                format!(
                    "INSERT IGNORE INTO {} (cluster, epoch) VALUES (?, 0)",
                    c.t.epoch
                ),
                (&c.cluster,),
            )
            .await?;
        if let Some(floor) = floor {
            self.tx
                .exec_drop(
                    format!(
                        "UPDATE {} SET epoch = IF(epoch >= ?, ?, GREATEST(epoch, ?)) WHERE \
                         cluster = ?",
                        c.t.epoch
                    ),
                    // A counter at or above 2^53 holds no epoch a counter gives (garbage,
                    // or next to overflowing): replaced, never kept.
                    (super::super::MAX_KEPT_EPOCH, floor, floor, &c.cluster),
                )
                .await?;
        }
        Ok(())
    }

    async fn marker(&mut self) -> Result<bool, Self::Error> {
        let c = &*self.c;
        let version: Option<i64> = first(
            &mut self.tx,
            format!(
                "SELECT version FROM {} WHERE cluster = ? AND name = ?",
                c.t.kv
            ),
            (&c.cluster, MARKER),
        )
        .await?;
        Ok(version.is_some())
    }

    async fn raise_seen(&mut self, node: &str, epoch: Epoch) -> Result<(), Self::Error> {
        let c = &*self.c;
        raise_seen(&mut self.tx, &c.t, &c.cluster, node, Some(epoch)).await
    }

    async fn floor(&mut self, locked: bool) -> Result<Option<(Epoch, String)>, Self::Error> {
        let c = &*self.c;
        if locked {
            read_floor_locked(&mut self.tx, &c.t, &c.cluster).await
        } else {
            read_floor(&mut self.tx, &c.t, &c.cluster).await
        }
    }

    async fn kv(
        &mut self,
        name: &str,
        locked: bool,
    ) -> Result<Option<(Vec<u8>, i64)>, Self::Error> {
        let c = &*self.c;
        first(
            &mut self.tx,
            format!(
                "SELECT value, version FROM {} WHERE cluster = ? AND name = ?{}",
                c.t.kv,
                for_update(locked)
            ),
            (&c.cluster, name),
        )
        .await
    }

    async fn write_kv(
        &mut self,
        name: &str,
        data: &[u8],
        version: Option<i64>,
    ) -> Result<bool, Self::Error> {
        let c = &*self.c;
        match version {
            Some(v) => {
                self.tx
                    .exec_drop(
                        format!(
                            "UPDATE {} SET value = ?, {NEXT_VERSION} WHERE cluster = ? AND name \
                             = ? AND version = ?",
                            c.t.kv
                        ),
                        (data, &c.cluster, name, v),
                    )
                    .await?
            }
            None => {
                self.tx
                    .exec_drop(
                        format!(
                            "INSERT INTO {} (cluster, name, value, version) VALUES (?, ?, ?, 0)",
                            c.t.kv
                        ),
                        (&c.cluster, name, data),
                    )
                    .await?
            }
        }
        Ok(self.tx.affected_rows() == 1)
    }

    async fn insert_kv_ignore(&mut self, name: &str, data: &[u8]) -> Result<bool, Self::Error> {
        let c = &*self.c;
        self.tx
            .exec_drop(
                format!(
                    "INSERT IGNORE INTO {} (cluster, name, value, version) VALUES (?, ?, ?, 0)",
                    c.t.kv
                ),
                (&c.cluster, name, data),
            )
            .await?;
        Ok(self.tx.affected_rows() == 1)
    }

    async fn delete_kv(&mut self, name: &str, version: Option<i64>) -> Result<bool, Self::Error> {
        let c = &*self.c;
        match version {
            Some(v) => {
                self.tx
                    .exec_drop(
                        format!(
                            "DELETE FROM {} WHERE cluster = ? AND name = ? AND version = ?",
                            c.t.kv
                        ),
                        (&c.cluster, name, v),
                    )
                    .await?
            }
            None => {
                self.tx
                    .exec_drop(
                        format!("DELETE FROM {} WHERE cluster = ? AND name = ?", c.t.kv),
                        (&c.cluster, name),
                    )
                    .await?
            }
        }
        Ok(self.tx.affected_rows() == 1)
    }

    async fn kv_names(&mut self, prefix: &str) -> Result<Vec<String>, Self::Error> {
        let c = &*self.c;
        all(
            &mut self.tx,
            format!(
                "SELECT name FROM {} WHERE cluster = ? AND name LIKE ? ORDER BY name",
                c.t.kv
            ),
            (&c.cluster, format!("{prefix}%")),
        )
        .await
    }

    async fn server_run(&mut self) -> Result<ServerRun, Self::Error> {
        server_run(&mut self.tx).await
    }
}

impl SqlRows {
    /// Column `what` of the cluster's row of `table` (the lock, the counter), for update
    /// when `locked`.
    pub(super) async fn of_cluster<T>(
        &mut self,
        what: &str,
        table: &str,
        locked: bool,
    ) -> Result<Option<T>, mysql_async::Error>
    where
        T: mysql_async::prelude::FromRow + Send + 'static,
    {
        let sql = format!(
            "SELECT {what} FROM {table} WHERE cluster = ?{}",
            for_update(locked)
        );
        first(&mut self.tx, sql, (self.c.cluster.as_str(),)).await
    }
}

/// The locking clause of a read that locks.
pub(super) fn for_update(locked: bool) -> &'static str {
    if locked {
        " FOR UPDATE"
    } else {
        ""
    }
}

/// The server's identity and start time (see [`ServerRun`]). A server that hides its
/// `Uptime` has no start time: its restarts go unseen, its failovers not.
pub(super) async fn server_run<Q: Queryable>(q: &mut Q) -> Result<ServerRun, mysql_async::Error> {
    let (id, now): (String, i64) = q
        .query_first("SELECT CONCAT(@@hostname, ':', @@port, ':', @@server_id), UNIX_TIMESTAMP()")
        .await?
        .unwrap_or_default();
    // An error is an error (the caller retries: the review of stop 42 found a failed read
    // taken for a server without a start time, blind to its restarts for the whole
    // session); only a server that answers without the row hides it.
    let up: Option<(String, String)> = q.query_first("SHOW GLOBAL STATUS LIKE 'Uptime'").await?;
    let started = up
        .and_then(|(_, v)| v.parse::<i64>().ok())
        .map(|up| now - up);
    Ok(ServerRun { id, started })
}
