"""The official `openai` client through tollgate: one chat completion answered as JSON, one
streamed with its usage as the last event, a Responses API call of each kind, then one the
budget no longer covers. Prints
what the client got, as JSON, for the Rust test to price (tests/integration/spend_race.rs).

    python3 openai_client.py BASE_URL API_KEY
"""
import json
import sys

import openai

base_url, api_key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(
    base_url=base_url,
    api_key="sk-unused",
    default_headers={"x-api-key": api_key},
    max_retries=0,
    timeout=60,
)
got = {}

answer = client.chat.completions.create(
    model="mini",
    max_tokens=50,
    messages=[{"role": "user", "content": "7 words please"}],
)
got["json"] = {"model": "mini", **answer.usage.model_dump(include={"prompt_tokens", "completion_tokens"})}

usage = None
stream = client.chat.completions.create(
    model="big",
    max_tokens=50,
    messages=[{"role": "user", "content": "9 words please"}],
    stream=True,
    stream_options={"include_usage": True},
)
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage.model_dump(include={"prompt_tokens", "completion_tokens"})
got["stream"] = {"model": "big", **usage}

# The Responses API: JSON, then streamed (its usage in `response.completed`).
answer = client.responses.create(model="mini", input="6 words please", max_output_tokens=50)
got["responses_json"] = {
    "model": "mini",
    "prompt_tokens": answer.usage.input_tokens,
    "completion_tokens": answer.usage.output_tokens,
}
usage = None
for event in client.responses.create(
    model="big",
    input=[{"role": "user", "content": "8 words please"}],
    max_output_tokens=50,
    stream=True,
):
    if event.type == "response.completed":
        usage = event.response.usage
got["responses_stream"] = {
    "model": "big",
    "prompt_tokens": usage.input_tokens,
    "completion_tokens": usage.output_tokens,
}

try:
    client.chat.completions.create(
        model="big",
        max_tokens=100_000,
        messages=[{"role": "user", "content": "1 word"}],
    )
    got["refused"] = None
except openai.RateLimitError as e:
    got["refused"] = {
        "status": e.status_code,
        "retry_after": e.response.headers.get("retry-after"),
        "error": e.body.get("error") if isinstance(e.body, dict) else e.body,
    }

print(json.dumps(got))
