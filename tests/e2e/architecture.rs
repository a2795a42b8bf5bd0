//! The shape of the code, checked: four floors (model, store, service,
//! edge), each using only the floors below it; no import circle between
//! modules; no Redis type in the pure floor; every file drawn in the crate's
//! Layout section and every name drawn there present; no file over about
//! 400 lines of code outside its tests. The lab (`lab/src`: kit, bench,
//! cli) is held to the same floors, circles, drawing and sizes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const FLOORS: [&str; 4] = ["model", "store", "service", "edge"];
/// The lab's floors, lowest first.
const LAB_FLOORS: [&str; 3] = ["kit", "bench", "cli"];
/// "About 400 lines": a file over this has two jobs.
const MAX_CODE_LINES: usize = 420;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The lab's source tree.
fn lab() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("lab/src")
}

/// Each source tree with its floors: the product's and the lab's.
fn trees() -> [(PathBuf, &'static [&'static str]); 2] {
    [(src(), &FLOORS), (lab(), &LAB_FLOORS)]
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every module file below a floor of the product, with its module path
/// (`service::worker`).
fn modules() -> Vec<(Vec<String>, PathBuf)> {
    modules_in(&src(), &FLOORS)
}

/// Every module file below one of `floors` in the tree at `root`.
fn modules_in(root: &Path, floors: &[&str]) -> Vec<(Vec<String>, PathBuf)> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let mut out: Vec<(Vec<String>, PathBuf)> = files
        .into_iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(root).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            floors
                .contains(&parts.first()?.as_str())
                .then_some((parts, f))
        })
        .collect();
    out.sort();
    out
}

/// The code of a file before its unit tests, without comment lines.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules a file in module `module` names: through `crate::…`,
/// `super::…` and `self::…` paths, `use` groups with braces expanded
/// (`use super::{a, b::{C, D}}` names `a` and `b`), as long as they go down
/// the module tree: `crate::store::commit::Apply` names `store::commit`.
fn references(
    code: &str,
    module: &[String],
    known: &BTreeSet<Vec<String>>,
) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    for keyword in ["crate::", "super::", "self::"] {
        for (i, _) in code.match_indices(keyword) {
            let before = code[..i].chars().next_back();
            // Part of a longer name (`myself::`), or the middle of a path
            // (`super::super::`) the first keyword already followed.
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let (mut at, mut paths) = (i, Vec::new());
            tree(code.as_bytes(), &mut at, module.to_vec(), &mut paths);
            for path in paths {
                // The longest prefix that is a module.
                if let Some(m) = (1..=path.len())
                    .rev()
                    .map(|n| path[..n].to_vec())
                    .find(|p| known.contains(p))
                {
                    out.insert(m);
                }
            }
        }
    }
    out
}

/// The paths of one `use` tree or path expression from `s[*i]` on, relative
/// to `prefix` (the module the tree starts in): `crate` starts at the root,
/// `super` goes up one module, `self` stays; a `{…}` group is a tree per
/// item. Stops where the path does (`as`, `;`, `(`, `<`, …).
fn tree(s: &[u8], i: &mut usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let skip_space = |i: &mut usize| {
        while *i < s.len() {
            if s[*i].is_ascii_whitespace() {
                *i += 1;
            } else if s[*i..].starts_with(b"//") {
                while *i < s.len() && s[*i] != b'\n' {
                    *i += 1;
                }
            } else {
                break;
            }
        }
    };
    loop {
        skip_space(i);
        if s.get(*i) == Some(&b'{') {
            *i += 1;
            loop {
                skip_space(i);
                match s.get(*i) {
                    None => return,
                    Some(b'}') => {
                        *i += 1;
                        return;
                    }
                    Some(b',') => *i += 1,
                    _ => {
                        tree(s, i, prefix.clone(), out);
                        // Past a rename (`a as b`) to the next item.
                        while *i < s.len() && !b",}".contains(&s[*i]) {
                            *i += 1;
                        }
                    }
                }
            }
        }
        let start = *i;
        while *i < s.len() && (s[*i].is_ascii_alphanumeric() || s[*i] == b'_') {
            *i += 1;
        }
        match std::str::from_utf8(&s[start..*i]).unwrap() {
            "" => break,
            "crate" => prefix.clear(),
            "super" => {
                prefix.pop();
            }
            "self" => {}
            name => prefix.push(name.to_string()),
        }
        skip_space(i);
        if s[*i..].starts_with(b"::") {
            *i += 2;
        } else {
            break;
        }
    }
    out.push(prefix);
}

#[test]
fn references_follow_crate_super_self_and_use_groups() {
    let known: BTreeSet<Vec<String>> = [
        "edge::bench",
        "edge::bench::drain",
        "edge::bench::usage",
        "edge::bench::workers",
        "edge::bench::scaling_report",
        "store",
        "store::commit",
        "store::stream",
        "model::keys",
    ]
    .iter()
    .map(|m| m.split("::").map(str::to_string).collect())
    .collect();
    let module: Vec<String> = ["edge", "bench", "scaling"].map(String::from).to_vec();
    let code = "use super::drain::{drain, fill};\n\
                use super::{\n    usage::{self, Node},\n    workers::Target as T, BenchError,\n};\n\
                use crate::store::{commit::{Apply, Plan}, stream};\n\
                fn f() { self::g(); super::scaling_report::Side::Left; $crate::model::keys::k(); }\n\
                pub(crate) fn myself() -> usize { myself::x() }";
    let found: BTreeSet<String> = references(code, &module, &known)
        .into_iter()
        .map(|m| m.join("::"))
        .collect();
    let expected: BTreeSet<String> = [
        "edge::bench",
        "edge::bench::drain",
        "edge::bench::usage",
        "edge::bench::workers",
        "edge::bench::scaling_report",
        "store::commit",
        "store::stream",
        "model::keys",
    ]
    .map(String::from)
    .into();
    assert_eq!(found, expected);
    // From a folder's mod.rs, `super` is the folder's parent.
    let folder: Vec<String> = ["edge", "bench"].map(String::from).to_vec();
    let found = references("use super::super::store::commit;", &folder, &known);
    assert_eq!(
        found,
        [vec!["store".to_string(), "commit".to_string()]].into()
    );
}

fn floor(floors: &[&str], m: &[String]) -> usize {
    floors.iter().position(|f| *f == m[0]).unwrap()
}

#[test]
fn no_floor_uses_a_floor_above_it() {
    let mut bad = Vec::new();
    for (root, floors) in trees() {
        let mods = modules_in(&root, floors);
        let known: BTreeSet<Vec<String>> = mods.iter().map(|(m, _)| m.clone()).collect();
        for (m, path) in &mods {
            for r in references(&code(path), m, &known) {
                if floor(floors, &r) > floor(floors, m) {
                    bad.push(format!("{} uses {}", m.join("::"), r.join("::")));
                }
            }
        }
    }
    assert!(bad.is_empty(), "arrows up the floors:\n{}", bad.join("\n"));
}

#[test]
fn no_import_circle_between_modules() {
    for (root, floors) in trees() {
        no_import_circle_in(&root, floors);
    }
}

fn no_import_circle_in(root: &Path, floors: &[&str]) {
    let mods = modules_in(root, floors);
    let known: BTreeSet<Vec<String>> = mods.iter().map(|(m, _)| m.clone()).collect();
    // A module and its own ancestors or descendants are one unit here.
    let related = |a: &[String], b: &[String]| a.starts_with(b) || b.starts_with(a);
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (m, path) in &mods {
        let to: BTreeSet<_> = references(&code(path), m, &known)
            .into_iter()
            .filter(|r| !related(m, r))
            .collect();
        edges.insert(m.clone(), to);
    }
    // Depth-first search; every back edge closes a circle, and all of
    // them are reported at once.
    fn visit(
        m: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, u8>,
        stack: &mut Vec<Vec<String>>,
        circles: &mut Vec<String>,
    ) {
        match state.get(m) {
            Some(2) => return,
            Some(1) => {
                let start = stack.iter().position(|s| s == m).unwrap();
                let mut cycle: Vec<String> = stack[start..].iter().map(|s| s.join("::")).collect();
                cycle.push(m.join("::"));
                circles.push(cycle.join(" -> "));
                return;
            }
            _ => {}
        }
        state.insert(m.clone(), 1);
        stack.push(m.clone());
        for n in edges.get(m).into_iter().flatten() {
            visit(n, edges, state, stack, circles);
        }
        stack.pop();
        state.insert(m.clone(), 2);
    }
    let (mut state, mut circles) = (BTreeMap::new(), Vec::new());
    for m in edges.keys() {
        visit(m, &edges, &mut state, &mut Vec::new(), &mut circles);
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_pure_floor_names_no_redis_type() {
    for (m, path) in modules().iter().filter(|(m, _)| m[0] == "model") {
        let code = code(path);
        for word in ["redis::", "use redis", "Conn", "RedisError"] {
            assert!(
                !code.contains(word),
                "{} names `{word}`: the model floor must not touch Redis",
                m.join("::")
            );
        }
    }
}

#[test]
fn the_layout_section_draws_the_tree() {
    for (root, floors) in trees() {
        the_layout_section_draws(&root, floors);
    }
}

fn the_layout_section_draws(root: &Path, floors: &[&str]) {
    let lib = std::fs::read_to_string(root.join("lib.rs")).unwrap();
    let start = lib.find("# Layout").expect("a Layout section in lib.rs");
    let layout = &lib[start..];
    let end = layout.find("\npub mod").unwrap_or(layout.len());
    let layout = &layout[..end];
    let mut missing = Vec::new();
    for (m, path) in modules_in(root, floors) {
        if m.len() == 1 {
            continue; // the floor folder itself
        }
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let name = if file == "mod.rs" {
            format!("{}/", m.last().unwrap())
        } else {
            file
        };
        // A folder's own files may be drawn as the folder.
        let parent_drawn = m.len() > 2 && layout.contains(&format!("{}/", m[m.len() - 2]));
        if !layout.contains(&name) && !parent_drawn {
            missing.push(m.join("::"));
        }
    }
    assert!(
        missing.is_empty(),
        "not drawn in lib.rs' Layout: {missing:?}"
    );
    // And every file name drawn exists.
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let names: BTreeSet<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for word in layout.split(|c: char| c.is_whitespace() || "(),`".contains(c)) {
        if word.ends_with(".rs") && !word.contains(['*', '/']) {
            assert!(
                names.contains(word),
                "lib.rs draws {word}, which is not in the tree"
            );
        }
    }
}

#[test]
fn no_file_has_two_jobs() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    rust_files(&lab(), &mut files);
    let mut big = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let lines = text
            .split("#[cfg(test)]")
            .next()
            .unwrap_or("")
            .lines()
            .count();
        if lines > MAX_CODE_LINES {
            big.push(format!("{} ({lines} lines)", f.display()));
        }
    }
    assert!(
        big.is_empty(),
        "files over {MAX_CODE_LINES} lines of code: {big:?}"
    );
}
