//! Chrome-trace writer: one track (pid) per rank, with slices for collectives, compute
//! operations and host gaps, openable in Perfetto and chrome://tracing next to a server's own
//! profile. The replay's per-collective timing pass writes it (`verify --export-trace`), and
//! [`super::reader`] reads it back: collectives are `kernel` events named like NCCL's kernels
//! and carrying Kineto's `record_param_comms` arguments, each launched by a `cuda_runtime`
//! event of the same `correlation`, and every event carries `args.rank`.

use std::io::Write;

use serde::Serialize;
use serde_json::json;

/// What a slice stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SliceKind {
    Collective,
    Compute,
    /// Host time before a launch (on the host track).
    HostGap,
}

/// The collective behind a collective slice.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SliceCollective {
    /// Normalised op (`all_reduce`).
    pub(crate) op: String,
    /// Normalised dtype (`bf16`).
    pub(crate) dtype: String,
    /// Elements each rank contributes.
    pub(crate) elements: u64,
    pub(crate) group_size: u64,
    pub(crate) comm: String,
    pub(crate) seq: u64,
}

/// One slice on a rank's track.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Slice {
    pub(crate) name: String,
    pub(crate) kind: SliceKind,
    pub(crate) start_us: f64,
    pub(crate) dur_us: f64,
    /// Host-side launch of a GPU slice (start, duration), written as a runtime event.
    pub(crate) launch: Option<(f64, f64)>,
    /// Launched from a CUDA graph (`cudaGraphLaunch`) rather than individually.
    pub(crate) graph: bool,
    pub(crate) collective: Option<SliceCollective>,
}

/// One rank's track.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RankTrack {
    pub(crate) rank: usize,
    pub(crate) slices: Vec<Slice>,
}

fn torch_dtype(d: &str) -> &str {
    match d {
        "bf16" => "BFloat16",
        "f16" => "Half",
        "f32" => "Float",
        "f64" => "Double",
        "i8" => "Char",
        "u8" => "Byte",
        "i32" => "Int",
        "i64" => "Long",
        other => other,
    }
}

fn nccl_func(op: &str) -> String {
    op.split('_')
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// The Kineto name of a collective (`allreduce`, `all_gather_into_tensor`, ...), which the
/// reader maps back.
fn torch_collective(op: &str) -> String {
    match op {
        "all_reduce" => "allreduce".into(),
        "all_gather" => "all_gather_into_tensor".into(),
        "reduce_scatter" => "reduce_scatter_tensor".into(),
        other => other.into(),
    }
}

/// Writes the tracks as one Chrome trace (JSON object format), streaming event by event.
pub(crate) fn write<W: Write>(
    tracks: &[RankTrack],
    world_size: usize,
    out: W,
) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::new(out);
    write!(
        w,
        "{{\"schemaVersion\":1,\"displayTimeUnit\":\"ms\",\"otherData\":{{\"writer\":\"verifybench {}\",\"world_size\":{world_size}}},\"traceEvents\":[",
        env!("CARGO_PKG_VERSION")
    )?;
    let mut first = true;
    let mut emit = |w: &mut std::io::BufWriter<W>, v: serde_json::Value| -> std::io::Result<()> {
        if !first {
            w.write_all(b",\n")?;
        }
        first = false;
        serde_json::to_writer(&mut *w, &v).map_err(std::io::Error::other)
    };
    let mut corr: u64 = 1;
    for t in tracks {
        let pid = t.rank;
        for (name, tid, label) in [
            ("process_name", 0, format!("rank {}", t.rank)),
            ("thread_name", 0, "host".into()),
            ("thread_name", 1, "stream 1".into()),
        ] {
            let v = json!({"ph":"M","name":name,"pid":pid,"tid":tid,"args":{"name":label}});
            emit(&mut w, v)?;
        }
        for s in &t.slices {
            match s.kind {
                SliceKind::HostGap => {
                    emit(
                        &mut w,
                        json!({"ph":"X","cat":"user_annotation","name":s.name,"pid":pid,"tid":0,
                        "ts":s.start_us,"dur":s.dur_us,"args":{"rank":t.rank}}),
                    )?;
                }
                SliceKind::Collective | SliceKind::Compute => {
                    let c = corr;
                    corr += 1;
                    let mut args =
                        json!({"rank":t.rank,"correlation":c,"External id":c,"stream":1});
                    let name = match &s.collective {
                        Some(col) => {
                            let a = args.as_object_mut().expect("object");
                            a.insert("Collective name".into(), torch_collective(&col.op).into());
                            a.insert("In msg nelems".into(), col.elements.into());
                            let out = if col.op == "all_gather" {
                                col.elements * col.group_size
                            } else {
                                col.elements
                            };
                            a.insert("Out msg nelems".into(), out.into());
                            a.insert("Group size".into(), col.group_size.into());
                            a.insert("dtype".into(), torch_dtype(&col.dtype).into());
                            a.insert("Process Group Name".into(), col.comm.clone().into());
                            a.insert("Seq".into(), col.seq.into());
                            format!("ncclDevKernel_{}_Sum_{}", nccl_func(&col.op), col.dtype)
                        }
                        None => s.name.clone(),
                    };
                    emit(
                        &mut w,
                        json!({"ph":"X","cat":"kernel","name":name,"pid":pid,"tid":1,
                        "ts":s.start_us,"dur":s.dur_us,"args":args}),
                    )?;
                    if let Some((ls, ld)) = s.launch {
                        let rt = if s.graph {
                            "cudaGraphLaunch"
                        } else {
                            "cudaLaunchKernel"
                        };
                        emit(
                            &mut w,
                            json!({"ph":"X","cat":"cuda_runtime","name":rt,"pid":pid,"tid":0,
                            "ts":ls,"dur":ld,"args":{"rank":t.rank,"correlation":c,"External id":c}}),
                        )?;
                    }
                }
            }
        }
    }
    w.write_all(b"]}\n")?;
    w.flush()
}

/// Writes the tracks to `path` (temp-and-rename).
pub(crate) fn write_file(
    tracks: &[RankTrack],
    world_size: usize,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let mut buf = Vec::new();
    write(tracks, world_size, &mut buf)?;
    crate::util::write_file(path, &buf)
}

/// Tracks of the collectives of analysed ranks (collective slices with their host launches),
/// for the tests' round trip through the reader.
#[cfg(test)]
pub(crate) fn tracks_of(ranks: &[super::extract::RankTrace]) -> Vec<RankTrack> {
    ranks
        .iter()
        .map(|r| RankTrack {
            rank: r.rank,
            slices: r
                .collectives
                .iter()
                .filter_map(|c| {
                    Some(Slice {
                        name: c.op.clone(),
                        kind: SliceKind::Collective,
                        start_us: c.gpu_start_us?,
                        dur_us: c.gpu_dur_us?,
                        launch: c.launch_us.map(|s| (s, c.launch_end_us.unwrap_or(s) - s)),
                        graph: c.graph.unwrap_or(false),
                        collective: Some(SliceCollective {
                            op: c.op.clone(),
                            dtype: c.dtype.clone().unwrap_or_else(|| "u8".into()),
                            elements: c.elements.unwrap_or(0),
                            group_size: c.group_size.unwrap_or(1),
                            comm: c.comm.clone(),
                            seq: c.seq.unwrap_or(0).max(0) as u64,
                        }),
                    })
                })
                .collect(),
        })
        .collect()
}
