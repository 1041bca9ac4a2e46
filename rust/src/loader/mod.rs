//! The deterministic loader pipeline: I/O thread -> N transform workers -> re-sequencing and
//! batch assembly, joined by bounded channels.
//!
//! # The stream
//!
//! The global batch at step `s` is made of `batch_size` slots; slot `j` holds stream position
//! `g = s * batch_size + j`.
//!
//! * Train: the row at `g` is `Order::index_at(g)` (see [`crate::order`]): an infinite stream of
//!   epochs, each an exact permutation. View `v` of a row is cropped at
//!   `Crop::Fraction(crop_fraction(seed, epoch, index, v))`.
//! * Eval: the row at `g` is `g` itself (index order), centre crop (`Crop::Fraction(0.5)`),
//!   finite: `ceil(n / batch_size)` batches; slots with `g >= n` are padding (`valid = false`,
//!   `index = -1`).
//!
//! Process `p` of `P` owns slots `[p * b, (p + 1) * b)` with `b = batch_size / P`, so the union
//! over processes of step `s` is the single-process global batch at step `s`.
//!
//! # Failures
//!
//! The transform is deterministic on (bytes, crop), so a sample that fails always fails. In train
//! mode the owning process replaces a failed slot by the row at `g + k * batch_size` for the first
//! `k = 1, 2, ...` (at most `max_replacements`) that succeeds: the same lane of a later batch.
//! Only the owner decodes it, the choice is a pure function of the data, and the batch positions
//! never shift, so the union property, determinism and O(1) resume all hold; the price is that
//! the replacement row appears twice in that epoch. If every candidate fails, the slot is emitted
//! with `valid = false`. In eval mode a failed slot is emitted with `valid = false` (and its real
//! index), so every row is still visited exactly once.
//!
//! Because batch positions never depend on what happened before, the state of the stream is just
//! the next step: restoring costs nothing beyond opening the dataset.

mod config;
mod config_json;
mod guard;
mod pipeline;
mod sample;
mod stages;
mod stats;
mod transform;

use std::sync::Arc;

use crate::clip::Transform;
use crate::error::{Error, Result};
use crate::order::Order;

pub use config::{kaldi_frames, physical_memory, LoaderConfig, Mode, MAX_WINDOW_S, PADS};
pub use pipeline::{Next, Pipeline};
pub use stats::Stats;
pub use transform::transform_factory;

/// Builds one transform per worker thread.
pub type TransformFactory = Arc<dyn Fn() -> Result<Box<dyn Transform>> + Send + Sync>;

/// A sample that failed, for stats and logs.
#[derive(Clone, Debug)]
pub struct Failure {
    pub index: u64,
    pub shard: u32,
    pub row: u64,
    pub error: String,
    /// The error's kind ([`Error::kind`]), to tell the most common one.
    pub kind: &'static str,
}

/// One local batch: this process's slice of global step `step`.
#[derive(Debug)]
pub struct Batch {
    pub step: u64,
    /// Row-major (n_views, batch, n_frames, n_mels) host features (`batch_dtype` float32;
    /// bfloat16: `data16`); empty with device features.
    pub data: Vec<f32>,
    /// `data` as bfloat16 bits (`batch_dtype = "bfloat16"`), empty otherwise.
    pub data16: Vec<u16>,
    /// (batch,) class ids (-1: none) of an int label column.
    pub target: Vec<i64>,
    /// Row-major (batch, n_classes) multi-hot targets of a list<int> label column; empty for an
    /// int column.
    pub target_multi: Vec<f32>,
    pub index: Vec<i64>,
    pub shard: Vec<i32>,
    pub valid: Vec<bool>,
    /// Row-major (n_views, batch): where each view starts in its recording, seconds (-1 for
    /// padding and failed slots).
    pub start_s: Vec<f64>,
    /// Row-major (n_local, batch, local_frames, n_mels) local crops (empty without them, and
    /// with bfloat16 or device features).
    pub local: Vec<f32>,
    /// `local` as bfloat16 bits (`batch_dtype = "bfloat16"`), empty otherwise.
    pub local16: Vec<u16>,
    /// Device features: row-major (batch, wave_samples) windows, float32 (`wave_dtype`) or int16
    /// in `wave16` (x * 32768); empty with host features.
    pub wave: Vec<f32>,
    pub wave16: Vec<i16>,
    /// Device features: samples of this batch that int16 could not hold exactly (rounded).
    pub wave_rounded: u64,
    /// Device features: row-major (n_views, batch) first frame of each view in its window's
    /// fbank and the frames from there that are the clip's (the rest: `pad`); (n_local,
    /// batch) the same of the local crops. Empty with host features.
    pub crop_start: Vec<i32>,
    pub crop_frames: Vec<i32>,
    pub local_crop_start: Vec<i32>,
    pub local_crop_frames: Vec<i32>,
    /// Row-major (n_local, batch): where each local crop starts, seconds (-1: padding, failed).
    pub local_start_s: Vec<f64>,
    /// Samples that failed while producing this batch (replaced or marked invalid).
    pub failures: Vec<Failure>,
    /// Samples of this batch from recordings whose data stops early (kind "damaged recording":
    /// valid, from what the recording holds; the message says where and why).
    pub damaged: Vec<Failure>,
}

/// The rows at stream positions `start..start + count` of the train order (diagnostics).
/// `n_rows`, `block_size` and `shuffle_window` must be at least 1.
pub fn train_indices(
    n_rows: u64,
    seed: u64,
    block_size: u64,
    shuffle_window: u64,
    start: u64,
    count: u64,
) -> Result<Vec<u64>> {
    for (name, v) in [
        ("n_rows", n_rows),
        ("block_size", block_size),
        ("shuffle_window", shuffle_window),
    ] {
        if v == 0 {
            return Err(Error::bad_argument(name, ">= 1", 0));
        }
    }
    let o = Order::new(n_rows, seed, block_size, shuffle_window);
    Ok((start..start + count).map(|g| o.index_at(g)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_frames_are_kaldi_frames_of_the_clip() {
        for (clip_s, frames) in [(5.0, 498), (0.1, 8), (0.01, 1)] {
            let c = LoaderConfig {
                clip_s,
                ..Default::default()
            };
            assert_eq!(c.debug_frames(), frames, "{clip_s}");
        }
    }

    #[test]
    fn train_indices_rejects_zero_sizes_and_covers_every_row() {
        for (args, name) in [
            ((0, 1, 1), "n_rows"),
            ((10, 0, 1), "block_size"),
            ((10, 1, 0), "shuffle_window"),
        ] {
            let e = train_indices(args.0, 0, args.1, args.2, 0, 5)
                .unwrap_err()
                .to_string();
            assert!(e.contains(name) && e.contains(">= 1"), "{e}");
        }
        let mut epoch = train_indices(10, 3, 2, 4, 0, 10).unwrap();
        epoch.sort_unstable();
        assert_eq!(epoch, (0..10).collect::<Vec<u64>>());
    }
}
