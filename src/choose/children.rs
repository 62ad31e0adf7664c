//! The measured points: each runs as fresh child processes of this binary, `verifybench
//! collective --backend nccl` over all sizes of its collective, eager and CUDA graph, with the
//! P2P kernels beside NCCL's default on the all-reduces (`--impl nccl,oneshot,twoshot`),
//! through the sweep's runner ([`crate::sweep::runner::SubprocessRunner`]): each child's
//! environment is the parent's plus the point's NCCL variables, set after clearing (many are
//! read once per process). In the first round a short probe run with NCCL's INFO log goes
//! first: it checks every implementation's results exactly (a wrong element fails the child,
//! and the point is not timed) and its log says which algorithm and protocol NCCL chose for
//! each size. Every timed run checks its results again.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::measure::{samples_of, Measure, Point, PointRun};
use crate::model::CollectiveKind;
use crate::record::Source;
use crate::request::{BackendKind, GpuSpec, Repeat};
use crate::sweep::env::{probe_env, timed_env, Env};
use crate::sweep::ncclog::{algo_name, proto_name, NcclLog};
use crate::sweep::runner::{PointJob, PointRunner, Probe, SubprocessRunner};

/// Points run as `verifybench collective` children.
pub(crate) struct ChildMeasure {
    pub(crate) exe: PathBuf,
    /// `nccl`; `model` where a test runs the same pipeline on the cost model.
    pub(crate) backend: BackendKind,
    pub(crate) nranks: usize,
    pub(crate) gpu: GpuSpec,
    pub(crate) repeat: Repeat,
    pub(crate) parent_env: Env,
    /// Where the children's records and NCCL logs go (a scratch folder).
    pub(crate) work_dir: PathBuf,
    pub(crate) timeout: Duration,
}

impl ChildMeasure {
    /// The child's command line but the run flags (`-n`, `-w`, `--export-json`, `--quiet`),
    /// which the runner adds.
    pub(crate) fn args(&self, p: &Point) -> Vec<String> {
        let sizes: Vec<String> = p.sizes.iter().map(|s| s.to_string()).collect();
        let mut a: Vec<String> = [
            "collective",
            "--op",
            p.op.name(),
            "-b",
            &sizes[0],
            "-e",
            &sizes[0],
            "--sizes",
            &sizes.join(","),
            "-d",
            p.dtype.name(),
            "--graph",
            "both",
            "--backend",
            self.backend.name(),
            "--launcher",
            self.gpu.launcher.name(),
            "--impl",
            if p.p2p {
                "nccl,oneshot,twoshot"
            } else {
                "nccl"
            },
        ]
        .map(String::from)
        .to_vec();
        match &self.gpu.devices {
            Some(d) => {
                let list: Vec<String> = d.iter().map(|x| x.to_string()).collect();
                a.extend(["--devices".into(), list.join(",")]);
            }
            None => a.extend(["--gpus".into(), self.nranks.to_string()]),
        }
        a.extend(["--timeout".into(), self.gpu.timeout.to_string()]);
        a.extend(["--cpu-affinity".into(), self.gpu.cpu_affinity.arg()]);
        a.extend(["--rank-time".into(), self.repeat.rank_time.name().into()]);
        if let Some(l) = &self.gpu.nccl_lib {
            a.extend(["--nccl-lib".into(), l.display().to_string()]);
        }
        a
    }
}

impl Measure for ChildMeasure {
    fn source(&self) -> Source {
        match self.backend {
            BackendKind::Nccl => Source::Measured,
            _ => Source::Modeled,
        }
    }

    fn run(&self, p: &Point, round: usize) -> anyhow::Result<PointRun> {
        let point = crate::sweep::matrix::Point {
            id: p.id.clone(),
            overrides: p.overrides.clone(),
        };
        let timed = timed_env(&self.parent_env, &point);
        let log_dir = self.work_dir.join("logs");
        let probe = (round == 0).then(|| Probe {
            env: probe_env(&timed, &log_dir.join(format!("{}.%h.%p.log", p.id))),
            log_dir: log_dir.clone(),
        });
        let runner = SubprocessRunner {
            exe: self.exe.clone(),
            verify_args: self.args(p),
            iters: self.repeat.iters,
            warmup: self.repeat.warmup,
            work_dir: self.work_dir.join("runs"),
            extra_args: vec![],
            extra_when: None,
            interrupted: &crate::sweep::signal::INTERRUPTED,
        };
        let out = runner.run(&PointJob {
            point,
            round,
            env: timed,
            probe,
            timeout: self.timeout,
        })?;
        if out.interrupted {
            anyhow::bail!("interrupted while {} ran (round {})", p.id, round + 1);
        }
        let mut run = PointRun::default();
        if !out.probe_logs.is_empty() {
            let log = NcclLog::parse_files(&out.probe_logs).unwrap_or_default();
            run.nccl_used = nccl_used(&log, p, self.nranks);
        }
        if let Some(f) = out.failure {
            let tail = out.stderr_tail.lines().last().unwrap_or("").to_string();
            run.failure = Some(if tail.is_empty() || f.contains(&tail) {
                f
            } else {
                format!("{f} ({tail})")
            });
            return Ok(run);
        }
        if let Some(rec) = out.record {
            run.samples = samples_of(&rec, p);
            run.notes = rec.provenance.notes.clone();
            run.provenance = Some(rec.provenance);
        }
        Ok(run)
    }
}

/// What NCCL's log says it chose for each size of `p`, in both launch modes (the log does not
/// tell eager from graph: the choice depends on the size only). An all-gather's log line may
/// count its output or one rank's part; both are matched.
fn nccl_used(
    log: &NcclLog,
    p: &Point,
    nranks: usize,
) -> BTreeMap<(String, CollectiveKind, u64, bool), String> {
    let func = match p.op {
        CollectiveKind::AllReduce => "AllReduce",
        _ => "AllGather",
    };
    let mut out = BTreeMap::new();
    for &size in &p.sizes {
        let hit = log.choices.iter().find(|c| {
            c.func.as_deref().is_none_or(|f| f == func)
                && (c.bytes == size || c.bytes * nranks as u64 == size)
        });
        if let Some(c) = hit {
            let label = format!(
                "{}/{}",
                pretty(&algo_name(&c.algo)),
                pretty(&proto_name(&c.proto))
            );
            for graph in [false, true] {
                out.insert((p.candidate.clone(), p.op, size, graph), label.clone());
            }
        }
    }
    out
}

/// `RING` as NCCL's variables spell it (`Ring`); LL and LL128 stay as they are.
fn pretty(upper: &str) -> String {
    match upper {
        "RING" => "Ring".into(),
        "TREE" => "Tree".into(),
        "SIMPLE" => "Simple".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DType;

    fn point(op: CollectiveKind, p2p: bool) -> Point {
        Point {
            id: "all_reduce-nccl".into(),
            op,
            candidate: "nccl".into(),
            overrides: vec![],
            p2p,
            sizes: vec![14_336, 57_344],
            dtype: DType::Bf16,
        }
    }

    fn measure() -> ChildMeasure {
        ChildMeasure {
            exe: "verifybench".into(),
            backend: BackendKind::Nccl,
            nranks: 2,
            gpu: GpuSpec::default(),
            repeat: Repeat::default(),
            parent_env: Env::new(),
            work_dir: "w".into(),
            timeout: Duration::from_secs(60),
        }
    }

    #[test]
    fn a_child_runs_every_size_of_its_collective_with_the_kernels_beside_the_default() {
        let a = measure().args(&point(CollectiveKind::AllReduce, true));
        let s = a.join(" ");
        assert!(
            s.starts_with("collective --op all_reduce -b 14336 -e 14336 --sizes 14336,57344 -d bf16 --graph both --backend nccl --launcher processes --impl nccl,oneshot,twoshot --gpus 2"),
            "{s}"
        );
        let g = measure()
            .args(&point(CollectiveKind::AllGather, false))
            .join(" ");
        assert!(
            g.contains("--op all_gather") && g.contains("--impl nccl "),
            "{g}"
        );
    }

    #[test]
    fn the_probe_log_names_what_nccl_chose_per_size() {
        // NCCL 2.28's TUNING lines, as in tests/data/nccl-2.28.3-h200x2-procs-default.log, at
        // the first size of the point and at one that is not among its sizes.
        let log = NcclLog::parse(
            "vm:573:573 [0] NCCL INFO AllReduce: 14336 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..4}\n\
             vm:573:573 [0] NCCL INFO AllReduce: 2 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..0}\n",
        );
        let used = nccl_used(&log, &point(CollectiveKind::AllReduce, true), 2);
        let key = |size, graph| ("nccl".to_string(), CollectiveKind::AllReduce, size, graph);
        assert_eq!(used.get(&key(14_336, true)), Some(&"Ring/LL".to_string()));
        assert_eq!(used.get(&key(14_336, false)), Some(&"Ring/LL".to_string()));
        assert_eq!(used.len(), 2, "{used:?}");
    }
}
