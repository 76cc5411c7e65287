use super::*;

fn names_and_values(body: &[u8], boundary: &str) -> Vec<(Vec<String>, String)> {
    multipart_fields(body, boundary)
        .into_iter()
        .map(|f| {
            let names = f.names.iter().map(|n| n.to_string()).collect();
            (names, String::from_utf8_lossy(f.value).into_owned())
        })
        .collect()
}

fn content_type(value: &str) -> Option<ParamsBody> {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, value.parse().expect("header value"));
    ParamsBody::of(&headers)
}

#[test]
fn content_types_frameworks_read_parameters_from() {
    let form = Some(ParamsBody::Form);
    assert_eq!(content_type("application/x-www-form-urlencoded"), form);
    assert_eq!(
        content_type("Application/X-WWW-Form-URLEncoded; charset=UTF-8"),
        form
    );
    assert_eq!(
        content_type("multipart/form-data; boundary=\"a b\""),
        Some(ParamsBody::Multipart("a b".into()))
    );
    assert_eq!(
        content_type("multipart/form-data; charset=utf-8; BOUNDARY=xyz"),
        Some(ParamsBody::Multipart("xyz".into()))
    );
    assert_eq!(content_type("multipart/form-data"), None);
    assert_eq!(content_type("application/json"), Some(ParamsBody::Json));
    assert_eq!(
        content_type("application/vnd.api+json"),
        Some(ParamsBody::Json)
    );
    assert_eq!(content_type("text/x-json"), Some(ParamsBody::Json));
    assert_eq!(content_type("text/plain"), None);
    assert_eq!(ParamsBody::of(&HeaderMap::new()), None);
    // A value that is no visible ASCII, and a second line that names a form.
    let mut headers = HeaderMap::new();
    let latin1 = http::HeaderValue::from_bytes(b"application/x-www-form-urlencoded; charset=\xe9")
        .expect("value");
    headers.insert(CONTENT_TYPE, latin1);
    assert_eq!(ParamsBody::of(&headers), Some(ParamsBody::Form));
    let mut headers = HeaderMap::new();
    headers.append(CONTENT_TYPE, "text/plain".parse().expect("value"));
    headers.append(
        CONTENT_TYPE,
        "multipart/form-data; boundary=b".parse().expect("value"),
    );
    assert_eq!(
        ParamsBody::of(&headers),
        Some(ParamsBody::Multipart("b".into()))
    );
}

#[test]
fn text_fields_with_crlf_or_bare_lf_and_files_left_out() {
    let body = b"preamble\r\n--XX\r\nContent-Disposition: form-data; name=\"api_key\"\r\n\r\nk1\r\n--XX\r\ncontent-disposition: form-data; name=\"upload\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\nfile body\r\n--XX\nContent-Disposition: form-data; name=other\n\nline one\nline two\n--XX--\r\n";
    assert_eq!(
        names_and_values(body, "XX"),
        vec![
            (vec!["api_key".to_owned()], "k1".to_owned()),
            (vec!["other".to_owned()], "line one\nline two".to_owned()),
        ]
    );
}

#[test]
fn a_name_is_read_as_written_unescaped_and_extended() {
    let body = b"--b\r\nContent-Disposition: form-data; name=\"api\\_key\"\r\n\r\nk1\r\n--b\r\nContent-Disposition: form-data; name*=UTF-8''api%5Fkey\r\n\r\nk2\r\n--b--";
    assert_eq!(
        names_and_values(body, "b"),
        vec![
            (
                vec!["api\\_key".to_owned(), "api_key".to_owned()],
                "k1".to_owned()
            ),
            (vec!["api_key".to_owned()], "k2".to_owned()),
        ]
    );
}

#[test]
fn a_delimiter_inside_a_value_does_not_end_it_and_a_cut_body_keeps_whole_parts() {
    // `--b` inside a line is data; only one that begins a line is a delimiter.
    let body = b"--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx--by\r\n--b\r\nContent-Disposition: form-data; name=\"c\"\r\n\r\nunfinished";
    assert_eq!(
        names_and_values(body, "b"),
        vec![(vec!["a".to_owned()], "x--by".to_owned())]
    );
    assert!(multipart_fields(b"no delimiter at all", "b").is_empty());
    assert!(multipart_fields(b"--b", "b").is_empty());
}

#[test]
fn any_arrangement_of_multipart_pieces_parses_without_panicking() {
    let pieces: [&[u8]; 14] = [
        b"--b",
        b"--b--",
        b"\r\n",
        b"\n",
        b"Content-Disposition: form-data; ",
        b"name=\"",
        b"\"",
        b"\\",
        b";",
        b"filename=x",
        b"name*=UTF-8''a%5",
        b"''",
        b"k",
        "\u{e9}".as_bytes(),
    ];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20_000 {
        let mut body = Vec::new();
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let mut bits = state;
        for _ in 0..(state % 24) {
            body.extend_from_slice(pieces[(bits % 14) as usize]);
            bits = bits.rotate_right(5);
        }
        for field in multipart_fields(&body, "b") {
            // A value lies within the body; a file never comes back.
            assert!(field.value.len() <= body.len());
            assert!(!field.names.is_empty());
        }
    }
}
