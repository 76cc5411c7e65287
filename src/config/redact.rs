//! Credentials out of what is shown: URLs in errors, logs and the admin API.

/// `redis://user:secret@host` → `redis://user:***@host`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let creds = &url[scheme_end + 3..at];
            let user = creds.split(':').next().unwrap_or("");
            format!("{}{}:***{}", &url[..scheme_end + 3], user, &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords_only() {
        assert_eq!(
            redact_url("redis://u:pw@h:6379/0"),
            "redis://u:***@h:6379/0"
        );
        assert_eq!(redact_url("rediss://:pw@h"), "rediss://:***@h");
        assert_eq!(redact_url("redis://h:6379"), "redis://h:6379");
    }
}
