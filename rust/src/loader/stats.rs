//! Pipeline counters, shared by the threads and snapshot for callers.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::Failure;

/// Counters shared by the pipeline threads. They include prefetched work.
#[derive(Default)]
pub(super) struct SharedStats {
    pub(super) decoded: AtomicU64,
    pub(super) failures: AtomicU64,
    pub(super) replaced: AtomicU64,
    pub(super) invalid: AtomicU64,
    pub(super) damaged: AtomicU64,
    pub(super) recent: Mutex<VecDeque<Failure>>,
}

/// A snapshot of the pipeline counters.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Samples transformed successfully (including prefetched ones).
    pub decoded: u64,
    /// Sample failures (a sample failing again in a later epoch counts again).
    pub failures: u64,
    /// Train slots filled by a replacement after a failure.
    pub replaced: u64,
    /// Slots emitted with `valid = false` because of failures (not eval padding).
    pub invalid: u64,
    /// Samples from recordings whose data stops early (features from what they hold).
    pub damaged: u64,
    /// The last few failures, oldest first.
    pub recent_failures: Vec<Failure>,
    pub queued_batches: usize,
}

const RECENT_FAILURES: usize = 8;

impl SharedStats {
    pub(super) fn record_failure(&self, f: &Failure) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let mut r = self.recent.lock().unwrap();
        if r.len() == RECENT_FAILURES {
            r.pop_front();
        }
        r.push_back(f.clone());
    }

    /// A snapshot of the counters; `queued_batches` is the caller's to fill in.
    pub(super) fn snapshot(&self, queued_batches: usize) -> Stats {
        Stats {
            decoded: self.decoded.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            replaced: self.replaced.load(Ordering::Relaxed),
            invalid: self.invalid.load(Ordering::Relaxed),
            damaged: self.damaged.load(Ordering::Relaxed),
            recent_failures: self.recent.lock().unwrap().iter().cloned().collect(),
            queued_batches,
        }
    }
}
