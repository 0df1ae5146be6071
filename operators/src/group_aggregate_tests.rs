use super::*;
use arrow::array::Int64Array;
use arrow::datatypes::DataType;
use weir_core::config::WeirConfig;
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
        phase: Default::default(),
    };
    GroupAggregateOperator::try_new("agg".into(), &spec, output(), &context(config)).unwrap()
}

/// One subtask of one.
fn context(config: WeirConfig) -> OperatorContext {
    OperatorContext::single("agg", config)
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

/// The rows a changelog leaves, by key: `k → (n, s)`.
fn apply(table: &mut std::collections::BTreeMap<String, String>, out: &[RecordBatch]) {
    for line in lines(out) {
        let (kind, rest) = line.split_at(2);
        let rest = &rest[1..rest.len() - 1];
        let (k, values) = rest.split_once(", ").unwrap();
        match kind {
            "+I" | "+U" => {
                table.insert(k.to_string(), values.to_string());
            }
            _ => {
                assert_eq!(
                    table.remove(k).as_deref(),
                    Some(values),
                    "{line} retracts what was sent"
                );
            }
        }
    }
}

/// 200 batches of 1000 rows over 30 000 keys, some retracted.
fn churn_input() -> Vec<RecordBatch> {
    let mut x: u64 = 42;
    let mut sent: Vec<i64> = vec![];
    (0..200)
        .map(|b| {
            let mut keys = vec![];
            let mut kinds = vec![];
            for _ in 0..1000 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                if b % 5 == 4 && !sent.is_empty() {
                    // Retract a row sent before.
                    keys.push(sent.swap_remove((x >> 33) as usize % sent.len()));
                    kinds.push(RowKind::Delete);
                } else {
                    let k = ((x >> 33) % 30_000) as i64;
                    sent.push(k);
                    keys.push(k);
                    kinds.push(RowKind::Insert);
                }
            }
            RecordBatch::try_new(
                input(),
                vec![
                    Arc::new(Int64Array::from(keys.clone())),
                    Arc::new(Int64Array::from(keys)),
                    weir_core::changelog::row_kind_array(kinds),
                ],
            )
            .unwrap()
        })
        .collect()
}

fn disk_config(dir: &std::path::Path) -> WeirConfig {
    let mut config = WeirConfig::default();
    config.state.backend = weir_core::state_config::StateBackend::Disk;
    config.state.managed_memory = Some(256 << 10);
    config.state.local_dir = Some(dir.to_path_buf());
    config
}

fn spilling(config: WeirConfig) -> crate::spill::SpillingKeyed {
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
        phase: Default::default(),
    };
    let ctx = OperatorContext::single("agg (1/1)", config);
    let mut inner = ctx.clone();
    inner.memory = crate::memory::StateMemory::default();
    let make: crate::spill::MakeOperator = Box::new(move || {
        Ok(Box::new(GroupAggregateOperator::try_new(
            "agg".into(),
            &spec,
            output(),
            &inner,
        )?))
    });
    crate::spill::SpillingKeyed::try_new("agg".into(), make, vec![vec![0]], &ctx).unwrap()
}

fn counter(op: &dyn Operator, name: &str) -> u64 {
    op.metrics()
        .into_iter()
        .find(|(k, _)| k == name)
        .map_or(0, |(_, v)| v)
}

#[test]
fn the_disk_backend_spills_past_its_budget_and_ends_with_the_same_rows() {
    let input = churn_input();
    let mut expected = std::collections::BTreeMap::new();
    let mut memory = operator(WeirConfig::default());
    for b in &input {
        let mut out = vec![];
        memory.process_batch(b.clone(), &mut out).unwrap();
        apply(&mut expected, &out);
    }
    let dir = tempfile::tempdir().unwrap();
    let mut disk = spilling(disk_config(dir.path()));
    let mut got = std::collections::BTreeMap::new();
    let mut most = 0;
    for b in &input {
        let mut out = vec![];
        disk.process_batch(b.clone(), &mut out).unwrap();
        apply(&mut got, &out);
        most = most.max(counter(&disk, "state_bytes"));
    }
    let mut out = vec![];
    disk.finish(&mut out).unwrap();
    apply(&mut got, &out);
    assert_eq!(got, expected);
    let in_memory = memory.state_size() as u64;
    assert!(
        in_memory > 4 * (256 << 10),
        "the state ({in_memory} bytes) is 4× the budget"
    );
    assert!(counter(&disk, "partitions_spilled") > 10);
    assert!(counter(&disk, "partitions_loaded") > 10);
    assert!(
        most <= 2 * (256 << 10),
        "held {most} bytes in memory under a 256 KiB budget"
    );
    // The task's folder goes with the operator.
    drop(disk);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_disk_snapshot_restores_into_either_backend() {
    let input = churn_input();
    let mut expected = std::collections::BTreeMap::new();
    let mut memory = operator(WeirConfig::default());
    for b in &input {
        let mut out = vec![];
        memory.process_batch(b.clone(), &mut out).unwrap();
        apply(&mut expected, &out);
    }
    let dir = tempfile::tempdir().unwrap();
    let mut disk = spilling(disk_config(dir.path()));
    let mut before = std::collections::BTreeMap::new();
    for b in &input[..120] {
        let mut out = vec![];
        disk.process_batch(b.clone(), &mut out).unwrap();
        apply(&mut before, &out);
    }
    let tables = disk.snapshot_state(1).unwrap();
    assert!(
        tables.iter().any(|t| t.name == "pending"),
        "rows wait at the snapshot"
    );
    drop(disk);
    // Into the disk backend again, and into the in-memory one.
    let mut again = spilling(disk_config(dir.path()));
    again.restore_state(tables.clone()).unwrap();
    let mut in_memory = operator(WeirConfig::default());
    in_memory.restore_state(tables).unwrap();
    let runs: [&mut dyn Operator; 2] = [&mut again, &mut in_memory];
    for op in runs {
        let mut got = before.clone();
        for b in &input[120..] {
            let mut out = vec![];
            op.process_batch(b.clone(), &mut out).unwrap();
            apply(&mut got, &out);
        }
        let mut out = vec![];
        op.finish(&mut out).unwrap();
        apply(&mut got, &out);
        assert_eq!(got, expected, "after a restore into {}", op.name());
    }
}

/// `COUNT(DISTINCT v), COUNT(*), COUNT(DISTINCT w) … GROUP BY k` over an
/// insert-only input.
fn distinct_operator() -> GroupAggregateOperator {
    let input = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
        Field::new("w", DataType::Utf8, true),
    ]));
    let spec = GroupAggregateSpec {
        keys: vec!["k".into()],
        aggregates: vec![
            AggregateSpec::count_distinct("v").alias("dv"),
            AggregateSpec::count_star().alias("n"),
            AggregateSpec::count_distinct("w").alias("dw"),
        ],
        input_schema: input,
        changelog: true,
        retractions: false,
        upsert: false,
        phase: Default::default(),
    };
    let out = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("dv", DataType::Int64, false),
        Field::new("n", DataType::Int64, false),
        Field::new("dw", DataType::Int64, false),
        weir_core::spec::row_kind_field(),
    ]));
    GroupAggregateOperator::try_new("agg".into(), &spec, out, &context(WeirConfig::default()))
        .unwrap()
}

#[test]
fn distinct_counts_are_kept_incrementally_and_snapshot_as_before() {
    let batch = |round: i64| {
        let n = 500;
        let k: Vec<i64> = (0..n).map(|i| (i * 7 + round) % 5).collect();
        let v: Vec<Option<i64>> = (0..n)
            .map(|i| (i % 11 != 0).then_some((i * 13 + round * 17) % 97))
            .collect();
        let w: Vec<Option<String>> = (0..n)
            .map(|i| (i % 7 != 0).then(|| format!("s{}", (i * round) % 31)))
            .collect();
        RecordBatch::try_new(
            Arc::clone(&distinct_operator().input_schema),
            vec![
                Arc::new(Int64Array::from(k)),
                Arc::new(Int64Array::from(v)),
                Arc::new(arrow::array::StringArray::from(w)),
            ],
        )
        .unwrap()
    };
    // The reference: every key's values so far.
    type Seen = std::collections::BTreeMap<i64, (HashSet<i64>, u64, HashSet<String>)>;
    use std::collections::HashSet;
    let mut seen: Seen = Default::default();
    let mut table = std::collections::BTreeMap::new();
    let mut op = distinct_operator();
    for round in 0..8 {
        if round == 4 {
            // Through a snapshot: the groups table has DataFusion's list
            // state in the spec's order, and a restore carries on.
            let tables = op.snapshot_state(1).unwrap();
            let layout = op.all.snapshot_schema().unwrap();
            let names: Vec<&str> = tables[0]
                .batch
                .schema_ref()
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>();
            let want: Vec<&str> = layout.fields()[1..]
                .iter()
                .map(|f| f.name().as_str())
                .collect();
            assert_eq!(names, want);
            op = distinct_operator();
            op.restore_state(tables).unwrap();
        }
        let b = batch(round);
        for r in 0..b.num_rows() {
            let k = b
                .column(0)
                .as_primitive::<arrow::datatypes::Int64Type>()
                .value(r);
            let e = seen.entry(k).or_default();
            if b.column(1).is_valid(r) {
                e.0.insert(
                    b.column(1)
                        .as_primitive::<arrow::datatypes::Int64Type>()
                        .value(r),
                );
            }
            e.1 += 1;
            if b.column(2).is_valid(r) {
                e.2.insert(b.column(2).as_string::<i32>().value(r).to_string());
            }
        }
        let mut out = vec![];
        op.process_batch(b, &mut out).unwrap();
        apply_rows(&mut table, &out);
        let want: std::collections::BTreeMap<String, String> = seen
            .iter()
            .map(|(k, (v, n, w))| (k.to_string(), format!("{}, {n}, {}", v.len(), w.len())))
            .collect();
        assert_eq!(table, want, "round {round}");
    }
}

/// Collapse a changelog of `[k, values…]` rows into key → values.
fn apply_rows(table: &mut std::collections::BTreeMap<String, String>, out: &[RecordBatch]) {
    for b in out {
        let kinds = weir_core::changelog::row_kinds(b).unwrap();
        let width = b.num_columns() - 1;
        for r in 0..b.num_rows() {
            let c = |i: usize| arrow::util::display::array_value_to_string(b.column(i), r).unwrap();
            let values: Vec<String> = (1..width).map(c).collect();
            match RowKind::from_i8(kinds.value(r)).unwrap() {
                RowKind::Insert | RowKind::UpdateAfter => {
                    table.insert(c(0), values.join(", "));
                }
                _ => {
                    assert_eq!(table.remove(&c(0)), Some(values.join(", ")));
                }
            }
        }
    }
}

/// `differs` (a kernel per column, the row encoding for nested types)
/// says what comparing the rows' encodings says: NULL equals NULL, NaN
/// equals NaN, -0.0 differs from 0.0, any one column differing suffices.
#[test]
fn differs_matches_comparing_row_encodings() {
    use arrow::array::{Float64Array, ListArray, StringArray};
    use arrow::datatypes::Int32Type;
    // Columns whose third row is NULL or `third`, fourth "d" or `fourth`,
    // second 0.0 or `second`; row one's float is NaN both times.
    let columns = |third: Option<i64>, fourth: &str, second: f64| -> Vec<ArrayRef> {
        vec![
            Arc::new(Int64Array::from(vec![
                Some(1),
                None,
                third,
                Some(4),
                Some(5),
                Some(6),
            ])),
            Arc::new(StringArray::from(vec![
                Some("a"),
                Some("b"),
                None,
                Some(fourth),
                None,
                Some("f"),
            ])),
            Arc::new(Float64Array::from(vec![
                f64::NAN,
                second,
                -0.0,
                1.5,
                2.0,
                3.0,
            ])),
        ]
    };
    let before = columns(None, "d", 0.0);
    let after = columns(Some(3), "x", -0.0);
    // A list column whose fifth row is [2] before and [x] after.
    let list = |x: i32| -> ArrayRef {
        Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1)]),
            None,
            Some(vec![]),
            None,
            Some(vec![Some(x)]),
            Some(vec![None]),
        ]))
    };
    let nested_before = [before.clone(), vec![list(2)]].concat();
    let nested_after = [after.clone(), vec![list(3)]].concat();
    for (b, a) in [(before, after), (nested_before, nested_after)] {
        let fields: Vec<SortField> = b
            .iter()
            .map(|c| SortField::new(c.data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields).unwrap();
        let (rb, ra) = (
            converter.convert_columns(&b).unwrap(),
            converter.convert_columns(&a).unwrap(),
        );
        let want: Vec<bool> = (0..b[0].len()).map(|i| rb.row(i) != ra.row(i)).collect();
        assert_eq!(differs(&b, &a).unwrap(), want, "{} columns", b.len());
        assert!(want.iter().any(|&d| d) && want.iter().any(|&d| !d));
    }
}
