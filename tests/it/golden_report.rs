//! `verifybench report` over the committed 2x H200 results (every `.json` file there, as the
//! README's command gives them) renders exactly the committed Markdown and SVGs
//! (results/h200x2/report/), except the line naming the build that rendered them. Guards every renderer and the record reader against an unnoticed change of output.

use crate::common;

use std::path::Path;

/// Every `.json` file in results/h200x2, in byte order: the README's command
/// `verifybench report results/h200x2/*.json -o report/` (a shell glob in the C locale). Among
/// them are files the report cannot render (env, the model profile), named in it as skipped.
fn inputs(dir: &Path) -> Vec<String> {
    common::listing(dir)
        .into_iter()
        .filter(|n| n.ends_with(".json"))
        .collect()
}

const OUTPUTS: &[&str] = &[
    "report.md",
    "collective_latency.svg",
    "tokens_per_s.svg",
    "verify_time.svg",
];

/// The file without its "Rendered by verifybench X (COMMIT)" line.
fn without_build_line(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .filter(|l| !l.starts_with("Rendered by verifybench "))
        .map(String::from)
        .collect()
}

#[test]
fn committed_results_render_the_committed_report_byte_for_byte() {
    let results = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/h200x2");
    let out = tempfile::tempdir().unwrap();
    common::vb()
        .current_dir(&results)
        .arg("report")
        .args(inputs(&results))
        .arg("-o")
        .arg(out.path())
        .assert()
        .success();
    let mut rendered: Vec<String> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    rendered.sort();
    let mut want: Vec<String> = OUTPUTS.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(rendered, want, "the report writes exactly these files");
    for name in OUTPUTS {
        let golden = without_build_line(&results.join("report").join(name));
        let now = without_build_line(&out.path().join(name));
        assert!(golden.len() > 10, "{name}: the committed file is not empty");
        if let Some(i) = (0..golden.len().max(now.len())).find(|&i| golden.get(i) != now.get(i)) {
            panic!(
                "{name} differs from the committed one at line {}:\n  committed: {:?}\n  rendered:  {:?}",
                i + 1,
                golden.get(i),
                now.get(i)
            );
        }
    }
    // the only line left out is the build line, and it is there
    let md = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert_eq!(
        md.lines()
            .filter(|l| l.starts_with("Rendered by verifybench "))
            .count(),
        1
    );
}
