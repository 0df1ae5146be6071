use super::*;
use arrow::array::Int64Array;
use arrow::util::display::array_value_to_string;
use datafusion_physical_expr::expressions::{BinaryExpr, Column};
use weir_core::config::WeirConfig;
use weir_core::spec::row_kind_field;

/// `(k, ts, v)`, plus the row kind for a changelog.
fn schema(changelog: bool) -> SchemaRef {
    let mut fields = vec![
        Field::new("k", DataType::Int64, true),
        Field::new("ts", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
    ];
    if changelog {
        fields.push(row_kind_field());
    }
    Arc::new(Schema::new(fields))
}

fn rows(r: &[(Option<i64>, i64, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        schema(false),
        vec![
            Arc::new(Int64Array::from(r.iter().map(|x| x.0).collect::<Vec<_>>())),
            Arc::new(Int64Array::from_iter_values(r.iter().map(|x| x.1))),
            Arc::new(Int64Array::from_iter_values(r.iter().map(|x| x.2))),
        ],
    )
    .unwrap()
}

fn changes(r: &[(&str, i64, i64, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        schema(true),
        vec![
            Arc::new(Int64Array::from_iter_values(r.iter().map(|x| x.1))),
            Arc::new(Int64Array::from_iter_values(r.iter().map(|x| x.2))),
            Arc::new(Int64Array::from_iter_values(r.iter().map(|x| x.3))),
            weir_core::changelog::row_kind_array(
                r.iter()
                    .map(|x| weir_core::changelog::RowKind::from_short_string(x.0).unwrap()),
            ),
        ],
    )
    .unwrap()
}

fn ctx() -> OperatorContext {
    OperatorContext::single("temporal", WeirConfig::default())
}

fn spec(kind: JoinKind, changelog: bool) -> TemporalJoinSpec {
    TemporalJoinSpec {
        kind,
        left_keys: vec!["k".into()],
        right_keys: vec!["k".into()],
        left_rowtime: "ts".into(),
        right_rowtime: "ts".into(),
        left_schema: schema(false),
        right_schema: schema(changelog),
        residual: None,
    }
}

fn operator(spec: &TemporalJoinSpec) -> TemporalJoinOperator {
    TemporalJoinOperator::try_new("temporal".into(), spec, spec.output_schema(), &ctx()).unwrap()
}

fn lines(out: &[RecordBatch]) -> Vec<String> {
    let mut v = vec![];
    for b in out {
        for r in 0..b.num_rows() {
            let values: Vec<String> = (0..b.num_columns())
                .map(|c| array_value_to_string(b.column(c), r).unwrap())
                .map(|s| if s.is_empty() { "null".into() } else { s })
                .collect();
            v.push(values.join(","));
        }
    }
    v.sort();
    v
}

fn input(op: &mut TemporalJoinOperator, side: usize, batch: RecordBatch) {
    op.process_input(side, batch, &mut Vec::new()).unwrap();
}

fn watermark(op: &mut TemporalJoinOperator, wm: i64) -> Vec<String> {
    let mut out: Vec<RecordBatch> = vec![];
    op.on_watermark(Watermark(wm), &mut out).unwrap();
    lines(&out)
}

#[test]
fn a_left_row_joins_the_version_its_key_had_at_its_time_once_the_watermark_passes() {
    let mut op = operator(&spec(JoinKind::Inner, false));
    input(&mut op, 1, rows(&[(Some(1), 10, 100), (Some(1), 20, 200)]));
    input(
        &mut op,
        0,
        rows(&[(Some(1), 5, 0), (Some(1), 15, 1), (Some(1), 25, 2)]),
    );
    // A version arriving after the left row still counts if it is older.
    input(&mut op, 1, rows(&[(Some(1), 12, 120)]));
    assert_eq!(watermark(&mut op, 14), Vec::<String>::new());
    assert_eq!(watermark(&mut op, 15), ["1,15,1,1,12,120"]);
    assert_eq!(watermark(&mut op, 30), ["1,25,2,1,20,200"]);
    // Versions before the latest one the watermark passed are gone.
    assert_eq!(op.kept_versions(), 1);
}

#[test]
fn a_left_join_pads_rows_without_a_version_and_a_deletion_ends_the_key() {
    let mut op = operator(&spec(JoinKind::Left, true));
    input(
        &mut op,
        1,
        changes(&[
            ("+I", 1, 10, 100),
            // -U is not a version: Flink's temporal join reads upserts.
            ("-U", 1, 10, 100),
            ("+U", 1, 20, 200),
            ("-D", 1, 30, 200),
        ]),
    );
    input(
        &mut op,
        0,
        rows(&[
            (Some(1), 9, 0),
            (Some(1), 10, 1),
            (Some(1), 25, 2),
            (Some(1), 30, 3),
            (None, 40, 4),
            (Some(2), 40, 5),
        ]),
    );
    assert_eq!(
        watermark(&mut op, 50),
        [
            "1,10,1,1,10,100",
            "1,25,2,1,20,200",
            "1,30,3,null,null,null",
            "1,9,0,null,null,null",
            "2,40,5,null,null,null",
            "null,40,4,null,null,null",
        ]
    );
    // The key's only remaining version was a tombstone: the key is gone.
    assert_eq!(op.kept_versions(), 0);
}

#[test]
fn the_same_version_time_replaces_and_the_residual_decides_the_match() {
    let mut s = spec(JoinKind::Left, false);
    // v > right v (columns: k, ts, v, right_k, right_ts, right_v)
    s.residual = Some(Arc::new(BinaryExpr::new(
        Arc::new(Column::new("v", 2)),
        datafusion_expr::Operator::Gt,
        Arc::new(Column::new("right_v", 5)),
    )));
    let mut op = operator(&s);
    input(&mut op, 1, rows(&[(Some(1), 10, 5), (Some(1), 10, 7)]));
    input(&mut op, 0, rows(&[(Some(1), 11, 6), (Some(1), 12, 8)]));
    assert_eq!(
        watermark(&mut op, 20),
        ["1,11,6,null,null,null", "1,12,8,1,10,7"]
    );
}

#[test]
fn a_snapshot_restores_waiting_rows_versions_and_tombstones() {
    let s = spec(JoinKind::Left, true);
    let mut op = operator(&s);
    input(
        &mut op,
        1,
        changes(&[("+I", 1, 10, 100), ("+I", 2, 10, 200), ("-D", 2, 20, 200)]),
    );
    input(&mut op, 0, rows(&[(Some(1), 15, 0), (Some(2), 25, 1)]));
    assert_eq!(watermark(&mut op, 5), Vec::<String>::new());
    let tables = op.snapshot_state(1).unwrap();
    let mut restored = operator(&s);
    restored.restore_state(tables).unwrap();
    assert_eq!(restored.kept_versions(), 3);
    // The restored watermark: an older one is not an advance.
    assert_eq!(watermark(&mut restored, 5), Vec::<String>::new());
    assert_eq!(
        watermark(&mut restored, 30),
        ["1,15,0,1,10,100", "2,25,1,null,null,null"]
    );
}
