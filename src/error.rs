//! Error kinds that decide the exit code.
//!
//! Bad input (a flag, a file, a size) exits with code 2 and one line that says what to fix;
//! everything else (a GPU, NCCL or I/O failure at run time) exits with code 1. The top of the
//! program works with `anyhow`; a [`UsageError`] anywhere in the chain selects exit code 2.

use std::fmt;

/// Input the user can fix: a bad flag value, an unreadable or malformed file, a request the
/// machine cannot satisfy (more GPUs than present). Exit code 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UsageError(pub(crate) String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Builds an `anyhow::Error` that carries a [`UsageError`].
pub(crate) fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// `bail!`-like shorthand for usage errors.
#[macro_export]
macro_rules! usage_bail {
    ($($arg:tt)*) => {
        return Err($crate::error::usage(format!($($arg)*)))
    };
}

/// The exit code for an error chain: 2 if any link is a [`UsageError`], else 1.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    if err
        .chain()
        .any(|e| e.downcast_ref::<UsageError>().is_some())
    {
        2
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn usage_errors_exit_2_even_when_wrapped() {
        let e: anyhow::Result<()> = Err(usage("--tp must divide 64"));
        let e = e.context("building the schedule").unwrap_err();
        assert_eq!(exit_code(&e), 2);
        assert_eq!(exit_code(&anyhow::anyhow!("NCCL failed")), 1);
    }
}
