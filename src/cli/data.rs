//! What the twin holds: `twinops plant`, `readings`, `dead-letters` and `docs`.

use super::*;
use crate::domain::DeadLetterReason;

#[derive(Subcommand)]
pub(super) enum PlantCommand {
    /// Import the plant from the files a site has: a TOML in the shape of
    /// seed/plant.toml and CSV asset registers and tag exports, combined as you like.
    /// One transaction: any error (each with file:line:column) and nothing is written.
    /// A full import retires what it leaves out; --partial only adds and updates.
    #[command(
        after_help = "Examples:\n  twinops plant import site.toml assets.csv tags.csv --dry-run\n  twinops plant import site.toml assets.csv tags.csv\n  twinops plant import new-tags.csv --partial"
    )]
    Import {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print the changes (added; changed, field by field; retired) and write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Add and update only; retire nothing.
        #[arg(long)]
        partial: bool,
        /// Who imports, for the audit log.
        #[arg(long, env = "USER", default_value = "cli")]
        user: String,
    },
    /// Write the twin's plant as plant.toml, assets.csv and tags.csv into a folder, in
    /// the shape `plant import` reads.
    #[command(after_help = "Example:\n  twinops plant export /tmp/plant")]
    Export { dir: PathBuf },
}

#[derive(Subcommand)]
pub(super) enum ReadingsCommand {
    /// Import a historian's CSV export: long (time, tag, value[, quality]) or wide
    /// (time, then a column per tag); RFC 3339 or epoch seconds or milliseconds. Rows
    /// already stored are counted, not written again; bad quality, unknown tags and
    /// unreadable values are skipped and counted. Never raises live alarms.
    #[command(
        after_help = "Examples:\n  twinops readings import historian-2026-11.csv\n  twinops readings import local-times.csv --timezone America/Chicago"
    )]
    Import {
        file: PathBuf,
        /// The time zone of times written without an offset (IANA name, e.g.
        /// Europe/London); default: the site's. DST changes are handled.
        #[arg(long)]
        timezone: Option<String>,
    },
}

#[derive(Subcommand)]
pub(super) enum DeadLettersCommand {
    /// List dead letters not yet replayed, oldest first.
    #[command(
        after_help = "Examples:\n  twinops dead-letters list\n  twinops dead-letters list --reason unknown_sensor --all"
    )]
    List {
        /// Only this reason: malformed, oversized, invalid, unknown_asset, unknown_sensor,
        /// unmatched_clear, conflict, retired, unsupported, failed, not_born, unknown_alias.
        #[arg(long, value_parser = DeadLetterReason::parse)]
        reason: Option<DeadLetterReason>,
        /// Include those already replayed.
        #[arg(long)]
        all: bool,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Apply dead letters again, by id or all of one reason; one refused again stays as it
    /// was, with the reason printed.
    #[command(
        after_help = "Examples:\n  twinops dead-letters replay 17 18\n  twinops dead-letters replay --reason unknown_sensor --user operator.kaur"
    )]
    Replay {
        ids: Vec<i64>,
        /// Every dead letter of this reason not yet replayed (instead of ids).
        #[arg(long, conflicts_with = "ids", value_parser = DeadLetterReason::parse)]
        reason: Option<DeadLetterReason>,
        #[arg(long, env = "USER", default_value = "cli")]
        user: String,
    },
}

#[derive(Subcommand)]
pub(super) enum DocsCommand {
    /// Chunk and index every document under DIR (Markdown, text, HTML, PDF: a chunk per
    /// page, cited manual.pdf#p3); unchanged files are skipped, and what cannot be indexed
    /// (a scanned PDF without text, another format) is listed with the reason.
    #[command(after_help = "Example:\n  twinops docs index seed/docs\n  twinops docs index /var/lib/twinops/manuals")]
    Index { dir: PathBuf },
    /// Search the indexed documentation (BM25), as the search_docs tool does.
    #[command(after_help = "Example:\n  twinops docs search 'VIB-HI pump bearing vibration'")]
    Search {
        query: String,
        #[arg(long, default_value_t = 5)]
        limit: usize,
    },
}

pub(super) fn plant(global: &Global, cmd: PlantCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        PlantCommand::Import { files, dry_run, partial, user } => {
            let store = global.open()?;
            let mode = if partial { crate::plant::Mode::Partial } else { crate::plant::Mode::Full };
            let files = crate::plant::SiteFiles::read(&files)?;
            if !dry_run {
                let import = crate::decisions::PlantImport { files: files.clone(), mode };
                let change = || Ok((crate::decisions::PLANT, serde_json::to_value(import)?));
                if let Some(done) = global.through_pair(&store, change, &user)? {
                    println!("{}", done["changes"].as_str().unwrap_or_default());
                    println!("(through the pair's decision log: both nodes import the same files)");
                    return Ok(ExitCode::SUCCESS);
                }
            }
            let changes = crate::plant::import(store.writer(), files.model()?, mode, dry_run, &user, &files.names())?;
            println!("{changes}");
            if dry_run {
                println!("(dry run: nothing was written)");
            }
        }
        PlantCommand::Export { dir } => {
            let store = global.open()?;
            for path in crate::plant::export(&*store.read()?, &dir)? {
                println!("wrote {}", path.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn readings(global: &Global, cmd: ReadingsCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ReadingsCommand::Import { file, timezone } => {
            let store = global.open()?;
            let summary = crate::ingest::history::import(store.writer(), &*store.read()?, &file, timezone.as_deref())?;
            print!("{summary}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn dead_letters(global: &Global, cmd: DeadLettersCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        DeadLettersCommand::List { reason, all, limit } => {
            let store = global.open()?;
            let letters = dead_letters::list(&*store.read()?, reason, all, limit)?;
            println!(
                "{:>6}  {:<20} {:>5}  {:<15} {:>7}  {:<28} detail",
                "id", "received", "seen", "reason", "bytes", "topic"
            );
            for d in &letters {
                let replayed = d.replayed_at.map(|t| format!(" (replayed {})", t.to_rfc3339())).unwrap_or_default();
                let again = match d.times_seen {
                    1 => String::new(),
                    _ => format!(" (last seen {})", d.last_seen_at.to_rfc3339()),
                };
                println!(
                    "{:>6}  {:<20} {:>5}  {:<15} {:>7}  {:<28} {}{again}{replayed}",
                    d.id,
                    d.received_at.to_rfc3339(),
                    d.times_seen,
                    d.reason,
                    d.bytes,
                    d.topic,
                    d.detail.chars().take(120).collect::<String>()
                );
            }
            if letters.is_empty() {
                println!("(none)");
            }
        }
        DeadLettersCommand::Replay { ids, reason, user } => {
            let store = global.open()?;
            let ids = match reason {
                Some(reason) => {
                    dead_letters::list(&*store.read()?, Some(reason), false, u32::MAX)?.iter().map(|d| d.id).collect()
                }
                None if ids.is_empty() => {
                    anyhow::bail!("name dead letters by id, or --reason; `twinops dead-letters list` shows them")
                }
                None => ids,
            };
            let policy = global.config()?.ingest_policy();
            let (mut applied, mut refused) = (0, 0);
            for id in ids {
                match dead_letters::replay(store.writer(), id, &user, policy.clone())? {
                    dead_letters::Replay::Applied(e) => {
                        applied += 1;
                        println!(
                            "{id}: applied ({} alarm events, {} readings, {} already stored)",
                            e.alarms.len(),
                            e.readings,
                            e.duplicate_readings
                        );
                    }
                    dead_letters::Replay::Refused { reason, detail } => {
                        refused += 1;
                        println!("{id}: refused again, {reason}: {detail}");
                    }
                    dead_letters::Replay::AlreadyReplayed(at) => {
                        println!("{id}: already replayed at {}", at.to_rfc3339())
                    }
                    dead_letters::Replay::NotFound => {
                        refused += 1;
                        println!("{id}: no such dead letter; `twinops dead-letters list --all` shows them");
                    }
                }
            }
            println!("{applied} applied, {refused} not");
            if refused > 0 {
                return Ok(ExitCode::from(1));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn docs(global: &Global, cmd: DocsCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        DocsCommand::Index { dir } => {
            let store = global.open()?;
            let r = rag::index_dir(&store, &dir, Timestamp::now())?;
            println!(
                "indexed {}: {} added, {} updated, {} unchanged, {} chunks written",
                dir.display(),
                r.added,
                r.updated,
                r.unchanged,
                r.chunks_written
            );
            for (path, why) in &r.not_indexed {
                println!("not indexed: {path}: {why}");
            }
            let index = global.config()?.doc_index();
            if let Some(embedder) = index.embedder() {
                match rag::embed_chunks(&store, embedder) {
                    Ok(e) => {
                        println!("embedded {} chunks with {} ({} had a vector)", e.embedded, embedder.model(), e.kept)
                    }
                    Err(e) => {
                        eprintln!(
                            "{e:#}\nthe documents are indexed and searchable by words; run `twinops docs index` again to embed the rest"
                        );
                        return Ok(ExitCode::FAILURE);
                    }
                }
            }
        }
        DocsCommand::Search { query, limit } => {
            let store = global.open()?;
            let db = store.read()?;
            for hit in global.config()?.doc_index().search(&db, &query, limit)? {
                println!(
                    "{:>7.3}  {:<32} {}\n         {}",
                    hit.score,
                    hit.citation.as_str(),
                    hit.heading,
                    hit.snippet.replace('\n', " ")
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn seed(global: &Global, args: SeedArgs) -> anyhow::Result<()> {
    let end = match &args.end {
        Some(s) => parse_time(s).map_err(anyhow::Error::msg).context("--end")?,
        None => Timestamp::now(),
    };
    let store = global.open()?;
    let opts = seed::SeedOptions { dir: args.from, scale: args.scale, end, days: args.days };
    let r = seed::seed(&store, &opts)?;
    println!(
        "seeded {}: {} assets, {} sensors, {} readings, {} alarms ({} active), {} maintenance records, \
             {} documents in {} chunks; readings end at {}",
        store.path().display(),
        r.assets,
        r.sensors,
        r.readings,
        r.alarms,
        r.active_alarms,
        r.maintenance,
        r.docs.added + r.docs.updated + r.docs.unchanged,
        r.docs.chunks_written,
        end.floor_minute().to_rfc3339()
    );
    Ok(())
}

pub(super) fn backup(global: &Global, to: &std::path::Path) -> anyhow::Result<()> {
    let from = global.db_path()?;
    let b = crate::store::backup(&from, to)?;
    println!(
        "backup of {} written to {}: {:.1} MiB, schema version {}, integrity ok, in {:.1} s",
        from.display(),
        to.display(),
        b.bytes as f64 / (1024.0 * 1024.0),
        b.schema_version,
        b.elapsed.as_secs_f64()
    );
    Ok(())
}
