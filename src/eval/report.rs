//! The eval's tables (per case, per category, totals) on the terminal, in
//! `eval.json` and `eval.md`; the floor; the optional judge.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::case::Case;
use super::retrieval::Retrieval;
use super::run::{CaseResult, Provider};

/// One category's line, or the totals.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub category: String,
    pub cases: usize,
    pub passed: usize,
    pub checks: usize,
    pub checks_passed: usize,
    /// Checks passed over checks, 0 to 1.
    pub score: f64,
    pub tokens: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub provider: String,
    pub total: Line,
    pub categories: Vec<Line>,
    pub latency_p50_ms: f64,
    pub latency_p95_ms: f64,
    /// The judge's mean grade (0 to 10) over the cases it graded.
    pub judge_mean: Option<f64>,
}

fn line(category: &str, results: &[&CaseResult]) -> Line {
    let checks: usize = results.iter().map(|r| r.checks.len()).sum();
    let checks_passed: usize = results.iter().map(|r| r.checks_passed()).sum();
    Line {
        category: category.to_string(),
        cases: results.len(),
        passed: results.iter().filter(|r| r.passed).count(),
        checks,
        checks_passed,
        score: if checks == 0 { 0.0 } else { checks_passed as f64 / checks as f64 },
        tokens: results.iter().map(|r| r.tokens).sum(),
    }
}

impl Summary {
    pub fn of(provider: &str, results: &[CaseResult]) -> Summary {
        let mut categories: Vec<&str> = results.iter().map(|r| r.category).collect();
        categories.dedup();
        categories.sort();
        categories.dedup();
        let lines = categories
            .iter()
            .map(|c| line(c, &results.iter().filter(|r| r.category == *c).collect::<Vec<_>>()))
            .collect();
        let mut latencies: Vec<f64> = results.iter().map(|r| r.latency_ms).collect();
        latencies.sort_by(f64::total_cmp);
        let at =
            |q: f64| latencies.get(((latencies.len() as f64 * q).ceil() as usize).max(1) - 1).copied().unwrap_or(0.0);
        let graded: Vec<f64> = results.iter().filter_map(|r| r.judge).collect();
        Summary {
            provider: provider.to_string(),
            total: line("total", &results.iter().collect::<Vec<_>>()),
            categories: lines,
            latency_p50_ms: at(0.50),
            latency_p95_ms: at(0.95),
            judge_mean: (!graded.is_empty()).then(|| graded.iter().sum::<f64>() / graded.len() as f64),
        }
    }
}

/// The failed checks of a case, for a line.
pub fn failures(r: &CaseResult) -> String {
    let failed: Vec<String> =
        r.checks.iter().filter(|c| !c.passed).map(|c| format!("{}: {}", c.name, c.detail)).collect();
    format!("FAIL {}", failed.join("; "))
}

fn category_table(out: &mut String, s: &Summary, md: bool) {
    let row = |out: &mut String, cells: [String; 6]| {
        if md {
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        } else {
            let _ = writeln!(
                out,
                "{:<14} {:>6} {:>7} {:>8} {:>7} {:>9}",
                cells[0], cells[1], cells[2], cells[3], cells[4], cells[5]
            );
        }
    };
    let header = ["category", "cases", "passed", "checks", "score", "tokens"].map(String::from);
    row(out, header);
    if md {
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
    }
    for l in s.categories.iter().chain(std::iter::once(&s.total)) {
        row(
            out,
            [
                l.category.clone(),
                l.cases.to_string(),
                l.passed.to_string(),
                format!("{}/{}", l.checks_passed, l.checks),
                format!("{:.0}%", 100.0 * l.score),
                l.tokens.to_string(),
            ],
        );
    }
}

fn render(summaries: &[Summary], runs: &[(String, Vec<CaseResult>)], retrieval: &[Retrieval], md: bool) -> String {
    let mut out = String::new();
    if md {
        out.push_str("# twinops eval\n\n");
    }
    // Per case, side by side when two providers ran.
    let names: Vec<&str> = runs.iter().map(|(n, _)| n.as_str()).collect();
    if md {
        let _ = writeln!(out, "| case | category | {} |", names.join(" | "));
        let _ = writeln!(out, "|---|---|{}", "---|".repeat(names.len()));
    } else {
        let _ = writeln!(
            out,
            "{:<36} {:<12} {}",
            "case",
            "category",
            names.iter().map(|n| format!("{n:<28}")).collect::<String>()
        );
    }
    for (i, r) in runs[0].1.iter().enumerate() {
        let cells: Vec<String> = runs
            .iter()
            .map(|(_, results)| {
                let r = &results[i];
                format!(
                    "{} {}/{} {:.0} ms",
                    if r.passed { "pass" } else { "FAIL" },
                    r.checks_passed(),
                    r.checks.len(),
                    r.latency_ms
                )
            })
            .collect();
        if md {
            let _ = writeln!(out, "| {} | {} | {} |", r.id, r.category, cells.join(" | "));
        } else {
            let _ = writeln!(
                out,
                "{:<36} {:<12} {}",
                r.id,
                r.category,
                cells.iter().map(|c| format!("{c:<28}")).collect::<String>()
            );
        }
    }
    for s in summaries {
        let _ = writeln!(out, "\n{}{}\n", if md { "## " } else { "== " }, s.provider);
        category_table(&mut out, s, md);
        let _ = writeln!(
            out,
            "\nscore {:.1}% ({} of {} checks; {} of {} cases pass); latency p50 {:.0} ms, p95 {:.0} ms{}",
            100.0 * s.total.score,
            s.total.checks_passed,
            s.total.checks,
            s.total.passed,
            s.total.cases,
            s.latency_p50_ms,
            s.latency_p95_ms,
            s.judge_mean.map(|j| format!("; judge {j:.1}/10 (apart from the score)")).unwrap_or_default()
        );
    }
    if !retrieval.is_empty() {
        let _ = writeln!(out, "\n{}retrieval\n", if md { "## " } else { "== " });
        out.push_str(&super::retrieval::render(retrieval, md));
    }
    out
}

pub fn print(summaries: &[Summary], runs: &[(String, Vec<CaseResult>)], retrieval: &[Retrieval]) {
    print!("{}", render(summaries, runs, retrieval, false));
}

pub fn write(
    dir: &Path,
    summaries: &[Summary],
    runs: &[(String, Vec<CaseResult>)],
    retrieval: &[Retrieval],
) -> anyhow::Result<()> {
    let json = serde_json::json!({
        "plant_end": crate::domain::Timestamp::from_unix(super::END),
        "summaries": summaries,
        "runs": runs.iter().map(|(name, results)| serde_json::json!({"provider": name, "cases": results})).collect::<Vec<_>>(),
        "retrieval": retrieval,
    });
    std::fs::write(dir.join("eval.json"), serde_json::to_string_pretty(&json)?)?;
    std::fs::write(dir.join("eval.md"), render(summaries, runs, retrieval, true))?;
    Ok(())
}

/// Whether the score holds the floor in `path` (`score = 0.9` and `cases_passed = 20`);
/// says which fell when one did.
pub fn holds_floor(s: &Summary, path: &Path) -> anyhow::Result<bool> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Floor {
        score: f64,
        cases_passed: usize,
    }
    let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("--floor {}: {e}", path.display()))?;
    let floor: Floor = toml::from_str(&text).map_err(|e| anyhow::anyhow!("--floor {}: {e}", path.display()))?;
    let ok = s.total.score + 1e-9 >= floor.score && s.total.passed >= floor.cases_passed;
    if ok {
        eprintln!(
            "the floor holds: score {:.3} (floor {:.3}), {} cases pass (floor {})",
            s.total.score, floor.score, s.total.passed, floor.cases_passed
        );
    } else {
        eprintln!(
            "BELOW THE FLOOR in {}: score {:.3} (floor {:.3}), {} cases pass (floor {})",
            path.display(),
            s.total.score,
            floor.score,
            s.total.passed,
            floor.cases_passed
        );
    }
    Ok(ok)
}

/// The judge's grade of `answer` against the case's rubric, 0 to 10; `None` when it
/// gives no number.
pub async fn grade(judge: &Provider, case: &Case, rubric: &str, answer: &str) -> Option<f64> {
    use crate::agent::model::{Message, ModelRequest};
    let request = ModelRequest {
        messages: vec![
            Message::System {
                content: "You grade an operations agent's answer for a water utility's control room. Reply with \
                          one line: GRADE: <0-10>, then one sentence why. Judge only against the rubric."
                    .into(),
            },
            Message::User {
                content: format!(
                    "Case: {}\nRubric: {rubric}\n\nAnswer:\n{}",
                    case.description,
                    crate::agent::guard::as_data("answer", answer)
                ),
            },
        ],
        max_tokens: 200,
        ..Default::default()
    };
    for model in &judge.models {
        if let Ok(reply) = model.complete(&request, Duration::from_secs(120)).await {
            let text = reply.text.unwrap_or_default();
            let after = text.split("GRADE:").nth(1)?;
            let number: String = after.trim().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
            return number.parse::<f64>().ok().map(|g| g.clamp(0.0, 10.0));
        }
    }
    None
}
