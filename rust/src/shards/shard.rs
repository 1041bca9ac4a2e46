//! One shard: open and index its record batches (through a temporary memory map), then read
//! batches and samples with `pread` (see [`super::source`] for why).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{Array, RecordBatch};
use arrow_buffer::Buffer;
use arrow_data::{ArrayData, UnsafeFlag};
use arrow_ipc::reader::RecordBatchDecoder;
use arrow_schema::{Schema, SchemaRef};
use memmap2::Mmap;

use super::batch::{check_schema, AudioLayout, DecodedBatch, LabelKind, RowLabels};
use super::ipc::{batch_rows, ds_err, message_prefix, parse_message, push_loc, read_u32, BatchLoc};
use super::paths::ReadOptions;
use super::source::Source;
use super::Format;
use super::LabelRange;
use crate::error::Result;

/// `Ok` if a file of `mode` (st_mode) is a regular file, as a shard must be (before anything
/// opens it: opening a FIFO blocks until a writer comes); Python's `open_ipc` asks it too
/// (`_rs.check_shard_file`).
pub fn check_shard_file(path: &Path, mode: u32) -> Result<()> {
    match super::file_kind(mode) {
        None => Ok(()),
        Some(kind) => Err(ds_err(
            path,
            format!("expected a regular file (an Arrow IPC stream or file), got {kind}"),
        )),
    }
}

/// One shard: its open file and its batch index.
pub struct Shard {
    pub path: PathBuf,
    pub format: Format,
    pub n_rows: u64,
    src: Source,
    schema: SchemaRef,
    pub(super) batches: Vec<BatchLoc>,
    projection: Vec<usize>,
    audio_layout: AudioLayout,
    pub(super) label_kind: LabelKind,
}

impl Shard {
    /// Map and index one shard. Reads only message metadata, never record batch bodies.
    pub fn open(path: &Path, opts: &ReadOptions) -> Result<Shard> {
        // Before open(): opening a FIFO blocks until a writer comes.
        let kind =
            std::fs::metadata(path).map_err(|e| ds_err(path, format!("cannot open: {e}")))?;
        check_shard_file(path, kind.mode())?;
        let file =
            std::fs::File::open(path).map_err(|e| ds_err(path, format!("cannot open: {e}")))?;
        let meta = file
            .metadata()
            .map_err(|e| ds_err(path, format!("cannot stat: {e}")))?;
        if meta.len() == 0 {
            return Err(ds_err(
                path,
                "empty file (0 bytes); expected an Arrow IPC stream or file",
            ));
        }
        // SAFETY: the map lives only while the headers are indexed (milliseconds; a file
        // truncated in that window can still raise SIGBUS). Nothing keeps a view into it.
        let mmap =
            unsafe { Mmap::map(&file) }.map_err(|e| ds_err(path, format!("cannot mmap: {e}")))?;
        let b = &mmap[..];
        let (format, schema, batches) = if b.starts_with(b"ARROW1") {
            Self::index_file(path, b)?
        } else {
            Self::index_stream(path, b)?
        };
        drop(mmap);
        let (projection, audio_layout, label_kind) = check_schema(path, &schema, opts)?;
        let n_rows = batches.last().map_or(0, |l| l.first_row + l.rows);
        let src = Source::new(path, file, &meta);
        src.check_unchanged()?;
        Ok(Shard {
            path: path.to_path_buf(),
            format,
            n_rows,
            src,
            schema: Arc::new(schema),
            batches,
            projection,
            audio_layout,
            label_kind,
        })
    }

    fn index_stream(path: &Path, b: &[u8]) -> Result<(Format, Schema, Vec<BatchLoc>)> {
        let mut at = 0usize;
        let mut schema = None;
        let mut batches = Vec::new();
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
                    push_loc(
                        &mut batches,
                        (meta_start, meta_len),
                        (body_start, body_len),
                        rows,
                    );
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
            push_loc(
                &mut batches,
                (meta_start, meta_len),
                (body_start, body_len),
                rows,
            );
        }
        Ok((Format::File, schema, batches))
    }

    /// Decode record batch `bi`'s columns `projection` over `body` (the batch's body bytes).
    /// `probe`: `body` is all zeros and the arrays are only looked at for where their buffers
    /// are, never read; validation is skipped (zeros contradict the stated null counts).
    fn decode(
        &self,
        bi: usize,
        meta: &[u8],
        body: &Buffer,
        projection: &[usize],
        probe: bool,
    ) -> Result<RecordBatch> {
        let loc = self.batches[bi];
        let msg = parse_message(&self.path, meta, loc.meta_start)?;
        let fb = msg
            .header_as_record_batch()
            .ok_or_else(|| ds_err(&self.path, format!("record batch {bi}: unreadable")))?;
        let dicts = HashMap::new();
        let version = msg.version();
        let mut skip = UnsafeFlag::new();
        if probe {
            // SAFETY: the probe's arrays are dropped unread: only their buffers' addresses are
            // used (see `read_batch`); the real decode validates.
            unsafe { skip.set(true) };
        }
        RecordBatchDecoder::try_new(body, fb, self.schema.clone(), &dicts, &version)
            .map(|d| {
                d.with_projection(Some(projection))
                    .with_skip_validation(skip)
            })
            .and_then(|d| d.read_record_batch())
            .map_err(|e| ds_err(&self.path, format!("record batch {bi}: {e}")))
    }

    /// Record batch `bi` with the columns `projection`, reading from the file only the buffers
    /// those columns use, except `skip` (a function picking one buffer, e.g. the audio bytes,
    /// whose body range is returned; it stays zero in memory and samples read it on demand).
    ///
    /// Two passes: decoding over an all-zero body (calloc'd, so untouched pages cost nothing)
    /// tells which body ranges the projected arrays point into; those are read, then decoded.
    fn read_batch(
        &self,
        bi: usize,
        projection: &[usize],
        skip: impl Fn(&RecordBatch) -> Option<Buffer>,
    ) -> Result<(RecordBatch, Option<(usize, usize)>)> {
        let loc = self.batches[bi];
        let meta = self.src.read(loc.meta_start as u64, loc.meta_len)?;
        let zeros = Buffer::from_vec(vec![0u8; loc.body_len]);
        let probe = self.decode(bi, &meta, &zeros, projection, true)?;
        let base = zeros.as_ptr() as usize;
        let within = |b: &Buffer| {
            let p = b.as_ptr() as usize;
            (p >= base && p + b.len() <= base + loc.body_len).then(|| (p - base, b.len()))
        };
        let skipped = skip(&probe).and_then(|b| within(&b));
        let mut ranges = Vec::new();
        let mut whole = false;
        for c in probe.columns() {
            collect_ranges(&c.to_data(), &within, &mut ranges, &mut whole);
        }
        drop(probe);
        let mut body = vec![0u8; loc.body_len];
        if whole {
            // A buffer the decoder copied (misaligned): read the whole body instead.
            self.src.read_into(&mut body, loc.body_start as u64)?;
        } else {
            for (off, len) in ranges.into_iter().filter(|r| Some(*r) != skipped) {
                self.src
                    .read_into(&mut body[off..off + len], (loc.body_start + off) as u64)?;
            }
        }
        let batch = self.decode(bi, &meta, &Buffer::from_vec(body), projection, false)?;
        Ok((batch, if whole { None } else { skipped }))
    }

    /// Decode record batch `bi` (the columns `opts` names only); the audio bytes stay on disk.
    pub(super) fn decode_batch(&self, bi: usize, opts: &ReadOptions) -> Result<DecodedBatch> {
        let layout = self.audio_layout;
        let (batch, values) = self.read_batch(bi, &self.projection, |b| {
            DecodedBatch::values_buffer(b, &opts.audio_column, layout)
        })?;
        DecodedBatch::new(
            &self.path,
            &batch,
            opts,
            layout,
            values.map(|(off, _)| (self.batches[bi].body_start + off) as u64),
            self.batches[bi].first_row,
        )
    }

    /// The directory relative audio paths of this shard resolve against by default.
    pub(super) fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    /// The label of every row (a list column: each row's first class), -1 for none, reading
    /// only the label column.
    pub(super) fn labels(&self, label_column: &str) -> Result<Vec<i64>> {
        let mut out = Vec::with_capacity(self.n_rows as usize);
        self.for_label_batches(label_column, |_, l| {
            out.extend((0..l.n_rows()).map(|r| l.first(r)));
        })?;
        Ok(out)
    }

    /// `f(first_row, labels)` for each record batch, reading only the label column.
    fn for_label_batches(
        &self,
        label_column: &str,
        mut f: impl FnMut(u64, RowLabels),
    ) -> Result<()> {
        let li = self
            .schema
            .index_of(label_column)
            .map_err(|e| ds_err(&self.path, e.to_string()))?;
        for bi in 0..self.batches.len() {
            let (batch, _) = self.read_batch(bi, &[li], |_| None)?;
            let first = self.batches[bi].first_row;
            f(
                first,
                RowLabels::read(&self.path, label_column, batch.column(0), first)?,
            );
        }
        Ok(())
    }

    /// The smallest and largest non-null label, where they are, and the count of nulls; None
    /// if every label is null. A uint64 label past int64 is an error naming its row.
    pub(super) fn label_range(&self, shard: u32, label_column: &str) -> Result<LabelRange> {
        let mut r = LabelRange::default();
        self.for_label_batches(label_column, |first, l| {
            for i in 0..l.n_rows() {
                for &v in l.row(i) {
                    r.add(v, (shard, first + i as u64));
                }
            }
        })?;
        Ok(r)
    }

    /// `len` bytes at file offset `offset` (a sample's audio), checking the shard is unchanged.
    pub(super) fn read_bytes(&self, offset: u64, len: usize) -> Result<Buffer> {
        Ok(Buffer::from_vec(self.src.read(offset, len)?))
    }

    /// Ask the kernel to start reading `len` bytes at `offset` into the page cache.
    pub(super) fn prefetch(&self, offset: u64, len: usize) {
        if len > 0 {
            self.src.prefetch(offset, len);
        }
    }

    /// Size of the file when it was opened.
    pub fn file_len(&self) -> u64 {
        self.src.len()
    }

    /// Index of the batch holding `row`.
    pub(super) fn batch_of(&self, row: u64) -> usize {
        self.batches
            .partition_point(|l| l.first_row + l.rows <= row)
    }
}

/// The body ranges of every buffer of `d` (and its children); sets `whole` if one lies outside.
fn collect_ranges(
    d: &ArrayData,
    within: &impl Fn(&Buffer) -> Option<(usize, usize)>,
    out: &mut Vec<(usize, usize)>,
    whole: &mut bool,
) {
    let nulls = d.nulls().map(|n| n.buffer().clone());
    for b in d.buffers().iter().chain(nulls.as_ref()) {
        if b.is_empty() {
            continue;
        }
        match within(b) {
            Some(r) => out.push(r),
            None => *whole = true,
        }
    }
    for c in d.child_data() {
        collect_ranges(c, within, out, whole);
    }
}
