//! The fraud detector raises exactly the expected alerts, the same in
//! streaming and batch mode and at any parallelism.

use fraud_detection::{
    WINDOW_MS, build_job, generated_transactions, transaction_schema, transactions,
};
use weir_core::config::RuntimeMode;
use weir_core::spec::{CollectHandle, MemorySourceSpec, SinkSpec, SourceSpec};

fn alerts(source: SourceSpec, parallelism: usize, mode: RuntimeMode) -> Vec<String> {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(parallelism).set_runtime_mode(mode);
    let out = CollectHandle::new();
    build_job(&env, source, SinkSpec::from(out.clone())).unwrap();
    env.execute("fraud").unwrap();
    weir_tests::sorted_rows(&out.batches())
}

#[test]
fn small_then_large_within_a_minute_alerts() {
    let batches = vec![
        transactions(&[
            (1, 0.5, "fuel", 0),
            (2, 0.9, "fuel", 1_000),
            (3, 700.0, "games", 2_000),
        ]),
        transactions(&[
            (1, 20.0, "books", 10_000),
            (1, 800.0, "travel", 30_000),
            // Account 2: large but more than a minute after its small one.
            (2, 900.0, "travel", 1_000 + WINDOW_MS + 1),
            // Account 3: large before any small one, then small, then large.
            (3, 0.1, "grocer", 40_000),
            (3, 501.0, "travel", 40_000 + WINDOW_MS),
        ]),
    ];
    for (p, mode) in [(1, RuntimeMode::Streaming), (2, RuntimeMode::Batch)] {
        let source = SourceSpec::from(MemorySourceSpec::new(transaction_schema(), batches.clone()));
        let rows = alerts(source, p, mode);
        assert_eq!(rows.len(), 2, "{rows:#?}");
        // Account 1: merchants since the small one are fuel and books.
        assert_eq!(rows[0], "1|1970-01-01T00:00:00|1970-01-01T00:00:30|800.0|2");
        assert_eq!(rows[1], "3|1970-01-01T00:00:40|1970-01-01T00:01:40|501.0|1");
    }
}

#[test]
fn generated_run_is_the_same_at_any_parallelism_and_mode() {
    let reference = alerts(
        generated_transactions(100_000, 50).into(),
        1,
        RuntimeMode::Streaming,
    );
    assert!(
        !reference.is_empty(),
        "the generator produces suspicious accounts"
    );
    let same = |p, mode| alerts(generated_transactions(100_000, 50).into(), p, mode) == reference;
    assert!(same(3, RuntimeMode::Streaming), "parallelism 3 differs");
    assert!(same(2, RuntimeMode::Batch), "batch mode differs");
}

#[test]
fn checkpoints_snapshot_the_detector_state() {
    let source = || SourceSpec::from(generated_transactions(40_000, 50).rate(40_000));
    let reference = alerts(source(), 2, RuntimeMode::Streaming);
    let tmp = tempfile::tempdir().unwrap();
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    env.configure(|c| {
        c.checkpoint_interval = Some(std::time::Duration::from_millis(100));
        c.checkpoint_dir = Some(tmp.path().display().to_string());
        c.checkpoint_tolerable_failures = Some(0);
    });
    let out = CollectHandle::new();
    build_job(&env, source(), SinkSpec::from(out.clone())).unwrap();
    let result = env.execute("fraud").unwrap();
    assert!(
        result.checkpoints.len() >= 2 && result.checkpoints_declined.is_empty(),
        "completed {:?}, declined {:?}",
        result.checkpoints,
        result.checkpoints_declined
    );
    assert_eq!(weir_tests::sorted_rows(&out.batches()), reference);
}
