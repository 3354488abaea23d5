//! `bench` and `bench-purge`: the figures of `docs/raft.md`, measured by this binary.

use std::path::PathBuf;

use std::thread;
use std::time::{Duration, Instant};

use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, EntryPayload, LogId};
use siltdb::WriteBatch;
use siltdb_raft::client::Client;
use siltdb_raft::local_cluster::LocalCluster;
use siltdb_raft::{keys, open_store, Error, Request, TypeConfig};

/// Flags of `bench`.
#[derive(clap::Args)]
pub struct BenchArgs {
    /// Committed writes per client-count row.
    #[arg(long, default_value_t = 20_000)]
    writes: usize,
    /// Client counts, one row each.
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    clients: Vec<usize>,
    /// Leader kills for the failover figure.
    #[arg(long, default_value_t = 5)]
    failovers: usize,
    /// Value size in bytes (keys are 16 bytes).
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// The nodes' heartbeat interval in milliseconds (as `serve --heartbeat-ms`).
    #[arg(long, default_value_t = 100)]
    heartbeat_ms: u64,
    /// The nodes' election timeout, lower end, in milliseconds (as `serve --election-ms`).
    #[arg(long, default_value_t = 500)]
    election_ms: u64,
    /// Where the nodes' directories go (default: a fresh temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Flags of `bench-purge`.
#[derive(clap::Args)]
pub struct PurgeArgs {
    /// Log entries to append, apply and purge.
    #[arg(long, default_value_t = 1_000_000)]
    entries: u64,
    /// Where the two databases go (default: a fresh temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
}

fn work_dir(dir: Option<PathBuf>) -> Result<(PathBuf, Option<tempfile::TempDir>), Error> {
    match dir {
        Some(d) => {
            std::fs::create_dir_all(&d)?;
            Ok((d, None))
        }
        None => {
            let t = tempfile::tempdir()?;
            Ok((t.path().to_path_buf(), Some(t)))
        }
    }
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Writes `n` keys with `clients` threads; returns the elapsed time and every latency.
fn load(
    addrs: &[String],
    clients: usize,
    n: usize,
    value: &str,
    tag: &str,
) -> Result<(Duration, Vec<Duration>), Error> {
    let per = n.div_ceil(clients);
    let start = Instant::now();
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            let addrs = addrs.to_vec();
            let value = value.to_string();
            let tag = tag.to_string();
            thread::spawn(move || -> Result<Vec<Duration>, Error> {
                let mut client = Client::new(addrs);
                let mut lat = Vec::with_capacity(per);
                for i in 0..per {
                    let key = format!("{tag:<2.2}{c:02}{i:012}"); // 16 bytes
                    let t = Instant::now();
                    client.put(&key, &value)?;
                    lat.push(t.elapsed());
                }
                Ok(lat)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(n);
    for h in handles {
        all.extend(
            h.join()
                .map_err(|_| Error::Unavailable("a client thread panicked".into()))??,
        );
    }
    let elapsed = start.elapsed();
    all.sort();
    Ok((elapsed, all))
}

pub fn run(args: BenchArgs) -> Result<(), Error> {
    let exe = std::env::current_exe()?;
    let (root, _guard) = work_dir(args.dir)?;
    let (hb, el) = (args.heartbeat_ms.to_string(), args.election_ms.to_string());
    let node_args = ["--heartbeat-ms", hb.as_str(), "--election-ms", el.as_str()];
    let mut cluster = LocalCluster::start(&exe, &root.join("cluster"), 3, &node_args)?;
    let addrs = cluster.addrs();
    cluster.wait_leader(Duration::from_secs(30), &[])?;
    let value = "v".repeat(args.value_size);
    load(&addrs, 1, 200, &value, "w")?; // warm-up: connections, first tables
    println!("3 nodes, one process each, on 127.0.0.1 of one machine ({} cores shared by all three and the clients)", thread::available_parallelism().map(|n| n.get()).unwrap_or(0));
    println!(
        "16-byte keys, {}-byte values, every committed write synced on a majority",
        args.value_size
    );
    println!();
    println!(
        "| clients | writes | writes/s | p50 ms | p99 ms | fsyncs per write (3 nodes) | per node |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for (row, &clients) in args.clients.iter().enumerate() {
        let syncs0 = cluster.wal_syncs();
        let (elapsed, lat) = load(
            &addrs,
            clients.max(1),
            args.writes,
            &value,
            &format!("c{row}"),
        )?;
        let syncs = cluster.wal_syncs().saturating_sub(syncs0);
        let n = lat.len() as f64;
        println!(
            "| {clients} | {} | {:.0} | {:.2} | {:.2} | {:.3} | {:.3} |",
            lat.len(),
            n / elapsed.as_secs_f64(),
            ms(pct(&lat, 0.5)),
            ms(pct(&lat, 0.99)),
            syncs as f64 / n,
            syncs as f64 / n / 3.0
        );
    }
    println!();
    println!("| failover | killed leader | new leader | kill -> first write committed by the new leader (ms) |");
    println!("|---:|---:|---:|---:|");
    let mut times = Vec::new();
    for trial in 0..args.failovers {
        let old = cluster.wait_leader(Duration::from_secs(30), &[])?;
        let mut client = Client::new(addrs.clone()).timeout(Duration::from_secs(30));
        client.put("failover-warmup", "x")?;
        cluster.kill(old)?;
        let t0 = Instant::now();
        client.put(&format!("failover-{trial}"), "x")?;
        let took = t0.elapsed();
        let new = cluster.wait_leader(Duration::from_secs(30), &[old])?;
        println!("| {} | {old} | {new} | {:.0} |", trial + 1, ms(took));
        times.push(took);
        cluster.restart(old)?;
        let target = siltdb_raft::client::status(cluster.addr(new))?
            .last_applied
            .unwrap_or(0);
        cluster.wait_status(old, Duration::from_secs(60), "catch up", |s| {
            s.last_applied.unwrap_or(0) >= target
        })?;
    }
    times.sort();
    if !times.is_empty() {
        println!();
        println!(
            "failover median {:.0} ms, max {:.0} ms over {} kills",
            ms(pct(&times, 0.5)),
            ms(times[times.len() - 1]),
            times.len()
        );
    }
    Ok(())
}

fn write_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("write_bytes:")
                    .and_then(|v| v.trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

fn entry(i: u64, value: &str) -> openraft::Entry<TypeConfig> {
    openraft::Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), i),
        payload: EntryPayload::Normal(Request::Put {
            key: format!("{i:016}"),
            value: value.to_string(),
        }),
    }
}

pub fn purge(args: PurgeArgs) -> Result<(), Error> {
    let (root, _guard) = work_dir(args.dir)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let value = "v".repeat(100);
    println!("log of {} entries (16-byte keys, 100-byte values, JSON-encoded), appended in batches of 1,000 synced, flushed to tables", args.entries);
    println!();
    println!("| how | time | bytes written to the device (/proc/self/io) | WAL bytes | disk before | then a full compaction: bytes it read | tables it dropped unread | disk after |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for one_range_delete in [true, false] {
        let dir = root.join(if one_range_delete { "range" } else { "per-key" });
        let (mut log, _sm) = open_store(&dir)?;
        let db = log.db();
        rt.block_on(async {
            let mut i = 1;
            while i <= args.entries {
                let end = (i + 1000).min(args.entries + 1);
                let batch: Vec<_> = (i..end).map(|j| entry(j, &value)).collect();
                log.blocking_append(batch)
                    .await
                    .map_err(|e| Error::Remote(e.to_string()))?;
                i = end;
            }
            Ok::<(), Error>(())
        })?;
        db.flush()?;
        db.wait_for_compactions()?;
        let disk_before = db.disk_size()?;
        let (w0, u0) = (write_bytes(), db.stats().user_bytes_written);
        let t = Instant::now();
        if one_range_delete {
            rt.block_on(log.purge(LogId::new(CommittedLeaderId::new(1, 1), args.entries)))
                .map_err(|e| Error::Remote(e.to_string()))?;
        } else {
            let mut batch = WriteBatch::new();
            for j in 1..=args.entries {
                batch.remove(keys::log_key(j));
                if batch.len() == 10_000 {
                    db.write(std::mem::take(&mut batch))?;
                }
            }
            if !batch.is_empty() {
                db.write(batch)?;
            }
            db.sync()?;
        }
        let took = t.elapsed();
        let (w1, u1) = (write_bytes(), db.stats().user_bytes_written);
        let before = db.stats();
        db.compact()?;
        let after = db.stats();
        let disk_after = db.disk_size()?;
        println!(
            "| {} | {:.3} ms | {} | {} | {:.1} MiB | {:.1} MiB | {} | {:.1} MiB |",
            if one_range_delete {
                "purge: one range delete (siltdb-raft)"
            } else {
                "one delete per entry, batches of 10,000"
            },
            ms(took),
            w1 - w0,
            u1 - u0,
            disk_before as f64 / 1048576.0,
            (after.bytes_compacted_read - before.bytes_compacted_read) as f64 / 1048576.0,
            after.tables_dropped_unread - before.tables_dropped_unread,
            disk_after as f64 / 1048576.0
        );
        drop(db);
        drop(log);
    }

    Ok(())
}
