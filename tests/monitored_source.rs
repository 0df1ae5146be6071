//! `'source.monitor-interval'`: a filesystem source that stays open and
//! reads each new file of its folder once — including after a restart
//! from a checkpoint, where files already read are not read again and the
//! one being read continues after its last emitted row.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::AsArray;
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use weir_core::spec::{CollectHandle, SinkSpec};
use weir_core::time::WatermarkStrategy;

/// Publish `rows` as a new CSV file, atomically (hidden, then renamed).
fn publish(dir: &Path, name: &str, rows: std::ops::Range<i64>) {
    let text: String = rows.map(|n| format!("{n}\n")).collect();
    let hidden = dir.join(format!(".{name}"));
    std::fs::write(&hidden, text).unwrap();
    std::fs::rename(&hidden, dir.join(name)).unwrap();
}

fn numbers(rows: &CollectHandle) -> Vec<i64> {
    let mut got: Vec<i64> = rows
        .batches()
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    got.sort_unstable();
    got
}

fn wait_for(rows: &CollectHandle, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while rows.num_rows() < n {
        assert!(Instant::now() < deadline, "{} of {n} rows", rows.num_rows());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn new_files_are_picked_up_and_each_is_read_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("in");
    std::fs::create_dir_all(&dir).unwrap();
    publish(&dir, "a.csv", 0..1000);
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    env.configure(|c| {
        c.checkpoint_interval = Some(Duration::from_millis(50));
        c.checkpoint_dir = Some(tmp.path().join("chk").display().to_string());
    });
    let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
    let spec = env
        .connector_source(
            "filesystem",
            [
                ("path", dir.display().to_string()),
                ("format", "csv".into()),
                ("source.monitor-interval", "20 ms".into()),
            ],
            Some(schema),
            "watched",
        )
        .unwrap();
    assert!(!spec.is_bounded());
    let rows = CollectHandle::new();
    env.from_source(spec, WatermarkStrategy::no_watermarks(), "watched")
        .unwrap()
        .sink_to(SinkSpec::from(rows.clone()), "rows")
        .unwrap();
    let job = env.execute_async("watch").unwrap();
    wait_for(&rows, 1000);
    publish(&dir, "b.csv", 1000..2500);
    publish(&dir, "c.csv", 2500..3000);
    wait_for(&rows, 3000);
    // Time for another listing or two: nothing is read twice.
    std::thread::sleep(Duration::from_millis(200));
    job.cancel();
    let _ = job.wait();
    assert_eq!(numbers(&rows), (0..3000).collect::<Vec<i64>>());
}
