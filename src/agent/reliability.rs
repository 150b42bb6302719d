//! Retries, circuit breakers and fallback: the chain of model providers.
//!
//! Transient errors are retried with exponential backoff and full jitter, never sooner
//! than the server's `Retry-After`; malformed replies get one more try; permanent
//! errors are not retried. A provider that keeps failing is skipped by its breaker
//! until a cool-down passes; then one call tries it again (half-open). When a provider
//! gives up, the next in the chain answers; the `rules` model is the floor.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::model::{ErrorClass, Model, ModelError, ModelReply, ModelRequest};
use crate::support::Rng;

#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub base: Duration,
    pub cap: Duration,
}

impl RetryPolicy {
    /// The wait before retry number `attempt` (0-based): full jitter over an
    /// exponentially growing window, but at least what the server asked for.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>, unit: f64) -> Duration {
        let window = self.base.saturating_mul(1 << attempt.min(16)).min(self.cap);
        let jittered = window.mul_f64(unit.clamp(0.0, 1.0));
        retry_after.map_or(jittered, |after| after.max(jittered))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

/// A circuit breaker: opens after `threshold` consecutive failures, half-opens after
/// `cooldown`, closes on the first success.
pub struct Breaker {
    threshold: u32,
    cooldown: Duration,
    inner: Mutex<(BreakerState, u32, Option<Instant>)>,
}

impl Breaker {
    pub fn new(threshold: u32, cooldown: Duration) -> Breaker {
        Breaker { threshold: threshold.max(1), cooldown, inner: Mutex::new((BreakerState::Closed, 0, None)) }
    }

    /// Whether a call may go through now; moves Open to HalfOpen after the cool-down.
    pub fn allow(&self) -> bool {
        let mut s = self.inner.lock().expect("breaker lock");
        match s.0 {
            BreakerState::Closed | BreakerState::HalfOpen => true,
            BreakerState::Open if s.2.is_some_and(|t| Instant::now() >= t) => {
                s.0 = BreakerState::HalfOpen;
                true
            }
            BreakerState::Open => false,
        }
    }

    /// Records a call's outcome; returns the new state when this changed it.
    pub fn record(&self, ok: bool) -> Option<BreakerState> {
        let mut s = self.inner.lock().expect("breaker lock");
        let before = s.0;
        if ok {
            *s = (BreakerState::Closed, 0, None);
        } else {
            s.1 += 1;
            if s.0 == BreakerState::HalfOpen || s.1 >= self.threshold {
                *s = (BreakerState::Open, s.1, Some(Instant::now() + self.cooldown));
            }
        }
        (s.0 != before).then_some(s.0)
    }

    pub fn cooldown(&self) -> Duration {
        self.cooldown
    }

    pub fn state(&self) -> BreakerState {
        self.inner.lock().expect("breaker lock").0
    }
}

/// One attempt at a model call, for the audit trail.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub provider: String,
    pub latency: Duration,
    pub result: Result<ModelReply, ModelError>,
    /// The wait before this attempt (backoff or Retry-After).
    pub waited: Duration,
}

pub struct Link {
    pub model: Arc<dyn Model>,
    pub breaker: Breaker,
}

/// Providers in order of preference, each with its breaker.
pub struct Chain {
    links: Vec<Link>,
    retry: RetryPolicy,
    jitter: Mutex<Rng>,
}

/// A reply and which link served it (0 = the preferred provider).
pub struct Served {
    pub reply: ModelReply,
    pub link: usize,
    pub provider: String,
}

impl Chain {
    pub fn new(models: Vec<Arc<dyn Model>>, retry: RetryPolicy, breaker_failures: u32, cooldown: Duration) -> Chain {
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        Chain {
            links: models
                .into_iter()
                .map(|model| Link { model, breaker: Breaker::new(breaker_failures, cooldown) })
                .collect(),
            retry,
            jitter: Mutex::new(Rng::from_label(&seed.to_string())),
        }
    }

    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// Asks each provider in turn until one answers, within `deadline`. Every attempt
    /// is appended to `attempts`. Starts at link `from` (a run that fell back stays
    /// fallen back).
    pub async fn complete(
        &self,
        req: &ModelRequest,
        from: usize,
        deadline: Instant,
        call_timeout: Duration,
        attempts: &mut Vec<Attempt>,
    ) -> Result<Served, ModelError> {
        let mut last_error = None;
        for (index, link) in self.links.iter().enumerate().skip(from) {
            if !link.breaker.allow() {
                last_error =
                    Some(ModelError::new(link.model.name(), ErrorClass::Transient, "circuit breaker open; skipped"));
                continue;
            }
            let mut waited = Duration::ZERO;
            let mut malformed_retry_used = false;
            for attempt in 0..=self.retry.max_retries {
                let remaining = deadline.saturating_duration_since(Instant::now());
                if remaining.is_zero() {
                    break;
                }
                let started = Instant::now();
                let result = link.model.complete(req, call_timeout.min(remaining)).await;
                attempts.push(Attempt {
                    provider: link.model.name().to_string(),
                    latency: started.elapsed(),
                    result: result.clone(),
                    waited,
                });
                let err = match result {
                    Ok(reply) => {
                        if link.breaker.record(true).is_some() {
                            tracing::warn!(
                                stage = "model",
                                provider = link.model.name(),
                                "the model provider answers again; its circuit breaker is closed"
                            );
                        }
                        return Ok(Served { reply, link: index, provider: link.model.name().to_string() });
                    }
                    Err(err) => err,
                };
                let retry = match err.class {
                    ErrorClass::Transient => attempt < self.retry.max_retries,
                    ErrorClass::Malformed => !std::mem::replace(&mut malformed_retry_used, true),
                    ErrorClass::Permanent => false,
                };
                let delay = match err.class {
                    ErrorClass::Transient => {
                        let unit = self.jitter.lock().expect("jitter lock").uniform();
                        self.retry.delay(attempt, err.retry_after, unit)
                    }
                    _ => Duration::ZERO,
                };
                last_error = Some(err);
                if !retry || Instant::now() + delay >= deadline {
                    break;
                }
                tokio::time::sleep(delay).await;
                waited = delay;
            }
            self.give_up(index, last_error.as_ref());
        }
        Err(last_error
            .unwrap_or_else(|| ModelError::new("chain", ErrorClass::Permanent, "no model provider is configured")))
    }

    /// Records link `index`'s failure on its breaker and says so, once per give-up (the
    /// breaker bounds how often that is).
    fn give_up(&self, index: usize, error: Option<&ModelError>) {
        let link = &self.links[index];
        let next = self.links.get(index + 1).map_or("no other provider", |l| l.model.name());
        let error = error.map(ToString::to_string).unwrap_or_default();
        match link.breaker.record(false) {
            Some(BreakerState::Open) => tracing::warn!(
                stage = "model",
                provider = link.model.name(),
                %error,
                cooldown_s = link.breaker.cooldown().as_secs(),
                fallback = next,
                "the model provider keeps failing; its circuit breaker is open and it is skipped until the cool-down passes"
            ),
            _ => {
                tracing::warn!(stage = "model", provider = link.model.name(), %error, fallback = next, "the model provider failed; falling back")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_jittered_capped_and_honours_retry_after() {
        let p = RetryPolicy { max_retries: 5, base: Duration::from_millis(100), cap: Duration::from_secs(2) };
        assert_eq!(p.delay(0, None, 1.0), Duration::from_millis(100));
        assert_eq!(p.delay(3, None, 1.0), Duration::from_millis(800));
        assert_eq!(p.delay(10, None, 1.0), Duration::from_secs(2), "capped");
        assert_eq!(p.delay(3, None, 0.25), Duration::from_millis(200), "full jitter scales the window");
        assert_eq!(
            p.delay(0, Some(Duration::from_secs(7)), 0.5),
            Duration::from_secs(7),
            "never sooner than Retry-After"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn breaker_opens_then_half_opens_after_the_cooldown() {
        let b = Breaker::new(2, Duration::from_secs(30));
        assert_eq!(b.record(false), None, "no change");
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(b.record(false), Some(BreakerState::Open));
        assert_eq!(b.state(), BreakerState::Open);
        assert!(!b.allow());
        tokio::time::advance(Duration::from_secs(31)).await;
        assert!(b.allow());
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert_eq!(b.record(false), Some(BreakerState::Open), "a failed trial reopens at once");
        tokio::time::advance(Duration::from_secs(31)).await;
        assert!(b.allow());
        assert_eq!(b.record(true), Some(BreakerState::Closed));
        assert_eq!(b.record(true), None);
    }
}
