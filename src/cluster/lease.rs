//! Which node of a redundant pair acts, decided through the broker both already use:
//! a lease held by renewing it, taken over by claiming the next term. Pure: messages
//! heard and the monotonic clock go in, what to publish and whether to act come out;
//! the MQTT side is `cluster::run`.
//!
//! - Claims and renewals go to one topic, so every node hears them in the broker's one
//!   order: the first claim of term T+1 wins T+1 for everyone, the claimer included;
//!   a later claim of a term already taken is ignored. Renewals are retained (a node
//!   that starts learns the holder), claims are not (a losing claim never becomes what
//!   a newcomer reads).
//! - A standby claims when it has heard no renewal of the holder for `lease`, or heard
//!   the holder's will (offline). It acts only once its claim has come back.
//! - The holder acts only while its own renewals come back within `fence` (less than
//!   `lease`): cut from the broker, it stops before the other can take over. Hearing a
//!   higher term, it stops at once.
//! - Asked to hand over (a planned switchover), the holder stops at once and claims
//!   nothing for a lease; the other claims as on its will.
//!
//! Time is each node's own monotonic clock: a wall clock off by minutes changes nothing.

use std::time::{Duration, Instant};

/// How long a lease lasts and how often it is renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRules {
    /// A standby claims after hearing nothing of the holder for this long.
    pub lease: Duration,
    /// The holder renews this often.
    pub renew: Duration,
}

impl LeaseRules {
    /// The holder stops acting when its renewals have not come back for this long:
    /// half the lease, so it has stopped well before a standby may claim.
    pub fn fence(&self) -> Duration {
        self.lease / 2
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.lease < Duration::from_millis(500) || self.lease > Duration::from_secs(60) {
            return Err(format!("cluster.lease_ms must be 500 to 60000, got {}", self.lease.as_millis()));
        }
        if self.renew.is_zero() || self.renew * 3 > self.fence() {
            return Err(format!(
                "cluster.renew_ms must be above 0 and at most a sixth of lease_ms ({} ms), so that a renewal lost \
                 or two do not stop the active node; got {}",
                self.lease.as_millis() / 6,
                self.renew.as_millis()
            ));
        }
        Ok(())
    }
}

impl Default for LeaseRules {
    fn default() -> Self {
        LeaseRules { lease: Duration::from_millis(3000), renew: Duration::from_millis(400) }
    }
}

/// What a node hears on the cluster's topics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// `node` claims `term`; `seq` numbers what the node sent.
    Claim { node: String, term: u64, seq: u64 },
    /// `node` holds `term` and says so.
    Renew { node: String, term: u64, seq: u64 },
    /// `node`'s connection to the broker is gone (its will).
    Offline { node: String },
    /// `node` is connected (says nothing of the lease).
    Online { node: String },
    /// The holder `node` of `term` is asked to hand over (a planned switchover): it
    /// stops acting at once and the other claims as on its will.
    HandOver { node: String, term: u64 },
}

/// What to publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Say {
    Claim(u64),
    Renew(u64),
}

/// Where this node stands.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Standing {
    /// Whether this node may act now.
    pub acting: bool,
    pub term: u64,
    /// The node holding `term`, as this node last heard.
    pub holder: Option<String>,
}

#[derive(Debug)]
pub struct Lease {
    me: String,
    rules: LeaseRules,
    started: Instant,
    term: u64,
    holder: Option<String>,
    /// When the holder was last heard (claim or renewal); `None` once its will came.
    heard_holder: Option<Instant>,
    /// When the holder was last heard, its will notwithstanding (a will can be old).
    last_of_holder: Option<Instant>,
    /// A new holder acts only from here: a fence after the old holder was last heard,
    /// by when it has stopped even if it never hears the new term.
    quiet_until: Option<Instant>,
    /// When one of this node's own claims or renewals last came back.
    echoed: Option<Instant>,
    /// The last claim or renewal sent, and when.
    sent: Option<(Say, Instant)>,
    /// This node held the lease before it (re)started: it claims a new term at once
    /// rather than act on the old one.
    reclaim: bool,
    /// The holder and term last asked to hand over: a renewal of theirs heard after
    /// was sent before the holder heard it, and says nothing.
    handed_over: Option<(String, u64)>,
    /// It handed over: it claims nothing before this, so that the other node's claim
    /// wins (it claims again after, should nobody have).
    handed_over_until: Option<Instant>,
    /// The number of the last claim or renewal sent.
    seq: u64,
    /// Only what this node sent from this number on counts as come back: a message
    /// sent before a reconnect and delivered after it says nothing of the link now.
    fresh_from: u64,
    /// When the connection was last made, or its own renewals came back again after
    /// a stall: a claim of the last moments before it was not heard (claims are not
    /// retained), so a node listens for two renewal periods (the holder renews at once
    /// on winning, and every period) before it claims or acts.
    connected: Instant,
}

impl Lease {
    pub fn new(me: &str, rules: LeaseRules, now: Instant) -> Lease {
        Lease {
            me: me.to_string(),
            rules,
            started: now,
            term: 0,
            holder: None,
            heard_holder: None,
            last_of_holder: None,
            quiet_until: None,
            echoed: None,
            sent: None,
            reclaim: false,
            handed_over: None,
            handed_over_until: None,
            seq: 0,
            fresh_from: 1,
            connected: now,
        }
    }

    /// The number to send with what [`Lease::tick`] last returned.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The connection to the broker was made again: until something sent from now on
    /// comes back (after what the broker holds, which it sends first), this node does
    /// not act.
    pub fn reconnected(&mut self, now: Instant) {
        self.fresh_from = self.seq + 1;
        self.echoed = None;
        self.connected = now;
    }

    fn own_fresh(&self, node: &str, seq: u64) -> bool {
        node == self.me && seq >= self.fresh_from
    }

    fn holding(&self) -> bool {
        self.holder.as_deref() == Some(self.me.as_str())
    }

    /// A message from the cluster's topics, at `now`.
    pub fn heard(&mut self, msg: &Heard, now: Instant) {
        match msg {
            // Its own lease from before a restart (the retained renewal): the other
            // node may be taking it over right now, so it takes a new term, not the old.
            Heard::Claim { node, term, .. } | Heard::Renew { node, term, .. }
                if *term > self.term && node == &self.me && self.sent.is_none() =>
            {
                (self.term, self.holder, self.heard_holder, self.reclaim) = (*term, None, None, true);
            }
            Heard::Claim { node, term, seq } | Heard::Renew { node, term, seq } if *term > self.term => {
                if node == &self.me && self.holder.as_ref() != Some(node) {
                    self.quiet_until = self.last_of_holder.map(|at| at + self.rules.fence());
                }
                self.term = *term;
                self.holder = Some(node.clone());
                self.heard_holder = Some(now);
                self.last_of_holder = Some(now);
                self.echoed = self.own_fresh(node, *seq).then_some(now);
            }
            // Sent before its holder heard it was asked to hand over.
            Heard::Renew { node, term, .. }
                if self.handed_over.as_ref().is_some_and(|(n, t)| n == node && t == term) => {}
            // A renewal of the current term is the holder's: it also settles a term
            // whose claim this node did not hear (it started after).
            Heard::Renew { node, term, seq } if *term == self.term => {
                if self.holder.as_ref() != Some(node) {
                    self.holder = Some(node.clone());
                    self.echoed = None;
                }
                self.heard_holder = Some(now);
                self.last_of_holder = Some(now);
                if self.own_fresh(node, *seq) {
                    // Its renewals stopped coming back for a fence and come again: the
                    // link stalled, and what was said meanwhile may be lost to it (a
                    // term taken); it listens as after a reconnect.
                    if self.echoed.is_some_and(|at| now.duration_since(at) >= self.rules.fence()) {
                        self.connected = now;
                    }
                    self.echoed = Some(now);
                }
            }
            // A claim of a term already taken lost; a lower term is a fenced node's.
            Heard::Claim { .. } | Heard::Renew { .. } => {}
            Heard::Offline { node } if self.holder.as_ref() == Some(node) && node != &self.me => {
                self.heard_holder = None;
            }
            Heard::HandOver { node, term } if *term == self.term && self.holder.as_ref() == Some(node) => {
                self.heard_holder = None;
                self.handed_over = Some((node.clone(), *term));
                if node == &self.me {
                    (self.holder, self.echoed) = (None, None);
                    self.handed_over_until = Some(now + self.rules.lease);
                }
            }
            Heard::Offline { .. } | Heard::Online { .. } | Heard::HandOver { .. } => {}
        }
    }

    /// What to publish at `now`: a renewal when holding, a claim when the lease is
    /// free (nothing heard of the holder for a lease, its will, or no holder a lease
    /// after starting). A claim not yet come back is sent again each renewal period.
    pub fn tick(&mut self, now: Instant) -> Option<Say> {
        let r = self.rules;
        // A claim won is renewed at once (retained: what a node that starts reads).
        let due = |sent: Option<(Say, Instant)>, say: Say| {
            sent.is_none_or(|(last, at)| {
                matches!((last, say), (Say::Claim(_), Say::Renew(_))) || now.duration_since(at) >= r.renew
            })
        };
        let say = if self.holding() {
            Say::Renew(self.term)
        } else {
            let free = match (&self.holder, self.heard_holder) {
                (None, _) => self.reclaim || now.duration_since(self.started) >= r.lease,
                (Some(_), None) => true,
                (Some(_), Some(at)) => now.duration_since(at) >= r.lease,
            };
            let standing_back = self.handed_over_until.is_some_and(|until| now < until);
            if !free || standing_back || now.duration_since(self.connected) < r.renew * 2 {
                return None;
            }
            Say::Claim(self.term + 1)
        };
        if !due(self.sent, say) {
            return None;
        }
        self.sent = Some((say, now));
        self.seq += 1;
        Some(say)
    }

    /// Where this node stands at `now`.
    pub fn standing(&self, now: Instant) -> Standing {
        let fresh = self.echoed.is_some_and(|at| now.duration_since(at) < self.rules.fence());
        // After a reconnect its link may work while it has not yet heard a term taken
        // meanwhile (the broker may even hold its own renewal, sent late): it listens first.
        let listened = now.duration_since(self.connected) >= self.rules.renew * 2;
        let quiet = self.quiet_until.is_none_or(|at| now >= at);
        Standing { acting: self.holding() && fresh && listened && quiet, term: self.term, holder: self.holder.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn rules() -> LeaseRules {
        LeaseRules { lease: 3000 * MS, renew: 400 * MS }
    }

    /// What `node` sent as its `seq`th message.
    fn claim_n(node: &str, term: u64, seq: u64) -> Heard {
        Heard::Claim { node: node.into(), term, seq }
    }

    fn renew_n(node: &str, term: u64, seq: u64) -> Heard {
        Heard::Renew { node: node.into(), term, seq }
    }

    /// What `node` sent first.
    fn claim(node: &str, term: u64) -> Heard {
        claim_n(node, term, 1)
    }

    fn renew(node: &str, term: u64) -> Heard {
        renew_n(node, term, 1)
    }

    /// Two nodes start together: each claims term 1 a lease after starting; the broker
    /// orders the claims, and the first is the holder for both.
    #[test]
    fn of_two_claims_the_first_the_broker_orders_wins_for_both() {
        let t0 = Instant::now();
        let (mut a, mut b) = (Lease::new("a", rules(), t0), Lease::new("b", rules(), t0));
        assert_eq!((a.tick(t0 + 100 * MS), b.tick(t0 + 100 * MS)), (None, None), "waits a lease for a holder");
        let t = t0 + 3000 * MS;
        assert_eq!((a.tick(t), b.tick(t)), (Some(Say::Claim(1)), Some(Say::Claim(1))));
        for n in [&mut a, &mut b] {
            n.heard(&claim("b", 1), t + 5 * MS);
            n.heard(&claim("a", 1), t + 6 * MS);
        }
        let now = t + 10 * MS;
        assert!(b.standing(now).acting && !a.standing(now).acting);
        assert_eq!(a.standing(now).holder.as_deref(), Some("b"));
        assert_eq!(b.tick(now), Some(Say::Renew(1)));
        assert_eq!(a.tick(now), None, "the loser stands by");
    }

    /// Cut from the broker, the holder stops acting half a lease after its last
    /// renewal came back; the standby claims only a whole lease after it heard it.
    #[test]
    fn a_holder_cut_off_stops_before_the_standby_may_claim() {
        let t0 = Instant::now();
        let (mut a, mut b) = (Lease::new("a", rules(), t0), Lease::new("b", rules(), t0));
        let t0 = t0 + 3000 * MS;
        assert_eq!(a.tick(t0), Some(Say::Claim(1)));
        a.heard(&claim("a", 1), t0);
        b.heard(&claim("a", 1), t0);
        assert!(a.standing(t0).acting);
        // Nothing more comes back to a, nor reaches b.
        let stopped = (1..6000).map(|ms| t0 + ms * MS).find(|&t| !a.standing(t).acting).unwrap();
        let claimed = (1..6000).map(|ms| t0 + ms * MS).find(|&t| b.tick(t).is_some()).unwrap();
        assert_eq!(stopped.duration_since(t0), 1500 * MS);
        assert_eq!(claimed.duration_since(t0), 3000 * MS);
        assert_eq!(b.sent.map(|s| s.0), Some(Say::Claim(2)));
    }

    /// A higher term fences the old holder at once, even while its renewals come back.
    #[test]
    fn a_higher_term_stops_the_old_holder_at_once() {
        let t0 = Instant::now();
        let mut a = Lease::new("a", rules(), t0);
        let t0 = t0 + 800 * MS;
        a.heard(&renew("b", 1), t0);
        a.heard(&Heard::Offline { node: "b".into() }, t0);
        assert_eq!(a.tick(t0), Some(Say::Claim(2)));
        a.heard(&claim("a", 2), t0);
        assert!(!a.standing(t0 + 10 * MS).acting, "b was heard just now: a fence before a acts");
        a.heard(&renew_n("a", 2, 2), t0 + 1400 * MS);
        assert!(a.standing(t0 + 1500 * MS).acting);
        a.heard(&claim("b", 3), t0 + 1600 * MS);
        assert!(!a.standing(t0 + 1600 * MS).acting);
        // Its own renewal of term 2, still in flight, does not bring it back.
        a.heard(&renew_n("a", 2, 3), t0 + 1610 * MS);
        assert_eq!(a.standing(t0 + 1610 * MS), Standing { acting: false, term: 3, holder: Some("b".into()) });
        assert_eq!(a.tick(t0 + 1700 * MS), None);
    }

    /// Asked to hand over, the holder stops at once and claims nothing for a lease; the
    /// standby claims at once and acts a fence after the holder was last heard. A
    /// switchover nobody takes up (the other gone meanwhile) is undone a lease later.
    #[test]
    fn a_holder_asked_to_hand_over_stops_and_the_other_takes_over() {
        let t0 = Instant::now();
        let (mut a, mut b) = (Lease::new("a", rules(), t0), Lease::new("b", rules(), t0));
        let t0 = t0 + 3000 * MS;
        assert_eq!(a.tick(t0), Some(Say::Claim(1)));
        for n in [&mut a, &mut b] {
            n.heard(&claim("a", 1), t0);
        }
        assert!(a.standing(t0).acting);
        let asked = Heard::HandOver { node: "a".into(), term: 1 };
        let t = t0 + 100 * MS;
        for n in [&mut a, &mut b] {
            n.heard(&asked, t);
        }
        // A renewal a sent just before it heard the request, delivered after it.
        for n in [&mut a, &mut b] {
            n.heard(&renew_n("a", 1, 9), t + MS);
        }
        let t = t + 2 * MS;
        assert!(!a.standing(t).acting, "the holder stops at once");
        assert_eq!(a.tick(t), None, "and claims nothing");
        assert_eq!(b.tick(t), Some(Say::Claim(2)), "the standby claims at once");
        for n in [&mut a, &mut b] {
            n.heard(&claim("b", 2), t + 5 * MS);
        }
        assert!(!b.standing(t + 5 * MS).acting, "a fence after the holder was last heard");
        assert!(b.standing(t0 + 1500 * MS).acting);
        assert_eq!(a.standing(t0 + 1500 * MS), Standing { acting: false, term: 2, holder: Some("b".into()) });
        // A request for a term gone by, or for a node that does not hold it, changes nothing.
        b.heard(&asked, t0 + 1600 * MS);
        b.heard(&Heard::HandOver { node: "a".into(), term: 2 }, t0 + 1600 * MS);
        assert!(b.standing(t0 + 1600 * MS).acting);

        // Nobody takes it up: the holder claims again a lease after it stood back.
        let mut c = Lease::new("c", rules(), t0);
        let t0 = t0 + 3000 * MS;
        assert_eq!(c.tick(t0), Some(Say::Claim(1)));
        c.heard(&claim("c", 1), t0);
        c.heard(&Heard::HandOver { node: "c".into(), term: 1 }, t0 + 100 * MS);
        assert_eq!(c.tick(t0 + 3000 * MS), None, "still standing back");
        assert_eq!(c.tick(t0 + 3100 * MS), Some(Say::Claim(2)));
    }

    /// The holder's will lets the standby claim at once, not a lease later, and act a
    /// fence after the holder was last heard; a node that starts learns the holder from
    /// its retained renewal and does not claim.
    #[test]
    fn the_holders_will_hands_over_at_once_and_a_newcomer_learns_the_holder() {
        let t0 = Instant::now();
        let mut b = Lease::new("b", rules(), t0);
        b.heard(&renew("a", 7), t0 + 50 * MS);
        assert_eq!(b.tick(t0 + 3000 * MS), None, "renewals keep coming");
        b.heard(&renew("a", 7), t0 + 2900 * MS);
        b.heard(&Heard::Offline { node: "a".into() }, t0 + 3100 * MS);
        assert_eq!(b.tick(t0 + 3101 * MS), Some(Say::Claim(8)));
        assert!(!b.standing(t0 + 3102 * MS).acting, "not before its claim comes back");
        b.heard(&claim("b", 8), t0 + 3110 * MS);
        // A will can be old (a node back before the broker saw it go): b acts a fence
        // after a was last heard, by when a has stopped even if it never hears term 8.
        assert!(!b.standing(t0 + 4399 * MS).acting);
        assert!(b.standing(t0 + 4400 * MS).acting);
        // Its own retained renewal, from before a restart: a new term, once it has
        // listened two renewal periods (had the other node just claimed, its renewal
        // would have come).
        let mut again = Lease::new("a", rules(), t0 + 4000 * MS);
        again.heard(&renew("a", 8), t0 + 4010 * MS);
        assert!(!again.standing(t0 + 4010 * MS).acting);
        assert_eq!(again.tick(t0 + 4011 * MS), None);
        assert_eq!(again.tick(t0 + 4800 * MS), Some(Say::Claim(9)));
        let mut late = Lease::new("a", rules(), t0 + 4000 * MS);
        late.heard(&renew("a", 8), t0 + 4010 * MS);
        late.heard(&renew("b", 9), t0 + 4100 * MS);
        assert_eq!(late.tick(t0 + 4800 * MS), None, "b had taken term 9");
        // A claim not come back is sent again each renewal period, for the same term.
        let mut c = Lease::new("c", rules(), t0);
        assert_eq!(c.tick(t0 + 3000 * MS), Some(Say::Claim(1)));
        assert_eq!(c.tick(t0 + 3100 * MS), None);
        assert_eq!(c.tick(t0 + 3400 * MS), Some(Say::Claim(1)));
    }

    /// After a reconnect, what the holder sent before it (delivered late, or sent
    /// again by the client) does not make it act: only what it sends from then on.
    #[test]
    fn after_a_reconnect_only_what_is_sent_anew_counts() {
        let t0 = Instant::now();
        let mut a = Lease::new("a", rules(), t0);
        let t0 = t0 + 800 * MS;
        a.heard(&renew("b", 1), t0);
        a.heard(&Heard::Offline { node: "b".into() }, t0);
        assert_eq!((a.tick(t0), a.seq()), (Some(Say::Claim(2)), 1));
        a.heard(&claim_n("a", 2, 1), t0);
        assert_eq!((a.tick(t0 + 10 * MS), a.seq()), (Some(Say::Renew(2)), 2));
        a.reconnected(t0 + 15 * MS);
        assert!(!a.standing(t0 + 20 * MS).acting, "not acting until its link is shown to work");
        a.heard(&renew_n("a", 2, 2), t0 + 30 * MS);
        assert!(!a.standing(t0 + 30 * MS).acting, "a renewal sent before the reconnect");
        assert_eq!((a.tick(t0 + 410 * MS), a.seq()), (Some(Say::Renew(2)), 3));
        a.heard(&renew_n("a", 2, 3), t0 + 420 * MS);
        assert!(!a.standing(t0 + 420 * MS).acting, "still listening for a term taken meanwhile");
        assert!(a.standing(t0 + 1600 * MS).acting);
    }

    /// Renewals that stop coming back for a fence and then come again (a link that
    /// stalled and healed) do not make the holder act before it has listened: the
    /// claim of a higher term may have been lost to it.
    #[test]
    fn after_a_stall_the_holder_listens_before_it_acts_again() {
        let t0 = Instant::now();
        let mut a = Lease::new("a", rules(), t0);
        let t0 = t0 + 800 * MS;
        assert_eq!(a.tick(t0 + 2200 * MS), Some(Say::Claim(1)));
        a.heard(&claim_n("a", 1, 1), t0 + 2200 * MS);
        assert!(a.standing(t0 + 2300 * MS).acting);
        assert!(!a.standing(t0 + 3700 * MS).acting, "nothing came back for a fence");
        a.heard(&renew_n("a", 1, 5), t0 + 5000 * MS);
        assert!(!a.standing(t0 + 5000 * MS).acting, "listening first");
        a.heard(&renew_n("b", 2, 1), t0 + 5200 * MS);
        assert_eq!(a.standing(t0 + 5800 * MS), Standing { acting: false, term: 2, holder: Some("b".into()) });
    }

    #[test]
    fn rules_that_could_stop_a_healthy_holder_are_refused() {
        assert!(LeaseRules::default().validate().is_ok());
        let slow = LeaseRules { lease: 3000 * MS, renew: 1000 * MS };
        assert!(slow.validate().unwrap_err().contains("at most a sixth of lease_ms (500 ms)"));
        assert!(LeaseRules { lease: 100 * MS, renew: 10 * MS }.validate().is_err());
    }
}
