//! Splitting a Markdown document into citable chunks: one per section, the section's
//! heading path kept with it; long sections split at paragraph breaks, with the last
//! paragraph of one piece repeated at the start of the next so that no sentence loses
//! its context.

/// Longest chunk body, in characters. About 400 tokens: small enough that a search hit
/// is specific, large enough to hold one alarm response procedure whole.
pub const MAX_CHUNK_CHARS: usize = 1600;
/// Overlap carried from one piece of a split section into the next, at most.
const MAX_OVERLAP_CHARS: usize = 300;

#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    /// The heading path below the document title, `Section > Subsection`; empty for
    /// text before the first section.
    pub section: String,
    pub body: String,
}

/// How a chunk's place is shown: `Title > Section > Subsection`.
pub fn heading(title: &str, section: &str) -> String {
    if section.is_empty() { title.to_string() } else { format!("{title} > {section}") }
}

/// Returns the document's title (its first `#` heading, else `fallback_title`) and chunks.
pub fn chunk_markdown(text: &str, fallback_title: &str) -> (String, Vec<Chunk>) {
    let mut title: Option<String> = None;
    let mut path: Vec<(usize, String)> = Vec::new();
    let mut sections: Vec<(String, String)> = Vec::new();
    let mut body = String::new();
    let mut in_fence = false;

    let section_of = |path: &[(usize, String)]| path.iter().map(|(_, h)| h.as_str()).collect::<Vec<_>>().join(" > ");

    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        let level = if in_fence { 0 } else { line.bytes().take_while(|&b| b == b'#').count() };
        let is_heading = (1..=6).contains(&level) && line[level..].starts_with(' ');
        if !is_heading {
            body.push_str(line);
            body.push('\n');
            continue;
        }
        let text = line[level..].trim().to_string();
        sections.push((section_of(&path), std::mem::take(&mut body)));
        if level == 1 && title.is_none() {
            title = Some(text);
            path.clear();
        } else {
            path.retain(|(l, _)| *l < level);
            path.push((level, text));
        }
    }
    sections.push((section_of(&path), body));

    let title = title.unwrap_or_else(|| fallback_title.to_string());
    let mut chunks = Vec::new();
    for (section, body) in sections {
        for piece in split_body(body.trim()) {
            chunks.push(Chunk { section: section.clone(), body: piece });
        }
    }
    (title, chunks)
}

fn split_body(body: &str) -> Vec<String> {
    if body.is_empty() {
        return Vec::new();
    }
    if body.chars().count() <= MAX_CHUNK_CHARS {
        return vec![body.to_string()];
    }
    let paragraphs: Vec<String> = body
        .split("\n\n")
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .flat_map(|p| hard_wrap(p, MAX_CHUNK_CHARS - MAX_OVERLAP_CHARS))
        .collect();
    let mut pieces = Vec::new();
    let mut current = String::new();
    let mut last_paragraph: Option<&str> = None;
    for p in &paragraphs {
        if !current.is_empty() && current.chars().count() + p.chars().count() + 2 > MAX_CHUNK_CHARS {
            pieces.push(std::mem::take(&mut current));
            if let Some(prev) = last_paragraph.filter(|prev| prev.chars().count() <= MAX_OVERLAP_CHARS) {
                current.push_str(prev);
            }
        }
        if !current.is_empty() {
            current.push_str("\n\n");
        }
        current.push_str(p);
        last_paragraph = Some(p);
    }
    if !current.is_empty() {
        pieces.push(current);
    }
    pieces
}

/// Splits a paragraph longer than `max` characters at whitespace.
fn hard_wrap(p: &str, max: usize) -> Vec<String> {
    if p.chars().count() <= max {
        return vec![p.to_string()];
    }
    let mut out = vec![String::new()];
    for word in p.split_whitespace() {
        let last = out.last_mut().expect("never empty");
        if !last.is_empty() && last.chars().count() + word.chars().count() + 1 > max {
            out.push(String::new());
        }
        let last = out.last_mut().expect("never empty");
        if !last.is_empty() {
            last.push(' ');
        }
        last.push_str(word);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_follow_the_heading_tree() {
        let doc = "# Pumps\nIntro.\n\n## Start-up\nPrime the casing.\n\n### Checks\nRotation.\n\n## Shutdown\nClose the valve.\n```\n# not a heading\n```\n";
        let (title, chunks) = chunk_markdown(doc, "x.md");
        assert_eq!(title, "Pumps");
        let sections: Vec<_> = chunks.iter().map(|c| heading(&title, &c.section)).collect();
        assert_eq!(sections, ["Pumps", "Pumps > Start-up", "Pumps > Start-up > Checks", "Pumps > Shutdown"]);
        assert!(chunks[3].body.contains("# not a heading"), "headings inside code fences are text");
    }

    #[test]
    fn long_sections_are_capped_and_overlap() {
        let para = |i: usize| format!("Paragraph {i} {}", "word ".repeat(40));
        let body: Vec<String> = (0..20).map(para).collect();
        let doc = format!("# T\n## Long\n{}", body.join("\n\n"));
        let (_, chunks) = chunk_markdown(&doc, "t.md");
        assert!(chunks.len() >= 3, "{} chunks", chunks.len());
        for c in &chunks {
            assert!(c.body.chars().count() <= MAX_CHUNK_CHARS, "{}", c.body.len());
            assert_eq!(c.section, "Long");
        }
        let tail_of_first = chunks[0].body.rsplit("\n\n").next().unwrap();
        assert!(chunks[1].body.starts_with(tail_of_first), "the next piece repeats the last paragraph");
    }

    #[test]
    fn a_document_without_headings_uses_its_file_name() {
        let (title, chunks) = chunk_markdown("just text", "notes.md");
        assert_eq!(title, "notes.md");
        assert_eq!(chunks, vec![Chunk { section: String::new(), body: "just text".into() }]);
    }
}
