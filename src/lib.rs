//! verifybench: replays the collective pattern of a speculative-decoding verify step of a
//! tensor-parallel model over NCCL, measures it, and turns it into a break-even.
//!
//! Data flows top to bottom. `cli` (with `main.rs`, the only code that names clap) parses flags
//! into a plain request of [`request`] (or of the command that runs it, `commands::<name>`, or
//! `costmodel::ModelSettings`) and makes one call into [`commands`], the one home of every
//! command (a verify or collective request becomes a record through one [`backend`]: NCCL,
//! the cost model, or a mock);
//! `model` turns a model into a schedule; `launch` starts ranks; `comm` (the only module that
//! touches cudarc) runs collectives; `measure` times them; `sweep`, `costmodel`, `speculative`,
//! `compare` and `report` (renderers only) build on those; [`record`] (the result records and
//! their files) and [`util`] (host, time, environment) sit at the bottom. Pure logic never
//! touches the GPU and is unit-tested on any machine.

// The library's surface is what the binary, the benchmarks and the integration tests use;
// everything else is `pub(crate)`, and the lint keeps new code so (`scripts/narrow-pub.py`
// narrows a tree again).
#![warn(unreachable_pub)]

pub mod backend;
pub(crate) mod choose;
pub mod cli;
pub mod comm;
pub mod commands;
pub(crate) mod compare;
pub mod costmodel;
pub mod error;
pub(crate) mod evidence;
pub(crate) mod explain;
pub(crate) mod impls;
pub(crate) mod inspect;
pub mod launch;
pub(crate) mod machine;
pub mod measure;
pub mod model;
pub(crate) mod nccl_list;
pub(crate) mod nccl_tests;
pub(crate) mod output;
pub mod record;
pub mod report;
pub mod request;
pub(crate) mod speculative;
pub mod sweep;
pub mod trace;
pub(crate) mod units;
pub mod util;
