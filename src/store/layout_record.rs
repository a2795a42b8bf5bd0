//! The layout the counters are counted with, recorded in Redis by the
//! first worker, so that no worker counts or cleans with another.
//!
//! Each hit is counted by the one worker that reads it, at that worker's
//! precisions: two workers with different `--precisions` split the counts
//! between them (a rolling change of the setting counted each hit at the
//! precisions of whichever worker read it). A leader with fewer
//! `--samples` than the others cleans samples they still trust to be kept,
//! and a bucket's histogram covers only the hits of workers that keep one
//! at its precision. The counters, the cleaner and its lease belong to the
//! prefix (`HITCOUNT_PREFIX`), whatever stream feeds them, so the first
//! worker records its precisions, samples and quantile precisions in
//! `PREFIX hc:layout` (`SET NX`, [`crate::model::keys::Keys::layout`]) and
//! every later worker, of any stream, must agree; `hitcount clean` must
//! agree on what it cleans by (precisions and samples). Changing them means
//! stopping every worker and deleting the record.

use redis::{RedisResult, Value};

use crate::model::config::{comma_list, LayoutArgs};
use crate::model::keys::Keys;
use crate::store::client::unless_wrong_type;
use crate::store::connect::Conn;

/// Where the quantile precisions start in a record ([`describe`]).
const QUANTILES: &str = " quantile_precisions=";

/// A layout recorded that is not this one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Other {
    /// The key it is recorded in.
    pub key: String,
    /// What it holds, as text (escaped), or `None` when it is no layout
    /// as hitcount writes one (written by something else).
    pub recorded: Option<String>,
    /// What it holds as said to a reader.
    pub shown: String,
}

impl Other {
    /// Why a worker (or `clean`) with `layout` must not run.
    pub(crate) fn refusal(&self, layout: &LayoutArgs) -> String {
        let key = &self.key;
        match &self.recorded {
            Some(recorded) => format!(
                "HITCOUNT_PRECISIONS, HITCOUNT_SAMPLES and HITCOUNT_QUANTILE_PRECISIONS give \
                 `{}`, but the workers of these counters count with `{recorded}` (recorded in \
                 {key}): workers with different layouts would split the counts between them, \
                 and a leader with fewer samples cleans what the others keep; give every worker \
                 the same settings, or, to change them, stop every worker, then delete {key}",
                describe(layout)
            ),
            None => format!(
                "{key} holds {}, which is no counter layout as hitcount writes one: something \
                 else wrote it; delete it, and the next worker records its own",
                self.shown
            ),
        }
    }
}

/// A layout as it is recorded: the settings that decide where a hit is
/// counted and what is kept of it.
pub(crate) fn describe(layout: &LayoutArgs) -> String {
    format!(
        "precisions={} samples={}{QUANTILES}{}",
        comma_list(&layout.precisions),
        layout.samples,
        comma_list(&layout.quantile_precisions())
    )
}

/// Records `layout` for the counters of `keys` unless one is recorded:
/// `None` when the recorded one is this one (recorded now or before), else
/// what is recorded.
pub(crate) async fn record(
    conn: &mut Conn,
    keys: &Keys,
    layout: &LayoutArgs,
) -> RedisResult<Option<Other>> {
    let reply = redis::cmd("SET")
        .arg(keys.layout())
        .arg(describe(layout))
        .arg("NX")
        .arg("GET")
        .query_async(conn)
        .await;
    let found = unless_wrong_type(reply)?;
    Ok(judged(keys.layout(), found, &describe(layout)))
}

/// What is recorded, judged against `layout` by what cleaning depends on
/// (precisions and samples: `clean` has no quantile precisions), without
/// writing; nothing recorded agrees.
pub(crate) async fn read_for_cleaning(
    conn: &mut Conn,
    keys: &Keys,
    layout: &LayoutArgs,
) -> RedisResult<Option<Other>> {
    let reply = redis::cmd("GET").arg(keys.layout()).query_async(conn).await;
    let found = unless_wrong_type(reply)?;
    let cleaning = |text: &str| text.split(QUANTILES).next().unwrap_or("").to_string();
    let ours = cleaning(&describe(layout));
    let other = judged(keys.layout(), found, &describe(layout));
    Ok(other.filter(|o| o.recorded.as_deref().is_none_or(|r| cleaning(r) != ours)))
}

/// The precisions and samples recorded for the counters of `keys`, if a
/// layout as hitcount writes one is recorded (what a producer judges an
/// old hit by: the workers', not its own settings).
pub(crate) async fn recorded(conn: &mut Conn, keys: &Keys) -> RedisResult<Option<(Vec<u32>, u32)>> {
    let reply = redis::cmd("GET").arg(keys.layout()).query_async(conn).await;
    let Some(Value::BulkString(bytes)) = unless_wrong_type(reply)? else {
        return Ok(None);
    };
    Ok(parse(&String::from_utf8_lossy(&bytes)))
}

/// A record's precisions and samples ([`describe`]'s form).
fn parse(text: &str) -> Option<(Vec<u32>, u32)> {
    let rest = text.strip_prefix("precisions=")?;
    let (precisions, rest) = rest.split_once(" samples=")?;
    let (samples, _) = rest.split_once(QUANTILES)?;
    let precisions: Option<Vec<u32>> = precisions.split(',').map(|p| p.parse().ok()).collect();
    let precisions = precisions.filter(|p| !p.is_empty() && !p.contains(&0))?;
    Some((precisions, samples.parse().ok().filter(|&s| s > 0)?))
}

/// A reply of GET (`None`: a key of another type) judged against the
/// record `ours`.
fn judged(key: String, reply: Option<Value>, ours: &str) -> Option<Other> {
    let (recorded, shown) = match reply {
        Some(Value::Nil) => return None,
        Some(Value::BulkString(bytes)) if bytes == ours.as_bytes() => return None,
        Some(Value::BulkString(bytes)) => {
            let text = String::from_utf8_lossy(&bytes).escape_debug().to_string();
            let ours = text.starts_with("precisions=") && text.contains(QUANTILES);
            (ours.then(|| text.clone()), format!("{text:?}"))
        }
        None => (None, "a value of another type than a string".to_string()),
        Some(other) => (None, format!("{other:?}")),
    };
    Some(Other {
        key,
        recorded,
        shown,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_is_recorded_as_its_three_settings() {
        let layout = LayoutArgs::default();
        assert_eq!(
            describe(&layout),
            "precisions=1,5,60,300,3600,18000,86400 samples=120 quantile_precisions=60,3600,86400"
        );
        let other = LayoutArgs {
            precisions: vec![1, 7, 60],
            samples: 5,
            ..LayoutArgs::default()
        };
        assert_eq!(
            describe(&other),
            "precisions=1,7,60 samples=5 quantile_precisions=60"
        );
    }

    #[test]
    fn a_record_reads_back_as_its_precisions_and_samples() {
        let layout = LayoutArgs {
            precisions: vec![1, 7, 60],
            samples: 5,
            ..LayoutArgs::default()
        };
        assert_eq!(parse(&describe(&layout)), Some((vec![1, 7, 60], 5)));
        for bad in [
            "abc",
            "precisions= samples=5 quantile_precisions=",
            "precisions=0 samples=1 quantile_precisions=",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_record_no_worker_wrote_is_said_to_be_none() {
        let bulk = |s: &str| Some(Value::BulkString(s.as_bytes().to_vec()));
        let ours = describe(&LayoutArgs::default());
        assert_eq!(judged("k".into(), Some(Value::Nil), &ours), None);
        assert_eq!(judged("k".into(), bulk(&ours), &ours), None);
        let other = judged(
            "k".into(),
            bulk("precisions=60 samples=1 quantile_precisions="),
            &ours,
        );
        let refusal = other.unwrap().refusal(&LayoutArgs::default());
        assert!(
            refusal.contains("count with `precisions=60 samples=1"),
            "{refusal}"
        );
        for (found, shown) in [(bulk("abc"), "\"abc\""), (None, "another type")] {
            let refusal = judged("k".into(), found, &ours)
                .unwrap()
                .refusal(&LayoutArgs::default());
            assert!(
                refusal.contains(shown) && refusal.contains("no counter layout"),
                "{refusal}"
            );
        }
    }
}
