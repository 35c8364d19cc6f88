//! Partition log benchmark (issue 4). Prints one table and a list of target checks.
//!
//! Baselines measured in the same run with plain `std::fs` in the same temp dir: 1 MiB
//! sequential writes (page cache, and with one final fdatasync), fdatasync latency after a
//! 4 KiB write, and writes of exactly the batches the append runs use (same buffers and
//! sizes; page cache, final fdatasync, and fdatasync after each). Log cases: append
//! throughput (MB/s and batches/s) for 1 KiB records in 16 KiB and 256 KiB batches with
//! flush never and every batch; the CPU cost of the append checks (CRC32C, `validate`);
//! sequential reads of page-cached data; recovery of a `KEEL_BENCH_LOG_BYTES` (default
//! 1 GiB) log after an unclean stop, page cached and with the segment files dropped from
//! the page cache (via GNU `dd iflag=nocache`), next to a cold `std::fs` read of the same
//! files. Each phase starts after `sync(1)` so it does not pay for the previous one.
//!
//! Run: `cargo bench -p keel-broker --bench log`. Sizes: `KEEL_BENCH_LOG_BYTES`,
//! `KEEL_BENCH_APPEND_BYTES` (default 512 MiB per no-flush run). Data lives in a temp dir
//! under the cargo target dir and is removed at the end.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_broker::log::{Log, LogConfig, LogOpenOptions, SystemClock};
use keel_record::{RecordBatch, RecordBatchBuilder};

const MIB: f64 = 1024.0 * 1024.0;

fn env_bytes(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Row {
    name: String,
    mb_s: Option<f64>,
    per_s: Option<f64>,
    note: String,
}

fn row(name: impl Into<String>, bytes: u64, ops: u64, d: Duration, note: impl Into<String>) -> Row {
    let s = d.as_secs_f64();
    Row {
        name: name.into(),
        mb_s: Some(bytes as f64 / MIB / s),
        per_s: Some(ops as f64 / s),
        note: note.into(),
    }
}

/// Writes back all dirty pages system-wide (`sync(1)`) so each timed phase starts from the
/// same state instead of paying for the previous phase's writeback.
fn settle() {
    let _ = std::process::Command::new("sync").status();
}

/// Plain sequential writes of `chunk`-byte buffers: the page-cache rate (until the last
/// write returns) and the rate including one final fdatasync.
fn disk_write_rate(dir: &Path, total: u64, chunk: usize) -> (Row, Row) {
    settle();
    let path = dir.join("disk-probe");
    let buf = vec![0x5au8; chunk];
    let chunks = total / buf.len() as u64;
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    let start = Instant::now();
    for _ in 0..chunks {
        f.write_all(&buf).unwrap();
    }
    let cached = start.elapsed();
    f.sync_data().unwrap();
    let synced = start.elapsed();
    drop(f);
    std::fs::remove_file(&path).unwrap();
    let bytes = chunks * buf.len() as u64;
    let kib = chunk / 1024;
    (
        row(
            format!("disk: {kib} KiB writes, page cache"),
            bytes,
            chunks,
            cached,
            "std::fs",
        ),
        row(
            format!("disk: {kib} KiB writes + final fdatasync"),
            bytes,
            chunks,
            synced,
            "std::fs",
        ),
    )
}

/// Asks the kernel to drop `path` from the page cache (no unsafe code: GNU dd does the
/// `posix_fadvise`). Returns whether dd succeeded.
fn drop_page_cache(path: &Path) -> bool {
    std::process::Command::new("dd")
        .arg(format!("if={}", path.display()))
        .args(["iflag=nocache", "count=0", "status=none"])
        .status()
        .is_ok_and(|s| s.success())
}

/// fdatasync latency after a 4 KiB append, median and p99 of `n`.
fn fdatasync_latency(dir: &Path, n: usize) -> Row {
    let path = dir.join("sync-probe");
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let buf = vec![1u8; 4096];
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        f.write_all(&buf).unwrap();
        let t = Instant::now();
        f.sync_data().unwrap();
        lat.push(t.elapsed());
    }
    drop(f);
    std::fs::remove_file(&path).unwrap();
    lat.sort();
    let p50 = lat[n / 2];
    let p99 = lat[n * 99 / 100];
    Row {
        name: "disk: fdatasync after 4 KiB write".into(),
        mb_s: None,
        per_s: Some(1.0 / p50.as_secs_f64()),
        note: format!(
            "p50 {:.3} ms, p99 {:.3} ms",
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3
        ),
    }
}

/// A pool of distinct batches of `records` 1 KiB records (built once, outside the timing).
fn batch_pool(records: usize) -> Vec<Bytes> {
    (0..16)
        .map(|p| {
            let mut b = RecordBatchBuilder::new(0).with_capacity(records * 1040);
            for r in 0..records {
                let value = vec![(p * 31 + r) as u8; 1024];
                b.append(
                    1_700_000_000_000 + r as i64,
                    Some(&(r as u32).to_be_bytes()),
                    Some(&value),
                    &[],
                );
            }
            b.build().into_bytes()
        })
        .collect()
}

/// Appends `total` bytes of batches with `records` records; returns the row for the time
/// until the last append returned, the rate including a final `flush()` and the log.
fn append_run(dir: &Path, records: usize, flush: bool, total: u64) -> (Row, f64, Log) {
    settle();
    let config = LogConfig {
        flush_interval_messages: flush.then_some(1),
        retention_ms: None,
        ..LogConfig::default()
    };
    let name = format!("bench-{records}-{flush}");
    let log_dir = dir.join(&name);
    let mut log = Log::open(
        &log_dir,
        config,
        Arc::new(SystemClock),
        LogOpenOptions::default(),
    )
    .unwrap();
    let pool = batch_pool(records);
    let batch_bytes = pool[0].len() as u64;
    let n = (total / batch_bytes).max(1);
    let start = Instant::now();
    for i in 0..n {
        log.append_as_leader(pool[i as usize % pool.len()].clone(), 0)
            .unwrap();
    }
    let d = start.elapsed();
    log.flush().unwrap();
    let with_flush = (n * batch_bytes) as f64 / MIB / start.elapsed().as_secs_f64();
    let label = format!(
        "append {} KiB batches, flush {}",
        batch_bytes / 1024,
        if flush { "every batch" } else { "never" }
    );
    (
        row(label, n * batch_bytes, n, d, format!("{n} batches")),
        with_flush,
        log,
    )
}

/// CPU cost of the append-time checks alone: CRC32C, and the full `validate` (CRC + record
/// walk), over the same batches the append runs use.
fn cpu_costs(records: usize) -> Vec<Row> {
    let pool = batch_pool(records);
    let batches: Vec<RecordBatch> = pool
        .iter()
        .map(|b| RecordBatch::from_bytes(b.clone()).unwrap())
        .collect();
    let bytes = batches[0].size_bytes() as u64;
    let n = ((256u64 << 20) / bytes).max(1);
    let kib = bytes / 1024;
    let start = Instant::now();
    let mut acc = 0u32;
    for i in 0..n {
        acc ^= batches[i as usize % batches.len()].compute_crc();
    }
    let crc = row(
        format!("cpu: CRC32C of {kib} KiB batches"),
        n * bytes,
        n,
        start.elapsed(),
        "",
    );
    let start = Instant::now();
    for i in 0..n {
        batches[i as usize % batches.len()].validate().unwrap();
    }
    let note = format!("crc xor {acc:08x}");
    let validate = row(
        format!("cpu: validate {kib} KiB batches"),
        n * bytes,
        n,
        start.elapsed(),
        note,
    );
    vec![crc, validate]
}

/// Plain `write_all` of the append runs' own batches, round robin, into one file: the
/// disk's sequential write rate for exactly the bytes and write sizes an append issues
/// (page-cache rate, and the rate including one final fdatasync).
fn pool_write_rate(dir: &Path, records: usize, total: u64) -> (Row, Row) {
    settle();
    let pool = batch_pool(records);
    let bytes = pool[0].len() as u64;
    let n = (total / bytes).max(1);
    let path = dir.join("pool-probe");
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    let start = Instant::now();
    for i in 0..n {
        f.write_all(&pool[i as usize % pool.len()]).unwrap();
    }
    let cached = start.elapsed();
    f.sync_data().unwrap();
    let synced = start.elapsed();
    drop(f);
    std::fs::remove_file(&path).unwrap();
    let kib = bytes / 1024;
    (
        row(
            format!("disk: {kib} KiB batch writes, page cache"),
            n * bytes,
            n,
            cached,
            "std::fs",
        ),
        row(
            format!("disk: {kib} KiB batch writes + fdatasync"),
            n * bytes,
            n,
            synced,
            "std::fs",
        ),
    )
}

/// Plain `write_all` + fdatasync of each of `n` batches: the floor for flush-every-batch.
fn pool_sync_rate(dir: &Path, records: usize, n: u64) -> Row {
    settle();
    let pool = batch_pool(records);
    let bytes = pool[0].len() as u64;
    let path = dir.join("pool-sync-probe");
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    let start = Instant::now();
    for i in 0..n {
        f.write_all(&pool[i as usize % pool.len()]).unwrap();
        f.sync_data().unwrap();
    }
    let d = start.elapsed();
    drop(f);
    std::fs::remove_file(&path).unwrap();
    let kib = bytes / 1024;
    row(
        format!("disk: {kib} KiB batch write + fdatasync each"),
        n * bytes,
        n,
        d,
        "std::fs",
    )
}

fn read_all(log: &Log, max_bytes: usize) -> Row {
    let start = Instant::now();
    let mut next = log.log_start_offset();
    let mut bytes = 0u64;
    let mut reads = 0u64;
    while next < log.log_end_offset() {
        let r = log.read(next, max_bytes, log.log_end_offset()).unwrap();
        bytes += r.records.len() as u64;
        next = r.next_offset;
        reads += 1;
    }
    let d = start.elapsed();
    let note = format!("{} MiB in {reads} reads (page cached)", bytes >> 20);
    row(
        format!("sequential read, max_bytes {} KiB", max_bytes / 1024),
        bytes,
        reads,
        d,
        note,
    )
}

fn main() {
    // `cargo bench` passes `--bench`; ignore arguments.
    let base = env!("CARGO_TARGET_TMPDIR");
    std::fs::create_dir_all(base).unwrap();
    let tmp = tempfile::tempdir_in(base).unwrap();
    let dir = tmp.path();
    let recovery_bytes = env_bytes("KEEL_BENCH_LOG_BYTES", 1 << 30);
    let append_bytes = env_bytes("KEEL_BENCH_APPEND_BYTES", 512 << 20);
    let mut rows = Vec::new();
    let mut targets = Vec::new();

    // Warm-up: on this kind of (virtual) disk the first write to never-used blocks is much
    // slower than later ones; every later phase reuses freed blocks, so measure after it.
    let _ = disk_write_rate(dir, append_bytes, 1 << 20);
    let (cached, synced) = disk_write_rate(dir, append_bytes, 1 << 20);
    rows.push(cached);
    rows.push(synced);
    rows.push(fdatasync_latency(dir, 200));

    let mut read_rows = Vec::new();
    for records in [16usize, 256] {
        let (disk_cached, disk_synced) = pool_write_rate(dir, records, append_bytes);
        let (disk_cached_mb, disk_synced_mb) =
            (disk_cached.mb_s.unwrap(), disk_synced.mb_s.unwrap());
        rows.push(disk_cached);
        rows.push(disk_synced);
        rows.extend(cpu_costs(records));
        let (r, with_flush, log) = append_run(dir, records, false, append_bytes);
        let pct = r.mb_s.unwrap() / disk_cached_mb * 100.0;
        let pct_synced = with_flush / disk_synced_mb * 100.0;
        let note = format!(
            "{}; {pct:.0}% of plain writes; incl. final flush {with_flush:.0} MB/s = \
             {pct_synced:.0}% of plain writes + fdatasync",
            r.note
        );
        targets.push(format!(
            "append {} KiB batches, flush never >= 70% of the disk's write rate: {pct:.0}% \
             (page cache), {pct_synced:.0}% (to disk) -> {}",
            records,
            if pct >= 70.0 && pct_synced >= 70.0 {
                "PASS"
            } else {
                "FAIL"
            }
        ));
        rows.push(Row { note, ..r });
        if records == 16 {
            read_rows.push(read_all(&log, 1 << 20));
            read_rows.push(read_all(&log, 16 << 10));
        }
        log.delete().unwrap();
        // Flushing every batch is bounded by fdatasync latency: keep the run short.
        let sync_bytes = (append_bytes / 16).min(if records == 16 { 16 << 20 } else { 64 << 20 });
        let (r, _, log) = append_run(dir, records, true, sync_bytes);
        let n = r.note.split(' ').next().unwrap().parse().unwrap();
        let floor = pool_sync_rate(dir, records, n);
        let note = format!(
            "{}; {:.0}% of plain write + fdatasync per batch",
            r.note,
            r.per_s.unwrap() / floor.per_s.unwrap() * 100.0
        );
        rows.push(floor);
        rows.push(Row { note, ..r });
        log.delete().unwrap();
    }
    for r in &read_rows {
        let gb_s = r.mb_s.unwrap() * MIB / 1e9;
        targets.push(format!(
            "{} >= 1 GB/s: {gb_s:.2} GB/s -> {}",
            r.name,
            if gb_s >= 1.0 { "PASS" } else { "FAIL" }
        ));
    }
    rows.extend(read_rows);

    // Recovery: a log written without a clean shutdown, reopened with recovery point 0 so
    // every segment is scanned and CRC-checked; then a clean reopen for comparison.
    let (_, _, log) = append_run(dir, 16, false, recovery_bytes);
    settle();
    let log_dir = log.dir().to_path_buf();
    let size = log.size_bytes();
    let leo = log.log_end_offset();
    drop(log); // no close(): unclean
    let config = LogConfig {
        retention_ms: None,
        ..LogConfig::default()
    };
    let start = Instant::now();
    let log = Log::open(
        &log_dir,
        config.clone(),
        Arc::new(SystemClock),
        LogOpenOptions::default(),
    )
    .unwrap();
    let d = start.elapsed();
    assert_eq!(log.log_end_offset(), leo);
    let limit_s = 5.0 * size as f64 / (1u64 << 30) as f64;
    targets.push(format!(
        "page-cached recovery of {} MiB < {limit_s:.2} s (5 s per GiB): {:.3} s -> {}",
        size >> 20,
        d.as_secs_f64(),
        if d.as_secs_f64() < limit_s {
            "PASS"
        } else {
            "FAIL"
        }
    ));
    rows.push(Row {
        name: format!("recovery of {} MiB log (page cached)", size >> 20),
        mb_s: Some(size as f64 / MIB / d.as_secs_f64()),
        per_s: None,
        note: format!("{:.3} s, {} batches", d.as_secs_f64(), leo / 16),
    });
    log.close().unwrap();
    let start = Instant::now();
    let opts = LogOpenOptions {
        recovery_point: leo,
        clean_shutdown: true,
    };
    let log = Log::open(&log_dir, config.clone(), Arc::new(SystemClock), opts).unwrap();
    let d = start.elapsed();
    rows.push(Row {
        name: format!("open of {} MiB log (clean shutdown)", size >> 20),
        mb_s: None,
        per_s: None,
        note: format!("{:.3} s", d.as_secs_f64()),
    });
    drop(log);
    // Cold cache: write back, then drop the segment files from the page cache (GNU dd's
    // `iflag=nocache count=0` advises the kernel to drop a whole file), and recover again.
    settle();
    let segment_files: Vec<_> = std::fs::read_dir(&log_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    // The disk's own cold sequential read rate over the same files, for comparison.
    let mut dropped = segment_files.iter().all(|p| drop_page_cache(p));
    let start = Instant::now();
    let mut buf = vec![0u8; 4 << 20];
    let mut read_bytes = 0u64;
    for p in &segment_files {
        let mut f = std::fs::File::open(p).unwrap();
        // Bounded by the file size.
        loop {
            let n = std::io::Read::read(&mut f, &mut buf).unwrap();
            if n == 0 {
                break;
            }
            read_bytes += n as u64;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    rows.push(Row {
        name: "disk: cold sequential read of the segments".into(),
        mb_s: Some(read_bytes as f64 / MIB / secs),
        per_s: None,
        note: format!("std::fs 4 MiB reads, {secs:.3} s"),
    });
    dropped &= segment_files.iter().all(|p| drop_page_cache(p));
    let start = Instant::now();
    let log = Log::open(
        &log_dir,
        config,
        Arc::new(SystemClock),
        LogOpenOptions::default(),
    )
    .unwrap();
    let d = start.elapsed();
    assert_eq!(log.log_end_offset(), leo);
    let limit_s = 5.0 * size as f64 / (1u64 << 30) as f64;
    targets.push(format!(
        "cold-cache recovery of {} MiB < {limit_s:.2} s: {:.3} s -> {}{}",
        size >> 20,
        d.as_secs_f64(),
        if d.as_secs_f64() < limit_s {
            "PASS"
        } else {
            "FAIL"
        },
        if dropped {
            ""
        } else {
            " (page cache could not be dropped)"
        }
    ));
    rows.push(Row {
        name: format!("recovery of {} MiB log (cold cache)", size >> 20),
        mb_s: Some(size as f64 / MIB / d.as_secs_f64()),
        per_s: None,
        note: format!(
            "{:.3} s{}",
            d.as_secs_f64(),
            if dropped {
                ""
            } else {
                "; page cache NOT dropped"
            }
        ),
    });
    log.delete().unwrap();

    println!();
    let head = ["case", "MB/s (MiB)", "ops/s", "notes"];
    println!(
        "{:<46} {:>12} {:>14}  {}",
        head[0], head[1], head[2], head[3]
    );
    println!("{}", "-".repeat(110));
    for r in rows {
        let mb = r.mb_s.map_or("-".into(), |v| format!("{v:.1}"));
        let ops = r.per_s.map_or("-".into(), |v| format!("{v:.0}"));
        println!("{:<46} {:>12} {:>14}  {}", r.name, mb, ops, r.note);
    }
    println!();
    println!("targets (issue 4):");
    for t in targets {
        println!("  {t}");
    }
    println!();
    println!("data dir: {} (removed)", dir.display());
}
