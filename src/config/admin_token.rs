//! `[server] admin_token`: the admin API's bearer token, checked in constant time and
//! never printed.

/// The admin API's bearer token. Never printed: `Debug` shows only that one is set.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(String);

impl AdminToken {
    /// A token as written in the config or its file: surrounding whitespace (the newline
    /// an editor or `echo` leaves) is not part of it. `None` when nothing is left or it
    /// holds characters a header value cannot carry.
    pub fn parse(text: &str) -> Result<Self, String> {
        let token = text.trim();
        if token.is_empty() {
            return Err("the admin token is empty".to_owned());
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the admin token must be printable ASCII without spaces".to_owned());
        }
        if token.len() < Self::MIN_LEN {
            return Err(format!(
                "the admin token is {} bytes: too short to resist guessing (at least {})",
                token.len(),
                Self::MIN_LEN
            ));
        }
        if token.len() > Self::MAX_LEN {
            return Err(format!(
                "the admin token is {} bytes: longer than the admin listener accepts in a header (at most {})",
                token.len(),
                Self::MAX_LEN
            ));
        }
        Ok(Self(token.to_owned()))
    }

    /// The shortest token accepted: 16 bytes of random text (`openssl rand -hex 32` gives 64).
    pub const MIN_LEN: usize = 16;
    /// The longest: an `Authorization` header carrying it fits the admin listener's header
    /// buffer with room for the rest of a request.
    pub const MAX_LEN: usize = 4096;

    /// Whether `presented` is the token, in time independent of where they differ (the
    /// length is not hidden: it is no secret worth guarding).
    pub fn matches(&self, presented: &[u8]) -> bool {
        use subtle::ConstantTimeEq;
        self.0.as_bytes().ct_eq(presented).into()
    }
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(***)")
    }
}
