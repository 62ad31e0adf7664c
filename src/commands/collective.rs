//! `verifybench collective`: one collective over a size range on the backend `resolve` picks,
//! its fresh runs, exports, table and exit code.

use super::{print_result, repeated, wrong_results};
use crate::backend::{self, Backend};
use crate::record::Body;
use crate::report::text;
use crate::request::CollectiveRequest;

/// Runs `verifybench collective` with the backend `resolve` picks.
pub(crate) fn run(a: &CollectiveRequest) -> anyhow::Result<i32> {
    a.files().check()?;
    crate::launch::run::check_gpu_flags(&a.gpu, None)?;
    run_with(&*backend::resolve(a.backend, crate::output::quiet()), a)
}

/// `collective` on a given backend.
pub fn run_with(b: &dyn Backend, a: &CollectiveRequest) -> anyhow::Result<i32> {
    let record = repeated(b.kind(), a.fresh_runs, |i| {
        let mut r = a.clone();
        r.fresh_run = i;
        b.collective(&r)
    })?;
    a.export.write(std::slice::from_ref(&record))?;
    print_result(a.format, &record, text::collective_table)?;
    let Body::Collective(c) = &record.body else {
        unreachable!("collective produces collective records")
    };
    wrong_results(
        c.rows
            .iter()
            .flat_map(|r| {
                [&r.eager, &r.graph]
                    .into_iter()
                    .chain(r.p2p.iter().flat_map(|t| [&t.eager, &t.graph]))
            })
            .flatten()
            .map(|t| t.wrong)
            .sum(),
    )
}
