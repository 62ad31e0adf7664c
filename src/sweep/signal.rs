//! Ctrl-C: the first SIGINT sets a flag; the sweep kills the point in flight (its own process
//! group), keeps every finished point and exits. Child processes run in their own process
//! groups, so the terminal's SIGINT reaches only this process.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the SIGINT handler.
pub(crate) static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Installs the SIGINT handler (once per process is enough; calling again is harmless).
pub(crate) fn install() -> anyhow::Result<()> {
    // SAFETY: sigaction with a zeroed struct, an empty mask and a handler that only stores to
    // an atomic; no other thread changes SIGINT's disposition.
    let rc = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = libc::SA_RESTART;
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut())
    };
    if rc != 0 {
        anyhow::bail!(
            "cannot install the Ctrl-C handler: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}
