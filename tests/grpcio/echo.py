"""grpcio (gRPC's C core, Python API) on both sides of the gateway: `server PORT` serves
test.Echo; `client TARGET [TENANT]` calls it through the gateway and checks every call
kind, errors with trailing metadata, trailers, a deadline, and (with TENANT, on a route
that allows two calls per tenant) a refusal answered RESOURCE_EXHAUSTED with
grpc-retry-pushback-ms. Prints one line per check; exits 1 at the first that fails.

The messages are test.Echo's Msg (text = 1, count = 2, delay_ms = 3), encoded by hand:
no protoc and no generated code, the same wire format as the Rust tests' tonic service.
"""

import sys
import time
from concurrent import futures

import grpc


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode(text="", count=0, delay_ms=0):
    out = b""
    if text:
        raw = text.encode()
        out += b"\x0a" + varint(len(raw)) + raw
    if count:
        out += b"\x10" + varint(count)
    if delay_ms:
        out += b"\x18" + varint(delay_ms)
    return out


def decode(data):
    msg = {"text": "", "count": 0, "delay_ms": 0}
    i = 0
    while i < len(data):
        key = data[i]
        i += 1
        field, wire = key >> 3, key & 7
        n, shift = 0, 0
        while True:
            b = data[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if wire == 2:
            value = data[i:i + n]
            i += n
            if field == 1:
                msg["text"] = value.decode()
        elif field == 2:
            msg["count"] = n
        elif field == 3:
            msg["delay_ms"] = n
    return msg


def same(x):
    return x


def say(request, context):
    msg = decode(request)
    if msg["delay_ms"]:
        time.sleep(msg["delay_ms"] / 1000)
    if msg["text"] == "fail":
        context.set_trailing_metadata((("x-detail", "failed-on-purpose"),))
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "told to fail")
    return encode(text="hello " + msg["text"])


def count(request, context):
    msg = decode(request)
    for i in range(msg["count"]):
        yield encode(text="%s %d" % (msg["text"], i), count=i)
    context.set_trailing_metadata((("x-usage-tokens", str(msg["count"])),))


def total(request_iterator, context):
    parts = [decode(m)["count"] for m in request_iterator]
    return encode(text="%d parts" % len(parts), count=sum(parts))


def chat(request_iterator, context):
    for m in request_iterator:
        yield encode(text="echo " + decode(m)["text"])


def serve(port):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    handlers = {
        "Say": grpc.unary_unary_rpc_method_handler(say, same, same),
        "Count": grpc.unary_stream_rpc_method_handler(count, same, same),
        "Sum": grpc.stream_unary_rpc_method_handler(total, same, same),
        "Chat": grpc.stream_stream_rpc_method_handler(chat, same, same),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", handlers),))
    server.add_insecure_port("127.0.0.1:%d" % port)
    server.start()
    print("serving", flush=True)
    server.wait_for_termination()


def check(name, ok, detail=""):
    print("%s %s %s" % ("ok" if ok else "FAILED", name, detail), flush=True)
    if not ok:
        sys.exit(1)


def client(target, tenant=None):
    channel = grpc.insecure_channel(target)
    grpc.channel_ready_future(channel).result(timeout=30)

    def method(kind, name):
        return getattr(channel, kind)("/test.Echo/" + name, request_serializer=same,
                                      response_deserializer=same)

    say_call = method("unary_unary", "Say")
    if tenant:
        md = (("x-tenant-id", tenant),)
        for _ in range(2):
            say_call(encode(text="a"), metadata=md, timeout=30)
        try:
            say_call(encode(text="a"), metadata=md, timeout=30)
            check("refusal", False, "the third call was admitted")
        except grpc.RpcError as e:
            trailers = dict(e.trailing_metadata() or ())
            check("refusal", e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, str(e.code()))
            check("pushback", trailers.get("grpc-retry-pushback-ms") == "10000", str(trailers))
        return

    reply = decode(say_call(encode(text="ada"), timeout=30))
    check("unary", reply["text"] == "hello ada", reply["text"])

    replies = method("unary_stream", "Count")(encode(text="n", count=3), timeout=30)
    texts = [decode(m)["text"] for m in replies]
    check("server streaming", texts == ["n 0", "n 1", "n 2"], str(texts))
    trailers = dict(replies.trailing_metadata() or ())
    check("trailers", trailers.get("x-usage-tokens") == "3", str(trailers))

    parts = iter([encode(count=c) for c in (1, 2, 3, 4)])
    summed = decode(method("stream_unary", "Sum")(parts, timeout=30))
    check("client streaming", (summed["count"], summed["text"]) == (10, "4 parts"), str(summed))

    words = ["one", "two", "three"]
    echoed = method("stream_stream", "Chat")(iter([encode(text=w) for w in words]), timeout=30)
    got = [decode(m)["text"] for m in echoed]
    check("bidi streaming", got == ["echo " + w for w in words], str(got))

    try:
        say_call(encode(text="fail"), timeout=30)
        check("error", False, "no error")
    except grpc.RpcError as e:
        trailers = dict(e.trailing_metadata() or ())
        check("error", e.code() == grpc.StatusCode.INVALID_ARGUMENT and e.details() == "told to fail",
              "%s %s" % (e.code(), e.details()))
        check("error metadata", trailers.get("x-detail") == "failed-on-purpose", str(trailers))

    try:
        say_call(encode(text="slow", delay_ms=5000), timeout=0.3)
        check("deadline", False, "answered")
    except grpc.RpcError as e:
        check("deadline", e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, str(e.code()))


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve(int(sys.argv[2]))
    else:
        client(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
