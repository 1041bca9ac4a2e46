//! Hugging Face Arrow shards: open, index and read single samples lazily.
//!
//! Opening a shard reads only IPC message *metadata*: for the stream format (what `datasets`
//! writes to its cache and `save_to_disk`) we walk the message headers, parsing each message's
//! flatbuffer and skipping its body by length; for the file format the footer lists the record
//! batch blocks and we read each block's metadata for its row count. Audio bodies are never
//! touched at open. At sample time [`Reader`] decodes the one record batch that holds the row
//! (reading only the offsets, validity and labels of the audio and label columns) and keeps
//! recently used batches in a small cache; a sample's audio bytes are read on their own
//! ([`Reader::read`]). Every read checks that the shard did not change since it was opened
//! (see `source.rs`).

mod audio_file;
mod batch;
mod extra;
mod ipc;
mod paths;
mod shard;
mod source;
#[cfg(test)]
pub(crate) mod testutil;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use arrow_buffer::Buffer;

use crate::error::{Error, Result};
pub use audio_file::{check_audio_file, file_kind, max_audio_bytes};
pub use batch::{AudioBytes, LabelKind};
use batch::{DecodedBatch, RawAudio};
use ipc::ds_err;
pub use paths::{PathCheck, ReadOptions};
pub use shard::{check_shard_file, Shard};

/// Which IPC container a shard uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Stream,
    File,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Stream => "stream",
            Format::File => "file",
        }
    }
}

/// All shards of a dataset, in order; a row's global index counts through them.
pub struct Dataset {
    shards: Vec<Shard>,
    /// Global index of each shard's first row, plus the total at the end.
    starts: Vec<u64>,
    opts: ReadOptions,
    label_kind: LabelKind,
    /// Per row, its audio file's metadata and content hash at the first read (path-only rows;
    /// allocated on the first such read).
    seen: OnceLock<Vec<audio_file::Seen>>,
    /// `label_range()`, once read (the shards are checked unchanged on every body read).
    label_range: std::sync::OnceLock<LabelRange>,
}

impl Dataset {
    /// Open and index every shard, reading its audio and label columns. Errors name the file
    /// and column.
    pub fn open(
        paths: &[PathBuf],
        audio_column: &str,
        label_column: Option<&str>,
    ) -> Result<Dataset> {
        Self::open_with(paths, ReadOptions::columns(audio_column, label_column))
    }

    /// Open and index every shard, reading the columns `opts` names.
    pub fn open_with(paths: &[PathBuf], opts: ReadOptions) -> Result<Dataset> {
        let label_column = opts.label_column.as_deref();
        if paths.is_empty() {
            return Err(Error::bad_argument(
                "shards",
                "at least one shard path",
                "an empty list",
            ));
        }
        let mut shards = Vec::with_capacity(paths.len());
        let mut starts = vec![0u64];
        for p in paths {
            let s = Shard::open(p, &opts)?;
            if let (Some(first), Some(l)) = (shards.first(), label_column) {
                let first: &Shard = first;
                if s.label_kind != first.label_kind {
                    return Err(ds_err(
                        p,
                        format!(
                            "column '{l}': expected {:?} labels like {}, got {:?}",
                            first.label_kind,
                            first.path.display(),
                            s.label_kind
                        ),
                    ));
                }
            }
            starts.push(starts.last().unwrap() + s.n_rows);
            shards.push(s);
        }
        let label_kind = match label_column {
            Some(_) => shards[0].label_kind,
            None => LabelKind::Single,
        };
        Ok(Dataset {
            shards,
            starts,
            label_kind,
            label_range: OnceLock::new(),
            seen: OnceLock::new(),
            opts,
        })
    }

    /// One class per row, or a list of classes (multilabel).
    pub fn label_kind(&self) -> LabelKind {
        self.label_kind
    }

    /// The label column's name, if any.
    pub fn label_column(&self) -> Option<&str> {
        self.opts.label_column.as_deref()
    }

    /// The columns this dataset was opened with and how its audio paths resolve.
    pub fn options(&self) -> &ReadOptions {
        &self.opts
    }

    pub fn n_rows(&self) -> u64 {
        *self.starts.last().unwrap()
    }

    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    /// (shard, row within shard) of global row `index`.
    pub fn locate(&self, index: u64) -> (usize, u64) {
        let s = self.starts.partition_point(|&st| st <= index) - 1;
        (s, index - self.starts[s])
    }

    /// The shard number of every row (for diagnostics).
    pub fn shard_ids(&self) -> Vec<i32> {
        let mut out = Vec::with_capacity(self.n_rows() as usize);
        for (i, s) in self.shards.iter().enumerate() {
            out.extend(std::iter::repeat_n(i as i32, s.n_rows as usize));
        }
        out
    }

    /// The label column's range (None without a label column), reading only that column.
    pub fn label_range(&self) -> Result<Option<LabelRange>> {
        let Some(l) = &self.opts.label_column else {
            return Ok(None);
        };
        if let Some(r) = self.label_range.get() {
            return Ok(Some(r.clone()));
        }
        let mut out = LabelRange::default();
        for (i, s) in self.shards.iter().enumerate() {
            out.merge(s.label_range(i as u32, l)?);
        }
        // Read once per Dataset: the loader's open check and every (eval) pipeline start ask.
        Ok(Some(self.label_range.get_or_init(|| out).clone()))
    }

    /// Every row's label (-1 without a label column), reading only the label column.
    pub fn labels(&self) -> Result<Vec<i64>> {
        match &self.opts.label_column {
            None => Ok(vec![-1; self.n_rows() as usize]),
            Some(l) => {
                let mut out = Vec::with_capacity(self.n_rows() as usize);
                for s in &self.shards {
                    out.extend(s.labels(l)?);
                }
                Ok(out)
            }
        }
    }
}

/// The range of a label column: min and max non-null label and their (shard, row), and nulls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelRange {
    /// (label, shard, row) of the smallest and the largest label; None if all are null.
    pub min: Option<(i64, u32, u64)>,
    pub max: Option<(i64, u32, u64)>,
    pub nulls: u64,
}

impl LabelRange {
    fn add(&mut self, v: Option<i64>, (shard, row): (u32, u64)) {
        let Some(v) = v else {
            self.nulls += 1;
            return;
        };
        if self.min.is_none_or(|m| v < m.0) {
            self.min = Some((v, shard, row));
        }
        if self.max.is_none_or(|m| v > m.0) {
            self.max = Some((v, shard, row));
        }
    }

    fn merge(&mut self, o: LabelRange) {
        for (v, s, r) in [o.min, o.max].into_iter().flatten() {
            self.add(Some(v), (s, r));
        }
        self.nulls += o.nulls;
    }
}

/// One sample's location, label and where its encoded bytes are ([`Reader::read`] reads them).
#[derive(Clone)]
pub struct SampleRef {
    pub index: u64,
    pub shard: u32,
    pub row: u64,
    /// The class (a list column: the first class), -1 for none.
    pub label: i64,
    /// A list column's classes (empty for an int column).
    pub classes: Vec<i64>,
    pub bytes: AudioBytes,
    /// The row's events, (start, end) seconds (empty without an events column).
    pub events: Vec<(f64, f64)>,
    /// The row's segment (start, end) seconds, None without segment columns; a null bound is
    /// NaN.
    pub segment: Option<(f64, f64)>,
}

/// Reads samples with a small cache of recently decoded record batches. One per thread.
pub struct Reader {
    ds: Arc<Dataset>,
    cache: Vec<((usize, usize), Arc<DecodedBatch>)>,
    capacity: usize,
}

impl Reader {
    pub fn new(ds: Arc<Dataset>, capacity: usize) -> Self {
        Reader {
            ds,
            cache: Vec::new(),
            capacity: capacity.max(1),
        }
    }

    pub fn dataset(&self) -> &Arc<Dataset> {
        &self.ds
    }

    fn batch(&mut self, shard: usize, bi: usize) -> Result<Arc<DecodedBatch>> {
        if let Some(pos) = self.cache.iter().position(|(k, _)| *k == (shard, bi)) {
            let entry = self.cache.remove(pos);
            let b = entry.1.clone();
            self.cache.push(entry); // most recent at the end
            return Ok(b);
        }
        let s = &self.ds.shards[shard];
        let b = Arc::new(s.decode_batch(bi, &self.ds.opts)?);
        if self.cache.len() >= self.capacity {
            self.cache.remove(0);
        }
        self.cache.push(((shard, bi), b.clone()));
        Ok(b)
    }

    /// The sample at global row `index`. A row with neither audio bytes nor a path is an
    /// `EmptyAudio` error.
    pub fn sample(&mut self, index: u64) -> Result<SampleRef> {
        let ds = self.ds.clone();
        let (shard, row) = ds.locate(index);
        let s = &ds.shards[shard];
        let bi = s.batch_of(row);
        let first_row = s.batches[bi].first_row;
        let b = self.batch(shard, bi)?;
        let r = (row - first_row) as usize;
        let bytes = match b.bytes(r) {
            Some(RawAudio::Bytes(b)) => b,
            Some(RawAudio::Path(p)) => AudioBytes::Path {
                stored: p.to_string(),
                path: ds.opts.resolve(p, s.dir()),
            },
            None => {
                return Err(Error::EmptyAudio {
                    detail: format!(
                        "{} row {row}: column '{}' has neither audio bytes nor a path",
                        s.path.display(),
                        ds.opts.audio_column
                    ),
                })
            }
        };
        let events = match b.events.as_ref().map(|e| e.row(r)) {
            None => Vec::new(),
            Some(Ok(events)) => events,
            Some(Err(why)) => return Err(ds_err(&s.path, format!("row {row}, {why}"))),
        };
        Ok(SampleRef {
            index,
            shard: shard as u32,
            row,
            label: b.labels.first(r),
            classes: match ds.label_kind {
                LabelKind::Multi => b.labels.classes(r),
                LabelKind::Single => Vec::new(),
            },
            bytes,
            events,
            segment: b
                .segments
                .as_ref()
                .map(|(a, e)| (a[r].unwrap_or(f64::NAN), e[r].unwrap_or(f64::NAN))),
        })
    }

    /// Start reading a sample's bytes into the page cache.
    pub fn prefetch(&self, s: &SampleRef) {
        if let AudioBytes::File { offset, len } = s.bytes {
            self.ds.shards[s.shard as usize].prefetch(offset, len);
        }
    }

    /// A sample's encoded audio. `Error::ShardChanged` if its shard changed since it was
    /// opened; for a path-only row, `Error::Io` naming a missing file and `Error::AudioFile` one
    /// that is not a regular file, too large or whose content changed (see `audio_file.rs`).
    pub fn read(&self, s: &SampleRef) -> Result<Buffer> {
        match &s.bytes {
            AudioBytes::File { offset, len } => {
                self.ds.shards[s.shard as usize].read_bytes(*offset, *len)
            }
            AudioBytes::Memory(b) => Ok(b.clone()),
            AudioBytes::Path { path, .. } => {
                audio_file::read_file(path, self.ds.opts.max_audio_bytes, self.ds.seen(s.index))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;

    #[test]
    fn stream_and_file_index_and_read() {
        let d = tmpdir("shards-rw");
        let a = d.join("a.arrow");
        let b = d.join("b.arrow");
        write_shard(&a, 0..250, 64, Format::Stream);
        write_shard(&b, 250..400, 100, Format::File);
        let ds = Arc::new(Dataset::open(&[a, b], "audio", Some("label")).unwrap());
        assert_eq!(ds.n_rows(), 400);
        assert_eq!(ds.shards()[0].format, Format::Stream);
        assert_eq!(ds.shards()[1].format, Format::File);
        assert_eq!(ds.shards()[0].batches.len(), 4);
        let mut r = Reader::new(ds.clone(), 2);
        for i in [0u64, 63, 64, 249, 250, 399, 5, 300] {
            let s = r.sample(i).unwrap();
            assert_eq!(r.read(&s).unwrap().as_slice(), payload(i).as_slice());
            assert_eq!(s.label, (i % 10) as i64);
            assert_eq!(s.shard, if i < 250 { 0 } else { 1 });
        }
        assert_eq!(
            ds.labels().unwrap(),
            (0..400).map(|i| (i % 10) as i64).collect::<Vec<_>>()
        );
        assert_eq!(ds.locate(250), (1, 0));
        let r = ds.label_range().unwrap().unwrap();
        assert_eq!(
            (r.min, r.max, r.nulls),
            (Some((0, 0, 0)), Some((9, 0, 9)), 0)
        );
    }

    /// Row i of the multilabel test shards: classes {i % 3, 3} for even i, none for odd i but
    /// every 5th (a null list), and [-1] ("no label") for i % 7 == 1.
    fn ml_classes(i: u64) -> Option<Vec<i64>> {
        match i {
            i if i % 7 == 1 => Some(vec![-1]),
            i if i % 2 == 0 => Some(vec![(i % 3) as i64, 3]),
            i if i % 5 == 0 => None,
            _ => Some(vec![]),
        }
    }

    #[test]
    fn list_label_columns_give_each_row_its_classes() {
        let d = tmpdir("shards-multi");
        let a = d.join("a.arrow");
        write_multilabel_shard(&a, 0..40, ml_classes);
        let ds = Arc::new(Dataset::open(std::slice::from_ref(&a), "audio", Some("label")).unwrap());
        assert_eq!(ds.label_kind(), LabelKind::Multi);
        let mut r = Reader::new(ds.clone(), 2);
        for i in 0..40u64 {
            let s = r.sample(i).unwrap();
            // A null list, like [-1] ("no label"), is unlabelled ([-1]); an empty one is no
            // species.
            let want: Vec<i64> = match ml_classes(i) {
                None => vec![-1],
                Some(v) if v == [-1] => vec![-1],
                Some(v) => v,
            };
            assert_eq!(s.classes, want, "row {i}");
            assert_eq!(s.label, want.first().copied().unwrap_or(-1), "row {i}");
        }
        let rng = ds.label_range().unwrap().unwrap();
        assert_eq!(rng.min, Some((-1, 0, 1)));
        assert_eq!(rng.max, Some((3, 0, 0)));
        assert_eq!(rng.nulls, 3); // the null lists of rows 5, 25, 35
        assert_eq!(ds.labels().unwrap()[..4], [0, -1, 2, -1]);
        // An int shard after a list shard: an error naming the int one.
        let b = d.join("b.arrow");
        write_shard(&b, 0..10, 10, Format::Stream);
        let e = Dataset::open(&[a, b.clone()], "audio", Some("label"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("b.arrow") && e.contains("Multi") && e.contains("Single"),
            "{e}"
        );
    }

    #[test]
    fn open_reads_no_bodies_and_a_bad_body_only_fails_its_rows() {
        let d = tmpdir("shards-body");
        let a = d.join("a.arrow");
        write_shard(&a, 0..300, 100, Format::Stream);
        let ds = Dataset::open(std::slice::from_ref(&a), "audio", Some("label")).unwrap();
        let body = ds.shards()[0].batches[1];
        drop(ds);
        // Scribble over the second batch's body: its offsets become garbage.
        let mut bytes = std::fs::read(&a).unwrap();
        bytes[body.body_start..body.body_start + body.body_len].fill(0xAB);
        std::fs::write(&a, &bytes).unwrap();
        let ds = Arc::new(Dataset::open(&[a], "audio", Some("label")).unwrap());
        assert_eq!(ds.n_rows(), 300); // indexing never looked at the body
        let mut r = Reader::new(ds, 4);
        assert!(r.sample(150).is_err());
        for i in [50, 250] {
            let s = r.sample(i).unwrap();
            assert_eq!(r.read(&s).unwrap().as_slice(), payload(i).as_slice());
        }
    }

    #[test]
    fn a_shard_changed_after_open_is_an_error_not_a_signal() {
        let d = tmpdir("shards-changed");
        let a = d.join("a.arrow");
        write_shard(&a, 0..300, 50, Format::Stream);
        let ds = Arc::new(Dataset::open(std::slice::from_ref(&a), "audio", None).unwrap());
        let mut r = Reader::new(ds.clone(), 4);
        let early = r.sample(10).unwrap(); // batch 0 decoded and cached
        let len = std::fs::metadata(&a).unwrap().len();
        // Truncate: reading a cached batch's sample or a new batch is ShardChanged, naming it.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&a)
            .unwrap()
            .set_len(len / 3)
            .unwrap();
        for e in [r.read(&early).err(), r.sample(250).err()] {
            let e = e.unwrap();
            assert!(matches!(e, Error::ShardChanged { .. }), "{e}");
            let m = e.to_string();
            assert!(
                m.contains("a.arrow") && m.contains(&format!("size {len} -> ")),
                "{m}"
            );
        }
        // Overwritten in place with other rows of the same size: still noticed, no panic.
        let b = d.join("b.arrow");
        write_shard(&b, 0..300, 50, Format::Stream);
        let ds = Arc::new(Dataset::open(std::slice::from_ref(&b), "audio", None).unwrap());
        let mut r = Reader::new(ds, 4);
        let early = r.sample(10).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        write_shard(&b, 1000..1300, 50, Format::Stream);
        let e = r.read(&early).err().unwrap();
        assert!(matches!(e, Error::ShardChanged { .. }), "{e}");
        assert!(r.sample(200).is_err());
    }

    #[test]
    fn bad_inputs_name_file_and_column() {
        let d = tmpdir("shards-bad");
        let a = d.join("a.arrow");
        write_shard(&a, 0..100, 10, Format::Stream);
        let e = Dataset::open(std::slice::from_ref(&a), "sound", Some("label"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("a.arrow") && e.contains("'sound'"), "{e}");
        let e = Dataset::open(std::slice::from_ref(&a), "audio", Some("y"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("'y'"), "{e}");
        // Truncated mid-body.
        let bytes = std::fs::read(&a).unwrap();
        let t = d.join("t.arrow");
        std::fs::write(&t, &bytes[..bytes.len() / 2]).unwrap();
        let e = Dataset::open(&[t], "audio", Some("label"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("t.arrow") && e.contains("truncated"), "{e}");
        // Truncated file format.
        let f = d.join("f.arrow");
        write_shard(&f, 0..100, 10, Format::File);
        let bytes = std::fs::read(&f).unwrap();
        std::fs::write(&f, &bytes[..bytes.len() - 20]).unwrap();
        let e = Dataset::open(&[f], "audio", Some("label"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("truncated"), "{e}");
        let z = d.join("z.arrow");
        std::fs::write(&z, b"").unwrap();
        assert!(Dataset::open(&[z], "audio", None).is_err());
        let e = Dataset::open(&[d.join("missing.arrow")], "audio", None)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("missing.arrow"), "{e}");
    }
}
