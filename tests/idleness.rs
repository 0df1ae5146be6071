//! An idle source partition stops holding back the watermark after the
//! idleness timeout; without idleness, windows wait for it.

use std::time::{Duration, Instant};

use weir_core::WeirError;
use weir_core::graph::JobClient;
use weir_core::spec::{AggregateSpec, CollectHandle, MemorySourceSpec, SinkSpec, SourceSpec};
use weir_core::time::{TumblingEventTimeWindows, WatermarkStrategy};
use weir_tests::{event_batch, event_schema};

/// Two source subtasks over one batch: subtask 0 replays it, subtask 1 has
/// nothing, and both stay open like quiet queue partitions.
fn start(idleness: Option<Duration>) -> (Box<dyn JobClient>, CollectHandle) {
    let env = weir_worker::local_environment().unwrap();
    env.configure(|c| c.watermark_interval = Duration::ZERO);
    let events: Vec<(i64, i64, i64)> = (0..3000).step_by(10).map(|t| (t % 3, 1, t)).collect();
    let source = SourceSpec::from(
        MemorySourceSpec::new(event_schema(), vec![event_batch(&events)]).unbounded(),
    );
    let mut strategy = WatermarkStrategy::for_monotonous_timestamps("ts");
    if let Some(timeout) = idleness {
        strategy = strategy.with_idleness(timeout);
    }
    let out = CollectHandle::new();
    env.from_source(source, strategy, "quiet")
        .unwrap()
        .set_parallelism(2)
        .unwrap()
        .key_by(&["key"])
        .unwrap()
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
        .aggregate(vec![AggregateSpec::count_star()])
        .unwrap()
        .sink_to(SinkSpec::from(out.clone()), "out")
        .unwrap();
    (env.execute_async("idleness").unwrap(), out)
}

#[test]
fn idle_partition_is_excluded_after_the_timeout() {
    let (job, out) = start(Some(Duration::from_millis(50)));
    let deadline = Instant::now() + Duration::from_secs(20);
    // Watermark 2998 fires [0, 1000) and [1000, 2000) for 3 keys.
    while out.num_rows() < 6 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        out.num_rows(),
        6,
        "windows fired despite the idle partition"
    );
    assert!(!job.is_finished());
    job.cancel();
    assert!(matches!(job.wait(), Err(WeirError::Cancelled(_))));
}

#[test]
fn without_idleness_windows_wait_for_the_quiet_partition() {
    let (job, out) = start(None);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(
        out.num_rows(),
        0,
        "no window may fire while a partition holds the watermark"
    );
    job.cancel();
    assert!(matches!(job.wait(), Err(WeirError::Cancelled(_))));
}
