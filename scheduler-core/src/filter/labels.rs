//! `nodeSelector` and required node affinity, compiled against the
//! snapshot's interned labels.

use super::PodContext;
use crate::selector::{SelectorOperator, SelectorTerm};
use crate::snapshot::Node;
use crate::snapshot::intern::{Interner, Sym};

/// A required-affinity requirement against interned labels.
enum Requirement {
    In(Option<Sym>, Vec<Sym>),
    NotIn(Option<Sym>, Vec<Sym>),
    Exists(Option<Sym>),
    DoesNotExist(Option<Sym>),
    Gt(Option<Sym>, i64),
    Lt(Option<Sym>, i64),
}

pub(super) struct Term<'a> {
    labels: Vec<Requirement>,
    names: Vec<(bool, &'a [String])>,
    empty: bool,
}

impl<'a> Term<'a> {
    pub(super) fn compile(t: &'a SelectorTerm, strings: &Interner) -> Term<'a> {
        Term {
            labels: t
                .labels
                .iter()
                .map(|r| {
                    let key = strings.get(&r.key);
                    let syms = |values: &[String]| -> Vec<Sym> {
                        values.iter().filter_map(|v| strings.get(v)).collect()
                    };
                    match &r.operator {
                        SelectorOperator::In(v) => Requirement::In(key, syms(v)),
                        SelectorOperator::NotIn(v) => Requirement::NotIn(key, syms(v)),
                        SelectorOperator::Exists => Requirement::Exists(key),
                        SelectorOperator::DoesNotExist => Requirement::DoesNotExist(key),
                        SelectorOperator::Gt(n) => Requirement::Gt(key, *n),
                        SelectorOperator::Lt(n) => Requirement::Lt(key, *n),
                    }
                })
                .collect(),
            names: t
                .fields
                .iter()
                .map(|f| (f.within, f.names.as_slice()))
                .collect(),
            empty: t.labels.is_empty() && t.fields.is_empty(),
        }
    }
}

impl PodContext<'_> {
    fn label(&self, node: &Node, key: Option<Sym>) -> Option<Sym> {
        let key = key?;
        node.labels
            .binary_search_by_key(&key, |(k, _)| *k)
            .ok()
            .map(|i| node.labels[i].1)
    }

    pub(super) fn matches_labels(&self, node: &Node) -> bool {
        match &self.selector {
            None => return false,
            Some(pairs) => {
                if !pairs
                    .iter()
                    .all(|&(k, v)| self.label(node, Some(k)) == Some(v))
                {
                    return false;
                }
            }
        }
        let Some(terms) = &self.affinity else {
            return true;
        };
        terms.iter().any(|term| {
            !term.empty
                && term
                    .names
                    .iter()
                    .all(|&(within, names)| names.iter().any(|n| **n == *node.name) == within)
                && term.labels.iter().all(|r| self.requirement(node, r))
        })
    }

    fn requirement(&self, node: &Node, r: &Requirement) -> bool {
        let integer = |key: &Option<Sym>| -> Option<i64> {
            let v = self.label(node, *key)?;
            self.snapshot.strings.resolve(v).parse::<i64>().ok()
        };
        match r {
            Requirement::In(k, values) => self.label(node, *k).is_some_and(|v| values.contains(&v)),
            Requirement::NotIn(k, values) => {
                self.label(node, *k).is_none_or(|v| !values.contains(&v))
            }
            Requirement::Exists(k) => self.label(node, *k).is_some(),
            Requirement::DoesNotExist(k) => self.label(node, *k).is_none(),
            Requirement::Gt(k, n) => integer(k).is_some_and(|x| x > *n),
            Requirement::Lt(k, n) => integer(k).is_some_and(|x| x < *n),
        }
    }
}
