//! verifybench: see README.md and `verifybench --help`.

fn main() {
    let code = match verifybench::cli::main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("Error: {e:#}");
            verifybench::error::exit_code(&e)
        }
    };
    std::process::exit(code);
}
