//! Gateway configurations for tests, built from readable TOML pieces.
//!
//! ```ignore
//! let toml = Fixture::new()
//!     .server(r#"header_read_timeout = "2s""#)
//!     .policy("tenant", "header:x-tenant-id", 1, "1s", 3)
//!     .policy_raw("key", r#"
//!         key = "header:x-key"
//!         limit = 1
//!         period = "1h"
//!         burst = 10
//!         missing = "skip"
//!     "#)
//!     .route("api", "/", "api", &["tenant", "key"])
//!     .build();
//! let gw = TestGateway::start(&toml, &upstream.url()).await;
//! ```
//!
//! Bodies are TOML lines; multi-line raw strings are dedented (the common indentation and
//! the blank first and last lines are dropped), so they can be written indented in Rust.
//! `{upstream}` in the text is replaced by the upstream's URL when the gateway starts
//! ([`super::TestGateway::start`]) or by [`Fixture::build_for`].

/// A gateway configuration under construction.
///
/// [`Fixture::new`] is a `[server]` on 127.0.0.1:0 with an admin listener on
/// 127.0.0.1:0 and no access log, and one upstream `api` whose target is `{upstream}`.
/// Nothing is limited until policies and routes are added.
#[derive(Clone, Debug)]
pub struct Fixture {
    listen: String,
    server: Vec<String>,
    store: Option<String>,
    upstreams: Vec<(String, String)>,
    policies: Vec<String>,
    routes: Vec<String>,
    raw: Vec<String>,
}

impl Default for Fixture {
    fn default() -> Self {
        Self::new()
    }
}

impl Fixture {
    pub fn new() -> Self {
        Self {
            listen: "127.0.0.1:0".to_owned(),
            server: Vec::new(),
            store: None,
            upstreams: vec![("api".to_owned(), target_line())],
            policies: Vec::new(),
            routes: Vec::new(),
            raw: Vec::new(),
        }
    }

    /// Another `listen` address for the data plane.
    pub fn listen(mut self, addr: &str) -> Self {
        self.listen = addr.to_owned();
        self
    }

    /// More lines for the `[server]` table.
    pub fn server(mut self, lines: impl AsRef<str>) -> Self {
        self.server.push(dedent(lines.as_ref()));
        self
    }

    /// The `[store]` table's body.
    pub fn store(mut self, body: impl AsRef<str>) -> Self {
        self.store = Some(dedent(body.as_ref()));
        self
    }

    /// `[upstreams.NAME]` targeting `{upstream}`, with `extra` lines (`timeout = "1s"`);
    /// replaces an upstream of the same name (the default `api` included).
    pub fn upstream(self, name: &str, extra: impl AsRef<str>) -> Self {
        let body = format!("{}{}", target_line(), dedent(extra.as_ref()));
        self.upstream_raw(name, body)
    }

    /// `[upstreams.NAME]` with the whole body given (its own `targets`); replaces an
    /// upstream of the same name.
    pub fn upstream_raw(mut self, name: &str, body: impl AsRef<str>) -> Self {
        let body = dedent(body.as_ref());
        match self.upstreams.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = body,
            None => self.upstreams.push((name.to_owned(), body)),
        }
        self
    }

    /// `[policies.NAME]` with the four required fields; `key` is one key source
    /// (`"ip"`, `"header:x-user"`), quoted here.
    pub fn policy(self, name: &str, key: &str, limit: u64, period: &str, burst: u64) -> Self {
        let body = format!(
            "key = {}\nlimit = {limit}\nperiod = {}\nburst = {burst}\n",
            quote(key),
            quote(period)
        );
        self.policy_raw(name, body)
    }

    /// `[policies.NAME]` with the whole body given (composite keys, `missing`, `mode`,
    /// `max_delay`; an `[policies.NAME.overrides]` table may follow in the same text).
    pub fn policy_raw(mut self, name: &str, body: impl AsRef<str>) -> Self {
        self.policies
            .push(format!("[policies.{name}]\n{}", dedent(body.as_ref())));
        self
    }

    /// `[policies.NAME]` keyed by `key`, `burst` requests an hour, skipped by a request
    /// without its key (`missing = "skip"`): a key read as missing goes around it.
    pub fn skipping_policy(self, name: &str, key: &str, burst: u32) -> Self {
        self.policy_raw(
            name,
            format!("key = \"{key}\"\nlimit = {burst}\nperiod = \"1h\"\nburst = {burst}\nmissing = \"skip\"\n"),
        )
    }

    /// A `[[routes]]` entry with the required fields and its policies (none: unlimited).
    pub fn route(self, name: &str, path: &str, upstream: &str, policies: &[&str]) -> Self {
        let policies: Vec<String> = policies.iter().map(|p| quote(p)).collect();
        let body = format!(
            "name = {}\npath = {}\nupstream = {}\npolicies = [{}]\n",
            quote(name),
            quote(path),
            quote(upstream),
            policies.join(", ")
        );
        self.route_raw(body)
    }

    /// A `[[routes]]` entry with the whole body given (`host`, `methods`, `cost`, …).
    pub fn route_raw(mut self, body: impl AsRef<str>) -> Self {
        self.routes
            .push(format!("[[routes]]\n{}", dedent(body.as_ref())));
        self
    }

    /// Any other TOML, appended as written (dedented): `[server.tls]`, for one.
    pub fn raw(mut self, text: impl AsRef<str>) -> Self {
        self.raw.push(dedent(text.as_ref()));
        self
    }

    /// The TOML text, `{upstream}` still in it.
    pub fn build(&self) -> String {
        let mut server = format!(
            "[server]\nlisten = {}\nadmin_listen = \"127.0.0.1:0\"\naccess_log = false\n",
            quote(&self.listen)
        );
        for lines in &self.server {
            server.push_str(lines);
        }
        let mut sections = vec![server];
        if let Some(store) = &self.store {
            sections.push(format!("[store]\n{store}"));
        }
        for (name, body) in &self.upstreams {
            sections.push(format!("[upstreams.{name}]\n{body}"));
        }
        sections.extend(self.policies.iter().cloned());
        sections.extend(self.routes.iter().cloned());
        sections.extend(self.raw.iter().cloned());
        sections.join("\n")
    }

    /// The TOML text with `{upstream}` replaced by `upstream`, for a file the binary reads.
    pub fn build_for(&self, upstream: &str) -> String {
        self.build().replace("{upstream}", upstream)
    }
}

fn target_line() -> String {
    "targets = [\"{upstream}\"]\n".to_owned()
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// Drops blank leading and trailing lines and the indentation common to the others;
/// every line, the last included, ends in `\n`. An empty text stays empty.
pub fn dedent(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let first = lines.iter().position(|l| !l.trim().is_empty());
    let last = lines.iter().rposition(|l| !l.trim().is_empty());
    let (Some(first), Some(last)) = (first, last) else {
        return String::new();
    };
    let lines = &lines[first..=last];
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let mut out = String::new();
    for line in lines {
        out.push_str(line.get(indent..).unwrap_or("").trim_end());
        out.push('\n');
    }
    out
}

#[test]
fn dedent_trims_the_common_indentation_and_blank_edges() {
    let text = dedent(
        r#"
            key = "ip"

              limit = 1
        "#,
    );
    assert_eq!(text, "key = \"ip\"\n\n  limit = 1\n");
    assert_eq!(dedent("a = 1"), "a = 1\n");
    assert_eq!(dedent(""), "");
}

#[test]
fn a_fixture_builds_valid_toml_in_the_documented_layout() {
    let toml = Fixture::new()
        .server("workers = 1")
        .store("max_keys = 16")
        .upstream("api", r#"timeout = "1s""#)
        .policy("p", "header:x-user", 1, "1s", 2)
        .route("r", "/", "api", &["p"])
        .build();
    assert_eq!(
        toml,
        r#"[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
access_log = false
workers = 1

[store]
max_keys = 16

[upstreams.api]
targets = ["{upstream}"]
timeout = "1s"

[policies.p]
key = "header:x-user"
limit = 1
period = "1s"
burst = 2

[[routes]]
name = "r"
path = "/"
upstream = "api"
policies = ["p"]
"#
    );
    tollgate::config::compile(
        std::path::Path::new("t.toml"),
        &toml.replace("{upstream}", "http://127.0.0.1:9"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
}
