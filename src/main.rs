//! verifybench: see README.md and `verifybench --help`.

fn main() {
    // Like other command-line tools, end quietly when the reader of our output goes away
    // (`verifybench plan | head`) instead of panicking on a closed pipe.
    // SAFETY: restoring the default action of SIGPIPE before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let code = match verifybench::cli::main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("Error: {e:#}");
            verifybench::error::exit_code(&e)
        }
    };
    std::process::exit(code);
}
