//! An import's batches: lines read from a file, each to a hit or a refusal,
//! gathered into the hit events one script appends with the file's
//! progress.
//!
//! Hits without a value that share a name and a time (an access log's
//! times are whole seconds) become one event whose `count` is their
//! number: the counts stay exact and a busy log costs far fewer stream
//! entries. A hit with a value stays an event of its own (its value is
//! one observation).

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufRead};

use sha1_smol::Sha1;

use crate::model::access_log::{self, LineReject, Template};
use crate::model::event::{self, json, Reject, MAX_COUNT, MAX_FUTURE_MS};

/// Most events in one batch (one script): about 1.5 µs of Redis each,
/// so a script stays near a millisecond and never stalls other clients.
pub(super) const MAX_EVENTS: usize = 1000;
/// Most lines in one batch, whatever they aggregate into: bounds the
/// memory of a batch and how much a killed import reads again.
pub(super) const MAX_LINES: u64 = 50_000;
/// Longest line read (64 KiB, the worker's bound of a whole entry): a
/// longer one is refused as `line_too_long` without being held.
pub(super) const MAX_LINE_BYTES: usize = event::MAX_ENTRY_BYTES;
/// Refused lines shown with their number and text, per file.
pub(crate) const MAX_EXAMPLES: usize = 5;
/// Bytes of a refused line shown.
const EXAMPLE_BYTES: usize = 120;

/// How the lines of a file become hits.
#[derive(Debug, Clone)]
pub(crate) enum LineFormat {
    /// An access log, with the template that names its requests.
    AccessLog(access_log::Format, Template),
    /// One JSON hit a line (`{"name", "count", "ts", "value"}`), read as
    /// `hitcount ingest` reads one ([`json::read_line`]); a blank line is
    /// refused as `blank_line`.
    Ndjson,
}

/// One refused line, for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Example {
    /// 1-based line number in the file.
    pub line: u64,
    pub reason: &'static str,
    /// The line's start, lossily decoded.
    pub text: String,
}

/// Where a file's import stands: bytes and lines read from its start, and
/// the SHA-1 of those bytes (none at the start, nor in a progress an
/// earlier version recorded).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Progress {
    pub bytes: u64,
    pub lines: u64,
    pub digest: Option<[u8; 20]>,
}

impl Progress {
    /// As Redis keeps it: `BYTES:LINES:SHA1` (`BYTES:LINES` without a hash).
    pub(super) fn text(self) -> String {
        match self.digest {
            None => format!("{}:{}", self.bytes, self.lines),
            Some(d) => {
                let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
                format!("{}:{}:{hex}", self.bytes, self.lines)
            }
        }
    }

    /// Reads [`Progress::text`]; `None` for anything else.
    pub(super) fn parse(text: &str) -> Option<Progress> {
        let mut parts = text.split(':');
        let (bytes, lines) = (parts.next()?, parts.next()?);
        let digest = match parts.next() {
            None => None,
            Some(hex) if hex.len() == 40 && hex.is_ascii() => {
                let mut d = [0; 20];
                for (i, b) in d.iter_mut().enumerate() {
                    *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
                }
                Some(d)
            }
            Some(_) => return None,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Progress {
            bytes: bytes.parse().ok()?,
            lines: lines.parse().ok()?,
            digest,
        })
    }
}

/// A batch: the hit events of the lines from `from` to `to`, and what was
/// refused among them.
#[derive(Debug, Default)]
pub(super) struct Batch {
    pub from: Progress,
    pub to: Progress,
    pub events: Vec<Vec<u8>>,
    /// Lines that made a hit.
    pub counted: u64,
    pub refused: BTreeMap<&'static str, u64>,
    pub examples: Vec<Example>,
    /// Bytes of a last line without a line end, not imported.
    pub held_back: u64,
    /// Valueless hits by name, then by time (ms) → count.
    sums: HashMap<String, Vec<(i64, i64)>>,
    /// Events of `sums` once written out, and of valued hits.
    pending: usize,
}

impl Batch {
    fn new(from: Progress) -> Batch {
        Batch {
            from,
            to: from,
            ..Batch::default()
        }
    }

    fn full(&self) -> bool {
        self.pending >= MAX_EVENTS || self.to.lines - self.from.lines >= MAX_LINES
    }

    fn refuse(&mut self, reason: &'static str, line: &[u8], examples_left: &mut usize) {
        *self.refused.entry(reason).or_default() += 1;
        if *examples_left > 0 {
            *examples_left -= 1;
            let cut = line.len().min(EXAMPLE_BYTES);
            self.examples.push(Example {
                line: self.to.lines,
                reason,
                text: event::printable(&String::from_utf8_lossy(&line[..cut])).into_owned(),
            });
        }
    }

    /// Adds the hit of one line: summed with the last one of its name
    /// when it has the same time, no value, and the sum stays a valid count.
    fn add(&mut self, name: &str, count: i64, ts_ms: Option<i64>, value: Option<f64>) {
        self.counted += 1;
        let (Some(ts_ms), None) = (ts_ms, value) else {
            self.pending += 1;
            let ts = ts_ms.map(event::ts_of_ms);
            self.events
                .push(event::encode_value(name, count, ts, value));
            return;
        };
        let times = match self.sums.get_mut(name) {
            Some(times) => times,
            None => self.sums.entry(name.to_string()).or_default(),
        };
        match times.last_mut() {
            Some((t, n)) if *t == ts_ms && *n <= MAX_COUNT - count => *n += count,
            _ => {
                times.push((ts_ms, count));
                self.pending += 1;
            }
        }
    }

    /// Writes the summed hits out as events.
    fn seal(mut self) -> Batch {
        for (name, times) in self.sums.drain() {
            for (ts_ms, count) in times {
                let ts = Some(event::ts_of_ms(ts_ms));
                self.events
                    .push(event::encode_value(&name, count, ts, None));
            }
        }
        self
    }
}

/// Reads a file's lines into batches, from where its import stands.
pub(super) struct Lines<R> {
    reader: R,
    format: LineFormat,
    at: Progress,
    /// The hash of the bytes read so far.
    hashed: Sha1,
    /// Redis' clock when the import began (ms): lines are judged by it.
    clock_ms: i64,
    line: Vec<u8>,
    name: Vec<u8>,
    examples_left: usize,
    /// The end of the file was reached.
    ended: bool,
    /// A read that failed after whole lines of the batch then returned:
    /// the next call's answer.
    failed: Option<io::Error>,
}

impl<R: BufRead> Lines<R> {
    /// Lines of `reader`, which stands at `at` (the bytes before `at`
    /// hashed into `hashed`), in `format`, judged against Redis' clock
    /// `clock_ms`.
    pub(super) fn new(
        reader: R,
        format: LineFormat,
        (at, hashed): (Progress, Sha1),
        clock_ms: i64,
    ) -> Self {
        Lines {
            reader,
            format,
            at,
            hashed,
            clock_ms,
            line: Vec::new(),
            name: Vec::new(),
            examples_left: MAX_EXAMPLES,
            ended: false,
            failed: None,
        }
    }

    /// The next batch; `None` at the end of the file.
    pub(super) fn next_batch(&mut self) -> io::Result<Option<Batch>> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        if self.ended {
            return Ok(None);
        }
        let mut batch = Batch::new(self.at);
        while !batch.full() {
            let read = read_line(&mut self.reader, &mut self.line, &mut self.hashed);
            let (bytes, too_long, ended) = match read {
                Ok(Some(line)) => line,
                Ok(None) => {
                    self.ended = true;
                    break;
                }
                // The whole lines read before the error (a truncated gzip
                // file) are a batch of their own; the error comes next.
                Err(e) if batch.to != batch.from => {
                    self.failed = Some(e);
                    self.ended = true;
                    break;
                }
                Err(e) => return Err(e),
            };
            if !ended {
                // A line still being written, or cut off: left for a later
                // import, which reads it whole.
                batch.held_back = bytes as u64;
                self.ended = true;
                break;
            }
            batch.to.bytes += bytes as u64;
            batch.to.lines += 1;
            let line = std::mem::take(&mut self.line);
            match self.hit(&line, too_long) {
                Ok((count, ts_ms, value)) => {
                    let name = std::str::from_utf8(&self.name).unwrap_or_default();
                    batch.add(name, count, ts_ms, value);
                }
                Err(why) => batch.refuse(why.reason(), &line, &mut self.examples_left),
            }
            self.line = line;
        }
        if batch.to.bytes != batch.from.bytes {
            batch.to.digest = Some(self.hashed.digest().bytes());
        }
        self.at = batch.to;
        let some = batch.to != batch.from || batch.held_back > 0;
        Ok(some.then(|| batch.seal()))
    }

    /// The hit of one line: its name in `self.name`, its count, time (ms,
    /// when stated) and value.
    fn hit(&mut self, line: &[u8], too_long: bool) -> Result<LineHit, Refusal> {
        if too_long {
            return Err(Refusal::LineTooLong);
        }
        let (format, template) = match &self.format {
            LineFormat::AccessLog(format, template) => (*format, template),
            LineFormat::Ndjson if line.trim_ascii().is_empty() => return Err(Refusal::BlankLine),
            LineFormat::Ndjson => {
                let hit = json::read_line(line, self.clock_ms).map_err(Refusal::Json)?;
                self.name.clear();
                self.name.extend_from_slice(hit.name.as_bytes());
                return Ok((hit.count, hit.ts_ms, hit.value));
            }
        };
        let request = access_log::parse(line, format)?;
        template.render(&request, &mut self.name)?;
        let ts_ms = request
            .ts_s
            .checked_mul(1000)
            .filter(|t| *t >= 0)
            .ok_or(LineReject::Hit(Reject::BadTimestamp))?;
        if ts_ms > self.clock_ms.saturating_add(MAX_FUTURE_MS) {
            return Err(LineReject::Hit(Reject::FutureTimestamp).into());
        }
        // A request time the worker would dead-letter (`bad_value`) is
        // refused here, with its reason, like a JSON line's.
        let value = request.value.map(crate::model::event::check_value);
        let value = value.transpose().map_err(LineReject::Hit)?;
        Ok((1, Some(ts_ms), value))
    }
}

/// A line's hit: its count, its time (unix ms) when it states one, its value.
type LineHit = (i64, Option<i64>, Option<f64>);

/// Why a line made no hit.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    LineTooLong,
    BlankLine,
    Line(LineReject),
    Json(json::Refusal),
}

impl From<LineReject> for Refusal {
    fn from(r: LineReject) -> Self {
        Refusal::Line(r)
    }
}

impl Refusal {
    fn reason(self) -> &'static str {
        match self {
            Refusal::LineTooLong => "line_too_long",
            Refusal::BlankLine => "blank_line",
            Refusal::Line(r) => r.reason(),
            Refusal::Json(r) => r.reason(),
        }
    }
}

/// Reads one line into `out` (without `\n` or `\r\n`), hashing it into
/// `hashed` when it ends: the bytes it took from the reader, whether it
/// was longer than [`MAX_LINE_BYTES`] (then `out` holds only its start)
/// and whether it ended with `\n` (a last line may not: its bytes are not
/// hashed, as they are not imported). `None` at the end.
fn read_line(
    reader: &mut impl BufRead,
    out: &mut Vec<u8>,
    hashed: &mut Sha1,
) -> io::Result<Option<(usize, bool, bool)>> {
    out.clear();
    let (mut taken, mut too_long, mut ended) = (0, false, false);
    let mut line = hashed.clone();
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..=i], true),
            None => (buf, false),
        };
        let room = (MAX_LINE_BYTES + 2).saturating_sub(out.len());
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        too_long |= chunk.len() > room;
        line.update(chunk);
        let n = chunk.len();
        reader.consume(n);
        taken += n;
        if done {
            ended = true;
            *hashed = line;
            break;
        }
    }
    if taken == 0 {
        return Ok(None);
    }
    for end in [b'\n', b'\r'] {
        if out.last() == Some(&end) {
            out.pop();
        }
    }
    Ok(Some((taken, too_long || out.len() > MAX_LINE_BYTES, ended)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::access_log::{Format, DEFAULT_TEMPLATE};

    fn lines(text: &[u8]) -> Lines<&[u8]> {
        let template = Template::parse(DEFAULT_TEMPLATE).unwrap();
        let format = LineFormat::AccessLog(Format::Combined, template);
        Lines::new(
            text,
            format,
            (Progress::default(), Sha1::new()),
            1_800_000_000_000,
        )
    }

    fn line(path: &str, time: &str) -> String {
        format!("a - - [{time} +0000] \"GET {path} HTTP/1.1\" 200 1 \"-\" \"-\"\n")
    }

    #[test]
    fn hits_of_a_name_and_second_become_one_event() {
        let t = "10/Oct/2020:13:55:36";
        let text = [
            line("/a", t),
            line("/a?x", t),
            line("/b", t),
            line("/a", "10/Oct/2020:13:55:37"),
        ]
        .concat();
        let batch = lines(text.as_bytes()).next_batch().unwrap().unwrap();
        assert_eq!((batch.counted, batch.events.len()), (4, 3));
        let ts = 1_602_338_136_000;
        assert_eq!(
            decoded(&batch),
            [
                ("/a".into(), 1, ts + 1000, None),
                ("/a".into(), 2, ts, None),
                ("/b".into(), 1, ts, None)
            ]
        );
        let digest = Some(Sha1::from(&text).digest().bytes());
        assert_eq!(
            batch.to,
            Progress {
                bytes: text.len() as u64,
                lines: 4,
                digest
            }
        );
    }

    #[test]
    fn refused_lines_are_counted_with_their_numbers() {
        let text = format!(
            "{}junk\n{}\r\n{}{}",
            line("/a", "10/Oct/2020:13:55:36"),
            "x".repeat(MAX_LINE_BYTES + 1),
            line("/a", "10/Oct/2099:13:55:36"),
            "a line still being written"
        );
        let mut lines = lines(text.as_bytes());
        let batch = lines.next_batch().unwrap().unwrap();
        assert_eq!(batch.counted, 1);
        let refused: Vec<_> = batch.refused.iter().map(|(r, n)| (*r, *n)).collect();
        assert_eq!(
            refused,
            [
                ("future_timestamp", 1),
                ("line_too_long", 1),
                ("not_combined", 1)
            ]
        );
        let numbers: Vec<_> = batch.examples.iter().map(|e| (e.line, e.reason)).collect();
        assert_eq!(
            numbers,
            [
                (2, "not_combined"),
                (3, "line_too_long"),
                (4, "future_timestamp"),
            ]
        );
        assert_eq!(batch.examples[1].text.len(), EXAMPLE_BYTES);
        // Control characters are escaped, never sent to the terminal.
        let shown = |b: &[u8]| event::printable(&String::from_utf8_lossy(b)).into_owned();
        assert_eq!(shown(b"a\x1b[31mred\tb\xff"), "a\\u{1b}[31mred\\tb\u{fffd}");
        assert_eq!(shown(b"a\\u{1b}"), "a\\\\u{1b}");
        assert_eq!(
            shown("a\u{202e}b\u{2028}".as_bytes()),
            "a\\u{202e}b\\u{2028}"
        );
        // The last line has no line end: it is left for a later import.
        let held = "a line still being written".len();
        assert_eq!(batch.held_back, held as u64);
        // Nor is it in the hash of the bytes imported.
        let imported = &text[..text.len() - held];
        assert_eq!(
            batch.to,
            Progress {
                bytes: imported.len() as u64,
                lines: 4,
                digest: Some(Sha1::from(imported).digest().bytes())
            }
        );
        let again = Progress::parse(&batch.to.text());
        assert_eq!(again, Some(batch.to), "{}", batch.to.text());
        assert!(lines.next_batch().unwrap().is_none());
    }

    /// Each event of a batch as (name, count, ts_ms, value), sorted.
    fn decoded(batch: &Batch) -> Vec<(String, i64, i64, Option<f64>)> {
        let mut hits: Vec<_> = batch
            .events
            .iter()
            .map(|e| {
                let hit = event::decode(b"1800000000000-0", [(&b"hit"[..], &e[..])]).unwrap();
                (hit.name.to_string(), hit.count, hit.ts_ms, hit.value)
            })
            .collect();
        hits.sort_by(|a, b| a.partial_cmp(b).unwrap());
        hits
    }

    #[test]
    fn ndjson_lines_are_hits_as_ingest_reads_them() {
        let text = concat!(
            "{\"name\":\"a\",\"ts\":1700000000,\"count\":999999999}\n",
            "{\"name\":\"a\",\"ts\":1700000000.5,\"count\":2}\n",
            "{\"name\":\"a\",\"ts\":1700000000.5}\n",
            "{\"name\":\"b\",\"ts\":1700000000,\"value\":2.5}\n",
            "\n{\"name\":\"\"}\nnot json\n{\"name\":\"a\",\"count\":2.0}\n",
        );
        let mut lines = Lines::new(
            text.as_bytes(),
            LineFormat::Ndjson,
            (Progress::default(), Sha1::new()),
            1_800_000_000_000,
        );
        let batch = lines.next_batch().unwrap().unwrap();
        let ts = 1_700_000_000_000;
        assert_eq!(
            decoded(&batch),
            [
                ("a".into(), 3, ts + 500, None),
                ("a".into(), 999_999_999, ts, None),
                ("b".into(), 1, ts, Some(2.5)),
            ]
        );
        let refused: Vec<_> = batch.refused.iter().map(|(r, n)| (*r, *n)).collect();
        assert_eq!(
            refused,
            [
                ("bad_count", 1),
                ("bad_json", 1),
                ("blank_line", 1),
                ("empty_name", 1)
            ]
        );
        // A hit with no ts keeps none: Redis' time of its entry is its time.
        let mut lines = Lines::new(
            &b"{\"name\":\"c\"}\n"[..],
            LineFormat::Ndjson,
            (Progress::default(), Sha1::new()),
            1_800_000_000_000,
        );
        let batch = lines.next_batch().unwrap().unwrap();
        assert_eq!(decoded(&batch), [("c".into(), 1, 1_800_000_000_000, None)]);
    }

    #[test]
    fn times_come_back_to_the_millisecond() {
        let mut batch = Batch::default();
        // Early times are where `ms / 1000` falls short (1001 ms, say).
        let modern = (1_700_000_000_000..1_700_000_100_000).step_by(7);
        let times: Vec<i64> = (0..20_000).chain(modern).collect();
        for (i, &t) in times.iter().enumerate() {
            batch.add("a", 1, Some(t), (i % 2 == 0).then_some(1.0));
        }
        let mut got: Vec<i64> = decoded(&batch.seal()).iter().map(|h| h.2).collect();
        got.sort_unstable();
        assert_eq!(got, times);
    }

    #[test]
    fn sums_stay_valid_counts() {
        let mut batch = Batch::default();
        batch.add("a", MAX_COUNT, Some(0), None);
        batch.add("a", 1, Some(0), None);
        batch.add("a", 1, Some(0), None);
        let counts: Vec<i64> = decoded(&batch.seal()).iter().map(|h| h.1).collect();
        assert_eq!(counts, [2, MAX_COUNT]);
    }

    #[test]
    fn batches_are_bounded() {
        let text: String = (0..MAX_EVENTS + 10)
            .map(|i| line(&format!("/{i}"), "10/Oct/2020:13:55:36"))
            .collect();
        let mut lines = lines(text.as_bytes());
        let first = lines.next_batch().unwrap().unwrap();
        assert_eq!(first.events.len(), MAX_EVENTS);
        let second = lines.next_batch().unwrap().unwrap();
        assert_eq!((second.from, second.events.len()), (first.to, 10));
        assert_eq!(Progress::parse(&second.to.text()), Some(second.to));
        assert_eq!(Progress::parse("1:x"), None);
        // An earlier version's progress has no hash; a bad hash is no progress.
        assert_eq!(Progress::parse("19000:1000").unwrap().digest, None);
        assert_eq!(Progress::parse(&format!("1:2:{}", "g".repeat(40))), None);
        assert_eq!(Progress::parse(&format!("1:2:{}:3", "a".repeat(40))), None);
    }
    #[test]
    fn a_request_time_the_worker_refuses_is_refused_as_bad_value() {
        let template = Template::parse(DEFAULT_TEMPLATE).unwrap();
        let format = LineFormat::AccessLog(Format::CombinedTime, template);
        let ok = line("/a", "10/Oct/2020:13:55:36").replace('\n', " 0.25\n");
        let huge =
            line("/a", "10/Oct/2020:13:55:36").replace('\n', &format!(" 1{}\n", "0".repeat(150)));
        let text = format!("{ok}{huge}");
        let mut lines = Lines::new(
            text.as_bytes(),
            format,
            (Progress::default(), Sha1::new()),
            1_800_000_000_000,
        );
        let batch = lines.next_batch().unwrap().unwrap();
        assert_eq!(batch.counted, 1);
        let refused: Vec<_> = batch.refused.iter().map(|(r, n)| (*r, *n)).collect();
        assert_eq!(refused, [("bad_value", 1)]);
    }

    /// A read that fails after whole lines (a gzip file cut short): those
    /// lines come as a batch, then the error, then nothing.
    #[test]
    fn the_whole_lines_before_a_failed_read_are_a_batch() {
        struct Failing;
        impl io::Read for Failing {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("cut short"))
            }
        }
        let text = [
            line("/a", "10/Oct/2020:13:55:36"),
            line("/b", "10/Oct/2020:13:55:36"),
            "a line cut".into(),
        ]
        .concat();
        let reader = io::BufReader::new(io::Read::chain(text.as_bytes(), Failing));
        let template = Template::parse(DEFAULT_TEMPLATE).unwrap();
        let format = LineFormat::AccessLog(Format::Combined, template);
        let mut lines = Lines::new(
            reader,
            format,
            (Progress::default(), Sha1::new()),
            1_800_000_000_000,
        );
        let batch = lines.next_batch().unwrap().unwrap();
        assert_eq!((batch.counted, batch.to.lines), (2, 2));
        let err = lines.next_batch().unwrap_err();
        assert_eq!(err.to_string(), "cut short");
        assert!(lines.next_batch().unwrap().is_none());
    }
}
