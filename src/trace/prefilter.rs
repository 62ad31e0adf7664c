//! A byte-level scanner in front of the JSON parser: finds the trace events the analysis can
//! use and hands each one to the reader as its own slice; the others are never tokenized.
//!
//! A server's profile is mostly host-side events (`python_function`, `cpu_op`, flow arrows)
//! that [`super::reader`] would skip after serde had tokenized every one of their fields. The
//! scanner reads the decompressed document in large chunks and, inside the `traceEvents`
//! array, finds each event object's extent in one pass and decides on its raw bytes only. An
//! event without a backslash (nearly all) is read a 64-byte block at a time: vector compares
//! give the block's quotes, brackets and braces as bit masks, the running parity of the quotes
//! says which bytes lie inside strings, the brackets outside them give the nesting and the
//! end, and only strings that begin with a letter the decision looks for are read. Any other
//! event is read string by string (strings, escapes and nesting tracked, jumping from one
//! quote, backslash, bracket or brace to the next). Either way:
//! an event is kept when its top-level `"cat"` is a GPU or runtime category, when one of its
//! strings is exactly `record_param_comms` or `Collective name`, or begins with the step label
//! (a prefix: `ProfilerStep#` keeps every `ProfilerStep#N`; the reader matches exactly), or whenever
//! the cheap look cannot be sure (a second top-level `"cat"`, an escaped or non-string
//! category, any `\u` escape; with a step label, any escape). Kept events go to a callback as slices of
//! the chunk (no copy); everything outside `traceEvents` (`distributedInfo` and the like) is
//! kept as a small skeleton document whose event array is empty, for serde to read whole.
//! The scanner only decides what may be skipped. Anything it does not expect (a non-object
//! element, a missing comma, a truncated event or stream, a read error, a skeleton above
//! [`MAX_SKELETON`], an event longer than the longest string a trace may hold) makes it give up, and the caller reads the document again with the plain
//! serde reader, so results and errors are those of that reader.

use std::io::{self, Read};

mod blocks;
mod event;

use super::names::STEP_MARKER_WORDS;
use event::scan_event;
pub(super) use event::skip_ws;
#[cfg(test)]
use {
    blocks::{classify, classify_words},
    event::{scan_event_exact, scan_plain, Plain, KEEP_CATS},
};

/// Bytes read from the stream at a time (the buffer grows only for a larger event, up to the
/// longest event held: in [`scan`], as long as this).
const CHUNK: usize = 1 << 20;

/// The most the document outside `traceEvents` may hold before the scanner gives up (a real
/// trace's is a few KB; a document with no event array at all is left to the plain reader).
pub(crate) const MAX_SKELETON: usize = 16 << 20;

#[derive(Debug, Clone, Copy)]
enum State {
    /// Outside `traceEvents`: bytes go to the skeleton, structure tracked.
    Prelude { depth: u32, in_str: bool, esc: bool },
    /// Inside `traceEvents`; `depth` is the depth to return to after its `]`.
    Events {
        depth: u32,
        /// Whether the last thing read was an element (a comma or `]` must follow).
        after_elem: bool,
        /// Whether any element was read (a `]` right after a comma is then invalid).
        any: bool,
    },
    /// The stream ended outside `traceEvents`.
    End,
}

/// What one step of the scanner did.
enum Step {
    /// Consumed input; call again.
    Progress,
    /// An event to keep: `buf[start..end]`, braces included, and whether it is known to hold
    /// no backslash.
    Keep(usize, usize, bool),
    /// The next decision needs more input than is buffered.
    NeedMore,
    /// Something the scanner does not expect: leave the document to the plain reader.
    GiveUp,
}

/// What a completed scan leaves for the parser.
#[derive(Debug)]
pub struct Skeleton {
    /// The document less the events of its `traceEvents` array (`"traceEvents":[]`).
    pub(crate) doc: Vec<u8>,
    /// Events looked at and skipped (not handed to the callback).
    pub(crate) dropped: u64,
}

/// Scans a trace document from `r`: each event that may matter is handed to `on_event` (its
/// raw bytes, braces included, in document order, and whether the event is known to hold no
/// backslash), the rest is counted. `step_label`: events with a
/// string that begins with it are kept too (a prefix; the caller matches the name exactly).
/// `markers`: so are the events whose bytes hold one of [`STEP_MARKER_WORDS`] (a name that
/// is an engine's step marker holds one, or spells it with a `\u` escape, which is kept
/// anyway), so that a trace without `ProfilerStep#` spans needs no second read for its
/// markers. `None` when the scanner gave up or `on_event` returned false: the
/// caller must then read the document with the plain reader. An event longer than the
/// longest string a trace may hold ([`super::limits::LIMITS`]) makes it give up too.
pub fn scan<R: Read>(
    r: R,
    step_label: Option<&str>,
    markers: bool,
    on_event: impl FnMut(&[u8], bool) -> bool,
) -> Option<Skeleton> {
    let max_event = super::limits::LIMITS.string as usize;
    scan_chunked(r, step_label, markers, CHUNK, max_event, on_event)
}

/// [`scan`] that gives up on an event longer than `max_event` bytes (the buffer never grows
/// past it): a string longer than that is in such an event, and the plain reader, which holds
/// strings and not events, refuses it where it is.
pub(crate) fn scan_limited<R: Read>(
    r: R,
    step_label: Option<&str>,
    markers: bool,
    max_event: usize,
    on_event: impl FnMut(&[u8], bool) -> bool,
) -> Option<Skeleton> {
    scan_chunked(r, step_label, markers, CHUNK, max_event, on_event)
}

/// [`scan_limited`] with `chunk` bytes of buffer to start with (small in tests, to cross every
/// boundary).
fn scan_chunked<R: Read>(
    r: R,
    step_label: Option<&str>,
    markers: bool,
    chunk: usize,
    max_event: usize,
    mut on_event: impl FnMut(&[u8], bool) -> bool,
) -> Option<Skeleton> {
    let mut s = Scanner::new(r, step_label, markers, chunk.max(1));
    s.max_event = max_event;
    loop {
        match s.step() {
            Step::Progress => {
                if matches!(s.state, State::End) {
                    break;
                }
            }
            Step::Keep(a, b, plain) => {
                if !on_event(&s.buf[a..b], plain) {
                    return None;
                }
            }
            Step::NeedMore => {
                if s.eof || s.fill().is_err() {
                    return None;
                }
            }
            Step::GiveUp => return None,
        }
        if s.out.len() > MAX_SKELETON {
            return None;
        }
    }
    Some(Skeleton {
        doc: s.out,
        dropped: s.dropped,
    })
}

struct Scanner<R> {
    inner: R,
    /// `buf[pos..end]` is read and not yet consumed; the buffer is zeroed once, not per read.
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    eof: bool,
    out: Vec<u8>,
    state: State,
    label: Option<Vec<u8>>,
    /// Searches for [`STEP_MARKER_WORDS`] (empty: markers are not kept).
    markers: Vec<memchr::memmem::Finder<'static>>,
    dropped: u64,
    /// The longest event held: a longer one makes the scanner give up.
    max_event: usize,
}

impl<R: Read> Scanner<R> {
    fn new(inner: R, step_label: Option<&str>, markers: bool, chunk: usize) -> Self {
        // The label as it appears inside a JSON string (without the quotes).
        let label = step_label.map(|l| {
            let s = serde_json::to_string(l).expect("a string serializes");
            s.as_bytes()[1..s.len() - 1].to_vec()
        });
        Scanner {
            inner,
            buf: vec![0; chunk],
            pos: 0,
            end: 0,
            eof: false,
            out: Vec::with_capacity(1 << 12),
            state: State::Prelude {
                depth: 0,
                in_str: false,
                esc: false,
            },
            label,
            markers: if markers {
                STEP_MARKER_WORDS
                    .iter()
                    .map(|w| memchr::memmem::Finder::new(w.as_bytes()))
                    .collect()
            } else {
                vec![]
            },
            dropped: 0,
            max_event: usize::MAX,
        }
    }

    /// Moves the unconsumed bytes to the front and reads until the buffer is full or the
    /// stream ends (the buffer doubles when one event fills it, up to the longest event held).
    fn fill(&mut self) -> io::Result<()> {
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.end == self.buf.len() {
            if self.buf.len() >= self.max_event {
                return Err(io::Error::other("an event longer than the scanner holds"));
            }
            self.buf.resize(2 * self.buf.len(), 0);
        }
        while self.end < self.buf.len() {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn step(&mut self) -> Step {
        let b = &self.buf[self.pos..self.end];
        match self.state {
            State::End => Step::Progress,
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
                self.pos = self.end;
                if self.eof {
                    self.state = State::End;
                    Step::Progress
                } else {
                    self.state = State::Prelude { depth, in_str, esc };
                    Step::NeedMore
                }
            }
            State::Events {
                depth,
                after_elem,
                any,
            } => {
                self.pos += skip_ws(b, 0);
                let b = &self.buf[self.pos..self.end];
                let Some(&c) = b.first() else {
                    return Step::NeedMore;
                };
                match c {
                    b',' if after_elem => {
                        self.pos += 1;
                        self.state = State::Events {
                            depth,
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
                    b'{' if !after_elem => match scan_event(b, self.label.as_deref()) {
                        Some((end, ..)) if end > self.max_event => Step::GiveUp,
                        Some((end, keep, plain)) => {
                            let start = self.pos;
                            self.pos += end;
                            self.state = State::Events {
                                depth,
                                after_elem: true,
                                any: true,
                            };
                            let ev = &b[..end];
                            if keep || self.markers.iter().any(|f| f.find(ev).is_some()) {
                                Step::Keep(start, start + end, plain)
                            } else {
                                self.dropped += 1;
                                Step::Progress
                            }
                        }
                        None => Step::NeedMore,
                    },
                    _ => Step::GiveUp,
                }
            }
        }
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

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    // The scanner as it was before it jumped with `memchr` (one byte at a time outside strings,
    // eight inside): the reference the jumping one must agree with on every input.
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;

    /// The high bit of each byte of `w` equal to `c` (exact up to the first one; enough to find
    /// the first).
    #[inline(always)]
    fn bytes_equal(w: u64, c: u8) -> u64 {
        let x = w ^ (ONES * c as u64);
        x.wrapping_sub(ONES) & !x & HIGH
    }

    /// The index of the first `"` or `\` in `b` at or after `i`, eight bytes at a time.
    #[inline(always)]
    fn string_stop(b: &[u8], mut i: usize) -> Option<usize> {
        while let Some(w) = b.get(i..i + 8) {
            let w = u64::from_le_bytes(w.try_into().expect("eight bytes"));
            let m = bytes_equal(w, b'"') | bytes_equal(w, b'\\');
            if m != 0 {
                return Some(i + (m.trailing_zeros() / 8) as usize);
            }
            i += 8;
        }
        b.get(i..)?
            .iter()
            .position(|&c| c == b'"' || c == b'\\')
            .map(|p| i + p)
    }

    /// One event object at the start of `b` (`b[0] == b'{'`): its length, and whether the reader
    /// may use it. `None` when the object does not end within `b`.
    ///
    /// One pass over its bytes (strings, escapes and nesting tracked): it is kept when a top-level
    /// `"cat"` names a GPU or runtime category, or is not a plain string, or appears twice; when
    /// any string is exactly `record_param_comms`, `Collective name` or the step label; when it
    /// holds a `\u` escape (which can spell any of these differently), and with a label when it
    /// holds any escape. Everything else the reader would skip.
    fn scan_event_stepwise(b: &[u8], label: Option<&[u8]>) -> Option<(usize, bool)> {
        let mut depth = 0u32;
        let mut i = 0;
        let mut keep = false;
        let mut cats = 0u32;
        let mut cat_value = false;
        let mut backslash = false;
        while i < b.len() {
            match b[i] {
                b'"' => {
                    let s = i + 1;
                    let mut j = s;
                    let mut esc = false;
                    loop {
                        j = string_stop(b, j)?;
                        if b[j] != b'\\' {
                            break;
                        }
                        esc = true;
                        keep |= b.get(j + 1) == Some(&b'u');
                        j += 2;
                    }
                    backslash |= esc;
                    let text = &b[s..j];
                    i = j + 1;
                    if cat_value {
                        cat_value = false;
                        keep |= esc || KEEP_CATS.contains(&text);
                    } else if depth == 1 && text == b"cat" {
                        let k = skip_ws(b, i);
                        if b.get(k) == Some(&b':') {
                            cats += 1;
                            let k = skip_ws(b, k + 1);
                            match b.get(k) {
                                Some(b'"') => {
                                    cat_value = true;
                                    i = k;
                                }
                                Some(_) => keep = true,
                                None => return None,
                            }
                        }
                    } else {
                        keep |= text == b"record_param_comms"
                            || text == b"Collective name"
                            || label.is_some_and(|l| text.starts_with(l));
                    }
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        let keep = keep || cats > 1 || (label.is_some() && backslash);
                        return Some((i + 1, keep));
                    }
                }
                _ => {}
            }
            i += 1;
        }
        None
    }

    /// A pseudo-random event-like byte string: structural bytes, quotes, escapes, blanks and
    /// the words the scanner compares, in any order (valid JSON or not).
    fn random_event(rng: &mut ChaCha8Rng) -> Vec<u8> {
        random_event_of(rng, 40, true)
    }

    /// [`random_event`] of up to `pieces` pieces, with or without backslashes.
    fn random_event_of(rng: &mut ChaCha8Rng, pieces: u64, escapes: bool) -> Vec<u8> {
        const PIECES: &[&[u8]] = &[
            b"{",
            b"}",
            b"[",
            b"]",
            b"\"",
            b"\\",
            b"\\u",
            b"\\\"",
            b":",
            b",",
            b" ",
            b"\n",
            b"cat",
            b"\"cat\"",
            b"\"cat\" : ",
            b"\"kernel\"",
            b"\"cpu_op\"",
            b"Runtime",
            b"record_param_comms",
            b"\"record_param_comms\"",
            b"\"Collective name\"",
            b"\"verify\"",
            b"verify",
            b"12.5",
            b"x",
            b"\"name\":\"",
            b"null",
        ];
        let mut next = || rng.random::<u64>();
        let n = 1 + (next() % pieces) as usize;
        let mut v = b"{".to_vec();
        let mut added = 0;
        while added < n {
            let piece = PIECES[(next() % PIECES.len() as u64) as usize];
            if escapes || !piece.contains(&b'\\') {
                v.extend_from_slice(piece);
                added += 1;
            }
        }
        v
    }

    #[test]
    fn block_scan_of_plain_events_agrees_with_the_exact_one() {
        // Events without backslashes (the block scan's own case) of up to ~10 blocks, every
        // prefix of each (so that quotes, first letters and brackets fall on every block
        // boundary), with and without a label, and a label of each first letter it looks for.
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut inputs: Vec<Vec<u8>> = (0..500)
            .map(|_| random_event_of(&mut rng, 120, false))
            .collect();
        inputs.push(
            format!(
                "{{{}\"cat\":\"kernel\",\"x\":\"{}\"}}",
                " ".repeat(58),
                "c".repeat(70)
            )
            .into_bytes(),
        );
        let mut done = 0;
        for b in &inputs {
            for n in 1..=b.len() {
                for label in [None, Some(&b"verify"[..]), Some(b"cat"), Some(b"x")] {
                    let plain = scan_plain(&b[..n], label);
                    let exact = scan_event_exact(&b[..n], label);
                    match plain {
                        Plain::Done(end, keep) => {
                            assert_eq!(
                                Some((end, keep)),
                                exact,
                                "{:?}",
                                String::from_utf8_lossy(&b[..n])
                            );
                            done += 1;
                        }
                        Plain::NeedMore => assert_eq!(exact, None),
                        Plain::Escaped => {
                            panic!("no backslash in {:?}", String::from_utf8_lossy(b))
                        }
                    }
                }
            }
        }
        assert!(done > 5_000, "{done}");
        // A backslash anywhere in a block leaves the event to the exact scan.
        assert_eq!(scan_plain(br#"{"a":"\""}"#, None), Plain::Escaped);
        assert_eq!(scan_plain(br#"{"a":1}"#, Some(b"")), Plain::Escaped);
    }

    #[test]
    fn vector_and_word_classification_agree() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let alphabet = b"\"\\{}[]cCrRvV:, a0\n";
        for _ in 0..20_000 {
            let len = rng.random_range(0..80);
            let b: Vec<u8> = (0..len)
                .map(|_| {
                    if rng.random_range(0..5) == 0 {
                        rng.random()
                    } else {
                        alphabet[rng.random_range(0..alphabet.len())]
                    }
                })
                .collect();
            for label0 in [0, b'v', b'c'] {
                let (v, w) = (classify(&b, label0), classify_words(&b, label0));
                assert_eq!(
                    (v.quote, v.backslash, v.open, v.close, v.first),
                    (w.quote, w.backslash, w.open, w.close, w.first),
                    "{b:?}"
                );
            }
        }
    }

    #[test]
    fn jumping_scan_agrees_with_the_stepwise_one() {
        // Every prefix of each input, so that a quote, a backslash or an escaped byte falls as
        // the last byte of the buffer and strings run past its end, with and without a label.
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut inputs: Vec<Vec<u8>> = (0..3000).map(|_| random_event(&mut rng)).collect();
        inputs.extend(
            [
                r#"{"cat":"kernel","name":"a \"}{\" b","ts":1}"#,
                r#"{"cat":"cpu_op","name":"f\u007d\u00e9 {","ts":2}"#,
                r#"{"cat":"kernel","name":"back\\","args":{"s":"}\\\""}}"#,
                r#"{"ph":"X","cat" :
   "cuda_runtime"}"#,
                r#"{"ph":"X","cat":"cpu_op","cat" : "Runtime"}"#,
                r#"{"a":[{"cat":"kernel"}],"b":["cat",1]}"#,
                r#"{"x":"\\"} \ {"#,
                r#"{"cat":"python_function","args":{"Collective name":"allreduce"}}"#,
            ]
            .map(|s| s.as_bytes().to_vec()),
        );
        let mut ends = 0;
        for b in &inputs {
            for n in 1..=b.len() {
                for label in [None, Some(&b"verify"[..])] {
                    let got = scan_event(&b[..n], label).map(|(end, keep, _)| (end, keep));
                    assert_eq!(
                        got,
                        scan_event_stepwise(&b[..n], label),
                        "{:?} label {label:?}",
                        String::from_utf8_lossy(&b[..n])
                    );
                    ends += got.is_some() as usize;
                }
            }
        }
        // Both outcomes are exercised (objects that end, and ones that need more input).
        assert!(ends > 1000, "{ends}");
    }

    #[test]
    fn documents_of_random_events_agree_with_the_stepwise_scan() {
        // Many events one after another, so that events begin at every offset of a classified
        // block and end in the next, read at several chunk sizes.
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let mut events = Vec::new();
        while events.len() < 400 {
            let e = random_event(&mut rng);
            // Only inputs that are one whole object for the reference scan.
            if let Some((n, _)) = scan_event_stepwise(&e, None) {
                events.push(String::from_utf8(e[..n].to_vec()).expect("ASCII pieces"));
            }
        }
        let doc = format!("{{\"traceEvents\":[{}],\"x\":1}}", events.join(",\n"));
        for label in [None, Some("verify")] {
            let want: Vec<&String> = events
                .iter()
                .filter(|e| {
                    scan_event_stepwise(e.as_bytes(), label.map(str::as_bytes))
                        .unwrap()
                        .1
                })
                .collect();
            for chunk in [1, 7, 63, 64, 65, 200, 1 << 20] {
                let (sk, kept, dropped) = scan_doc(&doc, label, chunk).unwrap();
                assert_eq!(sk, r#"{"traceEvents":[],"x":1}"#);
                assert_eq!(kept.iter().collect::<Vec<_>>(), want, "chunk {chunk}");
                assert_eq!(dropped as usize, events.len() - want.len());
            }
            assert!(!want.is_empty() && want.len() < events.len());
        }
    }

    #[test]
    fn quote_or_backslash_at_a_chunk_end() {
        // Events whose quotes, escapes and escaped bytes fall on every chunk boundary (chunk
        // sizes 1 to 9 against strings of every length up to 9), read whole.
        let mut events = Vec::new();
        for n in 0..10 {
            let s = "a".repeat(n);
            events.push(format!(r#"{{"cat":"cpu_op","name":"{s}\\","x":"{s}\""}}"#));
            events.push(format!(r#"{{"cat":"kernel","name":"{s}\"}}\"{s}"}}"#));
            events.push(format!(
                r#"{{"name":"{s}","cat":"cpu_op","args":{{"{s}":[1]}}}}"#
            ));
        }
        let doc = format!("{{\"traceEvents\":[{}]}}", events.join(","));
        for chunk in 1..10 {
            let (sk, kept, dropped) = scan_doc(&doc, None, chunk).unwrap();
            assert_eq!(sk, r#"{"traceEvents":[]}"#);
            let want: Vec<String> = events.iter().skip(1).step_by(3).cloned().collect();
            assert_eq!(kept, want, "chunk {chunk}");
            assert_eq!(dropped, 20);
        }
    }

    /// The skeleton and the kept events, reading `chunk` bytes at a time.
    fn scan_doc(
        doc: &str,
        label: Option<&str>,
        chunk: usize,
    ) -> Option<(String, Vec<String>, u64)> {
        let mut kept = Vec::new();
        let s = scan_chunked(
            doc.as_bytes(),
            label,
            false,
            chunk,
            usize::MAX,
            |ev, plain| {
                // What the reader relies on: an event said to be plain holds no backslash.
                assert!(
                    !plain || !ev.contains(&b'\\'),
                    "{:?}",
                    String::from_utf8_lossy(ev)
                );
                kept.push(String::from_utf8(ev.to_vec()).unwrap());
                true
            },
        )?;
        Some((String::from_utf8(s.doc).unwrap(), kept, s.dropped))
    }

    fn cats(kept: &[String]) -> Vec<String> {
        kept.iter()
            .map(|e| {
                let v: serde_json::Value = serde_json::from_str(e).expect(e);
                v["cat"].as_str().unwrap_or("").to_string()
            })
            .collect()
    }

    #[test]
    fn drops_host_events_keeps_the_rest_of_the_document() {
        let doc = r#"{"a":"traceEvents","traceEvents" : [
 {"ph":"X","cat":"python_function","name":"a {\"b\" } }","ts":1},
 {"ph":"X","cat":"kernel","name":"k","ts":2,"args":{"x":{"y":1}}},
 {"ph":"f","cat":"ac2g","id":1},
 {"ph":"X","cat":"cpu_op","name":"record_param_comms","ts":3},
 {"ph":"X","cat":"user_annotation","name":"verify","ts":4},
 {"ph":"X","cat":"cpu_op","args":{"cat":"kernel","Collective nam":"record_param_comm"}},
 {"ph":"X","cat":"cpu_op","name":"c","args":{"Collective name":"allreduce"}},
 {"ph":"X","cat":"cpu_op","cat" : "Runtime"},
 {"ph":"X","cat":null,"name":"n"},
 {"ph":"X","cat" :
   "cuda_runtime"}
],"distributedInfo":{"rank":1}}"#;
        for chunk in [1, 3, 7, 4096] {
            let (sk, kept, dropped) = scan_doc(doc, Some("verify"), chunk).unwrap();
            // With a label, the event with escapes in it is kept (they could spell the label).
            // A `cat` inside args is not the event's; near misses of the keys do not count; a
            // second or a non-string category is left to serde.
            assert_eq!(
                cats(&kept),
                [
                    "python_function",
                    "kernel",
                    "cpu_op",
                    "user_annotation",
                    "cpu_op",
                    "Runtime",
                    "",
                    "cuda_runtime"
                ],
                "chunk {chunk}"
            );
            assert_eq!(dropped, 2);
            let v: serde_json::Value = serde_json::from_str(&sk).expect(&sk);
            assert_eq!(v["traceEvents"], serde_json::json!([]), "{sk}");
            assert_eq!(v["distributedInfo"]["rank"], 1);
            assert_eq!(v["a"], "traceEvents");
            // Each kept event is its exact bytes in the document.
            assert!(kept.iter().all(|e| doc.contains(e.as_str())));
        }
        // Without the label its span and the escaped name go too.
        assert_eq!(scan_doc(doc, None, 5).unwrap().2, 4);
    }

    #[test]
    fn strings_escapes_and_chunk_boundaries() {
        // Braces and escaped quotes inside strings, unicode escapes (one spelling `}`), an
        // escaped backslash right before a closing quote, and an event far larger than the
        // first buffer.
        let big = "x".repeat(3 << 20);
        let events = [
            r#"{"cat":"kernel","name":"a \"}{\" b","ts":1}"#.to_string(),
            r#"{"cat":"cpu_op","name":"f\u007d\u00e9 {","ts":2}"#.to_string(),
            r#"{"cat":"kernel","name":"back\\","args":{"s":"}\\\""}}"#.to_string(),
            format!(r#"{{"cat":"Kernel","name":"{big}"}}"#),
            r#"{"name":"caf\u00e9","cat":"python_function"}"#.to_string(),
            r#"{"cat":"python_function","name":"}\\"}"#.to_string(),
        ];
        let doc = format!("{{\"traceEvents\":[{}],\"x\":1}}", events.join(",\n"));
        for chunk in [1, 2, 5, 64, 1 << 20] {
            let (sk, kept, dropped) = scan_doc(&doc, None, chunk).unwrap();
            assert_eq!(sk, r#"{"traceEvents":[],"x":1}"#, "chunk {chunk}");
            // The unicode escapes make the scanner keep events whose category it cannot read
            // from the bytes alone; the last one it can, and drops.
            assert_eq!(kept, events[..5], "chunk {chunk}");
            assert_eq!(dropped, 1);
            for e in &kept {
                serde_json::from_str::<serde_json::Value>(e).expect(e);
            }
        }
    }

    #[test]
    fn bare_arrays_and_documents_without_events() {
        let (sk, kept, d) = scan_doc(r#"[{"cat":"cpu_op"},{"cat":"Kernel"}]"#, None, 2).unwrap();
        assert_eq!(
            (sk.as_str(), kept.as_slice(), d),
            ("[]", &[r#"{"cat":"Kernel"}"#.to_string()][..], 1)
        );
        let (sk, kept, d) = scan_doc(" [ ] ", None, 2).unwrap();
        assert_eq!((sk.as_str(), kept.len(), d), (" [] ", 0, 0));
        // No event array: the whole (small) document is the skeleton, for serde to judge.
        for junk in ["hello", r#"{"a":1}"#, "", r#"{"traceEvents":{"a":1}}"#] {
            assert_eq!(scan_doc(junk, None, 2).unwrap().0, junk);
        }
    }

    #[test]
    fn gives_up_on_what_it_does_not_expect() {
        for doc in [
            // truncated inside an event, and after one
            r#"{"traceEvents":[{"cat":"kernel"},{"cat":"cpu_op","name":"x"#,
            r#"{"traceEvents":[{"cat":"kernel"}"#,
            // a non-object element, a missing comma, a trailing and a leading comma
            r#"{"traceEvents":[{"cat":"kernel"},1,{"cat":"cpu_op"}]}"#,
            r#"{"traceEvents":[{"cat":"kernel"} {"cat":"cpu_op"}]}"#,
            r#"{"traceEvents":[{"cat":"cpu_op"},]}"#,
            r#"{"traceEvents":[,{"cat":"cpu_op"}]}"#,
        ] {
            for chunk in [1, 3, 4096] {
                assert!(scan_doc(doc, None, chunk).is_none(), "{doc} chunk {chunk}");
            }
        }
        // The callback refuses an event.
        let doc = r#"{"traceEvents":[{"cat":"kernel"}]}"#;
        assert!(scan(doc.as_bytes(), None, false, |_, _| false).is_none());
        assert!(scan(doc.as_bytes(), None, false, |_, _| true).is_some());
        // A read error.
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("broken"))
            }
        }
        assert!(scan(Broken, None, false, |_, _| true).is_none());
    }
}
