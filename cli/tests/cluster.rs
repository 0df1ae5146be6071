//! End-to-end: a real coordinator and two real worker processes on
//! loopback, driven through the `weir` binary and the REST API.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use datafusion_expr::{col, lit};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use weir_core::spec::{AggregateSpec, SourceSpec};
use weir_core::time::{TumblingEventTimeWindows, WatermarkStrategy};
use weir_operators::connectors::{ColumnGen, GeneratorSpec};
use weir_tests::sorted_rows;

mod common;
use common::{Cluster, Processes, WEIR, rest_call};

/// generator (4 subtasks) -> key_by(key) -> 1 s tumbling count + sum ->
/// Parquet (4 subtasks), as a job graph JSON file.
fn window_job(dir: &Path, events: Option<u64>, rate: Option<u64>) -> weir_core::graph::JobGraph {
    window_job_with(dir, events, rate, 4, |_| {})
}

/// [`window_job`] at `parallelism`, configured by `configure`.
fn window_job_with(
    dir: &Path,
    events: Option<u64>,
    rate: Option<u64>,
    parallelism: usize,
    configure: impl FnOnce(&mut weir_core::WeirConfig),
) -> weir_core::graph::JobGraph {
    window_job_with_sinks(dir, None, events, rate, parallelism, configure)
}

/// [`window_job_with`], the windows going to Flight sink `flight` as well.
fn window_job_with_sinks(
    dir: &Path,
    flight: Option<&str>,
    events: Option<u64>,
    rate: Option<u64>,
    parallelism: usize,
    configure: impl FnOnce(&mut weir_core::WeirConfig),
) -> weir_core::graph::JobGraph {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(parallelism);
    env.configure(|c| {
        c.batch_size = 2048;
        configure(c);
    });
    let mut generator = GeneratorSpec::new(events)
        .column("key", ColumnGen::Key { cardinality: 300 })
        .column("amount", ColumnGen::UniformInt { min: 1, max: 1000 })
        .column(
            "ts",
            ColumnGen::EventTime {
                start_ms: 1_700_000_000_000,
                events_per_second: 20_000,
                max_out_of_orderness_ms: 300,
            },
        )
        .seed(7);
    if let Some(r) = rate {
        generator = generator.rate(r);
    }
    let windows = env
        .from_source(
            SourceSpec::from(generator),
            WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_millis(300)),
            "events",
        )
        .unwrap()
        .filter(col("amount").gt(lit(100i64)))
        .unwrap()
        .key_by(&["key"])
        .unwrap()
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
        .aggregate(vec![
            AggregateSpec::count_star(),
            AggregateSpec::sum("amount"),
        ])
        .unwrap();
    windows
        .sink_to(weir_operators::connectors::parquet_sink(dir), "out")
        .unwrap();
    if let Some(name) = flight {
        windows
            .sink_to(weir_flight::flight_sink(name), "flight")
            .unwrap();
    }
    env.job_graph("windows across workers").unwrap()
}

fn read_dir(dir: &Path) -> Vec<RecordBatch> {
    let mut batches = vec![];
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "parquet") {
            let reader =
                ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap())
                    .unwrap()
                    .build()
                    .unwrap();
            batches.extend(reader.map(Result::unwrap));
        }
    }
    batches
}

#[test]
fn keyed_windows_across_two_worker_processes_equal_the_in_process_run() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(2, 2, None);

    let remote_out = tmp.path().join("remote");
    let job = window_job(&remote_out, Some(300_000), None);
    let job_file = tmp.path().join("job.json");
    std::fs::write(&job_file, job.to_json().unwrap()).unwrap();
    let out = cluster.cli(&["submit", job_file.to_str().unwrap(), "--wait"]);
    assert!(
        out.status.success(),
        "submit failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job_id = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap()
        .to_string();

    // The subtasks of each vertex sit on both workers: the hash exchange
    // crossed processes.
    let (_, details) = cluster.rest("GET", &format!("/v1/jobs/{job_id}"), "");
    assert_eq!(details["status"], "FINISHED", "{details:#}");
    for v in details["vertices"].as_array().unwrap() {
        let mut workers: Vec<_> = v["subtasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["worker"].as_str().unwrap().to_string())
            .collect();
        workers.sort();
        workers.dedup();
        assert_eq!(workers.len(), 2, "vertex {} on {workers:?}", v["name"]);
        for t in v["subtasks"].as_array().unwrap() {
            assert_eq!(t["state"], "FINISHED");
        }
    }

    let local_out = tmp.path().join("local");
    let env_job = window_job(&local_out, Some(300_000), None);
    weir_worker::executor::run_job(env_job).unwrap();

    let remote = sorted_rows(&read_dir(&remote_out));
    let local = sorted_rows(&read_dir(&local_out));
    assert!(local.len() > 1000, "the job produced {} rows", local.len());
    assert_eq!(remote, local);

    let list = cluster.cli(&["list"]);
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(
        listed.contains(&job_id) && listed.contains("FINISHED"),
        "{listed}"
    );
}

/// The hash exchange between the two workers compressed with LZ4 and with
/// Zstandard (the job's `exchange_compression`) gives the uncompressed
/// in-process run's rows.
#[test]
fn a_compressed_exchange_gives_the_same_rows() {
    use weir_core::config::ExchangeCompression;
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(2, 2, None);
    let local_out = tmp.path().join("local");
    weir_worker::executor::run_job(window_job(&local_out, Some(300_000), None)).unwrap();
    let local = sorted_rows(&read_dir(&local_out));
    assert!(local.len() > 1000, "the job produced {} rows", local.len());
    for codec in [ExchangeCompression::Lz4, ExchangeCompression::Zstd] {
        let out = tmp.path().join(format!("{codec:?}"));
        let mut job = window_job(&out, Some(300_000), None);
        job.config.exchange_compression = codec;
        let job_file = tmp.path().join(format!("{codec:?}.json"));
        std::fs::write(&job_file, job.to_json().unwrap()).unwrap();
        let run = cluster.cli(&["submit", job_file.to_str().unwrap(), "--wait"]);
        assert!(
            run.status.success(),
            "{codec:?}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        assert_eq!(sorted_rows(&read_dir(&out)), local, "{codec:?}");
    }
}

#[test]
fn killing_a_worker_fails_the_job_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(2, 2, None);
    // Unbounded and rate-limited: runs until something stops it.
    let job = window_job(&tmp.path().join("out"), None, Some(20_000));
    let (status, reply) = cluster.rest("POST", "/v1/jobs", &job.to_json().unwrap());
    assert_eq!(status, 201, "{reply}");
    let id = reply["job_id"].as_str().unwrap().to_string();
    cluster.wait_for_status(&id, &["RUNNING"], Duration::from_secs(20));

    // Kill the second worker process (index 0 is the coordinator).
    let worker = &mut cluster.procs.0[2];
    worker.kill().unwrap();
    worker.wait().unwrap();

    cluster.wait_for_status(&id, &["FAILED"], Duration::from_secs(20));
    // Tasks next to the dead worker may report broken channels first; the
    // coordinator then probes the job's workers (or misses heartbeats) and
    // names the lost worker as the cause.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, details) = cluster.rest("GET", &format!("/v1/jobs/{id}"), "");
        let failure = details["failure"].as_str().unwrap().to_string();
        if failure.contains("was lost: ") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "failure names the lost worker: {failure}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let list = cluster.cli(&["list"]);
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(
        listed.contains("FAILED") && listed.contains("was lost"),
        "{listed}"
    );

    // The coordinator keeps serving; the surviving worker's slots are free
    // again.
    let (status, overview) = cluster.rest("GET", "/v1/overview", "");
    assert_eq!(status, 200);
    assert_eq!(overview["workers"], 1, "{overview}");
    assert_eq!(overview["slots_free"], 2, "{overview}");
}

/// Workers that are not lost, with their ids.
fn live_workers(cluster: &Cluster) -> Vec<String> {
    let (_, workers) = cluster.rest("GET", "/v1/workers", "");
    workers
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["lost"] == false)
        .map(|w| w["id"].as_str().unwrap().to_string())
        .collect()
}

/// A coordinator restarted on the same addresses hands out worker ids from
/// the start again: every worker must register once more under its own
/// process id (not heartbeat under an id now given to another), and a
/// worker killed afterwards is declared lost.
#[test]
fn a_restarted_coordinator_registers_every_worker_once_and_detects_a_killed_one() {
    let mut cluster = Cluster::start(3, 1, Some("restart-token"));
    // The first worker (worker-1) sleeps through the restart, so the new
    // coordinator gives its id to another worker before it heartbeats.
    let sleeper = cluster.procs.0[cluster.workers[0].0].id().to_string();
    let signal = |sig: &str| {
        let status = Command::new("kill").args([sig, &sleeper]).status().unwrap();
        assert!(status.success());
    };
    signal("-STOP");
    restart_coordinator(&mut cluster, &["--token", "restart-token"]);
    cluster.wait_for_workers(2);
    signal("-CONT");
    cluster.wait_for_workers(3);
    // Every worker is registered once, under ids that stay theirs through
    // many heartbeats.
    for _ in 0..10 {
        let mut live = live_workers(&cluster);
        live.sort();
        live.dedup();
        assert_eq!(live.len(), 3, "{live:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_, workers) = cluster.rest("GET", "/v1/workers", "");
    let mut addresses: Vec<&str> = workers
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["address"].as_str().unwrap())
        .collect();
    addresses.sort();
    addresses.dedup();
    assert_eq!(addresses.len(), 3, "{workers}");
    // A worker killed now is found lost, the others are not.
    let victim = cluster.workers[1].1.clone();
    cluster.kill_worker_at(&victim);
    let deadline = Instant::now() + Duration::from_secs(15);
    while live_workers(&cluster).len() != 2 {
        assert!(
            Instant::now() < deadline,
            "the killed worker is declared lost"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (_, workers) = cluster.rest("GET", "/v1/workers", "");
    let lost: Vec<&str> = workers
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["lost"] == true)
        .map(|w| w["address"].as_str().unwrap())
        .collect();
    assert_eq!(lost, vec![victim.as_str()], "{workers}");
}

/// The committed output in `out` equals a failure-free run of the window
/// job over `events` events (made under `tmp`); its sorted rows.
fn equals_failure_free_run(tmp: &Path, out: &Path, events: u64) -> Vec<String> {
    let local_out = tmp.join("local");
    let local = window_job_with(&local_out, Some(events), Some(600_000), 2, |_| {});
    weir_worker::executor::run_job(local).unwrap();
    let want = sorted_rows(&read_dir(&local_out));
    let got = sorted_rows(&read_dir(out));
    assert!(want.len() > 1000);
    assert_eq!(got.len(), want.len(), "row count");
    assert!(got == want, "the output differs from the failure-free run");
    want
}

/// Kill -9 the coordinator at `cluster.procs.0[0]` and start another on
/// the same addresses with `args`.
fn restart_coordinator(cluster: &mut Cluster, args: &[&str]) {
    let coordinator = &mut cluster.procs.0[0];
    coordinator.kill().unwrap();
    coordinator.wait().unwrap();
    let rest = cluster.url.trim_start_matches("http://").to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    cluster.procs.0[0] = loop {
        let mut child = Command::new(WEIR)
            .args(["coordinator", "--rest", &rest, "--rpc", &cluster.rpc])
            .args([
                "--heartbeat-interval-ms",
                "200",
                "--heartbeat-timeout-ms",
                "2000",
            ])
            .args(args)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        if child.try_wait().unwrap().is_none() {
            break child;
        }
        // The old sockets may take a moment to be free.
        assert!(Instant::now() < deadline, "the coordinator restarts");
    };
}

/// A coordinator with an HA folder is killed while a checkpointing job
/// (generator -> window -> exactly-once file sink) runs, and started again
/// on the same folder: the workers register again, the job runs again
/// under its id from its latest checkpoint, and the committed output
/// equals a failure-free run.
#[test]
fn a_coordinator_killed_mid_job_resumes_it_from_its_ha_dir_exactly_once() {
    const EVENTS: u64 = 360_000;
    let tmp = tempfile::tempdir().unwrap();
    let ha = tmp.path().join("ha").display().to_string();
    let ha_args = [
        "--ha-dir",
        ha.as_str(),
        "--ha-lease-ms",
        "1000",
        "--token",
        "ha-token",
    ];
    let mut cluster = Cluster::start_full(2, 2, Some("ha-token"), &[], &ha_args[..4]);
    let out = tmp.path().join("out");
    let checkpoints = tmp.path().join("checkpoints").display().to_string();
    let job = window_job_with_sinks(&out, None, Some(EVENTS), Some(60_000), 2, |c| {
        c.checkpoint_interval = Some(Duration::from_millis(300));
        c.checkpoint_dir = Some(checkpoints.clone());
        c.restart_delay = Duration::from_millis(200);
        c.watermark_interval = Duration::from_millis(50);
    });
    let (status, reply) = cluster.rest("POST", "/v1/jobs", &job.to_json().unwrap());
    assert_eq!(status, 201, "{reply}");
    let id = reply["job_id"].as_str().unwrap().to_string();
    cluster.wait_for_status(&id, &["RUNNING"], Duration::from_secs(20));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, details) = cluster.rest("GET", &format!("/v1/jobs/{id}"), "");
        if details["checkpoints"].as_array().map_or(0, Vec::len) >= 2 {
            break;
        }
        assert_eq!(details["status"], "RUNNING", "{details:#}");
        assert!(Instant::now() < deadline, "no checkpoints: {details:#}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let killed = Instant::now();
    restart_coordinator(&mut cluster, &ha_args);
    cluster.wait_for_status(&id, &["RUNNING"], Duration::from_secs(30));
    eprintln!("kill -> job running again: {:?}", killed.elapsed());
    let details = cluster.wait_for_status(&id, &["FINISHED", "FAILED"], Duration::from_secs(60));
    assert_eq!(details["status"], "FINISHED", "{details:#}");
    let history = details["history"].to_string();
    assert!(
        history.contains("from checkpoint") || history.contains("(checkpoint"),
        "{history}"
    );
    let (_, workers) = cluster.rest("GET", "/v1/workers", "");
    assert_eq!(workers.as_array().unwrap().len(), 2, "{workers}");

    equals_failure_free_run(tmp.path(), &out, EVENTS);
    let leftovers: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".inprogress"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // Once the store has it (it follows every 200 ms), a coordinator
    // started again lists the finished job, and new ids go on after it.
    std::thread::sleep(Duration::from_millis(600));
    restart_coordinator(&mut cluster, &ha_args);
    let details = cluster.wait_for_status(&id, &["FINISHED"], Duration::from_secs(30));
    assert!(
        details["history"].to_string().contains("job store"),
        "{details:#}"
    );
    cluster.wait_for_workers(2);
    let next = window_job(&tmp.path().join("out2"), Some(1000), None);
    let (status, reply) = cluster.rest("POST", "/v1/jobs", &next.to_json().unwrap());
    assert_eq!(status, 201, "{reply}");
    assert_ne!(reply["job_id"], id.as_str(), "{reply}");
}

/// Start a coordinator on HA folder `ha` (lease 1 s) with free ports;
/// returns it and its REST URL and control address.
fn ha_coordinator(ha: &str, token: &str) -> (Child, String, String) {
    ha_coordinator_at(ha, token, "127.0.0.1:0", "127.0.0.1:0")
}

/// [`ha_coordinator`] on addresses `rest` and `rpc` (again, after a kill:
/// retried while the old sockets are not free yet).
fn ha_coordinator_at(ha: &str, token: &str, rest: &str, rpc: &str) -> (Child, String, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut child = Command::new(WEIR)
            .args(["coordinator", "--rest", rest, "--rpc", rpc])
            .args([
                "--heartbeat-interval-ms",
                "200",
                "--heartbeat-timeout-ms",
                "2000",
            ])
            .args(["--ha-dir", ha, "--ha-lease-ms", "1000", "--token", token])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
        let (mut url, mut control) = (None, None);
        while url.is_none() || control.is_none() {
            let Some(Ok(line)) = lines.next() else {
                break;
            };
            if let Some(u) = line.strip_prefix("coordinator REST API on ") {
                url = Some(u.to_string());
            }
            if let Some(r) = line.strip_prefix("coordinator control endpoint on ") {
                control = Some(r.to_string());
            }
        }
        if let (Some(url), Some(control)) = (url, control) {
            std::thread::spawn(move || lines.for_each(drop));
            return (child, url, control);
        }
        let _ = child.wait();
        assert!(
            Instant::now() < deadline,
            "the coordinator starts on {rest} / {rpc}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Two coordinators share an HA folder: one leads, the other answers with
/// the leader's address. Workers given both register with the leader.
/// Kill -9 the leader during a checkpointing job (generator -> window ->
/// exactly-once file sink): the standby takes over after the lease, runs
/// the job again from its latest checkpoint, and the committed output
/// equals the failure-free run.
#[test]
fn a_standby_coordinator_takes_over_a_killed_leaders_job_exactly_once() {
    let tmp = tempfile::tempdir().unwrap();
    let ha = tmp.path().join("ha").display().to_string();
    fail_over(tmp.path(), &ha, false);
}

/// The same with the HA folder in an S3-compatible server on loopback:
/// epochs are claimed with S3's conditional create.
#[test]
fn a_standby_takes_over_with_the_ha_folder_in_s3() {
    let _s3 = weir_tests::S3Server::start("weir-ha");
    let tmp = tempfile::tempdir().unwrap();
    fail_over(tmp.path(), "s3://weir-ha/ha", false);
}

/// Split brain: the leader is paused (SIGSTOP) past its lease, the standby
/// takes over and runs the job; the old leader continued (SIGCONT) finds
/// the newer epoch and exits, and commits no checkpoint after the standby
/// took over — every checkpoint of the resumed job carries the new epoch.
#[test]
fn a_paused_leader_woken_after_a_takeover_commits_nothing_and_steps_down() {
    let tmp = tempfile::tempdir().unwrap();
    let ha = tmp.path().join("ha").display().to_string();
    fail_over(tmp.path(), &ha, true);
}

/// Checkpoint folders (`job-…`) under `dir`, each with its `chk-N` ids.
fn checkpoint_folders(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u64>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut folders: Vec<_> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| {
            let mut ids: Vec<u64> = std::fs::read_dir(&p)
                .unwrap()
                .filter_map(|e| {
                    let e = e.unwrap();
                    let name = e.file_name().to_string_lossy().to_string();
                    let id = name.strip_prefix("chk-")?.parse().ok()?;
                    e.path().join("_metadata").exists().then_some(id)
                })
                .collect();
            ids.sort();
            (p, ids)
        })
        .collect();
    folders.sort();
    folders
}

/// Two coordinators on HA folder `ha` and two workers given both: the
/// cluster (its URL the leader's), each coordinator's REST URL and control
/// address, and which one leads.
fn ha_pair(ha: &str, token: &str) -> (Cluster, [(String, String); 2], usize) {
    let (first, url1, rpc1) = ha_coordinator(ha, token);
    let (second, url2, rpc2) = ha_coordinator(ha, token);
    let leader = wait_for_leader(&[url1.clone(), url2.clone()], token);
    let mut cluster = Cluster {
        url: [&url1, &url2][leader].clone(),
        rpc: format!("{rpc1},{rpc2}"),
        token: Some(token.to_string()),
        given_token: true,
        extra: vec![],
        procs: Processes(vec![first, second]),
        workers: vec![],
    };
    cluster.add_worker(2);
    cluster.add_worker(2);
    cluster.wait_for_workers(2);
    (cluster, [(url1, rpc1), (url2, rpc2)], leader)
}

/// Which of the coordinators at `urls` leads: it answers, the others
/// refuse with 503 naming it.
fn wait_for_leader(urls: &[String], token: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let answers: Vec<(u16, String)> = urls
            .iter()
            .map(|u| {
                let (status, body) = rest_call(u, Some(token), "GET", "/v1/overview", "");
                (status, body.to_string())
            })
            .collect();
        let leading: Vec<usize> = (0..urls.len()).filter(|&i| answers[i].0 == 200).collect();
        if let [leader] = leading[..]
            && answers.iter().enumerate().all(|(i, (status, body))| {
                i == leader || (*status == 503 && body.contains(&urls[leader]))
            })
        {
            return leader;
        }
        assert!(Instant::now() < deadline, "no single leader: {answers:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Submit the window job with checkpoints every 300 ms under `tmp`; its id
/// once it has completed `checkpoints` checkpoints.
fn submit_checkpointing_job(cluster: &Cluster, tmp: &Path, events: u64) -> String {
    let out = tmp.join("out");
    let checkpoints = tmp.join("checkpoints");
    let job = window_job_with_sinks(&out, None, Some(events), Some(60_000), 2, |c| {
        c.checkpoint_interval = Some(Duration::from_millis(300));
        c.checkpoint_dir = Some(checkpoints.display().to_string());
        c.restart_delay = Duration::from_millis(200);
        c.watermark_interval = Duration::from_millis(50);
    });
    let (status, reply) = cluster.rest("POST", "/v1/jobs", &job.to_json().unwrap());
    assert_eq!(status, 201, "{reply}");
    let id = reply["job_id"].as_str().unwrap().to_string();
    wait_for_checkpoints(cluster, &id, 2, |_| true);
    id
}

/// Wait until job `id` has completed `n` checkpoints (as the coordinator
/// answering at `cluster.url` knows it) and `also(details)` holds.
fn wait_for_checkpoints(
    cluster: &Cluster,
    id: &str,
    n: usize,
    also: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    cluster.wait_for_status(id, &["RUNNING"], Duration::from_secs(60));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, details) = cluster.rest("GET", &format!("/v1/jobs/{id}"), "");
        if details["checkpoints"].as_array().map_or(0, Vec::len) >= n && also(&details) {
            return details;
        }
        assert!(Instant::now() < deadline, "no checkpoints: {details:#}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The job `id` finishes, restored from a checkpoint, and its committed
/// output under `tmp` equals a failure-free run of `events` events.
fn finishes_exactly_once(cluster: &Cluster, id: &str, tmp: &Path, events: u64) {
    let details = cluster.wait_for_status(id, &["FINISHED", "FAILED"], Duration::from_secs(90));
    assert_eq!(details["status"], "FINISHED", "{details:#}");
    assert!(
        details["history"].to_string().contains("(checkpoint"),
        "{details:#}"
    );
    let (_, workers) = cluster.rest("GET", "/v1/workers", "");
    assert_eq!(workers.as_array().unwrap().len(), 2, "{workers}");
    equals_failure_free_run(tmp, &tmp.join("out"), events);
}

/// `weir list` given every coordinator's URL, in this order, lists `id`.
fn cli_lists(addresses: &[(String, String)], token: &str, id: &str) {
    let urls: Vec<&str> = addresses.iter().map(|(url, _)| url.as_str()).collect();
    let listed = Command::new(WEIR)
        .arg("list")
        .env("WEIR_COORDINATOR_URL", urls.join(","))
        .env("WEIR_TOKEN", token)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&listed.stdout);
    let err = String::from_utf8_lossy(&listed.stderr);
    assert!(listed.status.success(), "{err}");
    assert!(text.contains(id), "{text}");
}

fn fail_over(tmp: &Path, ha: &str, pause: bool) {
    const EVENTS: u64 = 360_000;
    const TOKEN: &str = "ha-pair-token";
    let (mut cluster, addresses, leader) = ha_pair(ha, TOKEN);
    let standby = 1 - leader;
    let id = submit_checkpointing_job(&cluster, tmp, EVENTS);
    let checkpoints = tmp.join("checkpoints");
    // The CLI given both coordinators, the standby first, finds the leader.
    let standby_first = [addresses[standby].clone(), addresses[leader].clone()];
    cli_lists(&standby_first, TOKEN, &id);
    let old_pid = cluster.procs.0[leader].id().to_string();
    let signal = |sig: &str| {
        let status = Command::new("kill").args([sig, &old_pid]).status().unwrap();
        assert!(status.success());
    };
    let faulted = Instant::now();
    if pause {
        signal("-STOP");
    } else {
        let old = &mut cluster.procs.0[leader];
        old.kill().unwrap();
        old.wait().unwrap();
    }
    cluster.url = addresses[standby].0.clone();
    cluster.wait_for_status(&id, &["RUNNING"], Duration::from_secs(60));
    let how = if pause { "paused" } else { "killed" };
    eprintln!(
        "leader {how} -> job running on the standby: {:?}",
        faulted.elapsed()
    );
    if !pause {
        // The CLI given both coordinators finds the one that leads now
        // (the other is down).
        cli_lists(&addresses, TOKEN, &id);
    }
    if pause {
        // The standby leads now; the old leader wakes up.
        let before = checkpoint_folders(&checkpoints);
        signal("-CONT");
        let deadline = Instant::now() + Duration::from_secs(20);
        let code = loop {
            if let Some(status) = cluster.procs.0[leader].try_wait().unwrap() {
                break status.code();
            }
            assert!(Instant::now() < deadline, "the old leader steps down");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(code, Some(3), "the old leader exits as it steps down");
        let after = checkpoint_folders(&checkpoints);
        assert_eq!(
            before[0], after[0],
            "a checkpoint committed by the old leader"
        );
    }
    finishes_exactly_once(&cluster, &id, tmp, EVENTS);
    // Each job folder's checkpoints were committed in one epoch.
    if !ha.starts_with("s3://") {
        for (folder, ids) in checkpoint_folders(&checkpoints) {
            let epochs: Vec<u64> = ids
                .iter()
                .map(|n| {
                    let path = folder.join(format!("chk-{n}/_metadata"));
                    let m: serde_json::Value =
                        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
                    m["leader_epoch"].as_u64().unwrap()
                })
                .collect();
            assert!(!epochs.is_empty());
            assert!(epochs.windows(2).all(|w| w[0] == w[1]), "{epochs:?}");
        }
    }
}

/// Three leader kills in a row, each killed coordinator started again on
/// its addresses as a standby; the last kill lands while a checkpoint is
/// under way (some tasks acknowledged it). The committed output equals the
/// failure-free run.
#[test]
fn three_leader_kills_in_a_row_the_last_during_a_checkpoint_give_exactly_once_output() {
    const EVENTS: u64 = 600_000;
    const TOKEN: &str = "ha-kills-token";
    let tmp = tempfile::tempdir().unwrap();
    let ha = tmp.path().join("ha").display().to_string();
    let (mut cluster, addresses, mut leader) = ha_pair(&ha, TOKEN);
    let id = submit_checkpointing_job(&cluster, tmp.path(), EVENTS);
    for kill in 0..3 {
        if kill > 0 {
            // Progress under this leader first: a checkpoint of its own.
            let during = kill == 2;
            wait_for_checkpoints(&cluster, &id, 1, |d| {
                !during
                    || d["checkpoint_in_progress"]["acknowledged"]
                        .as_u64()
                        .is_some_and(|a| a >= 1)
            });
        }
        let old = &mut cluster.procs.0[leader];
        old.kill().unwrap();
        old.wait().unwrap();
        let (url, rpc) = &addresses[leader];
        let rest = url.trim_start_matches("http://");
        cluster.procs.0[leader] = ha_coordinator_at(&ha, TOKEN, rest, rpc).0;
        // Either may win the next epoch: the standby that watched the
        // leader, or the one just started (both wait a lease).
        leader = wait_for_leader(&[addresses[0].0.clone(), addresses[1].0.clone()], TOKEN);
        cluster.url = addresses[leader].0.clone();
        cluster.wait_for_status(&id, &["RUNNING"], Duration::from_secs(60));
    }
    finishes_exactly_once(&cluster, &id, tmp.path(), EVENTS);
}

#[test]
fn a_deployment_to_a_dead_worker_is_retried_by_the_restart_strategy() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(2, 2, None);
    let dead = cluster.workers[1].1.clone();
    cluster.kill_worker_at(&dead);
    let out = tmp.path().join("out");
    let checkpoints = tmp.path().join("checkpoints").display().to_string();
    // Checkpointing on: the restart strategy is fixed-delay, as in Flink.
    let job = window_job_with_sinks(&out, None, Some(20_000), None, 2, |c| {
        c.checkpoint_interval = Some(Duration::from_millis(300));
        c.checkpoint_dir = Some(checkpoints);
        c.restart_delay = Duration::from_millis(200);
        c.restart_attempts = 20;
    });
    let (status, reply) = cluster.rest("POST", "/v1/jobs", &job.to_json().unwrap());
    assert_eq!(status, 201, "{reply}");
    let id = reply["job_id"].as_str().unwrap().to_string();
    let details = cluster.wait_for_status(&id, &["FINISHED", "FAILED"], Duration::from_secs(60));
    assert_eq!(details["status"], "FINISHED", "{details:#}");
    // The failed deployment, or a task of the live worker failing on the
    // dead one's channel first: either way a restart, the dead worker the
    // cause.
    let history = details["history"].to_string();
    assert!(history.contains("was lost"), "{history}");
    assert!(details["restarts"].as_u64().unwrap() >= 1, "{details:#}");
}

/// Application mode with an HA folder: `weir run` killed with SIGKILL
/// after a few checkpoints and started again with the same command resumes
/// its job from the latest checkpoint; the committed output equals a
/// failure-free run.
#[test]
fn weir_run_killed_and_started_again_on_its_ha_dir_resumes_its_job_exactly_once() {
    const EVENTS: u64 = 360_000;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let checkpoints = tmp.path().join("checkpoints");
    let job = window_job_with_sinks(&out, None, Some(EVENTS), Some(60_000), 2, |c| {
        c.checkpoint_interval = Some(Duration::from_millis(300));
        c.checkpoint_dir = Some(checkpoints.display().to_string());
        c.watermark_interval = Duration::from_millis(50);
    });
    let job_file = tmp.path().join("job.json");
    std::fs::write(&job_file, job.to_json().unwrap()).unwrap();
    let ha = tmp.path().join("ha").display().to_string();
    let run = || {
        Command::new(WEIR)
            .args(["run", "--quiet", "--workers", "2", "--ha-dir", &ha])
            .args(["--ha-lease-ms", "1000"])
            .arg(&job_file)
            .env("WEIR_TOKEN", "app-ha-token")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut first = run();
    let deadline = Instant::now() + Duration::from_secs(30);
    while checkpoint_folders(&checkpoints)
        .first()
        .is_none_or(|(_, ids)| ids.len() < 2)
    {
        assert!(
            first.try_wait().unwrap().is_none(),
            "the run ended before the kill"
        );
        assert!(Instant::now() < deadline, "no checkpoints");
        std::thread::sleep(Duration::from_millis(20));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let mut second = run();
    let status = second.wait().unwrap();
    assert!(status.success(), "{status}");
    // The second run resumed the job (one job id, a second checkpoint
    // folder) rather than submitting it again.
    let folders = checkpoint_folders(&checkpoints);
    assert_eq!(folders.len(), 2, "{folders:?}");
    assert!(
        folders
            .iter()
            .all(|(f, _)| f.to_string_lossy().contains("job-0001-"))
    );
    equals_failure_free_run(tmp.path(), &out, EVENTS);
}

/// Flink's option names: `--high-availability.storageDir` is the HA folder
/// (the coordinator claims its first epoch there); a
/// `--high-availability.type` Weir does not need is refused by name.
#[test]
fn flinks_high_availability_options_are_understood() {
    let refused = Command::new(WEIR)
        .args(["coordinator", "--high-availability.type", "zookeeper"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("needs no ZooKeeper"), "{err}");

    let tmp = tempfile::tempdir().unwrap();
    let ha = tmp.path().join("ha");
    let child = Command::new(WEIR)
        .args([
            "coordinator",
            "--rest",
            "127.0.0.1:0",
            "--rpc",
            "127.0.0.1:0",
        ])
        .args(["--token", "flink-names", "--high-availability.storageDir"])
        .arg(&ha)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let _procs = Processes(vec![child]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ha.join("leader").join(format!("epoch-{:020}", 1)).exists() {
        assert!(
            Instant::now() < deadline,
            "no epoch claimed in {}",
            ha.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn bad_requests_get_clear_errors_and_the_coordinator_keeps_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(1, 2, Some("s3cret-token"));

    // No token, wrong token.
    let (status, body) = rest_call(&cluster.url, None, "GET", "/v1/jobs", "");
    assert_eq!(status, 401, "{body}");
    assert!(body["error"].as_str().unwrap().contains("bearer token"));
    let (status, _) = rest_call(&cluster.url, Some("wrong"), "GET", "/v1/jobs", "");
    assert_eq!(status, 401);

    // A malformed job graph names the position.
    let (status, body) = cluster.rest("POST", "/v1/jobs", "{\"job_name\": 42}");
    assert_eq!(status, 400, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("malformed job graph") && error.contains("line 1"),
        "{error}"
    );

    // A malformed query string: the same JSON error body.
    let (status, body) = cluster.rest("POST", "/v1/jobs?allow_non_restored_state=maybe", "{}");
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("query string"),
        "{body}"
    );
    // Drain without stop is refused.
    let (status, body) = cluster.rest("POST", "/v1/jobs/job-0001/savepoints", "{\"drain\": true}");
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("drain"), "{body}");

    // Structurally wrong: an edge to a missing vertex.
    let job = window_job(&tmp.path().join("out"), Some(1000), None);
    let mut value: serde_json::Value = serde_json::from_str(&job.to_json().unwrap()).unwrap();
    value["edges"][0]["target"] = serde_json::json!(9);
    let (status, body) = cluster.rest("POST", "/v1/jobs", &value.to_string());
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("vertex 9"),
        "{body}"
    );

    // More slots than the cluster has: 4 needed, 2 offered.
    let (status, body) = cluster.rest("POST", "/v1/jobs", &job.to_json().unwrap());
    assert_eq!(status, 409, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("needs 4 slots") && error.contains("2 free"),
        "{error}"
    );
    let failed = body["job_id"].as_str().unwrap();
    let (_, details) = cluster.rest("GET", &format!("/v1/jobs/{failed}"), "");
    assert_eq!(details["status"], "FAILED");

    // Unknown job and endpoint.
    let (status, _) = cluster.rest("GET", "/v1/jobs/job-9999", "");
    assert_eq!(status, 404);
    let (status, _) = cluster.rest("POST", "/v1/jobs/job-9999/cancel", "");
    assert_eq!(status, 404);

    // The CLI says the same and exits non-zero.
    let out = cluster.cli(&["cancel", "job-9999"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no job 'job-9999'"));

    // Still serving.
    let (status, overview) = cluster.rest("GET", "/v1/overview", "");
    assert_eq!(status, 200);
    assert_eq!(overview["workers"], 1);
}

#[test]
fn an_unreachable_coordinator_is_a_clear_error() {
    let out = Command::new(WEIR)
        .args(["list", "--url", "http://127.0.0.1:9"])
        .env_remove("WEIR_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot reach the coordinator at http://127.0.0.1:9"),
        "{err}"
    );
}

#[test]
fn closures_are_refused_on_submit() {
    let env = weir_worker::local_environment().unwrap();
    let stream = env
        .from_source(
            SourceSpec::from(GeneratorSpec::new(Some(10)).column("n", ColumnGen::Sequence)),
            WatermarkStrategy::no_watermarks(),
            "gen",
        )
        .unwrap();
    let schema = std::sync::Arc::clone(stream.schema());
    stream
        .map_batches("MyClosure", schema, Ok)
        .unwrap()
        .sink_to(weir_operators::connectors::blackhole(), "out")
        .unwrap();
    let err = env
        .job_graph("j")
        .unwrap()
        .to_json()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("'MyClosure' cannot be submitted") && err.contains("application mode"),
        "{err}"
    );
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[test]
fn a_slow_sink_on_one_worker_slows_the_source_on_the_other() {
    const SINK_RATE: u64 = 20_000;
    // One slot each: source 0 and sink 0 on one worker, source 1 and sink 1
    // on the other; the hash exchange crosses in both directions.
    let cluster = Cluster::start(2, 1, None);
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    env.configure(|c| c.batch_size = 1024);
    env.from_source(
        SourceSpec::from(
            GeneratorSpec::new(None)
                .column("key", ColumnGen::Key { cardinality: 1000 })
                .column("v", ColumnGen::Sequence),
        ),
        WatermarkStrategy::no_watermarks(),
        "unthrottled",
    )
    .unwrap()
    .key_by(&["key"])
    .unwrap()
    .as_stream()
    .sink_to(
        weir_operators::connectors::throttled(SINK_RATE),
        "slow sink",
    )
    .unwrap();
    let job = env.job_graph("back-pressure").unwrap();
    let (status, reply) = cluster.rest("POST", "/v1/jobs", &job.to_json().unwrap());
    assert_eq!(status, 201, "{reply}");
    let id = reply["job_id"].as_str().unwrap().to_string();
    cluster.wait_for_status(&id, &["RUNNING"], Duration::from_secs(20));

    let workers: Vec<u32> = cluster.procs.0[1..].iter().map(Child::id).collect();
    std::thread::sleep(Duration::from_secs(3));
    let early: Vec<u64> = workers.iter().map(|&p| rss_kib(p)).collect();
    std::thread::sleep(Duration::from_secs(3));
    let late: Vec<u64> = workers.iter().map(|&p| rss_kib(p)).collect();
    let (_, details) = cluster.rest("GET", &format!("/v1/jobs/{id}"), "");
    let sources = &details["vertices"][0]["subtasks"];
    let rate: u64 = sources
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["source_rows_per_second"].as_u64().unwrap())
        .sum();
    let pressure: Vec<u64> = sources
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["back_pressured_time_ms_per_second"].as_u64().unwrap())
        .collect();
    eprintln!(
        "sources read {rate} rows/s against sinks taking {} rows/s; back-pressured {pressure:?} ms/s; \
         worker RSS {early:?} KiB after 3 s, {late:?} KiB after 6 s",
        2 * SINK_RATE
    );
    // The unthrottled generator runs at millions of rows/s on its own.
    assert!(rate <= 3 * SINK_RATE, "source rate {rate} rows/s");
    assert!(rate > 0, "the source still runs");
    for p in &pressure {
        assert!(*p >= 300, "the sources are held back: {pressure:?}");
    }
    for (e, l) in early.iter().zip(&late) {
        assert!(*l < 256 * 1024, "worker RSS {l} KiB");
        assert!(
            l.saturating_sub(*e) < 32 * 1024,
            "RSS grew from {e} to {l} KiB"
        );
    }

    let out = cluster.cli(&["cancel", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster.wait_for_status(&id, &["CANCELED"], Duration::from_secs(20));
}

#[test]
fn a_cluster_with_tls_and_a_token_runs_jobs_across_workers() {
    let tmp = tempfile::tempdir().unwrap();
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
    let (cert, key) = (
        tmp.path().join("cluster.crt"),
        tmp.path().join("cluster.key"),
    );
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let tls = [
        "--tls-cert".to_string(),
        cert.display().to_string(),
        "--tls-key".to_string(),
        key.display().to_string(),
    ];
    let cluster = Cluster::start_with(2, 2, Some("cluster-token"), &tls);
    let out_dir = tmp.path().join("out");
    let job = window_job(&out_dir, Some(50_000), None);
    let (status, reply) = cluster.rest("POST", "/v1/jobs", &job.to_json().unwrap());
    assert_eq!(status, 201, "{reply}");
    let id = reply["job_id"].as_str().unwrap();
    let details = cluster.wait_for_status(id, &["FINISHED", "FAILED"], Duration::from_secs(30));
    assert_eq!(details["status"], "FINISHED", "{details:#}");
    assert!(!read_dir(&out_dir).is_empty());

    // A worker speaking plain HTTP/2 cannot join.
    let out = Command::new(WEIR)
        .args([
            "worker",
            "--coordinator",
            &cluster.rpc,
            "--token",
            "cluster-token",
        ])
        .env_remove("WEIR_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _plain = Processes(vec![out]);
    std::thread::sleep(Duration::from_secs(2));
    let (_, workers) = cluster.rest("GET", "/v1/workers", "");
    assert_eq!(workers.as_array().unwrap().len(), 2, "{workers}");
}

/// Every row of the Flight sink `name` served at `endpoint`, followed until
/// the sink's subtasks there finish.
async fn read_sink(endpoint: &str, name: &str, token: Option<&str>) -> Vec<RecordBatch> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{endpoint}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = arrow_flight::FlightClient::new(channel);
    if let Some(t) = token {
        client
            .add_header("authorization", &format!("Bearer {t}"))
            .unwrap();
    }
    let info = weir_tests::listed(&mut client, name).await;
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    weir_tests::read(&mut client, ticket).await
}

#[test]
fn a_flight_client_reads_a_running_cluster_jobs_sink_from_its_workers() {
    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;
    const ROWS: u64 = 40_000;
    let cluster = Cluster::start(2, 1, None);
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    env.configure(|c| c.batch_size = 1000);
    env.from_source(
        SourceSpec::from(
            GeneratorSpec::new(Some(ROWS))
                .column("n", ColumnGen::Sequence)
                .rate(20_000),
        ),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .unwrap()
    .sink_to(weir_flight::flight_sink("cluster-numbers"), "results")
    .unwrap();
    let job = env.job_graph("flight sink on a cluster").unwrap();
    let (status, reply) = cluster.rest("POST", "/v1/jobs", &job.to_json().unwrap());
    assert_eq!(status, 201, "{reply}");
    let id = reply["job_id"].as_str().unwrap().to_string();
    let details = cluster.wait_for_status(&id, &["RUNNING"], Duration::from_secs(20));
    let sinks = details["flight_sinks"].as_array().unwrap();
    assert_eq!(sinks.len(), 1, "{details:#}");
    assert_eq!(sinks[0]["name"], "cluster-numbers");
    let endpoints: Vec<String> = sinks[0]["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_string())
        .collect();
    assert_eq!(endpoints.len(), 2, "one endpoint per worker: {endpoints:?}");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut numbers: Vec<i64> = runtime.block_on(async {
        let reads = endpoints
            .iter()
            .map(|e| read_sink(e, "cluster-numbers", cluster.token.as_deref()));
        futures::future::join_all(reads)
            .await
            .into_iter()
            .flatten()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect()
    });
    // The reads began while the job ran and followed it to its end.
    numbers.sort_unstable();
    assert_eq!(numbers, (0..ROWS as i64).collect::<Vec<_>>());
    cluster.wait_for_status(&id, &["FINISHED"], Duration::from_secs(20));
}

#[test]
fn a_killed_worker_is_recovered_from_the_last_checkpoint_with_exactly_once_output() {
    kill_a_worker_and_recover(None, |d| {
        d["checkpoints"].as_array().map_or(0, Vec::len) >= 2
    });
}

/// The same through an S3-compatible server on loopback: the workers write
/// and restore their state over HTTP.
#[test]
fn a_killed_worker_recovers_from_checkpoints_in_s3() {
    let _s3 = weir_tests::S3Server::start("weir-cluster");
    kill_a_worker_and_recover(Some("s3://weir-cluster/jobs"), |d| {
        d["checkpoints"].as_array().map_or(0, Vec::len) >= 2
    });
}

/// The kill lands while a checkpoint is under way — some tasks have
/// acknowledged it, others not: it never completes, and the job restarts
/// from the one before.
#[test]
fn a_kill_during_a_checkpoint_restarts_from_the_previous_one_exactly_once() {
    let aborted = kill_a_worker_and_recover(None, |d| {
        d["checkpoints"].as_array().map_or(0, Vec::len) >= 2
            && d["checkpoint_in_progress"]["acknowledged"]
                .as_u64()
                .is_some_and(|a| a >= 1)
            && d["checkpoint_in_progress"]["savepoint"] == false
    });
    let id = aborted["checkpoint_in_progress"]["id"].as_u64().unwrap();
    eprintln!(
        "killed during checkpoint {id}: {}",
        aborted["checkpoint_in_progress"]
    );
}

/// Coordinator + 2 workers run the window job with checkpoints (in a local
/// folder, or at `checkpoint_url`); once
/// `when(job details)` holds, kill -9 the second worker (a source and a
/// window subtask run there). The job recovers and its committed output
/// equals a failure-free run. Returns the details seen at the kill.
fn kill_a_worker_and_recover(
    checkpoint_url: Option<&str>,
    when: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    const EVENTS: u64 = 360_000;
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(2, 2, None);
    let out = tmp.path().join("out");
    let checkpoints = match checkpoint_url {
        Some(url) => url.to_string(),
        None => tmp.path().join("checkpoints").display().to_string(),
    };
    let sink = format!("windows-{}", std::process::id());
    let job = window_job_with_sinks(&out, Some(&sink), Some(EVENTS), Some(60_000), 2, |c| {
        c.checkpoint_interval = Some(Duration::from_millis(300));
        c.checkpoint_dir = Some(checkpoints.clone());
        c.restart_delay = Duration::from_millis(200);
        c.watermark_interval = Duration::from_millis(50);
    });
    let (status, reply) = cluster.rest("POST", "/v1/jobs", &job.to_json().unwrap());
    assert_eq!(status, 201, "{reply}");
    let id = reply["job_id"].as_str().unwrap().to_string();
    cluster.wait_for_status(&id, &["RUNNING"], Duration::from_secs(20));

    // A run where the moment never comes is inconclusive, and fails.
    let deadline = Instant::now() + Duration::from_secs(20);
    let at_kill = loop {
        let (_, details) = cluster.rest("GET", &format!("/v1/jobs/{id}"), "");
        if when(&details) {
            break details;
        }
        assert_eq!(details["status"], "RUNNING", "{details:#}");
        assert!(
            Instant::now() < deadline,
            "inconclusive: the moment to kill never came: {details:#}"
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    let worker = &mut cluster.procs.0[2];
    worker.kill().unwrap();
    worker.wait().unwrap();

    let details = cluster.wait_for_status(&id, &["FINISHED", "FAILED"], Duration::from_secs(60));
    assert_eq!(details["status"], "FINISHED", "{details:#}");
    assert!(details["restarts"].as_u64().unwrap() >= 1, "{details:#}");
    let history = details["history"].to_string();
    assert!(
        history.contains("was lost") && history.contains("from checkpoint"),
        "{history}"
    );
    // The failure is in the exception history, the restore in the job's
    // metrics (Flink's `lastCheckpointRestoreTimestamp`).
    let (_, exceptions) = cluster.rest("GET", &format!("/v1/jobs/{id}/exceptions"), "");
    let entries = exceptions["exceptionHistory"]["entries"]
        .as_array()
        .unwrap();
    assert!(
        entries.iter().any(|e| e["exception"]
            .as_str()
            .unwrap_or_default()
            .contains("was lost")),
        "{exceptions:#}"
    );
    let (_, restored) = cluster.rest(
        "GET",
        &format!("/v1/jobs/{id}/metrics?get=lastCheckpointRestoreTimestamp,numRestarts"),
        "",
    );
    let restore_ms: i64 = restored[0]["value"].as_str().unwrap().parse().unwrap();
    assert!(restore_ms > 1_700_000_000_000, "{restored}");
    if let Some(cut) = at_kill["checkpoint_in_progress"]["id"].as_u64() {
        // The checkpoint the kill cut short never completed; the restart
        // used the one before.
        let completed: Vec<u64> = details["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c.as_u64())
            .collect();
        assert!(!completed.contains(&cut), "{cut} in {completed:?}");
        assert!(
            history.contains(&format!("from checkpoint {}", cut - 1)),
            "{history}"
        );
    }
    eprintln!(
        "history: {history}\ncheckpoints: {}",
        details["checkpoints"]
    );

    // Exactly once: the committed output equals a failure-free run.
    let want = equals_failure_free_run(tmp.path(), &out, EVENTS);
    let leftovers: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".inprogress"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // The Flight sink (read-committed) on the surviving worker: never a row
    // twice, never one the failure-free run lacks. Rows the killed worker
    // had served died with it — the sink holds its rows in memory.
    let survivor = cluster.workers[0].1.clone();
    let served = tokio::runtime::Runtime::new().unwrap().block_on(read_sink(
        &survivor,
        &sink,
        cluster.token.as_deref(),
    ));
    let served = sorted_rows(&served);
    let mut unique = served.clone();
    unique.dedup();
    assert_eq!(unique.len(), served.len(), "a row served twice");
    assert!(
        served.len() >= want.len() / 2,
        "{} of {}",
        served.len(),
        want.len()
    );
    assert!(
        served.iter().all(|r| want.binary_search(r).is_ok()),
        "the Flight sink served a row the failure-free run does not have"
    );
    eprintln!(
        "Flight sink on the surviving worker: {} of {} rows",
        served.len(),
        want.len()
    );
    at_kill
}

#[test]
fn stop_with_savepoint_and_resume_at_another_parallelism_gives_the_uninterrupted_output() {
    const EVENTS: u64 = 300_000;
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(2, 3, None);
    let out = tmp.path().join("out");
    let savepoints = tmp.path().join("savepoints");
    let job_file = |p: usize| {
        let job = window_job_with(&out, Some(EVENTS), Some(50_000), p, |c| {
            c.watermark_interval = Duration::from_millis(50);
        });
        let file = tmp.path().join(format!("job-p{p}.json"));
        std::fs::write(&file, job.to_json().unwrap()).unwrap();
        file.display().to_string()
    };
    let stdout = |o: &std::process::Output| {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let mut from: Option<String> = None;
    for p in [2, 3, 1] {
        let file = job_file(p);
        let mut args = vec!["submit", file.as_str()];
        if let Some(path) = &from {
            args.extend(["--from-savepoint", path.as_str()]);
        }
        let id = stdout(&cluster.cli(&args));
        if p == 1 {
            let details =
                cluster.wait_for_status(&id, &["FINISHED", "FAILED"], Duration::from_secs(60));
            assert_eq!(details["status"], "FINISHED", "{details:#}");
            break;
        }
        cluster.wait_for_status(&id, &["RUNNING"], Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(1500));
        let dir = savepoints.display().to_string();
        let path = stdout(&cluster.cli(&["stop", &id, "--savepoint", &dir]));
        assert!(path.starts_with(&dir), "{path}");
        let details = cluster.wait_for_status(&id, &["FINISHED"], Duration::from_secs(20));
        assert!(
            details["history"]
                .to_string()
                .contains("stopped with savepoint")
        );
        from = Some(path);
    }

    let local_out = tmp.path().join("local");
    let local = window_job_with(&local_out, Some(EVENTS), Some(3_000_000), 2, |_| {});
    weir_worker::executor::run_job(local).unwrap();
    let want = sorted_rows(&read_dir(&local_out));
    let got = sorted_rows(&read_dir(&out));
    assert!(want.len() > 1000);
    assert_eq!(got.len(), want.len(), "row count");
    assert!(
        got == want,
        "the resumed output differs from the uninterrupted run"
    );
}

#[test]
fn three_kills_in_a_row_still_give_exactly_once_output() {
    const EVENTS: u64 = 400_000;
    let tmp = tempfile::tempdir().unwrap();
    // One slot each: every kill takes a source subtask with it.
    let mut cluster = Cluster::start(4, 1, None);
    let out = tmp.path().join("out");
    let job = window_job_with(&out, Some(EVENTS), Some(50_000), 2, |c| {
        c.checkpoint_interval = Some(Duration::from_millis(200));
        // Incremental: restores read chunks written by earlier checkpoints.
        c.checkpoint_incremental = true;
        c.checkpoint_dir = Some(tmp.path().join("checkpoints").display().to_string());
        c.restart_delay = Duration::from_millis(100);
        c.watermark_interval = Duration::from_millis(50);
    });
    let (status, reply) = cluster.rest("POST", "/v1/jobs", &job.to_json().unwrap());
    assert_eq!(status, 201, "{reply}");
    let id = reply["job_id"].as_str().unwrap().to_string();
    for kill in 0..3 {
        // Wait for a fresh checkpoint of the current attempt, then kill a
        // worker running one of its subtasks.
        let deadline = Instant::now() + Duration::from_secs(30);
        let victim = loop {
            let (_, d) = cluster.rest("GET", &format!("/v1/jobs/{id}"), "");
            let checkpoints = d["checkpoints"].as_array().map_or(0, Vec::len);
            if d["status"] == "RUNNING" && d["attempt"] == kill && checkpoints >= 2 * (kill + 1) {
                break d["vertices"][0]["subtasks"][kill % 2]["address"]
                    .as_str()
                    .unwrap()
                    .to_string();
            }
            assert!(
                d["status"] != "FINISHED",
                "the job ended before kill {kill}: {d:#}"
            );
            assert!(
                Instant::now() < deadline,
                "inconclusive before kill {kill}: {d:#}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        cluster.kill_worker_at(&victim);
        if kill == 2 {
            // Two slots are needed; one worker is left: add one.
            cluster.add_worker(1);
        }
    }
    let details = cluster.wait_for_status(&id, &["FINISHED", "FAILED"], Duration::from_secs(90));
    assert_eq!(details["status"], "FINISHED", "{details:#}");
    assert_eq!(details["restarts"], 3, "{details:#}");

    let local_out = tmp.path().join("local");
    let local = window_job_with(&local_out, Some(EVENTS), Some(4_000_000), 2, |_| {});
    weir_worker::executor::run_job(local).unwrap();
    let want = sorted_rows(&read_dir(&local_out));
    let got = sorted_rows(&read_dir(&out));
    assert_eq!(got.len(), want.len(), "row count");
    assert!(
        got == want,
        "the output after three kills differs from a failure-free run"
    );
}

/// Under heavy back-pressure across workers (the exchange's queues and
/// HTTP/2 windows hold seconds of data in front of slow sinks), aligned
/// barriers queue behind that data and time out, while unaligned barriers
/// overtake it over Flight and complete.
#[test]
fn under_back_pressure_aligned_checkpoints_time_out_and_unaligned_ones_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(2, 1, None);
    let run = |unaligned: bool| -> serde_json::Value {
        let env = weir_worker::local_environment().unwrap();
        env.set_parallelism(2);
        env.configure(|c| {
            c.batch_size = 1024;
            c.checkpoint_interval = Some(Duration::from_millis(500));
            c.checkpoint_timeout = Duration::from_secs(2);
            c.checkpoint_unaligned = unaligned;
            c.checkpoint_dir = Some(tmp.path().join("chk").display().to_string());
        });
        env.from_source(
            SourceSpec::from(
                GeneratorSpec::new(None)
                    .column("key", ColumnGen::Key { cardinality: 1000 })
                    .column("v", ColumnGen::Sequence),
            ),
            WatermarkStrategy::no_watermarks(),
            "unthrottled",
        )
        .unwrap()
        .key_by(&["key"])
        .unwrap()
        .as_stream()
        .sink_to(weir_operators::connectors::throttled(2_000), "slow sink")
        .unwrap();
        let job = env.job_graph("back-pressured checkpoints").unwrap();
        let (status, reply) = cluster.rest("POST", "/v1/jobs", &job.to_json().unwrap());
        assert_eq!(status, 201, "{reply}");
        let id = reply["job_id"].as_str().unwrap().to_string();
        cluster.wait_for_status(&id, &["RUNNING"], Duration::from_secs(20));
        std::thread::sleep(Duration::from_secs(8));
        let (_, details) = cluster.rest("GET", &format!("/v1/jobs/{id}"), "");
        let out = cluster.cli(&["cancel", &id]);
        assert!(out.status.success());
        cluster.wait_for_status(&id, &["CANCELED"], Duration::from_secs(20));
        details
    };
    let aligned = run(false);
    let unaligned = run(true);
    let count = |d: &serde_json::Value| d["checkpoints"].as_array().map_or(0, Vec::len);
    eprintln!(
        "in 8 s: aligned {} completed, {} declined; unaligned {} completed, {} declined",
        count(&aligned),
        aligned["checkpoints_declined"],
        count(&unaligned),
        unaligned["checkpoints_declined"]
    );
    assert!(
        aligned["checkpoints_declined"].as_u64().unwrap() >= 1,
        "aligned barriers wait behind seconds of queued data: {aligned:#}"
    );
    assert!(
        count(&unaligned) >= 3,
        "unaligned barriers overtake the queues: {unaligned:#}"
    );
}

/// `weir stop --savepoint --drain` fires every window into the savepoint:
/// one-hour windows that would not fire for an hour are in the output,
/// committed with it; a plain stop-with-savepoint leaves them in state.
#[test]
fn stop_with_drain_fires_every_window_into_the_savepoint() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(2, 2, None);
    for drain in [false, true] {
        let out = tmp.path().join(format!("out-{drain}"));
        let env = weir_worker::local_environment().unwrap();
        env.set_parallelism(2);
        env.configure(|c| c.watermark_interval = Duration::from_millis(50));
        env.from_source(
            SourceSpec::from(
                GeneratorSpec::new(None)
                    .column("key", ColumnGen::Key { cardinality: 50 })
                    .column(
                        "ts",
                        ColumnGen::EventTime {
                            start_ms: 1_700_000_000_000,
                            events_per_second: 10_000,
                            max_out_of_orderness_ms: 0,
                        },
                    )
                    .rate(20_000),
            ),
            WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::ZERO),
            "events",
        )
        .unwrap()
        .key_by(&["key"])
        .unwrap()
        .window(TumblingEventTimeWindows::of(Duration::from_secs(3600)))
        .aggregate(vec![AggregateSpec::count_star()])
        .unwrap()
        .sink_to(weir_operators::connectors::parquet_sink(out.clone()), "out")
        .unwrap();
        let job = env.job_graph("hour windows").unwrap();
        let file = tmp.path().join(format!("job-{drain}.json"));
        std::fs::write(&file, job.to_json().unwrap()).unwrap();
        let submitted = cluster.cli(&["submit", file.to_str().unwrap()]);
        assert!(
            submitted.status.success(),
            "{}",
            String::from_utf8_lossy(&submitted.stderr)
        );
        let id = String::from_utf8_lossy(&submitted.stdout)
            .trim()
            .to_string();
        cluster.wait_for_status(&id, &["RUNNING"], Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(1500));
        let dir = tmp.path().join("savepoints").display().to_string();
        let mut args = vec!["stop", id.as_str(), "--savepoint", dir.as_str()];
        if drain {
            args.push("--drain");
        }
        let stopped = cluster.cli(&args);
        assert!(
            stopped.status.success(),
            "{}",
            String::from_utf8_lossy(&stopped.stderr)
        );
        let details = cluster.wait_for_status(&id, &["FINISHED"], Duration::from_secs(20));
        assert!(
            details["history"]
                .to_string()
                .contains("stopped with savepoint")
        );
        let rows = read_dir(&out);
        let counted: i64 = rows
            .iter()
            .map(|b| {
                let c = b.column_by_name("count(*)").or(b.columns().last()).unwrap();
                arrow::compute::sum(
                    c.as_any()
                        .downcast_ref::<arrow::array::Int64Array>()
                        .unwrap(),
                )
                .unwrap_or(0)
            })
            .sum();
        if drain {
            assert!(
                counted > 10_000,
                "drained windows hold the events read: {counted}"
            );
        } else {
            assert_eq!(counted, 0, "without drain the hour windows stay open");
        }
        eprintln!("drain {drain}: {counted} events in fired windows");
    }
}
