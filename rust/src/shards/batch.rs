//! The columns the loader reads: schema checks, label conversion and decoded record batches.

use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, BinaryArray, LargeBinaryArray, RecordBatch};
use arrow_buffer::{Buffer, NullBuffer};
use arrow_schema::{DataType, Schema};

use super::extra::{
    is_events, is_number, is_str, label_type_error, labels_opt, list_parts, numbers, RowEvents,
    StrCol,
};
use super::ipc::ds_err;
use super::paths::ReadOptions;
use crate::error::Result;

/// How the audio bytes are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AudioLayout {
    /// HF `Audio` feature: struct {bytes: binary, path: string}. A row whose bytes are null (HF's
    /// `decode=False` cache, BirdSet) is read from the file its path names.
    Struct,
    /// A plain binary column.
    Plain,
    /// A string column of file paths (BirdSet's `filepath`).
    Path,
}

/// Whether a label column holds one class per row or a list of classes (multilabel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelKind {
    /// An integer column: one class id per row (null or -1: none).
    Single,
    /// A list<integer> column (HF `Sequence(ClassLabel)`, BirdSet's `ebird_code_multilabel`).
    Multi,
}

/// The label kind of a column type, None if it is neither an integer nor a list of integers.
fn label_kind(t: &DataType) -> Option<LabelKind> {
    match t {
        t if t.is_integer() => Some(LabelKind::Single),
        DataType::List(f) | DataType::LargeList(f) if f.data_type().is_integer() => {
            Some(LabelKind::Multi)
        }
        _ => None,
    }
}

/// Check the schema and return (projection, audio layout, label kind).
pub(super) fn check_schema(
    path: &Path,
    schema: &Schema,
    opts: &ReadOptions,
) -> Result<(Vec<usize>, AudioLayout, LabelKind)> {
    let audio_column = opts.audio_column.as_str();
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
        t if is_str(t) => AudioLayout::Path,
        DataType::Struct(fields) => match fields.iter().find(|f| f.name() == "bytes") {
            Some(f) if is_bin(f.data_type()) => AudioLayout::Struct,
            _ => {
                return Err(ds_err(
                    path,
                    format!(
                        "column '{audio_column}': expected struct {{bytes: binary, path: string}}, \
                         binary or a string of paths, got {}",
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
                    "column '{audio_column}': expected struct {{bytes: binary, path: string}}, \
                     binary or a string of paths, got {t}"
                ),
            ))
        }
    };
    let mut projection = vec![ai];
    let mut kind = LabelKind::Single;
    let mut extra = |column: &str, ok: fn(&DataType) -> bool, want: &str| -> Result<()> {
        let (i, f) = schema.column_with_name(column).ok_or_else(|| {
            ds_err(
                path,
                format!("column '{column}': no such column (columns: {})", names()),
            )
        })?;
        if !ok(f.data_type()) {
            return Err(ds_err(
                path,
                format!("column '{column}': expected {want}, got {}", f.data_type()),
            ));
        }
        projection.push(i);
        Ok(())
    };
    if let Some(e) = &opts.events_column {
        extra(
            e,
            is_events,
            "a list of [start, end] seconds (list<list<float64>>)",
        )?;
    }
    if let Some((a, b)) = &opts.segment_columns {
        extra(a, is_number, "segment starts in seconds (a number column)")?;
        extra(b, is_number, "segment ends in seconds (a number column)")?;
    }
    if let Some(label_column) = opts.label_column.as_deref() {
        let (li, lf) = schema.column_with_name(label_column).ok_or_else(|| {
            ds_err(
                path,
                format!(
                    "column '{label_column}': no such column (columns: {})",
                    names()
                ),
            )
        })?;
        kind = label_kind(lf.data_type())
            .ok_or_else(|| ds_err(path, label_type_error(label_column, lf.data_type())))?;
        projection.push(li);
    }
    projection.sort_unstable();
    projection.dedup();
    Ok((projection, layout, kind))
}

/// The classes of each row of a label column: `values[offsets[r]..offsets[r + 1]]` (None for a
/// null label or a null list). An integer column gives every row exactly one value.
pub(super) struct RowLabels {
    pub(super) offsets: Vec<usize>,
    pub(super) values: Vec<Option<i64>>,
}

impl RowLabels {
    /// Read `a` (rows `first_row..` of its shard); errors name the file, row and column.
    pub(super) fn read(path: &Path, column: &str, a: &ArrayRef, first_row: u64) -> Result<Self> {
        let Some((offsets, child)) = list_parts(a) else {
            let values = labels_opt(path, column, a, first_row)?;
            return Ok(RowLabels {
                offsets: (0..=values.len()).collect(),
                values,
            });
        };
        // The child's own row numbers are not the table's: name the table row on errors.
        let all = labels_opt(path, column, &child, 0).map_err(|_| {
            let bad = (0..a.len()).find(|&r| {
                let s = child.slice(offsets[r], offsets[r + 1] - offsets[r]);
                labels_opt(path, column, &s, 0).is_err()
            });
            ds_err(
                path,
                format!(
                    "row {}, column '{column}': a label does not fit in int64",
                    first_row + bad.unwrap_or(0) as u64
                ),
            )
        })?;
        let mut out = RowLabels {
            offsets: vec![0],
            values: Vec::with_capacity(all.len()),
        };
        for r in 0..a.len() {
            if a.is_null(r) {
                out.values.push(None);
            } else {
                out.values
                    .extend_from_slice(&all[offsets[r]..offsets[r + 1]]);
            }
            out.offsets.push(out.values.len());
        }
        Ok(out)
    }

    pub(super) fn n_rows(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Row `r`'s values (None for nulls).
    pub(super) fn row(&self, r: usize) -> &[Option<i64>] {
        &self.values[self.offsets[r]..self.offsets[r + 1]]
    }

    /// Row `r`'s classes: its non-null values other than -1; an empty list is no species.
    /// -1 means "no label" as null does (and as in an int column): a row of nulls and -1 only
    /// (a null list, `[null]`, `[-1]`) is unlabelled, `[-1]`, which the batch turns into a
    /// multi-hot row of -1 (masked, as a null int label is).
    pub(super) fn classes(&self, r: usize) -> Vec<i64> {
        let row = self.row(r);
        let classes: Vec<i64> = row.iter().flatten().copied().filter(|&v| v != -1).collect();
        if !row.is_empty() && classes.is_empty() {
            return vec![-1];
        }
        classes
    }

    /// Row `r`'s single label: its first class, or -1.
    pub(super) fn first(&self, r: usize) -> i64 {
        self.row(r).iter().flatten().copied().next().unwrap_or(-1)
    }
}

enum BytesCol {
    Binary(BinaryArray),
    Large(LargeBinaryArray),
}

impl BytesCol {
    /// (start, end, values) of row `r`'s bytes; None when null.
    fn get(&self, r: usize) -> Option<(usize, usize, &Buffer)> {
        match self {
            BytesCol::Binary(a) => (!a.is_null(r)).then(|| {
                let o = a.value_offsets();
                (o[r] as usize, o[r + 1] as usize, a.values())
            }),
            BytesCol::Large(a) => (!a.is_null(r)).then(|| {
                let o = a.value_offsets();
                (o[r] as usize, o[r + 1] as usize, a.values())
            }),
        }
    }
}

/// The audio column's bytes child and path child (either may be absent).
fn audio_parts(
    path: &Path,
    batch: &RecordBatch,
    audio_column: &str,
    layout: AudioLayout,
) -> Result<(Option<ArrayRef>, Option<ArrayRef>, Option<NullBuffer>)> {
    let audio = batch
        .column_by_name(audio_column)
        .ok_or_else(|| ds_err(path, format!("column '{audio_column}': no such column")))?;
    Ok(match layout {
        AudioLayout::Struct => {
            let s = audio.as_struct();
            let child = s.column_by_name("bytes").ok_or_else(|| {
                ds_err(path, format!("column '{audio_column}': no 'bytes' field"))
            })?;
            let paths = s
                .column_by_name("path")
                .filter(|p| is_str(p.data_type()))
                .cloned();
            (Some(child.clone()), paths, s.nulls().cloned())
        }
        AudioLayout::Plain => (Some(audio.clone()), None, None),
        AudioLayout::Path => (None, Some(audio.clone()), None),
    })
}

/// Each row's segment start and end seconds (None: null).
pub(super) type Segments = (Vec<Option<f64>>, Vec<Option<f64>>);

/// The parts of one record batch the loader needs. The audio bytes stay in the file: their
/// offsets are here, the values are read per sample.
pub(super) struct DecodedBatch {
    bytes: Option<BytesCol>,
    /// Stored audio paths (a path-only row has null bytes and a path).
    paths: Option<StrCol>,
    /// File offset of the audio values buffer (None: the values were read into memory).
    values_at: Option<u64>,
    /// Nulls of the audio struct itself (the bytes child has its own).
    outer_nulls: Option<NullBuffer>,
    /// Each row's classes (an int column: one class, or none for null / -1).
    pub(super) labels: RowLabels,
    /// Each row's events (with an events column).
    pub(super) events: Option<RowEvents>,
    /// Each row's segment start and end (with segment columns).
    pub(super) segments: Option<Segments>,
}

impl DecodedBatch {
    pub(super) fn new(
        path: &Path,
        batch: &RecordBatch,
        opts: &ReadOptions,
        layout: AudioLayout,
        values_at: Option<u64>,
        first_row: u64,
    ) -> Result<Self> {
        let audio_column = opts.audio_column.as_str();
        let (bytes, paths, outer_nulls) = audio_parts(path, batch, audio_column, layout)?;
        let bytes = match bytes.as_ref().map(|b| (b, b.data_type())) {
            None => None,
            Some((b, DataType::Binary)) => Some(BytesCol::Binary(b.as_binary::<i32>().clone())),
            Some((b, DataType::LargeBinary)) => Some(BytesCol::Large(b.as_binary::<i64>().clone())),
            Some((_, t)) => {
                return Err(ds_err(
                    path,
                    format!("column '{audio_column}': bytes have type {t}"),
                ))
            }
        };
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .ok_or_else(|| ds_err(path, format!("column '{name}': no such column")))
        };
        let labels = match opts.label_column.as_deref() {
            Some(l) => RowLabels::read(path, l, column(l)?, first_row)?,
            None => RowLabels {
                offsets: (0..=batch.num_rows()).collect(),
                values: vec![None; batch.num_rows()],
            },
        };
        let events = match opts.events_column.as_deref() {
            Some(e) => Some(RowEvents::read(path, e, column(e)?)?),
            None => None,
        };
        let segments = match &opts.segment_columns {
            Some((a, b)) => Some((numbers(path, a, column(a)?)?, numbers(path, b, column(b)?)?)),
            None => None,
        };
        Ok(DecodedBatch {
            bytes,
            paths: paths.as_ref().and_then(StrCol::of),
            values_at,
            outer_nulls,
            labels,
            events,
            segments,
        })
    }

    /// The values buffer of the audio bytes in a decoded batch (to locate it in the body).
    pub(super) fn values_buffer(
        batch: &RecordBatch,
        audio_column: &str,
        layout: AudioLayout,
    ) -> Option<Buffer> {
        let audio = batch.column_by_name(audio_column)?;
        let bytes = match layout {
            AudioLayout::Struct => audio.as_struct_opt()?.column_by_name("bytes")?.clone(),
            AudioLayout::Plain => audio.clone(),
            AudioLayout::Path => return None,
        };
        match bytes.data_type() {
            DataType::Binary => Some(bytes.as_binary::<i32>().values().clone()),
            DataType::LargeBinary => Some(bytes.as_binary::<i64>().values().clone()),
            _ => None,
        }
    }

    /// Where the audio of `row` is: in the file at (offset, len), in memory, or in the file its
    /// stored path names (null or empty bytes and a path); None when there is neither. The
    /// decoder validated the offsets against the values buffer's length.
    pub(super) fn bytes(&self, row: usize) -> Option<RawAudio<'_>> {
        if self.outer_nulls.as_ref().is_some_and(|n| n.is_null(row)) {
            return None;
        }
        let got = self.bytes.as_ref().and_then(|b| b.get(row));
        if got.is_none_or(|(s, e, _)| e == s) {
            if let Some(p) = self.stored_path(row) {
                return Some(RawAudio::Path(p));
            }
        }
        let (s, e, values) = got?;
        Some(RawAudio::Bytes(match self.values_at {
            Some(at) => AudioBytes::File {
                offset: at + s as u64,
                len: e - s,
            },
            None => AudioBytes::Memory(values.slice_with_length(s, e - s)),
        }))
    }

    /// Row `row`'s stored audio path, if it has one.
    pub(super) fn stored_path(&self, row: usize) -> Option<&str> {
        self.paths.as_ref().and_then(|p| p.get(row))
    }
}

/// A row's audio as stored: bytes, or a path still to resolve.
pub(super) enum RawAudio<'a> {
    Bytes(AudioBytes),
    Path(&'a str),
}

/// Where one sample's encoded audio is.
#[derive(Clone, Debug)]
pub enum AudioBytes {
    /// In the shard file, read on demand.
    File { offset: u64, len: usize },
    /// Already in memory.
    Memory(Buffer),
    /// In its own file (a path-only row): `stored` as the dataset holds it, `path` resolved.
    Path { stored: String, path: PathBuf },
}
