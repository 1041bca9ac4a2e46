//! Arrow IPC message framing: length prefixes, flatbuffer headers and record batch locations.

use std::path::Path;

use crate::error::{Error, Result};

/// Where one record batch's metadata and body live in the file.
#[derive(Clone, Copy, Debug)]
pub(super) struct BatchLoc {
    pub(super) meta_start: usize,
    pub(super) meta_len: usize,
    pub(super) body_start: usize,
    pub(super) body_len: usize,
    pub(super) rows: u64,
    /// Row number (within the shard) of this batch's first row.
    pub(super) first_row: u64,
}

/// Append the record batch whose metadata is `meta` (start, length) and body `body` (start,
/// length), holding `rows` rows: its first row follows the previous batch's last.
pub(super) fn push_loc(
    locs: &mut Vec<BatchLoc>,
    meta: (usize, usize),
    body: (usize, usize),
    rows: u64,
) {
    let first_row = locs.last().map_or(0, |l| l.first_row + l.rows);
    locs.push(BatchLoc {
        meta_start: meta.0,
        meta_len: meta.1,
        body_start: body.0,
        body_len: body.1,
        rows,
        first_row,
    });
}

pub(super) fn ds_err(path: &Path, detail: impl Into<String>) -> Error {
    Error::Dataset {
        path: path.display().to_string(),
        detail: detail.into(),
    }
}

pub(super) fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parse the length prefix of the IPC message at `at`. `Ok(None)` at end of stream.
pub(super) fn message_prefix(path: &Path, b: &[u8], at: usize) -> Result<Option<(usize, usize)>> {
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

pub(super) fn parse_message<'a>(
    path: &Path,
    b: &'a [u8],
    at: usize,
) -> Result<arrow_ipc::Message<'a>> {
    arrow_ipc::root_as_message(b).map_err(|e| {
        ds_err(
            path,
            format!("corrupt IPC message metadata at byte {at}: {e}"),
        )
    })
}

/// Rows of a record batch message; rejects what the lazy reader cannot decode.
pub(super) fn batch_rows(path: &Path, rb: &arrow_ipc::RecordBatch<'_>, at: usize) -> Result<u64> {
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
