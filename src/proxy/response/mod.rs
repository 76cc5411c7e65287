//! Responses the gateway writes itself on the data plane: the rate-limit headers on every
//! response from a limited route (`headers`, `rate_values`), the 429 (`refusal`; its body,
//! JSON or problem details, `refusal_body`), why a request ended as it did (`answer`: the
//! typed answer every front door renders, and the answer to a cut upload; `cut`: why a
//! metered body was cut), and the one choice `Accept` makes (`accept`). The body type and
//! JSON errors every listener shares are in [`crate::reply`].

mod accept;
mod answer;
mod cut;
mod headers;
mod rate_values;
mod refusal;
mod refusal_body;

pub use accept::wants_problem_json;
pub use answer::{
    ambiguous_content_type, body_cut, decoded_too_large, jsonrpc_batch, malformed_coding,
    overloaded, unsupported_charset, unsupported_coding, Answer,
};
pub use cut::{BudgetExhausted, CutReason};
pub use headers::{concurrency_headers, PolicyAnswer, PolicyHeaders, RouteHeaders, TierItem};
pub use rate_values::{lists as rate_limit_lists, rate_limit_headers};
pub use refusal::{concurrency_refused, cost_above_burst, too_many_requests};
pub use refusal_body::{body_start, Refused};
