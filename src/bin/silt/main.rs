//! `silt`: the siltdb command-line tool.
//!
//! `silt readamp` runs the read-amplification report; `silt sst`, `silt db`, `silt wal` and
//! `silt manifest` look inside files; `silt db compact` is the one command that writes to a
//! database (it takes the database's lock). Output is human-readable, or JSON with `--json`. Bad
//! input gets one line on stderr and exit status 2; `sst verify` exits 1 when it finds
//! corruption.

mod dbcmd;
mod dbspace;
mod logs;
mod output;
mod readamp;
mod sst;

use clap::{Args, Parser, Subcommand};
use output::CliError;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "silt",
    version,
    about = "siltdb: read-amplification report and file inspector"
)]
struct Cli {
    /// Print JSON instead of text (one document, or JSON lines for streams).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Build a database, run point reads, and report read amplification with filters on/off.
    Readamp(readamp::ReadampArgs),
    /// Inspect one SSTable file.
    #[command(subcommand)]
    Sst(SstCommand),
    /// Inspect a database directory (read-only and safe while another process has it open,
    /// except `db compact`, which writes).
    #[command(subcommand)]
    Db(DbCommand),
    /// Inspect a write-ahead log.
    #[command(subcommand)]
    Wal(WalCommand),
    /// Inspect the manifest of a database directory.
    #[command(subcommand)]
    Manifest(ManifestCommand),
}

#[derive(Subcommand, Debug)]
enum SstCommand {
    /// Footer, block layout, properties and filter summary.
    Info {
        /// The table file.
        file: PathBuf,
    },
    /// The filter block in full: parameters, fill, predicted and measured false positives.
    Filter(sst::FilterArgs),
    /// Key/value records, streamed.
    Dump(sst::DumpArgs),
    /// Check every block's checksum and the footer; exit 1 if anything is corrupt.
    Verify {
        /// The table file.
        file: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum DbCommand {
    /// Levels from the manifest: tables, bytes, key ranges, filter memory, expected wasted reads.
    Info {
        /// The database directory.
        dir: PathBuf,
    },
    /// Read one key; with --explain, show what the read did in each table.
    Get(dbcmd::GetArgs),
    /// Rewrite a key range down to the bottom level to reclaim space (writes: takes the lock).
    ///
    /// Compacts the tables overlapping the range (default: every key) level by level down to
    /// the bottom level, rewriting every table, so that removed and overwritten data leaves
    /// the disk. This command WRITES: it takes the database's lock, so the database must not
    /// be open in another process (that is refused with one line and status 2).
    Compact(dbspace::CompactArgs),
    /// Bytes on disk a key range occupies, and the bytes of all live files (read-only).
    ///
    /// The range's bytes (default: every key) are estimated from the table indexes without
    /// reading data blocks; writes not yet flushed are not counted. Safe while another
    /// process has the database open.
    Size(dbspace::RangeArgs),
}

#[derive(Subcommand, Debug)]
enum WalCommand {
    /// Every record with its checksum status and operations.
    Dump(KeyFormat),
}

#[derive(Subcommand, Debug)]
enum ManifestCommand {
    /// Every version edit of the live manifest.
    Dump {
        /// The database directory.
        dir: PathBuf,
    },
}

/// A file argument plus key formatting.
#[derive(Args, Debug)]
struct KeyFormat {
    /// The file.
    file: PathBuf,
    /// Print keys and values as hex instead of escaped text.
    #[arg(long)]
    hex: bool,
}

fn run(cli: Cli) -> Result<(), CliError> {
    let json = cli.json;
    match cli.command {
        Command::Readamp(args) => readamp::run(&args, json),
        Command::Sst(SstCommand::Info { file }) => sst::info(&file, json),
        Command::Sst(SstCommand::Filter(args)) => sst::filter(&args, json),
        Command::Sst(SstCommand::Dump(args)) => sst::dump(&args, json),
        Command::Sst(SstCommand::Verify { file }) => sst::verify(&file, json),
        Command::Db(DbCommand::Info { dir }) => dbcmd::info(&dir, json),
        Command::Db(DbCommand::Get(args)) => dbcmd::get(&args, json),
        Command::Db(DbCommand::Compact(args)) => dbspace::compact(&args, json),
        Command::Db(DbCommand::Size(args)) => dbspace::size(&args, json),
        Command::Wal(WalCommand::Dump(k)) => logs::wal_dump(&k.file, k.hex, json),
        Command::Manifest(ManifestCommand::Dump { dir }) => logs::manifest_dump(&dir, json),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A bug must not print a backtrace at an operator: one line and status 2.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        eprintln!("silt: internal error: {msg}");
    }));
    match std::panic::catch_unwind(move || run(cli)) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            if !e.message.is_empty() {
                eprintln!("silt: {}", e.message);
            }
            ExitCode::from(e.code)
        }
        Err(_) => ExitCode::from(2),
    }
}
