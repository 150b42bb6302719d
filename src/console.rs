//! What `serve` prints of the triage notes it publishes. On a terminal, a line per
//! note; under systemd, whose journal takes every line, a summary per minute, so that
//! an alarm flood is not thousands of journal lines (the notes are in the database, the
//! HMI and on MQTT either way).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::triage::PublishedNote;

/// How notes reach the console (`serve --notes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NotesOutput {
    /// A summary per minute under systemd (`JOURNAL_STREAM` set), every note otherwise.
    Auto,
    /// Every note, a line each.
    Full,
    /// A line per minute with the count of notes by outcome, when there were any.
    Summary,
}

/// The console's share of the notes.
pub struct NoteConsole {
    full: bool,
    /// Notes since the last summary, by outcome, and the newest.
    counts: BTreeMap<&'static str, u64>,
    latest: Option<String>,
}

impl NoteConsole {
    /// The summary's interval.
    pub const EVERY: Duration = Duration::from_secs(60);

    pub fn new(output: NotesOutput) -> NoteConsole {
        let full = match output {
            NotesOutput::Full => true,
            NotesOutput::Summary => false,
            NotesOutput::Auto => std::env::var_os("JOURNAL_STREAM").is_none(),
        };
        NoteConsole { full, counts: BTreeMap::new(), latest: None }
    }

    /// The line to print for a note now, if any.
    pub fn note(&mut self, n: &PublishedNote) -> Option<String> {
        // A flood's note covers hundreds: the first few are named, the rest counted.
        const NAMED: usize = 5;
        let covers = match n.covers.as_slice() {
            [] => String::new(),
            ids => {
                let named: Vec<String> = ids.iter().take(NAMED).map(i64::to_string).collect();
                let more = if ids.len() > NAMED { format!(" and {} more", ids.len() - NAMED) } else { String::new() };
                format!(" covering alarm(s) {}{more}", named.join(", "))
            }
        };
        let of = match n.episode_id {
            Some(e) if n.revision > 1 => format!(" (episode {e}, revision {})", n.revision),
            Some(e) => format!(" (episode {e})"),
            None => String::new(),
        };
        let head = format!(
            "note {}{of} for alarm {}{covers} on {} ({})",
            n.note_id,
            n.alarm_id,
            n.asset_id,
            n.outcome.as_str()
        );
        if self.full {
            let summary = n.body["summary"].as_str().or(n.body["text"].as_str()).unwrap_or("");
            return Some(format!("{head}: {summary}"));
        }
        *self.counts.entry(n.outcome.as_str()).or_default() += 1;
        self.latest = Some(head);
        None
    }

    /// The summary line due at the end of an interval, if notes came in it.
    pub fn tick(&mut self) -> Option<String> {
        let latest = self.latest.take()?;
        let total: u64 = self.counts.values().sum();
        let by: Vec<String> = std::mem::take(&mut self.counts).into_iter().map(|(o, n)| format!("{n} {o}")).collect();
        Some(format!(
            "{total} triage note(s) in the last {} s ({}); the latest: {latest}. The HMI shows them; `serve --notes full` prints each",
            Self::EVERY.as_secs(),
            by.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::Outcome;
    use crate::domain::Timestamp;

    fn note(id: i64, outcome: Outcome) -> PublishedNote {
        PublishedNote {
            note_id: id,
            alarm_id: 100 + id,
            asset_id: "PUMP-007".into(),
            run_id: id,
            outcome,
            provider: None,
            flags: Vec::new(),
            body: serde_json::json!({"summary": format!("summary {id}")}),
            created_at: Timestamp::from_unix(0),
            covers: Vec::new(),
            episode_id: None,
            revision: 1,
        }
    }

    /// A flood of 500 notes is one summary line, by outcome; a quiet minute prints
    /// nothing; `full` prints each note with its summary.
    #[test]
    fn a_summary_per_interval_or_every_note() {
        let mut summary = NoteConsole::new(NotesOutput::Summary);
        for id in 0..500 {
            let outcome = if id % 5 == 0 { Outcome::Degraded } else { Outcome::Final };
            assert_eq!(summary.note(&note(id, outcome)), None);
        }
        let line = summary.tick().expect("a summary after notes");
        assert!(
            line.starts_with("500 triage note(s) in the last 60 s (100 degraded, 400 final); the latest: note 499 for alarm 599 on PUMP-007 (final)"),
            "{line}"
        );
        assert_eq!(summary.tick(), None, "nothing in a quiet interval");

        let mut full = NoteConsole::new(NotesOutput::Full);
        assert_eq!(
            full.note(&note(7, Outcome::Final)).as_deref(),
            Some("note 7 for alarm 107 on PUMP-007 (final): summary 7")
        );
        assert_eq!(full.tick(), None);
    }

    /// An episode's note says its episode and revision, and names the first five of the
    /// hundreds of alarms it covers.
    #[test]
    fn an_episode_note_is_one_line_however_many_it_covers() {
        let mut full = NoteConsole::new(NotesOutput::Full);
        let flood =
            PublishedNote { covers: (1..=137).collect(), episode_id: Some(4), revision: 3, ..note(7, Outcome::Final) };
        assert_eq!(
            full.note(&flood).as_deref(),
            Some(
                "note 7 (episode 4, revision 3) for alarm 107 covering alarm(s) 1, 2, 3, 4, 5 and 132 more on PUMP-007 (final): summary 7"
            )
        );
    }
}
