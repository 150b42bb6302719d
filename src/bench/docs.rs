//! `bench docs`: how long `docs index` takes on a folder of manuals, PDFs included.

use std::path::PathBuf;
use std::time::Instant;

use crate::domain::Timestamp;
use crate::store::Store;

#[derive(clap::Args)]
pub struct DocsBenchArgs {
    /// The manuals to index (e.g. a 500-page PDF).
    dir: PathBuf,
    /// Database to index into; emptied first.
    #[arg(long, default_value = "data/bench-docs.db")]
    bench_db: PathBuf,
}

/// Indexes `dir` into an empty database, and again unchanged: the first is the work, the
/// second the check that finds nothing to do.
pub fn docs(args: &DocsBenchArgs) -> anyhow::Result<()> {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", args.bench_db.display()));
    }
    if let Some(parent) = args.bench_db.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let store = Store::open(&args.bench_db)?;
    let started = Instant::now();
    let first = crate::rag::index_dir(&store, &args.dir, Timestamp::now())?;
    let took = started.elapsed();
    let started = Instant::now();
    let again = crate::rag::index_dir(&store, &args.dir, Timestamp::now())?;
    let unchanged = started.elapsed();
    let bytes: u64 = std::fs::read_dir(&args.dir)?.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum();
    println!(
        "docs index of {} ({:.1} MB): {} documents, {} chunks in {:.2} s ({:.0} chunks/s); unchanged again in {:.2} s ({} unchanged)",
        args.dir.display(),
        bytes as f64 / 1e6,
        first.added,
        first.chunks_written,
        took.as_secs_f64(),
        first.chunks_written as f64 / took.as_secs_f64(),
        unchanged.as_secs_f64(),
        again.unchanged
    );
    for (path, why) in &first.not_indexed {
        println!("not indexed: {path}: {why}");
    }
    Ok(())
}
