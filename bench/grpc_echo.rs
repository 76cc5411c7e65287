//! The gRPC upstream bench/grpc.sh puts tollgate and nginx `grpc_pass` in front of: the
//! test suite's tonic `test.Echo` service (tests/integration/support/grpc.rs), plain
//! HTTP/2 on the address given.
//!
//!   cargo build --release --example grpc_echo
//!   target/release/examples/grpc_echo 127.0.0.1:50051

#[allow(dead_code)]
#[path = "../tests/integration/support/grpc.rs"]
mod grpc;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let addr: std::net::SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:50051".to_owned())
        .parse()
        .expect("usage: grpc_echo HOST:PORT");
    let upstream = grpc::GrpcUpstream::start_on(addr).await;
    eprintln!("grpc_echo serving test.Echo on {addr}");
    let _ = upstream.task.await;
}
