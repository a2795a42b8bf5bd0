//! The command line as users meet it: the real binary, its subcommands, its
//! environment variables (a contract), against a throwaway redis-server.

use crate::common;

use std::process::{Command, Output};

use common::*;

fn hitcount(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hitcount"));
    cmd.args(args).env_remove("REDIS_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("running hitcount")
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn every_subcommand_and_environment_variable_is_documented_in_help() {
    let top = stdout(&hitcount(&["--help"], &[]));
    for sub in [
        "worker", "hit", "load", "get", "top", "demo", "clean", "status", "bench", "serve",
        "ingest", "import",
    ] {
        assert!(top.contains(sub), "--help lists {sub}");
    }
    let worker = stdout(&hitcount(&["worker", "--help"], &[]));
    for var in [
        "REDIS_URL",
        "HITCOUNT_STREAM",
        "HITCOUNT_GROUP",
        "HITCOUNT_CONSUMER",
        "HITCOUNT_PREFIX",
        "HITCOUNT_PRECISIONS",
        "HITCOUNT_SAMPLES",
        "HITCOUNT_DEAD_STREAM",
        "HITCOUNT_LISTEN",
        "HITCOUNT_CLAIM_IDLE_MS",
        "HITCOUNT_MAX_DELIVERIES",
        "HITCOUNT_SHUTDOWN_TIMEOUT",
        "HITCOUNT_LOG_FORMAT",
        "HITCOUNT_REDIS_CA",
    ] {
        assert!(
            worker.contains(&format!("env: {var}")),
            "worker --help documents {var}"
        );
    }
    assert!(worker.contains("[default: redis://127.0.0.1:6379]"));
    assert!(worker.contains("[default: 0.0.0.0:9184]"));
    assert!(worker.contains("[default: hits:dead]"));
}

/// A `HITCOUNT_*` variable no setting reads (a typo: `HITCOUNT_PRECISION`
/// for `HITCOUNT_PRECISIONS`) is named in a warning, not silently ignored;
/// the settings' own variables are not.
#[test]
fn a_variable_no_setting_reads_is_warned_about() {
    let srv = server();
    let url = srv.url();
    let env = [
        ("REDIS_URL", url.as_str()),
        ("HITCOUNT_PRECISION", "60"),
        ("HITCOUNT_PREFIX", "app1:"),
        ("HITCOUNT_INGEST_ORIGINS", "https://example.com"),
    ];
    let o = hitcount(&["status"], &env);
    stdout(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("HITCOUNT_PRECISION is set, but no hitcount setting has that name"),
        "{err}"
    );
    let warned = err.lines().filter(|l| l.contains("is set, but no")).count();
    assert_eq!(warned, 1, "only the typo: {err}");
}

#[test]
fn hit_then_get_through_the_environment() {
    let srv = server();
    let url = srv.url();
    let env = [("REDIS_URL", url.as_str()), ("HITCOUNT_PREFIX", "app1:")];
    let now = unix_now();
    stdout(&hitcount(
        &["hit", "page:home", "--count", "3", "--at", &now.to_string()],
        &env,
    ));
    stdout(&hitcount(&["hit", "page:home"], &env));
    // Count them with a worker, in-process, with the same prefix.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut s = settings(&url, "w");
        s.layout.prefix = "app1:".into();
        let workers = Workers::start(vec![s.clone()]);
        let mut c = conn(&url).await;
        wait_drained(&mut c, &keys(&s)).await;
        workers.stop().await;
        let known: Vec<String> = redis::cmd("ZRANGE")
            .arg("app1:known:")
            .arg(0)
            .arg(-1)
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(known.contains(&"60:page:home".to_string()), "{known:?}");
    });
    let json = stdout(&hitcount(
        &["get", "page:home", "--precision", "86400", "--json"],
        &env,
    ));
    let samples: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    let total: i64 = samples.iter().map(|s| s["count"].as_i64().unwrap()).sum();
    assert_eq!(total, 4);
    assert_eq!(samples[0]["time"].as_i64().unwrap() % 86400, 0);
    let table = stdout(&hitcount(
        &["get", "page:home", "--precision", "86400"],
        &env,
    ));
    assert!(
        table.contains("time (UTC)") && table.contains(" 4"),
        "{table}"
    );
}

#[test]
fn bad_input_fails_with_a_clear_message() {
    let o = hitcount(&["hit", "x", "--count", "0"], &[]);
    assert!(!o.status.success());
    let o = hitcount(
        &["worker", "--precisions", "0"],
        &[("HITCOUNT_LISTEN", "127.0.0.1:0")],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("HITCOUNT_PRECISIONS"));
    // A quantile precision that is not a precision: the same exit, one line.
    let q = hitcount(
        &["worker"],
        &[
            ("HITCOUNT_LISTEN", "127.0.0.1:0"),
            ("HITCOUNT_QUANTILE_PRECISIONS", "60,7"),
        ],
    );
    assert_eq!(q.status.code(), o.status.code());
    let err = String::from_utf8_lossy(&q.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("HITCOUNT_QUANTILE_PRECISIONS: 7 is not one of the precisions"),
        "{err}"
    );
    let port = hitcount_lab::kit::free_port();
    let o = hitcount(
        &["get", "x", "--precision", "60"],
        &[("REDIS_URL", &format!("redis://:topsecret@127.0.0.1:{port}"))],
    );
    assert!(!o.status.success());
    assert!(!String::from_utf8_lossy(&o.stderr).contains("topsecret"));
    // A password with an unencoded `#` makes a URL that does not parse:
    // what to encode is said, the password is not.
    let o = hitcount(
        &["get", "x", "--precision", "60"],
        &[(
            "REDIS_URL",
            &format!("redis://u:top#secret@127.0.0.1:{port}"),
        )],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("percent-encoded (%3F %23") && !err.contains("secret"),
        "{err}"
    );
}

#[test]
fn load_and_demo_run_end_to_end() {
    let srv = server();
    let url = srv.url();
    let out = stdout(&hitcount(
        &["load", "--hits", "2000", "--names", "50", "--zipf", "1.0"],
        &[("REDIS_URL", &url)],
    ));
    assert!(out.contains("sent 2000 hits over 50 names"), "{out}");
    let demo = stdout(&hitcount(
        &["demo", "--hits", "3000", "--names", "100"],
        &[],
    ));
    assert!(
        demo.contains("total at the 1-day precision: 3000 of 3000 sent: exact"),
        "{demo}"
    );
    // Page views over HTTP through ingest, the same request twice: once.
    assert!(
        demo.contains("web:/demo: 100 page views sent twice over HTTP")
            && demo.contains("100 counted: exact"),
        "{demo}"
    );
    // Every demo hit carries a response time: page:0's statistics and the
    // slowest names by mean, three of them, slowest first.
    assert!(demo.contains("page:0 this hour: "), "{demo}");
    assert!(demo.contains(" response times, mean "), "{demo}");
    let slowest: Vec<f64> = demo
        .lines()
        .skip_while(|l| !l.starts_with("slowest names by mean this hour:"))
        .skip(1)
        .take_while(|l| l.starts_with("  page:"))
        .map(|l| {
            let after = l.split(" mean ").nth(1).expect("a mean");
            after.split_whitespace().next().unwrap().parse().unwrap()
        })
        .collect();
    assert_eq!(slowest.len(), 3, "{demo}");
    assert!(slowest.windows(2).all(|w| w[0] >= w[1]), "{demo}");
    assert!(slowest.iter().all(|m| (1.0..=1000.0).contains(m)), "{demo}");
}

/// Reads a page of the documentation, by its path from the crate's root.
fn doc_page(path: &str) -> String {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// The variables named in the first column of docs/configuration.md's
/// tables (`| `VAR` | …`).
fn configuration_rows(page: &str) -> Vec<(String, String)> {
    page.lines()
        .filter_map(|l| {
            let var = l.strip_prefix("| `")?.split('`').next()?;
            let is_var = !var.is_empty() && var.chars().all(|c| c.is_ascii_uppercase() || c == '_');
            is_var.then(|| (var.to_string(), l.to_string()))
        })
        .collect()
}

/// The configuration page documents every environment variable the binary
/// reads, each in one row, and names no variable the binary does not read;
/// the operations page quotes the ACL rules file as it is.
#[test]
fn the_docs_match_the_binary() {
    let config = doc_page("docs/configuration.md");
    let operations = doc_page("docs/operations.md");
    let mut vars = std::collections::BTreeSet::new();
    for sub in [
        "worker", "hit", "load", "get", "top", "demo", "clean", "status", "bench", "serve",
        "ingest", "import",
    ] {
        let help = stdout(&hitcount(&[sub, "--help"], &[]));
        for part in help.split("[env: ").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                .collect();
            vars.insert(name);
        }
    }
    assert!(vars.contains("REDIS_URL") && vars.len() > 20, "{vars:?}");
    let rows = configuration_rows(&config);
    for var in &vars {
        assert_eq!(
            rows.iter().filter(|(v, _)| v == var).count(),
            1,
            "docs/configuration.md has one row for {var}"
        );
    }
    for (var, _) in &rows {
        assert!(
            vars.contains(var),
            "docs/configuration.md documents {var}, which the binary does not read"
        );
    }
    let acl = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/redis/hitcount.acl"
    ))
    .unwrap();
    let rules = acl
        .lines()
        .rfind(|l| !l.starts_with('#') && !l.trim().is_empty())
        .unwrap();
    assert!(
        operations.contains(rules),
        "docs/operations.md quotes deploy/redis/hitcount.acl"
    );
}

/// Every default docs/configuration.md states is the binary's own: for each
/// setting with an environment variable and a default, the table's row for
/// that variable quotes exactly that default.
#[test]
fn the_configuration_page_states_the_binarys_defaults() {
    use clap::CommandFactory;
    let config = doc_page("docs/configuration.md");
    let rows = configuration_rows(&config);
    let cli = hitcount::edge::cli::Cli::command();
    let mut checked = 0;
    for cmd in std::iter::once(&cli).chain(cli.get_subcommands()) {
        for arg in cmd.get_arguments() {
            let Some(env) = arg.get_env().and_then(|e| e.to_str()) else {
                continue;
            };
            let default: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            let default = default.join(",");
            if default.is_empty() {
                continue;
            }
            let row = rows
                .iter()
                .find(|(v, _)| v == env)
                .map(|(_, row)| row)
                .unwrap_or_else(|| panic!("no docs/configuration.md row for {env}"));
            let cell = row.split('|').nth(3).unwrap_or("");
            assert!(
                cell.contains(&format!("`{default}`")),
                "docs/configuration.md row for {env} says {cell:?}, the binary's default is {default}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} defaults checked");
}

/// The first range `LO..=HI` a text states, e.g. `1..=5000` in
/// `ms, 1..=5000 (…)`.
fn stated_range(text: &str) -> Option<(i128, i128)> {
    text.match_indices("..=").find_map(|(at, _)| {
        let lo: String = text[..at]
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let hi: String = text[at + 3..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        Some((lo.parse().ok()?, hi.parse().ok()?))
    })
}

/// Every range docs/configuration.md states is the binary's own: for each
/// setting whose row or help states a range `LO..=HI`, the row and the
/// help state the same one, and the setting's own parser (its environment
/// variable set aside) takes `LO` and `HI` and refuses `LO - 1` and
/// `HI + 1`.
#[test]
fn the_configuration_page_states_the_binarys_ranges() {
    use clap::CommandFactory;
    let config = doc_page("docs/configuration.md");
    let rows = configuration_rows(&config);
    let cli = hitcount::edge::cli::Cli::command();
    let mut checked = std::collections::BTreeSet::new();
    for cmd in std::iter::once(&cli).chain(cli.get_subcommands()) {
        for arg in cmd.get_arguments() {
            let (Some(env), Some(long)) = (arg.get_env().and_then(|e| e.to_str()), arg.get_long())
            else {
                continue;
            };
            let Some((_, row)) = rows.iter().find(|(v, _)| v == env) else {
                continue; // the_docs_match_the_binary reports it
            };
            let cell = row.split('|').nth(4).unwrap_or("");
            let help = arg
                .get_long_help()
                .or(arg.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            let page = stated_range(cell);
            assert_eq!(
                page,
                stated_range(&help),
                "{env}: docs/configuration.md's range {cell:?}, --{long}'s help {help:?}"
            );
            let Some((lo, hi)) = page else { continue };
            let parses = |value: i128| {
                clap::Command::new("t")
                    .arg(arg.clone().env(None).required(false))
                    .try_get_matches_from(["t".to_string(), format!("--{long}={value}")])
                    .is_ok()
            };
            assert!(parses(lo) && parses(hi), "--{long} takes {lo} and {hi}");
            assert!(
                !parses(lo - 1) && !parses(hi + 1),
                "--{long} refuses {} and {}",
                lo - 1,
                hi + 1
            );
            checked.insert(env);
        }
    }
    assert!(checked.len() >= 20, "only {checked:?} ranges checked");
}

/// An operator meets at most 24 settings: `worker -h` (the short help)
/// lists the worker's settings but its tuning knobs, which `--help` lists
/// under "Advanced (tuning)"; the configuration page has the same split,
/// the knobs in its "Advanced (tuning)" section and only there.
#[test]
fn an_operator_sees_at_most_24_settings() {
    use clap::CommandFactory;
    let short = stdout(&hitcount(&["worker", "-h"], &[]));
    let long = stdout(&hitcount(&["worker", "--help"], &[]));
    let shown = short.matches("[env: ").count();
    assert!(shown <= 24, "worker -h shows {shown} settings:\n{short}");
    assert!(!short.contains("Advanced (tuning)"), "{short}");
    let config = doc_page("docs/configuration.md");
    let advanced_at = config
        .find("\n## Advanced (tuning)")
        .expect("docs/configuration.md has an Advanced (tuning) section");
    let advanced_end = config[advanced_at + 1..]
        .find("\n## ")
        .map_or(config.len(), |n| advanced_at + 1 + n);
    let (main, advanced) = (
        format!("{}{}", &config[..advanced_at], &config[advanced_end..]),
        &config[advanced_at..advanced_end],
    );
    let cli = hitcount::edge::cli::Cli::command();
    let worker = cli.find_subcommand("worker").unwrap();
    let mut knobs = 0;
    for arg in worker.get_arguments() {
        let Some(env) = arg.get_env().and_then(|e| e.to_str()) else {
            continue;
        };
        let flag = format!("--{} <", arg.get_long().unwrap());
        let row = format!("| `{env}` |");
        let knob = arg.get_help_heading() == Some("Advanced (tuning)");
        assert_eq!(knob, arg.is_hide_short_help_set(), "{env}");
        assert_eq!(!knob, short.contains(&flag), "{env} in worker -h");
        assert!(long.contains(&flag), "{env} in worker --help");
        assert_eq!(
            knob,
            advanced.contains(&row),
            "{env} in the Advanced section"
        );
        assert_eq!(!knob, main.contains(&row), "{env} in the main tables");
        knobs += usize::from(knob);
    }
    assert!(
        long.matches("[env: ").count() == shown + knobs,
        "worker --help lists every setting:\n{long}"
    );
}

/// A failed run's stderr, which must be one line.
fn one_line_failure(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{err}");
    let lines = err.lines().filter(|l| !l.trim().is_empty()).count();
    assert_eq!(lines, 1, "one line:\n{err}");
    err
}

/// A command line, its environment and the words its refusal must hold.
type Refusal<'a> = (&'a [&'a str], Vec<(&'a str, &'a str)>, &'a str);

/// Settings a deployment gets wrong by a stray character are refused at
/// start, in one line naming the setting, before any Redis is reached (the
/// URL names a port nothing listens on): a group `hitcount\n` would be a
/// second group counting every entry again, a stream `hits\n` one no
/// worker reads; a consumer name from POD_NAME is checked as
/// --consumer's and named as POD_NAME; a URL query field the client would
/// ignore (`?db=3` is database 0) is named; `top` without --precision
/// blames its default, not a flag that was not given.
#[test]
fn settings_with_stray_characters_are_refused_naming_them() {
    let nowhere = format!("redis://127.0.0.1:{}", hitcount_lab::kit::free_port());
    let listen = ("HITCOUNT_LISTEN", "127.0.0.1:0");
    let url = ("REDIS_URL", nowhere.as_str());
    let cases: Vec<Refusal> = vec![
        (
            &["worker"],
            vec![listen, url, ("HITCOUNT_GROUP", "hitcount\n")],
            "invalid --group / HITCOUNT_GROUP: \"hitcount\\n\" must not have",
        ),
        (
            &["hit", "x"],
            vec![url, ("HITCOUNT_STREAM", "hits\n")],
            "invalid --stream / HITCOUNT_STREAM: ",
        ),
        (
            &["status"],
            vec![url, ("HITCOUNT_STREAM", " ")],
            "invalid --stream / HITCOUNT_STREAM: ",
        ),
        (
            &["status"],
            vec![url, ("HITCOUNT_PREFIX", "a\nb")],
            "invalid --prefix / HITCOUNT_PREFIX: ",
        ),
        (
            &["worker"],
            vec![listen, url, ("HITCOUNT_DEAD_STREAM", "hits:dead ")],
            "invalid --dead-stream / HITCOUNT_DEAD_STREAM: ",
        ),
        (
            &["worker"],
            vec![listen, url, ("HITCOUNT_LEADER_KEY", "hitcount:leader\n")],
            "invalid --leader-key / HITCOUNT_LEADER_KEY: ",
        ),
        (
            &["worker"],
            vec![listen, url, ("POD_NAME", "pod\nx")],
            "invalid POD_NAME (the consumer name, as --consumer / HITCOUNT_CONSUMER is not set)",
        ),
        (
            &["status", "--redis-url", "redis://127.0.0.1:6379/?db=3"],
            vec![],
            "invalid --redis-url / REDIS_URL: the query field `db` is ignored",
        ),
        (
            &["status"],
            vec![("REDIS_URL", "redis+unix:///tmp/r.sock?user=a&password=b")],
            "?pass=PASSWORD",
        ),
        (
            &["top"],
            vec![url, ("HITCOUNT_PRECISIONS", "5,60")],
            "--precision is required here: its default, 3600 s, is not a configured precision",
        ),
    ];
    for (args, env, expected) in cases {
        // A worker that takes the setting retries the missing Redis for
        // ever: it must have stopped well within 30 s.
        let mut cmd = common::bin::hitcount();
        cmd.args(args)
            .env_remove("POD_NAME")
            .envs(env.iter().copied());
        let mut child = common::bin::Child::spawn("refused", cmd);
        let status = child.wait(std::time::Duration::from_secs(30));
        let err = child.stderr();
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(1),
            "{args:?} {env:?}:\n{err}"
        );
        let lines = err.lines().filter(|l| !l.trim().is_empty()).count();
        assert_eq!(lines, 1, "one line:\n{err}");
        assert!(err.contains(expected), "{args:?} {env:?}:\n{err}");
        assert!(!err.contains("connect"), "refused before Redis: {err}");
    }
}

/// `--log-format` wins over HITCOUNT_LOG_FORMAT, before the subcommand or
/// after it, as every flag wins over its variable; the variable alone is
/// still checked.
#[test]
fn the_log_format_flag_wins_over_its_variable() {
    let nowhere = format!("redis://127.0.0.1:{}", hitcount_lab::kit::free_port());
    let env = [
        ("HITCOUNT_LOG_FORMAT", "xml"),
        ("REDIS_URL", nowhere.as_str()),
    ];
    for args in [
        &["--log-format", "json", "status"][..],
        &["status", "--log-format", "json"],
        &["status", "--log-format=json"],
    ] {
        let o = hitcount(args, &env);
        let err = one_line_failure(&o);
        assert!(!err.contains("HITCOUNT_LOG_FORMAT"), "{args:?}: {err}");
        // The status ran, and failed to reach Redis, in JSON.
        assert!(
            err.starts_with('{') && err.contains("cannot connect"),
            "{args:?}: {err}"
        );
    }
    let o = hitcount(&["status"], &env);
    let err = one_line_failure(&o);
    assert!(err.contains("invalid HITCOUNT_LOG_FORMAT='xml'"), "{err}");
}

/// Shards with entries that no worker has read yet have no group: `status`
/// says so, as for one stream, instead of a group of lags nobody measured
/// ("lag unknown, backlog age 0.0 s", `"behind": false`).
#[test]
fn status_of_shards_no_worker_read_shows_no_group() {
    let srv = common::server();
    let url = srv.url();
    let env = [("REDIS_URL", url.as_str()), ("HITCOUNT_SHARDS", "4")];
    let o = hitcount(&["load", "--hits", "200"], &env);
    assert!(o.status.success(), "{o:?}");
    let o = hitcount(&["status"], &env);
    let out = stdout(&o);
    assert!(out.contains("no consumer group"), "{out}");
    assert!(!out.contains("backlog age"), "{out}");
    let o = hitcount(&["status", "--json"], &env);
    let json: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(json["groups"], serde_json::json!([]), "{json}");
    assert_eq!(json["length"], 200, "{json}");
}
