//! Tracing initialisation, once per process.

use crate::Error;
use crate::args::{LogFormat, TelemetryArgs};
use tracing_subscriber::EnvFilter;

/// Installs the global tracing subscriber. `RUST_LOG`, when set, wins over `--log`.
pub fn init(args: &TelemetryArgs) -> Result<(), Error> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&args.log));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match args.log_format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    result.map_err(Error::InitTracing)
}
