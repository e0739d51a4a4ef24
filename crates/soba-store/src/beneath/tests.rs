use super::*;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, symlink};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A root folder and a sibling folder outside it holding `secret.txt`.
struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(root.join("sub/file.txt"), "inside\n").unwrap();
    std::fs::write(outside.join("secret.txt"), "secret\n").unwrap();
    std::fs::write(outside.join("file.txt"), "outside\n").unwrap();
    Fixture {
        _dir: dir,
        root,
        outside,
    }
}

/// Both resolutions: `openat2`, and the walk for kernels without it.
fn both(root: &Path) -> [Beneath; 2] {
    [
        Beneath::open(root).unwrap(),
        Beneath::open_walking(root).unwrap(),
    ]
}

fn read(beneath: &Beneath, path: &str, links: Links) -> Result<String, BeneathError> {
    let (mut file, _) = beneath.open_regular(Path::new(path), links)?;
    let mut text = String::new();
    file.read_to_string(&mut text).unwrap();
    Ok(text)
}

#[test]
fn reads_files_and_follows_links_that_stay_beneath() {
    let fx = fixture();
    symlink("sub", fx.root.join("alias")).unwrap();
    symlink("../sub/file.txt", fx.root.join("sub/up_and_back")).unwrap();
    symlink("sub/file.txt", fx.root.join("file_link")).unwrap();
    for beneath in both(&fx.root) {
        for path in [
            "sub/file.txt",
            "alias/file.txt",
            "sub/up_and_back",
            "file_link",
            "./sub/../sub/file.txt",
        ] {
            assert_eq!(
                read(&beneath, path, Links::FollowBeneath).unwrap(),
                "inside\n",
                "{path}"
            );
        }
        assert!(matches!(
            read(&beneath, "alias/file.txt", Links::Refuse),
            Err(BeneathError::Io { .. })
        ));
        assert!(
            read(&beneath, "missing.txt", Links::FollowBeneath)
                .unwrap_err()
                .is_not_found()
        );
    }
}

#[test]
fn links_and_dots_out_of_the_root_are_escapes() {
    let fx = fixture();
    symlink(&fx.outside, fx.root.join("out_abs")).unwrap();
    symlink("../outside", fx.root.join("out_rel")).unwrap();
    symlink(fx.root.join("sub"), fx.root.join("in_abs")).unwrap();
    for beneath in both(&fx.root) {
        for path in [
            "out_abs/secret.txt",
            "out_rel/secret.txt",
            "../outside/secret.txt",
            "sub/../../outside/secret.txt",
            // Absolute targets are refused even when they point inside, as
            // RESOLVE_BENEATH refuses them.
            "in_abs/file.txt",
        ] {
            let error = read(&beneath, path, Links::FollowBeneath).unwrap_err();
            assert!(
                matches!(&error, BeneathError::Escape { path: shown, .. } if shown == Path::new(path)),
                "{path}: {error:?}"
            );
        }
        assert!(matches!(
            beneath.open_regular(Path::new("/etc/passwd"), Links::FollowBeneath),
            Err(BeneathError::NotRelative { .. })
        ));
    }
}

#[test]
fn special_files_are_refused_without_blocking() {
    let fx = fixture();
    let status = std::process::Command::new("mkfifo")
        .arg(fx.root.join("fifo"))
        .status()
        .unwrap();
    assert!(status.success());
    let _socket = std::os::unix::net::UnixListener::bind(fx.root.join("socket")).unwrap();
    for beneath in both(&fx.root) {
        for (path, kind) in [
            ("fifo", FileKind::Fifo),
            ("sub", FileKind::Directory),
            (".", FileKind::Directory),
        ] {
            match beneath.open_regular(Path::new(path), Links::FollowBeneath) {
                Err(BeneathError::NotRegular { kind: found, .. }) => assert_eq!(found, kind),
                other => panic!("{path}: {other:?}"),
            }
        }
        assert!(matches!(
            beneath.open_regular(Path::new("socket"), Links::FollowBeneath),
            Err(BeneathError::NotRegular {
                kind: FileKind::Socket,
                ..
            })
        ));
        let meta = beneath
            .metadata(Path::new("socket"), Links::Refuse)
            .unwrap()
            .unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()));
    }
}

#[test]
fn metadata_describes_links_themselves_when_refusing() {
    let fx = fixture();
    symlink(&fx.outside, fx.root.join("out")).unwrap();
    for beneath in both(&fx.root) {
        let link = beneath
            .metadata(Path::new("out"), Links::Refuse)
            .unwrap()
            .unwrap();
        assert!(link.file_type().is_symlink());
        assert!(matches!(
            beneath.metadata(Path::new("out"), Links::FollowBeneath),
            Err(BeneathError::Escape { .. })
        ));
        assert!(
            beneath
                .metadata(Path::new("none"), Links::Refuse)
                .unwrap()
                .is_none()
        );
    }
}

#[test]
fn replace_creates_overwrites_and_keeps_permissions() {
    let fx = fixture();
    for (n, beneath) in both(&fx.root).into_iter().enumerate() {
        let name = format!("sub/new{n}.txt");
        assert_eq!(
            beneath.replace(Path::new(&name), b"one").unwrap(),
            Replaced::Created
        );
        std::fs::set_permissions(fx.root.join(&name), std::fs::Permissions::from_mode(0o750))
            .unwrap();
        assert_eq!(
            beneath.replace(Path::new(&name), b"two").unwrap(),
            Replaced::Overwrote
        );
        assert_eq!(std::fs::read_to_string(fx.root.join(&name)).unwrap(), "two");
        let meta = std::fs::metadata(fx.root.join(&name)).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o750);
        assert!(matches!(
            beneath.replace(Path::new("sub"), b"x"),
            Err(BeneathError::NotRegular {
                kind: FileKind::Directory,
                ..
            })
        ));
    }
    // No temporary file is left behind.
    let mut names: Vec<String> = std::fs::read_dir(fx.root.join("sub"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["file.txt", "new0.txt", "new1.txt"]);
}

#[test]
fn replace_never_writes_through_links() {
    let fx = fixture();
    std::fs::hard_link(fx.outside.join("secret.txt"), fx.root.join("hard.txt")).unwrap();
    symlink(fx.outside.join("secret.txt"), fx.root.join("soft.txt")).unwrap();
    symlink(&fx.outside, fx.root.join("out")).unwrap();
    for beneath in both(&fx.root) {
        beneath.replace(Path::new("hard.txt"), b"new").unwrap();
        // A link as the last name is refused, never followed (one planted
        // after the check is replaced by the rename).
        assert!(matches!(
            beneath.replace(Path::new("soft.txt"), b"new"),
            Err(BeneathError::NotRegular { .. })
        ));
        assert!(matches!(
            beneath.replace(Path::new("out/planted.txt"), b"new"),
            Err(BeneathError::Escape { .. })
        ));
        assert!(matches!(
            beneath.create_dir_all(Path::new("out/made")),
            Err(BeneathError::Escape { .. })
        ));
    }
    assert_eq!(
        std::fs::read_to_string(fx.outside.join("secret.txt")).unwrap(),
        "secret\n"
    );
    let mut outside: Vec<String> = std::fs::read_dir(&fx.outside)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    outside.sort();
    assert_eq!(outside, ["file.txt", "secret.txt"]);
}

#[test]
fn create_dir_all_makes_nested_folders() {
    let fx = fixture();
    for (n, beneath) in both(&fx.root).into_iter().enumerate() {
        let path = format!("a{n}/b/c");
        beneath.create_dir_all(Path::new(&path)).unwrap();
        beneath.create_dir_all(Path::new(&path)).unwrap();
        assert!(fx.root.join(&path).is_dir());
    }
}

/// Swaps `root/sub` between the real folder and a symlink to the outside
/// folder until stopped; returns the number of swaps.
fn swapper(root: &Path, outside: &Path, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let sub = root.join("sub");
    let parked = root.join("sub.real");
    let link = root.join("sub.link");
    symlink(outside, &link).unwrap();
    std::thread::spawn(move || {
        let mut n_swaps = 0u64;
        while !stop.load(Ordering::Relaxed) {
            std::fs::rename(&sub, &parked).unwrap();
            std::fs::rename(&link, &sub).unwrap();
            std::fs::rename(&sub, &link).unwrap();
            std::fs::rename(&parked, &sub).unwrap();
            n_swaps += 2;
        }
        n_swaps
    })
}

#[test]
fn a_folder_swapped_for_a_link_never_leads_out() {
    for walking in [false, true] {
        let fx = fixture();
        let beneath = if walking {
            Beneath::open_walking(&fx.root).unwrap()
        } else {
            Beneath::open(&fx.root).unwrap()
        };
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = swapper(&fx.root, &fx.outside, stop.clone());
        let mut n_inside = 0;
        for _ in 0..2_000 {
            if let Ok(text) = read(&beneath, "sub/file.txt", Links::FollowBeneath) {
                assert_eq!(text, "inside\n", "walking: {walking}");
                n_inside += 1;
            }
            let _ = beneath.replace(Path::new("sub/written.txt"), b"w");
        }
        stop.store(true, Ordering::Relaxed);
        let n_swaps = swaps.join().unwrap();
        // Under load every read may land while the link is in place (a CI
        // run saw 0 of 2,000): what must hold is that none led out.
        assert!(n_swaps > 0, "{n_swaps} swaps, {n_inside} reads");
        assert!(!fx.outside.join("written.txt").exists());
    }
}
