//! Build script: records the git revision the binary was built from.
//!
//! Sets `HITCOUNT_GIT_REVISION` (read by `metrics::build_info` through
//! `option_env!`) to `git rev-parse --short HEAD`. When git or the
//! repository is absent (a crate tarball, a container build without `.git`)
//! it sets nothing and the revision reads "unknown". A value already in the
//! environment wins, so packagers can pass it in explicitly.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn watch(path: &str) {
    if Path::new(path).exists() {
        println!("cargo:rerun-if-changed={path}");
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=HITCOUNT_GIT_REVISION");
    if std::env::var_os("HITCOUNT_GIT_REVISION").is_some() {
        return;
    }
    // Re-run when HEAD moves: HEAD itself (checkout), the branch it points
    // to (commit) and packed-refs (gc). `.git/HEAD` is the usual location;
    // `--git-path` also covers worktrees, whose `.git` is a file.
    watch(".git/HEAD");
    if let Some(head) = git(&["rev-parse", "--git-path", "HEAD"]) {
        watch(&head);
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(path) = git(&["rev-parse", "--git-path", &branch]) {
            watch(&path);
        }
    }
    if let Some(packed) = git(&["rev-parse", "--git-path", "packed-refs"]) {
        watch(&packed);
    }
    if let Some(rev) = git(&["rev-parse", "--short", "HEAD"]) {
        println!("cargo:rustc-env=HITCOUNT_GIT_REVISION={rev}");
    }
}
