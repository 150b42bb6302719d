//! The agent from the terminal: `twinops ask`, `triage`, `handover`, `runs` and `tools`.

use super::*;

fn print_handover(h: &crate::handover::Handover) {
    println!(
        "-- handover note {} at {}, run {} ({} via {}){}\n{}\n",
        h.note_id,
        h.created_at.to_rfc3339(),
        h.run_id.map_or("-".into(), |r| r.to_string()),
        h.outcome.as_deref().unwrap_or("-"),
        h.provider.as_deref().unwrap_or("-"),
        crate::notify::flag_list(&h.flags),
        h.text
    );
}

fn print_summary(r: &agent::RunReport) {
    eprintln!(
        "\n-- run {}: {} via {}, {} model call(s), {} tool call(s), {} tokens{}; `twinops runs show {}` for the trace",
        r.run_id,
        r.outcome.as_str(),
        r.provider.as_deref().unwrap_or("-"),
        r.model_calls,
        r.tool_calls,
        r.usage.input_tokens + r.usage.output_tokens,
        if r.flags.is_empty() { String::new() } else { format!(", flagged {}", r.flags.join(", ")) },
        r.run_id
    );
}

pub(super) fn tools(global: &Global, cmd: ToolsCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ToolsCommand::List { format } => {
            let all: Vec<_> = tools::all().iter().collect();
            let defs = match format {
                ToolFormat::Openai => tools::openai_format(&all),
                ToolFormat::Anthropic => tools::anthropic_format(&all),
            };
            println!("{}", serde_json::to_string_pretty(&defs)?);
        }
        ToolsCommand::Call { name, args, now } => {
            let args: serde_json::Value =
                serde_json::from_str(&args).with_context(|| format!("the arguments are not JSON: {args}"))?;
            let now = match &now {
                Some(s) => parse_time(s).map_err(anyhow::Error::msg).context("--now")?,
                None => Timestamp::now(),
            };
            let user = std::env::var("USER").unwrap_or_else(|_| "cli".into());
            let caller = Proposer::User(format!("cli:{user}"));
            let docs = global.config()?.doc_index();
            let out = tools::with_context(&global.open()?, &docs, now, caller, |ctx| tools::call(ctx, &name, args))?;
            println!("{}", out.content);
            if out.is_error {
                return Ok(ExitCode::from(2));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn ask(global: &Global, question: &str, user: &str, now: Option<&str>) -> anyhow::Result<()> {
    let agent = global.agent(now)?;
    let report = runtime()?.block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let printer = tokio::spawn(async move {
            use std::io::Write;
            let mut streamed = false;
            while let Some(event) = rx.recv().await {
                match event {
                    crate::agent::StreamEvent::Text { text } => {
                        print!("{text}");
                        streamed = true;
                    }
                    crate::agent::StreamEvent::Tool { name, arguments } => {
                        eprintln!("[{name} {}]", crate::agent::clip(&arguments, 200))
                    }
                    // The terminal cannot take text back: say so, and print what is kept.
                    crate::agent::StreamEvent::Retract { reason } => {
                        println!("\n[the text above is withdrawn: {reason}]");
                        streamed = false;
                    }
                }
                let _ = std::io::stdout().flush();
            }
            streamed
        });
        let report = agent.ask(question, user, Some(tx)).await;
        let streamed = printer.await.unwrap_or(false);
        report.map(|r| (r, streamed))
    })?;
    let (report, streamed) = report;
    if !streamed {
        println!("{}", report.answer.as_deref().unwrap_or("(no answer)"));
    }
    print_summary(&report);
    Ok(())
}

pub(super) fn triage(global: &Global, alarm_id: i64, now: Option<&str>) -> anyhow::Result<()> {
    let agent = global.agent(now)?;
    let report = runtime()?.block_on(agent.triage(alarm_id))?;
    match &report.note {
        Some(note) => println!("{}", serde_json::to_string_pretty(note)?),
        None => println!("{}", report.answer.as_deref().unwrap_or("(no note)")),
    }
    print_summary(&report);
    Ok(())
}

pub(super) fn handover(global: &Global, last: Option<u32>) -> anyhow::Result<()> {
    let Some(n) = last else {
        let agent = global.agent(None)?;
        let user = std::env::var("USER").unwrap_or_else(|_| "cli".into());
        print_handover(&runtime()?.block_on(agent.write_handover(&format!("user:{user}")))?);
        return Ok(());
    };
    let db = global.open()?.read()?;
    let handovers = crate::handover::recent(&db, n)?;
    if handovers.is_empty() {
        println!("no handover yet: `twinops handover` writes one");
    }
    for h in handovers {
        print_handover(&h);
    }
    Ok(())
}
