//! The command line's own value parsers: counts, the Zipf exponent,
//! names (refused without being echoed) and times, each with the range a
//! command accepts.

/// Most distinct names `load` and `demo` draw from (`page:0` ..): the
/// samplers hold a few words per name.
pub(crate) const MAX_NAMES: u64 = 10_000_000;
/// Largest Zipf exponent accepted: beyond it every hit goes to `page:0`.
pub(crate) const MAX_ZIPF: f64 = 10.0;

/// A count that must be at least 1 (`--hits`, `--rate`...).
pub(crate) fn parse_at_least_one(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        Ok(_) => Err("must be at least 1".into()),
        Err(_) => Err(format!("`{text}` is not a whole number from 1 up")),
    }
}

/// `--zipf`: a finite exponent from 0 (uniform) to [`MAX_ZIPF`].
pub(crate) fn parse_zipf(text: &str) -> Result<f64, String> {
    let s: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))?;
    if (0.0..=MAX_ZIPF).contains(&s) {
        Ok(s)
    } else {
        Err(format!("must be a number from 0 to {MAX_ZIPF}"))
    }
}

/// A name argument (or a name template), checked by the function it holds
/// (1..=4096 bytes), whose error does not repeat the value: clap's own
/// echoed a name of kilobytes in full.
#[derive(Clone)]
pub(crate) struct NameArg<T = String>(pub(crate) fn(&str) -> Result<T, String>);

impl<T: Clone + Send + Sync + 'static> clap::builder::TypedValueParser for NameArg<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let kind = clap::error::ErrorKind::ValueValidation;
        let arg = arg.map(ToString::to_string).unwrap_or_default();
        let text = value
            .to_str()
            .ok_or_else(|| clap::Error::new(clap::error::ErrorKind::InvalidUtf8).with_cmd(cmd))?;
        (self.0)(text).map_err(|why| {
            clap::Error::raw(kind, format!("invalid value for '{arg}': {why}\n")).with_cmd(cmd)
        })
    }
}

/// A counter's name to read (`get`): 1..=4096 bytes, as no other can
/// have been counted.
pub(crate) fn parse_counter_name(text: &str) -> Result<String, String> {
    name_of_at_most(
        text,
        "a counter's name cannot be empty (no hit with an empty name is counted)",
        "a counted name may have",
    )
}

/// A hit's name as the worker accepts it: 1..=4096 bytes (longer or empty
/// names are dead-lettered).
pub(crate) fn parse_hit_name(text: &str) -> Result<String, String> {
    name_of_at_most(
        text,
        "a hit's name cannot be empty (the worker would dead-letter it)",
        "a name may have (the worker would dead-letter it)",
    )
}

/// `text` if it is 1..=[`crate::model::event::MAX_NAME_BYTES`] bytes long,
/// else `empty`, or that its length is longer than the bytes `a_name_may_have`.
fn name_of_at_most(text: &str, empty: &str, a_name_may_have: &str) -> Result<String, String> {
    let max = crate::model::event::MAX_NAME_BYTES;
    match text.len() {
        0 => Err(empty.into()),
        n if n > max => Err(format!(
            "{n} bytes is longer than the {max} bytes {a_name_may_have}"
        )),
        _ => Ok(text.to_string()),
    }
}

/// Latest time a command line takes, in unix seconds: 9999-12-31T23:59:59Z.
pub(crate) const MAX_UNIX_SECONDS: f64 = 253_402_300_799.0;

/// A time in unix seconds as the worker accepts it: finite, ≥ 0 and at
/// most [`MAX_UNIX_SECONDS`] (later ones are far past what it counts, and
/// would print as hundreds of digits).
pub(crate) fn parse_unix_seconds(text: &str) -> Result<f64, String> {
    let ts: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number of unix seconds"))?;
    if ts.is_finite() && (0.0..=MAX_UNIX_SECONDS).contains(&ts) {
        Ok(ts)
    } else {
        Err(format!(
            "must be unix seconds in 0..={MAX_UNIX_SECONDS} (the worker would dead-letter it)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values_are_checked() {
        assert!(parse_zipf("nan").is_err());
        assert!(parse_zipf("inf").is_err());
        assert!(parse_zipf("-1").is_err());
        assert!(parse_zipf("10.5").is_err());
        assert_eq!(parse_zipf("1.2"), Ok(1.2));
        assert!(parse_hit_name("").is_err());
        assert!(parse_hit_name(&"n".repeat(4097)).is_err());
        assert!(parse_hit_name(&"n".repeat(4096)).is_ok());
        for bad in ["nan", "inf", "-inf", "-1", "x"] {
            assert!(parse_unix_seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_unix_seconds("1795433810.5"), Ok(1_795_433_810.5));
    }
}
