use super::*;

/// Every (name, value) reading of `body`'s fields, in order, duplicates dropped.
fn fields_of(body: &[u8], boundary: &str) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = Vec::new();
    let _: Result<(), ()> = fields(body, boundary, &mut |(names, value)| {
        for name in names {
            let pair = (name.clone(), String::from_utf8_lossy(&value).into_owned());
            if !found.contains(&pair) {
                found.push(pair);
            }
        }
        Ok(())
    });
    found
}

/// The values found for `name`.
fn values_of(body: &[u8], boundary: &str, name: &str) -> Vec<String> {
    let found = fields_of(body, boundary).into_iter();
    found.filter(|(n, _)| n == name).map(|(_, v)| v).collect()
}

fn readings_of(method: Method, content_types: &[&[u8]]) -> Vec<ParamsBody> {
    let mut headers = HeaderMap::new();
    for value in content_types {
        let value = http::HeaderValue::from_bytes(value).expect("header value");
        headers.append(CONTENT_TYPE, value);
    }
    let readings = readings(&method, &headers).expect("within MAX_READINGS");
    readings.into_iter().collect()
}

fn post(content_type: &str) -> Vec<ParamsBody> {
    readings_of(Method::POST, &[content_type.as_bytes()])
}

#[test]
fn content_types_read_as_any_framework_reads_them() {
    let form = vec![ParamsBody::Form];
    assert_eq!(post("application/x-www-form-urlencoded"), form);
    assert_eq!(
        post("Application/X-WWW-Form-URLEncoded; charset=UTF-8"),
        form
    );
    // PHP cuts the type at `,` or a space, Symfony takes a prefix.
    assert_eq!(post("application/x-www-form-urlencoded,x"), form);
    assert_eq!(post("application/x-www-form-urlencoded x"), form);
    assert_eq!(post("application/x-www-form-urlencodedX"), form);
    let multipart = |b: &str| vec![ParamsBody::Multipart(b.into())];
    assert_eq!(post("multipart/form-data; boundary=xyz"), multipart("xyz"));
    assert_eq!(post("multipart/mixed;BOUNDARY=\"xyz\""), multipart("xyz"));
    assert_eq!(post("multipart/form-data"), vec![]);
    assert_eq!(post("application/json"), vec![ParamsBody::Json]);
    assert_eq!(post("application/vnd.api+json"), vec![ParamsBody::Json]);
    assert_eq!(post("text/x-json"), vec![ParamsBody::Json]);
    // Laravel's isJson looks at the whole value.
    assert_eq!(post("text/plain; x=/json"), vec![ParamsBody::Json]);
    assert_eq!(post("application/grpc+json"), vec![]);
    assert_eq!(post("application/x-ndjson"), vec![]);
    assert_eq!(post("text/plain"), vec![]);
    // No type: a form to Rack, for a POST.
    assert_eq!(readings_of(Method::POST, &[]), form);
    assert_eq!(post(""), form);
    assert_eq!(readings_of(Method::PUT, &[]), vec![]);
    // A value that is no visible ASCII, and every line of several.
    assert_eq!(
        post("application/x-www-form-urlencoded; charset=\u{e9}"),
        form
    );
    let lines: &[&[u8]] = &[b"application/json", b"application/x-www-form-urlencoded"];
    assert_eq!(
        readings_of(Method::POST, lines),
        vec![ParamsBody::Json, ParamsBody::Form]
    );
}

#[test]
fn a_boundary_is_read_as_php_rack_busboy_and_werkzeug_read_it() {
    let boundaries = |ct: &str| -> Vec<String> {
        post(ct)
            .into_iter()
            .filter_map(|r| match r {
                ParamsBody::Multipart(b) => Some(b.to_string()),
                _ => None,
            })
            .collect()
    };
    // PHP takes the first `boundary` anywhere; the parameter is another.
    assert_eq!(
        boundaries("multipart/form-data; xboundary=A; boundary=B"),
        ["A", "B"]
    );
    // Rack stops at `,`; a parameter reader does not.
    assert_eq!(
        boundaries("multipart/form-data; boundary=B,junk"),
        ["B", "B,junk"]
    );
    // Werkzeug takes the last of two, busboy the first; quoted with escapes undone.
    assert_eq!(
        boundaries("multipart/form-data; boundary=A; boundary=B"),
        ["A", "B"]
    );
    assert_eq!(
        boundaries("multipart/form-data; boundary=\"a\\\"b\""),
        ["a\\", "a\"b"]
    );
    // PHP keeps a space after `=`; Rack's pattern takes the last `boundary=`.
    assert_eq!(boundaries("multipart/form-data; boundary= B"), [" B", "B"]);
    assert_eq!(
        boundaries("multipart/form-data; boundary=A; x=1; boundary=C"),
        ["A", "C"]
    );
    // One line with six readings, every one kept.
    let six = boundaries("multipart/form-data; xboundary=P; boundary=F; boundary=L; boundary*=UTF-8''S; boundary*0=J; q=\"boundary=R\"");
    for b in ["P", "F", "L", "S", "J"] {
        assert!(six.contains(&b.to_owned()), "{b} in {six:?}");
    }
    // More readings than are read: refused, not a reading left out.
    let mut headers = HeaderMap::new();
    for i in 0..5 {
        let value = format!("multipart/form-data; xboundary=a{i}; boundary=b{i}");
        headers.append(CONTENT_TYPE, value.parse().expect("value"));
    }
    assert_eq!(readings(&Method::POST, &headers), None);
}

#[test]
fn a_delimiter_line_werkzeug_reads_as_data_and_django_splits_inside_a_line() {
    // `--bZ` at a line start splits the part for PHP, not for Werkzeug: both readings.
    let hidden =
        b"--b\r\nContent-Disposition: form-data; name=\"api_key\"\r\n--bZ\r\n\r\nK\r\n--b--";
    assert!(values_of(hidden, "b", "api_key").iter().any(|v| v == "K"));
    // Django finds the delimiter inside a line.
    let inline = b"--b\r\nContent-Disposition: form-data; name=a\r\n\r\nx--b\r\nContent-Disposition: form-data; name=api_key\r\n\r\nK\r\n--b--";
    assert_eq!(values_of(inline, "b", "api_key"), ["K"]);
    // Names from every disposition line; an upload only if every reading says so.
    let two = b"--b\r\nContent-Disposition: form-data; name=x\r\nContent-Disposition: form-data; name=api_key\r\n\r\nK\r\n--b\r\nContent-Disposition: form-data; name=k2; x=\"\\\"; filename=f; y=\\\"\"\r\n\r\nV\r\n--b--";
    assert_eq!(values_of(two, "b", "api_key"), ["K"]);
    assert_eq!(values_of(two, "b", "k2"), ["V"]);
}

#[test]
fn parts_split_under_every_readers_line_breaks() {
    let body = b"junk--XX\r\nContent-Disposition: form-data; name=\"api_key\"\r\n\r\nk1\r\n--XX\r\ncontent-disposition: form-data; name=\"upload\"; filename=\"a.txt\"\r\n\r\nfile\r\n--XX\nContent-Disposition: form-data; name=other\n\nline one\nline two\r--XX\rContent-Disposition: form-data; name=cr\r\rv\r\n--XX--\r\n";
    assert_eq!(values_of(body, "XX", "api_key"), ["k1"]);
    assert_eq!(values_of(body, "XX", "other"), ["line one\nline two"]);
    assert_eq!(values_of(body, "XX", "cr"), ["v"]);
    assert!(
        values_of(body, "XX", "upload").is_empty(),
        "an upload is no field"
    );
    // PHP reads past a closing delimiter and a last part to the body's end.
    let reopened = b"--B\r\nContent-Disposition: form-data; name=a\r\n\r\nx\r\n--B--\r\n--B\r\nContent-Disposition: form-data; name=api_key\r\n\r\nK";
    assert_eq!(values_of(reopened, "B", "api_key"), ["K"]);
    // `--B` inside a line is data to most readers; Django splits there: both values.
    let inside = b"--B\r\nContent-Disposition: form-data; name=a\r\n\r\nx--By\r\n--B--";
    assert_eq!(values_of(inside, "B", "a"), ["x--By", "x"]);
    assert!(fields_of(b"no delimiter at all", "B").is_empty());
    assert!(fields_of(b"--B", "B").is_empty());
}

#[test]
fn a_name_is_read_every_way_a_reader_reads_it() {
    let names = |disposition: &str| -> Vec<String> {
        let body = format!("--b\r\nContent-Disposition: {disposition}\r\n\r\nv\r\n--b--");
        fields_of(body.as_bytes(), "b")
            .into_iter()
            .map(|(n, _)| n)
            .collect()
    };
    for (disposition, name) in [
        ("form-data; name=\"api\\_key\"", "api_key"),
        ("form-data; name=\"api\\_key\"", "api\\_key"),
        ("form-data; name*=UTF-8''api%5Fkey", "api_key"),
        ("form-data; NAME=api_key", "api_key"),
        ("form-data; name='api_key'", "api_key"),
        ("form-data; name=api_key x", "api_key"),
        ("form-data; name=\" api_key \"", "api_key"),
        ("form-data; name*0=\"api\"; name*1=\"_key\"", "api_key"),
        // busboy and Django take an empty filename as a field, Rack `FILENAME`.
        ("form-data; name=api_key; filename=\"\"", "api_key"),
        ("form-data; name=api_key; FILENAME=x", "api_key"),
        ("form-data; name=api_key; filename*=UTF-8''x", "api_key"),
    ] {
        assert!(
            names(disposition).iter().any(|n| n == name),
            "{disposition}: {:?}",
            names(disposition)
        );
    }
    // A folded header, a colon-less line PHP appends, bytes that are no UTF-8.
    let folded = b"--b\r\nContent-Disposition: form-data;\r\n name=\"api_key\"\r\n\r\nv\r\n--b\r\nContent-Disposition: form-data; name=\"zz\"\n; name=\"k2\"\r\n\r\nw\r\n--b\r\nContent-Disposition: form-data; name=\"k3\"; x=\"\xff\"\r\n\r\nu\r\n--b--";
    assert_eq!(values_of(folded, "b", "api_key"), ["v"]);
    assert_eq!(values_of(folded, "b", "k2"), ["w"]);
    assert_eq!(values_of(folded, "b", "k3"), ["u"]);
    // Rack's Content-ID, Django's base64.
    let other = b"--b\r\nContent-ID: api_key\r\n\r\nv\r\n--b\r\nContent-Disposition: form-data; name=k\r\nContent-Transfer-Encoding: base64\r\n\r\nYWxpY2U=\r\n--b--";
    assert_eq!(values_of(other, "b", "api_key"), ["v"]);
    assert_eq!(values_of(other, "b", "k"), ["YWxpY2U=", "alice"]);
}

#[test]
fn any_arrangement_of_multipart_pieces_parses_without_panicking() {
    let pieces: [&[u8]; 16] = [
        b"--b",
        b"--b--",
        b"\r\n",
        b"\n",
        b"\r",
        b"Content-Disposition: form-data; ",
        b"name=\"",
        b"\"",
        b"\\",
        b";",
        b"filename=x",
        b"name*0=UTF-8''a%5",
        b"''",
        b"k",
        "\u{e9}".as_bytes(),
        b"Content-Transfer-Encoding: base64",
    ];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20_000 {
        let mut body = Vec::new();
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let mut bits = state;
        for _ in 0..(state % 24) {
            body.extend_from_slice(pieces[(bits % 16) as usize]);
            bits = bits.rotate_right(5);
        }
        let within = body.as_ptr_range();
        let _: Result<(), ()> = fields(&body, "b", &mut |(names, value)| {
            // A value is a slice of the body, or a base64 part decoded (shorter); every
            // field handed over has a name.
            match &value {
                std::borrow::Cow::Borrowed(v) => {
                    assert!(v.is_empty() || within.contains(&v.as_ptr()));
                }
                std::borrow::Cow::Owned(v) => assert!(v.len() <= body.len()),
            }
            assert!(!names.is_empty());
            Ok(())
        });
    }
}

/// The charset `foreign_charset` names for a one-part body: the part's `head` lines and
/// its `value`.
fn foreign(head: &str, value: &[u8]) -> Option<String> {
    let mut body = format!("--b\r\n{head}\r\n\r\n").into_bytes();
    body.extend_from_slice(value);
    body.extend_from_slice(b"\r\n--b--\r\n");
    foreign_charset(&body, "b")
}

/// A text field's head.
const FIELD: &str = "Content-Disposition: form-data; name=\"api_key\"";

/// A text field's head naming `charset` in its Content-Type.
fn typed(charset: &str) -> String {
    format!("{FIELD}\r\nContent-Type: text/plain; charset={charset}")
}

#[test]
fn a_text_field_in_a_charset_other_than_utf_8_is_named() {
    // Its part's Content-Type, as busboy, Werkzeug and Django read the value (base64 too),
    // in any case and spacing, and a spelling readers take apart differently.
    for (charset, named) in [
        ("utf-16le", "utf-16le"),
        ("base64", "base64"),
        ("\"cp500\"", "cp500"),
    ] {
        assert_eq!(
            foreign(&typed(charset), b"v").as_deref(),
            Some(named),
            "{charset}"
        );
        let spaced = format!("{FIELD}\r\nContent-Type: text/plain; ChArSeT = {charset}");
        assert_eq!(foreign(&spaced, b"v").as_deref(), Some(named), "{charset}");
    }
    // Python keeps a quoted `;` in the value: `utf-8;sig` is utf_8_sig to it.
    let quoted = typed("\"utf-8;sig\"");
    assert_eq!(foreign(&quoted, b"v").as_deref(), Some("charset=\"utf-8"));
    let continued = format!("{FIELD}\r\nContent-Type: text/plain; charset*0=iso-8859-1");
    assert_eq!(
        foreign(&continued, b"v").as_deref(),
        Some("charset*0=iso-8859-1")
    );
    // ASCII and Latin-1 hold while the value is ASCII (Apache HttpClient's default).
    assert_eq!(foreign(&typed("ISO-8859-1"), b"alice"), None);
    assert_eq!(
        foreign(&typed("ISO-8859-1"), b"caf\xe9").as_deref(),
        Some("ISO-8859-1")
    );
    assert_eq!(
        foreign(&typed("us-ascii"), b"caf\xe9").as_deref(),
        Some("us-ascii")
    );
}

#[test]
fn a_fields_name_or_byte_order_mark_names_its_charset_and_an_upload_none() {
    // An RFC 2231 name's charset, escapes decoded first (Django), an empty one as Latin-1.
    for (head, named) in [
        ("form-data; name*=utf-16le''a%00p%00i%00", "utf-16le"),
        ("form-data; name*=utf-16le%27%27a%00p%00i%00", "utf-16le"),
        ("form-data; name*0*=UTF-32''a", "UTF-32"),
        ("form-data; name*=''api_k%E9y", "name*=''"),
    ] {
        let head = format!("Content-Disposition: {head}");
        assert_eq!(foreign(&head, b"v").as_deref(), Some(named), "{head}");
    }
    // A byte-order mark starting the value, as ASP.NET Core reads it.
    assert_eq!(
        foreign(FIELD, b"\xff\xfea\x00").as_deref(),
        Some("byte-order mark")
    );
    // UTF-8, an RFC 2231 name in UTF-8, and no charset at all: read as bytes.
    for head in [
        FIELD.to_owned(),
        typed("UTF-8"),
        "Content-Disposition: form-data; name*=UTF-8''api%5Fkey".to_owned(),
    ] {
        assert_eq!(foreign(&head, "café".as_bytes()), None, "{head}");
    }
    // An upload's charset is its file's, not a parameter's; a part whose filenames
    // disagree (busboy keeps the first, empty: a field) is no upload.
    let upload = "Content-Disposition: form-data; name=\"f\"; filename=\"a.csv\"\r\nContent-Type: text/csv; charset=utf-16";
    assert_eq!(foreign(upload, b"\xe9"), None);
    let both = "Content-Disposition: form-data; name=\"api_key\"; filename=\"\"; filename=\"x\"\r\nContent-Type: text/plain; charset=utf-16";
    assert_eq!(foreign(both, b"v").as_deref(), Some("utf-16"));
    // A later part under another split is read too.
    let later = format!(
        "--b\r\n{FIELD}\r\n\r\nx\r\n--b\r\n{}\r\n\r\ny\r\n--b--",
        typed("utf-16")
    );
    assert_eq!(
        foreign_charset(later.as_bytes(), "b").as_deref(),
        Some("utf-16")
    );
}

#[test]
fn a_field_named_with_filenames_that_disagree_is_a_field() {
    let body = "--b\r\nContent-Disposition: form-data; name=\"api_key\"; filename=\"\"; filename=\"x\"\r\n\r\nk\r\n--b--\r\n";
    assert_eq!(values_of(body.as_bytes(), "b", "api_key"), ["k"]);
}
