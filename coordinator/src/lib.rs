//! # weir-coordinator
//!
//! The JobManager roles of a Weir cluster:
//!
//! * **Dispatcher** — a JSON REST API under `/v1` ([`rest`]): submit a job
//!   graph, list jobs, job details (vertices, subtasks, states, back-pressure),
//!   cancel; workers and slots.
//! * **ResourceManager** — workers register their slots and heartbeat over
//!   the control protocol ([`weir_core::cluster`], Flight actions); a worker
//!   silent for longer than the heartbeat timeout is declared lost and every
//!   job with a task on it fails with that reason.
//! * **JobMaster** — per job: claims slots, places subtasks, deploys them to
//!   workers, tracks every task CREATED → DEPLOYING → RUNNING →
//!   FINISHED / FAILED / CANCELED and derives the job's status; the first
//!   failure cancels the job's other tasks. A job needing more slots than
//!   are free fails at once with both numbers named.
//!
//! Slots are shared the way Flink shares them: slot *i* of a job holds
//! subtask *i* of every vertex, so a job needs as many slots as its largest
//! parallelism. Slots are taken round-robin over the workers, so a job
//! spreads over the cluster and its hash exchanges cross workers.
//!
//! The coordinator never sees records. Checkpoint coordination and restart
//! strategies arrive with the checkpointing issue; until then a failed job
//! stays FAILED.
#![warn(missing_docs)]

pub mod checkpoints;
mod job_info;
pub mod job_store;
pub mod jobs;
pub mod leader;
pub mod metrics;
pub mod rest;
pub mod rest_metrics;
pub mod web;
mod workers;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use weir_core::cluster::{self, Heartbeat, HeartbeatReply, RegisterWorker, TaskUpdate};
use weir_core::{Result, Secret, WeirError};
use weir_flight::{ActionHandler, Credentials, FlightNode, TlsPem};

pub use jobs::{ClusterState, JobStatus};
pub use weir_core::graph::{ExecutionGraph, JobGraph};

/// How a coordinator is started.
#[derive(Debug, Clone)]
pub struct CoordinatorOptions {
    /// REST API address; default `127.0.0.1:8081`.
    pub rest_bind: SocketAddr,
    /// Control endpoint (workers) address; default `127.0.0.1:6123`.
    pub rpc_bind: SocketAddr,
    /// Token required on every REST and control call. Without one the
    /// coordinator makes one and writes it to a token file only its user
    /// can read (`weir_flight::token_file`), unless `insecure_loopback`.
    pub token: Option<Secret>,
    /// Serve loopback without any token (anyone on the machine may call
    /// every route and action). Refused with a non-loopback address.
    pub insecure_loopback: bool,
    /// Interval workers heartbeat at.
    pub heartbeat_interval: Duration,
    /// Silence after which a worker is lost.
    pub heartbeat_timeout: Duration,
    /// TLS for the control endpoint; workers are then called over TLS too.
    pub tls: Option<TlsPem>,
    /// The CA (PEM) that signed the workers' certificates; default: the
    /// coordinator's own certificate (one self-signed certificate for the
    /// cluster).
    pub tls_ca: Option<Vec<u8>>,
    /// Finished jobs kept for the REST API (Flink's `jobs.history.max-size`,
    /// default 1000); the oldest are forgotten beyond it.
    pub jobs_history_max_size: usize,
    /// The connectors of this binary: a submitted job naming another one,
    /// or giving a connector options it does not take, is refused at
    /// submission (`None`: the workers find out when they open it).
    pub connectors: Option<Arc<dyn weir_core::connector::ConnectorPlanner>>,
    /// The binary's SQL front end, for scripts submitted from the
    /// dashboard (`POST /v1/sql`); `None` refuses them.
    pub sql: Option<web::SqlCompiler>,
    /// The HA folder (Flink's `high-availability.storageDir`): its job
    /// store keeps every job's graph, status and restore point, and a
    /// coordinator started on it runs again the jobs that were running.
    pub ha_dir: Option<String>,
    /// With an HA folder: the leader's lease. A standby takes over a lease
    /// after the leader's last renewal.
    pub ha_lease: Duration,
}

impl Default for CoordinatorOptions {
    fn default() -> Self {
        Self {
            rest_bind: SocketAddr::from(([127, 0, 0, 1], 8081)),
            rpc_bind: SocketAddr::from(([127, 0, 0, 1], 6123)),
            token: None,
            heartbeat_interval: Duration::from_millis(1000),
            heartbeat_timeout: Duration::from_millis(10_000),
            tls: None,
            tls_ca: None,
            jobs_history_max_size: jobs::DEFAULT_JOBS_HISTORY_MAX,
            insecure_loopback: false,
            connectors: None,
            sql: None,
            ha_dir: None,
            ha_lease: Duration::from_secs(10),
        }
    }
}

impl CoordinatorOptions {
    /// Both listeners on loopback with free ports (tests, `weir run`).
    pub fn ephemeral() -> Self {
        Self {
            rest_bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            rpc_bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            ..Self::default()
        }
    }
}

/// A token for a cluster whose listeners leave loopback without one:
/// 32 random bytes from the OS, hex-encoded.
pub fn generate_token() -> Result<Secret> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| WeirError::io("/dev/urandom", e))?;
    Secret::new(bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// A running coordinator; dropping it stops both listeners.
pub struct Coordinator {
    /// Where the REST API listens.
    pub rest_addr: SocketAddr,
    /// Where workers call in.
    pub rpc_addr: SocketAddr,
    /// Shared cluster state (jobs, workers).
    pub state: Arc<Mutex<ClusterState>>,
    /// The cluster token (given or made), `None` only with
    /// `insecure_loopback`.
    pub token: Option<Secret>,
    /// Token files written for a made token (removed when it stops).
    pub token_files: Vec<std::path::PathBuf>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Coordinator {
    /// Start the REST API, the control endpoint and the heartbeat monitor.
    pub fn start(options: CoordinatorOptions) -> Result<Self> {
        let leaves_loopback =
            !options.rest_bind.ip().is_loopback() || !options.rpc_bind.ip().is_loopback();
        if leaves_loopback && options.token.is_none() {
            return Err(WeirError::Config(
                "a coordinator listening beyond loopback needs a token".into(),
            ));
        }
        let made_token = options.token.is_none() && !options.insecure_loopback;
        let mut options = options;
        if made_token {
            options.token = Some(generate_token()?);
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("weir-coordinator")
            .enable_all()
            .build()
            .map_err(|e| WeirError::Execution(format!("cannot start the coordinator: {e}")))?;
        let credentials = Credentials {
            token: options.token.clone(),
            tls_ca: options
                .tls
                .as_ref()
                .map(|t| Arc::new(options.tls_ca.clone().unwrap_or_else(|| t.cert.clone()))),
            epoch: None,
        };
        let mut cluster = ClusterState::new(
            credentials,
            options.heartbeat_interval,
            options.heartbeat_timeout,
        );
        cluster.history_max = options.jobs_history_max_size;
        cluster.connectors = options.connectors.clone();
        cluster.sql = options.sql.clone();
        let state = Arc::new(Mutex::new(cluster));
        let (rest_addr, rpc_addr) = runtime.block_on(async {
            let node = FlightNode::new(
                None,
                false,
                options.token.clone(),
                Some(Arc::new(ControlActions {
                    state: Arc::clone(&state),
                })),
            );
            let (rpc_addr, _) = node
                .serve(options.rpc_bind, options.token.clone(), options.tls.clone())
                .await?;
            let rest_addr =
                rest::serve(options.rest_bind, Arc::clone(&state), options.token.clone()).await?;
            Ok::<_, WeirError>((rest_addr, rpc_addr))
        })?;
        let addresses = [rest_addr.to_string(), rpc_addr.to_string()];
        let token_files = match (&options.token, made_token) {
            (Some(token), true) => weir_flight::token_file::write(token, &addresses)?,
            _ => {
                // A file left for these addresses by a coordinator that was
                // killed names a token this one does not use: clients
                // would present it. It goes.
                let stale: Vec<_> = addresses
                    .iter()
                    .map(|a| weir_flight::token_file::path_for(a))
                    .collect();
                weir_flight::token_file::remove(&stale);
                vec![]
            }
        };
        runtime.spawn(jobs::monitor_heartbeats(Arc::clone(&state)));
        runtime.spawn(checkpoints::run(Arc::clone(&state)));
        if let Some(dir) = &options.ha_dir {
            let store = Arc::new(job_store::JobStore::open(dir)?);
            let (objects, base) = weir_state::CheckpointStorage::open(dir)
                .map_err(|e| WeirError::Config(format!("--ha-dir {dir}: {e}")))?
                .object_store();
            let election = leader::Election::new(
                objects,
                &base,
                cluster::new_instance_id(),
                rpc_addr.to_string(),
                options.ha_lease,
            )
            .with_rest(format!("http://{rest_addr}"));
            let leadership = leader::Leadership::new(election);
            jobs::lock(&state).leadership = Some(Arc::clone(&leadership));
            runtime.spawn(lead(Arc::clone(&state), store, leadership));
        }
        Ok(Self {
            rest_addr,
            rpc_addr,
            state,
            token: options.token,
            token_files,
            runtime: Some(runtime),
        })
    }

    /// Block until the process is told to stop (Ctrl-C / SIGTERM).
    pub fn wait_for_shutdown(&self) {
        if let Some(rt) = &self.runtime {
            rt.block_on(async {
                let _ = tokio::signal::ctrl_c().await;
            });
        }
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        weir_flight::token_file::remove(&self.token_files);
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

/// Take part in the election of an HA folder: on becoming the leader, run
/// again the jobs its store lists as running and keep the store up to
/// date. A leader that lost its lease (paused, cut off) and finds a newer
/// epoch exits: another coordinator runs its jobs now, and one that acted
/// on them too would be a second leader.
async fn lead(
    state: Arc<Mutex<ClusterState>>,
    store: Arc<job_store::JobStore>,
    leadership: Arc<leader::Leadership>,
) {
    let mut led = false;
    loop {
        match leadership.step().await {
            Ok(leader::Role::Leader { epoch }) if !led => {
                led = true;
                tracing::info!("leading the cluster in epoch {epoch}");
                // Every call to workers carries the epoch from now on.
                jobs::lock(&state).credentials.epoch = Some(epoch);
                // Ids and jobs of the store first, then the records follow.
                if let Err(e) = job_store::recover(Arc::clone(&state), Arc::clone(&store)).await {
                    tracing::error!("cannot recover the stored jobs: {e}");
                }
                tokio::spawn(job_store::sync(Arc::clone(&state), Arc::clone(&store)));
            }
            Ok(leader::Role::Standby { leader }) if led => {
                tracing::error!(
                    "this coordinator no longer leads (now: {:?}); exiting",
                    leader.map(|l| l.epoch)
                );
                std::process::exit(3);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("leader election: {e}"),
        }
        tokio::time::sleep(leadership.interval().await).await;
    }
}

/// Why a standby refuses a call, naming the leader's address (REST or
/// control) when it knows it.
pub(crate) fn standby_refusal(state: &Mutex<ClusterState>, rest: bool) -> Option<String> {
    let leadership = jobs::lock(state).leadership.clone()?;
    match leadership.role() {
        leader::Role::Leader { .. } if leadership.may_act() => None,
        leader::Role::Leader { epoch } => Some(format!(
            "this coordinator's lease of epoch {epoch} ran out; it may no longer lead"
        )),
        leader::Role::Standby { leader } => Some(match leader {
            Some(l) if rest => format!("this coordinator stands by; the leader is {}", l.rest),
            Some(l) => format!("this coordinator stands by; the leader is {}", l.address),
            None => "this coordinator stands by; no leader yet".to_string(),
        }),
    }
}

/// Most slots one worker may offer (slot sums stay far from overflow).
pub const MAX_SLOTS_PER_WORKER: usize = 4096;

struct ControlActions {
    state: Arc<Mutex<ClusterState>>,
}

fn parse<T: serde::de::DeserializeOwned>(
    what: &str,
    body: &Bytes,
) -> std::result::Result<T, tonic::Status> {
    serde_json::from_slice(body)
        .map_err(|e| tonic::Status::invalid_argument(format!("malformed {what}: {e}")))
}

fn reply<T: serde::Serialize>(value: &T) -> std::result::Result<Bytes, tonic::Status> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| tonic::Status::internal(e.to_string()))
}

#[tonic::async_trait]
impl ActionHandler for ControlActions {
    async fn handle(&self, kind: &str, body: Bytes) -> std::result::Result<Bytes, tonic::Status> {
        if let Some(why) = standby_refusal(&self.state, false) {
            return Err(tonic::Status::unavailable(why));
        }
        match kind {
            cluster::REGISTER => {
                let r: RegisterWorker = parse("registration", &body)?;
                if r.slots == 0 || r.slots > MAX_SLOTS_PER_WORKER {
                    return Err(tonic::Status::invalid_argument(format!(
                        "a worker offers 1 to {MAX_SLOTS_PER_WORKER} slots, not {}",
                        r.slots
                    )));
                }
                let registered = jobs::lock(&self.state).register_worker(r);
                reply(&registered)
            }
            cluster::HEARTBEAT => {
                let h: Heartbeat = parse("heartbeat", &body)?;
                let known = jobs::heartbeat(&self.state, h);
                reply(&HeartbeatReply { known })
            }
            cluster::CHECKPOINT_ACK => {
                let ack: weir_core::cluster::CheckpointAckMessage =
                    parse("checkpoint acknowledgement", &body)?;
                let state = Arc::clone(&self.state);
                tokio::spawn(async move { checkpoints::acknowledge(&state, ack).await });
                Ok(Bytes::from_static(b"{}"))
            }
            cluster::TASK_UPDATE => {
                let u: TaskUpdate = parse("task update", &body)?;
                jobs::task_update(&self.state, u);
                Ok(Bytes::from_static(b"{}"))
            }
            other => Err(tonic::Status::invalid_argument(format!(
                "unknown action '{other}'"
            ))),
        }
    }

    fn actions(&self) -> Vec<(&'static str, &'static str)> {
        vec![
            (cluster::REGISTER, "a worker offers its slots"),
            (cluster::HEARTBEAT, "a worker is alive; its task states"),
            (cluster::TASK_UPDATE, "a task changed state"),
        ]
    }
}
