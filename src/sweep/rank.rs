//! Ranking and advice: points sorted by verify time, ratios to the baseline with their
//! uncertainty, and the `export` lines of the best setting (with the build that won, when the
//! sweep varies the NCCL library: [`library_block`], [`build_line`]).
//!
//! Uncertainty of a median: [`Summary::median_se`](crate::measure::Summary::median_se), the
//! normal approximation sqrt(pi/2) stddev / sqrt(n). Ratio r = m / m0 has relative error
//! sqrt((e/m)^2 + (e0/m0)^2). `sweep` recommends from its rounds ([`super::rounds`], a
//! measured noise floor; [`super::summary`]), and this table is its first round.

use std::collections::BTreeSet;

use super::results::SweepPoint;
use crate::record::{Body, Mode, Record, VerifyRun};
use crate::report::export::Table;

/// One timing column of a row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cell {
    pub(crate) median_us: f64,
    /// Standard error of the median.
    pub(crate) err_us: f64,
    /// Ratio to the baseline's median and its standard error (None without a baseline).
    pub(crate) ratio: Option<(f64, f64)>,
}

/// One ranked point.
#[derive(Debug, Clone)]
pub(crate) struct Row<'a> {
    pub(crate) point: &'a SweepPoint,
    pub(crate) graph: Option<Cell>,
    pub(crate) eager: Option<Cell>,
    pub(crate) wrong: u64,
}

/// The ranking of a sweep.
#[derive(Debug, Clone)]
pub(crate) struct Ranking<'a> {
    /// Points that ran, fastest first by the primary column.
    pub(crate) rows: Vec<Row<'a>>,
    pub(crate) failed: Vec<&'a SweepPoint>,
    /// Points that ran through the cost model but set variables it cannot price: their
    /// numbers are NCCL's defaults' under another name, so they are listed apart and never
    /// ranked or recommended.
    pub(crate) unpriced: Vec<&'a SweepPoint>,
    /// Graph replay when present (what serving engines use for decode), else eager.
    pub(crate) primary_graph: bool,
    /// `measured`, `modeled` or `mixed`.
    pub(crate) source: String,
}

fn run_of(p: &SweepPoint, graph: bool, mode: Mode) -> Option<&VerifyRun> {
    match &p.verify.as_ref()?.body {
        Body::Verify(v) => v.run(graph, mode),
        _ => None,
    }
}

/// Median and its standard error from a run's Summary.
pub(crate) fn median_err(r: &VerifyRun) -> (f64, f64) {
    (r.per_verify.median_us, r.per_verify.median_se())
}

/// Ratio a/b and its standard error.
pub(crate) fn ratio(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    crate::measure::stats::ratio_with_error(a, b).unwrap_or((f64::NAN, f64::NAN))
}

fn cell(p: &SweepPoint, base: Option<&SweepPoint>, graph: bool, mode: Mode) -> Option<Cell> {
    let me = median_err(run_of(p, graph, mode)?);
    let ratio = base
        .and_then(|b| run_of(b, graph, mode))
        .map(|b| ratio(me, median_err(b)));
    Some(Cell {
        median_us: me.0,
        err_us: me.1,
        ratio,
    })
}

/// The settings of a point that the cost model could not price, from its record's notes
/// ("not modeled: NCCL_NTHREADS=512, ..."); empty for a measured point or a priced one.
pub(crate) fn not_modeled(p: &SweepPoint) -> Vec<String> {
    let Some(v) = &p.verify else {
        return vec![];
    };
    v.provenance
        .notes
        .iter()
        .filter_map(|n| n.strip_prefix("not modeled: "))
        .map(|n| n.split(" (").next().unwrap_or(n).to_string())
        .collect()
}

/// What a point the cost model could not price says in place of a timing (its note in the
/// table, its progress line), or `None` for a priced or measured point.
pub(crate) fn unpriced_note(p: &SweepPoint) -> Option<String> {
    let vars = not_modeled(p);
    (!vars.is_empty()).then(|| {
        format!(
            "not modeled: {} (the cost model cannot price it: not ranked)",
            vars.join(", ")
        )
    })
}

/// Ranks `points` (ok ones by time; failed ones and the ones the cost model could not price
/// listed apart) for replay mode `mode`.
pub(crate) fn rank(points: &[SweepPoint], mode: Mode) -> Ranking<'_> {
    let base = points
        .iter()
        .find(|p| p.overrides.is_empty() && p.verify.is_some());
    let mut rows = vec![];
    let mut failed = vec![];
    let mut unpriced = vec![];
    for p in points {
        if p.verify.is_none() || !p.ok() && p.wrong() == 0 {
            failed.push(p);
            continue;
        }
        if !not_modeled(p).is_empty() {
            unpriced.push(p);
            continue;
        }
        rows.push(Row {
            point: p,
            graph: cell(p, base, true, mode),
            eager: cell(p, base, false, mode),
            wrong: p.wrong(),
        });
    }
    let primary_graph = rows.iter().any(|r| r.graph.is_some());
    let key = |r: &Row| {
        let c = if primary_graph { &r.graph } else { &r.eager };
        // Wrong results never rank first, whatever their speed.
        (
            r.wrong > 0,
            c.as_ref().map_or(f64::INFINITY, |c| c.median_us),
        )
    };
    rows.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1))
    });
    let sources: std::collections::BTreeSet<&str> = points
        .iter()
        .filter_map(|p| p.verify.as_ref().map(|r| r.source.label()))
        .collect();
    let fake = points.iter().any(|p| {
        p.verify
            .as_ref()
            .is_some_and(|r| r.provenance.backend == "mock")
    });
    let source = match sources.len() {
        _ if fake => "FAKE (debug mode)",
        0 => "none",
        1 => sources.iter().next().unwrap(),
        _ => "mixed",
    }
    .to_string();
    Ranking {
        rows,
        failed,
        unpriced,
        primary_graph,
        source,
    }
}

impl SweepPoint {
    /// Wrong elements over the timed runs.
    pub(crate) fn wrong(&self) -> u64 {
        wrong_in(self.verify.as_ref())
    }
}

/// Wrong elements over the timed runs of a point's record (none without one).
pub(crate) fn wrong_in(rec: Option<&Record>) -> u64 {
    match rec.map(|r| &r.body) {
        Some(Body::Verify(v)) => v.runs.iter().map(|r| r.wrong).sum(),
        _ => 0,
    }
}

fn us(c: &Option<Cell>) -> String {
    match c {
        Some(c) => format!("{:.1} ± {:.1}", c.median_us, c.err_us),
        None => "-".into(),
    }
}

fn rat(c: &Option<Cell>, baseline: bool) -> String {
    if baseline && c.is_some() {
        return "base".into();
    }
    match c.as_ref().and_then(|c| c.ratio) {
        Some((r, e)) if r.is_finite() => format!("{r:.3} ± {e:.3}"),
        _ => "-".into(),
    }
}

/// The rank cell of a point the cost model could not price.
pub(crate) const UNPRICED: &str = "not modeled";

/// The ranking as a flat table (also what `--export-table-*` writes): the ranked points, then
/// the ones the cost model could not price, then the failed ones.
pub(crate) fn table(r: &Ranking) -> Table {
    let mut t = Table::new(&[
        "rank",
        "point",
        "settings",
        "graph_us",
        "graph_vs_base",
        "eager_us",
        "eager_vs_base",
        "nccl_algo_proto",
        "transport",
        "wrong",
        "env_seen",
        "notes",
    ]);
    for (i, row) in r.rows.iter().enumerate() {
        let p = row.point;
        let eff = p.effective.as_ref();
        let mut notes: Vec<String> = vec![];
        if let Some(e) = eff {
            notes.extend(e.mismatches.iter().cloned());
        }
        notes.extend(p.env_check.problems.iter().cloned());
        for u in &p.unknown_vars {
            notes.push(format!("{u} unknown to NCCL"));
        }
        if !p.ok() {
            notes.push(p.reason.clone().unwrap_or_default());
        }
        t.rows.push(vec![
            (i + 1).to_string(),
            p.point_id.clone(),
            label(p),
            us(&row.graph),
            rat(&row.graph, p.overrides.is_empty()),
            us(&row.eager),
            rat(&row.eager, p.overrides.is_empty()),
            eff.map_or("n/a".into(), |e| e.algo_proto()),
            eff.map_or("n/a".into(), |e| e.transport()),
            row.wrong.to_string(),
            p.env_check.cell(),
            notes.join("; "),
        ]);
    }
    for p in &r.unpriced {
        t.rows.push(vec![
            UNPRICED.into(),
            p.point_id.clone(),
            label(p),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "n/a".into(),
            "n/a".into(),
            p.wrong().to_string(),
            p.env_check.cell(),
            unpriced_note(p).unwrap_or_default(),
        ]);
    }
    for p in &r.failed {
        t.rows.push(vec![
            "failed".into(),
            p.point_id.clone(),
            label(p),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            p.effective
                .as_ref()
                .map_or("n/a".into(), |e| e.algo_proto()),
            p.effective.as_ref().map_or("n/a".into(), |e| e.transport()),
            "-".into(),
            p.env_check.cell(),
            [p.reason.clone(), p.hint.clone()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" HINT: "),
        ]);
    }
    t
}

pub(crate) fn label(p: &SweepPoint) -> String {
    super::matrix::label(&p.overrides)
}

/// Single-quotes a value for a POSIX shell when it needs it.
pub(crate) fn shell_quote(v: &str) -> String {
    if !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.,:/+=".contains(c))
    {
        v.to_string()
    } else {
        format!("'{}'", v.replace('\'', r"'\''"))
    }
}

/// At one rank NCCL chooses no algorithm, protocol or transport (it copies): no setting can act
/// there, so a ratio below 1 is the between-run spread, not an effect to export. The line that
/// says so in place of a recommendation, when any point ran on a communicator of one rank.
pub(crate) fn one_rank_recommendation<'a>(
    mut points: impl Iterator<Item = &'a SweepPoint>,
    mode: &str,
) -> Option<String> {
    points
        .any(|p| p.effective.as_ref().is_some_and(|e| e.one_rank.is_some()))
        .then(|| format!(
            "Recommendation: none at one rank ({mode} replay): NCCL chooses no algorithm, protocol or transport on a communicator of size 1, so no ratio here is a setting's effect; sweep across the real ranks (--gpus N) to choose\n"
        ))
}

/// The libraries block under a sweep's table ([`super::library`]): per library, the version its points' workers
/// reported and which points ran on it; every refused point with its reason. Empty when the
/// sweep named no library.
pub(crate) fn library_block(points: &[SweepPoint]) -> String {
    let mut libs: Vec<(&str, Vec<&SweepPoint>)> = vec![];
    for p in points {
        let Some(l) = &p.library else { continue };
        match libs.iter_mut().find(|(path, _)| *path == l.path) {
            Some((_, v)) => v.push(p),
            None => libs.push((&l.path, vec![p])),
        }
    }
    if libs.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\nNCCL libraries (what each point's workers reported: ncclGetVersion and the file they mapped):\n",
    );
    for (i, (path, ps)) in libs.iter().enumerate() {
        let proofs: Vec<&super::library::LibraryProof> =
            ps.iter().filter_map(|p| p.library.as_ref()).collect();
        // sorted, each once
        let versions: BTreeSet<String> = proofs.iter().filter_map(|l| l.version()).collect();
        let versions: Vec<String> = versions.into_iter().collect();
        let logs: BTreeSet<&str> = proofs
            .iter()
            .filter_map(|l| l.log_version.as_deref())
            .collect();
        let logs: Vec<&str> = logs.into_iter().collect();
        let ok = proofs.iter().filter(|l| l.status == "ok").count();
        let version = if versions.is_empty() {
            "version not reported".to_string()
        } else {
            format!("NCCL {}", versions.join(" and "))
        };
        let log = if logs.is_empty() {
            String::new()
        } else {
            format!(" (log: {})", logs.join(", "))
        };
        let ids: Vec<&str> = ps.iter().map(|p| p.point_id.as_str()).collect();
        out.push_str(&format!(
            "  L{} {path}: {version}{log}; proven in {ok} of {} point(s): {}\n",
            i + 1,
            ps.len(),
            ids.join(", ")
        ));
    }
    for p in points {
        if let Some(l) = p.library.as_ref().filter(|l| l.status == "refused") {
            out.push_str(&format!(
                "  REFUSED {}: {}\n",
                p.point_id,
                l.problems.join("; ")
            ));
        }
    }
    out
}

/// The `export` lines of a recommended point: its NCCL variables (the library is no
/// variable: [`build_line`] names it).
pub(crate) fn exports(p: &SweepPoint) -> String {
    p.overrides
        .iter()
        .filter(|(k, _)| k != super::library::NAME)
        .map(|(k, v)| format!("  export {k}={}\n", shell_quote(v)))
        .collect()
}

/// The line that names the build of the winner (the recommended point, or the baseline when
/// the defaults are kept) with its version; None when the sweep named no library.
pub(crate) fn build_line(winner: &SweepPoint, kept_defaults: bool) -> Option<String> {
    let l = winner.library.as_ref()?;
    let version = l
        .version()
        .map(|v| format!("NCCL {v}"))
        .unwrap_or_else(|| "NCCL (version not reported)".into());
    let whose = if kept_defaults {
        "the baseline's library"
    } else {
        "the library of the recommended point"
    };
    let q = shell_quote(&l.path);
    Some(format!(
        "  build: {version} from {} ({whose}, the version its workers reported); a vLLM server loads it with export VLLM_NCCL_SO_PATH={q}\n",
        l.path
    ))
}
