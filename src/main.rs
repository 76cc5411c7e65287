//! The `tollgate` binary: parse the command line, set up logging, run, map errors to exit codes
//! (0 ok, 2 bad config or usage, 1 runtime failure).

use std::process::ExitCode;

// The request path allocates a few small objects per request; mimalloc's thread-local
// free lists make those markedly cheaper than glibc's malloc (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use tollgate::cli::{Cli, Command, LogFormat};
use tollgate::clock::Clock;
use tollgate::gateway::{Gateway, StartError};

fn init_logging(format: LogFormat) {
    // An unset RUST_LOG means "info"; one that does not parse is said, not ignored.
    let (filter, bad) = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => {
            match tracing_subscriber::EnvFilter::try_new(&spec) {
                Ok(f) => (f, None),
                Err(e) => (tracing_subscriber::EnvFilter::new("info"), Some((spec, e))),
            }
        }
        _ => (tracing_subscriber::EnvFilter::new("info"), None),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    if let Some((spec, e)) = bad {
        tracing::warn!(rust_log = %spec, error = %e, "RUST_LOG is not a valid filter; logging at info");
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match cli.command {
        Command::Check { config } => match tollgate::config::load(&config) {
            Ok(c) => {
                print!("{}", tollgate::summary::summary(&c));
                let now_ms = tollgate::clock::MonotonicClock::new().wall_ms();
                match tollgate::overrides::describe_file(&c, now_ms) {
                    Ok(described) => {
                        print!("{}", described.unwrap_or_default());
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("{e}");
                        ExitCode::from(2)
                    }
                }
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        },
        Command::Run {
            config,
            ready_file,
            demo_upstream,
        } => {
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("cannot start the runtime: {e}");
                    return ExitCode::from(1);
                }
            };
            runtime.block_on(async {
                if let Some(addr) = demo_upstream {
                    match tokio::net::TcpListener::bind(addr).await {
                        Ok(listener) => {
                            tokio::spawn(tollgate::echo::serve_on(listener));
                        }
                        Err(e) => {
                            eprintln!("cannot serve the demo upstream on {addr}: {e}");
                            return ExitCode::from(1);
                        }
                    }
                }
                let gateway = match Gateway::start(&config).await {
                    Ok(g) => g,
                    Err(StartError::Config(e)) => {
                        eprintln!("{e}");
                        return ExitCode::from(2);
                    }
                    Err(e) => {
                        tracing::error!("{e}");
                        return ExitCode::from(1);
                    }
                };
                if let Some(path) = ready_file {
                    if let Err(e) = gateway.write_ready_file(&path) {
                        tracing::error!(path = %path.display(), "cannot write the ready file: {e}");
                        gateway.shutdown().await;
                        return ExitCode::from(1);
                    }
                }
                match gateway.run_until_signalled().await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        tracing::error!("signal handling failed: {e}");
                        ExitCode::from(1)
                    }
                }
            })
        }
        Command::Health { url, timeout } => {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|rt| rt.block_on(tollgate::health::check(&url, timeout)));
            match result {
                Ok(Ok(())) => {
                    println!("healthy: GET {} answered 200 OK", url.url);
                    ExitCode::SUCCESS
                }
                Ok(Err(unhealthy)) => {
                    eprintln!("unhealthy: {unhealthy}");
                    ExitCode::from(1)
                }
                Err(e) => {
                    eprintln!("cannot start the runtime: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Echo { listen } => {
            let result = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .and_then(|rt| rt.block_on(tollgate::echo::serve(listen)));
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("echo upstream failed: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}
