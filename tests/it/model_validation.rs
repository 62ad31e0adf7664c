//! Held-out validation of the cost model on the public nccl-tests tables: the results file
//! `results/public/validation.txt` is what `model validate` prints now (its first line is the
//! command; the test runs it again and compares), it covers every nccl-tests table of
//! `tests/data/public-nccl/`, and every table's leave-one-size-out median error is within the
//! acceptance bound of 10%.

use crate::common;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn public_validation_file_is_what_the_command_prints_and_every_table_is_within_10_percent() {
    let file = std::fs::read_to_string(format!("{ROOT}/results/public/validation.txt")).unwrap();
    let (head, body) = file.split_once('\n').unwrap();
    let cmd = head
        .strip_prefix("$ verifybench ")
        .expect("the file's first line is the command that printed it");
    let args: Vec<&str> = cmd.split_whitespace().collect();
    // Every nccl-tests table in the public set is in the command (S10 is a markdown table
    // without a `# nThread` header, which nccl-tests output always has).
    let dir = format!("{ROOT}/tests/data/public-nccl");
    let mut covered = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().and_then(|x| x.to_str()) != Some("txt") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        if !text.contains("# nThread") {
            continue;
        }
        let rel = format!(
            "tests/data/public-nccl/{}",
            p.file_name().unwrap().to_string_lossy()
        );
        assert!(args.contains(&rel.as_str()), "{rel} is not validated");
        covered += 1;
    }
    assert_eq!(covered, 4);
    let o = common::vb().current_dir(ROOT).args(&args).output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        stdout, body,
        "results/public/validation.txt is stale: regenerate it with its first line's command"
    );
    // The leave-one-size-out rows: `label | op | n | rate | sizes | median% | max% | yes/NO`.
    // S01 1, S02 2 (all_reduce, all_gather), S03 3 runs, S13 2 runs: 8 tables.
    let rows: Vec<Vec<&str>> = body
        .lines()
        .filter(|l| l.starts_with("tests/data/") && l.contains(" | "))
        .map(|l| l.split(" | ").collect())
        .collect();
    assert_eq!(rows.len(), 8, "{body}");
    for r in rows {
        let med: f64 = r[5].trim_end_matches('%').parse().unwrap();
        assert!(med <= 10.0, "{}: leave-one-size-out median {med}%", r[0]);
        assert_eq!(r[7], "yes");
    }
}
