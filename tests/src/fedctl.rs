//! Running the real `fedctl` binary in tests: exit code, stdout and stderr of one run,
//! golden files for its tables (ages normalized), and the commands `fedctl dev up`
//! prints.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{binary, repo_path};

/// One finished `fedctl` run.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// `fedctl` with a kubeconfig (or none: then `$KUBECONFIG` is what the test sets).
pub struct Fedctl {
    pub kubeconfig: Option<PathBuf>,
}

impl Fedctl {
    pub fn new(kubeconfig: &Path) -> Self {
        Self {
            kubeconfig: Some(kubeconfig.to_path_buf()),
        }
    }

    /// The command, with `--kubeconfig` when set, `$KUBECONFIG` removed and HOME pointed
    /// away from the developer's own `~/.kube/config`.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(binary("fedctl"));
        if let Some(kubeconfig) = &self.kubeconfig {
            command.arg("--kubeconfig").arg(kubeconfig);
        }
        command
            .args(args)
            .env_remove("KUBECONFIG")
            .env("HOME", "/nonexistent-home")
            .stdin(Stdio::null());
        command
    }

    pub fn run(&self, args: &[&str]) -> Run {
        run(self.command(args))
    }

    /// Runs and requires exit 0; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.code, 0,
            "fedctl {args:?} failed ({}): {}\n{}",
            out.code, out.stderr, out.stdout
        );
        out.stdout
    }

    /// Runs and requires exit `code` with exactly one line on stderr; returns that line.
    pub fn fails(&self, args: &[&str], code: i32) -> String {
        let out = self.run(args);
        assert_eq!(
            out.code, code,
            "fedctl {args:?}: want exit {code}, got {}: {}\n{}",
            out.code, out.stderr, out.stdout
        );
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "fedctl {args:?}: want one line on stderr, got {:?}",
            out.stderr
        );
        assert!(
            lines[0].starts_with("fedctl: "),
            "fedctl {args:?}: {:?}",
            lines[0]
        );
        lines[0].to_string()
    }
}

/// Runs a command to completion.
pub fn run(mut command: Command) -> Run {
    let out = command.output().expect("running fedctl");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Whether `token` is an age as kubectl prints them (`5s`, `3m12s`, `2d4h`).
fn is_age(token: &str) -> bool {
    let mut rest = token;
    let mut parts = 0;
    while !rest.is_empty() {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        match rest.chars().next() {
            Some('s' | 'm' | 'h' | 'd' | 'y') => rest = &rest[1..],
            _ => return false,
        }
        parts += 1;
    }
    (1..=2).contains(&parts)
}

/// Replaces an age in the last column of every line with `<age>` (the last column is
/// not padded, so the alignment of the others does not change).
pub fn normalize_ages(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        match line.rsplit_once(' ') {
            Some((head, last)) if is_age(last) => {
                out.push_str(head);
                out.push_str(" <age>");
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Compares `actual` with `tests/golden/<name>`; with `FEDINGRESS_UPDATE_GOLDEN=1`
/// writes it instead.
pub fn golden(name: &str, actual: &str) {
    let path = repo_path(&format!("tests/golden/{name}"));
    if std::env::var_os("FEDINGRESS_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().expect("golden dir")).expect("golden dir");
        std::fs::write(&path, actual).expect("writing golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "golden file {} ({e}); create it with FEDINGRESS_UPDATE_GOLDEN=1",
            path.display()
        )
    });
    assert_eq!(
        actual,
        expected,
        "output differs from {} (FEDINGRESS_UPDATE_GOLDEN=1 rewrites it)\n--- actual ---\n{actual}",
        path.display()
    );
}

/// One suggested command of `fedctl dev up`: the command line and, when it says, the
/// output it should print (the shell comment after it).
#[derive(Debug, Clone)]
pub struct Suggestion {
    pub command: String,
    pub expect: Option<String>,
}

/// The commands in `dev up`'s "try" list: lines indented by four spaces.
pub fn suggestions(text: &str) -> Vec<Suggestion> {
    text.lines()
        .filter_map(|line| line.strip_prefix("    "))
        .filter(|line| !line.starts_with(' ') && !line.is_empty())
        .map(|line| match line.split_once("    # ") {
            Some((command, expect)) => Suggestion {
                command: command.trim().to_string(),
                expect: Some(expect.trim().to_string()),
            },
            None => Suggestion {
                command: line.trim().to_string(),
                expect: None,
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages() {
        for age in ["5s", "119s", "3m12s", "2d4h", "10m", "3y"] {
            assert!(is_age(age), "{age}");
        }
        for other in ["5", "s", "1.2s", "127.0.0.1", "3m12s4h", "Ready"] {
            assert!(!is_age(other), "{other}");
        }
        assert_eq!(
            normalize_ages("NAME   AGE\na      5s\nb      12m\n"),
            "NAME   AGE\na      <age>\nb      <age>\n"
        );
    }
}
