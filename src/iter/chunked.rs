//! [`Chunked`]: a double-ended walk over lazily loaded chunks.

use super::{Entry, InternalIter};
use crate::error::Result;

/// A sequence of chunks, each loaded on demand.
pub(crate) trait ChunkSource {
    /// One loaded chunk, itself walkable from both ends.
    type Chunk: InternalIter;
    /// Loads chunk `i`.
    fn load(&mut self, i: usize) -> Result<Self::Chunk>;
    /// A user key at or above every user key of chunk `i`, if known without loading it (lets
    /// [`InternalIter::skip_front_to`] pass over the chunk unread).
    fn last_user_key(&self, i: usize) -> Option<&[u8]> {
        let _ = i;
        None
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
    /// A skip to apply to the next chunk the front loads.
    pending_skip: Option<Vec<u8>>,
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
                        if let Some(k) = self.pending_skip.take() {
                            if let Err(e) = c.skip_front_to(&k) {
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
    fn skip_front_to(&mut self, key: &[u8]) -> Result<()> {
        if self.failed {
            return Ok(());
        }
        if let Some(front) = self.front.as_mut() {
            front.skip_front_to(key)?;
        }
        // Chunks are sorted: one whose last key is below `key` holds nothing at or above it,
        // and once one reaches `key`, every later one does.
        let mut skipped = false;
        while self.next_front < self.next_back
            && self
                .source
                .last_user_key(self.next_front)
                .is_some_and(|last| last < key)
        {
            self.next_front += 1;
            skipped = true;
        }
        if skipped {
            // The loaded front chunk ends below the chunks it skipped to.
            self.front = None;
        }
        if self.next_front < self.next_back {
            self.pending_skip = Some(key.to_vec());
        } else if self.front.is_none() {
            if let Some(back) = self.back.as_mut() {
                back.skip_front_to(key)?;
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
                    Ok(c) => self.back = Some(c),
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
    }
}
