//! SQLite persistence (`--data-dir`): every write of a request lands in one transaction.
//!
//! Layout: `objects(grp, resource, namespace, name, rv, data)` holds the current objects as
//! compact JSON; `meta(k, v)` holds the global resourceVersion counter (`rv`) and the last change
//! of each resource (`last:<group>/<resource>`), so that a restarted server continues the
//! resourceVersion sequence and knows from which RV a watch can still be resumed, and `clean`
//! (1 while the server is stopped cleanly: it is deleted at start and written by the writer's
//! last commit).

use std::path::Path;

use rusqlite::{Connection, params};

use crate::Error;

/// One staged write.
#[derive(Debug)]
pub(crate) enum DbOp {
    /// Insert or replace an object.
    Put {
        group: String,
        resource: String,
        namespace: String,
        name: String,
        rv: u64,
        /// Serialised on the writer thread, off the request path.
        data: std::sync::Arc<serde_json::Value>,
    },
    /// Remove an object.
    Delete {
        group: String,
        resource: String,
        namespace: String,
        name: String,
    },
    /// Remember the last change of a resource.
    LastChange {
        group: String,
        resource: String,
        rv: u64,
    },
}

/// A stored row, as loaded at start-up.
pub(crate) struct Row {
    pub group: String,
    pub resource: String,
    pub data: Vec<u8>,
}

/// The SQLite database of a data directory.
pub(crate) struct Db {
    conn: Connection,
}

fn sql_err(e: rusqlite::Error) -> Error {
    Error::Sqlite(e.to_string())
}

impl Db {
    /// Opens (or creates) `<dir>/devcluster.db` in WAL mode with `synchronous=NORMAL`.
    pub(crate) fn open(dir: &Path) -> Result<Db, Error> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::OpenStore(format!("{}: {e}", dir.display())))?;
        let conn = Connection::open(dir.join("devcluster.db")).map_err(sql_err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql_err)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql_err)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS objects (
                grp TEXT NOT NULL, resource TEXT NOT NULL, namespace TEXT NOT NULL,
                name TEXT NOT NULL, rv INTEGER NOT NULL, data BLOB NOT NULL,
                PRIMARY KEY (grp, resource, namespace, name)) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL) WITHOUT ROWID;",
        )
        .map_err(sql_err)?;
        Ok(Db { conn })
    }

    /// The persisted resourceVersion counter (0 for a new database).
    pub(crate) fn load_rv(&self) -> Result<u64, Error> {
        let v: Option<i64> = self
            .conn
            .query_row("SELECT v FROM meta WHERE k = 'rv'", [], |r| r.get(0))
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })
            .map_err(sql_err)?;
        Ok(v.unwrap_or(0).max(0) as u64)
    }

    /// Whether the server marked a clean stop last time, forgetting it: a crash from now on
    /// leaves no mark.
    pub(crate) fn take_clean_stop(&self) -> Result<bool, Error> {
        let marked = self
            .conn
            .execute("DELETE FROM meta WHERE k = 'clean'", [])
            .map_err(sql_err)?;
        Ok(marked > 0)
    }

    /// Marks a clean stop: everything queued is committed.
    fn mark_clean_stop(&self) -> Result<(), Error> {
        self.conn
            .execute("INSERT OR REPLACE INTO meta (k, v) VALUES ('clean', 1)", [])
            .map_err(sql_err)?;
        Ok(())
    }

    /// The persisted last change RV of every resource, as `(group, resource, rv)`.
    pub(crate) fn load_last_changes(&self) -> Result<Vec<(String, String, u64)>, Error> {
        let mut stmt = self
            .conn
            .prepare("SELECT k, v FROM meta WHERE k LIKE 'last:%'")
            .map_err(sql_err)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
            .map_err(sql_err)?;
        let mut out = Vec::new();
        for row in rows {
            let (k, v) = row.map_err(sql_err)?;
            let rest = k.trim_start_matches("last:");
            if let Some((g, r)) = rest.rsplit_once('/') {
                out.push((g.to_string(), r.to_string(), v.max(0) as u64));
            }
        }
        Ok(out)
    }

    /// Every stored object.
    pub(crate) fn load_objects(&self) -> Result<Vec<Row>, Error> {
        let mut stmt = self
            .conn
            .prepare("SELECT grp, resource, data FROM objects")
            .map_err(sql_err)?;
        let rows = stmt
            .query_map([], |r| {
                Ok(Row {
                    group: r.get(0)?,
                    resource: r.get(1)?,
                    data: r.get(2)?,
                })
            })
            .map_err(sql_err)?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row.map_err(sql_err)?);
        }
        Ok(out)
    }

    /// Writes `ops` and the counter `rv` in one transaction.
    pub(crate) fn write(&mut self, ops: &[DbOp], rv: u64) -> Result<(), Error> {
        let tx = self.conn.transaction().map_err(sql_err)?;
        {
            let mut put = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO objects (grp, resource, namespace, name, rv, data)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .map_err(sql_err)?;
            let mut del = tx
                .prepare_cached(
                    "DELETE FROM objects WHERE grp = ?1 AND resource = ?2 AND namespace = ?3 AND name = ?4",
                )
                .map_err(sql_err)?;
            let mut meta = tx
                .prepare_cached("INSERT OR REPLACE INTO meta (k, v) VALUES (?1, ?2)")
                .map_err(sql_err)?;
            for op in ops {
                match op {
                    DbOp::Put {
                        group,
                        resource,
                        namespace,
                        name,
                        rv,
                        data,
                    } => {
                        let bytes = serde_json::to_vec(&**data).unwrap_or_default();
                        put.execute(params![group, resource, namespace, name, *rv as i64, bytes])
                            .map_err(sql_err)?;
                    }
                    DbOp::Delete {
                        group,
                        resource,
                        namespace,
                        name,
                    } => {
                        del.execute(params![group, resource, namespace, name])
                            .map_err(sql_err)?;
                    }
                    DbOp::LastChange {
                        group,
                        resource,
                        rv,
                    } => {
                        meta.execute(params![format!("last:{group}/{resource}"), *rv as i64])
                            .map_err(sql_err)?;
                    }
                }
            }
            meta.execute(params!["rv", rv as i64]).map_err(sql_err)?;
        }
        tx.commit().map_err(sql_err)
    }
}

enum Msg {
    Write(Vec<DbOp>, u64),
    /// Called once everything queued before it is committed.
    Sync(Box<dyn FnOnce() + Send>),
}

/// A background thread that owns the database and commits queued writes in batches (group
/// commit): writes are queued in resourceVersion order while the store lock is held, and every
/// batch lands in one transaction, so the database always holds a prefix of the history.
pub(crate) struct Writer {
    tx: parking_lot::Mutex<Option<std::sync::mpsc::Sender<Msg>>>,
    handle: parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Writer {
    /// Starts the writer thread.
    pub(crate) fn start(mut db: Db) -> Result<Writer, Error> {
        let (tx, rx) = std::sync::mpsc::channel::<Msg>();
        let handle = std::thread::Builder::new()
            .name("devcluster-sqlite".into())
            .spawn(move || {
                // A write lost here is like a crash's: the restart must not pass for clean.
                let mut lost_writes = false;
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    while batch.len() < 4096 {
                        match rx.try_recv() {
                            Ok(m) => batch.push(m),
                            Err(_) => break,
                        }
                    }
                    let mut ops = Vec::new();
                    let mut rv = None;
                    let mut waiters = Vec::new();
                    for m in batch {
                        match m {
                            Msg::Write(o, r) => {
                                ops.extend(o);
                                rv = Some(r);
                            }
                            Msg::Sync(w) => waiters.push(w),
                        }
                    }
                    if let Some(rv) = rv
                        && let Err(e) = db.write(&ops, rv)
                    {
                        lost_writes = true;
                        tracing::error!(error = %e, "persisting writes failed");
                    }
                    for w in waiters {
                        w();
                    }
                }
                // Every sender is gone: the store was closed, and all it queued is committed.
                if !lost_writes && let Err(e) = db.mark_clean_stop() {
                    tracing::error!(error = %e, "marking the clean stop failed");
                }
            })
            .map_err(|e| Error::OpenStore(format!("starting the SQLite writer: {e}")))?;
        Ok(Writer {
            tx: parking_lot::Mutex::new(Some(tx)),
            handle: parking_lot::Mutex::new(Some(handle)),
        })
    }

    /// Queues writes (call with the store lock held, in RV order).
    pub(crate) fn write(&self, ops: Vec<DbOp>, rv: u64) {
        if let Some(tx) = self.tx.lock().as_ref() {
            let _ = tx.send(Msg::Write(ops, rv));
        }
    }

    /// Waits until everything queued so far is committed.
    pub(crate) fn sync(&self) {
        let (tx, rx) = std::sync::mpsc::channel();
        if self.after_commit(move || {
            let _ = tx.send(());
        }) {
            let _ = rx.recv();
        }
    }

    /// A receiver answered once everything queued so far is committed; `None` once the writer
    /// is closed.
    pub(crate) fn committed(&self) -> Option<tokio::sync::oneshot::Receiver<()>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.after_commit(move || {
            let _ = tx.send(());
        })
        .then_some(rx)
    }

    /// Has `f` called once everything queued so far is committed; false when the writer is
    /// closed (`f` is never called).
    fn after_commit(&self, f: impl FnOnce() + Send + 'static) -> bool {
        self.tx
            .lock()
            .as_ref()
            .is_some_and(|s| s.send(Msg::Sync(Box::new(f))).is_ok())
    }

    /// Commits what is queued and stops the thread.
    pub(crate) fn close(&self) {
        self.tx.lock().take();
        if let Some(h) = self.handle.lock().take() {
            let _ = h.join();
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.close();
    }
}
