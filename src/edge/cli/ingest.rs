//! `hitcount ingest`: the way in for HTTP clients and browsers
//! ([`crate::edge::ingest`]) until SIGTERM/Ctrl-C, a process of its own,
//! scaled like the workers, with StatsD beside it when
//! `HITCOUNT_STATSD_LISTEN` is set ([`statsd`]). It only appends to the
//! stream (its shards): the workers count.

use std::time::Duration;

use anyhow::Context as _;

use super::Common;
use tokio::net::{TcpListener, UdpSocket};

use crate::edge::ingest::{self, statsd, Ingest, Settings};
use crate::edge::server::Limits;
use crate::model::config::ranged;
use crate::service::ingest::Appender;
use crate::service::producer::{Producer, ProducerOptions};

/// Default address of ingest's HTTP endpoint.
pub(crate) const DEFAULT_INGEST_LISTEN: &str = "0.0.0.0:9186";

/// On shutdown, how long requests being answered may take: long enough
/// for their hits to reach Redis.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// HTTP address of POST /api/v1/hits, /hitcount.js, /metrics, /healthz
    /// and /readyz.
    #[arg(long, env = "HITCOUNT_INGEST_LISTEN", default_value = DEFAULT_INGEST_LISTEN)]
    listen: String,
    /// Bearer tokens, comma-separated: when set, a request without an
    /// Origin header must carry one (`Authorization: Bearer TOKEN`), else
    /// 401. Pages are governed by --origins instead.
    #[arg(
        long,
        env = "HITCOUNT_INGEST_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    tokens: Vec<String>,
    /// Origins whose pages may send hits (CORS), comma-separated, as
    /// browsers send them (e.g. `https://example.com`; the scheme and host
    /// are lower-cased, a default port (:443, :80) and a trailing / left
    /// out); a page of any other origin is refused (403). None by default.
    #[arg(long, env = "HITCOUNT_INGEST_ORIGINS", value_delimiter = ',')]
    origins: Vec<String>,
    /// What the name of a hit from a page (a request with an Origin
    /// header) must start with; others are refused as outside_prefix.
    #[arg(long, env = "HITCOUNT_INGEST_BROWSER_PREFIX", default_value = "web:")]
    browser_prefix: String,
    /// Largest request body, in bytes, 1..=67108864; a larger one is
    /// refused (413).
    #[arg(long, env = "HITCOUNT_INGEST_MAX_BODY", default_value_t = 1_048_576,
          value_parser = ranged::<u64>(1..=67_108_864))]
    max_body: u64,
    /// Requests a second from one client (an IPv4 address, or an IPv6 /64),
    /// 0..=4294967295 (with a burst of as many); more are refused (429,
    /// with Retry-After). 0: no limit.
    #[arg(long, env = "HITCOUNT_INGEST_RATE", default_value_t = 1000,
          value_parser = ranged::<u32>(0..=4_294_967_295))]
    rate: u32,
    /// How long a hit's id is remembered, in seconds, 1..=31536000: the
    /// same id sent again within it is counted once.
    #[arg(long, env = "HITCOUNT_INGEST_ID_HORIZON", default_value_t = 86_400,
          value_parser = ranged::<u64>(1..=31_536_000))]
    id_horizon: u64,
    /// Address of StatsD over UDP and TCP (e.g. 0.0.0.0:8125); empty: off.
    #[arg(long, env = "HITCOUNT_STATSD_LISTEN", default_value = "")]
    statsd_listen: String,
    /// StatsD hits held while Redis is slow or away, 1..=100000000; more
    /// are dropped (hitcount_statsd_dropped_total{where="queue"}).
    #[arg(long, env = "HITCOUNT_STATSD_BUFFER", default_value_t = 1_000_000,
          value_parser = ranged::<u64>(1..=100_000_000))]
    statsd_buffer: u64,
    #[command(flatten)]
    pub(super) common: super::Pick<Common, super::Sends>,
}

/// The tokens as given, each trimmed: an empty value is none (as for any
/// setting), but a list with an empty item, or a token with a space inside,
/// is refused, not read as fewer tokens: `"$A,$B"` with both unset must not
/// turn authentication off.
fn checked_tokens(tokens: Vec<String>) -> anyhow::Result<Vec<String>> {
    if tokens.is_empty() || tokens == [""] {
        return Ok(Vec::new());
    }
    let tokens: Vec<String> = tokens.iter().map(|t| t.trim().to_string()).collect();
    if tokens
        .iter()
        .any(|t| t.is_empty() || t.contains(char::is_whitespace))
    {
        anyhow::bail!(
            "HITCOUNT_INGEST_TOKENS (--tokens) has an empty token or one with a space: give \
             tokens separated by commas alone, or leave it unset to take requests without one"
        );
    }
    Ok(tokens)
}

/// The origins as given, empty items left out, each spelled as browsers
/// send it: `scheme://host[:port]`, the scheme and host in lower case, a
/// default port (`:443` for https, `:80` for http) and a trailing `/` left
/// out, since `https://A.example:443` would never match a page, silently;
/// nor would one without its scheme, which is refused.
fn checked_origins(origins: Vec<String>) -> anyhow::Result<Vec<String>> {
    let origins = origins.into_iter().map(|o| o.trim().to_string());
    let origins: Vec<String> = origins.filter(|o| !o.is_empty()).collect();
    let mut spelled = Vec::with_capacity(origins.len());
    for o in &origins {
        let parts = o
            .split_once("://")
            .map(|(scheme, rest)| (scheme, rest.trim_end_matches('/')));
        let Some((scheme, host)) = parts.filter(|(_, h)| !h.is_empty() && !h.contains('/')) else {
            anyhow::bail!(
                "HITCOUNT_INGEST_ORIGINS (--origins) has {o:?}, which is no origin: give each \
                 as browsers send it, a scheme, a host and an optional port \
                 (https://www.example.com)"
            );
        };
        let (scheme, host) = (scheme.to_ascii_lowercase(), host.to_ascii_lowercase());
        let default_port = match scheme.as_str() {
            "https" => Some(":443"),
            "http" => Some(":80"),
            _ => None,
        };
        let host = default_port
            .and_then(|p| host.strip_suffix(p))
            .unwrap_or(&host);
        spelled.push(format!("{scheme}://{host}"));
    }
    Ok(spelled)
}

pub(crate) async fn run(mut args: Args) -> anyhow::Result<()> {
    // A refused permission names this command's own Redis user.
    super::reach::acl_for("ingest");
    args.common.validate()?;
    let client = crate::store::connect::client(&args.common.redis)?;
    let listener = super::listen(&args.listen, "--listen / HITCOUNT_INGEST_LISTEN").await?;
    let statsd = match args.statsd_listen.as_str() {
        "" => None,
        // StatsD's UDP socket and TCP listener on one address.
        addr => {
            let what =
                || format!("cannot listen on {addr} (--statsd-listen / HITCOUNT_STATSD_LISTEN)");
            let udp = UdpSocket::bind(addr).await.with_context(what)?;
            // An address with port 0 takes the UDP port for TCP too.
            let tcp = TcpListener::bind(udp.local_addr()?).await;
            Some((udp, tcp.with_context(what)?))
        }
    };
    let appender = Appender::new(client, &args.common.stream, args.id_horizon);
    let settings = Settings {
        tokens: checked_tokens(args.tokens)?,
        origins: checked_origins(args.origins)?,
        browser_prefix: args.browser_prefix,
        max_body: usize::try_from(args.max_body).unwrap_or(usize::MAX),
        rate: args.rate,
    };
    let ingest = Ingest::new(settings, appender);
    // As serve. Hits sent with another shard count than the workers'
    // would go to streams nobody reads: refused, as `hit` does.
    if super::serving_anyway(ingest.check().await)? {
        super::reach::check_recorded_shards(&args.common).await?;
    }
    tracing::info!(address = %listener.local_addr()?, "taking hits on /api/v1/hits");
    let limits = Limits {
        shutdown_grace: SHUTDOWN_GRACE,
        // The HTTP layer's own 400s and 431s are answers of ingest's too.
        answered_unread: Some(|code| crate::model::metrics::metrics().ingest_answer(code)),
        ..Limits::default()
    };
    let (stop, stopped) = crate::model::shutdown::channel();
    let statsd = match statsd {
        Some((udp, tcp)) => {
            let options = ProducerOptions {
                max_buffered: args.statsd_buffer,
                ..ProducerOptions::default()
            };
            let producer = Producer::start(&args.common.redis, &args.common.stream, options)?;
            tracing::info!(address = %udp.local_addr()?, "taking StatsD lines over UDP and TCP");
            let served = statsd::serve(udp, tcp, producer.clone(), stopped.clone());
            Some((tokio::spawn(served), producer))
        }
        None => None,
    };
    let mut http_stopped = stopped.clone();
    let http_stop = async move { http_stopped.wait().await };
    let served = ingest::serve(listener, ingest, http_stop, limits);
    let signal = async {
        crate::model::shutdown::signals().await;
        stop.trigger();
    };
    let (served, ()) = tokio::join!(served, signal);
    if let Some((task, producer)) = statsd {
        let _ = task.await;
        // What StatsD handed the producer reaches Redis, within the grace;
        // what does not is lost: said, and counted.
        let lost = producer.shutdown(SHUTDOWN_GRACE).await;
        if lost > 0 {
            let m = crate::model::metrics::metrics();
            m.statsd_dropped
                .with_label_values(&["stopped"])
                .inc_by(lost);
            tracing::error!(
                lost,
                "StatsD hits not in Redis when ingest stopped (Redis unavailable): lost, \
                 but for those of a batch whose reply was lost"
            );
        }
    }
    tracing::info!("ingest stopped");
    Ok(served?)
}

#[cfg(test)]
mod tests {
    use super::{checked_origins, checked_tokens};

    #[test]
    fn an_origin_without_its_scheme_is_refused() {
        let list = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ok = [
            "https://example.com",
            "http://127.0.0.1:8080",
            "https://a.example/",
        ];
        let spelled = [
            "https://example.com",
            "http://127.0.0.1:8080",
            "https://a.example",
        ];
        assert_eq!(checked_origins(list(&ok)).unwrap(), list(&spelled));
        // As browsers spell them: scheme and host in lower case, no
        // default port.
        let given = [
            "HTTPS://A.Example:443",
            "http://b.example:80/",
            "https://c.example:80",
            "http://[::1]:8080",
            "https://[::1]:443",
        ];
        let spelled = [
            "https://a.example",
            "http://b.example",
            "https://c.example:80",
            "http://[::1]:8080",
            "https://[::1]",
        ];
        assert_eq!(checked_origins(list(&given)).unwrap(), list(&spelled));
        assert_eq!(checked_origins(list(&["", " "])).unwrap(), list(&[]));
        for bad in [
            "www.example.com",
            "https://",
            "https://a.example/page",
            "example.com:443",
        ] {
            let e = checked_origins(list(&[bad])).unwrap_err().to_string();
            assert!(
                e.contains(&format!("{bad:?}")) && e.contains("HITCOUNT_INGEST_ORIGINS"),
                "{e}"
            );
        }
    }

    #[test]
    fn tokens_with_a_hole_are_refused_not_dropped() {
        let list = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(checked_tokens(list(&[])).unwrap(), list(&[]));
        assert_eq!(checked_tokens(list(&[""])).unwrap(), list(&[]));
        assert_eq!(
            checked_tokens(list(&["a", " b "])).unwrap(),
            list(&["a", "b"])
        );
        for bad in [&["", ""][..], &[" "], &["a", "", "b"], &["a b"]] {
            assert!(checked_tokens(list(bad)).is_err(), "{bad:?}");
        }
    }
}
