//! Where data lives in Redis: the counter layout ([`LayoutArgs`]: key
//! prefix, precisions, samples, the precisions whose statistics keep
//! quantile histograms) and the stream with its consumer group and
//! dead-letter stream ([`StreamArgs`]), with their defaults and validation.

use clap::Args;

use super::{invalid, plain_name, ranged, ConfigError};
use crate::model::stats::DEFAULT_QUANTILE_PRECISIONS;

/// The seeds' precisions: 1 s, 5 s, 1 min, 5 min, 1 h, 5 h, 1 day.
pub const DEFAULT_PRECISIONS: [u32; 7] = [1, 5, 60, 300, 3600, 18000, 86400];
/// [`DEFAULT_PRECISIONS`] as `--precisions` takes and `--help` shows them,
/// `1,5,60,…`: written from the array, so the default is stated once.
pub(crate) static DEFAULT_PRECISIONS_FLAG: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| comma_list(&DEFAULT_PRECISIONS));
/// Most stream shards: each is read by one worker at a time, and the shard
/// label of the metrics stays bounded.
pub(crate) const MAX_SHARDS: u32 = 256;
/// Largest dead-letter cap (`--dead-maxlen`): far beyond any need, and the
/// stream stays a bounded size.
pub(crate) const MAX_DEAD_MAXLEN: u64 = 100_000_000;
/// Largest precision, in seconds (`--precisions`): 365 days.
pub(crate) const MAX_PRECISION: u32 = 31_536_000;
/// Most samples kept per counter (`--samples`): 31 years of 1 s buckets, so
/// "keep everything" is within range while a typo (a negative number, an
/// overflow) is refused.
pub(crate) const MAX_SAMPLES: u32 = 1_000_000_000;

/// The counter layout: where counters live and at which precisions.
#[derive(Args, Debug, Clone)]
pub struct LayoutArgs {
    // Default none, so the counters keep the seeds' key names (`known:`,
    // `count:*`).
    /// Prefix of every key hitcount names: the counters (`known:`,
    /// `count:*`), the statistics (`stats:known:`, `stats:*`) and its own
    /// bookkeeping, e.g. `app1:`. Empty by default.
    #[arg(long, env = "HITCOUNT_PREFIX", default_value = "")]
    pub prefix: String,
    /// Precisions in seconds, comma separated (spaces allowed), each
    /// 1..=31536000 (365 days).
    #[arg(long, env = "HITCOUNT_PRECISIONS", value_parser = parse_precisions, default_value = DEFAULT_PRECISIONS_FLAG.as_str())]
    pub precisions: ::std::vec::Vec<u32>,
    // Default 120: two hours at the 1 min precision, 120 days at the 1 day one.
    /// Samples kept per counter, 1..=1000000000: a sample whose bucket starts
    /// at or before now - SAMPLES * PRECISION is cleaned (and never written).
    #[arg(long, env = "HITCOUNT_SAMPLES", default_value_t = 120,
          value_parser = ranged::<u32>(1..=MAX_SAMPLES.into()))]
    pub samples: u32,
    /// Precisions (seconds, comma separated, each 1..=31536000 and one of
    /// --precisions) whose statistics of hit values keep a quantile histogram (fields
    /// `B:h:I` of `stats:PREC:NAME`). Empty: no histograms anywhere.
    /// Default: 60,3600,86400, those of them among --precisions.
    #[arg(long, env = "HITCOUNT_QUANTILE_PRECISIONS", value_parser = parse_precision_list)]
    pub quantile_precisions: Option<::std::vec::Vec<u32>>,
}

/// A comma-separated list of precisions in seconds, each 1..=[`MAX_PRECISION`]
/// (spaces around each allowed); empty is an empty list.
fn parse_precision_list(text: &str) -> Result<Vec<u32>, String> {
    let precision = ranged::<u32>(1..=MAX_PRECISION.into());
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(str::trim)
        .map(|p| match p {
            "" => Err(format!("an empty item in `{text}`: remove the extra comma")),
            p => precision(p).map_err(|e| format!("a precision in seconds: {e}")),
        })
        .collect()
}

/// Precisions as `--precisions` takes them: `1,5,60`.
pub(crate) fn comma_list(precisions: &[u32]) -> String {
    let texts: Vec<String> = precisions.iter().map(u32::to_string).collect();
    texts.join(",")
}

/// `--precisions`: [`parse_precision_list`], with at least one precision.
pub(crate) fn parse_precisions(text: &str) -> Result<Vec<u32>, String> {
    let list = parse_precision_list(text)?;
    if list.is_empty() {
        return Err(format!(
            "at least one precision is needed: seconds, comma separated, each 1..={MAX_PRECISION}"
        ));
    }
    Ok(list)
}

impl LayoutArgs {
    /// Checks the key prefix ([`plain_name`]), the precisions and samples;
    /// sorts and dedups the precisions.
    pub fn validate(&mut self) -> Result<(), ConfigError> {
        plain_name("--prefix / HITCOUNT_PREFIX", &self.prefix)?;
        let precisions = |reason: &str| invalid("--precisions / HITCOUNT_PRECISIONS", reason);
        if self.precisions.is_empty() {
            return Err(precisions("at least one precision is needed"));
        }
        if self.precisions.contains(&0) {
            return Err(precisions("a precision of 0 seconds is meaningless"));
        }
        self.precisions.sort_unstable();
        self.precisions.dedup();
        if self.samples == 0 {
            return Err(invalid(
                "--samples / HITCOUNT_SAMPLES",
                "at least one sample must be kept",
            ));
        }
        if let Some(q) = &self.quantile_precisions {
            if let Some(p) = q.iter().find(|p| !self.precisions.contains(p)) {
                return Err(invalid(
                    "--quantile-precisions / HITCOUNT_QUANTILE_PRECISIONS",
                    format!(
                        "{p} is not one of the precisions ({})",
                        comma_list(&self.precisions)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The precisions whose statistics keep a quantile histogram: as set,
    /// or by default those of [`DEFAULT_QUANTILE_PRECISIONS`] among the
    /// precisions.
    pub(crate) fn quantile_precisions(&self) -> Vec<u32> {
        match &self.quantile_precisions {
            Some(q) => q.clone(),
            None => DEFAULT_QUANTILE_PRECISIONS
                .into_iter()
                .filter(|p| self.precisions.contains(p))
                .collect(),
        }
    }
}

/// The stream, its consumer group and the dead-letter stream.
#[derive(Args, Debug, Clone)]
pub struct StreamArgs {
    /// Key of the stream the apps write hit events to.
    #[arg(long, env = "HITCOUNT_STREAM", default_value = "hits")]
    pub stream: String,
    /// Consumer group the workers share.
    #[arg(long, env = "HITCOUNT_GROUP", default_value = "hitcount")]
    pub group: String,
    /// Stream that receives entries that cannot be counted, with the reason.
    #[arg(long, env = "HITCOUNT_DEAD_STREAM", default_value = "hits:dead")]
    pub dead_stream: String,
    /// Approximate cap on the dead-letter stream's length (XADD MAXLEN ~),
    /// in entries, 1..=100000000.
    #[arg(long, env = "HITCOUNT_DEAD_MAXLEN", default_value_t = 100_000,
          value_parser = ranged::<u64>(1..=MAX_DEAD_MAXLEN.into()))]
    pub dead_maxlen: u64,
    /// Stream shards, 1..=256: with more than one, shard k of the stream is
    /// `STREAM:{k}` (its dead letters `DEAD_STREAM:{k}`), each with the
    /// group, and the workers share the shards through leases. Spreads the
    /// stream over the masters of a Redis Cluster; use at least 16 for 3
    /// masters.
    #[arg(long, env = "HITCOUNT_SHARDS", default_value_t = 1,
          value_parser = ranged::<u32>(1..=MAX_SHARDS.into()))]
    pub shards: u32,
}

impl StreamArgs {
    /// Refuses empty names, names with leading or trailing spaces or control
    /// characters ([`plain_name`]: `hits\n` is another stream than the
    /// workers' `hits`, `hitcount\n` another group, which would count every
    /// entry again), and a dead-letter stream equal to the stream (each dead
    /// letter would be read back and dead-lettered again, for ever).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let names = [
            ("--stream / HITCOUNT_STREAM", &self.stream),
            ("--group / HITCOUNT_GROUP", &self.group),
            ("--dead-stream / HITCOUNT_DEAD_STREAM", &self.dead_stream),
        ];
        for (setting, value) in names {
            if value.is_empty() {
                return Err(invalid(setting, "must not be empty"));
            }
            plain_name(setting, value)?;
        }
        if !(1..=MAX_SHARDS).contains(&self.shards) {
            return Err(invalid(
                "--shards / HITCOUNT_SHARDS",
                format!("must be between 1 and {MAX_SHARDS}, not {}", self.shards),
            ));
        }
        if self.shards > 1 && self.stream.contains('{') {
            return Err(invalid(
                "--stream / HITCOUNT_STREAM",
                format!(
                    "{:?} holds a `{{`, but with {} shards shard k is {}:{{k}} and takes its \
                     hash slot from the `{{k}}`: an earlier `{{` would take it instead (every \
                     shard in one slot, or its keys apart): remove the `{{`",
                    self.stream, self.shards, self.stream
                ),
            ));
        }
        if self.dead_stream == self.stream {
            return Err(invalid(
                "--dead-stream / HITCOUNT_DEAD_STREAM",
                format!(
                    "must differ from the stream ({}): dead letters would be read back and \
                     dead-lettered again for ever",
                    self.stream
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_defaults_match_default() {
        crate::model::config::tests::assert_clap_defaults::<LayoutArgs>();
        crate::model::config::tests::assert_clap_defaults::<StreamArgs>();
    }

    #[test]
    fn precisions_are_validated() {
        let mut l = LayoutArgs {
            precisions: vec![60, 1, 60],
            ..LayoutArgs::default()
        };
        l.validate().unwrap();
        assert_eq!(l.precisions, vec![1, 60]);
        l.precisions = vec![0];
        assert!(l.validate().is_err());
        l.precisions = vec![];
        assert!(l.validate().is_err());
    }

    #[test]
    fn quantile_precisions_are_among_the_precisions() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            layout: LayoutArgs,
        }
        let parse = |args: &[&str]| {
            let mut all = vec!["t"];
            all.extend_from_slice(args);
            let mut l = Cli::try_parse_from(all).unwrap().layout;
            l.validate().map(|_| l.quantile_precisions())
        };
        if std::env::var_os("HITCOUNT_QUANTILE_PRECISIONS").is_none() {
            assert_eq!(parse(&[]).unwrap(), [60, 3600, 86400]);
            // The default keeps those of them that are configured.
            assert_eq!(parse(&["--precisions", "1,60"]).unwrap(), [60]);
        }
        assert_eq!(parse(&["--quantile-precisions", "3600"]).unwrap(), [3600]);
        assert_eq!(
            parse(&["--quantile-precisions", " 1, 60 "]).unwrap(),
            [1, 60]
        );
        // Empty: statistics without histograms.
        assert!(parse(&["--quantile-precisions", ""]).unwrap().is_empty());
        let err = parse(&["--quantile-precisions", "60,7"])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "invalid --quantile-precisions / HITCOUNT_QUANTILE_PRECISIONS: 7 is not one of \
             the precisions (1,5,60,300,3600,18000,86400)"
        );
        assert!(Cli::try_parse_from(["t", "--quantile-precisions", "6x"]).is_err());
    }

    #[test]
    fn stream_names_are_validated() {
        assert!(StreamArgs::default().validate().is_ok());
        let same = StreamArgs {
            dead_stream: "hits".into(),
            ..StreamArgs::default()
        };
        assert!(same
            .validate()
            .unwrap_err()
            .to_string()
            .contains("HITCOUNT_DEAD_STREAM"));
        for empty in [
            StreamArgs {
                stream: String::new(),
                ..StreamArgs::default()
            },
            StreamArgs {
                group: String::new(),
                ..StreamArgs::default()
            },
            StreamArgs {
                dead_stream: String::new(),
                ..StreamArgs::default()
            },
        ] {
            assert!(empty
                .validate()
                .unwrap_err()
                .to_string()
                .contains("must not be empty"));
        }
        // A `{` in a sharded stream's name would take the shards' hash tag.
        let tagged = |stream: &str, shards: u32| StreamArgs {
            stream: stream.into(),
            shards,
            ..StreamArgs::default()
        };
        let err = tagged("h{x}", 4).validate().unwrap_err().to_string();
        assert!(
            err.contains("HITCOUNT_STREAM") && err.contains("h{x}:{k}"),
            "{err}"
        );
        assert!(tagged("h{x", 2).validate().is_err());
        assert!(
            tagged("h{x}", 1).validate().is_ok(),
            "one shard: the name as given"
        );
        assert!(tagged("h}x", 4).validate().is_ok());
    }

    /// A name with a stray newline or space is another key or group than
    /// the deployment's (`hitcount\n`: a second group that counts every
    /// entry again): refused, naming the setting, for every name and the
    /// prefix alike.
    #[test]
    fn names_with_stray_spaces_or_control_characters_are_refused() {
        for bad in ["hits\n", " hits", "hits ", " ", "a\nb", "a\tb", "\u{7f}x"] {
            let cases = [
                (
                    StreamArgs {
                        stream: bad.into(),
                        ..StreamArgs::default()
                    },
                    "--stream / HITCOUNT_STREAM",
                ),
                (
                    StreamArgs {
                        group: bad.into(),
                        ..StreamArgs::default()
                    },
                    "--group / HITCOUNT_GROUP",
                ),
                (
                    StreamArgs {
                        dead_stream: bad.into(),
                        ..StreamArgs::default()
                    },
                    "--dead-stream / HITCOUNT_DEAD_STREAM",
                ),
            ];
            for (args, setting) in cases {
                let err = args.validate().unwrap_err().to_string();
                assert!(
                    err.starts_with(&format!("invalid {setting}: ")),
                    "{bad:?}: {err}"
                );
                assert!(err.contains("trailing spaces or control"), "{err}");
            }
            let mut layout = LayoutArgs {
                prefix: bad.into(),
                ..LayoutArgs::default()
            };
            let err = layout.validate().unwrap_err().to_string();
            assert!(
                err.starts_with("invalid --prefix / HITCOUNT_PREFIX: "),
                "{bad:?}: {err}"
            );
        }
        // Spaces and any other character inside a name stay accepted.
        let inside = StreamArgs {
            stream: "my hits".into(),
            group: "hit:count{1}".into(),
            dead_stream: "héllo dead".into(),
            ..StreamArgs::default()
        };
        inside.validate().unwrap();
        let mut layout = LayoutArgs {
            prefix: "app 1:".into(),
            ..LayoutArgs::default()
        };
        layout.validate().unwrap();
    }

    #[test]
    fn precisions_flag_matches_precisions() {
        assert_eq!(
            parse_precisions(&DEFAULT_PRECISIONS_FLAG).unwrap(),
            DEFAULT_PRECISIONS
        );
    }
}
