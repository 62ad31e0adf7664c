//! A reader of the text nccl-tests prints (`all_reduce_perf`, `all_gather_perf`, ... of
//! NVIDIA/nccl-tests, `src/util.cu`), for `compare --nccl-tests` and `model fit --nccl-tests`.
//!
//! The layout, as nccl-tests 2.19's `util.cu` writes it:
//! - `# Collective test starting: all_reduce_perf` (the binary; older versions print none);
//! - `# nThread 1 nGpus 2 minBytes 8192 maxBytes 1048576 step: 2(factor) warmup iters: 1 iters:
//!   20 agg iters: 1 validation: 1 graph: 20 unalign: 0` (versions before `-G` end at
//!   `validation: 1`: those ran eager only);
//! - one `#  Rank  0 Group  0 Pid 12345 on host device  0 [0000:18:00] NVIDIA H200` line per
//!   rank (`PRINT("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n")`);
//! - one row per size: `size count type redop root` and two groups `time algbw busbw #wrong`,
//!   out of place then in place (`#wrong` is `N/A` without `-c 1`); nccl-tests before 2.10 wrote
//!   no `root` column and an `error` (a float) instead of `#wrong`: 12 columns instead of 13.
//!
//! Times are microseconds per operation, the mean over the timed iterations (`-n`). With `-G N`
//! (N >= 1) every timed operation is a CUDA-graph replay: one run gives one launch mode.

use serde::Serialize;

/// One size row of nccl-tests' table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct NcclTestsRow {
    pub(crate) size_bytes: u64,
    pub(crate) count: u64,
    pub(crate) dtype: String,
    pub(crate) redop: String,
    /// Out-of-place time per operation, us (mean over the iterations).
    pub(crate) oop_us: f64,
    pub(crate) oop_busbw_gbps: f64,
    /// `None` when nccl-tests did not check (`N/A`).
    pub(crate) oop_wrong: Option<f64>,
    pub(crate) ip_us: f64,
    pub(crate) ip_busbw_gbps: f64,
    pub(crate) ip_wrong: Option<f64>,
}

/// One run of an nccl-tests binary (or several of one launch mode, as [`parse`] merges them).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct NcclTestsRun {
    /// `graph:` of the header: CUDA-graph launches per timed step; 0 = eager launches (also
    /// when the header has no `graph:`, as before nccl-tests had `-G`).
    pub(crate) graph_launches: u32,
    /// `nGpus` of the header (per thread/process).
    pub(crate) ngpus: Option<usize>,
    /// `nThread` of the header.
    pub(crate) nthreads: Option<usize>,
    /// The binary (`all_reduce_perf`), from `# Collective test starting:` or, where the output
    /// has none, the last `..._perf` named on a line before the header (a command line).
    pub(crate) binary: Option<String>,
    /// GPU names of the `#  Rank N ...` lines, one per rank listed.
    pub(crate) devices: Vec<String>,
    /// `minBytes`, `maxBytes` and `step: F(factor)` of the header: the sweep asked for (`-b`,
    /// `-e`, `-f`); the step is `None` for a fixed increment (`-i`).
    pub(crate) min_bytes: Option<u64>,
    pub(crate) max_bytes: Option<u64>,
    pub(crate) step_factor: Option<u64>,
    /// The transports of NCCL's own log lines within the run (`NCCL_DEBUG=INFO`: `... NCCL INFO
    /// Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM` gives `P2P/CUMEM`), each once: nccl-tests'
    /// header does not name the transport.
    pub(crate) transports: Vec<String>,
    pub(crate) rows: Vec<NcclTestsRow>,
}

impl NcclTestsRun {
    pub(crate) fn graph(&self) -> bool {
        self.graph_launches >= 1
    }

    /// Ranks of the run: the `#  Rank` lines when listed, else nThread x nGpus (one process).
    pub(crate) fn nranks(&self) -> Option<usize> {
        if !self.devices.is_empty() {
            return Some(self.devices.len());
        }
        Some(self.nthreads.unwrap_or(1) * self.ngpus?)
    }
}

fn num<T: std::str::FromStr>(s: &str, what: &str, line: usize) -> Result<T, String> {
    s.parse()
        .map_err(|_| format!("line {line}: {what} '{s}' is not a number"))
}

fn header_value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let i = line.find(key)?;
    line[i + key.len()..].split_whitespace().next()
}

/// The `..._perf` binary a line names (`./build/all_gather_perf -b 8`, `## all_gather_perf`).
fn binary_named(line: &str) -> Option<String> {
    line.split(|c: char| c.is_whitespace() || c == '/' || c == '`' || c == '"')
        .find(|w| w.ends_with("_perf") && w.len() > 5)
        .map(|w| w.to_string())
}

/// The GPU name of a `#  Rank 0 Group 0 Pid 1 on host device 0 [0x01] NAME` line.
fn rank_device(h: &str) -> Option<String> {
    let t = h.trim_start();
    if !t.starts_with("Rank ") || !t.contains(" device ") {
        return None;
    }
    let after = &t[t.find(']')? + 1..];
    Some(after.trim().to_string())
}

/// The transport of an NCCL log line (`... NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC`).
fn transport_named(line: &str) -> Option<&str> {
    if !line.contains("NCCL INFO") {
        return None;
    }
    line.split_once(" via ")?.1.split_whitespace().next()
}

/// Parses nccl-tests' text output into its runs, one per `# nThread` header, in order. Lines
/// that are neither a header, a rank line nor a size row (the footer, NCCL's own log lines,
/// notes around a pasted table) are skipped; a row with the wrong number of columns is an
/// error naming its line.
pub(crate) fn parse_runs(text: &str) -> Result<Vec<NcclTestsRun>, String> {
    let mut runs: Vec<NcclTestsRun> = vec![];
    let mut binary: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let t = line.trim();
        if let Some(h) = t.strip_prefix('#') {
            let h2 = h.trim_start_matches('#').trim_start();
            if let Some(b) = h2.strip_prefix("Collective test starting:") {
                binary = Some(b.trim().to_string());
            } else if h2.starts_with("nThread") {
                let g: u32 = header_value(h2, "graph:")
                    .map(|v| num(v, "graph", n))
                    .transpose()?
                    .unwrap_or(0);
                runs.push(NcclTestsRun {
                    graph_launches: g,
                    ngpus: header_value(h2, "nGpus")
                        .map(|v| num(v, "nGpus", n))
                        .transpose()?,
                    nthreads: header_value(h2, "nThread")
                        .map(|v| num(v, "nThread", n))
                        .transpose()?,
                    binary: binary.clone(),
                    devices: vec![],
                    min_bytes: header_value(h2, "minBytes")
                        .map(|v| num(v, "minBytes", n))
                        .transpose()?,
                    max_bytes: header_value(h2, "maxBytes")
                        .map(|v| num(v, "maxBytes", n))
                        .transpose()?,
                    step_factor: header_value(h2, "step:")
                        .and_then(|v| v.strip_suffix("(factor)"))
                        .map(|v| num(v, "step", n))
                        .transpose()?,
                    transports: vec![],
                    rows: vec![],
                });
            } else if let Some(d) = rank_device(h2) {
                if let Some(r) = runs.last_mut().filter(|r| r.rows.is_empty()) {
                    r.devices.push(d);
                }
            } else if let Some(b) = binary_named(h2) {
                binary = Some(b);
            }
            continue;
        }
        if let (Some(tr), Some(run)) = (transport_named(t), runs.last_mut()) {
            if !run.transports.iter().any(|x| x == tr) {
                run.transports.push(tr.to_string());
            }
            continue;
        }
        let f: Vec<&str> = t.split_whitespace().collect();
        // A size row starts with two integers (size, count); anything else is not one.
        if f.len() < 2 || f[0].parse::<u64>().is_err() || f[1].parse::<u64>().is_err() {
            if let Some(b) = binary_named(t) {
                binary = Some(b);
            }
            continue;
        }
        // 13 columns: with root (2.10 and later); 12: without (before).
        let root = match f.len() {
            13 => 1,
            12 => 0,
            k => {
                return Err(format!(
                    "line {n}: a size row has {k} columns, nccl-tests 2.19 writes 13 (size count type redop root, then time algbw busbw #wrong out of place and in place; before 2.10, 12 without root); per-iteration output (-I 1) is not read"
                ))
            }
        };
        let wrong = |s: &str| -> Result<Option<f64>, String> {
            if s == "N/A" {
                Ok(None)
            } else {
                num(s, "#wrong", n).map(Some)
            }
        };
        let Some(run) = runs.last_mut() else {
            return Err(format!(
                "line {n}: a size row before any '# nThread ...' header line"
            ));
        };
        let o = 4 + root;
        run.rows.push(NcclTestsRow {
            size_bytes: num(f[0], "size", n)?,
            count: num(f[1], "count", n)?,
            dtype: f[2].to_string(),
            redop: f[3].to_string(),
            oop_us: num(f[o], "time", n)?,
            oop_busbw_gbps: num(f[o + 2], "busbw", n)?,
            oop_wrong: wrong(f[o + 3])?,
            ip_us: num(f[o + 4], "time", n)?,
            ip_busbw_gbps: num(f[o + 6], "busbw", n)?,
            ip_wrong: wrong(f[o + 7])?,
        });
    }
    if runs.is_empty() {
        return Err(
            "no '# nThread ... nGpus ...' header line: is this the output of an nccl-tests binary?"
                .into(),
        );
    }
    if runs.iter().all(|r| r.rows.is_empty()) {
        return Err("no size rows".into());
    }
    runs.retain(|r| !r.rows.is_empty());
    Ok(runs)
}

/// Parses nccl-tests' text output as one run: the rows of every run in the text, which must
/// share one launch mode (eager and graph runs belong in separate files).
pub(crate) fn parse(text: &str) -> Result<NcclTestsRun, String> {
    let mut runs = parse_runs(text)?.into_iter();
    let mut first = runs.next().expect("parse_runs returns at least one run");
    for r in runs {
        if r.graph() != first.graph() {
            return Err(format!(
                "a run with graph: {} after one with graph: {}; give eager (-G 0) and graph (-G N) runs as separate files",
                r.graph_launches, first.graph_launches
            ));
        }
        first.rows.extend(r.rows);
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_public_tables_old_and_new() {
        // nccl-tests before 2.10 (no root column, `error` floats, no graph field): 3 runs of
        // 25 sizes (8 B .. 128 MiB by 2x) on 4 GPUs, the binary named on the command line.
        let s03 = include_str!(
            "../tests/data/public-nccl/S03_sheffield_bessemer_4xV100PCIe_noNVLink.txt"
        );
        let runs = parse_runs(s03).unwrap();
        assert_eq!(runs.len(), 3);
        for r in &runs {
            assert_eq!(r.rows.len(), 25);
            assert_eq!(r.binary.as_deref(), Some("all_reduce_perf"));
            assert_eq!((r.nranks(), r.graph()), (Some(4), false));
        }
        // Run C, 16 B: 183.5 us out of place, 16.04 in place (as published).
        assert_eq!(
            (runs[2].rows[1].oop_us, runs[2].rows[1].ip_us),
            (183.5, 16.04)
        );
        // nccl-tests 2.x with rank lines: two runs of 8 ranks named by their device lines.
        let s13 = include_str!(
            "../tests/data/public-nccl/S13_chlc_8x4090_dualEPYC7542_SYS_p2p_off_on.txt"
        );
        let runs = parse_runs(s13).unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].devices.len(), 8);
        assert_eq!(runs[0].devices[7], "NVIDIA GeForce RTX 4090");
        assert_eq!(runs[1].rows[15].oop_us, 119.7);
        // all_reduce then all_gather in one file, each named by a `## ..._perf` heading.
        let s02 = include_str!(
            "../tests/data/public-nccl/S02_anthonyhoo_2x2080ti_pcie3_switch_nop2p.txt"
        );
        let runs = parse_runs(s02).unwrap();
        let bins: Vec<_> = runs.iter().map(|r| r.binary.clone().unwrap()).collect();
        assert_eq!(bins, ["all_reduce_perf", "all_gather_perf"]);
        assert_eq!((runs[0].rows.len(), runs[1].rows.len()), (28, 28));
    }

    #[test]
    fn reads_the_sweep_asked_for_and_the_transports_of_nccl_log_lines() {
        let s01 = include_str!("../tests/data/public-nccl/S01_aikitoria_8x5090_p2p.txt");
        let r = &parse_runs(s01).unwrap()[0];
        // `minBytes 8 maxBytes 134217728 step: 2(factor)`, no NCCL log lines.
        assert_eq!(
            (r.min_bytes, r.max_bytes, r.step_factor),
            (Some(8), Some(134_217_728), Some(2))
        );
        assert!(r.transports.is_empty());
        // A fixed increment (-i) has no factor; NCCL_DEBUG=INFO lines give their transports,
        // each once.
        let text = "# nThread 1 nGpus 2 minBytes 1024 maxBytes 4096 step: 1024(bytes) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n\
            h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n\
            h:1:1 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM\n\
            h:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via SHM/direct/direct\n\
            1024 256 float sum -1 10.0 0.10 0.10 0 10.0 0.10 0.10 0\n";
        let r = &parse_runs(text).unwrap()[0];
        assert_eq!(
            (r.min_bytes, r.max_bytes, r.step_factor),
            (Some(1024), Some(4096), None)
        );
        assert_eq!(r.transports, ["P2P/CUMEM", "SHM/direct/direct"]);
        assert_eq!(r.rows.len(), 1);
    }
}
