//! `weir`: run a Weir cluster and its jobs.
//!
//! Session mode: `weir coordinator`, then `weir worker --coordinator ADDR
//! --slots N` on each machine, then `weir submit JOB.json`, `weir list`,
//! `weir cancel JOB`. Application mode: `weir run JOB.json` starts a
//! coordinator and workers for that one job — in this process by default,
//! or as separate processes with `--processes` — and exits with the job.

mod http;
mod inspect;
mod progress;
mod shell;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use weir_coordinator::{Coordinator, CoordinatorOptions, generate_token};
use weir_core::Secret;
use weir_core::graph::JobGraph;
use weir_flight::TlsPem;
use weir_worker::{WorkerNode, WorkerOptions};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "Weir: a columnar stream processor in the model of Apache Flink"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(clap::Args, Clone)]
struct Remote {
    /// The coordinator's REST API; several, comma-separated, for
    /// coordinators sharing an HA folder (the one that leads answers).
    #[arg(
        long,
        env = "WEIR_COORDINATOR_URL",
        default_value = "http://127.0.0.1:8081"
    )]
    url: String,
    /// Bearer token of the cluster.
    #[arg(long, env = "WEIR_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

/// TLS for the cluster's Flight endpoints (control calls and exchange).
#[derive(clap::Args, Clone)]
struct Tls {
    /// PEM certificate chain this process serves with; with it every
    /// connection between coordinator and workers is TLS.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// PEM CA that signed the cluster's certificates (default: --tls-cert
    /// itself, for one self-signed certificate shared by the cluster).
    #[arg(long, requires = "tls_cert")]
    tls_ca: Option<PathBuf>,
}

impl Tls {
    fn load(&self) -> Result<(Option<TlsPem>, Option<Vec<u8>>), String> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok((None, None));
        };
        let pem = TlsPem::read(cert, key).map_err(|e| e.to_string())?;
        let ca = self
            .tls_ca
            .as_ref()
            .map(|p| std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display())))
            .transpose()?;
        Ok((Some(pem), ca))
    }
}

/// Resuming from a savepoint.
#[derive(clap::Args, Clone, Default)]
struct Restore {
    /// Resume from this savepoint (or checkpoint) folder.
    #[arg(long)]
    from_savepoint: Option<String>,
    /// Skip savepoint state of operators the job no longer has.
    #[arg(long, requires = "from_savepoint")]
    allow_non_restored_state: bool,
}

impl Restore {
    fn query(&self) -> String {
        match &self.from_savepoint {
            None => String::new(),
            Some(p) => format!(
                "?from_savepoint={}{}",
                percent_encode(p),
                if self.allow_non_restored_state {
                    "&allow_non_restored_state=true"
                } else {
                    ""
                }
            ),
        }
    }
}

fn percent_encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// `weir coordinator` options.
#[derive(clap::Args)]
struct CoordinatorArgs {
    /// REST API address.
    #[arg(long, default_value = "127.0.0.1:8081")]
    rest: SocketAddr,
    /// Address workers connect to.
    #[arg(long, default_value = "127.0.0.1:6123")]
    rpc: SocketAddr,
    /// Token required on every call. When none is given one is made: on
    /// loopback it is written to a token file only this user can read
    /// (`~/.weir/token-HOST-PORT`, or under `$XDG_RUNTIME_DIR`), where the
    /// CLI and workers started by this user find it; beyond loopback it is
    /// printed.
    #[arg(long, env = "WEIR_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Serve loopback with no token at all: every local user may call every
    /// route and action.
    #[arg(long, conflicts_with = "token")]
    insecure_loopback: bool,
    /// How often workers heartbeat (ms).
    #[arg(long, default_value_t = 1000)]
    heartbeat_interval_ms: u64,
    /// Silence after which a worker is declared lost (ms).
    #[arg(long, default_value_t = 10_000)]
    heartbeat_timeout_ms: u64,
    /// Finished jobs kept for `weir list` and the REST API (Flink's
    /// `jobs.history.max-size`); the oldest are forgotten beyond it.
    #[arg(long = "jobs-history-max-size", default_value_t = 1000)]
    jobs_history_max_size: usize,
    /// HA folder (Flink's `high-availability.storageDir`): a path,
    /// `file://`, `s3://`, `gs://` or `az://` URL. Its job store keeps every
    /// job's graph, status and restore point; a coordinator started again
    /// on it runs the jobs that were running again, from their latest
    /// checkpoint, under the same ids.
    #[arg(long, env = "WEIR_HA_DIR", alias = "high-availability.storageDir")]
    ha_dir: Option<String>,
    /// With `--ha-dir`: the leader's lease (ms). Coordinators sharing the
    /// folder elect one leader; a standby takes over a lease after the
    /// leader's last renewal.
    #[arg(long, default_value_t = 10_000)]
    ha_lease_ms: u64,
    /// Flink's `high-availability.type`: `none` turns HA off even with a
    /// folder; Weir's own (`weir`, also taken as `object-store`) is what
    /// `--ha-dir` gives. ZooKeeper and Kubernetes are not needed here and
    /// are refused.
    #[arg(long = "high-availability.type", default_value = "weir")]
    ha_type: String,
    #[command(flatten)]
    tls: Tls,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a coordinator (JobManager): REST API for clients, control endpoint for workers.
    Coordinator(CoordinatorArgs),
    /// Start a worker (TaskManager) offering task slots to a coordinator.
    Worker {
        /// The coordinator's control address (its `--rpc`); several, comma-separated,
        /// for coordinators sharing an HA folder: it registers with the leader.
        #[arg(long, default_value = "127.0.0.1:6123")]
        coordinator: String,
        /// Task slots offered.
        #[arg(long, default_value_t = 1)]
        slots: usize,
        /// Address of this worker's Flight endpoint (exchange, sinks, control).
        #[arg(long, default_value = "127.0.0.1:0")]
        bind: SocketAddr,
        /// The cluster token.
        #[arg(long, env = "WEIR_TOKEN", hide_env_values = true)]
        token: Option<String>,
        #[command(flatten)]
        tls: Tls,
        /// Serve Prometheus' `/metrics` (every subtask on this worker) on
        /// this address (Flink's per-TaskManager Prometheus reporter);
        /// beyond loopback it needs the token.
        #[arg(long)]
        metrics: Option<SocketAddr>,
    },
    /// Submit a job graph (JSON) to a running coordinator; prints the job id.
    Submit {
        /// The job: a job graph (JSON) or a Flink SQL script (`.sql`).
        job: PathBuf,
        #[command(flatten)]
        remote: Remote,
        /// Wait for the job to end; exit non-zero unless it finished.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        restore: Restore,
    },
    /// List the connectors SQL tables can name, with their options.
    Connectors,
    /// Take a savepoint of a running job; prints its folder.
    Savepoint {
        /// Job id.
        job: String,
        /// Folder to create the savepoint in (default: the temp dir).
        dir: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Stop a job: with --savepoint, take one first and end the job
    /// FINISHED once it is taken (resume it with --from-savepoint).
    Stop {
        /// Job id.
        job: String,
        /// Take a savepoint (into this folder when given) before stopping.
        #[arg(long, num_args = 0..=1, default_missing_value = "")]
        savepoint: Option<String>,
        /// Emit the maximum watermark first: every window and event-time
        /// timer fires into the savepoint (to end a job for good).
        #[arg(long, requires = "savepoint")]
        drain: bool,
        #[command(flatten)]
        remote: Remote,
    },
    /// List the jobs of a coordinator.
    List {
        #[command(flatten)]
        remote: Remote,
    },
    /// Show one job: vertices, subtasks, states, back-pressure, history.
    Status {
        /// Job id.
        job: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Cancel a job.
    Cancel {
        /// Job id.
        job: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Inspect checkpoints: `weir state inspect DIR` lists a job's completed
    /// checkpoints (DIR holds `chk-N` folders) or prints one (`…/chk-N`).
    State {
        #[command(subcommand)]
        command: StateCmd,
    },
    /// An interactive SQL shell on the embedded runtime: statements from
    /// stdin, a SELECT's result shown as a live table.
    Sql {
        /// Run this script first (tables, views, options).
        #[arg(long)]
        init: Option<PathBuf>,
    },
    /// Run one job on its own cluster (application mode) and exit with it.
    Run {
        /// The job: a job graph (JSON) or a Flink SQL script (`.sql`).
        job: PathBuf,
        /// Number of workers.
        #[arg(long, default_value_t = 1)]
        workers: usize,
        /// Slots per worker (default: enough for the job).
        #[arg(long)]
        slots: Option<usize>,
        /// Run the workers as separate local processes.
        #[arg(long)]
        processes: bool,
        /// Address of the (first) worker's Flight endpoint, where Flight
        /// clients read `flight` sinks and push into `flight` sources.
        /// Beyond loopback it needs `--token`.
        #[arg(long, env = "WEIR_FLIGHT_BIND", default_value = "127.0.0.1:0")]
        flight_bind: SocketAddr,
        /// The run's cluster token, which Flight clients present too
        /// (default: one is made and kept in a token file of this user).
        #[arg(long, env = "WEIR_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// HA folder: the run's job is recorded there, and a run started
        /// again on the folder after this one died resumes it from its
        /// latest checkpoint instead of starting it anew.
        #[arg(long, env = "WEIR_HA_DIR", alias = "high-availability.storageDir")]
        ha_dir: Option<String>,
        /// With `--ha-dir`: the coordinator's lease (ms); a run started
        /// again waits this long after the dead one's last renewal.
        #[arg(long, default_value_t = 10_000)]
        ha_lease_ms: u64,
        #[command(flatten)]
        restore: Restore,
        /// No progress display (there is none when stderr is not a
        /// terminal either).
        #[arg(long, short)]
        quiet: bool,
    },
}

#[derive(Subcommand)]
enum StateCmd {
    /// Print a checkpoint's manifest: operators, key-group ranges, files, sizes.
    Inspect {
        /// A checkpoint (`…/chk-N`) or the folder holding a job's checkpoints.
        path: PathBuf,
    },
}

fn main() -> ExitCode {
    // Logs on stderr, the level from RUST_LOG (warnings by default).
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let outcome = match cli.command {
        Cmd::Coordinator(args) => coordinator(args),
        Cmd::Worker {
            coordinator,
            slots,
            bind,
            token,
            tls,
            metrics,
        } => worker(coordinator, slots, (bind, metrics), token, &tls),
        Cmd::Submit {
            job,
            remote,
            wait,
            restore,
        } => submit(&job, &remote, wait, &restore),
        Cmd::Savepoint { job, dir, remote } => savepoint(&job, dir, (false, false), &remote),
        Cmd::Stop {
            job,
            savepoint: Some(dir),
            drain,
            remote,
        } => savepoint(
            &job,
            Some(dir).filter(|d| !d.is_empty()),
            (true, drain),
            &remote,
        ),
        Cmd::Stop {
            job,
            savepoint: None,
            remote,
            ..
        } => cancel(&job, &remote),
        Cmd::List { remote } => list(&remote),
        Cmd::Connectors => {
            print!("{}", weir_sql::SqlSession::new().connectors().describe());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Status { job, remote } => status(&job, &remote),
        Cmd::Cancel { job, remote } => cancel(&job, &remote),
        Cmd::State {
            command: StateCmd::Inspect { path },
        } => inspect::inspect(&path),
        Cmd::Sql { init } => shell::run(init.as_deref()),
        Cmd::Run {
            job,
            workers,
            slots,
            processes,
            flight_bind,
            token,
            ha_dir,
            ha_lease_ms,
            restore,
            quiet,
        } => run(
            &job,
            RunCluster {
                workers,
                slots,
                processes,
                flight_bind,
                token,
                ha: ha_dir.map(|dir| (dir, Duration::from_millis(ha_lease_ms.max(300)))),
            },
            &restore,
            quiet,
        ),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

type Outcome = Result<ExitCode, String>;

fn secret(token: Option<String>) -> Result<Option<Secret>, String> {
    token
        .map(Secret::new)
        .transpose()
        .map_err(|e| e.to_string())
}

fn coordinator(args: CoordinatorArgs) -> Outcome {
    let CoordinatorArgs {
        rest,
        rpc,
        token,
        heartbeat_interval_ms: interval,
        heartbeat_timeout_ms: timeout,
        jobs_history_max_size,
        insecure_loopback,
        ha_dir,
        ha_lease_ms,
        ha_type,
        tls,
    } = args;
    let ha_dir = match ha_type.to_ascii_lowercase().as_str() {
        "none" | "false" => None,
        "weir" | "object-store" => ha_dir,
        other => {
            return Err(format!(
                "high-availability.type '{other}': Weir elects its leader in the HA folder \
                 (--ha-dir) and needs no ZooKeeper or Kubernetes; use 'weir' or 'none'"
            ));
        }
    };
    let (tls, tls_ca) = tls.load()?;
    let mut token = secret(token)?;
    if token.is_none() && (!rest.ip().is_loopback() || !rpc.ip().is_loopback()) {
        let generated = generate_token().map_err(|e| e.to_string())?;
        announce(format_args!(
            "generated token (pass it to workers and clients as WEIR_TOKEN): {}",
            generated.expose()
        ));
        token = Some(generated);
    }
    let c = Coordinator::start(CoordinatorOptions {
        rest_bind: rest,
        rpc_bind: rpc,
        token,
        heartbeat_interval: Duration::from_millis(interval),
        heartbeat_timeout: Duration::from_millis(timeout),
        tls,
        tls_ca,
        jobs_history_max_size,
        insecure_loopback,
        connectors: Some(std::sync::Arc::new(weir_worker::ProcessConnectors)),
        sql: Some(dashboard_sql()),
        ha_dir,
        ha_lease: Duration::from_millis(ha_lease_ms.max(300)),
    })
    .map_err(|e| e.to_string())?;
    announce(format_args!(
        "coordinator REST API on http://{}",
        c.rest_addr
    ));
    announce(format_args!("dashboard on http://{}/", c.rest_addr));
    announce(format_args!(
        "coordinator control endpoint on {}",
        c.rpc_addr
    ));
    for f in &c.token_files {
        announce(format_args!(
            "token written to {} (readable by this user only)",
            f.display()
        ));
    }
    c.wait_for_shutdown();
    Ok(ExitCode::SUCCESS)
}

fn worker(
    coordinator: String,
    slots: usize,
    (bind, metrics): (SocketAddr, Option<SocketAddr>),
    token: Option<String>,
    tls: &Tls,
) -> Outcome {
    let mut options = WorkerOptions::new(coordinator.clone(), slots);
    options.bind = bind;
    options.metrics = metrics;
    options.token = match secret(token)? {
        Some(t) => Some(t),
        // A coordinator this user started on this machine left its token.
        None => weir_flight::token_file::read(&coordinator).map_err(|e| e.to_string())?,
    };
    (options.tls, options.tls_ca) = tls.load()?;
    let w = WorkerNode::start(options, Duration::from_secs(30)).map_err(|e| e.to_string())?;
    announce(format_args!(
        "worker {} serving Flight on {} with {slots} slots",
        w.worker_id(),
        w.address()
    ));
    if let Some(m) = w.metrics_address() {
        announce(format_args!("worker metrics on http://{m}/metrics"));
    }
    // Runs until killed.
    loop {
        std::thread::park();
    }
}

/// A `.sql` script as a job graph: statements run in order (their results
/// printed), then the inserts and queries become one job. `None`: the
/// script only declares and explains.
fn compile_sql(path: &std::path::Path, text: &str) -> Result<Option<String>, String> {
    compile_sql_showing(path, text, true)
}

/// The SQL front end a coordinator takes scripts from the dashboard with:
/// the job graph of a script, or why there is none.
fn dashboard_sql() -> weir_coordinator::web::SqlCompiler {
    weir_coordinator::web::SqlCompiler(std::sync::Arc::new(|text: &str| {
        compile_sql_showing(std::path::Path::new("script"), text, false)?
            .ok_or_else(|| "the script has no INSERT INTO or SELECT to run".to_string())
    }))
}

/// [`compile_sql`], printing what the statements return when `show`.
fn compile_sql_showing(
    path: &std::path::Path,
    text: &str,
    show: bool,
) -> Result<Option<String>, String> {
    let mut session = weir_sql::SqlSession::new();
    let results = session
        .execute_script(text)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    for r in results.into_iter().filter(|_| show) {
        match r {
            weir_sql::StatementResult::Explain(t) => println!("{t}"),
            weir_sql::StatementResult::Options(o) => {
                for (k, v) in o {
                    println!("'{k}' = '{v}'");
                }
            }
            weir_sql::StatementResult::Ok(_) | weir_sql::StatementResult::Query => {}
        }
    }
    if !session.has_job() {
        return Ok(None);
    }
    let config = weir_core::config::WeirConfig::default()
        .with_env()
        .map_err(|e| e.to_string())?;
    let env = weir_core::api::StreamExecutionEnvironment::new(config);
    session
        .build(&env)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let graph = env
        .job_graph(&session.job_name())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    graph
        .to_json()
        .map(Some)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// A line a long-running process (coordinator, worker) prints about
/// itself on stdout. A reader that has gone (`weir worker … | head -1`)
/// must not stop the process: the failed write is dropped, where
/// `println!` would panic.
fn announce(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// A job file: a job graph as JSON, or a SQL script (`.sql`); `None` when
/// a script has nothing to run.
fn read_job_or_sql(path: &PathBuf) -> Result<Option<String>, String> {
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("sql"))
    {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read SQL file {}: {e}", path.display()))?;
        return compile_sql(path, &text);
    }
    read_job(path).map(Some)
}

fn read_job(path: &PathBuf) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read job file {}: {e}", path.display()))?;
    // Check locally first: a malformed file fails here with its position.
    JobGraph::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(text)
}

fn api(
    remote: &Remote,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<serde_json::Value, String> {
    // Each coordinator in turn: one that is down, or stands by (503,
    // naming the leader), gives way to the next.
    let urls: Vec<&str> = remote
        .url
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect();
    let mut last = Err(format!("no coordinator URL in '{}'", remote.url));
    for url in urls {
        let token = match &remote.token {
            Some(t) => Some(t.clone()),
            // The token file of a coordinator this user started here.
            None => weir_flight::token_file::read(url)
                .map_err(|e| e.to_string())?
                .map(|t| t.expose().to_string()),
        };
        last = http::call(url, token.as_deref(), method, path, body);
        if last.as_ref().is_ok_and(|r| r.status != 503) {
            break;
        }
    }
    let reply = last?;
    if reply.status >= 400 {
        let message = reply.body["error"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| reply.body.to_string());
        return Err(format!("coordinator answered {}: {message}", reply.status));
    }
    Ok(reply.body)
}

fn submit(job: &PathBuf, remote: &Remote, wait: bool, restore: &Restore) -> Outcome {
    let Some(text) = read_job_or_sql(job)? else {
        eprintln!("{}: no INSERT or SELECT: nothing to submit", job.display());
        return Ok(ExitCode::SUCCESS);
    };
    let reply = api(
        remote,
        "POST",
        &format!("/v1/jobs{}", restore.query()),
        Some(&text),
    )?;
    let id = reply["job_id"].as_str().unwrap_or_default().to_string();
    println!("{id}");
    if wait {
        return wait_for(remote, &id);
    }
    Ok(ExitCode::SUCCESS)
}

fn wait_for(remote: &Remote, id: &str) -> Outcome {
    loop {
        let job = api(remote, "GET", &format!("/v1/jobs/{id}"), None)?;
        match job["status"].as_str().unwrap_or_default() {
            "FINISHED" => {
                println!("job {id} finished");
                return Ok(ExitCode::SUCCESS);
            }
            "FAILED" | "CANCELED" => {
                let job = settled(remote, id, job);
                return Err(format!(
                    "job {id} {}: {}",
                    job["status"].as_str().unwrap_or_default(),
                    job["failure"].as_str().unwrap_or("cancelled")
                ));
            }
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// A job that has ended, once each of its tasks has reported its end (or
/// after 5 s): the first report of a failure may be an echo of it (a
/// channel closed next to the failing task), which the failing task's own
/// report replaces when it arrives.
fn settled(remote: &Remote, id: &str, mut job: serde_json::Value) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    let every_task_ended = |job: &serde_json::Value| {
        job["vertices"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|v| v["subtasks"].as_array().into_iter().flatten())
            .all(|t| {
                matches!(
                    t["state"].as_str(),
                    Some("FINISHED" | "FAILED" | "CANCELED")
                )
            })
    };
    while !every_task_ended(&job) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        match api(remote, "GET", &format!("/v1/jobs/{id}"), None) {
            Ok(next) => job = next,
            Err(_) => break,
        }
    }
    job
}

/// Take a savepoint; `(stop, drain)`: end the job once it is taken,
/// firing every window first.
fn savepoint(
    job: &str,
    dir: Option<String>,
    (stop, drain): (bool, bool),
    remote: &Remote,
) -> Outcome {
    let body = serde_json::json!({ "dir": dir, "stop": stop, "drain": drain }).to_string();
    let reply = api(
        remote,
        "POST",
        &format!("/v1/jobs/{job}/savepoints"),
        Some(&body),
    )?;
    let path = reply["path"].as_str().unwrap_or_default().to_string();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let details = api(remote, "GET", &format!("/v1/jobs/{job}"), None)?;
        let taken = details["savepoints"]
            .as_array()
            .is_some_and(|s| s.iter().any(|p| p.as_str() == Some(path.as_str())));
        let status = details["status"].as_str().unwrap_or_default();
        if taken && (!stop || matches!(status, "FINISHED" | "CANCELED" | "FAILED")) {
            println!("{path}");
            return Ok(ExitCode::SUCCESS);
        }
        if !taken && matches!(status, "FAILED" | "CANCELED" | "FINISHED") {
            return Err(format!(
                "job {job} ended ({status}) before the savepoint was taken: {}",
                details["history"]
            ));
        }
        if Instant::now() > deadline {
            return Err(format!("savepoint {path} not taken within 10 minutes"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn list(remote: &Remote) -> Outcome {
    let jobs = api(remote, "GET", "/v1/jobs", None)?;
    println!("{:<10} {:<10} {:<30} FAILURE", "JOB", "STATUS", "NAME");
    for j in jobs.as_array().into_iter().flatten() {
        println!(
            "{:<10} {:<10} {:<30} {}",
            j["id"].as_str().unwrap_or_default(),
            j["status"].as_str().unwrap_or_default(),
            j["name"].as_str().unwrap_or_default(),
            j["failure"].as_str().unwrap_or("")
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn status(job: &str, remote: &Remote) -> Outcome {
    let details = api(remote, "GET", &format!("/v1/jobs/{job}"), None)?;
    println!(
        "{}",
        serde_json::to_string_pretty(&details).map_err(|e| e.to_string())?
    );
    Ok(ExitCode::SUCCESS)
}

fn cancel(job: &str, remote: &Remote) -> Outcome {
    let reply = api(remote, "POST", &format!("/v1/jobs/{job}/cancel"), None)?;
    println!("{job}: {}", reply["status"].as_str().unwrap_or_default());
    Ok(ExitCode::SUCCESS)
}

/// Worker processes that are killed when this value is dropped.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The one-job cluster `weir run` starts.
struct RunCluster {
    workers: usize,
    slots: Option<usize>,
    processes: bool,
    flight_bind: SocketAddr,
    token: Option<String>,
    /// The HA folder and lease.
    ha: Option<(String, Duration)>,
}

fn run(job: &PathBuf, cluster: RunCluster, restore: &Restore, quiet: bool) -> Outcome {
    let RunCluster {
        workers,
        slots,
        processes,
        flight_bind,
        token,
        ha,
    } = cluster;
    let Some(text) = read_job_or_sql(job)? else {
        return Ok(ExitCode::SUCCESS);
    };
    let token = token
        .map(Secret::new)
        .transpose()
        .map_err(|e| e.to_string())?;
    if !flight_bind.ip().is_loopback() && token.is_none() {
        return Err(format!(
            "a Flight endpoint on {flight_bind} (beyond loopback) needs --token"
        ));
    }
    let graph = JobGraph::from_json(&text).map_err(|e| e.to_string())?;
    let workers = workers.max(1);
    let needed = graph
        .vertices
        .iter()
        .map(|v| v.parallelism)
        .max()
        .unwrap_or(1);
    let slots = slots.unwrap_or(needed.div_ceil(workers)).max(1);
    let c = Coordinator::start(CoordinatorOptions {
        token,
        ha_dir: ha.as_ref().map(|(dir, _)| dir.clone()),
        ha_lease: ha
            .as_ref()
            .map_or(Duration::from_secs(10), |(_, lease)| *lease),
        ..CoordinatorOptions::ephemeral()
    })
    .map_err(|e| e.to_string())?;
    // With an HA folder: lead first (a run that died left its epoch, which
    // runs out a lease after its last renewal), and see which jobs the
    // store had running.
    let resumed = match &ha {
        Some((dir, lease)) => {
            let deadline = Instant::now() + *lease * 3 + Duration::from_secs(10);
            loop {
                if let Some(jobs) = weir_coordinator::jobs::lock(&c.state).recovered_jobs() {
                    break jobs;
                }
                if Instant::now() > deadline {
                    return Err(format!("did not become the leader of HA folder {dir}"));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        None => vec![],
    };
    let rpc = c.rpc_addr.to_string();
    let mut nodes = Vec::new();
    let mut children = Children(Vec::new());
    if processes {
        let exe =
            std::env::current_exe().map_err(|e| format!("cannot find the weir binary: {e}"))?;
        for _ in 0..workers {
            let mut cmd = Command::new(&exe);
            cmd.args([
                "worker",
                "--coordinator",
                &rpc,
                "--slots",
                &slots.to_string(),
            ]);
            if children.0.is_empty() {
                cmd.args(["--bind", &flight_bind.to_string()]);
            }
            if let Some(t) = &c.token {
                cmd.env("WEIR_TOKEN", t.expose());
            }
            let child = cmd
                .stdout(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start a worker process: {e}"))?;
            children.0.push(child);
        }
    } else {
        for i in 0..workers {
            let mut options = WorkerOptions::new(rpc.clone(), slots);
            options.token = c.token.clone();
            if i == 0 {
                options.bind = flight_bind;
            }
            let node =
                WorkerNode::start(options, Duration::from_secs(10)).map_err(|e| e.to_string())?;
            eprintln!("worker {} serves Flight on {}", i + 1, node.address());
            nodes.push(node);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while weir_coordinator::jobs::lock(&c.state)
        .workers()
        .iter()
        .filter(|w| !w.lost)
        .count()
        < workers
    {
        if Instant::now() > deadline {
            return Err("the workers did not register within 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let remote = Remote {
        url: format!("http://{}", c.rest_addr),
        token: c.token.as_ref().map(|t| t.expose().to_string()),
    };
    let started = Instant::now();
    // The job a run before this one left running resumes (from its latest
    // checkpoint) rather than starting again.
    let id = match resumed.iter().find(|(_, name)| *name == graph.job_name) {
        Some((id, _)) => {
            eprintln!("resuming job {id} from the HA folder");
            // It is deployed once the workers offer its slots.
            let deadline = Instant::now() + Duration::from_secs(30);
            while api(&remote, "GET", &format!("/v1/jobs/{id}"), None).is_err() {
                if Instant::now() > deadline {
                    return Err(format!("job {id} of the HA folder was not resumed"));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            id.clone()
        }
        None => {
            let reply = api(
                &remote,
                "POST",
                &format!("/v1/jobs{}", restore.query()),
                Some(&text),
            )?;
            reply["job_id"].as_str().unwrap_or_default().to_string()
        }
    };
    eprintln!(
        "job {id} '{}' running on {workers} worker{} ({})",
        graph.job_name,
        if workers == 1 { "" } else { "s" },
        if processes {
            "processes"
        } else {
            "in this process"
        }
    );
    let progress = progress::Progress::follow(&remote, &id, quiet);
    // The coordinator is in this process: watch its state closely (a
    // REST poll every 100 ms would add up to 100 ms to a short job), then
    // report the end as `weir wait` does. After the first second, a
    // longer pause: a long job's end need not be seen within 2 ms, and the
    // coordinator's lock is taken less often.
    let watching = std::time::Instant::now();
    while weir_coordinator::jobs::lock(&c.state)
        .job_status(&id)
        .is_some_and(|s| !s.is_terminal())
    {
        let pause = if watching.elapsed() < Duration::from_secs(1) {
            2
        } else {
            20
        };
        std::thread::sleep(Duration::from_millis(pause));
    }
    let code = wait_for(&remote, &id);
    drop(progress);
    let code = code?;
    eprintln!("ran in {:.2} s", started.elapsed().as_secs_f64());
    drop(nodes);
    drop(children);
    Ok(code)
}
