//! WHERE clauses built from fixed fragments, values always bound.
//!
//! Queries with optional filters written as `(?1 IS NULL OR col = ?1)` defeat SQLite's
//! planner: it cannot pick an index for a condition that may vanish. This builder
//! includes only the conditions that apply, so each combination gets its own plan.

use rusqlite::types::Value;

#[derive(Debug, Default, Clone)]
pub struct Filter {
    clauses: Vec<&'static str>,
    params: Vec<Value>,
}

impl Filter {
    pub fn new() -> Filter {
        Filter::default()
    }

    /// Adds `clause`, which holds one `?` per value in `values`, in order.
    pub fn and(&mut self, clause: &'static str, values: impl IntoIterator<Item = Value>) -> &mut Self {
        let before = self.params.len();
        self.params.extend(values);
        debug_assert_eq!(clause.matches('?').count(), self.params.len() - before, "{clause}");
        self.clauses.push(clause);
        self
    }

    /// `" WHERE a AND b"`, or nothing when no filter applies.
    pub fn where_clause(&self) -> String {
        if self.clauses.is_empty() { String::new() } else { [" WHERE ", &self.clauses.join(" AND ")].concat() }
    }

    /// The bound values, followed by `extra` (e.g. LIMIT and OFFSET).
    pub fn params_with(&self, extra: impl IntoIterator<Item = Value>) -> Vec<Value> {
        self.params.iter().cloned().chain(extra).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_only_the_clauses_that_apply() {
        let mut f = Filter::new();
        assert_eq!(f.where_clause(), "");
        f.and("asset_id = ?", [Value::from("PUMP-007".to_string())]).and("raised_at >= ?", [Value::from(5)]);
        assert_eq!(f.where_clause(), " WHERE asset_id = ? AND raised_at >= ?");
        assert_eq!(f.params_with([Value::from(20)]).len(), 3);
    }
}
