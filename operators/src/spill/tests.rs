//! The disk backend's partitions of a join and of a Top-N: the same final
//! rows as in memory with state four times the budget, and snapshots that
//! restore into either backend.

use std::collections::BTreeMap;

use arrow::array::Int64Array;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::util::display::array_value_to_string;
use weir_core::changelog::{RowKind, row_kind_array, row_kind_at, row_kinds};
use weir_core::config::WeirConfig;
use weir_core::spec::{JoinKind, RegularJoinSpec, TopNSpec, is_changelog_schema, row_kind_field};

use arrow::datatypes::SchemaRef;

use super::*;
use crate::memory::StateMemory;
use crate::regular_join::RegularJoinOperator;
use crate::top_n::TopNOperator;

const BUDGET: usize = 256 << 10;

fn context(config: WeirConfig) -> OperatorContext {
    OperatorContext::single("op (1/1)", config)
}

fn disk_config(dir: &std::path::Path) -> WeirConfig {
    let mut config = WeirConfig::default();
    config.state.backend = weir_core::state_config::StateBackend::Disk;
    config.state.managed_memory = Some(BUDGET);
    config.state.local_dir = Some(dir.to_path_buf());
    config
}

fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
        row_kind_field(),
    ]))
}

/// Rows `(kind, k, v)`.
fn changes(rows: &[(RowKind, i64, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        input_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
            row_kind_array(rows.iter().map(|r| r.0)),
        ],
    )
    .unwrap()
}

/// Input `(input, batch)`: 60 000 keys on both inputs, each inserted, some
/// updated, a third deleted again, in rounds that interleave the inputs.
fn churn(inputs: usize) -> Vec<(usize, RecordBatch)> {
    let mut batches = vec![];
    for round in 0..30i64 {
        let keys = round * 2000..(round + 1) * 2000;
        for input in 0..inputs {
            let rows: Vec<_> = keys
                .clone()
                .map(|k| (RowKind::Insert, k, k * 10 + input as i64))
                .collect();
            batches.push((input, changes(&rows)));
        }
        // A second row for every key of the round (Top-N keeps two).
        let rows: Vec<_> = keys.clone().map(|k| (RowKind::Insert, k, k + 7)).collect();
        batches.push((0, changes(&rows)));
        // The previous round's keys: a third of them deleted.
        let old = (round - 1) * 2000..round * 2000;
        let rows: Vec<_> = old
            .filter(|k| k % 3 == 0)
            .map(|k| (RowKind::Delete, k, k + 7))
            .collect();
        if round > 0 {
            batches.push((0, changes(&rows)));
        }
    }
    batches
}

/// The net rows of a changelog: how often each row is in the result.
fn apply(net: &mut BTreeMap<String, i64>, out: &[RecordBatch]) {
    for b in out {
        let changelog = is_changelog_schema(&b.schema());
        let width = b.num_columns() - usize::from(changelog);
        for r in 0..b.num_rows() {
            let sign = if changelog {
                match row_kind_at(row_kinds(b).unwrap(), r).unwrap() {
                    RowKind::Insert | RowKind::UpdateAfter => 1,
                    RowKind::Delete | RowKind::UpdateBefore => -1,
                }
            } else {
                1
            };
            let line: Vec<String> = (0..width)
                .map(|c| array_value_to_string(b.column(c), r).unwrap())
                .collect();
            *net.entry(line.join(",")).or_default() += sign;
        }
    }
    net.retain(|_, n| *n != 0);
}

fn drive(op: &mut dyn Operator, input: &[(usize, RecordBatch)], net: &mut BTreeMap<String, i64>) {
    for (i, b) in input {
        let mut out = vec![];
        op.process_input(*i, b.clone(), &mut out).unwrap();
        apply(net, &out);
    }
}

fn end(op: &mut dyn Operator, net: &mut BTreeMap<String, i64>) {
    let mut out = vec![];
    op.finish(&mut out).unwrap();
    apply(net, &out);
}

fn counter(op: &dyn Operator, name: &str) -> u64 {
    op.metrics()
        .into_iter()
        .find(|(k, _)| k == name)
        .map_or(0, |(_, v)| v)
}

/// An operator kind under test: made in memory with `config`.
type Make = fn(&OperatorContext) -> Box<dyn Operator>;

fn spilling(make: Make, config: WeirConfig) -> SpillingKeyed {
    let ctx = context(config);
    let keys = make(&ctx).spill_keys().expect("the operator spills");
    let mut inner = ctx.clone();
    inner.memory = StateMemory::default();
    SpillingKeyed::try_new("op".into(), Box::new(move || Ok(make(&inner))), keys, &ctx).unwrap()
}

/// Run `make`'s operator over `input` in memory and on the disk backend;
/// the same net rows, with state four times the budget; then a snapshot
/// halfway restored into both backends ends with the same rows too.
fn same_rows_beyond_the_budget(make: Make, input: &[(usize, RecordBatch)]) {
    let mut expected = BTreeMap::new();
    let mut memory = make(&context(WeirConfig::default()));
    drive(memory.as_mut(), input, &mut expected);
    end(memory.as_mut(), &mut expected);
    let in_memory = counter(memory.as_ref(), "state_bytes");
    assert!(
        in_memory > 4 * BUDGET as u64,
        "the state ({in_memory} bytes) is 4x the budget"
    );

    let dir = tempfile::tempdir().unwrap();
    let mut disk = spilling(make, disk_config(dir.path()));
    let mut got = BTreeMap::new();
    let mut most = 0;
    for (i, b) in input {
        drive(&mut disk, &[(*i, b.clone())], &mut got);
        most = most.max(counter(&disk, "state_bytes"));
    }
    end(&mut disk, &mut got);
    assert_eq!(got, expected);
    assert!(counter(&disk, "partitions_spilled") > 10);
    assert!(counter(&disk, "partitions_loaded") > 10);
    assert!(
        most <= 2 * BUDGET as u64,
        "held {most} bytes in memory under a {BUDGET}-byte budget"
    );
    drop(disk);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    // Halfway, a snapshot (rows still pending in it) …
    let half = input.len() / 2;
    let mut disk = spilling(make, disk_config(dir.path()));
    let mut before = BTreeMap::new();
    drive(&mut disk, &input[..half], &mut before);
    let mut tables = disk.snapshot_state(1).unwrap();
    // Tables come back from a checkpoint by name alone.
    for t in &mut tables {
        t.key_columns = None;
    }
    assert!(
        tables.iter().any(|t| pending_input(&t.name).is_some()),
        "rows wait at the snapshot"
    );
    drop(disk);
    // … restored into the disk backend and into the in-memory one.
    let mut again = spilling(make, disk_config(dir.path()));
    again.restore_state(tables.clone()).unwrap();
    let mut in_memory = make(&context(WeirConfig::default()));
    in_memory.restore_state(tables).unwrap();
    for (name, op) in [
        ("disk", &mut again as &mut dyn Operator),
        ("in memory", in_memory.as_mut()),
    ] {
        let mut got = before.clone();
        drive(op, &input[half..], &mut got);
        end(op, &mut got);
        assert_eq!(got, expected, "after a restore into the {name} backend");
    }
}

#[test]
fn a_left_join_on_disk_ends_with_the_rows_it_has_in_memory() {
    fn make(ctx: &OperatorContext) -> Box<dyn Operator> {
        let spec = RegularJoinSpec {
            kind: JoinKind::Left,
            left_keys: vec!["k".into()],
            right_keys: vec!["k".into()],
            left_schema: input_schema(),
            right_schema: input_schema(),
            residual: None,
            state_ttl_ms: None,
            bounded: false,
        };
        Box::new(
            RegularJoinOperator::try_new("join".into(), &spec, spec.output_schema(), ctx).unwrap(),
        )
    }
    same_rows_beyond_the_budget(make, &churn(2));
}

#[test]
fn a_top_two_on_disk_ends_with_the_rows_it_has_in_memory() {
    fn make(ctx: &OperatorContext) -> Box<dyn Operator> {
        let spec = TopNSpec {
            keys: vec!["k".into()],
            order: vec![("v".into(), true, false)],
            later_wins_ties: false,
            limit: 2,
            row_number: Some("rn".into()),
            input_schema: Arc::new(input_schema().project(&[0, 1]).unwrap()),
            changelog: true,
            final_rows: None,
            upsert: None,
        };
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int64, false),
            Field::new("rn", DataType::UInt64, false),
            row_kind_field(),
        ]));
        Box::new(TopNOperator::try_new("top".into(), &spec, schema, ctx).unwrap())
    }
    // Top-N's input is append-only: the inserts.
    let inserts: Vec<_> = churn(1)
        .into_iter()
        .filter(|(_, b)| row_kind_at(row_kinds(b).unwrap(), 0).unwrap() == RowKind::Insert)
        .map(|(i, b)| (i, b.project(&[0, 1]).unwrap()))
        .collect();
    same_rows_beyond_the_budget(make, &inserts);
}

#[test]
fn pending_tables_are_named_by_their_input() {
    assert_eq!(pending_table(0), "pending");
    assert_eq!(pending_table(1), "pending-1");
    assert_eq!(pending_input("pending"), Some(0));
    assert_eq!(pending_input("pending-1"), Some(1));
    assert_eq!(pending_input("pendingx"), None);
    assert_eq!(pending_input("groups"), None);
}

/// Events `(k, v, ts)` of 20 000 keys, two a millisecond for 40 s, a
/// little out of order, in batches of 1 000, each with the watermark after
/// it (1 s behind).
fn timed_events() -> Vec<(RecordBatch, i64)> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, None),
            false,
        ),
    ]));
    let mut out = vec![];
    for b in 0..80i64 {
        let rows = b * 1000..(b + 1) * 1000;
        let ts: Vec<i64> = rows.clone().map(|r| r / 2 - (r * 37) % 500).collect();
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from_iter_values(
                    rows.clone().map(|r| (r * 7919) % 20_000),
                )),
                Arc::new(Int64Array::from_iter_values(rows.map(|r| r % 1000))),
                Arc::new(arrow::array::TimestampMillisecondArray::from(ts.clone())),
            ],
        )
        .unwrap();
        let watermark = ts.iter().max().unwrap() - 1000;
        out.push((batch, watermark));
    }
    out
}

fn drive_timed(
    op: &mut dyn Operator,
    input: &[(RecordBatch, i64)],
    net: &mut BTreeMap<String, i64>,
) {
    for (b, w) in input {
        let mut out = vec![];
        op.process_batch(b.clone(), &mut out).unwrap();
        op.on_watermark(Watermark(*w), &mut out).unwrap();
        apply(net, &out);
    }
}

fn end_timed(op: &mut dyn Operator, net: &mut BTreeMap<String, i64>) {
    let mut out = vec![];
    op.on_watermark(Watermark(i64::MAX), &mut out).unwrap();
    op.finish(&mut out).unwrap();
    apply(net, &out);
}

/// A sliding window (6 s every 2 s) per key: the same rows in memory and
/// on disk with its panes beyond the budget; a snapshot halfway, rows
/// pending in it, restores into both backends.
#[test]
fn a_sliding_window_on_disk_ends_with_the_rows_it_has_in_memory() {
    fn make(ctx: &OperatorContext) -> Box<dyn Operator> {
        let input = timed_events()[0].0.schema();
        let spec = weir_core::spec::WindowAggregateSpec {
            keys: vec!["k".into()],
            rowtime: Some("ts".into()),
            processing_time: false,
            trigger: weir_core::time::Trigger::OnWindowEnd,
            purge: false,
            assigner: weir_core::time::WindowAssigner::Sliding {
                size: 6_000,
                slide: 2_000,
                offset: 0,
            },
            aggregates: vec![
                weir_core::spec::AggregateSpec::count_star().alias("n"),
                weir_core::spec::AggregateSpec::sum("v").alias("total"),
            ],
            input_schema: Arc::clone(&input),
            allowed_lateness: 0,
            late_data_tag: None,
        };
        let ts = DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, None);
        let schema = Arc::new(Schema::new(vec![
            Field::new("window_start", ts.clone(), false),
            Field::new("window_end", ts, false),
            Field::new("k", DataType::Int64, false),
            Field::new("n", DataType::Int64, false),
            Field::new("total", DataType::Int64, true),
        ]));
        Box::new(
            crate::window::WindowAggregateOperator::try_new("window".into(), &spec, schema, ctx)
                .unwrap(),
        )
    }
    let input = timed_events();
    let mut expected = BTreeMap::new();
    let mut memory = make(&context(WeirConfig::default()));
    drive_timed(memory.as_mut(), &input, &mut expected);
    end_timed(memory.as_mut(), &mut expected);
    let most = counter(memory.as_ref(), "state_bytes_max");
    assert!(
        most > 2 * BUDGET as u64,
        "the panes ({most} bytes) are over twice the budget"
    );

    let dir = tempfile::tempdir().unwrap();
    let mut disk = spilling(make, disk_config(dir.path()));
    let mut got = BTreeMap::new();
    drive_timed(&mut disk, &input, &mut got);
    end_timed(&mut disk, &mut got);
    assert_eq!(got, expected);
    assert!(counter(&disk, "partitions_spilled") > 10);
    assert!(counter(&disk, "partitions_loaded") > 10);
    drop(disk);

    let half = input.len() / 2;
    let mut disk = spilling(make, disk_config(dir.path()));
    let mut before = BTreeMap::new();
    drive_timed(&mut disk, &input[..half], &mut before);
    let mut tables = disk.snapshot_state(1).unwrap();
    for t in &mut tables {
        t.key_columns = None;
    }
    assert!(
        tables.iter().any(|t| pending_input(&t.name).is_some()),
        "rows wait at the snapshot"
    );
    assert_eq!(tables.iter().filter(|t| t.name == "meta").count(), 1);
    drop(disk);
    let mut again = spilling(make, disk_config(dir.path()));
    again.restore_state(tables.clone()).unwrap();
    let mut in_memory = make(&context(WeirConfig::default()));
    in_memory.restore_state(tables).unwrap();
    for (name, op) in [
        ("disk", &mut again as &mut dyn Operator),
        ("in memory", in_memory.as_mut()),
    ] {
        let mut got = before.clone();
        drive_timed(op, &input[half..], &mut got);
        end_timed(op, &mut got);
        assert_eq!(got, expected, "after a restore into the {name} backend");
    }
}
