//! `twinops eval` as a user runs it: every case file loads, the rules model holds the
//! floor, the adversarial scripted model cannot break a guarantee, and the report files
//! say what the terminal says.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn eval(out: &Path, extra: &[&str]) -> (bool, String, String) {
    let root = env!("CARGO_MANIFEST_DIR");
    let output = Command::new(env!("CARGO_BIN_EXE_twinops"))
        .current_dir(root)
        .env("TWINOPS_CONFIG", out.join("none.toml"))
        .env_remove("TWINOPS_LLM_KIND")
        .args(["eval", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (output.status.success(), text(&output.stdout), text(&output.stderr))
}

#[test]
fn the_rules_model_holds_the_floor_on_every_case() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = eval(dir.path(), &["--floor", "eval/floor.toml"]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stderr.contains("the floor holds"), "{stderr}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("eval.json")).unwrap()).unwrap();
    let cases = report["runs"][0]["cases"].as_array().unwrap();
    assert!(cases.len() >= 30, "at least 30 cases: {}", cases.len());
    let categories: std::collections::BTreeSet<&str> = cases.iter().map(|c| c["category"].as_str().unwrap()).collect();
    assert_eq!(categories.len(), 5, "{categories:?}");
    // The built-in checks ran on every case, and the table agrees with the file.
    assert!(cases.iter().all(|c| c["checks"].as_array().unwrap().iter().any(|k| k["name"] == "numbers from tools")));
    let total = &report["summaries"][0]["total"];
    assert!(stdout.contains(&format!("{} of {} checks", total["checks_passed"], total["checks"])), "{stdout}");
    let retrieval = &report["retrieval"][0];
    assert_eq!(retrieval["method"], "bm25", "{retrieval}");
    assert!(retrieval["recall_at_5"].as_f64().unwrap() > 0.5, "{retrieval}");
    assert!(std::fs::read_to_string(dir.path().join("eval.md")).unwrap().contains("| category | cases |"));
}

#[test]
fn an_adversarial_model_breaks_no_guarantee() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = eval(dir.path(), &["--scripted"]);
    assert!(ok, "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("eval.json")).unwrap()).unwrap();
    let cases = report["runs"][0]["cases"].as_array().unwrap();
    assert!(cases.len() >= 5 && cases.iter().all(|c| c["category"] == "hostile"), "{cases:?}");
    // The obedient model did propose what the alarm message ordered: the eval sees it,
    // and the rules model's note stands in for the one that claimed approval.
    let ordered = cases.iter().find(|c| c["id"] == "hostile-message-orders-proposal").unwrap();
    assert_eq!(ordered["outcome"], "degraded", "{ordered}");
    assert!(!ordered["answer"].as_str().unwrap().contains("approved"), "{ordered}");
}

#[test]
fn a_case_that_does_not_hold_fails_the_run_against_its_floor() {
    let dir = tempfile::tempdir().unwrap();
    let floor = dir.path().join("floor.toml");
    std::fs::write(&floor, "score = 1.0\ncases_passed = 1\n").unwrap();
    // A case the rules model cannot hold: a marginal reading expected to be an emergency.
    let cases = dir.path().join("cases");
    std::fs::create_dir(&cases).unwrap();
    let case = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("eval/cases/normal-just-over-set-point.toml"),
    )
    .unwrap()
    .replace(r#"urgency = ["monitor", "soon"]"#, r#"urgency = ["immediate"]"#);
    std::fs::write(cases.join("impossible.toml"), case).unwrap();
    let (ok, _, stderr) = eval(dir.path(), &["--floor", floor.to_str().unwrap(), "--cases", cases.to_str().unwrap()]);
    assert!(!ok, "a floor above the score fails the run");
    assert!(stderr.contains("BELOW THE FLOOR"), "{stderr}");
    assert!(stderr.contains("FAIL urgency"), "the failing check is named: {stderr}");
}

/// A judge model (here a scripted one over HTTP, as any provider) grades the answer
/// against the case's rubric; its grade is reported apart from the checks' score.
#[tokio::test(flavor = "multi_thread")]
async fn a_judge_grades_apart_from_the_checks() {
    use twinops::scripted::{Reply, ScriptedServer};
    let server = ScriptedServer::cycling(vec![Reply::text("GRADE: 7\nNames the bearing but not the zone.")]).await;
    let dir = tempfile::tempdir().unwrap();
    let judge = dir.path().join("judge.toml");
    std::fs::write(
        &judge,
        format!("[[llm.chain]]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"judge\"\n", server.openai_url()),
    )
    .unwrap();
    let out = dir.path().to_path_buf();
    let (ok, stdout, stderr) = tokio::task::spawn_blocking(move || {
        eval(&out, &["--judge", judge.to_str().unwrap(), "--case", "triage-bearing-wear"])
    })
    .await
    .unwrap();
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("judge 7.0/10 (apart from the score)"), "{stdout}");
    let asked = server.requests();
    let rubric = asked[0]["messages"][1]["content"].as_str().unwrap();
    assert!(rubric.contains("Rubric: Names bearing wear") && rubric.contains("<data"), "{rubric}");
}
