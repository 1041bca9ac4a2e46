//! Column readers below the record batch: integer labels, list offsets, and the optional per-row
//! columns: audio paths (strings), event times (list<[start, end]>) and segment bounds (two
//! number columns). batch.rs builds on this module, never the reverse.

use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, LargeStringArray, StringArray};
use arrow_schema::DataType;

use super::ipc::ds_err;
use crate::error::Result;

pub(super) fn is_str(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8)
}

/// A string column (audio paths).
pub(super) enum StrCol {
    Utf8(StringArray),
    Large(LargeStringArray),
}

impl StrCol {
    pub(super) fn of(a: &ArrayRef) -> Option<StrCol> {
        match a.data_type() {
            DataType::Utf8 => Some(StrCol::Utf8(a.as_string::<i32>().clone())),
            DataType::LargeUtf8 => Some(StrCol::Large(a.as_string::<i64>().clone())),
            _ => None,
        }
    }

    /// Row `r`'s string; None when null or empty.
    pub(super) fn get(&self, r: usize) -> Option<&str> {
        let s = match self {
            StrCol::Utf8(a) => (!a.is_null(r)).then(|| a.value(r)),
            StrCol::Large(a) => (!a.is_null(r)).then(|| a.value(r)),
        };
        s.filter(|s| !s.is_empty())
    }
}

/// Whether `t` can hold numbers in seconds (a float or an integer column).
pub(super) fn is_number(t: &DataType) -> bool {
    t.is_integer() || matches!(t, DataType::Float32 | DataType::Float64)
}

/// Whether `t` is a list of [start, end] lists of numbers.
pub(super) fn is_events(t: &DataType) -> bool {
    match t {
        DataType::List(f) | DataType::LargeList(f) => matches!(
            f.data_type(),
            DataType::List(g) | DataType::LargeList(g) | DataType::FixedSizeList(g, _)
                if is_number(g.data_type())
        ),
        _ => false,
    }
}

/// The values of a number column as f64 (None for nulls).
pub(super) fn numbers(path: &Path, column: &str, a: &ArrayRef) -> Result<Vec<Option<f64>>> {
    Ok(match a.data_type() {
        DataType::Float64 => a.as_primitive::<Float64Type>().iter().collect(),
        DataType::Float32 => a
            .as_primitive::<Float32Type>()
            .iter()
            .map(|v| v.map(f64::from))
            .collect(),
        _ => labels_opt(path, column, a, 0)?
            .into_iter()
            .map(|v| v.map(|v| v as f64))
            .collect(),
    })
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
pub(super) fn label_type_error(column: &str, t: &DataType) -> String {
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

/// (offsets of each element, child array) of a list array.
pub(super) fn list_parts(a: &ArrayRef) -> Option<(Vec<usize>, ArrayRef)> {
    Some(match a.data_type() {
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
        DataType::FixedSizeList(_, n) => {
            let l = a.as_fixed_size_list();
            let n = *n as usize;
            ((0..=l.len()).map(|i| i * n).collect(), l.values().clone())
        }
        _ => return None,
    })
}

/// Each row's events, `events[offsets[r]..offsets[r + 1]]` as (start, end) seconds, and the rows
/// whose events are malformed (each fails alone when it is read: one bad row does not cost its
/// record batch).
pub(super) struct RowEvents {
    offsets: Vec<usize>,
    events: Vec<(f64, f64)>,
    /// (row in the batch, why its events are malformed), ascending by row.
    bad: Vec<(usize, String)>,
}

impl RowEvents {
    /// Read a list<[start, end]> column: a null list or a null event is no event; a row with an
    /// event that is not two finite numbers with 0 <= start <= end is recorded as bad (see
    /// [`RowEvents::row`]). A column that is not a list of lists is an error.
    pub(super) fn read(path: &Path, column: &str, a: &ArrayRef) -> Result<Self> {
        let (outer, pairs) = list_parts(a)
            .ok_or_else(|| ds_err(path, format!("column '{column}': not a list column")))?;
        let (inner, values) = list_parts(&pairs)
            .ok_or_else(|| ds_err(path, format!("column '{column}': not a list of lists")))?;
        let values = numbers(path, column, &values)?;
        let mut out = RowEvents {
            offsets: vec![0],
            events: Vec::new(),
            bad: Vec::new(),
        };
        for r in 0..a.len() {
            let kept = out.events.len();
            let events = if a.is_null(r) {
                outer[r]..outer[r]
            } else {
                outer[r]..outer[r + 1]
            };
            for e in events {
                if pairs.is_null(e) {
                    continue;
                }
                let v = &values[inner[e]..inner[e + 1]];
                match v {
                    [Some(s), Some(t)] if s.is_finite() && t.is_finite() && *s >= 0.0 && s <= t => {
                        out.events.push((*s, *t))
                    }
                    _ => {
                        out.events.truncate(kept);
                        out.bad.push((
                            r,
                            format!(
                                "column '{column}': expected [start, end] seconds with 0 <= \
                                 start <= end, got {v:?} (event {} of the row)",
                                e - outer[r]
                            ),
                        ));
                        break;
                    }
                }
            }
            out.offsets.push(out.events.len());
        }
        Ok(out)
    }

    /// Row `r`'s events, or why they are malformed (the column and the bad event; the caller
    /// names the file and row).
    pub(super) fn row(&self, r: usize) -> std::result::Result<Vec<(f64, f64)>, &str> {
        match self.bad.binary_search_by_key(&r, |(row, _)| *row) {
            Ok(i) => Err(&self.bad[i].1),
            Err(_) => Ok(self.events[self.offsets[r]..self.offsets[r + 1]].to_vec()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::builder::{Float64Builder, ListBuilder};

    /// A list<list<float64>> column of `rows` (None: a null list).
    fn events_column(rows: &[Option<Vec<[f64; 2]>>]) -> ArrayRef {
        let mut b = ListBuilder::new(ListBuilder::new(Float64Builder::new()));
        for row in rows {
            match row {
                None => b.append(false),
                Some(events) => {
                    for [s, e] in events {
                        b.values().values().append_value(*s);
                        b.values().values().append_value(*e);
                        b.values().append(true);
                    }
                    b.append(true);
                }
            }
        }
        std::sync::Arc::new(b.finish())
    }

    #[test]
    fn one_bad_event_row_fails_alone_and_is_named() {
        // Row 1 starts at -0.5 s, row 3 ends before it starts; their neighbours are fine.
        let a = events_column(&[
            Some(vec![[0.5, 1.0]]),
            Some(vec![[1.0, 2.0], [-0.5, 1.0]]),
            None,
            Some(vec![[3.0, 2.0]]),
            Some(vec![[0.0, 0.0], [4.0, 9.0]]),
        ]);
        let ev = RowEvents::read(Path::new("/d/a.arrow"), "detected_events", &a).unwrap();
        assert_eq!(ev.row(0), Ok(vec![(0.5, 1.0)]));
        assert_eq!(ev.row(2), Ok(vec![]));
        assert_eq!(ev.row(4), Ok(vec![(0.0, 0.0), (4.0, 9.0)]));
        let e = ev.row(1).unwrap_err();
        assert!(
            e.contains("column 'detected_events'") && e.contains("[Some(-0.5), Some(1.0)]"),
            "{e}"
        );
        assert!(e.contains("event 1 of the row"), "{e}");
        assert!(ev.row(3).unwrap_err().contains("[Some(3.0), Some(2.0)]"));
    }
}
