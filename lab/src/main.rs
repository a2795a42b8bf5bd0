//! The `hitcount-lab` binary: run the command line, print what it says.

use std::io::Write as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hitcount-lab: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let out = runtime.block_on(hitcount_lab::cli::run_args(std::env::args_os()));
    let _ = std::io::stdout().write_all(out.stdout.as_bytes());
    let _ = std::io::stderr().write_all(out.stderr.as_bytes());
    ExitCode::from(u8::try_from(out.code).unwrap_or(1))
}
