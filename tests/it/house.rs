//! The house rules that a reading of the sources can check:
//! - no function of `src/` is longer than [`MAX_FN_LINES`] lines, counted from the line of its
//!   `fn` keyword to the line of its closing brace, comments and blank lines included (a
//!   function that long does several things: split it along what they are);
//! - the "Where to change" section of docs/architecture.md stays true: every path it names in
//!   backticks exists, and every name in backticks in the parentheses right after a file's path
//!   is a word of that file ([`where_to_change`]).
//!
//! The sources are read with a small lexer ([`code_only`]) that blanks comments, strings, raw
//! strings and character literals, so that a brace inside one of them cannot move a
//! function's end.

use std::path::{Path, PathBuf};

/// The longest function the house allows, in lines.
const MAX_FN_LINES: usize = 150;

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

/// `text` with every comment, string (plain, byte, C and raw, with any number of `#`) and
/// character literal replaced by spaces, byte for byte, newlines kept: what is left is code,
/// at the same offsets and on the same lines. A lifetime (`'a`) is code.
pub fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let word_before = |i: usize| i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
    let mut i = 0;
    while i < b.len() {
        let start = i;
        i = match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => text[i..].find('\n').map_or(b.len(), |n| i + n),
            b'/' if b.get(i + 1) == Some(&b'*') => block_comment_end(b, i),
            b'r' | b'b' | b'c' if !word_before(i) && raw_string_at(b, i).is_some() => {
                let (hashes, open) = raw_string_at(b, i).unwrap();
                let close = format!("\"{}", "#".repeat(hashes));
                text[open..]
                    .find(&close)
                    .map_or(b.len(), |n| open + n + close.len())
            }
            b'b' | b'c' if !word_before(i) && b.get(i + 1) == Some(&b'"') => string_end(b, i + 1),
            b'"' => string_end(b, i),
            b'b' if !word_before(i) && b.get(i + 1) == Some(&b'\'') => {
                char_end(text, i + 1).unwrap_or(i + 1)
            }
            // a character literal, else a lifetime or a label (code)
            b'\'' => char_end(text, i).unwrap_or(i + 1),
            _ => i + 1,
        };
        // a literal or a comment is two bytes at least; one byte is code
        if i > start + 1 {
            blank(&mut out, start, i);
        }
    }
    String::from_utf8(out).expect("blanking keeps ASCII where it writes")
}

/// The offset after the block comment that starts at `i` (block comments nest).
fn block_comment_end(b: &[u8], mut i: usize) -> usize {
    let mut depth = 0;
    while i < b.len() {
        if b[i..].starts_with(b"/*") {
            depth += 1;
            i += 2;
        } else if b[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                break;
            }
        } else {
            i += 1;
        }
    }
    i
}

/// At `i` (an `r`, `br` or `cr` prefix): the number of `#` and the offset after the opening
/// quote, if a raw string starts there.
fn raw_string_at(b: &[u8], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if b[j] == b'b' || b[j] == b'c' {
        j += 1;
    }
    if b.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|c| **c == b'#').count();
    (b.get(j + hashes) == Some(&b'"')).then_some((hashes, j + hashes + 1))
}

/// The offset after the string whose opening quote is at `i`.
fn string_end(b: &[u8], i: usize) -> usize {
    let mut j = i + 1;
    while j < b.len() && b[j] != b'"' {
        j += if b[j] == b'\\' { 2 } else { 1 };
    }
    (j + 1).min(b.len())
}

/// The offset after the character literal whose quote is at `i`, or None for a lifetime.
fn char_end(text: &str, i: usize) -> Option<usize> {
    let rest = &text[i + 1..];
    let mut chars = rest.char_indices();
    let (_, c) = chars.next()?;
    if c == '\\' {
        // '\n', '\'', '\\', '\x7f', '\u{1F600}': the escaped character, then up to the quote
        return rest.get(2..)?.find('\'').map(|n| i + 1 + 2 + n + 1);
    }
    let (n, after) = chars.next()?;
    (after == '\'').then_some(i + 1 + n + 1)
}

/// Every function with a body in `code` (as [`code_only`] leaves it): its name, the line of
/// its `fn` keyword (1-based) and its length in lines up to its closing brace.
pub fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let b = code.as_bytes();
    let line_of = |i: usize| 1 + b[..i].iter().filter(|c| **c == b'\n').count();
    let is_word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = vec![];
    let mut i = 0;
    while let Some(n) = code[i..].find("fn") {
        let at = i + n;
        i = at + 2;
        if (at > 0 && is_word(b[at - 1])) || b.get(at + 2).is_some_and(|c| is_word(*c)) {
            continue;
        }
        // a name follows (`fn(u8) -> u8` is a type, not a function)
        let name_start = at + 2 + code[at + 2..].len() - code[at + 2..].trim_start().len();
        let name_len = b[name_start..].iter().take_while(|c| is_word(**c)).count();
        if name_len == 0 {
            continue;
        }
        let name = &code[name_start..name_start + name_len];
        // the body: the first `{` outside the signature's brackets, unless a `;` ends it first
        let mut depth = 0i32;
        let mut j = name_start + name_len;
        let body = loop {
            match b.get(j) {
                None => break None,
                Some(b'(' | b'[' | b'<') => depth += 1,
                Some(b')' | b']') => depth -= 1,
                Some(b'>') if b[j - 1] != b'-' && b[j - 1] != b'=' => depth -= 1,
                Some(b';') if depth == 0 => break None,
                Some(b'{') if depth == 0 => break Some(j),
                _ => {}
            }
            j += 1;
        };
        let Some(open) = body else { continue };
        let mut depth = 0i32;
        let mut k = open;
        while k < b.len() {
            match b[k] {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            k += 1;
        }
        out.push((name.to_string(), line_of(at), line_of(k) - line_of(at) + 1));
    }
    out
}

#[test]
fn the_lexer_blanks_what_is_not_code_and_keeps_the_lines() {
    let text = "fn a<'x>(s: &'x str) -> char { let _ = (\"}\\\"{\", '}', '\\'', b'{', r#\"}\"#, br\"{\", c\"}\"); '{' } // }\n\
                /* { /* nested } */ } */ fn b() {}\n";
    let code = code_only(text);
    assert_eq!(code.len(), text.len());
    assert_eq!(code.lines().count(), text.lines().count());
    assert_eq!(code.matches('{').count(), 2, "{code}");
    assert_eq!(code.matches('}').count(), 2, "{code}");
    // the lifetimes stay code
    assert!(code.starts_with("fn a<'x>(s: &'x str)"), "{code}");
    assert_eq!(functions(&code), [("a".into(), 1, 1), ("b".into(), 2, 1)]);
}

#[test]
fn functions_are_measured_from_their_fn_line_to_their_closing_brace() {
    let text = "trait T {\n    fn declared(&self);\n    fn given(&self) -> u8 {\n        1\n    }\n}\n\
                type F = fn(u8) -> u8;\n\
                pub(crate) fn outer<const N: usize>(f: impl Fn() -> [u8; 2]) -> Result<(), String>\n\
                where\n    [u8; N]: Sized,\n{\n    fn inner() {\n        let s = \"fn fake() {\";\n    }\n    Ok(())\n}\n";
    let found = functions(&code_only(text));
    assert_eq!(
        found,
        [
            ("given".to_string(), 3, 3),
            ("outer".to_string(), 8, 9),
            ("inner".to_string(), 12, 3),
        ]
    );
}

#[test]
fn no_function_in_src_is_longer_than_the_house_allows() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    files.sort();
    let mut seen = 0;
    let mut long = vec![];
    for f in &files {
        let code = code_only(&std::fs::read_to_string(f).unwrap());
        for (name, line, lines) in functions(&code) {
            seen += 1;
            if lines > MAX_FN_LINES {
                let rel = f.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap();
                long.push(format!(
                    "{}:{line}: fn {name}: {lines} lines",
                    rel.display()
                ));
            }
        }
    }
    assert!(seen > 1000, "found the functions of src/ ({seen})");
    assert!(
        long.is_empty(),
        "functions longer than {MAX_FN_LINES} lines (split them along what they do):\n{}",
        long.join("\n")
    );
}

/// The folders a path of the "Where to change" section starts with.
const DOC_ROOTS: &[&str] = &[
    "src/", "kernels/", "tests/", "scripts/", "docs/", "results/",
];

/// The references of a section of Markdown: each path in backticks (one of [`DOC_ROOTS`], no
/// space), with the names in backticks (identifiers, `a::b` allowed) of the parentheses that
/// follow it, across a line break if need be.
fn where_to_change(section: &str) -> Vec<(String, Vec<String>)> {
    let ident = |t: &str| {
        !t.is_empty()
            && !t.starts_with(|c: char| c.is_ascii_digit() || c == ':')
            && t.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    let ticked = |text: &str| -> Vec<(String, usize)> {
        let mut out = vec![];
        let mut rest = 0;
        while let Some(a) = text[rest..].find('`') {
            let open = rest + a + 1;
            let Some(b) = text[open..].find('`') else {
                break;
            };
            out.push((text[open..open + b].to_string(), open + b + 1));
            rest = open + b + 1;
        }
        out
    };
    let mut refs = vec![];
    for (t, end) in ticked(section) {
        if t.contains(' ') || !DOC_ROOTS.iter().any(|r| t.starts_with(r)) {
            continue;
        }
        let after = section[end..].trim_start();
        let mut names = vec![];
        if after.starts_with('(') {
            let mut depth = 0;
            let close = after.char_indices().find(|&(_, c)| {
                depth += match c {
                    '(' => 1,
                    ')' => -1,
                    _ => 0,
                };
                depth == 0
            });
            let inside = &after[1..close.map_or(after.len(), |(i, _)| i)];
            names = ticked(inside)
                .into_iter()
                .map(|(n, _)| n)
                .filter(|n| ident(n))
                .collect();
        }
        refs.push((t, names));
    }
    refs
}

/// What is wrong with one reference under `root`: a path that does not exist (for a path with
/// `*` or `<name>`, the folder before it), or a name that is no word of the file.
fn wrong_reference(root: &Path, path: &str, names: &[String]) -> Vec<String> {
    let cut = path.find(['*', '<']).map_or(path, |i| &path[..i]);
    let on_disk = root.join(cut);
    if !on_disk.exists() {
        return vec![format!("`{path}` does not exist")];
    }
    if cut != path || on_disk.is_dir() {
        return vec![];
    }
    let text = std::fs::read_to_string(&on_disk).unwrap_or_default();
    let word = |w: &str| {
        let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
        text.match_indices(w).any(|(i, _)| {
            !text[..i].ends_with(is_word) && !text[i + w.len()..].starts_with(is_word)
        })
    };
    names
        .iter()
        .filter(|n| !n.split("::").filter(|s| !s.is_empty()).all(word))
        .map(|n| format!("`{n}` is not in `{path}`"))
        .collect()
}

#[test]
fn the_reference_reader_finds_paths_and_the_names_paired_with_them() {
    let text = "A `src/lib.rs` (`unreachable_pub`, `no_such_name`; not `a b` nor `--flag`), then\n\
                `src/nope.rs`, `kernels/*.cu` and\n  `src/cli/<name>.rs`\n  (`x`), `plain`.";
    let refs = where_to_change(text);
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        refs,
        [
            (
                "src/lib.rs".into(),
                names(&["unreachable_pub", "no_such_name"])
            ),
            ("src/nope.rs".into(), vec![]),
            ("kernels/*.cu".into(), vec![]),
            ("src/cli/<name>.rs".into(), names(&["x"])),
        ]
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let wrong: Vec<String> = refs
        .iter()
        .flat_map(|(p, n)| wrong_reference(root, p, n))
        .collect();
    assert_eq!(
        wrong,
        [
            "`no_such_name` is not in `src/lib.rs`",
            "`src/nope.rs` does not exist"
        ]
    );
}

#[test]
fn where_to_change_names_files_and_names_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let start = doc
        .find("\n## Where to change\n")
        .expect("docs/architecture.md has a section \"Where to change\"");
    let body = &doc[start + 1..];
    let section = &body[..body[3..].find("\n## ").map_or(body.len(), |i| i + 3)];
    let refs = where_to_change(section);
    let names: usize = refs.iter().map(|(_, n)| n.len()).sum();
    assert!(
        refs.len() >= 40 && names >= 40,
        "the section names {} paths and {names} names",
        refs.len()
    );
    let wrong: Vec<String> = refs
        .iter()
        .flat_map(|(p, n)| wrong_reference(root, p, n))
        .collect();
    assert!(
        wrong.is_empty(),
        "docs/architecture.md, \"Where to change\":\n{}",
        wrong.join("\n")
    );
}
