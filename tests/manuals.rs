//! The manuals sites have: a PDF printed by Chromium (not by us), HTML and plain text
//! beside the Markdown, indexed by `twinops docs index`, found by `search_docs`, cited
//! by page and read with `read_doc`; a PDF with no text layer is reported, with why.

mod common;

use std::path::Path;
use std::process::Command;

use common::Plant;
use serde_json::json;

fn manuals() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/manuals"))
}

fn index(p: &Plant) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_twinops"))
        .arg("--db")
        .arg(p.db_path())
        .args(["docs", "index"])
        .arg(manuals())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn a_pdf_manual_is_searched_cited_by_page_and_read() {
    let p = Plant::new();
    let report = index(&p);
    assert!(report.contains("3 added"), "the PDF, the HTML and the text file: {report}");
    assert!(
        report.contains("not indexed: p4-wiring-scan.pdf: no text layer") && report.contains("OCR"),
        "the scanned drawing is reported with the reason: {report}"
    );

    let hits = p.ok("search_docs", json!({"query": "blower discharge temperature high inlet filter", "limit": 3}));
    assert_eq!(hits["results"][0]["citation"], "blower-om.pdf#p3", "{hits}");
    let page = p.ok("read_doc", json!({"citation": "blower-om.pdf#p3"}));
    let text = page["text"].as_str().unwrap();
    assert!(text.contains("Probable causes: clogged inlet filter"), "{page}");
    assert!(!text.contains("Grease the drive-end"), "only page 3: {text}");
    assert_eq!(
        (page["previous"].as_str(), page["next"].as_str()),
        (Some("blower-om.pdf#p2"), Some("blower-om.pdf#p4"))
    );
    assert_eq!(page["document"], "Aeration blower B-201: operation and maintenance");
    assert_eq!(p.ok("read_doc", json!({"citation": "blower-om.pdf#3"}))["citation"], "blower-om.pdf#p3");
    let past = p.call("read_doc", json!({"citation": "blower-om.pdf#p9"}));
    assert!(
        past.is_error && past.content.contains("blower-om.pdf has pages p1 to p4; there is no p9"),
        "{}",
        past.content
    );

    // HTML keeps its headings; its script is not text.
    let hits = p.ok("search_docs", json!({"query": "chlorine residual low CL2-LO", "limit": 1}));
    assert_eq!(
        hits["results"][0]["heading"],
        "Chlorine dosing skid CD-1: operator guide > Residual low alarm (CL2-LO)"
    );
    let all = p.ok("read_doc", json!({"citation": hits["results"][0]["citation"]}));
    assert!(all["text"].as_str().unwrap().contains("day tank level > 20%"), "{all}");
    let script = p.ok("search_docs", json!({"query": "console log not indexed"}));
    assert!(!script.to_string().contains("console.log"), "{script}");
    let notes = p.ok("search_docs", json!({"query": "strainer leaves autumn differential pressure", "limit": 1}));
    assert_eq!(notes["results"][0]["citation"], "site-notes.txt#0", "{notes}");

    let again = index(&p);
    assert!(again.contains("0 added, 0 updated, 3 unchanged"), "{again}");
}

/// What the extractor makes of the fixtures, apart from the index: one text per page,
/// lines rejoined into paragraphs.
#[test]
fn the_text_layer_is_read_page_by_page() {
    let pages = twinops::rag::pdf_pages(&std::fs::read(manuals().join("blower-om.pdf")).unwrap()).unwrap();
    assert_eq!(pages.len(), 4);
    assert!(
        pages[1].starts_with("Start-up") && pages[1].contains("sight glass: it must be between the marks"),
        "{:?}",
        pages[1]
    );
    let scan = twinops::rag::pdf_pages(&std::fs::read(manuals().join("p4-wiring-scan.pdf")).unwrap()).unwrap_err();
    assert!(scan.contains("no text layer in its 1 page(s)"), "{scan}");
    let junk =
        twinops::rag::pdf_pages(b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << >>\n%%EOF").unwrap_err();
    assert!(junk.contains("PDF"), "a broken file says so and does not panic: {junk}");
}
