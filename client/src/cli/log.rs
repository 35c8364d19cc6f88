//! `keelctl log dump`: partition segment files read offline ([`crate::log_dump`]).

use std::path::PathBuf;

use super::{CliError, CliResult, Ctx};
use crate::log_dump::{self, Item};

/// `keelctl log ...`
#[derive(Debug, clap::Subcommand)]
pub enum LogCommand {
    /// Print the record batches of a partition's segment files as they lie on disk (like
    /// kafka-dump-log --files): base and last offset, record count, producer id, epoch and
    /// sequences, partition leader epoch, byte position, timestamp, size, compression, CRC
    /// and whether it checks. Reads only: safe on a stopped broker's data and on a running
    /// one's (whose active segment may end in a partial batch, reported as such). Offsets
    /// missing between batches are what compaction removed.
    Dump(DumpArgs),
}

/// Arguments of `log dump`.
#[derive(Debug, clap::Args)]
pub struct DumpArgs {
    /// A partition directory (DATA_DIR/TOPIC-PARTITION: every `{base offset:020}.log` in
    /// offset order) or one segment file.
    #[arg(long, value_name = "PATH")]
    pub dir: PathBuf,
    /// Also print every record (offset, timestamp, key and value as text, header keys),
    /// like kafka-dump-log --deep-iteration --print-data-log.
    #[arg(long)]
    pub deep: bool,
    /// Stop after this many batches (over all files).
    #[arg(long)]
    pub max_batches: Option<u64>,
}

/// Runs `keelctl log ...`.
pub(super) fn run(cmd: LogCommand, ctx: &Ctx) -> CliResult {
    match cmd {
        LogCommand::Dump(a) => dump(a, ctx),
    }
}

fn dump(a: DumpArgs, ctx: &Ctx) -> CliResult {
    let files = log_dump::segment_files(&a.dir).map_err(CliError::usage)?;
    let max = a.max_batches.unwrap_or(u64::MAX);
    let (mut batches, mut bad) = (0u64, 0u64);
    for file in files {
        if batches >= max {
            break;
        }
        if !ctx.json {
            outln!("Dumping {}", file.display());
        }
        log_dump::read_segment(&file, |item| {
            match item {
                Item::Batch { position, batch } => {
                    batches += 1;
                    if !batch.is_crc_valid() {
                        bad += 1;
                    }
                    if ctx.json {
                        let mut v = log_dump::batch_json(position, &batch, a.deep);
                        v["file"] = serde_json::Value::String(file.display().to_string());
                        outln!("{v}");
                    } else {
                        outln!("{}", log_dump::batch_line(position, &batch));
                        if a.deep {
                            for line in log_dump::record_lines(&batch) {
                                outln!("{line}");
                            }
                        }
                    }
                }
                Item::Partial { position, bytes } => {
                    eprintln!(
                        "{}: a partial batch at position {position} ({bytes} bytes to the end of \
                         the file): a write in progress, or a crash tail that recovery truncates",
                        file.display()
                    );
                }
                Item::Corrupt { position, reason } => {
                    bad += 1;
                    eprintln!(
                        "{}: not a record batch at position {position}: {reason}; the rest of the \
                         file is not read",
                        file.display()
                    );
                }
            }
            batches < max
        })
        .map_err(CliError::new)?;
    }
    if bad > 0 {
        return Err(CliError::new(format!(
            "{bad} damaged batch(es) (CRC mismatch or unreadable), see above"
        )));
    }
    Ok(())
}
