//! Starting ranks: threads of this process, worker processes (the binary re-executes itself
//! with the hidden `__rank` command), or ranks started by an external launcher (torchrun, Slurm,
//! MPI) that meet through a TCP rendezvous. Ranks need guaranteed concurrency (NCCL init blocks
//! until all join), so each gets its own OS thread or process, never a pool task.
//!
//! Nothing hangs: workers report progress after each configuration and the parent gives up on
//! a run when a worker says nothing for `--timeout` seconds; a worker that fails makes the
//! parent kill the others (they would wait forever in NCCL), reap them, and name the rank.
//!
//! - [`run`]: the threads and processes launchers and the records of their jobs;
//!   [`devices`]: the GPU flags checked and the GPUs selected.
//! - [`job`]: what a rank runs; [`worker`]: the hidden `__rank` worker process;
//!   [`timeline`]: the per-collective pass's rank timings, their attribution and Chrome trace.
//! - [`external`], [`rendezvous`], [`external_worker`]: ranks of an external launcher, their
//!   TCP rendezvous, and one such rank's run (watchdog, rank 0's gathering).
//!
//! Not here: choosing between NCCL and the cost model ([`crate::backend`]), flags (`cli/`),
//! cudarc ([`crate::comm`]).

pub(crate) mod affinity;
pub(crate) mod devices;
pub(crate) mod external;
pub(crate) mod external_worker;
pub(crate) mod fault;
pub(crate) mod job;
pub mod rendezvous;
pub(crate) mod run;
pub(crate) mod timeline;
pub(crate) mod worker;

pub(crate) use job::{Fault, Job, RankResult};
pub(crate) use run::{collective, verify, LaunchSpec};
