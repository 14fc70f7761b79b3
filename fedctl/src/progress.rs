//! Progress for people: a spinner with the elapsed time while a step runs, then one line
//! saying how it ended. On a terminal the spinner redraws one line; anywhere else only
//! the final lines are printed (and, when asked, one line when a step starts), so logs
//! and tests read clean text.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Which stream progress goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn is_terminal(self) -> bool {
        match self {
            Stream::Stdout => std::io::stdout().is_terminal(),
            Stream::Stderr => std::io::stderr().is_terminal(),
        }
    }

    fn write(self, text: &str) {
        // Progress output is best effort: a closed stream must not fail the command.
        match self {
            Stream::Stdout => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(text.as_bytes());
                let _ = out.flush();
            }
            Stream::Stderr => {
                let mut out = std::io::stderr().lock();
                let _ = out.write_all(text.as_bytes());
                let _ = out.flush();
            }
        }
    }
}

const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// One running step; finish it with [`Step::done`], [`Step::warn`] or [`Step::fail`].
pub struct Step {
    stream: Stream,
    tty: bool,
    label: String,
    started: Instant,
    stop: Arc<AtomicBool>,
    spinner: Option<std::thread::JoinHandle<()>>,
}

impl Step {
    /// Starts a step. `announce`: also print a line now when not on a terminal.
    pub fn start(stream: Stream, label: impl Into<String>, announce: bool) -> Self {
        let label = label.into();
        let tty = stream.is_terminal();
        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let spinner = if tty {
            let stop = stop.clone();
            let label = label.clone();
            Some(std::thread::spawn(move || {
                let mut frame = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let elapsed = started.elapsed().as_secs();
                    stream.write(&format!(
                        "\r\x1b[2K  {} {label} ({elapsed}s)",
                        FRAMES[frame % FRAMES.len()]
                    ));
                    frame += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
            }))
        } else {
            if announce {
                stream.write(&format!("  … {label}\n"));
            }
            None
        };
        Self {
            stream,
            tty,
            label,
            started,
            stop,
            spinner,
        }
    }

    /// How long the step has run.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    fn end(mut self, mark: &str, detail: &str) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(spinner) = self.spinner.take() {
            let _ = spinner.join();
        }
        let clear = if self.tty { "\r\x1b[2K" } else { "" };
        let detail = if detail.is_empty() {
            String::new()
        } else {
            format!("  {detail}")
        };
        let label = if detail.is_empty() {
            self.label.trim_end()
        } else {
            self.label.as_str()
        };
        self.stream
            .write(&format!("{clear}  {mark} {label}{detail}\n"));
    }

    /// Ends with ✓.
    pub fn done(self, detail: &str) {
        self.end("✓", detail);
    }

    /// Ends with `!`: done, with something the reader should know.
    pub fn warn(self, detail: &str) {
        self.end("!", detail);
    }

    /// Ends with ✗.
    pub fn fail(self, detail: &str) {
        self.end("✗", detail);
    }
}

impl Drop for Step {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(spinner) = self.spinner.take() {
            let _ = spinner.join();
            self.stream.write("\r\x1b[2K");
        }
    }
}
