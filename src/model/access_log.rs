//! A web server's access log line, read as a hit: the `combined` format of
//! nginx and Apache (and nginx's `combined` with `$request_time` appended),
//! the name template that turns a request into a counter's name, and the
//! reasons a line is refused.
//!
//! `hitcount import` reads these lines; this module is pure (no file, no
//! Redis) so that every rule is tested here, line by line.
//!
//! A `combined` line is
//! `ADDR - USER [10/Oct/2000:13:55:36 -0700] "GET /a?b=1 HTTP/1.1" 200 2326 "REFERER" "AGENT"`:
//! the time in brackets is the hit's time (whole seconds, its offset
//! applied), the request line gives the method and the target. The referer
//! and the user agent may be missing (Apache's `common` format) and anything
//! after them is ignored. `combined-time` is the same line with the request
//! time in seconds (nginx's `$request_time`, e.g. `0.125`) as its last
//! field; the hit's value is that time in milliseconds.

use crate::model::clock::{civil_from_days, days_from_civil};
use crate::model::event::{self, Reject};

/// How the lines of an access log are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// nginx's and Apache's `combined` (or `common`).
    Combined,
    /// `combined` with nginx's `$request_time` (seconds) as its last field.
    CombinedTime,
}

/// Why a line is not counted: its own reasons, or the worker's
/// ([`Reject`]) for the hit it would have made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum LineReject {
    /// Not a `combined` line: no `[time]`, no quoted request, no status.
    NotCombined,
    /// The time in brackets is not `dd/Mon/yyyy:HH:MM:SS ±hhmm`.
    BadTime,
    /// The request line is not `METHOD TARGET [PROTOCOL]` (nginx logs a
    /// malformed request as `"-"` or as the bytes it got).
    BadRequest,
    /// `combined-time`: the last field is not a number of seconds.
    BadRequestTime,
    /// The template uses `{host}` and the line names none.
    NoHost,
    /// The hit the line makes is one the worker would dead-letter.
    Hit(Reject),
}

impl LineReject {
    /// A stable snake_case label, as the worker's dead-letter reasons.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            LineReject::NotCombined => "not_combined",
            LineReject::BadTime => "bad_time",
            LineReject::BadRequest => "bad_request",
            LineReject::BadRequestTime => "bad_request_time",
            LineReject::NoHost => "no_host",
            LineReject::Hit(r) => r.reason(),
        }
    }
}

/// One request of the log, borrowed from its line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Request<'a> {
    /// When it was logged, unix seconds.
    pub ts_s: i64,
    pub method: &'a [u8],
    /// The target's path: no scheme or host, no query string, no fragment.
    pub path: &'a [u8],
    /// The host of an absolute target (`GET http://host/path`).
    pub host: Option<&'a [u8]>,
    pub status: &'a [u8],
    /// `combined-time`: the request time in milliseconds.
    pub value: Option<f64>,
}

/// Reads one line (without its line end) in `format`.
pub(crate) fn parse(line: &[u8], format: Format) -> Result<Request<'_>, LineReject> {
    let (line, value) = match format {
        Format::Combined => (line, None),
        Format::CombinedTime => {
            let cut = line
                .iter()
                .rposition(|&b| b == b' ')
                .ok_or(LineReject::NotCombined)?;
            let ms = std::str::from_utf8(&line[cut + 1..])
                .ok()
                .and_then(seconds_as_ms)
                .ok_or(LineReject::BadRequestTime)?;
            (&line[..cut], Some(ms))
        }
    };
    let open = memchr(b'[', line).ok_or(LineReject::NotCombined)?;
    let close = open + memchr(b']', &line[open..]).ok_or(LineReject::NotCombined)?;
    let rest = line[close + 1..]
        .strip_prefix(b" \"")
        .ok_or(LineReject::NotCombined)?;
    let end = closing_quote(rest).ok_or(LineReject::NotCombined)?;
    let (request, rest) = (&rest[..end], &rest[end + 1..]);
    let rest = rest.strip_prefix(b" ").ok_or(LineReject::NotCombined)?;
    let status = rest.split(|&b| b == b' ').next().unwrap_or_default();
    if status.len() != 3 || !status.iter().all(u8::is_ascii_digit) {
        return Err(LineReject::NotCombined);
    }
    let ts_s = parse_time(&line[open + 1..close]).ok_or(LineReject::BadTime)?;
    let (method, target) = split_request(request).ok_or(LineReject::BadRequest)?;
    let (host, path) = split_target(target);
    Ok(Request {
        ts_s,
        method,
        path,
        host,
        status,
        value,
    })
}

/// Seconds written as `S[.FFF…]` (nginx's `$request_time`) in ms, the
/// decimal point moved rather than multiplied, so that `0.125` is exactly
/// 125; `None` unless it is such a number.
fn seconds_as_ms(text: &str) -> Option<f64> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !digits(int) || !digits(frac) {
        return None;
    }
    let (ms, rest) = frac.split_at(frac.len().min(3));
    format!("{int}{ms:0<3}.{rest}").parse().ok()
}

/// The position of the first `"` in `s` that no backslash escapes.
fn closing_quote(s: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

fn memchr(needle: u8, s: &[u8]) -> Option<usize> {
    s.iter().position(|&b| b == needle)
}

/// `METHOD TARGET [PROTOCOL]`: the method (letters) and the target.
fn split_request(request: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut parts = request.split(|&b| b == b' ');
    let method = parts.next().filter(|m| !m.is_empty())?;
    let target = parts.next().filter(|t| !t.is_empty())?;
    let well_formed = method.iter().all(|b| b.is_ascii_alphabetic() || *b == b'-')
        && parts.next().is_none_or(|proto| proto.starts_with(b"HTTP/"))
        && parts.next().is_none();
    well_formed.then_some((method, target))
}

/// The host of an absolute target (its port kept, any user and password
/// left out) and the path without query or fragment (`/` for an absolute
/// target with no path).
fn split_target(target: &[u8]) -> (Option<&[u8]>, &[u8]) {
    let lower = |n: usize| target.get(..n).map(<[u8]>::to_ascii_lowercase);
    let scheme = [7, 8]
        .into_iter()
        .find(|&n| lower(n).is_some_and(|s| s == b"http://" || s == b"https://"));
    let (host, path) = match scheme {
        Some(n) => {
            let rest = &target[n..];
            let cut = rest
                .iter()
                .position(|b| matches!(b, b'/' | b'?' | b'#'))
                .unwrap_or(rest.len());
            // Without the `user:password@` a URI may carry: never a name.
            let authority = &rest[..cut];
            let host = match authority.iter().rposition(|&b| b == b'@') {
                Some(at) => &authority[at + 1..],
                None => authority,
            };
            (Some(host).filter(|h| is_host(h)), &rest[cut..])
        }
        None => (None, target),
    };
    let end = path
        .iter()
        .position(|b| matches!(b, b'?' | b'#'))
        .unwrap_or(path.len());
    match &path[..end] {
        [] => (host, b"/"),
        p => (host, p),
    }
}

/// A host a URI can name: a name or address that is not empty (`http://:80/`
/// names none), with a port, when it has one, of 0 to 65535.
fn is_host(host: &[u8]) -> bool {
    // After an IPv6 address (`[::1]:8080`), or else the last colon.
    let from = match host.first() {
        Some(b'[') => host.iter().position(|&b| b == b']').unwrap_or(host.len()),
        _ => 0,
    };
    let (name, port) = match host[from..].iter().position(|&b| b == b':') {
        Some(c) => (&host[..from + c], Some(&host[from + c + 1..])),
        None => (host, None),
    };
    let port_ok = port.is_none_or(|p| {
        (1..=5).contains(&p.len())
            && p.iter().all(u8::is_ascii_digit)
            && p.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0')) <= 65_535
    });
    !name.is_empty() && port_ok
}

/// `10/Oct/2000:13:55:36 -0700` to unix seconds.
fn parse_time(t: &[u8]) -> Option<i64> {
    const MONTHS: [&[u8]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    if t.len() != 26 || t[2] != b'/' || t[6] != b'/' || t[11] != b':' || t[20] != b' ' {
        return None;
    }
    let num = |a: usize, b: usize| -> Option<i64> {
        let digits = &t[a..b];
        digits
            .iter()
            .all(u8::is_ascii_digit)
            .then(|| digits.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let month = MONTHS.iter().position(|m| *m == &t[3..6])? as i64 + 1;
    let (day, year) = (num(0, 2)?, num(7, 11)?);
    let (h, m, s) = (num(12, 14)?, num(15, 17)?, num(18, 20)?);
    let (oh, om) = (num(22, 24)?, num(24, 26)?);
    // Real offsets run from -12:00 to +14:00; anything else is a typo, not a zone.
    let offset = (om < 60 && oh * 60 + om <= 14 * 60).then_some(oh * 3600 + om * 60)?;
    let sign = match t[21] {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    // A day past its month's end (or 0) lands on another date.
    let days = days_from_civil(year, month, day);
    let valid = civil_from_days(days) == (year, month, day) && h < 24 && m < 60 && s < 61;
    valid.then(|| days * 86_400 + h * 3600 + m * 60 + s - sign * offset)
}

/// What goes into a name: text, or a part of the request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(Vec<u8>),
    Path,
    Method,
    Host,
    Status,
}

/// A name template (`--name-template`): text with `{path}`, `{method}`,
/// `{host}` and `{status}` in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    parts: Vec<Part>,
}

/// The default template: the request's path.
pub(crate) const DEFAULT_TEMPLATE: &str = "{path}";

impl Template {
    /// Reads a template; an unknown `{...}` or a lone brace is refused with
    /// the placeholders there are.
    pub(crate) fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let cut = rest.find(['{', '}']).unwrap_or(rest.len());
            if cut > 0 {
                parts.push(Part::Text(rest.as_bytes()[..cut].to_vec()));
            }
            rest = &rest[cut..];
            if rest.is_empty() {
                break;
            }
            let close = rest.find('}').filter(|_| rest.starts_with('{'));
            let part = close.and_then(|c| match &rest[1..c] {
                "path" => Some(Part::Path),
                "method" => Some(Part::Method),
                "host" => Some(Part::Host),
                "status" => Some(Part::Status),
                _ => None,
            });
            let (Some(part), Some(close)) = (part, close) else {
                let what = match close {
                    Some(c) => format!("`{}` is no part", &rest[..=c]),
                    None => "a brace is alone".into(),
                };
                return Err(format!(
                    "`{text}` is not a name template ({what}): text without braces, with \
                     {{path}}, {{method}}, {{host}} or {{status}} in it"
                ));
            };
            parts.push(part);
            rest = &rest[close + 1..];
        }
        if parts.is_empty() {
            return Err("a name template cannot be empty".into());
        }
        // The shortest name it makes (a path, a method and a host of one
        // byte, a status of three): longer than a name may be, every line
        // would be refused as name_too_long.
        let shortest: usize = parts
            .iter()
            .map(|p| match p {
                Part::Text(t) => t.len(),
                Part::Status => 3,
                Part::Path | Part::Method | Part::Host => 1,
            })
            .sum();
        if shortest > event::MAX_NAME_BYTES {
            return Err(format!(
                "a name template of {shortest} bytes or more is longer than a name may be ({} \
                 bytes): every line would be refused",
                event::MAX_NAME_BYTES
            ));
        }
        Ok(Template { parts })
    }

    /// Writes the name of `request` into `out` (cleared first) and checks
    /// it as the worker checks a hit's name.
    pub(crate) fn render<'o>(
        &self,
        request: &Request<'_>,
        out: &'o mut Vec<u8>,
    ) -> Result<&'o str, LineReject> {
        out.clear();
        for part in &self.parts {
            match part {
                // Host names are case-insensitive: one counter for each.
                Part::Host => {
                    let host = request.host.ok_or(LineReject::NoHost)?;
                    out.extend(host.iter().map(u8::to_ascii_lowercase));
                }
                Part::Text(t) => out.extend_from_slice(t),
                Part::Path => out.extend_from_slice(request.path),
                Part::Method => out.extend_from_slice(request.method),
                Part::Status => out.extend_from_slice(request.status),
            }
        }
        event::check_name(out).map_err(LineReject::Hit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &[u8] = br#"203.0.113.9 - alice [10/Oct/2000:13:55:36 -0700] "GET /a/b?x=1&y=2 HTTP/1.1" 200 2326 "http://ref/" "Mozilla/5.0 (X11)""#;

    fn name(template: &str, line: &[u8], format: Format) -> Result<String, LineReject> {
        let t = Template::parse(template).unwrap();
        let request = parse(line, format)?;
        let mut out = Vec::new();
        t.render(&request, &mut out).map(str::to_string)
    }

    #[test]
    fn a_combined_line_is_a_request() {
        let r = parse(LINE, Format::Combined).unwrap();
        // 2000-10-10T20:55:36Z
        assert_eq!(r.ts_s, 971_211_336);
        assert_eq!(
            (r.method, r.path, r.status),
            (&b"GET"[..], &b"/a/b"[..], &b"200"[..])
        );
        assert_eq!((r.host, r.value), (None, None));
        // Apache's common format: no referer, no agent.
        let common = br#"::1 - - [01/Jan/1970:00:00:00 +0000] "POST / HTTP/1.0" 404 -"#;
        assert_eq!(parse(common, Format::Combined).unwrap().ts_s, 0);
    }

    #[test]
    fn templates_name_the_parts() {
        let f = Format::Combined;
        assert_eq!(name("{path}", LINE, f).unwrap(), "/a/b");
        assert_eq!(name("{method}:{path}", LINE, f).unwrap(), "GET:/a/b");
        assert_eq!(name("web:{status}", LINE, f).unwrap(), "web:200");
        assert_eq!(name("{host}{path}", LINE, f), Err(LineReject::NoHost));
        let absolute = br#"h - - [10/Oct/2000:13:55:36 +0000] "GET https://Example.org?q HTTP/1.1" 301 0 "-" "-""#;
        assert_eq!(name("{host}{path}", absolute, f).unwrap(), "example.org/");
        // A user and password in the URI are left out; a port is kept.
        let with_user = br#"h - - [10/Oct/2000:13:55:36 +0000] "GET http://alice:s3cret@API.example:8080/x?a@b HTTP/1.1" 200 0 "-" "-""#;
        assert_eq!(
            name("{host} {path}", with_user, f).unwrap(),
            "api.example:8080 /x"
        );
        for bad in ["", "{nope}", "{path", "a}b", "{}"] {
            assert!(Template::parse(bad).is_err(), "{bad}");
        }
        // No name it makes could be counted: refused before a line is read.
        let max = event::MAX_NAME_BYTES;
        assert!(Template::parse(&"n".repeat(max)).is_ok());
        assert!(Template::parse(&format!("{}{{path}}", "n".repeat(max - 1))).is_ok());
        assert!(Template::parse(&format!("{}{{path}}", "n".repeat(max))).is_err());
        assert!(Template::parse(&format!("{}{{status}}", "n".repeat(max - 2))).is_err());
    }

    #[test]
    fn a_host_is_a_name_with_a_port_that_can_be() {
        let line = |target: &str| {
            format!(r#"a - - [10/Oct/2000:13:55:36 +0000] "GET {target} HTTP/1.1" 200 1 "-" "-""#)
        };
        let host = |target: &str| name("{host}", line(target).as_bytes(), Format::Combined);
        for (target, named) in [
            ("http://h.example:65535/g", "h.example:65535"),
            ("http://h.example:0/g", "h.example:0"),
            ("http://[::1]:8080/g", "[::1]:8080"),
            ("http://[::1]/g", "[::1]"),
            ("http://u@10.0.0.1/g", "10.0.0.1"),
        ] {
            assert_eq!(host(target).as_deref(), Ok(named), "{target}");
        }
        for target in [
            "http://:80/g",
            "http://u@:80/g",
            "http://h.example:99999/g",
            "http://h.example:065536/g",
            "http://h.example:8x/g",
            "http://h.example:/g",
            "http://[::1]:/g",
            "http:///g",
        ] {
            assert_eq!(host(target), Err(LineReject::NoHost), "{target}");
        }
        // The path is counted as before.
        assert_eq!(
            name("{path}", line("http://:80/g").as_bytes(), Format::Combined).as_deref(),
            Ok("/g")
        );
    }

    #[test]
    fn query_strings_and_fragments_are_cut() {
        let line = |target: &str| {
            format!(r#"a - - [10/Oct/2000:13:55:36 +0000] "GET {target} HTTP/1.1" 200 1 "-" "-""#)
        };
        for (target, path) in [("/p?", "/p"), ("/p#f", "/p"), ("/?a", "/"), ("*", "*")] {
            assert_eq!(
                name("{path}", line(target).as_bytes(), Format::Combined).unwrap(),
                path
            );
        }
    }

    #[test]
    fn request_time_is_the_value_in_ms() {
        let mut line = LINE.to_vec();
        line.extend_from_slice(b" 0.250");
        assert_eq!(
            parse(&line, Format::CombinedTime).unwrap().value,
            Some(250.0)
        );
        for (text, ms) in [
            ("1.234", Some(1234.0)),
            ("0.0005", Some(0.5)),
            ("7", Some(7000.0)),
        ] {
            assert_eq!(seconds_as_ms(text), ms, "{text}");
        }
        for bad in ["", ".5", "1e3", "-1", "1.2.3", "nan"] {
            assert_eq!(seconds_as_ms(bad), None, "{bad}");
        }
        assert_eq!(
            parse(LINE, Format::CombinedTime),
            Err(LineReject::BadRequestTime)
        );
        line.extend_from_slice(b" -1");
        assert_eq!(
            parse(&line, Format::CombinedTime),
            Err(LineReject::BadRequestTime)
        );
    }

    #[test]
    fn bad_lines_say_why() {
        let cases: [(&[u8], LineReject); 8] = [
            (b"", LineReject::NotCombined),
            (b"garbage without brackets", LineReject::NotCombined),
            (
                br#"a - - [10/Oct/2000:13:55:36 +0000] "GET / HTTP/1.1" 2000 1"#,
                LineReject::NotCombined,
            ),
            (
                br#"a - - [10/Oct/2000:13:55:36 +0000] "GET / HTTP/1.1 200 1"#,
                LineReject::NotCombined,
            ),
            (
                br#"a - - [31/Feb/2000:13:55:36 +0000] "GET / HTTP/1.1" 200 1"#,
                LineReject::BadTime,
            ),
            (
                br#"a - - [10/Oct/2000 13:55:36 +0000] "GET / HTTP/1.1" 200 1"#,
                LineReject::BadTime,
            ),
            (
                br#"a - - [10/Oct/2000:13:55:36 +0000] "-" 400 0 "-" "-""#,
                LineReject::BadRequest,
            ),
            (
                br#"a - - [10/Oct/2000:13:55:36 +0000] "\x16\x03\x01" 400 0"#,
                LineReject::BadRequest,
            ),
        ];
        for (line, why) in cases {
            assert_eq!(
                parse(line, Format::Combined),
                Err(why),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        // An escaped quote does not end the request.
        let quoted = br#"a - - [10/Oct/2000:13:55:36 +0000] "GET /\"x HTTP/1.1" 200 1"#;
        assert_eq!(parse(quoted, Format::Combined).unwrap().path, br#"/\"x"#);
    }

    #[test]
    fn names_are_checked_as_the_worker_checks_them() {
        let long = format!(
            r#"a - - [10/Oct/2000:13:55:36 +0000] "GET /{} HTTP/1.1" 200 1"#,
            "x".repeat(event::MAX_NAME_BYTES)
        );
        let f = Format::Combined;
        assert_eq!(
            name("{path}", long.as_bytes(), f),
            Err(LineReject::Hit(Reject::NameTooLong))
        );
        let latin1 = b"a - - [10/Oct/2000:13:55:36 +0000] \"GET /caf\xe9 HTTP/1.1\" 200 1";
        assert_eq!(
            name("{path}", latin1, f),
            Err(LineReject::Hit(Reject::NameNotUtf8))
        );
        assert_eq!(
            LineReject::Hit(Reject::NameTooLong).reason(),
            "name_too_long"
        );
    }

    #[test]
    fn times_follow_the_calendar() {
        assert_eq!(
            parse_time(b"29/Feb/2024:00:00:00 +0000"),
            Some(1_709_164_800)
        );
        assert_eq!(parse_time(b"29/Feb/2023:00:00:00 +0000"), None);
        assert_eq!(parse_time(b"01/Jan/1970:01:00:00 +0100"), Some(0));
        assert_eq!(parse_time(b"31/Dec/1969:23:59:59 +0000"), Some(-1));
        assert_eq!(parse_time(b"01/Jan/1970:00:00:00 *0000"), None);
        assert_eq!(parse_time(b"01/Jan/1970:14:00:00 +1400"), Some(0));
        assert_eq!(parse_time(b"01/Jan/1970:00:00:00 +1401"), None);
        assert_eq!(parse_time(b"01/Jan/1970:00:00:00 +2400"), None);
        assert_eq!(parse_time(b"01/Jan/1970:00:00:00 -0060"), None);
        assert_eq!(parse_time(b"01/Jan/1970:00:00:00 +9999"), None);
    }
}
