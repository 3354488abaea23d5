//! [`MergeIter`]: a k-way merge of internal iterators, from both ends.
//!
//! Internal keys are unique across sources (every write has its own sequence number and a
//! version lives in exactly one place), so the merge never needs to break ties. Each source
//! keeps one peeked entry per end; when one end of a source is exhausted, it takes the other
//! end's peeked entry, so both ends together see every entry exactly once.

use super::{BoxedIter, Entry};
use crate::error::{Error, Result};
use crate::key::SeqNo;

struct Source {
    iter: BoxedIter,
    front: Option<Entry>,
    back: Option<Entry>,
    front_done: bool,
    back_done: bool,
}

impl Source {
    fn fill_front(&mut self) -> Result<()> {
        if self.front.is_none() && !self.front_done {
            match self.iter.next() {
                Some(Ok(e)) => self.front = Some(e),
                Some(Err(e)) => return Err(e),
                None => self.front_done = true,
            }
        }
        if self.front.is_none() && self.front_done {
            self.front = self.back.take();
        }
        Ok(())
    }

    fn fill_back(&mut self) -> Result<()> {
        if self.back.is_none() && !self.back_done {
            match self.iter.next_back() {
                Some(Ok(e)) => self.back = Some(e),
                Some(Err(e)) => return Err(e),
                None => self.back_done = true,
            }
        }
        if self.back.is_none() && self.back_done {
            self.back = self.front.take();
        }
        Ok(())
    }
}

/// Merges sorted sources into one sorted stream, walkable from both ends.
pub(crate) struct MergeIter {
    sources: Vec<Source>,
    error: Option<Error>,
    failed: bool,
}

impl MergeIter {
    pub(crate) fn new(iters: Vec<BoxedIter>) -> Self {
        MergeIter {
            sources: iters
                .into_iter()
                .map(|iter| Source {
                    iter,
                    front: None,
                    back: None,
                    front_done: false,
                    back_done: false,
                })
                .collect(),
            error: None,
            failed: false,
        }
    }

    /// A range tombstone at `seq` deletes every older version of the keys from the front up
    /// to `key`: each source drops its peeked front entry if it is one of those, and skips
    /// ahead over what it knows is (see [`InternalIter::skip_front_to`]), whether or not the
    /// back end was used: what is dropped is the front's, and deleted for this scan.
    ///
    /// [`InternalIter::skip_front_to`]: super::InternalIter::skip_front_to
    pub(crate) fn skip_front_to(&mut self, key: &[u8], seq: SeqNo) -> Result<()> {
        self.check()?;
        for i in 0..self.sources.len() {
            let s = &mut self.sources[i];
            match &s.front {
                Some(e) if e.user_key[..] >= *key => continue,
                Some(e) if e.seq() < seq => s.front = None,
                _ => {}
            }
            if s.front_done {
                continue;
            }
            if let Err(e) = s.iter.skip_front_to(key, seq) {
                return Err(self.set_failed(e));
            }
        }
        Ok(())
    }

    /// The mirror of [`skip_front_to`](Self::skip_front_to): a range tombstone at `seq`
    /// deletes every older version of the keys from `key` up to the back: each source drops
    /// its peeked back entry if it is one of those, and skips back over what it knows is
    /// (see [`InternalIter::skip_back_to`]).
    ///
    /// [`InternalIter::skip_back_to`]: super::InternalIter::skip_back_to
    pub(crate) fn skip_back_to(&mut self, key: &[u8], seq: SeqNo) -> Result<()> {
        self.check()?;
        for i in 0..self.sources.len() {
            let s = &mut self.sources[i];
            match &s.back {
                Some(e) if e.user_key[..] < *key => continue,
                Some(e) if e.seq() < seq => s.back = None,
                _ => {}
            }
            if s.back_done {
                continue;
            }
            if let Err(e) = s.iter.skip_back_to(key, seq) {
                return Err(self.set_failed(e));
            }
        }
        Ok(())
    }

    fn min_source(&mut self) -> Result<Option<usize>> {
        let mut best: Option<usize> = None;
        for i in 0..self.sources.len() {
            self.sources[i].fill_front()?;
            if let Some(e) = &self.sources[i].front {
                let better = match best {
                    None => true,
                    Some(b) => self.sources[b]
                        .front
                        .as_ref()
                        .is_some_and(|cur| e.cmp_key(cur).is_lt()),
                };
                if better {
                    best = Some(i);
                }
            }
        }
        Ok(best)
    }

    fn max_source(&mut self) -> Result<Option<usize>> {
        let mut best: Option<usize> = None;
        for i in 0..self.sources.len() {
            self.sources[i].fill_back()?;
            if let Some(e) = &self.sources[i].back {
                let better = match best {
                    None => true,
                    Some(b) => self.sources[b]
                        .back
                        .as_ref()
                        .is_some_and(|cur| e.cmp_key(cur).is_gt()),
                };
                if better {
                    best = Some(i);
                }
            }
        }
        Ok(best)
    }

    /// The largest remaining entry, without consuming it.
    pub(crate) fn peek_back(&mut self) -> Result<Option<&Entry>> {
        self.check()?;
        match self.max_source() {
            Ok(Some(i)) => Ok(self.sources[i].back.as_ref()),
            Ok(None) => Ok(None),
            Err(e) => Err(self.set_failed(e)),
        }
    }

    fn check(&mut self) -> Result<()> {
        if self.failed {
            return Err(self
                .error
                .take()
                .unwrap_or_else(|| Error::InvalidArgument("iterator already failed".into())));
        }
        Ok(())
    }

    fn set_failed(&mut self, e: Error) -> Error {
        self.failed = true;
        e
    }

    /// Removes and returns the smallest remaining entry.
    pub(crate) fn pop_front(&mut self) -> Result<Option<Entry>> {
        self.check()?;
        match self.min_source() {
            Ok(Some(i)) => Ok(self.sources[i].front.take()),
            Ok(None) => Ok(None),
            Err(e) => Err(self.set_failed(e)),
        }
    }

    /// Removes and returns the largest remaining entry.
    pub(crate) fn pop_back(&mut self) -> Result<Option<Entry>> {
        self.check()?;
        match self.max_source() {
            Ok(Some(i)) => Ok(self.sources[i].back.take()),
            Ok(None) => Ok(None),
            Err(e) => Err(self.set_failed(e)),
        }
    }
}

impl Iterator for MergeIter {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        if self.failed {
            return None;
        }
        self.pop_front().transpose()
    }
}

impl DoubleEndedIterator for MergeIter {
    fn next_back(&mut self) -> Option<Result<Entry>> {
        if self.failed {
            return None;
        }
        self.pop_back().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iter::tests::entry;
    use proptest::prelude::*;

    fn boxed(v: Vec<Entry>) -> BoxedIter {
        Box::new(v.into_iter().map(Ok).collect::<Vec<_>>().into_iter())
    }

    proptest! {
        #[test]
        fn merges_from_both_ends(
            keys in proptest::collection::btree_set(0u32..500, 0..60),
            assign in proptest::collection::vec(0usize..4, 60),
            dirs in proptest::collection::vec(any::<bool>(), 0..80),
        ) {
            let keys: Vec<u32> = keys.into_iter().collect();
            let mut parts = vec![Vec::new(); 4];
            for (i, k) in keys.iter().enumerate() {
                parts[assign[i]].push(entry(&format!("{k:04}"), 1));
            }
            let mut m = MergeIter::new(parts.into_iter().map(boxed).collect());
            let (mut front, mut back) = (Vec::new(), Vec::new());
            for d in dirs.iter().chain(std::iter::repeat_n(&false, keys.len() + 1)) {
                let got = if *d { m.next() } else { m.next_back() };
                if let Some(e) = got {
                    if *d { front.push(e.unwrap()) } else { back.push(e.unwrap()) }
                }
            }
            back.reverse();
            front.extend(back);
            let got: Vec<String> = front.iter().map(|e| String::from_utf8(e.user_key.to_vec()).unwrap()).collect();
            let want: Vec<String> = keys.iter().map(|k| format!("{k:04}")).collect();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn errors_end_the_stream() {
        let bad: BoxedIter =
            Box::new(vec![Ok(entry("a", 1)), Err(Error::InvalidArgument("x".into()))].into_iter());
        let mut m = MergeIter::new(vec![bad, boxed(vec![entry("b", 1)])]);
        assert!(m.next().unwrap().is_ok());
        assert!(m.next().unwrap().is_err());
        assert!(m.next().is_none());
    }
}
