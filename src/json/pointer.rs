//! RFC 6901 JSON pointers: `/a/b~1c/0` names member `a`, then member `b/c`, then element 0.

use std::fmt;
use std::str::FromStr;

/// One pointer: its text as written and its reference tokens, unescaped.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JsonPointer {
    text: Box<str>,
    tokens: Box<[Box<str>]>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PointerError {
    #[error("a JSON pointer starts with `/` (RFC 6901), as in `json:/model`")]
    NoSlash,
    #[error("`~` in a JSON pointer is `~0` (for `~`) or `~1` (for `/`)")]
    BadEscape,
    #[error("a JSON pointer names at most {MAX_TOKENS} levels")]
    TooDeep,
}

/// Deepest pointer accepted: keys sit near the top of a request body.
pub const MAX_TOKENS: usize = 16;

impl JsonPointer {
    /// The pointer to the top-level member `name`.
    pub fn member(name: &str) -> Result<Self, PointerError> {
        format!("/{}", name.replace('~', "~0").replace('/', "~1")).parse()
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn tokens(&self) -> &[Box<str>] {
        &self.tokens
    }

    /// Whether token `depth` names array element `index` (a decimal without leading
    /// zeros, as RFC 6901 spells indices).
    pub fn names_index(&self, depth: usize, index: usize) -> bool {
        let Some(token) = self.tokens.get(depth) else {
            return false;
        };
        let t = token.as_bytes();
        let canonical = t == b"0" || (!t.is_empty() && t[0] != b'0');
        canonical && t.iter().all(u8::is_ascii_digit) && token.parse::<usize>() == Ok(index)
    }
}

impl FromStr for JsonPointer {
    type Err = PointerError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let Some(rest) = text.strip_prefix('/') else {
            return Err(PointerError::NoSlash);
        };
        let tokens = rest
            .split('/')
            .map(unescape)
            .collect::<Result<Vec<_>, _>>()?;
        if tokens.len() > MAX_TOKENS {
            return Err(PointerError::TooDeep);
        }
        Ok(Self {
            text: text.into(),
            tokens: tokens.into(),
        })
    }
}

/// `~1` → `/`, `~0` → `~`; any other `~` is a mistake.
fn unescape(token: &str) -> Result<Box<str>, PointerError> {
    if !token.contains('~') {
        return Ok(token.into());
    }
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        match c {
            '~' => match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return Err(PointerError::BadEscape),
            },
            c => out.push(c),
        }
    }
    Ok(out.into())
}

impl fmt::Display for JsonPointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_unescaped_as_rfc_6901_says() {
        let p: JsonPointer = "/a~1b/m~0n/0".parse().unwrap();
        let tokens: Vec<&str> = p.tokens().iter().map(|t| &**t).collect();
        assert_eq!(tokens, ["a/b", "m~n", "0"]);
        assert!(p.names_index(2, 0));
        assert!(!p.names_index(1, 0));
        let empty: JsonPointer = "/".parse().unwrap();
        assert_eq!(empty.tokens().len(), 1, "`/` names the member called \"\"");
        let padded: JsonPointer = "/a/01".parse().unwrap();
        assert!(!padded.names_index(1, 1), "01 is not an index");
    }

    #[test]
    fn mistakes_are_named() {
        assert_eq!("model".parse::<JsonPointer>(), Err(PointerError::NoSlash));
        assert_eq!("".parse::<JsonPointer>(), Err(PointerError::NoSlash));
        assert_eq!("/a~2".parse::<JsonPointer>(), Err(PointerError::BadEscape));
        assert_eq!("/a~".parse::<JsonPointer>(), Err(PointerError::BadEscape));
        let deep = "/a".repeat(MAX_TOKENS + 1);
        assert_eq!(deep.parse::<JsonPointer>(), Err(PointerError::TooDeep));
    }
}
