//! [`TableBuilder`]: writes one SSTable from entries in internal-key order.
//!
//! Layout: data blocks, then the filter block (if bits per key > 0), the index block, the
//! properties block, and the footer. The file is synced before `finish` returns.

use super::block::BlockBuilder;
use super::format::{put_block_trailer, BlockHandle, BlockKind, Footer, FORMAT_VERSION};
use super::properties::TableProperties;
use crate::encoding::put_varint;
use crate::error::{io_context, Error, Result};
use crate::filter::{hash_key, FilterBuilder};
use crate::fs::{FileSystem, WritableFile};
use crate::key::{self, ValueKind};
use std::path::{Path, PathBuf};

/// Entries between restart points in data blocks.
const RESTART_INTERVAL: usize = 16;

/// How to build a table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BuildOptions {
    pub(crate) block_size: usize,
    /// 0 (or less): no filter block.
    pub(crate) bits_per_key: f64,
    pub(crate) level: u32,
}

/// What a finished table is.
#[derive(Clone, Debug)]
pub(crate) struct BuiltTable {
    pub(crate) file_size: u64,
    pub(crate) properties: TableProperties,
}

/// Writes one table.
#[derive(Debug)]
pub(crate) struct TableBuilder {
    file: Box<dyn WritableFile>,
    path: PathBuf,
    opts: BuildOptions,
    offset: u64,
    buf: Vec<u8>,
    block: BlockBuilder,
    index: BlockBuilder,
    filter: Option<FilterBuilder>,
    props: TableProperties,
    last_user_key: Option<Vec<u8>>,
}

impl TableBuilder {
    /// Creates the file at `path`.
    pub(crate) fn create(fs: &dyn FileSystem, path: &Path, opts: BuildOptions) -> Result<Self> {
        let file = fs.create(path).map_err(|e| io_context("create", path, e))?;
        Ok(TableBuilder {
            file,
            path: path.to_path_buf(),
            opts,
            offset: 0,
            buf: Vec::new(),
            block: BlockBuilder::new(RESTART_INTERVAL),
            index: BlockBuilder::new(1),
            filter: (opts.bits_per_key > 0.0).then(FilterBuilder::new),
            props: TableProperties {
                filter_millibits_per_key: (opts.bits_per_key.max(0.0) * 1000.0).round() as u64,
                level: u64::from(opts.level),
                min_seq: u64::MAX,
                ..TableProperties::default()
            },
            last_user_key: None,
        })
    }

    /// Adds an entry. Entries must come in strictly increasing internal-key order.
    pub(crate) fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        let (user, trailer) = key::decode(ikey).ok_or_else(|| {
            Error::InvalidArgument("internal key shorter than its trailer".into())
        })?;
        debug_assert!(
            self.props.entries == 0 || key::cmp_encoded(&self.props.largest, ikey).is_lt(),
            "keys out of order"
        );
        if self.last_user_key.as_deref() != Some(user) {
            if let Some(f) = self.filter.as_mut() {
                f.add_hash(hash_key(user));
            }
            self.props.user_keys += 1;
            self.props.raw_key_bytes += user.len() as u64;
            self.last_user_key = Some(user.to_vec());
        }
        if self.props.entries == 0 {
            self.props.smallest = ikey.to_vec();
        }
        self.props.largest.clear();
        self.props.largest.extend_from_slice(ikey);
        self.props.entries += 1;
        if key::trailer_kind(trailer) == Some(ValueKind::Delete) {
            self.props.deletions += 1;
        }
        let seq = key::trailer_seq(trailer);
        self.props.min_seq = self.props.min_seq.min(seq);
        self.props.max_seq = self.props.max_seq.max(seq);
        self.props.raw_value_bytes += value.len() as u64;
        self.block.add(ikey, value);
        if self.block.size_estimate() >= self.opts.block_size {
            self.flush_data_block()?;
        }
        Ok(())
    }

    /// Bytes written so far plus the open block.
    pub(crate) fn estimated_size(&self) -> u64 {
        self.offset + self.block.size_estimate() as u64
    }

    /// Entries added so far.
    pub(crate) fn entries(&self) -> u64 {
        self.props.entries
    }

    fn write_block(
        &mut self,
        contents: Option<&[u8]>,
        kind: BlockKind,
        from_block: bool,
    ) -> Result<BlockHandle> {
        self.buf.clear();
        if from_block {
            if kind == BlockKind::Index {
                self.index.finish_into(&mut self.buf);
            } else {
                self.block.finish_into(&mut self.buf);
            }
        } else if let Some(c) = contents {
            self.buf.extend_from_slice(c);
        }
        let handle = BlockHandle {
            offset: self.offset,
            size: self.buf.len() as u64,
        };
        put_block_trailer(&mut self.buf, 0, kind, self.offset);
        self.file
            .append(&self.buf)
            .map_err(|e| io_context("write", &self.path, e))?;
        self.offset += self.buf.len() as u64;
        Ok(handle)
    }

    fn flush_data_block(&mut self) -> Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        let last = self.block.last_key().to_vec();
        let handle = self.write_block(None, BlockKind::Data, true)?;
        self.props.data_blocks += 1;
        self.props.data_bytes += handle.size + super::format::BLOCK_TRAILER_LEN as u64;
        let mut v = Vec::with_capacity(20);
        put_varint(&mut v, handle.offset);
        put_varint(&mut v, handle.size);
        self.index.add(&last, &v);
        Ok(())
    }

    /// Writes the remaining blocks and the footer, and syncs the file.
    pub(crate) fn finish(mut self) -> Result<BuiltTable> {
        self.flush_data_block()?;
        if self.props.entries == 0 {
            self.props.min_seq = 0;
        }
        let filter = match self.filter.take() {
            Some(f) => {
                let block = f.finish(self.opts.bits_per_key);
                Some(self.write_block(Some(&block), BlockKind::Filter, false)?)
            }
            None => None,
        };
        let index = self.write_block(None, BlockKind::Index, true)?;
        let props = self.props.encode();
        let properties = self.write_block(Some(&props), BlockKind::Properties, false)?;
        let footer = Footer {
            index,
            filter,
            properties,
            version: FORMAT_VERSION,
        }
        .encode();
        self.file
            .append(&footer)
            .map_err(|e| io_context("write", &self.path, e))?;
        self.offset += footer.len() as u64;
        self.file
            .sync()
            .map_err(|e| io_context("sync", &self.path, e))?;
        Ok(BuiltTable {
            file_size: self.offset,
            properties: self.props,
        })
    }
}
