use super::*;

#[test]
fn inputs_are_regular_files_of_bounded_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let small = dir.path().join("small");
    std::fs::write(&small, "abc").expect("write");
    assert_eq!(read_input(&small, 3, "a file").expect("read"), "abc");
    let error = read_input(&small, 2, "a file").expect_err("too big");
    assert!(
        error
            .to_string()
            .contains("3 bytes, more than the 2 a file may have"),
        "{error}"
    );
    for device in ["/dev/zero", "/dev/null"] {
        let error = read_input(Path::new(device), 1 << 20, "a file").expect_err("a device");
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput, "{device}");
    }
    assert!(read_input(dir.path(), 1 << 20, "a file").is_err());
}

#[test]
fn a_stream_that_cannot_take_the_report_names_its_path() {
    let full = ReportTarget::Stream(PathBuf::from("/dev/full"));
    let error = full.write(b"{}").expect_err("/dev/full takes nothing");
    assert_eq!(error.kind(), io::ErrorKind::StorageFull);
    assert!(error.to_string().starts_with("/dev/full: "), "{error}");
}

#[test]
fn a_file_system_with_room_is_not_full() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(!no_space_left(dir.path()));
    // Nothing to tell: not full.
    assert!(!no_space_left(Path::new("/proc/self")));
    assert!(!no_space_left(Path::new("/no/such/folder")));
}

#[test]
fn a_tree_arrives_whole_without_its_links() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (from, to) = (dir.path().join("from"), dir.path().join("to"));
    std::fs::create_dir_all(from.join("sub")).expect("mkdir");
    std::fs::write(from.join("stdout.log"), "out\n").expect("write");
    std::fs::write(from.join("sub/timeline.json"), "{}").expect("write");
    std::os::unix::fs::symlink("/etc/passwd", from.join("link")).expect("symlink");
    // What was there before is replaced, not added to.
    std::fs::create_dir_all(&to).expect("mkdir");
    std::fs::write(to.join("stale.log"), "old").expect("write");
    assert_eq!(link_or_copy_tree(&from, &to).expect("copied"), 2);
    assert_eq!(
        std::fs::read_to_string(to.join("stdout.log"))
            .ok()
            .as_deref(),
        Some("out\n")
    );
    assert!(to.join("sub/timeline.json").is_file());
    assert!(!to.join("link").exists() && !to.join("stale.log").exists());
    let missing = link_or_copy_tree(&dir.path().join("none"), &to).expect_err("missing");
    assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    // A link to a folder is not followed either.
    std::os::unix::fs::symlink(&from, dir.path().join("via")).expect("symlink");
    assert!(link_or_copy_tree(&dir.path().join("via"), &to).is_err());
}

#[test]
fn every_failure_is_named_and_one_keeps_its_os_error() {
    assert!(WriteFailures::default().into_result().is_ok());
    let mut one = WriteFailures::default();
    one.note(Ok(()));
    one.note(Err(io::Error::from_raw_os_error(libc::ENOSPC)));
    let error = one.into_result().expect_err("one failure");
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC));
    let mut two = WriteFailures::default();
    two.note(Err(with_path(
        io::Error::from_raw_os_error(libc::ENOSPC),
        Path::new("/a"),
    )));
    two.note(Err(with_path(
        io::Error::from_raw_os_error(libc::EACCES),
        Path::new("/b"),
    )));
    let error = two.into_result().expect_err("two failures");
    assert_eq!(error.kind(), io::ErrorKind::StorageFull);
    let text = error.to_string();
    assert!(
        text.starts_with("/a: ") && text.contains("; /b: "),
        "{text}"
    );
}
