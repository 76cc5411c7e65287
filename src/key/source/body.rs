//! Values found in a request body read before the decision beyond a JSON walk's: a
//! `query:` key's parameter in a form, a multipart body or a JSON body's top-level
//! members, as PHP, Rails, Laravel and Flask merge them with the query's; and a `json:`
//! key's member sent as a form or multipart field instead, as Express (`urlencoded()`
//! beside `json()`), Rails and Laravel read either into one body object.

use std::borrow::Cow;

use super::part::{push_distinct, KeyPart, KeyValues, TooManyValues};
use super::parts::{form_values, names_param};
use crate::json::{BodyFacts, JsonPointer};
use crate::request::form::BodyParams;

/// The parameters called `name` in `body`: a form's pairs (read as a query's), a multipart
/// body's text fields under any reading of their names, a JSON body's top-level members.
pub(super) fn body_param_values<'a>(
    body: &'a BodyFacts<'a>,
    name: &str,
    values: &mut KeyValues<'a>,
) -> Result<(), TooManyValues> {
    for params in &body.params {
        params_values(params, &|k| names_param(k, name), values)?;
    }
    // Values the JSON walk could not keep would be uncharged: too many.
    if body.overflowed() {
        return Err(TooManyValues);
    }
    for value in body.member(name).filter(|v| !v.is_empty()) {
        push_distinct(values, KeyPart::Bytes(Cow::Borrowed(value)))?;
    }
    Ok(())
}

/// The form or multipart fields of `body` named as `pointer` ([`names_pointer`]).
pub(super) fn body_field_values<'a>(
    body: &'a BodyFacts<'a>,
    pointer: &JsonPointer,
    values: &mut KeyValues<'a>,
) -> Result<(), TooManyValues> {
    for params in &body.params {
        params_values(params, &|k| names_pointer(k, pointer.tokens()), values)?;
    }
    Ok(())
}

/// Every parameter of `params` whose name `named` takes, its value charged.
fn params_values<'a>(
    params: &BodyParams<'a>,
    named: &dyn Fn(&str) -> bool,
    values: &mut KeyValues<'a>,
) -> Result<(), TooManyValues> {
    match *params {
        BodyParams::Form(text) => form_values(text, named, values),
        BodyParams::Multipart(text, boundary) => {
            crate::request::form::fields(text, boundary, &mut |(names, value)| match !value
                .is_empty()
                && names.iter().any(|n| named(n))
            {
                true => push_distinct(values, KeyPart::Bytes(value)),
                false => Ok(()),
            })
        }
    }
}

/// Whether a form field called `k` (decoded) is the member `tokens` names: for one token,
/// any reading of a query parameter of that name ([`names_param`]); deeper, the bracket
/// notation Rails, PHP and Express's `qs` nest with (`a[b][0]` is `/a/b/0`; `qs` also
/// takes `[a][b][0]`), and an array of it (`a[b][0][]`, `a[b][0][1]`).
pub(super) fn names_pointer(k: &str, tokens: &[Box<str>]) -> bool {
    let [first, rest @ ..] = tokens else {
        return false;
    };
    if rest.is_empty() {
        return names_param(k, first);
    }
    let unbracketed = k
        .strip_prefix('[')
        .and_then(|k| k.split_once(']'))
        .map(|(base, tail)| format!("{base}{tail}"));
    nests(k, first, rest)
        || unbracketed.is_some_and(|k| nests(&k, first, rest))
        || nests(&php_base(k), first, rest)
}

/// `k` with its base (before the first `[`) mangled as PHP mangles a variable's name:
/// leading spaces dropped, a `.` or a space read as `_` (`my.params[name]` is
/// `my_params[name]` to PHP).
fn php_base(k: &str) -> String {
    let k = k.trim_start_matches(' ');
    let open = k.find('[').unwrap_or(k.len());
    let base: String = k[..open]
        .chars()
        .map(|c| if c == '.' || c == ' ' { '_' } else { c })
        .collect();
    base + &k[open..]
}

/// Whether `k` is `first[rest0][rest1]…`, possibly an array of it.
fn nests(k: &str, first: &str, rest: &[Box<str>]) -> bool {
    let Some(mut tail) = k.strip_prefix(first) else {
        return false;
    };
    for token in rest {
        let inner = tail
            .strip_prefix('[')
            .and_then(|t| t.strip_prefix(&**token))
            .and_then(|t| t.strip_prefix(']'));
        match inner {
            Some(inner) => tail = inner,
            None => return false,
        }
    }
    let index = tail.strip_prefix('[').and_then(|t| t.strip_suffix(']'));
    tail.is_empty() || index.is_some_and(|i| i.bytes().all(|b| b.is_ascii_digit()))
}
