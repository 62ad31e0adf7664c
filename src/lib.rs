//! verifybench: replays the collective pattern of a speculative-decoding verify step of a
//! tensor-parallel model over NCCL, measures it, and turns it into a break-even.
//!
//! Data flows top to bottom: `cli` parses flags into a request; `model` turns a model into a
//! schedule; `launch` starts ranks; `comm` (the only module that touches cudarc) runs
//! collectives; `measure` times them; `sweep`, `costmodel`, `speculative` and `report` build on
//! those. Pure logic never touches the GPU and is unit-tested on any machine.

pub mod cli;
pub mod comm;
pub mod costmodel;
pub mod error;
pub mod inspect;
pub mod launch;
pub mod measure;
pub mod model;
pub mod report;
pub mod speculative;
pub mod sweep;
pub mod trace;
pub mod units;
