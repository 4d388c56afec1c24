//! `lhc log ...`: import, export, cat, append, stats, check.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Subcommand;
use lhc_engine::{decode_record, decode_record_at, Ts};
use lhc_log::jsonl::JsonlLines;
use lhc_log::validate::{validate_one, validate_record, Rejected};
use serde::Serialize;

use crate::args::{Format, FormatArgs, LogArgs};
use crate::progress;

/// Records appended per call during an import: large enough to amortize fsync.
const IMPORT_BATCH: usize = 4096;

/// Work with a site log.
#[derive(Subcommand)]
pub enum LogCommand {
    /// Validate a JSONL file (one record per line) and append it to the log.
    ///
    /// The whole file is validated first; if any line is invalid nothing is appended and each
    /// bad line is listed with its number and reason. With --skip-invalid the good lines are
    /// appended and the rejects written, with their reasons, to a side file.
    Import {
        /// The JSONL file.
        file: PathBuf,
        /// Append the valid lines and write the invalid ones to the rejects file.
        #[arg(long)]
        skip_invalid: bool,
        /// Where --skip-invalid writes rejects [default: FILE.rejects.jsonl].
        #[arg(long, value_name = "FILE", requires = "skip_invalid")]
        rejects: Option<PathBuf>,
        /// Add to a log that already holds records (refused without it, so a second
        /// import of the same file cannot double a log by mistake).
        #[arg(long)]
        append: bool,
        /// Go on with an interrupted import of this file: the log's records must be the
        /// file's first valid lines, byte for byte (checked); the lines after them are
        /// appended.
        #[arg(long, conflicts_with = "append")]
        resume: bool,
        #[command(flatten)]
        target: LogArgs,
    },
    /// Write the log's records as JSONL, one record per line.
    Export {
        /// First offset to write.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Stop before this offset [default: the end].
        #[arg(long)]
        to: Option<u64>,
        /// Output file [default: stdout].
        #[arg(long, short)]
        out: Option<PathBuf>,
        #[command(flatten)]
        target: LogArgs,
    },
    /// Print records from an offset; with --follow, keep printing as records are appended.
    Cat {
        /// First offset to print.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Wait for new records after the end (like tail -f); stop with Ctrl-C.
        #[arg(long, short)]
        follow: bool,
        /// Prefix each record with its offset and a tab.
        #[arg(long)]
        offsets: bool,
        /// With --kafka --follow: read as a member of this consumer group, resuming after
        /// what the group already read (at least once); --from is then ignored.
        #[arg(long, value_name = "GROUP", requires = "follow")]
        group: Option<String>,
        #[command(flatten)]
        target: LogArgs,
    },
    /// Append records read from stdin (JSONL); all or nothing.
    Append {
        #[command(flatten)]
        target: LogArgs,
    },
    /// Count records by type, with offsets, times and sizes.
    Stats {
        #[command(flatten)]
        format: FormatArgs,
        #[command(flatten)]
        target: LogArgs,
    },
    /// Verify framing and checksums of every record, and every record against the schemas.
    /// Changes nothing; exits 1 if the log is damaged or holds invalid records.
    Check {
        #[command(flatten)]
        target: LogArgs,
    },
    /// Write or refresh checkpoints of the engine state every N records, in the embedded
    /// log's `checkpoints/` folder, so `lhc query --at` starts near the instant instead of
    /// replaying from the first record.
    ///
    /// Resumes from the latest usable checkpoint, so running it again after appends only
    /// replays the new records. Checkpoints of another build or log, or damaged (all of
    /// them with --verify), are removed and written anew. A checkpoint is only used when the digest of the state
    /// rebuilt from it matches the one written with it.
    Checkpoint {
        /// The embedded log directory [default: lhc-data/log].
        #[arg(value_name = "LOG")]
        dir: Option<PathBuf>,
        /// Records between two checkpoints (each holds the whole state: for a 40,000-VDA
        /// site tens of MB).
        #[arg(long, value_name = "N", default_value_t = lhc_replay::checkpoint::DEFAULT_EVERY)]
        every: u64,
        /// Rebuild every checkpoint's state and check it against its digest first, removing
        /// and rewriting damaged ones (without it, only the latest is checked in full; a
        /// query checks the one it uses).
        #[arg(long)]
        verify: bool,
    },
}

/// Runs one `lhc log` command.
pub fn run(command: LogCommand, quiet: bool) -> anyhow::Result<ExitCode> {
    match command {
        LogCommand::Import {
            file,
            skip_invalid,
            rejects,
            append,
            resume,
            target,
        } => import(
            &file,
            Import {
                skip_invalid,
                rejects,
                append,
                resume,
            },
            &target,
            quiet,
        ),
        LogCommand::Export {
            from,
            to,
            out,
            target,
        } => export(from, to, out, &target, quiet),
        LogCommand::Cat {
            from,
            follow,
            offsets,
            group,
            target,
        } => cat(from, follow, offsets, group.as_deref(), &target),
        LogCommand::Append { target } => append_stdin(&target, quiet),
        LogCommand::Stats { format, target } => stats(format.get(), &target, quiet),
        LogCommand::Check { target } => check(&target, quiet),
        LogCommand::Checkpoint { dir, every, verify } => checkpoint(
            &dir.unwrap_or_else(|| PathBuf::from("lhc-data/log")),
            every,
            verify,
            quiet,
        ),
    }
}

/// `lhc log checkpoint`.
fn checkpoint(dir: &Path, every: u64, verify: bool, quiet: bool) -> anyhow::Result<ExitCode> {
    if !dir.is_dir() {
        bail!(
            "{} is not an embedded log directory (checkpoints are kept beside an embedded \
             log; import a JSONL file with `lhc log import FILE --log DIR` first)",
            dir.display()
        );
    }
    let bar = crate::progress::bar(None, "checkpointing", quiet);
    let tick = bar.clone();
    let done = lhc_replay::checkpoint::refresh(dir, every, &crate::build_id(), verify, move |n| {
        tick.set_position(n)
    })
    .with_context(|| format!("checkpointing {}", dir.display()))?;
    bar.finish_and_clear();
    for (path, why) in &done.removed {
        eprintln!("warning: removed checkpoint {}: {why}", path.display());
    }
    if quiet {
        return Ok(ExitCode::SUCCESS);
    }
    let from = match done.resumed_from {
        Some(offset) => format!("resumed from the checkpoint after {offset} records"),
        None => "replayed from the first record".to_string(),
    };
    // A summary, on stderr as `log import` and `log export` give theirs: the command's
    // results are the files.
    eprintln!(
        "{}: {} records; {from}; {} checkpoint(s) written, {} kept (one every {every} records, \
         in {})",
        dir.display(),
        done.records,
        done.written.len(),
        done.kept,
        dir.join(lhc_replay::checkpoint::DIR).display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Non-blank lines of a JSONL file, as bytes, with their 1-based line numbers (blank and
/// line numbers as `lhc_log::jsonl` defines them, so a replay of the file agrees).
fn lines(path: &Path) -> anyhow::Result<impl Iterator<Item = anyhow::Result<(usize, Vec<u8>)>>> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let path = path.to_path_buf();
    Ok(JsonlLines::new(BufReader::with_capacity(1 << 20, file))
        .map(move |line| line.with_context(|| format!("reading {}", path.display()))))
}

/// A rejected line as written to the rejects file.
#[derive(Serialize)]
struct RejectLine<'a> {
    line: usize,
    path: &'a str,
    kind: &'a str,
    error: String,
    record: &'a str,
}

/// How `lhc log import` adds to its log.
struct Import {
    skip_invalid: bool,
    rejects: Option<PathBuf>,
    append: bool,
    resume: bool,
}

/// How an embedded log's records compare with a file's valid lines, in order.
enum Prefix {
    /// The log's `records` records are the file's first valid lines, which end at line
    /// `through` (0: the log is empty); `whole` when no valid line follows.
    Holds {
        records: u64,
        through: usize,
        whole: bool,
    },
    /// They differ: the record at `offset` is not line `line` (or the file ends first).
    Differs { offset: u64, line: Option<usize> },
}

/// Compares the records of the embedded log `dir` with the valid lines of `file`, in order
/// (an import appends exactly those), stopping at the first difference.
fn prefix_of(dir: &Path, file: &Path) -> anyhow::Result<Prefix> {
    let log = lhc_log::EmbeddedLog::open_read_only(dir)?;
    let mut reader = lhc_log::Log::reader(&log, 0)?;
    let mut lines = lines(file)?;
    let mut records = 0u64;
    let mut through = 0usize;
    while let Some(entry) = reader.next(Duration::ZERO)? {
        let line = loop {
            match lines.next().transpose()? {
                Some((number, line)) if validate_one(&line).is_ok() => break Some((number, line)),
                Some(_) => continue,
                None => break None,
            }
        };
        match line {
            Some((number, line)) if line == entry.bytes => {
                records += 1;
                through = number;
            }
            other => {
                return Ok(Prefix::Differs {
                    offset: entry.offset,
                    line: other.map(|(number, _)| number),
                })
            }
        }
    }
    let whole = !lines.any(|line| line.is_ok_and(|(_, line)| validate_one(&line).is_ok()));
    Ok(Prefix::Holds {
        records,
        through,
        whole,
    })
}

fn import(file: &Path, how: Import, target: &LogArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let Import {
        skip_invalid,
        rejects,
        append,
        resume,
    } = how;
    if let Some(path) = &rejects {
        let mut inputs = vec![file];
        if let Some(dir) = target.embedded_dir() {
            inputs.push(dir);
        }
        crate::args::refuse_overwrite(path, &inputs)?;
    }
    // Read twice (every line validated before any is appended, then appended streaming):
    // a pipe would be empty the second time, and the import refused as "changed".
    let kind = std::fs::metadata(file)
        .with_context(|| format!("cannot open {}", file.display()))?
        .file_type();
    if !kind.is_file() {
        bail!(
            "{} is not a regular file (a pipe, a device or a directory): `log import` reads its file twice, \
             validating every line before it appends any; save the records to a file first, \
             or pipe them to `lhc log append`, which reads stdin",
            file.display()
        );
    }
    // The lines an interrupted import of this file already appended (`--resume`); a log
    // that holds them refuses `--append` and a plain import, which would hold them twice.
    let mut done_lines = 0usize;
    let embedded = match target.embedded_dir() {
        Some(dir) => Some((
            dir,
            target.existing()?.map(|log| log.end_offset()).transpose()?,
        )),
        None => None,
    };
    if let Some((dir, Some(1..))) = embedded {
        let prefix = prefix_of(dir, file)?;
        match (prefix, resume) {
            (
                Prefix::Holds {
                    records, through, ..
                },
                true,
            ) => {
                done_lines = through;
                if !quiet {
                    eprintln!(
                        "{} holds the first {records} record(s) of {} (through line \
                         {through}): appending the rest",
                        dir.display(),
                        file.display()
                    );
                }
            }
            (
                Prefix::Holds {
                    records,
                    whole: true,
                    ..
                },
                false,
            ) => bail!(
                "{} already holds all {records} record(s) of {}: importing it again, even \
                 with --append, would hold them twice",
                dir.display(),
                file.display()
            ),
            (
                Prefix::Holds {
                    records, through, ..
                },
                false,
            ) => bail!(
                "{} already holds {records} record(s), the same as the valid lines of {} \
                 through line {through} (an interrupted import?): importing the file again, \
                 even with --append, would hold them twice; pass --resume to append the \
                 lines after them",
                dir.display(),
                file.display()
            ),
            (Prefix::Differs { offset, line }, true) => bail!(
                "--resume: {} is not an interrupted import of {}: its record at offset \
                 {offset} {}; nothing appended",
                dir.display(),
                file.display(),
                match line {
                    Some(line) => format!("differs from the file's line {line}"),
                    None => "is past the file's last valid line".to_string(),
                }
            ),
            (Prefix::Differs { .. }, false) => {}
        }
    } else if resume {
        match embedded {
            Some((dir, _)) => bail!(
                "--resume goes on with an interrupted import, and {} holds no records: \
                 import without --resume",
                dir.display()
            ),
            None => bail!(
                "--resume checks an embedded log's records against the file; for Kafka, \
                 export what the topic holds and compare, then import the rest with --append"
            ),
        }
    }
    let (mut next_offset, mut order) = target.prepare_append(append || resume)?;
    // Where this import's first record must land: anything else means another writer
    // appended since the checks above, and the checks no longer hold.
    let expected_first = next_offset;
    // Pass 1: validate everything, remembering the bad line numbers; a line out of time
    // order is bad too (R-LOG-4 would only quarantine it).
    let mut total = 0u64;
    let mut bad: Vec<(Rejected, String)> = Vec::new();
    let scan = progress::bar(None, "validating", quiet);
    for item in lines(file)? {
        let (number, line) = item?;
        if number <= done_lines {
            continue;
        }
        total += 1;
        scan.inc(1);
        let checked = validate_record(&line)
            .and_then(|record| order.check(&record, next_offset, &format!("line {number}")));
        if checked.is_ok() {
            next_offset += 1;
        }
        if let Err(error) = checked {
            bad.push((
                Rejected {
                    line: number,
                    error,
                },
                String::from_utf8_lossy(&line).into_owned(),
            ));
        }
    }
    scan.finish_and_clear();
    if !bad.is_empty() && !skip_invalid {
        const SHOWN: usize = 100;
        for (rejected, _) in bad.iter().take(SHOWN) {
            eprintln!("{}:{}", file.display(), rejected);
        }
        if bad.len() > SHOWN {
            eprintln!("... and {} more", bad.len() - SHOWN);
        }
        bail!(
            "nothing appended: {} of {total} line(s) of {} are invalid; fix them, or use \
             --skip-invalid to append the rest and write the rejects to a side file",
            bad.len(),
            file.display()
        );
    }
    if !bad.is_empty() {
        let path = rejects.unwrap_or_else(|| {
            let mut name = file.as_os_str().to_owned();
            name.push(".rejects.jsonl");
            PathBuf::from(name)
        });
        // A resumed import keeps the rejects the interrupted one wrote for the lines it
        // had done (found by hostile testing: they were overwritten, and lost).
        let earlier: Vec<String> = if resume {
            std::fs::read_to_string(&path)
                .unwrap_or_default()
                .lines()
                .filter(|row| {
                    serde_json::from_str::<serde_json::Value>(row)
                        .ok()
                        .and_then(|v| v["line"].as_u64())
                        .is_some_and(|n| n as usize <= done_lines)
                })
                .map(str::to_string)
                .collect()
        } else {
            Vec::new()
        };
        let mut out = BufWriter::new(
            File::create(&path).with_context(|| format!("creating {}", path.display()))?,
        );
        for row in &earlier {
            out.write_all(row.as_bytes())?;
            out.write_all(b"\n")?;
        }
        for (rejected, line) in &bad {
            let row = RejectLine {
                line: rejected.line,
                path: &rejected.error.path,
                kind: rejected.error.kind.as_str(),
                error: rejected.error.without_offset(),
                record: line,
            };
            serde_json::to_writer(&mut out, &row)?;
            out.write_all(b"\n")?;
        }
        out.flush()?;
        if !quiet {
            eprintln!(
                "skipped {} invalid line(s); rejects with reasons in {}",
                bad.len(),
                path.display()
            );
        }
    }

    // Pass 2: append the valid lines in batches. Each line is validated again as it is
    // read, so a file changed since pass 1 cannot slip an unvalidated record in; each batch
    // is all or nothing (the log rolls a failed batch back), and a failure says exactly
    // what was appended before it.
    let log = target.open_for_append()?;
    let bar = progress::bar(Some(total - bad.len() as u64), "appending", quiet);
    let skip: std::collections::BTreeSet<usize> = bad.iter().map(|(r, _)| r.line).collect();
    let mut batch: Vec<Vec<u8>> = Vec::with_capacity(IMPORT_BATCH);
    let mut batch_line = 0usize;
    let mut first = None;
    let mut last = None;
    let mut appended = 0u64;
    let describe = log.describe();
    let done_so_far = |appended: u64, first: Option<u64>, last: Option<u64>| match (first, last) {
        (Some(a), Some(b)) => {
            format!("{appended} record(s) were appended before it, at offsets {a}..={b}")
        }
        _ => "nothing was appended".to_string(),
    };
    let mut flush = |batch: &mut Vec<Vec<u8>>, from_line: usize| -> anyhow::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
        // Conditional: the embedded log writes the batch only where this import's previous
        // one ended, under its lock, so two imports at once never interleave (the check
        // below, after the write, found it but left the other's records between).
        let offsets = log
            .append_at(expected_first + appended, &refs)
            .map_err(|e| {
                if let lhc_log::LogError::Moved { expected, end } = e {
                    if end < expected {
                        // Shorter than this import left it: records it appended are gone
                        // (the segment replaced by an older copy, or cut), not another
                        // writer's (found by hostile testing).
                        return anyhow::anyhow!(
                            "{describe} ends at offset {end}, before offset {expected} where \
                             this import's last batch ended: records it appended are gone \
                             from the log (its segment replaced by an older copy or cut under \
                             this import; `lhc log check` names the loss); this batch (lines \
                             {from_line} on of {}) was not written; {}",
                            file.display(),
                            done_so_far(appended, first, last)
                        );
                    }
                    return anyhow::anyhow!(
                        "another writer appended to {describe} during this import: the log ends \
                     at offset {end}, not {expected}, so this batch (lines {from_line} on of \
                     {}) was not written; {}; the records from offset {expected} on are the \
                     other writer's (`lhc log cat --from {expected}` shows them)",
                        file.display(),
                        match (first, last) {
                            (Some(a), Some(b)) => format!(
                                "this import appended {appended} record(s) before it, at \
                             offsets {a}..={b}"
                            ),
                            _ => "this import appended nothing".to_string(),
                        }
                    );
                }
                if let lhc_log::LogError::BatchUncertain(_) = e {
                    // Part of the batch may be in the log: "nothing kept" would have the
                    // admin import those lines twice (found by hostile testing).
                    return anyhow::anyhow!(
                        "appending to {describe} failed: {e}; {} — whether lines {from_line} \
                         on of {} are in the log depends on when the segment was copied: look \
                         before importing them again (`lhc log check`, `lhc log cat`)",
                        match (first, last) {
                            (Some(_), Some(_)) => done_so_far(appended, first, last),
                            _ => "no earlier batch of this import was appended".to_string(),
                        },
                        file.display()
                    );
                }
                anyhow::anyhow!(
                    "appending to {describe} failed: {e}; {} — lines {from_line} on of {} were \
                 not, and no part of the failed batch was kept: fix the cause and import \
                 those lines",
                    done_so_far(appended, first, last),
                    file.display()
                )
            })?;
        // Every batch, not only the first: another writer's records between two of this
        // import's batches break its order as surely as before the first (found by hostile
        // testing: two imports into one new log, one of them reporting success).
        if let Some(&got) = offsets.first() {
            let wanted = expected_first + appended;
            if got != wanted {
                bail!(
                    "another writer appended to {describe} during this import: this batch \
                     landed at offset {got}, not {wanted}, so the order and --append checks \
                     no longer hold; {}, and this batch of {} at offsets {got}..={}; check \
                     the log with `lhc log check`",
                    match (first, last) {
                        (Some(a), Some(b)) => format!(
                            "this import appended {appended} record(s) before it, at \
                             offsets {a}..={b}"
                        ),
                        _ => "this import appended nothing before it".to_string(),
                    },
                    offsets.len(),
                    got + offsets.len() as u64 - 1
                );
            }
        }
        first = first.or(offsets.first().copied());
        last = offsets.last().copied().or(last);
        appended += offsets.len() as u64;
        bar.inc(offsets.len() as u64);
        batch.clear();
        Ok(())
    };
    let mut seen = 0u64;
    for item in lines(file)? {
        let (number, line) = item?;
        if number <= done_lines {
            continue;
        }
        seen += 1;
        if skip.contains(&number) {
            continue;
        }
        if let Err(error) = validate_one(&line) {
            flush(&mut batch, batch_line)?;
            bail!(
                "{} changed while it was imported: line {number} is no longer valid ({error}); \
                 {}; import a file nothing writes to",
                file.display(),
                done_so_far(appended, first, last)
            );
        }
        if batch.is_empty() {
            batch_line = number;
        }
        batch.push(line);
        if batch.len() == IMPORT_BATCH {
            flush(&mut batch, batch_line)?;
        }
    }
    flush(&mut batch, batch_line)?;
    if seen != total {
        bail!(
            "{} changed while it was imported: {seen} record line(s) now, {total} when it was \
             validated; {}",
            file.display(),
            done_so_far(appended, first, last)
        );
    }
    bar.finish_and_clear();
    if !quiet {
        match (first, last) {
            (Some(a), Some(b)) => {
                eprintln!(
                    "appended {appended} record(s) to {} at offsets {a}..={b}",
                    log.describe()
                )
            }
            _ if done_lines > 0 => eprintln!(
                "appended nothing: the log already holds every record of {}",
                file.display()
            ),
            _ => eprintln!("appended nothing: {} holds no records", file.display()),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Checks `numbered` lines for appending after the log's records (the time order: `log
/// append` adds to the log by definition); the end they were checked against.
fn check_appended(target: &LogArgs, numbered: &[(usize, Vec<u8>)]) -> anyhow::Result<u64> {
    let (end, mut order) = target.prepare_append(true)?;
    let mut next_offset = end;
    // Rejections name the input line (blank lines counted), not the record's index.
    let rejected: Vec<Rejected> = numbered
        .iter()
        .filter_map(|(line, bytes)| {
            let checked = validate_record(bytes)
                .and_then(|r| order.check(&r, next_offset, &format!("line {line}")));
            if checked.is_ok() {
                next_offset += 1;
            }
            checked.err().map(|error| Rejected { line: *line, error })
        })
        .collect();
    if !rejected.is_empty() {
        for r in &rejected {
            eprintln!("stdin:{r}");
        }
        bail!(
            "nothing appended: {} of {} record(s) are invalid",
            rejected.len(),
            numbered.len()
        );
    }
    Ok(end)
}

fn append_stdin(target: &LogArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let mut input = Vec::new();
    std::io::stdin()
        .read_to_end(&mut input)
        .context("reading records from stdin")?;
    let numbered: Vec<(usize, Vec<u8>)> = JsonlLines::new(input.as_slice())
        .collect::<Result<_, _>>()
        .context("reading records from stdin")?;
    let records: Vec<&[u8]> = numbered.iter().map(|(_, l)| l.as_slice()).collect();
    // Checked before the log is opened for appending (refused input changes nothing),
    // then appended only where the records checked against end (under the lock): records
    // another writer appended in between (a batch readers did not see yet) are checked
    // against too, or the time order is not the one checked (found by hostile testing:
    // records older than the log's last landed after it).
    let mut checked_end = check_appended(target, &numbered)?;
    let log = target.open_for_append()?;
    let mut attempts = 0;
    let offsets = loop {
        match log.append_at(checked_end, &records) {
            Err(lhc_log::LogError::Moved { .. }) if attempts < 20 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(50));
                checked_end = check_appended(target, &numbered)?;
            }
            result => {
                break result.with_context(|| format!("appending to {}", log.describe()))?;
            }
        }
    };
    if !quiet {
        match (offsets.first(), offsets.last()) {
            (Some(a), Some(b)) => {
                eprintln!("appended {} record(s) at offsets {a}..={b}", offsets.len())
            }
            _ => eprintln!("no records on stdin"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes to stdout, turning a closed pipe (`| head`) into a quiet stop.
struct Out {
    inner: BufWriter<Box<dyn Write>>,
    /// Where it writes, for error messages.
    target: String,
}

impl Out {
    fn new(path: Option<&Path>) -> anyhow::Result<Out> {
        let sink: Box<dyn Write> = match path {
            Some(p) => {
                Box::new(File::create(p).with_context(|| format!("creating {}", p.display()))?)
            }
            None => Box::new(std::io::stdout()),
        };
        Ok(Out {
            inner: BufWriter::with_capacity(1 << 20, sink),
            target: path.map_or("standard output".to_string(), |p| p.display().to_string()),
        })
    }

    /// Writes a record line; `Ok(false)` when the reader went away.
    fn line(&mut self, prefix: Option<u64>, bytes: &[u8]) -> anyhow::Result<bool> {
        let result = (|| {
            if let Some(offset) = prefix {
                write!(self.inner, "{offset}\t")?;
            }
            self.inner.write_all(bytes)?;
            self.inner.write_all(b"\n")
        })();
        closed_pipe(result, &self.target)
    }

    fn flush(&mut self) -> anyhow::Result<bool> {
        closed_pipe(self.inner.flush(), &self.target)
    }
}

fn closed_pipe(result: std::io::Result<()>, target: &str) -> anyhow::Result<bool> {
    match result {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(anyhow::Error::new(e).context(format!("writing to {target}"))),
    }
}

fn export(
    from: u64,
    to: Option<u64>,
    out: Option<PathBuf>,
    target: &LogArgs,
    quiet: bool,
) -> anyhow::Result<ExitCode> {
    if let (Some(path), Some(dir)) = (&out, target.embedded_dir()) {
        crate::args::refuse_overwrite(path, &[dir])?;
    }
    if let Some(to) = to.filter(|to| *to < from) {
        bail!("--to {to} is before --from {from}: nothing to export");
    }
    let log = target.open_for_read()?;
    // A damaged log still exports what precedes the damage (`--to N` is the way out the
    // error suggests): read up to it, and let the reader report the damage if reached.
    let end = match log.end_offset() {
        Ok(end) => end,
        Err(lhc_log::LogError::Corrupt { offset, .. }) => to.unwrap_or(u64::MAX).max(offset),
        Err(e) => return Err(e.into()),
    };
    let stop = to.unwrap_or(end).min(end);
    let mut reader = log.reader(from)?;
    let mut sink = Out::new(out.as_deref())?;
    let bar = progress::bar(
        Some(stop.saturating_sub(from)),
        "exporting",
        quiet || out.is_none(),
    );
    let mut written = 0u64;
    while reader.position() < stop {
        let Some(entry) = reader.next(Duration::ZERO)? else {
            break;
        };
        if entry.offset >= stop {
            break;
        }
        if !sink.line(None, &entry.bytes)? {
            return Ok(ExitCode::SUCCESS);
        }
        written += 1;
        bar.set_position(entry.offset + 1 - from);
    }
    sink.flush()?;
    bar.finish_and_clear();
    if !quiet && out.is_some() {
        eprintln!("exported {written} record(s) from {}", log.describe());
    }
    Ok(ExitCode::SUCCESS)
}

fn cat(
    from: u64,
    follow: bool,
    offsets: bool,
    group: Option<&str>,
    target: &LogArgs,
) -> anyhow::Result<ExitCode> {
    let log = target.open_for_read()?;
    let mut reader: Box<dyn lhc_log::LogReader> = match (group, target.kafka.options()?) {
        (Some(group), Some(options)) => {
            Box::new(lhc_log::KafkaLog::open(options)?.group_reader(group)?)
        }
        (Some(_), None) => {
            anyhow::bail!("--group needs --kafka: consumer groups are a Kafka feature")
        }
        (None, _) => log.reader(from)?,
    };
    let mut sink = Out::new(None)?;
    loop {
        let wait = if follow {
            Duration::from_millis(500)
        } else {
            Duration::ZERO
        };
        match reader.next(wait)? {
            Some(entry) => {
                if !sink.line(offsets.then_some(entry.offset), &entry.bytes)? {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            None if follow => {
                if !sink.flush()? {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            None => break,
        }
    }
    sink.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// What `lhc log stats` reports.
#[derive(Debug, Default, Serialize)]
struct Stats {
    log: String,
    start_offset: u64,
    end_offset: u64,
    records: u64,
    invalid: u64,
    record_bytes: u64,
    first_ts: Option<Ts>,
    last_ts: Option<Ts>,
    by_type: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    segments: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disk_bytes: Option<u64>,
}

fn stats(format: Format, target: &LogArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let log = target.open_for_read()?;
    let mut stats = Stats {
        log: log.describe(),
        start_offset: log.start_offset()?,
        end_offset: log.end_offset()?,
        ..Stats::default()
    };
    if let Some(dir) = target.embedded_dir() {
        let report = lhc_log::embedded::check(dir)?;
        stats.segments = Some(report.segments);
        stats.disk_bytes = Some(report.bytes);
    }
    let bar = progress::bar(
        Some(stats.end_offset - stats.start_offset),
        "reading",
        quiet,
    );
    let mut reader = log.reader(stats.start_offset)?;
    while let Some(entry) = reader.next(Duration::ZERO)? {
        stats.records += 1;
        stats.record_bytes += entry.bytes.len() as u64;
        bar.inc(1);
        match decode_record(&entry.bytes) {
            Ok(record) => {
                *stats
                    .by_type
                    .entry(record.type_name().to_string())
                    .or_default() += 1;
                stats.first_ts.get_or_insert(record.ts());
                stats.last_ts = Some(record.ts());
            }
            Err(_) => stats.invalid += 1,
        }
    }
    bar.finish_and_clear();
    match format {
        Format::Json => {
            println!("{}", serde_json::to_string_pretty(&stats)?);
            return Ok(ExitCode::SUCCESS);
        }
        Format::Jsonl => {
            println!("{}", serde_json::to_string(&stats)?);
            return Ok(ExitCode::SUCCESS);
        }
        Format::Table => {}
    }
    println!("log            {}", stats.log);
    println!(
        "offsets        {}..{}",
        stats.start_offset, stats.end_offset
    );
    println!(
        "records        {} ({} invalid)",
        stats.records, stats.invalid
    );
    println!("record bytes   {}", stats.record_bytes);
    if let (Some(segments), Some(disk)) = (stats.segments, stats.disk_bytes) {
        println!("segments       {segments} ({disk} bytes on disk)");
    }
    if let (Some(a), Some(b)) = (stats.first_ts, stats.last_ts) {
        println!("time           {a} .. {b} ({} s)", b.seconds_since(a));
    }
    for (ty, n) in &stats.by_type {
        println!("  {ty:<22} {n:>10}");
    }
    Ok(ExitCode::SUCCESS)
}

fn check(target: &LogArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let mut healthy = true;
    // Not a log at all is an error (exit 2); a damaged log is a finding (exit 1): a
    // segment whose header is damaged (or that another segment's name was given) is
    // damage in a log, not the absence of one.
    let damaged = |e: &lhc_log::LogError| match e {
        lhc_log::LogError::Corrupt { .. } => true,
        lhc_log::LogError::NotALog { path, .. } => path.is_file(),
        _ => false,
    };
    let log = match target.open_for_read() {
        Ok(log) => log,
        Err(e) => match e.downcast_ref::<lhc_log::LogError>() {
            Some(found) if damaged(found) => {
                println!("{found}");
                return Ok(ExitCode::FAILURE);
            }
            _ => return Err(e),
        },
    };
    if let Some(dir) = target.embedded_dir() {
        let report = match lhc_log::embedded::check(dir) {
            Ok(report) => report,
            Err(e) if damaged(&e) => {
                println!("{e}");
                return Ok(ExitCode::FAILURE);
            }
            Err(e) => return Err(e.into()),
        };
        if !quiet {
            println!(
                "framing ok: {} segment(s), {} record(s), offsets {}..{}, {} bytes",
                report.segments,
                report.records,
                report.start_offset,
                report.end_offset,
                report.bytes
            );
        }
        if let Some((segment, offset, bytes)) = &report.torn_tail {
            println!(
                "torn tail: {bytes} byte(s) after offset {offset} in {} (an interrupted append; \
                 the next writer cuts it, keeping the bytes in {})",
                segment.display(),
                lhc_log::embedded::cut_path(segment, *offset).display()
            );
        }
        // Not damage: what writers cut, kept for whoever wants to look (a torn tail is
        // what a crash leaves, but damage can look like one).
        let mut cuts: Vec<(String, u64)> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        // A regular file only (the entry's own type: never a link followed).
                        let meta = e.metadata().ok().filter(|m| m.is_file())?;
                        lhc_log::embedded::is_cut_file(&name).then_some((name, meta.len()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        cuts.sort();
        let mark = dir.join(lhc_log::embedded::COMMIT_FILE);
        if std::fs::symlink_metadata(&mark).is_ok_and(|m| !m.is_file()) {
            healthy = false;
            println!(
                "commit mark: {} is not a regular file (a symbolic link, a directory or a \
                 FIFO): readers ignore it, and writers refuse this log until it is removed",
                mark.display()
            );
        }
        for (name, len) in cuts {
            let path = dir.join(name);
            // A whole segment starts with a segment header; cut bytes never do.
            let mut head = [0u8; 16];
            let set_aside = std::fs::File::open(&path)
                .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut head, 0))
                .ok()
                .and_then(|()| lhc_log::frame::parse_segment_header(&head).ok());
            match set_aside {
                Some(base) => println!(
                    "segment set aside: {} ({len} byte(s)): a whole segment, records from offset \
                     {base} on, that a writer moved out of the log because a segment before \
                     it had been replaced by an older copy while a batch was written; the \
                     records between are named lost. Remove the file once looked at",
                    path.display()
                ),
                None => println!(
                    "cut bytes kept: {} ({len} byte(s)): a torn tail a writer cut; if its first \
                     bytes are a whole record, the log was damaged, not torn. Remove the file \
                     once looked at",
                    path.display()
                ),
            }
        }
        if let Some((segment, end, listed)) = &report.lost_tail {
            healthy = false;
            println!(
                "records lost: {} ends at offset {end}, but its index or the log's commit mark \
                 names a record at offset {listed}: records {end}..={listed} (at least) were \
                 written and are gone (the file was cut, an older copy put in its place, or \
                 a crash lost writes not yet on disk with --fsync never or an interval); restore the log from a copy. The next \
                 append would give their offsets to other records",
                segment.display()
            );
        }
        if let Some(mark) = report.commit_mark.filter(|&m| m < report.end_offset) {
            println!(
                "uncommitted: {} record(s) after the commit mark (offset {mark}): a batch a \
                 writer is appending now (readers wait for its end), or one a writer that \
                 died left whole (readers read it, and the next writer keeps it)",
                report.end_offset - mark
            );
        }
        // Losses a writer found (and appended after, rebuilding the index that showed
        // them): named for good, since the offsets go to other records.
        for kept in lhc_log::embedded::lost_records(dir)? {
            healthy = false;
            match kept {
                Ok(lost) => println!(
                    "records lost: {} ended at offset {}, but its index, the commit mark or a \
                     checkpoint had named a record at offset {}; records {}..={} (at least) \
                     were gone when a writer came to append after them, and their offsets go \
                     to the records appended since (kept in {})",
                    lost.segment.display(),
                    lost.first,
                    lost.last_listed,
                    lost.first,
                    lost.last_listed,
                    dir.join(lhc_log::embedded::LOST_FILE).display()
                ),
                Err(line) => println!(
                    "records lost: {} holds a line that does not parse: {line:?}",
                    dir.join(lhc_log::embedded::LOST_FILE).display()
                ),
            }
        }
        // A checkpoint covers the records it was written after: one past the end is
        // evidence of records that are gone (`lhc log checkpoint` refuses to remove it).
        if let Ok(log) = lhc_log::EmbeddedLog::open_read_only(dir) {
            let checkpoint = lhc_replay::checkpoint::beyond(dir, &log, report.end_offset)
                .inspect_err(|e| eprintln!("warning: the checkpoints could not be read: {e}"));
            // Said once: a loss a writer kept already names these records.
            let kept = |covers: u64| {
                lhc_log::embedded::lost_covers(dir, report.end_offset, covers.saturating_sub(1))
                    .unwrap_or(false)
            };
            if let Ok(Some((covers, path))) = checkpoint.map(|c| c.filter(|(n, _)| !kept(*n))) {
                healthy = false;
                println!(
                    "records lost: checkpoint {} covers {covers} records, but the log holds \
                     records up to offset {}: records {}..{covers} are gone; restore the log \
                     from a copy (`lhc log checkpoint` refuses while that checkpoint is there)",
                    path.display(),
                    report.end_offset,
                    report.end_offset
                );
            }
        }
    }
    let mut reader = log.reader(log.start_offset()?)?;
    let (mut invalid, mut backwards, mut records) = (0u64, 0u64, 0u64);
    let mut last_ts: Option<Ts> = None;
    loop {
        let entry = match reader.next(Duration::ZERO) {
            Ok(Some(entry)) => entry,
            Ok(None) => break,
            Err(e @ lhc_log::LogError::Corrupt { .. }) => {
                println!("{e}");
                healthy = false;
                break;
            }
            Err(e) => return Err(e.into()),
        };
        records += 1;
        match decode_record_at(&entry.bytes, entry.offset) {
            Ok(record) => {
                if last_ts.is_some_and(|t| record.ts() < t) {
                    backwards += 1;
                    if backwards <= 20 {
                        println!(
                            "offset {}: ts {} is older than the previous record's {} (out of time order: replay quarantines it when that record was applied, R-LOG-4)",
                            entry.offset,
                            record.ts(),
                            last_ts.expect("checked")
                        );
                    }
                } else {
                    last_ts = Some(record.ts());
                }
            }
            Err(error) => {
                invalid += 1;
                if invalid <= 50 {
                    println!("{error}");
                }
            }
        }
    }
    if invalid > 0 {
        healthy = false;
        println!(
            "{invalid} of {records} record(s) break the record contract (replay quarantines them)"
        );
    }
    if backwards > 0 {
        healthy = false;
        println!("{backwards} record(s) go back in time (replay quarantines them)");
    }
    if healthy && !quiet {
        println!("records ok: {records} record(s) valid against the schemas");
    }
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
