//! Leader election among coordinators that share an HA folder in object
//! storage, with nothing else to run (Flink uses ZooKeeper or Kubernetes).
//!
//! Records under `{ha dir}/leader/`, all written with
//! [`PutMode::Create`] — the one conditional write every store Weir
//! supports has (S3 `If-None-Match`, the local file system's hard link,
//! memory); the local file system has no compare-and-swap, so nothing here
//! needs one:
//!
//! ```text
//! epoch-{N}            the leader of epoch N (JSON: id, address, when)
//! renew-{N}-{seq}      the leader of epoch N is alive (one per renewal)
//! ```
//!
//! **Claiming** epoch N is creating `epoch-{N}`: of several contenders
//! exactly one succeeds, so every epoch has one leader, and epochs only
//! grow. **Renewing** is creating the next `renew-{N}-{seq}`, every third
//! of the lease. **Taking over:** a standby watches the newest (epoch,
//! renewal) it lists; when that has not changed for a whole lease on its
//! own monotonic clock, it claims the next epoch. **Stepping down:** a
//! leader counts its lease from the moment it *began* its last successful
//! renewal and stops acting as leader at four fifths of it, whatever the
//! store says — so a leader paused past its lease (SIGSTOP, a long GC, a
//! partition) knows on waking that it may no longer lead, before it lists
//! anything; and it steps down at once when it lists a newer epoch. As the
//! standby saw the last renewal only after it was written, it claims no
//! earlier than a lease after the leader began writing it: the two never
//! lead at once, as long as their clocks run at about the same rate (no
//! wall-clock agreement is needed).
//!
//! Every effect of a leader carries its epoch ([`Election::confirm`]
//! fences one: still within the lease, and no newer epoch listed).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use weir_core::{Result, WeirError};

/// Who leads an epoch, as its record says.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaderRecord {
    /// The epoch (1, 2, …).
    pub epoch: u64,
    /// The coordinator's instance id (unique per process).
    pub id: String,
    /// Where its control endpoint answers (workers call it).
    pub address: String,
    /// Where its REST API answers (`http://host:port`).
    #[serde(default)]
    pub rest: String,
    /// When it claimed the epoch (ms since the epoch, for people).
    pub claimed_ms: i64,
}

/// A coordinator's part, as of its last [`Election::step`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// It leads epoch `epoch`.
    Leader {
        /// The epoch it leads.
        epoch: u64,
    },
    /// It stands by; `leader` is the current leader's record, if any.
    Standby {
        /// The leader it follows.
        leader: Option<LeaderRecord>,
    },
}

/// What a listing of the leader records shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Seen {
    epoch: u64,
    renewal: u64,
}

/// One coordinator's view of the election.
pub struct Election {
    store: Arc<dyn ObjectStore>,
    dir: Path,
    id: String,
    address: String,
    rest: String,
    lease: Duration,
    /// Standing by: the newest (epoch, renewal) listed and when it changed.
    seen: Option<(Seen, Instant)>,
    /// Leading: the epoch, the renewals written, and when the last
    /// successful one began.
    epoch: Option<u64>,
    renewals: u64,
    renewed_at: Option<Instant>,
}

impl Election {
    /// The election in folder `base` of `store` (the HA dir), for the
    /// coordinator `id` answering at `address`, with leases of `lease`.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        base: &Path,
        id: impl Into<String>,
        address: impl Into<String>,
        lease: Duration,
    ) -> Self {
        Self {
            store,
            dir: base.clone().join("leader"),
            id: id.into(),
            address: address.into(),
            rest: String::new(),
            lease,
            seen: None,
            epoch: None,
            renewals: 0,
            renewed_at: None,
        }
    }

    /// The REST URL its leader record names.
    pub fn with_rest(mut self, url: impl Into<String>) -> Self {
        self.rest = url.into();
        self
    }

    /// How often [`Self::step`] should run: a third of the lease.
    pub fn interval(&self) -> Duration {
        self.lease / 3
    }

    /// The epoch this coordinator may act in now: it leads, and its lease
    /// (four fifths of it, counted from the start of its last renewal) has
    /// not run out. No I/O: a paused leader knows on waking.
    pub fn leading(&self) -> Option<u64> {
        let at = self.renewed_at?;
        (at.elapsed() < self.lease * 4 / 5).then_some(self.epoch?)
    }

    /// When its right to act runs out, while it leads (see
    /// [`Self::leading`]).
    pub fn lease_end(&self) -> Option<Instant> {
        self.epoch?;
        Some(self.renewed_at? + self.lease * 4 / 5)
    }

    /// Fence an effect (committing a checkpoint, publishing sink files,
    /// deploying): the epoch it may carry, or why it may not happen.
    pub async fn confirm(&self) -> Result<u64> {
        let Some(epoch) = self.leading() else {
            return Err(WeirError::Execution(format!(
                "coordinator {} is not the leader (its lease ran out or it never led)",
                self.id
            )));
        };
        let seen = self.list().await?;
        if seen.epoch != epoch {
            return Err(WeirError::Execution(format!(
                "coordinator {} led epoch {epoch}, superseded by epoch {}",
                self.id, seen.epoch
            )));
        }
        Ok(epoch)
    }

    /// One round: a leader renews (or steps down), a standby watches the
    /// leader and claims the next epoch once the lease ran out.
    pub async fn step(&mut self) -> Result<Role> {
        if self.epoch.is_some() {
            return self.renew().await;
        }
        let seen = self.list().await?;
        let now = Instant::now();
        let changed = self.seen.is_none_or(|(s, _)| s != seen);
        if changed {
            self.seen = Some((seen, now));
        }
        let quiet = self.seen.map_or(Duration::ZERO, |(_, at)| now - at);
        if seen.epoch == 0 || quiet >= self.lease {
            if let Some(epoch) = self.claim(seen.epoch + 1).await? {
                return Ok(Role::Leader { epoch });
            }
            // Another standby claimed it first: follow that one.
            let seen = self.list().await?;
            self.seen = Some((seen, Instant::now()));
            return self.standby(seen.epoch).await;
        }
        self.standby(seen.epoch).await
    }

    /// Give up leading (a coordinator shutting down): the next standby
    /// still waits a lease, as for one that died.
    pub fn resign(&mut self) {
        self.epoch = None;
        self.renewed_at = None;
        self.seen = None;
    }

    async fn standby(&self, epoch: u64) -> Result<Role> {
        let leader = if epoch == 0 {
            None
        } else {
            self.record(epoch).await?
        };
        Ok(Role::Standby { leader })
    }

    /// Create `epoch-{epoch}`: this coordinator's epoch, or `None` when
    /// another created it first.
    async fn claim(&mut self, epoch: u64) -> Result<Option<u64>> {
        let started = Instant::now();
        let record = LeaderRecord {
            epoch,
            id: self.id.clone(),
            address: self.address.clone(),
            rest: self.rest.clone(),
            claimed_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
        };
        let body = serde_json::to_vec(&record).map_err(|e| WeirError::Execution(e.to_string()))?;
        if !self.create(&self.epoch_path(epoch), body).await? {
            return Ok(None);
        }
        self.epoch = Some(epoch);
        self.renewals = 0;
        self.renewed_at = Some(started);
        self.seen = None;
        tracing::info!(epoch, id = %self.id, "leading");
        Ok(Some(epoch))
    }

    async fn renew(&mut self) -> Result<Role> {
        let epoch = self.epoch.expect("leading");
        let started = Instant::now();
        let seen = self.list().await?;
        // Paused past the lease, or superseded: step down.
        if self.leading().is_none() || seen.epoch > epoch {
            tracing::warn!(epoch, newest = seen.epoch, id = %self.id, "stepping down");
            self.resign();
            return self.standby(seen.epoch).await;
        }
        let next = self.renewals + 1;
        if !self.create(&self.renew_path(epoch, next), vec![]).await? {
            // Nobody else writes this epoch's renewals: a stale listing.
            self.resign();
            return self.standby(seen.epoch).await;
        }
        self.renewals = next;
        self.renewed_at = Some(started);
        // Old renewals go (best effort: a listing only needs the newest).
        if next > 2 {
            let _ = self.store.delete(&self.renew_path(epoch, next - 2)).await;
        }
        Ok(Role::Leader { epoch })
    }

    /// Create `path` unless it exists: whether it was created.
    async fn create(&self, path: &Path, body: Vec<u8>) -> Result<bool> {
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self
            .store
            .put_opts(path, PutPayload::from(body), opts)
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(self.error("write", path, e)),
        }
    }

    /// The newest epoch and its newest renewal.
    async fn list(&self) -> Result<Seen> {
        let names: Vec<String> = self
            .store
            .list(Some(&self.dir))
            .map_ok(|m| m.location.filename().unwrap_or_default().to_string())
            .try_collect()
            .await
            .map_err(|e| self.error("list", &self.dir, e))?;
        let epoch = names
            .iter()
            .filter_map(|n| n.strip_prefix("epoch-")?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        let renewal = names
            .iter()
            .filter_map(|n| {
                let (e, seq) = n.strip_prefix("renew-")?.split_once('-')?;
                (e.parse::<u64>().ok()? == epoch).then(|| seq.parse::<u64>().ok())?
            })
            .max()
            .unwrap_or(0);
        Ok(Seen { epoch, renewal })
    }

    async fn record(&self, epoch: u64) -> Result<Option<LeaderRecord>> {
        let path = self.epoch_path(epoch);
        let bytes = match self.store.get(&path).await {
            Ok(r) => r.bytes().await.map_err(|e| self.error("read", &path, e))?,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.error("read", &path, e)),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| WeirError::Execution(format!("HA record {path}: {e}")))
    }

    fn epoch_path(&self, epoch: u64) -> Path {
        self.dir.clone().join(format!("epoch-{epoch:020}"))
    }

    fn renew_path(&self, epoch: u64, seq: u64) -> Path {
        self.dir
            .clone()
            .join(format!("renew-{epoch:020}-{seq:020}"))
    }

    fn error(&self, what: &str, path: &Path, e: object_store::Error) -> WeirError {
        WeirError::Execution(format!("HA dir: cannot {what} {path}: {e}"))
    }
}

/// A coordinator's standing in the election, shared by its tasks: the
/// REST API and control endpoint answer only while it leads, and every
/// checkpoint commit is fenced ([`Self::confirm`]).
pub struct Leadership {
    election: tokio::sync::Mutex<Election>,
    role: std::sync::Mutex<Role>,
    /// The election's lease end after its last step.
    lease_end: std::sync::Mutex<Option<Instant>>,
}

impl Leadership {
    /// Standing by, until the first [`Self::step`].
    pub fn new(election: Election) -> Arc<Self> {
        Arc::new(Self {
            election: tokio::sync::Mutex::new(election),
            role: std::sync::Mutex::new(Role::Standby { leader: None }),
            lease_end: std::sync::Mutex::new(None),
        })
    }

    /// The role as of the last step.
    pub fn role(&self) -> Role {
        self.role.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// One round of the election.
    pub async fn step(&self) -> Result<Role> {
        let mut election = self.election.lock().await;
        let role = election.step().await?;
        *self.lease_end.lock().unwrap_or_else(|e| e.into_inner()) = election.lease_end();
        *self.role.lock().unwrap_or_else(|e| e.into_inner()) = role.clone();
        Ok(role)
    }

    /// Whether it may act now (cancel, deploy, trigger, answer workers):
    /// it leads and its lease has not run out by its own clock — so a
    /// leader woken after a pause acts on nothing before it steps.
    pub fn may_act(&self) -> bool {
        let end = *self.lease_end.lock().unwrap_or_else(|e| e.into_inner());
        end.is_some_and(|end| Instant::now() < end)
    }

    /// How often to step.
    pub async fn interval(&self) -> Duration {
        self.election.lock().await.interval()
    }

    /// The epoch an effect may carry now, or why it may not happen.
    pub async fn confirm(&self) -> Result<u64> {
        self.election.lock().await.confirm().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(1);

    fn stores() -> Vec<(&'static str, Arc<dyn ObjectStore>, tempfile::TempDir)> {
        let tmp = tempfile::tempdir().unwrap();
        let local = object_store::local::LocalFileSystem::new_with_prefix(tmp.path()).unwrap();
        vec![
            (
                "memory",
                Arc::new(object_store::memory::InMemory::new()),
                tempfile::tempdir().unwrap(),
            ),
            ("file", Arc::new(local), tmp),
        ]
    }

    fn election(store: &Arc<dyn ObjectStore>, id: &str) -> Election {
        Election::new(
            Arc::clone(store),
            &Path::from("ha"),
            id,
            format!("{id}:8081"),
            LEASE,
        )
    }

    #[tokio::test]
    async fn one_of_two_leads_and_the_other_follows_it() {
        for (kind, store, _tmp) in stores() {
            let mut a = election(&store, "a");
            let mut b = election(&store, "b");
            assert_eq!(a.step().await.unwrap(), Role::Leader { epoch: 1 }, "{kind}");
            let Role::Standby { leader: Some(l) } = b.step().await.unwrap() else {
                panic!("{kind}: b stands by");
            };
            assert_eq!((l.epoch, l.address.as_str()), (1, "a:8081"), "{kind}");
            // While a renews, b never takes over.
            for _ in 0..6 {
                tokio::time::sleep(a.interval()).await;
                assert_eq!(a.step().await.unwrap(), Role::Leader { epoch: 1 });
                assert!(matches!(b.step().await.unwrap(), Role::Standby { .. }));
            }
            assert_eq!(a.confirm().await.unwrap(), 1);
            assert!(b.confirm().await.is_err());
        }
    }

    #[tokio::test]
    async fn contenders_for_one_epoch_get_one_leader() {
        for (kind, store, _tmp) in stores() {
            let mut all: Vec<Election> =
                (0..4).map(|i| election(&store, &format!("c{i}"))).collect();
            let roles = futures::future::join_all(all.iter_mut().map(|e| e.step())).await;
            let leaders = roles
                .into_iter()
                .filter(|r| matches!(r, Ok(Role::Leader { epoch: 1 })))
                .count();
            assert_eq!(leaders, 1, "{kind}");
        }
    }

    #[tokio::test]
    async fn a_paused_leader_is_replaced_and_steps_down_without_acting() {
        for (kind, store, _tmp) in stores() {
            let mut a = election(&store, "a");
            let mut b = election(&store, "b");
            a.step().await.unwrap();
            b.step().await.unwrap();
            // a stops renewing (paused); b takes over once a lease passed
            // with nothing new.
            let started = Instant::now();
            let epoch = loop {
                tokio::time::sleep(b.interval()).await;
                if let Role::Leader { epoch } = b.step().await.unwrap() {
                    break epoch;
                }
                assert!(started.elapsed() < LEASE * 10, "{kind}: no takeover");
            };
            assert_eq!(epoch, 2, "{kind}");
            assert!(
                started.elapsed() >= LEASE,
                "{kind}: took over within the lease"
            );
            // a wakes: it knows without I/O that it may not act, and its
            // next round finds the new leader.
            assert_eq!(a.leading(), None, "{kind}");
            assert!(a.confirm().await.is_err(), "{kind}");
            let Role::Standby { leader: Some(l) } = a.step().await.unwrap() else {
                panic!("{kind}: a steps down");
            };
            assert_eq!(l.id, "b", "{kind}");
            assert_eq!(b.confirm().await.unwrap(), 2, "{kind}");
        }
    }

    #[tokio::test]
    async fn a_leader_that_lists_a_newer_epoch_steps_down_at_once() {
        for (kind, store, _tmp) in stores() {
            let mut a = election(&store, "a");
            a.step().await.unwrap();
            // Someone claimed epoch 2 (a's lease still running).
            let mut c = election(&store, "c");
            assert_eq!(c.claim(2).await.unwrap(), Some(2));
            assert!(a.confirm().await.is_err(), "{kind}: a fenced");
            assert!(
                matches!(a.step().await.unwrap(), Role::Standby { .. }),
                "{kind}"
            );
        }
    }
}
