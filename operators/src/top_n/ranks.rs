//! One key's ranking: its kept rows in rank order, new rows ranked in, and
//! the changelog between the rows kept before and after a batch.
//!
//! Rows are compared by their row-encoded order columns (bytes compare as
//! the `ORDER BY` sorts) and then by arrival (the earlier row first, or the
//! later one when later rows win ties), so nothing is sorted per key and
//! no row is copied: a ranking names rows as [`Src`] — one kept before the
//! batch, or a row of the batch — and the operator gathers the rows of all
//! keys' changes at once.

use std::cmp::Ordering;

use weir_core::Result;
use weir_core::changelog::RowKind;

/// A row kept for a key.
pub(super) struct Kept {
    /// The row-encoded order columns.
    pub order: Box<[u8]>,
    /// Arrival number (ties).
    pub seq: u64,
    /// Where the row is stored.
    pub slot: u32,
}

/// A row in a key's ranking while a batch goes through: the key's kept
/// row at this index of its old ranking, or a row of the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Src {
    Old(u32),
    New(u32),
}

/// A change to send: which row, its row number, its kind.
pub(super) struct Change {
    pub src: Src,
    pub number: u64,
    pub kind: RowKind,
}

/// How rows rank.
#[derive(Clone, Copy)]
pub(super) struct Rule {
    pub limit: usize,
    pub later_wins_ties: bool,
    /// Output carries row numbers: a row's position is part of it.
    pub row_number: bool,
}

impl Rule {
    /// Whether row `a` ranks before row `b`.
    pub fn before(&self, a: (&[u8], u64), b: (&[u8], u64)) -> bool {
        match a.0.cmp(b.0) {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal if self.later_wins_ties => a.1 > b.1,
            Ordering::Equal => a.1 < b.1,
        }
    }

    /// Rank the batch's rows `rows` (arrival order) into `ranking` (the
    /// key's old rows, `Src::Old(0..)`), cut to the limit.
    pub fn rank_in<'a>(
        &self,
        ranking: &mut Vec<Src>,
        rows: &[u32],
        order: &dyn Fn(Src) -> (&'a [u8], u64),
    ) {
        for &r in rows {
            let new = order(Src::New(r));
            // A full ranking whose last row ranks before the new one keeps
            // it out: one comparison for most rows of a long-running key.
            if ranking.len() >= self.limit
                && let Some(&last) = ranking.last()
                && self.before(order(last), new)
            {
                continue;
            }
            let at = ranking.partition_point(|&c| self.before(order(c), new));
            if at < self.limit {
                ranking.insert(at, Src::New(r));
                ranking.truncate(self.limit);
            }
        }
    }

    /// Keep-last deduplication (limit 1, later rows win ties): row by row
    /// in arrival order, each row not ranking after the current one
    /// replaces it, sent as `-U`/`+U` (as Flink's deduplicate function
    /// does: a batch does not fold a key's versions into one). Returns the
    /// row kept.
    pub fn keep_last<'a>(
        &self,
        has_old: bool,
        rows: &[u32],
        order: &dyn Fn(Src) -> (&'a [u8], u64),
        out: &mut Vec<Change>,
    ) -> Option<Src> {
        let mut current = has_old.then_some(Src::Old(0));
        for &r in rows {
            let new = Src::New(r);
            match current {
                Some(c) if order(new).0 > order(c).0 => continue,
                Some(c) => {
                    out.push(change(c, 1, RowKind::UpdateBefore));
                    out.push(change(new, 1, RowKind::UpdateAfter));
                }
                None => out.push(change(new, 1, RowKind::Insert)),
            }
            current = Some(new);
        }
        current
    }

    /// The changes from the key's `old` rows (`Src::Old(0..old)`) to
    /// `new`, compared as multisets of rows (with their positions when
    /// numbered): a row that left is `-D`, or `-U` when the same row stays
    /// at another position or its rank gets another row; one that entered
    /// is `+I` or `+U` likewise. `same` says whether two rows are equal
    /// (asked only for distinct rows with equal order columns).
    pub fn changes<'a>(
        &self,
        old: usize,
        new: &[Src],
        order: &dyn Fn(Src) -> (&'a [u8], u64),
        same: &mut dyn FnMut(Src, Src) -> Result<bool>,
        out: &mut Vec<Change>,
    ) -> Result<()> {
        let unchanged = new.len() == old
            && new
                .iter()
                .enumerate()
                .all(|(i, &s)| s == Src::Old(i as u32));
        if unchanged {
            return Ok(());
        }
        let numbered = self.row_number;
        // By identity first: an old row stays when it is in the new
        // ranking (at its position, when numbered).
        let stays = |i: usize| -> bool {
            if numbered {
                new.get(i) == Some(&Src::Old(i as u32))
            } else {
                new.contains(&Src::Old(i as u32))
            }
        };
        let mut removed: Vec<usize> = (0..old).filter(|&i| !stays(i)).collect();
        let mut added: Vec<usize> = (0..new.len())
            .filter(|&p| match new[p] {
                Src::Old(i) => numbered && i as usize != p,
                Src::New(_) => true,
            })
            .collect();
        let mut equal = |a: Src, b: Src| -> Result<bool> {
            if a == b {
                return Ok(true);
            }
            if order(a).0 != order(b).0 {
                return Ok(false);
            }
            same(a, b)
        };
        // Then by content: a removed row and an added one that are equal
        // (at the same position, when numbered) cancel out.
        let mut r = 0;
        while r < removed.len() {
            let i = removed[r];
            let mut matched = None;
            for (k, &p) in added.iter().enumerate() {
                if (!numbered || p == i) && equal(Src::Old(i as u32), new[p])? {
                    matched = Some(k);
                    break;
                }
            }
            match matched {
                Some(k) => {
                    removed.remove(r);
                    added.remove(k);
                }
                None => r += 1,
            }
        }
        // A rank whose row changed is updated in place when ranks are
        // numbered or there is one (deduplication), as Flink's rank and
        // deduplicate functions send -U/+U for it.
        let at_rank = numbered || self.limit == 1;
        for &i in &removed {
            let mut update = at_rank && added.contains(&i);
            if !update {
                for &s in new {
                    if equal(Src::Old(i as u32), s)? {
                        update = true;
                        break;
                    }
                }
            }
            let kind = if update {
                RowKind::UpdateBefore
            } else {
                RowKind::Delete
            };
            out.push(change(Src::Old(i as u32), i as u64 + 1, kind));
        }
        for &p in &added {
            let mut update = at_rank && removed.contains(&p);
            if !update {
                update = match new[p] {
                    Src::Old(_) => true,
                    s @ Src::New(_) => {
                        let mut found = false;
                        for i in 0..old {
                            if equal(Src::Old(i as u32), s)? {
                                found = true;
                                break;
                            }
                        }
                        found
                    }
                };
            }
            let kind = if update {
                RowKind::UpdateAfter
            } else {
                RowKind::Insert
            };
            out.push(change(new[p], p as u64 + 1, kind));
        }
        Ok(())
    }
}

fn change(src: Src, number: u64, kind: RowKind) -> Change {
    Change { src, number, kind }
}
