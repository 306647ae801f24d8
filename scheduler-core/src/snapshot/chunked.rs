//! A vector whose copies share fixed chunks until one is written: a
//! cycle's copy of the kept snapshot costs a pointer per 64 nodes, and
//! placing a pod copies the 64 nodes around it, not the cluster.
//!
//! Hand-written rather than `imbl::Vector` (which the snapshot's pod index
//! uses): the filter reads a node by index for every candidate node, and a
//! persistent tree's index (a walk with size checks) made a shared-GPU
//! decision on 5,000 nodes 16 % slower; here an index is two loads, as a
//! `Vec<Arc<T>>` would be, while a copy stays O(n / 64).

use std::cmp::Ordering;
use std::ops::{Index, IndexMut};
use std::sync::Arc;

const CHUNK: usize = 64;

#[derive(Clone, Debug)]
pub(crate) struct Chunked<T> {
    chunks: Vec<Arc<Vec<T>>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T: Clone> Chunked<T> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn get(&self, index: usize) -> Option<&T> {
        self.chunks.get(index / CHUNK)?.get(index % CHUNK)
    }

    /// Copies the element's chunk first if another copy shares it.
    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        let chunk = self.chunks.get_mut(index / CHUNK)?;
        Arc::make_mut(chunk).get_mut(index % CHUNK)
    }

    pub(crate) fn push(&mut self, value: T) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => Arc::make_mut(last).push(value),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(value);
                self.chunks.push(Arc::new(chunk));
            }
        }
        self.len += 1;
    }

    /// As a sorted slice's `binary_search_by`.
    pub(crate) fn binary_search_by(
        &self,
        mut f: impl FnMut(&T) -> Ordering,
    ) -> Result<usize, usize> {
        let (mut low, mut high) = (0, self.len);
        while low < high {
            let mid = low + (high - low) / 2;
            match f(&self[mid]) {
                Ordering::Less => low = mid + 1,
                Ordering::Greater => high = mid,
                Ordering::Equal => return Ok(mid),
            }
        }
        Err(low)
    }

    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + '_ {
        self.chunks.iter().flat_map(|c| c.iter())
    }
}

impl<T: Clone> Index<usize> for Chunked<T> {
    type Output = T;

    fn index(&self, index: usize) -> &T {
        match self.get(index) {
            Some(v) => v,
            // As a slice's index does: a caller's broken invariant.
            None => panic!("index {index} out of {}", self.len),
        }
    }
}

impl<T: Clone> IndexMut<usize> for Chunked<T> {
    fn index_mut(&mut self, index: usize) -> &mut T {
        let len = self.len;
        match self.get_mut(index) {
            Some(v) => v,
            None => panic!("index {index} out of {len}"),
        }
    }
}

impl<T: Clone> FromIterator<T> for Chunked<T> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        let mut c = Chunked::default();
        for item in items {
            c.push(item);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Push(u32),
        Set(usize, u32),
        /// Copy, then write the copy: the original must not change.
        CopyAndSet(usize, u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            any::<u32>().prop_map(Op::Push),
            (0..400usize, any::<u32>()).prop_map(|(i, v)| Op::Set(i, v)),
            (0..400usize, any::<u32>()).prop_map(|(i, v)| Op::CopyAndSet(i, v)),
        ]
    }

    proptest! {
        #[test]
        fn behaves_as_a_vec_and_copies_are_independent(ops in prop::collection::vec(op(), 0..600)) {
            let mut chunked = Chunked::default();
            let mut vec: Vec<u32> = Vec::new();
            for op in ops {
                match op {
                    Op::Push(v) => {
                        chunked.push(v);
                        vec.push(v);
                    }
                    Op::Set(i, v) => {
                        if let Some(slot) = chunked.get_mut(i) {
                            *slot = v;
                        }
                        if let Some(slot) = vec.get_mut(i) {
                            *slot = v;
                        }
                    }
                    Op::CopyAndSet(i, v) => {
                        let mut copy = chunked.clone();
                        if let Some(slot) = copy.get_mut(i) {
                            *slot = v;
                        }
                        let mut expected = vec.clone();
                        if let Some(slot) = expected.get_mut(i) {
                            *slot = v;
                        }
                        prop_assert_eq!(copy.iter().copied().collect::<Vec<_>>(), expected);
                    }
                }
                prop_assert_eq!(chunked.len(), vec.len());
                prop_assert_eq!(chunked.iter().copied().collect::<Vec<_>>(), vec.clone());
                for (i, v) in vec.iter().enumerate() {
                    prop_assert_eq!(chunked[i], *v);
                }
                prop_assert_eq!(chunked.get(vec.len()), None);
            }
        }
    }

    #[test]
    fn binary_search_finds_each_value_and_where_a_missing_one_goes() {
        let c: Chunked<u32> = (0..300).map(|i| i * 2).collect();
        for i in 0..300u32 {
            assert_eq!(c.binary_search_by(|v| v.cmp(&(i * 2))), Ok(i as usize));
            assert_eq!(
                c.binary_search_by(|v| v.cmp(&(i * 2 + 1))),
                Err(i as usize + 1)
            );
        }
        assert_eq!(
            Chunked::<u32>::default().binary_search_by(|v| v.cmp(&1)),
            Err(0)
        );
    }

    #[test]
    fn a_copy_shares_every_chunk_until_one_is_written() {
        let original: Chunked<u32> = (0..1000).collect();
        let mut copy = original.clone();
        copy[130] = 7;
        let shared = original
            .chunks
            .iter()
            .zip(&copy.chunks)
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert_eq!(shared, original.chunks.len() - 1, "only chunk 2 copied");
        assert_eq!(original[130], 130);
        assert_eq!(copy[130], 7);
    }
}
