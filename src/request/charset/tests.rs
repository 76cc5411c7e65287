use super::*;

fn of(lines: &[&[u8]]) -> Charset {
    let mut headers = HeaderMap::new();
    for line in lines {
        let value = http::HeaderValue::from_bytes(line).expect("header value");
        headers.append(CONTENT_TYPE, value);
    }
    of_request(&headers)
}

fn foreign(named: &str) -> Charset {
    Charset::Foreign(named.to_owned())
}

#[test]
fn utf_8_in_any_plain_spelling_is_read_as_bytes() {
    for line in [
        &b"application/x-www-form-urlencoded"[..],
        b"application/x-www-form-urlencoded; charset=utf-8",
        b"application/x-www-form-urlencoded;charset=UTF-8",
        b"application/json; charset=\"utf-8\"",
        b"text/plain; charset = utf8",
        b"text/plain; CHARSET=UTF_8",
        b"multipart/form-data; boundary=XyZ",
    ] {
        assert_eq!(
            of(&[line]),
            Charset::Utf8,
            "{}",
            String::from_utf8_lossy(line)
        );
    }
    assert_eq!(of(&[]), Charset::Utf8);
}

#[test]
fn ascii_and_latin_1_hold_for_ascii_bytes_only() {
    let latin = of(&[b"application/x-www-form-urlencoded; charset=ISO-8859-1"]);
    assert_eq!(latin, Charset::AsciiOnly("ISO-8859-1".into()));
    assert_eq!(latin.refusal(b"api_key=alice&x=%41%7e"), None);
    assert_eq!(latin.refusal(b"api_key=caf%E9"), Some("ISO-8859-1"));
    assert_eq!(latin.refusal(b"api_key=caf%c3%a9"), Some("ISO-8859-1"));
    assert_eq!(latin.refusal("api_key=café".as_bytes()), Some("ISO-8859-1"));
    for name in ["us-ascii", "ASCII", "windows-1252", "cp1252", "latin1"] {
        let line = format!("text/plain; charset={name}");
        assert_eq!(of(&[line.as_bytes()]), Charset::AsciiOnly(name.into()));
    }
}

#[test]
fn every_other_charset_or_spelling_is_refused_as_written() {
    for (line, named) in [
        (
            &b"application/x-www-form-urlencoded; charset=utf-16"[..],
            "utf-16",
        ),
        (b"application/json; charset=UTF-32LE", "UTF-32LE"),
        (b"application/json; charset=\"cp500\"", "cp500"),
        (b"text/plain; charset=utf-8-sig", "utf-8-sig"),
        // Spellings readers take differently: refused whole.
        (b"text/plain; charset=\"utf-8;sig\"", "charset=\"utf-8"),
        (b"text/plain; charset=utf-8,sig", "charset=utf-8,sig"),
        (b"text/plain; \xa0charset=utf-16", "\u{fffd}charset=utf-16"),
        (b"text/plain; charset\xa0=utf-16", "charset\u{fffd}=utf-16"),
        (
            b"text/plain; charset*=utf-8''utf%2D16",
            "charset*=utf-8''utf%2D16",
        ),
        (b"text/plain; charset*0=utf-16", "charset*0=utf-16"),
        (b"text/plain; xcharset=utf-16", "xcharset=utf-16"),
        (b"text/plain; x=charset=utf-16", "x=charset=utf-16"),
        (
            b"multipart/form-data; boundary=charset=utf-16",
            "boundary=charset=utf-16",
        ),
        (b"text/plain charset=utf-16", "text/plain charset=utf-16"),
        (b"text/plain; charset=", "charset="),
        (b"text/plain; charset=\"utf-8", "charset=\"utf-8"),
    ] {
        let text = String::from_utf8_lossy(line);
        assert_eq!(of(&[line]), foreign(named), "{text}");
        assert_eq!(of(&[line]).refusal(b"ascii"), Some(named), "{text}");
    }
}

#[test]
fn every_line_is_read_and_the_strictest_holds() {
    let lines: [&[u8]; 3] = [
        b"text/plain; charset=utf-8",
        b"text/plain; charset=latin1",
        b"text/plain; charset=utf-16",
    ];
    assert_eq!(of(&lines), foreign("utf-16"));
    assert_eq!(of(&lines[..2]), Charset::AsciiOnly("latin1".into()));
}
