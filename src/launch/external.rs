//! Rank, world size and local GPU of a worker started by an external launcher.
//!
//! verifybench does not invent a launcher: under torchrun, Slurm (`srun`), Open MPI (`mpirun`)
//! or an MPICH/PMI launcher it reads the variables those launchers already set; anywhere else
//! the user passes `--rank`, `--world-size` and `--local-rank`. [`detect`] is a pure function
//! over an environment map, so every launcher's rules are unit-tested without starting one.
//!
//! Why this order when several launchers' variables are present: the innermost launcher wins.
//! torchrun started by `srun` sees both `RANK` and `SLURM_PROCID`, and only torchrun's rank is
//! per GPU; `mpirun` inside an `sbatch` script inherits the batch step's `SLURM_PROCID=0` in
//! every process, so MPI's variables must win over Slurm's. Flags win over everything.

use std::collections::BTreeMap;

use anyhow::Result;

use crate::error::usage;
use crate::launch::rendezvous::Endpoint;

/// Where a worker's rank and world size came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LauncherKind {
    /// `--rank`, `--world-size` (and `--local-rank`) on the command line.
    Flags,
    /// torchrun / torch.distributed.run: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`.
    Torchrun,
    /// Slurm `srun`: `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`.
    Slurm,
    /// Open MPI `mpirun`: `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`,
    /// `OMPI_COMM_WORLD_LOCAL_RANK`.
    OpenMpi,
    /// MPICH / Intel MPI (Hydra, PMI): `PMI_RANK`, `PMI_SIZE`, `MPI_LOCALRANKID`.
    Pmi,
}

// each launcher's name as users know it
crate::named_enum!(LauncherKind {
    Flags => "flags": "",
    Torchrun => "torchrun": "",
    Slurm => "Slurm": "",
    OpenMpi => "Open MPI": "",
    Pmi => "PMI (MPICH/Intel MPI)": "",
});

/// The variables one launcher sets: the first name present of each list is used.
struct Family {
    kind: LauncherKind,
    rank: &'static [&'static str],
    size: &'static [&'static str],
    local: &'static [&'static str],
}

/// Launchers in precedence order (innermost first; see the module comment).
const FAMILIES: [Family; 4] = [
    Family {
        kind: LauncherKind::Torchrun,
        rank: &["RANK"],
        size: &["WORLD_SIZE"],
        local: &["LOCAL_RANK"],
    },
    Family {
        kind: LauncherKind::OpenMpi,
        rank: &["OMPI_COMM_WORLD_RANK"],
        size: &["OMPI_COMM_WORLD_SIZE"],
        local: &["OMPI_COMM_WORLD_LOCAL_RANK"],
    },
    Family {
        kind: LauncherKind::Pmi,
        rank: &["PMI_RANK"],
        size: &["PMI_SIZE"],
        local: &["MPI_LOCALRANKID"],
    },
    Family {
        kind: LauncherKind::Slurm,
        rank: &["SLURM_PROCID"],
        size: &["SLURM_NTASKS", "SLURM_NPROCS"],
        local: &["SLURM_LOCALID"],
    },
];

/// Values given on the command line; each one set wins over the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ExplicitRank {
    /// `--rank`
    pub(crate) rank: Option<usize>,
    /// `--world-size`
    pub(crate) world_size: Option<usize>,
    /// `--local-rank`: the GPU ordinal on this host.
    pub(crate) local_rank: Option<usize>,
    /// `--rendezvous HOST:PORT`
    pub(crate) rendezvous: Option<Endpoint>,
}

/// Where the rendezvous address came from, with the address itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RendezvousAddr {
    pub(crate) endpoint: Endpoint,
    /// Human-readable origin: `--rendezvous`, `MASTER_ADDR/MASTER_PORT`, ...
    pub(crate) source: String,
}

/// Who this worker is in the job, and how that was found out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RankInfo {
    /// Global rank, `0..world_size`.
    pub(crate) rank: usize,
    /// Number of ranks in the job.
    pub(crate) world_size: usize,
    /// The rank on this host as the launcher (or `--local-rank`) numbers it.
    pub(crate) local_rank: usize,
    /// The CUDA device ordinal to open: `local_rank`, except when the launcher already left a
    /// single GPU visible to this process (`CUDA_VISIBLE_DEVICES` with one entry), then 0.
    pub(crate) gpu: usize,
    /// Which launcher (or the flags) gave `rank` and `world_size`.
    pub(crate) source: LauncherKind,
    /// The variable or flag names the values were read from, e.g. `RANK/WORLD_SIZE/LOCAL_RANK`.
    pub(crate) source_vars: String,
    /// Launchers whose variables were present too but lost to `source`.
    pub(crate) shadowed: Vec<LauncherKind>,
    /// Why `gpu` differs from `local_rank` or how the local rank was chosen, if worth saying.
    pub(crate) gpu_note: Option<String>,
    /// Where rank 0 serves the NCCL unique id, if known.
    pub(crate) rendezvous: Option<RendezvousAddr>,
    /// The launcher's job, if it names one ([`launcher_job`]).
    pub(crate) job: Option<String>,
}

impl RankInfo {
    /// The line a worker prints about itself, e.g.
    /// `rank 1 of 2 (local GPU 1) from torchrun (RANK/WORLD_SIZE/LOCAL_RANK)`.
    pub(crate) fn describe(&self) -> String {
        let mut s = format!(
            "rank {} of {} (local GPU {}) from {} ({})",
            self.rank, self.world_size, self.gpu, self.source, self.source_vars
        );
        if let Some(note) = &self.gpu_note {
            s.push_str("; ");
            s.push_str(note);
        }
        if !self.shadowed.is_empty() {
            let names: Vec<&str> = self.shadowed.iter().map(|k| k.name()).collect();
            s.push_str(&format!("; ignored the variables of {}", names.join(", ")));
        }
        s
    }

    /// The line about the rendezvous, e.g. `rendezvous at node1:29500 from --rendezvous`.
    pub(crate) fn describe_rendezvous(&self) -> String {
        match &self.rendezvous {
            Some(r) => format!("rendezvous at {} from {}", r.endpoint, r.source),
            None => "no rendezvous address".into(),
        }
    }

    /// The rendezvous address, or a usage error telling how to give one. A world of one rank
    /// needs none, so callers ask only when `world_size > 1`.
    pub(crate) fn require_rendezvous(&self) -> Result<&Endpoint> {
        self.rendezvous.as_ref().map(|r| &r.endpoint).ok_or_else(|| {
            usage(format!(
                "rank {} of {} needs the address of rank 0: pass --rendezvous HOST:PORT \
                 (HOST is where rank 0 runs, PORT a free TCP port) or set MASTER_ADDR and MASTER_PORT",
                self.rank, self.world_size
            ))
        })
    }
}

/// The process environment as a map (variables that are not valid UTF-8 are left out: none
/// of the names read here can be one of them).
pub(crate) fn env_map() -> BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// First name of `names` set in `env` (empty values count as unset).
fn lookup<'a>(
    env: &'a BTreeMap<String, String>,
    names: &'static [&'static str],
) -> Option<(&'static str, &'a str)> {
    names.iter().find_map(|n| {
        env.get(*n)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
            .map(|v| (*n, v))
    })
}

fn parse_count(name: &str, value: &str) -> Result<usize> {
    value.parse::<usize>().map_err(|_| {
        usage(format!(
            "{name}={value} is not a whole number: the launcher's variables are unusable; \
             unset {name} or pass --rank and --world-size"
        ))
    })
}

/// Rank and world size (and local rank when set) from one launcher's variables, if any of its
/// rank or size variables is present.
struct Found {
    kind: LauncherKind,
    rank: (&'static str, usize),
    size: (&'static str, usize),
    local: Option<(&'static str, usize)>,
}

fn read_family(env: &BTreeMap<String, String>, fam: &Family) -> Result<Option<Found>> {
    let rank = lookup(env, fam.rank);
    let size = lookup(env, fam.size);
    let (rank, size) = match (rank, size) {
        (None, None) => return Ok(None),
        (Some((rn, rv)), Some((sn, sv))) => {
            ((rn, parse_count(rn, rv)?), (sn, parse_count(sn, sv)?))
        }
        (Some((n, v)), None) | (None, Some((n, v))) => {
            let missing = if rank.is_some() { fam.size } else { fam.rank };
            return Err(usage(format!(
                "{n}={v} is set but {} is not: the {} variables are incomplete; \
                 set both or pass --rank and --world-size",
                missing.join(" or "),
                fam.kind
            )));
        }
    };
    let local = lookup(env, fam.local)
        .map(|(n, v)| parse_count(n, v).map(|l| (n, l)))
        .transpose()?;
    Ok(Some(Found {
        kind: fam.kind,
        rank,
        size,
        local,
    }))
}

/// Rank, world size, local GPU and rendezvous address of this worker, from `explicit` flags
/// first, then the first launcher (in precedence order) whose variables are present.
///
/// Errors (all usage errors, exit code 2): no rank anywhere, a launcher's variables half set
/// (`RANK` without `WORLD_SIZE`), a value that is not a number, world size 0, rank or local
/// rank not below the world size, `--rank` without `--world-size`, a bad `MASTER_PORT`.
pub(crate) fn detect(env: &BTreeMap<String, String>, explicit: &ExplicitRank) -> Result<RankInfo> {
    let mut shadowed = Vec::new();
    let given =
        match (explicit.rank, explicit.world_size) {
            (Some(rank), Some(world)) => from_flags(env, explicit, rank, world, &mut shadowed),
            (Some(_), None) => return Err(usage(
                "--rank needs --world-size: give both, or neither to take them from the launcher",
            )),
            (None, Some(_)) => return Err(usage(
                "--world-size needs --rank: give both, or neither to take them from the launcher",
            )),
            (None, None) => from_launcher(env, explicit, &mut shadowed)?,
        };
    let Given {
        rank,
        world_size,
        local,
        source,
        source_vars,
    } = given;

    if world_size == 0 {
        return Err(usage(format!(
            "world size 0 (from {source_vars}): a job needs at least one rank"
        )));
    }
    if rank >= world_size {
        return Err(usage(format!(
            "rank {rank} is not below world size {world_size} (from {source_vars}): ranks count from 0 to {}",
            world_size - 1
        )));
    }
    let mut gpu_note = None;
    let local_rank = match local {
        Some(l) => l,
        None => {
            gpu_note = Some("no --local-rank, so the local GPU is the rank".to_string());
            rank
        }
    };
    if local_rank >= world_size {
        return Err(usage(format!(
            "local rank {local_rank} is not below world size {world_size}: a host cannot run more ranks than the job"
        )));
    }
    let gpu = visible_gpu(env, local_rank, &mut gpu_note)?;

    let rendezvous = rendezvous_addr(env, explicit)?;
    let job = launcher_job(env, source);
    Ok(RankInfo {
        rank,
        world_size,
        local_rank,
        gpu,
        source,
        source_vars,
        shadowed,
        gpu_note,
        rendezvous,
        job,
    })
}

/// Rank, world size and local rank as the flags or a launcher gave them, before their bounds
/// are checked.
struct Given {
    rank: usize,
    world_size: usize,
    local: Option<usize>,
    source: LauncherKind,
    source_vars: String,
}

/// `--rank` and `--world-size` (`rank`, `world`): the flags win; the launchers whose variables
/// were present are added to `shadowed` (without failing on their variables: the user chose
/// flags, maybe because they are broken).
fn from_flags(
    env: &BTreeMap<String, String>,
    explicit: &ExplicitRank,
    rank: usize,
    world: usize,
    shadowed: &mut Vec<LauncherKind>,
) -> Given {
    for fam in &FAMILIES {
        if lookup(env, fam.rank).is_some() || lookup(env, fam.size).is_some() {
            shadowed.push(fam.kind);
        }
    }
    let vars = if explicit.local_rank.is_some() {
        "--rank/--world-size/--local-rank"
    } else {
        "--rank/--world-size"
    };
    Given {
        rank,
        world_size: world,
        local: explicit.local_rank,
        source: LauncherKind::Flags,
        source_vars: vars.to_string(),
    }
}

/// The first launcher (in precedence order) whose variables are present, the local rank from
/// `--local-rank` if given; the lower-precedence launchers present are added to `shadowed`.
fn from_launcher(
    env: &BTreeMap<String, String>,
    explicit: &ExplicitRank,
    shadowed: &mut Vec<LauncherKind>,
) -> Result<Given> {
    let mut found = None;
    for fam in &FAMILIES {
        match (&found, read_family(env, fam)) {
            (None, r) => found = r?,
            // A lower-precedence launcher: note it, never fail on it.
            (Some(_), Ok(Some(_))) | (Some(_), Err(_)) => shadowed.push(fam.kind),
            (Some(_), Ok(None)) => {}
        }
    }
    let Some(f) = found else {
        let stray: Vec<&str> = FAMILIES
            .iter()
            .filter_map(|fam| lookup(env, fam.local).map(|(n, _)| n))
            .collect();
        let extra = if stray.is_empty() {
            String::new()
        } else {
            format!(
                " ({} is set, but no rank or world size goes with it)",
                stray.join(", ")
            )
        };
        return Err(usage(format!(
            "no rank given{extra}: pass --rank R --world-size N [--local-rank L], or start \
             the worker under torchrun, srun or mpirun (looked for RANK/WORLD_SIZE, \
             SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE, \
             PMI_RANK/PMI_SIZE)"
        )));
    };
    let local = explicit.local_rank.or(f.local.map(|(_, l)| l));
    let mut vars = format!("{}/{}", f.rank.0, f.size.0);
    match (explicit.local_rank, f.local) {
        (Some(_), _) => vars.push_str(", local rank from --local-rank"),
        (None, Some((n, _))) => {
            vars.push('/');
            vars.push_str(n);
        }
        (None, None) => {
            return Err(usage(format!(
                "{} gives rank {} of {} but not the local rank ({} is unset): \
                 pass --local-rank (the GPU ordinal on this host)",
                f.kind,
                f.rank.1,
                f.size.1,
                FAMILIES
                    .iter()
                    .find(|fam| fam.kind == f.kind)
                    .map(|fam| fam.local.join(" or "))
                    .unwrap_or_default()
            )))
        }
    }
    Ok(Given {
        rank: f.rank.1,
        world_size: f.size.1,
        local,
        source: f.kind,
        source_vars: vars,
    })
}

/// The CUDA ordinal of local rank `local_rank`'s GPU. A launcher that binds one GPU per task
/// (srun --gpus-per-task=1, --gpu-bind=single) leaves exactly one device visible: that device
/// is ordinal 0 whatever the local rank says (and `gpu_note` says so).
fn visible_gpu(
    env: &BTreeMap<String, String>,
    local_rank: usize,
    gpu_note: &mut Option<String>,
) -> Result<usize> {
    let mut gpu = local_rank;
    if let Some(v) = env.get("CUDA_VISIBLE_DEVICES") {
        let visible: Vec<&str> = v
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if visible.len() == 1 && local_rank > 0 {
            gpu = 0;
            *gpu_note = Some(format!(
                "local rank {local_rank}, but CUDA_VISIBLE_DEVICES={v} leaves this process one GPU"
            ));
        } else if !visible.is_empty() && local_rank >= visible.len() {
            return Err(usage(format!(
                "local rank {local_rank} needs GPU {local_rank}, but CUDA_VISIBLE_DEVICES={v} shows {} GPUs: \
                 pass --local-rank or fix CUDA_VISIBLE_DEVICES",
                visible.len()
            )));
        }
    }
    Ok(gpu)
}

/// The job the launcher that gave the rank runs, as the ranks of one job all see it: Slurm's
/// job and step (`slurm:JOB.STEP`), torchrun's run id (`torchrun:ID`); none for the flags and
/// the MPI launchers. Two jobs' ranks that meet on one port tell each other apart by it. It is
/// no secret: anyone on the cluster can read it.
pub(crate) fn launcher_job(env: &BTreeMap<String, String>, source: LauncherKind) -> Option<String> {
    let get = |names| lookup(env, names).map(|(_, v)| v);
    match source {
        LauncherKind::Slurm => {
            let job = get(&["SLURM_JOB_ID", "SLURM_JOBID"])?;
            let step = get(&["SLURM_STEP_ID", "SLURM_STEPID"]);
            Some(match step {
                Some(s) => format!("slurm:{job}.{s}"),
                None => format!("slurm:{job}"),
            })
        }
        LauncherKind::Torchrun => get(&["TORCHELASTIC_RUN_ID"]).map(|r| format!("torchrun:{r}")),
        LauncherKind::Flags | LauncherKind::OpenMpi | LauncherKind::Pmi => None,
    }
}

/// `--rendezvous` if given, else `MASTER_ADDR:MASTER_PORT`. Under torchrun with the agent's
/// store (`TORCHELASTIC_USE_AGENT_STORE=True`) torchrun itself listens on `MASTER_PORT` on the
/// first node, so rank 0 serves on `MASTER_PORT + 1` instead.
fn rendezvous_addr(
    env: &BTreeMap<String, String>,
    explicit: &ExplicitRank,
) -> Result<Option<RendezvousAddr>> {
    if let Some(e) = &explicit.rendezvous {
        return Ok(Some(RendezvousAddr {
            endpoint: e.clone(),
            source: "--rendezvous".into(),
        }));
    }
    let addr = lookup(env, &["MASTER_ADDR"]);
    let port = lookup(env, &["MASTER_PORT"]);
    let (host, port) = match (addr, port) {
        (None, None) => return Ok(None),
        (Some((_, h)), Some((_, p))) => (h, p),
        (Some((_, h)), None) => {
            return Err(usage(format!(
                "MASTER_ADDR={h} is set but MASTER_PORT is not: set both or pass --rendezvous HOST:PORT"
            )))
        }
        (None, Some((_, p))) => {
            return Err(usage(format!(
                "MASTER_PORT={p} is set but MASTER_ADDR is not: set both or pass --rendezvous HOST:PORT"
            )))
        }
    };
    let port: u16 = match port.parse() {
        Ok(p) if p > 0 => p,
        _ => {
            return Err(usage(format!(
            "MASTER_PORT={port} is not a TCP port (1-65535): fix it or pass --rendezvous HOST:PORT"
        )))
        }
    };
    let agent_store = env
        .get("TORCHELASTIC_USE_AGENT_STORE")
        .is_some_and(|v| v.trim() == "True");
    let (port, source) = if agent_store {
        let p = port.checked_add(1).ok_or_else(|| {
            usage(
                "MASTER_PORT=65535 leaves no port above it for the rendezvous (torchrun holds MASTER_PORT): \
                 pass --rendezvous HOST:PORT",
            )
        })?;
        (
            p,
            "MASTER_ADDR/MASTER_PORT+1 (torchrun's agent listens on MASTER_PORT)".to_string(),
        )
    } else {
        (port, "MASTER_ADDR/MASTER_PORT".to_string())
    };
    Ok(Some(RendezvousAddr {
        endpoint: Endpoint::new(host, port),
        source,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit_code;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn none() -> ExplicitRank {
        ExplicitRank::default()
    }

    fn err(e: &BTreeMap<String, String>, x: &ExplicitRank) -> String {
        let e = detect(e, x).unwrap_err();
        assert_eq!(exit_code(&e), 2, "{e}");
        e.to_string()
    }

    #[test]
    fn torchrun() {
        let e = env(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "node1"),
            ("MASTER_PORT", "29500"),
        ]);
        let r = detect(&e, &none()).unwrap();
        assert_eq!((r.rank, r.world_size, r.local_rank, r.gpu), (1, 2, 1, 1));
        assert_eq!(r.source, LauncherKind::Torchrun);
        assert_eq!(
            r.describe(),
            "rank 1 of 2 (local GPU 1) from torchrun (RANK/WORLD_SIZE/LOCAL_RANK)"
        );
        let rz = r.rendezvous.as_ref().unwrap();
        assert_eq!(rz.endpoint, Endpoint::new("node1", 29500));
        assert_eq!(
            r.describe_rendezvous(),
            "rendezvous at node1:29500 from MASTER_ADDR/MASTER_PORT"
        );
    }

    #[test]
    fn torchrun_agent_store_moves_the_port_up_by_one() {
        let e = env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
        ]);
        let r = detect(&e, &none()).unwrap();
        assert_eq!(r.require_rendezvous().unwrap().port, 29501);
        assert!(r.describe_rendezvous().contains("MASTER_PORT+1"));
    }

    #[test]
    fn slurm() {
        let e = env(&[
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NODELIST", "gpu[01-02]"),
        ]);
        let r = detect(&e, &none()).unwrap();
        assert_eq!((r.rank, r.world_size, r.local_rank, r.gpu), (3, 4, 1, 1));
        assert_eq!(r.source, LauncherKind::Slurm);
        assert_eq!(
            r.describe(),
            "rank 3 of 4 (local GPU 1) from Slurm (SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID)"
        );
        // Slurm gives no rendezvous address by itself, and no job here (no SLURM_JOB_ID).
        assert!(r.rendezvous.is_none());
        assert_eq!(r.job, None);
        let msg = r.require_rendezvous().unwrap_err().to_string();
        assert!(msg.contains("--rendezvous HOST:PORT"), "{msg}");
    }

    #[test]
    fn the_launchers_job_is_read_from_the_launcher_that_gave_the_rank() {
        let slurm = [
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_JOB_ID", "4711"),
            ("SLURM_STEP_ID", "3"),
        ];
        let r = detect(&env(&slurm), &none()).unwrap();
        assert_eq!(r.job.as_deref(), Some("slurm:4711.3"));
        // torchrun under srun: torchrun gave the rank, so its run id is the job
        let mut both = env(&slurm);
        for (k, v) in [
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "1"),
            ("TORCHELASTIC_RUN_ID", "abc"),
        ] {
            both.insert(k.into(), v.into());
        }
        assert_eq!(
            detect(&both, &none()).unwrap().job.as_deref(),
            Some("torchrun:abc")
        );
        // flags: no launcher, no job (the Slurm variables are ignored with the rank's)
        let x = ExplicitRank {
            rank: Some(1),
            world_size: Some(2),
            ..none()
        };
        assert_eq!(detect(&both, &x).unwrap().job, None);
        assert_eq!(
            launcher_job(&env(&[("SLURM_JOBID", "9")]), LauncherKind::Slurm).as_deref(),
            Some("slurm:9")
        );
    }

    #[test]
    fn slurm_old_name_for_the_task_count() {
        let e = env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NPROCS", "2"),
            ("SLURM_LOCALID", "0"),
        ]);
        let r = detect(&e, &none()).unwrap();
        assert_eq!((r.rank, r.world_size), (0, 2));
        assert!(r.source_vars.contains("SLURM_NPROCS"));
    }

    #[test]
    fn one_gpu_per_task_maps_to_device_zero() {
        let e = env(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_LOCALID", "1"),
            ("CUDA_VISIBLE_DEVICES", "1"),
        ]);
        let r = detect(&e, &none()).unwrap();
        assert_eq!((r.local_rank, r.gpu), (1, 0));
        assert!(
            r.describe()
                .contains("CUDA_VISIBLE_DEVICES=1 leaves this process one GPU"),
            "{}",
            r.describe()
        );
        let e2 = env(&[
            ("SLURM_PROCID", "2"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_LOCALID", "2"),
            ("CUDA_VISIBLE_DEVICES", "0,1"),
        ]);
        assert!(err(&e2, &none()).contains("shows 2 GPUs"));
    }

    #[test]
    fn open_mpi() {
        let e = env(&[
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ]);
        let r = detect(&e, &none()).unwrap();
        assert_eq!((r.rank, r.world_size, r.local_rank), (5, 8, 1));
        assert_eq!(r.source, LauncherKind::OpenMpi);
        assert_eq!(
            r.describe(),
            "rank 5 of 8 (local GPU 1) from Open MPI \
             (OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE/OMPI_COMM_WORLD_LOCAL_RANK)"
        );
    }

    #[test]
    fn pmi() {
        let e = env(&[
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "2"),
            ("MPI_LOCALRANKID", "0"),
        ]);
        let r = detect(&e, &none()).unwrap();
        assert_eq!((r.rank, r.world_size, r.local_rank), (1, 2, 0));
        assert_eq!(r.source, LauncherKind::Pmi);
        // PMI without a local rank: the user must say which GPU.
        let e = env(&[("PMI_RANK", "1"), ("PMI_SIZE", "2")]);
        let msg = err(&e, &none());
        assert!(msg.contains("pass --local-rank"), "{msg}");
        let x = ExplicitRank {
            local_rank: Some(0),
            ..none()
        };
        let r = detect(&e, &x).unwrap();
        assert_eq!((r.rank, r.local_rank), (1, 0));
        assert_eq!(
            r.describe(),
            "rank 1 of 2 (local GPU 0) from PMI (MPICH/Intel MPI) \
             (PMI_RANK/PMI_SIZE, local rank from --local-rank)"
        );
    }

    #[test]
    fn innermost_launcher_wins_and_the_others_are_named() {
        // torchrun under srun: torchrun's per-GPU rank, not Slurm's per-node task.
        let e = env(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_LOCALID", "0"),
        ]);
        let r = detect(&e, &none()).unwrap();
        assert_eq!((r.rank, r.source), (3, LauncherKind::Torchrun));
        assert_eq!(r.shadowed, vec![LauncherKind::Slurm]);
        assert!(r.describe().ends_with("ignored the variables of Slurm"));
        // mpirun inside an sbatch script: every process inherits SLURM_PROCID=0.
        let e = env(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
        ]);
        let r = detect(&e, &none()).unwrap();
        assert_eq!(
            (r.rank, r.world_size, r.source),
            (1, 2, LauncherKind::OpenMpi)
        );
    }

    #[test]
    fn flags_win_over_the_environment() {
        let e = env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "0"),
            ("MASTER_ADDR", "node1"),
            ("MASTER_PORT", "29500"),
        ]);
        let x = ExplicitRank {
            rank: Some(1),
            world_size: Some(2),
            local_rank: Some(1),
            rendezvous: Some(Endpoint::parse("127.0.0.1:4000").unwrap()),
        };
        let r = detect(&e, &x).unwrap();
        assert_eq!((r.rank, r.world_size, r.local_rank), (1, 2, 1));
        assert_eq!(r.source, LauncherKind::Flags);
        assert_eq!(
            r.describe(),
            "rank 1 of 2 (local GPU 1) from flags (--rank/--world-size/--local-rank); \
             ignored the variables of torchrun"
        );
        assert_eq!(
            r.describe_rendezvous(),
            "rendezvous at 127.0.0.1:4000 from --rendezvous"
        );
        // Broken launcher variables do not matter when flags are given.
        let broken = env(&[("RANK", "x")]);
        assert!(detect(&broken, &x).is_ok());
    }

    #[test]
    fn flags_without_local_rank_use_the_rank_and_say_so() {
        let x = ExplicitRank {
            rank: Some(1),
            world_size: Some(2),
            ..none()
        };
        let r = detect(&BTreeMap::new(), &x).unwrap();
        assert_eq!((r.local_rank, r.gpu), (1, 1));
        assert_eq!(
            r.describe(),
            "rank 1 of 2 (local GPU 1) from flags (--rank/--world-size); \
             no --local-rank, so the local GPU is the rank"
        );
    }

    #[test]
    fn partial_variables_are_refused() {
        let msg = err(&env(&[("RANK", "1")]), &none());
        assert!(msg.contains("RANK=1 is set but WORLD_SIZE is not"), "{msg}");
        let msg = err(&env(&[("SLURM_NTASKS", "2")]), &none());
        assert!(
            msg.contains("SLURM_NTASKS=2 is set but SLURM_PROCID is not"),
            "{msg}"
        );
        let msg = err(&env(&[("LOCAL_RANK", "0")]), &none());
        assert!(msg.contains("LOCAL_RANK is set, but no rank"), "{msg}");
        let msg = err(&env(&[("RANK", "one"), ("WORLD_SIZE", "2")]), &none());
        assert!(msg.contains("RANK=one is not a whole number"), "{msg}");
        let x = ExplicitRank {
            rank: Some(1),
            ..none()
        };
        assert!(err(&BTreeMap::new(), &x).contains("--rank needs --world-size"));
        let x = ExplicitRank {
            world_size: Some(2),
            ..none()
        };
        assert!(err(&BTreeMap::new(), &x).contains("--world-size needs --rank"));
    }

    #[test]
    fn nothing_at_all_says_how_to_give_a_rank() {
        let msg = err(&BTreeMap::new(), &none());
        assert!(
            msg.starts_with("no rank given: pass --rank R --world-size N"),
            "{msg}"
        );
        assert!(msg.contains("OMPI_COMM_WORLD_RANK"), "{msg}");
    }

    #[test]
    fn impossible_ranks_are_refused() {
        let e = env(&[("RANK", "2"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")]);
        let msg = err(&e, &none());
        assert!(msg.contains("rank 2 is not below world size 2"), "{msg}");
        let e = env(&[("RANK", "0"), ("WORLD_SIZE", "0"), ("LOCAL_RANK", "0")]);
        assert!(err(&e, &none()).contains("world size 0"));
        let x = ExplicitRank {
            rank: Some(0),
            world_size: Some(2),
            local_rank: Some(2),
            rendezvous: None,
        };
        assert!(err(&BTreeMap::new(), &x).contains("local rank 2 is not below world size 2"));
    }

    #[test]
    fn master_addr_and_port_must_come_together() {
        let base = [("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")];
        let mut e = env(&base);
        e.insert("MASTER_ADDR".into(), "node1".into());
        assert!(err(&e, &none()).contains("MASTER_PORT is not"));
        let mut e = env(&base);
        e.insert("MASTER_PORT".into(), "29500".into());
        assert!(err(&e, &none()).contains("MASTER_ADDR is not"));
        let mut e = env(&base);
        e.insert("MASTER_ADDR".into(), "node1".into());
        e.insert("MASTER_PORT".into(), "99999".into());
        assert!(err(&e, &none()).contains("not a TCP port"));
    }
}
