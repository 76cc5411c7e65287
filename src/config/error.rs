//! Configuration errors, each located at `file:line:column` with a hint on what to change.

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

/// One problem found in the file, before it is given a line and column.
#[derive(Debug, Clone)]
pub struct Problem {
    pub span: Range<usize>,
    pub message: String,
    pub hint: Option<String>,
}

/// One problem with its position in the file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Located {
    pub line: usize,
    pub column: usize,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", Invalid { path, problems })]
    Invalid {
        path: PathBuf,
        problems: Vec<Located>,
    },
}

impl ConfigError {
    /// The problems as plain lines, for logs and the admin API.
    pub fn lines(&self) -> Vec<String> {
        self.to_string().lines().map(str::to_owned).collect()
    }
}

struct Invalid<'a> {
    path: &'a PathBuf,
    problems: &'a [Located],
}

impl fmt::Display for Invalid<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(
                f,
                "{}:{}:{}: {}",
                self.path.display(),
                p.line,
                p.column,
                p.message
            )?;
            if let Some(hint) = &p.hint {
                write!(f, "\n    hint: {hint}")?;
            }
        }
        Ok(())
    }
}

/// Turns byte offsets into 1-based line and column (in characters).
pub fn locate(text: &str, problems: Vec<Problem>) -> Vec<Located> {
    let mut located: Vec<Located> = problems
        .into_iter()
        .map(|p| {
            let offset = p.span.start.min(text.len());
            let before = &text[..crate::clip::floor_char_boundary(text, offset)];
            let line = before.matches('\n').count() + 1;
            let line_start = before.rfind('\n').map_or(0, |i| i + 1);
            let column = before[line_start..].chars().count() + 1;
            Located {
                line,
                column,
                message: p.message,
                hint: p.hint,
            }
        })
        .collect();
    located.sort_by_key(|l| (l.line, l.column));
    located
}
