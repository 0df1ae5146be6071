//! A batch's changes: the rows they name, put in arrival order when that
//! lets them come from the batch as it is, and the rows taken from it.

use arrow::array::RecordBatch;
use arrow::compute::SortOptions;
use weir_core::Result;
use weir_core::changelog::RowKind;

use crate::row_store::Ref;

/// Whether two rows of one schema hold equal values (nulls equal).
pub(super) fn rows_equal(a: (&RecordBatch, usize), b: (&RecordBatch, usize)) -> Result<bool> {
    for (x, y) in a.0.columns().iter().zip(b.0.columns()) {
        let cmp = arrow::array::make_comparator(x.as_ref(), y.as_ref(), SortOptions::default())?;
        if cmp(a.1, b.1).is_ne() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The changes of one batch, rows named for one gather.
#[derive(Default)]
pub(super) struct Changes {
    pub refs: Vec<Ref>,
    pub numbers: Vec<u64>,
    pub kinds: Vec<RowKind>,
}

impl Changes {
    /// Put the changes in the order `order` names (indices into them).
    pub fn reorder(&mut self, order: &[u32]) {
        self.refs = order.iter().map(|&i| self.refs[i as usize]).collect();
        self.numbers = order.iter().map(|&i| self.numbers[i as usize]).collect();
        self.kinds = order.iter().map(|&i| self.kinds[i as usize]).collect();
    }
}

/// When every change is a distinct row of the batch (of `rows` rows): the
/// changes' indices in arrival order, unless they are in it already. The
/// caller knows each key's changes are in arrival order: changes of
/// different keys may go in any order, a key's must not.
pub(super) fn arrival_order(refs: &[Ref], rows: usize) -> Option<Vec<u32>> {
    if refs.iter().any(|r| matches!(r, Ref::Stored(_))) {
        return None;
    }
    let mut at = vec![u32::MAX; rows];
    let mut sorted = true;
    let mut last = None;
    for (i, r) in refs.iter().enumerate() {
        let Ref::Extra(row) = *r else { return None };
        if at[row] != u32::MAX {
            return None;
        }
        at[row] = i as u32;
        sorted &= last.is_none_or(|l| l < row);
        last = Some(row);
    }
    if sorted {
        return None;
    }
    Some(at.into_iter().filter(|&i| i != u32::MAX).collect())
}
