//! The examples of the workspace's `docs/*.md`, read from the markdown itself, so that a
//! test runs an example exactly as a reader copies it and fails when the text changes
//! under it.

use std::path::PathBuf;

/// The workspace's `docs/` directory.
fn docs_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the workspace")
        .join("docs")
}

/// The text of the first fenced code block of language `lang` (```` ```yaml ````) that
/// follows the line `heading` (e.g. `## Configuration`) in `docs/<doc>`, without its
/// fences. Panics, naming what is missing, when there is none.
pub fn code_block(doc: &str, heading: &str, lang: &str) -> String {
    let path = docs_dir().join(doc);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut lines = text.lines().skip_while(|l| l.trim_end() != heading).skip(1);
    let fence = format!("```{lang}");
    lines
        .by_ref()
        .find(|l| l.trim_end() == fence)
        .unwrap_or_else(|| panic!("no {fence} block after {heading:?} in {}", path.display()));
    let mut block = String::new();
    for line in lines.by_ref() {
        if line.trim_end() == "```" {
            return block;
        }
        block.push_str(line);
        block.push('\n');
    }
    panic!(
        "the {fence} block after {heading:?} in {} is not closed",
        path.display()
    )
}

/// `text` with each `(from, to)` replaced, each `from` required to occur exactly once:
/// a test that adapts a documented example (an address only the test knows) fails
/// loudly when the example no longer says what it replaces.
pub fn substitute(text: &str, replacements: &[(&str, &str)]) -> String {
    replacements
        .iter()
        .fold(text.to_string(), |text, (from, to)| {
            assert_eq!(
                text.matches(from).count(),
                1,
                "{from:?} occurs once in the documented example:\n{text}"
            );
            text.replace(from, to)
        })
}
