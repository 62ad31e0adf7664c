//! All integration tests as modules of one test binary: one link of the library instead of one
//! per file. Each module is one area of the command line; `common` holds their shared helpers.

mod bounded_input;
mod cli_acceptance;
mod cli_bad_input;
mod cli_bounds;
mod cli_breakeven;
mod cli_breakeven_evidence;
mod cli_choose;
mod cli_compare;
mod cli_examples;
mod cli_explain;
mod cli_explain_evidence;
mod cli_file_identity;
mod cli_files;
mod cli_flags;
mod cli_hostgaps;
mod cli_impl;
mod cli_inspect;
mod cli_messages;
mod cli_model;
mod cli_model_env;
mod cli_model_nccl_tests;
mod cli_nccl_lib;
mod cli_numbers;
mod cli_output;
mod cli_parts_add_up;
mod cli_plan;
mod cli_report;
mod cli_report_breakeven;
mod cli_report_kinds;
mod cli_schedule;
mod cli_skew_replay;
mod cli_sweep;
mod cli_trace;
mod common;
mod explain_grid;
// The fake ELF of the `--nccl-lib` checks, shared with the library's unit tests.
#[allow(dead_code)]
#[path = "../support/fake_elf.rs"]
mod fake_elf;
mod figures;
mod golden_report;
mod house;
mod json_numbers;
mod layering;
mod model_validation;
mod one_answer;
mod plan_configs;
mod plan_cycle;
mod published_runs;
mod rendezvous;
mod schedule_hashes;
// Synthetic traces, shared with the benchmarks and the library's unit tests; not every helper
// is called here.
#[allow(dead_code)]
#[path = "../support/synth.rs"]
mod synth;
mod trace_export_ops;
mod trace_logpid;
mod trace_real;
