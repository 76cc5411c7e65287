//! The command line's client of a running gateway's admin API: `tollgate reload --admin
//! HOST:PORT` asks `POST /admin/reload` of that one gateway (never a signal to every
//! process of a name), `tollgate top` shows its `GET /admin/top`, with the admin token
//! from a file or `TOLLGATE_ADMIN_TOKEN`. The token goes only to a peer that answered as
//! the admin listener (`client.rs`), and only an answer of the admin API's own shape
//! counts as one.

mod client;
mod table;

use http::{Method, StatusCode};

pub use client::{token, Admin, Answer, CallError};
pub use table::top_table;

use crate::reload::ReloadReport;

/// What a 401 or 403 asks of the operator; `mutating` for a call that changes something.
pub fn refusal_hint(status: StatusCode, mutating: bool) -> &'static str {
    match (status.as_u16(), mutating) {
        (401, _) => " (send the admin token: --token-file or TOLLGATE_ADMIN_TOKEN)",
        (403, true) => " (without a token, changes are taken only on a loopback admin_listen, asked by address or localhost)",
        (403, false) => " (without a token, /admin/* answers only a gateway asked by IP address or localhost: name it so in --admin, or send the admin token)",
        _ => "",
    }
}

/// Why a command did not get what it asked for.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(transparent)]
    Call(#[from] CallError),
    /// A reload's answer past the bound, after the listener said it was the admin one.
    #[error("{0}; whether the reload applied is not known: the gateway logs `configuration reloaded` when it does")]
    ReloadUnread(CallError),
    /// The admin API said no (401, 403, 404, 5xx…).
    #[error("{method} http://{address}{path} answered {status}{hint}: {detail}")]
    Status {
        method: Method,
        address: String,
        path: String,
        status: StatusCode,
        hint: &'static str,
        detail: String,
    },
    /// An answer carrying the admin listener's header, but not of the shape it answers.
    #[error("{method} http://{address}{path} answered {status} with a body that is not {expected}: {address} does not look like tollgate's admin listener (the data-plane port? --admin takes the address of [server] admin_listen)")]
    Unrecognised {
        method: Method,
        address: String,
        path: String,
        status: StatusCode,
        expected: &'static str,
    },
}

impl ControlError {
    /// The exit code: 2 for an answer of the admin API that is no success (a `401`,
    /// `403` or `5xx`, printed with its hint: the contract's "prints the answer, exit 0 or
    /// 2") or an address that is not tollgate's admin listener; 1 when no answer came.
    pub fn exit_code(&self) -> u8 {
        match self {
            ControlError::Call(e) | ControlError::ReloadUnread(e) => e.exit_code(),
            ControlError::Status { .. } => 2,
            ControlError::Unrecognised { .. } => 2,
        }
    }
}

/// How a reload went.
#[derive(Debug)]
pub enum Reloaded {
    /// The new config is in use: its report.
    Applied(Box<ReloadReport>),
    /// The file was refused, the running config kept: the errors, one line each.
    Refused(Vec<String>),
}

#[derive(serde::Deserialize)]
struct Applied {
    status: String,
    report: ReloadReport,
}

#[derive(serde::Deserialize)]
struct Refused {
    status: String,
    errors: Vec<String>,
}

const RELOAD: &str = "/admin/reload";

/// `POST /admin/reload` of `admin`: applied only on the admin API's own success answer.
pub async fn reload(admin: &Admin) -> Result<Reloaded, ControlError> {
    let answer = admin
        .call(Method::POST, RELOAD)
        .await
        .map_err(|e| match e {
            CallError::TooLarge { .. } => ControlError::ReloadUnread(e),
            e => ControlError::Call(e),
        })?;
    let unrecognised = |expected| ControlError::Unrecognised {
        method: Method::POST,
        address: admin.address.clone(),
        path: RELOAD.to_owned(),
        status: answer.status,
        expected,
    };
    match answer.status {
        StatusCode::OK => match serde_json::from_slice::<Applied>(&answer.body) {
            Ok(a) if a.status == "ok" => Ok(Reloaded::Applied(Box::new(a.report))),
            _ => Err(unrecognised("a reload report")),
        },
        StatusCode::UNPROCESSABLE_ENTITY => match serde_json::from_slice::<Refused>(&answer.body) {
            Ok(r) if r.status == "error" => Ok(Reloaded::Refused(r.errors)),
            _ => Err(unrecognised("a reload's errors")),
        },
        _ => Err(status_error(admin, Method::POST, RELOAD, &answer)),
    }
}

/// `GET {path}` (an `/admin/top` query) of `admin`: its keys as a table.
pub async fn top(admin: &Admin, path: &str) -> Result<String, ControlError> {
    let answer = admin.call(Method::GET, path).await?;
    if answer.status != StatusCode::OK {
        return Err(status_error(admin, Method::GET, path, &answer));
    }
    let Ok(serde_json::Value::Array(keys)) = serde_json::from_slice(&answer.body) else {
        return Err(ControlError::Unrecognised {
            method: Method::GET,
            address: admin.address.clone(),
            path: path.to_owned(),
            status: answer.status,
            expected: "a list of keys",
        });
    };
    let window = answer
        .headers
        .get(crate::admin::top::WINDOW_HEADER)
        .and_then(|v| v.to_str().ok());
    Ok(top_table(&keys, window))
}

/// An answer other than the one asked for, said with what the admin API gave as reason.
fn status_error(admin: &Admin, method: Method, path: &str, answer: &Answer) -> ControlError {
    let mutating = method != Method::GET;
    ControlError::Status {
        hint: refusal_hint(answer.status, mutating),
        method,
        address: admin.address.clone(),
        path: path.to_owned(),
        status: answer.status,
        detail: detail(&answer.body),
    }
}

/// An error body in one line: the admin API's JSON error as it is, other text cut short.
fn detail(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.chars().count() > 300 {
        return text.chars().take(299).collect::<String>() + "…";
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reload_reports_read_as_lines() {
        let ok = r#"{"report":{"changes":{"policies":{"added":["tenant"],"changed":["search"],"removed":["old"]},"routes":{"added":[],"changed":[],"removed":[]},"server":[],"upstreams":{"added":[],"changed":[],"removed":[]}},"needs_restart":["store"],"policies":4,"routes":5,"warnings":["f.toml: warning: w"]},"status":"ok"}"#;
        let applied: Applied = serde_json::from_str(ok).expect("a report");
        assert_eq!(
            applied.report.lines(),
            [
                "reloaded: 5 routes, 4 policies",
                "policies: added tenant; removed old; changed search",
                "store changed: this takes effect only after a restart",
                "f.toml: warning: w",
            ]
        );
        let unchanged = ok.replace(r#"["tenant"]"#, "[]");
        let unchanged = unchanged.replace(r#"["search"]"#, "[]");
        let unchanged = unchanged.replace(r#"["old"]"#, "[]");
        let unchanged = unchanged.replace(r#"["store"]"#, "[]");
        let applied: Applied = serde_json::from_str(&unchanged).expect("a report");
        assert_eq!(
            applied.report.lines(),
            [
                "reloaded: 5 routes, 4 policies",
                "nothing changed",
                "f.toml: warning: w"
            ]
        );
        // Another server's JSON is no report.
        assert!(serde_json::from_slice::<Applied>(br#"{"status":"ok"}"#).is_err());
    }

    #[test]
    fn details_stay_one_short_line() {
        assert_eq!(detail(b"forbidden\n"), "forbidden");
        assert_eq!(detail(&[b'x'; 1000]).chars().count(), 300);
    }
}
