//! Shutdown, injected as a value every long-running task holds.
//!
//! `main` turns SIGTERM and Ctrl-C into one [`Trigger::trigger`]; every task
//! holds a [`Shutdown`] and checks it between units of work, or waits on it
//! in a `select!` beside a sleep. Tests trigger it directly.

use tokio::sync::watch;

/// The sending half: triggers shutdown for every [`Shutdown`] cloned from it.
#[derive(Debug, Clone)]
pub struct Trigger {
    tx: std::sync::Arc<watch::Sender<bool>>,
}

/// The receiving half, cheap to clone.
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

/// A new trigger and the shutdown it controls.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (
        Trigger {
            tx: std::sync::Arc::new(tx),
        },
        Shutdown { rx },
    )
}

impl Trigger {
    /// Asks every holder of the matching [`Shutdown`] to stop.
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    /// A new [`Shutdown`] tied to this trigger.
    pub fn subscribe(&self) -> Shutdown {
        Shutdown {
            rx: self.tx.subscribe(),
        }
    }
}

impl Shutdown {
    /// A shutdown that never triggers (for one-shot commands).
    pub fn never() -> Shutdown {
        let (trigger, shutdown) = channel();
        std::mem::forget(trigger);
        shutdown
    }

    /// Whether shutdown was asked for.
    pub fn is_triggered(&self) -> bool {
        *self.rx.borrow()
    }

    /// Resolves once shutdown is asked for (at once if it already was).
    pub async fn wait(&mut self) {
        // An error means every trigger is gone: nobody can ask any more, so
        // this waits forever, as a never-triggered shutdown should.
        if self.rx.wait_for(|stop| *stop).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Resolves on the first SIGTERM or Ctrl-C (SIGINT).
pub async fn signals() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn trigger_reaches_every_clone() {
        let (trigger, shutdown) = channel();
        let mut a = shutdown.clone();
        let mut b = trigger.subscribe();
        assert!(!a.is_triggered());
        trigger.trigger();
        a.wait().await;
        b.wait().await;
        assert!(shutdown.is_triggered());
    }
}
