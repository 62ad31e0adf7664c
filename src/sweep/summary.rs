//! What a sweep prints: the ranking table with its notes and hints, the rounds' judgement and
//! recommendation, and the progress line's account of where a child's time went. Pure: points
//! in, text out.

use crate::record::{Mode, Source};
use crate::report::export::{text_table, Table};
use crate::sweep::rank;
use crate::sweep::results::SweepPoint;
use crate::sweep::rounds as rd;
use crate::sweep::{self as sw};

/// Everything printed after the sweep: the first round's table, notes, failures, then the
/// rounds' judgement ([`rounds_block`]) from `pairs` (every finished pair, all rounds).
pub(crate) fn render(
    points: &[SweepPoint],
    pairs: &[SweepPoint],
    mode: Mode,
    rounds: usize,
    margin: f64,
) -> (String, Table) {
    let r = rank::rank(points, mode);
    let full = rank::table(&r);
    let notes_col = full.headers.len() - 1;
    let shown = Table {
        headers: full.headers[..notes_col].to_vec(),
        rows: full
            .rows
            .iter()
            .filter(|row| row[0] != rank::UNPRICED)
            .map(|row| row[..notes_col].to_vec())
            .collect(),
    };
    let mut out = String::new();
    let source = match r.source.as_str() {
        "none" => "no point was timed".to_string(),
        s => format!("{s} numbers"),
    };
    let first = if rounds > 1 {
        format!("round 1 of {rounds}, ")
    } else {
        String::new()
    };
    out.push_str(&format!(
        "# {first}per-verify time in us (median ± standard error within the run), {source}; ratios are to the baseline (defaults)\n"
    ));
    out.push_str(&text_table(&shown));
    if !r.unpriced.is_empty() {
        out.push_str(&format!(
            "\nNot ranked: {} point(s) set variables the cost model cannot price (their numbers would be the defaults' under another name); measure them on the GPUs (--backend nccl):\n",
            r.unpriced.len()
        ));
        for p in &r.unpriced {
            out.push_str(&format!(
                "  {}: not modeled: {}\n",
                p.point_id,
                rank::not_modeled(p).join(", ")
            ));
        }
    }
    let mut notes = String::new();
    let mut hints: Vec<(String, Vec<String>)> = vec![];
    for row in full.rows.iter().filter(|row| row[0] != rank::UNPRICED) {
        let p = r
            .rows
            .iter()
            .map(|x| x.point)
            .chain(r.failed.iter().copied())
            .find(|p| p.point_id == row[1]);
        let note = match p {
            Some(p) if !p.ok() => p.reason.clone().unwrap_or_default(),
            _ => row[notes_col].clone(),
        };
        if !note.is_empty() {
            notes.push_str(&format!("  {}: {note}\n", row[1]));
        }
        if let Some(h) = p.and_then(|p| p.hint.clone()) {
            match hints.iter_mut().find(|(x, _)| *x == h) {
                Some((_, ids)) => ids.push(row[1].clone()),
                None => hints.push((h, vec![row[1].clone()])),
            }
        }
    }
    for p in &r.failed {
        if let Some(t) = &p.stderr_tail {
            let last = t.lines().last().unwrap_or("");
            if !p.reason.as_deref().unwrap_or("").contains(last.trim()) {
                notes.push_str(&format!("  {} stderr: {last}\n", p.point_id));
            }
        }
        if !p.log_paths.is_empty() {
            let paths: Vec<String> = p
                .log_paths
                .iter()
                .map(|x| x.display().to_string())
                .collect();
            notes.push_str(&format!("  {} NCCL log: {}\n", p.point_id, paths.join(" ")));
        }
    }
    for (h, ids) in hints {
        notes.push_str(&format!("  HINT ({}): {h}\n", ids.join(", ")));
    }
    if !notes.is_empty() {
        out.push_str("\nNotes:\n");
        out.push_str(&notes);
    }
    out.push_str(&rank::library_block(points));
    out.push('\n');
    if r.rows.iter().all(|x| x.wrong > 0) {
        out.push_str("No point ran without errors: nothing to recommend.\n");
    } else {
        out.push_str(&rounds_block(
            points,
            pairs,
            r.primary_graph,
            rounds,
            margin,
        ));
    }
    (out, full)
}

/// Whether every timed point of the sweep came from the cost model (not the debug mock): its
/// numbers have no between-run noise, so nothing about them is "measured".
fn all_modeled(points: &[SweepPoint]) -> bool {
    let mut records = points.iter().filter_map(|p| p.verify.as_ref()).peekable();
    records.peek().is_some()
        && records.all(|r| r.source == Source::Modeled && r.provenance.backend != "mock")
}

/// The verdict of one replay mode over modeled numbers: no noise to measure, so the setting
/// with the lowest modeled ratio below 1 (minus `margin`) is the one recommended.
fn modeled_verdict(
    t: &[rd::RoundTiming],
    ids: &[String],
    base: &str,
    graph: bool,
    margin: f64,
) -> rd::Verdict {
    let mode = if graph { "graph" } else { "eager" };
    let ratios = rd::paired_ratios(t, ids, base, graph);
    let best = ratios
        .iter()
        .filter(|r| r.ratio < 1.0 - margin)
        .min_by(|a, b| a.ratio.total_cmp(&b.ratio));
    let sentence = match best {
        Some(r) => format!(
            "{mode} replay (modeled): {} is {:.1}% faster than the defaults, modeled ratio {:.3}",
            r.point_id,
            (1.0 - r.ratio) * 100.0,
            r.ratio
        ),
        None if margin > 0.0 => format!(
            "{mode} replay (modeled): no setting the cost model prices is faster than the defaults by more than the --noise-margin of {:.1}%",
            margin * 100.0
        ),
        None => format!(
            "{mode} replay (modeled): no setting the cost model prices is faster than the defaults"
        ),
    };
    rd::Verdict {
        graph,
        noise: None,
        recommended: best.map(|r| r.point_id.clone()),
        ratios,
        sentence,
    }
}

/// The judgement of the rounds: per point the paired ratio to the baseline and its 95%
/// interval (eager and graph), the measured noise floor of each mode, each mode's verdict,
/// a line when the rounds are too few, and the recommendation of the primary mode. Points the
/// cost model could not price are named apart and never judged; over modeled numbers no noise
/// floor is claimed and the lowest modeled ratio below 1 is recommended, labelled modeled.
pub(crate) fn rounds_block(
    points: &[SweepPoint],
    pairs: &[SweepPoint],
    primary_graph: bool,
    rounds: usize,
    margin: f64,
) -> String {
    let timings: Vec<rd::RoundTiming> = pairs.iter().map(sw::round_timing).collect();
    let Some(base) = points.iter().find(|p| p.overrides.is_empty()) else {
        return "No baseline point: nothing to pair with, nothing recommended.\n".into();
    };
    let (unpriced, inert, judged) = sort_for_judgement(points);
    let modeled = all_modeled(points);
    let ids: Vec<String> = judged.iter().map(|p| p.point_id.clone()).collect();
    let verdicts = verdicts(&timings, &ids, &base.point_id, modeled, margin);
    let mut out = if modeled {
        format!("# modeled ratios to the baseline over {rounds} round(s) (the cost model gives the same numbers in every round)\n")
    } else {
        format!("# paired ratios to the baseline over {rounds} round(s) (geometric mean of the per-round ratios, t interval on their logs)\n")
    };
    out.push_str(&text_table(&ratio_table(&judged, base, &verdicts)));
    let not_judged = [
        (unpriced, "the cost model cannot price their settings"),
        (
            inert,
            "they set only variables NCCL does not read, so they ran NCCL's defaults",
        ),
    ];
    for (left_out, why) in not_judged.iter().filter(|(ps, _)| !ps.is_empty()) {
        let ids: Vec<&str> = left_out.iter().map(|p| p.point_id.as_str()).collect();
        out.push_str(&format!("not judged ({why}): {}\n", ids.join(", ")));
    }
    out.push_str(&noise_lines(&verdicts, modeled));
    for v in &verdicts {
        out.push_str(&v.sentence);
        out.push('\n');
        if let Some(line) = rd::rounds_advice(v, rounds) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out.push_str(&recommendation(
        points,
        base,
        &verdicts,
        primary_graph,
        modeled,
        rounds,
    ));
    out
}

type Points<'a> = Vec<&'a SweepPoint>;

/// The points the rounds judge and the ones they leave out: (not priced by the cost model,
/// setting only variables NCCL does not read, judged).
fn sort_for_judgement(points: &[SweepPoint]) -> (Points<'_>, Points<'_>, Points<'_>) {
    let (unpriced, judged): (Points, Points) = points
        .iter()
        .partition(|p| !rank::not_modeled(p).is_empty());
    // A point that sets only variables NCCL does not read ran NCCL's defaults: whatever its
    // timing says, its lead is run-to-run noise, so it is never judged against them.
    let (inert, judged): (Points, Points) = judged.into_iter().partition(|p| {
        !p.overrides.is_empty() && p.overrides.iter().all(|(k, _)| !super::known::is_known(k))
    });
    (unpriced, inert, judged)
}

/// The verdict of each replay mode the baseline ran in (its ratio to itself exists).
fn verdicts(
    timings: &[rd::RoundTiming],
    ids: &[String],
    base: &str,
    modeled: bool,
    margin: f64,
) -> Vec<rd::Verdict> {
    [false, true]
        .into_iter()
        .map(|g| {
            if modeled {
                modeled_verdict(timings, ids, base, g, margin)
            } else {
                rd::judge_with_margin(timings, ids, base, g, margin)
            }
        })
        .filter(|v| {
            v.noise.is_some()
                || !v.ratios.is_empty()
                || rd::paired_ratio(timings, base, base, v.graph).is_some()
        })
        .collect()
}

/// Each judged point but the baseline with its eager and graph ratio, interval and rounds.
fn ratio_table(judged: &[&SweepPoint], base: &SweepPoint, verdicts: &[rd::Verdict]) -> Table {
    let cell = |graph: bool, id: &str| -> String {
        let Some(r) = verdicts
            .iter()
            .find(|v| v.graph == graph)
            .and_then(|v| v.ratios.iter().find(|r| r.point_id == id))
        else {
            return "-".into();
        };
        match r.interval {
            Some((lo, hi)) => format!("{:.3} [{lo:.3}, {hi:.3}] ({})", r.ratio, r.per_round.len()),
            None => format!("{:.3} (1)", r.ratio),
        }
    };
    Table {
        rows: judged
            .iter()
            .filter(|p| p.point_id != base.point_id)
            .map(|p| {
                vec![
                    p.point_id.clone(),
                    cell(false, &p.point_id),
                    cell(true, &p.point_id),
                ]
            })
            .collect(),
        ..Table::new(&[
            "point",
            "eager ratio [95%] (rounds)",
            "graph ratio [95%] (rounds)",
        ])
    }
}

/// The noise floor each mode measured, or why none is claimed.
fn noise_lines(verdicts: &[rd::Verdict], modeled: bool) -> String {
    let mut out = String::new();
    if modeled && !verdicts.is_empty() {
        out.push_str(
            "noise floor: none measured: the numbers are modeled (no between-run noise), so a setting counts when its modeled ratio is below 1\n",
        );
    }
    for v in verdicts {
        let mode = if v.graph { "graph" } else { "eager" };
        if let Some(nf) = &v.noise {
            out.push_str(&format!(
                "noise floor ({mode}): ±{:.1}%, the largest deviation of the baseline's {} rounds from their median {:.1} us\n",
                nf.rel * 100.0,
                nf.rounds,
                nf.baseline_median_us
            ));
        }
        if v.noise.as_ref().is_some_and(|nf| nf.rel == 0.0) {
            out.push_str(&format!(
                "noise floor ({mode}): the baseline's rounds are identical: numbers without between-run noise, so any ratio below 1 passes\n"
            ));
        }
    }
    out
}

/// The recommendation of the primary mode (graph when it ran), its exports and the build
/// line of the winner (the baseline when nothing wins).
fn recommendation(
    points: &[SweepPoint],
    base: &SweepPoint,
    verdicts: &[rd::Verdict],
    primary_graph: bool,
    modeled: bool,
    rounds: usize,
) -> String {
    let primary = verdicts
        .iter()
        .find(|v| v.graph == primary_graph)
        .or(verdicts.first());
    let rec = primary.and_then(|v| {
        let id = v.recommended.as_ref()?;
        Some((v, points.iter().find(|p| &p.point_id == id)?))
    });
    let primary_mode = if primary.map_or(primary_graph, |v| v.graph) {
        "graph"
    } else {
        "eager"
    };
    if let Some(line) = rank::one_rank_recommendation(points.iter(), primary_mode) {
        return line;
    }
    let mut out = String::new();
    match rec {
        Some((v, p)) => {
            let mode = if v.graph { "graph" } else { "eager" };
            if modeled {
                out.push_str(&format!(
                    "Recommendation ({mode} replay, modeled: confirm it on the GPUs with --backend nccl): {}\n",
                    rank::label(p)
                ));
            } else {
                out.push_str(&format!(
                    "Recommendation ({mode} replay, held over {rounds} rounds): {}\n",
                    rank::label(p)
                ));
            }
            out.push_str(&rank::exports(p));
            if p.env_check.status == "mismatch"
                || p.effective
                    .as_ref()
                    .is_some_and(|e| !e.mismatches.is_empty())
            {
                out.push_str(
                    "  WARNING: at this point NCCL or its workers did not do exactly what was asked (see notes).\n",
                );
            }
        }
        None if modeled => out.push_str(&format!(
            "Recommendation: keep NCCL's defaults ({primary_mode} replay): no setting the cost model prices has a modeled ratio below 1\n"
        )),
        None => out.push_str(&format!(
            "Recommendation: keep NCCL's defaults ({primary_mode} replay): no setting's whole interval lies below 1 minus the measured noise floor\n"
        )),
    }
    let winner = rec.map_or(base, |(_, p)| p);
    if let Some(line) = rank::build_line(winner, rec.is_none()) {
        out.push_str(&line);
    }
    out
}

/// The progress line of the `n`-th of `of` pairs run: its time (or why it failed), NCCL's
/// choices or the one-rank proof, the library, and where the child's time went.
pub(crate) fn progress_line(
    n: usize,
    of: usize,
    sp: &SweepPoint,
    split: Option<(Option<f64>, f64)>,
    mode: Mode,
) -> String {
    let (round, id) = (sp.round + 1, &sp.point_id);
    match (&sp.reason, rank::unpriced_note(sp)) {
        (None, Some(note)) => format!(
            "[{n}/{of}] round {round} {id}: ok, {note}; {}",
            time_line(sp, split)
        ),
        (None, None) => {
            let t = rank::rank(std::slice::from_ref(sp), mode);
            let r = &t.rows[0];
            let c = r.graph.as_ref().or(r.eager.as_ref());
            let eff = sp
                .effective
                .as_ref()
                .map(|e| match &e.one_rank {
                    Some(proof) => format!("; {proof}"),
                    None => format!(", NCCL {} via {}", e.algo_proto(), e.transport()),
                })
                .unwrap_or_default()
                + &sp
                    .library
                    .as_ref()
                    .map(|l| format!("; {}", l.describe()))
                    .unwrap_or_default();
            format!(
                "[{n}/{of}] round {round} {id}: ok, {:.1} us per verify ({}){eff}; {}",
                c.map_or(f64::NAN, |c| c.median_us),
                if r.graph.is_some() { "graph" } else { "eager" },
                time_line(sp, split)
            )
        }
        (Some(why), _) => format!("[{n}/{of}] round {round} {id}: FAILED: {why}"),
    }
}

/// Where a pair's child time went, for its progress line.
fn time_line(sp: &SweepPoint, split: Option<(Option<f64>, f64)>) -> String {
    let probe = if sp.probe_wall_s > 0.0 {
        format!("probe {:.1} s, ", sp.probe_wall_s)
    } else {
        String::new()
    };
    match split {
        Some((init, timed)) => format!(
            "{probe}timed child {:.1} s: NCCL init {}, timed loops ~{timed:.2} s, worker start and the rest {:.1} s",
            sp.timed_wall_s,
            init.map_or("n/a".into(), |x| format!("{x:.2} s")),
            (sp.timed_wall_s - init.unwrap_or(0.0) - timed).max(0.0)
        ),
        None => format!("{probe}timed child {:.1} s", sp.timed_wall_s),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::{self, Phase, ScheduleOptions};
    use crate::record::{RecordedWorkload, Source};
    use crate::sweep::runner::PointOutcome;
    use crate::sweep::{matrix, SweepConfig};

    /// The stored points of a sweep of `lists` (the baseline first), none of them run.
    fn points(lists: &[&str]) -> Vec<SweepPoint> {
        let s = model::build(
            &model::presets::preset("kimi-k2.5").unwrap(),
            &ScheduleOptions {
                tp: 2,
                ..Default::default()
            },
            Phase::Verify,
        )
        .unwrap();
        let cfg = SweepConfig {
            seed: 1,
            workload: RecordedWorkload::of(&s),
            graph: "both".into(),
            launcher: "processes".into(),
            backend: "mock".into(),
            mode: "comm".into(),
            parent_env: Default::default(),
            log_dir: "logs".into(),
            probe: false,
            timeout: Duration::from_secs(5),
            source: Source::Modeled,
            libraries: Default::default(),
        };
        let l: Vec<String> = lists.iter().map(|s| s.to_string()).collect();
        matrix::points(&matrix::dimensions(&l, &[]).unwrap(), None)
            .iter()
            .map(|p| sw::assemble(&cfg, p, PointOutcome::default()))
            .collect()
    }

    #[test]
    fn the_progress_line_says_where_the_childs_time_went() {
        let mut sp = points(&[]).remove(0);
        sp.timed_wall_s = 2.0;
        assert_eq!(time_line(&sp, None), "timed child 2.0 s");
        sp.probe_wall_s = 1.5;
        sp.timed_wall_s = 10.0;
        // the rest: 10 - 3 (init) - 4 (timed loops) = 3 s
        assert_eq!(
            time_line(&sp, Some((Some(3.0), 4.0))),
            "probe 1.5 s, timed child 10.0 s: NCCL init 3.00 s, timed loops ~4.00 s, worker start and the rest 3.0 s"
        );
        // no init figure: 10 - 4 = 6 s
        assert_eq!(
            time_line(&sp, Some((None, 4.0))),
            "probe 1.5 s, timed child 10.0 s: NCCL init n/a, timed loops ~4.00 s, worker start and the rest 6.0 s"
        );
        // a rest below zero is shown as zero
        assert!(time_line(&sp, Some((Some(8.0), 4.0))).ends_with("the rest 0.0 s"));
    }

    #[test]
    fn rounds_without_a_baseline_or_timings_recommend_nothing() {
        let pts = points(&["NCCL_PROTO=LL,Simple"]);
        assert_eq!(pts.len(), 3, "the baseline and two settings");
        let settings: Vec<SweepPoint> = pts
            .iter()
            .filter(|p| !p.overrides.is_empty())
            .cloned()
            .collect();
        assert_eq!(
            rounds_block(&settings, &[], false, 1, 0.0),
            "No baseline point: nothing to pair with, nothing recommended.\n"
        );
        let out = rounds_block(&pts, &[], true, 3, 0.0);
        assert!(
            out.starts_with("# paired ratios to the baseline over 3 round(s)"),
            "{out}"
        );
        // one row per setting, no ratio in either mode
        for p in &settings {
            let row = out
                .lines()
                .find(|l| l.split_whitespace().next() == Some(p.point_id.as_str()))
                .unwrap_or_else(|| panic!("a row for {}: {out}", p.point_id));
            assert!(row.split_whitespace().skip(1).all(|c| c == "-"), "{row}");
        }
        assert!(
            out.ends_with("Recommendation: keep NCCL's defaults (graph replay): no setting's whole interval lies below 1 minus the measured noise floor\n"),
            "{out}"
        );
    }

    #[test]
    fn a_one_rank_sweep_recommends_no_setting() {
        // At one rank NCCL chooses nothing: whatever the rounds say, no setting is exported.
        let mut pts = points(&["NCCL_PROTO=LL,Simple"]);
        let before = rounds_block(&pts, &[], true, 3, 0.0);
        assert!(
            before.contains("Recommendation: keep NCCL's defaults"),
            "{before}"
        );
        for p in &mut pts {
            p.effective = Some(crate::sweep::results::Effective {
                one_rank: Some("NCCL ran at 1 rank".into()),
                ..Default::default()
            });
        }
        let out = rounds_block(&pts, &[], true, 3, 0.0);
        assert!(
            out.ends_with("Recommendation: none at one rank (graph replay): NCCL chooses no algorithm, protocol or transport on a communicator of size 1, so no ratio here is a setting's effect; sweep across the real ranks (--gpus N) to choose\n"),
            "{out}"
        );
        assert!(!out.contains("export NCCL_"), "{out}");
    }

    #[test]
    fn a_sweep_whose_points_all_failed_recommends_nothing() {
        let pts = points(&["NCCL_PROTO=LL"]);
        let (text, table) = render(&pts, &pts, Mode::Comm, 1, 0.0);
        assert_eq!(table.rows.len(), 2, "every point has a row");
        assert!(
            text.contains("No point ran without errors: nothing to recommend."),
            "{text}"
        );
        assert!(!text.contains("Recommendation"), "{text}");
    }

    fn timing(point: &str, round: usize, eager: f64, graph: f64) -> rd::RoundTiming {
        rd::RoundTiming {
            key: rd::RoundKey {
                point_id: point.into(),
                round,
            },
            eager_us: Some(eager),
            graph_us: Some(graph),
        }
    }

    #[test]
    fn modeled_numbers_recommend_the_lowest_ratio_below_1_without_a_noise_floor() {
        // One round (a measured sweep would need 2 for a noise floor): base 100 us graph,
        // "a" 97 us (ratio 0.97), "b" 99 us (0.99), "c" 104 us (1.04).
        let t = [
            timing("base", 0, 200.0, 100.0),
            timing("a", 0, 200.0, 97.0),
            timing("b", 0, 198.0, 99.0),
            timing("c", 0, 210.0, 104.0),
        ];
        let ids: Vec<String> = ["base", "a", "b", "c"].map(String::from).to_vec();
        let g = modeled_verdict(&t, &ids, "base", true, 0.0);
        assert_eq!(g.noise, None);
        assert_eq!(g.ratios.len(), 3, "every point but the baseline");
        assert_eq!(g.recommended.as_deref(), Some("a"));
        assert_eq!(
            g.sentence,
            "graph replay (modeled): a is 3.0% faster than the defaults, modeled ratio 0.970"
        );
        // A margin of 2%: the bar is 0.98; "a" (0.97) still passes.
        let m = modeled_verdict(&t, &ids, "base", true, 0.02);
        assert_eq!(m.recommended.as_deref(), Some("a"));
        // A margin of 5%: the bar is 0.95, nothing passes.
        let m = modeled_verdict(&t, &ids, "base", true, 0.05);
        assert_eq!(m.recommended, None);
        assert!(
            m.sentence
                .ends_with("by more than the --noise-margin of 5.0%"),
            "{}",
            m.sentence
        );
        // Eager: "b" is 198 / 200 = 0.99, the only ratio below 1.
        let e = modeled_verdict(&t, &ids, "base", false, 0.0);
        assert_eq!(e.recommended.as_deref(), Some("b"));
        assert!(e.sentence.contains("b is 1.0% faster"), "{}", e.sentence);
    }
}
