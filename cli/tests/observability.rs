//! Live metrics of a running cluster job: the REST endpoints shaped like
//! Flink's, and Prometheus' `/metrics` scraped by a real Prometheus server.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use weir_core::spec::{AggregateSpec, SourceSpec};
use weir_core::time::{TumblingEventTimeWindows, WatermarkStrategy};
use weir_operators::connectors::{ColumnGen, GeneratorSpec};

mod common;
use common::{Cluster, Processes, rest_text};

/// An unbounded generator (2 subtasks, 20,000 rows/s) -> 1 s tumbling
/// counts per key -> blackhole, checkpointing every 300 ms into `dir`.
fn running_job(dir: &Path) -> weir_core::graph::JobGraph {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    env.configure(|c| {
        c.batch_size = 1024;
        c.checkpoint_interval = Some(Duration::from_millis(300));
        c.checkpoint_dir = Some(dir.display().to_string());
        c.watermark_interval = Duration::from_millis(50);
    });
    let generator = GeneratorSpec::new(None)
        .column("key", ColumnGen::Key { cardinality: 100 })
        .column(
            "ts",
            ColumnGen::EventTime {
                start_ms: 1_700_000_000_000,
                events_per_second: 20_000,
                max_out_of_orderness_ms: 100,
            },
        )
        .rate(20_000)
        .seed(3);
    env.from_source(
        SourceSpec::from(generator),
        WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_millis(100)),
        "events",
    )
    .unwrap()
    .key_by(&["key"])
    .unwrap()
    .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
    .aggregate(vec![AggregateSpec::count_star()])
    .unwrap()
    .sink_to(weir_operators::connectors::blackhole(), "out")
    .unwrap();
    env.job_graph("observed").unwrap()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Poll `f` until it gives something, for at most `within`.
fn eventually<T>(within: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn start_job(cluster: &Cluster, dir: &Path) -> String {
    let job = running_job(dir);
    let (status, reply) = cluster.rest("POST", "/v1/jobs", &job.to_json().unwrap());
    assert_eq!(status, 201, "{reply}");
    let id = reply["job_id"].as_str().unwrap().to_string();
    cluster.wait_for_status(&id, &["RUNNING"], Duration::from_secs(20));
    id
}

#[test]
fn a_running_jobs_metrics_checkpoints_and_plan_are_served_as_flink_serves_them() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(0, 2, None);
    // Each worker serves its own subtasks' metrics too.
    let ports: Vec<u16> = (0..2).map(|_| free_port()).collect();
    for p in &ports {
        cluster.add_worker_with(2, &["--metrics", &format!("127.0.0.1:{p}")]);
    }
    cluster.wait_for_workers(2);
    let id = start_job(&cluster, tmp.path());

    // The plan: the source chain and the window chain, the edge hashed.
    let (_, plan) = cluster.rest("GET", &format!("/v1/jobs/{id}/plan"), "");
    let nodes = plan["plan"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{plan:#}");
    assert!(
        nodes[1]["inputs"][0]["ship_strategy"]
            .as_str()
            .unwrap()
            .starts_with("HASH")
    );

    // Rates while it runs, summed over the source's subtasks.
    let rate = eventually(Duration::from_secs(20), "a non-zero source rate", || {
        let (_, m) = cluster.rest(
            "GET",
            &format!(
                "/v1/jobs/{id}/vertices/0/subtasks/metrics?get=numRecordsOutPerSecond,numRecordsOut"
            ),
            "",
        );
        let rate = m
            .as_array()?
            .iter()
            .find(|e| e["id"] == "numRecordsOutPerSecond")?["sum"]
            .as_f64()?;
        (rate > 0.0).then_some(rate)
    });
    // 20,000 rows/s per subtask are generated; rates are noisy, not zero.
    assert!(rate > 1_000.0, "{rate}");
    // Per subtask, by Flink's ids; unknown ids are left out.
    let (_, listed) = cluster.rest("GET", &format!("/v1/jobs/{id}/vertices/1/metrics"), "");
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["id"].as_str())
        .collect();
    for want in [
        "0.numRecordsIn",
        "1.busyTimeMsPerSecond",
        "0.currentInputWatermark",
    ] {
        assert!(ids.contains(&want), "{want} not in {ids:?}");
    }
    let (_, got) = cluster.rest(
        "GET",
        &format!("/v1/jobs/{id}/vertices/1/metrics?get=0.numRecordsIn,nonsense"),
        "",
    );
    assert_eq!(got.as_array().unwrap().len(), 1, "{got}");
    assert!(
        got[0]["value"].as_str().unwrap().parse::<u64>().unwrap() > 0,
        "{got}"
    );

    // Watermarks move: the window vertex has one.
    let (_, wm) = cluster.rest("GET", &format!("/v1/jobs/{id}/watermarks"), "");
    let window_wm = eventually(Duration::from_secs(10), "a window watermark", || {
        let (_, wm) = cluster.rest("GET", &format!("/v1/jobs/{id}/watermarks"), "");
        wm["vertices"][1]["watermark"].as_i64()
    });
    assert!(window_wm >= 1_700_000_000_000, "{wm:#}");

    // Checkpoints: two complete, with sizes per subtask and operator.
    let history = eventually(Duration::from_secs(20), "two checkpoints", || {
        let (_, c) = cluster.rest("GET", &format!("/v1/jobs/{id}/checkpoints"), "");
        (c["counts"]["completed"].as_u64()? >= 2).then_some(c)
    });
    let last = &history["latest"]["completed"];
    assert_eq!(last["status"], "COMPLETED", "{history:#}");
    assert_eq!(last["num_acknowledged_subtasks"], 4, "{history:#}");
    assert!(last["state_size"].as_u64().unwrap() > 0, "{history:#}");
    assert!(
        !last["operators"].as_object().unwrap().is_empty(),
        "{history:#}"
    );
    // The window's subtasks, fed by channels, measured their alignment.
    let aligned = last["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["vertex"] == 1 && s["alignment_duration_ms"].is_u64())
        .count();
    assert_eq!(aligned, 2, "{history:#}");
    let (_, job) = cluster.rest(
        "GET",
        &format!("/v1/jobs/{id}/metrics?get=numberOfCompletedCheckpoints,uptime,lastCheckpointSize,numRestarts"),
        "",
    );
    let value = |k: &str| -> f64 {
        job.as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == k)
            .unwrap()["value"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(value("numberOfCompletedCheckpoints") >= 2.0, "{job}");
    assert!(
        value("uptime") > 0.0 && value("lastCheckpointSize") > 0.0,
        "{job}"
    );
    assert_eq!(value("numRestarts"), 0.0, "{job}");

    // Prometheus text on the coordinator: job metrics and vertex totals.
    let (status, text) = rest_text(&cluster.url, cluster.token.as_deref(), "/metrics");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("# TYPE weir_records_in counter"), "{text}");
    assert!(
        text.contains(&format!(
            "weir_job_checkpoints_completed_total{{job_id=\"{id}\""
        )),
        "{text}"
    );
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    // Behind the token like the rest of the API.
    let (status, _) = rest_text(&cluster.url, None, "/metrics");
    assert_eq!(status, 401);

    // Per subtask and operator on the workers (the token a coordinator made
    // is every worker's too).
    let texts: Vec<String> = ports
        .iter()
        .map(|p| {
            let (status, text) = rest_text(
                &format!("http://127.0.0.1:{p}"),
                cluster.token.as_deref(),
                "/metrics",
            );
            assert_eq!(status, 200, "{text}");
            text
        })
        .collect();
    let all = texts.join("\n");
    for subtask in ["0", "1"] {
        assert!(
            all.contains(&format!(
                "vertex=\"Source: events\",subtask=\"{subtask}\"}}"
            )),
            "{all}"
        );
    }
    assert!(all.contains("weir_operator_records_in_total{"), "{all}");
    assert!(all.contains(",operator=\""), "{all}");

    let (status, _) = cluster.rest("POST", &format!("/v1/jobs/{id}/cancel"), "");
    assert_eq!(status, 202);
    cluster.wait_for_status(&id, &["CANCELED"], Duration::from_secs(20));
}

/// A Prometheus HTTP API query: the first result's value.
fn prometheus_query(addr: &str, query: &str) -> Option<f64> {
    let mut s = TcpStream::connect(addr).ok()?;
    let q: String = query
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    write!(
        s,
        "GET /api/v1/query?query={q} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let body = raw.split_once("\r\n\r\n")?.1;
    // The body may come in chunks; the JSON is the part between braces.
    let json = &body[body.find('{')?..=body.rfind('}')?];
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

#[test]
fn a_real_prometheus_server_scrapes_the_job_and_sees_its_input_rise() {
    let Some(prometheus) = std::env::var_os("WEIR_TEST_PROMETHEUS") else {
        panic!(
            "WEIR_TEST_PROMETHEUS must name a prometheus binary: run the tests with scripts/test.sh"
        );
    };
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(1, 2, Some("scrape-token"));
    let id = start_job(&cluster, &tmp.path().join("checkpoints"));
    let target = cluster.url.strip_prefix("http://").unwrap();
    let config = tmp.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: weir\n    authorization:\n      credentials: scrape-token\n\
             \x20   static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut procs = Processes::default();
    procs.0.push(
        Command::new(prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                tmp.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus"),
    );
    let series = format!("sum(weir_records_in_total{{job_id=\"{id}\"}})");
    let first = eventually(Duration::from_secs(30), "a first scraped value", || {
        prometheus_query(&addr, &series).filter(|v| *v > 0.0)
    });
    let later = eventually(Duration::from_secs(30), "a rising input count", || {
        prometheus_query(&addr, &series).filter(|v| *v > first)
    });
    eprintln!("Prometheus saw weir_records_in_total go from {first} to {later}");
    let rate = eventually(Duration::from_secs(30), "a positive input rate", || {
        prometheus_query(
            &addr,
            &format!("sum(rate(weir_records_in_total{{job_id=\"{id}\"}}[5s]))"),
        )
        .filter(|v| *v > 0.0)
    });
    eprintln!("and a rate of {rate:.0} rows/s");
    let up = prometheus_query(&addr, "up{job=\"weir\"}");
    assert_eq!(up, Some(1.0), "the scrape target is up");
}

#[test]
fn the_dashboard_shows_a_running_job_in_a_real_browser_and_cancels_it() {
    let Some(playwright) = std::env::var_os("WEIR_TEST_PLAYWRIGHT") else {
        panic!(
            "WEIR_TEST_PLAYWRIGHT must name the playwright-core package: run the tests with scripts/test.sh"
        );
    };
    let node = std::env::var_os("WEIR_TEST_NODE").unwrap_or_else(|| "node".into());
    let tmp = tempfile::tempdir().unwrap();
    // A coordinator that made its own token: the page must ask for it.
    let cluster = Cluster::start(2, 2, None);
    let id = start_job(&cluster, tmp.path());
    // Screenshots are kept as test artifacts under the target folder.
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
    std::fs::create_dir_all(&shots).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/browser/dashboard.mjs");
    let out = Command::new(node)
        .arg(script)
        .args([&cluster.url, cluster.token.as_deref().unwrap(), &id])
        .arg(&shots)
        .env("WEIR_TEST_PLAYWRIGHT", playwright)
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    eprintln!("dashboard: {report}; screenshots in {}", shots.display());
    assert_eq!(report["vertices"], 2, "{report}");
    assert_eq!(report["pageErrors"], serde_json::json!([]), "{report}");
    assert!(report["rateOut"].as_f64().unwrap() > 0.0, "{report}");
    assert!(report["checkpointRows"].as_u64().unwrap() >= 2, "{report}");
    // The button really cancelled it.
    let details = cluster.wait_for_status(&id, &["CANCELED"], Duration::from_secs(20));
    assert_eq!(details["status"], "CANCELED");
    for shot in ["login", "overview", "job-graph", "checkpoints", "canceled"] {
        assert!(shots.join(format!("{shot}.png")).exists(), "{shot}.png");
    }
}

#[test]
fn the_dashboards_sql_box_submits_a_script_as_a_job() {
    let cluster = Cluster::start(1, 2, None);
    // A mistake comes back with where it is.
    let (status, reply) = cluster.rest("POST", "/v1/sql", "SELEC 1;");
    assert_eq!(status, 400, "{reply}");
    assert!(
        reply["error"].as_str().unwrap().contains("line 1"),
        "{reply}"
    );
    let (status, reply) = cluster.rest(
        "POST",
        "/v1/sql",
        "CREATE TABLE src (k BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '1000');\n\
         CREATE TABLE out (k BIGINT) WITH ('connector' = 'blackhole');\n\
         INSERT INTO out SELECT k FROM src;",
    );
    assert_eq!(status, 201, "{reply}");
    let id = reply["job_id"].as_str().unwrap();
    let details = cluster.wait_for_status(id, &["FINISHED", "FAILED"], Duration::from_secs(30));
    assert_eq!(details["status"], "FINISHED", "{details:#}");
    // Its configuration is served as the dashboard shows it.
    let (_, config) = cluster.rest("GET", &format!("/v1/jobs/{id}/config"), "");
    assert!(
        config["execution-config"]["batch_size"].as_u64().unwrap() > 0,
        "{config}"
    );
}

/// `weir run` of `script` under a pseudo-terminal (`script(1)`), with
/// `args`: what the terminal showed.
fn run_on_a_terminal(script: &Path, args: &str) -> String {
    let command = format!("{} run {} {args}", common::WEIR, script.display());
    let out = Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .env("COLUMNS", "120")
        .env_remove("WEIR_TOKEN")
        .output()
        .expect("run script(1)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}");
    text
}

#[test]
fn weir_run_shows_progress_on_a_terminal_and_nothing_otherwise() {
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("job.sql");
    // About three seconds of rows, so the display is drawn a few times.
    std::fs::write(
        &script,
        "CREATE TABLE src (k BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '4000', \
         'number-of-rows' = '12000');\n\
         CREATE TABLE out (k BIGINT) WITH ('connector' = 'blackhole');\n\
         INSERT INTO out SELECT k FROM src;\n",
    )
    .unwrap();
    let shown = run_on_a_terminal(&script, "");
    assert!(shown.contains("Source: src"), "{shown}");
    assert!(
        shown.contains("rows read") && shown.contains("rows/s"),
        "{shown}"
    );
    assert!(
        shown.contains("checkpoint") && shown.contains("watermark"),
        "{shown}"
    );
    assert!(
        shown.contains("job ") && shown.contains(" finished"),
        "{shown}"
    );
    // Files: how many of them are done.
    let files = tmp.path().join("files");
    std::fs::create_dir_all(&files).unwrap();
    for f in 0..6 {
        let rows: String = (0..2000).map(|i| format!("{}\n", f * 2000 + i)).collect();
        std::fs::write(files.join(format!("part-{f}.csv")), rows).unwrap();
    }
    let read_files = tmp.path().join("files.sql");
    std::fs::write(
        &read_files,
        format!(
            "CREATE TABLE src (k BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', \
             'format' = 'csv');\n\
             CREATE TABLE out (k BIGINT) WITH ('connector' = 'blackhole', 'rows-per-second' = '4000');\n\
             INSERT INTO out SELECT k FROM src;\n",
            files.display()
        ),
    )
    .unwrap();
    let shown = run_on_a_terminal(&read_files, "");
    assert!(shown.contains(" of 6 splits"), "{shown}");
    // --quiet, and a run whose stderr is not a terminal, draw nothing.
    let quiet = run_on_a_terminal(&script, "--quiet");
    assert!(!quiet.contains("rows read"), "{quiet}");
    let piped = Command::new(common::WEIR)
        .args(["run", script.to_str().unwrap()])
        .env_remove("WEIR_TOKEN")
        .output()
        .unwrap();
    assert!(piped.status.success());
    assert!(!String::from_utf8_lossy(&piped.stderr).contains("rows read"));
}
