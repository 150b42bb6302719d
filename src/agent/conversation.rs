//! Each operator's conversation with the agent, kept so the chat tab shows it again.

use rusqlite::params;

use crate::domain::Timestamp;
use crate::store::{StoreError, Writer};

/// Who says a message.
#[derive(Debug, Clone, Copy)]
pub enum Speaker {
    Operator,
    Agent,
}

/// The user's latest 200 messages, oldest first.
pub fn history(db: &rusqlite::Connection, user_id: i64) -> rusqlite::Result<Vec<serde_json::Value>> {
    let mut stmt = db.prepare_cached(
        "SELECT json_object('id', id, 'role', role, 'text', text, 'run_id', run_id, 'created_at', rfc3339(created_at))
         FROM (SELECT * FROM chat_messages WHERE user_id = ?1 ORDER BY id DESC LIMIT 200) ORDER BY id",
    )?;
    crate::store::json_rows(&mut stmt, [user_id])
}

/// Keeps one message of the user's conversation; an answer names its run.
pub fn save(writer: &Writer, user_id: i64, who: Speaker, text: String, run_id: Option<i64>) -> Result<(), StoreError> {
    let role = match who {
        Speaker::Operator => "operator",
        Speaker::Agent => "agent",
    };
    writer.call(move |c| {
        c.prepare_cached(
            "INSERT INTO chat_messages (user_id, role, text, run_id, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![user_id, role, text, run_id, Timestamp::now().unix()])?;
        Ok(())
    })
}
