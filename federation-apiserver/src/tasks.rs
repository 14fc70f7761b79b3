//! What a subsystem needs to run, as data: named [`Task`]s that its builder returns
//! instead of spawning them. Only [`crate::app::App`] spawns them, each under a span with
//! its name, and it reports which one failed.

use std::future::Future;
use std::pin::Pin;

/// How a task ended: `()` for those that run until the process ends, a `Result` for
/// those that can fail.
pub trait Outcome {
    fn into_result(self) -> anyhow::Result<()>;
}

impl Outcome for () {
    fn into_result(self) -> anyhow::Result<()> {
        Ok(())
    }
}

impl<E: Into<anyhow::Error>> Outcome for Result<(), E> {
    fn into_result(self) -> anyhow::Result<()> {
        self.map_err(Into::into)
    }
}

/// One long-running piece of the process, not started yet.
pub struct Task {
    /// Its span's name, and the name an error reports.
    pub name: &'static str,
    pub future: Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>,
}

/// Tasks in the order they are to be started.
#[derive(Default)]
pub struct Tasks(Vec<Task>);

impl Tasks {
    /// Adds `future` as the task `name`.
    pub fn add<F>(&mut self, name: &'static str, future: F)
    where
        F: Future + Send + 'static,
        F::Output: Outcome,
    {
        self.0.push(Task {
            name,
            future: Box::pin(async move { future.await.into_result() }),
        });
    }

    /// Adds `future` as the task `name` and returns what completes when it has (or
    /// when it was dropped unfinished): for a start that waits for a bootstrap.
    pub fn add_awaited<F>(&mut self, name: &'static str, future: F) -> Finished
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (done, finished) = tokio::sync::oneshot::channel();
        self.add(name, async move {
            future.await;
            let _ = done.send(());
        });
        Finished(finished)
    }

    pub fn append(&mut self, mut other: Tasks) {
        self.0.append(&mut other.0);
    }
}

impl IntoIterator for Tasks {
    type Item = Task;
    type IntoIter = std::vec::IntoIter<Task>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// Completes when a task added with [`Tasks::add_awaited`] has.
pub struct Finished(tokio::sync::oneshot::Receiver<()>);

impl Finished {
    /// Whether the task finished within `limit`.
    pub async fn within(self, limit: std::time::Duration) -> bool {
        matches!(tokio::time::timeout(limit, self.0).await, Ok(Ok(())))
    }
}
