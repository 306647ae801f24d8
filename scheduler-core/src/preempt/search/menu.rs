//! A node's menu: for each count of preemptor members, the cheapest units
//! whose eviction frees a usable GPU set for that many (exact over subsets
//! while the node has few units, greedy beyond).

use super::{Class, Search};
use crate::preempt::cost::Cost;

/// For each member count `j`, the cheapest units whose eviction lets the node host `j`.
pub(super) type Menu = Vec<Option<(Cost, Vec<u32>)>>;

impl Search<'_> {
    /// The node's menu when units up to `class` may be evicted. A node with
    /// required units (its rule victims) evicts them for any member; where
    /// one may not go in this pass, the node hosts none.
    pub(super) fn menu(&self, position: u32, class: Class) -> Menu {
        let mut menu: Menu = vec![Some((Cost::default(), Vec::new()))];
        let required = &self.required_units[position as usize];
        if self.blocked[position as usize]
            || required
                .iter()
                .any(|&u| self.units[u as usize].class > class)
        {
            return menu;
        }
        let allowed: Vec<u32> = self.node_units[position as usize]
            .iter()
            .copied()
            .filter(|&u| self.units[u as usize].class <= class)
            .collect();
        // The required units' GPUs are as good as free here, their cost paid.
        let free = self.free(position) | self.mask_of(required, position);
        let base = required
            .iter()
            .fold(Cost::default(), |c, &u| c + self.units[u as usize].cost);
        let with_required = |units: Vec<u32>| -> Vec<u32> {
            let mut all = required.clone();
            all.extend(units);
            all
        };
        let limit = self.members;
        let offer = |menu: &mut Menu, j: u32, cost: Cost, units: &dyn Fn() -> Vec<u32>| {
            let j = j as usize;
            if menu.len() <= j {
                menu.resize(j + 1, None);
            }
            if menu[j]
                .as_ref()
                .is_none_or(|(best, _)| cost.key() < best.key())
            {
                menu[j] = Some((cost, units()));
            }
        };
        if allowed.len() <= self.policy.exact_units_per_node.min(20) {
            let count = 1usize << allowed.len();
            let mut freed = vec![0u32; count];
            let mut cost = vec![base; count];
            for s in 0..count {
                if s > 0 {
                    let low = s.trailing_zeros() as usize;
                    let prev = s & (s - 1);
                    let unit = &self.units[allowed[low] as usize];
                    freed[s] = freed[prev] | unit.mask_on(position);
                    cost[s] = cost[prev] + unit.cost;
                }
                let cap = self.capacity(position, free | freed[s], limit);
                for j in 1..=cap {
                    offer(&mut menu, j, cost[s], &|| {
                        with_required(
                            (0..allowed.len())
                                .filter(|&i| s & (1 << i) != 0)
                                .map(|i| allowed[i])
                                .collect(),
                        )
                    });
                }
            }
        } else {
            let mut order = allowed.clone();
            order.sort_by(|&a, &b| {
                let (ua, ub) = (&self.units[a as usize], &self.units[b as usize]);
                let fa = u128::from(ua.mask_on(position).count_ones().max(1));
                let fb = u128::from(ub.mask_on(position).count_ones().max(1));
                ua.class
                    .cmp(&ub.class)
                    .then(
                        (u128::from(ua.cost.gpu_seconds) * fb)
                            .cmp(&(u128::from(ub.cost.gpu_seconds) * fa)),
                    )
                    .then(a.cmp(&b))
            });
            let mut reached = self.capacity(position, free, limit);
            for j in 1..=reached {
                offer(&mut menu, j, base, &|| with_required(Vec::new()));
            }
            let mut chosen: Vec<u32> = Vec::new();
            for u in order {
                if reached >= limit {
                    break;
                }
                chosen.push(u);
                let mask = self.mask_of(&chosen, position);
                let cap = self.capacity(position, free | mask, limit);
                while reached < cap {
                    reached += 1;
                    let mut keep = chosen.clone();
                    for i in (0..keep.len()).rev() {
                        let mut without = keep.clone();
                        without.remove(i);
                        let m = self.mask_of(&without, position);
                        if self.capacity(position, free | m, reached) >= reached {
                            keep = without;
                        }
                    }
                    let cost = keep
                        .iter()
                        .fold(base, |c, &u| c + self.units[u as usize].cost);
                    offer(&mut menu, reached, cost, &|| with_required(keep.clone()));
                }
            }
        }
        menu
    }
}
