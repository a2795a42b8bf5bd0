//! The `hitcount` binary: parse flags, set up logging, run the subcommand.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = hitcount::cli::Cli::parse();
    hitcount::cli::init_tracing(cli.log_format, cli.default_log_level());
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hitcount: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(hitcount::cli::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hitcount: {e:#}");
            ExitCode::FAILURE
        }
    }
}
