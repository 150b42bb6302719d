//! The documents sites have, read into text for indexing: Markdown and plain text as
//! they are, HTML with its headings kept, PDF from its text layer page by page (with
//! the `pdf-extract` crate). What cannot be read says why, so `docs index` reports it
//! rather than skipping it in silence.

use std::path::Path;

/// A document's text: Markdown (chunked by headings), or a paged document's pages (a
/// chunk per page, cited `#p<page>`).
#[derive(Debug, Clone, PartialEq)]
pub enum DocText {
    Markdown(String),
    Pages(Vec<String>),
}

/// The extensions read, for messages.
pub const KINDS: &str = ".md, .txt, .html, .pdf";

/// Whether `path` is a document the search reads, by its extension.
pub fn is_document(path: &Path) -> bool {
    let ext = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    ["md", "markdown", "txt", "html", "htm", "pdf"].contains(&ext.as_str())
}

/// Reads `path` by its extension; `Err` says why it is not indexed.
pub fn read(path: &Path) -> Result<DocText, String> {
    let ext = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    let text = || std::fs::read_to_string(path).map_err(|e| format!("not readable as UTF-8 text: {e}"));
    match ext.as_str() {
        "md" | "markdown" | "txt" => Ok(DocText::Markdown(text()?)),
        "html" | "htm" => Ok(DocText::Markdown(html_to_markdown(&text()?))),
        "pdf" => pdf_pages(&std::fs::read(path).map_err(|e| format!("not readable: {e}"))?).map(DocText::Pages),
        other => Err(format!(
            "not a format the search reads ({}); it reads {KINDS}: export it as PDF or HTML",
            if other.is_empty() { "no extension".to_string() } else { format!(".{other}") }
        )),
    }
}

/// Fewer visible characters than this in a whole PDF: it has no text layer.
const MIN_TEXT_CHARS: usize = 20;

/// A PDF's text layer, page by page, paragraphs rejoined.
pub fn pdf_pages(bytes: &[u8]) -> Result<Vec<String>, String> {
    // The extractor panics on some malformed files; one bad manual must not stop the rest.
    let pages = std::panic::catch_unwind(|| pdf_extract::extract_text_from_mem_by_pages(bytes))
        .map_err(|_| "the PDF could not be parsed (malformed or unsupported): re-save it from its source".to_string())?
        .map_err(|e| format!("the PDF could not be read: {e}"))?;
    let pages: Vec<String> = pages.iter().map(|p| rejoin(p)).collect();
    let visible: usize = pages.iter().map(|p| p.chars().filter(|c| !c.is_whitespace()).count()).sum();
    if visible < MIN_TEXT_CHARS {
        return Err(format!(
            "no text layer in its {} page(s): the pages are images (a scanned manual?); run OCR on it \
             (e.g. ocrmypdf) and index the result",
            pages.len()
        ));
    }
    Ok(pages)
}

/// Lines broken by the page layout joined back into paragraphs; blank lines kept as
/// paragraph breaks, a hyphen at a line's end kept without a space.
fn rejoin(page: &str) -> String {
    let mut out = String::new();
    for paragraph in page.split("\n\n").map(str::trim).filter(|p| !p.is_empty()) {
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        let mut lines = paragraph.lines().map(str::trim).filter(|l| !l.is_empty()).peekable();
        while let Some(line) = lines.next() {
            out.push_str(line);
            if lines.peek().is_some() && !line.ends_with('-') {
                out.push(' ');
            }
        }
    }
    out
}

/// HTML as Markdown enough for chunking: headings become `#` lines, blocks and list
/// items become lines, scripts, styles and comments go, entities are decoded.
pub fn html_to_markdown(html: &str) -> String {
    let mut out = String::new();
    let mut title = None;
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        out.push_str(&decode(&rest[..open]));
        let after = &rest[open..];
        if after.starts_with("<!--") {
            rest = after.find("-->").map_or("", |end| &after[end + 3..]);
            continue;
        }
        let Some(close) = after.find('>') else { break };
        let tag = after[1..close].trim().to_ascii_lowercase();
        let name: String = tag.trim_start_matches('/').chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
        rest = &after[close + 1..];
        match name.as_str() {
            "script" | "style" | "title" if !tag.starts_with('/') => {
                let end = rest.to_ascii_lowercase().find(&format!("</{name}")).unwrap_or(rest.len());
                if name == "title" {
                    title = Some(decode(rest[..end].trim()));
                }
                rest = &rest[end..];
            }
            h if h.len() == 2 && h.starts_with('h') && h.as_bytes()[1].is_ascii_digit() => {
                let level = usize::from(h.as_bytes()[1] - b'0');
                out.push_str("\n\n");
                if !tag.starts_with('/') {
                    out.push_str(&"#".repeat(level.clamp(1, 6)));
                    out.push(' ');
                }
            }
            "li" if !tag.starts_with('/') => out.push_str("\n- "),
            "p" | "div" | "br" | "tr" | "ul" | "ol" | "table" | "section" | "article" | "blockquote" | "pre" => {
                out.push_str("\n\n")
            }
            "td" | "th" => out.push_str(" | "),
            _ => {}
        }
    }
    out.push_str(&decode(rest));
    // Whitespace as Markdown wants it: single spaces in lines, at most one blank line.
    let mut text = String::new();
    let mut blank = 0;
    for line in out.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")) {
        if line.is_empty() {
            blank += 1;
            continue;
        }
        if !text.is_empty() {
            text.push_str(if blank > 0 { "\n\n" } else { "\n" });
        }
        blank = 0;
        text.push_str(&line);
    }
    match title {
        Some(t) if !text.starts_with("# ") && !t.is_empty() => format!("# {t}\n\n{text}\n"),
        _ => format!("{text}\n"),
    }
}

fn decode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp..];
        let end = after.find(';').filter(|&e| e <= 10);
        let decoded = end.and_then(|e| {
            let entity = &after[1..e];
            match entity {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" | "#39" => Some('\''),
                "nbsp" => Some(' '),
                _ => entity
                    .strip_prefix("#x")
                    .map(|h| u32::from_str_radix(h, 16))
                    .or_else(|| entity.strip_prefix('#').map(str::parse::<u32>))
                    .and_then(Result::ok)
                    .and_then(char::from_u32),
            }
        });
        match (decoded, end) {
            (Some(c), Some(e)) => {
                out.push(c);
                rest = &after[e + 1..];
            }
            _ => {
                out.push('&');
                rest = &after[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_keeps_headings_lists_and_text_and_drops_scripts() {
        let html = "<html><head><title>Blower B-201 &amp; ancillaries</title><style>p{}</style></head>\
                    <body><h2>Start-up</h2><p>Open the valve&nbsp;fully.<br>Check oil.</p>\
                    <ul><li>Filter &lt; 50 mbar</li><li>Temp &#176;C</li></ul><script>alert(1)</script><!-- x --></body></html>";
        assert_eq!(
            html_to_markdown(html),
            "# Blower B-201 & ancillaries\n\n## Start-up\n\nOpen the valve fully.\n\nCheck oil.\n\n- Filter < 50 mbar\n- Temp °C\n"
        );
    }

    #[test]
    fn page_lines_are_rejoined_into_paragraphs() {
        assert_eq!(
            rejoin("\n\nStart-\nup checks\nfor the blower\n\nNext para\n"),
            "Start-up checks for the blower\n\nNext para"
        );
    }
}
