//! The systemd notification protocol (`Type=notify`, `WatchdogSec=`): a datagram to
//! `$NOTIFY_SOCKET`. Outside systemd the variable is unset and nothing is sent.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// Sends `state` (e.g. `READY=1`) to the socket named by `$NOTIFY_SOCKET`, if any.
pub fn notify(state: &str) {
    if let Some(path) = std::env::var_os("NOTIFY_SOCKET")
        && let Err(e) = send(std::path::Path::new(&path), state)
    {
        tracing::warn!(stage = "app", error = %e, "systemd notification not sent");
    }
}

fn send(path: &std::path::Path, state: &str) -> std::io::Result<()> {
    let socket = UnixDatagram::unbound()?;
    socket.send_to(state.as_bytes(), path)?;
    Ok(())
}

/// How often to ping the watchdog: half of `$WATCHDOG_USEC`, or None without one.
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_a_datagram_to_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let server = UnixDatagram::bind(&path).unwrap();
        send(&path, "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }
}
