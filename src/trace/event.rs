//! A direct parser of one kept trace event into [`RawEvent`], for the common case: an event
//! with no backslash in it (so every string is its own text and ends at the next quote).
//!
//! serde spends most of its time on a kernel event's many arguments the analysis never reads
//! (`grid`, `registers per thread`, ...) and on moving its large field structs around. This
//! parser reads the fields [`RawEvent`] and [`RawArgs`] name, validates and skips the rest,
//! and gives exactly what `serde_json::from_str::<RawEvent>` gives. Wherever that could be in
//! doubt it does not guess: it returns `None` and the caller hands the event to serde, which
//! then gives its result or its error. That covers any backslash, a duplicate field the
//! structs name, a field of another JSON type than the usual one (`"args": [...]`, a number
//! as `name`), control characters in strings, nesting deeper than [`MAX_DEPTH`] and the shape
//! arguments (`Input Dims`, `Input type`). Integers
//! and plain decimals of up to 19 digits are computed here the way serde_json computes them;
//! every other number goes to serde_json's own number parser, so that it rounds the same.
//! Tests compare it with serde on random events and on 50,000 random numbers.

use std::borrow::Cow;

use super::prefilter::skip_ws;
use super::raw::{Lenient, RawArgs, RawEvent, Text};

/// Powers of ten as serde_json's table holds them (each exact in an f64 up to 1e22).
const POW10: [f64; 20] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19,
];

/// Whether serde_json computes decimals the way [`P::number`] does (as it does unless some
/// crate in the build turns on its `float_roundtrip` feature, which rounds them exactly):
/// asked once, of a decimal on which the two ways differ.
fn serde_divides() -> bool {
    static DIVIDES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DIVIDES.get_or_init(|| {
        serde_json::from_str::<f64>("6249979066121302.517").ok()
            == Some(6_249_979_066_121_302_517u64 as f64 / 1e3)
    })
}

/// Nesting of ignored values beyond which the parser leaves the event to serde (whose own
/// limit is 128).
const MAX_DEPTH: u32 = 64;

/// `serde_json::from_str::<RawEvent>(s)` where that is sure to give `Ok`, handed to `f` by
/// reference (the event is large; nothing is moved); `None`, without calling `f`, where the
/// event is left to serde. `plain`: the caller knows that `s` holds no backslash (the
/// scanner's block scan read it), so it is not looked for again.
#[inline]
pub(crate) fn parse_then<R>(s: &str, plain: bool, f: impl FnOnce(&RawEvent) -> R) -> Option<R> {
    let mut e = RawEvent::default();
    parse_into(s, plain, &mut e).then(|| f(&e))
}

fn parse_into<'a>(s: &'a str, plain: bool, e: &mut RawEvent<'a>) -> bool {
    if !plain && memchr::memchr(b'\\', s.as_bytes()).is_some() {
        return false;
    }
    let mut p = P {
        s,
        b: s.as_bytes(),
        i: 0,
    };
    p.ws();
    if p.event(e).is_none() {
        return false;
    }
    p.ws();
    p.i == p.b.len()
}

struct P<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

/// Marks field `bit` as seen; `None` when it was already (serde: "duplicate field").
fn once(seen: &mut u32, bit: u32) -> Option<()> {
    if *seen & (1 << bit) != 0 {
        return None;
    }
    *seen |= 1 << bit;
    Some(())
}

/// Whether any byte of `w` is `"` or below 0x20 (exact: no borrow crosses a byte).
#[inline(always)]
fn quote_or_control(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const LOW: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    // High bit set in each byte that is zero: after the xor, the quotes.
    let q = w ^ (ONES * b'"' as u64);
    let quote = !((q & LOW).wrapping_add(LOW) | q | LOW);
    // `(w | HIGH) - 0x20..` leaves a byte's high bit clear exactly when its low seven bits are
    // below 0x20; `!w` keeps the bytes whose own high bit is clear.
    let control = !((w | HIGH).wrapping_sub(ONES * 0x20)) & !w & HIGH;
    (quote | control) != 0
}

impl<'a> P<'a> {
    #[inline]
    fn ws(&mut self) {
        self.i = skip_ws(self.b, self.i);
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline]
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// A string at `i` (its opening quote); its text. No backslash can occur (the whole event
    /// was checked, or the scanner knows); a control character makes serde fail, so it gives
    /// `None`. No `memchr`: the strings are short (a call per string costs more than it skips).
    #[inline]
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        let mut i = start;
        // Eight bytes at a time while none of them is a quote or a control character.
        while let Some(w) = self.b.get(i..i + 8) {
            let w = u64::from_le_bytes(w.try_into().expect("eight bytes"));
            if quote_or_control(w) {
                break;
            }
            i += 8;
        }
        loop {
            match *self.b.get(i)? {
                b'"' => break,
                c if c < 0x20 => return None,
                _ => i += 1,
            }
        }
        self.i = i + 1;
        // Quotes are ASCII, so both ends lie on character boundaries.
        Some(&self.s[start..i])
    }

    /// Whether a `null` is next (and consumes it): `Option` fields read it as `None`.
    #[inline]
    fn null(&mut self) -> Option<bool> {
        if self.peek()? != b'n' {
            return Some(false);
        }
        self.literal(b"null")?;
        Some(true)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i + word.len();
        (self.b.get(self.i..end)? == word).then(|| self.i = end)
    }

    /// Digits from `i` on: their value (while it fits in a u64), their count, where they end.
    #[inline]
    fn digits(&self, mut i: usize) -> (u64, usize, usize) {
        let (mut v, start) = (0u64, i);
        while let Some(&c) = self.b.get(i) {
            if !c.is_ascii_digit() {
                break;
            }
            v = v.wrapping_mul(10).wrapping_add((c - b'0') as u64);
            i += 1;
        }
        (v, i - start, i)
    }

    /// A JSON number at `i`, as serde gives it to [`Lenient`]. Integers and plain decimals of
    /// up to 19 digits (the bulk of a trace: ids, `ts`, `dur`) are computed here the way
    /// serde_json computes them (the integer as a u64, `as f64`; a decimal as its digits as
    /// a u64, `as f64`, divided by the power of ten of its fraction digits; negated for a
    /// minus sign); any other number, and any decimal when serde_json rounds them another way
    /// ([`serde_divides`]), is handed to serde_json's own parser, so that it rounds the same.
    /// Invalid numbers (`01`, `1.`, `-`) give `None`.
    fn number(&mut self) -> Option<f64> {
        let start = self.i;
        let neg = self.peek()? == b'-';
        let (int, n, mut i) = self.digits(start + neg as usize);
        if n == 0 || (n > 1 && self.b[i - n] == b'0') {
            return None;
        }
        let (mut sig, mut digits, mut frac) = (int, n, 0);
        if self.b.get(i) == Some(&b'.') {
            let (f, k, j) = self.digits(i + 1);
            if k == 0 {
                return None;
            }
            // The fraction's digits appended to the integer's (exact while 19 digits fit).
            sig = int
                .wrapping_mul(10u64.wrapping_pow(k as u32))
                .wrapping_add(f);
            (digits, frac, i) = (n + k, k, j);
        }
        let plain = !matches!(self.b.get(i), Some(b'e' | b'E'));
        if plain && digits <= 19 && (frac == 0 || serde_divides()) {
            self.i = i;
            let m = if frac == 0 {
                sig as f64
            } else {
                sig as f64 / POW10[frac]
            };
            return Some(if neg { -m } else { m });
        }
        let t = self.number_token()?;
        serde_json::from_str::<f64>(t).ok()
    }

    /// The extent of a JSON number at `i`, validated against the grammar
    /// (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`).
    fn number_token(&mut self) -> Option<&'a str> {
        let start = self.i;
        let mut i = start + (self.peek()? == b'-') as usize;
        let (_, n, j) = self.digits(i);
        if n == 0 || (n > 1 && self.b[i] == b'0') {
            return None;
        }
        i = j;
        if self.b.get(i) == Some(&b'.') {
            let (_, k, j) = self.digits(i + 1);
            if k == 0 {
                return None;
            }
            i = j;
        }
        if let Some(b'e' | b'E') = self.b.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = self.b.get(i) {
                i += 1;
            }
            let (_, k, j) = self.digits(i);
            if k == 0 {
                return None;
            }
            i = j;
        }
        self.i = i;
        Some(&self.s[start..i])
    }

    /// An `Option<Text>` field.
    fn opt_text(&mut self) -> Option<Option<Text<'a>>> {
        if self.null()? {
            return Some(None);
        }
        Some(Some(Text(Cow::Borrowed(self.string()?))))
    }

    /// An `Option<Lenient>` field.
    fn opt_lenient(&mut self) -> Option<Option<Lenient>> {
        Some(Some(match self.peek()? {
            b'n' => {
                self.literal(b"null")?;
                return Some(None);
            }
            b'"' => Lenient::Str(self.string()?.to_string()),
            b't' => {
                self.literal(b"true")?;
                Lenient::Num(1.0)
            }
            b'f' => {
                self.literal(b"false")?;
                Lenient::Num(0.0)
            }
            _ => Lenient::Num(self.number()?),
        }))
    }

    /// Any value, validated and skipped (serde's `IgnoredAny`).
    fn skip(&mut self, depth: u32) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'[' | b'{' if depth >= MAX_DEPTH => None,
            b'[' => self.sequence(b']', |p| p.skip(depth + 1)),
            b'{' => self.members(|p, _| p.skip(depth + 1)),
            _ => self.number_token().map(drop),
        }
    }

    /// The items of an array or object whose opening bracket is at `i`, up to `close`, each
    /// read by `item` (with the parser at the item); `None` to give up.
    #[inline]
    fn sequence(&mut self, close: u8, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.i += 1;
        self.ws();
        if self.eat(close).is_some() {
            return Some(());
        }
        loop {
            item(self)?;
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                c if c == close => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// The members of an object at `i` (its `{`), each key handed to `field` with the parser
    /// at its value; `field` returns `None` to give up.
    #[inline]
    fn members(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        if self.peek()? != b'{' {
            return None;
        }
        self.sequence(b'}', |p| {
            let key = p.string()?;
            p.ws();
            p.eat(b':')?;
            p.ws();
            field(p, key)
        })
    }

    fn event(&mut self, e: &mut RawEvent<'a>) -> Option<()> {
        let mut seen = 0u32;
        self.members(|p, key| {
            let (bit, slot) = match key {
                "ph" | "name" | "cat" => {
                    let (bit, slot) = match key {
                        "ph" => (0, &mut e.ph),
                        "name" => (1, &mut e.name),
                        _ => (2, &mut e.cat),
                    };
                    once(&mut seen, bit)?;
                    *slot = p.opt_text()?;
                    return Some(());
                }
                "args" => {
                    once(&mut seen, 3)?;
                    if !p.null()? {
                        p.args(e.args.insert(RawArgs::default()))?;
                    }
                    return Some(());
                }
                "ts" => (4, &mut e.ts),
                "dur" => (5, &mut e.dur),
                "pid" => (6, &mut e.pid),
                "tid" => (7, &mut e.tid),
                "id" => (8, &mut e.id),
                _ => return p.skip(1),
            };
            once(&mut seen, bit)?;
            *slot = p.opt_lenient()?;
            Some(())
        })
    }

    fn args(&mut self, a: &mut RawArgs) -> Option<()> {
        let mut seen = 0u32;
        self.members(|p, key| {
            let (bit, slot) = match key {
                "Collective name" => {
                    once(&mut seen, 0)?;
                    a.collective_name = if p.null()? {
                        None
                    } else {
                        Some(p.string()?.to_string())
                    };
                    return Some(());
                }
                "In msg nelems" => (1, &mut a.in_nelems),
                "Out msg nelems" => (2, &mut a.out_nelems),
                "Group size" => (3, &mut a.group_size),
                "dtype" => (4, &mut a.dtype),
                "Process Group Name" => (5, &mut a.pg_name),
                "Seq" => (6, &mut a.seq),
                "External id" => (7, &mut a.external_id),
                "correlation" => (8, &mut a.correlation),
                "stream" => (9, &mut a.stream),
                "rank" => (10, &mut a.rank),
                // Shapes are left to serde (few events: the kept CPU ops).
                "Input Dims" | "Input type" => return None,
                _ => return p.skip(2),
            };
            once(&mut seen, bit)?;
            *slot = p.opt_lenient()?;
            Some(())
        })
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// What serde gives, in a comparable form (`Ok` with the event's fields, or that it failed).
    fn serde_view(s: &str) -> Option<String> {
        serde_json::from_str::<RawEvent>(s)
            .ok()
            .map(|e| format!("{e:?}"))
    }

    fn fast_view(s: &str) -> Option<String> {
        parse_then(s, false, |e| format!("{e:?}"))
    }

    /// The parser either agrees with serde exactly or leaves the event to it.
    fn check(s: &str) -> bool {
        match fast_view(s) {
            Some(v) => {
                assert_eq!(Some(&v), serde_view(s).as_ref(), "differs on {s}");
                true
            }
            None => false,
        }
    }

    #[test]
    fn kernel_and_runtime_events_parse_as_serde_reads_them() {
        let kernel = r#"{"ph":"X","cat":"kernel","name":"void cutlass::Kernel2<x>(Params)","pid":0,"tid":7,"ts":1700000000000008.250,"dur":1.000,"args":{"External id":1,"queued":0,"device":0,"context":1,"stream":7,"correlation":1,"registers per thread":96,"shared memory":0,"blocks per SM":0.5,"warps per SM":2.0,"grid":[16,1,1],"block":[640,1,1],"est. achieved occupancy %":5}}"#;
        assert!(check(kernel));
        let nccl = r#"{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "pid": 0, "tid": 7,
          "ts": 5434097131893.574, "dur": 18.432,
          "args": {
            "External id": 15,
            "device": 0, "stream": 7, "correlation": 203, "Collective name": "allreduce", "In msg nelems": 21504,
            "Out msg nelems": 21504, "Group size": 2, "dtype": "BFloat16", "In split size": "[]", "Process Group Name": "0",
            "Process Group Description": "default_pg", "Process Group Ranks": "[0, 1]", "Seq": 4
          }
        }"#;
        assert!(check(nccl));
        parse_then(nccl, false, |e| {
            let a = e.args.as_ref().unwrap();
            assert_eq!(a.collective_name.as_deref(), Some("allreduce"));
            assert_eq!(a.in_nelems, Some(Lenient::Num(21504.0)));
            assert_eq!(a.pg_name, Some(Lenient::Str("0".into())));
        })
        .unwrap();
        let rt = r#"{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1000,"tid":1000,"ts":1700000000000004.250,"dur":4.000,"args":{"External id":1,"cbid":211,"correlation":1}}"#;
        assert!(check(rt));
        // Fields of other shapes than usual, all read as serde reads them.
        for s in [
            r#"{}"#,
            r#"{ }"#,
            r#"{"ph":null,"ts":null,"args":null}"#,
            r#"{"ts":"123.5","pid":"Spans","tid":true,"id":false,"args":{}}"#,
            r#"{"ts":-5,"dur":0,"id":-0.0,"pid":1e3,"tid":2.5E-2}"#,
            r#"{"ts":12345678901234567890123,"dur":123456789012345678}"#,
            r#"{"x":[[],{},[{"a":[1,null,true,false,"s"]}]],"args":{"y":{"z":[1.5e10]},"Seq":null}}"#,
            r#"{"name":"ü ß 中","args":{"dtype":"é","Collective name":null}}"#,
            r#"{"unknown":1,"unknown":2}"#,
        ] {
            assert!(check(s), "left to serde: {s}");
        }
    }

    #[test]
    fn whatever_serde_would_refuse_or_read_otherwise_is_left_to_it() {
        for s in [
            r#"{"name":"a\"b"}"#,
            r#"{"ts":1,"ts":2}"#,
            r#"{"args":{"correlation":1,"correlation":2}}"#,
            r#"{"args":[1,2]}"#,
            r#"{"name":5}"#,
            r#"{"ts":[1]}"#,
            r#"{"ts":01}"#,
            r#"{"ts":1.}"#,
            r#"{"ts":1e999}"#,
            r#"{"ts":1,}"#,
            r#"{"ts":1 "dur":2}"#,
            "{\"name\":\"a\tb\"}",
            r#"{"x":tru}"#,
            r#"{"ts":1} x"#,
        ] {
            assert_eq!(fast_view(s), None, "{s}");
        }
        // And serde does refuse those that are not valid (so the caller's fallback decides).
        assert_eq!(serde_view(r#"{"ts":1,"ts":2}"#), None);
        assert_eq!(serde_view(r#"{"ts":01}"#), None);
    }

    #[test]
    fn word_test_finds_quotes_and_control_characters_exactly() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for k in 0..200_000u64 {
            // Random words, and words of one byte value among printable ones.
            let w = if k < 256 * 8 {
                let (byte, at) = (k % 256, k / 256);
                (0x4141_4141_4141_4141u64 & !(0xff << (8 * at))) | (byte << (8 * at))
            } else {
                rng.random()
            };
            let naive = w.to_le_bytes().iter().any(|&c| c == b'"' || c < 0x20);
            assert_eq!(quote_or_control(w), naive, "{w:#018x}");
        }
    }

    /// Numbers of every form a trace has, and random decimals of up to 19 digits (a quarter of
    /// which a correctly rounding parser would read one bit off from serde_json's default),
    /// read as serde reads them.
    #[test]
    fn numbers_round_as_serde_rounds_them() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let mut next = move || rng.random::<u64>();
        let mut tokens: Vec<String> = [
            "0",
            "-0",
            "0.0",
            "-0.0",
            "7",
            "-7",
            "0.5",
            "1.000",
            "18446744073709551615",
            "18446744073709551616",
            "9999999999999999999",
            "-9223372036854775808",
            "-9223372036854775809",
            "12345678901234567890.5",
            "0.00000000000000000001",
            "6249979066121302.517",
            "1e3",
            "-2.5E-3",
            "1E+400",
        ]
        .iter()
        .map(|t| t.to_string())
        .collect();
        for _ in 0..50_000 {
            let digits = 1 + (next() % 19) as usize;
            let frac = (next() % (digits as u64 + 1)) as usize;
            let mut d: String = (0..digits)
                .map(|_| char::from(b'0' + (next() % 10) as u8))
                .collect();
            if frac > 0 && frac < digits {
                d.insert(digits - frac, '.');
            }
            if next() % 4 == 0 {
                d.insert(0, '-');
            }
            tokens.push(d);
        }
        for t in &tokens {
            let mut p = P {
                s: t,
                b: t.as_bytes(),
                i: 0,
            };
            let fast = p.number().filter(|_| p.i == t.len());
            let serde = serde_json::from_str::<f64>(t).ok();
            assert_eq!(
                fast.map(f64::to_bits),
                serde.map(f64::to_bits),
                "{t}: {fast:?} vs {serde:?}"
            );
        }
    }

    /// Random events built from the pieces real traces and odd writers use: the parser reads
    /// exactly those serde reads, and reads them the same.
    #[test]
    fn random_events_agree_with_serde() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut next = move |n: usize| rng.random_range(0..n);
        let keys = [
            "ph", "name", "cat", "ts", "dur", "pid", "tid", "id", "args", "bp", "s", "grid",
        ];
        let arg_keys = [
            "Collective name",
            "In msg nelems",
            "Out msg nelems",
            "Group size",
            "dtype",
            "Process Group Name",
            "Seq",
            "External id",
            "correlation",
            "stream",
            "rank",
            "device",
            "grid",
        ];
        let values = [
            "0",
            "7",
            "-3",
            "21504",
            "1700000000000008.250",
            "5434097131893.574",
            "6249979066121302.517",
            "0.1",
            "2.5e-3",
            "1E+2",
            "123456789012345678",
            "1234567890123456789",
            "99999999999999999999999",
            "-9223372036854775809",
            "null",
            "true",
            "false",
            "\"X\"",
            "\"kernel\"",
            "\"BFloat16\"",
            "\"\"",
            "\"a b:c,{d}[e]\"",
            "[16,1,1]",
            "[]",
            "{}",
            "{\"a\":[1,{\"b\":null}]}",
        ];
        let mut answered = 0;
        for _ in 0..20_000 {
            let mut s = String::from("{");
            let n = next(9);
            for k in 0..n {
                if k > 0 {
                    s.push_str([",", ", ", ",\n  "][next(3)]);
                }
                let key = keys[next(keys.len())];
                s.push_str(&format!("\"{key}\":"));
                if key == "args" && next(4) > 0 {
                    s.push('{');
                    for j in 0..next(6) {
                        if j > 0 {
                            s.push(',');
                        }
                        s.push_str(&format!(
                            "\"{}\": {}",
                            arg_keys[next(arg_keys.len())],
                            values[next(values.len())]
                        ));
                    }
                    s.push('}');
                } else {
                    s.push_str(values[next(values.len())]);
                }
            }
            s.push('}');
            let plain = serde_view(&s);
            let fast = fast_view(&s);
            // None of these pieces holds a backslash or a control character, so wherever
            // serde reads the event, the parser must read it too (and the same).
            assert_eq!(fast, plain, "differs on {s}");
            answered += fast.is_some() as usize;
        }
        // A fair share of them is valid (the rest hold duplicate fields or values of the
        // wrong type for a field), so both sides of the comparison are exercised.
        assert!(answered > 2_000, "answered {answered} of 20000");
    }
}
