//! `PARTITIONED BY` file sinks: Nexmark q10 with its text unchanged (Hive
//! folders `dt=…/hm=…`, partition columns out of the files, `_SUCCESS` in
//! each complete partition), and partitioned output exactly once when a
//! checkpointed job fails and restarts.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::WEIR;

fn nexmark_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sql/nexmark")
}

/// Files (not hidden) under `dir`, recursively, by relative folder.
fn files(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.parent().unwrap().strip_prefix(dir).unwrap();
                out.push((rel.display().to_string(), p));
            }
        }
    }
    out.sort();
    out
}

fn run(script: &str, dir: &Path) {
    let file = dir.join("job.sql");
    std::fs::write(&file, script).unwrap();
    let o = Command::new(WEIR)
        .args(["run", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn nexmark_q10_writes_hive_partitions_with_success_files() {
    let tmp = tempfile::tempdir().unwrap();
    let ddl = std::fs::read_to_string(nexmark_dir().join("ddl.sql"))
        .unwrap()
        .replace("${TPS}", "100")
        .replace("${EVENTS_NUM}", "20000");
    let q10 = std::fs::read_to_string(nexmark_dir().join("q10.sql"))
        .unwrap()
        .replace("${OUTPUT_DIR}", &tmp.path().display().to_string());
    run(
        &format!("SET 'parallelism.default' = '2';\n{ddl}\n{q10}"),
        tmp.path(),
    );
    let out = tmp.path().join("q10");
    let all = files(&out);
    let folders: std::collections::BTreeSet<&str> = all.iter().map(|(f, _)| f.as_str()).collect();
    // 20,000 events at 100 a second: 200 s of event time, four minutes.
    assert!(folders.len() >= 4, "{folders:?}");
    let mut rows = 0;
    for folder in &folders {
        let (dt, hm) = folder.split_once('/').unwrap();
        assert!(dt.starts_with("dt=") && hm.starts_with("hm="), "{folder}");
        // Flink escapes ':' in a folder name.
        assert!(hm.contains("%3A"), "{hm}");
        let in_folder: Vec<&PathBuf> = all
            .iter()
            .filter(|(f, _)| f == folder)
            .map(|(_, p)| p)
            .collect();
        assert!(
            in_folder.iter().any(|p| p.ends_with("_SUCCESS")),
            "{folder}: no _SUCCESS in {in_folder:?}"
        );
        for p in in_folder
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        {
            let text = std::fs::read_to_string(p).unwrap();
            for line in text.lines() {
                // auction, bidder, price, dateTime, extra: no dt, hm.
                assert_eq!(line.split(',').count(), 5, "{line}");
                rows += 1;
            }
        }
    }
    // Nexmark's 1:3:46 mix: 46 of every 50 events are bids.
    assert_eq!(rows, 20_000 / 50 * 46);
}

#[test]
fn a_partitioned_json_sink_on_a_cluster_survives_kill_9_exactly_once() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let objects = kill_9_under_a_partitioned_sink(tmp.path(), &out.display().to_string());
    assert_eq!(objects.len(), files(&out).len());
}

/// The same into an S3-compatible server: objects uploaded under hidden
/// names, renamed when their checkpoint completes.
#[test]
fn a_partitioned_json_sink_into_s3_survives_kill_9_exactly_once() {
    let _s3 = weir_tests::S3Server::start("sink");
    let tmp = tempfile::tempdir().unwrap();
    kill_9_under_a_partitioned_sink(tmp.path(), "s3://sink/bids");
}

/// The same into Azure Blob Storage (Azurite, started by the test).
#[test]
fn a_partitioned_json_sink_into_azure_blob_storage_survives_kill_9_exactly_once() {
    let _az = weir_tests::BlobServer::start("sink");
    let tmp = tempfile::tempdir().unwrap();
    kill_9_under_a_partitioned_sink(tmp.path(), "az://sink/bids");
}

/// Every object under `url`, hidden ones included: (folder, name, bytes).
fn objects(url: &str) -> Vec<(String, String, Vec<u8>)> {
    if !weir_operators::storage::is_url(url) {
        return files(Path::new(url))
            .into_iter()
            .map(|(f, p)| {
                let name = p.file_name().unwrap().to_string_lossy().to_string();
                (f, name, std::fs::read(&p).unwrap())
            })
            .collect();
    }
    use futures::StreamExt;
    use object_store::ObjectStoreExt;
    let (store, base) = weir_operators::storage::store_for(url).unwrap();
    let keys: Vec<_> = weir_operators::storage::block_io({
        let (store, base) = (std::sync::Arc::clone(&store), base.clone());
        async move {
            store
                .list(Some(&base))
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .map(|m| m.unwrap().location)
                .collect::<Vec<_>>()
        }
    })
    .unwrap();
    keys.into_iter()
        .map(|key| {
            let rel = key.as_ref()[base.as_ref().len()..]
                .trim_start_matches('/')
                .to_string();
            let (folder, name) = rel.rsplit_once('/').unwrap_or(("", &rel));
            let store = std::sync::Arc::clone(&store);
            let k = key.clone();
            let bytes = weir_operators::storage::block_io(async move {
                store.get(&k).await.unwrap().bytes().await.unwrap()
            })
            .unwrap();
            (folder.to_string(), name.to_string(), bytes.to_vec())
        })
        .collect()
}

/// A checkpointed job writes 40,000 rows into four partitions of `out` on
/// two workers; one is killed with -9 after two checkpoints. The published
/// files hold every row once, none is left in progress, and every
/// partition has its `_SUCCESS`. Returns the objects.
fn kill_9_under_a_partitioned_sink(tmp: &Path, out: &str) -> Vec<(String, String, Vec<u8>)> {
    use std::time::{Duration, Instant};
    let mut cluster = common::Cluster::start(2, 2, None);
    const ROWS: i64 = 40_000;
    let script = format!(
        "SET 'parallelism.default' = '2';
SET 'execution.checkpointing.interval' = '300 ms';
SET 'execution.checkpointing.dir' = '{chk}';
CREATE TABLE src (n BIGINT, k INT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '8000', 'number-of-rows' = '{ROWS}',
  'fields.n.kind' = 'sequence', 'fields.n.start' = '0', 'fields.n.end' = '{last}',
  'fields.k.min' = '0', 'fields.k.max' = '3');
CREATE TABLE dst (n BIGINT, bucket STRING) PARTITIONED BY (bucket) WITH (
  'connector' = 'filesystem', 'path' = '{out}', 'format' = 'json',
  'sink.partition-commit.policy.kind' = 'success-file');
INSERT INTO dst SELECT n, CONCAT('b', CAST(k AS STRING)) FROM src;",
        chk = tmp.join("chk").display(),
        last = ROWS - 1,
    );
    let file = tmp.join("job.sql");
    std::fs::write(&file, &script).unwrap();
    let o = cluster.cli(&["submit", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let id = String::from_utf8(o.stdout).unwrap().trim().to_string();
    // Kill -9 a worker once two checkpoints completed and files were
    // published into the partitions.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, d) = cluster.rest("GET", &format!("/v1/jobs/{id}"), "");
        if d["checkpoints"].as_array().map_or(0, Vec::len) >= 2 {
            break;
        }
        assert!(
            d["status"] == "RUNNING" || d["status"] == "CREATED",
            "{d:#}"
        );
        assert!(Instant::now() < deadline, "no checkpoints: {d:#}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let worker = &mut cluster.procs.0[2];
    worker.kill().unwrap();
    worker.wait().unwrap();
    let d = cluster.wait_for_status(&id, &["FINISHED", "FAILED"], Duration::from_secs(90));
    assert_eq!(d["status"], "FINISHED", "{d:#}");
    assert!(d["restarts"].as_u64().unwrap() >= 1, "{d:#}");

    let mut seen = vec![];
    let mut marked = 0;
    let all = objects(out);
    for (folder, name, bytes) in &all {
        assert!(folder.starts_with("bucket=b"), "{folder}");
        if name == "_SUCCESS" {
            marked += 1;
        }
        assert!(!name.starts_with('.'), "left in progress: {folder}/{name}");
        if name.ends_with(".json") {
            for line in String::from_utf8(bytes.clone()).unwrap().lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                assert!(v.get("bucket").is_none(), "{line}");
                seen.push(v["n"].as_i64().unwrap());
            }
        }
    }
    seen.sort_unstable();
    assert_eq!(
        seen.len() as i64,
        ROWS,
        "rows written more or less than once"
    );
    assert_eq!(seen, (0..ROWS).collect::<Vec<i64>>());
    assert_eq!(marked, 4, "one _SUCCESS per bucket");
    all
}

/// Rows of `script`'s query, run in this process, with its EXPLAIN text.
fn query_rows(script: &str) -> (Vec<String>, String) {
    use weir_core::spec::{CollectHandle, SinkSpec};
    let mut s = weir_sql::SqlSession::new();
    let explain = s
        .execute_script(script)
        .unwrap()
        .into_iter()
        .filter_map(|r| match r {
            weir_sql::StatementResult::Explain(t) => Some(t),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    let rows = CollectHandle::new();
    let sink = rows.clone();
    s.build_with(&env, &move || SinkSpec::from(sink.clone()))
        .unwrap();
    env.execute("read").unwrap();
    let mut out = weir_tests::sorted_rows(&rows.batches());
    out.sort();
    (out, explain)
}

#[test]
fn a_partitioned_table_reads_back_with_its_partition_columns_and_prunes_folders() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("t");
    let table = |format: &str| {
        format!(
            "CREATE TABLE t (n BIGINT, bucket STRING, day INT) PARTITIONED BY (day, bucket) WITH (
  'connector' = 'filesystem', 'path' = '{}/{format}', 'format' = '{format}');",
            out.display()
        )
    };
    for format in ["json", "parquet", "csv"] {
        run(
            &format!(
                "{}
CREATE TABLE src (n BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '100',
  'rows-per-second' = 'unlimited', 'fields.n.kind' = 'sequence', 'fields.n.start' = '0',
  'fields.n.end' = '99');
INSERT INTO t SELECT n, CONCAT('b/', CAST(n % 4 AS STRING)), CAST(n % 2 AS INT) FROM src;",
                table(format)
            ),
            tmp.path(),
        );
        let (all, _) = query_rows(&format!("{}\nSELECT n, bucket, day FROM t;", table(format)));
        assert_eq!(all.len(), 100, "{format}");
        assert!(all.contains(&"7|b/3|1".to_string()), "{format}: {all:?}");
        let (some, explain) = query_rows(&format!(
            "{}\nEXPLAIN SELECT n FROM t WHERE bucket = 'b/1' AND day = 1;\n\
             SELECT n FROM t WHERE bucket = 'b/1' AND day = 1;",
            table(format)
        ));
        assert_eq!(some.len(), 25, "{format}: {some:?}");
        assert!(
            explain.contains("[1 of 4 partitions]"),
            "{format}: {explain}"
        );
    }
}
