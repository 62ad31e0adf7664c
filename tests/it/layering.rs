//! The layering rules, checked on the sources:
//! - only `src/cli/` and `src/main.rs` name clap or import from `crate::cli`; every other module
//!   works on the library's plain requests;
//! - every import between the top-level modules points down [`TABLE`]: each module may import
//!   only the modules its row names, and every row names only modules below it (so the modules
//!   form no circle);
//! - no two files import each other in a circle (a `pub use` re-export is a folder's interface,
//!   not a dependency, and is not counted).
//!
//! Test code (every item marked `#[cfg(test)]`, wherever it stands in a file: a `mod tests`
//! block, a `use` line that brings a private helper into a test module's reach; and `tests.rs`
//! files) may use any module: it is not part of the library's dependency structure.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Whether a line of Rust names clap or the cli module.
fn names_cli_or_clap(line: &str) -> bool {
    let l = line.trim_start();
    if l.starts_with("//") {
        return false;
    }
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        regex::Regex::new(r"\bclap::|\buse clap\b|\bcrate::cli\b|\bverifybench::cli\b").unwrap()
    })
    .is_match(l)
}

#[test]
fn the_detector_sees_what_it_must_and_nothing_else() {
    assert!(names_cli_or_clap("use clap::Parser;"));
    assert!(names_cli_or_clap("#[derive(clap::Args)]"));
    assert!(names_cli_or_clap("use crate::cli::args::GpuArgs;"));
    assert!(names_cli_or_clap("    crate::cli::verify::runs(a)"));
    assert!(!names_cli_or_clap(
        "//! cli/ turns flags into requests; clap lives there"
    ));
    assert!(!names_cli_or_clap("use crate::client::Thing;"));
}

#[test]
fn nothing_outside_cli_and_main_names_clap_or_cli() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    assert!(
        files.len() > 50,
        "found the sources ({} files)",
        files.len()
    );
    let mut bad = vec![];
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        if rel.starts_with("cli") || rel == Path::new("main.rs") {
            continue;
        }
        for (i, line) in std::fs::read_to_string(f).unwrap().lines().enumerate() {
            if names_cli_or_clap(line) {
                bad.push(format!("src/{}:{}: {}", rel.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "library code names clap or crate::cli:\n{}",
        bad.join("\n")
    );
}

/// Every subcommand of the command line, hidden ones included (`__rank` as `rank`), has its
/// home in `src/commands/` (`<name>.rs` or `<name>/mod.rs`), and everything there besides
/// `mod.rs` is the home of a subcommand.
#[test]
fn every_subcommand_has_its_home_in_commands() {
    use clap::CommandFactory;
    let names: BTreeSet<String> = verifybench::cli::Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().trim_start_matches('_').to_string())
        .collect();
    for expected in ["plan", "verify", "model", "rank", "worker", "explain"] {
        assert!(names.contains(expected), "{expected} in {names:?}");
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/commands");
    let missing: Vec<_> = names
        .iter()
        .filter(|n| !dir.join(format!("{n}.rs")).is_file() && !dir.join(n).join("mod.rs").is_file())
        .collect();
    assert!(
        missing.is_empty(),
        "subcommands without a home in src/commands/: {missing:?}"
    );
    let strays: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .filter(|n| n != "mod" && !names.contains(n))
        .collect();
    assert!(
        strays.is_empty(),
        "src/commands/ holds what no subcommand is: {strays:?}"
    );
}

/// The files git tracks outside `results/` (an empty list where git or the checkout's history is
/// not there, as in a source archive).
fn tracked_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("git")
        .args(["ls-files", "-z", "--", ".", ":!results"])
        .current_dir(root)
        .output();
    match out {
        Ok(o) if o.status.success() => o
            .stdout
            .split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| root.join(String::from_utf8_lossy(s).as_ref()))
            .collect(),
        _ => vec![],
    }
}

#[test]
fn no_empty_file_is_tracked_outside_results() {
    let files = tracked_files();
    if files.is_empty() {
        // Not a git checkout: nothing to check, and say so rather than pass in silence.
        eprintln!("not a git checkout: the empty-file check has nothing to read");
        return;
    }
    let empty: Vec<_> = files
        .iter()
        .filter(|f| std::fs::metadata(f).is_ok_and(|m| m.is_file() && m.len() == 0))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        empty.is_empty(),
        "empty files are tracked (litter a run left behind?): {empty:?}"
    );
}

/// The top-level modules of `src/`, top to bottom, each with the modules it may import. A
/// module added to `src/` needs a row; a new import between modules needs its name in the
/// importing row, and may only point down.
#[rustfmt::skip]
const TABLE: &[(&str, &[&str])] = &[
    ("main", &["cli", "error"]),
    ("cli", &["commands", "choose", "explain", "sweep", "compare", "report", "speculative", "machine", "backend",
        "launch", "impls", "costmodel", "trace", "evidence", "request", "comm", "measure", "model",
        "inspect", "output", "nccl_list", "nccl_tests", "record", "units", "util", "error"]),
    ("commands", &["choose", "explain", "sweep", "compare", "report", "speculative", "machine", "backend",
        "launch", "costmodel", "trace", "evidence", "request", "comm", "measure", "model", "inspect",
        "output", "nccl_tests", "record", "units", "util", "error"]),
    ("explain", &["choose", "sweep", "speculative", "costmodel", "trace", "evidence", "request", "measure",
        "model", "output", "record", "util", "error"]),
    ("choose", &["sweep", "machine", "backend", "launch", "impls", "costmodel", "request", "comm",
        "measure", "model", "output", "record", "units", "util", "error"]),
    ("sweep", &["report", "backend", "launch", "costmodel", "request", "comm", "measure", "model",
        "inspect", "output", "nccl_list", "record", "units", "util", "error"]),
    ("compare", &["report", "measure", "model", "output", "nccl_tests", "record", "units", "util",
        "error"]),
    ("report", &["speculative", "machine", "costmodel", "evidence", "request", "measure", "model",
        "record", "units", "util", "error"]),
    ("speculative", &["evidence", "model", "record", "units", "util", "error"]),
    ("machine", &["launch", "request", "comm", "inspect", "record", "util", "error"]),
    ("backend", &["launch", "impls", "costmodel", "trace", "request", "comm", "measure", "model",
        "record", "util", "error"]),
    ("launch", &["impls", "trace", "request", "comm", "measure", "model", "output", "record",
        "units", "util", "error"]),
    ("impls", &["comm", "model", "record", "error"]),
    ("costmodel", &["request", "comm", "measure", "model", "nccl_list", "nccl_tests", "record",
        "units", "util", "error"]),
    ("trace", &["evidence", "measure", "model", "output", "record", "units", "util", "error"]),
    ("evidence", &["measure", "model", "record", "util", "error"]),
    ("request", &["measure", "model", "output", "record", "units", "util", "error"]),
    ("comm", &["measure", "model", "record", "units", "util", "error"]),
    ("measure", &["model", "record", "units", "util", "error"]),
    ("model", &["record", "units", "util", "error"]),
    ("inspect", &["util", "error"]),
    ("output", &["util", "error"]),
    ("nccl_list", &[]),
    ("nccl_tests", &["util", "error"]),
    ("record", &["util", "error"]),
    ("units", &["error"]),
    ("util", &["error"]),
    ("error", &[]),
];

/// A source file's library code: comments blanked, and every item marked `#[cfg(test)]` cut
/// (a `use` line, a `mod` block or `mod name;`, a helper `fn`), wherever it stands in the file.
fn library_code(text: &str) -> String {
    let mut kept = String::with_capacity(text.len());
    let mut rest = text;
    const ATTR: &str = "#[cfg(test)]";
    while let Some(i) = rest.find(ATTR) {
        kept.push_str(&rest[..i]);
        rest = &rest[i + ATTR.len()..];
        // Only an attribute that starts its line (not one named in a comment or a string).
        let line_start = kept.rfind('\n').map_or(0, |n| n + 1);
        if kept[line_start..].trim().is_empty() {
            rest = &rest[test_item_len(rest)..];
        } else {
            kept.push_str(ATTR);
        }
    }
    kept.push_str(rest);
    kept.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The length of the item that starts `code` (after its `#[cfg(test)]`): any further
/// attributes, then everything up to the `;` or the closing `}` at the item's own depth (a
/// `use a::{b, c};` ends at its `}`, which leaves a harmless `;`).
/// Brackets inside string and character literals and comments are not counted (the code is
/// read as [`crate::house::code_only`] leaves it); the item also ends before a bracket that
/// closes one it did not open (an attribute on the last field of a struct).
fn test_item_len(code: &str) -> usize {
    let code = crate::house::code_only(code);
    let mut depth = 0i32;
    for (i, c) in code.bytes().enumerate() {
        match c {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                if depth == 0 {
                    return i;
                }
                depth -= 1;
                if depth == 0 && c == b'}' {
                    return i + 1;
                }
            }
            b';' if depth == 0 => return i + 1,
            _ => {}
        }
    }
    code.len()
}

/// The module path of a file of `src/` (`comm/p2p/mod.rs` -> `[comm, p2p]`).
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_string());
    }
    parts
}

/// Expands a `use` tree (`a::{b, c::{d, e}}`) into its paths.
fn expand_use(tree: &str) -> Vec<String> {
    // White space kept only inside `X as Y`.
    let words: Vec<&str> = tree.split_whitespace().collect();
    let mut t = String::new();
    for w in words {
        let joins = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        if joins(t.chars().last()) && joins(w.chars().next()) {
            t.push(' ');
        }
        t.push_str(w);
    }
    let Some(open) = t.find("::{") else {
        return vec![t];
    };
    let (prefix, body) = (&t[..open], &t[open + 3..t.len().saturating_sub(1)]);
    let (mut parts, mut depth, mut cur) = (vec![], 0i32, String::new());
    for c in body.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if c == ',' && depth == 0 {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    parts.push(cur);
    parts
        .iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand_use(p))
        .map(|p| format!("{prefix}::{p}"))
        .collect()
}

/// Every path a file's library code names through `crate::`, `super::` or `self::` (or a child
/// module), outside `pub use` re-exports, each as written.
fn named_paths(code: &str, children: &BTreeSet<String>) -> Vec<String> {
    static USE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    static PATH: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let use_re = USE.get_or_init(|| {
        regex::Regex::new(r"(?s)(\bpub(?:\([a-z]+\))?\s+)?\buse\s+([^;]+);").unwrap()
    });
    let path_re = PATH.get_or_init(|| {
        regex::Regex::new(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)").unwrap()
    });
    let mut out = vec![];
    for c in use_re.captures_iter(code) {
        if c.get(1).is_some() {
            continue;
        }
        for p in expand_use(&c[2]) {
            let first = p.split("::").next().unwrap_or("");
            if matches!(first, "crate" | "super" | "self") || children.contains(first) {
                out.push(p);
            }
        }
    }
    let rest = use_re.replace_all(code, "");
    out.extend(path_re.captures_iter(&rest).map(|c| c[1].to_string()));
    out
}

/// The files of `src/` (as module paths) that a path named in `from` refers to: the longest
/// prefix of the path that is a module with a file.
fn resolve(
    from: &[String],
    path: &str,
    files: &BTreeMap<Vec<String>, PathBuf>,
) -> Option<Vec<String>> {
    let segs: Vec<&str> = path
        .split("::")
        .map(|s| s.split(" as ").next().unwrap_or(s))
        .collect();
    let mut base: Vec<String> = from.to_vec();
    let mut rest = &segs[..];
    match rest.first() {
        Some(&"crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some(&"self") => rest = &rest[1..],
        Some(&"super") => {
            while rest.first() == Some(&"super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => {}
    }
    let full: Vec<String> = base
        .into_iter()
        .chain(rest.iter().map(|s| s.to_string()))
        .collect();
    (0..=full.len())
        .rev()
        .map(|k| full[..k].to_vec())
        .find(|m| files.contains_key(m))
}

/// The library's files of `src/` (module path -> file), test-only `tests.rs` files left out.
fn library_files() -> BTreeMap<Vec<String>, PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = vec![];
    rust_files(&src, &mut all);
    all.into_iter()
        .filter(|f| f.file_name().is_some_and(|n| n != "tests.rs"))
        .map(|f| (module_of(f.strip_prefix(&src).unwrap()), f))
        .collect()
}

/// File -> the files it imports.
fn file_graph() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let files = library_files();
    let mut g = BTreeMap::new();
    for (m, f) in &files {
        let children: BTreeSet<String> = files
            .keys()
            .filter(|k| k.len() == m.len() + 1 && k.starts_with(m))
            .map(|k| k[m.len()].clone())
            .collect();
        let code = library_code(&std::fs::read_to_string(f).unwrap());
        let deps: BTreeSet<Vec<String>> = named_paths(&code, &children)
            .iter()
            .filter_map(|p| resolve(m, p, &files))
            .filter(|t| t != m)
            .collect();
        g.insert(m.clone(), deps);
    }
    g
}

fn show(m: &[String]) -> String {
    if m.is_empty() {
        "lib.rs".into()
    } else {
        m.join("/")
    }
}

#[test]
fn the_path_reader_resolves_use_trees_and_relative_paths() {
    assert_eq!(
        expand_use("crate::a::{b, c::{d, E as F}}"),
        ["crate::a::b", "crate::a::c::d", "crate::a::c::E as F"]
    );
    let children: BTreeSet<String> = ["child".to_string()].into();
    let code = "use crate::x::Y;\npub use child::Z;\nuse child::W;\nfn f() { super::q::r(); }";
    assert_eq!(
        named_paths(code, &children),
        ["crate::x::Y", "child::W", "super::q::r"]
    );
    let files: BTreeMap<Vec<String>, PathBuf> = [
        vec![],
        vec!["a".into()],
        vec!["a".into(), "b".into()],
        vec!["c".into()],
    ]
    .into_iter()
    .map(|k| (k, PathBuf::new()))
    .collect();
    let ab = vec!["a".to_string(), "b".to_string()];
    assert_eq!(resolve(&ab, "super::Thing", &files), Some(vec!["a".into()]));
    assert_eq!(
        resolve(&ab, "crate::c::d::E", &files),
        Some(vec!["c".into()])
    );
    assert_eq!(resolve(&ab, "self::x", &files), Some(ab.clone()));
    assert_eq!(
        resolve(&ab, "crate::a::Z as W", &files),
        Some(vec!["a".into()])
    );
    assert_eq!(
        library_code("use a; // use b;\n#[cfg(test)]\nmod tests { use c; }"),
        "use a; "
    );
}

#[test]
fn test_only_items_anywhere_in_a_file_are_not_library_code() {
    // A test-only `use` line between library imports, the `use` tree form, and a `mod` block
    // in the middle of a file with brackets in strings, characters and comments inside it.
    let text = "use crate::a::A;\n\
                #[cfg(test)]\n\
                use crate::b::{B, C};\n\
                #[cfg(test)]\n\
                use {\n    x::X,\n    y::Y,\n};\n\
                use crate::c::D;\n\
                #[cfg(test)]\n\
                #[allow(dead_code)]\n\
                mod helpers {\n    \
                    use crate::e::E;\n    \
                    fn f<'a>(s: &'a str) -> [u8; 2] { let _ = (\"}\", '}', '\\'', r#\"{\"#); [0; 2] } // }\n\
                }\n\
                #[cfg(test)]\n\
                mod tests;\n\
                /// Not `#[cfg(test)]` use crate::h::H;\n\
                pub fn g() { crate::f::F::new() }\n";
    let code = library_code(text);
    let children = BTreeSet::new();
    assert_eq!(
        named_paths(&code, &children),
        ["crate::a::A", "crate::c::D", "crate::f::F::new"],
        "library code read as:\n{code}"
    );
    // A test-only field ends at its struct's closing brace, which stays.
    assert_eq!(
        library_code("struct S {\n    #[cfg(test)]\n    t: u8,\n}\nuse crate::g::G;"),
        "struct S {\n    }\nuse crate::g::G;"
    );
}

#[test]
fn the_table_points_down_and_names_every_module() {
    let order: Vec<&str> = TABLE.iter().map(|(m, _)| *m).collect();
    for (i, (m, allowed)) in TABLE.iter().enumerate() {
        for a in *allowed {
            let j = order.iter().position(|o| o == a);
            assert!(
                j.is_some_and(|j| j > i),
                "the table lets {m} import {a}, which is not below it"
            );
        }
    }
    let tops: BTreeSet<String> = library_files()
        .keys()
        .filter_map(|k| k.first().cloned())
        .collect();
    for t in &tops {
        assert!(
            order.contains(&t.as_str()),
            "src/{t} has no row in the layering table"
        );
    }
}

#[test]
fn every_import_between_modules_points_down_the_table() {
    let rows: BTreeMap<&str, &[&str]> = TABLE.iter().copied().collect();
    let mut bad = vec![];
    for (file, deps) in file_graph() {
        let Some(from) = file.first() else { continue };
        for d in deps {
            let Some(to) = d.first() else { continue };
            if to != from
                && !rows
                    .get(from.as_str())
                    .is_some_and(|r| r.contains(&to.as_str()))
            {
                bad.push(format!("{} imports {}", show(&file), show(&d)));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "imports the layering table does not allow (point them down, or add the module to the \
         importing row if it lies below):\n{}",
        bad.join("\n")
    );
}
#[test]
fn no_files_import_each_other_in_a_circle() {
    let g = file_graph();
    // Tarjan's strongly connected components; a component of more than one file is a circle.
    struct State<'a> {
        g: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        circles: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Vec<String>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        for w in s.g.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.stack.contains(&w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = vec![];
            loop {
                let w = s.stack.pop().unwrap();
                comp.push(show(w));
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.circles.push(comp);
            }
        }
    }
    let mut s = State {
        g: &g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: vec![],
        circles: vec![],
    };
    for v in g.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    assert!(
        s.circles.is_empty(),
        "files that import each other in a circle:\n{}",
        s.circles
            .iter()
            .map(|c| c.join(" <-> "))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
