//! [`FailureGuard`]: stop a loader whose samples mostly fail, instead of training on nothing.
//!
//! The assembler feeds it every sample outcome in stream order (so when it trips is a pure
//! function of the data and the config): each failed attempt (a replaced or invalid slot's
//! failures) and each success. Once `failure_window` outcomes are in (or at the end of an eval
//! pass, however many there were) and more than `max_failure_fraction` of the last
//! `failure_window` failed, the loader stops with [`Error::TooManyFailures`], naming the most
//! common kind of error and example rows. Not judging fewer samples keeps small datasets with one
//! bad row (seen twice: once failing, once as a replacement candidate) from tripping it early.
//!
//! Defaults (0.1 over 512): 512 samples are one or two batches, so a broken dataset fails within
//! seconds; a healthy archive loses well under 1 % (with 1 % failing, the failed count in 512 has
//! a standard deviation of 2.2, so 52 = 10 % is ~20 deviations away: no false alarms).

use std::collections::{HashMap, VecDeque};

use super::Failure;
use crate::error::{Error, Result};
use crate::shards::Dataset;

pub(super) struct FailureGuard {
    window: usize,
    max_fraction: f64,
    recent: VecDeque<Option<Failure>>,
    n_failed: usize,
    seen: u64,
}

impl FailureGuard {
    pub(super) fn new(window: usize, max_fraction: f64) -> Self {
        let window = window.max(1);
        FailureGuard {
            window,
            max_fraction,
            recent: VecDeque::with_capacity(window),
            n_failed: 0,
            seen: 0,
        }
    }

    fn push(&mut self, outcome: Option<Failure>) {
        if self.recent.len() == self.window {
            if let Some(Some(_)) = self.recent.pop_front() {
                self.n_failed -= 1;
            }
        }
        self.n_failed += outcome.is_some() as usize;
        self.recent.push_back(outcome);
        self.seen += 1;
    }

    /// Record one slot: its failed attempts, then its success (if it has one).
    pub(super) fn record(&mut self, failures: &[Failure], success: bool) {
        for f in failures {
            self.push(Some(f.clone()));
        }
        if success {
            self.push(None);
        }
    }

    /// `Err(TooManyFailures)` once the window is full and holds too many failures; with
    /// `end` (an eval pass is over), whatever the window holds is judged.
    pub(super) fn check(&self, ds: &Dataset, end: bool) -> Result<()> {
        let n = self.recent.len();
        let judged = n == self.window || (end && n > 0);
        if !judged || (self.n_failed as f64) <= self.max_fraction * n as f64 {
            return Ok(());
        }
        let failed: Vec<&Failure> = self.recent.iter().flatten().collect();
        let mut kinds: HashMap<&str, usize> = HashMap::new();
        for f in &failed {
            *kinds.entry(f.kind).or_default() += 1;
        }
        let (kind, count) = kinds
            .into_iter()
            .max_by_key(|&(k, c)| (c, std::cmp::Reverse(k)))
            .expect("at least one failure");
        let of_kind: Vec<&&Failure> = failed.iter().filter(|f| f.kind == kind).collect();
        let examples = of_kind
            .iter()
            .take(3)
            .map(|f| {
                format!(
                    "{} row {}",
                    ds.shards()[f.shard as usize].path.display(),
                    f.row
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        Err(Error::TooManyFailures {
            detail: format!(
                "{} of the last {n} samples failed, more than max_failure_fraction={} allows; \
                 most common: {kind} ({count} times), e.g. {examples}; first: {}",
                self.n_failed, self.max_fraction, of_kind[0].error
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shards::testutil::*;
    use crate::shards::Format;

    fn fail(row: u64, kind: &'static str) -> Failure {
        Failure {
            index: row,
            shard: 0,
            row,
            error: format!("{kind}: row {row} is bad"),
            kind,
        }
    }

    #[test]
    fn trips_over_the_fraction_and_names_kind_and_rows() {
        let d = tmpdir("guard");
        let a = d.join("a.arrow");
        write_shard(&a, 0..1000, 100, Format::Stream);
        let ds = Dataset::open(&[a], "audio", None).unwrap();
        // 1 in 100 failing: never trips.
        let mut g = FailureGuard::new(512, 0.1);
        for i in 0..5000u64 {
            let f: Vec<Failure> = if i % 100 == 0 {
                vec![fail(i, "corrupt audio")]
            } else {
                vec![]
            };
            g.record(&f, true);
            g.check(&ds, false).unwrap();
        }
        // Every sample failing: trips once the window is full, not before.
        let mut g = FailureGuard::new(512, 0.1);
        for i in 0..511u64 {
            g.record(
                &[fail(
                    i,
                    if i % 3 == 0 {
                        "empty audio"
                    } else {
                        "corrupt audio"
                    },
                )],
                false,
            );
            g.check(&ds, false).unwrap();
        }
        g.record(&[fail(511, "corrupt audio")], false);
        let e = g.check(&ds, false).unwrap_err().to_string();
        assert!(e.contains("512 of the last 512 samples failed"), "{e}");
        assert!(e.contains("most common: corrupt audio (341 times)"), "{e}");
        assert!(
            e.contains("a.arrow row 1, ") && e.contains("a.arrow row 2, "),
            "{e}"
        );
        // An eval pass shorter than the window is judged at its end.
        let mut g = FailureGuard::new(512, 0.1);
        assert!(g.check(&ds, true).is_ok());
        for i in 0..20u64 {
            g.record(&[fail(i, "corrupt audio")], false);
            g.check(&ds, false).unwrap();
        }
        assert!(g.check(&ds, true).is_err());
    }
}
