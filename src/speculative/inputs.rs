//! The inputs of a break-even, each labelled with where it came from: a flag (given), a
//! results file or trace (measured or modeled, with the file name, as [`crate::evidence`]
//! read it), or a default.

use serde::Serialize;

use crate::error::usage;
use crate::evidence::records::RecordTime;
use crate::evidence::{Labelled, Origin};
use crate::model::Phase;

/// How acceptance was given.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Acceptance {
    /// Mean accept length tau (bonus token included).
    Length(f64),
    /// Conditional per-position acceptance rates, one per draft step (r_i: token i accepted
    /// given tokens 1..i-1 were).
    Rates(Vec<f64>),
    /// Per-position acceptance rates as fractions of all drafts, as vLLM prints them
    /// (vllm/v1/spec_decode/metrics.py: accepted count at position i / number of drafts), one
    /// per draft step; the accept length is 1 + their sum.
    DraftFractions(Vec<f64>),
    /// One constant acceptance rate.
    Rate(f64),
}

impl Acceptance {
    /// The draft positions that per-position rates give (one rate per draft step).
    pub(crate) fn positions(&self) -> Option<u64> {
        match self {
            Acceptance::Rates(r) | Acceptance::DraftFractions(r) => Some(r.len() as u64),
            _ => None,
        }
    }

    /// The acceptance flag given, first of `--accept-length`, `--accept-rates`,
    /// `--accept-rates-of-drafts` and `--accept-rate` (the parser lets one through).
    pub(crate) fn from_flags(
        length: Option<f64>,
        rates: Option<&Vec<f64>>,
        rates_of_drafts: Option<&Vec<f64>>,
        rate: Option<f64>,
    ) -> Option<Acceptance> {
        if let Some(t) = length {
            Some(Acceptance::Length(t))
        } else if let Some(r) = rates {
            Some(Acceptance::Rates(r.clone()))
        } else if let Some(r) = rates_of_drafts {
            Some(Acceptance::DraftFractions(r.clone()))
        } else {
            rate.map(Acceptance::Rate)
        }
    }
}

/// The flags of a break-even, before validation (every field optional).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Flags {
    pub(crate) decode_ms: Option<f64>,
    pub(crate) verify_ms: Vec<f64>,
    pub(crate) draft_ms: Option<f64>,
    pub(crate) draft_steps: Option<u64>,
    pub(crate) overhead_ms: Option<f64>,
    pub(crate) acceptance: Option<Acceptance>,
    /// Accept lengths of the table's columns (empty: the default 1.5..4.0 capped at k + 1).
    pub(crate) table_accept_lengths: Vec<f64>,
    /// A mean accept length measured elsewhere (`--accept-from-log`), used when `acceptance`
    /// is absent.
    pub(crate) measured_accept_length: Option<Labelled>,
    /// The draft steps k that log says the server ran, with where it says it: used when
    /// neither `--draft-steps` nor per-position rates give k.
    pub(crate) measured_draft_steps: Option<(u64, Origin)>,
    /// The flag and file it was read from, as its refusal names them (`--server-log
    /// 'server.log'`).
    pub(crate) measured_from: String,
}

impl Flags {
    /// Checks every flag that was given, whether or not a break-even is drawn from it (`report`
    /// draws one only when its inputs are complete; a value out of range is refused all the same,
    /// exit 2, before any file is written): the times as [`times`] checks them, then the draft
    /// steps.
    pub(crate) fn check_given(&self) -> anyhow::Result<Times<Option<Labelled>>> {
        let t = times(self, &[], false)?;
        if let Some(k) = self
            .draft_steps
            .filter(|&k| k == 0 || k > super::MAX_DRAFT_STEPS)
        {
            return Err(usage(format!(
                "--draft-steps {k}: the number of draft tokens per cycle; give 1 to {}",
                super::MAX_DRAFT_STEPS
            )));
        }
        Ok(t)
    }
}

/// What a command asks of the decode time, at its call site: [`Labelled`] where it needs one
/// (a break-even compares against plain decoding), `Option<Labelled>` where it does without
/// (`explain`: no baseline, so no tokens/s).
pub(crate) trait Decode: Sized + Serialize {
    /// The decode time of the flag or the one record, if any.
    fn need(found: Option<Labelled>) -> anyhow::Result<Self>;
}

impl Decode for Labelled {
    fn need(found: Option<Labelled>) -> anyhow::Result<Labelled> {
        found.ok_or_else(|| usage(
            "no decode time: give --decode-ms (one plain decode step, ms) or a results file with a decode record (--phase decode)",
        ))
    }
}

impl Decode for Option<Labelled> {
    fn need(found: Option<Labelled>) -> anyhow::Result<Option<Labelled>> {
        Ok(found)
    }
}

/// Validated, labelled inputs of a break-even; `D` is what the command asked of the decode
/// ([`Decode`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Inputs<D = Labelled> {
    pub(crate) decode_ms: D,
    pub(crate) verify_ms: Vec<Labelled>,
    pub(crate) draft_ms: Labelled,
    /// Draft steps k (the verify forward covers k + 1 tokens).
    pub(crate) draft_steps: u64,
    pub(crate) draft_steps_origin: Origin,
    pub(crate) overhead_ms: Labelled,
    /// Mean accept length tau, when acceptance was given.
    pub(crate) accept_length: Option<Labelled>,
    /// Accept lengths of the table's columns.
    pub(crate) table_accept_lengths: Vec<f64>,
    /// Things the reader should know (flags that override records, mismatched token counts).
    pub(crate) notes: Vec<String>,
}

/// The times of a cycle, checked ([`times`]): the first half of [`resolve`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Times<D> {
    pub(crate) decode_ms: D,
    pub(crate) draft_ms: Labelled,
    pub(crate) overhead_ms: Labelled,
    pub(crate) verify_ms: Vec<Labelled>,
    pub(crate) notes: Vec<String>,
}

/// A time from its flag, which wins over the records (said in a note), else from the one
/// record of its forward.
fn flag_or_record(
    (what, flag, positive): (&str, &str, bool),
    given: Option<f64>,
    times: &[&RecordTime],
    notes: &mut Vec<String>,
) -> anyhow::Result<Option<Labelled>> {
    if let Some(v) = given {
        if !times.is_empty() {
            notes.push(format!(
                "{flag} overrides the {what} record(s) of the results files"
            ));
        }
        return Ok(Some(Labelled::given(
            super::check_time(flag, v, positive)?,
            flag,
        )));
    }
    match times {
        [] => Ok(None),
        [t] if t.ms.origin.bound => Err(usage(format!(
            "the {what} time is only a part of the forward ({}): a lower bound of the {what} time would overstate what speculation gains; give {flag}, or a {what} record of a full run (`verify --mode full`)",
            t.ms.origin
        ))),
        [t] => Ok(Some(t.ms.clone())),
        _ => Err(usage(format!(
            "the results files hold {} {what} records; keep one, or give {flag}",
            times.len()
        ))),
    }
}

/// The records of one phase.
fn of(records: &[RecordTime], p: Phase) -> Vec<&RecordTime> {
    records.iter().filter(|t| t.phase == p).collect()
}

/// Validates the flags and merges them with the times read from records. Flags win over
/// records for decode, draft and steps; verify times from flags and records are all kept
/// (flags first). `need_verify`: at least one verify time is required. `D`: whether the
/// command needs the decode time ([`Decode`]).
pub(crate) fn resolve<D: Decode>(
    flags: &Flags,
    records: &[RecordTime],
    need_verify: bool,
) -> anyhow::Result<Inputs<D>> {
    let t = times(flags, records, need_verify)?;
    complete(flags, records, t)
}

/// The first half of [`resolve`]: decode, draft, overhead and verify times, each checked once.
pub(crate) fn times<D: Decode>(
    flags: &Flags,
    records: &[RecordTime],
    need_verify: bool,
) -> anyhow::Result<Times<D>> {
    use super::check_time;
    let mut notes = vec![];
    let decode = ("decode", "--decode-ms", true);
    let found = flag_or_record(
        decode,
        flags.decode_ms,
        &of(records, Phase::Decode),
        &mut notes,
    )?;
    let decode_ms = D::need(found.clone())?;
    if let (Some(d), None) = (&found, flags.decode_ms) {
        check_time("the decode record's time", d.value, true)?;
    }

    let draft = ("draft", "--draft-ms", false);
    let draft_ms = match flag_or_record(
        draft,
        flags.draft_ms,
        &of(records, Phase::Draft),
        &mut notes,
    )? {
        Some(l) => l,
        None => {
            notes.push("no --draft-ms: drafting is taken as free (0 ms)".into());
            Labelled::default(0.0)
        }
    };

    let overhead = ("overhead", "--overhead-ms", false);
    let overhead_ms = flag_or_record(overhead, flags.overhead_ms, &[], &mut notes)?
        .unwrap_or(Labelled::default(0.0));

    let mut verify_ms = vec![];
    for &v in &flags.verify_ms {
        verify_ms.push(Labelled::given(
            check_time("--verify-ms", v, true)?,
            "--verify-ms",
        ));
    }
    for t in of(records, Phase::Verify) {
        check_time("the verify record's time", t.ms.value, true)?;
        if t.ms.origin.bound {
            notes.push(format!(
                "T_verify {:.2} ms is a lower bound (see its origin): the verify's other part is missing, so its tau* is a lower bound and its tokens/s and speedups upper bounds, not a speedup to expect; give a full run (`verify --mode full`) or --verify-ms for the whole verify",
                t.ms.value
            ));
        }
        verify_ms.push(t.ms.clone());
    }
    if need_verify && verify_ms.is_empty() {
        return Err(usage(
            "no verify time: give --verify-ms (one or more, ms) or --from a results file with a verify record",
        ));
    }
    Ok(Times {
        decode_ms,
        draft_ms,
        overhead_ms,
        verify_ms,
        notes,
    })
}

/// The second half of [`resolve`]: the draft steps, the acceptance and the table's accept
/// lengths, beside the checked times `t`.
pub(crate) fn complete<D: Decode>(
    flags: &Flags,
    records: &[RecordTime],
    t: Times<D>,
) -> anyhow::Result<Inputs<D>> {
    let mut notes = t.notes;
    let rec_verify = of(records, Phase::Verify);
    let (draft_steps, draft_steps_origin) = draft_steps(flags, &rec_verify)?;
    for r in &rec_verify {
        // tokens 0: unknown (a trace's step does not say how many tokens it verified)
        if r.tokens != 0 && r.tokens != draft_steps + 1 {
            notes.push(format!(
                "a verify record covers T={} tokens but k={draft_steps} draft steps verify {}",
                r.tokens,
                draft_steps + 1
            ));
        }
    }
    if let Some(n) = flags.acceptance.as_ref().and_then(Acceptance::positions) {
        if n != draft_steps {
            return Err(usage(format!(
                "--accept-rates has {n} rate(s) but --draft-steps is {draft_steps}: give one rate per draft step"
            )));
        }
    }
    let accept_length = accept_length(flags, draft_steps)?;
    let table_accept_lengths = if flags.table_accept_lengths.is_empty() {
        super::default_accept_lengths(draft_steps)
    } else {
        for &a in &flags.table_accept_lengths {
            super::check_accept_length("--table-accept-lengths", a, draft_steps)?;
        }
        flags.table_accept_lengths.clone()
    };
    Ok(Inputs {
        decode_ms: t.decode_ms,
        verify_ms: t.verify_ms,
        draft_ms: t.draft_ms,
        draft_steps,
        draft_steps_origin,
        overhead_ms: t.overhead_ms,
        accept_length,
        table_accept_lengths,
        notes,
    })
}

/// Draft steps k: the flag, else the number of per-position rates, else the server log's
/// (`--accept-from-log`), else T - 1 of the first verify record; 1 to
/// [`super::MAX_DRAFT_STEPS`].
fn draft_steps(flags: &Flags, rec_verify: &[&RecordTime]) -> anyhow::Result<(u64, Origin)> {
    let rates_len = flags.acceptance.as_ref().and_then(Acceptance::positions);
    let logged = flags.measured_draft_steps.clone();
    let (k, origin) = match (flags.draft_steps, rates_len, logged) {
        (Some(k), _, _) => (k, Origin::given("--draft-steps")),
        (None, Some(n), _) => (n, Origin::derived("the number of per-position rates given")),
        (None, None, Some(logged)) => logged,
        (None, None, None) => match rec_verify.first() {
            Some(t) if t.tokens >= 2 => (
                t.tokens - 1,
                Origin::derived(format!("T={} of the verify record", t.tokens)),
            ),
            _ => return Err(usage(
                "no draft step count: give --draft-steps (k; the verify forward covers k+1 tokens)",
            )),
        },
    };
    if k == 0 {
        return Err(usage(
            "--draft-steps 0: speculation needs at least one draft step",
        ));
    }
    if k > super::MAX_DRAFT_STEPS {
        return Err(usage(format!(
            "--draft-steps {k}: give 1 to {} draft steps per cycle",
            super::MAX_DRAFT_STEPS
        )));
    }
    Ok((k, origin))
}

/// The mean accept length of the acceptance given (else of `measured_accept_length`), each
/// form checked for `k` draft steps.
fn accept_length(flags: &Flags, k: u64) -> anyhow::Result<Option<Labelled>> {
    use super::{check_accept_length, check_rate};
    let list = |rs: &[f64]| {
        rs.iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    Ok(match &flags.acceptance {
        None => match &flags.measured_accept_length {
            Some(l) => {
                let name = match flags.measured_from.as_str() {
                    "" => "the measured accept length".to_string(),
                    from => format!("{from} gives an accept length of"),
                };
                check_accept_length(&name, l.value, k)?;
                Some(l.clone())
            }
            None => None,
        },
        Some(Acceptance::Length(t)) => Some(Labelled::given(
            check_accept_length("--accept-length", *t, k)?,
            "--accept-length",
        )),
        Some(Acceptance::Rates(rs)) => {
            rs.iter()
                .try_for_each(|&r| check_rate("--accept-rates", r).map(drop))?;
            Some(Labelled {
                value: super::expected_tokens_rates(rs),
                origin: Origin::derived(format!(
                    "--accept-rates {} (conditional rates: 1 + r1 + r1 r2 + ...)",
                    list(rs)
                )),
            })
        }
        Some(Acceptance::DraftFractions(rs)) => {
            rs.iter()
                .try_for_each(|&r| check_rate("--accept-rates-of-drafts", r).map(drop))?;
            if let Some(i) = (1..rs.len()).find(|&i| rs[i] > rs[i - 1] + 1e-12) {
                return Err(usage(format!(
                    "--accept-rates-of-drafts: position {} ({}) is above position {} ({}), but a draft whose token {} was accepted had token {} accepted too, so fractions of all drafts never rise; if these are conditional rates (each given the previous accepted), give them to --accept-rates",
                    i + 1,
                    crate::util::fmt_number(rs[i]),
                    i,
                    crate::util::fmt_number(rs[i - 1]),
                    i + 1,
                    i
                )));
            }
            Some(Labelled {
                value: 1.0 + rs.iter().sum::<f64>(),
                origin: Origin::derived(format!(
                    "--accept-rates-of-drafts {} (fractions of all drafts, as vLLM prints them: 1 + their sum)",
                    list(rs)
                )),
            })
        }
        Some(Acceptance::Rate(a)) => Some(Labelled {
            value: super::expected_tokens_const_rate(check_rate("--accept-rate", *a)?, k),
            origin: Origin::derived(format!("--accept-rate {a}, k={k}")),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::Source;
    use crate::record::Mode;

    fn rt(phase: Phase, ms: f64, tokens: u64, modeled: bool) -> RecordTime {
        let source = [Source::Measured, Source::Modeled][modeled as usize];
        let origin = Origin::read(source, "r.json".into(), "x".into());
        let ms = Labelled { value: ms, origin };
        RecordTime {
            phase,
            ms,
            tokens,
            mode: Mode::Full,
            model_tp: None,
        }
    }

    /// [`super::resolve`] as a break-even asks it: the decode needed.
    fn resolve(f: &Flags, records: &[RecordTime], need_verify: bool) -> anyhow::Result<Inputs> {
        super::resolve(f, records, need_verify)
    }

    fn flags() -> Flags {
        Flags {
            decode_ms: Some(12.2),
            verify_ms: vec![19.0],
            draft_steps: Some(3),
            ..Default::default()
        }
    }

    #[test]
    fn flags_alone() {
        let i = resolve(&flags(), &[], true).unwrap();
        assert_eq!(i.decode_ms, Labelled::given(12.2, "--decode-ms"));
        assert_eq!(i.draft_ms, Labelled::default(0.0));
        assert_eq!(i.draft_steps, 3);
        assert_eq!(i.table_accept_lengths, vec![1.5, 2.0, 2.5, 3.0, 3.5, 4.0]);
        assert!(i.accept_length.is_none());
    }

    #[test]
    fn records_fill_what_flags_leave_out() {
        let f = Flags {
            decode_ms: None,
            verify_ms: vec![],
            draft_steps: None,
            ..Default::default()
        };
        let recs = [
            rt(Phase::Verify, 18.0, 4, false),
            rt(Phase::Decode, 12.0, 1, true),
            rt(Phase::Draft, 1.2, 1, false),
        ];
        let i = resolve(&f, &recs, true).unwrap();
        assert_eq!(i.decode_ms.value, 12.0);
        assert!(i.decode_ms.origin.is_modeled());
        assert_eq!(i.draft_ms.value, 1.2);
        assert_eq!(i.verify_ms.len(), 1);
        assert_eq!(i.draft_steps, 3);
        assert_eq!(i.draft_steps_origin.kind(), "derived");
    }

    #[test]
    fn acceptance_forms() {
        let mut f = flags();
        f.acceptance = Some(Acceptance::Rate(0.0));
        assert_eq!(
            resolve(&f, &[], true).unwrap().accept_length.unwrap().value,
            1.0
        );
        f.acceptance = Some(Acceptance::Rate(1.0));
        assert_eq!(
            resolve(&f, &[], true).unwrap().accept_length.unwrap().value,
            4.0
        );
        f.acceptance = Some(Acceptance::Rates(vec![0.8, 0.6, 0.45]));
        let t = resolve(&f, &[], true).unwrap().accept_length.unwrap().value;
        assert!((t - 2.496).abs() < 1e-12);
        f.draft_steps = None;
        assert_eq!(resolve(&f, &[], true).unwrap().draft_steps, 3);
    }

    #[test]
    fn bad_inputs_are_usage_errors() {
        let code = |f: Flags| crate::error::exit_code(&resolve(&f, &[], true).unwrap_err());
        let mut f = flags();
        f.acceptance = Some(Acceptance::Rate(1.5));
        assert_eq!(code(f), 2);
        let mut f = flags();
        f.acceptance = Some(Acceptance::Rates(vec![0.8, -0.1, 0.5]));
        assert_eq!(code(f), 2);
        let mut f = flags();
        f.acceptance = Some(Acceptance::Rates(vec![0.8, 0.6]));
        assert_eq!(code(f), 2);
        let mut f = flags();
        f.acceptance = Some(Acceptance::Length(4.5));
        assert_eq!(code(f), 2);
        let mut f = flags();
        f.acceptance = Some(Acceptance::Length(0.5));
        assert_eq!(code(f), 2);
        let mut f = flags();
        f.decode_ms = Some(0.0);
        assert_eq!(code(f), 2);
        let mut f = flags();
        f.verify_ms = vec![19.0, -1.0];
        assert_eq!(code(f), 2);
        let mut f = flags();
        f.verify_ms = vec![];
        assert_eq!(code(f), 2);
        let mut f = flags();
        f.decode_ms = None;
        assert_eq!(code(f), 2);
        let mut f = flags();
        f.draft_steps = Some(0);
        assert_eq!(code(f), 2);
        let mut f = flags();
        f.table_accept_lengths = vec![2.0, 5.0];
        assert_eq!(code(f), 2);
    }

    #[test]
    fn two_decode_records_without_a_flag_are_refused() {
        let mut f = flags();
        f.decode_ms = None;
        let recs = [
            rt(Phase::Decode, 12.0, 1, false),
            rt(Phase::Decode, 13.0, 1, false),
        ];
        let e = resolve(&f, &recs, true).unwrap_err();
        assert!(e.to_string().contains("--decode-ms"));
    }

    #[test]
    fn fractions_of_drafts_add_conditional_rates_multiply() {
        // A published Kimi-K2.6 run's vLLM rates 0.645, 0.393, 0.240 (issue 28):
        // as fractions of all drafts 1 + 0.645 + 0.393 + 0.240 = 2.278;
        // read as conditional rates 1 + 0.645 + 0.253485 + 0.0608364 = 1.9593214
        let mut f = flags();
        f.draft_steps = None;
        f.acceptance = Some(Acceptance::DraftFractions(vec![0.645, 0.393, 0.240]));
        let i = resolve(&f, &[], true).unwrap();
        assert!((i.accept_length.as_ref().unwrap().value - 2.278).abs() < 1e-12);
        assert!(i
            .accept_length
            .as_ref()
            .unwrap()
            .origin
            .to_string()
            .contains("fractions of all drafts"));
        f.acceptance = Some(Acceptance::Rates(vec![0.645, 0.393, 0.240]));
        let i = resolve(&f, &[], true).unwrap();
        let cond = 1.0 + 0.645 + 0.645 * 0.393 + 0.645 * 0.393 * 0.240;
        assert!((i.accept_length.as_ref().unwrap().value - cond).abs() < 1e-12);
        // fractions of all drafts never rise from one position to the next
        f.acceptance = Some(Acceptance::DraftFractions(vec![0.5, 0.6]));
        let e = resolve(&f, &[], true).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("give them to --accept-rates"), "{e}");
    }

    /// A collectives-only record time (as `times_of` labels a `--mode comm` run).
    fn bound(phase: Phase, ms: f64, tokens: u64) -> RecordTime {
        let origin = Origin::read(Source::Modeled, "c.json".into(), "x".into());
        let origin = Origin {
            bound: true,
            ..origin
        };
        let ms = Labelled { value: ms, origin };
        RecordTime {
            phase,
            ms,
            tokens,
            mode: Mode::Comm,
            model_tp: None,
        }
    }

    #[test]
    fn a_part_of_the_verify_is_a_bound_and_a_part_of_the_decode_is_refused() {
        let o = bound(Phase::Verify, 3.0, 4).ms.origin;
        assert!(o.bound && o.is_modeled());
        assert_eq!(o.kind(), "bound");
        assert_eq!(o.to_string(), "lower bound, modeled (c.json: x)");
        // the verify: kept, with a note saying it is a lower bound
        let f = Flags {
            verify_ms: vec![],
            acceptance: Some(Acceptance::Length(2.5)),
            ..flags()
        };
        let i = resolve(&f, &[bound(Phase::Verify, 3.0, 4)], true).unwrap();
        assert_eq!(i.verify_ms.len(), 1);
        assert!(i
            .notes
            .iter()
            .any(|n| n.starts_with("T_verify 3.00 ms is a lower bound")));
        // its row: 3 ms is below the decode step of 12.2 ms, so the row is held at 12.2 ms
        // (a verify is never faster than a decode step): tau* = 12.2 / 12.2 = 1 (a lower
        // bound); at tau 2.5 the cycle of 12.2 ms gives 2.5 / 12.2 ms = 204.9 tok/s, above
        // 1000 / 12.2 = 82.0, yet no gain is claimed
        let a = crate::speculative::analysis::analyse(i);
        let r = &a.rows[0];
        assert!(r.bound && r.at_floor);
        assert!((r.breakeven_accept_length - 1.0).abs() < 1e-12);
        let p = r.at_accept_length.as_ref().unwrap();
        assert!((p.tokens_per_s - 2.5 / 12.2 * 1000.0).abs() < 1e-9);
        assert!(!p.beats_baseline);
        assert!(r.grid.iter().all(|p| !p.beats_baseline));
        // the decode: refused, the flag to give named
        let f = Flags {
            decode_ms: None,
            ..flags()
        };
        let e = resolve(&f, &[bound(Phase::Decode, 5.0, 1)], true).unwrap_err();
        let m = e.to_string();
        assert!(
            m.starts_with(
                "the decode time is only a part of the forward (lower bound, modeled (c.json: x))"
            ),
            "{m}"
        );
        assert!(m.contains("give --decode-ms"), "{m}");
    }
}
