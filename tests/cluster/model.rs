//! A pair's model calls, counted: each node talks to a scripted model server of its
//! own (the real OpenAI wire format over HTTP), so what each server was asked is what
//! that node triaged. The standby asks nothing; the acting node asks once for each note
//! the pair publishes, and no more than a kill can cut short; a node stopped while its
//! model thinks hands over at once.

use std::time::Duration;

use serde_json::Value;
use twinops::bench::failover;
use twinops::scripted::{Reply, ScriptedServer};

use super::{Flood, TestPair, broker, common, flood_through_kills, spec};

/// Workers per node (`triage.workers`): how many runs a kill can cut short at once.
const WORKERS: usize = 2;

/// The runs a model server was asked for: the first request of each (the task alone,
/// no answer or tool result yet).
fn runs(model: &ScriptedServer) -> usize {
    let first = |r: &Value| {
        let messages = r["messages"].as_array().map_or(&[][..], Vec::as_slice);
        !messages.is_empty() && messages.iter().all(|m| m["role"] == "system" || m["role"] == "user")
    };
    model.requests().iter().filter(|r| first(r)).count()
}

/// Starts each node again on the OpenAI provider, with a scripted model server of its
/// own that plays `script` over and over.
async fn on_models(nodes: &mut [failover::Node; 2], script: Vec<Reply>) -> [ScriptedServer; 2] {
    let models = [ScriptedServer::cycling(script.clone()).await, ScriptedServer::cycling(script).await];
    for (node, model) in nodes.iter_mut().zip(&models) {
        node.kill();
        node.set_env("TWINOPS_LLM_KIND", "openai");
        node.set_env("TWINOPS_LLM_MODEL", "scripted");
        node.set_env("TWINOPS_LLM_BASE_URL", &model.openai_url());
        node.restart().unwrap();
    }
    models
}

/// Two `twinops serve` of one pair on the OpenAI provider, each with a scripted model
/// that reads the alarm's asset and writes a note (every run passes the note's
/// checks), through three SIGKILLs of the acting node during a flood. While a node
/// stands by its model is asked nothing; over the run, each node's model was asked for
/// one run per note it published, plus at most one per worker for each time it was
/// killed (a run cut short has no note, so the other node triages that alarm again);
/// every occurrence has its note on both twins, none in two notes.
async fn one_model_at_a_time(url: Option<String>) {
    let mut spec = spec(broker(url), "m");
    // No run falls back to the rules model for want of budget (the default is 20/min).
    spec.settings = format!("[triage]\nworkers = {WORKERS}\nllm_runs_per_minute = 600\n");
    let notes = failover::hear_notes(&spec.broker, &spec.run).unwrap();
    let TestPair { spec, plants: _plants, mut nodes, scada, .. } = TestPair::start(spec);
    let models = on_models(&mut nodes, vec![Reply::Triage]).await;
    // The standby's model is asked nothing between the start of a round and its kill.
    let (mut kills, mut at_start, mut asked_while_standing_by) = ([0; 2], 0, Vec::new());
    let Flood { events, actives, .. } = flood_through_kills(&mut nodes, &scada, &spec.run, 3, |acting, killing| {
        let standby = runs(&models[1 - acting]);
        if !killing {
            at_start = standby;
        } else {
            kills[acting] += 1;
            if standby != at_start {
                asked_while_standing_by.push((1 - acting, standby - at_start));
            }
        }
    })
    .await;
    super::all_noted(&nodes, &events).await;
    let heard = notes.lock().unwrap().clone();
    let t = failover::tally(&heard, &events);
    assert!(t.published_twice.is_empty() && t.in_two_notes.is_empty(), "{t:?}");
    assert!(
        asked_while_standing_by.is_empty(),
        "(node index, runs) a standby's model was asked for: {asked_while_standing_by:?}"
    );
    for (i, node) in nodes.iter().enumerate() {
        let published = heard.iter().filter(|n| n["node"] == node.name.as_str()).count();
        let asked = runs(&models[i]);
        let cut = asked.checked_sub(published);
        assert!(
            cut.is_some_and(|cut| cut <= WORKERS * kills[i]),
            "node {}: its model was asked for {asked} runs; it published {published} notes and was killed {} times \
             (rounds acted by: {actives:?})",
            node.name,
            kills[i]
        );
    }
    assert!(actives.contains(&0) && actives.contains(&1), "both nodes acted: {actives:?}");
    assert!(models.iter().all(|m| runs(m) > 0), "both models were asked");
}

/// The acting node asked to stop (SIGTERM, as for a patch) while its model is still
/// thinking: it stops acting at once and says it is gone, so the other node shows it
/// offline and takes over while the stopping process still waits for its model (a
/// clean disconnect drops the will: without its word the other would wait for the
/// lease, and show it online until it exited). The run it finishes is not stored; the
/// alarm gets one note, the new node's, which the stopped node keeps once back.
async fn stopped_while_its_model_thinks(url: Option<String>) {
    let spec = spec(broker(url), "s");
    let notes = failover::hear_notes(&spec.broker, &spec.run).unwrap();
    let TestPair { spec, plants: _plants, mut nodes, scada, .. } = TestPair::start(spec);
    // A run's first answer takes 6 s, its second none.
    let slow = Reply::Delay(Duration::from_secs(6), Box::new(Reply::Triage));
    let models = on_models(&mut nodes, vec![slow, Reply::Triage]).await;
    let acting = failover::acting_one(&nodes, Duration::from_secs(30)).await.unwrap();
    let event = format!("{}-0-0", spec.run);
    scada.raise(&event, 0, "T0").await;
    let thinking = common::eventually(Duration::from_secs(20), || runs(&models[acting]) == 1).await;
    assert!(thinking, "the acting node's model was not asked");
    nodes[acting].terminate();
    let other = 1 - acting;
    let took_over = async {
        while !(nodes[other].acting().await && nodes[other].pair().await.is_some_and(|p| p["peer"]["online"] == false))
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let took_over = tokio::time::timeout(Duration::from_secs(4), took_over).await;
    let seen = nodes[other].pair().await;
    assert!(took_over.is_ok(), "the other node did not take over, saying this one offline: {seen:?}");
    assert!(nodes[acting].running(), "the stopping node still waits for its model");
    // Back, it keeps the other's note rather than run the job it put back again.
    nodes[acting].stop();
    nodes[acting].restart().unwrap();
    super::all_noted(&nodes, std::slice::from_ref(&event)).await;
    let heard = notes.lock().unwrap().clone();
    let from: Vec<&Value> = heard.iter().map(|n| &n["node"]).collect();
    assert_eq!(from, [&Value::from(nodes[other].name.as_str())], "one note, the new node's: {heard:?}");
    assert_eq!((runs(&models[acting]), runs(&models[other])), (1, 1), "one run each: cut short, then the note");
}

#[tokio::test(flavor = "multi_thread")]
async fn embedded_broker_a_node_stopped_mid_run_hands_over_at_once() {
    stopped_while_its_model_thinks(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mosquitto_a_node_stopped_mid_run_hands_over_at_once() {
    let Some(url) = common::external("TWINOPS_TEST_MQTT_URL", "a Mosquitto broker") else { return };
    stopped_while_its_model_thinks(Some(url)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn embedded_broker_each_note_costs_one_model_run_on_one_node() {
    one_model_at_a_time(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mosquitto_each_note_costs_one_model_run_on_one_node() {
    let Some(url) = common::external("TWINOPS_TEST_MQTT_URL", "a Mosquitto broker") else { return };
    one_model_at_a_time(Some(url)).await;
}
