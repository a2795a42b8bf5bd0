//! Shutdown, injected as a value every long-running task holds.
//!
//! `main` turns SIGTERM and Ctrl-C into one [`Trigger::trigger`]; every task
//! holds a [`Shutdown`] and checks it between units of work, or waits on it
//! in a `select!` beside a sleep. Tests trigger it directly.
//!
//! A task that meets an error no retry can fix calls [`Shutdown::fail`]: the
//! first such cause is kept, everything shuts down as on SIGTERM, and the
//! process then exits with status 1 and that one line ([`Trigger::fatal`]).

use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// The sending half: triggers shutdown for every [`Shutdown`] cloned from it.
#[derive(Debug, Clone)]
pub struct Trigger {
    tx: Arc<watch::Sender<bool>>,
    fatal: Fatal,
}

/// The receiving half, cheap to clone.
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
    tx: Arc<watch::Sender<bool>>,
    fatal: Fatal,
    /// The shutdown this one is a part of (see [`Shutdown::child`]).
    parent: Option<Box<Shutdown>>,
}

/// The first fatal error of the process, if any.
type Fatal = Arc<Mutex<Option<String>>>;

/// A new trigger and the shutdown it controls.
pub fn channel() -> (Trigger, Shutdown) {
    pair(Fatal::default(), None)
}

/// A trigger and the shutdown it controls, reporting fatal errors to
/// `fatal`, a part of `parent` if there is one.
fn pair(fatal: Fatal, parent: Option<Box<Shutdown>>) -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    let tx = Arc::new(tx);
    let trigger = Trigger {
        tx: tx.clone(),
        fatal: fatal.clone(),
    };
    let shutdown = Shutdown {
        rx,
        tx,
        fatal,
        parent,
    };
    (trigger, shutdown)
}

impl Trigger {
    /// Asks every holder of the matching [`Shutdown`] to stop.
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    /// The first fatal error reported by any task, if one was: why workers
    /// run in-process (`service::shards::run`) stopped on their own, in
    /// one line (it is logged too).
    pub fn fatal(&self) -> Option<String> {
        self.fatal.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Shutdown {
    /// A shutdown that never triggers (for one-shot commands).
    pub(crate) fn never() -> Shutdown {
        // Its trigger is dropped; the channel's sender lives on in the
        // shutdown itself, so waiting on it waits for ever.
        channel().1
    }

    /// Reports an error no retry can fix and shuts everything down; the
    /// first cause reported is the one the process exits with.
    pub(crate) fn fail(&self, cause: String) {
        let mut fatal = self.fatal.lock().unwrap_or_else(|p| p.into_inner());
        if fatal.is_none() {
            tracing::error!(cause = %cause, "stopping: this needs an operator");
            *fatal = Some(cause);
        }
        drop(fatal);
        self.tx.send_replace(true);
        if let Some(parent) = &self.parent {
            parent.tx.send_replace(true);
        }
    }

    /// A shutdown for a part of what this one stops (one shard's worker):
    /// asked for by its own trigger or with this one; a fatal failure of
    /// the part stops the whole (they share the cause).
    pub(crate) fn child(&self) -> (Trigger, Shutdown) {
        pair(self.fatal.clone(), Some(Box::new(self.clone())))
    }

    /// Whether a fatal error was reported.
    pub(crate) fn failed(&self) -> bool {
        self.fatal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Whether shutdown was asked for.
    pub(crate) fn is_triggered(&self) -> bool {
        *self.rx.borrow() || self.parent.as_ref().is_some_and(|p| p.is_triggered())
    }

    /// Resolves once shutdown is asked for (at once if it already was).
    pub async fn wait(&mut self) {
        let own = async {
            // An error means every trigger is gone: nobody can ask any more,
            // so this waits forever, as a never-triggered shutdown should.
            if self.rx.wait_for(|stop| *stop).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        match self.parent.as_deref_mut() {
            Some(parent) => {
                tokio::select! {
                    _ = own => {}
                    _ = Box::pin(parent.wait()) => {}
                }
            }
            None => own.await,
        }
    }
}

/// Resolves on the first SIGTERM or Ctrl-C (SIGINT).
pub async fn signals() {
    #[cfg(unix)]
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        tokio::select! {
            _ = term.recv() => return,
            _ = tokio::signal::ctrl_c() => return,
        }
    }
    // Without a SIGTERM handler (or off Unix), Ctrl-C still works.
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new [`Shutdown`] tied to `trigger`.
    fn subscribe(trigger: &Trigger) -> Shutdown {
        Shutdown {
            rx: trigger.tx.subscribe(),
            tx: trigger.tx.clone(),
            fatal: trigger.fatal.clone(),
            parent: None,
        }
    }

    #[tokio::test]
    async fn trigger_reaches_every_clone() {
        let (trigger, shutdown) = channel();
        let mut a = shutdown.clone();
        let mut b = subscribe(&trigger);
        assert!(!a.is_triggered());
        trigger.trigger();
        a.wait().await;
        b.wait().await;
        assert!(shutdown.is_triggered());
        assert_eq!(trigger.fatal(), None);
    }

    #[tokio::test]
    async fn a_child_stops_alone_or_with_its_parent_and_fails_both() {
        let (trigger, whole) = channel();
        let (part_trigger, mut part) = whole.child();
        part_trigger.trigger();
        part.wait().await;
        assert!(!whole.is_triggered(), "a part stops alone");
        let (_t, mut part) = whole.child();
        trigger.trigger();
        part.wait().await;
        assert!(part.is_triggered());
        let (trigger, mut whole) = channel();
        let (_t, part) = whole.child();
        part.fail("shard".into());
        whole.wait().await;
        assert_eq!(trigger.fatal().as_deref(), Some("shard"));
    }

    #[tokio::test]
    async fn the_first_fatal_cause_is_kept_and_stops_everyone() {
        let (trigger, shutdown) = channel();
        let mut other = subscribe(&trigger);
        shutdown.fail("first".into());
        shutdown.fail("second".into());
        other.wait().await;
        assert!(other.failed());
        assert_eq!(trigger.fatal().as_deref(), Some("first"));
    }
}
