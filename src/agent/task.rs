//! The tasks an agent runs: what each asks of the model, with the facts its checks use
//! (the triage of an alarm, a chat question, the shift handover).

use rusqlite::OptionalExtension;
use serde_json::Value;

use anyhow::Context;

use super::guard::as_data;
use super::model::{EpisodeFacts, GroupedAlarm, StreamSink, TaskFacts};
use super::run::{Agent, Profile, RunReport, Task};
use crate::tools;

impl Agent {
    /// Builds the triage task for an alarm occurrence and runs it.
    pub async fn triage(&self, alarm_id: i64) -> anyhow::Result<RunReport> {
        self.triage_group(&[alarm_id]).await
    }

    /// Triages occurrences on one asset in one run (those raised while its job waited,
    /// as in a flood); the first is the most severe and leads.
    pub async fn triage_group(&self, alarm_ids: &[i64]) -> anyhow::Result<RunReport> {
        let task = self.triage_task(alarm_ids)?;
        Ok(self.run(task, None).await?)
    }

    pub fn triage_task(&self, alarm_ids: &[i64]) -> anyhow::Result<Task> {
        let &[alarm_id, ref others @ ..] = alarm_ids else { anyhow::bail!("no alarm to triage") };
        let db = self.store.read()?;
        let mut stmt = db.prepare_cached(
            "SELECT json_object('alarm_id', id, 'asset_id', asset_id, 'sensor_id', sensor_id, 'code', code,
                    'severity', severity, 'state', state, 'value', shown(value), 'threshold', shown(threshold),
                    'raised_at', strftime('%Y-%m-%dT%H:%M:%SZ', raised_at, 'unixepoch'),
                    'reraise_count', reraise_count, 'message', message),
                    asset_id, sensor_id, code
             FROM alarms WHERE id = ?1",
        )?;
        let mut records = Vec::new();
        let mut lead = None;
        for &id in alarm_ids {
            let row: Option<(String, String, Option<String>, String)> =
                stmt.query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))).optional()?;
            let (record, asset, sensor, code) =
                row.with_context(|| format!("no alarm {id}; list alarms with `twinops tools call list_alarms`"))?;
            records.push(serde_json::from_str::<Value>(&record).unwrap_or(Value::Null));
            lead.get_or_insert((asset, sensor, code));
        }
        let (asset, sensor, code) = lead.expect("at least one alarm");
        let record = |r: &Value| serde_json::to_string_pretty(r).unwrap_or_default();
        let mut user_message = format!(
            "Triage alarm {alarm_id}. The alarm record, as the SCADA system sent it:\n{}",
            as_data("alarm", &record(&records[0]))
        );
        if !others.is_empty() {
            user_message.push_str(&format!(
                "\n\n{} more alarms on {asset} were raised while this one waited for triage. They are triaged in this same run, and your one note is shown to the operators for each of them: lead with the alarm above and name each of the others by code in the summary, saying how it relates:\n{}",
                others.len(),
                as_data("alarm", &serde_json::to_string_pretty(&records[1..]).unwrap_or_default())
            ));
        }
        let standing = crate::alarms::standing::of(&db, alarm_id, (self.clock)())?;
        if let Some(standing) = standing.as_ref().filter(|s| s.is_notable()) {
            user_message.push_str(&format!(
                "\n\nWhere this alarm's point stands in the alarm system (chattering, this week's bad actors, a repeat triaged within the hour, how long it has been active). Say it in the summary:\n{}",
                as_data("alarm_standing", &serde_json::to_string_pretty(&standing.to_json()).unwrap_or_default())
            ));
        }
        // The point's rationalization is the site's word on what the alarm means and what
        // the operator does: the note quotes it, and says so when there is none.
        let rationalization = crate::alarms::points::of(&db, &asset, sensor.as_deref(), &code)?;
        user_message.push_str(&match &rationalization {
            Some(r) => format!(
                "\n\nThe alarm point's entry in the site's master alarm database (its rationalization). Quote its documented response and its consequence of no action in the note, keep to its time to respond (respond_within_min, in minutes), and prefer its causes to your own:\n{}",
                as_data("alarm_point", &serde_json::to_string_pretty(&crate::alarms::points::to_json(Some(r))).unwrap_or_default())
            ),
            None => format!(
                "\n\nThe alarm point is {}. Say in the summary that it is not rationalized, and do not present any response as documented unless a document you read says so.",
                crate::alarms::points::NOT_RATIONALIZED
            ),
        });
        let grouped = records[1..]
            .iter()
            .zip(others)
            .map(|(r, &alarm_id)| GroupedAlarm {
                alarm_id,
                code: r["code"].as_str().unwrap_or_default().to_string(),
                severity: r["severity"].as_str().unwrap_or_default().to_string(),
            })
            .collect();
        Ok(Task {
            profile: Profile::triage(),
            trigger: format!("alarm:{alarm_id}"),
            facts: TaskFacts {
                alarm_id: Some(alarm_id),
                asset_id: Some(asset),
                sensor_id: sensor,
                code: Some(code),
                grouped,
                standing,
                rationalization,
                rationalized_checked: true,
                ..TaskFacts::default()
            },
            user_message,
        })
    }

    /// Writes (or revises) the one note of alarm episode `episode` in one run.
    pub async fn triage_episode(&self, episode: i64) -> anyhow::Result<RunReport> {
        let task = self.episode_task(episode)?;
        Ok(self.run(task, None).await?)
    }

    /// An episode's note: the triage of its ranked initiator, with the episode tools
    /// and the episode's shape, for a note that names the initiator with its evidence,
    /// what follows from it, what to do first and the past episode it resembles.
    pub fn episode_task(&self, episode: i64) -> anyhow::Result<Task> {
        let row: Option<(Option<i64>, i64, i64, String)> = self
            .store
            .read()?
            .prepare_cached(
                "SELECT coalesce(initiator_alarm, (SELECT min(id) FROM alarms WHERE episode_id = p.id)), points,
                        activations, rfc3339(opened_ms / 1000)
                 FROM episodes p WHERE id = ?1",
            )?
            .query_row([episode], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .optional()?;
        let (Some(lead), points, activations, opened) =
            row.with_context(|| format!("no episode {episode}; `twinops episodes list` shows them"))?
        else {
            anyhow::bail!("episode {episode} has no member alarm");
        };
        let mut task = self.triage_task(&[lead])?;
        task.profile = Profile::episode();
        task.trigger = format!("episode:{episode}");
        task.facts.episode = Some(EpisodeFacts { episode_id: episode, points, activations });
        task.user_message.push_str(&format!(
            "\n\nThis alarm is the ranked initiator of alarm episode {episode}: {points} alarm points, {activations} activations since {opened}. Your note is the episode's one note, shown to the operators for every alarm in it and revised as it grows. Call get_episode and find_similar_episodes with episode_id {episode}. In the summary, name the episode, the initiator by asset and code with the evidence that ranks it (say so when the scores are close), and its consequences by asset and code; say which past episode it resembles, with its id and date, and what was done then, or that none does. recommended_actions start with what to do about the initiator; the consequences are expected to clear once it is dealt with."
        ));
        Ok(task)
    }

    /// The shift handover summary, as of now. `trigger` says who asked, for the audit
    /// trail: `schedule:handover`, `user:kaur`.
    pub async fn handover(&self, trigger: &str) -> anyhow::Result<RunReport> {
        let now = (self.clock)();
        let task = Task {
            profile: Profile::handover(),
            trigger: trigger.to_string(),
            facts: TaskFacts::default(),
            user_message: format!(
                "Write the shift handover for the shift starting {}. Cover the last 8 hours.",
                now.to_rfc3339()
            ),
        };
        Ok(self.run(task, None).await?)
    }

    /// One chat turn for an operator.
    pub async fn ask(&self, question: &str, user: &str, stream: Option<StreamSink>) -> anyhow::Result<RunReport> {
        let task = self.chat_task(question, user)?;
        Ok(self.run(task, stream).await?)
    }

    pub fn chat_task(&self, question: &str, user: &str) -> anyhow::Result<Task> {
        let len = question.chars().count();
        anyhow::ensure!(!question.trim().is_empty(), "the question is empty");
        anyhow::ensure!(
            len <= self.limits.max_chat_chars,
            "the question is {len} characters; the limit is {} (llm.limits.max_chat_chars). Ask about one thing at a time.",
            self.limits.max_chat_chars
        );
        let db = self.store.read()?;
        let (mentioned, not_in_twin) = tools::mentioned_assets(&db, question)?;
        Ok(Task {
            profile: Profile::chat(),
            trigger: format!("user:{user}"),
            facts: TaskFacts { question: Some(question.to_string()), mentioned, not_in_twin, ..TaskFacts::default() },
            user_message: format!("Operator {user} asks:\n{}", as_data("operator", question)),
        })
    }
}
