"""An OTLP trace receiver built from the official opentelemetry-proto definitions: OTLP/gRPC
(grpcio) on one port and OTLP/HTTP (protobuf bodies on POST /v1/traces) on another. Each
span received is printed as one JSON line, for tests/integration/telemetry.rs.

    python3 receiver.py GRPC_PORT HTTP_PORT [HOST]
"""
import json
import socket
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

lock = threading.Lock()


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def emit(request, transport):
    for rs in request.resource_spans:
        resource = {a.key: value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                line = {
                    "transport": transport,
                    "resource": resource,
                    "scope": ss.scope.name,
                    "trace_id": s.trace_id.hex(),
                    "span_id": s.span_id.hex(),
                    "parent": s.parent_span_id.hex(),
                    "name": s.name,
                    "kind": s.kind,
                    "start": s.start_time_unix_nano,
                    "end": s.end_time_unix_nano,
                    "attributes": {a.key: value(a.value) for a in s.attributes},
                    "status": s.status.code,
                    "flags": s.flags,
                    "trace_state": s.trace_state,
                }
                with lock:
                    print(json.dumps(line), flush=True)


class Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        emit(request, "grpc")
        return trace_service_pb2.ExportTraceServiceResponse()


class Http(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path != "/v1/traces" or self.headers.get("content-type") != "application/x-protobuf":
            self.send_response(400)
            self.end_headers()
            return
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        emit(request, "http")
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


class Http6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


# An optional third argument: the address to listen on (an IPv6 one, e.g. ::1, too).
host = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1"
v6 = ":" in host
server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
server.add_insecure_port(f"[{host}]:{sys.argv[1]}" if v6 else f"{host}:{sys.argv[1]}")
server.start()
http = (Http6 if v6 else ThreadingHTTPServer)((host, int(sys.argv[2])), Http)
threading.Thread(target=http.serve_forever, daemon=True).start()
print(json.dumps({"ready": True}), flush=True)
server.wait_for_termination()
