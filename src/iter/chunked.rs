//! [`Chunked`]: a double-ended walk over lazily loaded chunks.

use super::{Entry, InternalIter};
use crate::error::Result;
use crate::key::{SeqNo, END_OF_KEYS};

/// A sequence of chunks, each loaded on demand.
pub(crate) trait ChunkSource {
    /// One loaded chunk, itself walkable from both ends.
    type Chunk: InternalIter;
    /// Loads chunk `i`.
    fn load(&mut self, i: usize) -> Result<Self::Chunk>;
    /// True if chunk `i`, by what is known without loading it, holds only entries whose user
    /// key is below `key` and whose sequence number is below `seq` (lets
    /// [`InternalIter::skip_front_to`] pass over it unread). The default knows nothing.
    fn skippable(&self, i: usize, key: &[u8], seq: SeqNo) -> bool {
        let _ = (i, key, seq);
        false
    }
    /// True if chunk `i`, by what is known without loading it, holds only entries whose user
    /// key is at or above `key` and whose sequence number is below `seq` (lets
    /// [`InternalIter::skip_back_to`] pass over it unread). The default knows nothing.
    fn skippable_back(&self, i: usize, key: &[u8], seq: SeqNo) -> bool {
        let _ = (i, key, seq);
        false
    }
}

/// Walks chunks `[start, end)` of a source from both ends. Each chunk is loaded once; when the
/// ends meet, each takes what is left of the other's chunk.
pub(crate) struct Chunked<S: ChunkSource> {
    source: S,
    next_front: usize,
    next_back: usize,
    front: Option<S::Chunk>,
    back: Option<S::Chunk>,
    failed: bool,
    /// A skip to apply to the next chunk the front loads: to `skip_key` (or past every key if
    /// `skip_to_end`) for versions older than the sequence number.
    pending_skip: Option<SeqNo>,
    /// The key of the pending skip (its buffer is reused from one skip to the next).
    skip_key: Vec<u8>,
    /// The pending skip is to the end of the key space: a to-end range delete, whose end
    /// ([`END_OF_KEYS`], 64 KiB) is not copied for every key it covers.
    skip_to_end: bool,
    /// A skip to apply to the next chunk the back loads: from `back_skip_key` up, for
    /// versions older than the sequence number.
    pending_back_skip: Option<SeqNo>,
    back_skip_key: Vec<u8>,
}

impl<S: ChunkSource> Chunked<S> {
    pub(crate) fn new(source: S, start: usize, end: usize) -> Self {
        Chunked {
            source,
            next_front: start,
            next_back: end.max(start),
            front: None,
            back: None,
            failed: false,
            pending_skip: None,
            skip_key: Vec::new(),
            skip_to_end: false,
            pending_back_skip: None,
            back_skip_key: Vec::new(),
        }
    }

    fn fail(&mut self, e: crate::error::Error) -> Option<Result<Entry>> {
        self.failed = true;
        Some(Err(e))
    }
}

impl<S: ChunkSource> Iterator for Chunked<S> {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        if self.failed {
            return None;
        }
        loop {
            if let Some(chunk) = self.front.as_mut() {
                match chunk.next() {
                    Some(Err(e)) => return self.fail(e),
                    Some(item) => return Some(item),
                    None => self.front = None,
                }
            }
            if self.next_front < self.next_back {
                match self.source.load(self.next_front) {
                    Ok(mut c) => {
                        if let Some(seq) = self.pending_skip.take() {
                            let key = if self.skip_to_end {
                                &END_OF_KEYS[..]
                            } else {
                                &self.skip_key[..]
                            };
                            if let Err(e) = c.skip_front_to(key, seq) {
                                return self.fail(e);
                            }
                        }
                        self.front = Some(c)
                    }
                    Err(e) => return self.fail(e),
                }
                self.next_front += 1;
                continue;
            }
            return match self.back.as_mut()?.next() {
                Some(Err(e)) => self.fail(e),
                other => other,
            };
        }
    }
}

impl<S: ChunkSource + Send> InternalIter for Chunked<S> {
    fn skip_front_to(&mut self, key: &[u8], seq: SeqNo) -> Result<()> {
        if self.failed {
            return Ok(());
        }
        if let Some(front) = self.front.as_mut() {
            front.skip_front_to(key, seq)?;
        }
        // Chunks after the front one come after what is left of it: passing over them keeps
        // the order.
        while self.next_front < self.next_back && self.source.skippable(self.next_front, key, seq) {
            self.next_front += 1;
        }
        if self.next_front < self.next_back {
            self.pending_skip = Some(seq);
            // The end of the key space is passed as the static itself (a range delete's own
            // end may be as long: `k ++ 0x00` for a key of `MAX_KEY_SIZE` bytes).
            self.skip_to_end = std::ptr::eq(key, &END_OF_KEYS[..]);
            if !self.skip_to_end {
                self.skip_key.clear();
                self.skip_key.extend_from_slice(key);
            }
        } else if self.front.is_none() {
            if let Some(back) = self.back.as_mut() {
                back.skip_front_to(key, seq)?;
            }
        }
        Ok(())
    }

    fn skip_back_to(&mut self, key: &[u8], seq: SeqNo) -> Result<()> {
        if self.failed {
            return Ok(());
        }
        if let Some(back) = self.back.as_mut() {
            back.skip_back_to(key, seq)?;
        }
        // Chunks before the back one come before what is left of it.
        while self.next_front < self.next_back
            && self.source.skippable_back(self.next_back - 1, key, seq)
        {
            self.next_back -= 1;
        }
        if self.next_front < self.next_back {
            self.pending_back_skip = Some(seq);
            self.back_skip_key.clear();
            self.back_skip_key.extend_from_slice(key);
        } else if self.back.is_none() {
            if let Some(front) = self.front.as_mut() {
                front.skip_back_to(key, seq)?;
            }
        }
        Ok(())
    }
}

impl<S: ChunkSource> DoubleEndedIterator for Chunked<S> {
    fn next_back(&mut self) -> Option<Result<Entry>> {
        if self.failed {
            return None;
        }
        loop {
            if let Some(chunk) = self.back.as_mut() {
                match chunk.next_back() {
                    Some(Err(e)) => return self.fail(e),
                    Some(item) => return Some(item),
                    None => self.back = None,
                }
            }
            if self.next_front < self.next_back {
                match self.source.load(self.next_back - 1) {
                    Ok(mut c) => {
                        if let Some(seq) = self.pending_back_skip.take() {
                            if let Err(e) = c.skip_back_to(&self.back_skip_key, seq) {
                                return self.fail(e);
                            }
                        }
                        self.back = Some(c)
                    }
                    Err(e) => return self.fail(e),
                }
                self.next_back -= 1;
                continue;
            }
            return match self.front.as_mut()?.next_back() {
                Some(Err(e)) => self.fail(e),
                other => other,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iter::tests::entry;
    use proptest::prelude::*;

    struct Vecs {
        chunks: Vec<Vec<Entry>>,
        loads: Vec<usize>,
    }

    impl ChunkSource for Vecs {
        type Chunk = std::vec::IntoIter<Result<Entry>>;
        fn skippable(&self, i: usize, key: &[u8], seq: SeqNo) -> bool {
            self.chunks[i]
                .iter()
                .all(|e| e.user_key[..] < *key && e.seq() < seq)
        }
        fn skippable_back(&self, i: usize, key: &[u8], seq: SeqNo) -> bool {
            self.chunks[i]
                .iter()
                .all(|e| e.user_key[..] >= *key && e.seq() < seq)
        }
        fn load(&mut self, i: usize) -> Result<Self::Chunk> {
            self.loads.push(i);
            Ok(self.chunks[i]
                .iter()
                .cloned()
                .map(Ok)
                .collect::<Vec<_>>()
                .into_iter())
        }
    }

    /// A chunk that records the skips it is given: (the key is the end of the key space,
    /// the key's length, the sequence number).
    struct Recording {
        inner: std::vec::IntoIter<Result<Entry>>,
        skips: std::sync::Arc<std::sync::Mutex<Vec<(bool, usize, SeqNo)>>>,
    }

    impl Iterator for Recording {
        type Item = Result<Entry>;
        fn next(&mut self) -> Option<Result<Entry>> {
            self.inner.next()
        }
    }

    impl DoubleEndedIterator for Recording {
        fn next_back(&mut self) -> Option<Result<Entry>> {
            self.inner.next_back()
        }
    }

    impl InternalIter for Recording {
        fn skip_front_to(&mut self, key: &[u8], seq: SeqNo) -> Result<()> {
            let end = key == &END_OF_KEYS[..];
            self.skips.lock().unwrap().push((end, key.len(), seq));
            Ok(())
        }
    }

    struct Recorded {
        chunks: Vec<Vec<Entry>>,
        skips: std::sync::Arc<std::sync::Mutex<Vec<(bool, usize, SeqNo)>>>,
    }

    impl ChunkSource for Recorded {
        type Chunk = Recording;
        fn load(&mut self, i: usize) -> Result<Recording> {
            Ok(Recording {
                inner: self.chunks[i]
                    .iter()
                    .cloned()
                    .map(Ok)
                    .collect::<Vec<_>>()
                    .into_iter(),
                skips: self.skips.clone(),
            })
        }
    }

    /// A skip left pending for the next chunk reaches it whole: a key, or the end of the
    /// key space (a to-end range delete), which is passed on without being copied (a 64 KiB
    /// copy for every key such a tombstone covers, before).
    #[test]
    fn a_pending_skip_reaches_the_next_chunk_and_the_end_of_keys_is_not_copied() {
        let skips = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let chunks = vec![
            vec![entry("a", 5), entry("aa", 4)],
            vec![entry("b", 1)],
            vec![entry("c", 9)],
        ];
        let mut it = Chunked::new(
            Recorded {
                chunks,
                skips: skips.clone(),
            },
            0,
            3,
        );
        assert_eq!(&it.next().unwrap().unwrap().user_key[..], b"a");
        it.skip_front_to(b"bb", 7).unwrap();
        assert_eq!(&it.next().unwrap().unwrap().user_key[..], b"aa");
        for _ in 0..1000 {
            it.skip_front_to(&END_OF_KEYS, 8).unwrap();
        }
        assert!(
            it.skip_key.capacity() < 64,
            "the end of the key space was copied"
        );
        assert_eq!(&it.next().unwrap().unwrap().user_key[..], b"b");
        let got = skips.lock().unwrap().clone();
        // The front chunk "a" got the first skip at once; the second chunk, loaded next, got
        // the last pending one: to the end of the key space.
        assert_eq!(got.first(), Some(&(false, 2, 7)));
        assert_eq!(got.last(), Some(&(true, END_OF_KEYS.len(), 8)));
        // A range delete's end as long as the end of the key space (`k ++ 0x00` for a key of
        // the largest size) is a key like any other, not the end.
        let mut longest = vec![0xff; crate::batch::MAX_KEY_SIZE];
        longest.push(0);
        it.skip_front_to(&longest, 10).unwrap();
        assert_eq!(&it.next().unwrap().unwrap().user_key[..], b"c");
        let last = *skips.lock().unwrap().last().unwrap();
        assert_eq!(last, (false, longest.len(), 10));
    }

    /// Chunks of entries with these sequence numbers, keyed `001`, `002`, ... in order.
    fn numbered(seqs: &[Vec<u64>]) -> Vec<Vec<Entry>> {
        let mut n = 0;
        seqs.iter()
            .map(|c| {
                c.iter()
                    .map(|&q| {
                        n += 1;
                        entry(&format!("{n:03}"), q)
                    })
                    .collect()
            })
            .collect()
    }

    /// Chunks loaded by taking `taken` entries from the front of chunks of these sizes.
    fn taken_chunks(seqs: &[Vec<u64>], taken: usize) -> usize {
        if taken == 0 {
            return 0;
        }
        let mut seen = 0;
        for (i, c) in seqs.iter().enumerate() {
            seen += c.len();
            if seen >= taken {
                return i + 1;
            }
        }
        seqs.len()
    }

    proptest! {
        #[test]
        fn any_interleaving_yields_each_entry_once_in_order(
            sizes in proptest::collection::vec(0usize..4, 0..6),
            dirs in proptest::collection::vec(any::<bool>(), 0..40),
        ) {
            let mut n = 0;
            let chunks: Vec<Vec<Entry>> = sizes
                .iter()
                .map(|&s| (0..s).map(|_| { n += 1; entry(&format!("{n:03}"), 1) }).collect())
                .collect();
            let total = n;
            let mut it = Chunked::new(Vecs { chunks, loads: vec![] }, 0, sizes.len());
            let (mut front, mut back) = (Vec::new(), Vec::new());
            for d in dirs.iter().chain(std::iter::repeat_n(&true, total + 2)) {
                let got = if *d { it.next() } else { it.next_back() };
                if let Some(e) = got {
                    let e = e.unwrap();
                    if *d { front.push(e) } else { back.push(e) }
                }
            }
            back.reverse();
            front.extend(back);
            prop_assert_eq!(front.len(), total);
            prop_assert!(front.windows(2).all(|w| w[0].cmp_key(&w[1]).is_lt()));
            let mut loads = it.source.loads.clone();
            loads.sort();
            loads.dedup();
            prop_assert_eq!(loads.len(), it.source.loads.len());
        }

        /// A skip drops only entries below the key and older than the sequence number, keeps
        /// the order, and the next chunk it loads is not one it could have passed over.
        #[test]
        fn a_skip_drops_only_older_entries_below_the_key(
            seqs in proptest::collection::vec(proptest::collection::vec(1u64..6, 0..4), 0..8),
            taken in 0usize..6,
            to in 0u32..40,
            seq in 1u64..7,
        ) {
            let chunks = numbered(&seqs);
            let all: Vec<Entry> = chunks.iter().flatten().cloned().collect();
            let len = chunks.len();
            let mut it = Chunked::new(Vecs { chunks, loads: vec![] }, 0, len);
            let mut got: Vec<Entry> = it.by_ref().take(taken).map(|e| e.unwrap()).collect();
            let key = format!("{to:03}");
            it.skip_front_to(key.as_bytes(), seq).unwrap();
            got.extend(it.by_ref().map(|e| e.unwrap()));
            prop_assert!(got.windows(2).all(|w| w[0].cmp_key(&w[1]).is_lt()));
            for e in &all[taken.min(all.len())..] {
                let may_go = e.user_key[..] < *key.as_bytes() && e.seq() < seq;
                prop_assert!(may_go || got.contains(e), "{e:?} dropped");
            }
            // Chunks loaded after the skip: the first of them is not one it could pass over.
            let loaded_before = taken_chunks(&seqs, taken);
            if let Some(&first) = it.source.loads.get(loaded_before) {
                let skippable = seqs[first]
                    .iter()
                    .enumerate()
                    .all(|(j, &q)| {
                        let k = seqs[..first].iter().map(Vec::len).sum::<usize>() + j + 1;
                        format!("{k:03}") < key && q < seq
                    });
                prop_assert!(!skippable || seqs[first].is_empty(), "chunk {first} loaded");
            }
        }

        /// The back's skip, mirrored: it drops only entries at or above the key and older
        /// than the sequence number, keeps the order, and passes over the chunks before the
        /// back that hold only such entries without loading them.
        #[test]
        fn a_back_skip_drops_only_older_entries_at_or_above_the_key(
            seqs in proptest::collection::vec(proptest::collection::vec(1u64..6, 0..4), 0..8),
            taken in 0usize..6,
            from in 0u32..40,
            seq in 1u64..7,
        ) {
            let chunks = numbered(&seqs);
            let all: Vec<Entry> = chunks.iter().flatten().cloned().collect();
            let len = chunks.len();
            let mut it = Chunked::new(Vecs { chunks: chunks.clone(), loads: vec![] }, 0, len);
            let mut got: Vec<Entry> = it.by_ref().rev().take(taken).map(|e| e.unwrap()).collect();
            let key = format!("{from:03}");
            it.skip_back_to(key.as_bytes(), seq).unwrap();
            got.extend(it.by_ref().rev().map(|e| e.unwrap()));
            got.reverse();
            prop_assert!(got.windows(2).all(|w| w[0].cmp_key(&w[1]).is_lt()));
            let kept = all.len().saturating_sub(taken);
            for e in &all[..kept] {
                let may_go = e.user_key[..] >= *key.as_bytes() && e.seq() < seq;
                prop_assert!(may_go || got.contains(e), "{e:?} dropped");
            }
            // The first chunk loaded after the skip is not one it could pass over.
            let back_sizes: Vec<Vec<u64>> = seqs.iter().rev().cloned().collect();
            let loaded_before = taken_chunks(&back_sizes, taken);
            if let Some(&first) = it.source.loads.get(loaded_before) {
                let skippable = chunks[first]
                    .iter()
                    .all(|e| e.user_key[..] >= *key.as_bytes() && e.seq() < seq);
                prop_assert!(!skippable || chunks[first].is_empty(), "chunk {first} loaded");
            }
        }
    }
}
