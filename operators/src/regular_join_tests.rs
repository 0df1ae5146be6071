use super::*;
use arrow::array::Int64Array;
use arrow::util::display::array_value_to_string;
use datafusion_physical_expr::expressions::{BinaryExpr, Column};
use weir_core::config::WeirConfig;
use weir_core::spec::row_kind_field;

fn schema(changelog: bool) -> SchemaRef {
    let mut fields = vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, false),
    ];
    if changelog {
        fields.push(row_kind_field());
    }
    Arc::new(Schema::new(fields))
}

/// Rows `(k, v)` of an append-only input.
fn rows(r: &[(Option<i64>, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        schema(false),
        vec![
            Arc::new(Int64Array::from(r.iter().map(|x| x.0).collect::<Vec<_>>())),
            Arc::new(Int64Array::from_iter_values(r.iter().map(|x| x.1))),
        ],
    )
    .unwrap()
}

/// Rows `(kind, k, v)` of a changelog input.
fn changes(r: &[(&str, i64, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        schema(true),
        vec![
            Arc::new(Int64Array::from_iter_values(r.iter().map(|x| x.1))),
            Arc::new(Int64Array::from_iter_values(r.iter().map(|x| x.2))),
            weir_core::changelog::row_kind_array(
                r.iter()
                    .map(|x| weir_core::changelog::RowKind::from_short_string(x.0).unwrap()),
            ),
        ],
    )
    .unwrap()
}

fn ctx() -> OperatorContext {
    OperatorContext::single("join", WeirConfig::default())
}

fn spec(kind: JoinKind, changelogs: (bool, bool)) -> RegularJoinSpec {
    RegularJoinSpec {
        kind,
        left_keys: vec!["k".into()],
        right_keys: vec!["k".into()],
        left_schema: schema(changelogs.0),
        right_schema: schema(changelogs.1),
        residual: None,
        state_ttl_ms: None,
        bounded: false,
    }
}

fn operator(spec: &RegularJoinSpec) -> RegularJoinOperator {
    RegularJoinOperator::try_new("join".into(), spec, spec.output_schema(), &ctx()).unwrap()
}

/// Output rows as `kind k,v,right_k,right_v` (kind `+I` when append-only).
fn lines(out: &[RecordBatch]) -> Vec<String> {
    let mut v = vec![];
    for b in out {
        let changelog = weir_core::spec::is_changelog_schema(&b.schema());
        let width = b.num_columns() - usize::from(changelog);
        for r in 0..b.num_rows() {
            let kind = if changelog {
                weir_core::changelog::row_kind_at(weir_core::changelog::row_kinds(b).unwrap(), r)
                    .unwrap()
                    .to_string()
            } else {
                "+I".into()
            };
            let values: Vec<String> = (0..width)
                .map(|c| array_value_to_string(b.column(c), r).unwrap())
                .map(|s| if s.is_empty() { "null".into() } else { s })
                .collect();
            v.push(format!("{kind} {}", values.join(",")));
        }
    }
    v
}

fn run(op: &mut RegularJoinOperator, input: usize, batch: RecordBatch, now: i64) -> Vec<String> {
    let mut out: Vec<RecordBatch> = vec![];
    op.process(input, batch, now, &mut out).unwrap();
    lines(&out)
}

#[test]
fn an_inner_join_of_append_only_inputs_pairs_rows_both_ways_and_stays_append_only() {
    let s = spec(JoinKind::Inner, (false, false));
    assert!(!s.updating());
    let mut op = operator(&s);
    assert!(run(&mut op, 0, rows(&[(Some(1), 10), (Some(2), 20)]), 0).is_empty());
    assert_eq!(
        run(&mut op, 1, rows(&[(Some(1), 100), (Some(3), 300)]), 0),
        ["+I 1,10,1,100"]
    );
    assert_eq!(
        run(&mut op, 0, rows(&[(Some(1), 11), (Some(3), 30)]), 0),
        ["+I 1,11,1,100", "+I 3,30,3,300"]
    );
    assert_eq!(op.kept_rows(), (4, 2));
}

#[test]
fn a_left_join_retracts_the_padded_row_when_a_partner_comes_and_sends_it_again_when_it_goes() {
    let mut op = operator(&spec(JoinKind::Left, (false, true)));
    assert_eq!(
        run(&mut op, 0, rows(&[(Some(1), 10)]), 0),
        ["+I 1,10,null,null"]
    );
    assert_eq!(
        run(&mut op, 1, changes(&[("+I", 1, 100)]), 0),
        ["-D 1,10,null,null", "+I 1,10,1,100"]
    );
    // An update of the right row: the pair is replaced, the padded row
    // comes back in between (Flink's outer join sends +I and -D only).
    assert_eq!(
        run(&mut op, 1, changes(&[("-U", 1, 100), ("+U", 1, 101)]), 0),
        [
            "-D 1,10,1,100",
            "+I 1,10,null,null",
            "-D 1,10,null,null",
            "+I 1,10,1,101"
        ]
    );
    assert_eq!(
        run(&mut op, 1, changes(&[("-D", 1, 101)]), 0),
        ["-D 1,10,1,101", "+I 1,10,null,null"]
    );
    assert_eq!(op.kept_rows(), (1, 0));
}

#[test]
fn a_full_join_pads_both_sides_and_counts_duplicate_rows() {
    let mut op = operator(&spec(JoinKind::Full, (true, false)));
    assert_eq!(
        run(&mut op, 1, rows(&[(Some(1), 100), (Some(1), 100)]), 0),
        ["+I null,null,1,100", "+I null,null,1,100"]
    );
    assert_eq!(
        run(&mut op, 0, changes(&[("+I", 1, 10)]), 0),
        [
            "-D null,null,1,100",
            "-D null,null,1,100",
            "+I 1,10,1,100",
            "+I 1,10,1,100"
        ]
    );
    assert_eq!(
        run(&mut op, 0, changes(&[("-D", 1, 10), ("+I", 2, 20)]), 0),
        [
            "-D 1,10,1,100",
            "-D 1,10,1,100",
            "+I null,null,1,100",
            "+I null,null,1,100",
            "+I 2,20,null,null"
        ]
    );
}

#[test]
fn an_inner_join_forwards_the_row_kind_of_its_changelog_input() {
    let mut op = operator(&spec(JoinKind::Inner, (true, false)));
    run(&mut op, 1, rows(&[(Some(1), 100)]), 0);
    assert_eq!(
        run(
            &mut op,
            0,
            changes(&[("+I", 1, 10), ("-U", 1, 10), ("+U", 1, 11)]),
            0
        ),
        ["+I 1,10,1,100", "-U 1,10,1,100", "+U 1,11,1,100"]
    );
    assert_eq!(op.kept_rows(), (1, 1));
}

#[test]
fn null_keys_never_match_and_outer_rows_with_them_are_padded() {
    let mut op = operator(&spec(JoinKind::Left, (false, false)));
    assert!(run(&mut op, 1, rows(&[(None, 100)]), 0).is_empty());
    assert_eq!(
        run(&mut op, 0, rows(&[(None, 10)]), 0),
        ["+I null,10,null,null"]
    );
    assert_eq!(op.kept_rows(), (0, 0));
}

#[test]
fn the_residual_condition_decides_pairs_and_what_is_unmatched() {
    let mut s = spec(JoinKind::Left, (false, false));
    // v < right_v
    s.residual = Some(Arc::new(BinaryExpr::new(
        Arc::new(Column::new("v", 1)),
        datafusion_expr::Operator::Lt,
        Arc::new(Column::new("right_v", 3)),
    )));
    let mut op = operator(&s);
    run(&mut op, 1, rows(&[(Some(1), 5), (Some(1), 50)]), 0);
    assert_eq!(
        run(&mut op, 0, rows(&[(Some(1), 10), (Some(1), 60)]), 0),
        ["+I 1,10,1,50", "+I 1,60,null,null"]
    );

    // A residual reading one side's column, and one reading none: only the
    // columns it reads are gathered for it, from stored rows (append-only)
    // and from row-encoded ones (changelog).
    let right_only: Arc<dyn datafusion_physical_expr::PhysicalExpr> = Arc::new(BinaryExpr::new(
        Arc::new(Column::new("right_v", 3)),
        datafusion_expr::Operator::Gt,
        Arc::new(datafusion_physical_expr::expressions::Literal::new(
            datafusion_common::ScalarValue::Int64(Some(40)),
        )),
    ));
    let constant: Arc<dyn datafusion_physical_expr::PhysicalExpr> =
        Arc::new(datafusion_physical_expr::expressions::Literal::new(
            datafusion_common::ScalarValue::Boolean(Some(true)),
        ));
    for (residual, want) in [
        (right_only, vec!["+I 1,10,1,50", "+I 1,60,1,50"]),
        (
            constant,
            vec!["+I 1,10,1,5", "+I 1,10,1,50", "+I 1,60,1,5", "+I 1,60,1,50"],
        ),
    ] {
        for changelogs in [(false, false), (true, true)] {
            let mut s = spec(JoinKind::Inner, changelogs);
            s.residual = Some(Arc::clone(&residual));
            let mut op = operator(&s);
            let (right, left) = if changelogs.1 {
                (
                    changes(&[("+I", 1, 5), ("+I", 1, 50)]),
                    changes(&[("+I", 1, 10), ("+I", 1, 60)]),
                )
            } else {
                (
                    rows(&[(Some(1), 5), (Some(1), 50)]),
                    rows(&[(Some(1), 10), (Some(1), 60)]),
                )
            };
            run(&mut op, 1, right, 0);
            let mut got = run(&mut op, 0, left, 0);
            got.sort();
            assert_eq!(got, want, "{changelogs:?}");
        }
    }
}

#[test]
fn state_survives_a_snapshot_and_a_restore() {
    let s = spec(JoinKind::Full, (true, true));
    let mut op = operator(&s);
    run(&mut op, 0, changes(&[("+I", 1, 10), ("+I", 1, 10)]), 0);
    run(&mut op, 1, changes(&[("+I", 2, 200)]), 0);
    let tables = op.snapshot_state(1).unwrap();
    let mut restored = operator(&s);
    restored.restore_state(tables).unwrap();
    assert_eq!(restored.kept_rows(), (1, 1));
    // The restored left row is there twice, and the right row is still
    // unmatched: a partner for it retracts its padding.
    assert_eq!(
        run(&mut restored, 1, changes(&[("+I", 1, 100)]), 0),
        [
            "-D 1,10,null,null",
            "-D 1,10,null,null",
            "+I 1,10,1,100",
            "+I 1,10,1,100"
        ]
    );
    assert_eq!(
        run(&mut restored, 0, changes(&[("+I", 2, 20)]), 0),
        ["-D null,null,2,200", "+I 2,20,2,200"]
    );
}

#[test]
fn rows_past_the_state_ttl_are_forgotten_without_output() {
    let mut s = spec(JoinKind::Inner, (false, false));
    s.state_ttl_ms = Some(1000);
    let mut op = operator(&s);
    let t0 = now_ms();
    run(&mut op, 0, rows(&[(Some(1), 10)]), t0);
    run(&mut op, 0, rows(&[(Some(2), 20)]), t0 + 600);
    // Key 1's row was written 1100 ms ago: gone; key 2's is 500 ms old.
    assert_eq!(
        run(
            &mut op,
            1,
            rows(&[(Some(1), 100), (Some(2), 200)]),
            t0 + 1100
        ),
        ["+I 2,20,2,200"]
    );
    assert_eq!(op.kept_rows(), (1, 2));
}

#[test]
fn in_batch_mode_the_join_emits_its_final_rows_once_at_the_end() {
    let mut s = spec(JoinKind::Full, (false, false));
    s.bounded = true;
    assert!(!s.updating());
    let mut op = operator(&s);
    assert!(
        run(
            &mut op,
            0,
            rows(&[(Some(1), 10), (Some(2), 20), (None, 30)]),
            0
        ) == ["+I null,30,null,null"]
    );
    assert!(
        run(
            &mut op,
            1,
            rows(&[(Some(1), 100), (Some(1), 100), (Some(3), 300)]),
            0
        )
        .is_empty()
    );
    let mut out: Vec<RecordBatch> = vec![];
    op.finish(&mut out).unwrap();
    let mut got = lines(&out);
    got.sort();
    assert_eq!(
        got,
        [
            "+I 1,10,1,100",
            "+I 1,10,1,100",
            "+I 2,20,null,null",
            "+I null,null,3,300"
        ]
    );
}

#[test]
fn the_key_table_stays_flat_under_steady_key_churn() {
    // Retractions: each round's keys are inserted on both sides, joined,
    // then deleted on both sides.
    let s = spec(JoinKind::Inner, (true, true));
    let mut op = operator(&s);
    // One key stays all along: the state is never empty.
    run(&mut op, 0, changes(&[("+I", -1, 0)]), 0);
    let mut biggest = 0;
    for round in 0..30i64 {
        let keys: Vec<i64> = (round * 1000..(round + 1) * 1000).collect();
        let batch = |kind: &str| {
            let r: Vec<(&str, i64, i64)> = keys.iter().map(|&k| (kind, k, k)).collect();
            changes(&r)
        };
        run(&mut op, 0, batch("+I"), 0);
        assert_eq!(run(&mut op, 1, batch("+I"), 0).len(), 1000);
        run(&mut op, 0, batch("-D"), 0);
        assert_eq!(run(&mut op, 1, batch("-D"), 0).len(), 0);
        biggest = biggest.max(op.keys.len());
    }
    assert!(biggest <= 2 * 4096 + 1000, "key table grew to {biggest}");
    assert_eq!(op.kept_rows(), (1, 0));
    // A key seen before the compaction joins again.
    run(&mut op, 0, changes(&[("+I", 5, 1)]), 0);
    assert_eq!(run(&mut op, 1, changes(&[("+I", 5, 2)]), 0), ["+I 5,1,5,2"]);
}

/// The same rows as a changelog of `+I` rows.
fn as_changes(batch: &RecordBatch) -> RecordBatch {
    let mut columns = batch.columns().to_vec();
    columns.push(weir_core::changelog::row_kind_array(vec![
        weir_core::changelog::RowKind::Insert;
        batch.num_rows()
    ]));
    RecordBatch::try_new(schema(true), columns).unwrap()
}

/// An append-only side keeps its rows columnar, a changelog side
/// row-encoded: fed the same rows (as `+I` changes on the changelog side),
/// with NULL keys, rows expiring past the state TTL (their ids reused) and
/// a snapshot and restore half-way, every join kind gives the same rows
/// both ways. (Rows are distinct: a changelog side counts a duplicate in
/// its first copy's entry, whose TTL the later copy refreshes, as Flink's
/// state keeps a count per row.)
#[test]
fn append_only_sides_give_the_rows_of_changelog_sides_through_expiry_and_restore() {
    // With a TTL (rows expire, write times kept) and without one (an
    // append-only side then keeps neither write times nor, when inner,
    // partner counts).
    let cases = [(Some(1000), 400, 50_000), (None, 40, 5_000)];
    for ((ttl, steps, least), kind) in cases.into_iter().flat_map(|c| {
        [
            JoinKind::Inner,
            JoinKind::Left,
            JoinKind::Right,
            JoinKind::Full,
        ]
        .map(|k| (c, k))
    }) {
        let mut plain_spec = spec(kind, (false, false));
        plain_spec.state_ttl_ms = ttl;
        let mut changes_spec = spec(kind, (true, true));
        changes_spec.state_ttl_ms = ttl;
        let mut plain = operator(&plain_spec);
        let mut changes = operator(&changes_spec);
        let t0 = now_ms();
        let mut x: u64 = 11;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        let mut compared = 0;
        // Enough rows that the stores rewrite their batches once the
        // expired rows outnumber the live ones.
        for step in 0..steps {
            let n = 1 + next() % 200;
            let batch = rows(
                &(0..n as i64)
                    .map(|i| {
                        let k = next() % 200;
                        ((k != 0).then_some(k as i64), step * 1000 + i)
                    })
                    .collect::<Vec<_>>(),
            );
            let input = (next() % 2) as usize;
            // 60 ms a step: rows expire after about 17 steps.
            let now = t0 + step * 60;
            let mut a = run(&mut plain, input, batch.clone(), now);
            let mut b = run(&mut changes, input, as_changes(&batch), now);
            a.sort();
            b.sort();
            if a != b {
                let only_a: Vec<_> = a.iter().filter(|l| !b.contains(l)).take(5).collect();
                let only_b: Vec<_> = b.iter().filter(|l| !a.contains(l)).take(5).collect();
                panic!(
                    "{kind:?} step {step}: {} rows columnar, {} encoded; only columnar {only_a:?}, only encoded {only_b:?}",
                    a.len(),
                    b.len()
                );
            }
            compared += a.len();
            if step == steps / 4 {
                for (op, s) in [(&mut plain, &plain_spec), (&mut changes, &changes_spec)] {
                    let tables = op.snapshot_state(1).unwrap();
                    let mut restored = operator(s);
                    restored.restore_state(tables).unwrap();
                    assert_eq!(restored.kept_rows(), op.kept_rows());
                    *op = restored;
                }
            }
        }
        assert!(compared > least, "{kind:?}: only {compared} rows compared");
    }
}

/// A row matching more rows than a batch holds (a hot key) comes out in
/// batches of at most `batch_size` rows, every pair once, in order; and
/// so does a changelog join's output with its row kinds.
#[test]
fn output_of_a_hot_key_comes_in_batches_of_the_configured_size() {
    for changelogs in [(false, false), (true, false)] {
        let s = spec(JoinKind::Inner, changelogs);
        let config = WeirConfig {
            batch_size: 4,
            ..Default::default()
        };
        let ctx = OperatorContext::single("join", config);
        let mut op =
            RegularJoinOperator::try_new("join".into(), &s, s.output_schema(), &ctx).unwrap();
        let right: Vec<(Option<i64>, i64)> = (0..10).map(|v| (Some(7), v)).collect();
        let mut out: Vec<RecordBatch> = vec![];
        op.process(1, rows(&right), 0, &mut out).unwrap();
        assert!(out.is_empty());
        let left = if changelogs.0 {
            changes(&[("+I", 7, 1), ("+I", 7, 2)])
        } else {
            rows(&[(Some(7), 1), (Some(7), 2)])
        };
        op.process(0, left, 0, &mut out).unwrap();
        let sizes: Vec<usize> = out.iter().map(RecordBatch::num_rows).collect();
        assert_eq!(sizes, [4, 4, 4, 4, 4], "{changelogs:?}");
        let want: Vec<String> = [1, 2]
            .iter()
            .flat_map(|l| (0..10).map(move |r| format!("+I 7,{l},7,{r}")))
            .collect();
        assert_eq!(lines(&out), want, "{changelogs:?}");
    }
}
