//! Fails when a file in tests/it is not declared as a module of main.rs
//! (an undeclared file would silently never run).

#[test]
fn every_test_file_is_declared() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let main = std::fs::read_to_string(dir.join("main.rs")).unwrap();
    let mut undeclared = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|ext| ext == "rs")
            && stem != "main"
            && !main.contains(&format!("mod {stem};"))
        {
            undeclared.push(stem.to_owned());
        }
    }
    assert!(
        undeclared.is_empty(),
        "undeclared test files: {undeclared:?}"
    );
}
