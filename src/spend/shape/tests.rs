//! What bodies of each API say of their cost beyond their bytes.

use super::{body_shape, BodyShape};

fn carries_media(json: &[u8]) -> bool {
    body_shape(json).beyond
}

#[test]
fn text_alone_carries_none() {
    for text in [
        r#"{"model":"m","messages":[{"role":"user","content":"describe an image"}]}"#,
        r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"image_url"}]}]}"#,
        r#"{"model":"m","input":[{"type":"message","content":[{"type":"input_text","text":"file"}]}]}"#,
        r#"{"model":"m","tools":[{"type":"function","function":{"name":"file"}}]}"#,
        r#"{"model":"m","response_format":{"type":"json_schema"}}"#,
    ] {
        assert!(!carries_media(text.as_bytes()), "{text}");
    }
}

#[test]
fn images_audio_files_and_documents_are_found_however_spelled() {
    for media in [
        // OpenAI Chat Completions
        r#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/a.png"}}]}]}"#,
        r#"{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAA","format":"wav"}}]}]}"#,
        r#"{"messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-1"}}]}]}"#,
        r#"{"messages":[{"role":"assistant","audio":{"id":"audio_1"}}]}"#,
        // OpenAI Responses
        r#"{"input":[{"role":"user","content":[{"type":"input_image","image_url":"https://x/a.png"}]}]}"#,
        r#"{"input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}]}"#,
        // Anthropic Messages
        r#"{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x"}}]}]}"#,
        r#"{"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"f"}}]}]}"#,
        // Gemini
        r#"{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"AAA"}}]}]}"#,
        r#"{"contents":[{"parts":[{"file_data":{"file_uri":"gs://b/o"}}]}]}"#,
        // vLLM and SGLang; Ollama's native chat
        r#"{"messages":[{"role":"user","content":[{"type":"video_url","video_url":{"url":"u"}}]}]}"#,
        r#"{"messages":[{"role":"user","content":[{"type":"audio_url","audio_url":{"url":"u"}}]}]}"#,
        r#"{"messages":[{"role":"user","content":"what is this","images":["AAAA"]}]}"#,
        // Escaped, nested, after a text part, a part without its type
        r#"{"messages":[{"content":[{"type":"text","text":"hi"},{"type":"image\u005furl","image\u005furl":{"url":"u"}}]}]}"#,
        r#"{"messages":[{"content":[{"image_url":{"url":"u"}}]}]}"#,
        r#"{"a":{"b":[[{"c":{"type":"input_audio"}}]]}}"#,
    ] {
        assert!(carries_media(media.as_bytes()), "{media}");
    }
}

#[test]
fn what_does_not_parse_or_nests_too_deep_counts_as_media() {
    assert!(carries_media(b"{\"messages\": ["));
    let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
    assert!(carries_media(deep.as_bytes()));
}

#[test]
fn what_the_upstream_keeps_or_multiplies_is_beyond_the_body() {
    for beyond in [
        r#"{"model":"m","input":"go on","previous_response_id":"resp_1"}"#,
        r#"{"model":"m","input":"go on","Previous_Response_ID":"resp_1"}"#,
        r#"{"model":"m","input":"hi","conversation":{"id":"conv_1"}}"#,
        r#"{"model":"m","prompt":{"id":"pmpt_1","version":"2"}}"#,
        r#"{"model":"m","input":"hi","background":true}"#,
        r#"{"requests":[{"custom_id":"a","params":{"model":"m","max_tokens":9}}]}"#,
        r#"{"model":"m","prompt":"once","best_of":4}"#,
        r#"{"model":"m","messages":[],"prediction":{"type":"content","content":"0123456789"}}"#,
        r#"{"contents":[],"cachedContent":"cachedContents/x"}"#,
        r#"{"contents":[],"generationConfig":{"candidateCount":8}}"#,
        r#"{"model":"m","prompt":["one","two"],"max_tokens":9}"#,
        r#"{"model":"m","prompt":[[1,2],[3,4]],"max_tokens":9}"#,
        r#"{"model":"m","prompt":["one",{"text":"two"}],"max_tokens":9}"#,
        r#"{"model":"m","input":[{"type":"item_reference","id":"msg_1"}]}"#,
        r#"{"model":"m","input":"hi","tools":[{"type":"web_search_preview"}]}"#,
        r#"{"model":"m","messages":[],"tools":[{"type":"web_fetch_20250910","name":"web_fetch"}]}"#,
        r#"{"contents":[],"tools":[{"googleSearch":{}}]}"#,
        r#"{"model":"m","messages":[],"web_search_options":{}}"#,
        r#"{"model":"m","messages":[],"mcp_servers":[{"type":"url","url":"u"}]}"#,
        r#"{"model":"m","messages":[],"container":{"skills":[{"skill_id":"s"}]}}"#,
        r#"{"model":"m","messages":[],"chat_template_kwargs":{"chat_template":"{% for i in range(9) %}x{% endfor %}"}}"#,
        r#"{"model":"m","messages":[],"chat_template":"{{ messages }}"}"#,
        // SGLang's native batches: one generation a prompt.
        r#"{"text":["one","two"],"sampling_params":{"max_new_tokens":9}}"#,
        r#"{"input_ids":[[1,2],[3,4]]}"#,
        r#"{"text":"what is this","image_data":"https://example.com/cat.png"}"#,
        r#"{"model":"m","messages":[],"Chat_Template_Kwargs":{"CHAT_TEMPLATE":"{{ x }}"}}"#,
        // Go's readers fold member names at every level.
        r#"{"messages":[{"content":[{"Type":"text","IMAGE_URL":{"url":"u"}}]}]}"#,
        r#"{"messages":[{"content":[{"TYPE":"input_audio"}]}]}"#,
        r#"{"contents":[{"parts":[{"InlineData":{"data":"AAA"}}]}]}"#,
        r#"{"contents":[],"tools":[{"googleſearch":{}}]}"#,
    ] {
        assert!(carries_media(beyond.as_bytes()), "{beyond}");
    }
    for within in [
        r#"{"model":"m","input":"hi","previous_response_id":null,"background":false}"#,
        r#"{"model":"m","prompt":"once upon a time"}"#,
        r#"{"model":"m","messages":[],"tools":[{"type":"function","function":{"parameters":{"properties":{"conversation":{},"requests":{}}}}}]}"#,
        r#"{"contents":[],"generationConfig":{"maxOutputTokens":8}}"#,
        r#"{"model":"m","prompt":["one"],"max_tokens":9}"#,
        r#"{"text":"one","sampling_params":{"max_new_tokens":9}}"#,
        r#"{"input_ids":[1,2,3]}"#,
        r#"{"model":"m","input":"hi","text":{"format":{"type":"text"}}}"#,
        r#"{"model":"m","messages":[],"chat_template_kwargs":{"enable_thinking":false}}"#,
        r#"{"model":"m","messages":[],"chat_template_kwargs":{}}"#,
        r#"{"model":"m","messages":[],"chat_template_kwargs":{"chat_template":null}}"#,
        r#"{"model":"m","prompt":[1,2,3],"max_tokens":9}"#,
        r#"{"model":"m","messages":[],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"image_url":{"type":"string"},"audio":{"type":"file"}}}}}]}"#,
        r#"{"model":"m","input":"hi","text":{"format":{"type":"json_schema","schema":{"properties":{"file":{"type":"image"}}}}}}"#,
    ] {
        assert!(!carries_media(within.as_bytes()), "{within}");
    }
}

#[test]
fn an_output_limit_belongs_to_the_api_its_body_speaks() {
    let shape = |json: &str| body_shape(json.as_bytes());
    let chat = BodyShape {
        chat: true,
        ..BodyShape::default()
    };
    let responses = BodyShape {
        responses: true,
        ..BodyShape::default()
    };
    assert_eq!(shape(r#"{"messages":[],"max_tokens":9}"#), chat);
    assert_eq!(shape(r#"{"prompt":["a"],"max_tokens":9}"#), chat);
    assert_eq!(shape(r#"{"input":"a","max_output_tokens":9}"#), responses);
    assert!(shape(r#"{"messages":[],"input":"a"}"#).chat);
    assert!(shape(r#"{"messages":[],"input":"a"}"#).responses);
    for folded in [
        r#"{"messages":[],"MAX_TOKENS":1}"#,
        r#"{"messages":[],"max_to\u212Aens":1}"#,
        r#"{"input":"a","Max_Output_Tokens":1}"#,
        r#"{"messages":[],"N":1}"#,
        r#"{"messages":[],"max_tokens":5,"max_tokens":null}"#,
        r#"{"messages":[],"n":2,"n":1}"#,
        r#"{"messages":[],"max_tokens":1,"n_predict":-1}"#,
        r#"{"messages":[],"max_tokens":1,"options":{"num_predict":-1}}"#,
        r#"{"messages":[],"max_tokens":1,"Max_New_Tokens":9}"#,
        r#"{"inputs":"a","messages":[],"max_tokens":1,"parameters":{"max_new_tokens":4096}}"#,
        r#"{"text":"a","messages":[],"max_tokens":1,"sampling_params":{"max_new_tokens":4096}}"#,
    ] {
        assert!(shape(folded).unsure_limit, "{folded}");
    }
    assert!(!shape(r#"{"messages":[],"max_tokens":1,"n":2}"#).unsure_limit);
}

/// Gemini's OpenAI-compatible API reads provider settings from a literal `extra_body`
/// member (`extra_body.google.cached_content`, its documented spelling), and a proxy that
/// merges `extra_body` into the request it sends on reads the limits there: what the
/// body keeps or limits there is read as at the top level.
#[test]
fn what_extra_body_carries_is_read_as_the_top_level() {
    for beyond in [
        r#"{"model":"gemini-2.5-flash","messages":[],"extra_body":{"google":{"cached_content":"cachedContents/x"}}}"#,
        r#"{"model":"m","messages":[],"extra_body":{"cachedContent":"cachedContents/x"}}"#,
        r#"{"model":"m","messages":[],"Extra_Body":{"Google":{"Cached_Content":"c"}}}"#,
        r#"{"model":"m","messages":[],"extra_body":{"best_of":4}}"#,
        r#"{"model":"m","messages":[],"extra_body":{"google":{"generation_config":{"candidate_count":8}}}}"#,
        r#"{"model":"m","messages":[],"extra_body":{"chat_template_kwargs":{"chat_template":"{{ x }}"}}}"#,
    ] {
        assert!(carries_media(beyond.as_bytes()), "{beyond}");
    }
    for within in [
        r#"{"model":"m","messages":[],"extra_body":{"google":{"thinking_config":{"include_thoughts":true}}}}"#,
        r#"{"model":"m","messages":[],"extra_body":{"google":{"cached_content":null}}}"#,
        r#"{"model":"m","messages":[],"metadata":{"google":{"cached_content":"c"}}}"#,
    ] {
        assert!(!carries_media(within.as_bytes()), "{within}");
    }
    for unsure in [
        r#"{"messages":[],"max_tokens":9,"extra_body":{"max_tokens":100000}}"#,
        r#"{"messages":[],"max_tokens":9,"extra_body":{"google":{"max_output_tokens":100000}}}"#,
        r#"{"messages":[],"n":1,"extra_body":{"n":8}}"#,
        r#"{"messages":[],"max_tokens":9,"extra_body":{"options":{"num_predict":-1}}}"#,
    ] {
        assert!(body_shape(unsure.as_bytes()).unsure_limit, "{unsure}");
    }
}
