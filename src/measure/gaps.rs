//! Host gaps: the CPU time a serving engine spends between kernel launches, replayed in eager
//! mode so that verifybench's tight launch loop behaves like a Python server's.
//!
//! A server's ranks each spend tens to hundreds of microseconds of host time per layer between
//! launches, and that time jitters independently on every rank; the collective at the end of
//! each stretch waits for the slowest rank. The flags this module parses and the generator it
//! provides:
//!
//! - `--host-gap-us US[:JITTER]`: mean US and standard deviation JITTER of the host time
//!   before each launch (or each layer), busy-waited ([`busy_wait_us`]: a sleep is far too
//!   coarse at these lengths);
//! - `--host-gap-per op|layer`: before every launch (default), or once per layer;
//! - `--late-rank RANK:US`: one rank later by US once per layer (as rank 0 is when it samples);
//! - `--host-gap-from SCHEDULE`: the per-op gaps a trace measured, replayed as they are: each
//!   rank's own (`host_gaps_per_rank_us` of a schedule file exported from the traces of every
//!   rank), so that the server's skew between ranks and the waiting it causes come back; or,
//!   from a file without them, `host_gaps_us` alike on every rank.
//!
//! **Distribution.** Drawn gaps follow a gamma distribution with the given mean and standard
//! deviation (shape k = mean^2 / sd^2, scale = sd^2 / mean). Host time is positive and skewed
//! to the right (interrupts, cache misses and the interpreter add time; nothing subtracts it),
//! which a gamma has and a normal does not; a normal truncated at zero would also move the
//! mean away from the one asked for. And gamma gaps of one scale add up to a gamma again, so
//! the sum of the gaps between two collectives has a known distribution, which is what the
//! waiting model ([`crate::costmodel::waiting`]) needs.
//!
//! **Determinism.** Each gap is a pure function of (seed, rank, iteration, launch or layer):
//! its own ChaCha8 stream, so the same seed replays the same gaps whatever order they are asked
//! in, and the gaps can be drawn before the timed loop starts ([`HostGaps::iteration_gaps`]).
//!
//! A CUDA-graph replay has no host gaps, exactly as in a server: [`HostGaps::gap_us`] returns
//! 0 for graph replay, so no launcher has to remember it.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Gamma};

use crate::error::usage;
use crate::model::{Op, Schedule};

/// Largest gap, jitter or late-rank lag accepted (1 s): beyond it a run would take hours.
pub(crate) const MAX_GAP_US: f64 = 1e6;

/// The distribution drawn gaps follow, as printed in the provenance.
pub(crate) const DISTRIBUTION: &str = "gamma with the given mean and standard deviation (shape mean^2/sd^2, scale sd^2/mean): host time is positive and right-skewed, and gamma gaps add up to a gamma";

/// Default seed of the gap generator (recorded with every run).
pub(crate) const DEFAULT_SEED: u64 = 0x5eed_9a95;

fn check_us(what: &str, v: f64) -> Result<f64, String> {
    let shown = crate::util::fmt_number(v);
    if !v.is_finite() {
        return Err(format!(
            "{what} must be a number of microseconds, got {shown}"
        ));
    }
    if v < 0.0 {
        return Err(format!("{what} must not be negative, got {shown} us"));
    }
    if v > MAX_GAP_US {
        return Err(format!(
            "{what} of {shown} us is above the limit of {MAX_GAP_US} us (1 s)"
        ));
    }
    Ok(v)
}

fn parse_us(what: &str, s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{what} '{s}' is not a number of microseconds"))?;
    check_us(what, v)
}

/// `--host-gap-us US[:JITTER]`: mean and standard deviation of one gap, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct HostGap {
    pub(crate) mean_us: f64,
    /// Standard deviation; 0: every gap is exactly `mean_us`.
    pub(crate) jitter_us: f64,
}

impl FromStr for HostGap {
    type Err = String;

    /// Messages do not name the flag: clap's value parser puts it in front.
    fn from_str(s: &str) -> Result<HostGap, String> {
        let (m, j) = match s.split_once(':') {
            Some((m, j)) => (m, Some(j)),
            None => (s, None),
        };
        let mean_us = parse_us("the gap", m)?;
        let jitter_us = match j {
            Some(j) => parse_us("the jitter", j)?,
            None => 0.0,
        };
        if mean_us == 0.0 && jitter_us > 0.0 {
            return Err(format!(
                "a jitter of {jitter_us} us needs a positive mean gap (US:JITTER, e.g. 200:50)"
            ));
        }
        Ok(HostGap { mean_us, jitter_us })
    }
}

impl fmt::Display for HostGap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.mean_us, self.jitter_us)
    }
}

/// `--host-gap-per`: where a drawn gap is spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub(crate) enum GapPer {
    /// Before every launch (compute kernels and collectives alike in full mode).
    #[default]
    Op,
    /// Once per layer, before the layer's first launch.
    Layer,
}

impl FromStr for GapPer {
    type Err = String;
    fn from_str(s: &str) -> Result<GapPer, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "op" => Ok(GapPer::Op),
            "layer" => Ok(GapPer::Layer),
            _ => Err(format!("'{s}' is not one of: op, layer")),
        }
    }
}

impl GapPer {
    pub(crate) fn name(self) -> &'static str {
        match self {
            GapPer::Op => "op",
            GapPer::Layer => "layer",
        }
    }
}

/// `--late-rank RANK:US`: one rank starts each layer US later than the others.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct LateRank {
    pub(crate) rank: usize,
    pub(crate) us: f64,
}

impl FromStr for LateRank {
    type Err = String;
    fn from_str(s: &str) -> Result<LateRank, String> {
        let (r, us) = s
            .split_once(':')
            .ok_or_else(|| format!("'{s}' is not RANK:US (e.g. 0:100)"))?;
        let rank = r
            .trim()
            .parse()
            .map_err(|_| format!("rank '{r}' is not a non-negative integer"))?;
        let us = parse_us("the lag", us)?;
        Ok(LateRank { rank, us })
    }
}

impl LateRank {
    /// The rank must exist in a world of `nranks`.
    pub(crate) fn validate(&self, nranks: usize) -> anyhow::Result<()> {
        if self.rank >= nranks {
            crate::usage_bail!(
                "--late-rank {}:{}: rank {} is outside the world of {nranks} ranks (0..{}); give a rank below {nranks}",
                self.rank,
                self.us,
                self.rank,
                nranks.saturating_sub(1)
            );
        }
        Ok(())
    }
}

/// Where the gaps come from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) enum GapSource {
    /// No host gaps (the tight launch loop).
    None,
    /// Drawn from the gamma distribution with this mean and standard deviation.
    Drawn(HostGap),
    /// Measured per-op gaps (`host_gaps_us` of a schedule file), one per schedule op, the same
    /// on every rank.
    Measured(Vec<f64>),
    /// Each rank's own measured per-op gaps (`host_gaps_per_rank_us`), indexed by rank.
    MeasuredPerRank(Vec<Vec<f64>>),
}

/// The host-gap flags as the command line gives them (plain values; cli/ fills it).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct HostGapRequest {
    /// `--host-gap-us`.
    pub(crate) gap: Option<HostGap>,
    /// `--host-gap-per`; `None`: per op.
    pub(crate) per: Option<GapPer>,
    /// `--late-rank`.
    pub(crate) late: Option<LateRank>,
    /// The gaps of the `--host-gap-from` schedule file and the file's name for messages: one
    /// list (`host_gaps_us`, every rank alike), or one per rank (`host_gaps_per_rank_us`).
    pub(crate) from_schedule: Option<(Vec<Vec<f64>>, String)>,
    /// Seed of the generator; `None`: [`DEFAULT_SEED`].
    pub(crate) seed: Option<u64>,
}

/// Validated host-gap settings and the seeded generator.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct HostGaps {
    pub(crate) source: GapSource,
    pub(crate) per: GapPer,
    pub(crate) late: Option<LateRank>,
    pub(crate) seed: u64,
    /// The schedule file the measured gaps came from.
    pub(crate) from_file: Option<String>,
}

impl Default for HostGaps {
    fn default() -> Self {
        HostGaps::none()
    }
}

/// One launch of a replay, as the gap generator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Launch {
    /// Index of the launched op in the schedule.
    pub(crate) op: usize,
    /// Schedule ops whose host time comes before this launch: the ops skipped since the
    /// previous launch (compute ops in comm mode) and this one.
    pub(crate) host_ops: Range<usize>,
    /// Index of the layer this launch belongs to, counting every run of ops with the same
    /// layer as one (embedding, layers 0..L-1, LM head and logits).
    pub(crate) segment: usize,
    /// Layers that begin at this launch: 1 at a layer's first launch, 0 elsewhere (more than 1
    /// when a layer had nothing launched and its start folds into this launch).
    pub(crate) segment_starts: u32,
    /// Whether this launch is a collective (the collective waits for every rank).
    pub(crate) collective: bool,
}

/// The launches of one replay of `schedule`: every op when `with_compute` (modes compute and
/// full), else only the collectives (mode comm).
pub(crate) fn schedule_launches(schedule: &Schedule, with_compute: bool) -> Vec<Launch> {
    let ops: Vec<(Option<u64>, bool)> = schedule
        .ops
        .iter()
        .map(|o| match o {
            Op::Collective { layer, .. } => (*layer, true),
            Op::Compute { layer, .. } => (*layer, false),
        })
        .collect();
    launches_of(&ops, with_compute)
}

/// [`schedule_launches`] on (layer, is collective) per op.
pub(crate) fn launches_of(ops: &[(Option<u64>, bool)], with_compute: bool) -> Vec<Launch> {
    let mut out = vec![];
    let mut segment = 0usize;
    let mut pending_starts = 0u32;
    let mut prev_layer: Option<Option<u64>> = None;
    let mut first_host_op = 0usize;
    for (i, &(layer, coll)) in ops.iter().enumerate() {
        if prev_layer != Some(layer) {
            if prev_layer.is_some() {
                segment += 1;
            }
            pending_starts += 1;
            prev_layer = Some(layer);
        }
        if coll || with_compute {
            out.push(Launch {
                op: i,
                host_ops: first_host_op..i + 1,
                segment,
                segment_starts: pending_starts,
                collective: coll,
            });
            pending_starts = 0;
            first_host_op = i + 1;
        }
    }
    out
}

/// SplitMix64 finaliser: spreads (seed, rank, iteration, key) over a 64-bit seed.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The random stream of one gap: its own ChaCha8 generator.
pub(crate) fn stream(seed: u64, rank: usize, iteration: u64, key: u64) -> ChaCha8Rng {
    let s = mix(mix(mix(seed ^ 0x6761_7073) ^ rank as u64) ^ iteration) ^ key;
    ChaCha8Rng::from_seed(pcg_seed(mix(s)))
}

/// The 32-byte key `SeedableRng::seed_from_u64` makes of `state` (PCG32 words, as rand_core
/// documents it; a test compares the two), written out: a stream is seeded for every drawn
/// gap, and the generic form compiled unoptimised took a sixth of a modeled eager verify in a
/// test build (written out: 2.7 -> 2.4 CPU s, results/cpu2/test-time.txt).
fn pcg_seed(mut state: u64) -> [u8; 32] {
    const MUL: u64 = 6_364_136_223_846_793_005;
    const INC: u64 = 11_634_580_027_462_260_723;
    let mut seed = [0u8; 32];
    let mut k = 0;
    while k < 32 {
        state = state.wrapping_mul(MUL).wrapping_add(INC);
        let x = ((((state >> 18) ^ state) >> 27) as u32).rotate_right((state >> 59) as u32);
        seed[k..k + 4].copy_from_slice(&x.to_le_bytes());
        k += 4;
    }
    seed
}

/// Gamma shape and scale for mean `m` and standard deviation `s` (both positive).
pub(crate) fn gamma_params(m: f64, s: f64) -> (f64, f64) {
    (m * m / (s * s), s * s / m)
}

impl HostGaps {
    /// No host gaps at all.
    pub(crate) fn none() -> HostGaps {
        HostGaps {
            source: GapSource::None,
            per: GapPer::Op,
            late: None,
            seed: DEFAULT_SEED,
            from_file: None,
        }
    }

    /// Validates the request against a world of `nranks` ranks and a schedule of `n_ops` ops.
    /// Usage errors (exit 2) name the flag: both `--host-gap-us` and `--host-gap-from`, a late
    /// rank outside the world, a schedule file whose gap list does not match the schedule.
    pub(crate) fn from_request(
        req: &HostGapRequest,
        nranks: usize,
        n_ops: usize,
    ) -> anyhow::Result<Self> {
        let source = match (&req.gap, &req.from_schedule) {
            (Some(_), Some((_, f))) => crate::usage_bail!(
                "--host-gap-us and --host-gap-from '{f}' both set the host gaps; give one of them"
            ),
            (Some(g), None) if g.mean_us == 0.0 => GapSource::None,
            (Some(g), None) => GapSource::Drawn(*g),
            (None, Some((v, f))) => {
                if req.per == Some(GapPer::Layer) {
                    crate::usage_bail!(
                        "--host-gap-per layer does not apply to --host-gap-from '{f}': its gaps are measured per op; leave --host-gap-per out"
                    );
                }
                if v.len() > 1 && v.len() != nranks {
                    crate::usage_bail!(
                        "--host-gap-from '{f}': the file holds the host gaps of {} ranks but this replay runs {nranks}: give the rank count it was traced with (--tp {})",
                        v.len(),
                        v.len()
                    );
                }
                for (r, g) in v.iter().enumerate() {
                    let whose = if v.len() > 1 {
                        format!("rank {r}'s ")
                    } else {
                        String::new()
                    };
                    if g.len() != n_ops {
                        crate::usage_bail!(
                            "--host-gap-from '{f}': the file has {} {whose}host gaps but this schedule has {n_ops} ops: it was traced for another schedule; give the workload flags it was traced with, or trace this one",
                            g.len()
                        );
                    }
                    if let Some((i, x)) = g
                        .iter()
                        .enumerate()
                        .find(|(_, x)| check_us("", **x).is_err())
                    {
                        crate::usage_bail!(
                            "--host-gap-from '{f}': {whose}host gap {i} is {x} us: gaps must be finite, non-negative and at most {MAX_GAP_US} us"
                        );
                    }
                }
                match v.as_slice() {
                    [one] => GapSource::Measured(one.clone()),
                    [] => crate::usage_bail!("--host-gap-from '{f}': the file has no host gaps"),
                    _ => GapSource::MeasuredPerRank(v.clone()),
                }
            }
            (None, None) => GapSource::None,
        };
        if let Some(l) = &req.late {
            l.validate(nranks)?;
            check_us("--late-rank lag", l.us).map_err(usage)?;
        }
        Ok(HostGaps {
            source,
            per: req.per.unwrap_or_default(),
            late: req.late.filter(|l| l.us > 0.0),
            seed: req.seed.unwrap_or(DEFAULT_SEED),
            from_file: req.from_schedule.as_ref().map(|(_, f)| f.clone()),
        })
    }

    /// True when no launch ever waits (no gaps, no late rank).
    pub(crate) fn is_none(&self) -> bool {
        self.source == GapSource::None && self.late.is_none()
    }

    /// The host time (us) `rank` spends before launch `at` in iteration `iteration` of the
    /// replay; 0 in graph replay (a CUDA graph has no host gaps, exactly as in a server).
    pub(crate) fn gap_us(&self, graph: bool, rank: usize, iteration: u64, at: &Launch) -> f64 {
        if graph {
            return 0.0;
        }
        let mut us = match &self.source {
            GapSource::None => 0.0,
            GapSource::Measured(v) => at.host_ops.clone().map(|i| v[i]).sum(),
            GapSource::MeasuredPerRank(v) => at.host_ops.clone().map(|i| v[rank][i]).sum(),
            GapSource::Drawn(g) => {
                // Per op: one draw for this launch. Per layer: one draw per layer that starts
                // here (a sum of gammas of one scale is a gamma: one draw of shape s k).
                let (units, key) = match self.per {
                    GapPer::Op => (1, at.op as u64),
                    GapPer::Layer => (at.segment_starts, (1 << 40) + at.segment as u64),
                };
                draw(g, units, || stream(self.seed, rank, iteration, key))
            }
        };
        if let Some(l) = &self.late {
            if l.rank == rank {
                us += l.us * at.segment_starts as f64;
            }
        }
        us
    }

    /// The gaps of one whole iteration (one verify) on `rank`, one per launch: draw them
    /// before the timed loop so that drawing costs no host time inside it.
    pub(crate) fn iteration_gaps(
        &self,
        graph: bool,
        rank: usize,
        iteration: u64,
        launches: &[Launch],
    ) -> Vec<f64> {
        launches
            .iter()
            .map(|l| self.gap_us(graph, rank, iteration, l))
            .collect()
    }

    /// One line for the provenance: the settings, the distribution and the seed.
    pub(crate) fn describe(&self) -> String {
        let mut s = match &self.source {
            GapSource::None => "host gaps: none (tight launch loop)".to_string(),
            GapSource::Drawn(g) if g.jitter_us == 0.0 => format!(
                "host gaps: {} us of busy-waited CPU time before each {} in eager replay (no jitter), none in graph replay",
                g.mean_us,
                self.per.name()
            ),
            GapSource::Drawn(g) => {
                let (k, th) = gamma_params(g.mean_us, g.jitter_us);
                format!(
                    "host gaps: busy-waited CPU time before each {} in eager replay, none in graph replay; mean {} us, sd {} us, drawn per rank, iteration and {} from a {DISTRIBUTION}: shape {k:.4}, scale {th:.4} us; ChaCha8 seed {:#x}",
                    self.per.name(),
                    g.mean_us,
                    g.jitter_us,
                    self.per.name(),
                    self.seed
                )
            }
            GapSource::Measured(v) => format!(
                "host gaps: the {} per-op gaps measured in '{}' (total {:.1} us per verify), busy-waited before each launch in eager replay on every rank alike, none in graph replay",
                v.len(),
                self.from_file.as_deref().unwrap_or("?"),
                v.iter().sum::<f64>()
            ),
            GapSource::MeasuredPerRank(v) => {
                let totals: Vec<String> = v
                    .iter()
                    .map(|g| format!("{:.1}", g.iter().sum::<f64>()))
                    .collect();
                format!(
                    "host gaps: each rank's own per-op gaps measured in '{}' ({} ranks, {} gaps each; total per verify {} us by rank), busy-waited before each launch in eager replay, none in graph replay",
                    self.from_file.as_deref().unwrap_or("?"),
                    v.len(),
                    v.first().map_or(0, Vec::len),
                    totals.join(", ")
                )
            }
        };
        if let Some(l) = &self.late {
            s.push_str(&format!(
                "; late rank {} starts each layer {} us later",
                l.rank, l.us
            ));
        }
        s
    }
}

/// The sum of `units` gamma gaps (one draw of shape `units * k`); exactly the mean without
/// jitter. The stream is only made when a draw is needed (seeding one costs more than the
/// draw).
fn draw(g: &HostGap, units: u32, rng: impl FnOnce() -> ChaCha8Rng) -> f64 {
    if units == 0 || g.mean_us == 0.0 {
        return 0.0;
    }
    if g.jitter_us == 0.0 {
        return g.mean_us * units as f64;
    }
    let (k, th) = gamma_params(g.mean_us, g.jitter_us);
    Gamma::new(k * units as f64, th)
        .expect("validated gamma parameters")
        .sample(&mut rng())
}

/// The wait [`busy_wait_us`] spins for `us` microseconds: none for a NaN or a time of 0 or
/// less, at most [`MAX_GAP_US`].
fn wait_of(us: f64) -> Option<Duration> {
    if us.is_nan() || us <= 0.0 {
        return None;
    }
    Some(Duration::from_secs_f64(us.min(MAX_GAP_US) * 1e-6))
}

/// Busy-waits `us` microseconds on the monotonic clock: spins, never sleeps (a sleep wakes
/// up 50 us or more late, coarser than the gaps it would stand for).
pub(crate) fn busy_wait_us(us: f64) {
    let Some(d) = wait_of(us) else {
        return;
    };
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::interval::mean_sd;

    #[test]
    fn the_written_out_seed_is_rand_cores() {
        // zero, all ones, the top bit alone, and 10,000 mixed states: the same key, and the
        // same first words of the stream
        let states = [0, u64::MAX, 1 << 63]
            .into_iter()
            .chain((0..10_000).map(mix));
        for st in states {
            let mut ours = ChaCha8Rng::from_seed(pcg_seed(st));
            let mut theirs = ChaCha8Rng::seed_from_u64(st);
            assert_eq!(ours.get_seed(), theirs.get_seed(), "{st}");
            assert_eq!(
                rand::RngCore::next_u64(&mut ours),
                rand::RngCore::next_u64(&mut theirs)
            );
        }
    }

    #[test]
    fn parses_gap_and_jitter_and_refuses_bad_values() {
        assert_eq!(
            "200:50".parse::<HostGap>().unwrap(),
            HostGap {
                mean_us: 200.0,
                jitter_us: 50.0
            }
        );
        assert_eq!("80".parse::<HostGap>().unwrap().jitter_us, 0.0);
        for bad in [
            "-5", "200:-1", "NaN", "inf", "2e6", "200:2e6", "abc", "0:10", "", "1:2:3",
        ] {
            let e = bad.parse::<HostGap>().unwrap_err();
            assert!(!e.is_empty(), "{bad}");
        }
        assert!("-5".parse::<HostGap>().unwrap_err().contains("negative"));
        assert!("2e6".parse::<HostGap>().unwrap_err().contains("limit"));
        assert_eq!("layer".parse::<GapPer>().unwrap(), GapPer::Layer);
        assert_eq!("OP".parse::<GapPer>().unwrap(), GapPer::Op);
        assert!("token".parse::<GapPer>().is_err());
    }

    #[test]
    fn late_rank_is_checked_against_the_world() {
        let l: LateRank = "0:100".parse().unwrap();
        assert_eq!((l.rank, l.us), (0, 100.0));
        l.validate(2).unwrap();
        let e = "8:100"
            .parse::<LateRank>()
            .unwrap()
            .validate(8)
            .unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(
            e.to_string()
                .starts_with("--late-rank 8:100: rank 8 is outside"),
            "{e}"
        );
        for bad in ["-1:5", "1", "1:-5", "x:5", "1:1e9"] {
            assert!(bad.parse::<LateRank>().is_err(), "{bad}");
        }
    }

    fn ops() -> Vec<(Option<u64>, bool)> {
        // embedding AR, 2 layers of (attn, AR, mlp, AR), LM head, AG.
        let mut v = vec![(None, true)];
        for l in 0..2 {
            v.extend([
                (Some(l), false),
                (Some(l), true),
                (Some(l), false),
                (Some(l), true),
            ]);
        }
        v.extend([(None, false), (None, true)]);
        v
    }

    #[test]
    fn launches_fold_skipped_ops_and_count_layers() {
        let full = launches_of(&ops(), true);
        assert_eq!(full.len(), 11);
        assert!(full.iter().all(|l| l.host_ops == (l.op..l.op + 1)));
        let starts: Vec<u32> = full.iter().map(|l| l.segment_starts).collect();
        assert_eq!(starts, [1, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0]);
        let comm = launches_of(&ops(), false);
        let opsx: Vec<usize> = comm.iter().map(|l| l.op).collect();
        assert_eq!(opsx, [0, 2, 4, 6, 8, 10]);
        assert_eq!(comm[1].host_ops, 1..3);
        assert_eq!(comm[5].host_ops, 9..11);
        let starts: Vec<u32> = comm.iter().map(|l| l.segment_starts).collect();
        assert_eq!(starts, [1, 1, 0, 1, 0, 1]);
        assert_eq!(comm[5].segment, 3);
        assert!(comm.iter().all(|l| l.collective));
    }

    fn gaps(req: HostGapRequest) -> HostGaps {
        HostGaps::from_request(&req, 4, ops().len()).unwrap()
    }

    #[test]
    fn drawn_gaps_have_the_asked_mean_and_sd_and_repeat_with_the_seed() {
        let g = gaps(HostGapRequest {
            gap: Some("200:50".parse().unwrap()),
            ..Default::default()
        });
        let l = launches_of(&ops(), true);
        let v: Vec<f64> = (0..20_000u64)
            .flat_map(|it| g.iteration_gaps(false, 1, it, &l))
            .collect();
        let (m, s) = mean_sd(&v);
        // 220,000 draws: standard error of the mean 0.11 us, of the sd ~0.1 us.
        assert!((m - 200.0).abs() < 0.6, "{m}");
        assert!((s - 50.0).abs() < 0.8, "{s}");
        assert!(v.iter().all(|x| *x > 0.0));
        // Right-skewed: the mean lies above the median.
        let mut sorted = v.clone();
        sorted.sort_by(f64::total_cmp);
        assert!(crate::measure::stats::quantile_sorted(&sorted, 0.5) < m);
        // Same seed, same gaps, in any order of asking; another rank or seed, others.
        assert_eq!(
            g.gap_us(false, 1, 7, &l[3]),
            g.iteration_gaps(false, 1, 7, &l)[3]
        );
        assert_ne!(g.gap_us(false, 1, 7, &l[3]), g.gap_us(false, 2, 7, &l[3]));
        let other = HostGaps {
            seed: 1,
            ..g.clone()
        };
        assert_ne!(
            g.gap_us(false, 1, 7, &l[3]),
            other.gap_us(false, 1, 7, &l[3])
        );
        // Graph replay: none.
        assert!(g.iteration_gaps(true, 1, 7, &l).iter().all(|x| *x == 0.0));
        let d = g.describe();
        assert!(
            d.contains("gamma") && d.contains("seed 0x5eed9a95") && d.contains("sd 50"),
            "{d}"
        );
    }

    #[test]
    fn per_layer_gaps_and_the_late_rank_come_once_per_layer() {
        let g = gaps(HostGapRequest {
            gap: Some("300".parse().unwrap()),
            per: Some(GapPer::Layer),
            late: Some("2:100".parse().unwrap()),
            ..Default::default()
        });
        let l = launches_of(&ops(), true);
        let r0 = g.iteration_gaps(false, 0, 0, &l);
        let r2 = g.iteration_gaps(false, 2, 0, &l);
        assert_eq!(
            r0,
            [300.0, 300.0, 0.0, 0.0, 0.0, 300.0, 0.0, 0.0, 0.0, 300.0, 0.0]
        );
        let diff: Vec<f64> = r2.iter().zip(&r0).map(|(a, b)| a - b).collect();
        assert_eq!(
            diff,
            [100.0, 100.0, 0.0, 0.0, 0.0, 100.0, 0.0, 0.0, 0.0, 100.0, 0.0]
        );
        assert!(g
            .describe()
            .contains("late rank 2 starts each layer 100 us later"));
    }

    #[test]
    fn measured_gaps_are_replayed_and_checked_against_the_schedule() {
        let v: Vec<f64> = (0..ops().len()).map(|i| i as f64).collect();
        let req = HostGapRequest {
            from_schedule: Some((vec![v.clone()], "trace.schedule.json".into())),
            ..Default::default()
        };
        let g = gaps(req.clone());
        let comm = launches_of(&ops(), false);
        // The second collective (op 2) carries the gaps of ops 1 and 2.
        assert_eq!(g.gap_us(false, 3, 0, &comm[1]), 3.0);
        assert_eq!(g.gap_us(false, 0, 9, &comm[1]), 3.0);
        assert_eq!(g.gap_us(true, 0, 9, &comm[1]), 0.0);
        assert!(g.describe().contains("trace.schedule.json"));
        let e = HostGaps::from_request(&req, 4, 99).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("another schedule"), "{e}");
        let mut both = req.clone();
        both.gap = Some("10".parse().unwrap());
        assert!(HostGaps::from_request(&both, 4, 11)
            .unwrap_err()
            .to_string()
            .contains("give one of them"));
        let mut layer = req.clone();
        layer.per = Some(GapPer::Layer);
        assert!(HostGaps::from_request(&layer, 4, 11).is_err());
        let mut neg = req;
        neg.from_schedule.as_mut().unwrap().0[0][4] = -1.0;
        let e = HostGaps::from_request(&neg, 4, 11).unwrap_err();
        assert!(e.to_string().contains("host gap 4 is -1"), "{e}");
        let late = HostGapRequest {
            late: Some("4:10".parse().unwrap()),
            ..Default::default()
        };
        assert_eq!(
            crate::error::exit_code(&HostGaps::from_request(&late, 4, 11).unwrap_err()),
            2
        );
    }

    #[test]
    fn per_rank_measured_gaps_give_each_rank_its_own() {
        let n = ops().len();
        let r0: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let r1: Vec<f64> = (0..n).map(|i| 100.0 + i as f64).collect();
        let req = HostGapRequest {
            from_schedule: Some((vec![r0, r1], "two.schedule.json".into())),
            ..Default::default()
        };
        let g = HostGaps::from_request(&req, 2, n).unwrap();
        let comm = launches_of(&ops(), false);
        // The second collective (op 2) carries ops 1 and 2: 1 + 2 on rank 0, 101 + 102 on 1.
        assert_eq!(g.gap_us(false, 0, 0, &comm[1]), 3.0);
        assert_eq!(g.gap_us(false, 1, 5, &comm[1]), 203.0);
        assert_eq!(g.gap_us(true, 1, 5, &comm[1]), 0.0);
        let d = g.describe();
        assert!(
            d.contains("each rank's own") && d.contains("2 ranks"),
            "{d}"
        );
        // Another rank count than the file's, a bad gap of one rank: usage errors naming it.
        let e = HostGaps::from_request(&req, 4, n).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(
            e.to_string()
                .contains("host gaps of 2 ranks but this replay runs 4"),
            "{e}"
        );
        let mut bad = req.clone();
        bad.from_schedule.as_mut().unwrap().0[1][3] = f64::NAN;
        let e = HostGaps::from_request(&bad, 2, n).unwrap_err();
        assert!(e.to_string().contains("rank 1's host gap 3 is NaN"), "{e}");
        let e = HostGaps::from_request(&req, 2, n + 1).unwrap_err();
        assert!(e.to_string().contains("rank 0's host gaps"), "{e}");
    }

    #[test]
    fn busy_wait_spins_at_least_the_time_asked() {
        let t = Instant::now();
        busy_wait_us(300.0);
        let e = t.elapsed();
        assert!(e >= Duration::from_micros(300), "{e:?}");
        // a missing wait is the failure mode; the ceiling only catches a wait that never ends
        assert!(e < Duration::from_secs(10), "{e:?}");
        // no wait for a NaN or a time of 0 or less (they return at once), at most 1 s
        assert_eq!(wait_of(-1.0), None);
        assert_eq!(wait_of(0.0), None);
        assert_eq!(wait_of(f64::NAN), None);
        assert_eq!(wait_of(300.0), Some(Duration::from_micros(300)));
        assert_eq!(wait_of(5e6), Some(Duration::from_secs(1)));
        busy_wait_us(-1.0);
        busy_wait_us(f64::NAN);
    }
}
