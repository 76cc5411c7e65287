//! The price table's quotes: rows, bounds, and what a body's spelling does to them.

use super::*;

fn compile(table: &str) -> Result<Arc<Prices>, String> {
    compile_with("json:/model", table)
}

/// A table whose model is read from `model` (a key source).
fn compile_with(model: &str, table: &str) -> Result<Arc<Prices>, String> {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[upstreams.api]\ntargets = [\"http://127.0.0.1:1\"]\n[prices.llm]\nmodel = \"{model}\"\n{table}\n[policies.p]\nkey = \"ip\"\nquota = 1000000\nwindow = \"day\"\nreserve = \"price:llm\"\nsettle = \"usage:llm\"\nmax_cost = 1000\n[[routes]]\nname = \"r\"\npath = \"/\"\nupstream = \"api\"\npolicies = [\"p\"]\n"
    );
    let config =
        crate::config::compile(std::path::Path::new("t.toml"), &text).map_err(|e| e.to_string())?;
    Ok(config.prices[0].clone())
}

/// What `prices` quotes a JSON `body` (read whole, its length declared) past its input at
/// one unit a byte: its output bound, `None` when the quote is no bound.
fn output_quoted(prices: &Prices, body: &str) -> Option<u64> {
    let mut facts = crate::json::BodyFacts::unread(Some(body.len() as u64));
    let pointers: Vec<&JsonPointer> = prices.pointers().map(|p| &**p).collect();
    crate::json::walk(body.as_bytes(), &pointers, &mut facts).expect("json");
    let most = quote_of(prices, &facts).most;
    most.map(|m| m - body.len() as u64)
}

/// `prices`' quote of a POST to Chat Completions whose body told `facts`.
fn quote_of(prices: &Prices, facts: &crate::json::BodyFacts<'_>) -> Quote {
    quote_at(prices, facts, "/v1/chat/completions")
}

/// The same, the POST to `path`.
fn quote_at(prices: &Prices, facts: &crate::json::BodyFacts<'_>, path: &'static str) -> Quote {
    try_quote_at(prices, facts, path).expect("priced")
}

/// `prices`' quote of a POST to `path` whose body told `facts`, or its refusal.
fn try_quote_at(
    prices: &Prices,
    facts: &crate::json::BodyFacts<'_>,
    path: &'static str,
) -> Result<Quote, Unpriced> {
    let (method, uri, headers) = (
        http::Method::POST,
        http::Uri::from_static(path),
        http::HeaderMap::new(),
    );
    let view = RequestView {
        method: &method,
        uri: &uri,
        headers: &headers,
        client_ip: std::net::Ipv4Addr::LOCALHOST.into(),
        route: "r",
        body: Some(facts),
    };
    prices.quote(&view)
}

#[test]
fn prices_are_kept_to_a_millionth_and_a_finer_one_is_refused() {
    let prices = compile("\"m\" = { input = 0.15, output = 0.000001 }").expect("valid");
    assert_eq!((prices.rows[0].input, prices.rows[0].output), (150_000, 1));
    for finer in ["0.0000004", "0.0000015", "1e-9", "0.6000004", "2.0000004"] {
        let e = compile(&format!("\"m\" = {{ input = {finer}, output = 1 }}")).unwrap_err();
        assert!(
            e.contains("finer than a millionth of a unit"),
            "{finer}: {e}"
        );
    }
}

#[test]
fn two_models_named_are_priced_at_the_dearest_of_every_price() {
    // A cheap row without max_output (unbounded) beside a dear bounded one: naming
    // both must not settle on the cheap row's prices.
    let prices = compile(
        "default = { input = 1, output = 1 }\n\"cheap\" = { input = 1, output = 2 }\n\"dear\" = { input = 10, output = 30, max_output = 100 }",
    )
    .expect("valid");
    let model = prices.pointers().next().expect("the model's").clone();
    let body = br#"{"model":"cheap","model":"dear"}"#;
    let mut facts = crate::json::BodyFacts::default();
    crate::json::walk(body, &[&model], &mut facts).expect("json");
    let row = prices.rows[quote_of(&prices, &facts).row as usize];
    assert_eq!((row.input, row.output), (10_000_000, 30_000_000));
}

/// More models named than a key takes (five): with a `default`, priced at the dearest of
/// every price, as two are; without one, refused (one of them may be priced by no row).
#[test]
fn more_models_than_a_key_takes_are_priced_at_the_dearest_given_a_default() {
    let rows = "\"cheap\" = { input = 1, output = 2 }\n\"dear\" = { input = 10, output = 30 }";
    let body = br#"{"model":"cheap","model":"dear","model":"x1","model":"x2","model":"x3"}"#;
    let quote = |prices: &Prices| {
        let model = prices.pointers().next().expect("the model's").clone();
        let mut facts = crate::json::BodyFacts::default();
        crate::json::walk(body, &[&model], &mut facts).expect("json");
        let quote = try_quote_at(prices, &facts, "/v1/chat/completions");
        quote.ok().map(|q| prices.rows[q.row as usize])
    };
    let with_default =
        compile(&format!("default = {{ input = 1, output = 1 }}\n{rows}")).expect("valid");
    let row = quote(&with_default).expect("priced");
    assert_eq!((row.input, row.output), (10_000_000, 30_000_000));
    let without = compile(rows).expect("valid");
    assert!(quote(&without).is_none(), "refused without a default");
}

#[test]
fn a_body_not_read_is_priced_at_the_dearest_of_every_price() {
    let prices = compile(
        "default = { input = 5, output = 15 }\n\"big\" = { input = 10, output = 30, max_output = 100 }\n\"cached\" = { input = 1, cached_input = 20, output = 2 }",
    )
    .expect("valid");
    let unread = crate::json::BodyFacts::unread(Some(70_000));
    let quote = quote_of(&prices, &unread);
    let row = prices.rows[quote.row as usize];
    assert_eq!(
        (row.input, row.cached_input, row.output, row.max_output),
        (10_000_000, 20_000_000, 30_000_000, None),
        "the dearest of each price; no max_output, as a row has none"
    );
    assert_eq!(quote.most, None, "no output bound");
    assert_eq!(
        quote.input, 700_000,
        "its declared length at the dearest input price"
    );
}

/// Choices and output limits only bound a quote when the gateway counts them as the
/// upstream will: a spelling lax validators read (pydantic takes `"1_28"` and
/// `" 128"` for 128) or more values than the walk keeps leave the choices unknown
/// and the quote no bound; `null` is not given; a number's spellings are one value.
#[test]
fn choices_the_gateway_cannot_count_bound_nothing() {
    let prices = compile("\"m\" = { input = 1, output = 1, max_output = 100 }").expect("valid");
    let most = |body: &str| output_quoted(&prices, body);
    let with = |n: &str| format!(r#"{{"model":"m","max_tokens":10,"n":{n}}}"#);
    assert_eq!(most(&with("2")), Some(20));
    for same in ["128", "128.0", "1.28e2", "\"128\""] {
        assert_eq!(most(&with(same)), Some(1280), "{same}");
    }
    assert_eq!(most(&with("null")), Some(10), "not given: one choice");
    assert_eq!(most(&with("200")), None, "more than 128: unknown");
    for unread in ["\"1_28\"", "\" 128\"", "-1", "1e300", "true"] {
        assert_eq!(most(&with(unread)), None, "{unread}");
    }
    // An output limit the gateway cannot read is the model's max_output.
    let spelled = r#"{"model":"m","max_tokens":"1_0","n":2}"#;
    assert_eq!(most(spelled), Some(200));
}

/// An output limit bounds a quote only when the upstream reads it: one of another API
/// than the body speaks (vLLM's Chat Completions ignore `max_output_tokens`), or
/// spelled in another case (Python's readers ignore `MAX_TOKENS`, Go's read it), leaves
/// the output to the model's `max_output` or the quote no bound; a chain kept upstream
/// leaves the input unknown.
#[test]
fn output_limits_the_upstream_may_ignore_bound_nothing() {
    let prices = compile("\"m\" = { input = 1, output = 1, max_output = 100 }").expect("valid");
    let quote = |body: &str| output_quoted(&prices, body);
    for (body, output) in [
        (r#"{"model":"m","messages":[],"max_tokens":7}"#, 7),
        (r#"{"model":"m","input":"a","max_output_tokens":7}"#, 7),
        (r#"{"model":"m","max_tokens":7}"#, 7),
        (r#"{"model":"m","messages":[],"max_output_tokens":1}"#, 100),
        (r#"{"model":"m","input":"a","max_tokens":1}"#, 100),
        (
            r#"{"model":"m","messages":[],"input":"a","max_tokens":1,"max_output_tokens":1}"#,
            100,
        ),
    ] {
        assert_eq!(quote(body), Some(output), "{body}");
    }
    // A limit or `n` spelled in another case, or given twice (once as `null`: a reader
    // keeping the last sees none), leaves both unknown: no bound.
    for folded in [
        r#"{"model":"m","messages":[],"MAX_TOKENS":1}"#,
        r#"{"model":"m","messages":[],"max_tokens":9,"Max_Tokens":1}"#,
        r#"{"model":"m","messages":[],"max_tokens":9,"N":1}"#,
        r#"{"model":"m","messages":[],"max_tokens":5,"max_tokens":null}"#,
    ] {
        assert_eq!(quote(folded), None, "{folded}");
    }
    let chained =
        r#"{"model":"m","input":"go on","previous_response_id":"r","max_output_tokens":7}"#;
    assert_eq!(quote(chained), None, "the chain's input is unknown");
}

/// Past the values the walk keeps, `n` may be among those dropped: with the model
/// named in a header (the body's model would be refused as unread), the quote is no
/// bound.
#[test]
fn choices_past_what_the_walk_keeps_bound_nothing() {
    let table = "default = { input = 1, output = 1, max_output = 100 }";
    let prices = compile_with("header:x-model", table).expect("valid");
    let padded: String = (0..20).map(|i| format!(r#""max_tokens":{i},"#)).collect();
    let padded = format!(r#"{{{padded}"n":128}}"#);
    let mut facts = crate::json::BodyFacts::unread(Some(padded.len() as u64));
    let pointers: Vec<&JsonPointer> = prices.pointers().map(|p| &**p).collect();
    crate::json::walk(padded.as_bytes(), &pointers, &mut facts).expect("json");
    assert!(facts.overflowed());
    assert_eq!(quote_of(&prices, &facts).most, None);
}

#[test]
fn an_output_limit_of_zero_bounds_nothing() {
    let prices = compile("default = { input = 1, output = 1 }").expect("valid");
    assert_eq!(
        output_quoted(&prices, r#"{"model":"m","max_tokens":10}"#),
        Some(10)
    );
    for body in [
        r#"{"model":"m","max_tokens":0}"#,
        r#"{"model":"m","max_tokens":10,"max_completion_tokens":0}"#,
    ] {
        assert_eq!(output_quoted(&prices, body), None, "{body}");
    }
}

/// A server's own API reads a limit of its own: `max_tokens` on Ollama's `/api/chat` (or
/// TGI's `/generate`, llama.cpp's `/completion`) bounds nothing; on a path of the APIs
/// that read it, in any case and with a trailing slash, it does.
#[test]
fn an_output_limit_counts_only_on_a_path_of_an_api_that_reads_it() {
    let prices = compile("\"m\" = { input = 1, output = 1 }").expect("valid");
    let body = r#"{"model":"m","messages":[],"max_tokens":1}"#;
    let mut facts = crate::json::BodyFacts::unread(Some(body.len() as u64));
    let pointers: Vec<&JsonPointer> = prices.pointers().map(|p| &**p).collect();
    crate::json::walk(body.as_bytes(), &pointers, &mut facts).expect("json");
    let quoted = |path: &'static str| quote_at(&prices, &facts, path).most;
    let bounded = Some(body.len() as u64 + 1);
    for read in [
        "/v1/chat/completions",
        "/openai/deployments/d/chat/completions/",
        "/v1/completions",
        "/v1/responses",
        "/v1/messages",
        "/V1/Chat/Completions",
    ] {
        assert_eq!(quoted(read), bounded, "{read}");
    }
    for own in [
        "/api/chat",
        "/api/generate",
        "/generate",
        "/completion",
        "/",
    ] {
        assert_eq!(quoted(own), None, "{own}: no bound");
    }
}

/// `upstream_reads` names the output limits the upstream reads: in front of Ollama's
/// OpenAI endpoint (`["max_tokens"]`), `max_completion_tokens` alone bounds nothing (the
/// row's `max_output` counts), while `max_tokens` still does. A limit a quote does not
/// know, or a value that is no list, is refused with the list it takes.
#[test]
fn a_limit_the_upstream_does_not_read_bounds_nothing() {
    let table =
        "upstream_reads = [\"max_tokens\"]\n\"m\" = { input = 1, output = 1, max_output = 100 }";
    let prices = compile(table).expect("valid");
    let quote = |body: &str| output_quoted(&prices, body);
    assert_eq!(
        quote(r#"{"model":"m","messages":[],"max_completion_tokens":1}"#),
        Some(100)
    );
    assert_eq!(
        quote(r#"{"model":"m","messages":[],"max_tokens":7}"#),
        Some(7)
    );
    let all = compile("\"m\" = { input = 1, output = 1, max_output = 100 }").expect("valid");
    let body = r#"{"model":"m","messages":[],"max_completion_tokens":1}"#;
    assert_eq!(output_quoted(&all, body), Some(1), "read by default");
    for bad in [
        "upstream_reads = [\"num_predict\"]",
        "upstream_reads = \"max_tokens\"",
    ] {
        let e = compile(&format!("{bad}\n\"m\" = {{ input = 1, output = 1 }}")).expect_err(bad);
        assert!(
            e.contains("upstream_reads") && e.contains("max_completion_tokens"),
            "{e}"
        );
    }
}
