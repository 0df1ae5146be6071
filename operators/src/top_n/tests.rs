//! Top-N and deduplication tests.
use super::*;
use std::collections::{BTreeMap, HashMap};

use arrow::array::Array;
use arrow::array::{Int64Array, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use weir_core::config::WeirConfig;
use weir_core::message::Watermark;

fn input() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(
            "window_end",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
        Field::new("v", DataType::Int64, false),
    ]))
}

fn window_top_2() -> TopNOperator {
    top(2, FinalRows::WindowEnd("window_end".into()))
}

/// Keep-first deduplication by the first column (as rowtime), keyed by
/// `v`.
fn keep_first() -> TopNOperator {
    let spec = TopNSpec {
        keys: vec!["v".into()],
        order: vec![("window_end".into(), false, false)],
        later_wins_ties: false,
        limit: 1,
        row_number: Some("rn".into()),
        input_schema: input(),
        changelog: false,
        final_rows: Some(FinalRows::FirstByRowtime("window_end".into())),
        upsert: None,
    };
    operator(&spec)
}

fn top(limit: usize, final_rows: FinalRows) -> TopNOperator {
    let spec = TopNSpec {
        keys: vec!["window_end".into()],
        order: vec![("v".into(), true, false)],
        later_wins_ties: false,
        limit,
        row_number: Some("rn".into()),
        input_schema: input(),
        changelog: false,
        final_rows: Some(final_rows),
        upsert: None,
    };
    operator(&spec)
}

fn operator(spec: &TopNSpec) -> TopNOperator {
    operator_with(spec, WeirConfig::default())
}

/// The operator of `spec`; its output is the input, then `rn` when
/// numbered, then the row kind when a changelog.
fn operator_with(spec: &TopNSpec, config: WeirConfig) -> TopNOperator {
    let mut fields: Vec<Field> = spec
        .input_schema
        .fields()
        .iter()
        .map(|f| (**f).clone())
        .collect();
    if spec.row_number.is_some() {
        fields.push(Field::new("rn", DataType::UInt64, false));
    }
    if spec.changelog {
        fields.push(weir_core::spec::row_kind_field());
    }
    let ctx = OperatorContext::single("top", config);
    TopNOperator::try_new("top".into(), spec, Arc::new(Schema::new(fields)), &ctx).unwrap()
}

fn rows(ends: &[i64], values: &[i64]) -> RecordBatch {
    RecordBatch::try_new(
        input(),
        vec![
            Arc::new(TimestampMillisecondArray::from(ends.to_vec())),
            Arc::new(Int64Array::from(values.to_vec())),
        ],
    )
    .unwrap()
}

/// (window end, value, rank) of the emitted rows.
fn emitted(out: &[RecordBatch]) -> Vec<(i64, i64, u64)> {
    out.iter()
        .flat_map(|b| {
            let e = b
                .column(0)
                .as_primitive::<arrow::datatypes::TimestampMillisecondType>();
            let v = b.column(1).as_primitive::<arrow::datatypes::Int64Type>();
            let r = b.column(2).as_primitive::<arrow::datatypes::UInt64Type>();
            (0..b.num_rows())
                .map(|i| (e.value(i), v.value(i), r.value(i)))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn keep_first_forgets_emitted_keys_past_the_state_ttl() {
    let mut config = WeirConfig::default();
    config.state.ttl = Some(std::time::Duration::from_millis(1000));
    let spec = TopNSpec {
        keys: vec!["v".into()],
        order: vec![("window_end".into(), false, false)],
        later_wins_ties: false,
        limit: 1,
        row_number: Some("rn".into()),
        input_schema: input(),
        changelog: false,
        final_rows: Some(FinalRows::FirstByRowtime("window_end".into())),
        upsert: None,
    };
    let mut op = operator_with(&spec, config);
    let mut biggest = 0;
    // Steady churn: 100 new keys per second of processing time for a
    // minute; each key's first row is emitted and remembered.
    let start = now_ms() + 10_000;
    for second in 0..60i64 {
        let now = start + second * 1000;
        let keys: Vec<i64> = (second * 100..(second + 1) * 100).collect();
        let mut out = vec![];
        op.process(&rows(&vec![second * 10; 100], &keys), now, &mut out)
            .unwrap();
        op.on_watermark(Watermark(second * 10), &mut out).unwrap();
        assert_eq!(emitted(&out).len(), 100);
        op.sweep(now + 500);
        biggest = biggest.max(op.emitted.len() + op.live_keys);
    }
    // A second and a half of keys at most, not a minute's.
    assert!(biggest <= 200, "keep-first held {biggest} keys");
    // An expired key's next row is emitted again (its state is gone).
    let mut out = vec![];
    op.process(&rows(&[700], &[0]), start + 70_000, &mut out)
        .unwrap();
    op.on_watermark(Watermark(700), &mut out).unwrap();
    assert_eq!(emitted(&out), [(700, 0, 1)]);
}

#[test]
fn keep_last_sends_every_replacement_of_a_batch_in_arrival_order() {
    // Keyed by `v`, the last row by the first column (as rowtime).
    let spec = TopNSpec {
        keys: vec!["v".into()],
        order: vec![("window_end".into(), true, false)],
        later_wins_ties: true,
        limit: 1,
        row_number: Some("rn".into()),
        input_schema: input(),
        changelog: true,
        final_rows: None,
        upsert: None,
    };
    let mut op = operator(&spec);
    let changes = |out: &[RecordBatch]| -> Vec<(String, i64)> {
        out.iter()
            .flat_map(|b| {
                let t = b
                    .column(0)
                    .as_primitive::<arrow::datatypes::TimestampMillisecondType>();
                let k = weir_core::changelog::row_kinds(b).unwrap();
                (0..b.num_rows())
                    .map(|i| {
                        (
                            RowKind::from_i8(k.value(i)).unwrap().to_string(),
                            t.value(i),
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let mut out: Vec<RecordBatch> = vec![];
    // An older row is ignored; an equal time replaces (later wins).
    op.process_batch(rows(&[10, 5, 20, 20], &[1, 1, 1, 1]), &mut out)
        .unwrap();
    assert_eq!(
        changes(&out),
        [
            ("+I".into(), 10),
            ("-U".into(), 10),
            ("+U".into(), 20),
            ("-U".into(), 20),
            ("+U".into(), 20)
        ]
    );
    out.clear();
    op.process_batch(rows(&[15, 30], &[1, 1]), &mut out)
        .unwrap();
    assert_eq!(changes(&out), [("-U".into(), 20), ("+U".into(), 30)]);
}

#[test]
fn window_top_n_emits_each_window_once_when_it_closes() {
    let mut op = window_top_2();
    let mut out: Vec<RecordBatch> = vec![];
    op.process_batch(rows(&[10, 10, 20, 10], &[5, 9, 1, 7]), &mut out)
        .unwrap();
    assert!(out.is_empty(), "nothing before the window closes");
    // Not yet: window 10 closes once the watermark reaches 9.
    op.on_watermark(Watermark(8), &mut out).unwrap();
    assert!(out.is_empty());
    op.on_watermark(Watermark(9), &mut out).unwrap();
    assert_eq!(emitted(&out), [(10, 9, 1), (10, 7, 2)]);
    // A late row of the closed window is dropped; the open one ranks.
    out.clear();
    op.process_batch(rows(&[10, 20], &[100, 3]), &mut out)
        .unwrap();
    let snapshot = op.snapshot_state(1).unwrap();
    let mut restored = window_top_2();
    restored.restore_state(snapshot).unwrap();
    for op in [&mut op, &mut restored] {
        let mut out: Vec<RecordBatch> = vec![];
        op.on_watermark(Watermark(30), &mut out).unwrap();
        assert_eq!(emitted(&out), [(20, 3, 1), (20, 1, 2)]);
        assert!(op.live_keys == 0);
    }
    assert!(
        op.metrics()
            .contains(&("num_late_records_dropped".into(), 1))
    );
    // The restored watermark drops the late row as well.
    let mut out: Vec<RecordBatch> = vec![];
    restored.process_batch(rows(&[10], &[1]), &mut out).unwrap();
    assert!(restored.live_keys == 0);
}

#[test]
fn keep_first_emits_each_keys_earliest_row_once_the_watermark_reaches_it() {
    let mut op = keep_first();
    let mut out: Vec<RecordBatch> = vec![];
    // Key 1 arrives at 50, then earlier at 40 (which replaces it);
    // key 2 at 70.
    op.process_batch(rows(&[50, 70, 40], &[1, 2, 1]), &mut out)
        .unwrap();
    op.on_watermark(Watermark(39), &mut out).unwrap();
    assert!(out.is_empty());
    op.on_watermark(Watermark(40), &mut out).unwrap();
    assert_eq!(emitted(&out), [(40, 1, 1)]);
    out.clear();
    // Key 1 is done: a later row of it is ignored (not late); a row
    // behind the watermark is late.
    op.process_batch(rows(&[45, 30], &[1, 3]), &mut out)
        .unwrap();
    assert!(
        op.metrics()
            .contains(&("num_late_records_dropped".into(), 1))
    );
    let mut restored = keep_first();
    restored
        .restore_state(op.snapshot_state(1).unwrap())
        .unwrap();
    for op in [&mut op, &mut restored] {
        let mut out: Vec<RecordBatch> = vec![];
        op.process_batch(rows(&[80], &[1]), &mut out).unwrap();
        op.on_watermark(Watermark(100), &mut out).unwrap();
        assert_eq!(emitted(&out), [(70, 2, 1)], "key 1 stays emitted");
    }
}

/// The changelog as the row-at-a-time definition gives it: each key's rows
/// sorted (ties by arrival, or the later first), cut to the limit, and the
/// old and new kept rows compared as multisets of (row, position when
/// numbered); keep-last deduplication sends every replacement.
struct Reference {
    limit: usize,
    descending: bool,
    later_wins_ties: bool,
    row_number: bool,
    kept: HashMap<i64, Vec<(Option<i64>, i64)>>,
}

type Row3 = (i64, Option<i64>, i64);

impl Reference {
    fn rank(&self, a: &Option<i64>, b: &Option<i64>) -> std::cmp::Ordering {
        // Nulls last, as the spec below asks.
        let o = match (a, b) {
            (None, None) => std::cmp::Ordering::Equal,
            (None, _) => return std::cmp::Ordering::Greater,
            (_, None) => return std::cmp::Ordering::Less,
            (Some(a), Some(b)) => a.cmp(b),
        };
        if self.descending { o.reverse() } else { o }
    }

    fn process(&mut self, rows: &[Row3]) -> Vec<(String, Row3, u64)> {
        let mut order: Vec<i64> = vec![];
        for r in rows {
            if !order.contains(&r.0) {
                order.push(r.0);
            }
        }
        let mut out = vec![];
        for k in order {
            let old = self.kept.get(&k).cloned().unwrap_or_default();
            let fresh: Vec<(Option<i64>, i64)> = rows
                .iter()
                .filter(|r| r.0 == k)
                .map(|r| (r.1, r.2))
                .collect();
            if self.limit == 1 && self.later_wins_ties {
                let mut current = old.first().copied();
                for f in fresh {
                    match current {
                        Some(c) if self.rank(&f.0, &c.0).is_gt() => continue,
                        Some(c) => {
                            out.push(("-U".into(), (k, c.0, c.1), 1));
                            out.push(("+U".into(), (k, f.0, f.1), 1));
                        }
                        None => out.push(("+I".into(), (k, f.0, f.1), 1)),
                    }
                    current = Some(f);
                }
                self.kept.insert(k, current.into_iter().collect());
                continue;
            }
            let mut all: Vec<(usize, (Option<i64>, i64))> =
                old.iter().chain(&fresh).copied().enumerate().collect();
            all.sort_by(|a, b| {
                self.rank(&a.1.0, &b.1.0).then(if self.later_wins_ties {
                    b.0.cmp(&a.0)
                } else {
                    a.0.cmp(&b.0)
                })
            });
            let new: Vec<(Option<i64>, i64)> =
                all.into_iter().take(self.limit).map(|x| x.1).collect();
            let id = |v: &[(Option<i64>, i64)]| -> Vec<((Option<i64>, i64), usize)> {
                v.iter()
                    .enumerate()
                    .map(|(i, r)| (*r, if self.row_number { i } else { 0 }))
                    .collect()
            };
            let (old_id, new_id) = (id(&old), id(&new));
            let minus = |a: &[((Option<i64>, i64), usize)], b: &[((Option<i64>, i64), usize)]| {
                let mut left = b.to_vec();
                let mut gone = vec![];
                for (i, x) in a.iter().enumerate() {
                    match left.iter().position(|y| y == x) {
                        Some(p) => {
                            left.remove(p);
                        }
                        None => gone.push(i),
                    }
                }
                gone
            };
            let removed = minus(&old_id, &new_id);
            let added = minus(&new_id, &old_id);
            let at_rank = self.row_number || self.limit == 1;
            for &i in &removed {
                let kind = if new.contains(&old[i]) || (at_rank && added.contains(&i)) {
                    "-U"
                } else {
                    "-D"
                };
                out.push((kind.into(), (k, old[i].0, old[i].1), i as u64 + 1));
            }
            for &i in &added {
                let kind = if old.contains(&new[i]) || (at_rank && removed.contains(&i)) {
                    "+U"
                } else {
                    "+I"
                };
                out.push((kind.into(), (k, new[i].0, new[i].1), i as u64 + 1));
            }
            self.kept.insert(k, new);
        }
        out
    }
}

#[test]
fn changelog_matches_the_row_at_a_time_definition() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
        Field::new("w", DataType::Int64, false),
    ]));
    let mut x: u64 = 99;
    let mut next = |n: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % n
    };
    for case in 0..48 {
        let limit = [1usize, 2, 3, 5][case % 4];
        let later_wins_ties = case % 8 >= 4 && limit == 1;
        let row_number = case % 16 >= 8;
        let descending = case % 32 >= 16;
        let spec = TopNSpec {
            keys: vec!["k".into()],
            order: vec![("v".into(), descending, false)],
            later_wins_ties,
            limit,
            row_number: row_number.then(|| "rn".into()),
            input_schema: Arc::clone(&schema),
            changelog: true,
            final_rows: None,
            upsert: None,
        };
        let mut op = operator(&spec);
        // Where rows have an upsert key, the same in upsert mode: the
        // changelog without its -U rows.
        let upsert_spec = TopNSpec {
            upsert: spec.upsert_keys().first().cloned(),
            ..spec.clone()
        };
        let mut upserting = upsert_spec.upsert.is_some().then(|| operator(&upsert_spec));
        let mut reference = Reference {
            limit,
            descending,
            later_wins_ties,
            row_number,
            kept: HashMap::new(),
        };
        for batch in 0..30 {
            let n = 1 + next(40) as usize;
            let rows: Vec<Row3> = (0..n)
                .map(|_| {
                    let v = next(6);
                    (next(5) as i64, (v != 0).then_some(v as i64), next(3) as i64)
                })
                .collect();
            let input = RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                    Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.1))),
                    Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
                ],
            )
            .unwrap();
            let mut out: Vec<RecordBatch> = vec![];
            op.process_batch(input.clone(), &mut out).unwrap();
            let mut upserted: Vec<RecordBatch> = vec![];
            if let Some(u) = &mut upserting {
                u.process_batch(input, &mut upserted).unwrap();
            }
            let changes = |out: &[RecordBatch]| {
                let mut got = vec![];
                for b in out {
                    let k = b.column(0).as_primitive::<arrow::datatypes::Int64Type>();
                    let v = b.column(1).as_primitive::<arrow::datatypes::Int64Type>();
                    let w = b.column(2).as_primitive::<arrow::datatypes::Int64Type>();
                    let kinds = weir_core::changelog::row_kinds(b).unwrap();
                    for i in 0..b.num_rows() {
                        let number = if row_number {
                            b.column(3)
                                .as_primitive::<arrow::datatypes::UInt64Type>()
                                .value(i)
                        } else {
                            0
                        };
                        got.push((
                            RowKind::from_i8(kinds.value(i)).unwrap().to_string(),
                            (k.value(i), v.is_valid(i).then(|| v.value(i)), w.value(i)),
                            number,
                        ));
                    }
                }
                got
            };
            // Changes of different keys may come in any order, a key's
            // only in the reference's.
            let by_key = |changes: Vec<(String, Row3, u64)>| {
                let mut keys: BTreeMap<i64, Vec<(String, Row3, u64)>> = BTreeMap::new();
                for c in changes {
                    keys.entry(c.1.0).or_default().push(c);
                }
                keys
            };
            let got = changes(&out);
            let mut want = reference.process(&rows);
            if !row_number {
                for w in &mut want {
                    w.2 = 0;
                }
            }
            assert_eq!(
                by_key(got),
                by_key(want.clone()),
                "case {case} batch {batch}"
            );
            if upserting.is_some() {
                want.retain(|w| w.0 != "-U");
                assert_eq!(
                    by_key(changes(&upserted)),
                    by_key(want),
                    "case {case} batch {batch}, upserting"
                );
            }
            // Half way, go through a snapshot and a restore.
            if batch == 15 {
                let tables = op.snapshot_state(1).unwrap();
                op = operator(&spec);
                op.restore_state(tables).unwrap();
                if let Some(u) = &mut upserting {
                    let tables = u.snapshot_state(1).unwrap();
                    *u = operator(&upsert_spec);
                    u.restore_state(tables).unwrap();
                }
            }
        }
        let kept: usize = reference.kept.values().map(Vec::len).sum();
        assert_eq!(op.kept_rows, kept, "case {case}");
    }
}

/// Figures, not a check: keep-last deduplication and a numbered Top-3,
/// each over 100 000 keys.
/// `cargo test --release -p weir-operators --lib top_n_speed -- --ignored
/// --nocapture`.
#[test]
#[ignore]
fn top_n_speed() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
        Field::new("w", DataType::Int64, false),
    ]));
    for (what, limit, later_wins_ties) in [("keep-last dedup", 1, true), ("top 3", 3, false)] {
        let spec = TopNSpec {
            keys: vec!["k".into()],
            order: vec![("v".into(), true, false)],
            later_wins_ties,
            limit,
            row_number: Some("rn".into()),
            input_schema: Arc::clone(&schema),
            changelog: true,
            final_rows: None,
            upsert: None,
        };
        let mut op = operator(&spec);
        let (batches, rows) = (400i64, 4096i64);
        let mut changes = 0;
        let start = std::time::Instant::now();
        for b in 0..batches {
            let ids: Vec<i64> = (0..rows).map(|i| b * rows + i).collect();
            let input = RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(Int64Array::from_iter_values(
                        ids.iter().map(|i| i * 7919 % 100_000),
                    )),
                    Arc::new(Int64Array::from_iter_values(
                        ids.iter().map(|i| i * 31 % 1000),
                    )),
                    Arc::new(Int64Array::from_iter_values(ids.iter().copied())),
                ],
            )
            .unwrap();
            let mut out: Vec<RecordBatch> = vec![];
            op.process_batch(input, &mut out).unwrap();
            changes += out.iter().map(|b| b.num_rows()).sum::<usize>();
        }
        let took = start.elapsed();
        println!(
            "{what}, 100 000 keys: {} rows in {took:?}, {:.2} M rows/s, {changes} changes",
            batches * rows,
            (batches * rows) as f64 / took.as_secs_f64() / 1e6
        );
    }
}

#[test]
fn window_top_n_stays_right_as_closed_windows_are_compacted_away() {
    // 10 000 windows of three rows each, two kept; every window closes
    // one batch after its rows came, so dead keys pile up and the key table
    // is rebuilt many times.
    let mut op = window_top_2();
    let mut got = vec![];
    for w in 1..=10_000i64 {
        let end = w * 10;
        let mut out: Vec<RecordBatch> = vec![];
        op.process_batch(rows(&[end, end, end], &[w % 7, w % 5, w % 3]), &mut out)
            .unwrap();
        op.on_watermark(Watermark(end - 10), &mut out).unwrap();
        got.extend(emitted(&out));
    }
    let mut out: Vec<RecordBatch> = vec![];
    op.on_watermark(Watermark(i64::MAX), &mut out).unwrap();
    got.extend(emitted(&out));
    let mut want = vec![];
    for w in 1..=10_000i64 {
        let mut v = [w % 7, w % 5, w % 3];
        // Descending, ties keep arrival order (a stable sort).
        v.sort_by(|a, b| b.cmp(a));
        want.push((w * 10, v[0], 1));
        want.push((w * 10, v[1], 2));
    }
    assert_eq!(got, want);
    assert_eq!(op.live_keys, 0);
    assert!(op.keys.len() < 10_000, "the key table was never rebuilt");
}
