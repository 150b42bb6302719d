//! Stamps the build with the git commit it came from, for `twinops --version`
//! (`TWINOPS_GIT_COMMIT` overrides it, as a package build from a tarball may need).

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=TWINOPS_GIT_COMMIT");
    // Rerun when HEAD moves: the file for a branch switch, the ref for a commit. Only
    // paths that exist: a missing one would rerun this at every build.
    for path in [".git/HEAD", ".git/refs/heads", ".git/packed-refs"] {
        if Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    let commit = std::env::var("TWINOPS_GIT_COMMIT").ok().filter(|c| !c.is_empty()).or_else(|| {
        let out = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().ok()?;
        let commit = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !commit.is_empty()).then_some(commit)
    });
    println!("cargo:rustc-env=TWINOPS_GIT_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
}
