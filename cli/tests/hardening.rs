//! Bad input against a real cluster: job graphs that are well-formed JSON
//! but wrong, failures whose cause must be named, paths that must stay
//! inside the job's folders.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use weir_core::spec::{AggregateSpec, SourceSpec};
use weir_core::time::{TumblingEventTimeWindows, WatermarkStrategy};
use weir_operators::connectors::{ColumnGen, GeneratorSpec};

mod common;
use common::Cluster;

/// generator -> key_by(key) -> 1 s tumbling count + sum -> Parquet, at
/// parallelism 2, as job-graph JSON.
fn window_job(dir: &Path) -> Value {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    let generator = GeneratorSpec::new(Some(20_000))
        .column("key", ColumnGen::Key { cardinality: 50 })
        .column("amount", ColumnGen::UniformInt { min: 1, max: 1000 })
        .column(
            "ts",
            ColumnGen::EventTime {
                start_ms: 1_700_000_000_000,
                events_per_second: 10_000,
                max_out_of_orderness_ms: 0,
            },
        );
    env.from_source(
        SourceSpec::from(generator),
        WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::ZERO),
        "events",
    )
    .unwrap()
    .key_by(&["key"])
    .unwrap()
    .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
    .aggregate(vec![
        AggregateSpec::count_star(),
        AggregateSpec::sum("amount"),
    ])
    .unwrap()
    .sink_to(weir_operators::connectors::parquet_sink(dir), "out")
    .unwrap();
    let job = env.job_graph("hardening").unwrap();
    serde_json::from_str(&job.to_json().unwrap()).unwrap()
}

/// The node whose kind is the operator `variant`, as a mutable JSON value.
fn operator<'a>(job: &'a mut Value, variant: &str) -> &'a mut Value {
    job["nodes"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find_map(|n| n["kind"].get_mut("Operator")?.get_mut(variant))
        .unwrap_or_else(|| panic!("no {variant} operator in the job"))
}

fn hash_edge(job: &mut Value) -> &mut Value {
    job["edges"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|e| e["partitioner"].get("Hash").is_some())
        .expect("a hash edge")
}

#[test]
fn invalid_job_graphs_are_refused_naming_the_field_and_nothing_is_deployed() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(1, 4, Some("t0ken"));
    let base = window_job(&tmp.path().join("out"));
    // Sanity: the unmodified job is accepted and runs.
    let (status, body) = cluster.rest("POST", "/v1/jobs", &base.to_string());
    assert_eq!(status, 201, "{body}");
    let id = body["job_id"].as_str().unwrap().to_string();
    cluster.wait_for_status(&id, &["FINISHED"], Duration::from_secs(60));

    type Mutation = fn(&mut Value);
    let cases: Vec<(&str, Mutation, &str)> = vec![
        (
            "window size 0",
            |j| operator(j, "window_aggregate")["assigner"]["Tumbling"]["size"] = json!(0),
            "window size must be positive, got 0",
        ),
        (
            "negative window size",
            |j| operator(j, "window_aggregate")["assigner"]["Tumbling"]["size"] = json!(-1000),
            "window size must be positive, got -1000",
        ),
        (
            "offset larger than the size",
            |j| operator(j, "window_aggregate")["assigner"]["Tumbling"]["offset"] = json!(5000),
            "offset 5000 ms must be smaller than the size",
        ),
        (
            "max_parallelism 0",
            |j| j["config"]["max_parallelism"] = json!(0),
            "max_parallelism 0",
        ),
        (
            "batch_size 0",
            |j| j["config"]["batch_size"] = json!(0),
            "batch_size must be at least 1",
        ),
        (
            "hash key index out of range",
            |j| hash_edge(j)["partitioner"]["Hash"]["key_indices"][0] = json!(99),
            "hash key 'key' at index 99",
        ),
        (
            "hash key naming another column",
            |j| hash_edge(j)["partitioner"]["Hash"]["key_indices"][0] = json!(1),
            "where the stream has column 'amount'",
        ),
        (
            "window input column of another type",
            |j| {
                let fields = &mut operator(j, "window_aggregate")["input_schema"]["fields"];
                fields[1]["data_type"] = json!("Utf8");
            },
            "is planned for columns [key Int64, amount Utf8, ts",
        ),
        (
            "source schema of another type",
            |j| j["nodes"][0]["schema"]["fields"][0]["data_type"] = json!("Utf8"),
            "the source's output is planned for columns [key Utf8",
        ),
        (
            "unknown window key",
            |j| operator(j, "window_aggregate")["keys"][0] = json!("nope"),
            "window key 'nope' is not a column",
        ),
        (
            "aggregate over a missing column",
            |j| operator(j, "window_aggregate")["aggregates"][1]["column"] = json!("missing"),
            "column 'missing' not found",
        ),
        (
            "a cycle: an edge from a vertex to itself",
            |j| {
                let mut e = j["edges"][0].clone();
                e["source"] = e["target"].clone();
                j["edges"].as_array_mut().unwrap().push(e);
            },
            "is on a cycle",
        ),
        (
            "parallelism above max_parallelism",
            |j| j["config"]["max_parallelism"] = json!(1),
            "above max_parallelism 1",
        ),
        (
            "a connector this binary does not have",
            |j| j["nodes"][0]["kind"]["Source"]["spec"]["connector"]["connector"] = json!("kafkaa"),
            "unknown connector 'kafkaa'",
        ),
        (
            "an option the sink's connector does not take",
            |j| {
                let sink = j["nodes"]
                    .as_array_mut()
                    .unwrap()
                    .iter_mut()
                    .find(|n| n["kind"].get("Sink").is_some())
                    .unwrap();
                sink["kind"]["Sink"]["options"]["sink.rolling-policy.file-sise"] = json!("1 mb");
            },
            "unknown option 'sink.rolling-policy.file-sise'",
        ),
        (
            "a generator whose planned form makes no sense",
            |j| j["nodes"][0]["kind"]["Source"]["spec"]["connector"]["planned"]["rate"] = json!(0),
            "generator rate must be positive",
        ),
    ];
    for (what, mutate, expected) in cases {
        let mut job = base.clone();
        mutate(&mut job);
        let (status, body) = cluster.rest("POST", "/v1/jobs", &job.to_string());
        assert_eq!(status, 400, "{what}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        let text = job.to_string();
        assert!(
            error.contains(expected),
            "{what}: {error}\n{}",
            &text[1000..1200.min(text.len())]
        );
        assert!(
            error.contains("vertex") || error.contains("config"),
            "{what}: names no place: {error}"
        );
    }
    // Nothing of them was deployed: the one job is the first, finished one,
    // and every slot is free.
    let (_, jobs) = cluster.rest("GET", "/v1/jobs", "");
    let listed = jobs["jobs"]
        .as_array()
        .or(jobs.as_array())
        .cloned()
        .unwrap_or_default();
    assert_eq!(listed.len(), 1, "{jobs:#}");
    let (_, overview) = cluster.rest("GET", "/v1/overview", "");
    assert_eq!(overview["slots_free"], 4, "{overview}");
}

#[test]
fn a_failed_job_names_the_failing_task_and_its_cause_not_the_echoes() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // Many good rows, then one that is not a number: the source fails
    // after its neighbours have started reading from it.
    let mut csv = String::new();
    for i in 0..20_000 {
        csv.push_str(&format!("{},{}\n", i % 10, i));
    }
    csv.push_str("3,not-a-number\n");
    std::fs::write(data.join("orders.csv"), csv).unwrap();
    let script = tmp.path().join("job.sql");
    std::fs::write(
        &script,
        format!(
            "SET 'parallelism.default' = '2';\n\
             CREATE TABLE orders (user_id BIGINT, amount BIGINT) WITH (\n\
               'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
             CREATE TABLE out (user_id BIGINT, total BIGINT) WITH ('connector' = 'blackhole');\n\
             INSERT INTO out SELECT user_id, SUM(amount) FROM orders GROUP BY user_id;\n",
            data.display()
        ),
    )
    .unwrap();
    let cluster = Cluster::start(2, 2, Some("t0ken"));
    let submit = cluster.cli(&["submit", script.to_str().unwrap()]);
    assert!(
        submit.status.success(),
        "{}",
        String::from_utf8_lossy(&submit.stderr)
    );
    let id = String::from_utf8_lossy(&submit.stdout).trim().to_string();
    let mut details = cluster.wait_for_status(&id, &["FAILED"], Duration::from_secs(60));
    // The tasks next to the source may report their broken channels
    // before the source's own report arrives; the cause replaces them
    // as soon as it does.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while details["failure"]
        .as_str()
        .unwrap_or_default()
        .contains("channel")
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
        details = cluster.rest("GET", &format!("/v1/jobs/{id}"), "").1;
    }
    let failure = details["failure"].as_str().unwrap_or_default();
    assert!(
        failure.contains("orders.csv") && failure.contains("not-a-number"),
        "the failure does not name the bad file and value: {failure}\n{details:#}"
    );
    assert!(
        !failure.contains("closed before end of stream")
            && !failure.contains("closed by its consumer"),
        "the failure names a symptom: {failure}"
    );
    // `weir status` says the same.
    let status = cluster.cli(&["status", &id]);
    let text = String::from_utf8_lossy(&status.stdout).to_string()
        + &String::from_utf8_lossy(&status.stderr);
    assert!(text.contains("not-a-number"), "{text}");
}

/// [`window_job`] unbounded, rate-limited, checkpointing every 100 ms into
/// `checkpoints`.
fn running_job(dir: &Path, checkpoints: &Path) -> Value {
    let mut job = window_job(dir);
    let source = &mut job["nodes"][0]["kind"]["Source"]["spec"]["connector"];
    source["bounded"] = json!(false);
    source["planned"]["num_events"] = Value::Null;
    source["planned"]["rate"] = json!(5000);
    job["config"]["checkpoint_interval"] = json!({"secs": 0, "nanos": 100_000_000});
    job["config"]["checkpoint_dir"] = json!(checkpoints.display().to_string());
    job
}

#[test]
fn savepoint_folders_resolve_inside_the_savepoint_base_and_retention_removes_whole_folders() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(1, 6, Some("t0ken"));
    let checkpoints = tmp.path().join("checkpoints");
    let job = running_job(&tmp.path().join("out"), &checkpoints);
    let (status, body) = cluster.rest("POST", "/v1/jobs", &job.to_string());
    assert_eq!(status, 201, "{body}");
    let id = body["job_id"].as_str().unwrap().to_string();
    cluster.wait_for_status(&id, &["RUNNING"], Duration::from_secs(30));

    let base = std::env::temp_dir().join("weir-savepoints");
    let savepoint = |dir: Value| {
        let (status, body) = cluster.rest(
            "POST",
            &format!("/v1/jobs/{id}/savepoints"),
            &json!({ "dir": dir }).to_string(),
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        if status == 202 {
            // One savepoint at a time: wait for this one.
            let path = body["path"].as_str().unwrap().to_string();
            loop {
                let (_, d) = cluster.rest("GET", &format!("/v1/jobs/{id}"), "");
                if d["savepoints"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p == &json!(path))
                {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "savepoint {path} not taken"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        (status, body)
    };
    // An empty folder once wrote into `/`.
    let (status, body) = savepoint(json!(""));
    assert_eq!(status, 202, "{body}");
    let path = body["path"].as_str().unwrap();
    assert!(Path::new(path).starts_with(&base), "{path}");
    assert!(
        Path::new(path).join("_metadata").exists() || Path::new(path).is_dir(),
        "{path}"
    );
    // `weir state inspect` checks every file against the manifest.
    let inspect = |dir: &str| {
        let out = std::process::Command::new(common::WEIR)
            .args(["state", "inspect", dir])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, text) = inspect(path);
    assert!(ok && !text.contains("**"), "{text}");
    let victim = files_named(Path::new(path), "panes")
        .pop()
        .expect("a panes table");
    let len = std::fs::metadata(&victim).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&victim)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let (ok, text) = inspect(path);
    assert!(!ok, "{text}");
    assert!(
        text.contains("TRUNCATED") && text.contains(&victim.display().to_string()),
        "{text}"
    );
    // Resuming from the chk-N folder itself works.
    let chk = std::fs::read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("chk-"))
        .unwrap();
    let (status, body) = cluster.rest(
        "POST",
        &format!("/v1/jobs?from_savepoint={}", chk.display()),
        &job.to_string(),
    );
    // The truncated table makes it fail on restore, after it was accepted.
    assert_eq!(status, 201, "{body}");
    let (status, body) = cluster.rest(
        "POST",
        &format!(
            "/v1/jobs?from_savepoint={}",
            tmp.path().join("nowhere").display()
        ),
        &job.to_string(),
    );
    assert_eq!(status, 400, "{body}");
    assert!(!tmp.path().join("nowhere").exists());
    // A relative folder lands inside the base, not the coordinator's cwd.
    let (status, body) = savepoint(json!("nightly"));
    assert_eq!(status, 202, "{body}");
    let path = body["path"].as_str().unwrap();
    assert!(Path::new(path).starts_with(base.join("nightly")), "{path}");
    // Climbing out is refused.
    let (status, body) = savepoint(json!("../elsewhere"));
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains(".."), "{body}");

    // Retention keeps 3 completed checkpoints and deletes the others'
    // whole folders (it once left empty trees behind).
    let run = {
        let (_, d) = cluster.rest("GET", &format!("/v1/jobs/{id}"), "");
        d["checkpoint_dir"].as_str().unwrap().to_string()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, d) = cluster.rest("GET", &format!("/v1/jobs/{id}"), "");
        if d["checkpoints"].as_array().unwrap().len() >= 15 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "too few checkpoints: {d:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let folders: Vec<String> = std::fs::read_dir(&run)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("chk-"))
        .collect();
    // Three retained, one being written, one or two being deleted (retention
    // runs beside the next checkpoint) — not one per checkpoint taken.
    assert!(folders.len() <= 6, "{folders:?}");
    let (status, _) = cluster.rest("POST", &format!("/v1/jobs/{id}/cancel"), "");
    assert!(status < 300);
}

/// Every file under `dir` whose name starts with `prefix`.
fn files_named(dir: &Path, prefix: &str) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_named(&p, prefix));
        } else if p.file_name().unwrap().to_string_lossy().starts_with(prefix) {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_crafted_savepoint_naming_files_outside_the_sink_folder_is_refused() {
    use arrow::array::{Array, StringArray};
    use arrow::record_batch::RecordBatch;
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(1, 2, Some("t0ken"));
    let mut job = running_job(&tmp.path().join("out"), &tmp.path().join("checkpoints"));
    job["config"]["restart_attempts"] = json!(0);
    let (status, body) = cluster.rest("POST", "/v1/jobs", &job.to_string());
    assert_eq!(status, 201, "{body}");
    let id = body["job_id"].as_str().unwrap().to_string();
    cluster.wait_for_status(&id, &["RUNNING"], Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(1500));
    let target = tmp.path().join("savepoints");
    let (status, body) = cluster.rest(
        "POST",
        &format!("/v1/jobs/{id}/savepoints"),
        &json!({ "dir": target.display().to_string(), "stop": true }).to_string(),
    );
    assert_eq!(status, 202, "{body}");
    let savepoint = body["path"].as_str().unwrap().to_string();
    cluster.wait_for_status(&id, &["FINISHED"], Duration::from_secs(30));

    // The sink's state names its files relative to its folder.
    let tables = files_named(Path::new(&savepoint), "pending");
    assert!(!tables.is_empty(), "no pending table in {savepoint}");
    let secret = tmp.path().join("secret.txt");
    std::fs::write(&secret, "do not move me").unwrap();
    for table in &tables {
        let batches: Vec<RecordBatch> =
            ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(table).unwrap())
                .unwrap()
                .build()
                .unwrap()
                .map(Result::unwrap)
                .collect();
        let mut out = Vec::new();
        for b in &batches {
            let names = b.column_by_name("in_progress").unwrap();
            let names = names.as_any().downcast_ref::<StringArray>().unwrap();
            assert!(
                names.iter().flatten().all(|n| !n.contains('/')),
                "state holds paths, not names: {names:?}"
            );
            // The crafted entry: a file of somebody else's, outside the sink.
            let crafted: StringArray = (0..b.num_rows())
                .map(|_| Some(secret.display().to_string()))
                .collect();
            let i = b.schema().index_of("in_progress").unwrap();
            let mut columns = b.columns().to_vec();
            columns[i] = std::sync::Arc::new(crafted);
            out.push(RecordBatch::try_new(b.schema(), columns).unwrap());
        }
        let mut w =
            ArrowWriter::try_new(std::fs::File::create(table).unwrap(), out[0].schema(), None)
                .unwrap();
        for b in &out {
            w.write(b).unwrap();
        }
        w.close().unwrap();
    }

    let (status, body) = cluster.rest(
        "POST",
        &format!("/v1/jobs?from_savepoint={savepoint}"),
        &job.to_string(),
    );
    assert_eq!(status, 201, "{body}");
    let resumed = body["job_id"].as_str().unwrap().to_string();
    let details = cluster.wait_for_status(&resumed, &["FAILED"], Duration::from_secs(60));
    let failure = details["failure"].as_str().unwrap_or_default();
    assert!(
        failure.contains("secret.txt") && failure.contains("outside the sink folder"),
        "{failure}"
    );
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "do not move me");
    assert!(
        files_named(&tmp.path().join("out"), "secret").is_empty(),
        "the outside file was moved into the sink"
    );
}

/// One raw HTTP request (any bytes as body); the status and the body.
fn raw_request(url: &str, head: &str, body: &[u8]) -> (u16, Value) {
    use std::io::{Read, Write};
    let host = url.strip_prefix("http://").unwrap();
    let mut s = std::net::TcpStream::connect(host).unwrap();
    write!(
        s,
        "{head}\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).to_string();
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .unwrap_or("0")
        .parse()
        .unwrap();
    (
        status,
        serde_json::from_str(rest.trim()).unwrap_or(Value::Null),
    )
}

#[test]
fn the_coordinator_keeps_a_bounded_history_and_answers_every_error_in_json() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start_full(1, 2, Some("t0ken"), &[], &["--jobs-history-max-size", "5"]);
    let checkpoints = tmp.path().join("checkpoints");
    let mut job = window_job(&tmp.path().join("out"));
    job["config"]["checkpoint_dir"] = json!(checkpoints.display().to_string());
    for _ in 0..12 {
        let (status, body) = cluster.rest("POST", "/v1/jobs", &job.to_string());
        assert_eq!(status, 201, "{body}");
        let id = body["job_id"].as_str().unwrap().to_string();
        cluster.wait_for_status(&id, &["FINISHED"], Duration::from_secs(60));
    }
    // A refused submission (more slots than there are) leaves no folder.
    let mut wide = job.clone();
    for v in wide["vertices"].as_array_mut().unwrap() {
        v["parallelism"] = json!(8);
    }
    for n in wide["nodes"].as_array_mut().unwrap() {
        n["parallelism"] = json!(8);
    }
    let before = std::fs::read_dir(&checkpoints).unwrap().count();
    let (status, body) = cluster.rest("POST", "/v1/jobs", &wide.to_string());
    assert_eq!(status, 409, "{body}");
    assert_eq!(std::fs::read_dir(&checkpoints).unwrap().count(), before);
    // Only the newest five finished jobs are kept, paged.
    let (_, jobs) = cluster.rest("GET", "/v1/jobs", "");
    let ids: Vec<&str> = jobs
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["job-0009", "job-0010", "job-0011", "job-0012", "job-0013"],
        "{jobs}"
    );
    let (_, page) = cluster.rest("GET", "/v1/jobs?offset=1&limit=2", "");
    assert_eq!(page.as_array().unwrap().len(), 2, "{page}");
    assert_eq!(page[0]["id"], "job-0010");
    let (status, body) = cluster.rest("GET", "/v1/jobs?limit=many", "");
    assert_eq!(status, 400, "{body}");
    // A giant job name is refused, not kept.
    let mut named = job.clone();
    named["job_name"] = json!("x".repeat(100_000));
    let (status, body) = cluster.rest("POST", "/v1/jobs", &named.to_string());
    assert_eq!(status, 400);
    assert!(
        body["error"].as_str().unwrap().contains("job_name"),
        "{body}"
    );

    // Bodies too large or not UTF-8: JSON errors like the rest.
    let auth = "Authorization: Bearer t0ken";
    let (status, body) = raw_request(
        &cluster.url,
        &format!("POST /v1/jobs HTTP/1.1\r\n{auth}"),
        &vec![b' '; 17 << 20],
    );
    assert_eq!(status, 413, "{body}");
    assert!(body["error"].is_string(), "{body}");
    let (status, body) = raw_request(
        &cluster.url,
        &format!("POST /v1/jobs HTTP/1.1\r\n{auth}"),
        b"{\"job_name\": \"\xff\xfe\"}",
    );
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("UTF-8"), "{body}");
    // The scheme of the Authorization header is case-insensitive.
    let (status, body) = raw_request(
        &cluster.url,
        "GET /v1/overview HTTP/1.1\r\nAuthorization: bearer t0ken",
        b"",
    );
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_coordinator_without_a_token_makes_one_only_its_user_can_read() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    // No token given: the coordinator makes one and leaves it in a file.
    let cluster = Cluster::start(1, 2, None);
    assert!(!cluster.given_token);
    let file = weir_flight::token_file::path_for(&cluster.url);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", file.display());
    let token = cluster.token.clone().expect("a made token");
    // Without it, every route is refused...
    let (status, _) = common::rest_call(&cluster.url, None, "GET", "/v1/jobs", "");
    assert_eq!(status, 401);
    // ...while this user's CLI finds it, and so did the worker (it
    // registered without being given one).
    let out = cluster.cli(&["list"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, overview) = cluster.rest("GET", "/v1/overview", "");
    assert_eq!(overview["workers"], 1);

    // A worker takes control actions only with the token: a job deployed
    // straight to it, bypassing the coordinator, is refused.
    let worker = cluster.workers[0].1.clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let refused = runtime.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{worker}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = arrow_flight::FlightClient::new(channel);
        let action = arrow_flight::Action::new(weir_core::cluster::DEPLOY, "{}");
        match client.do_action(action).await {
            Ok(_) => None,
            Err(e) => Some(e.to_string()),
        }
    });
    let refused = refused.expect("the worker took a deployment without the token");
    assert!(
        refused.to_lowercase().contains("unauthenticated") || refused.contains("token"),
        "{refused}"
    );
    // A fake worker cannot register either.
    let mut fake = std::process::Command::new(common::WEIR)
        .args(["worker", "--coordinator", &cluster.rpc, "--token", "guess"])
        .env("WEIR_TOKEN_DIR", tmp.path())
        .output()
        .unwrap();
    assert!(!fake.status.success());
    fake.stderr.extend_from_slice(&fake.stdout);
    let text = String::from_utf8_lossy(&fake.stderr).to_lowercase();
    assert!(
        text.contains("token") || text.contains("unauthenticated"),
        "{text}"
    );
    let (_, overview) = cluster.rest("GET", "/v1/overview", "");
    assert_eq!(overview["workers"], 1);
    // With the token, a registration offering absurdly many slots (their
    // sum once overflowed) is refused.
    let rpc = cluster.rpc.clone();
    let refused = runtime.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{rpc}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = arrow_flight::FlightClient::new(channel);
        client
            .add_header("authorization", &format!("Bearer {token}"))
            .unwrap();
        let body = json!({"address": "127.0.0.1:1", "slots": usize::MAX}).to_string();
        let action = arrow_flight::Action::new(weir_core::cluster::REGISTER, body);
        client.do_action(action).await.err().map(|e| e.to_string())
    });
    let refused = refused.expect("a worker of usize::MAX slots was registered");
    assert!(refused.contains("1 to 4096 slots"), "{refused}");
    let (_, overview) = cluster.rest("GET", "/v1/overview", "");
    assert_eq!(overview["slots_total"], 2, "{overview}");

    // --insecure-loopback keeps the open behaviour for those who ask.
    let open = Cluster::start_full(0, 1, None, &[], &["--insecure-loopback"]);
    assert!(open.token.is_none() || weir_flight::token_file::read(&open.url).unwrap().is_none());
    let (status, _) = common::rest_call(&open.url, None, "GET", "/v1/jobs", "");
    assert_eq!(status, 200);
}

#[test]
fn rows_per_second_is_the_tables_rate_at_any_parallelism() {
    // 200 rows at 100 rows/s take 2 s; with the rate once divided by the
    // parallelism while one subtask owned all rows, they took 8 s at p=4.
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("rate.sql");
    std::fs::write(
        &script,
        "SET 'parallelism.default' = '4';\n\
         CREATE TABLE t (n BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '200',\n\
           'rows-per-second' = '100', 'fields.n.kind' = 'sequence', 'fields.n.start' = '1',\n\
           'fields.n.end' = '200');\n\
         CREATE TABLE o (n BIGINT) WITH ('connector' = 'blackhole');\n\
         INSERT INTO o SELECT n FROM t;\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = std::process::Command::new(common::WEIR)
        .args(["run", script.to_str().unwrap()])
        .output()
        .unwrap();
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_millis(5000),
        "200 rows at 100 rows/s took {took:?}"
    );
}

/// A coordinator and a worker whose stdout reader has gone (`… | head -1`)
/// keep running: the lines they print about themselves are dropped, not a
/// panic on the closed pipe.
#[test]
fn a_closed_stdout_does_not_stop_a_coordinator_or_worker() {
    use std::process::{Command, Stdio};
    use std::time::Instant;
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (rest, rpc) = (free(), free());
    let mut procs = common::Processes::default();
    let start = |procs: &mut common::Processes, args: &[String]| {
        let mut child = Command::new(common::WEIR)
            .args(args)
            .env_remove("WEIR_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The reading end closes before anything is printed.
        drop(child.stdout.take());
        procs.0.push(child);
    };
    let alive = |procs: &mut common::Processes| {
        for p in &mut procs.0 {
            assert!(p.try_wait().unwrap().is_none(), "a process stopped");
        }
    };
    start(
        &mut procs,
        &[
            "coordinator".into(),
            "--rest".into(),
            format!("127.0.0.1:{rest}"),
            "--rpc".into(),
            format!("127.0.0.1:{rpc}"),
        ],
    );
    let url = format!("http://127.0.0.1:{rest}");
    // Up, with the token file it writes for this user's workers and clients.
    let deadline = Instant::now() + Duration::from_secs(20);
    let token = loop {
        let up = std::net::TcpStream::connect(("127.0.0.1", rest)).is_ok();
        if let Some(t) = weir_flight::token_file::read(&url)
            .ok()
            .flatten()
            .filter(|_| up)
        {
            break t.expose().to_string();
        }
        alive(&mut procs);
        assert!(Instant::now() < deadline, "the coordinator did not come up");
        std::thread::sleep(Duration::from_millis(50));
    };
    start(
        &mut procs,
        &[
            "worker".into(),
            "--coordinator".into(),
            format!("127.0.0.1:{rpc}"),
            "--slots".into(),
            "1".into(),
        ],
    );
    loop {
        let (_, workers) = common::rest_call(&url, Some(&token), "GET", "/v1/workers", "");
        if workers.as_array().is_some_and(|w| w.len() == 1) {
            break;
        }
        alive(&mut procs);
        assert!(
            Instant::now() < deadline,
            "the worker did not register: {workers}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    alive(&mut procs);
}
