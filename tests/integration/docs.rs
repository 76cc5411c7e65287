//! The docs checked against the binary: every field the config reader accepts is in
//! configuration.md's table of fields at a glance, under its table.

/// The fields the reader accepts in `table` (a header, or "" for the top level), as its
/// "unknown field" error lists them.
fn accepted(table: &str, required: &str) -> Vec<String> {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{table}\n{required}\nnot_a_field_at_all = 1\n"
    );
    let err = tollgate::config::compile(std::path::Path::new("t.toml"), &text)
        .expect_err("an unknown field")
        .to_string();
    let list = err
        .split("expected one of ")
        .nth(1)
        .unwrap_or_else(|| panic!("{table}: {err}"));
    let list = list.lines().next().unwrap_or_default();
    list.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// configuration.md's rows at a glance: (table, fields named in the field column).
fn documented() -> Vec<(String, Vec<String>)> {
    let doc = std::fs::read_to_string("docs/configuration.md").expect("configuration.md");
    let start = doc
        .find("| table | field | default |")
        .expect("the table at a glance");
    let mut rows = Vec::new();
    let mut table = String::new();
    for line in doc[start..].lines().skip(2) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if !cells[1].is_empty() {
            table = cells[1].trim_matches('`').to_owned();
        }
        let fields = cells[2]
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        rows.push((table.clone(), fields));
    }
    rows
}

#[test]
fn every_accepted_field_is_in_the_table_at_a_glance() {
    let rows = documented();
    let tables = [
        ("[server]", "", ""),
        ("[server.tls]", "[server.tls]", "cert = \"c\"\nkey = \"k\""),
        ("[store]", "[store]", ""),
        (
            "[upstreams.NAME]",
            "[upstreams.a]",
            "targets = [\"http://127.0.0.1:1\"]",
        ),
        ("[policies.NAME]", "[policies.p]", "key = \"ip\""),
        (
            "[[routes]]",
            "[[routes]]",
            "name = \"r\"\npath = \"/\"\nupstream = \"a\"",
        ),
        ("[rls]", "[rls]", "listen = \"127.0.0.1:1\""),
        (
            "[[rls.rules]]",
            "[rls]\nlisten = \"127.0.0.1:1\"\n[[rls.rules]]",
            "domain = \"d\"\ndescriptor = [\"k\"]\npolicy = \"p\"",
        ),
        (
            "[[rlqs.buckets]]",
            "[[rlqs.buckets]]",
            "domain = \"d\"\nbucket = [\"k\"]\npolicy = \"p\"",
        ),
        (
            "[telemetry]",
            "[telemetry]",
            "otlp_endpoint = \"http://127.0.0.1:4317\"",
        ),
    ];
    let mut missing = Vec::new();
    for (doc_table, header, required) in tables {
        // [server]'s own fields: the unknown field goes in [server] itself.
        let fields = if header.is_empty() {
            accepted("", "")
        } else {
            accepted(header, required)
        };
        assert!(fields.len() >= 2, "{doc_table}: {fields:?}");
        for field in fields {
            let listed = rows
                .iter()
                .any(|(t, fs)| t == doc_table && fs.contains(&field));
            if !listed {
                missing.push(format!("{doc_table} {field}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "fields the config accepts but configuration.md's table at a glance does not list: {missing:?}"
    );
}
