//! Internal keys: a user key plus a 64-bit trailer `(sequence << 8) | kind`.
//!
//! Internal keys sort by user key ascending, then by trailer *descending*, so that the newest
//! version of a user key comes first. Encoded on disk as `user_key ++ trailer (u64 LE)`.

use crate::batch::MAX_KEY_SIZE;
use bytes::Bytes;
use std::borrow::Borrow;
use std::cmp::Ordering;

/// A user key above every key siltdb accepts (`MAX_KEY_SIZE + 1` bytes of `0xff`): the
/// recorded largest key of a table whose tombstone runs to the end of the key space, and
/// where a skip past such a tombstone goes.
pub(crate) static END_OF_KEYS: [u8; MAX_KEY_SIZE + 1] = [0xff; MAX_KEY_SIZE + 1];

/// A write's sequence number. 56 bits are usable.
pub(crate) type SeqNo = u64;

/// The largest sequence number; a lookup at `MAX_SEQ` sees every write.
pub(crate) const MAX_SEQ: SeqNo = (1 << 56) - 1;

/// Length of the trailer appended to encoded internal keys.
pub(crate) const TRAILER_LEN: usize = 8;

/// What an entry records about its user key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub(crate) enum ValueKind {
    /// A tombstone: the key is deleted at this sequence.
    Delete = 0,
    /// A value.
    Put = 1,
}

impl ValueKind {
    pub(crate) fn from_u8(b: u8) -> Option<ValueKind> {
        match b {
            0 => Some(ValueKind::Delete),
            1 => Some(ValueKind::Put),
            _ => None,
        }
    }
}

/// Packs a sequence number and kind into a trailer.
pub(crate) fn trailer(seq: SeqNo, kind: ValueKind) -> u64 {
    (seq << 8) | kind as u64
}

/// The trailer that sorts first among all versions of a user key visible at `seq`.
pub(crate) fn lookup_trailer(seq: SeqNo) -> u64 {
    (seq << 8) | 0xff
}

pub(crate) fn trailer_seq(t: u64) -> SeqNo {
    t >> 8
}

pub(crate) fn trailer_kind(t: u64) -> Option<ValueKind> {
    ValueKind::from_u8(t as u8)
}

/// Appends the encoded internal key to `out`.
pub(crate) fn encode_into(out: &mut Vec<u8>, user_key: &[u8], trailer: u64) {
    out.extend_from_slice(user_key);
    out.extend_from_slice(&trailer.to_le_bytes());
}

/// Encodes an internal key.
pub(crate) fn encode(user_key: &[u8], trailer: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(user_key.len() + TRAILER_LEN);
    encode_into(&mut v, user_key, trailer);
    v
}

/// Splits an encoded internal key; `None` if it is shorter than a trailer.
pub(crate) fn decode(ikey: &[u8]) -> Option<(&[u8], u64)> {
    let split = ikey.len().checked_sub(TRAILER_LEN)?;
    let (user, t) = ikey.split_at(split);
    Some((user, u64::from_le_bytes(t.try_into().ok()?)))
}

/// The user key of an encoded internal key (empty if malformed).
pub(crate) fn user_key(ikey: &[u8]) -> &[u8] {
    decode(ikey).map(|(u, _)| u).unwrap_or(&[])
}

/// Compares two (user key, trailer) pairs in internal-key order.
pub(crate) fn cmp_parts(a_user: &[u8], a_trailer: u64, b_user: &[u8], b_trailer: u64) -> Ordering {
    cmp_user(a_user, b_user).then(b_trailer.cmp(&a_trailer))
}

/// Compares two user keys bytewise, as `a.cmp(b)`, but first compares their first eight
/// bytes as one big-endian number when both have eight: distinct keys of a typical workload
/// differ there, and a compaction compares several keys per entry, where a call to `memcmp`
/// for each cost about a tenth of the compaction thread's time.
#[inline]
pub(crate) fn cmp_user(a: &[u8], b: &[u8]) -> Ordering {
    if let (Some(x), Some(y)) = (a.first_chunk::<8>(), b.first_chunk::<8>()) {
        let (x, y) = (u64::from_be_bytes(*x), u64::from_be_bytes(*y));
        if x != y {
            return x.cmp(&y);
        }
    }
    a.cmp(b)
}

/// `a == b` for user keys, deciding on the first eight bytes when they differ (see
/// [`cmp_user`]).
#[inline]
pub(crate) fn same_user(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    match (a.first_chunk::<8>(), b.first_chunk::<8>()) {
        (Some(x), Some(y)) if x != y => false,
        _ => a == b,
    }
}

/// Compares two encoded internal keys. Malformed keys (shorter than a trailer) sort first.
pub(crate) fn cmp_encoded(a: &[u8], b: &[u8]) -> Ordering {
    match (decode(a), decode(b)) {
        (Some((au, at)), Some((bu, bt))) => cmp_parts(au, at, bu, bt),
        (None, None) => a.cmp(b),
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
    }
}

/// An owned internal key, as the memtable stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct InternalKey {
    pub(crate) user_key: Bytes,
    pub(crate) trailer: u64,
    /// [`key_prefix`] of `user_key`, kept next to it so that most comparisons in the memtable's
    /// skiplist decide without loading the key's bytes.
    prefix: u64,
}

/// The first 8 bytes of `user_key`, zero-padded, as a big-endian number. If two keys'
/// prefixes differ, the keys compare the same way; if they are equal, the keys must be
/// compared in full.
pub(crate) fn key_prefix(user_key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = user_key.len().min(8);
    b[..n].copy_from_slice(&user_key[..n]);
    u64::from_be_bytes(b)
}

impl InternalKey {
    pub(crate) fn new(user_key: Bytes, seq: SeqNo, kind: ValueKind) -> Self {
        InternalKey {
            prefix: key_prefix(&user_key),
            user_key,
            trailer: trailer(seq, kind),
        }
    }

    pub(crate) fn kind(&self) -> Option<ValueKind> {
        trailer_kind(self.trailer)
    }
}

impl Ord for InternalKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.prefix
            .cmp(&other.prefix)
            .then_with(|| cmp_parts(&self.user_key, self.trailer, &other.user_key, other.trailer))
    }
}

impl PartialOrd for InternalKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A borrowed view of an internal key, so that the memtable can be searched with a borrowed
/// user key and no allocation (`InternalKey: Borrow<dyn KeyView>`).
pub(crate) trait KeyView {
    fn user_key(&self) -> &[u8];
    fn trailer(&self) -> u64;
    /// [`key_prefix`] of the user key.
    fn prefix(&self) -> u64;
}

impl KeyView for InternalKey {
    fn user_key(&self) -> &[u8] {
        &self.user_key
    }
    fn trailer(&self) -> u64 {
        self.trailer
    }
    fn prefix(&self) -> u64 {
        self.prefix
    }
}

/// A lookup key built from borrowed parts.
pub(crate) struct KeyRef<'a> {
    user_key: &'a [u8],
    trailer: u64,
    prefix: u64,
}

impl<'a> KeyRef<'a> {
    pub(crate) fn new(user_key: &'a [u8], trailer: u64) -> KeyRef<'a> {
        KeyRef {
            user_key,
            trailer,
            prefix: key_prefix(user_key),
        }
    }
}

impl KeyView for KeyRef<'_> {
    fn user_key(&self) -> &[u8] {
        self.user_key
    }
    fn trailer(&self) -> u64 {
        self.trailer
    }
    fn prefix(&self) -> u64 {
        self.prefix
    }
}

impl<'a> Borrow<dyn KeyView + 'a> for InternalKey {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for dyn KeyView + '_ {}

impl PartialOrd for dyn KeyView + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn KeyView + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.prefix().cmp(&other.prefix()).then_with(|| {
            cmp_parts(
                self.user_key(),
                self.trailer(),
                other.user_key(),
                other.trailer(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_key_comparisons_agree_with_bytewise_order() {
        let keys: Vec<&[u8]> = vec![
            b"",
            b"a",
            b"abcdefg",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefgi",
            b"abcdefghij",
            b"abcdefghik",
            b"abcdefgz",
            b"\xff\xff\xff\xff\xff\xff\xff\xff",
            b"\xff",
            b"b",
            b"\0\0\0\0\0\0\0\0",
            b"\0\0\0\0\0\0\0\0\0",
        ];
        for a in &keys {
            for b in &keys {
                assert_eq!(cmp_user(a, b), a.cmp(b), "{a:?} {b:?}");
                assert_eq!(same_user(a, b), a == b, "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn newer_versions_sort_first_and_user_keys_ascend() {
        let a5 = encode(b"a", trailer(5, ValueKind::Put));
        let a7 = encode(b"a", trailer(7, ValueKind::Delete));
        let ab1 = encode(b"ab", trailer(1, ValueKind::Put));
        let empty = encode(b"", trailer(1, ValueKind::Put));
        assert_eq!(cmp_encoded(&a7, &a5), Ordering::Less);
        assert_eq!(cmp_encoded(&a5, &ab1), Ordering::Less);
        assert_eq!(cmp_encoded(&empty, &a5), Ordering::Less);
        // A lookup at seq 6 lands between the version at 7 and the one at 5.
        let look = encode(b"a", lookup_trailer(6));
        assert_eq!(cmp_encoded(&a7, &look), Ordering::Less);
        assert_eq!(cmp_encoded(&look, &a5), Ordering::Less);
    }

    #[test]
    fn decode_roundtrip_and_malformed() {
        let k = encode(b"key", trailer(42, ValueKind::Put));
        let (u, t) = decode(&k).unwrap();
        assert_eq!(u, b"key");
        assert_eq!(trailer_seq(t), 42);
        assert_eq!(trailer_kind(t), Some(ValueKind::Put));
        assert!(decode(b"short").is_none());
        assert_eq!(user_key(b"x"), b"");
    }

    #[test]
    fn borrowed_view_orders_like_owned() {
        let owned = InternalKey::new(Bytes::from_static(b"k"), 3, ValueKind::Put);
        let view = KeyRef::new(b"k", lookup_trailer(3));
        let o: &dyn KeyView = &owned;
        let v: &dyn KeyView = &view;
        assert!(v < o);
        assert_eq!(trailer_seq(owned.trailer), 3);
        assert_eq!(owned.kind(), Some(ValueKind::Put));
    }

    proptest::proptest! {
        /// The prefix shortcut never changes the order: keys of 0..12 bytes over a small
        /// alphabet (with zero bytes, so that padded prefixes tie) compare as `cmp_parts` says.
        #[test]
        fn prefix_shortcut_keeps_internal_key_order(
            a in proptest::collection::vec(0u8..3, 0..12),
            b in proptest::collection::vec(0u8..3, 0..12),
            ta in 0u64..4,
            tb in 0u64..4,
        ) {
            let want = cmp_parts(&a, ta, &b, tb);
            let (oa, ob) = (
                InternalKey { prefix: key_prefix(&a), user_key: Bytes::from(a.clone()), trailer: ta },
                InternalKey { prefix: key_prefix(&b), user_key: Bytes::from(b.clone()), trailer: tb },
            );
            proptest::prop_assert_eq!(oa.cmp(&ob), want);
            let (va, vb) = (KeyRef::new(&a, ta), KeyRef::new(&b, tb));
            let (va, vb): (&dyn KeyView, &dyn KeyView) = (&va, &vb);
            proptest::prop_assert_eq!(va.cmp(vb), want);
            let vo: &dyn KeyView = &ob;
            proptest::prop_assert_eq!(va.cmp(vo), want);
        }
    }
}
