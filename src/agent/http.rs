//! HTTP plumbing shared by the providers: one client, error classification, the
//! `Retry-After` headers, and Server-Sent Events.

use std::time::Duration;

use super::model::{ErrorClass, ModelError, classify_status};

/// Longest error body kept in an error message.
const ERROR_BODY_CHARS: usize = 300;

#[derive(Clone)]
pub struct Http {
    client: reqwest::Client,
}

impl Http {
    pub fn new() -> Http {
        crate::support::install_tls_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .expect("HTTP client with the ring provider");
        Http { client }
    }

    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// A request that never got a status: timeouts and connection failures are
    /// transient; anything else (a bad URL) is permanent.
    pub fn transport_error(&self, provider: &str, e: reqwest::Error) -> ModelError {
        let class = if e.is_timeout() || e.is_connect() || e.is_request() || e.is_body() {
            ErrorClass::Transient
        } else {
            ErrorClass::Permanent
        };
        let what = if e.is_timeout() {
            "timed out"
        } else if e.is_connect() {
            "connection failed"
        } else {
            "request failed"
        };
        // Without the URL: it may carry a key in its query string.
        ModelError::new(provider, class, format!("{what}: {}", e.without_url()))
    }
}

impl Default for Http {
    fn default() -> Self {
        Http::new()
    }
}

/// `retry-after-ms` (milliseconds) wins over `Retry-After` (seconds); an HTTP-date
/// form is ignored and the backoff policy decides.
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Some(Duration::from_secs_f64(ms.max(0.0) / 1000.0));
    }
    text("retry-after").and_then(|v| v.parse::<f64>().ok()).map(|s| Duration::from_secs_f64(s.max(0.0)))
}

/// Turns a non-success response into a classified error. The error goes to the audit
/// trail and the log, so the API key is cut out of it should the server echo it.
pub async fn error_from_response(
    provider: &str,
    response: reqwest::Response,
    key: Option<&crate::support::Secret>,
) -> ModelError {
    let status = response.status().as_u16();
    let after = retry_after(response.headers());
    let mut body = response.text().await.unwrap_or_default();
    if let Some(key) = key.map(|k| k.expose()).filter(|k| !k.is_empty()) {
        body = body.replace(key, "[redacted]");
    }
    let snippet: String = body.chars().take(ERROR_BODY_CHARS).collect();
    let class = classify_status(status, &body);
    let mut err = ModelError::new(provider, class, format!("HTTP {status}: {snippet}"));
    err.status = Some(status);
    err.retry_after = after;
    err
}

/// Reads a `text/event-stream` body, calling `on_data` with each event's data.
pub async fn read_sse(
    provider: &str,
    mut response: reqwest::Response,
    mut on_data: impl FnMut(&str) -> Result<(), ModelError>,
) -> Result<(), ModelError> {
    let mut parser = SseParser::default();
    loop {
        let chunk = response.chunk().await.map_err(|e| {
            let what = if e.is_timeout() { "the call's time ran out while the reply streamed" } else { "stream broke" };
            ModelError::new(provider, ErrorClass::Transient, format!("{what}: {}", e.without_url()))
        })?;
        let Some(chunk) = chunk else { break };
        for data in parser.push(&chunk) {
            on_data(&data)?;
        }
    }
    for data in parser.finish() {
        on_data(&data)?;
    }
    Ok(())
}

/// Incremental SSE parser: bytes in, event data out, whatever the chunk boundaries.
#[derive(Default)]
pub struct SseParser {
    buffer: Vec<u8>,
    data: Vec<String>,
}

impl SseParser {
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buffer.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(pos) = self.buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !self.data.is_empty() {
                    events.push(self.data.join("\n"));
                    self.data.clear();
                }
            } else if let Some(data) = line.strip_prefix("data:") {
                self.data.push(data.strip_prefix(' ').unwrap_or(data).to_string());
            }
        }
        events
    }

    pub fn finish(mut self) -> Vec<String> {
        let mut events = self.push(b"\n");
        if !self.data.is_empty() {
            events.push(self.data.join("\n"));
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_survive_any_chunking() {
        let stream = b"event: x\ndata: {\"a\":1}\n\ndata: two\ndata: lines\n\n: comment\ndata: [DONE]\n\n";
        for split in 1..stream.len() {
            let mut p = SseParser::default();
            let mut events = p.push(&stream[..split]);
            events.extend(p.push(&stream[split..]));
            events.extend(p.finish());
            assert_eq!(events, ["{\"a\":1}", "two\nlines", "[DONE]"], "split at {split}");
        }
    }

    #[test]
    fn retry_after_headers() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", "150".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(150)));
        let mut d = reqwest::header::HeaderMap::new();
        d.insert("retry-after", "Wed, 21 Oct 2026 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&d), None);
    }
}
