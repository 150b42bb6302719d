//! OPC UA servers twinops did not write, started and driven over stdin, for the interop
//! tests and `bench opcua`: node-opcua's (`tests/opcua/server.mjs`) and asyncua's
//! (`tests/opcua/asyncua_server.py`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The server script, as the repository holds it.
pub const SCRIPT: &str = include_str!("../../tests/opcua/server.mjs");
/// asyncua's (Python), likewise: a second implementation, which reports alarms on the
/// equipment object with the variable as InputNode.
pub const ASYNCUA_SCRIPT: &str = include_str!("../../tests/opcua/asyncua_server.py");

/// A running server.
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
        let mut command = Command::new(node);
        command.arg(&script).args([port.to_string(), pki.display().to_string(), extra.to_string()]);
        let server = Server::spawn(command, node).await;
        // Loaded by now: the copy is not left behind.
        let _ = std::fs::remove_file(&script);
        server.map_err(|e| anyhow::anyhow!("node-opcua's server: {e} (is node-opcua installed in {}?)", js.display()))
    }

    /// Starts asyncua's server (`tests/opcua/asyncua_server.py`) with `python`, a Python
    /// that has the `asyncua` package, on `port`.
    pub async fn start_asyncua(python: &str, port: u16) -> anyhow::Result<Server> {
        let mut command = Command::new(python);
        command.args(["-c", ASYNCUA_SCRIPT, &port.to_string()]);
        Server::spawn(command, python)
            .await
            .map_err(|e| anyhow::anyhow!("asyncua's server: {e} (is asyncua installed for {python}?)"))
    }

    /// Runs `command` with piped stdin and stdout, and waits for its `ready` line.
    async fn spawn(mut command: Command, program: &str) -> anyhow::Result<Server> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| anyhow::anyhow!("starting {program}: {e}"))?;
        let stdin = child.stdin.take().expect("piped");
        let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let mut server = Server { child, stdin, lines };
        anyhow::ensure!(server.heard("ready", Duration::from_secs(60)).await.is_some(), "not ready within 60 s");
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
