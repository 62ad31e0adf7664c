//! A byte-level filter in front of the JSON parser: drops trace events the analysis can never
//! use before anything tokenizes them.
//!
//! A server's profile is mostly host-side events (`python_function`, `cpu_op`, flow arrows)
//! that [`super::reader`] skips after serde has tokenized every one of their fields. This
//! filter passes the document through unchanged except inside the `traceEvents` array, where it
//! finds each event object's extent (strings, escapes and brace depth tracked, `memchr` to jump
//! between the bytes that matter) and looks at its raw bytes only: an event is kept when its
//! `"cat"` is a GPU or runtime category, when it mentions `record_param_comms` or
//! `Collective name` or the step label, or whenever the cheap look cannot be sure (a second
//! `"cat"`, an escaped category, any `\u` escape). Kept events are rejoined with commas, so the
//! parser sees a valid, shorter array and applies the same rules as without the filter; the
//! filter only decides what it may skip. Anything it does not expect (a non-object element, a
//! missing comma, a truncated event) makes it pass the rest through untouched, so errors read
//! as they would without it.

use std::cell::Cell;
use std::io::{self, Read};
use std::rc::Rc;

use memchr::memmem;

/// Categories of the events the reader keeps (GPU work and runtime calls).
const KEEP_CATS: &[&[u8]] = &[
    b"kernel",
    b"gpu_memcpy",
    b"gpu_memset",
    b"Kernel",
    b"Memcpy",
    b"Memset",
    b"cuda_runtime",
    b"cuda_driver",
    b"Runtime",
    b"Driver",
];

#[derive(Debug, Clone, Copy)]
enum State {
    /// Outside `traceEvents`: bytes pass through, structure tracked.
    Prelude { depth: u32, in_str: bool, esc: bool },
    /// Inside `traceEvents`; `depth` is the depth to return to after its `]`.
    Events {
        depth: u32,
        /// Whether an event was kept (a comma is owed before the next one kept).
        emitted: bool,
        /// Whether the last thing read was an element (a comma or `]` must follow).
        after_elem: bool,
        /// Whether any element was read (a `]` right after a comma is then invalid).
        any: bool,
    },
    /// Everything from here on passes through unread.
    Pass,
}

/// What one step of the scanner did.
enum Step {
    /// Consumed input (maybe emitting output); call again.
    Progress,
    /// The next decision needs more input than is buffered.
    NeedMore,
}

/// Wraps a reader of a trace document; reads as the same document less the events that cannot
/// matter. `dropped()` counts the events it skipped.
pub struct EventFilter<R> {
    inner: R,
    buf: Vec<u8>,
    pos: usize,
    eof: bool,
    out: Vec<u8>,
    out_pos: usize,
    state: State,
    label: Option<Vec<u8>>,
    cat: memmem::Finder<'static>,
    keys: [memmem::Finder<'static>; 3],
    dropped: Rc<Cell<u64>>,
}

impl<R: Read> EventFilter<R> {
    /// `step_label`: spans of this name are kept too.
    pub fn new(inner: R, step_label: Option<&str>) -> Self {
        // The label as it appears inside a JSON string (without the quotes).
        let label = step_label.map(|l| {
            let s = serde_json::to_string(l).expect("a string serializes");
            s.as_bytes()[1..s.len() - 1].to_vec()
        });
        EventFilter {
            inner,
            buf: Vec::with_capacity(1 << 20),
            pos: 0,
            eof: false,
            out: Vec::with_capacity(1 << 16),
            out_pos: 0,
            state: State::Prelude {
                depth: 0,
                in_str: false,
                esc: false,
            },
            label,
            cat: memmem::Finder::new(b"\"cat\""),
            keys: [
                memmem::Finder::new(b"record_param_comms"),
                memmem::Finder::new(b"Collective name"),
                memmem::Finder::new(b"\\u"),
            ],
            dropped: Rc::new(Cell::new(0)),
        }
    }

    /// A handle on the count of events dropped so far (readable after the filter is consumed).
    pub fn dropped(&self) -> Rc<Cell<u64>> {
        self.dropped.clone()
    }

    fn fill(&mut self) -> io::Result<()> {
        if self.pos > 0 && self.pos * 2 >= self.buf.len() {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        let old = self.buf.len();
        let want = (1 << 20).max(old / 2);
        self.buf.resize(old + want, 0);
        let n = loop {
            match self.inner.read(&mut self.buf[old..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.buf.truncate(old);
                    return Err(e);
                }
            }
        };
        self.buf.truncate(old + n);
        if n == 0 {
            self.eof = true;
        }
        Ok(())
    }

    /// Whether an event (its raw bytes, braces included) may matter to the reader.
    fn keep(&self, ev: &[u8]) -> bool {
        if let Some(p) = self.cat.find(ev) {
            let rest = &ev[p + 5..];
            if self.cat.find(rest).is_some() {
                return true;
            }
            match string_value(rest) {
                Some(v) if KEEP_CATS.contains(&v) => return true,
                Some(_) => {}
                None => return true,
            }
        }
        // With a label, any escape may spell its name differently (`\/`): keep the event.
        self.keys.iter().any(|k| k.find(ev).is_some())
            || self.label.as_deref().is_some_and(|l| {
                memmem::find(ev, l).is_some() || memchr::memchr(b'\\', ev).is_some()
            })
    }

    fn step(&mut self) -> Step {
        let b = &self.buf[self.pos..];
        match self.state {
            State::Pass => {
                self.out.extend_from_slice(b);
                self.pos = self.buf.len();
                if self.eof {
                    Step::Progress
                } else {
                    Step::NeedMore
                }
            }
            State::Prelude {
                mut depth,
                mut in_str,
                mut esc,
            } => {
                let mut i = 0;
                while i < b.len() {
                    let c = b[i];
                    if in_str {
                        if esc {
                            esc = false;
                        } else if c == b'\\' {
                            esc = true;
                        } else if c == b'"' {
                            in_str = false;
                        }
                        i += 1;
                        continue;
                    }
                    match c {
                        b'"' if depth == 1 => {
                            // A key (or value) at the top level: is it `"traceEvents": [`?
                            match events_key(&b[i..], self.eof) {
                                None => {
                                    self.out.extend_from_slice(&b[..i]);
                                    self.pos += i;
                                    self.state = State::Prelude { depth, in_str, esc };
                                    return Step::NeedMore;
                                }
                                Some(Some(n)) => {
                                    self.out.extend_from_slice(&b[..i + n]);
                                    self.pos += i + n;
                                    self.state = State::Events {
                                        depth: 1,
                                        emitted: false,
                                        after_elem: false,
                                        any: false,
                                    };
                                    return Step::Progress;
                                }
                                Some(None) => in_str = true,
                            }
                        }
                        b'"' => in_str = true,
                        b'[' if depth == 0 => {
                            self.out.extend_from_slice(&b[..=i]);
                            self.pos += i + 1;
                            self.state = State::Events {
                                depth: 0,
                                emitted: false,
                                after_elem: false,
                                any: false,
                            };
                            return Step::Progress;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => depth = depth.saturating_sub(1),
                        _ => {}
                    }
                    i += 1;
                }
                self.out.extend_from_slice(b);
                self.pos = self.buf.len();
                self.state = State::Prelude { depth, in_str, esc };
                if self.eof {
                    self.state = State::Pass;
                    Step::Progress
                } else {
                    Step::NeedMore
                }
            }
            State::Events {
                depth,
                emitted,
                after_elem,
                any,
            } => {
                let mut i = 0;
                while i < b.len() && matches!(b[i], b' ' | b'\n' | b'\r' | b'\t') {
                    i += 1;
                }
                self.pos += i;
                let b = &self.buf[self.pos..];
                let Some(&c) = b.first() else {
                    if self.eof {
                        self.state = State::Pass;
                        return Step::Progress;
                    }
                    return Step::NeedMore;
                };
                // The rest goes through unread; a comma already consumed is given back when
                // an element was kept before it, or when the parser must see it to reject `,]`.
                let pass = |s: &mut Self| {
                    if any && !after_elem && (emitted || c == b']') {
                        s.out.push(b',');
                    }
                    s.state = State::Pass;
                    Step::Progress
                };
                match c {
                    b',' if after_elem => {
                        self.pos += 1;
                        self.state = State::Events {
                            depth,
                            emitted,
                            after_elem: false,
                            any,
                        };
                        Step::Progress
                    }
                    b']' if after_elem || !any => {
                        self.out.push(b']');
                        self.pos += 1;
                        self.state = State::Prelude {
                            depth,
                            in_str: false,
                            esc: false,
                        };
                        Step::Progress
                    }
                    b'{' if !after_elem => match object_end(b) {
                        Some(end) => {
                            let ev = &b[..end];
                            let keep = self.keep(ev);
                            if keep {
                                if emitted {
                                    self.out.push(b',');
                                }
                                self.out.extend_from_slice(ev);
                            } else {
                                self.dropped.set(self.dropped.get() + 1);
                            }
                            self.pos += end;
                            self.state = State::Events {
                                depth,
                                emitted: emitted || keep,
                                after_elem: true,
                                any: true,
                            };
                            Step::Progress
                        }
                        None if self.eof => pass(self),
                        None => Step::NeedMore,
                    },
                    _ => pass(self),
                }
            }
        }
    }
}

impl<R: Read> Read for EventFilter<R> {
    fn read(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        while self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
            if self.eof && self.pos == self.buf.len() {
                return Ok(0);
            }
            // Work through what is buffered, then read more (bounded output per call).
            while self.out.len() < (1 << 16) {
                match self.step() {
                    Step::Progress if self.eof && self.pos == self.buf.len() => break,
                    Step::Progress => {}
                    Step::NeedMore => {
                        if self.eof {
                            // Nothing more will come: hand the rest over unread.
                            self.state = State::Pass;
                        } else {
                            self.fill()?;
                        }
                    }
                }
            }
        }
        let n = dst.len().min(self.out.len() - self.out_pos);
        dst[..n].copy_from_slice(&self.out[self.out_pos..self.out_pos + n]);
        self.out_pos += n;
        Ok(n)
    }
}

/// At a `"` at the top level: `Some(Some(n))` when it opens `"traceEvents"` followed by `:` and
/// `[` (n bytes up to and including the `[`), `Some(None)` when it is some other string, `None`
/// when more input is needed to say.
fn events_key(b: &[u8], eof: bool) -> Option<Option<usize>> {
    const KEY: &[u8] = b"\"traceEvents\"";
    let need = |eof: bool| if eof { Some(None) } else { None };
    if b.len() < KEY.len() {
        return if KEY.starts_with(b) {
            need(eof)
        } else {
            Some(None)
        };
    }
    if &b[..KEY.len()] != KEY {
        return Some(None);
    }
    let mut i = KEY.len();
    let mut colon = false;
    while i < b.len() {
        match b[i] {
            b' ' | b'\n' | b'\r' | b'\t' => {}
            b':' if !colon => colon = true,
            b'[' if colon => return Some(Some(i + 1)),
            _ => return Some(None),
        }
        i += 1;
    }
    need(eof)
}

/// The length of the JSON object that `b` starts with (`b[0] == b'{'`), or `None` when it does
/// not end within `b`.
fn object_end(b: &[u8]) -> Option<usize> {
    let mut depth = 0u32;
    let mut i = 0;
    loop {
        i += memchr::memchr3(b'"', b'{', b'}', &b[i..])?;
        match b[i] {
            b'"' => {
                // Skip the string: find its closing quote, stepping over escapes.
                i += 1;
                loop {
                    i += memchr::memchr2(b'"', b'\\', &b[i..])?;
                    if b[i] == b'\\' {
                        i += 2;
                        if i > b.len() {
                            return None;
                        }
                    } else {
                        break;
                    }
                }
            }
            b'{' => depth += 1,
            _ => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
        }
        i += 1;
    }
}

/// After a key: the raw bytes of a string value without escapes (`: "v"` -> `v`), or `None`
/// when the value is not such a string.
fn string_value(b: &[u8]) -> Option<&[u8]> {
    let mut i = 0;
    while i < b.len() && matches!(b[i], b' ' | b'\n' | b'\r' | b'\t') {
        i += 1;
    }
    if b.get(i) != Some(&b':') {
        return None;
    }
    i += 1;
    while i < b.len() && matches!(b[i], b' ' | b'\n' | b'\r' | b'\t') {
        i += 1;
    }
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let s = &b[i + 1..];
    let end = memchr::memchr2(b'"', b'\\', s)?;
    (s[end] == b'"').then_some(&s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(doc: &str, label: Option<&str>, chunk: usize) -> (String, u64) {
        // A reader that hands out `chunk` bytes at a time, to cross every boundary.
        struct Slow<'a>(&'a [u8], usize);
        impl Read for Slow<'_> {
            fn read(&mut self, d: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(self.1).min(d.len());
                d[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut f = EventFilter::new(Slow(doc.as_bytes(), chunk), label);
        let dropped = f.dropped();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        (s, dropped.get())
    }

    #[test]
    fn drops_host_events_keeps_the_rest_of_the_document() {
        let doc = r#"{"a":"traceEvents","traceEvents" : [
 {"ph":"X","cat":"python_function","name":"a {\"b\" } }","ts":1},
 {"ph":"X","cat":"kernel","name":"k","ts":2,"args":{"x":{"y":1}}},
 {"ph":"f","cat":"ac2g","id":1},
 {"ph":"X","cat":"cpu_op","name":"record_param_comms","ts":3},
 {"ph":"X","cat":"user_annotation","name":"verify","ts":4},
 {"ph":"X","cat":"cpu_op","args":{"cat":"kernel"}}
],"distributedInfo":{"rank":1}}"#;
        for chunk in [1, 3, 7, 4096] {
            let (s, dropped) = filter(doc, Some("verify"), chunk);
            let v: serde_json::Value = serde_json::from_str(&s).expect(&s);
            let names: Vec<_> = v["traceEvents"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["cat"].as_str().unwrap().to_string())
                .collect();
            // With a label, the event with escapes in it is kept (they could spell the label).
            assert_eq!(
                names,
                [
                    "python_function",
                    "kernel",
                    "cpu_op",
                    "user_annotation",
                    "cpu_op"
                ],
                "chunk {chunk}"
            );
            assert_eq!(dropped, 1);
            assert_eq!(v["distributedInfo"]["rank"], 1);
            assert_eq!(v["a"], "traceEvents");
        }
        // Without the label its span goes too.
        assert_eq!(filter(doc, None, 5).1, 3);
    }

    #[test]
    fn bare_arrays_and_bad_documents_pass_through() {
        let (s, d) = filter(r#"[{"cat":"cpu_op"},{"cat":"Kernel"}]"#, None, 2);
        assert_eq!((s.as_str(), d), (r#"[{"cat":"Kernel"}]"#, 1));
        let (s, d) = filter(r#"[{"cat":"cpu_op"}]"#, None, 2);
        assert_eq!((s.as_str(), d), ("[]", 1));
        // Truncated: the partial event comes through as it was.
        let t = r#"{"traceEvents":[{"cat":"kernel"},{"cat":"cpu_op","name":"x"#;
        assert_eq!(filter(t, None, 4).0, t);
        // A non-object element: the rest passes unread, after a comma if one is owed.
        let (s, _) = filter(
            r#"{"traceEvents":[{"cat":"kernel"},1,{"cat":"cpu_op"}]}"#,
            None,
            3,
        );
        assert_eq!(
            s,
            r#"{"traceEvents":[{"cat":"kernel"},1,{"cat":"cpu_op"}]}"#
        );
        // A trailing comma stays for the parser to reject.
        let (s, _) = filter(r#"{"traceEvents":[{"cat":"cpu_op"},]}"#, None, 3);
        assert!(
            serde_json::from_str::<serde_json::Value>(&s).is_err(),
            "{s}"
        );
        for junk in ["hello", r#"{"a":1}"#, "", r#"{"traceEvents":{"a":1}}"#] {
            assert_eq!(filter(junk, None, 2).0, junk);
        }
    }
}
