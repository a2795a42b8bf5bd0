//! How `ingest` judges a body's hits: each read as the worker would read
//! it ([`crate::model::event::json`]), a page's held to the browser
//! prefix, the refusals listed for the answer. A large body is judged on
//! the blocking pool: on the runtime's threads (about a second for 80,000
//! hits in a debug build, more on a busy machine) it would hold up other
//! requests' Redis replies past their timeout, and a 503 after part of a
//! body was appended makes its client send that part again.

use hyper::body::Bytes;
use serde::Serialize;

use crate::model::event::json::{self, BadJson, JsonHit, Layout};

/// Refused hits an answer lists at most: a body of a million refused
/// elements would otherwise be answered with twenty times its size, held
/// in memory until the client reads it.
pub(super) const LISTED_REFUSALS: usize = 1000;
/// The reason of a page's hit whose name is outside the browser prefix.
const OUTSIDE_PREFIX: &str = "outside_prefix";
/// Bodies up to this many bytes are judged on the runtime's thread (well
/// under a millisecond), larger ones on the blocking pool.
const INLINE: usize = 64 << 10;

/// The answer to `POST /api/v1/hits` (when Redis took the hits).
#[derive(Serialize, Default)]
pub(super) struct Answer {
    accepted: usize,
    /// The first [`LISTED_REFUSALS`] refused hits.
    refused: Vec<Refused>,
    /// How many more were refused, when there were more (absent otherwise).
    #[serde(skip_serializing_if = "is_zero")]
    refused_unlisted: usize,
    /// The indexes of the first [`LISTED_REFUSALS`] accepted hits whose id
    /// was seen with another hit: not counted (absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    conflicts: Vec<usize>,
}

impl Answer {
    /// Lists the accepted hits at `positions` (in [`Judged::accepted`]) as
    /// conflicts, by their index in the body.
    pub(super) fn conflicts(&mut self, positions: &[usize], at: &[usize]) {
        let listed = positions.iter().filter_map(|&p| at.get(p).copied());
        self.conflicts = listed.take(LISTED_REFUSALS).collect();
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[derive(Serialize)]
struct Refused {
    index: usize,
    reason: &'static str,
}

/// A body's hits, judged.
#[derive(Default)]
pub(super) struct Judged {
    pub(super) accepted: Vec<JsonHit>,
    /// The index in the body of each accepted hit.
    pub(super) at: Vec<usize>,
    /// What the client is told once they are appended.
    pub(super) answer: Answer,
    /// Each reason with how many hits it refused (a dozen reasons at most).
    pub(super) reasons: Vec<(&'static str, u64)>,
}

/// Reads and judges `body`'s hits; a page's (`prefix` given) must have
/// names starting with the prefix. `held` (the judging's turn) is given
/// back once the judging has ended: it is held by the judging itself, so a
/// request dropped meanwhile gives up no turn it still uses.
pub(super) async fn judge<T: Send + 'static>(
    body: Bytes,
    layout: Layout,
    prefix: Option<String>,
    held: T,
) -> (T, Result<Judged, BadJson>) {
    if body.len() <= INLINE {
        return (held, judge_now(&body, layout, prefix.as_deref()));
    }
    tokio::task::spawn_blocking(move || (held, judge_now(&body, layout, prefix.as_deref())))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

fn judge_now(body: &[u8], layout: Layout, prefix: Option<&str>) -> Result<Judged, BadJson> {
    let now = crate::model::clock::unix_ms();
    let mut judged = Judged::default();
    let mut index = 0;
    json::read_body(body, layout, now, |hit| {
        let reason = match hit {
            Ok(hit) if prefix.is_some_and(|p| !hit.name.starts_with(p)) => OUTSIDE_PREFIX,
            Ok(hit) => {
                judged.accepted.push(hit);
                judged.at.push(index);
                index += 1;
                return;
            }
            Err(refusal) => refusal.reason(),
        };
        let answer = &mut judged.answer;
        if answer.refused.len() < LISTED_REFUSALS {
            answer.refused.push(Refused { index, reason });
        } else {
            answer.refused_unlisted += 1;
        }
        match judged.reasons.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, n)) => *n += 1,
            None => judged.reasons.push((reason, 1)),
        }
        index += 1;
    })?;
    judged.answer.accepted = judged.accepted.len();
    Ok(judged)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    /// On a runtime of one thread, a task ticking every millisecond still
    /// ticks while a large body is judged: the thread was not held (judged
    /// on it, the body would take that thread for hundreds of ticks).
    #[tokio::test(flavor = "current_thread")]
    async fn a_large_body_is_judged_off_the_runtimes_thread() {
        let hits = 200_000;
        let body = format!("[{}]", vec![r#"{"name":"a"}"#; hits].join(","));
        assert!(body.len() > INLINE);
        let ticks = Arc::new(AtomicUsize::new(0));
        let counted = ticks.clone();
        let ticker = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(1)).await;
                counted.fetch_add(1, Ordering::Relaxed);
            }
        });
        tokio::task::yield_now().await;
        let (_, judged) = judge(Bytes::from(body), Layout::Json, None, ()).await;
        let judged = judged.unwrap();
        let ticked = ticks.load(Ordering::Relaxed);
        ticker.abort();
        assert_eq!(judged.accepted.len(), hits);
        assert!(ticked > 0, "the runtime's thread was held while judging");
    }

    /// A request dropped while its large body is judged (its client gone)
    /// gives its turn back only when the judging ends: the judging still
    /// holds the memory the turn stands for.
    #[tokio::test(flavor = "current_thread")]
    async fn a_dropped_request_holds_its_turn_until_its_judging_ends() {
        let turns = Arc::new(tokio::sync::Semaphore::new(1));
        let turn = turns.clone().acquire_owned().await.unwrap();
        let body = format!("[{}]", vec![r#"{"name":"a"}"#; 200_000].join(","));
        let judging = judge(Bytes::from(body), Layout::Json, None, turn);
        let dropped = tokio::time::timeout(Duration::from_millis(1), judging).await;
        assert!(dropped.is_err(), "judged within a millisecond");
        assert_eq!(
            turns.available_permits(),
            0,
            "the turn was given back early"
        );
        let given_back = tokio::time::timeout(Duration::from_secs(60), turns.acquire()).await;
        assert!(given_back.is_ok(), "the turn was never given back");
    }

    /// A page's hits outside the browser prefix are refused by name, and
    /// the answer lists each refusal by its index.
    #[tokio::test(flavor = "current_thread")]
    async fn a_pages_hits_keep_to_the_prefix() {
        let body = r#"[{"name":"web:a"},{"name":"b"},{"name":"web:c"}]"#;
        let (_, judged) = judge(Bytes::from(body), Layout::Json, Some("web:".into()), ()).await;
        let judged = judged.unwrap();
        let names: Vec<&str> = judged.accepted.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["web:a", "web:c"]);
        let answer = serde_json::to_value(&judged.answer).unwrap();
        assert_eq!(
            answer,
            serde_json::json!({"accepted": 2, "refused": [{"index": 1, "reason": "outside_prefix"}]})
        );
        assert_eq!(judged.reasons, [(OUTSIDE_PREFIX, 1)]);
    }
}
