//! The C test (`tests/c/capi_test.c`) and the C example (`examples/hello.c`), compiled with the
//! machine's `cc` against this build's `libaspace_capi.a` and run: `cargo test` covers the C
//! ABI as C sees it. Without a `cc` on the PATH the test says so and passes (`.ci/run` builds
//! the same programs and requires one).
//!
//! `cargo test` builds the library only as an rlib, so the test first asks cargo (the one that
//! runs it, `$CARGO`) for the static library in the same profile and target directory: the
//! dependencies are already built, only this crate's lib target compiles.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The directory cargo put this build's libraries in (`target/<profile>`): the test binary
/// runs from its `deps/` folder.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// Builds `libaspace_capi.a` in the profile and target directory this test runs from, once per
/// process (a second build while `cc` reads the first one's output may replace the file under
/// it).
fn build_static_library() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(build_static_library_now).clone()
}

fn build_static_library_now() -> PathBuf {
    let dir = profile_dir();
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_string(),
        Some(name) => name.to_string(),
        None => panic!("no profile directory above {}", dir.display()),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "-p",
            "aspace-capi",
            "--lib",
            "--profile",
            &profile,
        ])
        .env("CARGO_TARGET_DIR", dir.parent().expect("target/"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build -p aspace-capi --lib failed");
    let lib = dir.join("libaspace_capi.a");
    assert!(lib.exists(), "{} is missing after the build", lib.display());
    lib
}

fn have_cc() -> bool {
    Command::new("cc").arg("--version").output().is_ok()
}

/// Compiles `source` against the static library and runs it; returns its stdout.
fn build_and_run(source: &str, name: &str) -> String {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = build_static_library();
    let out = profile_dir().join(format!("c-{name}-{}", std::process::id()));
    let status = Command::new("cc")
        .args([
            "-O2",
            "-Wall",
            "-Wextra",
            "-std=c11",
            "-D_DEFAULT_SOURCE",
            "-I",
        ])
        .arg(crate_dir)
        .arg(crate_dir.join(source))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&out)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc {source} failed");
    let run = Command::new(&out).output().expect("run the C program");
    let _ = std::fs::remove_file(&out);
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{name} failed ({}):\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    stdout
}

#[test]
fn the_c_test_passes_against_the_static_library() {
    if !have_cc() {
        eprintln!("no cc on the PATH: the C test is not run here (.ci/run runs it)");
        return;
    }
    let out = build_and_run("tests/c/capi_test.c", "capi_test");
    let last = out.lines().last().unwrap_or_default();
    assert!(last.ends_with(" passed, 0 failed"), "{out}");
}

#[test]
fn the_c_example_runs_and_checks_its_results() {
    if !have_cc() {
        eprintln!("no cc on the PATH: the C example is not run here (.ci/run runs it)");
        return;
    }
    let out = build_and_run("examples/hello.c", "hello");
    assert!(out.contains("hello from a software MMU"), "{out}");
}

/// Sessions in C (`tests/c/sessions_test.c`).
#[test]
fn the_c_sessions_test_passes() {
    if !have_cc() {
        eprintln!("no cc on the PATH: the C sessions test is not run here (.ci/run runs it)");
        return;
    }
    let out = build_and_run("tests/c/sessions_test.c", "sessions_test");
    let last = out.lines().last().unwrap_or_default();
    assert!(last.ends_with(" passed, 0 failed"), "{out}");
}
