//! A redundant pair's lease on a real broker: the embedded one, and Mosquitto when
//! `TWINOPS_TEST_MQTT_URL` points at one. Two nodes elect one; the active one is
//! killed again and again (its connection dropped without a word, as SIGKILL does) and
//! the other takes over; cut from the broker by a proxy that black-holes its traffic,
//! the active node stops acting before the other may start, and rejoins as standby.
//! A monitor samples both nodes every 2 ms throughout: never both acting.

use super::*;

struct LeaseNode {
    name: String,
    standing: watch::Receiver<Standing>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl LeaseNode {
    fn start(cluster: &str, name: &str, url: &str) -> LeaseNode {
        let cfg = ClusterConfig {
            name: cluster.into(),
            node: name.into(),
            peer_hmi: String::new(),
            lease_ms: LEASE_MS,
            renew_ms: 200,
            peer_token_file: None,
        };
        let mqtt = MqttConfig { url: url.into(), ..Default::default() };
        let (stop, stop_rx) = watch::channel(false);
        let progress = watch::channel(cluster::Progress::default()).1;
        let running = cluster::start(cfg, &mqtt, progress, stop_rx).unwrap();
        LeaseNode { name: name.into(), standing: running.standing, stop, task: running.task }
    }

    fn acting(&self) -> bool {
        alive_and_acting(&self.standing)
    }

    /// Gone without a word: the task and its connection dropped, as SIGKILL does.
    fn kill(self) {
        self.task.abort();
        drop(self.stop);
    }
}

/// Whether a node acts: a killed one does not, whatever it last said.
fn alive_and_acting(standing: &watch::Receiver<Standing>) -> bool {
    standing.has_changed().is_ok() && standing.borrow().acting
}

/// Samples both nodes' standing until stopped; counts the samples where both act.
struct Monitor {
    both: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Monitor {
    fn start(a: watch::Receiver<Standing>, b: watch::Receiver<Standing>) -> Monitor {
        let (both, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let (n, s) = (Arc::clone(&both), Arc::clone(&stop));
        tokio::spawn(async move {
            while !s.load(Ordering::Relaxed) {
                if alive_and_acting(&a) && alive_and_acting(&b) {
                    n.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        Monitor { both, stop }
    }

    fn end(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.both.load(Ordering::Relaxed)
    }
}

/// A TCP proxy in front of the broker that can black-hole what passes (both ways:
/// nothing is delivered, the connections stay open, as when a link drops packets) and
/// then close what it holds.
pub(super) struct Proxy {
    pub(super) url: String,
    cut: Arc<AtomicBool>,
    /// Connections opened before the last close are closed.
    generation: watch::Sender<u64>,
}

impl Proxy {
    pub(super) async fn start(broker: &str) -> Proxy {
        let upstream = broker.trim_start_matches("mqtt://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("mqtt://{}", listener.local_addr().unwrap());
        let cut = Arc::new(AtomicBool::new(false));
        let (generation, _) = watch::channel(0u64);
        let (c, g) = (Arc::clone(&cut), generation.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else { continue };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                let born = *g.borrow();
                for (r, w) in [
                    (
                        Box::new(cr) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
                        Box::new(sw) as Box<dyn tokio::io::AsyncWrite + Unpin + Send>,
                    ),
                    (Box::new(sr), Box::new(cw)),
                ] {
                    let (cut, mut generation) = (Arc::clone(&c), g.subscribe());
                    tokio::spawn(pipe(r, w, cut, async move {
                        let _ = generation.wait_for(|now| *now != born).await;
                    }));
                }
            }
        });
        Proxy { url, cut, generation }
    }

    /// Nothing passes from now on; the connections are kept open.
    pub(super) fn black_hole(&self) {
        self.cut.store(true, Ordering::Relaxed);
    }

    /// The connections it holds are closed; new ones pass.
    pub(super) fn close_and_heal(&self) {
        self.generation.send_modify(|g| *g += 1);
        self.cut.store(false, Ordering::Relaxed);
    }
}

/// Copies `r` to `w` until either ends or `closed`; while cut, what was read is held
/// (a black hole delivers nothing, and TCP would retransmit it if the link came back).
async fn pipe(
    mut r: Box<dyn tokio::io::AsyncRead + Unpin + Send>,
    mut w: Box<dyn tokio::io::AsyncWrite + Unpin + Send>,
    cut: Arc<AtomicBool>,
    closed: impl std::future::Future<Output = ()>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    tokio::pin!(closed);
    loop {
        let n = tokio::select! {
            _ = &mut closed => return,
            n = r.read(&mut buf) => match n { Ok(0) | Err(_) => return, Ok(n) => n },
        };
        while cut.load(Ordering::Relaxed) {
            tokio::select! {
                _ = &mut closed => return,
                _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
        }
        if w.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Kills the active node `kills` times, restarting it each time, and then cuts the
/// active one off. Returns the failover times after each kill.
async fn pair(url: Option<String>) {
    common::logs();
    let url = broker(url);
    let cluster = format!("t{}", common::free_port());
    let proxy = Proxy::start(&url).await;
    // Node a reaches the broker through the proxy, b directly.
    let (mut a, mut b) = (LeaseNode::start(&cluster, "a", &proxy.url), LeaseNode::start(&cluster, "b", &url));
    let mut monitor = Monitor::start(a.standing.clone(), b.standing.clone());
    until("one node acting", Duration::from_secs(10), || a.acting() || b.acting()).await;
    let mut failovers = Vec::new();
    let mut split = 0;
    for round in 0..6 {
        let (active, standby) = if a.acting() { (a, b) } else { (b, a) };
        let (name, via) = (active.name.clone(), if active.name == "a" { proxy.url.clone() } else { url.clone() });
        let term = active.standing.borrow().term;
        active.kill();
        let took =
            until(&format!("round {round}: {} takes over", standby.name), Duration::from_secs(10), || standby.acting())
                .await;
        failovers.push(took);
        assert!(standby.standing.borrow().term > term, "a new term");
        // The killed node comes back and stands by.
        let back = LeaseNode::start(&cluster, &name, &via);
        split += monitor.end();
        monitor = Monitor::start(back.standing.clone(), standby.standing.clone());
        tokio::time::sleep(Duration::from_millis(LEASE_MS * 2)).await;
        assert!(!back.acting() && standby.acting(), "round {round}: the one that came back stands by");
        (a, b) = if name == "a" { (back, standby) } else { (standby, back) };
    }
    assert!(failovers.iter().all(|t| *t < Duration::from_secs(10)), "{failovers:?}");

    // Cut off: a (behind the proxy) must be the active one first.
    if !a.acting() {
        let term = b.standing.borrow().term;
        b.kill();
        until("a takes over", Duration::from_secs(10), || a.acting()).await;
        assert!(a.standing.borrow().term > term);
        b = LeaseNode::start(&cluster, "b", &url);
        split += monitor.end();
        monitor = Monitor::start(a.standing.clone(), b.standing.clone());
        tokio::time::sleep(Duration::from_millis(LEASE_MS * 2)).await;
    }
    assert!(a.acting() && !b.acting());
    proxy.black_hole();
    let cut = Instant::now();
    until("the cut node stops acting", Duration::from_secs(5), || !a.acting()).await;
    let stopped = cut.elapsed();
    until("b takes over", Duration::from_secs(15), || b.acting()).await;
    let took = cut.elapsed();
    assert!(stopped < took, "a stopped ({stopped:?}) before b started ({took:?})");
    // The link comes back (closed, then passing again): a rejoins as standby.
    proxy.close_and_heal();
    tokio::time::sleep(Duration::from_millis(LEASE_MS * 3)).await;
    assert!(!a.acting() && b.acting(), "a rejoined as standby");
    assert_eq!(a.standing.borrow().holder.as_deref(), Some("b"), "a heard who holds the lease");
    split += monitor.end();
    assert_eq!(split, 0, "samples with both nodes acting");
    a.kill();
    b.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn embedded_broker_one_node_acts_through_kills_and_a_cut_link() {
    pair(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mosquitto_one_node_acts_through_kills_and_a_cut_link() {
    let Some(url) = common::external("TWINOPS_TEST_MQTT_URL", "a Mosquitto broker") else { return };
    pair(Some(url)).await;
}
