//! Helpers that write small HF-style shards, for tests across the crate.

use super::*;
use arrow_array::builder::{BinaryBuilder, StringBuilder};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_array::{Int64Array, StructArray};
use arrow_schema::{DataType, Schema};
use arrow_schema::{Field, Fields};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// Write one stream shard of rows `rows` whose label column `label` is list<int64> (HF
/// `Sequence(ClassLabel)`): row `i` gets `classes(i)` (None: a null list).
pub fn write_multilabel_shard(
    path: &Path,
    rows: std::ops::Range<u64>,
    classes: impl Fn(u64) -> Option<Vec<i64>>,
) {
    use arrow_array::builder::{Int64Builder, ListBuilder};
    let base = hf_batch(rows.clone(), |_| 0);
    let mut lists = ListBuilder::new(Int64Builder::new());
    for i in rows {
        match classes(i) {
            Some(c) => {
                lists.values().append_slice(&c);
                lists.append(true);
            }
            None => lists.append(false),
        }
    }
    let lists = lists.finish();
    let schema = Schema::new(vec![
        base.schema().field(0).clone(),
        Field::new("label", lists.data_type().clone(), true),
    ]);
    let batch = RecordBatch::try_new(
        Arc::new(schema),
        vec![base.column(0).clone(), Arc::new(lists)],
    )
    .unwrap();
    let f = std::fs::File::create(path).unwrap();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(f, &batch.schema()).unwrap();
    w.write(&batch).unwrap();
    w.finish().unwrap();
}
