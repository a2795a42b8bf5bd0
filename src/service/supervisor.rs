//! Background tasks that must live as long as the worker (the sampler, the
//! leader lease and its duties): one that ends before shutdown, by a panic
//! or otherwise, is a fatal error that stops the whole process with its
//! cause, never a process left half alive.

use std::time::Duration;

/// Background tasks that must live as long as the worker: one that ends
/// early (a panic) is a fatal error, not a silent loss.
#[derive(Default)]
pub(crate) struct Supervised {
    tasks: Vec<(&'static str, tokio::task::JoinHandle<()>)>,
}

impl Supervised {
    /// Starts `task`, known by `name` in error messages.
    pub(crate) fn spawn(
        &mut self,
        name: &'static str,
        task: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        self.tasks.push((name, tokio::spawn(task)));
    }

    /// Until shutdown, checks that no task ended; one that did stops the
    /// process through `shutdown` with its name and cause.
    pub(crate) async fn watch(mut self, shutdown: crate::model::shutdown::Shutdown) -> Supervised {
        let mut stop = shutdown.clone();
        while !shutdown.is_triggered() {
            let ended = self.tasks.iter().position(|(_, t)| t.is_finished());
            // A task ending because shutdown began meanwhile is no failure.
            if let (Some(index), false) = (ended, shutdown.is_triggered()) {
                let (name, handle) = self.tasks.remove(index);
                let cause = match handle.await {
                    Err(e) if e.is_panic() => {
                        format!("the {name} task panicked: {}", panic_text(e))
                    }
                    Err(e) => format!("the {name} task failed: {e}"),
                    Ok(()) => format!("the {name} task stopped unexpectedly"),
                };
                shutdown.fail(cause);
                return self;
            }
            crate::store::connect::sleep(Duration::from_millis(200), &mut stop).await;
        }
        self
    }

    /// Waits for every task to end (after shutdown).
    pub(crate) async fn join(self) {
        for (_, task) in self.tasks {
            let _ = task.await;
        }
    }
}

/// A panic's message, when it has one.
fn panic_text(e: tokio::task::JoinError) -> String {
    let payload = e.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_that_panics_stops_the_process_with_its_cause() {
        let (trigger, shutdown) = crate::model::shutdown::channel();
        let mut tasks = Supervised::default();
        let mut stop = shutdown.clone();
        tasks.spawn("healthy", async move { stop.wait().await });
        tasks.spawn("sampler", async { panic!("boom") });
        let tasks = tokio::time::timeout(Duration::from_secs(10), tasks.watch(shutdown.clone()))
            .await
            .expect("noticed within seconds");
        assert!(shutdown.is_triggered(), "everything is asked to stop");
        let cause = trigger.fatal().expect("a fatal cause");
        assert!(
            cause.contains("sampler") && cause.contains("boom"),
            "{cause}"
        );
        tokio::time::timeout(Duration::from_secs(10), tasks.join())
            .await
            .expect("the others stop");
    }

    #[tokio::test]
    async fn tasks_ending_at_shutdown_are_no_failure() {
        let (trigger, shutdown) = crate::model::shutdown::channel();
        let mut tasks = Supervised::default();
        let mut stop = shutdown.clone();
        tasks.spawn("sampler", async move { stop.wait().await });
        let watch = tokio::spawn(tasks.watch(shutdown.clone()));
        trigger.trigger();
        watch.await.unwrap().join().await;
        assert_eq!(trigger.fatal(), None);
    }
}
