//! Structured inputs: a seed document (JSON, or YAML read as JSON) with
//! nodes of its tree replaced, removed, repeated or added. Text damage
//! mostly stops a serde parser at the first byte; these edits keep the
//! document well-formed, so they reach the checks behind the parser: an
//! index beyond `u32`, a count of 2^32, a negative quantity, a field of the
//! wrong type, a list of thousands of items.
//!
//! The keys and strings added are the seed documents' own (so a key lands
//! where the type reads it) and [`crate::mutate::EXTREMES`] as strings.

use crate::mutate::{EXTREMES, MAX_INPUT};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Map, Value};
use std::collections::BTreeSet;
use std::sync::Arc;

/// A value put into a document.
#[derive(Clone, Debug)]
pub enum Leaf {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    /// One of the seeds' strings or an extreme number as a string.
    Str(Arc<str>),
    EmptyArray,
    EmptyObject,
    /// A value nested this deep in arrays (serde's recursion limit is 128).
    Deep(u8),
}

/// One change to a document.
#[derive(Clone, Debug)]
pub enum ValueEdit {
    /// Replace the k-th node (preorder) with a leaf.
    Replace(Index, Leaf),
    /// Remove the k-th node from its parent.
    Remove(Index),
    /// Repeat the k-th array element `n` more times (bounded in size).
    Repeat(Index, u16),
    /// Set a key (one of the seeds') on the k-th object.
    Set(Index, Arc<str>, Leaf),
}

/// Documents parsed from `seeds`, and the words found in them.
pub struct Documents {
    pub values: Arc<[Value]>,
    keys: Arc<[Arc<str>]>,
    strings: Arc<[Arc<str>]>,
}

impl Documents {
    /// Reads every seed as YAML (JSON is YAML); seeds that do not read as a
    /// JSON tree (a YAML map with non-string keys) are left out.
    pub fn new(seeds: &[String]) -> Documents {
        let values: Vec<Value> = seeds
            .iter()
            .filter_map(|s| serde_yaml::from_str::<Value>(s).ok())
            .collect();
        assert!(!values.is_empty(), "no seed reads as a document");
        let mut keys = BTreeSet::new();
        let mut strings = BTreeSet::new();
        for v in &values {
            collect(v, &mut keys, &mut strings);
        }
        keys.insert("".to_string());
        strings.extend(EXTREMES.iter().map(|s| s.to_string()));
        strings.insert(String::new());
        Documents {
            values: values.into(),
            keys: keys.into_iter().map(Arc::from).collect(),
            strings: strings.into_iter().take(4096).map(Arc::from).collect(),
        }
    }

    /// Documents with up to six edits each, as values.
    pub fn edited(&self) -> BoxedStrategy<Value> {
        let values = self.values.clone();
        let edit = || value_edit(self.keys.clone(), self.strings.clone());
        // Few edits more often than many, as for texts.
        let edits = prop_oneof![
            1 => prop::collection::vec(edit(), 0..1),
            4 => prop::collection::vec(edit(), 1..3),
            2 => prop::collection::vec(edit(), 3..6),
        ];
        (any::<Index>(), edits)
            .prop_map(move |(i, edits)| {
                let mut v = values[i.index(values.len())].clone();
                for e in &edits {
                    apply(&mut v, e);
                }
                v
            })
            .boxed()
    }

    /// [`Documents::edited`] written out as JSON text.
    pub fn json(&self) -> BoxedStrategy<String> {
        self.edited()
            .prop_map(|v| serde_json::to_string(&v).unwrap_or_default())
            .boxed()
    }

    /// [`Documents::edited`] written out as YAML text.
    pub fn yaml(&self) -> BoxedStrategy<String> {
        self.edited()
            .prop_map(|v| serde_yaml::to_string(&v).unwrap_or_default())
            .boxed()
    }
}

fn collect(v: &Value, keys: &mut BTreeSet<String>, strings: &mut BTreeSet<String>) {
    match v {
        Value::String(s) if s.len() <= 256 => {
            strings.insert(s.clone());
        }
        Value::Array(items) => items.iter().for_each(|i| collect(i, keys, strings)),
        Value::Object(map) => {
            for (k, i) in map {
                keys.insert(k.clone());
                collect(i, keys, strings);
            }
        }
        _ => {}
    }
}

fn leaf(strings: Arc<[Arc<str>]>) -> impl Strategy<Value = Leaf> {
    let int = prop_oneof![
        Just(i64::MIN),
        Just(-1i64),
        Just(0i64),
        Just(1i64),
        Just(i64::from(i32::MAX) + 1),
        Just(i64::from(u32::MAX)),
        Just(i64::from(u32::MAX) + 1),
        Just(i64::MAX),
        -5i64..100,
    ];
    let float = prop_oneof![
        Just(f64::MAX),
        Just(-f64::MAX),
        Just(f64::MIN_POSITIVE),
        Just(-0.0),
        Just(0.5),
        Just(1e18),
        Just(4294967296.5),
    ];
    prop_oneof![
        1 => Just(Leaf::Null),
        1 => any::<bool>().prop_map(Leaf::Bool),
        2 => int.prop_map(Leaf::Int),
        1 => Just(Leaf::UInt(u64::MAX)),
        1 => float.prop_map(Leaf::Float),
        4 => prop::sample::select(strings.to_vec()).prop_map(Leaf::Str),
        1 => Just(Leaf::EmptyArray),
        1 => Just(Leaf::EmptyObject),
        1 => (1u8..200).prop_map(Leaf::Deep),
    ]
}

fn value_edit(keys: Arc<[Arc<str>]>, strings: Arc<[Arc<str>]>) -> impl Strategy<Value = ValueEdit> {
    prop_oneof![
        5 => (any::<Index>(), leaf(strings.clone())).prop_map(|(i, l)| ValueEdit::Replace(i, l)),
        2 => any::<Index>().prop_map(ValueEdit::Remove),
        1 => (any::<Index>(), 1u16..3000).prop_map(|(i, n)| ValueEdit::Repeat(i, n)),
        2 => (any::<Index>(), prop::sample::select(keys.to_vec()), leaf(strings))
            .prop_map(|(i, k, l)| ValueEdit::Set(i, k, l)),
    ]
}

fn to_value(leaf: &Leaf) -> Value {
    match leaf {
        Leaf::Null => Value::Null,
        Leaf::Bool(b) => Value::Bool(*b),
        Leaf::Int(i) => Value::from(*i),
        Leaf::UInt(u) => Value::from(*u),
        Leaf::Float(f) => Value::from(*f),
        Leaf::Str(s) => Value::String(s.to_string()),
        Leaf::EmptyArray => Value::Array(Vec::new()),
        Leaf::EmptyObject => Value::Object(Map::new()),
        Leaf::Deep(n) => (0..*n).fold(Value::from(1), |v, _| Value::Array(vec![v])),
    }
}

fn count(v: &Value) -> usize {
    1 + match v {
        Value::Array(items) => items.iter().map(count).sum(),
        Value::Object(map) => map.values().map(count).sum(),
        _ => 0,
    }
}

/// The k-th node in preorder (0 is the root), mutably; its path's last
/// step back to the parent is not needed by the edits that use this.
fn nth(v: &mut Value, k: usize) -> Option<&mut Value> {
    if k == 0 {
        return Some(v);
    }
    let mut k = k - 1;
    let children: Vec<&mut Value> = match v {
        Value::Array(items) => items.iter_mut().collect(),
        Value::Object(map) => map.values_mut().collect(),
        _ => return None,
    };
    for child in children {
        let n = count(child);
        if k < n {
            return nth(child, k);
        }
        k -= n;
    }
    None
}

/// Removes the k-th node (k >= 1) from its parent.
fn remove_nth(v: &mut Value, k: usize) -> bool {
    let mut k = k - 1;
    match v {
        Value::Array(items) => {
            for i in 0..items.len() {
                let n = count(&items[i]);
                if k == 0 {
                    items.remove(i);
                    return true;
                }
                if k < n {
                    return remove_nth(&mut items[i], k);
                }
                k -= n;
            }
            false
        }
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let n = count(&map[&key]);
                if k == 0 {
                    map.remove(&key);
                    return true;
                }
                if k < n {
                    return remove_nth(map.get_mut(&key).expect("present"), k);
                }
                k -= n;
            }
            false
        }
        _ => false,
    }
}

fn apply(doc: &mut Value, edit: &ValueEdit) {
    let size = count(doc);
    match edit {
        ValueEdit::Replace(i, l) => {
            if let Some(node) = nth(doc, i.index(size)) {
                *node = to_value(l);
            }
        }
        ValueEdit::Remove(i) => {
            let k = i.index(size);
            if k > 0 {
                remove_nth(doc, k);
            }
        }
        ValueEdit::Repeat(i, n) => {
            // The nearest array at or above a node is not tracked: repeat the
            // node's own first element when it is an array.
            if let Some(Value::Array(items)) = nth(doc, i.index(size))
                && let Some(first) = items.first().cloned()
            {
                let each = serde_json::to_string(&first).map_or(MAX_INPUT, |s| s.len());
                let n = usize::from(*n).min(MAX_INPUT / each.max(1));
                items.extend(std::iter::repeat_n(first, n));
            }
        }
        ValueEdit::Set(i, key, l) => {
            if let Some(Value::Object(map)) = nth(doc, i.index(size)) {
                map.insert(key.to_string(), to_value(l));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nodes_are_numbered_in_preorder() {
        let mut v = json!({"a": [1, {"b": 2}], "c": 3});
        assert_eq!(count(&v), 6);
        assert_eq!(nth(&mut v, 3).cloned(), Some(json!({"b": 2})));
        assert!(remove_nth(&mut v, 4));
        assert_eq!(v, json!({"a": [1, {}], "c": 3}));
    }
}
