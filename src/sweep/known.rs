//! NCCL_* variable names NCCL documents (or reads) as of 2.28, to catch misspellings such as
//! `NCCL_PRTO`: NCCL silently ignores a name it does not know, so a sweep over it would time
//! the default N times and "prove" nothing.
//!
//! The list errs on the side of inclusion: a name missing here only costs a warning, and the
//! point still runs.

/// Whether a point setting this name changes what runs: a variable NCCL reads (one list for
/// the whole tool, kept with `inspect`, which checks running servers against it), or the
/// sweep's own `NCCL_LIB` (the library itself, see [`super::library`]).
pub(crate) fn is_known(name: &str) -> bool {
    name == super::library::NAME || crate::inspect::nccl_vars::is_known_nccl_var(name)
}

/// The warning for an unknown name, or None for a known one.
pub(crate) fn unknown_warning(name: &str) -> Option<String> {
    if is_known(name) {
        return None;
    }
    Some(format!(
        "{}, so its points will time the defaults; running anyway",
        crate::inspect::nccl_vars::unknown_words(name)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typo_is_caught_with_a_suggestion() {
        assert!(is_known("NCCL_PROTO"));
        assert!(!is_known("NCCL_PRTO"));
        assert_eq!(
            crate::inspect::nccl_vars::suggest("NCCL_PRTO"),
            Some("NCCL_PROTO")
        );
        let w = unknown_warning("NCCL_PRTO").unwrap();
        assert!(w.contains("did you mean NCCL_PROTO"), "{w}");
        assert!(unknown_warning("NCCL_ALGO").is_none());
        assert!(unknown_warning("NCCL_LIB").is_none());
        assert!(unknown_warning("NCCL_SOMETHING_ELSE_ENTIRELY")
            .unwrap()
            .contains("not a variable NCCL knows"));
    }
}
