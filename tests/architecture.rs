//! The module boundaries of ARCHITECTURE.md, checked over the source: no top-level
//! module depends on another that depends back on it, however long the way round.
//! A dependency is a `crate::name` path outside comments and test modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each top-level module of `src/` and the top-level modules it names.
fn dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut deps = BTreeMap::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if name == "main" || name == "lib" {
            continue;
        }
        let mut files = Vec::new();
        collect(&path, &mut files);
        let mut named = BTreeSet::new();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for line in code.lines().map(str::trim).filter(|l| !l.starts_with("//")) {
                for (i, _) in line.match_indices("crate::") {
                    let rest = &line[i + "crate::".len()..];
                    let module: String = rest.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
                    if !module.is_empty() && module != name {
                        named.insert(module);
                    }
                }
            }
        }
        deps.insert(name, named);
    }
    deps
}

fn collect(path: &Path, files: &mut Vec<std::path::PathBuf>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            collect(&entry.unwrap().path(), files);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        files.push(path.to_path_buf());
    }
}

/// A way from `from` back to itself, if there is one.
fn cycle_through(from: &str, deps: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_string()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap();
        for next in deps.get(last).into_iter().flatten() {
            if next == from {
                let mut found = path.clone();
                found.push(next.clone());
                return Some(found);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push(longer);
            }
        }
    }
    None
}

#[test]
fn no_cycle_between_top_level_modules() {
    let deps = dependencies();
    assert!(deps.len() > 20, "the scan found the modules: {:?}", deps.keys());
    assert!(deps["ingest"].contains("store") && deps["web"].contains("accounts"), "the scan finds dependencies");
    let cycles: Vec<String> = deps.keys().filter_map(|m| cycle_through(m, &deps)).map(|c| c.join(" -> ")).collect();
    assert!(cycles.is_empty(), "cycles between top-level modules:\n{}", cycles.join("\n"));
}

/// The first path segments named after `prefix` in `code` (`super::audit::Audit` and
/// `super::{audit, checks::Flaw}` name `audit`, and `audit` and `checks`).
fn named_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let segment =
        |s: &str| -> String { s.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect() };
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices(prefix) {
        // `super::super::x` is read by its own prefix, not as a name `super`.
        if i >= 2 && &code[i - 2..i] == "::" {
            continue;
        }
        let rest = &code[i + prefix.len()..];
        match rest.strip_prefix('{') {
            Some(group) => {
                let (mut depth, mut item) = (0, String::new());
                for c in group.chars() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            out.insert(segment(&item));
                            item.clear();
                            continue;
                        }
                        _ => {}
                    }
                    item.push(c);
                }
                out.insert(segment(&item));
            }
            None => {
                out.insert(segment(rest));
            }
        }
    }
    out.retain(|n| !n.is_empty());
    out
}

/// Within each module of `src/` that is a folder, the files (and subfolders) it holds
/// and the siblings each names: `super::x` from a file of the folder, `super::super::x`
/// from a file of a subfolder, `crate::module::x` from either. `mod.rs` is the module
/// itself, not a sibling.
fn sibling_dependencies() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let module = dir.file_name().unwrap().to_string_lossy().to_string();
        let units: BTreeSet<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir() || p.extension().is_some_and(|e| e == "rs"))
            .map(|p| p.file_stem().unwrap().to_string_lossy().to_string())
            .filter(|u| u != "mod")
            .collect();
        let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for unit in &units {
            let (path, mut files) = (dir.join(unit), Vec::new());
            collect(&path, &mut files);
            if path.with_extension("rs").exists() {
                collect(&path.with_extension("rs"), &mut files);
            }
            let named = deps.entry(unit.clone()).or_default();
            for file in files {
                let text = std::fs::read_to_string(&file).unwrap();
                let code: String = text
                    .split("#[cfg(test)]")
                    .next()
                    .unwrap_or("")
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("//"))
                    .collect::<Vec<_>>()
                    .join("\n");
                let depth = file.strip_prefix(&dir).unwrap().components().count();
                // How a file at this depth names its module's items.
                let up = match (depth, file.file_name().unwrap() == "mod.rs") {
                    (1, _) | (2, true) => "super::",
                    (2, false) | (3, true) => "super::super::",
                    _ => "super::super::super::",
                };
                let mut found = named_after(&code, up);
                found.extend(named_after(&code, &format!("crate::{module}::")));
                named.extend(found.into_iter().filter(|n| n != unit && units.contains(n)));
            }
        }
        modules.insert(module, deps);
    }
    modules
}

/// Inside each module the files form a tree: no file names a sibling that names it back,
/// however long the way round (types both need live in a file below both).
#[test]
fn no_cycle_between_the_files_of_a_module() {
    let modules = sibling_dependencies();
    assert!(modules["agent"]["run"].contains("audit"), "the scan finds uses: {:?}", modules["agent"]);
    assert!(modules["alarms"]["kpi"].contains("activity"), "and grouped ones: {:?}", modules["alarms"]);
    let cycles: Vec<String> = modules
        .iter()
        .flat_map(|(module, deps)| {
            deps.keys().filter_map(|f| cycle_through(f, deps)).map(move |c| format!("{module}: {}", c.join(" -> ")))
        })
        .collect();
    assert!(cycles.is_empty(), "cycles between the files of a module:\n{}", cycles.join("\n"));
}

/// The lower layers stay below: `support` and `metrics` name no other module, `domain`
/// only `support`, `store` only those three.
#[test]
fn the_foundations_depend_on_nothing_above_them() {
    let deps = dependencies();
    let beyond = |module: &str, allowed: &[&str]| -> Vec<String> {
        deps[module].iter().filter(|d| !allowed.contains(&d.as_str())).cloned().collect()
    };
    assert_eq!(beyond("support", &[]), Vec::<String>::new(), "support");
    assert_eq!(beyond("metrics", &[]), Vec::<String>::new(), "metrics");
    assert_eq!(beyond("domain", &["support"]), Vec::<String>::new(), "domain");
    assert_eq!(beyond("store", &["domain", "support", "metrics"]), Vec::<String>::new(), "store");
}

/// `config` only assembles: each component owns its part and is used by the assembly
/// (`app`, `check`, `cli`), never the other way round.
#[test]
fn only_the_assembly_uses_config() {
    let deps = dependencies();
    let users: Vec<&String> = deps.iter().filter(|(_, d)| d.contains("config")).map(|(m, _)| m).collect();
    assert_eq!(users, ["app", "check", "cli"], "modules that use config");
}

/// The layers of ARCHITECTURE.md's Boundaries section, lowest first, and the uses
/// within a layer that it states. Every top-level module is in one layer; every
/// dependency goes down, or is one of the stated uses within a layer.
const LAYERS: &[&[&str]] = &[
    &["support", "metrics", "domain", "store"],
    &[
        "plant",
        "rag",
        "alarms",
        "episodes",
        "approvals",
        "handover",
        "accounts",
        "sparkplug",
        "ingest",
        "opcua",
        "cluster",
    ],
    &["tools", "agent", "triage", "notify", "schedule", "decisions"],
    &["web", "mcp", "console", "publish", "sim", "seed", "scripted", "eval", "bench", "broker", "sdnotify"],
    &["config", "app", "check", "cli"],
];

const WITHIN_A_LAYER: &[(&str, &str)] = &[
    ("domain", "support"),
    ("store", "domain"),
    ("store", "support"),
    ("store", "metrics"),
    ("sparkplug", "plant"),
    ("ingest", "alarms"),
    ("ingest", "episodes"),
    ("episodes", "alarms"),
    ("ingest", "sparkplug"),
    ("ingest", "accounts"),
    ("ingest", "plant"),
    ("opcua", "ingest"),
    ("opcua", "plant"),
    ("opcua", "alarms"),
    ("opcua", "cluster"),
    ("cluster", "ingest"),
    ("cluster", "sparkplug"),
    ("approvals", "alarms"),
    ("approvals", "cluster"),
    ("agent", "tools"),
    ("triage", "agent"),
    ("notify", "triage"),
    ("notify", "agent"),
    ("schedule", "agent"),
    ("schedule", "triage"),
    ("web", "mcp"),
    ("eval", "scripted"),
    ("eval", "seed"),
    ("bench", "scripted"),
    ("bench", "seed"),
    ("bench", "sim"),
    ("bench", "broker"),
    ("sim", "seed"),
    ("sim", "publish"),
    ("bench", "publish"),
    ("app", "config"),
    ("cli", "config"),
    ("cli", "app"),
    ("check", "config"),
    ("cli", "check"),
];

#[test]
fn every_dependency_goes_down_the_layers() {
    let deps = dependencies();
    let layer = |m: &str| LAYERS.iter().position(|l| l.contains(&m));
    let unplaced: Vec<&String> = deps.keys().filter(|m| layer(m).is_none()).collect();
    assert!(unplaced.is_empty(), "modules in no layer of ARCHITECTURE.md's Boundaries: {unplaced:?}");
    let mut wrong = Vec::new();
    for (m, uses) in &deps {
        for d in uses.iter().filter(|d| deps.contains_key(*d)) {
            let (from, to) = (layer(m).unwrap(), layer(d).unwrap());
            if to > from || (to == from && !WITHIN_A_LAYER.contains(&(m.as_str(), d.as_str()))) {
                wrong.push(format!("{m} (layer {}) -> {d} (layer {})", from + 1, to + 1));
            }
        }
    }
    assert!(wrong.is_empty(), "uses the Boundaries section does not allow:\n{}", wrong.join("\n"));
    let scripted: Vec<&String> = deps.iter().filter(|(_, d)| d.contains("scripted")).map(|(m, _)| m).collect();
    assert_eq!(scripted, ["bench", "eval"], "only eval and bench use the scripted model server");
}

/// Every module of `src/` is on ARCHITECTURE.md's code map, and every top-level one in
/// lib.rs's Layout; every test the document cites exists.
#[test]
fn the_map_names_every_module_and_every_cited_test_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let map = doc.split("## Code map").nth(1).unwrap().split("\n## ").next().unwrap();
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    let mut files = Vec::new();
    collect(&root.join("src"), &mut files);
    let mut missing = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(root.join("src")).unwrap().to_string_lossy().replace('\\', "/");
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        if matches!(rel.as_str(), "main.rs" | "lib.rs") || name == "mod.rs" {
            continue;
        }
        let top = rel.split('/').next().unwrap().trim_end_matches(".rs").to_string();
        let on_map = if rel.contains('/') {
            map.contains(&format!("`{name}`"))
                || map.contains(&format!("`{rel}`"))
                || map.contains(&format!("/{name}`"))
        } else {
            map.contains(&format!("`{name}`")) || map.contains(&format!("`{top}/`"))
        };
        if !on_map {
            missing.push(format!("{rel} is not on the code map"));
        }
        if !lib.contains(&format!("[`{top}`]")) {
            missing.push(format!("{top} is not in lib.rs's Layout"));
        }
    }
    missing.sort();
    missing.dedup();
    let mut sources = String::new();
    let mut all = Vec::new();
    collect(&root.join("tests"), &mut all);
    collect(&root.join("src"), &mut all);
    for f in all {
        sources.push_str(&std::fs::read_to_string(f).unwrap());
    }
    for cited in doc.split("test: `").skip(1).map(|s| s.split('`').next().unwrap()) {
        let exists = match cited.strip_prefix('*') {
            // A name that macros prefix (`mosquitto_...`, `embedded_broker_...`).
            Some(suffix) => sources.contains(suffix),
            None if cited.ends_with(".rs") => root.join(cited).exists(),
            None => sources.contains(&format!("fn {cited}(")),
        };
        if !exists {
            missing.push(format!("the cited test `{cited}` does not exist"));
        }
    }
    assert!(missing.is_empty(), "ARCHITECTURE.md and lib.rs drift from the code:\n{}", missing.join("\n"));
}
