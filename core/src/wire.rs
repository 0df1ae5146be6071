//! Job graphs as data: the JSON form a client ships to a coordinator and a
//! coordinator ships to its workers.
//!
//! Almost every spec derives serde directly. The pieces that are code rather
//! than data get a hand-written form here:
//!
//! * physical expressions (filter predicates, projections) travel as a small
//!   expression tree ([`ExprNode`]): columns, literals (as one-row Arrow IPC,
//!   so every Arrow type round-trips exactly), operators, casts, CASE, IN,
//!   LIKE and DataFusion's built-in scalar functions by name;
//! * in-memory source batches travel as Arrow IPC streams;
//! * Rust closures (`map_batches`, process functions, custom watermark
//!   generators, user-defined aggregates, collect sinks) cannot travel:
//!   [`JobGraph::check_shippable`] names the operator and says why, and they
//!   run only in application mode, where every process is the user's binary.
//!
//! Expressions need the schema they were planned against (an `IN` list checks
//! its types, a function computes its return field): filter and projection
//! specs carry their input schema for that reason.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Field, FieldRef, Schema};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use base64::Engine;
use datafusion_common::ScalarValue;
use datafusion_common::config::ConfigOptions;
use datafusion_expr::{Operator, ScalarUDF};
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::ScalarFunctionExpr;
use datafusion_physical_expr::expressions::{
    BinaryExpr, CaseExpr, CastExpr, Column, InListExpr, IsNotNullExpr, IsNullExpr, LikeExpr,
    Literal, NegativeExpr, NotExpr, TryCastExpr,
};
use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Result, WeirError};
use crate::graph::{JobGraph, StreamNodeKind};
use crate::spec::{AggregateFunction, OperatorSpec};
use crate::time::WatermarkKind;

/// A physical expression as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ExprNode {
    /// Column `name` at `index` of the input.
    Column {
        /// Column name.
        name: String,
        /// Column index in the input schema.
        index: usize,
    },
    /// A constant, as a one-row Arrow IPC stream (base64).
    Literal {
        /// The encoded value.
        ipc: String,
    },
    /// `left op right`.
    Binary {
        /// Left operand.
        left: Box<ExprNode>,
        /// Operator name (`Eq`, `Plus`, `And`, …).
        op: String,
        /// Right operand.
        right: Box<ExprNode>,
    },
    /// `NOT arg`.
    Not {
        /// Operand.
        arg: Box<ExprNode>,
    },
    /// `-arg`.
    Negative {
        /// Operand.
        arg: Box<ExprNode>,
    },
    /// `arg IS NULL`.
    IsNull {
        /// Operand.
        arg: Box<ExprNode>,
    },
    /// `arg IS NOT NULL`.
    IsNotNull {
        /// Operand.
        arg: Box<ExprNode>,
    },
    /// `CAST(arg AS to)`; `safe` turns failures into NULL.
    Cast {
        /// Operand.
        arg: Box<ExprNode>,
        /// Target type.
        to: DataType,
        /// Failed casts give NULL instead of an error.
        safe: bool,
    },
    /// `TRY_CAST(arg AS to)`.
    TryCast {
        /// Operand.
        arg: Box<ExprNode>,
        /// Target type.
        to: DataType,
    },
    /// `CASE [operand] WHEN … THEN … [ELSE …] END`.
    Case {
        /// The operand of a simple CASE.
        operand: Option<Box<ExprNode>>,
        /// WHEN/THEN pairs.
        when_then: Vec<(ExprNode, ExprNode)>,
        /// ELSE branch.
        otherwise: Option<Box<ExprNode>>,
    },
    /// `arg [NOT] IN (list)`.
    InList {
        /// Operand.
        arg: Box<ExprNode>,
        /// Candidates.
        list: Vec<ExprNode>,
        /// `NOT IN`.
        negated: bool,
    },
    /// `arg [NOT] [I]LIKE pattern`.
    Like {
        /// Operand.
        arg: Box<ExprNode>,
        /// Pattern.
        pattern: Box<ExprNode>,
        /// `NOT LIKE`.
        negated: bool,
        /// `ILIKE`.
        case_insensitive: bool,
    },
    /// A DataFusion built-in scalar function, by name.
    Function {
        /// Function name.
        name: String,
        /// Arguments.
        args: Vec<ExprNode>,
        /// The planned result field.
        returns: Field,
    },
}

const OPERATORS: &[Operator] = &[
    Operator::Eq,
    Operator::NotEq,
    Operator::Lt,
    Operator::LtEq,
    Operator::Gt,
    Operator::GtEq,
    Operator::Plus,
    Operator::Minus,
    Operator::Multiply,
    Operator::Divide,
    Operator::Modulo,
    Operator::IntegerDivide,
    Operator::And,
    Operator::Or,
    Operator::IsDistinctFrom,
    Operator::IsNotDistinctFrom,
    Operator::RegexMatch,
    Operator::RegexIMatch,
    Operator::RegexNotMatch,
    Operator::RegexNotIMatch,
    Operator::LikeMatch,
    Operator::ILikeMatch,
    Operator::NotLikeMatch,
    Operator::NotILikeMatch,
    Operator::BitwiseAnd,
    Operator::BitwiseOr,
    Operator::BitwiseXor,
    Operator::BitwiseShiftRight,
    Operator::BitwiseShiftLeft,
    Operator::StringConcat,
];

fn functions() -> &'static HashMap<String, Arc<ScalarUDF>> {
    static REGISTRY: OnceLock<HashMap<String, Arc<ScalarUDF>>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut map = HashMap::new();
        for f in datafusion_functions::all_default_functions()
            .into_iter()
            .chain(crate::functions::flink_functions())
        {
            for alias in f.aliases() {
                map.insert(alias.clone(), Arc::clone(&f));
            }
            map.insert(f.name().to_string(), f);
        }
        map
    })
}

fn unsupported(expr: &dyn PhysicalExpr) -> WeirError {
    WeirError::plan(format!(
        "expression `{expr}` cannot be shipped to a cluster (only columns, literals, \
         operators, casts, CASE, IN, LIKE and built-in functions can); run the job in \
         application mode instead"
    ))
}

impl ExprNode {
    /// The data form of a planned expression.
    pub fn from_physical(expr: &Arc<dyn PhysicalExpr>) -> Result<Self> {
        let boxed = |e: &Arc<dyn PhysicalExpr>| Self::from_physical(e).map(Box::new);
        if let Some(c) = expr.downcast_ref::<Column>() {
            return Ok(ExprNode::Column {
                name: c.name().to_string(),
                index: c.index(),
            });
        }
        if let Some(l) = expr.downcast_ref::<Literal>() {
            return Ok(ExprNode::Literal {
                ipc: encode_scalar(l.value())?,
            });
        }
        if let Some(b) = expr.downcast_ref::<BinaryExpr>() {
            return Ok(ExprNode::Binary {
                left: boxed(b.left())?,
                op: format!("{:?}", b.op()),
                right: boxed(b.right())?,
            });
        }
        if let Some(n) = expr.downcast_ref::<NotExpr>() {
            return Ok(ExprNode::Not {
                arg: boxed(n.arg())?,
            });
        }
        if let Some(n) = expr.downcast_ref::<NegativeExpr>() {
            return Ok(ExprNode::Negative {
                arg: boxed(n.arg())?,
            });
        }
        if let Some(n) = expr.downcast_ref::<IsNullExpr>() {
            return Ok(ExprNode::IsNull {
                arg: boxed(n.arg())?,
            });
        }
        if let Some(n) = expr.downcast_ref::<IsNotNullExpr>() {
            return Ok(ExprNode::IsNotNull {
                arg: boxed(n.arg())?,
            });
        }
        if let Some(c) = expr.downcast_ref::<CastExpr>() {
            return Ok(ExprNode::Cast {
                arg: boxed(c.expr())?,
                to: c.cast_type().clone(),
                safe: c.cast_options().safe,
            });
        }
        if let Some(c) = expr.downcast_ref::<TryCastExpr>() {
            return Ok(ExprNode::TryCast {
                arg: boxed(c.expr())?,
                to: c.cast_type().clone(),
            });
        }
        if let Some(c) = expr.downcast_ref::<CaseExpr>() {
            return Ok(ExprNode::Case {
                operand: c.expr().map(boxed).transpose()?,
                when_then: c
                    .when_then_expr()
                    .iter()
                    .map(|(w, t)| Ok((Self::from_physical(w)?, Self::from_physical(t)?)))
                    .collect::<Result<_>>()?,
                otherwise: c.else_expr().map(boxed).transpose()?,
            });
        }
        if let Some(i) = expr.downcast_ref::<InListExpr>() {
            return Ok(ExprNode::InList {
                arg: boxed(i.expr())?,
                list: i
                    .list()
                    .iter()
                    .map(Self::from_physical)
                    .collect::<Result<_>>()?,
                negated: i.negated(),
            });
        }
        if let Some(l) = expr.downcast_ref::<LikeExpr>() {
            return Ok(ExprNode::Like {
                arg: boxed(l.expr())?,
                pattern: boxed(l.pattern())?,
                negated: l.negated(),
                case_insensitive: l.case_insensitive(),
            });
        }
        if let Some(f) = expr.downcast_ref::<ScalarFunctionExpr>() {
            let name = f.name().to_string();
            if !functions().contains_key(&name) {
                return Err(unsupported(expr.as_ref()));
            }
            return Ok(ExprNode::Function {
                name,
                args: f
                    .args()
                    .iter()
                    .map(Self::from_physical)
                    .collect::<Result<_>>()?,
                returns: f.return_field(&Schema::empty())?.as_ref().clone(),
            });
        }
        Err(unsupported(expr.as_ref()))
    }

    /// Rebuild the physical expression over `input`.
    pub fn to_physical(&self, input: &Schema) -> Result<Arc<dyn PhysicalExpr>> {
        let go = |e: &ExprNode| e.to_physical(input);
        Ok(match self {
            ExprNode::Column { name, index } => {
                match input.fields().get(*index) {
                    Some(f) if f.name() == name => {}
                    _ => {
                        return Err(WeirError::plan(format!(
                            "expression column '{name}' is not at index {index} of its input"
                        )));
                    }
                }
                Arc::new(Column::new(name, *index))
            }
            ExprNode::Literal { ipc } => Arc::new(Literal::new(decode_scalar(ipc)?)),
            ExprNode::Binary { left, op, right } => {
                let op = OPERATORS
                    .iter()
                    .find(|o| format!("{o:?}") == *op)
                    .ok_or_else(|| WeirError::plan(format!("unknown operator '{op}'")))?;
                Arc::new(BinaryExpr::new(go(left)?, *op, go(right)?))
            }
            ExprNode::Not { arg } => Arc::new(NotExpr::new(go(arg)?)),
            ExprNode::Negative { arg } => Arc::new(NegativeExpr::new(go(arg)?)),
            ExprNode::IsNull { arg } => Arc::new(IsNullExpr::new(go(arg)?)),
            ExprNode::IsNotNull { arg } => Arc::new(IsNotNullExpr::new(go(arg)?)),
            ExprNode::Cast { arg, to, safe } => Arc::new(CastExpr::new(
                go(arg)?,
                to.clone(),
                Some(arrow::compute::CastOptions {
                    safe: *safe,
                    ..Default::default()
                }),
            )),
            ExprNode::TryCast { arg, to } => Arc::new(TryCastExpr::new(go(arg)?, to.clone())),
            ExprNode::Case {
                operand,
                when_then,
                otherwise,
            } => Arc::new(CaseExpr::try_new(
                operand.as_deref().map(go).transpose()?,
                when_then
                    .iter()
                    .map(|(w, t)| Ok((go(w)?, go(t)?)))
                    .collect::<Result<_>>()?,
                otherwise.as_deref().map(go).transpose()?,
            )?),
            ExprNode::InList { arg, list, negated } => Arc::new(InListExpr::try_new(
                go(arg)?,
                list.iter().map(go).collect::<Result<_>>()?,
                *negated,
                input,
            )?),
            ExprNode::Like {
                arg,
                pattern,
                negated,
                case_insensitive,
            } => Arc::new(LikeExpr::new(
                *negated,
                *case_insensitive,
                go(arg)?,
                go(pattern)?,
            )),
            ExprNode::Function {
                name,
                args,
                returns,
            } => {
                let fun = functions()
                    .get(name)
                    .ok_or_else(|| WeirError::plan(format!("unknown scalar function '{name}'")))?;
                Arc::new(ScalarFunctionExpr::new(
                    name,
                    Arc::clone(fun),
                    args.iter().map(go).collect::<Result<_>>()?,
                    Arc::new(returns.clone()) as FieldRef,
                    Arc::new(ConfigOptions::default()),
                ))
            }
        })
    }
}

fn encode_batches(batches: &[RecordBatch], schema: &Schema) -> Result<String> {
    let mut buf = Vec::new();
    {
        let mut writer = StreamWriter::try_new(&mut buf, schema)?;
        for b in batches {
            writer.write(b)?;
        }
        writer.finish()?;
    }
    Ok(base64::engine::general_purpose::STANDARD.encode(buf))
}

fn decode_batches(text: &str) -> Result<Vec<RecordBatch>> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| WeirError::plan(format!("bad base64 in an Arrow IPC payload: {e}")))?;
    check_ipc_framing(&bytes)?;
    // arrow-ipc's reader trusts the offsets and lengths inside a message
    // and panics on some it cannot satisfy (found by fuzzing the job-graph
    // decoder); the payload comes from a client, so a panic there is a
    // malformed request, not a crash of the coordinator or a worker.
    crate::error::guard_decoder(
        || "an Arrow IPC payload of the job graph".into(),
        || {
            let reader = StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
            Ok(reader.collect::<std::result::Result<Vec<_>, _>>()?)
        },
    )
}

/// Walk the messages of an IPC stream before arrow-ipc reads it: every
/// message's flatbuffer must verify and its metadata and body must lie
/// within the payload. arrow-ipc allocates what a message's `bodyLength`
/// says before reading it, so a damaged length would otherwise ask for
/// hundreds of gigabytes and abort the process.
fn check_ipc_framing(bytes: &[u8]) -> Result<()> {
    let bad = |m: String| WeirError::plan(format!("malformed Arrow IPC payload: {m}"));
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    let mut pos = 0usize;
    while pos < bytes.len() {
        let Some(mut len) = word(pos) else {
            return Err(bad(format!("truncated message header at byte {pos}")));
        };
        pos += 4;
        if len == 0xFFFF_FFFF {
            len = word(pos).ok_or_else(|| bad(format!("truncated length at byte {pos}")))?;
            pos += 4;
        }
        if len == 0 {
            return Ok(());
        }
        let end = pos
            .checked_add(len as usize)
            .filter(|&e| e <= bytes.len() && (len as i32) > 0)
            .ok_or_else(|| {
                bad(format!(
                    "message at byte {pos} claims {len} bytes of metadata"
                ))
            })?;
        let message = arrow::ipc::root_as_message(&bytes[pos..end])
            .map_err(|e| bad(format!("message at byte {pos}: {e}")))?;
        pos = end;
        let body = message.bodyLength();
        let body_end = usize::try_from(body)
            .ok()
            .and_then(|b| pos.checked_add(b))
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| bad(format!("message body of {body} bytes at byte {pos}")))?;
        check_record_batch_bounds(&message, &bytes[pos..body_end])
            .map_err(|m| bad(format!("message at byte {pos}: {m}")))?;
        pos = body_end;
    }
    Ok(())
}

/// What a compressed batch's buffers may declare they hold uncompressed,
/// together: far above any batch Weir sends (2 MiB), low enough that a
/// damaged or hostile frame cannot make the decoder allocate without bound.
pub const MAX_DECOMPRESSED_BATCH: i64 = 1 << 30;

/// One IPC message as Arrow Flight carries it (`data_header`, and its
/// `body`): the flatbuffer verifies, the body is the length it declares,
/// and a batch's buffers and row counts fit it (a compressed batch's, what
/// its buffers declare uncompressed, within [`MAX_DECOMPRESSED_BATCH`]).
/// For frames from other processes, before arrow-ipc allocates by their
/// numbers.
pub fn check_ipc_message(header: &[u8], body: &[u8]) -> Result<()> {
    if header.is_empty() {
        return Ok(());
    }
    let bad = |m: String| WeirError::bad_input("an Arrow Flight frame", m);
    let message =
        arrow::ipc::root_as_message(header).map_err(|e| bad(format!("its header: {e}")))?;
    let declared = message.bodyLength();
    if usize::try_from(declared).ok() != Some(body.len()) {
        return Err(bad(format!(
            "its header declares a {declared}-byte body but it carries {} bytes",
            body.len()
        )));
    }
    check_record_batch_bounds(&message, body).map_err(bad)
}

/// The buffers of a record or dictionary batch lie inside its body, and
/// its row counts are what a body of that size can hold (a boolean column
/// packs 8 rows a byte; a compressed body, what it holds uncompressed):
/// arrow-ipc allocates by these numbers.
fn check_record_batch_bounds(
    message: &arrow::ipc::Message<'_>,
    body: &[u8],
) -> std::result::Result<(), String> {
    let batch = match message.header_type() {
        arrow::ipc::MessageHeader::RecordBatch => message.header_as_record_batch(),
        arrow::ipc::MessageHeader::DictionaryBatch => {
            message.header_as_dictionary_batch().and_then(|d| d.data())
        }
        _ => return Ok(()),
    };
    let Some(batch) = batch else {
        return Err("a batch message without its header".into());
    };
    let size = body.len() as i64;
    let mut holds = size;
    for buffer in batch.buffers().into_iter().flatten() {
        let inside = buffer.offset() >= 0
            && buffer.length() >= 0
            && buffer
                .offset()
                .checked_add(buffer.length())
                .is_some_and(|end| end <= size);
        if !inside {
            return Err(format!(
                "a buffer at {} of {} bytes outside the {size}-byte body",
                buffer.offset(),
                buffer.length()
            ));
        }
    }
    if batch.compression().is_some() {
        // Each non-empty buffer starts with the length it has
        // uncompressed (-1: stored as it is, after the prefix).
        let mut total: i64 = 0;
        for buffer in batch.buffers().into_iter().flatten() {
            if buffer.length() == 0 {
                continue;
            }
            let start = buffer.offset() as usize;
            let prefix = body
                .get(start..start + 8)
                .filter(|_| buffer.length() >= 8)
                .ok_or_else(|| {
                    format!("a compressed buffer at {start} without its length prefix")
                })?;
            let length = i64::from_le_bytes(prefix.try_into().expect("8 bytes"));
            let length = match length {
                -1 => buffer.length() - 8,
                n if n >= 0 => n,
                n => return Err(format!("a compressed buffer at {start} declares {n} bytes")),
            };
            total = total.saturating_add(length);
        }
        if total > MAX_DECOMPRESSED_BATCH {
            return Err(format!(
                "its compressed buffers declare {total} bytes uncompressed, more than \
                 {MAX_DECOMPRESSED_BATCH}"
            ));
        }
        holds = holds.max(total);
    }
    let rows_limit = holds.saturating_mul(8).saturating_add(1024);
    if batch.length() < 0 || batch.length() > rows_limit {
        return Err(format!("{} rows in a {holds}-byte body", batch.length()));
    }
    for node in batch.nodes().into_iter().flatten() {
        if node.length() < 0 || node.length() > rows_limit || node.null_count() < 0 {
            return Err(format!(
                "a column of {} rows in a {holds}-byte body",
                node.length()
            ));
        }
    }
    Ok(())
}

fn encode_scalar(value: &ScalarValue) -> Result<String> {
    let array: ArrayRef = value.to_array()?;
    let schema = Arc::new(Schema::new(vec![Field::new(
        "v",
        array.data_type().clone(),
        true,
    )]));
    let batch = RecordBatch::try_new(Arc::clone(&schema), vec![array])?;
    encode_batches(&[batch], &schema)
}

fn decode_scalar(text: &str) -> Result<ScalarValue> {
    let batches = decode_batches(text)?;
    match batches.first() {
        Some(b) if b.num_columns() == 1 && b.num_rows() == 1 => {
            Ok(ScalarValue::try_from_array(b.column(0), 0)?)
        }
        _ => Err(WeirError::plan("a literal must be one value")),
    }
}

/// Serde form of `Vec<RecordBatch>` as a base64 Arrow IPC stream (with
/// `#[serde(with = "crate::wire::batches")]`); an empty list is `null`.
pub mod batches {
    use super::*;

    /// Serialize.
    pub fn serialize<S: Serializer>(
        batches: &[RecordBatch],
        s: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        match batches.first() {
            None => s.serialize_none(),
            Some(first) => {
                let text = encode_batches(batches, &first.schema()).map_err(S::Error::custom)?;
                s.serialize_some(&text)
            }
        }
    }

    /// Deserialize.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<Vec<RecordBatch>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(vec![]),
            Some(text) => decode_batches(&text).map_err(D::Error::custom),
        }
    }
}

/// Serde form of a planned expression list with names.
fn exprs_to_nodes(exprs: &[(Arc<dyn PhysicalExpr>, String)]) -> Result<Vec<(ExprNode, String)>> {
    exprs
        .iter()
        .map(|(e, n)| Ok((ExprNode::from_physical(e)?, n.clone())))
        .collect()
}

#[derive(Serialize, Deserialize)]
struct ComputedSourceWire {
    inner: Box<crate::spec::SourceSpec>,
    exprs: Vec<(ExprNode, String)>,
}

impl Serialize for crate::spec::ComputedSourceSpec {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        ComputedSourceWire {
            inner: self.inner.clone(),
            exprs: exprs_to_nodes(&self.exprs).map_err(S::Error::custom)?,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for crate::spec::ComputedSourceSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let wire = ComputedSourceWire::deserialize(d)?;
        let input = wire.inner.schema();
        Ok(Self {
            exprs: wire
                .exprs
                .into_iter()
                .map(|(e, n)| Ok((e.to_physical(&input)?, n)))
                .collect::<Result<_>>()
                .map_err(D::Error::custom)?,
            inner: wire.inner,
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum OperatorWire {
    Filter {
        predicate: ExprNode,
        input_schema: Arc<Schema>,
    },
    Project {
        exprs: Vec<(ExprNode, String)>,
        input_schema: Arc<Schema>,
    },
    WindowAggregate(crate::spec::WindowAggregateSpec),
    IntervalJoin(crate::spec::IntervalJoinSpec),
    OverAggregate(crate::spec::OverAggregateSpec),
    MatchRecognize(crate::spec::MatchRecognizeSpec),
    RegularJoin {
        kind: crate::spec::JoinKind,
        left_keys: Vec<String>,
        right_keys: Vec<String>,
        left_schema: Arc<Schema>,
        right_schema: Arc<Schema>,
        residual: Option<ExprNode>,
        state_ttl_ms: Option<i64>,
        #[serde(default)]
        bounded: bool,
    },
    TemporalJoin {
        kind: crate::spec::JoinKind,
        left_keys: Vec<String>,
        right_keys: Vec<String>,
        left_rowtime: String,
        right_rowtime: String,
        left_schema: Arc<Schema>,
        right_schema: Arc<Schema>,
        residual: Option<ExprNode>,
    },
    Lateral {
        input_schema: Arc<Schema>,
        args: Vec<String>,
        function: String,
        names: Vec<String>,
        outer: bool,
    },
    WindowJoin(crate::spec::WindowJoinSpec),
    GroupAggregate(crate::spec::GroupAggregateSpec),
    TopN(crate::spec::TopNSpec),
    LookupJoin(crate::spec::LookupJoinSpec),
    WindowAssign(crate::spec::WindowAssignSpec),
    Sort(crate::spec::SortSpec),
}

/// A join's residual condition on the wire.
fn residual_node(r: &Option<Arc<dyn PhysicalExpr>>) -> Result<Option<ExprNode>> {
    r.as_ref().map(ExprNode::from_physical).transpose()
}

/// A join's residual condition from the wire, over `schema`.
fn residual_physical(
    r: Option<ExprNode>,
    schema: &Schema,
) -> Result<Option<Arc<dyn PhysicalExpr>>> {
    r.map(|r| r.to_physical(schema)).transpose()
}

/// Why a spec cannot leave this process, if it cannot.
fn closure_reason(spec: &OperatorSpec) -> Option<&'static str> {
    match spec {
        OperatorSpec::MapBatches(_) => Some("map_batches runs a Rust closure"),
        OperatorSpec::KeyedProcess(_) => Some("a process function is Rust code"),
        OperatorSpec::WindowProcess(_) => Some("a window process function is Rust code"),
        OperatorSpec::Lateral(l) => {
            (!l.function.builtin()).then_some("a user-defined table function is Rust code")
        }
        OperatorSpec::WindowAggregate(w) => w
            .aggregates
            .iter()
            .any(|a| matches!(a.function, AggregateFunction::Udf(_)))
            .then_some("a user-defined aggregate is Rust code"),
        OperatorSpec::OverAggregate(o) => o
            .aggregates
            .iter()
            .any(|a| matches!(a.function, AggregateFunction::Udf(_)))
            .then_some("a user-defined aggregate is Rust code"),
        OperatorSpec::GroupAggregate(g) => g
            .aggregates
            .iter()
            .any(|a| matches!(a.function, AggregateFunction::Udf(_)))
            .then_some("a user-defined aggregate is Rust code"),
        _ => None,
    }
}

impl Serialize for OperatorSpec {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let wire = match self {
            OperatorSpec::Filter {
                predicate,
                input_schema,
            } => OperatorWire::Filter {
                predicate: ExprNode::from_physical(predicate).map_err(S::Error::custom)?,
                input_schema: Arc::clone(input_schema),
            },
            OperatorSpec::Project {
                exprs,
                input_schema,
            } => OperatorWire::Project {
                exprs: exprs_to_nodes(exprs).map_err(S::Error::custom)?,
                input_schema: Arc::clone(input_schema),
            },
            OperatorSpec::WindowAggregate(w) if closure_reason(self).is_none() => {
                OperatorWire::WindowAggregate(w.clone())
            }
            OperatorSpec::IntervalJoin(j) => OperatorWire::IntervalJoin(j.clone()),
            OperatorSpec::MatchRecognize(m) => OperatorWire::MatchRecognize(m.clone()),
            OperatorSpec::OverAggregate(o) if closure_reason(self).is_none() => {
                OperatorWire::OverAggregate(o.clone())
            }
            OperatorSpec::RegularJoin(j) => OperatorWire::RegularJoin {
                kind: j.kind,
                left_keys: j.left_keys.clone(),
                right_keys: j.right_keys.clone(),
                left_schema: Arc::clone(&j.left_schema),
                right_schema: Arc::clone(&j.right_schema),
                residual: residual_node(&j.residual).map_err(S::Error::custom)?,
                state_ttl_ms: j.state_ttl_ms,
                bounded: j.bounded,
            },
            OperatorSpec::TemporalJoin(j) => OperatorWire::TemporalJoin {
                kind: j.kind,
                left_keys: j.left_keys.clone(),
                right_keys: j.right_keys.clone(),
                left_rowtime: j.left_rowtime.clone(),
                right_rowtime: j.right_rowtime.clone(),
                left_schema: Arc::clone(&j.left_schema),
                right_schema: Arc::clone(&j.right_schema),
                residual: residual_node(&j.residual).map_err(S::Error::custom)?,
            },
            OperatorSpec::Lateral(l) if closure_reason(self).is_none() => OperatorWire::Lateral {
                input_schema: Arc::clone(&l.input_schema),
                args: l.args.clone(),
                function: l.function.name().to_string(),
                names: l.names.clone(),
                outer: l.outer,
            },
            OperatorSpec::WindowJoin(j) => OperatorWire::WindowJoin(j.clone()),
            OperatorSpec::GroupAggregate(g) if closure_reason(self).is_none() => {
                OperatorWire::GroupAggregate(g.clone())
            }
            OperatorSpec::TopN(t) => OperatorWire::TopN(t.clone()),
            OperatorSpec::Sort(t) => OperatorWire::Sort(t.clone()),
            OperatorSpec::LookupJoin(l) => OperatorWire::LookupJoin(l.clone()),
            OperatorSpec::WindowAssign(w) => OperatorWire::WindowAssign(w.clone()),
            other => {
                return Err(S::Error::custom(format!(
                    "{other:?} cannot be shipped: {}",
                    closure_reason(other).unwrap_or("it is Rust code")
                )));
            }
        };
        wire.serialize(s)
    }
}

impl<'de> Deserialize<'de> for OperatorSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        Ok(match OperatorWire::deserialize(d)? {
            OperatorWire::Filter {
                predicate,
                input_schema,
            } => OperatorSpec::Filter {
                predicate: predicate
                    .to_physical(&input_schema)
                    .map_err(D::Error::custom)?,
                input_schema,
            },
            OperatorWire::Project {
                exprs,
                input_schema,
            } => OperatorSpec::Project {
                exprs: exprs
                    .into_iter()
                    .map(|(e, n)| Ok((e.to_physical(&input_schema)?, n)))
                    .collect::<Result<_>>()
                    .map_err(D::Error::custom)?,
                input_schema,
            },
            OperatorWire::WindowAggregate(w) => OperatorSpec::WindowAggregate(w),
            OperatorWire::IntervalJoin(j) => OperatorSpec::IntervalJoin(j),
            OperatorWire::OverAggregate(o) => OperatorSpec::OverAggregate(o),
            OperatorWire::MatchRecognize(m) => OperatorSpec::MatchRecognize(m),
            OperatorWire::RegularJoin {
                kind,
                left_keys,
                right_keys,
                left_schema,
                right_schema,
                residual,
                state_ttl_ms,
                bounded,
            } => {
                let mut spec = crate::spec::RegularJoinSpec {
                    kind,
                    left_keys,
                    right_keys,
                    left_schema,
                    right_schema,
                    residual: None,
                    state_ttl_ms,
                    bounded,
                };
                spec.residual =
                    residual_physical(residual, &spec.pair_schema()).map_err(D::Error::custom)?;
                OperatorSpec::RegularJoin(spec)
            }
            OperatorWire::TemporalJoin {
                kind,
                left_keys,
                right_keys,
                left_rowtime,
                right_rowtime,
                left_schema,
                right_schema,
                residual,
            } => {
                let mut spec = crate::spec::TemporalJoinSpec {
                    kind,
                    left_keys,
                    right_keys,
                    left_rowtime,
                    right_rowtime,
                    left_schema,
                    right_schema,
                    residual: None,
                };
                spec.residual =
                    residual_physical(residual, &spec.output_schema()).map_err(D::Error::custom)?;
                OperatorSpec::TemporalJoin(spec)
            }
            OperatorWire::Lateral {
                input_schema,
                args,
                function,
                names,
                outer,
            } => OperatorSpec::Lateral(crate::table_function::LateralSpec {
                input_schema,
                args,
                function: crate::table_function::builtin_table_function(&function).ok_or_else(
                    || D::Error::custom(format!("unknown built-in table function '{function}'")),
                )?,
                names,
                outer,
            }),
            OperatorWire::WindowJoin(j) => OperatorSpec::WindowJoin(j),
            OperatorWire::GroupAggregate(g) => OperatorSpec::GroupAggregate(g),
            OperatorWire::TopN(t) => OperatorSpec::TopN(t),
            OperatorWire::Sort(t) => OperatorSpec::Sort(t),
            OperatorWire::LookupJoin(l) => OperatorSpec::LookupJoin(l),
            OperatorWire::WindowAssign(w) => OperatorSpec::WindowAssign(w),
        })
    }
}

impl Serialize for AggregateFunction {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            AggregateFunction::Udf(u) => Err(S::Error::custom(format!(
                "user-defined aggregate '{}' is Rust code and cannot be shipped",
                u.name()
            ))),
            other => s.serialize_str(&other.name()),
        }
    }
}

impl<'de> Deserialize<'de> for AggregateFunction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Ok(match name.as_str() {
            "count" => AggregateFunction::Count,
            "count_distinct" => AggregateFunction::CountDistinct,
            "sum" => AggregateFunction::Sum,
            "min" => AggregateFunction::Min,
            "max" => AggregateFunction::Max,
            "avg" => AggregateFunction::Avg,
            "first_value" => AggregateFunction::FirstValue,
            "last_value" => AggregateFunction::LastValue,
            other => {
                return Err(D::Error::custom(format!(
                    "unknown aggregate function '{other}'"
                )));
            }
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum WatermarkWire {
    BoundedOutOfOrderness(std::time::Duration),
    Monotonous,
}

impl Serialize for WatermarkKind {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            WatermarkKind::BoundedOutOfOrderness(d) => {
                WatermarkWire::BoundedOutOfOrderness(*d).serialize(s)
            }
            WatermarkKind::Monotonous => WatermarkWire::Monotonous.serialize(s),
            WatermarkKind::Custom(_) => Err(S::Error::custom(
                "a custom watermark generator is Rust code and cannot be shipped",
            )),
        }
    }
}

impl<'de> Deserialize<'de> for WatermarkKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        Ok(match WatermarkWire::deserialize(d)? {
            WatermarkWire::BoundedOutOfOrderness(b) => WatermarkKind::BoundedOutOfOrderness(b),
            WatermarkWire::Monotonous => WatermarkKind::Monotonous,
        })
    }
}

impl JobGraph {
    /// Refuse, with the operator named, a job holding Rust code that cannot
    /// run outside this process (closures, process functions, custom
    /// watermark generators, user-defined aggregates, collect sinks).
    pub fn check_shippable(&self) -> Result<()> {
        for node in &self.nodes {
            let why = match &node.kind {
                StreamNodeKind::Operator(spec) => closure_reason(spec),
                StreamNodeKind::Source { watermarks, .. } => {
                    matches!(watermarks.generator, Some(WatermarkKind::Custom(_)))
                        .then_some("its custom watermark generator is Rust code")
                }
                StreamNodeKind::Sink(sink) if sink.local.is_some() => Some(
                    "its sink writes into an object of the submitting process (a collect sink)",
                ),
                StreamNodeKind::Sink(_) => None,
            };
            if let Some(why) = why {
                return Err(WeirError::plan(format!(
                    "operator '{}' cannot be submitted to a cluster: {why}. Rust code runs only \
                     in application mode (`weir run`, or execute() in your own binary)",
                    node.name
                )));
            }
        }
        Ok(())
    }

    /// The job as JSON, ready to submit.
    pub fn to_json(&self) -> Result<String> {
        self.check_shippable()?;
        serde_json::to_string(self)
            .map_err(|e| WeirError::plan(format!("cannot serialize job '{}': {e}", self.job_name)))
    }

    /// A job from its JSON form; errors name the line and column.
    pub fn from_json(text: &str) -> Result<Self> {
        let job: JobGraph = serde_json::from_str(text)
            .map_err(|e| WeirError::plan(format!("malformed job graph: {e}")))?;
        job.validate()?;
        Ok(job)
    }

    /// Checks of a job before anything of it is deployed: ids in range,
    /// edges between existing vertices, every node in exactly one vertex,
    /// then the configuration, the absence of cycles and every operator and
    /// partitioner against the schemas that reach it
    /// (`crate::graph::validate`). Graphs lowered from the DataStream API
    /// and SQL pass the same checks.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(WeirError::plan(format!("malformed job graph: {m}")));
        if self.vertices.is_empty() {
            return bad("it has no vertices".into());
        }
        let mut owner = vec![None; self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            if n.id != i {
                return bad(format!("node {i} has id {}", n.id));
            }
        }
        for (i, v) in self.vertices.iter().enumerate() {
            if v.id != i {
                return bad(format!("vertex {i} has id {}", v.id));
            }
            if v.parallelism == 0 {
                return bad(format!("vertex {i} ('{}') has parallelism 0", v.name));
            }
            if v.nodes.is_empty() {
                return bad(format!("vertex {i} has no nodes"));
            }
            for &n in &v.nodes {
                match owner.get_mut(n) {
                    None => return bad(format!("vertex {i} refers to missing node {n}")),
                    Some(Some(o)) => {
                        return bad(format!("node {n} is in vertices {o} and {i}"));
                    }
                    Some(slot) => *slot = Some(i),
                }
                if self.nodes[n].parallelism != v.parallelism {
                    return bad(format!(
                        "node {n} has parallelism {} inside vertex {i} of parallelism {}",
                        self.nodes[n].parallelism, v.parallelism
                    ));
                }
            }
        }
        if let Some(n) = owner.iter().position(Option::is_none) {
            return bad(format!("node {n} belongs to no vertex"));
        }
        for (i, e) in self.edges.iter().enumerate() {
            if e.source >= self.vertices.len() || e.target >= self.vertices.len() {
                return bad(format!(
                    "edge {i} connects vertex {} to vertex {}, but there are {} vertices",
                    e.source,
                    e.target,
                    self.vertices.len()
                ));
            }
            if e.partitioner == crate::graph::Partitioner::Forward
                && self.vertices[e.source].parallelism != self.vertices[e.target].parallelism
            {
                return bad(format!("forward edge {i} joins different parallelisms"));
            }
        }
        crate::graph::validate::check_topology(self)?;
        crate::graph::validate::check_nodes(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::expr::plan_expr;
    use arrow::array::{Int64Array, StringArray};
    use datafusion_expr::{col, lit};

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ])
    }

    fn batch() -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(schema()),
            vec![
                Arc::new(Int64Array::from(vec![1, 5, 12])),
                Arc::new(StringArray::from(vec![Some("x"), None, Some("yz")])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn expressions_round_trip_and_evaluate_the_same() {
        let s = schema();
        let exprs = vec![
            col("a").gt(lit(3)).and(col("s").is_not_null()),
            (col("a") + lit(2)) * lit(10),
            col("a").in_list(vec![lit(1i64), lit(12i64)], false),
            col("s").like(lit("y%")),
            datafusion_expr::cast(col("a"), DataType::Float64),
            datafusion_functions::expr_fn::upper(col("s")),
            datafusion_expr::when(col("a").lt(lit(5)), lit("small"))
                .otherwise(lit("big"))
                .unwrap(),
        ];
        for e in exprs {
            let physical = plan_expr(&e, &s).unwrap();
            let node = ExprNode::from_physical(&physical).unwrap();
            let json = serde_json::to_string(&node).unwrap();
            let back: ExprNode = serde_json::from_str(&json).unwrap();
            let rebuilt = back.to_physical(&s).unwrap();
            let want = physical.evaluate(&batch()).unwrap().into_array(3).unwrap();
            let got = rebuilt.evaluate(&batch()).unwrap().into_array(3).unwrap();
            assert_eq!(want.as_ref(), got.as_ref(), "{e}");
        }
    }

    #[test]
    fn temporal_and_lateral_joins_round_trip() {
        use crate::spec::{JoinKind, TemporalJoinSpec};
        let times = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new(
                "ts",
                DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, None),
                false,
            ),
        ]));
        let spec = TemporalJoinSpec {
            kind: JoinKind::Left,
            left_keys: vec!["k".into()],
            right_keys: vec!["k".into()],
            left_rowtime: "ts".into(),
            right_rowtime: "ts".into(),
            left_schema: Arc::clone(&times),
            right_schema: Arc::clone(&times),
            residual: None,
        };
        let residual = plan_expr(&col("k").gt(col("right_k")), &spec.output_schema()).unwrap();
        let spec = TemporalJoinSpec {
            residual: Some(residual),
            ..spec
        };
        let text = serde_json::to_string(&OperatorSpec::TemporalJoin(spec.clone())).unwrap();
        let back: OperatorSpec = serde_json::from_str(&text).unwrap();
        assert_eq!(format!("{back:?}"), format!("{spec:?}"));
        let list = Field::new_list("tags", Field::new("item", DataType::Utf8, true), true);
        let lateral = crate::table_function::LateralSpec {
            input_schema: Arc::new(Schema::new(vec![list])),
            args: vec!["tags".into()],
            function: crate::table_function::Unnest::arc(),
            names: vec!["tag".into()],
            outer: true,
        };
        let text = serde_json::to_string(&OperatorSpec::Lateral(lateral.clone())).unwrap();
        let back: OperatorSpec = serde_json::from_str(&text).unwrap();
        assert_eq!(format!("{back:?}"), format!("{lateral:?}"));
    }

    #[test]
    fn a_column_at_the_wrong_index_is_refused() {
        let node = ExprNode::Column {
            name: "s".into(),
            index: 0,
        };
        let err = node.to_physical(&schema()).unwrap_err().to_string();
        assert!(err.contains("'s' is not at index 0"), "{err}");
    }

    #[test]
    fn damaged_ipc_payloads_are_errors_not_panics() {
        use base64::Engine;
        let schema = Arc::new(schema());
        let text = encode_batches(&[batch()], &schema).unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&text)
            .unwrap();
        // Every byte of the stream set to values that make offsets and
        // lengths absurd (the fuzzer found 0x80 in an offset's top byte).
        for i in 0..bytes.len() {
            for v in [0x00, 0x7f, 0x80, 0xff] {
                let mut damaged = bytes.clone();
                damaged[i] = v;
                let text = base64::engine::general_purpose::STANDARD.encode(&damaged);
                let _ = decode_batches(&text);
            }
        }
    }

    #[test]
    // `encoded_batch` gives one message's header and body apart, as a
    // Flight frame carries them; its successor needs a write context.
    #[allow(deprecated)]
    fn flight_frames_are_checked_against_their_bodies() {
        use arrow::ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteOptions};
        let (_, encoded) = IpcDataGenerator::default()
            .encoded_batch(
                &batch(),
                &mut DictionaryTracker::new(false),
                &IpcWriteOptions::default(),
            )
            .unwrap();
        let (header, body) = (&encoded.ipc_message, &encoded.arrow_data);
        check_ipc_message(header, body).unwrap();
        let err = check_ipc_message(header, &body[8..])
            .unwrap_err()
            .to_string();
        assert!(err.contains("body"), "{err}");
        for i in 0..header.len() {
            for v in [0x00, 0x7f, 0x80, 0xff] {
                let mut damaged = header.clone();
                damaged[i] = v;
                let _ = check_ipc_message(&damaged, body);
            }
        }
    }

    /// A compressed batch of many rows in a small body passes; one whose
    /// buffers claim more than the limit uncompressed, or lack their
    /// length prefix, is refused before the decoder allocates.
    #[test]
    fn compressed_frames_are_checked_by_what_they_declare_uncompressed() {
        use arrow::ipc::CompressionType;
        use arrow::ipc::writer::{IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
        let many = RecordBatch::try_from_iter([(
            "v",
            Arc::new(Int64Array::from(vec![7i64; 100_000])) as ArrayRef,
        )])
        .unwrap();
        let options = IpcWriteOptions::default()
            .try_with_compression(Some(CompressionType::LZ4_FRAME))
            .unwrap();
        let (_, encoded) = IpcDataGenerator::default()
            .encode(
                &many,
                &mut arrow::ipc::writer::DictionaryTracker::new(false),
                &options,
                &mut IpcWriteContext::default(),
            )
            .unwrap();
        let (header, body) = (&encoded.ipc_message, &encoded.arrow_data);
        assert!(body.len() * 8 < 100_000, "{} bytes", body.len());
        check_ipc_message(header, body).unwrap();
        // The values buffer is the last: make it claim 2^40 bytes.
        let message = arrow::ipc::root_as_message(header).unwrap();
        let buffers = message.header_as_record_batch().unwrap().buffers().unwrap();
        let values = buffers.get(buffers.len() - 1);
        let mut bomb = body.clone();
        let at = values.offset() as usize;
        bomb[at..at + 8].copy_from_slice(&(1i64 << 40).to_le_bytes());
        let err = check_ipc_message(header, &bomb).unwrap_err().to_string();
        assert!(err.contains("uncompressed, more than"), "{err}");
        bomb[at..at + 8].copy_from_slice(&(-5i64).to_le_bytes());
        let err = check_ipc_message(header, &bomb).unwrap_err().to_string();
        assert!(err.contains("declares -5 bytes"), "{err}");
    }

    #[test]
    fn batches_round_trip() {
        #[derive(Serialize, Deserialize)]
        struct Holder {
            #[serde(with = "batches")]
            b: Vec<RecordBatch>,
        }
        let json = serde_json::to_string(&Holder {
            b: vec![batch(), batch()],
        })
        .unwrap();
        let back: Holder = serde_json::from_str(&json).unwrap();
        assert_eq!(back.b, vec![batch(), batch()]);
    }
}
