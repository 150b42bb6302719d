//! node-opcua's server (`tests/opcua/server.mjs`, an implementation twinops did not
//! write), started and driven over stdin, for the interop tests and `bench opcua`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The server script, as the repository holds it.
pub const SCRIPT: &str = include_str!("../../tests/opcua/server.mjs");

/// A running node-opcua server.
pub struct Server {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Server {
    /// Starts it with `node` on `port`, its certificates in `pki`; `js` is a folder
    /// holding `node_modules/node-opcua` (an ES module resolves its imports from where
    /// it lies, so the script is written there). `extra` namespaces registered before
    /// the plant's renumber them.
    pub async fn start(node: &str, js: &Path, port: u16, pki: &Path, extra: u32) -> anyhow::Result<Server> {
        let script: PathBuf = js.join(format!("twinops-server-{}-{port}.mjs", std::process::id()));
        std::fs::write(&script, SCRIPT)?;
        let mut child = Command::new(node)
            .arg(&script)
            .args([port.to_string(), pki.display().to_string(), extra.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| anyhow::anyhow!("starting {node}: {e}"))?;
        let stdin = child.stdin.take().expect("piped");
        let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let mut server = Server { child, stdin, lines };
        let ready = server.heard("ready", Duration::from_secs(60)).await.is_some();
        // Loaded by now: the copy is not left behind.
        let _ = std::fs::remove_file(&script);
        anyhow::ensure!(
            ready,
            "node-opcua's server did not start within 60 s (is node-opcua installed in {}?)",
            js.display()
        );
        Ok(server)
    }

    /// Sends a command and returns what follows `ok <command>` in its answer.
    pub async fn ask(&mut self, command: &str) -> anyhow::Result<String> {
        self.stdin.write_all(format!("{command}\n").as_bytes()).await?;
        self.stdin.flush().await?;
        let answer = self.heard(&format!("ok {command}"), Duration::from_secs(20)).await;
        answer.map(|rest| rest.trim().to_string()).ok_or_else(|| anyhow::anyhow!("the server did not do `{command}`"))
    }

    /// Waits for a line starting with `want`; returns the rest of it.
    pub async fn heard(&mut self, want: &str, limit: Duration) -> Option<String> {
        tokio::time::timeout(limit, async {
            while let Ok(Some(line)) = self.lines.next_line().await {
                if let Some(rest) = line.trim().strip_prefix(want) {
                    return Some(rest.to_string());
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
    }

    /// SIGKILL.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }
}
