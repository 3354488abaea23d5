//! Small byte strings packed into shared buffers: [`copy_into`] copies one into the tail of a
//! `BytesMut` and hands it out as a `Bytes` slice of it, so that many short-lived strings
//! (batch encodings in a memtable, keys a compaction decodes) cost one allocation per buffer
//! instead of one each, and their memory goes back a buffer at a time.

use bytes::{Bytes, BytesMut};

/// `data` as a `Bytes` slice of `chunk`, which first gets a new buffer of `chunk_size` bytes
/// (or of `data`'s length, if larger) when `data` does not fit in what is left of it. Earlier
/// slices keep their buffer alive on their own.
pub(crate) fn copy_into(chunk: &mut BytesMut, chunk_size: usize, data: &[u8]) -> Bytes {
    copy_into_or(chunk, data, || {
        BytesMut::with_capacity(chunk_size.max(data.len()))
    })
}

/// [`copy_into`], with the new buffer (which must hold `data`) from `fresh` when `data` does
/// not fit in what is left of `chunk`.
pub(crate) fn copy_into_or(
    chunk: &mut BytesMut,
    data: &[u8],
    fresh: impl FnOnce() -> BytesMut,
) -> Bytes {
    if chunk.capacity() - chunk.len() < data.len() {
        *chunk = fresh();
    }
    chunk.extend_from_slice(data);
    let out = chunk.split().freeze();
    // The chunk's next lines, for the next strings (see `crate::prefetch`).
    crate::prefetch::for_write(out.as_ptr_range().end, 4);
    out
}
