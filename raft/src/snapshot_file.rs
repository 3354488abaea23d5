//! The snapshot's bytes: the data pairs openraft ships between nodes, and the file a node
//! keeps its current snapshot in.
//!
//! Data (what `SnapshotData` holds and the network carries): a sequence of pairs, each
//! `key length (u32 LE) | key | value length (u32 LE) | value`, keys in ascending order.
//!
//! File `snapshot` in the node's directory:
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `SILTRSNP` |
//! | 4 | version, u32 LE, 1 |
//! | 4 | meta length `m`, u32 LE |
//! | `m` | the snapshot's meta (openraft `SnapshotMeta`, JSON) |
//! | 8 | data length `d`, u64 LE |
//! | `d` | the data, as above |
//! | 4 | CRC-32 (IEEE) of every byte before it, u32 LE |
//!
//! Written to `snapshot.tmp`, fsynced, renamed over `snapshot`, directory fsynced: a crash
//! leaves the old snapshot or the new one, whole.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use openraft::BasicNode;
use openraft::SnapshotMeta;

use crate::{Error, NodeId};

/// The meta of a snapshot of siltdb-raft.
pub(crate) type Meta = SnapshotMeta<NodeId, BasicNode>;

const MAGIC: &[u8; 8] = b"SILTRSNP";
const VERSION: u32 = 1;
pub(crate) const FILE_NAME: &str = "snapshot";

/// Appends one pair to snapshot data.
pub(crate) fn push_pair(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value);
}

/// One key and its value, borrowed from snapshot data.
pub(crate) type Pair<'a> = (&'a [u8], &'a [u8]);

/// Splits snapshot data into its pairs, checking every length against what is left.
pub(crate) fn pairs(data: &[u8]) -> Result<Vec<Pair<'_>>, Error> {
    let mut out = Vec::new();
    let mut at = 0usize;
    let field = |at: &mut usize| -> Result<&[u8], Error> {
        let len_end = at
            .checked_add(4)
            .filter(|&e| e <= data.len())
            .ok_or_else(|| {
                Error::corruption("snapshot data", format!("length field cut at offset {at}"))
            })?;
        let len = u32::from_le_bytes(data[*at..len_end].try_into().expect("4 bytes")) as usize;
        let end = len_end
            .checked_add(len)
            .filter(|&e| e <= data.len())
            .ok_or_else(|| {
                Error::corruption(
                    "snapshot data",
                    format!(
                        "field of {len} bytes at offset {len_end} runs past the end ({})",
                        data.len()
                    ),
                )
            })?;
        *at = end;
        Ok(&data[len_end..end])
    };
    while at < data.len() {
        let start = at;
        let k = field(&mut at)?;
        let v = field(&mut at)?;
        // No state machine holds a longer key or value (every write is checked by
        // `storable`): loading one would fail in siltdb after the file was kept, and again at
        // every open, stopping the node for good instead of refusing the snapshot.
        if k.len() > crate::MAX_USER_KEY || v.len() > siltdb::MAX_VALUE_SIZE {
            return Err(Error::corruption(
                "snapshot data",
                format!(
                    "the pair at offset {start} has a key of {} bytes and a value of {}: \
                     more than a state machine stores ({} and {})",
                    k.len(),
                    v.len(),
                    crate::MAX_USER_KEY,
                    siltdb::MAX_VALUE_SIZE
                ),
            ));
        }
        out.push((k, v));
    }
    Ok(out)
}

/// Writes the snapshot file in `dir` durably (see the module doc).
pub(crate) fn save(dir: &Path, meta: &Meta, data: &[u8]) -> Result<(), Error> {
    let meta_json = serde_json::to_vec(meta).expect("snapshot meta serialises to JSON");
    let mut buf = Vec::with_capacity(28 + meta_json.len() + data.len());
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&VERSION.to_le_bytes());
    buf.extend_from_slice(&(meta_json.len() as u32).to_le_bytes());
    buf.extend_from_slice(&meta_json);
    buf.extend_from_slice(&(data.len() as u64).to_le_bytes());
    buf.extend_from_slice(data);
    let crc = crc32fast::hash(&buf);
    buf.extend_from_slice(&crc.to_le_bytes());
    let tmp = dir.join(format!("{FILE_NAME}.tmp"));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(&buf)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(FILE_NAME))?;
    File::open(dir)?.sync_all()?;
    Ok(())
}

/// Reads the snapshot file in `dir`: `None` if there is none, `Error::Corruption` (naming the
/// offset) if it does not check out.
pub(crate) fn load(dir: &Path) -> Result<Option<(Meta, Vec<u8>)>, Error> {
    let path = dir.join(FILE_NAME);
    let buf = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let what = path.display().to_string();
    let bad = |offset: usize, why: &str| {
        Error::corruption(what.clone(), format!("{why} at offset {offset}"))
    };
    if buf.len() < 28 {
        return Err(bad(0, "file shorter than its fixed fields"));
    }
    if &buf[..8] != MAGIC {
        return Err(bad(0, "bad magic"));
    }
    let body = buf.len() - 4;
    let crc = u32::from_le_bytes(buf[body..].try_into().expect("4 bytes"));
    if crc32fast::hash(&buf[..body]) != crc {
        return Err(bad(body, "CRC mismatch"));
    }
    let version = u32::from_le_bytes(buf[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(bad(8, &format!("unknown version {version}")));
    }
    let meta_len = u32::from_le_bytes(buf[12..16].try_into().expect("4 bytes")) as usize;
    let meta_end = 16usize
        .checked_add(meta_len)
        .filter(|&e| e.checked_add(8).is_some_and(|d| d <= body))
        .ok_or_else(|| bad(12, "meta length runs past the end"))?;
    let meta: Meta =
        serde_json::from_slice(&buf[16..meta_end]).map_err(|e| bad(16, &format!("meta: {e}")))?;
    let data_len = u64::from_le_bytes(buf[meta_end..meta_end + 8].try_into().expect("8 bytes"));
    let data_start = meta_end + 8;
    if data_len != (body - data_start) as u64 {
        return Err(bad(meta_end, "data length does not match the file"));
    }
    // The data stays in the buffer it was read into (no second copy of it).
    let mut data = buf;
    data.truncate(body);
    data.drain(..data_start);
    Ok(Some((meta, data)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::StoredMembership;

    fn meta() -> Meta {
        Meta {
            last_log_id: Some(openraft::LogId::new(
                openraft::CommittedLeaderId::new(3, 1),
                42,
            )),
            last_membership: StoredMembership::default(),
            snapshot_id: "3-42-1".into(),
        }
    }

    #[test]
    fn pairs_round_trip_and_cut_data_is_corruption() {
        let mut d = Vec::new();
        push_pair(&mut d, b"a", b"1");
        push_pair(&mut d, b"bb", b"");
        assert_eq!(
            pairs(&d).unwrap(),
            vec![(&b"a"[..], &b"1"[..]), (&b"bb"[..], &b""[..])]
        );
        for cut in 1..d.len() {
            if cut == 10 {
                continue; // a cut between the two pairs is a valid, shorter snapshot
            }
            assert!(
                matches!(pairs(&d[..cut]), Err(Error::Corruption { .. })),
                "cut {cut}"
            );
        }
    }

    /// A pair the state machine could never have stored (a forged or damaged snapshot) is
    /// refused by the decoder, before an install keeps the file.
    #[test]
    fn a_pair_longer_than_a_state_machine_stores_is_corruption() {
        let longest = vec![b'k'; crate::MAX_USER_KEY];
        let mut d = Vec::new();
        push_pair(&mut d, &longest, b"v");
        assert_eq!(pairs(&d).unwrap().len(), 1);
        let mut longer = longest.clone();
        longer.push(b'k');
        push_pair(&mut d, &longer, b"v");
        assert!(matches!(pairs(&d), Err(Error::Corruption { .. })));
    }

    #[test]
    fn file_round_trips_and_every_flipped_byte_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path()).unwrap().is_none());
        let mut d = Vec::new();
        push_pair(&mut d, b"k", b"v");
        save(dir.path(), &meta(), &d).unwrap();
        let (m, data) = load(dir.path()).unwrap().unwrap();
        assert_eq!(m, meta());
        assert_eq!(data, d);
        let path = dir.path().join(FILE_NAME);
        let good = fs::read(&path).unwrap();
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0x10;
            fs::write(&path, &b).unwrap();
            assert!(
                matches!(load(dir.path()), Err(Error::Corruption { .. })),
                "byte {i}"
            );
        }
        fs::write(&path, &good[..good.len() - 1]).unwrap();
        assert!(matches!(load(dir.path()), Err(Error::Corruption { .. })));
    }
}
