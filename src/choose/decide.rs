//! The choice for one shape, and the crossover over all of them.
//!
//! Every candidate is judged against NCCL's default of the same round: its paired ratio
//! (`sweep::rounds::paired_ratio`: the geometric mean of t_i / b_i and the 95% t interval on
//! the logs). A candidate is chosen only when it beats NCCL's default beyond the noise measured
//! in the same run: the whole interval below 1 - bar, where the bar is the larger of 1% and
//! the default's own spread over the rounds (`sweep::rounds::noise_floor`), and at least
//! 0.25 us faster in the medians (the community selector's rule: 1% and 0.25 us). Of those,
//! the lowest ratio wins. Where none clears the bar the choice stays NCCL's default and says
//! whether every other candidate was slower beyond the noise or nothing was told apart.
//! Modeled figures carry no noise: the bar is then 1% and 0.25 us, and the interval the ratio
//! itself.

use serde::{Deserialize, Serialize};

use super::measure::{Candidate, NCCL_DEFAULT};
use crate::measure::stats::median;
use crate::sweep::rounds::{noise_floor, paired_ratio, RoundTiming};

/// A candidate must be at least this much faster than NCCL's default (relative).
pub(crate) const MIN_REL: f64 = 0.01;
/// ... and at least this much, us.
pub(crate) const MIN_US: f64 = 0.25;

/// One candidate's figures at one shape in one launch mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Figure {
    pub(crate) candidate: String,
    /// Median of the rounds' medians, us per collective.
    pub(crate) median_us: f64,
    /// Each round's median, in round order.
    pub(crate) per_round_us: Vec<f64>,
    /// Time over NCCL's default's, paired by round (geometric mean); none for the default.
    pub(crate) ratio: Option<f64>,
    /// The ratio's 95% interval (t on the logs; the ratio itself when modeled); none with
    /// fewer than 2 paired rounds.
    pub(crate) interval: Option<[f64; 2]>,
    /// NCCL's default's median less this one's, us (positive: faster).
    pub(crate) gain_us: Option<f64>,
    /// NCCL's algorithm/protocol at this size (NCCL candidates: the first round's NCCL log, or
    /// the model's choice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) nccl_used: Option<String>,
}

/// How a shape's choice came about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Verdict {
    /// A candidate beats NCCL's default beyond the noise.
    Wins,
    /// Every other candidate is slower than NCCL's default beyond the noise.
    NcclHolds,
    /// Nothing is told apart from NCCL's default beyond the noise.
    WithinNoise,
    /// Fewer than 2 rounds of NCCL's default: no noise measured, nothing chosen over it.
    NoNoise,
    /// NCCL's default did not run at this shape.
    NotMeasured,
}

/// The choice of one shape in one launch mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ModeChoice {
    pub(crate) graph: bool,
    /// In the order of the candidates; one that did not run is absent.
    pub(crate) figures: Vec<Figure>,
    /// NCCL's default's spread over the rounds (max |b_i / median - 1|); 0 when modeled,
    /// none with fewer than 2 rounds.
    pub(crate) noise_rel: Option<f64>,
    /// The relative bar: the larger of the noise and 1%.
    pub(crate) bar_rel: f64,
    /// The chosen candidate's id.
    pub(crate) choice: String,
    pub(crate) verdict: Verdict,
}

impl ModeChoice {
    pub(crate) fn figure(&self, id: &str) -> Option<&Figure> {
        self.figures.iter().find(|f| f.candidate == id)
    }
}

/// The rounds' times of `id` in `graph` (or eager) replay, in round order.
fn times_of(t: &[RoundTiming], id: &str, graph: bool) -> Vec<f64> {
    let mut v: Vec<(usize, f64)> = t
        .iter()
        .filter(|x| x.key.point_id == id)
        .filter_map(|x| {
            let y = if graph { x.graph_us } else { x.eager_us }?;
            (y.is_finite() && y > 0.0).then_some((x.key.round, y))
        })
        .collect();
    v.sort_by_key(|x| x.0);
    v.into_iter().map(|x| x.1).collect()
}

/// The choice among `cands` from the round timings `t` of one shape (see the module comment).
/// `used` names NCCL's algorithm/protocol per candidate id where known.
pub(crate) fn judge(
    t: &[RoundTiming],
    cands: &[Candidate],
    graph: bool,
    modeled: bool,
    used: &dyn Fn(&str) -> Option<String>,
) -> ModeChoice {
    let base = times_of(t, NCCL_DEFAULT, graph);
    let mut out = ModeChoice {
        graph,
        figures: vec![],
        noise_rel: None,
        bar_rel: MIN_REL,
        choice: NCCL_DEFAULT.into(),
        verdict: Verdict::NotMeasured,
    };
    if base.is_empty() {
        return out;
    }
    let base_med = median(&base);
    out.noise_rel = if modeled {
        Some(0.0)
    } else {
        noise_floor(t, NCCL_DEFAULT, graph).map(|n| n.rel)
    };
    out.bar_rel = out.noise_rel.unwrap_or(0.0).max(MIN_REL);
    for c in cands {
        let v = times_of(t, &c.id, graph);
        if v.is_empty() {
            continue;
        }
        let med = median(&v);
        let pr = (c.id != NCCL_DEFAULT)
            .then(|| paired_ratio(t, &c.id, NCCL_DEFAULT, graph))
            .flatten();
        let interval = pr.as_ref().and_then(|p| match (p.interval, modeled) {
            (Some((lo, hi)), _) => Some([lo, hi]),
            (None, true) => Some([p.ratio, p.ratio]),
            (None, false) => None,
        });
        out.figures.push(Figure {
            candidate: c.id.clone(),
            median_us: med,
            per_round_us: v,
            ratio: pr.as_ref().map(|p| p.ratio),
            interval,
            gain_us: (c.id != NCCL_DEFAULT).then_some(base_med - med),
            nccl_used: used(&c.id),
        });
    }
    if out.noise_rel.is_none() {
        out.verdict = Verdict::NoNoise;
        return out;
    }
    let bar = 1.0 - out.bar_rel;
    let winner = out
        .figures
        .iter()
        .filter(|f| {
            f.interval.is_some_and(|[_, hi]| hi < bar) && f.gain_us.is_some_and(|g| g >= MIN_US)
        })
        .min_by(|a, b| a.ratio.unwrap_or(1.0).total_cmp(&b.ratio.unwrap_or(1.0)));
    out.verdict = match winner {
        Some(w) => {
            out.choice = w.candidate.clone();
            Verdict::Wins
        }
        None => {
            let others: Vec<&Figure> = out.figures.iter().filter(|f| f.ratio.is_some()).collect();
            let slower = |f: &&Figure| f.interval.is_some_and(|[lo, _]| lo > 1.0 + out.bar_rel);
            if !others.is_empty() && others.iter().all(slower) {
                Verdict::NcclHolds
            } else {
                Verdict::WithinNoise
            }
        }
    };
    out
}

/// One stretch of the crossover: the shapes up to `upto_bytes` (bytes per rank) that share a
/// choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Band {
    /// What the shapes of the stretch choose, as words (`one-shot`, `NCCL (Ring/LL)`).
    pub(crate) choice: String,
    /// The candidate's id.
    pub(crate) candidate: String,
    /// The largest shape of the stretch, bytes per rank.
    pub(crate) upto_bytes: u64,
    /// Its first shape, bytes per rank.
    pub(crate) from_bytes: u64,
    /// True where nothing beat NCCL's default beyond the noise (no choice was made there).
    pub(crate) within_noise: bool,
}

/// The crossover of `choices` (one per shape, ascending by size, with the shape's bytes):
/// consecutive shapes with the same choice form one band.
pub(crate) fn crossover(choices: &[(u64, &ModeChoice)], cands: &[Candidate]) -> Vec<Band> {
    let mut bands: Vec<Band> = vec![];
    for (bytes, c) in choices {
        let label = choice_words(c, cands);
        let within = !matches!(c.verdict, Verdict::Wins | Verdict::NcclHolds);
        match bands.last_mut() {
            Some(b) if b.choice == label && b.within_noise == within => b.upto_bytes = *bytes,
            _ => bands.push(Band {
                choice: label,
                candidate: c.choice.clone(),
                upto_bytes: *bytes,
                from_bytes: *bytes,
                within_noise: within,
            }),
        }
    }
    bands
}

/// The choice of `c` as words: the candidate's label, with NCCL's algorithm/protocol where an
/// NCCL candidate is chosen and known.
pub(crate) fn choice_words(c: &ModeChoice, cands: &[Candidate]) -> String {
    let label = cands
        .iter()
        .find(|x| x.id == c.choice)
        .map_or(c.choice.clone(), |x| x.label.clone());
    match c.figure(&c.choice).and_then(|f| f.nccl_used.clone()) {
        Some(u) if c.choice == NCCL_DEFAULT => format!("{label} ({u})"),
        _ => label,
    }
}

/// "one-shot up to 56.0 KiB (57,344 B), NCCL (Ring/LL) above"; a band where nothing beat
/// NCCL's default says so.
pub(crate) fn crossover_words(bands: &[Band]) -> String {
    let words = |b: &Band| {
        if b.within_noise {
            "NCCL's default (nothing beats it beyond the noise)".to_string()
        } else {
            b.choice.clone()
        }
    };
    let n = bands.len();
    bands
        .iter()
        .enumerate()
        .map(|(i, b)| match (i + 1 == n, n) {
            (true, 1) => format!("{} at every size", words(b)),
            (true, _) => format!("{} above", words(b)),
            _ => format!(
                "{} up to {} ({} B)",
                words(b),
                crate::units::human_bytes(b.upto_bytes),
                crate::units::grouped(b.upto_bytes)
            ),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::rounds::RoundKey;

    fn t(id: &str, round: usize, us: f64) -> RoundTiming {
        RoundTiming {
            key: RoundKey {
                point_id: id.into(),
                round,
            },
            eager_us: None,
            graph_us: Some(us),
        }
    }

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn a_kernel_wins_only_beyond_the_noise_and_the_quarter_microsecond() {
        let c = super::super::measure::candidates(&[], &[]);
        // NCCL 20.0, 20.4, 19.6 us (spread 2%); one-shot 10.0, 10.1, 9.9; two-shot 19.8, 20.2,
        // 19.4 (1% faster, inside the 2% noise).
        let mut v = vec![];
        for (r, (b, o, w)) in [(20.0, 10.0, 19.8), (20.4, 10.1, 20.2), (19.6, 9.9, 19.4)]
            .into_iter()
            .enumerate()
        {
            v.extend([t("nccl", r, b), t("oneshot", r, o), t("twoshot", r, w)]);
        }
        let m = judge(&v, &c, true, false, &none);
        assert_eq!(m.verdict, Verdict::Wins);
        assert_eq!(m.choice, "oneshot");
        assert!((m.noise_rel.unwrap() - 0.02).abs() < 1e-12);
        assert!((m.bar_rel - 0.02).abs() < 1e-12);
        let one = m.figure("oneshot").unwrap();
        // ln(10/20), ln(10.1/20.4), ln(9.9/19.6): mean -0.693047, so the ratio is 0.500050
        assert!((one.ratio.unwrap() - 0.500_050).abs() < 1e-6, "{one:?}");
        assert!((one.gain_us.unwrap() - 10.0).abs() < 1e-12);
        // Without the kernel that wins, two-shot's 1% is inside the noise: NCCL stays.
        let two_only: Vec<RoundTiming> = v
            .iter()
            .filter(|x| x.key.point_id != "oneshot")
            .cloned()
            .collect();
        let m = judge(&two_only, &c, true, false, &none);
        assert_eq!(
            (m.verdict, m.choice.as_str()),
            (Verdict::WithinNoise, "nccl")
        );
        // One round: no noise measured, nothing chosen.
        let first: Vec<RoundTiming> = v.iter().filter(|x| x.key.round == 0).cloned().collect();
        assert_eq!(
            judge(&first, &c, true, false, &none).verdict,
            Verdict::NoNoise
        );
        // Eager did not run: not measured.
        assert_eq!(
            judge(&v, &c, false, false, &none).verdict,
            Verdict::NotMeasured
        );
    }

    #[test]
    fn modeled_figures_need_one_percent_and_a_quarter_microsecond() {
        let c = super::super::measure::candidates(&[], &[]);
        // 10 us against 10.2 us: 2% but 0.2 us faster: not enough. 30 against 30.6: 0.6 us and
        // 2%: enough. Two-shot 2% slower at both.
        let case = |b: f64, o: f64| {
            vec![
                t("nccl", 0, b),
                t("oneshot", 0, o),
                t("twoshot", 0, b * 1.02),
            ]
        };
        let small = judge(&case(10.2, 10.0), &c, true, true, &none);
        assert_eq!(
            (small.verdict, small.choice.as_str()),
            (Verdict::WithinNoise, "nccl")
        );
        assert_eq!(small.noise_rel, Some(0.0));
        let large = judge(&case(30.6, 30.0), &c, true, true, &none);
        assert_eq!(
            (large.verdict, large.choice.as_str()),
            (Verdict::Wins, "oneshot")
        );
        // Both kernels 20% slower: NCCL holds beyond the noise.
        let slow = vec![
            t("nccl", 0, 10.0),
            t("oneshot", 0, 12.0),
            t("twoshot", 0, 12.0),
        ];
        assert_eq!(
            judge(&slow, &c, true, true, &none).verdict,
            Verdict::NcclHolds
        );
    }

    #[test]
    fn the_crossover_reads_as_a_sentence() {
        let c = super::super::measure::candidates(&[], &[]);
        let used = |id: &str| (id == "nccl").then(|| "Ring/LL".to_string());
        let win = |o: f64| {
            vec![
                t("nccl", 0, 20.0),
                t("oneshot", 0, o),
                t("twoshot", 0, 25.0),
            ]
        };
        let a = judge(&win(10.0), &c, true, true, &used);
        let b = judge(&win(12.0), &c, true, true, &used);
        let d = judge(&win(30.0), &c, true, true, &used);
        let bands = crossover(&[(14_336, &a), (57_344, &b), (458_752, &d)], &c);
        assert_eq!(bands.len(), 2);
        assert_eq!(
            crossover_words(&bands),
            "one-shot up to 56.0 KiB (57,344 B), NCCL (Ring/LL) above"
        );
        let only = crossover(&[(14_336, &d)], &c);
        assert_eq!(crossover_words(&only), "NCCL (Ring/LL) at every size");
    }
}
