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
/// (`app`, `cli`), never the other way round.
#[test]
fn only_the_assembly_uses_config() {
    let deps = dependencies();
    let users: Vec<&String> = deps.iter().filter(|(_, d)| d.contains("config")).map(|(m, _)| m).collect();
    assert_eq!(users, ["app", "cli"], "modules that use config");
}
