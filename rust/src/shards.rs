//! Memory-mapped Hugging Face Arrow shards: open, index and read single samples lazily.
//!
//! Opening a shard reads only IPC message *metadata*: for the stream format (what `datasets`
//! writes to its cache and `save_to_disk`) we walk the message headers, parsing each message's
//! flatbuffer and skipping its body by length; for the file format the footer lists the record
//! batch blocks and we read each block's metadata for its row count. Audio bodies are never
//! touched at open. At sample time [`Reader`] decodes the one record batch that holds the row
//! (zero-copy views over the mmap, only the audio and label columns) and keeps recently used
//! batches in a small cache.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, BinaryArray, LargeBinaryArray, RecordBatch};
use arrow_buffer::{Buffer, NullBuffer};
use arrow_schema::{DataType, Schema, SchemaRef};
use memmap2::{Advice, Mmap};

use crate::error::{Error, Result};

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

/// Where one record batch's metadata and body live in the file.
#[derive(Clone, Copy, Debug)]
struct BatchLoc {
    meta_start: usize,
    meta_len: usize,
    body_start: usize,
    body_len: usize,
    rows: u64,
    /// Row number (within the shard) of this batch's first row.
    first_row: u64,
}

/// How the audio bytes are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AudioLayout {
    /// HF `Audio` feature: struct {bytes: binary, path: string}.
    Struct,
    /// A plain binary column.
    Plain,
}

/// One memory-mapped shard and its batch index.
pub struct Shard {
    pub path: PathBuf,
    pub format: Format,
    pub n_rows: u64,
    mmap: Arc<Mmap>,
    /// The whole mapping as an Arrow buffer (zero-copy; owns a reference to `mmap`).
    buf: Buffer,
    schema: SchemaRef,
    batches: Vec<BatchLoc>,
    projection: Vec<usize>,
    audio_layout: AudioLayout,
}

fn ds_err(path: &Path, detail: impl Into<String>) -> Error {
    Error::Dataset {
        path: path.display().to_string(),
        detail: detail.into(),
    }
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parse the length prefix of the IPC message at `at`. `Ok(None)` at end of stream.
fn message_prefix(path: &Path, b: &[u8], at: usize) -> Result<Option<(usize, usize)>> {
    if at == b.len() {
        return Ok(None); // EOF without end-of-stream marker is allowed
    }
    if at + 4 > b.len() {
        return Err(ds_err(
            path,
            format!(
                "truncated IPC message prefix at byte {at} (file has {} bytes)",
                b.len()
            ),
        ));
    }
    let (len_at, start) = if read_u32(b, at) == 0xFFFF_FFFF {
        (at + 4, at + 8)
    } else {
        (at, at + 4) // pre-1.0 format without continuation marker
    };
    if start > b.len() {
        return Err(ds_err(
            path,
            format!("truncated IPC message prefix at byte {at}"),
        ));
    }
    let meta_len = read_u32(b, len_at) as i32;
    if meta_len == 0 {
        return Ok(None);
    }
    if meta_len < 0 || start + meta_len as usize > b.len() {
        return Err(ds_err(
            path,
            format!(
                "truncated or corrupt IPC message at byte {at}: metadata of {meta_len} bytes, \
                 file has {} bytes",
                b.len()
            ),
        ));
    }
    Ok(Some((start, meta_len as usize)))
}

fn parse_message<'a>(path: &Path, b: &'a [u8], at: usize) -> Result<arrow_ipc::Message<'a>> {
    arrow_ipc::root_as_message(b).map_err(|e| {
        ds_err(
            path,
            format!("corrupt IPC message metadata at byte {at}: {e}"),
        )
    })
}

/// Rows of a record batch message; rejects what the lazy reader cannot decode.
fn batch_rows(path: &Path, rb: &arrow_ipc::RecordBatch<'_>, at: usize) -> Result<u64> {
    if let Some(c) = rb.compression() {
        return Err(ds_err(
            path,
            format!(
                "record batch at byte {at}: expected uncompressed IPC bodies, got {:?} compression",
                c.codec()
            ),
        ));
    }
    u64::try_from(rb.length()).map_err(|_| ds_err(path, format!("negative row count at byte {at}")))
}

/// Check the schema and return (projection, audio layout).
fn check_schema(
    path: &Path,
    schema: &Schema,
    audio_column: &str,
    label_column: Option<&str>,
) -> Result<(Vec<usize>, AudioLayout)> {
    let names = || {
        schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (ai, af) = schema.column_with_name(audio_column).ok_or_else(|| {
        ds_err(
            path,
            format!(
                "column '{audio_column}': no such column (columns: {})",
                names()
            ),
        )
    })?;
    let is_bin = |t: &DataType| matches!(t, DataType::Binary | DataType::LargeBinary);
    let layout = match af.data_type() {
        DataType::Struct(fields) => match fields.iter().find(|f| f.name() == "bytes") {
            Some(f) if is_bin(f.data_type()) => AudioLayout::Struct,
            _ => {
                return Err(ds_err(
                    path,
                    format!(
                        "column '{audio_column}': expected struct {{bytes: binary, path: string}} \
                         or binary, got {}",
                        af.data_type()
                    ),
                ))
            }
        },
        t if is_bin(t) => AudioLayout::Plain,
        t => {
            return Err(ds_err(
                path,
                format!(
                    "column '{audio_column}': expected struct {{bytes: binary, path: string}} or \
                     binary, got {t}"
                ),
            ))
        }
    };
    let mut projection = vec![ai];
    if let Some(label_column) = label_column {
        let (li, lf) = schema.column_with_name(label_column).ok_or_else(|| {
            ds_err(
                path,
                format!(
                    "column '{label_column}': no such column (columns: {})",
                    names()
                ),
            )
        })?;
        if !lf.data_type().is_integer() {
            return Err(ds_err(
                path,
                format!(
                    "column '{label_column}': expected an integer label type (int64), got {}",
                    lf.data_type()
                ),
            ));
        }
        projection.push(li);
    }
    projection.sort_unstable();
    projection.dedup();
    Ok((projection, layout))
}

impl Shard {
    /// Map and index one shard. Reads only message metadata, never record batch bodies.
    pub fn open(path: &Path, audio_column: &str, label_column: Option<&str>) -> Result<Shard> {
        let file =
            std::fs::File::open(path).map_err(|e| ds_err(path, format!("cannot open: {e}")))?;
        let len = file
            .metadata()
            .map_err(|e| ds_err(path, format!("cannot stat: {e}")))?
            .len();
        if len == 0 {
            return Err(ds_err(
                path,
                "empty file (0 bytes); expected an Arrow IPC stream or file",
            ));
        }
        // SAFETY: the mapping is read-only; shards must not be modified while a loader runs
        // (the same contract as `datasets`, which maps these files too).
        let mmap =
            unsafe { Mmap::map(&file) }.map_err(|e| ds_err(path, format!("cannot mmap: {e}")))?;
        let mmap = Arc::new(mmap);
        let ptr = NonNull::new(mmap.as_ptr() as *mut u8).expect("mmap pointer is never null");
        // SAFETY: `ptr`/`len` describe the mapping, which `owner` keeps alive and never mutates.
        let buf = unsafe { Buffer::from_custom_allocation(ptr, mmap.len(), mmap.clone()) };
        let b = buf.as_slice();
        let (format, schema, batches) = if b.starts_with(b"ARROW1") {
            Self::index_file(path, b)?
        } else {
            Self::index_stream(path, b)?
        };
        let (projection, audio_layout) = check_schema(path, &schema, audio_column, label_column)?;
        let n_rows = batches.last().map_or(0, |l| l.first_row + l.rows);
        Ok(Shard {
            path: path.to_path_buf(),
            format,
            n_rows,
            mmap,
            buf,
            schema: Arc::new(schema),
            batches,
            projection,
            audio_layout,
        })
    }

    fn index_stream(path: &Path, b: &[u8]) -> Result<(Format, Schema, Vec<BatchLoc>)> {
        let mut at = 0usize;
        let mut schema = None;
        let mut batches = Vec::new();
        let mut first_row = 0u64;
        while let Some((meta_start, meta_len)) = message_prefix(path, b, at)? {
            let msg = parse_message(path, &b[meta_start..meta_start + meta_len], at)?;
            let body_start = meta_start + meta_len;
            let body_len = usize::try_from(msg.bodyLength())
                .map_err(|_| ds_err(path, format!("negative body length at byte {at}")))?;
            if body_start + body_len > b.len() {
                return Err(ds_err(
                    path,
                    format!(
                        "truncated: IPC message at byte {at} has a body ending at byte {}, but the \
                         file has {} bytes",
                        body_start + body_len,
                        b.len()
                    ),
                ));
            }
            match msg.header_type() {
                arrow_ipc::MessageHeader::Schema => {
                    let fb = msg
                        .header_as_schema()
                        .ok_or_else(|| ds_err(path, "unreadable schema message"))?;
                    let s = arrow_ipc::convert::try_fb_to_schema(fb)
                        .map_err(|e| ds_err(path, format!("unreadable schema: {e}")))?;
                    schema = Some(s);
                }
                arrow_ipc::MessageHeader::RecordBatch => {
                    let rb = msg.header_as_record_batch().ok_or_else(|| {
                        ds_err(path, format!("unreadable record batch at byte {at}"))
                    })?;
                    let rows = batch_rows(path, &rb, at)?;
                    batches.push(BatchLoc {
                        meta_start,
                        meta_len,
                        body_start,
                        body_len,
                        rows,
                        first_row,
                    });
                    first_row += rows;
                }
                arrow_ipc::MessageHeader::DictionaryBatch => {
                    return Err(ds_err(path, "dictionary-encoded columns are not supported"));
                }
                t => {
                    return Err(ds_err(
                        path,
                        format!("unexpected IPC message {t:?} at byte {at}"),
                    ))
                }
            }
            at = body_start + body_len;
        }
        let schema = schema.ok_or_else(|| {
            ds_err(
                path,
                "not an Arrow IPC stream or file: no schema message at the start",
            )
        })?;
        Ok((Format::Stream, schema, batches))
    }

    fn index_file(path: &Path, b: &[u8]) -> Result<(Format, Schema, Vec<BatchLoc>)> {
        let n = b.len();
        if n < 18 || &b[n - 6..] != b"ARROW1" {
            return Err(ds_err(
                path,
                format!("truncated Arrow IPC file: no footer magic at the end ({n} bytes)"),
            ));
        }
        let footer_len = read_u32(b, n - 10) as usize;
        if footer_len + 10 > n {
            return Err(ds_err(
                path,
                format!("corrupt Arrow IPC file: footer of {footer_len} bytes"),
            ));
        }
        let footer = arrow_ipc::root_as_footer(&b[n - 10 - footer_len..n - 10])
            .map_err(|e| ds_err(path, format!("corrupt Arrow IPC footer: {e}")))?;
        let schema = footer
            .schema()
            .ok_or_else(|| ds_err(path, "Arrow IPC footer has no schema"))
            .and_then(|s| {
                arrow_ipc::convert::try_fb_to_schema(s)
                    .map_err(|e| ds_err(path, format!("unreadable schema: {e}")))
            })?;
        if footer.dictionaries().is_some_and(|d| !d.is_empty()) {
            return Err(ds_err(path, "dictionary-encoded columns are not supported"));
        }
        let mut batches = Vec::new();
        let mut first_row = 0u64;
        for block in footer.recordBatches().into_iter().flatten() {
            let at = usize::try_from(block.offset())
                .map_err(|_| ds_err(path, "negative block offset in footer"))?;
            let (meta_start, meta_len) = message_prefix(path, b, at)?
                .ok_or_else(|| ds_err(path, format!("empty record batch block at byte {at}")))?;
            let msg = parse_message(path, &b[meta_start..meta_start + meta_len], at)?;
            let rb = msg
                .header_as_record_batch()
                .ok_or_else(|| ds_err(path, format!("block at byte {at} is not a record batch")))?;
            let body_start = at + block.metaDataLength() as usize;
            let body_len = usize::try_from(block.bodyLength())
                .map_err(|_| ds_err(path, "negative body length in footer"))?;
            if body_start + body_len > n {
                return Err(ds_err(
                    path,
                    format!("truncated: block at byte {at} ends past the file end"),
                ));
            }
            let rows = batch_rows(path, &rb, at)?;
            batches.push(BatchLoc {
                meta_start,
                meta_len,
                body_start,
                body_len,
                rows,
                first_row,
            });
            first_row += rows;
        }
        Ok((Format::File, schema, batches))
    }

    /// Record batch `bi` with the columns `projection` (zero-copy over the mapping).
    fn read_batch(&self, bi: usize, projection: &[usize]) -> Result<RecordBatch> {
        let loc = self.batches[bi];
        let b = self.buf.as_slice();
        let msg = parse_message(
            &self.path,
            &b[loc.meta_start..loc.meta_start + loc.meta_len],
            loc.meta_start,
        )?;
        let fb = msg
            .header_as_record_batch()
            .ok_or_else(|| ds_err(&self.path, format!("record batch {bi}: unreadable")))?;
        let body = self.buf.slice_with_length(loc.body_start, loc.body_len);
        arrow_ipc::reader::read_record_batch(
            &body,
            fb,
            self.schema.clone(),
            &HashMap::new(),
            Some(projection),
            &msg.version(),
        )
        .map_err(|e| ds_err(&self.path, format!("record batch {bi}: {e}")))
    }

    /// Decode record batch `bi` (audio and label columns only).
    fn decode_batch(
        &self,
        bi: usize,
        label_column: Option<&str>,
        audio_column: &str,
    ) -> Result<DecodedBatch> {
        let batch = self.read_batch(bi, &self.projection)?;
        DecodedBatch::new(
            &self.path,
            &batch,
            audio_column,
            self.audio_layout,
            label_column,
        )
    }

    /// The labels of every row, reading only the label column.
    fn labels(&self, label_column: &str) -> Result<Vec<i64>> {
        let li = self
            .schema
            .index_of(label_column)
            .map_err(|e| ds_err(&self.path, e.to_string()))?;
        let mut out = Vec::with_capacity(self.n_rows as usize);
        for bi in 0..self.batches.len() {
            let batch = self.read_batch(bi, &[li])?;
            out.extend(labels_as_i64(&self.path, label_column, batch.column(0))?);
        }
        Ok(out)
    }

    /// Ask the kernel to start reading `bytes` (a slice of this shard's mapping) into the cache.
    pub fn prefetch(&self, bytes: &Buffer) {
        let base = self.mmap.as_ptr() as usize;
        let p = bytes.as_ptr() as usize;
        if p >= base && p + bytes.len() <= base + self.mmap.len() && !bytes.is_empty() {
            let _ = self
                .mmap
                .advise_range(Advice::WillNeed, p - base, bytes.len());
        }
    }

    /// Index of the batch holding `row`.
    fn batch_of(&self, row: u64) -> usize {
        self.batches
            .partition_point(|l| l.first_row + l.rows <= row)
    }
}

fn labels_as_i64(path: &Path, column: &str, a: &ArrayRef) -> Result<Vec<i64>> {
    macro_rules! conv {
        ($t:ty) => {
            a.as_primitive::<$t>()
                .iter()
                .map(|v| v.map_or(-1, |v| v as i64))
                .collect()
        };
    }
    Ok(match a.data_type() {
        DataType::Int8 => conv!(Int8Type),
        DataType::Int16 => conv!(Int16Type),
        DataType::Int32 => conv!(Int32Type),
        DataType::Int64 => conv!(Int64Type),
        DataType::UInt8 => conv!(UInt8Type),
        DataType::UInt16 => conv!(UInt16Type),
        DataType::UInt32 => conv!(UInt32Type),
        DataType::UInt64 => {
            let v = a.as_primitive::<UInt64Type>();
            let mut out = Vec::with_capacity(v.len());
            for x in v.iter() {
                match x {
                    None => out.push(-1),
                    Some(x) => out.push(i64::try_from(x).map_err(|_| {
                        ds_err(
                            path,
                            format!("column '{column}': label {x} does not fit in int64"),
                        )
                    })?),
                }
            }
            out
        }
        t => {
            return Err(ds_err(
                path,
                format!("column '{column}': expected an integer label type (int64), got {t}"),
            ))
        }
    })
}

enum BytesCol {
    Binary(BinaryArray),
    Large(LargeBinaryArray),
}

/// The parts of one record batch the loader needs.
struct DecodedBatch {
    bytes: BytesCol,
    /// Nulls of the audio struct itself (the bytes child has its own).
    outer_nulls: Option<NullBuffer>,
    labels: Vec<i64>,
}

impl DecodedBatch {
    fn new(
        path: &Path,
        batch: &RecordBatch,
        audio_column: &str,
        layout: AudioLayout,
        label_column: Option<&str>,
    ) -> Result<Self> {
        let audio = batch
            .column_by_name(audio_column)
            .ok_or_else(|| ds_err(path, format!("column '{audio_column}': no such column")))?;
        let (bytes, outer_nulls) = match layout {
            AudioLayout::Struct => {
                let s = audio.as_struct();
                let child = s.column_by_name("bytes").ok_or_else(|| {
                    ds_err(path, format!("column '{audio_column}': no 'bytes' field"))
                })?;
                (child.clone(), s.nulls().cloned())
            }
            AudioLayout::Plain => (audio.clone(), None),
        };
        let bytes = match bytes.data_type() {
            DataType::Binary => BytesCol::Binary(bytes.as_binary::<i32>().clone()),
            DataType::LargeBinary => BytesCol::Large(bytes.as_binary::<i64>().clone()),
            t => {
                return Err(ds_err(
                    path,
                    format!("column '{audio_column}': bytes have type {t}"),
                ))
            }
        };
        let labels = match label_column {
            Some(l) => {
                let a = batch
                    .column_by_name(l)
                    .ok_or_else(|| ds_err(path, format!("column '{l}': no such column")))?;
                labels_as_i64(path, l, a)?
            }
            None => vec![-1; batch.num_rows()],
        };
        Ok(DecodedBatch {
            bytes,
            outer_nulls,
            labels,
        })
    }

    /// The audio bytes of `row` as a zero-copy slice of the mapping, or None when null.
    fn bytes(&self, row: usize) -> Option<Buffer> {
        if self.outer_nulls.as_ref().is_some_and(|n| n.is_null(row)) {
            return None;
        }
        match &self.bytes {
            BytesCol::Binary(a) => {
                if a.is_null(row) {
                    return None;
                }
                let o = a.value_offsets();
                let (s, e) = (o[row] as usize, o[row + 1] as usize);
                Some(a.values().slice_with_length(s, e - s))
            }
            BytesCol::Large(a) => {
                if a.is_null(row) {
                    return None;
                }
                let o = a.value_offsets();
                let (s, e) = (o[row] as usize, o[row + 1] as usize);
                Some(a.values().slice_with_length(s, e - s))
            }
        }
    }
}

/// All shards of a dataset, in order; a row's global index counts through them.
pub struct Dataset {
    shards: Vec<Shard>,
    /// Global index of each shard's first row, plus the total at the end.
    starts: Vec<u64>,
    audio_column: String,
    label_column: Option<String>,
}

impl Dataset {
    /// Open and index every shard. Errors name the file and column.
    pub fn open(
        paths: &[PathBuf],
        audio_column: &str,
        label_column: Option<&str>,
    ) -> Result<Dataset> {
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
            let s = Shard::open(p, audio_column, label_column)?;
            starts.push(starts.last().unwrap() + s.n_rows);
            shards.push(s);
        }
        Ok(Dataset {
            shards,
            starts,
            audio_column: audio_column.to_string(),
            label_column: label_column.map(str::to_string),
        })
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

    /// Every row's label (-1 without a label column), reading only the label column.
    pub fn labels(&self) -> Result<Vec<i64>> {
        match &self.label_column {
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

/// One sample's location, label and (zero-copy) encoded bytes.
#[derive(Clone)]
pub struct SampleRef {
    pub index: u64,
    pub shard: u32,
    pub row: u64,
    pub label: i64,
    pub bytes: Buffer,
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
        let b =
            Arc::new(s.decode_batch(bi, self.ds.label_column.as_deref(), &self.ds.audio_column)?);
        if self.cache.len() >= self.capacity {
            self.cache.remove(0);
        }
        self.cache.push(((shard, bi), b.clone()));
        Ok(b)
    }

    /// The sample at global row `index`. A null audio value is an `EmptyAudio` error.
    pub fn sample(&mut self, index: u64) -> Result<SampleRef> {
        let (shard, row) = self.ds.locate(index);
        let s = &self.ds.shards[shard];
        let bi = s.batch_of(row);
        let first_row = s.batches[bi].first_row;
        let b = self.batch(shard, bi)?;
        let r = (row - first_row) as usize;
        let bytes = b.bytes(r).ok_or_else(|| Error::EmptyAudio {
            detail: format!(
                "{} row {row}: audio is null",
                self.ds.shards[shard].path.display()
            ),
        })?;
        Ok(SampleRef {
            index,
            shard: shard as u32,
            row,
            label: b.labels[r],
            bytes,
        })
    }

    /// Start reading a sample's bytes into the page cache.
    pub fn prefetch(&self, s: &SampleRef) {
        self.ds.shards[s.shard as usize].prefetch(&s.bytes);
    }
}

/// Helpers that write small HF-style shards, for tests across the crate.
#[cfg(test)]
pub(crate) mod testutil {
    use super::*;
    use arrow_array::builder::{BinaryBuilder, StringBuilder};
    use arrow_array::{Int64Array, StructArray};
    use arrow_schema::{Field, Fields};

    /// Payload of row `i`: its global index as text, so a transform can see which row it got.
    pub fn payload(i: u64) -> Vec<u8> {
        format!("row-{i:08}").into_bytes()
    }

    pub fn hf_batch(rows: std::ops::Range<u64>, label: impl Fn(u64) -> i64) -> RecordBatch {
        let mut bytes = BinaryBuilder::new();
        let mut paths = StringBuilder::new();
        for i in rows.clone() {
            bytes.append_value(payload(i));
            paths.append_value(format!("{i}.ogg"));
        }
        let fields = Fields::from(vec![
            Field::new("bytes", DataType::Binary, true),
            Field::new("path", DataType::Utf8, true),
        ]);
        let audio = StructArray::new(
            fields.clone(),
            vec![
                Arc::new(bytes.finish()) as ArrayRef,
                Arc::new(paths.finish()) as ArrayRef,
            ],
            None,
        );
        let labels = Int64Array::from(rows.map(label).collect::<Vec<_>>());
        let schema = Schema::new(vec![
            Field::new("audio", DataType::Struct(fields), true),
            Field::new("label", DataType::Int64, true),
        ]);
        RecordBatch::try_new(Arc::new(schema), vec![Arc::new(audio), Arc::new(labels)]).unwrap()
    }

    /// Write rows `rows` in record batches of `per_batch` rows, stream or file format.
    pub fn write_shard(path: &Path, rows: std::ops::Range<u64>, per_batch: u64, format: Format) {
        let f = std::fs::File::create(path).unwrap();
        let first = hf_batch(0..0, |_| 0);
        let schema = first.schema();
        let batches: Vec<RecordBatch> = (rows.start..rows.end)
            .step_by(per_batch as usize)
            .map(|s| hf_batch(s..(s + per_batch).min(rows.end), |i| (i % 10) as i64))
            .collect();
        match format {
            Format::Stream => {
                let mut w = arrow_ipc::writer::StreamWriter::try_new(f, &schema).unwrap();
                for b in &batches {
                    w.write(b).unwrap();
                }
                w.finish().unwrap();
            }
            Format::File => {
                let mut w = arrow_ipc::writer::FileWriter::try_new(f, &schema).unwrap();
                for b in &batches {
                    w.write(b).unwrap();
                }
                w.finish().unwrap();
            }
        }
    }

    pub fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("birdjepa-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
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
            assert_eq!(s.bytes.as_slice(), payload(i).as_slice());
            assert_eq!(s.label, (i % 10) as i64);
            assert_eq!(s.shard, if i < 250 { 0 } else { 1 });
        }
        assert_eq!(
            ds.labels().unwrap(),
            (0..400).map(|i| (i % 10) as i64).collect::<Vec<_>>()
        );
        assert_eq!(ds.locate(250), (1, 0));
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
        assert_eq!(
            r.sample(50).unwrap().bytes.as_slice(),
            payload(50).as_slice()
        );
        assert_eq!(
            r.sample(250).unwrap().bytes.as_slice(),
            payload(250).as_slice()
        );
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
