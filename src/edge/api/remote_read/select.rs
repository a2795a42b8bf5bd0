//! Which series one remote-read query selects: its label matchers checked
//! against the families served ([`Metric`]), the configured precisions and
//! the names listed in `known:` and `stats:known:`, read only in the range
//! of the name matchers' literal prefix, and refused beyond
//! [`MAX_SERIES`].

use regex::{Regex, RegexBuilder};

use super::prompb::{Label, LabelMatcher, MatchType};
use super::Failure;
use crate::model::keys::{Family, Keys};
use crate::store::client::Conn;
use crate::store::query;

/// Most series one read (all its queries) may select: beyond, it is
/// refused before any hash is read. 10,000 series of 120 buckets are
/// about 15 MB of samples before compression.
pub(crate) const MAX_SERIES: usize = 10_000;
/// Most names one read (all its queries) may list from `known:` and
/// `stats:known:`, matched or not: a name regex without a literal prefix
/// lists every name, and a read may hold many queries. About 1,000 round
/// trips of 1,000 names.
pub(crate) const MAX_LISTED: usize = 1_000_000;
/// Names listed per round trip (per precision, in one pipeline).
const PAGE: usize = 1000;
/// The `quantile` label of each of [`crate::model::stats::REPORTED_QUANTILES`].
const QUANTILES: [&str; 3] = ["0.5", "0.9", "0.99"];

/// The series families served, each read from one family of hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Metric {
    /// `hitcount_hits`: a bucket's count (`count:`).
    Hits,
    /// `hitcount_value_count`: a bucket's observations (`stats:`).
    Count,
    /// `hitcount_value_sum`: their sum.
    Sum,
    /// `hitcount_value_min`.
    Min,
    /// `hitcount_value_max`.
    Max,
    /// `hitcount_value{quantile=QUANTILES[i]}`, where a histogram is kept.
    Quantile(usize),
}

impl Metric {
    const ALL: [Metric; 8] = [
        Metric::Hits,
        Metric::Count,
        Metric::Sum,
        Metric::Min,
        Metric::Max,
        Metric::Quantile(0),
        Metric::Quantile(1),
        Metric::Quantile(2),
    ];

    fn name(self) -> &'static str {
        match self {
            Metric::Hits => "hitcount_hits",
            Metric::Count => "hitcount_value_count",
            Metric::Sum => "hitcount_value_sum",
            Metric::Min => "hitcount_value_min",
            Metric::Max => "hitcount_value_max",
            Metric::Quantile(_) => "hitcount_value",
        }
    }

    /// Its `quantile` label; empty (no such label) but for quantiles.
    fn quantile(self) -> &'static str {
        match self {
            Metric::Quantile(i) => QUANTILES[i],
            _ => "",
        }
    }

    fn family(self) -> Family {
        match self {
            Metric::Hits => Family::Counts,
            _ => Family::Stats,
        }
    }

    /// The labels of its series for `name` at `precision`, sorted by name.
    pub(crate) fn labels(self, name: &str, precision: u32) -> Vec<Label> {
        let label = |name: &str, value: &str| Label {
            name: name.into(),
            value: value.into(),
        };
        let mut labels = vec![
            label("__name__", self.name()),
            label("name", name),
            label("precision", &precision.to_string()),
        ];
        if let Metric::Quantile(_) = self {
            labels.push(label("quantile", self.quantile()));
        }
        labels
    }
}

/// Most memory one compiled regex may take, and its search cache: a name
/// matcher is a prefix and a few alternatives, far below; a pattern such as
/// `.{10000}` (8 MB compiled) is refused as too big.
const REGEX_BYTES: usize = 256 * 1024;

/// One label matcher, its regular expression compiled, fully anchored.
struct Matcher {
    label: String,
    kind: MatchType,
    value: String,
    /// A regex matcher's pattern in the `regex` crate's words ([`super::re2`]).
    pattern: String,
    re: Option<Regex>,
}

impl Matcher {
    fn new(m: &LabelMatcher) -> Result<Matcher, Failure> {
        let kind = MatchType::try_from(m.r#type)
            .map_err(|_| Failure::BadRequest(format!("unknown matcher type {}", m.r#type)))?;
        let pattern = super::re2::translate(&m.value);
        let re = match kind {
            MatchType::Re | MatchType::Nre => Some(
                RegexBuilder::new(&format!("^(?:{pattern})$"))
                    .size_limit(REGEX_BYTES)
                    .dfa_size_limit(REGEX_BYTES)
                    .build()
                    .map_err(|e| {
                        let e = e.to_string().replace('\n', " ");
                        Failure::BadRequest(format!("bad regex for {}: {e}", m.name))
                    })?,
            ),
            _ => None,
        };
        Ok(Matcher {
            label: m.name.clone(),
            kind,
            value: m.value.clone(),
            pattern,
            re,
        })
    }

    fn matches(&self, value: &str) -> bool {
        match (self.kind, &self.re) {
            (MatchType::Eq, _) => value == self.value,
            (MatchType::Neq, _) => value != self.value,
            (MatchType::Re, Some(re)) => re.is_match(value),
            (_, re) => !re.as_ref().is_some_and(|re| re.is_match(value)),
        }
    }

    /// What every name this matcher admits starts with, and whether that
    /// is the whole name.
    fn name_prefix(&self) -> (String, bool) {
        match self.kind {
            MatchType::Eq => (self.value.clone(), true),
            // Read where RE2's escapes are the crate's (`\Q(\E` is `\(`).
            MatchType::Re => literal_prefix(&self.pattern),
            _ => (String::new(), false),
        }
    }
}

/// The literal text a regular expression's every match starts with, and
/// whether the expression is that text alone; empty where it cannot be
/// told simply (a top-level `|`, a group or a class first).
fn literal_prefix(re: &str) -> (String, bool) {
    let (mut depth, mut class, mut escaped) = (0i32, false, false);
    for c in re.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '[' if !class => class = true,
            ']' if class => class = false,
            '(' if !class => depth += 1,
            ')' if !class => depth -= 1,
            '|' if !class && depth == 0 => return (String::new(), false),
            _ => {}
        }
    }
    let mut prefix = String::new();
    for c in re.chars() {
        if "\\.^$*+?()[]{}|".contains(c) {
            // `a*`, `a?` and `a{0,2}` may leave out the letter before.
            if matches!(c, '*' | '?' | '{') {
                prefix.pop();
            }
            return (prefix, false);
        }
        prefix.push(c);
    }
    (prefix, true)
}

/// The precisions of one family of hashes that a query admits, and the
/// series it admits at each.
type Allowed = Vec<(u32, Vec<Metric>)>;

/// One hash to read and the series it serves.
pub(crate) struct Selected {
    pub family: Family,
    pub precision: u32,
    pub name: String,
    pub metrics: Vec<Metric>,
}

/// A query's matchers, checked: what they leave of the families and
/// precisions, and what is left to check of each name.
pub(crate) struct Selector {
    names: Vec<Matcher>,
    /// Per family of hashes, the precisions and the series at each that
    /// the matchers on labels other than `name` admit.
    allowed: Vec<(Family, Allowed)>,
    prefix: String,
    exact: bool,
}

impl Selector {
    /// Leaves out the precisions `keeps` says no bucket of the query's
    /// range is kept at (a range older than the precision keeps, say
    /// `offset 365d`): their hashes are neither listed nor read.
    pub(super) fn keep_precisions(&mut self, keeps: impl Fn(u32) -> bool) {
        for (_, allowed) in &mut self.allowed {
            allowed.retain(|(p, _)| keeps(*p));
        }
    }

    /// The selector of `matchers` over `precisions`, with quantiles at
    /// `quantile_precisions` only. A matcher on a label no series has
    /// sees the empty value, as Prometheus' own.
    pub(super) fn new(
        matchers: &[LabelMatcher],
        precisions: &[u32],
        quantile_precisions: &[u32],
    ) -> Result<Selector, Failure> {
        let matchers = matchers
            .iter()
            .map(Matcher::new)
            .collect::<Result<Vec<_>, _>>()?;
        let (names, others): (Vec<Matcher>, Vec<Matcher>) =
            matchers.into_iter().partition(|m| m.label == "name");
        let admits = |metric: Metric, precision: &str| {
            others.iter().all(|m| {
                m.matches(match m.label.as_str() {
                    "__name__" => metric.name(),
                    "precision" => precision,
                    "quantile" => metric.quantile(),
                    _ => "",
                })
            })
        };
        let allowed = Family::ALL
            .into_iter()
            .map(|family| {
                let at = precisions
                    .iter()
                    .map(|&p| {
                        let metrics = Metric::ALL
                            .into_iter()
                            .filter(|m| m.family() == family)
                            .filter(|m| {
                                !matches!(m, Metric::Quantile(_))
                                    || quantile_precisions.contains(&p)
                            })
                            .filter(|&m| admits(m, &p.to_string()))
                            .collect::<Vec<_>>();
                        (p, metrics)
                    })
                    .filter(|(_, metrics)| !metrics.is_empty())
                    .collect();
                (family, at)
            })
            .collect();
        // Any name matcher's prefix holds for every name selected; the
        // longest narrows the listing most.
        let (prefix, exact) = names
            .iter()
            .map(Matcher::name_prefix)
            .max_by_key(|(p, exact)| (*exact, p.len()))
            .unwrap_or_default();
        Ok(Selector {
            names,
            allowed,
            prefix,
            exact,
        })
    }
}

/// What is left to one read of the series it may select and the names it
/// may list.
pub(super) struct Budget {
    series: usize,
    listed: usize,
}

impl Budget {
    /// A whole read's: [`MAX_SERIES`] series, [`MAX_LISTED`] names.
    pub(super) fn new() -> Budget {
        Budget {
            series: MAX_SERIES,
            listed: MAX_LISTED,
        }
    }
}

/// Refuses `selectors` (a read's queries) at once when they surely list
/// more names than `budget` allows: one `ZLEXCOUNT` per family and
/// precision each, instead of a second of Redis' time listing a million
/// names before the limit trips ([`select`] checks as it lists, for the
/// names that several precisions list apart).
pub(super) async fn refuse_long_listings(
    conn: &mut Conn,
    keys: &Keys,
    selectors: &[&Selector],
    budget: &Budget,
) -> Result<(), Failure> {
    let mut least = 0u64;
    for selector in selectors.iter().filter(|s| !s.exact) {
        for (family, allowed) in &selector.allowed {
            let precisions: Vec<u32> = allowed.iter().map(|(p, _)| *p).collect();
            least +=
                query::listed_at_least(conn, keys, *family, &precisions, &selector.prefix).await?;
        }
    }
    match least > budget.listed as u64 {
        true => Err(too_many_listed()),
        false => Ok(()),
    }
}

fn too_many_listed() -> Failure {
    Failure::BadRequest(format!(
        "more than {MAX_LISTED} names listed (the limit of one read): \
         narrow the name matchers' literal prefix (name=~\"page:.*\" lists only page:)"
    ))
}

/// The hashes `selector` reads, listed from `known:` and `stats:known:`
/// page by page ([`PAGE`] names a round trip, one name when a matcher
/// gives it whole) in the range of its prefix. Each name listed and each
/// series selected is taken from `budget`; a read that would exceed it is
/// refused as soon as it does, before any hash is read.
pub(super) async fn select(
    conn: &mut Conn,
    keys: &Keys,
    selector: &Selector,
    budget: &mut Budget,
) -> Result<Vec<Selected>, Failure> {
    let mut out = Vec::new();
    let limit = if selector.exact { 1 } else { PAGE };
    for (family, allowed) in &selector.allowed {
        let precisions: Vec<u32> = allowed.iter().map(|(p, _)| *p).collect();
        let mut after: Option<String> = None;
        while !precisions.is_empty() {
            let page = query::list(
                conn,
                keys,
                *family,
                &precisions,
                &selector.prefix,
                after.as_deref(),
                limit,
            )
            .await?;
            budget.listed = budget
                .listed
                .checked_sub(page.counters.len())
                .ok_or_else(too_many_listed)?;
            for listed in page.counters {
                if !selector.names.iter().all(|m| m.matches(&listed.name)) {
                    continue;
                }
                for (precision, metrics) in allowed {
                    if !listed.precisions.contains(precision) {
                        continue;
                    }
                    budget.series = budget.series.checked_sub(metrics.len()).ok_or_else(|| {
                        Failure::BadRequest(format!(
                            "more than {MAX_SERIES} series match (the limit of one read): \
                             narrow the name or precision matchers"
                        ))
                    })?;
                    out.push(Selected {
                        family: *family,
                        precision: *precision,
                        name: listed.name.clone(),
                        metrics: metrics.clone(),
                    });
                }
            }
            match page.next {
                Some(next) if !selector.exact => after = Some(next),
                _ => break,
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(label: &str, kind: MatchType, value: &str) -> LabelMatcher {
        LabelMatcher {
            r#type: kind as i32,
            name: label.into(),
            value: value.into(),
        }
    }

    #[test]
    fn quantile_labels_are_the_reported_quantiles() {
        let want = crate::model::stats::REPORTED_QUANTILES.map(|q| q.to_string());
        assert_eq!(QUANTILES.map(String::from), want);
    }

    /// The deployment checks' list of served series (which the counters'
    /// dashboard and alerts may use) is exactly what is served, and the
    /// page that documents them names each.
    #[test]
    fn the_deploy_checks_and_the_docs_know_every_served_series() {
        let script = include_str!("../../../../scripts/check-deploy");
        let start = script.find("SERVED=\"").expect("a SERVED list") + "SERVED=\"".len();
        let end = start + script[start..].find('"').unwrap();
        let listed: std::collections::BTreeSet<&str> =
            script[start..end].split_whitespace().collect();
        let served: std::collections::BTreeSet<&str> =
            Metric::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(
            listed, served,
            "scripts/check-deploy SERVED vs the served series"
        );
    }

    #[test]
    fn a_regex_reads_only_its_literal_prefix() {
        for (re, want) in [
            ("page:.*", ("page:", false)),
            ("page:home", ("page:home", true)),
            ("page:ab*", ("page:a", false)),
            ("page:a+", ("page:a", false)),
            ("page:(a|b)", ("page:", false)),
            ("page:a|b", ("", false)),
            ("(?i)page", ("", false)),
            ("[p]age|x", ("", false)),
            ("p\\.x", ("p", false)),
        ] {
            let (p, exact) = literal_prefix(re);
            assert_eq!((p.as_str(), exact), want, "{re}");
        }
    }

    #[test]
    fn matchers_are_anchored_and_other_labels_are_empty() {
        let m = Matcher::new(&matcher("name", MatchType::Re, "page")).unwrap();
        assert!(m.matches("page") && !m.matches("page:home") && !m.matches("a page"));
        let m = Matcher::new(&matcher("name", MatchType::Nre, "page:.*")).unwrap();
        assert!(m.matches("home") && !m.matches("page:x"));
        // A quoted `(` hides no top-level `|` from the prefix: no prefix.
        let m = Matcher::new(&matcher("name", MatchType::Re, "page:\\Q(\\E|other")).unwrap();
        assert_eq!(m.name_prefix(), (String::new(), false));
        assert!(m.matches("page:(") && m.matches("other"));
        let m = Matcher::new(&matcher("name", MatchType::Re, "\\Qpage:a.b\\E")).unwrap();
        assert_eq!(m.name_prefix(), ("page:a".to_string(), false));
        assert!(Matcher::new(&matcher("name", MatchType::Re, "(")).is_err());

        let all = |ms: &[LabelMatcher]| Selector::new(ms, &[1, 60], &[60]).unwrap().allowed;
        let hits = all(&[matcher("__name__", MatchType::Eq, "hitcount_hits")]);
        assert_eq!(
            hits[0].1,
            vec![(1, vec![Metric::Hits]), (60, vec![Metric::Hits])]
        );
        assert!(hits[1].1.is_empty(), "no statistics series");
        let q = all(&[
            matcher("__name__", MatchType::Re, "hitcount_value"),
            matcher("precision", MatchType::Neq, "5"),
        ]);
        let three = vec![
            Metric::Quantile(0),
            Metric::Quantile(1),
            Metric::Quantile(2),
        ];
        assert_eq!(q[1].1, vec![(60, three)], "quantiles only with a histogram");
        assert!(all(&[matcher("job", MatchType::Eq, "x")])
            .iter()
            .all(|(_, at)| at.is_empty()));
        let unknown = all(&[matcher("job", MatchType::Eq, "")]);
        assert_eq!(unknown[1].1.len(), 2, "an absent label is empty");
    }
}
