//! The layers depend only downward: platform ← algorithm ← framework ←
//! adapter ← fused ← {ffi, tools}. An upward or sideways dependency (in any
//! dependency table, dev and build included) fails this test.

use std::collections::BTreeMap;
use std::process::Command;

/// Each workspace crate and the workspace crates it may depend on.
fn allowed() -> BTreeMap<&'static str, &'static [&'static str]> {
    BTreeMap::from([
        ("hccl-platform", &[][..]),
        ("hccl-algorithm", &["hccl-platform"][..]),
        ("hccl-framework", &["hccl-algorithm", "hccl-platform"][..]),
        (
            "hccl-adapter",
            &["hccl-framework", "hccl-algorithm", "hccl-platform"][..],
        ),
        // the fused ops: a layer above the collectives
        ("hccl-fused", &["hccl-adapter", "hccl-platform"][..]),
        ("hccl-ffi", &["hccl-adapter", "hccl-fused"][..]),
        (
            "hccl-tools",
            &["hccl-adapter", "hccl-algorithm", "hccl-fused"][..],
        ),
        // integration tests may use every layer
        (
            "hccl-tests",
            &[
                "hccl-platform",
                "hccl-algorithm",
                "hccl-framework",
                "hccl-adapter",
                "hccl-fused",
                "hccl-tools",
            ][..],
        ),
    ])
}

/// Every (crate, workspace dependency) pair that breaks the layer map.
fn violations(meta: &serde_json::Value) -> Vec<String> {
    let allowed = allowed();
    let packages = meta["packages"].as_array().unwrap();
    let names: Vec<&str> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let mut bad = Vec::new();
    for p in packages {
        let name = p["name"].as_str().unwrap();
        let Some(ok) = allowed.get(name) else {
            bad.push(format!(
                "workspace crate {name} is not in the layer map of this test"
            ));
            continue;
        };
        for d in p["dependencies"].as_array().unwrap() {
            let dep = d["name"].as_str().unwrap();
            if names.contains(&dep) && !ok.contains(&dep) {
                bad.push(format!(
                    "{name} depends on {dep}: dependencies must point down the layers only"
                ));
            }
        }
    }
    bad
}

#[test]
fn layers_depend_only_downward() {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(meta["packages"].as_array().unwrap().len(), allowed().len());
    let bad = violations(&meta);
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn an_upward_or_sideways_dependency_is_caught() {
    let pkg = |name: &str, deps: &[&str]| serde_json::json!({"name": name, "dependencies": deps.iter().map(|d| serde_json::json!({"name": d})).collect::<Vec<_>>()});
    let meta = serde_json::json!({"packages": [
        pkg("hccl-platform", &["hccl-algorithm"]),   // upward
        pkg("hccl-algorithm", &["hccl-platform"]),
        pkg("hccl-ffi", &["hccl-adapter", "hccl-tools"]), // sideways
        pkg("hccl-adapter", &[]),
        pkg("hccl-tools", &["thiserror"]),           // external deps are fine
    ]});
    let bad = violations(&meta);
    assert_eq!(bad.len(), 2, "{bad:#?}");
    assert!(bad[0].contains("hccl-platform depends on hccl-algorithm"));
    assert!(bad[1].contains("hccl-ffi depends on hccl-tools"));
}
