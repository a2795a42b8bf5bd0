//! `hitcount import FILE…`: yesterday's access logs (or NDJSON hits) into
//! the stream, each line once, resumable.
//!
//! A file is known by the SHA-1 of its first 4 KiB once decompressed (the
//! whole file when shorter), not by its path, and goes on from a recorded
//! progress only when its bytes before it are the ones imported: a log
//! renamed or compressed by a rotation is the same file, and one appended
//! to since its import goes on where that stopped. Gzipped files are
//! recognised by their magic bytes. The work itself is
//! [`crate::service::import`]'s.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use anyhow::Context as _;
use clap::ValueEnum;

use super::Common;
use crate::model::access_log::{self, Template, DEFAULT_TEMPLATE};
use crate::model::keys::Keys;
use crate::service::import::{self, LineFormat, Tally};

/// Bytes of a file's start that identify it.
const IDENTITY_BYTES: u64 = 4096;
/// Read buffer: large reads keep a 200 MB log to a few hundred system calls.
const READ_BUFFER: usize = 1 << 20;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// How the lines are written: `combined` (nginx's and Apache's, or
    /// Apache's `common`), `combined-time` (nginx's combined with
    /// `$request_time` appended: the hit's value is that time in ms), or
    /// `ndjson` (one JSON hit a line: {"name", "count", "ts", "value"}, as
    /// `POST /api/v1/hits` takes them).
    #[arg(long, value_enum, default_value_t = FormatArg::Combined)]
    format: FormatArg,
    /// The counter's name of a request in an access log: text with
    /// `{path}` (the path without its query string; the default),
    /// `{method}`, `{host}` (of an absolute request URI; a line without
    /// one is refused as no_host) and `{status}`, e.g. `{method}:{path}`.
    #[arg(long, value_parser = super::parse::NameArg(Template::parse))]
    name_template: Option<Template>,
    /// Files to import, plain or gzipped. Each is imported once: a file
    /// imported before goes on where that import stopped.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    #[command(flatten)]
    pub(super) common: super::Pick<Common, Imports>,
}

/// The settings of [`Common`] `import` shows: the stream, and the layout
/// that says how long a file's progress must be kept.
pub(crate) struct Imports;

impl super::Uses for Imports {
    const SHOWN: &'static [&'static str] = &["stream", "shards", "precisions", "samples"];
}

/// `--format` (no doc comments on the variants, so that `--help` lists
/// them on one line).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum FormatArg {
    #[allow(missing_docs)]
    Combined,
    #[allow(missing_docs)]
    CombinedTime,
    #[allow(missing_docs)]
    Ndjson,
}

/// An opened file: its identity, its lines, its size on disk and how much
/// of it has been read.
struct Opened {
    source: import::Source<Box<dyn BufRead + Send>>,
    /// Its size on disk.
    size: u64,
    read: Arc<AtomicU64>,
}

pub(crate) async fn run(mut args: Args) -> anyhow::Result<()> {
    args.common.validate()?;
    if args.files.iter().any(|f| f.as_os_str() == "-") {
        anyhow::bail!(
            "reading standard input is not supported: an import must be resumable, so save \
             the lines to a file and import that"
        );
    }
    super::check_sending(&args.common).await?;
    let mut conn = super::connect(&args.common.redis).await?;
    crate::store::scripts::load_all(&mut conn).await?;
    let mut clock = crate::store::time::RedisClock::default();
    let template = args
        .name_template
        .clone()
        .unwrap_or_else(|| Template::parse(DEFAULT_TEMPLATE).expect("the default template is one"));
    let format = match args.format {
        FormatArg::Combined => LineFormat::AccessLog(access_log::Format::Combined, template),
        FormatArg::CombinedTime => {
            LineFormat::AccessLog(access_log::Format::CombinedTime, template)
        }
        FormatArg::Ndjson if args.name_template.is_some() => anyhow::bail!(
            "--name-template names the requests of an access log; an NDJSON hit has its name"
        ),
        FormatArg::Ndjson => LineFormat::Ndjson,
    };
    let mut settings = import::Settings {
        format,
        clock_ms: 0,
        ttl_secs: import::progress_ttl_secs(&args.common.layout),
    };
    let mut total = Tally::default();
    // Ctrl-C or SIGTERM stops at once and says where: each batch Redis
    // took is recorded with the file's progress, none in part.
    let stop = crate::model::shutdown::signals();
    tokio::pin!(stop);
    // With several files, one that cannot be imported is told and the
    // others go on; the run fails at the end. Redis failing stops it.
    let many = args.files.len() > 1;
    let mut not_imported = Vec::new();
    for path in &args.files {
        let shown = path.display();
        let opened = match open(path) {
            Ok(opened) => opened,
            Err(e) if many => {
                tracing::error!("cannot read {shown}: {e}; the other files go on");
                not_imported.push(shown.to_string());
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("cannot read {shown}")),
        };
        let shard = import::shard_of(&opened.source.id, args.common.stream.shards);
        let (layout, stream) = (&args.common.layout, &args.common.stream);
        let keys = Keys::shard(layout, stream, shard, conn.is_cluster());
        let template = "{msg} {bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}";
        let bar = super::load::progress(opened.size, template).with_message(shown.to_string());
        let read = opened.read.clone();
        settings.clock_ms = clock.now_ms(&mut conn).await?;
        let shows = |_: &Tally| bar.set_position(read.load(Relaxed));
        // The progress key the import moves, once found: where it stands
        // when interrupted.
        let key = std::sync::Mutex::new(None);
        let shows = |t: &Tally| {
            shows(t);
            let mut k = key.lock().unwrap_or_else(|e| e.into_inner());
            if k.is_none() {
                k.clone_from(&t.key);
            }
        };
        let tally = tokio::select! {
            tally = import::import(&mut conn, &keys, opened.source, &settings, shows) => tally,
            () = &mut stop => {
                bar.finish_and_clear();
                let key = key.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let Some(key) = key else {
                    anyhow::bail!(
                        "{shown}: interrupted before its import began: run the same command \
                         again to import it"
                    );
                };
                let at = import::recorded(&mut conn, &key).await?;
                anyhow::bail!(
                    "{shown}: interrupted after line {}: what was imported is recorded: run the \
                     same command again to go on",
                    at.lines
                );
            }
        };
        bar.finish_and_clear();
        let tally = match tally {
            Ok(tally) => tally,
            Err(e) => {
                let line = format!("{shown}: {}", failure(&e));
                if !many || matches!(e, import::ImportError::Redis(_)) {
                    anyhow::bail!(line);
                }
                tracing::error!("{line}; the other files go on");
                not_imported.push(shown.to_string());
                continue;
            }
        };
        report(&shown.to_string(), &tally)?;
        total.add_up(tally);
    }
    let imported = args.files.len() - not_imported.len();
    if many && imported > 0 {
        let of = match not_imported.len() {
            0 => format!("all {imported} files"),
            _ => format!("{imported} of {} files imported", args.files.len()),
        };
        outln!("{of}: {}", summary(&total));
    }
    anyhow::ensure!(
        not_imported.is_empty(),
        "{} of {} files not imported in full (said above): {}",
        not_imported.len(),
        args.files.len(),
        not_imported.join(", ")
    );
    Ok(())
}

/// What a failed import of a file says: the error, and what to do.
fn failure(e: &import::ImportError) -> String {
    use import::ImportError as E;
    let then = match e {
        E::Io(_) => "; the lines before are imported and recorded",
        // It says that nothing more is imported from it.
        E::Shrank { .. } | E::Rewritten { .. } => "",
        E::TooManyFiles { .. } => "",
        E::BadProgress(_) => {
            "; hitcount did not write it: delete the file's progress key to import it anew \
             (docs/import.md)"
        }
        // No retry can help (an exhausted stream, a refused permission):
        // what to change instead.
        E::Redis(r) if crate::store::connect::fatal_hint(r).is_some() => {
            let hint = crate::store::connect::fatal_hint(r).unwrap_or_default();
            return format!("{}; {hint}", super::reach::cause(r));
        }
        E::Redis(_) | E::Raced { .. } => {
            "; what was imported is recorded: run the same command again to go on"
        }
    };
    format!("{e}{then}")
}

/// What one file's import did: its summary, its first refused lines.
fn report(shown: &str, tally: &Tally) -> anyhow::Result<()> {
    let held_back = match tally.held_back {
        0 => String::new(),
        n => format!(
            "; its last line has no line end ({}): left for a later import",
            super::plural(n, "byte", "bytes")
        ),
    };
    outln!("{shown}: {}{held_back}", summary(tally));
    for e in &tally.examples {
        outln!("  line {}: {}: {}", e.line, e.reason, e.text);
    }
    let refused: u64 = tally.refused.values().sum();
    if refused > tally.examples.len() as u64 {
        let more = refused - tally.examples.len() as u64;
        let lines = if more == 1 { "line" } else { "lines" };
        outln!("  ({more} more refused {lines} not shown)");
    }
    Ok(())
}

/// One line for what an import did.
fn summary(t: &Tally) -> String {
    if t.lines == 0 && t.at.lines == 0 && t.held_back == 0 {
        return "empty: nothing to import".into();
    }
    if t.lines == 0 && t.at.lines == 0 {
        return "no whole line yet: nothing added".into();
    }
    if t.lines == 0 {
        return format!(
            "already imported ({}): nothing added",
            super::plural(t.at.lines, "line", "lines")
        );
    }
    let resumed = match t.resumed.lines {
        0 if t.another => "another file than the one imported with the same first 4 KiB, \
                           imported from its start: "
            .to_string(),
        0 => String::new(),
        n => format!("resumed after line {n}: "),
    };
    let refused: u64 = t.refused.values().sum();
    let reasons: Vec<String> = t.refused.iter().map(|(r, n)| format!("{r} {n}")).collect();
    let refused = match refused {
        0 => "none refused".to_string(),
        n => format!("{n} refused ({})", reasons.join(", ")),
    };
    format!(
        "{resumed}{} read, {} counted in {} written, {refused}",
        super::plural(t.lines, "line", "lines"),
        t.counted,
        super::plural(t.events, "hit", "hits")
    )
}

/// Opens `path`: its identity, and a reader of its lines (decompressed
/// when it is gzipped) that counts the bytes read from disk. It is read
/// three times or more from its start (its kind, its identity, its lines,
/// and again when its bytes are another file's than its progress'), so it
/// must be a regular file: a pipe would lose its first bytes to the first
/// two, and could not be resumed.
fn open(path: &Path) -> io::Result<Opened> {
    if !std::fs::metadata(path)?.is_file() {
        return Err(io::Error::other(
            "not a regular file (a pipe, a device or a directory): an import must be \
             resumable, so save the lines to a file and import that",
        ));
    }
    let gzipped = {
        let mut magic = [0u8; 2];
        let n = File::open(path)?.read(&mut magic)?;
        n == 2 && magic == [0x1f, 0x8b]
    };
    let size = std::fs::metadata(path)?.len();
    let read = Arc::new(AtomicU64::new(0));
    let owned = path.to_path_buf();
    let lines = move |counted: Arc<AtomicU64>| -> io::Result<Box<dyn BufRead + Send>> {
        counted.store(0, Relaxed);
        let file = Counted {
            inner: File::open(&owned)?,
            read: counted,
        };
        Ok(if gzipped {
            let gz = flate2::read::MultiGzDecoder::new(BufReader::with_capacity(READ_BUFFER, file));
            Box::new(BufReader::with_capacity(READ_BUFFER, gz))
        } else {
            Box::new(BufReader::with_capacity(READ_BUFFER, file))
        })
    };
    let mut head = Vec::new();
    lines(Arc::new(AtomicU64::new(0)))?
        .take(IDENTITY_BYTES)
        .read_to_end(&mut head)?;
    if (head.len() as u64) < IDENTITY_BYTES {
        tracing::warn!(
            "{} holds less than {IDENTITY_BYTES} bytes: its whole content is its identity, so \
             once lines are added it is another file and all its lines count again (import a \
             log once it is complete)",
            path.display()
        );
    }
    let id = sha1_smol::Sha1::from(&head).digest().to_string();
    let counted = read.clone();
    let source = import::Source {
        id,
        open: Box::new(move || lines(counted.clone())),
    };
    Ok(Opened { source, size, read })
}

/// A reader that counts the bytes it gave.
struct Counted<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Relaxed);
        Ok(n)
    }
}
