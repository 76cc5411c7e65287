//! Client text cut at a byte bound without splitting a character: what a record of it
//! keeps (an access log line, a span, the top-keys view, a config error's excerpt).
//! `str::floor_char_boundary` does this in std from Rust 1.91; the crate builds from 1.85.

/// Most bytes of a request's path a record keeps (an access log line, a span); the
/// upstream gets all of it. A client's 60 KB path in each would make a line's size, not
/// the number of lines, what `access_log_rate` bounds the disk by, and push a span batch
/// past what a collector takes, the honest spans in it dropped with it.
pub const MAX_PATH_BYTES: usize = 1024;

/// The largest index at most `at` (and at most `text.len()`) where a character starts.
#[inline]
pub fn floor_char_boundary(text: &str, at: usize) -> usize {
    let mut end = at.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

/// `text` cut to at most `max` bytes, before the character that would cross it.
#[inline]
pub fn clipped(text: &str, max: usize) -> &str {
    &text[..floor_char_boundary(text, max)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_never_splits_a_character() {
        // 'é' is two bytes, '€' three: every cut through one falls back to its start.
        let text = "aé€b";
        let starts: Vec<usize> = (0..=8).map(|at| floor_char_boundary(text, at)).collect();
        assert_eq!(starts, [0, 1, 1, 3, 3, 3, 6, 7, 7]);
        assert_eq!(clipped(text, 5), "aé");
        assert_eq!(clipped(text, 6), "aé€");
    }

    #[test]
    fn short_text_is_kept_whole_and_a_zero_bound_keeps_nothing() {
        assert_eq!(clipped("/short", MAX_PATH_BYTES), "/short");
        assert_eq!(clipped("/short", 0), "");
        assert_eq!(clipped("", 3), "");
    }
}
