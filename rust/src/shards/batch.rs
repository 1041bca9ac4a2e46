//! The columns the loader reads: schema checks, label conversion and decoded record batches.

use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, BinaryArray, LargeBinaryArray, RecordBatch};
use arrow_buffer::{Buffer, NullBuffer};
use arrow_schema::{DataType, Schema};

use super::ipc::ds_err;
use crate::error::Result;

/// How the audio bytes are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AudioLayout {
    /// HF `Audio` feature: struct {bytes: binary, path: string}.
    Struct,
    /// A plain binary column.
    Plain,
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
    audio_column: &str,
    label_column: Option<&str>,
) -> Result<(Vec<usize>, AudioLayout, LabelKind)> {
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
    let mut kind = LabelKind::Single;
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
        let (offsets, child): (Vec<usize>, _) = match a.data_type() {
            DataType::List(_) => {
                let l = a.as_list::<i32>();
                let o = l.value_offsets().iter().map(|&x| x as usize).collect();
                (o, l.values().clone())
            }
            DataType::LargeList(_) => {
                let l = a.as_list::<i64>();
                let o = l.value_offsets().iter().map(|&x| x as usize).collect();
                (o, l.values().clone())
            }
            _ => {
                let values = labels_opt(path, column, a, first_row)?;
                return Ok(RowLabels {
                    offsets: (0..=values.len()).collect(),
                    values,
                });
            }
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

    /// Row `r`'s classes: its non-null values other than -1 ("no label").
    pub(super) fn classes(&self, r: usize) -> Vec<i64> {
        self.row(r)
            .iter()
            .flatten()
            .copied()
            .filter(|&v| v != -1)
            .collect()
    }

    /// Row `r`'s single label: its first class, or -1.
    pub(super) fn first(&self, r: usize) -> i64 {
        self.row(r).iter().flatten().copied().next().unwrap_or(-1)
    }
}

/// The labels of `a` (None for nulls); a uint64 label past int64 is an error naming its row
/// (`first_row` is the row of `a[0]` in the shard).
pub(super) fn labels_opt(
    path: &Path,
    column: &str,
    a: &ArrayRef,
    first_row: u64,
) -> Result<Vec<Option<i64>>> {
    macro_rules! conv {
        ($t:ty) => {
            a.as_primitive::<$t>()
                .iter()
                .map(|v| v.map(|v| v as i64))
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
            for (i, x) in v.iter().enumerate() {
                out.push(match x {
                    None => None,
                    Some(x) => Some(i64::try_from(x).map_err(|_| {
                        ds_err(
                            path,
                            format!(
                                "row {}, column '{column}': label {x} does not fit in int64",
                                first_row + i as u64
                            ),
                        )
                    })?),
                });
            }
            out
        }
        t => return Err(ds_err(path, label_type_error(column, t))),
    })
}

/// "expected an integer label type", with a hint for string labels.
fn label_type_error(column: &str, t: &DataType) -> String {
    let hint = if matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) {
        format!(
            " (string labels: encode them as class ids first, e.g. \
             ds = ds.class_encode_column('{column}'), then save_to_disk)"
        )
    } else {
        String::new()
    };
    format!(
        "column '{column}': expected an integer label type (int64) or a list of them \
         (list<int64>, multilabel), got {t}{hint}"
    )
}

enum BytesCol {
    Binary(BinaryArray),
    Large(LargeBinaryArray),
}

/// The parts of one record batch the loader needs. The audio bytes stay in the file: their
/// offsets are here, the values are read per sample.
pub(super) struct DecodedBatch {
    bytes: BytesCol,
    /// File offset of the audio values buffer (None: the values were read into memory).
    values_at: Option<u64>,
    /// Nulls of the audio struct itself (the bytes child has its own).
    outer_nulls: Option<NullBuffer>,
    /// Each row's classes (an int column: one class, or none for null / -1).
    pub(super) labels: RowLabels,
}

impl DecodedBatch {
    pub(super) fn new(
        path: &Path,
        batch: &RecordBatch,
        audio_column: &str,
        layout: AudioLayout,
        label_column: Option<&str>,
        values_at: Option<u64>,
        first_row: u64,
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
                RowLabels::read(path, l, a, first_row)?
            }
            None => RowLabels {
                offsets: (0..=batch.num_rows()).collect(),
                values: vec![None; batch.num_rows()],
            },
        };
        Ok(DecodedBatch {
            bytes,
            values_at,
            outer_nulls,
            labels,
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
        };
        match bytes.data_type() {
            DataType::Binary => Some(bytes.as_binary::<i32>().values().clone()),
            DataType::LargeBinary => Some(bytes.as_binary::<i64>().values().clone()),
            _ => None,
        }
    }

    /// Where the audio bytes of `row` are: in the file at (offset, len), or in memory; None
    /// when null. The decoder validated the offsets against the values buffer's length.
    pub(super) fn bytes(&self, row: usize) -> Option<AudioBytes> {
        if self.outer_nulls.as_ref().is_some_and(|n| n.is_null(row)) {
            return None;
        }
        let (s, e, values) = match &self.bytes {
            BytesCol::Binary(a) => {
                if a.is_null(row) {
                    return None;
                }
                let o = a.value_offsets();
                (o[row] as usize, o[row + 1] as usize, a.values())
            }
            BytesCol::Large(a) => {
                if a.is_null(row) {
                    return None;
                }
                let o = a.value_offsets();
                (o[row] as usize, o[row + 1] as usize, a.values())
            }
        };
        Some(match self.values_at {
            Some(at) => AudioBytes::File {
                offset: at + s as u64,
                len: e - s,
            },
            None => AudioBytes::Memory(values.slice_with_length(s, e - s)),
        })
    }
}

/// Where one sample's encoded audio is.
#[derive(Clone, Debug)]
pub enum AudioBytes {
    /// In the shard file, read on demand.
    File { offset: u64, len: usize },
    /// Already in memory.
    Memory(Buffer),
}
