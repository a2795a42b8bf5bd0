//! How the subcommands take their settings from the groups of
//! [`crate::model::config`]: each command defines only the settings it uses
//! ([`Pick`]), so its `--help` shows those alone and an unrelated
//! `HITCOUNT_*` variable of the deployment is never read; and a refused
//! value of a setting is reported in one line naming its flag and its
//! environment variable, the variable first when the value came from it
//! ([`refused_setting`]); a flag given wins over its variable, also for a
//! global one ([`global_flags_win`]); a command's `--precision` is one of
//! the deployment's ([`configured_precision`]).

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{ArgGroup, Args, Command, FromArgMatches};

/// Which settings of a group a command uses and shows in its help, by
/// field name (clap's id), beyond the group's [`Group::ALWAYS`].
pub(crate) trait Uses {
    /// Shown in the command's help.
    const SHOWN: &'static [&'static str];
}

/// What every command that picks from a settings group takes of it.
pub(crate) trait Group {
    /// Shown in every such command's help.
    const ALWAYS: &'static [&'static str] = &[];
    /// Read (flag and environment variable) by every such command, but left
    /// out of the help unless it shows them: the deployment's settings a
    /// command only checks its work against, such as the workers' key
    /// prefix and group for `hit`.
    const ACCEPTED: &'static [&'static str] = &[];
}

impl Group for crate::model::config::LeaderArgs {}

/// The settings group `T` as one command takes it: the fields `S` names
/// (and `T`'s [`Group::ALWAYS`]) are shown, `T`'s other
/// [`Group::ACCEPTED`] ones are read unshown; the rest keep `T`'s
/// defaults, and their flags and environment variables are not read at all.
pub(crate) struct Pick<T, S> {
    value: T,
    uses: PhantomData<fn() -> S>,
}

impl<T: std::fmt::Debug, S> std::fmt::Debug for Pick<T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.value.fmt(f)
    }
}

impl<T, S> Deref for Pick<T, S> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T, S> DerefMut for Pick<T, S> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T: Args + Default + Group, S: Uses> Args for Pick<T, S> {
    fn augment_args(mut cmd: Command) -> Command {
        let all = T::augment_args(Command::new("all"));
        for arg in all.get_arguments() {
            let id = arg.get_id().as_str();
            // Listed in the order the command adds them, after its own.
            let arg = arg.clone().display_order(None);
            if S::SHOWN.contains(&id) || T::ALWAYS.contains(&id) {
                cmd = cmd.arg(arg);
            } else if T::ACCEPTED.contains(&id) {
                cmd = cmd.arg(arg.hide(true));
            } else {
                // `T`'s derived update asks the matches whether each of its
                // fields was given; an id the command does not know must
                // still be a valid question (answered "no"), which an empty
                // group of that name makes it.
                cmd = cmd.group(ArgGroup::new(arg.get_id().clone()));
            }
        }
        debug_assert!(
            S::SHOWN
                .iter()
                .chain(T::ALWAYS)
                .chain(T::ACCEPTED)
                .all(|id| all.get_arguments().any(|a| a.get_id() == id)),
            "a used setting that is not a field of the group"
        );
        cmd
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl<T: FromArgMatches + Default, S> FromArgMatches for Pick<T, S> {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut value = T::default();
        value.update_from_arg_matches(matches)?;
        Ok(Pick {
            value,
            uses: PhantomData,
        })
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        self.value.update_from_arg_matches(matches)
    }
}

/// Every argument that takes a value reads `-1` as a value (refused by its
/// range, in words), not as an unknown flag.
pub(crate) fn negative_numbers_are_values(cmd: Command) -> Command {
    cmd.mut_subcommands(|sub| {
        sub.mut_args(|arg| {
            if arg.get_action().takes_values() {
                arg.allow_negative_numbers(true)
            } else {
                arg
            }
        })
    })
}

/// A value refused for a setting of the deployment (an argument with an
/// environment variable), as one line in the words of every other
/// configuration error, naming the flag and the variable, or, when the
/// value came from the environment (its flag is not on the command line
/// `args`), the variable first: `invalid HITCOUNT_SHARDS=-1 (from the
/// environment; the flag is --shards): -1 is not in 1..=256`. Any other
/// error comes back as it was, for clap to report.
pub(crate) fn refused_setting(
    err: clap::Error,
    cmd: &Command,
    args: &[String],
) -> Result<String, clap::Error> {
    if !matches!(
        err.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue
    ) {
        return Err(err);
    }
    let (Some(ContextValue::String(arg)), Some(ContextValue::String(value))) = (
        err.get(ContextKind::InvalidArg),
        err.get(ContextKind::InvalidValue),
    ) else {
        return Err(err);
    };
    let flag = arg
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    let value = value.clone();
    let Some(long) = flag.strip_prefix("--") else {
        return Err(err);
    };
    let sub = args
        .iter()
        .skip(1)
        .find_map(|a| cmd.find_subcommand(a))
        .unwrap_or(cmd);
    let Some(env) = [sub, cmd]
        .iter()
        .flat_map(|c| c.get_arguments())
        .find(|a| a.get_long() == Some(long))
        .and_then(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
    else {
        return Err(err);
    };
    let reason = match (
        std::error::Error::source(&err),
        err.get(ContextKind::ValidValue),
    ) {
        (Some(source), _) => source.to_string(),
        (None, Some(ContextValue::Strings(valid))) if !valid.is_empty() => {
            format!("must be one of {}", valid.join(", "))
        }
        _ if value.is_empty() => "an empty value is not accepted: leave it unset".to_string(),
        _ => "not accepted".to_string(),
    };
    let given = flag_given(args, &flag);
    Ok(if given || std::env::var_os(&env).is_none() {
        format!("invalid {flag} / {env}: {reason}")
    } else {
        format!("invalid {env}='{value}' (from the environment; the flag is {flag}): {reason}")
    })
}

/// Whether the command line `args` gives the flag `flag` (`--log-format`),
/// as `--log-format json` or `--log-format=json`.
pub(crate) fn flag_given(args: &[String], flag: &str) -> bool {
    args.iter()
        .any(|a| a == flag || a.strip_prefix(flag).is_some_and(|v| v.starts_with('=')))
}

/// `cmd` with the variable of every global setting whose flag is on the
/// command line `args` left unread, so that the flag wins over it as for
/// every other setting: clap reads a global argument's variable on each
/// level of the command line where the flag is not (before the subcommand
/// or after it), and would refuse a bad `HITCOUNT_LOG_FORMAT` there though
/// `--log-format` is given.
pub(crate) fn global_flags_win(cmd: Command, args: &[String]) -> Command {
    let given: Vec<clap::Id> = cmd
        .get_arguments()
        .filter(|a| a.is_global_set() && a.get_env().is_some())
        .filter(|a| {
            a.get_long()
                .is_some_and(|l| flag_given(args, &format!("--{l}")))
        })
        .map(|a| a.get_id().clone())
        .collect();
    given
        .into_iter()
        .fold(cmd, |cmd, id| cmd.mut_arg(id, |arg| arg.env(None)))
}

/// The precision a command reads: `given` (`--precision`), else its
/// `default` (`top`'s), if it is one of the configured `precisions`; else an
/// error naming them, and saying whether the flag or its default is not
/// configured (`get --precision`, `top --precision`).
pub(crate) fn configured_precision(
    precisions: &[u32],
    given: Option<u32>,
    default: Option<u32>,
) -> anyhow::Result<u32> {
    let list: Vec<String> = precisions.iter().map(u32::to_string).collect();
    let list = list.join(", ");
    match (given, default) {
        (Some(p), _) | (None, Some(p)) if precisions.contains(&p) => Ok(p),
        (Some(p), _) => anyhow::bail!(
            "invalid --precision: {p} s is not a configured precision; the configured ones \
             are {list} (--precisions / HITCOUNT_PRECISIONS)"
        ),
        (None, Some(d)) => anyhow::bail!(
            "--precision is required here: its default, {d} s, is not a configured \
             precision; the configured ones are {list} (--precisions / HITCOUNT_PRECISIONS)"
        ),
        (None, None) => anyhow::bail!("--precision is required: one of {list}"),
    }
}

/// The `HITCOUNT_*` variables of the environment that no setting of `cmd`
/// or of its subcommands reads (a typo, or a setting of another version),
/// sorted: each is warned about, never silently ignored.
pub(crate) fn unknown_variables(cmd: &Command) -> Vec<String> {
    let vars = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
    fn known(cmd: &Command, names: &mut std::collections::HashSet<String>) {
        let envs = cmd.get_arguments().filter_map(|a| a.get_env());
        names.extend(envs.map(|e| e.to_string_lossy().into_owned()));
        for sub in cmd.get_subcommands() {
            known(sub, names);
        }
    }
    let mut names = std::collections::HashSet::new();
    known(cmd, &mut names);
    // Read when the binary is built (build.rs), not when it runs.
    names.insert("HITCOUNT_GIT_REVISION".into());
    let mut unknown: Vec<String> = vars
        .filter(|v| v.starts_with("HITCOUNT_") && !names.contains(v))
        .collect();
    unknown.sort();
    unknown
}

/// Warns about each of [`unknown_variables`]' names.
pub(crate) fn warn_unknown(names: &[String]) {
    for name in names {
        tracing::warn!(
            "{name} is set, but no hitcount setting has that name (a typo, or a setting of \
             another version?): it is ignored (docs/configuration.md lists them all)"
        );
    }
}
