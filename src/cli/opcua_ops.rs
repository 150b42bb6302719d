//! `twinops opcua`: browse a server's address space into plant files, and the trust
//! store of server certificates.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use super::{Global, runtime};
use crate::opcua::{self, NodeRef};

#[derive(Subcommand)]
pub(super) enum OpcuaCommand {
    /// Walk the server's address space from a node and write the plant files
    /// (`plant.toml`, `assets.csv`, `tags.csv`, `connections.csv`) for review, then `twinops plant import`.
    #[command(after_help = "Example:\n  twinops opcua browse --root 'nsu=urn:site:plc;s=PS1' --out plant-opcua\n  \
        twinops plant import --partial plant-opcua/*")]
    Browse {
        /// Where to start (default opcua.root, the Objects folder): nsu=<namespace URI>;s=<id>.
        #[arg(long)]
        root: Option<String>,
        /// Folder to write the files into.
        #[arg(long, default_value = "plant-opcua")]
        out: PathBuf,
    },
    /// List the server certificates twinops was shown (rejected until accepted) and
    /// trusts; accept one by its thumbprint.
    #[command(after_help = "Examples:\n  twinops opcua trust\n  twinops opcua trust --accept 3FA2C0D1")]
    Trust {
        /// Move the rejected certificate with this thumbprint (its first 8 or more
        /// characters) to the trusted ones.
        #[arg(long, value_name = "THUMBPRINT")]
        accept: Option<String>,
    },
}

pub(super) fn run(global: &Global, cmd: OpcuaCommand) -> anyhow::Result<ExitCode> {
    let config = global.config()?;
    let cfg = &config.opcua;
    let data_dir = global.data_dir()?;
    match cmd {
        OpcuaCommand::Trust { accept } => {
            let pki = opcua::connect::pki_dir(cfg, &data_dir);
            if let Some(thumbprint) = accept {
                let cert = opcua::trust::accept(&pki, &thumbprint)?;
                println!("trusted {} ({})\n  now in {}", cert.subject, cert.thumbprint, cert.file.display());
                return Ok(ExitCode::SUCCESS);
            }
            let all = opcua::trust::list(&pki)?;
            let refusal = opcua::trust::last_refusal(&pki);
            match (&refusal, all.is_empty()) {
                (Some(r), _) => println!("last refused: {r}"),
                (None, true) => println!(
                    "no server certificates in {} yet: twinops keeps one there when it first connects",
                    pki.display()
                ),
                (None, false) => {}
            }
            for c in &all {
                println!(
                    "{:<8} {}  {}\n         valid {} to {}",
                    if c.trusted { "trusted" } else { "REJECTED" },
                    c.thumbprint,
                    c.subject,
                    c.valid_from,
                    c.valid_to
                );
            }
            if all.iter().any(|c| !c.trusted) {
                println!(
                    "compare a thumbprint with the server's own (its configuration tool shows it), then: twinops opcua trust --accept <thumbprint>"
                );
            }
        }
        OpcuaCommand::Browse { root, out } => {
            anyhow::ensure!(!cfg.endpoint.is_empty(), "set opcua.endpoint in {} first", global.config.display());
            let root = match root {
                Some(r) => NodeRef::parse(&r).map_err(anyhow::Error::msg)?,
                None => cfg.root.clone(),
            };
            let found = runtime()?.block_on(async {
                let env = |k: &str| std::env::var(k).ok();
                let (session, task) = opcua::connect::once(cfg, &data_dir, &env).await?;
                let uris = opcua::browse::namespace_uris(&session).await?;
                let namespaces = opcua::node::namespace_map(&uris);
                let node = opcua::node::resolve(&root, &namespaces).ok_or_else(|| {
                    anyhow::anyhow!("the server has no namespace '{}' (root {root})", root.namespace())
                })?;
                let found = opcua::browse::walk(&session, cfg, &node).await;
                let _ = session.disconnect().await;
                task.abort();
                found
            })?;
            found.model("opcua browse").map_err(crate::plant::ImportError)?;
            let has_site = crate::plant::site(&*global.open()?.read()?)?.is_some();
            for path in found.write(cfg, &out, !has_site)? {
                println!("wrote {}", path.display());
            }
            println!(
                "{} assets, {} sensors, {} connections",
                found.assets.len(),
                found.sensors.len(),
                found.connections.len()
            );
            for s in &found.skipped {
                println!("skipped {s}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
