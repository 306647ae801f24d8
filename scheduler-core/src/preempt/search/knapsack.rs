//! A scope's cheapest answer: a min-cost knapsack over the nodes' menus, then
//! the members placed on the freed GPUs and each unit charged once.

use super::menu::Menu;
use super::{Search, Solution};
use crate::preempt::cost::Cost;
use std::collections::BTreeSet;

impl Search<'_> {
    /// The cheapest way to host every member on `nodes` (one menu entry per
    /// node), and how many members the scope could host at most.
    pub(super) fn knapsack(&self, nodes: &[u32], menus: &[Menu]) -> (Option<Vec<(u32, u32)>>, u32) {
        let n = self.members as usize;
        let mut dp: Vec<Option<Cost>> = vec![None; n + 1];
        dp[0] = Some(Cost::default());
        // Per node that offers anything: (position, per target count: (j, previous count)).
        let mut choices: Vec<(u32, Vec<(u32, u32)>)> = Vec::new();
        for &position in nodes {
            let menu = &menus[position as usize];
            if menu.len() <= 1 {
                continue;
            }
            let mut next = dp.clone();
            let mut choice: Vec<(u32, u32)> = (0..=n as u32).map(|m| (0, m)).collect();
            for (m, base) in dp.iter().enumerate() {
                let Some(base) = *base else { continue };
                for (j, entry) in menu.iter().enumerate().skip(1) {
                    let Some((cost, _)) = entry else { continue };
                    let t = (m + j).min(n);
                    let candidate = base + *cost;
                    if next[t].is_none_or(|c| candidate.key() < c.key()) {
                        next[t] = Some(candidate);
                        choice[t] = (j as u32, m as u32);
                    }
                }
            }
            dp = next;
            choices.push((position, choice));
        }
        let reach = dp.iter().rposition(Option::is_some).unwrap_or(0) as u32;
        if dp[n].is_none() {
            return (None, reach);
        }
        let mut picks = Vec::new();
        let mut m = n as u32;
        for (position, choice) in choices.iter().rev() {
            let (j, previous) = choice[m as usize];
            if j > 0 {
                picks.push((*position, j));
            }
            m = previous;
        }
        picks.reverse();
        (Some(picks), reach)
    }

    /// Places the members as the menus say, charges each unit once, and drops
    /// units whose GPUs no member uses.
    pub(super) fn realise(&self, picks: &[(u32, u32)], menus: &[Menu]) -> Option<Solution> {
        let picker_of = |p: u32| &self.pickers[self.shape_of[p as usize] as usize];
        let mut members: Vec<(u32, u32, u8)> = Vec::new();
        let mut chosen: BTreeSet<u32> = BTreeSet::new();
        let mut left = self.members;
        for &(position, j) in picks {
            let (_, units) = menus[position as usize].get(j as usize)?.as_ref()?;
            chosen.extend(units.iter().copied());
            let mut free = self.free(position) | self.mask_of(units, position);
            for _ in 0..j.min(left) {
                let pick = picker_of(position).pick(free).ok()?;
                free &= !pick.gpus;
                members.push((position, pick.gpus, pick.score));
                left -= 1;
            }
        }
        if left > 0 {
            return None;
        }
        let used = |position: u32| -> u32 {
            members
                .iter()
                .filter(|(p, _, _)| *p == position)
                .fold(0, |m, (_, g, _)| m | g)
        };
        // A unit stays when a member uses its GPUs, or when it is the rule
        // victim of a node a member goes to.
        let required = |u: u32| {
            members
                .iter()
                .any(|(p, _, _)| self.required_units[*p as usize].contains(&u))
        };
        let units: Vec<u32> = chosen
            .into_iter()
            .filter(|&u| {
                required(u)
                    || self.units[u as usize]
                        .masks
                        .iter()
                        .any(|&(p, m)| m & used(p) != 0)
            })
            .collect();
        let cost = units
            .iter()
            .fold(Cost::default(), |c, &u| c + self.units[u as usize].cost);
        let mut leaves: Vec<u32> = members
            .iter()
            .map(|(p, _, _)| self.tree.node_leaf[*p as usize])
            .collect();
        leaves.sort_unstable();
        leaves.dedup();
        let spans = self.tree.span_counts(&leaves);
        Some(Solution {
            members,
            units,
            cost,
            leaves,
            spans,
        })
    }
}
