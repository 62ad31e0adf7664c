//! Finding the repeating step in a sequence of collectives (pure).
//!
//! A server repeats the same forward: a verify of Kimi-K2.5 is 123 all-reduces and one
//! all-gather, every time. Each collective becomes a signature (op, dtype, elements), and the
//! step is the shortest period of that sequence. A profile often starts with something else
//! (a prefill, a warm-up, a partial step), so when the whole sequence has no period the search
//! keeps to its second half and then extends the periodic region backwards. A step ends at the
//! rarest signature of the period (the logits all-gather of a verify): that places the boundary
//! where the forward ends, not at an arbitrary phase.

use std::collections::HashMap;
use std::hash::Hash;

/// Each item's signature (the number of its key, in order of first appearance) and each
/// signature's weight (its first item's), for [`find_period`] and [`split_at_rarest`].
pub(crate) fn signatures<K: Hash + Eq>(
    items: impl IntoIterator<Item = (K, u64)>,
) -> (Vec<u32>, Vec<u64>) {
    let mut ids: HashMap<K, u32> = HashMap::new();
    let mut weights = Vec::new();
    let sigs = items
        .into_iter()
        .map(|(key, w)| {
            let n = ids.len() as u32;
            *ids.entry(key).or_insert_with(|| {
                weights.push(w);
                n
            })
        })
        .collect();
    (sigs, weights)
}

/// The repeating part of a signature sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Period {
    /// Collectives per step.
    pub(crate) len: usize,
    /// First index of the periodic region.
    pub(crate) start: usize,
    /// Indices of the last collective of each step, ascending, all inside the region.
    pub(crate) boundaries: Vec<usize>,
}

fn holds(sigs: &[u32], p: usize, from: usize) -> bool {
    (from..sigs.len() - p).all(|i| sigs[i] == sigs[i + p])
}

/// The shortest period `p` (at least two repetitions) of `sigs[from..]`.
fn shortest_period(sigs: &[u32], from: usize) -> Option<usize> {
    let n = sigs.len() - from;
    (1..=n / 2).find(|&p| holds(sigs, p, from))
}

/// Finds the step. `weight` breaks ties between equally rare signatures (larger wins, e.g.
/// the byte size: the logits all-gather is the largest collective of a verify).
pub(crate) fn find_period(sigs: &[u32], weight: impl Fn(u32) -> u64) -> Option<Period> {
    let n = sigs.len();
    if n < 2 {
        return None;
    }
    let (p, start) = match shortest_period(sigs, 0) {
        Some(p) => (p, 0),
        None => {
            let half = n / 2;
            let p = (1..=(n - half) / 2).find(|&p| holds(sigs, p, half))?;
            let mut s = half;
            while s > 0 && sigs[s - 1] == sigs[s - 1 + p] {
                s -= 1;
            }
            (p, s)
        }
    };
    let one = &sigs[start..start + p];
    let count = |s: u32| one.iter().filter(|&&x| x == s).count();
    let rare = *one
        .iter()
        .min_by(|&&a, &&b| count(a).cmp(&count(b)).then(weight(b).cmp(&weight(a))))
        .expect("period is not empty");
    let last_in_first = start + one.iter().rposition(|&x| x == rare).expect("present");
    let boundaries = (last_in_first..n).step_by(p).collect();
    Some(Period {
        len: p,
        start,
        boundaries,
    })
}

/// Without a period: every occurrence of the rarest signature that occurs at least twice ends a
/// step. `None` if no signature occurs twice.
pub(crate) fn split_at_rarest(sigs: &[u32], weight: impl Fn(u32) -> u64) -> Option<Vec<usize>> {
    let mut counts = HashMap::new();
    for &s in sigs {
        *counts.entry(s).or_insert(0usize) += 1;
    }
    let (&rare, _) = counts
        .iter()
        .filter(|(_, &c)| c >= 2)
        .min_by(|a, b| a.1.cmp(b.1).then(weight(*b.0).cmp(&weight(*a.0))))?;
    Some(
        sigs.iter()
            .enumerate()
            .filter(|(_, &s)| s == rare)
            .map(|(i, _)| i)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verify_steps(n: usize) -> Vec<u32> {
        let mut v = Vec::new();
        for _ in 0..n {
            v.extend(std::iter::repeat_n(0, 123));
            v.push(1);
        }
        v
    }

    #[test]
    fn kimi_verify_period_ends_at_the_all_gather() {
        let s = verify_steps(5);
        let p = find_period(&s, |x| x as u64).unwrap();
        assert_eq!(p.len, 124);
        assert_eq!(p.boundaries, vec![123, 247, 371, 495, 619]);
    }

    #[test]
    fn a_partial_first_step_and_a_prefill_are_skipped() {
        // 40 all-reduces of a step already under way, then 4 full steps
        let mut s = vec![0; 40];
        s.push(1);
        s.extend(verify_steps(4));
        let p = find_period(&s, |x| x as u64).unwrap();
        assert_eq!((p.len, p.start), (124, 0));
        assert_eq!(p.boundaries.len(), 5);
        // a prefill with other sizes first
        let mut s = vec![7, 8, 7, 9, 9];
        s.extend(verify_steps(4));
        let p = find_period(&s, |x| x as u64).unwrap();
        assert_eq!(p.len, 124);
        assert!(p.start <= 5, "{}", p.start);
        assert_eq!(p.boundaries.len(), 4);
        assert_eq!(*p.boundaries.last().unwrap(), s.len() - 1);
    }

    #[test]
    fn ties_go_to_the_heavier_signature() {
        // period [a, b]: both once; b (weight 10) ends the step
        let s = [2, 3, 2, 3, 2, 3];
        let p = find_period(&s, |x| if x == 3 { 10 } else { 1 }).unwrap();
        assert_eq!((p.len, p.boundaries.clone()), (2, vec![1, 3, 5]));
    }

    #[test]
    fn no_period_falls_back_to_the_rarest_repeated_signature() {
        let s = [0, 0, 1, 0, 0, 0, 1, 0, 2, 0, 1];
        assert!(find_period(&s, |_| 0).is_none());
        assert_eq!(split_at_rarest(&s, |_| 0).unwrap(), vec![2, 6, 10]);
        assert!(split_at_rarest(&[1, 2, 3], |_| 0).is_none());
    }
}
