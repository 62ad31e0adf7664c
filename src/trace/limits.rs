//! What one trace file may hold, checked while it streams: the JSON it expands to (in all, and
//! against its gzip size), the longest string (and so the longest event the scanner holds
//! whole: a longer one goes to the plain reader, which holds no event whole), and the events
//! the analysis keeps. A file past any of them is refused with the limit named, so that
//! a gzip bomb (a megabyte of gzip that expands to gigabytes of one string or of one event
//! repeated) costs tens of megabytes of memory and a second, not gigabytes.
//!
//! The real traces among the tests (tests/data/traces: HTA's, PARAM's, Kimi-K2.5's) expand 8 to
//! 21 times their gzip size, to at most 54 MB of JSON; their longest event is 6.9 KB, their
//! longest string (a kernel's name) 2.0 KB, and the 54 MB one keeps 64,663 kernels, copies and
//! launches. The benches' largest synthetic rank is 2.4 GB of JSON keeping about 2.2 million.

use std::cell::Cell;
use std::fmt;
use std::io::{self, Read};
use std::rc::Rc;

const MIB: u64 = 1 << 20;

/// The limits of one trace file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TraceLimits {
    /// The most bytes of JSON one file may hold (after decompression).
    pub(crate) total: u64,
    /// A gzip file may expand to at most `ratio` times the compressed bytes read so far, plus
    /// `slack` (so that a small file may expand more).
    pub(crate) ratio: u64,
    pub(crate) slack: u64,
    /// The longest string (a name, a key, an argument), in bytes between its quotes; also the
    /// longest event the scanner holds whole (past it, the scanner leaves the file to the plain
    /// reader, which holds strings, not events, and refuses the long string where it is).
    pub(crate) string: u64,
    /// The most events the analysis keeps from one file (kernels, copies, launches,
    /// collectives, step spans): about 100 bytes of memory each.
    pub(crate) kept: u64,
    /// A gzip file keeps at most one event per `gzip_per_kept` bytes of gzip read so far, plus
    /// `kept_slack`: its memory is bounded by its compressed size, whatever it expands to.
    pub(crate) gzip_per_kept: u64,
    pub(crate) kept_slack: u64,
}

/// The limits every trace is read with.
pub(crate) const LIMITS: TraceLimits = TraceLimits {
    total: 32 << 30,
    ratio: 256,
    slack: 32 * MIB,
    string: MIB,
    kept: 16_000_000,
    gzip_per_kept: 4,
    kept_slack: 100_000,
};

impl TraceLimits {
    /// The refusal of a file that expands past [`TraceLimits::total`] (said after the path).
    pub(crate) fn total_words(&self) -> String {
        format!(
            "it holds more than {} of JSON, the most one trace file may hold (the real traces of the tests hold up to 54 MB, a rank of the benches' largest case 2.4 GB)",
            crate::util::read::size_words(self.total)
        )
    }

    /// The refusal of a file that keeps more than [`TraceLimits::kept`] events.
    pub(crate) fn kept_words(&self) -> String {
        format!(
            "it holds more than {} events the analysis keeps (kernels, copies, launches, collectives, steps), the most one trace file may give (a 2.4 GB rank of the benches' largest case keeps about 2.2 million)",
            crate::units::grouped(self.kept)
        )
    }

    /// The refusal of a gzip file that keeps more events than its size allows.
    pub(crate) fn kept_gzip_words(&self, kept: u64, gzip: u64) -> String {
        format!(
            "it keeps {} events from the first {} bytes of gzip, more than one per {} bytes plus {}: real profiler traces keep one event per 38 to 89 bytes of gzip; a gzip bomb?",
            crate::units::grouped(kept),
            crate::units::grouped(gzip),
            self.gzip_per_kept,
            crate::units::grouped(self.kept_slack)
        )
    }
}

/// A limit passed, as an I/O error's payload: the sentence that says which (after the path).
#[derive(Debug)]
pub(crate) struct Passed(pub(crate) String);

impl fmt::Display for Passed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Passed {}

fn passed(words: String) -> io::Error {
    io::Error::other(Passed(words))
}

/// The sentence of a limit passed, if `e` carries one.
pub(crate) fn passed_of(e: &io::Error) -> Option<&str> {
    e.get_ref()
        .and_then(|x| x.downcast_ref::<Passed>())
        .map(|p| p.0.as_str())
}

/// Counts the bytes read through it (the gzip side of a trace, as the decoder takes them).
pub(crate) struct Counted<R> {
    pub(crate) inner: R,
    pub(crate) bytes: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes.set(self.bytes.get() + n as u64);
        Ok(n)
    }
}

/// A trace's JSON as it streams, refused past [`TraceLimits::total`] and, for a gzip file
/// (`compressed`: the bytes of gzip read so far), past its expansion limit; `passed` keeps the
/// refusal, for the caller of a reader that swallows errors. One addition and two comparisons
/// per read of up to a megabyte.
pub(crate) struct Expanded {
    inner: Box<dyn Read>,
    out: u64,
    pub(crate) compressed: Option<Rc<Cell<u64>>>,
    limits: TraceLimits,
    pub(crate) passed: Option<String>,
}

impl Expanded {
    pub(crate) fn new(
        inner: Box<dyn Read>,
        compressed: Option<Rc<Cell<u64>>>,
        limits: TraceLimits,
    ) -> Self {
        Expanded {
            inner,
            out: 0,
            compressed,
            limits,
            passed: None,
        }
    }

    /// The refusal of the JSON read so far, if a limit is passed.
    fn over(&self) -> Option<String> {
        let l = &self.limits;
        if self.out > l.total {
            return Some(l.total_words());
        }
        let c = self.compressed.as_ref()?.get();
        (self.out > c.saturating_mul(l.ratio).saturating_add(l.slack)).then(|| {
            format!(
                    "its gzip stream expands more than {} times (to {} bytes of JSON from the first {} bytes of gzip): real profiler traces expand 8 to 21 times; a gzip bomb? (the limit: {} times the gzip read, plus {})",
                    l.ratio,
                    self.out,
                    c,
                    l.ratio,
                crate::util::read::size_words(l.slack)
            )
        })
    }
}

impl Read for Expanded {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.out += n as u64;
        if let Some(words) = self.over() {
            self.passed = Some(words.clone());
            return Err(passed(words));
        }
        Ok(n)
    }
}

/// A trace's JSON for the plain reader, which may hold a whole string (serde's buffer): a
/// string longer than [`TraceLimits::string`] is refused where it passes the limit. Tracks
/// strings and escapes across reads, jumping between quotes and backslashes.
pub(crate) struct Strings<R> {
    pub(crate) inner: R,
    pub(crate) max: u64,
    in_str: bool,
    esc: bool,
    /// Bytes of the open string so far.
    run: u64,
    /// Bytes read before this read.
    at: u64,
}

impl<R> Strings<R> {
    pub(crate) fn new(inner: R, max: u64) -> Self {
        Strings {
            inner,
            max,
            in_str: false,
            esc: false,
            run: 0,
            at: 0,
        }
    }

    /// Follows `b` through strings; `Err(i)` where a string passes the limit at `b[i]`. The
    /// open string's bytes so far never exceed the limit between calls.
    fn follow(&mut self, b: &[u8]) -> Result<(), usize> {
        let mut i = 0;
        while i < b.len() {
            if !self.in_str {
                let Some(j) = memchr::memchr(b'"', &b[i..]) else {
                    return Ok(());
                };
                i += j + 1;
                self.in_str = true;
                self.run = 0;
                continue;
            }
            if self.esc {
                // the escaped byte
                self.esc = false;
                self.run += 1;
                if self.run > self.max {
                    return Err(i);
                }
                i += 1;
                continue;
            }
            let j = memchr::memchr2(b'"', b'\\', &b[i..]).unwrap_or(b.len() - i);
            if self.run + j as u64 > self.max {
                return Err(i + (self.max - self.run) as usize);
            }
            self.run += j as u64;
            i += j;
            match b.get(i) {
                Some(b'"') => self.in_str = false,
                Some(_) => {
                    self.esc = true;
                    self.run += 1;
                    if self.run > self.max {
                        return Err(i);
                    }
                }
                None => {}
            }
            i += 1;
        }
        Ok(())
    }
}

/// Whether `doc` holds a string longer than `max` bytes.
pub(crate) fn holds_longer_string(doc: &[u8], max: u64) -> bool {
    Strings::new((), max).follow(doc).is_err()
}

impl<R: Read> Read for Strings<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Err(i) = self.follow(&buf[..n]) {
            return Err(passed(format!(
                "a string longer than {} at byte {} of its JSON, the longest a trace's string may be (the longest name in the real traces of the tests, a kernel's, is 2.0 KB)",
                crate::util::read::size_words(self.max),
                self.at + i as u64
            )));
        }
        self.at += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(doc: &[u8], max: u64, chunk: usize) -> Result<(), String> {
        let mut r = Strings::new(doc, max);
        let mut buf = vec![0u8; chunk];
        loop {
            match r.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(passed_of(&e).unwrap().to_string()),
            }
        }
    }

    /// Strings of up to `max` bytes pass, one byte more does not, at every chunk size (a
    /// quote, a backslash or an escaped quote last in a read); escapes count as their bytes.
    #[test]
    fn the_longest_string_is_found_across_reads_and_escapes() {
        for chunk in [1, 2, 3, 7, 64] {
            assert!(strings(br#"{"abcd":"a\"d","x":[1,2]}"#, 4, chunk).is_ok());
            assert!(strings(br#"{"a\\":"abcd"}"#, 4, chunk).is_ok());
            let e = strings(br#"{"k":"abcde"}"#, 4, chunk).unwrap_err();
            // the fifth byte of the string, `e`, is byte 10 of the document
            assert!(e.contains("longer than 4 bytes at byte 10"), "{chunk}: {e}");
            assert!(strings(br#"{"k":"ab\"de"}"#, 4, chunk).is_err(), "{chunk}");
            assert!(strings(br#"{"k":"ab\\"}"#, 4, chunk).is_ok(), "{chunk}");
            // an unterminated long string is refused too, however it ends
            assert!(strings(b"[\"aaaaaaaa", 4, chunk).is_err(), "{chunk}");
        }
    }

    use std::io::Write;
    use std::path::Path;

    use crate::trace::reader::{read_trace_limited, ReadOptions};

    /// `doc` written to `dir/name` (gzipped when the name ends in `.gz`).
    fn file(dir: &Path, name: &str, doc: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        if name.ends_with(".gz") {
            let f = std::fs::File::create(&p).unwrap();
            let mut z = flate2::write::GzEncoder::new(f, flate2::Compression::best());
            z.write_all(doc.as_bytes()).unwrap();
            z.finish().unwrap();
        } else {
            std::fs::write(&p, doc).unwrap();
        }
        p
    }

    fn refusal(p: &Path, l: &TraceLimits) -> String {
        read_trace_limited(p, &ReadOptions::default(), l)
            .unwrap_err()
            .to_string()
    }

    fn kernel(name: &str, ts: u32) -> String {
        format!(r#"{{"ph":"X","cat":"kernel","name":"{name}","ts":{ts},"dur":1}}"#)
    }

    /// Small limits through the reader itself: a string one byte past the limit is refused,
    /// in an event (which the scanner then leaves to the plain reader) or outside the events
    /// (the skeleton), gzipped or not; one at the limit is read.
    #[test]
    fn the_reader_refuses_a_string_past_its_limit_wherever_it_stands() {
        let d = tempfile::tempdir().unwrap();
        let l = TraceLimits {
            string: 64,
            ..LIMITS
        };
        let at = "k".repeat(64);
        let past = "k".repeat(65);
        for name in ["t.json", "t.json.gz"] {
            let ok = file(
                d.path(),
                name,
                &format!(r#"{{"traceEvents":[{}]}}"#, kernel(&at, 1)),
            );
            let t = read_trace_limited(&ok, &ReadOptions::default(), &l).unwrap();
            assert_eq!(t[0].names, std::slice::from_ref(&at));
            let long = format!(
                r#"{{"traceEvents":[{},{}]}}"#,
                kernel("a", 1),
                kernel(&past, 2)
            );
            let m = refusal(&file(d.path(), name, &long), &l);
            // where the name's 65th byte stands
            let at_byte = long.find(&past).unwrap() + 64;
            assert!(
                m.contains(&format!(
                    "a string longer than 64 bytes at byte {at_byte} of its JSON"
                )),
                "{m}"
            );
            let outside = format!(
                r#"{{"traceName":"{past}","traceEvents":[{}]}}"#,
                kernel("a", 1)
            );
            let m = refusal(&file(d.path(), name, &outside), &l);
            assert!(
                m.contains("a string longer than 64 bytes at byte 78"),
                "{m}"
            );
        }
    }

    /// A gzip file past its expansion, any file past the total (a plain one by its size, before
    /// it is read), and a file keeping more events than the limit, each refused naming it.
    #[test]
    fn the_reader_refuses_expansion_total_and_kept_events_past_their_limits() {
        let d = tempfile::tempdir().unwrap();
        let events: Vec<String> = (0..400).map(|i| kernel("k", i)).collect();
        let doc = format!(r#"{{"traceEvents":[{}]}}"#, events.join(","));
        let gz = file(d.path(), "t.json.gz", &doc);
        let plain = file(d.path(), "t.json", &doc);
        let gz_len = std::fs::metadata(&gz).unwrap().len();
        assert!(doc.len() as u64 > 8 * gz_len, "{} {gz_len}", doc.len());
        let ratio = TraceLimits {
            ratio: 2,
            slack: 0,
            ..LIMITS
        };
        let m = refusal(&gz, &ratio);
        assert!(
            m.starts_with(&format!(
                "'{}': its gzip stream expands more than 2 times",
                gz.display()
            )),
            "{m}"
        );
        assert!(read_trace_limited(&plain, &ReadOptions::default(), &ratio).is_ok());
        let total = TraceLimits {
            total: doc.len() as u64 - 1,
            ..LIMITS
        };
        for p in [&gz, &plain] {
            let m = refusal(p, &total);
            assert!(
                m.contains(&format!(
                    "it holds more than {} bytes of JSON",
                    doc.len() - 1
                )),
                "{m}"
            );
        }
        let kept = TraceLimits {
            kept: 399,
            ..LIMITS
        };
        for p in [&gz, &plain] {
            let m = refusal(p, &kept);
            assert!(
                m.contains("it holds more than 399 events the analysis keeps"),
                "{m}"
            );
            let t = read_trace_limited(
                p,
                &ReadOptions::default(),
                &TraceLimits {
                    kept: 400,
                    ..LIMITS
                },
            );
            assert_eq!(t.unwrap()[0].gpu.len(), 400);
        }
        // a gzip file keeps one event per 4 bytes of gzip, plus the slack: 400 events of fewer
        // than 1,600 bytes of gzip pass with a slack of 400, not with 0
        assert!(gz_len < 1600, "{gz_len}");
        let per_gzip = |slack| TraceLimits {
            kept_slack: slack,
            ..LIMITS
        };
        let m = refusal(&gz, &per_gzip(0));
        assert!(
            m.contains("bytes of gzip, more than one per 4 bytes plus 0"),
            "{m}"
        );
        assert!(read_trace_limited(&gz, &ReadOptions::default(), &per_gzip(400)).is_ok());
        assert!(read_trace_limited(&plain, &ReadOptions::default(), &per_gzip(0)).is_ok());
    }

    #[test]
    fn a_gzip_stream_is_refused_past_its_expansion_and_any_stream_past_the_total() {
        let limits = TraceLimits {
            total: 100,
            ratio: 4,
            slack: 10,
            ..LIMITS
        };
        let read_all = |data: &[u8], compressed: Option<u64>| {
            let mut r = Expanded::new(
                Box::new(io::Cursor::new(data.to_vec())),
                compressed.map(|c| Rc::new(Cell::new(c))),
                limits,
            );
            let mut sink = Vec::new();
            r.read_to_end(&mut sink)
                .map_err(|e| passed_of(&e).unwrap().to_string())
        };
        assert_eq!(read_all(&[b' '; 100], None), Ok(100));
        let e = read_all(&[b' '; 101], None).unwrap_err();
        assert!(e.contains("more than 100 bytes of JSON"), "{e}");
        // 5 bytes of gzip may give 4 x 5 + 10 = 30 bytes, not 31
        assert_eq!(read_all(&[b' '; 30], Some(5)), Ok(30));
        let e = read_all(&[b' '; 31], Some(5)).unwrap_err();
        assert!(e.contains("expands more than 4 times"), "{e}");
    }
}
