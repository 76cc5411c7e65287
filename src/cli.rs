//! The command line (clap).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "tollgate",
    version,
    about = "A rate-limiting reverse-proxy gateway"
)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve until SIGTERM/SIGINT (graceful drain); SIGHUP reloads the config file.
    Run {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Once every listener is up, write JSON with the bound addresses here
        /// (atomically: written aside, then renamed), for supervisors and tests.
        #[arg(long, value_name = "PATH")]
        ready_file: Option<PathBuf>,
        /// Also serve the demo upstream (`tollgate echo`) on this address, in this process:
        /// it starts before the gateway and stops with it.
        #[arg(long, value_name = "ADDR")]
        demo_upstream: Option<SocketAddr>,
    },
    /// Validate a config file: exit 0 with a summary, or 2 with every error.
    Check {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Reload one running gateway through its admin API (`POST /admin/reload`) and say
    /// what changed: exit 0 when the new config is in use, 2 when it was refused (its
    /// errors printed, the running config kept), when the admin API answered otherwise
    /// (401, 403, 5xx: the answer printed) or when the address is not a tollgate admin
    /// listener (the token is then not sent), 1 when no answer came.
    Reload {
        /// The gateway's admin listener, HOST:PORT (as in `admin_listen`).
        #[arg(long, value_name = "HOST:PORT", env = "TOLLGATE_ADMIN")]
        admin: String,
        /// A file holding the admin token (else `TOLLGATE_ADMIN_TOKEN`, else none).
        #[arg(long, value_name = "PATH")]
        token_file: Option<PathBuf>,
        /// Give up after this long.
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
    /// Who is limited on one running gateway (its `GET /admin/top`), refreshed like `top`.
    Top {
        /// The gateway's admin listener, HOST:PORT (as in `admin_listen`).
        #[arg(long, value_name = "HOST:PORT", env = "TOLLGATE_ADMIN")]
        admin: String,
        /// A file holding the admin token (else `TOLLGATE_ADMIN_TOKEN`, else none).
        #[arg(long, value_name = "PATH")]
        token_file: Option<PathBuf>,
        /// Only this policy's keys.
        #[arg(long)]
        policy: Option<String>,
        /// How many keys (1 to 100).
        #[arg(long, default_value_t = 20)]
        n: usize,
        /// Time between two refreshes.
        #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
        interval: Duration,
        /// Print the table once and exit.
        #[arg(long)]
        once: bool,
    },
    /// Run a small upstream that answers every request with 200 (for demos and benchmarks).
    Echo {
        #[arg(long, default_value = "127.0.0.1:3000")]
        listen: SocketAddr,
    },
    /// Ask the admin API's /healthz once (for container health checks): exit 0 on a 200
    /// answer, 1 on anything else (refused, another status, no answer in time).
    Health {
        /// The plain http:// URL to GET.
        #[arg(
            long,
            env = "TOLLGATE_HEALTH_URL",
            default_value = crate::health::DEFAULT_URL,
            value_parser = crate::health::Target::parse
        )]
        url: crate::health::Target,
        /// Give up after this long: connecting, sending, and the answer's status.
        #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
}
