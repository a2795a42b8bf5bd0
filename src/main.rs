//! The `hitcount` binary: parse flags, set up logging, run the subcommand.

use std::process::ExitCode;

use hitcount::edge::cli::{LogFormat, Refused};

fn main() -> ExitCode {
    bound_heap();
    let cli = match hitcount::edge::cli::parse(std::env::args_os().collect()) {
        Ok(cli) => cli,
        Err(Refused::Usage(e)) => return usage_error(e),
        // One line, as every other configuration error is reported (exit 1).
        Err(Refused::Setting(line)) => return failed(json_requested(), &line),
    };
    let format = cli.log_format;
    hitcount::edge::cli::init_tracing(format, cli.default_log_level());
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hitcount: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(hitcount::edge::cli::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our output has gone (`| head`): nothing to report.
        Err(e) if e.is::<hitcount::edge::cli::StdoutClosed>() => ExitCode::SUCCESS,
        Err(e) => failed(format == LogFormat::Json, &format!("{e:#}")),
    }
}

/// Makes glibc's allocator give every large buffer (128 KiB and more) back
/// to the system when it is freed. By default glibc raises that threshold
/// up to 32 MiB as large buffers are freed, and from then on keeps them in
/// its heaps, where the next ones rarely fit the holes they left: a worker
/// draining a 1 M-entry backlog of 100,000 names peaked at 132-164 MiB of
/// RSS for 101-104 MiB with the threshold fixed (and as fast). Elsewhere
/// than glibc this does nothing.
fn bound_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
        }
        /// glibc's `M_MMAP_THRESHOLD` (malloc.h); setting it also turns off
        /// its growth.
        const M_MMAP_THRESHOLD: std::ffi::c_int = -3;
        // SAFETY: mallopt only changes the allocator's parameters, and is
        // called before any other thread exists.
        unsafe {
            mallopt(M_MMAP_THRESHOLD, 128 * 1024);
        }
    }
}

/// Reports a command line clap refused, or prints the help or version it
/// asked for. With JSON logs (`--log-format json` or HITCOUNT_LOG_FORMAT)
/// an error is one JSON line like every other error; the exit status is
/// clap's (2 for a usage error, 0 for --help and --version).
fn usage_error(e: clap::Error) -> ExitCode {
    if !e.use_stderr() || !json_requested() {
        e.exit();
    }
    hitcount::edge::cli::init_tracing(LogFormat::Json, "warn");
    let text = e.render().to_string();
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    tracing::error!(
        error = first.trim_start_matches("error: "),
        detail = text.trim_end(),
        "invalid command line"
    );
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
}

/// Reports the error `line` that ends the run (exit 1): on stderr, or in
/// JSON mode as a JSON line too, for the shipper.
fn failed(json: bool, line: &str) -> ExitCode {
    if json {
        // Set up already when a command ran (this does nothing then), not
        // when the command line was refused.
        hitcount::edge::cli::init_tracing(LogFormat::Json, "warn");
        tracing::error!(error = line, "hitcount failed");
    } else {
        eprintln!("hitcount: {line}");
    }
    ExitCode::FAILURE
}

/// Whether JSON logs were asked for, read from the raw command line and the
/// environment (the parsed one is not there when parsing failed).
fn json_requested() -> bool {
    // Lossy: an argument that is not UTF-8 is refused by the parser, and
    // must not stop this reading of it with a panic first.
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let flag = args.iter().enumerate().rev().find_map(|(i, a)| {
        if let Some(v) = a.strip_prefix("--log-format=") {
            Some(v.to_string())
        } else if a == "--log-format" {
            args.get(i + 1).cloned()
        } else {
            None
        }
    });
    match flag {
        Some(v) => v == "json",
        None => std::env::var("HITCOUNT_LOG_FORMAT").is_ok_and(|v| v == "json"),
    }
}
