//! The `tollgate` binary: parse the command line, set up logging, run, map errors to exit codes
//! (0 ok, 2 bad config or usage, 1 runtime failure).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

// The request path allocates a few small objects per request; mimalloc's thread-local
// free lists make those markedly cheaper than glibc's malloc (docs/benchmarks.md).
mod allocator;
#[global_allocator]
static ALLOCATOR: allocator::Allocator = allocator::Allocator;

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
        LogFormat::Json => builder
            .json()
            .event_format(tollgate::log_format::JsonLines::default())
            .init(),
    }
    if let Some((spec, e)) = bad {
        tracing::warn!(rust_log = %spec, error = %e, "RUST_LOG is not a valid filter; logging at info");
    }
}

/// Why a subcommand failed, which decides the exit code; what went wrong has already
/// been said on stderr or in the log.
enum Failure {
    /// A config file that does not compile, or overrides that do not apply to it; a
    /// control command pointed at something that is not an admin listener.
    BadConfig,
    /// Anything else: the runtime, a listener, signals, an unhealthy answer.
    Runtime,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let outcome = match cli.command {
        Command::Check { config } => check(&config),
        Command::Run {
            config,
            ready_file,
            demo_upstream,
        } => run(&config, ready_file, demo_upstream),
        Command::Health { url, timeout } => health(&url, timeout),
        Command::Echo { listen } => echo(listen),
        Command::Reload {
            admin,
            token_file,
            timeout,
        } => reload(admin, token_file.as_deref(), timeout),
        Command::Top {
            admin,
            token_file,
            policy,
            n,
            interval,
            once,
        } => top(admin, token_file.as_deref(), (policy, n), interval, once),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::BadConfig) => ExitCode::from(2),
        Err(Failure::Runtime) => ExitCode::from(1),
    }
}

/// `tollgate check`: the summary of a valid config and of the overrides file it names.
fn check(config: &Path) -> Result<(), Failure> {
    let c = tollgate::config::load(config).map_err(|e| {
        eprintln!("{e}");
        Failure::BadConfig
    })?;
    // The store's clients as `run` makes them (inside a runtime, as there).
    let preflight = one_thread().map_err(|e| e.to_string()).and_then(|rt| {
        rt.block_on(async { tollgate::gateway::preflight(&c) })
            .map_err(|e| e.to_string())
    });
    if let Err(e) = preflight {
        eprintln!("{}: {e}", config.display());
        return Err(Failure::BadConfig);
    }
    print!("{}", tollgate::summary::summary(&c));
    let now_ms = tollgate::clock::MonotonicClock::new().wall_ms();
    let described = tollgate::overrides::describe_file(&c, now_ms).map_err(|e| {
        eprintln!("{e}");
        Failure::BadConfig
    })?;
    print!("{}", described.unwrap_or_default());
    Ok(())
}

/// `tollgate reload --admin HOST:PORT`: one gateway's `POST /admin/reload`.
fn reload(address: String, token_file: Option<&Path>, timeout: Duration) -> Result<(), Failure> {
    use tollgate::control::{Admin, Reloaded};
    let admin = Admin::new(address, token_file, timeout).map_err(|e| {
        eprintln!("{e}");
        Failure::Runtime
    })?;
    let rt = one_thread().map_err(|e| {
        eprintln!("cannot start the runtime: {e}");
        Failure::Runtime
    })?;
    match rt.block_on(tollgate::control::reload(&admin)) {
        Ok(Reloaded::Applied(report)) => {
            report.lines().iter().for_each(|l| println!("{l}"));
            Ok(())
        }
        Ok(Reloaded::Refused(errors)) => {
            eprintln!("reload refused; the running configuration is kept:");
            errors.iter().for_each(|l| eprintln!("{l}"));
            Err(Failure::BadConfig)
        }
        Err(e) => Err(control_failed(&e)),
    }
}

/// A control command's failure said, and its exit code: 2 for an address that is not an
/// admin listener, 1 otherwise.
fn control_failed(e: &tollgate::control::ControlError) -> Failure {
    eprintln!("{e}");
    match e.exit_code() {
        2 => Failure::BadConfig,
        _ => Failure::Runtime,
    }
}

/// `tollgate top --admin HOST:PORT`: the gateway's top keys, refreshed every `interval`
/// (the screen cleared as `top` does) or printed once.
fn top(
    address: String,
    token_file: Option<&Path>,
    (policy, n): (Option<String>, usize),
    interval: Duration,
    once: bool,
) -> Result<(), Failure> {
    use tollgate::control::Admin;
    let admin = Admin::new(address, token_file, Duration::from_secs(10)).map_err(|e| {
        eprintln!("{e}");
        Failure::Runtime
    })?;
    let mut path = format!("/admin/top?n={n}");
    if let Some(p) = &policy {
        let encoded = percent_encoding::utf8_percent_encode(p, percent_encoding::NON_ALPHANUMERIC);
        path.push_str(&format!("&policy={encoded}"));
    }
    let rt = one_thread().map_err(|e| {
        eprintln!("cannot start the runtime: {e}");
        Failure::Runtime
    })?;
    loop {
        let table = rt
            .block_on(tollgate::control::top(&admin, &path))
            .map_err(|e| control_failed(&e))?;
        if once {
            print!("{table}");
            return Ok(());
        }
        // Clear the screen and go home, then the table: a plain ANSI terminal view.
        print!("\x1b[H\x1b[2J{table}");
        std::thread::sleep(interval);
    }
}

/// A runtime on this thread, for the commands that make a call or two and exit.
fn one_thread() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// `tollgate run`: serve until signalled, with the demo upstream alongside if asked.
fn run(
    config: &Path,
    ready_file: Option<PathBuf>,
    demo_upstream: Option<SocketAddr>,
) -> Result<(), Failure> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("cannot start the runtime: {e}");
            Failure::Runtime
        })?;
    runtime.block_on(async {
        if let Some(addr) = demo_upstream {
            let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
                eprintln!("cannot serve the demo upstream on {addr}: {e}");
                Failure::Runtime
            })?;
            tokio::spawn(tollgate::echo::serve_on(listener));
        }
        let gateway = Gateway::start(config).await.map_err(|e| match e {
            StartError::Config(e) => {
                eprintln!("{e}");
                Failure::BadConfig
            }
            e => {
                tracing::error!("{e}");
                Failure::Runtime
            }
        })?;
        if let Some(path) = ready_file {
            if let Err(e) = gateway.write_ready_file(&path) {
                tracing::error!(path = %path.display(), "cannot write the ready file: {e}");
                gateway.shutdown().await;
                return Err(Failure::Runtime);
            }
        }
        gateway.run_until_signalled().await.map_err(|e| {
            tracing::error!("signal handling failed: {e}");
            Failure::Runtime
        })
    })
}

/// `tollgate health`: one GET of the admin API's /healthz.
fn health(url: &tollgate::health::Target, timeout: Duration) -> Result<(), Failure> {
    let result = one_thread().map(|rt| rt.block_on(tollgate::health::check(url, timeout)));
    match result {
        Ok(Ok(())) => {
            println!("healthy: GET {} answered 200 OK", url.url);
            Ok(())
        }
        Ok(Err(unhealthy)) => {
            eprintln!("unhealthy: {unhealthy}");
            Err(Failure::Runtime)
        }
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            Err(Failure::Runtime)
        }
    }
}

/// `tollgate echo`: the demo upstream, until killed.
fn echo(listen: SocketAddr) -> Result<(), Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .and_then(|rt| rt.block_on(tollgate::echo::serve(listen)))
        .map_err(|e| {
            eprintln!("echo upstream failed: {e}");
            Failure::Runtime
        })
}
