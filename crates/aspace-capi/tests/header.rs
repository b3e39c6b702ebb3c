//! `aspace.h` is what cbindgen makes of the sources: regenerated here and compared with the
//! checked-in copy, so a changed signature without a regenerated header fails the tests.
//! `ASPACE_BLESS=1 cargo test -p aspace-capi --test header` rewrites the header instead.

use std::path::Path;

#[test]
fn the_checked_in_header_is_cbindgens_output() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen parses the crate");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let fresh = String::from_utf8(fresh).expect("UTF-8");
    let path = dir.join("aspace.h");
    if std::env::var_os("ASPACE_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write aspace.h");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "aspace.h is out of date: run `ASPACE_BLESS=1 cargo test -p aspace-capi --test header` \
         and commit it"
    );
}
