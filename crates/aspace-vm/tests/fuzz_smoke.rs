//! A bounded run of the fuzz harness (tests/conformance/fuzz.rs) on seeded pseudo-random inputs,
//! so that `cargo test` exercises the code the cargo-fuzz targets in `fuzz/` run, on a machine
//! without cargo-fuzz or a nightly toolchain. Each test runs a fixed number of inputs from fixed
//! seeds (a second or two in release; fewer inputs in debug builds), and each input is the same
//! kind of byte string the fuzzer feeds: random lengths, random bytes.
//!
//! Not for: finding new bugs by running long (`cargo +nightly fuzz run ops` / `raw_args` in
//! `fuzz/`; see its README).

#![cfg(not(loom))]

#[allow(unused_macros)]
mod conformance;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Inputs per test.
fn inputs() -> u64 {
    if cfg!(debug_assertions) {
        40
    } else {
        2000
    }
}

/// Runs `check` on `inputs()` byte strings from fixed seeds, of up to `max_len` bytes, naming
/// the seed of a failing input so that it can be replayed.
fn run(max_len: usize, check: fn(&[u8])) {
    for seed in 0..inputs() {
        let mut rng = SmallRng::seed_from_u64(seed);
        let len = rng.gen_range(0..=max_len);
        let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        if let Err(e) = std::panic::catch_unwind(|| check(&data)) {
            eprintln!("input from seed {seed} ({len} bytes) failed: {data:02x?}");
            std::panic::resume_unwind(e);
        }
    }
}

#[test]
fn fuzz_ops_inputs_match_the_model() {
    run(1024, conformance::fuzz::ops_input);
}

#[test]
fn fuzz_raw_args_never_panic_and_keep_invariants() {
    run(1024, conformance::fuzz::raw_args_input);
}

#[test]
fn fuzz_empty_and_short_inputs_are_valid() {
    for len in 0..4 {
        conformance::fuzz::ops_input(&vec![0; len]);
        conformance::fuzz::raw_args_input(&vec![0xff; len]);
    }
}

/// Found by the `ops` fuzz target after 200,000 inputs (minimized): seven hinted 28-page
/// `mmap`s at the top of the space with `max_map_count` 1 land below the window and merge into
/// one 196-page region; `check_full` then reads every page, and a frame pool sized for the window
/// alone (192 frames) ran out, a false failure of the harness, not of the engine. `run_ops` now
/// sizes the pool for every page a sequence can map.
#[test]
fn regression_run_ops_has_frames_for_mappings_outside_the_window() {
    use conformance::{Layout, Len, MapKind, Op};
    let op = Op::Mmap {
        page: 21,
        skew: 0,
        len: Len::Pages(28, 0),
        prot: 0x13,
        kind: MapKind::Hint,
        ty: aspace_vm::MapFlags::PRIVATE.bits(),
        extra: aspace_vm::MapFlags::ANONYMOUS.bits(),
    };
    for &design in aspace_vm::Design::ALL {
        conformance::run_ops(design, Layout::TOP, 1, &vec![op.clone(); 7]);
    }
}

/// Found by the `ops` harness in its first second (then left out of its vocabulary until the
/// fix; see `OP_PROTS` in tests/conformance/fuzz.rs): `mprotect` with `PROT_GROWSUP` alone on a
/// mapped range. Linux's `do_mprotect_pkey` refuses it with `EINVAL` (it needs a `VM_GROWSUP`
/// region, which x86-64 never has; the model has this rule and `model_tests.rs` checks it
/// against the kernel); the engine ignores the bit and changes the protection (or, over a hole,
/// changes the prefix and gives `ENOMEM`).
#[test]
fn regression_lone_prot_growsup_on_a_mapped_range_is_einval() {
    use aspace_vm::{MapFlags, Prot};
    use conformance::model::{Model, P, PROT_GROWSUP};
    let growsup = Prot::from_bits_retain(Prot::READ.bits() | PROT_GROWSUP);
    for &design in aspace_vm::Design::ALL {
        let (min, max) = (0x1_0000, 0x1_0000 + 64 * P);
        let s = conformance::space(design, min, max, 16, 65_530);
        let mut h = s.attach().unwrap();
        let mut model = Model::new(min, max, 65_530);
        let (a, flags) = (0x2_0000, MapFlags::PRIVATE_ANONYMOUS | MapFlags::FIXED);
        assert_eq!(h.mmap(a, 2 * P, Prot::READ_WRITE, flags), Ok(a));
        assert_eq!(model.mmap(a, 2 * P, Prot::READ_WRITE, flags, a), Ok(a));
        let maps = s.maps();
        for len in [P, 4 * P] {
            let expected = model.mprotect(a, len, growsup);
            assert_eq!(expected, Err(libc::EINVAL), "the model (Linux)");
            assert_eq!(
                h.mprotect(a, len, growsup).map_err(|e| e.errno()),
                expected,
                "{design:?}: mprotect({a:#x}, {len:#x}, PROT_READ | PROT_GROWSUP)"
            );
            assert_eq!(
                s.maps(),
                maps,
                "{design:?}: a refused mprotect changed the regions"
            );
        }
    }
}
