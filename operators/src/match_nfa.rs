//! The automaton behind `MATCH_RECOGNIZE`: a pattern compiled to a small
//! program (rows, splits, jumps, accept), run over a partition's rows one at
//! a time with every partial match — one per start row, forked at each
//! choice — alive at once, as Flink's CEP NFA runs them:
//!
//! * a greedy quantifier never leaves a row its variable accepts to what
//!   follows (no backtracking), a reluctant one tries what follows first;
//! * a match is reported once no partial match that started before it is
//!   still alive, earliest start first, and then `AFTER MATCH SKIP` drops
//!   the partial and found matches it skips;
//! * `WITHIN`: a partial match dies when a row (or the watermark) is that
//!   long after its first row.
//!
//! Conditions are not evaluated here: each step asks its caller for the
//! (partial match, variable) pairs it needs, all at once, so the caller can
//! evaluate them over a batch.

use weir_core::match_spec::{AfterMatchSkip, MatchPattern};

/// One instruction of a compiled pattern.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Inst {
    /// Take one row into the variable.
    Row(usize),
    /// Try `first`, then `second`; `exclusive`: skip `second` when a row
    /// reachable through `first` accepts the current row (greedy).
    Split {
        first: usize,
        second: usize,
        exclusive: bool,
    },
    /// Go on at.
    Jmp(usize),
    /// The pattern matched.
    Accept,
}

/// Repetitions unrolled beyond this are refused.
const MAX_UNROLLED: u32 = 1000;

/// A rows mapped so far: (row sequence number, variable).
pub(crate) type Mapped = Vec<(u64, u16)>;

/// A partial match.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Thread {
    /// Sequence number of its first row.
    pub(crate) start: u64,
    /// Time of its first row.
    pub(crate) start_ts: i64,
    /// Where it is in the program.
    pub(crate) pc: usize,
    /// Its rows.
    pub(crate) rows: Mapped,
}

/// A complete match, waiting until no earlier partial match is alive.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Found {
    /// Sequence number of its first row.
    pub(crate) start: u64,
    /// In the order matches were found.
    pub(crate) order: u64,
    /// Its rows.
    pub(crate) rows: Mapped,
}

/// The matching state of one partition.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Run {
    /// Partial matches, in priority order.
    pub(crate) threads: Vec<Thread>,
    /// Complete matches not reported yet.
    pub(crate) found: Vec<Found>,
    /// Next [`Found::order`].
    pub(crate) counter: u64,
}

impl Run {
    /// The earliest row any partial or waiting match still needs.
    pub(crate) fn first_needed(&self) -> Option<u64> {
        let t = self.threads.iter().map(|t| t.start);
        let f = self.found.iter().map(|f| f.start);
        t.chain(f).min()
    }
}

/// A compiled pattern with its skip strategy and time limit.
#[derive(Debug)]
pub(crate) struct Nfa {
    insts: Vec<Inst>,
    /// Per instruction: the variables of the rows reachable from it
    /// without taking a row (every branch).
    reach: Vec<Vec<usize>>,
    /// Per instruction: whether the pattern can end there.
    accepting: Vec<bool>,
    skip: AfterMatchSkip,
    within: Option<i64>,
    variables: usize,
}

fn compile(p: &MatchPattern, out: &mut Vec<Inst>) -> Result<(), String> {
    match p {
        MatchPattern::Var(v) => out.push(Inst::Row(*v)),
        MatchPattern::Concat(parts) => {
            for part in parts {
                compile(part, out)?;
            }
        }
        MatchPattern::Alternation(parts) => {
            let mut jumps = vec![];
            for (i, part) in parts.iter().enumerate() {
                if i + 1 < parts.len() {
                    let split = out.len();
                    out.push(Inst::Jmp(0));
                    compile(part, out)?;
                    jumps.push(out.len());
                    out.push(Inst::Jmp(0));
                    out[split] = Inst::Split {
                        first: split + 1,
                        second: out.len(),
                        exclusive: false,
                    };
                } else {
                    compile(part, out)?;
                }
            }
            let end = out.len();
            for j in jumps {
                out[j] = Inst::Jmp(end);
            }
        }
        MatchPattern::Repeat {
            inner,
            min,
            max,
            greedy,
        } => {
            if max.unwrap_or(*min) > MAX_UNROLLED || *min > MAX_UNROLLED {
                return Err(format!(
                    "a quantifier above {MAX_UNROLLED} repetitions is not supported"
                ));
            }
            for _ in 0..*min {
                compile(inner, out)?;
            }
            let split = |out: &mut Vec<Inst>, at: usize, body: usize, exit: usize| {
                out[at] = if *greedy {
                    Inst::Split {
                        first: body,
                        second: exit,
                        exclusive: true,
                    }
                } else {
                    Inst::Split {
                        first: exit,
                        second: body,
                        exclusive: false,
                    }
                };
            };
            match max {
                None => {
                    let at = out.len();
                    out.push(Inst::Jmp(0));
                    compile(inner, out)?;
                    out.push(Inst::Jmp(at));
                    let exit = out.len();
                    split(out, at, at + 1, exit);
                }
                Some(m) => {
                    let mut splits = vec![];
                    for _ in *min..*m {
                        splits.push(out.len());
                        out.push(Inst::Jmp(0));
                        compile(inner, out)?;
                    }
                    let exit = out.len();
                    for at in splits {
                        split(out, at, at + 1, exit);
                    }
                }
            }
        }
    }
    Ok(())
}

impl Nfa {
    /// Compile `pattern` over `variables` variables.
    pub(crate) fn new(
        pattern: &MatchPattern,
        variables: usize,
        skip: AfterMatchSkip,
        within: Option<i64>,
    ) -> Result<Self, String> {
        let mut insts = vec![];
        compile(pattern, &mut insts)?;
        insts.push(Inst::Accept);
        let mut nfa = Self {
            reach: vec![],
            accepting: vec![],
            insts,
            skip,
            within,
            variables,
        };
        for pc in 0..nfa.insts.len() {
            let mut vars = vec![];
            let mut accept = false;
            nfa.walk(pc, &mut vec![false; nfa.insts.len()], &mut |i| match i {
                Inst::Row(v) => vars.push(v),
                Inst::Accept => accept = true,
                _ => {}
            });
            vars.sort_unstable();
            vars.dedup();
            nfa.reach.push(vars);
            nfa.accepting.push(accept);
        }
        Ok(nfa)
    }

    /// Visit the rows and accepts reachable from `pc` without taking a
    /// row, on every branch.
    fn walk(&self, pc: usize, seen: &mut Vec<bool>, f: &mut dyn FnMut(Inst)) {
        if seen[pc] {
            return;
        }
        seen[pc] = true;
        match self.insts[pc] {
            Inst::Jmp(to) => self.walk(to, seen, f),
            Inst::Split { first, second, .. } => {
                self.walk(first, seen, f);
                self.walk(second, seen, f);
            }
            other => f(other),
        }
    }

    /// The row instructions a partial match at `pc` takes the current row
    /// into, in priority order: `accepts(v)` says whether variable `v`
    /// accepts it (a greedy split drops its exit when its body does).
    fn leaves(
        &self,
        pc: usize,
        seen: &mut Vec<bool>,
        accepts: &dyn Fn(usize) -> bool,
        out: &mut Vec<usize>,
    ) {
        if seen[pc] {
            return;
        }
        seen[pc] = true;
        match self.insts[pc] {
            Inst::Row(v) => {
                if accepts(v) {
                    out.push(pc);
                }
            }
            Inst::Accept => {}
            Inst::Jmp(to) => self.leaves(to, seen, accepts, out),
            Inst::Split {
                first,
                second,
                exclusive,
            } => {
                let before = out.len();
                self.leaves(first, seen, accepts, out);
                if exclusive && out.len() > before {
                    return;
                }
                self.leaves(second, seen, accepts, out);
            }
        }
    }

    /// `WITHIN`, ms.
    pub(crate) fn within(&self) -> Option<i64> {
        self.within
    }

    /// Take the row `seq` at time `ts`: partial matches it times out die,
    /// one starts at it, and each takes it where its variable accepts it.
    /// `accepts(threads, asks)` answers, for each (partial match index,
    /// variable) pair asked, whether the variable accepts the row with that
    /// partial match's rows before it. Matches ready to report are
    /// appended to `out`.
    pub(crate) fn step<E>(
        &self,
        run: &mut Run,
        seq: u64,
        ts: i64,
        accepts: E,
        out: &mut Vec<Found>,
    ) -> weir_core::Result<()>
    where
        E: FnOnce(&[Thread], &[(usize, usize)]) -> weir_core::Result<Vec<bool>>,
    {
        if let Some(w) = self.within {
            run.threads.retain(|t| ts.saturating_sub(t.start_ts) < w);
        }
        run.threads.push(Thread {
            start: seq,
            start_ts: ts,
            pc: 0,
            rows: vec![],
        });
        let n = self.variables;
        let mut asks = vec![];
        for (i, t) in run.threads.iter().enumerate() {
            asks.extend(self.reach[t.pc].iter().map(|&v| (i, v)));
        }
        let answers = accepts(&run.threads, &asks)?;
        let mut table = vec![false; run.threads.len() * n];
        for (&(i, v), ok) in asks.iter().zip(answers) {
            table[i * n + v] = ok;
        }
        let mut next = Vec::with_capacity(run.threads.len());
        let mut seen = vec![false; self.insts.len()];
        let mut leaves = vec![];
        for (i, t) in std::mem::take(&mut run.threads).into_iter().enumerate() {
            seen.iter_mut().for_each(|s| *s = false);
            leaves.clear();
            let row = &table[i * n..(i + 1) * n];
            self.leaves(t.pc, &mut seen, &|v| row[v], &mut leaves);
            for &leaf in &leaves {
                let Inst::Row(v) = self.insts[leaf] else {
                    unreachable!("leaves are rows")
                };
                let mut rows = t.rows.clone();
                rows.push((seq, v as u16));
                let pc = leaf + 1;
                if self.accepting[pc] {
                    run.found.push(Found {
                        start: t.start,
                        order: run.counter,
                        rows: rows.clone(),
                    });
                    run.counter += 1;
                }
                if !self.reach[pc].is_empty() {
                    next.push(Thread {
                        start: t.start,
                        start_ts: t.start_ts,
                        pc,
                        rows,
                    });
                }
            }
        }
        run.threads = next;
        self.report(run, out);
        Ok(())
    }

    /// The watermark reached `w`: partial matches it times out die, which
    /// may let waiting matches be reported.
    pub(crate) fn advance(&self, run: &mut Run, w: i64, out: &mut Vec<Found>) {
        if let Some(within) = self.within {
            let before = run.threads.len();
            run.threads
                .retain(|t| w.saturating_sub(t.start_ts) < within);
            if run.threads.len() < before {
                self.report(run, out);
            }
        }
    }

    /// Report waiting matches, earliest start first, while no partial
    /// match started before them; each skips what its strategy skips.
    fn report(&self, run: &mut Run, out: &mut Vec<Found>) {
        loop {
            let Some((at, best)) = run
                .found
                .iter()
                .enumerate()
                .min_by_key(|(_, f)| (f.start, f.order))
            else {
                return;
            };
            if run.threads.iter().any(|t| t.start < best.start) {
                return;
            }
            let m = run.found.remove(at);
            let first = m.start;
            let next_row = move |s: u64| s != first;
            let keep: Box<dyn Fn(u64) -> bool> = match self.skip {
                AfterMatchSkip::PastLastRow => {
                    let last = m.rows.last().map_or(m.start, |r| r.0);
                    Box::new(move |s| s > last)
                }
                AfterMatchSkip::ToNextRow => Box::new(next_row),
                AfterMatchSkip::ToFirst(v) | AfterMatchSkip::ToLast(v) => {
                    let mut of_v = m.rows.iter().filter(|r| r.1 as usize == v).map(|r| r.0);
                    let target = if matches!(self.skip, AfterMatchSkip::ToFirst(_)) {
                        of_v.next()
                    } else {
                        of_v.next_back()
                    };
                    match target {
                        // Resuming at the match's own first row would find
                        // it again: go on at the next row instead.
                        Some(t) if t > m.start => Box::new(move |s| s >= t),
                        _ => Box::new(next_row),
                    }
                }
            };
            run.threads.retain(|t| keep(t.start));
            run.found.retain(|f| keep(f.start));
            out.push(m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(v: usize) -> MatchPattern {
        MatchPattern::Var(v)
    }

    fn rep(p: MatchPattern, min: u32, max: Option<u32>, greedy: bool) -> MatchPattern {
        MatchPattern::Repeat {
            inner: Box::new(p),
            min,
            max,
            greedy,
        }
    }

    /// Feed rows whose accepted variables are given per row (conditions
    /// that depend only on the row) to `nfa`, row `i` at time `i`.
    fn feed(nfa: &Nfa, state: &mut Run, rows: &[&[usize]], out: &mut Vec<Found>) {
        for (i, ok) in rows.iter().enumerate() {
            let accepts = |_: &[Thread], asks: &[(usize, usize)]| {
                Ok(asks.iter().map(|(_, v)| ok.contains(v)).collect())
            };
            nfa.step(state, i as u64, i as i64, accepts, out).unwrap();
        }
    }

    /// Run `pattern` over `rows`: the matches' rows.
    fn run(pattern: MatchPattern, skip: AfterMatchSkip, rows: &[&[usize]]) -> Vec<Vec<(u64, u16)>> {
        let mut vars = vec![];
        pattern.variables(&mut vars);
        let n = vars.iter().max().unwrap() + 1;
        let nfa = Nfa::new(&pattern, n, skip, None).unwrap();
        let mut out = vec![];
        feed(&nfa, &mut Run::default(), rows, &mut out);
        out.into_iter().map(|f| f.rows).collect()
    }

    #[test]
    fn greedy_quantifiers_do_not_give_back_a_row() {
        // A B+ C, B and C both accept row 2: greedy B keeps it, and row 3
        // is neither, so nothing matches (Flink's CEP does the same).
        let p = MatchPattern::Concat(vec![var(0), rep(var(1), 1, None, true), var(2)]);
        let rows: &[&[usize]] = &[&[0], &[1], &[1, 2], &[]];
        assert!(run(p.clone(), AfterMatchSkip::ToNextRow, rows).is_empty());
        let rows: &[&[usize]] = &[&[0], &[1], &[1], &[2]];
        assert_eq!(
            run(p, AfterMatchSkip::PastLastRow, rows),
            vec![vec![(0, 0), (1, 1), (2, 1), (3, 2)]]
        );
    }

    #[test]
    fn reluctant_quantifiers_take_the_shortest_match() {
        // A B*? C with every row accepted by B and C: C comes at once.
        let p = MatchPattern::Concat(vec![var(0), rep(var(1), 0, None, false), var(2)]);
        let rows: &[&[usize]] = &[&[0], &[1, 2], &[1, 2]];
        assert_eq!(
            run(p, AfterMatchSkip::PastLastRow, rows),
            vec![vec![(0, 0), (1, 2)]]
        );
    }

    #[test]
    fn skip_strategies_choose_where_matching_resumes() {
        let p = MatchPattern::Concat(vec![var(0), var(1)]);
        let all: &[&[usize]] = &[&[0, 1], &[0, 1], &[0, 1], &[0, 1]];
        assert_eq!(run(p.clone(), AfterMatchSkip::ToNextRow, all).len(), 3);
        assert_eq!(run(p.clone(), AfterMatchSkip::PastLastRow, all).len(), 2);
        assert_eq!(run(p.clone(), AfterMatchSkip::ToLast(1), all).len(), 3);
        // TO FIRST A would find the same match again: the next row instead.
        assert_eq!(run(p, AfterMatchSkip::ToFirst(0), all).len(), 3);
    }

    #[test]
    fn bounded_quantifiers_and_alternation() {
        // A B{2,3}: B exactly 2 or 3 times, then C.
        let p = MatchPattern::Concat(vec![var(0), rep(var(1), 2, Some(3), true), var(2)]);
        let rows: &[&[usize]] = &[&[0], &[1], &[2], &[0], &[1], &[1], &[1], &[2]];
        assert_eq!(
            run(p, AfterMatchSkip::PastLastRow, rows),
            vec![vec![(3, 0), (4, 1), (5, 1), (6, 1), (7, 2)]]
        );
        // A (B | C) D: the leftmost alternative that goes on.
        let p = MatchPattern::Concat(vec![
            var(0),
            MatchPattern::Alternation(vec![var(1), var(2)]),
            var(3),
        ]);
        let rows: &[&[usize]] = &[&[0], &[2], &[3], &[0], &[1, 2], &[3]];
        assert_eq!(
            run(p, AfterMatchSkip::PastLastRow, rows),
            vec![vec![(0, 0), (1, 2), (2, 3)], vec![(3, 0), (4, 1), (5, 3)]]
        );
    }

    #[test]
    fn an_earlier_partial_match_holds_later_matches_back() {
        // A B C | D: a match of D alone waits while A B is going on.
        let p = MatchPattern::Alternation(vec![
            MatchPattern::Concat(vec![var(0), var(1), var(2)]),
            var(3),
        ]);
        let nfa = Nfa::new(&p, 4, AfterMatchSkip::PastLastRow, Some(10)).unwrap();
        let mut state = Run::default();
        let mut out = vec![];
        feed(&nfa, &mut state, &[&[0], &[1, 3]], &mut out);
        assert!(out.is_empty(), "{out:?}");
        // WITHIN: the watermark times the partial match out.
        nfa.advance(&mut state, 10, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].rows, vec![(1, 3)]);
    }
}
