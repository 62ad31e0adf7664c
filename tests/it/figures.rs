//! Every figure of results/README.md's tables is in the results file(s) its row names.
//!
//! README.md's bold figures are checked by `cli_examples::readme_figures_are_in_the_results_files_it_names`;
//! this test reads the index of results/: each table row `| FILES | command | what it shows |`
//! under a `## DIR/:` heading names its files (backticked, with `{a,b}` alternatives, a `*` or a
//! folder `x/`), and every time or rate in the last cell (a number followed by `us`, `ms`,
//! `GB/s` or `x`) must appear literally in one of those files. A time quoted in ms passes when
//! the file holds it in us with the quoted rounding (13.9 ms for 13933.8 us): the files print
//! microseconds. Figures after the word `target`, `saves` or `targets` are the requirement or a
//! difference of two quoted figures, not a reading, and are skipped.

use std::path::{Path, PathBuf};

fn expand(p: &str) -> Vec<String> {
    if let (Some(a), Some(b)) = (p.find('{'), p.find('}')) {
        return p[a + 1..b]
            .split(',')
            .flat_map(|alt| expand(&format!("{}{alt}{}", &p[..a], &p[b + 1..])))
            .collect();
    }
    vec![p.to_string()]
}

/// The files `pat` names under `dir`: a folder gives every file in it, `*` any run of
/// characters of a file name.
fn files_of(dir: &Path, pat: &str) -> Vec<PathBuf> {
    let full = dir.join(pat.trim_end_matches('/'));
    if full.is_dir() {
        return std::fs::read_dir(&full)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
    }
    if full.is_file() {
        return vec![full];
    }
    let pat = pat.trim_end_matches('/');
    let Some((pre, post)) = pat.split_once('*') else {
        return vec![];
    };
    let (sub, pre) = match pre.rsplit_once('/') {
        Some((s, p)) => (dir.join(s), p.to_string()),
        None => (dir.to_path_buf(), pre.to_string()),
    };
    let Ok(rd) = std::fs::read_dir(&sub) else {
        return vec![];
    };
    rd.map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with(&pre) && n.ends_with(post)
        })
        .flat_map(|p| {
            if p.is_dir() {
                files_of(&p, "")
            } else {
                vec![p]
            }
        })
        .collect()
}

/// `fig` (a number as quoted, unit `unit`) is in `text`: literally, or for ms as microseconds
/// that round to it.
fn holds(text: &str, fig: &str, unit: &str) -> bool {
    if text.contains(fig) {
        return true;
    }
    if unit != "ms" {
        return false;
    }
    let decimals = fig.split_once('.').map_or(0, |(_, d)| d.len());
    let want: f64 = fig.parse().unwrap();
    let num = regex::Regex::new(r"\d+\.\d+|\d+").unwrap();
    let found = num.find_iter(text).any(|m| {
        let us: f64 = m.as_str().parse().unwrap();
        us >= 100.0 && format!("{:.*}", decimals, us / 1000.0) == format!("{:.*}", decimals, want)
    });
    found
}

#[test]
fn results_readme_figures_are_in_the_files_each_row_names() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
    let index = std::fs::read_to_string(root.join("README.md")).unwrap();
    let heading = regex::Regex::new(r"^## ([A-Za-z0-9_]+)/:").unwrap();
    let tick = regex::Regex::new(r"`([^`]+)`").unwrap();
    let fig = regex::Regex::new(r"(?:^|[^\w.])(\d[\d,]*\.\d+|\d+) ?(us|ms|GB/s|x)\b").unwrap();
    let skip = regex::Regex::new(r"(target|targets|saves) $").unwrap();
    let (mut dir, mut checked, mut missing) = (None, 0, vec![]);
    for line in index.lines() {
        if let Some(c) = heading.captures(line) {
            dir = Some(root.join(&c[1]));
            continue;
        }
        let Some(d) = dir.as_ref().filter(|_| line.starts_with("| `")) else {
            continue;
        };
        let cells: Vec<&str> = line.split(" | ").collect();
        let files: Vec<PathBuf> = tick
            .captures_iter(cells[0])
            .flat_map(|c| expand(&c[1]))
            .flat_map(|p| files_of(d, &p))
            .collect();
        assert!(!files.is_empty(), "no file for the row {}", cells[0]);
        let text: String = files
            .iter()
            .map(|f| String::from_utf8_lossy(&std::fs::read(f).unwrap()).into_owned())
            .collect();
        let shows = cells[cells.len() - 1];
        for c in fig.captures_iter(shows) {
            let m = c.get(1).unwrap();
            if skip.is_match(&shows[..m.start()]) {
                continue;
            }
            checked += 1;
            if !holds(&text, m.as_str(), &c[2]) {
                missing.push(format!("{} {} (row {})", m.as_str(), &c[2], cells[0]));
            }
        }
    }
    assert!(checked >= 50, "only {checked} figures read");
    assert!(
        missing.is_empty(),
        "not in the files named:\n{}",
        missing.join("\n")
    );
}
