//! The user guide (`docs/`, an mdBook) and the README hold together: every chapter is
//! in SUMMARY.md, every relative link and anchor leads somewhere, the troubleshooting
//! chapter names every dead-letter reason, and the README keeps the two commands in its
//! first screen. `.ci/run` also builds the book with mdbook.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use twinops::domain::DeadLetterReason;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn chapters() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("docs/src"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    v.sort();
    v
}

/// The targets of a Markdown file's links and images, outside code.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced {
            continue;
        }
        // Inline code spans may hold "](" that is not a link.
        let mut prose = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                prose.push_str(part);
            }
        }
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let end = tail.find(')').unwrap_or(tail.len());
            out.push(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    out
}

/// mdBook's id for a heading: lower case, letters, digits, `-` and `_` kept, spaces
/// to `-`, the rest dropped.
fn heading_id(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> HashSet<String> {
    let mut fenced = false;
    let mut ids = HashSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if !fenced && line.starts_with('#') {
            ids.insert(heading_id(line.trim_start_matches('#').trim()));
        }
    }
    ids
}

#[test]
fn every_chapter_is_in_the_summary_and_every_link_leads_somewhere() {
    let src = root().join("docs/src");
    let summary = read(&src.join("SUMMARY.md"));
    let listed: HashSet<String> = links(&summary).into_iter().collect();
    for chapter in chapters() {
        let name = chapter.file_name().unwrap().to_string_lossy().to_string();
        if name != "SUMMARY.md" {
            assert!(listed.contains(&name), "{name} is not in docs/src/SUMMARY.md: mdbook would leave it out");
        }
    }
    let mut files: Vec<PathBuf> = chapters();
    files.push(root().join("README.md"));
    let mut checked = 0;
    for file in files {
        let text = read(&file);
        for link in links(&text) {
            if link.starts_with("http://") || link.starts_with("https://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = link.split_once('#').map_or((link.as_str(), None), |(p, a)| (p, Some(a)));
            let target = if path.is_empty() { file.clone() } else { file.parent().unwrap().join(path) };
            assert!(target.exists(), "{}: the link '{link}' leads nowhere", file.display());
            if let Some(anchor) = anchor {
                assert!(
                    anchors(&read(&target)).contains(anchor),
                    "{}: '{link}': no heading with the id '{anchor}' in {}",
                    file.display(),
                    target.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 40, "only {checked} links found: is the link parser broken?");
}

/// Every picture the README and the guide show is one of `docs/src/images/sources.toml`,
/// taken from the demo a newcomer runs with `scripts/hmi-screenshot`, never a test's
/// screenshot (a test's alarm, its bidi trick included, is not what a site sees); and
/// every picture there is shown somewhere.
#[test]
fn every_picture_comes_from_the_demo() {
    let images = root().join("docs/src/images");
    let sources: toml::Table = toml::from_str(&read(&images.join("sources.toml"))).unwrap();
    let listed: Vec<&toml::Table> =
        sources["image"].as_array().unwrap().iter().map(|i| i.as_table().unwrap()).collect();
    for entry in &listed {
        let file = entry["file"].as_str().unwrap();
        assert!(entry["demo"].as_str().unwrap().starts_with("serve --demo"), "{file}: {entry:?}");
        assert!(entry["command"].as_str().unwrap().starts_with("scripts/hmi-screenshot "), "{file}: {entry:?}");
        assert!(images.join(file).exists(), "{file} is listed but missing");
    }
    let mut shown = HashSet::new();
    for page in chapters().into_iter().chain([root().join("README.md")]) {
        for target in links(&read(&page)).into_iter().filter(|t| t.ends_with(".png")) {
            let file = target.rsplit('/').next().unwrap().to_string();
            assert!(
                listed.iter().any(|e| e["file"].as_str() == Some(&file)),
                "{} shows {target}, which docs/src/images/sources.toml does not say was taken from the demo",
                page.display()
            );
            shown.insert(file);
        }
    }
    for entry in &listed {
        assert!(shown.contains(entry["file"].as_str().unwrap()), "{entry:?} is shown nowhere");
    }
    assert!(!read(&root().join("tests/browser.rs")).contains("docs/src/images"), "tests write under target/");
}

#[test]
fn troubleshooting_names_every_dead_letter_reason() {
    let text = read(&root().join("docs/src/troubleshooting.md"));
    for reason in DeadLetterReason::ALL {
        assert!(
            text.contains(&format!("| `{}` |", reason.as_str())),
            "docs/src/troubleshooting.md has no row for the dead-letter reason {}",
            reason.as_str()
        );
    }
}

#[test]
fn the_readme_is_short_and_opens_with_the_two_commands() {
    let readme = read(&root().join("README.md"));
    let first_screen: String = readme.lines().take(30).collect::<Vec<_>>().join("\n");
    assert!(first_screen.contains("cargo run --release -- serve --demo\ncargo test\n"), "{first_screen}");
    let lines = readme.lines().count();
    assert!(lines <= 220, "README.md is {lines} lines: about 200, the rest in the guide");
}

#[test]
fn the_link_parser_finds_links_and_ids_as_mdbook_makes_them() {
    let text = "See [a](a.md#x-y) and `[not](code.md)`, ![i](images/i.png).\n```\n[no](fenced.md)\n```\n";
    assert_eq!(links(text), ["a.md#x-y", "images/i.png"]);
    assert_eq!(
        heading_id("Rationalization: the master alarm database, replay"),
        "rationalization-the-master-alarm-database-replay"
    );
    assert_eq!(heading_id("Measuring quality: `twinops eval`"), "measuring-quality-twinops-eval");
}
