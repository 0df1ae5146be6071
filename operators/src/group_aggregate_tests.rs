use super::*;
use arrow::array::Int64Array;
use arrow::datatypes::DataType;
use weir_core::config::WeirConfig;
use weir_core::keys::KeyGroupRange;
use weir_core::spec::AggregateSpec;

fn input() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
        weir_core::spec::row_kind_field(),
    ]))
}

fn output() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("n", DataType::Int64, false),
        Field::new("s", DataType::Int64, true),
        weir_core::spec::row_kind_field(),
    ]))
}

/// `COUNT(*) AS n, SUM(v) AS s … GROUP BY k` over a changelog.
fn operator(config: WeirConfig) -> GroupAggregateOperator {
    let spec = GroupAggregateSpec {
        keys: vec!["k".into()],
        aggregates: vec![
            AggregateSpec::count_star().alias("n"),
            AggregateSpec::sum("v").alias("s"),
        ],
        input_schema: input(),
        changelog: true,
        retractions: true,
        upsert: false,
    };
    let ctx = OperatorContext {
        task_name: "agg".into(),
        subtask: 0,
        parallelism: 1,
        key_groups: KeyGroupRange::for_subtask(0, 1, 128),
        memory: crate::memory::StateMemory::new(&config.state),
        config,
        connectors: Default::default(),
    };
    GroupAggregateOperator::try_new("agg".into(), &spec, output(), &ctx).unwrap()
}

fn rows(keys: impl Iterator<Item = i64>, kind: RowKind) -> RecordBatch {
    let keys: Vec<i64> = keys.collect();
    let n = keys.len();
    RecordBatch::try_new(
        input(),
        vec![
            Arc::new(Int64Array::from(keys.clone())),
            Arc::new(Int64Array::from(keys)),
            weir_core::changelog::row_kind_repeat(kind, n),
        ],
    )
    .unwrap()
}

/// Output rows as `kind[k, n, s]`.
fn lines(out: &[RecordBatch]) -> Vec<String> {
    let mut v = vec![];
    for b in out {
        let kinds = weir_core::changelog::row_kinds(b).unwrap();
        for r in 0..b.num_rows() {
            let c = |i: usize| arrow::util::display::array_value_to_string(b.column(i), r).unwrap();
            let kind = RowKind::from_i8(kinds.value(r)).unwrap();
            v.push(format!("{kind}[{}, {}, {}]", c(0), c(1), c(2)));
        }
    }
    v
}

#[test]
fn retracted_keys_leave_the_state_under_steady_churn() {
    let mut op = operator(WeirConfig::default());
    let mut biggest = 0;
    for round in 0..40 {
        let keys = || (round * 1000..(round + 1) * 1000).map(|k| k as i64);
        let mut out = vec![];
        op.process_batch(rows(keys(), RowKind::Insert), &mut out)
            .unwrap();
        op.process_batch(rows(keys(), RowKind::Delete), &mut out)
            .unwrap();
        let lines = lines(&out);
        assert_eq!(lines.len(), 2000);
        assert!(lines[0].starts_with("+I["), "{}", lines[0]);
        assert!(lines[1999].starts_with("-D["), "{}", lines[1999]);
        biggest = biggest.max(op.index.len());
    }
    // 40 000 keys came and went; the index never held more than the
    // compaction threshold and a round's keys.
    assert!(biggest <= 4096 + 2000, "key index grew to {biggest}");
    assert_eq!(op.live, 0);
    let tables = op.snapshot_state(1).unwrap();
    assert_eq!(tables[0].batch.num_rows(), 0);
    // A key back after compaction starts afresh.
    let mut out = vec![];
    op.process_batch(rows([7, 7].into_iter(), RowKind::Insert), &mut out)
        .unwrap();
    assert_eq!(lines(&out), ["+I[7, 2, 14]"]);
}

#[test]
fn keys_past_the_state_ttl_are_forgotten_without_output() {
    let mut config = WeirConfig::default();
    config.state.ttl = Some(std::time::Duration::from_millis(1000));
    let mut op = operator(config);
    let mut out = vec![];
    op.accumulate(&rows([1, 2].into_iter(), RowKind::Insert), 10_000, &mut out)
        .unwrap();
    op.last_sweep = 10_000;
    // Key 2 is written again within the TTL, key 1 is not.
    op.accumulate(&rows([2].into_iter(), RowKind::Insert), 10_600, &mut out)
        .unwrap();
    op.sweep(11_300).unwrap();
    assert_eq!(op.live, 1);
    op.accumulate(&rows([1, 2].into_iter(), RowKind::Insert), 11_400, &mut out)
        .unwrap();
    assert_eq!(
        lines(&out),
        [
            "+I[1, 1, 1]",
            "+I[2, 1, 2]",
            "-U[2, 1, 2]",
            "+U[2, 2, 4]",
            "-U[2, 2, 4]",
            "+U[2, 3, 6]",
            // Key 1 expired: it starts again.
            "+I[1, 1, 1]",
        ]
    );
    let tables = op.snapshot_state(1).unwrap();
    assert_eq!(tables[0].batch.num_rows(), 2);
}

#[test]
fn in_memory_state_past_the_budget_fails_the_task_clearly() {
    let mut config = WeirConfig::default();
    config.state.managed_memory = Some(64 << 10);
    let mut op = operator(config);
    let mut out = vec![];
    let mut failure = None;
    for round in 0..100 {
        let keys = (round * 1000..(round + 1) * 1000).map(|k| k as i64);
        if let Err(e) = op.process_batch(rows(keys, RowKind::Insert), &mut out) {
            failure = Some(e.to_string());
            break;
        }
    }
    let failure = failure.expect("100 000 keys fit in 64 KiB");
    assert!(
        failure.contains("agg: state exceeds 65536 bytes of managed memory"),
        "{failure}"
    );
    assert!(
        failure.contains("'state.backend.type' = 'disk'"),
        "{failure}"
    );
}
