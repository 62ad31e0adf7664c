//! The decision on one event object: its extent and whether the reader may use it, read a
//! block at a time when it holds no backslash and string by string otherwise (both give the
//! same answer).

use super::blocks::{classify, prefix_xor, Stops};

/// Categories of the events the reader keeps (GPU work and runtime calls).
pub(super) const KEEP_CATS: &[&[u8]] = &[
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
/// One event object at the start of `b` (`b[0] == b'{'`): its length, and whether the reader
/// may use it. `None` when the object does not end within `b`.
///
/// An event with no backslash (nearly all of them) is read by [`scan_plain`]; any other by
/// [`scan_event_exact`]. Both give the same answer on every input (a test checks it on
/// random ones against the byte-stepping reference). The third value: whether the event is
/// known to hold no backslash (it was read by the block scan).
pub(super) fn scan_event(b: &[u8], label: Option<&[u8]>) -> Option<(usize, bool, bool)> {
    match scan_plain(b, label) {
        Plain::Done(end, keep) => Some((end, keep, true)),
        Plain::NeedMore => None,
        Plain::Escaped => scan_event_exact(b, label).map(|(end, keep)| (end, keep, false)),
    }
}

/// What [`scan_plain`] found.
#[derive(Debug, PartialEq)]
pub(super) enum Plain {
    /// The event's length, and whether to keep it.
    Done(usize, bool),
    /// The event does not end within the buffer.
    NeedMore,
    /// A backslash came first: the event is left to [`scan_event_exact`].
    Escaped,
}

/// Whether the string whose text starts at `text` is exactly `word` (no backslash in the
/// event, so the string ends at its next quote; `word` holds none).
#[inline(always)]
fn is_string(text: &[u8], word: &[u8]) -> bool {
    text.len() > word.len() && text[word.len()] == b'"' && text.starts_with(word)
}

/// [`scan_event_exact`] for an event with no backslash, a block at a time instead of a string
/// at a time.
///
/// Without a backslash every quote delimits a string, so a block's in-string bits are the
/// running parity of its quotes, and its brackets and braces outside strings give the nesting
/// and the event's end without looking at a single string. Of the strings, only those whose
/// first letter can begin a word the decision looks at are read (`c`, `r`, the label's first
/// byte: two or three of the fourteen to twenty strings of a typical event), each at its
/// nesting depth (the block's depth and the brackets before it): a `"cat"` key at the top
/// level and its value, `record_param_comms`, `Collective name` and the label, exactly as
/// the exact scan compares them. A block with a backslash in it gives up
/// ([`Plain::Escaped`]); so does an empty label (no first byte to look for).
pub(super) fn scan_plain(b: &[u8], label: Option<&[u8]>) -> Plain {
    let label0 = match label {
        None => 0,
        Some([]) => return Plain::Escaped,
        Some(l) => l[0],
    };
    // Depth before the block, and whether the block starts inside a string.
    let mut depth = 0u32;
    let mut in_str = 0u64;
    // An opening quote as the previous block's last byte (its first letter is this block's
    // first byte).
    let mut open_carry = 0u64;
    let mut keep = false;
    let mut cats = 0u32;
    // The opening quote of the top-level `"cat"` value: compared as the value only.
    let mut value_at = usize::MAX;
    let mut base = 0;
    while base < b.len() {
        let m = classify(&b[base..], label0);
        if m.backslash != 0 {
            return Plain::Escaped;
        }
        // Set at each opening quote and inside strings, clear at closing quotes and outside.
        let inside = prefix_xor(m.quote) ^ in_str;
        let opens = m.open & !inside;
        let closes = m.close & !inside;
        // The nesting at each bracket, up to the event's end (the first `}`/`]` back at 0;
        // `b[0]` is the event's `{`, so the depth never drops below 1 before that).
        let mut d = depth;
        let mut end_bit = None;
        let mut st = opens | closes;
        while st != 0 {
            let t = st.trailing_zeros();
            if opens >> t & 1 != 0 {
                d += 1;
            } else {
                d -= 1;
                if d == 0 {
                    end_bit = Some(t);
                    break;
                }
            }
            st &= st - 1;
        }
        let opening = m.quote & inside;
        let mut cand = ((opening << 1) | open_carry) & m.first;
        if let Some(t) = end_bit {
            cand &= (1u64 << t) - 1;
        }
        open_carry = opening >> 63;
        while cand != 0 {
            let t = cand.trailing_zeros();
            cand &= cand - 1;
            // The string's opening quote (for bit 0, the previous block's last byte).
            let q = base + t as usize - 1;
            if q == value_at {
                continue;
            }
            let below = (1u64 << t) - 1;
            let at_depth = depth + (opens & below).count_ones() - (closes & below).count_ones();
            let text = &b[q + 1..];
            if at_depth == 1 && is_string(text, b"cat") {
                match cat_key(b, q + 4) {
                    CatKey::NotKey => continue,
                    CatKey::NeedMore => return Plain::NeedMore,
                    CatKey::NotString => keep = true,
                    CatKey::Value(k) => {
                        value_at = k;
                        let Some(n) = memchr::memchr(b'"', &b[k + 1..]) else {
                            return Plain::NeedMore;
                        };
                        keep |= KEEP_CATS.contains(&&b[k + 1..k + 1 + n]);
                    }
                }
                cats += 1;
            } else {
                keep |= is_kept_word(|w| is_string(text, w), text, label);
            }
        }
        if let Some(t) = end_bit {
            return Plain::Done(base + t as usize + 1, keep || cats > 1);
        }
        depth = d;
        in_str = 0u64.wrapping_sub(inside >> 63);
        base += 64;
    }
    Plain::NeedMore
}

/// One event object at the start of `b` (`b[0] == b'{'`): its length, and whether the reader
/// may use it. `None` when the object does not end within `b`.
///
/// One pass over its bytes (strings, escapes and nesting tracked): it is kept when a top-level
/// `"cat"` names a GPU or runtime category, or is not a plain string, or appears twice; when
/// any string is exactly `record_param_comms`, `Collective name` or the step label; when it
/// holds a `\u` escape (which can spell any of these differently), and with a label when it
/// holds any escape. Everything else the reader would skip.
///
/// The pass jumps from one quote, backslash, bracket or brace to the next ([`Stops`]); the
/// bytes between them (letters, digits, colons, commas) are never looked at one by one.
pub(super) fn scan_event_exact(b: &[u8], label: Option<&[u8]>) -> Option<(usize, bool)> {
    let mut depth = 0u32;
    let mut keep = false;
    let mut cats = 0u32;
    let mut cat_value = false;
    let mut backslash = false;
    let mut stops = Stops::new(b);
    while let Some(p) = stops.next() {
        // Tests in the order of frequency (a jump table here would be an indirect branch).
        let c = b[p];
        if c != b'"' {
            match c | 0x20 {
                b'{' => depth += 1,
                b'}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        let keep = keep || cats > 1 || (label.is_some() && backslash);
                        return Some((p + 1, keep));
                    }
                }
                // A `\\` between strings is no delimiter (nor valid JSON): a byte like others.
                _ => {}
            }
            continue;
        }
        // A string: on to its closing quote, past escapes (brackets and braces in it are text).
        let s = p + 1;
        let mut esc = false;
        let end = loop {
            let q = stops.next()?;
            let c = b[q];
            if c == b'"' {
                break q;
            }
            if c == b'\\' {
                esc = true;
                let next = *b.get(q + 1)?;
                keep |= next == b'u';
                // The escaped byte, when it is a stop, is the very next one.
                if matches!(next, b'"' | b'\\' | b'{' | b'}' | b'[' | b']') {
                    stops.next();
                }
            }
        };
        backslash |= esc;
        let text = &b[s..end];
        if cat_value {
            cat_value = false;
            keep |= esc || KEEP_CATS.contains(&text);
        } else if depth == 1 && text == b"cat" {
            match cat_key(b, end) {
                CatKey::NotKey => continue,
                CatKey::NeedMore => return None,
                // The next string is the value (only the colon and blanks lie between).
                CatKey::Value(_) => cat_value = true,
                CatKey::NotString => keep = true,
            }
            cats += 1;
        } else {
            keep |= is_kept_word(|w| text == w, text, label);
        }
    }
    None
}

/// What follows a `"cat"` string at the top level of an event, whose closing quote is at
/// `close`.
enum CatKey {
    /// No colon: it is not a key.
    NotKey,
    /// The key's value is a string, its opening quote here.
    Value(usize),
    /// The key's value is something else (the event is kept: the reader must judge it).
    NotString,
    /// The buffer ends first.
    NeedMore,
}

fn cat_key(b: &[u8], close: usize) -> CatKey {
    let k = skip_ws(b, close + 1);
    match b.get(k) {
        Some(b':') => {}
        Some(_) => return CatKey::NotKey,
        None => return CatKey::NeedMore,
    }
    let k = skip_ws(b, k + 1);
    match b.get(k) {
        Some(b'"') => CatKey::Value(k),
        Some(_) => CatKey::NotString,
        None => CatKey::NeedMore,
    }
}

/// Whether a string that `is` says equals some word is one of those that keep an event:
/// `record_param_comms`, `Collective name` or the step label. (The block scan looks only at
/// strings beginning with their first letters: keep [`classify`]'s `first` in step.)
#[inline(always)]
fn is_kept_word(is: impl Fn(&[u8]) -> bool, text: &[u8], label: Option<&[u8]>) -> bool {
    is(b"record_param_comms")
        || is(b"Collective name")
        || label.is_some_and(|l| text.starts_with(l))
}

/// The index of the first byte at or after `i` that is not JSON whitespace.
pub(in crate::trace) fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\n' | b'\r' | b'\t') {
        i += 1;
    }
    i
}
