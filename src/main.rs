//! The `hitcount` binary: parse flags, set up logging, run the subcommand.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = hitcount::cli::Cli::parse();
    let format = cli.log_format;
    hitcount::cli::init_tracing(format, cli.default_log_level());
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
            // In JSON mode the last word is a JSON line too, for the shipper.
            match format {
                hitcount::cli::LogFormat::Json => {
                    tracing::error!(error = format!("{e:#}"), "hitcount failed")
                }
                hitcount::cli::LogFormat::Text => eprintln!("hitcount: {e:#}"),
            }
            ExitCode::FAILURE
        }
    }
}
